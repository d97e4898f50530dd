"""Batching across shards: a dataset cut into chunks of whole steps, each a picklable task.

A step may span shards; each task runs ``collect_stats`` on its rows.

The tasks are module-level functions of plain data so that dask.distributed workers can run them.
"""

from __future__ import annotations

import bisect
import functools
import inspect
import numbers
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scwork._rounding import ceil_div

from scwork.errors import ConfigError, InputError, OutOfVocabularyError, ShardError
from scwork.sharding import _profile
from scwork.sharding.dataset_result import _CONFIGURED_VARS, _SUMMARY_VARS
from scwork.sharding.shards import _read_rows

__all__ = []


# ======================================================================================
# chunk tasks (module-level and picklable: they run on dask.distributed workers)
# ======================================================================================
class _Job:
    """What every task shares: features, topology, plan, config, columns, the pieces."""

    __slots__ = ("features", "topology", "plan", "config", "colmap", "on_oov", "batch_size", "per_step",
                 "pieces", "offsets", "num_steps", "used", "engine_threads", "recycle")

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


#: Per thread, the int64 buffers its step batches were built in, as [ids, row splits] pairs (see
#: _step_buffers); emptied by _release_step_buffers at the end of every local run.
_STEP_BUFFERS: dict[int, list[list[np.ndarray]]] = {}
_STEP_BUFFERS_LOCK = threading.Lock()
#: Buffers kept per thread: collect_stats holds the previous step's batch while the next is built.
_BUFFERS_PER_THREAD = 2
#: References to a pooled buffer nobody else holds: the pair list's and sys.getrefcount's argument.
_UNUSED_REFS = 2


