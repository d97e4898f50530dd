"""Plan search speed: 26 Criteo tables, 8 batches of 16,384 samples, about 1,000 candidates.

Prints the time per candidate, what the caches reused (engine runs, memory plans and
step models actually computed against candidates evaluated) and the peak memory of
the process. Run: ``python benchmarks/bench_plan_search.py [--candidates 1000]``.
The target is under 60 s for 1,000 candidates on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import scwork
from scwork.plan import search
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec

#: Per-feature cardinalities of the 26 categorical features of Criteo's Kaggle Display
#: Advertising Challenge dataset (as listed by the DLRM and TorchRec Criteo pipelines).
CRITEO_KAGGLE = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
                 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]


def criteo_model():
    dims = [16, 32, 64, 128]
    return [FeatureSpec(f"C{i + 1}", TableSpec(f"t_C{i + 1}", v, dims[i % 4], optimizer="adagrad"))
            for i, v in enumerate(CRITEO_KAGGLE)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=1008,
                        help="budget (the grid comes in steps of 48 candidates per stacking: 1008 = 21 stackings)")
    parser.add_argument("--batch", type=int, default=16384)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)
    feats = criteo_model()
    names = [f.name for f in feats]
    data = scwork.datasets.synthetic(args.batch, num_steps=args.steps, features=names,
                                     vocab_size={f.name: f.table.vocab_size for f in feats},
                                     valency="fixed(1)", seed=0)
    batches = [FeatureBatch.from_ragged(data.step(k)) for k in range(args.steps)]
    scwork.warmup()     # compile the kernels first: the timing is the search's, not numba's
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = search(feats, batches, "v5p:4,8", per_chip_batch_sizes=[1024, 2048], budget=args.candidates,
                    tc_seconds_per_sample=(2e-7, 4e-7), progress=False)
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    n = result.dataset.sizes["candidate"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    a = result.attrs
    print(f"{n} candidates in {seconds:.1f} s: {seconds / n * 1e3:.1f} ms per candidate "
          f"(local search: {a['local_search_evaluations']} stackings)")
    # CPU seconds of this process (all its threads): on a shared machine the wall time
    # also counts other processes' turns; the load average says how busy it was.
    print(f"CPU time {cpu:.1f} s ({cpu / n * 1e3:.1f} ms per candidate); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"computed: {a['computed_engine_runs']} engine runs on held-out batches, {a['computed_memory_plans']} "
          f"memory plans, {a['computed_step_models']} step models for {a['evaluations']} evaluations; per-table "
          "statistics once per (topology, batch size), stack statistics summed from them")
    print(f"peak memory (max RSS): {peak:.0f} MiB")
    print(result.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
