"""The first tile of a layout, as XLA computes with it and as the LayoutExplorer draws it.

XLA's own functions ``LayoutUtil::LinearIndex`` and ``ShapeUtil::ArraySize`` use only
the first tile of a layout; the LayoutExplorer draws the buffer as a grid of that
tile. Both are methods of :class:`~scwork.layout.Shape`, kept here beside each other
because they answer the same question: what does the first tile alone say.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from scwork.errors import LayoutError
from scwork.layout.tiles import DTYPES, MAX_MAP_ELEMENTS, Tile, _ceil_div, _merge_suffix

__all__: list[str] = []


class _FirstTileView:
    """Mixin of :class:`~scwork.layout.Shape`: the first-tile view and XLA's first-tile functions."""

    # -- the first-tile view the LayoutExplorer draws --------------------------------
    @property
    def _view_parts(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(untouched major dims, dims the first tile covers after '*' merges, that tile)."""
        plan = self._plan
        if not plan.levels:
            return self.physical_shape, (), ()
        shape, tile = plan.levels[0]
        return _merge_suffix(shape, tile)

    @property
    def view_shape(self) -> tuple[int, ...]:
        """Physical dims after the first tile's ``*`` merges (with implicit size-1
        major dims when that tile is longer than the shape).

        Examples
        --------
        >>> from scwork.layout import parse
        >>> parse("f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}").view_shape
        (112, 110)
        >>> parse("f32[]{:T(256)}").view_shape
        (1,)
        """
        prefix, sizes, _ = self._view_parts
        return prefix + sizes

    @property
    def padded_view_shape(self) -> tuple[int, ...]:
        """:attr:`view_shape` with its tiled dims rounded up to the first tile.

        Examples
        --------
        >>> from scwork.layout import parse
        >>> parse("f32[3,5]{1,0:T(2,2)}").padded_view_shape
        (4, 6)
        """
        prefix, sizes, tile = self._view_parts
        return prefix + tuple(_ceil_div(s, t) * t for s, t in zip(sizes, tile))

    def _view_layout(self):
        """Same addresses, seen as a row-major array of :attr:`padded_view_shape`."""
        first = self._view_parts[2]
        tiles = ((Tile(first),) if first else ()) + self.tiles[1:]
        return type(self)(self.dtype, self.padded_view_shape, tiles=tiles)

    def view_index_map(self) -> np.ndarray:
        """Address of every cell of :attr:`padded_view_shape`, first-level padding included.

        Examples
        --------
        >>> from scwork.layout import parse
        >>> parse("f32[3,5]{1,0:T(2,2)}").view_index_map()[3].tolist()
        [14, 15, 18, 19, 22, 23]
        """
        self._require_dense("tiled view")
        self._check_map_size(math.prod(self.padded_view_shape), MAX_MAP_ELEMENTS, "tiled view",
                             len(self.padded_view_shape))
        return self._view_layout().index_map()

    def view_padding_mask(self) -> np.ndarray:
        """Boolean array of :attr:`padded_view_shape`: True where the cell is padding.

        Examples
        --------
        >>> from scwork.layout import parse
        >>> int(parse("f32[3,5]{1,0:T(2,2)}").view_padding_mask().sum())
        9
        """
        self._require_dense("tiled view")
        self._check_map_size(math.prod(self.padded_view_shape), MAX_MAP_ELEMENTS, "tiled view",
                             len(self.padded_view_shape))
        coords = np.indices(self.padded_view_shape, dtype=np.int64, sparse=True)
        mask = np.zeros(self.padded_view_shape, dtype=bool)
        for axis, size in enumerate(self.view_shape):
            mask |= coords[axis] >= size
        return mask

    def view_tile_map(self) -> np.ndarray:
        """Row-major id of the first-level tile holding each cell of :attr:`padded_view_shape`.

        The tile grid is the untouched major dims times the tile counts; an
        untiled shape is one tile (all zeros).

        Examples
        --------
        >>> from scwork.layout import parse
        >>> parse("f32[3,5]{1,0:T(2,2)}").view_tile_map()[:, :3].tolist()
        [[0, 0, 1], [0, 0, 1], [3, 3, 4], [3, 3, 4]]
        """
        self._require_dense("tiled view")
        self._check_map_size(math.prod(self.padded_view_shape), MAX_MAP_ELEMENTS, "tiled view",
                             len(self.padded_view_shape))
        prefix, sizes, tile = self._view_parts
        padded = self.padded_view_shape
        if not tile:
            return np.zeros(padded, dtype=np.int64)
        coords = np.indices(padded, dtype=np.int64, sparse=True)
        grid = prefix + tuple(_ceil_div(s, t) for s, t in zip(sizes, tile))
        cell_tiles = (1,) * len(prefix) + tile
        ids = np.zeros(padded, dtype=np.int64)
        for axis, (count, size) in enumerate(zip(grid, cell_tiles)):
            ids = ids * count + coords[axis] // size
        return ids

    # -- XLA's own first-tile functions ----------------------------------------------
    def _xla_first_tile(self, function: str) -> tuple[int, ...]:
        if not self.tiles:
            return ()
        tile = self.tiles[0].dims
        if Tile.COMBINE in tile:
            raise LayoutError(f"XLA's {function} does not support '*' (combined) tile dimensions: it "
                              f"stores them as INT64_MIN and would return a meaningless number",
                              hint="use linear_index / padded_bytes, which apply '*' as the XLA doc defines")
        return tile

    def xla_linear_index(self, index: Sequence[int]) -> int:
        """XLA's ``LayoutUtil::LinearIndex``: only the *first* tile, and rank 1 ignores tiles.

        Reproduces ``xla/layout_util.cc``: rank 0 -> 0; rank 1 -> the index
        itself; otherwise the first tile's (tile index, in-tile index) formula.
        It differs from :meth:`linear_index` when there are several tiles
        (e.g. the ``(2,1)`` of ``bf16[4,8]{1,0:T(2,4)(2,1)}``), for tiled rank-1
        shapes whose tiles reorder elements, and when the first tile has more
        dimensions than the shape. ``*`` tiles raise :class:`LayoutError`.

        Examples
        --------
        >>> from scwork.layout import parse
        >>> s = parse("bf16[4,8]{1,0:T(2,4)(2,1)}")
        >>> s.xla_linear_index((0, 1)), s.linear_index((0, 1))
        (1, 2)
        """
        self._require_dense("linear index")
        index = self._check_index(index)
        tile = self._xla_first_tile("LayoutUtil::LinearIndex")
        if self.rank == 0:
            return 0
        if self.rank == 1:
            return index[0]
        tile_multiplier = math.prod(tile)  # elements in one tile
        within_tile_multiplier = 1
        linear = 0
        for minor, dim in enumerate(self.minor_to_major):
            size, value = self.dims[dim], index[dim]
            if minor < len(tile):
                t = tile[len(tile) - 1 - minor]
                linear += tile_multiplier * (value // t) + within_tile_multiplier * (value % t)
                tile_multiplier *= _ceil_div(size, t)
                within_tile_multiplier *= t
            else:
                linear += value * tile_multiplier
                tile_multiplier *= size
        return linear

    def _xla_max_split_size(self, dim: int) -> int:
        # LayoutUtil::MaxSplitSize: the largest piece a split config cuts the dimension into.
        for config in self.split_configs:
            if self.minor_to_major[self.rank - 1 - config.dimension] == dim:
                cuts = (0,) + config.split_indices + (self.dims[dim],)
                return max(b - a for a, b in zip(cuts, cuts[1:]))
        return self.dims[dim]

    def xla_array_size_bytes(self) -> int:
        """XLA's ``ShapeUtil::ArraySize``: bytes from the *first* tile only.

        Reproduces ``xla/shape_util.cc``: untiled -> element count times bytes
        (``L`` ignored); tiled -> each of the first tile's dimensions rounds the
        matching minor dimension up (dimensions beyond the rank count as 1),
        split dimensions count their largest piece, then ``L`` and ``E`` apply.
        It differs from :attr:`padded_bytes` when later tiles add padding, when
        ``L`` is set on an untiled shape, and by the ``M`` prefix, which
        ``ArraySize`` leaves out. ``*`` tiles raise :class:`LayoutError`.

        Examples
        --------
        >>> from scwork.layout import parse
        >>> s = parse("f32[2,3]{1,0:T(2,3)(2,2)}")
        >>> s.xla_array_size_bytes(), s.padded_bytes
        (24, 32)
        """
        self._require_dense("dense array size")
        tile = self._xla_first_tile("ShapeUtil::ArraySize")
        element_bits = self.element_size_in_bits
        if not tile:
            count = self.num_elements
        else:
            count = 1
            for dim in range(len(tile)):
                size = self._xla_max_split_size(self.minor_to_major[dim]) if dim < self.rank else 1
                count *= _ceil_div(size, tile[len(tile) - 1 - dim]) * tile[len(tile) - 1 - dim]
            for dim in range(len(tile), self.rank):
                count *= self._xla_max_split_size(self.minor_to_major[dim])
            alignment = self.tail_padding_alignment
            count = _ceil_div(count, alignment) * alignment
        if element_bits:
            return _ceil_div(count * element_bits, 8)
        return count * _ceil_div(DTYPES[self.dtype][0], 8)
