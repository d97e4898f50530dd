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


def test_percentile_above_100_is_refused():
    ds = _step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]])
    with pytest.raises(ConfigError, match=r"percentile must be a number in \(0, 100\]"):
        tune_limits(ds, method="percentile", percentile=100.5)
    assert tune_limits(ds, method="percentile", percentile=100).percentile == 100.0


def test_tuned_limits_caption_names_the_method_and_percentile():
    ds = _step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]])
    assert "TunedLimits (percentile 50, round_to=8, 2 steps)" in tune_limits(ds, method="percentile",
                                                                              percentile=50)._repr_html_()
    assert "TunedLimits (max, round_to=8, 2 steps)" in tune_limits(ds)._repr_html_()


def test_static_partition_buffer_bytes_of_one_limit_is_an_int():
    from scwork.sharding.limits import static_partition_buffer_bytes

    got = static_partition_buffer_bytes(100)            # round_up(100, 8) = 104 entries of 12 bytes
    assert type(got) is int and got == 1248


def test_merged_limits_keep_their_units():
    from scwork.sharding.limits import merge_step_stats

    dims = ("step", "stack")
    ds = xr.Dataset({name: (dims, np.array([[8], [16]]), {"units": unit})
                     for name, unit in (("max_ids_per_partition", "ids"), ("max_unique_ids_per_partition", "ids"),
                                        ("required_buffer_size_per_sc", "CSR entries"))},
                    coords={"stack": ["t"]})
    merged = merge_step_stats(ds)
    assert merged["max_ids_per_partition"].values.tolist() == [16]
    assert merged["required_buffer_size_per_sc"].attrs["units"] == "CSR entries"


def test_default_candidates_are_the_rounded_percentiles_of_the_observed_maxima():
    # observed max ids per step 16 and 1000: percentiles 0, 25, 50, 75, 90, 95, 99, 100 are 16, 262,
    # 508, 754, 901.6, 950.8, 990.16, 1000; up to whole ids and then to a multiple of 8
    ds = _step_stats([[16, 0], [1000, 0]], [[1, 0], [1, 0]])
    assert tradeoff(ds)["candidate"].values.tolist() == [16, 264, 512, 760, 904, 952, 992, 1000]


def test_estimate_peak_worked_by_hand():
    # B = 64 over 1 device x 4 SparseCores, valency 1.1: L = 16 * 1.1 = 17.6 ids per SparseCore, P = 4;
    # peak = 0.2 * 17.6 + 0.8 * 17.6 / 4 + 2 * sqrt(4.4) = 3.52 + 3.52 + 4.1952354 = 11.2352354
    est = estimate_limits(64, 1.1, scwork.Topology(1, 4))
    assert est["ids_per_sc"] == pytest.approx(17.6)
    assert est["peak"] == pytest.approx(11.2352354, abs=1e-6)
    assert est["max_ids_per_partition"] == 16            # round_up(1.25 * 11.24 = 14.04, 8)
    assert est["max_unique_ids_per_partition"] == 8      # round_up(7.02, 8)


@pytest.mark.parametrize("headroom", [float("inf"), float("nan"), 0.5])
def test_headroom_must_be_finite_and_at_least_one(headroom):
    ds = _step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]])
    with pytest.raises(ConfigError, match="headroom must be a finite number >= 1"):
        tune_limits(ds, headroom=headroom)


def test_tuned_limits_repr_lists_every_stack():
    # observed max ids 5 and 9, max unique 2 and 4: method max proposes 16 and 8 (at least round_to 8)
    text = repr(tune_limits(_step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]])))
    assert text.splitlines() == ["TunedLimits(max, round_to=8, 2 steps)",
                                 "  t: max_ids_per_partition 16, max_unique_ids_per_partition 8, "
                                 "steps needing mini-batching 0.0%"]


def test_collect_stats_refuses_a_later_step_with_a_smaller_batch():
    from scwork.errors import InputError
    from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
    from scwork.sharding.limits import collect_stats

    big = FeatureBatch.from_ragged({"f": ([1, 2, 3, 4], [0, 1, 2, 3, 4])})
    small = FeatureBatch.from_ragged({"f": ([1, 2], [0, 1, 2])})
    with pytest.raises(InputError, match="step 1: batch size 2 differs from the first step's 4"):
        collect_stats([big, small], [FeatureSpec("f", TableSpec("t", 64, 8))], scwork.Topology(1, 1), stacking=None)


