"""What the engine keeps between calls to shorten its serial part, and that nothing stale is reused.

The engine keeps the checks of a feature list it has seen with a batch layout
(``engine._CHECKED_INPUTS``), one job template per plan and call shape
(``engine._JobTemplate``, through ``plan_derived``), and a scenario with no limit
override runs its own plan. Each test changes one thing a kept value depends on
and checks the result against a call that starts with nothing kept.
"""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError, InputError, LimitExceededError
from scwork.sharding import (
    FeatureBatch,
    FeatureSpec,
    Scenario,
    SparsecoreConfig,
    TableSpec,
    compute_stats,
    plan_stacking,
    preprocess,
)
from scwork.sharding import _plan_cache
from scwork.sharding._synthetic import synthetic_batch

engine = importlib.import_module("scwork.sharding.engine")


def _forget():
    """Nothing kept: the next call builds every table, template and check anew."""
    _plan_cache._DERIVED.clear()
    engine._CHECKED_INPUTS.clear()


def _batch(seed: int, batch_size: int = 64, num_features: int = 5, vocab: int = 500):
    return synthetic_batch(batch_size=batch_size, num_features=num_features, vocab_size=vocab, valency=4.0,
                           zipf_s=1.05, embedding_dim=8, seed=seed)


def _same_preprocess(a, b) -> None:
    assert a.stats.equals(b.stats)
    assert a.csr.keys() == b.csr.keys()
    for name, buf in a.csr.items():
        other = b.csr[name]
        assert buf.buffer_size_per_sc == other.buffer_size_per_sc, name
        for attr in ("row_pointers", "embedding_ids", "sample_ids"):
            assert np.array_equal(getattr(buf, attr), getattr(other, attr)), (name, attr)
        assert np.array_equal(buf.gains.view(np.int32), other.gains.view(np.int32)), name


@pytest.mark.parametrize("stacking", [None, "auto"])
@pytest.mark.parametrize("num_threads", [1, 2, 3, 16])
def test_kept_templates_give_what_fresh_ones_give_for_other_batches_and_threads(stacking, num_threads):
    """Batches of other counts and sizes through one kept template: the results of a fresh start."""
    topo = scwork.Topology(2, 2)
    first, features = _batch(0)
    preprocess(first, features, topo, stacking, num_threads=num_threads)          # templates kept
    compute_stats(first, features, topo, stacking, num_threads=num_threads)
    for seed, size in ((1, 64), (2, 128), (3, 64)):
        other, _ = _batch(seed, batch_size=size)
        kept_stats = compute_stats(other, features, topo, stacking, num_threads=num_threads)
        kept_pre = preprocess(other, features, topo, stacking, num_threads=num_threads)
        _forget()
        fresh_stats = compute_stats(other, features, topo, stacking, num_threads=num_threads)
        fresh_pre = preprocess(other, features, topo, stacking, num_threads=num_threads)
        assert kept_stats.equals(fresh_stats)
        _same_preprocess(kept_pre, fresh_pre)
        # and every thread count gives the same (the templates differ from 8 threads on)
        _same_preprocess(kept_pre, preprocess(other, features, topo, stacking, num_threads=1))


def test_a_call_does_not_write_into_an_earlier_calls_results():
    """Counters are per call: a second call through the same template leaves the first's results alone."""
    topo = scwork.Topology(2, 2)
    a, features = _batch(4)
    b, _ = _batch(5)
    first = compute_stats(a, features, topo, None, num_threads=2)
    kept = first.copy(deep=True)
    first_pre = preprocess(a, features, topo, None, num_threads=16)
    kept_rows = {k: v.row_pointers.copy() for k, v in first_pre.csr.items()}
    compute_stats(b, features, topo, None, num_threads=2)
    preprocess(b, features, topo, None, num_threads=16)
    assert first.equals(kept)
    for k, v in first_pre.csr.items():
        assert np.array_equal(v.row_pointers, kept_rows[k])


