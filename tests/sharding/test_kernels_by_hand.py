"""Pieces of ``scwork.sharding._kernels`` whose results the kernel/reference comparisons cannot see.

tests/sharding/test_kernels.py and test_kernels_pinned.py check what the sorts and scans
produce; a radix plan with one pass more or fewer sorts just as right, and a reference
that is wrong the way its kernel is agrees with it. Here every expected value is worked
out by hand in the comment above its case.
"""

from __future__ import annotations

import importlib

import numba
import numpy as np
import pytest

from scwork.sharding import _kernels as K

# Run as plain Python (NUMBA_DISABLE_JIT=1) the kernels compute on numpy scalars: none of
# these cases divides by zero or overflows, so a RuntimeWarning is a mistake.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


# --------------------------------------------------------------------------------------
# _radix_plan: (pbits, npass, dbits) of u's pbits + qbits bits, passes of at most 11 bits
# --------------------------------------------------------------------------------------
# pbits = the least b with 2**b >= P; bits = pbits + qbits; npass = ceil(bits / 11), at
# least 1; dbits = ceil(bits / npass), at least 1.
@pytest.mark.parametrize("P, qbits, plan", [
    (1, 0, (0, 1, 1)),        # no bits at all: still one pass of one bit
    (2, 0, (1, 1, 1)),
    (3, 0, (2, 1, 2)),        # 2**1 < 3 <= 2**2
    (4, 0, (2, 1, 2)),        # a power of two: exactly 2 bits
    (5, 0, (3, 1, 3)),
    (8, 5, (3, 1, 8)),
    (2, 10, (1, 1, 11)),      # 11 bits: one pass, the widest
    (2, 11, (1, 2, 6)),       # 12 bits: two passes of 6
    (2, 12, (1, 2, 7)),       # 13 bits: two passes of ceil(6.5) = 7
    (1, 13, (0, 2, 7)),       # 13 bits from the rows alone
    (2, 21, (1, 2, 11)),      # 22 bits: two passes of 11
    (2, 22, (1, 3, 8)),       # 23 bits: three passes of ceil(7.67) = 8
    (2, 30, (1, 3, 11)),      # 31 bits: three passes of 11 (the widest key)
    (1024, 20, (10, 3, 10)),  # 30 bits: three passes of 10
])
def test_radix_plan_by_hand(P, qbits, plan):
    assert tuple(int(v) for v in K._radix_plan(P, qbits)) == plan


# --------------------------------------------------------------------------------------
# _build_keys through sort_slice and sort_group: rotations that wrap, P not a power of two
# --------------------------------------------------------------------------------------
def _key(u, R):
    return (u << 32) | R


def _buffers(m):
    """keys, gains, two scratch pairs (sentinels -5) and the engine's 3 * 2048-word histogram."""
    return (np.full(m, -5, np.int64), np.full(m, -5, np.float32), np.full(m, -5, np.int64),
            np.full(m, -5, np.float32), np.full(m, -5, np.int64), np.full(m, -5, np.float32),
            np.full(3 * 2048, -5, np.int64))


def _sort(fn, ids, splits, weights, has_w, feat_rows, feat_k, combiner, n, sl, nsl, K_, vocab, P, col_shift, qbits,
          lbits, want_gains):
    """sort_slice (slice ``sl``) or sort_group (slices ``[0, nsl)``), kernel or reference; (result, keys, gains)."""
    m = len(ids)
    keys, gains, ak, ag, bk, bg, hist = _buffers(m)
    head = (np.array(ids, np.int64), np.array(splits, np.int64), np.array(weights, np.float32),
            np.array(has_w, np.int8), np.array(feat_rows, np.int64), np.array(feat_k, np.int64), combiner, n)
    if fn in (K.sort_slice, K.sort_slice_reference):
        res = fn(*head, sl, vocab, P, col_shift, qbits, lbits, want_gains, keys, gains, ak, ag, bk, bg, hist)
    else:
        res = fn(*head, nsl, K_, vocab, P, col_shift, qbits, lbits, want_gains, keys, gains, ak, ag, hist)
    return tuple(int(v) for v in res), keys, gains


SORTS = [K.sort_slice, K.sort_slice_reference, K.sort_group, K.sort_group_reference]

