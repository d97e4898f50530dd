"""SPMEM per tile (scwork.memory.spmem): hand-computed buffers, diagnoses, fixes, errors."""

from __future__ import annotations

import pytest

import scwork
from scwork.errors import ConfigError
from scwork.memory import MemoryFitError, check_spmem, plan, spmem_report, tile_buffers
from scwork.sharding import FeatureSpec, TableSpec

V5P1 = scwork.Topology.for_chip("v5p", num_chips=1)   # P = 4, 16 tiles of 512 KiB
V5P2 = scwork.Topology.for_chip("v5p", num_chips=2)   # P = 8


def _table(name="t", vocab=1000, dim=16, ids=64, uniq=32, **kw):
    return TableSpec(name, vocab, dim, max_ids_per_partition=ids, max_unique_ids_per_partition=uniq, **kw)


# --------------------------------------------------------------------------------------
# formulas by hand
# --------------------------------------------------------------------------------------
def test_tile_buffers_by_hand():
    # M = 100 -> 104, U = 30 -> 32 (multiples of 8); width 24 f32; 3 features x 200 samples; P = 12; 16 tiles
    b = tile_buffers(100, 30, 24, 600, num_partitions=12, num_tiles=16)
    assert b["gather_operand"] == 600 * 24 // 16 * 4        # 900 elements per tile * 4 B = 3600
    assert b["gather_operand"] == 3600
    assert b["row_pointers"] == 12 * 4                       # max(P, 8) * 4
    assert b["unique_ids"] == 32 * 4
    assert b["gathered_rows"] == 32 * 24 * 4                 # U * fw * itemsize = 3072
    assert b["embedding_ids"] == b["sample_ids"] == b["gains"] == 104 * 4
    assert sum(b.values()) == 3600 + 48 + 128 + 3072 + 3 * 416


def test_tile_buffers_rounding_and_small_p():
    # ceil(7 * 8 / 16) = 4 elements; P = 2 -> 8 row pointers; bf16 rows
    b = tile_buffers(1, 1, 8, 7, num_partitions=2, num_tiles=16, itemsize=2)
    assert b == {"gather_operand": 16, "row_pointers": 32, "unique_ids": 32, "gathered_rows": 8 * 8 * 2,
                 "embedding_ids": 32, "sample_ids": 32, "gains": 32}


def test_e3001_compiler_example_reproduced():
    # XLA E3001: max_nz_per_row = 141352, max_unique_nz_per_row = 8, feature_width = 8,
    # sample_count = 204800: fixed_size_allocation_bytes = 410880,
    # row_dependent_size_allocation_bytes = 1696224, total_spmem_size_bytes = 524288.
    b = tile_buffers(141352, 8, 8, 204800, num_partitions=256, num_tiles=16)
    row_dependent = b["embedding_ids"] + b["sample_ids"] + b["gains"]
    fixed = b["gather_operand"] + b["row_pointers"] + b["unique_ids"] + b["gathered_rows"]
    assert row_dependent == 1696224                       # exactly 12 B per id
    assert b["gather_operand"] == 204800 * 8 * 4 // 16    # 409600
    assert fixed - b["unique_ids"] == 410880              # within the 32-byte unique-id buffer
    assert fixed + row_dependent > 524288                 # it did not fit


def test_staging_removes_only_the_gather_operand():
    a = tile_buffers(256, 128, 16, 1024, num_partitions=16)
    b = tile_buffers(256, 128, 16, 1024, num_partitions=16, stage_gather_operands_in_hbm=True)
    assert b["gather_operand"] == 0
    assert {k: v for k, v in a.items() if k != "gather_operand"} == {k: v for k, v in b.items()
                                                                        if k != "gather_operand"}


@pytest.mark.parametrize("bad", [dict(max_ids_per_partition=0), dict(feature_width=-1), dict(num_tiles=0),
                                 dict(sample_count=-5), dict(itemsize=0), dict(max_unique_ids_per_partition=1.5)])
