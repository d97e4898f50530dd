"""stats_over_dataset: same numbers as collect_stats over in-memory batches, bounded chunks, errors."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import ConfigError, InputError, OutOfVocabularyError
from scwork.sharding import (
    DatasetStats,
    FeatureSpec,
    TableSpec,
    collect_stats,
    plan_stacking,
    stats_over_dataset,
    tradeoff,
    tune_limits,
)
from scwork.sharding import dataset_stats as dsmod
from scwork.sharding.dataset_stats import ShardError, write_npz_shard
from scwork.sharding.limits import merge_step_stats

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

TOPO = scwork.Topology(2, 2)
VOCAB = {"a": 300, "b": 300, "c": 50}
T_AB = TableSpec("tab", 300, 8)
T_C = TableSpec("tc", 50, 16)
FEATURES = [FeatureSpec("a", T_AB), FeatureSpec("b", T_AB), FeatureSpec("c", T_C)]


# --------------------------------------------------------------------------------------
# helpers: one in-memory dataset, cut into shards, and the in-memory reference
# --------------------------------------------------------------------------------------
def make_data(num_samples: int, seed: int = 0) -> dict:
    """Full dataset {feature: (ids, row_splits)}; poisson(2) valency gives empty samples too."""
    data = scwork.datasets.synthetic(num_samples, features=list(VOCAB), vocab_size=VOCAB,
                                     valency={"a": 2, "b": "uniform(0, 5)", "c": "fixed(1)"}, seed=seed)
    return data.step(0)


def rows(data: dict, lo: int, hi: int) -> dict:
    out = {}
    for name, (ids, rs) in data.items():
        out[name] = (ids[rs[lo]:rs[hi]], rs[lo:hi + 1] - rs[lo])
    return out


def split(data: dict, sizes) -> list[dict]:
    out, lo = [], 0
    for n in sizes:
        out.append(rows(data, lo, lo + n))
        lo += n
    return out


def write_parquet(folder, shards, *, names=None, row_group_size=None) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i, shard in enumerate(shards):
        arrays = {}
        for name, (ids, rs) in shard.items():
            col = (names or {}).get(name, name)
            arrays[col] = pa.ListArray.from_arrays(pa.array(rs.astype(np.int32)), pa.array(ids, pa.int64()))
        path = os.path.join(folder, f"part-{i:05d}.parquet")
        pq.write_table(pa.table(arrays), path, row_group_size=row_group_size)
        paths.append(path)
    return paths


def write_npz(folder, shards, *, compressed=False, names=None) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i, shard in enumerate(shards):
        path = os.path.join(folder, f"shard-{i:03d}.npz")
        write_npz_shard(path, {(names or {}).get(k, k): v for k, v in shard.items()}, compressed=compressed)
        paths.append(path)
    return paths


def reference(data: dict, B: int, drop_remainder: bool, features=FEATURES, topology=TOPO, **kwargs):
    """The in-memory path: collect_stats over the batches (a kept short batch with the same plan)."""
    N = len(next(iter(data.values()))[1]) - 1
    full = N // B
    batches = [rows(data, i * B, (i + 1) * B) for i in range(full)]
    parts = []
    if batches:
        parts.append(collect_stats(batches, features, topology, **kwargs))
    if not drop_remainder and N % B:
        plan = plan_stacking(features, topology, kwargs.get("stacking", "auto"), batch_size=B,
                             config=kwargs.get("config"), stack_limits=kwargs.get("stack_limits"))
        kw = {k: v for k, v in kwargs.items() if k not in ("stacking",)}
        parts.append(collect_stats([rows(data, full * B, N)], features, topology, stacking=plan, **kw))
    if len(parts) == 1:
        return parts[0]
    configured = parts[0][["configured_max_ids_per_partition", "configured_max_unique_ids_per_partition"]]
    out = xr.concat([p.drop_vars(list(configured)) for p in parts], dim="step", data_vars="all",
                    coords="minimal", compat="override", join="exact")
    out = out.assign_coords(step=np.arange(out.sizes["step"])).merge(configured)
    return out


def check_same(res: DatasetStats, ref: xr.Dataset, *, method="max", percentile=99.0) -> None:
    got = res.step_stats.compute() if res.dask_backed else res.step_stats
    assert list(got.data_vars) == list(ref.data_vars)
    xr.testing.assert_equal(got, ref)
    for name in ref.data_vars:
        assert got[name].dtype == ref[name].dtype, name
    merged = merge_step_stats(ref)
    for name in ("max_ids_per_partition", "max_unique_ids_per_partition", "required_buffer_size_per_sc"):
        np.testing.assert_array_equal(res.merged[name].values, merged[name].values)
        assert res.merged[name].dims == merged[name].dims
    np.testing.assert_array_equal(res.merged["total_ids"].values, ref["ids"].values.sum(axis=0))
    np.testing.assert_array_equal(res.merged["total_unique_ids"].values, ref["unique_ids"].values.sum(axis=0))
    np.testing.assert_array_equal(res.merged["total_input_ids"].values, ref["input_ids"].values.sum(axis=0))
    np.testing.assert_array_equal(res.merged["total_naive_ids_per_partition"].values,
                                  ref["naive_ids_per_partition"].values.sum(axis=0))
    assert res.num_ids == int(ref["input_ids"].values.sum())
    assert res.merged.attrs["merged_steps"] == ref.sizes["step"] == res.num_steps
    xr.testing.assert_identical(res.tuned.dataset, tune_limits(ref, method=method, percentile=percentile).dataset)


# --------------------------------------------------------------------------------------
# equality with the in-memory path
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("sizes", [
    [64, 64, 64],              # shards aligned with batches of 32
    [50, 7, 0, 90, 13, 31],    # unaligned, an empty shard, a shard smaller than a batch
    [5] * 20 + [3],            # many shards inside one batch
    [201],                     # one shard
])
@pytest.mark.parametrize("drop_remainder", [True, False])
def test_parquet_equals_collect_stats(tmp_path, sizes, drop_remainder):
    N = sum(sizes)
    B = 32
    if not drop_remainder and N % B % 4:
        N -= N % B % 4          # keep a remainder that divides over G * S = 4
        sizes = sizes[:-1] + [sizes[-1] - (sum(sizes) - N)]
    data = make_data(N, seed=len(sizes))
    write_parquet(tmp_path, split(data, sizes))
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=B, drop_remainder=drop_remainder,
                             chunk_rows=2 * B, scheduler="threads", num_workers=2)
    ref = reference(data, B, drop_remainder)
    check_same(res, ref)
    full, rem = divmod(N, B)
    assert res.num_steps == full + (0 if drop_remainder or not rem else 1)
    assert res.dropped_samples == (rem if drop_remainder else 0)
    assert res.last_batch_size == (B if drop_remainder or not rem else rem)
    assert res.num_samples == res.num_steps * B - (B - res.last_batch_size)
    assert res.step_stats.attrs["last_batch_size"] == res.last_batch_size
    assert not res.dask_backed
    assert res.shards == tuple(str(p) for p in sorted(tmp_path.iterdir()))


@pytest.mark.parametrize("chunk_rows", [None, 32, 96, 10**6])
@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_chunking_does_not_change_results(tmp_path, chunk_rows, scheduler):
    data = make_data(300, seed=3)
    write_parquet(tmp_path, split(data, [100, 37, 163]), row_group_size=16)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=chunk_rows, scheduler=scheduler)
    check_same(res, reference(data, 32, True))
    assert res.scheduler == scheduler


@pytest.mark.parametrize("num_workers, num_threads", [(1, 1), (1, 3), (2, None), (3, 2)])
def test_engine_threads_do_not_change_results(tmp_path, monkeypatch, num_workers, num_threads):
    """Every chunk's engine runs on num_threads threads (default: the cores its concurrent chunks share)."""
    from scwork.sharding import limits
    from scwork.sharding._threads import available_cores

    data = make_data(256, seed=8)
    write_parquet(tmp_path, split(data, [64] * 4), row_group_size=32)
    seen = []
    real = limits.collect_stats

    def spy(*args, **kwargs):
        seen.append(kwargs.get("num_threads"))
        return real(*args, **kwargs)

    monkeypatch.setattr(limits, "collect_stats", spy)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=64, num_workers=num_workers,
                             num_threads=num_threads)
    check_same(res, reference(data, 32, True))
    want = num_threads or max(1, available_cores() // min(num_workers, res.num_chunks))
    assert seen and set(seen) == {want}


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_equals_collect_stats_with_renamed_columns(tmp_path, compressed):
    data = make_data(252, seed=5)
    names = {"a": "col_a", "c": "col_c"}
    write_npz(tmp_path, split(data, [40, 0, 111, 101]), compressed=compressed, names=names)
    res = stats_over_dataset(str(tmp_path / "*.npz"), FEATURES, TOPO, batch_size=16, columns=names,
                             drop_remainder=False, chunk_rows=48)
    check_same(res, reference(data, 16, False))
    assert (res.num_steps, res.last_batch_size, res.num_chunks) == (16, 12, 6)


def test_list_of_files_keeps_given_order(tmp_path):
    data = make_data(128, seed=6)
    shards = split(data, [64, 64])
    paths = write_npz(tmp_path, shards)
    res = stats_over_dataset(paths[::-1], FEATURES, TOPO, batch_size=32)
    swapped = {k: (np.concatenate([shards[1][k][0], shards[0][k][0]]),
                   np.concatenate([shards[1][k][1], shards[0][k][1][1:] + shards[1][k][1][-1]]))
               for k in data}
    check_same(res, reference(swapped, 32, True))
    assert res.shards == tuple(paths[::-1])


def test_stacking_config_and_percentile(tmp_path):
    data = make_data(256, seed=7)
    write_parquet(tmp_path, split(data, [100, 156]))
    kwargs = {"stacking": None, "stack_limits": {"tab": (24, 16)}}
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, tune="percentile", percentile=75,
                             chunk_rows=64, **kwargs)
    ref = reference(data, 32, True, **kwargs)
    check_same(res, ref, method="percentile", percentile=75)
    assert res.step_stats["configured_max_ids_per_partition"].sel(stack="tab").item() == 24
    assert res.stack_limits() == tune_limits(ref, method="percentile", percentile=75).stack_limits()
    assert set(res.to_limits()) == {"tab", "tc"} and res.to_limits().stack_limits() == res.stack_limits()
    xr.testing.assert_identical(res.tradeoff([8, 64]), tradeoff(ref, [8, 64]))
    assert "DatasetStats(8 steps of 32 samples from 2 shards" in repr(res)


