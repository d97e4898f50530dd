"""The engine's batches with the task queue against one Python call per task, real threads.

Since the tenth pass of issue 23 the engine's count, slices and naive-view batches run
as one compiled call per worker thread and job (stack), the workers taking each job's
tasks from its own atomic counter (``engine._run_swept``); before, each task was a
Python call of its own, and its turn of the GIL after every kernel queued behind every
other worker's. The switch ``engine._SWEEP_BATCHES`` turns the queue off in this
process only, so both run here in one process, calls alternating:

- ``compute_stats`` and ``preprocess`` on the standard input of ``bench_sharding.py``
  (16384 samples x 26 features x Poisson(20) ids, Zipf 1.05 hashed, 4 x 4 SparseCores,
  8.5 M ids), no stacking and auto stacking;
- ``collect_stats`` over 8 such batches (``--paths``), what the dataset paths and the
  explorers' scenarios run on.

Per case and thread count: median wall milliseconds of ``--repeats`` alternating calls,
the process CPU milliseconds per call (all threads), and the ratio per task / queue
(above 1: the queue is faster); statistics (and CSR) checked identical; and how many
kernel calls each swept batch made (one per worker and job it helped with: on a
many-core host, the figure the profile's GIL bound assumes is at most threads + jobs - 1). With one thread both run
the same code (no queue): that ratio is the noise floor. On a 2-core machine 16 threads
are oversubscribed; the comparison that matters is on a host with 16 or more cores
(``sweep_threads.sh`` runs this script as its ``queue`` step).

``--gate``: instead, the batches swept both ways, with and without the start gate
(``_threads._START_GATE_S``: the calling thread runs its overlapped Python steps only
once every woken worker has made its first call, instead of taking the GIL from the
workers still waiting to start). The ratio is
then no gate / gate (above 1: the gate is faster); the GIL hand-over it saves grows with
the number of workers, so again the many-core host is the judge.

    python benchmarks/bench_task_queue.py [--threads 1,2,16] [--repeats 15] [--paths] [--gate] [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time


def _identical(a, b) -> bool:
    """Statistics identical; for preprocess results, every CSR array bit for bit too."""
    import numpy as np

    if not hasattr(a, "csr"):
        return bool(a.identical(b))
    return bool(a.stats.identical(b.stats)) and list(a.csr) == list(b.csr) and all(
        np.array_equal(getattr(a.csr[n], f).view(np.int32), getattr(b.csr[n], f).view(np.int32))
        for n in a.csr for f in ("row_pointers", "embedding_ids", "sample_ids", "gains"))


def _counting_calls(engine, counts: dict):
    """``engine._run_swept`` that also appends, per batch name, how many kernel calls the
    workers made (one per worker and job they helped with) to ``counts``."""
    real = engine._run_swept

    def run_swept(name, table, call, num_threads, overlap=None, firsts=()):
        made = [0]

        def counted(*args):
            made[0] += 1                  # (a list's += under the GIL: the workers hold it here)
            return call(*args)

        out = real(name, table, counted, num_threads, overlap, firsts)
        counts.setdefault(f"{name} ({len(table.jobs)} jobs, {table.rows.shape[0]} tasks)", []).append(made[0])
        return out

    return run_swept


def _sweep_switch(on: bool) -> None:
    importlib.import_module("scwork.sharding.engine")._SWEEP_BATCHES = on


def _gate_switch(on: bool) -> None:
    importlib.import_module("scwork.sharding._threads")._START_GATE_S = 0.005 if on else 0.0


def _compare(call, threads: list[int], repeats: int, switch=_sweep_switch) -> dict:
    """Median wall ms and CPU ms per call, ``switch`` on and off (default: the queue), calls
    alternating; results compared. Also the kernel calls per swept batch of the last counted
    run (``calls``). The ``queue_*`` figures are those with the switch on."""
    engine = importlib.import_module("scwork.sharding.engine")
    rows = {}
    for nt in threads:
        results, wall, cpu = {}, {True: [], False: []}, {True: [], False: []}
        counts: dict = {}
        real = engine._run_swept
        engine._run_swept = _counting_calls(engine, counts)
        try:
            for queued in (True, False):                    # warm-up, the results to compare, the calls
                switch(queued)
                results[queued] = call(nt)
        finally:
            engine._run_swept = real
        for _ in range(repeats):
            for queued in (True, False):
                switch(queued)
                c, w = time.process_time(), time.perf_counter()
                call(nt)
                wall[queued].append(time.perf_counter() - w)
                cpu[queued].append(time.process_time() - c)
        switch(True)
        q, t = statistics.median(wall[True]) * 1e3, statistics.median(wall[False]) * 1e3
        rows[nt] = {"queue_ms": q, "per_task_ms": t, "ratio": t / q,
                    "queue_cpu_ms": statistics.median(cpu[True]) * 1e3,
                    "per_task_cpu_ms": statistics.median(cpu[False]) * 1e3,
                    "identical": _identical(results[True], results[False]),
                    "calls": {name: statistics.median(made) for name, made in counts.items()}}
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2,16", help="comma-separated thread counts")
    parser.add_argument("--stacking", default="none,auto", help="comma-separated: none, auto")
    parser.add_argument("--repeats", type=int, default=15, help="alternating calls per case")
    parser.add_argument("--paths", action="store_true", help="also collect_stats over 8 batches")
    parser.add_argument("--gate", action="store_true",
                        help="compare the start gate on and off (both swept) instead of swept and per task")
    parser.add_argument("--json", action="store_true", help="print the results as one line of JSON")
    args = parser.parse_args()
    switch = _gate_switch if args.gate else _sweep_switch
    on_name, off_name = ("gate", "no gate") if args.gate else ("swept", "one call per task")

    import scwork
    from scwork.sharding import collect_stats, compute_stats, preprocess
    from scwork.sharding._synthetic import synthetic_batch

    scwork.warmup()
    batch, features = synthetic_batch(batch_size=16384, num_features=26, vocab_size=1_000_000, valency=20.0,
                                      zipf_s=1.05, embedding_dim=64, seed=0)
    topo = scwork.Topology(4, 4)
    threads = [int(t) for t in args.threads.split(",") if t]
    load = os.getloadavg()
    out = {"machine": {"cpus": os.cpu_count(), "loadavg_start": load}, "num_ids": int(batch.num_ids), "cases": {}}
    for mode in [m for m in args.stacking.split(",") if m]:
        stacking = None if mode == "none" else mode
        out["cases"][f"{mode}/compute_stats"] = _compare(
            lambda nt, s=stacking: compute_stats(batch, features, topo, s, num_threads=nt), threads, args.repeats,
            switch)
        out["cases"][f"{mode}/preprocess"] = _compare(
            lambda nt, s=stacking: preprocess(batch, features, topo, s, num_threads=nt), threads, args.repeats,
            switch)
        if args.paths:
            out["cases"][f"{mode}/collect_stats_8"] = _compare(
                lambda nt, s=stacking: collect_stats([batch] * 8, features, topo, stacking=s, num_threads=nt),
                threads, max(3, args.repeats // 3), switch)
    out["machine"]["loadavg_end"] = os.getloadavg()
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{os.cpu_count()} cpus, load average {load[0]:.2f} -> {out['machine']['loadavg_end'][0]:.2f}; "
              f"standard input, {out['num_ids']} ids; medians of alternating calls")
        for case, rows in out["cases"].items():
            for nt, r in rows.items():
                print(f"  {case:>22}, {nt:>3} thread(s): {on_name} {r['queue_ms']:8.2f} ms "
                      f"({r['queue_cpu_ms']:8.1f} ms CPU), "
                      f"{off_name} {r['per_task_ms']:8.2f} ms ({r['per_task_cpu_ms']:8.1f} ms CPU): "
                      f"x{r['ratio']:.3f}, identical: {r['identical']}")
                if r["calls"]:
                    print("        kernel calls per swept batch: "
                          + ", ".join(f"{name}: {made:g}" for name, made in r["calls"].items()))
    ok = all(r["identical"] for rows in out["cases"].values() for r in rows.values())
    if not ok:
        print(f"RESULTS DIFFER between {on_name} and {off_name}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
