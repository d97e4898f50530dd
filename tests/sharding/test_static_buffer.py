"""Static CSR buffers (suggested_coo_buffer_size_per_device), as jax-tpu-embedding fills them."""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError, StaticBufferWarning
from scwork.sharding import (
    FeatureBatch,
    FeatureSpec,
    SparsecoreConfig,
    TableSpec,
    compute_stats,
    plan_stacking,
    preprocess,
)

PAD = 2**31 - 1
TOPO = scwork.Topology(1, 2)          # one device, two SparseCores: P = 2, R = 8 row pointers


def _batch():
    # sample 0 (SparseCore 0): ten even ids -> partition 0, one odd id -> partition 1;
    # sample 1 (SparseCore 1): two odd ids -> partition 1.
    sample0 = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 1]
    sample1 = [1, 3]
    return FeatureBatch.from_ragged({"f": (np.array(sample0 + sample1), np.array([0, 11, 13]))})


def _features(suggested, max_ids=64):
    return [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_ids,
                                       suggested_coo_buffer_size_per_device=suggested))]


def test_worked_example_fills_partitions_in_order_and_drops_the_rest():
    # 16 entries per device = 8 per SparseCore. SparseCore 0: partition 0 takes 8 of its
    # 10 ids, the end of the buffer is reached, its 2 others and partition 1's id are
    # dropped; every row pointer past that point is 8. SparseCore 1: partition 0 is
    # empty, partition 1 holds its 2 ids; the rows past P point at the aligned end, 8.
    with pytest.warns(StaticBufferWarning, match="3 ids did not fit the static CSR buffer of 16"):
        result = preprocess(_batch(), _features(16), TOPO, stacking=None)
    csr = result.csr["t"]
    assert csr.buffer_size_per_sc == 8
    assert csr.row_pointers.tolist() == [[8, 8, 8, 8, 8, 8, 8, 8, 0, 2, 8, 8, 8, 8, 8, 8]]
    assert csr.embedding_ids.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7, 0, 1, PAD, PAD, PAD, PAD, PAD, PAD]]
    assert csr.sample_ids[0, :10].tolist() == [0] * 10
    assert np.isnan(csr.gains[0, 10:]).all()
    stats = result.stats.sel(stack="t")
    assert int(stats["dropped_ids"]) == int(stats["static_buffer_dropped_ids"]) == 3
    # the statistics describe the batch, not the buffer
    assert stats["required_buffer_size_per_sc"].values.tolist() == [[24, 8]]
    with pytest.warns(StaticBufferWarning):
        counted = compute_stats(_batch(), _features(16), TOPO, stacking=None)
    assert int(counted["static_buffer_dropped_ids"].sel(stack="t")) == 3


def test_the_suggestion_is_rounded_up_to_8_entries_per_sparsecore():
    # 41 -> 48 entries per device (24 per SparseCore): SparseCore 0 needs 16 + 8, all fits
    result = preprocess(_batch(), _features(41), TOPO, stacking=None)
    assert result.csr["t"].buffer_size_per_sc == 24
    assert int(result.stats["dropped_ids"].sel(stack="t")) == 0
    assert plan_stacking(_features(41), TOPO, None).stacks[0].static_buffer_size_per_sc(2) == 24
    # 17 -> 32 (16 per SparseCore): partition 1 of SparseCore 0 starts at 16, the end
    with pytest.warns(StaticBufferWarning, match="1 ids did not fit"):
        short = preprocess(_batch(), _features(17), TOPO, stacking=None)
    assert short.csr["t"].row_pointers.tolist()[0][:2] == [10, 16]


def test_drops_happen_whatever_allow_id_dropping_says():
    for dropping in (False, True):
        with pytest.warns(StaticBufferWarning):
            stats = compute_stats(_batch(), _features(16), TOPO, stacking=None,
                                  config=SparsecoreConfig(allow_id_dropping=dropping))
        assert int(stats["dropped_ids"].sel(stack="t")) == 3


