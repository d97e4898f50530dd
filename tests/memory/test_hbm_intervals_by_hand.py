"""Every HBM allocation of a step (bytes, padding waste, first and end event), worked out by hand.

Survivors of the mutation run of scwork/memory/_hbm_numbers.py: no test pinned the
padding waste of the stacks, activations, staged gather operands and CSR input, nor
where each allocation starts and ends, nor the prefetch buffers at depth 64 / 65.

Hand computation for ``_stacked()`` on 2 v6e chips (S = 2 SparseCores per chip,
P = 4 partitions, LRC = P = 4; 32-byte lines: f32 rows padded to 8 elements), batch
256 (n = 64 samples per SparseCore and feature), tables a (999 x 11) and b (501 x 4),
adagrad (1 slot), stacked as a_b with limits (13, 5):
  widths: a 11 -> 16, b 4 -> 8; stack width 16, widest raw dim 11
  table a: round_up(999, 8 * 4) = 1024 rows, 512 per chip: 512 * 16 * 4 = 32768 B;
           unpadded 999 * 11 / 2 = 5494.5 rows' worth: waste 32768 - 5494.5 * 4 = 10790
  table b: round_up(501, 32) = 512 rows, 256 per chip: 256 * 16 * 4 = 16384 B;
           waste 16384 - 501 * 4 / 2 * 4 = 12376;  each slot as its table
  SC forward stack: S * (2 * 16 + 1) * 5 * 4 * 4 = 5280; with the raw width 11:
           S * 23 * 80 = 3680: waste 1600
  SC backward stack: S * 3 * 16 * 5 * 4 * 4 = 7680; raw: S * 3 * 11 * 80 = 5280: waste 2400
  activations (= gradients = staged gather operand): S * 2 features * 64 * 16 * 4 = 16384;
           waste S * 64 * 4 * ((16 - 11) + (16 - 4)) = 512 * 17 = 8704
  CSR input: round_up(13, 8) = 16 entries x P = 64 per SparseCore; per SparseCore
           max(P, 8) = 8 row pointers * 4 B + 64 * 12 B = 800, per chip 1600;
           waste S * ((64 - 13 * 4) * 12 + (8 - 4) * 4) = 2 * 160 = 320
Events: SC forward (0), TensorCore forward (1), TensorCore backward (2), SC backward (3).
"""

from __future__ import annotations

import pytest

import scwork
from scwork.memory import hbm_report, step_timeline
from scwork.sharding import TableSpec

V6E2 = scwork.Topology.for_chip("v6e", num_chips=2)     # 2 SparseCores per chip, P = 4
V5P2 = scwork.Topology.for_chip("v5p", num_chips=2)     # 4 SparseCores per chip, P = 8
PERSISTENT = 2 * 32768 + 2 * 16384 + 1000 + 24 + 1600  # tables, slots, dense, constants, one prefetch


def _stacked(**extra):
    a = TableSpec("a", 999, 11, optimizer="adagrad", max_ids_per_partition=13, max_unique_ids_per_partition=5)
    b = TableSpec("b", 501, 4, optimizer="adagrad", max_ids_per_partition=13, max_unique_ids_per_partition=5)
    kw = dict(batch_size=256, stacking=[["a", "b"]], stack_limits={"a_b": (13, 5)}, dense_weights_bytes=1000,
              constants_bytes=24, tensorcore_activation_bytes=500, stage_gather_operands_in_hbm=True)
    return [a, b], V6E2, {**kw, **extra}


def _rows(timeline):
    return [(iv.name, iv.category, iv.bytes, iv.waste_bytes, iv.start, iv.end, iv.stack, iv.table)
            for iv in timeline.intervals]


def test_every_interval_by_hand():
    model, topo, kw = _stacked()
    t = step_timeline(model, topo, **kw)
    assert [e.name for e in t.events] == ["SC forward", "TensorCore forward", "TensorCore backward", "SC backward"]
    assert _rows(t) == [
        ("table a", "tables", 32768, 10790.0, 0, 4, "a_b", "a"),
        ("slots a", "optimizer_slots", 32768, 10790.0, 0, 4, "a_b", "a"),
        ("table b", "tables", 16384, 12376.0, 0, 4, "a_b", "b"),
        ("slots b", "optimizer_slots", 16384, 12376.0, 0, 4, "a_b", "b"),
        ("dense weights", "dense_weights", 1000, 0.0, 0, 4, None, None),
        ("constants", "constants", 24, 0.0, 0, 4, None, None),
        ("prefetched input 0", "prefetch", 1600, 320.0, 0, 4, None, None),
        ("SC forward stack a_b", "sc_forward_stack", 5280, 1600.0, 0, 1, "a_b", None),
        ("staged gather operand a_b", "staged_gather_operands", 16384, 8704.0, 0, 1, "a_b", None),
        ("activations a_b", "embedding_activations", 16384, 8704.0, 0, 2, "a_b", None),
        ("gradients a_b", "embedding_gradients", 16384, 8704.0, 2, 4, "a_b", None),
        ("SC backward stack a_b", "sc_backward_stack", 7680, 2400.0, 3, 4, "a_b", None),
        ("TensorCore activations", "tensorcore_activations", 500, 0.0, 1, 3, None, None),
    ]
    # live per event: SC forward holds the forward stack, staged operand and activations;
    # the TensorCore passes the activations (then gradients) and its own 500 B; SC backward
    # the gradients and the backward stack
    assert t.usage_bytes.tolist() == [PERSISTENT + 5280 + 16384 + 16384, PERSISTENT + 16384 + 500,
                                      PERSISTENT + 16384 + 500, PERSISTENT + 16384 + 7680]
    ds = hbm_report(model, topo, **kw)
    assert ds["table_waste_bytes"].values.tolist() == [2 * 10790.0, 2 * 12376.0]
    assert ds.attrs["prefetch_default"] == 1


