"""The mini-batching kernels and their references on cases worked out by hand.

tests/sharding/test_minibatch.py compares each kernel of
``scwork.sharding._minibatch_kernels`` with its numpy reference on random inputs; a
formula wrong in both passes there. Here every expected value is written out from the
definitions, and every case runs through the kernel and its reference alike:

- the stacked column id of jax-tpu-embedding (``CooFormat::GetColId``):
  ``col_id = p + P * (id // P + row_offset)`` with ``p = (id + col_shift) % P``;
- a bucket is ``col_id & (num_buckets - 1)`` (the identity hash the library's own tests
  use) or ``HighwayHash64(col_id) & (num_buckets - 1)`` (``CooFormat::GetBucketId``);
- a key is ``u << 32 | R'`` with ``u = p << qbits | q`` and ``R' = slice << lbits | row``,
  ``row = k * n + i`` for the ``k``-th feature of the group and sample ``i`` of the slice;
- a counter of (slice, partition, bucket) sits at ``(slice * Pc + p - p_lo) * NB + b``.

Key values are written as ``_key(u, R')``; every other number is literal.
"""

from __future__ import annotations

import numpy as np
import pytest

from scwork.sharding import _minibatch_kernels as K

# google/highwayhash c/highwayhash_test.c: kTestKey1, and kExpected64[4], the hash of
# the 4 bytes 00 01 02 03 (the little-endian int32 0x03020100).
KEY1 = np.array([0x0706050403020100, 0x0F0E0D0C0B0A0908, 0x1716151413121110, 0x1F1E1D1C1B1A1918], np.uint64)
HASH_OF_0x03020100 = 0xF205A46893007EDA


def _key(u, R):
    return (u << 32) | R


def _counters(nsl, Pc, NB):
    """Zeroed (pairs, distinct, kept, raw, naive_uniq, dropped) of ``nsl`` slices and ``Pc`` partitions."""
    return ([np.zeros(nsl * Pc * NB, np.int64) for _ in range(3)]
            + [np.zeros(nsl * NB, np.int64), np.zeros(Pc * NB, np.int64), np.zeros(NB, np.int64)])


def _at(size, **entries):
    """A list of ``size`` zeros but for ``entries`` (``i<index>=value``)."""
    out = [0] * size
    for name, value in entries.items():
        out[int(name[1:])] = value
    return out


# --------------------------------------------------------------------------------------
# HighwayHash and the bucket of an id
# --------------------------------------------------------------------------------------
def test_library_key_is_the_one_of_coo_format_h():
    # kHighwayHashKey of jax_tpu_embedding/sparsecore/lib/core/coo_format.h
    assert [hex(int(x)) for x in K.HIGHWAY_KEY] == ["0x4451e30f87db9609", "0xca7358a1fd2737f8",
                                                     "0x4b2c991fcee4fdea", "0xb2658e18326f6ba"]


@pytest.mark.parametrize("fn", ["highway_hash_int32", "highway_hash_int32_reference"])
def test_highway_int32_hashes_the_low_4_bytes(fn):
    # bits above the low 32 are not part of the 4 bytes hashed
    values = np.array([0x03020100, 0x7_03020100], np.int64)
    if fn == "highway_hash_int32":
        got = np.empty(2, np.uint64)
        K.highway_hash_int32(values, KEY1, got)
    else:
        got = K.highway_hash_int32_reference(values, KEY1)
    assert [int(x) for x in got] == [HASH_OF_0x03020100, HASH_OF_0x03020100]


@pytest.mark.parametrize("fn", [K.ids_to_buckets, K.ids_to_buckets_reference])
@pytest.mark.parametrize("nb, expected", [(64, 0x1A), (2**31, 0x13007EDA)])
def test_highway_bucket_of_an_id(fn, nb, expected):
    # P = 1, no rotation, no offset: col_id = id, so the bucket is the low bits of
    # HighwayHash64(00 01 02 03) = 0xF205A46893007EDA: 0xDA & 63 = 0x1A for 64 buckets.
    out = np.full(1, -1, np.int64)
    fn(np.array([0x03020100], np.int64), 1, 0, 0, nb, K.HASH_HIGHWAY, KEY1, out)
    assert out.tolist() == [expected]


def test_public_highway_buckets_are_the_library_hash():
    # minibatch.bucket_of(..., bucket_hash="highway") goes through the kernel's hash mode with
    # the library key; with P = 1 and no rotation or offset the bucket is
    # HighwayHash64(4 bytes of the id, kHighwayHashKey) & 63, the hash pinned above by the
    # upstream test vectors and the key by coo_format.h.
    from scwork.sharding.minibatch import bucket_of

    ids = [0, 1, 2, 1000, 0x03020100, 2**31 - 1]
    expected = [K.highway_hash64_reference(x.to_bytes(4, "little"), K.HIGHWAY_KEY) & 63 for x in ids]
    assert bucket_of(np.array(ids, np.int64), 1, 0, 0, num_buckets=64, bucket_hash="highway").tolist() == expected
    assert expected != [x & 63 for x in ids]                   # not the identity hash


@pytest.mark.parametrize("fn", [K.ids_to_buckets, K.ids_to_buckets_reference])
def test_identity_buckets_of_a_rotated_shifted_table(fn):
    # P = 3, col_shift 2, row_offset 5:
    #   id  p = (id + 2) % 3   q = id // 3   col = p + 3 * (q + 5)
    #   0   2                  0             17
    #   1   0 (1 + 2 = 3 = P)  0             15
    #   2   1                  0             16
    #   3   2                  1             20
    #   7   0                  2             21
    #   10  0                  3             24
    ids = np.array([0, 1, 2, 3, 7, 10], np.int64)
    out = np.full(6, -1, np.int64)
    fn(ids, 3, 2, 5, 64, K.HASH_IDENTITY, K.HIGHWAY_KEY, out)
    assert out.tolist() == [17, 15, 16, 20, 21, 24]
    fn(ids, 3, 2, 5, 8, K.HASH_IDENTITY, K.HIGHWAY_KEY, out)       # & 7
    assert out.tolist() == [1, 7, 0, 4, 5, 0]


