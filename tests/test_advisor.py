"""The advisor: every bottleneck of [sc-guide] §10 is found on a config crafted to have it, and only there."""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork.advisor import CHECKS, Advice, AdvisorThresholds, Finding, advise
from scwork.errors import ConfigError
from scwork.pipeline import StepModelParams, expected_stats, step_model
from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, compute_stats, plan_stacking

FAST_HOST = StepModelParams(host_threads=256)
V5P1 = scwork.Topology.for_chip("v5p", num_chips=1)
V5P4 = scwork.Topology.for_chip("v5p", num_chips=4)


def model(topo=V5P4, rate=20.0, width=64, batch=16384, params=FAST_HOST, hot=0.0, **kw):
    stats = expected_stats({"t": rate}, topo, batch_size=batch, hot_fraction=hot)
    return step_model(stats, widths={"t": width}, topology=topo, params=params, **kw)


def balanced_model(pipelining):
    # TensorCore time equal to the SparseCore + ICI time: pipelining gains close to 2x.
    base = model(tc_forward_s=0.0)
    busy = base.busy_per_step()
    e = busy["sc"] + busy["ici"]
    return model(tc_forward_s=e / 2, tc_backward_s=e / 2, pipelining=pipelining)


# -- host -----------------------------------------------------------------------------
def test_host_preprocessing_slow_fires_and_names_the_threads():
    m = model(params=StepModelParams(), tc_forward_s=1e-4)          # 1 thread at 47 M ids/s
    f = advise(model=m).get("host_preprocessing_slow")
    assert len(f) == 1
    f = f[0]
    # 4 chips x 4 SparseCores x 1024 samples x 20 ids = 327680 ids on one host / 47e6 ids/s.
    assert f.evidence["host_time_s"] == pytest.approx(327680 / 47e6)
    threads = f.evidence["threads_needed"]
    assert threads > 1 and f"{threads} threads" in f.fix
    assert f.gain_s == pytest.approx(m.step_time - m.replace(host_threads=threads).step_time)
    assert f.gain_s > 0.5 * m.step_time
    assert "host_threads" in f.flags


def test_host_fast_enough_is_not_flagged():
    assert not advise(model=model(tc_forward_s=1e-4)).get("host_preprocessing_slow")


# -- pipelining -------------------------------------------------------------------------
def test_pipelining_off_fires_with_gain_and_staleness():
    m = balanced_model(pipelining=False)
    f = advise(model=m).get("pipelining_off")[0]
    assert f.gain_s == pytest.approx(m.sequential_step_time - m.pipelined_step_time)
    assert f.gain_fraction > 0.4
    assert f.flags == ("tf_xla_disable_full_embedding_pipelining",)
    assert f.evidence["staleness_steps_if_on"] == 1 and "i+2" in f.fix


def test_pipelining_on_or_useless_is_not_flagged():
    assert not advise(model=balanced_model(pipelining=True)).get("pipelining_off")
    # Without TensorCore work there is nothing to overlap with.
    assert not advise(model=model(pipelining=False)).get("pipelining_off")


# -- limits -----------------------------------------------------------------------------
def ragged_batch(seed=0, batch=64, vocab=256, per=12):
    rng = np.random.default_rng(seed)
    return FeatureBatch.from_dense({"f": rng.integers(0, vocab, (batch, per))})


def test_limits_too_low_from_a_minibatch_plan():
    from scwork.sharding.minibatch import minibatch

    table = TableSpec("t", 256, 128, max_ids_per_partition=24, max_unique_ids_per_partition=24)
    plan = minibatch(ragged_batch(), [FeatureSpec("f", table)], V5P1, stacking=None, backend="numpy")
    assert int(plan.num_minibatches.sel(stack="t")) > 1
    m = step_model(plan, params=FAST_HOST.replace(sc_op_overhead_s=2e-5))
    f = advise(model=m, minibatch=plan).get("limits_too_low")[0]
    assert f.stack == "t" and f.evidence["num_minibatches"] == int(plan.num_minibatches.sel(stack="t"))
    assert f.gain_s is not None and f.gain_s > 0
    assert f.evidence["observed_max_ids_per_partition"] > 24
    assert "max_ids_per_partition" in f.flags


