"""The step model: hand-computed tile-level cases, ICI from the collectives engine, properties."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import ConfigError, InputError
from scwork.pipeline import PHASES, StepModelParams, expected_stats, step_model

# A made-up chip so the arithmetic fits in a comment: 2 tiles per SparseCore, 64 B/s of HBM,
# one vector instruction per second per tile, 8 f32 / 16 bf16 lanes, 32-byte granules.
EXACT = StepModelParams(sc_op_overhead_s=0.0, sc_tile_vector_ops_per_s=1.0, csr_bytes_per_id=0)


def tiny_chip(scs=1):
    return scwork.hardware.override("v5p", sparsecores_per_chip=scs, tiles_per_sparsecore=2,
                                    hbm_bandwidth_bytes_per_s=64.0, simd_width_f32=8, simd_width_bf16=16)


def tiny(ids_per_sample=4.0, width=8, scs=1, batch=None, params=EXACT, **kw):
    topo = scwork.Topology(1, scs)
    stats_kw = {k: kw.pop(k) for k in ("unique_fraction", "hot_fraction", "hot_partition") if k in kw}
    stats = expected_stats({"t": ids_per_sample} if not isinstance(ids_per_sample, dict) else ids_per_sample,
                           topo, batch_size=batch or scs, **stats_kw)
    widths = {"t": width} if not isinstance(width, dict) else width
    return step_model(stats, widths=widths, topology=topo, chip=tiny_chip(scs), params=params, **kw)


def test_forward_and_backward_by_hand():
    m = tiny()
    # 1 sample with 4 ids (4 unique) on the only partition, width 8 f32 = one 32-byte granule.
    # Forward, busiest tile: owner gathers ceil(4/2) = 2 rows x 32 B, writes ceil(1/2) = 1
    # activation row (8 f32 = 32 B): 96 B at 64 / (1 SC x 2 tiles) = 32 B/s = 3 s of DMA;
    # combines ceil(4/2) = 2 rows x ceil(8/8) = 1 instruction = 2 s. Overlapped: 3 s.
    assert m.phase_time["sc_forward"] == pytest.approx(3.0)
    ds = m.to_dataset()
    assert float(ds["sc_dma_bytes_per_tile"].sel(stack="t", direction="forward").max()) == 96
    assert float(ds["sc_vector_instructions_per_tile"].sel(stack="t", direction="forward").max()) == 2
    # Backward (sgd, no slots): rows read + written 2 x 32 B x 2 = 128 B + 1 gradient row of
    # 32 B = 160 B -> 5 s; instructions 2 (scatter) + 2 rows x 1 x 2 (sgd) = 6 -> 6 s.
    assert m.phase_time["sc_backward"] == pytest.approx(6.0)


def test_optimizer_slots_and_ops_by_hand():
    m = tiny(optimizers={"t": "adagrad"})
    # adagrad: 1 slot, 6 instructions per element. DMA 2 rows x 32 B x 2 x (1 + 1) = 256 B
    # + 32 B gradients = 288 B -> 9 s; instructions 2 + 2 x 1 x 6 = 14 -> 14 s.
    assert m.phase_time["sc_backward"] == pytest.approx(14.0)


def test_no_overlap_adds_dma_and_vector_time():
    m = tiny(params=EXACT.replace(dma_compute_overlap=False))
    assert m.phase_time["sc_forward"] == pytest.approx(3.0 + 2.0)


def test_narrow_and_padded_rows_cost_whole_granules():
    # Width 1 is padded to 8 f32 (one granule): exactly the cost of width 8.
    assert tiny(width=1).phase_time["sc_forward"] == pytest.approx(tiny(width=8).phase_time["sc_forward"])
    # Width 9 pads to 16 f32 = 64 B = 2 granules: owner 2 x 64 B + activation row 64 B
    # (16 f32) = 192 B -> 6 s; 2 rows x ceil(16/8) = 4 instructions -> 4 s. Forward 6 s.
    m = tiny(width=9)
    assert m.phase_time["sc_forward"] == pytest.approx(6.0)
    assert m.to_dataset()["row_granules"].sel(stack="t").item() == 2


def test_bf16_halves_the_row_and_uses_16_lanes():
    # bf16 width 16 = 32 B = 1 granule, 16 lanes -> 1 instruction per row; activations stay
    # f32 (16 x 4 = 64 B). DMA 2 x 32 + 64 = 128 B -> 4 s; instructions 2 -> 2 s. Forward 4 s.
    assert tiny(width=16, dtype="bf16").phase_time["sc_forward"] == pytest.approx(4.0)
    # The same table in f32: rows of 64 B: 2 x 64 + 64 = 192 B -> 6 s.
    assert tiny(width=16).phase_time["sc_forward"] == pytest.approx(6.0)


def test_skewed_partition_makes_its_owner_the_slowest():
    # 2 SparseCores (P = 2), each source sends all 4 ids to partition 1 (hot).
    hot = tiny(scs=2, batch=2, hot_fraction=1.0, hot_partition=1)
    # Tile bandwidth 64 / (2 SC x 2 tiles) = 16 B/s. SC 1 owns partition 1 and gathers
    # ceil(4/2) rows from each of the 2 sources = 4 rows x 32 B + 1 activation row 32 B =
    # 160 B -> 10 s. SC 0 only writes its activation row: 32 B -> 2 s (its 2 combine
    # instructions also take 2 s).
    sc = hot.to_dataset()["sc_time"].sel(direction="forward").values.ravel()
    assert sc.tolist() == pytest.approx([2.0, 10.0])
    assert hot.phase_time["sc_forward"] == pytest.approx(10.0)
    # Balanced: 2 ids per partition: each owner gathers ceil(2/2) x 2 sources = 2 rows:
    # 64 + 32 = 96 B -> 6 s.
    even = tiny(scs=2, batch=2)
    assert even.phase_time["sc_forward"] == pytest.approx(6.0)


def test_minibatches_pay_overheads_and_per_stream_ceilings():
    p = EXACT.replace(sc_op_overhead_s=0.5)
    one = tiny(params=p)
    two = tiny(params=p, num_minibatches=2)
    three = tiny(params=p, num_minibatches=3)
    # One op: 3 s + 0.5 s. Two mini-batches of 2 ids: ceil(2/2) + ceil(2/2) = 2 rows (same
    # DMA), 2 overheads: 3 + 1 = 4 s. Three of 2, 1, 1 ids: 1 + 1 + 1 = 3 rows: 3 x 32 + 32 =
    # 128 B -> 4 s, + 1.5 s of overheads = 5.5 s.
    assert one.phase_time["sc_forward"] == pytest.approx(3.5)
    assert two.phase_time["sc_forward"] == pytest.approx(4.0)
    assert three.phase_time["sc_forward"] == pytest.approx(5.5)
    assert three.to_dataset()["num_minibatches"].values.tolist() == [3]


def test_serialized_tables_lose_overlap():
    # Stack a as above (DMA 3 s, vector 2 s); stack b: 8 ids, 1 unique: owner 1 row (32 B)
    # + activation 32 B = 64 B -> 2 s of DMA, ceil(8/2) = 4 instructions -> 4 s.
    kw = dict(ids_per_sample={"a": 4.0, "b": 8.0}, width={"a": 8, "b": 8},
              unique_fraction={"a": 1.0, "b": 0.125})
    both = tiny(**kw)
    ds = both.to_dataset()
    assert ds["sc_dma_time"].sel(stack="b", direction="forward").item() == pytest.approx(2.0)
    assert ds["sc_vector_time"].sel(stack="b", direction="forward").item() == pytest.approx(4.0)
    # Concurrent: max(3 + 2, 2 + 4) = 6 s. Serialized: max(3, 2) + max(2, 4) = 7 s.
    assert both.phase_time["sc_forward"] == pytest.approx(6.0)
    assert tiny(num_serialized_tables=2, **kw).phase_time["sc_forward"] == pytest.approx(7.0)
    # 0 and 1 mean "nothing serialized" (as scwork.memory).
    assert tiny(num_serialized_tables=0, **kw).phase_time["sc_forward"] == pytest.approx(6.0)


def test_host_time_by_hand():
    p = EXACT.replace(host_ids_per_s=2.0, host_threads=2, host_overhead_s=0.25)
    # 4 raw ids per step on the only host: 4 / (2 ids/s x 2 threads) + 0.25 s = 1.25 s.
    assert tiny(params=p).phase_time["host"] == pytest.approx(1.25)


def test_hosts_split_chips():
    topo = scwork.Topology.for_chip("v5p", num_chips=8)
    stats = expected_stats({"t": 2.0}, topo, batch_size=32 * 8)
    m = step_model(stats, widths={"t": 8}, topology=topo, params=StepModelParams(chips_per_host=4))
    # 8 chips, 4 per host: 2 hosts of 4 chips x 4 SparseCores x (8 samples x 2 ids) = 256 ids.
    assert m.units.num_hosts == 2
    assert m.detail["host_ids"].tolist() == [256.0, 256.0]


def test_ici_time_is_the_collectives_engine_cost():
    from scwork.collectives import Network, all_to_all, cost

    topo = scwork.Topology.for_chip("v5p", num_chips=4)       # 4 devices x 4 SparseCores, P = 16
    stats = expected_stats({"t": 16.0}, topo, batch_size=256, unique_fraction=0.5)
    m = step_model(stats, widths={"t": 32}, topology=topo)
    # 16 samples x 16 ids per SparseCore = 256 ids, 16 per partition, 8 unique. A device's 4
    # SparseCores request 8 rows from each of the 12 partitions of other devices: 384 rows of
    # 32 f32 + a 4-byte id = 132 B: 50688 B. The all-to-all vector includes the local block:
    # 50688 x 4 / 3 = 67584 B per device.
    assert m.to_dataset()["ici_bytes_per_device"].sel(stack="t", direction="forward").item() == 50688
    engine = float(cost(all_to_all(Network.from_topology(topo)), nbytes=67584).total_time)
    assert m.phase_time["ici_forward"] == pytest.approx(engine, rel=1e-9)
    # Backward: float32 gradients of the same width: the same bytes.
    assert m.phase_time["ici_backward"] == pytest.approx(engine, rel=1e-9)
    # One device: no ICI.
    one = scwork.Topology.for_chip("v5p", num_chips=1)
    assert step_model(expected_stats({"t": 16.0}, one, batch_size=64), widths={"t": 32},
                      topology=one).phase_time["ici_forward"] == 0.0


def test_ici_closed_form_above_the_schedule_limit():
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    stats = expected_stats({"t": 16.0}, topo, batch_size=256, unique_fraction=0.5)
    m = step_model(stats, widths={"t": 32}, topology=topo, params=StepModelParams(ici_schedule_max_nodes=2))
    # Scaling-book all-to-all: V / (4 x 2W) with V = 4 x 67584 B, W = 9e10 B/s, plus 4/2 hops of 1 us.
    assert m.phase_time["ici_forward"] == pytest.approx(4 * 67584 / (4 * 2 * 9e10) + 2e-6)
    assert any("scaling-book" in a for a in m.assumptions)


def test_tensorcore_from_flops_and_times():
    topo = scwork.Topology.for_chip("v5p", num_chips=1)
    stats = expected_stats({"t": 1.0}, topo, batch_size=64)
    p = StepModelParams(tc_efficiency=0.5)
    m = step_model(stats, widths={"t": 8}, topology=topo, tc_forward_flops=1e12, tc_peak_flops=1e15, params=p)
    # 1e12 FLOP / (1e15 FLOP/s x 0.5) = 2 ms; backward defaults to 2 x forward.
    assert m.phase_time["tc_forward"] == pytest.approx(2e-3)
    assert m.phase_time["tc_backward"] == pytest.approx(4e-3)
    m2 = step_model(stats, widths={"t": 8}, topology=topo, tc_forward_s=1e-3, tc_backward_s=5e-4)
    assert (m2.phase_time["tc_forward"], m2.phase_time["tc_backward"]) == (1e-3, 5e-4)
    with pytest.raises(ConfigError, match="tc_peak_flops"):
        step_model(stats, widths={"t": 8}, topology=topo, tc_forward_flops=1e12)
    with pytest.raises(ConfigError, match="not both"):
        step_model(stats, widths={"t": 8}, topology=topo, tc_forward_s=1.0, tc_forward_flops=1.0,
                   tc_peak_flops=1.0)
    with pytest.raises(ConfigError):
        step_model(stats, widths={"t": 8}, topology=topo, tc_forward_s=-1.0)
    none = step_model(stats, widths={"t": 8}, topology=topo)
    assert none.phase_time["tc_forward"] == 0 and any("no TensorCore time" in a for a in none.assumptions)


def test_with_compute_stats_and_a_plan():
    from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats, plan_stacking

    topo = scwork.Topology(1, 2)
    feats = [FeatureSpec("a", TableSpec("ta", 64, 12, optimizer="adam")), FeatureSpec("b", TableSpec("tb", 64, 12))]
    rng = np.random.default_rng(3)
    batch = FeatureBatch.from_dense({"a": rng.integers(0, 64, (8, 5)), "b": rng.integers(0, 64, (8, 3))})
    plan = plan_stacking(feats, topo, stacking=[["ta"], ["tb"]])
    stats = compute_stats(batch, feats, topo, stacking=plan, backend="numpy")
    m = step_model(stats, plan, chip=tiny_chip(2), params=EXACT)
    ds = m.to_dataset()
    ids = stats["ids"].sel(stack="ta").values                 # (device, sc, partition)
    # Source tile count: sum over partitions of ceil(ids / 2 tiles); width 12 -> 16 f32 ->
    # ceil(16 / 8) = 2 instructions per row.
    expected = (-(-ids // 2)).sum(axis=-1) * 2
    got = ds["sc_vector_instructions_per_tile"].sel(stack="ta", direction="forward").values
    assert got.tolist() == expected.tolist()
    assert ds["padded_width"].sel(stack="ta").item() == 16
    # adam's optimizer work shows in the backward instructions of stack ta only.
    uniq = stats["unique_ids"].sel(stack="ta").values
    owner = (-(-uniq // 2)).sum(axis=(0, 1)).reshape(1, 2)
    back = ds["sc_vector_instructions_per_tile"].sel(stack="ta", direction="backward").values
    assert back.tolist() == (expected + owner * 2 * 10).tolist()


def test_minibatch_plan_is_used_per_minibatch():
    from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
    from scwork.sharding.minibatch import minibatch

    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 6, 7], [0, 4, 8])})
    table = TableSpec("t", 64, 8, max_ids_per_partition=4, max_unique_ids_per_partition=4)
    topo = scwork.Topology(1, 1)
    plan = minibatch(batch, [FeatureSpec("f", table)], topo, stacking=None, bucket_hash="identity", num_buckets=8)
    p = EXACT.replace(sc_op_overhead_s=0.5)
    m = step_model(plan, chip=tiny_chip(1), params=p)
    assert m.detail["num_minibatches"].tolist() == [2]
    # 2 samples on 1 SparseCore, 4 ids per mini-batch: owner ceil(4/2) x 2 mini-batches = 4 rows
    # (128 B) + ceil(2 samples / 2) = 1 activation row (32 B) = 160 B -> 5 s; 2 overheads: 6 s.
    assert m.phase_time["sc_forward"] == pytest.approx(6.0)


def test_minibatch_plan_of_two_stacks_runs_both_the_same_number_of_times():
    """The batch's one split cuts table u (which fits) with t: both stacks loop twice."""
    from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
    from scwork.sharding.minibatch import minibatch

    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 6, 7], [0, 4, 8]), "g": ([0, 5, 1, 6], [0, 2, 4])})
    t = TableSpec("t", 64, 8, max_ids_per_partition=4, max_unique_ids_per_partition=4)
    u = TableSpec("u", 64, 8, max_ids_per_partition=64, max_unique_ids_per_partition=64)
    feats = [FeatureSpec("f", t), FeatureSpec("g", u)]
    topo = scwork.Topology(1, 1)
    kw = dict(stacking=None, bucket_hash="identity", num_buckets=8)
    p = EXACT.replace(sc_op_overhead_s=0.5)
    together = step_model(minibatch(batch, feats, topo, **kw), chip=tiny_chip(1), params=p)
    assert together.detail["num_minibatches"].tolist() == [2, 2]
    alone = step_model(minibatch(batch, feats, topo, split_scope="stack", **kw), chip=tiny_chip(1), params=p)
    assert alone.detail["num_minibatches"].tolist() == [2, 1]
    # u's second op costs one more overhead in the forward phase (and its ids move between ops)
    assert together.phase_time["sc_forward"] > alone.phase_time["sc_forward"]