def test_tile_buffers_rejects_bad_sizes(bad):
    args = dict(max_ids_per_partition=8, max_unique_ids_per_partition=8, feature_width=8, sample_count=8)
    args.update(bad)
    with pytest.raises(ConfigError, match=next(iter(bad))):
        tile_buffers(**args, num_partitions=4)


def test_report_per_stack_by_hand():
    # Two tables in one stack: widths 16 and 8 -> stack width 16; two features; P = 8.
    a, b = _table("a", 1000, 12, ids=64, uniq=32), _table("b", 500, 4, ids=40, uniq=16)
    r = plan([a, b], V5P2, batch_size=256, stacking=[["a", "b"]])
    # stack limits: jax-tpu-embedding's default for a stack of several tables (256, 256),
    # not its tables' own; sample_count = 2 features * 256 / 8
    s = r.spmem
    assert s.stacks == ("a_b",)
    assert int(s.sample_count[0]) == 64 and int(s.feature_width[0]) == 16
    gather = 64 * 16 // 16 * 4
    expected = gather + 8 * 4 + 256 * 4 + 256 * 16 * 4 + 3 * 256 * 4
    assert int(s.total[0]) == expected == 20768
    ds = r.spmem_dataset()
    assert int(ds["spmem_buffer_bytes"].sel(stack="a_b", buffer="gather_operand")) == gather
    assert int(ds["spmem_fixed_bytes"].sel(stack="a_b")) == gather + 32 + 256 * 4 + 256 * 16 * 4
    assert int(ds["spmem_free_bytes"].sel(stack="a_b")) == 524288 - expected
    assert ds["spmem_total_bytes"].attrs["units"] == "bytes"
    assert list(ds["allocation_class"].values) == ["fixed"] * 4 + ["row_dependent"] * 3
    assert ds.attrs["fits"] == 1


def test_feature_stacking_counts_every_feature():
    t = _table("t", 1000, 8, ids=8, uniq=8)
    feats = [FeatureSpec("f0", t), FeatureSpec("f1", t), FeatureSpec("f2", t)]
    r = plan(feats, V5P1, batch_size=64)
    assert int(r.spmem.sample_count[0]) == 3 * 64 // 4


def test_bf16_pads_to_16_and_halves_rows():
    t = _table("t", 1000, 12, ids=8, uniq=8)
    f32 = plan([t], V5P1, batch_size=64).spmem
    bf16 = plan([t], V5P1, batch_size=64, dtype="bf16").spmem
    assert int(f32.feature_width[0]) == 16 and int(bf16.feature_width[0]) == 16
    assert int(bf16.buffers[0, 3]) == 8 * 16 * 2 and int(f32.buffers[0, 3]) == 8 * 16 * 4


# --------------------------------------------------------------------------------------
# limits from configured values, overrides, statistics and the closed-form estimate ([sc-guide] §6)
# --------------------------------------------------------------------------------------
def test_limit_sources_and_priority():
    t = _table("t", 1000, 8, ids=64, uniq=32)
    base = plan([t], V5P1, batch_size=64).spmem
    assert (int(base.max_ids[0]), int(base.max_unique[0]), base.limit_source[0]) == (64, 32, "configured")
    glob = plan([t], V5P1, batch_size=64, limits=(128, 16)).spmem
    assert (int(glob.max_ids[0]), int(glob.max_unique[0]), glob.limit_source[0]) == (128, 16, "override")
    both = plan([t], V5P1, batch_size=64, limits=(128, 16), stack_limits={"t": (256, 64)}).spmem
    assert (int(both.max_ids[0]), int(both.max_unique[0])) == (256, 64)


def test_missing_unique_limit_defaults_to_max_ids():
    t = TableSpec("t", 1000, 8, max_ids_per_partition=48)
    r = plan([t], V5P1, batch_size=64)
    assert (int(r.spmem.max_ids[0]), int(r.spmem.max_unique[0])) == (48, 48)
    assert "limits_from_max_ids" in [f.code for f in r.diagnoses]


