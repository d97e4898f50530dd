"""SparseCore embedding-table padding: what a table really costs in HBM.

Sources: [jte] table_stacking.py; [sc-guide] §9.

SparseCores gather embedding rows from HBM in 32-byte lines, so the feature
dimension of every table is padded to whole lines: ``padded_dim =
round_up(dim, line_bytes / itemsize)`` (8 for f32, 16 for bf16). Tables are
mod-sharded over all ``P`` SparseCores of the system with 8-row granularity, so
the vocabulary is padded too: ``padded_vocab = round_up(vocab, 8 * P)``. A width-1
f32 table therefore wastes 7/8 of its dimension bytes.

[jte] table_stacking.py writes ``padded_dim = round_up(dim, 8)`` (f32 tables); for other dtypes this
module pads to the same 32-byte line, which is the granule the SparseCore DMA
works in ([cloud-tpu]; [sc-guide] §9).

:func:`packing_whatif` answers the roadmap item "better packing of width < 8":
how much HBM narrow tables would save if several rows shared one line.

Examples
--------
>>> from scwork.layout import embedding
>>> t = embedding.table_padding(1000, 1, num_sparsecores=2)
>>> t.padded_vocab, t.padded_dim, t.dim_waste_fraction
(1008, 8, 0.875)
>>> embedding.table_padding(10, 20, dtype="bf16", num_sparsecores=1).padded_dim
32
"""

from __future__ import annotations

from scwork._rounding import ceil_div, round_up

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from scwork._validate import positive_int, shown
from scwork.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import xarray

    from scwork.hardware.topology import Topology

__all__ = [
    "TablePadding",
    "table_padding",
    "padding_report",
    "packing_whatif",
    "EMBEDDING_DTYPE_SIZES",
    "VOCAB_ROWS_PER_SPARSECORE_GRANULE",
]

#: Table dtypes and their sizes in bytes.
EMBEDDING_DTYPE_SIZES: dict[str, int] = {"f32": 4, "bf16": 2, "f16": 2, "s8": 1}
_DTYPE_ALIASES = {"float32": "f32", "fp32": "f32", "bfloat16": "bf16", "float16": "f16",
                  "fp16": "f16", "int8": "s8", "i8": "s8"}

#: The vocabulary is padded to a multiple of this many rows per SparseCore ([jte] table_stacking.py).
VOCAB_ROWS_PER_SPARSECORE_GRANULE = 8


#: Largest vocabulary, width, SparseCore count or line size a table may have (2**64).
MAX_TABLE_NUMBER = 2**64


def _int_array(values):
    """int64 array of exact integers, or an object array of Python ints beyond int64."""
    import numpy as np

    values = [int(v) for v in values]
    if all(-2**63 <= v < 2**63 for v in values):
        return np.asarray(values, dtype=np.int64)
    return np.asarray(values, dtype=object)



def _dtype(dtype: Any) -> tuple[str, int]:
    if not isinstance(dtype, str):
        raise ConfigError(f"dtype must be a name such as 'f32', got {type(dtype).__name__} {dtype!r}"[:200])
    key = dtype.strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in EMBEDDING_DTYPE_SIZES:
        raise ConfigError(
            f"dtype must be one of {', '.join(EMBEDDING_DTYPE_SIZES)}, got {dtype!r}"
        )
    return key, EMBEDDING_DTYPE_SIZES[key]


def _num_sparsecores(num_sparsecores: Any, topology: Any) -> int:
    """Exactly one of the two: the SparseCore count ``P`` the tables are sharded over."""
    if (num_sparsecores is None) == (topology is None):
        raise ConfigError(
            "give exactly one of num_sparsecores and topology "
            f"(got num_sparsecores={shown(num_sparsecores)}, topology={shown(topology)}); e.g. "
            "topology=scwork.Topology.for_chip('v5p', num_chips=4) or num_sparsecores=16"
        )
    if topology is not None:
        partitions = getattr(topology, "num_partitions", None)
        if partitions is None or isinstance(partitions, bool) or not isinstance(partitions, int):
            raise ConfigError(f"topology must be a scwork.Topology, got {type(topology).__name__}")
        if partitions < 1:
            raise ConfigError(
                f"topology {topology} has no SparseCores (num_partitions={partitions}); "
                "embedding tables are sharded over SparseCores, pick a chip that has them"
            )
        return int(partitions)
    return positive_int("num_sparsecores", num_sparsecores)