def test_pipelining_flag_picks_the_schedule_and_results_are_xarray():
    m = tiny(tc_forward_s=3.0, tc_backward_s=3.0)
    seq = m.replace(pipelining=False)
    assert m.step_time == m.pipelined_step_time
    assert seq.step_time == seq.sequential_step_time
    assert m.speedup == pytest.approx(m.sequential_step_time / m.pipelined_step_time)
    # SC 3 + 6 = 9, TC 6: sequential 15 (+ the tiny host time), pipelined bounded by the SC's 9.
    assert m.sequential_step_time == pytest.approx(15.0, rel=1e-6)
    assert m.pipelined_step_time == pytest.approx(9.0, rel=1e-6)
    assert (m.update_offset, m.staleness_steps) == (2, 1)
    ds = m.to_dataset()
    assert set(ds.dims) >= {"phase", "stack", "direction", "device", "sc", "schedule", "step", "resource_kind"}
    for name, var in ds.data_vars.items():
        assert "units" in var.attrs, name
    assert ds["start"].dims == ("schedule", "step", "phase")
    assert list(ds["phase"].values) == list(PHASES)
    assert m.bottleneck == "sc"


def test_expected_stats_by_hand():
    topo = scwork.Topology(1, 4)
    ds = expected_stats({"t": 2.5}, topo, batch_size=8, hot_fraction=0.5, hot_partition=2, unique_fraction=0.5)
    # 2 samples x 2.5 ids = 5 ids per SparseCore; hot share 5 x 0.5 = 2.5 -> 3 (half up) to
    # partition 2, the other 2 spread 1, 1, 0, 0; unique = ids / 2 half up: 1, 1, 2, 0.
    assert ds["ids"].sel(stack="t").values[0, 0].tolist() == [1, 1, 3, 0]
    assert ds["unique_ids"].sel(stack="t").values[0, 0].tolist() == [1, 1, 2, 0]
    assert ds.attrs["samples_per_sc"] == 2
    with pytest.raises(ConfigError, match="multiple"):
        expected_stats({"t": 1.0}, topo, batch_size=6)
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        expected_stats({"t": 1.0}, topo, batch_size=8, hot_fraction=1.5)


