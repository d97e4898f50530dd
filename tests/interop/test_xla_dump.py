"""scwork.interop.xla_dump: a real ``--xla_dump_to`` folder of jax on CPU, hand-written
TPU-style dump files, and TPU out-of-memory messages quoted from public issue threads
(tests/interop/data, each file names its thread)."""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from scwork.errors import InputError, XlaDumpError
from scwork.interop import xla_dump
from scwork.interop.xla_dump import (
    ALLOCATION_KINDS,
    MeasuredTimeline,
    parse_oom_message,
    read_oom_message,
    read_xla_dump,
)
from scwork.memory.timeline import Interval, Timeline

DATA = Path(__file__).parent / "data"
TPU_STYLE = DATA / "tpu_style_dump"

# A jitted matmul and reduce, as the brief of the reader asks; sizes by hand:
# a f32[64,32] = 8192 bytes, b f32[32,16] = 2048, a @ b f32[64,16] = 4096.
PROGRAM = textwrap.dedent("""
    import jax, jax.numpy as jnp

    @jax.jit
    def step(a, b):
        c = a @ b
        return jnp.sum(jnp.tanh(c), axis=0), c.T * 2

    out = step(jnp.ones((64, 32), jnp.float32), jnp.ones((32, 16), jnp.float32))
    jax.block_until_ready(out)
""")


