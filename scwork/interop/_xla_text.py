"""XLA's text outside a dump folder: shapes, printed sizes, the TPU out-of-memory message.

Shared by :mod:`scwork.interop.xla_dump` (which re-exports the public names below):
bounded file reading, scanning of (tuple) shapes in HLO text, and
:func:`parse_oom_message`, the reader of the TPU compile-time out-of-memory text.
Documented in :mod:`scwork.interop.xla_dump`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from scwork._validate import shown
from scwork.errors import LayoutError, XlaDumpError
from scwork._validate import decimal_int
from scwork.layout import Shape, parse
from scwork.layout.tiles import DTYPES

__all__ = [
    "MAX_FILE_BYTES",
    "OomAllocation",
    "OomReport",
    "PaddingCheck",
    "parse_oom_message",
    "read_oom_message",
]

#: Largest file either reader opens (bytes); pass ``max_file_bytes`` to read bigger ones.
MAX_FILE_BYTES = 64 * 2**20
# Element types with no bytes and no layout (scwork.layout does not model them).
_NON_ARRAY_TYPES = ("token", "opaque")


def _check_max_bytes(max_bytes: object) -> None:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise XlaDumpError(f"max_file_bytes must be a positive int, got {max_bytes!r}")


def _read_text(path: Path, max_bytes: int) -> str:
    """The file's text, refused above ``max_bytes`` (a dump of a large model can be huge)."""
    too_big = "pass a larger max_file_bytes, or dump fewer modules (XLA_FLAGS=--xla_dump_hlo_module_re=NAME)"
    try:
        size = path.stat().st_size
        if size > max_bytes:  # refuse before reading anything
            raise XlaDumpError(f"file is {size:,} bytes, more than max_file_bytes={max_bytes:,}",
                               path=str(path), hint=too_big)
        with open(path, "rb") as handle:
            # Bounded even if the file grows meanwhile; never asks read() for more than the file
            # (a max_file_bytes of 2**64 would not fit the read size).
            data = handle.read(min(max_bytes, size) + 1)
    except OSError as error:
        raise XlaDumpError(f"cannot read: {error.strerror or error}", path=str(path)) from None
    if len(data) > max_bytes:
        raise XlaDumpError(f"file is more than max_file_bytes={max_bytes:,} bytes", path=str(path), hint=too_big)
    if len(data) > size:
        raise XlaDumpError("the file grew while it was read", path=str(path), hint="read it once XLA has finished")
    return data.decode("utf-8", errors="replace")


# ======================================================================================
# Shapes
# ======================================================================================
_ARRAY_HEAD = re.compile(r"[A-Za-z][A-Za-z0-9]*\[")


def _skip_blank(text: str, pos: int) -> int:
    """Past spaces and the ``/*index=5*/`` comments XLA puts inside long tuple shapes."""
    while pos < len(text):
        if text[pos] == " ":
            pos += 1
        elif text.startswith("/*", pos):
            end = text.find("*/", pos)
            pos = len(text) if end < 0 else end + 2
        else:
            break
    return pos


def _scan_shape(text: str, pos: int, index: tuple[int, ...] = ()) -> tuple[list, int]:
    """Scan one (possibly tuple) shape at ``pos``: ``([(tuple_index, leaf_text), ...], end)``."""
    if text.startswith("(", pos):
        leaves: list = []
        pos = _skip_blank(text, pos + 1)
        if text.startswith(")", pos):
            return leaves, pos + 1
        for element in range(1 << 20):
            sub, pos = _scan_shape(text, _skip_blank(text, pos), index + (element,))
            leaves += sub
            pos = _skip_blank(text, pos)
            if text.startswith(",", pos):
                pos += 1
            elif text.startswith(")", pos):
                return leaves, pos + 1
            else:
                raise ValueError(f"expected ',' or ')' at column {pos + 1} of the tuple shape")
        # A bound on the work, not a silent cut: past it the rest was once read as one more leaf.
        raise ValueError(f"a tuple shape of more than {1 << 20:,} elements (column {pos + 1})")
    head = _ARRAY_HEAD.match(text, pos)
    if head is None:
        raise ValueError(f"expected a shape such as f32[8,128]{{1,0}} at column {pos + 1}")
    end = text.find("]", head.end())
    if end < 0:
        raise ValueError(f"unclosed '[' at column {head.end()}")
    end += 1
    if text.startswith("{", end):
        depth = 0
        for stop in range(end, len(text)):
            depth += {"{": 1, "}": -1}.get(text[stop], 0)
            if depth == 0:
                end = stop + 1
                break
        else:
            raise ValueError(f"unclosed '{{' at column {end + 1}")
    return [(index, text[pos:end])], end


