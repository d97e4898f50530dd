"""Protocol-buffer text format for a fixed schema, without protobuf.

The reader accepts what ``google.protobuf.text_format.Parse`` accepts for messages of
scalars, enums, nested messages and maps (comments, ``:`` before ``{`` optional,
``<...>`` blocks, ``[a, b]`` lists, ``,`` / ``;`` separators, adjacent strings
concatenated, C escapes, hex integers, ``inf`` / ``nan`` and ``f`` suffixes); it
refuses extensions and ``Any`` expansions. The writer prints as
``text_format.MessageToString`` does: fields in field-number order, proto3 scalars
left out when they hold their default, map entries sorted by key, floats in their
shortest float32 form.

A message is a plain ``dict`` (field name -> value; a repeated field a list, a map a
dict) and a schema maps message names to their fields in field-number order::

    SCHEMA = {"Point": [("x", "int", "optional"), ("tags", "string", "repeated"),
                        ("child", "Point", "optional"), ("attrs", ("map", "string", "float"), "optional")]}

Kinds: ``int``, ``float``, ``bool``, ``string``, ``enum:<Name>`` (values from
``enums``), a message name, or ``("map", key kind, value kind)``. The third entry is
``"optional"`` (proto3 implicit presence: a default value is not written),
``"explicit"`` (``optional`` / oneof members: written when present) or ``"repeated"``.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scwork._validate import shown
from scwork.errors import ConfigError, InputError
from scwork._validate import decimal_int

__all__ = ["parse", "format_message"]

Schema = Mapping[str, Sequence[tuple[str, Any, str]]]

_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fF]?))
  | (?P<word>-?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<symbol>[{}<>\[\]:,;/.])
""", re.VERBOSE)
_SIMPLE_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, "'": 39, '"': 34}
_INT64 = (-(2**63), 2**63 - 1)


class _Tokens:
    def __init__(self, text: str, source: str):
        self.source = source
        self.items: list[tuple[str, str, int]] = []
        position, line = 0, 1
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None:
                raise InputError(f"{source}, line {line}: unexpected character {text[position]!r} in the text format")
            kind = match.lastgroup
            if kind != "space":
                self.items.append((kind, match.group(), line))
            line += match.group().count("\n")
            position = match.end()
        self.index = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.items[self.index] if self.index < len(self.items) else None

    def line(self) -> int:
        token = self.peek()
        return token[2] if token else (self.items[-1][2] if self.items else 1)

    def next(self, what: str) -> tuple[str, str, int]:
        token = self.peek()
        if token is None:
            raise InputError(f"{self.source}, line {self.line()}: the text ends where {what} was expected")
        self.index += 1
        return token

    def take(self, symbol: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "symbol" and token[1] == symbol:
            self.index += 1
            return True
        return False

    def expect(self, symbol: str, where: str) -> None:
        kind, text, line = self.next(f"{symbol!r}")
        if kind != "symbol" or text != symbol:
            raise InputError(f"{self.source}, line {line}, {where}: expected {symbol!r}, got {shown(text, 60)}")


def _unescape(token: str, where: str) -> bytes:
    body, out, i = token[1:-1], bytearray(), 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        e = body[i + 1]
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
            i += 2
        elif e in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1:]).group()
            out.append(int(digits, 8) & 0xFF)
            i += 1 + len(digits)
        elif e in "xX":
            digits = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:])
            if digits is None:
                raise InputError(f"{where}: '\\x' must be followed by hex digits in {token!r}")
            out.append(int(digits.group(), 16))
            i += 2 + len(digits.group())
        elif e in "uU":
            size = 4 if e == "u" else 8
            digits = body[i + 2:i + 2 + size]
            if not re.fullmatch(r"[0-9a-fA-F]{%d}" % size, digits) or int(digits, 16) > 0x10FFFF:
                raise InputError(f"{where}: '\\{e}' needs {size} hex digits of a code point in {token!r}")
            out += chr(int(digits, 16)).encode("utf-8", "surrogatepass")
            i += 2 + size
        else:                            # protobuf keeps an unknown escape as it is
            out += ("\\" + e).encode("utf-8")
            i += 2
    return bytes(out)


