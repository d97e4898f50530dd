"""Dataset shards: finding them, reading their metadata and rows, writing NPZ shards.

Shards may be files, folders, globs or dask collections.

A shard is a Parquet file (one list column of ids per feature, or the flat CSR layout of
:mod:`scwork.datasets._flat`: row splits and ids in one integer column) or an NPZ file (``<feature>.ids`` and
``<feature>.row_splits`` members, read without loading whole members). Rows come back as
``{feature: (ids int64, row_splits int64 from 0)}``; every problem of a shard is a
:class:`~scwork.errors.ShardError` naming the file, the column and the row.
"""

from __future__ import annotations

import bisect
import contextlib
import glob
import os
import tokenize
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scwork.datasets._flat import flat_layout, read_flat_feature
from scwork.datasets._row_groups import read_checked_row_groups
from scwork.errors import ConfigError, InputError, ShardError

__all__ = ["DEFAULT_CHUNK_IDS", "PARQUET_SUFFIXES", "NPZ_SUFFIXES", "write_npz_shard", "write_parquet_shard"]


#: Ids one chunk holds by default (``chunk_rows=None``): 4 Mi ids, 32 MiB of int64.
DEFAULT_CHUNK_IDS = 1 << 22
#: File name endings read as Parquet shards.
PARQUET_SUFFIXES: tuple[str, ...] = (".parquet", ".pq")
#: File name endings read as NPZ shards.
NPZ_SUFFIXES: tuple[str, ...] = (".npz",)

_INT64_MAX = np.iinfo(np.int64).max


# ======================================================================================
# shards: discovery and metadata
# ======================================================================================
class _Piece:
    """One shard (file or partition) with its row count; picklable, no dask traversal."""

    __slots__ = ("kind", "path", "num_rows", "num_ids", "info", "index")

    def __init__(self, kind: str, path: str, num_rows: int, num_ids: int, info: Any = None, index: int = 0):
        self.kind = kind          # "parquet", "flat" (flat CSR Parquet), "npz", "frame", "bag"
        self.path = path          # file path or "partition <i>"
        self.num_rows = int(num_rows)
        self.num_ids = int(num_ids)  # estimate (exact for NPZ)
        self.info = info          # parquet: row group starts; flat: its FlatLayout; npz: {column: (ids, splits member)}
        self.index = index        # position of a partition among the extra task arguments


def _resolve_files(source: Any) -> list[Path]:
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        path = Path(text)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and _kind_of(p) is not None)
            if not files:
                raise InputError(f"{text}: the directory holds no Parquet ({', '.join(PARQUET_SUFFIXES)}) or "
                                 f"NPZ ({', '.join(NPZ_SUFFIXES)}) shards")
            return files
        if path.is_file():
            return [path]
        if any(c in text for c in "*?["):
            files = sorted(Path(p) for p in glob.glob(text) if Path(p).is_file())
            if not files:
                raise InputError(f"{text}: the pattern matches no file")
            return files
        raise InputError(f"{text}: no such file or directory")
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        files = []
        for item in source:
            if not isinstance(item, (str, os.PathLike)):
                raise InputError(f"source lists must hold file paths, got {type(item).__name__} {item!r}")
            p = Path(item)
            if not p.is_file():
                raise InputError(f"{os.fspath(item)}: no such file")
            files.append(p)
        if not files:
            raise InputError("source is an empty list: give at least one shard")
        return files
    raise InputError(f"source must be a directory, a glob pattern, a list of files, a dask DataFrame or a dask "
                     f"Bag, got {type(source).__name__}")