@lru_cache(maxsize=8192)
def _layout(text: str) -> Shape | None:
    """The scwork Shape of one array leaf (None for token/opaque); dumps repeat shapes a lot."""
    if text.split("[", 1)[0].lower() in _NON_ARRAY_TYPES:
        return None
    return parse(text)


def _shape_error(error: Exception, text: str, path: str, line: int) -> XlaDumpError:
    reason = getattr(error, "reason", str(error))
    return XlaDumpError(f"cannot parse shape {text!r}: {reason}", path=path, line=line,
                        hint="scwork.layout.parse must accept every shape of the dump; report the shape "
                             "if XLA accepts it, or read with errors='collect' to list all such shapes")


def _padding_of(shape: Shape | None) -> tuple[float, float]:
    """``(padded_bytes, unpadded_bytes)`` of a leaf (NaN when there is no array layout)."""
    if shape is None:
        return math.nan, math.nan
    return float(shape.padded_bytes), float(shape.unpadded_bytes)


# ======================================================================================
# TPU out-of-memory messages
# ======================================================================================
_SIZE = re.compile(r"^(\d+(?:\.(\d+))?)\s*([KMGTPE]?)(?:i?B)?$")
_UNITS = "KMGTPE"
_OOM_HEAD = re.compile(r"Ran out of memory in memory space (\w+)\.\s*Used (\S+) of (\S+) \w+\.\s*"
                       r"(?:Exceeded \w+ capacity by (\d+(?:\.\d+)?[KMGTPE]?B?))?")
_ENTRY = re.compile(r"(?:^|\s)(\d+)\.\s+Size:\s+(\S+)\s*$")
_UTILIZATION = re.compile(r"Unpadded \((\S+)\) Padded \((\S+)\)")
_FIELDS = (("label", "XLA label:"), ("operator", "Operator:"), ("shape_text", "Shape:"),
           ("unpadded_text", "Unpadded size:"), ("padding_text", "Extra memory due to padding:"),
           ("allocation_type", "Allocation type:"))


def _printed_bytes(text: str, path: str, line: int) -> tuple[float, float, float]:
    """``(value, low, high)`` bytes of a size XLA printed (``1.5K``, ``124.00M``, ``0B``).

    XLA's human-readable sizes divide by 1024 in whole steps and print 1 (K) or 2
    decimals, so the exact byte count lies in ``[low, high]``.
    """
    match = _SIZE.match(text.strip())
    if match is None or not match.group(1).isascii() or len(match.group(1)) > 40:
        raise XlaDumpError(f"cannot read size {shown(text, 60)}", path=path, line=line,
                           hint="sizes look like 512B, 1.5K, 124.00M, 2.00G")
    value, unit = float(match.group(1)), match.group(3)
    if not unit:
        return value, value, value
    scale = 1024.0 ** (_UNITS.index(unit) + 1)
    half = 0.5 * 10.0 ** -len(match.group(2) or "")
    return value * scale, (value - half) * scale, (value + half) * scale + scale / 1024


@dataclass(frozen=True)
class PaddingCheck:
    """scwork's layout model against one allocation of an out-of-memory message.

    Attributes
    ----------
    padded_bytes, unpadded_bytes, padding_bytes : int
        scwork's numbers for the printed shape.
    size_matches, unpadded_matches, padding_matches, expansion_matches : bool
        Whether each is within the rounding of XLA's printed number (a line the
        message leaves out counts as 0 padding and 1.0x).
    explanation : str
        For a mismatch, the cause scwork can see; empty otherwise.
    """

    padded_bytes: int
    unpadded_bytes: int
    padding_bytes: int
    size_matches: bool
    unpadded_matches: bool
    padding_matches: bool
    expansion_matches: bool
    explanation: str

    @property
    def matches(self) -> bool:
        """All four numbers agree."""
        return self.size_matches and self.unpadded_matches and self.padding_matches and self.expansion_matches


