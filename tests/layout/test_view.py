"""Windows, overviews and address ranges of the first-tile view against the full maps."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.errors import LayoutError
from scwork.layout import parse
from scwork.layout.view import ViewGeometry, buffer_window, view_overview, view_window
from scwork.testing import tiled_shapes


def _folded(shape, array):
    geometry = ViewGeometry(shape)
    return np.asarray(array).reshape(geometry.n_rows, geometry.n_cols)


@settings(max_examples=200, deadline=None)
@given(tiled_shapes(max_rank=4, max_dim=6), st.data())
def test_window_equals_the_slice_of_the_full_view_maps(shape, data):
    geometry = ViewGeometry(shape)
    r0 = data.draw(st.integers(0, geometry.n_rows))
    r1 = data.draw(st.integers(r0, geometry.n_rows))
    c0 = data.draw(st.integers(0, geometry.n_cols))
    c1 = data.draw(st.integers(c0, geometry.n_cols))
    window = view_window(shape, (r0, r1), (c0, c1))
    np.testing.assert_array_equal(window["address"].values,
                                  _folded(shape, shape.view_index_map())[r0:r1, c0:c1])
    np.testing.assert_array_equal(window["tile"].values,
                                  _folded(shape, shape.view_tile_map())[r0:r1, c0:c1])
    np.testing.assert_array_equal(window["padding"].values,
                                  _folded(shape, shape.view_padding_mask())[r0:r1, c0:c1])


@settings(max_examples=200, deadline=None)
@given(tiled_shapes(max_rank=4, max_dim=6, alignments=(1, 4, 16)))
def test_buffer_window_inverts_the_layout(shape):
    """Every address: the element the full address map says, and the view cell that maps to it."""
    window = buffer_window(shape, 0, shape.padded_elements)
    np.testing.assert_array_equal(window["element"].values, shape.address_map())
    view_address = _folded(shape, shape.view_index_map())
    rows, cols = window["view_row"].values, window["view_col"].values
    real = rows >= 0
    np.testing.assert_array_equal(view_address[rows[real], cols[real]], window["address"].values[real])
    # Every view cell appears exactly once among the addresses.
    assert real.sum() == view_address.size
    tiles = _folded(shape, shape.view_tile_map())
    np.testing.assert_array_equal(window["tile"].values[real], tiles[rows[real], cols[real]])
    assert (window["tile"].values[~real] == -1).all()


@settings(max_examples=200, deadline=None)
@given(tiled_shapes(max_rank=3, max_dim=9), st.integers(1, 5), st.integers(1, 5))
def test_overview_padding_fraction_is_exact(shape, max_rows, max_cols):
    overview = view_overview(shape, max_blocks=(max_rows, max_cols))
    padding = _folded(shape, shape.view_padding_mask())
    tiles = _folded(shape, shape.view_tile_map())
    br, bc = overview.attrs["block_rows"], overview.attrs["block_cols"]
    for i, r in enumerate(overview["row"].values):
        for j, c in enumerate(overview["col"].values):
            block = padding[r:r + br, c:c + bc]
            assert overview["cells"].values[i, j] == block.size
            assert overview["padding_fraction"].values[i, j] == pytest.approx(block.mean())
            assert overview["tile"].values[i, j] == tiles[r, c]


def test_large_layouts_are_summarised_by_tiles_without_building_the_full_map():
    shape = parse("bf16[65536,65536]{1,0:T(8,128)(2,1)}")
    overview = view_overview(shape, max_blocks=(256, 512))
    # 65536 rows in 256 blocks: 256 rows = 32 tiles of 8 rows; 65536 cols in 512 = one tile.
    assert overview.attrs["level"] == "tile blocks"
    assert (overview.attrs["block_rows"], overview.attrs["block_cols"]) == (256, 128)
    assert dict(overview.sizes) == {"row": 256, "col": 512}
    assert view_overview(shape, (0, 64), (0, 1024), max_blocks=(8, 8)).attrs["level"] == "tiles"
    assert float(overview["padding_fraction"].max()) == 0.0
    zoomed = view_window(shape, (4096, 4104), (1000, 1010))
    assert zoomed["address"].values[0, 0] == shape.linear_index((4096, 1000))
    last = shape.linear_index((65535, 65535))
    assert buffer_window(shape, last, last + 1)["element"].values.tolist() == [65536 * 65536 - 1]


def test_windows_refuse_sizes_they_cannot_hold():
    shape = parse("f32[100000,100000]{1,0:T(8,128)}")
    with pytest.raises(LayoutError, match="max_cells"):
        view_window(shape)
    with pytest.raises(LayoutError, match="max_cells"):
        buffer_window(shape, 0, shape.padded_elements)
    assert view_window(shape, (0, 2), (0, 3))["address"].shape == (2, 3)
    with pytest.raises(LayoutError):
        view_window(shape, rows="a lot")
    with pytest.raises(LayoutError):
        view_overview(shape, max_blocks=(0, 3))


def test_padding_estimate_for_huge_fold_is_flagged():
    shape = parse("f32[1000,501,3]{2,1,0:T(8,128)}")
    overview = view_overview(shape, max_blocks=(64, 64), max_row_checks=1000)
    assert overview.attrs["padding_exact"] is False
    exact = view_overview(shape, max_blocks=(64, 64))
    assert exact.attrs["padding_exact"] is True
    assert math.isclose(float(exact["padding_fraction"].mean()), float(overview["padding_fraction"].mean()),
                        abs_tol=0.05)
