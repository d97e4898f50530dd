"""The engine's sort and slice kernels and their references on cases worked out by hand.

tests/sharding/test_kernels.py compares each kernel of ``scwork.sharding._kernels``
with its numpy reference on random inputs; a mistake made in both passes there. Here
every expected value is written out from the definitions, and every case runs through
the kernel and its reference alike. The cases sit where random inputs rarely land:

- a radix plan of two passes (``pbits + qbits`` of 12 to 22 bits), where the keys are
  built straight into the output buffer, and a group of two slices;
- the widest key layout (``pbits + qbits = 31``: three passes of 11 bits) in a
  histogram of exactly ``3 * 2048`` words, the size the engine allocates;
- ``bad`` is -1 when no gains are asked for, even with a zero-weight mean sample;
- an out-of-vocabulary id at flat position 0 (which a ``> 0`` test would miss);
- dropped pairs of slice 1 and of partition 1, whose record names the partition
  (``c % P`` of stream ``c = slice * P + partition``), not the slice.

Definitions (the module docstring of ``scwork.sharding._kernels``): an id ``x`` of a
table with rotation ``col_shift`` goes to partition ``p = (x + col_shift) % P`` at row
``q = x // P`` of the shard; its key is ``u << 32 | R'`` with ``u = p << qbits | q``
and ``R' = slice << lbits | (k * n + i)``. Keys are written as ``_key(u, R')``; every
other number is literal.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import scwork
from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, plan_stacking
from scwork.sharding import _kernels as K

engine = importlib.import_module("scwork.sharding.engine")

SORT_GROUP = [K.sort_group, K.sort_group_reference]
SORT_SLICE = [K.sort_slice, K.sort_slice_reference]
BACKENDS = ["numba", "numpy"]      # stack_slices and stack_slices_reference


def _key(u, R):
    return (u << 32) | R


def _buffers(m):
    """keys, gains, two key/gain scratch pairs (sentinels, to see what is written) and the engine's histogram."""
    return (np.full(m, -5, np.int64), np.full(m, -5, np.float32), np.full(m, -5, np.int64),
            np.full(m, -5, np.float32), np.full(m, -5, np.int64), np.full(m, -5, np.float32),
            np.full(3 * 2048, -5, np.int64))


# --------------------------------------------------------------------------------------
# sort_group: both build buffers, both slices
# --------------------------------------------------------------------------------------
# P = 2 (pbits 1); one feature, one sample per slice (n = 1, K = 1: lbits = 0), two
# slices; sample 0 = [3], sample 1 = [2]. Id 3: p = 1, q = 1; id 2: p = 0, q = 1.
# qbits 11 (vocab 4096): 12 bits, two passes (the keys are built into ``keys``);
# qbits 2 (vocab 8): 3 bits, one pass (built into the scratch).
@pytest.mark.parametrize("vocab, qbits, expected", [
    (4096, 11, [_key(1, 1), _key(1 << 11 | 1, 0)]),    # u: id 2 -> 1, id 3 -> 2049
    (8, 2, [_key(1, 1), _key(1 << 2 | 1, 0)]),          # u: id 2 -> 1, id 3 -> 5
])
@pytest.mark.parametrize("fn", SORT_GROUP)
def test_sort_group_sorts_both_slices_with_either_build_buffer(fn, vocab, qbits, expected):
    ids = np.array([3, 2], np.int64)
    splits = np.array([[0, 1, 2]], np.int64)
    keys, gains, tk, tg, _, _, hist = _buffers(2)
    rows = np.zeros(1, np.int64)
    res = fn(ids, splits, np.ones(2, np.float32), np.zeros(1, np.int8), rows, rows, 0, 1, 2, 1, vocab, 2, 0, qbits,
             0, False, keys, gains, tk, tg, hist)
    assert tuple(int(v) for v in res) == (2, -1, -1)
    assert keys.tolist() == expected


# An id out of the vocabulary (9 >= 8) at flat position 0: m = 0, oov = 0 (nothing sorted).
@pytest.mark.parametrize("fn", SORT_GROUP)
def test_sort_group_reports_an_oov_id_at_flat_position_0(fn):
    ids = np.array([9, 1], np.int64)
    splits = np.array([[0, 1, 2]], np.int64)
    keys, gains, tk, tg, _, _, hist = _buffers(2)
    rows = np.zeros(1, np.int64)
    res = fn(ids, splits, np.ones(2, np.float32), np.zeros(1, np.int8), rows, rows, 0, 1, 2, 1, 8, 2, 0, 2, 0,
             False, keys, gains, tk, tg, hist)
    assert tuple(int(v) for v in res) == (0, 0, -1)


