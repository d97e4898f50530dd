"""Where an engine call spends its time (serial, tasks) and what that projects at T threads.

The engine runs its work as batches of independent tasks (:func:`_run_tasks`)
separated by serial code (planning, checks, result building). On a machine with
few cores the speedup at many threads cannot be measured, but it can be bounded
from one thread: run the call once with the task lists cut as they would be for
``T`` threads, but execute every task on the calling thread, timing each task from
the dispatcher (never inside a numba kernel) and the call as a whole. Then

    time(T) >= serial + sum over task batches of LPT makespan(batch's tasks, T, overlap)

where ``serial`` is the call's CPU time minus the time inside tasks and the
overlapped serial work, and the makespan is that of longest-processing-time-first
list scheduling on ``T`` workers (what the dispatcher does: it hands out tasks
largest first). A batch may come with serial work that does not depend on its
results (``overlap`` of :func:`~scwork.sharding._threads._run_tasks`): the calling
thread does it while the other workers start on the tasks and joins them after,
so it is scheduled as worker 0 being busy for that long when the batch starts
(with one worker, or when it is longer than the batch, it adds to the makespan
in full). The bound
ignores what more threads cost (memory bandwidth shared by the cores, thread
start-up), so it is a projection, not a measurement.

A second bound comes from the GIL. The kernels release it, but a task's own Python
(taking the task, calling the kernel, recording its result) holds it, and so does the
calling thread's overlapped work: within a batch, those pieces run one at a time
whatever ``T`` is. So a batch also takes at least its overlap plus the sum of its
tasks' GIL-held seconds, and :meth:`CallProfile.gil_path_s` takes the larger of the two
per batch. While profiling the engine calls its kernels through
:func:`timed_kernel` (the dispatcher's Python in numba, which unboxes the arguments
with the GIL held, counts as inside the kernel: the GIL-held time is a lower bound).

Times are the calling thread's CPU time (``CLOCK_THREAD_CPUTIME_ID``: user and
system, page faults included), not wall time: on a shared machine a thread that
waits for a core would otherwise charge the wait to whatever task it was running.
(``time.clock_gettime`` is read directly: ``time.thread_time`` costs about 10 us a
call on some kernels, which would show up as serial time.)

Profiling is off unless :func:`profiled` is active in the calling thread: then the
dispatcher checks one attribute per batch of tasks, nothing per task.

Examples
--------
>>> from scwork.sharding._profile import lpt_makespan
>>> lpt_makespan([3.0, 3.0, 2.0, 2.0, 2.0], 2)       # {3, 2, 2} and {3, 2}: LPT is not optimal
7.0
>>> lpt_makespan([1.0, 1.0, 1.0], 8)
1.0
>>> lpt_makespan([1.0, 1.0, 1.0], 2, first_busy=0.5)      # worker 0 joins at 0.5
2.0
>>> lpt_makespan([1.0, 1.0, 1.0], 4, first_busy=0.5)      # 3 workers for 3 tasks: worker 0 takes one late
1.5
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import threading
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["CallProfile", "dispatch_order", "lpt_makespan", "own_work_mark", "profiled", "record_own_work",
           "record_task", "recording", "thread_cpu_s", "timed_kernel"]


def thread_cpu_s() -> float:
    """CPU seconds of the calling thread."""
    return time.clock_gettime(_THREAD_CLOCK)


_THREAD_CLOCK = getattr(time, "CLOCK_THREAD_CPUTIME_ID", None)
if _THREAD_CLOCK is None:                      # no such clock (not POSIX): the portable one
    thread_cpu_s = time.thread_time  # noqa: F811


def lpt_makespan(durations, num_workers: int, first_busy: float = 0.0) -> float:
    """Makespan of longest-processing-time-first list scheduling of ``durations`` on ``num_workers``.

    Tasks are taken largest first, each by the worker that is free earliest.
    ``first_busy``: seconds worker 0 is busy before it takes its first task (the
    calling thread's overlapped serial work).
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if first_busy < 0:
        raise ValueError(f"first_busy must be >= 0, got {first_busy}")
    # the dispatcher starts min(T, tasks) workers; the calling thread is one of them
    loads = [0.0] * min(num_workers, max(1, len(durations)))
    loads[0] = float(first_busy)
    heapq.heapify(loads)
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(loads, loads[0] + float(d))
    return max(loads)


@dataclass
class CallProfile:
    """Timings of one profiled engine call.

    ``plan_threads`` is the thread count the task lists were cut for; ``batches``
    holds, per batch of tasks (in call order), its name and each task's seconds;
    ``total_s`` is the call's CPU time (every task ran on the calling thread).
    """

    plan_threads: int
    batches: list[tuple[str, list[float]]] = field(default_factory=list)
    total_s: float = 0.0
    profiler_s: float = 0.0
    """Seconds the profiling itself spent between tasks (clock reads, bookkeeping):
    not part of the call's serial time."""
    sizes: list[list[float]] = field(default_factory=list)
    """Per batch, each task's size as the dispatcher saw it (raw ids for the engine):
    the cut itself, which a loaded machine's timing noise does not blur."""
    overlaps: list[float] = field(default_factory=list)
    """Per batch, seconds of serial work the calling thread did while that batch's
    tasks ran (0 for none): the ``overlap`` of :func:`~scwork.sharding._threads._run_tasks`."""
    kernel_s: float = 0.0
    """Seconds inside kernels called through :func:`timed_kernel` so far (a running sum)."""
    held: list[list[float]] = field(default_factory=list)
    """Per batch, each task's seconds outside the kernels it called (:func:`timed_kernel`):
    its Python, which holds the GIL. Empty for a batch recorded otherwise (:func:`record_task`)
    or whose tasks called no timed kernel (unknown: not counted)."""
    queued: list[int] = field(default_factory=list)
    """Per batch, 0, or the number ``q`` of jobs whose tasks the real run hands out inside
    one compiled call per worker and job (``queued`` of
    :func:`~scwork.sharding._threads._run_tasks`): then the GIL is held at most ``T + q -
    1`` times at ``T`` workers, not once per task (:meth:`CallProfile.gil_path_s`)."""
    recorded_s: float = 0.0
    """Seconds recorded as tasks by the caller itself (:func:`record_task`), wherever
    they ran: an overlap step or a task that contains such work has it taken out of
    its own time, so it is counted once."""

    @property
    def task_s(self) -> float:
        """Seconds inside tasks (all batches)."""
        return float(sum(sum(ts) for _, ts in self.batches))

    @property
    def overlap_s(self) -> float:
        """Seconds of serial work done while tasks ran (all batches)."""
        return float(sum(self.overlaps))

    @property
    def serial_s(self) -> float:
        """Seconds outside every task and every overlap (the profiler's own time left out):
        what no thread count shortens."""
        return max(0.0, self.total_s - self.task_s - self.overlap_s - self.profiler_s)

    def _overlap_of(self, b: int) -> float:
        return self.overlaps[b] if b < len(self.overlaps) else 0.0

    def critical_path_s(self, num_threads: int) -> float:
        """Serial seconds plus every batch's LPT makespan on ``num_threads`` workers, worker 0
        starting after the batch's overlapped serial work."""
        return self.serial_s + float(sum(lpt_makespan(ts, num_threads, self._overlap_of(b))
                                         for b, (_, ts) in enumerate(self.batches) if ts or self._overlap_of(b)))

    def _held_of(self, b: int, num_threads: int | None = None) -> float:
        """Batch ``b``'s GIL-held seconds: its tasks' sum; for a batch queued over ``q`` jobs at
        ``num_threads`` workers, the sum of its ``num_threads + q - 1`` largest (at most one
        Python call per worker and one more per job, each counted as long as the longest
        tasks' Python)."""
        held = self.held[b] if b < len(self.held) else []
        queued = self.queued[b] if b < len(self.queued) else 0
        if num_threads is not None and queued:
            held = sorted(held, reverse=True)[:num_threads + int(queued) - 1]
        return float(sum(held))

    @property
    def held_s(self) -> float:
        """Seconds the tasks held the GIL (all batches): outside their kernels."""
        return float(sum(self._held_of(b) for b in range(len(self.batches))))

    def held_at(self, num_threads: int) -> float:
        """Seconds the GIL is held by tasks at ``num_threads`` workers (all batches): :attr:`held_s`,
        with a queued batch's Python counted once per worker."""
        return float(sum(self._held_of(b, num_threads) for b in range(len(self.batches))))

    def gil_path_s(self, num_threads: int) -> float:
        """:meth:`critical_path_s` with the GIL: each batch takes at least its overlapped serial
        work plus its tasks' GIL-held seconds (those run one at a time, whatever the threads;
        a queued batch's once per worker)."""
        total = self.serial_s
        for b, (_, ts) in enumerate(self.batches):
            if ts or self._overlap_of(b):
                makespan = lpt_makespan(ts, num_threads, self._overlap_of(b))
                total += max(makespan, self._overlap_of(b) + self._held_of(b, num_threads))
        return float(total)

    def largest_task_share(self) -> float:
        """The longest task's share of all task seconds (0 without tasks)."""
        longest = max((max(ts) for _, ts in self.batches if ts), default=0.0)
        return longest / self.task_s if self.task_s > 0 else 0.0

    def largest_size_share(self) -> float:
        """The largest task's share of its batch's total size (max over batches; 0 without sizes)."""
        shares = [max(sz) / sum(sz) for sz in self.sizes if sz and sum(sz) > 0]
        return max(shares, default=0.0)

    @classmethod
    def best_of(cls, profiles: list["CallProfile"]) -> "CallProfile":
        """Task by task, the least time over repeated profiles of the same call.

        A shared machine slows some tasks at random (another process evicts the
        cache); the minimum over repeats is the task's own cost. Serial and
        profiler time are minimised the same way. The profiles must have the
        same batches of the same tasks (the same call, repeated).
        """
        first = profiles[0]
        shapes = [[(name, len(ts)) for name, ts in p.batches] for p in profiles]
        if any(shape != shapes[0] for shape in shapes):
            raise ValueError("profiles of different calls (batches or task counts differ)")
        batches = [(name, [min(p.batches[b][1][i] for p in profiles) for i in range(len(ts))])
                   for b, (name, ts) in enumerate(first.batches)]
        best = cls(first.plan_threads, batches)
        best.sizes = [list(sz) for sz in first.sizes]
        best.overlaps = [min(p._overlap_of(b) for p in profiles) for b in range(len(first.batches))]
        best.held = [[min(p.held[b][i] for p in profiles) for i in range(len(ts))]
                     if all(b < len(p.held) and len(p.held[b]) == len(ts) for p in profiles) else []
                     for b, (_, ts) in enumerate(first.batches)]
        best.queued = list(first.queued)
        best.total_s = best.task_s + best.overlap_s + min(p.serial_s for p in profiles)
        return best

    def summary(self) -> dict:
        """Plain numbers: totals, serial share, tasks per batch, largest task share."""
        return {
            "plan_threads": self.plan_threads,
            "total_s": self.total_s,
            "serial_s": self.serial_s,
            "serial_share": self.serial_s / self.total_s if self.total_s > 0 else 0.0,
            "overlap_s": self.overlap_s,
            "tasks": {name: len(ts) for name, ts in self.batches},
            "held_s": self.held_s,
            "largest_task_share": self.largest_task_share(),
            "largest_size_share": self.largest_size_share(),
            "critical_path_s": self.critical_path_s(self.plan_threads),
        }


_STATE = threading.local()


def active() -> CallProfile | None:
    """The profile being recorded in this thread, if any."""
    return getattr(_STATE, "profile", None)


@contextlib.contextmanager
def profiled(plan_threads: int):
    """Record the engine calls made inside the block as :class:`CallProfile` objects (a list).

    Inside, ``num_threads`` of the engine is replaced by ``plan_threads`` for cutting
    the work, and every task runs on the calling thread, timed. Each engine call
    appends one profile to the yielded list.
    """
    if isinstance(plan_threads, bool) or not isinstance(plan_threads, int) or plan_threads < 1:
        raise ValueError(f"plan_threads must be a positive int, got {plan_threads!r}")
    outer = getattr(_STATE, "profile", None)
    profiles: list[CallProfile] = []
    _STATE.sink = profiles
    _STATE.plan_threads = plan_threads
    try:
        yield profiles
    finally:
        _STATE.sink = None
        _STATE.plan_threads = None
        _STATE.profile = outer


def plan_threads() -> int | None:
    """The thread count to cut work for while :func:`profiled` is active, else None."""
    return getattr(_STATE, "plan_threads", None)


def recording() -> bool:
    """True inside :func:`profiled` with no call recorded yet: a :func:`call` would start one.

    A plain function (one attribute read each), so that an engine call outside a profile,
    or nested in a recorded one, skips the context manager of :func:`call` altogether.
    """
    return getattr(_STATE, "sink", None) is not None and getattr(_STATE, "profile", None) is None


@contextlib.contextmanager
def call():
    """Wrap one engine call: a new :class:`CallProfile` while profiling, else nothing.

    Nested engine calls (a path built on the engine calling it) land in the
    outermost call's profile.
    """
    sink = getattr(_STATE, "sink", None)
    if sink is None or getattr(_STATE, "profile", None) is not None:
        yield
        return
    prof = CallProfile(_STATE.plan_threads)
    _STATE.profile = prof
    start = thread_cpu_s()
    try:
        yield
    finally:
        prof.total_s = thread_cpu_s() - start
        _STATE.profile = None
        sink.append(prof)


def one_call(fn):
    """Decorator: each call of ``fn`` is one :func:`call` (the engine calls it makes land in it)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with call():
            return fn(*args, **kwargs)
    return wrapper


def record_task(prof: CallProfile, batch: str, seconds: float, size: float) -> None:
    """Add ``seconds`` of work done outside the engine's dispatch as one task of ``batch``.

    For work a caller knows runs in parallel with its like although this thread did it
    in line (a dataset chunk's read, see ``_dataset_chunks._record_read``). If it ran
    inside an overlap step or a task, :func:`run_serially` takes it out of that step's
    or task's time, so it is counted once.
    """
    names = [n for n, _ in prof.batches]
    if batch in names:
        b = names.index(batch)
        prof.batches[b][1].append(seconds)
        prof.sizes[b].append(float(size))
    else:
        prof.batches.append((batch, [seconds]))
        prof.sizes.append([float(size)])
    # (what a caller records is not split into GIL-held and kernel time: none counted held)
    prof.held.extend([] for _ in range(len(prof.batches) - len(prof.held)))
    prof.recorded_s += seconds


def timed_kernel(kernel):
    """``kernel`` (a compiled function) with its calls' seconds added to the active profile's
    :attr:`CallProfile.kernel_s`: what the engine calls instead while :func:`profiled` is
    active, so that each task's time splits into kernel time and GIL-held time."""
    @functools.wraps(kernel)
    def call(*args):
        start = thread_cpu_s()
        try:
            return kernel(*args)
        finally:
            prof = getattr(_STATE, "profile", None)
            if prof is not None:
                prof.kernel_s += thread_cpu_s() - start
    return call


def dispatch_order(sizes) -> list[int]:
    """Item indices largest size first, ties in item order: the order the dispatcher hands
    out tasks in (``sorted(range(n), key=lambda i: -sizes[i])``).

    One stable argsort of the sizes beyond a few dozen items: sorting hundreds of task
    indices with a Python key function is serial work of the dispatcher (tens of
    microseconds per batch, at 64 threads some 400 tasks a batch).
    """
    n = len(sizes)
    if n <= 32:
        return sorted(range(n), key=lambda i: -sizes[i])
    return np.argsort(-np.asarray(sizes, np.float64), kind="stable").tolist()


def _counted_s(prof: CallProfile) -> float:
    """Seconds of the call so far held by tasks, overlaps and the profiler itself."""
    return prof.task_s + prof.overlap_s + prof.profiler_s


def own_work_mark(prof: CallProfile) -> tuple[float, float]:
    """Where a piece of work starts, for :func:`record_own_work`: ``(CPU seconds, counted seconds)``."""
    entry = thread_cpu_s()
    counted = _counted_s(prof)
    start = thread_cpu_s()
    prof.profiler_s += start - entry          # (summing the batches is the profiler's time)
    return start, counted


def record_own_work(prof: CallProfile, batch: str, mark: tuple[float, float], size: float = 0.0) -> float:
    """Record what this thread did since ``mark`` (:func:`own_work_mark`) as one task of ``batch``,
    less what tasks, overlaps and the profiler recorded meanwhile (the engine calls and
    reads inside it are counted once, as theirs). For work that runs inside a task of its
    own beside its like (a dataset chunk task's Python around its engine calls). Returns
    the seconds recorded.
    """
    end = thread_cpu_s()
    counted = _counted_s(prof)
    seconds = max(0.0, (end - mark[0]) - (counted - mark[1]))
    record_task(prof, batch, seconds, size)
    prof.profiler_s += thread_cpu_s() - end
    return seconds


def run_serially(prof: CallProfile, name: str, fn, items, sizes, overlap=None, order=None,
                 queued: int = 0) -> list:
    """Run ``fn(item, 0)`` for every item on this thread, in dispatch order, timing each.

    ``overlap`` (serial work the dispatcher does while the batch runs) runs first,
    timed as the batch's overlapped serial time; if it raises, no task runs.

    Items are taken in the dispatcher's order (largest ``sizes`` first, :func:`dispatch_order`;
    computing it is the dispatcher's serial work before its first task, so it is
    counted as the call's serial time, not the profiler's). Each runs as
    worker 0: a worker's scratch stays in its core's cache from one task to the next
    in a threaded run, and running every task with one scratch keeps that so here
    (cycling through ``num_workers`` scratch areas on one core would charge cache
    misses a threaded run does not have). Results come back in item order; the
    first exception in item order is raised after all ran. ``queued``: the real run hands
    these tasks out in one compiled call per worker and job (:attr:`CallProfile.queued`).
    """
    overlap_s = 0.0
    if overlap is not None:
        start, recorded = thread_cpu_s(), prof.recorded_s
        try:
            overlap()
        finally:
            # work inside the overlap that was recorded as a task (record_task) is that task's
            overlap_s = thread_cpu_s() - start - (prof.recorded_s - recorded)
            if not items:                     # nothing else records this batch
                prof.held.extend([] for _ in range(len(prof.batches) + 1 - len(prof.held)))
                prof.batches.append((name, []))
                prof.sizes.append([])
                prof.overlaps.append(overlap_s)
    # the dispatcher's own serial work before its first task: the order (serial time, as there)
    entry = thread_cpu_s()
    if order is None:                 # (given: made earlier, e.g. while the batch before ran)
        order = dispatch_order(sizes)
    entry = thread_cpu_s()
    results: list = [None] * len(items)
    times = [0.0] * len(items)
    held = [0.0] * len(items)
    errors: dict[int, Exception] = {}
    for i in order:
        start, recorded, in_kernels = thread_cpu_s(), prof.recorded_s, prof.kernel_s
        try:
            results[i] = fn(items[i], 0)
        except Exception as err:  # noqa: BLE001 - re-raised below, as _run_tasks does
            errors[i] = err
        times[i] = thread_cpu_s() - start - (prof.recorded_s - recorded)
        held[i] = max(0.0, times[i] - (prof.kernel_s - in_kernels))
    if overlap is None or items:
        prof.batches.append((name, times))
        prof.held.extend([] for _ in range(len(prof.batches) - 1 - len(prof.held)))
        # a batch none of whose tasks called a timed kernel (a path's own kernels, or plain
        # Python) is not split: unknown, not counted as held
        prof.held.append(held if any(h < t for h, t in zip(held, times)) else [])
        prof.sizes.append([float(x) for x in sizes])
        # batches before this one without an overlap (e.g. profiles built by hand)
        prof.overlaps.extend([0.0] * (len(prof.batches) - 1 - len(prof.overlaps)))
        prof.overlaps.append(overlap_s)
        prof.queued.extend([0] * (len(prof.batches) - 1 - len(prof.queued)))
        prof.queued.append(int(queued))
    # everything here outside the tasks is the profiler's (the threaded dispatcher
    # does none of it), so it is not charged to the call's serial time
    prof.profiler_s += thread_cpu_s() - entry - sum(times)
    if errors:
        raise errors[min(errors)]
    return results
