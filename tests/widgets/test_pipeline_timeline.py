"""Tests of PipelineTimeline without a browser: traits in, engine results in the bokeh sources."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("bokeh")
pytest.importorskip("jupyter_bokeh")

from scwork.widgets import PipelineTimeline
from scwork.widgets import pipeline_timeline as module
from scwork.widgets._html import SECONDS_SCALE, format_seconds

import scwork
from scwork.advisor import advise
from scwork.pipeline import (
    PHASES,
    StepModelParams,
    compare,
    expected_stats,
    read_trace,
    step_model,
    validate_chrome_trace,
)

pytestmark = pytest.mark.requires_widgets

TOPOLOGY = scwork.Topology.for_chip("v5p", num_chips=2)
STATS = expected_stats({"user": 20.0, "item": 5.0}, TOPOLOGY, batch_size=4096, unique_fraction=0.6)
KWARGS = {"topology": TOPOLOGY, "widths": {"user": 64, "item": 16}, "tc_forward_s": 1e-4, "tc_backward_s": 2e-4,
          "params": StepModelParams(host_threads=8)}


@pytest.fixture(scope="module")
def demo():
    return PipelineTimeline.demo()


@pytest.fixture
def small():
    return PipelineTimeline(STATS, **KWARGS)


def direct(**changes):
    """The engine's model of the hand-built case with some inputs changed."""
    params = changes.pop("params", KWARGS["params"])
    return step_model(STATS, **{**KWARGS, "params": params, **changes})


def same_model(a, b):
    assert a.summary() == b.summary()
    for schedule in module.SCHEDULES:
        assert getattr(a, schedule).columns() == getattr(b, schedule).columns()
    assert list(a.detail["serialized"]) == list(b.detail["serialized"])
    assert a.detail["num_minibatches"].tolist() == b.detail["num_minibatches"].tolist()


# -- construction ---------------------------------------------------------------------------

def test_demo_is_synthetic_data_on_v5p(demo):
    model = demo.model
    assert demo.error == ""
    assert model.chip.name == "v5p" and model.units.num_chips == 2
    assert model.stacks and "user_item" in model.stacks          # plan_stacking put user and item together
    assert 1.0 < model.speedup <= 2.0 and model.pipelining
    assert demo.summary == model.summary()
    assert demo.advice.ids == advise(model=model).ids
    assert set(demo.figures) == set(module.SCHEDULES)
    assert {"sequential", "pipelined", "sequential_parts", "pipelined_parts", "sequential_steps",
            "pipelined_steps", "pipelined_stages"} <= set(demo.sources)
    for name in ("pipelining", "num_minibatches", "num_serialized_tables", "host_threads", "shown_chip"):
        assert demo.controls[name].value == getattr(demo, name)
    assert demo.controls["tc_forward_s"].value == pytest.approx(demo.tc_forward_s * 1e6)


def test_hand_built_model_sets_the_traits(small):
    same_model(small.model, direct())
    assert small.pipelining is True and small.num_serialized_tables == 1 and small.num_minibatches == 0
    assert small.host_threads == 8
    assert (small.tc_forward_s, small.tc_backward_s) == (1e-4, 2e-4)
    assert small.shown_chip == -1                                  # two chips: all lanes

    other = PipelineTimeline(STATS, **{**KWARGS, "pipelining": False, "num_serialized_tables": 2})
    assert other.pipelining is False and other.num_serialized_tables == 2
    same_model(other.model, direct(pipelining=False, num_serialized_tables=2))


def test_a_step_model_can_be_given():
    model = direct(pipelining=False)
    explorer = PipelineTimeline(model)
    assert explorer.model is model and explorer.pipelining is False
    explorer.pipelining = True
    same_model(explorer.model, direct(pipelining=True))
    with pytest.raises(TypeError, match="StepModel"):
        PipelineTimeline(model, topology=TOPOLOGY)


