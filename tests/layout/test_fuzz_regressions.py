"""Regression tests for root causes the layout fuzz suite (tests/fuzz/test_fuzz_layout.py) found."""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError, LayoutError
from scwork.layout import Shape, embedding, npu, parse, view


def test_numbers_longer_than_int_conversion_limit_are_a_layout_error():
    # int() refuses texts of more than 4300 digits with a ValueError.
    with pytest.raises(LayoutError, match=r"5000 digits\) does not fit in a signed 64-bit integer"):
        parse("f32[" + "9" * 5000 + "]")
    assert parse("f32[" + "0" * 30 + "7]").dims == (7,)          # leading zeros are not digits too many


def test_shape_numbers_beyond_int64_are_refused_with_a_printable_message():
    with pytest.raises(LayoutError, match="about 5000 digits.*does not fit in a signed 64-bit"):
        Shape("f32", [10**5000])
    with pytest.raises(LayoutError, match="does not fit in a signed 64-bit integer"):
        Shape("f32", [3], tail_padding_alignment=2**64)


def test_index_map_checks_its_arguments():
    shape = parse("f32[3,5]{1,0:T(2,2)}")
    for bad in ("10", None, 2.5, float("nan")):
        with pytest.raises(LayoutError, match="max_elements must be an integer"):
            shape.index_map(max_elements=bad)
    with pytest.raises(LayoutError, match="unknown engine"):
        shape.index_map(["numpy"])


def test_shapes_numpy_cannot_hold_are_a_layout_error():
    with pytest.raises(LayoutError, match="at most 64 dimensions"):
        Shape("f32", (1,) * 65).index_map()
    with pytest.raises(LayoutError, match="empty array"):
        parse("f32[0,4611686018427387904,4]").index_map()
    long_tile = Shape("f32", (3,), tiles=[(1,) * 100])        # a view of 100 dimensions
    with pytest.raises(LayoutError, match="at most 64 dimensions"):
        long_tile.view_index_map()
    # buffer_window unravels by hand (np.unravel_index stops at 64 dimensions)
    assert view.buffer_window(long_tile, 0, 3)["element"].values.tolist() == [0, 1, 2]


def test_to_physical_refuses_ragged_arrays_and_fills_it_cannot_store():
    shape = parse("f32[3]{0:T(2)}")
    with pytest.raises(LayoutError, match="not an array"):
        shape.to_physical([1, [2, 3], 4])
    with pytest.raises(LayoutError, match="not an array"):
        shape.from_physical([1, [2, 3], 4, 5])
    ints = np.array([1, 2, 3])
    for fill in (np.nan, 1.5, 2**70, "7", None, 1j):
        with pytest.raises(LayoutError, match="cannot be stored exactly"):
            shape.to_physical(ints, fill=fill)   # was: NaN cast to garbage, OverflowError, ...
    with pytest.raises(LayoutError, match="cannot be stored exactly"):
        shape.to_physical(np.array([1, 2, 3], np.uint8), fill=-1)
    assert shape.to_physical(np.array([1.0, 2.0, 3.0], np.float32), fill=0.1)[-1] == np.float32(0.1)
    assert np.isnan(shape.to_physical(np.array([1.0, 2.0, 3.0]), fill=np.nan)[-1])


@pytest.mark.parametrize("rows", [(0, float("inf")), (0, 1 + 2j), (0, "3"), b"", 5])
def test_view_bounds_must_be_integer_pairs(rows):
    with pytest.raises(LayoutError, match="rows"):
        view.view_window(parse("f32[3,5]{1,0:T(2,2)}"), rows=rows)


def test_view_sizes_are_checked_and_bounded_before_allocating():
    big = parse("bf16[65536,65536]{1,0:T(8,128)(2,1)}")
    with pytest.raises(LayoutError, match="max_cells must be"):
        view.view_window(big, (0, 2), (0, 2), max_cells="many")
    with pytest.raises(LayoutError, match="max_blocks"):
        view.view_overview(big, max_blocks=1 + 2j)
    with pytest.raises(LayoutError, match="MAX_WINDOW_BYTES"):     # 10**6 x 10**6 blocks
        view.view_overview(big, max_blocks=(10**6, 10**6))
    with pytest.raises(LayoutError, match="max_cells=4,194,304"):
        view.view_overview(big, max_blocks=(2048, 4096))
    # A raised max_cells cannot lift the memory bound: 2**32 addresses x 14 columns was 448 GiB.
    with pytest.raises(LayoutError, match="MAX_WINDOW_BYTES"):
        view.buffer_window(big, 0, 2**32, max_cells=2**63 - 1)
    with pytest.raises(LayoutError, match="MAX_WINDOW_BYTES"):
        view.view_window(big, (0, 2**16), (0, 2**16), max_cells=2**40)
    with pytest.raises(LayoutError, match="MAX_ROW_CHECKS"):
        view.view_overview(big, max_row_checks=2**70)
    assert view.view_overview(big, max_blocks=(256, 256)).attrs["level"] == "tile blocks"


def test_npu_occupancy_checks_max_cells_and_int64_offsets():
    layout = npu.local_layout((1, 3, 4, 5), "f16", npu_num=4, eu_bytes=64)
    with pytest.raises(LayoutError, match="max_cells must be"):
        layout.occupancy(max_cells=None)
    with pytest.raises(LayoutError, match="MAX_OCCUPANCY_CELLS"):
        layout.occupancy(max_cells=2**40)
    # Offsets past int64 wrapped in the numpy arithmetic: used bytes came out negative.
    huge = npu.local_layout((9, 8, 7, 8), "u32", npu_num=4, eu_bytes=2**62, start_lane=3)
    with pytest.raises(LayoutError, match="beyond what int64 holds"):
        huge.occupancy()


def test_npu_layout_rejects_numbers_beyond_int64_and_array_kinds():
    with pytest.raises(LayoutError, match="does not fit in a signed 64-bit"):
        npu.local_layout((1, 2**64, 1, 1), "f32", chip="bm1684x")
    with pytest.raises(ConfigError, match="eu_bytes"):
        npu.local_layout((1, 2, 1, 1), "f32", npu_num=4, eu_bytes=10**5000)
    with pytest.raises(LayoutError, match="unknown layout kind"):
        npu.local_layout((1, 2, 1, 1), "f32", chip="bm1684x", kind=np.array([]))


def test_embedding_helpers_stay_exact_and_typed_for_huge_tables():
    # A float division rounded 2**63 rows: the packed table came out smaller than its data.
    ds = embedding.packing_whatif(2**63, 1, num_sparsecores=3)
    assert (ds["bytes"].values >= ds.attrs["unpadded_bytes"]).all() and (ds["waste_fraction"].values >= 0).all()
    with pytest.raises(ConfigError, match="more than 2\\*\\*64"):
        embedding.table_padding(10**5000, 8, num_sparsecores=2)
    with pytest.raises(ConfigError, match="tables must be a mapping"):
        embedding.padding_report(5, num_sparsecores=2)
    with pytest.raises(ConfigError, match="give exactly one"):
        embedding.table_padding(10, 8, num_sparsecores=10**5000, topology=scwork.Topology(1, 1))


def test_npu_occupancy_counts_a_shared_4_bit_byte_once():
    # Runs of 15 four-bit elements share their boundary byte: the row held 17 "used" bytes of 16.
    layout = npu.local_layout((3, 1, 3, 5), "s4", chip="bm1688", kind="compact")
    used = layout.occupancy()["used_bytes"].values
    assert used.max() <= layout.eu_bytes
    assert int(used.sum()) == layout.data_bytes == 23
