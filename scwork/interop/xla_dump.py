"""What XLA itself says about memory: an ``--xla_dump_to`` folder and the TPU OOM text.

Two readers, both checked against scwork's layout model (:mod:`scwork.layout`):

:func:`read_xla_dump` reads a folder written with ``XLA_FLAGS=--xla_dump_to=DIR``. For
every module ``module_NNNN.<name>`` it reads the files XLA writes after optimization
(names as the CPU backend of jax 0.12 writes them; other backends only change the
stage word, e.g. ``tpu_after_optimizations``):

================================================== =============================================
file                                               what scwork takes from it
================================================== =============================================
``*after_optimizations.txt``                       every instruction of every computation, its
                                                   shape parsed by :func:`scwork.layout.parse`
                                                   (tuples expanded, one row per array leaf)
``*after_optimizations-buffer-assignment.txt``     allocations (size, kind: parameter,
                                                   constant, output, temp...) and the values in
                                                   each, with offset, size and shape
``*-buffer-assignment-values.txt``                 each value's uses (live ranges when the
                                                   live-range file is missing)
``*-live-range.txt``                               ``HloLiveRange``: the schedule, each value's
                                                   ``start-end`` and XLA's own peak
``*-memory-usage-report.txt``                      total bytes and the per-allocation table
================================================== =============================================

Older XLA versions write the live ranges and values inside the buffer-assignment file;
every section is recognised in whichever of these files it appears. Live ranges come
from ``HloLiveRange`` (a value is live at schedule times ``start..end``, both
included, as XLA's own peak report counts them); without it, from the entry
computation's order (``is_scheduled=true`` prints it in schedule order) and each
value's last use. Lines these readers do not use (metadata tables, stack-trace
breakdowns) are skipped on purpose; lines that look like a section they read but do
not parse raise :class:`~scwork.errors.XlaDumpError` naming file and line.

Each buffer (an XLA *value*: one array an instruction defines) carries XLA's size and
scwork's ``padded_bytes`` / ``unpadded_bytes`` of its layout, so ``padding_bytes`` is
what tiling costs, and ``layout_matches_size`` says whether scwork's layout model
gives XLA's size. :meth:`HloModuleDump.timeline` turns the module into a
:class:`MeasuredTimeline`: the same kind of object as the model's
:class:`scwork.memory.Timeline` (its :class:`~scwork.memory.timeline.Event` and
:class:`~scwork.memory.timeline.Interval`, ``usage()``, ``live_at_peak()``...), with
one event per scheduled instruction and the XLA allocation kind as category.

:func:`parse_oom_message` reads the text of a TPU compile-time out-of-memory error
("Ran out of memory in memory space hbm ... Largest program allocations in hbm: ...")
into :class:`OomAllocation` rows whose :meth:`~OomAllocation.shape` opens in
``LayoutExplorer`` and whose :meth:`~OomAllocation.check` compares scwork's padding
with XLA's printed numbers.

Drawing the measured timeline beside the model
----------------------------------------------
``MemoryTimeline`` draws ``report.timeline``: ``usage_by_category`` stacked per event,
the intervals of ``live_at_peak()`` as a Gantt chart. A :class:`MeasuredTimeline` has
the same attributes and methods, so the same drawing code applies with two changes:
categories are ``timeline.categories`` (XLA allocation kinds) instead of
:data:`scwork.memory.CATEGORIES`, and events are scheduled instructions whose
``start_s``/``end_s`` count schedule steps (a dump has no time). Put the two charts
side by side on their own x ranges; compare ``peak_bytes`` and ``live_at_peak()``.

Where scwork's numbers and XLA's differ
---------------------------------------
Checked on the messages quoted in ``tests/interop/data`` (each names its public
issue thread) and on a real CPU dump:

- CPU dumps: scwork's ``padded_bytes`` equals XLA's size of every array value.
- TPU messages with tiled shapes (``T(8,128)``, ``T(4,128)(2,1)``...): scwork gives
  XLA's Size, Unpadded size, padding and expansion.
- ``E(bits)`` wider than the type (``pred[...]{...:T(8,128)E(32)}``): XLA's
  "Unpadded size" counts the type's natural byte per element, scwork's
  ``unpadded_bytes`` counts ``E`` bits, so scwork reports no padding where XLA reports
  4x; the Size agrees.
- vmem messages print shapes without their tiling (``f32[128,6]{1,0}`` for a
  64.0K buffer): scwork cannot recover the padding from such text.
- XLA's printed peak time (``Live ranges at T (peak)``) is not always the time of
  the largest total of its own listing (see :class:`MeasuredTimeline`).

:meth:`OomAllocation.check` names the first two causes in ``explanation``.

Limits: files larger than :data:`MAX_FILE_BYTES` (64 MiB) are refused unless
``max_file_bytes`` is raised; the whole of a file is read into memory.

Examples
--------
A dump (run the program with ``XLA_FLAGS=--xla_dump_to=/tmp/dump``):

>>> dump = read_xla_dump("/tmp/dump", modules="^jit_step$")   # doctest: +SKIP
>>> module = dump.module("jit_step")                          # doctest: +SKIP
>>> module.buffers_dataset()[["bytes", "padding_bytes"]]      # doctest: +SKIP
>>> timeline = module.timeline(capacity_bytes=16 * 2**30)     # doctest: +SKIP
>>> timeline.peak_bytes, [iv.name for iv in timeline.live_at_peak()][:3]  # doctest: +SKIP

An out-of-memory message:

>>> text = '''Ran out of memory in memory space hbm. Used 9.08G of 7.48G hbm. Exceeded hbm capacity by 1.60G.
...   Largest program allocations in hbm:
...   1. Size: 124.00M
...      Shape: f32[512,245,256]{2,1,0:T(8,128)}
...      Unpadded size: 122.50M
...      Extra memory due to padding: 1.50M (1.0x expansion)
...      Allocation type: HLO temp
...      =========================='''
>>> report = parse_oom_message(text)
>>> report.memory_space, report.allocations[0].shape().padded_bytes
('hbm', 130023424)
>>> report.allocations[0].check().matches
True
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scwork._validate import shown
from scwork.errors import LayoutError, XlaDumpError
from scwork._validate import decimal_int
from scwork.interop._xla_text import (
    MAX_FILE_BYTES,
    OomAllocation,
    OomReport,
    PaddingCheck,
    _check_max_bytes,
    _layout,
    _padding_of,
    _read_text,
    _scan_shape,
    _shape_error,
    parse_oom_message,
    read_oom_message,
)
from scwork.layout import Shape
from scwork.memory.timeline import Event, Interval, Timeline

__all__ = [
    "ALLOCATION_KINDS",
    "MAX_FILE_BYTES",
    "MAX_SCHEDULE_STEPS",
    "Allocation",
    "BufferValue",
    "HloInstruction",
    "HloModuleDump",
    "MeasuredTimeline",
    "OomAllocation",
    "OomReport",
    "PaddingCheck",
    "XlaDump",
    "parse_oom_message",
    "read_oom_message",
    "read_xla_dump",
]

#: Most schedule steps :meth:`HloModuleDump.timeline` builds events for (one Python object each):
#: 2**22, far past any real schedule; a larger count comes from a cut or edited file.
MAX_SCHEDULE_STEPS = 2**22

#: Categories of measured buffers: XLA's allocation kinds, in drawing order.
ALLOCATION_KINDS = ("parameter", "constant", "output", "temp", "preallocated-temp", "thread-local")
_FILE = re.compile(r"^module_(\d+)\.([^.]+)\.(.*after_optimizations)"
                   r"(-buffer-assignment-values|-buffer-assignment|-live-range|-memory-usage-report)?\.txt$")


# ======================================================================================
# Dump records
# ======================================================================================
@dataclass(frozen=True)
class HloInstruction:
    """One instruction of an after-optimizations HLO module.

    Attributes
    ----------
    name, opcode, computation : str
    is_entry, is_root : bool
        In the entry computation; the computation's ROOT.
    shape_text : str
        The whole shape as printed (a tuple for multi-output instructions).
    leaves : tuple of (tuple_index, text, Shape or None)
        Every array of the shape; ``Shape`` is None for token/opaque leaves and for
        leaves scwork could not parse (read with ``errors="collect"``).
    path : str
    line : int
        1-based line in ``path``.
    """

    name: str
    opcode: str
    computation: str
    is_entry: bool
    is_root: bool
    shape_text: str
    leaves: tuple
    path: str
    line: int


@dataclass(frozen=True)
class Allocation:
    """One buffer-assignment allocation: a block of memory values share.

    ``kind`` is one of :data:`ALLOCATION_KINDS` (``maybe-live-out`` is ``"output"``);
    ``flags`` keeps XLA's words; ``parameter`` is the entry parameter number or None.
    """

    index: int
    size: int
    kind: str
    flags: tuple[str, ...]
    color: int
    parameter: int | None
    path: str
    line: int


@dataclass
class BufferValue:
    """One XLA value (an array an instruction defines) placed in an allocation.

    Attributes
    ----------
    id : int
        XLA's value id.
    name : str
        Defining instruction; ``index`` is its tuple index (``"{}"`` for non-tuples).
    allocation, offset, bytes : int
        Where it lives and XLA's size.
    shape_text : str
    shape : Shape or None
        scwork's parse (None for tuples, tokens and unparsed shapes).
    start, end : int
        Schedule times it is live, both included (-1 when unknown).
    uses : tuple of str
        Using instructions (from the values file), for fallback live ranges.
    """

    id: int
    name: str
    index: str
    allocation: int
    offset: int
    bytes: int
    shape_text: str
    shape: Shape | None
    path: str
    line: int
    start: int = -1
    end: int = -1
    uses: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``name`` plus the tuple index when there is one (``fusion{1}``)."""
        return self.name if self.index == "{}" else self.name + self.index


