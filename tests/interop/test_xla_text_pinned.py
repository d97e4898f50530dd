"""XLA's text outside a dump folder (scwork.interop._xla_text), by hand.

tests/interop/test_xla_dump.py reads real messages and dumps; this file pins the
pieces with values worked out by hand: printed sizes and the byte range each stands
for (XLA's ``HumanReadableNumBytes``: powers of 1024, 1 or 2 decimals), the tuple-shape
scanner of HLO text, bounded file reading, and out-of-memory messages written out line
by line with scwork's check of each allocation at and just past its boundaries
(printed size, padding, expansion within 0.05).

Shapes used (scwork.layout, f32 = 4 bytes):

* ``f32[2,128]{1,0:T(8,128)}``: 256 elements, 1,024 bytes unpadded, one (8, 128)
  tile: 4,096 bytes padded, 3,072 of padding, 4.0x.
* ``f32[8,128]{1,0:T(8,128)}``: 4,096 bytes, no padding.
* ``f32[3,5]{1,0}``: no tiling, 60 bytes.
* ``pred[16]{0:E(32)}``: 16 elements of 32 bits: 64 bytes (the natural byte each: 16).
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from scwork.errors import XlaDumpError
from scwork.interop._xla_text import (
    MAX_FILE_BYTES,
    OomAllocation,
    PaddingCheck,
    _check_max_bytes,
    _layout,
    _padding_of,
    _printed_bytes,
    _read_text,
    _scan_shape,
    _skip_blank,
    parse_oom_message,
    read_oom_message,
)
from scwork.layout import parse

K, M, G = 1024, 1024**2, 1024**3


# -- printed sizes -----------------------------------------------------------------


@pytest.mark.parametrize("text, value, low, high", [
    ("512B", 512, 512, 512), ("0B", 0, 0, 0), ("512", 512, 512, 512), (" 7B ", 7, 7, 7),
    # 1.5K: 1.45K to 1.55K, plus one byte (XLA divides by 1024 in whole steps).
    ("1.5K", 1.5 * K, 1.45 * K, 1.55 * K + 1),
    # Two decimals: half a hundredth either side; the step below M is 1 K.
    ("124.00M", 124 * M, 123.995 * M, 124.005 * M + K),
    # No decimals: half a unit either side.
    ("2G", 2 * G, 1.5 * G, 2.5 * G + M),
    ("1.00GiB", G, 0.995 * G, 1.005 * G + M), ("3KB", 3 * K, 2.5 * K, 3.5 * K + 1), ("1.0 K", K, 0.95 * K, 1.05 * K + 1),
    ("1T", 1024**4, 0.5 * 1024**4, 1.5 * 1024**4 + G), ("1P", 1024**5, 0.5 * 1024**5, 1.5 * 1024**5 + 1024**4),
    ("1E", 1024**6, 0.5 * 1024**6, 1.5 * 1024**6 + 1024**5),
])
def test_printed_sizes_and_their_byte_ranges(text, value, low, high):
    got = _printed_bytes(text, "log.txt", 3)
    assert got == pytest.approx((value, low, high), rel=1e-15, abs=0)


@pytest.mark.parametrize("text", ["12.3Q", "lots", "-1K", "", "1.5.0K", "K", "1.5KK", "\u0661\u0662K", "1" * 41,
                                  "1.5 MB B"])
def test_unreadable_sizes(text):
    with pytest.raises(XlaDumpError, match=re.escape("cannot read size")) as raised:
        _printed_bytes(text, "log.txt", 3)
    assert (raised.value.path, raised.value.line) == ("log.txt", 3)
    assert "sizes look like 512B, 1.5K, 124.00M, 2.00G" in str(raised.value)


def test_only_the_digits_must_be_ascii():
    # The digits must be ASCII (\d also reads other scripts' digits); the space before the
    # unit is any whitespace the pattern reads, a no-break space included.
    assert _printed_bytes("1\u00a0K", "x", 1) == (1024.0, 512.0, 1537.0)


def test_long_sizes_are_cut_to_60_characters_in_messages():
    with pytest.raises(XlaDumpError) as raised:
        _printed_bytes("x" * 100, "log.txt", 3)
    assert "cannot read size '" + "x" * 56 + "..." in str(raised.value) and "x" * 57 not in str(raised.value)
    with pytest.raises(XlaDumpError) as raised:
        _printed_bytes("y" * 58, "log.txt", 3)
    assert "cannot read size '" + "y" * 58 + "'" in str(raised.value)


def test_forty_digits_are_read():
    # Forty digits and a unit: the digits are counted, not the unit.
    assert _printed_bytes("1" * 40 + "K", "x", 1)[0] == float("1" * 40) * 1024
    assert _printed_bytes("1" * 40, "x", 1)[0] == float("1" * 40)


# -- shapes in HLO text -------------------------------------------------------------


def test_scan_one_array_shape():
    assert _scan_shape("f32[8,128]{1,0}", 0) == ([((), "f32[8,128]{1,0}")], 15)
    assert _scan_shape("s32[]", 0) == ([((), "s32[]")], 5)
    # From a position inside an instruction; the layout's braces end the shape.
    text = "%x = f32[8]{0:T(8)} add(%a, %b)"
    assert _scan_shape(text, 5) == ([((), "f32[8]{0:T(8)}")], 19)
    # Nested braces in the layout are counted.
    assert _scan_shape("u8[2]{0{1}}rest", 0) == ([((), "u8[2]{0{1}}")], 11)
    assert _scan_shape("bf16[4] x", 0) == ([((), "bf16[4]")], 7)        # no layout


def test_scan_tuple_shapes():
    text = "(f32[2]{0}, (s32[], pred[4]{0}), ())"
    assert _scan_shape(text, 0) == ([((0,), "f32[2]{0}"), ((1, 0), "s32[]"), ((1, 1), "pred[4]{0}")], len(text))
    assert _scan_shape("()", 0) == ([], 2)
    assert _scan_shape("(  )x", 0) == ([], 4)
    # XLA's /*index=N*/ comments inside long tuples.
    text = "(f32[1]{0}, /*index=1*/s32[2]{0} , /*index=2*/ u8[3]{0})"
    assert _scan_shape(text, 0) == ([((0,), "f32[1]{0}"), ((1,), "s32[2]{0}"), ((2,), "u8[3]{0}")], len(text))
    assert _scan_shape("(f32[1]{0})", 0, (4,)) == ([((4, 0), "f32[1]{0}")], 11)
    # No space after the commas.
    assert _scan_shape("(f32[1]{0},s32[2]{0},u8[])", 0) == (
        [((0,), "f32[1]{0}"), ((1,), "s32[2]{0}"), ((2,), "u8[]")], 26)


@pytest.mark.parametrize("text, message", [
    ("(f32[2]{0} s32[]", "expected ',' or ')' at column 12 of the tuple shape"),
    ("(f32[2]{0}", "expected ',' or ')' at column 11 of the tuple shape"),
    ("xyz", "expected a shape such as f32[8,128]{1,0} at column 1"),
    ("(f32[1]{0}, 7)", "expected a shape such as f32[8,128]{1,0} at column 13"),
    ("f32[8", "unclosed '[' at column 4"),
    ("f32[8]{1,0", "unclosed '{' at column 7"),
    ("f32[8]{1{0}", "unclosed '{' at column 7"),
])
def test_scan_errors_name_the_column(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _scan_shape(text, 0)


def test_tuples_of_2_to_the_20_elements_are_read():
    assert len(_scan_shape("(" + "u8[1]," * (2**20 - 1) + "u8[1])", 0)[0]) == 2**20


def test_tuples_of_more_than_2_to_the_20_elements_are_refused():
    # One more is refused (it was once read as a single leaf). The refusal names the
    # column after 1 + 6 x 2**20 characters.
    with pytest.raises(ValueError, match=re.escape("a tuple shape of more than 1,048,576 elements (column 6291458)")):
        _scan_shape("(" + "u8[1]," * 2**20 + "u8[1])", 0)


def test_skip_blank():
    assert _skip_blank("   x", 0) == 3
    assert _skip_blank("a /*c*/ /**/b", 1) == 12
    assert _skip_blank("x/* never closed", 1) == 16
    assert _skip_blank("x\ty", 1) == 1                 # only spaces and comments
    assert _skip_blank("x", 1) == 1 and _skip_blank("", 0) == 0


def test_layouts_of_leaves():
    assert _layout("token[]") is None and _layout("TOKEN[]") is None and _layout("opaque[]") is None
    assert _layout("f32[2,128]{1,0:T(8,128)}") == parse("f32[2,128]{1,0:T(8,128)}")
    assert len(_padding_of(None)) == 2 and all(math.isnan(x) for x in _padding_of(None))
    assert _padding_of(parse("f32[2,128]{1,0:T(8,128)}")) == (4096.0, 1024.0)


# -- reading files -------------------------------------------------------------------


def test_max_file_bytes_checks():
    assert MAX_FILE_BYTES == 67_108_864                  # 64 MiB
    _check_max_bytes(1)
    for bad in (0, -1, True, 1.0, "10", None):
        with pytest.raises(XlaDumpError, match=re.escape(f"max_file_bytes must be a positive int, got {bad!r}")):
            _check_max_bytes(bad)


def test_read_text_at_and_past_the_limit(tmp_path):
    path = tmp_path / "m.txt"
    path.write_bytes(b"0123456789")
    assert _read_text(path, 10) == "0123456789"          # exactly the limit
    assert _read_text(path, 11) == "0123456789" and _read_text(path, 2**64) == "0123456789"
    with pytest.raises(XlaDumpError, match=re.escape("file is 10 bytes, more than max_file_bytes=9")) as raised:
        _read_text(path, 9)
    assert raised.value.path == str(path) and "--xla_dump_hlo_module_re" in str(raised.value)
    path.write_bytes(b"ok \xff\xfe end")                   # not UTF-8: replaced, not refused
    assert _read_text(path, 100) == "ok \ufffd\ufffd end"
    path.write_bytes(b"")
    assert _read_text(path, 1) == ""
    with pytest.raises(XlaDumpError, match="cannot read: No such file or directory") as raised:
        _read_text(tmp_path / "missing.txt", 10)
    assert "Errno" not in str(raised.value)          # the reason, not the exception's repr
    assert raised.value.path == str(tmp_path / "missing.txt")


class GrowingFile(Path):
    """A file whose stat() tells a size it had before it grew (the race of a file XLA still writes)."""

    told = 0

    def stat(self, **kwargs):
        return SimpleNamespace(st_size=self.told)


def test_a_file_that_grows_while_it_is_read(tmp_path):
    (tmp_path / "m.txt").write_bytes(b"0123456789")
    grown = GrowingFile(tmp_path / "m.txt")
    # 5 bytes when asked, 10 when read: at most 6 are read, more than the 5 told.
    grown.told = 5
    with pytest.raises(XlaDumpError, match="the file grew while it was read") as raised:
        _read_text(grown, 100)
    assert "read it once XLA has finished" in str(raised.value)
    # 8 bytes told, exactly the limit: 9 are read, more than the limit.
    grown.told = 8
    with pytest.raises(XlaDumpError, match=re.escape("file is more than max_file_bytes=8 bytes")) as raised:
        _read_text(grown, 8)
    assert "--xla_dump_hlo_module_re" in str(raised.value)
    # Told its real size: read whole.
    grown.told = 10
    assert _read_text(grown, 10) == "0123456789"
    # 9 bytes told, 10 allowed, 10 there: one byte past the size told is read (10, not
    # 11), so the file grew, and is not yet more than the limit.
    grown.told = 9
    (tmp_path / "m.txt").write_bytes(b"0123456789A")
    with pytest.raises(XlaDumpError, match="the file grew while it was read"):
        _read_text(grown, 10)
    (tmp_path / "m.txt").write_bytes(b"0123456789")
    # Told more than there is (it shrank): what is there is read.
    grown.told = 20
    assert _read_text(grown, 100) == "0123456789"


def test_read_oom_message_of_a_file(tmp_path):
    path = tmp_path / "oom.txt"
    path.write_text("  1. Size: 4.0K\n     Shape: f32[2,128]{1,0:T(8,128)}\n")
    report = read_oom_message(path, max_file_bytes=path.stat().st_size)
    assert report.source == str(path) and report.allocations[0].source == str(path)
    with pytest.raises(XlaDumpError, match="max_file_bytes must be a positive int, got 0"):
        read_oom_message(path, max_file_bytes=0)
    with pytest.raises(XlaDumpError, match=re.escape(f"more than max_file_bytes={path.stat().st_size - 1}")):
        read_oom_message(path, max_file_bytes=path.stat().st_size - 1)


# -- out-of-memory messages ----------------------------------------------------------


MESSAGE = """\
Compilation failure: Ran out of memory in memory space vmem. Used 20.00M of 16.00M vmem. Exceeded vmem capacity by 4.0M.
    HLO temp   19.00M (50.0% utilization: Unpadded (9.50M) Padded (19.00M), 0.0% fragmentation (0B))
  Largest program allocations in vmem:

  1. Size: 4.0K
     Operator: op_type="Add" op_name="add"
     Shape: f32[2,128]{1,0:T(8,128)}
     Unpadded size: 1.0K
     Extra memory due to padding: 3.0K (4.0x expansion)
     XLA label: %add.1 = f32[2,128]{1,0:T(8,128)} add(...)
     Allocation type: HLO temp
     ==========================
     Shape: f32[1]{0}
  2. Size: 60B
     Shape: f32[3,5]{1,0}
     ===
     Operator:(XLA label: inside)
  12. Size: 29.66M
     XLA label: register allocator spill slots
     Allocation type: scoped
     =====
