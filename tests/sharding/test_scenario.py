"""Scenario: the engine's what-if object gives exactly what the engine functions give."""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError, LimitExceededError
from scwork.sharding import (
    FeatureBatch,
    FeatureSpec,
    Scenario,
    SparsecoreConfig,
    TableSpec,
    compute_stats,
    minibatch,
    plan_stacking,
    preprocess,
)
from scwork.sharding._synthetic import synthetic_batch


@pytest.fixture(scope="module")
def data():
    batch, features = synthetic_batch(batch_size=512, num_features=4, vocab_size=4096, seed=3)
    return batch, features


TOPO = scwork.Topology(2, 2)


def _same(a, b):
    assert sorted(a.data_vars) == sorted(b.data_vars)
    for name in a.data_vars:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def test_run_under_limits_is_preprocess(data):
    batch, features = data
    s = Scenario(batch, features, TOPO)
    plan = plan_stacking(features, TOPO, "auto", batch_size=batch.batch_size)
    assert [st.name for st in s.plan.stacks] == [st.name for st in plan.stacks]
    _same(s.stats, preprocess(batch, features, TOPO, plan).stats)
    assert s.within_limits and not s.over_limits and s.error == ""


def test_over_limits_keeps_the_error_and_observes_without_limits(data):
    batch, features = data
    names = [st.name for st in Scenario(batch, features, TOPO).plan.stacks]
    s = Scenario(batch, features, TOPO).with_(stack_limits={name: (8, 4) for name in names})
    assert not s.within_limits and s.over_limits
    with pytest.raises(LimitExceededError) as info:
        preprocess(batch, features, TOPO, s.plan)
    assert s.error == str(info.value)
    with pytest.raises(LimitExceededError):
        s.stats
    unlimited = plan_stacking(features, TOPO, "auto", batch_size=batch.batch_size,
                              stack_limits=dict.fromkeys(s.limits, (None, None)))
    _same(s.observed, preprocess(batch, features, TOPO, unlimited).stats)
    assert s.effective_result is s.observed_result


def test_dropping_runs_and_counts_minibatches_like_minibatch(data):
    batch, features = data
    names = [st.name for st in Scenario(batch, features, TOPO).plan.stacks]
    limits = dict.fromkeys(names, (16, 8))
    s = Scenario(batch, features, TOPO, stack_limits=limits).with_(allow_id_dropping=True)
    assert s.within_limits and s.over_limits
    config = SparsecoreConfig(allow_id_dropping=True)
    _same(s.stats, preprocess(batch, features, TOPO, s.plan, config).stats)
    expected = minibatch(batch, features, TOPO, strategy="vocabulary", stacking=s.plan, config=config)
    assert s.minibatches.counts == {n: int(expected.num_minibatches.sel(stack=n)) for n in names}
    # compute() gives the same counts, computed beside the observed run
    again = Scenario(batch, features, TOPO, stack_limits=limits, config=config).compute()
    assert again.minibatches == s.minibatches


def test_within_limits_needs_one_minibatch_per_stack(data):
    batch, features = data
    s = Scenario(batch, features, TOPO)
    assert s.minibatches.counts == {st.name: 1 for st in s.plan.stacks}


def test_by_table_sums_to_the_stack(data):
    batch, features = data
    s = Scenario(batch, features, TOPO)
    per_table = s.by_table
    for st in s.plan.stacks:
        tables = [t.table.name for t in st.tables]
        total = sum(per_table["ids"].sel(stack=t).values for t in tables)
        np.testing.assert_array_equal(total, s.observed["ids"].sel(stack=st.name).values)
    unstacked = Scenario(batch, features, TOPO, stacking=None)
    table_stats = compute_stats(batch, features, TOPO, stacking=None)
    # unstacked, every table's own stack is the table: the same counts
    for t in table_stats["stack"].values:
        np.testing.assert_array_equal(unstacked.by_table["ids"].sel(stack=t).values,
                                      table_stats["ids"].sel(stack=t).values)


def test_csr_footprint_matches_the_buffers(data):
    batch, features = data
    s = Scenario(batch, features, TOPO)
    for name, buf in s.result.csr.items():
        f = s.csr_footprint[name]
        assert f["entries_per_device"] == buf.sparsecores_per_device * buf.buffer_size_per_sc
        assert f["bytes_per_device"] == sum(a[0].nbytes for a in (buf.row_pointers, buf.embedding_ids,
                                                                    buf.sample_ids, buf.gains))


