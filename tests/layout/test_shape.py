"""Shape geometry, addresses, physical round trip, explorer views and XLA's own functions."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scwork.errors import LayoutError
from scwork.layout import Shape, Tile, parse
from scwork.testing import tiled_shapes as _tiled_shapes


def tiled_shapes(**kwargs):
    return _tiled_shapes(alignments=(1, 1, 1, 4, 16), **kwargs)


# --------------------------------------------------------------------------------------
# Worked examples of [xla-tiled]
# --------------------------------------------------------------------------------------
def test_figure_1_f32_3x5_with_2x2_tiles():
    s = parse("F32[3,5]{1,0:T(2,2)}")
    assert s.linear_index((2, 3)) == 17
    assert s.tiled_shape == (2, 3, 2, 2)
    assert s.padded_view_shape == (4, 6)
    assert s.padded_elements == 24
    assert s.index_map().tolist() == [[0, 1, 4, 5, 8], [2, 3, 6, 7, 10], [12, 13, 16, 17, 20]]


def test_figure_2_bf16_4x8_with_2x4_then_2x1_tiles():
    s = parse("bf16[4,8]{1,0:T(2,4)(2,1)}")
    rows = s.index_map().tolist()
    assert rows[0] == list(range(0, 16, 2))
    assert rows[1] == list(range(1, 16, 2))
    assert rows[2] == list(range(16, 32, 2))
    assert rows[3] == list(range(17, 32, 2))
    assert not s.has_padding and s.padded_elements == 32


def test_combined_dimensions_match_the_112x110_view():
    s = parse("f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}")
    flat = parse("f32[112,110]{1,0:T(2,3)}")
    assert s.view_shape == (112, 110)
    assert s.tiled_shape == flat.tiled_shape == (56, 37, 2, 3)
    assert s.padded_elements == flat.padded_elements == 112 * 111
    np.testing.assert_array_equal(s.index_map().reshape(112, 110), flat.index_map())
    e = (1, 5, 3, 7, 9)
    assert s.linear_index(e) == flat.linear_index(((e[0] * 7 + e[1]) * 8 + e[2], e[3] * 10 + e[4]))


def test_non_default_minor_to_major_is_the_transposed_row_major_layout():
    s = parse("f32[3,5]{0,1:T(2,2)}")
    assert s.physical_shape == (5, 3)
    assert s.tiled_shape == (3, 2, 2, 2)
    assert s.linear_index((2, 3)) == 14
    np.testing.assert_array_equal(s.index_map(), parse("f32[5,3]{1,0:T(2,2)}").index_map().T)


def test_lower_rank_tile_applies_to_the_most_minor_dimensions():
    s = parse("f32[2,3,6]{2,1,0:T(4)}")
    assert s.tiled_shape == (2, 3, 2, 4)
    assert s.linear_index((1, 2, 5)) == 45
    i, j, k = np.indices((2, 3, 6))
    np.testing.assert_array_equal(s.index_map(), (i * 3 + j) * 8 + k)


def test_later_tile_crossing_major_dimensions_of_the_previous_tile():
    # (2,1,1) covers (tile column count, in-tile row, in-tile column) of the 2x4
    # tiles: the two tiles of a row pair are interleaved element by element.
    s = parse("bf16[4,8]{1,0:T(2,4)(2,1,1)}")
    assert s.tiled_shape == (2, 1, 2, 4, 2, 1, 1)
    rows = s.index_map().tolist()
    assert rows[0] == [0, 2, 4, 6, 1, 3, 5, 7]
    assert rows[1] == [8, 10, 12, 14, 9, 11, 13, 15]
    assert rows[2] == [v + 16 for v in rows[0]] and rows[3] == [v + 16 for v in rows[1]]


def test_later_tile_can_add_padding():
    s = parse("f32[2,3]{1,0:T(2,3)(2,2)}")
    assert s.tiled_shape == (1, 1, 1, 2, 2, 2)
    assert s.padded_elements == 8 and s.has_padding


def test_first_tile_longer_than_the_shape():
    scalar = parse("f32[]{:T(256)}")
    assert scalar.tiled_shape == (1, 256) and scalar.padded_bytes == 1024
    assert scalar.linear_index(()) == 0
    assert scalar.index_map().shape == () and int(scalar.index_map()) == 0
    assert scalar.address_map().tolist() == [0] + [-1] * 255
    vector = parse("f32[5]{0:T(2,4)}")
    assert vector.tiled_shape == (1, 2, 2, 4)
    assert vector.index_map().tolist() == [0, 1, 2, 3, 8]


def test_untiled_layouts():
    s = parse("f32[2,3,4]{0,2,1}")
    assert s.physical_shape == (3, 4, 2) and s.tiled_shape == (3, 4, 2)
    assert s.linear_index((1, 2, 3)) == (2 * 4 + 3) * 2 + 1
    assert parse("f32[]").index_map().shape == () and parse("f32[]").padded_elements == 1


def test_zero_size_dimension():
    s = parse("f32[0,5]{1,0:T(2,2)}")
    assert s.padded_elements == 0 and s.padding_fraction == 0.0
    assert s.index_map().shape == (0, 5) and s.address_map().size == 0
    with pytest.raises(LayoutError, match="has size 0"):
        s.linear_index((0, 0))


# --------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------
def test_sizes_of_the_worked_example():
    s = parse("f32[3,5]{1,0:T(2,2)}")
    assert (s.element_bits, s.num_elements, s.padded_bytes, s.unpadded_bytes) == (32, 15, 96, 60)
    assert s.padding_fraction == pytest.approx(9 / 24)
    assert not parse("f32[4,4]{1,0:T(2,2)}").has_padding
    assert parse("f32[4,4]{1,0:T(2,2)}").padding_fraction == 0.0


def test_element_bits_and_sub_byte_types():
    assert parse("s4[3,5]").element_bits == 8  # whole bytes unless E says otherwise
    assert parse("pred[3]").element_bits == 8
    packed = parse("s4[3,5]{1,0:T(2,2)E(4)}")
    assert (packed.element_bits, packed.padded_bytes, packed.unpadded_bytes) == (4, 12, 8)
    assert parse("c128[2]").element_bits == 128


def test_tail_alignment_and_metadata_prefix():
    aligned = parse("f32[3,5]{1,0:T(2,2)L(32)}")
    assert aligned.padded_elements == 32 and aligned.padded_bytes == 128
    assert int((aligned.address_map() == -1).sum()) == 32 - 15
    assert parse("f32[4]{0:T(4)M(8)}").padded_bytes == 16 + 8


# --------------------------------------------------------------------------------------
# Addresses
# --------------------------------------------------------------------------------------
def test_linear_index_bounds_are_checked():
    s = parse("f32[3,5]{1,0:T(2,2)}")
    with pytest.raises(LayoutError, match="dimension 1 of size 5"):
        s.linear_index((2, 5))
    with pytest.raises(LayoutError, match="out of range for dimension 0 of size 3"):
        s.linear_index((-1, 0))
    with pytest.raises(LayoutError, match="has rank 2"):
        s.linear_index((1,))
    with pytest.raises(LayoutError, match="integer"):
        s.linear_index((1.5, 0))
    assert s.linear_index(np.array([2, 3])) == 17


def test_unknown_engine():
    with pytest.raises(LayoutError, match="unknown engine"):
        parse("f32[3]").index_map(engine="gpu")


@given(tiled_shapes())
def test_index_map_is_injective_and_agrees_with_linear_index(s):
    index_map = s.index_map()
    assert index_map.shape == s.dims and index_map.dtype == np.int64
    flat = index_map.ravel()
    assert len(np.unique(flat)) == flat.size
    assert flat.size == 0 or (flat.min() >= 0 and flat.max() < s.padded_elements)
    for position in list(np.ndindex(*s.dims))[:: max(1, s.num_elements // 7)]:
        assert s.linear_index(position) == index_map[position]
    address_map = s.address_map()
    assert address_map.shape == (s.padded_elements,)
    assert int((address_map == -1).sum()) == s.padded_elements - s.num_elements
    np.testing.assert_array_equal(address_map[flat], np.arange(flat.size))


@given(tiled_shapes(), st.integers(-5, 5))
def test_physical_round_trip(s, fill):
    array = np.arange(1, s.num_elements + 1, dtype=np.int32).reshape(s.dims) * 10
    buffer = s.to_physical(array, fill=fill)
    assert buffer.shape == (s.padded_elements,) and buffer.dtype == array.dtype
    np.testing.assert_array_equal(s.from_physical(buffer), array)
    assert int((buffer == fill).sum()) == s.padded_elements - s.num_elements


def test_physical_buffer_of_the_worked_example():
    s = parse("f32[3,5]{1,0:T(2,2)}")
    buffer = s.to_physical(np.arange(15).reshape(3, 5), fill=-1)
    assert buffer.tolist()[:8] == [0, 1, 5, 6, 2, 3, 7, 8]
    assert buffer[17] == 13
    with pytest.raises(LayoutError, match="logical shape"):
        s.to_physical(np.zeros((5, 3)))
    with pytest.raises(LayoutError, match="24 slots"):
        s.from_physical(np.zeros(23))


# --------------------------------------------------------------------------------------
# Explorer views
# --------------------------------------------------------------------------------------
def test_views_of_the_worked_example():
    s = parse("f32[3,5]{1,0:T(2,2)}")
    assert s.view_shape == (3, 5) and s.padded_view_shape == (4, 6)
    mask = s.view_padding_mask()
    assert mask[3].all() and mask[:, 5].all() and int(mask.sum()) == 9
    view = s.view_index_map()
    np.testing.assert_array_equal(view[:3, :5], s.index_map())
    assert sorted(view.ravel().tolist()) == list(range(24))
    assert s.view_tile_map().tolist() == [[0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 2, 2],
                                          [3, 3, 4, 4, 5, 5], [3, 3, 4, 4, 5, 5]]
    address_map = s.address_map()
    assert int((address_map == -1).sum()) == 24 - 15
    assert address_map[17] == 2 * 5 + 3


def test_views_of_combined_and_transposed_layouts():
    combined = parse("f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}")
    assert combined.padded_view_shape == (112, 111)
    assert int(combined.view_padding_mask().sum()) == 112
    np.testing.assert_array_equal(combined.view_index_map()[:, :110], combined.index_map().reshape(112, 110))
    transposed = parse("f32[3,5]{0,1:T(2,2)}")
    assert transposed.view_shape == (5, 3) and transposed.padded_view_shape == (6, 4)
    np.testing.assert_array_equal(transposed.view_index_map()[:5, :3], transposed.index_map().T)


def test_views_with_untouched_major_dims_and_no_tiles():
    s = parse("f32[2,3,5]{2,1,0:T(2,2)}")
    assert s.padded_view_shape == (2, 4, 6)
    tiles = s.view_tile_map()
    assert tiles[1, 0, 0] == 6 and tiles.max() == 11
    untiled = parse("f32[2,3]{0,1}")
    assert untiled.view_shape == untiled.padded_view_shape == (3, 2)
    assert untiled.view_index_map().tolist() == [[0, 1], [2, 3], [4, 5]]
    assert not untiled.view_padding_mask().any() and not untiled.view_tile_map().any()


def test_view_tile_map_of_two_level_tiling():
    s = parse("bf16[4,8]{1,0:T(2,4)(2,1)}")
    assert s.view_tile_map().tolist() == [[0] * 4 + [1] * 4] * 2 + [[2] * 4 + [3] * 4] * 2


@given(tiled_shapes())
def test_view_index_map_covers_the_index_map(s):
    view = s.view_index_map()
    mask = s.view_padding_mask()
    assert view.shape == mask.shape == s.padded_view_shape
    values = view.ravel()
    assert len(np.unique(values)) == values.size
    assert sorted(view[~mask].tolist()) == sorted(s.index_map().ravel().tolist())


# --------------------------------------------------------------------------------------
# XLA's own first-tile functions
# --------------------------------------------------------------------------------------
def test_xla_linear_index_uses_only_the_first_tile():
    s = parse("bf16[4,8]{1,0:T(2,4)(2,1)}")
    assert s.xla_linear_index((0, 1)) == 1 and s.linear_index((0, 1)) == 2
    assert s.xla_linear_index((1, 0)) == 4 and s.linear_index((1, 0)) == 1


def test_xla_linear_index_rank_1_ignores_tiles():
    s = parse("bf16[1024]{0:T(512)(128)(2,1)}")
    assert s.xla_linear_index((1,)) == 1
    assert s.linear_index((1,)) == 2
    assert parse("f32[5]{0:T(2,4)}").xla_linear_index((4,)) == 4
    assert parse("f32[5]{0:T(2,4)}").linear_index((4,)) == 8
    assert parse("f32[]{:T(256)}").xla_linear_index(()) == 0


def test_xla_linear_index_worked_values():
    assert parse("f32[3,5]{1,0:T(2,2)}").xla_linear_index((2, 3)) == 17
    assert parse("f32[3,5]{0,1:T(2,2)}").xla_linear_index((2, 3)) == 14
    assert parse("f32[2,3,4]{0,2,1}").xla_linear_index((1, 2, 3)) == 23


@given(tiled_shapes(max_levels=1, allow_combine=False, min_dim=1), st.data())
def test_xla_functions_agree_with_ours_for_one_tile(s, data):
    if s.rank >= 2:
        position = tuple(data.draw(st.integers(0, d - 1)) for d in s.dims)
        assert s.xla_linear_index(position) == s.linear_index(position)
    if s.tiles:
        assert s.xla_array_size_bytes() == s.padded_bytes


def test_xla_array_size_differences():
    assert parse("f32[3,5]{1,0:T(2,2)}").xla_array_size_bytes() == 96
    later = parse("f32[2,3]{1,0:T(2,3)(2,2)}")
    assert (later.xla_array_size_bytes(), later.padded_bytes) == (24, 32)
    untiled_aligned = parse("f32[3]{0:L(4)}")
    assert (untiled_aligned.xla_array_size_bytes(), untiled_aligned.padded_bytes) == (12, 16)
    prefixed = parse("f32[4]{0:T(4)M(8)}")
    assert (prefixed.xla_array_size_bytes(), prefixed.padded_bytes) == (16, 24)
    assert parse("s4[3,5]{1,0:T(2,2)E(4)}").xla_array_size_bytes() == 12
    assert parse("f32[]{:T(256)}").xla_array_size_bytes() == 1024
    assert parse("f32[5]{0:T(2,4)}").xla_array_size_bytes() == 64
    split = parse("f32[8,6]{1,0:T(2,2)SC(0:4)}")
    assert (split.xla_array_size_bytes(), split.padded_bytes) == (4 * 6 * 4, 8 * 6 * 4)
    assert parse("pred[3]").xla_array_size_bytes() == 3


def test_xla_functions_refuse_combined_dimensions():
    s = parse("f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}")
    with pytest.raises(LayoutError, match="INT64_MIN"):
        s.xla_linear_index((0, 0, 0, 0, 0))
    with pytest.raises(LayoutError, match="ArraySize"):
        s.xla_array_size_bytes()
    assert s.summary()["xla_array_size_bytes"] is None


# --------------------------------------------------------------------------------------
# Value semantics and reports
# --------------------------------------------------------------------------------------
def test_shape_is_a_frozen_value():
    a = Shape("F32", [3, 5], tiles=[[2, 2]])
    b = parse("f32[3,5]{1,0:T(2,2)}")
    assert a == b and hash(a) == hash(b) and a.tiles == (Tile((2, 2)),)
    assert a != parse("f32[3,5]{1,0:T(2,2)S(1)}")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.dims = (1,)  # type: ignore[misc]


def test_summary_and_html():
    s = parse("f32[3,5]{1,0:T(2,2)}")
    summary = s.summary()
    for key in ("text", "physical_shape", "tiled_shape", "padded_bytes", "unpadded_bytes", "padding_fraction"):
        assert key in summary
    assert summary["text"] == "f32[3,5]{1,0:T(2,2)}" and summary["xla_array_size_bytes"] == 96
    assert json.loads(json.dumps(summary))["tiled_shape"] == [2, 3, 2, 2]
    page = s._repr_html_()
    assert page.startswith("<table") and "f32[3,5]{1,0:T(2,2)}" in page and "37.5%" in page
