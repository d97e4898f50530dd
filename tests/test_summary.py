"""plan_summary: per chip memory and load, partition imbalance and divergence, limits, critical path."""

from __future__ import annotations

import math

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats
from scwork.summary import plan_summary

TOPO = scwork.Topology.for_chip("v5p", num_chips=2)          # 2 devices x 4 SCs: P = 8
FEATURES = [FeatureSpec("f", TableSpec("t", 4096, 16, max_ids_per_partition=512, max_unique_ids_per_partition=512))]


def _stats(ids_per_sample):
    B = 64
    ids = np.concatenate([np.asarray(ids_per_sample(i)) for i in range(B)])
    splits = np.concatenate([[0], np.cumsum([len(ids_per_sample(i)) for i in range(B)])])
    batch = FeatureBatch.from_ragged({"f": (ids, splits)})
    return compute_stats(batch, FEATURES, TOPO, stacking=None)


def test_one_hot_partition_has_the_largest_divergence():
    # every id is a multiple of P = 8: partition 0 receives everything
    s = plan_summary(FEATURES, TOPO, batch_size=64, stacking=None, stats=_stats(lambda i: [8 * i, 8 * i + 64]))
    assert s.partition_imbalance == pytest.approx(8.0)
    assert s.partition_divergence_bits == pytest.approx(math.log2(8))
    assert s.per_chip["ids_received"].values.tolist() == [128, 0]   # partitions 0-3 are chip 0's
    assert s.per_chip["load_vs_mean"].values.tolist() == [2.0, 0.0]


def test_uniform_load_has_no_divergence():
    s = plan_summary(FEATURES, TOPO, batch_size=64, stacking=None, stats=_stats(lambda i: list(range(8))))
    assert s.partition_imbalance == pytest.approx(1.0)
    assert s.partition_divergence_bits == pytest.approx(0.0)
    assert s.fits


def test_limits_and_memory_columns_come_from_the_engine():
    stats = _stats(lambda i: [8 * i, 8 * i + 64])
    s = plan_summary(FEATURES, TOPO, batch_size=64, stacking=None, stats=stats)
    report = scwork.memory.plan(FEATURES, TOPO, batch_size=64, stacking=None, stats=stats)
    assert int(s.per_chip["hbm_peak_bytes"].values[0]) == report.summary()["peak_hbm_bytes"]
    assert int(s.per_stack["observed_max_ids"].sel(stack="t")) == int(stats["max_ids_per_partition"].max())
    assert bool(s.per_stack["within_limits"].sel(stack="t"))
    tight = plan_summary(FEATURES, TOPO, batch_size=64, stacking=None, stats=stats, stack_limits={"t": (8, 8)})
    assert not tight.fits and "OVER" in str(tight)


def test_critical_path_is_the_step_models():
    s = plan_summary(FEATURES, TOPO, batch_size=64, stacking=None, stats=_stats(lambda i: list(range(8))),
                     tc_forward_s=1e-3, tc_backward_s=2e-3)
    path = dict(s.critical_path)
    assert path["tc_forward"] == pytest.approx(1e-3) and path["tc_backward"] == pytest.approx(2e-3)
    assert s.step.sequential_step_time == pytest.approx(sum(path.values()), rel=1e-3)
    assert "host" not in path and "overlaps with the previous step" in str(s)   # host hides under the device
    text = str(s)
    assert "critical path" in text and "bottleneck" in text and "ms" in text
    assert "<table>" in s._repr_html_()


def test_without_ids_the_load_columns_are_absent():
    s = plan_summary(FEATURES, TOPO, batch_size=64, stacking=None)
    assert "ids_received" not in s.per_chip and s.partition_imbalance is None and s.step is None
    assert str(s).splitlines()[0].startswith("chip")


def test_stats_of_another_plan_are_a_config_error():
    other = [FeatureSpec("f", TableSpec("u", 4096, 16))]
    batch = FeatureBatch.from_ragged({"f": (np.arange(64), np.arange(65))})
    with pytest.raises(ConfigError, match="no stack 't'"):
        plan_summary(FEATURES, TOPO, batch_size=64, stacking=None, stats=compute_stats(batch, other, TOPO))


# -- regressions of issue 22 ----------------------------------------------------------------------------
def test_unknown_keywords_and_odd_arguments_name_plan_summary():
    import xarray as xr

    from scwork.errors import ConfigError
    from scwork.sharding import FeatureSpec, TableSpec
    from scwork.summary import plan_summary

    topo = scwork.Topology.for_chip("v5p", num_chips=2)
    features = [FeatureSpec("f", TableSpec("t", 4096, 16, max_ids_per_partition=256,
                                           max_unique_ids_per_partition=256))]
    with pytest.raises(ConfigError, match=r"plan_summary\(\) got unknown keyword 'bogus'"):
        plan_summary(features, topo, batch_size=256, bogus=1)
    for kwargs in ({"tc_forward_s": float("nan")}, {"tc_backward_s": -1.0}, {"tc_forward_s": "1"},
                   {"stats": 5}, {"stats": xr.Dataset()},
                   {"stats": xr.Dataset({"ids": (("stack",), [1.5])}, coords={"stack": ["t"]})}):
        with pytest.raises(ConfigError, match="plan_summary"):
            plan_summary(features, topo, batch_size=256, **kwargs)
    with pytest.raises(ConfigError, match="plan_summary: topology"):
        plan_summary(features, (2, 4), batch_size=256)
    assert plan_summary(features, topo, batch_size=256, dtype="bf16").fits


def test_stack_limits_that_are_not_a_dict_are_config_errors():
    """plan_summary(stack_limits=5) reached plan_stacking's 'stack in 5' (TypeError; found by the fuzz run)."""
    from scwork.sharding import FeatureSpec, TableSpec

    topo = scwork.Topology.for_chip("v5p", num_chips=2)
    features = [FeatureSpec("f", TableSpec("t", 4096, 16, max_ids_per_partition=256,
                                           max_unique_ids_per_partition=256))]
    for limits in (5, ["t"], np.array([1, 2])):
        with pytest.raises(ConfigError, match="stack_limits must be a dict"):
            plan_summary(features, topo, batch_size=256, stack_limits=limits)