def test_estimated_limits_follow_spec5():
    # n = 1024 / 4 = 256 samples per SC, 5 ids per sample: L = 1280, P = 4
    # peak = 256 + 256 + 2 * sqrt(320) = 547.78; 1.25 * peak = 684.7 -> 688; 0.625 * peak = 342.4 -> 344
    t = TableSpec("t", 10**5, 8)
    r = plan([t], V5P1, batch_size=1024, ids_per_sample=5)
    assert (int(r.spmem.max_ids[0]), int(r.spmem.max_unique[0])) == (688, 344)
    assert r.spmem.limit_source[0] == "estimate"
    assert scwork.memory.estimate_limits(256, 5, 4) == (688, 344)


def test_missing_limits_is_a_config_error_saying_how():
    with pytest.raises(ConfigError, match="stack_limits.*stats=.*ids_per_sample"):
        plan([TableSpec("t", 1000, 8)], V5P1, batch_size=64)


def test_observed_statistics_become_limits():
    from scwork.sharding import FeatureBatch, compute_stats

    t = TableSpec("t", 64, 8)
    feats = [FeatureSpec("f", t)]
    batch = FeatureBatch.from_ragged({"f": ([0, 4, 8, 4, 1, 2, 3, 5], [0, 3, 5, 7, 8])})
    topo = scwork.Topology.for_chip("v5p", num_chips=1)
    stats = compute_stats(batch, feats, topo)
    r = plan(feats, topo, batch_size=4, stats=stats)
    assert int(r.spmem.max_ids[0]) == int(stats["max_ids_per_partition"].max())
    assert int(r.spmem.max_unique[0]) == int(stats["max_unique_ids_per_partition"].max())
    assert r.spmem.limit_source[0] == "stats"
    with pytest.raises(ConfigError, match="stats has no stack"):
        plan([TableSpec("other", 64, 8)], topo, batch_size=4, stats=stats)


# --------------------------------------------------------------------------------------
# diagnoses and the fixes that make each failing model fit
# --------------------------------------------------------------------------------------
def _gather_case():
    # width 128, 1 chip: n = 65536 / 4 = 16384 samples per SC; gather 16384 * 128 / 16 * 4 = 524288 B
    return [_table("wide", 10**6, 128, ids=256, uniq=128)], V5P1, dict(batch_size=65536)


def _fixed_case():
    # max_ids 44000: 44000 * 12 = 528000 B of CSR row alone exceed the 524288 B of a tile
    return [_table("hot", 10**6, 8, ids=44000, uniq=8)], V5P1, dict(batch_size=16384)


def test_gather_operand_diagnosis_with_numbers():
    model, topo, kw = _gather_case()
    r = plan(model, topo, **kw)
    (f,) = r.errors
    assert f.code == "spmem_gather_operand_too_large" and f.resource == "spmem" and f.stack == "wide"
    assert f.message.startswith("Gather operand too large")
    assert "(16384 * 128) / 16" in f.message
    others = 8 * 4 + 128 * 4 + 128 * 128 * 4 + 3 * 256 * 4       # all but the gather: max(P, 8) row pointers
    assert f.evidence["gather_operand_bytes_per_tile"] == 524288
    assert f.evidence["fixed_size_allocation_bytes"] + f.evidence["row_dependent_size_allocation_bytes"] \
        == 524288 + others
    assert f"{524288 - others} of the tile's 524288 bytes" in f.message
    assert [x.parameter for x in f.fixes] == ["stage_gather_operands_in_hbm", "batch_size", "num_chips"]


