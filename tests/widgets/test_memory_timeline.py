"""Tests of MemoryTimeline without a browser: traits in, engine results in the bokeh sources."""

from __future__ import annotations

import html
import itertools
import math

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("bokeh")
pytest.importorskip("jupyter_bokeh")

import traitlets
from scwork.errors import InputError
from scwork.widgets import MemoryTimeline, _bokeh
from scwork.widgets import memory_timeline as module

import scwork
from scwork import memory
from scwork.memory import CATEGORIES, SPMEM_BUFFERS
from scwork.sharding import TableSpec

pytestmark = pytest.mark.requires_widgets


@pytest.fixture(scope="module")
def demo():
    return MemoryTimeline.demo()


def small_tables(max_ids=256, max_unique=128):
    return [TableSpec("user", 100_000, 32, optimizer="adagrad", max_ids_per_partition=max_ids,
                      max_unique_ids_per_partition=max_unique),
            TableSpec("item", 50_000, 16, optimizer="adam", max_ids_per_partition=max_ids,
                      max_unique_ids_per_partition=max_unique),
            TableSpec("flag", 2, 1, optimizer="adagrad", max_ids_per_partition=64,
                      max_unique_ids_per_partition=8)]


@pytest.fixture
def small():
    return MemoryTimeline(small_tables(), scwork.Topology.for_chip("v5p", num_chips=2), batch_size=4096,
                          stacking=None, dense_weights_bytes=2**20)


def drawn_by_event_and_category(explorer):
    """Bytes the HBM chart draws per (event, category), summed over its segments."""
    data = explorer.sources["hbm_segments"].data
    events = len(explorer.report.timeline.events)
    out = np.zeros((events, len(CATEGORIES)))
    for step, group, value in zip(data["step"], data["group"], data["value"]):
        out[int(step), CATEGORIES.index(group)] += value
    return out


def drawn_peak(explorer):
    return max(explorer.sources["hbm_outline"].data["y"])


# -- construction ---------------------------------------------------------------------------

def test_demo_is_a_large_model_just_over_its_hbm(demo):
    report = demo.report
    assert demo.error == ""
    assert len(report.model.tables) == 26 and len(report.stacks) == 10
    assert report.spmem_fits and not report.hbm_fits
    # close to the limits: at most a few % over HBM, the worst stack near TileSpmem
    assert 1.0 < report.peak_hbm_bytes / report.usable_hbm_bytes < 1.03
    assert demo.summary == report.summary()
    assert demo.summary["max_spmem_utilization"] > 0.85
    assert demo.stack == demo.summary["max_spmem_stack"]
    assert set(demo.figures) == {"hbm", "lifetimes", "spmem"}
    assert {"hbm_segments", "hbm_outline", "hbm_lines", "hbm_peak", "live_at_peak", "spmem_bars",
            "spmem_capacity", "spmem_highlight"} <= set(demo.sources)
    for name in ("batch_size", "num_serialized_tables", "maximum_parallel_iterations", "max_ids_per_partition",
                 "max_unique_ids_per_partition", "stage_gather_operands_in_hbm", "x_axis", "stack", "sort_by"):
        assert demo.controls[name].value == getattr(demo, name)


def test_hand_built_model(small):
    report = small.report
    assert report.fits and small.error == ""
    assert report.stacks == ("user", "item", "flag")
    assert small.stack == small.summary["max_spmem_stack"]
    assert small.batch_size == 4096 and small.num_serialized_tables == 1
    assert small.max_ids_per_partition == small.max_unique_ids_per_partition == 0  # each stack's own
    assert "Fits" in small._verdict.text