@dataclass(frozen=True)
class OomAllocation:
    """One entry of "Largest program allocations in <memory space>".

    Sizes are bytes as printed (``*_text``) and as numbers (``size_bytes``...: the
    printed value times its unit, exact only to the printed precision). A line the
    message leaves out is None (XLA omits the padding line when there is none).

    Open the shape in the layout explorer with ``LayoutExplorer(text=entry.shape_text)``:
    ``scwork.widgets.LayoutExplorer`` takes the shape *text* (its ``text`` trait), not a
    :class:`~scwork.layout.Shape`; ``str(entry.shape())`` is the canonical text.
    """

    rank: int
    size_text: str
    size_bytes: float
    shape_text: str | None = None
    unpadded_text: str | None = None
    unpadded_bytes: float | None = None
    padding_text: str | None = None
    padding_bytes: float | None = None
    expansion: float | None = None
    operator: str | None = None
    label: str | None = None
    allocation_type: str | None = None
    source: str = "<text>"
    line: int = 0

    def shape(self) -> Shape:
        """The printed shape as a :class:`scwork.layout.Shape`.

        Raises
        ------
        XlaDumpError
            The entry has no shape line, or scwork cannot parse it (source and line named).
        """
        if not self.shape_text:
            raise XlaDumpError(f"allocation {self.rank} has no Shape line", path=self.source, line=self.line,
                               hint="XLA prints no shape for non-array allocations (e.g. spill slots)")
        try:
            shape = _layout(self.shape_text)
        except LayoutError as error:
            raise _shape_error(error, self.shape_text, self.source, self.line) from None
        if shape is None:
            raise XlaDumpError(f"{self.shape_text!r} has no array layout", path=self.source, line=self.line)
        return shape

    def check(self) -> PaddingCheck:
        """Compare scwork's padded / unpadded bytes of :meth:`shape` with XLA's printed numbers."""
        shape = self.shape()
        padded, unpadded = shape.padded_bytes, shape.unpadded_bytes

        def inside(count: int, text: str) -> bool:
            _, low, high = _printed_bytes(text, self.source, self.line)
            return low <= count <= high

        size_ok = inside(padded, self.size_text)
        unpadded_ok = inside(unpadded, self.unpadded_text) if self.unpadded_text else True
        padding_ok = inside(padded - unpadded, self.padding_text) if self.padding_text else padded == unpadded
        ratio = padded / unpadded if unpadded else 1.0
        expansion_ok = abs(ratio - (self.expansion or 1.0)) <= 0.05 + 1e-9 if self.padding_text else padding_ok
        reasons = []
        if not size_ok and not shape.tiles and shape.num_elements:
            reasons.append("the message prints the shape without its tiling, so scwork sees no padding "
                           f"({padded:,} bytes) where XLA counts {self.size_text}")
        natural = shape.num_elements * math.ceil(DTYPES[shape.dtype][0] / 8)
        if not unpadded_ok and shape.element_size_in_bits and inside(natural, self.unpadded_text):
            reasons.append(f"XLA's 'Unpadded size' counts {shape.dtype}'s natural "
                           f"{math.ceil(DTYPES[shape.dtype][0] / 8)} byte(s) per element; scwork's unpadded_bytes "
                           f"counts E({shape.element_size_in_bits}) bits, so it calls the E() widening no padding")
        if (size_ok and unpadded_ok and padding_ok and expansion_ok) or reasons:
            explanation = "; ".join(reasons)
        else:
            explanation = "unexplained: scwork's layout model disagrees with XLA's numbers"
        return PaddingCheck(padded, unpadded, padded - unpadded, size_ok, unpadded_ok, padding_ok, expansion_ok,
                            explanation)


