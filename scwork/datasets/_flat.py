"""The flat CSR Parquet layout: per feature, row splits then ids in one integer column, no levels.

A Parquet list column stores, beside its values, one repetition and one definition level per
value; a reader rebuilds the list offsets from those levels, which takes pyarrow about 40% of
the decode of a shard of 8.5 M ids (20 ms of 51 on one core, the same ids as one flat column
decode in 24). This layout stores no lists: one integer column, ``csr``, that holds for each
feature in turn its ``num_rows + 1`` row splits (from 0 to its number of ids, non-decreasing:
sample ``b`` owns ``ids[row_splits[b]:row_splits[b + 1]]``) followed by its ids, each feature in
its own row group(s). Delta encoding stores the splits as their differences, the row lengths,
and the reader takes them as they are (no sum to rebuild). The file's key-value metadata
(key ``scwork.flat_csr``) says so, as JSON::

    {"version": 1, "column": "csr", "num_rows": 16384,
     "features": [["f0", 327104], ["f1", 328611], ...]}

``features`` lists each feature's name and number of ids in the order they are stored, so
feature ``k`` takes rows ``sum_{j<k} (num_rows + 1 + num_ids_j)`` onwards, ``num_rows + 1 +
num_ids_k`` of them, on row-group boundaries. Any Parquet reader reads the file (it is one integer column);
:func:`scwork.sharding.stats_over_dataset` and :func:`scwork.datasets.load_table` read the
features back as ragged ids. Every inconsistency (row splits that do not run from 0 to the
number of ids or decrease, features that do not fall on row groups, a row group that decodes to
more or fewer values than the footer counts, a malformed note) is a :class:`~scwork.errors.ShardError`
naming the file and the feature.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from scwork.datasets._row_groups import read_checked_row_groups
from scwork.errors import ShardError

__all__ = []

#: Key of the Parquet key-value metadata that marks (and describes) a flat CSR shard.
FLAT_KEY = b"scwork.flat_csr"
#: The integer column that holds every feature's row splits and ids.
FLAT_COLUMN = "csr"
#: Version of the layout this code writes and reads.
FLAT_VERSION = 1
_INT64_MAX = np.iinfo(np.int64).max
_HOW_TO_FIX = ("rewrite the shard with scwork.sharding.dataset_stats.write_parquet_shard (or store the feature "
               "as a list column)")


class FlatLayout:
    """A flat shard's note, checked against its row groups: rows, and per feature its row groups and ids."""

    __slots__ = ("column", "num_rows", "features")

    def __init__(self, column: str, num_rows: int, features: dict[str, tuple[int, int, int]]):
        self.column = column
        self.num_rows = num_rows
        self.features = features      # name -> (first row group, stop row group, number of ids)


def flat_layout(metadata: Mapping[bytes, bytes] | None, schema, row_group_rows: list[int],
                shown: str) -> FlatLayout | None:
    """The layout a Parquet file's key-value ``metadata`` describes, or None for any other Parquet file.

    ``schema`` is the file's Arrow schema and ``row_group_rows`` its row groups' row
    counts: the note must agree with both.
    """
    import pyarrow as pa

    if not metadata or FLAT_KEY not in metadata:
        return None
    key = FLAT_KEY.decode()

    def bad(problem: str) -> ShardError:
        return ShardError(f"{shown}: the {key!r} note of this flat CSR shard {problem}; {_HOW_TO_FIX}", path=shown)

    try:
        note = json.loads(metadata[FLAT_KEY])
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise bad(f"is not valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(note, dict):
        raise bad(f"must be a JSON object, got {type(note).__name__}")
    if not _is_count(note.get("version")) or note.get("version") != FLAT_VERSION:
        raise bad(f"has version {str(note.get('version'))[:40]!r}; this scwork reads version {FLAT_VERSION} "
                  "(a newer scwork may have written it)")
    column = note.get("column")
    if not isinstance(column, str) or column not in schema.names:
        raise bad(f"names the column {str(column)[:80]!r}, which the file does not have (it has "
                  f"{list(schema.names)[:10]})")
    typ = schema.field(column).type
    if not pa.types.is_integer(typ):
        raise bad(f"names the column {column!r} of type {typ}; it must hold integers (row splits and ids)")
    num_rows = note.get("num_rows")
    if not _is_count(num_rows):
        raise bad(f"has num_rows {str(num_rows)[:40]!r}; expected an integer >= 0")
    entries = note.get("features")
    if not isinstance(entries, list) or not entries:
        raise bad("must list the features as [[name, number of ids], ...]")
    starts = [0]
    for rows in row_group_rows:
        starts.append(starts[-1] + rows)
    features: dict[str, tuple[int, int, int]] = {}
    at = 0
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and _is_count(entry[1])):
            raise bad(f"has the feature entry {str(entry)[:80]}; expected [name, number of ids >= 0]")
        name, num_ids = entry
        if name in features:
            raise bad(f"lists the feature {name!r} twice")
        stop = at + num_rows + 1 + num_ids
        first, last = _row_group_at(starts, at), _row_group_at(starts, stop)
        if first is None or last is None:
            raise ShardError(f"{shown}, feature {name!r}: its rows {at}..{stop - 1} of column {column!r} do not "
                             f"start and end on row-group boundaries (row groups start at {starts[:8]}...); the "
                             f"note and the row groups disagree; {_HOW_TO_FIX}", path=shown, column=name)
        features[name] = (first, last, num_ids)
        at = stop
    if at != starts[-1]:
        raise bad(f"accounts for {at} rows of column {column!r}, but the row groups hold {starts[-1]}")
    return FlatLayout(column, num_rows, features)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT64_MAX