@dataclass(frozen=True)
class TablePadding:
    """One embedding table before and after SparseCore padding.

    Build it with :func:`table_padding` (which also takes a topology); direct
    construction validates the same way.

    Parameters
    ----------
    name : str
        Table name.
    vocab_size : int
        Rows (ids) of the table.
    embedding_dim : int
        Feature width.
    dtype : str
        ``"f32"``, ``"bf16"``, ``"f16"`` or ``"s8"``.
    num_sparsecores : int
        SparseCores ``P`` the table is mod-sharded over.
    line_bytes : int, default 32
        HBM line the feature dimension is padded to.

    Attributes
    ----------
    itemsize : int
        Bytes per element.
    padded_vocab : int
        ``round_up(vocab_size, 8 * num_sparsecores)``.
    padded_dim : int
        ``round_up(embedding_dim, line_bytes / itemsize)``.

    Examples
    --------
    >>> t = TablePadding("clicks", 100, 3, "f32", num_sparsecores=4)
    >>> t.padded_vocab, t.padded_dim, t.rows_per_sparsecore
    (128, 8, 32)
    >>> t.unpadded_bytes, t.padded_bytes, t.waste_bytes
    (1200, 4096, 2896)
    """

    name: str
    vocab_size: int
    embedding_dim: int
    dtype: str = "f32"
    num_sparsecores: int = 1
    line_bytes: int = 32
    itemsize: int = field(init=False)
    padded_vocab: int = field(init=False)
    padded_dim: int = field(init=False)

    def __post_init__(self) -> None:
        label = f"table {self.name!r}"
        vocab = positive_int("vocab_size", self.vocab_size, context=label)
        dim = positive_int("embedding_dim", self.embedding_dim, context=label)
        cores = positive_int("num_sparsecores", self.num_sparsecores, context=label)
        line = positive_int("line_bytes", self.line_bytes, context=label)
        for what, value in (("vocab_size", vocab), ("embedding_dim", dim), ("num_sparsecores", cores),
                            ("line_bytes", line)):
            # Far beyond any table, and keeps every product printable (Python refuses to
            # print ints of more than 4300 digits) and quick to compute.
            if value > MAX_TABLE_NUMBER:
                raise ConfigError(f"{what} = {shown(value)} is more than 2**64 ({label}); no table is that large")
        dtype, itemsize = _dtype(self.dtype)
        if line % itemsize:
            raise ConfigError(
                f"line_bytes={line} is not a multiple of the {dtype} size ({itemsize} bytes) ({label})"
            )
        line_elems = line // itemsize
        values = {
            "name": str(self.name), "vocab_size": vocab, "embedding_dim": dim,
            "dtype": dtype, "num_sparsecores": cores, "line_bytes": line, "itemsize": itemsize,
            "padded_vocab": round_up(vocab, VOCAB_ROWS_PER_SPARSECORE_GRANULE * cores),
            "padded_dim": round_up(dim, line_elems),
        }
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @property
    def line_elements(self) -> int:
        """Elements per HBM line: ``line_bytes / itemsize`` (8 for f32, 16 for bf16)."""
        return self.line_bytes // self.itemsize

    @property
    def rows_per_sparsecore(self) -> int:
        """Rows each SparseCore stores: ``padded_vocab / num_sparsecores``."""
        return self.padded_vocab // self.num_sparsecores

    @property
    def unpadded_bytes(self) -> int:
        """``vocab_size * embedding_dim * itemsize``."""
        return self.vocab_size * self.embedding_dim * self.itemsize

    @property
    def padded_bytes(self) -> int:
        """HBM the table takes: ``padded_vocab * padded_dim * itemsize``."""
        return self.padded_vocab * self.padded_dim * self.itemsize

    @property
    def waste_bytes(self) -> int:
        """Padding bytes: ``padded_bytes - unpadded_bytes``."""
        return self.padded_bytes - self.unpadded_bytes

    @property
    def waste_fraction(self) -> float:
        """Fraction of the padded table that is padding."""
        return self.waste_bytes / self.padded_bytes

    @property
    def dim_waste_fraction(self) -> float:
        """Fraction of each row that is padding: ``(padded_dim - dim) / padded_dim``."""
        return (self.padded_dim - self.embedding_dim) / self.padded_dim

    @property
    def vocab_waste_fraction(self) -> float:
        """Fraction of the rows that are padding: ``(padded_vocab - vocab) / padded_vocab``."""
        return (self.padded_vocab - self.vocab_size) / self.padded_vocab

    def summary(self) -> dict[str, Any]:
        """Every number of the table as a plain dict.

        Examples
        --------
        >>> table_padding(1000, 1, num_sparsecores=2).summary()["waste_fraction"]
        0.8759920634920635
        """
        return {
            "name": self.name,
            "vocab_size": self.vocab_size,
            "embedding_dim": self.embedding_dim,
            "dtype": self.dtype,
            "itemsize": self.itemsize,
            "num_sparsecores": self.num_sparsecores,
            "line_bytes": self.line_bytes,
            "padded_vocab": self.padded_vocab,
            "padded_dim": self.padded_dim,
            "rows_per_sparsecore": self.rows_per_sparsecore,
            "unpadded_bytes": self.unpadded_bytes,
            "padded_bytes": self.padded_bytes,
            "waste_bytes": self.waste_bytes,
            "waste_fraction": self.waste_fraction,
            "dim_waste_fraction": self.dim_waste_fraction,
            "vocab_waste_fraction": self.vocab_waste_fraction,
        }

    def _repr_html_(self) -> str:
        rows = []
        for key, value in self.summary().items():
            if key.endswith("fraction"):
                value = f"{value:.1%}"
            rows.append(f"<tr><th style='text-align:left'>{html.escape(key)}</th>"
                        f"<td style='text-align:left'>{html.escape(str(value))}</td></tr>")
        title = html.escape(f"TablePadding {self.name!r}: {self.vocab_size} x {self.embedding_dim} {self.dtype}")
        return f"<table><caption>{title}</caption>{''.join(rows)}</table>"