def test_first_model_errors_raise():
    with pytest.raises(scwork.errors.ConfigError):
        PipelineTimeline(STATS, topology=TOPOLOGY)                # no widths, no plan


def test_many_chips_show_the_chip_of_the_slowest_sparsecore():
    topo = scwork.Topology.for_chip("v5p", num_chips=4)
    stats = expected_stats({"t": 16.0}, topo, batch_size=4096, hot_fraction=0.5, hot_partition=13)
    explorer = PipelineTimeline(stats, topology=topo, widths={"t": 32}, tc_forward_s=1e-4)
    assert explorer.shown_chip == 13 // 4                          # partition 13 lives on chip 3
    lanes = set(explorer.sources["pipelined"].data["resource"])
    assert lanes == {"host0", "chip3/sc0", "chip3/sc1", "chip3/sc2", "chip3/sc3", "chip3/ici", "chip3/tc"}
    with pytest.raises(Exception, match="shown_chip"):
        explorer.shown_chip = 4


# -- the Gantt charts -------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", module.SCHEDULES)
def test_gantt_sources_are_the_engine_timelines(small, schedule):
    timeline = getattr(small.model, schedule)
    columns = timeline.columns()
    data = small.sources[schedule].data
    for key, values in columns.items():
        assert list(data[key]) == values, key
    scale, _ = module._time_unit(small.model)
    np.testing.assert_allclose(data["left"], np.asarray(columns["start"]) * scale)
    np.testing.assert_allclose(data["right"], np.asarray(columns["end"]) * scale)
    lanes = timeline.resources()
    assert [lanes[int(i)] for i in data["lane"]] == columns["resource"]
    assert list(data["color"]) == [module.PHASE_COLORS[p] for p in columns["phase"]]
    # Step completions are the engine's.
    np.testing.assert_allclose(small.sources[f"{schedule}_steps"].data["x"], timeline.step_completion() * scale)
    # Both charts share one time axis.
    assert small.figures["sequential"].x_range is small.figures["pipelined"].x_range


def test_one_chip_shows_its_lanes_and_its_host(small):
    small.shown_chip = 1
    columns = small.model.pipelined.columns()
    keep = [i for i, name in enumerate(columns["resource"]) if name.startswith("chip1/") or name == "host0"]
    data = small.sources["pipelined"].data
    for key, values in columns.items():
        assert list(data[key]) == [values[i] for i in keep], key
    small.shown_chip = -1
    assert len(small.sources["pipelined"].data["start"]) == len(columns["start"])


def test_stages_are_the_engines(small):
    timeline = small.model.pipelined
    ivs = timeline.intervals
    assert {iv.stage for iv in ivs} == {"pre-loop", "main", "post-loop"}
    scale, _ = module._time_unit(small.model)
    bands = small.sources["pipelined_stages"].data
    pre_end = max(iv.end for iv in ivs if iv.stage == "pre-loop")
    post_start = min(iv.start for iv in ivs if iv.stage == "post-loop")
    assert list(bands["left"]) == pytest.approx([0.0, post_start * scale])
    assert list(bands["right"]) == pytest.approx([pre_end * scale, timeline.makespan * scale])
    assert set(small.sources["pipelined"].data["stage"]) == {"pre-loop", "main", "post-loop"}
    assert set(small.sources["sequential"].data["stage"]) == {"main"}


def test_parts_split_every_sparsecore_bar_by_stack(small):
    small.num_minibatches = 2
    timeline = small.model.pipelined
    parts = small.sources["pipelined_parts"].data
    bars = small.sources["pipelined"].data
    labels = set(timeline.parts["sc_forward"][0])
    assert labels == {f"{s} (mini-batch {b}/2)" for s in ("user", "item") for b in (1, 2)}
    assert set(parts["stack"]) == labels
    # Per SparseCore bar, the stripe covers the bar exactly (left to right, no gap).
    for i, phase in enumerate(bars["phase"]):
        if not phase.startswith("sc_") or bars["duration"][i] <= 0:
            continue
        mine = [j for j in range(len(parts["left"]))
                if parts["resource"][j] == bars["resource"][i] and parts["step"][j] == bars["step"][i]
                and parts["phase"][j] == module._PHASE_LABELS[phase]]
        assert parts["left"][mine[0]] == pytest.approx(bars["left"][i])
        assert parts["right"][mine[-1]] == pytest.approx(bars["right"][i])
        for a, b in itertools.pairwise(mine):
            assert parts["right"][a] == pytest.approx(parts["left"][b])