@pytest.fixture(scope="module")
def cpu_dump(tmp_path_factory) -> Path:
    """The folder jax 0.12 (CPU) writes for PROGRAM with XLA_FLAGS=--xla_dump_to."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    folder = tmp_path_factory.mktemp("xla_dump")
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={folder}", "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True, timeout=300, capture_output=True)
    return folder


@pytest.fixture(scope="module")
def step_module(cpu_dump):
    return read_xla_dump(cpu_dump, modules="^jit_step$").module("jit_step")


# ======================================================================================
# A real dump (jax on CPU)
# ======================================================================================
def test_real_dump_every_instruction_shape_is_parsed_with_tuples_expanded(step_module):
    instructions = step_module.instructions
    assert instructions and not step_module.problems
    leaves = [leaf for i in instructions for leaf in i.leaves]
    assert all(shape is not None for _, text, shape in leaves if not text.startswith("token"))
    dot = [i for i in instructions if i.opcode == "dot"]
    assert [str(i.leaves[0][2]) for i in dot] == ["f32[64,16]{1,0}"]
    root = next(i for i in instructions if i.is_entry and i.is_root)
    assert root.opcode == "tuple" and [index for index, _, _ in root.leaves] == [(0,), (1,)]
    ds = step_module.instructions_dataset()
    assert ds.sizes["shape"] == len(leaves) and ds["padded_bytes"].attrs["units"] == "bytes"
    assert (ds["padding_bytes"] == 0).all()  # CPU layouts have no tiles


def test_real_dump_allocations_match_the_program_and_xla_totals(step_module):
    parameters = {a.parameter: a.size for a in step_module.allocations if a.kind == "parameter"}
    assert parameters == {0: 64 * 32 * 4, 1: 32 * 16 * 4}
    assert {a.kind for a in step_module.allocations} <= set(ALLOCATION_KINDS)
    total = sum(a.size for a in step_module.allocations)
    assert step_module.total_bytes == total  # "Total bytes used" of the dump
    assert step_module.allocations_dataset().attrs["total_bytes"] == total
    report = step_module.memory_report_dataset()
    assert report.sizes["report_row"] > 0 and report.attrs["total_bytes"] == total


def test_real_dump_buffer_sizes_equal_scworks_layout_model(step_module):
    ds = step_module.buffers_dataset()
    arrays = ~np.isnan(ds["padded_bytes"].values)
    assert arrays.sum() >= 8
    # scwork's padded_bytes of every array value is XLA's own size for it
    assert ds["layout_matches_size"].values[arrays].all()
    np.testing.assert_array_equal(ds["padded_bytes"].values[arrays], ds["bytes"].values[arrays])
    assert ds["bytes"].attrs["units"] == "bytes" and ds.attrs["live_range_source"] == "HloLiveRange"
    product = ds.sel(buffer=[b for b in ds["buffer"].values if ds["shape"].sel(buffer=b) == "f32[64,16]{1,0}"])
    assert set(product["bytes"].values) == {4096}


def test_real_dump_timeline_reproduces_xlas_listing(step_module):
    timeline = step_module.timeline()
    assert isinstance(timeline, MeasuredTimeline) and isinstance(timeline, Timeline)
    assert all(isinstance(iv, Interval) for iv in timeline.intervals)
    assert set(timeline.categories) <= set(ALLOCATION_KINDS)
    # XLA's "Live ranges at T (peak)" total is the usage scwork computes at T...
    assert timeline.usage_bytes[step_module.xla_peak_time] == step_module.xla_peak_bytes
    # ...and the largest total is at least that (XLA's chosen T is not always the max)
    assert step_module.xla_peak_bytes <= timeline.peak_bytes <= step_module.total_bytes
    assert timeline.usage_bytes.max() == timeline.peak_bytes
    live = timeline.live_at_peak()
    assert sum(iv.bytes for iv in live) == timeline.peak_bytes
    assert [iv.bytes for iv in live] == sorted((iv.bytes for iv in live), reverse=True)
    assert timeline.category_bytes_at_peak() == {
        c: sum(iv.bytes for iv in live if iv.category == c) for c in timeline.categories}
    usage = timeline.usage()
    assert usage["usage_by_category"].dims == ("event", "category")
    np.testing.assert_array_equal(usage["usage_by_category"].sum("category"), usage["usage_bytes"])
    assert usage.attrs["source"] == "measured" and usage["start_s"].attrs["units"] == "schedule step"
    assert timeline.usage_over_time()["usage_bytes"].dims == ("time",)
    assert timeline.intervals_dataset()["bytes"].sum() == sum(iv.bytes for iv in timeline.intervals)
    assert timeline.fits and timeline.num_serialized_slots == 1
    assert not step_module.timeline(capacity_bytes=timeline.peak_bytes - 1).fits


def test_live_ranges_from_last_use_equal_hlolive_range(cpu_dump, tmp_path, step_module):
    """Without the live-range file, definition-to-last-use in the entry order gives XLA's ranges."""
    for file in cpu_dump.glob("*jit_step*"):
        if file.is_file() and not file.name.endswith("-live-range.txt"):
            shutil.copy(file, tmp_path / file.name)
    fallback = read_xla_dump(tmp_path).module("jit_step")
    assert fallback.live_range_source == "last use"
    expected = {(v.name, v.index): (v.start, v.end) for v in step_module.values}
    assert {(v.name, v.index): (v.start, v.end) for v in fallback.values} == expected
    assert fallback.timeline().peak_bytes == step_module.timeline().peak_bytes


def test_dump_level_views(cpu_dump):
    dump = read_xla_dump(cpu_dump)
    assert "jit_step" in [m.name for m in dump.modules]
    ds = dump.buffers_dataset()
    assert set(ds["module"].values) >= {"jit_step"}
    with pytest.raises(KeyError, match="no module"):
        dump.module("nope")


# ======================================================================================
# Hand-written TPU-style dump (tiled layouts: padding per buffer)
# ======================================================================================
def test_tpu_style_dump_padding_per_buffer():
    module = read_xla_dump(TPU_STYLE).module("jit_step")
    ds = module.buffers_dataset().set_index(buffer="buffer")
    assert ds["padding_bytes"].sel(buffer="t.1") == 26624 - 12800
    assert ds["padding_bytes"].sel(buffer="x.1") == 4096 - 60
    assert math.isnan(float(ds["padding_bytes"].sel(buffer="tuple.3")))  # a pointer table, no layout
    assert ds["layout_matches_size"].sel(buffer=["t.1", "copy.2", "x.1", "fusion.1"]).all()
    token = next(i for i in module.instructions if i.opcode == "after-all")
    assert token.leaves == (((), "token[]", None),) and not module.problems
    timeline = module.timeline()
    assert timeline.peak_bytes == module.xla_peak_bytes == 61456
    assert timeline.peak_event.index == module.xla_peak_time == 5
    assert timeline.peak_event.name == "tuple.3" and timeline.events[-1].name == "program end"
    assert {iv.name: iv.waste_bytes for iv in timeline.intervals}["copy.2"] == 26624 - 12800
    assert timeline.category_bytes_at_peak() == {"parameter": 26624 + 4096, "output": 26624 + 4096 + 16}


