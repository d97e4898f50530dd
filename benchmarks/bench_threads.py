"""What the engine's worker threads cost per batch of tasks: fresh threads against parked ones.

The sharding engine runs its work as batches of independent tasks
(``scwork.sharding._threads._run_tasks``, two or three batches per call). Until
issue 23 every batch started ``T - 1`` fresh threads and joined them; now the
threads are parked between calls (``_WorkerPool``) and only woken. This script
measures, in one run with calls alternating:

- the dispatch cost of one batch of ``8 T`` empty tasks (the engine cuts ``8 T``
  tasks per batch) at T = 2, 4 and 16 threads (``--dispatch-threads``): the old
  fresh-thread loop (a copy below, reachable only from this file) against
  ``_run_tasks``; median microseconds per batch over ``--rounds`` rounds of
  ``--calls`` batches;
- ``compute_stats`` on the standard input of ``bench_sharding.py`` (16384 samples x
  26 features x Poisson(20) ids, Zipf 1.05 hashed, 4 x 4 SparseCores, 8.5 M ids)
  at ``--threads`` (default 1,2) with no stacking and auto stacking: the engine
  with the old loop patched in (``before``) against the engine as it is
  (``after``), medians of ``--repeats`` alternating calls, statistics checked
  identical. With 1 thread both run the same serial path: that ratio is the noise
  floor.

Target: no fresh threads per batch, so that the dispatch cost at 16 threads is well
under the serial time of a ``compute_stats`` call (0.65-0.9 ms on this input).

    python benchmarks/bench_threads.py [--threads 1,2] [--repeats 9] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time


def _run_tasks_fresh_threads(fn, items, sizes, num_threads: int, name: str = "tasks", overlap=None) -> list:
    """The engine's task runner before issue 23 (a copy): ``num_threads - 1`` threads
    started and joined per batch. Kept here only to measure what parking them saves."""
    from scwork.sharding import _profile
    from scwork.sharding._threads import _in_order, let_workers_run

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
        for i in order:
            if stop.is_set():
                return
            try:
                results[i] = fn(items[i], worker)
            except Exception as err:  # noqa: BLE001 - re-raised below, as the engine does
                errors[i] = err

    threads = [threading.Thread(target=work, args=(w,), name=f"scwork-sharding-{w}", daemon=True)
               for w in range(1, min(num_threads, len(items)))]
    for t in threads:
        t.start()
    try:
        try:
            for step in steps:
                let_workers_run()
                step()
        except BaseException:
            stop.set()
            raise
        work(0)
    except BaseException:
        stop.set()
        raise
    finally:
        for t in threads:
            t.join()
    if errors:
        raise errors[min(errors)]
    return results


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
    """Median ms of compute_stats with the old loop patched in (before) and as it is (after)."""
    import importlib

    import scwork
    from scwork.sharding import compute_stats
    from scwork.sharding._synthetic import synthetic_batch

    engine = importlib.import_module("scwork.sharding.engine")
    parked = engine._run_tasks
    scwork.warmup()
    batch, features = synthetic_batch(batch_size=16384, num_features=26, vocab_size=1_000_000, valency=20.0,
                                      zipf_s=1.05, embedding_dim=64, seed=0)
    topo = scwork.Topology(4, 4)
    runners = {"before": _run_tasks_fresh_threads, "after": parked}
    out = {"num_ids": int(batch.num_ids), "modes": {}}
    try:
        for mode in modes:
            stacking = None if mode == "none" else mode
            rows = {}
            for nt in threads:
                times = {k: [] for k in runners}
                results = {}
                for key, run in runners.items():             # warm-up, and the results to compare
                    engine._run_tasks = run
                    results[key] = compute_stats(batch, features, topo, stacking, num_threads=nt)
                for _ in range(repeats):
                    for key, run in runners.items():         # alternating
                        engine._run_tasks = run
                        start = time.perf_counter()
                        compute_stats(batch, features, topo, stacking, num_threads=nt)
                        times[key].append(time.perf_counter() - start)
                before, after = (statistics.median(times[k]) * 1e3 for k in runners)
                rows[nt] = {"before_ms": before, "after_ms": after, "speedup": before / after,
                            "identical": bool(results["before"].equals(results["after"]))}
            out["modes"][mode] = rows
    finally:
        engine._run_tasks = parked
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
