"""The naive whole-batch view's kernel against values written out by hand or counted with Python sets.

Kernel and reference are compared on random inputs in tests/sharding/test_kernels.py;
here each case's answer is counted by hand (or by Python sets, sharing no code with
either), so a bug made in both at once still fails. Each segment is one slice's sorted
distinct ids; the kernel ORs them over a partition range into a bitmap (whole words
per partition when ``qbits >= 6``, bit by bit below) or, for sparse ranges, sorts them.
With 3 and more segments each owns ids no other has, so skipping any one changes the count.
"""

from __future__ import annotations

import numpy as np
import pytest

from scwork.sharding import _naive_kernels as K

FNS = [K.naive_from_slice_lists, K.naive_from_slice_lists_reference]
IDS = ["kernel", "reference"]


def _lists(segments):
    """(ulist, seg_start, seg_len) of sorted segments laid end to end."""
    segs = [sorted(set(s)) for s in segments]
    ulist = np.array([u for s in segs for u in s], np.int64)
    seg_len = np.array([len(s) for s in segs], np.int64)
    seg_start = np.concatenate([[0], np.cumsum(seg_len)[:-1]]).astype(np.int64) if segs else np.zeros(0, np.int64)
    return ulist, seg_start, seg_len


def _by_sets(segments, qbits, p0, p1, P):
    union = set().union(*map(set, segments)) if segments else set()
    return [sum(1 for u in union if u >> qbits == p) if p0 <= p < p1 else 0 for p in range(P)]


@pytest.mark.parametrize("fn", FNS, ids=IDS)
def test_whole_words_three_segments_each_own_ids(fn):
    # qbits = 7: each partition spans two whole 64-bit words. Segment 0: 0, 5; segment 1:
    # 5 again and 70; segment 2: 130, 255. Partition 0: {0, 5, 70} = 3; partition 1: {130, 255} = 2.
    naive = np.zeros(2, np.int64)
    fn(*_lists([[0, 5], [5, 70], [130, 255]]), 7, 0, 2, naive)
    assert naive.tolist() == [3, 2]


@pytest.mark.parametrize("fn", FNS, ids=IDS)
@pytest.mark.parametrize("segments", [3, 4, 5])
def test_the_last_segment_counts(fn, segments):
    # only the last segment has ids: a loop that stops one segment early sees none
    lists = [[] for _ in range(segments - 1)] + [[64, 65, 200, 511]]
    naive = np.zeros(2, np.int64)
    fn(*_lists(lists), 8, 0, 2, naive)                 # qbits 8: 4 words per partition
    assert naive.tolist() == [3, 1]                   # {64, 65, 200} < 256 <= {511}


