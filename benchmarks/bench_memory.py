"""Latency of the memory model: one scwork.memory.plan call, as an explorer slider makes it.

Input: 30 tables (vocabularies 10**6 .. 5 * 10**6, widths 8 .. 32, sgd / adagrad / adam,
limits 512 / 256) on 16 v5p chips (P = 64), global batch 16384, automatic stacking or
none. Cases:

- ``fits``: the model fits (no fix search);
- ``spmem_fails``: one stack of all 30 tables and a batch of 2**20, so every tile's
  gather operand overflows (per-finding fix searches run);
- ``hbm_fails``: 80 GiB of dense weights and 4 prefetched steps of 2 GiB (HBM fix
  searches run);
- ``fixes``: ``MemoryReport.fixes`` of ``spmem_fails`` (whole-model fix searches);
- ``to_dataset``: the full xarray view of a fitting report;
- ``sweep20``: :func:`scwork.memory.sweep` over 20 batch sizes.

Reported: median of ``--repeats`` (>= 5) calls after one warm-up. Target: ``plan``
well under 50 ms in every case (exit status 2 if a ``plan`` median exceeds it).

    python benchmarks/bench_memory.py [--repeats 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys

from _timing import median_seconds  # benchmarks/ is on sys.path when run as a script

TARGET_S = 0.050


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    repeats = max(5, args.repeats)

    import scwork
    from scwork.memory import plan, sweep
    from scwork.sharding import TableSpec

    tables = [TableSpec(f"t{i:02d}", 10**6 * (1 + i % 5), 8 * (1 + i % 4), optimizer=("sgd", "adagrad", "adam")[i % 3],
                        max_ids_per_partition=512, max_unique_ids_per_partition=256) for i in range(30)]
    topo = scwork.Topology.for_chip("v5p", num_chips=16)
    by_opt = {}
    for t in tables:
        by_opt.setdefault(t.optimizer, []).append(t.name)
    one_stack_per_optimizer = list(by_opt.values())
    cases = {
        "fits": dict(batch_size=16384),
        "fits_unstacked": dict(batch_size=16384, stacking=None),
        "spmem_fails": dict(batch_size=2**20, stacking=one_stack_per_optimizer),
        "hbm_fails": dict(batch_size=16384, stacking=None, dense_weights_bytes=80 * 2**30,
                          prefetch_bytes_per_step=2 * 2**30, maximum_parallel_iterations=4),
    }
    results = {}
    for name, kw in cases.items():
        report = plan(tables, topo, **kw)
        results[name] = {"seconds": median_seconds(lambda kw=kw: plan(tables, topo, **kw), repeats, warmup=True),
                         "fits": report.fits, "stacks": len(report.stacks), "errors": len(report.errors)}
    failing = plan(tables, topo, **cases["spmem_fails"])

    def fixes():
        failing.__dict__.pop("fixes", None)
        return failing.fixes

    results["fixes"] = {"seconds": median_seconds(fixes, repeats, warmup=True), "count": len(fixes())}
    fitting = plan(tables, topo, **cases["fits"])
    results["to_dataset"] = {"seconds": median_seconds(fitting.to_dataset, repeats, warmup=True)}
    batches = [1024 * k for k in range(1, 21)]
    results["sweep20"] = {"seconds": median_seconds(lambda: sweep(tables, topo, "batch_size", batches), repeats,
                                                    warmup=True)}

    slow = [n for n in cases if results[n]["seconds"] > TARGET_S]
    if args.json:
        print(json.dumps({"results": results, "target_s": TARGET_S, "slow": slow}))
    else:
        for name, r in results.items():
            extra = ", ".join(f"{k}={v}" for k, v in r.items() if k != "seconds")
            print(f"{name:<16} {r['seconds'] * 1e3:8.2f} ms  {extra}")
        print(f"target: plan < {TARGET_S * 1e3:.0f} ms: {'met' if not slow else 'MISSED for ' + ', '.join(slow)}")
    return 2 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
