"""XLA sparse dimension level types D(...): parse and print as Layout::ToString, refuse dense-only operations."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.errors import LayoutError
from scwork.layout import Shape, parse
from scwork.layout.view import buffer_window, view_overview, view_window
from scwork.testing import tiled_shapes

LEVEL = st.tuples(st.sampled_from("DCSH"), st.sampled_from(["", "+"]), st.sampled_from(["", "~"])).map("".join)


@settings(max_examples=200, deadline=None)
@given(tiled_shapes(max_rank=4), st.data())
def test_round_trip_with_level_types(shape, data):
    levels = tuple(data.draw(st.lists(LEVEL, min_size=shape.rank, max_size=shape.rank)))
    sparse = Shape(shape.dtype, shape.dims, shape.minor_to_major, tiles=shape.tiles,
                   tail_padding_alignment=shape.tail_padding_alignment, dim_level_types=levels)
    text = str(sparse)
    if levels:
        # Layout::ToString prints D(...) first in the attributes, '+' before '~'.
        assert ":D(" + ",".join(levels) + ")" in text
    again = parse(text)
    assert again == sparse and str(again) == text
    assert again.is_sparse == any(level != "D" for level in levels)


def test_examples_and_what_sparse_arrays_refuse():
    shape = parse("f32[3,5]{1,0:D(D,C+~)T(2,2)}")
    assert shape.dim_level_types == ("D", "C+~") and shape.is_sparse
    for call in (shape.index_map, shape.address_map, shape.view_index_map, shape.view_tile_map,
                 lambda: shape.linear_index((0, 0)), lambda: shape.xla_linear_index((0, 0)),
                 lambda: view_window(shape), lambda: view_overview(shape), lambda: buffer_window(shape, 0, 1)):
        with pytest.raises(LayoutError, match="sparse array"):
            call()
    dense = parse("f32[3,5]{1,0:D(D,D)T(2,2)}")
    assert not dense.is_sparse
    assert (dense.index_map() == parse("f32[3,5]{1,0:T(2,2)}").index_map()).all()
    assert str(parse("f32[4]{0:D(S~)}")) == "f32[4]{0:D(S~)}"


@pytest.mark.parametrize("text, message", [
    ("f32[3,5]{1,0:D(D)}", "1 dimension level types for a rank-2 shape"),
    ("f32[3,5]{1,0:D(D,X)}", "expected a dimension level type"),
    ("f32[3,5]{1,0:D(D,C~+)}", "expected ',' or ')'"),
    ("f32[3,5]{1,0:T(2,2)D(D,C)}", "must come before 'T'"),
    ("f32[3,5]{1,0:D()}", "expected a dimension level type"),
    ("f32[3,5]{1,0:D(D,C}", "expected ',' or ')'"),
])
def test_malformed_level_types_are_layout_errors_with_a_position(text, message):
    with pytest.raises(LayoutError, match=re.escape(message)) as info:
        parse(text)
    assert info.value.position is not None
