"""The advisor's limit checks (scwork.advisor._limit_checks) on inputs written out by hand.

Statistics are built directly (two stacks, one device, one SparseCore, two
partitions) so every observed maximum, configured limit and drop count is a number
in the test; no step model, so no time is estimated.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import xarray as xr

from scwork.advisor._context import Context
from scwork.advisor._limit_checks import check_limits_low, limits_below_observed

DIMS = ("stack", "device", "sc", "partition")


def _stats(ids, unique, configured_ids, configured_unique, dropped=(0, 0)):
    shape = (2, 1, 1, 2)
    return xr.Dataset(
        {"ids": (DIMS, np.asarray(ids).reshape(shape)), "unique_ids": (DIMS, np.asarray(unique).reshape(shape)),
         "input_ids": (DIMS, np.asarray(ids).reshape(shape)),
         "configured_max_ids_per_partition": (("stack",), np.asarray(configured_ids)),
         "configured_max_unique_ids_per_partition": (("stack",), np.asarray(configured_unique)),
         "dropped_ids": (("stack",), np.asarray(dropped))},
        coords={"stack": ["a", "b"]})


def _context(stats, minibatch=None):
    return Context(config=None, plan=None, stats=stats, memory=None, model=None, minibatch=minibatch,
                   thresholds=SimpleNamespace(min_gain_fraction=0.01, limits_high_ratio=4.0),
                   batch_size=None, dtype=None)


def test_a_limit_equal_to_the_observed_maximum_is_not_below_it():
    assert limits_below_observed((8, 8), (8, 8)) == []
    assert limits_below_observed((8, 8), (9, 8)) == ["max_ids_per_partition"]
    assert limits_below_observed((8, 4), (8, 5)) == ["max_unique_ids_per_partition"]
    assert limits_below_observed((None, 4), (100, 4)) == [] and limits_below_observed((8, 8), None) == []


def test_dropped_ids_finding_reports_both_configured_limits():
    # stack a: observed (12, 6) over limits (10, 5), 3 ids dropped of 12 + 0 input ids
    c = _context(_stats([12, 0, 4, 4], [6, 0, 2, 2], [10, 64], [5, 64], dropped=[3, 0]))
    check_limits_low(c)
    (f,) = c.findings
    assert (f.id, f.stack, f.severity) == ("limits_too_low", "a", "warning")
    e = f.evidence
    assert (e["configured_max_ids_per_partition"], e["configured_max_unique_ids_per_partition"]) == (10, 5)
    assert (e["observed_max_ids_per_partition"], e["observed_max_unique_ids_per_partition"]) == (12, 6)
    assert e["limits_below_observed"] == ["max_ids_per_partition", "max_unique_ids_per_partition"]
    assert e["dropped_ids"] == 3 and e["dropped_share"] == 3 / 12
    assert e["num_minibatches"] == 1                                 # no mini-batch plan, no model: one
    assert f.gain_basis == "accuracy: dropped ids are lost lookups" and f.gain_s is None
    assert "max_ids_per_partition=16, max_unique_ids_per_partition=8" in f.fix     # 12 and 6 rounded up to 8


def test_per_stack_split_does_not_blame_other_stacks():
    # split_scope "stack": a stack whose own mask is 0 is still reported for its extra mini-batches
    # (only the batch-wide split makes its count the other stacks' doing)
    stats = _stats([4, 4, 4, 4], [2, 2, 2, 2], [8, 8], [8, 8])
    nmb = xr.DataArray([2, 1], dims=("stack",), coords={"stack": ["a", "b"]})
    asg = xr.Dataset({"stack_split_mask": (("stack",), [0, 1])}, coords={"stack": ["a", "b"]})
    for scope, found in (("stack", ["a"]), ("batch", [])):
        c = _context(stats, SimpleNamespace(num_minibatches=nmb, assignment=asg, split_scope=scope, stats=stats))
        check_limits_low(c)
        assert [f.stack for f in c.findings if f.id == "minibatching_overhead"] == found, scope


def test_each_stack_gets_its_own_finding():
    # stack a: 2 mini-batches its limits (8, 8) do not need; stack b: ids dropped. Both are reported.
    stats = _stats([4, 4, 12, 0], [2, 2, 6, 0], [8, 8], [8, 8], dropped=[0, 5])
    nmb = xr.DataArray([2, 1], dims=("stack",), coords={"stack": ["a", "b"]})
    asg = xr.Dataset({"stack_split_mask": (("stack",), [1, 0])}, coords={"stack": ["a", "b"]})
    c = _context(stats, SimpleNamespace(num_minibatches=nmb, assignment=asg, split_scope="stack", stats=stats))
    check_limits_low(c)
    assert [(f.id, f.stack) for f in c.findings] == [("minibatching_overhead", "a"), ("limits_too_low", "b")]


def test_dropped_share_of_a_stack_without_input_ids_is_zero():
    stats = _stats([0, 0, 0, 0], [0, 0, 0, 0], [8, 8], [8, 8], dropped=[2, 0])
    c = _context(stats)
    check_limits_low(c)
    (f,) = c.findings
    assert f.evidence["dropped_share"] == 0.0


def test_limits_high_counts_an_observed_maximum_of_one_as_one():
    from scwork.advisor._limit_checks import check_limits_high

    # observed (1, 1); ratio 4: max_ids 4 is not above 4 * 1, max_unique 6 is: one finding, suggesting 8 and 8
    c = _context(_stats([1, 0, 1, 0], [1, 0, 1, 0], [4, 4], [6, 4]))
    check_limits_high(c)
    (f,) = c.findings
    assert (f.id, f.stack) == ("limits_too_high", "a")
    assert "towards max_ids_per_partition=8, max_unique_ids_per_partition=8" in f.fix


def test_statistics_given_win_over_the_minibatch_plans_and_stand_in_for_missing_ones():
    stats = _stats([4, 4, 4, 4], [2, 2, 2, 2], [8, 8], [8, 8])
    nmb = xr.DataArray([2, 1], dims=("stack",), coords={"stack": ["a", "b"]})
    asg = xr.Dataset({"stack_split_mask": (("stack",), [1, 0])}, coords={"stack": ["a", "b"]})
    # statistics passed, the plan's own absent: the passed ones are read
    c = _context(stats, SimpleNamespace(num_minibatches=nmb, assignment=asg, split_scope="stack", stats=None))
    check_limits_low(c)
    assert [(f.id, f.stack) for f in c.findings] == [("minibatching_overhead", "a")]
    assert c.findings[0].evidence["observed_max_ids_per_partition"] == 4
    # no statistics passed: the mini-batch plan's are read
    c = _context(None, SimpleNamespace(num_minibatches=nmb, assignment=asg, split_scope="stack", stats=stats))
    check_limits_low(c)
    assert c.findings[0].evidence["observed_max_ids_per_partition"] == 4


def test_batch_split_blames_only_stacks_whose_own_mask_is_empty():
    # split_scope "batch": a (mask 0) is cut by b's bits and not reported; b (mask 1) is
    stats = _stats([4, 4, 4, 4], [2, 2, 2, 2], [8, 8], [8, 8])
    nmb = xr.DataArray([2, 2], dims=("stack",), coords={"stack": ["a", "b"]})
    asg = xr.Dataset({"stack_split_mask": (("stack",), [0, 1])}, coords={"stack": ["a", "b"]})
    c = _context(stats, SimpleNamespace(num_minibatches=nmb, assignment=asg, split_scope="batch", stats=stats))
    check_limits_low(c)
    assert [(f.id, f.stack) for f in c.findings] == [("minibatching_overhead", "b")]


class _TwoStackModel:
    """A step model stand-in: 0.5 s + 0.25 s per mini-batch of stack b + 0.1 ms per mini-batch of stack a."""

    stacks = ["a", "b"]

    def __init__(self, nmb):
        self.nmb = dict(nmb)
        self.detail = {"num_minibatches": [self.nmb["a"], self.nmb["b"]]}
        self._inputs = {"stats": None}
        self.step_time = 0.5 + 0.25 * self.nmb["b"] + 1e-4 * self.nmb["a"]

    def replace(self, num_minibatches):
        return _TwoStackModel(num_minibatches)


def test_a_stack_not_worth_a_finding_does_not_hide_the_next_one():
    # both stacks run in 2 mini-batches with limits below what they see; one mini-batch saves stack a
    # 0.1 ms (under 1% of the step: not offered) and stack b 0.25 s (offered)
    stats = _stats([12, 0, 12, 0], [6, 0, 6, 0], [8, 8], [4, 4])
    model = _TwoStackModel({"a": 2, "b": 2})
    model._inputs["stats"] = stats
    c = Context(config=None, plan=None, stats=stats, memory=None, model=model, minibatch=None,
                thresholds=SimpleNamespace(min_gain_fraction=0.01, limits_high_ratio=4.0), batch_size=None, dtype=None)
    check_limits_low(c)
    assert [(f.id, f.stack) for f in c.findings] == [("limits_too_low", "b")]
    assert abs(c.findings[0].gain_s - 0.25) < 1e-12
    assert "allow_id_dropping" not in c.findings[0].fix           # nothing dropped: no warning about it
    assert c.findings[0].gain_basis.startswith("step model re-run with stack 'b' in one mini-batch")


def test_one_minibatch_gain_with_a_batch_split_keeps_the_other_stacks_bits():
    from scwork.advisor._limit_checks import one_minibatch_gain

    # both stacks run in 3 mini-batches; their own split masks a = 0b011, b = 0b100. Without a's bits
    # every stack runs popcount(0b100) + 1 = 2; without b's, popcount(0b011) + 1 = 3: nothing saved.
    model = _TwoStackModel({"a": 3, "b": 3})
    model._inputs["stats"] = _stats([1, 1, 1, 1], [1, 1, 1, 1], [8, 8], [8, 8])
    masks = {"a": 0b011, "b": 0b100}
    assert abs(one_minibatch_gain(model, "a", masks) - (0.25 + 1e-4)) < 1e-12
    assert one_minibatch_gain(model, "b", masks) == 0.0
    assert abs(one_minibatch_gain(model, "b") - 0.5) < 1e-12          # per-stack split: b alone to 1


def test_minibatching_overhead_worth_and_wording():
    # neither stack's limits (8, 4) are below what it sees (4, 2); one mini-batch saves a 0.1 ms (not
    # offered: under 1% of the step) and b 0.25 s (offered, with the limits and maxima in the fix)
    stats = _stats([4, 4, 4, 4], [2, 2, 2, 2], [8, 8], [4, 4])
    model = _TwoStackModel({"a": 2, "b": 2})
    model._inputs["stats"] = stats
    c = Context(config=None, plan=None, stats=stats, memory=None, model=model, minibatch=None,
                thresholds=SimpleNamespace(min_gain_fraction=0.01, limits_high_ratio=4.0), batch_size=None, dtype=None)
    check_limits_low(c)
    assert [(f.id, f.stack) for f in c.findings] == [("minibatching_overhead", "b")]
    assert "its configured limits (8, 4) are not below the observed maximum (4, 2)" in c.findings[0].fix


def test_limits_too_low_fix_names_the_rounded_maximum():
    c = _context(_stats([12, 0, 4, 4], [6, 0, 2, 2], [10, 64], [5, 64], dropped=[3, 0]))
    check_limits_low(c)
    assert "max_ids_per_partition=16, max_unique_ids_per_partition=8 (observed maximum rounded up to 8)" \
        in c.findings[0].fix


def test_limits_high_treats_no_ids_as_one():
    from scwork.advisor._limit_checks import check_limits_high

    # ratio 4. Stack a sees no ids: limits (4, 4) are compared with 4 * 1, not above. Stack b sees
    # (1, 1): max_ids 6 is above 4 * 1 (and not above 4 * 2), so b alone is reported, towards (8, 8).
    c = _context(_stats([0, 0, 1, 0], [0, 0, 1, 0], [4, 6], [4, 4]))
    check_limits_high(c)
    assert [(f.id, f.stack) for f in c.findings] == [("limits_too_high", "b")]
    assert "towards max_ids_per_partition=8, max_unique_ids_per_partition=8" in c.findings[0].fix


def test_limits_high_suggests_eight_for_a_stack_without_ids():
    from scwork.advisor._limit_checks import check_limits_high

    c = _context(_stats([0, 0, 1, 0], [0, 0, 1, 0], [4, 4], [40, 4]))
    check_limits_high(c)
    assert [(f.id, f.stack) for f in c.findings] == [("limits_too_high", "a")]
    assert "towards max_ids_per_partition=8, max_unique_ids_per_partition=8" in c.findings[0].fix


def test_limits_high_skips_a_planned_stack_the_statistics_do_not_have():
    from scwork.advisor._limit_checks import check_limits_high

    # the plan also has stack "0" (sorted first), absent from the statistics: skipped, a still reported
    zero = SimpleNamespace(name="0", max_ids_per_partition=400, max_unique_ids_per_partition=400)
    plan = SimpleNamespace(stacks=[zero],
                           stack=lambda name: SimpleNamespace(embedding_dim=8), num_partitions=2,
                           topology=SimpleNamespace(sparsecores_per_chip=4))
    c = Context(config=None, plan=plan, stats=_stats([1, 0, 1, 0], [1, 0, 1, 0], [40, 4], [4, 4]), memory=None,
                model=None, minibatch=None, thresholds=SimpleNamespace(min_gain_fraction=0.01, limits_high_ratio=4.0),
                batch_size=None, dtype=None)
    check_limits_high(c)
    assert [(f.id, f.stack) for f in c.findings] == [("limits_too_high", "a")]


def test_one_dropped_id_is_reported_and_its_fix_warns_about_dropping():
    c = _context(_stats([12, 0, 4, 4], [6, 0, 2, 2], [10, 64], [5, 64], dropped=[1, 0]))
    check_limits_low(c)
    (f,) = c.findings
    assert (f.id, f.stack, f.severity) == ("limits_too_low", "a", "warning")
    assert "keep allow_id_dropping=False unless intended" in f.fix
