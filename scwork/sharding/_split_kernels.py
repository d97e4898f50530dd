"""Numba kernels that cut the sharding engine's work finer than one (device, SC) slice.

A slice of a large stack (many tables stacked) can hold more ids than one thread's
share of a call, and the steps after the slices (the naive whole-batch view, the
CSR layout) used to run once per stack. These kernels split that work into small
independent tasks whose results combine exactly:

count_groups
    Statistics of a rectangle of (slice, group) runs: the same sorted runs as
    :func:`~scwork.sharding._kernels.stack_slices`, counted into per-group
    counters, so two tasks of one slice (different tables) never write the same
    entry; the engine adds the groups' counters. Exact because per-sample dedup
    and distinct ids never cross tables (a new table's ids are new ids of the
    stream).
count_group_tasks, slice_pairs_tasks, write_group_tasks
    :func:`count_groups`, :func:`slice_pairs` and :func:`write_groups` over a
    stack's tasks of a batch, each worker's call taking its next task from the
    stack's shared atomic counter: one call per worker and stack, no GIL between
    tasks.
slice_pairs
    Ids after per-sample dedup per (slice, partition) of a range of slices,
    without sorting (a row holds few ids: each is looked up in a small table of
    the row's ids). It gives every slice's CSR size before any slice is written, so the
    CSR buffer size ``C`` is known and slices are written in place at once,
    instead of being written at a bounding stride and moved left one after the
    other, and every group's place in each stream.
write_groups
    CSR entries of a rectangle of (slice, group) runs of a stack without limits,
    at the places :func:`slice_pairs` fixed: tasks of one slice write disjoint
    entries.
counted_layouts
    From those counts, every counted stack's CSR size ``C`` and layout (each
    group's first slot per stream, row pointers, padding ranges) in one call for
    all stacks of an engine call, between the count and the slices.

The naive view is cut by partition ranges
(:func:`scwork.sharding._naive_kernels.naive_from_slice_lists`).

Each kernel has a slow numpy reference beside it (``*_reference``, same
signature), compared in ``tests/sharding/test_split_kernels.py``.
"""

from __future__ import annotations

import numpy as np

from scwork._jit import jit
from scwork._jit import round_up as _round_up
from scwork._rounding import round_up
from scwork.sharding._kernels import (_LOW32, _U, PAD_ID, count_slice, count_slice_reference, entry_gain,
                                      sort_slice, sort_slice_reference, write_csr_entry)
from scwork.sharding._task_queue import next_task

__all__ = [
    "COUNTED_LAYOUT_COLUMNS",
    "count_groups",
    "count_group_tasks",
    "count_group_tasks_reference",
    "order_by_job",
    "order_by_job_reference",
    "slice_pairs_tasks",
    "slice_pairs_tasks_reference",
    "slice_task_rows",
    "slice_task_rows_reference",
    "write_group_tasks",
    "write_group_tasks_reference",
    "counted_layouts",
    "counted_layouts_reference",
    "count_groups_reference",
    "cut_groups",
    "cut_groups_reference",
    "cut_slices",
    "cut_slices_reference",
    "slice_pairs",
    "slice_pairs_reference",
    "write_groups",
    "write_groups_reference",
    "warmup",
]

# Short rows are deduplicated through a table of ``2**_SLOT_BITS`` slots (see
# :func:`slice_pairs`), each holding the last row that took it (an int32 stamp) and the
# id it holds (int64). 1024 slots (12 KiB) stay in the L1 cache; on the standard input
# (rows of about 20 ids) 2048 and 512 slots were measured 10% and 7% slower, and int64
# stamps (16 KiB) 10% slower.
_SLOT_BITS = 10
_SLOT_MASK = (1 << _SLOT_BITS) - 1
# Stamps are int32: when a call reaches this many rows the table is cleared and the
# stamps start again from 0, so a stale stamp never equals a later row's.
_STAMP_END = 2**31 - 1
# Rows up to this length use the table, which then is at most half full, so the probe
# from an id's slot to a free one stays short. Longer rows are deduplicated by sorting
# a copy: sorting random ids mispredicts about every other comparison, and was measured
# at 50-60 ns per id on rows of 64 to 512 ids where the table takes 7-14 ns.
_SHORT_ROW = 1 << (_SLOT_BITS - 1)
# An odd multiplier below 2**31 (MurmurHash2's): the low 32 bits of the id (its high 32 bits
# folded in) times it stay below 2**63, so the hash does not overflow int64, in numba or
# in plain Python (NUMBA_DISABLE_JIT=1, where numpy would warn on an overflow).
_SLOT_MULTIPLIER = 0x5BD1E995