def test_gather_fix_values_by_hand():
    model, topo, kw = _gather_case()
    f = plan(model, topo, **kw).errors[0]
    fixes = {x.parameter: x.value for x in f.fixes}
    others = 8 * 4 + 128 * 4 + 128 * 128 * 4 + 3 * 256 * 4
    # largest n with ceil(n * 128 / 16) * 4 <= 524288 - others
    n_max = (524288 - others) // 4 * 16 // 128
    assert fixes["batch_size"] == n_max * 4
    # 2 chips (8192 samples per SC) would fit, but the smallest v5p slice above 1 chip is 2x2x1
    assert fixes["num_chips"] == 4
    assert fixes["stage_gather_operands_in_hbm"] is True


def test_fixed_allocation_diagnosis():
    model, topo, kw = _fixed_case()
    r = plan(model, topo, **kw)
    (f,) = r.errors
    assert f.code == "spmem_fixed_allocations_do_not_fit"
    assert f.message.startswith("Fixed size allocations (") and "do not fit in TileSpmem (" in f.message
    assert f.evidence["row_dependent_size_allocation_bytes"] == 44000 * 12
    params = [x.parameter for x in f.fixes]
    assert "stack_limits" in params and "stage_gather_operands_in_hbm" not in params
    limits = dict((x.parameter, x.value) for x in f.fixes)["stack_limits"]["hot"]
    # largest multiple of 8: M * 12 <= 524288 - gather - row pointers - U buffers
    gather = 16384 // 4 * 8 // 16 * 4
    m_max = (524288 - gather - 32 - 8 * 4 - 8 * 8 * 4) // 12 // 8 * 8
    assert limits == (m_max, 8)


@pytest.mark.parametrize("case", [_gather_case, _fixed_case])
def test_every_fix_alone_makes_the_stack_fit(case):
    model, topo, kw = case()
    r = plan(model, topo, **kw)
    assert not r.spmem_fits
    fixes = [x for x in r.errors[0].fixes if x.value is not None]
    assert fixes
    for fix in fixes:
        fixed = plan(model, topo, **{**kw, **fix.as_kwargs()})
        assert fixed.spmem_fits, (fix, fixed)


def test_fix_batch_one_step_above_does_not_fit():
    model, topo, kw = _gather_case()
    batch = dict((x.parameter, x.value) for x in plan(model, topo, **kw).errors[0].fixes)["batch_size"]
    assert not plan(model, topo, batch_size=batch + 4).spmem_fits


def test_limits_fix_is_tight():
    model, topo, kw = _fixed_case()
    pair = dict((x.parameter, x.value) for x in plan(model, topo, **kw).errors[0].fixes)["stack_limits"]["hot"]
    assert not plan(model, topo, **kw, stack_limits={"hot": (pair[0] + 8, pair[1])}).spmem_fits


def test_check_spmem_raises_typed_error():
    model, topo, kw = _gather_case()
    with pytest.raises(MemoryFitError) as info:
        check_spmem(model, topo, **kw)
    err = info.value
    assert err.resource == "spmem" and err.stack == "wide"
    assert err.available_bytes == 524288 and err.required_bytes > 524288
    assert err.findings[0].code == "spmem_gather_operand_too_large"
    assert err.report.attrs["fits"] == 0
    assert "Gather operand too large" in str(err)
    ok = check_spmem(model, topo, **{**kw, "batch_size": 4096})
    assert ok.attrs["fits"] == 1


def test_spmem_report_lists_diagnoses_and_assumptions():
    model, topo, kw = _fixed_case()
    ds = spmem_report(model, topo, **kw)
    assert ds.attrs["fits"] == 0
    assert any("Fixed size allocations" in d for d in ds.attrs["diagnoses"])
    assert any("E3001" in a for a in ds.attrs["assumptions"])
    assert not bool(ds["spmem_fits"].sel(stack="hot"))


