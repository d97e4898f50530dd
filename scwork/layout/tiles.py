"""The parts of an XLA layout below the shape: element types, tiles, split configs, tiling plan.

Element types are :data:`DTYPES`, tiles :class:`Tile`, split configs
:class:`SplitConfig`; the tiling plan maps an index to its tiled position.

Follows [xla-tiled] (OpenXLA, "Tiled layout"): a tile ``T(a,b)`` cuts the
minor-most dimensions into ``a x b`` blocks, padding each dimension up to a multiple of
the tile; further tiles apply to the result of the previous one; ``*`` keeps a dimension
whole; a tile with fewer dimensions than the shape applies to the minor-most ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from scwork._rounding import ceil_div as _ceil_div
from scwork._validate import shown
from scwork.errors import LayoutError

__all__ = ["DTYPES", "NUMBA_MIN_ELEMENTS", "MAX_MAP_ELEMENTS", "Tile", "SplitConfig"]


#: Element type name -> (bit width, numpy dtype or None when numpy has none).
#: The bit width is XLA's ``primitive_util::BitWidth``; storage is whole bytes
#: per element (``ByteWidth``) unless the layout's ``E(bits)`` says otherwise.
#: Names from ``xla_data.proto`` (s1/u1 and the f6 types from ``xla/pjrt/c/pjrt_c_api.h``).
DTYPES: dict[str, tuple[int, np.dtype | None]] = {
    "pred": (1, np.dtype(np.bool_)),
    "s1": (1, None), "s2": (2, None), "s4": (4, None),
    "s8": (8, np.dtype(np.int8)), "s16": (16, np.dtype(np.int16)),
    "s32": (32, np.dtype(np.int32)), "s64": (64, np.dtype(np.int64)),
    "u1": (1, None), "u2": (2, None), "u4": (4, None),
    "u8": (8, np.dtype(np.uint8)), "u16": (16, np.dtype(np.uint16)),
    "u32": (32, np.dtype(np.uint32)), "u64": (64, np.dtype(np.uint64)),
    "f16": (16, np.dtype(np.float16)), "bf16": (16, None),
    "f32": (32, np.dtype(np.float32)), "f64": (64, np.dtype(np.float64)),
    "c64": (64, np.dtype(np.complex64)), "c128": (128, np.dtype(np.complex128)),
    "f8e5m2": (8, None), "f8e4m3": (8, None), "f8e4m3fn": (8, None),
    "f8e4m3b11fnuz": (8, None), "f8e3m4": (8, None), "f8e5m2fnuz": (8, None),
    "f8e4m3fnuz": (8, None), "f8e8m0fnu": (8, None), "f4e2m1fn": (4, None),
    "f6e2m3fn": (6, None), "f6e3m2fn": (6, None),
}

# Spellings people type for XLA names; used only to suggest a fix.
_DTYPE_ALIASES = {
    "bool": "pred", "float16": "f16", "half": "f16", "float32": "f32", "float": "f32",
    "float64": "f64", "double": "f64", "bfloat16": "bf16", "int8": "s8", "int16": "s16",
    "int32": "s32", "int64": "s64", "i8": "s8", "i16": "s16", "i32": "s32", "i64": "s64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "int4": "s4",
    "uint4": "u4", "complex64": "c64", "complex128": "c128",
}

#: Above this many elements :meth:`Shape.index_map` uses the numba kernels.
NUMBA_MIN_ELEMENTS = 4096

#: Largest index / address map built whole (2**28 entries: 2 GiB of int64).
MAX_MAP_ELEMENTS = 2**28

# Keeps every address an exact int64 in the kernels (and numpy) with room to spare.
_MAX_ELEMENTS = 2**62


def _suggest_dtypes(name: str) -> list[str]:
    import difflib  # only on the error path, keeps `import scwork` lean

    name = name.lower()
    found = [_DTYPE_ALIASES[name]] if name in _DTYPE_ALIASES else []
    found += [m for m in difflib.get_close_matches(name, list(DTYPES), n=3, cutoff=0.6) if m not in found]
    return found[:3]


def _is_integral(dtype: str) -> bool:
    return dtype[0] in "su" and dtype[1:].isdigit()


def _invalid(reason: str, where: tuple, hint: str | None = None) -> LayoutError:
    """A validation error tagged with the piece it is about, so :func:`parse` can point at it."""
    error = LayoutError(reason, hint=hint)
    error.where = where  # type: ignore[attr-defined]
    return error


def _as_int(value: Any, what: str, where: tuple) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise _invalid(f"{what} must be an integer, got {value!r}", where)
    try:
        number = int(value.__index__())
    except (AttributeError, TypeError):
        raise _invalid(f"{what} must be an integer, got {shown(value)}", where) from None
    # Every number of an XLA layout is an int64 (and the parser reads no larger one).
    if not -2**63 <= number < 2**63:
        raise _invalid(f"{what} {shown(number)} does not fit in a signed 64-bit integer", where)
    return number


def _as_tuple(value: Any, what: str, where: tuple) -> tuple:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise _invalid(f"{what} must be a sequence, got {shown(value)}", where)
    try:
        return tuple(value)
    except Exception as error:  # noqa: BLE001 - an iterable that fails while iterating
        raise _invalid(f"{what} could not be read as a sequence: {type(error).__name__}", where) from None


# ======================================================================================
# Tile and SplitConfig
# ======================================================================================
@dataclass(frozen=True)
class Tile:
    """One level of tiling: tile sizes for the most minor dimensions, major to minor.

    ``-1`` (:attr:`COMBINE`, printed ``*``) merges that dimension into the next
    more-minor one before tiling; XLA stores it as ``INT64_MIN``
    (``Tile::kCombineDimension``), the doc and scwork as ``-1``.

    Parameters
    ----------
    dims : sequence of int
        Positive tile sizes or ``-1``; at least one; the last one cannot be ``-1``.

    Examples
    --------
    >>> Tile((2, -1, 128)).dims, str(Tile([8, 128]))
    ((2, -1, 128), '(8,128)')
    >>> str(Tile((-1, 2)))
    '(*,2)'
    """

    dims: tuple[int, ...]

    COMBINE = -1

    def __post_init__(self) -> None:
        if isinstance(self.dims, (str, bytes)) or not isinstance(self.dims, Iterable):
            raise _invalid(f"tile dims must be a sequence of integers, got {self.dims!r}", ("tile",))
        dims = tuple(_as_int(d, "a tile size", ("tile", j)) for j, d in enumerate(self.dims))
        if not dims:
            raise _invalid("a tile needs at least one dimension", ("tile",),
                           "write T(8,128) rather than T()")
        for j, size in enumerate(dims):
            if size <= 0 and size != self.COMBINE:
                raise _invalid(f"tile sizes must be positive, got {size}", ("tile", j),
                               "use '*' to combine a dimension with the next one")
        if dims[-1] == self.COMBINE:
            raise _invalid("'*' cannot be the last (most minor) entry of a tile: it merges a dimension "
                           "into the next more-minor one, and there is none", ("tile", len(dims) - 1))
        object.__setattr__(self, "dims", dims)

    def __str__(self) -> str:
        return "(" + ",".join("*" if d == self.COMBINE else str(d) for d in self.dims) + ")"


@dataclass(frozen=True)
class SplitConfig:
    """``SC(dimension:i,j,...)``: where a physical dimension is split between memories.

    ``dimension`` is a *physical* dimension number (0 = most major), as in XLA's
    ``SplitConfig``; ``split_indices`` are strictly increasing positive offsets
    inside that dimension. scwork records split configs and checks them like
    ``LayoutUtil::ValidateLayoutForShape``; they do not change addresses here,
    only :meth:`Shape.xla_array_size_bytes` (as in ``ShapeUtil::ArraySize``).

    Examples
    --------
    >>> str(SplitConfig(0, (2, 4)))
    '(0:2,4)'
    """

    dimension: int
    split_indices: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "dimension", _as_int(self.dimension, "a split dimension", ("SC",)))
        if isinstance(self.split_indices, (str, bytes)) or not isinstance(self.split_indices, Iterable):
            raise _invalid(f"split indices must be a sequence of integers, got {self.split_indices!r}", ("SC",))
        indices = tuple(_as_int(i, "a split index", ("SC",)) for i in self.split_indices)
        object.__setattr__(self, "split_indices", indices)

    def __str__(self) -> str:
        return f"({self.dimension}:" + ",".join(str(i) for i in self.split_indices) + ")"


# ======================================================================================
# Tiling plan: the pure arithmetic shared by every address computation
# ======================================================================================
@dataclass(frozen=True)
class _Plan:
    """How a layout turns physical coordinates into a buffer address.

    ``physical_axes[p]`` is the logical dimension at physical position ``p``
    (major to minor); ``extra_major`` size-1 dimensions are put in front when
    the first tile has more dimensions than the shape (XLA accepts that, e.g.
    ``f32[]{:T(256)}``); ``levels`` are ``(shape the tile applies to, tile
    dims)``; ``tiled_shape`` is the final shape, stored row-major.
    """

    physical_axes: tuple[int, ...]
    extra_major: int
    levels: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]
    tiled_shape: tuple[int, ...]

    @property
    def strides(self) -> tuple[int, ...]:
        strides, step = [], 1
        for size in reversed(self.tiled_shape):
            strides.append(step)
            step *= size
        return tuple(reversed(strides))

    def apply(self, columns: list) -> list:
        """Tile physical coordinate columns (Python ints or int64 arrays alike).

        ``columns`` has one entry per dimension of the first level's shape
        (implicit major dimensions included) and the result one per dimension
        of :attr:`tiled_shape`. ``//``, ``%``, ``*`` and ``+`` mean the same on
        ints and arrays, so one implementation serves scalars and vectors.
        """
        for shape, tile in self.levels:
            cut = len(shape) - len(tile)
            merged, acc = [], 0
            for size, t, column in zip(shape[cut:], tile, columns[cut:]):
                acc = acc * size + column  # '*' runs flatten row-major into the next dim
                if t != Tile.COMBINE:
                    merged.append((acc, t))
                    acc = 0
            columns = columns[:cut] + [c // t for c, t in merged] + [c % t for c, t in merged]
        return columns

    def address(self, columns: list):
        tiled = self.apply(columns)
        total = 0
        for column, stride in zip(tiled, self.strides):
            total = total + column * stride
        return total


def _merge_suffix(shape: tuple[int, ...], tile: tuple[int, ...]):
    """Split ``shape`` into (untouched prefix, sizes after '*' merges, tile without '*')."""
    cut = len(shape) - len(tile)
    sizes, sizes_tile, run = [], [], 1
    for size, t in zip(shape[cut:], tile):
        run *= size
        if t != Tile.COMBINE:
            sizes.append(run)
            sizes_tile.append(t)
            run = 1
    return shape[:cut], tuple(sizes), tuple(sizes_tile)


def _apply_tile(shape: tuple[int, ...], tile: tuple[int, ...]) -> tuple[int, ...]:
    prefix, sizes, sizes_tile = _merge_suffix(shape, tile)
    return prefix + tuple(_ceil_div(s, t) for s, t in zip(sizes, sizes_tile)) + sizes_tile