def table_padding(
    vocab_size: int,
    embedding_dim: int,
    *,
    dtype: str = "f32",
    num_sparsecores: int | None = None,
    topology: "Topology | None" = None,
    name: str = "table",
    line_bytes: int = 32,
) -> TablePadding:
    """Padding of one embedding table on SparseCores ([jte] table_stacking.py; [sc-guide] §9).

    Parameters
    ----------
    vocab_size, embedding_dim : int
        Table rows and feature width, >= 1.
    dtype : {"f32", "bf16", "f16", "s8"}, default "f32"
    num_sparsecores : int, optional
        SparseCores ``P`` the table is sharded over.
    topology : scwork.Topology, optional
        Alternative to ``num_sparsecores``: ``P = topology.num_partitions``.
        Give exactly one of the two.
    name : str, default "table"
    line_bytes : int, default 32
        HBM line size the feature dimension is padded to.

    Returns
    -------
    TablePadding

    Raises
    ------
    ConfigError
        A size that is not a positive integer (the message names it), both or
        neither of ``num_sparsecores`` / ``topology``, a topology without
        SparseCores, or an unknown dtype.

    Examples
    --------
    >>> import scwork
    >>> topo = scwork.Topology.for_chip("v5p", num_chips=4)      # 16 SparseCores
    >>> t = table_padding(1000, 8, topology=topo, name="user_id")
    >>> t.padded_vocab, t.rows_per_sparsecore, t.dim_waste_fraction
    (1024, 64, 0.0)
    """
    cores = _num_sparsecores(num_sparsecores, topology)
    return TablePadding(name, vocab_size, embedding_dim, dtype, cores, line_bytes)


_VARIABLES = {
    # name: (units, long_name)
    "vocab_size": ("rows", "vocabulary size"),
    "embedding_dim": ("elements", "embedding dimension (feature width)"),
    "padded_vocab": ("rows", "vocabulary padded to 8 rows per SparseCore"),
    "padded_dim": ("elements", "dimension padded to whole HBM lines"),
    "rows_per_sparsecore": ("rows", "rows stored on each SparseCore"),
    "itemsize": ("bytes", "bytes per element"),
    "unpadded_bytes": ("bytes", "table bytes without padding"),
    "padded_bytes": ("bytes", "table bytes in HBM with padding"),
    "waste_bytes": ("bytes", "padding bytes"),
    "waste_fraction": ("1", "fraction of the padded table that is padding"),
    "dim_waste_fraction": ("1", "fraction of each row that is padding"),
    "vocab_waste_fraction": ("1", "fraction of the rows that are padding"),
}