def test_out_of_vocabulary_drop_matches_and_error_names_file(tmp_path):
    data = make_data(128, seed=8)
    ids, rs = data["c"]
    ids = ids.copy()
    ids[rs[70]] = 10_000          # sample 70: shard 1 (rows 64..), row 6; step 2 (B = 32), sample 6
    data["c"] = (ids, rs)
    write_parquet(tmp_path, split(data, [64, 64]))
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, on_out_of_vocabulary="drop")
    check_same(res, reference(data, 32, True, on_out_of_vocabulary="drop"))
    assert int(res.merged["total_out_of_vocabulary_ids"].sel(stack="tc")) == 1
    with pytest.raises(OutOfVocabularyError, match=r"step 2, dataset sample 70 = .*part-00001.parquet row 6") as err:
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, scheduler="sync")
    assert err.value.sample == 70 and err.value.id == 10_000 and err.value.feature == "c"


def test_integer_column_one_id_per_sample(tmp_path):
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int64)
    valid = np.array([1, 1, 0, 1, 1, 1, 1, 0], bool)
    table = pa.table({"a": pa.array(ids, mask=~valid)})
    pq.write_table(table, tmp_path / "x.parquet")
    feats = [FeatureSpec("a", TableSpec("t", 10, 8))]
    res = stats_over_dataset(tmp_path, feats, TOPO, batch_size=4)
    rs = np.concatenate([[0], np.cumsum(valid)])
    ref = reference({"a": (ids[valid], rs)}, 4, True, features=feats)
    check_same(res, ref)


@pytest.mark.parametrize("value_type", ["int8", "int16", "int32", "uint16", "uint32", "uint64", "int64"])
@pytest.mark.parametrize("list_type", ["list", "large_list"])
def test_stored_id_widths_equal_collect_stats(tmp_path, value_type, list_type):
    """Ids of any integer width are read in that width and widened once, into the engine's batch: same numbers."""
    data = make_data(96, seed=21)
    data = {k: (ids % 120, rs) for k, (ids, rs) in data.items()}     # fits int8
    typ = getattr(pa, value_type)()
    for i, shard in enumerate(split(data, [40, 56])):
        arrays = {}
        for name, (ids, rs) in shard.items():
            cls = pa.ListArray if list_type == "list" else pa.LargeListArray
            offsets = pa.array(rs.astype(np.int32 if list_type == "list" else np.int64))
            arrays[name] = cls.from_arrays(offsets, pa.array(ids.astype(typ.to_pandas_dtype()), typ))
        pq.write_table(pa.table(arrays), tmp_path / f"p{i}.parquet", row_group_size=24)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=32)
    check_same(res, reference(data, 32, True))


def test_null_lists_owning_ids_and_fixed_size_lists(tmp_path):
    """A null list whose offsets span ids (allowed by Arrow) counts as no ids, like a fixed_size_list's rows."""
    n = 32
    ids = np.arange(3 * n, dtype=np.int64) % 50
    offsets = pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32))
    valid = np.ones(n, bool)
    valid[[2, 17]] = False
    masked = pa.ListArray.from_arrays(offsets, pa.array(ids), mask=pa.array(~valid))
    assert masked.null_count == 2 and len(masked.values) == 3 * n       # the null lists own 3 ids each
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(ids), 3)
    pq.write_table(pa.table({"a": masked, "c": fixed}), tmp_path / "x.parquet")
    feats = [FeatureSpec("a", TableSpec("t", 50, 8)), FeatureSpec("c", TableSpec("u", 50, 8))]
    res = stats_over_dataset(tmp_path, feats, TOPO, batch_size=16)
    lengths = np.where(valid, 3, 0)
    keep = np.repeat(valid, 3)
    ref = reference({"a": (ids[keep], np.concatenate([[0], np.cumsum(lengths)])),
                     "c": (ids, np.arange(0, 3 * n + 1, 3))}, 16, True, features=feats)
    check_same(res, ref)
    assert res.num_ids == 3 * n + 3 * (n - 2)


