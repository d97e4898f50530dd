"""The advisor's what-ifs on cases worked out by hand.

- ``_balanced`` (the partition-skew what-if) moves a source SparseCore's ids over the
  partitions evenly and must neither gain nor lose any;
- ``limits_too_high`` with unequal limits and observed ids far from observed distinct
  ids: each limit is compared with its own observation.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import scwork
from scwork.advisor import advise
from scwork.advisor._context import balanced as _balanced
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats, plan_stacking

V5P1 = scwork.Topology.for_chip("v5p", num_chips=1)          # 1 device, 4 SparseCores, P = 4


def _stats(ids, unique):
    dims = ("stack", "device", "sc", "partition")
    return xr.Dataset({"ids": (dims, np.array(ids, np.int64), {"units": "ids"}),
                       "unique_ids": (dims, np.array(unique, np.int64), {"units": "ids"})})


def test_balanced_spreads_each_source_evenly_without_gaining_ids():
    # one stack, one device, 2 source SparseCores, P = 3
    # sc 0 sends [7, 0, 1] ids (8): 8 // 3 = 2 each, the remainder 2 to the first two: [3, 3, 2]
    # sc 1 sends [0, 0, 5] ids (5): [2, 2, 1]; distinct ids [4, 0, 1] (5) -> [2, 2, 1], [0, 0, 5] -> [2, 2, 1]
    out = _balanced(_stats([[[[7, 0, 1], [0, 0, 5]]]], [[[[4, 0, 1], [0, 0, 5]]]]))
    assert out["ids"].values.tolist() == [[[[3, 3, 2], [2, 2, 1]]]]
    assert out["unique_ids"].values.tolist() == [[[[2, 2, 1], [2, 2, 1]]]]
    assert out["ids"].dims == ("stack", "device", "sc", "partition")


def test_balanced_keeps_totals_and_never_more_distinct_than_ids():
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 50, (2, 2, 3, 5))
    unique = np.minimum(ids, rng.integers(0, 50, ids.shape))
    out = _balanced(_stats(ids, unique))
    assert (out["ids"].values.sum(axis=-1) == ids.sum(axis=-1)).all()
    spread = out["ids"].values.max(axis=-1) - out["ids"].values.min(axis=-1)
    assert spread.max() <= 1
    assert (out["unique_ids"].values <= out["ids"].values).all()
    assert (out["unique_ids"].values.sum(axis=-1) <= unique.sum(axis=-1)).all()
    # an already even source is left as it is
    even = _balanced(_stats([[[[2, 2, 2]]]], [[[[1, 1, 1]]]]))
    assert even["ids"].values.tolist() == [[[[2, 2, 2]]]] and even["unique_ids"].values.tolist() == [[[[1, 1, 1]]]]


def _advice(max_ids, max_unique):
    # 64 samples, each with ids 0, 1, 2, 3: each of the 4 source SparseCores (16 samples)
    # sends id p to partition p once per sample: 16 ids, 1 distinct id per partition.
    batch = FeatureBatch.from_ragged({"f": (np.tile(np.arange(4), 64), np.arange(0, 257, 4))})
    table = TableSpec("t", 64, 16, max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_unique)
    feats = [FeatureSpec("f", table)]
    plan = plan_stacking(feats, V5P1, stacking=None)
    stats = compute_stats(batch, feats, V5P1, stacking=plan, backend="numpy")
    assert int(stats["max_ids_per_partition"].max()) == 16
    assert int(stats["max_unique_ids_per_partition"].max()) == 1
    return advise(stats=stats, plan=plan).get("limits_too_high")


def test_limits_too_high_only_the_distinct_limit():
    # max_ids 24 <= 2 x 16 observed: fine; max_unique 24 > 2 x 1 observed: too high
    (f,) = _advice(24, 24)
    assert f.evidence["configured_max_ids_per_partition"] == 24
    assert f.evidence["observed_max_ids_per_partition"] == 16
    assert f.evidence["configured_max_unique_ids_per_partition"] == 24
    assert f.evidence["observed_max_unique_ids_per_partition"] == 1
    # suggestion: the observed values rounded up to 8
    assert "max_ids_per_partition=16, max_unique_ids_per_partition=8" in f.fix
    # HBM peak saved per chip (the memory model re-run with limits (16, 8)): the peak is the
    # SparseCore backward pass, whose stack is 3 x 16 wide x U x LRC 4 x 4 B per SparseCore,
    # U from 24 to 8; and the CSR input, round_up(max_ids, 8) x P x 12 B, from 24 to 16
    # entries per partition; 4 SparseCores per chip.
    assert f.gain_bytes == 4 * (3 * 16 * (24 - 8) * 4 * 4 + (24 - 16) * 4 * 12) == 50688
    assert "stack_limits (16, 8)" in f.gain_basis


def test_limits_too_high_only_the_ids_limit():
    # max_ids 40 > 2 x 16: too high; max_unique 2 = 2 x 1: not above the ratio
    (f,) = _advice(40, 2)
    assert f.evidence["configured_max_ids_per_partition"] == 40
    assert "max_ids_per_partition=16, max_unique_ids_per_partition=8" in f.fix


@pytest.mark.parametrize("max_ids,max_unique", [(24, 2), (32, 2), (32, 1), (17, 2)])
def test_limits_not_too_high(max_ids, max_unique):
    # each limit at most 2x its own observation (16 ids, 1 distinct), whatever the other
    assert _advice(max_ids, max_unique) == []