# P = 3 (pbits 2, not a power of two: q = x // 3 by the float path), rotation 1,
# vocab 9: qbits = bit_length(8 // 3) = 2. Feature 0 at stack position k = 1 of K = 2,
# n = 2 samples per slice: lbits = bit_length(2 * 2 - 1) = 2. Samples 0, 1 (slice 0) =
# [0], []; samples 2, 3 (slice 1) = [5, 2, 3], [8, 4, 5]. Slice 1's rows: R' = 1 << 2 |
# (1 * 2 + i) = 6 (sample 2) and 7 (sample 3). Ids (p = (x + 1) % 3, q = x // 3, u = p << 2 | q):
#   5: p (5 + 1) % 3 = 0 (a wrap at exactly 3), q 1 -> u 1
#   2: p 0 (wrap at 3), q 0 -> u 0;  3: p 1, q 1 -> u 5
#   8: p 0 (wrap at 9 % 3), q 2 -> u 2;  4: p 2, q 1 -> u 9
# sorted by (u, R'): (0, 6) id 2, (1, 6) id 5, (1, 7) id 5, (2, 7) id 8, (5, 6) id 3, (9, 7) id 4.
# Slice 0: id 0: p 1, q 0 -> u 4, R' = 0 << 2 | 2 = 2.
P3_IDS = [0, 5, 2, 3, 8, 4, 5]
P3_SPLITS = [[0, 1, 1, 4, 7]]
P3_SLICE1 = [_key(0, 6), _key(1, 6), _key(1, 7), _key(2, 7), _key(5, 6), _key(9, 7)]
f32 = np.float32


@pytest.mark.parametrize("fn", SORTS)
def test_keys_of_a_rotated_table_on_three_partitions(fn):
    res, keys, _ = _sort(fn, P3_IDS, P3_SPLITS, np.ones(7), [0], [0], [1], 0, 2, 1, 2, 2, 9, 3, 1, 2, 2, False)
    if fn in (K.sort_slice, K.sort_slice_reference):
        assert res == (6, -1, -1)
        assert keys[:6].tolist() == P3_SLICE1
    else:                                  # both slices: slice 0's (4, 2) sorts between u 2 and 5
        assert res == (7, -1, -1)
        assert keys.tolist() == P3_SLICE1[:4] + [_key(4, 2)] + P3_SLICE1[4:]


# Slice 1 with gains, in the sorted order above (ids 2, 5, 5, 8, 3, 4; samples 2, 2, 3,
# 3, 2, 3). Weights of slice 1: sample 2 = [3, 4, 0] (ids 5, 2, 3), sample 3 = [2, 1, 2]
# (ids 8, 4, 5); slice 0's weight 1.
#   sum:   the weights themselves                 -> 4, 3, 2, 2, 0, 1
#   mean:  sums 7 and 5                           -> 4/7, 3/7, 2/5, 2/5, 0, 1/5
#   sqrtn: sqrt(9 + 16 + 0) = 5, sqrt(4 + 1 + 4) = 3 -> 4/5, 3/5, 2/3, 2/3, 0, 1/3
# Without weights every id weighs 1 (three ids per sample):
#   sum 1; mean 1/3; sqrtn 1 / sqrt(3) (in float32).
W = [1, 3, 4, 0, 2, 1, 2]
_R3 = f32(1) / f32(np.sqrt(f32(3)))
GAINS = {
    (1, 0): [4, 3, 2, 2, 0, 1],
    (1, 1): [f32(4) / f32(7), f32(3) / f32(7), f32(2) / f32(5), f32(2) / f32(5), 0, f32(1) / f32(5)],
    (1, 2): [f32(4) / f32(5), f32(3) / f32(5), f32(2) / f32(3), f32(2) / f32(3), 0, f32(1) / f32(3)],
    (0, 0): [1] * 6,
    (0, 1): [f32(1) / f32(3)] * 6,
    (0, 2): [_R3] * 6,
}