def test_with_changes_only_what_is_asked_and_computes_nothing(data):
    batch, features = data
    topo = scwork.Topology.for_chip("v5p", num_chips=2)
    s = Scenario(batch, features, topo)
    s.stats
    t = s.with_(num_chips=4, max_ids_per_chip_per_sample=64, stacking=None)
    assert t.topology.num_chips == 4 and t.topology.chip == "v5p"
    assert t.config.max_ids_per_chip_per_sample == 64 and t.stacking is None
    assert s.topology.num_chips == 2 and s.stacking == "auto"      # the original is unchanged
    assert "_limited" in s.__dict__ and "_limited" not in t.__dict__
    assert "not run" in repr(t) and "within limits" in repr(s)


@pytest.mark.parametrize("bad, match", [
    ({"nope": (8, 8)}, "not a stack of this plan"),
    ({"t": (8,)}, "must be"),
    ({"t": (-1, 8)}, "positive integer"),
    ({"t": (8, 2.5)}, "positive integer"),
    ({"t": (True, 8)}, "positive integer"),
])
def test_bad_stack_limits_are_config_errors(bad, match):
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 2, 4])})
    with pytest.raises(ConfigError, match=match):
        Scenario(batch, [FeatureSpec("f", TableSpec("t", 8, 8))], scwork.Topology(1, 2), stacking=None,
                 stack_limits=bad).limits


@pytest.mark.parametrize("kwargs, match", [
    ({"batch": [[1, 2]]}, "FeatureBatch"),
    ({"topology": "v5p"}, "Topology"),
    ({"config": {"allow_id_dropping": True}}, "SparsecoreConfig"),
    ({"stack_limits": [(8, 8)]}, "mapping"),
])
def test_bad_inputs_are_config_errors(kwargs, match):
    base = {"batch": FeatureBatch.from_ragged({"f": ([0, 1], [0, 1, 2])}),
            "features": [FeatureSpec("f", TableSpec("t", 8, 8))], "topology": scwork.Topology(1, 2)}
    with pytest.raises(ConfigError, match=match):
        Scenario(**{**base, **kwargs})


def test_with_rejects_unknown_settings():
    s = Scenario(FeatureBatch.from_ragged({"f": ([0, 1], [0, 1, 2])}), [FeatureSpec("f", TableSpec("t", 8, 8))],
                 scwork.Topology(1, 2))
    with pytest.raises(ConfigError, match="unknown setting.*max_ids"):
        s.with_(max_ids=3)


@pytest.mark.parametrize("limits", [None, (64, 32), (None, None)])
def test_footprint_from_statistics_equals_the_buffers_preprocess_builds(data, limits):
    """csr_footprint is computed from compute_stats without building buffers: it must be
    what preprocess allocates, with limits, without them, over them (observed run) and
    with a static buffer."""
    batch, features = data
    names = [st.name for st in Scenario(batch, features, TOPO).plan.stacks]
    stack_limits = None if limits is None else dict.fromkeys(names, limits)
    for s in (Scenario(batch, features, TOPO, stack_limits=stack_limits),
              Scenario(batch, features, TOPO, stack_limits=stack_limits).with_(allow_id_dropping=True)):
        for name, buf in s.effective_result.csr.items():
            assert s.csr_footprint[name] == {
                "entries_per_device": buf.sparsecores_per_device * buf.buffer_size_per_sc,
                "bytes_per_device": sum(a[0].nbytes for a in (buf.row_pointers, buf.embedding_ids,
                                                              buf.sample_ids, buf.gains))}, (limits, name)
        _same(s.effective_stats, s.effective_result.stats)


def test_minibatch_counts_when_one_stack_cannot_be_split():
    """A stack with one bucket over its limit has no count; the others share the OR of their masks."""
    batch = FeatureBatch.from_ragged({"a": (np.arange(64), np.arange(0, 65, 8)),
                                      "c": (np.arange(100, 164), np.arange(0, 65, 8)),
                                      "b": (np.zeros(8, np.int64), np.arange(9))})
    features = [FeatureSpec("a", TableSpec("ta", 1000, 8)), FeatureSpec("c", TableSpec("tc", 1000, 8)),
                FeatureSpec("b", TableSpec("tb", 4, 8))]
    topo = scwork.Topology(1, 1)
    limits = {"ta": (40, None), "tc": (20, None), "tb": (2, None)}
    s = Scenario(batch, features, topo, stacking="none", stack_limits=limits)
    counts = s.minibatches.counts
    assert counts["tb"] is None and "no mini-batch split fits" in s.minibatches.notes["tb"]
    # the two that can be split, planned without tb: their one batch split
    both = minibatch(batch.select(["a", "c"]), features[:2], topo, stacking="none",
                     stack_limits={k: limits[k] for k in ("ta", "tc")})
    masks = both.assignment["stack_split_mask"].values.tolist()
    assert masks[0] != 0 and masks[1] != 0 and masks[0] != masks[1]
    assert counts["ta"] == counts["tc"] == int(both.num_minibatches.sel(stack="ta")) == \
        bin(masks[0] | masks[1]).count("1") + 1
