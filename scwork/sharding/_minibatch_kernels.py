"""Numba kernels of mini-batching, each beside a slow, obvious reference.

Nothing compiles at import: ``@jit`` compiles on first call or in :func:`warmup`.
:mod:`scwork.sharding.minibatch` imports this module lazily.

Kernels
-------
highway_hash_int32
    HighwayHash-64 of 4-byte little-endian integers with a fixed key: the hash
    jax-tpu-embedding uses to put an id into a mini-batching bucket
    (``CooFormat::GetBucketId`` in ``jax_tpu_embedding/sparsecore/lib/core/coo_format.h``:
    ``HighwayHash(col_id) & (kMaxMinibatchingBuckets - 1)``). Transcribed from the
    portable C implementation of google/highwayhash (``c/highwayhash.c``); the
    reference :func:`highway_hash64_reference` hashes byte strings of any length and
    is checked against that repository's test vectors.
scan_group_buckets
    One pass over a group's sorted keys (see :mod:`scwork.sharding._kernels` for the
    key layout) that puts every id into its bucket and counts, per (slice,
    partition, bucket) stream: ids after per-sample dedup, distinct ids, ids kept
    by the prefix cut of [jte] preprocess_sparse_dense_matmul_input *applied per bucket* (as the reference does once
    buckets exist), raw ids per (slice, bucket) and whole-batch distinct ids per
    (partition, bucket).
bin_slices, scan_range
    The same scan cut finer than a table: tasks of slices sort their keys by the
    top bits of ``u`` (coarse bins); tasks of bin ranges gather, sort and scan them.
add_range_counts
    A range's counters added into its stack's.
minibatch_sums
    Per-bucket counters summed per mini-batch.
ids_to_buckets
    Bucket of every raw id of a feature (for the per-mini-batch inputs).
sample_split
    Greedy sample-dimension mini-batching: every (device, source SC) slice is cut
    into the fewest contiguous runs of samples whose per-partition counts fit the
    limits; counts of every run are recorded.
naive_by_run
    Whole-batch distinct ids per (run, partition), from a group's sorted keys.
"""

from __future__ import annotations

import numpy as np

from scwork._jit import jit
from scwork.sharding._kernels import _build_keys, _radix_plan, _radix_scatter
from scwork.sharding.column_id import column_id

__all__ = [
    "HIGHWAY_KEY",
    "highway_hash64_reference",
    "highway_hash_int32",
    "highway_hash_int32_reference",
    "scan_group_buckets",
    "scan_group_buckets_reference",
    "bin_slices",
    "bin_slices_reference",
    "scan_range",
    "scan_range_reference",
    "add_range_counts",
    "add_range_counts_reference",
    "range_counter_views",
    "range_counter_size",
    "minibatch_sums",
    "minibatch_sums_reference",
    "ids_to_buckets",
    "ids_to_buckets_reference",
    "sample_split",
    "sample_split_reference",
    "naive_by_run",
    "naive_by_run_reference",
    "warmup",
]

#: ``kHighwayHashKey`` of jax-tpu-embedding (``coo_format.h``): "arbitrarily chosen,
#: forever-unchanging".
#: The stacked column id (:func:`scwork.sharding.column_id.column_id`), compiled into the kernels.
_column_id = jit(inline="always")(column_id)

HIGHWAY_KEY = np.array([0x4451E30F87DB9609, 0xCA7358A1FD2737F8, 0x4B2C991FCEE4FDEA, 0x0B2658E18326F6BA],
                       dtype=np.uint64)

_M64 = (1 << 64) - 1
_LOW32 = 0xFFFFFFFF

# bucket hash modes
HASH_HIGHWAY = 0
HASH_IDENTITY = 1


# --------------------------------------------------------------------------------------
# HighwayHash: pure-Python reference (any length, Python ints)
# --------------------------------------------------------------------------------------
def _zipper(v1: int, v0: int) -> tuple[int, int]:
    add0 = ((((v0 & 0xFF000000) | (v1 & 0xFF00000000)) >> 24)
            | (((v0 & 0xFF0000000000) | (v1 & 0xFF000000000000)) >> 16)
            | (v0 & 0xFF0000) | ((v0 & 0xFF00) << 32)
            | ((v1 & 0xFF00000000000000) >> 8) | (v0 << 56)) & _M64
    add1 = ((((v1 & 0xFF000000) | (v0 & 0xFF00000000)) >> 24)
            | (v1 & 0xFF0000) | ((v1 & 0xFF0000000000) >> 16)
            | ((v1 & 0xFF00) << 24) | ((v0 & 0xFF000000000000) >> 8)
            | ((v1 & 0xFF) << 48) | (v0 & 0xFF00000000000000)) & _M64
    return add1, add0


def _update(st: dict, lanes: list[int]) -> None:
    v0, v1, mul0, mul1 = st["v0"], st["v1"], st["mul0"], st["mul1"]
    for i in range(4):
        v1[i] = (v1[i] + mul0[i] + lanes[i]) & _M64
        mul0[i] ^= ((v1[i] & _LOW32) * (v0[i] >> 32)) & _M64
        v0[i] = (v0[i] + mul1[i]) & _M64
        mul1[i] ^= ((v0[i] & _LOW32) * (v1[i] >> 32)) & _M64
    for a, b, src, dst in ((1, 0, v1, v0), (3, 2, v1, v0), (1, 0, v0, v1), (3, 2, v0, v1)):
        add1, add0 = _zipper(src[a], src[b])
        dst[a] = (dst[a] + add1) & _M64
        dst[b] = (dst[b] + add0) & _M64


def _rot32(x: int, count: int) -> int:
    return ((x << count) | (x >> (32 - count))) & _LOW32 if count else x


