"""Mini-batching on tiny cases worked out by hand: bucket of every id, mini-batches, contents.

tests/sharding/test_minibatch.py compares kernels with their references; a formula
wrong in both (the stacked column id, say) passes there. Here every expected value
is written out from the definitions of jax-tpu-embedding
(``CooFormat::GetColId``: ``col_id = p + P * (id // P + row_offset_in_shard)`` with
``p = (id + col_shift) % P``; ``ComputeMinibatchingSplit``: a tree node is split when
its two children's counts add up above the limit), with the identity bucket hash
(``bucket = col_id & (num_buckets - 1)``, the hash the library's own tests use).
The real library (its HighwayHash buckets) is compared in tests/oracle.

The stack of both cases: Topology(1, 2), so P = 2 partitions and 2 source
SparseCores; table ``a`` (24 rows: padded to round_up(24, 8 * P) = 32, 16 rows per
shard) then table ``b`` (8 rows) with rotation 1, so ``b`` has row_offset_in_shard 16
and col_shift 1.

======  =========================  =========  ==============  ======
table   id                          p          q + row_offset  col_id
======  =========================  =========  ==============  ======
a       0                           0          0               0
a       5                           1          2               5
a       17                          1          8               17
a       19                          1          9               19
b       2                           (2+1)%2=1  1 + 16 = 17     35
b       4                           1          2 + 16 = 18     37
b       7                           0          3 + 16 = 19     38
======  =========================  =========  ==============  ======

(``p + P*q + row_offset``, a wrong grouping, would give b's ids 19, 21 and 22.)
"""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, plan_stacking
from scwork.sharding import _minibatch_kernels as K
from scwork.sharding.minibatch import bucket_of, minibatch

TOPOLOGY = scwork.Topology(1, 2)
FEATURES = [FeatureSpec("fa", TableSpec("a", 24, 8)), FeatureSpec("fb", TableSpec("b", 8, 8))]


def _plan(max_ids, max_unique):
    return plan_stacking(FEATURES, TOPOLOGY, [["a", "b"]], rotation=1, stack_limits={"a_b": (max_ids, max_unique)})


def test_the_stack_is_the_one_of_the_table():
    (stack,) = _plan(1, 1).stacks
    assert [(t.name, t.row_offset_in_shard, t.shard_rotation) for t in stack.tables] == [("a", 0, 0), ("b", 16, 1)]