# -- controls change the model as the engine says ---------------------------------------------

def test_pipelining_toggle(small):
    small.pipelining = False
    same_model(small.model, direct(pipelining=False))
    assert small.summary["step_time_s"] == small.model.sequential_step_time
    assert "[in use]" in small.figures["sequential"].title.text
    assert "[in use]" not in small.figures["pipelined"].title.text
    small.controls["pipelining"].value = True                  # as a user would
    assert small.pipelining is True
    same_model(small.model, direct(pipelining=True))


def test_serialization(small):
    small.num_serialized_tables = 2
    expected = direct(num_serialized_tables=2)
    same_model(small.model, expected)
    assert list(small.model.detail["serialized"]) == ["user", "item"]
    assert small.model.phase_time["sc_forward"] >= direct().phase_time["sc_forward"]  # never gains


def test_minibatching(small):
    small.controls["num_minibatches"].value = 3
    assert small.num_minibatches == 3
    same_model(small.model, direct(num_minibatches=3))
    assert small.model.detail["num_minibatches"].tolist() == [3, 3]
    small.num_minibatches = 0                                    # back to what the inputs say
    same_model(small.model, direct())


def test_host_threads_and_tensorcore_sliders(small):
    small.controls["host_threads"].value = 2
    small.controls["tc_forward_s"].value = 250.0                # microseconds on the slider
    small.tc_backward_s = 5e-4
    assert small.host_threads == 2 and small.tc_forward_s == pytest.approx(250e-6)
    same_model(small.model, direct(params=StepModelParams(host_threads=2), tc_forward_s=small.tc_forward_s,
                                   tc_backward_s=5e-4))
    assert small.controls["tc_backward_s"].value == pytest.approx(500.0)


def test_flops_become_times():
    explorer = PipelineTimeline(STATS, topology=TOPOLOGY, widths={"user": 64, "item": 16},
                                tc_forward_flops=4e12, tc_peak_flops=4e16)
    assert explorer.tc_forward_s == pytest.approx(1e-4) and explorer.tc_backward_s == pytest.approx(2e-4)
    explorer.host_threads = 4
    assert explorer.error == ""
    assert explorer.model.phase_time["tc_forward"] == pytest.approx(1e-4)


def test_engine_errors_keep_the_last_model(small):
    before = small.model
    small.tc_forward_s = -1.0
    assert "tc_forward_s" in small.error and small.model is before
    assert "tc_forward_s" in small._error_area.value
    small.tc_forward_s = 1e-4
    assert small.error == "" and small._error_area.value == ""


def test_counts_are_validated(small):
    for name, value in (("num_minibatches", -1), ("num_serialized_tables", -1), ("host_threads", 0)):
        with pytest.raises(Exception, match=name):
            setattr(small, name, value)
    same_model(small.model, direct())


def test_statistics_with_their_own_minibatches_disable_the_slider():
    from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
    from scwork.sharding.minibatch import minibatch

    batch = FeatureBatch.from_ragged({"f": (list(range(64)), [0, 16, 32, 48, 64])})
    table = TableSpec("t", 64, 8, max_ids_per_partition=4, max_unique_ids_per_partition=4)
    plan = minibatch(batch, [FeatureSpec("f", table)], scwork.Topology.for_chip("v5p", num_chips=1),
                     stacking=None, bucket_hash="identity", num_buckets=8, backend="numpy")
    explorer = PipelineTimeline(plan, tc_forward_s=1e-5)
    assert explorer.controls["num_minibatches"].disabled
    explorer.num_minibatches = 2
    assert "minibatch" in explorer.error