# --------------------------------------------------------------------------------------
# scan_group_buckets
# --------------------------------------------------------------------------------------
# P = 2, qbits 2, lbits 2, row_offset 1, 4 identity buckets: col = p + 2 * (q + 1), b = col & 3.
#   u  (p, q)  col  b    keys (slice, row)
#   0  (0, 0)  2    2    (0, 0) twice, (1, 1)
#   1  (0, 1)  4    0    (0, 1)
#   3  (0, 3)  8    0    (0, 0), (0, 2) twice
#   4  (1, 0)  3    3    (1, 0)
#   7  (1, 3)  9    1    (0, 3), (1, 3) twice
# Streams (slice, p, b) at c = (slice * 2 + p) * 4 + b:
#   c 0  (0, 0, 0): u1 row 1, u3 row 0, u3 row 2 (x2): 3 pairs, 2 distinct
#   c 2  (0, 0, 2): u0 row 0 (x2): 1 pair
#   c 5  (0, 1, 1): u7: 1 pair
#   c 10 (1, 0, 2): u0: 1 pair
#   c 13 (1, 1, 1): u7 (x2): 1 pair
#   c 15 (1, 1, 3): u4: 1 pair
# raw (slice * 4 + b): slice 0: b0 1 + 3, b1 1, b2 2; slice 1: b1 2, b2 1, b3 1
# naive (p * 4 + b): p0: b0 {u1, u3}, b2 {u0}; p1: b1 {u7}, b3 {u4}
GROUP_KEYS = [_key(0, 0), _key(0, 0), _key(0, 4 | 1), _key(1, 1), _key(3, 0), _key(3, 2), _key(3, 2),
              _key(4, 4 | 0), _key(7, 3), _key(7, 4 | 3), _key(7, 4 | 3)]
SCAN = (2, 0, 2, 2, 2, 1, 4, K.HASH_IDENTITY, K.HIGHWAY_KEY)     # P, p_lo, Pc, qbits, lbits, row_offset, NB, mode, key
NO_LIMIT = 2**62


@pytest.mark.parametrize("fn", [K.scan_group_buckets, K.scan_group_buckets_reference])
def test_scan_group_buckets_by_hand(fn):
    keys = np.array(GROUP_KEYS + [_key(5, 0)], np.int64)          # one key past m: not read
    arrs = _counters(2, 2, 4)
    fn(keys, 11, *SCAN, NO_LIMIT, NO_LIMIT, *arrs)
    pairs, distinct, kept, raw, naive, dropped = (a.tolist() for a in arrs)
    assert pairs == _at(16, i0=3, i2=1, i5=1, i10=1, i13=1, i15=1)
    assert distinct == _at(16, i0=2, i2=1, i5=1, i10=1, i13=1, i15=1)
    assert kept == pairs
    assert raw == [4, 1, 2, 0, 0, 2, 1, 1]
    assert naive == [2, 0, 1, 0, 0, 1, 0, 1]
    assert dropped == [0, 0, 0, 0]


@pytest.mark.parametrize("fn", [K.scan_group_buckets, K.scan_group_buckets_reference])
@pytest.mark.parametrize("max_ids, max_uniq, kept0, dropped0", [
    (3, 2, 3, 0),          # observed == limit on both: all kept
    (2, 10, 2, 2),         # the third pair (u3 row 2, twice) is past max_ids
    (1, 10, 1, 3),         # u3's two pairs (three raw ids) past max_ids
    (10, 1, 1, 3),         # u3 is the stream's second distinct id: past max_uniq
])
def test_scan_group_buckets_prefix_cut_at_the_limits(fn, max_ids, max_uniq, kept0, dropped0):
    # stream c 0 (slice 0, partition 0, bucket 0) is u1 row 1, u3 row 0, u3 row 2 (x2);
    # every other stream has one pair and one distinct id
    arrs = _counters(2, 2, 4)
    fn(np.array(GROUP_KEYS, np.int64), 11, *SCAN, max_ids, max_uniq, *arrs)
    pairs, distinct, kept, raw, naive, dropped = (a.tolist() for a in arrs)
    assert pairs == _at(16, i0=3, i2=1, i5=1, i10=1, i13=1, i15=1)
    assert kept == _at(16, i0=kept0, i2=1, i5=1, i10=1, i13=1, i15=1)
    assert dropped == [dropped0, 0, 0, 0]


@pytest.mark.parametrize("fn", [K.scan_group_buckets, K.scan_group_buckets_reference])
def test_scan_group_buckets_ranks_go_on_over_groups(fn):
    # The same keys scanned twice into the same counters (two groups of a stack whose
    # streams meet): stream c 0 goes on at pair 3 and distinct id 2. With limits 4 and 3
    # the second scan keeps u1 (pair 3, rank 2) and drops u3's two pairs (pairs 4 and 5).
    arrs = _counters(2, 2, 4)
    for _ in range(2):
        fn(np.array(GROUP_KEYS, np.int64), 11, *SCAN, 4, 3, *arrs)
    pairs, distinct, kept, raw, naive, dropped = (a.tolist() for a in arrs)
    assert pairs == _at(16, i0=6, i2=2, i5=2, i10=2, i13=2, i15=2)
    assert distinct == _at(16, i0=4, i2=2, i5=2, i10=2, i13=2, i15=2)
    assert kept == _at(16, i0=4, i2=2, i5=2, i10=2, i13=2, i15=2)
    assert dropped == [3, 0, 0, 0]


@pytest.mark.parametrize("fn", [K.scan_group_buckets, K.scan_group_buckets_reference])
def test_scan_group_buckets_of_a_partition_range(fn):
    # partition 1 alone (p_lo 1, Pc 1): c = slice * 4 + b, naive at b
    keys = np.array(GROUP_KEYS[7:], np.int64)
    arrs = _counters(2, 1, 4)
    fn(keys, 4, 2, 1, 1, 2, 2, 1, 4, K.HASH_IDENTITY, K.HIGHWAY_KEY, NO_LIMIT, NO_LIMIT, *arrs)
    pairs, distinct, kept, raw, naive, dropped = (a.tolist() for a in arrs)
    assert pairs == [0, 1, 0, 0, 0, 1, 0, 1]
    assert distinct == pairs and kept == pairs
    assert raw == [0, 1, 0, 0, 0, 2, 0, 1]
    assert naive == [0, 1, 0, 1]


@pytest.mark.parametrize("fn", [K.scan_group_buckets, K.scan_group_buckets_reference])
def test_scan_group_buckets_highway_bucket(fn):
    # P = 1, qbits 0, row_offset 0x03020100: the one id (u = 0) has col_id 0x03020100,
    # bucket 0xF205A46893007EDA & 63 = 26 under KEY1.
    arrs = _counters(1, 1, 64)
    fn(np.array([_key(0, 0)], np.int64), 1, 1, 0, 1, 0, 0, 0x03020100, 64, K.HASH_HIGHWAY, KEY1, NO_LIMIT,
       NO_LIMIT, *arrs)
    assert [np.flatnonzero(a).tolist() for a in arrs[:5]] == [[26]] * 5


