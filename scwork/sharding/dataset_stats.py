"""Limit statistics over datasets larger than memory, locally or on a Dask cluster.

The statistics are those of [jte] preprocess_sparse_dense_matmul_input.

:func:`stats_over_dataset` computes what :func:`~scwork.sharding.collect_stats`
computes over in-memory batches -- the per-step statistics of [jte] preprocess_sparse_dense_matmul_input, the
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
- **Parquet shards** (``.parquet``, ``.pq``) in one of two layouts. *Flat CSR*
  (:func:`write_parquet_shard`, and :func:`scwork.datasets.write_synthetic_parquet`
  by default): one not-null integer column ``csr`` that holds, for each feature in
  turn and in row groups of its own, its ``num_rows + 1`` row splits and then its ids,
  with a key-value note ``scwork.flat_csr`` (JSON: ``{"version": 1, "column":
  "csr", "num_rows": N, "features": [[name, number of ids], ...]}``) naming the
  features in their stored order; a flat shard is read whole, feature by feature.
  *List columns* (any other Parquet file): one row per sample; a feature's column
  is ``list<integer>`` (or ``large_list``/``fixed_size_list``; a null list is a
  sample without ids), or a plain integer column (one id per sample, null: none);
  only the row groups a chunk needs are read.
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

Which layouts read fastest: every valid layout above reads to the same statistics;
what differs is the CPU time of the read, which on one core can take as long as the
engine. Parquet list columns make the reader rebuild the list offsets from one
repetition and one definition level per id; the flat CSR layout has no levels. On one
core, with pyarrow 26 and shards of 16384 samples x 26 features x Poisson(20) ids
(8.5 M ids, zstd, delta encoding, int32 ids), one shard decodes in 23-24 ms of CPU as
flat CSR against 51-53 ms as ``list<item: int32 not null> not null`` in version 2
pages (the fastest list layout; ``write_synthetic_parquet(layout="lists")``) and 69-72
ms as nullable ``list<int64>`` in version 1 pages; ``stats_over_dataset`` over 8 such
shards then reaches about 58% of the throughput per core of ``collect_stats`` over the
same batches in memory on the flat shards, 38-46% on the fastest list columns and
29-31% on the nullable ``list<int64>`` ones. Uncompressed NPZ shards
(:func:`write_npz_shard`: the ids and row splits stored flat, read by seeking) reach
about 71-77% with int32 ids, at 1.5 times the bytes on disk of the Parquet shards
(4.4 against 2.9 B per id). The ids stay in their stored width until the one copy
into the engine's batch, so int32 ids (where the vocabulary fits) halve what is
decoded and copied.

``source`` is a directory (its ``*.parquet``, ``*.pq`` or ``*.npz`` files, in name
order, not recursive), a glob pattern (matches in name order), a list of files (in
the given order), or one of the dask collections. Parquet and NPZ are not mixed.

Execution and memory
--------------------
The samples are cut into chunks of about ``chunk_rows`` samples (rounded down to a
multiple of ``batch_size``; by default about :data:`DEFAULT_CHUNK_IDS` ids, and at
least four chunks per worker when the data allows). NPZ chunks are exactly that
many whole batches. Flat CSR Parquet shards are not cut: their chunks end at a
shard's end. List-column Parquet and dask chunks end at the first row-group
(partition) boundary at least ``chunk_rows`` samples after their start, so that
each row group (partition) is decoded by exactly one task; a chunk then holds its
inner steps plus *fragments* of the steps crossing its ends (fewer than
``batch_size`` samples each). One task per chunk reads its rows, runs the numba
engine batch by batch over its inner steps and hands its fragments on; one small
task per crossing step assembles the fragments (in order) into that batch. By
default the tasks
run on a local thread pool (``scheduler="threads"``, ``num_workers`` threads,
default one per core; the numba kernels and the Parquet decoder release the GIL;
the partitions of a dask collection are computed by dask's local threaded scheduler),
and the engine inside each task runs on the cores the tasks running at once
share (``num_threads``, default ``cores // min(workers, chunks)``);
``scheduler="sync"`` runs them one by one in the calling thread. Shards on disk need
no dask on the local schedulers.
``client=`` (a ``dask.distributed.Client``) or ``scheduler="tcp://host:port"``
(connects a Client, kept on :attr:`DatasetStats.client` and closed by
:meth:`DatasetStats.close`) runs them on a ``dask.distributed`` cluster; the files
must then be readable at the same path by the caller (which reads the footers and
headers to plan the chunks) and by every worker.

Memory per worker: one chunk in flight, whose rows are at most ``chunk_rows`` plus
one row group (partition), or one whole shard for flat CSR Parquet shards; reading
them costs about ``2 x 8 B`` per id (Parquet:
the decoded column, read in place in its stored integer width, and the step's batch,
8 B per id in one of two buffers per worker thread that are reused from step to step
and freed when the run ends), and the one batch inside the engine ``~6 x 8 B`` per id:
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

import math
import numbers
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scwork.errors import ConfigError, InputError, ShardError
from scwork.hardware.topology import Topology
from scwork.sharding._dataset_chunks import (
    _check_int,
    _column_map,
    _dask_kind,
    _empty_like,
    _Job,
    _plan_chunks,
    _release_step_buffers,
    _run_boundary,
    _run_chunk,
    _take,
)
from scwork.sharding._dataset_exec import (
    _LOCAL_SCHEDULERS,
    _concat_local,
    _dask_backed,
    _import_dask,
    _make_bar,
    _merge,
    _run_distributed,
    _run_here,
    _run_local,
    _scan_collection,
)
from scwork.sharding.dataset_result import _PER_STEP, _SUMMARY_VARS, _TUNE, DatasetStats
from scwork.sharding.shards import (
    DEFAULT_CHUNK_IDS,
    NPZ_SUFFIXES,
    PARQUET_SUFFIXES,
    _kind_of,
    _resolve_files,
    _scan_npz,
    _scan_parquet,
    write_npz_shard,
    write_parquet_shard,
)
from scwork.sharding.specs import SparsecoreConfig

__all__ = [
    "stats_over_dataset",
    "DatasetStats",
    "ShardError",
    "write_npz_shard",
    "write_parquet_shard",
    "DEFAULT_CHUNK_IDS",
    "PARQUET_SUFFIXES",
    "NPZ_SUFFIXES",
]


# ======================================================================================
# main entry point
# ======================================================================================
def stats_over_dataset(source: Any, features: Any, topology: Topology, *, batch_size: int,
                       drop_remainder: bool = True, stacking: Any = "auto",
                       config: SparsecoreConfig | None = None, stack_limits: Mapping[str, Any] | None = None,
                       columns: Mapping[str, str] | Sequence[str] | None = None, scheduler: Any = None,
                       client: Any = None, num_workers: int | None = None, chunk_rows: int | None = None,
                       progress: bool | None = None, tune: str | None = "max", percentile: float = 99.0,
                       on_out_of_vocabulary: str = "error", per_step: str = "full",
                       num_threads: int | None = None) -> DatasetStats:
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
        ``None``/``"threads"`` (default: a local thread pool; dask's local threaded
        scheduler for a dask collection), ``"sync"``
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
    num_threads : int, optional
        Threads of the engine inside each chunk task (``num_threads`` of
        :func:`~scwork.sharding.collect_stats`). Default: on the local schedulers,
        the cores shared by the chunk tasks that run at once (``cores //
        min(workers, chunks)``, at least 1), so that the readers and the engines
        together use every core once; on a distributed cluster, per worker, its
        host's cores divided by the threads of all workers on that host (the
        engine's default, every core, where the workers cannot be asked). A chunk
        with more than one thread also decodes its Parquet columns on pyarrow's
        threads.

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
    if num_threads is not None:
        num_threads = _check_int(num_threads, "num_threads")
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
                                   percentile, on_out_of_vocabulary, per_step, num_threads)
    except BaseException:
        if owns_client:
            client.close()
        raise


def _stats_over_dataset(source, features, topology, plan, config, colmap, B, drop_remainder, scheduler, client,
                        owns_client, num_workers, chunk_rows, progress, tune, percentile, on_oov, per_step,
                        num_threads=None):
    dask = _import_dask()
    mode, workers = _execution_mode(dask, scheduler, client, num_workers)
    pieces, partitions = _scan_shards(source, colmap, dask, mode, client, num_workers)
    offsets = [0]
    for p in pieces:
        offsets.append(offsets[-1] + p.num_rows)
    N = offsets[-1]
    shown = tuple(p.path for p in pieces)
    if N == 0:
        raise InputError(f"no samples: the {len(pieces)} shard(s) hold 0 rows")
    T, used, dropped, last = _step_counts(N, B, topology, drop_remainder)
    if chunk_rows is not None:
        target = max(1, chunk_rows // B) * B
    else:
        ids_per_row = sum(p.num_ids for p in pieces) / N
        by_size = max(1, int(DEFAULT_CHUNK_IDS // max(1.0, ids_per_row * B)))
        target = max(1, min(by_size, math.ceil(T / (4 * workers)))) * B
    job = _Job(features=features, topology=topology, plan=plan, config=config, colmap=colmap, on_oov=on_oov,
               batch_size=B, per_step=per_step, pieces=pieces, offsets=offsets, num_steps=T, used=used,
               engine_threads=None, recycle=False)
    chunks = _plan_chunks(job, target)
    job.engine_threads = num_threads or _engine_threads(mode, workers, len(chunks), client)
    # Recycled step buffers (see _dataset_chunks._step_buffers) only in this process, where
    # they are released when the run ends; a distributed worker would keep them.
    job.recycle = mode != "distributed"
    boundaries = {}       # step -> chunks holding a fragment of it, in order
    for c in chunks:
        for step in c.fragments:
            boundaries.setdefault(step, []).append(c.index)
    # A block is the inner steps of a chunk, or one step assembled from the chunks' fragments.
    spans = sorted([(c.step_start, c.step_stop, "chunk", c.index) for c in chunks if c.step_stop > c.step_start]
                   + [(s, s + 1, "boundary", s) for s in boundaries])
    try:
        results = _run_blocks(dask, job, chunks, boundaries, spans, partitions, mode, client, num_workers,
                              progress)
    finally:
        _release_step_buffers()
    summaries, step_stats = _gathered(results, spans, mode, client, per_step)
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


def _execution_mode(dask, scheduler, client, num_workers) -> tuple[str, int]:
    """Where the chunk tasks run and on how many workers.

    ``distributed`` (a client), a local dask scheduler (``threads``, ``sync``...), or
    ``pool`` (threads without dask).
    """
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
    return mode, workers


def _engine_threads(mode: str, workers: int, num_chunks: int, client=None) -> int | dict | None:
    """Threads of the engine inside each chunk task: the cores shared by the chunks that run at once.

    ``min(workers, chunks)`` chunk tasks run together on the local scheduler, each
    reading and then running the engine; an engine on every core in each of them
    would put ``workers x cores`` threads on the cores, each engine call paying for
    threads it cannot use. On a cluster the same holds per host: a worker's chunks get
    its host's cores divided by the threads of all workers on that host (a
    ``{worker address: threads}`` map the tasks look their worker up in; None, the
    engine's default, where the workers cannot be asked).
    """
    from scwork.sharding._threads import available_cores

    if mode != "distributed":
        return max(1, available_cores() // max(1, min(workers, num_chunks)))
    try:
        info = client.scheduler_info()["workers"]
        cores = client.run(available_cores)
    except Exception:  # noqa: BLE001 - a client that cannot say: the engine's default
        return None
    per_host: dict[str, int] = {}
    for w in info.values():
        per_host[w["host"]] = per_host.get(w["host"], 0) + int(w["nthreads"])
    return {addr: max(1, int(cores[addr]) // max(1, per_host[w["host"]])) for addr, w in info.items()
            if addr in cores}


def _scan_shards(source, colmap, dask, mode, client, num_workers):
    """Every shard's metadata (rows, ids) in order, and the dask partitions of a dask collection (else None)."""
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
    return pieces, partitions