def test_no_zero_byte_intervals_and_no_staging():
    model, topo, kw = _stacked(dense_weights_bytes=0, constants_bytes=0, tensorcore_activation_bytes=0,
                               stage_gather_operands_in_hbm=False)
    names = [iv.name for iv in step_timeline(model, topo, **kw).intervals]
    assert names == ["table a", "slots a", "table b", "slots b", "prefetched input 0", "SC forward stack a_b",
                     "activations a_b", "gradients a_b", "SC backward stack a_b"]


def test_a_given_prefetch_size_has_no_padding_waste():
    model, topo, kw = _stacked(prefetch_bytes_per_step=5000, maximum_parallel_iterations=2)
    rows = [r for r in _rows(step_timeline(model, topo, **kw)) if r[1] == "prefetch"]
    assert rows == [("prefetched input 0", "prefetch", 5000, 0.0, 0, 4, None, None),
                    ("prefetched input 1", "prefetch", 5000, 0.0, 0, 4, None, None)]
    assert hbm_report(model, topo, **kw).attrs["prefetch_default"] == 0


def test_prefetch_buffers_one_each_up_to_depth_64_then_one():
    model, topo, kw = _stacked(maximum_parallel_iterations=64)
    rows = [r for r in _rows(step_timeline(model, topo, **kw)) if r[1] == "prefetch"]
    assert rows == [(f"prefetched input {k}", "prefetch", 1600, 320.0, 0, 4, None, None) for k in range(64)]
    model, topo, kw = _stacked(maximum_parallel_iterations=65)
    rows = [r for r in _rows(step_timeline(model, topo, **kw)) if r[1] == "prefetch"]
    # 65 steps of 1600 B, 320 B of them padding each
    assert rows == [("prefetched input (x65 steps)", "prefetch", 104000, 20800.0, 0, 4, None, None)]


def test_static_csr_buffer_smaller_than_the_limits_wastes_only_row_pointers():
    """suggested_coo_buffer_size_per_device = 64 on a v6e device (S = 2): round_up(64, 16) / 2 = 32
    entries per SparseCore, fewer than 13 * 4 = 52 the limits ask for: no entry is padding;
    the waste is the row pointers past P = 4: S * (8 - 4) * 4 = 32 B. Input per chip:
    S * (8 * 4 + 32 * 12) = 832 B."""
    c = TableSpec("c", 999, 11, max_ids_per_partition=13, max_unique_ids_per_partition=5,
                  suggested_coo_buffer_size_per_device=64)
    t = step_timeline([c], V6E2, batch_size=256, stacking=None)
    (prefetch,) = [iv for iv in t.intervals if iv.category == "prefetch"]
    assert (prefetch.bytes, prefetch.waste_bytes) == (832, 32.0)


def test_slots_in_their_own_dtype():
    """bf16 table with f32 slots on 2 v6e chips: bf16 rows pad to 16 elements (11 -> 16);
    table 512 * 16 * 2 = 16384 B, waste 16384 - 5494.5 * 2 = 5395; slot 512 * 16 * 4 = 32768 B,
    waste 32768 - 5494.5 * 4 = 10790."""
    a = TableSpec("a", 999, 11, optimizer="adagrad", max_ids_per_partition=13, max_unique_ids_per_partition=5)
    ds = hbm_report([a], V6E2, batch_size=256, stacking=None, dtype="bf16", slot_dtype="f32")
    assert int(ds["table_bytes"].sel(table="a")) == 16384
    assert int(ds["slot_bytes"].sel(table="a")) == 32768
    assert float(ds["table_waste_bytes"].sel(table="a")) == 5395.0 + 10790.0


# --------------------------------------------------------------------------------------
# serialization
# --------------------------------------------------------------------------------------
def _order_tables():
    """Stacks y (1 table, 7 unique ids) and x1_x2 (2 tables, 1 unique id), 8 wide, on 2 v5p
    chips (S = 4, P = LRC = 8), batch 1024 (n = 128):
      forward stack  y: 4 * 17 * 7 * 8 * 4 = 15232     x1_x2: 4 * 17 * 1 * 8 * 4 = 2176
      staged operand y: 4 * 128 * 8 * 4 = 16384        x1_x2: 4 * 256 * 8 * 4 = 32768
    Staged, x1_x2 holds more (34944 against 31616) although its forward stack is smaller."""
    tables = [TableSpec("y", 1000, 8, max_ids_per_partition=64, max_unique_ids_per_partition=7),
              TableSpec("x1", 1000, 8, max_ids_per_partition=64, max_unique_ids_per_partition=1),
              TableSpec("x2", 1000, 8, max_ids_per_partition=64, max_unique_ids_per_partition=1)]
    return tables, dict(batch_size=1024, stacking=[["y"], ["x1", "x2"]],
                        stack_limits={"y": (64, 7), "x1_x2": (64, 1)}, num_serialized_tables=2)


