"""Phase costs worked out by hand where tests/pipeline/test_model.py leaves them loose.

Int8 tables (dequantize work, 32-byte rows of 32 lanes) and bf16 lanes, the order of
serialized stacks and the concurrent stacks' share of each serialized slot, per-op
overheads with and without DMA / compute overlap, the SparseCores' HBM share and
unrounded tile times, granules smaller than an f32, the shares of ``parts``, the ICI
rows of bf16 tables and gradient rows, the routed all-to-all (``a2a="data"``) and the
TensorCore times from FLOPs in every combination. Same made-up chip as
test_model.py: 2 tiles per SparseCore, 64 B/s of HBM, one vector instruction per second
per tile, 8 f32 / 16 bf16 lanes, 32-byte granules.
"""

from __future__ import annotations

import pytest

import scwork
from scwork.errors import ConfigError
from scwork.pipeline import StepModelParams, expected_stats, step_model

EXACT = StepModelParams(sc_op_overhead_s=0.0, sc_tile_vector_ops_per_s=1.0, csr_bytes_per_id=0)


def tiny_chip(**changes):
    """A v5p cut down to one SparseCore of 2 tiles, 64 B/s of HBM, 8 f32 / 16 bf16 lanes (``changes`` on top)."""
    return scwork.hardware.override("v5p", **{"sparsecores_per_chip": 1, "tiles_per_sparsecore": 2,
                                              "hbm_bandwidth_bytes_per_s": 64.0, "simd_width_f32": 8,
                                              "simd_width_bf16": 16, **changes})


def tiny(ids=None, widths=None, unique_fraction=None, params=EXACT, **kw):
    topo = scwork.Topology(1, 1)
    ids = ids or {"t": 4.0}
    stats = expected_stats(ids, topo, batch_size=1, **({"unique_fraction": unique_fraction}
                                                       if unique_fraction else {}))
    return step_model(stats, widths=widths or {"t": 8}, topology=topo, chip=tiny_chip(), params=params, **kw)


def test_int8_rows_use_32_lanes_of_f32_width_and_pay_dequantize():
    # s8: 1 byte per element, a 32-byte granule holds 32: width 8 pads to 32 = 1 granule.
    # The vector unit works in f32 lanes (8): ceil(32 / 8) = 4 instructions per row, each
    # element combined (1) and dequantized (1): 2 x 4 = 8 per row; the busiest tile
    # combines ceil(4 / 2) = 2 rows: 16 instructions -> 16 s. DMA: 2 rows x 32 B + the f32
    # activation row (8 x 4 B = 32 B) = 96 B -> 3 s. Forward = 16 s.
    m = tiny(dtype="s8")
    ds = m.to_dataset()
    assert ds["padded_width"].sel(stack="t").item() == 32
    assert ds["row_granules"].sel(stack="t").item() == 1
    assert float(ds["sc_vector_instructions_per_tile"].sel(stack="t", direction="forward").max()) == 16
    assert float(ds["sc_dma_bytes_per_tile"].sel(stack="t", direction="forward").max()) == 96
    assert m.phase_time["sc_forward"] == pytest.approx(16.0)
    # Without dequantize work: 2 rows x 4 instructions x 1 = 8 s.
    assert tiny(dtype="s8", params=EXACT.replace(dequantize_ops_per_element=0)).phase_time["sc_forward"] == \
        pytest.approx(8.0)
    # f32 pays no dequantize: 2 rows x 1 instruction x 1 = 2 s, even with 5 per element.
    f32 = tiny(params=EXACT.replace(dequantize_ops_per_element=5)).to_dataset()
    assert float(f32["sc_vector_instructions_per_tile"].sel(stack="t", direction="forward").max()) == 2


# Three stacks, each on the one SparseCore (forward):
#   a: 4 ids, 4 unique, width 8:  DMA 2 rows x 32 B + 32 B activation = 96 B -> 3 s;
#      2 rows x 1 instruction -> 2 s.    Order key (2 x 8 + 1) x 4 unique = 68.
#   b: 8 ids, 1 unique, width 8:  DMA 1 row x 32 B + 32 B = 64 B -> 2 s;
#      ceil(8 / 2) = 4 source ids x 1 -> 4 s.    Key 17 x 1 = 17.
#   c: 2 ids, 2 unique, width 24 (96 B = 3 granules): DMA 1 row x 96 B + a 96 B
#      activation row = 192 B -> 6 s; 1 row x ceil(24 / 8) = 3 instructions -> 3 s.
#      Key (2 x 24 + 1) x 2 = 98.
THREE = dict(ids={"a": 4.0, "b": 8.0, "c": 2.0}, widths={"a": 8, "b": 8, "c": 24},
             unique_fraction={"a": 1.0, "b": 0.125, "c": 1.0})