@dataclass(frozen=True)
class OomReport:
    """A parsed TPU out-of-memory message (build with :func:`parse_oom_message`).

    Attributes
    ----------
    memory_space : str or None
        ``"hbm"``, ``"vmem"``... (None when the text has no "Ran out of memory" line).
    used_text, capacity_text, exceeded_text : str or None
        As printed in the first line.
    hlo_temp_unpadded_text, hlo_temp_padded_text : str or None
        "HLO temp ... Unpadded (X) Padded (Y)" when printed.
    allocations : tuple of OomAllocation
    source : str
    """

    memory_space: str | None
    used_text: str | None
    capacity_text: str | None
    exceeded_text: str | None
    hlo_temp_unpadded_text: str | None
    hlo_temp_padded_text: str | None
    allocations: tuple[OomAllocation, ...]
    source: str = "<text>"

    def checks(self) -> list[tuple[OomAllocation, PaddingCheck]]:
        """:meth:`OomAllocation.check` of every allocation with a shape scwork parses
        (the others are in :meth:`unparsed`; entries without a shape line have nothing to check)."""
        return [(a, a.check()) for a in self.allocations if a.shape_text and _parses(a.shape_text)]

    def unparsed(self) -> list[tuple[OomAllocation, XlaDumpError]]:
        """Allocations whose printed shape scwork cannot parse, with the error naming the line."""
        found = []
        for entry in self.allocations:
            if entry.shape_text and not _parses(entry.shape_text):
                try:
                    entry.shape()
                except XlaDumpError as error:
                    found.append((entry, error))
        return found

    def mismatches(self) -> list[tuple[OomAllocation, PaddingCheck]]:
        """The checks where scwork's numbers differ from XLA's (findings about the layout model)."""
        return [(a, c) for a, c in self.checks() if not c.matches]

    def to_dataset(self):
        """One row per allocation (dim ``buffer``): XLA's printed numbers beside scwork's."""
        import xarray as xr

        rows = self.allocations
        checks = {a.rank: c for a, c in self.checks()}
        nan = math.nan
        num = lambda values: np.array([nan if v is None else float(v) for v in values])
        obj = lambda values: np.array([v or "" for v in values], dtype=object)
        scwork = {name: num(getattr(checks[a.rank], name) if a.rank in checks else None for a in rows)
                  for name in ("padded_bytes", "unpadded_bytes", "padding_bytes")}
        return xr.Dataset(
            {"size_bytes": ("buffer", num(a.size_bytes for a in rows),
                            {"long_name": "Size (as printed)", "units": "bytes"}),
             "unpadded_bytes": ("buffer", num(a.unpadded_bytes for a in rows),
                                {"long_name": "Unpadded size (as printed)", "units": "bytes"}),
             "padding_bytes": ("buffer", num(a.padding_bytes or (0.0 if a.unpadded_text else None) for a in rows),
                               {"long_name": "Extra memory due to padding (as printed)", "units": "bytes"}),
             "expansion": ("buffer", num(a.expansion for a in rows), {"units": "1"}),
             **{f"scwork_{k}": ("buffer", v, {"long_name": f"{k} of the shape (scwork.layout)", "units": "bytes"})
                for k, v in scwork.items()},
             "matches": ("buffer", np.array([a.rank in checks and checks[a.rank].matches for a in rows], dtype=bool),
                         {"long_name": "scwork agrees with every printed number", "units": "1"})},
            coords={"buffer": ("buffer", np.array([a.rank for a in rows], np.int64)),
                    "shape": ("buffer", obj(a.shape_text for a in rows)),
                    "operator": ("buffer", obj(a.operator for a in rows)),
                    "label": ("buffer", obj(a.label for a in rows)),
                    "allocation_type": ("buffer", obj(a.allocation_type for a in rows)),
                    "line": ("buffer", np.array([a.line for a in rows], np.int64))},
            attrs={"units": "bytes", "memory_space": self.memory_space or "", "source": self.source})


def _parses(text: str) -> bool:
    try:
        return _layout(text) is not None
    except LayoutError:
        return False


