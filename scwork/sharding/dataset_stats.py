"""Limit statistics over datasets larger than memory, locally or on a Dask cluster (jax-tpu-embedding's preprocess_sparse_dense_matmul_input, issue 8).

:func:`stats_over_dataset` computes what :func:`~scwork.sharding.collect_stats`
computes over in-memory batches -- the per-step statistics of jax-tpu-embedding's preprocess_sparse_dense_matmul_input, the
statistics merged over all steps and the tuned limits of
:func:`~scwork.sharding.tune_limits` -- over a dataset of shards on disk (or a dask
collection), reading it chunk by chunk so that memory stays bounded, on a local
thread pool by default or on a ``dask.distributed`` cluster.

Batches
-------
The samples of all shards, in shard order (file name order for a directory), form
one sequence; step ``i`` is samples ``[i * batch_size, (i + 1) * batch_size)`` of
it, so a batch may start in one shard and end in the next (shard boundaries need not
be aligned with batches; empty shards are allowed). With ``drop_remainder=True``
(default) a final batch shorter than ``batch_size`` is dropped (its size is
reported as :attr:`DatasetStats.dropped_samples`); with ``False`` it is kept as the
last step, processed with the stacking plan of the full batches, and
:attr:`DatasetStats.last_batch_size` gives its size (it must divide over the
devices and SparseCores like any batch).

The per-step statistics are exactly those of ``collect_stats`` over the same
batches: every block of consecutive steps is computed by ``collect_stats`` with the
stacking plan made once for the whole run (what ``collect_stats`` makes from its
first batch), and the blocks are concatenated along ``step``. Merging over steps is
exact: maxima (``max_ids_per_partition``, ``max_unique_ids_per_partition``,
``required_buffer_size_per_sc``, as :func:`~scwork.sharding.limits.merge_step_stats`)
and sums (``total_*``) of integers, taken per block and combined.

Sources
-------
- **Parquet shards** (``.parquet``, ``.pq``): one row per sample; a feature's column
  is ``list<integer>`` (or ``large_list``/``fixed_size_list``; a null list is a
  sample without ids), or a plain integer column (one id per sample, null: none).
  :func:`scwork.datasets.write_synthetic_parquet` writes such shards. Only the row
  groups a chunk needs are read.
- **NPZ shards** (``.npz``), see :func:`write_npz_shard`: for every feature column
  ``<name>``, the members ``<name>_ids`` (1-D integer array: the ids of all samples,
  sample after sample) and ``<name>_row_splits`` (1-D integer array of
  ``num_rows + 1`` non-decreasing offsets from 0 to ``len(<name>_ids)``; sample
  ``b`` owns ``ids[row_splits[b]:row_splits[b + 1]]``); every column of a shard has
  the same ``num_rows``; other members (e.g. ``<name>_weights``) are ignored.
  Uncompressed archives (``numpy.savez``) are read by seeking to the rows needed;
  compressed ones (``numpy.savez_compressed``) are decompressed from the start of a
  member up to the rows needed (same memory, more time).
- **A dask DataFrame** (one row per sample, columns as for Parquet: lists of ints,
  or ints) or **a dask Bag** of records (mappings ``column -> ids``, the ids a list
  or array of ints, an int, or None). A first pass counts the rows of every
  partition (files give it from their metadata); every partition then goes to
  exactly one chunk, so memory follows the partition size.

``source`` is a directory (its ``*.parquet``, ``*.pq`` or ``*.npz`` files, in name
order, not recursive), a glob pattern (matches in name order), a list of files (in
the given order), or one of the dask collections. Parquet and NPZ are not mixed.

Execution and memory
--------------------
The samples are cut into chunks of about ``chunk_rows`` samples (rounded down to a
multiple of ``batch_size``; by default about :data:`DEFAULT_CHUNK_IDS` ids, and at
least four chunks per worker when the data allows). NPZ chunks are exactly that
many whole batches. Parquet and dask chunks end at the first row-group
(partition) boundary at least ``chunk_rows`` samples after their start, so that
each row group (partition) is decoded by exactly one task; a chunk then holds its
inner steps plus *fragments* of the steps crossing its ends (fewer than
``batch_size`` samples each). One task per chunk reads its rows, runs the numba
engine batch by batch over its inner steps and hands its fragments on; one small
task per crossing step assembles the fragments (in order) into that batch. By
default the tasks
run on dask's local threaded scheduler (``scheduler="threads"``, ``num_workers``
threads, default one per core; the numba kernels and the Parquet decoder release
the GIL); ``scheduler="sync"`` runs them one by one in the calling thread. Without
dask installed the same tasks run on a ``concurrent.futures`` thread pool.
``client=`` (a ``dask.distributed.Client``) or ``scheduler="tcp://host:port"``
(connects a Client, kept on :attr:`DatasetStats.client` and closed by
:meth:`DatasetStats.close`) runs them on a ``dask.distributed`` cluster; the files
must then be readable at the same path by the caller (which reads the footers and
headers to plan the chunks) and by every worker.

Memory per worker: one chunk in flight, whose rows are at most ``chunk_rows`` plus
one row group (partition); reading and converting them costs about
``3 x 8 B`` per id, and the one batch inside the engine ``~6 x 8 B`` per id:
O(``(chunk_rows + row group) x valency x features x 8 B x`` small factor), plus the
fragments (under two batches per chunk, until their step is done). The result
holds the per-step statistics, about
``32 B x steps x stacks x G x S x P`` (``ids`` and ``unique_ids`` are
``(step, stack, device, sc, partition)`` int64) plus ``O(steps x stacks)``
summaries; ``per_step="summary"`` keeps only the summaries (the merged statistics
and tuned limits are unchanged, :meth:`DatasetStats.tradeoff` is then unavailable).
With the local scheduler the result is in memory (numpy-backed). With a distributed
client the per-step arrays are **dask-backed**: they stay on the workers, chunked
along ``step`` (one dask chunk per block of steps), and only the ``O(steps x stacks)``
summaries, merged statistics and tuned limits are brought to the client; call
``.compute()`` (or :meth:`DatasetStats.compute`) to fetch them.

Errors: a shard that cannot be read (truncated, not Parquet/NPZ, corrupt pages or
members) or does not match the expected schema (missing column, wrong type, null or
negative ids, row splits that do not fit the ids) raises :class:`ShardError` naming
the file and, where it applies, the column. Nothing is returned half-done: if any
chunk fails, the remaining work is cancelled and the error raised; a returned
:class:`DatasetStats` always covers every step. Progress bar (``tqdm.auto``, one
tick per task) on runs longer than a second; ``progress=False`` or the environment
variable ``SCWORK_PROGRESS=0`` switches it off (see :mod:`scwork._progress`).

Examples
--------
>>> import tempfile, scwork
>>> from scwork.datasets import write_synthetic_parquet
>>> from scwork.sharding import FeatureSpec, TableSpec, stats_over_dataset
>>> folder = tempfile.mkdtemp()
>>> _ = write_synthetic_parquet(folder, 3, rows_per_shard=40, features=["f0"], vocab_size=1000, seed=1)
>>> res = stats_over_dataset(folder, [FeatureSpec("f0", TableSpec("t", 1000, 8))], scwork.Topology(2, 2),
...                          batch_size=32, progress=False)
>>> res.num_steps, res.dropped_samples          # 120 samples: 3 batches of 32, 24 samples dropped
(3, 24)
>>> res.step_stats["observed_max_ids"].dims
('step', 'stack')
>>> lim = res.stack_limits()["t"]
>>> lim[0] == scwork.sharding.tune_limits(res.step_stats).stack_limits()["t"][0]
True
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import glob
import inspect
import math
import numbers
import os
import tokenize
import uuid
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scwork.errors import ConfigError, InputError, OutOfVocabularyError, ShardError
from scwork.hardware.topology import Topology
from scwork.sharding.specs import SparsecoreConfig

__all__ = [
    "stats_over_dataset",
    "DatasetStats",
    "ShardError",
    "write_npz_shard",
    "DEFAULT_CHUNK_IDS",
    "PARQUET_SUFFIXES",
    "NPZ_SUFFIXES",
]

#: Ids one chunk holds by default (``chunk_rows=None``): 4 Mi ids, 32 MiB of int64.
DEFAULT_CHUNK_IDS = 1 << 22
#: File name endings read as Parquet shards.
PARQUET_SUFFIXES: tuple[str, ...] = (".parquet", ".pq")
#: File name endings read as NPZ shards.
NPZ_SUFFIXES: tuple[str, ...] = (".npz",)

_INT64_MAX = np.iinfo(np.int64).max
_TUNE = ("max", "percentile")
_PER_STEP = ("full", "summary")
_LOCAL_SCHEDULERS = {"threads": "threads", "threaded": "threads", "sync": "sync", "synchronous": "sync",
                     "single-threaded": "sync"}
_SUMMARY_VARS = ("observed_max_ids", "observed_max_unique_ids", "observed_required_buffer_size")
_CONFIGURED_VARS = ("configured_max_ids_per_partition", "configured_max_unique_ids_per_partition")




# ======================================================================================
# result
# ======================================================================================
@dataclasses.dataclass(eq=False)
class DatasetStats:
    """What :func:`stats_over_dataset` returns: per-step, merged and tuned statistics.

    Attributes
    ----------
    step_stats : xarray.Dataset
        Per-step statistics, the layout of :func:`~scwork.sharding.collect_stats`
        (dims ``step, stack, device, sc, partition``); dask-backed after a
        distributed run. With ``per_step="summary"`` only ``observed_max_ids``,
        ``observed_max_unique_ids``, ``observed_required_buffer_size`` (step, stack)
        and the ``configured_*`` variables.
    merged : xarray.Dataset
        Over all steps: the maxima of :func:`~scwork.sharding.limits.merge_step_stats`
        (``max_ids_per_partition``, ``max_unique_ids_per_partition``,
        ``required_buffer_size_per_sc``) and the sums ``total_ids``,
        ``total_unique_ids`` (stack, device, sc, partition), ``total_input_ids``
        (stack, device, sc), ``total_naive_ids_per_partition`` (stack, partition),
        ``total_out_of_vocabulary_ids`` (stack). Always in memory.
    tuned : TunedLimits or None
        :func:`~scwork.sharding.tune_limits` over all steps (None with ``tune=None``).
    plan : StackingPlan
        The stacking plan of every step (with the configured limits).
    batch_size : int
    num_steps : int
    num_samples : int
        Samples in the steps.
    dropped_samples : int
        Samples of the final short batch dropped by ``drop_remainder=True`` (else 0).
    last_batch_size : int
        Samples of the last step (``batch_size`` unless a short batch was kept).
    num_ids : int
        Raw ids (before dedup) of all steps, over all features.
    shards : tuple of str
        The files read (or ``"partition <i>"`` labels of a dask collection).
    num_chunks : int
        Tasks the steps were split into.
    scheduler : str
        ``"threads"``, ``"sync"``, ``"pool"`` (no dask) or ``"distributed"``.
    client : dask.distributed.Client or None
        The client of a distributed run (the dask-backed arrays live on its cluster).
    """

    step_stats: Any
    merged: Any
    tuned: Any
    plan: Any
    batch_size: int
    num_steps: int
    num_samples: int
    dropped_samples: int
    last_batch_size: int
    num_ids: int
    shards: tuple[str, ...]
    num_chunks: int
    scheduler: str
    client: Any = dataclasses.field(default=None, repr=False)
    _owns_client: bool = dataclasses.field(default=False, repr=False)

    @property
    def dask_backed(self) -> bool:
        """Whether some per-step arrays are dask arrays (distributed run with ``per_step="full"``)."""
        return any(getattr(v.variable, "chunks", None) is not None for v in self.step_stats.data_vars.values())

    def stack_limits(self) -> dict[str, tuple[int, int]]:
        """``{stack: (max_ids, max_unique_ids)}`` of the tuned limits (for ``preprocess(stack_limits=...)``)."""
        return self._tuned().stack_limits()

    def to_limits(self):
        """The tuned limits as :class:`~scwork.sharding.Limits` (e.g. for ``write_limits``)."""
        return self._tuned().to_limits()

    def _tuned(self):
        if self.tuned is None:
            raise ConfigError("no tuned limits: stats_over_dataset ran with tune=None; call "
                              "scwork.sharding.tune_limits(result.step_stats) or rerun with tune='max'")
        return self.tuned

    def tradeoff(self, candidates=None, **kwargs):
        """:func:`~scwork.sharding.tradeoff` over all steps (fetches dask-backed arrays first)."""
        from scwork.sharding.limits import tradeoff

        if "ids" not in self.step_stats:
            raise ConfigError("tradeoff needs the per-partition statistics; rerun stats_over_dataset with "
                              "per_step='full'")
        ds = self.step_stats[["ids", "unique_ids", *_SUMMARY_VARS]]
        return tradeoff(ds.compute() if self.dask_backed else ds, candidates, **kwargs)

    def compute(self) -> DatasetStats:
        """A copy whose per-step statistics are in memory (numpy-backed)."""
        return dataclasses.replace(self, step_stats=self.step_stats.compute(), client=self.client,
                                   _owns_client=False)

    def close(self) -> None:
        """Close the client :func:`stats_over_dataset` connected (``scheduler="tcp://..."``).

        Dask-backed arrays cannot be computed afterwards; a client given with
        ``client=`` is left open.
        """
        if self._owns_client and self.client is not None:
            self.client.close()
            self._owns_client = False

    def __enter__(self) -> DatasetStats:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _repr_html_(self) -> str:
        from scwork._html import html_table

        ds = self.merged
        rows = []
        for i, name in enumerate(ds["stack"].values.tolist()):
            row = [name, int(ds["max_ids_per_partition"].values[i].max()),
                   int(ds["max_unique_ids_per_partition"].values[i].max())]
            if self.tuned is not None:
                tuned = self.tuned.dataset
                row += [int(tuned["max_ids_per_partition"].values[i]),
                        int(tuned["max_unique_ids_per_partition"].values[i])]
            rows.append(row)
        header = ["stack", "observed max ids", "observed max unique ids"]
        if self.tuned is not None:
            header += [f"tuned max ids ({self.tuned.method})", "tuned max unique ids"]
        caption = (f"DatasetStats: {self.num_steps} steps of {self.batch_size} samples, {self.num_ids:,} ids "
                   f"from {len(self.shards)} shard(s) on {self.scheduler}")
        return html_table(rows, header=header, caption=caption)

    def __repr__(self) -> str:
        where = f"{len(self.shards)} shard{'s' if len(self.shards) != 1 else ''}"
        lines = [f"DatasetStats({self.num_steps} steps of {self.batch_size} samples from {where}, "
                 f"{self.num_ids} ids, {self.num_chunks} chunks on {self.scheduler}"
                 + (", dask-backed" if self.dask_backed else "") + ")"]
        if self.last_batch_size != self.batch_size:
            lines.append(f"  last step: a short batch of {self.last_batch_size} samples")
        if self.dropped_samples:
            lines.append(f"  dropped: the final {self.dropped_samples} samples (shorter than a batch)")
        ds = self.merged
        for i, name in enumerate(ds["stack"].values.tolist()):
            line = (f"  {name}: observed max ids {int(ds['max_ids_per_partition'].values[i].max())}, "
                    f"max unique ids {int(ds['max_unique_ids_per_partition'].values[i].max())}")
            if self.tuned is not None:
                t = self.tuned.dataset
                line += (f"; tuned ({self.tuned.method}) {int(t['max_ids_per_partition'].values[i])}"
                         f" / {int(t['max_unique_ids_per_partition'].values[i])}")
            lines.append(line)
        return "\n".join(lines)


# ======================================================================================
# shards: discovery and metadata
# ======================================================================================
class _Piece:
    """One shard (file or partition) with its row count; picklable, no dask traversal."""

    __slots__ = ("kind", "path", "num_rows", "num_ids", "info", "index")

    def __init__(self, kind: str, path: str, num_rows: int, num_ids: int, info: Any = None, index: int = 0):
        self.kind = kind          # "parquet", "npz", "frame", "bag"
        self.path = path          # file path or "partition <i>"
        self.num_rows = int(num_rows)
        self.num_ids = int(num_ids)  # estimate (exact for NPZ)
        self.info = info          # parquet: row group starts; npz: {column: (ids member, splits member)}
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
    """Values ``[start, stop)`` of an NPZ member as int64 (reads only those bytes when stored)."""
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
    if member.dtype.kind == "u" and values.size and values.max() > _INT64_MAX:
        raise ShardError(f"{path}, column {column!r}: {member.name!r} holds values above the int64 range",
                         path=path, column=column)
    return values.astype(np.int64)


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
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    typ = arr.type
    problem = _arrow_type_problem(typ)
    if problem:
        raise ShardError(f"{shown}, column {column!r}: {problem}", path=shown, column=column)
    n = len(arr)
    if pa.types.is_integer(typ):
        lengths = np.ones(n, np.int64) if arr.null_count == 0 else \
            np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.int64)
        values = arr.drop_null() if arr.null_count else arr
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
    if ids.dtype.kind == "u" and ids.size and ids.max() > _INT64_MAX:
        raise ShardError(f"{shown}, column {column!r}: ids above the int64 range", path=shown, column=column)
    ids = ids.astype(np.int64, copy=False)
    rs = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=rs[1:])
    _check_ids(ids, rs, shown, column, row0)
    return ids, rs


def _check_ids(ids: np.ndarray, rs: np.ndarray, shown: str, column: str, row0: int) -> None:
    if ids.size and ids.min() < 0:
        pos = int(np.argmax(ids < 0))
        row = int(np.searchsorted(rs, pos, side="right") - 1)
        raise ShardError(f"{shown}, column {column!r}: negative id {int(ids[pos])} in row {row0 + row}; ids "
                         "must be >= 0", path=shown, column=column)


def _read_parquet_rows(piece: _Piece, start: int, stop: int, colmap: dict[str, str]):
    import pyarrow as pa
    import pyarrow.parquet as pq

    starts = piece.info
    first = bisect.bisect_right(starts, start) - 1
    last = bisect.bisect_left(starts, stop)
    cols = list(dict.fromkeys(colmap.values()))
    try:
        with pq.ParquetFile(piece.path) as pf:
            table = pf.read_row_groups(list(range(first, last)), columns=cols, use_threads=False)
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


def _read_npz_rows(piece: _Piece, start: int, stop: int, colmap: dict[str, str]):
    out = {}
    for feature, col in colmap.items():
        ids_m, rs_m = piece.info[col]
        rs = _npz_values(piece.path, rs_m, start, stop + 1, col)
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


def _read_rows(piece: _Piece, data, start: int, stop: int, colmap: dict[str, str]):
    if piece.kind == "parquet":
        return _read_parquet_rows(piece, start, stop, colmap)
    if piece.kind == "npz":
        return _read_npz_rows(piece, start, stop, colmap)
    if piece.kind == "frame":
        return _read_frame_rows(piece, data, start, stop, colmap)
    return _read_bag_rows(piece, data, start, stop, colmap)


# ======================================================================================
# chunk tasks (module-level and picklable: they run on dask.distributed workers)
# ======================================================================================
class _Job:
    """What every task shares: features, topology, plan, config, columns, the pieces."""

    __slots__ = ("features", "topology", "plan", "config", "colmap", "on_oov", "batch_size", "per_step",
                 "pieces", "offsets", "num_steps", "used")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)

    def step_rows(self, step: int) -> tuple[int, int]:
        """Samples ``[start, stop)`` of ``step`` (the last one may be short)."""
        return step * self.batch_size, min((step + 1) * self.batch_size, self.used)


class _Chunk:
    """Samples ``[sample_start, sample_stop)``: the steps inside, and fragments of the steps across its ends."""

    __slots__ = ("index", "sample_start", "sample_stop", "segments", "step_start", "step_stop", "fragments")

    def __init__(self, index, sample_start, sample_stop, segments, step_start, step_stop, fragments):
        self.index = index
        self.sample_start = sample_start
        self.sample_stop = sample_stop
        self.segments = segments      # [(piece index, local start, local stop)]
        self.step_start = step_start  # steps [step_start, step_stop) lie wholly inside
        self.step_stop = step_stop
        self.fragments = fragments    # steps that only partly lie inside (at most two)


def _collect_kwargs() -> dict:
    from scwork.sharding.limits import collect_stats

    return {"progress": False} if "progress" in inspect.signature(collect_stats).parameters else {}


def _concat_rows(parts: list[dict], features: list[str]) -> dict:
    if len(parts) == 1:
        return parts[0]
    out = {}
    for f in features:
        ids = np.concatenate([p[f][0] for p in parts])
        splits = [np.zeros(1, np.int64)]
        base = 0
        for p in parts:
            rs = p[f][1]
            splits.append(rs[1:] + base)
            base += int(rs[-1])
        out[f] = (ids, np.concatenate(splits))
    return out


def _slice_rows(rows: dict, lo: int, hi: int, copy: bool = False) -> dict:
    out = {}
    for f, (ids, rs) in rows.items():
        split = rs[lo:hi + 1]
        part = ids[split[0]:split[-1]]
        out[f] = (part.copy() if copy else part, split - split[0])
    return out


def _where(job: _Job, sample: int) -> str:
    k = min(bisect.bisect_right(job.offsets, sample) - 1, len(job.pieces) - 1)
    return f"{job.pieces[k].path} row {sample - job.offsets[k]}"


def _collect(job: _Job, steps: range, batch_of) -> Any:
    """collect_stats over ``steps`` (``batch_of(step)`` gives each batch), errors located in the dataset."""
    from scwork.sharding.limits import collect_stats

    current = [steps.start]

    def batches():
        for step in steps:
            current[0] = step
            yield batch_of(step)

    B = job.batch_size
    try:
        return collect_stats(batches(), job.features, job.topology, stacking=job.plan, config=job.config,
                             on_out_of_vocabulary=job.on_oov, **_collect_kwargs())
    except OutOfVocabularyError as err:
        step = current[0]
        sample = None if err.sample is None else step * B + int(err.sample)
        where = "" if sample is None else f", dataset sample {sample} = {_where(job, sample)}"
        raise OutOfVocabularyError(f"step {step}{where}: {err}", feature=err.feature, sample=sample,
                                   id=err.id, vocab_size=err.vocab_size, count=err.count) from None
    except InputError as err:
        step = current[0]
        first = _where(job, step * B)
        raise ShardError(f"step {step} (from {first}): {err}", path=first.rsplit(" row ", 1)[0]) from None


def _finish(job: _Job, parts: list) -> tuple:
    """One Dataset from collect_stats results of consecutive steps, with its mergeable summary."""
    if len(parts) == 1:
        ds = parts[0]
    else:
        import xarray as xr

        configured = parts[0][list(_CONFIGURED_VARS)]
        ds = xr.concat([o.drop_vars(list(_CONFIGURED_VARS)) for o in parts], dim="step", data_vars="all",
                       coords="minimal", compat="override", join="exact")
        ds = ds.merge(configured)
        ds.attrs = dict(parts[0].attrs)
    summary = _summarize(ds)
    if job.per_step == "summary":    # keep the coordinates: the merge needs them
        ds = ds.drop_vars([v for v in ds.data_vars if v not in _SUMMARY_VARS + _CONFIGURED_VARS])
    return ds, summary


def _run_chunk(job: _Job, chunk: _Chunk, *partitions):
    """Read a chunk's rows; return ((per-step Dataset, summary) of its inner steps or None, fragments).

    ``fragments`` maps each step crossing the chunk's ends to the chunk's rows of that
    step (copied: fewer than ``batch_size`` samples), for :func:`_run_boundary`.
    """
    names = [f.name for f in job.features]
    data = {j: partitions[i] for i, j in enumerate(sorted({s[0] for s in chunk.segments
                                                           if job.pieces[s[0]].kind in ("frame", "bag")}))}
    parts = [_read_rows(job.pieces[k], data.get(k), start, stop, job.colmap) for k, start, stop in chunk.segments]
    rows = _concat_rows(parts, names)
    del parts, data
    a, b = chunk.sample_start, chunk.sample_stop
    fragments = {}
    for step in chunk.fragments:
        lo, hi = job.step_rows(step)
        fragments[step] = _slice_rows(rows, max(lo, a) - a, min(hi, b) - a, copy=True)
    if chunk.step_stop == chunk.step_start:
        return None, fragments

    def batch_of(step):
        lo, hi = job.step_rows(step)
        return _slice_rows(rows, lo - a, hi - a)

    short_last = chunk.step_stop == job.num_steps and job.used < job.num_steps * job.batch_size
    full_stop = chunk.step_stop - 1 if short_last else chunk.step_stop
    out = []
    for steps in (range(chunk.step_start, full_stop), range(full_stop, chunk.step_stop)):
        if len(steps):          # collect_stats needs one batch size: the kept short batch goes alone
            out.append(_collect(job, steps, batch_of))
    return _finish(job, out), fragments


def _run_boundary(job: _Job, step: int, *fragment_maps):
    """(per-step Dataset, summary) of one step assembled from the fragments of consecutive chunks."""
    names = [f.name for f in job.features]
    rows = _concat_rows([m[step] for m in fragment_maps], names)
    return _finish(job, [_collect(job, range(step, step + 1), lambda s: rows)])


def _summarize(ds) -> dict[str, np.ndarray]:
    """Small, exactly mergeable view of a block: per-step summaries, maxima and sums over its steps."""
    out = {name: ds[name].transpose("step", "stack").values for name in _SUMMARY_VARS}
    for name in ("max_ids_per_partition", "max_unique_ids_per_partition", "required_buffer_size_per_sc"):
        out["max:" + name] = ds[name].values.max(axis=0)
    for name in ("ids", "unique_ids", "input_ids", "naive_ids_per_partition", "out_of_vocabulary_ids"):
        out["sum:" + name] = ds[name].values.sum(axis=0)
    return out


def _take(pair, index):
    return pair[index]


def _empty_like(pair):
    ds = pair[0]
    return ds.isel(step=slice(0, 0))


def _var_values(pair, name):
    return pair[0][name].values


def _partition_length(part) -> int:
    return len(part)


# ======================================================================================
# planning
# ======================================================================================
def _check_int(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _column_map(features, columns) -> dict[str, str]:
    names = [f.name for f in features]
    if columns is None:
        return {n: n for n in names}
    if isinstance(columns, Mapping):
        unknown = sorted(set(columns) - set(names))
        if unknown:
            raise ConfigError(f"columns names unknown features {unknown}; features are {names}")
        out = {n: columns.get(n, n) for n in names}
    elif isinstance(columns, Sequence) and not isinstance(columns, str):
        if len(columns) != len(names):
            raise ConfigError(f"columns must give one column per feature ({len(names)}: {names}), got "
                              f"{len(columns)}")
        out = dict(zip(names, columns))
    else:
        raise ConfigError(f"columns must be a mapping feature -> column or a list (one per feature), got "
                          f"{type(columns).__name__}")
    for n, c in out.items():
        if not isinstance(c, str) or not c:
            raise ConfigError(f"columns[{n!r}] must be a non-empty string, got {c!r}")
    return out


def _dask_kind(source) -> str | None:
    module = type(source).__module__ or ""
    if not module.startswith("dask"):
        return None
    if hasattr(source, "to_delayed") and hasattr(source, "columns") and hasattr(source, "npartitions"):
        return "frame"
    if hasattr(source, "to_delayed") and hasattr(source, "npartitions") and hasattr(source, "map_partitions"):
        return "bag"
    return None


def _chunk_ends(pieces, offsets, used: int, target: int) -> list[int]:
    """Where chunks end: every ``target`` samples for NPZ (any row is reachable), else at the first
    row-group (Parquet) or partition (dask) boundary at least ``target`` samples after the chunk start,
    so that each row group or partition is read by exactly one chunk."""
    if all(p.kind == "npz" for p in pieces):
        return list(range(target, used, target)) + [used]
    units = set()
    for p, off in zip(pieces, offsets):
        starts = p.info if p.kind == "parquet" else (0, p.num_rows)
        units.update(off + s for s in starts)
    ends, start = [], 0
    for u in sorted(x for x in units if 0 < x < used):
        if u - start >= target:
            ends.append(u)
            start = u
    return ends + [used]


def _plan_chunks(job: _Job, target: int) -> list[_Chunk]:
    B, T, used, pieces, offsets = job.batch_size, job.num_steps, job.used, job.pieces, job.offsets
    chunks, a = [], 0
    for b in _chunk_ends(pieces, offsets, used, target):
        segments = []
        k = max(0, bisect.bisect_right(offsets, a) - 1)
        while k < len(pieces) and offsets[k] < b:
            lo, hi = max(a, offsets[k]), min(b, offsets[k] + pieces[k].num_rows)
            if hi > lo:
                segments.append((k, lo - offsets[k], hi - offsets[k]))
            k += 1
        inner_start = -(-a // B)
        inner_stop = T if b >= used else b // B
        inner_stop = max(inner_stop, inner_start)
        overlap = range(a // B, min(T, -(-b // B)))
        fragments = tuple(s for s in sorted({overlap[0], overlap[-1]}) if not inner_start <= s < inner_stop) \
            if len(overlap) else ()
        chunks.append(_Chunk(len(chunks), a, b, segments, inner_start, inner_stop, fragments))
        a = b
    return chunks


# ======================================================================================
# execution
# ======================================================================================
def _import_dask():
    try:
        import dask

        return dask
    except ImportError:
        return None


def _make_bar(total: int, progress, desc: str):
    from scwork._progress import progress_enabled

    state = progress_enabled(progress)
    if state is False or total < 1:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="chunk", disable=None if state is None else False,
                delay=1.0 if state is None else 0.0)


def _run_local(tasks, mode: str, num_workers: int | None, bar, chunk_keys: set):
    """Compute delayed ``tasks`` (or, without dask, ``(func, args)`` pairs) on the local machine."""
    dask = _import_dask()
    if mode == "pool":
        import concurrent.futures

        results = [None] * len(tasks)
        with concurrent.futures.ThreadPoolExecutor(num_workers or os.cpu_count() or 1) as pool:
            futures = {pool.submit(func, *args): i for i, (func, args) in enumerate(tasks)}
            try:
                for fut in concurrent.futures.as_completed(futures):
                    results[futures[fut]] = fut.result()
                    if bar is not None:
                        bar.update(1)
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
        return results
    from dask.callbacks import Callback

    class _Tick(Callback):
        def _posttask(self, key, result, dsk, state, worker_id):
            if bar is not None and key in chunk_keys:
                bar.update(1)

    options = {"scheduler": mode}
    if mode == "threads" and num_workers is not None:
        options["num_workers"] = num_workers
    with _Tick():
        return list(dask.compute(*tasks, **options))


def _run_distributed(client, tasks, bar):
    from distributed import as_completed

    futures = client.compute(tasks)
    try:
        for fut in as_completed(futures):
            if fut.status != "finished":
                fut.result()          # raises the task's exception, with its traceback
            if bar is not None:
                bar.update(1)
    except BaseException:
        client.cancel(futures)
        raise
    return futures


# ======================================================================================
# main entry point
# ======================================================================================
def stats_over_dataset(source: Any, features: Any, topology: Topology, *, batch_size: int,
                       drop_remainder: bool = True, stacking: Any = "auto",
                       config: SparsecoreConfig | None = None, stack_limits: Mapping[str, Any] | None = None,
                       columns: Mapping[str, str] | Sequence[str] | None = None, scheduler: Any = None,
                       client: Any = None, num_workers: int | None = None, chunk_rows: int | None = None,
                       progress: bool | None = None, tune: str | None = "max", percentile: float = 99.0,
                       on_out_of_vocabulary: str = "error", per_step: str = "full") -> DatasetStats:
    """Per-step limit statistics and tuned limits over a sharded dataset, with bounded memory.

    The same numbers as :func:`~scwork.sharding.collect_stats` over the dataset's
    batches, then :func:`~scwork.sharding.tune_limits` over all steps; see the module
    documentation (:mod:`scwork.sharding.dataset_stats`) for the batching across
    shards, the NPZ shard format, execution and memory.

    Parameters
    ----------
    source : path, glob pattern, list of paths, dask DataFrame or dask Bag
        Parquet (``.parquet``/``.pq``) or NPZ (``.npz``) shards -- a directory (its
        shards in name order), a glob (matches in name order) or a list (in that
        order) -- or a dask DataFrame (one row per sample) or Bag (one record per
        sample).
    features : sequence or mapping of FeatureSpec
        As for :func:`~scwork.sharding.compute_stats`; feature ``f`` reads column
        ``f`` unless ``columns`` says otherwise.
    topology : scwork.Topology
    batch_size : int
        Global batch ``B`` (samples per step), a multiple of ``G * S``.
    drop_remainder : bool, default True
        True: drop a final batch shorter than ``batch_size``
        (:attr:`DatasetStats.dropped_samples`); False: keep it as the last step
        (:attr:`DatasetStats.last_batch_size`; it must be a multiple of ``G * S``).
    stacking, config, stack_limits
        As for :func:`~scwork.sharding.collect_stats`; the plan is made once with
        ``batch_size``.
    columns : mapping or sequence of str, optional
        ``{feature: column}`` (features not named read their own name) or one column
        per feature, in order. NPZ columns are the ``<column>_ids`` /
        ``<column>_row_splits`` members.
    scheduler : str or dask.distributed.Client, optional
        ``None``/``"threads"`` (default: dask's local threaded scheduler), ``"sync"``
        (one task at a time, in this thread), or a scheduler address such as
        ``"tcp://host:8786"`` (connects a ``dask.distributed.Client``, closed by
        :meth:`DatasetStats.close`).
    client : dask.distributed.Client, optional
        Run on this cluster (not together with ``scheduler``).
    num_workers : int, optional
        Threads of the local scheduler (default: one per core).
    chunk_rows : int, optional
        Samples per task, rounded down to a multiple of ``batch_size`` (at least one
        batch); Parquet and dask chunks extend to the next row-group (partition)
        boundary. Default: about :data:`DEFAULT_CHUNK_IDS` ids per task, and at least
        four tasks per worker when there are enough steps.
    progress : bool or None
        Progress bar: True, False, or None (automatic; ``SCWORK_PROGRESS=0`` hides it).
    tune : {"max", "percentile"} or None, default "max"
        Method of :func:`~scwork.sharding.tune_limits` over all steps; None skips tuning.
    percentile : float, default 99.0
        For ``tune="percentile"``.
    on_out_of_vocabulary : {"error", "drop"}
        As for :func:`~scwork.sharding.compute_stats`.
    per_step : {"full", "summary"}, default "full"
        ``"summary"`` keeps only the ``(step, stack)`` summaries of every step (and
        the merged statistics), for runs whose per-partition statistics would not fit.

    Returns
    -------
    DatasetStats
        ``step_stats`` (per step, dask-backed after a distributed run), ``merged``
        (maxima and sums over all steps), ``tuned`` (TunedLimits), and the counts.

    Raises
    ------
    ShardError
        A shard cannot be read or does not match the schema (names the file and column).
    InputError
        No shard or no sample, fewer samples than one batch with ``drop_remainder=True``,
        a batch size or kept remainder that does not divide over ``G * S``.
    OutOfVocabularyError
        An id ``>= vocab_size`` (the message gives the step, the dataset sample and
        the file and row).
    ConfigError
        Bad arguments.

    Notes
    -----
    Memory per worker is O(``(chunk_rows + one row group or partition) x valency x
    features x 8 B``) times a small factor (about 3 for reading plus 6 per id of the
    batch in the engine); the per-step statistics are O(``steps x stacks x G x S x
    P``) int64 (on the workers after a distributed run). A failed task cancels the
    run: nothing is returned half-done.

    Examples
    --------
    NPZ shards of 50 and 70 samples, batches of 16 crossing the shard boundary:

    >>> import os, tempfile, numpy as np, scwork
    >>> from scwork.sharding import FeatureSpec, TableSpec, collect_stats
    >>> from scwork.sharding.dataset_stats import stats_over_dataset, write_npz_shard
    >>> data = scwork.datasets.synthetic(120, vocab_size=500, seed=4).step(0)["f0"]
    >>> ids, rs = data
    >>> folder = tempfile.mkdtemp()
    >>> write_npz_shard(os.path.join(folder, "a.npz"), {"f0": (ids[:rs[50]], rs[:51])})
    >>> write_npz_shard(os.path.join(folder, "b.npz"), {"f0": (ids[rs[50]:], rs[50:] - rs[50])})
    >>> feats = [FeatureSpec("f0", TableSpec("t", 500, 8))]
    >>> res = stats_over_dataset(folder, feats, scwork.Topology(2, 2), batch_size=16, progress=False,
    ...                          drop_remainder=False, chunk_rows=32)
    >>> res.num_steps, res.last_batch_size, res.num_chunks
    (8, 8, 4)
    >>> batches = [{"f0": (ids[rs[i]:rs[min(i + 16, 120)]], rs[i:min(i + 16, 120) + 1] - rs[i])}
    ...            for i in range(0, 112, 16)]
    >>> ref = collect_stats(batches, feats, scwork.Topology(2, 2))
    >>> bool((res.step_stats["ids"][:7] == ref["ids"]).all())
    True
    >>> int(res.merged["total_input_ids"].sum()) == int(rs[-1]) == res.num_ids
    True
    """
    from scwork.sharding.stacking import normalize_features, plan_stacking

    # ---- arguments -------------------------------------------------------------------
    if not isinstance(topology, Topology):
        raise ConfigError(f"topology must be a scwork.Topology, got {type(topology).__name__}")
    B = _check_int(batch_size, "batch_size")
    G, S = topology.num_devices, topology.sparsecores_per_device
    if S < 1:
        raise ConfigError(f"topology {topology} has no SparseCore")
    if B % (G * S):
        raise InputError(f"batch_size {B} does not divide over {G} devices x {S} SparseCores = {G * S} slices; "
                         f"use a multiple of {G * S}")
    if not isinstance(drop_remainder, bool):
        raise ConfigError(f"drop_remainder must be True or False, got {drop_remainder!r}")
    config = SparsecoreConfig() if config is None else config
    if not isinstance(config, SparsecoreConfig):
        raise ConfigError(f"config must be a SparsecoreConfig, got {type(config).__name__}")
    if tune is not None and tune not in _TUNE:
        raise ConfigError(f"tune must be 'max', 'percentile' or None, got {tune!r}")
    if isinstance(percentile, bool) or not isinstance(percentile, (numbers.Real, np.number)) \
            or not 0 < percentile <= 100:
        raise ConfigError(f"percentile must be a number in (0, 100], got {percentile!r}")
    if on_out_of_vocabulary not in ("error", "drop"):
        raise ConfigError(f"on_out_of_vocabulary must be 'error' or 'drop', got {on_out_of_vocabulary!r}")
    if per_step not in _PER_STEP:
        raise ConfigError(f"per_step must be 'full' or 'summary', got {per_step!r}")
    if chunk_rows is not None:
        chunk_rows = _check_int(chunk_rows, "chunk_rows")
    if num_workers is not None:
        num_workers = _check_int(num_workers, "num_workers")
    if progress is not None and not isinstance(progress, bool):
        raise ConfigError(f"progress must be True, False or None, got {progress!r}")
    features = normalize_features(features)
    colmap = _column_map(features, columns)
    plan = plan_stacking(features, topology, stacking, batch_size=B, config=config, stack_limits=stack_limits)

    # ---- where to run ------------------------------------------------------------------
    owns_client = False
    if scheduler is not None and not isinstance(scheduler, str):
        if client is not None:
            raise ConfigError("give either scheduler= or client=, not both")
        client, scheduler = scheduler, None
    if client is not None and scheduler is not None:
        raise ConfigError("give either scheduler= or client=, not both")
    if isinstance(scheduler, str) and "://" in scheduler:
        try:
            from distributed import Client
        except ImportError:
            raise ConfigError(f"scheduler={scheduler!r} needs dask.distributed: pip install distributed") from None
        try:
            client = Client(scheduler)
        except (OSError, TimeoutError) as exc:
            raise ConfigError(f"cannot connect to the dask scheduler at {scheduler!r} ({exc})") from None
        owns_client = True
        scheduler = None
    try:
        return _stats_over_dataset(source, features, topology, plan, config, colmap, B, drop_remainder,
                                   scheduler, client, owns_client, num_workers, chunk_rows, progress, tune,
                                   percentile, on_out_of_vocabulary, per_step)
    except BaseException:
        if owns_client:
            client.close()
        raise


def _stats_over_dataset(source, features, topology, plan, config, colmap, B, drop_remainder, scheduler, client,
                        owns_client, num_workers, chunk_rows, progress, tune, percentile, on_oov, per_step):
    dask = _import_dask()
    if client is not None:
        mode = "distributed"
        if not hasattr(client, "compute") or not hasattr(client, "nthreads"):
            raise ConfigError(f"client must be a dask.distributed.Client, got {type(client).__name__}")
    else:
        name = "threads" if scheduler is None else scheduler
        if name not in _LOCAL_SCHEDULERS:
            raise ConfigError(f"scheduler must be 'threads', 'sync', a scheduler address 'tcp://host:port' or a "
                              f"dask.distributed.Client, got {scheduler!r}")
        mode = _LOCAL_SCHEDULERS[name]
        if dask is None:
            mode = "pool" if mode == "threads" else mode
    workers = (sum(client.nthreads().values()) or 1) if mode == "distributed" else \
        (1 if mode == "sync" else num_workers or os.cpu_count() or 1)

    # ---- the shards ------------------------------------------------------------------------
    kind = _dask_kind(source)
    partitions = None
    if kind is not None:
        if dask is None:  # pragma: no cover - a dask collection implies dask
            raise ConfigError("dask collections need dask installed")
        pieces, partitions = _scan_collection(source, kind, colmap, mode, client, num_workers)
    else:
        files = _resolve_files(source)
        kinds = {_kind_of(f) for f in files}
        if None in kinds:
            bad = next(f for f in files if _kind_of(f) is None)
            raise InputError(f"{bad}: not a shard: names must end with {PARQUET_SUFFIXES + NPZ_SUFFIXES}")
        if len(kinds) > 1:
            raise InputError(f"{os.fspath(source) if isinstance(source, (str, os.PathLike)) else 'source'}: "
                             "mixes Parquet and NPZ shards; keep one format")
        fmt = kinds.pop()
        if fmt == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise ConfigError("Parquet shards need pyarrow: pip install 'scwork[data]'") from None
        scan = _scan_parquet if fmt == "parquet" else _scan_npz
        if len(files) > 4:   # footers and headers: small reads, latency-bound on network file systems
            import concurrent.futures

            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                pieces = list(pool.map(lambda f: scan(f, colmap), files))
        else:
            pieces = [scan(f, colmap) for f in files]
    offsets = [0]
    for p in pieces:
        offsets.append(offsets[-1] + p.num_rows)
    N = offsets[-1]
    shown = tuple(p.path for p in pieces)
    if N == 0:
        raise InputError(f"no samples: the {len(pieces)} shard(s) hold 0 rows")
    full, rem = divmod(N, B)
    GS = topology.num_devices * topology.sparsecores_per_device
    if drop_remainder or rem == 0:
        if full == 0:
            raise InputError(f"the dataset has {N} samples, fewer than one batch of {B}; lower batch_size or pass "
                             "drop_remainder=False to keep the short batch")
        T, used, dropped, last = full, full * B, rem, B
    else:
        if rem % GS:
            raise InputError(f"the final batch would hold {rem} samples ({N} samples, batch_size {B}), which does "
                             f"not divide over {GS} slices ({topology.num_devices} devices x "
                             f"{topology.sparsecores_per_device} SparseCores); pass drop_remainder=True")
        T, used, dropped, last = full + 1, N, 0, rem
    if chunk_rows is not None:
        target = max(1, chunk_rows // B) * B
    else:
        ids_per_row = sum(p.num_ids for p in pieces) / N
        by_size = max(1, int(DEFAULT_CHUNK_IDS // max(1.0, ids_per_row * B)))
        target = max(1, min(by_size, math.ceil(T / (4 * workers)))) * B
    job = _Job(features=features, topology=topology, plan=plan, config=config, colmap=colmap, on_oov=on_oov,
               batch_size=B, per_step=per_step, pieces=pieces, offsets=offsets, num_steps=T, used=used)
    chunks = _plan_chunks(job, target)
    boundaries = {}       # step -> chunks holding a fragment of it, in order
    for c in chunks:
        for step in c.fragments:
            boundaries.setdefault(step, []).append(c.index)

    # ---- run: blocks of consecutive steps, each one (per-step Dataset, summary) -------------
    # A block is the inner steps of a chunk, or one step assembled from the chunks' fragments.
    spans = sorted([(c.step_start, c.step_stop, "chunk", c.index) for c in chunks if c.step_stop > c.step_start]
                   + [(s, s + 1, "boundary", s) for s in boundaries])
    bar = _make_bar(len(spans) if mode == "distributed" else len(chunks) + len(boundaries), progress,
                    "scwork stats over dataset")
    try:
        if mode == "pool":
            out = _run_local([(_run_chunk, (job, c)) for c in chunks], mode, num_workers, bar, set())
            done = _run_local([(_run_boundary, (job, s, *[out[k][1] for k in ks])) for s, ks in boundaries.items()],
                              mode, num_workers, bar, set())
            by_boundary = dict(zip(boundaries, done))
            results = [out[i][0] if kind == "chunk" else by_boundary[i] for _, _, kind, i in spans]
            del out, done, by_boundary
        else:
            token = uuid.uuid4().hex[:12]
            # One graph node for the shared job: shipped once per worker, not once per task.
            job_node = dask.delayed(job, pure=False, traverse=False, name=f"scwork-dataset-job-{token}")
            keys, pairs, frags, nodes = set(), {}, {}, {}
            for c in chunks:
                key = f"scwork-dataset-chunk-{token}-{c.index}"
                keys.add(key)
                parts = [partitions[k] for k in sorted({s[0] for s in c.segments})] if partitions else []
                node = dask.delayed(_run_chunk, pure=False)(job_node, c, *parts, dask_key_name=key)
                pairs[c.index] = dask.delayed(_take, pure=False)(node, 0, dask_key_name=key + "-stats")
                frags[c.index] = dask.delayed(_take, pure=False)(node, 1, dask_key_name=key + "-fragments")
            for s, ks in boundaries.items():
                key = f"scwork-dataset-boundary-{token}-{s}"
                keys.add(key)
                nodes[s] = dask.delayed(_run_boundary, pure=False)(job_node, s, *[frags[k] for k in ks],
                                                                   dask_key_name=key)
            tasks = [pairs[i] if kind == "chunk" else nodes[i] for _, _, kind, i in spans]
            if mode == "distributed":
                results = _run_distributed(client, tasks, bar)
            else:
                results = _run_local(tasks, mode, num_workers, bar, keys)
    finally:
        if bar is not None:
            bar.close()

    # ---- merge ---------------------------------------------------------------------------
    if mode == "distributed":
        summaries = client.gather([client.submit(_take, f, 1, pure=False) for f in results])
        if per_step == "full":
            template = client.submit(_empty_like, results[0], pure=False).result()
            step_stats = _dask_backed(template, results, [(s0, s1) for s0, s1, _, _ in spans], summaries)
        else:
            step_stats = _concat_local(client.gather([client.submit(_take, f, 0, pure=False) for f in results]))
    else:
        summaries = [r[1] for r in results]
        step_stats = _concat_local([r[0] for r in results])
    merged = _merge(summaries, step_stats)
    step_stats.attrs.update({
        "num_steps": T,
        "source": "scwork.sharding.dataset_stats.stats_over_dataset (collect_stats per chunk, concatenated)",
        "last_batch_size": last,
        "dropped_samples": dropped,
        "num_shards": len(pieces),
        "per_step": per_step,
    })
    tuned = None
    if tune is not None:
        from scwork.sharding.limits import tune_limits

        tuned = tune_limits(step_stats[list(_SUMMARY_VARS)], method=tune, percentile=percentile)
    num_ids = int(merged["total_input_ids"].values.sum())
    return DatasetStats(step_stats, merged, tuned, plan, B, T, used, dropped, last, num_ids, shown, len(chunks),
                        mode, client if mode == "distributed" else None, owns_client)


def _scan_collection(source, kind, colmap, mode, client, num_workers):
    import dask

    cols = list(dict.fromkeys(colmap.values()))
    if kind == "frame":
        missing = [c for c in cols if c not in source.columns]
        if missing:
            raise ShardError(f"the dask DataFrame has no column(s) {missing}; it has {list(source.columns)}",
                             column=missing[0])
        for c in cols:
            dtype = source.dtypes[c]
            if getattr(dtype, "kind", "O") in "fbcmMUS" or str(dtype).startswith("string"):
                raise ShardError(f"dask DataFrame column {c!r} has dtype {dtype}; expected lists of integer ids "
                                 "or integer ids (dask turns object columns into strings unless "
                                 "dask.config 'dataframe.convert-string' is False: give list columns as "
                                 "pandas.ArrowDtype(pyarrow.list_(pyarrow.int64())))", column=c)
        source = source[cols]
    parts = source.to_delayed()
    lengths = [dask.delayed(_partition_length, pure=False)(p) for p in parts]
    if mode == "distributed":
        counts = client.gather(client.compute(lengths))
    else:
        options = {"scheduler": mode if mode != "pool" else "threads"}
        if options["scheduler"] == "threads" and num_workers is not None:
            options["num_workers"] = num_workers
        counts = dask.compute(*lengths, **options)
    pieces = [_Piece(kind, f"partition {i}", n, 0, None, i) for i, n in enumerate(counts)]
    if not pieces:
        raise InputError("the dask collection has no partitions")
    return pieces, parts


def _concat_local(datasets):
    import xarray as xr

    first = datasets[0]
    configured = first[[v for v in _CONFIGURED_VARS if v in first]]
    if len(datasets) == 1:
        out = first.copy()
    else:
        out = xr.concat([d.drop_vars(list(_CONFIGURED_VARS)) for d in datasets], dim="step", data_vars="all",
                        coords="minimal", compat="override", join="exact")
        out = out.merge(configured)
    out = out.assign_coords(step=("step", np.arange(out.sizes["step"]), {"long_name": "step index"}))
    out.attrs = dict(first.attrs)
    return out


def _dask_backed(template, futures, spans, summaries):
    """Per-step Dataset whose large variables are dask arrays over the block results on the cluster."""
    import dask
    import dask.array as da
    import xarray as xr

    T = sum(s1 - s0 for s0, s1 in spans)
    data = {}
    for name, var in template.data_vars.items():
        if name in _SUMMARY_VARS:
            values = np.concatenate([s[name] for s in summaries], axis=0)
            data[name] = xr.Variable(("step", "stack"), values, var.attrs).transpose(*var.dims)
        elif "step" in var.dims:
            if var.dims[0] != "step":  # pragma: no cover - collect_stats puts step first
                raise AssertionError(f"{name}: step is not the first dim")
            blocks = [da.from_delayed(dask.delayed(_var_values, pure=True)(f, name),
                                      shape=(s1 - s0,) + var.shape[1:], dtype=var.dtype)
                      for f, (s0, s1) in zip(futures, spans)]
            data[name] = xr.Variable(var.dims, da.concatenate(blocks, axis=0), var.attrs)
        else:
            data[name] = var
    coords = {k: v for k, v in template.coords.items() if "step" not in v.dims}
    out = xr.Dataset(data, coords=coords, attrs=dict(template.attrs))
    out = out.assign_coords(step=("step", np.arange(T), {"long_name": "step index"}))
    return out


def _merge(summaries, step_stats):
    """Exact merge of the chunks' maxima and sums into one Dataset (stack, device, sc, partition)."""
    import xarray as xr

    def reduce(key, fn):
        return fn(np.stack([s[key] for s in summaries]), axis=0)

    coords = {k: step_stats.coords[k] for k in ("stack", "device", "sc", "partition")}
    SDP, SDS, SDSP = ("stack", "device", "partition"), ("stack", "device", "sc"), \
        ("stack", "device", "sc", "partition")
    T = int(sum(s[_SUMMARY_VARS[0]].shape[0] for s in summaries))

    def var(dims, values, long_name, units):
        return (dims, values, {"long_name": long_name, "units": units})

    ds = xr.Dataset(
        {
            "max_ids_per_partition": var(SDP, reduce("max:max_ids_per_partition", np.max),
                                         "max over steps and source SparseCores of ids", "ids"),
            "max_unique_ids_per_partition": var(SDP, reduce("max:max_unique_ids_per_partition", np.max),
                                                "max over steps and source SparseCores of distinct ids", "ids"),
            "required_buffer_size_per_sc": var(SDS, reduce("max:required_buffer_size_per_sc", np.max),
                                               "max over steps of sum over partitions of round_up(ids, 8)",
                                               "CSR entries"),
            "total_ids": var(SDSP, reduce("sum:ids", np.sum), "sum over steps of ids (after per-sample dedup)",
                             "ids"),
            "total_unique_ids": var(SDSP, reduce("sum:unique_ids", np.sum),
                                    "sum over steps of the distinct ids of each step", "ids"),
            "total_input_ids": var(SDS, reduce("sum:input_ids", np.sum), "sum over steps of the raw ids of the "
                                   "slice (before dedup)", "ids"),
            "total_naive_ids_per_partition": var(("stack", "partition"), reduce("sum:naive_ids_per_partition",
                                                                                np.sum),
                                                 "sum over steps of the whole-batch ids per partition", "ids"),
            "total_out_of_vocabulary_ids": var("stack", reduce("sum:out_of_vocabulary_ids", np.sum),
                                               "ids >= vocab_size dropped (on_out_of_vocabulary='drop')", "ids"),
        },
        coords=coords,
        attrs={k: v for k, v in step_stats.attrs.items() if k not in ("source", "num_steps")},
    )
    ds.attrs["merged_steps"] = T
    return ds


# ======================================================================================
# NPZ writer
# ======================================================================================
def write_npz_shard(path: str | os.PathLike, data: Mapping[str, Any], *, compressed: bool = False) -> None:
    """Write one NPZ shard: ``<name>_ids`` and ``<name>_row_splits`` (int64) per feature.

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

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "shard.npz")
    >>> write_npz_shard(path, {"f": ([5, 6, 7], [0, 2, 2, 3])})
    >>> sorted(np.load(path).files), np.load(path)["f_row_splits"].tolist()
    (['f_ids', 'f_row_splits'], [0, 2, 2, 3])
    """
    from scwork.sharding.batch import FeatureBatch

    batch = data if isinstance(data, FeatureBatch) else FeatureBatch(data)
    arrays = {}
    for name in batch:
        ids, rs = batch[name]
        arrays[f"{name}_ids"] = np.asarray(ids, np.int64)
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