@pytest.mark.parametrize("has_w, combiner", sorted(GAINS))
@pytest.mark.parametrize("fn", [K.sort_slice, K.sort_slice_reference])
def test_gains_of_each_combiner_by_hand(fn, has_w, combiner):
    res, keys, gains = _sort(fn, P3_IDS, P3_SPLITS, W, [has_w], [0], [1], combiner, 2, 1, 2, 2, 9, 3, 1, 2, 2, True)
    assert res == (6, -1, -1)
    assert keys[:6].tolist() == P3_SLICE1
    assert gains[:6].tolist() == [float(f32(g)) for g in GAINS[has_w, combiner]]


# P = 4 (a power of two: shifts), rotation 3, vocab 16: qbits = bit_length(15 // 4) = 2;
# one sample [5, 8, 6, 1] (n = 1, K = 1: lbits 0, R' 0). p = (x % 4 + 3) wrapped at 4:
#   5: p 4 -> 0 (a wrap at exactly P), q 1 -> u 1;   8: p 3, q 2 -> u 14
#   6: p 5 -> 1, q 1 -> u 5;                         1: p 4 -> 0, q 0 -> u 0
# Without gains the shift-only loop runs, with them the general one: the same keys.
@pytest.mark.parametrize("want_gains", [False, True])
@pytest.mark.parametrize("fn", SORTS)
def test_keys_of_a_rotation_wrapping_at_a_power_of_two(fn, want_gains):
    res, keys, gains = _sort(fn, [5, 8, 6, 1], [[0, 4]], np.ones(4), [0], [0], [0], 0, 1, 0, 1, 1, 16, 4, 3, 2, 0,
                             want_gains)
    assert res == (4, -1, -1)
    assert keys.tolist() == [_key(0, 0), _key(1, 0), _key(5, 0), _key(14, 0)]
    assert gains.tolist() == ([1.0] * 4 if want_gains else [-5.0] * 4)


# An empty sample has no divisor to be zero: with mean or sqrtn and gains asked for, an
# empty sample (weighted or not) is not reported (bad -1); slice 0 = samples [], [1]
# (id 1: P = 2, p 1, q 0: u 4 with qbits 2; R' = 1). The gain of id 1 is 1 (its own
# weight 2 over the sum 2, over sqrt(4) = 2, or 1 over 1).
@pytest.mark.parametrize("has_w", [0, 1])
@pytest.mark.parametrize("combiner", [1, 2])
@pytest.mark.parametrize("fn", [K.sort_slice, K.sort_slice_reference])
def test_an_empty_sample_is_no_zero_divisor(fn, combiner, has_w):
    res, keys, gains = _sort(fn, [1], [[0, 0, 1]], [2.0], [has_w], [0], [0], combiner, 2, 0, 1, 1, 8, 2, 0, 2, 1,
                             True)
    assert res == (1, -1, -1)
    assert (keys.tolist(), gains.tolist()) == ([_key(4, 1)], [1.0])


# --------------------------------------------------------------------------------------
# warmup(): it compiles (numba compiles per argument types) the kernels of this module the
# engine calls on their own, for the argument types the engine passes them
# --------------------------------------------------------------------------------------
def _recording(calls, name, real):
    def record(*args):
        calls.append((name, tuple(str(numba.typeof(a)) for a in args)))
        if name == "sort_group":           # sort_group's documented scratch: hist int64[>= 3 * 2048]
            assert args[-1].dtype == np.int64 and args[-1].size >= 3 * 2048
        return real(*args)
    return record


def test_warmup_compiles_the_signatures_the_engine_calls(monkeypatch):
    import scwork
    from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, compute_stats, plan_stacking

    engine = importlib.import_module("scwork.sharding.engine")
    real = {"sort_group": K.sort_group, "group_tables": K.group_tables}
    warm, used = [], []
    for name, fn in real.items():
        monkeypatch.setattr(K, name, _recording(warm, name, fn))
    K.warmup()
    assert {name for name, _ in warm} == set(real)
    for name, fn in real.items():
        monkeypatch.setattr(K, name, _recording(used, name, fn))
    # the engine's calls: group_tables on one stack and on a stack of two tables beside a
    # third (several stacks), sort_group through the minibatch hook
    batch = FeatureBatch({f: (np.array([1, 3, 0, 2], np.int64), np.arange(5, dtype=np.int64)) for f in "abc"})
    tables = [TableSpec(t, 8, 4) for t in "xyz"]
    feats = [FeatureSpec(f, t) for f, t in zip("abc", tables)]
    topo = scwork.Topology(1, 2)
    compute_stats(batch.select(["a"]), feats[:1], topo, None, SparsecoreConfig())
    compute_stats(batch, feats, topo, [["x", "y"], ["z"]], SparsecoreConfig())
    plan = plan_stacking(feats, topo, [["x", "y"], ["z"]], batch_size=4)
    for _ in engine._iter_sorted_group_keys(plan.stacks[0], batch, 1, 2):
        pass
    assert {name for name, _ in used} == set(real)
    assert set(used) <= set(warm), sorted(set(used) - set(warm))