def parse_oom_message(text: str, *, source: str = "<text>") -> OomReport:
    """Parse the text of a TPU compile-time out-of-memory error.

    Accepts the message alone or inside a traceback or log (every line may carry a
    log prefix such as ``E0504 ... xla_util.cc:76]``); lines it does not know are
    skipped. Each allocation starts at ``N. Size: S`` and ends at the ``=====`` rule.

    Parameters
    ----------
    text : str
    source : str
        Name used in error messages (the file, for :func:`read_oom_message`).

    Returns
    -------
    OomReport

    Raises
    ------
    XlaDumpError
        No "Ran out of memory" line and no allocation entry, or a size that cannot
        be read (source and line named).
    """
    if not isinstance(text, str):
        raise XlaDumpError(f"text must be a str, got {type(text).__name__}", path=source)
    head = _OOM_HEAD.search(text)
    utilization = _UTILIZATION.search(text)
    entries: list[dict[str, Any]] = []
    lines_of: list[dict[str, int]] = []          # per entry: the line each field was read from
    for number, line in enumerate(text.splitlines(), 1):
        start = _ENTRY.search(line)
        if start:
            size, _, _ = _printed_bytes(start.group(2), source, number)
            rank = decimal_int(start.group(1), maximum=2**63 - 1)
            if rank is None:
                raise XlaDumpError(f"allocation number {shown(start.group(1), 30)} is not a plain number of at most "
                                   "19 digits", path=source, line=number)
            entries.append({"rank": rank, "size_text": start.group(2), "size_bytes": size,
                            "source": source, "line": number})
            lines_of.append({})
            continue
        if not entries or "_done" in entries[-1]:
            continue
        if re.search(r"^\s*={5,}\s*$|\]\s*={5,}\s*$", line):
            entries[-1]["_done"] = True
            continue
        for name, key in _FIELDS:
            at = line.find(key)
            if at >= 0 and (at == 0 or line[at - 1].isspace()):
                entries[-1][name] = line[at + len(key):].strip()
                lines_of[-1][name] = number
                break
    allocations = []
    for entry, field_lines in zip(entries, lines_of):
        entry.pop("_done", None)
        # A malformed size is reported at the line that holds it, not at the entry's first line.
        if "unpadded_text" in entry:
            entry["unpadded_bytes"] = _printed_bytes(entry["unpadded_text"], source, field_lines["unpadded_text"])[0]
        if "padding_text" in entry:
            at = field_lines["padding_text"]
            padding = re.match(r"^(\S+)\s*(?:\((\d+(?:\.\d+)?)x expansion\))?", entry["padding_text"])
            if padding is None:
                raise XlaDumpError("'Extra memory due to padding:' has no size", path=source, line=at,
                                   hint="the line reads 'Extra memory due to padding: 1.50M (1.0x expansion)'")
            entry["padding_text"] = padding.group(1)
            entry["padding_bytes"] = _printed_bytes(padding.group(1), source, at)[0]
            expansion = padding.group(2)
            if expansion and (not expansion.isascii() or len(expansion) > 40):
                raise XlaDumpError(f"cannot read the expansion {shown(expansion, 40)}", path=source, line=at)
            entry["expansion"] = float(expansion) if expansion else None
        allocations.append(OomAllocation(**entry))
    if head is None and not allocations:
        raise XlaDumpError("no 'Ran out of memory in memory space ...' line and no 'N. Size: ...' allocation",
                           path=source, hint="pass the whole error text of the failed TPU compilation")
    return OomReport(head.group(1) if head else None, head.group(2) if head else None,
                     head.group(3) if head else None, head.group(4) if head else None,
                     utilization.group(1) if utilization else None, utilization.group(2) if utilization else None,
                     tuple(allocations), source)


def read_oom_message(path: str | os.PathLike, *, max_file_bytes: int = MAX_FILE_BYTES) -> OomReport:
    """:func:`parse_oom_message` of a file (e.g. a saved log), refused above ``max_file_bytes``."""
    _check_max_bytes(max_file_bytes)
    file = Path(path)
    return parse_oom_message(_read_text(file, max_file_bytes), source=str(file))
