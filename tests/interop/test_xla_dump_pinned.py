"""read_xla_dump on a dump written out by hand, every number worked out in the test.

tests/interop/test_xla_dump.py reads a real CPU dump and a TPU-style one with an
HloLiveRange file; this one is in the older form, where the buffer assignment, the
values' uses and the memory report are the only sources, so live ranges come from the
entry computation's order and each value's last use (as ``HloLiveRange`` would:
parameters and values reaching the ROOT live to the end). Module ``jit_f``:

* entry ``main``, in order: ``a`` f32[4,4] parameter 0 (64 B), ``b`` s32[3]{0:T(8)}
  parameter 1 (32 B: 8 x 4, 12 of them data), ``c`` constant f32[4,4] (64 B), ``add``
  (64 B, a position at the ROOT), ``tok`` token, ``neg`` s32[3] (12 B, a temp),
  ``out`` the ROOT tuple (16 B of pointers): times 0 to 6, the end at 7;
* a called computation ``helper`` (``p``, ``neg.9``): values there are not scheduled.

Live ranges (both ends included): a, b 0-7; c 2-3 (last use: add); add 3-7 (at the
ROOT); neg 5-6 (last use: out); out 6-7. Live bytes per time: 96, 96, 160, 224, 160,
172, 188, 176: the peak is 224 at time 3 (a, b, c, add).
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from scwork.errors import XlaDumpError
from scwork.interop.xla_dump import (
    ALLOCATION_KINDS,
    MAX_SCHEDULE_STEPS,
    BufferValue,
    HloModuleDump,
    read_xla_dump,
)

HLO = """\
HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[4,4]{1,0})->f32[4,4]{1,0}}

%helper (p: f32[2]) -> f32[2] {
  %p = f32[2]{0} parameter(0)
  ROOT %neg.9 = f32[2]{0} negate(%p)
}

ENTRY %main (a: f32[4,4], b: s32[3]) -> (f32[4,4], s32[3]) {
  %a = f32[4,4]{1,0} parameter(0)
  %b = s32[3]{0:T(8)} parameter(1)
  %c = f32[4,4]{1,0} constant({...})

  %add = f32[4,4]{1,0} add(%a, %c)
  %tok = token[] after-all()
  %neg = s32[3]{0} negate(%b)
  ROOT %out = (f32[4,4]{1,0}, /*index=1*/s32[3]{0}) tuple(%add, %neg)
}
"""

BUFFERS = """\
BufferAssignment:
allocation 0: size 64, page 0, parameter 0, shape |f32[4,4]| at ShapeIndex {}:
 value: <0 a @0> (size=64,offset=0): f32[4,4]{1,0}
allocation 1: size 32, parameter 1, shape |s32[3]| at ShapeIndex {}:
 value: <1 b @0> (size=32,offset=0): s32[3]{0:T(8)}
allocation 2: size 64, constant:
 value: <2 c @0> (size=64,offset=0): f32[4,4]{1,0}
allocation 3: size 64, maybe-live-out:
 value: <3 add @0> (size=64,offset=0): f32[4,4]{1,0}
allocation 4: size 12:
 value: <5 neg @0> (size=12,offset=0): s32[3]{0}
allocation 5: size 16, output shape is |(f32[4,4], s32[3])|, maybe-live-out:
 value: <6 out{} @0> (size=16,offset=0): (f32[4,4]{1,0}, s32[3]{0})
allocation 6: size 8, thread-local:
 value: <7 p @0> (size=8,offset=0): f32[2]{0}
allocation 7: size 24, preallocated-temp, color 1:
 value: <8 neg.9 @0> (size=8,offset=16): f32[2]{0}
allocation 8: size 4, constant:

Total bytes used: 288 (288B)

Used values:
<0 a @0>
 positions:
  a
 uses:
  add, operand 0
 from instruction: %a = f32[4,4]{1,0} parameter(0)
<2 c @0>
 positions:
  c
 uses:
  add, operand 1
<3 add @0>
 positions:
  add
  out {0}
 uses:
  out, operand 0
<5 neg @0>
 positions:
  neg
 uses:
  out, operand 1
  (none)
  tok, operand 0
<6 out{} @0>
 positions:
  out {}
 uses:
  (none)
"""

REPORT = """\
Memory Space: default (color=0)
Total bytes: 288 (288B)
  cumulative_size;       size;       offset; used_by_n_values; shapes_list
  ------------------------------------------------------------
       64B( 84%);        64B;            0;                1; f32[4,4]
       76B(100%);        12B;           64;                1; s32[3]

  cumulative_size;       size;       offset; used_by_n_values; shapes_list
  ------------------------------------------------------------
       16B(100%);        16B;            0;                2; (f32[4,4], s32[3]), f32[2]