def highway_hash64_reference(data: bytes, key=HIGHWAY_KEY) -> int:
    """HighwayHash-64 of ``data`` (``HighwayHash64`` of google/highwayhash ``c/highwayhash.c``).

    Examples
    --------
    The first test vectors of google/highwayhash (``c/highwayhash_test.c``):

    >>> key = [0x0706050403020100, 0x0F0E0D0C0B0A0908, 0x1716151413121110, 0x1F1E1D1C1B1A1918]
    >>> hex(highway_hash64_reference(b"", key)), hex(highway_hash64_reference(bytes(range(4)), key))
    ('0x907a56de22c26e53', '0xf205a46893007eda')
    """
    k = [int(x) for x in key]
    mul0 = [0xDBE6D5D5FE4CCE2F, 0xA4093822299F31D0, 0x13198A2E03707344, 0x243F6A8885A308D3]
    mul1 = [0x3BD39E10CB0EF593, 0xC0ACF169B5F18A8C, 0xBE5466CF34E90C6C, 0x452821E638D01377]
    st = {
        "mul0": mul0,
        "mul1": mul1,
        "v0": [mul0[i] ^ k[i] for i in range(4)],
        "v1": [mul1[i] ^ (((k[i] >> 32) | (k[i] << 32)) & _M64) for i in range(4)],
    }
    size = len(data)
    i = 0
    while i + 32 <= size:
        _update(st, [int.from_bytes(data[i + 8 * j:i + 8 * j + 8], "little") for j in range(4)])
        i += 32
    rem = size & 31
    if rem:
        bytes_ = data[i:]
        size_mod4 = rem & 3
        rstart = rem & ~3
        for j in range(4):
            st["v0"][j] = (st["v0"][j] + (rem << 32) + rem) & _M64
            lo, hi = st["v1"][j] & _LOW32, st["v1"][j] >> 32
            st["v1"][j] = _rot32(lo, rem) | (_rot32(hi, rem) << 32)
        packet = bytearray(32)
        packet[:rstart] = bytes_[:rstart]
        if rem & 16:
            for j in range(4):
                packet[28 + j] = bytes_[rstart + j + size_mod4 - 4]
        elif size_mod4:
            packet[16] = bytes_[rstart]
            packet[17] = bytes_[rstart + (size_mod4 >> 1)]
            packet[18] = bytes_[rstart + size_mod4 - 1]
        _update(st, [int.from_bytes(bytes(packet[8 * j:8 * j + 8]), "little") for j in range(4)])
    for _ in range(4):
        v0 = st["v0"]
        perm = [((v0[t] >> 32) | (v0[t] << 32)) & _M64 for t in (2, 3, 0, 1)]
        _update(st, perm)
    return (st["v0"][0] + st["v1"][0] + st["mul0"][0] + st["mul1"][0]) & _M64


def highway_hash_int32_reference(values, key=HIGHWAY_KEY) -> np.ndarray:
    """uint64 HighwayHash-64 of each value's 4 little-endian bytes (``HighwayHash(int)``)."""
    vals = np.asarray(values, np.int64)
    return np.array([highway_hash64_reference(int(v & _LOW32).to_bytes(4, "little"), key) for v in vals],
                    dtype=np.uint64)


# --------------------------------------------------------------------------------------
# HighwayHash: numba, specialised to 4-byte inputs
# --------------------------------------------------------------------------------------
_C_FF = np.uint64(0xFF)
_C_FF00 = np.uint64(0xFF00)
_C_FF0000 = np.uint64(0xFF0000)
_C_FF000000 = np.uint64(0xFF000000)
_C_FF00000000 = np.uint64(0xFF00000000)
_C_FF0000000000 = np.uint64(0xFF0000000000)
_C_FF000000000000 = np.uint64(0xFF000000000000)
_C_FF00000000000000 = np.uint64(0xFF00000000000000)
_C_LOW32 = np.uint64(0xFFFFFFFF)
_U8 = np.uint64(8)
_U16 = np.uint64(16)
_U24 = np.uint64(24)
_U28 = np.uint64(28)
_U32 = np.uint64(32)
_U4 = np.uint64(4)
_U48 = np.uint64(48)
_U56 = np.uint64(56)
_SIZE4 = np.uint64((4 << 32) + 4)
_MUL0 = (np.uint64(0xDBE6D5D5FE4CCE2F), np.uint64(0xA4093822299F31D0),
         np.uint64(0x13198A2E03707344), np.uint64(0x243F6A8885A308D3))
_MUL1 = (np.uint64(0x3BD39E10CB0EF593), np.uint64(0xC0ACF169B5F18A8C),
         np.uint64(0xBE5466CF34E90C6C), np.uint64(0x452821E638D01377))
_MUL0_0, _MUL0_1, _MUL0_2, _MUL0_3 = _MUL0
_MUL1_0, _MUL1_1, _MUL1_2, _MUL1_3 = _MUL1


@jit(inline="always")
def _zip0(v1, v0):
    return ((((v0 & _C_FF000000) | (v1 & _C_FF00000000)) >> _U24)
            | (((v0 & _C_FF0000000000) | (v1 & _C_FF000000000000)) >> _U16)
            | (v0 & _C_FF0000) | ((v0 & _C_FF00) << _U32)
            | ((v1 & _C_FF00000000000000) >> _U8) | (v0 << _U56))


@jit(inline="always")
def _zip1(v1, v0):
    return ((((v1 & _C_FF000000) | (v0 & _C_FF00000000)) >> _U24)
            | (v1 & _C_FF0000) | ((v1 & _C_FF0000000000) >> _U16)
            | ((v1 & _C_FF00) << _U24) | ((v0 & _C_FF000000000000) >> _U8)
            | ((v1 & _C_FF) << _U48) | (v0 & _C_FF00000000000000))


@jit(inline="always")
def _swap32(x):
    return (x >> _U32) | (x << _U32)


@jit(inline="always")
def _rot4(x):
    lo = x & _C_LOW32
    hi = x >> _U32
    lo = ((lo << _U4) | (lo >> _U28)) & _C_LOW32
    hi = ((hi << _U4) | (hi >> _U28)) & _C_LOW32
    return lo | (hi << _U32)


@jit(inline="always")
def _hh_update(a0, a1, a2, a3, v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13):
    v10 += m00 + a0
    m00 ^= (v10 & _C_LOW32) * (v00 >> _U32)
    v00 += m10
    m10 ^= (v00 & _C_LOW32) * (v10 >> _U32)
    v11 += m01 + a1
    m01 ^= (v11 & _C_LOW32) * (v01 >> _U32)
    v01 += m11
    m11 ^= (v01 & _C_LOW32) * (v11 >> _U32)
    v12 += m02 + a2
    m02 ^= (v12 & _C_LOW32) * (v02 >> _U32)
    v02 += m12
    m12 ^= (v02 & _C_LOW32) * (v12 >> _U32)
    v13 += m03 + a3
    m03 ^= (v13 & _C_LOW32) * (v03 >> _U32)
    v03 += m13
    m13 ^= (v03 & _C_LOW32) * (v13 >> _U32)
    v01 += _zip1(v11, v10)
    v00 += _zip0(v11, v10)
    v03 += _zip1(v13, v12)
    v02 += _zip0(v13, v12)
    v11 += _zip1(v01, v00)
    v10 += _zip0(v01, v00)
    v13 += _zip1(v03, v02)
    v12 += _zip0(v03, v02)
    return v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13