def test_serialized_stacks_are_the_largest_keys_and_share_the_rest():
    m = tiny(**THREE)
    ds = m.to_dataset()
    assert ds["sc_dma_time"].sel(stack="c", direction="forward").item() == pytest.approx(6.0)
    assert ds["sc_vector_time"].sel(stack="c", direction="forward").item() == pytest.approx(3.0)
    # All concurrent: max(DMA 3 + 2 + 6, vector 2 + 4 + 3) = 11 s.
    assert m.phase_time["sc_forward"] == pytest.approx(11.0)
    assert m.detail["serialized"] == ()
    # Two serialized: the largest keys, c (98) then a (68); b runs beside them, its 2 s of
    # DMA and 4 s of vector work split over the 2 slots:
    # max(6 + 1, 3 + 2) + max(3 + 1, 2 + 2) = 7 + 4 = 11 s.
    two = tiny(num_serialized_tables=2, **THREE)
    assert two.detail["serialized"] == ("c", "a")
    assert two.phase_time["sc_forward"] == pytest.approx(11.0)
    # Three (or more than there are stacks): every stack alone, in key order:
    # max(6, 3) + max(3, 2) + max(2, 4) = 13 s.
    three = tiny(num_serialized_tables=3, **THREE)
    assert three.detail["serialized"] == ("c", "a", "b")
    assert three.phase_time["sc_forward"] == pytest.approx(13.0)
    assert tiny(num_serialized_tables=5, **THREE).detail["serialized"] == ("c", "a", "b")
    assert any("serialized stacks: ['c', 'a']" in a for a in two.assumptions)


def test_serialized_slots_with_vector_work_beside_them():
    # a and b serialized when their keys are the largest: c made narrow (width 8: key 17 x 2
    # = 34, below a's 68 and above b's 17). c alone: DMA 1 row + 1 activation row = 64 B
    # -> 2 s; 1 row x 1 instruction -> 1 s. Two serialized (a, c), b beside them (2 s DMA,
    # 4 s vector, halves 1 and 2): max(3 + 1, 2 + 2) + max(2 + 1, 1 + 2) = 4 + 3 = 7 s.
    kw = dict(THREE, widths={"a": 8, "b": 8, "c": 8})
    two = tiny(num_serialized_tables=2, **kw)
    assert two.detail["serialized"] == ("a", "c")
    assert two.phase_time["sc_forward"] == pytest.approx(7.0)


def test_equal_keys_keep_the_stack_order():
    # a and b both 4 ids, 4 unique, width 8: equal keys 68; the first stack goes first.
    kw = dict(ids={"a": 4.0, "b": 4.0, "c": 1.0}, widths={"a": 8, "b": 8, "c": 8})
    assert tiny(num_serialized_tables=2, **kw).detail["serialized"] == ("a", "b")


def test_overheads_with_and_without_overlap():
    # 0.5 s per SparseCore op. Overlapped: max(3, 2) + 0.5 = 3.5 s, the stack's own time too.
    p = EXACT.replace(sc_op_overhead_s=0.5)
    on = tiny(params=p)
    assert on.phase_time["sc_forward"] == pytest.approx(3.5)
    assert on.to_dataset()["sc_stack_time"].sel(stack="t", direction="forward").item() == pytest.approx(3.5)
    # Not overlapped: 3 + 2 + 0.5 = 5.5 s; backward 5 + 6 + 0.5 = 11.5 s.
    off = tiny(params=p.replace(dma_compute_overlap=False))
    assert off.phase_time["sc_forward"] == pytest.approx(5.5)
    assert off.phase_time["sc_backward"] == pytest.approx(11.5)
    assert off.to_dataset()["sc_stack_time"].sel(stack="t", direction="forward").item() == pytest.approx(5.5)
    # Two stacks (a: 3 s DMA, 2 s vector; b: 2 s, 4 s), not overlapped: 3 + 2 + 2 + 4 = 11
    # s of work + 2 x 0.5 s of overheads = 12 s.
    two = tiny(ids={"a": 4.0, "b": 8.0}, widths={"a": 8, "b": 8}, unique_fraction={"a": 1.0, "b": 0.125},
               params=p.replace(dma_compute_overlap=False))
    assert two.phase_time["sc_forward"] == pytest.approx(12.0)


def test_sparsecore_share_of_hbm_bandwidth():
    # Half the HBM: 32 / 2 tiles = 16 B/s per tile; the forward's 96 B take 6 s (> 2 s of
    # vector work).
    m = tiny(params=EXACT.replace(sc_hbm_bandwidth_fraction=0.5))
    assert m.detail["tile_bandwidth"] == pytest.approx(16.0)
    assert m.phase_time["sc_forward"] == pytest.approx(6.0)


