"""Numba kernels for XLA tiled-layout index maps, each beside a plain numpy reference.

Nothing here compiles at import: ``@jit`` (``numba.njit`` without signatures)
compiles on the first call, or in :func:`warmup`. :mod:`scwork.layout.shape`
imports this module lazily, only for shapes large enough to need it.

Kernels
-------
outer_sum_fill
    Index map of a layout without ``*`` (combined) tile dimensions. Such a
    linear index is *separable*: every tile level splits one coordinate by
    floor/mod of its own tile size, so the address is a sum over logical
    dimensions of a per-dimension contribution. The caller precomputes those
    contribution tables and the kernel writes ``out[i, j, ...] = T0[i] + T1[j]
    + ...`` row by row: one add and one store per element, memory-bound.
tiled_index_fill
    General index map (any tiles, ``*`` included): applies every tile level to
    each element's coordinates, exactly like ``Shape.linear_index``.
invert_index_map
    Buffer slot -> logical element (``-1`` for padding), the inverse scatter.

The tiling program the general kernel runs is a handful of flat int64 arrays,
built by :func:`scwork.layout.shape.Shape` (see ``_kernel_program``):

- ``logical_dims``: the logical shape;
- ``physical_axes[p]``: logical dimension stored at physical position ``p``
  (major to minor); ``extra_major`` implicit size-1 major dimensions come first
  when the first tile has more dimensions than the shape;
- ``tile_sizes`` / ``tile_starts``: every tile's entries, concatenated
  (``-1`` = combine with the next more-minor dimension);
- ``shape_sizes`` / ``shape_starts``: the shape each tile applies to;
- ``final_strides``: row-major strides of the fully tiled shape.
"""

from __future__ import annotations

import numpy as np
from scwork._rounding import round_up

from scwork._jit import jit

__all__ = [
    "outer_sum_fill",
    "outer_sum_fill_reference",
    "tiled_index_fill",
    "tiled_index_fill_reference",
    "invert_index_map",
    "invert_index_map_reference",
    "warmup",
]


# --------------------------------------------------------------------------------------
# Separable layouts: outer sum of per-dimension contribution tables.
# --------------------------------------------------------------------------------------
@jit
def outer_sum_fill(tables, table_starts, dims, out):
    """Fill ``out`` (flat, C order over ``dims``) with ``sum_d tables[d][i_d]``.

    ``tables`` holds the contribution table of every dimension back to back,
    the one of dimension ``d`` starting at ``table_starts[d]``.
    """
    ndim = dims.shape[0]
    total = out.shape[0]
    if ndim == 0:
        if total > 0:
            out[0] = 0
        return
    row_length = dims[ndim - 1]
    if total == 0 or row_length == 0:
        return
    last = table_starts[ndim - 1]
    counter = np.zeros(ndim, np.int64)
    # ``base`` = contribution of every dimension except the most minor one at
    # the current odometer position; it changes once per row, not per element.
    base = 0
    for d in range(ndim - 1):
        base += tables[table_starts[d]]
    rows = total // row_length
    for row in range(rows):
        start = row * row_length
        for j in range(row_length):
            out[start + j] = base + tables[last + j]
        d = ndim - 2
        while d >= 0:
            old = tables[table_starts[d] + counter[d]]
            counter[d] += 1
            if counter[d] < dims[d]:
                base += tables[table_starts[d] + counter[d]] - old
                break
            counter[d] = 0
            base += tables[table_starts[d]] - old
            d -= 1


def outer_sum_fill_reference(tables, table_starts, dims):
    """Numpy reference of :func:`outer_sum_fill`: broadcast and add, returns shape ``dims``."""
    dims = tuple(int(d) for d in dims)
    result = np.zeros(dims, dtype=np.int64)
    for d, size in enumerate(dims):
        table = np.asarray(tables[table_starts[d]:table_starts[d] + size], dtype=np.int64)
        view = [1] * len(dims)
        view[d] = size
        result = result + table.reshape(view)
    return result


# --------------------------------------------------------------------------------------
# General layouts: every tile level applied to each element.
# --------------------------------------------------------------------------------------
@jit
def tiled_index_fill(logical_dims, physical_axes, extra_major, tile_sizes, tile_starts,
                     shape_sizes, shape_starts, final_strides, out):
    """Fill ``out`` (flat, C order over ``logical_dims``) with each element's tiled address."""
    rank = logical_dims.shape[0]
    levels = tile_starts.shape[0] - 1
    total = out.shape[0]
    if total == 0:
        return
    width = final_strides.shape[0]
    for level in range(levels):
        width = max(width, shape_starts[level + 1] - shape_starts[level])
    width = max(width, rank + extra_major)
    coords = np.zeros(width, np.int64)
    merged_index = np.zeros(width, np.int64)
    merged_tile = np.zeros(width, np.int64)
    counter = np.zeros(max(rank, 1), np.int64)
    for flat in range(total):
        n = extra_major + rank
        for q in range(extra_major):
            coords[q] = 0
        for p in range(rank):
            coords[extra_major + p] = counter[physical_axes[p]]
        for level in range(levels):
            tile_start = tile_starts[level]
            k = tile_starts[level + 1] - tile_start
            shape_start = shape_starts[level]
            cut = n - k
            m = 0
            acc = 0
            for j in range(k):
                # A run of '*' entries flattens its dimensions row-major into the
                # next non-'*' one before the floor/mod split.
                acc = acc * shape_sizes[shape_start + cut + j] + coords[cut + j]
                t = tile_sizes[tile_start + j]
                if t != -1:
                    merged_index[m] = acc
                    merged_tile[m] = t
                    m += 1
                    acc = 0
            for j in range(m):
                coords[cut + j] = merged_index[j] // merged_tile[j]
                coords[cut + m + j] = merged_index[j] % merged_tile[j]
            n = cut + 2 * m
        address = 0
        for j in range(n):
            address += coords[j] * final_strides[j]
        out[flat] = address
        # Odometer over the logical coordinates (C order).
        d = rank - 1
        while d >= 0:
            counter[d] += 1
            if counter[d] < logical_dims[d]:
                break
            counter[d] = 0
            d -= 1


