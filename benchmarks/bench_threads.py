"""What the engine's worker threads cost per batch of tasks: fresh threads against parked ones.

The sharding engine runs its work as batches of independent tasks
(``scwork.sharding._threads._run_tasks``, two or three batches per call). Until
issue 23 every batch started ``T - 1`` fresh threads and joined them; now the
threads are parked between calls (``_WorkerPool``) and only woken. This script
measures, in one run with calls alternating:

- the dispatch cost of one batch of ``8 T`` empty tasks (the engine cuts ``8 T``
  tasks per batch) at T = 2, 4 and 16 threads (``--dispatch-threads``): ``_run_tasks``
  with fresh threads per batch (``fresh_threads()`` below swaps the parked pool for
  them, in this process only) against ``_run_tasks`` as it is; median
  microseconds per batch over ``--rounds`` rounds of ``--calls`` batches;
- ``compute_stats`` on the standard input of ``bench_sharding.py`` (16384 samples x
  26 features x Poisson(20) ids, Zipf 1.05 hashed, 4 x 4 SparseCores, 8.5 M ids)
  at ``--threads`` (default 1,2) with no stacking and auto stacking: the engine
  with fresh threads per batch (``before``) against the engine as it is
  (``after``), medians of ``--repeats`` alternating calls, statistics checked
  identical. With 1 thread both run the same serial path: that ratio is the noise
  floor.

Target: no fresh threads per batch, so that the dispatch cost at 16 threads is well
under the serial time of a ``compute_stats`` call (0.65-0.9 ms on this input).

    python benchmarks/bench_threads.py [--threads 1,2] [--repeats 9] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import threading
import time


class _FreshThreads:
    """How the engine's task runner got its helper threads before issue 23, kept here only
    to measure it: ``helpers`` threads started for one batch and joined after it (the
    interface of ``_threads._WorkerPool``: ``start(job, helpers)``, then ``wait()``)."""

    def __init__(self):
        self.threads: list[threading.Thread] = []

    def start(self, job, helpers: int) -> None:
        for w in range(1, helpers + 1):
            thread = threading.Thread(target=job, args=(w,), name=f"scwork-sharding-{w}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def wait(self) -> None:
        for thread in self.threads:
            thread.join()


@contextlib.contextmanager
def fresh_threads():
    """Within this block every ``_run_tasks`` call (engine, limits, minibatch...) starts and
    joins fresh threads instead of waking parked ones; everything else about it unchanged."""
    from scwork.sharding import _threads

    take, give = _threads._take_pool, _threads._give_back
    _threads._take_pool, _threads._give_back = _FreshThreads, lambda pool: None
    try:
        yield
    finally:
        _threads._take_pool, _threads._give_back = take, give


def _run_tasks_fresh_threads(fn, items, sizes, num_threads: int) -> list:
    from scwork.sharding._threads import _run_tasks

    with fresh_threads():
        return _run_tasks(fn, items, sizes, num_threads)


def _empty_task(item, worker):
    return None


def dispatch_cost(threads: list[int], rounds: int, calls: int) -> dict:
    """Median microseconds per batch of ``8 T`` empty tasks, fresh against parked threads."""
    from scwork.sharding._threads import _TASKS_PER_THREAD, _run_tasks

    runners = {"fresh_threads": _run_tasks_fresh_threads, "parked_threads": _run_tasks}
    out = {}
    for T in threads:
        items = list(range(T * _TASKS_PER_THREAD))
        sizes = [1] * len(items)
        per_round = {k: [] for k in runners}
        for run in runners.values():
            run(_empty_task, items, sizes, T)                  # parked threads started
        for _ in range(rounds):
            for key, run in runners.items():                 # alternating
                start = time.perf_counter()
                for _ in range(calls):
                    run(_empty_task, items, sizes, T)
                per_round[key].append((time.perf_counter() - start) / calls * 1e6)
        fresh, parked = (statistics.median(per_round[k]) for k in runners)
        out[T] = {"tasks": len(items), "fresh_threads_us": fresh, "parked_threads_us": parked,
                  "saved_us": fresh - parked, "ratio": fresh / parked}
    return out


def compute_stats_before_after(threads: list[int], modes: list[str], repeats: int) -> dict:
    """Median ms of compute_stats with fresh threads per batch (before) and parked ones (after)."""
    import scwork
    from scwork.sharding import compute_stats
    from scwork.sharding._synthetic import synthetic_batch

    scwork.warmup()
    batch, features = synthetic_batch(batch_size=16384, num_features=26, vocab_size=1_000_000, valency=20.0,
                                      zipf_s=1.05, embedding_dim=64, seed=0)
    topo = scwork.Topology(4, 4)
    runners = {"before": fresh_threads, "after": contextlib.nullcontext}
    out = {"num_ids": int(batch.num_ids), "modes": {}}
    for mode in modes:
        stacking = None if mode == "none" else mode
        rows = {}
        for nt in threads:
            times = {k: [] for k in runners}
            results = {}
            for key, threads_of in runners.items():          # warm-up, and the results to compare
                with threads_of():
                    results[key] = compute_stats(batch, features, topo, stacking, num_threads=nt)
            for _ in range(repeats):
                for key, threads_of in runners.items():      # alternating
                    with threads_of():
                        start = time.perf_counter()
                        compute_stats(batch, features, topo, stacking, num_threads=nt)
                        times[key].append(time.perf_counter() - start)
            before, after = (statistics.median(times[k]) * 1e3 for k in runners)
            rows[nt] = {"before_ms": before, "after_ms": after, "speedup": before / after,
                        "identical": bool(results["before"].equals(results["after"]))}
        out["modes"][mode] = rows
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dispatch-threads", default="2,4,16", help="thread counts of the dispatch cost")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of the dispatch cost (median)")
    parser.add_argument("--calls", type=int, default=100, help="batches per round")
    parser.add_argument("--threads", default="1,2", help="thread counts of compute_stats")
    parser.add_argument("--stacking", default="none,auto", help="comma-separated: none, auto")
    parser.add_argument("--repeats", type=int, default=9, help="alternating compute_stats calls per case")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    load = os.getloadavg()
    result = {
        "machine": {"cpus": os.cpu_count(), "loadavg_start": load},
        "dispatch": dispatch_cost([int(t) for t in args.dispatch_threads.split(",") if t], args.rounds, args.calls),
        "compute_stats": compute_stats_before_after([int(t) for t in args.threads.split(",") if t],
                                                    [m for m in args.stacking.split(",") if m], args.repeats),
    }
    result["machine"]["loadavg_end"] = os.getloadavg()
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{os.cpu_count()} cpus, load average {load[0]:.2f} -> {result['machine']['loadavg_end'][0]:.2f}")
        print("dispatch of one batch of 8 T empty tasks (median us per batch):")
        for T, r in result["dispatch"].items():
            print(f"  T={T:>3} ({r['tasks']:>3} tasks): fresh threads {r['fresh_threads_us']:8.1f} us, "
                  f"parked {r['parked_threads_us']:7.1f} us (x{r['ratio']:.1f}, {r['saved_us']:.1f} us saved)")
        cs = result["compute_stats"]
        print(f"compute_stats, standard input ({cs['num_ids']} ids), median ms of {args.repeats} alternating calls:")
        for mode, rows in cs["modes"].items():
            for nt, r in rows.items():
                print(f"  {mode:>4}, {nt} thread(s): before {r['before_ms']:7.2f} ms, after {r['after_ms']:7.2f} ms "
                      f"(x{r['speedup']:.3f}), identical: {r['identical']}")
    ok = all(r["identical"] for rows in result["compute_stats"]["modes"].values() for r in rows.values())
    if not ok:
        print("RESULTS DIFFER between the old and the new task runner", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