# ======================================================================================
# Bad dumps: typed errors naming file and line
# ======================================================================================
def _copy_tpu_style(tmp_path: Path) -> Path:
    folder = tmp_path / "dump"
    shutil.copytree(TPU_STYLE, folder)
    return folder


def _edit(file: Path, old: str, new: str) -> int:
    text = file.read_text()
    assert old in text
    file.write_text(text.replace(old, new, 1))
    return text[: text.index(old)].count("\n") + 1


def test_unparsable_shape_names_file_and_line(tmp_path):
    folder = _copy_tpu_style(tmp_path)
    hlo = folder / "module_0001.jit_step.tpu_after_optimizations.txt"
    line = _edit(hlo, "%copy.2 = bf16[100,64]{1,0:T(8,128)(2,1)}", "%copy.2 = bf16[100,64]{1,0:T(8,0)(2,1)}")
    with pytest.raises(XlaDumpError) as raised:
        read_xla_dump(folder)
    error = raised.value
    assert isinstance(error, InputError) and error.path == str(hlo) and error.line == line
    assert "bf16[100,64]{1,0:T(8,0)(2,1)}" in str(error) and f":{line}:" in str(error)
    collected = read_xla_dump(folder, errors="collect")
    assert [(p.path, p.line) for p in collected.problems] == [(str(hlo), line)]
    copy = next(i for i in collected.modules[0].instructions if i.name == "copy.2")
    assert copy.leaves[0][2] is None


@pytest.mark.parametrize(("file", "old", "new", "what"), [
    ("-live-range.txt", "copy.2{}:4-6", "copy.2{}:4..6", "name{index}:start-end"),
    ("-live-range.txt", "    3:fusion.1", "    3 fusion.1", "N:instruction"),
    ("-buffer-assignment.txt", "(size=4096,offset=0): f32[3,5]", "(size=4096): f32[3,5]", "value"),
    ("-buffer-assignment.txt", "(size=26624,offset=0): bf16[100,64]{1,0:T(8,128)(2,1)}",
     "(size=26624,offset=0): bf16[100,64", "unclosed"),
    (".txt", "%fusion.1 = f32[3,5]{1,0:T(8,128)} fusion(", "%fusion.1 = f32[3,5]{1,0:T(8,128)} (", "opcode"),
    (".txt", "  %x.1 = f32[3,5]", "  x.1 := f32[3,5]", "instruction"),
    # numbers past int64 (or Python's 4,300-digit int() limit) and reversed live ranges
    ("-buffer-assignment.txt", "allocation 0: size 26624,", "allocation 0: size 9223372036854775808,",
     "allocation size"),
    ("-buffer-assignment.txt", "allocation 0: size 26624,", "allocation 0: size 18446744073709551616,",
     "allocation size"),
    ("-buffer-assignment.txt", "(size=4096,offset=0): f32[3,5]", "(size=" + "9" * 5000 + ",offset=0): f32[3,5]",
     "value size"),
    ("-live-range.txt", "HloLiveRange (max 6)", "HloLiveRange (max " + "9" * 5000 + ")", "HloLiveRange max"),
    ("-live-range.txt", "copy.2{}:4-6", "copy.2{}:4-99999999999999999999", "live range time"),
    ("-live-range.txt", "copy.2{}:4-6", "copy.2{}:6-4", "ends at 4, before it starts at 6"),
    ("-buffer-assignment.txt", "Total bytes used: 61456", "Total bytes used: " + "9" * 30, "total bytes"),
])
def test_malformed_lines_name_file_and_line(tmp_path, file, old, new, what):
    folder = _copy_tpu_style(tmp_path)
    path = folder / f"module_0001.jit_step.tpu_after_optimizations{file}"
    line = _edit(path, old, new)
    with pytest.raises(XlaDumpError, match=what) as raised:
        read_xla_dump(folder)
    assert (raised.value.path, raised.value.line) == (str(path), line)


