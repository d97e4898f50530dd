"""Limits files: scwork's JSON / CSV limits and jax-tpu-embedding's FDO stats files ([jte] preprocess_sparse_dense_matmul_input).

Per stacked table, a *limits* entry holds ``max_ids_per_partition``,
``max_unique_ids_per_partition`` (ids per (source SparseCore, partition)) and the
optional ``required_buffer_size`` (CSR entries one SparseCore fills, padding
included). They come from a tuner (:func:`~scwork.sharding.limits.tune_limits`),
an estimate, observed statistics or a file, and go to
:func:`~scwork.sharding.preprocess` through :func:`apply_limits`.

scwork limits files
-------------------
JSON (``.json``)::

    {"format": "scwork-limits", "version": 1,
     "stacks": {"item_user": {"max_ids_per_partition": 512,
                              "max_unique_ids_per_partition": 256,
                              "required_buffer_size": 8192}},
     "metadata": {...}}

``format`` and ``version`` are required (version 1 is the only one), ``metadata`` is
optional and free-form, ``required_buffer_size`` may be ``null`` or absent. Any
other key is an error.

CSV (``.csv``): an optional first line ``# scwork-limits version 1``, then a header
with exactly the columns ``stack, max_ids_per_partition,
max_unique_ids_per_partition, required_buffer_size`` (any order), then one row per
stack; an empty ``required_buffer_size`` cell means none.

Values are integers: limits ``1 .. 2**31 - 1``, buffer sizes ``>= 0``. A malformed
file raises :class:`~scwork.errors.InputError` naming the file, the key or row and
the field; nothing is returned or applied until the whole file is valid.

FDO stats files of jax-tpu-embedding
------------------------------------
``NPZFileFDOClient`` (``jax_tpu_embedding/sparsecore/lib/fdo/file_fdo_client.py``)
publishes, per process, ``fdo_stats_<process_index>_<time_ns>.npz`` holding one array
per (stat, stacked table): keys ``<stack>_max_ids``, ``<stack>_max_unique_ids``,
``<stack>_required_buffer_size`` (and, in recent versions, ``<stack>_id_drop_counters``),
the suffixes of ``SparseDenseMatmulInputStats`` (``lib/nn/embedding.py``). An array is
one step's stats (``max_ids``: per device and partition, flattened
``device * P + partition``; ``required_buffer_size``: per device and SparseCore), or
several steps stacked (``np.vstack``, one row per recorded step). Its ``load`` reads
the latest file of every process (by the ``<time_ns>`` of the name) and merges
files with ``np.max(np.vstack((a, b)), axis=0)``; ``update_preprocessing_parameters``
then uses ``int(np.max(array))`` as the limit. :func:`write_fdo_stats` and
:func:`read_fdo_stats` reproduce both sides exactly.

Examples
--------
>>> import tempfile, os
>>> from scwork.sharding.limits_files import Limits, read_limits, write_limits
>>> lim = Limits({"t": (512, 256, 8192)})
>>> d = tempfile.mkdtemp()
>>> _ = write_limits(lim, os.path.join(d, "limits.csv"))
>>> print(open(os.path.join(d, "limits.csv")).read().strip())
# scwork-limits version 1
stack,max_ids_per_partition,max_unique_ids_per_partition,required_buffer_size
t,512,256,8192
>>> read_limits(os.path.join(d, "limits.csv")).stack_limits()
{'t': (512, 256)}
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import io
import itertools
import json
import numbers
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from scwork._rounding import round_up

from scwork.errors import ConfigError, InputError
from scwork.sharding.specs import INT32_MAX, FeatureSpec

__all__ = [
    "StackLimits",
    "Limits",
    "LIMITS_FORMAT",
    "LIMITS_FORMAT_VERSION",
    "CSV_COLUMNS",
    "write_limits",
    "read_limits",
    "FdoStats",
    "FDO_SUFFIXES",
    "write_fdo_stats",
    "read_fdo_stats",
    "apply_limits",
    "with_table_limits",
    "FDO_FORMATS",
    "read_fdo_stats_csv",
]

#: ``format`` value of scwork JSON limits files.
LIMITS_FORMAT = "scwork-limits"
#: The only version of the limits file format so far.
LIMITS_FORMAT_VERSION = 1
#: Columns of a CSV limits file.
CSV_COLUMNS: tuple[str, ...] = ("stack", "max_ids_per_partition", "max_unique_ids_per_partition",
                                "required_buffer_size")
_FIELDS = CSV_COLUMNS[1:]
_CSV_MARK = re.compile(r"^#\s*scwork-limits\s+version\s+(\S+)\s*$")

#: ``SparseDenseMatmulInputStats`` field -> key suffix in FDO ``.npz`` files (jax-tpu-embedding).
FDO_SUFFIXES: dict[str, str] = {
    "max_ids_per_partition": "_max_ids",
    "max_unique_ids_per_partition": "_max_unique_ids",
    "required_buffer_size_per_sc": "_required_buffer_size",
    "id_drop_counters": "_id_drop_counters",
}
_FDO_FILE_NAME = "fdo_stats"
_FDO_EXTENSION = "npz"


# --------------------------------------------------------------------------------------
# limits
# --------------------------------------------------------------------------------------
def _int_value(value: Any, where: str, field: str, *, minimum: int, maximum: int = INT32_MAX,
               error=InputError) -> int:
    if isinstance(value, bool):
        raise error(f"{where}: {field} must be an integer, got {value!r}")
    if isinstance(value, (np.integer, numbers.Integral)):
        v = int(value)
    elif isinstance(value, (float, np.floating)) and float(value).is_integer():
        v = int(value)
    elif isinstance(value, str):
        text = value.strip()
        # ASCII digits only (\d would take Arabic-Indic digits) and at most 30 of them
        # (int() refuses 4,301+ digits with a bare ValueError)
        if not re.fullmatch(r"[+-]?[0-9]{1,30}", text):
            shown = repr(value) if len(value) <= 60 else f"{value[:60]!r}... ({len(value)} characters)"
            raise error(f"{where}: {field} must be an integer, got {shown} (ASCII digits, at most 30)")
        v = int(text)
    else:
        raise error(f"{where}: {field} must be an integer, got {value!r} ({type(value).__name__})")
    if v < minimum:
        what = "negative" if v < 0 else "too small"
        raise error(f"{where}: {field} is {what} ({v}); it must be >= {minimum}")
    if v > maximum:
        shown = str(v) if v < 10**30 else f"a {len(str(v))}-digit number"
        raise error(f"{where}: {field} is {shown}, above {maximum} (ids and offsets are int32 on the device)")
    return v


@dataclasses.dataclass(frozen=True)
class StackLimits:
    """Limits of one stacked table.

    Examples
    --------
    >>> StackLimits(512, 256).required_buffer_size is None
    True
    >>> StackLimits(0, 8)
    Traceback (most recent call last):
    ...
    scwork.errors.ConfigError: StackLimits: max_ids_per_partition is too small (0); it must be >= 1
    """

    max_ids_per_partition: int
    """Ids (after per-sample dedup) one source SparseCore may send to one partition. Unit: ids."""
    max_unique_ids_per_partition: int
    """Distinct ids one source SparseCore may send to one partition. Unit: ids."""
    required_buffer_size: int | None = None
    """CSR entries one SparseCore fills (padding included), None if unknown. Unit: CSR entries."""

    def __post_init__(self) -> None:
        for f in _FIELDS[:2]:
            object.__setattr__(self, f, _int_value(getattr(self, f), "StackLimits", f, minimum=1,
                                                   error=ConfigError))
        if self.required_buffer_size is not None:
            object.__setattr__(self, "required_buffer_size",
                               _int_value(self.required_buffer_size, "StackLimits", "required_buffer_size",
                                          minimum=0, error=ConfigError))


def _as_stack_limits(name: str, value: Any, where: str = "Limits") -> StackLimits:
    if isinstance(value, StackLimits):
        return value
    try:
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - set(_FIELDS))
            if unknown:
                raise ConfigError(f"{where}[{name!r}]: unknown fields {unknown}; fields are {list(_FIELDS)}")
            return StackLimits(value["max_ids_per_partition"], value["max_unique_ids_per_partition"],
                               value.get("required_buffer_size"))
        if isinstance(value, (tuple, list)) and len(value) in (2, 3):
            return StackLimits(*value)
    except KeyError as err:
        raise ConfigError(f"{where}[{name!r}]: missing field {err.args[0]!r}") from None
    except ConfigError as err:
        raise ConfigError(f"{where}[{name!r}]: {err}") from None
    raise ConfigError(f"{where}[{name!r}] must be a StackLimits, (max_ids, max_unique_ids[, "
                      f"required_buffer_size]) or a dict, got {value!r}")


class Limits(Mapping):
    """Limits of several stacks: a read-only mapping ``stack name -> StackLimits``.

    Parameters
    ----------
    limits : mapping
        ``{stack: StackLimits | (max_ids, max_unique_ids[, required_buffer_size]) | dict}``.
    metadata : dict, optional
        Free-form provenance (written to JSON files).

    Examples
    --------
    >>> lim = Limits({"a": (64, 32), "b": {"max_ids_per_partition": 8, "max_unique_ids_per_partition": 8}})
    >>> lim.stack_limits()
    {'a': (64, 32), 'b': (8, 8)}
    >>> lim.to_dataset()["max_ids_per_partition"].values.tolist()
    [64, 8]
    """

    def __init__(self, limits: Mapping[str, Any], metadata: Mapping[str, Any] | None = None):
        if isinstance(limits, Limits):
            metadata = dict(limits.metadata) if metadata is None else metadata
            limits = limits._data
        if not isinstance(limits, Mapping):
            raise ConfigError(f"limits must be a mapping stack name -> limits, got {type(limits).__name__}")
        data = {}
        for name, value in limits.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"Limits: stack names must be non-empty strings, got {name!r}")
            data[name] = _as_stack_limits(name, value)
        self._data = data
        self.metadata = dict(metadata or {})

    def __getitem__(self, name: str) -> StackLimits:
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Limits):
            return self._data == other._data
        return NotImplemented

    def stack_limits(self) -> dict[str, tuple[int, int]]:
        """``{stack: (max_ids_per_partition, max_unique_ids_per_partition)}`` for ``preprocess(stack_limits=...)``."""
        return {n: (v.max_ids_per_partition, v.max_unique_ids_per_partition) for n, v in self._data.items()}

    def to_dataset(self):
        """The limits as an :class:`xarray.Dataset` with dim ``stack`` (buffer size -1: unknown)."""
        import xarray as xr

        names = list(self._data)

        def col(field, long_name, units):
            vals = [getattr(self._data[n], field) for n in names]
            return ("stack", np.array([-1 if v is None else v for v in vals], np.int64),
                    {"long_name": long_name, "units": units})

        return xr.Dataset(
            {"max_ids_per_partition": col("max_ids_per_partition", "max ids per (source SC, partition)", "ids"),
             "max_unique_ids_per_partition": col("max_unique_ids_per_partition",
                                                 "max distinct ids per (source SC, partition)", "ids"),
             "required_buffer_size": col("required_buffer_size",
                                         "CSR entries one SparseCore fills (-1: unknown)", "CSR entries")},
            coords={"stack": np.array(names, dtype=object)}, attrs={"metadata": json.dumps(self.metadata)})

    @classmethod
    def from_stats(cls, stats: Any, *, round_to: int = 1) -> Limits:
        """Observed limits of a statistics Dataset (:func:`~scwork.sharding.compute_stats`).

        Per stack: the max over every other dim (devices, partitions, steps, mini-batches
        ...) of ``max_ids_per_partition`` / ``max_unique_ids_per_partition`` and
        ``required_buffer_size_per_sc``, rounded up to ``round_to`` (limits at least 1).

        Examples
        --------
        >>> import scwork
        >>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats
        >>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])})
        >>> ds = compute_stats(batch, [FeatureSpec("f", TableSpec("t", 16, 8))], scwork.Topology(1, 2))
        >>> Limits.from_stats(ds)["t"]
        StackLimits(max_ids_per_partition=3, max_unique_ids_per_partition=3, required_buffer_size=16)
        """
        if isinstance(round_to, bool) or not isinstance(round_to, int) or round_to < 1:
            raise ConfigError(f"round_to must be a positive int, got {round_to!r}")
        for v in ("max_ids_per_partition", "max_unique_ids_per_partition"):
            if v not in getattr(stats, "data_vars", {}):
                raise InputError(f"stats has no variable {v!r}; give a Dataset from compute_stats or collect_stats")

        def red(var, name):
            da = stats[var].sel(stack=name)
            return int(da.max()) if da.size else 0

        out = {}
        for name in stats["stack"].values.tolist():
            ids = max(1, round_up(red("max_ids_per_partition", name), round_to))
            uniq = max(1, round_up(red("max_unique_ids_per_partition", name), round_to))
            buf = red("required_buffer_size_per_sc", name) if "required_buffer_size_per_sc" in stats else None
            out[name] = StackLimits(ids, uniq, buf)
        return cls(out, metadata={"source": "observed statistics", "round_to": round_to})

    def _repr_html_(self) -> str:
        from scwork._html import html_table

        rows = [(n, v.max_ids_per_partition, v.max_unique_ids_per_partition, v.required_buffer_size)
                for n, v in self._data.items()]
        source = self.metadata.get("source")
        return html_table(rows, header=("stack", "max_ids_per_partition", "max_unique_ids_per_partition",
                                        "required_buffer_size"),
                          caption=f"Limits of {len(rows)} stacks" + (f" ({source})" if source else ""))

    def __repr__(self) -> str:
        body = ", ".join(f"{n!r}: ({v.max_ids_per_partition}, {v.max_unique_ids_per_partition}, "
                         f"{v.required_buffer_size})" for n, v in self._data.items())
        return f"Limits({{{body}}})"


def _format_of(path: Path, format: str | None) -> str:
    if format is not None:
        if format not in ("json", "csv"):
            raise ConfigError(f"format must be 'json' or 'csv', got {format!r}")
        return format
    suffix = path.suffix.lower()
    if suffix in (".json", ".csv"):
        return suffix[1:]
    raise ConfigError(f"cannot tell the format of {str(path)!r} from its suffix; name it .json or .csv "
                      "or pass format='json' / 'csv'")


def write_limits(limits: Any, path: str | os.PathLike, *, format: str | None = None) -> Path:
    """Write limits to a JSON or CSV limits file (format from the suffix, or ``format``).

    ``limits``: a :class:`Limits`, a :class:`~scwork.sharding.limits.TunedLimits`, or
    anything :class:`Limits` accepts. Returns the path written.

    Examples
    --------
    >>> import json, os, tempfile
    >>> p = write_limits({"t": (16, 8)}, os.path.join(tempfile.mkdtemp(), "l.json"))
    >>> json.load(open(p))["stacks"]
    {'t': {'max_ids_per_partition': 16, 'max_unique_ids_per_partition': 8, 'required_buffer_size': None}}
    """
    limits = _coerce_limits(limits)
    path = Path(path)
    fmt = _format_of(path, format)
    if fmt == "json":
        doc = {"format": LIMITS_FORMAT, "version": LIMITS_FORMAT_VERSION,
               "stacks": {n: dataclasses.asdict(v) for n, v in limits.items()}}
        if limits.metadata:
            doc["metadata"] = limits.metadata
        text = json.dumps(doc, indent=2, default=_json_default) + "\n"
    else:
        buf = io.StringIO()
        buf.write(f"# {LIMITS_FORMAT} version {LIMITS_FORMAT_VERSION}\n")
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for n, v in limits.items():
            w.writerow([n, v.max_ids_per_partition, v.max_unique_ids_per_partition,
                        "" if v.required_buffer_size is None else v.required_buffer_size])
        text = buf.getvalue()
    _write_atomically(path, lambda fh: fh.write(text.encode("utf-8")))
    return path


def _write_atomically(path: Path, write) -> None:
    """Write ``path`` through a temporary file in the same folder and rename it:
    readers never see half a file, and a failure leaves the old file (or none)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as fh:
            write(fh)
        os.replace(temporary, path)
    except OSError as err:
        try:
            temporary.unlink()
        except OSError:
            pass
        raise ConfigError(f"cannot write {str(path)!r} ({err}); nothing was written") from None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def read_limits(path: str | os.PathLike, *, format: str | None = None, stacks: Any = None) -> Limits:
    """Read a JSON or CSV limits file, validating all of it first.

    Parameters
    ----------
    path : path
        A file written by :func:`write_limits` (or by hand, same format).
    format : {"json", "csv"}, optional
        Default: from the suffix.
    stacks : iterable of str or StackingPlan, optional
        When given, every stack of the file must be one of these (else
        :class:`~scwork.errors.ConfigError`).

    Raises
    ------
    InputError
        Unreadable file, bad JSON / CSV, wrong format or version, missing or
        unknown columns / keys, non-integer, negative or zero limits, duplicate
        stacks. The message names the file, the stack (JSON key or CSV row) and the
        field.

    Examples
    --------
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "bad.csv")
    >>> _ = open(p, "w").write("stack,max_ids_per_partition,max_unique_ids_per_partition,required_buffer_size\\n"
    ...                        "t,-8,4,\\n")
    >>> read_limits(p)    # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    scwork.errors.InputError: .../bad.csv, row 2 (stack 't'): max_ids_per_partition is negative (-8); it must be >= 1
    """
    path = Path(path)
    fmt = _format_of(path, format)
    try:
        with open(path, encoding="utf-8", newline="") as fh:     # no newline translation: csv handles it
            text = fh.read()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read limits file {str(path)!r}: {err}") from None
    shown = str(path)
    entries = _parse_json(shown, text) if fmt == "json" else _parse_csv(shown, text)
    limits_map, metadata = entries
    out = Limits(limits_map, metadata=metadata)
    if stacks is not None:
        _check_known(out.keys(), _stack_names(stacks), f"limits file {shown!r}")
    return out


