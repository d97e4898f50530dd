"""scwork's own per-stack limits and their JSON / CSV files.

Per stacked table, a *limits* entry holds ``max_ids_per_partition``,
``max_unique_ids_per_partition`` (ids per (source SparseCore, partition)) and the
optional ``required_buffer_size`` (CSR entries one SparseCore fills, padding
included). They come from a tuner (:func:`~scwork.sharding.limits.tune_limits`),
an estimate, observed statistics or a file, and go to
:func:`~scwork.sharding.preprocess` through :func:`apply_limits`.

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
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import numbers
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from scwork._rounding import round_up
from scwork.errors import ConfigError, InputError
from scwork.sharding.specs import INT32_MAX

__all__ = ["StackLimits", "Limits", "LIMITS_FORMAT", "LIMITS_FORMAT_VERSION", "CSV_COLUMNS", "read_limits",
           "write_limits_file"]


#: ``format`` value of scwork JSON limits files.
LIMITS_FORMAT = "scwork-limits"
#: The only version of the limits file format so far.
LIMITS_FORMAT_VERSION = 1
#: Columns of a CSV limits file.
CSV_COLUMNS: tuple[str, ...] = ("stack", "max_ids_per_partition", "max_unique_ids_per_partition",
                                "required_buffer_size")
_FIELDS = CSV_COLUMNS[1:]
_CSV_MARK = re.compile(r"^#\s*scwork-limits\s+version\s+(\S+)\s*$")

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


def write_limits_file(limits: Limits, path: str | os.PathLike, *, format: str | None = None) -> Path:
    """Write a :class:`Limits` to a JSON or CSV limits file (format from the suffix, or ``format``).

    :func:`~scwork.sharding.write_limits` takes limits from any source and calls this.
    """
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
