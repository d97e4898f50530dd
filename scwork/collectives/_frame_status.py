"""Per-frame contribution counts and buffer states for :func:`scwork.collectives.frames`.

A frame is the state of every (node, chunk) before a step. Recomputing the whole
(nodes x chunks x words) state after every step costs steps x nodes x chunks work;
a step only changes the chunks its transfers deliver, so each frame starts as a copy
of the previous one and only those cells are recomputed (:class:`FrameRecorder`).
:func:`frame_status_reference` is the obvious whole-state computation, kept for the
tests that compare the two.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FrameRecorder", "frame_status_reference"]


def frame_status_reference(bits, target, target_mask, own_bit, all_reduce: bool):
    """Counts and states of every (node, chunk) from the contribution bit sets.

    Parameters
    ----------
    bits : uint64 array (nodes, chunks, words)
        Contribution bit sets (bit ``n``: node ``n``'s data is summed in).
    target : uint64 array (nodes, chunks, words)
        What the collective must leave in each cell.
    target_mask : bool array (nodes, chunks)
        Cells where the collective must leave something.
    own_bit : uint64 array (nodes, chunks, words) or None
        Each node's own contribution (None for an all-gather: any single
        contribution counts as "own data").
    all_reduce : bool
        Every cell must end complete.

    Returns
    -------
    counts : int32 array (nodes, chunks)
        Contributions summed in each cell.
    status : int8 array (nodes, chunks)
        0 empty, 1 own data only, 2 partial sum, 3 complete.
    """
    counts = np.bitwise_count(bits).sum(axis=2).astype(np.int32)
    complete = (bits == target).all(axis=2) & (counts > 0)
    status = np.where(counts == 0, 0, 2).astype(np.int8)
    if own_bit is not None:
        status[(counts == 1) & (bits == own_bit).all(axis=2)] = 1
    else:
        status[counts == 1] = 1
    status[complete & (target_mask | all_reduce)] = 3
    return counts, status


class FrameRecorder:
    """Fills ``counts[f]`` and ``status[f]`` frame by frame, recomputing changed cells only.

    Parameters
    ----------
    schedule : Schedule
        Its transfers say which (destination, chunk) cells each step changes.
    counts, status : arrays (frames, nodes, chunks)
        Filled in place.
    target, target_mask, own_bit, all_reduce
        As in :func:`frame_status_reference`.
    """

    def __init__(self, schedule, counts, status, target, target_mask, own_bit, all_reduce: bool):
        self.schedule = schedule
        self.counts, self.status = counts, status
        self.target, self.target_mask, self.own_bit = target, target_mask, own_bit
        self.all_reduce = bool(all_reduce)

    def first(self, bits) -> None:
        """Frame 0: the whole state."""
        self.counts[0], self.status[0] = frame_status_reference(bits, self.target, self.target_mask,
                                                                self.own_bit, self.all_reduce)

    def after_step(self, t: int, bits) -> None:
        """Frame ``t + 1``: frame ``t`` with the cells step ``t`` delivered to recomputed."""
        s = self.schedule
        f = t + 1
        self.counts[f] = self.counts[t]
        self.status[f] = self.status[t]
        sl = s.step_slice(t)
        start, stop, dst = s.start[sl], s.stop[sl], s.destination[sl]
        lengths = stop - start
        if not lengths.sum():
            return
        transfer = np.repeat(np.arange(len(dst)), lengths)
        offsets = np.cumsum(lengths) - lengths
        chunk = start[transfer] + (np.arange(int(lengths.sum())) - offsets[transfer])
        node = dst[transfer]
        counts, status = frame_status_reference(
            bits[node, chunk][:, None], self.target[node, chunk][:, None], self.target_mask[node, chunk][:, None],
            None if self.own_bit is None else self.own_bit[node, chunk][:, None], self.all_reduce)
        self.counts[f, node, chunk] = counts[:, 0]
        self.status[f, node, chunk] = status[:, 0]