def test_plan_keywords_become_initial_trait_values():
    explorer = MemoryTimeline(small_tables(), scwork.Topology.for_chip("v5p", num_chips=2), batch_size=4096,
                              stacking=None, limits=(512, 64), num_serialized_tables=2,
                              maximum_parallel_iterations=3, stage_gather_operands_in_hbm=True)
    assert (explorer.max_ids_per_partition, explorer.max_unique_ids_per_partition) == (512, 64)
    assert explorer.report.inputs["limits"] == (512, 64)
    assert explorer.report.knobs.num_serialized_tables == 2
    assert explorer.report.knobs.maximum_parallel_iterations == 3
    assert explorer.report.knobs.stage_gather_operands_in_hbm


def test_first_plan_errors_raise():
    with pytest.raises(scwork.errors.ConfigError):
        MemoryTimeline([TableSpec("t", 1000, 8)], scwork.Topology.for_chip("v5p", num_chips=1),
                       batch_size=64)  # no limits anywhere


# -- HBM chart -------------------------------------------------------------------------------

@pytest.mark.parametrize("x_axis", ["program_order", "time"])
def test_area_chart_equals_usage_by_category(small, x_axis):
    small.x_axis = x_axis
    timeline = small.report.timeline
    np.testing.assert_array_equal(drawn_by_event_and_category(small), timeline.usage_by_category)
    usage = timeline.usage()
    np.testing.assert_array_equal(drawn_by_event_and_category(small), usage["usage_by_category"].values)
    outline = small.sources["hbm_outline"].data
    np.testing.assert_array_equal(outline["y"][:-1], timeline.usage_bytes)
    # Every segment spans its event on the chosen axis.
    data = small.sources["hbm_segments"].data
    for step, left, right in zip(data["step"], data["left"], data["right"]):
        event = timeline.events[int(step)]
        if x_axis == "program_order":
            assert (left, right) == (event.index, event.index + 1)
        else:
            scale = 1e3 if timeline.duration_s >= 1e-3 else 1e6
            assert left == pytest.approx(event.start_s * scale) and right == pytest.approx(event.end_s * scale)


def test_area_chart_of_a_serialized_step(demo):
    demo.num_serialized_tables = 4
    try:
        timeline = demo.report.timeline
        assert len(timeline.events) == 2 * 4 + 2
        np.testing.assert_array_equal(drawn_by_event_and_category(demo), timeline.usage_by_category)
        assert list(demo.sources["hbm_peak"].data["left"]) == [timeline.peak_event.index]
    finally:
        demo.num_serialized_tables = 1


def test_area_hover_names_the_buffer_and_its_lifetime(small):
    timeline = small.report.timeline
    data = small.sources["hbm_segments"].data
    by_name = {iv.name: iv for iv in timeline.intervals}
    assert set(data["buffer"]) == set(by_name)
    for name, size, lifetime, group in zip(data["buffer"], data["size"], data["lifetime"], data["group"]):
        iv = by_name[name]
        assert group == iv.category
        assert size == _bokeh.format_bytes(iv.bytes)
        assert lifetime.startswith(timeline.events[iv.start].name)
        assert timeline.events[iv.end - 1].name in lifetime


def test_capacity_and_headroom_lines_are_the_chips_hbm():
    explorer = MemoryTimeline(small_tables(), scwork.Topology.for_chip("v5p", num_chips=2), batch_size=4096,
                              stacking=None, headroom=0.2)
    hbm = scwork.hardware.get("v5p").hbm_bytes
    lines = explorer.sources["hbm_lines"].data
    assert list(lines["y"]) == [hbm, math.floor(hbm * 0.8)]
    assert list(lines["y"]) == [explorer.report.hbm.capacity, explorer.report.usable_hbm_bytes]
    assert "20% headroom" in lines["label"][1]


def test_serialization_slider_lowers_the_peak_as_the_engine(demo):
    slider = demo.controls["num_serialized_tables"]
    kwargs = dict(demo.report.inputs)
    peaks = []
    try:
        for n in range(len(demo.report.stacks) + 1):
            slider.value = n  # what a user does
            assert demo.num_serialized_tables == n
            expected = memory.plan(demo._model, demo._topology, **{**kwargs, "num_serialized_tables": n})
            assert drawn_peak(demo) == expected.peak_hbm_bytes == demo.report.peak_hbm_bytes
            peaks.append(drawn_peak(demo))
    finally:
        slider.value = 1
    assert all(b <= a for a, b in itertools.pairwise(peaks))
    assert peaks[-1] < peaks[0]