_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\b.*\{\s*$")
# A computation ends at its "}"; XLA's HloComputation::Print adds the execution thread of
# a computation off the main thread (', execution_thread="sparsecore"' for SparseCore
# offloads) and, with print_name_after_closing_brace, ' // name'.
_COMPUTATION_END = re.compile(r'^\}(?:, execution_thread="[^"]*")?(?: // [\w.\-]+)?$')
_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"\s*([\w\-]+)\(")
_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):\s*$")
_VALUE_LINE = re.compile(r"^\s*value:\s+<(\d+) ([^\s{>]+)(\{[0-9,]*\})?[^>]*>\s+\(size=(\d+),offset=(\d+)\):\s*(.*)$")
_VALUE_HEAD = re.compile(r"^<(\d+) ([^\s{>]+)(\{[0-9,]*\})?[^>]*>\s*$")
_LIVE_MAX = re.compile(r"^HloLiveRange \(max (\d+)\):\s*$")
_SEQUENCE = re.compile(r"^\s+(\d+):([\w.\-]+)\s*$")
_RANGE = re.compile(r"^\s+([\w.\-]+)(\{[0-9,]*\}):(\d+)-(\d+)\s*$")
_PEAK_HEAD = re.compile(r"^\s+Live ranges at (\d+) \(peak\):\s*$")
_PEAK_ROW = re.compile(r"^\s+([\w.\-]+\{[0-9,]*\}): (\d+) bytes \(cumulative: (\d+) bytes\)\s*$")
_USE = re.compile(r"^  ([\w.\-]+), operand \d+")
_POSITION = re.compile(r"^  ([\w.\-]+)(?: \{[0-9,]*\})?\s*$")
_TOTAL = re.compile(r"^Total bytes(?: used)?: (\d+)\b")
_REPORT_ROW = re.compile(r"^\s*([^;]+);\s*([^;]+);\s*(\d+);\s*(\d+);\s*(.*)$")


