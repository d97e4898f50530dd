"""The numba engine of ``execute`` against the numpy reference loop, and sampled verification.

Both engines apply, to every element, the same additions in the same order, so
their buffers are bitwise identical for every dtype (floats included).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.collectives import (
    Network,
    ScheduleError,
    all_gather,
    execute,
    frames,
    multi_color_all_reduce,
    multi_dim_all_reduce,
    pincer,
    reduce_scatter,
    ring_all_reduce,
    rotated_pincer,
)
from scwork.collectives.execute import _run, _run_reference, _Tracker
from scwork.collectives.schedule import Schedule
from scwork.errors import ConfigError, TopologyError

BUILDERS = {
    "ring": ring_all_reduce,
    "rotated": rotated_pincer,
    "pincer": pincer,
    "multi_color": multi_color_all_reduce,
    "dim_by_dim": lambda n: multi_dim_all_reduce(n, colors=1),
    "reduce_scatter": reduce_scatter,
    "all_gather": all_gather,
    "rows_only": lambda n: multi_dim_all_reduce(n, dims=(0,)) if n.ndim > 1 else ring_all_reduce(n),
}
# The module (``scwork.collectives.execute`` names the function on the package).
execute_module = importlib.import_module("scwork.collectives.execute")
DTYPES = [np.int8, np.int32, np.int64, np.uint16, np.float16, np.float32, np.float64, np.complex64]


@st.composite
def networks(draw):
    ndim = draw(st.integers(1, 2))
    shape = tuple(draw(st.lists(st.integers(2, 5), min_size=ndim, max_size=ndim)))
    wrap = tuple(draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim)))
    return Network.grid(shape, wrap, cores_per_chip=draw(st.sampled_from([1, 1, 2])))


def random_data(net, length, dtype, seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(-100, 100, size=(net.num_nodes, length))
    if np.dtype(dtype).kind == "u":
        values = np.abs(values)
    if np.dtype(dtype).kind in "fc":
        return (rng.standard_normal((net.num_nodes, length)) * 100).astype(dtype)
    return values.astype(dtype)


def build(which, net):
    try:
        return BUILDERS[which](net)
    except TopologyError:
        return None


def broken(s: Schedule, keep) -> Schedule:
    return Schedule(s.network, name="broken", collective=s.collective, num_chunks=s.num_chunks,
                    step=s.step[keep], source=s.source[keep], destination=s.destination[keep],
                    start=s.start[keep], stop=s.stop[keep], op=s.op[keep], color=s.color[keep],
                    phase=s.phase[keep], owners=s.owners)


@settings(max_examples=50, deadline=None)
@given(net=networks(), which=st.sampled_from(sorted(BUILDERS)), dtype=st.sampled_from(DTYPES),
       length=st.integers(0, 70), seed=st.integers(0, 2**32 - 1))
def test_numba_engine_equals_the_numpy_loop(net, which, dtype, length, seed):
    s = build(which, net)
    if s is None:
        return
    data = random_data(net, length, dtype, seed)
    fast = execute(s, data, engine="numba", verify="full")
    slow = execute(s, data, engine="numpy", verify="full")
    assert fast.buffers.dtype == slow.buffers.dtype
    assert np.array_equal(fast.buffers.view(np.uint8), slow.buffers.view(np.uint8))  # bitwise
    assert fast.max_error == slow.max_error and fast.consistent == slow.consistent


@settings(max_examples=40, deadline=None)
@given(net=networks(), which=st.sampled_from(["ring", "multi_color", "rotated", "reduce_scatter"]),
       data=st.data())
def test_both_engines_raise_the_same_error_for_a_broken_schedule(net, which, data):
    s = build(which, net)
    if s is None or s.num_transfers == 0:
        return
    keep = np.ones(s.num_transfers, dtype=bool)
    keep[data.draw(st.integers(0, s.num_transfers - 1))] = False
    bad = broken(s, keep)
    arr = np.arange(net.num_nodes * 2 * max(s.num_chunks, 1)).reshape(net.num_nodes, -1)
    errors = []
    for engine in ("numba", "numpy"):
        with pytest.raises(ScheduleError) as info:
            execute(bad, arr, engine=engine)
        errors.append((str(info.value), info.value.step, info.value.node, info.value.shard))
    assert errors[0] == errors[1]


@settings(max_examples=30, deadline=None)
@given(net=networks(), which=st.sampled_from(sorted(BUILDERS)), length=st.integers(1, 40),
       seed=st.integers(0, 2**32 - 1))
def test_run_and_run_reference_leave_the_same_buffers_and_bit_sets(net, which, length, seed):
    s = build(which, net)
    if s is None:
        return
    s = s.with_size(length * 4, 4)
    bounds = s.element_bounds(length)
    initial = random_data(net, length, np.float32, seed)
    trackers, buffers = [], []
    for engine in ("numba", "numpy"):
        tracker = _Tracker(s)
        work = np.empty_like(initial)
        _run(s, work, tracker, bounds, initial=initial, engine=engine)
        trackers.append(tracker)
        buffers.append(work)
    reference = initial.copy()
    _run_reference(s, reference, None, bounds)
    assert np.array_equal(buffers[0].view(np.uint32), buffers[1].view(np.uint32))
    assert np.array_equal(buffers[0].view(np.uint32), reference.view(np.uint32))
    assert np.array_equal(trackers[0].bits, trackers[1].bits)
    assert np.array_equal(trackers[0].last, trackers[1].last)


def test_frames_are_the_same_with_both_engines(monkeypatch):
    s = multi_color_all_reduce(Network.torus((3, 4)))
    want = frames(s)
    monkeypatch.setattr(execute_module, "_run", _numba_run)
    got = frames(s)
    assert np.array_equal(got.status.values, want.status.values)
    assert np.array_equal(got.contributions.values, want.contributions.values)
    assert np.array_equal(got["values"].values, want["values"].values)


def _numba_run(*args, **kwargs):
    kwargs["engine"] = "numba"
    return _run(*args, **kwargs)


# --------------------------------------------------------------------------------------
# Sampled verification.
# --------------------------------------------------------------------------------------
def test_sample_holds_every_group_representative_and_every_shard_edge():
    net = Network.torus((4, 4))
    s = multi_dim_all_reduce(net, dims=(0,))  # 4 independent groups
    data = random_data(net, 3000, np.float32, 1)
    run = execute(s, data, verify="sample", seed=5)
    assert run.verification == "sample"
    groups = run.group
    for g in np.unique(groups):
        assert np.flatnonzero(groups == g)[0] in run.verified_nodes
    bounds = run.schedule.element_bounds(3000)
    edges = np.r_[bounds[:-1], bounds[1:] - 1]
    assert np.isin(edges, run.verified_elements).all()
    assert len(run.verified_elements) >= execute_module.SAMPLE_ELEMENTS // 2  # random ones too
    assert run.reference.shape == (len(np.unique(groups)), len(run.verified_elements))
    assert np.allclose(run.reference, execute_module.reference_result(s, data)[
        np.unique(groups, return_index=True)[1]][:, run.verified_elements])
    again = execute(s, data, verify="sample", seed=5)
    assert np.array_equal(again.verified_nodes, run.verified_nodes)
    assert np.array_equal(again.verified_elements, run.verified_elements)
    other = execute(s, data, verify="sample", seed=6)
    assert not np.array_equal(other.verified_elements, run.verified_elements)


def test_auto_verifies_everything_on_small_runs_and_samples_large_ones(monkeypatch):
    net = Network.torus((4, 4))
    s = multi_color_all_reduce(net)
    small = execute(s, random_data(net, 100, np.int64, 0))
    assert small.verification == "full" and small.verified_elements is None
    assert small.reference.shape == (1, 100)
    monkeypatch.setattr(execute_module, "FULL_VERIFY_MAX_CELLS", 16 * 99)
    large = execute(s, random_data(net, 100, np.int64, 0))
    assert large.verification == "sample"
    assert np.array_equal(large.buffers, small.buffers)
    assert large.max_error == 0.0 and large.consistent


@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_sampled_verification_catches_a_dropped_reduce_scatter_transfer(engine):
    net = Network.torus((4, 4))
    s = multi_color_all_reduce(net)
    data = random_data(net, 4000, np.int64, 3)
    # The first combine: its contribution misses from one shard of every node in the end.
    victim = int(np.flatnonzero(s.op == 0)[0])
    keep = np.ones(s.num_transfers, dtype=bool)
    keep[victim] = False
    bad = broken(s, keep)
    with pytest.raises(ScheduleError) as tracked:
        execute(bad, data, verify="sample", engine=engine)
    assert tracked.value.node is not None and tracked.value.shard is not None
    assert tracked.value.step is not None and f"step {tracked.value.step}" in str(tracked.value)
    # Without the tracker the sampled values still show it, naming node and shard.
    with pytest.raises(ScheduleError) as sampled:
        execute(bad, data, verify="sample", track=False, engine=engine)
    assert "wrong value" in str(sampled.value)
    assert sampled.value.node is not None
    c0, c1 = int(s.start[victim]), int(s.stop[victim])
    assert c0 <= sampled.value.shard[0] < c1


@settings(max_examples=25, deadline=None)
@given(net=networks(), which=st.sampled_from(["ring", "multi_color", "rotated"]), data=st.data())
def test_sampled_run_with_tracker_catches_any_dropped_transfer(net, which, data):
    s = build(which, net)
    if s is None or s.num_transfers == 0:
        return
    victim = data.draw(st.integers(0, s.num_transfers - 1))
    keep = np.ones(s.num_transfers, dtype=bool)
    keep[victim] = False
    arr = np.ones((net.num_nodes, 3 * max(s.num_chunks, 1)), dtype=np.int64)
    with pytest.raises(ScheduleError) as info:
        execute(broken(s, keep), arr, verify="sample", engine="numba")
    assert info.value.node is not None and info.value.shard is not None


def test_bad_verify_and_engine_are_config_errors():
    s = ring_all_reduce(Network.ring(4))
    with pytest.raises(ConfigError, match="verify"):
        execute(s, np.ones((4, 4)), verify="some")
    with pytest.raises(ConfigError, match="engine"):
        execute(s, np.ones((4, 4)), engine="cuda")