def test_other_sliders_recompute_through_the_engine(small):
    small.controls["batch_size"].value = 8192
    small.controls["maximum_parallel_iterations"].value = 3
    small.controls["max_ids_per_partition"].value = 512
    small.controls["stage_gather_operands_in_hbm"].value = True
    inputs = small.report.inputs
    assert (inputs["batch_size"], inputs["maximum_parallel_iterations"]) == (8192, 3)
    assert inputs["limits"] == (512, None) and inputs["stage_gather_operands_in_hbm"]
    assert sum(iv.category == "prefetch" for iv in small.report.timeline.intervals) == 3
    assert "staged_gather_operands" in set(small.sources["hbm_segments"].data["group"])
    np.testing.assert_array_equal(drawn_by_event_and_category(small), small.report.timeline.usage_by_category)
    small.controls["max_ids_per_partition"].value = 0
    assert small.report.inputs["limits"] is None


def test_invalid_setting_keeps_last_plan_and_reports_the_engine_error(small):
    before = small.report
    small.num_serialized_tables = -1
    assert "num_serialized_tables" in small.error
    assert small.report is before
    assert "num_serialized_tables" in small._error_area.value
    small.num_serialized_tables = 2
    assert small.error == "" and small._error_area.value == ""
    assert small.report.knobs.num_serialized_tables == 2


# -- verdict ------------------------------------------------------------------------------

def test_hbm_failure_shows_the_engines_diagnosis_and_fixes(demo):
    text = demo._verdict.text
    report = demo.report
    assert "Does not fit: HBM" in text
    assert report.errors and report.fixes
    for finding in report.diagnoses:
        assert html.escape(finding.message) in text
    for fix in report.fixes:
        assert html.escape(str(fix)) in text
    assert "RESOURCE_EXHAUSTED" in text


def test_spmem_failure_shows_the_compiler_like_message():
    tables = [TableSpec(f"t{i}", 10**6, 64, max_ids_per_partition=512, max_unique_ids_per_partition=256)
              for i in range(8)]
    explorer = MemoryTimeline(tables, scwork.Topology.for_chip("v5p", num_chips=4), batch_size=65536,
                              stacking=[[t.name for t in tables]])
    assert not explorer.report.spmem_fits
    assert "Does not fit: SPMEM" in explorer._verdict.text
    assert "Gather operand too large" in explorer._verdict.text
    assert "over by" in explorer._spmem_detail.text
    # the engine's fix, applied through the explorer's control
    fix = next(f for f in explorer.report.fixes if f.parameter == "stage_gather_operands_in_hbm")
    assert fix in explorer.controls["fix"].options[0]
    explorer.apply_fix(fix)
    assert explorer.stage_gather_operands_in_hbm and explorer.controls["stage_gather_operands_in_hbm"].value
    assert explorer.report.fits and "Fits" in explorer._verdict.text
    with pytest.raises(ValueError, match="not a control"):
        explorer.apply_fix(memory.Fix("dtype", "bf16", "bf16 tables"))


def test_apply_button_applies_the_chosen_fix():
    explorer = MemoryTimeline.demo()
    fix = explorer.controls["fix"].value
    assert fix.parameter == "num_serialized_tables"
    explorer.controls["apply_fix"].click()
    assert explorer.num_serialized_tables == fix.value and explorer.report.fits


# -- live at the peak -----------------------------------------------------------------------

