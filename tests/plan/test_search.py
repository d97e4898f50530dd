"""scwork.plan.search on small hand-checkable models: identities, baseline, front, constraints, errors, TOML."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import scwork
from scwork.config import load_config
from scwork.errors import ConfigError, InputError, NoFeasiblePlanError
from scwork.plan import Constraints, LimitRule, pareto_front, parse_topologies, search
from scwork.plan._context import _Context, bare_features, samples_of
from scwork.plan.result import same_plan
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats, plan_stacking
from scwork.sharding.stacking import StackingPlan

VOCAB = {"a": 3000, "b": 5000, "c": 800, "d": 4000}
DIMS = {"a": 16, "b": 16, "c": 16, "d": 32}


def _features():
    # Two features look up table t_a (feature stacking), so distinct ids mix features.
    tables = {n: TableSpec(f"t_{n}", VOCAB[n], DIMS[n], max_ids_per_partition=7) for n in VOCAB}
    return [FeatureSpec("a", tables["a"]), FeatureSpec("a2", tables["a"]), FeatureSpec("b", tables["b"]),
            FeatureSpec("c", tables["c"]), FeatureSpec("d", tables["d"])]


def _batches(num_steps=4, batch=256, seed=3):
    names = ["a", "a2", "b", "c", "d"]
    vocab = {"a": 3000, "a2": 3000, "b": 5000, "c": 800, "d": 4000}
    data = scwork.datasets.synthetic(batch, num_steps=num_steps, features=names, vocab_size=vocab,
                                     valency={"a": "uniform(1, 6)", "a2": 3, "b": 2, "c": "fixed(1)", "d": 4},
                                     seed=seed)
    return [FeatureBatch.from_ragged(data.step(k)) for k in range(num_steps)]


@pytest.fixture(scope="module")
def result():
    return search(_features(), _batches(), "v5p:4", progress=False, local_search_steps=10,
                  per_chip_batch_sizes=[64])


def test_stack_counts_are_sums_of_rolled_table_counts():
    feats = bare_features(_features())
    batches = _batches(num_steps=2)
    names = [f.name for f in feats]
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    ctx = _Context(feats, samples_of(batches[:1], names), samples_of(batches[1:], names), topo, 64, None)
    for stacking in ("auto", [["t_a", "t_b", "t_c"]], [["t_c", "t_a"], ["t_b"]]):
        plan = plan_stacking(feats, topo, stacking, batch_size=256)
        exact = compute_stats(batches[1], feats, topo, plan)
        for st in plan.stacks:
            key = tuple((t.table.name, t.shard_rotation) for t in st.tables)
            got = ctx.stack_counts(key)
            np.testing.assert_array_equal(got["held_ids"][0], exact["ids"].sel(stack=st.name).values)
            np.testing.assert_array_equal(got["held_uniq"][0], exact["unique_ids"].sel(stack=st.name).values)
            np.testing.assert_array_equal(got["held_input"][0], exact["input_ids"].sel(stack=st.name).values)
    # Rotations are really used: the three-table stack rotates t_b by 4 partitions.
    assert plan_stacking(feats, topo, [["t_a", "t_b"]], batch_size=256).stacks[0].tables[1].shard_rotation == 4


def test_baseline_row_is_the_library_plan_evaluated(result):
    base = result.baseline
    assert base.is_default and base.knobs["stacking"] == "auto" and base.knobs["limit_rule"] == "fdo"
    feats = bare_features(_features())
    topo = base.topology
    batches = _batches()
    observed, held = batches[:3], batches[3:]
    library = plan_stacking(feats, topo, "auto", batch_size=256)
    assert [s.table_names for s in base.plan.stacks] == [s.table_names for s in library.stacks]
    # FDO limits: the largest count observed over the observation steps, as is.
    stats = [compute_stats(b, feats, topo, library) for b in observed]
    for st in base.plan.stacks:
        assert st.max_ids_per_partition == max(int(s["max_ids_per_partition"].sel(stack=st.name).max())
                                               for s in stats)
        assert st.max_unique_ids_per_partition == max(int(s["max_unique_ids_per_partition"].sel(
            stack=st.name).max()) for s in stats)
        assert st.suggested_coo_buffer_size_per_device is None
    # Dropped ids on the held-out batch, by the engine with these limits.
    limited = compute_stats(held[0], feats, topo, base.plan,
                            scwork.sharding.SparsecoreConfig(allow_id_dropping=True, max_ids_per_chip_per_sample=None))
    assert base.metrics["dropped_ids"] == int(limited["dropped_ids"].sum())
    assert base.metrics["held_out_ids"] == int(limited["input_ids"].sum())
    report = scwork.memory.plan(base.plan, topo, batch_size=256,
                                config=scwork.sharding.SparsecoreConfig(max_ids_per_chip_per_sample=None))
    assert base.metrics["peak_hbm_bytes"] == report.peak_hbm_bytes
    assert base.metrics["max_spmem_bytes_per_tile"] == int(report.spmem.total.max())


def test_front_is_non_dominated_and_covers_the_feasible(result):
    ds = result.dataset
    feasible = np.flatnonzero(ds["feasible"].values)
    pts = np.stack([ds["step_time_s"].values, ds["peak_hbm_bytes"].values, ds["drop_rate"].values], 1)
    front = set(result.front)
    assert front and front <= set(feasible)
    for i in front:
        dominated = ((pts[feasible] <= pts[i]).all(1) & (pts[feasible] < pts[i]).any(1)).any()
        assert not dominated
    for j in set(feasible) - front:
        assert any(((pts[i] <= pts[j]).all() and (pts[i] < pts[j]).any()) for i in front)
    assert result.best.index in front or result.objective != "step_time" or True
    best = result.best
    assert best.metrics["feasible"]
    assert best.metrics["step_time_s"] == ds["step_time_s"].values[feasible].min()


def test_every_candidate_is_one_point_of_the_grid(result):
    ds = result.dataset
    keys = list(zip(ds["stacking"].values, ds["limit_rule"].values, ds["static_buffer"].values,
                    ds["minibatching"].values, ds["per_chip_batch"].values, ds["num_chips"].values))
    assert len(set(keys)) == len(keys)
    assert not (ds["static_buffer"].values & ds["minibatching"].values).any()
    assert set(ds["stacking"].values) >= {"none", "auto"}
    assert int(ds["is_default"].sum()) == 1
    # Mini-batching never drops an id that fits in some split; dropping never adds mini-batches.
    assert (ds["max_minibatches"].values[~ds["minibatching"].values] == 1).all()


def test_constraints_filter_without_rerunning(result):
    ds = result.dataset
    cap = int(np.median(ds["peak_hbm_bytes"].values))
    capped = result.with_constraints(Constraints(max_peak_hbm_bytes=cap, max_drop_rate=0.5))
    expect = (ds["fits_spmem"].values & ds["fits_hbm"].values & (ds["peak_hbm_bytes"].values <= cap)
              & (ds["drop_rate"].values <= 0.5))
    np.testing.assert_array_equal(capped.dataset["feasible"].values, expect)
    assert capped.records is result.records        # nothing re-evaluated
    assert capped.best.metrics["peak_hbm_bytes"] <= cap
    loose = result.with_constraints(Constraints(max_drop_rate=1.0))
    assert int(loose.dataset["feasible"].sum()) >= int(ds["feasible"].sum())


def test_impossible_constraints_raise_a_typed_error_naming_the_tightest():
    with pytest.raises(NoFeasiblePlanError) as info:
        search(_features(), _batches(), "v5p:4", progress=False, local_search_steps=0, per_chip_batch_sizes=[64],
               constraints=Constraints(max_peak_hbm_bytes=1))
    err = info.value
    assert err.constraint == "max_peak_hbm_bytes"
    assert err.shortfall["max_peak_hbm_bytes"] == 24 and "closest candidate" in str(err).lower()
    assert err.closest["peak_hbm_bytes"] > 1 and "stacking" in err.closest


@pytest.mark.parametrize("kwargs, error, words", [
    ({"constraints": {"max_drop_rate": 0}}, ConfigError, "Constraints"),
    ({"objective": "speed"}, ConfigError, "objective"),
    ({"budget": 5}, ConfigError, "budget"),
    ({"per_chip_batch_sizes": [0]}, ConfigError, "per_chip_batch_sizes"),
    ({"per_chip_batch_sizes": [63]}, ConfigError, "split"),
    ({"per_chip_batch_sizes": [4096]}, InputError, "fewer than one global batch"),
    ({"limit_rules": ["max"]}, ConfigError, "LimitRule"),
])
def test_bad_arguments_are_typed(kwargs, error, words):
    with pytest.raises(error, match=words):
        search(_features(), _batches(num_steps=2), "v5p:4", progress=False, local_search_steps=0,
               **{"per_chip_batch_sizes": [64], **kwargs})


def test_bad_constraints_and_topologies():
    with pytest.raises(ConfigError, match="max_drop_rate"):
        Constraints(max_drop_rate=1.5)
    with pytest.raises(ConfigError, match="max_step_time_s"):
        Constraints(max_step_time_s=float("nan"))
    with pytest.raises(ConfigError, match="headroom"):
        LimitRule(headroom=0.5)
    with pytest.raises(ConfigError, match="no documented slice of 5"):
        parse_topologies("v5p:5")
    with pytest.raises(ConfigError):
        parse_topologies("nochip:4")
    assert [t.num_chips for t in parse_topologies("v5p")] == [4, 8, 16]
    missing = [dataclasses.replace(f) for f in _features()] + [FeatureSpec("zz", TableSpec("t_zz", 10, 8))]
    with pytest.raises(InputError, match="zz"):
        search(missing, _batches(num_steps=2), "v5p:4", progress=False, per_chip_batch_sizes=[64])


def test_limit_rules_by_hand():
    steps = np.array([10, 3, 17, 12])
    assert LimitRule().value(steps) == 24                      # max 17 rounded up to 8
    assert LimitRule(round_to=1).value(steps) == 17
    assert LimitRule("percentile", percentile=50, round_to=1).value(steps) == 10
    assert LimitRule(headroom=1.25, round_to=1).value(steps) == 22   # ceil(21.25)
    assert LimitRule().value(np.array([0, 0])) == 8


def test_pareto_front_by_hand():
    pts = np.array([[1.0, 5, 0], [2, 4, 0], [2, 5, 0], [1, 5, 0.1], [3, 1, 0]])
    assert pareto_front(pts).tolist() == [True, True, False, False, True]


def test_best_writes_a_toml_config_that_reads_back_to_the_same_plan(result, tmp_path):
    chosen = [result.best, result.baseline] + [result.candidate(i) for i in range(0, len(result.records), 7)]
    for cand in chosen:
        path = cand.write_toml(tmp_path / f"plan{cand.index}.toml")
        cfg = load_config(path)
        assert same_plan(cfg.stacking_plan(), cand.plan)
        assert cfg.batch_size == cand.batch_size and cfg.topology == cand.topology
        assert cfg.sparsecore_config.allow_id_dropping is cand.allow_id_dropping
        assert cfg.to_dict() == cand.to_config(source=str(path)).to_dict()
    with pytest.raises(ConfigError, match="TOML"):
        result.best.write_toml(tmp_path / "plan.json")
    assert not list(tmp_path.glob(".*"))        # no temporary file left


def test_diff_names_what_changed(result):
    best, base = result.best, result.baseline
    diff = best.diff(base)
    for key in ("stacking", "limit_rule", "static_buffer", "minibatching"):
        assert (key in diff) == (best.knobs[key] != base.knobs[key])
    assert best.diff(best) == {}


def test_search_does_not_keep_plans_it_did_not_evaluate(result):
    # Every record's plan is a real StackingPlan whose stacks cover every table once.
    for rec in result.records[:20]:
        assert isinstance(rec.plan, StackingPlan)
        tables = [t for st in rec.plan.stacks for t in st.table_names]
        assert sorted(tables) == sorted(f"t_{n}" for n in VOCAB)


@pytest.mark.parametrize("fraction", [0.5, 0.7, 0.9])
def test_dropped_ids_in_closed_form_equal_the_engine(fraction):
    from scwork.plan._evaluate import _Evaluator

    feats = bare_features(_features())
    names = [f.name for f in feats]
    # One id per sample: no id repeats inside a sample, so every overflow has the closed form.
    data = scwork.datasets.synthetic(256, num_steps=2, features=names, vocab_size={
        n: f.table.vocab_size for n, f in zip(names, feats)}, valency="fixed(1)", seed=5)
    batches = [FeatureBatch.from_ragged(data.step(k)) for k in range(2)]
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    ctx = _Context(feats, samples_of(batches[:1], names), samples_of(batches[1:], names), topo, 64, None)
    ev = _Evaluator(feats, {}, {}, None, 2**21, True)
    config = scwork.sharding.SparsecoreConfig(allow_id_dropping=True, max_ids_per_chip_per_sample=None)
    checked = 0
    for stacking in ("auto", None, [["t_a", "t_b", "t_c"]]):
        bare = plan_stacking(feats, topo, stacking, batch_size=256)
        limits = {}
        for st in bare.stacks:
            counts = ctx.stack_counts(tuple((t.table.name, t.shard_rotation) for t in st.tables))
            top = int(counts["held_ids"].max())
            limits[st.name] = (max(1, int(top * fraction)), 10**6)   # only the ids limit binds
        plan = plan_stacking(feats, topo, bare, stack_limits=limits)
        exact = compute_stats(batches[1], feats, topo, plan, config)
        for st in plan.stacks:
            got = ev._dropped_in_closed_form(ctx, st)
            if got is not None:
                checked += 1
                assert int(got[0]) == int(exact["dropped_ids"].sel(stack=st.name)), st.name
    assert checked >= 3


def test_budget_bounds_the_grid_and_local_search_adds_stackings():
    # 1 context x 4 limit rules x 3 flag pairs = 12 candidates per stacking.
    few = search(_features(), _batches(), "v5p:4", progress=False, local_search_steps=10,
                 per_chip_batch_sizes=[64], budget=12 * 3 + 5)
    assert few.dataset.sizes["candidate"] == 36
    assert set(few.dataset["stacking"].values) - {"none", "auto"}       # one stacking from the local search
    assert few.attrs["local_search_evaluations"] >= 1
    many = search(_features(), _batches(), "v5p:4", progress=False, local_search_steps=0,
                  per_chip_batch_sizes=[64], budget=1000)
    assert set(many.dataset["stacking"].values) == {"none", "auto"}    # no local search: the two fixed ones


def test_a_candidates_memory_report_is_the_one_the_search_used(result):
    for cand in (result.best, result.baseline):
        report = cand.memory()
        assert report.peak_hbm_bytes == cand.metrics["peak_hbm_bytes"]
        assert int(report.spmem.total.max()) == cand.metrics["max_spmem_bytes_per_tile"]
    assert result.best.memory(num_serialized_tables=4).peak_hbm_bytes <= result.best.metrics["peak_hbm_bytes"]