def _kind_of(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(NPZ_SUFFIXES):
        return "npz"
    return None


def _scan_parquet(path: Path, colmap: dict[str, str]) -> _Piece:
    import pyarrow as pa
    import pyarrow.parquet as pq

    shown = str(path)
    try:
        with pq.ParquetFile(path) as pf:
            md = pf.metadata
            schema = pf.schema_arrow
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ShardError(f"{shown}: cannot read the Parquet metadata ({exc}); the file is truncated, corrupt "
                         "or not Parquet", path=shown) from None
    try:
        group_rows = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
        note = md.metadata
    except (pa.ArrowException, OSError, ValueError, IndexError) as exc:
        raise ShardError(f"{shown}: cannot read the Parquet row-group metadata ({type(exc).__name__}: {exc}); "
                         "the file is corrupt", path=shown) from None
    layout = flat_layout(note, schema, group_rows, shown)
    if layout is not None:
        for feature, col in colmap.items():
            if col not in layout.features:
                raise ShardError(f"{shown}: no feature {col!r} (feature {feature!r}) in this flat CSR shard; it "
                                 f"holds {list(layout.features)[:20]}; name the stored feature with columns=",
                                 path=shown, column=col)
        num_ids = sum(layout.features[col][2] for col in set(colmap.values()))
        return _Piece("flat", shown, layout.num_rows, num_ids, layout)
    for feature, col in colmap.items():
        if col not in schema.names:
            raise ShardError(f"{shown}: no column {col!r} (feature {feature!r}); the file has columns "
                             f"{list(schema.names)}", path=shown, column=col)
        problem = _arrow_type_problem(schema.field(col).type)
        if problem:
            raise ShardError(f"{shown}, column {col!r}: {problem}", path=shown, column=col)
    starts = [0]
    num_ids = 0
    wanted = set(colmap.values())
    # The ids are estimated from the row groups' uncompressed sizes (4 bytes per id at
    # the least), not from the column-chunk metadata: pyarrow decodes that lazily and a
    # corrupt chunk (e.g. a level-histogram size mismatch) throws a C++ exception that
    # RowGroupMetaData.column() does not translate, which aborts the process. Reading
    # the rows later reports the same corruption as an OSError (a ShardError here).
    share = len(wanted) / max(1, len(schema.names))
    try:
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            starts.append(starts[-1] + rg.num_rows)
            num_ids += int(rg.total_byte_size * share) // 4
    except (pa.ArrowException, OSError, ValueError, IndexError) as exc:
        raise ShardError(f"{shown}: cannot read the Parquet row-group metadata ({type(exc).__name__}: {exc}); "
                         "the file is corrupt", path=shown) from None
    if starts[-1] != md.num_rows:
        raise ShardError(f"{shown}: the row groups hold {starts[-1]} rows but the footer says {md.num_rows}",
                         path=shown)
    return _Piece("parquet", shown, md.num_rows, num_ids, tuple(starts))


def _arrow_type_problem(typ) -> str | None:
    import pyarrow as pa

    if (pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ)):
        if pa.types.is_integer(typ.value_type):
            return None
        return f"has type {typ}; expected a list of integer ids (e.g. list<int64>)"
    if pa.types.is_integer(typ):
        return None
    return f"has type {typ}; expected a list of integer ids (e.g. list<int64>) or one integer id per row"


# What a truncated or bit-flipped NPZ can raise from zipfile, zlib and numpy's .npy
# header parser (which tokenizes a Python literal): unsupported zip versions or
# compression (NotImplementedError), encrypted members (RuntimeError), broken header
# literals (SyntaxError, tokenize.TokenError, TypeError, RecursionError, MemoryError
# for absurd shapes), bad text (UnicodeDecodeError).
_NPZ_ERRORS = (OSError, EOFError, ValueError, TypeError, SyntaxError, RuntimeError, NotImplementedError,
               zlib.error, zipfile.BadZipFile, tokenize.TokenError, MemoryError, OverflowError, KeyError)


class _NpzMember:
    __slots__ = ("name", "dtype", "count", "offset", "stored")

    def __init__(self, name, dtype, count, offset, stored):
        self.name = name
        self.dtype = dtype
        self.count = count
        self.offset = offset      # stored: absolute file offset of the data; else offset in the member stream
        self.stored = stored


def _read_npy_header(fh, shown: str, member: str):
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, _, dtype = fmt.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
    except _NPZ_ERRORS as exc:
        raise ShardError(f"{shown}: member {member!r} is not a readable .npy array ({exc})", path=shown) from None
    return shape, dtype