def test_a_stack_cut_by_the_batch_split_is_not_told_to_run_in_one_minibatch():
    from scwork.sharding.minibatch import minibatch

    rng = np.random.default_rng(1)
    batch = FeatureBatch.from_dense({"f": rng.integers(0, 256, (64, 12)), "g": rng.integers(0, 256, (64, 2))})
    tight = TableSpec("t", 256, 128, max_ids_per_partition=24, max_unique_ids_per_partition=24)
    roomy = TableSpec("u", 256, 128, max_ids_per_partition=512, max_unique_ids_per_partition=512)
    feats = [FeatureSpec("f", tight), FeatureSpec("g", roomy)]
    plan = minibatch(batch, feats, V5P1, stacking=None, backend="numpy")
    # u fits (no split of its own) but the batch's one split cuts it with t
    assert plan.assignment["stack_split_mask"].sel(stack="u") == 0
    assert int(plan.num_minibatches.sel(stack="u")) == int(plan.num_minibatches.sel(stack="t")) > 1
    m = step_model(plan, params=FAST_HOST.replace(sc_op_overhead_s=2e-5))
    advice = advise(model=m, minibatch=plan)
    found = advice.get("limits_too_low")
    assert [f.stack for f in found] == ["t"]
    assert not advice.get("minibatching_overhead")
    # t's limits raised, the batch has no split left: both stacks in one mini-batch
    from scwork.advisor._context import collapse
    both_one = m.replace(stats=collapse(plan.stats, limits=False), num_minibatches={"t": 1, "u": 1}, plan=plan.plan,
                         topology=m.topology)
    assert found[0].gain_s == pytest.approx(m.step_time - both_one.step_time)
    t_only = m.replace(stats=collapse(plan.stats, limits=False),
                       num_minibatches={"t": 1, "u": int(plan.num_minibatches.sel(stack="u"))}, plan=plan.plan,
                       topology=m.topology)
    assert found[0].gain_s > m.step_time - t_only.step_time
    # planned stack by stack, u is one mini-batch: nothing to say about it either
    alone = minibatch(batch, feats, V5P1, stacking=None, backend="numpy", split_scope="stack")
    assert int(alone.num_minibatches.sel(stack="u")) == 1


def test_limits_too_low_from_dropped_ids_without_a_model():
    table = TableSpec("t", 256, 16, max_ids_per_partition=8, max_unique_ids_per_partition=8)
    feats = [FeatureSpec("f", table)]
    stats = compute_stats(ragged_batch(), feats, V5P1, stacking=None, backend="numpy",
                          config=SparsecoreConfig(allow_id_dropping=True))
    assert int(stats["dropped_ids"].sum()) > 0
    f = advise(stats=stats).get("limits_too_low")[0]
    assert f.severity == "warning" and f.evidence["dropped_ids"] == int(stats["dropped_ids"].sum())
    assert 0 < f.evidence["dropped_share"] < 1
    assert "allow_id_dropping" in f.flags


def test_limits_that_fit_are_not_too_low():
    table = TableSpec("t", 256, 16, max_ids_per_partition=64, max_unique_ids_per_partition=64)
    stats = compute_stats(ragged_batch(), [FeatureSpec("f", table)], V5P1, stacking=None, backend="numpy")
    assert not advise(stats=stats).get("limits_too_low")


_LIMIT_NAMES = ("max_ids_per_partition", "max_unique_ids_per_partition")