def test_ici_rows_of_a_bf16_table():
    # test_model.py's 4-chip case: a device requests 384 rows from other devices' partitions.
    # bf16 width 16: forward rows are the table's 16 x 2 B + a 4-byte id = 36 B; backward rows
    # are float32 gradients, 16 x 4 B + 4 B = 68 B.
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    stats = expected_stats({"t": 16.0}, topo, batch_size=256, unique_fraction=0.5)
    ds = step_model(stats, widths={"t": 16}, topology=topo, dtype="bf16").to_dataset()
    assert ds["ici_bytes_per_device"].sel(stack="t", direction="forward").item() == 384 * 36
    assert ds["ici_bytes_per_device"].sel(stack="t", direction="backward").item() == 384 * 68
    # Width 12 f32: the table row pads to 16 (64 B); the gradient row is padded to the
    # activation granule of 8 floats, 16 x 4 B too; no ids sent: 384 x 64 B both ways.
    ds = step_model(stats, widths={"t": 12}, topology=topo,
                    params=StepModelParams(ici_index_bytes=0)).to_dataset()
    assert ds["ici_bytes_per_device"].sel(stack="t").values.tolist() == [384 * 64, 384 * 64]


def test_ici_mode_is_named_in_the_assumptions():
    one = tiny()
    assert any("ICI: none (one device)" in a for a in one.assumptions)
    assert one.phase_time["ici_forward"] == 0.0
    topo = scwork.Topology.for_chip("v5p", shape=(2, 4))
    stats = expected_stats({"t": 32.0}, topo, batch_size=32 * 8, unique_fraction=0.5)
    grid = step_model(stats, widths={"t": 16}, topology=topo)
    assert any("dimension by dimension (2 x 4 rings)" in a for a in grid.assumptions)
    assert not any("scaling-book" in a for a in grid.assumptions)
    closed = step_model(stats, widths={"t": 16}, topology=topo, params=StepModelParams(ici_schedule_max_nodes=3))
    # the 4-ring is past 3 nodes: closed form for it, named with the limit
    assert any("rings longer than 3" in a for a in closed.assumptions)
    line = scwork.Topology.for_chip("v5p", num_chips=4)
    ring = step_model(expected_stats({"t": 16.0}, line, batch_size=256), widths={"t": 8}, topology=line)
    assert any("ring all-to-all over all devices" in a for a in ring.assumptions)


def test_ici_latency_and_bandwidth_parameters():
    # The closed form of test_model.py with the parameters set: 4 x 67584 B / (4 x 2 x 1e9
    # B/s) + 4 / 2 hops x 1e-3 s.
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    stats = expected_stats({"t": 16.0}, topo, batch_size=256, unique_fraction=0.5)
    p = StepModelParams(ici_schedule_max_nodes=2, ici_link_bytes_per_s=1e9, ici_latency_s=1e-3)
    m = step_model(stats, widths={"t": 32}, topology=topo, params=p)
    assert m.phase_time["ici_forward"] == pytest.approx(4 * 67584 / (4 * 2 * 1e9) + 2e-3)


def test_tensorcore_times_in_every_combination():
    topo = scwork.Topology.for_chip("v5p", num_chips=1)
    stats = expected_stats({"t": 1.0}, topo, batch_size=64)

    def tc(**kw):
        m = step_model(stats, widths={"t": 8}, topology=topo, **kw)
        return m.phase_time["tc_forward"], m.phase_time["tc_backward"], m.assumptions

    # Backward from FLOPs: 3e12 / (1e15 x 0.5) = 6 ms; forward given as 1 ms.
    f, b, notes = tc(tc_forward_s=1e-3, tc_backward_flops=3e12, tc_peak_flops=1e15,
                     params=StepModelParams(tc_efficiency=0.5))
    assert (f, b) == (1e-3, pytest.approx(6e-3))
    # Forward from FLOPs, the note states the division; backward = 3 x forward when asked.
    f, b, notes = tc(tc_forward_flops=2e12, tc_peak_flops=1e15, params=StepModelParams(tc_backward_to_forward=3.0))
    assert (f, b) == (pytest.approx(2e-3), pytest.approx(6e-3))
    assert any("TensorCore forward = 2e+12 FLOP / (1e+15 FLOP/s x tc_efficiency 1.0)" in a for a in notes)
    assert any("TensorCore backward = tc_backward_to_forward (3.0) x forward" in a for a in notes)
    # Only a backward time: forward 0, and no "no TensorCore time" note.
    f, b, notes = tc(tc_backward_s=2e-3)
    assert (f, b) == (0.0, 2e-3)
    assert not any("no TensorCore time" in a for a in notes)
    # A forward time alone: backward = 2 x forward (the default ratio), no FLOP note.
    f, b, notes = tc(tc_forward_s=1e-3)
    assert (f, b) == (1e-3, pytest.approx(2e-3))
    assert not any("FLOP /" in a for a in notes)
    with pytest.raises(ConfigError, match="tc_peak_flops must be > 0"):
        tc(tc_forward_flops=1e12, tc_peak_flops=0.0)
    with pytest.raises(ConfigError, match="tc_peak_flops"):
        tc(tc_backward_flops=1e12)
    with pytest.raises(ConfigError, match="tc_backward_s or tc_backward_flops, not both"):
        tc(tc_backward_s=1.0, tc_backward_flops=1.0, tc_peak_flops=1.0)
    with pytest.raises(ConfigError, match="tc_forward_s or tc_forward_flops, not both"):
        tc(tc_forward_s=1.0, tc_forward_flops=1.0, tc_peak_flops=1.0)
    with pytest.raises(ConfigError, match="tc_peak_flops"):
        tc(tc_forward_s=1.0, tc_peak_flops=-1.0)
    for name in ("tc_forward_flops", "tc_backward_flops", "tc_backward_s"):
        with pytest.raises(ConfigError, match=name):
            tc(**{name: -1.0}, tc_peak_flops=1.0)


