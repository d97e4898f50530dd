"""Tokenizer and recursive-descent parser for XLA shape-with-layout text.

The grammar follows openxla/xla ``xla/hlo/parser/hlo_parser.cc``
(``HloParserImpl::ParseShape``, ``ParseDimensionSizes``, ``ParseLayout``,
``ParseTiles``, ``ParseSplitConfigs``, ``ParseLayoutIntAttribute``) and the
printer ``Layout::Print`` in ``xla/layout.cc``::

    shape      ::= dtype '[' (dim (',' dim)*)? ']' layout?
    dim        ::= INT | '<=' INT | '?'
    layout     ::= '{' (INT (',' INT)*)? (':' attributes)? '}'
    attributes ::= ('D' '(' level (',' level)* ')')? ('T' tile+)? ('L' '(' INT ')')? ('#' '(' dtype ')')?
                   ('*' '(' dtype ')')? ('E' '(' INT ')')? ('S' '(' INT ')')?
                   ('SC' split+)? ('P' '(' shape ')')? ('M' '(' INT ')')?
    tile       ::= '(' (INT | '*') (',' (INT | '*'))* ')'
    level      ::= ('D' | 'C' | 'S' | 'H') '+'? '~'?
    split      ::= '(' INT ':' (INT (',' INT)*)? ')'

``D(...)`` are the sparse dimension level types of XLA versions with sparse layouts
(``Layout::ToString`` prints them first: ``D`` dense, ``C`` compressed, ``S``
singleton, ``H`` loose compressed; ``+`` marks a non-unique and ``~`` an unordered
dimension).

Differences from XLA's lexer, on purpose: the element type is
case-insensitive (``F32`` as written in the XLA tiled-layout doc), whitespace is
allowed between tokens, and a misplaced attribute gets a specific message
instead of a generic "expects '}'".

This module only checks *syntax*. It returns plain Python values plus the
character offset of every piece (:class:`ParsedShape`), and
:func:`scwork.layout.shape.parse` lets :class:`~scwork.layout.shape.Shape`
check the meaning (permutation, tile sizes, ...), using those offsets to say
where a problem is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from scwork._validate import INT64_MAX, decimal_int
from scwork.errors import LayoutError

__all__ = ["ATTRIBUTE_ORDER", "DIM_LEVEL_TYPES", "ParsedShape", "Token", "parse_shape_text", "tokenize"]

#: Layout attributes in the order XLA prints and parses them (``Layout::Print``).
ATTRIBUTE_ORDER: tuple[str, ...] = ("D", "T", "L", "#", "*", "E", "S", "SC", "P", "M")

#: Sparse dimension level types of ``D(...)`` (``DimLevelTypeAbbrev`` in xla/layout.cc).
DIM_LEVEL_TYPES: tuple[str, ...] = ("D", "C", "S", "H")

_ATTRIBUTE_MEANING = {
    "D": "dimension level types", "T": "tiles", "L": "tail padding alignment in elements",
    "#": "index primitive type",
    "*": "pointer primitive type", "E": "element size in bits", "S": "memory space",
    "SC": "split configs", "P": "physical shape", "M": "dynamic shape metadata prefix bytes",
}

_PUNCTUATION = set("[]{}(),:*#?+~")

#: The most negative int64, a number the text may hold (a layout integer's lower bound).
INT64_MIN = -INT64_MAX - 1


@dataclass(frozen=True)
class Token:
    """One lexical token: ``kind`` is ``"int"``, ``"ident"``, ``"end"`` or the punctuation itself."""

    kind: str
    text: str
    position: int
    value: int = 0


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, ending with an ``"end"`` token.

    Raises
    ------
    LayoutError
        On a character that cannot start a token or a malformed number.

    Examples
    --------
    >>> [t.text for t in tokenize("f32[<=3]{0:T(*,2)}")]
    ['f32', '[', '<=', '3', ']', '{', '0', ':', 'T', '(', '*', ',', '2', ')', '}', '']
    """
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char.isspace():
            i += 1
            continue
        start = i
        if char.isdigit() or (char == "-" and i + 1 < n and text[i + 1].isdigit()):
            # Read the whole alphanumeric run so "3.5", "1e3" or "12ab" are
            # reported as one bad number, not as a number followed by junk.
            i += 1
            while i < n and (text[i].isalnum() or text[i] in "._"):
                i += 1
            word = text[start:i]
            digits = word[1:] if word.startswith("-") else word
            if not (digits.isascii() and digits.isdigit()):
                raise LayoutError(f"malformed number {word!r}: expected a whole decimal number",
                                  text, start, hint="write sizes as plain integers such as 128")
            # decimal_int counts the digits (leading zeros dropped) before int(), which refuses
            # texts over 4,300 digits. It bounds the magnitude, and int64 reaches one further
            # below zero than above (XLA's lexer reads -2**63 too), so the top is checked here.
            value = decimal_int(word, maximum=-INT64_MIN)
            if value is None or value > INT64_MAX:
                shown = word if len(word) <= 40 else f"{word[:20]}... ({len(digits)} digits)"
                raise LayoutError(f"number {shown} does not fit in a signed 64-bit integer", text, start)
            tokens.append(Token("int", word, start, value))
        elif char.isalpha() or char == "_":
            i += 1
            while i < n and (text[i].isalnum() or text[i] == "_"):
                i += 1
            tokens.append(Token("ident", text[start:i], start))
        elif char == "<":
            if text.startswith("<=", i):
                tokens.append(Token("<=", "<=", start))
                i += 2
            else:
                raise LayoutError("expected '<=' (a bounded dynamic dimension such as <=8)", text, start)
        elif char in _PUNCTUATION:
            tokens.append(Token(char, char, start))
            i += 1
        else:
            raise LayoutError(f"unexpected character {char!r}", text, start,
                              hint="a shape looks like f32[3,5]{1,0:T(2,2)}")
    tokens.append(Token("end", "", n))
    return tokens


