"""How the sharding engine spreads independent slices over worker threads.

The numba kernels release the GIL, so plain Python threads run them in parallel.
"""

from __future__ import annotations

import os
import threading
import time

from scwork.errors import ConfigError
from scwork.sharding import _profile

__all__ = ["available_cores", "let_workers_run", "resolve_num_threads"]


# With several threads the work is cut into tasks of at most
# total ids / (threads * _TASKS_PER_THREAD) ids, so that the threads finish together:
# the longest task then holds about 1 / (8 T) of the work, within the design bound
# of 1 / (4 T) unless one table of one slice alone is larger than that.
_TASKS_PER_THREAD = 8


def _run_tasks(fn, items, sizes, num_threads: int, name: str = "tasks", overlap=None) -> list:
    """``[fn(item, worker) for item in items]``, on ``num_threads`` threads.

    The calling thread is worker 0 and ``num_threads - 1`` threads are started for
    the call; each worker takes the next item (largest first, by ``sizes``, so that
    the workers end together) until none is left. ``worker`` (``< num_threads``)
    names the thread running the call, for per-thread scratch. Results come back
    in item order; the first exception (in item order) is raised once every call
    has finished. No executor: one ``submit`` per task, each waking a thread that
    then waits for the GIL, costs more than a small task.

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

    While :func:`scwork.sharding._profile.profiled` is active the items run on the
    calling thread, each timed, and are recorded as a batch called ``name``
    (``overlap``, timed apart, as that batch's overlapped serial time).
    """
    steps = [] if overlap is None else list(overlap) if isinstance(overlap, (list, tuple)) else [overlap]
    prof = _profile.active()
    if prof is not None:
        return _profile.run_serially(prof, name, fn, items, sizes, _in_order(steps) if steps else None)
    if num_threads == 1 or len(items) <= 1:
        for step in steps:
            step()
        return [fn(item, 0) for item in items]
    order = iter(sorted(range(len(items)), key=lambda i: -sizes[i]))
    results: list = [None] * len(items)
    errors: dict[int, Exception] = {}
    stop = threading.Event()

    def work(worker: int) -> None:
        for i in order:                    # next() of a shared iterator is atomic under the GIL
            if stop.is_set():
                return
            try:
                results[i] = fn(items[i], worker)
            except Exception as err:  # noqa: BLE001 - re-raised below, the first in item order
                errors[i] = err

    threads = [threading.Thread(target=work, args=(w,), name=f"scwork-sharding-{w}", daemon=True)
               for w in range(1, min(num_threads, len(items)))]
    for t in threads:
        t.start()
    try:
        try:
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
    finally:                               # no thread outlives the call (it uses pooled buffers)
        for t in threads:
            t.join()
    if errors:
        raise errors[min(errors)]
    return results


def let_workers_run() -> None:
    """Let go of the GIL for a moment (``time.sleep(0)``), so that a worker thread waiting
    for it (to take its next task) gets it now rather than after CPython's 5 ms switch
    interval. Called between the steps of pure-Python work that runs beside tasks."""
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
