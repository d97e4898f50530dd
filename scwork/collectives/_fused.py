"""The fused all-reduce of ``execute``: one pass over the data, one row per group.

Used by :func:`scwork.collectives.execute`.

An all-reduce leaves every node of a group with the same vector. On large
runs (the numba engine) :func:`run_fused` therefore runs the whole schedule
on one cache-sized block of elements at a time (every node's slice of it, as
the values kernel does), checks on the way that the input is finite and
cannot overflow, checks at the end of the block that every node holds
bitwise the same values as its group's first node, and keeps only that
node's values: a (groups, elements) result instead of a (nodes, elements)
one. Writing a fresh nodes x elements array alone costs several times a pass
over the data (page faults on 1 GiB), so this is what keeps a checked
execution within a few passes of ``data.sum(axis=0)``.

A block whose nodes disagree stops the kernel: the caller then runs the
general path (full buffers, the usual error reporting).
"""

from __future__ import annotations

import os
import threading

import numpy as np
from scwork._rounding import ceil_div

from scwork.collectives._input import check_values
from scwork.collectives.schedule import OPS, Schedule

__all__ = ["available_cores", "fusable", "fused_all_reduce", "input_screens", "node_rows", "run_fused"]

#: Every node's slice of a block (nodes x block x itemsize) is about this size:
#: large enough that each node's slice is a long run in memory (the copy in
#: reads one stream per node), small enough to stay in the last-level cache
#: while the whole schedule runs on it. Measured on 256 nodes x 2**20 float32
#: (one thread): 4 and 8 MiB blocks alike, 1-2 MiB ones slower (the copy in:
#: short runs per node), 16 MiB ones slower (the block leaves the cache).
_BLOCK_BYTES = 1 << 23
#: The screen of the copy in lets a block through when nodes x max |x| is at
#: most this fraction of the limit, a wide margin for the rounding of the
#: float64 sums it vouches for; above it the exact sums are computed.
_SCREEN_MARGIN = 0.5
#: Integer all-reduces: above this sum of ``|x|`` (float64) the input check
#: needs exact Python integers (as ``execute``'s own check).
_INTEGER_SCREEN = 2.0**62
#: Ranges of blocks per thread: many short ones, so that a thread that loses its
#: core for a while holds up the others by one short range at most.
_RANGES_PER_THREAD = 16
_COMBINE = OPS.index("combine")


def fusable(schedule: Schedule, arr: np.ndarray, engine: str) -> bool:
    """Whether :func:`run_fused` can run this all-reduce (numba engine, real dtypes it casts exactly)."""
    if engine != "numba" or schedule.collective != "all_reduce":
        return False
    dtype = arr.dtype
    if dtype.kind == "f":
        return dtype.itemsize in (4, 8)
    # uint64 above the int64 range would wrap in the cast: the general path refuses it.
    return dtype.kind == "i" or (dtype.kind == "u" and dtype.itemsize < 8)