def _number(text: str, what: str, path: str, line: int | None) -> int:
    """A count or size of a dump line as an int that fits int64 (XLA prints int64 values), else XlaDumpError.

    ``line`` is None for a number of the file's name (the module number)."""
    value = decimal_int(text)
    if value is None:
        raise XlaDumpError(f"{what} {shown(text, 30)} is not a number that fits int64 (XLA writes int64 values)",
                           path=path, line=line, hint="the file is cut or edited; dump it again")
    return value


class HloModuleDump:
    """Everything one module's dump files say (build with :func:`read_xla_dump`).

    Attributes
    ----------
    id : int
        ``NNNN`` of ``module_NNNN``.
    name : str
    files : dict of str to Path
        ``"hlo"``, ``"buffer-assignment"``, ``"buffer-assignment-values"``,
        ``"live-range"``, ``"memory-usage-report"`` (those present).
    instructions : tuple of HloInstruction
    allocations : tuple of Allocation
    values : tuple of BufferValue
    sequence : tuple of str
        Scheduled instructions (HloLiveRange's, else the entry computation's order).
    schedule_end : int or None
        HloLiveRange's ``max``: the time live-out values end at.
    live_range_source : {"HloLiveRange", "last use", None}
    xla_peak_time, xla_peak_bytes : int or None
        XLA's own "Live ranges at T (peak)" and its last cumulative bytes.
    total_bytes : int or None
        "Total bytes used" as XLA printed it.
    memory_report : list of dict
        Rows of the memory-usage report (``block``, ``size``, ``offset``,
        ``used_by_n_values``, ``shapes``).
    problems : list of XlaDumpError
        Shapes scwork could not parse (only with ``errors="collect"``).
    """

    def __init__(self, id: int, name: str, files: dict[str, Path], *, max_file_bytes: int, errors: str):
        self.id, self.name, self.files = id, name, dict(files)
        self.instructions: tuple[HloInstruction, ...] = ()
        self.allocations: tuple[Allocation, ...] = ()
        self.values: tuple[BufferValue, ...] = ()
        self.sequence: tuple[str, ...] = ()
        self.schedule_end: int | None = None
        self.live_range_source: str | None = None
        self.xla_peak_time: int | None = None
        self.xla_peak_bytes: int | None = None
        self.total_bytes: int | None = None
        self.memory_report: list[dict] = []
        self.problems: list[XlaDumpError] = []
        self._errors = errors
        self._ranges: dict[tuple[str, str], tuple[int, int]] = {}
        self._uses: dict[tuple[str, str], tuple[str, ...]] = {}
        self._positions: dict[tuple[str, str], tuple[str, ...]] = {}
        if "hlo" in files:
            self._read_hlo(files["hlo"], max_file_bytes)
        for kind in ("buffer-assignment", "buffer-assignment-values", "live-range", "memory-usage-report"):
            if kind in files:
                self._read_sections(files[kind], max_file_bytes)
        self._resolve_live_ranges()

    # -- reading -----------------------------------------------------------------------
    def _problem(self, error: XlaDumpError) -> None:
        if self._errors == "raise":
            raise error
        self.problems.append(error)

    def _leaf_shape(self, text: str, path: str, line: int) -> Shape | None:
        try:
            return _layout(text)
        except LayoutError as error:
            self._problem(_shape_error(error, text, path, line))
            return None

    def _read_hlo(self, path: Path, max_bytes: int) -> None:
        where = str(path)
        instructions, computation, is_entry = [], None, False
        for number, line in enumerate(_read_text(path, max_bytes).splitlines(), 1):
            if computation is None:
                head = _COMPUTATION.match(line)
                if head and " = " not in line and not line.startswith("HloModule"):
                    computation, is_entry = head.group(2), bool(head.group(1))
                continue
            if _COMPUTATION_END.match(line.strip()):
                computation = None
                continue
            match = _INSTRUCTION.match(line)
            if match is None:
                if line.strip():
                    raise XlaDumpError(f"expected an instruction 'name = shape opcode(...)' in computation "
                                       f"{computation!r}, got {line.strip()[:80]!r}", path=where, line=number)
                continue
            rest = match.group(3)
            try:
                leaves, end = _scan_shape(rest, 0)
                opcode = _OPCODE.match(rest, end)
                if opcode is None:
                    raise ValueError(f"expected an opcode after the shape at column {end + 1}")
            except ValueError as error:
                raise XlaDumpError(f"instruction {match.group(2)!r}: {error}", path=where, line=number) from None
            shapes = tuple((index, text, self._leaf_shape(text, where, number)) for index, text in leaves)
            instructions.append(HloInstruction(match.group(2), opcode.group(1), computation, is_entry,
                                               bool(match.group(1)), rest[:end], shapes, where, number))
        self.instructions = tuple(instructions)

    def _read_sections(self, path: Path, max_bytes: int) -> None:
        """Every section of a buffer-assignment / values / live-range / usage-report file."""
        where, section, allocation, listing = str(path), None, None, None
        allocations, values, value_key = list(self.allocations), list(self.values), None
        block = -1
        for number, line in enumerate(_read_text(path, max_bytes).splitlines(), 1):
            stripped = line.strip()
            if not stripped:
                continue
            total = _TOTAL.match(stripped)
            if total:
                self.total_bytes = _number(total.group(1), "total bytes", where, number)
                continue
            header = _LIVE_MAX.match(stripped)
            if stripped.startswith(("BufferAssignment:", "Used values:", "InstructionSequence:",
                                    "BufferLiveRange:", "Memory Space:")) or header or _PEAK_HEAD.match(line):
                section = stripped.split(":")[0].split(" (")[0]
                if header:
                    self.schedule_end = _number(header.group(1), "HloLiveRange max", where, number)
                    self.live_range_source, self.sequence = "HloLiveRange", ()
                peak = _PEAK_HEAD.match(line)
                if peak:
                    section, self.xla_peak_time = "peak", _number(peak.group(1), "peak time", where, number)
                continue
            if stripped.startswith("Stack trace breakdown"):
                section = "skip"  # XLA's per-op attribution of the peak: not used
                continue
            if stripped.startswith("allocation ") or section == "BufferAssignment" and stripped.startswith("value:"):
                allocation = self._allocation_line(line, allocation, allocations, values, where, number)
                continue
            if section == "Used values":
                head = _VALUE_HEAD.match(stripped)
                if head:
                    value_key, listing = (head.group(2), head.group(3) or "{}"), None
                    self._uses.setdefault(value_key, ())
                    self._positions.setdefault(value_key, ())
                elif stripped in ("positions:", "uses:"):
                    listing = stripped[:-1]
                elif value_key and listing == "uses" and _USE.match(line):
                    self._uses[value_key] += (_USE.match(line).group(1),)
                elif value_key and listing == "positions" and _POSITION.match(line):
                    self._positions[value_key] += (_POSITION.match(line).group(1),)
                else:
                    listing = None  # "from instruction: ..." and anything after it
                continue
            if section == "InstructionSequence":
                self.sequence += (self._expect(_SEQUENCE, line, "'  N:instruction'", where, number).group(2),)
            elif section == "BufferLiveRange":
                match = self._expect(_RANGE, line, "'name{index}:start-end'", where, number)
                start, end = (_number(match.group(k), "live range time", where, number) for k in (3, 4))
                if end < start:
                    raise XlaDumpError(f"live range {match.group(1)}{match.group(2)} ends at {end}, before it "
                                       f"starts at {start}", path=where, line=number,
                                       hint="the file is cut or edited; dump it again")
                self._ranges[(match.group(1), match.group(2))] = (start, end)
            elif section == "peak":
                self.xla_peak_bytes = _number(self._expect(_PEAK_ROW, line, "'name{}: N bytes (cumulative: N "
                                                           "bytes)'", where, number).group(3), "peak bytes", where,
                                              number)
            elif section == "Memory Space":
                if stripped.startswith("cumulative_size"):
                    block += 1
                elif not stripped.startswith("---"):
                    row = self._expect(_REPORT_ROW, line, "'cumulative; size; offset; n; shapes'", where, number)
                    self.memory_report.append({"block": block, "size": row.group(2).strip(),
                                               "offset": _number(row.group(3), "offset", where, number),
                                               "used_by_n_values": _number(row.group(4), "value count", where,
                                                                           number),
                                               "shapes": row.group(5).strip()})
        self.allocations, self.values = tuple(allocations), tuple(values)

    @staticmethod
    def _expect(pattern: re.Pattern, line: str, what: str, path: str, number: int) -> re.Match:
        match = pattern.match(line)
        if match is None:
            raise XlaDumpError(f"expected {what}, got {line.strip()[:80]!r}", path=path, line=number,
                               hint="the file is cut or edited; dump it again")
        return match

    def _allocation_line(self, line, allocation, allocations, values, path, number):
        head = _ALLOCATION.match(line)
        if head:
            flags_text = re.sub(r"\|[^|]*\|", "||", head.group(3))  # shapes between |..| hold commas
            words = tuple(w.strip() for w in flags_text.split(",") if w.strip())
            parameter = re.search(r"\bparameter (\d+)", flags_text)
            color = re.search(r"\bcolor (\d+)", flags_text)
            kind = next((k for k, flag in (("parameter", "parameter"), ("constant", "constant"),
                                           ("thread-local", "thread-local"), ("output", "maybe-live-out"),
                                           ("preallocated-temp", "preallocated-temp"))
                         if re.search(rf"(^|, ){flag}\b", flags_text)), "temp")
            index = _number(head.group(1), "allocation number", path, number)
            allocations.append(Allocation(index, _number(head.group(2), "allocation size", path, number), kind,
                                          words, _number(color.group(1), "color", path, number) if color else 0,
                                          _number(parameter.group(1), "parameter number", path, number)
                                          if parameter else None, path, number))
            return index
        value = _VALUE_LINE.match(line)
        if value is None or allocation is None:
            raise XlaDumpError("expected 'allocation N: size S, ...:' or ' value: <id name @color> "
                               f"(size=S,offset=O): shape', got {line.strip()[:80]!r}", path=path, line=number)
        text = value.group(6).strip()
        try:
            leaves, _ = _scan_shape(text, 0)
        except ValueError as error:
            raise XlaDumpError(f"value {value.group(2)!r}: {error}", path=path, line=number) from None
        shape = self._leaf_shape(leaves[0][1], path, number) if len(leaves) == 1 and not leaves[0][0] else None
        values.append(BufferValue(_number(value.group(1), "value id", path, number), value.group(2),
                                  value.group(3) or "{}", allocation, _number(value.group(5), "offset", path, number),
                                  _number(value.group(4), "value size", path, number), text, shape, path, number))
        return allocation

    def _resolve_live_ranges(self) -> None:
        """Attach live ranges: HloLiveRange's, else definition to last use in the entry order.

        The fallback follows ``HloLiveRange``: entry parameters live from time 0 to the
        end, values that reach the entry ROOT (a position at it) live to the end,
        others from their definition to their last scheduled use.
        """
        if self.live_range_source is None and self.values and self._uses:
            entry = [i.name for i in self.instructions if i.is_entry]
            root = next((i.name for i in self.instructions if i.is_entry and i.is_root), None)
            if entry:
                self.sequence, self.schedule_end, self.live_range_source = tuple(entry), len(entry), "last use"
                position = {name: t for t, name in enumerate(entry)}
                kinds = {a.index: a.kind for a in self.allocations}
                for value in self.values:
                    if value.name not in position:
                        continue  # defined inside a called computation: not scheduled
                    key = (value.name, value.index)
                    is_parameter = kinds.get(value.allocation) == "parameter"
                    start = 0 if is_parameter else position[value.name]
                    uses = [position[u] for u in self._uses.get(key, ()) if u in position]
                    live_out = is_parameter or root in self._positions.get(key, ()) or value.name == root
                    end = len(entry) if live_out else max([start, *uses])
                    self._ranges[(value.name, value.index)] = (start, end)
        for value in self.values:
            value.start, value.end = self._ranges.get((value.name, value.index), (-1, -1))
            value.uses = self._uses.get((value.name, value.index), ())

    # -- views -------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (f"HloModuleDump(module_{self.id:04d} {self.name!r}: {len(self.instructions)} instructions, "
                f"{len(self.allocations)} allocations, {len(self.values)} values)")

    def instructions_dataset(self):
        """One row per array leaf of every instruction (dim ``shape``), sizes from scwork's layout."""
        import xarray as xr

        rows = [(i, index, text, shape) for i in self.instructions for index, text, shape in i.leaves]
        sizes = np.array([_padding_of(r[3]) for r in rows], dtype=float).reshape(-1, 2)
        padded, unpadded = sizes[:, 0], sizes[:, 1]
        obj = lambda values: np.array(list(values), dtype=object)
        return xr.Dataset(
            {"padded_bytes": ("shape", padded, {"long_name": "bytes of the layout (scwork)", "units": "bytes"}),
             "unpadded_bytes": ("shape", unpadded, {"long_name": "bytes of the elements", "units": "bytes"}),
             "padding_bytes": ("shape", padded - unpadded, {"long_name": "padding of the layout", "units": "bytes"})},
            coords={"shape": ("shape", obj(r[2] for r in rows)),
                    "instruction": ("shape", obj(r[0].name for r in rows)),
                    "opcode": ("shape", obj(r[0].opcode for r in rows)),
                    "computation": ("shape", obj(r[0].computation for r in rows)),
                    "tuple_index": ("shape", obj(str(r[1]) for r in rows)),
                    "is_entry": ("shape", np.array([r[0].is_entry for r in rows], dtype=bool)),
                    "line": ("shape", np.array([r[0].line for r in rows], dtype=np.int64))},
            attrs={"module": self.name, "units": "bytes"})

    def allocations_dataset(self):
        """One row per allocation (dim ``allocation``): size, kind, number of values."""
        import xarray as xr

        counts = {a.index: 0 for a in self.allocations}
        for value in self.values:
            counts[value.allocation] = counts.get(value.allocation, 0) + 1
        return xr.Dataset(
            {"bytes": ("allocation", np.array([a.size for a in self.allocations], np.int64),
                       {"long_name": "allocation size (XLA)", "units": "bytes"}),
             "num_values": ("allocation", np.array([counts[a.index] for a in self.allocations], np.int64),
                            {"long_name": "values sharing the allocation", "units": "1"})},
            coords={"allocation": ("allocation", np.array([a.index for a in self.allocations], np.int64)),
                    "kind": ("allocation", np.array([a.kind for a in self.allocations], dtype=object)),
                    "color": ("allocation", np.array([a.color for a in self.allocations], np.int64))},
            attrs={"module": self.name, "units": "bytes", "total_bytes": int(sum(a.size for a in self.allocations))})

    def buffers_dataset(self):
        """One row per value (dim ``buffer``): XLA's size and place, scwork's padding, live range.

        Variables ``bytes``, ``offset``, ``padded_bytes``, ``unpadded_bytes``,
        ``padding_bytes``, ``padding_fraction`` (NaN for tuples and tokens),
        ``layout_matches_size`` (scwork's ``padded_bytes`` equals XLA's size; False for
        values without an array layout),
        ``start``/``end`` (schedule times, both included; -1 unknown) and
        ``live_at_peak``; coords ``allocation``, ``allocation_kind``, ``shape``, ``value_id``.
        """
        import xarray as xr

        kinds = {a.index: a.kind for a in self.allocations}
        values = self.values
        padded, unpadded = (np.array([_padding_of(v.shape)[k] for v in values], dtype=float) for k in (0, 1))
        peak = self._peak_time()
        obj = lambda items: np.array(list(items), dtype=object)
        return xr.Dataset(
            {"bytes": ("buffer", np.array([v.bytes for v in values], np.int64),
                       {"long_name": "value size (XLA buffer assignment)", "units": "bytes"}),
             "offset": ("buffer", np.array([v.offset for v in values], np.int64),
                        {"long_name": "offset in its allocation", "units": "bytes"}),
             "padded_bytes": ("buffer", padded, {"long_name": "bytes of the layout (scwork)", "units": "bytes"}),
             "unpadded_bytes": ("buffer", unpadded, {"long_name": "bytes of the elements (scwork)", "units": "bytes"}),
             "padding_bytes": ("buffer", padded - unpadded, {"long_name": "padding of the layout", "units": "bytes"}),
             "padding_fraction": ("buffer", np.divide(padded - unpadded, padded, out=np.full(len(values), np.nan),
                                                      where=padded > 0), {"units": "1"}),
             "layout_matches_size": ("buffer", np.array([v.shape is not None and v.shape.padded_bytes == v.bytes
                                                         for v in values], dtype=bool),
                                     {"long_name": "scwork's padded_bytes equals XLA's size (False: no layout)",
                                      "units": "1"}),
             "start": ("buffer", np.array([v.start for v in values], np.int64),
                       {"long_name": "first live schedule time (-1: unknown)", "units": "schedule step"}),
             "end": ("buffer", np.array([v.end for v in values], np.int64),
                     {"long_name": "last live schedule time, included (-1: unknown)", "units": "schedule step"}),
             "live_at_peak": ("buffer", np.array([peak is not None and v.start <= peak <= v.end and v.start >= 0
                                                  for v in values], dtype=bool), {"units": "1"})},
            coords={"buffer": ("buffer", obj(v.label for v in values)),
                    "value_id": ("buffer", np.array([v.id for v in values], np.int64)),
                    "allocation": ("buffer", np.array([v.allocation for v in values], np.int64)),
                    "allocation_kind": ("buffer", obj(kinds.get(v.allocation, "") for v in values)),
                    "shape": ("buffer", obj(v.shape_text for v in values))},
            attrs={"module": self.name, "units": "bytes", "live_range_source": self.live_range_source or "",
                   "xla_peak_bytes": -1 if self.xla_peak_bytes is None else self.xla_peak_bytes})

    def memory_report_dataset(self):
        """The memory-usage report's rows (dim ``report_row``); sizes as XLA printed them."""
        import xarray as xr

        rows = self.memory_report
        return xr.Dataset(
            {"offset": ("report_row", np.array([r["offset"] for r in rows], np.int64), {"units": "bytes"}),
             "used_by_n_values": ("report_row", np.array([r["used_by_n_values"] for r in rows], np.int64),
                                  {"units": "1"})},
            coords={"block": ("report_row", np.array([r["block"] for r in rows], np.int64)),
                    "size": ("report_row", np.array([r["size"] for r in rows], dtype=object)),
                    "shapes": ("report_row", np.array([r["shapes"] for r in rows], dtype=object))},
            attrs={"module": self.name, "units": "bytes", "total_bytes": -1 if self.total_bytes is None
                   else self.total_bytes})

    def _peak_time(self) -> int | None:
        """The first schedule time of the largest live total (the timeline's peak event), by a sweep over
        the range ends: no per-step work, so a dump with a huge edited time stays cheap."""
        live = [v for v in self.values if v.start >= 0]
        if not live:
            return None
        changes: dict[int, int] = {}
        for v in live:
            changes[v.start] = changes.get(v.start, 0) + v.bytes
            changes[v.end + 1] = changes.get(v.end + 1, 0) - v.bytes
        best_time, best, total = 0, 0, 0
        for time in sorted(changes):
            total += changes[time]
            if total > best:
                best_time, best = time, total
        return best_time

    def timeline(self, *, capacity_bytes: int | None = None, usable_bytes: int | None = None,
                 max_schedule_steps: int = MAX_SCHEDULE_STEPS) -> MeasuredTimeline:
        """The measured memory timeline of this module (see :class:`MeasuredTimeline`).

        Parameters
        ----------
        capacity_bytes, usable_bytes : int, optional
            Memory to compare with (e.g. a chip's HBM); default the peak itself.
        max_schedule_steps : int
            Most schedule steps (events) the timeline may have; default
            :data:`MAX_SCHEDULE_STEPS`.

        Raises
        ------
        XlaDumpError
            No value has a live range (the live-range and values files are missing),
            more steps than ``max_schedule_steps`` (an edited time far past the
            schedule), or live bytes past int64.
        """
        where = str(self.files.get("live-range", self.files.get("buffer-assignment", self.name)))
        live = [v for v in self.values if v.start >= 0]
        if not live:
            raise XlaDumpError(f"module {self.name!r} has no live ranges", path=where,
                               hint="dump with a recent XLA (it writes *-live-range.txt) and keep the "
                                    "buffer-assignment files")
        # One event per schedule time: refuse before building them when an edited time is huge.
        steps = max([len(self.sequence), (self.schedule_end or 0) + 1, *(v.end + 1 for v in live)])
        if steps > max_schedule_steps:
            raise XlaDumpError(f"the timeline of module {self.name!r} would have {steps:,} schedule steps, more "
                               f"than max_schedule_steps={max_schedule_steps:,} (the schedule lists "
                               f"{len(self.sequence):,} instructions)", path=where,
                               hint="a live range or HloLiveRange's max is far past the schedule: the file is "
                                    "cut or edited; dump it again, or pass a larger max_schedule_steps")
        total = sum(v.bytes for v in live)
        if total > np.iinfo(np.int64).max:
            raise XlaDumpError(f"the live values of module {self.name!r} add up to {total:,} bytes, past int64",
                               path=where, hint="the sizes are not real; dump it again")
        for name, value in (("capacity_bytes", capacity_bytes), ("usable_bytes", usable_bytes)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                      or not 0 <= value <= np.iinfo(np.int64).max):
                raise XlaDumpError(f"{name} must be an int of bytes >= 0 (or None), got {shown(value)}")
        return MeasuredTimeline(self, capacity_bytes=capacity_bytes, usable_bytes=usable_bytes)