@jit(inline="always")
def _hh_int32(x, k0, k1, k2, k3):
    """HighwayHash-64 of the 4 little-endian bytes of ``x`` (uint64 holding a uint32)."""
    m00, m01, m02, m03 = _MUL0_0, _MUL0_1, _MUL0_2, _MUL0_3
    m10, m11, m12, m13 = _MUL1_0, _MUL1_1, _MUL1_2, _MUL1_3
    v00 = m00 ^ k0
    v01 = m01 ^ k1
    v02 = m02 ^ k2
    v03 = m03 ^ k3
    v10 = m10 ^ _swap32(k0)
    v11 = m11 ^ _swap32(k1)
    v12 = m12 ^ _swap32(k2)
    v13 = m13 ^ _swap32(k3)
    # UpdateRemainder with size_mod32 = 4: the 4 bytes are lane 0 of the packet
    v00 += _SIZE4
    v01 += _SIZE4
    v02 += _SIZE4
    v03 += _SIZE4
    v10 = _rot4(v10)
    v11 = _rot4(v11)
    v12 = _rot4(v12)
    v13 = _rot4(v13)
    z = np.uint64(0)
    (v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13) = _hh_update(
        x, z, z, z, v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13)
    # Finalize64: PermuteAndUpdate x 4 (unrolled so that LLVM can vectorise the caller's loop)
    (v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13) = _hh_update(
        _swap32(v02), _swap32(v03), _swap32(v00), _swap32(v01),
        v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13)
    (v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13) = _hh_update(
        _swap32(v02), _swap32(v03), _swap32(v00), _swap32(v01),
        v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13)
    (v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13) = _hh_update(
        _swap32(v02), _swap32(v03), _swap32(v00), _swap32(v01),
        v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13)
    (v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13) = _hh_update(
        _swap32(v02), _swap32(v03), _swap32(v00), _swap32(v01),
        v00, v01, v02, v03, v10, v11, v12, v13, m00, m01, m02, m03, m10, m11, m12, m13)
    return v00 + v10 + m00 + m10


@jit
def highway_hash_int32(values, key, out):
    """``out[i] = HighwayHash64(4 little-endian bytes of values[i], key)`` (uint64)."""
    k0, k1, k2, k3 = key[0], key[1], key[2], key[3]
    for i in range(values.shape[0]):
        out[i] = _hh_int32(np.uint64(values[i] & 0xFFFFFFFF), k0, k1, k2, k3)


@jit
def _buckets_into(cols, nd, mode, nb_mask, key, out):
    """``out[j]`` = bucket of ``cols[j]`` for ``j < nd`` (a plain loop LLVM vectorises)."""
    if mode == HASH_HIGHWAY:
        k0, k1, k2, k3 = key[0], key[1], key[2], key[3]
        msk = np.uint64(nb_mask)
        for j in range(nd):
            out[j] = np.int64(_hh_int32(np.uint64(cols[j] & 0xFFFFFFFF), k0, k1, k2, k3) & msk)
    else:
        for j in range(nd):
            out[j] = cols[j] & nb_mask


def _bucket_of_reference(col_ids, mode, num_buckets, key):
    col_ids = np.asarray(col_ids, np.int64)
    if mode == HASH_HIGHWAY:
        return (highway_hash_int32_reference(col_ids, key) & np.uint64(num_buckets - 1)).astype(np.int64)
    return col_ids & (num_buckets - 1)


# --------------------------------------------------------------------------------------
# scan_group_buckets
# --------------------------------------------------------------------------------------
@jit(error_model="numpy")
def scan_group_buckets(keys, m, P, p_lo, Pc, qbits, lbits, row_offset, NB, mode, key, max_ids, max_uniq, pairs,
                       distinct, kept, raw, naive_uniq, dropped):
    """Count one sorted group per (slice, partition, bucket); apply the per-bucket prefix cut.

    ``keys`` are sorted as :func:`scwork.sharding._kernels.sort_group` leaves them
    (by ``u = p << qbits | q``, then ``R' = sl << lbits | row``), all of them of
    partitions ``p_lo <= p < p_lo + Pc`` (the whole group: ``p_lo = 0, Pc = P``; a
    range of ``u`` cut out of it by :func:`scan_range`). The bucket of an id
    is ``hash(col_id) & (NB - 1)`` with ``col_id = p + P * (q + row_offset)``
    (jax-tpu-embedding's transformed column id), computed once per distinct id.
    Counter index ``c = (sl * Pc + p - p_lo) * NB + b``:

    - ``pairs[c]`` += (sample, id) pairs after per-sample dedup,
    - ``distinct[c]`` += distinct ids,
    - ``kept[c]`` += pairs kept by the prefix cut (``i < max_ids`` and id rank
      ``< max_uniq`` inside the bucket's stream),
    - ``raw[sl * NB + b]`` += raw ids (duplicates included),
    - ``naive_uniq[(p - p_lo) * NB + b]`` += distinct ids of the whole batch,
    - ``dropped[b]`` += raw ids dropped by the cut (duplicates included).

    Every counter but ``raw`` and ``dropped`` sees only its own partition's keys,
    and the keys of one ``u`` are never split, so disjoint ranges of ``u`` add up to
    the whole group's counts (without a prefix cut; with one, a stream's ranks need
    its partition's keys in order, one range per partition).
    """
    qmask = (np.int64(1) << qbits) - 1
    # pass 1: the column id of every distinct id (a new u), then all their buckets at once
    cols = np.empty(max(m, 1), np.int64)
    nd = 0
    prev_u = np.int64(-1)
    for i in range(m):
        u = (keys[i] >> 32) & _LOW32
        if u != prev_u:
            cols[nd] = _column_id(u >> qbits, u & qmask, row_offset, P)
            nd += 1
            prev_u = u
    bk = np.empty(max(nd, 1), np.int64)
    _buckets_into(cols, nd, mode, NB - 1, key, bk)
    # pass 2: counts
    prev_u = np.int64(-1)
    prev_R = np.int64(-1)
    prev_sl = np.int64(-1)
    b = np.int64(0)
    j = -1
    keep = True
    for i in range(m):
        v = keys[i]
        u = (v >> 32) & _LOW32
        R = v & _LOW32
        p = u >> qbits
        sl = R >> lbits
        newx = u != prev_u
        if newx:
            j += 1
            b = bk[j]
            naive_uniq[(p - p_lo) * NB + b] += 1
        news = newx or sl != prev_sl
        newr = news or R != prev_R
        raw[sl * NB + b] += 1
        c = (sl * Pc + p - p_lo) * NB + b
        if newr:
            if news:
                distinct[c] += 1
            idx = pairs[c]
            pairs[c] = idx + 1
            keep = idx < max_ids and distinct[c] - 1 < max_uniq
            if keep:
                kept[c] += 1
            else:
                dropped[b] += 1
        elif not keep:
            dropped[b] += 1
        prev_u = u
        prev_R = R
        prev_sl = sl