def test_chain_order_counts_the_staged_operand():
    tables, kw = _order_tables()
    staged = hbm_report(tables, V5P2, **kw, stage_gather_operands_in_hbm=True)
    assert staged["stack"].values.tolist() == ["y", "x1_x2"]
    assert staged["forward_stack_bytes"].values.tolist() == [15232, 2176]
    assert staged["staged_gather_bytes"].values.tolist() == [16384, 32768]
    assert staged["serialization_slot"].values.tolist() == [1, 0]          # x1_x2 first
    plain = hbm_report(tables, V5P2, **kw)
    assert plain["serialization_slot"].values.tolist() == [0, 1]            # y: the larger stack


def test_one_stack_is_never_a_chain():
    t = TableSpec("t", 1000, 8, max_ids_per_partition=8, max_unique_ids_per_partition=4)
    ds = hbm_report([t], V5P2, batch_size=256, stacking=None, num_serialized_tables=2)
    assert ds["serialization_slot"].values.tolist() == [-1]
    tl = step_timeline([t], V5P2, batch_size=256, stacking=None, num_serialized_tables=2)
    assert tl.num_serialized_slots == 1 and tl.serialized_stacks == ()


def test_three_of_four_stacks_serialized_by_hand():
    """Tables t0..t3 (1000 x 8, sgd, max_ids 8) with 1, 4, 3, 2 unique ids on 2 v5p chips,
    batch 256 (S = 4, P = LRC = 8, n = 32), three serialized: the chain is t1, t2, t3 (largest
    forward stack first), t0 runs beside it through each phase. Per table:
      gathered rows 4 * U * 8 * 8 * 4 = 1024 U; activations 4 * 32 * 8 * 4 = 4096;
      CSR input 4 * (8 * 4 + 8 * 8 * 12) = 3200 (8 entries per partition: no padding)
      forward traffic 1024 U + 4096 + 3200 = 1024 U + 7296
      backward traffic 4096 + 2 * 1024 U + 3200 = 2048 U + 7296
    Slot j of a phase moves its chain stack's traffic and a third of t0's
    (8320 / 3 forward, 9344 / 3 backward). Events: 3 forward slots, TensorCore forward
    (4) and backward (5), 3 backward slots: 8 in all."""
    tables = [TableSpec(f"t{i}", 1000, 8, max_ids_per_partition=8, max_unique_ids_per_partition=u)
              for i, u in enumerate([1, 4, 3, 2])]
    kw = dict(batch_size=256, stacking=None, num_serialized_tables=3, dense_weights_bytes=1000)
    t = step_timeline(tables, V5P2, **kw)
    bw = scwork.hardware.get("v5p").hbm_bandwidth_bytes_per_s
    fwd = {u: 1024 * u + 7296 for u in (1, 2, 3, 4)}
    bwd = {u: 2048 * u + 7296 for u in (1, 2, 3, 4)}
    expected = [fwd[4] + fwd[1] / 3, fwd[3] + fwd[1] / 3, fwd[2] + fwd[1] / 3,
                1000 + 4 * 4096, 2 * 1000 + 4 * 4096,
                bwd[4] + bwd[1] / 3, bwd[3] + bwd[1] / 3, bwd[2] + bwd[1] / 3]
    assert [(e.end_s - e.start_s) * bw for e in t.events] == pytest.approx(expected, rel=1e-12)
    assert len(t.usage_bytes) == 8
    spans = {(iv.category, iv.stack): (iv.start, iv.end) for iv in t.intervals}
    assert [spans["sc_forward_stack", s] for s in ("t0", "t1", "t2", "t3")] == [(0, 3), (0, 1), (1, 2), (2, 3)]
    assert [spans["sc_backward_stack", s] for s in ("t0", "t1", "t2", "t3")] == [(5, 8), (5, 6), (6, 7), (7, 8)]
    assert [spans["embedding_activations", s] for s in ("t0", "t1", "t2", "t3")] == [(0, 4), (0, 4), (1, 4),
                                                                                       (2, 4)]
    assert [spans["embedding_gradients", s] for s in ("t0", "t1", "t2", "t3")] == [(4, 8), (4, 6), (4, 7),
                                                                                     (4, 8)]
    assert spans["tables", "t0"] == (0, 8) and spans["dense_weights", None] == (0, 8)
    (prefetch,) = [iv for iv in t.intervals if iv.category == "prefetch"]
    assert (prefetch.bytes, prefetch.waste_bytes) == (4 * 3200, 0.0)