def _npz_member(zf: zipfile.ZipFile, path: Path, name: str, column: str) -> _NpzMember:
    try:
        return _npz_member_unchecked(zf, path, name, column)
    except _NPZ_ERRORS as exc:
        raise ShardError(f"{path}, column {column!r}: cannot read member {name!r} ({exc})", path=str(path),
                         column=column) from None


def _npz_member_unchecked(zf: zipfile.ZipFile, path: Path, name: str, column: str) -> _NpzMember:
    shown = str(path)
    info = zf.getinfo(name)
    stored = info.compress_type == zipfile.ZIP_STORED
    if stored:
        with open(path, "rb") as fh:
            fh.seek(info.header_offset)
            head = fh.read(30)
            if len(head) != 30 or head[:4] != b"PK\x03\x04":
                raise ShardError(f"{shown}: member {name!r} has a corrupt zip header", path=shown, column=column)
            start = info.header_offset + 30 + int.from_bytes(head[26:28], "little") \
                + int.from_bytes(head[28:30], "little")
            fh.seek(start)
            shape, dtype = _read_npy_header(fh, shown, name)
            offset = fh.tell()
            end = start + info.compress_size
    else:
        with zf.open(name) as fh:
            shape, dtype = _read_npy_header(fh, shown, name)
            offset = fh.tell()
            end = info.file_size
    if len(shape) != 1:
        raise ShardError(f"{shown}, column {column!r}: {name!r} must be 1-D, got shape {shape}",
                         path=shown, column=column)
    if dtype.kind not in "iu" or dtype.hasobject:
        raise ShardError(f"{shown}, column {column!r}: {name!r} has dtype {dtype}; expected integers",
                         path=shown, column=column)
    count = int(shape[0])
    if offset + count * dtype.itemsize > end:
        raise ShardError(f"{shown}, column {column!r}: {name!r} is truncated ({count} values announced, "
                         f"{max(0, end - offset) // dtype.itemsize} present)", path=shown, column=column)
    return _NpzMember(name, dtype, count, offset, stored)


def _npz_values(path: str, member: _NpzMember, start: int, stop: int, column: str) -> np.ndarray:
    """Values ``[start, stop)`` of an NPZ member, integers of its stored width (reads only those bytes when stored).

    Unsigned 64-bit values are checked to fit in int64 and returned as an int64 view.
    """
    n = stop - start
    size = member.dtype.itemsize
    try:
        if member.stored:
            with open(path, "rb") as fh:
                fh.seek(member.offset + start * size)
                buf = fh.read(n * size)
        else:
            with zipfile.ZipFile(path) as zf, zf.open(member.name) as fh:
                fh.seek(member.offset + start * size)
                buf = fh.read(n * size)
    except _NPZ_ERRORS as exc:
        raise ShardError(f"{path}, column {column!r}: cannot read {member.name!r} ({type(exc).__name__}: {exc})",
                         path=path, column=column) from None
    if len(buf) != n * size:
        raise ShardError(f"{path}, column {column!r}: {member.name!r} is truncated", path=path, column=column)
    values = np.frombuffer(buf, dtype=member.dtype)
    if member.dtype.kind == "u" and member.dtype.itemsize == 8:
        if values.size and values.max() > _INT64_MAX:
            raise ShardError(f"{path}, column {column!r}: {member.name!r} holds values above the int64 range",
                             path=path, column=column)
        values = values.view(np.int64)
    # Stored width kept (native byte order): the batch the engine reads widens the ids to
    # int64 in the copy it makes anyway.
    return values if values.dtype.isnative else values.astype(values.dtype.newbyteorder("="))