def _row_group_at(starts: list[int], row: int) -> int | None:
    """Index of the row group starting at ``row`` (``len(starts) - 1`` at the end), None if none starts there."""
    import bisect

    i = bisect.bisect_left(starts, row)
    return i if i < len(starts) and starts[i] == row else None


def read_flat_feature(pf, layout: FlatLayout, name: str, shown: str) -> tuple[np.ndarray, np.ndarray]:
    """Feature ``name`` of an open ``pyarrow.parquet.ParquetFile`` in the flat layout: ``(ids, row_splits)``.

    The ids are a view of pyarrow's decoded buffer in their stored integer width
    (unsigned 64-bit ids as an int64 view once checked to fit); the row splits are
    int64 from 0. Negative ids are left to the caller's check (it names the row).
    """
    if name not in layout.features:
        raise ShardError(f"{shown}: no feature {name!r} in this flat CSR shard; it holds "
                         f"{list(layout.features)[:20]}", path=shown, column=name)
    first, stop, num_ids = layout.features[name]
    n = layout.num_rows + 1
    # Each row group is read on its own and must decode to the values the footer counts for it: a damaged
    # page header can make pyarrow skip a page, or run on past a row group's end when several are read in
    # one call, leaving valid-looking row splits over the wrong ids (scwork.datasets._row_groups).
    table = read_checked_row_groups(pf, range(first, stop), [layout.column], shown, names={layout.column: name})
    # the row groups' counts add up to the feature's row splits and ids (flat_layout checked their boundaries)
    column = table.column(0)
    if column.null_count:
        raise ShardError(f"{shown}, feature {name!r}: {column.null_count} null value(s) among its row splits "
                         f"and ids; neither may be null; {_HOW_TO_FIX}", path=shown, column=name)
    arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    values = arr.to_numpy(zero_copy_only=False)
    if values.dtype.kind == "u" and values.dtype.itemsize == 8:
        if values.size and values.max() > _INT64_MAX:
            raise ShardError(f"{shown}, feature {name!r}: values above the int64 range", path=shown, column=name)
        values = values.view(np.int64)
    splits, ids = values[:n], values[n:]
    if splits[0] != 0 or splits[-1] != num_ids:
        raise ShardError(f"{shown}, feature {name!r}: its row splits run from {int(splits[0])} to "
                         f"{int(splits[-1])}; they must run from 0 to the {num_ids} ids stored; {_HOW_TO_FIX}",
                         path=shown, column=name)
    if n > 1 and np.any(splits[1:] < splits[:-1]):
        row = int(np.argmax(splits[1:] < splits[:-1]))
        raise ShardError(f"{shown}, feature {name!r}: its row splits decrease at row {row} ({int(splits[row])} "
                         f"then {int(splits[row + 1])}); they must not decrease; {_HOW_TO_FIX}", path=shown,
                         column=name)
    # from 0 to num_ids and non-decreasing: every split lies in 0..num_ids
    row_splits = splits.astype(np.int64)
    return ids, row_splits


def flat_list_table(pf, shown: str, columns: list[str] | None):
    """A flat CSR shard as an Arrow table of ``list<ids>`` columns (for :func:`load_table`), or None if not flat."""
    import pyarrow as pa

    meta = pf.metadata
    layout = flat_layout(meta.metadata, pf.schema_arrow,
                         [meta.row_group(i).num_rows for i in range(meta.num_row_groups)], shown)
    if layout is None:
        return None
    names = list(layout.features) if columns is None else columns
    arrays = []
    for name in names:
        ids, row_splits = read_flat_feature(pf, layout, name, shown)
        offsets = pa.array(row_splits, pa.int64())
        arrays.append(pa.LargeListArray.from_arrays(offsets, pa.array(ids)))
    return pa.table(dict(zip(names, arrays)))


def write_flat_shard(path, features: Mapping[str, tuple[np.ndarray, np.ndarray]], id_types: Mapping[str, Any],
                     **write_options) -> None:
    """Write ``{name: (ids, row_splits)}`` (already validated) as one flat CSR Parquet file at ``path``.

    ``id_types`` gives each feature's pyarrow integer type; the one column takes the
    widest of them (row splits included). ``write_options`` go to
    ``pyarrow.parquet.ParquetWriter`` (compression, encodings, page version).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    num_rows = {len(rs) - 1 for rs in (features[name][1] for name in features)}
    if len(num_rows) != 1:
        raise ValueError(f"features with different row counts {sorted(num_rows)}")
    rows = num_rows.pop()
    most = max((int(rs[-1] - rs[0]) for _, rs in features.values()), default=0)
    wide = any(pa.types.is_int64(t) for t in id_types.values()) or most > np.iinfo(np.int32).max
    typ = pa.int64() if wide else pa.int32()
    dtype = np.int64 if wide else np.int32
    note = {"version": FLAT_VERSION, "column": FLAT_COLUMN, "num_rows": rows,
            "features": [[name, int(features[name][1][-1] - features[name][1][0])] for name in features]}
    schema = pa.schema([pa.field(FLAT_COLUMN, typ, nullable=False)],
                       metadata={FLAT_KEY: json.dumps(note, separators=(",", ":")).encode()})
    with pq.ParquetWriter(path, schema, **write_options) as writer:
        for name, (ids, row_splits) in features.items():
            values = np.empty(rows + 1 + int(row_splits[-1] - row_splits[0]), dtype)
            np.subtract(row_splits, row_splits[0], out=values[:rows + 1], casting="unsafe")
            values[rows + 1:] = ids[row_splits[0]:row_splits[-1]]
            # one write per feature: its rows start a row group of their own
            writer.write_table(pa.table({FLAT_COLUMN: pa.array(values, typ)}, schema=schema),
                               row_group_size=values.size)
