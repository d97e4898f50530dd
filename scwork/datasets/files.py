"""Real categorical tables: CSV, TSV or Parquet columns read into ragged ids, and Parquet shards.

:func:`load_table` reads the columns; synthetic data is written as Parquet shards.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scwork._validate import decimal_int
from scwork._validate import shown as _shown
from scwork.datasets._checks import _positive_int
from scwork.datasets._flat import flat_layout, flat_list_table, write_flat_shard
from scwork.datasets._row_groups import read_checked_row_groups
from scwork.datasets.synthetic import synthetic
from scwork.errors import ConfigError, InputError

__all__ = ["LoadedTable", "load_table", "write_synthetic_parquet"]


# ======================================================================================
# Real data: CSV / TSV / Parquet
# ======================================================================================

_DELIMITED = {".csv": ",", ".tsv": "\t", ".tab": "\t"}
_PARQUET = {".parquet", ".pq"}
_COMPRESSED = {".gz", ".bz2", ".zst", ".lz4"}
# A text token that is an integer id: decimal digits, optionally signed, optionally
# followed by a zero fraction ("7", "+7", "7.0").
_INTEGER_TOKEN = r"^[+-]?[0-9]+(\.0*)?$"
_PARQUET_CODECS = {"none", "snappy", "gzip", "brotli", "lz4", "zstd"}
#: ``write_synthetic_parquet(encoding=...)``: pyarrow ``write_table`` options of each.
_PARQUET_ENCODINGS = {
    "delta": {"use_dictionary": False, "column_encoding": "DELTA_BINARY_PACKED"},
    "dictionary": {"use_dictionary": True},
    "plain": {"use_dictionary": False, "column_encoding": "PLAIN"},
}
#: ``write_synthetic_parquet(id_type=...)``: the stored integer type of the ids.
_PARQUET_ID_TYPES = {"auto", "int32", "int64"}
#: ``write_synthetic_parquet(layout=...)``: flat CSR (scwork.datasets._flat) or one list column per feature.
_PARQUET_LAYOUTS = {"flat", "lists"}


@dataclass(frozen=True, eq=False)
class LoadedTable:
    """Categorical columns of a file as per-feature CSR arrays; built by :func:`load_table`.

    Attributes
    ----------
    path : str
        The file (or directory of Parquet shards) read.
    features : dict of str to (ids, row_splits)
        Every sample of the file, one entry per loaded column.
    vocabularies : dict of str to numpy.ndarray or None
        For a categorical (text) column, ``vocabularies[c][i]`` is the string of id
        ``i`` (sorted distinct values, so ids do not depend on row order); None for
        a column whose values are already integer ids.
    num_samples : int
    batch_size : int or None
    drop_remainder : bool
    """

    path: str
    features: dict[str, tuple[np.ndarray, np.ndarray]]
    vocabularies: dict[str, np.ndarray | None]
    num_samples: int
    batch_size: int | None = None
    drop_remainder: bool = False

    def __len__(self) -> int:
        """Number of batches :meth:`batches` yields."""
        if self.batch_size is None:
            return 1
        full, rest = divmod(self.num_samples, self.batch_size)
        return full + (1 if rest and not self.drop_remainder else 0)

    def batch(self, index: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Batch ``index``: samples ``[index * batch_size, (index + 1) * batch_size)``.

        The last batch is shorter when ``num_samples`` is not a multiple of
        ``batch_size`` (or absent with ``drop_remainder=True``).
        """
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} out of range: {len(self)} batch(es)")
        if self.batch_size is None:
            return dict(self.features)
        start = index * self.batch_size
        stop = min(start + self.batch_size, self.num_samples)
        out = {}
        for name, (ids, row_splits) in self.features.items():
            splits = row_splits[start:stop + 1]
            out[name] = (ids[splits[0]:splits[-1]], splits - splits[0])
        return out

    def batches(self) -> Iterator[dict[str, tuple[np.ndarray, np.ndarray]]]:
        """All batches in order (the whole table once when ``batch_size`` is None)."""
        for index in range(len(self)):
            yield self.batch(index)

    def decode(self, column: str, ids) -> np.ndarray:
        """Map ids of a categorical column back to its strings.

        Examples
        --------
        >>> import os, tempfile
        >>> from scwork.datasets import load_table
        >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
        >>> _ = open(path, "w").write("city\\nParis\\nOslo|Paris\\n")
        >>> t = load_table(path)
        >>> t.features["city"][0].tolist(), t.decode("city", [1, 0]).tolist()
        ([1, 0, 1], ['Paris', 'Oslo'])
        """
        if column not in self.vocabularies:
            raise InputError(f"{self.path}: no loaded column {column!r}; loaded: {list(self.vocabularies)}")
        vocabulary = self.vocabularies[column]
        if vocabulary is None:
            raise InputError(f"{self.path}: column {column!r} holds integer ids, it has no vocabulary")
        return vocabulary[np.asarray(ids, dtype=np.int64)]