# --------------------------------------------------------------------------------------
# bin_slices
# --------------------------------------------------------------------------------------
# P = 2, col_shift 1, lbits 2, n = 2 samples per slice, two slices; feature row 0 (k 0)
# and row 1 (k 1). p = (id + 1) % 2, q = id // 2.
#   slice 0: sample 0: fa [3, 0], fb [5]; sample 1: fa [4]
#   slice 1: sample 0: fa [1, 6], fb [3]; sample 1: fa [2], fb [0]
# With qbits 2 (u = p << 2 | q):  id 0 -> u 4, 1 -> 0, 2 -> 5, 3 -> 1, 4 -> 6, 5 -> 2, 6 -> 7.
# Keys in build order (slice, feature, sample), R' = slice << 2 | (k * 2 + i):
#   (1,0) (4,0) (6,1) (2,2) | (0,4) (7,4) (5,5) (1,6) (4,7)
BIN_IDS = np.array([3, 0, 4, 1, 6, 2, 5, 3, 0], np.int64)
BIN_SPLITS = np.array([[0, 2, 3, 5, 6], [6, 7, 7, 8, 9]], np.int64)
BY_BIN = [(1, 0), (0, 4), (1, 6), (2, 2), (4, 0), (5, 5), (4, 7), (6, 1), (7, 4)]     # u >> 1, stable
BY_U = [(0, 4), (1, 0), (1, 6), (2, 2), (4, 0), (4, 7), (5, 5), (6, 1), (7, 4)]


def _bin(fn, s0, s1, qbits, cshift, C, sort_all, base=0, vocab=8):
    out = np.full(base + 9, -7, np.int64)
    pre = np.full(C + 1, -7, np.int64)
    res = fn(BIN_IDS, BIN_SPLITS, np.zeros(2, np.int8), np.array([0, 1], np.int64), np.array([0, 1], np.int64), 2,
             s0, s1, vocab, 2, 1, qbits, 2, cshift, C, sort_all, np.empty(9, np.int64), out, base, pre,
             np.empty(3 * 2048, np.int64))
    return tuple(int(x) for x in res), out, pre


@pytest.mark.parametrize("fn", [K.bin_slices, K.bin_slices_reference])
@pytest.mark.parametrize("sort_all", [False, True])
def test_bin_slices_by_hand(fn, sort_all):
    # 4 bins of u >> 1: bin 0 holds u 0, 1; bin 1 u 2; bin 2 u 4, 5; bin 3 u 6, 7
    res, out, pre = _bin(fn, 0, 2, 2, 1, 4, sort_all, base=3)
    assert res == (9, -1)
    assert out[:3].tolist() == [-7, -7, -7]                           # below base: untouched
    assert out[3:].tolist() == [_key(u, R) for u, R in (BY_U if sort_all else BY_BIN)]
    assert pre.tolist() == [3, 6, 7, 10, 12]


@pytest.mark.parametrize("fn", [K.bin_slices, K.bin_slices_reference])
def test_bin_slices_of_the_second_slice(fn):
    # slice 1 alone: (0,4) (7,4) (5,5) (1,6) (4,7) in build order
    res, out, pre = _bin(fn, 1, 2, 2, 1, 4, False)
    assert res == (5, -1)
    assert out[:5].tolist() == [_key(0, 4), _key(1, 6), _key(5, 5), _key(4, 7), _key(7, 4)]
    assert pre.tolist() == [0, 2, 2, 4, 5]


@pytest.mark.parametrize("fn", [K.bin_slices, K.bin_slices_reference])
@pytest.mark.parametrize("sort_all", [False, True])
def test_bin_slices_two_radix_passes(fn, sort_all):
    # qbits 11: u = p << 11 | q takes 12 bits, two LSD passes of 6 bits when sorted outright.
    # id 0 -> u 2048, 1 -> 0, 2 -> 2049, 3 -> 1, 4 -> 2050, 5 -> 2, 6 -> 2051. Keys in build order:
    #   (1,0) (2048,0) (2050,1) (2,2) | (0,4) (2051,4) (2049,5) (1,6) (2048,7)
    # Bins of u >> 10 (C = 4): partition 0 is bin 0, partition 1 bin 2 (q < 1024). Sorted by
    # the low 6 bits alone, (2048,0) would come first.
    res, out, pre = _bin(fn, 0, 2, 11, 10, 4, sort_all)
    assert res == (9, -1)
    hi = 2048
    if sort_all:
        expected = [(0, 4), (1, 0), (1, 6), (2, 2), (hi, 0), (hi, 7), (hi + 1, 5), (hi + 2, 1), (hi + 3, 4)]
    else:
        expected = [(1, 0), (2, 2), (0, 4), (1, 6), (hi, 0), (hi + 2, 1), (hi + 3, 4), (hi + 1, 5), (hi, 7)]
    assert out.tolist() == [_key(u, R) for u, R in expected]
    assert pre.tolist() == [0, 4, 4, 9, 9]


# qbits 22: u takes 23 bits, three LSD passes of 8 bits. One slice of five samples, one id each,
# P = 2 without rotation (p = id % 2, q = id // 2):
#   sample (R')  id       p  q                     u
#   0            262662   0  0x020103 = 131331     131331
#   1            132102   0  0x010203 = 66051      66051
#   2            11       1  5                     4194309 (1 << 22 | 5)
#   3            261632   0  0x01FF00 = 130816     130816
#   4            1546     0  0x000305 = 773        773
# Each of the three 8-bit digits of q orders some pair: 0x0305 < 0x010203 by the top digit,
# 0x010203 < 0x01FF00 by the middle one, 0x020103 last by the top one again.
THREE_PASS_IDS = np.array([262662, 132102, 11, 261632, 1546], np.int64)


@pytest.mark.parametrize("fn", [K.bin_slices, K.bin_slices_reference])
@pytest.mark.parametrize("sort_all", [False, True])
def test_bin_slices_three_radix_passes(fn, sort_all):
    out = np.full(5, -7, np.int64)
    pre = np.full(5, -7, np.int64)
    res = fn(THREE_PASS_IDS, np.array([[0, 1, 2, 3, 4, 5]], np.int64), np.zeros(1, np.int8), np.zeros(1, np.int64),
             np.zeros(1, np.int64), 5, 0, 1, 262663, 2, 0, 22, 3, 21, 4, sort_all, np.empty(5, np.int64), out, 0, pre,
             np.empty(3 * 2048, np.int64))
    assert tuple(int(x) for x in res) == (5, -1)
    if sort_all:
        expected = [(773, 4), (66051, 1), (130816, 3), (131331, 0), (4194309, 2)]
    else:                 # bins of u >> 21: partition 0 is bin 0, partition 1 bin 2
        expected = [(131331, 0), (66051, 1), (130816, 3), (773, 4), (4194309, 2)]
    assert out.tolist() == [_key(u, R) for u, R in expected]
    assert pre.tolist() == [0, 4, 4, 5, 5]


