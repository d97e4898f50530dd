"""Limits: closed-form estimate (hand-computed), per-step statistics, tuner, trade-off table."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import ConfigError, InputError
from scwork.sharding import (
    FeatureBatch,
    FeatureSpec,
    SparsecoreConfig,
    TableSpec,
    collect_stats,
    compute_stats,
    estimate_limits,
    tradeoff,
    tune_limits,
)
from scwork.sharding.limits import (
    coo_buffer_bytes_per_device,
    merge_step_stats,
    static_partition_buffer_bytes,
)


# --------------------------------------------------------------------------------------
# estimate
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("B, valency, G, S, ids, uniq", [
    # L = 1024 * 20 = 20480, L/P = 1280, peak = 4096 + 1024 + 2 sqrt(1280) = 5191.55
    # 1.25 peak = 6489.44 -> 6496, 0.625 peak = 3244.72 -> 3248
    (16384, 20, 4, 4, 6496, 3248),
    # L = 1024 * 10 = 10240, L/P = 2560, peak = 2048 + 2048 + 2 sqrt(2560) = 4197.19
    # 1.25 peak = 5246.49 -> 5248, 0.625 peak = 2623.25 -> 2624
    (4096, 10, 2, 2, 5248, 2624),
    # P = 1: L = 64, peak = 12.8 + 51.2 + 16 = 80: 1.25 * 80 = 100 -> 104, 0.625 * 80 = 50 -> 56
    (64, 1, 1, 1, 104, 56),
    # L = 1024 * 1, L/P = 64: peak = 204.8 + 51.2 + 16 = 272: 340 -> 344, 170 -> 176
    (16384, 1, 4, 4, 344, 176),
    # valency 0: peak 0 -> at least one rounding unit
    (128, 0, 2, 2, 8, 8),
])
def test_estimate_hand_computed(B, valency, G, S, ids, uniq):
    est = estimate_limits(B, valency, scwork.Topology(G, S))
    assert (est["max_ids_per_partition"], est["max_unique_ids_per_partition"]) == (ids, uniq)
    L = B / G / S * valency
    P = G * S
    assert est["ids_per_sc"] == L
    assert est["peak"] == pytest.approx(0.2 * L + 0.8 * L / P + 2 * math.sqrt(L / P))


def test_estimate_exact_multiple_is_not_bumped():
    # peak = 64 exactly needs L + 2 sqrt(L) = 64 with P = 1: sqrt(L) = -1 + sqrt(65)... use round_to=1
    est = estimate_limits(64, 1, scwork.Topology(1, 1), round_to=1)
    assert (est["max_ids_per_partition"], est["max_unique_ids_per_partition"]) == (100, 50)


def test_estimate_per_stack_and_errors():
    ds = estimate_limits(16384, {"a": 20, "b": 10}, scwork.Topology(4, 4))
    assert ds["stack"].values.tolist() == ["a", "b"] and ds["max_ids_per_partition"].dims == ("stack",)
    assert ds["max_ids_per_partition"].sel(stack="a").item() == 6496
    assert ds["max_ids_per_partition"].attrs["units"] == "ids"
    with pytest.raises(ConfigError, match="valency"):
        estimate_limits(16, -1, scwork.Topology(1, 1))
    with pytest.raises(ConfigError, match=r"valency\['b'\]"):
        estimate_limits(16, {"a": 1, "b": float("nan")}, scwork.Topology(1, 1))
    with pytest.raises(ConfigError, match="batch_size"):
        estimate_limits(0, 1, scwork.Topology(1, 1))
    with pytest.raises(ConfigError, match="topology"):
        estimate_limits(16, 1, "4x4")


def test_estimate_is_monotone():
    topo = scwork.Topology(2, 4)
    vals = [estimate_limits(4096, v, topo)["max_ids_per_partition"] for v in (1, 2, 5, 10, 50)]
    assert vals == sorted(vals)


# --------------------------------------------------------------------------------------
# collect_stats
# --------------------------------------------------------------------------------------
def _data(steps=5, B=64, seed=0, weights=None):
    return scwork.datasets.synthetic(B, num_steps=steps, features=2, vocab_size=500, seed=seed, weights=weights)


def _feats(limit=None, unique=None):
    t = TableSpec("t", 500, 8, max_ids_per_partition=limit, max_unique_ids_per_partition=unique)
    return [FeatureSpec("f0", t), FeatureSpec("f1", TableSpec("u", 500, 8))]


def test_collect_stats_equals_per_step_engine():
    data = _data(weights="random")
    topo = scwork.Topology(2, 2)
    feats = _feats(limit=1, unique=1)      # far below observed: the engine alone would raise
    ds = collect_stats(data.batches(), feats, topo, stacking=None)
    assert ds.sizes["step"] == 5 and ds.attrs["num_steps"] == 5
    assert ds["configured_max_ids_per_partition"].sel(stack="t").item() == 1
    assert ds["configured_max_unique_ids_per_partition"].sel(stack="u").item() == -1
    for i, raw in enumerate(data.batches()):
        ref = compute_stats(FeatureBatch(raw), _feats(), topo, stacking=None)
        for v in ("ids", "unique_ids", "max_ids_per_partition", "required_buffer_size_per_sc", "input_ids",
                  "naive_unique_ids_per_partition"):
            assert ds[v].isel(step=i).values.tolist() == ref[v].values.tolist()
        assert ds["observed_max_ids"].isel(step=i).values.tolist() == \
            ref["max_ids_per_partition"].max(["device", "partition"]).values.tolist()
    merged = merge_step_stats(ds)
    assert merged["max_ids_per_partition"].values.tolist() == ds["max_ids_per_partition"].max("step").values.tolist()


def test_collect_stats_coordinates_follow_each_call():
    """The result's coordinates (kept between calls of one plan) are those of each call's steps."""
    data = _data(weights="random")
    for topo, steps, stacking in ((scwork.Topology(2, 2), 5, None), (scwork.Topology(2, 2), 2, None),
                                  (scwork.Topology(1, 4), 3, None), (scwork.Topology(2, 2), 2, "auto")):
        ds = collect_stats(data.batches(), _feats(), topo, stacking=stacking, max_steps=steps)
        one = compute_stats(FeatureBatch(next(iter(data.batches()))), _feats(), topo, stacking=stacking)
        assert ds["step"].values.tolist() == list(range(steps))
        for name in ("stack", "device", "sc", "partition"):
            assert ds[name].values.tolist() == one[name].values.tolist(), name
            assert ds[name].attrs == one[name].attrs
        assert ds.indexes["step"].tolist() == list(range(steps))
        assert ds["ids"].isel(step=0).values.tolist() == one["ids"].values.tolist()


def test_collect_stats_errors_and_max_steps():
    topo = scwork.Topology(1, 2)
    ds = collect_stats(_data(steps=4).batches(), _feats(), topo, max_steps=2)
    assert ds.sizes["step"] == 2
    with pytest.raises(InputError, match="no batches"):
        collect_stats([], _feats(), topo)
    b1 = FeatureBatch(_data(B=8).step(0))
    b2 = FeatureBatch(_data(B=16).step(0))
    with pytest.raises(InputError, match="step 1: batch size 16"):
        collect_stats([b1, b2], _feats(), topo)
    with pytest.raises(InputError, match="step 0"):
        collect_stats([42], _feats(), topo)


def test_collect_stats_prepares_a_step_ahead_but_raises_in_step_order():
    """Step k + 1 is read and prepared while step k runs; its errors still come after step k's."""
    from scwork.errors import OutOfVocabularyError

    topo = scwork.Topology(1, 2)
    good = FeatureBatch(_data(B=8).step(0))
    # one id a sample; f0's are past its table's 500 rows
    bad_ids = FeatureBatch.from_ragged({"f0": ([600] * 8, list(range(9))), "f1": ([1] * 8, list(range(9)))})
    other_size = FeatureBatch(_data(B=16).step(0))
    read = []

    def batches(*items):
        for i, b in enumerate(items):
            read.append(i)
            yield b

    # step 1's batch size error is found while step 0 runs, but step 0's own error comes first
    with pytest.raises(OutOfVocabularyError) as err:
        collect_stats(batches(bad_ids, other_size), _feats(), topo, num_threads=2)
    assert err.value._collect_step == 0          # the step it came from (stats_over_dataset reads it)
    with pytest.raises(InputError, match="step 1: batch size 16") as err:
        collect_stats(batches(good, other_size, good), _feats(), topo, num_threads=2)
    assert err.value._collect_step == 1

    def failing():
        yield good
        yield good
        raise RuntimeError("reader failed at step 2")

    with pytest.raises(RuntimeError, match="step 2"):
        collect_stats(failing(), _feats(), topo, num_threads=2)
    # the read ahead never passes max_steps, and every step is still each batch's statistics
    read.clear()
    ds = collect_stats(batches(good, good, good, good), _feats(), topo, max_steps=3, num_threads=2)
    assert read == [0, 1, 2] and ds.sizes["step"] == 3
    one = compute_stats(good, _feats(), topo, stacking="auto", num_threads=1)
    for i in range(3):
        assert ds["ids"].isel(step=i).values.tolist() == one["ids"].values.tolist()
        assert ds["observed_max_ids"].isel(step=i).values.tolist() == \
            one["max_ids_per_partition"].max(["device", "partition"]).values.tolist()