"""


def write_dump(folder: Path, *, hlo=HLO, buffers=BUFFERS, report=REPORT, name="jit_f", number="0003",
               stage="cpu_after_optimizations") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    base = f"module_{number}.{name}.{stage}"
    if hlo is not None:
        (folder / f"{base}.txt").write_text(hlo)
    if buffers is not None:
        (folder / f"{base}-buffer-assignment.txt").write_text(buffers)
    if report is not None:
        (folder / f"{base}-memory-usage-report.txt").write_text(report)
    return folder


@pytest.fixture
def module(tmp_path) -> HloModuleDump:
    return read_xla_dump(write_dump(tmp_path / "dump")).module("jit_f")


def test_instructions(module):
    assert [(i.name, i.opcode, i.computation, i.is_entry, i.is_root, i.line) for i in module.instructions] == [
        ("p", "parameter", "helper", False, False, 4), ("neg.9", "negate", "helper", False, True, 5),
        ("a", "parameter", "main", True, False, 9), ("b", "parameter", "main", True, False, 10),
        ("c", "constant", "main", True, False, 11), ("add", "add", "main", True, False, 13),
        ("tok", "after-all", "main", True, False, 14), ("neg", "negate", "main", True, False, 15),
        ("out", "tuple", "main", True, True, 16)]
    out = module.instructions[-1]
    assert out.shape_text == "(f32[4,4]{1,0}, /*index=1*/s32[3]{0})"
    assert [(index, text) for index, text, _ in out.leaves] == [((0,), "f32[4,4]{1,0}"), ((1,), "s32[3]{0}")]
    assert module.instructions[6].leaves[0][2] is None            # token[]: no layout
    assert repr(module) == "HloModuleDump(module_0003 'jit_f': 9 instructions, 9 allocations, 8 values)"
    ds = module.instructions_dataset()
    # One row per leaf: 2 in helper, 6 single arrays and the tuple's 2 in main.
    assert ds["instruction"].values.tolist() == ["p", "neg.9", "a", "b", "c", "add", "tok", "neg", "out", "out"]
    assert ds["tuple_index"].values.tolist() == ["()"] * 8 + ["(0,)", "(1,)"]
    padded = ds["padded_bytes"].values
    assert padded[:6].tolist() == [8.0, 8.0, 64.0, 32.0, 64.0, 64.0] and math.isnan(padded[6])
    assert padded[7:].tolist() == [12.0, 64.0, 12.0]
    assert ds["unpadded_bytes"].values[3] == 12.0 and ds["padding_bytes"].values[3] == 20.0
    assert ds["is_entry"].values.tolist() == [False, False] + [True] * 8
    assert ds["line"].values.tolist() == [4, 5, 9, 10, 11, 13, 14, 15, 16, 16]
    assert ds["opcode"].values[6] == "after-all" and ds["computation"].values[0] == "helper"
    assert ds.attrs == {"module": "jit_f", "units": "bytes"}


def test_allocations(module):
    assert [(a.index, a.size, a.kind, a.color, a.parameter, a.line) for a in module.allocations] == [
        (0, 64, "parameter", 0, 0, 2), (1, 32, "parameter", 0, 1, 4), (2, 64, "constant", 0, None, 6),
        (3, 64, "output", 0, None, 8), (4, 12, "temp", 0, None, 10), (5, 16, "output", 0, None, 12),
        (6, 8, "thread-local", 0, None, 14), (7, 24, "preallocated-temp", 1, None, 16),
        (8, 4, "constant", 0, None, 18)]
    # Shapes between |...| hold commas: they are one flag.
    assert module.allocations[5].flags == ("output shape is ||", "maybe-live-out")
    assert module.allocations[0].flags == ("page 0", "parameter 0", "shape || at ShapeIndex {}")
    assert module.allocations[4].flags == ()
    ds = module.allocations_dataset()
    assert ds["bytes"].values.tolist() == [64, 32, 64, 64, 12, 16, 8, 24, 4]
    assert ds["num_values"].values.tolist() == [1, 1, 1, 1, 1, 1, 1, 1, 0]
    assert ds["kind"].values.tolist() == ["parameter", "parameter", "constant", "output", "temp", "output",
                                          "thread-local", "preallocated-temp", "constant"]
    assert ds["color"].values.tolist() == [0] * 7 + [1, 0]
    assert ds.attrs == {"module": "jit_f", "units": "bytes", "total_bytes": 288}
    assert module.total_bytes == 288


def test_values_and_their_live_ranges_by_last_use(module):
    assert module.live_range_source == "last use"
    assert module.sequence == ("a", "b", "c", "add", "tok", "neg", "out") and module.schedule_end == 7
    # A line that is neither a use nor a position ends the listing: neg's "(none)" line
    # comes before "tok, operand 0", which is not read.
    rows = [(v.id, v.label, v.allocation, v.offset, v.bytes, v.start, v.end, v.uses) for v in module.values]
    assert rows == [(0, "a", 0, 0, 64, 0, 7, ("add",)), (1, "b", 1, 0, 32, 0, 7, ()),
                    (2, "c", 2, 0, 64, 2, 3, ("add",)), (3, "add", 3, 0, 64, 3, 7, ("out",)),
                    (5, "neg", 4, 0, 12, 5, 6, ("out",)), (6, "out", 5, 0, 16, 6, 7, ()),
                    (7, "p", 6, 0, 8, -1, -1, ()), (8, "neg.9", 7, 16, 8, -1, -1, ())]
    out = module.values[5]
    assert (out.name, out.index, out.shape) == ("out", "{}", None)       # a tuple: no layout
    assert module.values[1].shape.padded_bytes == 32 and module.values[1].line == 5
    built = BufferValue(9, "fusion", "{1}", 0, 0, 4, "f32[]", None, "x", 1)
    assert built.label == "fusion{1}" and (built.start, built.end, built.uses) == (-1, -1, ())


def test_buffers_dataset(module):
    ds = module.buffers_dataset()
    assert ds["buffer"].values.tolist() == ["a", "b", "c", "add", "neg", "out", "p", "neg.9"]
    assert ds["value_id"].values.tolist() == [0, 1, 2, 3, 5, 6, 7, 8]
    assert ds["bytes"].values.tolist() == [64, 32, 64, 64, 12, 16, 8, 8]
    assert ds["offset"].values.tolist() == [0, 0, 0, 0, 0, 0, 0, 16]
    padded = ds["padded_bytes"].values
    assert padded[[0, 1, 2, 3, 4, 6, 7]].tolist() == [64.0, 32.0, 64.0, 64.0, 12.0, 8.0, 8.0] and math.isnan(padded[5])
    assert ds["padding_bytes"].values[1] == 20.0
    fraction = ds["padding_fraction"].values
    assert fraction[1] == 20 / 32 and fraction[0] == 0.0 and math.isnan(fraction[5])
    assert ds["layout_matches_size"].values.tolist() == [True, True, True, True, True, False, True, True]
    assert ds["start"].values.tolist() == [0, 0, 2, 3, 5, 6, -1, -1]
    assert ds["end"].values.tolist() == [7, 7, 3, 7, 6, 7, -1, -1]
    assert ds["live_at_peak"].values.tolist() == [True, True, True, True, False, False, False, False]
    assert ds["allocation_kind"].values.tolist() == ["parameter", "parameter", "constant", "output", "temp",
                                                     "output", "thread-local", "preallocated-temp"]
    assert ds.attrs == {"module": "jit_f", "units": "bytes", "live_range_source": "last use", "xla_peak_bytes": -1}
    assert module._peak_time() == 3


def test_a_size_scwork_disagrees_with(tmp_path):
    # XLA says 16 bytes for b, scwork's layout 32: not a match.
    buffers = BUFFERS.replace("<1 b @0> (size=32,", "<1 b @0> (size=16,")
    ds = read_xla_dump(write_dump(tmp_path, buffers=buffers)).module(3).buffers_dataset()
    assert ds["layout_matches_size"].values[:2].tolist() == [True, False]


def test_measured_timeline(module):
    timeline = module.timeline()
    assert [(e.index, e.name, e.phase, e.start_s, e.end_s) for e in timeline.events] == [
        (0, "a", "parameter", 0.0, 1.0), (1, "b", "parameter", 1.0, 2.0), (2, "c", "constant", 2.0, 3.0),
        (3, "add", "add", 3.0, 4.0), (4, "tok", "after-all", 4.0, 5.0), (5, "neg", "negate", 5.0, 6.0),
        (6, "out", "tuple", 6.0, 7.0), (7, "program end", "", 7.0, 8.0)]
    assert timeline.categories == ("parameter", "constant", "output", "temp")
    assert [(iv.name, iv.category, iv.bytes, iv.start, iv.end, iv.waste_bytes) for iv in timeline.intervals] == [
        ("a", "parameter", 64, 0, 8, 0.0), ("b", "parameter", 32, 0, 8, 20.0), ("c", "constant", 64, 2, 4, 0.0),
        ("add", "output", 64, 3, 8, 0.0), ("neg", "temp", 12, 5, 7, 0.0), ("out", "output", 16, 6, 8, 0.0)]
    assert timeline.usage_bytes.tolist() == [96, 96, 160, 224, 160, 172, 188, 176]
    assert timeline.usage_by_category[5].tolist() == [96, 0, 64, 12]
    assert timeline.peak_bytes == 224 and timeline.peak_event.index == 3
    assert timeline.category_bytes_at_peak() == {"parameter": 96, "constant": 64, "output": 64, "temp": 0}
    assert sorted(iv.name for iv in timeline.live_at_peak()) == ["a", "add", "b", "c"]
    assert (timeline.capacity_bytes, timeline.usable_bytes) == (224, 224)
    assert timeline.num_serialized_slots == 1
    assert timeline.module == "jit_f" and timeline.xla_peak_bytes is None and timeline.xla_peak_time is None
    over_time = timeline.usage_over_time()
    assert over_time["time"].values.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert over_time["time"].attrs == {"units": "schedule step"}
    usage = timeline.usage()
    assert usage["category"].values.tolist() == ["parameter", "constant", "output", "temp"]
    assert usage["category"].attrs == {"long_name": "allocation kind"}
    assert usage["start_s"].attrs["units"] == "schedule step" and usage["end_s"].attrs["units"] == "schedule step"
    assert usage.attrs["source"] == "measured" and usage.attrs["module"] == "jit_f"
    assert usage.attrs["xla_peak_bytes"] == -1


def test_timeline_capacity_and_limits(module):
    t = module.timeline(capacity_bytes=1000)
    assert (t.capacity_bytes, t.usable_bytes) == (1000, 1000)
    t = module.timeline(capacity_bytes=1000, usable_bytes=0)
    assert (t.capacity_bytes, t.usable_bytes) == (1000, 0)
    assert module.timeline(capacity_bytes=np.int64(2**63 - 1)).capacity_bytes == 2**63 - 1
    for bad in (-1, True, 1.5, 2**63, "1"):
        with pytest.raises(XlaDumpError, match=re.escape("capacity_bytes must be an int of bytes >= 0 (or None)")):
            module.timeline(capacity_bytes=bad)
        with pytest.raises(XlaDumpError, match="usable_bytes must be an int of bytes >= 0"):
            module.timeline(usable_bytes=bad)
    # 8 schedule steps (times 0 to 7): 8 is allowed, 7 is not.
    assert len(module.timeline(max_schedule_steps=8).events) == 8
    with pytest.raises(XlaDumpError, match=re.escape("would have 8 schedule steps, more than max_schedule_steps=7 "
                                                     "(the schedule lists 7 instructions)")):
        module.timeline(max_schedule_steps=7)
    assert MAX_SCHEDULE_STEPS == 4_194_304


def test_live_bytes_past_int64_are_refused(tmp_path):
    # a, b and c of 2**62 bytes each (each fits int64); with add, neg and out the live values
    # add up to 3 x 2**62 + 64 + 12 + 16 bytes, past int64.
    buffers = BUFFERS
    for old in ("<0 a @0> (size=64,", "<1 b @0> (size=32,", "<2 c @0> (size=64,"):
        buffers = buffers.replace(old, old.split("(size=")[0] + f"(size={2**62},")
    m = read_xla_dump(write_dump(tmp_path, buffers=buffers)).module(3)
    with pytest.raises(XlaDumpError, match=re.escape("the live values of module 'jit_f' add up to "
                                                     "13,835,058,055,282,163,804 bytes, past int64")):
        m.timeline()
    # a sized so that all live values add up to exactly 2**63 - 1 bytes: allowed.
    buffers = BUFFERS.replace("<0 a @0> (size=64,", f"<0 a @0> (size={2**63 - 1 - 32 - 64 - 64 - 12 - 16},")
    t = read_xla_dump(write_dump(tmp_path / "fits", buffers=buffers)).module(3).timeline()
    assert t.peak_bytes == 2**63 - 1 - 32 - 64 - 64 - 12 - 16 + 32 + 64 + 64


def test_memory_report(module):
    assert module.memory_report == [
        {"block": 0, "size": "64B", "offset": 0, "used_by_n_values": 1, "shapes": "f32[4,4]"},
        {"block": 0, "size": "12B", "offset": 64, "used_by_n_values": 1, "shapes": "s32[3]"},
        {"block": 1, "size": "16B", "offset": 0, "used_by_n_values": 2, "shapes": "(f32[4,4], s32[3]), f32[2]"}]
    ds = module.memory_report_dataset()
    assert ds["offset"].values.tolist() == [0, 64, 0] and ds["block"].values.tolist() == [0, 0, 1]
    assert ds["used_by_n_values"].values.tolist() == [1, 1, 2] and ds["size"].values.tolist() == ["64B", "12B", "16B"]
    assert ds.attrs == {"module": "jit_f", "units": "bytes", "total_bytes": 288}


def test_a_module_without_uses_or_without_values(tmp_path):
    # No "Used values" section: no live ranges at all, and no timeline.
    buffers = BUFFERS.split("Used values:")[0]
    m = read_xla_dump(write_dump(tmp_path / "one", buffers=buffers)).module("jit_f")
    assert m.live_range_source is None and m.sequence == () and m.schedule_end is None
    assert all(v.start == -1 and v.end == -1 for v in m.values) and m._peak_time() is None
    assert not m.buffers_dataset()["live_at_peak"].values.any()
    with pytest.raises(XlaDumpError, match="module 'jit_f' has no live ranges") as raised:
        m.timeline()
    assert raised.value.path.endswith("-buffer-assignment.txt")
    # Only the HLO: no values; the dump's buffers_dataset skips it, and with no module left, refuses.
    dump = read_xla_dump(write_dump(tmp_path / "two", buffers=None, report=None))
    assert dump.modules[0].values == () and dump.modules[0].total_bytes is None
    assert dump.modules[0].memory_report_dataset().attrs["total_bytes"] == -1
    with pytest.raises(XlaDumpError, match="no buffer assignment in the dump"):
        dump.buffers_dataset()
    with pytest.raises(XlaDumpError, match="module 'jit_f' has no live ranges") as raised:
        dump.modules[0].timeline()
    assert raised.value.path == "jit_f"


def test_modules_of_a_folder(tmp_path):
    folder = write_dump(tmp_path / "dump")
    write_dump(folder, name="jit_g", number="0010", buffers=None, report=None)
    write_dump(folder, name="jit_f", number="0012", report=None)
    (folder / "module_0011.jit_h.before_optimizations.txt").write_text("not read")
    (folder / "module_0013.jit_k.cpu_after_optimizations-other.txt").write_text("not read")
    (folder / "module_0014.jit_k.cpu_after_optimizations.txt").mkdir()     # a folder, not a file
    dump = read_xla_dump(folder)
    assert [(m.id, m.name) for m in dump.modules] == [(3, "jit_f"), (10, "jit_g"), (12, "jit_f")]
    assert sorted(dump.modules[0].files) == ["buffer-assignment", "hlo", "memory-usage-report"]
    assert dump.module(10).name == "jit_g" and dump.module("jit_g").id == 10
    assert dump.module("jit_f").id == 12                        # the last of two of one name
    with pytest.raises(KeyError, match=re.escape("no module 'jit_x' in")):
        dump.module("jit_x")
    assert repr(dump) == f"XlaDump({str(folder)!r}, modules=['jit_f', 'jit_g', 'jit_f'])"
    ds = dump.buffers_dataset()
    assert ds["module"].values.tolist() == ["jit_f"] * 8 + ["jit_f"] * 8
    assert ds.sizes["buffer"] == 16
    # A pattern found anywhere in the name (search, not match).
    assert [m.id for m in read_xla_dump(folder, modules="_g").modules] == [10]
    assert [m.id for m in read_xla_dump(folder, modules="^jit_f$").modules] == [3, 12]
    with pytest.raises(XlaDumpError, match=re.escape("no module_NNNN.<name>.*after_optimizations*.txt file of a "
                                                     "module matching 'jit_z'")):
        read_xla_dump(folder, modules="jit_z")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(XlaDumpError, match=re.escape("no module_NNNN.<name>.*after_optimizations*.txt file")) as e:
        read_xla_dump(empty)
    assert "of a module matching" not in str(e.value) and e.value.path == str(empty)


def test_read_xla_dump_arguments(tmp_path):
    folder = write_dump(tmp_path / "dump")
    for bad in ("ignore", None, 1):
        with pytest.raises(XlaDumpError, match=re.escape("errors must be 'raise' or 'collect', got")):
            read_xla_dump(folder, errors=bad)
    with pytest.raises(XlaDumpError, match="max_file_bytes must be a positive int, got 0"):
        read_xla_dump(folder, max_file_bytes=0)
    with pytest.raises(XlaDumpError, match="more than max_file_bytes=100"):
        read_xla_dump(folder, max_file_bytes=100)
    with pytest.raises(XlaDumpError, match=re.escape("modules must be a regular expression (a str) or None, got 5")):
        read_xla_dump(folder, modules=5)
    with pytest.raises(XlaDumpError, match=re.escape("modules='jit_(' is not a regular expression")):
        read_xla_dump(folder, modules="jit_(")
    with pytest.raises(XlaDumpError, match=re.escape("folder must be a path (str or os.PathLike), got 5")):
        read_xla_dump(5)
    with pytest.raises(XlaDumpError, match="not a folder"):
        read_xla_dump(folder / "module_0003.jit_f.cpu_after_optimizations.txt")
    assert read_xla_dump(str(folder)).modules[0].name == "jit_f"


def test_shapes_scwork_cannot_parse(tmp_path):
    hlo = HLO.replace("%c = f32[4,4]{1,0} constant", "%c = f32[4,4]{0} constant")
    buffers = BUFFERS.replace("<2 c @0> (size=64,offset=0): f32[4,4]{1,0}", "<2 c @0> (size=64,offset=0): f32[4,4]{0}")
    folder = write_dump(tmp_path, hlo=hlo, buffers=buffers)
    with pytest.raises(XlaDumpError, match=re.escape("cannot parse shape 'f32[4,4]{0}'")) as raised:
        read_xla_dump(folder)
    assert raised.value.line == 11 and raised.value.path.endswith("cpu_after_optimizations.txt")
    dump = read_xla_dump(folder, errors="collect")
    assert [(p.line, Path(p.path).name) for p in dump.problems] == [
        (11, "module_0003.jit_f.cpu_after_optimizations.txt"),
        (7, "module_0003.jit_f.cpu_after_optimizations-buffer-assignment.txt")]
    m = dump.modules[0]
    assert m.instructions[4].leaves[0][2] is None and m.values[2].shape is None
    assert m.buffers_dataset()["layout_matches_size"].values[2] == False  # noqa: E712


@pytest.mark.parametrize("old, new, line, message", [
    ("  %tok = token[] after-all()", "  garbage", 14,
     "expected an instruction 'name = shape opcode(...)' in computation 'main', got 'garbage'"),
    ("  %tok = token[] after-all()", "  %tok = token[ after-all()", 14, "instruction 'tok': unclosed '[' at column 6"),
    ("  %tok = token[] after-all()", "  %tok = token[] 7", 14,
     "instruction 'tok': expected an opcode after the shape at column 8"),
    ("  %p = f32[2]{0} parameter(0)", "  %p = 3", 4, "instruction 'p': expected a shape such as f32[8,128]{1,0}"),
])
def test_bad_hlo_lines(tmp_path, old, new, line, message):
    with pytest.raises(XlaDumpError, match=re.escape(message)) as raised:
        read_xla_dump(write_dump(tmp_path, hlo=HLO.replace(old, new)))
    assert raised.value.line == line and raised.value.path.endswith("cpu_after_optimizations.txt")


@pytest.mark.parametrize("old, new, line, message", [
    ("allocation 4: size 12:", "allocation 4: size twelve:", 10, "expected 'allocation N: size S, ...:'"),
    ("BufferAssignment:\nallocation 0: size 64, page 0, parameter 0, shape |f32[4,4]| at ShapeIndex {}:\n",
     "BufferAssignment:\n", 2, "expected 'allocation N: size S, ...:' or ' value: <id name @color> (size=S,offset=O)"
                               ": shape', got 'value: <0 a @0> (size=64,offset=0): f32[4,4]{1,0}'"),
    ("allocation 4: size 12:", "allocation 99999999999999999999: size 12:", 10,
     "allocation number '99999999999999999999' is not a number that fits int64"),
    ("allocation 4: size 12:", "allocation 4: size 99999999999999999999:", 10, "allocation size '9999"),
    ("preallocated-temp, color 1:", "preallocated-temp, color 99999999999999999999:", 16, "color '9999"),
    ("parameter 1, shape", "parameter 99999999999999999999, shape", 4, "parameter number '9999"),
    ("(size=12,offset=0): s32[3]{0}", "(size=12,offset=0): (s32[3]{0}", 11,
     "value 'neg': expected ',' or ')' at column 11 of the tuple shape"),
    ("<5 neg @0> (size=12,offset=0)", "<99999999999999999999 neg @0> (size=12,offset=0)", 11, "value id '9999"),
    ("<5 neg @0> (size=12,offset=0)", "<5 neg @0> (size=12,offset=99999999999999999999)", 11, "offset '9999"),
    ("<5 neg @0> (size=12,offset=0)", "<5 neg @0> (size=99999999999999999999,offset=0)", 11, "value size '9999"),
    ("Total bytes used: 288", "Total bytes used: 99999999999999999999", 20, "total bytes '9999"),
])
def test_bad_buffer_assignment_lines(tmp_path, old, new, line, message):
    assert BUFFERS.count(old) == 1
    with pytest.raises(XlaDumpError, match=re.escape(message)) as raised:
        read_xla_dump(write_dump(tmp_path, buffers=BUFFERS.replace(old, new)))
    assert raised.value.line == line and raised.value.path.endswith("-buffer-assignment.txt")


@pytest.mark.parametrize("old, new, line, message", [
    ("       76B(100%);        12B;           64;", "       76B(100%);        12B;           xx;", 6,
     "expected 'cumulative; size; offset; n; shapes', got '76B(100%);        12B;           xx;"),
    ("           64;                1; s32[3]", "           99999999999999999999;                1; s32[3]", 6,
     "offset '9999"),
    ("            0;                2;", "            0;                99999999999999999999;", 10, "value count '9999"),
])
def test_bad_memory_report_lines(tmp_path, old, new, line, message):
    assert REPORT.count(old) == 1
    with pytest.raises(XlaDumpError, match=re.escape(message)) as raised:
        read_xla_dump(write_dump(tmp_path, report=REPORT.replace(old, new)))
    assert raised.value.line == line and raised.value.path.endswith("-memory-usage-report.txt")


LIVE_RANGE = """\
HloLiveRange (max 7):
  InstructionSequence:
    0:a
    1:b
    2:c
    3:add
    4:tok
    5:neg
    6:out
  BufferLiveRange:
    a{}:0-7
    b{}:0-7
    c{}:2-2
    add{}:3-7
    neg{}:5-6
    out{}:6-7
  Live ranges at 6 (peak):
    a{}: 64 bytes (cumulative: 64 bytes)
    b{}: 32 bytes (cumulative: 96 bytes)
    add{}: 64 bytes (cumulative: 160 bytes)
    neg{}: 12 bytes (cumulative: 172 bytes)
    out{}: 16 bytes (cumulative: 188 bytes)