@pytest.mark.parametrize("sort_by", ["bytes", "waste_bytes"])
def test_live_at_peak_table_matches_the_engine(demo, sort_by):
    demo.controls["sort_by"].value = sort_by
    try:
        expected = demo.report.timeline.live_at_peak(sort_by=sort_by)[:module.MAX_LISTED_BUFFERS]
        rows = demo.sources["live_at_peak"].data
        assert list(rows["buffer"]) == [iv.name for iv in expected]
        assert list(rows["bytes"]) == [iv.bytes for iv in expected]
        assert list(rows["waste_bytes"]) == [iv.waste_bytes for iv in expected]
        assert list(rows["category"]) == [iv.category for iv in expected]
        assert list(rows["start"]) == [iv.start for iv in expected]
        assert list(rows["end"]) == [iv.end for iv in expected]
        assert list(rows["rank"]) == list(range(1, len(expected) + 1))
        # Gantt lanes in table order, each bar spanning the buffer's lifetime
        assert list(rows["lane"]) == list(range(len(expected)))
        assert list(rows["left"]) == [iv.start for iv in expected]
        assert list(rows["right"]) == [iv.end for iv in expected]
        # the key the selection link uses points at the same buffer in the HBM chart
        segments = demo.sources["hbm_segments"].data
        buffer_of_item = dict(zip(segments["item"], segments["buffer"]))
        assert [buffer_of_item[i] for i in rows["item"]] == list(rows["buffer"])
    finally:
        demo.sort_by = "bytes"


def test_small_model_lists_every_buffer_live_at_the_peak(small):
    live = small.report.timeline.live_at_peak()
    assert len(live) < module.MAX_LISTED_BUFFERS
    assert list(small.sources["live_at_peak"].data["buffer"]) == [iv.name for iv in live]
    assert f"all {len(live)}" in small._live_caption.text


def test_selection_is_linked_in_the_browser(demo):
    callbacks = demo.sources["live_at_peak"].selected.js_property_callbacks
    assert callbacks.get("change:indices")


# -- SPMEM ------------------------------------------------------------------------------------

def test_spmem_view_matches_the_engines_dataset(demo):
    ds = demo.report.spmem_dataset()
    bars = demo.sources["spmem_bars"].data
    for stack in (demo.stack, demo.report.stacks[0]):
        demo.stack = stack
        chosen = {g: v for g, c, v in zip(bars["group"], bars["category"], bars["value"]) if c == stack}
        expected = ds["spmem_buffer_bytes"].sel(stack=stack)
        assert chosen == {b: int(expected.sel(buffer=b)) for b, _ in SPMEM_BUFFERS}
        highlight = demo.sources["spmem_highlight"].data
        assert highlight["top"] == [int(ds["spmem_total_bytes"].sel(stack=stack))]
        assert highlight["left"][0] < demo.report.stacks.index(stack) < highlight["right"][0]
        assert f"Stack {stack}" in demo._spmem_detail.text
    assert list(demo.sources["spmem_capacity"].data["y"]) == [ds.attrs["tile_spmem_bytes"]]
    demo.stack = demo.summary["max_spmem_stack"]


def test_unknown_stack_is_refused(small):
    with pytest.raises(traitlets.TraitError, match="no stack"):
        small.stack = "nope"


# -- export ---------------------------------------------------------------------------------

def test_to_html_writes_an_offline_file(small, tmp_path):
    path = small.to_html(tmp_path / "memory.html")
    text = path.read_text(encoding="utf-8")
    assert path.exists() and "Bokeh" in text
    assert "cdn.bokeh.org" not in text and "<script src=" not in text.replace("<script src=\"data:", "")
    assert "Fits" in text and "table user" in text


# -- shared helper ----------------------------------------------------------------------------