# --------------------------------------------------------------------------------------
# count_groups
# --------------------------------------------------------------------------------------
@jit(error_model="numpy")
def count_groups(ids, splits, weights, has_w, n, P, lbits, gptr, feat_rows, feat_k, g_vocab, g_shift, g_qbits,
                 g_uloff, g_sloff, s0, s1, g0, g1, sk, a_keys, b_keys, hist, pairs_g, distinct_g, ulist, ul_cnt,
                 g_oov):
    """Statistics of slices ``[s0, s1)`` x groups ``[g0, g1)`` of one stack (no CSR, no prefix cut).

    Per (slice ``sl``, group ``g``): :func:`~scwork.sharding._kernels.sort_slice`
    then :func:`~scwork.sharding._kernels.count_slice` into
    ``pairs_g[g * nsl * P + sl * P + p]`` and ``distinct_g`` (same layout), the
    run's sorted distinct ids appended to ``ulist`` from ``g_uloff[g] +
    g_sloff[g, sl]``, their number in ``ul_cnt[g * nsl + sl]``. The first
    out-of-vocabulary position of group ``g`` in these slices goes to ``g_oov[g]``
    (set to -1 first, for ``g`` in ``[g0, g1)``: a worker's slots serve all its tasks)
    and the group's later slices are not counted. Returns the number of groups
    ``[g0, g1)`` with an error (0: the caller has nothing to look at).
    """
    nsl = g_sloff.shape[1] - 1
    dummy_g = np.empty(0, np.float32)
    dummy_bm = np.empty(0, np.int64)
    for g in range(g0, g1):
        g_oov[g] = -1
    for sl in range(s0, s1):
        for g in range(g0, g1):
            if g_oov[g] >= 0:
                continue
            a0 = gptr[g]
            a1 = gptr[g + 1]
            m, oov, _ = sort_slice(ids, splits, weights, has_w, feat_rows[a0:a1], feat_k[a0:a1], 0, n, sl,
                                   g_vocab[g], P, g_shift[g], g_qbits[g], lbits, False, sk, dummy_g,
                                   a_keys, dummy_g, b_keys, dummy_g, hist)
            if oov >= 0:
                g_oov[g] = oov
                continue
            ul_cnt[g * nsl + sl] = count_slice(sk, m, P, g_qbits[g], g * nsl * P + sl * P, pairs_g, distinct_g,
                                               False, dummy_bm, 0, ulist, g_uloff[g] + g_sloff[g, sl])
    failed = 0
    for g in range(g0, g1):
        failed += g_oov[g] >= 0
    return failed


def count_groups_reference(ids, splits, weights, has_w, n, P, lbits, gptr, feat_rows, feat_k, g_vocab, g_shift,
                           g_qbits, g_uloff, g_sloff, s0, s1, g0, g1, sk, a_keys, b_keys, hist, pairs_g,
                           distinct_g, ulist, ul_cnt, g_oov):
    """Numpy reference of :func:`count_groups` (the reference sort and count of each run)."""
    nsl = g_sloff.shape[1] - 1
    dummy = np.empty(0, np.float32)
    g_oov[g0:g1] = -1
    for sl in range(s0, s1):
        for g in range(g0, g1):
            if g_oov[g] >= 0:
                continue
            a0, a1 = gptr[g], gptr[g + 1]
            m, oov, _ = sort_slice_reference(ids, splits, weights, has_w, feat_rows[a0:a1], feat_k[a0:a1], 0, n,
                                             sl, g_vocab[g], P, g_shift[g], g_qbits[g], lbits, False, sk, dummy,
                                             a_keys, dummy, b_keys, dummy, hist)
            if oov >= 0:
                g_oov[g] = oov
                continue
            ul_cnt[g * nsl + sl] = count_slice_reference(sk, m, P, g_qbits[g], g * nsl * P + sl * P, pairs_g,
                                                         distinct_g, False, None, 0, ulist,
                                                         g_uloff[g] + g_sloff[g, sl])
    return int(np.count_nonzero(g_oov[g0:g1] >= 0))


@jit(error_model="numpy")
def count_group_tasks(ids, splits, weights, has_w, n, P, lbits, gptr, feat_rows, feat_k, g_vocab, g_shift, g_qbits,
                      g_uloff, g_sloff, tasks, order, first, last, counters, slot, sk, a_keys, b_keys, hist,
                      pairs_g, distinct_g, ulist, ul_cnt, g_oov, task_failed):
    """:func:`count_groups` over a batch of tasks of one stack, each worker thread taking the next one itself.

    ``tasks``: the batch's rows ``(s0, s1, g0, g1)``; this stack's are
    ``order[first:last]``, in the order they are handed out (largest first), and its
    shared counter is ``counters[slot]`` (:func:`~scwork.sharding._task_queue.take_next`,
    zero before the batch). Every worker calls this with its own scratch (``sk`` to
    ``hist``, ``g_oov``) and the same other arguments; each call runs the tasks
    ``order[first + k]`` for the values ``k`` it takes until they pass the stack's
    end, so one call per worker serves the stack and no task waits for the GIL. Task
    ``i`` writes what :func:`count_groups` on its rectangle writes, and its number of
    groups with an error into ``task_failed[i]`` (their error slots are in ``g_oov``
    only until the worker's next task: the caller runs a failed task again on its own
    to read them). Returns the number of tasks this call ran that failed.
    """
    failed = 0
    for _ in range(last - first):            # each turn takes a task, or ends the loop
        i = next_task(order, first, last, counters, slot)
        if i < 0:
            break
        bad = count_groups(ids, splits, weights, has_w, n, P, lbits, gptr, feat_rows, feat_k, g_vocab, g_shift,
                           g_qbits, g_uloff, g_sloff, tasks[i, 0], tasks[i, 1], tasks[i, 2], tasks[i, 3], sk,
                           a_keys, b_keys, hist, pairs_g, distinct_g, ulist, ul_cnt, g_oov)
        task_failed[i] = bad
        failed += bad > 0
    return failed


def count_group_tasks_reference(ids, splits, weights, has_w, n, P, lbits, gptr, feat_rows, feat_k, g_vocab,
                                g_shift, g_qbits, g_uloff, g_sloff, tasks, order, first, last, counters, slot, sk,
                                a_keys, b_keys, hist, pairs_g, distinct_g, ulist, ul_cnt, g_oov, task_failed):
    """Numpy reference of :func:`count_group_tasks` (each task through :func:`count_groups_reference`)."""
    failed = 0
    while (i := int(next_task(order, first, last, counters, slot))) >= 0:
        s0, s1, g0, g1 = (int(x) for x in tasks[i])
        task_failed[i] = count_groups_reference(ids, splits, weights, has_w, n, P, lbits, gptr, feat_rows, feat_k,
                                                g_vocab, g_shift, g_qbits, g_uloff, g_sloff, s0, s1, g0, g1,
                                                sk, a_keys, b_keys, hist, pairs_g, distinct_g, ulist, ul_cnt, g_oov)
        failed += int(task_failed[i] > 0)
    return failed


