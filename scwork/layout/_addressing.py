"""Where each element of a tiled shape lives: linear index, index and address maps, buffers.

The methods of :class:`~scwork.layout.Shape` that place logical elements in the
buffer, with every tile applied as [xla-tiled] defines it: :meth:`linear_index` of
one element, :meth:`index_map` of all of them (numpy or the numba kernels of
:mod:`scwork.layout._kernels` for large shapes), its inverse :meth:`address_map`, and
:meth:`to_physical` / :meth:`from_physical` to lay an array out and read it back.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np

from scwork._validate import shown
from scwork.errors import InternalError, LayoutError
from scwork.layout.tiles import MAX_MAP_ELEMENTS, NUMBA_MIN_ELEMENTS, Tile, _as_int

__all__: list[str] = []


class _Addressing:
    """Mixin of :class:`~scwork.layout.Shape`: element addresses and buffers."""

    def _check_index(self, index: Sequence[int]) -> tuple[int, ...]:
        try:
            values = tuple(index)
        except TypeError:
            raise LayoutError(f"an index is a sequence of {self.rank} integers, got {index!r}") from None
        if len(values) != self.rank:
            raise LayoutError(f"index {values} has {len(values)} entries but {self} has rank {self.rank}")
        checked = []
        for dim, (value, size) in enumerate(zip(values, self.dims)):
            value = _as_int(value, f"index entry {dim}", ())
            if not 0 <= value < size:
                raise LayoutError(f"index {value} is out of range for dimension {dim} of size {size} "
                                  f"(valid: 0..{size - 1})" if size else
                                  f"dimension {dim} has size 0: no index is valid")
            checked.append(value)
        return tuple(checked)

    def linear_index(self, index: Sequence[int]) -> int:
        """Buffer slot of one logical element, with every tile applied ([xla-tiled]).

        Parameters
        ----------
        index : sequence of int
            Logical coordinates, one per dimension, within bounds.

        Raises
        ------
        LayoutError
            If the index has the wrong length or is out of range.

        Examples
        --------
        >>> from scwork.layout import parse
        >>> parse("f32[3,5]{1,0:T(2,2)}").linear_index((2, 3))
        17
        >>> parse("bf16[4,8]{1,0:T(2,4)(2,1)}").linear_index((1, 1))
        3
        """
        self._require_dense("linear index")
        index = self._check_index(index)
        plan = self._plan
        columns = [0] * plan.extra_major + [index[axis] for axis in plan.physical_axes]
        return int(plan.address(columns))

    def index_map(self, engine: str = "auto", *, max_elements: int = MAX_MAP_ELEMENTS) -> np.ndarray:
        """Buffer slot of every logical element, as an int64 array of the logical shape.

        Parameters
        ----------
        engine : {"auto", "numpy", "numba"}
            ``"auto"`` uses numba kernels above ``NUMBA_MIN_ELEMENTS`` (4096)
            elements and numpy below; all engines give identical results.
        max_elements : int
            Refuse (LayoutError) shapes with more elements than this (the map
            takes 8 bytes per element); :mod:`scwork.layout.view` computes windows
            of any shape instead. Default :data:`MAX_MAP_ELEMENTS`.

        Examples
        --------
        >>> from scwork.layout import parse
        >>> parse("f32[3,5]{1,0:T(2,2)}").index_map()
        array([[ 0,  1,  4,  5,  8],
               [ 2,  3,  6,  7, 10],
               [12, 13, 16, 17, 20]])
        """
        self._require_dense("index map")
        if not isinstance(engine, str) or engine not in ("auto", "numpy", "numba"):
            raise LayoutError(f"unknown engine {shown(engine)}", hint="use 'auto', 'numpy' or 'numba'")
        max_elements = _as_int(max_elements, "max_elements", ())
        self._check_map_size(self.num_elements, max_elements, "index map")
        if self.num_elements == 0:
            try:
                return np.zeros(self.dims, dtype=np.int64)  # no element: nothing to compute, any dims
            except ValueError:   # numpy refuses empty shapes whose other dims multiply past int64
                raise LayoutError(f"numpy cannot make an empty array of shape {self.dims}: its non-zero "
                                  "dimensions multiply past int64", hint="use linear_index or smaller "
                                  "dimensions") from None
        if engine == "auto":
            engine = "numba" if self.num_elements > NUMBA_MIN_ELEMENTS else "numpy"
        if engine == "numpy" or (engine == "numba" and self.rank == 0):
            return self._index_map_numpy()
        if engine == "numba":
            return self._index_map_numba()
        raise LayoutError(f"unknown engine {engine!r}", hint="use 'auto', 'numpy' or 'numba'")

    def _index_map_numpy(self) -> np.ndarray:
        plan = self._plan
        # Sparse (broadcastable) coordinates: memory stays O(sum of dims) until the final sum.
        coords = np.indices(self.dims, dtype=np.int64, sparse=True)
        columns = [0] * plan.extra_major + [coords[axis] for axis in plan.physical_axes]
        # Broadcasting also covers the scalar case, where the address is a plain int.
        return np.broadcast_to(np.asarray(plan.address(columns), dtype=np.int64), self.dims).copy()

    def _contribution_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Per logical dimension, the address of the element with only that coordinate set."""
        plan = self._plan
        tables, starts, start = [], [], 0
        for dim, size in enumerate(self.dims):
            position = plan.extra_major + plan.physical_axes.index(dim)
            columns = [0] * (plan.extra_major + self.rank)
            columns[position] = np.arange(size, dtype=np.int64)
            tables.append(np.asarray(plan.address(columns), dtype=np.int64))
            starts.append(start)
            start += size
        flat = np.concatenate(tables) if tables else np.zeros(0, dtype=np.int64)
        return flat, np.array(starts, dtype=np.int64)

    def _kernel_program(self) -> tuple:
        """The flat int64 arrays :func:`scwork.layout._kernels.tiled_index_fill` runs."""
        plan = self._plan
        i64 = np.int64
        tile_sizes = [t for _, tile in plan.levels for t in tile]
        shape_sizes = [s for shape, _ in plan.levels for s in shape]
        tile_starts = np.cumsum([0] + [len(tile) for _, tile in plan.levels])
        shape_starts = np.cumsum([0] + [len(shape) for shape, _ in plan.levels])
        return (np.array(self.dims, i64), np.array(plan.physical_axes, i64), int(plan.extra_major),
                np.array(tile_sizes, i64), tile_starts.astype(i64), np.array(shape_sizes, i64),
                shape_starts.astype(i64), np.array(plan.strides, i64))

    def _index_map_numba(self) -> np.ndarray:
        from scwork.layout import _kernels  # lazy: importing numba costs ~0.5 s

        out = np.empty(self.num_elements, dtype=np.int64)
        if all(t != Tile.COMBINE for tile in self.tiles for t in tile.dims):
            tables, starts = self._contribution_tables()
            _kernels.outer_sum_fill(tables, starts, np.array(self.dims, dtype=np.int64), out)
        else:
            _kernels.tiled_index_fill(*self._kernel_program(), out)
        return out.reshape(self.dims)

    def address_map(self) -> np.ndarray:
        """For every buffer slot, the row-major logical index stored there (-1 = padding).

        Examples
        --------
        >>> from scwork.layout import parse
        >>> parse("f32[3]{0:T(2)}").address_map()
        array([ 0,  1,  2, -1])
        """
        self._require_dense("address map")
        self._check_map_size(self.padded_elements, MAX_MAP_ELEMENTS, "address map")
        flat = self.index_map().ravel()
        if flat.size > NUMBA_MIN_ELEMENTS:
            from scwork.layout import _kernels

            out = np.full(self.padded_elements, -1, dtype=np.int64)
            if _kernels.invert_index_map(flat, out):
                # Cannot happen for a valid index map; guard against kernel bugs.
                raise InternalError(
                    f"index map of {self} has addresses outside the "
                    f"{self.padded_elements}-slot buffer; please report this layout"
                )
            return out
        out = np.full(self.padded_elements, -1, dtype=np.int64)
        out[flat] = np.arange(flat.size, dtype=np.int64)
        return out

    def to_physical(self, array: Any, fill: Any = 0) -> np.ndarray:
        """Lay a logical array out as its buffer: one slot per element, padding = ``fill``.

        The result has ``padded_elements`` entries of the array's dtype; sub-byte
        ``E(bits)`` packing is *not* applied (slots, not bits).

        Examples
        --------
        >>> from scwork.layout import parse
        >>> parse("f32[3]{0:T(2)}").to_physical(np.array([1.0, 2.0, 3.0]), fill=-1).tolist()
        [1.0, 2.0, 3.0, -1.0]
        """
        self._require_dense("physical buffer")
        array = _as_array(array, "array")
        if array.shape != self.dims:
            raise LayoutError(f"array has shape {array.shape} but {self} has logical shape {self.dims}")
        self._check_map_size(self.padded_elements, MAX_MAP_ELEMENTS, "physical buffer")
        buffer = np.full(self.padded_elements, _fill_value(fill, array.dtype), dtype=array.dtype)
        buffer[self.index_map().ravel()] = array.ravel()
        return buffer

    def from_physical(self, buffer: Any) -> np.ndarray:
        """Read the logical array back from a buffer made by :meth:`to_physical`.

        Examples
        --------
        >>> from scwork.layout import parse
        >>> s = parse("f32[3,5]{1,0:T(2,2)}")
        >>> a = np.arange(15).reshape(3, 5)
        >>> bool((s.from_physical(s.to_physical(a)) == a).all())
        True
        """
        self._require_dense("physical buffer")
        buffer = _as_array(buffer, "buffer")
        if buffer.shape != (self.padded_elements,):
            raise LayoutError(f"buffer has shape {buffer.shape} but {self} needs a 1-D buffer of "
                              f"{self.padded_elements} slots")
        return buffer[self.index_map()]