def _scan_npz(path: Path, colmap: dict[str, str]) -> _Piece:
    shown = str(path)
    try:
        zf = zipfile.ZipFile(path)
    except _NPZ_ERRORS as exc:
        raise ShardError(f"{shown}: not a readable NPZ archive ({exc}); the file is truncated, corrupt or not "
                         "an .npz", path=shown) from None
    members = {}
    rows = None
    num_ids = 0
    with zf:
        names = set(zf.namelist())
        for feature, col in colmap.items():
            pair = []
            for suffix in ("_ids", "_row_splits"):
                name = f"{col}{suffix}.npy"
                if name not in names:
                    have = sorted(n[:-4] for n in names if n.endswith(".npy"))
                    raise ShardError(f"{shown}: no member {col + suffix!r} for column {col!r} (feature "
                                     f"{feature!r}); the archive has {have}", path=shown, column=col)
                pair.append(_npz_member(zf, path, name, col))
            ids_m, rs_m = pair
            if rs_m.count < 1:
                raise ShardError(f"{shown}, column {col!r}: {col}_row_splits is empty; it needs num_rows + 1 "
                                 "entries", path=shown, column=col)
            if rows is None:
                rows, first = rs_m.count - 1, col
            elif rs_m.count - 1 != rows:
                raise ShardError(f"{shown}: column {col!r} has {rs_m.count - 1} rows but column {first!r} has "
                                 f"{rows}; every column of a shard needs the same rows", path=shown, column=col)
            members[col] = (ids_m, rs_m)
            num_ids += ids_m.count
    for col, (ids_m, rs_m) in members.items():
        lo = _npz_values(shown, rs_m, 0, 1, col)[0]
        hi = _npz_values(shown, rs_m, rs_m.count - 1, rs_m.count, col)[0]
        if lo != 0 or hi != ids_m.count:
            raise ShardError(f"{shown}, column {col!r}: {col}_row_splits must run from 0 to len({col}_ids) = "
                             f"{ids_m.count}, got {int(lo)} .. {int(hi)}", path=shown, column=col)
    return _Piece("npz", shown, rows, num_ids, members)


# ======================================================================================
# readers: rows [start, stop) of a piece -> {feature: (ids int64, row_splits int64 from 0)}
# ======================================================================================
def _arrow_to_csr(arr, shown: str, column: str, row0: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, row_splits)`` of one Arrow column; ids keep their stored integer width.

    The ids are a view of Arrow's decoded buffer where it can be (a list column
    without null lists or null ids, one chunk): the one copy they need is into the
    batch the engine reads (:func:`_step_batch` in the chunk tasks), which widens
    them to int64 as it copies; an int64 copy here would be a second pass over every
    id. Unsigned ids come back as int64 views once checked to fit.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    typ = arr.type
    problem = _arrow_type_problem(typ)
    if problem:
        raise ShardError(f"{shown}, column {column!r}: {problem}", path=shown, column=column)
    n = len(arr)
    rs = None
    if pa.types.is_integer(typ):
        lengths = np.ones(n, np.int64) if arr.null_count == 0 else \
            np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.int64)
        values = arr.drop_null() if arr.null_count else arr
    elif arr.null_count == 0 and not pa.types.is_fixed_size_list(typ) and arr.values.null_count == 0:
        # Fast path: the offsets are the row splits (shifted to start at 0) and the
        # ids are the child values between the first and last offset, both read in
        # place. Only without null lists: a null list may own a non-empty segment of
        # the child, which list_flatten skips and the offsets would not.
        offsets = np.asarray(arr.offsets)
        start, stop = int(offsets[0]), int(offsets[-1])
        values = arr.values.slice(start, stop - start)
        rs = np.subtract(offsets, start, dtype=np.int64)
    else:
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        values = pc.list_flatten(arr)
        if values.null_count:
            inside = np.asarray(values.is_null().to_numpy(zero_copy_only=False))
            rs = np.zeros(n + 1, np.int64)
            np.cumsum(lengths, out=rs[1:])
            row = int(np.searchsorted(rs, int(np.argmax(inside)), side="right") - 1)
            raise ShardError(f"{shown}, column {column!r}: row {row0 + row} holds a null id inside its list; "
                             "ids must not be null", path=shown, column=column)
    ids = values.to_numpy(zero_copy_only=False)
    if ids.dtype.kind == "u" and ids.dtype.itemsize == 8:
        if ids.size and ids.max() > _INT64_MAX:
            raise ShardError(f"{shown}, column {column!r}: ids above the int64 range", path=shown, column=column)
        ids = ids.view(np.int64)      # every value fits: the same bits
    if rs is None:
        rs = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=rs[1:])
    _check_ids(ids, rs, shown, column, row0)
    return ids, rs