def test_bounded_reading_and_bad_arguments(tmp_path):
    with pytest.raises(XlaDumpError, match="max_file_bytes=100") as raised:
        read_xla_dump(TPU_STYLE, max_file_bytes=100)
    assert raised.value.path.endswith(".txt")
    assert xla_dump.MAX_FILE_BYTES == 64 * 2**20
    for bad in (0, -1, 1.5, True, "big"):
        with pytest.raises(XlaDumpError, match="max_file_bytes"):
            read_xla_dump(TPU_STYLE, max_file_bytes=bad)
    with pytest.raises(XlaDumpError, match="errors must be"):
        read_xla_dump(TPU_STYLE, errors="ignore")
    with pytest.raises(XlaDumpError, match="not a folder"):
        read_xla_dump(tmp_path / "missing")
    with pytest.raises(XlaDumpError, match="after_optimizations"):
        read_xla_dump(tmp_path)
    with pytest.raises(XlaDumpError, match="matching 'nothing'"):
        read_xla_dump(TPU_STYLE, modules="nothing")
    with pytest.raises(XlaDumpError, match="max_file_bytes=10"):
        read_oom_message(DATA / "oom_flowpm_issue27_hbm.txt", max_file_bytes=10)
    with pytest.raises(XlaDumpError, match="cannot read"):
        read_oom_message(tmp_path)


def test_timeline_without_live_ranges_is_a_typed_error(tmp_path):
    folder = _copy_tpu_style(tmp_path)
    (folder / "module_0001.jit_step.tpu_after_optimizations-live-range.txt").unlink()
    module = read_xla_dump(folder).module(1)
    assert module.live_range_source is None and all(v.start == -1 for v in module.values)
    with pytest.raises(XlaDumpError, match="no live ranges"):
        module.timeline()


# ======================================================================================
# TPU out-of-memory messages
# ======================================================================================
def test_oom_flowpm_32x_padding_agrees_with_scwork():
    report = read_oom_message(DATA / "oom_flowpm_issue27_hbm.txt")
    assert (report.memory_space, report.used_text, report.capacity_text, report.exceeded_text) == (
        "hbm", "41.74G", "16.00G", "25.74G")
    (entry,) = report.allocations
    assert (entry.rank, entry.size_text, entry.unpadded_text, entry.padding_text, entry.expansion) == (
        1, "32.00G", "1.00G", "31.00G", 32.0)
    assert entry.operator == 'op_type="FloorMod" op_name="slicewise_79/cic_update/FloorMod"'
    assert entry.label.startswith("%copy.40488 = s32[8388608,8,4]")
    shape = entry.shape()
    assert shape.padded_bytes == 8388608 * 8 * 128 * 4 and shape.unpadded_bytes == 2**30
    check = entry.check()
    assert check.matches and check.explanation == "" and report.mismatches() == []


def test_oom_jax_era_message_without_padding_line():
    report = read_oom_message(DATA / "oom_easydel_issue166_hbm.txt")
    assert report.memory_space == "hbm" and report.hlo_temp_padded_text == "63.58G"
    (entry,) = report.allocations
    assert entry.padding_text is None and entry.allocation_type == "HLO temp"
    assert entry.label.startswith("fusion.1265.remat3 = fusion(")
    assert entry.check().matches


