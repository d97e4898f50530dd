"""The protocol-buffer text format reader and writer (scwork.interop._pbtxt), by hand.

tests/interop/test_jax_tpu_embedding.py and test_read_embedding_spec_paths.py reach
this module through the EmbeddingSpecProto schema and compare with protobuf itself;
this file pins it on a small schema of its own, every expected value written out
from the text format's rules (protobuf's ``text_format`` documentation and
``text_format.py``): escapes, number forms, enums, maps, lists, separators, proto3
defaults left out on writing, float32 shortest forms, and every refusal's message
with its line.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from scwork.errors import ConfigError, InputError
from scwork.interop._pbtxt import format_message, parse

SCHEMA = {
    "P": [("i", "int", "optional"), ("f", "float", "optional"), ("b", "bool", "optional"),
          ("s", "string", "optional"), ("e", "enum:Color", "optional"), ("tags", "string", "repeated"),
          ("nums", "int", "repeated"), ("kid", "P", "explicit"), ("kids", "P", "repeated"),
          ("m", ("map", "string", "int"), "optional"), ("pm", ("map", "int", "P"), "optional"),
          ("xi", "int", "explicit"), ("xf", "float", "explicit"), ("xe", "enum:Color", "explicit")],
}
ENUMS = {"Color": ["RED", "GREEN", "BLUE"]}


def p(text, source="spec.txt"):
    return parse(text, SCHEMA, "P", ENUMS, source)


def fmt(message, indent=0):
    return format_message(message, SCHEMA, "P", ENUMS, indent)


def refused(text, message):
    with pytest.raises(InputError, match=re.escape(message)):
        p(text)


# -- reading: scalars --------------------------------------------------------------


def test_ints_in_every_base():
    assert p("i: 42") == {"i": 42}
    assert p("i: -42") == {"i": -42} and p("i: +7") == {"i": 7}
    assert p("i: 0x1F") == {"i": 31} and p("i: 0XfF") == {"i": 255} and p("i: -0x10") == {"i": -16}
    assert p("i: 0xE") == {"i": 14} and p("i: -0xe") == {"i": -14}         # an 'e' digit, not an exponent
    assert p("i: 017") == {"i": 15} and p("i: -017") == {"i": -15}        # a leading 0: octal
    assert p("i: 0") == {"i": 0} and p("i: 00") == {"i": 0}
    # int64 at both ends, in decimal, hex and octal.
    assert p("i: 9223372036854775807") == {"i": 2**63 - 1}
    assert p("i: -9223372036854775808") == {"i": -2**63}
    assert p("i: 0x7fffffffffffffff") == {"i": 2**63 - 1}
    assert p("i: 0777777777777777777777") == {"i": 2**63 - 1}


@pytest.mark.parametrize("text", ["9223372036854775808", "-9223372036854775809", "0x8000000000000000",
                                  "01000000000000000000000", "99999999999999999999999"])
def test_ints_past_int64(text):
    refused(f"i: {text}", f"spec.txt, line 1, i: {text!r} is outside the int64 range of the field")


def test_int_refusals():
    refused("i: 09", "spec.txt, line 1, i: '09' is not a valid octal integer (a leading 0 means octal)")
    refused("i: -0128", "'-0128' is not a valid octal integer")
    for text in ("1.0", "1e3", "2f", ".5", "1E2"):
        refused(f"i: {text}", f"spec.txt, line 1, i: expected an integer, got {text!r}")
    refused("i: RED", "spec.txt, line 1, i: expected an integer, got 'RED'")
    refused('i: "3"', "spec.txt, line 1, i: expected an integer, got '\"3\"'")


def test_floats():
    assert p("f: 1.5") == {"f": 1.5} and p("f: -2.25") == {"f": -2.25} and p("f: 3") == {"f": 3.0}
    assert p("f: .5") == {"f": 0.5} and p("f: 5.") == {"f": 5.0} and p("f: 0.25") == {"f": 0.25}
    assert p("f: 1e3") == {"f": 1000.0} and p("f: 2.5E-1") == {"f": 0.25} and p("f: 4f") == {"f": 4.0}
    assert p("f: 1.5F") == {"f": 1.5} and p("f: +1.5") == {"f": 1.5} and p("f: 0") == {"f": 0.0}
    # float32: 0.1 is 13421773 / 2**27.
    assert p("f: 0.1") == {"f": 13421773 / 2**27}
    # Past float32's largest finite value (3.4028235e38): infinite, with the sign.
    assert p("f: 1e39") == {"f": math.inf} and p("f: -1e39") == {"f": -math.inf}
    for word, value in (("inf", math.inf), ("-inf", -math.inf), ("Infinity", math.inf), ("-INFINITY", -math.inf),
                        ("inff", math.inf), ("infinityf", math.inf), ("-inff", -math.inf)):
        assert p(f"f: {word}") == {"f": value}, word
    for word in ("nan", "NaN", "nanf", "-nan"):
        assert math.isnan(p(f"f: {word}")["f"]), word


def test_float_refusals():
    for text in ("0x10", "01.5", "-01", "00"):
        refused(f"f: {text}", f"spec.txt, line 1, f: expected a decimal number (no leading zero), got {text!r}")
    refused("f: infinite", "expected a decimal number (no leading zero), got 'infinite'")
    refused('f: "1"', "expected a decimal number")


def test_bools():
    for text in ("true", "True", "t", "1"):
        assert p(f"b: {text}") == {"b": True}, text
    for text in ("false", "False", "f", "0"):
        assert p(f"b: {text}") == {"b": False}, text
    for text in ("TRUE", "yes", "2", "T"):
        refused(f"b: {text}", f"spec.txt, line 1, b: expected true or false, got {text!r}")


def test_enums_by_name_and_number():
    assert p("e: GREEN") == {"e": "GREEN"}
    assert p("e: 2") == {"e": "BLUE"} and p("e: 0") == {"e": "RED"}
    # proto3 enums are open: a number with no name is kept, int32 at both ends.
    assert p("e: 3") == {"e": 3} and p("e: -1") == {"e": -1}
    assert p("e: 2147483647") == {"e": 2**31 - 1} and p("e: -2147483648") == {"e": -2**31}
    for text in ("2147483648", "-2147483649", "PURPLE", "green", "1.0", '"RED"'):
        refused(f"e: {text}", f"spec.txt, line 1, e: expected one of RED, GREEN, BLUE, got {text!r}"
                if text[0] != '"' else "e: expected one of RED, GREEN, BLUE")


# -- reading: strings --------------------------------------------------------------


def test_string_escapes():
    assert p(r's: "a\nb\tc\rd"') == {"s": "a\nb\tc\rd"}
    assert p(r's: "\a\b\f\v"') == {"s": "\x07\x08\x0c\x0b"}
    assert p(r's: "q\"s\'b\\"') == {"s": "q\"s'b\\"}
    assert p(r"s: 'it\'s'") == {"s": "it's"}
    # Octal: 1 to 3 digits; \1234 is \123 ("S") then "4".
    assert p(r's: "\101\0\1234\7"') == {"s": "A\x00S4\x07"}
    assert p(r's: "\303\251"') == {"s": "é"}              # the UTF-8 bytes of é, one by one
    # Hex: 1 or 2 digits.
    assert p(r's: "\x41\x4g\X7e"') == {"s": "A\x04g~"}
    # Code points: \u and 4 digits, \U and 8.
    assert p(r's: "\u00e9\U0001F600"') == {"s": "é\U0001F600"}
    assert p(r's: "\U0010FFFF"') == {"s": "\U0010FFFF"}
    # An unknown escape is kept as written.
    assert p(r's: "\q\?"') == {"s": "\\q\\?"}
    assert p('s: "é ünï"') == {"s": "é ünï"}


def test_adjacent_strings_are_one():
    assert p('s: "ab" \'cd\'\n "ef"') == {"s": "abcdef"}
    assert p('tags: "a" "b" tags: "c"') == {"tags": ["ab", "c"]}
    # Only strings join: a number after a string is the next token, refused where it stands.
    refused('s: "a" 5', "spec.txt, line 1: expected a field name of P (i, f, b, s, e")
    refused('tags: ["a" 5]', "spec.txt, line 1, tags: expected a quoted string, got '5'")


def test_string_refusals():
    refused(r's: "\xg"', r"""spec.txt, line 1, s: '\x' must be followed by hex digits in '"\\xg"'""")
    refused(r's: "\u12"', r"spec.txt, line 1, s: '\u' needs 4 hex digits of a code point")
    refused(r's: "\U00110000"', r"'\U' needs 8 hex digits of a code point")
    refused(r's: "\U0000zzzz"', r"'\U' needs 8 hex digits")
    refused(r's: "\377"', "spec.txt, line 1, s: the string is not valid UTF-8")
    refused(r's: "\777"', "the string is not valid UTF-8")          # 511 & 0xFF: byte 255
    refused(r's: "\ud800"', "the string is not valid UTF-8")        # a lone surrogate
    refused("s: 3", "spec.txt, line 1, s: expected a quoted string, got '3'")
    refused("s: abc", "spec.txt, line 1, s: expected a quoted string, got 'abc'")
    refused("s: {", "spec.txt, line 1, s: expected a quoted string, got '{'")
    refused('s: "open', "spec.txt, line 1: unexpected character '\"' in the text format")


# -- reading: structure ------------------------------------------------------------


def test_messages_lists_and_separators():
    text = """
    # a comment
    i: 1, f: 2.5; b: true   # separators are optional
    kid { i: 2 kid < s: "x" > }
    kids: { i: 3 } kids [ ] kids: [{ i: 4 }, < i: 5 >]
    tags: ["a", 'b',] tags: "c" tags: []
    nums: [1, 0x2, 3]
    """
    assert p(text) == {"i": 1, "f": 2.5, "b": True, "kid": {"i": 2, "kid": {"s": "x"}},
                       "kids": [{"i": 3}, {"i": 4}, {"i": 5}], "tags": ["a", "b", "c"], "nums": [1, 2, 3]}
    # The ':' before a list of messages is optional, as before one message (protobuf's
    # _MergeField: TryConsume(':') for a message field, then the short repeated form).
    assert p("kids [{ i: 1 }, < i: 2 >] kids []") == {"kids": [{"i": 1}, {"i": 2}]}
    assert p("m [{ key: 'a' value: 1 }]") == {"m": {"a": 1}}
    assert p("") == {} and p("  # only a comment\n") == {}
    assert p("kid {}") == {"kid": {}} and p("kid: <>") == {"kid": {}}
    assert p("i: [7]") == {"i": 7}                  # a list of one for a single field


def test_nums_list_with_a_semicolon_inside_is_refused():
    # Inside [...] only "," separates: "0x2; 3" reads 2, then ";" where a value is expected.
    refused("nums: [1, 0x2; 3]\n", "spec.txt, line 1, nums: expected an integer, got ';'")


def test_maps_merge_and_later_keys_win():
    text = 'm { key: "b" value: 2 } m { key: "a" value: 1 } m: { key: "b" value: 3 } m { key: "z" } m { value: 9 }'
    # A missing key or value is its kind's default ("" and 0).
    assert p(text) == {"m": {"b": 3, "a": 1, "z": 0, "": 9}}
    assert p("m: [{key: 'x' value: 1}, {key: 'y', value: 2}]") == {"m": {"x": 1, "y": 2}}
    assert p("pm { key: 3 value { i: 1 } } pm { key: 4 } pm { value { s: 'v' } }") == {
        "pm": {3: {"i": 1}, 4: None, 0: {"s": "v"}}}


def test_map_entries_without_a_value_hold_their_kinds_default():
    # A map entry that leaves out its value holds the value kind's default: 0.0, false, "", 0.
    schema = {"Q": [("fm", ("map", "string", "float"), "optional"), ("bm", ("map", "int", "bool"), "optional"),
                    ("sm", ("map", "bool", "string"), "optional")]}
    message = parse('fm { key: "a" } bm { key: 1 } sm { key: true } sm { value: "v" } fm { value: 2.5 }', schema, "Q",
                    {})
    assert message == {"fm": {"a": 0.0, "": 2.5}, "bm": {1: False}, "sm": {True: "", False: "v"}}
    assert math.copysign(1.0, message["fm"]["a"]) == 1.0


def test_a_field_set_twice_is_refused():
    refused("i: 1\ni: 2", "spec.txt, line 2: i is set more than once; it holds one value")
    refused("kid { }\n\nkid { }", "spec.txt, line 3: kid is set more than once")
    refused("kid { i: 1 i: 2 }", "spec.txt, line 1: kid.i is set more than once")
    refused("i: [1, 2]", "spec.txt, line 1: i holds one value, got a list of 2")
    refused("i: []", "spec.txt, line 1: i holds one value, got a list of 0")
    refused("kid: [{}, {}]", "kid holds one value, got a list of 2")
    refused("kid [ ]", "spec.txt, line 1: kid holds one value, got a list of 0")
    refused("i: 1 i: [2]", "spec.txt, line 1: i is set more than once")


@pytest.mark.parametrize("field, message", [
    ("i ", "spec.txt, line 1, i: expected ':', got "), ("i: ", "spec.txt, line 1, i: expected an integer, got "),
    ("s: ", "spec.txt, line 1, s: expected a quoted string, got "), ("b: ", "spec.txt, line 1, b: expected true or "
                                                                          "false, got "),
    ("f: ", "spec.txt, line 1, f: expected a decimal number (no leading zero), got "),
    ("e: ", "spec.txt, line 1, e: expected one of RED, GREEN, BLUE, got "),
    ("kid ", "spec.txt, line 1, kid: expected '{' or '<', got "), ("", None)])
def test_long_tokens_are_cut_to_60_characters_in_messages(field, message):
    # shown(text, 60): a repr longer than 60 characters is cut to 57 and "..."; one of
    # exactly 60 (58 characters and two quotes) is shown whole. Tokens are words ("x99..."),
    # but in a field name's place ("") numbers (a word there would be a field name).
    first = "9" if not field else "x"
    for length, shown in ((100, "'" + first + "9" * 55 + "..."), (58, "'" + first + "9" * 57 + "'")):
        with pytest.raises(InputError) as raised:
            p(field + first + "9" * (length - 1))
        text = str(raised.value)
        if message is None:
            assert text.startswith("spec.txt, line 1: expected a field name of P (i, f, b, s, e")
            assert text.endswith(", got " + shown)
        else:
            assert text == message + shown


def test_long_numbers_outside_int64_are_cut_to_40_characters():
    # shown(text, 40): 37 characters of the repr and "...".
    with pytest.raises(InputError) as raised:
        p("i: " + "9" * 100)
    assert str(raised.value) == "spec.txt, line 1, i: '" + "9" * 36 + "... is outside the int64 range of the field"
    with pytest.raises(InputError) as raised:
        p("i: " + "9" * 38)
    assert str(raised.value) == "spec.txt, line 1, i: '" + "9" * 38 + "' is outside the int64 range of the field"


def test_structure_refusals_name_the_line():
    refused("i: 1\nj: 2", "spec.txt, line 2: P has no field 'j'; its fields are i, f, b, s, e, tags, nums, kid, "
                          "kids, m, pm, xi, xf, xe")
    refused("\n\n[ext.field]: 1", "spec.txt, line 3: expected a field name of P (i, f, b, s, e, tags, nums, kid, "
                                  "kids, m, pm, xi, xf, xe), got '[' (extensions and Any are not read)")
    refused("-i: 1", "spec.txt, line 1: expected a field name of P")
    refused("3: 1", "expected a field name of P (i, f, b, s, e, tags, nums, kid, kids, m, pm, xi, xf, xe), got '3'")
    refused("kid { i: 1", "spec.txt, line 1: kid is not closed (missing '}')")
    refused("kid { kid < i: 1 \n\n", "spec.txt, line 1: kid.kid is not closed (missing '>')")
    refused("kid { i: 1 >", "spec.txt, line 1: expected a field name of P")
    refused("kid: 3", "spec.txt, line 1, kid: expected '{' or '<', got '3'")
    refused("kid [ 3 ]", "spec.txt, line 1, kid: expected '{' or '<', got '3'")
    for symbol in ("]", "}", ">", ":", ","):
        refused(f"kid: {symbol}", f"spec.txt, line 1, kid: expected '{{' or '<', got {symbol!r}")
    # Only '[' is read as the start of an extension or Any.
    for symbol in ("{", "}", "]", "<"):
        with pytest.raises(InputError) as raised:
            p(symbol)
        assert str(raised.value).endswith(f"kids, m, pm, xi, xf, xe), got {symbol!r}")
    refused("m: 3", "spec.txt, line 1, m: expected '{' or '<', got '3'")
    refused("i 3", "spec.txt, line 1, i: expected ':', got '3'")
    # Symbols before and after ':' in ASCII: each is not the ':'.
    for symbol in (",", ".", "/", ";", "<", "[", "{"):
        refused(f"i {symbol} 3", f"spec.txt, line 1, i: expected ':', got {symbol!r}")
    refused("i: 1 @", "spec.txt, line 1: unexpected character '@' in the text format")
    refused("i: 1\n# x\n\n  $", "spec.txt, line 4: unexpected character '$'")
    refused("i:", "spec.txt, line 1: the text ends where a value of i was expected")
    refused("i: 1\n kid {\n i: 2 \n kid", "spec.txt, line 4: the text ends where '{' opening kid.kid was expected")
    refused("i", "spec.txt, line 1: the text ends where ':' was expected")
    refused("m { key: 1 }", "spec.txt, line 1, m.key: expected a quoted string, got '1'")
    refused("m { k: 1 }", "spec.txt, line 1: entry has no field 'k'; its fields are key, value")
    with pytest.raises(InputError, match="^my file, line 1"):
        parse("x: 1", SCHEMA, "P", ENUMS, "my file")
    with pytest.raises(InputError, match="^text, line 1"):
        parse("x: 1", SCHEMA, "P", ENUMS)


# -- writing -----------------------------------------------------------------------


def test_defaults_are_left_out_unless_explicit():
    # proto3 implicit presence: 0, 0.0, false, "" and the first enum value (or 0) are not written.
    assert fmt({"i": 0, "f": 0.0, "b": False, "s": "", "e": "RED"}) == ""
    assert fmt({"e": 0}) == ""
    # Explicit presence: written whatever the value.
    assert fmt({"xi": 0, "xf": 0.0, "xe": "RED"}) == "xi: 0\nxf: 0.0\nxe: RED\n"
    # -0.0 has its sign bit set: written.
    assert fmt({"f": -0.0}) == "f: -0.0\n"
    assert fmt({"i": -1, "f": 1.5, "b": True, "s": "x", "e": "BLUE"}) == 'i: -1\nf: 1.5\nb: true\ns: "x"\ne: BLUE\n'
    assert fmt({"e": 7, "xe": 1}) == "e: 7\nxe: 1\n"
    assert fmt({}) == ""


def test_fields_in_schema_order_nested_and_repeated():
    message = {"kids": [{"i": 2}, {}], "tags": ["a", ""], "kid": {"kid": {"s": "deep"}, "i": 1}, "nums": [0, 5],
               "i": 3}
    assert fmt(message) == ('i: 3\ntags: "a"\ntags: ""\nnums: 0\nnums: 5\n'
                            'kid {\n  i: 1\n  kid {\n    s: "deep"\n  }\n}\n'
                            'kids {\n  i: 2\n}\nkids {\n}\n')
    assert fmt({"i": 3, "kid": {"i": 1}}, indent=1) == "  i: 3\n  kid {\n    i: 1\n  }\n"
    assert fmt({"tags": [], "kids": []}) == ""


def test_maps_sorted_by_key_defaults_left_out():
    assert fmt({"m": {"b": 2, "a": 0, "": 1}}) == ('m {\n  value: 1\n}\n'
                                                    'm {\n  key: "a"\n}\n'
                                                    'm {\n  key: "b"\n  value: 2\n}\n')
    assert fmt({"pm": {10: {"i": 1}, 2: {}}}) == "pm {\n  key: 2\n  value {\n  }\n}\npm {\n  key: 10\n  value {\n    i: 1\n  }\n}\n"
    assert fmt({"m": {}}) == ""


@pytest.mark.parametrize("value, text", [
    (0.1, "0.1"), (1 / 3, "0.33333334"), (2.5, "2.5"), (100.0, "100.0"), (1e-7, "1e-07"),
    (16777217.0, "16777216.0"), (1.0000001, "1.0000001"), (3.4028234663852886e38, "3.4028235e+38"),
    (1e39, "inf"), (-1e39, "-inf"), (math.inf, "inf"), (-math.inf, "-inf"), (math.nan, "nan"), (-1.5, "-1.5"),
    (123456789.0, "123456790.0"), (0.2, "0.2"), (7, "7.0"), (np.float32(0.3), "0.3"),
    # Six digits first, as protobuf's ToShortestFloat: these float32s read back from six
    # digits though a seventh would differ (9.579671e-16), and this subnormal from five
    # though protobuf prints six (6.2878e-41 would be shorter).
    (9.579670524111831e-16, "9.57967e-16"), (6.287766339271887e-41, "6.28777e-41")])
def test_floats_in_their_shortest_float32_form(value, text):
    # float32 rounding first (1/3 is 11184811 / 2**25, 123456789 rounds to 123456792),
    # then the fewest significant digits, from 6 up, that read back to the same float32
    # (0.33333334 and 123456790: 8 digits; 3.4028235e+38, float32's largest: 8).
    assert fmt({"xf": value}) == f"xf: {text}\n"


def test_strings_escaped():
    assert fmt({"s": 'a"b\'c\\d'}) == 's: "a\\"b\\\'c\\\\d"\n'
    assert fmt({"s": "l1\nl2\r\t"}) == 's: "l1\\nl2\\r\\t"\n'
    assert fmt({"s": "\x00\x01\x1f\x7f é"}) == 's: "\\000\\001\\037\\177 é"\n'
    assert fmt({"s": " ~"}) == 's: " ~"\n'


def test_written_text_reads_back():
    message = {"i": -5, "f": 0.5, "b": True, "s": 'q"\n\x01é', "e": "GREEN", "tags": ["x", "y"], "nums": [1, 2],
               "kid": {"i": 7, "m": {"k": 3}}, "kids": [{"s": "a"}, {}], "m": {"a": 1, "b": 2},
               "pm": {1: {"i": 1}}, "xi": 0, "xf": 0.0, "xe": "RED"}
    assert p(fmt(message)) == message


# -- writing: refusals -------------------------------------------------------------


@pytest.mark.parametrize("message, error", [
    ({"s": 3}, "s must be a str, got 3"),
    ({"b": 1}, "b must be True or False, got 1"),
    ({"b": "true"}, "b must be True or False, got 'true'"),
    ({"f": True}, "f must be a number, got True"),
    ({"f": "1.5"}, "f must be a number, got '1.5'"),
    ({"f": 10**400}, "f must be a number within the float range"),
    ({"i": True}, "i must be an integer, got True"),
    ({"i": 1.0}, "i must be an integer, got 1.0"),
    ({"i": 2**63}, "i must be an integer within the int64 range, got 9223372036854775808"),
    ({"i": -2**63 - 1}, "i must be an integer within the int64 range"),
    ({"e": "PURPLE"}, "e must be one of RED, GREEN, BLUE (or an int32 enum number), got 'PURPLE'"),
    ({"e": True}, "e must be one of RED, GREEN, BLUE"),
    ({"e": 2**31}, "e must be one of RED, GREEN, BLUE"),
    ({"e": 2**31 + 1}, "e must be one of RED, GREEN, BLUE"),
    ({"e": 2**40}, "e must be one of RED, GREEN, BLUE"),
    ({"e": -2**31 - 1}, "e must be one of RED, GREEN, BLUE"),
    ({"e": 1.0}, "e must be one of RED, GREEN, BLUE"),
    ({"tags": "ab"}, "tags is repeated: it must be a list, got 'ab'"),
    ({"tags": {"a": 1}}, "tags is repeated: it must be a list"),
    ({"tags": 3}, "tags is repeated: it must be a list, got 3"),
    ({"tags": ["a", 2]}, "tags[1] must be a str, got 2"),
    ({"kids": [{}, {"i": "x"}]}, "kids[1].i must be an integer, got 'x'"),
    ({"kid": {"kid": {"q": 1}}}, "kid.kid has no field 'q'; P's fields are i, f, b, s, e, tags"),
    ({"kid": 3}, "kid must be a dict of P fields, got 3"),
    ({"m": [1]}, "m must be a dict (a map field), got [1]"),
    ({"m": {1: 2}}, "m key must be a str, got 1"),
    ({"m": {"a": "b"}}, "m['a'] must be an integer, got 'b'"),
    ({"pm": {1: {"z": 0}}}, "pm[1] has no field 'z'; P's fields are i, f, b, s, e"),
    ({"pm": {1: 2}}, "pm[1] must be a dict of P fields, got 2"),
    ({"pm": {"1": {}}}, "pm key must be an integer, got '1'"),
    ({"zz": 1}, "P has no field 'zz'; P's fields are i, f, b, s, e, tags, nums, kid, kids, m, pm, xi, xf, xe"),
    ({"i": 1, "zz": 1, "yy": 2}, "P has no field 'zz'; P's fields"),          # the first unknown one
])
def test_values_of_the_wrong_kind_are_refused(message, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        fmt(message)


def test_the_message_must_be_a_dict():
    with pytest.raises(ConfigError, match=re.escape("P must be a dict of P fields, got [1]")):
        fmt([1])


def test_accepted_number_types():
    assert fmt({"b": np.bool_(True), "i": np.int64(3), "f": np.float32(2.5), "e": np.int32(2)}) == \
        "i: 3\nf: 2.5\nb: true\ne: 2\n"
    assert fmt({"e": 2**31 - 1, "xe": -2**31}) == "e: 2147483647\nxe: -2147483648\n"
    assert fmt({"i": 2**63 - 1}) == "i: 9223372036854775807\n" and fmt({"i": -2**63}) == "i: -9223372036854775808\n"