def _parse_json(shown: str, text: str):
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{shown}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    except RecursionError:
        raise InputError(f"{shown}: JSON nested too deeply to read; a limits file is an object "
                         "{'format', 'version', 'stacks': {stack: {field: int}}}") from None
    except ValueError as err:          # e.g. an integer of more than 4,300 digits
        raise InputError(f"{shown}: not a readable JSON limits file ({err}); limits are integers "
                         f"up to {INT32_MAX}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{shown}: the top level must be a JSON object with 'format', 'version' and 'stacks'")
    unknown = sorted(set(doc) - {"format", "version", "stacks", "metadata"})
    if unknown:
        raise InputError(f"{shown}: unknown top-level keys {unknown}; allowed: format, version, stacks, metadata")
    if doc.get("format") != LIMITS_FORMAT:
        raise InputError(f"{shown}: key 'format' must be {LIMITS_FORMAT!r}, got {doc.get('format')!r}")
    if "version" not in doc:
        raise InputError(f"{shown}: missing key 'version' (this scwork reads version {LIMITS_FORMAT_VERSION})")
    if isinstance(doc["version"], bool) or doc["version"] != LIMITS_FORMAT_VERSION:
        raise InputError(f"{shown}: unsupported version {doc['version']!r}; this scwork reads version "
                         f"{LIMITS_FORMAT_VERSION}")
    stacks = doc.get("stacks")
    if not isinstance(stacks, dict):
        raise InputError(f"{shown}: key 'stacks' must be an object stack name -> limits, got {stacks!r}")
    metadata = doc.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InputError(f"{shown}: key 'metadata' must be an object, got {metadata!r}")
    out = {}
    for name, entry in stacks.items():
        where = f"{shown}, stacks[{name!r}]"
        if not name:
            raise InputError(f"{shown}: empty stack name in 'stacks'")
        if not isinstance(entry, dict):
            raise InputError(f"{where}: must be an object with {list(_FIELDS)}, got {entry!r}")
        unknown = sorted(set(entry) - set(_FIELDS))
        if unknown:
            raise InputError(f"{where}: unknown fields {unknown}; fields are {list(_FIELDS)}")
        out[name] = _entry(where, entry)
    return out, metadata