def _scalar(tokens: _Tokens, kind: str, where: str, enums: Mapping[str, Sequence[str]]) -> Any:
    token_kind, text, line = tokens.next(f"a value of {where}")
    at = f"{tokens.source}, line {line}, {where}"
    if kind == "string":
        if token_kind != "string":
            raise InputError(f"{at}: expected a quoted string, got {shown(text, 60)}")
        data = _unescape(text, at)
        while tokens.peek() is not None and tokens.peek()[0] == "string":   # "a" "b" is "ab"
            data += _unescape(tokens.next("a string")[1], at)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{at}: the string is not valid UTF-8") from None
    if kind == "bool":
        if text in ("true", "True", "t", "1"):
            return True
        if text in ("false", "False", "f", "0"):
            return False
        raise InputError(f"{at}: expected true or false, got {shown(text, 60)}")
    if kind == "float":
        lowered = text.lower().lstrip("-")
        if token_kind == "word" and lowered in ("inf", "infinity", "nan", "inff", "infinityf", "nanf"):
            value = math.nan if lowered.startswith("nan") else math.inf
            return -value if text.startswith("-") else value
        if token_kind != "number" or "x" in text.lower() or re.match(r"[-+]?0[0-9]", text):
            raise InputError(f"{at}: expected a decimal number (no leading zero), got {shown(text, 60)}")
        return _to_float32(float(text.rstrip("fF")))
    if kind == "int":
        if token_kind != "number" or re.search(r"[.eEfF]", text) and not text.lower().lstrip("-").startswith("0x"):
            raise InputError(f"{at}: expected an integer, got {shown(text, 60)}")
        if re.fullmatch(r"[-+]?0[0-9]+", text) and not re.fullmatch(r"[-+]?0[0-7]+", text):
            raise InputError(f"{at}: {text!r} is not a valid octal integer (a leading 0 means octal)")
        if "x" in text.lower() or re.fullmatch(r"[-+]?0[0-7]+", text):
            value = int(text, 16 if "x" in text.lower() else 8)     # power-of-two bases: no digit limit
        else:
            # decimal_int checks the digit count first: int() refuses texts past 4,300 digits
            value = decimal_int(text, maximum=2**63)
        if value is None or not _INT64[0] <= value <= _INT64[1]:
            raise InputError(f"{at}: {shown(text, 40)} is outside the int64 range of the field")
        return value
    names = enums[kind.split(":", 1)[1]]
    if token_kind == "word" and text in names:
        return text
    number = decimal_int(text, maximum=2**31) if token_kind == "number" else None
    if number is not None and -2**31 <= number < 2**31:
        return names[number] if 0 <= number < len(names) else number   # proto3 enums are open
    raise InputError(f"{at}: expected one of {', '.join(names)}, got {shown(text, 60)}")


def _message(tokens: _Tokens, schema: Schema, enums, name: str, close: str | None, path: str) -> dict:
    fields = {f[0]: f for f in schema[name]}
    out: dict[str, Any] = {}
    while True:
        token = tokens.peek()
        if token is None:
            if close is not None:
                raise InputError(f"{tokens.source}, line {tokens.line()}: {path} is not closed (missing {close!r})")
            return out
        if token[0] == "symbol" and token[1] == close:
            tokens.index += 1
            return out
        kind, text, line = tokens.next("a field name")
        if kind != "word" or text.startswith("-"):
            raise InputError(f"{tokens.source}, line {line}: expected a field name of {name} ({', '.join(fields)}), "
                             f"got {shown(text, 60)}" + (" (extensions and Any are not read)" if text == "[" else ""))
        if text not in fields:
            raise InputError(f"{tokens.source}, line {line}: {name} has no field {text!r}; its fields are "
                             f"{', '.join(fields)}")
        _, field_kind, label = fields[text]
        where = f"{path}.{text}" if path else text
        is_message = isinstance(field_kind, tuple) or field_kind in schema
        if is_message:
            # The ':' is optional before a message, and so before a list of them: protobuf
            # reads "kids [{...}, {...}]" as "kids: [{...}, {...}]".
            tokens.take(":")
            values = []
            if tokens.take("["):
                while not tokens.take("]"):
                    values.append(_block(tokens, schema, enums, field_kind, where))
                    tokens.take(",")
            else:
                values.append(_block(tokens, schema, enums, field_kind, where))
        else:
            tokens.expect(":", where)
            values = []
            if tokens.take("["):
                while not tokens.take("]"):
                    values.append(_scalar(tokens, field_kind, where, enums))
                    tokens.take(",")
            else:
                values.append(_scalar(tokens, field_kind, where, enums))
        if isinstance(field_kind, tuple):                           # a map: entries merge, later keys win
            entries = out.setdefault(text, {})
            for entry in values:
                default = _default(field_kind[2])
                entries[entry.get("key", _default(field_kind[1]))] = entry.get("value", default)
        elif label == "repeated":
            out.setdefault(text, []).extend(values)
        else:
            if len(values) != 1:
                raise InputError(f"{tokens.source}, line {line}: {where} holds one value, got a list of "
                                 f"{len(values)}")
            if text in out:
                raise InputError(f"{tokens.source}, line {line}: {where} is set more than once; it holds one value")
            out[text] = values[0]
        if not tokens.take(","):
            tokens.take(";")


