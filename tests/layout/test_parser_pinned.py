"""The XLA shape-with-layout parser (scwork/layout/_parser.py), pinned string by string.

Every expected value here was worked out by hand from the grammar in the module docstring
(openxla/xla ``HloParserImpl::ParseShape`` / ``ParseLayout`` and ``Layout::Print``):
the tokens of a text with their offsets, the fields of accepted texts, and for each
rejected text the exact reason, the 0-based offset it names (counted on the text written
beside it) and the hint. They pin what the mutation run of the parser found unpinned: the
boundaries of the tokenizer (a '-' at the end, '_' in names and numbers, non-ASCII
digits, the int64 range at both ends, how a long number is shortened), every "expected
..." message with the token it found, where a validation error of
:class:`~scwork.layout.Shape` points (a bounded dimension at its '<=', a level-type count
at D's '(', a split config's dimension or index), and the order, duplicates and case of
layout attributes.
"""

from __future__ import annotations

import dataclasses

import pytest

from scwork.errors import LayoutError
from scwork.layout import Shape, SplitConfig, Tile, parse
from scwork.layout._parser import ATTRIBUTE_ORDER, DIM_LEVEL_TYPES, INT64_MIN, Token, parse_shape_text, tokenize

INT64_MAX = 2**63 - 1
SHAPE_HINT = "a shape looks like f32[3,5]{1,0:T(2,2)}"
NUMBER_HINT = "write sizes as plain integers such as 128"
LEVEL_HINT = ("D(D,C+,S~): D dense, C compressed, S singleton, H loose compressed; "
              "'+' not unique, '~' not ordered")
ORDER = "D, T, L, #, *, E, S, SC, P, M"


def error_of(text):
    """(reason, position, hint) of the LayoutError ``parse(text)`` raises; its text must be ``text``."""
    with pytest.raises(LayoutError) as info:
        parse(text)
    assert info.value.text == text
    return info.value.reason, info.value.position, info.value.hint


# --------------------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------------------
def test_tokens_kinds_texts_offsets_and_values():
    assert tokenize(" -12 _a9\t007 ") == [
        Token("int", "-12", 1, -12), Token("ident", "_a9", 5, 0), Token("int", "007", 9, 7), Token("end", "", 13),
    ]
    assert tokenize("SC#*?+~(),:") == [
        Token("ident", "SC", 0), Token("#", "#", 2), Token("*", "*", 3), Token("?", "?", 4), Token("+", "+", 5),
        Token("~", "~", 6), Token("(", "(", 7), Token(")", ")", 8), Token(",", ",", 9), Token(":", ":", 10),
        Token("end", "", 11),
    ]
    assert tokenize("f32[<=3]") == [
        Token("ident", "f32", 0), Token("[", "[", 3), Token("<=", "<=", 4), Token("int", "3", 6, 3),
        Token("]", "]", 7), Token("end", "", 8),
    ]
    assert tokenize("") == [Token("end", "", 0)]
    # A negative number as the last two characters of the text.
    assert tokenize("-3") == [Token("int", "-3", 0, -3), Token("end", "", 2)]
    assert tokenize("f32_x9") == [Token("ident", "f32_x9", 0), Token("end", "", 6)]


def test_tokens_are_frozen_values():
    token = Token("int", "3", 4, 3)
    assert {token, Token("int", "3", 4, 3)} == {token}          # hashable, equal by value
    with pytest.raises(dataclasses.FrozenInstanceError):
        token.value = 4  # type: ignore[misc]