"""


def test_a_message_read_line_by_line():
    report = parse_oom_message(MESSAGE, source="vmem.log")
    assert (report.memory_space, report.used_text, report.capacity_text, report.exceeded_text) == (
        "vmem", "20.00M", "16.00M", "4.0M")
    assert (report.hlo_temp_unpadded_text, report.hlo_temp_padded_text) == ("9.50M", "19.00M")
    assert report.source == "vmem.log"
    one, two, twelve = report.allocations
    assert one == OomAllocation(
        rank=1, size_text="4.0K", size_bytes=4096.0, shape_text="f32[2,128]{1,0:T(8,128)}", unpadded_text="1.0K",
        unpadded_bytes=1024.0, padding_text="3.0K", padding_bytes=3072.0, expansion=4.0,
        operator='op_type="Add" op_name="add"', label="%add.1 = f32[2,128]{1,0:T(8,128)} add(...)",
        allocation_type="HLO temp", source="vmem.log", line=5)
    # The Shape line after the ===== rule belongs to no allocation; "===" is no rule (five
    # or more); a key must start the line or follow a space ("(XLA label:" is no label),
    # and the text right after "Operator:" is its value.
    assert two == OomAllocation(rank=2, size_text="60B", size_bytes=60.0, shape_text="f32[3,5]{1,0}",
                                operator="(XLA label: inside)", source="vmem.log", line=14)
    assert (twelve.rank, twelve.size_bytes, twelve.label, twelve.allocation_type, twelve.line) == (
        12, 29.66 * M, "register allocator spill slots", "scoped", 18)
    assert twelve.shape_text is None and twelve.unpadded_bytes is None and twelve.expansion is None


def test_the_checks_of_a_message():
    report = parse_oom_message(MESSAGE, source="vmem.log")
    (one, check_one), (two, check_two) = report.checks()
    assert check_one == PaddingCheck(4096, 1024, 3072, True, True, True, True, "")
    assert check_one.matches
    # f32[3,5] printed without tiling: 60 bytes, and XLA counts 60B: no padding line, no padding.
    assert check_two == PaddingCheck(60, 60, 0, True, True, True, True, "")
    assert report.mismatches() == [] and report.unparsed() == []
    ds = report.to_dataset()
    assert ds["buffer"].values.tolist() == [1, 2, 12] and ds["line"].values.tolist() == [5, 14, 18]
    assert ds["size_bytes"].values.tolist() == [4096.0, 60.0, 29.66 * M]
    assert ds["unpadded_bytes"].values[0] == 1024.0 and np.isnan(ds["unpadded_bytes"].values[1:]).all()
    # No padding line: 0 with an "Unpadded size" line, NaN without one.
    assert ds["padding_bytes"].values[0] == 3072.0 and np.isnan(ds["padding_bytes"].values[1:]).all()
    assert ds["expansion"].values[0] == 4.0
    assert ds["scwork_padded_bytes"].values[:2].tolist() == [4096.0, 60.0] and np.isnan(ds["scwork_padded_bytes"][2])
    assert ds["scwork_padding_bytes"].values[:2].tolist() == [3072.0, 0.0]
    assert ds["matches"].values.tolist() == [True, True, False]
    assert ds["shape"].values.tolist() == ["f32[2,128]{1,0:T(8,128)}", "f32[3,5]{1,0}", ""]
    assert ds["operator"].values.tolist() == ['op_type="Add" op_name="add"', "(XLA label: inside)", ""]
    assert ds["allocation_type"].values.tolist() == ["HLO temp", "", "scoped"]
    assert ds.attrs == {"units": "bytes", "memory_space": "vmem", "source": "vmem.log"}


def entry(size="4.0K", shape="f32[2,128]{1,0:T(8,128)}", unpadded=None, padding=None):
    lines = [f"  1. Size: {size}", f"     Shape: {shape}"]
    if unpadded is not None:
        lines.append(f"     Unpadded size: {unpadded}")
    if padding is not None:
        lines.append(f"     Extra memory due to padding: {padding}")
    return parse_oom_message("\n".join(lines) + "\n").allocations[0]


def test_printed_size_at_its_bounds():
    # 4096 B printed exactly; one byte either side is another size.
    assert entry(size="4096B").check().size_matches
    assert not entry(size="4095B").check().size_matches and not entry(size="4097B").check().size_matches
    # 4.0K stands for 4044.8 .. 4148.2 bytes; 3.96K for 4049.92 .. 4062.16: 4096 is outside.
    assert entry(size="4.0K").check().size_matches and not entry(size="3.96K").check().size_matches
    assert not entry(size="4.05K").check().size_matches       # 4142.08 .. 4153.32 bytes: above 4096


def test_unpadded_and_padding_at_their_bounds():
    assert entry(unpadded="1024B").check().unpadded_matches
    assert not entry(unpadded="1023B").check().unpadded_matches
    assert not entry(unpadded="1025B").check().unpadded_matches
    assert entry(unpadded="1024B", padding="3072B (4.0x expansion)").check().padding_matches
    assert not entry(unpadded="1024B", padding="3071B (4.0x expansion)").check().padding_matches
    assert not entry(unpadded="1024B", padding="3073B (4.0x expansion)").check().padding_matches


@pytest.mark.parametrize("expansion, ok", [("4.0", True), ("4.05", True), ("3.95", True), ("4.06", False),
                                           ("3.94", False), ("1.0", False)])
def test_expansion_within_five_hundredths(expansion, ok):
    check = entry(unpadded="1.0K", padding=f"3.0K ({expansion}x expansion)").check()
    assert check.expansion_matches is ok and check.padding_matches
    assert check.matches is ok
    assert check.explanation == ("" if ok else "unexplained: scwork's layout model disagrees with XLA's numbers")


def test_an_expansion_that_is_not_a_whole_number():
    # f32[3,128] in one (8, 128) tile: 4096 of 1536 bytes, 2.667x; printed 2.7x (0.033 off).
    check = entry(shape="f32[3,128]{1,0:T(8,128)}", unpadded="1.5K", padding="2.5K (2.7x expansion)").check()
    assert check.expansion_matches and check.matches
    assert not entry(shape="f32[3,128]{1,0:T(8,128)}", unpadded="1.5K",
                     padding="2.5K (2.0x expansion)").check().expansion_matches


def test_a_padding_line_without_expansion_means_one():
    # "(Nx expansion)" left out: 1.0x expected; the shape's 4.0x is a mismatch.
    e = entry(unpadded="1.0K", padding="3.0K")
    assert e.expansion is None and e.padding_bytes == 3072.0
    assert not e.check().expansion_matches and e.check().padding_matches
    # A shape without padding (f32[8,128] in one tile): 0 padding, 1.0x.
    e = entry(shape="f32[8,128]{1,0:T(8,128)}", unpadded="4.0K", padding="0B")
    assert e.check() == PaddingCheck(4096, 4096, 0, True, True, True, True, "")


def test_no_padding_line():
    # XLA leaves the line out when there is no padding: scwork must see none either.
    assert entry(shape="f32[8,128]{1,0:T(8,128)}", unpadded="4.0K").check().matches
    check = entry(unpadded="1.0K").check()          # f32[2,128] pads 3,072 bytes
    assert (check.padding_matches, check.expansion_matches, check.matches) == (False, False, False)
    assert check.explanation == "unexplained: scwork's layout model disagrees with XLA's numbers"
    # No "Unpadded size" line either: nothing to compare it with.
    check = entry(shape="f32[8,128]{1,0:T(8,128)}").check()
    assert check.unpadded_matches and check.matches


def test_zero_elements():
    # f32[0,4]: 0 bytes; unpadded 0 gives a ratio of 1.0.
    check = entry(size="0B", shape="f32[0,4]{1,0:T(8,128)}", unpadded="0B", padding="0B (1.0x expansion)").check()
    assert check == PaddingCheck(0, 0, 0, True, True, True, True, "")
    # Printed bigger than scwork's 0 bytes, without tiling but with no elements: no explanation found.
    check = entry(size="1.0K", shape="f32[0,4]{1,0}").check()
    assert not check.size_matches
    assert check.explanation == "unexplained: scwork's layout model disagrees with XLA's numbers"


def test_explanations():
    # Printed without tiling: scwork sees 60 bytes where XLA counts 4.0K.
    check = entry(shape="f32[3,5]{1,0}").check()
    assert not check.size_matches
    assert check.explanation == ("the message prints the shape without its tiling, so scwork sees no padding "
                                 "(60 bytes) where XLA counts 4.0K")
    # pred stored as E(32): XLA's unpadded size is the natural byte per element (16 B), scwork's 64 B.
    check = entry(size="64B", shape="pred[16]{0:E(32)}", unpadded="16B").check()
    assert (check.size_matches, check.unpadded_matches, check.padding_matches) == (True, False, True)
    assert check.explanation == ("XLA's 'Unpadded size' counts pred's natural 1 byte(s) per element; scwork's "
                                 "unpadded_bytes counts E(32) bits, so it calls the E() widening no padding")
    # Both at once, joined; a tiled shape that disagrees has neither.
    check = entry(size="4.0K", shape="pred[16]{0:E(32)}", unpadded="16B").check()
    assert check.explanation.startswith("the message prints the shape without its tiling, so scwork sees no "
                                        "padding (64 bytes) where XLA counts 4.0K; XLA's 'Unpadded size' counts")
    # An unpadded size that is not the natural bytes either: unexplained.
    check = entry(size="64B", shape="pred[16]{0:E(32)}", unpadded="32B").check()
    assert check.explanation == "unexplained: scwork's layout model disagrees with XLA's numbers"
    # Without E(): the natural bytes are scwork's own, no such reason.
    check = entry(size="60B", shape="f32[3,5]{1,0}", unpadded="15B").check()
    assert check.explanation == "unexplained: scwork's layout model disagrees with XLA's numbers"
    # f16: 2 natural bytes per element (16 bits / 8); c128: 16 (128 bits / 8), stored as E(256)
    # (2 elements of 32 bytes: 64 B, naturally 32 B).
    check = entry(size="64B", shape="f16[16]{0:E(32)}", unpadded="32B").check()
    assert "counts f16's natural 2 byte(s) per element" in check.explanation
    check = entry(size="64B", shape="c128[2]{0:E(256)}", unpadded="32B").check()
    assert check.explanation == ("XLA's 'Unpadded size' counts c128's natural 16 byte(s) per element; scwork's "
                                 "unpadded_bytes counts E(256) bits, so it calls the E() widening no padding")


def test_shapes_that_cannot_be_checked():
    report = parse_oom_message("  1. Size: 1.0K\n     Shape: token[]\n  2. Size: 1.0K\n     Shape: f32[8]{1,0}\n"
                               "  3. Size: 1.0K\n", source="log.txt")
    token, bad, none = report.allocations
    with pytest.raises(XlaDumpError, match=re.escape("'token[]' has no array layout")) as raised:
        token.shape()
    assert (raised.value.path, raised.value.line) == ("log.txt", 1)
    with pytest.raises(XlaDumpError, match=re.escape("cannot parse shape 'f32[8]{1,0}': Dimensions size is 1, "
                                                     "but minor to major size is 2.")) as raised:
        bad.shape()
    assert raised.value.line == 3 and "errors='collect'" in str(raised.value)
    with pytest.raises(XlaDumpError, match=re.escape("allocation 3 has no Shape line")) as raised:
        none.shape()
    assert raised.value.line == 5 and "spill slots" in str(raised.value)
    # token[] has no array layout: listed with the unparsed shapes, with shape()'s error.
    assert report.checks() == [] and [(a.rank, e.line) for a, e in report.unparsed()] == [(1, 1), (2, 3)]
    assert "no array layout" in str(report.unparsed()[0][1])
    ds = report.to_dataset()
    assert ds["matches"].values.tolist() == [False, False, False]
    assert np.isnan(ds["scwork_padded_bytes"].values).all()


def test_head_lines_alone_and_log_prefixes():
    report = parse_oom_message("Ran out of memory in memory space hbm.  Used 1.00G of 512.00M hbm.\n")
    assert (report.memory_space, report.used_text, report.capacity_text, report.exceeded_text) == (
        "hbm", "1.00G", "512.00M", None)
    assert report.allocations == () and report.hlo_temp_padded_text is None
    # A log prefix ending in "]" before the rule; the entry number after a space.
    text = ("I0101 x.cc:1]   7. Size: 2.0K\nI0101 x.cc:1]      Shape: f32[8,64]{1,0}\nI0101 x.cc:1] =====\n"
            "I0101 x.cc:1]      Unpadded size: 9.9K\n")
    (e,) = parse_oom_message(text).allocations
    assert (e.rank, e.size_bytes, e.shape_text, e.unpadded_text) == (7, 2048.0, "f32[8,64]{1,0}", None)
    # "N. Size:" glued to a word is no entry; the Size must end the line.
    with pytest.raises(XlaDumpError, match="no 'Ran out of memory"):
        parse_oom_message("x7. Size: 1.0K\n  8. Size: 1.0K more\n")


def test_bad_messages():
    with pytest.raises(XlaDumpError, match="text must be a str, got NoneType") as raised:
        parse_oom_message(None, source="src")
    assert raised.value.path == "src"
    with pytest.raises(XlaDumpError, match=re.escape("no 'Ran out of memory in memory space ...' line and no "
                                                     "'N. Size: ...' allocation")) as raised:
        parse_oom_message("", source="empty.log")
    assert raised.value.path == "empty.log" and "pass the whole error text" in str(raised.value)
    # The largest allocation number is int64's largest; one more digit is refused.
    big = parse_oom_message(f"  {2**63 - 1}. Size: 1.0K\n").allocations[0]
    assert big.rank == 2**63 - 1
    with pytest.raises(XlaDumpError, match=re.escape("allocation number '9223372036854775808' is not a plain number "
                                                     "of at most 19 digits")):
        parse_oom_message(f"  {2**63}. Size: 1.0K\n")
    with pytest.raises(XlaDumpError, match=re.escape("'Extra memory due to padding:' has no size")) as raised:
        parse_oom_message("  1. Size: 1.0K\n\n     Extra memory due to padding:\n")
    assert raised.value.line == 3 and "(1.0x expansion)" in str(raised.value)
    # The expansion as printed: at most 40 ASCII characters.
    e = parse_oom_message("  1. Size: 1.0K\n  Extra memory due to padding: 1.0K (" + "1" * 40 + "x expansion)\n")
    assert e.allocations[0].expansion == float("1" * 40)
    with pytest.raises(XlaDumpError, match="cannot read the expansion") as raised:
        parse_oom_message("  1. Size: 1.0K\n  Extra memory due to padding: 1.0K (" + "1" * 41 + "x expansion)\n")
    assert raised.value.line == 2


def test_long_or_non_ascii_expansions_are_refused_and_cut_to_40_characters():
    padding = "  1. Size: 1.0K\n  Extra memory due to padding: 1.0K ({}x expansion)\n"
    with pytest.raises(XlaDumpError) as raised:
        parse_oom_message(padding.format("1" * 100))
    assert "cannot read the expansion '" + "1" * 36 + "..." in str(raised.value)
    # 38 Arabic-Indic digits (read by \d, refused as not ASCII): a repr of 40, shown whole.
    digits = "\u0661" * 38
    with pytest.raises(XlaDumpError) as raised:
        parse_oom_message(padding.format(digits))
    assert f"cannot read the expansion '{digits}'" in str(raised.value)


def test_no_padding_line_is_zero_padding_when_the_unpadded_size_is_printed():
    ds = parse_oom_message("  1. Size: 4.0K\n  Unpadded size: 4.0K\n  2. Size: 1.0K\n").to_dataset()
    assert ds["padding_bytes"].values[0] == 0.0 and np.isnan(ds["padding_bytes"].values[1])


def test_an_allocation_built_by_hand():
    a = OomAllocation(3, "1.0K", 1024.0)
    assert (a.shape_text, a.unpadded_bytes, a.padding_bytes, a.expansion, a.source, a.line) == (
        None, None, None, None, "<text>", 0)


def test_reports_are_frozen():
    report = parse_oom_message(MESSAGE)
    for obj, field in ((report, "memory_space"), (report.allocations[0], "rank"),
                       (report.checks()[0][1], "size_matches")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, None)


def test_long_allocation_numbers_are_cut_to_30_characters():
    with pytest.raises(XlaDumpError) as raised:
        parse_oom_message("  " + "9" * 100 + ". Size: 1.0K\n")
    assert "allocation number '" + "9" * 26 + "... is not a plain number of at most 19 digits" in str(raised.value)
    with pytest.raises(XlaDumpError) as raised:
        parse_oom_message("  " + "9" * 28 + ". Size: 1.0K\n")
    assert "allocation number '" + "9" * 28 + "' is not" in str(raised.value)


def test_lines_after_an_entrys_rule_are_not_its_fields():
    text = ("  1. Size: 1.0K\n     Shape: f32[1]{0}\n     =====\n  2. Size: 2.0K\n     =====\n"
            "     Shape: f32[2]{0}\nfoo Shape: f32[3]{0}\n")
    one, two = parse_oom_message(text).allocations
    assert (one.shape_text, two.shape_text) == ("f32[1]{0}", None)
    # A key after a space is read whatever comes before the space.
    (e,) = parse_oom_message("  1. Size: 1.0K\nfoo Shape: f32[3]{0}\n").allocations
    assert e.shape_text == "f32[3]{0}"


def test_one_field_per_line_the_first_key_found():
    # A label that holds another key's words: the whole rest is the label.
    (e,) = parse_oom_message("  1. Size: 1.0K\n     XLA label: fusion Allocation type: temp Shape: f32[1]{0}\n"
                             ).allocations
    assert (e.label, e.allocation_type, e.shape_text) == ("fusion Allocation type: temp Shape: f32[1]{0}", None, None)


def test_field_keys_at_the_start_of_a_line_or_after_a_space():
    # Without indentation, at column 0, a key is read; glued to a letter before it, not.
    (e,) = parse_oom_message("1. Size: 4.0K\nShape: f32[2,128]{1,0:T(8,128)}\nxUnpadded size: 1.0K\n").allocations
    assert (e.shape_text, e.unpadded_text) == ("f32[2,128]{1,0:T(8,128)}", None)
