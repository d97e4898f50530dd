"""Parquet row groups read one at a time, each checked against the counts in the file's footer.

pyarrow trusts a data page's header for the number of values (Parquet's repetition and
definition level entries) the page holds. A damaged header goes unnoticed in three ways
(pyarrow 26, measured on list<int32> and list<int64> columns, page versions 1 and 2, plain,
dictionary and delta encodings):

* a page claiming one entry fewer than it holds drops the last entry; when that entry
  continues a list, the row count stays right and the list loses its last id;
* a page claiming one entry more, read together with the next row group in one call, runs
  on into the page's padding: an extra empty row appears and the next row group's rows
  shift by one, their last row lost, under the right row count;
* a page whose header names no known page type is skipped, and its row group decodes to
  fewer rows.

Each row group is therefore read on its own (the run-on stops at the row group's rows), and
every column of a single Parquet leaf must decode to the rows and level entries the footer
counts for it (``num_rows`` of the row group, ``num_values`` of the column chunk). A list
of ``n`` ids takes ``n`` entries, an empty or null list one, a null id one, a scalar row one.
Every mismatch or failed read is a :class:`~scwork.errors.ShardError` naming the file, the
column and the row group.
"""

from __future__ import annotations

import numpy as np

from scwork.errors import ShardError

__all__: list[str] = []

_HOW_TO_FIX = "the file is damaged; write it again from its source"


def read_checked_row_groups(pf, groups, columns: list[str] | None, shown: str, use_threads: bool = False,
                            names: dict[str, str] | None = None):
    """Row groups ``groups`` of ``columns`` of the open ``pyarrow.parquet.ParquetFile`` ``pf``, as one table.

    Each row group is read alone and checked against the footer (see the module notes);
    ``columns=None`` reads every column; ``shown`` names the file in errors, ``names`` the
    feature a column holds where that is not the column's own name (the flat layout keeps
    every feature in one column): errors then say ``feature 'f'`` and carry ``column='f'``.
    The table's columns have one chunk per row group.
    """
    import pyarrow as pa

    leaves = _leaf_indices(pf)
    parts = []
    for group in groups:
        try:
            part = pf.read_row_group(group, columns=columns, use_threads=use_threads)
        except (pa.ArrowException, OSError, ValueError) as exc:
            # Read together, a column that decodes short is reported under another column's name
            # ("Column 1 named b expected length 0"); reading each column alone finds the damaged one.
            for column in (pf.schema_arrow.names if columns is None else columns):
                _read_one(pf, group, column, leaves, shown, use_threads, names)
            raise ShardError(f"{shown}: cannot read row group {group} ({' '.join(str(exc).split())[:300]}); "
                             f"{_HOW_TO_FIX}", path=shown) from None
        for index, column in enumerate(part.column_names):
            _check(pf, group, column, part.column(index), leaves, shown, names)
        parts.append(part)
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts)


def _damaged(shown: str, column: str, names: dict[str, str] | None, what: str) -> ShardError:
    """The error for ``column`` of file ``shown``, named as :func:`read_checked_row_groups` says."""
    feature = names.get(column) if names else None
    label = f"column {column!r}" if feature is None else f"feature {feature!r}"
    return ShardError(f"{shown}, {label}: {what}; {_HOW_TO_FIX}", path=shown,
                      column=column if feature is None else feature)


def _read_one(pf, group: int, column: str, leaves: dict, shown: str, use_threads: bool, names=None) -> None:
    """Read ``column`` of row group ``group`` alone and check it: the ShardError naming it if it is damaged."""
    import pyarrow as pa

    try:
        part = pf.read_row_group(group, columns=[column], use_threads=use_threads)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _damaged(shown, column, names,
                       f"cannot read row group {group} ({' '.join(str(exc).split())[:300]})") from None
    _check(pf, group, column, part.column(0), leaves, shown, names)


def _check(pf, group: int, column: str, values, leaves: dict, shown: str, names=None) -> None:
    """Compare a column of one row group, as decoded, with the footer's row and value counts."""
    footer = pf.metadata.row_group(group)
    leaf = leaves.get(column, ())
    if len(leaf) == 1:
        entries = _level_entries(values)
        if entries is not None:
            # The column chunk's metadata is read only after its row group decoded: pyarrow built the same
            # metadata to read it, so it is well formed (a malformed one throws from C++ where Python cannot
            # catch it).
            counted = footer.column(leaf[0]).num_values
            if entries != counted:
                what = " (ids, and one for each empty or null list)" if _is_list(values.type) else ""
                raise _damaged(shown, column, names, f"row group {group} decodes to {entries} values{what}, but "
                                                     f"the file's footer counts {counted}")
    if len(values) != footer.num_rows:
        raise _damaged(shown, column, names, f"row group {group} decodes to {len(values)} rows, but the file's "
                                             f"footer counts {footer.num_rows}")


def _leaf_indices(pf) -> dict[str, list[int]]:
    """``{top-level column: [its Parquet leaf columns]}``, as pyarrow itself maps column names to leaves."""
    out: dict[str, list[int]] = {}
    for index, path in enumerate(pf.reader.column_paths):
        out.setdefault(path[0], []).append(index)
    return out


def _is_list(typ) -> bool:
    import pyarrow as pa

    return pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ)


def _level_entries(values) -> int | None:
    """The Parquet level entries a decoded column of one leaf stands for; None for a type not counted here.

    A scalar column takes one entry a row. A list of scalars takes one per element (null
    elements included) and one for each empty or null list. Deeper nesting is not counted.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    typ = values.type
    is_list = _is_list(typ)
    inner = typ.value_type if is_list else typ
    if pa.types.is_dictionary(inner):
        inner = inner.value_type
    if pa.types.is_nested(inner):
        return None
    if not is_list:
        return len(values)
    total = 0
    for chunk in (values.chunks if isinstance(values, pa.ChunkedArray) else [values]):
        if chunk.null_count == 0 and not pa.types.is_fixed_size_list(typ):
            # the offsets give the ids and the empty lists without a pass over the ids
            offsets = np.asarray(chunk.offsets)
            total += int(offsets[-1] - offsets[0]) + int(np.count_nonzero(offsets[1:] == offsets[:-1]))
        else:
            lengths = pc.fill_null(pc.list_value_length(chunk), 0).to_numpy(zero_copy_only=False)
            total += int(np.maximum(lengths, 1).sum())
    return total
