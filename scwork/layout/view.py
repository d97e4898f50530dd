"""Windows and overviews of a layout's first-tile view, for layouts of any size.

:meth:`Shape.view_index_map` and friends build whole arrays: fine for a 512 x 512
layout, impossible for ``bf16[65536,65536]`` (4.3 billion cells). The functions
here compute only what is looked at:

- :func:`view_window`: every cell of a rectangle of the view (element level);
- :func:`view_overview`: a rectangle summarised in blocks (one block per tile, or
  per group of tiles, when the rectangle is too large to show cell by cell), with
  the exact padding fraction of every block;
- :func:`buffer_window`: a range of buffer addresses and, for each, the view cell
  and logical element stored there (the inverse of the layout, computed from the
  tiling arithmetic instead of by inverting a whole index map).

The view is the one the LayoutExplorer draws: the physical shape after the first
tile's ``*`` merges, padded to whole first-level tiles (:attr:`Shape.padded_view_shape`),
folded to two dimensions: rows = every dimension but the most minor, columns = the
most minor. Each function's cost is proportional to its output, never to the layout.

Examples
--------
>>> from scwork.layout import parse
>>> from scwork.layout.view import view_window, view_overview, buffer_window
>>> shape = parse("f32[3,5]{1,0:T(2,2)}")
>>> view_window(shape, rows=(2, 4), cols=(0, 3))["address"].values.tolist()
[[12, 13, 16], [14, 15, 18]]
>>> big = parse("bf16[65536,65536]{1,0:T(8,128)(2,1)}")
>>> overview = view_overview(big, max_blocks=(256, 256))
>>> overview.attrs["level"], overview.attrs["block_rows"], overview.attrs["block_cols"]
('tile blocks', 256, 256)
>>> buffer_window(shape, 12, 16)["element"].values.tolist()
[10, 11, -1, -1]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import xarray as xr

from scwork._rounding import ceil_div as _ceil_div
from scwork._validate import integer, shown
from scwork.errors import LayoutError
from scwork.layout.shape import Shape
from scwork.layout.tiles import Tile, _merge_suffix

__all__ = ["ViewGeometry", "view_window", "view_overview", "buffer_window", "MAX_WINDOW_CELLS", "MAX_WINDOW_BYTES",
           "MAX_ROW_CHECKS"]

#: Largest number of cells (or addresses) one call computes: 2**22 cells is 32 MiB
#: per int64 array. Ask for a smaller window, or an overview, beyond it.
MAX_WINDOW_CELLS = 2**22


#: Most bytes the int64 columns of one window may take, whatever ``max_cells`` allows
#: (a window keeps one column per coordinate of the tiled shape): 1 GiB.
MAX_WINDOW_BYTES = 2**30

#: Most rows :func:`view_overview` checks one by one for an exact padding fraction
#: (one bool each: 256 MiB).
MAX_ROW_CHECKS = 2**28


@dataclass(frozen=True)
class ViewGeometry:
    """How the first-tile view of ``shape`` folds to rows x columns.

    Attributes
    ----------
    shape : Shape
    view : tuple of int
        :attr:`Shape.view_shape` (unpadded sizes).
    padded : tuple of int
        :attr:`Shape.padded_view_shape`.
    tile : tuple of int
        First-level tile over the view's dimensions (1 for dims it does not cover;
        all ones for an untiled shape).
    n_rows, n_cols : int
        The folded view: ``n_cols`` = most minor padded dim, ``n_rows`` = product of the others.
    """

    shape: Shape

    @cached_property
    def _parts(self):
        return self.shape._view_parts

    @property
    def view(self) -> tuple[int, ...]:
        return tuple(self.shape.view_shape)

    @property
    def padded(self) -> tuple[int, ...]:
        return tuple(self.shape.padded_view_shape)

    @property
    def tile(self) -> tuple[int, ...]:
        prefix, _, tile = self._parts
        return (1,) * len(prefix) + tuple(tile) if tile else (1,) * len(self.padded)

    @property
    def n_cols(self) -> int:
        return self.padded[-1] if self.padded else 1

    @property
    def n_rows(self) -> int:
        return math.prod(self.padded[:-1]) if self.padded else 1

    @property
    def tile_rows(self) -> int:
        """Folded rows one first-level tile spans (when it is a contiguous row band)."""
        return self.tile[-2] if len(self.tile) >= 2 else 1

    @property
    def tile_cols(self) -> int:
        return self.tile[-1] if self.tile else 1

    @property
    def tiles_are_row_bands(self) -> bool:
        """True when every tile is a ``tile_rows x tile_cols`` rectangle of the folded view."""
        return all(t == 1 for t in self.tile[:-2])

    @cached_property
    def _view_plan(self):
        return self.shape._view_layout()._plan

    # -- forward: view cells -> address, tile, padding -------------------------------
    def _row_coords(self, rows: np.ndarray) -> list[np.ndarray]:
        """Unravel folded row indices into the major view coordinates."""
        major = self.padded[:-1]
        coords = []
        rest = rows
        for size in reversed(major):
            coords.append(rest % size)
            rest = rest // size
        return list(reversed(coords))

    def coordinates(self, rows: np.ndarray, cols: np.ndarray) -> list[np.ndarray]:
        """View coordinates (broadcast) of folded rows (column vector) and columns (row vector)."""
        if not self.padded:
            return []
        return [*self._row_coords(rows), cols]

    def address(self, coords: list[np.ndarray]) -> np.ndarray:
        plan = self._view_plan
        columns = [np.int64(0)] * plan.extra_major + list(coords)
        return np.asarray(plan.address(columns), dtype=np.int64)

    def tile_id(self, coords: list[np.ndarray]) -> np.ndarray:
        prefix, sizes, tile = self._parts
        if not tile:
            return np.zeros(np.broadcast(*coords).shape if coords else (), dtype=np.int64)
        grid = tuple(prefix) + tuple(_ceil_div(s, t) for s, t in zip(sizes, tile))
        cell_tiles = (1,) * len(prefix) + tuple(tile)
        ids = np.int64(0)
        for coord, count, size in zip(coords, grid, cell_tiles):
            ids = ids * count + coord // size
        return np.asarray(ids, dtype=np.int64)

    def padding(self, coords: list[np.ndarray]) -> np.ndarray:
        mask = np.bool_(False)
        for coord, size in zip(coords, self.view):
            mask = mask | (coord >= size)
        return np.asarray(mask)

    def row_is_data(self, rows: np.ndarray) -> np.ndarray:
        """True for folded rows whose major coordinates are all inside the unpadded view."""
        valid = np.ones(np.shape(rows), dtype=bool)
        for coord, size in zip(self._row_coords(np.asarray(rows)), self.view[:-1]):
            valid &= coord < size
        return valid

    # -- inverse: address -> view cell and logical element --------------------------
    def cells_at(self, addresses: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """View coordinates of the cells stored at ``addresses`` and a mask of real cells.

        Undoes the tiling levels of the view layout one by one (quotient * tile +
        remainder, then the ``*`` runs unravelled row-major). Addresses that hold no
        view cell (later-level or tail padding) are False in the mask.
        """
        plan = self._view_plan
        addresses = np.asarray(addresses, dtype=np.int64)
        inside = (addresses >= 0) & (addresses < math.prod(plan.tiled_shape))
        safe = np.where(inside, addresses, 0)
        # Unravelled by hand: np.unravel_index takes at most 64 dimensions, and a long
        # first tile (one entry per missing major dimension) can give a tiled shape more.
        columns = []
        rest = safe
        for size in reversed(plan.tiled_shape):
            columns.append(rest % size if size else rest)
            rest = rest // size if size else rest
        columns = [np.asarray(c, dtype=np.int64) for c in reversed(columns)]
        for shape, tile in reversed(plan.levels):
            cut = len(shape) - len(tile)
            kept = [t for t in tile if t != Tile.COMBINE]
            k = len(kept)
            prefix = columns[:cut]
            quotients = columns[cut:cut + k]
            remainders = columns[cut + k:cut + 2 * k]
            merged = [q * t + r for q, r, t in zip(quotients, remainders, kept)]
            columns = prefix + _split_runs(shape[cut:], tile, merged)
            for coord, size in zip(columns, shape):
                inside &= coord < size
        coords = columns[plan.extra_major:]
        return coords, inside

    def elements(self, coords: list[np.ndarray], real: np.ndarray) -> np.ndarray:
        """Row-major logical index of the element at view ``coords`` (-1: padding)."""
        shape = self.shape
        data = real & ~self.padding(coords) if coords else real
        first_plan = shape._plan
        level0 = first_plan.levels[0][0] if first_plan.levels else (
            (1,) * first_plan.extra_major + shape.physical_shape)
        first_tile = first_plan.levels[0][1] if first_plan.levels else ()
        prefix, _, _ = _merge_suffix(level0, first_tile) if first_tile else (level0, (), ())
        # Un-merge the '*' runs of the first tile: view coords -> level-0 (physical) coords.
        cut = len(level0) - len(first_tile)
        physical = list(coords[:len(prefix)]) + _split_runs(level0[cut:], first_tile, coords[len(prefix):])
        physical = physical[first_plan.extra_major:]
        if shape.rank == 0:
            return np.where(data, 0, -1).astype(np.int64)
        logical = [None] * shape.rank
        for position, axis in enumerate(first_plan.physical_axes):
            logical[axis] = np.where(data, physical[position], 0)
        flat = np.int64(0)
        for coord, size in zip(logical, shape.dims):
            flat = flat * size + coord
        return np.where(data, flat, -1).astype(np.int64)


def _split_runs(sizes, tile, merged) -> list:
    """Undo one tile level's ``*`` merges: each merged coordinate back into its run of
    dimensions (``*`` entries then the next kept one), row-major."""
    restored: list = []
    run: list[int] = []
    which = 0
    for size, t in zip(sizes, tile):
        run.append(size)
        if t != Tile.COMBINE:
            acc = merged[which]
            which += 1
            parts = []
            for run_size in reversed(run[1:]):
                parts.append(acc % run_size)
                acc = acc // run_size
            parts.append(acc)
            restored.extend(reversed(parts))
            run = []
    return restored


def _check_range(name: str, bounds, size: int) -> tuple[int, int]:
    if bounds is None:
        return 0, size
    try:
        start, stop = bounds
    except (TypeError, ValueError):
        raise LayoutError(f"{name} must be a (start, stop) pair of integers, got {shown(bounds)}") from None
    start = integer(f"{name}[0] (start)", start, error=LayoutError)
    stop = integer(f"{name}[1] (stop)", stop, error=LayoutError)
    start, stop = max(0, start), min(size, stop)
    if stop < start:
        stop = start
    return start, stop


def _check_cells(count: int, max_cells: int, what: str, arrays: int = 8) -> None:
    """Refuse ``count`` cells above ``max_cells``, or whose ``arrays`` int64 columns per cell
    (one per coordinate of the tiled shape, plus results) exceed :data:`MAX_WINDOW_BYTES`."""
    max_cells = integer("max_cells", max_cells, minimum=0, error=LayoutError)
    if count * arrays * 8 > MAX_WINDOW_BYTES:
        raise LayoutError(
            f"{what} has {count:,} cells of {arrays} int64 columns each ({count * arrays * 8 / 2**30:,.1f} GiB), "
            f"more than MAX_WINDOW_BYTES ({MAX_WINDOW_BYTES / 2**30:g} GiB) whatever max_cells says",
            hint="ask for a smaller window, or use view_overview")
    if count > max_cells:
        raise LayoutError(
            f"{what} has {count:,} cells, more than max_cells={max_cells:,}",
            hint="ask for a smaller window, use view_overview, or raise max_cells")


def view_window(shape: Shape, rows=None, cols=None, *, max_cells: int = MAX_WINDOW_CELLS) -> xr.Dataset:
    """Every cell of a rectangle of the folded first-tile view.

    Parameters
    ----------
    shape : Shape
    rows, cols : (start, stop), optional
        Folded view rows / columns (clipped to the view); default the whole view.
    max_cells : int
        Refuse (LayoutError) windows with more cells than this.

    Returns
    -------
    xarray.Dataset
        Dims ``(row, col)`` with the view indices as coordinates; ``tile`` (first-level
        tile id), ``address`` (buffer slot), ``padding`` (bool).
    """
    shape._require_dense("tiled view")
    geometry = ViewGeometry(shape)
    r0, r1 = _check_range("rows", rows, geometry.n_rows)
    c0, c1 = _check_range("cols", cols, geometry.n_cols)
    _check_cells((r1 - r0) * (c1 - c0), max_cells, f"the window rows {r0}:{r1} x cols {c0}:{c1}",
                 len(shape._view_layout()._plan.tiled_shape) + 8)
    row_index = np.arange(r0, r1, dtype=np.int64)
    col_index = np.arange(c0, c1, dtype=np.int64)
    coords = geometry.coordinates(row_index[:, None], col_index[None, :])
    full = (row_index.size, col_index.size)
    if coords:
        address = np.broadcast_to(geometry.address(coords), full)
        tile = np.broadcast_to(geometry.tile_id(coords), full)
        padding = np.broadcast_to(geometry.padding(coords), full)
    else:  # a scalar: one cell
        address = np.zeros(full, dtype=np.int64)
        tile = np.zeros(full, dtype=np.int64)
        padding = np.zeros(full, dtype=bool)
    return xr.Dataset(
        {
            "tile": (("row", "col"), np.ascontiguousarray(tile),
                     {"long_name": "first-level tile", "units": "1"}),
            "address": (("row", "col"), np.ascontiguousarray(address),
                        {"long_name": "buffer address", "units": "elements"}),
            "padding": (("row", "col"), np.ascontiguousarray(padding),
                        {"long_name": "padding cell", "units": "1"}),
        },
        coords={"row": row_index, "col": col_index},
        attrs={"layout": str(shape), "n_rows": geometry.n_rows, "n_cols": geometry.n_cols,
               "level": "elements", "block_rows": 1, "block_cols": 1},
    )


def _block_size(extent: int, max_blocks: int, tile: int, aligned: bool) -> int:
    """Smallest block size covering ``extent`` in at most ``max_blocks`` blocks.

    Tile-aligned (a multiple of the tile) when that still fits, so a block is one
    tile or a whole group of tiles.
    """
    size = max(1, _ceil_div(extent, max(1, max_blocks)))
    if aligned and size > 1 and tile > 1:
        size = _ceil_div(size, tile) * tile
    return size


def view_overview(shape: Shape, rows=None, cols=None, *, max_blocks: tuple[int, int] = (256, 512),
                  max_row_checks: int = 2**24) -> xr.Dataset:
    """A rectangle of the folded view summarised in at most ``max_blocks`` blocks.

    When the rectangle fits, blocks are single cells (``level="elements"``); else
    whole first-level tiles (``"tiles"``) when they fit, else groups of tiles
    (``"tile blocks"``). A tile that is not a row band of the folded view (a tile
    over three or more dims) makes blocks plain cell groups (``"cell blocks"``).

    Returns
    -------
    xarray.Dataset
        Dims ``(row, col)``, coordinates = view index of each block's first cell;
        ``tile`` and ``address`` of that first cell, ``padding_fraction`` of the
        block (exact: padding in the view is "some coordinate beyond its size",
        which factors over rows and columns), ``cells`` per block. Attrs
        ``block_rows``, ``block_cols`` and ``level``.

    Raises
    ------
    LayoutError
        Bounds that are not integer pairs; ``max_blocks`` whose product exceeds
        :data:`MAX_WINDOW_CELLS`; ``max_row_checks`` above :data:`MAX_ROW_CHECKS`.

    Examples
    --------
    >>> from scwork.layout import parse
    >>> ov = view_overview(parse("f32[3,5]{1,0:T(2,2)}"), max_blocks=(2, 3))
    >>> ov.attrs["level"], ov["padding_fraction"].values.tolist()
    ('tiles', [[0.0, 0.0, 0.5], [0.5, 0.5, 0.75]])
    """
    shape._require_dense("tiled view")
    geometry = ViewGeometry(shape)
    r0, r1 = _check_range("rows", rows, geometry.n_rows)
    c0, c1 = _check_range("cols", cols, geometry.n_cols)
    try:
        max_rows, max_cols = max_blocks
    except (TypeError, ValueError):
        raise LayoutError(f"max_blocks must be a (rows, cols) pair of positive integers, got "
                          f"{shown(max_blocks)}") from None
    max_rows = integer("max_blocks[0] (rows)", max_rows, minimum=1, error=LayoutError)
    max_cols = integer("max_blocks[1] (cols)", max_cols, minimum=1, error=LayoutError)
    max_row_checks = integer("max_row_checks", max_row_checks, minimum=0, error=LayoutError)
    # Both bound arrays made below: the blocks (rows x cols) and one flag per checked row.
    _check_cells(max_rows * max_cols, MAX_WINDOW_CELLS, f"an overview of max_blocks={max_rows} x {max_cols}",
                 len(geometry._view_plan.tiled_shape) + 8)
    if max_row_checks > MAX_ROW_CHECKS:
        raise LayoutError(f"max_row_checks={max_row_checks:,} is more than MAX_ROW_CHECKS={MAX_ROW_CHECKS:,} "
                          "(one flag per row is allocated)", hint="use the default; beyond it the padding "
                          "fraction is estimated from sampled rows (attrs['padding_exact'] is False)")
    if (r1 - r0) <= max_rows and (c1 - c0) <= max_cols or r1 == r0 or c1 == c0:
        window = view_window(shape, (r0, r1), (c0, c1))
        out = xr.Dataset({
            "tile": window["tile"], "address": window["address"],
            "padding_fraction": window["padding"].astype(np.float64).assign_attrs(
                long_name="padding fraction", units="1"),
            "cells": xr.ones_like(window["tile"]).assign_attrs(long_name="cells per block", units="1"),
        }, attrs=dict(window.attrs))
        return out
    aligned = geometry.tiles_are_row_bands
    block_rows = _block_size(r1 - r0, max_rows, geometry.tile_rows, aligned)
    block_cols = _block_size(c1 - c0, max_cols, geometry.tile_cols, aligned)
    if aligned:
        # Start blocks on tile boundaries so each block holds whole tiles.
        r0 -= r0 % geometry.tile_rows if block_rows % geometry.tile_rows == 0 else 0
        c0 -= c0 % geometry.tile_cols if block_cols % geometry.tile_cols == 0 else 0
    row_starts = np.arange(r0, r1, block_rows, dtype=np.int64)
    col_starts = np.arange(c0, c1, block_cols, dtype=np.int64)
    coords = geometry.coordinates(row_starts[:, None], col_starts[None, :])
    full = (row_starts.size, col_starts.size)
    address = np.broadcast_to(geometry.address(coords), full)
    tile = np.broadcast_to(geometry.tile_id(coords), full)

    # Exact padding per block: data rows x data cols / cells (rows and cols factor).
    row_stops = np.minimum(row_starts + block_rows, geometry.n_rows)
    col_stops = np.minimum(col_starts + block_cols, geometry.n_cols)
    data_cols = np.clip(np.minimum(col_stops, geometry.view[-1]) - col_starts, 0, None)
    span = int(row_stops[-1] - row_starts[0]) if row_starts.size else 0
    if span <= max_row_checks:
        valid = geometry.row_is_data(np.arange(row_starts[0], row_starts[0] + span, dtype=np.int64)) \
            if span else np.zeros(0, dtype=bool)
        cumulative = np.concatenate([[0], np.cumsum(valid, dtype=np.int64)])
        data_rows = cumulative[row_stops - row_starts[0]] - cumulative[row_starts - row_starts[0]]
        exact = True
    else:  # estimate from sampled rows of each block (said in attrs)
        samples = np.linspace(0, 1, 64, endpoint=False)
        sampled = row_starts[:, None] + (samples[None, :] * (row_stops - row_starts)[:, None]).astype(np.int64)
        data_rows = geometry.row_is_data(sampled).mean(axis=1) * (row_stops - row_starts)
        exact = False
    cells = (row_stops - row_starts)[:, None] * (col_stops - col_starts)[None, :]
    data = np.asarray(data_rows, dtype=np.float64)[:, None] * data_cols[None, :]
    padding_fraction = 1.0 - data / np.maximum(cells, 1)

    if block_rows == 1 and block_cols == 1:
        level = "elements"
    elif not aligned:
        level = "cell blocks"
    elif block_rows == geometry.tile_rows and block_cols == geometry.tile_cols:
        level = "tiles"
    else:
        level = "tile blocks"
    return xr.Dataset(
        {
            "tile": (("row", "col"), np.ascontiguousarray(tile),
                     {"long_name": "first-level tile of the block's first cell", "units": "1"}),
            "address": (("row", "col"), np.ascontiguousarray(address),
                        {"long_name": "buffer address of the block's first cell", "units": "elements"}),
            "padding_fraction": (("row", "col"), padding_fraction,
                                 {"long_name": "padding fraction", "units": "1"}),
            "cells": (("row", "col"), cells, {"long_name": "cells per block", "units": "1"}),
        },
        coords={"row": row_starts, "col": col_starts},
        attrs={"layout": str(shape), "n_rows": geometry.n_rows, "n_cols": geometry.n_cols,
               "level": level, "block_rows": block_rows, "block_cols": block_cols,
               "padding_exact": exact},
    )


def buffer_window(shape: Shape, start: int, stop: int, *, max_cells: int = MAX_WINDOW_CELLS) -> xr.Dataset:
    """Buffer addresses ``start .. stop-1`` and what each one holds.

    Returns
    -------
    xarray.Dataset
        Dim ``address``; ``element`` (row-major logical index, -1 for padding),
        ``tile`` (first-level tile of the view cell, -1 for slots that hold no view
        cell: later-level or tail padding), ``view_row`` / ``view_col`` (folded view
        cell, -1 likewise).

    Examples
    --------
    >>> from scwork.layout import parse
    >>> s = parse("f32[3]{0:T(2)}")
    >>> buffer_window(s, 0, 4)["element"].values.tolist() == s.address_map().tolist()
    True
    """
    shape._require_dense("tiled view")
    geometry = ViewGeometry(shape)
    total = shape.padded_elements
    a0, a1 = _check_range("addresses", (start, stop), total)
    _check_cells(a1 - a0, max_cells, f"the address range {a0}:{a1}", len(geometry._view_plan.tiled_shape) + 8)
    addresses = np.arange(a0, a1, dtype=np.int64)
    coords, real = geometry.cells_at(addresses)
    if coords:
        tile = np.where(real, geometry.tile_id([np.where(real, c, 0) for c in coords]), -1)
        row = np.zeros(addresses.shape, dtype=np.int64)
        for coord, size in zip(coords[:-1], geometry.padded[:-1]):
            row = row * size + np.where(real, coord, 0)
        view_row = np.where(real, row, -1)
        view_col = np.where(real, coords[-1], -1)
        element = geometry.elements([np.where(real, c, 0) for c in coords], real)
    else:
        tile = np.where(real, 0, -1)
        view_row = np.where(real, 0, -1)
        view_col = np.where(real, 0, -1)
        element = np.where(real, 0, -1)
    return xr.Dataset(
        {
            "element": ("address", element.astype(np.int64),
                        {"long_name": "logical element (row-major index)", "units": "1"}),
            "tile": ("address", np.asarray(tile, dtype=np.int64),
                     {"long_name": "first-level tile", "units": "1"}),
            "view_row": ("address", np.asarray(view_row, dtype=np.int64),
                         {"long_name": "folded view row", "units": "1"}),
            "view_col": ("address", np.asarray(view_col, dtype=np.int64),
                         {"long_name": "folded view column", "units": "1"}),
        },
        coords={"address": addresses},
        attrs={"layout": str(shape), "padded_elements": total},
    )