# -- advisor ----------------------------------------------------------------------------------

def expected_rows(model):
    advice = advise(model=model)
    return [(f.id, f.title, f.fix) for f in advice]


def test_advisor_table_is_the_advisers(small):
    for change in ({}, {"pipelining": False}, {"num_minibatches": 4}, {"host_threads": 1}):
        for name, value in change.items():
            setattr(small, name, value)
        rows = [(r["id"], r["title"], r["fix"]) for r in small.advice_rows]
        assert rows == expected_rows(small.model)
        # The expected gain is the advisor's, in the explorer's one time unit.
        _, unit = module._time_unit(small.model)
        for r, f in zip(small.advice_rows, small.advice):
            if f.gain_s is not None:
                assert r["expected_gain"].startswith(f"{format_seconds(f.gain_s, unit)} per step")
            else:
                assert "per step" not in r["expected_gain"]
        assert [r["rank"] for r in small.advice_rows] == list(range(1, len(rows) + 1))
        for r in small.advice_rows:
            assert r["title"].replace("'", "&#x27;") in small._advice_div.text


def test_pipelining_off_is_found_and_fixed(small):
    assert "pipelining_off" not in small.advice.ids
    small.pipelining = False
    finding = small.advice.get("pipelining_off")[0]
    assert finding.gain_s == pytest.approx(small.model.sequential_step_time - small.model.pipelined_step_time)
    assert "pipelining_off" in small._advice_div.text
    small.apply_fix(finding)
    assert small.pipelining is True and "pipelining_off" not in small.advice.ids


def test_slow_host_is_found_and_the_button_applies_the_threads(small):
    small.host_threads = 1
    finding = small.advice.get("host_preprocessing_slow")[0]
    assert small.advice[0] is finding
    assert not small.controls["apply_fix"].disabled
    small.controls["apply_fix"].click()
    assert small.host_threads == finding.evidence["threads_needed"]
    assert "host_preprocessing_slow" not in small.advice.ids


def test_findings_without_a_control_are_refused(small):
    # Sequential, so the mini-batches' overheads show in the step time (pipelined, the
    # TensorCore hides them and the advisor stays quiet).
    small.pipelining = False
    small.num_minibatches = 8
    finding = small.advice.get("minibatching_overhead")[0]      # set by hand: not a limits finding
    assert not small.advice.get("limits_too_low")
    small.apply_fix(finding)
    assert small.num_minibatches == 1
    precision = small.advice.get("fp32_where_lower_precision_would_do")
    if precision:
        with pytest.raises(ValueError, match="no control"):
            small.apply_fix(precision[0])


def test_memory_report_follows_serialization():
    from scwork import memory
    from scwork.sharding import FeatureSpec, TableSpec, plan_stacking

    tables = [TableSpec("user", 1_000_000, 64, optimizer="adagrad", max_ids_per_partition=2048,
                        max_unique_ids_per_partition=1024),
              TableSpec("item", 200_000, 16, optimizer="adagrad", max_ids_per_partition=1024,
                        max_unique_ids_per_partition=512)]
    features = [FeatureSpec(t.name, t) for t in tables]
    plan = plan_stacking(features, TOPOLOGY, [["user"], ["item"]], batch_size=4096)
    report = memory.plan(plan, TOPOLOGY, batch_size=4096)
    explorer = PipelineTimeline(STATS, plan, tc_forward_s=1e-4, memory=report)
    assert explorer.model.memory is report
    explorer.num_serialized_tables = 2
    assert explorer.model.memory.knobs.num_serialized_tables == 2
    assert explorer.advice.ids == advise(model=explorer.model).ids


# -- summary and export -----------------------------------------------------------------------