# --------------------------------------------------------------------------------------
# slice_pairs
# --------------------------------------------------------------------------------------
@jit(inline="always")
def _row_slot(x):
    """The first table slot :func:`slice_pairs` tries for id ``x`` (a multiplicative hash).

    Bits 22..31 of the product of the id's low 32 bits (its high 32 bits folded in
    by xor) with an odd multiplier: those bits depend on every bit of the 32, so
    consecutive ids (a small vocabulary, or ids that differ in their low bits only)
    spread over the slots instead of filling neighbouring ones.
    """
    folded = (x ^ (x >> 32)) & 0xFFFFFFFF
    return ((folded * _SLOT_MULTIPLIER) >> (32 - _SLOT_BITS)) & _SLOT_MASK


@jit(error_model="numpy")
def slice_pairs(ids, splits, n, P, gptr, feat_rows, g_vocab, g_shift, s0, s1, g0, g1, pairs):
    """``pairs[g * nsl * P + sl * P + p]`` += ids of group ``g`` slice ``sl`` sends to partition ``p``.

    Counted after per-sample dedup.

    Over groups ``[g0, g1)`` of the stack (``feat_rows[gptr[g]:gptr[g + 1]]``, partition
    ``(x + g_shift[g]) % P``) and slices ``[s0, s1)`` (``nsl = pairs.size // (ng * P)``).
    An id is counted unless the same row (feature, sample) had it before. Ids
    ``>= g_vocab[g]`` are skipped (the sorting pass reports them).

    A row of up to ``_SHORT_ROW`` ids looks each id up in a table of
    ``2**_SLOT_BITS`` slots by linear probing from :func:`_row_slot`: a slot taken
    in this row by the same id means a duplicate, a slot free in this row means a
    new id, which takes it. Slots are stamped with a row counter, so the table is
    not cleared between rows, and a row fills at most half of it, so there is
    always a free slot and the probes stay short. This replaced comparing each id
    with all the row's earlier ids, which took about twice as long on rows of 20
    ids and grew with the square of the row length. Longer rows are sorted.
    """
    ng = gptr.shape[0] - 1
    nsl = pairs.shape[0] // (ng * P)
    pow2 = (P & (P - 1)) == 0
    stamp = np.full(1 << _SLOT_BITS, -1, np.int32)     # the row that last took each slot
    held = np.empty(1 << _SLOT_BITS, np.int64)         # the id in each slot (valid when stamped)
    stamp_of_row = 0
    # a copy of the current long row to sort, grown to the longest long row seen:
    # batches of short rows only (the usual case) never scan for the longest row
    row = np.empty(0, np.int64)
    for g in range(g0, g1):
        vocab = g_vocab[g]
        shift = g_shift[g]
        for a in range(gptr[g], gptr[g + 1]):
            f = feat_rows[a]
            for sl in range(s0, s1):
                c0 = g * nsl * P + sl * P
                for b in range(sl * n, (sl + 1) * n):
                    j0 = splits[f, b]
                    j1 = splits[f, b + 1]
                    if j1 - j0 <= _SHORT_ROW:
                        for j in range(j0, j1):
                            x = ids[_U(j)]
                            # linear probing: step past the slots that other ids of this
                            # row took, to x's own slot or to a slot free in this row
                            h = _row_slot(x)
                            while stamp[h] == stamp_of_row and held[h] != x:
                                h = (h + 1) & _SLOT_MASK
                            if stamp[h] != stamp_of_row:
                                stamp[h] = stamp_of_row
                                held[h] = x
                                if x < vocab:
                                    q = (x + shift) & (P - 1) if pow2 else (x + shift) % P
                                    pairs[_U(c0 + q)] += 1
                        stamp_of_row += 1
                        if stamp_of_row == _STAMP_END:
                            stamp[:] = -1
                            stamp_of_row = 0
                    else:
                        L = j1 - j0
                        if L > row.shape[0]:
                            row = np.empty(L, np.int64)
                        for j in range(L):
                            row[j] = ids[j0 + j]
                        srt = np.sort(row[:L])
                        prev = np.int64(-1)
                        for j in range(L):
                            x = srt[j]
                            if x != prev and x < vocab:
                                pairs[c0 + (x + shift) % P] += 1
                            prev = x


def slice_pairs_reference(ids, splits, n, P, gptr, feat_rows, g_vocab, g_shift, s0, s1, g0, g1, pairs):
    """Numpy reference of :func:`slice_pairs`: ``np.unique`` of each row."""
    ng = len(gptr) - 1
    nsl = pairs.size // (ng * P)
    for g in range(g0, g1):
        for a in range(gptr[g], gptr[g + 1]):
            f = feat_rows[a]
            for sl in range(s0, s1):
                for b in range(sl * n, (sl + 1) * n):
                    row = np.unique(ids[splits[f, b]:splits[f, b + 1]])
                    row = row[row < g_vocab[g]]
                    np.add.at(pairs, g * nsl * P + sl * P + (row + g_shift[g]) % P, 1)


