"""Benchmark of scwork.sharding.stats_over_dataset: throughput, peak memory, in-memory ratio.

Generates (or reuses) a synthetic Parquet dataset with
``scwork.datasets.write_synthetic_parquet`` -- by default about 200 M ids in 50
shards (2 features, valency 10 each, 200 000 rows per shard); ``--quick``: 10 M ids
in 10 shards -- then measures, each configuration in a fresh subprocess (so that
``resource.getrusage`` max RSS belongs to that configuration alone):

- the local threaded scheduler with 1 and 2 threads;
- a ``dask.distributed.LocalCluster`` with 1 and 2 worker processes (one thread
  each); the workers' peak RSS comes from ``getrusage`` run on every worker;
- the in-memory path on a subset that fits (the first shards, about a fifth):
  the same batches through ``collect_stats`` (data already in memory) versus
  ``stats_over_dataset`` on those shard files (1 thread), and their ratio.

Every timed configuration gets an untimed warm-up run on two shards, is then
repeated (``--repeat``, default 3) and the median reported, as wall time and as CPU
time (``getrusage`` of the process, plus of every worker for the cluster runs: ids
per CPU-second shows efficiency even on a loaded machine); the load average before
and after is printed (the machine may be shared).
Each run's merged statistics are checked to be identical across configurations, and
every peak RSS against the 2 GiB budget.

Usage::

    python benchmarks/bench_dataset_stats.py --quick
    python benchmarks/bench_dataset_stats.py --dir /data/bench200m --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 1 << 30
RSS_BUDGET = 2 * GIB

FULL = {"num_shards": 50, "rows_per_shard": 200_000, "features": 2, "valency": 10, "vocab_size": 1_000_000,
        "seed": 0}
QUICK = {"num_shards": 10, "rows_per_shard": 50_000, "features": 2, "valency": 10, "vocab_size": 1_000_000,
         "seed": 0}
#: ``--standard``: the engine benchmark's standard input (benchmarks/bench_sharding.py) as 8 shards of one
#: step each: 16384 samples x 26 features x Poisson(20) ids, Zipf 1.05 hashed over 10**6 (68 M ids).
STANDARD = {"num_shards": 8, "rows_per_shard": 16384, "features": 26, "valency": 20, "vocab_size": 1_000_000,
            "seed": 0}
BATCH_SIZE = 16384
TOPOLOGY = (4, 4)


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _maxrss_bytes() -> int:
    # Linux reports kilobytes, macOS bytes.
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def _features(cfg):
    from scwork.sharding import FeatureSpec, TableSpec

    return [FeatureSpec(f"f{i}", TableSpec(f"t{i}", cfg["vocab_size"], 16)) for i in range(cfg["features"])]


def _digest(res) -> str:
    """Hash of the merged statistics and tuned limits: equal across configurations."""
    h = hashlib.sha256()
    for name in sorted(res.merged.data_vars):
        h.update(name.encode())
        h.update(res.merged[name].values.tobytes())
    h.update(json.dumps(res.stack_limits(), sort_keys=True).encode())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------
# dataset
# --------------------------------------------------------------------------------------
def ensure_dataset(folder: Path, cfg: dict) -> dict:
    import inspect

    from scwork.datasets import write_synthetic_parquet

    marker = folder / "bench_config.json"
    suffix = "npz" if cfg.get("format") == "npz" else "parquet"
    files = [folder / f"part-{i:05d}.{suffix}" for i in range(cfg["num_shards"])]
    if marker.exists() and json.loads(marker.read_text()).get("config") == cfg and all(f.exists() for f in files):
        info = json.loads(marker.read_text())
        info["reused"] = True
        info["generation_seconds"] = 0.0
        return info
    t0 = time.perf_counter()
    if suffix == "npz":
        return _write_npz_dataset(folder, cfg, files, marker, t0)
    # "encoding" in the config: the page encoding (write_synthetic_parquet's encoding=, which
    # older versions lack: they write pyarrow's dictionary encoding)
    extra = {k: cfg[k] for k in ("compression", "encoding") if k in cfg}
    if cfg.get("layout", "").startswith("flat"):
        extra["layout"] = "flat"
    elif "layout" in inspect.signature(write_synthetic_parquet).parameters:
        extra["layout"] = "lists"
    if "encoding" in extra and "encoding" not in inspect.signature(write_synthetic_parquet).parameters:
        if extra.pop("encoding") != "dictionary":
            raise SystemExit(f"this scwork writes only dictionary-encoded shards; generate {folder} with a newer "
                             "one (the folder is reused when its config matches)")
    write_synthetic_parquet(folder, cfg["num_shards"], rows_per_shard=cfg["rows_per_shard"],
                            features=[f"f{i}" for i in range(cfg["features"])], vocab_size=cfg["vocab_size"],
                            valency=cfg["valency"], seed=cfg["seed"], **extra)
    seconds = time.perf_counter() - t0
    import pyarrow.parquet as pq

    num_ids = 0
    for f in files:
        md = pq.ParquetFile(f).metadata
        note = (md.metadata or {}).get(b"scwork.flat_csr")
        if note is not None:      # the flat layout: the note gives each feature's ids
            num_ids += sum(n for _, n in json.loads(note)["features"])
            continue
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            num_ids += sum(rg.column(j).num_values for j in range(rg.num_columns))
    info = {"config": cfg, "num_ids_approx": num_ids, "bytes": sum(f.stat().st_size for f in files),
            "generation_seconds": round(seconds, 2), "reused": False}
    marker.write_text(json.dumps(info))
    return info


def _write_npz_dataset(folder: Path, cfg: dict, files: list[Path], marker: Path, t0: float) -> dict:
    """The same synthetic steps as NPZ shards (``write_npz_shard``: flat ids and row splits, no levels)."""
    from scwork.datasets import synthetic
    from scwork.sharding.shards import write_npz_shard

    data = synthetic(cfg["rows_per_shard"], num_steps=cfg["num_shards"],
                     features=[f"f{i}" for i in range(cfg["features"])], vocab_size=cfg["vocab_size"],
                     valency=cfg["valency"], seed=cfg["seed"])
    num_ids = 0
    for i, f in enumerate(files):
        step = data.step(i)
        write_npz_shard(f, step)
        num_ids += sum(len(ids) for ids, _ in step.values())
    info = {"config": cfg, "num_ids_approx": num_ids, "bytes": sum(f.stat().st_size for f in files),
            "generation_seconds": round(time.perf_counter() - t0, 2), "reused": False}
    marker.write_text(json.dumps(info))
    return info


def _writer_layout(layout: str | None = None) -> str:
    """How this scwork's write_synthetic_parquet lays out the ids (part of the dataset's config).

    ``layout``: ``--layout`` ("flat" or "lists"), for a version that has the option.
    """
    import inspect

    from scwork.datasets import write_synthetic_parquet

    params = inspect.signature(write_synthetic_parquet).parameters
    if "layout" in params and layout != "lists":
        return "flat CSR (row splits and ids in one int32 column), data pages v2"
    if layout == "flat":
        raise SystemExit("this scwork's write_synthetic_parquet has no flat layout (layout=); drop --layout")
    if "id_type" in params:
        return "list<int32 not null> not null, data pages v2"
    return "list<int64>, data pages v1"


def _shard_files(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.glob("part-*.parquet")) or sorted(str(p) for p in folder.glob("part-*.npz"))


# --------------------------------------------------------------------------------------
# children: one configuration each
# --------------------------------------------------------------------------------------
def child(spec: dict) -> dict:
    import scwork
    from scwork.sharding import stats_over_dataset

    cfg = spec["config"]
    folder = Path(spec["dir"])
    files = _shard_files(folder)
    if spec.get("subset"):
        files = files[:spec["subset"]]
    feats = _features(cfg)
    topo = scwork.Topology(*TOPOLOGY)
    scwork.warmup(progress=False)
    out = {"kind": spec["kind"], "workers": spec.get("workers"), "shards": len(files)}
    times, cpus, digests = [], [], set()
    if spec["kind"] == "threads":
        # untimed warm-up on two shards: imports, first-use costs
        stats_over_dataset(files[:2], feats, topo, batch_size=BATCH_SIZE, num_workers=spec["workers"],
                           progress=False)
        for _ in range(spec["repeat"]):
            t0, c0 = time.perf_counter(), _cpu_seconds()
            res = stats_over_dataset(files, feats, topo, batch_size=BATCH_SIZE, num_workers=spec["workers"],
                                     progress=False)
            times.append(time.perf_counter() - t0)
            cpus.append(_cpu_seconds() - c0)
            digests.add(_digest(res))
        out["num_ids"] = res.num_ids
        out["num_steps"] = res.num_steps
        out["num_chunks"] = res.num_chunks
    elif spec["kind"] == "distributed":
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=spec["workers"], threads_per_worker=1, processes=True,
                          dashboard_address=":0", silence_logs=40) as lc, Client(lc) as client:
            client.run(lambda: __import__("scwork").warmup(progress=False))
            stats_over_dataset(files[:2], feats, topo, batch_size=BATCH_SIZE, client=client, progress=False)
            for _ in range(spec["repeat"]):
                w0 = sum(client.run(_cpu_seconds).values())
                t0, c0 = time.perf_counter(), _cpu_seconds()
                res = stats_over_dataset(files, feats, topo, batch_size=BATCH_SIZE, client=client, progress=False)
                times.append(time.perf_counter() - t0)
                cpus.append(_cpu_seconds() - c0 + sum(client.run(_cpu_seconds).values()) - w0)
                digests.add(_digest(res))
                del res
            rss = client.run(_maxrss_bytes)
            out["worker_peak_rss_bytes"] = sorted(rss.values())
        out["num_ids"] = None
    elif spec["kind"] == "inmemory":
        from scwork.sharding import collect_stats

        # Load the subset into memory (not timed), then time collect_stats over its batches.
        data = _load_columns(files)
        steps = _num_steps(data)

        def batches():
            return _step_slices(data, steps)

        import inspect

        from scwork.sharding import tune_limits

        quiet = {"progress": False} if "progress" in inspect.signature(collect_stats).parameters else {}

        for _ in range(spec["repeat"]):
            t0 = time.perf_counter()
            ref = collect_stats(batches(), feats, topo, **quiet)
            tune_limits(ref)
            times.append(time.perf_counter() - t0)
        out["num_ids"] = int(ref["input_ids"].values.sum())
        out["num_steps"] = steps
        # the same subset through stats_over_dataset with one thread, for the ratio
        t_ds = []
        for _ in range(spec["repeat"]):
            t0 = time.perf_counter()
            res = stats_over_dataset(files, feats, topo, batch_size=BATCH_SIZE, num_workers=1, progress=False)
            t_ds.append(time.perf_counter() - t0)
        assert int(res.merged["total_input_ids"].values.sum()) == out["num_ids"]
        assert bool((res.step_stats["ids"].values == ref["ids"].values).all()), "results differ"
        out["dataset_seconds_median"] = statistics.median(t_ds)
        out["dataset_seconds_all"] = [round(t, 3) for t in t_ds]
    elif spec["kind"] == "compare":
        return _compare(spec, files, feats, topo, out)
    out["seconds_median"] = statistics.median(times)
    out["seconds_all"] = [round(t, 3) for t in times]
    if cpus:
        out["cpu_seconds_median"] = statistics.median(cpus)
    out["digests"] = sorted(digests)
    out["peak_rss_bytes"] = _maxrss_bytes()
    return out


def _load_columns(files, names=None):
    """Every shard's list columns (all, or ``names``) concatenated: name -> (ids, row_splits)."""
    import numpy as np
    import pyarrow.parquet as pq

    cols = {}
    for f in files:
        if f.endswith(".npz"):
            with np.load(f) as z:
                for n in names or sorted(m[:-len("_ids")] for m in z.files if m.endswith("_ids")):
                    cols.setdefault(n, []).append((z[f"{n}_ids"], z[f"{n}_row_splits"]))
            continue
        if b"scwork.flat_csr" in (pq.ParquetFile(f).metadata.metadata or {}):
            # the flat CSR layout: scwork's reader rebuilds the features
            from scwork.datasets import load_table

            for n, (ids, rs) in load_table(f, columns=names).features.items():
                cols.setdefault(n, []).append((ids, rs))
            continue
        table = pq.read_table(f, columns=names)
        for n in table.column_names:
            arr = table.column(n).combine_chunks()
            offsets = np.asarray(arr.offsets, np.int64)
            cols.setdefault(n, []).append((arr.values.to_numpy()[offsets[0]:offsets[-1]], offsets - offsets[0]))
    data = {}
    for n, parts in cols.items():
        ids = np.concatenate([p[0] for p in parts])
        splits, base = [np.zeros(1, np.int64)], 0
        for _, rs in parts:
            splits.append(rs[1:] + base)
            base += int(rs[-1])
        data[n] = (ids, np.concatenate(splits))
    return data