def load_table(
    path: str | os.PathLike,
    *,
    columns: Sequence[str] | None = None,
    sep: str | None = None,
    multi_value_sep: str | None = "|",
    batch_size: int | None = None,
    drop_remainder: bool = False,
) -> LoadedTable:
    """Read categorical features from CSV, TSV or Parquet (one row per sample).

    Parameters
    ----------
    path : path-like
        A ``.csv`` or ``.tsv`` file (optionally ``.gz``/``.bz2``/``.zst``
        compressed), a ``.parquet`` file, or a directory whose ``*.parquet`` files
        (in name order) form one table, e.g. from :func:`write_synthetic_parquet`.
    columns : sequence of str, optional
        Columns to load (default: all), each becoming a feature.
    sep : str, optional
        Field separator of a text file; default from the extension (``.csv``:
        ``","``, ``.tsv``: ``"\\t"``). Giving it reads any other file as text.
    multi_value_sep : str or None, default ``"|"``
        Separator inside a text cell holding several values (``"a|b|c"``); None
        keeps cells whole. Parquet list columns are multi-valued natively (their
        elements are not split).
    batch_size : int, optional
        Cut the samples into batches (:meth:`LoadedTable.batches`).
    drop_remainder : bool, default False
        False keeps a short last batch; True drops it.

    Returns
    -------
    LoadedTable

    Notes
    -----
    Per column: a null or empty cell (or empty list) is a sample with zero ids;
    tokens of a text cell are stripped of surrounding whitespace, empty tokens
    and null list elements are skipped. In a one-column text file an empty line
    is a sample without ids (with several columns, blank lines are skipped). A column whose values are integers
    (integer or integral float type, or text whose every token is a decimal
    integer such as ``7``, ``+7`` or ``7.0``) is taken as ids (negative ids are an error); any other text column
    is categorical: its distinct strings, sorted, form the vocabulary and the id
    of a string is its index there. Booleans become ids 0 and 1; other types
    (dates, ...) are read as their text.

    Raises
    ------
    InputError
        Unreadable or malformed file, unknown extension (without ``sep``),
        missing column, negative or non-integral numeric ids; the message names
        the file and the column.

    Examples
    --------
    >>> import os, tempfile
    >>> from scwork.datasets import load_table
    >>> path = os.path.join(tempfile.mkdtemp(), "clicks.tsv")
    >>> _ = open(path, "w").write("user\\tgenres\\n7\\tjazz|rock\\n3\\t\\n7\\trock\\n")
    >>> t = load_table(path, batch_size=2)
    >>> t.features["user"][0].tolist(), t.features["genres"][1].tolist()
    ([7, 3, 7], [0, 2, 2, 3])
    >>> t.vocabularies["genres"].tolist(), t.vocabularies["user"] is None
    (['jazz', 'rock'], True)
    >>> [b["genres"][1].tolist() for b in t.batches()]     # 3 samples: a short last batch
    [[0, 2, 2], [0, 1]]
    """
    import pyarrow as pa

    if isinstance(path, bytes):
        # A file name that is not UTF-8 comes as bytes from os.listdir(b"."); fsdecode keeps it
        # (surrogate escapes) so the file opens under the same name.
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"path must be a file or folder path (str, bytes or os.PathLike), got {_shown(path)}")
    shown = os.fsdecode(os.fspath(path))
    if batch_size is not None:
        batch_size = _positive_int(batch_size, "batch_size")
    if not isinstance(drop_remainder, (bool, np.bool_)):
        raise ConfigError(f"drop_remainder must be True or False, got {_shown(drop_remainder)}")
    if multi_value_sep is not None and (not isinstance(multi_value_sep, str) or not multi_value_sep):
        raise ConfigError(f"multi_value_sep must be a non-empty string or None, got {_shown(multi_value_sep)}")
    if sep is not None and (not isinstance(sep, str) or not sep):
        raise ConfigError(f"sep must be a non-empty string or None, got {_shown(sep)}")
    if columns is not None:
        if isinstance(columns, str):
            columns = [columns]
        if not isinstance(columns, Iterable) or isinstance(columns, (bytes, Mapping)):
            raise ConfigError(f"columns must be a column name or a list of them, got {_shown(columns)}")
        columns = list(columns)
        bad = [c for c in columns if not isinstance(c, str)]
        if bad:
            raise ConfigError(f"columns must be column names (str), got {_shown(bad[0])} in {_shown(columns)}")
        if len(set(columns)) != len(columns):
            raise ConfigError(f"columns must be distinct, got {_shown(columns)}")
        if not columns:
            raise ConfigError("columns is empty: give at least one column name (or None for every column)")

    table = _read_arrow_table(Path(path), shown, columns, sep)
    names = columns if columns is not None else list(table.column_names)
    features, vocabularies = {}, {}
    for name in names:
        column = table.column(name)
        try:
            ids, row_splits, vocabulary = _column_to_ragged(column, multi_value_sep)
        except _ColumnError as exc:
            raise InputError(f"{shown}, column {name!r}: {exc}") from None
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
            raise InputError(f"{shown}, column {name!r}: cannot convert to ids ({type(exc).__name__}: "
                             f"{str(exc)[:300]}); expected integer ids, lists of them, or text") from None
        features[name] = (ids, row_splits)
        vocabularies[name] = vocabulary
    return LoadedTable(shown, features, vocabularies, table.num_rows, batch_size, bool(drop_remainder))


