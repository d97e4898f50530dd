"""``scwork plan``: search the best SparseCore plan for a model config and its ids.

Part of :mod:`scwork.cli`.

Runs :func:`scwork.plan.search` on the ids files (read as ``scwork stats`` reads one
file: full batches of the config's batch size), prints the best plan, the library's
default plan and the Pareto front, and with ``--out`` writes the best plan as a
config file (``[stacks]`` limits and buffers) that ``scwork memory --config`` and
:func:`scwork.config.load_config` read. Exit status 0 when a plan meets the
constraints, 1 when none does, 2 on bad input.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from scwork._cli_common import EXIT_DOES_NOT_FIT, EXIT_OK, _print_json, _print_table, _UsageError, check_output_file

__all__ = ["add_plan_parser", "plan_json"]


def add_plan_parser(sub) -> None:
    """Register ``scwork plan`` on the sub-command parsers of :func:`scwork.cli.build_parser`."""
    p = sub.add_parser(
        "plan", help="search stackings, limits, buffers, mini-batching, batch sizes and slices for the best plan "
                     "(exit 1: none meets the constraints)",
        description="Search the plans of scwork.plan.search on the ids: every candidate evaluated with the "
                    "sharding engine, the memory model and the step model; prints the best plan against the "
                    "library's default (automatic stacking, observed-maximum limits) and the Pareto front.")
    p.add_argument("ids", nargs="+", help="CSV/TSV/Parquet files of ids (as scwork stats reads one file); the "
                                          "last quarter of the batches is held out")
    p.add_argument("--config", required=True, help="model config file (.toml or .json; see scwork.config)")
    p.add_argument("--chips", default=None,
                   help="chip and documented slice sizes to search, e.g. v5p:4,8,16 (default: the config's topology)")
    p.add_argument("--per-chip-batch", type=int, nargs="+", default=None,
                   help="per-chip batch sizes to search (default: the config's batch_size over its chips)")
    p.add_argument("--max-drop-rate", type=float, default=0.0,
                   help="largest share of held-out ids a plan may drop (default 0)")
    p.add_argument("--objective", choices=("step_time", "time_per_sample", "peak_hbm", "drop_rate"),
                   default="step_time", help="what the best plan minimises (default step_time)")
    p.add_argument("--budget", type=int, default=1000, help="most candidates evaluated (default 1000)")
    p.add_argument("--out", default=None, help="write the best plan here as a config file (.toml)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (also: SCWORK_PROGRESS=0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_plan)


def _candidate_json(cand) -> dict[str, Any]:
    return {"index": cand.index, **cand.knobs, **cand.metrics, "is_default": cand.is_default,
            "stacks": cand.stacks()}


def plan_json(result, out: str | None) -> dict[str, Any]:
    """What ``scwork plan --json`` prints."""
    ds = result.dataset
    feasible = bool(ds["feasible"].values.any())
    return {
        "candidates": int(ds.sizes["candidate"]),
        "feasible": int(ds["feasible"].sum()),
        "seconds": float(result.attrs.get("seconds", 0.0)),
        "best": _candidate_json(result.best) if feasible else None,
        "baseline": _candidate_json(result.baseline),
        "gain": result.gain() if feasible else None,
        "front": [_candidate_json(result.candidate(i)) for i in result.front],
        "out": out,
    }


def _batches(cfg, paths: list[str], batch_size: int) -> tuple[list, int]:
    """The full batches of every file, and how many rows after the last full batch of each were not used."""
    from scwork._cli_stats import _file_batches
    from scwork.sharding import FeatureBatch

    out, unused = [], 0
    for path in paths:
        full, _, table = _file_batches(cfg, path, batch_size)
        out += [FeatureBatch.from_ragged(b) for b in full]
        unused += table.num_samples % batch_size
    return out, unused


def _cmd_plan(args: argparse.Namespace) -> int:
    from scwork.config import load_config
    from scwork.errors import NoFeasiblePlanError
    from scwork.plan import Constraints, parse_topologies, search

    if not (math.isfinite(args.max_drop_rate) and 0 <= args.max_drop_rate <= 1):
        raise _UsageError(f"--max-drop-rate {args.max_drop_rate:g}: give a share of the ids in [0, 1], e.g. 0 or 1e-4")
    if args.budget < 1:
        raise _UsageError(f"--budget {args.budget}: give a positive number of candidates")
    if args.per_chip_batch is not None and any(b < 1 for b in args.per_chip_batch):
        raise _UsageError(f"--per-chip-batch {args.per_chip_batch}: give positive sample counts")
    if args.out is not None:
        if Path(args.out).suffix.lower() != ".toml":
            raise _UsageError(f"--out {args.out}: the plan is written as a config file; name it .toml")
        check_output_file(args.out, "--out")      # before any work: a bad path fails fast
    cfg = load_config(args.config)
    topologies = parse_topologies(args.chips) if args.chips else [cfg.topology]
    batch_size = cfg.require_batch_size()
    per_chip = args.per_chip_batch or [max(1, batch_size // topologies[0].num_chips)]
    batches, unused_rows = _batches(cfg, args.ids, batch_size)
    try:
        result = search(list(cfg.features), batches, topologies, objective=args.objective,
                        constraints=Constraints(max_drop_rate=args.max_drop_rate), budget=args.budget,
                        per_chip_batch_sizes=per_chip, memory_kwargs=cfg.memory.plan_kwargs(),
                        progress=False if args.no_progress else None)
    except NoFeasiblePlanError as err:
        if args.json:
            _print_json({"feasible": 0, "error": str(err), "constraint": err.constraint, "closest": err.closest})
        else:
            print(f"scwork plan: no plan meets the constraints: {err}")
        return EXIT_DOES_NOT_FIT
    if args.out is not None:
        result.best.write_toml(args.out, memory=cfg.memory, columns=cfg.columns, ids_per_sample=cfg.ids_per_sample)
    # Notes only once the search succeeded: a bad input ends with its one error line alone.
    if unused_rows:
        print(f"scwork plan: note: {unused_rows:,} rows after the last full batch of {batch_size:,} (per file) are "
              "not used", file=sys.stderr)
    unused_samples = max(result.attrs.get("unused_samples", [0]))
    if unused_samples:
        print(f"scwork plan: note: up to {unused_samples:,} samples after the last full global batch of a "
              "topology and per-chip batch size are not used", file=sys.stderr)
    if args.json:
        _print_json({**plan_json(result, args.out), "unused_rows": unused_rows})
        return EXIT_OK
    print(result.summary())
    print()
    rows = [{"#": c.index, "chips": c.knobs["num_chips"], "per chip": c.knobs["per_chip_batch"],
             "stacking": c.knobs["stacking"], "limits": c.knobs["limit_rule"],
             "static buffer": c.knobs["static_buffer"], "mini-batching": c.knobs["minibatching"],
             "step ms": round(c.metrics["step_time_s"] * 1e3, 4),
             "peak HBM MiB": round(c.metrics["peak_hbm_bytes"] / 2**20, 1), "drop rate": c.metrics["drop_rate"]}
            for c in (result.candidate(i) for i in result.front)]
    print("Pareto front (time, peak HBM, drop rate):")
    _print_table(rows, list(rows[0]))
    if args.out is not None:
        print(f"\nwrote the best plan to {args.out}")
    return EXIT_OK
