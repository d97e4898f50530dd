"""Running the chunk tasks, locally or on a dask.distributed cluster, and merging their results.

Locally they run on threads or synchronously, with a progress bar.
"""

from __future__ import annotations

import os

import numpy as np

from scwork.errors import InputError, InternalError, ShardError
from scwork.sharding._dataset_chunks import _partition_length, _var_values
from scwork.sharding.dataset_result import _CONFIGURED_VARS, _SUMMARY_VARS
from scwork.sharding.shards import _Piece

__all__ = []


_LOCAL_SCHEDULERS = {"threads": "threads", "threaded": "threads", "sync": "sync", "synchronous": "sync",
                     "single-threaded": "sync"}


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


def _run_here(job, chunks, boundaries: dict, mode: str, num_workers: int | None, bar, run_chunk,
              run_boundary) -> tuple[list, dict]:
    """Run the chunk tasks of shards on disk here, without a graph: ``(chunk results, {step: boundary result})``.

    ``run_chunk(job, chunk)`` and ``run_boundary(job, step, *fragments)`` are the tasks
    (:func:`~scwork.sharding._dataset_chunks._run_chunk` and ``_run_boundary``).

    Each boundary step (``boundaries``: step -> the chunks holding its fragments, in
    order) runs as soon as its last chunk has finished, as dask's schedulers run it, and
    its fragments are taken out of its chunks' maps once it has run: memory holds the
    fragments of the chunks in flight, not of every chunk of the dataset.
    ``sync`` runs everything in order on this thread (a boundary right after its last
    chunk); ``threads`` and ``pool`` on a thread pool of ``num_workers`` threads
    (default one per core). The first error raised stops what has not started and is
    raised once the running tasks have finished.
    """
    outs: list = [None] * len(chunks)
    done: dict = {}
    waiting = {step: set(ks) for step, ks in boundaries.items()}
    after: list[list] = [[] for _ in chunks]        # per chunk, the boundary steps its fragments serve
    for step, ks in boundaries.items():
        for k in ks:
            after[k].append(step)

    def tick() -> None:
        if bar is not None:
            bar.update(1)

    def chunk_done(k: int, out) -> list:
        """Record chunk ``k``'s (stats, fragments); the boundary tasks now ready, as (step, args)."""
        outs[k] = out
        tick()
        ready = []
        for step in after[k]:
            waiting[step].discard(k)
            if not waiting[step]:
                ready.append((step, (job, step, *[outs[j][1] for j in boundaries[step]])))
        return ready

    def boundary_done(step, out) -> None:
        done[step] = out
        tick()
        for k in boundaries[step]:            # a chunk's fragments map holds only its boundary steps
            outs[k][1].pop(step, None)

    # (ready boundaries are handled in functions of their own: a loop variable left holding the
    # last one's arguments would keep its fragments alive through the next chunk)
    def run_ready(ready: list) -> None:
        while ready:
            step, args = ready.pop(0)
            boundary_done(step, run_boundary(*args))

    if mode == "sync" or len(chunks) + len(boundaries) <= 1:
        for k, chunk in enumerate(chunks):
            run_ready(chunk_done(k, run_chunk(job, chunk)))
        return [o[0] for o in outs], done
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(num_workers or os.cpu_count() or 1) as pool:
        running = {pool.submit(run_chunk, job, chunk): ("chunk", k) for k, chunk in enumerate(chunks)}

        def submit_ready(ready: list) -> None:
            while ready:
                step, args = ready.pop(0)
                running[pool.submit(run_boundary, *args)] = ("boundary", step)

        try:
            while running:
                finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in finished:
                    kind, key = running.pop(fut)
                    if kind == "chunk":
                        submit_ready(chunk_done(key, fut.result()))
                    else:
                        boundary_done(key, fut.result())
                del finished, fut
        except BaseException:
            for fut in running:
                fut.cancel()
            raise
    return [o[0] for o in outs], done


def _run_local(tasks, mode: str, num_workers: int | None, bar, chunk_keys: set):
    """Compute delayed ``tasks`` on dask's local scheduler ``mode`` (``threads`` or ``sync``)."""
    import dask
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
    """The blocks' per-step Datasets as one, along ``step``.

    They come from one stacking plan, so their coordinates other than ``step`` are
    the same: the values are concatenated in numpy and one Dataset is built
    (``xr.concat`` aligned every block against the others, about 10 ms a block, all of
    it after the chunks ran). Same variables, order, dims, coordinates and attributes
    as ``xr.concat`` over the blocks with the configured (per-stack) variables merged
    after the per-step ones.
    """
    import xarray as xr

    first = datasets[0]
    steps = sum(d.sizes["step"] for d in datasets)
    data, configured = {}, {}
    # Dataset.variables, not ds[name]: building a DataArray (with its coordinates) for every
    # variable of every block cost about 20 ms a call on the standard input's 8 blocks.
    for name in first.data_vars:
        var = first.variables[name]
        if name in _CONFIGURED_VARS:
            configured[name] = var
            continue
        if not var.dims or var.dims[0] != "step":
            raise InternalError(f"{name}: a per-step variable whose first dim is not step ({var.dims})")
        values = var.values if len(datasets) == 1 else \
            np.concatenate([d.variables[name].values for d in datasets], axis=0)
        data[name] = xr.Variable(var.dims, values, dict(var.attrs))
    data.update(configured)
    coords = {k: first.variables[k] for k in first.coords if "step" not in first.variables[k].dims}
    coords["step"] = ("step", np.arange(steps), {"long_name": "step index"})
    return xr.Dataset(data, coords=coords, attrs=dict(first.attrs))


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
                raise InternalError(f"{name}: step is not the first dim")
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