@jit(error_model="numpy")
def slice_pairs_tasks(ids, splits, n, P, gptr, feat_rows, g_vocab, g_shift, tasks, order, first, last, counters,
                      slot, pairs):
    """:func:`slice_pairs` over a batch of tasks of one stack, each worker thread taking the next one
    itself (``tasks``, ``order[first:last]``, ``counters[slot]`` as in :func:`count_group_tasks`).
    Returns the number of tasks this call ran."""
    done = 0
    for _ in range(last - first):            # each turn takes a task, or ends the loop
        i = next_task(order, first, last, counters, slot)
        if i < 0:
            break
        slice_pairs(ids, splits, n, P, gptr, feat_rows, g_vocab, g_shift, tasks[i, 0], tasks[i, 1], tasks[i, 2],
                    tasks[i, 3], pairs)
        done += 1
    return done


def slice_pairs_tasks_reference(ids, splits, n, P, gptr, feat_rows, g_vocab, g_shift, tasks, order, first, last,
                                counters, slot, pairs):
    """Numpy reference of :func:`slice_pairs_tasks` (each task through :func:`slice_pairs_reference`)."""
    done = 0
    while (i := int(next_task(order, first, last, counters, slot))) >= 0:
        s0, s1, g0, g1 = (int(x) for x in tasks[i])
        slice_pairs_reference(ids, splits, n, P, gptr, feat_rows, g_vocab, g_shift, s0, s1, g0, g1, pairs)
        done += 1
    return done


# --------------------------------------------------------------------------------------
# write_groups
# --------------------------------------------------------------------------------------
@jit(error_model="numpy")
def write_groups(ids, splits, weights, has_w, combiner, n, P, lbits, gptr, feat_rows, feat_k, g_vocab, g_shift,
                 g_qbits, g_rowoff, g_mode, g_uloff, g_sloff, s0, s1, g0, g1, sk, sg, a_keys, a_gains, b_keys,
                 b_gains, hist, offs, pad_lo, pad_hi, rowgain, emb, smp, gout, distinct_g, ulist, ul_cnt, g_oov,
                 g_bad):
    """CSR entries and distinct ids of slices ``[s0, s1)`` x groups ``[g0, g1)`` of a stack without limits.

    The layout is known beforehand (from :func:`slice_pairs`): group ``g``'s ids of
    stream ``(sl, p)`` go to ``offs[g * nsl * P + sl * P + p]`` onwards (after the
    earlier groups' ids of that stream, as the partition-major walk of
    :func:`~scwork.sharding._kernels.stack_slices` writes them). Per (slice, group)
    run: sorted with gains (:func:`~scwork.sharding._kernels.sort_slice`), then
    each pair written (``emb`` local row ``(u & qmask) + row_offset``, ``smp`` the
    local sample row, ``gout`` the gain: ``g_mode`` 2 the carried weight gain, 1
    ``rowgain[R']``, 0 one; a per-sample duplicate adds its gain to its pair's
    slot), ``distinct_g[g * nsl * P + sl * P + p]`` counted, the run's distinct
    ids appended to ``ulist`` as :func:`count_groups` does. The task holding a
    slice's last group (``g1`` = number of groups) also pads the slice: entries
    ``[pad_lo[sl * (P + 1) + t], pad_hi[...])`` for ``t <= P`` get id and sample
    ``PAD_ID``, gain NaN. Errors as :func:`count_groups`, plus the first
    zero-divisor sample of group ``g`` in ``g_bad[g]`` (both set to -1 first for the
    task's groups); returns the number of groups ``[g0, g1)`` with either.
    """
    ng = gptr.shape[0] - 1
    nsl = g_sloff.shape[1] - 1
    lmask = (np.int64(1) << lbits) - 1
    one = np.float32(1.0)
    nan = np.float32(np.nan)
    for g in range(g0, g1):
        g_oov[g] = -1
        g_bad[g] = -1
    for sl in range(s0, s1):
        for g in range(g0, g1):
            if g_oov[g] >= 0:
                continue
            a0 = gptr[g]
            a1 = gptr[g + 1]
            mode = g_mode[g]
            wg = mode == 2
            m, oov, bad = sort_slice(ids, splits, weights, has_w, feat_rows[a0:a1], feat_k[a0:a1], combiner, n, sl,
                                     g_vocab[g], P, g_shift[g], g_qbits[g], lbits, wg, sk, sg,
                                     a_keys, a_gains, b_keys, b_gains, hist)
            if oov >= 0:
                g_oov[g] = oov
                continue
            if bad >= 0 and g_bad[g] < 0:
                g_bad[g] = bad
            qb = g_qbits[g]
            qmask = (np.int64(1) << qb) - 1
            roff = g_rowoff[g]
            c0 = g * nsl * P + sl * P
            ul0 = g_uloff[g] + g_sloff[g, sl]
            nu = 0
            prev_u = np.int64(-1)
            prev_R = np.int64(-1)
            prev_p = np.int64(-1)
            cur = np.int64(-1)
            for i in range(m):
                v = sk[_U(i)]
                u = (v >> 32) & _LOW32
                Rr = v & _LOW32
                p = u >> qb
                if p != prev_p:                   # a new stream: its first slot
                    cur = offs[_U(c0 + p)] - 1
                    prev_p = p
                newx = np.int64(u != prev_u)
                newr = newx | np.int64(Rr != prev_R)
                distinct_g[_U(c0 + p)] += newx
                ulist[_U(ul0 + nu)] = u           # overwritten unless new
                nu += newx
                cur += newr
                write_csr_entry(emb, smp, gout, _U(cur), u, Rr, qmask, roff, lmask,
                                entry_gain(mode, sg, rowgain, one, i, Rr), newr)
                prev_u = u
                prev_R = Rr
            ul_cnt[g * nsl + sl] = nu
        if g1 == ng:
            for t in range(sl * (P + 1), (sl + 1) * (P + 1)):
                for k in range(pad_lo[t], pad_hi[t]):
                    emb[k] = PAD_ID
                    smp[k] = PAD_ID
                    gout[k] = nan
    failed = 0
    for g in range(g0, g1):
        failed += (g_oov[g] >= 0) | (g_bad[g] >= 0)
    return failed