def input_screens(dtype: np.dtype, num_nodes: int, check_input: bool = True) -> tuple:
    """The input-check arguments of ``all_reduce_blocks`` for ``dtype`` data on ``num_nodes`` nodes.

    ``(float_bits, magnitude_mask, float_screen, integer_screen, check_input, abs_limit)``:
    floats are screened on their bits against the largest ``|x|`` whose nodes
    x ``|x|`` stays within :data:`_SCREEN_MARGIN` of the dtype's largest value,
    integers on ``|x|`` against the same margin of 2**62.
    """
    dtype = np.dtype(dtype)
    bits = np.dtype(f"u{dtype.itemsize}")
    magnitude_mask = bits.type(np.iinfo(bits).max >> 1)  # every bit but the sign
    if dtype.kind == "f":
        limit = float(np.finfo(dtype).max)
        screen = np.asarray(limit * _SCREEN_MARGIN / num_nodes, dtype=dtype)
        if float(screen) * num_nodes > limit * _SCREEN_MARGIN:
            screen = np.nextafter(screen, dtype.type(0))
        return True, magnitude_mask, bits.type(screen.view(bits)), np.int64(0), bool(check_input), limit
    integer_screen = int(_INTEGER_SCREEN * _SCREEN_MARGIN) // num_nodes
    return False, magnitude_mask, bits.type(0), np.int64(integer_screen), bool(check_input), _INTEGER_SCREEN


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def run_fused(schedule: Schedule, arr: np.ndarray, bounds: np.ndarray, groups: np.ndarray, hazard: np.ndarray, *,
              check_input: bool = True, sample_elements: np.ndarray | None = None, num_threads: int = 1,
              side=None):
    """Run the all-reduce ``schedule`` on ``arr`` with :func:`~scwork.collectives._kernels.all_reduce_blocks`.

    Parameters
    ----------
    schedule : Schedule
        Sized for ``arr`` (``with_size``), explicit.
    arr : ndarray (nodes, elements)
        A dtype :func:`fusable` accepts.
    bounds : ndarray
        Element bounds of the chunks.
    groups : ndarray of int (nodes,)
        Group of every node (0 .. groups - 1).
    hazard : ndarray of bool (transfers,)
        :func:`~scwork.collectives._simulate.all_hazards` of the schedule.
    check_input : bool
        Check that every element's sum of ``|x|`` over the nodes is finite and
        within the working dtype (integers: within 2**62, beyond which only the
        exact check of ``execute`` can tell).
    sample_elements : ndarray of int, optional
        Sorted elements whose input columns to return (read while the kernel
        has them in the cache, instead of a gather from memory afterwards).
    num_threads : int
        Threads running ranges of blocks (the kernel releases the GIL); each
        takes the next range until none is left, so a busy core slows the run
        down by no more than its share.
    side : callable, optional
        Work that needs only the schedule (the contribution tracker), run by
        the second thread before it takes blocks (by the calling thread after
        the blocks when there is one thread).

    Returns
    -------
    status : int
        ``FUSED_DONE``; else ``FUSED_INPUT_FLAGGED`` if some block flagged its
        input, else ``FUSED_INCONSISTENT`` (of :mod:`scwork.collectives._kernels`).
    rows : ndarray (groups, elements)
        Every group's result (working dtype: float32/float64 kept, integers int64)
        when done; partly filled otherwise.
    sampled : ndarray (nodes, samples)
        ``arr[:, sample_elements]`` when done.
    side_outcome : (value, exception)
        What ``side()`` returned, or the exception it raised (None, None without ``side``).
    """
    from scwork.collectives._kernels import (
        FUSED_DONE,
        FUSED_INPUT_FLAGGED,
        all_reduce_blocks,
        most_hazards_per_step,
        transfers_by_block,
    )

    s = schedule
    num_nodes, length = arr.shape
    floats = arr.dtype.kind == "f"
    work_dtype = arr.dtype if floats else np.dtype(np.int64)
    _, representative = np.unique(groups, return_index=True)
    block = max(64, _BLOCK_BYTES // max(1, num_nodes * work_dtype.itemsize))
    block = min(block, max(length, 1))
    num_blocks = ceil_div(length, block)
    rows = np.empty((len(representative), length), work_dtype)
    sample_elements = np.ascontiguousarray(np.zeros(0) if sample_elements is None else sample_elements, np.int64)
    sampled = np.empty((num_nodes, len(sample_elements)), arr.dtype)
    bits = np.dtype(f"u{arr.dtype.itemsize}")
    element_start = np.ascontiguousarray(bounds[s.start], np.int64)
    element_stop = np.ascontiguousarray(bounds[s.stop], np.int64)
    starts, entries = transfers_by_block(element_start, element_stop, length, block)
    hazard = np.ascontiguousarray(hazard, bool)
    snapshot_size = max(1, most_hazards_per_step(np.ascontiguousarray(s.step, np.int64), hazard, element_start,
                                                 element_stop)) * block
    before = (arr, arr.view(bits))
    after = (rows, representative.astype(np.int64), np.ascontiguousarray(groups, np.int64),
             np.ascontiguousarray(s.step, np.int64), np.ascontiguousarray(s.source, np.int64),
             np.ascontiguousarray(s.destination, np.int64), element_start, element_stop,
             np.ascontiguousarray(s.op == _COMBINE), hazard, starts, entries)
    checks = (*input_screens(arr.dtype, num_nodes, check_input), sample_elements, sampled)

    def scratch() -> tuple:
        block_values = np.empty((num_nodes, block), work_dtype)
        return (block_values, block_values.view(np.dtype(f"u{work_dtype.itemsize}")),
                np.empty(snapshot_size, work_dtype), np.zeros(len(hazard), np.int64))

    def run_range(own: tuple, first: int, end: int) -> int:
        status, _ = all_reduce_blocks(*before, *own, *after, first, end, *checks)
        return int(status)

    statuses, side_outcome = _run_block_ranges(run_range, scratch, num_blocks, num_threads, side)
    problems = [status for status in statuses if status != FUSED_DONE]
    status = (FUSED_INPUT_FLAGGED if FUSED_INPUT_FLAGGED in problems else problems[0]) if problems else FUSED_DONE
    return status, rows, sampled, side_outcome


def _run_block_ranges(run_range, scratch, num_blocks: int, num_threads: int, side):
    """Run ``run_range(own scratch, first, end)`` over ranges of blocks on up to ``num_threads`` threads.

    Each thread allocates its scratch with ``scratch()`` and takes the next range
    until none is left or a range does not end ``FUSED_DONE``. ``side()`` runs on
    the second thread before it takes blocks (on the calling thread after the
    blocks when there is one). Returns ``(statuses, (side value, side exception))``
    and raises the first error a thread raised.
    """
    from scwork.collectives._kernels import FUSED_DONE

    # Ranges of blocks, several per thread so that the threads end together.
    num_threads = max(1, min(num_threads, num_blocks))
    per_range = max(1, num_blocks // (num_threads * _RANGES_PER_THREAD)) if num_threads > 1 else max(1, num_blocks)
    ranges = iter([(k, min(num_blocks, k + per_range)) for k in range(0, num_blocks, per_range)])
    statuses, errors = [], []
    side_outcome = [None, None]
    stop = threading.Event()

    def run_side() -> None:
        try:
            side_outcome[0] = side()
        except Exception as error:  # noqa: BLE001 - handed to the caller, who raises it in its turn
            side_outcome[1] = error

    def work(worker: int) -> None:
        if side is not None and worker == 1:
            run_side()
        try:
            own = scratch()
            for first, end in ranges:               # next() of a shared iterator is atomic under the GIL
                status = run_range(own, first, end)
                statuses.append(status)
                if status != FUSED_DONE or stop.is_set():
                    stop.set()                      # the caller runs the general path: no point going on
                    return
        except BaseException as error:  # noqa: BLE001 - raised again by the calling thread
            errors.append(error)
            stop.set()

    threads = [threading.Thread(target=work, args=(w,), name=f"scwork-all-reduce-{w}", daemon=True)
               for w in range(1, num_threads)]
    for thread in threads:
        thread.start()
    try:
        work(0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    if side is not None and num_threads == 1:
        run_side()
    return statuses, tuple(side_outcome)

def fused_all_reduce(s: Schedule, arr: np.ndarray, groups: np.ndarray, hazard: np.ndarray,
                     sample_elements: np.ndarray | None = None, num_threads: int = 1, side=None):
    """:func:`run_fused` with the input check's error: ``(rows, sampled, side_outcome)``, rows None if nodes disagree.

    Input the kernel flags goes through :func:`~scwork.collectives._input.check_values`,
    which raises the usual :class:`~scwork.errors.InputError`; when it does
    not (integer sums between the float screen and the exact int64 limit) the
    kernel runs again without the check.
    """
    from scwork.collectives._kernels import FUSED_INCONSISTENT, FUSED_INPUT_FLAGGED

    bounds = s.element_bounds(arr.shape[1])
    status, rows, sampled, side_outcome = run_fused(s, arr, bounds, groups, hazard, sample_elements=sample_elements,
                                                    num_threads=num_threads, side=side)
    if status == FUSED_INPUT_FLAGGED:
        check_values(s, arr)
        status, rows, sampled, _ = run_fused(s, arr, bounds, groups, hazard, check_input=False,
                                             sample_elements=sample_elements, num_threads=num_threads)
    return (None if status == FUSED_INCONSISTENT else rows), sampled, side_outcome


def node_rows(rows: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Every node's vector, ``rows[group[node]]``, as a read-only (nodes, elements) view of ``rows``.

    One group: ``numpy.broadcast_to`` of its row (every node shares the
    memory; nothing is copied). Several: a new read-only array (callers build
    it only when it is asked for).
    """
    if rows.shape[0] == 1:
        return np.broadcast_to(rows[0], (len(group), rows.shape[1]))
    full = rows[group]
    full.flags.writeable = False
    return full