def test_oom_e32_pred_is_a_finding_about_unpadded_size():
    """XLA counts pred's natural byte as 'Unpadded size'; scwork's unpadded_bytes counts E(32)."""
    report = read_oom_message(DATA / "oom_trax_issue525_hbm.txt")
    assert report.memory_space is None and [a.rank for a in report.allocations] == [10, 11]
    check = report.allocations[0].check()
    assert check.size_matches and not check.unpadded_matches and not check.matches
    assert "natural 1 byte" in check.explanation and "E(32)" in check.explanation
    assert len(report.mismatches()) == 2


def test_oom_vmem_shapes_printed_without_tiling_are_explained():
    report = read_oom_message(DATA / "oom_pytorch_xla_issue9524_vmem.txt")
    assert (report.memory_space, report.used_text, report.exceeded_text) == ("vmem", "32.42M", "16.42M")
    assert [a.rank for a in report.allocations] == [4, 5, 6]
    tiled_away, _, bytes_entry = (a.check() for a in report.allocations)
    assert not tiled_away.size_matches and "without its tiling" in tiled_away.explanation
    assert tiled_away.unpadded_matches  # 128 * 6 * 4 = 3.0K
    assert bytes_entry.matches
    ds = report.to_dataset()
    assert ds.sizes["buffer"] == 3 and ds["size_bytes"].attrs["units"] == "bytes"
    assert list(ds["matches"].values) == [False, False, True]
    assert ds["scwork_padded_bytes"].sel(buffer=4) == 128 * 6 * 4


def test_oom_inside_a_log_with_prefixes():
    prefix = "2020-05-04 09:05:40.719785: E    1578 tensorflow/compiler/xla/xla_client/xla_util.cc:76] "
    text = (DATA / "oom_flowpm_issue27_hbm.txt").read_text()
    logged = parse_oom_message("\n".join(prefix + line for line in text.splitlines()))
    plain = parse_oom_message(text)
    assert [(a.size_text, a.shape_text, a.unpadded_text, a.padding_text, a.operator) for a in logged.allocations] \
        == [(a.size_text, a.shape_text, a.unpadded_text, a.padding_text, a.operator) for a in plain.allocations]


def test_oom_printed_size_rounding():
    """124.00M is 130,023,424 bytes to XLA's precision (f32[512,245,256] with T(8,128))."""
    text = ("  1. Size: 124.00M\n     Shape: f32[512,245,256]{2,1,0:T(8,128)}\n     Unpadded size: 122.50M\n"
            "     Extra memory due to padding: 1.50M (1.0x expansion)\n     ==========\n")
    assert parse_oom_message(text).allocations[0].check().matches
    wrong = text.replace("124.00M", "125.00M")
    assert not parse_oom_message(wrong).allocations[0].check().size_matches


def test_oom_bad_inputs_are_typed_errors_naming_the_line():
    with pytest.raises(XlaDumpError, match="no 'Ran out of memory"):
        parse_oom_message("Traceback (most recent call last):\n  nothing here\n")
    with pytest.raises(XlaDumpError, match="text must be a str"):
        parse_oom_message(b"bytes")
    with pytest.raises(XlaDumpError) as raised:
        parse_oom_message("header\n  1. Size: 12.3Q\n", source="log.txt")
    assert (raised.value.path, raised.value.line) == ("log.txt", 2)
    with pytest.raises(XlaDumpError) as raised:
        parse_oom_message("x\n  1. Size: 1.00G\n     Unpadded size: lots\n", source="log.txt")
    assert raised.value.line == 3             # the line that holds the size, not the entry's first line
    report = parse_oom_message("  1. Size: 29.66M\n     XLA label: register allocator spill slots\n"
                               "  2. Size: 1.0K\n     Shape: f32[8,8]{1,0:T(8,0)}\n", source="log.txt")
    with pytest.raises(XlaDumpError, match="no Shape line"):
        report.allocations[0].shape()
    with pytest.raises(XlaDumpError, match="cannot parse shape") as raised:
        report.allocations[1].shape()
    assert raised.value.line == 3
    assert report.checks() == [] and [(a.rank, e.line) for a, e in report.unparsed()] == [(2, 3)]


