"""PipelineTimeline: where a training step's time goes, with and without pipelining.

One explorer over :func:`scwork.pipeline.step_model` and :func:`scwork.advisor.advise`:

- **Two Gantt charts sharing their time axis**: the sequential schedule
  (``tf_xla_disable_full_embedding_pipelining = true``) above the pipelined one,
  each with a lane per host, SparseCore, chip ICI and chip TensorCore, over a few
  steps (lanes stay at least :data:`MIN_LANE_PX` tall: with many chips, each chip gets
  one SparseCore lane showing its slowest SparseCore, as the y axis says). Bars are
  colored by phase and numbered by step; the stripe in the lower half of every
  SparseCore bar splits it into the stacked tables (and mini-batches) it runs, one
  color of :data:`STACK_COLORS` per stack.
  Gray bands mark the pipelined schedule's pre-loop (fill) and post-loop (drain)
  stages, dashed lines the completion of every step. Hovering a bar names its
  phase, step, stage, lane, start, end and duration; hovering a stripe names its
  stack.
- **Summary**: step time of both schedules, speed-up, staleness of the
  SparseCore's tables under pipelining, bottleneck, phase times, and how the ICI
  all-to-all was modelled (with ``a2a="data"``: the routed all-to-all's hottest link,
  its bytes and share, also in the ICI bars' hover).
- **Advisor**: the findings of :func:`scwork.advisor.advise` for the current
  state (title, evidence, fix, expected gain), most impactful first.

Every duration (axis, tooltips, titles, summary, advisor evidence and gains) is in
one unit, chosen by the magnitude of the step time (µs or ms, see
:func:`scwork.widgets._html.format_seconds`).

Controls toggle pipelining, set the mini-batches per stack, the serialized tables
(``xla_sc_num_serialized_tables_to_optimize_hbm``), the host's preprocessing
threads and the TensorCore times, and pick which chip's lanes to show; a button
applies the advisor's first finding that one of these controls can fix. Every change
re-runs the step model through :meth:`scwork.pipeline.StepModel.replace` and the
advisor, then updates the bokeh sources in place; every number drawn comes from
the engine. The model's assumptions are the fields of
:class:`scwork.pipeline.StepModelParams`.

Examples
--------
>>> from scwork.widgets import PipelineTimeline      # doctest: +SKIP
>>> explorer = PipelineTimeline.demo()                # doctest: +SKIP
>>> explorer.pipelining = False                       # doctest: +SKIP
>>> explorer.advice.ids[0]                            # doctest: +SKIP
'pipelining_off'
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import ipywidgets
import numpy as np
import traitlets
from bokeh.layouts import column
from bokeh.models import ColumnDataSource, HoverTool
from scwork.widgets import _bokeh
from scwork.widgets._display import figure_view
from scwork.widgets._panes import TextPane, hbox, vbox
from scwork.widgets._html import SECONDS_SCALE, format_bytes, format_seconds, seconds_unit

from scwork.errors import ScworkError
from scwork.pipeline import PHASES, StepModel, step_model, write_chrome_trace

__all__ = ["APPLICABLE_FINDINGS", "MIN_LANE_PX", "PHASE_COLORS", "SCHEDULES", "STACK_COLORS", "PipelineTimeline"]

#: The two schedules drawn, top to bottom.
SCHEDULES: tuple[str, ...] = ("sequential", "pipelined")
#: Bar color of every phase: forward passes saturated, backward passes light.
PHASE_COLORS: Mapping[str, str] = {
    "host": "#8c8c8c",
    "sc_forward": "#1f77b4", "ici_forward": "#9467bd", "tc_forward": "#2ca02c",
    "tc_backward": "#98df8a", "ici_backward": "#c5b0d5", "sc_backward": "#ff7f0e",
}
#: Advisor findings :meth:`PipelineTimeline.apply_fix` can apply with this explorer's controls.
APPLICABLE_FINDINGS: tuple[str, ...] = ("pipelining_off", "host_preprocessing_slow", "limits_too_low",
                                        "minibatching_overhead", "hbm_stack_overflow")
#: Colors of the stack stripes in SparseCore bars: saturated, far from every phase color and from
#: each other, so that neighbouring stacks stay apart even a few pixels wide.
STACK_COLORS: tuple[str, ...] = ("#d62728", "#17becf", "#e6ab02", "#5a3d2b", "#e377c2", "#111111", "#bcbd22",
                                 "#7b4173")
_PHASE_LABELS = {"host": "host preprocessing", "sc_forward": "SparseCore forward", "ici_forward": "ICI forward",
                 "tc_forward": "TensorCore forward", "tc_backward": "TensorCore backward",
                 "ici_backward": "ICI backward", "sc_backward": "SparseCore backward"}
# step_model keywords driven by the controls (traits of the same name).
_ENGINE_TRAITS = ("pipelining", "num_minibatches", "num_serialized_tables", "host_threads", "tc_forward_s",
                  "tc_backward_s")
_GANTT_WIDTH = 640
# Pixels per lane preferred; lanes beyond _MAX_FRAME_PX at MIN_LANE_PX are aggregated (_lanes).
_LANE_PX = 22
#: Least pixels per lane: a SparseCore bar and its stack stripe (half the bar) stay readable.
MIN_LANE_PX = 14
_MAX_FRAME_PX = 640
_SIDE_WIDTH = 450
_STAGE_BAND = "#e8e8e8"
_STEP_LINE = "#555555"
# Parts stripe: the bottom half of a SparseCore bar (lane i spans y in [-i - 0.38, -i + 0.38]).
_STRIPE_TOP, _STRIPE_BOTTOM = 0.0, -0.38
# Step numbers are written inside bars at least this many pixels wide.
_MIN_LABEL_PX = 13


def _time_unit(model: StepModel) -> tuple[float, str]:
    """The one time unit of every number drawn for ``model``, by the magnitude of its step time.

    Returns
    -------
    scale : float
        Seconds -> that unit.
    unit : str
        ``"\u00b5s"`` or ``"ms"`` (``"s"`` for steps of a second or more).
    """
    unit = seconds_unit(max(model.sequential_step_time, model.pipelined_step_time))
    return SECONDS_SCALE[unit], unit


def _format_evidence(value: Any, unit: str, *, seconds: bool = False) -> str:
    """Evidence as read in the advisor panel; ``seconds``: a duration, shown in ``unit``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value)
    if seconds and isinstance(value, (int, float, np.integer, np.floating)):
        return format_seconds(value, unit)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_format_evidence(v, unit)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_format_evidence(v, unit) for v in value) + "]"
    return str(value)