def test_parts_share_each_sparsecore_phase_per_stack_and_minibatch():
    # Stacks a (3 s forward) and b (max(2, 4) = 4 s): shares 3/7 and 4/7.
    m = tiny(ids={"a": 4.0, "b": 8.0}, widths={"a": 8, "b": 8}, unique_fraction={"a": 1.0, "b": 0.125})
    labels, frac = m.parts["sc_forward"]
    assert labels == ["a", "b"]
    assert frac[:, 0].tolist() == pytest.approx([3 / 7, 4 / 7])
    # Backward: a 6 s (test_model.py), b: DMA 1 row x 32 B x 2 + 32 B = 96 B -> 3 s, vector
    # 4 scatter + 1 row x 1 x 2 (sgd) = 6 s: shares 1/2, 1/2.
    labels, frac = m.parts["sc_backward"]
    assert frac[:, 0].tolist() == pytest.approx([0.5, 0.5])
    # Two mini-batches of one stack: two labelled halves.
    two = tiny(num_minibatches=2)
    labels, frac = two.parts["sc_forward"]
    assert labels == ["t (mini-batch 1/2)", "t (mini-batch 2/2)"]
    assert frac[:, 0].tolist() == pytest.approx([0.5, 0.5])


def test_unknown_optimizer_is_named():
    with pytest.raises(ConfigError, match=r"unknown optimizer 'lion'; known: \['adadelta', 'adagrad'"):
        tiny(optimizers={"t": "lion"})


def test_routed_all_to_all_by_hand():
    # a2a="data" on 2 devices in a line (one SparseCore each, partitions 0 and 1): both
    # devices send their 4 ids to partition 1, so device 0 requests 4 unique rows from
    # device 1 and device 1 only its own. bf16 width 16: forward rows 16 x 2 B + a 4-byte
    # id = 36 B, owner -> requester, on link 1 (chip 1 -> chip 0): 144 B. Backward float32
    # gradients 16 x 4 + 4 = 68 B, requester -> owner, on link 0 (0 -> 1): 272 B. Links of
    # 36 B/s and 0.5 s per hop: forward 144 / 36 + 0.5 = 4.5 s, backward 272 / 36 + 0.5 s.
    topo = scwork.Topology(2, 1)
    stats = expected_stats({"t": 4.0}, topo, batch_size=2, hot_fraction=1.0, hot_partition=1)
    p = EXACT.replace(ici_link_bytes_per_s=36.0, ici_latency_s=0.5)
    m = step_model(stats, widths={"t": 16}, topology=topo, chip=tiny_chip(), params=p, dtype="bf16", a2a="data")
    assert m.phase_time["ici_forward"] == pytest.approx(4.5)
    assert m.phase_time["ici_backward"] == pytest.approx(272 / 36 + 0.5)
    ds = m.to_dataset()
    assert ds["ici_bytes_per_device"].sel(stack="t").values.tolist() == [144, 272]
    assert ds["ici_link_bytes"].values.tolist() == [[0, 272], [144, 0]]
    links = m.detail["ici_links"]
    assert links["latency_time"].values.tolist() == [0.5, 0.5]
    assert links["time"].values.tolist() == pytest.approx([4.5, 272 / 36 + 0.5])
    assert any("bytes / 36 B/s + farthest route x 0.5 s per hop" in a for a in m.assumptions)
    # Two mini-batches of 2 ids: two all-to-alls of 2 rows, each paying the hop:
    # forward 2 x (72 / 36 + 0.5) = 5 s; the bytes per step are the same.
    two = step_model(stats, widths={"t": 16}, topology=topo, chip=tiny_chip(), params=p, dtype="bf16",
                     a2a="data", num_minibatches=2)
    assert two.phase_time["ici_forward"] == pytest.approx(5.0)
    assert two.to_dataset()["ici_bytes_per_device"].sel(stack="t").values.tolist() == [144, 272]


def test_activation_rows_round_to_whole_activations_per_granule():
    # 32-byte activations fill a 32-byte granule each: width 3 -> 3 activations = 96 B
    # (3 granules). Forward: 2 rows of the f32 table (width 3 pads to 8 = 32 B) + one
    # activation row of 96 B = 160 B.
    m = tiny(widths={"t": 3}, params=EXACT.replace(activation_bytes=32))
    assert float(m.to_dataset()["sc_dma_bytes_per_tile"].sel(stack="t", direction="forward").max()) == 160