def padding_report(
    tables: Mapping[str, tuple[int, int]] | Iterable[TablePadding],
    *,
    topology: "Topology | None" = None,
    num_sparsecores: int | None = None,
    dtype: str = "f32",
) -> "xarray.Dataset":
    """Padding of many tables, one row per table, with totals.

    Parameters
    ----------
    tables : mapping or iterable of TablePadding
        ``{name: (vocab_size, embedding_dim)}`` (padded with ``dtype`` over the
        given topology / SparseCore count) or ready-made :class:`TablePadding`
        objects (then ``topology`` / ``num_sparsecores``, if given, must match them).
    topology, num_sparsecores
        As in :func:`table_padding`; exactly one is required for a mapping.
    dtype : str, default "f32"
        Dtype of the tables of a mapping.

    Returns
    -------
    xarray.Dataset
        Dim ``table``; variables ``vocab_size``, ``embedding_dim``, ``padded_vocab``,
        ``padded_dim``, ``rows_per_sparsecore``, ``itemsize``, ``unpadded_bytes``,
        ``padded_bytes``, ``waste_bytes``, ``waste_fraction``,
        ``dim_waste_fraction``, ``vocab_waste_fraction`` (each with ``units`` and
        ``long_name``) and coordinate ``dtype``. Attributes hold the totals:
        ``total_unpadded_bytes``, ``total_padded_bytes``, ``total_waste_bytes``,
        ``total_waste_fraction``.

    Raises
    ------
    ConfigError
        No tables, duplicate names, bad sizes (named with their table), or a
        topology that disagrees with ready-made tables.

    Examples
    --------
    >>> ds = padding_report({"a": (1000, 1), "b": (1000, 8)}, num_sparsecores=2)
    >>> ds["padded_bytes"].values.tolist()
    [32256, 32256]
    >>> ds.attrs["total_unpadded_bytes"], ds.attrs["total_padded_bytes"]
    (36000, 64512)
    """
    import numpy as np
    import xarray as xr

    if isinstance(tables, Mapping):
        cores = _num_sparsecores(num_sparsecores, topology)
        built = []
        for name, spec in tables.items():
            try:
                vocab, dim = spec
            except (TypeError, ValueError):
                raise ConfigError(
                    f"table {name!r}: expected (vocab_size, embedding_dim), got {spec!r}"
                ) from None
            built.append(TablePadding(name, vocab, dim, dtype, cores))
    else:
        if isinstance(tables, (str, bytes)) or not isinstance(tables, Iterable):
            raise ConfigError("tables must be a mapping name -> (vocab_size, embedding_dim) or TablePadding "
                              f"objects, got {type(tables).__name__}")
        built = list(tables)
        for item in built:
            if not isinstance(item, TablePadding):
                raise ConfigError(
                    "tables must be a mapping name -> (vocab_size, embedding_dim) or TablePadding "
                    f"objects, got an item of type {type(item).__name__}"
                )
        if num_sparsecores is not None or topology is not None:
            cores = _num_sparsecores(num_sparsecores, topology)
            wrong = [t.name for t in built if t.num_sparsecores != cores]
            if wrong:
                raise ConfigError(
                    f"tables {wrong} were padded for another SparseCore count than {cores}; "
                    "rebuild them with table_padding(..., num_sparsecores=...) or drop the argument"
                )
    if not built:
        raise ConfigError("padding_report needs at least one table")
    names = [t.name for t in built]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"duplicate table names {duplicates}; give every table its own name")

    data_vars = {}
    for var, (units, long_name) in _VARIABLES.items():
        values = [getattr(t, var) for t in built]
        if var.endswith("fraction"):
            array = np.asarray(values, dtype=np.float64)
        else:
            # Exact integers beyond int64 (a what-if of 2**63 rows) stay Python ints.
            array = _int_array(values)
        data_vars[var] = ("table", array, {"units": units, "long_name": long_name})
    total_unpadded = int(sum(t.unpadded_bytes for t in built))
    total_padded = int(sum(t.padded_bytes for t in built))
    cores_used = sorted({t.num_sparsecores for t in built})
    line_sizes = sorted({t.line_bytes for t in built})
    return xr.Dataset(
        data_vars,
        coords={
            "table": ("table", names, {"long_name": "table name"}),
            "dtype": ("table", [t.dtype for t in built], {"long_name": "element type"}),
        },
        attrs={
            "units": "bytes",
            "total_unpadded_bytes": total_unpadded,
            "total_padded_bytes": total_padded,
            "total_waste_bytes": total_padded - total_unpadded,
            "total_waste_fraction": (total_padded - total_unpadded) / total_padded,
            "num_sparsecores": cores_used[0] if len(cores_used) == 1 else str(cores_used),
            "line_bytes": line_sizes[0] if len(line_sizes) == 1 else str(line_sizes),
            "long_name": "SparseCore embedding-table padding",
        },
    )