@pytest.mark.parametrize("fn", [K.bin_slices, K.bin_slices_reference])
@pytest.mark.parametrize("sort_all", [False, True])
def test_bin_slices_of_31_bit_u(fn, sort_all):
    # qbits 30, P = 2 without rotation: u = p << 30 | id // 2 takes 31 bits, three passes of 11
    # bits whose histograms fill all 3 * 2048 entries given.
    #   sample (R')  id           p  q            u            bin (u >> 29)
    #   0            2147483646   0  2**30 - 1    1073741823   1
    #   1            11           1  5            1073741829   2
    #   2            2097152      0  2**20        1048576      0
    out = np.full(3, -7, np.int64)
    pre = np.full(5, -7, np.int64)
    res = fn(np.array([2147483646, 11, 2097152], np.int64), np.array([[0, 1, 2, 3]], np.int64), np.zeros(1, np.int8),
             np.zeros(1, np.int64), np.zeros(1, np.int64), 3, 0, 1, 2147483647, 2, 0, 30, 2, 29, 4, sort_all,
             np.empty(3, np.int64), out, 0, pre, np.empty(3 * 2048, np.int64))
    assert tuple(int(x) for x in res) == (3, -1)
    assert out.tolist() == [_key(1048576, 2), _key(1073741823, 0), _key(1073741829, 1)]
    assert pre.tolist() == [0, 1, 2, 3, 3]


@pytest.mark.parametrize("fn", [K.bin_slices, K.bin_slices_reference])
@pytest.mark.parametrize("sort_all", [False, True])
@pytest.mark.parametrize("vocab, s0, expected", [
    (6, 0, (0, 4)),      # id 6 (== vocab) at flat position 4 is the first out of the vocabulary
    (4, 0, (0, 2)),      # id 4 at position 2 comes before it in build order
    (5, 0, (0, 6)),      # slice 0's second feature (id 5 at position 6) before slice 1's ids
    (7, 0, (9, -1)),     # every id < 7
    (4, 1, (0, 4)),      # slice 1 alone: its first id >= 4 is the 6 at position 4
])
def test_bin_slices_out_of_vocabulary(fn, sort_all, vocab, s0, expected):
    res, _, _ = _bin(fn, s0, 2, 2, 1, 4, sort_all, vocab=vocab)
    assert res == expected


# --------------------------------------------------------------------------------------
# scan_range
# --------------------------------------------------------------------------------------
# Two slice tasks of the keys above (qbits 2, bins of u >> 1), binned by hand:
#   task 0 (slice 0): bin 0 (1,0) | bin 1 (2,2) | bin 2 (4,0) | bin 3 (6,1)       pre [0, 1, 2, 3, 4]
#   task 1 (slice 1): bin 0 (0,4) (1,6) | bin 2 (5,5) (4,7) | bin 3 (7,4)         pre [4, 6, 6, 8, 9]
# row_offset 0, 4 identity buckets: col = p + 2 q, so u 0 -> b0, 1 -> b2, 2 -> b0,
# 4 -> b1, 5 -> b3, 6 -> b1, 7 -> b3.
TASKS = np.array([_key(1, 0), _key(2, 2), _key(4, 0), _key(6, 1), _key(0, 4), _key(1, 6), _key(5, 5), _key(4, 7),
                  _key(7, 4)], np.int64)
TASKS_PRE = np.array([[0, 1, 2, 3, 4], [4, 6, 6, 8, 9]], np.int64)
SORTED = np.array([_key(u, R) for u, R in BY_U], np.int64)
SORTED_PRE = np.array([[0, 3, 4, 7, 9]], np.int64)


def _scan_range(fn, binned, pre, c0, c1, cshift, p_lo, Pc, qbits, NB, max_uniq, is_sorted, nsl=2):
    arrs = _counters(nsl, Pc, NB)
    m = fn(binned, pre, c0, c1, cshift, 2, p_lo, Pc, qbits, 2, 0, NB, K.HASH_IDENTITY, K.HIGHWAY_KEY, NO_LIMIT,
           max_uniq, *arrs, np.empty(binned.size, np.int64), np.empty(binned.size, np.int64),
           np.empty(3 * 2048, np.int64), is_sorted)
    return int(m), [a.tolist() for a in arrs]


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
@pytest.mark.parametrize("binned, pre, is_sorted", [(TASKS, TASKS_PRE, False), (SORTED, SORTED_PRE, True)])
def test_scan_range_of_partition_1(fn, binned, pre, is_sorted):
    # bins [2, 4) = u 4..7 = partition 1 (p_lo 1, Pc 1). Sorted by u (stable):
    # (4,0) (4,7) (5,5) (6,1) (7,4); slices 0, 1, 1, 0, 1.
    # Streams c = slice * 4 + b: c1 (slice 0, b1): u4, u6; c5 (slice 1, b1): u4;
    # c7 (slice 1, b3): u5, u7. With max_uniq 1 the second id of c1 and c7 is dropped.
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, binned, pre, 2, 4, 1, 1, 1, 2, 4, 1,
                                                                  is_sorted)
    assert m == 5
    assert pairs == [0, 2, 0, 0, 0, 1, 0, 2]
    assert distinct == pairs
    assert kept == [0, 1, 0, 0, 0, 1, 0, 1]
    assert raw == [0, 2, 0, 0, 0, 1, 0, 2]
    assert naive == [0, 2, 0, 2]
    assert dropped == [0, 1, 0, 1]


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
@pytest.mark.parametrize("binned, pre, is_sorted", [(TASKS, TASKS_PRE, False), (SORTED, SORTED_PRE, True)])
def test_scan_range_of_partition_0(fn, binned, pre, is_sorted):
    # bins [0, 2) = u 0..3 = partition 0: sorted (0,4) (1,0) (1,6) (2,2), slices 1, 0, 1, 0;
    # u0 -> c4 (slice 1, b0), u1 -> c2 and c6, u2 -> c0. Each stream one id: nothing dropped.
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, binned, pre, 0, 2, 1, 0, 1, 2, 4, 1,
                                                                  is_sorted)
    assert m == 4
    assert pairs == [1, 0, 1, 0, 1, 0, 1, 0]
    assert distinct == pairs and kept == pairs and raw == pairs
    assert naive == [2, 0, 1, 0]
    assert dropped == [0, 0, 0, 0]


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
def test_scan_range_of_one_bin(fn):
    # bin 1 alone (u 2, 3): the key (2,2) of task 0; u2 -> col 4 -> b0, slice 0, p 0
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, TASKS, TASKS_PRE, 1, 2, 1, 0, 1, 2, 4, 1,
                                                                  False)
    assert m == 1
    assert pairs == [1, 0, 0, 0, 0, 0, 0, 0]
    assert naive == [1, 0, 0, 0]


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
def test_scan_range_of_three_single_u_bins(fn):
    # cshift 0: each bin one u. Bins [0, 3) span u - 0 in {0, 1, 2}: 2 bits (sorting by the low
    # bit alone gives u0, u2, u1). One bucket, max_uniq 2: u0 and u1 kept, u2's two raw ids dropped.
    binned = np.array([_key(0, 0), _key(1, 1), _key(2, 2), _key(2, 2)], np.int64)
    pre = np.array([[0, 1, 2, 4, 4, 4, 4, 4, 4]], np.int64)
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, binned, pre, 0, 3, 0, 0, 1, 2, 1, 2, False)
    assert m == 4
    assert (pairs, distinct, kept) == ([3, 0], [3, 0], [2, 0])
    assert (raw, naive, dropped) == ([4, 0], [3], [2])


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
def test_scan_range_of_u_past_2_to_the_31(fn):
    # P = 3 (not a power of two) and qbits 30, as for ids up to 2**31 - 1: partition 2's u is
    # 2 << 30 | q, past 2**31, so its keys are negative int64. Bins of u >> 30 (one per
    # partition). u5 (p0) and u 2**31 + 5 (p2) each have a key in slice 0 (R' 0) and slice 1 (R' 4):
    #   task 0: bin 0 (5, 0) | bin 2 (2**31 + 5, 0)     task 1: bin 0 (5, 4) | bin 2 (2**31 + 5, 4)
    # Sorted by u: (5, 0) (5, 4) (2**31 + 5, 0) (2**31 + 5, 4): each id's keys together, one
    # whole-batch distinct id per partition. One bucket; counters at slice * 3 + p.
    big = (2 << 30) | 5
    binned = np.array([(5 << 32) | 0, (big << 32) | 0, (5 << 32) | 4, (big << 32) | 4], np.uint64).view(np.int64)
    pre = np.array([[0, 1, 1, 2], [2, 3, 3, 4]], np.int64)
    arrs = _counters(2, 3, 1)
    m = fn(binned, pre, 0, 3, 30, 3, 0, 3, 30, 2, 0, 1, K.HASH_IDENTITY, K.HIGHWAY_KEY, NO_LIMIT, NO_LIMIT, *arrs,
           np.empty(4, np.int64), np.empty(4, np.int64), np.empty(3 * 2048, np.int64), False)
    pairs, distinct, kept, raw, naive, dropped = (a.tolist() for a in arrs)
    assert int(m) == 4
    assert pairs == [1, 0, 1, 1, 0, 1] and distinct == pairs and kept == pairs
    assert raw == [2, 2]
    assert naive == [1, 0, 1]