Stack trace breakdown for peak usage: 188 bytes
  a{}: nothing read here
"""


def test_hlo_live_range_replaces_the_last_use_ranges(tmp_path):
    folder = write_dump(tmp_path)
    (folder / "module_0003.jit_f.cpu_after_optimizations-live-range.txt").write_text(LIVE_RANGE)
    m = read_xla_dump(folder).module(3)
    assert m.live_range_source == "HloLiveRange" and m.schedule_end == 7
    assert m.sequence == ("a", "b", "c", "add", "tok", "neg", "out")
    assert [(v.label, v.start, v.end) for v in m.values[:6]] == [
        ("a", 0, 7), ("b", 0, 7), ("c", 2, 2), ("add", 3, 7), ("neg", 5, 6), ("out", 6, 7)]
    assert (m.xla_peak_time, m.xla_peak_bytes) == (6, 188)
    t = m.timeline()
    # c ends at 2 now: 96, 96, 160, 160, 160, 172, 188, 176.
    assert t.usage_bytes.tolist() == [96, 96, 160, 160, 160, 172, 188, 176]
    assert t.usage_bytes[m.xla_peak_time] == m.xla_peak_bytes == t.peak_bytes
    # The first time of the largest total: 6.
    assert m._peak_time() == 6 and t.peak_event.index == 6
    assert m.buffers_dataset().attrs["xla_peak_bytes"] == 188


@pytest.mark.parametrize("old, new, line, message", [
    ("    c{}:2-2", "    c{}:3-2", 13, "live range c{} ends at 2, before it starts at 3"),
    ("    c{}:2-2", "    c:2-2", 13, "expected 'name{index}:start-end', got 'c:2-2'"),
    ("    c{}:2-2", "    c{}:2-99999999999999999999", 13, "live range time '9999"),
    ("    2:c", "    two:c", 5, "expected '  N:instruction', got 'two:c'"),
    ("    neg{}: 12 bytes (cumulative: 172 bytes)", "    neg{}: 12 bytes", 21,
     "expected 'name{}: N bytes (cumulative: N bytes)', got 'neg{}: 12 bytes'"),
    ("(cumulative: 188 bytes)", "(cumulative: 99999999999999999999 bytes)", 22, "peak bytes '9999"),
    ("HloLiveRange (max 7):", "HloLiveRange (max 99999999999999999999):", 1, "HloLiveRange max '9999"),
    ("Live ranges at 6 (peak)", "Live ranges at 99999999999999999999 (peak)", 17, "peak time '9999"),
])
def test_bad_live_range_lines(tmp_path, old, new, line, message):
    assert LIVE_RANGE.count(old) == 1
    folder = write_dump(tmp_path)
    (folder / "module_0003.jit_f.cpu_after_optimizations-live-range.txt").write_text(LIVE_RANGE.replace(old, new))
    with pytest.raises(XlaDumpError, match=re.escape(message)) as raised:
        read_xla_dump(folder)
    assert raised.value.line == line and raised.value.path.endswith("-live-range.txt")


def test_allocation_kinds():
    assert ALLOCATION_KINDS == ("parameter", "constant", "output", "temp", "preallocated-temp", "thread-local")


# ======================================================================================
# Pinned by mutation testing (tools/mutation.py): each test below fails on a mutant
# that the tests above let through; the values are worked out by hand in the comments.
# ======================================================================================
def test_records_are_frozen_and_the_views_name_their_coords(module):
    with pytest.raises(dataclasses.FrozenInstanceError):
        module.instructions[0].name = "q"
    with pytest.raises(dataclasses.FrozenInstanceError):
        module.allocations[0].size = 1
    # The shape coord is each leaf's text (not its tuple index nor its Shape).
    assert module.instructions_dataset()["shape"].values.tolist() == [
        "f32[2]{0}", "f32[2]{0}", "f32[4,4]{1,0}", "s32[3]{0:T(8)}", "f32[4,4]{1,0}", "f32[4,4]{1,0}", "token[]",
        "s32[3]{0}", "f32[4,4]{1,0}", "s32[3]{0}"]
    timeline = module.timeline()
    # Each interval's end_s is one past its last live time: a 0-7 -> 0.0-8.0, c 2-3 -> 2.0-4.0 ...
    assert [(iv.start_s, iv.end_s) for iv in timeline.intervals] == [
        (0.0, 8.0), (0.0, 8.0), (2.0, 4.0), (3.0, 8.0), (5.0, 7.0), (6.0, 8.0)]
    usage = timeline.usage()
    assert usage["start_s"].dims == ("event",) and usage["end_s"].dims == ("event",)
    assert usage["end_s"].values.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def test_numbers_in_error_messages_are_cut_to_30_characters(tmp_path):
    # repr of the 40 digits is 42 characters: shown() keeps 27 of them ("'" and 26 digits) and "...".
    buffers = BUFFERS.replace("allocation 4: size 12:", "allocation 4: size 1234567890123456789012345678901234567890:")
    with pytest.raises(XlaDumpError) as raised:
        read_xla_dump(write_dump(tmp_path, buffers=buffers))
    assert raised.value.reason == ("allocation size '12345678901234567890123456... is not a number that fits int64 "
                                   "(XLA writes int64 values)")


def test_a_module_number_past_int64_names_the_file_and_no_line(tmp_path):
    folder = write_dump(tmp_path, buffers=None, report=None, number="123456789012345678901")
    file = folder / "module_123456789012345678901.jit_f.cpu_after_optimizations.txt"
    with pytest.raises(XlaDumpError) as raised:
        read_xla_dump(folder)
    assert (raised.value.path, raised.value.line) == (str(file), None)
    assert str(raised.value).startswith(f"{file}: module number '123456789012345678901' is not a number that fits")


@pytest.mark.parametrize("file, old, new, shown", [
    # Inside a computation: 80 g's of the 100 characters.
    ("hlo", "  %tok = token[] after-all()", "  " + "g" * 80 + "h" * 20,
     "expected an instruction 'name = shape opcode(...)' in computation 'main', got '" + "g" * 80 + "'"),
    # An allocation line that does not parse: "allocation 4: size " (19 characters) and 61 t's.
    ("buffers", "allocation 4: size 12:", "allocation 4: size " + "t" * 80,
     "expected 'allocation N: size S, ...:' or ' value: <id name @color> (size=S,offset=O): shape', got "
     "'allocation 4: size " + "t" * 61 + "'"),
    # A live range that does not parse: 80 c's of the 100 characters.
    ("live-range", "    c{}:2-2", "    " + "c" * 80 + "d" * 20, "expected 'name{index}:start-end', got '" + "c" * 80 + "'"),
])
def test_bad_lines_are_shown_to_80_characters(tmp_path, file, old, new, shown):
    texts = {"hlo": HLO, "buffers": BUFFERS, "live-range": LIVE_RANGE}
    assert texts[file].count(old) == 1
    texts[file] = texts[file].replace(old, new)
    folder = write_dump(tmp_path, hlo=texts["hlo"], buffers=texts["buffers"])
    (folder / "module_0003.jit_f.cpu_after_optimizations-live-range.txt").write_text(texts["live-range"])
    with pytest.raises(XlaDumpError) as raised:
        read_xla_dump(folder)
    assert raised.value.reason == shown


def test_a_computation_off_the_main_thread_ends_at_its_brace(tmp_path):
    # XLA's HloComputation::Print writes '}, execution_thread="..."' after a computation of
    # another thread (and '} // name' with print_name_after_closing_brace): helper ends
    # there and main is read after it.
    hlo = HLO.replace("  ROOT %neg.9 = f32[2]{0} negate(%p)\n}\n", "  ROOT %neg.9 = f32[2]{0} negate(%p)\n"
                      '}, execution_thread="sparsecore"\n')
    m = read_xla_dump(write_dump(tmp_path / "thread", hlo=hlo)).module(3)
    assert [(i.name, i.computation) for i in m.instructions[:3]] == [("p", "helper"), ("neg.9", "helper"),
                                                                      ("a", "main")]
    assert len(m.instructions) == 9
    named = HLO.replace("  ROOT %neg.9 = f32[2]{0} negate(%p)\n}\n", "  ROOT %neg.9 = f32[2]{0} negate(%p)\n"
                        "} // helper\n")
    assert len(read_xla_dump(write_dump(tmp_path / "named", hlo=named)).module(3).instructions) == 9


def test_a_brace_followed_by_anything_else_is_not_an_end(tmp_path):
    # Inside main, "}x" and a line of another character than an instruction's are neither
    # an end nor an instruction: they raise, naming the line, instead of ending main there.
    for bad in ("}x", "~ %a = f32[] parameter(0)"):
        hlo = HLO.replace("  %tok = token[] after-all()", bad)
        with pytest.raises(XlaDumpError, match=re.escape(f"in computation 'main', got {bad!r}")) as raised:
            read_xla_dump(write_dump(tmp_path / "bad", hlo=hlo))
        assert raised.value.line == 14


def test_sections_of_one_file_after_the_stack_trace_breakdown(tmp_path):
    # Older XLA writes the live ranges inside the buffer-assignment file. The stack trace
    # breakdown is skipped, a value-shaped line in it included (only BufferAssignment has
    # values), and the "Used values" after it are still read.
    breakdown = "  a{}: nothing read here\n"
    live_range = LIVE_RANGE.replace(breakdown, breakdown + "   value: <9 z @0> (size=4,offset=0): f32[]\n")
    before, after = BUFFERS.split("Used values:")
    m = read_xla_dump(write_dump(tmp_path, buffers=before + live_range + "\nUsed values:" + after)).module(3)
    assert m.live_range_source == "HloLiveRange" and (m.xla_peak_time, m.xla_peak_bytes) == (6, 188)
    assert [(v.label, v.start, v.end, v.uses) for v in m.values] == [
        ("a", 0, 7, ("add",)), ("b", 0, 7, ()), ("c", 2, 2, ("add",)), ("add", 3, 7, ("out",)),
        ("neg", 5, 6, ("out",)), ("out", 6, 7, ()), ("p", -1, -1, ()), ("neg.9", -1, -1, ())]


def test_lines_outside_the_sections_read_are_skipped(tmp_path):
    # A line before the first section and one between "HloLiveRange (max 7):" and its
    # InstructionSequence belong to no section these readers parse.
    folder = write_dump(tmp_path, buffers="XLA buffer assignment of jit_f\n" + BUFFERS)
    live_range = LIVE_RANGE.replace("  InstructionSequence:", "  schedule of 7 instructions\n  InstructionSequence:")
    (folder / "module_0003.jit_f.cpu_after_optimizations-live-range.txt").write_text(live_range)
    m = read_xla_dump(folder).module(3)
    assert len(m.allocations) == 9 and len(m.values) == 8 and m.memory_report[0]["size"] == "64B"
    assert m.sequence == ("a", "b", "c", "add", "tok", "neg", "out")


def test_a_bare_name_under_uses_is_neither_a_use_nor_a_position(tmp_path):
    # "  out" under c's uses has no ", operand N": it ends the listing. Were it read as a
    # position at the ROOT, c would live to the end (7) instead of its last use, add (3).
    buffers = BUFFERS.replace("  add, operand 1\n", "  add, operand 1\n  out\n")
    assert buffers.count("  out\n") == 1
    m = read_xla_dump(write_dump(tmp_path, buffers=buffers)).module(3)
    assert [(v.label, v.start, v.end, v.uses) for v in m.values[:4]] == [
        ("a", 0, 7, ("add",)), ("b", 0, 7, ()), ("c", 2, 3, ("add",)), ("add", 3, 7, ("out",))]


def test_values_of_zero_and_one_byte_and_a_one_element_tuple(tmp_path):
    # Allocation 8 gets four values: z f32[0] (0 bytes: no padding fraction, and no 0/0
    # warning), flag pred[] (1 byte, no padding: fraction 0.0), one (f32[4,4]) a tuple of
    # one array and none () the empty tuple (no layout: NaN); and b is given 64 bytes,
    # more than scwork's 32.
    buffers = BUFFERS.replace("allocation 8: size 4, constant:\n", "allocation 8: size 4, constant:\n"
                              " value: <9 z @0> (size=0,offset=0): f32[0]{0}\n"
                              " value: <10 flag @0> (size=1,offset=0): pred[]\n"
                              " value: <11 one{} @0> (size=8,offset=0): (f32[4,4]{1,0})\n"
                              " value: <12 none{} @0> (size=0,offset=0): ()\n")
    buffers = buffers.replace("<1 b @0> (size=32,", "<1 b @0> (size=64,")
    m = read_xla_dump(write_dump(tmp_path, buffers=buffers)).module(3)
    assert [v.label for v in m.values[8:]] == ["z", "flag", "one", "none"]
    assert m.values[10].shape is None and m.values[11].shape is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = m.buffers_dataset()
    padded = ds["padded_bytes"].values
    assert padded[8:10].tolist() == [0.0, 1.0] and math.isnan(padded[10]) and math.isnan(padded[11])
    fraction = ds["padding_fraction"].values
    assert math.isnan(fraction[8]) and fraction[9] == 0.0 and math.isnan(fraction[10]) and math.isnan(fraction[11])
    assert ds["layout_matches_size"].values.tolist() == [True, False, True, True, True, False, True, True,
                                                         True, True, False, False]
    assert m.allocations_dataset()["num_values"].values.tolist() == [1, 1, 1, 1, 1, 1, 1, 1, 4]


def sized_module(folder: Path, ranges, *, schedule_end: int | None, steps: int) -> HloModuleDump:
    """A module of s8[n] values in allocations of their own, with HloLiveRange's ranges (no HLO file)."""
    folder.mkdir(parents=True)
    lines = ["BufferAssignment:"]
    for k, (name, size, _, _) in enumerate(ranges):
        lines += [f"allocation {k}: size {size}:", f" value: <{k} {name} @0> (size={size},offset=0): s8[{size}]{{0}}"]
    (folder / "module_0001.jit_g.cpu_after_optimizations-buffer-assignment.txt").write_text("\n".join(lines) + "\n")
    live = [] if schedule_end is None else [f"HloLiveRange (max {schedule_end}):"]
    live += ["  InstructionSequence:", *(f"    {t}:i{t}" for t in range(steps)), "  BufferLiveRange:",
             *(f"    {name}{{}}:{start}-{end}" for name, _, start, end in ranges)]
    (folder / "module_0001.jit_g.cpu_after_optimizations-live-range.txt").write_text("\n".join(live) + "\n")
    return read_xla_dump(folder).module(1)