def test_a_suggestion_larger_than_the_limits_allow_is_a_config_error():
    # round_up(max_ids=4, 8) x S=2 x P=2 = 32 entries per device at most
    with pytest.raises(ConfigError, match="exceeds the largest buffer its limits can fill.*32 entries"):
        plan_stacking(_features(40, max_ids=4), TOPO, None)
    assert plan_stacking(_features(32, max_ids=4), TOPO, None).stacks[0].suggested_coo_buffer_size_per_device == 32


def test_stacking_drops_the_tables_suggestion_as_the_library_does():
    a = TableSpec("a", 64, 8, max_ids_per_partition=64, suggested_coo_buffer_size_per_device=16)
    b = TableSpec("b", 64, 8, max_ids_per_partition=64, suggested_coo_buffer_size_per_device=16)
    features = [FeatureSpec("fa", a), FeatureSpec("fb", b)]
    stacked = plan_stacking(features, TOPO, [["a", "b"]])
    assert stacked.stacks[0].suggested_coo_buffer_size_per_device is None
    alone = plan_stacking(features, TOPO, None)
    assert [st.suggested_coo_buffer_size_per_device for st in alone.stacks] == [16, 16]


def test_stack_limits_can_set_the_buffer():
    plan = plan_stacking(_features(None), TOPO, None,
                         stack_limits={"t": {"max_ids_per_partition": 64, "max_unique_ids_per_partition": 64,
                                             "suggested_coo_buffer_size_per_device": 16}})
    assert plan.stacks[0].suggested_coo_buffer_size_per_device == 16
    with pytest.raises(ConfigError, match="suggested_coo_buffer_size_per_device must be a positive int"):
        plan_stacking(_features(None), TOPO, None, stack_limits={"t": {"suggested_coo_buffer_size_per_device": 0}})


@pytest.mark.parametrize("bad", [0, -8, 2**31, 1.5, True, "16"])
def test_bad_suggestions_are_config_errors(bad):
    with pytest.raises(ConfigError, match="suggested_coo_buffer_size_per_device"):
        TableSpec("t", 64, 8, suggested_coo_buffer_size_per_device=bad)


def test_the_memory_model_sizes_the_csr_input_from_the_static_buffer():
    topo = scwork.Topology.for_chip("v5p", num_chips=1)     # S = P = 4

    def csr_bytes(suggested):
        table = TableSpec("t", 100_000, 64, max_ids_per_partition=256, max_unique_ids_per_partition=256,
                          suggested_coo_buffer_size_per_device=suggested)
        return int(scwork.memory.plan([FeatureSpec("f", table)], topo, batch_size=1024, stacking=None).hbm.csr_bytes[0])

    row_pointers = 4 * 8 * 4                                 # 4 SCs x max(P, 8) int32
    assert csr_bytes(None) == 4 * (256 * 4) * 12 + row_pointers   # round_up(max_ids, 8) x P entries per SC
    assert csr_bytes(1024) == 4 * (1024 // 4) * 12 + row_pointers  # 1024 per device: 256 per SC


def test_config_files_take_the_static_buffer(tmp_path):
    from scwork.config import load_config

    path = tmp_path / "model.toml"
    path.write_text('batch_size = 64\nstacking = "none"\n[topology]\nchip = "v5p"\nnum_chips = 1\n'
                    '[[tables]]\nname = "t"\nvocab_size = 1000\nembedding_dim = 8\nmax_ids_per_partition = 64\n'
                    'suggested_coo_buffer_size_per_device = 512\n')
    assert load_config(path).tables[0].suggested_coo_buffer_size_per_device == 512
    path.write_text(path.read_text().replace("= 512", "= 0"))
    with pytest.raises(ConfigError, match=r"tables\[0\]\.suggested_coo_buffer_size_per_device.*>= 1"):
        load_config(path)