@pytest.mark.parametrize("list_type", ["list", "large_list"])
def test_arrow_column_to_csr_reads_slices_and_null_lists_like_flatten(list_type):
    """The in-place read of a list column (offsets and child values) against Arrow's list_flatten."""
    import pyarrow.compute as pc

    from scwork.sharding.shards import _arrow_to_csr

    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 5, 50)
    lengths[[4, 30]] = 3
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = pa.array(rng.integers(0, 1000, offsets[-1]).astype(np.int32))
    cls = pa.ListArray if list_type == "list" else pa.LargeListArray
    whole = cls.from_arrays(pa.array(offsets.astype(np.int32 if list_type == "list" else np.int64)), values)
    nulls = np.zeros(50, bool)
    nulls[[4, 30]] = True               # null lists that own a non-empty segment of the child
    masked = cls.from_arrays(pa.array(offsets.astype(np.int32 if list_type == "list" else np.int64)), values,
                             mask=pa.array(nulls))
    for arr in (whole, whole.slice(7, 30), masked, masked.slice(3, 40), pa.chunked_array([whole.slice(0, 9),
                                                                                          whole.slice(9, 20)])):
        ids, rs = _arrow_to_csr(arr, "x.parquet", "a", 0)
        flat = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
        want = pc.list_flatten(flat).to_numpy()
        np.testing.assert_array_equal(ids, want)
        np.testing.assert_array_equal(np.diff(rs), pc.fill_null(pc.list_value_length(flat), 0).to_numpy())
        assert rs[0] == 0 and rs.dtype == np.int64 and ids.dtype == np.int32


@pytest.mark.parametrize("compression", ["none", "snappy", "lz4", "zstd", "gzip"])
@pytest.mark.parametrize("encoding", ["delta", "dictionary", "plain"])
def test_codecs_and_encodings_equal_collect_stats(tmp_path, compression, encoding):
    """Shards written by write_synthetic_parquet with any codec and page encoding read to the same numbers."""
    names = list(VOCAB)
    scwork.datasets.write_synthetic_parquet(tmp_path, 3, rows_per_shard=40, features=names, vocab_size=VOCAB,
                                            valency=3, seed=4, compression=compression, encoding=encoding)
    source = scwork.datasets.synthetic(40, num_steps=3, features=names, vocab_size=VOCAB, valency=3, seed=4)
    steps = [source.step(i) for i in range(3)]
    data = {}
    for name in names:
        ids = np.concatenate([s[name][0] for s in steps])
        rs = np.concatenate([[0]] + [s[name][1][1:] + sum(len(t[name][0]) for t in steps[:i])
                                     for i, s in enumerate(steps)])
        data[name] = (ids, rs)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=24, chunk_rows=48, num_workers=2)
    check_same(res, reference(data, 24, True))


@pytest.mark.parametrize("dtype", ["<i4", ">i4", "<u2", "<u8", ">i8"])
def test_npz_stored_widths_and_byte_orders(tmp_path, dtype):
    data = make_data(64, seed=22)
    for i, shard in enumerate(split(data, [24, 40])):
        arrays = {}
        for name, (ids, rs) in shard.items():
            arrays[f"{name}_ids"] = ids.astype(dtype)
            arrays[f"{name}_row_splits"] = rs.astype(dtype)
        np.savez(tmp_path / f"s{i}.npz", **arrays)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=32)
    check_same(res, reference(data, 32, True))


def test_unsigned_ids_above_int64_name_file(tmp_path):
    data = make_data(32, seed=23)
    arrays = {name: pa.ListArray.from_arrays(pa.array(rs.astype(np.int32)), pa.array(ids.astype(np.uint64)))
              for name, (ids, rs) in data.items()}
    big = np.array(data["b"][0], np.uint64)
    big[3] = np.uint64(2**63 + 5)
    arrays["b"] = pa.ListArray.from_arrays(pa.array(data["b"][1].astype(np.int32)), pa.array(big))
    pq.write_table(pa.table(arrays), tmp_path / "u.parquet")
    with pytest.raises(ShardError, match=r"u\.parquet, column 'b': ids above the int64 range") as err:
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)
    assert err.value.column == "b"


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6), batches=st.integers(1, 4),
       chunk=st.integers(1, 3), drop=st.booleans(), seed=st.integers(0, 50),
       fmt=st.sampled_from(["npz", "parquet"]), row_group=st.integers(1, 24))
def test_random_shard_boundaries(tmp_path_factory, sizes, batches, chunk, drop, seed, fmt, row_group):
    """Random shards (Parquet: random row groups, so chunks end anywhere and steps are assembled
    from fragments of several chunks) give the in-memory numbers."""
    B = 4 * batches
    N = sum(sizes) - sum(sizes) % 4       # keep any remainder divisible by G * S
    if N < (B if drop else 4):
        return
    sizes = list(sizes)
    excess = sum(sizes) - N
    for i in reversed(range(len(sizes))):  # trim the excess from the last shards
        take = min(excess, sizes[i])
        sizes[i] -= take
        excess -= take
    data = make_data(N, seed=seed)
    folder = tmp_path_factory.mktemp("shards")
    if fmt == "npz":
        write_npz(folder, split(data, sizes))
    else:
        write_parquet(folder, split(data, sizes), row_group_size=row_group)
    if N < B:   # only a short batch, kept
        res = stats_over_dataset(folder, FEATURES, TOPO, batch_size=B, drop_remainder=False, chunk_rows=chunk * B)
        check_same(res, reference(data, B, False))
        return
    res = stats_over_dataset(folder, FEATURES, TOPO, batch_size=B, drop_remainder=drop, chunk_rows=chunk * B)
    check_same(res, reference(data, B, drop))


@pytest.mark.parametrize("fmt", ["parquet", "npz"])
def test_chunks_read_each_row_once_and_stay_bounded(tmp_path, monkeypatch, fmt):
    data = make_data(300, seed=9)
    shards = split(data, [100, 37, 0, 163])
    if fmt == "parquet":
        write_parquet(tmp_path, shards, row_group_size=16)
    else:
        write_npz(tmp_path, shards)
    files = sorted(str(p) for p in tmp_path.iterdir())
    seen = []
    original = dsmod._run_chunk

    def spy(job, chunk, *parts):
        seen.append(chunk)
        return original(job, chunk, *parts)

    monkeypatch.setattr(dsmod, "_run_chunk", spy)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=16, chunk_rows=40, scheduler="sync")
    check_same(res, reference(data, 16, True))
    used = 18 * 16                                   # 300 samples: 18 batches of 16, 12 dropped
    seen.sort(key=lambda c: c.sample_start)
    assert seen[0].sample_start == 0 and seen[-1].sample_stop == used
    assert all(a.sample_stop == b.sample_start for a, b in itertools.pairwise(seen))
    offsets = np.concatenate([[0], np.cumsum([100, 37, 0, 163])])
    for c in seen:
        rows_read = sum(stop - start for _, start, stop in c.segments)
        assert rows_read == c.sample_stop - c.sample_start
        assert offsets[c.segments[0][0]] + c.segments[0][1] == c.sample_start
        if fmt == "npz":   # any row is reachable: chunks are whole batches, 40 // 16 = 2 per chunk
            assert c.sample_stop - c.sample_start == 32 or c.sample_stop == used
            assert c.fragments == ()
        else:              # chunks end at row-group boundaries once they hold 32 samples
            assert c.sample_stop - c.sample_start < 32 + 16 or c.sample_stop == used
            for k, lo, hi in c.segments:
                assert lo % 16 == 0 and (hi % 16 == 0 or offsets[k] + hi in (offsets[k + 1], used))
            assert c.sample_stop - c.sample_start >= 32 or c is seen[-1]
    assert res.num_chunks == len(seen) == (9 if fmt == "npz" else len(seen))
    assert res.shards == tuple(files)


