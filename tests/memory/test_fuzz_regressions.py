"""Regression tests for root causes the memory fuzz suite (tests/fuzz/test_fuzz_memory_pipeline.py) found."""

from __future__ import annotations

import pytest

import scwork
from scwork.errors import ConfigError


def test_memory_sweep_checks_parameter_and_values():
    table = scwork.sharding.TableSpec("t", 1000, 8, max_ids_per_partition=64, max_unique_ids_per_partition=64)
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    with pytest.raises(ConfigError, match="parameter must be a keyword"):
        scwork.memory.sweep([table], topo, 3, [1], batch_size=64)
    with pytest.raises(ConfigError, match="parameter must be a keyword"):
        scwork.memory.sweep([table], topo, "nonsense", [1], batch_size=64)
    with pytest.raises(ConfigError, match="values must be a list"):
        scwork.memory.sweep([table], topo, "batch_size", 1j)
    with pytest.raises(ConfigError, match="values is empty"):
        scwork.memory.sweep([table], topo, "batch_size", [])


def test_plan_checks_optimizer_slots_and_bounds_byte_knobs():
    table = scwork.sharding.TableSpec("t", 1000, 8, max_ids_per_partition=64, max_unique_ids_per_partition=64)
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    with pytest.raises(ConfigError, match="optimizer_slots must be a dict"):
        scwork.memory.plan([table], topo, batch_size=64, optimizer_slots=1.5)    # AttributeError before
    # an int64 overflow in the HBM timeline's numpy arrays before
    with pytest.raises(ConfigError, match="tensorcore_activation_bytes must be <="):
        scwork.memory.plan([table], topo, batch_size=64, tensorcore_activation_bytes=2**63)
    with pytest.raises(ConfigError, match="about 5000 digits"):
        scwork.memory.plan([table], topo, batch_size=64, dense_weights_bytes=10**5000)


def test_plan_messages_and_checks_survive_huge_integers():
    table = scwork.sharding.TableSpec("t", 1000, 8, max_ids_per_partition=64, max_unique_ids_per_partition=64)
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    with pytest.raises(ConfigError, match="headroom"):
        scwork.memory.plan([table], topo, batch_size=64, headroom=10**5000)    # OverflowError in isfinite
    with pytest.raises(ConfigError, match="about 5000 digits"):
        scwork.memory.plan([table], topo, batch_size=64, dtype=10**5000)       # ValueError in the message


def test_plan_refuses_odd_option_types_and_huge_batches():
    # Found by the 10,000-case fuzz run: each raised an untyped error before.
    import numpy as np

    table = scwork.sharding.TableSpec("t", 1000, 8, max_ids_per_partition=64, max_unique_ids_per_partition=64)
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    with pytest.raises(ConfigError, match="optimizers must be a dict"):
        scwork.memory.plan([table], topo, batch_size=64, optimizers=np.array([], np.int8))
    with pytest.raises(ConfigError, match="dtype of table 't' must be one of"):
        scwork.memory.plan([table], topo, batch_size=64, dtype=[])          # unhashable
    with pytest.raises(ConfigError, match="batch_size must be <= 1,099,511,627,776"):
        scwork.memory.plan([table], topo, batch_size=3 * 10**4000)
    # a batch of 2**20 is fine: n = 2**20 / 16 = 65536 samples per SparseCore, activations
    # 4 SparseCores x 65536 x width 8 x 4 B per chip
    big = scwork.memory.plan([table], topo, batch_size=2**20)
    assert int(big.hbm.activations.sum()) == 4 * 65536 * 8 * 4


@pytest.mark.parametrize("knob, value", [
    ("maximum_parallel_iterations", 3 * 10**4000),     # a 4000-digit count in the message before
    ("logical_replica_count", 10**30),                 # OverflowError in int64 byte arithmetic before
    ("num_chips", 3 * 10**4000),
    ("num_serialized_tables", 2**63),
])
def test_count_knobs_are_bounded(knob, value):
    table = scwork.sharding.TableSpec("t", 1000, 8, max_ids_per_partition=64, max_unique_ids_per_partition=64)
    topo = scwork.Topology.for_chip("tpu7x", num_chips=1)
    with pytest.raises(ConfigError, match=f"{knob} must be <="):
        scwork.memory.plan([table], topo, batch_size=64, **{knob: value})


def test_stats_that_are_not_a_dataset_are_refused():
    import numpy as np

    table = scwork.sharding.TableSpec("t", 1000, 8)
    topo = scwork.Topology.for_chip("tpu7x", num_chips=1)
    with pytest.raises(ConfigError, match="stats must be the Dataset of scwork.sharding.compute_stats"):
        scwork.memory.plan([table], topo, batch_size=64, stats=np.array([0], np.int8))   # IndexError before