def packing_whatif(
    vocab_size: int,
    embedding_dim: int,
    *,
    dtype: str = "f32",
    num_sparsecores: int | None = None,
    topology: "Topology | None" = None,
    line_bytes: int = 32,
) -> "xarray.Dataset":
    """What packing narrow rows several to a line would save (roadmap: "width < 8").

    Today every row of a table narrower than one HBM line still takes a whole line.
    Packing puts ``k = floor(line_elements / embedding_dim)`` rows in each line.
    Assumption: a row never straddles two lines (a gather still reads one line
    per row), so the leftover ``line_elements - k * embedding_dim`` elements of each
    line stay padding; each SparseCore packs its own shard of
    ``rows_per_sparsecore`` rows. Tables at least one line wide gain nothing: their
    rows already fill whole lines except for the tail of the last one, which
    packing without straddling cannot use.

    Parameters
    ----------
    vocab_size, embedding_dim, dtype, num_sparsecores, topology, line_bytes
        As in :func:`table_padding`.

    Returns
    -------
    xarray.Dataset
        Dim ``scheme`` = ``["padded", "packed"]`` (today, and the what-if);
        variables ``rows_per_line``, ``lines``, ``bytes``, ``waste_bytes`` and
        ``waste_fraction``. Attributes: ``unpadded_bytes``, ``factor_saved``
        (padded bytes / packed bytes), ``bytes_saved``, ``packing_applies`` and a
        ``note`` in words.

    Examples
    --------
    >>> ds = packing_whatif(1000, 1, num_sparsecores=2)
    >>> ds["bytes"].values.tolist(), ds.attrs["factor_saved"]
    ([32256, 4032], 8.0)
    >>> packing_whatif(1000, 8, num_sparsecores=2).attrs["packing_applies"]
    0
    """
    import xarray as xr

    table = table_padding(vocab_size, embedding_dim, dtype=dtype, num_sparsecores=num_sparsecores,
                          topology=topology, line_bytes=line_bytes)
    line_elems = table.line_elements
    lines_per_row_today = table.padded_dim // line_elems
    lines_today = table.padded_vocab * lines_per_row_today
    applies = table.embedding_dim < line_elems
    if applies:
        rows_per_line = line_elems // table.embedding_dim
        # Integer ceiling: a float division rounds for vocabularies beyond 2**53 rows.
        lines_packed = table.num_sparsecores * ceil_div(table.rows_per_sparsecore, rows_per_line)
        note = (
            f"width {table.embedding_dim} < {line_elems} elements per {table.line_bytes}-byte line: "
            f"packing {rows_per_line} rows per line (rows never straddle a line) would use "
            f"{lines_packed} lines instead of {lines_today}"
        )
    else:
        rows_per_line = 1
        lines_packed = lines_today
        note = (
            f"width {table.embedding_dim} >= {line_elems} elements per {table.line_bytes}-byte line: "
            "every row already fills whole lines, so packing without straddling lines changes nothing"
        )
    bytes_today = lines_today * table.line_bytes
    bytes_packed = lines_packed * table.line_bytes
    unpadded = table.unpadded_bytes
    total = _int_array([bytes_today, bytes_packed])
    return xr.Dataset(
        {
            "rows_per_line": ("scheme", _int_array([1, rows_per_line]),
                              {"units": "rows", "long_name": "table rows stored per HBM line"}),
            "lines": ("scheme", _int_array([lines_today, lines_packed]),
                      {"units": "lines", "long_name": f"{table.line_bytes}-byte HBM lines"}),
            "bytes": ("scheme", total, {"units": "bytes", "long_name": "table bytes in HBM"}),
            "waste_bytes": ("scheme", total - unpadded, {"units": "bytes", "long_name": "padding bytes"}),
            "waste_fraction": ("scheme", (total - unpadded) / total,
                               {"units": "1", "long_name": "fraction of the table that is padding"}),
        },
        coords={"scheme": ("scheme", ["padded", "packed"],
                           {"long_name": "padded: one row per line group (today); packed: rows share lines"})},
        attrs={
            "units": "bytes",
            "vocab_size": table.vocab_size,
            "embedding_dim": table.embedding_dim,
            "dtype": table.dtype,
            "num_sparsecores": table.num_sparsecores,
            "line_bytes": table.line_bytes,
            "unpadded_bytes": unpadded,
            "factor_saved": bytes_today / bytes_packed,
            "bytes_saved": bytes_today - bytes_packed,
            "packing_applies": int(applies),
            "note": note,
            "assumption": "a row never straddles two lines; each SparseCore packs its own shard",
        },
    )
