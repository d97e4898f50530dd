"""XLA shapes with tiled layouts: parse, validate, print, and compute addresses ([xla-tiled]).

A shape such as ``f32[3,5]{1,0:T(2,2)}`` is an element type, logical
dimensions, and a layout: ``minor_to_major`` (the physical order of the
dimensions) and attributes such as tiles. :func:`parse` reads the text,
:class:`Shape` holds it and answers layout questions: the tiled shape, padding,
the linear address of every element, and XLA's own first-tile functions.

Sources followed (openxla/xla): ``xla/layout.cc`` (``Layout::Print``, the
canonical text and attribute order T, L, #, \\*, E, S, SC, P, M),
``xla/hlo/parser/hlo_parser.cc`` (``ParseShape``/``ParseLayout``, syntax and the
"Dimensions size is ..." message), ``xla/layout_util.cc``
(``ValidateLayoutForShape``, ``LinearIndex``, ``LinearIndexForNestedTiling``),
``xla/shape_util.cc`` (``ArraySize``) and the XLA "Tiled layout" document [xla-tiled]
for the meaning of tiles and ``*``.

Addressing model ([xla-tiled] and its figures): the physical shape is the
logical one in major-to-minor order; each tile, in turn, applies to the most
minor dimensions of the current shape: a ``*`` entry first merges its
dimension into the next more-minor one, then every remaining dimension ``d``
with tile size ``t`` is padded to a multiple of ``t`` and split into
``(ceil(d/t), t)``, and all the ``t`` parts move to the minor end in order.
The buffer is the final ("tiled") shape in row-major order, rounded up to the
``L`` tail-padding alignment.

Examples
--------
>>> from scwork.layout.shape import parse
>>> s = parse("F32[3,5]{1,0:T(2,2)}")
>>> str(s), s.tiled_shape, s.padded_elements
('f32[3,5]{1,0:T(2,2)}', (2, 3, 2, 2), 24)
>>> s.linear_index((2, 3))
17
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable

import numpy as np

from scwork.errors import LayoutError
from scwork.layout._addressing import _Addressing
from scwork.layout._first_tile import _FirstTileView
from scwork.layout._parser import ParsedShape, parse_shape_text
from scwork.layout.tiles import (
    _MAX_ELEMENTS,
    DTYPES,
    MAX_MAP_ELEMENTS,
    SplitConfig,
    Tile,
    _apply_tile,
    _as_int,
    _as_tuple,
    _ceil_div,
    _invalid,
    _is_integral,
    _Plan,
    _suggest_dtypes,
)

__all__ = ["DTYPES", "MAX_MAP_ELEMENTS", "Shape", "SplitConfig", "Tile", "parse"]

#: numpy's limit on array dimensions (``NPY_MAXDIMS``).
_NUMPY_MAX_DIMS = 64


# ======================================================================================
# Shape
# ======================================================================================
@dataclass(frozen=True, eq=True)
class Shape(_Addressing, _FirstTileView):
    """An XLA array shape with its layout; immutable, validated on construction.

    Parameters
    ----------
    dtype : str
        XLA element type (case-insensitive, stored lower case), a key of :data:`DTYPES`.
    dims : sequence of int
        Logical dimension sizes (``>= 0``). A bounded dynamic dimension ``<=N``
        stores its bound ``N`` and is flagged in ``dynamic_dims``.
    minor_to_major : sequence of int, optional
        Physical order of the dimensions, most minor first; a permutation of
        ``0..rank-1``. Default: row-major ``(rank-1, ..., 0)``.
    tiles : sequence of Tile or of int sequences
        Tiling levels, applied in order; ``-1`` = ``*``. A tile may not have
        more dimensions than the shape it applies to, except the first one:
        XLA's ``ValidateLayoutForShape`` accepts a longer first tile and
        ``ShapeUtil::ArraySize`` counts the missing major dimensions as size 1
        (``f32[]{:T(256)}`` is a 256-slot buffer), and so does scwork; later
        tiles follow ``LayoutUtil::LinearIndexForNestedTiling``, which CHECKs
        that the tile fits the shape produced by the previous ones.
    tail_padding_alignment : int
        ``L(n)``: the element count is rounded up to a multiple of ``n`` (>= 1).
    element_size_in_bits : int
        ``E(bits)``: storage bits per element; 0 means the natural size
        (whole bytes of the element type).
    memory_space : int
        ``S(n)``: 0 = HBM (default), 1 = VMEM on TPU, ...
    dynamic_shape_metadata_prefix_bytes : int
        ``M(bytes)``: metadata bytes stored before the data of a dynamic shape.
    index_primitive_type, pointer_primitive_type : str or None
        ``#(type)`` and ``*(type)``: integer types of sparse-array indices and
        pointers. Kept as metadata: XLA's ``ValidateLayoutForShape`` rejects them
        on dense arrays (and its parser accepts only unsigned types); scwork
        accepts any integer type so printed layouts round-trip.
    split_configs : sequence of SplitConfig or ``(dimension, indices)`` pairs
        ``SC(...)``, validated like XLA.
    layout_physical_shape : Shape or None
        ``P(shape)``: the physical shape of a sparse array. XLA's parser
        rejects it on dense arrays; scwork keeps it as metadata, without
        effect on addresses (it may not have a ``P`` of its own).
    dynamic_dims : sequence of bool
        Which dimensions are bounded-dynamic (``<=N``); default all static.
    dim_level_types : sequence of str
        ``D(...)``: one sparse dimension level type per dimension, as XLA prints it:
        ``"D"`` dense, ``"C"`` compressed, ``"S"`` singleton, ``"H"`` loose compressed,
        followed by ``"+"`` when the dimension is not unique and ``"~"`` when it is not
        ordered (e.g. ``("D", "C+~")``). Empty (the default) or all ``"D"`` is a dense
        array; any other level makes the array sparse: it parses, prints and compares,
        but has no linear index, index map or tiled addresses (LayoutError).

    Raises
    ------
    LayoutError
        On any invalid value, with the same messages as :func:`parse`.

    Examples
    --------
    >>> s = Shape("bf16", (4, 8), tiles=[(2, 4), (2, 1)])
    >>> s
    Shape('bf16[4,8]{1,0:T(2,4)(2,1)}')
    >>> s.index_map()[0].tolist()
    [0, 2, 4, 6, 8, 10, 12, 14]
    """

    dtype: str
    dims: tuple[int, ...]
    minor_to_major: tuple[int, ...] | None = None
    tiles: tuple[Tile, ...] = ()
    tail_padding_alignment: int = 1
    element_size_in_bits: int = 0
    memory_space: int = 0
    dynamic_shape_metadata_prefix_bytes: int = 0
    index_primitive_type: str | None = None
    pointer_primitive_type: str | None = None
    split_configs: tuple[SplitConfig, ...] = ()
    layout_physical_shape: Shape | None = None
    dynamic_dims: tuple[bool, ...] = field(default=())
    dim_level_types: tuple[str, ...] = ()

    # -- construction and validation -----------------------------------------------
    def __post_init__(self) -> None:
        def set_field(name: str, value: Any) -> None:
            # The dataclass is frozen; normalising a field in place is the one exception.
            object.__setattr__(self, name, value)

        if not isinstance(self.dtype, str):
            raise _invalid(f"dtype must be a string such as 'f32', got {self.dtype!r}", ("dtype",))
        dtype = self.dtype.lower()
        if dtype not in DTYPES:
            close = _suggest_dtypes(dtype)
            raise _invalid(f"unknown element type {self.dtype!r}", ("dtype",),
                           f"did you mean {', '.join(close)}?" if close else None)
        set_field("dtype", dtype)

        dims = _as_tuple(self.dims, "dims", ("dims",))
        dims = tuple(_as_int(d, "a dimension size", ("dim", i)) for i, d in enumerate(dims))
        for i, size in enumerate(dims):
            if size < 0:
                raise _invalid(f"dimension {i} has negative size {size}", ("dim", i))
        set_field("dims", dims)
        rank = len(dims)

        dynamic = tuple(bool(flag) for flag in _as_tuple(self.dynamic_dims, "dynamic_dims", ("dims",)))
        dynamic = dynamic or (False,) * rank
        if len(dynamic) != rank:
            raise _invalid(f"dynamic_dims has {len(dynamic)} flags for a rank-{rank} shape", ("dims",))
        set_field("dynamic_dims", dynamic)

        self._validate_minor_to_major(set_field, rank)
        self._validate_tiles(set_field)
        for name, key, minimum in (("tail_padding_alignment", "L", 1), ("element_size_in_bits", "E", 0),
                                   ("memory_space", "S", 0), ("dynamic_shape_metadata_prefix_bytes", "M", 0)):
            value = _as_int(getattr(self, name), name, (key,))
            if value < minimum:
                raise _invalid(f"{name} ({key}) must be >= {minimum}, got {value}", (key,))
            set_field(name, value)
        for name, key in (("index_primitive_type", "#"), ("pointer_primitive_type", "*")):
            value = getattr(self, name)
            if value is not None:
                if not isinstance(value, str) or not _is_integral(value.lower()) or value.lower() not in DTYPES:
                    raise _invalid(f"{name} ({key}) must be an integer element type such as u32, "
                                   f"got {value!r}", (key,))
                set_field(name, value.lower())
        self._validate_split_configs(set_field)
        self._validate_dim_level_types(set_field, rank)
        physical = self.layout_physical_shape
        if physical is not None:
            if not isinstance(physical, Shape):
                raise _invalid(f"layout_physical_shape must be a Shape, got {physical!r}", ("P",))
            if physical.layout_physical_shape is not None:
                raise _invalid("a physical shape P(...) cannot itself have a physical shape", ("P",))
        if math.prod(self.tiled_shape) > _MAX_ELEMENTS or math.prod(dims) > _MAX_ELEMENTS:
            raise _invalid(f"the shape is too large to address with 64-bit indices "
                           f"({math.prod(self.tiled_shape)} tiled elements)", ("dims",))

    def _validate_dim_level_types(self, set_field, rank: int) -> None:
        from scwork.layout._parser import DIM_LEVEL_TYPES

        levels = _as_tuple(self.dim_level_types, "dim_level_types", ("D",))
        if levels and len(levels) != rank:
            # LayoutUtil::ValidateLayoutForShape: one level type per dimension.
            raise _invalid(f"D(...) has {len(levels)} dimension level types for a rank-{rank} shape",
                           ("D",), "give one level type per dimension")
        for i, level in enumerate(levels):
            if (not isinstance(level, str) or not level or level[0] not in DIM_LEVEL_TYPES
                    or level[1:] not in ("", "+", "~", "+~")):
                raise _invalid(f"dimension level type {level!r} is not one of D, C, S, H with an optional "
                               "'+' (not unique) then '~' (not ordered)", ("D", i))
        set_field("dim_level_types", tuple(levels))

    @property
    def is_sparse(self) -> bool:
        """True when ``D(...)`` gives a dimension a level type other than dense ``D``."""
        return any(level != "D" for level in self.dim_level_types)

    def _check_map_size(self, count: int, max_elements: int, what: str, rank: int | None = None) -> None:
        rank = self.rank if rank is None else rank
        if rank > _NUMPY_MAX_DIMS:
            raise LayoutError(f"a {what} of {rank} dimensions cannot be built: numpy arrays have at most "
                              f"{_NUMPY_MAX_DIMS} dimensions",
                              hint="use linear_index for single elements, or merge dimensions")
        if count > max_elements:
            raise LayoutError(
                f"the {what} of {self} has {count:,} entries ({8 * count / 2**30:,.1f} GiB of int64), "
                f"more than max_elements={max_elements:,}",
                hint="use scwork.layout.view (view_window, buffer_window) for a window of it, or "
                     "linear_index for single elements; or pass a larger max_elements")

    def _require_dense(self, what: str) -> None:
        if self.is_sparse:
            raise LayoutError(
                f"{self} is a sparse array (dimension level types D({','.join(self.dim_level_types)})): "
                f"it has no {what}; elements of a sparse array are not stored at tiled addresses",
                hint="remove D(...) (or make every level D) to model the dense array")

    def _validate_minor_to_major(self, set_field, rank: int) -> None:
        if self.minor_to_major is None:
            set_field("minor_to_major", tuple(range(rank - 1, -1, -1)))
            return
        m2m = _as_tuple(self.minor_to_major, "minor_to_major", ("m2m",))
        m2m = tuple(_as_int(d, "a minor_to_major entry", ("m2m", i)) for i, d in enumerate(m2m))
        if len(m2m) != rank:
            # Exactly XLA's message (HloParserImpl::ParseShape).
            raise _invalid(f"Dimensions size is {rank}, but minor to major size is {len(m2m)}.", ("m2m",),
                           f"list each of the {rank} dimensions once, most minor first, e.g. "
                           f"{{{','.join(str(d) for d in range(rank - 1, -1, -1))}}}")
        seen: set[int] = set()
        for i, dim in enumerate(m2m):
            if not 0 <= dim < rank:
                raise _invalid(f"minor_to_major entry {dim} is out of range for a rank-{rank} shape "
                               f"(dimensions are 0..{rank - 1})", ("m2m", i))
            if dim in seen:
                raise _invalid(f"minor_to_major lists dimension {dim} twice; it must be a permutation "
                               f"of 0..{rank - 1}", ("m2m", i))
            seen.add(dim)
        set_field("minor_to_major", m2m)

    def _validate_tiles(self, set_field) -> None:
        tiles = []
        for level, tile in enumerate(_as_tuple(self.tiles, "tiles", ("tile",))):
            if not isinstance(tile, Tile):
                try:
                    tile = Tile(tuple(tile) if isinstance(tile, Iterable) and not isinstance(tile, str) else tile)
                except LayoutError as error:
                    where = getattr(error, "where", ("tile",))
                    raise _invalid(error.reason, ("tile", level, *where[1:]), error.hint) from None
            tiles.append(tile)
        set_field("tiles", tuple(tiles))
        rank = len(self.dims)
        shape = self.physical_shape
        for level, tile in enumerate(tiles):
            k = len(tile.dims)
            if k > len(shape):
                if level > 0:
                    # LayoutUtil::LinearIndexForNestedTiling CHECKs tile rank <= current rank.
                    raise _invalid(f"tile {tile} has {k} dimensions but the shape it applies to after "
                                   f"the previous tiles, {list(shape)}, has only {len(shape)}", ("tile", level))
                # First tile longer than the shape: XLA accepts it (ValidateLayoutForShape,
                # ShapeUtil::ArraySize counts the missing major dimensions as size 1).
                missing = k - rank
                for j in range(missing):
                    if tile.dims[j] == Tile.COMBINE:
                        raise _invalid(f"'*' in tile {tile} combines a dimension that the rank-{rank} "
                                       f"shape does not have", ("tile", level, j))
                shape = (1,) * missing + shape
            shape = _apply_tile(shape, tile.dims)

    def _validate_split_configs(self, set_field) -> None:
        configs = []
        seen: set[int] = set()
        rank = len(self.dims)
        for number, config in enumerate(_as_tuple(self.split_configs, "split_configs", ("SC",))):
            if not isinstance(config, SplitConfig):
                try:
                    dimension, indices = config
                    config = SplitConfig(dimension, tuple(indices))
                except (TypeError, ValueError) as error:
                    if isinstance(error, LayoutError):
                        raise _invalid(error.reason, ("SC", number)) from None
                    raise _invalid(f"a split config is a (dimension, indices) pair, got {config!r}",
                                   ("SC", number)) from None
            # Checks of LayoutUtil::ValidateLayoutForShape.
            if not 0 <= config.dimension < rank:
                raise _invalid(f"split config has out-of-bounds physical dimension {config.dimension} "
                               f"for a rank-{rank} shape", ("SC", number, "dim"))
            if config.dimension in seen:
                raise _invalid(f"split config has duplicate physical dimension {config.dimension}",
                               ("SC", number, "dim"))
            seen.add(config.dimension)
            size = self.physical_shape[config.dimension]
            last = 0
            for j, index in enumerate(config.split_indices):
                if index <= last:
                    raise _invalid("split config split indices must be strictly increasing and positive",
                                   ("SC", number, j))
                if index >= size:
                    raise _invalid(f"split config split index {index} is out of bounds (dimension size "
                                   f"{size})", ("SC", number, j))
                last = index
            configs.append(config)
        set_field("split_configs", tuple(configs))

    # -- text ------------------------------------------------------------------------
    def _attributes_text(self) -> str:
        # Order and omission rules of Layout::Print (xla/layout.cc).
        parts = []
        if self.dim_level_types:
            # Printed first, as Layout::ToString of XLA versions with sparse layouts.
            parts.append("D(" + ",".join(self.dim_level_types) + ")")
        if self.tiles:
            parts.append("T" + "".join(str(t) for t in self.tiles))
        if self.tail_padding_alignment != 1:
            parts.append(f"L({self.tail_padding_alignment})")
        if self.index_primitive_type is not None:
            parts.append(f"#({self.index_primitive_type})")
        if self.pointer_primitive_type is not None:
            parts.append(f"*({self.pointer_primitive_type})")
        if self.element_size_in_bits != 0:
            parts.append(f"E({self.element_size_in_bits})")
        if self.memory_space != 0:
            parts.append(f"S({self.memory_space})")
        if self.split_configs:
            parts.append("SC" + "".join(str(c) for c in self.split_configs))
        if self.layout_physical_shape is not None:
            parts.append(f"P({self.layout_physical_shape})")
        if self.dynamic_shape_metadata_prefix_bytes > 0:
            parts.append(f"M({self.dynamic_shape_metadata_prefix_bytes})")
        return "".join(parts)

    def __str__(self) -> str:
        dims = ",".join(("<=" if dyn else "") + str(d) for d, dyn in zip(self.dims, self.dynamic_dims))
        attributes = self._attributes_text()
        text = f"{self.dtype}[{dims}]"
        if self.rank == 0 and not attributes:
            return text  # Shape::Print does not print "{}" for scalars
        layout = ",".join(str(d) for d in self.minor_to_major)
        return text + "{" + layout + (":" + attributes if attributes else "") + "}"

    def __repr__(self) -> str:
        return f"Shape({str(self)!r})"

    # -- basic geometry --------------------------------------------------------------
    @property
    def rank(self) -> int:
        """Number of logical dimensions."""
        return len(self.dims)

    @property
    def num_elements(self) -> int:
        """Logical element count (bounds for dynamic dimensions)."""
        return math.prod(self.dims)

    @property
    def physical_shape(self) -> tuple[int, ...]:
        """Dimension sizes in physical order, major to minor.

        Examples
        --------
        >>> parse("f32[3,5]{0,1}").physical_shape
        (5, 3)
        """
        return tuple(self.dims[d] for d in reversed(self.minor_to_major))

    @cached_property
    def _plan(self) -> _Plan:
        axes = tuple(reversed(self.minor_to_major))
        shape = self.physical_shape
        extra = max(0, len(self.tiles[0].dims) - self.rank) if self.tiles else 0
        shape = (1,) * extra + shape
        levels = []
        for tile in self.tiles:
            levels.append((shape, tile.dims))
            shape = _apply_tile(shape, tile.dims)
        return _Plan(axes, extra, tuple(levels), shape)

    @property
    def tiled_shape(self) -> tuple[int, ...]:
        """Shape after every tile (pad, reshape, transpose), stored row-major.

        Examples
        --------
        >>> parse("bf16[4,8]{1,0:T(2,4)(2,1)}").tiled_shape
        (2, 2, 1, 4, 2, 1)
        >>> parse("f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}").tiled_shape
        (56, 37, 2, 3)
        """
        return self._plan.tiled_shape

    @property
    def element_bits(self) -> int:
        """Storage bits per element: ``E(bits)`` if set, else whole bytes of the type.

        Examples
        --------
        >>> parse("s4[8]").element_bits, parse("s4[8]{0:E(4)}").element_bits
        (8, 4)
        """
        if self.element_size_in_bits:
            return self.element_size_in_bits
        return 8 * _ceil_div(DTYPES[self.dtype][0], 8)

    @property
    def padded_elements(self) -> int:
        """Buffer slots: product of :attr:`tiled_shape`, rounded up to ``L``.

        Examples
        --------
        >>> parse("f32[3,5]{1,0:T(2,2)L(32)}").padded_elements
        32
        """
        count = math.prod(self.tiled_shape)
        return _ceil_div(count, self.tail_padding_alignment) * self.tail_padding_alignment

    @property
    def padded_bytes(self) -> int:
        """Bytes of the buffer: ``ceil(padded_elements * element_bits / 8)`` plus the ``M`` prefix."""
        return _ceil_div(self.padded_elements * self.element_bits, 8) + self.dynamic_shape_metadata_prefix_bytes

    @property
    def unpadded_bytes(self) -> int:
        """Bytes the logical elements need: ``ceil(num_elements * element_bits / 8)``."""
        return _ceil_div(self.num_elements * self.element_bits, 8)

    @property
    def has_padding(self) -> bool:
        """Whether the buffer has more slots than logical elements."""
        return self.padded_elements > self.num_elements

    @property
    def padding_fraction(self) -> float:
        """Share of buffer slots that hold padding (0.0 for an empty buffer).

        Examples
        --------
        >>> parse("f32[3,5]{1,0:T(2,2)}").padding_fraction
        0.375
        """
        padded = self.padded_elements
        return (padded - self.num_elements) / padded if padded else 0.0

    # -- reports ---------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Key figures as a JSON-friendly dict (the CLI's ``scwork layout`` prints it).

        Examples
        --------
        >>> d = parse("f32[3,5]{1,0:T(2,2)}").summary()
        >>> d["tiled_shape"], d["padded_bytes"], d["unpadded_bytes"], d["padding_fraction"]
        ((2, 3, 2, 2), 96, 60, 0.375)
        """
        try:
            xla_bytes: int | None = self.xla_array_size_bytes()
        except LayoutError:
            xla_bytes = None
        return {
            "text": str(self),
            "dtype": self.dtype,
            "logical_shape": self.dims,
            "physical_shape": self.physical_shape,
            "tiled_shape": self.tiled_shape,
            "element_bits": self.element_bits,
            "num_elements": self.num_elements,
            "padded_elements": self.padded_elements,
            "unpadded_bytes": self.unpadded_bytes,
            "padded_bytes": self.padded_bytes,
            "padding_fraction": self.padding_fraction,
            "xla_array_size_bytes": xla_bytes,
            "memory_space": self.memory_space,
        }

    def _repr_html_(self) -> str:
        rows = []
        for key, value in self.summary().items():
            if key == "padding_fraction":
                value = f"{value:.1%}"
            rows.append(f"<tr><th style='text-align:left'>{html.escape(key)}</th>"
                        f"<td style='text-align:left'><code>{html.escape(str(value))}</code></td></tr>")
        return "<table class='scwork-shape'>" + "".join(rows) + "</table>"


