"""preprocess / compute_stats: [jte] preprocess_sparse_dense_matmul_input semantics.

Worked example, errors, limits, CSR.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import ConfigError, InputError, LimitExceededError, OutOfVocabularyError, TopologyError
from scwork.sharding import (
    FeatureBatch,
    FeatureSpec,
    SparsecoreConfig,
    TableSpec,
    compute_stats,
    plan_stacking,
    preprocess,
)
from scwork.sharding._reference import reference_preprocess
from scwork.testing import garbage_empty

pp = importlib.import_module("scwork.sharding.engine")
PAD = 2**31 - 1


# --------------------------------------------------------------------------------------
# the worked example: [sc-guide] §7's recipe with [jte] preprocess_sparse_dense_matmul_input's split
# --------------------------------------------------------------------------------------
@pytest.fixture
def worked():
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])})
    return batch, [FeatureSpec("f", TableSpec("t", 16, 8))], scwork.Topology(1, 2)


def test_worked_example_stats(worked):
    ds = compute_stats(*worked).sel(stack="t")
    assert ds["ids"].values.tolist() == [[[2, 2], [0, 3]]]
    assert ds["unique_ids"].values.tolist() == [[[2, 2], [0, 3]]]
    assert ds["max_ids_per_partition"].values.tolist() == [[2, 3]]
    assert ds["max_unique_ids_per_partition"].values.tolist() == [[2, 3]]
    assert ds["required_buffer_size_per_sc"].values.tolist() == [[16, 8]]
    assert ds["naive_ids_per_partition"].values.tolist() == [2, 5]
    assert ds["naive_unique_ids_per_partition"].values.tolist() == [2, 3]
    assert ds["input_ids"].values.tolist() == [[4, 3]]
    assert ds["dropped_ids"].item() == 0


def test_worked_example_csr_by_hand(worked):
    res = preprocess(*worked)
    buf = res.csr["t"]
    assert buf.buffer_size_per_sc == 16 and buf.row_pointers_per_sc == 8
    assert buf.row_pointers.tolist() == [[2, 10, 16, 16, 16, 16, 16, 16, 0, 3, 8, 8, 8, 8, 8, 8]]
    sc0 = buf.for_sc(0, 0)
    # partition 0: ids 0, 2 -> local rows 0, 1; partition 1 (from 8): ids 1, 3 -> rows 0, 1
    assert sc0["embedding_ids"].tolist() == [0, 1] + [PAD] * 6 + [0, 1] + [PAD] * 6
    assert sc0["sample_ids"].tolist() == [0, 0] + [PAD] * 6 + [0, 0] + [PAD] * 6
    assert np.isnan(sc0["gains"][2:8]).all() and sc0["gains"][[0, 1, 8, 9]].tolist() == [1.0] * 4
    sc1 = buf.for_sc(0, 1)
    assert sc1["embedding_ids"].tolist() == [0, 1, 2] + [PAD] * 13
    assert buf.partition(0, 1, 0)[0].size == 0


def test_per_sample_dedup_adds_gains_and_combiners():
    # sample 0: [4, 4, 6] weights [1, 2, 4]; sample 1: [4]
    batch = FeatureBatch.from_ragged({"f": ([4, 4, 6, 4], [0, 3, 4], [1.0, 2.0, 4.0, 3.0])})
    topo = scwork.Topology(1, 1)
    expect = {"sum": [3.0, 3.0, 4.0], "mean": [3 / 7, 1.0, 4 / 7],
              "sqrtn": [3 / np.sqrt(21), 1.0, 4 / np.sqrt(21)]}
    for comb, gains in expect.items():
        res = preprocess(batch, [FeatureSpec("f", TableSpec("t", 8, 8, combiner=comb))], topo)
        ids, samples, g = res.csr["t"].partition(0, 0, 0)
        assert ids.tolist() == [4, 4, 6] and samples.tolist() == [0, 1, 0]   # sorted by (id, row)
        np.testing.assert_allclose(g, gains, rtol=1e-6)
        assert res.stats["ids"].values.ravel().tolist() == [3]
        assert res.stats["unique_ids"].values.ravel().tolist() == [2]
        assert res.stats["input_ids"].values.ravel().tolist() == [4]


def test_unweighted_mean_uses_the_raw_sample_length():
    batch = FeatureBatch.from_ragged({"f": ([5, 5, 7], [0, 3])})
    res = preprocess(batch, [FeatureSpec("f", TableSpec("t", 8, 8, combiner="mean"))], scwork.Topology(1, 1))
    np.testing.assert_allclose(res.csr["t"].partition(0, 0, 0)[2], [2 / 3, 1 / 3], rtol=1e-6)


def test_stacked_tables_shift_partitions_and_rows():
    # P = 4 (2 chips x 2 SCs), rotation S = 2: t1 shifted by 2 partitions, rows offset by 8
    t0, t1 = TableSpec("t0", 32, 8), TableSpec("t1", 32, 8)
    batch = FeatureBatch.from_ragged({"a": ([1, 1, 1, 1], [0, 1, 2, 3, 4]), "b": ([1, 1, 1, 1], [0, 1, 2, 3, 4])})
    feats = [FeatureSpec("a", t0), FeatureSpec("b", t1)]
    res = preprocess(batch, feats, scwork.Topology(2, 2), stacking=[["t0", "t1"]])
    ds = res.stats.sel(stack="t0_t1")
    # id 1: t0 -> partition 1 row 0; t1 -> partition (1 + 2) % 4 = 3, row 0 + 32/4 = 8
    assert ds["naive_unique_ids_per_partition"].values.tolist() == [0, 1, 0, 1]
    assert ds["ids"].values[:, :, 1].tolist() == [[1, 1], [1, 1]]
    assert res.csr["t0_t1"].partition(0, 0, 3)[0].tolist() == [8]
    # feature stacking: b's sample is local row 1 of each slice (n = 1, k = 1)
    assert res.csr["t0_t1"].partition(0, 0, 3)[1].tolist() == [1]


# --------------------------------------------------------------------------------------
# random cases against the literal reference
# --------------------------------------------------------------------------------------
def _random_case(seed):
    rng = np.random.default_rng(seed)
    G, S = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dpc = 2 if (S % 2 == 0 and rng.random() < 0.3) else 1
    topo = scwork.Topology(G, S, devices_per_chip=dpc)
    P = topo.num_partitions
    GS = topo.num_devices * topo.sparsecores_per_device
    nt = int(rng.integers(1, 4))
    comb = str(rng.choice(["sum", "mean", "sqrtn"]))
    limits = rng.random() < 0.5
    tables = [TableSpec(f"t{i}", int(rng.integers(1, 40)), int(rng.integers(1, 20)), combiner=comb,
                        max_ids_per_partition=int(rng.integers(1, 5)) if limits and rng.random() < 0.7 else None,
                        max_unique_ids_per_partition=int(rng.integers(1, 4)) if limits and rng.random() < 0.5
                        else None) for i in range(nt)]
    feats = [FeatureSpec(f"f{i}", tables[int(rng.integers(0, nt))]) for i in range(int(rng.integers(1, 5)))]
    B = GS * int(rng.integers(1, 4))
    data = {}
    for f in feats:
        lengths = rng.integers(0, 6, size=B)
        ids = rng.integers(0, min(f.table.vocab_size, 6 if rng.random() < 0.5 else 10**6), size=lengths.sum())
        rs = np.concatenate([[0], np.cumsum(lengths)])
        data[f.name] = (ids, rs, rng.uniform(0.5, 2, lengths.sum())) if rng.random() < 0.5 else (ids, rs)
    used = sorted({f.table.name for f in feats})
    stacking = [None, [used], "auto"][int(rng.integers(0, 3))]
    return FeatureBatch(data), feats, topo, stacking, P


def _compare(res, stats, ref, plan):
    for name, r in ref.items():
        s = res.stats.sel(stack=name)
        assert np.array_equal(s["ids"].values, r["ids"])
        assert np.array_equal(s["unique_ids"].values, r["unique"])
        assert np.array_equal(s["kept_ids"].values, r["kept"])
        assert np.array_equal(s["max_ids_per_partition"].values, r["ids"].max(axis=1))
        assert np.array_equal(s["naive_ids_per_partition"].values, r["naive_ids"])
        assert np.array_equal(s["naive_unique_ids_per_partition"].values, r["naive_unique"])
        assert s["dropped_ids"].item() == r["dropped"]
        buf = res.csr[name]
        assert buf.buffer_size_per_sc == r["buffer_size_per_sc"]
        assert np.array_equal(buf.row_pointers, r["row_pointers"])
        assert np.array_equal(buf.embedding_ids, r["embedding_ids"])
        assert np.array_equal(buf.sample_ids, r["sample_ids"])
        assert np.array_equal(buf.gains.view(np.int32), r["gains"].view(np.int32)) or \
            np.array_equal(buf.gains, r["gains"], equal_nan=True)
        df = res.dropped
        d = df[df["stack"] == name]
        got = sorted(zip(d["device"], d["sc"], d["partition"], d["sample"], d["feature"], d["id"], d["count"]))
        assert got == r["drops"]
        assert d["count"].sum() == r["dropped"]
    for var in ("ids", "unique_ids", "kept_ids", "dropped_ids", "naive_unique_ids_per_partition",
                "required_buffer_size_per_sc"):
        assert np.array_equal(stats[var].values, res.stats[var].values), var


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_matches_literal_reference(seed):
    batch, feats, topo, stacking, _ = _random_case(seed)
    cfg = SparsecoreConfig(allow_id_dropping=True, max_ids_per_chip_per_sample=None)
    plan = plan_stacking(feats, topo, stacking, batch_size=batch.batch_size, config=cfg)
    res = preprocess(batch, feats, topo, stacking, cfg)
    stats = compute_stats(batch, feats, topo, stacking, cfg)
    _compare(res, stats, reference_preprocess(batch, plan, topo, allow_id_dropping=True), plan)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_numpy_backend_and_threads_agree(seed):
    batch, feats, topo, _, _ = _random_case(seed)
    cfg = SparsecoreConfig(allow_id_dropping=True, max_ids_per_chip_per_sample=None)
    a = preprocess(batch, feats, topo, None, cfg)
    b = preprocess(batch, feats, topo, None, cfg, backend="numpy")
    c = preprocess(batch, feats, topo, None, cfg, num_threads=3)
    for other in (b, c):
        assert a.stats.equals(other.stats)
        for name in a.csr:
            for key in ("row_pointers", "embedding_ids", "sample_ids"):
                assert np.array_equal(getattr(a.csr[name], key), getattr(other.csr[name], key))
            assert np.array_equal(a.csr[name].gains, other.csr[name].gains, equal_nan=True)
    assert compute_stats(batch, feats, topo, None, cfg, backend="numpy").equals(
        compute_stats(batch, feats, topo, None, cfg, num_threads=2))


def test_every_csr_slot_is_written(monkeypatch):
    """Buffers come from np.empty: fill them with garbage first and compare with the reference."""
    garbage_empty(monkeypatch, pp)
    for seed in range(12):
        batch, feats, topo, stacking, _ = _random_case(seed)
        cfg = SparsecoreConfig(allow_id_dropping=True, max_ids_per_chip_per_sample=None)
        plan = plan_stacking(feats, topo, stacking, batch_size=batch.batch_size, config=cfg)
        res = preprocess(batch, feats, topo, stacking, cfg)
        ref = reference_preprocess(batch, plan, topo, allow_id_dropping=True)
        for name, buf in res.csr.items():
            for key in ("row_pointers", "embedding_ids", "sample_ids"):
                assert not (getattr(buf, key) == -77).any()
                assert np.array_equal(getattr(buf, key), ref[name][key])
            assert not (buf.gains == -77.5).any()


def test_non_power_of_two_topology():
    rng = np.random.default_rng(7)
    topo = scwork.Topology(3, 3)            # P = 9, not a power of two
    B = 9 * 4
    lengths = rng.integers(0, 8, size=B)
    batch = FeatureBatch.from_ragged({"f": (rng.integers(0, 1000, lengths.sum()), np.r_[0, np.cumsum(lengths)])})
    feats = [FeatureSpec("f", TableSpec("t", 1000, 8))]
    plan = plan_stacking(feats, topo, None)
    res = preprocess(batch, feats, topo, None)
    _compare(res, compute_stats(batch, feats, topo, None), reference_preprocess(batch, plan, topo), plan)
    assert res.csr["t"].row_pointers_per_sc == 9


# --------------------------------------------------------------------------------------
# errors and limits
# --------------------------------------------------------------------------------------
def test_batch_not_divisible_says_which_sizes_divide():
    batch = FeatureBatch.from_ragged({"f": ([1] * 10, np.arange(11))})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    with pytest.raises(InputError, match=r"batch size 10 does not divide over 2 devices x 3 SparseCores = 6 "
                                         r"slices; use a multiple of 6, e.g. 6 or 12"):
        compute_stats(batch, feats, scwork.Topology(2, 3))
    with pytest.raises(InputError, match="e.g. 16"):
        compute_stats(batch, feats, scwork.Topology(4, 4))


def test_input_and_config_errors():
    batch = FeatureBatch.from_ragged({"f": ([1, 2], [0, 1, 2])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    with pytest.raises(InputError, match="must be a FeatureBatch"):
        compute_stats({"f": ([1], [0, 1])}, feats, scwork.Topology(1, 2))
    with pytest.raises(InputError, match="have no ids in the batch"):
        compute_stats(batch, feats + [FeatureSpec("g", TableSpec("u", 8, 8))], scwork.Topology(1, 2))
    two = FeatureBatch.from_ragged({"f": ([1, 2], [0, 1, 2]), "x": ([1, 2], [0, 1, 2])})
    with pytest.raises(InputError, match="no FeatureSpec describes"):
        compute_stats(two, feats, scwork.Topology(1, 2))
    with pytest.raises(TopologyError, match="no SparseCore"):
        compute_stats(batch, feats, scwork.Topology(2, 0))
    with pytest.raises(ConfigError, match="on_out_of_vocabulary"):
        compute_stats(batch, feats, scwork.Topology(1, 2), on_out_of_vocabulary="ignore")
    with pytest.raises(ConfigError, match="num_threads"):
        compute_stats(batch, feats, scwork.Topology(1, 2), num_threads=0)
    with pytest.raises(ConfigError, match="backend"):
        compute_stats(batch, feats, scwork.Topology(1, 2), backend="cuda")
    with pytest.raises(ConfigError, match="config must be"):
        compute_stats(batch, feats, scwork.Topology(1, 2), config={"allow_id_dropping": True})


def test_out_of_vocabulary_error_names_feature_sample_and_id():
    batch = FeatureBatch.from_ragged({"a": ([1, 2, 3, 4], [0, 2, 4]), "b": ([0, 9, 12, 1], [0, 1, 4])})
    feats = [FeatureSpec("a", TableSpec("ta", 8, 8)), FeatureSpec("b", TableSpec("tb", 10, 8))]
    for fn in (compute_stats, preprocess):
        with pytest.raises(OutOfVocabularyError) as info:
            fn(batch, feats, scwork.Topology(1, 2), stacking=None)
        err = info.value
        assert (err.feature, err.sample, err.id, err.vocab_size, err.count) == ("b", 1, 12, 10, 1)
        assert "feature 'b', sample 1: id 12" in str(err) and "vocab_size=10" in str(err)


def test_out_of_vocabulary_drop_counts_and_removes():
    batch = FeatureBatch.from_ragged({"a": ([1, 20, 3, 4], [0, 2, 4]), "b": ([0, 9, 12, 1], [0, 1, 4])},
                                     weights={"a": [1.0, 5.0, 1.0, 1.0]})
    feats = [FeatureSpec("a", TableSpec("ta", 8, 8, combiner="mean")),
             FeatureSpec("b", TableSpec("tb", 10, 8, combiner="mean"))]
    topo = scwork.Topology(1, 2)
    res = preprocess(batch, feats, topo, stacking=[["ta", "tb"]], on_out_of_vocabulary="drop")
    assert res.stats["out_of_vocabulary_ids"].values.tolist() == [2]
    clean = FeatureBatch.from_ragged({"a": ([1, 3, 4], [0, 1, 3]), "b": ([0, 9, 1], [0, 1, 3])},
                                     weights={"a": [1.0, 1.0, 1.0]})
    ref = preprocess(clean, feats, topo, stacking=[["ta", "tb"]])
    assert np.array_equal(res.csr["ta_tb"].gains, ref.csr["ta_tb"].gains, equal_nan=True)
    assert res.stats["ids"].equals(ref.stats["ids"])
    # the dropped id's weight 5.0 is not in sample 0's mean divisor: its gain is 1.0
    _, samples, gains = res.csr["ta_tb"].partition(0, 0, 1)
    assert gains[samples == 0].tolist() == [1.0]


def test_limit_exceeded_error_names_everything():
    # 2 devices x 2 SCs; device 1 SC 0 (samples 4-5) sends ids 0, 4, 8 to partition 0
    batch = FeatureBatch.from_ragged({"f": ([1, 1, 1, 1, 0, 4, 8, 2], [0, 1, 2, 3, 4, 6, 7, 7, 8])})
    feats = [FeatureSpec("f", TableSpec("t", 16, 8, max_ids_per_partition=2))]
    with pytest.raises(LimitExceededError) as info:
        compute_stats(batch, feats, scwork.Topology(2, 2))
    e = info.value
    assert (e.limit, e.stack, e.table, e.device, e.sc, e.partition, e.observed, e.configured) == \
        ("max_ids_per_partition", "t", "t", 1, 0, 0, 3, 2)
    assert "source SparseCore 0 of device 1 sends 3 ids to partition 0" in str(e)
    feats_u = [FeatureSpec("f", TableSpec("t", 16, 8, max_unique_ids_per_partition=2))]
    with pytest.raises(LimitExceededError, match="distinct ids") as info:
        preprocess(batch, feats_u, scwork.Topology(2, 2))
    assert info.value.limit == "max_unique_ids_per_partition"


def test_id_dropping_prefix_cut_by_hand():
    # one slice, P = 1: pairs sorted by (id, row): (0,r0) (0,r1) (1,r0) (2,r1) (2,r2); max_ids 3, max_unique 2
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 1, 0, 2, 2, 2], [0, 3, 5, 7])})
    feats = [FeatureSpec("f", TableSpec("t", 4, 8, max_ids_per_partition=3, max_unique_ids_per_partition=2))]
    cfg = SparsecoreConfig(allow_id_dropping=True)
    res = preprocess(batch, feats, scwork.Topology(1, 1), config=cfg)
    ids, samples, _ = res.csr["t"].partition(0, 0, 0)
    assert list(zip(ids.tolist(), samples.tolist())) == [(0, 0), (0, 1), (1, 0)]
    assert res.stats["ids"].values.ravel().tolist() == [5]          # observed before the drop
    assert res.stats["kept_ids"].values.ravel().tolist() == [3]
    assert res.stats["dropped_ids"].values.tolist() == [3]          # (2, r1) once, (2, r2) twice
    d = res.dropped
    assert list(zip(d["sample"], d["id"], d["count"])) == [(1, 2, 1), (2, 2, 2)]
    assert compute_stats(batch, feats, scwork.Topology(1, 1), config=cfg)["dropped_ids"].values.tolist() == [3]
    assert res.csr["t"].buffer_size_per_sc == 8                     # round_up(3, 8) * P


def test_max_ids_per_chip_per_sample():
    batch = FeatureBatch.from_ragged({"f": (np.arange(20) % 8, [0, 10, 20])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    with pytest.raises(LimitExceededError) as info:
        compute_stats(batch, feats, scwork.Topology(1, 2), config=SparsecoreConfig(max_ids_per_chip_per_sample=7))
    e = info.value
    # each SC: 10 ids -> 8 distinct (row dedup) split 4 + 4 -> 8 + 8 slots; device: 32 > 7 * 2 samples
    assert (e.limit, e.device, e.observed, e.configured) == ("max_ids_per_chip_per_sample", 0, 32, 14)
    ok = compute_stats(batch, feats, scwork.Topology(1, 2), config=SparsecoreConfig(max_ids_per_chip_per_sample=16))
    assert ok["required_buffer_size_per_device"].values.tolist() == [[32]]
    compute_stats(batch, feats, scwork.Topology(1, 2), config=SparsecoreConfig(max_ids_per_chip_per_sample=None))


def test_per_chip_check_is_off_by_default_as_in_jax_tpu_embedding():
    """16 distinct ids per sample on one SparseCore: 128 CSR slots for 2 samples, past TensorFlow's 64 per
    sample; jax-tpu-embedding (no such check) accepts it, and so does the default configuration."""
    batch = FeatureBatch.from_ragged({"f": (np.arange(32) * 8 % 1024, [0, 16, 32])})
    feats = [FeatureSpec("f", TableSpec("t", 1024, 8))]
    stats = compute_stats(batch, feats, scwork.Topology(1, 1))
    assert stats["max_ids_per_partition"].values.max() == 32
    with pytest.raises(LimitExceededError, match="max_ids_per_chip_per_sample"):
        compute_stats(batch, feats, scwork.Topology(1, 1), config=SparsecoreConfig(max_ids_per_chip_per_sample=4))


def test_zero_weight_sum_with_mean_is_an_input_error():
    batch = FeatureBatch.from_ragged({"f": ([1, 2], [0, 2], [1.0, -1.0])})
    with pytest.raises(InputError, match="sample 0: the weights sum to 0"):
        preprocess(batch, [FeatureSpec("f", TableSpec("t", 8, 8, combiner="mean"))], scwork.Topology(1, 1))


def test_table_level_limits_from_config():
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 4])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    with pytest.raises(LimitExceededError, match="max_ids_per_partition=1"):
        compute_stats(batch, feats, scwork.Topology(1, 1), config=SparsecoreConfig(max_ids_per_table={"t": 1}))


def test_stats_dataset_is_self_describing(worked):
    ds = compute_stats(*worked)
    assert dict(ds.sizes) == {"stack": 1, "device": 1, "sc": 2, "partition": 2}
    for name, var in ds.variables.items():
        assert var.attrs.get("long_name"), name
    for name, var in ds.data_vars.items():
        assert "units" in var.attrs, name
    assert ds["ids"].dims == ("stack", "device", "sc", "partition")
    assert ds["naive_ids_per_partition"].dims == ("stack", "partition")
    assert ds.attrs["num_partitions"] == 2 and ds.attrs["samples_per_sc"] == 1


def test_result_repr_and_empty_dropped(worked):
    res = preprocess(*worked)
    assert "PreprocessResult(1 stacks" in repr(res) and "max_ids_per_partition 3" in repr(res)
    assert len(res.dropped) == 0 and list(res.dropped.columns)[:3] == ["stack", "table", "feature"]
    assert "CsrBuffers('t'" in repr(res.csr["t"])


def test_empty_batch_of_ids():
    batch = FeatureBatch.from_ragged({"f": ([], [0, 0, 0, 0, 0])})
    res = preprocess(batch, [FeatureSpec("f", TableSpec("t", 8, 8))], scwork.Topology(2, 2))
    assert res.stats["ids"].sum() == 0
    assert (res.csr["t"].embedding_ids == PAD).all() and (res.csr["t"].row_pointers == 0).all()


def test_a_stacking_plan_can_be_reused():
    t0, t1 = TableSpec("t0", 50, 8), TableSpec("t1", 20, 8)
    feats = [FeatureSpec("a", t0), FeatureSpec("b", t1)]
    topo = scwork.Topology(2, 2)
    plan = plan_stacking(feats, topo, stacking=[["t1", "t0"]])
    batch = FeatureBatch.from_dense({"a": [[1, 2], [3, 4], [5, 6], [7, 8]], "b": [[1], [2], [3], [4]]})
    a = preprocess(batch, feats, topo, stacking=plan)
    b = preprocess(batch, feats, topo, stacking=[["t1", "t0"]])
    assert a.plan is plan and a.stats.equals(b.stats)
    assert np.array_equal(a.csr["t1_t0"].embedding_ids, b.csr["t1_t0"].embedding_ids)


def test_memory_does_not_grow_with_vocabulary_size():
    # The same ids against a 1e3-row and a 1e9-row table: peak allocation of the
    # engine must not depend on the vocabulary (no dense per-vocab arrays).
    import tracemalloc

    import scwork
    from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats, preprocess

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, size=20_000)
    splits = np.arange(0, 20_001, 20)
    batch = FeatureBatch.from_ragged({"f": (ids, splits)})
    topo = scwork.Topology(2, 4)
    peaks = {}
    for vocab in (1_000, 1_000_000_000):
        features = [FeatureSpec("f", TableSpec("t", vocab, 16))]
        compute_stats(batch, features, topo)  # compile / warm caches outside the measurement
        preprocess(batch, features, topo)
        tracemalloc.start()
        compute_stats(batch, features, topo)
        preprocess(batch, features, topo)
        peaks[vocab] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    # A dense per-vocab int32 array would add 4 GB; allow noise of a few hundred KB.
    assert peaks[1_000_000_000] < peaks[1_000] + 512 * 1024, peaks


def test_preprocess_result_repr_html_shows_each_stack():
    import scwork
    from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, preprocess

    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])})
    result = preprocess(batch, [FeatureSpec("f", TableSpec("t<b>", 16, 8))], scwork.Topology(1, 2))
    html = result._repr_html_()
    assert "t&lt;b&gt;" in html and "t<b>" not in html
    assert ">3<" in html and ">16<" in html  # max ids per partition; CSR entries per SC