# --------------------------------------------------------------------------------------
# tuner
# --------------------------------------------------------------------------------------
def _fake_steps(series_ids, series_uniq=None, bufs=None):
    """A step_stats Dataset with one stack and given per-step observed values (1 device, 1 SC, P = 1)."""
    T = len(series_ids)
    series_uniq = series_ids if series_uniq is None else series_uniq
    bufs = [8 * math.ceil(v / 8) for v in series_ids] if bufs is None else bufs
    ids = np.array(series_ids, np.int64).reshape(T, 1, 1, 1, 1)
    uniq = np.array(series_uniq, np.int64).reshape(T, 1, 1, 1, 1)
    D5 = ("step", "stack", "device", "sc", "partition")
    return xr.Dataset(
        {"ids": (D5, ids), "unique_ids": (D5, uniq),
         "observed_max_ids": (("step", "stack"), ids[:, :, 0, 0, 0]),
         "observed_max_unique_ids": (("step", "stack"), uniq[:, :, 0, 0, 0]),
         "observed_required_buffer_size": (("step", "stack"), np.array(bufs, np.int64).reshape(T, 1))},
        coords={"stack": ["s"], "step": np.arange(T)})


def test_tune_max_and_percentile_by_hand():
    ds = _fake_steps(list(range(1, 101)), [v // 2 for v in range(1, 101)])
    tmax = tune_limits(ds)
    assert tmax.stack_limits() == {"s": (104, 56)}          # 100 -> 104, 50 -> 56
    assert float(tmax.dataset["share_steps_needing_minibatching"].item()) == 0.0
    tp = tune_limits(ds, method="percentile", percentile=90)
    # 90th percentile (inverted cdf) of 1..100 is 90 -> 96; of 0..50 (v // 2) is 45 -> 48
    assert tp.stack_limits() == {"s": (96, 48)}
    assert tp.dataset["share_steps_over_max_ids"].item() == pytest.approx(0.04)        # 97..100
    assert tp.dataset["share_steps_over_max_unique_ids"].item() == pytest.approx(0.03)  # 98..100 // 2 = 49, 50
    th = tune_limits(ds, headroom=1.5, round_to=10)
    assert th.stack_limits() == {"s": (150, 80)}              # 150, 75 -> 80
    lim = th.to_limits()
    assert lim["s"].required_buffer_size == 160              # max buffer 104 * 1.5 = 156 -> round_up 8 = 160
    assert lim.metadata["method"] == "max" and "TunedLimits(max" in repr(th)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=1, max_size=60),
       st.sampled_from([1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100]), st.sampled_from([1, 8, 16]))