def test_typed_errors():
    topo = scwork.Topology.for_chip("v5p", num_chips=1)
    stats = expected_stats({"t": 1.0}, topo, batch_size=64)
    with pytest.raises(InputError, match="compute_stats"):
        step_model({"ids": 1}, widths={"t": 8}, topology=topo)
    with pytest.raises(ConfigError, match="widths"):
        step_model(stats, topology=topo)
    with pytest.raises(ConfigError, match="topology"):
        step_model(stats, widths={"t": 8})
    with pytest.raises(InputError, match="topology"):
        step_model(stats, widths={"t": 8}, topology=scwork.Topology.for_chip("v5p", num_chips=2))
    with pytest.raises(ConfigError, match="no SparseCore"):
        step_model(stats, widths={"t": 8}, topology=topo, chip="v5e")
    with pytest.raises(ConfigError, match="dtype"):
        step_model(stats, widths={"t": 8}, topology=topo, dtype="f64")
    with pytest.raises(ConfigError, match="optimizer"):
        step_model(stats, widths={"t": 8}, topology=topo, optimizers={"t": "lion"})
    with pytest.raises(ConfigError, match="num_steps"):
        step_model(stats, widths={"t": 8}, topology=topo, num_steps=2)
    with pytest.raises(ConfigError, match="params"):
        step_model(stats, widths={"t": 8}, topology=topo, params={"host_threads": 2})
    bad = stats.copy()
    bad["unique_ids"] = bad["ids"] + 1
    with pytest.raises(InputError, match="more unique"):
        step_model(bad, widths={"t": 8}, topology=topo)
    # Statistics of no stacks at all (e.g. a batch with no features, or a selection that
    # kept none): a typed error before any phase is costed, not a failed reshape inside.
    with pytest.raises(InputError, match="no stacks"):
        step_model(stats.isel(stack=slice(0, 0)), widths={"t": 8}, topology=topo)


