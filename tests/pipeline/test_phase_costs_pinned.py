"""SparseCore phase costs where the DMA time is what the phase takes (vector work made cheap).

In tests/pipeline/test_model.py's hand-computed cases the backward vector time is the
larger one, so ``max(dma, vector)`` hides the backward DMA bytes: a wrong factor there
(rows read and written back, times the optimizer slots) changes nothing. Here the
vector unit is 1000x faster, so each phase is its DMA time, and the DMA bytes are
checked directly as well.
"""

from __future__ import annotations

import pytest

import scwork
from scwork.pipeline import StepModelParams, expected_stats, step_model

# the made-up chip of test_model.py: 2 tiles per SparseCore, 64 B/s of HBM, 32-byte
# granules, 8 f32 lanes; one SparseCore: 32 B/s per tile
FAST_VECTOR = StepModelParams(sc_op_overhead_s=0.0, sc_tile_vector_ops_per_s=1000.0, csr_bytes_per_id=0)


def tiny(optimizer="sgd", params=FAST_VECTOR, ids_per_sample=4.0, **kw):
    chip = scwork.hardware.override("v5p", sparsecores_per_chip=1, tiles_per_sparsecore=2,
                                    hbm_bandwidth_bytes_per_s=64.0, simd_width_f32=8, simd_width_bf16=16)
    topo = scwork.Topology(1, 1)
    stats = expected_stats({"t": ids_per_sample}, topo, batch_size=1)
    return step_model(stats, widths={"t": 8}, topology=topo, chip=chip, params=params,
                      optimizers={"t": optimizer}, **kw)


@pytest.mark.parametrize("optimizer,slots,dma_bytes", [
    # 4 unique ids on the only partition: the busiest tile owns ceil(4 / 2) = 2 rows of one
    # 32-byte granule. Backward reads and writes each row and each optimizer slot:
    # 2 rows x 32 B x 2 (read + write) x (1 + slots), plus the gradient row (1 sample's
    # activation row on the tile: 32 B).
    ("sgd", 0, 2 * 32 * 2 * 1 + 32),          # 160
    ("adagrad", 1, 2 * 32 * 2 * 2 + 32),      # 288
    ("adam", 2, 2 * 32 * 2 * 3 + 32),         # 416
])
def test_backward_dma_counts_read_and_write_of_rows_and_slots(optimizer, slots, dma_bytes):
    m = tiny(optimizer)
    ds = m.to_dataset()
    assert float(ds["sc_dma_bytes_per_tile"].sel(stack="t", direction="backward").max()) == dma_bytes
    # forward: 2 rows x 32 B gathered + 1 activation row of 32 B, whatever the optimizer
    assert float(ds["sc_dma_bytes_per_tile"].sel(stack="t", direction="forward").max()) == 96
    # the vector work is 1000x faster: each phase is its DMA time at 32 B/s per tile
    assert m.phase_time["sc_backward"] == pytest.approx(dma_bytes / 32, rel=0.01)
    assert m.phase_time["sc_forward"] == pytest.approx(96 / 32, rel=0.01)
    assert m.phase_time["sc_backward"] > ds["sc_vector_time"].sel(stack="t", direction="backward").max() * 10


def test_csr_bytes_per_id_round_each_stream_up_to_8():
    # 4 ids to the one partition: round_up(4, 8) = 8 CSR entries, spread over 2 tiles:
    # 4 per tile x 12 B = 48 B more DMA in each direction.
    with_csr = tiny(params=FAST_VECTOR.replace(csr_bytes_per_id=12))
    ds = with_csr.to_dataset()
    assert float(ds["sc_dma_bytes_per_tile"].sel(stack="t", direction="forward").max()) == 96 + 48
    assert float(ds["sc_dma_bytes_per_tile"].sel(stack="t", direction="backward").max()) == 160 + 48
    # 9 ids (9 unique): round_up(9, 8) = 16 entries, 8 per tile = 96 B; owner rows ceil(9/2) = 5
    nine = tiny(params=FAST_VECTOR.replace(csr_bytes_per_id=12), ids_per_sample=9.0).to_dataset()
    assert float(nine["sc_dma_bytes_per_tile"].sel(stack="t", direction="forward").max()) == 5 * 32 + 96 + 32
