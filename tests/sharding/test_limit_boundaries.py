"""Limits at the boundary: observed == configured fits; one more id overflows, by exactly one.

Checked on the engine itself (kernels and references, statistics and CSR buffers,
vocabulary and sample mini-batching), not only against the library in tests/oracle:
one source SparseCore (Topology(1, 1)) sends one sample's ids to one partition, so
the counts are the ids written in each test.
"""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork.errors import LimitExceededError
from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, compute_stats, preprocess
from scwork.sharding.minibatch import minibatch

ONE = scwork.Topology(1, 1)
BACKENDS = ["numba", "numpy"]


def _run(fn, ids, max_ids, max_unique, dropping=False, backend="numba", **kw):
    batch = FeatureBatch.from_ragged({"f": (np.asarray(ids), [0, len(ids)])})
    table = TableSpec("t", 64, 8, max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_unique)
    return fn(batch, [FeatureSpec("f", table)], ONE, stacking=None,
              config=SparsecoreConfig(allow_id_dropping=dropping), backend=backend, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("limits", [(8, 8), (8, 64), (64, 8)])
def test_observed_equal_to_the_limit_fits(backend, limits):
    # 8 distinct ids: 8 ids and 8 distinct ids to the one partition
    s = _run(compute_stats, range(8), *limits, backend=backend)
    assert int(s["ids"].sum()) == 8 and int(s["unique_ids"].sum()) == 8
    assert int(s["kept_ids"].sum()) == 8 and int(s["dropped_ids"].sum()) == 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("limits,which", [((7, 8), "max_ids_per_partition"),
                                          ((8, 7), "max_unique_ids_per_partition")])
def test_one_above_the_limit_raises_or_drops_one(backend, limits, which):
    with pytest.raises(LimitExceededError) as err:
        _run(compute_stats, range(8), *limits, backend=backend)
    assert err.value.limit == which and err.value.observed == 8 and err.value.configured == 7
    s = _run(compute_stats, range(8), *limits, dropping=True, backend=backend)
    assert int(s["kept_ids"].sum()) == 7 and int(s["dropped_ids"].sum()) == 1


@pytest.mark.parametrize("limits,kept", [((8, 8), 8), ((7, 8), 7), ((8, 7), 7), ((9, 9), 8)])
def test_literal_reference_cuts_at_the_limit(limits, kept):
    from scwork.sharding import plan_stacking
    from scwork.sharding._reference import reference_preprocess

    batch = FeatureBatch.from_ragged({"f": (np.arange(8), [0, 8])})
    table = TableSpec("t", 64, 8, max_ids_per_partition=limits[0], max_unique_ids_per_partition=limits[1])
    plan = plan_stacking([FeatureSpec("f", table)], ONE, stacking=None)
    ref = reference_preprocess(batch, plan, ONE, allow_id_dropping=True)["t"]
    assert ref["kept"].tolist() == [[[kept]]] and ref["dropped"] == 8 - kept
    assert ref["row_pointers"].tolist()[0][0] == kept


@pytest.mark.parametrize("backend", BACKENDS)
def test_duplicates_count_once_per_sample_at_the_limit(backend):
    # ids 0, 0, 1, 2, 3, 4, 5, 6, 7 in one sample: 8 ids after the per-sample dedup
    s = _run(compute_stats, [0, 0, 1, 2, 3, 4, 5, 6, 7], 8, 8, backend=backend)
    assert int(s["ids"].sum()) == 8 and int(s["dropped_ids"].sum()) == 0
    assert int(s["input_ids"].sum()) == 9


@pytest.mark.parametrize("backend", BACKENDS)
def test_csr_at_the_limit_holds_every_id(backend):
    r = _run(preprocess, range(8), 8, 8, backend=backend)
    csr = r.csr["t"]
    # a buffer of round_up(8, 8) * P = 8 entries, every one used; the partition ends at 8
    assert csr.embedding_ids.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert csr.sample_ids.tolist() == [[0] * 8]
    assert csr.row_pointers.tolist()[0][0] == 8
    assert int(r.stats["dropped_ids"].sum()) == 0
    # one id fewer allowed, with dropping: the last id (7) is cut, its slot padded
    cut = _run(preprocess, range(8), 7, 8, dropping=True, backend=backend).csr["t"]
    assert cut.embedding_ids.tolist()[0][:7] == [0, 1, 2, 3, 4, 5, 6]
    assert cut.row_pointers.tolist()[0][0] == 7


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("strategy", ["vocabulary", "sample"])
def test_minibatching_at_the_limit_needs_one_minibatch(backend, strategy):
    batch = FeatureBatch.from_ragged({"f": (np.arange(8), [0, 4, 8])})      # 2 samples of 4 ids
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=8, max_unique_ids_per_partition=8))]
    mb = minibatch(batch, feats, ONE, stacking=None, strategy=strategy, bucket_hash="identity", backend=backend)
    assert int(mb.num_minibatches.sel(stack="t")) == 1
    tight = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=7, max_unique_ids_per_partition=8))]
    mb = minibatch(batch, tight, ONE, stacking=None, strategy=strategy, bucket_hash="identity", backend=backend)
    assert int(mb.num_minibatches.sel(stack="t")) == 2