def test_summary_is_the_engines(small):
    for change in ({}, {"pipelining": False}, {"num_serialized_tables": 2}):
        for name, value in change.items():
            setattr(small, name, value)
        model = small.model
        assert small.summary == model.summary()
        text = small._summary_div.text
        for seconds in (model.sequential_step_time, model.pipelined_step_time):
            assert format_seconds(seconds, module._time_unit(model)[1]) in text
        assert f"{model.speedup:.3f}x" in text and model.bottleneck in text
        assert f"step i+{model.update_offset}" in text


def test_to_html_writes_an_offline_file(small, tmp_path):
    path = small.to_html(tmp_path / "pipeline.html")
    text = path.read_text(encoding="utf-8")
    assert path.stat().st_size > 100_000                            # BokehJS inlined
    assert "cdn.bokeh.org" not in text
    assert "Advisor findings" in text and "Step model" in text
    assert "scwork step model" in text                              # the default title


def test_texts_are_html_panes_and_both_gantts_one_bokeh_view(small):
    """Texts outside bokeh (no whole-document BokehJS layout per text change); the charts share a view and axis."""
    from scwork.widgets._panes import TextPane

    boxes = small._views
    assert boxes in small.children
    (left, right) = boxes.children
    assert left.children == (small._legend, small._gantts_view)        # legend above the charts
    assert right.children == (small._summary_div, small._advice_div)   # summary and advisor on the side
    for pane in (small._legend, small._summary_div, small._advice_div):
        assert isinstance(pane, TextPane) and pane.text
    document = small._gantts_view._document
    assert {small.figures["sequential"], small.figures["pipelined"]} <= set(document.select({"type": type(
        small.figures["sequential"])}))
    assert small.figures["sequential"].x_range is small.figures["pipelined"].x_range


def test_to_chrome_trace_delegates_to_the_engine(small, tmp_path):
    small.pipelining = False
    path = small.to_chrome_trace(tmp_path / "trace.json")
    trace = json.loads(path.read_text())
    validate_chrome_trace(trace)
    assert trace["otherData"]["schedule"] == "sequential"
    ds = compare(small.model, read_trace(path))
    np.testing.assert_allclose(ds["ratio"].sel(phase=[p for p in PHASES if small.model.phase_time[p] > 0]), 1.0,
                               rtol=1e-6)


# -- findings follow from their evidence (issue: "limits too low" without limits) --------------

LIMITS = ("max_ids_per_partition", "max_unique_ids_per_partition")


def assert_findings_follow_their_evidence(explorer):
    """Every finding shown says only what its evidence fields show."""
    assert len(explorer.advice_rows) == len(explorer.advice)
    for f, row in zip(explorer.advice, explorer.advice_rows):
        ev = f.evidence
        below = [n for n in LIMITS if ev.get(f"configured_{n}") is not None
                 and ev.get(f"observed_{n}") is not None and ev[f"observed_{n}"] > ev[f"configured_{n}"]]
        if "too low" in f.title:
            assert f.id == "limits_too_low" and (ev["dropped_ids"] > 0 or below), row
        if f.id == "minibatching_overhead":
            assert not below and not ev["dropped_ids"], row
            assert f"{ev['num_minibatches']} mini-batches" in f.title
        assert f.gain_s is None or f.gain_s > 0, row
        for key, value in ev.items():
            assert f"{key} = " in row["evidence"]
            if "gain" in key:
                assert value is None or value > 0, row
        assert not re.search(r"-\d", row["expected_gain"]), row