def _step_buffers(size: int, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """Recycled int64 buffers for one step's ids (``size``) and row splits (``shape``), or (None, None).

    A step's ids are about 8 B x ids per step (68 MB for 16384 samples x 26 features
    x 20 ids) and its row splits 8 B x features x samples (3.4 MB); fresh arrays of
    those sizes are zeroed page by page by the kernel at their first touch, which
    costs about as much again as the copy into them (and the engine's own buffers,
    freed between steps, make the C allocator hand fresh pages back each time). A
    pair is reused only when no reference to either buffer is left outside the pool
    (no batch and no view of its ids or splits alive): their reference counts say so
    exactly in a build with the GIL, so the free-threaded build does not recycle.
    """
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    if not gil:
        return None, None
    key = threading.get_ident()
    with _STEP_BUFFERS_LOCK:
        pool = _STEP_BUFFERS.setdefault(key, [])
        for i in range(len(pool)):    # no loop variable (nor enumerate's tuple) holding a reference
            pair = pool[i]
            if sys.getrefcount(pair[0]) == _UNUSED_REFS and sys.getrefcount(pair[1]) == _UNUSED_REFS:
                # a buffer too small is let go before its successor is allocated: never both at once
                if pair[0].size < size:
                    pair[0] = None
                    pair[0] = np.empty(size, np.int64)
                if pair[1].shape != shape:
                    pair[1] = None
                    pair[1] = np.empty(shape, np.int64)
                return pair[0][:size], pair[1]
        if len(pool) < _BUFFERS_PER_THREAD:
            pool.append([np.empty(size, np.int64), np.empty(shape, np.int64)])
            return pool[-1][0][:size], pool[-1][1]
    return None, None


def _release_step_buffers() -> None:
    """Forget every pooled step buffer (those still in use die with their batches)."""
    with _STEP_BUFFERS_LOCK:
        _STEP_BUFFERS.clear()


#: Ids in a step below which its batch is copied in one pass whatever the cores (about 8 MB of
#: int64: a thread pool's start costs a fraction of a millisecond, a fraction of such a copy).
_COPY_BY_FEATURE_IDS = 1 << 20


def _step_batch(rows: dict, lo: int, hi: int, names: list[str], recycle: bool = False, threads: int = 1,
                prof=None):
    """Samples ``[lo, hi)`` of ``rows`` as one FeatureBatch: the ids copied once, widened to int64.

    The readers have checked what FeatureBatch's constructor checks (ids >= 0 and
    within int64, row splits from 0, non-decreasing, ending at the ids' length), so
    the batch is assembled directly: building it from a dict would check every id
    again, and converting narrower stored ids to int64 first would copy them twice.
    The row splits are passed as slices of the read ones and shifted into the batch's
    array in the same pass.

    With ``threads > 1`` (a chunk that has cores of its own beyond one) a large step is
    copied feature by feature on that many threads (numpy copies without the GIL): the
    first step a thread builds writes fresh pages, which the kernel zeroes at their first
    touch, and that copy alone took about 25 ms a standard step. While a profile is
    recorded (``prof``) and the work is cut for several threads, each feature's copy is
    timed as one task of the reads' batch (:func:`_record_read`), which is how it runs then.
    """
    from scwork.sharding.batch import FeatureBatch

    parts, splits = [], []
    for f in names:
        ids, rs = rows[f]
        split = rs[lo:hi + 1]
        parts.append(ids[split[0]:split[-1]])
        splits.append(split)
    batch = FeatureBatch.__new__(FeatureBatch)
    num_ids = sum(p.size for p in parts)
    ids_out, splits_out = _step_buffers(num_ids, (len(names), hi - lo + 1)) if recycle else (None, None)
    by_feature = (_profile.plan_threads() or 1) > 1 if prof is not None else threads > 1
    each_feature = None
    if by_feature and num_ids >= _COPY_BY_FEATURE_IDS and len(names) >= 2:
        if prof is not None:
            def each_feature(n: int, copy) -> None:       # each feature's copy one task of the reads' batch
                for i in range(n):
                    started = _profile.thread_cpu_s()
                    copy(i)
                    _record_read(prof, _profile.thread_cpu_s() - started, parts[i].size)
        else:
            def each_feature(n: int, copy) -> None:
                import concurrent.futures

                with concurrent.futures.ThreadPoolExecutor(min(threads, n)) as pool:
                    list(pool.map(copy, range(n)))
    started = _profile.thread_cpu_s() if prof is not None and each_feature is None else 0.0
    batch._set(names, parts, splits, [None] * len(names), hi - lo, ids_out=ids_out, splits_out=splits_out,
               each_feature=each_feature)
    if prof is not None and each_feature is None:        # the one-pass copy: one task
        _record_read(prof, _profile.thread_cpu_s() - started, num_ids)
    return batch


def _where(job: _Job, sample: int) -> str:
    k = min(bisect.bisect_right(job.offsets, sample) - 1, len(job.pieces) - 1)
    return f"{job.pieces[k].path} row {sample - job.offsets[k]}"


def _engine_threads(job: _Job) -> int | None:
    """This task's engine threads: the job's count, or its worker's entry in a cluster's map."""
    threads = job.engine_threads
    if not isinstance(threads, dict):
        return threads
    try:
        from distributed import get_worker

        return threads.get(get_worker().address)
    except (ImportError, ValueError):     # not on a worker (get_worker raises ValueError)
        return None


def _failed_step(err: BaseException, steps: range, current: list) -> int:
    """The dataset step whose collect_stats step raised ``err`` (it marks it: it reads a
    batch ahead, so the last batch yielded may be the next step's)."""
    index = getattr(err, "_collect_step", None)
    return steps[index] if index is not None and 0 <= index < len(steps) else current[0]


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
                             on_out_of_vocabulary=job.on_oov, num_threads=_engine_threads(job),
                             **_collect_kwargs())
    except OutOfVocabularyError as err:
        step = _failed_step(err, steps, current)
        sample = None if err.sample is None else step * B + int(err.sample)
        where = "" if sample is None else f", dataset sample {sample} = {_where(job, sample)}"
        raise OutOfVocabularyError(f"step {step}{where}: {err}", feature=err.feature, sample=sample,
                                   id=err.id, vocab_size=err.vocab_size, count=err.count) from None
    except InputError as err:
        step = _failed_step(err, steps, current)
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


