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
track_steps
    The contribution bit sets per (node, chunk) that find the step where a
    schedule goes wrong; see :func:`track_steps` for the rules. The kernel
    only *detects* a wrong step: it rolls that step back and returns its index,
    and the caller replays the step with the numpy tracker, which raises the
    detailed error.
"""

from __future__ import annotations

import numpy as np

from scwork._jit import jit

__all__ = [
    "apply_transfers",
    "apply_transfers_reference",
    "track_steps",
    "track_steps_reference",
    "warmup",
]


# --------------------------------------------------------------------------------------
# Values: every transfer, block of elements by block of elements.
# --------------------------------------------------------------------------------------
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
    n = source.shape[0]
    if length == 0 or block <= 0:
        return
    num_blocks = (length + block - 1) // block
    # Transfers touching each block, in schedule order (CSR).
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
    # Snapshot space: at most one block-long slice per hazardous transfer of a step.
    most = 0
    current = 0
    for i in range(n):
        if i == 0 or step[i] != step[i - 1]:
            current = 0
        if hazard[i] and element_start[i] < element_stop[i]:
            current += 1
            most = max(most, current)
    scratch = np.empty(max(most, 1) * block, work.dtype)
    offset = np.zeros(n, np.int64)
    for k in range(num_blocks):
        lo = k * block
        hi = min(length, lo + block)
        if copy_initial:
            for node in range(num_nodes):
                work[node, lo:hi] = initial[node, lo:hi]
        p = starts[k]
        end = starts[k + 1]
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
                    scratch[used:used + b - a] = work[source[i], a:b]
                    offset[i] = used
                    used += b - a
            for r in range(p, q):
                i = entries[r]
                a = max(element_start[i], lo)
                b = min(element_stop[i], hi)
                target = work[destination[i], a:b]
                if hazard[i]:
                    payload = scratch[offset[i]:offset[i] + b - a]
                else:
                    payload = work[source[i], a:b]
                # Zero-based loops over slices: LLVM vectorises them (a loop over
                # range(a, b) keeps numba's negative-index check and stays scalar).
                if is_combine[i]:
                    for j in range(b - a):
                        target[j] += payload[j]
                else:
                    for j in range(b - a):
                        target[j] = payload[j]
            p = q


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
    bits = np.zeros((2, 1, 1), np.uint64)
    bits[0, 0, 0], bits[1, 0, 0] = 1, 2
    track_steps(np.array([0, 1], i64), 0, 1, one, one + 1, one, one + 1, yes, bits, np.full((2, 1), -1, i64))