def _entry(where: str, entry: Mapping[str, Any]) -> StackLimits:
    vals = {}
    for f in _FIELDS[:2]:
        if f not in entry or entry[f] is None or entry[f] == "":
            raise InputError(f"{where}: missing {f}")
        vals[f] = _int_value(entry[f], where, f, minimum=1)
    buf = entry.get("required_buffer_size")
    vals["required_buffer_size"] = None if buf is None or buf == "" else \
        _int_value(buf, where, "required_buffer_size", minimum=0)
    return StackLimits(**vals)


def _parse_csv(shown: str, text: str):
    reader = csv.reader(io.StringIO(text, newline=""))
    rows = []
    try:
        for row in reader:
            rows.append((reader.line_num, row))
    except csv.Error as err:           # a field over csv's 128 KiB limit, a NUL byte, ...
        raise InputError(f"{shown}, line {reader.line_num}: not readable as CSV ({err}); expected rows "
                         f"{','.join(CSV_COLUMNS)} with short fields") from None
    start = 0
    if rows and rows[0][1] and rows[0][1][0].lstrip().startswith("#"):
        first = ",".join(rows[0][1])
        m = _CSV_MARK.match(first.strip())
        if not m:
            raise InputError(f"{shown}, line 1: a comment line must read '# {LIMITS_FORMAT} version "
                             f"{LIMITS_FORMAT_VERSION}', got {first!r}")
        if m.group(1) != str(LIMITS_FORMAT_VERSION):
            raise InputError(f"{shown}, line 1: unsupported version {m.group(1)!r}; this scwork reads version "
                             f"{LIMITS_FORMAT_VERSION}")
        start = 1
    if len(rows) <= start:
        raise InputError(f"{shown}: empty file; it needs the header {','.join(CSV_COLUMNS)}")
    header_line, header = rows[start][0], [h.strip() for h in rows[start][1]]
    missing = [c for c in CSV_COLUMNS if c not in header]
    unknown = [h for h in header if h not in CSV_COLUMNS]
    if missing or unknown or len(set(header)) != len(header):
        raise InputError(f"{shown}, line {header_line} (header): columns must be exactly {','.join(CSV_COLUMNS)} "
                         f"(any order); missing {missing}, unknown {unknown}")
    col = {h: i for i, h in enumerate(header)}
    out: dict[str, StackLimits] = {}
    for r, row in rows[start + 1:]:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise InputError(f"{shown}, row {r}: {len(row)} cells but the header has {len(header)} columns")
        name = row[col["stack"]]            # kept exactly (names may hold any character)
        if not name:
            raise InputError(f"{shown}, row {r}: empty stack name")
        where = f"{shown}, row {r} (stack {name!r})"
        if name in out:
            raise InputError(f"{where}: stack {name!r} appears twice")
        out[name] = _entry(where, {f: row[col[f]].strip() for f in _FIELDS})
    return out, {}