def scan_group_buckets_reference(keys, m, P, p_lo, Pc, qbits, lbits, row_offset, NB, mode, key, max_ids, max_uniq,
                                 pairs, distinct, kept, raw, naive_uniq, dropped):
    """Reference of :func:`scan_group_buckets`: Python dicts of streams, in the obvious way."""
    k = np.asarray(keys[:m], np.int64)
    u = (k >> 32) & _LOW32
    R = k & _LOW32
    p = u >> qbits
    q = u & ((1 << qbits) - 1)
    sl = R >> lbits
    col = column_id(p, q, row_offset, P)
    b = _bucket_of_reference(col, mode, NB, key)
    np.add.at(raw, sl * NB + b, 1)
    seen_naive = set()
    for pp, uu, bb in zip(p.tolist(), u.tolist(), b.tolist()):
        if uu not in seen_naive:
            seen_naive.add(uu)
            naive_uniq[(pp - p_lo) * NB + bb] += 1
    # streams of deduplicated pairs, in (u, R) order
    streams: dict[int, list] = {}
    for i in range(m):
        c = int((sl[i] * Pc + p[i] - p_lo) * NB + b[i])
        lst = streams.setdefault(c, [])
        if lst and lst[-1][0] == u[i] and lst[-1][1] == R[i]:
            lst[-1][2] += 1
        else:
            lst.append([int(u[i]), int(R[i]), 1])
    for c, lst in streams.items():
        seen: set[int] = set()
        for uu, _, count in lst:
            if uu not in seen:
                seen.add(uu)
                distinct[c] += 1      # counts (and ranks) continue over the stack's groups
            rank = distinct[c] - 1
            idx = pairs[c]
            pairs[c] += 1
            if idx < max_ids and rank < max_uniq:
                kept[c] += 1
            else:
                dropped[c % NB] += count


# --------------------------------------------------------------------------------------
# a group's keys cut by ranges of u: bin_slices (slices -> coarse bins), scan_range
# --------------------------------------------------------------------------------------
# The whole-batch view needs every slice's keys of an id in one place, so a table's
# scan used to sort the whole batch's keys of the table at once: one task per table.
# Sorting most-significant digit first instead cuts it finer: each task of slices
# builds its keys (in R' order, as sort_group does) and sorts them stably by the top
# bits of u only (the *coarse bin* u >> cshift, partition in its high part); a task of
# a range of bins then gathers those bins of every slice task in slice order, which
# keeps R' order within each u, sorts them by the rest of u and scans them. The keys
# of one u are never split, so every count but the prefix cut adds up over ranges.
@jit(error_model="numpy")
def _bin_positions(keys, m, cshift, C, base, pre):
    """``pre[c]``: where bin ``c`` (``u >> cshift``) of ``keys[:m]`` starts once the keys sit
    at ``base`` bin by bin; ``pre[C] = base + m``."""
    for c in range(C + 1):
        pre[c] = 0
    for i in range(m):
        pre[(((keys[i] >> 32) & _LOW32) >> cshift) + 1] += 1
    pre[0] = base
    for c in range(C):
        pre[c + 1] += pre[c]


@jit(error_model="numpy")
def bin_slices(ids, splits, has_w, feat_rows, feat_k, n, s0, s1, vocab, P, col_shift, qbits, lbits, cshift, C,
               sort_all, scratch, out, base, pre, hist):
    """Keys of slices ``[s0, s1)`` of one group, stably sorted by coarse bin ``u >> cshift``.

    The keys are those of :func:`scwork.sharding._kernels.sort_group` (built by its
    ``_build_keys``, in increasing ``R'`` order) and land in ``out[base:base + m]``,
    bin by bin, each bin in ``R'`` order. With ``sort_all`` (a group's one slice
    task) they are sorted by ``u`` outright, as ``sort_group`` sorts them, so that
    its range tasks have nothing left to sort; either way the keys of one ``u`` keep
    their ``R'`` order. ``pre[c]`` (``C + 1`` entries) is the
    position in ``out`` of bin ``c``'s first key, ``pre[C] = base + m``. ``scratch``
    holds at least ``m`` keys, ``hist`` at least ``3 * 2048`` entries. Returns
    ``(m, oov)``: ``oov`` the flat position of the first id ``>= vocab`` in build
    order (-1: none; then nothing is written).
    """
    no_w = np.empty(0, np.float32)
    dest = out[base:]
    if sort_all:
        # sort_group's passes, for slices [s0, s1): the last one lands in `dest`
        _, npass, dbits = _radix_plan(P, qbits)
        dmask = (np.int64(1) << dbits) - 1
        nbk = dmask + 1
        for t in range(npass * nbk):
            hist[t] = 0
        first = dest if npass % 2 == 0 else scratch
        other = scratch if npass % 2 == 0 else dest
        m, oov, _ = _build_keys(ids, splits, no_w, has_w, feat_rows, feat_k, 0, n, s0, s1, vocab, P, col_shift,
                                qbits, lbits, False, first, no_w, hist, dmask)
        if oov >= 0:
            return 0, oov
        tot = 0
        for t in range(nbk):
            cnt = hist[t]
            hist[t] = tot
            tot += cnt
        for ps in range(npass):
            nbase = (ps + 1) * nbk if ps + 1 < npass else -1
            if ps % 2 == 0:
                _radix_scatter(first, no_w, other, no_w, m, hist, ps * nbk, ps * dbits, dmask, nbase, False)
            else:
                _radix_scatter(other, no_w, first, no_w, m, hist, ps * nbk, ps * dbits, dmask, nbase, False)
        _bin_positions(dest, m, cshift, C, base, pre)   # the bins' positions in the sorted keys
        return m, -1
    m, oov, _ = _build_keys(ids, splits, no_w, has_w, feat_rows, feat_k, 0, n, s0, s1, vocab, P, col_shift, qbits,
                            lbits, False, scratch, no_w, hist, 2047)
    if oov >= 0:
        return 0, oov
    _bin_positions(scratch, m, cshift, C, base, pre)
    pos = pre[:C].copy()
    for i in range(m):
        v = scratch[i]
        c = ((v >> 32) & _LOW32) >> cshift
        out[pos[c]] = v
        pos[c] += 1
    return m, -1