# The first zero divisor is kept even when it is not at position 0: mean over weights,
# one feature of B = 3 samples, one per slice (n = 1, K = 1: lbits 0): sample 0 = [1]
# (weight 1), samples 1 and 2 = [2], [3] with weight 0, so f * B + b = 1 and 2 have
# divisor 0; bad is 1. Keys (P = 2, qbits 2): id 1 -> u 4, R' 0; id 2 -> u 1, R' 1; id 3
# -> u 5, R' 2.
@pytest.mark.parametrize("fn", [K.sort_group, K.sort_group_reference])
def test_the_first_zero_divisor_past_position_0_is_kept(fn):
    with np.errstate(invalid="ignore"):     # 0 / 0: the gains of a bad sample are NaN
        res, keys, gains = _sort(fn, [1, 2, 3], [[0, 1, 2, 3]], [1.0, 0.0, 0.0], [1], [0], [0], 1, 1, 0, 3, 1, 8, 2,
                                 0, 2, 0, True)
    assert res == (3, -1, 1)
    assert keys.tolist() == [_key(1, 1), _key(4, 0), _key(5, 2)]
    assert gains[1] == 1.0 and np.isnan(gains[[0, 2]]).all()


# An id equal to the vocabulary is out of it (ids run 0..vocab - 1), wherever it sits:
# sample 0 = [1, 7], sample 1 = [8, 9] (vocab 8), one feature, n = 2 samples of slice 0:
# the first out-of-vocabulary id is 8 at flat position 2, nothing is sorted. P = 2 (the
# shift loops, with and without gains) and P = 3 (the division loop).
@pytest.mark.parametrize("P, qbits", [(2, 2), (3, 2)])
@pytest.mark.parametrize("want_gains", [False, True])
@pytest.mark.parametrize("fn", SORTS)
def test_an_id_equal_to_the_vocabulary_is_out_of_it(fn, want_gains, P, qbits):
    res, _, _ = _sort(fn, [1, 7, 8, 9], [[0, 2, 4]], np.ones(4), [0], [0], [0], 0, 2, 0, 1, 1, 8, P, 0, qbits, 1,
                      want_gains)
    assert res == (0, 2, -1)


# ... and vocab - 1 is in it: the same samples with 8 and 9 replaced by 6, 6 under
# vocab 8, P = 2: ids 1 (p 1, q 0: u 4), 7 (p 1, q 3: u 7), 6 (p 0, q 3: u 3) twice, in
# rows 0, 0, 1, 1: keys (3, 1), (3, 1), (4, 0), (7, 0).
@pytest.mark.parametrize("want_gains", [False, True])
@pytest.mark.parametrize("fn", SORTS)
def test_the_last_id_of_the_vocabulary_is_in_it(fn, want_gains):
    res, keys, _ = _sort(fn, [1, 7, 6, 6], [[0, 2, 4]], np.ones(4), [0], [0], [0], 0, 2, 0, 1, 1, 8, 2, 0, 2, 1,
                         want_gains)
    assert res == (4, -1, -1)
    assert keys.tolist() == [_key(3, 1), _key(3, 1), _key(4, 0), _key(7, 0)]