def _u64_twice_and_u1_one_bucket(fn, qbits):
    """Scan u64 (two raw ids in one pair, R' 0) and u1 (R' 1) in bins [0, 2) of ``qbits``,
    one bucket, max_uniq 1: sorted u1 then u64, so u1 is kept and u64's 2 raw ids dropped."""
    binned = np.array([_key(64, 0), _key(64, 0), _key(1, 1)], np.int64)
    pre = np.array([[0, 3, 3]], np.int64)
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, binned, pre, 0, 2, qbits, 0, 2, qbits,
                                                                  1, 1, False)
    assert m == 3
    assert (pairs, distinct, kept) == ([2, 0, 0, 0], [2, 0, 0, 0], [1, 0, 0, 0])
    assert (raw, naive, dropped) == ([3, 0], [2, 0], [2])


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
def test_scan_range_second_pass_starts_at_the_first_digit_bit(fn):
    # qbits 11, bins of u >> 11 (one per partition), bins [0, 2): 12 bits, two passes of 6.
    # u64 (bit 6 alone: low digit 0, high digit 1) has two raw ids in one pair, u1 (low digit 1)
    # one. Sorted: u1, u64. One bucket, max_uniq 1: u1 kept, u64's 2 raw ids dropped. (A second
    # pass reading bits 7 and up would leave the low digit's order: u64 kept, u1 dropped.)
    _u64_twice_and_u1_one_bucket(fn, 11)



@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
def test_scan_range_of_an_8_bit_span_in_one_pass(fn):
    # qbits 7, bins of u >> 7 (one per partition), bins [0, 2): u - 0 spans 0..255, 8 bits,
    # one pass of 8 bits. u64 (bit 6) has two raw ids in one pair (R' 0), u1 one (R' 1), all
    # slice 0 (lbits 2), partition 0. Sorted: u1, u64. One bucket, max_uniq 1: u1 kept (rank 0),
    # u64 (rank 1) dropped with its 2 raw ids. A sort whose last passes read the bits out of
    # order (more single-bit passes than 64 with shift counts taken mod 64, as compiled code
    # does) puts u64 first: u64 kept, u1's 1 raw id dropped.
    _u64_twice_and_u1_one_bucket(fn, 7)

# Ranges wider than 11 bits: P = 2, qbits 12, bins of u >> 12 (one per partition), 8 identity
# buckets, col = p + 2 q:
#   u 2 -> col 4 (b4); 5 -> 10 (b2); 300 -> 600 (b0); 4096+129 -> 259 (b3); 4096+130 -> 261 (b5)
#   task 0 (slice 0): bin 0 (300,0) (5,1) (300,1) | bin 1 (4226,0)
#   task 1 (slice 1): bin 0 (300,4) (2,5) | bin 1 (4225,4) (4226,6)
# Sorted by u, stable: (2,5) (5,1) (300,0) (300,1) (300,4) (4225,4) (4226,0) (4226,6). The
# low 7 bits alone (1 for 4225, 2 for 4226 and 2, 44 for 300) would put 4225 first and
# (4226,0) (2,5) (4226,6) in a row: u4226 split in two.
WIDE = np.array([_key(300, 0), _key(5, 1), _key(300, 1), _key(4226, 0), _key(300, 4), _key(2, 5), _key(4225, 4),
                 _key(4226, 6)], np.int64)