def test_pool_without_dask(tmp_path, monkeypatch):
    data = make_data(200, seed=10)
    write_parquet(tmp_path, split(data, [77, 123]))
    monkeypatch.setattr(dsmod, "_import_dask", lambda: None)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=32, num_workers=2)
    assert res.scheduler == "pool"
    check_same(res, reference(data, 32, True))


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_a_step_across_chunk_ends_runs_once_its_chunks_are_done(tmp_path, monkeypatch, scheduler):
    """Run here, each boundary step starts after every chunk holding its fragments has
    finished and, in order (sync), right after the last of them, before the next chunk
    starts, which finds those fragments let go: the fragments in memory are those of the
    chunks in flight, not the dataset's."""
    import threading
    import weakref

    data = make_data(256, seed=9)
    write_parquet(tmp_path, split(data, [64] * 4), row_group_size=32)
    events, lock = [], threading.Lock()
    run_chunk, run_boundary = dsmod._run_chunk, dsmod._run_boundary

    def chunk_spy(job, chunk, *parts):
        if scheduler == "sync":         # the fragments of every boundary run so far are let go
            assert all(ref() is None for _, refs in fragment_refs for ref in refs)
        out = run_chunk(job, chunk, *parts)
        with lock:
            events.append(("chunk", chunk.index, tuple(chunk.fragments)))
        return out

    fragment_refs = []

    def boundary_spy(job, step, *fragments):
        with lock:
            events.append(("boundary", step, len(fragments)))
            fragment_refs.append((step, [weakref.ref(m[step]["a"][0]) for m in fragments]))
        return run_boundary(job, step, *fragments)

    monkeypatch.setattr(dsmod, "_run_chunk", chunk_spy)
    monkeypatch.setattr(dsmod, "_run_boundary", boundary_spy)
    # chunks end at row groups (every 32 rows) at least 64 rows apart: steps of 48 samples
    # cross two of their ends (64 and 128, and 192), one boundary task each
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=48, chunk_rows=64, scheduler=scheduler,
                             num_workers=3)
    check_same(res, reference(data, 48, True))
    boundaries = [e for e in events if e[0] == "boundary"]
    assert len(boundaries) >= 2 and all(n == 2 for _, _, n in boundaries)
    for _, step, _ in boundaries:
        at = events.index(("boundary", step, 2))
        holders = [e for e in events if e[0] == "chunk" and step in e[2]]
        assert len(holders) == 2 and all(events.index(h) < at for h in holders)
        if scheduler == "sync":
            assert events[at - 1] == max(holders, key=lambda h: h[1])


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_shards_on_disk_run_locally_without_a_dask_graph(tmp_path, monkeypatch, scheduler):
    """The local schedulers run the chunks of files directly: no dask graph (it cost some 6 ms a
    call), and scheduler="sync" works without dask (it raised AttributeError on dask.delayed)."""
    import dask

    data = make_data(200, seed=10)
    write_parquet(tmp_path, split(data, [77, 123]), row_group_size=16)

    def no_graph(*args, **kwargs):
        raise AssertionError("a dask graph was built for shards on disk")

    monkeypatch.setattr(dask, "delayed", no_graph)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=48, chunk_rows=32, num_workers=2,
                             scheduler=scheduler)
    assert res.scheduler == scheduler and res.num_chunks > 2
    check_same(res, reference(data, 48, True))
    monkeypatch.setattr(dsmod, "_import_dask", lambda: None)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=48, chunk_rows=32, scheduler=scheduler)
    assert res.scheduler == ("pool" if scheduler == "threads" else "sync")
    check_same(res, reference(data, 48, True))


def test_per_step_summary(tmp_path):
    data = make_data(256, seed=11)
    write_parquet(tmp_path, split(data, [128, 128]))
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, per_step="summary", chunk_rows=64)
    ref = reference(data, 32, True)
    assert set(res.step_stats.data_vars) == {"observed_max_ids", "observed_max_unique_ids",
                                             "observed_required_buffer_size", "configured_max_ids_per_partition",
                                             "configured_max_unique_ids_per_partition"}
    kept = list(res.step_stats.data_vars)
    xr.testing.assert_equal(res.step_stats.drop_vars(["device", "sc", "partition"]), ref[kept])
    xr.testing.assert_identical(res.tuned.dataset, tune_limits(ref).dataset)
    np.testing.assert_array_equal(res.merged["max_ids_per_partition"], merge_step_stats(ref)["max_ids_per_partition"])
    with pytest.raises(ConfigError, match="per_step='full'"):
        res.tradeoff()


def test_tune_none(tmp_path):
    data = make_data(64, seed=12)
    write_npz(tmp_path, [data])
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, tune=None)
    assert res.tuned is None
    with pytest.raises(ConfigError, match="tune=None"):
        res.stack_limits()


# --------------------------------------------------------------------------------------
# dask collections
# --------------------------------------------------------------------------------------
def test_dask_dataframe_and_bag(tmp_path):
    dd = pytest.importorskip("dask.dataframe")
    db = pytest.importorskip("dask.bag")
    pd = pytest.importorskip("pandas")
    data = make_data(212, seed=13)
    list_type = pd.ArrowDtype(pa.list_(pa.int64()))
    frame = pd.DataFrame({k: pd.Series(pa.ListArray.from_arrays(pa.array(rs), pa.array(ids)), dtype=list_type)
                          for k, (ids, rs) in data.items()})
    ddf = dd.from_pandas(frame, npartitions=4)
    res = stats_over_dataset(ddf, FEATURES, TOPO, batch_size=32, chunk_rows=64, drop_remainder=False)
    ref = reference(data, 32, False)
    check_same(res, ref)
    assert res.shards == ("partition 0", "partition 1", "partition 2", "partition 3")

    records = [{k: list(map(int, ids[rs[i]:rs[i + 1]])) or None for k, (ids, rs) in data.items()}
               for i in range(212)]
    records[5]["c"] = int(records[5]["c"][0])          # a bare int is one id
    bag = db.from_sequence(records, npartitions=3)
    res = stats_over_dataset(bag, FEATURES, TOPO, batch_size=32, chunk_rows=64, drop_remainder=False)
    check_same(res, ref)


def test_dask_collection_errors_name_partition():
    dd = pytest.importorskip("dask.dataframe")
    db = pytest.importorskip("dask.bag")
    pd = pytest.importorskip("pandas")
    ddf = dd.from_pandas(pd.DataFrame({"a": [[1], [2]] * 8, "b": [[1]] * 16}), npartitions=2)
    with pytest.raises(ShardError, match="no column"):
        stats_over_dataset(ddf, FEATURES, TOPO, batch_size=4)
    bad = [{"a": [1], "b": [2], "c": [3]}] * 8 + [{"a": [1], "b": ["x"], "c": [3]}] * 8
    with pytest.raises(ShardError, match=r"partition 1, record \d+, column 'b'"):
        stats_over_dataset(db.from_sequence(bad, npartitions=2), FEATURES, TOPO, batch_size=4)


# --------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------
def _good_folder(tmp_path, n=128, sizes=(64, 64)):
    data = make_data(n, seed=14)
    return write_parquet(tmp_path, split(data, list(sizes)))