def test_ici_between_the_devices_of_a_chip_is_its_own_stage():
    from scwork.collectives import Network, all_to_all, cost

    # 2 chips of 2 devices (2 SparseCores each, 8 partitions). 8 samples x 16 ids per
    # SparseCore: 16 per partition, 8 unique. A device's 2 SparseCores request 8 rows from
    # each of the 6 partitions on other devices: 96 rows x (16 x 4 + 4) B = 6528 B; its
    # whole vector is 6528 x 4 / 3 = 8704 B. Stages: the 2-chip ring, then the 2 devices
    # of a chip (the collectives engine on a one-chip network of 2 cores).
    topo = scwork.Topology(2, 4, devices_per_chip=2)
    stats = expected_stats({"t": 16.0}, topo, batch_size=8 * 8, unique_fraction=0.5)
    m = step_model(stats, widths={"t": 16}, topology=topo, chip="v5p")
    assert m.to_dataset()["ici_bytes_per_device"].sel(stack="t").values.tolist() == [6528, 6528]
    chips = float(cost(all_to_all(Network.grid((2,), (False,), chip="v5p")), nbytes=8704).total_time)
    on_chip = float(cost(all_to_all(Network.grid((1,), (False,), cores_per_chip=2, chip="v5p")),
                         nbytes=8704).total_time)
    assert on_chip > 0
    assert m.phase_time["ici_forward"] == pytest.approx(chips + on_chip, rel=1e-9)
    assert any("dimension by dimension (2 x 2 rings)" in a for a in m.assumptions)


def test_granules_smaller_than_two_elements():
    # 4-byte DMA granules hold one f32: width 3 stays 3 (no padding), 3 granules of 4 B.
    chip = tiny_chip(dma_granule_bytes=4)
    topo = scwork.Topology(1, 1)
    m = step_model(expected_stats({"t": 4.0}, topo, batch_size=1), widths={"t": 3}, topology=topo, chip=chip,
                   params=EXACT)
    assert m.to_dataset()["padded_width"].sel(stack="t").item() == 3
    assert m.to_dataset()["row_granules"].sel(stack="t").item() == 3


def test_routed_gradient_rows_of_activations_wider_than_a_granule():
    # 64-byte activations: a 32-byte granule holds none whole, so the gradient row is not
    # padded: 16 x 64 B + a 4-byte id = 1028 B per row, 4 rows from device 0 to device 1.
    topo = scwork.Topology(2, 1)
    stats = expected_stats({"t": 4.0}, topo, batch_size=2, hot_fraction=1.0, hot_partition=1)
    p = EXACT.replace(activation_bytes=64)
    for a2a in ("data", "uniform"):
        m = step_model(stats, widths={"t": 16}, topology=topo, chip=tiny_chip(), params=p, dtype="bf16", a2a=a2a)
        assert m.to_dataset()["ici_bytes_per_device"].sel(stack="t").values.tolist() == [144, 4 * 1028], a2a


def test_a_one_byte_all_to_all_still_takes_time():
    # int8 rows of width 1 with 1-byte granules and no ids sent: one remote row is 1 byte.
    # 2 devices, device 0's one id owned by device 1. The whole vector is 1 x 2 / 1 = 2 B, a
    # 1-byte block each way on the 2-device ring: one step of 0.5 s latency + 1 B / (1 B/s).
    chip = tiny_chip(dma_granule_bytes=1)
    topo = scwork.Topology(2, 1)
    stats = expected_stats({"t": 1.0}, topo, batch_size=2, hot_fraction=1.0, hot_partition=1)
    p = EXACT.replace(ici_link_bytes_per_s=1.0, ici_latency_s=0.5, ici_index_bytes=0)
    m = step_model(stats, widths={"t": 1}, topology=topo, chip=chip, params=p, dtype="s8")
    assert m.to_dataset()["ici_bytes_per_device"].sel(stack="t", direction="forward").item() == 1
    assert m.phase_time["ici_forward"] == pytest.approx(1.5)


def test_a_fractional_all_to_all_vector_is_not_rounded():
    # 3 chips in a ring, device 2 owns the only id of devices 0 and 1: the busiest device
    # sends 1 row of 1 byte (int8, width 1, 1-byte granules, no ids sent), so its whole
    # vector is 1 x 3 / 2 = 1.5 B. Scaling-book closed form (rings past 2 nodes): V / (4 x
    # 2W) with V = 3 x 1.5 B and W = 1 B/s = 0.5625 s, + 3 // 2 = 1 hop of 0.5 s = 1.0625 s.
    chip = scwork.hardware.override("v5p", sparsecores_per_chip=1, tiles_per_sparsecore=2,
                                    hbm_bandwidth_bytes_per_s=64.0, dma_granule_bytes=1)
    topo = scwork.Topology(3, 1)
    stats = expected_stats({"t": 1.0}, topo, batch_size=3, hot_fraction=1.0, hot_partition=2)
    p = EXACT.replace(ici_link_bytes_per_s=1.0, ici_latency_s=0.5, ici_index_bytes=0, ici_schedule_max_nodes=2)
    m = step_model(stats, widths={"t": 1}, topology=topo, chip=chip, params=p, dtype="s8")
    assert m.to_dataset()["ici_bytes_per_device"].sel(stack="t", direction="forward").item() == 1
    assert m.phase_time["ici_forward"] == pytest.approx(3 * 1.5 / 8 + 0.5)