def _as_array(value: Any, what: str) -> np.ndarray:
    """``np.asarray(value)``, or a LayoutError when numpy cannot make an array of it (ragged lists)."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError, OverflowError) as error:
        raise LayoutError(f"{what} is not an array: {error}",
                          hint="pass a numpy array (or nested lists of equal lengths)") from None


def _fill_value(fill: Any, dtype: np.dtype) -> Any:
    """``fill`` as a ``dtype`` scalar; a LayoutError unless it is stored exactly (no silent cast)."""
    if dtype.kind == "O":
        return fill
    problem = f"fill {fill!r} cannot be stored exactly in the array's dtype {dtype}"
    hint = f"pass a fill value of the array's type ({dtype}), or convert the array first"
    try:
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")       # numpy warns (not raises) on lossy casts
            given = np.asarray(fill)
            if given.ndim != 0:
                raise LayoutError(f"fill must be one value, got an array of shape {given.shape}", hint=hint)
            converted = given.astype(dtype)
            # Real numbers into a float slot round to the nearest value (0.1 in float32) and
            # keep NaN; a cast that overflows warns above. Everything else must be exact.
            # NaT, like NaN, equals nothing, yet it is the usual padding of datetime and
            # timedelta arrays: a NaT of the array's own kind (any unit) is stored as NaT.
            same = ((dtype.kind in "fc" and given.dtype.kind in "biuf") or bool(converted == given)
                    or (dtype.kind in "mM" and given.dtype.kind == dtype.kind and bool(np.isnat(given))))
    except LayoutError:
        raise
    except (ValueError, TypeError, OverflowError, ArithmeticError, Warning):
        raise LayoutError(problem, hint=hint) from None
    if not same:
        raise LayoutError(problem, hint=hint)
    return converted[()]