# --------------------------------------------------------------------------------------
# FDO stats files (jax-tpu-embedding NPZFileFDOClient)
# --------------------------------------------------------------------------------------
@dataclasses.dataclass
class FdoStats:
    """Stats read from (or to write as) jax-tpu-embedding FDO ``.npz`` files.

    Each field maps a stacked table name to its array, as
    ``SparseDenseMatmulInputStats`` holds them.
    """

    max_ids_per_partition: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """``<stack>_max_ids``: observed max ids per (device, partition), flattened; one row per step."""
    max_unique_ids_per_partition: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """``<stack>_max_unique_ids``: same for distinct ids."""
    required_buffer_size_per_sc: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """``<stack>_required_buffer_size``: CSR entries per (device, SparseCore), flattened."""
    id_drop_counters: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """``<stack>_id_drop_counters``: dropped ids (recent reference versions)."""
    files: tuple[str, ...] = ()
    """Files read (latest per process), in the order they were merged."""

    @property
    def stacks(self) -> list[str]:
        names: dict[str, None] = {}
        for f in FDO_SUFFIXES:
            names.update(dict.fromkeys(getattr(self, f)))
        return list(names)

    def to_limits(self) -> Limits:
        """Limits as ``update_preprocessing_parameters`` derives them: ``int(np.max(array))``.

        ``required_buffer_size`` is the largest per-SparseCore value (the reference
        multiplies it by the SparseCores per device for its per-device buffer).
        Every stack needs both ``_max_ids`` and ``_max_unique_ids`` (else
        :class:`~scwork.errors.InputError`); limits of 0 become 1.
        """
        out = {}
        src = ", ".join(self.files) or "FDO stats"
        for name in self.stacks:
            vals = {}
            for f in ("max_ids_per_partition", "max_unique_ids_per_partition"):
                arr = getattr(self, f).get(name)
                if arr is None:
                    raise InputError(f"{src}: stack {name!r} has no {FDO_SUFFIXES[f][1:]} entry "
                                     f"(key {name + FDO_SUFFIXES[f]!r}); both max_ids and max_unique_ids are needed")
                vals[f] = max(1, int(np.max(arr))) if np.size(arr) else 1
            buf = self.required_buffer_size_per_sc.get(name)
            vals["required_buffer_size"] = int(np.max(buf)) if buf is not None and np.size(buf) else None
            for f, v in vals.items():
                if v is not None and v > INT32_MAX:
                    key = name + FDO_SUFFIXES.get(f, "_required_buffer_size")
                    raise InputError(f"{src}: stack {name!r}, key {key!r}: the largest value {v} is above "
                                     f"{INT32_MAX} (limits are int32 on the device); the stats file is corrupt or "
                                     "not from this model")
            out[name] = StackLimits(**vals)
        return Limits(out, metadata={"source": "jax-tpu-embedding FDO stats", "files": list(self.files)})

    @classmethod
    def from_stats(cls, stats: Any) -> FdoStats:
        """Per-step stats of a statistics Dataset in the reference's array layout.

        ``stats``: from :func:`~scwork.sharding.compute_stats` (one step) or
        :func:`~scwork.sharding.limits.collect_stats` (dim ``step``: one row per step,
        as ``record`` stacks them). ``max_ids``: ``max_ids_per_partition`` (device,
        partition) flattened; ``required_buffer_size``: ``required_buffer_size_per_sc``
        (device, sc) flattened; ``id_drop_counters``: ``dropped_ids`` when present.
        """
        out = cls()
        has_step = "step" in stats.dims
        for name in stats["stack"].values.tolist():
            sel = stats.sel(stack=name)
            for field, var, dims in (("max_ids_per_partition", "max_ids_per_partition", ("device", "partition")),
                                     ("max_unique_ids_per_partition", "max_unique_ids_per_partition",
                                      ("device", "partition")),
                                     ("required_buffer_size_per_sc", "required_buffer_size_per_sc",
                                      ("device", "sc"))):
                if var not in sel:
                    raise InputError(f"stats has no variable {var!r}")
                da = sel[var].transpose(*((("step",) if has_step else ()) + dims))
                arr = np.asarray(da.values, np.int64)
                getattr(out, field)[name] = arr.reshape(arr.shape[0], -1) if has_step else arr.reshape(-1)
            if "dropped_ids" in sel:
                out.id_drop_counters[name] = np.asarray(sel["dropped_ids"].values, np.int64)
        return out