def test_order_key_counts_the_row_and_its_activation():
    # Keys (2 x width + 1) x unique: b (width 16, 1 unique) 33; a (width 8, 2 unique) 34;
    # c (width 8, 1 unique) 17. Two serialized: a then b, although b comes first and
    # 2 x width x unique alone would tie them at 32.
    kw = dict(ids={"b": 1.0, "a": 2.0, "c": 1.0}, widths={"b": 16, "a": 8, "c": 8})
    assert tiny(num_serialized_tables=2, **kw).detail["serialized"] == ("a", "b")


def test_serialized_slot_that_the_vector_work_beside_it_decides():
    # a (8 ids, 2 unique): DMA 1 row x 32 B + 32 B activation = 64 B -> 2 s; ceil(8 / 2) =
    # 4 source ids x 1 -> 4 s; key 17 x 2 = 34. c (2 ids, 2 unique): 2 s DMA, 1 s vector,
    # key 34 (after a: equal keys keep the stack order). b (6 ids, 1 unique): 2 s DMA,
    # ceil(6 / 2) = 3 s vector, key 17: beside them, halves 1 s and 1.5 s.
    # a: max(2 + 1, 4 + 1.5) = 5.5; c: max(2 + 1, 1 + 1.5) = 3: 8.5 s (not 8, with b's
    # 3 s of vector work cut to whole seconds per slot).
    kw = dict(ids={"a": 8.0, "b": 6.0, "c": 2.0}, widths={"a": 8, "b": 8, "c": 8},
              unique_fraction={"a": 0.25, "b": 1 / 6, "c": 1.0})
    m = tiny(num_serialized_tables=2, **kw)
    assert m.detail["serialized"] == ("a", "c")
    assert m.phase_time["sc_forward"] == pytest.approx(8.5)


def test_serialized_slot_that_the_dma_beside_it_decides():
    # a (8 ids, 8 unique): DMA 4 rows + 1 activation row = 160 B -> 5 s, 4 s vector, key
    # 17 x 8 = 136. c (4 ids, 4 unique): 3 s DMA, 2 s vector, key 68. b (3 ids, 3
    # unique): ceil(3 / 2) = 2 rows + 1 = 3 s DMA, 2 s vector, key 51: beside them,
    # halves 1.5 s and 1 s. a: max(5 + 1.5, 4 + 1) = 6.5; c: max(3 + 1.5, 2 + 1) = 4.5:
    # 11 s (not 10, with b's 3 s of DMA cut to whole seconds per slot).
    kw = dict(ids={"a": 8.0, "b": 3.0, "c": 4.0}, widths={"a": 8, "b": 8, "c": 8})
    m = tiny(num_serialized_tables=2, **kw)
    assert m.detail["serialized"] == ("a", "c")
    assert m.phase_time["sc_forward"] == pytest.approx(11.0)


def test_order_key_weighs_the_width_twice_plus_one():
    # Keys (2 x width + 1) x unique ids: A (width 8, 15 unique) 17 x 15 = 255, B (width
    # 32, 4 unique) 65 x 4 = 260: B first. Weights 1 x width + 1 (135 / 132), 2 x width +
    # 2 (270 / 264) or width + 3 (165 / 140) would put A first.
    kw = dict(ids={"A": 15.0, "B": 4.0}, widths={"A": 8, "B": 32})
    assert tiny(num_serialized_tables=2, **kw).detail["serialized"] == ("B", "A")
    # A with 77 unique: 17 x 77 = 1309 against B with 20: 65 x 20 = 1300: A first (3 x
    # width + 1 would give 1925 / 1940, B first).
    kw = dict(ids={"A": 77.0, "B": 20.0}, widths={"A": 8, "B": 32})
    assert tiny(num_serialized_tables=2, **kw).detail["serialized"] == ("A", "B")


def test_one_stack_or_no_serialization_serializes_nothing():
    # One stack: nothing to serialize against, even when two are asked for.
    assert tiny(num_serialized_tables=2).detail["serialized"] == ()
    # 0 and 1 both mean none (xla_sc_num_serialized_tables_to_optimize_hbm <= 1).
    kw = dict(ids={"a": 1.0, "b": 2.0}, widths={"a": 8, "b": 8})
    for n in (0, 1):
        assert tiny(num_serialized_tables=n, **kw).detail["serialized"] == (), n


def test_bf16_rows_use_bf16_lanes():
    # bf16 width 16: 16 elements of 2 B = one 32-byte granule, one instruction of 16 bf16
    # lanes per row (8 f32 lanes would take 2). Forward: ceil(4 / 2) = 2 rows x 1 = 2.
    # Backward: 2 rows scattered + 2 owned rows x 1 x 2 (sgd) = 6.
    ds = tiny(dtype="bf16", widths={"t": 16}).to_dataset()
    assert ds["padded_width"].sel(stack="t").item() == 16
    assert ds["sc_vector_instructions_per_tile"].sel(stack="t").values.ravel().tolist() == [2, 6]