def test_truncated_parquet_names_file(tmp_path):
    paths = _good_folder(tmp_path)
    blob = Path(paths[1]).read_bytes()
    with open(paths[1], "wb") as fh:
        fh.write(blob[: len(blob) // 2])
    with pytest.raises(ShardError, match="part-00001.parquet: cannot read the Parquet metadata") as err:
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)
    assert err.value.path == paths[1]


def test_corrupt_parquet_pages_raise_and_return_nothing(tmp_path):
    paths = _good_folder(tmp_path, n=256, sizes=(64, 64, 64, 64))
    blob = bytearray(Path(paths[2]).read_bytes())
    meta = pq.ParquetFile(paths[2]).metadata
    col = meta.row_group(0).column(0)
    start = col.data_page_offset
    blob[start + 8:start + 200] = b"\xa5" * 192            # garbage inside the pages, footer intact
    with open(paths[2], "wb") as fh:
        fh.write(bytes(blob))
    with pytest.raises(ShardError, match="part-00002.parquet") as err:
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=32)
    assert err.value.path == paths[2]


@pytest.mark.parametrize("column, make, message", [
    ("b", lambda n: pa.array([[0.5]] * n, pa.list_(pa.float64())),
     r"part-00001\.parquet, column 'b': has type list<\w+: double>; expected a list of integer ids"),
    ("c", lambda n: pa.array(["1"] * n), r"part-00001\.parquet, column 'c': has type string"),
    ("a", None, r"part-00001\.parquet: no column 'a' \(feature 'a'\); the file has columns"),
])
def test_schema_mismatch_names_file_and_column(tmp_path, column, make, message):
    data = make_data(64, seed=15)
    write_parquet(tmp_path, [data])
    table = pq.read_table(tmp_path / "part-00000.parquet")
    table = table.drop_columns([column])
    if make is not None:
        table = table.append_column(column, make(64))
    pq.write_table(table, tmp_path / "part-00001.parquet")
    with pytest.raises(ShardError, match=message) as err:
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)
    assert err.value.path.endswith("part-00001.parquet")
    assert err.value.column == column
    assert "part-00001.parquet" in str(err.value)


def test_null_and_negative_ids_name_file_column_row(tmp_path):
    data = make_data(64, seed=16)
    paths = write_parquet(tmp_path, [data])
    table = pq.read_table(paths[0]).drop_columns(["a"])
    a = [[1, 2]] * 64
    a[9] = [1, None]
    pq.write_table(table.append_column("a", pa.array(a, pa.list_(pa.int64()))), paths[0])
    with pytest.raises(ShardError, match=r"part-00000\.parquet, column 'a': row 9 holds a null id"):
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)
    a[9] = [1, -4]
    pq.write_table(table.append_column("a", pa.array(a, pa.list_(pa.int64()))), paths[0])
    with pytest.raises(ShardError, match=r"part-00000\.parquet, column 'a': negative id -4 in row 9"):
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)


def test_npz_errors(tmp_path):
    data = make_data(64, seed=17)
    good = tmp_path / "good"
    write_npz(good, split(data, [32, 32]))
    blob = (good / "shard-001.npz").read_bytes()
    # truncated archive
    bad = tmp_path / "truncated"
    write_npz(bad, split(data, [32, 32]))
    with open(bad / "shard-001.npz", "wb") as fh:
        fh.write(blob[: len(blob) - 40])
    with pytest.raises(ShardError, match=r"shard-001\.npz: not a readable NPZ archive"):
        stats_over_dataset(bad, FEATURES, TOPO, batch_size=32)
    # missing member, float ids, row splits that do not end at len(ids), rows that differ
    cases = [
        (lambda a: a.pop("a_row_splits"), r"x\.npz: no member 'a_row_splits' for column 'a'"),
        (lambda a: a.update(a_ids=a["a_ids"].astype(float)), r"x\.npz, column 'a': 'a_ids.npy' has dtype float64"),
        (lambda a: a.update(a_row_splits=a["a_row_splits"] + 1),
         r"x\.npz, column 'a': a_row_splits must run from 0 to len\(a_ids\)"),
        (lambda a: a.update(c_row_splits=a["c_row_splits"][:11], c_ids=a["c_ids"][:int(a["c_row_splits"][10])]),
         r"x\.npz: column 'c' has 10 rows but column 'a' has 64"),
    ]
    for i, (change, message) in enumerate(cases):
        folder = tmp_path / f"case{i}"
        folder.mkdir()
        arrays = {}
        for k, (ids, rs) in data.items():
            arrays[f"{k}_ids"], arrays[f"{k}_row_splits"] = ids, rs
        change(arrays)
        np.savez(folder / "x.npz", **arrays)
        with pytest.raises(ShardError, match=message) as err:
            stats_over_dataset(folder, FEATURES, TOPO, batch_size=32)
        assert "x.npz" in str(err.value) and err.value.path.endswith("x.npz")


def test_npz_corrupt_compressed_member(tmp_path):
    import zipfile

    path = write_npz(tmp_path, [make_data(64, seed=3)], compressed=True)[0]
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("b_ids.npy")
    blob = bytearray(Path(path).read_bytes())
    start = info.header_offset + 30 + len(info.filename) + 40
    blob[start:start + 30] = b"\x00" * 30          # inside the deflate stream of b_ids
    Path(path).write_bytes(bytes(blob))
    with pytest.raises(ShardError, match=r"shard-000\.npz.*'b_ids\.npy'") as err:
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)
    assert err.value.path == path


def test_npz_corrupt_row_splits_inside(tmp_path):
    data = make_data(64, seed=18)
    ids, rs = data["b"]
    rs = rs.copy()
    rs[10], rs[11] = rs[11] + 5, rs[10]       # decreasing inside
    data["b"] = (ids, rs)
    arrays = {}
    for k, (i_, r_) in data.items():
        arrays[f"{k}_ids"], arrays[f"{k}_row_splits"] = i_, r_
    np.savez(tmp_path / "x.npz", **arrays)
    with pytest.raises(ShardError, match=r"x\.npz, column 'b': b_row_splits is not non-decreasing"):
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)


def test_empty_sources(tmp_path):
    with pytest.raises(InputError, match="holds no Parquet"):
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)
    with pytest.raises(InputError, match="matches no file"):
        stats_over_dataset(str(tmp_path / "*.parquet"), FEATURES, TOPO, batch_size=32)
    with pytest.raises(InputError, match="no such file or directory"):
        stats_over_dataset(tmp_path / "missing", FEATURES, TOPO, batch_size=32)
    with pytest.raises(InputError, match="empty list"):
        stats_over_dataset([], FEATURES, TOPO, batch_size=32)
    write_npz(tmp_path, [rows(make_data(8), 0, 0)] * 2)
    with pytest.raises(InputError, match="no samples: the 2 shard"):
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)


def test_batch_and_remainder_checks(tmp_path):
    data = make_data(70, seed=19)
    write_npz(tmp_path, [data])
    with pytest.raises(InputError, match="batch_size 30 does not divide over 2 devices x 2"):
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=30)
    with pytest.raises(InputError, match="the final batch would hold 6 samples"):
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, drop_remainder=False)
    with pytest.raises(InputError, match="fewer than one batch of 128"):
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=128)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)
    assert (res.num_steps, res.dropped_samples, res.num_samples) == (2, 6, 64)
    assert "dropped: the final 6 samples" in repr(res)


