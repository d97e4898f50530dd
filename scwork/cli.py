"""The ``scwork`` command.

Subcommands (every one takes ``--help``; most take ``--json`` for machine-readable
output):

``scwork stats IDS --config model.toml``
    Per-stack limits from real ids: IDS is a CSV/TSV/Parquet file (one row per
    sample, one column per feature) or a directory / glob of shards. Prints the
    observed max ids, max unique ids per partition and required buffer size over
    the steps, and the tuned limits; ``--out limits.json|.csv`` writes them,
    ``--fdo-dir DIR`` writes jax-tpu-embedding FDO stats (``--fdo-format csv`` for
    the CSV client's files). Rows after the last full
    batch are not used (a note on stderr says how many) unless ``--keep-remainder``.
    Try ``scwork stats examples/ids.csv.gz --config examples/model.toml``.
``scwork memory --config model.toml``
    Does the model fit in SPMEM and HBM? Exit status 0 when it fits, 1 when it
    does not, 2 on bad input.
``scwork allreduce --topology torus:16x16``
    Cost of all-reduce algorithms (the multi-dimensional all-reduce patent) on a ring, torus, mesh or grid.
``scwork layout TEXT``
    Physical and tiled shape of an XLA layout, bytes, padding and a map of
    addresses.
``scwork hardware [CHIP]``
    The hardware catalog, or one chip with the source of every value.
``scwork warmup``
    Compile every numba kernel now (with a progress bar).
``scwork lab``
    JupyterLab on the tour notebook.

Exit status: 0 success; 1 only for ``scwork memory`` when the model does not fit;
2 for bad input (unknown option, invalid config, unreadable file, ...), with a
one-line error on stderr; 130 when interrupted.

Model config files are described in :mod:`scwork.config`.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import secrets
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scwork.errors import ScworkError

__all__ = ["main", "build_parser", "find_notebooks_dir", "parse_network_spec"]

TOUR = "00_tour.ipynb"

#: Exit statuses of the command.
EXIT_OK, EXIT_DOES_NOT_FIT, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

#: Layout maps are drawn for views up to this many rows and columns.
MAP_MAX_ROWS, MAP_MAX_COLUMNS = 16, 32


class _UsageError(ScworkError):
    """Bad command-line input found after parsing (e.g. options that exclude each other)."""


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (the usage is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# ======================================================================================
# output helpers
# ======================================================================================
def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (np.ndarray, tuple, set)):
        return list(obj.tolist() if isinstance(obj, np.ndarray) else obj)
    return str(obj)


def _print_json(data: Any) -> None:
    print(json.dumps(data, default=_json_default))


def _format(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        # Large values in full (47395, not 4.74e+04); small ones with 4 significant digits.
        return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return str(value)


def _print_table(rows: list[dict[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None) -> None:
    """Aligned text table: text left, numbers right."""
    headers = list(headers or columns)
    cells = [[_format(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row.get(c), (int, float)) or row.get(c) is None for row in rows) for c in columns]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    print(line(headers))
    print(line(["-" * w for w in widths]))
    for r in cells:
        print(line(r))


def _count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with ``noun`` in the right number: ``_count(1, "device")`` is ``"1 device"``, 2 gives ``"2 devices"``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def _topology_text(topology) -> str:
    """``"4 v5p chips (4 devices x 4 SparseCores = 16 partitions)"``, in words with the right plurals."""
    chip = f"{topology.chip} chip" if topology.chip else "chip"
    grid = f" ({'x'.join(map(str, topology.shape))})" if len(topology.shape) > 1 else ""
    return (f"{_count(topology.num_chips, chip)}{grid} ({_count(topology.num_devices, 'device')} x "
            f"{_count(topology.sparsecores_per_device, 'SparseCore')} = "
            f"{_count(topology.num_partitions, 'partition')})")


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


# ======================================================================================
# lab
# ======================================================================================
def find_notebooks_dir(start: Path | None = None) -> Path | None:
    """The ``notebooks/`` folder holding the tour: the current directory's, else the source checkout's."""
    candidates = []
    if start is not None:
        candidates.append(Path(start))
    candidates.append(Path.cwd())
    # An editable install imports scwork from the checkout, whose root holds notebooks/.
    candidates.append(Path(__file__).resolve().parent.parent)
    for base in candidates:
        for folder in (base / "notebooks", base):
            if (folder / TOUR).is_file():
                return folder
    return None


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise ScworkError("no free TCP port on 127.0.0.1")


def _cmd_lab(args: argparse.Namespace) -> int:
    from scwork.notebook_hygiene import PRE_SAVE_HOOK

    try:
        import jupyterlab  # noqa: F401  (only checks that the lab extra is installed)
    except ImportError:
        raise ScworkError('JupyterLab is not installed: pip install -e ".[lab]"') from None
    notebooks = find_notebooks_dir(Path(args.dir) if args.dir else None)
    if notebooks is None:
        raise ScworkError(
            f"cannot find notebooks/{TOUR}: run scwork lab from the scwork checkout or pass --dir"
        )
    root = notebooks.parent
    port = _free_port(args.port)
    token = args.token if args.token is not None else secrets.token_hex(16)
    url = f"http://127.0.0.1:{port}/lab/tree/{notebooks.name}/{TOUR}"
    if token:
        url += f"?token={token}"
    command = [
        sys.executable, "-m", "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.port={port}",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--LabApp.default_url=/lab/tree/{notebooks.name}/{TOUR}",
        # scwork's notebooks are saved without outputs, so running them leaves git clean.
        f"--ContentsManager.pre_save_hook={PRE_SAVE_HOOK}",
    ]
    if args.no_browser:
        command.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Containers and CI often run as root; JupyterLab refuses that unless told.
        command.append("--allow-root")
    print(f"scwork lab: serving {root} at {url}", flush=True)
    # Become the server rather than its parent: signals (Ctrl-C, a supervisor's
    # SIGTERM) then reach JupyterLab itself and no orphaned server is left behind.
    os.chdir(root)
    os.execv(command[0], command)
    return 0  # pragma: no cover - execv does not return


# ======================================================================================
# layout
# ======================================================================================
def layout_map(shape) -> tuple[list[str] | None, str]:
    """Text map of a layout's padded first-tile view: each cell's buffer address.

    Returns ``(lines, note)``: ``lines`` is None when the view is not drawn (more
    than 2 non-trivial dimensions, or larger than 16 x 32 cells) and ``note`` says
    why; otherwise padding cells show ``.``, ``|`` separates tile columns and a
    blank line separates tile rows.
    """
    padded = tuple(shape.padded_view_shape)
    # Size-1 major dims (e.g. implicit ones added by a long tile) do not change the picture.
    dims = [i for i, s in enumerate(padded) if s != 1]
    if len(dims) > 2:
        return None, f"view {'x'.join(map(str, padded))} has more than 2 dimensions: no map"
    rows_n = padded[dims[0]] if len(dims) == 2 else 1
    cols_n = padded[dims[-1]] if dims else 1
    if rows_n > MAP_MAX_ROWS or cols_n > MAP_MAX_COLUMNS:
        return None, (f"view {rows_n}x{cols_n} is larger than {MAP_MAX_ROWS}x{MAP_MAX_COLUMNS} cells: no map")
    addresses = shape.view_index_map().reshape(rows_n, cols_n)
    padding = shape.view_padding_mask().reshape(rows_n, cols_n)
    tiles = shape.view_tile_map().reshape(rows_n, cols_n)
    width = max(1, len(str(int(addresses.max())))) if addresses.size else 1
    # Rows belong to different tiles only if the first tile spans rows too (else every row would split).
    tile_spans_rows = len(shape._view_parts[2]) >= 2
    lines = []
    for r in range(rows_n):
        if r and tile_spans_rows and tiles[r, 0] != tiles[r - 1, 0]:
            lines.append("")
        cells = []
        for c in range(cols_n):
            if c and tiles[r, c] != tiles[r, c - 1]:
                cells.append("|")
            cells.append(".".rjust(width) if padding[r, c] else str(int(addresses[r, c])).rjust(width))
        lines.append(" ".join(cells))
    note = (f"map of the padded view {rows_n}x{cols_n}: buffer address of every cell, '.' = padding"
            + (", '|' and blank lines separate tiles" if shape.tiles else ""))
    return lines, note


def _cmd_layout(args: argparse.Namespace) -> int:
    from scwork import layout

    shape = layout.parse(args.text)
    summary = shape.summary()
    if args.json:
        print(json.dumps(summary, default=list))
        return EXIT_OK
    for key, value in summary.items():
        if key == "padding_fraction":
            value = f"{value:.1%}"
        print(f"{key:>22}: {value}")
    print(f"{'padded_view_shape':>22}: {tuple(shape.padded_view_shape)}")
    lines, note = layout_map(shape)
    print()
    print(note)
    if lines is not None:
        for line in lines:
            print(("  " + line).rstrip())
    return EXIT_OK


# ======================================================================================
# hardware, warmup
# ======================================================================================
def _cmd_hardware(args: argparse.Namespace) -> int:
    from scwork import hardware

    if args.chip is None:
        rows = [{"name": c.name, "kind": c.kind, "marketing_name": c.marketing_name} for c in hardware.chips()]
        if args.json:
            print(json.dumps(rows))
        else:
            for row in rows:
                print(f"{row['name']:>8}  {row['kind']}  {row['marketing_name']}")
        return EXIT_OK
    from scwork.hardware.catalog import field_records

    records = field_records(args.chip)
    if args.json:
        # Typed values (4, not "4"; null when unpublished) with their unit, meaning and source.
        print(json.dumps(records))
        return EXIT_OK
    for field, record in records.items():
        value, unit, source = record["value"], record["unit"] or "", record["source"]
        if value is None:
            text = "not published"
        else:
            text = f"{value} {unit}".rstrip()
            # The exact number first, a readable size next to it.
            if unit == "bytes" and value >= 2**10:
                text += f" ({_fmt_bytes(value)})"
            elif unit == "bytes/s" and value >= 1e9:
                text += f" ({value / 1e9:g} GB/s)"
        print(f"{field:>30}: {text}" + (f"   [{source}]" if source else ""))
    return EXIT_OK


def _cmd_warmup(args: argparse.Namespace) -> int:
    import scwork

    progress = False if args.no_progress else None
    done = scwork.warmup(progress=progress)
    if args.json:
        _print_json({"warmed_up": done})
    else:
        for name in done:
            print(f"warmed up {name}")
    return EXIT_OK


# ======================================================================================
# stats
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
COMPILE_HINT = "compiling numba kernels on first use (about 20 s; `scwork warmup` does it ahead)"


def _kernels_compiled() -> bool:
    """Whether the engine's statistics kernel is ready: compiled in this process or in numba's cache.

    Checks ``stack_slices``, the kernel every statistics step enters (it takes most of
    the first-use compile time; the kernels it calls compile with it). Cheap: imports
    the kernel module (the engine imports it anyway) and reads the kernel's small
    cache index; compiles nothing. True when it cannot tell, so that a change of
    numba's internals never makes the command print a wrong hint or fail.
    """
    try:
        import numba

        from scwork.sharding import _kernels
    except ImportError:
        return True
    if numba.config.DISABLE_JIT:     # plain Python functions: nothing to compile
        return True
    kernel = _kernels.stack_slices
    try:
        return bool(kernel.signatures) or bool(kernel._cache._cache_file._load_index())  # numba's private cache API
    except Exception:  # noqa: BLE001 - a hint is not worth failing the command
        return True


def _hint_compiling(args: argparse.Namespace, progress: bool | None) -> None:
    """Say on stderr that the first engine call compiles the kernels (text mode, in a terminal or with progress on)."""
    from scwork._progress import progress_enabled

    if args.json or args.scheduler is not None:   # JSON runs stay quiet; a cluster compiles on its workers
        return
    shown = progress_enabled(progress)
    if shown is False or (shown is None and not sys.stderr.isatty()):
        return
    if not _kernels_compiled():
        print(f"scwork {args.command}: {COMPILE_HINT}", file=sys.stderr, flush=True)


def _cmd_stats(args: argparse.Namespace) -> int:
    from scwork.config import load_config

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
    if args.out is not None and Path(args.out).suffix.lower() not in (".json", ".csv"):
        raise _UsageError(f"--out {args.out}: name the limits file .json or .csv (the format follows the suffix)")
    cfg = load_config(args.config)
    batch_size = cfg.require_batch_size(args.batch_size)
    progress = False if args.no_progress else None

    if _is_dataset(args.ids):
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
    else:
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

    rows = _stats_rows(step_stats, tuned)
    written = fdo_file = None
    if args.out is not None:
        from scwork.sharding import write_limits

        limits = tuned.to_limits()
        limits.metadata.update({"ids": os.fspath(args.ids), "config": os.fspath(args.config),
                                "batch_size": batch_size, "topology": _topology_text(cfg.topology)})
        written = str(write_limits(limits, args.out))
    if args.fdo_dir is not None:
        from scwork.sharding import write_fdo_stats

        fdo_file = str(write_fdo_stats(step_stats, args.fdo_dir, format=args.fdo_format))
    num_steps = int(step_stats.sizes["step"])
    unused_rows = num_rows - ((num_steps - 1) * batch_size + last_batch)
    # The partial batch left out (not rows that --steps chose to skip).
    dropped = num_rows % batch_size if num_steps == num_rows // batch_size and last_batch == batch_size else 0
    if args.json:
        _print_json({"ids": args.ids, "config": args.config, "batch_size": batch_size, "steps": num_steps,
                     "rows": num_rows, "unused_rows": unused_rows, "last_batch_size": last_batch,
                     "keep_remainder": args.keep_remainder, "topology": _topology_text(cfg.topology),
                     "method": method, "percentile": percentile if method == "percentile" else None,
                     "stacks": rows, "out": written, "fdo_file": fdo_file})
        return EXIT_OK
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
    return EXIT_OK


# ======================================================================================
# memory
# ======================================================================================
def _parse_limits_pair(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MAX_IDS,MAX_UNIQUE_IDS such as 512,256, got {text!r}") from None
    if a < 1 or b < 1:
        raise argparse.ArgumentTypeError(f"limits must be >= 1, got {text!r}")
    return a, b


def _parse_size_arg(text: str) -> int:
    from scwork.config import parse_size
    from scwork.errors import ConfigError

    try:
        return parse_size(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


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


# ======================================================================================
# allreduce
# ======================================================================================
#: Algorithms of :data:`scwork.collectives.ALGORITHMS` that compute an all-reduce (``--all``).
ALL_REDUCE_ALGORITHMS: tuple[str, ...] = (
    "single_path", "pincer", "rotated_pincer", "improved_rotated_pincer", "ring", "bidirectional_ring",
    "dimension_by_dimension", "multi_color", "mesh_loops",
)


def parse_network_spec(text: str) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """``(shape, wraparound)`` of a topology spec such as ``torus:16x16`` or ``grid:16x4:wrap=10``.

    Kinds: ``ring:N`` (wraps), ``line:N`` (does not), ``torus:AxB[xC]`` (every
    dimension wraps), ``mesh:AxB[xC]`` (none wraps), ``grid:AxB[xC]:wrap=FLAGS``
    (one ``1``/``0`` per dimension).

    Raises
    ------
    ConfigError
        Malformed text; the message shows the accepted forms.

    Examples
    --------
    >>> parse_network_spec("grid:16x4:wrap=10")
    ((16, 4), (True, False))
    >>> parse_network_spec("ring:8")
    ((8,), (True,))
    """
    from scwork.errors import ConfigError

    forms = "ring:8, line:8, torus:16x16, mesh:4x4, grid:16x4:wrap=10"
    parts = text.strip().lower().split(":")
    kind = parts[0]
    if kind not in ("ring", "line", "torus", "mesh", "grid") or len(parts) < 2:
        raise ConfigError(f"topology {text!r}: expected KIND:DIMS with KIND ring, line, torus, mesh or grid, "
                          f"e.g. {forms}")
    try:
        shape = tuple(int(d) for d in parts[1].split("x"))
    except ValueError:
        raise ConfigError(f"topology {text!r}: dimensions must be integers joined by 'x', e.g. {forms}") from None
    if any(d < 1 for d in shape):
        raise ConfigError(f"topology {text!r}: every dimension needs at least one chip")
    if kind in ("ring", "line") and len(shape) != 1:
        raise ConfigError(f"topology {text!r}: a {kind} has one dimension, e.g. {kind}:8")
    if not 1 <= len(shape) <= 3:
        raise ConfigError(f"topology {text!r}: networks have 1 to 3 dimensions")
    extra = parts[2:]
    if kind == "grid":
        if len(extra) != 1 or not extra[0].startswith("wrap="):
            raise ConfigError(f"topology {text!r}: a grid needs :wrap=FLAGS, one 1/0 per dimension, "
                              "e.g. grid:16x4:wrap=10")
        flags = extra[0][5:]
        if len(flags) != len(shape) or set(flags) - {"0", "1"}:
            raise ConfigError(f"topology {text!r}: wrap={flags} must have one 1/0 per dimension "
                              f"({len(shape)} here), e.g. wrap={'1' * len(shape)}")
        return shape, tuple(f == "1" for f in flags)
    if extra:
        raise ConfigError(f"topology {text!r}: unexpected {':'.join(extra)!r}; only grid takes :wrap=FLAGS")
    if kind == "ring" and shape[0] < 2:
        raise ConfigError(f"topology {text!r}: a ring needs at least 2 chips")
    wrap = kind in ("ring", "torus")
    return shape, (wrap,) * len(shape)


def _network_text(shape: tuple[int, ...], wrap: tuple[bool, ...], cores_per_chip: int) -> str:
    """``"a ring of 8 chips"``, ``"a 4x4 torus of 16 chips, 2 cores per chip"``: a parsed spec in words."""
    chips = _count(math.prod(shape), "chip")
    if len(shape) == 1:
        text = f"a {'ring' if wrap[0] else 'line'} of {chips}"
    else:
        kind = ("torus" if all(wrap) else "mesh" if not any(wrap) else
                f"grid (wrap={','.join('T' if w else 'F' for w in wrap)})")
        text = f"a {'x'.join(map(str, shape))} {kind} of {chips}"
    return text + (f", {_count(cores_per_chip, 'core')} per chip" if cores_per_chip != 1 else "")


def _cmd_allreduce(args: argparse.Namespace) -> int:
    from scwork import collectives
    from scwork.errors import ConfigError

    shape, wrap = parse_network_spec(args.topology)
    if args.algorithm and args.all:
        raise _UsageError("give --algorithm NAME ... or --all, not both")
    if args.pipeline_chunks < 1:
        raise _UsageError(f"--pipeline-chunks must be >= 1, got {args.pipeline_chunks}")
    if args.bytes < 1:
        raise _UsageError("--bytes must be at least 1 byte")
    from scwork.collectives.schedule import MAX_NBYTES

    if args.bytes > MAX_NBYTES:
        raise _UsageError(f"--bytes {args.bytes:,} is more than the limit of {MAX_NBYTES:,} bytes per node "
                          "(scwork.collectives.schedule.MAX_NBYTES, 1 PiB)")
    net = collectives.Network.grid(shape, wrap, cores_per_chip=args.cores_per_chip, chip=args.chip)
    names = args.algorithm or list(ALL_REDUCE_ALGORITHMS)
    where = _network_text(shape, wrap, args.cores_per_chip)
    explicit = bool(args.algorithm)
    rows, skipped = [], []
    for name in names:
        try:
            schedule = collectives.build(name, net)
        except ScworkError as err:
            if explicit:
                raise ConfigError(f"algorithm {name!r} does not run on {where}: {str(err).splitlines()[0]}") \
                    from None
            skipped.append({"algorithm": name, "reason": str(err).splitlines()[0]})
            continue
        try:
            # Streams over the steps (bounded memory); refuses schedules beyond the
            # engine's limits with a ConfigError that names the size and the limit.
            c = collectives.cost(schedule, nbytes=args.bytes, pipeline_chunks=args.pipeline_chunks)
            conflicts = schedule.num_conflicts()
            transfers = schedule.num_transfers
        except MemoryError:
            raise ConfigError(f"algorithm {name!r} on {where} ({net.num_nodes:,} nodes) ran out of memory; "
                              "use a smaller network or --algorithm multi_color") from None
        except ScworkError as err:
            if explicit:
                raise
            skipped.append({"algorithm": name, "reason": str(err).splitlines()[0]})
            continue
        total = float(c["total_time"])
        rows.append({
            "algorithm": name,            # what was asked for
            "schedule": schedule.name,    # what the engine built for it (e.g. a ring for multi_color on a ring)
            "collective": schedule.collective,
            "steps": schedule.num_steps,
            "transfers": transfers,
            "time_s": total,
            "time_us": total * 1e6,
            "algbw_GBps": float(c["algbw"]) / 1e9 if math.isfinite(float(c["algbw"])) else None,
            "busbw_GBps": float(c["busbw"]) / 1e9 if math.isfinite(float(c["busbw"])) else None,
            "conflicts": conflicts,
        })
    if args.json:
        _print_json({"network": net.name, "network_description": where, "nodes": net.num_nodes,
                     "chip": args.chip or collectives.DEFAULT_CHIP,
                     "bytes": args.bytes, "pipeline_chunks": args.pipeline_chunks,
                     "link_bandwidth_Bps": float(net.link_classes["ici"].bandwidth),
                     "link_latency_s": float(net.link_classes["ici"].latency),
                     "algorithms": rows, "skipped": skipped})
        return EXIT_OK
    ici = net.link_classes["ici"]
    print(f"all-reduce of {_fmt_bytes(args.bytes)} per node on {where} ({_count(net.num_nodes, 'node')}); "
          f"ICI {ici.bandwidth / 1e9:g} GB/s per link and direction, {ici.latency * 1e6:g} us per hop")
    print("alpha-beta model (scwork.collectives.cost); busbw = algbw * 2(n-1)/n (nccl-tests)")
    print()
    if rows:
        # The name asked for first; the engine's schedule when it differs (ring -> bidirectional_ring).
        rows = [{**row, "algorithm": row["algorithm"] if row["schedule"] == row["algorithm"] else
                 f"{row['algorithm']} ({row['schedule'].replace('_', ' ')} schedule)"} for row in rows]
        _print_table(rows, ["algorithm", "steps", "transfers", "time_us", "algbw_GBps", "busbw_GBps", "conflicts"],
                     ["algorithm", "steps", "transfers", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "conflicts"])
    for s in skipped:
        print(f"  n/a {s['algorithm']}: {s['reason']}")
    return EXIT_OK


# ======================================================================================
# parser
# ======================================================================================
def build_parser() -> argparse.ArgumentParser:
    """The ``scwork`` argument parser (one subparser per command)."""
    parser = _Parser(prog="scwork", description="SparseCore workbench",
                     epilog="exit status: 0 ok, 1 model does not fit (scwork memory), 2 bad input")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    lab = sub.add_parser("lab", help="open JupyterLab on the tour notebook")
    lab.add_argument("--no-browser", action="store_true", help="print the URL and keep serving")
    lab.add_argument("--port", type=int, default=8888, help="preferred port (default 8888; a free one otherwise)")
    lab.add_argument("--dir", default=None, help="folder holding notebooks/ (default: cwd, then the checkout)")
    lab.add_argument("--token", default=None, help="access token (default: random; '' disables)")
    lab.set_defaults(func=_cmd_lab)

    lay = sub.add_parser("layout", help="describe an XLA shape with layout, e.g. 'f32[3,5]{1,0:T(2,2)}'",
                         description="Physical and tiled shape, bytes, padding and (for small 2-D views) a map "
                                     "of the buffer address of every cell of the padded view.")
    lay.add_argument("text", help="shape with layout, e.g. 'bf16[4,8]{1,0:T(2,4)(2,1)}'")
    lay.add_argument("--json", action="store_true", help="machine-readable output")
    lay.set_defaults(func=_cmd_layout)

    hw = sub.add_parser("hardware", help="list catalog chips, or describe one with its sources")
    hw.add_argument("chip", nargs="?")
    hw.add_argument("--json", action="store_true", help="machine-readable output")
    hw.set_defaults(func=_cmd_hardware)

    warm = sub.add_parser("warmup", help="compile every numba kernel now (fills numba's cache)")
    warm.add_argument("--no-progress", action="store_true", help="no progress bar (also: SCWORK_PROGRESS=0)")
    warm.add_argument("--json", action="store_true", help="machine-readable output")
    warm.set_defaults(func=_cmd_warmup)

    st = sub.add_parser(
        "stats", help="per-stack limits (max ids, max unique ids, buffer sizes) from real ids",
        description="Run the sharding engine over every batch of IDS and report, per stacked table, the "
                    "observed max ids and max unique ids per (source SparseCore, partition), the required "
                    "CSR buffer size, and limits tuned from them.")
    st.add_argument("ids", help="CSV/TSV/Parquet file (one row per sample, one column per feature; a cell "
                                "holds 'a|b|c' for several ids), or a directory / glob of shards")
    st.add_argument("--config", required=True, help="model config file (.toml or .json; see scwork.config)")
    st.add_argument("--batch-size", type=int, default=None, help="global batch (default: the config's)")
    st.add_argument("--out", default=None, help="write the tuned limits here (.json or .csv)")
    st.add_argument("--fdo-dir", default=None, help="also write jax-tpu-embedding FDO stats (.npz) here")
    st.add_argument("--fdo-format", choices=("npz", "csv"), default="npz",
                    help="file format of --fdo-dir: 'npz' (NPZFileFDOClient, default) or 'csv' (CSVFileFDOClient)")
    st.add_argument("--steps", type=int, default=None, help="use at most this many batches")
    st.add_argument("--keep-remainder", action="store_true",
                    help="run the last partial batch (rows left after the full batches) as a last, smaller step; "
                         "it must divide over devices x SparseCores (default: those rows are not used, and a "
                         "note says how many)")
    st.add_argument("--method", choices=("max", "percentile"), default=None,
                    help="limit = max over steps (default), or a percentile of the steps")
    st.add_argument("--percentile", type=float, default=None,
                    help="percentile of the steps the limits cover (implies --method percentile; default 99)")
    st.add_argument("--on-out-of-vocabulary", choices=("error", "drop"), default="error",
                    help="ids >= a table's vocab_size: error (default) or drop and count them")
    st.add_argument("--scheduler", default=None,
                    help="Dask scheduler address for a directory of shards (default: local)")
    st.add_argument("--no-progress", action="store_true", help="no progress bar (also: SCWORK_PROGRESS=0)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=_cmd_stats)

    mem = sub.add_parser(
        "memory", help="does the model fit in SPMEM and HBM? (exit 0: fits, 1: does not, 2: bad input)",
        description="SPMEM per tile, HBM peak per chip, diagnoses and fixes for the model of a config file. "
                    "Exit status 0 when it fits, 1 when it does not fit, 2 on bad input.")
    mem.add_argument("--config", required=True, help="model config file (.toml or .json; see scwork.config)")
    mem.add_argument("--batch-size", type=int, default=None, help="global batch (default: the config's)")
    mem.add_argument("--num-chips", type=int, default=None, help="chips (default: the config's topology)")
    mem.add_argument("--num-serialized-tables", type=int, default=None,
                     help="xla_sc_num_serialized_tables_to_optimize_hbm")
    mem.add_argument("--maximum-parallel-iterations", type=int, default=None, help="steps of input prefetched")
    mem.add_argument("--dense-weights-bytes", type=_parse_size_arg, default=None,
                     help="dense weights per chip, e.g. 4GiB")
    mem.add_argument("--dtype", default=None, help="table dtype for every table: f32, bf16, f16, s8")
    mem.add_argument("--headroom", type=float, default=None, help="share of HBM kept free (default 0.1)")
    mem.add_argument("--limits", type=_parse_limits_pair, default=None, metavar="MAX_IDS,MAX_UNIQUE",
                     help="limits for every stack without its own, e.g. 512,256")
    mem.add_argument("--limits-file", default=None, help="per-stack limits file (scwork stats --out)")
    mem.add_argument("--stage-gather-operands-in-hbm", action="store_true",
                     help="gather operands in HBM instead of SPMEM")
    mem.add_argument("--json", action="store_true", help="machine-readable output")
    mem.set_defaults(func=_cmd_memory)

    ar = sub.add_parser(
        "allreduce", help="cost of all-reduce algorithms on a ring, torus, mesh or grid",
        description="Steps, transfers, time (alpha-beta model), algbw, busbw and link conflicts of the "
                    "all-reduce algorithms of scwork.collectives on a network of chips.")
    ar.add_argument("--topology", required=True,
                    help="ring:8, line:8, torus:16x16, mesh:4x4 or grid:16x4:wrap=10 (1/0 per dimension)")
    ar.add_argument("--cores-per-chip", type=int, default=1, help="nodes per chip (default 1)")
    ar.add_argument("--algorithm", nargs="+", default=None, metavar="NAME",
                    help="algorithms to cost (default: every all-reduce algorithm that runs on the network); "
                         "names: " + ", ".join(ALL_REDUCE_ALGORITHMS) + ", reduce_scatter, all_gather, all_to_all")
    ar.add_argument("--all", action="store_true", help="every all-reduce algorithm that runs on the network")
    ar.add_argument("--bytes", type=_parse_size_arg, default=64 * 2**20,
                    help="vector size per node, e.g. 64MiB (default), 1GB, 4096")
    ar.add_argument("--chip", default=None, help="catalog chip for the ICI bandwidth (default v5e)")
    ar.add_argument("--pipeline-chunks", type=int, default=1, help="segments per transfer (default 1: no pipelining)")
    ar.add_argument("--json", action="store_true", help="machine-readable output")
    ar.set_defaults(func=_cmd_allreduce)
    return parser


#: Exit status when stdout's reader closed the pipe (128 + SIGPIPE, as the shell reports).
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"scwork {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`scwork hardware --json | head -c 10`): stop quietly, as
        # Unix tools do, with the status of a SIGPIPE'd process; point stdout at devnull
        # so that the interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except (ScworkError, OSError) as err:
        text = str(err).strip() or type(err).__name__
        first_line = text.splitlines()[0]
        print(f"scwork {args.command}: error: {first_line}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
