#!/usr/bin/env bash
# The engine's thread sweep on a many-core host, as one command: real threads, not the
# projection (bench_sharding.py --project). Writes one text log per step into OUTDIR
# (default ./sweep-out) and a line per step, with its exit code and seconds, to
# OUTDIR/steps.txt:
#
#   machine   lscpu, the cores this process may use, numpy/numba/xarray versions
#   warmup    scwork.warmup(): numba compilation (cached for the later steps)
#   large     bench_sharding.py --large: 131072 x 26 features (68 M ids), 16 x 4 SparseCores,
#             threads 1 and the largest count, side by side with jax-tpu-embedding
#   standard  bench_sharding.py: 16384 x 26 features (8.5 M ids), 4 x 4, every count of THREADS,
#             side by side with jax-tpu-embedding
#   paths     bench_sharding.py --paths: collect_stats over 8 batches, minibatch, Scenario.compute
#   dataset   bench_dataset_stats.py --standard --compare: stats_over_dataset vs collect_stats in memory
#   trace     bench_sharding.py --trace --paths at the largest count: what the worker threads wait for
#   queue     bench_task_queue.py --paths: the engine's batches as one compiled call per worker and stack
#             (the task queue) against one Python call per task, calls alternating
#
#   THREADS=1,4,16 REPEATS=5 bash benchmarks/sweep_threads.sh [OUTDIR]
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

step() {
    local name=$1 t0=$SECONDS rc
    shift
    timeout "${STEP_TIMEOUT:-300}" "$py" "$@" > "$out/$name.txt" 2>&1
    rc=$?
    echo "$name rc=$rc $((SECONDS - t0)) s load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/steps.txt"
}

step warmup -c "import time, scwork; t = time.perf_counter(); n = scwork.warmup(); print('warmup', n, time.perf_counter() - t, 's')"
step large "$here/bench_sharding.py" --large --threads "$first,$largest" --repeats "$repeats"
step standard "$here/bench_sharding.py" --threads "$threads" --repeats "$repeats"
step paths "$here/bench_sharding.py" --paths --threads "$threads" --repeats 3
step dataset "$here/bench_dataset_stats.py" --standard --compare --threads "$threads" --repeat 3 \
    --dir "${TMPDIR:-/tmp}/scwork-sweep-dataset"
step trace "$here/bench_sharding.py" --trace --paths --threads "$largest" --repeats 7
step queue "$here/bench_task_queue.py" --paths --threads "$threads" --repeats 9
