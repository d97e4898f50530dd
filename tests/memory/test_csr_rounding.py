"""CSR buffers round every partition's entries up to 8, also for limits that are not multiples of 8.

Every other memory test uses limits that are multiples of 8, where a missing round-up
changes nothing. Here the limits are 13 and 5, and the numbers are worked out by hand
from jax-tpu-embedding's buffer sizing (preprocess_sparse_dense_matmul_input: a
device's COO buffer holds ``round_up(max_ids_per_partition, 8) * S * P`` entries of
an embedding id, a sample id and a gain, 4 bytes each, plus ``max(P, 8)`` row pointers
per SparseCore).
"""

from __future__ import annotations

import pytest

import scwork
from scwork.memory import hbm_report, tile_buffers
from scwork.sharding import TableSpec
from scwork.sharding.limits import coo_buffer_bytes_per_device, static_partition_buffer_bytes

V5P2 = scwork.Topology.for_chip("v5p", num_chips=2)   # 4 SparseCores per chip, P = 8


@pytest.mark.parametrize("max_ids,entries_per_partition", [(13, 16), (1, 8), (8, 8), (9, 16), (17, 24)])
def test_hbm_csr_input_rounds_each_partition_up_to_8(max_ids, entries_per_partition):
    table = TableSpec("c", 1000, 12, max_ids_per_partition=max_ids, max_unique_ids_per_partition=1)
    ds = hbm_report([table], V5P2, batch_size=256, stacking=None)
    # per SparseCore: 8 row pointers (max(P, 8) * 4 B) + entries_per_partition * P entries * 12 B
    per_sc = 8 * 4 + entries_per_partition * 8 * 12
    assert int(ds["input_bytes_per_step"].sel(stack="c")) == 4 * per_sc


def test_hbm_csr_with_limit_13_by_hand():
    table = TableSpec("c", 1000, 12, max_ids_per_partition=13, max_unique_ids_per_partition=5)
    ds = hbm_report([table], V5P2, batch_size=256, stacking=None)
    # 4 SparseCores x (32 + round_up(13, 8) = 16 entries x 8 partitions x 12 B) = 4 x 1568
    assert int(ds["input_bytes_per_step"].sel(stack="c")) == 6272
    # the HBM stack takes U = max_unique_ids_per_partition as is (5), width 16, LRC = P = 8:
    # forward 4 x (2 * 16 + 1) * 5 * 8 * 4 = 21120, backward 4 x 3 * 16 * 5 * 8 * 4 = 30720
    assert int(ds["forward_stack_bytes"].sel(stack="c")) == 21120
    assert int(ds["backward_stack_bytes"].sel(stack="c")) == 30720


def test_sharding_buffer_sizes_round_limits_up_to_8():
    topo = scwork.Topology(4, 4)                      # S = 4, P = 16
    # round_up(13, 8) = 16 entries per partition, x 4 x 16 x 12 B
    assert coo_buffer_bytes_per_device(13, topo) == 16 * 4 * 16 * 12 == 12288
    assert coo_buffer_bytes_per_device(16, topo) == 12288
    assert coo_buffer_bytes_per_device(17, topo) == 24 * 4 * 16 * 12
    assert static_partition_buffer_bytes(13) == 16 * 12
    assert static_partition_buffer_bytes([1, 8, 9], bytes_per_entry=4).tolist() == [32, 32, 64]


def test_spmem_tile_buffers_round_limits_up_to_8():
    by_name = tile_buffers(13, 5, 16, 32, num_partitions=8, num_tiles=16, itemsize=4)
    # ids round to 16, distinct ids to 8: embedding ids, sample ids 16 * 4 B; gains 16 * 4 B;
    # unique ids 8 * 4 B; gathered rows 8 * 16 * 4 B
    assert by_name["embedding_ids"] == 64 and by_name["sample_ids"] == 64 and by_name["gains"] == 64
    assert by_name["unique_ids"] == 32
    assert by_name["gathered_rows"] == 8 * 16 * 4
    # gather operand: 32 samples x 16 wide / 16 tiles = 32 elements x 4 B; over 15 tiles ceil(512 / 15) = 35
    assert by_name["gather_operand"] == 128
    assert tile_buffers(13, 5, 16, 32, num_partitions=8, num_tiles=15)["gather_operand"] == 35 * 4
