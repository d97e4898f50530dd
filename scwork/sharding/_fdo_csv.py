"""The CSV layout of jax-tpu-embedding's FDO stats files (``CSVFileFDOClient``).

``jax_tpu_embedding/sparsecore/lib/fdo/csv_file_fdo_client.py`` publishes, per
process, ``fdo_stats_<process_index>_<time_ns>.csv``::

    key,values
    t_max_ids,3 0 7 2
    t_max_ids,5 1 2 2
    t_required_buffer_size,64 64

a header row, then per key (``<stack>`` + one of the ``SparseDenseMatmulInputStats``
suffixes) one row per recorded step, the values joined by single spaces (a
one-step history is one row). Its ``load`` reads the latest file of every process,
stacks the rows of a key (``np.vstack`` when a file has several, the 1-D row
otherwise) and merges processes with ``np.max(np.vstack((a, b)), axis=0)``, as the
``.npz`` client does.

This module only turns text into arrays and back (no file policy, no validation of
the counts): :mod:`scwork.sharding.limits_files` reads and writes the files with it.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping

import numpy as np

from scwork.errors import ConfigError, InputError

__all__ = ["CSV_HEADER", "parse_fdo_csv", "format_fdo_csv"]

#: First row of every CSV stats file (``CSVFileFDOClient.publish``).
CSV_HEADER = ("key", "values")
_INTEGERS = re.compile(r"[+-]?[0-9]{1,30}")


def parse_fdo_csv(shown: str, text: str) -> dict[str, np.ndarray]:
    """Arrays of one CSV stats file: ``{key: 1-D row, or 2-D rows (one per step)}``.

    Raises :class:`~scwork.errors.InputError` naming ``shown`` and the line for a
    missing or different header, a row without exactly two cells, a value that is
    not an integer, or rows of one key with different lengths.

    >>> parse_fdo_csv("f", "key,values\\r\\nt_max_ids,1 2\\r\\nt_max_ids,3 0\\r\\nt_max_unique_ids,1 1\\r\\n")
    {'t_max_ids': array([[1, 2],
           [3, 0]]), 't_max_unique_ids': array([1, 1])}
    """
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: dict[str, list[np.ndarray]] = {}
    try:
        header = next(reader, None)
        if header is None or tuple(c.strip() for c in header) != CSV_HEADER:
            raise InputError(f"FDO stats file {shown!r}, line 1: the header must be 'key,values' (jax-tpu-"
                             f"embedding's CSVFileFDOClient), got {','.join(header or [])!r}")
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            if len(row) != 2 or not row[0]:
                raise InputError(f"FDO stats file {shown!r}, line {line}: expected 'key,<values separated by "
                                 f"spaces>', got {len(row)} cells {row[:3]!r}")
            words = row[1].split()
            bad = next((w for w in words if not _INTEGERS.fullmatch(w)), None)
            if bad is not None:
                raise InputError(f"FDO stats file {shown!r}, line {line}, key {row[0]!r}: value {bad[:40]!r} is "
                                 "not an integer (counts are written as ASCII digits)")
            rows.setdefault(row[0], []).append(np.array([int(w) for w in words], np.int64))
    except csv.Error as err:
        raise InputError(f"FDO stats file {shown!r}, line {reader.line_num}: not readable as CSV ({err})") from None
    out = {}
    for key, values in rows.items():
        if len(values) == 1:
            out[key] = values[0]
            continue
        if len({v.size for v in values}) > 1:
            raise InputError(f"FDO stats file {shown!r}, key {key!r}: its rows have different lengths "
                             f"{sorted({v.size for v in values})}; every step must have as many values")
        out[key] = np.vstack(values)
    return out


def format_fdo_csv(arrays: Mapping[str, np.ndarray]) -> str:
    """The text ``CSVFileFDOClient.publish`` writes for ``{key: array}``.

    A 1-D array is one row, a 2-D array one row per step; a single count (0-d, as
    ``id_drop_counters`` after one step) is a row of one value, which the library's
    reader loads as a one-element array (its writer fails on such a count).

    >>> format_fdo_csv({"t_max_ids": np.array([[1, 2], [3, 0]]), "t_id_drop_counters": np.array(4)})
    'key,values\\r\\nt_max_ids,1 2\\r\\nt_max_ids,3 0\\r\\nt_id_drop_counters,4\\r\\n'
    """
    buf = io.StringIO()
    writer = csv.writer(buf)            # the library's default dialect: "\r\n" line ends
    writer.writerow(CSV_HEADER)
    for key, array in arrays.items():
        array = np.asarray(array).astype(np.int64)
        if array.ndim > 2:
            raise ConfigError(f"FDO stats key {key!r}: an array of shape {array.shape} cannot be written as CSV "
                              "rows; give one row per step (1-D or 2-D)")
        for row in np.atleast_2d(array) if array.ndim != 1 else (array,):
            writer.writerow([key, " ".join(map(str, row.tolist()))])
    return buf.getvalue()