def test_int64_range_at_both_ends():
    assert tokenize(str(INT64_MAX))[0].value == INT64_MAX
    assert tokenize(str(-2**63))[0].value == -2**63 == INT64_MIN
    # -2**63 is an int64: the dimension is refused for being negative, not for its size.
    assert error_of("f32[-9223372036854775808]") == ("dimension 0 has negative size -9223372036854775808", 4, None)
    assert error_of("f32[3]{0:T(-9223372036854775808)}")[:2] == (
        "tile sizes must be positive, got -9223372036854775808", 11)
    assert error_of("f32[3]{9223372036854775807}")[:2] == (
        "minor_to_major entry 9223372036854775807 is out of range for a rank-1 shape (dimensions are 0..0)", 7)
    assert error_of("f32[9223372036854775808]") == (
        "number 9223372036854775808 does not fit in a signed 64-bit integer", 4, None)
    assert error_of("f32[3]{0:T(-9223372036854775809)}") == (
        "number -9223372036854775809 does not fit in a signed 64-bit integer", 11, None)


def test_long_numbers_are_shortened_past_40_characters():
    forty = "1" * 40
    assert error_of(f"f32[{forty}]")[0] == f"number {forty} does not fit in a signed 64-bit integer"
    assert error_of(f"f32[{forty}1]")[0] == f"number {'1' * 20}... (41 digits) does not fit in a signed 64-bit integer"
    # The count is of digits, the sign left out; the first 20 characters keep it.
    assert error_of(f"f32[-{forty}]")[0] == f"number -{'1' * 19}... (40 digits) does not fit in a signed 64-bit integer"
    # Leading zeros do not make a number too large.
    assert parse("f32[" + "0" * 45 + "3]").dims == (3,)


@pytest.mark.parametrize("text, reason, position, hint", [
    # A '-' starts a number only before a digit; at the very end there is no next character.
    ("f32[3]-", "unexpected character '-'", 6, SHAPE_HINT),
    ("f32[- 3]", "unexpected character '-'", 4, SHAPE_HINT),
    ("f32[-]", "unexpected character '-'", 4, SHAPE_HINT),
    ("f32[3]{0}@", "unexpected character '@'", 9, SHAPE_HINT),
    ("f32[1_000]", "malformed number '1_000': expected a whole decimal number", 4, NUMBER_HINT),
    ("f32[-5a]", "malformed number '-5a': expected a whole decimal number", 4, NUMBER_HINT),
    ("f32[2.]", "malformed number '2.': expected a whole decimal number", 4, NUMBER_HINT),
    # U+FF13, a full-width 3: a digit to str.isdigit, not an ASCII one.
    ("f32[\uff13]", "malformed number '\uff13': expected a whole decimal number", 4, NUMBER_HINT),
    ("f32[<", "expected '<=' (a bounded dynamic dimension such as <=8)", 4, None),
    ("f32[< =3]", "expected '<=' (a bounded dynamic dimension such as <=8)", 4, None),
    ("", "empty shape text", 0, SHAPE_HINT),
    (" \t\n", "empty shape text", 3, SHAPE_HINT),
])
def test_tokenizer_errors(text, reason, position, hint):
    assert error_of(text) == (reason, position, hint)


def test_names_may_start_with_and_contain_underscores():
    assert error_of("_zzzz[3]") == ("unknown element type '_zzzz'", 0, "element types look like f32, bf16, s8, pred")
    assert error_of("f32_x[3]")[:2] == ("unknown element type 'f32_x'", 0)


# --------------------------------------------------------------------------------------
# Accepted texts, field by field
# --------------------------------------------------------------------------------------
def test_whitespace_of_any_kind_between_tokens():
    assert parse("\tF32 [ <=3 ,\n5 ]\r\n{ 0 , 1 : T ( 2 , * , 2 ) L ( 4 ) }  ") == Shape(
        "f32", (3, 5), (0, 1), tiles=[(2, -1, 2)], tail_padding_alignment=4, dynamic_dims=(True, False))