def write_fdo_stats(stats: Any, directory: str | os.PathLike, *, process_index: int = 0,
                    timestamp_ns: int | None = None,
                    fields: Iterable[str] = ("max_ids_per_partition", "max_unique_ids_per_partition",
                                             "required_buffer_size_per_sc"),
                    format: str = "npz") -> Path:
    """Write ``fdo_stats_<process_index>_<timestamp_ns>.npz`` as ``NPZFileFDOClient.publish`` does.

    ``format="csv"`` writes ``.csv`` as ``CSVFileFDOClient.publish`` does instead.

    Parameters
    ----------
    stats : FdoStats or xarray.Dataset
        A Dataset is converted with :meth:`FdoStats.from_stats`.
    directory : path
        The FDO client's ``base_dir`` (created if missing).
    process_index : int
        ``jax.process_index()`` of the writer.
    timestamp_ns : int, optional
        Default ``time.time_ns()``.
    fields : iterable of str
        Which stats to write (keys of :data:`FDO_SUFFIXES`). The default matches
        current reference versions; older ones know only the first two, newer ones
        also ``"id_drop_counters"``.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> d = tempfile.mkdtemp()
    >>> st = FdoStats({"t": np.array([10, 20])}, {"t": np.array([1, 2])}, {"t": np.array([64])})
    >>> p = write_fdo_stats(st, d, process_index=3, timestamp_ns=42)
    >>> p.name, sorted(np.load(p).files)
    ('fdo_stats_3_42.npz', ['t_max_ids', 't_max_unique_ids', 't_required_buffer_size'])
    """
    if not isinstance(stats, FdoStats):
        stats = FdoStats.from_stats(stats)
    fields = tuple(fields)
    bad = [f for f in fields if f not in FDO_SUFFIXES]
    if bad:
        raise ConfigError(f"unknown FDO fields {bad}; choose from {list(FDO_SUFFIXES)}")
    for v, name in ((process_index, "process_index"), (timestamp_ns, "timestamp_ns")):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0):
            raise ConfigError(f"{name} must be a non-negative int, got {v!r}")
    directory = Path(directory)
    ts = time.time_ns() if timestamp_ns is None else int(timestamp_ns)
    arrays = {}
    for f in fields:
        for name, arr in getattr(stats, f).items():
            key = f"{name}{FDO_SUFFIXES[f]}"
            if not isinstance(name, str) or not name:
                raise ConfigError(f"FDO stats {f}: stack names must be non-empty strings, got {name!r}")
            try:
                value = np.asarray(arr)
            except (ValueError, TypeError, OverflowError) as err:
                raise ConfigError(f"FDO stats key {key!r}: not an array of counts ({err})") from None
            try:                               # what read_fdo_stats accepts, checked before writing
                arrays[key] = _check_fdo_array("(to write)", key, value)
            except InputError as err:
                raise ConfigError(str(err)) from None
    if format not in FDO_FORMATS:
        raise ConfigError(f"format must be 'npz' or 'csv' (the FDO client that reads the files), got {format!r}")
    path = directory / f"{_FDO_FILE_NAME}_{int(process_index)}_{ts}.{format}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create the FDO directory {str(directory)!r} ({err})") from None
    if format == "csv":
        from scwork.sharding._fdo_csv import format_fdo_csv

        text = format_fdo_csv(arrays)
        _write_atomically(path, lambda fh: fh.write(text.encode("utf-8")))
    else:
        _write_atomically(path, lambda fh: np.savez(fh, **arrays))
    return path