@pytest.mark.requires_widgets
def test_layout_explorer_opens_an_oom_shape_by_text():
    """The docstring's way: LayoutExplorer takes the shape text (its ``text`` trait)."""
    pytest.importorskip("ipywidgets")
    from scwork.widgets import LayoutExplorer

    entry = read_oom_message(DATA / "oom_pytorch_xla_issue9524_vmem.txt").allocations[2]
    explorer = LayoutExplorer(text=entry.shape_text)
    assert explorer.error == "" and explorer.shape == entry.shape()


# -- regressions of issue 22 ----------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "line", "what"), [
    ("x\n  1. Size: 1.00G\n     Shape: f32[8]{0}\n     Extra memory due to padding:\n", 4, "has no size"),
    ("x\n  1. Size: 1.00G\n     Unpadded size: 1.00G\n     Extra memory due to padding: 2x.0M\n", 4,
     "cannot read size"),
    ("  " + "9" * 5000 + ". Size: 1.0K\n", 1, "allocation number"),
    ("  1. Size: " + "9" * 5000 + "\n", 1, "cannot read size"),
    ("  1. Size: 1.0K\n  Extra memory due to padding: 1.0K (" + "9" * 5000 + "x expansion)\n", 2, "expansion"),
])
def test_oom_sizes_and_numbers_are_refused_at_their_line(text, line, what):
    with pytest.raises(XlaDumpError, match=what) as raised:
        parse_oom_message(text, source="log.txt")
    assert raised.value.line == line


@pytest.mark.parametrize("end", [2**40, 2**63 - 1])
def test_huge_live_range_end_is_bounded(tmp_path, end):
    """One edited end: buffers_dataset stays cheap (peak by a sweep), timeline refuses naming the size."""
    folder = _copy_tpu_style(tmp_path)
    _edit(folder / "module_0001.jit_step.tpu_after_optimizations-live-range.txt", "copy.2{}:4-6", f"copy.2{{}}:4-{end}")
    module = read_xla_dump(folder).modules[0]
    ds = module.buffers_dataset()
    assert int(ds["end"].sel(buffer="copy.2")) == end
    assert bool(ds["live_at_peak"].sel(buffer="copy.2"))
    with pytest.raises(XlaDumpError, match=f"{end + 1:,} schedule steps") as raised:
        module.timeline()
    assert "max_schedule_steps" in str(raised.value)


def test_peak_time_by_sweep_equals_the_timelines_peak(tmp_path):
    module = read_xla_dump(TPU_STYLE).modules[0]
    assert module._peak_time() == module.timeline().peak_event.index == 5


def test_modules_pattern_must_be_a_regular_expression():
    with pytest.raises(XlaDumpError, match="not a regular expression"):
        read_xla_dump(TPU_STYLE, modules="jit_(")
    with pytest.raises(XlaDumpError, match="modules must be"):
        read_xla_dump(TPU_STYLE, modules=5)
    with pytest.raises(XlaDumpError, match="folder must be a path"):
        read_xla_dump(5)
    assert read_xla_dump(TPU_STYLE, modules="^jit_step$").modules[0].name == "jit_step"


def test_max_file_bytes_past_the_read_size_reads_the_file():
    """max_file_bytes=2**64 made read() overflow (found by the 10,000-case run)."""
    dump = read_xla_dump(TPU_STYLE, max_file_bytes=2**64)
    assert dump.modules[0].name == "jit_step"
    assert read_oom_message(DATA / "oom_flowpm_issue27_hbm.txt", max_file_bytes=10**30).allocations


def test_oom_shape_with_thousands_of_leading_zeros_reads():
    """u8[000...01] (5,000 zeros) made int() refuse the text (found by the 1,000-case run)."""
    report = parse_oom_message("  1. Size: 4.0K\n     Shape: u8[" + "0" * 5000 + "1]{0}\n")
    assert report.allocations[0].shape().dims == (1,)
    assert len(report.checks()) == 1
