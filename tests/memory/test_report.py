"""The single entry point (scwork.memory.plan), MemoryReport views and sweep."""

from __future__ import annotations

import pytest

import scwork
from scwork.errors import ConfigError
from scwork.memory import MemoryFitError, MemoryReport, plan, sweep
from scwork.sharding import FeatureSpec, TableSpec, plan_stacking

V5P4 = scwork.Topology.for_chip("v5p", num_chips=4)    # P = 16


def _tables(n=8, dim=64, **kw):
    kw = {"max_ids_per_partition": 512, "max_unique_ids_per_partition": 256, **kw}
    return [TableSpec(f"t{i}", 10**6, dim, **kw) for i in range(n)]


def _one_stack(tables):
    return [[t.name for t in tables]]


def test_plan_fits_and_summary_by_hand():
    r = plan(_tables(2, 8), V5P4, batch_size=1024, stacking=None)
    assert isinstance(r, MemoryReport) and r.fits and r.errors == [] and r.fixes == []
    s = r.summary()
    assert s["num_stacks"] == 2 and s["num_partitions"] == 16 and s["samples_per_sc"] == 64
    # per tile: gather 64 * 8 / 16 * 4 = 128, row pointers 64, unique 1024, rows 256 * 8 * 4 = 8192, CSR 6144
    assert s["max_spmem_bytes_per_tile"] == 128 + 64 + 1024 + 8192 + 6144
    assert s["tile_spmem_bytes"] == 524288
    assert s["peak_hbm_bytes"] == r.timeline.peak_bytes == r.hbm.peak_bytes
    assert s["tables_bytes_at_peak"] == 2 * (1000064 // 4 * 8 * 4)
    assert s["hbm_utilization"] == pytest.approx(s["peak_hbm_bytes"] / (95 * 2**30))


def test_report_text_and_html():
    r = plan(_tables(), V5P4, batch_size=65536, stacking=_one_stack(_tables()))
    assert "DOES NOT FIT" in repr(r)
    text = str(r)
    assert "Gather operand too large" in text and "SPMEM per tile" in text and "fix: stage_gather" in text
    page = r._repr_html_()
    assert "<table>" in page and "Gather operand too large" in page
    assert "fits" in repr(plan(_tables(1), V5P4, batch_size=1024))


def test_to_dataset_has_named_dims_and_units():
    r = plan(_tables(3, 16), V5P4, batch_size=4096, stacking=None, num_serialized_tables=2)
    ds = r.to_dataset()
    assert {"stack", "buffer", "table", "category", "chip", "event", "interval"} <= set(ds.dims)
    for name, var in ds.data_vars.items():
        assert "units" in var.attrs, name
    assert ds.attrs["fits"] == 1 and ds.attrs["spmem_fits"] == 1 and ds.attrs["hbm_fits"] == 1
    assert int(ds["usage_bytes"].max()) == r.hbm.peak_bytes
    assert ds["spmem_total_bytes"].dims == ("stack",)
    assert ds["interval_bytes"].dims == ("interval",)
    assert len(ds.attrs["assumptions"]) > 5
    assert ds.sizes["event"] == 2 * 2 + 2        # two serialized slots per SparseCore phase


def test_diagnoses_put_errors_first():
    t = TableSpec("narrow", 10**6, 1, max_ids_per_partition=44000, max_unique_ids_per_partition=8)
    r = plan([t], scwork.Topology.for_chip("v5p", num_chips=1), batch_size=16384)
    severities = [f.severity for f in r.diagnoses]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    assert severities[0] == "error" and "info" in severities


def test_raise_if_not_fits():
    ok = plan(_tables(1), V5P4, batch_size=1024)
    assert ok.raise_if_not_fits() is ok
    bad = plan(_tables(), V5P4, batch_size=65536, stacking=_one_stack(_tables()), hbm_bytes=2**20)
    with pytest.raises(MemoryFitError) as info:
        bad.raise_if_not_fits()
    err = info.value
    assert err.resource == "spmem+hbm" and err.report is bad
    assert err.stack == "t0_t1_t2_t3_t4_t5_t6_t7" and err.available_bytes == 524288
    assert {f.resource for f in err.findings} == {"spmem", "hbm"}


def test_replace_and_model_level_fixes():
    tables = _tables(optimizer="adam")
    r = plan(tables, V5P4, batch_size=65536, stacking=_one_stack(tables))
    assert [(f.parameter, f.value) for f in r.fixes] == [
        ("stage_gather_operands_in_hbm", True), ("batch_size", 56816), ("num_chips", 8)]
    for fix in r.fixes:
        assert r.replace(**fix.as_kwargs()).fits
    assert not r.replace(batch_size=56816 + 16).fits
    # 5 chips would fit too, but no v5p slice has 5 chips: the next real one is 2x2x2.
    assert r.replace(num_chips=5).fits
    assert r.replace(num_chips=8).knobs.num_partitions == 32


def test_model_forms():
    tables = _tables(2, 8)
    as_tables = plan(tables, V5P4, batch_size=1024, stacking=None)
    as_features = plan([FeatureSpec(t.name, t) for t in tables], V5P4, batch_size=1024, stacking=None)
    as_mapping = plan({t.name: t for t in tables}, V5P4, batch_size=1024, stacking=None)
    stacking = plan_stacking([FeatureSpec(t.name, t) for t in tables], V5P4, stacking=None)
    as_plan = plan(stacking, V5P4, batch_size=1024)
    peaks = {r.hbm.peak_bytes for r in (as_tables, as_features, as_mapping, as_plan)}
    assert len(peaks) == 1
    # a StackingPlan is re-planned (same stacks, same limits) for another chip count
    moved = plan(stacking, V5P4, batch_size=1024, num_chips=8)
    assert moved.knobs.num_partitions == 32 and moved.stacks == as_plan.stacks
    assert (moved.spmem.max_ids == as_plan.spmem.max_ids).all()
    with pytest.raises(ConfigError, match="only FeatureSpec"):
        plan([tables[0], FeatureSpec("f", tables[1])], V5P4, batch_size=1024)
    with pytest.raises(ConfigError, match="no tables"):
        plan([], V5P4, batch_size=1024)


def test_topology_without_chip_needs_chip():
    topo = scwork.Topology(2, 4)
    with pytest.raises(ConfigError, match="chip="):
        plan(_tables(1), topo, batch_size=1024)
    r = plan(_tables(1), topo, batch_size=1024, chip="v5p")
    assert r.knobs.tiles_per_sparsecore == 16
    with pytest.raises(ConfigError, match="SparseCores per chip"):
        plan(_tables(1), topo, batch_size=1024, chip="v6e")


def test_tpu7x_two_devices_per_chip():
    topo = scwork.Topology.for_chip("tpu7x", num_chips=2)       # 4 devices x 2 SparseCores, P = 8
    r = plan(_tables(1, 8), topo, batch_size=1024)
    assert r.knobs.num_partitions == 8 and r.knobs.samples_per_sc == 128
    # 4 SparseCores per chip hold HBM stacks: (2 * 8 + 1) * 256 * 8 * 4 per SparseCore
    assert int(r.hbm.fwd_stack[0]) == 4 * 17 * 256 * 8 * 4


def test_stack_consistency_errors():
    a = TableSpec("a", 100, 8, max_ids_per_partition=8)
    b = TableSpec("b", 100, 8, max_ids_per_partition=8)
    with pytest.raises(ConfigError, match="mixes dtypes"):
        plan([a, b], V5P4, batch_size=64, stacking=[["a", "b"]], dtype={"a": "bf16"})
    with pytest.raises(ConfigError, match="mixes optimizers"):
        plan([a, b], V5P4, batch_size=64, stacking=[["a", "b"]], optimizers={"a": "lamb"})
    r = plan([a, b], V5P4, batch_size=64, stacking=[["a", "b"]], optimizers={"a": "lamb", "b": "lamb"})
    assert [t.slot_count for t in r.model.tables] == [2, 2]


def test_unique_above_ids_is_flagged():
    r = plan([TableSpec("t", 100, 8)], V5P4, batch_size=64, limits=(16, 64))
    (w,) = [f for f in r.diagnoses if f.code == "unique_exceeds_ids"]
    assert w.fixes[0].value == {"t": (16, 16)}


def test_sweep_batch_size_and_limits():
    tables = _tables()
    ds = sweep(tables, V5P4, "batch_size", [16384, 32768, 65536], stacking=_one_stack(tables))
    assert ds["fits"].dims == ("batch_size",)
    assert ds["fits"].values.tolist() == [True, True, False]
    assert ds["max_spmem_bytes_per_tile"].attrs["units"] == "bytes"
    assert ds["bytes_at_peak"].dims == ("batch_size", "category")
    lim = sweep(tables, V5P4, "limits", [(64, 64), (44000, 8)], batch_size=1024, stacking=None)
    assert lim["spmem_fits"].dims == ("value",) and lim["spmem_fits"].values.tolist() == [True, False]
    ser = sweep(_tables(4, 128), scwork.Topology.for_chip("v5p", num_chips=64), "num_serialized_tables",
                range(0, 6), batch_size=4096, stacking=None)
    peaks = ser["peak_hbm_bytes"].values.tolist()
    assert peaks == sorted(peaks, reverse=True) and peaks[-1] < peaks[0]
    with pytest.raises(TypeError):
        sweep(tables, V5P4, "batch_size", [1024], batch_size=1024)
    with pytest.raises(ValueError):
        sweep(tables, V5P4, "batch_size", [])


def test_finding_and_fix_text():
    r = plan(_tables(), V5P4, batch_size=65536, stacking=_one_stack(_tables()))
    f = r.errors[0]
    text = str(f)
    assert text.startswith("[error] Gather operand too large") and "evidence:" in text and "fix: " in text
    assert "<b>error</b>" in f._repr_html_()
    qualitative = scwork.memory.Fix("stack_limits", None, "lower them")
    with pytest.raises(ValueError):
        qualitative.as_kwargs()