def test_mixed_formats_and_bad_arguments(tmp_path):
    data = make_data(64, seed=20)
    write_npz(tmp_path, [data])
    write_parquet(tmp_path, [data])
    with pytest.raises(InputError, match="mixes Parquet and NPZ"):
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32)
    npz = str(tmp_path / "shard-000.npz")
    for kwargs, exc, message in [
        ({"scheduler": "processes"}, ConfigError, "scheduler must be"),
        ({"scheduler": "threads", "client": object()}, ConfigError, "either scheduler= or client="),
        ({"tune": "mean"}, ConfigError, "tune must be"),
        ({"percentile": 0}, ConfigError, "percentile must be"),
        ({"columns": {"zz": "a"}}, ConfigError, "unknown features"),
        ({"columns": ["a"]}, ConfigError, "one column per feature"),
        ({"chunk_rows": 0}, ConfigError, "chunk_rows must be"),
        ({"num_threads": 0}, ConfigError, "num_threads must be"),
        ({"per_step": "some"}, ConfigError, "per_step must be"),
        ({"drop_remainder": 1}, ConfigError, "drop_remainder must be"),
        ({"client": object()}, ConfigError, "client must be a dask.distributed.Client"),
    ]:
        with pytest.raises(exc, match=message):
            stats_over_dataset([npz], FEATURES, TOPO, batch_size=32, **kwargs)


def test_progress_bar(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tqdm")
    data = make_data(128, seed=21)
    write_npz(tmp_path, split(data, [64, 64]))
    stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=32, progress=True)
    err = capsys.readouterr().err
    assert "scwork stats over dataset" in err and "4/4" in err
    monkeypatch.setenv("SCWORK_PROGRESS", "0")
    stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=32)
    stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=32, progress=False)
    assert capsys.readouterr().err == ""


def test_import_stays_light():
    import subprocess

    code = ("import sys, scwork.sharding.dataset_stats; "
            "print([m for m in ('dask', 'pyarrow', 'numba', 'distributed') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --------------------------------------------------------------------------------------
# dask.distributed (slow: starts a LocalCluster of 2 processes)
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("dask")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=40) as lc, distributed.Client(lc) as client:
        yield lc, client


@pytest.mark.slow
def test_local_cluster_equals_local(tmp_path, cluster):
    lc, client = cluster
    data = make_data(400, seed=22)
    write_parquet(tmp_path, split(data, [150, 3, 0, 117, 130]))
    local = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=64, drop_remainder=False)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=64, drop_remainder=False,
                             client=client)
    assert res.scheduler == "distributed" and res.dask_backed and res.client is client
    # chunks end at shard ends (150, 270, 400): inner steps 0-3, 5-7, 9-12; steps 4 and 8 from fragments
    assert res.step_stats["ids"].chunks[0] == (4, 1, 3, 1, 4)
    check_same(res, reference(data, 32, False))
    xr.testing.assert_identical(res.compute().step_stats, local.step_stats)
    xr.testing.assert_identical(res.merged, local.merged)
    xr.testing.assert_identical(res.tuned.dataset, local.tuned.dataset)
    # a scheduler address connects (and owns) a client; a corrupt shard fails on a worker, named
    with stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, scheduler=lc.scheduler_address,
                            drop_remainder=False, per_step="summary") as res2:
        assert res2.client is not client and not res2.dask_backed
        xr.testing.assert_identical(res2.tuned.dataset, local.tuned.dataset)
    assert res2.client.status == "closed"
    path = tmp_path / "part-00003.parquet"
    blob = bytearray(path.read_bytes())
    start = pq.ParquetFile(path).metadata.row_group(0).column(0).data_page_offset
    blob[start + 8:start + 200] = b"\xa5" * 192
    path.write_bytes(bytes(blob))
    with pytest.raises(ShardError, match="part-00003.parquet") as err:
        stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=64, client=client)
    assert err.value.path.endswith("part-00003.parquet")


@pytest.mark.slow
def test_cluster_workers_share_their_host_cores(cluster):
    """Two one-thread workers on this host: each chunk's engine gets half the cores (at least one)."""
    from scwork.sharding._threads import available_cores

    _, client = cluster
    threads = dsmod._engine_threads("distributed", 2, 5, client)
    workers = client.scheduler_info()["workers"]
    cores = client.run(available_cores)
    assert set(threads) == set(workers)
    assert all(threads[a] == max(1, cores[a] // 2) for a in workers)
    from scwork.sharding._dataset_chunks import _engine_threads

    job = type("Job", (), {"engine_threads": threads})()
    for address in workers:      # what a task on that worker looks up
        assert client.submit(_engine_threads, job, workers=[address], pure=False).result() == threads[address]


def test_repr_html_lists_observed_and_tuned_limits(tmp_path):
    # One small Parquet dataset; the HTML shows each stack's observed and tuned limits.
    pytest.importorskip("pyarrow")
    import scwork
    from scwork.datasets import write_synthetic_parquet
    from scwork.sharding import FeatureSpec, TableSpec, stats_over_dataset

    write_synthetic_parquet(tmp_path, 2, rows_per_shard=64, features=["f0"], vocab_size=1000, seed=3)
    result = stats_over_dataset(tmp_path, [FeatureSpec("f0", TableSpec("t0", 1000, 8))],
                                scwork.Topology(1, 2), batch_size=32, progress=False)
    html = result._repr_html_()
    observed = int(result.merged["max_ids_per_partition"].max())
    assert "<table" in html and "t0" in html and f">{observed}<" in html.replace(",", "")


# -- issue 12: every broken NPZ is a ShardError; shards are written whole or not at all ----
def _corrupt_header_npz(path: Path) -> None:
    write_npz_shard(path, {"f": ([], [0, 0])})
    raw = path.read_bytes()
    # an unterminated string in the .npy header literal: numpy's parser raises tokenize.TokenError
    path.write_bytes(raw.replace(b"'shape': (0,)", b"'shape&: (0,)", 1))


def _unsupported_zip_version(path: Path) -> None:
    write_npz_shard(path, {"f": ([1], [0, 1])})
    raw = bytearray(path.read_bytes())
    central = raw.index(b"PK\x01\x02")
    raw[central + 6] = 109            # "version needed to extract" 10.9: zipfile raises NotImplementedError
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("corrupt", [_corrupt_header_npz, _unsupported_zip_version])
def test_broken_npz_shards_are_shard_errors(tmp_path, corrupt):
    path = tmp_path / "shard.npz"
    corrupt(path)
    specs = [FeatureSpec("f", TableSpec("t", 8, 8))]
    with pytest.raises(ShardError) as info:
        stats_over_dataset(str(path), specs, scwork.Topology(1, 1), batch_size=1, progress=False)
    assert str(path) in str(info.value)


def test_write_npz_shard_validates_first_and_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "shard.npz"
    write_npz_shard(path, {"f": ([1], [0, 1])})
    before = path.read_bytes()
    with pytest.raises(InputError):
        write_npz_shard(path, {"f": ([-1], [0, 1])})
    assert path.read_bytes() == before

    def failing_savez(fh, **arrays):
        fh.write(b"PK half")
        raise OSError("disk full")

    monkeypatch.setattr(dsmod.np, "savez", failing_savez)
    with pytest.raises(ShardError, match="disk full.*nothing was written"):
        write_npz_shard(path, {"f": ([2], [0, 1])})
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["shard.npz"]


@pytest.mark.parametrize("id_type, stored", [("auto", "int32"), ("int32", "int32"), ("int64", "int64")])
def test_write_npz_shard_id_types_read_to_the_same_statistics(tmp_path, id_type, stored):
    data = make_data(96, seed=31)
    for i, shard in enumerate(split(data, [40, 56])):
        write_npz_shard(tmp_path / f"s{i}.npz", shard, id_type=id_type)
        assert str(np.load(tmp_path / f"s{i}.npz")["a_ids"].dtype) == stored
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=32)
    check_same(res, reference(data, 32, True))


def test_write_npz_shard_keeps_int64_for_ids_beyond_int32(tmp_path):
    big = 2**31
    write_npz_shard(tmp_path / "s.npz", {"f": ([5, big], [0, 1, 2]), "g": ([7], [0, 0, 1])})
    with np.load(tmp_path / "s.npz") as z:
        assert z["f_ids"].dtype == np.int64 and z["f_ids"].tolist() == [5, big]
        assert z["g_ids"].dtype == np.int32
    with pytest.raises(InputError, match="does not fit in int32"):
        write_npz_shard(tmp_path / "t.npz", {"f": ([5, big], [0, 1, 2])}, id_type="int32")
    with pytest.raises(ConfigError, match="id_type must be one of"):
        write_npz_shard(tmp_path / "t.npz", {"f": ([5], [0, 1])}, id_type="uint8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.npz"]


def test_bit_flip_in_parquet_row_group_metadata_reads_or_is_a_shard_error(tmp_path):
    """A flipped byte in the row group's path_in_schema (decoded lazily by pyarrow) once
    raised a raw UnicodeDecodeError; the scan no longer decodes column-chunk metadata and
    the data pages are intact, so the rows read back exactly."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "shard.parquet"
    pq.write_table(pa.table({"abcdef": pa.array([[1], [2]], pa.list_(pa.int64()))}), path)
    raw = bytearray(path.read_bytes())
    raw[raw.rindex(b"abcdef")] = 0xE6        # the last copy of the name: the row group's path_in_schema
    path.write_bytes(bytes(raw))
    res = stats_over_dataset(str(path), [FeatureSpec("abcdef", TableSpec("t", 8, 8))], scwork.Topology(1, 1),
                             batch_size=1, progress=False)
    assert res.num_steps == 2 and res.num_ids == 2


_PARQUET_BIT_FLIPS = """
import random, sys
import pyarrow as pa, pyarrow.parquet as pq
import scwork
from scwork.errors import ScworkError
from scwork.sharding import FeatureSpec, TableSpec
from scwork.sharding.dataset_stats import stats_over_dataset
path = sys.argv[1]
pq.write_table(pa.table({"f": pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), pa.array([0], pa.int64()))}),
               path)
