"""List-column Parquet shards with a damaged data page header: every reader (stats_over_dataset on the folder,
load_table, the shard row reader) gives the ids as written or a ShardError naming the file, the column and the
row group, never other ids.

The files are written by pyarrow with three row groups of four rows; one data page header is then patched in
place (Thrift compact protocol, same varint widths) to claim a different number of level entries, or a page type
that does not exist (pyarrow skips such a page without an error).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import scwork
from scwork import datasets
from scwork.errors import ShardError
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, collect_stats, stats_over_dataset

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

TOPOLOGY = scwork.Topology(2, 2)
# three row groups of four rows; row 3 ends row group 0 with a list of two ids, row 4 opens row group 1 empty
A = [[5, 6], [7], [8, 9, 10], [11, 12], [], [13], [14, 15, 16], [17], [18, 19], [20], [21, 22, 23], [24]]
B = [[1], [2, 3], [4], [], [5], [6, 7], [8], [9], [10, 11], [12], [13], [14, 15]]
STORED = {"a": A, "b": B}


def _csr(rows):
    return (np.array([i for row in rows for i in row], np.int64),
            np.cumsum([0] + [len(row) for row in rows]).astype(np.int64))


# --------------------------------------------------------------------------------------
# a Thrift compact reader for the integer fields of a page header
# --------------------------------------------------------------------------------------
def _varint(buf, pos):
    shift = value = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _header_fields(buf, pos, prefix=(), out=None):
    """``{field path: (value, start, end)}`` of the integer fields of the Thrift struct at ``pos`` (and its end)."""
    out = {} if out is None else out
    last = 0
    while True:
        head = buf[pos]
        pos += 1
        if head == 0:
            return out, pos
        kind, delta = head & 0x0F, head >> 4
        if delta:
            field = last + delta
        else:
            raw, pos = _varint(buf, pos)
            field = (raw >> 1) ^ -(raw & 1)
        last = field
        if kind in (1, 2):                    # booleans live in the type nibble
            continue
        if kind in (4, 5, 6):                 # i16, i32, i64: zigzag varints
            start = pos
            raw, pos = _varint(buf, pos)
            out[prefix + (field,)] = ((raw >> 1) ^ -(raw & 1), start, pos)
        elif kind == 12:                      # a nested struct (the data page header, its statistics)
            _, pos = _header_fields(buf, pos, prefix + (field,), out)
        elif kind == 8:                       # binary (statistics' min / max)
            size, pos = _varint(buf, pos)
            pos += size
        else:
            raise AssertionError(f"unexpected Thrift type {kind} in a page header")


# PageHeader: 1 type (0 DATA_PAGE, 3 DATA_PAGE_V2), 5 DataPageHeader, 8 DataPageHeaderV2. In both data page
# headers field 1 is the number of level entries; in V2 field 2 counts nulls and field 3 rows.
def _set(buf, header, path, value):
    fields, _ = _header_fields(buf, header)
    old, start, end = fields[path]
    raw = (value << 1) ^ (value >> 63)
    encoded = bytearray()
    while True:
        encoded.append((raw & 0x7F) | (0x80 if raw >> 7 else 0))
        raw >>= 7
        if not raw:
            break
    assert len(encoded) == end - start, "the patch must keep the header's length"
    buf[start:end] = encoded
    return old


def _write(path, version="1.0", typ="int32", dictionary=False, compression="NONE"):
    list_type = pa.list_(pa.int32() if typ == "int32" else pa.int64())
    table = pa.table({"a": pa.array(A, list_type), "b": pa.array(B, list_type)})
    options = dict(use_dictionary=dictionary)
    if version == "2.0" and not dictionary:     # write_synthetic_parquet's default encoding
        options = dict(use_dictionary=False, column_encoding={"a": "DELTA_BINARY_PACKED", "b": "DELTA_BINARY_PACKED"})
    pq.write_table(table, path, row_group_size=4, data_page_version=version, compression=compression, **options)
    return path


def _damage(path, column, group, field, change):
    """Patch the data page of ``column`` in row group ``group``: ``field`` "entries", "type", "nulls" or "rows"."""
    buf = bytearray(path.read_bytes())
    header = pq.ParquetFile(path).metadata.row_group(group).column("ab".index(column)).data_page_offset
    fields, _ = _header_fields(buf, header)
    v2 = fields[(1,)][0] == 3
    assert fields[(1,)][0] in (0, 3)          # a data page, not the dictionary page
    where = {"type": (1,), "entries": (8, 1) if v2 else (5, 1), "nulls": (8, 2), "rows": (8, 3)}[field]
    # the footer's column chunk holds one page: its level entries are the page's
    assert fields[where][0] == pq.ParquetFile(path).metadata.row_group(group).column("ab".index(column)).num_values \
        or field != "entries"
    _set(buf, header, where, change(fields[where][0]))
    path.write_bytes(bytes(buf))
    return path


def _in_memory(batch_size):
    out = []
    for lo in range(0, len(A) - batch_size + 1, batch_size):
        out.append(FeatureBatch({name: _csr(rows[lo:lo + batch_size]) for name, rows in STORED.items()}))
    return out


def _specs():
    return [FeatureSpec(name, TableSpec(f"t_{name}", 64, 8)) for name in STORED]


def _read_rows(path, start=0, stop=12):
    from scwork.sharding.shards import _read_parquet_rows, _scan_parquet

    colmap = {"a": "a", "b": "b"}
    return _read_parquet_rows(_scan_parquet(Path(path), colmap), start, stop, colmap)


def _folder(path):
    folder = path.parent / f"{path.stem}_folder"
    folder.mkdir()
    shutil.copy(path, folder / "shard.parquet")
    return folder, str(folder / "shard.parquet")


def _assert_read_as_stored(path):
    for name, rows in STORED.items():
        ids, splits = _csr(rows)
        table = datasets.load_table(path)
        np.testing.assert_array_equal(table.features[name][0], ids)
        np.testing.assert_array_equal(table.features[name][1], splits)
        read = _read_rows(path)
        np.testing.assert_array_equal(read[name][0], ids)
        np.testing.assert_array_equal(read[name][1], splits)
        # rows 2..9 span all three row groups
        part = _read_rows(path, 2, 10)
        np.testing.assert_array_equal(part[name][0], _csr(rows[2:10])[0])
        np.testing.assert_array_equal(part[name][1], _csr(rows[2:10])[1])
    folder, _ = _folder(path)
    for batch_size in (4, 12):
        result = stats_over_dataset(folder, _specs(), TOPOLOGY, batch_size=batch_size, progress=False,
                                    scheduler="sync")
        expected = collect_stats(_in_memory(batch_size), _specs(), TOPOLOGY, progress=False)
        for stat in ("ids", "unique_ids", "max_ids_per_partition", "max_unique_ids_per_partition"):
            np.testing.assert_array_equal(result.step_stats[stat].values, expected[stat].values, err_msg=stat)


def _assert_refused(path, column, message):
    """Every reader raises a ShardError naming the file and ``column`` with ``message``."""
    for read in (datasets.load_table, _read_rows):
        with pytest.raises(ShardError, match=re.escape(str(path)) + message) as caught:
            read(path)
        assert (caught.value.path, caught.value.column) == (str(path), column)
    folder, shard = _folder(path)
    with pytest.raises(ShardError, match=re.escape(shard) + message) as caught:
        stats_over_dataset(folder, _specs(), TOPOLOGY, batch_size=4, progress=False, scheduler="sync")
    assert (caught.value.path, caught.value.column) == (shard, column)


FORMATS = [("1.0", "int32", False, "NONE"), ("1.0", "int64", True, "snappy"), ("2.0", "int32", False, "zstd"),
           ("2.0", "int64", True, "NONE")]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: "-".join(map(str, f)))
def test_well_formed_list_shards_are_read_as_stored(tmp_path, fmt):
    _assert_read_as_stored(_write(tmp_path / "good.parquet", *fmt))


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: "-".join(map(str, f)))
def test_page_claiming_one_entry_fewer_is_refused(tmp_path, fmt):
    """Row group 0 of a: its page claims 7 level entries of 8. The last entry continues row 3 ([11, 12]), so
    the row count stayed right and every reader gave a's ids as 5..11, 13..24 with row 3 = [11]: the id 12 was
    lost without an error. Row group 0 now decodes to fewer entries than the footer's column chunk counts."""
    path = _damage(_write(tmp_path / "fewer.parquet", *fmt), "a", 0, "entries", lambda n: n - 1)
    _assert_refused(path, "a", r", column 'a': row group 0 decodes to 7 values \(ids, and one for each "
                               r"empty or null list\), but the file's footer counts 8; the file is damaged")


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: "-".join(map(str, f)))
def test_page_claiming_one_entry_fewer_at_a_row_start_names_the_column(tmp_path, fmt):
    """Row group 1 of a claims 5 entries of 6: the lost entry opens row 7. Read with b, pyarrow's error named
    column b ("Column 1 named b expected length 3 but got length 4"); the error now names a."""
    path = _damage(_write(tmp_path / "short.parquet", *fmt), "a", 1, "entries", lambda n: n - 1)
    _assert_refused(path, "a", r", column 'a': row group 1 decodes to 5 values")


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: "-".join(map(str, f)))
def test_page_claiming_one_entry_more_than_its_row_group_is_read_as_stored(tmp_path, fmt):
    """Row group 1 of a claims 7 level entries of 6. Row groups 1 and 2 read in one call ran on into the
    page's padding: an empty row appeared at row 8 and row group 2 shifted by a row, a's ids 5..23 under row
    splits [.., 12, 13, 13, 15, 16, 19] (the last row, [24], lost) with the right row count. Read alone, row
    group 1 stops at its 4 rows: the ids as written."""
    path = _damage(_write(tmp_path / "more.parquet", *fmt), "a", 1, "entries", lambda n: n + 1)
    _assert_read_as_stored(path)