# A mean over the weights [0, 0] of sample 0 (feature 0 of B = 2 samples: f * B + b =
# 0) and over [0] of sample 1 (1): both have divisor 0; reported only when gains are
# asked for, the first one, -1 otherwise. Sample 0 = [3, 2], sample 1 = [1] (p 1, q 0:
# u 4, in slice 1: R' 1).
@pytest.mark.parametrize("want_gains, bad", [(False, -1), (True, 0)])
@pytest.mark.parametrize("fn", SORT_GROUP)
def test_sort_group_reports_a_zero_divisor_only_with_gains(fn, want_gains, bad):
    ids = np.array([3, 2, 1], np.int64)
    splits = np.array([[0, 2, 3]], np.int64)
    keys, gains, tk, tg, _, _, hist = _buffers(3)
    rows = np.zeros(1, np.int64)
    res = fn(ids, splits, np.zeros(3, np.float32), np.ones(1, np.int8), rows, rows, 1, 1, 2, 1, 8, 2, 0, 2, 0,
             want_gains, keys, gains, tk, tg, hist)
    assert tuple(int(v) for v in res) == (3, -1, bad)
    assert keys.tolist() == [_key(1, 0), _key(4, 1), _key(5, 0)]
    if want_gains:
        assert np.isnan(gains).all()                        # 0 / 0: meaningless, flagged by bad
    else:
        assert gains.tolist() == [-5.0, -5.0, -5.0]         # untouched


# --------------------------------------------------------------------------------------
# the widest key layout: three passes of 11 bits in a 3 * 2048-word histogram
# --------------------------------------------------------------------------------------
# P = 2, vocab 2**31 - 1: qbits = bit_length((2**31 - 2) // 2) = 30, 31 bits of u, so
# three passes of 11 bits: 3 * 2048 histogram words, no more. One sample holds
#   2147483646: p 0, q 2**30 - 1  -> u = 1073741823 (low 11 bits 2047)
#   5:          p 1, q 2          -> u = 2**30 | 2 = 1073741826 (low 11 bits 2)
#   2048:       p 0, q 1024       -> u = 1024 (low 11 bits 1024)
# so every pass reorders them. lbits 0, R' 0.
WIDE_IDS = [2147483646, 5, 2048]
WIDE_SORTED = [_key(1024, 0), _key(1073741823, 0), _key(1073741826, 0)]


@pytest.mark.parametrize("fn", SORT_SLICE)
def test_sort_slice_of_the_widest_keys_fits_the_engines_histogram(fn):
    ids = np.array(WIDE_IDS, np.int64)
    splits = np.array([[0, 3]], np.int64)
    keys, gains, ak, ag, bk, bg, hist = _buffers(3)
    rows = np.zeros(1, np.int64)
    res = fn(ids, splits, np.ones(3, np.float32), np.zeros(1, np.int8), rows, rows, 0, 1, 0, 2**31 - 1, 2, 0, 30,
             0, False, keys, gains, ak, ag, bk, bg, hist)
    assert tuple(int(v) for v in res) == (3, -1, -1)
    assert keys.tolist() == WIDE_SORTED


@pytest.mark.parametrize("fn", SORT_GROUP)
def test_sort_group_of_the_widest_keys_fits_the_engines_histogram(fn):
    ids = np.array(WIDE_IDS, np.int64)
    splits = np.array([[0, 3]], np.int64)
    keys, gains, tk, tg, _, _, hist = _buffers(3)
    rows = np.zeros(1, np.int64)
    res = fn(ids, splits, np.ones(3, np.float32), np.zeros(1, np.int8), rows, rows, 0, 1, 1, 1, 2**31 - 1, 2, 0,
             30, 0, False, keys, gains, tk, tg, hist)
    assert tuple(int(v) for v in res) == (3, -1, -1)
    assert keys.tolist() == WIDE_SORTED