def write_groups_reference(ids, splits, weights, has_w, combiner, n, P, lbits, gptr, feat_rows, feat_k, g_vocab,
                           g_shift, g_qbits, g_rowoff, g_mode, g_uloff, g_sloff, s0, s1, g0, g1, sk, sg, a_keys,
                           a_gains, b_keys, b_gains, hist, offs, pad_lo, pad_hi, rowgain, emb, smp, gout, distinct_g,
                           ulist, ul_cnt, g_oov, g_bad):
    """Numpy reference of :func:`write_groups`: pairs found with ``np.unique``, gains summed with ``np.add.at``."""
    ng = len(gptr) - 1
    nsl = g_sloff.shape[1] - 1
    g_oov[g0:g1] = -1
    g_bad[g0:g1] = -1
    for sl in range(s0, s1):
        for g in range(g0, g1):
            if g_oov[g] >= 0:
                continue
            a0, a1 = gptr[g], gptr[g + 1]
            wg = g_mode[g] == 2
            m, oov, bad = sort_slice_reference(ids, splits, weights, has_w, feat_rows[a0:a1], feat_k[a0:a1],
                                               combiner, n, sl, g_vocab[g], P, g_shift[g], g_qbits[g], lbits, wg,
                                               sk, sg, a_keys, a_gains, b_keys, b_gains, hist)
            if oov >= 0:
                g_oov[g] = oov
                continue
            if bad >= 0 and g_bad[g] < 0:
                g_bad[g] = bad
            keys = sk[:m]
            u = (keys >> 32) & _LOW32
            R = keys & _LOW32
            if g_mode[g] == 2:
                gains = sg[:m].astype(np.float32)
            elif g_mode[g] == 1:
                gains = rowgain[R]
            else:
                gains = np.ones(m, np.float32)
            pairs, inverse = np.unique(np.stack([u, R], axis=1), axis=0, return_inverse=True)
            summed = np.zeros(len(pairs), np.float32)
            seen = np.zeros(len(pairs), bool)
            for i, k in enumerate(inverse.ravel()):   # in key order: float32 sums as the kernel adds them
                summed[k] = np.float32(summed[k] + gains[i]) if seen[k] else gains[i]
                seen[k] = True
            c0 = g * nsl * P + sl * P
            pu, pR = pairs[:, 0], pairs[:, 1]
            p = pu >> g_qbits[g]
            for q in np.unique(p):
                mine = p == q
                start = offs[c0 + q]
                cnt = int(mine.sum())
                emb[start:start + cnt] = (pu[mine] & ((1 << g_qbits[g]) - 1)) + g_rowoff[g]
                smp[start:start + cnt] = pR[mine] & ((1 << lbits) - 1)
                gout[start:start + cnt] = summed[mine]
                distinct_g[c0 + q] += np.unique(pu[mine]).size
            uniq = np.unique(u)
            ul0 = g_uloff[g] + g_sloff[g, sl]
            ulist[ul0:ul0 + uniq.size] = uniq
            ul_cnt[g * nsl + sl] = uniq.size
        if g1 == ng:
            for t in range(sl * (P + 1), (sl + 1) * (P + 1)):
                emb[pad_lo[t]:pad_hi[t]] = PAD_ID
                smp[pad_lo[t]:pad_hi[t]] = PAD_ID
                gout[pad_lo[t]:pad_hi[t]] = np.nan
    return int(np.count_nonzero((g_oov[g0:g1] >= 0) | (g_bad[g0:g1] >= 0)))


@jit(error_model="numpy")
def write_group_tasks(ids, splits, weights, has_w, combiner, n, P, lbits, gptr, feat_rows, feat_k, g_vocab, g_shift,
                      g_qbits, g_rowoff, g_mode, g_uloff, g_sloff, tasks, order, first, last, counters, slot, sk, sg,
                      a_keys, a_gains, b_keys, b_gains, hist, offs, pad_lo, pad_hi, rowgain, emb, smp, gout,
                      distinct_g, ulist, ul_cnt, g_oov, g_bad, task_failed):
    """:func:`write_groups` over a batch of tasks of one stack, each worker thread taking the next one
    itself (``tasks``, ``order[first:last]``, ``counters[slot]``, ``task_failed`` as in
    :func:`count_group_tasks`). Returns the number of tasks this call ran that failed."""
    failed = 0
    for _ in range(last - first):            # each turn takes a task, or ends the loop
        i = next_task(order, first, last, counters, slot)
        if i < 0:
            break
        bad = write_groups(ids, splits, weights, has_w, combiner, n, P, lbits, gptr, feat_rows, feat_k, g_vocab,
                           g_shift, g_qbits, g_rowoff, g_mode, g_uloff, g_sloff, tasks[i, 0], tasks[i, 1],
                           tasks[i, 2], tasks[i, 3], sk, sg, a_keys, a_gains, b_keys, b_gains, hist, offs, pad_lo,
                           pad_hi, rowgain, emb, smp, gout, distinct_g, ulist, ul_cnt, g_oov, g_bad)
        task_failed[i] = bad
        failed += bad > 0
    return failed