def test_every_attribute_in_xla_order_with_its_field():
    s = parse("s8[2]{0:D(C+~)T(2)L(2)#(U8)*(s16)E(4)S(3)SC(0:1)P(s8[2]{0:T(1)})M(16)}")
    assert (s.dtype, s.dims, s.dynamic_dims, s.minor_to_major) == ("s8", (2,), (False,), (0,))
    assert s.dim_level_types == ("C+~",)
    assert s.tiles == (Tile((2,)),)
    assert s.tail_padding_alignment == 2
    assert (s.index_primitive_type, s.pointer_primitive_type) == ("u8", "s16")
    assert s.element_size_in_bits == 4
    assert s.memory_space == 3
    assert s.split_configs == (SplitConfig(0, (1,)),)
    assert s.layout_physical_shape == Shape("s8", (2,), (0,), tiles=[(1,)])
    assert s.dynamic_shape_metadata_prefix_bytes == 16
    assert ATTRIBUTE_ORDER == ("D", "T", "L", "#", "*", "E", "S", "SC", "P", "M")
    assert DIM_LEVEL_TYPES == ("D", "C", "S", "H")


@pytest.mark.parametrize("text, fields", [
    ("f32[3,5]{1,0:}", dict(minor_to_major=(1, 0))),             # ':' with no attribute is XLA's too
    ("f32[]{:}", dict(dims=(), minor_to_major=())),
    ("f32[3]{0:D(H+~)}", dict(dim_level_types=("H+~",))),
    ("f32[3,4]{1,0:D(C~,S+)}", dict(dim_level_types=("C~", "S+"))),
    ("f32[3]{0:T(2)(1)(1)}", dict(tiles=(Tile((2,)), Tile((1,)), Tile((1,))))),
    ("f32[4,6]{1,0:T(*,2)}", dict(tiles=(Tile((-1, 2)),))),
    ("f32[3]{0:L(2)E(16)S(3)M(4)}", dict(tail_padding_alignment=2, element_size_in_bits=16, memory_space=3,
                                        dynamic_shape_metadata_prefix_bytes=4)),
    ("f32[3]{0:E(8)}", dict(element_size_in_bits=8, memory_space=0, tail_padding_alignment=1)),
    ("f32[3]{0:S(7)}", dict(memory_space=7, element_size_in_bits=0)),
    ("f32[3]{0:M(2)}", dict(dynamic_shape_metadata_prefix_bytes=2, memory_space=0)),
    ("f32[3]{0:*(u64)}", dict(pointer_primitive_type="u64", index_primitive_type=None)),
    ("f32[3]{0:#(s64)}", dict(index_primitive_type="s64", pointer_primitive_type=None)),
    ("f32[2,8]{1,0:SC(0:1)(1:2,4,6)}", dict(split_configs=(SplitConfig(0, (1,)), SplitConfig(1, (2, 4, 6))))),
    ("f32[8]{0:SC(0:)}", dict(split_configs=(SplitConfig(0, ()),))),
    ("f32[<=2,<=3,4]", dict(dims=(2, 3, 4), dynamic_dims=(True, True, False), minor_to_major=(2, 1, 0))),
    ("f32[0042]", dict(dims=(42,))),
])
def test_accepted_texts(text, fields):
    shape = parse(text)
    for name, value in fields.items():
        assert getattr(shape, name) == value, name


