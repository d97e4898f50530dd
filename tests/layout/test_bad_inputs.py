"""Regression tests for root causes found by an adversarial user (layout, NPU, embedding, memory)."""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError, LayoutError
from scwork.layout import MAX_MAP_ELEMENTS, embedding, npu, parse
from scwork.testing import check_surface


def test_huge_index_map_is_refused_before_allocating_and_windows_still_work():
    shape = parse("f32[1000000,1000000]")
    _, error = check_surface("layout.index_map", shape.index_map, seconds=10)
    assert isinstance(error, LayoutError) and "max_elements" in str(error)
    assert shape.linear_index((999_999, 999_999)) == 10**12 - 1
    small = parse("f32[3,5]{1,0:T(2,2)}")
    with pytest.raises(LayoutError, match="max_elements=10"):
        small.index_map(max_elements=10)
    assert MAX_MAP_ELEMENTS == 2**28


def test_zero_element_shape_with_a_huge_dim_gives_an_empty_map():
    result, error = check_surface("layout.index_map", parse("f32[0,100000000000]").index_map, seconds=10)
    assert error is None and result.shape == (0, 100_000_000_000) and result.size == 0


def test_npu_fit_search_is_bounded_for_a_billion_rows():
    lay = npu.local_layout((1, 64, 10**9, 64), "f32", chip="bm1684x")
    _, error = check_surface("npu.check_fits", lay.check_fits, seconds=5)
    assert isinstance(error, LayoutError) and "at most H=1024 rows" in str(error)


def test_npu_occupancy_of_a_huge_tensor_is_refused_before_allocating():
    lay = npu.local_layout((1, 64, 100_000, 1000), "f32", chip="bm1684x")
    _, error = check_surface("npu.occupancy", lay.occupancy, seconds=10)
    assert isinstance(error, LayoutError) and "max_cells" in str(error)


def test_embedding_helpers_take_huge_vocabularies_and_reject_non_string_dtypes():
    report, error = check_surface(
        "embedding.padding_report",
        lambda: embedding.padding_report({"t": (2**63, 8)}, topology=scwork.Topology(4, 4)), seconds=10)
    assert error is None and int(report["padded_vocab"].values[0]) >= 2**63
    with pytest.raises(ConfigError, match="dtype must be a name"):
        embedding.table_padding(1000, 8, dtype=["f32"], topology=scwork.Topology(4, 4))


def test_deep_prefetch_is_one_buffer_not_a_loop():
    table = scwork.sharding.TableSpec("t", 1000, 8, max_ids_per_partition=64, max_unique_ids_per_partition=64)
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    report, error = check_surface(
        "memory.plan", lambda: scwork.memory.plan([table], topo, batch_size=1024,
                                                  maximum_parallel_iterations=2**31 - 1), seconds=10)
    assert error is None and not report.fits
    one = scwork.memory.plan([table], topo, batch_size=1024)
    per_step = int(one.summary()["prefetch_bytes_at_peak"])
    assert int(report.summary()["prefetch_bytes_at_peak"]) == per_step * (2**31 - 1)
    depth = dict((f.parameter, f.value) for f in report.fixes)["maximum_parallel_iterations"]
    assert scwork.memory.plan([table], topo, batch_size=1024, maximum_parallel_iterations=depth).fits
    assert not scwork.memory.plan([table], topo, batch_size=1024, maximum_parallel_iterations=depth + 1).fits
    assert np.isfinite(depth)


@pytest.mark.parametrize("width", [2**31 - 1, 2**24])
def test_memory_plan_of_absurd_widths_is_a_typed_error_not_an_overflow(width):
    """memory.plan raised a raw OverflowError (or wrapped int64) for huge widths."""
    table = scwork.sharding.TableSpec("t", 2**20, width, max_ids_per_partition=2**31 - 1,
                                      max_unique_ids_per_partition=2**31 - 1)
    _, error = check_surface("memory.plan", lambda: scwork.memory.plan(
        [table], scwork.Topology.for_chip("v5p", num_chips=4), batch_size=1024), seconds=10)
    assert isinstance(error, ConfigError) and "64-bit byte counts" in str(error)
    with pytest.raises(ConfigError, match="embedding_dim must be <= 2147483647"):
        scwork.sharding.TableSpec("t", 10, 2**31)