def write_group_tasks_reference(ids, splits, weights, has_w, combiner, n, P, lbits, gptr, feat_rows, feat_k,
                                g_vocab, g_shift, g_qbits, g_rowoff, g_mode, g_uloff, g_sloff, tasks, order, first,
                                last, counters, slot, sk, sg, a_keys, a_gains, b_keys, b_gains, hist, offs, pad_lo,
                                pad_hi, rowgain, emb, smp, gout, distinct_g, ulist, ul_cnt, g_oov, g_bad,
                                task_failed):
    """Numpy reference of :func:`write_group_tasks` (each task through :func:`write_groups_reference`)."""
    failed = 0
    while (i := int(next_task(order, first, last, counters, slot))) >= 0:
        s0, s1, g0, g1 = (int(x) for x in tasks[i])
        task_failed[i] = write_groups_reference(ids, splits, weights, has_w, combiner, n, P, lbits, gptr, feat_rows,
                                                feat_k, g_vocab, g_shift, g_qbits, g_rowoff, g_mode, g_uloff,
                                                g_sloff, s0, s1, g0, g1, sk, sg, a_keys, a_gains, b_keys, b_gains,
                                                hist, offs, pad_lo, pad_hi, rowgain, emb, smp, gout, distinct_g,
                                                ulist, ul_cnt, g_oov, g_bad)
        failed += int(task_failed[i] > 0)
    return failed


# --------------------------------------------------------------------------------------
# cut_groups (task lists: plain integer work, compiled because it runs once per call, serially)
# --------------------------------------------------------------------------------------
@jit(inline="always")
def _runs_within(row, target, label, units, k):
    """Cut ``row`` (ids per item, in order) into runs of contiguous items of at most
    ``target`` ids (an item larger than ``target`` is a run of its own); write each run as
    ``(label, first item, end item, ids)`` into ``units[k], units[k + 1], ...`` and return
    the next free row. A row of no items is one empty run."""
    start = 0
    acc = 0
    for i in range(row.shape[0]):
        c = row[i]
        if acc > 0 and acc + c > target:
            units[k, 0] = label
            units[k, 1] = start
            units[k, 2] = i
            units[k, 3] = acc
            k += 1
            start = i
            acc = 0
        acc += c
    units[k, 0] = label
    units[k, 1] = start
    units[k, 2] = row.shape[0]
    units[k, 3] = acc
    return k + 1


@jit
def cut_groups(counts, target, units):
    """Tasks of a stack counted per group: each slice cut into runs of contiguous groups.

    ``counts[g, sl]``: raw ids of group ``g`` in slice ``sl``. Slice by slice, a run
    takes the next group while it stays within ``target`` ids (a group larger than
    ``target`` is a run of its own; a run that would only hold empty groups takes
    them too). Row ``k`` of ``units`` gets ``(sl, g0, g1, ids)``; returns the number
    of runs (at most ``ng * nsl``, the rows ``units`` needs).
    """
    ng, nsl = counts.shape
    k = 0
    for sl in range(nsl):
        k = _runs_within(counts[:, sl], target, sl, units, k)
    return k


def cut_groups_reference(counts, target, units):
    """Numpy reference of :func:`cut_groups`: each slice's cut points from its running sums.

    In a slice a run ends before group ``g`` when the ids since the run's start
    are positive and adding ``g`` passes ``target``; found by walking the running
    sums of the slice (``np.cumsum``) from one cut to the next.
    """
    ng, nsl = counts.shape
    k = 0
    for sl in range(nsl):
        run_sums = np.concatenate([[0], np.cumsum(counts[:, sl])])
        g0 = 0
        while True:
            taken = run_sums[1:] - run_sums[g0]              # ids of groups g0..g as one run
            over = np.nonzero((np.arange(ng) > g0) & (taken - counts[:, sl] > 0) & (taken > target))[0]
            g1 = int(over[0]) if over.size else ng
            units[k] = (sl, g0, g1, run_sums[g1] - run_sums[g0])
            k += 1
            if g1 == ng:
                break
            g0 = g1
    return k


@jit
def cut_slices(counts, target, units):
    """Tasks of several stacks cut by slices: each stack's slices in runs of contiguous slices.

    ``counts[j, sl]``: raw ids of stack ``j`` in slice ``sl``. A stack of at most
    ``target`` ids is one run of all its slices; else a run takes the next slice while
    it stays within ``target`` (a slice larger than ``target`` is a run of its own).
    Row ``k`` of ``units`` gets ``(j, s0, s1, ids)``; returns the number of runs (at
    most ``stacks * nsl``, plus one per stack without slices: the rows ``units`` needs).
    """
    # (a stack of at most target ids comes out as one run of all its slices: no cut is
    # ever due within it)
    m, nsl = counts.shape
    k = 0
    for j in range(m):
        k = _runs_within(counts[j], target, j, units, k)
    return k


def cut_slices_reference(counts, target, units):
    """Numpy reference of :func:`cut_slices`: each stack's cut points from its running sums.

    A run from slice ``s0`` ends before slice ``sl`` when the ids of ``s0..sl-1`` are
    positive and those of ``s0..sl`` pass ``target``.
    """
    m, nsl = counts.shape
    k = 0
    for j in range(m):
        run_sums = np.concatenate([[0], np.cumsum(counts[j])])
        if run_sums[-1] <= target:
            units[k] = (j, 0, nsl, run_sums[-1])
            k += 1
            continue
        s0 = 0
        for sl in range(nsl):
            if run_sums[sl] - run_sums[s0] > 0 and run_sums[sl + 1] - run_sums[s0] > target:
                units[k] = (j, s0, sl, run_sums[sl] - run_sums[s0])
                k += 1
                s0 = sl
        units[k] = (j, s0, nsl, run_sums[nsl] - run_sums[s0])
        k += 1
    return k


