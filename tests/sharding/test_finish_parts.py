"""The finish batch's checks and results in parts (preprocess with many stacks and threads).

With CSR every stack is a job of its own, and its checks, CSR buffers and statistics
were one task of the finish batch: at 64 threads its longest. With more than one
thread they run as parts of consecutive stacks (``engine._result_parts``) beside one
task that fills the statistics; their errors are raised after the batch, the one a
single task over every stack in order raises. Each test compares with one thread,
where a single task does it all.
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

import scwork
from scwork.errors import InputError, LimitExceededError, StaticBufferWarning
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, preprocess
from scwork.sharding._profile import profiled

engine = importlib.import_module("scwork.sharding.engine")

TOPO = scwork.Topology(2, 2)
B = 16


@pytest.mark.parametrize("num_jobs", [0, 1, 2, 5, 6, 26, 100])
@pytest.mark.parametrize("num_threads", [1, 2, 16, 64])
def test_result_parts_cover_every_job_once_in_runs_of_at_least_three(num_jobs, num_threads):
    cuts = engine._result_parts(num_jobs, num_threads)
    assert cuts[0] == 0 and cuts[-1] == num_jobs
    sizes = np.diff(cuts)
    assert 1 <= sizes.size <= max(1, num_threads)
    if num_threads == 1 or num_jobs < 2 * engine._JOBS_PER_RESULT_PART:
        assert sizes.tolist() == [num_jobs]
    else:
        assert sizes.min() >= engine._JOBS_PER_RESULT_PART and sizes.max() - sizes.min() <= 1
        assert sizes.size == min(num_threads, num_jobs // engine._JOBS_PER_RESULT_PART)


def _call(num_tables=12, limit_on=None, zero_weights_on=(), static_on=()):
    """``num_tables`` one-feature tables (no stacking: one job each), mean combiner, weights 1 but for a
    sample of each of ``zero_weights_on`` whose weights cancel (its mean divides by 0)."""
    rng = np.random.default_rng(5)
    data, weights, feats = {}, {}, []
    for t in range(num_tables):
        lengths = rng.integers(1, 6, B)
        ids = rng.integers(0, 40, int(lengths.sum()))
        w = np.ones(ids.size, np.float32)
        if t in zero_weights_on:
            lengths[3] = 2
            ids = rng.integers(0, 40, int(lengths.sum()))
            w = np.ones(ids.size, np.float32)
            at = int(lengths[:3].sum())
            w[at:at + 2] = [1.0, -1.0]
        data[f"f{t}"] = (ids, np.concatenate([[0], np.cumsum(lengths)]))
        weights[f"f{t}"] = w
        feats.append(FeatureSpec(f"f{t}", TableSpec(
            f"t{t}", 40, 8, combiner="mean", max_ids_per_partition=1 if t == limit_on else None,
            suggested_coo_buffer_size_per_device=8 if t in static_on else None)))
    return FeatureBatch(data, weights=weights), feats


def _outcome(batch, feats, num_threads=None, profile=None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if profile is None:
                res = preprocess(batch, feats, TOPO, stacking=None, num_threads=num_threads)
            else:
                with profiled(profile):
                    res = preprocess(batch, feats, TOPO, stacking=None)
        except (InputError, LimitExceededError) as err:
            return type(err), str(err), [str(w.message) for w in caught]
    return res, [str(w.message) for w in caught if issubclass(w.category, StaticBufferWarning)]


@pytest.mark.parametrize("static_on", [(), (1, 7, 10)])
def test_results_statistics_and_warnings_in_parts_equal_one_task(static_on):
    batch, feats = _call(static_on=static_on)
    one, warned = _outcome(batch, feats, num_threads=1)
    assert len(warned) == len(static_on)
    for kwargs in ({"num_threads": 2}, {"num_threads": 16}, {"profile": 16}, {"profile": 64}):
        assert len(engine._result_parts(len(feats), kwargs.get("num_threads", kwargs.get("profile")))) > 2
        other, other_warned = _outcome(batch, feats, **kwargs)
        assert other_warned == warned, kwargs                 # the same warnings, stacks in order
        assert other.stats.equals(one.stats), kwargs
        for name, buf in one.csr.items():
            got = other.csr[name]
            assert buf.buffer_size_per_sc == got.buffer_size_per_sc
            for field in ("row_pointers", "embedding_ids", "sample_ids", "gains"):
                assert np.array_equal(getattr(buf, field), getattr(got, field), equal_nan=True), (name, field)


@pytest.mark.parametrize("limit_on, zero_weights_on, expected", [
    (9, (2,), LimitExceededError),        # a later stack's limit comes before an earlier stack's gains
    (None, (2, 10), InputError),          # of two stacks' zero divisors, the first stack's
    (None, (10,), InputError),
])
def test_the_error_of_a_call_in_parts_is_the_one_of_one_task(limit_on, zero_weights_on, expected):
    batch, feats = _call(limit_on=limit_on, zero_weights_on=zero_weights_on)
    one = _outcome(batch, feats, num_threads=1)
    assert one[0] is expected
    assert f"feature 'f{zero_weights_on[0]}'" in one[1] or expected is LimitExceededError
    for kwargs in ({"num_threads": 2}, {"num_threads": 16}, {"profile": 16}, {"profile": 64}):
        assert _outcome(batch, feats, **kwargs)[:2] == one[:2], kwargs