def finding_problems(f: Finding, thresholds: AdvisorThresholds | None = None) -> list[str]:
    """Where a finding's message does not follow from its evidence ([] when it does)."""
    thresholds = thresholds or AdvisorThresholds()
    ev, problems = f.evidence, []
    if f.gain_s is not None and not f.gain_s > 0:
        problems.append(f"gain_s {f.gain_s} offered as a gain")
    if f.gain_bytes is not None and not f.gain_bytes > 0:
        problems.append(f"gain_bytes {f.gain_bytes} offered as a gain")
    for key, value in ev.items():
        if "gain" in key and value is not None and not value > 0:
            problems.append(f"evidence {key} = {value} is no gain")
    below = [n for n in _LIMIT_NAMES if ev.get(f"configured_{n}") is not None
             and ev.get(f"observed_{n}") is not None and ev[f"observed_{n}"] > ev[f"configured_{n}"]]
    if "too low" in f.title and f.id != "limits_too_low":
        problems.append("'too low' said by another check")
    if f.id == "limits_too_low":
        if not (ev["dropped_ids"] > 0 or below):
            problems.append("limits called too low without dropped ids or a configured limit below the observed")
        if sorted(ev.get("limits_below_observed", [])) != sorted(below):
            problems.append(f"limits_below_observed {ev.get('limits_below_observed')} != {below}")
        said = "(ids dropped)" if ev["dropped_ids"] > 0 else f"({ev['num_minibatches']} mini-batches)"
        if said not in f.title:
            problems.append(f"title {f.title!r} does not say {said!r}")
    if f.id == "minibatching_overhead":
        if below or ev["dropped_ids"]:
            problems.append("mini-batches that the limits explain reported as overhead")
        if ev["num_minibatches"] <= 1 or f"{ev['num_minibatches']} mini-batches" not in f.title:
            problems.append(f"title {f.title!r} vs num_minibatches {ev['num_minibatches']}")
        if ev["configured_max_ids_per_partition"] is None and ev["configured_max_unique_ids_per_partition"] is None \
                and "no limits are configured" not in f.fix:
            problems.append("fix does not say that no limits are configured")
    if f.id == "limits_too_high" and not any(
            ev[f"configured_{n}"] is not None and ev[f"configured_{n}"] > thresholds.limits_high_ratio
            * max(ev[f"observed_{n}"], 1) for n in _LIMIT_NAMES):
        problems.append("limits called too high without a configured limit above the threshold")
    if f.id == "pipelining_off" and not ev["sequential_step_s"] > ev["pipelined_step_s"]:
        problems.append("pipelining offered without a faster pipelined step")
    if f.id == "host_preprocessing_slow" and not ev["host_time_s"] > ev["busiest_device_resource_s"]:
        problems.append("host called slow but not slower than the device")
    return problems


def forced_minibatches(limit=None, **kw):
    """A sequential step model with 4 mini-batches per stack set by hand (as PipelineTimeline's control does)."""
    topo = V5P1
    stats = expected_stats({"t": 20.0}, topo, batch_size=16384)
    if limit is None:
        return step_model(stats, widths={"t": 64}, topology=topo, params=FAST_HOST, num_minibatches=4,
                          pipelining=False, **kw)
    table = TableSpec("t", 100_000, 64, max_ids_per_partition=limit, max_unique_ids_per_partition=limit)
    plan = plan_stacking([FeatureSpec("f", table)], topo, stacking=None)
    return step_model(stats, plan, params=FAST_HOST, num_minibatches=4, pipelining=False, **kw)


def test_minibatches_set_by_hand_are_not_low_limits():
    m = forced_minibatches()
    advice = advise(model=m)
    assert not advice.get("limits_too_low")
    assert not any("too low" in f.title for f in advice)
    f = advice.get("minibatching_overhead")[0]
    assert f.evidence["configured_max_ids_per_partition"] is None
    assert f.evidence["num_minibatches"] == 4 and "4 mini-batches" in f.title
    assert "num_minibatches=1" in f.fix and f.flags == ("num_minibatches",)
    assert f.gain_s == pytest.approx(m.step_time - m.replace(num_minibatches=1).step_time)
    assert f.gain_s > 0
    for finding in advice:
        assert finding_problems(finding) == [], finding
    # Configured limits that hold the batch: still not a limits finding; the fix says why.
    roomy = advise(model=forced_minibatches(limit=100_000))
    assert not roomy.get("limits_too_low")
    assert "not below the observed maximum" in roomy.get("minibatching_overhead")[0].fix
    # Configured limits below the observed maximum are evidence: then the limits are too low.
    tight = advise(model=forced_minibatches(limit=64))
    low = tight.get("limits_too_low")[0]
    assert low.evidence["configured_max_ids_per_partition"] == 64
    assert low.evidence["observed_max_ids_per_partition"] > 64
    assert low.evidence["limits_below_observed"] == list(_LIMIT_NAMES)
    assert not tight.get("minibatching_overhead")
    for finding in (*roomy, *tight):
        assert finding_problems(finding) == [], finding