def _file_format(path: Path, sep: str | None) -> tuple[str, str | None]:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSED:
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if sep is not None:
        return "text", sep
    if last in _PARQUET:
        return "parquet", None
    if last in _DELIMITED:
        return "text", _DELIMITED[last]
    raise InputError(
        f"{path}: cannot tell the format from the extension {last or '(none)'!r}; "
        f"use .csv, .tsv or .parquet, or pass sep=',' to read it as delimited text"
    )


def _read_arrow_table(path: Path, shown: str, columns: list[str] | None, sep: str | None):
    """Read the file with pyarrow; every failure becomes an InputError naming the file."""
    import pyarrow as pa

    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError as error:          # a name too long for the file system, ...
        raise InputError(f"{shown[:200]}: cannot look at the path ({error.strerror or error})") from None
    if not exists:
        raise InputError(f"{shown[:200]}: no such file or directory")
    if is_dir:
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in _PARQUET)
        if not files:
            raise InputError(f"{shown}: directory holds no .parquet files")
        tables = [_read_arrow_table(f, str(f), columns, None) for f in files]
        try:
            return pa.concat_tables(tables)
        except pa.ArrowException as exc:
            raise InputError(f"{shown}: the Parquet files have different schemas ({exc})") from None
    kind, delimiter = _file_format(path, sep)
    try:
        if kind == "parquet":
            return _read_parquet(path, shown, columns)
        return _read_delimited(path, shown, columns, delimiter)
    except InputError:
        raise
    except (pa.ArrowException, OSError, UnicodeDecodeError, ValueError, EOFError, zlib.error) as exc:
        # truncated, bit-flipped or badly compressed files, wrong encodings
        raise InputError(f"{shown}: cannot read the file as {'Parquet' if kind == 'parquet' else 'delimited text'} "
                         f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]}); expected a valid "
                         + ("Parquet file" if kind == "parquet" else "UTF-8 CSV/TSV file with a header line")) from None


