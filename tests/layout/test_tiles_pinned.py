"""Element types, tiles, split configs and the bounds of scwork/layout/tiles.py, pinned by hand.

Survivors of the mutation run of tiles.py: no test pinned every element type's bit width,
the 64-bit bounds of layout integers, where a '*' at the end of a tile is reported, how
tiles and split configs print, that they are frozen (hashable) values, or how many
element types an unknown name is offered.
"""

from __future__ import annotations

import dataclasses

import pytest

from scwork.errors import LayoutError
from scwork.layout import DTYPES, MAX_MAP_ELEMENTS, Shape, SplitConfig, Tile, parse

# XLA primitive_util::BitWidth of every element type, and the numpy type scwork maps it to
# (None: numpy has no such type).
BIT_WIDTHS = {
    "pred": (1, "bool"),
    "s1": (1, None), "s2": (2, None), "s4": (4, None), "s8": (8, "int8"), "s16": (16, "int16"),
    "s32": (32, "int32"), "s64": (64, "int64"),
    "u1": (1, None), "u2": (2, None), "u4": (4, None), "u8": (8, "uint8"), "u16": (16, "uint16"),
    "u32": (32, "uint32"), "u64": (64, "uint64"),
    "f16": (16, "float16"), "bf16": (16, None), "f32": (32, "float32"), "f64": (64, "float64"),
    "c64": (64, "complex64"), "c128": (128, "complex128"),
    "f8e5m2": (8, None), "f8e4m3": (8, None), "f8e4m3fn": (8, None), "f8e4m3b11fnuz": (8, None),
    "f8e3m4": (8, None), "f8e5m2fnuz": (8, None), "f8e4m3fnuz": (8, None), "f8e8m0fnu": (8, None),
    "f4e2m1fn": (4, None), "f6e2m3fn": (6, None), "f6e3m2fn": (6, None),
}


def test_every_element_type_bit_width_and_numpy_type():
    got = {name: (bits, None if dtype is None else dtype.name) for name, (bits, dtype) in DTYPES.items()}
    assert got == BIT_WIDTHS


@pytest.mark.parametrize("name,bits", [("s2", 2), ("u4", 4), ("f6e2m3fn", 6), ("f4e2m1fn", 4), ("s1", 1)])
def test_sub_byte_types_are_stored_in_whole_bytes_unless_E_says(name, bits):
    assert parse(f"{name}[3]").element_bits == 8
    assert parse(f"{name}[3]{{0:E({bits})}}").element_bits == bits


def test_unknown_type_offers_three_close_names_alias_first():
    with pytest.raises(LayoutError) as info:
        parse("f8e4m3x[2]")
    assert info.value.hint == "did you mean f8e4m3, f8e4m3fn, f8e4m3fnuz?"
    with pytest.raises(LayoutError) as info:
        parse("i64[2]")                       # the alias first, then the closest names
    assert info.value.hint == "did you mean s64, u64, f64?"


@pytest.mark.parametrize("value", [-2**63, 2**63 - 1])
def test_layout_integers_take_the_int64_range(value):
    assert SplitConfig(value).dimension == value


@pytest.mark.parametrize("value", [-2**63 - 1, 2**63, 2**64])
def test_layout_integers_past_int64_are_refused(value):
    with pytest.raises(LayoutError, match=f"a split dimension {value} does not fit in a signed 64-bit"):
        SplitConfig(value)


@pytest.mark.parametrize("make", [lambda: Tile("82"), lambda: Tile(8)])
def test_tile_dims_must_be_a_sequence_of_integers(make):
    with pytest.raises(LayoutError, match="tile dims must be a sequence of integers"):
        make()


def test_split_indices_must_be_a_sequence():
    with pytest.raises(LayoutError, match="split indices must be a sequence of integers"):
        SplitConfig(0, "12")
    with pytest.raises(LayoutError, match="dims must be a sequence"):
        Shape("f32", "35")


@pytest.mark.parametrize("dims,bad", [((0, 2), 0), ((-2, 4), -2), ((4, 2, -5), -5)])
def test_tile_sizes_must_be_positive_or_star(dims, bad):
    with pytest.raises(LayoutError, match=f"tile sizes must be positive, got {bad}\\n"):
        Tile(dims)


def test_star_last_is_reported_at_the_star():
    with pytest.raises(LayoutError, match="'\\*' cannot be the last"):
        Tile((2, -1))
    text = "f32[3,5]{1,0:T(2,3,*)}"
    with pytest.raises(LayoutError) as info:
        parse(text)
    assert info.value.position == text.index("*")


def test_tiles_and_split_configs_print_as_xla_writes_them():
    assert str(Tile((-1, 2))) == "(*,2)" and str(Tile((2, -1, 128))) == "(2,*,128)"
    assert str(SplitConfig(0, (2, 4))) == "(0:2,4)" and str(SplitConfig(1)) == "(1:)"


def test_tiles_and_split_configs_are_frozen_values():
    a, b = SplitConfig(0, (2, 4)), SplitConfig(0, [2, 4])
    assert a == b and hash(a) == hash(b) and len({a, b, Tile((8, 128)), Tile([8, 128])}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.dimension = 1          # type: ignore[misc]


def test_map_size_cap_and_64_bit_shapes():
    assert MAX_MAP_ELEMENTS == 2**28                    # 2 GiB of int64 addresses
    with pytest.raises(LayoutError, match="268,435,456"):
        parse(f"s8[{2**28 + 1}]").index_map()
    # shapes up to 2**62 elements can be addressed (nothing is allocated), one more cannot
    assert parse(f"s8[{2**31},{2**31}]").num_elements == 2**62
    with pytest.raises(LayoutError, match="too large to address with 64-bit indices"):
        parse(f"s8[{2**31},{2**31 + 1}]")
    with pytest.raises(LayoutError, match="too large to address with 64-bit indices"):
        parse(f"s8[{2**62 + 1}]")