def _block(tokens: _Tokens, schema: Schema, enums, kind: Any, where: str) -> dict:
    token_kind, text, line = tokens.next(f"'{{' opening {where}")
    if token_kind != "symbol" or text not in "{<":
        raise InputError(f"{tokens.source}, line {line}, {where}: expected '{{' or '<', got {shown(text, 60)}")
    close = "}" if text == "{" else ">"
    if isinstance(kind, tuple):
        entry_schema = {"entry": [("key", kind[1], "optional"), ("value", kind[2], "optional")]}
        return _message(tokens, {**schema, **entry_schema}, enums, "entry", close, where)
    return _message(tokens, schema, enums, kind, close, where)


def parse(text: str, schema: Schema, root: str, enums: Mapping[str, Sequence[str]], source: str = "text") -> dict:
    """The message ``root`` in ``text``; :class:`~scwork.errors.InputError` names ``source``, line and field.

    >>> schema = {"P": [("x", "int", "optional"), ("tags", "string", "repeated"), ("kid", "P", "explicit")]}
    >>> parse('x: 3 tags: ["a", "b"] kid { x: 0x10 }  # comment', schema, "P", {})
    {'x': 3, 'tags': ['a', 'b'], 'kid': {'x': 16}}
    """
    return _message(_Tokens(text, source), schema, enums, root, None, "")


def _default(kind: Any) -> Any:
    return {"int": 0, "float": 0.0, "bool": False, "string": ""}.get(kind, None) if isinstance(kind, str) else None


