"""Throughput of the sharding engine: ids/s of compute_stats and preprocess.

Input (the issue's benchmark): global batch 16384, 26 features each with its own
table of 10**6 rows, Poisson(20) ids per sample, Zipf(1.05) ranks hashed over the
vocabulary, 4 chips x 4 SparseCores (P = 16), default config. Two stacking modes:

- ``none``: no stacking, 26 one-table stacks (the issue's main case);
- ``auto``: automatic stacking; with the default ``--dim 64`` it makes 4 stacks
  (8 + 8 + 8 + 2 tables: 64 * 1024 samples per SC * 4 B = 256 KiB each under the
  2 MiB budget).

Each mode runs ``compute_stats`` (statistics only) and ``preprocess`` (statistics
and CSR buffers) with 1 and 2 threads (``--threads``). Reported per case: median
and best of ``--repeats`` (>= 5) timed calls after one warm-up call (numba
compilation is excluded), as ids/s; a check that every thread count gives the same
statistics and CSR buffers; the numba kernels against the numpy reference kernels
(``backend="numpy"``) on a subset of the batch (same results, ids/s of both); peak
RSS of the process; the load average when the timings ran (the machine may be
shared: compare runs at similar load).

Targets (the public C++ implementation on this class of machine does preprocess at
about 47 M ids/s on one thread and 80 M ids/s on two):

- preprocess: >= 47 M ids/s with 1 thread, >= 80 M ids/s with 2 threads;
- compute_stats: at least twice that: >= 94 M ids/s with 1 thread, >= 160 M with 2.

The verdict compares the medians with the targets for both stacking modes; it is
printed, not turned into the exit code (timings are noisy on a shared machine).
The exit code is 1 only if results differ (threads, or numba vs numpy, or scwork vs
jax-tpu-embedding).

Side by side with jax-tpu-embedding (when it is installed: the ``oracle`` extra,
Python >= 3.12): the same input goes through the library's
``preprocess_sparse_dense_matmul_input`` (its C++ host preprocessing, on its own
thread pool: every core unless ``SPARSECORE_INPUT_PREPROCESSING_THREADS`` says
otherwise) and through scwork's ``preprocess`` and ``compute_stats`` at their
defaults (every core), calls alternating, medians of ``--repeats``; the statistics
of both are checked to be identical. Targets at default settings: preprocess at
least 2x the library's speed, compute_stats at least 3x (ratios of medians measured
in the same run; absolute ids/s from another day are no verdict). ``--no-jte``
skips it.

``--large``: the large input instead (131072 samples x 26 features, 16 chips x 4
SparseCores, 68 M ids); ``--jte-only`` runs only the side-by-side part.

``--project``: no thread sweep but a projection, for machines with fewer cores than
the hosts that matter: speedups at 16, 64 and 208 threads computed from one-thread
profiles (serial time + LPT makespan of every task batch, see
``scwork/sharding/_profile.py``), with the design targets (serial <= 1% of one
thread; at 64 threads no task over 1/(4T) of the work); ``--paths`` adds
``collect_stats`` over 8 batches, ``minibatch``, ``Scenario.compute()`` (what the
explorers run) and ``stats_over_dataset`` over 8 Parquet shards (dask's sync
scheduler), ``--large`` the large input, ``--only`` a subset of the cases; each
projected case also states the peak allocation (``tracemalloc``) of one call with
the work cut for T threads, and a second projection with the GIL: the tasks' own
Python (outside their kernels) runs one at a time, so each batch takes at least
its overlapped serial work plus the sum of that (``CallProfile.gil_path_s``).

    python benchmarks/bench_sharding.py [--quick] [--json] [--repeats 7] [--threads 1,2]
                                        [--stacking none,auto] [--subset 1024] [--large] [--jte-only]
    python benchmarks/bench_sharding.py --project [--paths] [--large] [--repeats 3]
    python benchmarks/bench_sharding.py --paths [--threads 1,4,16] [--stacking none,auto] [--repeats 3]
    python benchmarks/bench_sharding.py --trace [--threads 16] [--paths] [--large] [--only ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import tracemalloc

import numpy as np

from _timing import timed_runs  # benchmarks/ is on sys.path when run as a script

#: ids/s targets per (function, thread count).
TARGETS = {
    ("preprocess", 1): 47e6,
    ("preprocess", 2): 80e6,
    ("compute_stats", 1): 94e6,
    ("compute_stats", 2): 160e6,
}
FUNCTIONS = ("compute_stats", "preprocess")
STACKING = {"none": None, "auto": "auto"}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _same(a, b, name: str) -> bool:
    """Identical statistics (and CSR buffers, gains bit for bit) of two results."""
    if name == "compute_stats":
        return bool(a.equals(b))
    same = bool(a.stats.equals(b.stats)) and a.csr.keys() == b.csr.keys()
    for stack, buf in a.csr.items():
        other = b.csr[stack]
        same &= buf.buffer_size_per_sc == other.buffer_size_per_sc
        same &= all(np.array_equal(getattr(buf, k), getattr(other, k))
                    for k in ("row_pointers", "embedding_ids", "sample_ids"))
        same &= bool(np.array_equal(buf.gains.view(np.int32), other.gains.view(np.int32)))
    dropped_a, dropped_b = a.dropped, b.dropped
    return same and dropped_a.equals(dropped_b)


def _subset(batch, size: int):
    """The first ``size`` samples of every feature of ``batch``."""
    from scwork.sharding import FeatureBatch

    data = {}
    for f in batch.feature_names:
        ids, rs = batch[f]
        data[f] = (ids[:rs[size]], rs[:size + 1])
    return FeatureBatch(data)


def _usage() -> tuple[float, float, int]:
    """Process CPU seconds (user, system) and minor page faults so far (every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt


def _jte_side_by_side(batch, features, topo, modes, repeats, pauses=(0.0,)):
    """Time jax-tpu-embedding and scwork on the same input, alternating; None if not installed.

    ``pauses``: seconds of sleep after every call; each value is one more round of
    ``repeats`` alternating calls (0: back to back, the issue's protocol; a pause lets
    whatever one side leaves running or to be paged in settle before the other side's
    call). Besides wall time, each call's process CPU time (user and system, every
    thread) and minor page faults are recorded: system time and faults show the cost
    of memory the OS must hand out anew.
    """
    try:
        from absl import logging as absl_logging
        from jax_tpu_embedding.sparsecore.lib.nn import embedding as jte
        from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec as es
        import jax_tpu_embedding
    except ImportError:
        return None
    from scwork.sharding import compute_stats, plan_stacking, preprocess, release_buffers
    from scwork.sharding._threads import available_cores

    absl_logging.set_verbosity(absl_logging.ERROR)
    D, S = topo.num_devices, topo.sparsecores_per_device
    B = batch.batch_size
    # The library's ragged input: per feature an object array of per-sample id arrays.
    names = [f.name for f in features]
    ids, weights = [], []
    for name in names:
        splits = batch.row_splits(name)
        flat = batch.ids(name).astype(np.int32)
        ids.append(np.array(np.split(flat, splits[1:-1]), dtype=object))
        weights.append(np.array(np.split(np.ones(flat.size, np.float32), splits[1:-1]), dtype=object))
    out = {"version": getattr(jax_tpu_embedding, "__version__", "0.2"), "cores": available_cores(), "modes": {}}
    for mode in modes:
        stacking = STACKING[mode]
        plan = plan_stacking(features, topo, stacking, batch_size=B)
        # No limit is reached on this input; the library needs a value (it aborts when one is exceeded).
        limit = 1 << 20
        tables = {}
        specs = []
        for f in features:
            t = f.table
            if t.name not in tables:
                tables[t.name] = es.TableSpec(
                    name=t.name, vocabulary_size=t.vocab_size, embedding_dim=t.embedding_dim,
                    initializer=lambda *a, **k: None, optimizer=es.SGDOptimizerSpec(), combiner=t.combiner,
                    max_ids_per_partition=limit, max_unique_ids_per_partition=limit)
            specs.append(es.FeatureSpec(name=f.name, table_spec=tables[t.name], input_shape=[B, 1],
                                        output_shape=[B, t.embedding_dim]))
        if stacking == "auto":
            jte.auto_stack_tables(specs, global_device_count=D, num_sc_per_device=S,
                                  stack_to_max_ids_per_partition=lambda *_: limit,
                                  stack_to_max_unique_ids_per_partition=lambda *_: limit)
        jte.prepare_feature_specs_for_training(specs, global_device_count=D, num_sc_per_device=S)
        # scwork's tables here have no limits: its CSR is sized from what is observed.

        def run_jte():
            return jte.preprocess_sparse_dense_matmul_input(ids, weights, specs, D, D, num_sc_per_device=S)

        def run_pre():
            return preprocess(batch, features, topo, plan)

        def run_stats():
            return compute_stats(batch, features, topo, plan)

        _, jte_stats = run_jte()
        ours = run_stats()
        same = all(
            np.array_equal(ours.sel(stack=st.name)["max_ids_per_partition"].values.ravel(),
                           np.asarray(jte_stats.max_ids_per_partition[st.name]))
            and np.array_equal(ours.sel(stack=st.name)["max_unique_ids_per_partition"].values.ravel(),
                               np.asarray(jte_stats.max_unique_ids_per_partition[st.name]))
            and np.array_equal(ours.sel(stack=st.name)["required_buffer_size_per_sc"].values.ravel(),
                               np.asarray(jte_stats.required_buffer_size_per_sc[st.name]))
            for st in plan.stacks)
        run_pre()
        rounds = {}
        for pause in pauses:
            times = {"jte": [], "preprocess": [], "compute_stats": []}
            cost = {k: {"user_s": [], "sys_s": [], "minor_faults": []} for k in times}
            load = os.getloadavg()
            for _ in range(repeats):  # alternating, so that all three see the same load
                for key, fn in (("jte", run_jte), ("preprocess", run_pre), ("compute_stats", run_stats)):
                    u0, s0, f0 = _usage()
                    times[key] += timed_runs(fn, 1)
                    u1, s1, f1 = _usage()
                    cost[key]["user_s"].append(u1 - u0)
                    cost[key]["sys_s"].append(s1 - s0)
                    cost[key]["minor_faults"].append(f1 - f0)
                    if pause:
                        time.sleep(pause)
            rounds[pause] = (times, {k: {m: statistics.median(v) for m, v in c.items()} for k, c in cost.items()},
                             load)
        times, cost, load = rounds[pauses[0]]
        med = {k: statistics.median(v) for k, v in times.items()}
        # peak allocation of one call at the defaults (numpy reports to tracemalloc;
        # recycled buffers dropped first, so this is a call that gets none)
        peak = {}
        for key, fn in (("preprocess", run_pre), ("compute_stats", run_stats)):
            release_buffers()
            tracemalloc.start()
            kept = fn()
            peak[key] = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            del kept
        out["modes"][mode] = {
            "preprocess_peak_alloc_mb": peak["preprocess"], "compute_stats_peak_alloc_mb": peak["compute_stats"],
            "jte_s": med["jte"], "preprocess_s": med["preprocess"], "compute_stats_s": med["compute_stats"],
            "preprocess_ratio": med["jte"] / med["preprocess"],
            "compute_stats_ratio": med["jte"] / med["compute_stats"],
            "jte_ids_per_s": batch.num_ids / med["jte"], "stats_identical": bool(same),
            "runs_s": times, "loadavg": load, "cpu_per_call": cost, "pause_s": pauses[0],
            "other_pauses": {
                str(p): {"jte_s": statistics.median(t["jte"]), "preprocess_s": statistics.median(t["preprocess"]),
                         "compute_stats_s": statistics.median(t["compute_stats"]),
                         "preprocess_ratio": statistics.median(t["jte"]) / statistics.median(t["preprocess"]),
                         "compute_stats_ratio": statistics.median(t["jte"]) / statistics.median(t["compute_stats"]),
                         "runs_s": t, "cpu_per_call": c}
                for p, (t, c, _) in rounds.items() if p != pauses[0]}}
    return out


#: Thread counts of the projection (``--project``) and its design targets.
PROJECT_THREADS = (16, 64, 208)
SERIAL_SHARE_TARGET = 0.01


def _project(fn, batch, features, topo, stacking, repeats: int) -> dict:
    """Projected speedups of ``fn`` at PROJECT_THREADS from one-thread profiles (scwork.sharding._profile).

    ``one_thread_s``: least CPU time (the thread's CPU clock, which a shared
    machine's load does not inflate) of ``repeats`` real calls with
    ``num_threads=1``; ``one_thread_wall_s`` their median wall time. Per
    thread count T: ``repeats`` calls with the work cut for T threads but every task
    run on this thread, timed; each task's time is its least over the repeats (a
    shared machine slows tasks at random), the serial time likewise; the projected
    time is serial seconds + every task batch's LPT makespan on T workers (worker 0
    starting it after the serial work the calling thread does while that batch runs,
    ``overlap_s``, which is not counted as serial). ``serial_share``
    is the serial seconds over the one-thread time (target <= 1%),
    ``largest_task_share`` the longest task over all task seconds (target at T:
    <= 1 / (4 T)).
    """
    from scwork.sharding._profile import CallProfile, profiled, thread_cpu_s

    fn(batch, features, topo, stacking, num_threads=1)
    cpu, wall = [], []
    for _ in range(repeats):
        c, w = thread_cpu_s(), time.perf_counter()
        fn(batch, features, topo, stacking, num_threads=1)
        cpu.append(thread_cpu_s() - c)
        wall.append(time.perf_counter() - w)
    one = min(cpu)                       # the least, as the projection's task times
    out = {"one_thread_s": one, "one_thread_median_s": statistics.median(cpu),
           "one_thread_wall_s": statistics.median(wall), "threads": {}}
    for T in PROJECT_THREADS:
        with profiled(T) as profiles:
            for _ in range(repeats):
                fn(batch, features, topo, stacking)
        best = CallProfile.best_of(profiles)
        crit = best.critical_path_s(T)
        # peak allocation of one call with the work cut for T threads (scratch for T
        # workers), no recycled buffer: what a T-core host allocates per call
        from scwork.sharding import release_buffers

        release_buffers()
        tracemalloc.start()
        with profiled(T):
            kept = fn(batch, features, topo, stacking)
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        del kept
        gil = best.gil_path_s(T)
        out["threads"][T] = {
            "projected_s": crit, "projected_speedup": one / crit, "serial_s": best.serial_s,
            "held_s": best.held_at(T), "held_per_task_s": best.held_s,
            "projected_gil_s": gil, "projected_gil_speedup": one / gil,
            "overlap_s": best.overlap_s,
            "serial_share": best.serial_s / one, "one_thread_total_s": statistics.median(p.total_s for p in profiles),
            "largest_task_share": best.largest_task_share(), "largest_task_target": 1 / (4 * T),
            "largest_size_share": best.largest_size_share(),
            "tasks": {name: len(ts) for name, ts in best.batches}, "peak_alloc_mb": peak_mb}
    return out


def _print_projection(proj: dict) -> None:
    for key, r in proj.items():
        print(f"  {key}: one thread {r['one_thread_s'] * 1e3:.1f} ms CPU ({r['one_thread_wall_s'] * 1e3:.1f} ms wall)")
        for T, x in r["threads"].items():
            tasks = ", ".join(f"{n} {c}" for n, c in x["tasks"].items())
            print(f"    T={T:>3}: projected {x['projected_s'] * 1e3:7.2f} ms, speedup x{x['projected_speedup']:5.1f}; "
                  f"serial {x['serial_s'] * 1e3:.2f} ms = {x['serial_share'] * 100:.2f}% (target <= 1%: "
                  f"{'ok' if x['serial_share'] <= SERIAL_SHARE_TARGET else 'MISSED'}), "
                  f"{x.get('overlap_s', 0.0) * 1e3:.2f} ms more done while tasks ran; largest task "
                  f"{x['largest_task_share'] * 100:.3f}% of the task time "
                  f"(target <= {x['largest_task_target'] * 100:.3f}%: "
                  f"{'ok' if x['largest_task_share'] <= x['largest_task_target'] else 'MISSED'}), "
                  f"{x['largest_size_share'] * 100:.3f}% of its batch's ids; peak allocation "
                  f"{x['peak_alloc_mb']:.0f} MB; tasks: {tasks}")
            if "held_s" in x:
                print(f"           with the GIL: tasks hold it {x['held_s'] * 1e3:.2f} ms in all (outside their "
                      f"kernels; {x.get('held_per_task_s', x['held_s']) * 1e3:.2f} ms were each task its own "
                      f"call), one at a time: projected {x['projected_gil_s'] * 1e3:.2f} ms, speedup "
                      f"x{x['projected_gil_speedup']:5.1f}")


def _collect_8(batch, features, topo, stacking, num_threads=None):
    from scwork.sharding import collect_stats

    return collect_stats([batch] * 8, features, topo, stacking=stacking, num_threads=num_threads)


def _minibatch(batch, features, topo, stacking, num_threads=None):
    from scwork.sharding import minibatch

    return minibatch(batch, features, topo, stacking=stacking, num_threads=num_threads)


def _scenario(batch, features, topo, stacking, num_threads=None):
    """What the explorers run: a fresh Scenario computed, its statistics read (one profiled call)."""
    from scwork.sharding import Scenario
    from scwork.sharding._profile import call

    with call():
        sc = Scenario(batch, features, topo, stacking, num_threads=num_threads).compute()
        return sc.stats


#: The Parquet shards of ``--paths``' stats_over_dataset (written once per run).
_DATASET: dict = {}


def _dataset_dir(num_features: int) -> str:
    """8 Parquet shards of 16384 samples x ``num_features`` features, Poisson(20), Zipf 1.05 hashed."""
    if "dir" not in _DATASET:
        import tempfile

        from scwork.datasets import write_synthetic_parquet

        _DATASET["tmp"] = tempfile.TemporaryDirectory(prefix="bench_sharding_")
        names = [f"f{i}" for i in range(num_features)]
        write_synthetic_parquet(_DATASET["tmp"].name, 8, rows_per_shard=16384, features=names,
                                vocab_size=1_000_000, valency=20, zipf_exponent=1.05, seed=0)
        _DATASET["dir"] = _DATASET["tmp"].name
    return _DATASET["dir"]


def _over_dataset(batch, features, topo, stacking, num_threads=None):
    """stats_over_dataset over 8 Parquet shards of the standard input's shape, the sync scheduler.

    The scheduler runs the chunks on the calling thread (so that the profile sees
    them); the engine inside uses ``num_threads`` (its default with None). Each
    chunk's read (column by column when profiled for several threads) and each
    step's batch copy is profiled as one task of a batch holding all of them (the
    chunk tasks run ``num_workers`` at once and these hold no lock: see
    ``scwork.sharding._dataset_chunks._record_read``), the engine's tasks as usual,
    and what each chunk or boundary task does besides (its collect_stats' set-up and
    results, its Dataset) as one task of a batch of its own
    (``_dataset_chunks._profiled_task``: it runs inside the task, beside the other
    chunks; with threads it holds the GIL, with worker processes it does not).
    """
    import contextlib

    from scwork.sharding import stats_over_dataset
    from scwork.sharding._profile import call, plan_threads, profiled

    folder = _dataset_dir(len(features))
    # stats_over_dataset has no num_threads: its one-thread run is the engine's work
    # cut for one thread, on this thread (the profiler does exactly that)
    one = num_threads == 1 and plan_threads() is None
    with profiled(1) if one else contextlib.nullcontext(), call():
        return stats_over_dataset(folder, features, topo, batch_size=batch.batch_size, stacking=stacking,
                                  scheduler="sync", progress=False, num_threads=num_threads)


#: Paths built on the engine, projected with ``--project --paths``.
PATHS = {"collect_stats_8_batches": _collect_8, "minibatch": _minibatch, "scenario_compute": _scenario,
         "stats_over_dataset_8_shards": _over_dataset}


def _machine_done(result: dict, as_json: bool) -> str | None:
    """Record the load average at the end of a run; print ``result`` as JSON if asked (then
    None: nothing more to print), else the machine's line ("16 CPUs, load 0.80 -> 1.20")."""
    machine = result["machine"]
    machine["loadavg_end"] = os.getloadavg()
    if as_json:
        print(json.dumps(result, indent=1))
        return None
    return (f"{machine['cpus']} CPUs, load {machine['loadavg_start'][0]:.2f} -> "
            f"{machine['loadavg_end'][0]:.2f}")


def _same_path(a, b) -> bool:
    """Identical results of a path at two thread counts (Datasets, or a MiniBatchPlan's parts)."""
    if hasattr(a, "assignment"):
        return bool(a.stats.equals(b.stats)) and bool(a.assignment.equals(b.assignment)) \
            and bool(a.num_minibatches.equals(b.num_minibatches))
    return bool(a.equals(b))


def paths_main(args) -> int:
    """``--paths`` without ``--project``: the paths built on the engine, timed with real threads.

    Standard input; per stacking mode and path (``collect_stats`` over 8 batches,
    ``minibatch``, ``Scenario.compute()``): one call per thread count of ``--threads``
    (results compared: identical for every count), then ``--repeats`` rounds of calls
    alternating the thread counts, medians; the speedup of each count over the first,
    and the peak allocation (``tracemalloc``) of one call at the last count with no
    recycled buffer. ``stats_over_dataset`` has its own sweep:
    ``benchmarks/bench_dataset_stats.py --standard --compare --threads ...``.
    """
    import scwork
    from scwork.sharding import release_buffers
    from scwork.sharding._synthetic import synthetic_batch

    threads = [int(t) for t in args.threads.split(",") if t]
    modes = [m for m in args.stacking.split(",") if m]
    repeats = max(3, args.repeats)
    scwork.warmup()
    batch, features = synthetic_batch(batch_size=16384, num_features=26, vocab_size=1_000_000, valency=20.0,
                                      zipf_s=1.05, embedding_dim=args.dim, seed=0)
    topo = scwork.Topology(4, 4)
    paths = {k: v for k, v in PATHS.items() if k != "stats_over_dataset_8_shards"}
    wanted = [w for w in (args.only or "").split(",") if w]
    result = {"machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}, "threads": threads,
              "repeats": repeats, "num_ids": batch.num_ids, "paths": {}}
    ok = True
    for mode in modes:
        for name, fn in paths.items():
            key = f"{mode}/{name}"
            if wanted and not any(w in key for w in wanted):
                continue
            outputs = [fn(batch, features, topo, STACKING[mode], num_threads=T) for T in threads]
            same = all(_same_path(outputs[0], o) for o in outputs[1:])
            ok &= same
            del outputs
            runs = {T: [] for T in threads}
            for _ in range(repeats):
                for T in threads:
                    runs[T] += timed_runs(lambda T=T: fn(batch, features, topo, STACKING[mode], num_threads=T), 1)
            med = {T: statistics.median(v) for T, v in runs.items()}
            release_buffers()
            tracemalloc.start()
            kept = fn(batch, features, topo, STACKING[mode], num_threads=threads[-1])
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            del kept
            result["paths"][key] = {"median_s": {str(T): med[T] for T in threads},
                                    "speedup": {str(T): med[threads[0]] / med[T] for T in threads},
                                    "runs_s": {str(T): v for T, v in runs.items()},
                                    "identical": same, "peak_alloc_mb": peak}
    result["results_identical"] = ok
    machine = _machine_done(result, args.json)
    if machine is None:
        return 0 if ok else 1
    print(f"paths built on the engine, standard input ({batch.num_ids} ids), {machine}, "
          f"medians of {repeats} alternating calls per thread count")
    for key, r in result["paths"].items():
        cells = ", ".join(f"{T}: {r['median_s'][str(T)] * 1e3:.1f} ms (x{r['speedup'][str(T)]:.2f})"
                          for T in threads)
        print(f"  {key}: {cells}; identical: {r['identical']}; peak allocation at {threads[-1]} threads "
              f"{r['peak_alloc_mb']:.0f} MB")
    return 0 if ok else 1


def trace_main(args) -> int:
    """``--trace``: what real worker threads do with a call's wall time (scwork/sharding/_trace.py).

    At the last count of ``--threads`` (real threads, not a projection): per input,
    stacking and call (``--paths`` adds collect_stats over 8 batches, minibatch and
    Scenario.compute()), two untraced calls, then ``--repeats`` traced ones. Per call:
    wall time, the time inside task batches and the rest (the calling thread's serial
    work); per batch (medians over the calls): span, tasks, workers, utilisation (task
    time over workers x span), ramp (mean wait of a worker for its first task), gap
    (mean wait between two tasks of one worker) and tail (from the first worker running
    out of tasks to the batch's end).
    """
    import scwork
    from scwork.sharding import compute_stats, preprocess
    from scwork.sharding._synthetic import synthetic_batch
    from scwork.sharding._threads import resolve_num_threads
    from scwork.sharding._trace import summary, traced

    threads = [int(t) for t in args.threads.split(",") if t]
    T = resolve_num_threads(threads[-1] if threads else None)
    modes = [m for m in args.stacking.split(",") if m]
    repeats = max(3, args.repeats)
    scwork.warmup()
    inputs = {"standard": (dict(batch_size=16384, num_features=26, vocab_size=1_000_000), scwork.Topology(4, 4))}
    if args.large:
        inputs["large"] = (dict(batch_size=131072, num_features=26, vocab_size=1_000_000), scwork.Topology(16, 4))
    calls = {"preprocess": preprocess, "compute_stats": compute_stats}
    if args.paths:
        calls.update((k, v) for k, v in PATHS.items() if k != "stats_over_dataset_8_shards")
    wanted = [w for w in (args.only or "").split(",") if w]
    result = {"machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}, "threads": T, "cases": {}}
    for label, (params, topo) in inputs.items():
        batch, features = synthetic_batch(**params, valency=20.0, zipf_s=1.05, embedding_dim=args.dim, seed=0)
        for mode in modes:
            for name, fn in calls.items():
                key = f"{label}/{mode}/{name}"
                if wanted and not any(w in key for w in wanted):
                    continue
                for _ in range(2):
                    fn(batch, features, topo, STACKING[mode], num_threads=T)
                walls, inside, per_batch = [], [], {}
                for _ in range(repeats):
                    with traced() as batches:
                        t0 = time.perf_counter()
                        fn(batch, features, topo, STACKING[mode], num_threads=T)
                        walls.append(time.perf_counter() - t0)
                    inside.append(sum(b.end - b.start for b in batches))
                    for b in batches:
                        per_batch.setdefault(b.name, []).append({**summary(b), "workers": b.workers})
                med = {bname: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
                       for bname, rows in per_batch.items()}
                result["cases"][key] = {"wall_s": statistics.median(walls), "in_batches_s": statistics.median(inside),
                                        "batches": med, "batch_count": {b: len(r) // repeats
                                                                         for b, r in per_batch.items()}}
        del batch, features
    machine = _machine_done(result, args.json)
    if machine is None:
        return 0
    print(f"real worker threads at T = {T} ({machine}); medians of {repeats} traced calls; per batch: span, "
          "tasks, utilisation (task time / workers x span), ramp (a worker's wait for its first task), gap "
          "(between two tasks of a worker), tail (first worker out of tasks -> batch end)")
    for key, r in result["cases"].items():
        print(f"  {key}: wall {r['wall_s'] * 1e3:.2f} ms, in task batches {r['in_batches_s'] * 1e3:.2f} ms, "
              f"outside {(r['wall_s'] - r['in_batches_s']) * 1e3:.2f} ms")
        for bname, x in r["batches"].items():
            print(f"    {bname} (x{r['batch_count'][bname]} per call): span {x['span_s'] * 1e3:.2f} ms, "
                  f"{x['tasks']:.0f} tasks on {x['workers']:.0f} workers, utilisation {x['utilisation'] * 100:.0f}%, "
                  f"ramp {x['ramp_s'] * 1e3:.3f} ms, gap {x['gap_s'] * 1e6:.1f} us, tail {x['tail_s'] * 1e3:.3f} ms")
    return 0


def project_main(args) -> int:
    """``--project``: the projection of speedups at 16, 64 and 208 threads, computed on this machine."""
    import scwork
    from scwork.sharding import compute_stats, preprocess
    from scwork.sharding._synthetic import synthetic_batch

    scwork.warmup()
    inputs = {"standard": (dict(batch_size=16384, num_features=26, vocab_size=1_000_000), scwork.Topology(4, 4))}
    if args.large:
        inputs["large"] = (dict(batch_size=131072, num_features=26, vocab_size=1_000_000), scwork.Topology(16, 4))
    modes = [m for m in args.stacking.split(",") if m]
    result = {"machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}, "inputs": {}}
    for label, (params, topo) in inputs.items():
        batch, features = synthetic_batch(**params, valency=20.0, zipf_s=1.05, embedding_dim=args.dim, seed=0)
        proj = {}
        wanted = [w for w in (args.only or "").split(",") if w]

        def chosen(key: str) -> bool:
            return not wanted or any(w in key for w in wanted)

        for mode in modes:
            for name, fn in (("preprocess", preprocess), ("compute_stats", compute_stats)):
                if chosen(f"{label}/{mode}/{name}"):
                    proj[f"{mode}/{name}"] = _project(fn, batch, features, topo, STACKING[mode],
                                                      max(3, args.repeats))
        if args.paths and label == "standard":
            # the paths built on the engine (standard input only: they repeat its calls)
            for mode in modes:
                for name, fn in PATHS.items():
                    if chosen(f"{label}/{mode}/{name}"):
                        proj[f"{mode}/{name}"] = _project(fn, batch, features, topo, STACKING[mode], 3)
        result["inputs"][label] = {"batch_size": params["batch_size"], "topology": str(topo),
                                   "num_ids": batch.num_ids, "projection": proj}
        del batch, features
    machine = _machine_done(result, args.json)
    if machine is None:
        return 0
    print(f"projection from one-thread profiles on this machine ({machine}); projected time "
          "at T = serial + LPT makespan of each task batch on T workers, in thread CPU time (no memory-bandwidth "
          "limit: an upper bound of the speedup); design targets: serial <= 1% of one thread, at T = 64 no task "
          "over 1/(4T) = 0.39% of the task time")
    for label, r in result["inputs"].items():
        print(f"\n{label} input: batch {r['batch_size']}, {r['num_ids']} ids, {r['topology']}")
        _print_projection(r["projection"])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small input (batch 2048, 8 features)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per case (at least 5)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--stacking", default="none,auto", help="comma-separated: none, auto")
    parser.add_argument("--dim", type=int, default=64, help="embedding dim of every table")
    parser.add_argument("--subset", type=int, default=None,
                        help="batch size of the numpy-reference subset (default 1024, quick 256)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--no-jte", action="store_true", help="skip the jax-tpu-embedding side-by-side run")
    parser.add_argument("--project", action="store_true",
                        help="only the projection: speedups at 16, 64, 208 threads from one-thread profiles")
    parser.add_argument("--paths", action="store_true",
                        help="with --project: also the paths built on the engine (standard input); without it: "
                             "those paths timed at --threads (collect_stats over 8 batches, minibatch, "
                             "Scenario.compute)")
    parser.add_argument("--trace", action="store_true",
                        help="only a trace of real worker threads at the last --threads count: per batch of "
                             "tasks the utilisation, ramp, gaps and tail (with --paths: the paths too)")
    parser.add_argument("--only", default=None,
                        help="with --project: only the cases whose 'input/stacking/call' key contains one of "
                             "these comma-separated strings (e.g. standard/none/preprocess,minibatch)")
    parser.add_argument("--large", action="store_true",
                        help="the large input (131072 samples, 16 x 4 SparseCores); with --project: as well as "
                             "the standard one")
    parser.add_argument("--pause", default="0",
                        help="side by side: seconds of sleep after every call; several comma-separated values "
                             "are several rounds (the first is the headline)")
    parser.add_argument("--jte-only", action="store_true",
                        help="only the side-by-side run with jax-tpu-embedding (no thread sweep, no numpy subset)")
    args = parser.parse_args()
    if args.project:
        return project_main(args)
    if args.trace:
        return trace_main(args)
    if args.paths:
        return paths_main(args)
    repeats = max(5, args.repeats)
    threads = [int(t) for t in args.threads.split(",") if t]
    modes = [m for m in args.stacking.split(",") if m]
    for m in modes:
        if m not in STACKING:
            parser.error(f"--stacking: {m!r} is not one of {sorted(STACKING)}")

    import scwork
    from scwork.sharding import _scratch, compute_stats, plan_stacking, preprocess
    from scwork.sharding._synthetic import synthetic_batch

    fns = {"compute_stats": compute_stats, "preprocess": preprocess}
    if args.quick:
        params = dict(batch_size=2048, num_features=8, vocab_size=100_000)
    elif args.large:
        params = dict(batch_size=131072, num_features=26, vocab_size=1_000_000)
    else:
        params = dict(batch_size=16384, num_features=26, vocab_size=1_000_000)
    params.update(valency=20.0, zipf_s=1.05, embedding_dim=args.dim, seed=0)
    subset = args.subset or (256 if args.quick else 1024)

    t0 = time.perf_counter()
    compiled = scwork.warmup()
    warmup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    batch, features = synthetic_batch(**params)
    gen_s = time.perf_counter() - t0
    topo = scwork.Topology(16, 4) if args.large else scwork.Topology(4, 4)
    rss_input = _peak_rss_mb()
    small = _subset(batch, subset)

    result: dict = {
        "input": {**params, "topology": str(topo), "num_ids": batch.num_ids},
        "machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
        "warmup_s": warmup_s,
        "generate_s": gen_s,
        "repeats": repeats,
        "targets_ids_per_s": {f"{name}_{nt}thread": v for (name, nt), v in TARGETS.items()},
        "modes": {},
    }
    ok = True
    for mode in ([] if args.jte_only else modes):
        stacking = STACKING[mode]
        plan = plan_stacking(features, topo, stacking, batch_size=batch.batch_size)
        res_mode: dict = {"stacks": [len(s.tables) for s in plan.stacks], "runs": {}}
        load_before = os.getloadavg()
        for name in FUNCTIONS:
            fn = fns[name]
            outputs = {nt: fn(batch, features, topo, stacking, num_threads=nt) for nt in threads}   # warm-up
            base = outputs[threads[0]]
            same = all(_same(base, outputs[nt], name) for nt in threads[1:])
            del outputs, base
            # thread counts interleaved call by call, so that they see the same load
            runs = {nt: [] for nt in threads}
            for _ in range(repeats):
                for nt in threads:
                    runs[nt] += timed_runs(
                        lambda fn=fn, nt=nt, st=stacking: fn(batch, features, topo, st, num_threads=nt), 1)
            for nt in threads:
                med = statistics.median(runs[nt])
                res_mode["runs"][f"{name}_{nt}thread"] = {
                    "median_s": med, "best_s": min(runs[nt]), "runs_s": runs[nt],
                    "ids_per_s": batch.num_ids / med, "best_ids_per_s": batch.num_ids / min(runs[nt])}
            res_mode["runs"][f"{name}_threads_identical"] = same
            ok &= same
            # fresh memory: the engine recycles the buffers of finished calls; this is the
            # cost of a call that gets none (first call, or results kept alive)
            fresh = []
            for _ in range(max(3, repeats // 2)):
                _scratch._POOL.clear()
                fresh += timed_runs(
                    lambda fn=fn, st=stacking: fn(batch, features, topo, st, num_threads=threads[-1]), 1)
            res_mode["runs"][f"{name}_{threads[-1]}thread_fresh_buffers"] = {
                "median_s": statistics.median(fresh), "ids_per_s": batch.num_ids / statistics.median(fresh)}
            # allocations of one call (numpy reports them to tracemalloc), buffers not recycled
            _scratch._POOL.clear()
            tracemalloc.start()
            out = fn(batch, features, topo, stacking, num_threads=threads[-1])
            res_mode["runs"][f"{name}_peak_alloc_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            del out
        res_mode["loadavg"] = [load_before, os.getloadavg()]
        # numba vs the numpy reference kernels on a subset (same features, first `subset` samples)
        ref = {}
        for name in FUNCTIONS:
            fn = fns[name]
            t = time.perf_counter()
            out_np = fn(small, features, topo, stacking, backend="numpy")
            np_s = time.perf_counter() - t
            runs = timed_runs(lambda fn=fn, st=stacking: fn(small, features, topo, st), repeats)
            med = statistics.median(runs)
            same = _same(fn(small, features, topo, stacking), out_np, name)
            ok &= same
            ref[name] = {"numpy_s": np_s, "numba_s": med, "speedup": np_s / med,
                         "numpy_ids_per_s": small.num_ids / np_s, "numba_ids_per_s": small.num_ids / med,
                         "identical": same}
        res_mode["numpy_reference_subset"] = {"batch_size": subset, "num_ids": small.num_ids, **ref}
        result["modes"][mode] = res_mode
    if not args.no_jte:
        jte = _jte_side_by_side(batch, features, topo, modes, repeats,
                                pauses=tuple(float(p) for p in args.pause.split(",") if p))
        if jte is not None:
            result["jax_tpu_embedding"] = jte
            ok &= all(r["stats_identical"] for r in jte["modes"].values())
    result["peak_rss_mb"] = _peak_rss_mb()
    result["input_rss_mb"] = rss_input
    result["kernel_modules"] = compiled

    verdict = {}
    if not args.quick and not args.large:
        for mode, r in result["modes"].items():
            for (name, nt), target in TARGETS.items():
                run = r["runs"].get(f"{name}_{nt}thread")
                if run is not None:
                    verdict[f"{mode}/{name}_{nt}thread"] = bool(run["ids_per_s"] >= target)
        result["verdict"] = verdict
        result["meets_all_targets"] = bool(verdict) and all(verdict.values())
    result["results_identical"] = ok

    if args.json:
        print(json.dumps(result, indent=1))
        return 0 if ok else 1
    inp = result["input"]
    print(f"input: batch {inp['batch_size']}, {inp['num_features']} features x vocab {inp['vocab_size']}, "
          f"{inp['num_ids']} ids, {inp['topology']}")
    print(f"{result['machine']['cpus']} CPUs; warmup (compile or load cache) {warmup_s:.2f} s, "
          f"input generation {gen_s:.2f} s; median and best of {repeats} calls")
    for mode, r in result["modes"].items():
        (l1, _, _), (l2, _, _) = r["loadavg"]
        print(f"\nstacking {mode}: stacks of {r['stacks']} tables (load average {l1:.2f} -> {l2:.2f})")
        for name in FUNCTIONS:
            for nt in threads:
                run = r["runs"][f"{name}_{nt}thread"]
                target = TARGETS.get((name, nt))
                mark = ""
                if target and not args.quick:
                    mark = f"  target {target / 1e6:4.0f} M: {'ok' if run['ids_per_s'] >= target else 'MISSED'}"
                print(f"  {name + '_' + str(nt) + 'thread':>22}: median {run['median_s'] * 1e3:7.1f} ms "
                      f"{run['ids_per_s'] / 1e6:7.1f} M ids/s  (best {run['best_ids_per_s'] / 1e6:6.1f} M){mark}")
            fresh = r["runs"][f"{name}_{threads[-1]}thread_fresh_buffers"]
            print(f"  {'':>22}  {threads[-1]} threads, fresh buffers (none recycled): median "
                  f"{fresh['median_s'] * 1e3:.1f} ms, {fresh['ids_per_s'] / 1e6:.1f} M ids/s; one call allocates "
                  f"{r['runs'][f'{name}_peak_alloc_mb']:.0f} MB at peak")
        for name in FUNCTIONS:
            print(f"  {name} identical for threads {threads}: {r['runs'][f'{name}_threads_identical']}")
        s = r["numpy_reference_subset"]
        for name in FUNCTIONS:
            x = s[name]
            print(f"  subset {s['batch_size']} samples ({s['num_ids']} ids) {name}: numpy "
                  f"{x['numpy_ids_per_s'] / 1e6:.2f} M ids/s, numba {x['numba_ids_per_s'] / 1e6:.1f} M ids/s "
                  f"(x{x['speedup']:.0f}), identical={x['identical']}")
    jte = result.get("jax_tpu_embedding")
    if jte is not None:
        print(f"\nside by side with jax-tpu-embedding {jte['version']} (defaults: every core, "
              f"{jte['cores']} here), medians of {repeats} alternating calls:")
        for mode, r in jte["modes"].items():
            print(f"  stacking {mode}: library {r['jte_s'] * 1e3:.1f} ms, scwork preprocess "
                  f"{r['preprocess_s'] * 1e3:.1f} ms (x{r['preprocess_ratio']:.2f}, target x2: "
                  f"{'ok' if r['preprocess_ratio'] >= 2 else 'MISSED'}), "
                  f"compute_stats {r['compute_stats_s'] * 1e3:.1f} ms "
                  f"(x{r['compute_stats_ratio']:.2f}, target x3: "
                  f"{'ok' if r['compute_stats_ratio'] >= 3 else 'MISSED'}); "
                  f"statistics identical: {r['stats_identical']}; load {r['loadavg'][0]:.2f}; peak allocation of one "
                  f"call: preprocess {r['preprocess_peak_alloc_mb']:.0f} MB, compute_stats "
                  f"{r['compute_stats_peak_alloc_mb']:.0f} MB")
            rows = [(r["pause_s"], r)] + [(float(p), x) for p, x in r["other_pauses"].items()]
            for pause, x in rows:
                c = x["cpu_per_call"]
                print(f"    pause {pause:g} s after each call: library {x['jte_s'] * 1e3:.1f} ms, preprocess "
                      f"{x['preprocess_s'] * 1e3:.1f} ms (x{x['preprocess_ratio']:.2f}), compute_stats "
                      f"{x['compute_stats_s'] * 1e3:.1f} ms (x{x['compute_stats_ratio']:.2f}); CPU per call (user + "
                      "system, minor faults): " + ", ".join(
                          f"{k} {v['user_s'] * 1e3:.0f} + {v['sys_s'] * 1e3:.0f} ms, {v['minor_faults']:.0f}"
                          for k, v in c.items()))
    elif not args.no_jte:
        print("\njax-tpu-embedding is not installed (pip install -e '.[oracle]', Python >= 3.12): no side-by-side run")
    print(f"\npeak RSS {result['peak_rss_mb']:.0f} MB (after input generation {rss_input:.0f} MB)")
    if verdict:
        missed = [k for k, v in verdict.items() if not v]
        print("verdict: " + ("every target met" if not missed else "MISSED " + ", ".join(missed))
              + " (medians; timings depend on the machine's load)")
    if not ok:
        print("RESULTS DIFFER (threads or numba vs numpy): see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