WIDE_PRE = np.array([[0, 3, 4], [4, 6, 8]], np.int64)


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
def test_scan_range_wider_than_one_radix_pass(fn):
    # both bins: 13 bits of u - 0, two passes of 7 bits. Counters at (slice * 2 + p) * 8 + b.
    # Stream (slice 0, p 0, b 0) holds u300 rows 0 and 1: 2 pairs, 1 distinct; with max_uniq 1
    # nothing is dropped there. Stream (slice 0, p 0, b 2) is u5, its own.
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, WIDE, WIDE_PRE, 0, 2, 12, 0, 2, 12, 8, 1,
                                                                  False)
    assert m == 8
    assert pairs == _at(32, i0=2, i2=1, i13=1, i16=1, i20=1, i27=1, i29=1)
    assert distinct == _at(32, i0=1, i2=1, i13=1, i16=1, i20=1, i27=1, i29=1)
    assert kept == pairs
    assert raw == _at(16, i0=2, i2=1, i5=1, i8=1, i11=1, i12=1, i13=1)
    # whole-batch distinct ids: u300 and u4226 are counted once although their keys
    # come from both tasks, which only holds if the sort brought each one's keys together
    assert naive == _at(16, i0=1, i2=1, i4=1, i11=1, i13=1)
    assert dropped == [0] * 8


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
def test_scan_range_wide_partition_1_with_a_prefix_cut(fn):
    # bin 1 (p_lo 1, Pc 1): u - 4096 is 129 or 130 (12 bits of span: two passes of 6 bits).
    # Sorted: (4225,4) (4226,0) (4226,6): c = slice * 8 + b; slice 1 holds u4225 (b3) and
    # u4226 (b5), different buckets, so nothing is cut at max_uniq 1.
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, WIDE, WIDE_PRE, 1, 2, 12, 1, 1, 12, 8, 1,
                                                                  False)
    assert m == 3
    assert pairs == _at(16, i5=1, i11=1, i13=1)
    assert kept == pairs
    assert naive == _at(8, i3=1, i5=1)
    # one bucket for all (NB = 1): slice 1 sees u4225 then u4226, the second is cut
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, WIDE, WIDE_PRE, 1, 2, 12, 1, 1, 12, 1, 1,
                                                                  False)
    assert (pairs, distinct, kept, raw, naive, dropped) == ([1, 2], [1, 2], [1, 1], [1, 2], [2], [1])


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
def test_scan_range_of_three_radix_passes(fn):
    # The u of THREE_PASS_IDS, one slice task, keys in R' order within each bin of u >> 21;
    # u131331 has three raw ids (a sample's duplicates). The range is every bin: 23 bits, three
    # passes of 8. One bucket (NB = 1), max_uniq 2: slice 0's partition-0 stream is, sorted,
    # u773, u66051 (kept), u130816, u131331 (dropped: 1 + 3 raw ids). Unsorted, u131331 would
    # be kept and 2 raw ids dropped. u4194309 (partition 1) is in slice 1 (R' 5).
    binned = np.array([_key(131331, 0)] * 3 + [_key(66051, 1), _key(130816, 2), _key(773, 3), _key(4194309, 5)],
                      np.int64)
    pre = np.array([[0, 6, 6, 7, 7]], np.int64)
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, binned, pre, 0, 4, 21, 0, 2, 22, 1, 2, False)
    assert m == 7
    assert (pairs, distinct, kept) == ([4, 0, 0, 1], [4, 0, 0, 1], [2, 0, 0, 1])
    assert (raw, naive, dropped) == ([6, 1], [4, 1], [4])


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
def test_scan_range_of_two_radix_passes_of_11_bits(fn):
    # Bins 0 and 1 of the keys above (partition 0, u < 2**22): a span of 22 bits, two passes of
    # 11 bits, whose histograms fill 2 * 2048 of the 3 * 2048 entries given. Low 11 bits of q:
    # 259 (u131331), 515 (u66051), 1792 (u130816), 773 (u773): the high digit decides.
    binned = np.array([_key(131331, 0)] * 3 + [_key(66051, 1), _key(130816, 2), _key(773, 3), _key(4194309, 5)],
                      np.int64)
    pre = np.array([[0, 6, 6, 7, 7]], np.int64)
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, binned, pre, 0, 2, 21, 0, 1, 22, 1, 2, False)
    assert m == 6
    assert (pairs, distinct, kept) == ([4, 0], [4, 0], [2, 0])
    assert (raw, naive, dropped) == ([6, 0], [4], [4])


@pytest.mark.parametrize("fn", [K.scan_range, K.scan_range_reference])
def test_scan_range_second_pass_digits_are_of_u_less_the_range_start(fn):
    # P = 2, qbits 12, bins of u >> 6 (64 per partition, C = 128). The range is bins [1, 65):
    # u from 64 up, u - 64 spans 64 * 64 = 4096 values, 12 bits: two passes of 6 bits, the
    # second reading digit (u - 64) >> 6. One slice task, bins in R' order:
    #   bin 1: u69 twice (R' 0: two raw ids, one pair); bin 63: u4035 at R' 0 and R' 1 (two pairs)
    # u69 - 64 = 5 (digits 5, 0), u4035 - 64 = 3971 = 62 * 64 + 3 (digits 3, 62): sorted u69,
    # u4035. All slice 0, partition 0, one bucket, max_uniq 1: u69 kept (1 pair), u4035's
    # 2 raw ids dropped. The second digit of u + 64 instead (133 >> 6 = 2 for u69, 4099 >> 6 =
    # 64, digit 0, for u4035) would put u4035 first: its 2 pairs kept, u69's 2 raw ids dropped.
    binned = np.array([_key(69, 0), _key(69, 0), _key(4035, 0), _key(4035, 1)], np.int64)
    pre = np.array([[0, 0] + [2] * 62 + [4] * 65], np.int64)          # bin c's first key, c = 0..128
    m, (pairs, distinct, kept, raw, naive, dropped) = _scan_range(fn, binned, pre, 1, 65, 6, 0, 2, 12, 1, 1, False)
    assert m == 4
    assert (pairs, distinct, kept) == ([3, 0, 0, 0], [2, 0, 0, 0], [1, 0, 0, 0])
    assert (raw, naive, dropped) == ([4, 0], [2, 0], [2])


# --------------------------------------------------------------------------------------
# add_range_counts, range_counter_views, range_counter_size
# --------------------------------------------------------------------------------------
def test_range_counter_layout():
    # 2 slices, 2 partitions of the range, 2 buckets: 3 x 8 stream counters, 4 raw, 4 naive, 2 dropped
    assert K.range_counter_size(2, 2, 2) == 34
    assert K.range_counter_size(1, 1, 1) == 6
    loc = np.arange(34)
    views = K.range_counter_views(loc, 2, 2, 2)
    assert [v.tolist() for v in views] == [list(range(0, 8)), list(range(8, 16)), list(range(16, 24)),
                                           [24, 25, 26, 27], [28, 29, 30, 31], [32, 33]]