def test_int8_backward_pays_dequantize_on_the_scatter():
    # s8 width 8 -> 32 lanes, 4 instructions per row (test_int8_rows_use_32_lanes...).
    # Backward: 2 rows x 4 x (1 combine + 1 dequantize) = 16, + 2 owned rows x 4 x 2
    # (sgd) = 16: 32.
    ds = tiny(dtype="s8").to_dataset()
    assert ds["sc_vector_instructions_per_tile"].sel(stack="t").values.ravel().tolist() == [16, 32]


def test_tile_bandwidth_and_times_are_not_rounded():
    # 65 B/s of HBM over 2 tiles: 32.5 B/s per tile. Forward DMA 96 B -> 96 / 32.5 s;
    # backward 2 rows x 32 B x 2 + 32 B = 160 B -> 160 / 32.5 s. 4 vector instructions
    # per second: 2 -> 0.5 s, 6 -> 1.5 s.
    chip = tiny_chip(hbm_bandwidth_bytes_per_s=65.0)
    topo = scwork.Topology(1, 1)
    m = step_model(expected_stats({"t": 4.0}, topo, batch_size=1), widths={"t": 8}, topology=topo, chip=chip,
                   params=EXACT.replace(sc_tile_vector_ops_per_s=4.0))
    assert m.detail["tile_bandwidth"] == 32.5
    ds = m.to_dataset()
    assert ds["sc_dma_time"].sel(stack="t").values.ravel().tolist() == pytest.approx([96 / 32.5, 160 / 32.5])
    assert ds["sc_vector_time"].sel(stack="t").values.ravel().tolist() == pytest.approx([0.5, 1.5])


def test_granules_smaller_than_one_f32():
    # 2-byte granules: half an f32 each. Width 3 is not padded (one element per line at
    # least), a row is ceil(3 x 4 / 2) = 6 granules = 12 B, and the activation row too.
    # Forward: 2 rows x 12 B + 12 B = 36 B; backward 2 x 12 x 2 + 12 = 60 B.
    chip = tiny_chip(dma_granule_bytes=2)
    topo = scwork.Topology(1, 1)
    ds = step_model(expected_stats({"t": 4.0}, topo, batch_size=1), widths={"t": 3}, topology=topo, chip=chip,
                    params=EXACT).to_dataset()
    assert ds["padded_width"].sel(stack="t").item() == 3
    assert ds["row_granules"].sel(stack="t").item() == 6
    assert ds["sc_dma_bytes_per_tile"].sel(stack="t").values.ravel().tolist() == [36, 60]


def test_parts_of_stacks_with_different_minibatch_counts():
    # a in 2 mini-batches of 2 ids (2 unique): per mini-batch 1 row per tile, so 2 rows
    # and 2 instructions in all: forward max(3, 2) = 3 s, 1.5 s per mini-batch; b in one
    # (8 ids, 1 unique): 4 s. Shares 1.5 / 7, 1.5 / 7, 4 / 7. Backward: a max(5, 6) = 6
    # s, b 6 s (test_parts_share...): 3 / 12, 3 / 12, 6 / 12.
    kw = dict(ids={"a": 4.0, "b": 8.0}, widths={"a": 8, "b": 8}, unique_fraction={"a": 1.0, "b": 0.125},
              num_minibatches={"a": 2, "b": 1})
    m = tiny(**kw)
    labels, frac = m.parts["sc_forward"]
    assert labels == ["a (mini-batch 1/2)", "a (mini-batch 2/2)", "b"]
    assert frac[:, 0].tolist() == pytest.approx([1.5 / 7, 1.5 / 7, 4 / 7])
    assert m.parts["sc_backward"][1][:, 0].tolist() == pytest.approx([0.25, 0.25, 0.5])
    # A hundred times faster HBM and vector units: the same shares of a phase of
    # max(DMA 3 + 2, vector 2 + 4) / 100 = 0.06 s.
    chip = tiny_chip(hbm_bandwidth_bytes_per_s=6400.0)
    topo = scwork.Topology(1, 1)
    stats = expected_stats(kw["ids"], topo, batch_size=1, unique_fraction=kw["unique_fraction"])
    fast = step_model(stats, widths=kw["widths"], topology=topo, chip=chip, num_minibatches=kw["num_minibatches"],
                      params=EXACT.replace(sc_tile_vector_ops_per_s=100.0))
    assert fast.phase_time["sc_forward"] == pytest.approx(0.06)
    assert fast.parts["sc_forward"][1][:, 0].tolist() == pytest.approx([1.5 / 7, 1.5 / 7, 4 / 7])


def test_no_tensorcore_time_is_zero_both_ways():
    m = tiny()
    assert (m.phase_time["tc_forward"], m.phase_time["tc_backward"]) == (0.0, 0.0)
    assert any("no TensorCore time given" in a for a in m.assumptions)


