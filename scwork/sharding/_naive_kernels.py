"""Numba kernels of the naive whole-batch view: distinct ids per partition, without the split.

Without the device / SparseCore split: what a GPU all-to-all sees per destination.

Two ways, by vocabulary size: OR-ing the per-thread bitmaps of seen ids and counting bits
(:func:`naive_from_bitmaps`), or sorting the per-slice lists of distinct ids
(:func:`naive_from_lists`) when a bitmap over the vocabulary would be too large. Each has a
slow numpy reference beside it (``*_reference``) with the same signature.
"""

from __future__ import annotations

import numpy as np

from scwork._jit import jit

__all__ = [
    "naive_from_bitmaps",
    "naive_from_bitmaps_reference",
    "naive_from_lists",
    "naive_from_lists_reference",
    "warmup",
]


@jit(error_model="numpy")
def _popcount64(v):
    """Set bits of the 64-bit word ``v`` (SWAR in uint64, which LLVM turns into ``popcnt``)."""
    x = np.uint64(v)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    x = x + (x >> np.uint64(8))                   # byte sums (no multiply: no overflow warning
    x = x + (x >> np.uint64(16))                  # when numba is disabled)
    x = x + (x >> np.uint64(32))
    return np.int64(x & np.uint64(0x7F))


@jit(error_model="numpy")
def naive_from_bitmaps(bitmaps, off, qbits, P, naive):
    """``naive[p]`` += set bits of ``[p << qbits, (p + 1) << qbits)`` in the OR of the rows.

    ``bitmaps`` is ``(T, W)`` int64 (one row per worker thread); the group's bit
    ``u`` is bit ``u & 63`` of word ``off + (u >> 6)``.
    """
    T = bitmaps.shape[0]
    if qbits >= 6:                                # whole words per partition
        per = np.int64(1) << (qbits - 6)
        for p in range(P):
            cnt = 0
            w0 = off + p * per
            for w in range(w0, w0 + per):
                x = bitmaps[0, w]
                for t in range(1, T):
                    x |= bitmaps[t, w]
                cnt += _popcount64(x)
            naive[p] += cnt
    else:                                         # partitions share words: bit by bit
        for bit in range(np.int64(P) << qbits):
            w = off + (bit >> 6)
            x = bitmaps[0, w]
            for t in range(1, T):
                x |= bitmaps[t, w]
            naive[bit >> qbits] += (x >> (bit & 63)) & 1


@jit(error_model="numpy")
def naive_from_lists(ulist, seg_start, seg_len, qbits, naive):
    """``naive[p]`` += distinct ``u`` with ``u >> qbits == p`` in the segments of ``ulist``.

    The fallback of the naive view when a bitmap over the vocabulary would be too
    large: segment ``s`` is ``ulist[seg_start[s]:seg_start[s] + seg_len[s]]``.
    """
    tot = 0
    for s in range(seg_len.shape[0]):
        tot += seg_len[s]
    buf = np.empty(tot, np.int64)
    k = 0
    for s in range(seg_len.shape[0]):
        for t in range(seg_len[s]):
            buf[k] = ulist[seg_start[s] + t]
            k += 1
    buf.sort()
    prev = np.int64(-1)
    for i in range(tot):
        u = buf[i]
        if u != prev:
            naive[u >> qbits] += 1
            prev = u


def naive_from_bitmaps_reference(bitmaps, off, qbits, P, naive):
    """Numpy reference of :func:`naive_from_bitmaps` (unpacks the bits)."""
    words = np.bitwise_or.reduce(bitmaps, axis=0)[off:off + (((P << qbits) + 63) >> 6)]
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:P << qbits]
    naive += bits.reshape(P, 1 << qbits).sum(axis=1).astype(np.int64)


def naive_from_lists_reference(ulist, seg_start, seg_len, qbits, naive):
    """Numpy reference of :func:`naive_from_lists`."""
    parts = [ulist[s:s + n] for s, n in zip(seg_start, seg_len)]
    u = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
    np.add.at(naive, u >> qbits, 1)


def warmup() -> None:
    """Compile both kernels on tiny inputs (or load them from numba's cache)."""
    naive = np.zeros(2, np.int64)
    for qbits in (1, 6):                          # partitions sharing words, and whole words
        bitmaps = np.zeros((2, 4), np.int64)     # 2 threads; 2 << qbits bits fit in 4 words
        bitmaps[0, 0], bitmaps[1, 0] = 0b0101, 0b0110
        naive_from_bitmaps(bitmaps, 0, qbits, 2, naive)
    naive_from_lists(np.array([3, 1, 3, 0], np.int64), np.array([0, 2], np.int64), np.array([2, 2], np.int64),
                     1, naive)
