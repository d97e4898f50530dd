"""Collectives on whole pods: cost, link utilisation and per-step statistics of every algorithm.

Targets (issue 15, item 1): on the largest real slices -- TPU v5p 16x16x24 (6,144
chips, the maximum v5p shape) and TPU7x 16x24x24 (9,216 chips) -- every algorithm of
``scwork.collectives.ALGORITHMS`` is built and costed with
``cost(schedule, link_summary=True)`` (total and per-step time, busiest link bytes,
busy links and mean utilisation per step, per-link bytes, busy time and
utilisation) plus ``schedule.num_conflicts()`` and ``schedule.num_transfers``, each
in **under 10 s and 2 GiB peak RSS**. ``phase_summary`` (what the stepper shows
above its node limit) is timed too, without a target.

Every (topology, algorithm) runs in a fresh subprocess: its peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss`` in the child) and times are its own.
Reported per run: ``work_s`` (build + cost + conflicts + transfer count, the target),
``summary_s`` (``phase_summary``), ``process_s`` (the whole child, interpreter
start and imports included, as the parent's wall clock sees it) and ``peak_rss_MiB``.
``mesh_loops`` needs two cores per chip: it runs on the same shapes with
``cores_per_chip=2`` (TPU7x chips have two TensorCores).

    python benchmarks/bench_pod_schedules.py [--json] [--topology 16x16x24 ...] [--algorithm NAME ...]

Exit status 1 when a run misses a target (10 s of work, 2 GiB) or fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

SHAPES = {"16x16x24": ("v5p", "TPU v5p 16x16x24, 6,144 chips"),
          "16x24x24": ("tpu7x", "TPU7x 16x24x24, 9,216 chips")}
ALGORITHMS = ("single_path", "pincer", "rotated_pincer", "improved_rotated_pincer", "ring", "bidirectional_ring",
              "dimension_by_dimension", "multi_color", "mesh_loops", "reduce_scatter", "all_gather", "all_to_all")
TIME_TARGET_S = 10.0
RSS_TARGET_MIB = 2048.0

_CHILD = r"""
import json, resource, sys, time
from scwork.collectives import Network, build, cost, phase_summary
shape = tuple(int(d) for d in sys.argv[1].split("x")); chip = sys.argv[2]; name = sys.argv[3]
cores = 2 if name == "mesh_loops" else 1
import xarray  # imported by cost(); loaded here so that work_s is the engine's time
t0 = time.perf_counter()
net = Network.torus(shape, chip=chip, cores_per_chip=cores)
schedule = build(name, net, nbytes=64 * 2**20)
t_build = time.perf_counter()
c = cost(schedule, link_summary=True)
t_cost = time.perf_counter()
conflicts = schedule.num_conflicts()
transfers = schedule.num_transfers
t_work = time.perf_counter()
parts = phase_summary(schedule)
t_summary = time.perf_counter()
print(json.dumps({
    "nodes": net.num_nodes, "steps": schedule.num_steps, "transfers": transfers, "conflicts": conflicts,
    "total_time_us": float(c.total_time) * 1e6, "busbw_GBps": float(c.busbw) / 1e9,
    "mean_utilisation": float(c.mean_utilisation.mean()) if schedule.num_steps else 0.0,
    "parts": int(parts.sizes["part"]), "compact": schedule.compact,
    "build_s": t_build - t0, "cost_s": t_cost - t_build, "work_s": t_work - t0, "summary_s": t_summary - t_work,
    "peak_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_one(shape: str, algorithm: str) -> dict:
    chip, _ = SHAPES.get(shape, ("v5p", shape))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, shape, chip, algorithm], capture_output=True, text=True)
    wall = time.perf_counter() - start
    row = {"topology": shape, "algorithm": algorithm, "process_s": wall}
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return row
    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    row["meets_target"] = row["work_s"] < TIME_TARGET_S and row["peak_rss_MiB"] < RSS_TARGET_MIB
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topology", nargs="+", default=list(SHAPES), help="torus shapes, e.g. 16x16x24")
    parser.add_argument("--algorithm", nargs="+", default=list(ALGORITHMS))
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args(argv)
    rows = []
    for shape in args.topology:
        for algorithm in args.algorithm:
            row = run_one(shape, algorithm)
            rows.append(row)
            if not args.json:
                if "error" in row:
                    print(f"{shape:9s} {algorithm:24s} FAILED: {row['error']}", flush=True)
                else:
                    print(f"{shape:9s} {algorithm:24s} work {row['work_s']:6.2f} s (cost {row['cost_s']:5.2f}) "
                          f"summary {row['summary_s']:5.2f} s process {row['process_s']:6.2f} s "
                          f"peak {row['peak_rss_MiB']:6.0f} MiB  steps {row['steps']:6d} "
                          f"transfers {row['transfers']:>17,d} conflicts {row['conflicts']}"
                          + ("" if row["meets_target"] else "  MISSES TARGET"), flush=True)
    ok = all(r.get("meets_target") for r in rows)
    if args.json:
        print(json.dumps({"rows": rows, "all_meet_target": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