# --------------------------------------------------------------------------------------
# Rejected texts: reason, offset and hint of each
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, reason, position, hint", [
    # The element type.
    ("[3]", "expected an element type such as f32, found '['", 0, None),
    ("3[3]", "expected an element type such as f32, found '3'", 0, None),
    ("Q32[3]", "unknown element type 'Q32'", 0, "did you mean u32, s32, f32?"),
    ("zzzz[3]", "unknown element type 'zzzz'", 0, "element types look like f32, bf16, s8, pred"),
    ("(f32[3])", "tuple shapes are not supported; give one array shape", 0, None),
    ("F32", "expected '[' after the element type f32, found the end of the text", 3, None),
    ("f32 3", "expected '[' after the element type f32, found '3'", 4, None),
    # Dimensions.
    ("f32[?]", "unbounded dynamic dimension '?' has no static layout", 4, "give a bound instead, e.g. <=128"),
    ("f32[3,]", "expected a dimension size, found ']'", 6, None),
    ("f32[,3]", "expected a dimension size, found ','", 4, None),
    ("f32[(3]", "expected a dimension size, found '('", 4, None),
    ("f32[<=]", "expected a dimension size, found ']'", 6, None),
    ("f32[3 5]", "expected ',' or ']' to close the dimension list opened at position 3, found '5'", 6, None),
    ("f32[3", "expected ',' or ']' to close the dimension list opened at position 3, found the end of the text",
     5, None),
    ("f32[3]0", "unexpected '0' after the end of the shape", 6, "remove the trailing text"),
    ("f32[3]{0}}", "unexpected '}' after the end of the shape", 9, "remove the trailing text"),
    # A bounded dimension is named at its '<=', a plain one at its number.
    ("f32[3,<=-2]", "dimension 1 has negative size -2", 6, None),
    ("f32[3, -2]", "dimension 1 has negative size -2", 7, None),
    # minor_to_major.
    ("f32[3,5]{,0}", "expected '}' to close the layout opened at position 8, found ','", 9, None),
    ("f32[3,5]{1,}", "expected a dimension number, found '}'", 11, None),
    ("f32[3,5]{1 0}", "expected '}' to close the layout opened at position 8, found '0'", 11, None),
    ("f32[3,5]{1,0", "expected '}' to close the layout opened at position 8, found the end of the text", 12, None),
    ("f32[3,5]{0, 0}", "minor_to_major lists dimension 0 twice; it must be a permutation of 0..1", 12, None),
    ("f32[3,5]{1,0,2}", "Dimensions size is 2, but minor to major size is 3.", 9,
     "list each of the 2 dimensions once, most minor first, e.g. {1,0}"),
    # Attribute names, order and repeats.
    ("f32[3]{0:t(2)}", "unknown layout attribute 't'", 9, "attribute names are upper case: T"),
    ("f32[3]{0:sc(0:1)}", "unknown layout attribute 'sc'", 9, "attribute names are upper case: SC"),
    ("f32[3]{0:X(2)}", "unknown layout attribute 'X'", 9, f"attributes are {ORDER}, in that order"),
    ("f32[3]{0:T2}", "unknown layout attribute 'T2'", 9, f"attributes are {ORDER}, in that order"),
    ("f32[3]{0:D(D)D(D)}", "duplicate layout attribute 'D'", 13, None),
    ("f32[3]{0:E(4)E(4)}", "duplicate layout attribute 'E'", 13, None),
    ("f32[3]{0:M(8)P(f32[3])}", "layout attribute 'P' must come before 'M'", 13,
     f"XLA reads attributes in the order {ORDER}"),
    ("f32[3]{0:*(u32)#(u32)}", "layout attribute '#' must come before '*'", 15,
     f"XLA reads attributes in the order {ORDER}"),
    ("f32[3]{0:T(2)D(D)}", "layout attribute 'D' must come before 'T'", 13,
     f"XLA reads attributes in the order {ORDER}"),
    ("f32[3]{0:T(2):}", "expected '}' to close the layout opened at position 6, found ':'", 13, None),
    # D(...).
    ("f32[3]{0:D~}", "expected '(' after D, found '~'", 10, None),
    ("f32[3]{0:D(d)}", "expected a dimension level type (D, C, S, H), found 'd'", 11, LEVEL_HINT),
    ("f32[3]{0:D(DC)}", "expected a dimension level type (D, C, S, H), found 'DC'", 11, LEVEL_HINT),
    ("f32[3]{0:D(1)}", "expected a dimension level type (D, C, S, H), found '1'", 11, LEVEL_HINT),
    ("f32[3]{0:D(D,)}", "expected a dimension level type (D, C, S, H), found ')'", 13, LEVEL_HINT),
    ("f32[3]{0:D(D C)}", "expected ',' or ')' in D(...), found 'C'", 13, None),
    ("f32[3]{0:D(C~+)}", "expected ',' or ')' in D(...), found '+'", 13, None),
    ("f32[3,5]{1,0:D(D)}", "D(...) has 1 dimension level types for a rank-2 shape", 14,
     "give one level type per dimension"),
    # T(...).
    ("f32[3]{0:T}", "expected '(' to start a tile after T, found '}'", 10, None),
    ("f32[3]{0:T 2}", "expected '(' to start a tile after T, found '2'", 11, None),
    ("f32[3]{0:T(0)}", "tile sizes must be positive, got 0", 11, "write '*' to combine a dimension with the next one"),
    # -1 is how '*' is stored: written as a number it is a bad size, never a '*'.
    ("f32[3,5]{1,0:T(-1,2)}", "tile sizes must be positive, got -1", 15,
     "write '*' to combine a dimension with the next one"),
    ("f32[3]{0:T(a)}", "expected a tile size or '*', found 'a'", 11, None),
    # '(' and '#' sort before ')': an entry is expected, not the closing parenthesis.
    ("f32[3]{0:T((2)}", "expected a tile size or '*', found '('", 11, None),
    ("f32[3]{0:T(#)}", "expected a tile size or '*', found '#'", 11, None),
    ("f32[3]{0:T(2,)}", "expected a tile size or '*', found ')'", 13, None),
    ("f32[3]{0:T(2)(}", "expected a tile size or '*', found '}'", 14, None),
    ("f32[3]{0:T(2 2)}", "expected ',' or ')' to close the tile opened at position 10, found '2'", 13, None),
    ("f32[3]{0:T(2)(1 1)}", "expected ',' or ')' to close the tile opened at position 13, found '1'", 16, None),
    ("f32[3]{0:T()}", "a tile needs at least one dimension", 10, "write T(8,128) rather than T()"),
    ("f32[3,5]{1,0:T(2,2)(2,*)}", "'*' cannot be the last (most minor) entry of a tile: it merges a dimension "
     "into the next more-minor one, and there is none", 22, None),
    ("f32[3]{0:T(2)(2,2,2)}", "tile (2,2,2) has 3 dimensions but the shape it applies to after the previous "
     "tiles, [2, 2], has only 2", 13, None),
    ("f32[3]{0:T(*,*,2)}", "'*' in tile (*,*,2) combines a dimension that the rank-1 shape does not have", 11, None),
    # L, E, S, M.
    ("f32[3]{0:L 2}", "expected '(' after L (tail padding alignment in elements), found '2'", 11, None),
    ("f32[3]{0:E()}", "expected an integer element size in bits, found ')'", 11, None),
    ("f32[3]{0:S(1}", "expected ')' to close S(...), found '}'", 12, None),
    ("f32[3]{0:M(x)}", "expected an integer dynamic shape metadata prefix bytes, found 'x'", 11, None),
    ("f32[3]{0:L( 0)}", "tail_padding_alignment (L) must be >= 1, got 0", 12, None),
    ("f32[3]{0:S(-1)}", "memory_space (S) must be >= 0, got -1", 11, None),
    ("f32[3]{0:M(-8)}", "dynamic_shape_metadata_prefix_bytes (M) must be >= 0, got -8", 11, None),
    # # and *.
    ("f32[3]{0:#u32}", "expected '(' after # (index primitive type), found 'u32'", 10, None),
    ("f32[3]{0:*(3)}", "expected an element type for the pointer primitive type, such as u32, found '3'", 11, None),
    ("f32[3]{0:#(q32)}", "unknown element type 'q32'", 11, "did you mean u32, s32, f32?"),
    ("f32[3]{0:#(zzzz)}", "unknown element type 'zzzz'", 11, None),
    ("f32[3]{0:#(u32}", "expected ')' to close #(...), found '}'", 14, None),
    ("f32[3]{0:*(F32)}", "pointer_primitive_type (*) must be an integer element type such as u32, got 'f32'", 11,
     None),
    # SC(...).
    ("f32[8]{0:SC 0}", "expected '(' to start a split config after SC, found '0'", 12, None),
    ("f32[8]{0:SC(:2)}", "expected the split dimension number, found ':'", 12, None),
    ("f32[8]{0:SC(0 2)}", "expected ':' between the split dimension and its split indices, found '2'", 14, None),
    ("f32[8]{0:SC(0:2,)}", "expected a split index, found ')'", 16, None),
    ("f32[8]{0:SC(0:(1)}", "expected a split index, found '('", 14, None),
    ("f32[8]{0:SC(0:#)}", "expected a split index, found '#'", 14, None),
    ("f32[8]{0:SC(0:2 4)}", "expected ',' or ')' in the split config, found '4'", 16, None),
    ("f32[2,8]{1,0:SC(0:1)(1:2,2)}", "split config split indices must be strictly increasing and positive", 25, None),
    ("f32[2,8]{1,0:SC(0:1)(0:1)}", "split config has duplicate physical dimension 0", 21, None),
    ("f32[2,8]{1,0:SC(2:1)}", "split config has out-of-bounds physical dimension 2 for a rank-2 shape", 16, None),
    ("f32[2,8]{1,0:SC(1:8)}", "split config split index 8 is out of bounds (dimension size 8)", 18, None),
    # P(...): errors inside the physical shape name offsets of the whole text.
    ("f32[4]{0:P f32[4]}", "expected '(' after P, found 'f32'", 11, None),
    ("f32[4]{0:P(f32[4]}", "expected ')' to close the physical shape P(...), found '}'", 17, None),
    ("f32[4]{0:P(f32[4]{0:T(0)})}", "tile sizes must be positive, got 0", 22,
     "write '*' to combine a dimension with the next one"),
    ("f32[4]{0:P(f32[4,2]{0})}", "Dimensions size is 2, but minor to major size is 1.", 20,
     "list each of the 2 dimensions once, most minor first, e.g. {1,0}"),
    ("f32[4]{0:P(f32[2]{0:P(f32[2])})}", "a physical shape P(...) cannot itself have a physical shape", 20, None),
])
def test_rejected_texts(text, reason, position, hint):
    assert error_of(text) == (reason, position, hint)