# ======================================================================================
# parse
# ======================================================================================
def _build(parsed: ParsedShape, text: str) -> Shape:
    physical = _build(parsed.physical, text) if parsed.physical is not None else None
    try:
        return Shape(**parsed.fields, layout_physical_shape=physical)
    except LayoutError as error:
        where = getattr(error, "where", None)
        positions = parsed.positions
        position = None
        # Most specific known piece first: ("tile", 1, 0) -> ("tile", 1) -> ("tile",).
        while where and position is None:
            position = positions.get(where)
            where = where[:-1]
        if position is None:
            position = positions.get(("layout",), positions.get(("dtype",), 0))
        raise LayoutError(error.reason, text, position, error.hint) from None


def parse(text: str) -> Shape:
    """Parse XLA shape-with-layout text such as ``bf16[4,8]{1,0:T(2,4)(2,1)}``.

    The grammar is XLA's (see :mod:`scwork.layout._parser`); the element type
    is case-insensitive; without braces the layout is row-major.

    Parameters
    ----------
    text : str
        ``dtype[d0,d1,...]{minor_to_major:attributes}``; ``<=N`` marks a
        bounded dynamic dimension.

    Returns
    -------
    Shape

    Raises
    ------
    LayoutError
        For any malformed or invalid text; ``.position`` is the 0-based offset
        of the problem and ``.reason`` says what it is.

    Examples
    --------
    >>> parse("F32[3,5]")
    Shape('f32[3,5]{1,0}')
    >>> parse("f32[]{:T(256)}").padded_elements
    256
    >>> try:
    ...     parse("f32[123,456,789]{1:T(2,*,128)}")
    ... except LayoutError as err:
    ...     print(err.reason, err.position)
    Dimensions size is 3, but minor to major size is 1. 17
    """
    return _build(parse_shape_text(text, DTYPES.__contains__, _suggest_dtypes), text)