class MeasuredTimeline(Timeline):
    """Memory of one XLA module over its schedule, as XLA's buffer assignment measured it.

    The same kind of object as :class:`scwork.memory.Timeline` (``events``,
    ``intervals``, ``usage_bytes``, ``usage_by_category``, ``peak_event``,
    ``live_at_peak()``, ``usage()``, ``intervals_dataset()``...), built from a dump
    instead of the model:

    - one :class:`~scwork.memory.timeline.Event` per schedule time (``phase`` = the
      instruction's opcode; a last event ``"program end"`` when live-out values reach
      HloLiveRange's ``max``); ``start_s``/``end_s`` count schedule steps, not seconds;
    - one :class:`~scwork.memory.timeline.Interval` per value with a live range:
      ``bytes`` = XLA's size, ``category`` = its allocation's kind (one of
      :data:`ALLOCATION_KINDS`), ``waste_bytes`` = padding of its layout;
    - ``categories``: the kinds, the columns of ``usage_by_category``.

    Values without a live range (in called computations, thread-local) are not drawn.
    A value counts at every time ``start..end`` (both included), as XLA lists the
    values "live at T (peak)": ``usage_bytes[xla_peak_time] == xla_peak_bytes``. XLA's
    chosen peak time T is not always the time of the largest of these totals: for a
    jitted matmul on jax 0.12's CPU backend it reports 18,564 bytes at time 6, while
    at time 5 (the matmul result still read as the next fusion writes) its own live
    ranges add up to 22,532. :attr:`peak_bytes` is the largest total.
    """

    def __init__(self, module: HloModuleDump, *, capacity_bytes: int | None = None,
                 usable_bytes: int | None = None):
        # Built from a dump, not from the model's numbers: Timeline.__init__ is not called
        # and the methods that read the model are overridden below.
        self._hbm = self._model = self._knobs = None
        self.module = module.name
        self.xla_peak_bytes = module.xla_peak_bytes
        self.xla_peak_time = module.xla_peak_time
        opcode = {i.name: i.opcode for i in module.instructions}
        kinds = {a.index: a.kind for a in module.allocations}
        live = [v for v in module.values if v.start >= 0]
        count = max([len(module.sequence), (module.schedule_end or 0) + 1, *(v.end + 1 for v in live)])
        names = [module.sequence[t] if t < len(module.sequence) else "program end" for t in range(count)]
        self.events = tuple(Event(t, names[t], opcode.get(names[t], ""), float(t), float(t + 1)) for t in range(count))
        self.categories = tuple(k for k in ALLOCATION_KINDS if any(kinds.get(v.allocation) == k for v in live))
        column = {k: c for c, k in enumerate(self.categories)}
        self.intervals = tuple(
            Interval(v.label, kinds[v.allocation], v.bytes, v.start, v.end + 1, float(v.start), float(v.end + 1),
                     None, None, 0.0 if v.shape is None else float(v.shape.padded_bytes - v.shape.unpadded_bytes))
            for v in live)
        self.usage_by_category = np.zeros((count, len(self.categories)), np.int64)
        for iv in self.intervals:
            self.usage_by_category[iv.start:iv.end, column[iv.category]] += iv.bytes
        self.usage_bytes = self.usage_by_category.sum(axis=1)
        self.capacity_bytes = int(self.peak_bytes if capacity_bytes is None else capacity_bytes)
        self.usable_bytes = int(self.capacity_bytes if usable_bytes is None else usable_bytes)

    @property
    def num_serialized_slots(self) -> int:
        """Always 1: a measured schedule has no SparseCore serialization slots."""
        return 1

    def category_bytes_at_peak(self) -> dict[str, int]:
        """Bytes of each allocation kind live at the peak."""
        row = self.usage_by_category[self.peak_event.index]
        return {c: int(row[i]) for i, c in enumerate(self.categories)}

    def usage_over_time(self, num: int | None = None):
        """:meth:`usage` on a ``time`` dim counting schedule steps (a dump has no time)."""
        ds = self.usage().rename({"event": "time"})
        return ds.assign_coords(time=("time", ds["start_s"].values, {"units": "schedule step"}))

    def _event_coords(self) -> dict:
        coords = super()._event_coords()
        coords["category"] = ("category", np.array(self.categories, dtype=object), {"long_name": "allocation kind"})
        for name in ("start_s", "end_s"):
            coords[name] = (coords[name][0], coords[name][1], {"units": "schedule step"})
        return coords

    def _attrs(self) -> dict:
        return {**super()._attrs(), "source": "measured", "module": self.module,
                "xla_peak_bytes": -1 if self.xla_peak_bytes is None else self.xla_peak_bytes}