# --------------------------------------------------------------------------------------
# stack_slices: one table of vocabulary 8 on 1 chip x 2 SparseCores (P = 2, two slices
# of n = 2 samples; qbits = bit_length(7 // 2) = 2, lbits = bit_length(2 - 1) = 1)
# --------------------------------------------------------------------------------------
def _one_table_job(rows, want_csr, max_ids=None, vocab=8, qbits=2, allow_dropping=None, max_uniq="same"):
    ids = np.array([x for r in rows for x in r], np.int64)
    splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    batch = FeatureBatch({"f": (ids, splits)})
    max_uniq = max_ids if max_uniq == "same" else max_uniq
    table = TableSpec("t", vocab, 4, max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_uniq)
    plan = plan_stacking([FeatureSpec("f", table)], scwork.Topology(1, 2), stacking=None, batch_size=4)
    config = SparsecoreConfig(allow_id_dropping=max_ids is not None if allow_dropping is None else allow_dropping)
    job = engine._StackJob(plan.stacks[0], batch, 1, 2, want_csr, config)
    assert (job.P, job.nsl, job.n, int(job.g_shift[0]), int(job.g_qbits[0]), job.lbits) == (2, 2, 2, 0, qbits, 1)
    job.ulist = np.full(job.ulist_size, -7, np.int64)
    if want_csr:
        job.emb, job.smp = np.full(job.out_size, -3, np.int32), np.full(job.out_size, -3, np.int32)
        job.gout = np.full(job.out_size, -3, np.float32)
    else:                                     # as the engine: one-entry arrays when nothing is written
        job.emb, job.smp, job.gout = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32)
    scratch = {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64)
               for k, v in job.scratch_needs().items()}
    return batch, job, scratch