def _check_ids(ids: np.ndarray, rs: np.ndarray, shown: str, column: str, row0: int) -> None:
    if ids.size and ids.dtype.kind == "i" and ids.min() < 0:
        pos = int(np.argmax(ids < 0))
        row = int(np.searchsorted(rs, pos, side="right") - 1)
        raise ShardError(f"{shown}, column {column!r}: negative id {int(ids[pos])} in row {row0 + row}; ids "
                         "must be >= 0", path=shown, column=column)


def _read_parquet_rows(piece: _Piece, start: int, stop: int, colmap: dict[str, str], use_threads: bool = False):
    import pyarrow as pa
    import pyarrow.parquet as pq

    starts = piece.info
    first = bisect.bisect_right(starts, start) - 1
    last = bisect.bisect_left(starts, stop)
    cols = list(dict.fromkeys(colmap.values()))
    # Row groups are read one at a time and checked against the footer: read in one call, a damaged page
    # header can shift one row group's lists into the next under the right row count (scwork.datasets._row_groups).
    try:
        with pq.ParquetFile(piece.path) as pf:
            table = read_checked_row_groups(pf, range(first, last), cols, piece.path, use_threads)
    except ShardError:                     # the row group and column named already
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ShardError(f"{piece.path}: cannot read rows {start}..{stop - 1} ({' '.join(str(exc).split())}); "
                         "the file is corrupt or "
                         "changed since it was scanned", path=piece.path) from None
    if table.num_rows != starts[last] - starts[first]:
        raise ShardError(f"{piece.path}: row groups {first}..{last - 1} hold {table.num_rows} rows, expected "
                         f"{starts[last] - starts[first]}", path=piece.path)
    table = table.slice(start - starts[first], stop - start)
    out = {}
    for feature, col in colmap.items():
        try:
            out[feature] = _arrow_to_csr(table.column(col), piece.path, col, start)
        except (pa.ArrowException, ValueError) as exc:
            if isinstance(exc, ShardError):
                raise
            raise ShardError(f"{piece.path}, column {col!r}: cannot convert to ids ({exc})", path=piece.path,
                             column=col) from None
    return out


def _read_flat_rows(piece: _Piece, start: int, stop: int, colmap: dict[str, str], threads: int = 1):
    """Rows ``[start, stop)`` of a flat CSR Parquet shard (:mod:`scwork.datasets._flat`): no list levels to decode.

    Each stored feature is read whole (its row groups hold its row splits, then its
    ids) and then sliced: the chunk planner cuts a flat shard only at its ends. With
    ``threads > 1`` the features are read on that many threads, each with its own
    open file (pyarrow decodes without the GIL): a chunk that has several cores to
    itself decodes its columns at once, as pyarrow's pool does for list columns.
    """
    import pyarrow as pa

    columns = list(dict.fromkeys(colmap.values()))
    groups = [columns[i::threads] for i in range(min(threads, len(columns)))] if threads > 1 else [columns]
    try:
        if len(groups) > 1:
            import concurrent.futures

            with concurrent.futures.ThreadPoolExecutor(len(groups)) as pool:
                read = {}
                for part in pool.map(lambda group: _read_flat_features(piece, group), groups):
                    read.update(part)
        else:
            read = _read_flat_features(piece, columns)
    except (pa.ArrowException, OSError, ValueError) as exc:
        if isinstance(exc, ShardError):
            raise
        raise ShardError(f"{piece.path}: cannot read the flat CSR shard ({' '.join(str(exc).split())[:300]}); the "
                         "file is corrupt or changed since it was scanned", path=piece.path) from None
    out = {}
    for feature, col in colmap.items():
        ids, rs = read[col]
        split = rs[start:stop + 1]
        part = ids[split[0]:split[-1]]
        split = split - split[0]
        _check_ids(part, split, piece.path, col, start)
        out[feature] = (part, split)
    return out