#: The profile batch that holds what each chunk and boundary task does besides its reads and
#: its engine calls' tasks (see _profiled_task).
TASK_BATCH = "dataset chunk and boundary tasks' own work"


def _profiled_task(fn):
    """``fn`` (a chunk or boundary task), its own work recorded as one task of :data:`TASK_BATCH`
    while a profile is recorded.

    A chunk task reads its rows, runs ``collect_stats`` over its steps and stacks their
    statistics into one Dataset; everything it does runs inside the task, at the same
    time as the other chunk tasks (``num_workers`` of them at once), not between them.
    Its reads and its engine calls' tasks are recorded as theirs already; the rest (each
    step's checks, plan and results around its engine tasks, the first step's set-up,
    the Dataset of the chunk) was counted as serial time of the whole call, as if no
    other chunk could run meanwhile. Recorded without a size: it is Python work, not ids.

    On a local thread pool (or dask's threaded scheduler), that Python holds the GIL: the
    chunks' own work then runs beside the other chunks' kernels and reads (which let go
    of it), not beside each other's own work; with worker processes (a cluster) it runs
    in parallel too.
    """
    @functools.wraps(fn)
    def run(job, *args):
        prof = _profile.active()
        if prof is None:
            return fn(job, *args)
        mark = _profile.own_work_mark(prof)
        try:
            return fn(job, *args)
        finally:
            _profile.record_own_work(prof, TASK_BATCH, mark)
    return run


@_profiled_task
def _run_chunk(job: _Job, chunk: _Chunk, *partitions):
    """Read a chunk's rows; return ((per-step Dataset, summary) of its inner steps or None, fragments).

    ``fragments`` maps each step crossing the chunk's ends to the chunk's rows of that
    step (copied: fewer than ``batch_size`` samples), for :func:`_run_boundary`.
    """
    names = [f.name for f in job.features]
    data = {j: partitions[i] for i, j in enumerate(sorted({s[0] for s in chunk.segments
                                                           if job.pieces[s[0]].kind in ("frame", "bag")}))}
    prof = _profile.active()
    threads = 1
    if prof is not None:
        rows = _profiled_read(job, chunk, data, prof, names)
    else:
        # Where this task has cores of its own beyond one (fewer chunks run at once than
        # there are cores), pyarrow decodes the columns on its thread pool, and the step
        # batches are copied on as many threads: same CPU, less wall time.
        threads = _engine_threads(job) or 1
        parts = [_read_rows(job.pieces[k], data.get(k), start, stop, job.colmap, threads)
                 for k, start, stop in chunk.segments]
        rows = _concat_rows(parts, names)
        del parts
    del data
    a, b = chunk.sample_start, chunk.sample_stop
    fragments = {}
    for step in chunk.fragments:
        lo, hi = job.step_rows(step)
        fragments[step] = _slice_rows(rows, max(lo, a) - a, min(hi, b) - a, copy=True)
    if chunk.step_stop == chunk.step_start:
        return None, fragments

    def batch_of(step):
        lo, hi = job.step_rows(step)
        # profiled, the copy into the step's batch is this chunk's work too, beside its read (see _record_read)
        return _step_batch(rows, lo - a, hi - a, names, job.recycle, threads, prof)

    short_last = chunk.step_stop == job.num_steps and job.used < job.num_steps * job.batch_size
    full_stop = chunk.step_stop - 1 if short_last else chunk.step_stop
    out = []
    for steps in (range(chunk.step_start, full_stop), range(full_stop, chunk.step_stop)):
        if len(steps):          # collect_stats needs one batch size: the kept short batch goes alone
            out.append(_collect(job, steps, batch_of))
    return _finish(job, out), fragments


#: The profile batch that holds every chunk's read and step-batch copies (see _record_read).
READ_BATCH = "dataset read and batch copies"