def _ici_text(model: StepModel, phase: str, unit: str) -> str:
    """How an ICI phase's all-to-all was modelled: the routed one's hottest link (``a2a="data"``) or uniform."""
    links = model.ici_links
    if links is None:
        return "uniform all-to-all (busiest device's volume); step_model(a2a='data') routes the statistics"
    one = links.sel(direction="forward" if phase == "ici_forward" else "backward")
    if float(one["total_link_bytes"]) <= 0:
        return "from the statistics: no bytes cross ICI"
    return (f"from the statistics, routed x-y-z: hottest link {one['hottest_link_label'].item()} carries "
            f"{format_bytes(float(one['hottest_link_bytes']))} per step ({float(one['hottest_link_share']):.0%} of "
            f"all link bytes, {float(one['link_imbalance']):.1f}x the mean link, busy "
            f"{format_seconds(float(one['link_time'].max()), unit)})")


def _is_duration(name: str) -> bool:
    """Whether an evidence name holds seconds (``*_s``; ``*_per_s`` is a rate)."""
    return name.endswith("_s") and not name.endswith("_per_s")


def _lanes(timeline, chips: list[int]) -> tuple[list[str], list[str], str]:
    """The lanes drawn for ``chips``: every resource, or fewer when they would not fit at MIN_LANE_PX.

    Too many lanes for :data:`_MAX_FRAME_PX` at :data:`MIN_LANE_PX` are aggregated in two
    steps: first one SparseCore lane per chip (its slowest SparseCore), then also one lane
    for the hosts, the ICI and the TensorCores (the slowest of each). An aggregated lane
    draws the slowest resource's own intervals (the one that sets the step).

    Returns
    -------
    resources : list of str
        The resource drawn on each lane, top to bottom.
    labels : list of str
        The lane names on the y axis.
    note : str
        What was aggregated ("" when every resource has its lane): the y axis label.
    """
    units = timeline.units
    busy = timeline.busy()
    hosts = sorted({int(units.host_of_chip[c]) for c in chips})
    host_names = [units.resource_name("host", h) for h in hosts]
    per_chip = {c: [name for name in timeline.resources() if name.startswith(f"chip{c}/")] for c in chips}

    def slowest(names):
        return max(names, key=lambda name: busy.get(name, 0.0))

    def sc_lane(c):
        names = [n for n in per_chip[c] if n.startswith(f"chip{c}/sc")]
        return [(slowest(names), f"chip{c}/sc (slowest of {len(names)})")] if len(names) > 1 else \
            [(n, n) for n in names]

    full = [(n, n) for n in host_names] + [(n, n) for c in chips for n in per_chip[c]]
    per_chip_sc = [(n, n) for n in host_names] + [
        lane for c in chips for lane in (*sc_lane(c), *((n, n) for n in per_chip[c] if "/sc" not in n))]
    kinds = [[n for c in chips for n in per_chip[c] if n.endswith(f"/{kind}")] for kind in ("ici", "tc")]
    slowest_of = [(slowest(names), f"{kind} (slowest of {len(names)}: {slowest(names).split('/')[0]})")
                  if len(names) > 1 else (names[0], names[0]) for kind, names in zip(("hosts", "ici", "tc"),
                                                                                     (host_names, *kinds)) if names]
    per_kind = slowest_of[:1] + [lane for c in chips for lane in sc_lane(c)] + slowest_of[1:]
    levels = [(full, ""), (per_chip_sc, "one SparseCore lane per chip: its slowest SparseCore"),
              (per_kind, "one SparseCore lane per chip (its slowest); hosts, ICI, TensorCores: the slowest")]
    for lanes, note in levels:
        if len(lanes) * MIN_LANE_PX <= _MAX_FRAME_PX:
            break
    return [r for r, _ in lanes], [label for _, label in lanes], note