raw = open(path, "rb").read()
rng = random.Random(1)
for k in range(150):
    mutated = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
    open(path, "wb").write(bytes(mutated))
    try:
        stats_over_dataset(path, [FeatureSpec("f", TableSpec("t", 8, 8))], scwork.Topology(1, 1), batch_size=1,
                           progress=False)
    except ScworkError:
        pass
"""


def test_corrupt_parquet_metadata_never_aborts_the_process(tmp_path):
    """Bit flips in the footer (mutation 76 of this seed: a level-histogram size
    mismatch) made pyarrow's RowGroupMetaData.column() throw an uncaught C++
    exception: the process aborted. The scan no longer touches column-chunk metadata."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", _PARQUET_BIT_FLIPS, str(tmp_path / "shard.parquet")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_step_buffers_are_reused_only_when_nothing_holds_them():
    """A step's ids buffer is recycled once no batch and no view of its ids is left, never before."""
    from scwork.sharding import _dataset_chunks as chunks

    rows = {"a": (np.arange(10, dtype=np.int32), np.array([0, 4, 10])), "b": (np.arange(5) + 7, np.array([0, 2, 5]))}
    want = np.concatenate([np.arange(10), np.arange(5) + 7])

    def address(batch):
        return batch._ids.__array_interface__["data"][0]

    chunks._release_step_buffers()
    try:
        first = chunks._step_batch(rows, 0, 2, ["a", "b"], recycle=True)
        second = chunks._step_batch(rows, 0, 2, ["a", "b"], recycle=True)
        third = chunks._step_batch(rows, 0, 2, ["a", "b"], recycle=True)    # both pooled buffers in use
        assert len({address(first), address(second), address(third)}) == 3
        kept = first.ids("a")
        where = address(first)
        del first
        fourth = chunks._step_batch(rows, 0, 2, ["a", "b"], recycle=True)    # a view still holds it
        assert address(fourth) != where
        np.testing.assert_array_equal(kept, np.arange(10))
        del kept
        fifth = chunks._step_batch(rows, 0, 2, ["a", "b"], recycle=True)
        assert address(fifth) == where
        for batch in (second, third, fourth, fifth):
            np.testing.assert_array_equal(batch._ids, want)
            assert batch._ids.dtype == np.int64 and batch.batch_size == 2
            np.testing.assert_array_equal(batch.row_splits("b"), [0, 2, 5])
    finally:
        chunks._release_step_buffers()
    assert not chunks._STEP_BUFFERS


def test_step_buffers_keep_row_splits_someone_holds():
    """A held view of a batch's row-splits array (as the engine takes) keeps its buffers out of reuse; a
    step cut from the middle of the rows gets splits from 0 (the read splits shifted in place)."""
    from scwork.sharding import _dataset_chunks as chunks

    rows = {"a": (np.arange(9, dtype=np.int32), np.array([0, 1, 3, 6, 9])),
            "b": (np.arange(4) + 50, np.array([0, 0, 2, 3, 4]))}
    chunks._release_step_buffers()
    try:
        first = chunks._step_batch(rows, 2, 4, ["a", "b"], recycle=True)
        np.testing.assert_array_equal(first.row_splits("a"), [0, 3, 6])
        np.testing.assert_array_equal(first.row_splits("b"), [0, 1, 2])
        np.testing.assert_array_equal(first._ids, [3, 4, 5, 6, 7, 8, 52, 53])
        splits = first._splits[1]          # feature b's splits inside the batch's one array: after a's 6 ids
        where = first._splits.__array_interface__["data"][0]
        del first
        second = chunks._step_batch(rows, 0, 2, ["a", "b"], recycle=True)
        third = chunks._step_batch(rows, 1, 3, ["a", "b"], recycle=True)
        assert where not in {b._splits.__array_interface__["data"][0] for b in (second, third)}
        np.testing.assert_array_equal(splits, [6, 7, 8])
        np.testing.assert_array_equal(second.row_splits("a"), [0, 1, 3])
        np.testing.assert_array_equal(third.row_splits("b"), [0, 2, 3])
        np.testing.assert_array_equal(third._ids, [1, 2, 3, 4, 5, 50, 51, 52])
        del splits, second
        fourth = chunks._step_batch(rows, 0, 2, ["a", "b"], recycle=True)
        assert fourth._splits.__array_interface__["data"][0] == where
    finally:
        chunks._release_step_buffers()


