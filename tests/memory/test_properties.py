"""Properties of the memory model (hypothesis): timeline consistency, monotonicity, fixes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.memory import CATEGORIES, plan
from scwork.sharding import OPTIMIZERS, TableSpec


@st.composite
def memory_inputs(draw, *, tight: bool = False, max_tables: int = 6):
    """``(tables, topology, kwargs)`` for :func:`scwork.memory.plan`.

    ``tight=True`` draws small TileSpmem and HBM capacities so that many inputs do
    not fit (to exercise diagnoses and fixes).
    """
    chip = draw(st.sampled_from(["v5p", "v6e", "tpu7x"]))
    chips = draw(st.integers(1, 8))
    topo = scwork.Topology.for_chip(chip, num_chips=chips)
    # Limits from the closed-form estimate ([sc-guide] §6), not configured ones.
    estimated = draw(st.booleans())
    tables = []
    for i in range(draw(st.integers(1, max_tables))):
        ids = draw(st.integers(1, 4096))
        limits = {} if estimated else dict(max_ids_per_partition=ids,
                                           max_unique_ids_per_partition=draw(st.integers(1, ids)))
        tables.append(TableSpec(
            f"t{i}", draw(st.integers(1, 10**6)), draw(st.sampled_from([1, 4, 8, 12, 16, 32, 64, 100, 128])),
            optimizer=draw(st.sampled_from(OPTIMIZERS)), **limits))
    kw = dict(
        batch_size=draw(st.integers(1, 4096)) * topo.num_partitions + draw(st.sampled_from([0, 0, 1])),
        stacking=draw(st.sampled_from([None, "auto"])),
        stage_gather_operands_in_hbm=draw(st.booleans()),
        maximum_parallel_iterations=draw(st.integers(1, 4)),
        dense_weights_bytes=draw(st.integers(0, 2**30)),
        tensorcore_activation_bytes=draw(st.integers(0, 2**28)),
        dtype=draw(st.sampled_from(["f32", "bf16"])),
        logical_replica_count=draw(st.one_of(st.none(), st.integers(1, 64))),
    )
    if estimated:
        kw["ids_per_sample"] = draw(st.floats(0.5, 40.0))
    if tight:
        kw["tile_spmem_bytes"] = draw(st.integers(16 * 1024, 512 * 1024))
        kw["hbm_bytes"] = draw(st.integers(2**20, 2**33))
        kw["headroom"] = draw(st.sampled_from([0.0, 0.1, 0.3]))
    return tables, topo, kw


# --------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------
@settings(max_examples=40)
@given(memory_inputs())
def test_peak_never_increases_with_serialization(inputs):
    tables, topo, kw = inputs
    T = len(plan(tables, topo, **kw).stacks)
    peaks = [plan(tables, topo, **kw, num_serialized_tables=n).hbm.peak_bytes for n in range(0, T + 2)]
    assert all(b <= a for a, b in zip(peaks, peaks[1:])), peaks


@settings(max_examples=40)
@given(memory_inputs(), st.integers(0, 7))
def test_usage_equals_sum_of_live_buffers(inputs, serial):
    tables, topo, kw = inputs
    tl = plan(tables, topo, **kw, num_serialized_tables=serial).timeline
    sizes = np.array([i.bytes for i in tl.intervals])
    for e in tl.events:
        live = np.array([i.live(e.index) for i in tl.intervals])
        assert tl.usage_bytes[e.index] == sizes[live].sum()
        for c, name in enumerate(CATEGORIES):
            assert tl.usage_by_category[e.index, c] == sum(
                i.bytes for i in tl.intervals if i.live(e.index) and i.category == name)
    assert (tl.usage_bytes >= 0).all() and (tl.usage_by_category >= 0).all()
    assert all(i.bytes > 0 and 0 <= i.start < i.end <= len(tl.events) for i in tl.intervals)
    assert all(0 <= i.waste_bytes <= i.bytes for i in tl.intervals)
    assert all(i.start_s <= i.end_s for i in tl.intervals)
    assert tl.peak_bytes == max(tl.usage_bytes) == sum(i.bytes for i in tl.live_at_peak())
    times = [e.start_s for e in tl.events]
    assert times == sorted(times)
    assert set(tl.usage_over_time(num=17)["usage_bytes"].values.tolist()) <= set(tl.usage_bytes.tolist())


@settings(max_examples=40)
@given(memory_inputs())
def test_smaller_batch_never_needs_more_memory(inputs):
    tables, topo, kw = inputs
    kw = {**kw, "stacking": None}          # the same stacks for both batches
    big = plan(tables, topo, **kw)
    small = plan(tables, topo, **{**kw, "batch_size": max(1, kw["batch_size"] // 2)})
    assert (small.spmem.total <= big.spmem.total).all()
    assert small.hbm.peak_bytes <= big.hbm.peak_bytes
    assert (big.spmem.total == big.spmem.fixed + big.spmem.row_dependent).all()


@settings(max_examples=40)
@given(memory_inputs())
def test_staging_trades_spmem_for_hbm(inputs):
    tables, topo, kw = inputs
    off = plan(tables, topo, **{**kw, "stage_gather_operands_in_hbm": False})
    on = plan(tables, topo, **{**kw, "stage_gather_operands_in_hbm": True})
    assert (on.spmem.total <= off.spmem.total).all()
    assert (off.spmem.total - on.spmem.total == off.spmem.buffers[:, 0]).all()
    assert on.hbm.peak_bytes >= off.hbm.peak_bytes


@settings(max_examples=40)
@given(memory_inputs(), st.integers(1, 6))
def test_prefetch_depth_adds_whole_steps(inputs, depth):
    tables, topo, kw = inputs
    one = plan(tables, topo, **{**kw, "maximum_parallel_iterations": 1}).hbm
    more = plan(tables, topo, **{**kw, "maximum_parallel_iterations": depth}).hbm
    assert (more.usage - one.usage == (depth - 1) * one.prefetch_per_step).all()


@settings(max_examples=30)
@given(memory_inputs(tight=True))
def test_every_fix_makes_the_model_fit(inputs):
    tables, topo, kw = inputs
    report = plan(tables, topo, **kw)
    if report.fits:
        assert report.fixes == [] and report.errors == []
        return
    assert report.errors
    for fix in report.fixes:
        assert plan(tables, topo, **{**kw, **fix.as_kwargs()}).fits, fix
    for finding in report.errors:
        for fix in finding.fixes:
            if fix.value is None:
                continue
            after = plan(tables, topo, **{**kw, **fix.as_kwargs()})
            if finding.resource == "hbm":
                assert after.hbm_fits, (finding.code, fix)
            elif finding.stack in after.stacks:
                assert after.spmem.fits[after.stacks.index(finding.stack)], (finding.code, fix)
            else:  # automatic stacking re-planned the stacks: every one fits
                assert after.spmem_fits, (finding.code, fix)
