"""Running a schedule's steps on the buffers: the numpy loop and the numba engine.

:func:`run` is what :func:`scwork.collectives.execute` and
:func:`scwork.collectives.frames` call; :func:`run_reference` is the plain
step-by-step loop (one numpy slice operation per transfer) that the numba
engine (:mod:`scwork.collectives._kernels`) must match bitwise.
"""

from __future__ import annotations

import numpy as np

from scwork.collectives.schedule import OPS, Schedule
from scwork.errors import ConfigError

__all__ = ["NUMBA_MIN_CELLS", "all_hazards", "choose_engine", "hazards", "hazards_reference", "run", "run_reference",
           "transfer_columns"]

_COMBINE = OPS.index("combine")


def hazards(s: Schedule, sl: slice) -> np.ndarray:
    """Transfers of one step whose source range is also written in that step."""
    src, dst = s.source[sl], s.destination[sl]
    c0, c1 = s.start[sl], s.stop[sl]
    C = s.num_chunks + 1
    wkey = dst * C + c0
    order = np.argsort(wkey, kind="stable")
    wkey_s = wkey[order]
    wend = (dst * C + c1)[order]
    wend_max = np.maximum.accumulate(wend)
    pos = np.searchsorted(wkey_s, src * C + c1, side="left") - 1
    valid = pos >= 0
    posc = np.maximum(pos, 0)
    return valid & (wend_max[posc] > src * C + c0) & (wkey_s[posc] >= src * C)


def all_hazards(s: Schedule) -> np.ndarray:
    """:func:`hazards` of every step at once, in schedule order.

    The step becomes the leading digit of the sort keys (key = (step, node,
    chunk)); an earlier step's or node's writes end below the key of any range
    read here, so they never count, as in the per-step version.
    """
    if s.num_transfers == 0:
        return np.zeros(0, dtype=bool)
    C = s.num_chunks + 1
    node_span = np.int64(s.network.num_nodes) * C
    base = s.step.astype(np.int64) * node_span
    src, dst = s.source.astype(np.int64), s.destination.astype(np.int64)
    c0, c1 = s.start.astype(np.int64), s.stop.astype(np.int64)
    wkey = base + dst * C + c0
    order = np.argsort(wkey, kind="stable")
    wkey_s = wkey[order]
    wend_max = np.maximum.accumulate((base + dst * C + c1)[order])
    read0 = base + src * C
    pos = np.searchsorted(wkey_s, read0 + c1, side="left") - 1
    valid = pos >= 0
    posc = np.maximum(pos, 0)
    return valid & (wend_max[posc] > read0 + c0) & (wkey_s[posc] >= read0)


def hazards_reference(step, source, destination, start, stop) -> np.ndarray:
    """Reference of :func:`hazards`/:func:`all_hazards` on transfer columns: transfer ``i``
    reads a range that a transfer of its step writes (the obvious double loop)."""
    n = len(step)
    out = np.zeros(n, dtype=bool)
    for i in range(n):
        for j in range(n):
            if (step[j] == step[i] and destination[j] == source[i]
                    and start[j] < stop[i] and start[i] < stop[j]):
                out[i] = True
    return out


def transfer_columns(s: Schedule, bounds: np.ndarray) -> tuple:
    """The transfer arguments of the values kernels (:mod:`scwork.collectives._kernels`).

    ``(step, source, destination, element_start, element_stop, is_combine, hazard)``,
    contiguous, int64 / bool.
    """
    return (np.ascontiguousarray(s.step, np.int64), np.ascontiguousarray(s.source, np.int64),
            np.ascontiguousarray(s.destination, np.int64), np.ascontiguousarray(bounds[s.start], np.int64),
            np.ascontiguousarray(bounds[s.stop], np.int64), np.ascontiguousarray(s.op == _COMBINE),
            np.ascontiguousarray(all_hazards(s), dtype=bool))