# Token kinds are compared as strings; these put a punctuation token that sorts before or
# after the expected one ('#' < '(' < ')' < '*' < ',' < ':' < '<=' < '[' < ']' ... < '{' < '}'
# < '~') where another is expected, so a '<' or '>' for '==' or '!=' changes the verdict.
@pytest.mark.parametrize("text, reason, position", [
    ("#[3]", "expected an element type such as f32, found '#'", 0),
    ("f32(3]", "expected '[' after the element type f32, found '('", 3),
    ("f32[3(4]", "expected ',' or ']' to close the dimension list opened at position 3, found '('", 5),
    ("f32[3*4]", "expected ',' or ']' to close the dimension list opened at position 3, found '*'", 5),
    ("f32[3[", "expected ',' or ']' to close the dimension list opened at position 3, found '['", 5),
    ("f32[3]}", "unexpected '}' after the end of the shape", 6),
    ("f32[3]~", "unexpected '~' after the end of the shape", 6),
    ("f32[3]<=", "unexpected '<=' after the end of the shape", 6),
    ("f32[3](", "unexpected '(' after the end of the shape", 6),
    ("f32[3,5]{1(0}", "expected '}' to close the layout opened at position 8, found '('", 10),
    ("f32[3]{0(}", "expected '}' to close the layout opened at position 6, found '('", 8),
    ("f32[3]{0~", "expected '}' to close the layout opened at position 6, found '~'", 8),
    ("f32[3]{0:3}", "expected '}' to close the layout opened at position 6, found '3'", 9),
    ("f32[3]{0:(}", "expected '}' to close the layout opened at position 6, found '('", 9),
    ("f32[3]{0:T#(u32)}", "expected '(' to start a tile after T, found '#'", 10),
    ("f32[3,5]{1,0:T(2(2)}", "expected ',' or ')' to close the tile opened at position 14, found '('", 16),
    ("f32[3,5]{1,0:D(D(C)}", "expected ',' or ')' in D(...), found '('", 16),
    ("f32[8]{0:SC#(u32)}", "expected '(' to start a split config after SC, found '#'", 11),
    ("f32[8]{0:SC(0:1)#(u32)}", "layout attribute '#' must come before 'SC'", 16),
    ("f32[8]{0:SC(0:1(2)}", "expected ',' or ')' in the split config, found '('", 15),
    ("f32[8]{0:SC(0(1)}", "expected ':' between the split dimension and its split indices, found '('", 13),
    ("f32[8]{0:L(2(}", "expected ')' to close L(...), found '('", 12),
    ("f32[8]{0:P(f32[8](}", "expected ')' to close the physical shape P(...), found '('", 17),
])
def test_a_punctuation_token_where_another_is_expected(text, reason, position):
    assert error_of(text)[:2] == (reason, position)


