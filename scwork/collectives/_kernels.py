"""Numba kernels that run a collective schedule, each beside a plain reference.

Nothing here compiles at import: ``@jit`` (``numba.njit`` without signatures)
compiles on the first call, or in :func:`warmup`. :mod:`scwork.collectives.execute`
imports this module lazily, only for runs large enough to need it.

Kernels
-------
apply_transfers
    Every transfer of a schedule on the values: ``work[destination, a:b]``
    ``+=`` (combine) or ``=`` (copy) ``work[source, a:b]``, step after step.
    Element ranges never interact, so the kernel runs the *whole* schedule on
    one block of elements (every node's slice of it, a cache-sized tile) before
    moving to the next block: the work array streams through memory once
    instead of once per step. Per element, the operations happen in the same
    order as in the step-by-step loop (steps in order, transfers of a step in
    schedule order), so results are bitwise identical, floats included. A
    transfer flagged ``hazard`` (its source range is also written in its step)
    reads the source as it was at the start of the step, from a snapshot.
    Optionally the block is first copied from ``initial`` (fusing the initial
    copy with the run).
all_reduce_blocks
    The fused all-reduce (:mod:`scwork.collectives._fused`): per block, the
    copy in with the input check, the transfers as ``apply_transfers`` runs
    them, the check that every node ends bitwise equal to its group's first
    node, and that node's values as the only output. Reference:
    :func:`all_reduce_blocks_reference` (whole numpy arrays).
track_steps
    The contribution bit sets per (node, chunk) that find the step where a
    schedule goes wrong; see :func:`track_steps` for the rules. The kernel
    only *detects* a wrong step: it rolls that step back and returns its index,
    and the caller replays the step with the numpy tracker, which raises the
    detailed error. :func:`track_steps_forward` applies the same rules faster,
    without the roll-back (for a run from the initial sets, which the caller
    can rebuild).
"""

from __future__ import annotations

import numpy as np

from scwork._jit import jit

__all__ = [
    "FUSED_DONE",
    "FUSED_INCONSISTENT",
    "FUSED_INPUT_FLAGGED",
    "all_reduce_blocks",
    "all_reduce_blocks_reference",
    "apply_transfers",
    "apply_transfers_reference",
    "most_hazards_per_step",
    "track_steps",
    "track_steps_forward",
    "track_steps_reference",
    "transfers_by_block",
    "warmup",
]