def test_percentile_method_defaults_to_the_99th():
    assert tune_limits(_step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]]), method="percentile").percentile == 99.0


def test_tradeoff_buffer_bytes_worked_by_hand():
    # 1 SparseCore, 2 partitions: candidate 8 -> 8 * S * P = 16 entries of 12 bytes; 9 -> 16 * 2 = 32 entries
    t = tradeoff(_step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]]), [8, 9])
    assert t["coo_buffer_bytes_per_device"].sel(stack="t").values.tolist() == [192, 384]


@pytest.mark.parametrize("percentile", [True, "50", 0, -5])
def test_percentile_must_be_a_number_in_range(percentile):
    with pytest.raises(ConfigError, match=r"percentile must be a number in \(0, 100\]"):
        tune_limits(_step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]]), method="percentile", percentile=percentile)


@pytest.mark.parametrize("valency", [True, "2", float("inf"), -1.0])
def test_estimate_refuses_a_bool_string_infinite_or_negative_valency(valency):
    with pytest.raises(ConfigError, match="valency must be a finite number >= 0"):
        estimate_limits(64, valency, scwork.Topology(1, 4))


def test_estimate_divides_the_batch_exactly():
    # B = 65 over 2 devices x 2 SparseCores, valency 1: L = 65 / 2 / 2 = 16.25 ids (not 65 // 2 / 2 = 16)
    assert estimate_limits(65, 1.0, scwork.Topology(2, 2))["ids_per_sc"] == 16.25


@pytest.mark.parametrize("headroom", [True, "2"])
def test_headroom_must_be_a_number(headroom):
    with pytest.raises(ConfigError, match="headroom must be a finite number >= 1"):
        tune_limits(_step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]]), headroom=headroom)


def test_collect_stats_reads_no_batch_past_max_steps():
    from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
    from scwork.sharding.limits import collect_stats

    def batches():
        batch = FeatureBatch.from_ragged({"f": ([1, 2], [0, 1, 2])})
        yield batch
        yield batch
        raise AssertionError("collect_stats read a batch past max_steps")

    ds = collect_stats(batches(), [FeatureSpec("f", TableSpec("t", 64, 8))], scwork.Topology(1, 1), stacking=None,
                       max_steps=2)
    assert ds.sizes["step"] == 2


def test_tradeoff_dropped_share_of_a_stack_without_ids_is_zero():
    t = tradeoff(_step_stats([[0, 0], [0, 0]], [[0, 0], [0, 0]]), [8])
    assert t["dropped_pairs_share"].sel(stack="t").values.tolist() == [0.0]


def test_tradeoff_candidate_checks_at_their_boundaries():
    ds = _step_stats([[3, 5], [9, 1]], [[2, 2], [4, 1]])
    for bad in ([0, 8], [[8, 16]], [1.5, 8]):
        with pytest.raises(ConfigError, match="candidates must be a non-empty list of positive ints"):
            tradeoff(ds, bad)
    assert tradeoff(ds, [1, 8], unique_candidates=[1, 8])["candidate"].values.tolist() == [1, 8]
    with pytest.raises(ConfigError, match="one per candidate"):
        tradeoff(ds, [4, 8], unique_candidates=[4, 8, 16])


def test_max_method_takes_the_maximum_not_a_percentile():
    # observed max ids 0 and 800: the maximum is 800 (the 99th percentile would be 792)
    tuned = tune_limits(_step_stats([[0, 0], [800, 0]], [[0, 0], [8, 0]]))
    assert tuned.dataset["max_ids_per_partition"].values.tolist() == [800]


def test_coo_buffer_bytes_of_one_limit_is_an_int():
    from scwork.sharding.limits import coo_buffer_bytes_per_device

    got = coo_buffer_bytes_per_device(100, scwork.Topology(4, 4))      # 104 * 4 * 16 * 12
    assert type(got) is int and got == 79872