def bin_slices_reference(ids, splits, has_w, feat_rows, feat_k, n, s0, s1, vocab, P, col_shift, qbits, lbits, cshift,
                         C, sort_all, scratch, out, base, pre, hist):
    """Reference of :func:`bin_slices`: the keys from the engine's reference, a stable argsort by bin (or by u)."""
    from scwork.sharding._kernels import _keys_reference

    del scratch, hist
    for sl in range(s0, s1):          # first out-of-vocabulary id in build order
        for f in feat_rows:
            seg = ids[splits[f, sl * n]:splits[f, (sl + 1) * n]]
            if seg.size and seg.max() >= vocab:
                return 0, int(splits[f, sl * n] + np.flatnonzero(seg >= vocab)[0])
    u, R, _, _ = _keys_reference(ids, splits, np.empty(0, np.float32), np.zeros_like(has_w), feat_rows, feat_k, 0,
                                 n, s1, 0, P, col_shift, qbits, lbits, first_slice=s0)
    coarse = u >> cshift
    order = np.argsort(u if sort_all else coarse, kind="stable")
    m = u.size
    out[base:base + m] = ((u[order].astype(np.uint64) << np.uint64(32)) | R[order].astype(np.uint64)).view(np.int64)
    pre[:] = base + np.searchsorted(coarse[order], np.arange(C + 1), side="left")
    return m, -1


