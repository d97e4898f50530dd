"""``scwork stats``: per-stack limits from real ids (part of :mod:`scwork.cli`).

Also the ids readers that ``scwork summary`` reuses: :func:`_is_dataset`,
:func:`_file_batches` and :func:`first_batch_stats`.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from pathlib import Path
from typing import Any

from scwork._cli_common import (
    EXIT_OK,
    StagedOutputs,
    _count,
    _print_json,
    _print_table,
    _topology_text,
    _UsageError,
    check_output_dir,
    check_output_file,
)


# ======================================================================================
def _is_dataset(source: str) -> bool:
    """A directory or a glob pattern of shards (rather than one file)."""
    return os.path.isdir(source) or any(ch in source for ch in "*?[")


def _stats_rows(step_stats, tuned) -> list[dict[str, Any]]:
    ds = tuned.dataset
    steps = int(step_stats.sizes["step"])
    rows = []
    for i, name in enumerate(ds["stack"].values.tolist()):
        sel = step_stats.sel(stack=name)
        conf_ids = int(sel["configured_max_ids_per_partition"]) if "configured_max_ids_per_partition" in sel else -1
        conf_uniq = (int(sel["configured_max_unique_ids_per_partition"])
                     if "configured_max_unique_ids_per_partition" in sel else -1)
        rows.append({
            "stack": name,
            "steps": steps,
            "observed_max_ids": int(sel["observed_max_ids"].max()),
            "observed_max_unique_ids": int(sel["observed_max_unique_ids"].max()),
            "observed_buffer": int(sel["observed_required_buffer_size"].max()),
            "max_ids_per_partition": int(ds["max_ids_per_partition"].values[i]),
            "max_unique_ids_per_partition": int(ds["max_unique_ids_per_partition"].values[i]),
            "required_buffer_size": int(ds["required_buffer_size"].values[i]),
            "configured_max_ids": None if conf_ids < 0 else conf_ids,
            "configured_max_unique_ids": None if conf_uniq < 0 else conf_uniq,
            "share_steps_needing_minibatching": float(ds["share_steps_needing_minibatching"].values[i]),
        })
    return rows


class _FileBatches:
    """Batches ``indices`` of a loaded table keyed by feature (a column may feed several features).

    Sized, so the progress bar knows the number of steps.
    """

    def __init__(self, cfg, table, indices: range):
        self._cfg, self._table, self._indices = cfg, table, indices

    def __len__(self) -> int:
        return len(self._indices)

    def __iter__(self):
        for index in self._indices:
            batch = self._table.batch(index)
            yield {f.name: batch[self._cfg.columns[f.name]] for f in self._cfg.features}


def _file_batches(cfg, path: str, batch_size: int, keep_remainder: bool = False):
    """``(full batches, last partial batch or None, table)`` of one CSV/TSV/Parquet file.

    The partial batch is None unless ``keep_remainder`` and the file's rows are not a
    multiple of ``batch_size``.
    """
    from scwork.datasets import load_table
    from scwork.datasets.files import _file_format
    from scwork.errors import InputError

    # The reader's own message for an unknown extension offers a Python argument (sep=...);
    # the command has no such option: say what files it reads.
    try:
        _file_format(Path(path), None)
    except InputError:
        suffix = "".join(Path(path).suffixes[-2:]) or "(none)"
        raise _UsageError(f"IDS {path}: cannot tell the format from the extension {suffix!r}; the ids are read from "
                          ".csv, .tsv or .parquet files (optionally .gz/.bz2/.zst/.lz4-compressed), or a directory "
                          "or glob of them") from None
    columns = list(dict.fromkeys(cfg.columns[f.name] for f in cfg.features))
    table = load_table(path, columns=columns, batch_size=batch_size, drop_remainder=not keep_remainder)
    full, remainder = divmod(table.num_samples, batch_size)
    if full == 0 and not (keep_remainder and remainder):
        slices = cfg.topology.num_devices * cfg.topology.sparsecores_per_device
        keep = " or --keep-remainder (one smaller step)" if remainder and remainder % slices == 0 else ""
        raise _UsageError(f"{path} has {_count(table.num_samples, 'sample')}, fewer than one batch of {batch_size}; "
                          f"use a smaller --batch-size{keep}, or more data")
    short = _FileBatches(cfg, table, range(full, full + 1)) if keep_remainder and remainder else None
    return _FileBatches(cfg, table, range(full)), short, table


def _check_remainder(rows: int, batch_size: int, topology) -> None:
    """Usage error when the last partial batch kept by --keep-remainder does not divide over the slices."""
    remainder = rows % batch_size
    G, S = topology.num_devices, topology.sparsecores_per_device
    slices = G * S
    if remainder % slices == 0:
        return
    lower = remainder - remainder % slices
    sizes = [s for s in (lower, lower + slices) if s > 0]
    raise _UsageError(
        f"--keep-remainder: the last partial batch would hold {_count(remainder, 'sample')} ({rows:,} rows, "
        f"batch size {batch_size:,}), but every batch must divide over {_count(G, 'device')} x "
        f"{_count(S, 'SparseCore')} = {slices} slices; the nearest sizes that do are "
        f"{' and '.join(f'{s:,}' for s in sizes)} (data of {' or '.join(f'{rows - remainder + s:,}' for s in sizes)} "
        f"rows). Every valid --batch-size is a multiple of {slices} and leaves the same "
        f"{_count(rows % slices, 'row')} over, so trim or extend the data, or leave out --keep-remainder "
        f"(its {_count(remainder, 'row')} are then not used)")


def _concat_steps(parts):
    """One collect_stats Dataset from consecutive ones (e.g. the full batches, then the short last one)."""
    import numpy as np
    import xarray as xr

    if len(parts) == 1:
        return parts[0]
    per_stack = [name for name in parts[0].data_vars if "step" not in parts[0][name].dims]
    out = xr.concat([p.drop_vars(per_stack) for p in parts], dim="step", data_vars="all", coords="minimal",
                    compat="override", join="exact")
    out = out.merge(parts[0][per_stack]).assign_coords(step=np.arange(sum(p.sizes["step"] for p in parts)))
    out["step"].attrs = dict(parts[0]["step"].attrs)
    out.attrs = {**parts[0].attrs, "num_steps": out.sizes["step"]}
    return out


#: What ``scwork stats`` says before the first engine call when the kernels need compiling.
COMPILE_HINT = ("compiling numba kernels on first use (about 20 s on an idle machine, more under load; "
                "cached afterwards; `scwork warmup` does it ahead)")


def _kernels_compiled() -> bool:
    """Whether the engine's statistics kernels are ready: compiled in this process or in numba's cache.

    Checks the kernel a statistics step enters on each of the engine's two paths:
    ``stack_slices`` (slice by slice) and ``count_groups`` (the split path, which the
    engine picks for some batches and never compiles ``stack_slices`` on); they take
    most of the first-use compile time, the kernels they call compile with them. Ready
    when either is. Cheap: imports the kernel modules (the engine imports them anyway)
    and reads the kernels' small cache indexes; compiles nothing. True when it cannot
    tell, so that a change of numba's internals never makes the command print a wrong
    hint or fail.
    """
    try:
        import numba

        from scwork.sharding import _kernels, _split_kernels
    except ImportError:
        return True
    if numba.config.DISABLE_JIT:     # plain Python functions: nothing to compile
        return True
    try:
        return any(bool(kernel.signatures) or bool(kernel._cache._cache_file._load_index())  # numba's private cache API
                   for kernel in (_kernels.stack_slices, _split_kernels.count_groups))
    except Exception:  # noqa: BLE001 - a hint is not worth failing the command
        return True


def _hint_compiling(args: argparse.Namespace, progress: bool | None) -> None:
    """Say on stderr, in one line, that the first engine call compiles the kernels.

    Said in text mode whether or not stderr is a terminal (a run in a script or CI
    waits as long; one line in a log explains it); not with ``--json``, and not when
    progress output is switched off (``--no-progress``, ``SCWORK_PROGRESS=0``).
    """
    from scwork._progress import progress_enabled

    if args.json or getattr(args, "scheduler", None) is not None:  # JSON stays quiet; a cluster compiles remotely
        return
    if progress_enabled(progress) is False:
        return
    if not _kernels_compiled():
        print(f"scwork {args.command}: {COMPILE_HINT}", file=sys.stderr, flush=True)


def first_batch_stats(cfg, ids: str, batch_size: int, *, progress: bool | None = None):
    """Statistics of the first full batch of ``ids`` (a file, a directory or a glob of shards) on ``cfg``'s plan.

    The readers of ``scwork stats``; observed counts only (limits switched off, as in
    :func:`~scwork.sharding.collect_stats`). Returns a Dataset with dims ``stack,
    device, sc, partition`` (the ``step`` dim taken at 0).
    """
    from scwork.sharding import collect_stats, stats_over_dataset

    if _is_dataset(ids):
        if not (os.path.isdir(ids) or glob.glob(ids)):
            raise _UsageError(f"{ids}: no file matches this pattern")
        with stats_over_dataset(ids, cfg.features, cfg.topology, batch_size=batch_size, stacking=cfg.stacking,
                                config=cfg.sparsecore_config, stack_limits=cfg.stack_limits,
                                columns=dict(cfg.columns), progress=progress, tune=None) as result:
            step_stats = result.step_stats.compute() if result.dask_backed else result.step_stats
    else:
        full, _, _ = _file_batches(cfg, ids, batch_size)
        step_stats = collect_stats(full, cfg.features, cfg.topology, stacking=cfg.stacking,
                                   config=cfg.sparsecore_config, stack_limits=cfg.stack_limits, max_steps=1,
                                   progress=progress)
    return step_stats.isel(step=0)


def _check_outputs(args: argparse.Namespace) -> None:
    """Usage error for an output that cannot be written, before any work (and before any file is written)."""
    if args.out is not None:
        if Path(args.out).suffix.lower() not in (".json", ".csv"):
            raise _UsageError(f"--out {args.out}: name the limits file .json or .csv (the format follows the suffix)")
        check_output_file(args.out, "--out")
    if args.fdo_dir is not None:
        check_output_dir(args.fdo_dir, "--fdo-dir")
        if args.out is not None and os.path.abspath(args.out) == os.path.abspath(args.fdo_dir):
            raise _UsageError(f"--out {args.out} and --fdo-dir {args.fdo_dir} name the same path; give each its own")


def _cmd_stats(args: argparse.Namespace) -> int:
    from scwork.config import load_config

    method, percentile = _checked_stats_options(args)
    _check_outputs(args)
    cfg = load_config(args.config)
    batch_size = cfg.require_batch_size(args.batch_size)
    progress = False if args.no_progress else None
    if _is_dataset(args.ids):
        step_stats, tuned, num_rows, last_batch = _stats_of_dataset(args, cfg, batch_size, progress, method,
                                                                    percentile)
    else:
        step_stats, tuned, num_rows, last_batch = _stats_of_file(args, cfg, batch_size, progress, method,
                                                                 percentile)
    rows = _stats_rows(step_stats, tuned)
    written, fdo_file = _write_stats_outputs(args, cfg, batch_size, step_stats, tuned)
    num_steps = int(step_stats.sizes["step"])
    unused_rows = num_rows - ((num_steps - 1) * batch_size + last_batch)
    if args.json:
        _print_json({"ids": args.ids, "config": args.config, "batch_size": batch_size, "steps": num_steps,
                     "rows": num_rows, "unused_rows": unused_rows, "last_batch_size": last_batch,
                     "keep_remainder": args.keep_remainder, "topology": _topology_text(cfg.topology),
                     "method": method, "percentile": percentile if method == "percentile" else None,
                     "stacks": rows, "out": written, "fdo_file": fdo_file})
        return EXIT_OK
    _print_stats_report(args, cfg, batch_size, method, percentile, num_rows, num_steps, last_batch, rows,
                        written, fdo_file)
    return EXIT_OK


def _checked_stats_options(args: argparse.Namespace) -> tuple[str, float]:
    """``(method, percentile)`` of ``scwork stats`` after checking them and ``--steps``."""
    method = args.method
    if args.percentile is not None:
        if method == "max":
            raise _UsageError("--percentile applies to --method percentile, not --method max")
        method = "percentile"
    method = method or "max"
    percentile = 99.0 if args.percentile is None else args.percentile
    if not 0 < percentile <= 100:
        raise _UsageError(f"--percentile must be in (0, 100], got {percentile:g}")
    if args.steps is not None and args.steps < 1:
        raise _UsageError(f"--steps must be >= 1, got {args.steps}")
    return method, percentile


def _stats_of_dataset(args, cfg, batch_size: int, progress, method: str, percentile: float):
    """``(step_stats, tuned, num_rows, last_batch)`` of a directory or glob of shards."""
    if not (os.path.isdir(args.ids) or glob.glob(args.ids)):
        raise _UsageError(f"{args.ids}: no file matches this pattern")
    import re

    from scwork.errors import InputError
    from scwork.sharding import stats_over_dataset

    _hint_compiling(args, progress)
    try:
        with stats_over_dataset(
                args.ids, cfg.features, cfg.topology, batch_size=batch_size,
                drop_remainder=not args.keep_remainder, stacking=cfg.stacking, config=cfg.sparsecore_config,
                stack_limits=cfg.stack_limits, columns=dict(cfg.columns), scheduler=args.scheduler,
                progress=progress, tune=method, percentile=percentile,
                on_out_of_vocabulary=args.on_out_of_vocabulary) as result:
            # Fetch per-step arrays a distributed run left on the workers before the client closes.
            step_stats = result.step_stats.compute() if result.dask_backed else result.step_stats
            tuned = result.tuned
            num_rows, last_batch = result.num_samples + result.dropped_samples, result.last_batch_size
    except InputError as err:
        # The engine counts the rows while it scans the shards; its message names its own
        # drop_remainder argument, so say it again in terms of the command's options.
        found = re.search(r"final batch would hold \d+ samples \((\d+) samples", str(err))
        if args.keep_remainder and found:
            _check_remainder(int(found[1]), batch_size, cfg.topology)
        raise
    if args.steps is not None and args.steps < step_stats.sizes["step"]:
        from scwork.sharding import tune_limits

        step_stats = step_stats.isel(step=slice(0, args.steps))
        tuned = tune_limits(step_stats, method=method, percentile=percentile)
        last_batch = batch_size
    return step_stats, tuned, num_rows, last_batch


def _stats_of_file(args, cfg, batch_size: int, progress, method: str, percentile: float):
    """``(step_stats, tuned, num_rows, last_batch)`` of one file of ids."""
    if args.scheduler is not None:
        raise _UsageError("--scheduler distributes a directory or glob of shards; IDS is a single file")
    from scwork.sharding import collect_stats, tune_limits

    full, short, table = _file_batches(cfg, args.ids, batch_size, args.keep_remainder)
    num_rows = table.num_samples
    if short is not None and args.steps is not None and args.steps <= len(full):
        short = None            # --steps stops before the partial batch
    if short is not None:
        _check_remainder(num_rows, batch_size, cfg.topology)
    _hint_compiling(args, progress)
    if short is None:
        step_stats = collect_stats(full, cfg.features, cfg.topology, stacking=cfg.stacking,
                                   config=cfg.sparsecore_config, stack_limits=cfg.stack_limits,
                                   on_out_of_vocabulary=args.on_out_of_vocabulary, max_steps=args.steps,
                                   progress=progress)
        last_batch = batch_size
    else:
        # collect_stats takes one batch size: the short batch runs on its own, with the plan of the full ones.
        plan = cfg.stacking_plan(batch_size)
        step_stats = _concat_steps([
            collect_stats(batches, cfg.features, cfg.topology, stacking=plan, config=cfg.sparsecore_config,
                          on_out_of_vocabulary=args.on_out_of_vocabulary, progress=progress)
            for batches in (full, short) if len(batches)])
        last_batch = num_rows % batch_size
    tuned = tune_limits(step_stats, method=method, percentile=percentile)
    return step_stats, tuned, num_rows, last_batch


def _write_stats_outputs(args, cfg, batch_size: int, step_stats, tuned) -> tuple[str | None, str | None]:
    """Write ``--out`` and ``--fdo-dir``; return the paths written (None where not asked for)."""
    written = fdo_file = None
    # Every output is staged first and renamed into place only when all are written:
    # a failure leaves the old files (or none), never a part of the outputs.
    with StagedOutputs() as outputs:
        if args.out is not None:
            from scwork.sharding import write_limits

            limits = tuned.to_limits()
            limits.metadata.update({"ids": os.fspath(args.ids), "config": os.fspath(args.config),
                                    "batch_size": batch_size, "topology": _topology_text(cfg.topology)})
            suffix = Path(args.out).suffix.lower()[1:]
            written = str(outputs.stage(args.out, lambda tmp: write_limits(limits, tmp, format=suffix), "--out"))
        if args.fdo_dir is not None:
            from scwork.sharding import write_fdo_stats

            folder = outputs.make_dir(args.fdo_dir, "--fdo-dir")
            fdo_file = str(outputs.stage_in_dir(
                folder, lambda tmp: write_fdo_stats(step_stats, tmp, format=args.fdo_format), "--fdo-dir"))
    return written, fdo_file


def _print_stats_report(args, cfg, batch_size: int, method: str, percentile: float, num_rows: int,
                        num_steps: int, last_batch: int, rows, written, fdo_file) -> None:
    """The text report of ``scwork stats``: a note on unused rows (stderr), the limits table, the files written."""
    # The partial batch left out (not rows that --steps chose to skip).
    dropped = num_rows % batch_size if num_steps == num_rows // batch_size and last_batch == batch_size else 0
    if dropped:
        slices = cfg.topology.num_devices * cfg.topology.sparsecores_per_device
        how = ("--keep-remainder runs them as a last, smaller step" if dropped % slices == 0 else
               f"--keep-remainder could run them as a smaller step only if they were a multiple of {slices} "
               "(the slices every batch is split over)")
        print(f"scwork stats: note: the last {_count(dropped, 'row')} of {num_rows:,} (a partial batch, fewer than "
              f"{batch_size:,}) were not used; {how}", file=sys.stderr)
    how = "max over steps" if method == "max" else f"{percentile:g}th percentile of the steps"
    if last_batch == batch_size:
        steps = f"{_count(num_steps, 'step')} of {_count(batch_size, 'sample')}"
    elif num_steps == 1:
        steps = f"1 step of {_count(last_batch, 'sample')} (a partial batch: --batch-size is {batch_size:,})"
    else:
        steps = f"{num_steps:,} steps of {_count(batch_size, 'sample')} (the last one of {last_batch:,})"
    print(f"{steps} from {args.ids} on {_topology_text(cfg.topology)}")
    print(f"limits per (source SparseCore, partition): observed, and tuned ({how}, rounded up to 8)")
    print()
    _print_table(rows, ["stack", "steps", "observed_max_ids", "observed_max_unique_ids", "observed_buffer",
                        "max_ids_per_partition", "max_unique_ids_per_partition", "required_buffer_size",
                        "share_steps_needing_minibatching"],
                 ["stack", "steps", "max ids", "max unique", "buffer", "tuned max ids", "tuned unique",
                  "tuned buffer", "share of steps over"])
    if written:
        print(f"\nwrote limits to {written}")
    if fdo_file:
        print(f"wrote FDO stats to {fdo_file}")