@pytest.mark.parametrize("fmt", FORMATS[::2], ids=lambda f: "-".join(map(str, f)))
def test_page_claiming_more_entries_than_its_levels_hold_is_refused(tmp_path, fmt):
    """Row group 0 of a claims 9 entries of 8: pyarrow fails to decode the levels; the ShardError names a and
    the row group (it named no column)."""
    path = _damage(_write(tmp_path / "levels.parquet", *fmt), "a", 0, "entries", lambda n: n + 1)
    _assert_refused(path, "a", r", column 'a': cannot read row group 0 \(.*rep / def levels")


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: "-".join(map(str, f)))
@pytest.mark.parametrize("column, group, entries", [("a", 0, 8), ("a", 1, 6), ("b", 2, 6)])
def test_page_skipped_by_pyarrow_is_refused(tmp_path, fmt, column, group, entries):
    """A data page whose header names no page type (-1): pyarrow skips it and the row group decodes to no rows
    of that column. The readers' errors named the other column ("Column 1 named b expected length 0") or no
    column; they now name the damaged one and its row group."""
    path = _damage(_write(tmp_path / "skipped.parquet", *fmt), column, group, "type", lambda _: -1)
    _assert_refused(path, column, rf", column '{column}': row group {group} decodes to 0 values "
                                  rf"\(ids, and one for each empty or null list\), but the file's footer counts "
                                  rf"{entries}; the file is damaged; write it again from its source")