@pytest.mark.parametrize("backend", ["public", "kernel", "reference"])
def test_column_ids_of_the_table(backend):
    ids_b = np.array([2, 4, 7], np.int64)
    if backend == "public":
        got = bucket_of(ids_b, 2, 1, 16, num_buckets=64, bucket_hash="identity")
    else:
        got = np.empty(3, np.int64)
        fn = K.ids_to_buckets if backend == "kernel" else K.ids_to_buckets_reference
        fn(ids_b, 2, 1, 16, 64, K.HASH_IDENTITY, K.HIGHWAY_KEY, got)
    assert got.tolist() == [35, 37, 38]
    # 32 buckets fold the column ids: 35 & 31, 37 & 31, 38 & 31
    assert bucket_of(ids_b, 2, 1, 16, num_buckets=32, bucket_hash="identity").tolist() == [3, 5, 6]


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_vocabulary_minibatches_by_hand(backend):
    # sample 0: fa [0, 17], fb [2]; sample 1: fa [5], fb [7, 4]. One sample per
    # source SparseCore (B = 2, G * S = 2), so each sample is its own slice.
    batch = FeatureBatch.from_ragged({"fa": ([0, 17, 5], [0, 2, 3]), "fb": ([2, 7, 4], [0, 1, 3])})
    mb = minibatch(batch, FEATURES, TOPOLOGY, stacking=_plan(1, 1), bucket_hash="identity", backend=backend)
    a = mb.assignment.sel(stack="a_b")
    # bucket contents (ids after per-sample dedup, whole batch): one id per column id
    expected = np.zeros(64, np.int64)
    expected[[0, 5, 17, 35, 37, 38]] = 1
    assert a["bucket_ids"].values.tolist() == expected.tolist()
    # Streams (slice, partition) over the limit 1: slice 0 to partition 1 holds
    # buckets 17 and 35, slice 1 to partition 1 holds 5 and 37; in both the first
    # node whose children are both non-empty is the root (buckets 0-31 | 32-63).
    # Every other stream has one id. So only the root is split: 2 mini-batches.
    assert int(mb.num_minibatches.sel(stack="a_b")) == 2
    assert a["split_mask"].item() == 1 << 62                     # the root is the last of the 63 nodes
    assert a["split_positions"].item() == 1 << 31                # cut between buckets 31 and 32
    assert a["minibatch_of_bucket"].values.tolist() == [0] * 32 + [1] * 32
    assert mb.minibatch_of("fa").tolist() == [0, 0, 0]
    assert mb.minibatch_of("fb").tolist() == [1, 1, 1]
    contents = [(b.ids("fa").tolist(), b.ids("fb").tolist()) for b in mb.batches()]
    assert contents == [([0, 17, 5], []), ([], [2, 7, 4])]
    # per mini-batch, ids each source SparseCore sends to each partition
    ids = mb.stats["ids"].sel(stack="a_b", device=0).values          # (minibatch, sc, partition)
    assert ids.tolist() == [[[1, 1], [0, 1]], [[0, 1], [1, 1]]]


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_vocabulary_limit_two_needs_one_minibatch_and_limit_equal_is_kept(backend):
    batch = FeatureBatch.from_ragged({"fa": ([0, 17, 5], [0, 2, 3]), "fb": ([2, 7, 4], [0, 1, 3])})
    # every stream holds at most 2 ids: observed == limit fits, no split
    mb = minibatch(batch, FEATURES, TOPOLOGY, stacking=_plan(2, 2), bucket_hash="identity", backend=backend)
    assert int(mb.num_minibatches.sel(stack="a_b")) == 1
    assert mb.assignment["split_mask"].sel(stack="a_b").item() == 0


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_sample_minibatches_tell_tables_apart(backend):
    # B = 4: slice 0 is samples 0 and 1, slice 1 is samples 2 and 3.
    # sample 0: fa [19], fb [2] -> partition 1 gets column ids 19 and 35: 2 distinct.
    # sample 1: fa [17] -> partition 1 gets 17: with sample 0, 3 distinct > 2.
    # So slice 0 needs two runs ([0], [1]); slice 1 (samples 2, 3: fa [0], fb [7])
    # sends 0 and 38 to partition 0: 2 distinct, one run. The stack needs 2 mini-batches.
    # (Were b's column ids computed as p + P*q + row_offset, fb's 2 would be 19 too,
    # the same id as fa's 19, and slice 0 would fit in one run.)
    batch = FeatureBatch.from_ragged({"fa": ([19, 17, 0], [0, 1, 2, 3, 3]), "fb": ([2, 7], [0, 1, 1, 2, 2])})
    mb = minibatch(batch, FEATURES, TOPOLOGY, stacking=_plan(8, 2), strategy="sample", backend=backend)
    assert int(mb.num_minibatches.sel(stack="a_b")) == 2
    a = mb.assignment.sel(stack="a_b", device=0)
    assert a["runs_per_sc"].values.tolist() == [2, 1]
    assert a["run_start"].values.tolist() == [[0, 1], [0, -1]]
    assert a["run_stop"].values.tolist() == [[1, 2], [2, -1]]
    assert mb.minibatch_of("fa").tolist() == [0, 1, 0]
    assert mb.minibatch_of("fb").tolist() == [0, 0]
    uniq = mb.stats["unique_ids"].sel(stack="a_b", device=0).values     # (minibatch, sc, partition)
    assert uniq.tolist() == [[[0, 2], [2, 0]], [[0, 1], [0, 0]]]