def _to_float32(value: float) -> float:
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def _shortest_float(value: float) -> str:
    """``str(type_checkers.ToShortestFloat(value))`` of protobuf's printer (float32 fields)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    original = _to_float32(value)
    for precision in range(6, 12):
        rounded = float(f"{original:.{precision}g}")
        if _to_float32(rounded) == original:
            return str(rounded)
    return str(original)


def _escape(text: str) -> str:
    out = []
    for ch in text:
        if ch in "\"'\\":
            out.append("\\" + ch)
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _is_default(kind: str, value: Any, enums: Mapping[str, Sequence[str]]) -> bool:
    """Proto3 implicit presence: the value a field that is not written holds."""
    if kind.startswith("enum:"):
        return value in (enums[kind.split(":", 1)[1]][0], 0)
    if kind == "float":                  # -0.0 is written (its sign bit is set)
        return value == 0 and math.copysign(1.0, value) > 0
    return value == _default(kind)


def _value_text(kind: str, value: Any) -> str:
    if kind == "string":
        return _escape(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "float":
        return _shortest_float(float(value))
    return str(value)


def _checked_scalar(kind: str, value: Any, where: str, enums: Mapping[str, Sequence[str]]) -> Any:
    """``value`` as the writer prints it for a field of ``kind``, or ConfigError naming the field."""
    import numbers

    def refuse(what: str):
        raise ConfigError(f"{where} must be {what}, got {shown(value)}")

    if kind == "string":
        return value if isinstance(value, str) else refuse("a str")
    if kind == "bool":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        refuse("True or False")
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            refuse("a number")
        try:
            return float(value)
        except OverflowError:                    # an int past float64
            refuse("a number within the float range")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            refuse("an integer")
        if not _INT64[0] <= int(value) <= _INT64[1]:
            refuse("an integer within the int64 range")
        return int(value)
    names = enums[kind.split(":", 1)[1]]
    if isinstance(value, str) and value in names:
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and -2**31 <= int(value) < 2**31:
        return int(value)
    refuse(f"one of {', '.join(names)} (or an int32 enum number)")


def _checked_message(message: Any, schema: Schema, root: str, enums: Mapping[str, Sequence[str]],
                     where: str) -> dict:
    """A copy of ``message`` whose every value has its field's kind (ConfigError naming the field otherwise).

    Fields the schema does not have are refused rather than left out of the text.
    """
    if not isinstance(message, Mapping):
        raise ConfigError(f"{where or root} must be a dict of {root} fields, got {shown(message)}")
    fields = {f[0]: f for f in schema[root]}
    unknown = [k for k in message if k not in fields]
    if unknown:
        raise ConfigError(f"{where or root} has no field {shown(unknown[0])}; {root}'s fields are "
                          f"{', '.join(fields)}")
    out: dict[str, Any] = {}
    for name, (_, kind, label) in fields.items():
        if name not in message:
            continue
        value, at = message[name], f"{where}.{name}" if where else name
        if isinstance(kind, tuple):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{at} must be a dict (a map field), got {shown(value)}")
            entries = {_checked_scalar(kind[1], k, f"{at} key", enums):
                       _checked_message(v, schema, kind[2], enums, f"{at}[{k!r}]") if kind[2] in schema
                       else _checked_scalar(kind[2], v, f"{at}[{k!r}]", enums)
                       for k, v in value.items()}
            out[name] = entries
            continue
        if label == "repeated":
            if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
                raise ConfigError(f"{at} is repeated: it must be a list, got {shown(value)}")
            items = [(item, f"{at}[{i}]") for i, item in enumerate(value)]
        else:
            items = [(value, at)]
        checked = [_checked_message(item, schema, kind, enums, item_at) if kind in schema
                   else _checked_scalar(kind, item, item_at, enums) for item, item_at in items]
        out[name] = checked if label == "repeated" else checked[0]
    return out


def format_message(message: Mapping[str, Any], schema: Schema, root: str,
                   enums: Mapping[str, Sequence[str]] | None = None, indent: int = 0) -> str:
    """``message`` as ``text_format.MessageToString`` prints it.

    Every value is checked against its field's kind first: a value of the wrong type,
    an int past int64 or a field the schema does not have raises
    :class:`~scwork.errors.ConfigError` naming the field (nothing is printed that
    :func:`parse` would not read back).

    >>> schema = {"P": [("x", "int", "optional"), ("r", "float", "explicit"), ("m", ("map", "string", "bool"),
    ...           "optional")]}
    >>> print(format_message({"x": 0, "r": 0.1, "m": {"b": True, "a": False}}, schema, "P"), end="")
    r: 0.1
    m {
      key: "a"
    }
    m {
      key: "b"
      value: true
    }
    """
    enums = enums or {}
    return _format(_checked_message(message, schema, root, enums, ""), schema, root, enums, indent)


def _format(message: Mapping[str, Any], schema: Schema, root: str, enums: Mapping[str, Sequence[str]],
            indent: int) -> str:
    pad = "  " * indent
    lines = []
    for name, kind, label in schema[root]:
        if name not in message:
            continue
        value = message[name]
        if isinstance(kind, tuple):
            # A message value is written even when empty (it is present), as protobuf does.
            entry_schema = {**schema, "entry": [("key", kind[1], "optional"), ("value", kind[2], "optional")]}
            for key in sorted(value):
                inner = _format({"key": key, "value": value[key]}, entry_schema, "entry", enums, indent + 1)
                lines.append(f"{pad}{name} {{\n{inner}{pad}}}\n")
            continue
        for item in value if label == "repeated" else [value]:
            if kind in schema:
                lines.append(f"{pad}{name} {{\n{_format(item, schema, kind, enums, indent + 1)}{pad}}}\n")
            elif label != "optional" or not _is_default(kind, item, enums):
                lines.append(f"{pad}{name}: {_value_text(kind, item)}\n")
    return "".join(lines)