@jit
def slice_task_rows(cut, by_slices, groups_of_job, rows, job_of):
    """The task table of a count or slices batch from its cut, for the queued kernels.

    ``cut``: rows ``(slice, g0, g1, size)`` of :func:`cut_groups` (one stack;
    ``by_slices`` False) or ``(stack, s0, s1, size)`` of :func:`cut_slices` (several,
    each task all ``groups_of_job[stack]`` groups). Row ``i`` of ``rows`` gets the task's
    ``(s0, s1, g0, g1)``, ``job_of[i]`` its stack.
    """
    for i in range(cut.shape[0]):
        if by_slices:
            j = cut[i, 0]
            rows[i, 0] = cut[i, 1]
            rows[i, 1] = cut[i, 2]
            rows[i, 2] = 0
            rows[i, 3] = groups_of_job[j]
            job_of[i] = j
        else:
            rows[i, 0] = cut[i, 0]
            rows[i, 1] = cut[i, 0] + 1
            rows[i, 2] = cut[i, 1]
            rows[i, 3] = cut[i, 2]
            job_of[i] = 0


def slice_task_rows_reference(cut, by_slices, groups_of_job, rows, job_of):
    """Numpy reference of :func:`slice_task_rows`."""
    if by_slices:
        rows[:] = np.stack([cut[:, 1], cut[:, 2], np.zeros(len(cut), np.int64), groups_of_job[cut[:, 0]]], axis=1)
        job_of[:] = cut[:, 0]
    else:
        rows[:] = np.stack([cut[:, 0], cut[:, 0] + 1, cut[:, 1], cut[:, 2]], axis=1)
        job_of[:] = 0


@jit
def order_by_job(cut, size_col, job_of, order, starts):
    """The order the queued kernels take a batch's tasks in: by job, largest first within a job.

    Task ``i``'s size is ``cut[i, size_col]``, its job ``job_of[i]``. ``order`` gets the
    task indices grouped by job (jobs in order), within a job by size, largest first,
    ties in index order (a stable sort: :func:`~scwork.sharding._profile.dispatch_order`'s
    order for one job); ``starts[j]`` where job ``j``'s run begins (``starts`` has one
    entry per job plus the end).
    """
    n = cut.shape[0]
    starts[:] = 0
    for i in range(n):
        starts[job_of[i] + 1] += 1
    for j in range(starts.shape[0] - 1):
        starts[j + 1] += starts[j]
    fill = starts[:-1].copy()
    for i in range(n):
        order[fill[job_of[i]]] = i
        fill[job_of[i]] += 1
    for j in range(starts.shape[0] - 1):
        run = order[starts[j]:starts[j + 1]].copy()
        keys = np.empty(run.shape[0], np.int64)
        for k in range(run.shape[0]):
            keys[k] = -cut[run[k], size_col]
        by_size = np.argsort(keys, kind="mergesort")        # stable
        for k in range(run.shape[0]):
            order[starts[j] + k] = run[by_size[k]]


def order_by_job_reference(cut, size_col, job_of, order, starts):
    """Numpy reference of :func:`order_by_job` (one lexsort)."""
    order[:] = np.lexsort((-cut[:, size_col], job_of))
    starts[:] = np.concatenate([[0], np.cumsum(np.bincount(job_of, minlength=len(starts) - 1))])


# --------------------------------------------------------------------------------------
# counted_layouts (serial work between the count and the slices: one call for all stacks)
# --------------------------------------------------------------------------------------
#: Columns of :func:`counted_layouts`' ``jobs`` table, one row per counted stack: where its
#: arrays start in ``block`` (int64) and ``row_pointers`` (int32), its shape, and ``split``
#: (1: a stack without limits, whose groups' places and padding are laid out here too).
COUNTED_LAYOUT_COLUMNS = ("count_pairs", "ng", "P", "R", "split", "base", "used", "offs", "pad_lo", "pad_hi",
                          "row_pointers")


@jit
def counted_layouts(block, jobs, nsl, row_pointers, C_out):
    """CSR size and layout of every counted stack of a call, from its counted pairs.

    Row ``j`` of ``jobs`` (columns :data:`COUNTED_LAYOUT_COLUMNS`) describes one stack:
    its pairs per (group, slice, partition) after per-sample dedup
    (:func:`slice_pairs`) are ``block[count_pairs:count_pairs + ng * nsl * P]``. With
    ``pairs[sl, p]`` their sum over groups and ``aligned`` those rounded up to 8,
    ``used[sl] = sum over p of aligned[sl, p]`` and ``C = max(8, max over sl of used)``
    (``C_out[j]``), each slice at ``base[sl] = sl * C``. With ``split``, also: partition
    ``p`` of slice ``sl`` starts at ``pstart = base[sl] + aligned[sl, :p].sum()``; group
    ``g``'s first slot of that stream is ``offs[g, sl, p] = pstart + pairs of the
    earlier groups``; the row pointers (``R`` per slice) are the partitions' ends
    ``pstart - base[sl] + pairs[sl, p]``, then ``used[sl]`` for the ``R - P`` unused
    ones; the padding ranges ``[pad_lo, pad_hi)`` of slice ``sl`` are each partition's
    tail ``[pstart + pairs, pstart + aligned)`` and the slice's tail
    ``[base + used, base + C)``; ``used`` is written into ``block``. (What
    ``_StackJob.set_counted_size`` computes for one stack with numpy.)
    """
    for j in range(jobs.shape[0]):
        cp0 = jobs[j, 0]
        ng = jobs[j, 1]
        P = jobs[j, 2]
        R = jobs[j, 3]
        split = jobs[j, 4] != 0
        b0 = jobs[j, 5]
        u0 = jobs[j, 6]
        o0 = jobs[j, 7]
        lo0 = jobs[j, 8]
        hi0 = jobs[j, 9]
        rp0 = jobs[j, 10]
        C = np.int64(8)
        for sl in range(nsl):
            used = np.int64(0)
            for p in range(P):
                pairs = np.int64(0)
                for g in range(ng):
                    pairs += block[cp0 + (g * nsl + sl) * P + p]
                used += _round_up(pairs, 8)
            if used > C:
                C = used
        C_out[j] = C
        for sl in range(nsl):
            base = sl * C
            block[b0 + sl] = base
            if not split:
                continue
            start = base
            for p in range(P):
                run = start
                for g in range(ng):
                    c = (g * nsl + sl) * P + p
                    block[o0 + c] = run
                    run += block[cp0 + c]
                pairs = run - start
                aligned = _round_up(pairs, 8)
                row_pointers[rp0 + sl * R + p] = start - base + pairs
                block[lo0 + sl * (P + 1) + p] = start + pairs
                block[hi0 + sl * (P + 1) + p] = start + aligned
                start += aligned
            used = start - base
            for r in range(P, R):
                row_pointers[rp0 + sl * R + r] = used
            block[lo0 + sl * (P + 1) + P] = base + used
            block[hi0 + sl * (P + 1) + P] = base + C
            block[u0 + sl] = used