_ARROW_CODECS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}


def _source(path: Path):
    """What pyarrow reads: the path itself, or (for a name that is not valid UTF-8,
    which pyarrow cannot encode) a fresh stream over the file opened by Python."""
    try:
        os.fspath(path).encode("utf-8")
        return str(path)
    except UnicodeEncodeError:
        import pyarrow as pa

        codec = _ARROW_CODECS.get(path.suffix.lower())
        return pa.input_stream(pa.PythonFile(open(path, "rb"), mode="r"), compression=codec)


def _read_parquet(path: Path, shown: str, columns: list[str] | None):
    import pyarrow.parquet as pq

    with pq.ParquetFile(_source(path)) as pf:
        # a flat CSR shard (scwork.datasets._flat) comes back as one list column per feature
        names = _flat_feature_names(pf, shown)
        if names is not None:
            _check_columns(shown, columns, names)
            return flat_list_table(pf, shown, columns)
        schema = pf.schema_arrow
        _check_columns(shown, columns, schema.names)
        if pf.metadata.num_row_groups == 0:
            empty = schema.empty_table()
            return empty if columns is None else empty.select(columns)
        # each row group on its own, checked against the footer: read in one call, a damaged page header can
        # shift a list column's values between rows without an error (scwork.datasets._row_groups)
        return read_checked_row_groups(pf, range(pf.metadata.num_row_groups), columns, shown)


def _flat_feature_names(pf, shown: str) -> list[str] | None:
    """The features a flat CSR shard holds, in order, or None for any other Parquet file."""
    meta = pf.metadata
    layout = flat_layout(meta.metadata, pf.schema_arrow,
                         [meta.row_group(i).num_rows for i in range(meta.num_row_groups)], shown)
    return None if layout is None else list(layout.features)


def _read_delimited(path: Path, shown: str, columns: list[str] | None, delimiter: str):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if len(delimiter) != 1:
        raise InputError(f"{shown}: sep must be one character, got {delimiter!r}")
    header = pacsv.open_csv(_source(path), parse_options=pacsv.ParseOptions(delimiter=delimiter)).schema.names
    # In a one-column file an empty line is a sample without ids; with several
    # columns it can only be a stray blank line.
    parse = pacsv.ParseOptions(delimiter=delimiter, ignore_empty_lines=len(header) > 1)
    _check_columns(shown, columns, header)
    wanted = columns if columns is not None else header
    # Read every column as text: the integer/categorical decision is made per column
    # on the tokens after splitting multi-valued cells, the same for CSV and Parquet.
    # Only empty cells are missing ("NA" or "null" can be real categories).
    convert = pacsv.ConvertOptions(
        include_columns=wanted,
        column_types={name: pa.string() for name in wanted},
        null_values=[""],
        strings_can_be_null=True,
    )
    return pacsv.read_csv(_source(path), parse_options=parse, convert_options=convert)


def _check_columns(shown: str, columns: list[str] | None, available: list[str]) -> None:
    duplicated = sorted({name for name in available if available.count(name) > 1})
    if duplicated:
        raise InputError(f"{shown}: the header names the columns {duplicated} more than once; column names "
                         "must be distinct")
    if columns is None:
        return
    for name in columns:
        if name not in available:
            raise InputError(f"{shown}: no column {name!r}; the file has columns {list(available)}")