class XlaDump:
    """The modules of one ``--xla_dump_to`` folder (build with :func:`read_xla_dump`).

    Attributes
    ----------
    folder : Path
    modules : tuple of HloModuleDump
        In ``module_NNNN`` order.
    """

    def __init__(self, folder: Path, modules: Iterable[HloModuleDump]):
        self.folder = folder
        self.modules = tuple(modules)

    def __repr__(self) -> str:
        return f"XlaDump({str(self.folder)!r}, modules={[m.name for m in self.modules]})"

    def module(self, key: str | int) -> HloModuleDump:
        """The module of that name (the last one if several share it) or ``NNNN`` id."""
        found = [m for m in self.modules if m.name == key or m.id == key]
        if not found:
            raise KeyError(f"no module {key!r} in {self.folder}; modules: {[(m.id, m.name) for m in self.modules]}")
        return found[-1]

    @property
    def problems(self) -> list[XlaDumpError]:
        """Unparsed shapes of every module (``errors="collect"``)."""
        return [p for m in self.modules for p in m.problems]

    def buffers_dataset(self):
        """:meth:`HloModuleDump.buffers_dataset` of every module with values, along ``buffer``
        (coord ``module``)."""
        import xarray as xr

        parts = [m.buffers_dataset().assign_coords(module=("buffer", np.array([m.name] * len(m.values), object)))
                 for m in self.modules if m.values]
        if not parts:
            raise XlaDumpError("no buffer assignment in the dump", path=str(self.folder),
                               hint="XLA writes *-buffer-assignment.txt for compiled modules; compile something")
        return xr.concat(parts, dim="buffer", combine_attrs="drop")


