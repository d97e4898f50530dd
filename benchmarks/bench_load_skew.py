"""Latency of a LoadSkewExplorer control change on a 1M-id batch.

Input: global batch 16384, 4 features each with its own table of 10**6 rows
(widths 16, 16, 32, 32: automatic stacking makes 2 stacks), Poisson(16) ids per
sample with Zipf(1.05) ranks hashed over the vocabulary: about 1.05 M ids. Chip
v5p; the explorer starts on 4 chips (16 partitions).

What is timed (median of ``--repeats`` changes, each after one warm-up change, with
the explorer's result cache off so every change runs the engine):

- baseline: the bare engine calls on the same batch and topology, ``compute_stats``
  (statistics only) and ``preprocess`` (statistics + CSR buffers, what the
  explorer runs so it can report buffer bytes);
- ``num_chips``: setting the trait (2 <-> 4 <-> 8 chips) until every source is
  updated (the observer runs synchronously: engine, then bars, heatmap, panel);
- ``max_ids_per_partition``: a new limit on the selected stack (engine again), three
  ways: above the observed maximum (no overflow: one engine pass); below it without
  dropping (the engine raises, the explorer runs it again without limits to draw the
  observed load, and the mini-batch pass runs meanwhile on another core); below it with
  ``allow_id_dropping`` (engine, then the mini-batch pass);
- ``split_by = "table"``: the per-table breakdown (one more engine run) and redraw;
- ``stack``: selecting the other stack (redraw only, no engine run).

Target: every control change under 100 ms. Exit status 2 if a median is above.

    python benchmarks/bench_load_skew.py [--repeats 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from _timing import median_seconds  # benchmarks/ is on sys.path when run as a script

TARGET_SECONDS = 0.100


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    repeats = max(3, args.repeats)

    import scwork
    from scwork import datasets
    from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats, preprocess
    from scwork.widgets import LoadSkewExplorer

    data = datasets.synthetic(16384, features=4, vocab_size=1_000_000, valency=16, seed=0)
    batch = FeatureBatch.from_ragged(data.step(0))
    features = [FeatureSpec(f"f{i}", TableSpec(f"t{i}", 1_000_000, 16 if i < 2 else 32)) for i in range(4)]
    topology = scwork.Topology.for_chip("v5p", num_chips=4)

    results = {"num_ids": batch.num_ids, "batch_size": batch.batch_size, "topology": str(topology)}
    results["compute_stats_ms"] = 1e3 * median_seconds(lambda: compute_stats(batch, features, topology), repeats,
                                                       warmup=True)
    results["preprocess_ms"] = 1e3 * median_seconds(lambda: preprocess(batch, features, topology), repeats, warmup=True)

    explorer = LoadSkewExplorer(batch, features, chip="v5p", num_chips=4, cache_size=0)
    chip_counts = iter([2, 4, 8] * (repeats + 2))

    def change_chips():
        explorer.num_chips = next(chip_counts)
        assert explorer.error == "", explorer.error

    results["num_chips_change_ms"] = 1e3 * median_seconds(change_chips, repeats, warmup=True)
    explorer.num_chips = 4
    observed = explorer.summary["max_ids_per_partition"]
    limits = iter(range(observed + 1, observed + 100))

    def change_limit():
        explorer.max_ids_per_partition = next(limits)
        assert explorer.error == "", explorer.error

    results["limit_change_ms"] = 1e3 * median_seconds(change_limit, repeats, warmup=True)
    low_limits = iter(range(observed // 2, observed))

    def change_limit_overflow():
        explorer.max_ids_per_partition = next(low_limits)
        assert explorer.error and explorer.summary["num_minibatches"], explorer.error

    results["limit_overflow_change_ms"] = 1e3 * median_seconds(change_limit_overflow, repeats, warmup=True)
    explorer.allow_id_dropping = True

    def change_limit_dropping():
        explorer.max_ids_per_partition = next(low_limits)
        assert explorer.error == "" and explorer.summary["dropped_ids"] > 0

    results["limit_dropping_change_ms"] = 1e3 * median_seconds(change_limit_dropping, repeats, warmup=True)
    explorer.allow_id_dropping = False
    explorer.max_ids_per_partition = 0

    def toggle_split():
        explorer.split_by = "sc"
        start = time.perf_counter()
        explorer.split_by = "table"
        return time.perf_counter() - start

    toggle_split()
    results["split_by_table_ms"] = 1e3 * statistics.median(toggle_split() for _ in range(repeats))
    explorer.split_by = "sc"
    stacks = iter(explorer.summary["stacks"] * (repeats + 2))

    def change_stack():
        explorer.stack = next(stacks)

    results["stack_change_ms"] = 1e3 * median_seconds(change_stack, repeats, warmup=True)
    results["minibatch_in_path"] = explorer.summary["num_minibatches"] is not None

    timed = ("num_chips_change_ms", "limit_change_ms", "limit_overflow_change_ms", "limit_dropping_change_ms",
             "split_by_table_ms", "stack_change_ms")
    slow = [name for name in timed if results[name] > 1e3 * TARGET_SECONDS]
    results["target_ms"] = 1e3 * TARGET_SECONDS
    results["ok"] = not slow
    if args.json:
        print(json.dumps(results))
    else:
        print(f"{results['num_ids']:,} ids, batch {results['batch_size']}, {results['topology']}")
        print(f"  baseline compute_stats        {results['compute_stats_ms']:7.1f} ms")
        print(f"  baseline preprocess           {results['preprocess_ms']:7.1f} ms")
        for name in timed:
            print(f"  {name[:-3]:<30}{results[name]:7.1f} ms")
        print(f"  mini-batch count in the path: {results['minibatch_in_path']}")
        print("OK" if not slow else f"SLOWER than {1e3 * TARGET_SECONDS:.0f} ms: {slow}")
    return 0 if not slow else 2


if __name__ == "__main__":
    sys.exit(main())