def test_every_finding_follows_from_its_evidence():
    from scwork.sharding.minibatch import minibatch

    table = TableSpec("t", 256, 128, max_ids_per_partition=24, max_unique_ids_per_partition=24)
    plan = minibatch(ragged_batch(), [FeatureSpec("f", table)], V5P1, stacking=None, backend="numpy")
    dropping = compute_stats(ragged_batch(), [FeatureSpec("f", TableSpec("t", 256, 16, max_ids_per_partition=8,
                                                                          max_unique_ids_per_partition=8))],
                             V5P1, stacking=None, backend="numpy", config=SparsecoreConfig(allow_id_dropping=True))
    cases = [advise(model=step_model(plan, params=FAST_HOST.replace(sc_op_overhead_s=2e-5)), minibatch=plan),
             advise(stats=dropping), advise(model=model(params=StepModelParams(), tc_forward_s=1e-4)),
             advise(model=balanced_model(pipelining=False)), advise(model=model(hot=0.6, tc_forward_s=1e-5)),
             advise(model=forced_minibatches()), advise(model=forced_minibatches(limit=64))]
    seen = set()
    for advice in cases:
        for f in advice:
            assert finding_problems(f) == [], f
            seen.add(f.id)
    assert {"limits_too_low", "minibatching_overhead", "host_preprocessing_slow", "pipelining_off",
            "partition_skew"} <= seen