@jit(error_model="numpy")
def scan_range(binned, pre, c0, c1, cshift, P, p_lo, Pc, qbits, lbits, row_offset, NB, mode, key, max_ids, max_uniq,
               pairs, distinct, kept, raw, naive_uniq, dropped, a, b, hist, is_sorted):
    """Gather bins ``[c0, c1)`` of every slice task of a group, sort them, :func:`scan_group_buckets` them.

    ``pre`` (``chunks x (C + 1)``): each slice task's bin positions in ``binned``
    (from :func:`bin_slices`, slice tasks in slice order; ``is_sorted``: one task
    that sorted its keys outright, ``sort_all``). The keys are sorted by
    ``u`` with stable LSD passes of at most 11 bits over ``u - (c0 << cshift)``, the
    first reading the pieces in task order (R' order within each u), then
    ping-ponging between ``a`` and ``b`` (``hist``: at least 3 * 2048 entries). The counters are
    those of ``scan_group_buckets`` for partitions ``[p_lo, p_lo + Pc)``, which must
    hold the range. Returns the number of keys scanned.
    """
    if is_sorted:
        # one slice task that sorted its keys by u: the range is a sorted piece
        i0 = pre[0, c0]
        m = pre[0, c1] - i0
        scan_group_buckets(binned[i0:], m, P, p_lo, Pc, qbits, lbits, row_offset, NB, mode, key, max_ids, max_uniq,
                           pairs, distinct, kept, raw, naive_uniq, dropped)
        return m
    ubase = np.int64(c0) << cshift
    span = (np.int64(c1 - c0) << cshift) - 1
    width = 0
    while (np.int64(1) << width) <= span:
        width += 1
    npass = max(1, (width + 10) // 11)
    dbits = max(1, (width + npass - 1) // npass)
    dmask = (np.int64(1) << dbits) - 1
    nbk = dmask + 1
    # the histograms of every digit in one read of the range's pieces
    for t in range(npass * nbk):
        hist[t] = 0
    m = 0
    for k in range(pre.shape[0]):
        for i in range(pre[k, c0], pre[k, c1]):
            v = ((binned[i] >> 32) & _LOW32) - ubase
            for ps in range(npass):
                hist[ps * nbk + ((v >> (ps * dbits)) & dmask)] += 1
            m += 1
    for ps in range(npass):
        tot = 0
        for t in range(ps * nbk, (ps + 1) * nbk):
            cnt = hist[t]
            hist[t] = tot
            tot += cnt
    # pass 0 reads the pieces where the slice tasks left them (no gathering copy)
    for k in range(pre.shape[0]):
        for i in range(pre[k, c0], pre[k, c1]):
            v = binned[i]
            t = (((v >> 32) & _LOW32) - ubase) & dmask
            a[hist[t]] = v
            hist[t] += 1
    src = a
    dst = b
    for ps in range(1, npass):
        shift = ps * dbits
        base = ps * nbk
        for i in range(m):
            v = src[i]
            t = base + (((((v >> 32) & _LOW32) - ubase) >> shift) & dmask)
            dst[hist[t]] = v
            hist[t] += 1
        src, dst = dst, src
    scan_group_buckets(src, m, P, p_lo, Pc, qbits, lbits, row_offset, NB, mode, key, max_ids, max_uniq, pairs,
                       distinct, kept, raw, naive_uniq, dropped)
    return m


def scan_range_reference(binned, pre, c0, c1, cshift, P, p_lo, Pc, qbits, lbits, row_offset, NB, mode, key, max_ids,
                         max_uniq, pairs, distinct, kept, raw, naive_uniq, dropped, a, b, hist, is_sorted):
    """Reference of :func:`scan_range`: numpy concatenation and a stable argsort by u."""
    del a, b, hist, is_sorted
    keys = np.concatenate([binned[pre[k, c0]:pre[k, c1]] for k in range(pre.shape[0])] + [np.zeros(0, np.int64)])
    keys = keys[np.argsort((keys >> 32) & _LOW32, kind="stable")]
    scan_group_buckets_reference(keys, keys.size, P, p_lo, Pc, qbits, lbits, row_offset, NB, mode, key, max_ids,
                                 max_uniq, pairs, distinct, kept, raw, naive_uniq, dropped)
    return keys.size


@jit(error_model="numpy")
def add_range_counts(loc, nsl, p_lo, Pc, P, NB, pairs, distinct, kept, raw, naive_uniq, dropped):
    """Add a range's counters (``loc``, laid out by :func:`range_counter_views`) to its stack's, zero ``loc``.

    The stack's counters are those of :func:`scan_group_buckets` for every partition
    (``p_lo = 0``, ``Pc = P``).
    """
    w = nsl * Pc * NB
    for sl in range(nsl):
        for pc in range(Pc):
            src = (sl * Pc + pc) * NB
            dst = (sl * P + p_lo + pc) * NB
            for bb in range(NB):
                pairs[dst + bb] += loc[src + bb]
                distinct[dst + bb] += loc[w + src + bb]
                kept[dst + bb] += loc[2 * w + src + bb]
    for i in range(3 * w):
        loc[i] = 0
    o = 3 * w
    for i in range(nsl * NB):
        raw[i] += loc[o + i]
        loc[o + i] = 0
    o += nsl * NB
    for i in range(Pc * NB):
        naive_uniq[p_lo * NB + i] += loc[o + i]
        loc[o + i] = 0
    o += Pc * NB
    for i in range(NB):
        dropped[i] += loc[o + i]
        loc[o + i] = 0


def add_range_counts_reference(loc, nsl, p_lo, Pc, P, NB, pairs, distinct, kept, raw, naive_uniq, dropped):
    """Reference of :func:`add_range_counts` with numpy views."""
    views = range_counter_views(loc, nsl, Pc, NB)
    for whole, part in zip((pairs, distinct, kept), views[:3]):
        whole.reshape(nsl, P, NB)[:, p_lo:p_lo + Pc] += part.reshape(nsl, Pc, NB)
    raw += views[3]
    naive_uniq.reshape(P, NB)[p_lo:p_lo + Pc] += views[4].reshape(Pc, NB)
    dropped += views[5]
    loc[:] = 0


def range_counter_views(loc, nsl, Pc, NB):
    """``(pairs, distinct, kept, raw, naive_uniq, dropped)`` of a range, views into one array ``loc``."""
    w = nsl * Pc * NB
    o = 3 * w
    return (loc[:w], loc[w:2 * w], loc[2 * w:o], loc[o:o + nsl * NB], loc[o + nsl * NB:o + nsl * NB + Pc * NB],
            loc[o + nsl * NB + Pc * NB:o + nsl * NB + Pc * NB + NB])


def range_counter_size(nsl, Pc, NB):
    """Entries of the counters of a range of ``Pc`` partitions (see :func:`range_counter_views`)."""
    return 3 * nsl * Pc * NB + nsl * NB + Pc * NB + NB


# --------------------------------------------------------------------------------------
# minibatch_sums: counters per bucket -> per mini-batch
# --------------------------------------------------------------------------------------
@jit(error_model="numpy")
def minibatch_sums(counts, groups, out):
    """``out[groups[b], r] += counts[r, b]``: per-bucket counters summed per mini-batch.

    ``counts`` (rows, buckets); ``groups`` the mini-batch of each bucket; ``out``
    (mini-batches, rows), possibly a strided view of a larger array.
    """
    for r in range(counts.shape[0]):
        for bb in range(counts.shape[1]):
            out[groups[bb], r] += counts[r, bb]


def minibatch_sums_reference(counts, groups, out):
    """Reference of :func:`minibatch_sums`, one mini-batch at a time."""
    for mb in range(out.shape[0]):
        out[mb] += counts[:, np.asarray(groups) == mb].sum(axis=1)


# --------------------------------------------------------------------------------------
# ids_to_buckets
# --------------------------------------------------------------------------------------
@jit(error_model="numpy")
def ids_to_buckets(ids, P, col_shift, row_offset, NB, mode, key, out):
    """``out[i]`` = bucket of raw id ``ids[i]`` of a table (col_shift, row_offset) of a stack."""
    n = ids.shape[0]
    cols = np.empty(n, np.int64)
    for i in range(n):
        x = ids[i]
        q = x // P
        p = x - q * P + col_shift
        if p >= P:
            p -= P
        cols[i] = _column_id(p, q, row_offset, P)
    _buckets_into(cols, n, mode, NB - 1, key, out)


def ids_to_buckets_reference(ids, P, col_shift, row_offset, NB, mode, key, out):
    """Reference of :func:`ids_to_buckets`."""
    x = np.asarray(ids, np.int64)
    col = column_id((x + col_shift) % P, x // P, row_offset, P)
    out[:] = _bucket_of_reference(col, mode, NB, key)


# --------------------------------------------------------------------------------------
# sample_split: greedy sample-dimension mini-batching
# --------------------------------------------------------------------------------------
# Kept whole although over 120 lines: one loop nest over samples and partitions that numba must
# compile as one, with no call overhead in the hot loop.
@jit(error_model="numpy")
def sample_split(ids, splits, feat_rows, col_shifts, row_offsets, n, nsl, P, max_ids, max_uniq, table, starts,
                 nruns, rec, raw_runs):
    """Cut every slice into the fewest contiguous runs of samples that fit the limits.

    A slice ``sl`` holds samples ``sl * n .. sl * n + n - 1`` of every feature of
    the stack (``feat_rows``: rows of ``splits``; feature ``a`` has table rotation
    ``col_shifts[a]`` and shard offset ``row_offsets[a]``). A run of samples fits
    when, for every partition ``p``, its (sample, id) pairs after per-sample dedup
    (a sample's rows of different features are different pairs) are ``<= max_ids``
    and its distinct ids ``<= max_uniq``. Greedy: a sample joins the current run
    if the run still fits with it, otherwise it starts a new run; counts of runs
    are monotone in the run, so greedy gives the fewest contiguous runs.

    Ids are identified by ``col_id = p + P * (id // P + row_offset)`` in an
    open-addressing table (``table``: int32 ``(capacity, 4)``, capacity a power of
    two and at least twice the raw ids of any slice, one 16-byte row per slot)
    cleared per slice; a slot holds the col id (-1:
    empty), the run (its first sample) the id was last seen in, the last row code
    (pair dedup) and the last sample (distinct ids inside one sample).

    Outputs: ``starts[sl * n + r]`` first sample (local) of run ``r`` of slice
    ``sl``; ``nruns[sl]``; ``rec`` rows ``(sl, r, p, pairs, distinct)`` for every
    non-empty (run, partition); ``raw_runs[sl * n + r]`` raw ids of the run.

    Returns
    -------
    nrec : int
        Rows of ``rec`` written, or ``-1`` when one sample alone does not fit;
        then ``rec[0] = (sl, i, p, observed, which)`` (``which`` 0: max_ids,
        1: max_uniq) describes the first such sample.
    """
    cap = table.shape[0]
    mask = cap - 1
    nf = feat_rows.shape[0]
    cur_pairs = np.zeros(P, np.int64)
    cur_dist = np.zeros(P, np.int64)
    smp_pairs = np.zeros(P, np.int64)
    smp_dist = np.zeros(P, np.int64)
    smp_new = np.zeros(P, np.int64)
    nmax = 0
    for a in range(nf):
        f = feat_rows[a]
        for sl in range(nsl):
            for i in range(n):
                b = sl * n + i
                c = splits[f, b + 1] - splits[f, b]
                if c > nmax:
                    nmax = c
    slots = np.empty(max(1, nmax * nf), np.int64)       # distinct slots of one sample
    slot_p = np.empty(max(1, nmax * nf), np.int64)
    nrec = 0
    for sl in range(nsl):
        for t in range(cap):
            table[t, 0] = -1
        for p in range(P):
            cur_pairs[p] = 0
            cur_dist[p] = 0
        run = 0
        run_start = 0
        starts[sl * n] = 0
        raw_run = 0
        for i in range(n):
            b = sl * n + i
            ns = 0
            raw_smp = 0
            for a in range(nf):
                f = feat_rows[a]
                rowcode = i * nf + a
                for j in range(splits[f, b], splits[f, b + 1]):
                    x = ids[j]
                    q = x // P
                    p = x - q * P + col_shifts[a]
                    if p >= P:
                        p -= P
                    col = _column_id(p, q, row_offsets[a], P)
                    h = (col * -7046029254386353131) >> 20   # Fibonacci hashing (2**64 / phi, signed)
                    t = h & mask
                    while table[t, 0] != -1 and table[t, 0] != col:
                        t = (t + 1) & mask
                    raw_smp += 1
                    if table[t, 0] == -1:             # col ids, rows, samples and runs are < 2**31
                        table[t, 0] = col
                        table[t, 1] = -1
                        table[t, 2] = -1
                        table[t, 3] = -1
                    if table[t, 2] == rowcode:       # per-sample duplicate of this row
                        continue
                    table[t, 2] = rowcode
                    smp_pairs[p] += 1
                    if table[t, 3] != i:             # first time in this sample
                        table[t, 3] = i
                        smp_dist[p] += 1
                        slots[ns] = t
                        slot_p[ns] = p
                        ns += 1
                        if table[t, 1] != run_start:
                            smp_new[p] += 1
            # does the sample alone fit?
            for s in range(ns):
                p = slot_p[s]
                if smp_pairs[p] > max_ids or smp_dist[p] > max_uniq:
                    rec[0, 0] = sl
                    rec[0, 1] = i
                    rec[0, 2] = p
                    if smp_pairs[p] > max_ids:
                        rec[0, 3] = smp_pairs[p]
                        rec[0, 4] = 0
                    else:
                        rec[0, 3] = smp_dist[p]
                        rec[0, 4] = 1
                    return -1
            fits = True
            for s in range(ns):
                p = slot_p[s]
                if cur_pairs[p] + smp_pairs[p] > max_ids or cur_dist[p] + smp_new[p] > max_uniq:
                    fits = False
                    break
            if not fits:
                # close the current run
                for p in range(P):
                    if cur_pairs[p] > 0:
                        rec[nrec, 0] = sl
                        rec[nrec, 1] = run
                        rec[nrec, 2] = p
                        rec[nrec, 3] = cur_pairs[p]
                        rec[nrec, 4] = cur_dist[p]
                        nrec += 1
                    cur_pairs[p] = 0
                    cur_dist[p] = 0
                raw_runs[sl * n + run] = raw_run
                raw_run = 0
                run += 1
                run_start = i
                starts[sl * n + run] = i
                for s in range(ns):
                    p = slot_p[s]
                    table[slots[s], 1] = run_start
                    cur_dist[p] += 1
            else:
                for s in range(ns):
                    p = slot_p[s]
                    if table[slots[s], 1] != run_start:
                        table[slots[s], 1] = run_start
                        cur_dist[p] += 1
            raw_run += raw_smp
            for s in range(ns):
                p = slot_p[s]
                cur_pairs[p] += smp_pairs[p]
                smp_pairs[p] = 0
                smp_dist[p] = 0
                smp_new[p] = 0
        for p in range(P):
            if cur_pairs[p] > 0:
                rec[nrec, 0] = sl
                rec[nrec, 1] = run
                rec[nrec, 2] = p
                rec[nrec, 3] = cur_pairs[p]
                rec[nrec, 4] = cur_dist[p]
                nrec += 1
        raw_runs[sl * n + run] = raw_run
        nruns[sl] = run + 1
    return nrec


def sample_split_reference(ids, splits, feat_rows, col_shifts, row_offsets, n, nsl, P, max_ids, max_uniq, table,
                           starts, nruns, rec, raw_runs):
    """Reference of :func:`sample_split` with Python sets (same arguments and results).

    For each slice, grows the current run sample by sample, recomputing the run's
    per-partition pairs and distinct ids from scratch with sets.
    """
    del table

    def sample_items(b, i):
        pairs, raw = set(), 0
        for a in range(len(feat_rows)):
            f = int(feat_rows[a])
            for j in range(int(splits[f, b]), int(splits[f, b + 1])):
                x = int(ids[j])
                p = (x + int(col_shifts[a])) % P
                col = column_id(p, x // P, int(row_offsets[a]), P)
                pairs.add((p, col, a))
                raw += 1
        return pairs, raw

    def counts(items):
        pc = np.zeros(P, np.int64)
        dc = np.zeros(P, np.int64)
        for p, _, _ in items:
            pc[p] += 1
        for p, _ in {(p, col) for p, col, _ in items}:
            dc[p] += 1
        return pc, dc

    nrec = 0
    for sl in range(nsl):
        runs: list[list[int]] = [[]]
        run_items: list = []           # (sample, items)
        for i in range(n):
            items, _ = sample_items(sl * n + i, i)
            tagged = {(p, col, (i, a)) for p, col, a in items}
            pc, dc = counts(tagged)
            if (pc > max_ids).any() or (dc > max_uniq).any():
                bad = np.flatnonzero((pc > max_ids) | (dc > max_uniq))
                # the kernel reports the first partition in the sample's first-seen order
                order = []
                for a in range(len(feat_rows)):
                    f = int(feat_rows[a])
                    b = sl * n + i
                    for j in range(int(splits[f, b]), int(splits[f, b + 1])):
                        p = (int(ids[j]) + int(col_shifts[a])) % P
                        if p in bad and p not in order:
                            order.append(p)
                p = order[0]
                which = 0 if pc[p] > max_ids else 1
                rec[0] = (sl, i, p, pc[p] if which == 0 else dc[p], which)
                return -1
            trial = run_items + [tagged]
            pc, dc = counts(set().union(*trial))
            if runs[-1] and ((pc > max_ids).any() or (dc > max_uniq).any()):
                runs.append([i])
                run_items = [tagged]
            else:
                runs[-1].append(i)
                run_items = trial
        nruns[sl] = len(runs)
        for r, samples in enumerate(runs):
            starts[sl * n + r] = samples[0]
            allitems = set()
            raw = 0
            for i in samples:
                items, rw = sample_items(sl * n + i, i)
                allitems |= {(p, col, (i, a)) for p, col, a in items}
                raw += rw
            raw_runs[sl * n + r] = raw
            pc, dc = counts(allitems)
            for p in range(P):
                if pc[p] > 0:
                    rec[nrec] = (sl, r, p, pc[p], dc[p])
                    nrec += 1
    return nrec


# --------------------------------------------------------------------------------------
# naive_by_run: whole-batch distinct ids per (run, partition), from sorted keys
# --------------------------------------------------------------------------------------
@jit(error_model="numpy")
def naive_by_run(keys, m, P, qbits, lbits, n, run_of_sample, stamp, naive_uniq):
    """``naive_uniq[r * P + p]`` += distinct ids of partition ``p`` among the samples of run ``r``.

    ``keys`` sorted as by :func:`scwork.sharding._kernels.sort_group`; the sample of a
    key is ``sl * n + (row % n)`` (``R' = sl << lbits | row``, ``row = k * n + i``);
    ``run_of_sample[b]`` its run; ``stamp`` int64 scratch of at least ``runs``
    entries, filled with -1 by the caller.
    """
    lmask = (np.int64(1) << lbits) - 1
    prev_u = np.int64(-1)
    ui = np.int64(-1)
    for i in range(m):
        v = keys[i]
        u = (v >> 32) & _LOW32
        R = v & _LOW32
        if u != prev_u:
            ui += 1
            prev_u = u
        r = run_of_sample[(R >> lbits) * n + (R & lmask) % n]
        if stamp[r] != ui:
            stamp[r] = ui
            naive_uniq[r * P + (u >> qbits)] += 1


def naive_by_run_reference(keys, m, P, qbits, lbits, n, run_of_sample, stamp, naive_uniq):
    """Reference of :func:`naive_by_run` with a set of (run, id)."""
    del stamp
    k = np.asarray(keys[:m], np.int64)
    u = (k >> 32) & _LOW32
    R = k & _LOW32
    runs = np.asarray(run_of_sample)[(R >> lbits) * n + (R & ((1 << lbits) - 1)) % n]
    for r, uu in {(int(a), int(b)) for a, b in zip(runs, u)}:
        naive_uniq[r * P + (uu >> qbits)] += 1


def warmup() -> None:
    """Compile every kernel on tiny inputs (or load them from numba's cache)."""
    out = np.empty(2, np.uint64)
    highway_hash_int32(np.array([1, 2], np.int64), HIGHWAY_KEY, out)
    keys = np.array([(1 << 32) | 0, (1 << 32) | 1, (2 << 32) | 1], np.int64)
    z = np.zeros(2 * 2 * 4, np.int64)
    for mode in (HASH_HIGHWAY, HASH_IDENTITY):
        scan_group_buckets(keys, 3, 2, 0, 2, 1, 0, 0, 4, mode, HIGHWAY_KEY, 1, 1, z.copy(), z.copy(), z.copy(),
                           np.zeros(8, np.int64), np.zeros(8, np.int64), np.zeros(4, np.int64))
        ids_to_buckets(np.array([0, 5], np.int64), 2, 1, 0, 4, mode, HIGHWAY_KEY, np.empty(2, np.int64))
    ids = np.array([0, 1, 1, 2], np.int64)
    splits = np.array([[0, 2, 4]], np.int64)
    sample_split(ids, splits, np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), 2, 1, 2, 2, 2,
                 np.empty((8, 4), np.int32), np.zeros(2, np.int64), np.zeros(1, np.int64),
                 np.zeros((8, 5), np.int64), np.zeros(2, np.int64))
    naive_by_run(keys, 3, 2, 1, 0, 1, np.zeros(2, np.int64), np.full(1, -1, np.int64), np.zeros(2, np.int64))
    # the scan cut by slices and ranges: 2 partitions, qbits 1, 2 bins, one slice of 2 samples
    # (rows 0 and 1 of R' = slice << lbits | row need lbits 1)
    hist = np.empty(3 * 2048, np.int64)
    binned = np.empty(4, np.int64)
    pre = np.empty((1, 3), np.int64)
    one = np.ones(1, np.int64)
    for sort_all in (False, True):
        bin_slices(ids, splits, np.zeros(1, np.int8), np.zeros(1, np.int64), np.zeros(1, np.int64), 2, 0, 1, 4, 2, 0,
                   1, 1, 1, 2, sort_all, np.empty(4, np.int64), binned, 0, pre[0], hist)
        loc = np.zeros(range_counter_size(1, 2, 4), np.int64)
        scan_range(binned, pre, 0, 2, 1, 2, 0, 2, 1, 1, 0, 4, HASH_HIGHWAY, HIGHWAY_KEY, 2, 2,
                   *range_counter_views(loc, 1, 2, 4), np.empty(4, np.int64), np.empty(4, np.int64), hist, sort_all)
    add_range_counts(loc, 1, 0, 2, 2, 4, *range_counter_views(np.zeros_like(loc), 1, 2, 4))
    minibatch_sums(one.reshape(1, 1), np.zeros(1, np.int64), np.zeros((1, 1), np.int64))
    minibatch_sums(one.reshape(1, 1), np.zeros(1, np.int64), np.zeros((2, 2, 1), np.int64)[:, 0])   # a strided view