def test_stacked_area_chart_helper():
    chart = _bokeh.StackedAreaChart(value_names=("name", "event"))
    values = np.array([[1.0, 2.0, 0.0], [0.0, 3.0, 4.0]])
    chart.update([0, 1], [1, 3], values, item_groups=["a", "b", "a"], groups=["b", "a"],
                 item_values={"name": ["x", "y", "z"]}, step_values={"event": ["e0", "e1"]},
                 lines=[("cap", 10), ("usable", 9, "#ff7f0e")], shaded_steps=[1], shade_label="peak",
                 step_labels=["e0", "e1"])
    seg = chart.segments.data
    assert list(seg["step"]) == [0, 0, 1, 1] and list(seg["item"]) == [0, 1, 1, 2]
    assert list(seg["bottom"]) == [0, 1, 0, 3] and list(seg["top"]) == [1, 3, 3, 7]
    assert list(seg["name"]) == ["x", "y", "y", "z"] and list(seg["event"]) == ["e0", "e0", "e1", "e1"]
    palette = _bokeh.CATEGORY_PALETTE
    assert list(seg["color"]) == [palette[1], palette[0], palette[0], palette[1]]  # color by groups order
    assert list(chart.outline.data["y"]) == [3, 7, 7]
    assert list(chart.lines.data["dash"]) == ["solid", "dashed"]
    assert list(chart.bands.data["left"]) == [1] and list(chart.bands.data["right"]) == [3]
    assert chart.figure.y_range.end == pytest.approx(10 * 1.08)
    with pytest.raises(ValueError, match="not in groups"):
        chart.update([0], [1], [[1.0]], item_groups=["c"], groups=["a"], item_values={"name": ["x"]},
                     step_values={"event": ["e"]})
    with pytest.raises(ValueError, match="missing hover"):
        chart.update([0], [1], [[1.0]], item_groups=["a"])


def test_format_bytes():
    assert _bokeh.format_bytes(0) == "0 B"
    assert _bokeh.format_bytes(1536) == "1.50 KiB"
    assert _bokeh.format_bytes(95 * 2**30) == "95.00 GiB"
    assert _bokeh.format_bytes(-2048) == "-2.00 KiB"


# -- what a user hit in JupyterLab ------------------------------------------------------------

def test_live_at_peak_rows_keep_the_controls_order(demo):
    """A header click must not sort the rows in the browser: BokehJS re-applies such a sort to
    every new data, so "by padding waste" kept showing the rows by size."""
    table = demo._live_table
    assert table.sortable is False and table.reorderable is False
    assert table.source is demo.sources["live_at_peak"]
    demo.controls["sort_by"].value = "waste_bytes"
    try:
        waste = [iv.name for iv in demo.report.timeline.live_at_peak(sort_by="waste_bytes")]
        assert list(demo.sources["live_at_peak"].data["buffer"]) == waste[:module.MAX_LISTED_BUFFERS]
        assert list(demo.sources["live_at_peak"].data["rank"]) == list(range(1, len(waste[:25]) + 1))
    finally:
        demo.controls["sort_by"].value = "bytes"


def _event_ticks(fig):
    axis = fig.xaxis[0]
    return list(axis.ticker.ticks), {float(k): v for k, v in axis.major_label_overrides.items()}


@pytest.mark.parametrize("serialized", [1, 3])
def test_gantt_and_hbm_chart_share_the_event_axis(demo, serialized):
    demo.controls["num_serialized_tables"].value = serialized
    try:
        events = [e.name for e in demo.report.timeline.events]
        assert len(events) == 2 * max(serialized, 1) + 2
        hbm, gantt = demo.figures["hbm"], demo.figures["lifetimes"]
        for fig in (hbm, gantt):
            ticks, labels = _event_ticks(fig)
            # one tick per event, at its centre, labelled with its name (no numbers 0-10)
            assert ticks == [i + 0.5 for i in range(len(events))]
            assert [labels[t] for t in ticks] == events
            assert fig.xaxis[0].axis_label == "event (program order)"
        # aligned: one range, same frame width and left border, so event i is one pixel column
        assert gantt.x_range is hbm.x_range
        assert (hbm.x_range.start, hbm.x_range.end) == (0, len(events))
        assert gantt.frame_width == hbm.frame_width
        assert gantt.min_border_left == hbm.min_border_left
        assert gantt.xaxis[0].major_label_orientation == hbm.xaxis[0].major_label_orientation
        # bars still span the buffers' lifetimes on that axis
        rows = demo.sources["live_at_peak"].data
        assert max(rows["right"]) <= len(events)
    finally:
        demo.controls["num_serialized_tables"].value = 1