# --------------------------------------------------------------------------------------
# stack_slices counting alone (no CSR) with the prefix cut: one table of vocabulary 8 on
# 1 chip x 2 SparseCores (P = 2, two slices of n = 2 samples, qbits 2, lbits 1)
# --------------------------------------------------------------------------------------
def _count_job(backend, rows, max_ids, max_uniq, allow_dropping, want_csr=False, vocab=8):
    import scwork
    from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, plan_stacking

    engine = importlib.import_module("scwork.sharding.engine")
    ids = np.array([x for r in rows for x in r], np.int64)
    splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    batch = FeatureBatch({"f": (ids, splits)})
    table = TableSpec("t", vocab, 4, max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_uniq)
    plan = plan_stacking([FeatureSpec("f", table)], scwork.Topology(1, 2), stacking=None, batch_size=4)
    job = engine._StackJob(plan.stacks[0], batch, 1, 2, want_csr, SparsecoreConfig(allow_id_dropping=allow_dropping))
    job.ulist = np.full(job.ulist_size, -7, np.int64)
    size = job.out_size if want_csr else 1         # as the engine: one-entry arrays when nothing is written
    job.emb, job.smp = np.full(size, -3, np.int32), np.full(size, -3, np.int32)
    job.gout = np.full(size, -3, np.float32)
    sc = {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64) for k, v in job.scratch_needs().items()}
    out = job.run_slices(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, sc)
    return job, out


# Samples [1], [3] | [0], [2, 0]: slice 0's partition 1 holds (id 1, row 0), (id 3, row 1)
# (u 4 and 5); slice 1's partition 0 holds (id 0, row 0), (id 0, row 1), (id 2, row 1)
# (u 0, 0, 1): pairs [0, 2, 3, 0], distinct ids [0, 2, 2, 0] per (slice, partition).
#   ids <= 2, unique <= 4, dropping allowed: slice 0 within; slice 1 keeps 2, drops 1
#   ids <= 4, unique <= 1: slice 0 keeps 1 (drops id 3), slice 1 keeps the two pairs of id 0
#   ids <= 2, not allowed to drop: every pair kept (the caller raises), nothing dropped
@pytest.mark.parametrize("max_ids, max_uniq, allow, kept, dropped", [
    (2, 4, True, [0, 2, 2, 0], [0, 1]),
    (4, 1, True, [0, 1, 2, 0], [1, 1]),
    (2, 2, False, [0, 2, 3, 0], [0, 0]),
])
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_stack_slices_counting_alone_cuts_each_slice_on_its_own(backend, max_ids, max_uniq, allow, kept, dropped):
    job, _ = _count_job(backend, [[1], [3], [0], [2, 0]], max_ids, max_uniq, allow)
    assert job.pairs.tolist() == [0, 2, 3, 0]
    assert job.distinct.tolist() == [0, 2, 2, 0]
    assert job.kept.tolist() == kept
    assert job.dropped.tolist() == dropped
    assert job.ul_cnt.tolist() == [2, 2]
    # each slice's distinct u from its first raw id (slice 0 from 0, slice 1 from 2 of 5)
    assert job.ulist.tolist() == [4, 5, 0, 1, -7]


# Twenty dropped pairs in one task: the drop records (the engine passes room for one)
# grow twice, to 2 * 1 + 16 = 18 and 2 * 18 + 16 = 52 rows, keeping every record and its
# group. Vocabulary 64 (qbits = bit_length(63 // 2) = 5), limit 1: slice 1's sample 2 (its
# local row 0, R' = 1 << 1 | 0 = 2) = ids 0, 2, ..., 40, all in partition 0 at shard rows
# q = 0..20 (u = q): id 0 is kept (CSR entry 16: row 0, sample 0), ids 2..40 dropped as
# (R' 2, u q, partition 0, one id) for q = 1..20. C = 16 per slice; slice 0 is empty.
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_stack_slices_grows_its_drop_records(backend):
    job, out = _count_job(backend, [[], [], list(range(0, 42, 2)), []], 1, 1, True, want_csr=True, vocab=64)
    assert (int(job.g_qbits[0]), job.cap) == (5, 16)
    assert sorted(map(tuple, out["drops"].tolist())) == [(2, q, 0, 1) for q in range(1, 21)]
    assert out["drop_g"].tolist() == [0] * 20
    assert job.dropped.tolist() == [0, 20]
    assert (job.pairs.tolist(), job.distinct.tolist(), job.kept.tolist()) == ([0, 0, 21, 0], [0, 0, 21, 0],
                                                                              [0, 0, 1, 0])
    pad = K.PAD_ID
    assert job.emb.tolist() == [pad] * 16 + [0] + [pad] * 15
    assert job.smp.tolist() == [pad] * 16 + [0] + [pad] * 15