@pytest.mark.parametrize("fmt", FORMATS[2:], ids=lambda f: "-".join(map(str, f)))
@pytest.mark.parametrize("field, change", [("rows", 1), ("rows", -1), ("nulls", 1)])
def test_v2_page_row_and_null_counts_are_not_trusted(tmp_path, fmt, field, change):
    """A V2 data page header also counts rows and nulls; pyarrow decodes from the levels, so a wrong count
    there changes nothing: the ids as written."""
    path = _damage(_write(tmp_path / "v2.parquet", *fmt), "a", 1, field, lambda n: n + change)
    _assert_read_as_stored(path)


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_footer_checks_count_empty_and_null_lists_and_null_ids(tmp_path, version):
    """Columns whose level entries are not their ids alone (null and empty lists, null ids inside a list, null
    scalars, fixed-size lists, text) read back as written, in one table, from three row groups; the counted
    entries equal the footer's."""
    from scwork.datasets._row_groups import _level_entries, read_checked_row_groups

    table = pa.table({
        "lists": pa.array([[1, 2], None, [], [3, None], [4], None, [], [5, 6, 7], [8], [], None, [9]],
                          pa.list_(pa.int64())),
        "large": pa.array([[1], [], None] * 4, pa.large_list(pa.int32())),
        "fixed": pa.array([[1, 2], None, [3, None]] * 4, pa.list_(pa.int16(), 2)),
        "scalar": pa.array([1, None, 3] * 4, pa.int32()),
        "text": pa.array(["x", None, "y|z"] * 4),
        "words": pa.array([["x"], None, []] * 4, pa.list_(pa.string())),
    })
    path = tmp_path / "mixed.parquet"
    pq.write_table(table, path, row_group_size=4, data_page_version=version)
    with pq.ParquetFile(path) as pf:
        read = read_checked_row_groups(pf, range(3), None, str(path))
        assert read.equals(table)
        counted = {name: sum(pf.metadata.row_group(g).column(j).num_values for g in range(3))
                   for j, name in enumerate(table.column_names)}
    # by hand: an id or a null id is one entry, and so is an empty or null list and a scalar row
    assert counted == {"lists": 2 + 1 + 1 + 2 + 1 + 1 + 1 + 3 + 1 + 1 + 1 + 1, "large": 12, "fixed": 4 * (2 + 1 + 2),
                       "scalar": 12, "text": 12, "words": 12}
    assert {name: _level_entries(table.column(name)) for name in table.column_names} == counted
    assert _level_entries(pa.chunked_array([pa.array([[[1]]])])) is None      # nested lists are not counted
    loaded = datasets.load_table(path, columns=["large", "scalar"])
    np.testing.assert_array_equal(loaded.features["large"][0], [1] * 4)
    np.testing.assert_array_equal(loaded.features["large"][1], [0, 1, 1, 1] + [2, 2, 2, 3, 3, 3, 4, 4, 4])


def test_load_table_reads_parquet_files_without_row_groups(tmp_path):
    """A file a ParquetWriter closed without rows has no row group at all: no rows, the columns asked for."""
    schema = pa.schema([("a", pa.list_(pa.int32())), ("b", pa.int64())])
    pq.ParquetWriter(tmp_path / "none.parquet", schema).close()
    assert pq.ParquetFile(tmp_path / "none.parquet").metadata.num_row_groups == 0
    table = datasets.load_table(tmp_path / "none.parquet", columns=["b"])
    assert table.num_samples == 0 and list(table.features) == ["b"]
    np.testing.assert_array_equal(table.features["b"][1], [0])
    assert list(datasets.load_table(tmp_path / "none.parquet").features) == ["a", "b"]