def _lane_px(num_lanes: int) -> int:
    """Pixels per lane: the preferred height, down to MIN_LANE_PX when many lanes would make a tall chart."""
    return int(min(_LANE_PX, max(MIN_LANE_PX, _MAX_FRAME_PX // max(num_lanes, 1))))


def _has_minibatch_dim(stats: Any) -> bool:
    """Whether the statistics already split stacks into mini-batches (then the count is theirs)."""
    if hasattr(stats, "num_minibatches") and hasattr(stats, "stats"):
        return True
    try:
        return "minibatch" in stats["ids"].dims
    except (KeyError, TypeError, AttributeError):
        return False


class _ScheduleView:
    """The Gantt chart of one schedule, with its parts stripe, step lines and stage bands."""

    def __init__(self, schedule: str, x_range=None):
        self.schedule = schedule
        self.gantt = _bokeh.Gantt(title=schedule, x_axis_label="time", width=_GANTT_WIDTH, lane_height=_LANE_PX)
        fig = self.gantt.figure
        if x_range is not None:
            fig.x_range = x_range  # one time axis for both schedules: zooming one zooms the other
        fig.toolbar.logo = None
        self.bands = ColumnDataSource({k: [] for k in ("left", "right", "bottom", "top")})
        band_renderer = fig.quad(left="left", right="right", bottom="bottom", top="top", source=self.bands,
                                 fill_color=_STAGE_BAND, fill_alpha=0.7, line_color=None)
        band_renderer.level = "underlay"
        self.step_lines = ColumnDataSource({k: [] for k in ("x", "y0", "y1", "step")})
        fig.segment(x0="x", x1="x", y0="y0", y1="y1", source=self.step_lines, line_color=_STEP_LINE,
                    line_dash="dashed", line_width=1, line_alpha=0.7)
        self.top_labels = ColumnDataSource({k: [] for k in ("x", "y", "text")})
        fig.text(x="x", y="y", text="text", source=self.top_labels, text_align="center",
                 text_baseline="middle", text_font_size="10px", text_color="#444444")
        self.parts = ColumnDataSource({k: [] for k in ("left", "right", "top", "bottom", "color", "stack", "phase",
                                                       "step", "resource", "start_text", "end_text",
                                                       "duration_text")})
        # No outline: a white line would wash out stripes a pixel or two wide.
        parts_renderer = fig.quad(left="left", right="right", top="top", bottom="bottom", source=self.parts,
                                  fill_color="color", line_color=None)
        self.step_text = ColumnDataSource({k: [] for k in ("x", "y", "text")})
        fig.text(x="x", y="y", text="text", source=self.step_text, text_align="center", text_baseline="middle",
                 text_font_size="9px", text_color="#ffffff", text_font_style="bold")
        bars_renderer = next(r for r in fig.renderers if getattr(r, "data_source", None) is self.gantt.bars)
        fig.add_tools(HoverTool(renderers=[bars_renderer], tooltips=[
            ("phase", "@phase_label"), ("step", "@step"), ("stage", "@stage"), ("lane", "@resource"),
            ("start", "@start_text"), ("end", "@end_text"), ("duration", "@duration_text"),
            ("all-to-all", "@ici_note")]))
        fig.add_tools(HoverTool(renderers=[parts_renderer], tooltips=[
            ("stack", "@stack"), ("phase", "@phase"), ("step", "@step"), ("lane", "@resource"),
            ("start", "@start_text"), ("end", "@end_text"), ("duration", "@duration_text")]))
        self.lane_note = ""

    def draw(self, model: StepModel, chips: list[int], *, x_end: float, scale: float, unit: str,
             in_use: bool) -> None:
        """Draw ``model``'s timeline of this schedule on the lanes of ``chips`` (and their hosts), times in ``unit``."""
        timeline = getattr(model, self.schedule)
        lanes, labels, self.lane_note = _lanes(timeline, chips)
        lane_of = {name: i for i, name in enumerate(lanes)}
        columns = timeline.columns()
        keep = [i for i, name in enumerate(columns["resource"]) if name in lane_of]
        data = {key: [values[i] for i in keep] for key, values in columns.items()}
        start = np.asarray(data["start"], dtype=float)
        end = np.asarray(data["end"], dtype=float)
        lane = np.array([lane_of[name] for name in data["resource"]], dtype=np.int64)
        data.update({
            "lane": lane, "left": start * scale, "right": end * scale,
            "color": [PHASE_COLORS[p] for p in data["phase"]],
            "phase_label": [_PHASE_LABELS[p] for p in data["phase"]],
            "start_text": [format_seconds(s, unit) for s in start], "end_text": [format_seconds(e, unit) for e in end],
            "duration_text": [format_seconds(d, unit) for d in data["duration"]],
        })
        notes = {p: _ici_text(model, p, unit) for p in ("ici_forward", "ici_backward")}
        data["ici_note"] = [notes.get(p, "") for p in data["phase"]]
        self.gantt.set_bars(data)
        span = x_end * scale
        frame_px = self.gantt.figure.frame_width
        wide = [span > 0 and (hi - lo) / span * frame_px >= _MIN_LABEL_PX
                for lo, hi in zip(data["left"], data["right"])]
        # On SparseCore bars the number sits above the stacks stripe.
        self.step_text.data = {
            "x": [(lo + hi) / 2 for lo, hi, w in zip(data["left"], data["right"], wide) if w],
            "y": [-float(n) + (0.19 if kind == "sc" else 0.0) for n, kind, w in zip(lane, data["kind"], wide) if w],
            "text": [str(s) for s, w in zip(data["step"], wide) if w],
        }
        self._draw_parts(timeline, data, lane, scale, unit, model)
        self.gantt.lane_height = _lane_px(len(lanes))
        self.gantt.set_lanes(labels, x_end=x_end * scale, label_room=0.09)
        busy = timeline.busy()
        makespan = timeline.makespan
        self.gantt.set_lane_labels(np.arange(len(lanes)), [x_end * scale] * len(lanes),
                                   [f"{busy.get(name, 0.0) / makespan:.0%}" if makespan > 0 else ""
                                    for name in lanes])
        # One extra row above the first lane for step / stage labels.
        fig = self.gantt.figure
        fig.y_range.end = 1.35
        fig.frame_height = self.gantt.lane_height * (len(lanes) + 1)
        fig.yaxis.axis_label = self.lane_note or None
        bottom = -(len(lanes) - 1) - 0.6
        completion = timeline.step_completion()
        self.step_lines.data = {"x": completion * scale, "y0": [bottom] * len(completion),
                                "y1": [0.6] * len(completion), "step": list(range(len(completion)))}
        if timeline.pipelined:
            # Stage spans from the engine's stage of every interval.
            pre_end = max((e for e, st in zip(data["end"], data["stage"]) if st == "pre-loop"), default=0.0)
            post_start = min((s for s, st in zip(data["start"], data["stage"]) if st == "post-loop"),
                             default=makespan)
            self.bands.data = {"left": [0.0, post_start * scale], "right": [pre_end * scale, makespan * scale],
                               "bottom": [bottom, bottom], "top": [1.35, 1.35]}
            self.top_labels.data = {"x": [pre_end * scale / 2, (pre_end + post_start) * scale / 2,
                                          (post_start + makespan) * scale / 2],
                                    "y": [0.95] * 3, "text": ["pre-loop", "main loop", "post-loop"]}
        else:
            self.bands.data = {k: [] for k in ("left", "right", "bottom", "top")}
            previous = np.concatenate([[0.0], completion[:-1]])
            self.top_labels.data = {"x": list((previous + completion) / 2 * scale), "y": [0.95] * len(completion),
                                    "text": [f"step {i}" for i in range(len(completion))]}
        step = model.pipelined_step_time if timeline.pipelined else model.sequential_step_time
        title = ("Pipelined" if timeline.pipelined else "Sequential (tf_xla_disable_full_embedding_pipelining)")
        extra = (f", {model.speedup:.2f}x faster; SparseCore tables {model.staleness_steps} step(s) stale"
                 if timeline.pipelined else "")
        fig.title.text = (f"{title}: {format_seconds(step, unit)} per step{extra}"
                          + ("   [in use]" if in_use else ""))
        fig.title.text_color = "#111111" if in_use else "#777777"
        fig.xaxis.axis_label = f"time ({unit}); lane labels: busy share of the run"

    def _draw_parts(self, timeline, data, lane, scale, unit, model) -> None:
        """The stacked tables (and mini-batches) inside each SparseCore bar, laid out as the trace export does."""
        units = timeline.units
        # Part labels are "<stack>" or "<stack> (mini-batch b/m)" (the engine's display breakdown).
        stack_of_label = {}
        for labels, _ in timeline.parts.values():
            for label in labels:
                stack_of_label[label] = next((k for k, name in enumerate(model.stacks)
                                              if label == name or label.startswith(f"{name} (")), 0)
        rows = {k: [] for k in ("left", "right", "top", "bottom", "stack", "phase", "step", "resource",
                                "start_text", "end_text", "duration_text", "index")}
        for i, phase in enumerate(data["phase"]):
            if phase not in timeline.parts or data["duration"][i] <= 0:
                continue
            labels, fractions = timeline.parts[phase]
            sc_unit = data["chip"][i] * units.sparsecores_per_chip + data["unit"][i]
            t0, duration = data["start"][i], data["duration"][i]
            for label, fraction in zip(labels, fractions[:, sc_unit]):
                if fraction <= 0:
                    continue
                t1 = t0 + fraction * duration
                rows["left"].append(t0 * scale)
                rows["right"].append(t1 * scale)
                rows["top"].append(-lane[i] + _STRIPE_TOP)
                rows["bottom"].append(-lane[i] + _STRIPE_BOTTOM)
                rows["stack"].append(label)
                rows["phase"].append(_PHASE_LABELS[phase])
                rows["step"].append(data["step"][i])
                rows["resource"].append(data["resource"][i])
                rows["start_text"].append(format_seconds(t0, unit))
                rows["end_text"].append(format_seconds(t1, unit))
                rows["duration_text"].append(format_seconds(t1 - t0, unit))
                rows["index"].append(stack_of_label[label])
                t0 = t1
        index = np.asarray(rows.pop("index"), dtype=np.int64)
        rows["color"] = list(_bokeh.category_colors(index, palette=STACK_COLORS)) if len(index) else []
        self.parts.data = rows


class PipelineTimeline(_bokeh.SyncedDisplay, ipywidgets.VBox):
    """Interactive step-time model: both schedules as Gantt charts, the summary and the advisor.

    Parameters
    ----------
    stats_or_model : xarray.Dataset, MiniBatchPlan or StepModel
        Statistics of a batch (:func:`scwork.sharding.compute_stats` or
        :func:`scwork.pipeline.expected_stats`), a mini-batch plan, or a step model
        already built (its inputs are kept; the controls change them).
    plan : StackingPlan, optional
        As :func:`~scwork.pipeline.step_model` (not with a StepModel).
    topology : scwork.Topology, optional
        As :func:`~scwork.pipeline.step_model`.
    shown_chip : int, optional
        Initial value of the trait below.
    advise_kwargs : dict, optional
        Extra keywords of :func:`scwork.advisor.advise` (``config``, ``memory``,
        ``thresholds``, ``batch_size``...); ``model`` is always the current one.
    **step_model_kwargs
        Any other keyword of :func:`~scwork.pipeline.step_model` (``widths``,
        ``tc_forward_s``, ``params``, ``memory``...). ``pipelining``,
        ``num_serialized_tables``, ``tc_forward_s`` / ``tc_backward_s`` (or the
        FLOPs) and ``params.host_threads`` set the initial trait values. With a
        ``memory`` report, changing the serialized tables re-plans it
        (:meth:`scwork.memory.MemoryReport.replace`) so the advisor sees the same
        setting.

    Attributes
    ----------
    pipelining : bool
        ``not tf_xla_disable_full_embedding_pipelining``: which schedule is in use
        (both are always drawn).
    num_minibatches : int
        Mini-batches of every stack; 0 keeps what the inputs say (the statistics'
        own mini-batches or the ``num_minibatches`` keyword).
    num_serialized_tables : int
        ``xla_sc_num_serialized_tables_to_optimize_hbm`` (0 and 1: none).
    host_threads : int
        Preprocessing threads per host (:attr:`StepModelParams.host_threads`).
    tc_forward_s, tc_backward_s : float
        TensorCore time per step (seconds).
    shown_chip : int
        Chip whose lanes are drawn (with its host); -1 draws every chip.
    error : str
        Why the last setting could not be modelled (the engine's message, read-only);
        the views keep the last valid model meanwhile.
    model : scwork.pipeline.StepModel
        The engine's model of the current setting.
    advice : scwork.advisor.Advice
        :func:`~scwork.advisor.advise` of :attr:`model`.
    advice_rows : list of dict
        The advisor table as shown: ``rank, severity, id, title, evidence, fix,
        flags, expected_gain`` per finding, in the advisor's order.
    summary : dict
        ``model.summary()``: step times, speed-up, staleness, bottleneck, phase times.
    sources : dict of str to ColumnDataSource
        ``sequential`` / ``pipelined``: one row per interval of the shown lanes,
        with every column of :meth:`scwork.pipeline.Timeline.columns` (seconds) plus
        ``lane, left, right`` (drawn unit), ``color`` and hover text;
        ``sequential_parts`` / ``pipelined_parts``: the stack stripes;
        ``sequential_steps`` / ``pipelined_steps``: the step-completion lines;
        ``pipelined_stages``: the pre-loop / post-loop bands.
    figures : dict of str to bokeh figure
        ``sequential`` and ``pipelined``.
    controls : dict of str to ipywidgets.Widget

    Raises
    ------
    ScworkError
        The first model fails (the engine's ConfigError / InputError); later failures
        go to :attr:`error` instead.

    Examples
    --------
    >>> import scwork
    >>> from scwork.pipeline import expected_stats
    >>> from scwork.widgets import PipelineTimeline
    >>> topo = scwork.Topology.for_chip("v5p", num_chips=2)
    >>> stats = expected_stats({"user": 20.0, "item": 5.0}, topo, batch_size=16384)
    >>> explorer = PipelineTimeline(stats, topology=topo, widths={"user": 64, "item": 32}, tc_forward_s=2e-4)
    >>> explorer.summary["bottleneck"], explorer.advice.ids    # one preprocessing thread
    ('host', ['host_preprocessing_slow'])
    >>> explorer.apply_fix(explorer.advice[0])                 # the threads the advisor asks for
    >>> explorer.host_threads, explorer.summary["bottleneck"]
    (15, 'tc')
    >>> explorer.pipelining = False                            # re-runs the model and the advisor
    >>> explorer.advice.ids[0]
    'pipelining_off'
    """

    pipelining = traitlets.Bool(True)
    num_minibatches = traitlets.Int(0)
    num_serialized_tables = traitlets.Int(1)
    host_threads = traitlets.Int(1)
    tc_forward_s = traitlets.Float(0.0)
    tc_backward_s = traitlets.Float(0.0)
    shown_chip = traitlets.Int(-1)
    error = traitlets.Unicode("", read_only=True)

    def __init__(self, stats_or_model: Any, plan: Any = None, *, topology: Any = None, shown_chip: int | None = None,
                 advise_kwargs: Mapping[str, Any] | None = None, measured: Any = None, **step_model_kwargs: Any):
        super().__init__()
        self._advise_kwargs = dict(advise_kwargs or {})
        # A measured run (scwork.interop.profile.read_jax_profile / scwork.pipeline.read_trace,
        # or a profile path): every model the controls make is overlaid on it.
        if measured is not None:
            from scwork.interop.profile import read_jax_profile
            from scwork.pipeline import MeasuredTrace

            measured = measured if isinstance(measured, MeasuredTrace) else read_jax_profile(measured)
        self._measured = measured
        self.overlay = None
        if isinstance(stats_or_model, StepModel):
            if plan is not None or topology is not None or step_model_kwargs:
                raise TypeError("with a StepModel, pass no plan, topology or step_model keywords: "
                                "use model.replace(...) first")
            base = stats_or_model
            stats = base._inputs.get("stats")
        else:
            stats = stats_or_model
            base = step_model(stats_or_model, plan, topology=topology, **step_model_kwargs)
        self._base = base
        self._memory = self._advise_kwargs.pop("memory", None) or base.memory
        self._memory_by_serialized: dict[int, Any] = {}
        if self._memory is not None:
            # The report given stands for its own serialization; other values are re-planned.
            self._memory_by_serialized[int(self._memory.knobs.num_serialized_tables)] = self._memory
        self._minibatches_fixed = _has_minibatch_dim(stats)
        self._syncing = False
        # Traits start at the base model's values, so the first view is the model given.
        with self._quiet():
            self.pipelining = base.pipelining
            self.num_serialized_tables = int(base._inputs.get("num_serialized_tables", 1))
            self.host_threads = base.params.host_threads
            self.tc_forward_s = base.phase_time["tc_forward"]
            self.tc_backward_s = base.phase_time["tc_backward"]
            self.num_minibatches = 0
            if shown_chip is None:
                # Few chips: draw them all; many: the chip of the slowest SparseCore.
                sc_time = np.asarray(base.durations["sc_forward"]) + np.asarray(base.durations["sc_backward"])
                slowest = int(base.units.chip_of_sc[int(np.argmax(sc_time))])
                shown_chip = -1 if base.units.num_chips <= 2 else slowest
            self.shown_chip = shown_chip
        self.model = base
        self.advice = self._advise(base)
        self.summary: dict[str, Any] = base.summary()
        self.advice_rows: list[dict[str, Any]] = []

        self._build_views()
        self._build_controls()
        self.observe(self._on_engine_trait, names=list(_ENGINE_TRAITS))
        self.observe(self._on_view_trait, names=["shown_chip"])
        self._draw()

    @classmethod
    def demo(cls, *, batch_size: int = 8192, num_chips: int = 2, seed: int = 0, **kwargs: Any) -> PipelineTimeline:
        """A ranking model on synthetic Zipf ids (:func:`scwork.datasets.synthetic`) on TPU v5p.

        Six features look up five Adagrad tables (users, items, query tokens,
        categories and a width-1 flag; the item table also serves a 20-id history
        feature), stacked automatically; statistics of one batch come from
        :func:`scwork.sharding.compute_stats`. The TensorCore takes 100 \u00b5s forward
        and 200 \u00b5s backward, the host preprocesses with 32 threads: the pipelined
        step is TensorCore-bound and about 1.7x faster than the sequential one.

        Parameters
        ----------
        batch_size : int
            Global batch.
        num_chips : int
            v5p chips (4 SparseCores each).
        seed : int
            Seed of the synthetic ids.
        **kwargs
            Constructor keywords overriding the demo's (``tc_forward_s``, ``params``,
            ``pipelining``...).
        """
        import scwork
        from scwork import datasets
        from scwork.pipeline import StepModelParams
        from scwork.sharding import FeatureBatch, compute_stats, plan_stacking

        features, valency = _demo_features()
        topology = scwork.Topology.for_chip("v5p", num_chips=num_chips)
        data = datasets.synthetic(batch_size, features=[f.name for f in features],
                                  vocab_size={f.name: f.table.vocab_size for f in features}, valency=valency,
                                  seed=seed)
        batch = FeatureBatch.from_ragged(next(iter(data.batches())))
        plan = plan_stacking(features, topology, "auto", batch_size=batch_size)
        # numpy backend: a demo should not wait for numba's first compile.
        stats = compute_stats(batch, features, topology, stacking=plan)
        options: dict[str, Any] = {"tc_forward_s": 100e-6, "tc_backward_s": 200e-6,
                                   "params": StepModelParams(host_threads=32)}
        options.update(kwargs)
        return cls(stats, plan, **options)

    # -- engine ---------------------------------------------------------------------

    def _memory_for(self, num_serialized_tables: int):
        """The memory report at this serialization (re-planned once per value)."""
        if self._memory is None:
            return None
        if num_serialized_tables not in self._memory_by_serialized:
            self._memory_by_serialized[num_serialized_tables] = self._memory.replace(
                num_serialized_tables=num_serialized_tables)
        return self._memory_by_serialized[num_serialized_tables]

    def engine_changes(self) -> dict[str, Any]:
        """The :meth:`StepModel.replace` keywords of the current control values.

        ``timeline.model`` equals ``base.replace(**timeline.engine_changes())`` where
        ``base`` is the model built from the constructor's arguments.
        """
        changes: dict[str, Any] = {
            "pipelining": bool(self.pipelining),
            "num_serialized_tables": int(self.num_serialized_tables),
            "host_threads": int(self.host_threads),
            # Times replace any FLOPs given: the sliders hold seconds.
            "tc_forward_s": float(self.tc_forward_s), "tc_backward_s": float(self.tc_backward_s),
            "tc_forward_flops": None, "tc_backward_flops": None,
        }
        if self.num_minibatches > 0:
            changes["num_minibatches"] = int(self.num_minibatches)
        if self._memory is not None:
            changes["memory"] = self._memory_for(int(self.num_serialized_tables))
        return changes

    def _advise(self, model: StepModel):
        from scwork.advisor import advise

        memory = model.memory if model.memory is not None else self._memory_for(int(self.num_serialized_tables))
        return advise(model=model, memory=memory, **self._advise_kwargs)

    def apply_fix(self, finding) -> None:
        """Set the control an advisor finding names to the value its evidence gives.

        ``pipelining_off`` turns pipelining on; ``host_preprocessing_slow`` sets the
        threads the advisor found necessary; ``minibatching_overhead`` and
        ``limits_too_low`` (mini-batching) put every stack in one mini-batch; ``hbm_stack_overflow``
        serializes the number of
        tables the memory model found.

        Parameters
        ----------
        finding : scwork.advisor.Finding
            One of :attr:`advice`.

        Raises
        ------
        ValueError
            The finding changes something this explorer has no control for (dtype,
            chips, stacking, limits of dropped ids...).
        """
        evidence = finding.evidence
        if finding.id == "pipelining_off":
            self.pipelining = True
        elif finding.id == "host_preprocessing_slow" and evidence.get("threads_needed"):
            self.host_threads = int(evidence["threads_needed"])
        elif (finding.id in ("limits_too_low", "minibatching_overhead") and not evidence.get("dropped_ids")
              and not self._minibatches_fixed and evidence.get("num_minibatches", 1) > 1):
            self.num_minibatches = 1
        elif finding.id == "hbm_stack_overflow" and evidence.get("num_serialized_tables"):
            self.num_serialized_tables = int(evidence["num_serialized_tables"])
        else:
            raise ValueError(f"finding {finding.id!r} has no control in this explorer; apply its fix "
                             f"({finding.fix}) to the inputs and build a new explorer")

    def applicable_findings(self) -> list:
        """The findings of :attr:`advice` that :meth:`apply_fix` can apply, in the advisor's order."""
        out = []
        for finding in self.advice:
            ev = finding.evidence
            if (finding.id == "pipelining_off"
                    or (finding.id == "host_preprocessing_slow" and ev.get("threads_needed"))
                    or (finding.id in ("limits_too_low", "minibatching_overhead") and not ev.get("dropped_ids")
                        and not self._minibatches_fixed and ev.get("num_minibatches", 1) > 1)
                    or (finding.id == "hbm_stack_overflow" and ev.get("num_serialized_tables"))):
                out.append(finding)
        return out

    # -- construction -----------------------------------------------------------------

    def _build_views(self) -> None:
        self._schedule_views = {"sequential": _ScheduleView("sequential")}
        # One time axis for both schedules: zooming one zooms the other.
        shared_time = self._schedule_views["sequential"].gantt.figure.x_range
        self._schedule_views["pipelined"] = _ScheduleView("pipelined", x_range=shared_time)
        # Texts are HTML panes, not bokeh Divs (see scwork.widgets._panes); the `_div`
        # names are older than the panes.
        self._legend = TextPane(width=_GANTT_WIDTH + 170)
        self._summary_div = TextPane(width=_SIDE_WIDTH)
        self._advice_div = TextPane(width=_SIDE_WIDTH)
        # Both Gantt charts in one bokeh view: they share their time axis (x_range).
        self._gantts_view = figure_view(column(self._schedule_views["sequential"].gantt.figure,
                                               self._schedule_views["pipelined"].gantt.figure))
        self._views = hbox([vbox([self._legend, self._gantts_view]), vbox([self._summary_div, self._advice_div])])
        self.sources: dict[str, ColumnDataSource] = {}
        self.figures: dict[str, Any] = {}
        for name, view in self._schedule_views.items():
            self.sources.update({name: view.gantt.bars, f"{name}_parts": view.parts,
                                 f"{name}_steps": view.step_lines})
            self.figures[name] = view.gantt.figure
        self.sources["pipelined_stages"] = self._schedule_views["pipelined"].bands

    def _build_controls(self) -> None:
        W = ipywidgets.Layout
        wide = {"description_width": "150px"}
        K = len(self.model.stacks)
        self._pipelining = ipywidgets.Checkbox(description="pipelining (SparseCore || TensorCore)", indent=False,
                                               layout=W(width="290px"))
        self._minibatches = ipywidgets.IntSlider(min=0, max=16, description="mini-batches per stack", style=wide,
                                                 layout=W(width="420px"), continuous_update=False)
        self._serialized = ipywidgets.IntSlider(min=0, max=max(K, 1), description="serialized tables", style=wide,
                                                layout=W(width="420px"), continuous_update=False)
        self._threads = ipywidgets.IntSlider(min=1, max=max(64, 2 * self.host_threads), description="host threads",
                                             style=wide, layout=W(width="420px"), continuous_update=False)
        tc_max = self._tc_slider_max()
        # The TensorCore sliders show microseconds (the traits hold seconds).
        self._tc_forward, self._tc_backward = (
            ipywidgets.FloatSlider(min=0.0, max=tc_max, step=tc_max / 200, description=f"TensorCore {d} (\u00b5s)",
                                   style=wide, layout=W(width="420px"), continuous_update=False, readout_format=".1f")
            for d in ("fwd", "bwd"))
        chips = self.model.units.num_chips
        self._chip = ipywidgets.Dropdown(options=[("all chips", -1)] + [(f"chip {c}", c) for c in range(chips)],
                                         description="lanes of", style={"description_width": "initial"},
                                         layout=W(width="180px"))
        self._apply = ipywidgets.Button(description="apply the top fix", layout=W(width="150px"),
                                        tooltip="set the control the first applicable finding names")
        self._apply.on_click(self._on_apply)
        self._apply_hint = ipywidgets.HTML()
        self._hint = ipywidgets.HTML(
            "<span style='color:#666;font-size:12px'>mini-batches 0 = as the inputs say"
            + (" (the statistics hold their own mini-batches)" if self._minibatches_fixed else "") + "</span>")
        self._minibatches.disabled = self._minibatches_fixed
        self._error_area = ipywidgets.HTML()
        self._trait_of_control = {
            self._pipelining: "pipelining", self._minibatches: "num_minibatches",
            self._serialized: "num_serialized_tables", self._threads: "host_threads",
            self._tc_forward: "tc_forward_s", self._tc_backward: "tc_backward_s", self._chip: "shown_chip",
        }
        for control in self._trait_of_control:
            control.observe(self._on_control, names="value")
        self.controls = {name: control for control, name in self._trait_of_control.items()}
        self.controls["apply_fix"] = self._apply
        self.children = [
            ipywidgets.HBox([self._pipelining, self._chip, self._apply, self._apply_hint]),
            ipywidgets.HBox([self._minibatches, self._serialized]),
            ipywidgets.HBox([self._threads, self._hint]),
            ipywidgets.HBox([self._tc_forward, self._tc_backward]),
            self._error_area,
            self._views,
        ]

    def _tc_slider_max(self) -> float:
        """Slider range (\u00b5s): room for 4x the device's work, at least 100 \u00b5s."""
        device = max(self.model.phase_time[p] for p in PHASES if p != "host")
        return float(max(4 * device * 1e6, 100.0))

    # -- events -----------------------------------------------------------------------

    def _on_engine_trait(self, change) -> None:
        if self._syncing:
            return
        try:
            model = self._base.replace(**self.engine_changes())
            advice = self._advise(model)
        except ScworkError as err:
            self.set_trait("error", str(err))
            self._error_area.value = _bokeh.message_html(self.error, "error")
            self._sync_controls()
            return
        self.set_trait("error", "")
        self._error_area.value = ""
        self.model, self.advice = model, advice
        self.summary = model.summary()
        self._draw()

    @traitlets.validate("num_minibatches", "num_serialized_tables", "host_threads")
    def _valid_count(self, proposal):
        # Counts the engine would misread (num_minibatches < 0 would silently mean "as the inputs say").
        minimum = 1 if proposal["trait"].name == "host_threads" else 0
        if proposal["value"] < minimum:
            raise traitlets.TraitError(f"{proposal['trait'].name} must be >= {minimum}, got {proposal['value']}")
        return proposal["value"]

    @traitlets.validate("shown_chip")
    def _valid_chip(self, proposal):
        value = int(proposal["value"])
        model = getattr(self, "model", None) or getattr(self, "_base", None)
        if model is not None and not -1 <= value < model.units.num_chips:
            raise traitlets.TraitError(f"shown_chip must be -1 (all) or a chip in 0..{model.units.num_chips - 1}, "
                                       f"got {value}")
        return value

    def _on_view_trait(self, change) -> None:
        if not self._syncing:
            self._draw()

    def _on_control(self, change) -> None:
        # Controls echo the traits after every draw; only user edits come through.
        if self._syncing:
            return
        name = self._trait_of_control[change["owner"]]
        value = change["new"]
        if name in ("tc_forward_s", "tc_backward_s"):
            value = value * 1e-6  # the sliders show microseconds
        setattr(self, name, value)

    def _on_apply(self, _button) -> None:
        applicable = self.applicable_findings()
        if applicable:
            self.apply_fix(applicable[0])

    def _sync_controls(self) -> None:
        """Show the traits in the controls (growing slider ranges to hold them)."""
        with self._quiet():
            for control, name in self._trait_of_control.items():
                value = getattr(self, name)
                if name in ("tc_forward_s", "tc_backward_s"):
                    value = value * 1e6
                if isinstance(control, (ipywidgets.IntSlider, ipywidgets.FloatSlider)):
                    control.max = max(control.max, value)
                control.value = value
            applicable = self.applicable_findings()
            self._apply.disabled = not applicable
            self._apply_hint.value = (
                f"<span style='font-size:12px'>top applicable finding: <code>{html.escape(applicable[0].id)}"
                "</code></span>" if applicable else "<span style='font-size:12px;color:#666'>no finding this "
                                                    "explorer can apply</span>")

    # -- drawing ----------------------------------------------------------------------

    def _shown_chips(self) -> list[int]:
        n = self.model.units.num_chips
        return list(range(n)) if self.shown_chip < 0 else [min(self.shown_chip, n - 1)]

    def _draw(self) -> None:
        model = self.model
        x_end = max(model.sequential.makespan, model.pipelined.makespan)
        scale, unit = _time_unit(model)
        chips = self._shown_chips()
        for name, view in self._schedule_views.items():
            view.draw(model, chips, x_end=x_end, scale=scale, unit=unit,
                      in_use=(name == "pipelined") == model.pipelining)
        self._legend.text = self._legend_html()
        self._summary_div.text = self._summary_html(unit) + self._overlay_html(unit)
        self.advice_rows = self._advice_rows(unit)
        self._advice_div.text = self._advice_html()
        self._sync_controls()

    def _legend_html(self) -> str:
        def swatch(color, text):
            return (f"<span style='display:inline-block;width:11px;height:11px;background:{color};"
                    f"border:1px solid #888;margin:0 3px 0 10px;vertical-align:middle'></span>{html.escape(text)}")

        phases = "".join(swatch(PHASE_COLORS[p], _PHASE_LABELS[p].replace("forward", "fwd").replace("backward", "bwd")
                                .replace(" preprocessing", "")) for p in PHASES)
        colors = _bokeh.category_colors(np.arange(len(self.model.stacks), dtype=np.int64), palette=STACK_COLORS)
        stacks = "".join(swatch(c, name) for c, name in zip(colors, self.model.stacks))
        chips = "every chip" if self.shown_chip < 0 else f"chip {self.shown_chip} and its host"
        note = self._schedule_views["pipelined"].lane_note
        return (f"<div style='font-size:12px;line-height:1.7'><b>Phases</b>:{phases}<br>"
                f"<b>Stacks</b> (lower half of SparseCore bars; zoom in to read narrow bars):{stacks}<br>"
                f"Numbers in bars = step; dashed lines = a step completes; gray bands = pre-loop (fill) and "
                f"post-loop (drain) of the pipelined loop. Lanes of {chips}"
                + (f" ({html.escape(note)})" if note else "") + ".</div>")

    def _summary_html(self, unit: str) -> str:
        m, s = self.model, self.summary
        in_use = "pipelined" if m.pipelining else "sequential"
        busy = m.busy_per_step()
        mb = dict(zip(m.stacks, (int(n) for n in m.detail["num_minibatches"])))
        rows = [
            ("schedule in use", f"{in_use} ({format_seconds(s['step_time_s'], unit)} per step)"),
            ("sequential step", format_seconds(s["sequential_step_time_s"], unit)),
            ("pipelined step", format_seconds(s["pipelined_step_time_s"], unit)),
            ("speed-up of pipelining", f"{s['speedup']:.3f}x (at most 2x)"),
            ("staleness if pipelined", (f"{s['staleness_steps']} step(s): updates of step i visible to the "
                                        f"SparseCore at step i+{s['update_offset']}")),
            ("bottleneck", f"{s['bottleneck']} ({format_seconds(busy[s['bottleneck']], unit)} busy per step)"),
            ("mini-batches", ", ".join(f"{k}: {v}" for k, v in mb.items() if v > 1) or "1 per stack"),
            ("serialized stacks", ", ".join(m.detail["serialized"]) or "none"),
        ]
        if m.ici_links is None:
            rows.append(("ICI all-to-all", _ici_text(m, "ici_forward", unit)))
        else:
            rows += [(f"ICI {d} all-to-all", _ici_text(m, f"ici_{d}", unit)) for d in ("forward", "backward")]
        phases = _bokeh.columns_table_html(
            ["phase", "time per step (slowest unit)", "resource"],
            [(_PHASE_LABELS[p], format_seconds(s[f"{p}_s"], unit), p.split("_")[0]) for p in PHASES])
        return _bokeh.summary_table_html(rows, title="Step model") + phases

    def _overlay_html(self, unit: str) -> str:
        """Measured against modelled per phase, largest divergence first (empty without a profile)."""
        if self._measured is None:
            return ""
        from scwork.interop.profile import overlay

        self.overlay = ds = overlay(self.model, self._measured)
        rows = []
        for i, phase in enumerate(ds["phase"].values.tolist()):
            observed = bool(ds["observed"].values[i])
            ratio = float(ds["ratio"].values[i])
            rows.append((_PHASE_LABELS.get(phase, phase), format_seconds(float(ds["modelled"].values[i]), unit),
                         format_seconds(float(ds["measured"].values[i]), unit) if observed else "not in the profile",
                         f"{ratio:.2f}x" if observed and np.isfinite(ratio) else "-"))
        return _bokeh.columns_table_html(["phase", "modelled", "measured", "measured / modelled"], rows,
                                         title="Measured vs model (largest divergence first)")

    @staticmethod
    def _expected_gain(finding, unit: str) -> str:
        """:attr:`Finding.expected_gain` with its seconds in the explorer's ``unit``."""
        parts = []
        if finding.gain_s is not None:
            text = f"{format_seconds(finding.gain_s, unit)} per step"
            if finding.gain_fraction is not None:
                text += f" ({finding.gain_fraction:.0%} of the step)"
            parts.append(text)
        if finding.gain_bytes is not None:
            parts.append(_bokeh.format_bytes(finding.gain_bytes))
        return "; ".join(parts) if parts else "not estimated"

    def _advice_rows(self, unit: str) -> list[dict[str, Any]]:
        return [{"rank": rank, "severity": f.severity, "id": f.id, "title": f.title,
                 "evidence": ", ".join(f"{k} = {_format_evidence(v, unit, seconds=_is_duration(k))}"
                                       for k, v in f.evidence.items()),
                 "fix": f.fix, "flags": ", ".join(f.flags), "expected_gain": self._expected_gain(f, unit)}
                for rank, f in enumerate(self.advice, 1)]

    def _advice_html(self) -> str:
        colors = {"error": "#b71c1c", "warning": "#b35900", "info": "#1565c0"}
        if not self.advice_rows:
            body = _bokeh.message_html("No bottleneck found by the advisor.", "ok")
        else:
            # One block of rows per finding (title, evidence, fix, expected gain): a side panel
            # is too narrow for four columns of long text.
            label = "padding:1px 8px 1px 14px;vertical-align:top;color:#555;white-space:nowrap"
            value = "padding:1px 0;vertical-align:top"
            blocks = []
            for r in self.advice_rows:
                flags = (f"<br><code style='font-size:10px'>{html.escape(r['flags'])}</code>" if r["flags"] else "")
                blocks.append(
                    f"<tr><td colspan='2' style='padding:6px 0 1px;border-top:1px solid #ccc'>"
                    f"<b>{r['rank']}. <span style='color:{colors[r['severity']]}'>"
                    f"{html.escape(r['title'])}</span></b>"
                    f" <code style='font-size:10px;color:#666'>{html.escape(r['id'])} ({r['severity']})</code>"
                    "</td></tr>"
                    f"<tr><td style='{label}'>evidence</td><td style='{value};font-family:monospace;font-size:10px'>"
                    f"{html.escape(r['evidence'])}</td></tr>"
                    f"<tr><td style='{label}'>fix</td><td style='{value}'>{html.escape(r['fix'])}{flags}</td></tr>"
                    f"<tr><td style='{label}'>expected gain</td><td style='{value}'><b>"
                    f"{html.escape(r['expected_gain'])}</b></td></tr>")
            body = f"<table style='border-collapse:collapse;font-size:11px'>{''.join(blocks)}</table>"
        skipped = ""
        if self.advice.skipped:
            items = "".join(f"<li><code>{html.escape(k)}</code>: {html.escape(v)}</li>"
                            for k, v in self.advice.skipped.items())
            skipped = (f"<details style='font-size:11px;margin-top:4px'><summary>{len(self.advice.skipped)} "
                       f"check(s) not run</summary><ul style='margin:2px 0;padding-left:16px'>{items}</ul></details>")
        return ("<div style='font-weight:700;font-size:13px;margin:10px 0 2px'>Advisor findings "
                f"({len(self.advice_rows)}, most impactful first; scwork.advisor.advise)</div>" + body + skipped)

    # -- export -----------------------------------------------------------------------

    def to_html(self, path, title: str | None = None):
        """Write the current views to a standalone HTML file that works offline.

        Parameters
        ----------
        path : str or pathlib.Path
        title : str, optional
            Page title; default names the slice and the step times.

        Returns
        -------
        pathlib.Path
            The file written (BokehJS inlined: no CDN needed). Hovers and zoom work
            in the file; the controls do not.
        """
        s, (_, unit) = self.summary, _time_unit(self.model)
        default = (f"scwork step model on {self.model.topology}: sequential "
                   f"{format_seconds(s['sequential_step_time_s'], unit)}, pipelined "
                   f"{format_seconds(s['pipelined_step_time_s'], unit)}")
        return self._export(path, title or default)

    def to_chrome_trace(self, path, **kwargs: Any):
        """Write the current model as a Chrome / Perfetto trace (:func:`scwork.pipeline.write_chrome_trace`).

        Parameters
        ----------
        path : str or pathlib.Path
            A ``.json`` file, or ``.json.gz`` (compressed).
        **kwargs
            Keywords of :func:`scwork.pipeline.to_chrome_trace` (``schedule``,
            ``flows``, ``counters``, ``chips``...).

        Returns
        -------
        pathlib.Path
        """
        return write_chrome_trace(self.model, path, **kwargs)


def _demo_features():
    """Features and valencies of :meth:`PipelineTimeline.demo` (a small ranking model).

    Returns
    -------
    features : list of FeatureSpec
    valency : dict of str
        Per feature, a :func:`scwork.datasets.synthetic` valency.
    """
    from scwork.sharding import FeatureSpec, TableSpec

    user = TableSpec("user", 2_000_000, 64, optimizer="adagrad")
    item = TableSpec("item", 1_000_000, 64, optimizer="adagrad")
    query = TableSpec("query", 500_000, 32, optimizer="adagrad")
    category = TableSpec("category", 5_000, 16, optimizer="adagrad")
    flag = TableSpec("flag", 2, 1, optimizer="adagrad")
    features = [FeatureSpec("user_id", user), FeatureSpec("item_id", item), FeatureSpec("history", item),
                FeatureSpec("query_tokens", query), FeatureSpec("category", category),
                FeatureSpec("is_new", flag)]
    valency = {"user_id": "fixed(1)", "item_id": "fixed(1)", "history": 20, "query_tokens": 8, "category": 3,
               "is_new": "fixed(1)"}
    return features, valency