@pytest.mark.parametrize("fn", [K.add_range_counts, K.add_range_counts_reference])
def test_add_range_counts_by_hand(fn):
    # a range of partitions 1 and 2 (p_lo 1, Pc 2) of P = 3, 2 slices, 2 buckets; loc = 1 .. 34.
    # Whole stream counters (slice, p, b) at (slice * 3 + p) * 2 + b: slice 0 takes loc 1-4 at
    # 2-5, slice 1 loc 5-8 at 8-11 (distinct +8, kept +16 on loc); raw loc 25-28, naive
    # (p * 2 + b) loc 29-32 at 2-5, dropped loc 33, 34.
    loc = np.arange(1, 35, dtype=np.int64)
    pairs, distinct, kept = (np.full(12, 100, np.int64) for _ in range(3))
    raw, naive, dropped = np.full(4, 100, np.int64), np.full(6, 100, np.int64), np.full(2, 100, np.int64)
    fn(loc, 2, 1, 2, 3, 2, pairs, distinct, kept, raw, naive, dropped)
    assert pairs.tolist() == [100, 100, 101, 102, 103, 104, 100, 100, 105, 106, 107, 108]
    assert distinct.tolist() == [100, 100, 109, 110, 111, 112, 100, 100, 113, 114, 115, 116]
    assert kept.tolist() == [100, 100, 117, 118, 119, 120, 100, 100, 121, 122, 123, 124]
    assert raw.tolist() == [125, 126, 127, 128]
    assert naive.tolist() == [100, 100, 129, 130, 131, 132]
    assert dropped.tolist() == [133, 134]
    assert loc.tolist() == [0] * 34


# --------------------------------------------------------------------------------------
# minibatch_sums
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [K.minibatch_sums, K.minibatch_sums_reference])
def test_minibatch_sums_by_hand(fn):
    counts = np.array([[1, 2, 3, 4], [10, 20, 30, 40]], np.int64)
    out = np.full((2, 2), 100, np.int64)
    fn(counts, np.array([1, 0, 1, 0], np.int64), out)          # buckets 1, 3 -> mini-batch 0
    assert out.tolist() == [[106, 160], [104, 140]]
    whole = np.zeros((3, 2, 2), np.int64)                      # a strided view: out = whole[:, 1]
    fn(counts, np.array([0, 0, 2, 2], np.int64), whole[:, 1])
    assert whole[:, 1].tolist() == [[3, 30], [0, 0], [7, 70]]
    assert whole[:, 0].tolist() == [[0, 0]] * 3


# --------------------------------------------------------------------------------------
# sample_split
# --------------------------------------------------------------------------------------
def _sample_split(fn, ids, splits, shifts, offsets, n, nsl, P, max_ids, max_uniq):
    nf = len(shifts)
    starts = np.full(nsl * n, -9, np.int64)
    nruns = np.full(nsl, -9, np.int64)
    rec = np.full((nsl * n * P, 5), -9, np.int64)
    raw = np.full(nsl * n, -9, np.int64)
    nrec = fn(np.array(ids, np.int64), np.array(splits, np.int64), np.arange(nf, dtype=np.int64),
              np.array(shifts, np.int64), np.array(offsets, np.int64), n, nsl, P, max_ids, max_uniq,
              np.empty((16, 4), np.int32), starts, nruns, rec, raw)
    return int(nrec), starts, nruns, rec, raw


SPLIT_IDS = [0, 2, 1, 0, 4, 4]              # slice of samples [0, 2] [1] [0] [4, 4]
SPLIT_SPLITS = [[0, 2, 3, 4, 6]]


@pytest.mark.parametrize("fn", [K.sample_split, K.sample_split_reference])
def test_sample_split_cuts_at_max_ids(fn):
    # P = 2, no rotation or offset: col = id. Partition 0 gets {0, 2}, -, {0}, {4} (the 4 twice
    # in one sample is one pair): pairs 2, 2, 3, then 4 > 3; distinct 2, 2, 2.
    nrec, starts, nruns, rec, raw = _sample_split(fn, SPLIT_IDS, SPLIT_SPLITS, [0], [0], 4, 1, 2, 3, 2)
    assert nrec == 3 and nruns.tolist() == [2]
    assert starts[:2].tolist() == [0, 3]
    assert rec[:3].tolist() == [[0, 0, 0, 3, 2], [0, 0, 1, 1, 1], [0, 1, 0, 1, 1]]
    assert raw[:2].tolist() == [4, 2]


@pytest.mark.parametrize("fn", [K.sample_split, K.sample_split_reference])
@pytest.mark.parametrize("max_ids, max_uniq, runs", [(4, 3, 1), (10, 2, 2), (3, 3, 2), (4, 2, 2)])
def test_sample_split_at_the_limits(fn, max_ids, max_uniq, runs):
    # the whole slice: partition 0 has 4 pairs and 3 distinct ids (0, 2, 4), partition 1 one
    nrec, starts, nruns, rec, raw = _sample_split(fn, SPLIT_IDS, SPLIT_SPLITS, [0], [0], 4, 1, 2, max_ids, max_uniq)
    assert nruns.tolist() == [runs]
    if runs == 1:
        assert nrec == 2 and starts[0] == 0
        assert rec[:2].tolist() == [[0, 0, 0, 4, 3], [0, 0, 1, 1, 1]]
        assert raw[0] == 6
    else:
        assert starts[:2].tolist() == [0, 3]


@pytest.mark.parametrize("fn", [K.sample_split, K.sample_split_reference])
def test_sample_split_an_id_of_an_earlier_run_is_new_again(fn):
    # two slices of 4 samples, max_uniq 2. Slice 1: [0, 2] [6] [0] [2]: {0, 2}; 6 makes 3, a
    # new run {6}; 0 (seen in run 0) is new in run 1: {6, 0}; 2 makes 3, a new run {2}.
    ids = [0, 2, 1, 0, 4, 4] + [0, 2, 6, 0, 2]
    splits = [[0, 2, 3, 4, 6, 8, 9, 10, 11]]
    nrec, starts, nruns, rec, raw = _sample_split(fn, ids, splits, [0], [0], 4, 2, 2, 10, 2)
    assert nruns.tolist() == [2, 3]
    assert starts[:2].tolist() == [0, 3] and starts[4:7].tolist() == [0, 1, 3]
    assert rec[:nrec].tolist() == [[0, 0, 0, 3, 2], [0, 0, 1, 1, 1], [0, 1, 0, 1, 1],
                                   [1, 0, 0, 2, 2], [1, 1, 0, 2, 2], [1, 2, 0, 1, 1]]
    assert raw[:2].tolist() == [4, 2] and raw[4:7].tolist() == [2, 2, 1]


@pytest.mark.parametrize("fn", [K.sample_split, K.sample_split_reference])
def test_sample_split_column_ids_of_two_tables(fn):
    # P = 2; table a (no rotation, offset 0): col = id; table b (rotation 1, offset 4):
    # col = (id + 1) % 2 + 2 * (id // 2 + 4), so b's 0 is col 9, a's 9 too.
    # Sample 0: a [9], b [0]: partition 1, 2 pairs (two rows), 1 distinct id.
    # Sample 1: b [0]: 1 pair, the same id. One run: 3 pairs (== max_ids), 1 distinct.
    # (With col = p + P * q + offset, b's 0 would be col 5: 2 distinct, over max_uniq 1.)
    nrec, starts, nruns, rec, raw = _sample_split(fn, [9, 0, 0], [[0, 1, 1], [1, 2, 3]], [0, 1], [0, 4], 2, 1, 2,
                                                  3, 1)
    assert nrec == 1 and nruns.tolist() == [1]
    assert rec[0].tolist() == [0, 0, 1, 3, 1]
    assert raw[0] == 3


