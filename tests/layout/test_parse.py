"""Parsing and printing XLA shape-with-layout text (scwork.layout.parse, Shape.__str__)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scwork.errors import LayoutError
from scwork.layout import DTYPES, Shape, Tile, parse
from scwork.layout.shape import SplitConfig
from scwork.testing import tile_lists

INTEGRAL = [name for name in DTYPES if name[0] in "su" and name[1:].isdigit()]


# --------------------------------------------------------------------------------------
# Strategy: every valid shape, with every layout attribute.
# --------------------------------------------------------------------------------------
@st.composite
def valid_shapes(draw, max_rank=4, max_dim=9, nested=True):
    rank = draw(st.integers(0, max_rank))
    dims = tuple(draw(st.lists(st.integers(0, max_dim), min_size=rank, max_size=rank)))
    dynamic = tuple(draw(st.lists(st.booleans(), min_size=rank, max_size=rank)))
    m2m = tuple(draw(st.permutations(range(rank))))
    tiles = draw(tile_lists(dims, m2m))
    physical = tuple(dims[d] for d in reversed(m2m))
    split_configs = []
    if rank and draw(st.booleans()):
        dimension = draw(st.integers(0, rank - 1))
        inside = list(range(1, physical[dimension]))
        indices = sorted(draw(st.sets(st.sampled_from(inside), max_size=3))) if inside else []
        split_configs.append(SplitConfig(dimension, tuple(indices)))
    layout_physical_shape = None
    if nested and draw(st.integers(0, 4)) == 0:
        layout_physical_shape = draw(valid_shapes(max_rank=2, max_dim=5, nested=False))
    return Shape(
        draw(st.sampled_from(sorted(DTYPES))), dims, m2m, tiles=tiles,
        tail_padding_alignment=draw(st.sampled_from([1, 1, 2, 8, 128])),
        element_size_in_bits=draw(st.sampled_from([0, 0, 1, 4, 8, 32])),
        memory_space=draw(st.sampled_from([0, 0, 1, 5])),
        dynamic_shape_metadata_prefix_bytes=draw(st.sampled_from([0, 0, 8, 16])),
        index_primitive_type=draw(st.none() | st.sampled_from(INTEGRAL)),
        pointer_primitive_type=draw(st.none() | st.sampled_from(INTEGRAL)),
        split_configs=tuple(split_configs),
        layout_physical_shape=layout_physical_shape,
        dynamic_dims=dynamic,
    )


# --------------------------------------------------------------------------------------
# Canonical printing
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, canonical", [
    ("F32[3,5]{1,0:T(2,2)}", "f32[3,5]{1,0:T(2,2)}"),
    ("f32[3,5]", "f32[3,5]{1,0}"),
    ("f32[3,5]{0,1}", "f32[3,5]{0,1}"),
    ("f32[]", "f32[]"),
    ("f32[]{}", "f32[]"),
    ("F32[]{:T(256)}", "f32[]{:T(256)}"),
    (" bf16 [ 4 , 8 ] { 1 , 0 : T (2,4) (2,1) } ", "bf16[4,8]{1,0:T(2,4)(2,1)}"),
    ("f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}", "f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}"),
    ("s4[8]{0:E(4)}", "s4[8]{0:E(4)}"),
    ("f32[<=8,3]", "f32[<=8,3]{1,0}"),
    ("f32[3]{0:L(1)E(0)S(0)M(0)}", "f32[3]{0}"),
    ("f32[<=4,3]{0,1:T(2,2)L(8)#(u32)*(u32)E(32)S(1)SC(0:2)P(s32[3]{0})M(8)}",
     "f32[<=4,3]{0,1:T(2,2)L(8)#(u32)*(u32)E(32)S(1)SC(0:2)P(s32[3]{0})M(8)}"),
    ("f32[8]{0:SC(0:)}", "f32[8]{0:SC(0:)}"),
    ("f32[8]{0:#(S32)}", "f32[8]{0:#(s32)}"),
])
def test_canonical_text(text, canonical):
    shape = parse(text)
    assert str(shape) == canonical
    assert parse(canonical) == shape


def test_repr_is_evaluable_text():
    assert repr(parse("f32[3,5]{1,0:T(2,2)}")) == "Shape('f32[3,5]{1,0:T(2,2)}')"


def test_fields_of_every_attribute():
    s = parse("f32[<=4,3]{0,1:T(2,*,2)(1)L(8)#(u32)*(u16)E(16)S(1)SC(1:1,3)P(s32[3]{0})M(8)}")
    assert s.dtype == "f32" and s.dims == (4, 3) and s.dynamic_dims == (True, False)
    assert s.minor_to_major == (0, 1)
    assert s.tiles == (Tile((2, -1, 2)), Tile((1,)))
    assert s.tail_padding_alignment == 8
    assert (s.index_primitive_type, s.pointer_primitive_type) == ("u32", "u16")
    assert (s.element_size_in_bits, s.memory_space, s.dynamic_shape_metadata_prefix_bytes) == (16, 1, 8)
    assert s.split_configs == (SplitConfig(1, (1, 3)),)
    assert s.layout_physical_shape == Shape("s32", (3,))


def test_default_layout_is_row_major():
    assert parse("f32[2,3,4]").minor_to_major == (2, 1, 0)
    assert parse("f32[2,3,4]") == Shape("f32", (2, 3, 4), (2, 1, 0))


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_dtype_parses_in_any_case(name):
    assert parse(f"{name.upper()}[2]").dtype == name
    assert parse(f"{name}[2]{{0}}").dtype == name


def test_dtype_table():
    bits = {name: entry[0] for name, entry in DTYPES.items()}
    assert bits["pred"] == 1 and bits["s4"] == 4 and bits["bf16"] == 16 and bits["c128"] == 128
    assert bits["f8e4m3b11fnuz"] == 8 and bits["f4e2m1fn"] == 4 and bits["f8e8m0fnu"] == 8
    for name, (width, dtype) in DTYPES.items():
        if dtype is not None and name != "pred":
            assert dtype.itemsize * 8 == width, name
    assert DTYPES["bf16"][1] is None and DTYPES["f32"][1] == np.float32


def test_bounded_dynamic_dimension_uses_its_bound():
    s = parse("f32[<=10,3]{1,0:T(8,2)}")
    assert s.dynamic_dims == (True, False)
    assert s.tiled_shape == (2, 2, 8, 2)
    assert str(s) == "f32[<=10,3]{1,0:T(8,2)}"


# --------------------------------------------------------------------------------------
# Errors: what and where
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, position, reason", [
    ("f32[123,456,789]{1:T(2,*,128)}", 17, "Dimensions size is 3, but minor to major size is 1."),
    ("f32[3,5]{}", 9, "Dimensions size is 2, but minor to major size is 0."),
    ("f32[3,5]{:T(2,2)}", 9, "Dimensions size is 2, but minor to major size is 0."),
    ("f32[3,5]{1,0:T(2,2)", 19, "expected '}' to close the layout opened at position 8"),
    ("f32[3,5", 7, "to close the dimension list opened at position 3"),
    ("f32[3,5]{1,0:T(2,2}", 18, "to close the tile opened at position 14"),
    ("f32[3,5]]", 8, "after the end of the shape"),
    ("f32[3,5]{1,0}}", 13, "after the end of the shape"),
    ("f32[3,5]{1,0} x", 14, "after the end of the shape"),
    ("f33[3]", 0, "unknown element type 'f33'"),
    ("f32[?]", 4, "has no static layout"),
    ("f32[3,?]", 6, "has no static layout"),
    ("f32[3,5]{1,1}", 11, "lists dimension 1 twice"),
    ("f32[3,5]{1,2}", 11, "out of range"),
    ("f32[3,5]{1,-1}", 11, "out of range"),
    ("f32[3,5]{1,0:T(0,2)}", 15, "tile sizes must be positive, got 0"),
    ("f32[3,5]{1,0:T(2,-3)}", 17, "tile sizes must be positive, got -3"),
    ("f32[3,5]{1,0:T(2,*)}", 17, "'*' cannot be the last"),
    ("f32[3,5]{1,0:T()}", 14, "a tile needs at least one dimension"),
    ("f32[3,5]{1,0:T(2,2)(2,2,2,2,2)}", 19, "has 5 dimensions"),
    ("f32[3]{0:T(*,2)}", 11, "does not have"),
    ("f32[3.5]", 4, "malformed number '3.5'"),
    ("f32[1e3]", 4, "malformed number '1e3'"),
    ("f32[12ab]", 4, "malformed number"),
    ("f32[99999999999999999999]", 4, "does not fit"),
    ("f32[-3]", 4, "negative size"),
    ("f32[3]{0:L(0)}", 11, "tail_padding_alignment (L) must be >= 1"),
    ("f32[3]{0:E(-4)}", 11, "element_size_in_bits (E) must be >= 0"),
    ("f32[3]{0:L(2)T(2)}", 13, "'T' must come before 'L'"),
    ("f32[3]{0:T(2)T(2)}", 13, "duplicate layout attribute 'T'"),
    ("f32[3]{0:X(2)}", 9, "unknown layout attribute 'X'"),
    ("f32[3]{0:D(X)}", 11, "expected a dimension level type"),
    ("f32[3]{0:#(f32)}", 11, "must be an integer element type"),
    ("f32[3]{0:#(q32)}", 11, "unknown element type 'q32'"),
    ("f32[4]{0:SC(1:2)}", 12, "out-of-bounds physical dimension 1"),
    ("f32[4]{0:SC(0:2,1)}", 16, "strictly increasing"),
    ("f32[4]{0:SC(0:4)}", 14, "out of bounds"),
    ("f32[4]{0:P(f32[2]{0:P(f32[2])})}", 20, "cannot itself have a physical shape"),
    ("(f32[3], f32[2])", 0, "tuple shapes are not supported"),
    ("", 0, "empty shape text"),
    ("f32", 3, "expected '[' after the element type f32"),
    ("f32[3] {0", 9, "expected '}'"),
    ("f32[3]{0:T(2)$}", 13, "unexpected character '$'"),
    ("f32[<3]", 4, "expected '<='"),
    ("f32[4611686018427387904,4]", 3, "too large"),
])
def test_errors_say_what_and_where(text, position, reason):
    with pytest.raises(LayoutError) as info:
        parse(text)
    error = info.value
    assert reason in error.reason
    assert error.position == position
    assert error.text == text
    assert isinstance(error, ValueError)
    assert str(error).splitlines()[0].startswith(error.reason)


def test_error_message_has_a_caret_under_the_problem():
    with pytest.raises(LayoutError) as info:
        parse("f32[3,5]{1,0:T(0,2)}")
    lines = str(info.value).splitlines()
    assert lines[1].strip() == "f32[3,5]{1,0:T(0,2)}"
    assert lines[2].index("^") - lines[1].index("f") == 15


@pytest.mark.parametrize("text, suggestion", [("f33[3]", "f32"), ("float32[3]", "f32"),
                                              ("bfloat16[3]", "bf16"), ("int8[2]", "s8"), ("bf61[1]", "bf16")])
def test_unknown_dtype_suggests_close_names(text, suggestion):
    with pytest.raises(LayoutError) as info:
        parse(text)
    assert suggestion in info.value.hint


def test_non_text_input():
    with pytest.raises(LayoutError):
        parse(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs, reason", [
    (dict(dtype="f32", dims=(123, 456, 789), minor_to_major=(1,)),
     "Dimensions size is 3, but minor to major size is 1."),
    (dict(dtype="f32", dims=(3, 5), tiles=[(0, 2)]), "tile sizes must be positive, got 0"),
    (dict(dtype="f32", dims=(3, 5), tiles=[(2, -1)]), "'*' cannot be the last"),
    (dict(dtype="f32", dims=(3, 5), minor_to_major=(0, 0)), "lists dimension 0 twice"),
    (dict(dtype="f33", dims=(3,)), "unknown element type"),
    (dict(dtype="f32", dims=(3,), tail_padding_alignment=0), "must be >= 1"),
    (dict(dtype="f32", dims=(3,), split_configs=[(0, (2, 2))]), "strictly increasing"),
    (dict(dtype="f32", dims=(3,), tiles=[("a",)]), "must be an integer"),
    (dict(dtype="f32", dims=3), "dims must be a sequence"),
    (dict(dtype="f32", dims=(3, 4), dynamic_dims=(True,)), "dynamic_dims has 1 flags"),
])
def test_direct_construction_validates_like_the_parser(kwargs, reason):
    with pytest.raises(LayoutError) as info:
        Shape(**kwargs)
    assert reason in info.value.reason


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------
@given(valid_shapes())
def test_print_then_parse_is_identity(shape):
    text = str(shape)
    assert parse(text) == shape
    assert str(parse(text)) == text
    assert parse(text.upper()) == shape  # element types are case-insensitive


_LAYOUT_ALPHABET = "fsubpredc0123456789[]{}(),:*#?<=TLESCPM- xyz."


@given(st.text(max_size=40) | st.text(alphabet=_LAYOUT_ALPHABET, max_size=40))
def test_fuzz_arbitrary_text_raises_only_layout_error(text):
    try:
        shape = parse(text)
    except LayoutError as error:
        assert error.position is not None and 0 <= error.position <= len(text)
    else:
        assert parse(str(shape)) == shape


@given(valid_shapes(nested=False), st.data())
def test_fuzz_mutated_valid_text_raises_only_layout_error(shape, data):
    text = list(str(shape))
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["delete", "insert", "replace"]))
        at = data.draw(st.integers(0, max(len(text) - 1, 0)))
        char = data.draw(st.sampled_from(_LAYOUT_ALPHABET))
        if kind == "delete" and text:
            del text[at]
        elif kind == "insert":
            text.insert(at, char)
        elif text:
            text[at] = char
    mutated = "".join(text)
    try:
        result = parse(mutated)
    except LayoutError as error:
        assert error.position is not None and 0 <= error.position <= len(mutated)
    else:
        assert parse(str(result)) == result


@given(
    dtype=st.sampled_from(["f32", "BF16", "x9", ""]),
    dims=st.lists(st.integers(-2, 6), max_size=4),
    minor_to_major=st.none() | st.lists(st.integers(-1, 4), max_size=4),
    tiles=st.lists(st.lists(st.integers(-2, 4), max_size=4), max_size=3),
    alignment=st.integers(-1, 4),
    split_configs=st.lists(st.tuples(st.integers(-1, 3), st.lists(st.integers(-1, 6), max_size=3)), max_size=2),
)
def test_fuzz_direct_construction_raises_only_layout_error(dtype, dims, minor_to_major, tiles, alignment,
                                                          split_configs):
    try:
        shape = Shape(dtype, dims, minor_to_major, tiles=tiles, tail_padding_alignment=alignment,
                      split_configs=split_configs)
    except LayoutError:
        return
    assert parse(str(shape)) == shape