def test_other_limits_and_config_do_not_reuse_a_kept_template():
    """Plans of other limits, and dropping on or off, build their own jobs (limits decide how CSR is written)."""
    topo = scwork.Topology(2, 2)
    batch, features = _batch(6)
    plan_free = plan_stacking(features, topo, None, batch_size=batch.batch_size)
    free = preprocess(batch, features, topo, plan_free, num_threads=16)
    observed = int(free.stats["max_ids_per_partition"].max())
    limited = {st.name: (max(1, observed // 2), None) for st in plan_free.stacks}
    dropping = SparsecoreConfig(allow_id_dropping=True)
    kept = preprocess(batch, features, topo, None, dropping, stack_limits=limited, num_threads=16)
    assert int(kept.stats["dropped_ids"].sum()) > 0
    _forget()
    fresh = preprocess(batch, features, topo, None, dropping, stack_limits=limited, num_threads=16)
    _same_preprocess(kept, fresh)
    # back to the free plan: its own template again, nothing dropped
    again = preprocess(batch, features, topo, plan_free, num_threads=16)
    _same_preprocess(again, free)
    assert int(again.stats["dropped_ids"].sum()) == 0
    # one plan object, dropping off then on: the second call cuts, as a fresh start does
    # (the jobs of a call that may not drop write every id)
    plan_limited = plan_stacking(features, topo, None, batch_size=batch.batch_size, stack_limits=limited)
    for threads in (1, 16):
        _forget()
        with pytest.raises(LimitExceededError):
            preprocess(batch, features, topo, plan_limited, SparsecoreConfig(), num_threads=threads)
        with pytest.raises(LimitExceededError):
            compute_stats(batch, features, topo, plan_limited, SparsecoreConfig(), num_threads=threads)
        cut = preprocess(batch, features, topo, plan_limited, dropping, num_threads=threads)
        _same_preprocess(cut, fresh)


def test_checked_inputs_are_checked_again_for_another_batch_layout_or_a_changed_list():
    """The kept checks are by the specs' identity and the batch's names and size: any change checks again."""
    topo = scwork.Topology(2, 2)
    batch, features = _batch(7)
    features = list(features)
    compute_stats(batch, features, topo, None)                    # kept
    fewer = batch.select(batch.feature_names[:-1])
    with pytest.raises(InputError, match="no ids in the batch"):
        compute_stats(fewer, features, topo, None)
    odd = FeatureBatch({name: (batch[name][0][:batch[name][1][6]], batch[name][1][:7]) for name in batch})
    with pytest.raises(InputError, match="does not divide"):
        compute_stats(odd, features, topo, None)
    features.append(FeatureSpec(features[0].name, TableSpec("other", 10, 8)))     # the same list, changed
    with pytest.raises(ConfigError, match="appears twice"):
        compute_stats(batch, features, topo, None)


def test_scratch_estimate_from_the_jobs_counts_is_the_estimate():
    """The scratch check reads the stacks' counts the jobs make: the same bytes as counting them apart."""
    topo = scwork.Topology(2, 2)
    batch, features = _batch(8, num_features=7)
    counts = engine._slice_counts(batch, 4)
    for stacking in (None, "auto", [[f.table.name for f in features[:3]]]):
        plan = plan_stacking(features, topo, stacking, batch_size=batch.batch_size)
        for want_csr in (False, True):
            seen = []
            engine._jobs_of(plan, batch, 2, 2, want_csr, SparsecoreConfig(), 16, counts,
                            lambda c, sums=None: seen.append((c, sums)))
            ((stack_counts, sums),) = seen
            assert stack_counts.shape == (len(plan.stacks), 4)
            if sums is not None:        # the total and the sum of the largest slices, as counted apart
                assert sums == (int(stack_counts.sum()), int(stack_counts.max(axis=1).sum()))
            for threads in (1, 16):
                apart = engine.estimate_scratch_bytes(plan, batch, 2, 2, want_csr, threads)
                assert engine.estimate_scratch_bytes(plan, batch, 2, 2, want_csr, threads, counts, stack_counts) \
                    == apart
                assert engine.estimate_scratch_bytes(plan, batch, 2, 2, want_csr, threads, counts, stack_counts,
                                                     sums) == apart


@pytest.mark.parametrize("stacking", [None, "auto"])
def test_scenario_without_overrides_runs_a_plan_equal_to_the_one_with_its_own_limits(stacking):
    """No stack_limits: Scenario.plan is own_plan, whose stacks equal planning with every stack's own pair."""
    topo = scwork.Topology(2, 2)
    batch, features = _batch(9)
    with_limits = [dataclasses.replace(f, table=dataclasses.replace(f.table, max_ids_per_partition=40 + i,
                                                                    max_unique_ids_per_partition=None if i % 2
                                                                    else 30 + i))
                   for i, f in enumerate(features)]
    for feats, config in ((features, SparsecoreConfig()), (with_limits, SparsecoreConfig()),
                          (features, SparsecoreConfig(max_ids_per_table=300))):
        sc = Scenario(batch, feats, topo, stacking, config=config)
        assert sc.plan is sc.own_plan
        explicit = sc._plan(sc.limits)
        assert explicit.stacks == sc.plan.stacks
        assert sc.stats.equals(compute_stats(batch, feats, topo, explicit, config))
    # an override is planned with it
    name = sc.own_plan.stacks[0].name
    sc = Scenario(batch, features, topo, stacking, stack_limits={name: (7, None)})
    assert sc.plan is not sc.own_plan
    assert sc.plan.stacks[0].max_ids_per_partition == 7


@pytest.mark.parametrize("stacking", [None, "auto"])
@pytest.mark.parametrize("rotation", [None, 1])
def test_scenario_without_overrides_lets_the_engine_plan_what_own_plan_plans(stacking, rotation, monkeypatch):
    """No stack_limits: the scenario hands its stacking and rotation to the engine, which
    must run a plan with own_plan's stacks and rotation; with an override it runs Scenario.plan."""
    topo = scwork.Topology(2, 2)
    batch, features = _batch(9)
    ran = []
    plan_of = engine._plan_of

    def recording(*args, **kwargs):
        ran.append(plan_of(*args, **kwargs))
        return ran[-1]

    monkeypatch.setattr(engine, "_plan_of", recording)
    for config in (SparsecoreConfig(), SparsecoreConfig(max_ids_per_table=300)):
        sc = Scenario(batch, features, topo, stacking, rotation=rotation, config=config)
        stats = sc.stats
        assert ran[-1].stacks == sc.own_plan.stacks and ran[-1].rotation == sc.own_plan.rotation
        assert stats.equals(compute_stats(batch, features, topo, sc.own_plan, config))
    name = sc.own_plan.stacks[0].name
    sc = Scenario(batch, features, topo, stacking, rotation=rotation, stack_limits={name: (7, None)},
                  config=SparsecoreConfig(allow_id_dropping=True))
    sc.stats
    assert ran[-1].stacks == sc.plan.stacks and ran[-1].stacks[0].max_ids_per_partition == 7


def test_the_last_plan_is_reused_only_for_the_same_arguments():
    """engine._plan_of: the same objects and numbers give the last plan; anything else plans again."""
    topo = scwork.Topology(2, 2)
    batch, features = _batch(10, num_features=6)
    features = tuple(features)

    def stacks(stacking, **kw):
        ds = compute_stats(batch, features, topo, stacking, **kw)
        return list(ds["stack"].values)

    none = [st.name for st in plan_stacking(features, topo, None, batch_size=batch.batch_size).stacks]
    auto = [st.name for st in plan_stacking(features, topo, "auto", batch_size=batch.batch_size).stacks]
    assert none != auto
    assert stacks(None) == none and stacks(None) == none
    assert stacks("auto") == auto
    assert stacks(None) == none
    # an equal topology of another chip count, another rotation or limit: planned for them
    other = scwork.Topology(1, 4)
    assert compute_stats(batch, features, other, None).sizes["partition"] == 4
    rotated = compute_stats(batch, features, topo, "auto", rotation=1)
    assert rotated.attrs == compute_stats(batch, features, topo, "auto", rotation=1).attrs
    with pytest.raises(ConfigError, match="rotation"):
        compute_stats(batch, features, topo, "auto", rotation=True)        # 1 is not True
    small = compute_stats(batch, features, topo, "auto", activation_mem_bytes_limit=64)
    assert small.sizes["stack"] > len(auto)


@pytest.mark.parametrize("stacking", [None, "auto"])
def test_a_counted_preprocess_call_leaves_no_reference_cycle(stacking):
    """With 8 threads preprocess counts the CSR sizes first and lays every counted stack out in one
    compiled call; what that call needs must not tie the jobs into a cycle: the jobs hold the CSR
    buffers' views, and a cycle kept them from the pool (fresh pages for the next call's buffers,
    its first task 10 times slower) until the garbage collector ran."""
    import collections
    import gc

    batch, features = synthetic_batch(batch_size=256, num_features=5, vocab_size=1000, valency=5.0, zipf_s=1.05,
                                      embedding_dim=8, seed=0)
    topo = scwork.Topology(2, 2)
    preprocess(batch, features, topo, stacking, num_threads=8)      # plan, templates and checks kept
    one = preprocess(batch, features, topo, stacking, num_threads=1)
    from scwork.sharding import engine

    gc.collect()
    gc.disable()
    # Every object the collector finds unreachable is kept in gc.garbage, to see whose they are:
    # not a count of all of them, since the call may drop caches that other tests filled (the
    # plan cache starts again when full), whose cycles are not this call's jobs.
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        res = preprocess(batch, features, topo, stacking, num_threads=8)
        for name, buf in one.csr.items():
            other = res.csr[name]
            for field in ("row_pointers", "embedding_ids", "sample_ids", "gains"):
                assert np.array_equal(getattr(buf, field), getattr(other, field), equal_nan=True), (name, field)
        del res
        gc.collect()
        in_cycles = [type(o).__name__ for o in gc.garbage if isinstance(o, (engine._StackJob, engine._CountedLayout))]
        found = collections.Counter(type(o).__name__ for o in gc.garbage).most_common(8)
        assert in_cycles == [], f"the call's jobs in cycles: {in_cycles}; all unreachable objects: {found}"
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