def _latest_files_by_process(files: list[str], extension: str = _FDO_EXTENSION) -> list[str]:
    """``NPZFileFDOClient._get_latest_files_by_process`` (and the CSV client's), reproduced exactly.

    Groups ``fdo_stats_<process>_<timestamp>.<extension>`` names by the process string and
    keeps the one with the largest (integer) timestamp of each group, in descending
    order of process string.
    """
    if not files:
        return []
    dir_path = os.path.split(files[0])[0]
    dir_prefix = len(dir_path) + 1
    pattern = rf"{_FDO_FILE_NAME}_(\d+)_(\d+)\.{extension}"
    groups = []
    for file in files:
        match = re.search(pattern, file[dir_prefix:])
        if match:
            groups.append((match.group(1), int(match.group(2)), file))
    if not groups:
        return []
    groups = sorted(groups, reverse=True)
    return [next(g)[2] for _, g in itertools.groupby(groups, key=lambda x: x[0])]


def read_fdo_stats(directory: str | os.PathLike, *, format: str | None = None) -> FdoStats:
    """Read FDO stats files as ``NPZFileFDOClient.load`` (or ``CSVFileFDOClient.load``) does, validating them.

    Reads the latest ``fdo_stats_<process>_<time_ns>.npz`` (``.csv`` with
    ``format="csv"``) of every process in ``directory`` and merges equal keys with
    ``np.max(np.vstack((a, b)), axis=0)`` (a single file's arrays are kept as they
    are, steps included). ``format=None`` (default) reads whichever of the two
    formats the folder holds (:func:`read_fdo_stats_csv` for the CSV layout).

    Raises
    ------
    InputError
        No stats file; a file that cannot be read; a key without a known suffix
        (:data:`FDO_SUFFIXES`); non-integer or negative values; arrays of one key
        whose shapes cannot be stacked. The message names the file and the key.

    Examples
    --------
    The reference's own test (``file_fdo_client_test.py``, ``test_load_multiple_files``):

    >>> import numpy as np, os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> np.savez(os.path.join(d, "fdo_stats_0_10.npz"), t_one_max_ids=np.array([10, 20, 30, 40]),
    ...          t_one_max_unique_ids=np.array([1, 2, 3, 4]), t_one_required_buffer_size=np.array([64]))
    >>> np.savez(os.path.join(d, "fdo_stats_1_11.npz"), t_one_max_ids=np.array([20, 10, 40, 30]),
    ...          t_one_max_unique_ids=np.array([2, 1, 4, 3]), t_one_required_buffer_size=np.array([128]))
    >>> st = read_fdo_stats(d)
    >>> st.max_ids_per_partition["t_one"].tolist(), st.required_buffer_size_per_sc["t_one"].tolist()
    ([20, 20, 40, 40], [128])
    >>> st.to_limits()["t_one"]
    StackLimits(max_ids_per_partition=40, max_unique_ids_per_partition=4, required_buffer_size=128)
    """
    directory = Path(directory)
    extension = _fdo_format(directory, format)
    pattern = os.path.join(str(directory), f"{_FDO_FILE_NAME}*.{extension}")
    files = _latest_files_by_process(glob.glob(pattern), extension)
    if not files:
        raise InputError(f"no FDO stats files ({_FDO_FILE_NAME}_<process>_<time_ns>.{extension}) in "
                         f"{str(directory)!r}")
    merged: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    for file in files:
        try:
            arrays = _load_fdo_file(file, extension)
        except InputError:
            raise
        except Exception as err:  # noqa: BLE001 - any unreadable file is an input error
            raise InputError(f"cannot read FDO stats file {file!r}: {err}") from None
        for key, value in arrays.items():
            value = _check_fdo_array(file, key, value)
            if key not in merged:
                merged[key] = value
                origin[key] = file
            else:
                try:
                    merged[key] = np.max(np.vstack((merged[key], value)), axis=0)
                except ValueError as err:
                    raise InputError(f"FDO stats key {key!r}: the arrays of {origin[key]!r} (shape "
                                     f"{np.shape(merged[key])}) and {file!r} (shape {np.shape(value)}) cannot be "
                                     f"merged ({err})") from None
                origin[key] = file
    out = FdoStats(files=tuple(files))
    for key, value in merged.items():
        for field, suffix in FDO_SUFFIXES.items():
            if key.endswith(suffix) and len(key) > len(suffix):
                getattr(out, field)[key[:-len(suffix)]] = value
                break
        else:
            raise InputError(f"FDO stats file {origin[key]!r}: unexpected key {key!r}; keys must be "
                             f"<stack> followed by one of {list(FDO_SUFFIXES.values())}")
    return out