# --------------------------------------------------------------------------------------
# hardware parameters
# --------------------------------------------------------------------------------------
def test_v4_requires_tile_spmem_and_says_how():
    topo = scwork.Topology.for_chip("v4", num_chips=2)
    t = _table()
    with pytest.raises(ConfigError, match=r"tile_spmem_bytes=.*override\('v4', tile_spmem_bytes"):
        plan([t], topo, batch_size=256)
    r = plan([t], topo, batch_size=256, tile_spmem_bytes=256 * 1024)
    assert r.spmem.capacity == 256 * 1024
    chip = scwork.hardware.override("v4", tile_spmem_bytes=128 * 1024)
    assert plan([t], topo, batch_size=256, chip=chip).spmem.capacity == 128 * 1024
    # the HBM model alone does not need TileSpmem
    assert scwork.memory.hbm_report([t], topo, batch_size=256).attrs["fits"] == 1


def test_capacity_parameter_overrides_catalog():
    model, topo, kw = _gather_case()
    assert plan(model, topo, **kw, tile_spmem_bytes=4 * 2**20).spmem_fits


def test_v6e_has_256_kib_tiles():
    r = plan([_table()], scwork.Topology.for_chip("v6e", num_chips=1), batch_size=64)
    assert r.spmem.capacity == 256 * 1024


def test_chip_without_sparsecore_is_rejected():
    with pytest.raises(ConfigError, match="no SparseCore"):
        plan([_table()], scwork.Topology.for_chip("v5e", num_chips=4), batch_size=64)


@pytest.mark.parametrize("bad", [dict(tile_spmem_bytes=0), dict(tile_spmem_bytes=-1), dict(batch_size=0),
                                 dict(stage_gather_operands_in_hbm="yes")])
def test_invalid_inputs(bad):
    kw = dict(batch_size=64)
    kw.update(bad)
    with pytest.raises(ConfigError):
        plan([_table()], V5P1, **kw)


def test_batch_not_divisible_is_rounded_up_with_a_warning():
    r = plan([_table()], V5P1, batch_size=66)
    assert int(r.spmem.sample_count[0]) == 17
    (w,) = [f for f in r.diagnoses if f.code == "batch_not_divisible"]
    assert w.severity == "warning" and {x.value for x in w.fixes} == {64, 68}


def test_batch_fix_replans_automatic_stacking():
    # Estimated limits (the closed-form estimate of [sc-guide] §6) grow with the samples per SparseCore:
    # at 2**20 samples every table is
    # its own stack (8 * 262144 * 4 B of activations each > 2 MiB) and the CSR rows overflow. At the
    # smaller batch the fix proposes, automatic stacking merges the tables (more ids per stack), so the
    # search must re-plan the stacks to find a batch that really fits.
    tables = [TableSpec(f"t{i}", 10**6, 8) for i in range(4)]
    kw = dict(batch_size=2**20, ids_per_sample=50)
    r = plan(tables, V5P1, **kw)
    assert len(r.stacks) == 4 and not r.spmem_fits
    batch = dict((x.parameter, x.value) for x in r.errors[0].fixes)["batch_size"]
    after = plan(tables, V5P1, **{**kw, "batch_size": batch})
    assert after.spmem_fits and len(after.stacks) == 1
    assert not plan(tables, V5P1, **{**kw, "batch_size": batch + 4}).spmem_fits
    # without re-planning (stacks kept apart) a larger batch would have looked fine
    apart = plan(tables, V5P1, **{**kw, "batch_size": batch * 2, "stacking": None})
    assert apart.spmem_fits


def test_buffers_beyond_64_bit_byte_counts_are_refused():
    # width 2**25 with limits of 2**31 - 1: 2**31 distinct rows x 2**25 x 4 B = 2**58 bytes per
    # tile, past the 2**63 / 64 headroom that keeps every later sum in int64
    table = TableSpec("t", 8, 2**25, max_ids_per_partition=2**31 - 1, max_unique_ids_per_partition=2**31 - 1)
    with pytest.raises(ConfigError, match="beyond what scwork's 64-bit byte counts hold"):
        scwork.memory.plan([table], scwork.Topology.for_chip("v5p", num_chips=1), batch_size=64)