#: Runs of at least this many cells (nodes x max(elements, chunks)) use the numba
#: kernels under ``engine="auto"``; smaller ones finish in the numpy loop sooner
#: than a first compile of the kernels would.
NUMBA_MIN_CELLS = 1 << 18
#: The values kernel takes blocks of elements such that every node's slice of a
#: block (nodes x block x itemsize) is about this size: small enough to stay in
#: the cache while the whole schedule runs on it, large enough that each
#: transfer moves long contiguous runs.
_BLOCK_BYTES = 1 << 23
_ENGINES = ("auto", "numba", "numpy")


def choose_engine(s: Schedule, num_elements: int, engine: str) -> str:
    """``"numba"`` or ``"numpy"`` for ``engine`` (``"auto"``: numba from ``NUMBA_MIN_CELLS``)."""
    if engine not in _ENGINES:
        raise ConfigError(f"engine must be 'auto', 'numba' or 'numpy', got {engine!r}")
    if engine == "auto":
        if s.network.num_nodes * max(num_elements, s.num_chunks) < NUMBA_MIN_CELLS:
            return "numpy"
        try:  # numba can fail to load (e.g. under a memory limit): the numpy loop gives the same result
            import scwork.collectives._kernels  # noqa: F401
        except (ImportError, OSError):
            return "numpy"
        return "numba"
    return engine


def run(schedule: Schedule, work: np.ndarray, tracker, bounds, record=None, *,
        initial: np.ndarray | None = None, engine: str = "numpy") -> None:
    """Run every step of ``schedule`` on ``work`` (in place) and on ``tracker``.

    Parameters
    ----------
    work : ndarray (nodes, elements)
        The buffers; they start as ``initial`` when it is given, else as they are.
    tracker : _Tracker or None
        Contribution bit sets; raises :class:`ScheduleError` at the first wrong step.
    record : callable, optional
        ``record(t)`` after step ``t``; it may read the tracker (the numba engine
        runs the tracker over all steps first, then the values).
    engine : {"numba", "numpy"}
        ``"numpy"`` is :func:`run_reference`, one slice operation per transfer;
        ``"numba"`` the :mod:`scwork.collectives._kernels` kernels. Both leave
        bitwise-identical buffers (same additions in the same order per element).
    """
    s = schedule
    if engine != "numba":
        if initial is not None:
            np.copyto(work, initial, casting="unsafe")
        run_reference(s, work, tracker, bounds, record)
        return
    from scwork.collectives._kernels import apply_transfers

    if tracker is not None and record is None:
        tracker.run(0, s.num_steps, "numba")
    elif record is not None:
        for t in range(s.num_steps):
            if tracker is not None:
                tracker.run(t, t + 1, "numba")
            record(t)
    fused = initial is not None and initial.dtype == work.dtype
    if fused:
        initial = np.ascontiguousarray(initial)
    elif initial is not None:
        np.copyto(work, initial, casting="unsafe")
    block = max(64, _BLOCK_BYTES // max(1, work.shape[0] * work.itemsize))
    apply_transfers(initial if fused else work, work, fused, *transfer_columns(s, bounds), block)


def run_reference(schedule: Schedule, work: np.ndarray, tracker, bounds, record=None):
    """The step-by-step loop: one numpy slice operation per transfer (the numpy engine)."""
    s = schedule
    e0_all, e1_all = bounds[s.start], bounds[s.stop]
    for t in range(s.num_steps):
        sl = s.step_slice(t)
        if tracker is not None:
            tracker.step(t, sl)
        src, dst = s.source[sl].tolist(), s.destination[sl].tolist()
        e0, e1, op = e0_all[sl].tolist(), e1_all[sl].tolist(), s.op[sl].tolist()
        hz = hazards(s, sl)
        snap = {i: work[src[i], e0[i]:e1[i]].copy() for i in np.flatnonzero(hz).tolist()}
        for i in range(len(src)):
            a, b = e0[i], e1[i]
            if a == b:
                continue
            payload = snap[i] if i in snap else work[src[i], a:b]
            target = work[dst[i], a:b]
            if op[i] == _COMBINE:
                np.add(target, payload, out=target)
            else:
                target[...] = payload
        if record is not None:
            record(t)