def test_attributes_right_after_tiles():
    assert parse("f32[3]{0:T(2)#(u32)}").index_primitive_type == "u32"
    assert parse("f32[3]{0:T(2)*(u8)}").pointer_primitive_type == "u8"
    assert parse("f32[3]{0:SC(0:1)P(f32[3])}").split_configs == (SplitConfig(0, (1,)),)


def test_physical_shape_fields():
    s = parse("f32[4]{0:P(f32[4]{0:T(2)})}")
    assert s.layout_physical_shape == Shape("f32", (4,), (0,), tiles=[(2,)])
    assert s.layout_physical_shape.layout_physical_shape is None


@pytest.mark.parametrize("value, kind", [(b"f32[3]", "bytes"), (None, "NoneType"), (3, "int")])
def test_only_text_is_parsed(value, kind):
    for call in (lambda: parse(value), lambda: parse_shape_text(value, lambda d: True, lambda d: [])):
        with pytest.raises(LayoutError) as info:
            call()
        assert info.value.reason == f"a shape must be given as text, not {kind}"
        assert info.value.position is None and info.value.text is None


def test_parse_shape_text_returns_raw_fields_and_offsets():
    parsed = parse_shape_text("F32[<=3, 5]{0,1:T(2,*)(1)SC(1:2)}", lambda d: d == "f32", lambda d: [])
    assert parsed.fields == {"dtype": "f32", "dims": (3, 5), "dynamic_dims": (True, False),
                             "minor_to_major": (0, 1), "tiles": ((2, -1), (1,)), "split_configs": ((1, (2,)),)}
    assert parsed.physical is None
    assert parsed.positions == {
        ("dtype",): 0, ("dims",): 3, ("dim", 0): 4, ("dim", 1): 9, ("layout",): 11, ("m2m",): 12,
        ("m2m", 0): 12, ("m2m", 1): 14, ("T",): 17, ("tile", 0): 17, ("tile", 0, 0): 18, ("tile", 0, 1): 20,
        ("tile", 1): 22, ("tile", 1, 0): 23, ("SC",): 27, ("SC", 0): 27, ("SC", 0, "dim"): 28, ("SC", 0, 0): 30,
    }
    # The element-type callbacks are the caller's: an unknown name gets its suggestions.
    with pytest.raises(LayoutError) as info:
        parse_shape_text("f32[3]", lambda d: False, lambda d: ["abc", "xyz"])
    assert (info.value.reason, info.value.hint) == ("unknown element type 'f32'", "did you mean abc, xyz?")
    with pytest.raises(LayoutError) as info:
        parse_shape_text("s32[3]{0:#(u8)}", lambda d: d == "s32", lambda d: [d.upper()])
    assert (info.value.reason, info.value.position, info.value.hint) == ("unknown element type 'u8'", 11,
                                                                         "did you mean U8?")


def test_int_and_type_attribute_offsets_are_their_values():
    parsed = parse_shape_text("f32[3]{0:L(4)#( u8)*(u8)E( 8)S(1)M(2)}", lambda d: True, lambda d: [])
    positions = parsed.positions
    assert [positions[(k,)] for k in ("L", "#", "*", "E", "S", "M")] == [11, 16, 21, 27, 31, 35]
    assert parsed.fields["index_primitive_type"] == "u8" and parsed.fields["pointer_primitive_type"] == "u8"
    assert parsed.fields["tail_padding_alignment"] == 4 and parsed.fields["element_size_in_bits"] == 8
