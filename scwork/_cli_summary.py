"""``scwork summary``: the plan summary of a model config (part of :mod:`scwork.cli`).

What :func:`scwork.summary.plan_summary` gives, in the spirit of TorchRec's planner
summary: per chip HBM and SPMEM against their capacities; with an ids file, the load
of every chip, the partition imbalance and divergence, the observed counts against
the limits and the critical path of the step, from the first full batch.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from scwork._cli_common import (
    EXIT_DOES_NOT_FIT,
    EXIT_OK,
    _print_json,
    _topology_text,
    _UsageError,
)

#: Largest TensorCore time per step accepted, in microseconds (one hour: beyond it a typo, not a model).
MAX_TC_US = 3.6e9


def _tc_seconds(value: float | None, option: str) -> float | None:
    """``value`` microseconds in seconds, or a usage error for NaN, negative or absurd times."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0 or value > MAX_TC_US:
        raise _UsageError(f"{option} {value:g}: give the TensorCore time per step in microseconds, "
                          f"from 0 to {MAX_TC_US:g} (one hour)")
    return value * 1e-6


def _dataset_json(ds) -> dict[str, Any]:
    """An xarray Dataset as plain JSON (``Dataset.to_dict(data="list")``: ``xr.Dataset.from_dict`` reads it back)."""
    return ds.to_dict(data="list")


def summary_json(summary, *, config: str, ids: str | None, batch_size: int, topology) -> dict[str, Any]:
    """What ``scwork summary --json`` prints: the summary's Datasets and figures as plain JSON."""
    step = summary.step
    return {
        "config": config,
        "ids": ids,
        "batch_size": batch_size,
        "topology": _topology_text(topology),
        "fits": summary.fits,
        "memory_fits": bool(summary.memory.fits),
        "memory": summary.memory.summary(),
        "per_chip": _dataset_json(summary.per_chip),
        "per_stack": _dataset_json(summary.per_stack),
        "partition_imbalance": summary.partition_imbalance,
        "partition_divergence_bits": summary.partition_divergence_bits,
        "critical_path": [{"phase": phase, "seconds": seconds} for phase, seconds in summary.critical_path],
        "sequential_step_s": None if step is None else float(step.sequential_step_time),
        "pipelined_step_s": None if step is None else float(step.pipelined_step_time),
        "bottleneck": None if step is None else str(step.bottleneck),
    }


def _cmd_summary(args: argparse.Namespace) -> int:
    """``scwork summary``: exit status 0 when the plan fits, 1 when it does not (memory or limits)."""
    from scwork._cli_stats import _hint_compiling, first_batch_stats
    from scwork.config import load_config
    from scwork.summary import plan_summary

    tc_forward = _tc_seconds(args.tc_forward_us, "--tc-forward-us")
    tc_backward = _tc_seconds(args.tc_backward_us, "--tc-backward-us")
    if args.ids is None and (tc_forward is not None or tc_backward is not None):
        raise _UsageError("--tc-forward-us and --tc-backward-us time the critical path, which comes from the ids: "
                          "give an IDS file too")
    cfg = load_config(args.config)
    batch_size = cfg.require_batch_size(args.batch_size)
    stats = None
    if args.ids is not None:
        _hint_compiling(args, None)       # the first engine call compiles the kernels
        stats = first_batch_stats(cfg, args.ids, batch_size, progress=False)
    summary = plan_summary(list(cfg.features), cfg.topology, stats=stats, tc_forward_s=tc_forward,
                           tc_backward_s=tc_backward, **cfg.memory_kwargs(batch_size=batch_size))
    status = EXIT_OK if summary.fits else EXIT_DOES_NOT_FIT
    if args.json:
        _print_json(summary_json(summary, config=args.config, ids=args.ids, batch_size=batch_size,
                                 topology=cfg.topology))
        return status
    source = f", load from the first batch of {args.ids}" if args.ids is not None else ""
    print(f"plan of {args.config}: batch {batch_size:,} on {_topology_text(cfg.topology)}{source}")
    print()
    lines = str(summary).splitlines()
    if not summary.fits:
        # The verdict last, as `scwork memory` prints it; the memory diagnoses are one command away.
        lines.pop()
        if not summary.memory.fits:
            lines.append(f"memory does not fit: `scwork memory --config {args.config}` gives the diagnoses "
                         "and the fixes")
        lines.append("DOES NOT FIT (exit status 1)")
    print("\n".join(lines))
    return status
