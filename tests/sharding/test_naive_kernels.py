"""The naive whole-batch view's kernels against values written out by hand.

Kernel and reference are compared on random inputs in tests/sharding/test_kernels.py;
here each case's answer is counted by hand (or by Python sets, sharing no code with
either), so a bug made in both at once still fails. The whole-word branch
(``qbits >= 6``) ORs the bitmaps of every worker thread: with 3 and more threads each
thread owns bits no other thread has, so dropping any thread's row changes the count.
"""

from __future__ import annotations

import numpy as np
import pytest

from scwork.sharding import _naive_kernels as K


def _bitmaps(threads_bits: list[list[int]], words: int) -> np.ndarray:
    """One int64 row per thread with the given bit numbers set (bit u: word u >> 6, bit u & 63)."""
    out = np.zeros((len(threads_bits), words), np.uint64)
    for t, bits in enumerate(threads_bits):
        for u in bits:
            out[t, u >> 6] |= np.uint64(1) << np.uint64(u & 63)
    return out.view(np.int64)


def _by_sets(threads_bits, off_words, qbits, P):
    """A third way: the union of the threads' bit sets, counted per partition."""
    union = set().union(*map(set, threads_bits))
    base = off_words * 64
    return [sum(1 for u in union if base + (p << qbits) <= u < base + ((p + 1) << qbits)) for p in range(P)]


@pytest.mark.parametrize("fn", [K.naive_from_bitmaps, K.naive_from_bitmaps_reference], ids=["kernel", "reference"])
def test_whole_words_three_threads_each_own_bits(fn):
    # qbits = 7: each partition spans two whole 64-bit words. P = 2, so 4 words.
    # thread 0: bits 0, 5 (partition 0, word 0); thread 1: bit 70 (partition 0, word 1)
    # and bit 5 again (shared); thread 2: bits 130, 255 (partition 1, words 2 and 3).
    threads = [[0, 5], [5, 70], [130, 255]]
    naive = np.zeros(2, np.int64)
    fn(_bitmaps(threads, 4), 0, 7, 2, naive)
    # partition 0: {0, 5, 70} = 3; partition 1: {130, 255} = 2
    assert naive.tolist() == [3, 2]


@pytest.mark.parametrize("fn", [K.naive_from_bitmaps, K.naive_from_bitmaps_reference], ids=["kernel", "reference"])
@pytest.mark.parametrize("threads", [3, 4, 5])
def test_whole_words_any_thread_count_counts_the_last_thread(fn, threads):
    # Only the last thread has bits: a loop that stops one thread early sees none.
    rows = [[] for _ in range(threads - 1)] + [[64, 65, 200, 511]]
    naive = np.zeros(2, np.int64)
    fn(_bitmaps(rows, 8), 0, 8, 2, naive)            # qbits 8: 4 words per partition
    assert naive.tolist() == [3, 1]                   # {64, 65, 200} < 256 <= {511}


@pytest.mark.parametrize("fn", [K.naive_from_bitmaps, K.naive_from_bitmaps_reference], ids=["kernel", "reference"])
@pytest.mark.parametrize("qbits", [0, 3, 5, 6, 7, 9])     # 5 and 6: either side of whole words
@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_bitmaps_match_sets_with_offset(fn, qbits, threads):
    P = 3
    off = 2                                           # the group's bitmap starts at word 2
    rng = np.random.default_rng(qbits * 10 + threads)
    span = P << qbits
    rows = [sorted({int(v) for v in rng.integers(0, span, 1 + span // 4)}) for _ in range(threads)]
    words = off + -(-span // 64) + 1
    shifted = [[off * 64 + u for u in bits] for bits in rows]
    # stray bits before the group's first word, right after its last bit and in the
    # word after it belong to other groups: never counted
    shifted[0] = [3] + shifted[0] + [off * 64 + span, (words - 1) * 64 + 63]
    naive = np.full(P, 10, np.int64)                  # the kernel adds to what is there
    fn(_bitmaps(shifted, words), off, qbits, P, naive)
    assert (naive - 10).tolist() == _by_sets(shifted, off, qbits, P)


@pytest.mark.parametrize("fn", [K.naive_from_bitmaps, K.naive_from_bitmaps_reference], ids=["kernel", "reference"])
@pytest.mark.parametrize("P", [1, 65])
def test_one_bit_per_partition_and_a_last_word_of_one_bit(fn, P):
    # qbits = 0: partition p is bit p alone. P = 1 and P = 65 leave a last word with one
    # bit of the group: the words of the group are ceil(P / 64), not one fewer.
    bits = [P - 1] if P == 1 else [0, 63, 64]
    naive = np.zeros(P, np.int64)
    fn(_bitmaps([bits, [P - 1]], 3), 0, 0, P, naive)
    expected = np.zeros(P, np.int64)
    expected[sorted({*bits, P - 1})] = 1
    assert naive.tolist() == expected.tolist()


@pytest.mark.parametrize("fn", [K.naive_from_lists, K.naive_from_lists_reference], ids=["kernel", "reference"])
def test_lists_count_distinct_over_segments(fn):
    # segments [3, 1, 3] and [9, 1] (the 4 between them is not in any segment)
    ulist = np.array([3, 1, 3, 4, 9, 1], np.int64)
    naive = np.zeros(3, np.int64)
    fn(ulist, np.array([0, 4], np.int64), np.array([3, 2], np.int64), 2, naive)
    # distinct {1, 3, 9}: partition of u is u >> 2 -> 1, 3 in 0; 9 in 2
    assert naive.tolist() == [2, 0, 1]


@pytest.mark.parametrize("fn", [K.naive_from_lists, K.naive_from_lists_reference], ids=["kernel", "reference"])
def test_lists_count_id_zero(fn):
    # id 0 first in the sorted ids (and twice): counted once; segments [0, 5, 0] and [0]
    naive = np.zeros(2, np.int64)
    fn(np.array([0, 5, 0, 0], np.int64), np.array([0, 3], np.int64), np.array([3, 1], np.int64), 2, naive)
    assert naive.tolist() == [1, 1]                   # 0 >> 2 = 0, 5 >> 2 = 1


@pytest.mark.parametrize("fn", [K.naive_from_lists, K.naive_from_lists_reference], ids=["kernel", "reference"])
def test_lists_without_segments_count_nothing(fn):
    naive = np.full(2, 5, np.int64)
    fn(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), 2, naive)
    assert naive.tolist() == [5, 5]


def test_warmup_runs_both_kernels():
    # scwork.warmup() compiles through this (pure Python under NUMBA_DISABLE_JIT): it must run
    K.warmup()
    if hasattr(K.naive_from_bitmaps, "signatures"):      # compiled: one signature each at least
        assert K.naive_from_bitmaps.signatures and K.naive_from_lists.signatures
