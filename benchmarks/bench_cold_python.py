"""What a task's own Python costs right after its kernel: cold caches, with the GIL held.

Each task of the sharding engine is a numba kernel call (the GIL released) wrapped in
a few lines of Python (take the task, make its error slots, call the kernel, look at
what it found), which hold the GIL. That Python runs right after a kernel has streamed
megabytes of ids, so the interpreter's code and data it touches were evicted from the
core's caches. This script measures how much that costs, in one process:

- ``cold``: a numba kernel sums an array of ``--mb`` MB (the ids a task streams), then
  two small numpy operations a task makes (``np.full`` of a ``3 x 26`` int64 array, its
  ``max()``) are timed, wall and thread CPU time, medians of ``--repeats`` rounds;
- ``warm``: the same two operations, back to back with no kernel in between.

The ratio is what every small step of a task's Python costs after its kernel: the
profile of ``bench_sharding.py --project`` measures it as the tasks' GIL-held time
(``held``), which grows with the size of the kernel before it.

    python benchmarks/bench_cold_python.py [--mb 160] [--repeats 25] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def _measure(mb: float, repeats: int) -> dict:
    import numba
    import numpy as np

    from scwork.sharding._profile import thread_cpu_s

    @numba.njit(nogil=True)
    def stream(a):                       # what a kernel does to the caches: reads every byte once
        s = 0.0
        for i in range(a.size):
            s += a[i]
        return s

    data = np.random.default_rng(0).random(max(1, int(mb * 2**20 / 8)))
    stream(data)                          # compile, and fault the pages in

    def two_steps() -> tuple[float, float, float, float]:
        c0, w0 = thread_cpu_s(), time.perf_counter()
        flags = np.full((3, 26), -1, np.int64)
        c1, w1 = thread_cpu_s(), time.perf_counter()
        flags.max()
        c2, w2 = thread_cpu_s(), time.perf_counter()
        return c1 - c0, w1 - w0, c2 - c1, w2 - w1

    cold, warm = [], []
    for _ in range(repeats):
        stream(data)
        cold.append(two_steps())
        two_steps()                        # the same code, now in the caches
        warm.append(two_steps())

    def medians(rows):
        cols = list(zip(*rows))
        return {name: statistics.median(col) * 1e6 for name, col in
                zip(("full_cpu_us", "full_wall_us", "max_cpu_us", "max_wall_us"), cols)}

    out = {"mb_streamed": mb, "repeats": repeats, "cold": medians(cold), "warm": medians(warm)}
    out["ratio_wall"] = ((out["cold"]["full_wall_us"] + out["cold"]["max_wall_us"])
                         / max(1e-9, out["warm"]["full_wall_us"] + out["warm"]["max_wall_us"]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=160.0, help="MB the kernel streams before the steps")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = _measure(args.mb, max(3, args.repeats))
    if args.json:
        print(json.dumps(result))
        return 0
    c, w = result["cold"], result["warm"]
    print(f"after a kernel streamed {args.mb:g} MB (medians of {result['repeats']}):")
    print(f"  np.full((3, 26)): {c['full_wall_us']:.1f} us wall ({c['full_cpu_us']:.1f} us CPU), "
          f"warm {w['full_wall_us']:.1f} us")
    print(f"  .max():           {c['max_wall_us']:.1f} us wall ({c['max_cpu_us']:.1f} us CPU), "
          f"warm {w['max_wall_us']:.1f} us")
    print(f"  both: x{result['ratio_wall']:.0f} the warm time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
