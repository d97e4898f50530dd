"""The small ``scwork`` commands: ``lab``, ``layout``, ``hardware`` and ``warmup``.

Part of :mod:`scwork.cli`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import sys
from pathlib import Path

from scwork._cli_common import EXIT_OK, _fmt_bytes, _print_json, _UsageError
from scwork.errors import ScworkError

#: The notebook ``scwork lab`` opens.
TOUR = "00_tour.ipynb"
#: Layout maps are drawn for views up to this many rows and columns.
MAP_MAX_ROWS, MAP_MAX_COLUMNS = 16, 32

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


#: The TCP ports ``--port`` may name (0: any free one).
MAX_PORT = 65535


def _cmd_lab(args: argparse.Namespace) -> int:
    from scwork.notebook_hygiene import PRE_SAVE_HOOK

    if not 0 <= args.port <= MAX_PORT:
        raise _UsageError(f"--port {args.port}: a TCP port is from 0 (any free one) to {MAX_PORT}")
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