# Ids >= 8 at flat positions 0 or 1 (slice 0) and 3 (slice 1): the first is kept.
@pytest.mark.parametrize("rows, first", [([[9, 1], [2], [10], [3]], 0), ([[1, 9], [2], [10], [3]], 1)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_keeps_the_first_oov_id(backend, rows, first):
    batch, job, sc = _one_table_job(rows, want_csr=False)
    out = job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    assert out["oov"].tolist() == [first]
    # neither failing slice was counted
    assert job.pairs.tolist() == [0, 0, 0, 0]
    assert job.distinct.tolist() == [0, 0, 0, 0]


# Limit 1 (ids and unique ids per partition), ids dropped by the prefix cut:
#   slice 0 = samples [1], [3]: both in partition 1 (q 0 and 1); id 3 (row 1) dropped:
#             R' = 0 << 1 | 1 = 1, u = 1 << 2 | 1 = 5, partition 1 (stream c = 1)
#   slice 1 = samples [0], [2]: both in partition 0 (q 0 and 1); id 2 (row 1) dropped:
#             R' = 1 << 1 | 1 = 3, u = 0 << 2 | 1 = 1, partition 0 (stream c = 2)
# A drop record is (R', u, partition, raw count).
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_drop_records_name_the_partition(backend):
    batch, job, sc = _one_table_job([[1], [3], [0], [2]], want_csr=True, max_ids=1)
    assert job.cap == 16                                # round_up(1, 8) * P
    out = job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    assert out["oov"].tolist() == [-1] and out["bad"].tolist() == [-1]
    assert sorted(map(tuple, out["drops"].tolist())) == [(1, 5, 1, 1), (3, 1, 0, 1)]
    assert out["drop_g"].tolist() == [0, 0]
    assert job.dropped.tolist() == [1, 1]
    assert job.kept.tolist() == [0, 1, 1, 0]             # (slice, partition) streams 0..3
    # CSR (slice sl at 16 * sl, partition p at round_up(previous end, 8)): slice 0's
    # partition 0 is empty, so its partition 1 starts at 0 and holds id 1 (shard row 0) of
    # local row 0; slice 1's partition 0 at 16 holds id 0 (shard row 0) of local row 0
    pad = K.PAD_ID
    assert job.emb.tolist() == [0] + [pad] * 15 + [0] + [pad] * 15
    assert job.smp.tolist() == [0] + [pad] * 15 + [0] + [pad] * 15
    assert np.asarray(job.row_pointers).ravel().tolist() == [0, 1] + [8] * 6 + [1, 8] + [8] * 6


# The same table with the mean combiner and repeats inside samples, limit 1:
#   slice 0 = samples [1, 1], [3, 3] (partition 1): the pair (id 1, row 0) is kept, its
#             two gains 1/2 + 1/2 = 1; the pair (id 3, row 1) is dropped with raw count 2:
#             (R' 1, u 5, partition 1, count 2)
#   slice 1 = samples [0], [2, 0] (partition 0): pairs in (u, R') order (0, 2), (0, 3),
#             (1, 3); only the first is kept (gain 1/1); (0, 3) and (1, 3) are dropped:
#             (R' 3, u 0, partition 0, count 1) and (R' 3, u 1, partition 0, count 1)
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_cut_sums_repeats_of_kept_and_dropped_pairs(backend):
    rows = [[1, 1], [3, 3], [0], [2, 0]]
    ids = np.array([x for r in rows for x in r], np.int64)
    splits = np.array([0, 2, 4, 5, 7], np.int64)
    batch = FeatureBatch({"f": (ids, splits)})
    table = TableSpec("t", 8, 4, combiner="mean", max_ids_per_partition=1, max_unique_ids_per_partition=1)
    plan = plan_stacking([FeatureSpec("f", table)], scwork.Topology(1, 2), stacking=None, batch_size=4)
    job = engine._StackJob(plan.stacks[0], batch, 1, 2, True, SparsecoreConfig(allow_id_dropping=True))
    job.ulist = np.full(job.ulist_size, -7, np.int64)
    job.emb, job.smp = np.full(job.out_size, -3, np.int32), np.full(job.out_size, -3, np.int32)
    job.gout = np.full(job.out_size, -3, np.float32)
    sc = {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64) for k, v in job.scratch_needs().items()}
    out = job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    assert sorted(map(tuple, out["drops"].tolist())) == [(1, 5, 1, 2), (3, 0, 0, 1), (3, 1, 0, 1)]
    assert job.dropped.tolist() == [2, 2]
    assert job.kept.tolist() == [0, 1, 1, 0]
    assert job.pairs.tolist() == [0, 2, 3, 0]           # pairs before the cut, per (slice, partition)
    assert job.distinct.tolist() == [0, 2, 2, 0]
    pad = K.PAD_ID
    assert job.emb.tolist() == [0] + [pad] * 15 + [0] + [pad] * 15
    assert job.smp.tolist() == [0] + [pad] * 15 + [0] + [pad] * 15
    assert job.gout[[0, 16]].tolist() == [1.0, 1.0]
    assert np.isnan(job.gout[1:16]).all() and np.isnan(job.gout[17:]).all()


# --------------------------------------------------------------------------------------
# count_slice: one sorted run, naive view in the bitmap or in the list
# --------------------------------------------------------------------------------------
# P = 2, qbits = 2, the run of slice 1 (c0 = 2): u = 1 (p 0, q 1) in rows 0, 0 (a repeat)
# and 1; u = 5 (p 1, q 1) in row 0; u = 6 (p 1, q 2) in row 1. Pairs per partition 2 and
# 2, distinct ids 1 and 2. Bitmap word 1 (bm0): bits 1, 5, 6 = 2 + 32 + 64 = 98.
RUN = [_key(1, 0), _key(1, 0), _key(1, 1), _key(5, 0), _key(6, 1)]


@pytest.mark.parametrize("use_bitmap", [True, False])
@pytest.mark.parametrize("fn", [K.count_slice, K.count_slice_reference])
def test_count_slice_by_hand(fn, use_bitmap):
    keys = np.array(RUN + [-9], np.int64)                  # a key past m, not counted
    pairs, distinct = np.full(4, 10, np.int64), np.full(4, 20, np.int64)
    bitmap, ulist = np.zeros(3, np.int64), np.full(6, -7, np.int64)
    nu = fn(keys, 5, 2, 2, 2, pairs, distinct, use_bitmap, bitmap, 1, ulist, 2)
    assert pairs.tolist() == [10, 10, 12, 12]
    assert distinct.tolist() == [20, 20, 21, 22]
    if use_bitmap:
        assert (int(nu), bitmap.tolist(), ulist.tolist()) == (0, [0, 98, 0], [-7] * 6)
    else:
        assert (int(nu), bitmap.tolist(), ulist.tolist()) == (3, [0, 0, 0], [-7, -7, 1, 5, 6, -7])


# P = 2, qbits = 6: u = 3 (p 0), 69 = 64 | 5 and 127 = 64 | 63 (p 1): bit 3 of the first
# word from bm0 = 1, bits 5 and 63 (the sign bit) of the next.
@pytest.mark.parametrize("fn", [K.count_slice, K.count_slice_reference])
def test_count_slice_sets_bits_past_the_first_word(fn):
    keys = np.array([_key(3, 0), _key(69, 0), _key(127, 1)], np.int64)
    pairs, distinct = np.zeros(2, np.int64), np.zeros(2, np.int64)
    bitmap = np.zeros(4, np.int64)
    fn(keys, 3, 2, 6, 0, pairs, distinct, True, bitmap, 1, np.zeros(1, np.int64), 0)
    assert bitmap.tolist() == [0, 8, 32 - 2**63, 0]
    assert (pairs.tolist(), distinct.tolist()) == ([1, 2], [1, 2])


# P = 4, qbits = 30: u = 3 << 30 | 5 = 3221225477 >= 2**31, so its key is a negative
# int64 (2**64 subtracted); it counts in partition 3 all the same.
@pytest.mark.parametrize("fn", [K.count_slice, K.count_slice_reference])
def test_count_slice_reads_keys_of_a_high_partition_through_masks(fn):
    keys = np.array([_key(5, 0), _key(5, 1), _key(3221225477, 0) - 2**64], np.int64)
    pairs, distinct = np.zeros(4, np.int64), np.zeros(4, np.int64)
    ulist = np.full(3, -7, np.int64)
    nu = fn(keys, 3, 4, 30, 0, pairs, distinct, False, np.zeros(1, np.int64), 0, ulist, 0)
    assert (int(nu), pairs.tolist(), distinct.tolist()) == (2, [2, 0, 0, 1], [1, 0, 0, 1])
    assert ulist.tolist() == [5, 3221225477, -7]


# --------------------------------------------------------------------------------------
# stack_slices with the naive view in a bitmap (the engine passes lists; the kernel keeps
# both) and the CSR without limits (its fast path)
# --------------------------------------------------------------------------------------
# Vocabulary 256 (qbits = bit_length(255 // 2) = 7), samples [1], [3] | [0], [200]:
# u = 128 (id 1: p 1, q 0), 129 (id 3), 0 (id 0), 100 (id 200: p 0, q 100): bit 0 of
# word 0, bit 36 of word 1, bits 0 and 1 of word 2, whatever the path.
@pytest.mark.parametrize("want_csr, max_ids", [(False, None), (True, None), (True, 1)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_sets_the_naive_bitmap(backend, want_csr, max_ids, monkeypatch):
    batch, job, sc = _one_table_job([[1], [3], [0], [200]], want_csr=want_csr, max_ids=max_ids, vocab=256, qbits=7)
    job.g_bitmap[:] = 1
    bitmap = np.zeros(5, np.int64)
    monkeypatch.setattr(engine, "_NO_BITMAP", bitmap)
    job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    assert bitmap.tolist() == [1, 2**36, 3, 0, 0]
    assert job.ulist.tolist() == [-7] * job.ulist_size      # the list is left alone
    assert job.distinct.tolist() == [0, 2, 2, 0]


# No limit: every pair written, partition p of slice sl from 16 * sl + round_up(end of
# p - 1, 8). Slice 0: partition 1 = (id 1: shard row 0, local row 0), (id 3: row 1,
# local row 1); slice 1: partition 0 = (id 0: row 0, local row 0), (id 2: row 1, local
# row 1). Padding up to each slice's aligned end (8), nothing after it (no C yet).
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_writes_the_csr_without_limits(backend):
    batch, job, sc = _one_table_job([[1], [3], [0], [2]], want_csr=True)
    job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    pad = K.PAD_ID
    assert job.emb.tolist() == [0, 1] + [pad] * 6 + [-3] * 8 + [0, 1] + [pad] * 6 + [-3] * 8
    assert job.smp.tolist() == [0, 1] + [pad] * 6 + [-3] * 8 + [0, 1] + [pad] * 6 + [-3] * 8
    assert job.gout[[0, 1, 16, 17]].tolist() == [1.0, 1.0, 1.0, 1.0]
    assert np.asarray(job.row_pointers).ravel().tolist() == [0, 2] + [8] * 6 + [2, 8] + [8] * 6
    assert job.used.tolist() == [8, 8]
    assert job.pairs.tolist() == [0, 2, 2, 0] and job.kept.tolist() == [0, 2, 2, 0]
    assert job.distinct.tolist() == [0, 2, 2, 0]
    assert job.ul_cnt.tolist() == [2, 2]
    assert job.ulist.tolist() == [4, 5, 0, 1]                # each slice's distinct u, in order


# Mean over weights: with weights [1, 0, 2, 0], sample 1 (slice 0) and sample 3 (slice 1)
# have divisor 0, so f * B + b = 0 * 4 + 1 = 1 and 3 are zero-divisor samples; the task
# keeps the first. With [0, 1, 0, 1]: samples 0 and 2, the first at position 0.
# Counting alone computes no gains, so it finds none.
@pytest.mark.parametrize("weights, want_csr, bad", [([1.0, 0.0, 2.0, 0.0], False, -1),
                                                    ([1.0, 0.0, 2.0, 0.0], True, 1),
                                                    ([0.0, 1.0, 0.0, 1.0], True, 0)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_keeps_the_first_zero_divisor_sample(backend, weights, want_csr, bad):
    ids = np.array([1, 3, 0, 2], np.int64)
    splits = np.array([0, 1, 2, 3, 4], np.int64)
    weights = np.array(weights)
    batch = FeatureBatch({"f": (ids, splits, weights)})
    table = TableSpec("t", 8, 4, combiner="mean")
    plan = plan_stacking([FeatureSpec("f", table)], scwork.Topology(1, 2), stacking=None, batch_size=4)
    job = engine._StackJob(plan.stacks[0], batch, 1, 2, want_csr, SparsecoreConfig())
    job.ulist = np.full(job.ulist_size, -7, np.int64)
    size = job.out_size if want_csr else 1
    job.emb, job.smp, job.gout = np.zeros(size, np.int32), np.zeros(size, np.int32), np.zeros(size, np.float32)
    sc = {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64) for k, v in job.scratch_needs().items()}
    out = job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    assert out["bad"].tolist() == [bad] and out["oov"].tolist() == [-1]
    assert job.pairs.tolist() == [0, 2, 2, 0]              # counting goes on past the bad samples


# --------------------------------------------------------------------------------------
# sort_slice of a one-partition, one-row table: no key bits at all (pbits = qbits = 0)
# --------------------------------------------------------------------------------------
# P = 1, vocab 1: every u is 0, so the sort must keep the build order (R' increasing):
# n = 2 samples [0, 0] and [0] of slice 0 (lbits 1).
@pytest.mark.parametrize("fn", SORT_SLICE)
def test_sort_slice_without_key_bits_keeps_the_row_order(fn):
    ids = np.array([0, 0, 0], np.int64)
    splits = np.array([[0, 2, 3]], np.int64)
    keys, gains, ak, ag, bk, bg, hist = _buffers(3)
    rows = np.zeros(1, np.int64)
    res = fn(ids, splits, np.ones(3, np.float32), np.zeros(1, np.int8), rows, rows, 0, 2, 0, 1, 1, 0, 0, 1,
             False, keys, gains, ak, ag, bk, bg, hist)
    assert tuple(int(v) for v in res) == (3, -1, -1)
    assert keys.tolist() == [_key(0, 0), _key(0, 0), _key(0, 1)]


# --------------------------------------------------------------------------------------
# compact_slices: slices written at a stride, moved to their final C
# --------------------------------------------------------------------------------------
# stride 5, C 3, used [3, 3, 2]: slice 1 moves from 5 to 3 (a shift of 2 < 3 entries: the
# source and destination overlap), slice 2 from 10 to 6; entry 8 (slice 2's third) is
# padding; entries from 9 = nsl * C on are left as they were.
@pytest.mark.parametrize("fn", [K.compact_slices, K.compact_slices_reference])
def test_compact_slices_moves_overlapping_slices_left_and_pads(fn):
    emb = np.arange(100, 115, dtype=np.int32)
    smp = np.arange(200, 215, dtype=np.int32)
    gout = np.arange(15, dtype=np.float32)
    fn(emb, smp, gout, 5, np.array([3, 3, 2], np.int64), 3, 3)
    pad = K.PAD_ID
    assert emb.tolist() == [100, 101, 102, 105, 106, 107, 110, 111, pad, 109, 110, 111, 112, 113, 114]
    assert smp.tolist() == [200, 201, 202, 205, 206, 207, 210, 211, pad, 209, 210, 211, 212, 213, 214]
    assert gout[:8].tolist() == [0, 1, 2, 5, 6, 7, 10, 11] and np.isnan(gout[8])
    assert gout[9:].tolist() == [9, 10, 11, 12, 13, 14]


# stride 4 = C: nothing moves; an empty slice becomes all padding.
@pytest.mark.parametrize("fn", [K.compact_slices, K.compact_slices_reference])
def test_compact_slices_in_place_pads_each_slice(fn):
    emb = np.arange(100, 108, dtype=np.int32)
    smp = np.arange(200, 208, dtype=np.int32)
    gout = np.arange(8, dtype=np.float32)
    fn(emb, smp, gout, 4, np.array([0, 2], np.int64), 2, 4)
    pad = K.PAD_ID
    assert emb.tolist() == [pad] * 4 + [104, 105, pad, pad]
    assert smp.tolist() == [pad] * 4 + [204, 205, pad, pad]
    assert gout[4:6].tolist() == [4, 5] and np.isnan(gout[[0, 1, 2, 3, 6, 7]]).all()


# Two full slices of 3 at stride C + 1 (slice 1 moves by 1 entry, in blocks of one) and
# at stride C + 2 (by 2: a block of 2, then a last block of 1). Entries from nsl * C = 6 on
# keep their old values (stride 4: 106, 107; stride 5: 106 to 109).
@pytest.mark.parametrize("stride, rest", [(4, [106, 107]), (5, [106, 107, 108, 109])])
@pytest.mark.parametrize("fn", [K.compact_slices, K.compact_slices_reference])
def test_compact_slices_moves_by_less_than_a_slice(fn, stride, rest):
    emb = np.arange(100, 100 + 2 * stride, dtype=np.int32)
    smp = emb + 100
    gout = (emb - 100).astype(np.float32)
    fn(emb, smp, gout, stride, np.array([3, 3], np.int64), 2, 3)
    moved = [100, 101, 102, 100 + stride, 101 + stride, 102 + stride]
    assert emb.tolist() == moved + rest
    assert smp.tolist() == [v + 100 for v in moved + rest]
    assert gout.tolist() == [v - 100 for v in moved + rest]


# Two tables with limits (4 ids per partition) that are not exceeded, dropping not
# allowed: counting alone, every pair is kept, nothing dropped. Samples f0 = [1], [3] |
# [0], [2] and f1 = [5, 7], [6] | [4], [1] (both rotations 0): each group's run is
# counted as it is sorted, and kept is the count (partition 1 of slice 0 at the limit).
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_counts_two_tables_under_their_limits(backend):
    f0, f1 = ([1], [3], [0], [2]), ([5, 7], [6], [4], [1])
    data = {}
    for name, rows in (("f0", f0), ("f1", f1)):
        data[name] = (np.array([x for r in rows for x in r], np.int64),
                      np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64))
    batch = FeatureBatch(data)
    tables = [TableSpec(t, 8, 4, max_ids_per_partition=4, max_unique_ids_per_partition=4) for t in ("t0", "t1")]
    feats = [FeatureSpec("f0", tables[0]), FeatureSpec("f1", tables[1])]
    plan = plan_stacking(feats, scwork.Topology(1, 2), [["t0", "t1"]], batch_size=4)
    job = engine._StackJob(plan.stacks[0], batch, 1, 2, False, SparsecoreConfig())
    assert (job.keep_all, job.allow_cut, job.g_shift.tolist()) == (False, False, [0, 0])
    job.ulist = np.full(job.ulist_size, -7, np.int64)
    job.emb, job.smp, job.gout = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32)
    sc = {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64) for k, v in job.scratch_needs().items()}
    job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    # x % 2: slice 0: t0 1, 3 -> p 1, 1; t1 5, 7 (one sample), 6 -> p 1, 1, 0; slice 1:
    # t0 0, 2 -> p 0, 0; t1 4, 1 -> p 0, 1. Pairs per (slice, partition): 1, 4, 3, 1
    assert job.pairs.tolist() == [1, 4, 3, 1]
    assert job.kept.tolist() == [1, 4, 3, 1]
    assert job.dropped.tolist() == [0, 0]


# Limit 1 (C = round_up(1, 8) * 2 = 16), dropping not allowed: slice 1's partition 0
# gets 17 pairs (ids 0, 2, ..., 32 of one sample), over its 16-entry region. Every pair
# is counted (the engine raises the limit error afterwards), and no write leaves the
# slice's region: emb holds exactly nsl * C = 32 entries, so one past it would fail.
# Slice 0 (samples [1], []: one pair in partition 1) is written as usual.
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_over_the_limit_without_dropping_stays_in_its_region(backend):
    batch, job, sc = _one_table_job([[1], [], list(range(0, 34, 2)), []], want_csr=True, max_ids=1,
                                    vocab=64, qbits=5, allow_dropping=False)
    assert (job.cap, job.out_size, job.allow_cut) == (16, 32, False)
    out = job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    assert out["drops"].shape[0] == 0 and job.dropped.tolist() == [0, 0]
    assert job.pairs.tolist() == [0, 1, 17, 0] and job.kept.tolist() == [0, 1, 17, 0]
    assert job.distinct.tolist() == [0, 1, 17, 0]
    pad = K.PAD_ID
    assert job.emb[:16].tolist() == [0] + [pad] * 15           # id 1: shard row 0, sample 0
    assert job.smp[:16].tolist() == [0] + [pad] * 15


# A slice whose aligned end passes cap (the engine's C never lets this happen: here cap
# is set to 8 by hand, under the limit's 16) must not stop the next slice. Slice 0 =
# samples [0, 1], []: partitions 0 and 1 take 8 entries each, end 16 > 8 (the kernel
# writes what fits, the reference skips the slice); slice 1 = [2], []: id 2 (shard row
# 1, sample 0) in partition 0, written at its base 8 and padded to 16 by both.
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_goes_on_after_a_slice_past_cap(backend):
    batch, job, sc = _one_table_job([[0, 1], [], [2], []], want_csr=True, max_ids=8, allow_dropping=False)
    job.cap, job.base = 8, np.array([0, 8], np.int64)
    job.emb, job.smp = np.full(16, -3, np.int32), np.full(16, -3, np.int32)
    job.gout = np.full(16, -3, np.float32)
    job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    pad = K.PAD_ID
    assert job.emb[8:].tolist() == [1] + [pad] * 7
    assert job.smp[8:].tolist() == [0] + [pad] * 7
    assert job.pairs.tolist() == [1, 1, 1, 0]


# One limit binding, the other loose (a prefix cut must test each on its own):
#   unique ids <= 1, ids <= 4: slice 1's partition 0 = (u 0, R' 2), (u 0, R' 3), (u 1, R' 3)
#     (samples [0], [0, 2]): the second distinct id is dropped, (R' 3, u 1, p 0, 1);
#   ids <= 1, unique ids <= 4: slice 0's partition 1 = (u 4, R' 0), (u 4, R' 1) (samples
#     [1], [1]): the second pair is dropped, (R' 1, u 4, p 1, 1).
# C = round_up(max_ids, 8) * 2; every kept id has shard row 0.
@pytest.mark.parametrize("max_ids, max_uniq, rows, drop, kept, pairs, distinct, cap, emb, smp", [
    (4, 1, [[1], [], [0], [0, 2]], (3, 1, 0, 1), [0, 1, 2, 0], [0, 1, 3, 0], [0, 1, 2, 0], 16,
     {0: 0, 16: 0, 17: 0}, {0: 0, 16: 0, 17: 1}),
    (1, 4, [[1], [1], [0], []], (1, 4, 1, 1), [0, 1, 1, 0], [0, 2, 1, 0], [0, 1, 1, 0], 16,
     {0: 0, 16: 0}, {0: 0, 16: 0}),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_cuts_at_whichever_limit_binds(backend, max_ids, max_uniq, rows, drop, kept, pairs, distinct,
                                                    cap, emb, smp):
    batch, job, sc = _one_table_job(rows, want_csr=True, max_ids=max_ids, max_uniq=max_uniq)
    assert job.cap == cap
    out = job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    assert list(map(tuple, out["drops"].tolist())) == [drop]
    assert (job.kept.tolist(), job.pairs.tolist(), job.distinct.tolist()) == (kept, pairs, distinct)
    pad = K.PAD_ID
    assert job.emb.tolist() == [emb.get(t, pad) for t in range(32)]
    assert job.smp.tolist() == [smp.get(t, pad) for t in range(32)]


# Key widths where the pass count changes (P = 2, so pbits + qbits = 1 + qbits): 13 bits
# (two passes of 7, where one pass of 13 would need 8192 histogram words) and 23 bits
# (three passes of 8, where two of 12 would need 2 * 4096): all within 3 * 2048 words.
#   vocab 2**13: qbits 12; ids 8190 (p 0, q 4095), 5 (p 1, q 2: u 4096 | 2), 4096 (q 2048)
#   vocab 2**23: qbits 22; ids 8388606 (q 2**22 - 1), 5 (u 2**22 | 2), 4096 (q 2048)
@pytest.mark.parametrize("vocab, qbits, ids, expected", [
    (2**13, 12, [8190, 5, 4096], [_key(2048, 0), _key(4095, 0), _key(4098, 0)]),
    (2**23, 22, [8388606, 5, 4096], [_key(2048, 0), _key(4194303, 0), _key(4194306, 0)]),
])
@pytest.mark.parametrize("fn", SORT_GROUP + SORT_SLICE)
def test_sorts_where_the_pass_count_changes_fit_the_engines_histogram(fn, vocab, qbits, ids, expected):
    splits = np.array([[0, 3]], np.int64)
    keys, gains, ak, ag, bk, bg, hist = _buffers(3)
    rows = np.zeros(1, np.int64)
    head = (np.array(ids, np.int64), splits, np.ones(3, np.float32), np.zeros(1, np.int8), rows, rows, 0, 1)
    if fn in SORT_GROUP:                                   # nsl 1, K 1
        res = fn(*head, 1, 1, vocab, 2, 0, qbits, 0, False, keys, gains, ak, ag, hist)
    else:                                                  # slice 0
        res = fn(*head, 0, vocab, 2, 0, qbits, 0, False, keys, gains, ak, ag, bk, bg, hist)
    assert tuple(int(v) for v in res) == (3, -1, -1)
    assert keys.tolist() == expected


# sort_slice returns as sort_group: an id >= 8 at flat position 0 of slice 0 gives
# (m 0, oov 0, bad -1).
@pytest.mark.parametrize("fn", SORT_SLICE)
def test_sort_slice_reports_an_oov_id_at_flat_position_0(fn):
    ids = np.array([9, 1], np.int64)
    splits = np.array([[0, 1, 2]], np.int64)
    keys, gains, ak, ag, bk, bg, hist = _buffers(2)
    rows = np.zeros(1, np.int64)
    res = fn(ids, splits, np.ones(2, np.float32), np.zeros(1, np.int8), rows, rows, 0, 2, 0, 8, 2, 0, 2, 1,
             False, keys, gains, ak, ag, bk, bg, hist)
    assert tuple(int(v) for v in res) == (0, 0, -1)