def tiled_index_fill_reference(logical_dims, physical_axes, extra_major, levels, tiled_shape):
    """Numpy reference of :func:`tiled_index_fill` by the XLA doc's pad-reshape-transpose view.

    Start from the buffer addresses ``arange(prod(tiled_shape))`` laid out as the
    tiled shape and undo each tile level, last first: move every in-tile axis
    back beside its tile-count axis, merge the pair, crop the padding, split
    ``*``-combined dimensions again; then drop the implicit size-1 major
    dimensions and transpose physical order back to logical order. It shares no
    arithmetic with the kernel, which is the point.

    ``levels`` is a sequence of ``(shape_before, tile_dims)`` pairs.
    Returns the index map with shape ``logical_dims``.
    """
    buffer = np.arange(int(np.prod(tiled_shape, dtype=np.int64)), dtype=np.int64).reshape(tiled_shape)
    for shape_before, tile in reversed(list(levels)):
        shape_before = tuple(int(s) for s in shape_before)
        cut = len(shape_before) - len(tile)
        prefix, suffix = shape_before[:cut], shape_before[cut:]
        merged_sizes, merged_tile, run = [], [], 1
        for size, t in zip(suffix, tile):
            run *= size
            if t != -1:
                merged_sizes.append(run)
                merged_tile.append(int(t))
                run = 1
        m = len(merged_tile)
        interleave = list(range(cut)) + [axis for j in range(m) for axis in (cut + j, cut + m + j)]
        padded = tuple(round_up(s, t) for s, t in zip(merged_sizes, merged_tile))
        buffer = buffer.transpose(interleave).reshape(prefix + padded)
        buffer = buffer[(slice(None),) * cut + tuple(slice(0, s) for s in merged_sizes)]
        buffer = buffer.reshape(prefix + suffix)
    physical = tuple(int(logical_dims[a]) for a in physical_axes)
    buffer = buffer.reshape(physical)
    rank = len(physical_axes)
    position_of_logical = [0] * rank
    for position, axis in enumerate(physical_axes):
        position_of_logical[int(axis)] = position
    # A C-ordered copy; np.ascontiguousarray would turn a scalar's 0-d map into shape (1,).
    return buffer.transpose(position_of_logical).copy()


# --------------------------------------------------------------------------------------
# Inverse: which logical element sits in each buffer slot.
# --------------------------------------------------------------------------------------
@jit
def invert_index_map(flat_index_map, out):
    """``out[flat_index_map[i]] = i``; slots nobody maps to keep their value (pre-fill -1).

    Returns the number of addresses outside ``out`` (skipped, never written): a
    non-zero count is a bug in the index map, and the caller raises on it rather
    than letting an out-of-bounds write corrupt memory.
    """
    size = out.shape[0]
    out_of_bounds = 0
    for i in range(flat_index_map.shape[0]):
        address = flat_index_map[i]
        if address < 0 or address >= size:
            out_of_bounds += 1
        else:
            out[address] = i
    return out_of_bounds


def invert_index_map_reference(flat_index_map, size):
    """Numpy reference of :func:`invert_index_map`: a fancy-index scatter into ``-1``s."""
    out = np.full(int(size), -1, dtype=np.int64)
    out[np.asarray(flat_index_map, dtype=np.int64)] = np.arange(len(flat_index_map), dtype=np.int64)
    return out


def warmup() -> None:
    """Compile (or load from numba's cache) every kernel of this module on tiny inputs."""
    i64 = np.int64
    out = np.empty(6, i64)
    outer_sum_fill(np.array([0, 1, 0, 10, 20], i64), np.array([0, 2], i64), np.array([2, 3], i64), out)
    # f32[2,3]{1,0:T(*,2)}: one level, a combined dimension.
    tiled_index_fill(np.array([2, 3], i64), np.array([0, 1], i64), 0, np.array([-1, 2], i64),
                     np.array([0, 2], i64), np.array([2, 3], i64), np.array([0, 2], i64),
                     np.array([2, 1], i64), out)
    invert_index_map(out, np.full(6, -1, i64))
