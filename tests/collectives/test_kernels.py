"""The collectives numba kernels equal their plain references.

Run again with NUMBA_DISABLE_JIT=1 by tests/test_nojit.py (the pure-Python fallback),
so every example here stays small.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.collectives import (
    Network,
    multi_color_all_reduce,
    reduce_scatter,
    ring_all_reduce,
    rotated_pincer,
)
from scwork.collectives._kernels import (
    apply_transfers,
    apply_transfers_reference,
    track_steps,
    track_steps_reference,
)
from scwork.collectives._simulate import hazards_reference
from scwork.collectives.execute import _hazards, _initial_bits
from scwork.testing import transfer_lists


@settings(max_examples=60, deadline=None)
@given(case=transfer_lists(), dtype=st.sampled_from([np.int64, np.float32, np.float64]),
       block=st.integers(1, 40), fused=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_apply_transfers_equals_its_reference(case, dtype, block, fused, seed):
    nodes, length, (step, source, destination, start, stop), combine = case
    initial = np.random.default_rng(seed).integers(-50, 50, size=(nodes, length)).astype(dtype)
    if dtype is not np.int64:
        initial = initial / np.asarray(7, dtype)  # inexact values: additions round
    hazard = hazards_reference(step, source, destination, start, stop)
    want = apply_transfers_reference(initial, step, source, destination, start, stop, combine)
    work = np.empty_like(initial) if fused else initial.copy()
    apply_transfers(initial, work, fused, step, source, destination, start, stop, combine, hazard, block)
    assert work.dtype == want.dtype
    assert np.array_equal(work.view(np.uint8), want.view(np.uint8))  # bitwise


@settings(max_examples=60, deadline=None)
@given(case=transfer_lists())
def test_execute_hazards_match_the_definition(case):
    _, length, (step, source, destination, start, stop), _ = case
    # _hazards reads only these columns of a schedule (chunk ranges here).
    s = SimpleNamespace(source=source, destination=destination, start=start, stop=stop, num_chunks=length)
    offsets = np.searchsorted(step, np.arange(6))
    got = np.concatenate([_hazards(s, slice(offsets[t], offsets[t + 1])) for t in range(5)])
    assert got.tolist() == hazards_reference(step, source, destination, start, stop).tolist()


def _schedules():
    return [ring_all_reduce(Network.ring(4)), rotated_pincer(Network.ring(5)),
            multi_color_all_reduce(Network.torus((2, 3))), reduce_scatter(Network.torus((2, 2)))]


@settings(max_examples=60, deadline=None)
@given(which=st.integers(0, 3), data=st.data())
def test_track_steps_equals_its_reference(which, data):
    s = _schedules()[which]
    keep = np.ones(s.num_transfers, dtype=bool)
    op = s.op.copy()
    source = s.source.copy()
    mutation = data.draw(st.sampled_from(["none", "drop", "flip", "source"]))
    victim = data.draw(st.integers(0, s.num_transfers - 1))
    if mutation == "drop":
        keep[victim] = False
    elif mutation == "flip":
        op[victim] = 1 - op[victim]
    elif mutation == "source":
        source[victim] = data.draw(st.integers(0, s.network.num_nodes - 1))
    step = s.step[keep]
    offsets = np.searchsorted(step, np.arange(s.num_steps + 1)).astype(np.int64)
    cols = (source[keep].astype(np.int64), s.destination[keep].astype(np.int64), s.start[keep].astype(np.int64),
            s.stop[keep].astype(np.int64), op[keep] == 0)
    bits0 = _initial_bits(s)
    last0 = np.full(bits0.shape[:2], -1, dtype=np.int64)
    begin = data.draw(st.integers(0, s.num_steps))
    # Both start from the reference's state at ``begin`` (if it got there).
    t0 = track_steps_reference(offsets, 0, begin, *cols, bits0, last0)
    begin = min(begin, t0)
    bits_k, last_k = bits0.copy(), last0.copy()
    got = track_steps(offsets, begin, s.num_steps, *cols, bits_k, last_k)
    want = track_steps_reference(offsets, begin, s.num_steps, *cols, bits0, last0)
    assert got == want
    assert np.array_equal(bits_k, bits0) and np.array_equal(last_k, last0)
    if mutation == "none":
        assert got == s.num_steps