def _read_flat_features(piece: _Piece, columns: list[str]) -> dict:
    """``{column: (ids, row_splits)}`` of the stored features ``columns`` of a flat shard, read whole."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(piece.path) as pf:
        return {col: read_flat_feature(pf, piece.info, col, piece.path) for col in columns}


def _read_npz_rows(piece: _Piece, start: int, stop: int, colmap: dict[str, str]):
    out = {}
    for feature, col in colmap.items():
        ids_m, rs_m = piece.info[col]
        rs = _npz_values(piece.path, rs_m, start, stop + 1, col).astype(np.int64)
        steps = np.diff(rs)
        if rs[0] < 0 or rs[-1] > ids_m.count or (steps.size and steps.min() < 0):
            bad = int(np.argmax(steps < 0)) if steps.size and steps.min() < 0 else 0
            raise ShardError(f"{piece.path}, column {col!r}: {col}_row_splits is not non-decreasing within "
                             f"0..{ids_m.count} around row {start + bad}", path=piece.path, column=col)
        ids = _npz_values(piece.path, ids_m, int(rs[0]), int(rs[-1]), col)
        rs = rs - rs[0]
        _check_ids(ids, rs, piece.path, col, start)
        out[feature] = (ids, rs)
    return out


def _read_frame_rows(piece: _Piece, frame, start: int, stop: int, colmap: dict[str, str]):
    import pyarrow as pa

    part = frame.iloc[start:stop]
    out = {}
    for feature, col in colmap.items():
        if col not in part.columns:
            raise ShardError(f"{piece.path}: no column {col!r} (feature {feature!r}); it has "
                             f"{list(part.columns)}", path=piece.path, column=col)
        try:
            arr = pa.array(part[col], from_pandas=True)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ShardError(f"{piece.path}, column {col!r}: cannot read ids ({exc})", path=piece.path,
                             column=col) from None
        out[feature] = _arrow_to_csr(arr, piece.path, col, start)
    return out


def _read_bag_rows(piece: _Piece, records, start: int, stop: int, colmap: dict[str, str]):
    recs = records[start:stop]
    out = {}
    for feature, col in colmap.items():
        chunks, lengths = [], np.zeros(len(recs), np.int64)
        for i, rec in enumerate(recs):
            if not isinstance(rec, Mapping):
                raise ShardError(f"{piece.path}, record {start + i}: a record must be a mapping column -> ids, "
                                 f"got {type(rec).__name__}", path=piece.path)
            if col not in rec:
                raise ShardError(f"{piece.path}, record {start + i}: no column {col!r} (feature {feature!r}); "
                                 f"it has {sorted(rec)}", path=piece.path, column=col)
            value = rec[col]
            if value is None:
                continue
            arr = np.asarray(value)
            if arr.ndim == 0:
                arr = arr.reshape(1)
            if arr.ndim != 1 or (arr.size and (arr.dtype.kind not in "iu")):
                raise ShardError(f"{piece.path}, record {start + i}, column {col!r}: expected an int or a list "
                                 f"of ints, got {value!r}", path=piece.path, column=col)
            if arr.dtype.kind == "u" and arr.size and arr.max() > _INT64_MAX:
                raise ShardError(f"{piece.path}, record {start + i}, column {col!r}: id above the int64 range",
                                 path=piece.path, column=col)
            chunks.append(arr.astype(np.int64))
            lengths[i] = arr.size
        ids = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
        rs = np.zeros(len(recs) + 1, np.int64)
        np.cumsum(lengths, out=rs[1:])
        _check_ids(ids, rs, piece.path, col, start)
        out[feature] = (ids, rs)
    return out


def _read_rows(piece: _Piece, data, start: int, stop: int, colmap: dict[str, str], threads: int = 1):
    """Rows ``[start, stop)`` of a piece; ``threads > 1``: Parquet columns decoded on pyarrow's thread pool,
    flat CSR features on that many threads."""
    if piece.kind == "parquet":
        return _read_parquet_rows(piece, start, stop, colmap, threads > 1)
    if piece.kind == "flat":
        return _read_flat_rows(piece, start, stop, colmap, threads)
    if piece.kind == "npz":
        return _read_npz_rows(piece, start, stop, colmap)
    if piece.kind == "frame":
        return _read_frame_rows(piece, data, start, stop, colmap)
    return _read_bag_rows(piece, data, start, stop, colmap)


# ======================================================================================
# NPZ writer
# ======================================================================================
#: ``write_npz_shard(id_type=...)``: the stored integer types of the ids.
_NPZ_ID_TYPES: tuple[str, ...] = ("auto", "int32", "int64")
_INT32_MAX = np.iinfo(np.int32).max


def write_npz_shard(path: str | os.PathLike, data: Mapping[str, Any], *, compressed: bool = False,
                    id_type: str = "auto") -> None:
    """Write one NPZ shard: ``<name>_ids`` (int32 where they fit) and ``<name>_row_splits`` (int64) per feature.

    Parameters
    ----------
    path : path-like
        The ``.npz`` file to write (``.npz`` is not appended).
    data : mapping
        ``{name: (ids, row_splits)}`` (a third item, weights, is written as
        ``<name>_weights`` float32 and ignored by :func:`stats_over_dataset`), or a
        :class:`~scwork.sharding.FeatureBatch`. Validated like a FeatureBatch (same
        rows for every name, non-negative ids).
    compressed : bool, default False
        ``numpy.savez_compressed`` instead of ``numpy.savez``; uncompressed shards
        are read faster by seeking to the rows a chunk needs.
    id_type : {"auto", "int32", "int64"}, default ``"auto"``
        Integer type of each ``<name>_ids`` member. ``"auto"``: int32 where every id
        of that feature in this shard fits (``< 2**31``), else int64. Readers keep the
        stored width until the one copy into the engine's batch, so int32 ids halve
        the bytes on disk and read (on the engine benchmark's standard input, 8.5 M
        ids a shard: 34 MB of ids instead of 68 MB).

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "shard.npz")
    >>> write_npz_shard(path, {"f": ([5, 6, 7], [0, 2, 2, 3])})
    >>> sorted(np.load(path).files), np.load(path)["f_row_splits"].tolist()
    (['f_ids', 'f_row_splits'], [0, 2, 2, 3])
    >>> str(np.load(path)["f_ids"].dtype)
    'int32'
    """
    from scwork.sharding.batch import FeatureBatch

    if not isinstance(id_type, str) or id_type not in _NPZ_ID_TYPES:
        raise ConfigError(f"id_type must be one of {list(_NPZ_ID_TYPES)}, got {id_type!r}")
    batch = data if isinstance(data, FeatureBatch) else FeatureBatch(data)
    arrays = {}
    for name in batch:
        ids, rs = batch[name]
        narrow = ids.size == 0 or int(ids.max()) <= _INT32_MAX
        if id_type == "int32" and not narrow:
            raise InputError(f"feature {name!r}: id {int(ids.max())} does not fit in int32 (id_type='int32'); "
                             "use id_type='auto' or 'int64'")
        arrays[f"{name}_ids"] = np.asarray(ids, np.int32 if narrow and id_type != "int64" else np.int64)
        arrays[f"{name}_row_splits"] = np.asarray(rs, np.int64)
        if batch.has_weights(name):
            arrays[f"{name}_weights"] = batch.weights(name)
    # all arrays are validated above; write a temporary file and rename it so that a
    # failure never leaves half a shard under the real name
    target = os.fspath(path)
    temporary = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as fh:
            (np.savez_compressed if compressed else np.savez)(fh, **arrays)
        os.replace(temporary, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise ShardError(f"{target}: cannot write the shard ({exc}); nothing was written", path=target) from None


# ======================================================================================
# Parquet writer (flat CSR layout)
# ======================================================================================
#: ``write_parquet_shard(compression=...)``: the Parquet codecs it accepts.
_PARQUET_CODECS: tuple[str, ...] = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")


def write_parquet_shard(path: str | os.PathLike, data: Mapping[str, Any], *, compression: str = "zstd",
                        id_type: str = "auto") -> None:
    """Write one Parquet shard in the flat CSR layout: per feature, its row splits then its ids, no list levels.

    The layout (:mod:`scwork.datasets._flat`) is one not-null integer column ``csr``
    that holds each feature in turn, in row groups of its own, described by the
    file's key-value metadata (key ``scwork.flat_csr``). :func:`stats_over_dataset`
    and :func:`scwork.datasets.load_table` read it back as ragged ids; any Parquet
    reader reads it as one integer column. It is what
    :func:`scwork.datasets.write_synthetic_parquet` writes by default, and the
    Parquet layout :func:`stats_over_dataset` reads fastest: Parquet list columns
    make the reader rebuild the list offsets from per-value repetition levels, which
    on one core took pyarrow 26 about 20 of the 51 ms a list shard of 8.5 M int32
    ids took to decode (this layout: about 24 ms, within 5% of the bytes). A shard
    is read whole (row-group boundaries fall between features, not samples), so
    its size bounds the memory of one chunk.

    Parameters
    ----------
    path : path-like
        The ``.parquet`` file to write (written under a temporary name, then renamed).
    data : mapping
        ``{name: (ids, row_splits)}`` or a :class:`~scwork.sharding.FeatureBatch`,
        validated like a FeatureBatch (same rows for every name, non-negative ids).
        Weights are refused (this layout has no place for them; :func:`write_npz_shard`
        keeps them).
    compression : {"zstd", "lz4", "snappy", "gzip", "brotli", "none"}, default ``"zstd"``
        Parquet codec; the ids are ``DELTA_BINARY_PACKED`` in version 2 data pages.
    id_type : {"auto", "int32", "int64"}, default ``"auto"``
        Integer type of the column: ``"auto"`` int32 where every id and row split
        fits (``< 2**31``), else int64.

    Examples
    --------
    >>> import os, tempfile
    >>> from scwork.datasets import load_table
    >>> path = os.path.join(tempfile.mkdtemp(), "shard.parquet")
    >>> write_parquet_shard(path, {"f": ([5, 6, 7], [0, 2, 2, 3]), "g": ([1, 2, 3], [0, 1, 2, 3])})
    >>> table = load_table(path)
    >>> table.features["f"][0].tolist(), table.features["f"][1].tolist()
    ([5, 6, 7], [0, 2, 2, 3])
    """
    from scwork.datasets._flat import write_flat_shard
    from scwork.sharding.batch import FeatureBatch

    try:
        import pyarrow as pa
    except ImportError:
        raise ConfigError("Parquet shards need pyarrow: pip install 'scwork[data]'") from None
    if not isinstance(id_type, str) or id_type not in _NPZ_ID_TYPES:
        raise ConfigError(f"id_type must be one of {list(_NPZ_ID_TYPES)}, got {id_type!r}")
    if not isinstance(compression, str) or compression.lower() not in _PARQUET_CODECS:
        raise ConfigError(f"compression must be one of {list(_PARQUET_CODECS)}, got {compression!r}")
    batch = data if isinstance(data, FeatureBatch) else FeatureBatch(data)
    features, id_types = {}, {}
    for name in batch:
        if batch.has_weights(name):
            raise InputError(f"feature {name!r} has weights, which a Parquet shard in the flat CSR layout cannot "
                             "hold; drop them or write an NPZ shard (write_npz_shard keeps them)")
        ids, rs = batch[name]
        narrow = ids.size == 0 or int(ids.max()) <= _INT32_MAX
        if id_type == "int32" and not narrow:
            raise InputError(f"feature {name!r}: id {int(ids.max())} does not fit in int32 (id_type='int32'); "
                             "use id_type='auto' or 'int64'")
        features[name] = (ids, rs)
        id_types[name] = pa.int32() if narrow and id_type != "int64" else pa.int64()
    target = os.fspath(path)
    temporary = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}.tmp")
    try:
        write_flat_shard(temporary, features, id_types, compression=compression, data_page_version="2.0",
                         use_dictionary=False, column_encoding="DELTA_BINARY_PACKED")
        os.replace(temporary, target)
    except (OSError, pa.ArrowException) as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise ShardError(f"{target}: cannot write the shard ({exc}); nothing was written", path=target) from None