def counted_layouts_reference(block, jobs, nsl, row_pointers, C_out):
    """Numpy reference of :func:`counted_layouts`: each stack's layout with whole-array calls."""
    for j, (cp0, ng, P, R, split, b0, u0, o0, lo0, hi0, rp0) in enumerate(jobs.tolist()):
        per_group = block[cp0:cp0 + ng * nsl * P].reshape(ng, nsl, P)
        pairs = per_group.sum(axis=0)
        aligned = round_up(pairs, 8)
        used = aligned.sum(axis=1)
        C = max(8, int(used.max()) if used.size else 8)
        C_out[j] = C
        base = np.arange(nsl, dtype=np.int64) * C
        block[b0:b0 + nsl] = base
        if not split:
            continue
        pstart = np.cumsum(aligned, axis=1) - aligned + base[:, None]
        block[o0:o0 + ng * nsl * P] = (np.cumsum(per_group, axis=0) - per_group + pstart[None]).ravel()
        rp = row_pointers[rp0:rp0 + nsl * R].reshape(nsl, R)
        rp[:, :P] = pstart - base[:, None] + pairs
        rp[:, P:] = used[:, None]
        block[lo0:lo0 + nsl * (P + 1)] = np.concatenate([pstart + pairs, (base + used)[:, None]], axis=1).ravel()
        block[hi0:hi0 + nsl * (P + 1)] = np.concatenate([pstart + aligned, (base + C)[:, None]], axis=1).ravel()
        block[u0:u0 + nsl] = used


def warmup() -> None:
    """Compile the kernels on tiny inputs (or load them from numba's cache)."""
    ids = np.array([3, 1, 3, 0, 2, 2], np.int64)
    splits = np.array([[0, 3, 6]], np.int64)
    one = np.ones(1, np.int64)
    zero = np.zeros(1, np.int64)
    gptr = np.array([0, 1], np.int64)
    pairs = np.zeros(4, np.int64)
    slice_pairs(ids, splits, 1, 2, gptr, zero, np.array([4], np.int64), one, 0, 2, 0, 1, pairs)
    sloff = np.array([[0, 3, 6]], np.int64)
    ulist = np.zeros(6, np.int64)
    ul_cnt = np.zeros(2, np.int64)
    cut_groups(np.ones((2, 2), np.int64), 1.5, np.empty((4, 4), np.int64))
    cut_slices(np.ones((2, 2), np.int64), 1.5, np.empty((4, 4), np.int64))
    layout_block = np.zeros(64, np.int64)
    layout_block[:8] = (3, 0, 9, 1, 0, 0, 2, 5)
    counted_layouts(layout_block, np.array([[0, 2, 2, 8, 1, 8, 10, 12, 20, 26, 0]], np.int64), 2,
                    np.empty(16, np.int32), np.empty(1, np.int64))
    keys = np.empty(6, np.int64)
    count_groups(ids, splits, np.ones(6, np.float32), np.zeros(1, np.int8), 1, 2, 0, gptr, zero, zero,
                 np.array([4], np.int64), one, one, zero, sloff, 0, 2, 0, 1, keys, keys.copy(), keys.copy(),
                 np.empty(3 * 2048, np.int64), pairs, pairs.copy(), ulist, ul_cnt, np.full(1, -1, np.int64))
    tasks, order, counters = np.array([[0, 1, 0, 1], [1, 2, 0, 1]], np.int64), np.array([1, 0], np.int64), zero.copy()
    count_group_tasks(ids, splits, np.ones(6, np.float32), np.zeros(1, np.int8), 1, 2, 0, gptr, zero, zero,
                      np.array([4], np.int64), one, one, zero, sloff, tasks, order, 0, 2, counters, 0, keys,
                      keys.copy(), keys.copy(), np.empty(3 * 2048, np.int64), pairs, pairs.copy(), ulist, ul_cnt,
                      np.full(1, -1, np.int64), np.zeros(2, np.int64))
    slice_pairs_tasks(ids, splits, 1, 2, gptr, zero, np.array([4], np.int64), one, tasks, order, 0, 2, zero.copy(), 0,
                      pairs)
    slice_task_rows(tasks, False, one, np.empty((2, 4), np.int64), np.empty(2, np.int64))
    order_by_job(tasks, 3, np.zeros(2, np.int64), np.empty(2, np.int64), np.empty(2, np.int64))
