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
# 0) has divisor 0: reported only when gains are asked for, -1 otherwise.
@pytest.mark.parametrize("want_gains, bad", [(False, -1), (True, 0)])
@pytest.mark.parametrize("fn", SORT_GROUP)
def test_sort_group_reports_a_zero_divisor_only_with_gains(fn, want_gains, bad):
    ids = np.array([3, 2], np.int64)
    splits = np.array([[0, 2, 2]], np.int64)                # sample 0 = [3, 2], sample 1 empty
    keys, gains, tk, tg, _, _, hist = _buffers(2)
    rows = np.zeros(1, np.int64)
    res = fn(ids, splits, np.zeros(2, np.float32), np.ones(1, np.int8), rows, rows, 1, 1, 2, 1, 8, 2, 0, 2, 0,
             want_gains, keys, gains, tk, tg, hist)
    assert tuple(int(v) for v in res) == (2, -1, bad)
    assert keys.tolist() == [_key(1, 0), _key(5, 0)]        # id 2 (u 1) before id 3 (u 5), both in row 0
    if want_gains:
        assert np.isnan(gains).all()                        # 0 / 0: meaningless, flagged by bad
    else:
        assert gains.tolist() == [-5.0, -5.0]               # untouched


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
def _one_table_job(rows, want_csr, max_ids=None):
    ids = np.array([x for r in rows for x in r], np.int64)
    splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    batch = FeatureBatch({"f": (ids, splits)})
    table = TableSpec("t", 8, 4, max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_ids)
    plan = plan_stacking([FeatureSpec("f", table)], scwork.Topology(1, 2), stacking=None, batch_size=4)
    config = SparsecoreConfig(allow_id_dropping=max_ids is not None)
    job = engine._StackJob(plan.stacks[0], batch, 1, 2, want_csr, config)
    assert (job.P, job.nsl, job.n, int(job.g_shift[0]), int(job.g_qbits[0]), job.lbits) == (2, 2, 2, 0, 2, 1)
    job.ulist = np.full(job.ulist_size, -7, np.int64)
    if want_csr:
        job.emb, job.smp = np.full(job.out_size, -3, np.int32), np.full(job.out_size, -3, np.int32)
        job.gout = np.full(job.out_size, -3, np.float32)
    else:                                     # as the engine: one-entry arrays when nothing is written
        job.emb, job.smp, job.gout = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32)
    scratch = {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64)
               for k, v in job.scratch_needs().items()}
    return batch, job, scratch


@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_slices_records_an_oov_id_at_flat_position_0(backend):
    # 9 >= 8 at flat position 0 (slice 0), 10 at flat position 3 (slice 1): the first is kept
    batch, job, sc = _one_table_job([[9, 1], [2], [10], [3]], want_csr=False)
    out = job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    assert out["oov"].tolist() == [0]
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