def _num_steps(data) -> int:
    """Whole steps of BATCH_SIZE samples in the loaded columns."""
    return (len(next(iter(data.values()))[1]) - 1) // BATCH_SIZE


def _step_slices(data, steps):
    """Step ``s``'s rows of every column, as the (ids, row_splits) dict the engine takes."""
    for s in range(steps):
        lo, hi = s * BATCH_SIZE, (s + 1) * BATCH_SIZE
        yield {k: (ids[rs[lo]:rs[hi]], rs[lo:hi + 1] - rs[lo]) for k, (ids, rs) in data.items()}


def _load_batches(files, names):
    """Every shard's rows as FeatureBatch objects of BATCH_SIZE samples (what the in-memory engine reads)."""
    from scwork.sharding import FeatureBatch

    data = _load_columns(files, names)
    return [FeatureBatch(step) for step in _step_slices(data, _num_steps(data))]


def _compare(spec, files, feats, topo, out):
    """collect_stats over FeatureBatch objects in memory vs stats_over_dataset on the files, calls alternating.

    Per thread count T (``spec["threads"]``): collect_stats with ``num_threads=T`` and
    stats_over_dataset with ``num_workers=T`` (and, where this scwork has it,
    ``num_threads=1``: T readers with one engine thread each; older versions run each
    chunk's engine on every core). Time is wall and process CPU (user + system, every
    thread): ids per CPU-second is the throughput per core, which a shared machine's load
    does not inflate as it does wall time.
    """
    import inspect

    import numpy as np

    from scwork.sharding import collect_stats, stats_over_dataset

    names = [f.name for f in feats]
    batches = _load_batches(files, names)
    num_ids = sum(b.num_ids for b in batches)
    quiet = {"progress": False} if "progress" in inspect.signature(collect_stats).parameters else {}
    has_threads = "num_threads" in inspect.signature(stats_over_dataset).parameters
    stacking = spec.get("stacking")

    def in_memory(T):
        return collect_stats(batches, feats, topo, stacking=stacking, num_threads=T, **quiet)

    def over_dataset(T):
        extra = {"num_threads": 1} if has_threads else {}
        return stats_over_dataset(files, feats, topo, batch_size=BATCH_SIZE, stacking=stacking, num_workers=T,
                                  progress=False, tune=None, **extra)

    ref = in_memory(1)
    for T in spec["threads"]:        # warm-up, and the results compared
        got = over_dataset(T).step_stats
        assert bool((got["ids"].values == ref["ids"].values).all()), "stats_over_dataset differs from collect_stats"
        assert bool((got["unique_ids"].values == ref["unique_ids"].values).all())
        assert np.array_equal(got["required_buffer_size_per_sc"].values, ref["required_buffer_size_per_sc"].values)
        assert np.array_equal(in_memory(T)["ids"].values, ref["ids"].values)
    runs = {f"{what}_{T}": {"wall": [], "cpu": []} for what in ("collect_stats", "stats_over_dataset")
            for T in spec["threads"]}
    for _ in range(spec["repeat"]):
        for T in spec["threads"]:
            for what, fn in (("collect_stats", in_memory), ("stats_over_dataset", over_dataset)):
                t0, c0 = time.perf_counter(), _cpu_seconds()
                fn(T)
                runs[f"{what}_{T}"]["wall"].append(time.perf_counter() - t0)
                runs[f"{what}_{T}"]["cpu"].append(_cpu_seconds() - c0)
    out["num_ids"] = num_ids
    out["num_steps"] = len(batches)
    out["engine_threads_per_chunk"] = 1 if has_threads else "every core"
    out["runs"] = {k: {"wall_s": statistics.median(v["wall"]), "cpu_s": statistics.median(v["cpu"]),
                       "wall_all": [round(x, 3) for x in v["wall"]], "cpu_all": [round(x, 3) for x in v["cpu"]]}
                   for k, v in runs.items()}
    out["peak_rss_bytes"] = _maxrss_bytes()
    return out