@pytest.mark.parametrize("fn", FNS, ids=IDS)
@pytest.mark.parametrize("qbits", [0, 3, 5, 6, 7, 9])     # 5 and 6: either side of whole words
@pytest.mark.parametrize("segments", [1, 2, 3, 4])
@pytest.mark.parametrize("p_range", [(0, 3), (1, 3), (1, 2)])
def test_match_sets_over_a_partition_range(fn, qbits, segments, p_range):
    P = 3
    p0, p1 = p_range
    rng = np.random.default_rng(qbits * 100 + segments * 10 + p0)
    span = P << qbits
    lists = [sorted({int(v) for v in rng.integers(0, span, 1 + span // 4)}) for _ in range(segments)]
    naive = np.full(P, 10, np.int64)                  # the kernel adds to what is there
    fn(*_lists(lists), qbits, p0, p1, naive)
    assert (naive - 10).tolist() == _by_sets(lists, qbits, p0, p1, P)


@pytest.mark.parametrize("fn", FNS, ids=IDS)
def test_sparse_range_sorted_path_counts_id_zero_once(fn):
    # qbits 20, 4 partitions: a bitmap of 2**22 bits would be 65536 words for 5 ids, so the
    # kernel sorts. Id 0 (first after sorting, in two segments) counts once.
    lists = [[0, 5, (1 << 20) + 5], [0], [3 << 20, (3 << 20) + 1]]
    naive = np.zeros(4, np.int64)
    fn(*_lists(lists), 20, 0, 4, naive)
    assert naive.tolist() == [2, 1, 0, 2]


@pytest.mark.parametrize("fn", FNS, ids=IDS)
@pytest.mark.parametrize("P", [1, 65])
def test_one_bit_per_partition(fn, P):
    # qbits = 0: partition p is id p alone; P = 65 leaves a last word with one bit
    lists = [[P - 1]] if P == 1 else [[0, 63], [64], [63, 64]]
    naive = np.zeros(P, np.int64)
    fn(*_lists(lists), 0, 0, P, naive)
    expected = np.zeros(P, np.int64)
    expected[sorted(set().union(*map(set, lists)))] = 1
    assert naive.tolist() == expected.tolist()


@pytest.mark.parametrize("fn", FNS, ids=IDS)
def test_no_segments_count_nothing(fn):
    naive = np.full(2, 5, np.int64)
    fn(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), 2, 0, 2, naive)
    assert naive.tolist() == [5, 5]


def test_warmup_runs():
    # scwork.warmup() compiles through this (pure Python under NUMBA_DISABLE_JIT): it must run
    K.warmup()
    if hasattr(K.naive_from_slice_lists, "signatures"):
        assert K.naive_from_slice_lists.signatures


def test_a_huge_sparse_range_is_counted_without_a_bitmap_over_it():
    # qbits = 40: two partitions span 2**41 ids, a bitmap of 2**35 words (256 GiB). Three ids found:
    # the kernel must gather and sort them (memory linear in the ids), not allocate the range.
    ulist, seg_start, seg_len = _lists([[3, 2**40 + 7], [2**40 + 7, 2**41 - 1]])
    naive = np.zeros(2, np.int64)
    K.naive_from_slice_lists(ulist, seg_start, seg_len, 40, 0, 2, naive)
    assert naive.tolist() == [1, 2]


@pytest.mark.parametrize("fn", FNS, ids=IDS)
def test_sorted_path_counts_id_one_when_it_comes_first(fn):
    # the sort path (qbits 20: a 2**20-bit range for 3 ids) with 1 as the smallest id: the
    # "previous id" before the first one must equal no id, 1 included
    naive = np.zeros(1, np.int64)
    fn(*_lists([[1, 9], [1, 700000]]), 20, 0, 1, naive)
    assert naive.tolist() == [3]


def test_warmup_calls_the_kernel_on_both_branches(monkeypatch):
    # warmup() exists to compile the kernel (numba compiles on the first call), so it must call
    # it: once with partitions sharing words (qbits < 6), once with whole words (qbits >= 6)
    seen = []
    monkeypatch.setattr(K, "naive_from_slice_lists", lambda *args: seen.append(args[3]))
    K.warmup()
    assert min(seen) < 6 <= max(seen)


@pytest.mark.parametrize("fn", FNS, ids=IDS)
def test_ids_two_partitions_past_the_range_are_left_out(fn):
    # qbits 2, range [0, 2) of 4 partitions: ids 1 and 5 count (partitions 0, 1); 9 and 13
    # (partitions 2 and 3, past the range's end) are another task's, their entries stay 0
    naive = np.zeros(4, np.int64)
    fn(*_lists([[1, 9], [5, 13]]), 2, 0, 2, naive)
    assert naive.tolist() == [1, 1, 0, 0]


@pytest.mark.parametrize("fn", [K.naive_of_group, K.naive_of_group_reference], ids=IDS)
def test_one_group_of_a_stack_counts_its_own_lists(fn):
    """naive_of_group: group g's segments cut out of the stack's arrays, counted into naive[g] alone.

    Group 0 (qbits 2) has slices [1, 5], [5, 9]; group 1 (qbits 3) has [3], [8, 20]; by sets.
    """
    ulist = np.array([1, 5, 5, 9, 3, 8, 20], np.int64)
    starts = np.array([[0, 2], [4, 5]], np.int64)            # each group's slices' first places
    ul_cnt = np.array([2, 2, 1, 2], np.int64)
    qbits = np.array([2, 3], np.int64)
    naive = np.zeros((2, 3), np.int64)
    fn(ulist, starts, ul_cnt, qbits, 1, 0, 3, naive)
    assert naive[0].tolist() == [0, 0, 0]
    assert naive[1].tolist() == _by_sets([[3], [8, 20]], 3, 0, 3, 3) == [1, 1, 1]     # {3}, {8}, {20}
    fn(ulist, starts, ul_cnt, qbits, 0, 1, 3, naive)        # partitions 1-2 of group 0
    assert naive[0].tolist() == [0] + _by_sets([[1, 5], [5, 9]], 2, 1, 3, 3)[1:] == [0, 1, 1]