def test_gantt_follows_the_time_axis_too(demo):
    demo.controls["x_axis"].value = "time"
    try:
        hbm, gantt = demo.figures["hbm"], demo.figures["lifetimes"]
        assert gantt.xaxis[0].ticker is hbm.xaxis[0].ticker
        assert dict(gantt.xaxis[0].major_label_overrides) == dict(hbm.xaxis[0].major_label_overrides) == {}
        assert gantt.xaxis[0].axis_label == hbm.xaxis[0].axis_label
        assert gantt.x_range is hbm.x_range
    finally:
        demo.controls["x_axis"].value = "program_order"


def test_fix_menu_offers_every_fix_the_panel_lists(demo):
    report = demo.report
    menu = demo.controls["fix"]
    assert len(report.fixes) >= 3  # the demo: serialize, bf16, headroom
    assert [fix for _, fix in menu.options] == list(report.fixes)
    # same order as the verdict lists them
    text = demo._verdict.text
    positions = [text.index(html.escape(str(fix))) for fix in report.fixes]
    assert positions == sorted(positions)
    for label, fix in menu.options:
        assert label.startswith(str(fix))
        if fix.parameter in ("batch_size", "num_serialized_tables", "maximum_parallel_iterations",
                             "stage_gather_operands_in_hbm"):
            assert MemoryTimeline.fix_has_control(fix) and label == str(fix)
        else:
            assert not MemoryTimeline.fix_has_control(fix)
            assert f"no control here: pass {fix.parameter}={fix.value!r}" in label
    # a fix without a control can be chosen, not applied
    before = (demo.num_serialized_tables, demo.report)
    dtype_fix = next(fix for fix in report.fixes if fix.parameter == "dtype")
    menu.value = dtype_fix
    assert demo.controls["apply_fix"].disabled
    demo.controls["apply_fix"].click()
    assert (demo.num_serialized_tables, demo.report) == before
    serialize = next(fix for fix in report.fixes if fix.parameter == "num_serialized_tables")
    menu.value = serialize
    assert not demo.controls["apply_fix"].disabled


def test_fix_labels_of_fixes_without_value_or_control():
    assert MemoryTimeline.fix_label(memory.Fix("stack_limits", None, "lower the limits")).endswith(
        "[no computed value: cannot be applied]")
    assert "pass num_chips=128 to MemoryTimeline" in MemoryTimeline.fix_label(
        memory.Fix("num_chips", 128, "128 chips"))
    assert MemoryTimeline.fix_label(memory.Fix("batch_size", 1024, "smaller")) == "batch_size=1024: smaller"


def _explorer_state(explorer):
    return [type(child).__name__ for child in explorer.children], explorer._verdict.height