def test_minibatches_set_by_hand_are_not_called_low_limits(small):
    small.pipelining = False                                      # sequential: the op overheads show
    small.controls["num_minibatches"].value = 4                   # as a user would
    assert small.engine_changes()["num_minibatches"] == 4
    same_model(small.model, small._base.replace(**small.engine_changes()))
    assert small.model.detail["num_minibatches"].tolist() == [4, 4]
    assert all(small.model._inputs["stats"].get(f"configured_{n}") is None for n in LIMITS)
    assert not small.advice.get("limits_too_low")
    assert not any("too low" in r["title"] for r in small.advice_rows)
    assert "too low" not in small._advice_div.text
    overhead = small.advice.get("minibatching_overhead")
    assert {f.stack for f in overhead} == {"user", "item"}
    for f in overhead:
        assert f.evidence["configured_max_ids_per_partition"] is None and "no limits are configured" in f.fix
    assert_findings_follow_their_evidence(small)
    # The button puts the stacks back in one mini-batch.
    assert small.applicable_findings()[0].id in ("pipelining_off", "minibatching_overhead")
    small.apply_fix(overhead[0])
    assert small.num_minibatches == 1 and not small.advice.get("minibatching_overhead")


def test_no_loss_is_offered_as_a_gain(demo):
    try:
        demo.host_threads = 1                                     # host-bound: bf16 tables do not help
        model = demo.model
        bf16 = model.replace(dtype={s: "bf16" for s in model.stacks})
        assert model.step_time - bf16.step_time < 0               # the what-if is a (tiny) loss
        f = demo.advice.get("fp32_where_lower_precision_would_do")[0]
        assert f.evidence["step_gain_bf16_s"] is None and f.gain_s is None
        row = next(r for r in demo.advice_rows if r["id"] == f.id)
        assert "step_gain_bf16_s = none" in row["evidence"] and "per step" not in row["expected_gain"]
        assert_findings_follow_their_evidence(demo)
    finally:
        demo.host_threads = 32


# -- SparseCore lanes and stack stripes are readable --------------------------------------------

def lane_px(figure):
    return figure.frame_height / len(figure.yaxis.ticker.ticks)


def test_lanes_are_tall_enough_in_the_demo(demo):
    for chip in (-1, 0):
        demo.shown_chip = chip
        for figure in demo.figures.values():
            assert lane_px(figure) >= module.MIN_LANE_PX
            assert not figure.yaxis.axis_label                    # two chips: every SparseCore its lane
    demo.shown_chip = -1
    # Stack stripes: half a bar tall, a distinct color per stack, none a phase color, in the legend.
    parts = demo.sources["pipelined_parts"].data
    px = lane_px(demo.figures["pipelined"])
    assert min(np.asarray(parts["top"]) - np.asarray(parts["bottom"])) * px >= 0.35 * module.MIN_LANE_PX
    color_of = dict(zip(parts["stack"], parts["color"]))
    assert set(color_of) == set(demo.model.stacks)
    assert len(set(color_of.values())) == len(color_of)
    assert not set(color_of.values()) & set(module.PHASE_COLORS.values())
    for stack, color in color_of.items():
        assert f"background:{color};border:1px solid #888;margin:0 3px 0 10px;vertical-align:middle'></span>" \
               f"{stack}" in demo._legend.text
    stripes = next(r for r in demo.figures["pipelined"].renderers
                   if getattr(r, "data_source", None) is demo.sources["pipelined_parts"])
    assert stripes.glyph.line_color is None                        # no outline washing out thin stripes