def read_xla_dump(folder: str | os.PathLike, *, modules: str | None = None, errors: str = "raise",
                  max_file_bytes: int = MAX_FILE_BYTES) -> XlaDump:
    """Read an ``XLA_FLAGS=--xla_dump_to=DIR`` folder (see the module documentation).

    Parameters
    ----------
    folder : path
    modules : str, optional
        A regular expression; only modules whose name it finds are read (jax dumps
        many small helper modules, e.g. ``jit_convert_element_type``).
    errors : {"raise", "collect"}
        What a shape scwork cannot parse does: raise :class:`~scwork.errors.XlaDumpError`
        (naming file and line), or go to ``problems`` with its leaf's shape None.
    max_file_bytes : int
        Files larger than this are refused (default :data:`MAX_FILE_BYTES`).

    Returns
    -------
    XlaDump

    Raises
    ------
    XlaDumpError
        The folder has no after-optimizations file, a file is too large, or a line
        of a section these readers parse is malformed (file and line named).
    """
    if not isinstance(errors, str) or errors not in ("raise", "collect"):
        raise XlaDumpError(f"errors must be 'raise' or 'collect', got {shown(errors)}")
    _check_max_bytes(max_file_bytes)
    if modules is not None:
        if not isinstance(modules, str):
            raise XlaDumpError(f"modules must be a regular expression (a str) or None, got {shown(modules)}")
        try:
            module_pattern = re.compile(modules)
        except re.error as error:
            raise XlaDumpError(f"modules={shown(modules)} is not a regular expression: {error}",
                               hint="escape special characters with re.escape(name), e.g. modules='^jit_step$'") \
                from None
    if not isinstance(folder, (str, os.PathLike)):
        raise XlaDumpError(f"folder must be a path (str or os.PathLike), got {shown(folder)}")
    path = Path(folder)
    if not path.is_dir():
        raise XlaDumpError("not a folder", path=str(path), hint="pass the DIR of XLA_FLAGS=--xla_dump_to=DIR")
    grouped: dict[tuple[int, str], dict[str, Path]] = {}
    for file in sorted(path.iterdir()):
        match = _FILE.match(file.name)
        if match and file.is_file() and (modules is None or module_pattern.search(match.group(2))):
            kind = (match.group(4) or "-hlo")[1:]
            grouped.setdefault((_number(match.group(1), "module number", str(file), None), match.group(2)), {})[kind] \
                = file
    if not grouped:
        raise XlaDumpError("no module_NNNN.<name>.*after_optimizations*.txt file"
                           + ("" if modules is None else f" of a module matching {modules!r}"), path=str(path),
                           hint="run with XLA_FLAGS=--xla_dump_to=DIR (text dumps are the default)")
    return XlaDump(path, (HloModuleDump(i, name, files, max_file_bytes=max_file_bytes, errors=errors)
                          for (i, name), files in sorted(grouped.items())))