def print_compare(r: dict) -> None:
    print(f"in memory vs over the dataset ({r['shards']} shards, {r['num_ids'] / 1e6:.1f} M ids, {r['num_steps']} "
          f"steps; stats_over_dataset engine threads per chunk: {r['engine_threads_per_chunk']}), medians:")
    for T in sorted({int(k.rsplit("_", 1)[1]) for k in r["runs"]}):
        mem, ds = r["runs"][f"collect_stats_{T}"], r["runs"][f"stats_over_dataset_{T}"]
        n = r["num_ids"] / 1e6
        print(f"  {T} thread(s): collect_stats {n / mem['wall_s']:6.1f} M ids/s ({n / mem['wall_s'] / T:5.1f} per "
              f"thread), {n / mem['cpu_s']:6.1f} M ids per CPU-s | stats_over_dataset {n / ds['wall_s']:6.1f} M ids/s "
              f"({n / ds['wall_s'] / T:5.1f} per thread), {n / ds['cpu_s']:6.1f} M ids per CPU-s | ratio per "
              f"CPU-s {mem['cpu_s'] / ds['cpu_s']:.0%}, per wall-s {mem['wall_s'] / ds['wall_s']:.0%}")


def run_child(spec: dict) -> dict:
    env = dict(os.environ, SCWORK_PROGRESS="0")
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                          check=False,
                          env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"child {spec['kind']} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 M ids in 10 shards instead of 200 M in 50")
    parser.add_argument("--dir", help="dataset folder (created or reused); default: a folder in the temp dir")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration (median reported)")
    parser.add_argument("--no-distributed", action="store_true", help="skip the LocalCluster runs")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument("--standard", action="store_true",
                        help="the engine benchmark's standard input: 8 shards x 16384 samples x 26 features x "
                             "Poisson(20) (68 M ids)")
    parser.add_argument("--encoding", choices=["delta", "dictionary", "plain"], default=None,
                        help="page encoding of the generated shards (write_synthetic_parquet's encoding=)")
    parser.add_argument("--format", choices=["parquet", "npz"], default="parquet",
                        help="shard format: Parquet (write_synthetic_parquet) or NPZ (write_npz_shard: flat ids "
                             "and row splits, int64, uncompressed)")
    parser.add_argument("--layout", choices=["flat", "lists"], default=None,
                        help="Parquet layout (write_synthetic_parquet's layout=, default flat where the version "
                             "has it): flat CSR columns or one list column per feature")
    parser.add_argument("--compare", action="store_true",
                        help="only collect_stats in memory vs stats_over_dataset, per thread count (--threads), "
                             "calls alternating")
    parser.add_argument("--threads", default="1,2", help="with --compare: thread counts")
    parser.add_argument("--stacking", default="none", help="with --compare: none or auto")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0

    cfg = dict(STANDARD if args.standard else QUICK if args.quick else FULL)
    if args.encoding:
        cfg["encoding"] = args.encoding
    # The writer's layout is part of the config: a folder of shards from another version is rewritten, and
    # the default folder's name says the layout, so that versions compared back to back keep their own.
    if args.format == "npz":
        import inspect

        from scwork.sharding.shards import write_npz_shard

        cfg["format"] = "npz"
        cfg["layout"] = "int32 ids where they fit" if "id_type" in inspect.signature(write_npz_shard).parameters \
            else "int64 ids"
        tag = "-npz"
    else:
        cfg["layout"] = _writer_layout(args.layout)
        tag = "-flat" if cfg["layout"].startswith("flat") else "-i32v2" if cfg["layout"].startswith("list<int32") \
            else ""
    label = "standard" if args.standard else "quick" if args.quick else "full"
    folder = Path(args.dir) if args.dir else Path(tempfile.gettempdir()) / \
        f"scwork-bench-dataset-stats-{label}{'-' + args.encoding if args.encoding else ''}{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    dataset = ensure_dataset(folder, cfg)
    if args.compare:
        threads = [int(t) for t in args.threads.split(",") if t]
        r = run_child({"config": cfg, "dir": str(folder), "repeat": args.repeat, "kind": "compare",
                       "threads": threads, "stacking": None if args.stacking == "none" else args.stacking})
        r.update(dataset=dataset, loadavg_before=load_before, loadavg_after=os.getloadavg(), cpu_count=os.cpu_count())
        if args.json:
            print(json.dumps(r, indent=2))
        else:
            print(f"dataset {folder} ({cfg}); load average {load_before[0]:.2f} -> {r['loadavg_after'][0]:.2f} "
                  f"({os.cpu_count()} cores)")
            print_compare(r)
        return 0
    runs = []
    base = {"config": cfg, "dir": str(folder), "repeat": args.repeat}
    for workers in (1, 2):
        runs.append(run_child({**base, "kind": "threads", "workers": workers}))
    if not args.no_distributed:
        try:
            import distributed  # noqa: F401

            for workers in (1, 2):
                runs.append(run_child({**base, "kind": "distributed", "workers": workers}))
        except ImportError:
            pass
    subset = max(1, cfg["num_shards"] // 5)
    inmem = run_child({**base, "kind": "inmemory", "subset": subset})
    load_after = os.getloadavg()

    num_ids = runs[0]["num_ids"]
    for r in runs:
        r["ids_per_second"] = num_ids / r["seconds_median"]
        r["ids_per_cpu_second"] = num_ids / r["cpu_seconds_median"]
    digests = {d for r in runs for d in r["digests"]}
    peak = max([r["peak_rss_bytes"] for r in runs + [inmem]]
               + [max(r.get("worker_peak_rss_bytes", [0])) for r in runs])
    report = {
        "dataset": {**dataset, "dir": str(folder), "num_ids": num_ids, "num_steps": runs[0]["num_steps"],
                    "num_chunks": runs[0]["num_chunks"], "batch_size": BATCH_SIZE, "topology": list(TOPOLOGY)},
        "runs": runs,
        "inmemory_subset": {**inmem, "ids_per_second_collect_stats": inmem["num_ids"] / inmem["seconds_median"],
                            "ids_per_second_stats_over_dataset": inmem["num_ids"] / inmem["dataset_seconds_median"],
                            "ratio_dataset_over_inmemory_time": inmem["dataset_seconds_median"]
                            / inmem["seconds_median"]},
        "results_identical_across_configurations": len(digests) == 1,
        "peak_rss_bytes_max": peak,
        "peak_rss_under_2GiB": peak < RSS_BUDGET,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "cpu_count": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        d = report["dataset"]
        print(f"dataset: {d['num_ids'] / 1e6:.1f} M ids in {cfg['num_shards']} Parquet shards "
              f"({d['bytes'] / 2**20:.0f} MiB) at {folder}; "
              + ("reused" if dataset["reused"] else f"generated in {dataset['generation_seconds']:.1f} s"))
        print(f"batch {BATCH_SIZE}, topology {TOPOLOGY[0]}x{TOPOLOGY[1]}, {d['num_steps']} steps, "
              f"{d['num_chunks']} chunks; load average before {load_before[0]:.2f} / after {load_after[0]:.2f} "
              f"({os.cpu_count()} cores)")
        for r in runs:
            what = f"{r['kind']:<11} x{r['workers']}"
            extra = ""
            if "worker_peak_rss_bytes" in r:
                extra = ", workers' peak RSS " + " / ".join(f"{b / 2**20:.0f}" for b in r["worker_peak_rss_bytes"]) \
                    + " MiB"
            print(f"  {what}: {r['seconds_median']:.2f} s median of {r['seconds_all']}, "
                  f"{r['ids_per_second'] / 1e6:.1f} M ids/s (CPU {r['cpu_seconds_median']:.1f} s, "
                  f"{r['ids_per_cpu_second'] / 1e6:.1f} M ids per CPU-s), "
                  f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB{extra}")
        m = report["inmemory_subset"]
        print(f"  in-memory subset ({m['shards']} shards, {m['num_ids'] / 1e6:.1f} M ids): collect_stats "
              f"{m['seconds_median']:.2f} s ({m['ids_per_second_collect_stats'] / 1e6:.1f} M ids/s), "
              f"stats_over_dataset x1 {m['dataset_seconds_median']:.2f} s "
              f"({m['ids_per_second_stats_over_dataset'] / 1e6:.1f} M ids/s): ratio "
              f"{m['ratio_dataset_over_inmemory_time']:.2f}x; peak RSS {m['peak_rss_bytes'] / 2**20:.0f} MiB")
        print(f"results identical across configurations: {report['results_identical_across_configurations']}; "
              f"peak RSS {peak / 2**20:.0f} MiB {'<' if report['peak_rss_under_2GiB'] else '>='} 2 GiB")
    ok = report["peak_rss_under_2GiB"] and report["results_identical_across_configurations"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
