"""``scwork memory``: does the model fit in SPMEM and HBM? (part of :mod:`scwork.cli`)."""

from __future__ import annotations

import argparse
from typing import Any

from scwork._cli_common import EXIT_DOES_NOT_FIT, EXIT_OK, _print_json, _UsageError
from scwork.errors import ScworkError


def _parse_limits_pair(text: str) -> tuple[int, int]:
    """argparse type of ``--limits MAX_IDS,MAX_UNIQUE``."""
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MAX_IDS,MAX_UNIQUE_IDS such as 512,256, got {text!r}") from None
    if a < 1 or b < 1:
        raise argparse.ArgumentTypeError(f"limits must be >= 1, got {text!r}")
    return a, b


def _finding_json(f) -> dict[str, Any]:
    return {"code": f.code, "severity": f.severity, "resource": f.resource, "message": f.message,
            "stack": f.stack, "evidence": dict(f.evidence),
            "fixes": [{"parameter": x.parameter, "value": x.value, "flag": x.flag, "description": x.description}
                      for x in f.fixes]}


def _cmd_memory(args: argparse.Namespace) -> int:
    from scwork.config import load_config
    from scwork.hardware.topology import Topology

    cfg = load_config(args.config)
    if args.num_chips is not None:
        topo = cfg.topology
        try:
            new = (Topology.for_chip(topo.chip, args.num_chips) if topo.chip is not None
                   else topo.replace(num_chips=args.num_chips))
        except ScworkError as err:
            raise _UsageError(f"--num-chips {args.num_chips}: {err}") from None
        cfg = cfg.replace(topology=new)
    overrides: dict[str, Any] = {}
    if args.batch_size is not None:
        overrides["batch_size"] = cfg.require_batch_size(args.batch_size)
    for name in ("num_serialized_tables", "maximum_parallel_iterations", "dense_weights_bytes", "dtype",
                 "limits", "headroom"):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    if args.stage_gather_operands_in_hbm:
        overrides["stage_gather_operands_in_hbm"] = True
    if args.limits_file is not None:
        from scwork.sharding import read_limits

        overrides["stack_limits"] = read_limits(args.limits_file).stack_limits()
    report = cfg.plan_memory(**overrides)
    fixes = report.fixes if not report.fits else []
    status = EXIT_OK if report.fits else EXIT_DOES_NOT_FIT
    if args.json:
        summary = report.summary()
        spm = report.spmem
        _print_json({
            "config": args.config,
            "fits": report.fits,
            "summary": summary,
            "spmem_per_tile": [{"stack": n, "fixed_bytes": int(spm.fixed[i]),
                                "row_dependent_bytes": int(spm.row_dependent[i]), "total_bytes": int(spm.total[i]),
                                "capacity_bytes": int(spm.capacity), "fits": bool(spm.fits[i])}
                               for i, n in enumerate(spm.stacks)],
            "diagnoses": [_finding_json(f) for f in report.diagnoses],
            "fixes": [{"parameter": x.parameter, "value": x.value, "flag": x.flag, "description": x.description}
                      for x in fixes],
        })
        return status
    print(str(report))
    if fixes:
        print("\nEach of these changes alone makes the model fit:")
        for fix in fixes:
            print(f"  {fix}")
    print("\n" + ("fits" if report.fits else "DOES NOT FIT (exit status 1)"))
    return status