def _record_read(prof, seconds: float, num_ids: int) -> None:
    """Add one chunk's read to the profile's batch of reads, as one task among all the chunks' reads.

    While a profile is recorded (``scwork.sharding._profile``), the engine's tasks are
    timed as parallel and everything else in the call as serial. A chunk's read is
    neither: the chunk tasks run ``num_workers`` at a time (a local thread pool,
    or a cluster's workers) and a read holds no lock (pyarrow decodes and numpy copies
    without the GIL), so the reads of different chunks run at the same time as each
    other. One batch of tasks, every chunk's read one of them, is what the projection
    then schedules over T workers; left serial, the reads alone capped the projected
    speedup near 1. The copy of each inner step's ids into its batch (numpy, without
    the GIL) is recorded the same way, one task per step: it runs inside the chunk
    task too, at the same time as the other chunks' work, not between them.
    """
    _profile.record_task(prof, READ_BATCH, seconds, num_ids)


def _profiled_read(job: _Job, chunk: _Chunk, data: dict, prof, names: list[str]) -> dict:
    """A chunk's rows, read while a profile is recorded: its read timed as task(s) (see _record_read).

    Profiled for more than one thread, a chunk of Parquet shards is read column by
    column, each column one task: that is how the chunk decodes when it has several
    cores (pyarrow's thread pool takes the list columns, a pool of threads the
    features of flat CSR shards). Otherwise (one thread, or NPZ and
    dask pieces, read as a whole) the chunk's read is one task.
    """
    by_column = (_profile.plan_threads() or 1) > 1 and all(job.pieces[k].kind in ("parquet", "flat")
                                                           for k, _, _ in chunk.segments)
    if not by_column:
        started = _profile.thread_cpu_s()
        rows = _concat_rows([_read_rows(job.pieces[k], data.get(k), start, stop, job.colmap)
                             for k, start, stop in chunk.segments], names)
        _record_read(prof, _profile.thread_cpu_s() - started, sum(int(rs[-1]) for _, rs in rows.values()))
        return rows
    parts: list[dict] = [{} for _ in chunk.segments]
    for feature, column in job.colmap.items():
        started = _profile.thread_cpu_s()
        for part, (k, start, stop) in zip(parts, chunk.segments):
            part.update(_read_rows(job.pieces[k], None, start, stop, {feature: column}))
        _record_read(prof, _profile.thread_cpu_s() - started, sum(int(p[feature][1][-1]) for p in parts))
    return _concat_rows(parts, names)


@_profiled_task
def _run_boundary(job: _Job, step: int, *fragment_maps):
    """(per-step Dataset, summary) of one step assembled from the fragments of consecutive chunks."""
    names = [f.name for f in job.features]
    rows = _concat_rows([m[step] for m in fragment_maps], names)
    lo, hi = job.step_rows(step)
    return _finish(job, [_collect(job, range(step, step + 1),
                                  lambda s: _step_batch(rows, 0, hi - lo, names, job.recycle))])


def _summarize(ds) -> dict[str, np.ndarray]:
    """Small, exactly mergeable view of a block: per-step summaries, maxima and sums over its steps."""
    # ds.variables[name]: the same arrays as ds[name] without building a DataArray (its coordinates) for
    # each, which cost about 0.3 ms a variable, 4 ms a block
    variables = ds.variables
    out = {name: variables[name].transpose("step", "stack").values for name in _SUMMARY_VARS}
    for name in ("max_ids_per_partition", "max_unique_ids_per_partition", "required_buffer_size_per_sc"):
        out["max:" + name] = variables[name].values.max(axis=0)
    for name in ("ids", "unique_ids", "input_ids", "naive_ids_per_partition", "out_of_vocabulary_ids"):
        out["sum:" + name] = variables[name].values.sum(axis=0)
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
        inner_start = ceil_div(a, B)
        inner_stop = T if b >= used else b // B
        inner_stop = max(inner_stop, inner_start)
        overlap = range(a // B, min(T, ceil_div(b, B)))
        fragments = tuple(s for s in sorted({overlap[0], overlap[-1]}) if not inner_start <= s < inner_stop) \
            if len(overlap) else ()
        chunks.append(_Chunk(len(chunks), a, b, segments, inner_start, inner_stop, fragments))
        a = b
    return chunks
