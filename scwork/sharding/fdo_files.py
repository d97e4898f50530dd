"""jax-tpu-embedding's FDO stats files, read and written as its file FDO clients do ([jte]).

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
"""

from __future__ import annotations

import dataclasses
import glob
import itertools
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from scwork.errors import ConfigError, InputError
from scwork.sharding.limits_json_csv import _write_atomically, Limits, StackLimits
from scwork.sharding.specs import INT32_MAX

__all__ = ["FdoStats", "FDO_SUFFIXES", "FDO_FORMATS", "write_fdo_stats", "read_fdo_stats", "read_fdo_stats_csv"]


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