def _check_fdo_array(file: str, key: str, value: np.ndarray) -> np.ndarray:
    """``value`` as int64 (exact: merging int64 with uint64 or float arrays would go
    through float64), or an InputError naming the file and the key."""
    if value.dtype.kind not in "iu":
        if value.dtype.kind == "f" and np.all(np.isfinite(value)) and np.all(value == np.floor(value)):
            pass
        else:
            raise InputError(f"FDO stats file {file!r}, key {key!r}: values must be integers, got dtype "
                             f"{value.dtype}")
    if value.size and np.min(value) < 0:
        raise InputError(f"FDO stats file {file!r}, key {key!r}: negative value {np.min(value)}; counts are >= 0")
    if value.size and (value.dtype.kind == "u" and np.max(value) > np.iinfo(np.int64).max
                       or value.dtype.kind == "f" and np.max(value) >= 2.0**63):
        raise InputError(f"FDO stats file {file!r}, key {key!r}: value {np.max(value)!r} is above the int64 "
                         f"range (limits are int32, at most {INT32_MAX})")
    return value.astype(np.int64)


# --------------------------------------------------------------------------------------
# applying limits
# --------------------------------------------------------------------------------------
def _coerce_limits(limits: Any) -> Limits:
    if isinstance(limits, Limits):
        return limits
    if isinstance(limits, FdoStats):
        return limits.to_limits()
    to_limits = getattr(limits, "to_limits", None)
    if callable(to_limits):
        return to_limits()
    if isinstance(limits, (str, os.PathLike)):
        p = Path(limits)
        return read_fdo_stats(p).to_limits() if p.is_dir() else read_limits(p)
    if isinstance(limits, Mapping):
        return Limits(limits)
    raise ConfigError(f"limits must be a Limits, TunedLimits, FdoStats, a mapping or a path, got "
                      f"{type(limits).__name__}")


def _stack_names(target: Any) -> list[str]:
    plan = getattr(target, "plan", target)
    stacks = getattr(plan, "stacks", None)
    if stacks is not None:
        return [s.name for s in stacks]
    if isinstance(target, str):
        return [target]
    return [str(s) for s in target]


def _check_known(names: Iterable[str], known: list[str], what: str) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"{what} names unknown stacks {unknown}; the model's stacks are {known}. "
                          "Plan the stacks the same way (stacking=...) or fix the names")


