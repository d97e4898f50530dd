"""How the sharding engine spreads independent slices over worker threads.

The numba kernels release the GIL, so plain Python threads run them in parallel.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

from scwork.errors import ConfigError
from scwork.sharding import _profile, _trace

__all__ = ["available_cores", "let_workers_run", "resolve_num_threads"]


# With several threads the work is cut into tasks of at most
# total ids / (threads * _TASKS_PER_THREAD) ids, so that the threads finish together:
# the longest task then holds about 1 / (8 T) of the work, within the design bound
# of 1 / (4 T) unless one table of one slice alone is larger than that.
_TASKS_PER_THREAD = 8


def _run_tasks(fn, items, sizes, num_threads: int, name: str = "tasks", overlap=None, order=None,
               queued: int = 0) -> list:
    """``[fn(item, worker) for item in items]``, on ``num_threads`` threads.

    The calling thread is worker 0 and ``num_threads - 1`` parked threads of a
    :class:`_WorkerPool` are woken for the call; each worker takes the next item
    (largest first, by ``sizes``, so that the workers end together) until none is
    left. ``worker`` (``< num_threads``) names the thread running the call, for
    per-thread scratch: within a call each index is used by one thread only. Results
    come back in item order; the first exception (in item order) is raised once
    every call has finished. No executor: one ``submit`` per task, each waking a
    thread that then waits for the GIL, costs more than a small task. No fresh
    threads either: starting and joining 15 of them costs about 1 ms, more than the
    serial time of a whole ``compute_stats`` call on the benchmark's input.

    ``overlap``: a callable (no arguments), or a list of them run in order, that
    does serial work that does not depend on the tasks' results (result buffers,
    the next batch's task list). The calling thread runs it once the other workers
    have started, then joins them as worker 0, so it costs no time on the critical
    path as long as it is shorter than the batch. It must not read what the tasks
    write: with one thread (and while profiling) it runs before the tasks, so that
    a test with one thread sees any such dependency as a wrong result. If it
    raises, the workers stop after their current task and its exception is raised
    once they have. Between two callables of a list the calling thread lets go of
    the GIL (``time.sleep(0)``): a worker whose task ends meanwhile needs it to take
    the next one, and CPython would otherwise hand it over only after its 5 ms
    switch interval, so pure-Python overlapped work would stall the workers.
    Before its first step the calling thread waits (without the GIL) until every
    woken worker has taken its first task (:class:`_StartGate`, at most
    ``_START_GATE_S``): a worker needs the GIL to start its task, and overlapped Python
    run first kept them waiting for it (on the 16-core host, workers waited 0.4-1.2 ms on
    average for their first task in the count and slices batches, whose overlapped steps
    take 0.6-1.5 ms of one core on the 2-core development machine).

    ``order``: the dispatch order if the caller has it (:func:`~scwork.sharding._profile.dispatch_order`
    of ``sizes``, a list of item indices, e.g. made while the batch before ran); else it is
    computed here, on the calling thread before any task starts.

    While :func:`scwork.sharding._profile.profiled` is active the items run on the
    calling thread, each timed, and are recorded as a batch called ``name``
    (``overlap``, timed apart, as that batch's overlapped serial time). ``queued``
    is for that record alone: ``q > 0`` where the real run hands these tasks (of ``q``
    jobs) out inside one compiled call per worker and job (``engine._run_swept``), so
    that their GIL-held Python is paid at most ``num_threads + q - 1`` times, not once
    per task.
    """
    steps = [] if overlap is None else list(overlap) if isinstance(overlap, (list, tuple)) else [overlap]
    prof = _profile.active()
    if prof is not None:
        return _profile.run_serially(prof, name, fn, items, sizes, _in_order(steps) if steps else None, order,
                                     queued)
    if num_threads == 1 or len(items) <= 1:
        for step in steps:
            step()
        return [fn(item, 0) for item in items]
    order = iter(_profile.dispatch_order(sizes) if order is None else order)
    results: list = [None] * len(items)
    errors: dict[int, Exception] = {}
    fatal: list[BaseException] = []        # a BaseException that ended a pooled worker's share
    stop = threading.Event()
    helpers = min(num_threads, len(items)) - 1
    trace = _trace.sink()                  # None unless a benchmark traces the workers
    if trace is not None:
        record = _trace.BatchTrace(name, helpers + 1, time.perf_counter())
        trace.append(record)
        spans = record.tasks

    gate = _StartGate(helpers) if steps and _START_GATE_S > 0 else None

    def work(worker: int) -> None:
        waiting = gate is not None and worker > 0      # a woken worker the calling thread waits for
        for i in order:                    # next() of a shared iterator is atomic under the GIL
            if waiting:
                gate.started()
                waiting = False
            if stop.is_set():
                return
            try:
                if trace is None:
                    results[i] = fn(items[i], worker)
                else:
                    began = time.perf_counter()
                    results[i] = fn(items[i], worker)
                    spans.append((worker, began, time.perf_counter()))
            except Exception as err:  # noqa: BLE001 - re-raised below, the first in item order
                errors[i] = err
        if waiting:                        # no task was left for this worker
            gate.started()

    def pooled_work(worker: int) -> None:
        try:
            work(worker)
        except BaseException as err:  # noqa: BLE001 - e.g. SystemExit in a task: raised by the caller
            stop.set()
            fatal.append(err)

    pool = _take_pool()
    _count_helpers(helpers)
    try:
        try:
            pool.start(pooled_work, helpers)
            if gate is not None:
                gate.wait(_START_GATE_S)
            for step in steps:
                let_workers_run()          # the GIL to a worker between its tasks, if one waits
                step()
        except BaseException:              # the workers stop at their next task; then raise
            stop.set()
            raise
        work(0)
    except BaseException:                  # e.g. KeyboardInterrupt: stop the others, then raise
        stop.set()
        raise
    finally:                               # no task outlives the call (it uses pooled buffers)
        pool.wait()                        # if this is interrupted the pool is dropped, not reused
        if trace is not None:
            record.end = time.perf_counter()
        _count_helpers(-helpers)
        _give_back(pool)
    if fatal:
        raise fatal[0]
    if errors:
        raise errors[min(errors)]
    return results


# How long the calling thread of a batch with overlapped steps waits at most for the woken
# workers to take their first task (:class:`_StartGate`): CPython's GIL switch interval, after
# which it would hand the GIL over by itself. 0 turns the wait off (kept switchable for
# bench_task_queue.py, which compares the two in one process).
_START_GATE_S = 0.005


class _StartGate:
    """Lets the calling thread of a batch wait until its ``helpers`` woken workers have each
    taken a first task (or found none).

    A lock used as a binary semaphore, as :class:`_ParkedWorker`'s: the last worker to
    start releases it; waiting on it lets go of the GIL. Each worker holds the GIL from its
    wake-up to its first kernel call, so they start one after another; overlapped Python
    on the calling thread took the GIL from them in between, for as long as its steps ran.
    """

    __slots__ = ("_left", "_open")

    def __init__(self, helpers: int):
        self._left = itertools.count(helpers - 1, -1)     # next() is atomic under the GIL
        self._open = threading.Lock()
        self._open.acquire()

    def started(self) -> None:
        """A worker has taken its first task (or found none); the last one opens the gate."""
        if next(self._left) == 0:
            self._open.release()

    def wait(self, timeout_s: float) -> bool:
        """Wait until every worker started, at most ``timeout_s`` (a worker the OS has not run
        yet must not hold up the steps for long); whether they all did."""
        return self._open.acquire(timeout=timeout_s)


class _ParkedWorker:
    """A daemon thread that runs one job each time it is woken, then parks again.

    ``_wake`` and ``_done`` are locks used as binary semaphores (the cheapest blocking
    primitive CPython has): the thread parks on ``_wake``; the caller hands it a job and
    releases ``_wake``; the thread releases ``_done`` when the job has ended. A job of
    None ends the thread.
    """

    __slots__ = ("_wake", "_done", "_job", "thread")

    def __init__(self, name: str):
        self._wake = threading.Lock()
        self._done = threading.Lock()
        self._wake.acquire()
        self._done.acquire()
        self._job = None
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self._wake.acquire()
            job, self._job = self._job, None     # drop the job's references while parked
            if job is None:
                return
            try:
                job()
            finally:
                del job
                self._done.release()

    def run(self, job) -> None:
        """Start ``job`` (no arguments) on this thread; :meth:`wait` for its end."""
        self._job = job
        self._wake.release()

    def wait(self) -> None:
        self._done.acquire()

    def retire(self) -> None:
        """End the (parked) thread."""
        self._job = None
        self._wake.release()


class _WorkerPool:
    """Parked worker threads serving one :func:`_run_tasks` call at a time.

    Its ``k``-th thread always runs as worker ``k + 1`` (the calling thread is worker 0),
    so a pool grown for 16 threads serves a 4-thread call with workers 0..3. Threads are
    started when a call first needs them and are daemons: interpreter exit does not wait
    for them.
    """

    def __init__(self):
        self.number = next(_POOL_NUMBERS)
        self.generation = _generation
        self.workers: list[_ParkedWorker] = []
        self.woken = 0

    def start(self, job, helpers: int) -> None:
        """Wake ``helpers`` workers, the ``w``-th running ``job(w)``, starting threads it lacks.
        ``woken`` counts the workers woken, also when starting a thread fails part way."""
        while len(self.workers) < helpers:
            self.workers.append(_ParkedWorker(f"scwork-sharding-{self.number}-{len(self.workers) + 1}"))
        for w in range(1, helpers + 1):
            self.workers[w - 1].run(lambda w=w: job(w))
            self.woken = w

    def wait(self) -> None:
        """Wait for the workers :meth:`start` woke to end their job. In a forked child the
        pool's threads do not exist (and never end their job): nothing to wait for."""
        if self.generation == _generation:
            for worker in self.workers[:self.woken]:
                worker.wait()
        self.woken = 0

    def retire(self) -> None:
        for worker in self.workers:
            worker.retire()
        self.workers = []


# Idle pools, most recently used last. A call takes one (or makes a new one) and gives it
# back when it ends, so calls from several Python threads at once (stats_over_dataset's
# chunk tasks, dask worker threads) and nested calls (a task that calls _run_tasks) each
# have their own worker threads and worker indices, and none waits for another.
_IDLE: list[_WorkerPool] = []
_IDLE_LOCK = threading.Lock()
# Pools kept parked beyond this many are retired: more calls than this at once are rare,
# and each idle pool holds its threads (and their stacks).
_MAX_IDLE_POOLS = 8
_POOL_NUMBERS = itertools.count(1)
# Counts the forks this process descends from: a pool made before a fork is not used after it.
_generation = 0


def _take_pool() -> _WorkerPool:
    """An idle pool (the largest one, so that threads are rarely started), or a new one."""
    with _IDLE_LOCK:
        if _IDLE:
            best = max(range(len(_IDLE)), key=lambda k: len(_IDLE[k].workers))
            return _IDLE.pop(best)
    return _WorkerPool()


def _give_back(pool: _WorkerPool) -> None:
    if pool.generation != _generation:     # made in the parent of a fork: its threads are gone
        return
    with _IDLE_LOCK:
        if len(_IDLE) < _MAX_IDLE_POOLS:
            _IDLE.append(pool)
            return
    pool.retire()


# Pooled worker threads woken by the _run_tasks calls now running (every calling thread's).
_helpers_running = 0
_HELPERS_LOCK = threading.Lock()


def _count_helpers(change: int) -> None:
    global _helpers_running
    with _HELPERS_LOCK:
        _helpers_running += change


def _reset_after_fork() -> None:
    """In a forked child only the forking thread exists: forget the parent's pools (their
    threads are gone) and its lock (another thread may have held it at the fork)."""
    global _IDLE, _IDLE_LOCK, _generation, _helpers_running, _HELPERS_LOCK
    _generation += 1
    _IDLE = []
    _IDLE_LOCK = threading.Lock()
    _helpers_running = 0
    _HELPERS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def let_workers_run() -> None:
    """Let go of the GIL for a moment (``time.sleep(0)``), so that a worker thread waiting
    for it (to take its next task) gets it now rather than after CPython's 5 ms switch
    interval. Called between the steps of pure-Python work that runs beside tasks.

    Nothing when no pooled worker runs (one thread, or while profiling): then no thread
    can be waiting, and on a loaded machine ``sleep(0)`` hands the core to another
    process instead: up to 0.9 ms a sleep, three a preprocess call, on the loaded 2-core
    machine here.
    """
    if _helpers_running > 0:
        time.sleep(0)


def _in_order(steps):
    """One callable running ``steps`` in order."""
    def run():
        for step in steps:
            step()
    return run


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def resolve_num_threads(num_threads: int | None) -> int:
    """``num_threads`` as a count: None means every available core (:func:`available_cores`).

    jax-tpu-embedding's host preprocessing runs on a thread pool over all cores; the
    engine does the same by default so that both are compared at their defaults.
    """
    planned = _profile.plan_threads()
    if planned is not None:               # profiling: cut the work for that many threads
        return planned
    if num_threads is None:
        return available_cores()
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ConfigError(f"num_threads must be None (every core) or a positive int, got {num_threads!r}")
    return num_threads