def test_a_slider_move_emits_no_warning(recwarn, caplog, capsys):
    """The user's move: "max ids / partition" one step up from 0 (each stack's own) printed one
    unique_exceeds_ids warning per stack (max ids 8 < the stacks' own unique limits)."""
    import logging

    explorer = MemoryTimeline.demo()
    before = _explorer_state(explorer)
    caplog.set_level(logging.DEBUG)
    slider = explorer.controls["max_ids_per_partition"]
    slider.value = slider.min + slider.step
    report = explorer.report
    assert explorer.error == "" and report.inputs["limits"] == (8, None)
    assert [f.code for f in report.diagnoses if f.severity == "warning"] == []
    assert "[warning]" not in explorer._verdict.text
    # the slider's meaning is kept: every stack at most 8 ids, unique ids cut to them
    assert set(report.spmem.max_ids) == {8} and set(report.spmem.max_unique) == {8}
    # the other limit slider alone, up to its maximum: unique cut to each stack's own max ids
    slider.value = 0
    unique = explorer.controls["max_unique_ids_per_partition"]
    unique.value = unique.max
    assert all(u <= i for u, i in zip(explorer.report.spmem.max_unique, explorer.report.spmem.max_ids))
    assert "unique_exceeds_ids" not in {f.code for f in explorer.report.diagnoses}
    unique.value = 0
    # every other control, one step each
    for name in ("batch_size", "num_serialized_tables", "maximum_parallel_iterations"):
        control = explorer.controls[name]
        control.value = control.value + control.step
    explorer.controls["stage_gather_operands_in_hbm"].value = True
    explorer.controls["x_axis"].value = "time"
    explorer.controls["sort_by"].value = "waste_bytes"
    explorer.controls["stack"].value = explorer.report.stacks[0]
    explorer.controls["apply_fix"].click()
    assert explorer.error == ""
    assert not [f.code for f in explorer.report.diagnoses if f.severity == "warning"]
    assert not recwarn.list, [str(w.message) for w in recwarn.list]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert capsys.readouterr() == ("", "")
    # nothing appended per change, and the verdict scrolls instead of growing
    assert _explorer_state(explorer) == before
    assert explorer._verdict.styles.get("overflow-y") == "auto"


def test_user_stack_limits_beat_the_sliders_and_are_not_cut():
    explorer = MemoryTimeline(small_tables(), scwork.Topology.for_chip("v5p", num_chips=2), batch_size=4096,
                              stacking=None, stack_limits={"flag": (64, 128)})
    explorer.max_ids_per_partition = 32
    spm = explorer.report.spmem
    limits = {s: (i, u) for s, i, u in zip(spm.stacks, spm.max_ids, spm.max_unique)}
    assert limits["flag"] == (64, 128)  # the user's, kept (the engine warns about it: their input)
    assert limits["user"] == limits["item"] == (32, 32)  # own unique 128 cut to the slider's 32
    assert explorer.report.inputs["stack_limits"] == {"user": (32, 32), "item": (32, 32), "flag": (64, 128)}


def test_every_control_label_is_shown_whole(demo):
    import ipywidgets

    described = [c for c in demo.controls.values()
                 if getattr(c, "description", "") and not isinstance(c, ipywidgets.Button)]
    assert {c.description for c in described} >= {"max unique ids / partition", "max ids / partition",
                                                   "serialized tables", "engine's fix"}
    for control in described:
        assert control.style.description_width == "initial", control.description
    assert demo.controls["stage_gather_operands_in_hbm"].layout.width == "auto"


def test_an_xla_dump_is_drawn_beside_the_model(tmp_path):
    """A dump jax writes on this CPU (XLA_FLAGS=--xla_dump_to): its measured timeline under the model."""
    import importlib.util
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed (the interop extra, Python >= 3.12)")
    from scwork.interop.xla_dump import read_xla_dump

    program = ("import jax, jax.numpy as jnp\n"
               "step = jax.jit(lambda a, b: (jnp.sum(jnp.tanh(a @ b), axis=0), (a @ b).T * 2))\n"
               "jax.block_until_ready(step(jnp.ones((64, 32)), jnp.ones((32, 16))))\n")
    subprocess.run([sys.executable, "-c", program], check=True, capture_output=True, timeout=300,
                   env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_dump_to={tmp_path}"})
    module = read_xla_dump(tmp_path).module("jit__lambda")
    demo = MemoryTimeline.demo()
    ex = MemoryTimeline(demo._model, demo._topology, batch_size=demo.batch_size, measured=module,
                        **demo._plan_kwargs)
    assert ex.measured.peak_bytes == module.timeline().peak_bytes
    drawn = ex.sources["measured_segments"].data
    assert len(drawn["buffer"]) > 0
    assert "What XLA measured" in ex._measured_caption.text
    with pytest.raises(InputError, match="XLA dump module"):
        MemoryTimeline(demo._model, demo._topology, batch_size=demo.batch_size, measured=42, **demo._plan_kwargs)