def test_profile_counts_each_chunk_read_as_one_parallel_task(tmp_path):
    """Under the projection's profiler, the chunks' reads and batch copies form one batch of tasks."""
    from scwork.sharding import _profile
    from scwork.sharding._dataset_chunks import READ_BATCH

    data = make_data(256, seed=9)
    write_parquet(tmp_path, split(data, [64] * 4), row_group_size=32)
    with _profile.profiled(4) as profiles, _profile.call():
        res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=64, scheduler="sync")
    (prof,) = profiles
    names = [name for name, _ in prof.batches]
    assert names.count(READ_BATCH) == 1
    index = names.index(READ_BATCH)
    reads = prof.batches[index][1]
    # profiled for 4 threads: one read per column of every chunk, one batch copy per step
    # (every step lies inside a chunk here)
    assert res.num_chunks == 4 and len(reads) == res.num_chunks * len(FEATURES) + res.num_steps
    assert all(t > 0 for t in reads)
    assert sum(prof.sizes[index]) == 2 * res.num_ids
    with _profile.profiled(1) as profiles, _profile.call():        # one thread: a chunk's read is one task
        one = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=64, scheduler="sync")
    names = [name for name, _ in profiles[0].batches]
    assert len(profiles[0].batches[names.index(READ_BATCH)][1]) == one.num_chunks + one.num_steps
    xr.testing.assert_identical(one.step_stats, res.step_stats)
    assert len(names) > 1                       # the engine's own batches are recorded beside it
    assert prof.critical_path_s(4) < prof.critical_path_s(1)
    check_same(res, reference(data, 32, True))


@pytest.mark.parametrize("recycle", [False, True])
def test_step_batch_copied_by_feature_on_threads_equals_the_one_pass_copy(monkeypatch, recycle):
    """A chunk with cores of its own copies a large step feature by feature on its threads:
    the same batch as the one-pass copy (ids widened from int32 and uint16, each feature's
    splits from a slice that starts anywhere), recycled buffers or fresh ones."""
    from scwork.sharding import _dataset_chunks as chunks

    rng = np.random.default_rng(3)
    lengths = {"a": rng.integers(0, 9, 40), "b": rng.integers(0, 3, 40), "c": np.zeros(40, np.int64)}
    dtypes = {"a": np.int32, "b": np.uint16, "c": np.int64}
    rows = {}
    for name, per_row in lengths.items():
        splits = np.concatenate([[0], np.cumsum(per_row)])
        rows[name] = (rng.integers(0, 60000, int(splits[-1])).astype(dtypes[name]), splits)
    names = ["b", "a", "c"]
    want = chunks._step_batch(rows, 7, 31, names)
    monkeypatch.setattr(chunks, "_COPY_BY_FEATURE_IDS", 0)
    from scwork.sharding import batch as batch_module

    calls, real = [], batch_module._copy_feature_into

    def spy(ids_out, *args):
        if ids_out is not None:          # a feature's ids copied on its own (not the one-pass copy's splits)
            calls.append(args[2])
        return real(ids_out, *args)

    monkeypatch.setattr(batch_module, "_copy_feature_into", spy)
    chunks._release_step_buffers()
    try:
        for threads in (2, 3, 8):
            calls.clear()
            got = chunks._step_batch(rows, 7, 31, names, recycle=recycle, threads=threads)
            assert sorted(calls) == [0, 1, 2]
            assert got._ids.dtype == np.int64 and got.batch_size == 24
            np.testing.assert_array_equal(got._ids, want._ids)
            np.testing.assert_array_equal(got._splits, want._splits)
            for name in names:
                np.testing.assert_array_equal(got.ids(name), rows[name][0][rows[name][1][7]:rows[name][1][31]])
                np.testing.assert_array_equal(got.row_splits(name), rows[name][1][7:32] - rows[name][1][7])
            del got
    finally:
        chunks._release_step_buffers()
    calls.clear()
    one = chunks._step_batch(rows, 7, 31, names, threads=1)     # one thread: the one-pass copy
    assert calls == []
    np.testing.assert_array_equal(one._ids, want._ids)


def test_large_steps_are_copied_by_feature_and_profiled_so(tmp_path, monkeypatch):
    """stats_over_dataset with several engine threads per chunk copies its steps by feature
    (the results unchanged), and the profile then times each feature's copy as a task."""
    from scwork.sharding import _dataset_chunks as chunks
    from scwork.sharding import _profile
    from scwork.sharding._dataset_chunks import READ_BATCH

    data = make_data(256, seed=9)
    write_parquet(tmp_path, split(data, [64] * 4), row_group_size=32)
    monkeypatch.setattr(chunks, "_COPY_BY_FEATURE_IDS", 0)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=64, num_threads=3,
                             num_workers=2)
    check_same(res, reference(data, 32, True))
    with _profile.profiled(4) as profiles, _profile.call():
        profiled = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=64, scheduler="sync")
    (prof,) = profiles
    names = [name for name, _ in prof.batches]
    reads = prof.batches[names.index(READ_BATCH)][1]
    # one read per column of every chunk, one copy per feature of every step
    assert len(reads) == (profiled.num_chunks + profiled.num_steps) * len(FEATURES)
    assert sum(prof.sizes[names.index(READ_BATCH)]) == 2 * profiled.num_ids
    xr.testing.assert_identical(profiled.step_stats, res.step_stats)


def test_profile_counts_each_chunk_and_boundary_task_own_work_as_one_task(tmp_path):
    """What a chunk or boundary task does besides its reads and engine tasks (collect_stats'
    set-up and results, the chunk's Dataset) is one task of its own batch, not serial time."""
    from scwork.sharding import _profile
    from scwork.sharding._dataset_chunks import READ_BATCH, TASK_BATCH

    data = make_data(256, seed=9)
    write_parquet(tmp_path, split(data, [64] * 4), row_group_size=32)
    with _profile.profiled(4) as profiles, _profile.call():
        # chunks end at row groups (every 32 rows) at least 64 rows apart: steps of 48 samples
        # cross two of their ends (64 and 128), a boundary task each
        res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=48, chunk_rows=64, scheduler="sync")
    (prof,) = profiles
    names = [name for name, _ in prof.batches]
    assert names.count(TASK_BATCH) == 1 and READ_BATCH in names
    own = prof.batches[names.index(TASK_BATCH)][1]
    assert res.num_chunks == 4 and len(own) == res.num_chunks + 2
    assert all(t > 0 for t in own)
    # every second once: serial, tasks (own work included), overlaps and the profiler's add up
    assert prof.serial_s > 0
    assert prof.serial_s + prof.task_s + prof.overlap_s + prof.profiler_s == pytest.approx(prof.total_s, rel=1e-9)
    check_same(res, reference(data, 48, True))


@pytest.mark.parametrize("num_threads, threaded_read", [(1, False), (2, True)])
def test_parquet_columns_decoded_on_threads_when_a_chunk_has_cores(tmp_path, monkeypatch, num_threads,
                                                                   threaded_read):
    from scwork.sharding import shards

    data = make_data(128, seed=10)
    write_parquet(tmp_path, split(data, [64, 64]))
    seen = []
    real = shards._read_parquet_rows

    def spy(piece, start, stop, colmap, use_threads=False):
        seen.append(use_threads)
        return real(piece, start, stop, colmap, use_threads)

    monkeypatch.setattr(shards, "_read_parquet_rows", spy)
    res = stats_over_dataset(tmp_path, FEATURES, TOPO, batch_size=32, chunk_rows=64, num_workers=1,
                             num_threads=num_threads)
    check_same(res, reference(data, 32, True))
    assert seen and set(seen) == {threaded_read}