def test_limits_too_high_with_bytes_from_the_memory_model():
    table = TableSpec("t", 4096, 64, max_ids_per_partition=2048, max_unique_ids_per_partition=2048)
    feats = [FeatureSpec("f", table)]
    plan = plan_stacking(feats, V5P1, stacking=None)
    stats = compute_stats(ragged_batch(vocab=4096), feats, V5P1, stacking=plan, backend="numpy")
    advice = advise(stats=stats, plan=plan)
    f = advice.get("limits_too_high")[0]
    assert f.evidence["configured_max_unique_ids_per_partition"] == 2048
    assert f.evidence["observed_max_unique_ids_per_partition"] < 1024
    assert f.gain_bytes > 0 and "scwork.memory.plan" in f.gain_basis
    # The same check without a memory model falls back on the HBM stack formula of [sc-guide] §9:
    # ((2 fw + 1) + 3 fw) x delta_U x P x 4 bytes per SparseCore, 4 SparseCores per chip.
    obs = f.evidence["observed_max_unique_ids_per_partition"]
    new = -(-obs // 8) * 8
    from scwork.advisor._context import Context
    from scwork.advisor._limit_checks import check_limits_high

    ctx = Context(None, plan, stats, None, None, None, AdvisorThresholds(), None, None)
    check_limits_high(ctx)
    fw, P = 64, 4
    assert ctx.findings[0].gain_bytes == ((2 * fw + 1) + 3 * fw) * (2048 - new) * P * 4 * 4


def test_limits_close_to_observed_are_not_too_high():
    feats = [FeatureSpec("f", TableSpec("t", 4096, 64))]
    stats0 = compute_stats(ragged_batch(vocab=4096), feats, V5P1, stacking=None, backend="numpy")
    obs = int(stats0["max_ids_per_partition"].max()), int(stats0["max_unique_ids_per_partition"].max())
    table = TableSpec("t", 4096, 64, max_ids_per_partition=obs[0] + 8, max_unique_ids_per_partition=obs[1] + 8)
    stats = compute_stats(ragged_batch(vocab=4096), [FeatureSpec("f", table)], V5P1, stacking=None,
                          backend="numpy")
    assert not advise(stats=stats).get("limits_too_high")


# -- skew ---------------------------------------------------------------------------------
def test_partition_skew_fires_with_the_balanced_what_if():
    m = model(hot=0.6, tc_forward_s=1e-5)
    f = advise(model=m).get("partition_skew")[0]
    assert f.evidence["ratio"] > 1.25
    assert f.gain_s > 0 and "spread evenly" in f.gain_basis
    # stats-only path: the busiest partition's ids against the mean
    g = advise(stats=expected_stats({"t": 20.0}, V5P4, batch_size=16384, hot_fraction=0.6)).get("partition_skew")[0]
    assert g.evidence["hot_partition"] == 0 and g.gain_s is None


def test_balanced_partitions_are_not_skewed():
    assert not advise(model=model(tc_forward_s=1e-5)).get("partition_skew")
    assert not advise(stats=expected_stats({"t": 20.0}, V5P4, batch_size=16384)).get("partition_skew")


# -- stacking -----------------------------------------------------------------------------
def feats_of(n, dims=None):
    dims = dims or [16] * n
    return [FeatureSpec(f"f{i}", TableSpec(f"t{i}", 1000, d)) for i, d in enumerate(dims)]


def test_too_few_stacked_tables():
    plan = plan_stacking(feats_of(3), V5P4, stacking=None)
    f = advise(plan=plan).get("too_few_stacked_tables")[0]
    assert f.evidence["stacks"] == ["t0", "t1", "t2"] and f.gain_s is None
    # With a step model the saving is 2 op overheads and 2 all-to-all latencies per direction.
    stats = expected_stats({f"t{i}": 2.0 for i in range(3)}, V5P4, batch_size=256)
    m = step_model(stats, plan, params=FAST_HOST.replace(sc_op_overhead_s=5e-5))
    g = advise(model=m).get("too_few_stacked_tables")[0]
    assert g.gain_s >= 2 * 2 * 5e-5


def test_enough_or_incompatible_tables_are_fine():
    assert not advise(plan=plan_stacking(feats_of(5), V5P4, stacking=[[f"t{i}" for i in range(5)]])
                      ).get("too_few_stacked_tables")
    assert not advise(plan=plan_stacking(feats_of(3, [8, 16, 32]), V5P4, stacking=None)
                      ).get("too_few_stacked_tables")


def test_too_many_stacked_tables():
    plan = plan_stacking(feats_of(101), V5P4, stacking=[[f"t{i}" for i in range(101)]])
    f = advise(plan=plan).get("too_many_stacked_tables")[0]
    assert f.evidence["tables"] == 101
    ok = plan_stacking(feats_of(100), V5P4, stacking=[[f"t{i}" for i in range(100)]])
    assert not advise(plan=ok).get("too_many_stacked_tables")


# -- precision ---------------------------------------------------------------------------
def test_fp32_tables_that_would_gain_from_bf16():
    plan = plan_stacking([FeatureSpec("f", TableSpec("t", 100_000, 64))], V5P4, stacking=None)
    stats = expected_stats({"t": 20.0}, V5P4, batch_size=16384)
    m = step_model(stats, plan, params=FAST_HOST)
    f = advise(model=m).get("fp32_where_lower_precision_would_do")[0]
    # 100000 rows pad to round_up(100000, 8 x 16) = 100096; f32 64 wide = 256 B, bf16 = 128 B,
    # int8 pads 64 to 64 B: per chip (1/4 of the rows) 25024 x 128 and 25024 x 192 B saved.
    assert f.evidence["table_bytes_saved_bf16_per_chip"] == 25024 * 128
    assert f.evidence["table_bytes_saved_int8_per_chip"] == 25024 * 192
    assert f.gain_bytes == 25024 * 128
    assert f.gain_s is None or f.gain_s > 0
    assert "quantization_config_num_buckets" in f.flags


def test_a_bf16_what_if_that_does_not_shorten_the_step_is_no_gain():
    plan = plan_stacking([FeatureSpec("f", TableSpec("t", 100_000, 64))], V5P4, stacking=None)
    stats = expected_stats({"t": 20.0}, V5P4, batch_size=16384)
    # TensorCore-bound: bf16 tables leave the step as it is; the HBM saving still stands.
    m = step_model(stats, plan, params=FAST_HOST, tc_forward_s=1e-3)
    assert m.step_time - m.replace(dtype="bf16").step_time <= 0
    f = advise(model=m).get("fp32_where_lower_precision_would_do")[0]
    assert f.evidence["step_gain_bf16_s"] is None and f.gain_s is None
    assert "no time gain" in f.gain_basis and "per step" not in f.expected_gain
    assert f.gain_bytes > 0 and finding_problems(f) == []
    # A what-if that is slower (a loss) is not offered as a gain either.
    slower = m.replace(tc_forward_s=2e-3)
    object.__setattr__(m, "replace", lambda **changes: slower)
    f = advise(model=m).get("fp32_where_lower_precision_would_do")[0]
    assert f.evidence["step_gain_bf16_s"] is None and f.gain_s is None
    assert finding_problems(f) == []


def test_gains_that_are_losses_are_dropped():
    from scwork.advisor._context import Context

    ctx = Context(None, None, None, None, None, None, AdvisorThresholds(), None, None)
    ctx.add(id="partition_skew", title="t", severity="info", fix="f", gain_s=-1e-6, gain_bytes=0)
    assert ctx.findings[0].gain_s is None and ctx.findings[0].gain_bytes is None
    assert ctx.findings[0].expected_gain == "not estimated"


def test_bf16_or_narrow_tables_are_not_flagged():
    plan = plan_stacking([FeatureSpec("f", TableSpec("t", 100_000, 64))], V5P4, stacking=None)
    stats = expected_stats({"t": 20.0}, V5P4, batch_size=16384)
    assert not advise(model=step_model(stats, plan, params=FAST_HOST, dtype="bf16")).get(
        "fp32_where_lower_precision_would_do")
    # Width 1: the 32-byte line costs the same in every dtype; the step does not change either.
    narrow = plan_stacking([FeatureSpec("f", TableSpec("t", 100_000, 1))], V5P4, stacking=None)
    assert not advise(model=step_model(stats, narrow, params=FAST_HOST, tc_forward_s=1e-3)).get(
        "fp32_where_lower_precision_would_do")


# -- HBM bandwidth --------------------------------------------------------------------------
def test_hbm_bandwidth_saturation_when_sparsecores_bound_and_dma_bound():
    # With the default assumptions (1e9 instructions/s per tile, the SparseCores sharing the
    # whole HBM bandwidth) a v5p SparseCore is slightly vector-bound; give the SparseCores a
    # quarter of the HBM bandwidth and the row gathers bound it.
    m = model(topo=V5P1, width=256, rate=40.0, batch=4096, params=FAST_HOST.replace(sc_hbm_bandwidth_fraction=0.25))
    f = advise(model=m).get("hbm_bandwidth_saturation")[0]
    assert f.evidence["dma_s"] >= f.evidence["vector_s"]
    assert f.evidence["sc_utilization"] >= 0.8
    assert f.gain_s > 0 and "num_chips" in f.flags


def test_tensorcore_bound_step_is_not_hbm_saturated():
    slow_hbm = FAST_HOST.replace(sc_hbm_bandwidth_fraction=0.25)
    assert not advise(model=model(topo=V5P1, width=256, rate=40.0, batch=4096, tc_forward_s=1.0,
                                  params=slow_hbm)).get("hbm_bandwidth_saturation")
    # SparseCore-bound but vector-bound (default bandwidth share): not an HBM problem either.
    assert not advise(model=model(topo=V5P1, width=256, rate=40.0, batch=4096)).get("hbm_bandwidth_saturation")


# -- memory ---------------------------------------------------------------------------------
def tables8(**kw):
    return [TableSpec(f"t{i}", 10**5, 64, max_ids_per_partition=256, max_unique_ids_per_partition=256, **kw)
            for i in range(8)]


def test_spmem_overflow():
    tables = tables8()
    r = scwork.memory.plan(tables, V5P4, batch_size=65536, stacking=[[t.name for t in tables]])
    f = advise(memory=r).get("spmem_overflow")[0]
    assert f.severity == "error" and f.gain_bytes == int(r.spmem.total.max() - r.spmem.capacity)
    assert "stage_gather_operands_in_hbm" in f.flags
    ok = scwork.memory.plan(tables, V5P4, batch_size=4096, stacking=None)
    assert not advise(memory=ok).get("spmem_overflow")


def test_hbm_stack_overflow_and_heap_exhaustion_are_told_apart():
    topo = scwork.Topology.for_chip("v5p", num_chips=64)
    stack = scwork.memory.plan(tables8(), topo, batch_size=16384, stacking=None, hbm_bytes=2**30)
    advice = advise(memory=stack)
    assert advice.get("hbm_stack_overflow") and not advice.get("hbm_heap_exhaustion")
    f = advice.get("hbm_stack_overflow")[0]
    assert f.gain_bytes == stack.peak_hbm_bytes - stack.usable_hbm_bytes
    assert "xla_sc_num_serialized_tables_to_optimize_hbm" in f.flags
    assert f.evidence["num_serialized_tables"] >= 2
    heap = scwork.memory.plan(tables8(), topo, batch_size=16384, stacking=None, dense_weights_bytes=100 * 2**30)
    advice = advise(memory=heap)
    assert advice.get("hbm_heap_exhaustion") and not advice.get("hbm_stack_overflow")
    assert advice.get("hbm_heap_exhaustion")[0].evidence["dense_weights"] == 100 * 2**30
    fits = scwork.memory.plan(tables8(), topo, batch_size=16384, stacking=None)
    assert not {"hbm_stack_overflow", "hbm_heap_exhaustion"} & set(advise(memory=fits).ids)


def test_serialization_time_cost_comes_from_the_step_model():
    topo = scwork.Topology.for_chip("v5p", num_chips=64)
    feats = [FeatureSpec(t.name, t) for t in tables8()]
    plan = plan_stacking(feats, topo, stacking=None)
    mem = scwork.memory.plan(plan, topo, batch_size=16384, hbm_bytes=2**30)
    stats = expected_stats({t.name: 1.0 for t in tables8()}, topo, batch_size=16384)
    m = step_model(stats, plan, memory=mem, params=FAST_HOST)
    f = advise(model=m).get("hbm_stack_overflow")[0]
    n = f.evidence["num_serialized_tables"]
    assert f.evidence["time_cost_s"] == pytest.approx(m.replace(num_serialized_tables=n).step_time - m.step_time)
    assert f.evidence["time_cost_s"] >= 0


# -- the result object ----------------------------------------------------------------------
def test_order_errors_first_then_seconds_then_bytes():
    topo = scwork.Topology.for_chip("v5p", num_chips=64)
    feats = [FeatureSpec(t.name, t) for t in tables8()]
    plan = plan_stacking(feats, topo, stacking=None)
    mem = scwork.memory.plan(plan, topo, batch_size=16384, hbm_bytes=2**30)
    stats = expected_stats({t.name: 1.0 for t in tables8()}, topo, batch_size=16384)
    m = step_model(stats, plan, memory=mem, params=StepModelParams(), tc_forward_s=1e-4, pipelining=False)
    advice = advise(model=m)
    sev = [f.severity for f in advice]
    n_err = sev.count("error")
    assert n_err >= 1 and sev[:n_err] == ["error"] * n_err
    non_error = [f for f in advice if f.severity != "error"]
    timed = [f.gain_s for f in non_error if f.gain_s is not None]
    assert timed == sorted(timed, reverse=True)
    first_untimed = next(i for i, f in enumerate(non_error) if f.gain_s is None)
    assert all(f.gain_s is None for f in non_error[first_untimed:])
    assert {"hbm_stack_overflow", "pipelining_off", "too_few_stacked_tables"} <= set(advice.ids)
    df = advice.to_dataframe()
    assert list(df["id"]) == advice.ids and "gain_s" in df.columns
    html = advice._repr_html_()
    assert all(i in html for i in advice.ids)
    assert isinstance(advice[0], Finding) and advice[0].expected_gain
    assert "1." in str(advice)


def test_nothing_known_nothing_found_everything_skipped():
    advice = advise()
    assert isinstance(advice, Advice) and list(advice) == []
    assert set(advice.skipped) == set(CHECKS)
    assert "No bottleneck found" in str(advice)


def test_typed_errors():
    with pytest.raises(ConfigError, match="StepModel"):
        advise(model="fast")
    with pytest.raises(ConfigError, match="SparsecoreConfig"):
        advise(config={"allow_id_dropping": True})
    with pytest.raises(ConfigError, match="StackingPlan"):
        advise(plan=[["t0"]])
    with pytest.raises(ConfigError):
        AdvisorThresholds(skew_ratio=-1.0)
    with pytest.raises(ConfigError):
        AdvisorThresholds(min_tables_per_stack=200)


def test_advise_refuses_statistics_and_batch_sizes_of_the_wrong_kind():
    """stats=5 reached stats['ids'] (TypeError); found by the public-API argument surface (issue 22)."""
    import pytest

    from scwork.advisor import advise
    from scwork.errors import ConfigError

    for stats in (5, "stats", [1, 2]):
        with pytest.raises(ConfigError, match="stats must be"):
            advise(stats=stats)
    for batch_size in (1.5, "16", 0, True):
        with pytest.raises(ConfigError, match="batch_size must be"):
            advise(batch_size=batch_size)