def test_the_peak_is_the_first_time_of_the_largest_total(tmp_path):
    # x 2 B at 1, z 4 B at 4, y 3 B at 2-4, w 4 B at 0-2 (in this order in the file).
    # Live bytes per time: 4, 6, 7 (w + y), 3, 7 (y + z): the peak 7 is first reached at 2.
    m = sized_module(tmp_path / "tie", [("x", 2, 1, 1), ("z", 4, 4, 4), ("y", 3, 2, 4), ("w", 4, 0, 2)],
                     schedule_end=4, steps=5)
    assert m._peak_time() == 2
    assert m.buffers_dataset()["live_at_peak"].values.tolist() == [False, False, True, True]
    t = m.timeline()
    assert t.usage_bytes.tolist() == [4, 6, 7, 3, 7] and t.peak_event.index == 2
    # Only zero-byte values: every total is 0, the peak is at time 0 (nothing is live there).
    m = sized_module(tmp_path / "zero", [("e", 0, 2, 3)], schedule_end=4, steps=5)
    assert m._peak_time() == 0 and m.timeline().peak_event.index == 0
    assert m.buffers_dataset()["live_at_peak"].values.tolist() == [False]
    # One byte at 2-3: the peak is 1 byte at time 2.
    m = sized_module(tmp_path / "one", [("o", 1, 2, 3)], schedule_end=4, steps=5)
    assert m._peak_time() == 2 and m.timeline().peak_event.index == 2
    assert m.buffers_dataset()["live_at_peak"].values.tolist() == [True]