def test_tune_percentile_property(series, q, round_to):
    ds = _fake_steps(series)
    t = tune_limits(ds, method="percentile", percentile=q, round_to=round_to)
    lim = t.stack_limits()["s"][0]
    arr = np.array(series)
    # the smallest observed value that at least q % of the steps stay within, rounded up
    v = min(x for x in arr.tolist() if (arr <= x).mean() >= q / 100)
    assert lim == max(round_to, -(-v // round_to) * round_to)
    assert (arr <= lim).mean() >= q / 100
    assert t.dataset["share_steps_over_max_ids"].item() == pytest.approx((arr > lim).mean())


def test_tune_on_collected_steps_and_errors():
    ds = collect_stats(_data().batches(), _feats(), scwork.Topology(2, 2), stacking=None)
    t = tune_limits(ds, round_to=16)
    for name, (a, u) in t.stack_limits().items():
        assert a % 16 == 0 and a >= int(ds["observed_max_ids"].sel(stack=name).max())
        assert u % 16 == 0 and u >= int(ds["observed_max_unique_ids"].sel(stack=name).max())
    # the proposed limits hold on every collected step: the engine raises nothing
    for raw in _data().batches():
        compute_stats(FeatureBatch(raw), _feats(), scwork.Topology(2, 2), stacking=None,
                      stack_limits=t.stack_limits())
    with pytest.raises(ConfigError, match="method"):
        tune_limits(ds, method="mean")
    with pytest.raises(ConfigError, match="percentile"):
        tune_limits(ds, method="percentile", percentile=0)
    with pytest.raises(ConfigError, match="headroom"):
        tune_limits(ds, headroom=0.5)
    with pytest.raises(InputError, match="'step' dim"):
        tune_limits(ds.isel(step=0))


# --------------------------------------------------------------------------------------
# trade-off
# --------------------------------------------------------------------------------------
def test_tradeoff_by_hand():
    ds = _fake_steps([10, 20, 30, 40], [5, 10, 15, 20])
    t = tradeoff(ds, [16, 32, 48], unique_candidates=[8, 16, 24])
    s = t.sel(stack="s")
    assert s["share_steps_over_max_ids"].values.tolist() == [0.75, 0.25, 0.0]
    assert s["share_steps_over_max_unique_ids"].values.tolist() == [0.75, 0.25, 0.0]
    # dropped pairs: max(0, ids - c) per step: c=16: 0+4+14+24 = 42 -> 10.5 per step
    assert s["dropped_pairs_per_step"].values.tolist() == [10.5, 2.0, 0.0]
    assert s["dropped_pairs_share"].values.tolist() == [42 / 100, 8 / 100, 0.0]
    # unique: c=8: 0+2+7+12 = 21 -> 5.25
    assert s["dropped_unique_ids_per_step"].values.tolist() == [5.25, 1.0, 0.0]
    # 1 device x 1 SC, P = 1: entries = round_up(c, 8), 12 B each
    assert s["coo_buffer_bytes_per_device"].values.tolist() == [192, 384, 576]
    assert s["spmem_partition_buffer_bytes_unique"].values.tolist() == [96, 192, 288]
    assert s["row_pointer_bytes_per_device"].item() == 32
    assert t["max_unique_ids_per_partition"].values.tolist() == [8, 16, 24]
    assert t["coo_buffer_bytes_per_device"].attrs["units"] == "bytes"
    with pytest.raises(ConfigError, match="distinct"):
        tradeoff(ds, [8, 8])
    with pytest.raises(ConfigError, match="one per candidate"):
        tradeoff(ds, [8, 16], unique_candidates=[8])


def test_tradeoff_dropped_pairs_equal_the_engine_prefix_cut():
    # with only max_ids binding the engine keeps min(ids, limit) pairs per stream
    topo = scwork.Topology(2, 2)
    data = _data(steps=3, B=128, seed=4)
    ds = collect_stats(data.batches(), _feats(), topo, stacking=None)
    cands = [8, 16, 24]
    t = tradeoff(ds, cands)
    cfg = SparsecoreConfig(allow_id_dropping=True, max_ids_per_chip_per_sample=None)
    for name in ("t", "u"):
        for c in cands:
            dropped_pairs = 0
            for raw in data.batches():
                ref = compute_stats(FeatureBatch(raw), _feats(), topo, stacking=None, config=cfg,
                                    stack_limits={name: (c, None)})
                sel = ref.sel(stack=name)
                dropped_pairs += int(sel["ids"].sum() - sel["kept_ids"].sum())
            assert t["dropped_pairs_per_step"].sel(stack=name, candidate=c).item() == pytest.approx(dropped_pairs / 3)


def test_tradeoff_default_candidates_and_bytes_helpers():
    ds = collect_stats(_data().batches(), _feats(), scwork.Topology(1, 4), stacking=None)
    t = tradeoff(ds)
    c = t["candidate"].values
    assert (c % 8 == 0).all() and (np.diff(c) > 0).all()
    assert c.max() >= int(ds["observed_max_ids"].max())
    assert t["share_steps_needing_minibatching"].isel(candidate=-1).values.tolist() == [0.0, 0.0]
    topo = scwork.Topology(4, 4)
    assert coo_buffer_bytes_per_device(100, topo) == 104 * 4 * 16 * 12
    assert coo_buffer_bytes_per_device([8, 9], topo, bytes_per_entry=4).tolist() == [8 * 64 * 4, 16 * 64 * 4]
    assert static_partition_buffer_bytes(1) == 96


def test_collect_stats_needs_an_iterable_of_batches():
    """collect_stats(5, ...) reached tqdm's iter() (TypeError; found by the public-API surface, issue 22)."""
    from scwork.sharding import FeatureSpec, TableSpec, collect_stats

    for batches in (5, None, 1.5, "batches"):
        with pytest.raises(ConfigError, match="batches must be an iterable"):
            collect_stats(batches, [FeatureSpec("f", TableSpec("t", 10, 8))], scwork.Topology(1, 1))
