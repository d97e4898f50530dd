"""Compact schedules equal the explicit ones, and large ones are refused, not crashed.

The builders of :mod:`scwork.collectives.algorithms` return compact schedules (a step
program writes the transfers of any step on demand). ``_explicit_reference.py`` is
a frozen copy of the explicit builders they replaced: every transfer as an array
entry. On random small networks (rings, lines, tori, meshes, grids, 1-2 cores per
chip) both must hold the same transfers per step and give the same cost Dataset,
conflicts, link use and per-phase summary.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.collectives import Network, algorithms, cost, phase_summary, ring_all_reduce
from scwork.collectives import schedule as schedule_module
from scwork.errors import ConfigError, ScworkError

_spec = importlib.util.spec_from_file_location("_explicit_reference",
                                               Path(__file__).with_name("_explicit_reference.py"))
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)

#: (builder name, keyword arguments) of every algorithm and its variants.
VARIANTS = [
    ("single_path", {}), ("pincer", {}), ("rotated_pincer", {}), ("improved_rotated_pincer", {}),
    ("all_to_all", {}),
    ("ring_all_reduce", {"bidirectional": False}), ("ring_all_reduce", {"bidirectional": True}),
    ("ring_reduce_scatter", {"bidirectional": True}), ("ring_all_gather", {"bidirectional": False}),
    ("multi_dim_all_reduce", {"colors": 1}), ("multi_dim_all_reduce", {"colors": 1, "algorithm": "pincer"}),
    ("multi_dim_all_reduce", {"colors": 1, "bidirectional": False}),
    ("multi_dim_all_reduce", {"colors": 1, "core_scheme": "on_chip_first"}),
    ("multi_color_all_reduce", {}), ("multi_color_all_reduce", {"algorithm": "pincer"}),
    ("mesh_loop_all_reduce", {}),
    ("reduce_scatter", {}), ("reduce_scatter", {"algorithm": "pincer", "colors": 2}),
    ("all_gather", {}), ("all_gather", {"algorithm": "pincer"}), ("all_gather", {"dims": (0,)}),
]


@st.composite
def networks(draw):
    kind = draw(st.sampled_from(["ring", "line", "torus", "mesh", "grid", "one_way"]))
    k = draw(st.sampled_from([1, 2]))
    if kind in ("ring", "line"):
        return Network.grid((draw(st.integers(2, 9)),), kind == "ring", cores_per_chip=k)
    if kind == "one_way":
        shape = tuple(draw(st.lists(st.integers(2, 5), min_size=1, max_size=2)))
        return Network.grid(shape, True, bidirectional=False)
    ndim = draw(st.integers(2, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    if np.prod(shape) * k < 2:
        shape = shape[:-1] + (2,)
    wrap = {"torus": (True,) * ndim, "mesh": (False,) * ndim}.get(
        kind, tuple(draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim))))
    return Network.grid(shape, wrap, cores_per_chip=k)


def _both(name, net, kwargs):
    """(explicit reference, compact) schedules, or None if the reference refuses (then so must the other)."""
    if name in ("multi_color_all_reduce", "reduce_scatter", "all_gather") and "colors" in kwargs:
        kwargs = {**kwargs, "colors": min(kwargs["colors"], net.ndim)}
    if "dims" in kwargs:
        kwargs = {**kwargs, "dims": tuple(d for d in kwargs["dims"] if d < net.ndim)}
    try:
        explicit = getattr(reference, name)(net, **kwargs)
    except ScworkError as err:
        with pytest.raises(type(err)):
            getattr(algorithms, name)(net, **kwargs)
        return None
    return explicit, getattr(algorithms, name)(net, **kwargs)


def _rows(s) -> np.ndarray:
    cols = np.stack([s.step, s.source, s.destination, s.start, s.stop, s.op.astype(np.int64),
                     s.color.astype(np.int64), s.phase.astype(np.int64), s.origin, s.link], axis=1)
    return cols[np.lexsort(cols.T[::-1])]


@settings(max_examples=60, deadline=None)
@given(net=networks(), variant=st.sampled_from(VARIANTS), nbytes=st.integers(0, 10**7),
       itemsize=st.sampled_from([1, 2, 4]), pipeline=st.sampled_from([1, 1, 3]))
def test_compact_schedule_equals_the_explicit_one(net, variant, nbytes, itemsize, pipeline):
    pair = _both(variant[0], net, variant[1])
    if pair is None:
        return
    explicit, compact = pair
    explicit, compact = explicit.with_size(nbytes, itemsize), compact.with_size(nbytes, itemsize)
    assert compact.compact
    # Counts are known without writing the transfers out.
    assert compact.num_steps == explicit.num_steps
    assert compact.num_transfers == explicit.num_transfers
    assert compact.transfers_per_step.tolist() == np.bincount(explicit.step, minlength=explicit.num_steps).tolist()
    for attr in ("num_chunks", "num_colors", "group_size", "collective", "name", "promises"):
        assert getattr(compact, attr) == getattr(explicit, attr), attr
    # The same costs, streamed (compact) and from explicit arrays.
    c_exp = cost(explicit, pipeline_chunks=pipeline, link_summary=True)
    c_cmp = cost(compact, pipeline_chunks=pipeline, link_summary=True)
    xr.testing.assert_allclose(c_exp, c_cmp, rtol=1e-12, atol=0)
    assert c_exp.attrs == c_cmp.attrs
    xr.testing.assert_allclose(cost(explicit, per_link=True), cost(compact, per_link=True), rtol=1e-12, atol=0)
    assert compact.conflicts() == explicit.conflicts()
    assert compact.links_used() == explicit.links_used()
    np.testing.assert_array_equal(compact.bytes_sent(), explicit.bytes_sent())
    xr.testing.assert_identical(phase_summary(compact), phase_summary(explicit))
    # Written out, the same transfers in every step (in any order within a step).
    np.testing.assert_array_equal(_rows(compact), _rows(explicit))
    assert not compact.compact
    if explicit.owners is not None:
        for a, b in zip(explicit.owners, compact.owners):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name, kwargs", VARIANTS)
def test_every_algorithm_on_a_few_fixed_networks(name, kwargs):
    for net in (Network.ring(8), Network.torus((4, 3)), Network.mesh((3, 2), cores_per_chip=2),
                Network.grid((4, 2, 3), (True, False, True))):
        pair = _both(name, net, kwargs)
        if pair is None:
            continue
        explicit, compact = pair
        s = compact.num_steps // 2
        assert sorted(compact[s]) == sorted(explicit[s])  # one step without writing all out
        np.testing.assert_array_equal(_rows(compact), _rows(explicit))


# -- large networks: streamed, or refused with a typed error ---------------------------------
def test_a_pod_sized_ring_is_costed_without_writing_its_transfers_out():
    net = Network.torus((16, 24, 24))  # TPU7x: 9,216 chips
    s = ring_all_reduce(net, bidirectional=False)
    assert s.num_transfers == 2 * 9215 * 9216
    c = cost(s, nbytes=2**20, link_summary=True)
    assert c.sizes["step"] == s.num_steps == 2 * 9215
    assert s.compact  # nothing was written out
    assert int(c.busy_links.max()) == 9216
    with pytest.raises(ConfigError, match=r"169,850,880 transfers.*MAX_EXPLICIT_TRANSFERS=16,777,216"):
        s.source
    with pytest.raises(ConfigError, match="link_summary=True"):
        cost(s, per_link=True)
    with pytest.raises(ConfigError, match="link_summary=True"):
        s.link_bytes()


def test_streaming_limit_and_absurd_sizes_are_typed_errors(monkeypatch):
    s = ring_all_reduce(Network.ring(64))
    with pytest.raises(ConfigError, match=r"MAX_NBYTES=1,125,899,906,842,624"):
        cost(s, nbytes=10**30)
    with pytest.raises(ConfigError, match="MAX_NBYTES"):
        s.with_size(2**51)
    monkeypatch.setattr(schedule_module, "MAX_STREAM_RECORDS", 1000)
    with pytest.raises(ConfigError, match=r"16,128 transfer records, more than the limit of 1,000"):
        cost(s)
    with pytest.raises(ConfigError, match="limit of 1,000"):
        s.conflicts()


def test_explicit_limit_refuses_execution_paths(monkeypatch):
    from scwork.collectives import execute

    monkeypatch.setattr(schedule_module, "MAX_EXPLICIT_TRANSFERS", 100)
    s = ring_all_reduce(Network.ring(16))
    with pytest.raises(ConfigError, match=r"960 transfers.*MAX_EXPLICIT_TRANSFERS=100"):
        execute(s, np.ones((16, 4)))
    assert float(cost(s).total_time) > 0  # streaming still works


def test_chunk_bounds_do_not_overflow_for_huge_vectors():
    from scwork.collectives import chunk_bounds

    b = chunk_bounds(2**60, 3)
    assert b.tolist() == [0, 2**60 // 3, 2 * 2**60 // 3, 2**60]