def test_schedule_steps_run_to_the_last_time_anything_is_live(tmp_path):
    # HloLiveRange's max 9 past a schedule of 7 whose values end by 7: times 0 to 9,
    # times 7, 8 and 9 are the program's end, with nothing live at 8 and 9.
    folder = write_dump(tmp_path / "max9")
    (folder / "module_0003.jit_f.cpu_after_optimizations-live-range.txt").write_text(
        LIVE_RANGE.replace("HloLiveRange (max 7):", "HloLiveRange (max 9):"))
    m = read_xla_dump(folder).module(3)
    t = m.timeline()
    assert [e.name for e in t.events] == ["a", "b", "c", "add", "tok", "neg", "out"] + ["program end"] * 3
    assert t.usage_bytes.tolist() == [96, 96, 160, 160, 160, 172, 188, 176, 0, 0]
    with pytest.raises(XlaDumpError, match=re.escape("would have 10 schedule steps, more than "
                                                     "max_schedule_steps=9")):
        m.timeline(max_schedule_steps=9)
    # A live range past HloLiveRange's max 7 (out to 9): times 0 to 9, out's 16 bytes at 8 and 9.
    folder = write_dump(tmp_path / "past")
    (folder / "module_0003.jit_f.cpu_after_optimizations-live-range.txt").write_text(
        LIVE_RANGE.replace("    out{}:6-7", "    out{}:6-9"))
    t = read_xla_dump(folder).module(3).timeline()
    assert len(t.events) == 10 and t.usage_bytes.tolist() == [96, 96, 160, 160, 160, 172, 188, 176, 16, 16]
    # A one-instruction schedule, HloLiveRange (max 0): one step, time 0.
    m = sized_module(tmp_path / "single", [("s", 4, 0, 0)], schedule_end=0, steps=1)
    t = m.timeline(max_schedule_steps=1)
    assert [(e.index, e.name) for e in t.events] == [(0, "i0")] and t.usage_bytes.tolist() == [4]
