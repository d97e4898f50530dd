"""scwork.sharding.limits on statistics written out by hand (mutation-testing survivors).

One stack, two steps, one device, one SparseCore, two partitions: every observed
maximum is a number in the test.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import scwork
from scwork.errors import ConfigError
from scwork.sharding.limits import _check_positive_int, estimate_limits, tradeoff, tune_limits

DIMS = ("stack", "step", "device", "sc", "partition")


def _step_stats(ids, unique):
    """ids / unique: per step, the two partitions' counts."""
    ids = np.asarray(ids, np.int64).reshape(1, 2, 1, 1, 2)
    unique = np.asarray(unique, np.int64).reshape(1, 2, 1, 1, 2)
    return xr.Dataset(
        {"ids": (DIMS, ids), "unique_ids": (DIMS, unique),
         "observed_max_ids": (("stack", "step"), ids.max(axis=(2, 3, 4))),
         "observed_max_unique_ids": (("stack", "step"), unique.max(axis=(2, 3, 4))),
         "observed_required_buffer_size": (("stack", "step"), np.full((1, 2), 64, np.int64))},
        coords={"stack": ["t"], "step": [0, 1]})


@pytest.mark.parametrize("value", [True, False, 2.5, "8", 0, -8])
def test_positive_int_refuses_bools_floats_strings_and_non_positive(value):
    with pytest.raises(ConfigError, match="round_to must be a positive int"):
        _check_positive_int(value, "round_to")


def test_positive_int_accepts_numpy_ints():
    assert _check_positive_int(np.int32(8), "round_to") == 8


def test_a_topology_without_sparsecores_is_refused():
    with pytest.raises(ConfigError, match="has no SparseCore"):
        estimate_limits(64, 2.0, scwork.Topology(1, 0))


def test_percentile_is_recorded_only_for_the_percentile_method():
    ds = _step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]])
    by_max = tune_limits(ds)
    assert by_max.dataset.attrs["percentile"] == -1.0 and by_max.percentile is None
    by_pct = tune_limits(ds, method="percentile", percentile=50)
    assert by_pct.dataset.attrs["percentile"] == 50.0 and by_pct.percentile == 50.0


def test_tradeoff_candidates_must_be_a_non_empty_list_of_positive_ints():
    ds = _step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]])
    with pytest.raises(ConfigError, match="candidates must be a non-empty list"):
        tradeoff(ds, [])
    for bad in ([0, 8], [1.5, 8], [-1, 8]):
        with pytest.raises(ConfigError, match="unique_candidates must be positive ints"):
            tradeoff(ds, [4, 8], unique_candidates=bad)


def test_tradeoff_a_maximum_equal_to_the_candidate_is_not_over():
    # observed max unique ids per step: 2 and 4; candidate 4 is reached, never exceeded; 3 is exceeded once
    ds = _step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]])
    t = tradeoff(ds, [9, 10], unique_candidates=[4, 3])
    assert t["share_steps_over_max_unique_ids"].sel(stack="t").values.tolist() == [0.0, 0.5]
    assert t["share_steps_over_max_ids"].sel(stack="t").values.tolist() == [0.0, 0.0]    # 9 reached, not over