def apply_limits(target: Any, limits: Any, *, topology: Any = None, stacking: Any = "auto",
                 batch_size: int | None = None, strict: bool = True) -> dict[str, tuple[int, int]]:
    """Validate ``limits`` against a model's stacks and return ``stack_limits`` for ``preprocess``.

    Parameters
    ----------
    target : StackingPlan, MiniBatchPlan, PreprocessResult, or features
        Anything with ``.plan`` / ``.stacks``, or FeatureSpecs (then ``topology``
        is needed, and ``batch_size`` for ``stacking="auto"``).
    limits : Limits, TunedLimits, FdoStats, mapping, or path
        A path to a ``.json`` / ``.csv`` limits file, or a directory of FDO files.
    strict : bool
        True (default): every stack of ``limits`` must exist in the model
        (:class:`~scwork.errors.ConfigError` otherwise). False: unknown stacks are
        ignored. Stacks of the model missing from ``limits`` keep their own limits.

    Returns
    -------
    dict
        ``{stack: (max_ids_per_partition, max_unique_ids_per_partition)}``, a new
        object; nothing is modified.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import FeatureSpec, TableSpec, plan_stacking
    >>> plan = plan_stacking([FeatureSpec("f", TableSpec("t", 100, 8))], scwork.Topology(1, 2), stacking=None)
    >>> apply_limits(plan, {"t": (16, 8)})
    {'t': (16, 8)}
    >>> apply_limits(plan, {"u": (16, 8)})
    Traceback (most recent call last):
    ...
    scwork.errors.ConfigError: limits names unknown stacks ['u']; the model's stacks are ['t']. Plan the stacks the same way (stacking=...) or fix the names
    """
    lim = _coerce_limits(limits)
    if getattr(target, "plan", None) is None and getattr(target, "stacks", None) is None:
        from scwork.sharding.stacking import normalize_features, plan_stacking

        features = normalize_features(target)
        if topology is None:
            raise ConfigError("apply_limits(features, ...) needs topology=... to plan the stacks "
                              "(or pass a StackingPlan)")
        target = plan_stacking(features, topology, stacking, batch_size=batch_size)
    known = _stack_names(target)
    if strict:
        _check_known(lim.keys(), known, "limits")
    return {n: (v.max_ids_per_partition, v.max_unique_ids_per_partition) for n, v in lim.items() if n in known}


def with_table_limits(features: Any, limits: Any) -> tuple[FeatureSpec, ...]:
    """New FeatureSpecs whose tables carry the limits keyed by table name.

    Every key of ``limits`` must be a table of ``features`` (else
    :class:`~scwork.errors.ConfigError`); the inputs are not modified.

    Examples
    --------
    >>> from scwork.sharding import FeatureSpec, TableSpec
    >>> feats = [FeatureSpec("f", TableSpec("t", 100, 8)), FeatureSpec("g", TableSpec("t", 100, 8))]
    >>> new = with_table_limits(feats, {"t": (32, 16)})
    >>> new[1].table.max_ids_per_partition, feats[1].table.max_ids_per_partition
    (32, None)
    """
    from scwork.sharding.stacking import normalize_features

    lim = _coerce_limits(limits)
    features = normalize_features(features)
    tables = {f.table.name for f in features}
    unknown = [n for n in lim if n not in tables]
    if unknown:
        raise ConfigError(f"limits name unknown tables {unknown}; the features' tables are {sorted(tables)}")
    new_tables = {}
    for f in features:
        if f.table.name in lim and f.table.name not in new_tables:
            v = lim[f.table.name]
            new_tables[f.table.name] = dataclasses.replace(
                f.table, max_ids_per_partition=v.max_ids_per_partition,
                max_unique_ids_per_partition=v.max_unique_ids_per_partition)
    return tuple(dataclasses.replace(f, table=new_tables.get(f.table.name, f.table)) for f in features)


# --------------------------------------------------------------------------------------
# FDO stats files in CSV (jax-tpu-embedding CSVFileFDOClient)
# --------------------------------------------------------------------------------------
#: File formats of jax-tpu-embedding's two file FDO clients (``NPZFileFDOClient``, ``CSVFileFDOClient``).
FDO_FORMATS = ("npz", "csv")


def _fdo_format(directory: Path, format: str | None) -> str:
    """The format to read: ``format``, else the one the folder holds (an error if it holds both)."""
    if format is not None:
        if format not in FDO_FORMATS:
            raise ConfigError(f"format must be 'npz' or 'csv' (the FDO client that wrote the files), got {format!r}")
        return format
    found = [ext for ext in FDO_FORMATS
             if _latest_files_by_process(glob.glob(os.path.join(str(directory), f"{_FDO_FILE_NAME}*.{ext}")), ext)]
    if len(found) > 1:
        raise InputError(f"{str(directory)!r} holds FDO stats files of both formats (.npz and .csv); the library's "
                         "clients each read one: pass format='npz' or format='csv'")
    return found[0] if found else _FDO_EXTENSION


def _load_fdo_file(file: str, extension: str) -> dict[str, np.ndarray]:
    if extension == "npz":
        with np.load(file, allow_pickle=False) as loaded:
            return {k: loaded[k] for k in loaded.files}
    from scwork.sharding._fdo_csv import parse_fdo_csv

    with open(file, encoding="utf-8", newline="") as fh:
        return parse_fdo_csv(file, fh.read())


def read_fdo_stats_csv(directory: str | os.PathLike) -> FdoStats:
    """Read ``fdo_stats_<process>_<time_ns>.csv`` files as ``CSVFileFDOClient.load`` does.

    ``read_fdo_stats(directory, format="csv")``: the latest file of every process; the
    rows of a key in one file stacked (one per recorded step); processes merged with
    ``np.max(np.vstack((a, b)), axis=0)``. Errors as :func:`read_fdo_stats`, plus a
    header other than ``key,values`` or a value that is not an integer.

    Examples
    --------
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "fdo_stats_0_5.csv"), "w").write("key,values\\nt_max_ids,3 9\\nt_max_ids,4 1\\n"
    ...                                                          "t_max_unique_ids,2 2\\n")
    >>> read_fdo_stats_csv(d).to_limits()["t"]
    StackLimits(max_ids_per_partition=9, max_unique_ids_per_partition=2, required_buffer_size=None)
    """
    return read_fdo_stats(directory, format="csv")
