"""Where worker threads spend a batch of tasks, measured with real threads.

The projection of :mod:`scwork.sharding._profile` schedules one-thread task times
on ``T`` workers; it cannot see what real threads lose. On a 16-core host the
engine's workers were busy only about 57% of a ``compute_stats`` call where the
projection has them busy nearly all of it (benchmarks/README.md, "Measured on a
16-core host"). A worker can wait

- for its first task after the batch starts (its wake-up, then the GIL: ``ramp``);
- between two of its tasks (the dispatcher's Python and the GIL: ``gap``);
- at the end, for the other workers' last tasks (``tail``).

While :func:`traced` is active, :func:`~scwork.sharding._threads._run_tasks`
records every batch it runs with worker threads: when it started and ended, and
which worker ran each task from when to when (``time.perf_counter``: wall time,
since waiting is what is measured). :func:`summary` turns one batch into those
figures. Nothing is recorded for a batch run on the calling thread alone.

The record is process-wide (the worker threads append to it), so it is meant for a
benchmark running one engine call at a time, not for concurrent calls.

Examples
--------
>>> b = BatchTrace("slices", workers=2, start=0.0, end=10.0,
...                tasks=[(0, 0.0, 4.0), (1, 1.0, 5.0), (0, 4.5, 9.0), (1, 5.5, 10.0)])
>>> s = summary(b)
>>> s["utilisation"], s["ramp_s"], s["gap_s"], s["tail_s"]
(0.85, 0.5, 0.5, 1.0)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

__all__ = ["BatchTrace", "sink", "summary", "traced"]


@dataclass
class BatchTrace:
    """One batch of tasks run with worker threads.

    Attributes
    ----------
    name : str
        The batch's name (``count``, ``slices``, ``finish``...).
    workers : int
        Threads that ran it, the calling thread (worker 0) included.
    start, end : float
        ``time.perf_counter()`` seconds when the dispatcher began waking the workers,
        and when every worker had finished.
    tasks : list of (int, float, float)
        ``(worker, start, end)`` of every task, in the order they finished.
    """

    name: str
    workers: int
    start: float
    end: float = 0.0
    tasks: list = field(default_factory=list)


_BATCHES: list | None = None


def sink() -> list | None:
    """The list batches are recorded into while :func:`traced` is active, else None."""
    return _BATCHES


@contextlib.contextmanager
def traced():
    """Record every batch of tasks run with worker threads inside the block (a list of
    :class:`BatchTrace`, in the order the batches started)."""
    global _BATCHES
    outer = _BATCHES
    batches: list[BatchTrace] = []
    _BATCHES = batches
    try:
        yield batches
    finally:
        _BATCHES = outer


def summary(batch: BatchTrace) -> dict:
    """What the workers of ``batch`` did with its wall time.

    Returns a dict: ``span_s`` (start to end), ``busy_s`` (sum of task times),
    ``utilisation`` (busy over ``workers * span``), ``ramp_s`` (mean over the workers
    that ran a task of the wait from the batch's start to their first task), ``gap_s``
    (mean wait between two consecutive tasks of one worker), ``tail_s`` (from when the
    first worker ran out of tasks to the batch's end), ``idle_workers`` (workers that
    ran no task) and ``tasks``.
    """
    span = batch.end - batch.start
    by_worker: dict[int, list[tuple[float, float]]] = {}
    for worker, t0, t1 in batch.tasks:
        by_worker.setdefault(worker, []).append((t0, t1))
    busy = sum(t1 - t0 for _, t0, t1 in batch.tasks)
    ramps, gaps, last_ends = [], [], []
    for runs in by_worker.values():
        runs.sort()
        ramps.append(runs[0][0] - batch.start)
        gaps += [b0 - a1 for (_, a1), (b0, _) in zip(runs, runs[1:])]
        last_ends.append(runs[-1][1])
    return {
        "span_s": span,
        "busy_s": busy,
        "utilisation": busy / (batch.workers * span) if span > 0 else 1.0,
        "ramp_s": sum(ramps) / len(ramps) if ramps else 0.0,
        "gap_s": sum(gaps) / len(gaps) if gaps else 0.0,
        "tail_s": batch.end - min(last_ends) if last_ends else span,
        "idle_workers": batch.workers - len(by_worker),
        "tasks": len(batch.tasks),
    }