def _step_counts(N: int, B: int, topology, drop_remainder: bool) -> tuple[int, int, int, int]:
    """``(steps, samples used, samples dropped, size of the last batch)`` for ``N`` samples in batches of ``B``."""
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
    return T, used, dropped, last


def _run_blocks(dask, job, chunks, boundaries, spans, partitions, mode, client, num_workers, progress) -> list:
    """Run every block of consecutive steps; one (per-step Dataset, summary) per span, in span order."""
    bar = _make_bar(len(spans) if mode == "distributed" else len(chunks) + len(boundaries), progress,
                    "scwork stats over dataset")
    try:
        if mode != "distributed" and not partitions:
            # Shards on disk, run here: no dask graph (with its scheduler, some 6 ms a call:
            # 1% of a standard run of 8 shards on one core, serial whatever the cores; and
            # "sync" needs no dask)
            out, by_boundary = _run_here(job, chunks, boundaries, mode, num_workers, bar, _run_chunk, _run_boundary)
            results = [out[i] if kind == "chunk" else by_boundary[i] for _, _, kind, i in spans]
            del out, by_boundary
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
    return results


def _gathered(results, spans, mode, client, per_step):
    """The blocks' summaries and their per-step statistics, concatenated (dask-backed when distributed)."""
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
    return summaries, step_stats