class _ColumnError(Exception):
    """A problem with one column's values; load_table adds the file and column."""


def _column_to_ragged(column, multi_value_sep: str | None):
    """One Arrow column -> (ids int64, row_splits int64, vocabulary or None)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    num_rows = len(values)
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    kind = values.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        parents = pc.list_parent_indices(values)
        flat = pc.list_flatten(values)
        if pa.types.is_dictionary(flat.type):
            flat = flat.dictionary_decode()
        split_text = False
    else:
        parents = pa.array(np.arange(num_rows, dtype=np.int64))
        flat = values
        split_text = multi_value_sep is not None
    if pa.types.is_string(flat.type) or pa.types.is_large_string(flat.type):
        pass
    elif not (pa.types.is_integer(flat.type) or pa.types.is_floating(flat.type)
              or pa.types.is_boolean(flat.type) or pa.types.is_null(flat.type)):
        flat = pc.cast(flat, pa.string())  # dates, decimals, ...: categorical by their text
    if split_text and (pa.types.is_string(flat.type) or pa.types.is_large_string(flat.type)):
        pieces = pc.split_pattern(flat, multi_value_sep)
        parents = pc.take(parents, pc.list_parent_indices(pieces))
        flat = pc.list_flatten(pieces)

    vocabulary = None
    parents = np.asarray(parents.to_numpy(zero_copy_only=False), dtype=np.int64)
    if pa.types.is_string(flat.type) or pa.types.is_large_string(flat.type):
        flat = pc.utf8_trim_whitespace(flat)
        keep = pc.fill_null(pc.greater(pc.utf8_length(flat), 0), False)
        flat = pc.filter(flat, keep)
        parents = parents[keep.to_numpy(zero_copy_only=False)]
        if len(flat) and pc.all(pc.match_substring_regex(flat, _INTEGER_TOKEN)).as_py():
            # "+5" -> "5", "3.0" -> "3" (pandas writes integer columns with gaps as floats).
            canonical = pc.replace_substring_regex(flat, r"^\+|\.0*$", "")
            try:
                ids = pc.cast(canonical, pa.int64()).to_numpy()
            except pa.ArrowInvalid:
                # say which value and sample (without int() on a 5,000-digit token)
                tokens = canonical.to_pylist()
                bad = next((i for i, t in enumerate(tokens) if decimal_int(t) is None), None)
                if bad is None:
                    raise _ColumnError("an integer id does not fit in int64") from None
                shown = tokens[bad] if len(tokens[bad]) <= 40 else f"{tokens[bad][:20]}... ({len(tokens[bad])} digits)"
                raise _ColumnError(f"id {shown} in sample {int(parents[bad])} (0-based, header excluded) does not "
                                   "fit in int64 (|id| < 2**63)") from None
            _check_non_negative(ids, parents)
        else:
            distinct = pc.unique(flat)
            vocabulary_arrow = pc.take(distinct, pc.sort_indices(distinct))
            ids = pc.index_in(flat, value_set=vocabulary_arrow).to_numpy().astype(np.int64)
            vocabulary = vocabulary_arrow.to_numpy(zero_copy_only=False)
    else:
        valid = flat.is_valid().to_numpy(zero_copy_only=False)
        if pa.types.is_null(flat.type):
            numbers_ = np.zeros(len(flat), dtype=np.int64)
        elif pa.types.is_boolean(flat.type):
            numbers_ = pc.fill_null(flat, False).to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            numbers_ = pc.fill_null(flat, 0).to_numpy(zero_copy_only=False)
        if numbers_.dtype.kind == "f":
            valid &= ~np.isnan(numbers_)  # NaN is pandas' missing value
            finite = numbers_[valid]
            bad = ~np.isfinite(finite) | (finite != np.round(finite))
            if bad.any():
                row = int(parents[valid][np.argmax(bad)])
                raise _ColumnError(f"value {finite[np.argmax(bad)]!r} in sample {row} is not an integer id")
            # range before the cast: float 1e300 would become -2**63 and read as "negative"
            huge = np.abs(finite) >= 2.0**63
            if huge.any():
                row = int(parents[valid][np.argmax(huge)])
                raise _ColumnError(f"value {finite[np.argmax(huge)]!r} in sample {row} is outside the int64 "
                                   "range of ids (|id| < 2**63)")
        elif numbers_.dtype == np.uint64 and numbers_.size and numbers_.max() > np.iinfo(np.int64).max:
            raise _ColumnError("an id does not fit in int64")
        ids = numbers_[valid].astype(np.int64)
        parents = parents[valid]
        _check_non_negative(ids, parents)
    row_splits = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(parents, minlength=num_rows), out=row_splits[1:])
    return np.ascontiguousarray(ids, dtype=np.int64), row_splits, vocabulary


def _check_non_negative(ids: np.ndarray, parents: np.ndarray) -> None:
    negative = ids < 0
    if negative.any():
        first = int(np.argmax(negative))
        raise _ColumnError(
            f"id {int(ids[first])} in sample {int(parents[first])} (0-based, header excluded) is "
            f"negative ({int(negative.sum())} negative id(s)); ids must be >= 0 - remap them, or "
            "store the column as text to have it mapped through a vocabulary"
        )


#: Most rows (samples) one :func:`write_synthetic_parquet` call builds: 2**24.
MAX_SYNTHETIC_ROWS = 2**24


def write_synthetic_parquet(
    directory: str | os.PathLike,
    num_shards: int,
    *,
    rows_per_shard: int = 16384,
    features: int | Sequence[str] = 1,
    vocab_size: int | Mapping[str, int] = 1_000_000,
    valency: Any = 20,
    zipf_exponent: float | Mapping[str, float] = 1.05,
    hashed: bool = True,
    seed: int = 0,
    compression: str = "zstd",
    encoding: str = "delta",
    id_type: str = "auto",
    layout: str = "flat",
) -> list[Path]:
    """Write a synthetic dataset as Parquet shards, one row per sample.

    Shard ``i`` is step ``i`` of ``synthetic(rows_per_shard, ...)`` with the same
    arguments, written in Parquet data pages of version 2. Read it back with
    ``load_table(directory)`` (all shards, in order) or one shard at a time, or with
    :func:`~scwork.sharding.stats_over_dataset`.

    ``layout="flat"`` (the default) stores no list columns: one not-null integer
    column ``csr`` holding, for each feature in turn and in row groups of its own,
    its ``rows_per_shard + 1`` row splits and then its ids, and a key-value note
    (``scwork.flat_csr``) naming the features and their number of ids (the layout
    of :func:`scwork.sharding.dataset_stats.write_parquet_shard`). Any Parquet reader
    reads it as one integer column; scwork's readers rebuild the features. It is the
    Parquet layout :func:`~scwork.sharding.stats_over_dataset` reads fastest, because
    a list column makes the reader rebuild the list offsets from one repetition and
    one definition level per id. Measured with pyarrow 26 on one 16384-sample shard
    of 26 features x Poisson(20) ids (8.5 M ids, Zipf 1.05 hashed over 10**6, zstd,
    delta encoding), CPU time of one decode on one core: 23-24 ms in this layout
    (22.1 MiB) against 51-53 ms for the fastest list layout below (23.2 MiB).

    ``layout="lists"``: every feature is a list column of integer ids, neither the
    lists nor the ids nullable (``list<item: int32 not null> not null``, or
    ``int64`` ids where the vocabulary needs them): the list layout pyarrow decodes
    fastest (same shard: 69-72 ms as ``list<int64>`` with nullable lists and ids in
    version 1 pages, 58-60 ms with neither nullable, 55-56 ms also in version 2
    pages, 51-52 ms also with int32 ids). Use it for tools that expect one list
    column per feature.

    Parameters
    ----------
    directory : path-like
        Created if missing; files are ``part-00000.parquet``, ``part-00001.parquet``, ...
    num_shards : int
        Number of files (>= 1).
    rows_per_shard : int, default 16384
        Samples per file.
    features, vocab_size, valency, zipf_exponent, hashed, seed
        As in :func:`synthetic`.
    compression : str, default ``"zstd"``
        Parquet compression codec (``"none"``, ``"snappy"``, ``"zstd"``, ...).
    encoding : {"delta", "dictionary", "plain"}, default ``"delta"``
        How the ids are encoded inside the pages, before compression:
        ``"delta"`` is Parquet's ``DELTA_BINARY_PACKED`` (bit-packed differences,
        no dictionary), ``"dictionary"`` pyarrow's default (a dictionary of the
        distinct ids per column chunk, indices bit-packed; what shards written
        before this option have), ``"plain"`` 8 bytes per id. Every reader of
        Parquet 2 files (pyarrow, Spark, DuckDB, polars) reads all three. Measured
        on one 16384-sample shard of 26 features x Poisson(20) ids (8.5 M ids,
        Zipf 1.05 hashed over 10**6) with zstd, as nullable ``list<int64>`` in
        version 1 pages: ``"delta"`` 22.0 MiB, decoded in about 68 ms of CPU by
        pyarrow and written in 180 ms; ``"dictionary"`` 22.1 MiB, 103-110 ms and
        460 ms (the layout above brings ``"delta"`` to 51-52 ms, 23.2 MiB). Reading is what
        :func:`~scwork.sharding.stats_over_dataset` spends most of its time on, so
        the default is ``"delta"``. Dictionaries pay off when a column chunk holds
        few distinct ids (a small vocabulary or a very skewed one): the file is
        then smaller, and decoding it costs about as much.
    id_type : {"auto", "int32", "int64"}, default ``"auto"``
        Integer type of the stored ids. ``"auto"``: int32 for a feature whose
        vocabulary fits (``vocab_size <= 2**31``), else int64. Readers keep the
        stored width until the ids are copied into the batch the engine reads, so
        int32 ids cost half the bytes to decode and to copy.
    layout : {"flat", "lists"}, default ``"flat"``
        ``"flat"``: the flat CSR layout above (one integer column, no list levels);
        ``"lists"``: one list column per feature.

    Returns
    -------
    list of pathlib.Path
        The files written, in shard order.

    Examples
    --------
    >>> import tempfile
    >>> from scwork.datasets import write_synthetic_parquet, load_table
    >>> folder = tempfile.mkdtemp()
    >>> files = write_synthetic_parquet(folder, 2, rows_per_shard=5, features=["a"], valency=2)
    >>> [f.name for f in files], load_table(folder).num_samples
    (['part-00000.parquet', 'part-00001.parquet'], 10)
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    num_shards = _positive_int(num_shards, "num_shards")
    rows_per_shard = _positive_int(rows_per_shard, "rows_per_shard")
    # Every shard is built in memory before the first is written (all or nothing): bound the rows.
    if num_shards * rows_per_shard > MAX_SYNTHETIC_ROWS:
        raise ConfigError(f"{num_shards:,} shards x {rows_per_shard:,} rows is more than "
                          f"scwork.datasets.files.MAX_SYNTHETIC_ROWS={MAX_SYNTHETIC_ROWS:,} rows, which are built in "
                          "memory before writing; write the data set in several folders")
    data = synthetic(rows_per_shard, num_steps=num_shards, features=features, vocab_size=vocab_size,
                     valency=valency, zipf_exponent=zipf_exponent, hashed=hashed, seed=seed)
    if compression is not None and (not isinstance(compression, str)
                                    or compression.lower() not in _PARQUET_CODECS):
        raise ConfigError(f"compression must be None or one of {sorted(_PARQUET_CODECS)}, got {compression!r}")
    if encoding not in _PARQUET_ENCODINGS:
        raise ConfigError(f"encoding must be one of {sorted(_PARQUET_ENCODINGS)}, got {encoding!r}")
    if not isinstance(id_type, str) or id_type not in _PARQUET_ID_TYPES:
        raise ConfigError(f"id_type must be one of {sorted(_PARQUET_ID_TYPES)}, got {id_type!r}")
    if not isinstance(layout, str) or layout not in _PARQUET_LAYOUTS:
        raise ConfigError(f"layout must be one of {sorted(_PARQUET_LAYOUTS)}, got {layout!r}")
    folder = Path(directory)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: exists and is not a directory; give a directory for the shards")
    # Neither the lists nor the ids may be null: the definition levels then take one bit
    # (an empty list or not) instead of three levels, which pyarrow decodes faster.
    too_large = {name: vocab for name, vocab in data.vocab_sizes.items() if vocab > 2**31}
    if id_type == "int32" and too_large:
        raise ConfigError(f"id_type='int32' cannot hold the ids of {too_large} (vocabularies above 2**31 ids); "
                          "use id_type='auto' or 'int64'")
    id_types = {name: pa.int32() if id_type == "int32" or (id_type == "auto" and vocab <= 2**31) else pa.int64()
                for name, vocab in data.vocab_sizes.items()}
    # Every shard's data is made before the first byte is written (an error there leaves
    # nothing behind); _write_shards then writes all shards or none.
    if layout == "flat":
        batches = [data.step(index) for index in range(num_shards)]
        return _write_shards(folder, num_shards, lambda index, path: write_flat_shard(
            path, {name: (v[0], v[1]) for name, v in batches[index].items()}, id_types,
            compression=compression, data_page_version="2.0", **_PARQUET_ENCODINGS[encoding]))
    tables = []
    for index in range(num_shards):
        batch = data.step(index)
        arrays, fields = [], []
        for name, (ids, row_splits) in batch.items():
            item = pa.field("item", id_types[name], nullable=False)
            values = pa.array(ids.astype(id_types[name].to_pandas_dtype(), copy=False), type=id_types[name])
            if row_splits[-1] < 2**31:
                arrays.append(pa.ListArray.from_arrays(pa.array(row_splits.astype(np.int32)), values,
                                                       type=pa.list_(item)))
            else:  # more than 2**31 ids in one shard needs 64-bit offsets
                arrays.append(pa.LargeListArray.from_arrays(pa.array(row_splits), values, type=pa.large_list(item)))
            fields.append(pa.field(name, arrays[-1].type, nullable=False))
        tables.append(pa.Table.from_arrays(arrays, schema=pa.schema(fields)))
    return _write_shards(folder, num_shards, lambda index, path: pq.write_table(
        tables[index], path, compression=compression, data_page_version="2.0", **_PARQUET_ENCODINGS[encoding]))


def _write_shards(folder: Path, num_shards: int, write) -> list[Path]:
    """``write(index, path)`` for every shard, each to a temporary name, renamed at the end.

    Either all shards appear or none (a failure removes the temporaries), never half a
    data set; a failure is a ``ConfigError`` that says nothing was written.
    """
    import pyarrow as pa

    targets = [folder / f"part-{index:05d}.parquet" for index in range(num_shards)]
    temporaries = [folder / f".part-{index:05d}.parquet.{os.getpid()}.tmp" for index in range(num_shards)]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for index, temporary in enumerate(temporaries):
            write(index, temporary)
        for temporary, target in zip(temporaries, targets):
            os.replace(temporary, target)
    except (OSError, pa.ArrowException) as exc:
        for temporary in temporaries:
            with contextlib.suppress(OSError):
                temporary.unlink()
        raise ConfigError(f"{folder}: cannot write the Parquet shards ({type(exc).__name__}: {exc}); nothing "
                          "was written") from None
    return targets