# --------------------------------------------------------------------------------------
# Values: every transfer, block of elements by block of elements.
# --------------------------------------------------------------------------------------
@jit
def transfers_by_block(element_start, element_stop, length, block):
    """Transfers touching each block of ``block`` elements, in schedule order (CSR: starts, entries)."""
    n = element_start.shape[0]
    num_blocks = (length + block - 1) // block
    starts = np.zeros(num_blocks + 1, np.int64)
    for i in range(n):
        a = element_start[i]
        b = element_stop[i]
        if a < b:
            for k in range(a // block, (b - 1) // block + 1):
                starts[k + 1] += 1
    for k in range(num_blocks):
        starts[k + 1] += starts[k]
    entries = np.empty(starts[num_blocks], np.int64)
    fill = starts[:num_blocks].copy()
    for i in range(n):
        a = element_start[i]
        b = element_stop[i]
        if a < b:
            for k in range(a // block, (b - 1) // block + 1):
                entries[fill[k]] = i
                fill[k] += 1
    return starts, entries


@jit
def most_hazards_per_step(step, hazard, element_start, element_stop):
    """Most non-empty hazardous transfers in one step (snapshot slices a block needs)."""
    most = 0
    current = 0
    for i in range(step.shape[0]):
        if i == 0 or step[i] != step[i - 1]:
            current = 0
        if hazard[i] and element_start[i] < element_stop[i]:
            current += 1
            most = max(most, current)
    return most


@jit
def _run_block(work, offset, lo, hi, entries, p, end, step, source, destination, element_start, element_stop,
               is_combine, hazard, snapshot, snapshot_at):
    """Transfers ``entries[p:end]`` (those touching elements ``lo:hi``) on that range, step by step.

    Element ``e`` is column ``e - offset`` of ``work``. ``snapshot`` holds the
    start-of-step source slices of hazardous transfers (``snapshot_at[i]``: where).
    """
    while p < end:
        t = step[entries[p]]
        q = p
        while q < end and step[entries[q]] == t:
            q += 1
        used = 0
        for r in range(p, q):
            i = entries[r]
            if hazard[i]:
                a = max(element_start[i], lo)
                b = min(element_stop[i], hi)
                snapshot[used:used + b - a] = work[source[i], a - offset:b - offset]
                snapshot_at[i] = used
                used += b - a
        for r in range(p, q):
            i = entries[r]
            a = max(element_start[i], lo)
            b = min(element_stop[i], hi)
            target = work[destination[i], a - offset:b - offset]
            if hazard[i]:
                payload = snapshot[snapshot_at[i]:snapshot_at[i] + b - a]
            else:
                payload = work[source[i], a - offset:b - offset]
            # Zero-based loops over slices: LLVM vectorises them (a loop over
            # range(a, b) keeps numba's negative-index check and stays scalar).
            if is_combine[i]:
                for j in range(b - a):
                    target[j] += payload[j]
            else:
                for j in range(b - a):
                    target[j] = payload[j]
        p = q


@jit
def apply_transfers(initial, work, copy_initial, step, source, destination, element_start, element_stop,
                    is_combine, hazard, block):
    """Run every transfer on ``work`` (nodes x elements), in place.

    Parameters
    ----------
    initial : ndarray (nodes, elements)
        Copied into ``work`` block by block first when ``copy_initial``
        (same dtype as ``work``; ignored otherwise).
    work : ndarray (nodes, elements)
    step, source, destination, element_start, element_stop : int64 arrays (transfers,)
        Transfers in schedule order (``step`` non-decreasing).
    is_combine, hazard : bool arrays (transfers,)
        Combine (add) or copy; read the source from a start-of-step snapshot.
    block : int
        Elements per block (every node's slice of a block is processed together).
    """
    num_nodes = work.shape[0]
    length = work.shape[1]
    if length == 0 or block <= 0:
        return
    num_blocks = (length + block - 1) // block
    starts, entries = transfers_by_block(element_start, element_stop, length, block)
    most = most_hazards_per_step(step, hazard, element_start, element_stop)
    snapshot = np.empty(max(most, 1) * block, work.dtype)
    snapshot_at = np.zeros(source.shape[0], np.int64)
    for k in range(num_blocks):
        lo = k * block
        hi = min(length, lo + block)
        if copy_initial:
            for node in range(num_nodes):
                from_row = initial[node, lo:hi]
                into_row = work[node, lo:hi]
                for j in range(hi - lo):    # a loop: slice assignment may go through a temporary
                    into_row[j] = from_row[j]
        _run_block(work, 0, lo, hi, entries, starts[k], starts[k + 1], step, source, destination, element_start,
                   element_stop, is_combine, hazard, snapshot, snapshot_at)


def apply_transfers_reference(initial, step, source, destination, element_start, element_stop, is_combine):
    """Numpy reference of :func:`apply_transfers`: one slice operation per transfer.

    Returns a new array. Every transfer of a step reads its source as it was at
    the start of the step (a copy of the whole array per step: obvious, slow).
    """
    work = np.array(initial, copy=True)
    steps = np.asarray(step)
    for t in np.unique(steps):
        before = work.copy()
        for i in np.flatnonzero(steps == t):
            a, b = int(element_start[i]), int(element_stop[i])
            payload = before[source[i], a:b]
            if is_combine[i]:
                work[destination[i], a:b] = work[destination[i], a:b] + payload
            else:
                work[destination[i], a:b] = payload
    return work


# --------------------------------------------------------------------------------------
# All-reduce, fused: input check, transfers, consistency, compact output; block by block.
# --------------------------------------------------------------------------------------
#: :func:`all_reduce_blocks` ran to the end: ``out`` holds every group's result.
FUSED_DONE = 0
#: An element's sum of ``|x|`` over the nodes is not ``<= abs_limit`` (or not finite).
FUSED_INPUT_FLAGGED = 1
#: A node ends a block with other bits than its group's representative.
FUSED_INCONSISTENT = 2


# Kept whole although over 120 lines: one loop nest over blocks and transfers that numba must
# compile as one, with no call overhead in the hot loop.
@jit
def all_reduce_blocks(data, data_bits, scratch, scratch_bits, snapshot, snapshot_at, out, representative, group_of,
                      step, source, destination, element_start, element_stop, is_combine, hazard, starts, entries,
                      first_block, end_block, float_bits, magnitude_mask, float_screen, integer_screen, check_input,
                      abs_limit, sample_elements, sampled):
    """Run an all-reduce block by block and keep one result row per group.

    For each block ``first_block .. end_block - 1`` of ``scratch.shape[1]``
    elements (calls on disjoint block ranges may run at the same time, each
    with its own ``scratch``):

    1. copy every node's slice of ``data`` into ``scratch`` (cast to its dtype),
       keeping the largest magnitude seen (a screen);
    2. if the screen is above its limit, sum ``|x|`` over the nodes per element
       in float64 (node order, as ``numpy.sum(axis=0)``) and stop at the first
       element whose sum is not ``<= abs_limit`` (NaN and inf never are);
    3. run the block's transfers as :func:`apply_transfers` does (the same
       additions in the same order, so the same bits);
    4. stop if some node's bits differ from its group's representative's;
    5. copy the representatives' rows into ``out``.

    The block stays in the cache from the copy to the output, and no nodes x
    elements array is written. On the way (after step 1), the input columns
    ``sample_elements`` are copied into ``sampled`` while they are in the cache
    (the caller computes the reference sums of sampled verification from them).

    Parameters
    ----------
    data : ndarray (nodes, elements)
        Every node's vector: float32/float64 (same dtype as ``scratch``) or
        integers of at most 63 bits of magnitude (``scratch`` int64).
    data_bits : ndarray (nodes, elements)
        ``data`` viewed as unsigned integers of its item size.
    scratch : ndarray (nodes, block)
        Work space in the working dtype; its width is the block size.
    scratch_bits : ndarray (nodes, block)
        ``scratch`` viewed as unsigned integers of its item size.
    snapshot, snapshot_at : ndarrays
        Work space for hazardous transfers: ``scratch``'s dtype, at least
        :func:`most_hazards_per_step` x block elements; int64 (transfers,).
    out : ndarray (groups, elements)
        Result of each group (working dtype), filled block by block.
    representative : int64 array (groups,)
        Node whose values ``out`` keeps for each group (its first node).
    group_of : int64 array (nodes,)
    step, source, destination, element_start, element_stop, is_combine, hazard
        As for :func:`apply_transfers`.
    starts, entries : int64 arrays
        The transfers touching each block, from :func:`transfers_by_block`.
    first_block, end_block : int
        The blocks to run.
    float_bits : bool
        Floats: copy the bits, and screen the magnitude as ``bits & magnitude_mask``
        (for IEEE floats that order is the order of ``|x|``, and NaN and inf
        are above every finite value) against ``float_screen`` (same dtype as
        ``data_bits``). Integers: screen ``|x|`` (as int64) against ``integer_screen``.
    check_input : bool
        Check ``sum |x| <= abs_limit`` per element (the screen only decides
        which blocks need the exact float64 sums: the caller chooses it so that
        a block under it cannot fail).
    sample_elements : int64 array (samples,)
        Sorted element ids (may be empty).
    sampled : ndarray (nodes, samples)
        Receives ``data[:, sample_elements]`` (``data``'s dtype), in the blocks run.

    Returns
    -------
    status : int
        :data:`FUSED_DONE`, :data:`FUSED_INPUT_FLAGGED` or :data:`FUSED_INCONSISTENT`.
    where : int
        The flagged element, the first element of the inconsistent block, or
        the length when done.
    """
    num_nodes = data.shape[0]
    length = data.shape[1]
    block = scratch.shape[1]
    if length == 0:
        return FUSED_DONE, 0
    abs_sum = np.empty(block, np.float64)
    sample_begin = np.searchsorted(sample_elements, first_block * block)
    for k in range(first_block, end_block):
        lo = k * block
        hi = min(length, lo + block)
        width = hi - lo
        # 1. Copy in with a scalar maximum per row: a reduction LLVM vectorises
        # (a maximum per element would cost a load and a store per value). Loops,
        # not slice assignment: numba copies overlapping-looking slices through a
        # temporary.
        above = False
        if float_bits:
            for node in range(num_nodes):
                row_bits = data_bits[node, lo:hi]
                into_bits = scratch_bits[node, :width]
                top = magnitude_mask ^ magnitude_mask
                for j in range(width):
                    bits = row_bits[j]
                    into_bits[j] = bits
                    top = max(top, bits & magnitude_mask)
                above = above or top > float_screen
        else:
            for node in range(num_nodes):
                row = data[node, lo:hi]
                into = scratch[node, :width]
                top_int = 0
                for j in range(width):
                    value = np.int64(row[j])
                    into[j] = value
                    # |value| - 1 for negatives: no overflow at the int64 minimum.
                    top_int = max(top_int, value if value >= 0 else -(value + 1))
                above = above or top_int > integer_screen
        # 2. The exact bound, only where the screen cannot vouch for it.
        if check_input and above:
            sums = abs_sum[:width]
            sums[:] = 0.0
            for node in range(num_nodes):
                row = data[node, lo:hi]
                for j in range(width):
                    sums[j] += abs(np.float64(row[j]))
            for j in range(width):
                if not sums[j] <= abs_limit:
                    return FUSED_INPUT_FLAGGED, lo + j
        sample_end = sample_begin
        while sample_end < sample_elements.shape[0] and sample_elements[sample_end] < hi:
            sample_end += 1
        for node in range(num_nodes):
            for i in range(sample_begin, sample_end):
                sampled[node, i] = data[node, sample_elements[i]]
        sample_begin = sample_end
        # 3. The schedule.
        _run_block(scratch, lo, lo, hi, entries, starts[k], starts[k + 1], step, source, destination,
                   element_start, element_stop, is_combine, hazard, snapshot, snapshot_at)
        # 4. Every node bitwise equal to its representative.
        for node in range(num_nodes):
            first = representative[group_of[node]]
            if first != node:
                mine = scratch_bits[node, :width]
                theirs = scratch_bits[first, :width]
                differ = mine[0] ^ theirs[0]
                for j in range(width):
                    differ |= mine[j] ^ theirs[j]
                if differ != 0:
                    return FUSED_INCONSISTENT, lo
        # 5. One row per group.
        for g in range(out.shape[0]):
            kept = scratch[representative[g], :width]
            into_out = out[g, lo:hi]
            for j in range(width):
                into_out[j] = kept[j]
    return FUSED_DONE, min(length, end_block * block)


def all_reduce_blocks_reference(data, work_dtype, representative, group_of, step, source, destination,
                                element_start, element_stop, is_combine, check_input, abs_limit, block):
    """Numpy reference of :func:`all_reduce_blocks`: whole arrays, then the first problem block by block.

    Returns ``(status, where, out)``; ``out`` (groups, elements) is meaningful when done.
    """
    data = np.asarray(data)
    work_dtype = np.dtype(work_dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # inputs it flags may overflow on the way
        work = apply_transfers_reference(data.astype(work_dtype), step, source, destination,
                                         element_start, element_stop, is_combine)
    bounds = np.zeros(data.shape[1], np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        for row in data:                             # node by node, the order of numpy.sum(axis=0)
            bounds += np.abs(row.astype(np.float64))
    bits = work.view(np.dtype(f"u{work_dtype.itemsize}"))
    differs = (bits != bits[np.asarray(representative)[np.asarray(group_of)]]).any(axis=0)
    length = work.shape[1]
    for lo in range(0, length, block):
        hi = min(length, lo + block)
        flagged = ~(bounds[lo:hi] <= abs_limit)
        if check_input and flagged.any():
            return FUSED_INPUT_FLAGGED, lo + int(np.argmax(flagged)), None
        if differs[lo:hi].any():
            return FUSED_INCONSISTENT, lo, None
    return FUSED_DONE, length, work[np.asarray(representative)]


# --------------------------------------------------------------------------------------
# Contribution bit sets per (node, chunk).
# --------------------------------------------------------------------------------------
@jit
def track_steps(offsets, t_begin, t_end, source, destination, chunk_start, chunk_stop, is_combine, bits, last):
    """Update the bit sets for steps ``t_begin`` .. ``t_end - 1``; return the first wrong step.

    ``bits[node, chunk]`` (words of 64 bits) is the set of nodes whose data the
    node's copy of the chunk holds; ``last[node, chunk]`` the step that last
    wrote it. Transfers of step ``t`` are ``offsets[t]:offsets[t + 1]``. Every
    transfer reads the sender's set as it was at the start of the step. A step
    is wrong when a sender holds nothing for a chunk it sends, a combine adds a
    contribution the receiver already has (or two combines of the step add the
    same one), a copy overwrites contributions the sender does not hold, or a
    chunk gets both a copy and a combine. Combines apply before copies; of two
    copies into one chunk the later wins.

    Returns ``t_end`` when every step is right; otherwise the wrong step, with
    ``bits`` and ``last`` as they were at its start.
    """
    words = bits.shape[2]
    most = 0
    for t in range(t_begin, t_end):
        cells = 0
        for i in range(offsets[t], offsets[t + 1]):
            cells += max(chunk_stop[i] - chunk_start[i], 0)
        most = max(most, cells)
    sent = np.empty((max(most, 1), words), np.uint64)
    saved = np.empty((max(most, 1), words), np.uint64)
    saved_last = np.empty(max(most, 1), np.int64)
    for t in range(t_begin, t_end):
        i0 = offsets[t]
        i1 = offsets[t + 1]
        ok = True
        # The state at the start of the step: what is sent, and what to roll back to.
        k = 0
        for i in range(i0, i1):
            src = source[i]
            dst = destination[i]
            for c in range(chunk_start[i], chunk_stop[i]):
                held = np.uint64(0)
                for w in range(words):
                    sent[k, w] = bits[src, c, w]
                    held |= bits[src, c, w]
                    saved[k, w] = bits[dst, c, w]
                saved_last[k] = last[dst, c]
                if held == 0:
                    ok = False
                k += 1
        # Combines: every contribution may arrive once.
        k = 0
        for i in range(i0, i1):
            dst = destination[i]
            for c in range(chunk_start[i], chunk_stop[i]):
                if ok and is_combine[i]:
                    for w in range(words):
                        if bits[dst, c, w] & sent[k, w]:
                            ok = False
                    if ok:
                        for w in range(words):
                            bits[dst, c, w] |= sent[k, w]
                        last[dst, c] = t
                k += 1
        # Copies: checked against the state after the combines, then applied.
        k = 0
        for i in range(i0, i1):
            dst = destination[i]
            for c in range(chunk_start[i], chunk_stop[i]):
                if ok and not is_combine[i]:
                    if last[dst, c] == t:
                        ok = False
                    for w in range(words):
                        if bits[dst, c, w] & ~sent[k, w]:
                            ok = False
                k += 1
        if ok:
            k = 0
            for i in range(i0, i1):
                dst = destination[i]
                for c in range(chunk_start[i], chunk_stop[i]):
                    if not is_combine[i]:
                        for w in range(words):
                            bits[dst, c, w] = sent[k, w]
                        last[dst, c] = t
                    k += 1
        else:
            # Roll back in reverse, so the first saved state of a cell is restored last.
            k = 0
            for i in range(i0, i1):
                k += max(chunk_stop[i] - chunk_start[i], 0)
            for i in range(i1 - 1, i0 - 1, -1):
                dst = destination[i]
                for c in range(chunk_stop[i] - 1, chunk_start[i] - 1, -1):
                    k -= 1
                    for w in range(words):
                        bits[dst, c, w] = saved[k, w]
                    last[dst, c] = saved_last[k]
            return t
    return t_end


@jit
def track_steps_forward(offsets, t_begin, t_end, source, destination, chunk_start, chunk_stop, is_combine,
                        hazard, bits, last):
    """:func:`track_steps` without the roll-back: faster, for a caller that can rebuild the sets.

    The same rules, the same first wrong step, and the same sets after every
    right step. It saves work three ways: only a transfer flagged ``hazard``
    (its sender's chunks are written in its step) has the sender's sets copied
    at the start of the step, the others read them in place (nothing writes
    them in the step); a sender's set is checked for being empty where it is
    used, not in a pass of its own; and nothing is kept to roll a step back.
    Returns ``t_end`` when every step is right; otherwise the wrong step, with
    ``bits`` and ``last`` partly updated by it.
    """
    words = bits.shape[2]
    most = 0
    for t in range(t_begin, t_end):
        cells = 0
        for i in range(offsets[t], offsets[t + 1]):
            if hazard[i]:
                cells += max(chunk_stop[i] - chunk_start[i], 0)
        most = max(most, cells)
    sent = np.empty((max(most, 1), words), np.uint64)
    sent_at = np.zeros(source.shape[0], np.int64)
    for t in range(t_begin, t_end):
        i0 = offsets[t]
        i1 = offsets[t + 1]
        # The start-of-step sets of the senders that the step writes.
        k = 0
        for i in range(i0, i1):
            if hazard[i]:
                src = source[i]
                sent_at[i] = k
                for c in range(chunk_start[i], chunk_stop[i]):
                    for w in range(words):
                        sent[k, w] = bits[src, c, w]
                    k += 1
        # Combines, in order: the sender holds something, and every contribution arrives once.
        for i in range(i0, i1):
            if not is_combine[i]:
                continue
            src = source[i]
            dst = destination[i]
            k = sent_at[i]
            for c in range(chunk_start[i], chunk_stop[i]):
                held = np.uint64(0)
                both = np.uint64(0)
                for w in range(words):
                    incoming = sent[k, w] if hazard[i] else bits[src, c, w]
                    held |= incoming
                    both |= bits[dst, c, w] & incoming
                if held == 0 or both != 0:
                    return t
                for w in range(words):
                    bits[dst, c, w] |= sent[k, w] if hazard[i] else bits[src, c, w]
                last[dst, c] = t
                k += 1
        # Copies: all checked against the state after the combines, then applied in order.
        for i in range(i0, i1):
            if is_combine[i]:
                continue
            src = source[i]
            dst = destination[i]
            k = sent_at[i]
            for c in range(chunk_start[i], chunk_stop[i]):
                if last[dst, c] == t:
                    return t
                held = np.uint64(0)
                lost = np.uint64(0)
                for w in range(words):
                    incoming = sent[k, w] if hazard[i] else bits[src, c, w]
                    held |= incoming
                    lost |= bits[dst, c, w] & ~incoming
                if held == 0 or lost != 0:
                    return t
                k += 1
        for i in range(i0, i1):
            if is_combine[i]:
                continue
            src = source[i]
            dst = destination[i]
            k = sent_at[i]
            for c in range(chunk_start[i], chunk_stop[i]):
                for w in range(words):
                    bits[dst, c, w] = sent[k, w] if hazard[i] else bits[src, c, w]
                last[dst, c] = t
                k += 1
    return t_end


def track_steps_reference(offsets, t_begin, t_end, source, destination, chunk_start, chunk_stop, is_combine,
                          bits, last):
    """Plain-Python reference of :func:`track_steps` (sets of node ids, in place on ``bits``/``last``)."""
    words = bits.shape[2]

    def members(row):
        return {w * 64 + b for w in range(words) for b in range(64) if int(row[w]) >> b & 1}

    def as_words(nodes):
        row = np.zeros(words, np.uint64)
        for m in nodes:
            row[m // 64] |= np.uint64(1) << np.uint64(m % 64)
        return row

    for t in range(t_begin, t_end):
        start = bits.copy()
        start_last = last.copy()
        ok = True
        transfers = range(int(offsets[t]), int(offsets[t + 1]))
        cells = [(i, c) for i in transfers for c in range(int(chunk_start[i]), int(chunk_stop[i]))]
        if any(not members(start[source[i], c]) for i, c in cells):
            ok = False
        combined = set()
        for i, c in cells:
            if ok and is_combine[i]:
                have = members(bits[destination[i], c])
                incoming = members(start[source[i], c])
                if have & incoming:
                    ok = False
                    break
                bits[destination[i], c] = as_words(have | incoming)
                last[destination[i], c] = t
                combined.add((int(destination[i]), c))
        if ok:
            for i, c in cells:
                if is_combine[i]:
                    continue
                both = (int(destination[i]), c) in combined
                lost = members(bits[destination[i], c]) - members(start[source[i], c])
                if both or lost:
                    ok = False
        if not ok:
            bits[...] = start
            last[...] = start_last
            return t
        for i, c in cells:
            if not is_combine[i]:
                bits[destination[i], c] = start[source[i], c]
                last[destination[i], c] = t
    return t_end


def warmup() -> None:
    """Compile (or load from numba's cache) every kernel of this module on tiny inputs."""
    i64 = np.int64
    one = np.zeros(1, i64)
    yes, no = np.ones(1, np.bool_), np.zeros(1, np.bool_)
    for dtype in (np.float32, np.float64, np.int64):
        work = np.zeros((2, 4), dtype)
        apply_transfers(work, work, False, one, one, one + 1, one, one + 4, yes, no, 2)
        apply_transfers(work.copy(), work, True, one, one, one + 1, one, one + 4, no, yes, 2)
        # The fused all-reduce (C-contiguous data of the working dtype: what execute() mostly gets).
        unsigned = np.dtype(f"u{np.dtype(dtype).itemsize}")
        floats = np.dtype(dtype).kind == "f"
        work_bits = work.view(unsigned)
        starts, entries = transfers_by_block(one, one + 4, 4, 2)
        scratch = np.zeros((2, 2), dtype)
        all_reduce_blocks(work, work_bits, scratch, scratch.view(unsigned), np.zeros(2, dtype), np.zeros(1, i64),
                          np.zeros((1, 4), dtype), one, np.zeros(2, i64), one, one, one + 1, one, one + 4, yes, no,
                          starts, entries, 0, 2, floats, unsigned.type(1), unsigned.type(1), i64(1), True, 1.0,
                          np.zeros(1, i64), np.zeros((2, 1), dtype))
    for forward in (False, True):
        bits = np.zeros((2, 1, 1), np.uint64)
        bits[0, 0, 0], bits[1, 0, 0] = 1, 2
        last = np.full((2, 1), -1, i64)
        if forward:
            track_steps_forward(np.array([0, 1], i64), 0, 1, one, one + 1, one, one + 1, yes, no, bits, last)
        else:
            track_steps(np.array([0, 1], i64), 0, 1, one, one + 1, one, one + 1, yes, bits, last)