@pytest.mark.parametrize("fn", [K.sample_split, K.sample_split_reference])
@pytest.mark.parametrize("ids, max_ids, max_uniq, expected", [
    ([0, 0, 2, 4], 2, 5, [0, 1, 0, 3, 0]),           # sample 1 sends 3 pairs to partition 0
    ([0, 0, 2, 4], 5, 2, [0, 1, 0, 3, 1]),           # ... and 3 distinct ids
    ([0, 0, 2, 4], 3, 2, [0, 1, 0, 3, 1]),           # pairs == max_ids fit: only the distinct ids are over
    ([0, 1, 0, 3, 2, 5, 4], 5, 2, [0, 1, 1, 3, 1]),  # both partitions over: the first seen (1) is reported
])
def test_sample_split_one_sample_over_the_limits(fn, ids, max_ids, max_uniq, expected):
    splits = [[0, 1, len(ids)]]
    nrec, starts, nruns, rec, raw = _sample_split(fn, ids, splits, [0], [0], 2, 1, 2, max_ids, max_uniq)
    assert nrec == -1
    assert rec[0].tolist() == expected


@pytest.mark.parametrize("fn", [K.sample_split, K.sample_split_reference])
@pytest.mark.parametrize("ids, max_ids, max_uniq, expected", [
    ([0, 2, 0, 2], 3, 5, [0, 0, 0, 4, 0]),     # 4 pairs > 3 (2 distinct): the pairs are reported
    ([0, 2, 0, 4], 4, 2, [0, 0, 0, 3, 1]),     # 4 pairs fit 4, 3 distinct > 2: the distinct ids are
])
def test_sample_split_reports_the_count_of_the_limit_exceeded(fn, ids, max_ids, max_uniq, expected):
    # P = 2, one sample, two features of one table (no rotation, offset 0: col = id): feature 0
    # has ids[:2], feature 1 ids[2:]. An id in both features is two pairs (two rows) but one
    # distinct id, so the sample's pairs (4) and distinct ids (2, then 3) differ, all in
    # partition 0: the observed count is that of the limit exceeded (which 0: pairs, 1: distinct).
    nrec, starts, nruns, rec, raw = _sample_split(fn, ids, [[0, 2], [2, 4]], [0, 0], [0, 0], 1, 1, 2, max_ids,
                                                  max_uniq)
    assert nrec == -1
    assert rec[0].tolist() == expected


@pytest.mark.parametrize("fn", [K.sample_split, K.sample_split_reference])
def test_sample_split_reports_the_first_rotated_partition_seen(fn):
    # P = 3, rotation 1: p = (id + 1) % 3, so ids 0, 3 go to partition 1 and 1, 4 to
    # partition 2 (0 - 1 = -1 = 2 mod 3 would send id 0 to partition 2). One sample
    # [0, 3, 1, 4], max_ids 1: 2 pairs in partitions 1 and 2 both; the first seen, id 0's
    # partition 1, is reported: sample 0, partition 1, 2 ids, which 0 (max_ids).
    nrec, starts, nruns, rec, raw = _sample_split(fn, [0, 3, 1, 4], [[0, 4]], [1], [0], 1, 1, 3, 1, 5)
    assert nrec == -1
    assert rec[0].tolist() == [0, 0, 1, 2, 0]


# --------------------------------------------------------------------------------------
# naive_by_run
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [K.naive_by_run, K.naive_by_run_reference])
def test_naive_by_run_by_hand(fn):
    # P = 2, qbits 2, lbits 2, n = 2: the sample of R' is slice * 2 + (row % 2); samples 0..3
    # are in runs 0, 1, 1, 0.
    #   u1 (p0): R' 0 (sample 0, run 0), 1 (sample 1, run 1), 5 (sample 3, run 0)
    #   u2 (p0): R' 6 (slice 1, row 2 = feature 1 sample 0: sample 2, run 1)
    #   u4 (p1): R' 4 (sample 2, run 1), 7 (row 3: sample 3, run 0)
    #   u5 (p1): R' 3 (row 3 of slice 0: sample 1, run 1)
    keys = np.array([_key(1, 0), _key(1, 1), _key(1, 5), _key(2, 6), _key(4, 4), _key(4, 7), _key(5, 3),
                     _key(6, 0)], np.int64)                    # the last key is past m
    naive = np.full(4, 10, np.int64)
    fn(keys, 7, 2, 2, 2, 2, np.array([0, 1, 1, 0], np.int64), np.full(2, -1, np.int64), naive)
    # run 0: p0 {u1}, p1 {u4}; run 1: p0 {u1, u2}, p1 {u4, u5}
    assert naive.tolist() == [11, 11, 12, 12]


def test_warmup_compiles_the_bucket_kernels_for_both_hashes(monkeypatch):
    # warmup() exists to compile the kernels (numba compiles a branch's code with the call, but
    # the first call is what compiles at all), so it must call the two kernels that take a hash
    # mode with each: HighwayHash (0) and identity (1). The spies pass the call on, so that
    # the kernels that call scan_group_buckets in pure Python still work.
    seen = {"scan_group_buckets": [], "ids_to_buckets": []}
    for name, mode_arg in (("scan_group_buckets", 9), ("ids_to_buckets", 5)):
        real = getattr(K, name)

        def spy(*args, real=real, name=name, mode_arg=mode_arg):
            seen[name].append(int(args[mode_arg]))
            return real(*args)
        monkeypatch.setattr(K, name, spy)
    K.warmup()
    assert set(seen["scan_group_buckets"]) == {K.HASH_HIGHWAY, K.HASH_IDENTITY} == {0, 1}
    assert sorted(seen["ids_to_buckets"]) == [0, 1]


def test_warmup_runs_every_kernel_on_in_bounds_inputs():
    """``warmup()`` calls each kernel on tiny inputs: they must be valid (pure Python checks bounds)."""
    K.warmup()
    for kernel in (K.highway_hash_int32, K.scan_group_buckets, K.ids_to_buckets, K.sample_split, K.naive_by_run,
                   K.bin_slices, K.scan_range, K.add_range_counts, K.minibatch_sums):
        signatures = getattr(kernel, "signatures", None)
        if signatures is not None:           # compiled (not NUMBA_DISABLE_JIT=1)
            assert len(signatures) >= 1