# A slice with an out-of-vocabulary id is neither counted nor written; the next slice is.
# Samples [9], [1] | [0], [2] (vocabulary 8): slice 0 fails at flat position 0; slice 1's
# partition 0 holds (id 0, row 0) and (id 2, row 1): 2 pairs, 2 distinct ids, written
# (without limits) from slice 1's base 16 as shard rows 0, 1 of samples 0, 1.
@pytest.mark.parametrize("want_csr", [False, True])
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_stack_slices_goes_on_after_a_slice_with_an_oov_id(backend, want_csr):
    job, out = _count_job(backend, [[9], [1], [0], [2]], None, None, False, want_csr=want_csr)
    assert out["oov"].tolist() == [0]
    assert (job.pairs.tolist(), job.distinct.tolist(), job.kept.tolist()) == ([0, 0, 2, 0], [0, 0, 2, 0],
                                                                              [0, 0, 2, 0])
    assert job.ulist.tolist()[2:4] == [0, 1]                # slice 1's distinct u, from its first raw id
    if want_csr:
        assert job.emb[16:18].tolist() == [0, 1] and job.smp[16:18].tolist() == [0, 1]
        assert job.emb[:16].tolist() == [-3] * 16           # slice 0 untouched


# --------------------------------------------------------------------------------------
# count_slice: one id in several rows; group_tables: groups and a stack with no ids
# --------------------------------------------------------------------------------------
# P = 2, qbits 2, c0 0: u = 1 (partition 0) in rows 0, 1, 2, 2 (a repeat in row 2), then
# u = 4 (partition 1) in row 2: pairs [3, 1], distinct ids [1, 1]; naive view u 1 and 4
# (bitmap word 0: 2 + 16 = 18).
@pytest.mark.parametrize("use_bitmap", [True, False])
@pytest.mark.parametrize("fn", [K.count_slice, K.count_slice_reference])
def test_count_slice_counts_one_id_in_several_rows(fn, use_bitmap):
    keys = np.array([_key(1, 0), _key(1, 1), _key(1, 2), _key(1, 2), _key(4, 2)], np.int64)
    pairs, distinct = np.zeros(2, np.int64), np.zeros(2, np.int64)
    bitmap, ulist = np.zeros(1, np.int64), np.full(5, -7, np.int64)
    nu = fn(keys, 5, 2, 2, 0, pairs, distinct, use_bitmap, bitmap, 0, ulist, 0)
    assert (pairs.tolist(), distinct.tolist()) == ([3, 1], [1, 1])
    if use_bitmap:
        assert (int(nu), bitmap.tolist()) == (0, [18])
    else:
        assert (int(nu), ulist.tolist()[:2]) == (2, [1, 4])


# Three groups of one feature each (counts per slice [2, 0], [0, 0], [0, 0]); stack 0 =
# group 0, stack 1 = groups 1 and 2, which have no ids at all: their largest slice is 0,
# and so is stack 1's. Parts from groups 0 and 2: [2, 0] (groups 0, 1) and [0, 0].
@pytest.mark.parametrize("fn", [K.group_tables, K.group_tables_reference])
def test_group_tables_of_groups_without_ids(fn):
    counts = np.array([[2, 0], [0, 0], [0, 0]], np.int64)
    rows = np.array([0, 1, 2], np.int64)
    starts = np.array([0, 1, 2], np.int64)
    gcounts, sloff, uloff, gmax, stack_ids, stack_max, part_ids = fn(
        counts, rows, starts, np.array([0, 1, 1], np.int64), np.array([0, 1], np.int64), np.array([0, 2], np.int64),
        False)
    assert gcounts.tolist() == [[2, 0], [0, 0], [0, 0]]
    assert sloff.tolist() == [[0, 2, 2], [0, 0, 0], [0, 0, 0]]
    assert uloff.tolist() == [0, 0, 0]
    assert gmax.tolist() == [2, 0, 0]
    assert stack_ids.tolist() == [[2, 0], [0, 0]]
    assert stack_max.tolist() == [2, 0]
    assert part_ids.tolist() == [[2, 0], [0, 0]]