@dataclass
class ParsedShape:
    """Raw fields of one parsed shape, plus where each piece starts in the text.

    ``positions`` maps the keys :class:`~scwork.layout.shape.Shape` validation
    uses to name a piece (``("dim", i)``, ``("m2m", i)``, ``("tile", level, j)``,
    ``("L",)``, ...) to its 0-based character offset.
    """

    fields: dict[str, Any]
    positions: dict[tuple, int] = field(default_factory=dict)
    physical: "ParsedShape | None" = None


class _Parser:
    """Recursive-descent parser over the token list (one instance per text)."""

    def __init__(self, text: str, known_dtype: Callable[[str], bool], suggest: Callable[[str], list[str]]):
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.known_dtype = known_dtype
        self.suggest = suggest

    # -- token helpers -------------------------------------------------------------
    @property
    def token(self) -> Token:
        return self.tokens[self.index]

    def advance(self) -> Token:
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def error(self, reason: str, position: int | None = None, hint: str | None = None) -> LayoutError:
        return LayoutError(reason, self.text, self.token.position if position is None else position, hint)

    def describe(self, token: Token) -> str:
        return "the end of the text" if token.kind == "end" else repr(token.text)

    def expect(self, kind: str, what: str) -> Token:
        if self.token.kind != kind:
            raise self.error(f"expected {what}, found {self.describe(self.token)}")
        return self.advance()

    def expect_int(self, what: str) -> Token:
        return self.expect("int", what)

    # -- grammar ---------------------------------------------------------------------
    def parse_top(self) -> ParsedShape:
        if self.token.kind == "end":
            raise self.error("empty shape text", hint="a shape looks like f32[3,5]{1,0:T(2,2)}")
        parsed = self.parse_shape(nested=False)
        if self.token.kind != "end":
            raise self.error(f"unexpected {self.describe(self.token)} after the end of the shape",
                             hint="remove the trailing text")
        return parsed

    def parse_shape(self, nested: bool) -> ParsedShape:
        positions: dict[tuple, int] = {}
        start = self.token
        positions[("dtype",)] = start.position
        if start.kind == "(":
            raise self.error("tuple shapes are not supported; give one array shape")
        if start.kind != "ident":
            raise self.error(f"expected an element type such as f32, found {self.describe(start)}")
        dtype = start.text.lower()
        if not self.known_dtype(dtype):
            close = self.suggest(dtype)
            hint = f"did you mean {', '.join(close)}?" if close else "element types look like f32, bf16, s8, pred"
            raise self.error(f"unknown element type {start.text!r}", start.position, hint)
        self.advance()

        open_square = self.expect("[", f"'[' after the element type {dtype}")
        positions[("dims",)] = open_square.position
        dims: list[int] = []
        dynamic: list[bool] = []
        if self.token.kind != "]":
            while True:
                is_dynamic = False
                token = self.token
                if token.kind == "?":
                    raise self.error("unbounded dynamic dimension '?' has no static layout",
                                     hint="give a bound instead, e.g. <=128")
                if token.kind == "<=":
                    is_dynamic = True
                    self.advance()
                size = self.expect_int("a dimension size")
                positions[("dim", len(dims))] = token.position
                dims.append(size.value)
                dynamic.append(is_dynamic)
                if self.token.kind == ",":
                    self.advance()
                    continue
                break
        if self.token.kind != "]":
            raise self.error(f"expected ',' or ']' to close the dimension list opened at position "
                             f"{open_square.position}, found {self.describe(self.token)}")
        self.advance()

        fields: dict[str, Any] = {"dtype": dtype, "dims": tuple(dims), "dynamic_dims": tuple(dynamic)}
        parsed = ParsedShape(fields, positions)
        if self.token.kind == "{":
            self.parse_layout(parsed, nested)
        return parsed

    def parse_layout(self, parsed: ParsedShape, nested: bool) -> None:
        positions = parsed.positions
        open_brace = self.advance()
        positions[("layout",)] = open_brace.position
        positions[("m2m",)] = self.token.position
        minor_to_major: list[int] = []
        if self.token.kind == "int":
            while True:
                entry = self.expect_int("a dimension number")
                positions[("m2m", len(minor_to_major))] = entry.position
                minor_to_major.append(entry.value)
                if self.token.kind != ",":
                    break
                self.advance()
        parsed.fields["minor_to_major"] = tuple(minor_to_major)
        if self.token.kind == ":":
            self.advance()
            self.parse_attributes(parsed, nested)
        if self.token.kind != "}":
            found = self.describe(self.token)
            raise self.error(f"expected '}}' to close the layout opened at position {open_brace.position}, "
                             f"found {found}")
        self.advance()

    def attribute_name(self) -> str | None:
        token = self.token
        if token.kind in ("#", "*"):
            return token.kind
        if token.kind == "ident":
            return token.text
        return None

    def parse_attributes(self, parsed: ParsedShape, nested: bool) -> None:
        fields, positions = parsed.fields, parsed.positions
        last_rank = -1
        last_name = ""
        while (name := self.attribute_name()) is not None:
            token = self.token
            if name not in ATTRIBUTE_ORDER:
                if name.upper() in ATTRIBUTE_ORDER:
                    raise self.error(f"unknown layout attribute {name!r}",
                                     hint=f"attribute names are upper case: {name.upper()}")
                raise self.error(f"unknown layout attribute {name!r}",
                                 hint="attributes are " + ", ".join(ATTRIBUTE_ORDER) + ", in that order")
            rank = ATTRIBUTE_ORDER.index(name)
            if rank == last_rank:
                raise self.error(f"duplicate layout attribute {name!r}")
            if rank < last_rank:
                raise self.error(f"layout attribute {name!r} must come before {last_name!r}",
                                 hint="XLA reads attributes in the order " + ", ".join(ATTRIBUTE_ORDER))
            last_rank, last_name = rank, name
            self.advance()
            positions[(name,)] = self.token.position
            if name == "D":
                fields["dim_level_types"] = self.parse_dim_level_types(positions)
            elif name == "T":
                fields["tiles"] = self.parse_tiles(positions)
            elif name in ("L", "E", "S", "M"):
                fields[_INT_ATTRIBUTE_FIELD[name]] = self.parse_int_attribute(name, positions)
            elif name in ("#", "*"):
                fields[_TYPE_ATTRIBUTE_FIELD[name]] = self.parse_type_attribute(name, positions)
            elif name == "SC":
                fields["split_configs"] = self.parse_split_configs(positions)
            else:  # "P"
                if nested:
                    raise self.error("a physical shape P(...) cannot itself have a physical shape",
                                     token.position)
                self.expect("(", "'(' after P")
                positions[("P",)] = self.token.position
                parsed.physical = self.parse_shape(nested=True)
                self.expect(")", "')' to close the physical shape P(...)")

    def parse_dim_level_types(self, positions: dict[tuple, int]) -> tuple[str, ...]:
        """``D(level, ...)``: each level a letter of :data:`DIM_LEVEL_TYPES`, then ``+``
        (not unique) and ``~`` (not ordered), in that order, as XLA prints them."""
        self.expect("(", "'(' after D")
        levels: list[str] = []
        while True:
            token = self.token
            if token.kind != "ident" or token.text not in DIM_LEVEL_TYPES:
                raise self.error(f"expected a dimension level type ({', '.join(DIM_LEVEL_TYPES)}), "
                                 f"found {self.describe(token)}",
                                 hint="D(D,C+,S~): D dense, C compressed, S singleton, H loose compressed; "
                                      "'+' not unique, '~' not ordered")
            positions[("D", len(levels))] = token.position
            level = self.advance().text
            if self.token.kind == "+":
                level += self.advance().text
            if self.token.kind == "~":
                level += self.advance().text
            levels.append(level)
            if self.token.kind != ",":
                break
            self.advance()
        self.expect(")", "',' or ')' in D(...)")
        return tuple(levels)

    def parse_tiles(self, positions: dict[tuple, int]) -> tuple[tuple[int, ...], ...]:
        tiles: list[tuple[int, ...]] = []
        if self.token.kind != "(":
            raise self.error(f"expected '(' to start a tile after T, found {self.describe(self.token)}")
        while self.token.kind == "(":
            level = len(tiles)
            open_paren = self.advance()
            positions[("tile", level)] = open_paren.position
            entries: list[int] = []
            if self.token.kind != ")":
                while True:
                    token = self.token
                    if token.kind == "*":
                        self.advance()
                        value = -1  # Tile.COMBINE: merge into the next more-minor dimension
                    elif token.kind == "int":
                        value = self.advance().value
                        if value <= 0:
                            # Checked here because -1 is also how '*' is stored.
                            raise self.error(f"tile sizes must be positive, got {value}", token.position,
                                             "write '*' to combine a dimension with the next one")
                    else:
                        raise self.error(f"expected a tile size or '*', found {self.describe(token)}")
                    positions[("tile", level, len(entries))] = token.position
                    entries.append(value)
                    if self.token.kind != ",":
                        break
                    self.advance()
            if self.token.kind != ")":
                raise self.error(f"expected ',' or ')' to close the tile opened at position "
                                 f"{open_paren.position}, found {self.describe(self.token)}")
            self.advance()
            tiles.append(tuple(entries))
        return tuple(tiles)

    def parse_int_attribute(self, name: str, positions: dict[tuple, int]) -> int:
        meaning = _ATTRIBUTE_MEANING[name]
        self.expect("(", f"'(' after {name} ({meaning})")
        positions[(name,)] = self.token.position
        value = self.expect_int(f"an integer {meaning}").value
        self.expect(")", f"')' to close {name}(...)")
        return value

    def parse_type_attribute(self, name: str, positions: dict[tuple, int]) -> str:
        meaning = _ATTRIBUTE_MEANING[name]
        self.expect("(", f"'(' after {name} ({meaning})")
        positions[(name,)] = self.token.position
        token = self.expect("ident", f"an element type for the {meaning}, such as u32")
        dtype = token.text.lower()
        if not self.known_dtype(dtype):
            close = self.suggest(dtype)
            raise self.error(f"unknown element type {token.text!r}", token.position,
                             f"did you mean {', '.join(close)}?" if close else None)
        self.expect(")", f"')' to close {name}(...)")
        return dtype

    def parse_split_configs(self, positions: dict[tuple, int]) -> tuple[tuple[int, tuple[int, ...]], ...]:
        configs: list[tuple[int, tuple[int, ...]]] = []
        if self.token.kind != "(":
            raise self.error(f"expected '(' to start a split config after SC, found {self.describe(self.token)}")
        while self.token.kind == "(":
            number = len(configs)
            positions[("SC", number)] = self.advance().position
            dimension = self.expect_int("the split dimension number")
            positions[("SC", number, "dim")] = dimension.position
            self.expect(":", "':' between the split dimension and its split indices")
            indices: list[int] = []
            if self.token.kind != ")":
                while True:
                    index = self.expect_int("a split index")
                    positions[("SC", number, len(indices))] = index.position
                    indices.append(index.value)
                    if self.token.kind != ",":
                        break
                    self.advance()
            self.expect(")", "',' or ')' in the split config")
            configs.append((dimension.value, tuple(indices)))
        return tuple(configs)


_INT_ATTRIBUTE_FIELD = {
    "L": "tail_padding_alignment",
    "E": "element_size_in_bits",
    "S": "memory_space",
    "M": "dynamic_shape_metadata_prefix_bytes",
}
_TYPE_ATTRIBUTE_FIELD = {"#": "index_primitive_type", "*": "pointer_primitive_type"}


def parse_shape_text(text: str, known_dtype: Callable[[str], bool],
                     suggest: Callable[[str], list[str]]) -> ParsedShape:
    """Parse ``text`` into a :class:`ParsedShape` (syntax only).

    ``known_dtype`` says whether a lower-case element type exists and
    ``suggest`` proposes close names for an unknown one; both come from
    :mod:`scwork.layout.shape`, which owns the element-type table.
    """
    if not isinstance(text, str):
        raise LayoutError(f"a shape must be given as text, not {type(text).__name__}")
    return _Parser(text, known_dtype, suggest).parse_top()