def test_import_is_light():
    code = ("import sys, scwork.pipeline, scwork.quant, scwork.advisor; "
            "print('numba' in sys.modules, 'xarray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert out[0] == "False"


@settings(max_examples=25, deadline=None)
@given(rate=st.floats(0.5, 40.0), uf=st.floats(0.05, 1.0), hot=st.floats(0.0, 0.9), width=st.integers(1, 130),
       tcf=st.floats(0.0, 1e-3), tcb=st.floats(0.0, 1e-3), dtype=st.sampled_from(["f32", "bf16", "s8"]))
def test_properties(rate, uf, hot, width, tcf, tcb, dtype):
    topo = scwork.Topology.for_chip("v5p", num_chips=2)
    stats = expected_stats({"t": rate}, topo, batch_size=512, unique_fraction=uf, hot_fraction=hot)
    m = step_model(stats, widths={"t": width}, topology=topo, tc_forward_s=tcf, tc_backward_s=tcb, dtype=dtype,
                   num_steps=4)
    tol = 1e-9 * m.sequential_step_time
    assert m.pipelined_step_time <= m.sequential_step_time + tol
    assert m.speedup <= 2.0 + 1e-9
    assert m.update_offset == 2
    # More ids never make the SparseCores faster.
    more = m.replace(stats=expected_stats({"t": rate * 2}, topo, batch_size=512, unique_fraction=uf,
                                          hot_fraction=hot))
    assert more.phase_time["sc_forward"] >= m.phase_time["sc_forward"] - 1e-15
    assert more.phase_time["sc_backward"] >= m.phase_time["sc_backward"] - 1e-15


def test_ici_on_a_grid_goes_dimension_by_dimension():
    from scwork.collectives import Network, all_to_all, cost

    topo = scwork.Topology.for_chip("v5p", shape=(2, 4))   # 8 devices, P = 32
    stats = expected_stats({"t": 32.0}, topo, batch_size=32 * 8, unique_fraction=0.5)
    m = step_model(stats, widths={"t": 16}, topology=topo)
    # 8 samples x 32 ids per SparseCore, 8 per partition, 4 unique; a device requests 4 rows
    # from each of the 28 partitions on other devices, from its 4 SparseCores: 448 rows of
    # 16 f32 + 4 B = 68 B = 30464 B; its whole vector is 30464 x 8 / 7 = 34816 B.
    assert m.to_dataset()["ici_bytes_per_device"].sel(stack="t", direction="forward").item() == 30464
    ring2 = float(cost(all_to_all(Network.grid((2,), (False,), chip="v5p")), nbytes=34816).total_time)
    ring4 = float(cost(all_to_all(Network.grid((4,), (True,), chip="v5p")), nbytes=34816).total_time)
    assert m.phase_time["ici_forward"] == pytest.approx(ring2 + ring4, rel=1e-9)
    assert "dimension by dimension" in " ".join(m.assumptions)


def test_num_steps_is_bounded_before_the_work():
    """step_model(num_steps=10**5) took 30 s; now a typed error names the size and the limit."""
    import time

    import scwork
    from scwork.errors import ConfigError
    from scwork.pipeline import model as pipeline_model
    from scwork.pipeline.model import expected_stats, step_model

    topo = scwork.Topology.for_chip("v5p", num_chips=2)
    stats = expected_stats({"f": 4.0}, topo, batch_size=1024)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"num_steps=100,000 .* MAX_TIMELINE_STEPS=1,024"):
        step_model(stats, widths={"f": 8}, topology=topo, num_steps=10**5)
    assert time.perf_counter() - start < 5
    longest = step_model(stats, widths={"f": 8}, topology=topo, num_steps=pipeline_model.MAX_TIMELINE_STEPS)
    assert longest.sequential.num_steps == pipeline_model.MAX_TIMELINE_STEPS
