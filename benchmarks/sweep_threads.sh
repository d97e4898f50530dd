#!/usr/bin/env bash
# The engine's thread sweep on a many-core host, as one command: real threads, not the
# projection (bench_sharding.py --project). Writes one text log per step into OUTDIR
# (default ./sweep-out) and a line per step, with its exit code and seconds, to
# OUTDIR/steps.txt:
#
#   machine   lscpu, the cores this process may use, numpy/numba/xarray versions
#   warmup    scwork.warmup(): numba compilation (cached for the later steps); each kernel
#             module first compiles in a process of its own, side by side, then one
#             warmup() loads them all from the cache
#   large     bench_sharding.py --large: 131072 x 26 features (68 M ids), 16 x 4 SparseCores,
#             threads 1 and the largest count, side by side with jax-tpu-embedding
#   standard  bench_sharding.py: 16384 x 26 features (8.5 M ids), 4 x 4, every count of THREADS,
#             side by side with jax-tpu-embedding
#   twocores  the side-by-side of both inputs on 2 cores: taskset -c 0,1 and the library's
#             SPARSECORE_INPUT_PREPROCESSING_THREADS=2 (both at every core they may use)
#   paths     bench_sharding.py --paths: collect_stats over 8 batches, minibatch, Scenario.compute
#   dataset   bench_dataset_stats.py --standard --compare: stats_over_dataset vs collect_stats in memory
#   queue     bench_task_queue.py --paths: the engine's batches as one compiled call per worker and stack
#             (the task queue) against one Python call per task, calls alternating
#   gate      bench_task_queue.py --gate: the batches with and without the start gate (the calling
#             thread's overlapped Python waits until every woken worker has made its first call)
#   trace     bench_sharding.py --trace --paths at the largest count: what the worker threads wait for
#
#   THREADS=1,4,16 REPEATS=5 bash benchmarks/sweep_threads.sh [OUTDIR]
#
# On a lent machine with a fixed time, DEADLINE (seconds from the start, default none)
# shortens each step's timeout so that the sweep ends in time (a step with under 20 s
# left is skipped), and ARCHIVE (a .tar.gz path) is rewritten after every step with
# OUTDIR's logs, so that a sweep cut short still brings back what it measured.
#
# PYTHON (default python3) must have scwork importable (pip install -e '.[data,dask]', or
# PYTHONPATH=. with numpy, numba, xarray, pandas, pyarrow and dask installed) and, for
# the side-by-side runs, jax-tpu-embedding (the oracle extra, Python >= 3.12).
# STEP_TIMEOUT (seconds, default 300) bounds each step.
set -uo pipefail
out=${1:-sweep-out}
threads=${THREADS:-1,4,16}
repeats=${REPEATS:-5}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
largest=${threads##*,}
first=${threads%%,*}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 SCWORK_PROGRESS=0
# jax-tpu-embedding imports jax; its host preprocessing needs no accelerator
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}

{
    date -u
    lscpu 2>/dev/null || true
    "$py" - <<'EOF'
import os, platform, numpy, numba, xarray
print("python", platform.python_version(), "numpy", numpy.__version__, "numba", numba.__version__,
      "xarray", xarray.__version__)
print("os.cpu_count", os.cpu_count(), "affinity", len(os.sched_getaffinity(0)))
try:
    import jax_tpu_embedding, jax
    print("jax-tpu-embedding", getattr(jax_tpu_embedding, "__version__", "?"), "jax", jax.__version__)
except Exception as exc:  # the side-by-side runs are skipped then
    print("jax-tpu-embedding not importable:", repr(exc))
EOF
} > "$out/machine.txt" 2>&1

archive() {
    if [ -n "${ARCHIVE:-}" ]; then
        tar czf "$ARCHIVE.tmp" -C "$out" . && mv "$ARCHIVE.tmp" "$ARCHIVE"
    fi
}

# step NAME [env VAR=... | taskset ...] -- ARGS...: runs "$py" ARGS, prefixed by what comes
# before "--" (an environment or a CPU affinity), into OUTDIR/NAME.txt
step() {
    local name=$1 t0=$SECONDS rc limit=${STEP_TIMEOUT:-300} prefix=()
    shift
    while [ "$1" != "--" ]; do prefix+=("$1"); shift; done
    shift
    if [ -n "${DEADLINE:-}" ]; then
        local left=$((DEADLINE - SECONDS))
        if [ "$left" -lt 20 ]; then
            echo "$name skipped: $left s left of DEADLINE=$DEADLINE" | tee -a "$out/steps.txt"
            return
        fi
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    timeout "$limit" "${prefix[@]}" "$py" "$@" > "$out/$name.txt" 2>&1
    rc=$?
    echo "$name rc=$rc $((SECONDS - t0)) s load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/steps.txt"
    archive
}

# Each kernel module compiles in a process of its own (numba compiles on one thread; the
# modules' caches are separate files), then one warmup() loads them all from the cache.
warmup_t0=$SECONDS
for module in $("$py" -c "from scwork._jit import KERNEL_MODULES; print(*KERNEL_MODULES)"); do
    "$py" -c "import importlib; importlib.import_module('$module').warmup()" > "$out/warmup-$module.txt" 2>&1 &
done
wait
echo "warmup-parallel $((SECONDS - warmup_t0)) s" | tee -a "$out/steps.txt"
step warmup -- -c "import time, scwork; t = time.perf_counter(); n = scwork.warmup(); print('warmup', n, time.perf_counter() - t, 's')"
step large -- "$here/bench_sharding.py" --large --threads "$first,$largest" --repeats "$repeats"
step standard -- "$here/bench_sharding.py" --threads "$threads" --repeats "$repeats"
step twocores env SPARSECORE_INPUT_PREPROCESSING_THREADS=2 taskset -c 0,1 -- \
    "$here/bench_sharding.py" --jte-only --repeats "$repeats"
step twocores-large env SPARSECORE_INPUT_PREPROCESSING_THREADS=2 taskset -c 0,1 -- \
    "$here/bench_sharding.py" --large --jte-only --repeats "$repeats"
step paths -- "$here/bench_sharding.py" --paths --threads "$threads" --repeats 3
step dataset -- "$here/bench_dataset_stats.py" --standard --compare --threads "$threads" --repeat 3 \
    --dir "${TMPDIR:-/tmp}/scwork-sweep-dataset"
step queue -- "$here/bench_task_queue.py" --paths --threads "$threads" --repeats 9
step gate -- "$here/bench_task_queue.py" --gate --paths --threads "$threads" --repeats 9
step trace -- "$here/bench_sharding.py" --trace --paths --threads "$largest" --repeats 7
