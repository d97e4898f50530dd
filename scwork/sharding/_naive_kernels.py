"""Numba kernels of the naive whole-batch view: distinct ids per partition, without the split.

Without the device / SparseCore split: what a GPU all-to-all sees per destination.

Every (group, slice) run of the engine leaves its sorted distinct ids in a list;
:func:`naive_from_slice_lists` counts the union of those lists over a range of
partitions, in a bitmap over the range (or by sorting, when the range is sparse:
large vocabularies), so tasks over disjoint partition ranges run in parallel and
memory stays linear in the ids, never in the vocabulary or the thread count. The
slow numpy reference beside it (``*_reference``) has the same signature.
:func:`naive_of_group` is the engine's call: one group of a stack, its segments cut out
of the stack's arrays inside the kernel; :func:`naive_group_tasks` runs a batch of them,
each worker's call taking its next task from a shared atomic counter.
"""

from __future__ import annotations

import numpy as np

from scwork._jit import jit
from scwork.sharding._task_queue import next_task

__all__ = [
    "naive_from_slice_lists",
    "naive_from_slice_lists_reference",
    "naive_group_tasks",
    "naive_group_tasks_reference",
    "naive_of_group",
    "naive_of_group_reference",
    "warmup",
]

# Index type of hot loops: no negative-index wraparound code (as in _kernels)
_U = np.uint64


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
def _lower_bound(a, lo, hi, value):
    """First index in ``a[lo:hi]`` (sorted) whose value is ``>= value`` (``hi`` if none)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@jit(error_model="numpy")
def naive_from_slice_lists(ulist, seg_start, seg_len, qbits, p0, p1, naive):
    """``naive[p]`` += distinct ``u`` with ``u >> qbits == p``, ``p0 <= p < p1``, over every segment.

    Segment ``s`` is ``ulist[seg_start[s]:seg_start[s] + seg_len[s]]``, sorted
    increasing (one slice's distinct ids of the group). The ids of the range are
    set in a bitmap over the range when it costs at most 8 bytes per id found
    (64 KiB at least), else gathered and sorted.
    """
    lo_u = np.int64(p0) << qbits
    hi_u = np.int64(p1) << qbits
    nseg = seg_len.shape[0]
    los = np.empty(nseg, np.int64)
    his = np.empty(nseg, np.int64)
    tot = 0
    for s in range(nseg):
        a = seg_start[s]
        b = a + seg_len[s]
        los[s] = _lower_bound(ulist, a, b, lo_u)
        his[s] = _lower_bound(ulist, los[s], b, hi_u)
        tot += his[s] - los[s]
    span = hi_u - lo_u
    words = (span + 63) >> 6
    if words <= max(np.int64(8192), tot):
        bm = np.zeros(words, np.int64)
        for s in range(nseg):
            for i in range(los[s], his[s]):
                v = ulist[_U(i)] - lo_u
                bm[_U(v >> 6)] |= np.int64(1) << (v & 63)
        if qbits >= 6:                            # whole words per partition
            per = np.int64(1) << (qbits - 6)
            for p in range(p0, p1):
                cnt = 0
                w0 = (p - p0) * per
                for w in range(w0, w0 + per):
                    cnt += _popcount64(bm[w])
                naive[p] += cnt
        else:                                     # partitions share words: bit by bit
            for v in range(span):
                naive[p0 + (v >> qbits)] += (bm[v >> 6] >> (v & 63)) & 1
        return
    buf = np.empty(tot, np.int64)
    k = 0
    for s in range(nseg):
        for i in range(los[s], his[s]):
            buf[k] = ulist[i]
            k += 1
    buf.sort()
    prev = np.int64(-1)
    for i in range(tot):
        u = buf[i]
        if u != prev:
            naive[u >> qbits] += 1
            prev = u


def naive_from_slice_lists_reference(ulist, seg_start, seg_len, qbits, p0, p1, naive):
    """Numpy reference of :func:`naive_from_slice_lists` (``np.unique`` of the segments)."""
    parts = [ulist[s:s + n] for s, n in zip(seg_start, seg_len)]
    u = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
    u = u[((u >> qbits) >= p0) & ((u >> qbits) < p1)]
    np.add.at(naive, u >> qbits, 1)


@jit(error_model="numpy")
def naive_of_group(ulist, starts, ul_cnt, g_qbits, g, p0, p1, naive):
    """:func:`naive_from_slice_lists` of group ``g`` of a stack over partitions ``[p0, p1)``.

    The group's segments start at ``starts[g]`` (one per slice, ``nsl = starts.shape[1]``)
    and hold ``ul_cnt[g * nsl:(g + 1) * nsl]`` ids; its partitions are ``u >> g_qbits[g]``;
    counted into ``naive[g]``. The views are made here, not by the caller: a task's
    Python runs after other kernels have evicted the caches, holding the GIL, and each
    view it made cost microseconds there.
    """
    nsl = starts.shape[1]
    naive_from_slice_lists(ulist, starts[g], ul_cnt[g * nsl:(g + 1) * nsl], g_qbits[g], p0, p1, naive[g])


def naive_of_group_reference(ulist, starts, ul_cnt, g_qbits, g, p0, p1, naive):
    """Numpy reference of :func:`naive_of_group`."""
    nsl = starts.shape[1]
    naive_from_slice_lists_reference(ulist, starts[g], ul_cnt[g * nsl:(g + 1) * nsl], int(g_qbits[g]), p0, p1,
                                     naive[g])


@jit
def naive_group_tasks(ulist, starts, ul_cnt, g_qbits, tasks, order, first, last, counters, slot, naive):
    """:func:`naive_of_group` over a batch of tasks of one stack, each worker thread taking the next one itself.

    ``tasks``: the batch's rows ``(g, p0, p1)``; this stack's are ``order[first:last]``,
    in the order they are handed out (largest first), and its shared counter is
    ``counters[slot]`` (:func:`~scwork.sharding._task_queue.take_next`, zero before the
    batch). Every worker calls this with the same arguments and runs the tasks
    ``order[first + k]`` for the values ``k`` it takes until they pass the stack's end:
    one call per worker serves the stack, with no turn of the GIL between two tasks.
    Returns the number of tasks this call ran.
    """
    done = 0
    for _ in range(last - first):            # each turn takes a task, or ends the loop
        i = next_task(order, first, last, counters, slot)
        if i < 0:
            break
        naive_of_group(ulist, starts, ul_cnt, g_qbits, tasks[i, 0], tasks[i, 1], tasks[i, 2], naive)
        done += 1
    return done


def naive_group_tasks_reference(ulist, starts, ul_cnt, g_qbits, tasks, order, first, last, counters, slot, naive):
    """Numpy reference of :func:`naive_group_tasks` (each task through :func:`naive_of_group_reference`)."""
    done = 0
    while (i := int(next_task(order, first, last, counters, slot))) >= 0:
        g, p0, p1 = (int(x) for x in tasks[i])
        naive_of_group_reference(ulist, starts, ul_cnt, g_qbits, g, p0, p1, naive)
        done += 1
    return done


def warmup() -> None:
    """Compile the kernels on tiny inputs (or load them from numba's cache)."""
    naive = np.zeros(2, np.int64)
    for qbits in (1, 6):                          # partitions sharing words, and whole words
        naive_from_slice_lists(np.array([0, 1, 3, 1, 2], np.int64), np.array([0, 3], np.int64),
                               np.array([3, 2], np.int64), qbits, 0, 2, naive)
    naive_of_group(np.array([0, 1, 3, 1, 2], np.int64), np.array([[0, 3]], np.int64), np.array([3, 2], np.int64),
                   np.ones(1, np.int64), 0, 0, 2, np.zeros((1, 2), np.int64))
    naive_group_tasks(np.array([0, 1, 3, 1, 2], np.int64), np.array([[0, 3]], np.int64), np.array([3, 2], np.int64),
                      np.ones(1, np.int64), np.array([[0, 0, 1], [0, 1, 2]], np.int64), np.array([1, 0], np.int64),
                      0, 2, np.zeros(1, np.int64), 0, np.zeros((1, 2), np.int64))