@pytest.mark.filterwarnings("error")   # no numpy warning (a division by zero) on the way
@pytest.mark.parametrize("a2a", ["uniform", "data"])
def test_remote_rows_are_those_of_other_devices_either_way(a2a):
    # 2 devices: all 4 ids of both go to the hot partition. On device 0 (hot_partition=0)
    # device 1 requests 4 rows; on device 1, device 0 does. Either way the busiest device
    # sends 4 rows: f32 width 8, 32 B + a 4-byte id = 36 B each way: 144 B.
    topo = scwork.Topology(2, 1)
    for hot in (0, 1):
        stats = expected_stats({"t": 4.0}, topo, batch_size=2, hot_fraction=1.0, hot_partition=hot)
        m = step_model(stats, widths={"t": 8}, topology=topo, chip=tiny_chip(), params=EXACT, a2a=a2a)
        assert m.to_dataset()["ici_bytes_per_device"].sel(stack="t").values.tolist() == [144, 144], hot


@pytest.mark.parametrize("a2a", ["uniform", "data"])
def test_gradient_rows_of_activations_one_per_granule(a2a):
    # 32-byte activations in 32-byte granules: one per granule, so a gradient row of width
    # 3 is 3 x 32 B + a 4-byte id = 100 B (not padded to 4). 4 remote rows: 400 B. The
    # bf16 table row pads 3 to 16 (one granule): 32 + 4 = 36 B, 144 B.
    topo = scwork.Topology(2, 1)
    stats = expected_stats({"t": 4.0}, topo, batch_size=2, hot_fraction=1.0, hot_partition=1)
    m = step_model(stats, widths={"t": 3}, topology=topo, chip=tiny_chip(), dtype="bf16", a2a=a2a,
                   params=EXACT.replace(activation_bytes=32))
    assert m.to_dataset()["ici_bytes_per_device"].sel(stack="t").values.tolist() == [144, 400]


@pytest.mark.filterwarnings("error")
def test_routed_all_to_all_of_two_stacks_on_a_line_of_three():
    # 3 chips in a line (0 - 1 - 2, no wraparound), one SparseCore each. Every device has
    # 6 ids of each stack: half (3) to the hot partition 2, the other 3 one per partition:
    # a device requests 1, 1, 4 unique rows from partitions 0, 1, 2.
    # Rows sent off-device per requester: devices 0 and 1: 1 + 4 = 5, device 2: 1 + 1 = 2;
    # the busiest sends 5. a (f32 width 8): rows of 32 + 4 = 36 B both ways: 180 B;
    # b (f32 width 16): 64 + 4 = 68 B: 340 B.
    # Forward, owner -> requester, per link (rows): 0->1: owner 0 to 1 and 2 = 2; 1->2:
    # owner 0 and 1 to 2 = 2; 1->0: owner 1 and 2 to 0 = 1 + 4 = 5; 2->1: owner 2 to 1 and
    # 0 = 8. Backward the reverse: 0->1: 5, 1->2: 8, 1->0: 2, 2->1: 2. Summed over the
    # stacks, 36 + 68 = 104 B a row. Times with 36 B/s links and 0.5 s per hop, the
    # farthest route 2 hops: a 8 x 36 / 36 + 1 = 9 s, b 8 x 68 / 36 + 1 s, each way.
    topo = scwork.Topology(3, 1, shape=(3,), wraparound=(False,))
    stats = expected_stats({"a": 6.0, "b": 6.0}, topo, batch_size=3, hot_fraction=0.5, hot_partition=2)
    assert stats["unique_ids"].sel(stack="a").values[:, 0].tolist() == [[1, 1, 4]] * 3
    p = EXACT.replace(ici_link_bytes_per_s=36.0, ici_latency_s=0.5)
    m = step_model(stats, widths={"a": 8, "b": 16}, topology=topo, chip=tiny_chip(), params=p, a2a="data")
    ds = m.to_dataset()
    assert ds["ici_bytes_per_device"].values.tolist() == [[180, 180], [340, 340]]
    links = m.detail["ici_links"]
    assert list(zip(links["source_chip"].values.tolist(), links["destination_chip"].values.tolist())) == \
        [(0, 1), (1, 2), (1, 0), (2, 1)]
    assert links["link_bytes"].values.T.tolist() == [[208, 208, 520, 832], [520, 832, 208, 208]]
    per_stack = [9.0, 8 * 68 / 36 + 1.0]
    assert m.detail["ici_time"].ravel().tolist() == pytest.approx([per_stack[0]] * 2 + [per_stack[1]] * 2)
    assert links["time"].values.tolist() == pytest.approx([sum(per_stack)] * 2)
    assert m.phase_time["ici_forward"] == pytest.approx(sum(per_stack))


def test_routed_all_to_all_on_one_device_sends_nothing():
    one = tiny(a2a="data", params=EXACT.replace(ici_link_bytes_per_s=36.0, ici_latency_s=0.5))
    assert one.to_dataset()["ici_bytes_per_device"].sel(stack="t").values.tolist() == [0, 0]
    assert (one.phase_time["ici_forward"], one.phase_time["ici_backward"]) == (0.0, 0.0)