def test_many_chips_aggregate_sparsecore_lanes():
    topo = scwork.Topology.for_chip("v5p", num_chips=64)
    stats = expected_stats({"t": 16.0, "u": 4.0}, topo, batch_size=65536, hot_fraction=0.3, hot_partition=37)
    explorer = PipelineTimeline(stats, topology=topo, widths={"t": 32, "u": 64}, tc_forward_s=1e-4,
                                shown_chip=-1)
    timeline = explorer.model.pipelined
    busy = timeline.busy()
    for name, figure in explorer.figures.items():
        assert lane_px(figure) >= module.MIN_LANE_PX, name
        assert "slowest" in figure.yaxis.axis_label                 # the aggregation is stated
        labels = list(figure.yaxis.major_label_overrides.values())
        assert len(labels) == 64 + 3                               # a SparseCore lane per chip + host, ICI, TC
        assert "chip9/sc (slowest of 4)" in labels
    # Each chip's SparseCore lane draws its slowest SparseCore.
    data = explorer.sources["pipelined"].data
    drawn = {r for r, kind in zip(data["resource"], data["kind"]) if kind == "sc"}
    assert len(drawn) == 64
    for chip in range(64):
        mine = [f"chip{chip}/sc{u}" for u in range(4)]
        assert max(mine, key=lambda n: busy.get(n, 0.0)) in drawn
    assert "slowest" in explorer._legend.text
    # One chip: its four SparseCores each get a lane again.
    explorer.shown_chip = 9
    for figure in explorer.figures.values():
        assert lane_px(figure) >= module.MIN_LANE_PX and not figure.yaxis.axis_label
    assert len(explorer.figures["pipelined"].yaxis.ticker.ticks) == 1 + 4 + 2


# -- one time unit, with the micro sign --------------------------------------------------------

def shown_texts(explorer):
    texts = [explorer._summary_div.text, explorer._advice_div.text, explorer._legend.text]
    for name, figure in explorer.figures.items():
        texts += [figure.title.text, figure.xaxis.axis_label or "", figure.yaxis.axis_label or ""]
        for column in ("start_text", "end_text", "duration_text"):
            texts += list(explorer.sources[name].data[column])
            texts += list(explorer.sources[f"{name}_parts"].data[column])
    return texts


@pytest.mark.parametrize("tc_forward_s, unit", [(1e-4, "\u00b5s"), (2e-3, "ms")])
def test_one_time_unit_everywhere(tc_forward_s, unit):
    explorer = PipelineTimeline(STATS, **{**KWARGS, "tc_forward_s": tc_forward_s, "pipelining": False})
    assert module._time_unit(explorer.model)[1] == unit
    assert explorer.advice.get("pipelining_off")                  # advisor text with seconds is shown
    texts = shown_texts(explorer)
    joined = "\n".join(texts)
    assert not re.search(r"\bus\b", joined)
    units = set(re.findall(r"\d (ms|\u00b5s|ns|s)(?![A-Za-z(])", joined))
    assert units == {unit}, units
    assert "sequential_step_s = " + format_seconds(explorer.model.sequential_step_time, unit) in joined
    # The axis says the unit its ticks are in.
    for name, figure in explorer.figures.items():
        assert figure.xaxis.axis_label.startswith(f"time ({unit})")
        timeline = getattr(explorer.model, name)
        scale = SECONDS_SCALE[unit]
        np.testing.assert_allclose(explorer.sources[name].data["left"], np.asarray(timeline.columns()["start"]) * scale)
        x_end = max(explorer.model.sequential.makespan, explorer.model.pipelined.makespan)
        assert figure.x_range.end == pytest.approx(x_end * scale * 1.09)


def test_a_measured_run_is_overlaid_on_every_model_the_controls_make():
    from scwork.pipeline import read_trace, to_chrome_trace

    base = PipelineTimeline.demo(batch_size=1024)
    measured = read_trace(to_chrome_trace(base.model, schedule="sequential"))
    ex = PipelineTimeline(base.model, measured=measured)
    ratios = dict(zip(ex.overlay["phase"].values.tolist(), ex.overlay["ratio"].values.tolist()))
    assert ratios["sc_forward"] == pytest.approx(1.0) and ratios["tc_forward"] == pytest.approx(1.0)
    assert "Measured vs model" in ex._summary_div.text
    ex.tc_forward_s = 2 * ex.tc_forward_s          # the model changes, the measurement does not
    ratios = dict(zip(ex.overlay["phase"].values.tolist(), ex.overlay["ratio"].values.tolist()))
    assert ratios["tc_forward"] == pytest.approx(0.5, rel=1e-3)
    assert ex.overlay["phase"].values[0] == "tc_forward" or ex.overlay["divergence"].values[0] >= np.log(2) - 1e-6
