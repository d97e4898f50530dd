"""The advisor's shared inputs (scwork.advisor._context) against values written out by hand.

The configured limits a check compares with come from the plan and from the
statistics, where -1 stands for "no limit" (scwork.plan writes it so); the observed
limits are the largest counts over devices, SparseCores and partitions.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import xarray as xr

from scwork.advisor._context import configured_limits, observed_limits


def _stats(configured_ids, configured_unique, ids=None, unique=None):
    shape = (2, 1, 1, 2)
    dims = ("stack", "device", "sc", "partition")
    return xr.Dataset(
        {"ids": (dims, np.zeros(shape, np.int64) if ids is None else np.asarray(ids).reshape(shape)),
         "unique_ids": (dims, np.zeros(shape, np.int64) if unique is None else np.asarray(unique).reshape(shape)),
         "configured_max_ids_per_partition": (("stack",), np.asarray(configured_ids)),
         "configured_max_unique_ids_per_partition": (("stack",), np.asarray(configured_unique))},
        coords={"stack": ["a", "b"]})


def test_minus_one_in_the_statistics_means_no_limit():
    got = configured_limits(_stats([16, -1], [-1, 8]), None, None)
    assert got == {"a": (16, None), "b": (None, 8)}


def test_minus_one_falls_back_to_the_plans_limit():
    plan = SimpleNamespace(stacks=[SimpleNamespace(name="a", max_ids_per_partition=32, max_unique_ids_per_partition=4),
                                   SimpleNamespace(name="b", max_ids_per_partition=24,
                                                   max_unique_ids_per_partition=12)])
    got = configured_limits(_stats([16, -1], [-1, 8]), plan, None)
    assert got == {"a": (16, 4), "b": (24, 8)}             # the statistics win where they say something


def test_observed_limits_are_the_largest_counts_of_each_stack():
    # stack a: partitions (5, 9) ids, (3, 2) unique; stack b: (0, 7), (0, 7)
    got = observed_limits(_stats([-1, -1], [-1, -1], ids=[5, 9, 0, 7], unique=[3, 2, 0, 7]))
    assert got == {"a": (9, 3), "b": (7, 7)}


def _context(step_time_s, min_gain_fraction):
    from scwork.advisor._context import Context

    return Context(config=None, plan=None, stats=None, memory=None,
                   model=SimpleNamespace(step_time=step_time_s),
                   minibatch=None, thresholds=SimpleNamespace(min_gain_fraction=min_gain_fraction),
                   batch_size=None, dtype=None)


def test_a_gain_of_exactly_the_threshold_is_worth_offering():
    c = _context(2.0, 0.25)                 # threshold 0.5 s, exact in binary
    assert c.worth(0.5) and c.worth(0.75)
    assert not c.worth(0.4375) and not c.worth(None)
    assert not _context(None, 0.25).worth(1.0)          # no step time modelled: nothing to compare with
