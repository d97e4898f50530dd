"""MemoryTimeline: will the model fit in SparseCore SPMEM and chip HBM, and what fixes it?

One explorer over :func:`scwork.memory.plan`:

- **HBM over one training step**: what is live on one chip in every event of the
  step (program order, or modelled time), stacked by category (tables, optimizer
  slots, SparseCore HBM stacks, activations, heap...), against the chip's HBM
  capacity and the usable HBM after headroom; the peak event is shaded. Hovering
  a band names the buffer, its size and its lifetime.
- **What is live at the peak**: the largest buffers of the peak event, sorted by
  size or by padding waste, as a table and as a Gantt chart of their lifetimes.
  The Gantt chart sits under the HBM chart on the same axis (event names, or
  modelled time; same range and pixels). Selecting a row (or clicking a Gantt bar)
  highlights that buffer in the HBM chart.
- **SPMEM of one tile**: the statically sized buffers of every stacked table's
  SparseCore op, stacked per stack against TileSpmem; the chosen stack is outlined
  and detailed.
- **Verdict**: fits or not, the engine's diagnoses (modelled on the compiler's
  messages) and the single changes that make the whole model fit; the "engine's
  fix" menu offers each of them, in the same order (those no control can set say
  how to apply them instead).

Sliders change the batch, the number of serialized tables
(``xla_sc_num_serialized_tables_to_optimize_hbm``), the prefetch depth
(``maximum_parallel_iterations``) and the limits of every stack; a checkbox stages
gather operands in HBM. Every change calls :func:`scwork.memory.plan` once (a few
milliseconds) and updates the bokeh sources in place. Every number drawn comes
from the engine; what is modelled and what is not is stated in
:mod:`scwork.memory.spmem`, :mod:`scwork.memory.hbm` and :mod:`scwork.memory.timeline`.

Examples
--------
>>> from scwork.widgets import MemoryTimeline          # doctest: +SKIP
>>> explorer = MemoryTimeline.demo()                    # doctest: +SKIP
>>> explorer.num_serialized_tables = 3                  # doctest: +SKIP
>>> explorer.report.fits                                # doctest: +SKIP
True
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets
import numpy as np
import traitlets
from bokeh.layouts import column
from bokeh.models import (
    ColumnDataSource,
    DataTable,
    Div,
    NumberFormatter,
    TableColumn,
    TapTool,
)
from scwork.widgets import _bokeh
from scwork.widgets._gantt import align_x_axis
from scwork.widgets._display import figure_view
from scwork.widgets._panes import TextPane, hbox, vbox

from scwork import memory
from scwork.errors import InputError, ScworkError
from scwork.memory import CATEGORIES, SPMEM_BUFFERS

__all__ = ["MAX_LISTED_BUFFERS", "SORT_KEYS", "X_AXES", "MemoryTimeline"]

#: Horizontal axis of the HBM chart: events in program order, or modelled time
#: (an HBM-traffic lower bound, see :mod:`scwork.memory.timeline`).
X_AXES: tuple[str, ...] = ("program_order", "time")
#: Orders of the live-at-peak table (keys of :meth:`scwork.memory.Timeline.live_at_peak`).
SORT_KEYS: tuple[str, ...] = ("bytes", "waste_bytes")
#: Rows of the live-at-peak table and lanes of its Gantt chart: the first ones of the
#: sorted list (the rest are in ``explorer.report.timeline.live_at_peak()``).
MAX_LISTED_BUFFERS = 25

# plan() keywords driven by the controls (the traits of the same name).
_ENGINE_TRAITS = ("batch_size", "num_serialized_tables", "maximum_parallel_iterations",
                  "max_ids_per_partition", "max_unique_ids_per_partition", "stage_gather_operands_in_hbm")
_VIEW_TRAITS = ("x_axis", "stack", "sort_by")
# Engine fixes the "apply" button can set: their plan() keyword is a trait of the same name.
_FIX_TRAITS = ("batch_size", "num_serialized_tables", "maximum_parallel_iterations",
               "stage_gather_operands_in_hbm")
_CATEGORY_INDEX = {c: i for i, c in enumerate(CATEGORIES)}
_USABLE_COLOR = "#ff7f0e"
_HIGHLIGHT_COLOR = "#111111"
_CHART_WIDTH = 700
_TABLE_WIDTH = 520
_SIDE_WIDTH = 430
_LANE_PX = 18
# Pixels left of the HBM chart and of the Gantt chart under it: the wider y axis (the
# Gantt's lane names, cut to _LANE_NAME_CHARS) fits, so both frames start at one pixel.
_PLOT_LEFT_PX = 160
_LANE_NAME_CHARS = 18
# The verdict beside the HBM chart scrolls instead of growing: a setting with many
# findings must not push the rest of the explorer down the page.
_VERDICT_HEIGHT_PX = 470
# Every control shows its whole description (ipywidgets' default width cuts long ones).
_LABEL_STYLE = {"description_width": "initial"}


def _short(name: str, limit: int = 26) -> str:
    """``name`` cut to ``limit`` characters for axis labels (hovers and tables show it whole)."""
    return name if len(name) <= limit else name[: limit - 1] + "\u2026"


class MemoryTimeline(_bokeh.SyncedDisplay, ipywidgets.VBox):
    """Interactive SPMEM and HBM plan of an embedding model on a TPU slice.

    Parameters
    ----------
    model : list of FeatureSpec or TableSpec, mapping, or StackingPlan
        As :func:`scwork.memory.plan`.
    topology : scwork.Topology
        Chips and SparseCores (e.g. ``scwork.Topology.for_chip("v5p", num_chips=8)``).
    batch_size : int
        Global batch (samples per feature per step); initial value of the trait.
    x_axis, stack, sort_by : str, optional
        Initial values of the view traits below.
    **plan_kwargs
        Any other keyword of :func:`scwork.memory.plan` (``stacking``,
        ``dense_weights_bytes``, ``prefetch_bytes_per_step``, ``headroom``...).
        ``num_serialized_tables``, ``maximum_parallel_iterations``,
        ``stage_gather_operands_in_hbm`` and ``limits`` set the initial values of
        the traits below; the others stay fixed. ``stack_limits`` beat the limit
        sliders for the stacks they name (as in :func:`~scwork.memory.plan`).

    Attributes
    ----------
    batch_size : int
    num_serialized_tables : int
        ``xla_sc_num_serialized_tables_to_optimize_hbm`` (0 and 1: none serialized).
    maximum_parallel_iterations : int
        Prefetch depth: steps of input kept in the HBM heap.
    max_ids_per_partition, max_unique_ids_per_partition : int
        Limits of every stack (``limits=`` of :func:`~scwork.memory.plan`); 0 keeps
        each stack's own (configured on its tables, observed or estimated). Unique
        ids cannot outnumber ids: where a slider's limit and a stack's own one would
        give a unique limit above the max ids, that stack gets ``(max_ids, max_ids)``
        (through ``stack_limits``, the engine's fix; the user's ``stack_limits`` stay).
    stage_gather_operands_in_hbm : bool
    x_axis : {"program_order", "time"}
        Horizontal axis of the HBM chart and of the Gantt chart.
    stack : str
        The stack detailed in the SPMEM view; default the one using most SPMEM.
    sort_by : {"bytes", "waste_bytes"}
        Order of the live-at-peak table (largest first); the table's headers do not
        sort it (the browser would keep that sort over this one).
    error : str
        Why the last setting could not be planned (read-only; the engine's
        message); empty when it could. The views keep the last valid plan meanwhile.
    report : scwork.memory.MemoryReport
        The engine's report of the current setting.
    summary : dict
        ``report.summary()``: every headline number.
    sources : dict of str to ColumnDataSource
        ``hbm_segments`` (one row per (event, buffer) drawn: ``left, right,
        bottom, top, value, step`` = event index, ``item``, ``group`` = category,
        hover columns), ``hbm_outline``, ``hbm_lines`` (capacity and usable HBM),
        ``hbm_peak`` (the shaded peak event), ``live_at_peak`` (table and Gantt rows:
        ``rank, buffer, category, bytes, waste_bytes, start, end, start_event,
        end_event``...), ``spmem_bars``, ``spmem_capacity``, ``spmem_highlight``.
    figures : dict of str to bokeh figure
        ``hbm``, ``lifetimes`` (Gantt) and ``spmem``.
    controls : dict of str to ipywidgets.Widget
        ``batch_size``, ``num_serialized_tables``, ``maximum_parallel_iterations``,
        ``max_ids_per_partition``, ``max_unique_ids_per_partition``,
        ``stage_gather_operands_in_hbm``, ``x_axis``, ``stack``, ``sort_by``,
        ``fix``, ``apply_fix``.

    Raises
    ------
    ScworkError
        The first plan fails (the engine's ConfigError / TopologyError: invalid
        inputs, missing limits...); later failures go to :attr:`error` instead.

    Examples
    --------
    >>> import scwork                                              # doctest: +SKIP
    >>> from scwork.sharding import TableSpec
    >>> tables = [TableSpec(f"t{i}", 10**6, 64, max_ids_per_partition=512,
    ...                     max_unique_ids_per_partition=256) for i in range(8)]
    >>> explorer = MemoryTimeline(tables, scwork.Topology.for_chip("v5p", num_chips=4),
    ...                           batch_size=16384)                  # doctest: +SKIP
    >>> explorer.batch_size = 65536      # recomputes and redraws   # doctest: +SKIP
    >>> explorer.report.fits, [f.code for f in explorer.report.errors]  # doctest: +SKIP
    """

    batch_size = traitlets.Int(1)
    num_serialized_tables = traitlets.Int(1)
    maximum_parallel_iterations = traitlets.Int(1)
    max_ids_per_partition = traitlets.Int(0)
    max_unique_ids_per_partition = traitlets.Int(0)
    stage_gather_operands_in_hbm = traitlets.Bool(False)
    x_axis = traitlets.Enum(X_AXES, default_value="program_order")
    stack = traitlets.Unicode("")
    sort_by = traitlets.Enum(SORT_KEYS, default_value="bytes")
    error = traitlets.Unicode("", read_only=True)

    def __init__(self, model: Any, topology: Any, *, batch_size: int, x_axis: str = "program_order",
                 stack: str = "", sort_by: str = "bytes", measured: Any = None, **plan_kwargs: Any):
        super().__init__()
        # What XLA measured (scwork.interop.xla_dump: a module's MeasuredTimeline, or the
        # module itself), drawn under the model's HBM chart.
        if measured is not None and not hasattr(measured, "usage_bytes"):
            if not hasattr(measured, "timeline"):
                raise InputError(f"measured must be an XLA dump module or its timeline "
                                 f"(scwork.interop.xla_dump.read_xla_dump(...).module(name)), "
                                 f"got {type(measured).__name__}")
            measured = measured.timeline()
        self.measured = measured
        self._model = model
        self._topology = topology
        limits = plan_kwargs.pop("limits", None)
        max_ids, max_unique = (None, None) if limits is None else tuple(limits)
        engine_state = {
            "batch_size": batch_size,
            "num_serialized_tables": plan_kwargs.pop("num_serialized_tables", 1),
            "maximum_parallel_iterations": plan_kwargs.pop("maximum_parallel_iterations", 1),
            "stage_gather_operands_in_hbm": plan_kwargs.pop("stage_gather_operands_in_hbm", False),
            "max_ids_per_partition": max_ids or 0,
            "max_unique_ids_per_partition": max_unique or 0,
        }
        self._plan_kwargs = plan_kwargs
        self._syncing = False
        for name, value in engine_state.items():
            setattr(self, name, value)
        self.x_axis, self.sort_by = x_axis, sort_by
        # The first plan must succeed: there is nothing to draw otherwise.
        self.report = self._plan()
        self.summary: dict[str, Any] = self.report.summary()
        self.stack = stack if stack in self.report.stacks else self.summary["max_spmem_stack"]

        self._build_views()
        self._build_controls()
        self.observe(self._on_engine_trait, names=list(_ENGINE_TRAITS))
        self.observe(self._on_view_trait, names=list(_VIEW_TRAITS))
        self._draw()

    @classmethod
    def demo(cls, **kwargs: Any) -> MemoryTimeline:
        """An ads-ranking-like model of 26 tables on 64 TPU v5p chips, just over its HBM.

        Tables from 2 rows to 1.76 billion rows and 1 to 128 wide (five of width 1,
        among them two billion-row bias terms: the padding-waste case), Adagrad, f32,
        in 10 stacks; batch 65536; 7 GiB of dense weights, 1 GiB of TensorCore
        activations, 512 MiB of input per step prefetched 2 steps ahead. Its HBM
        peak (86.2 GiB) is just over the usable 90 % of HBM (85.5 GiB) and its
        widest stacks use 80-93 % of TileSpmem: serializing 2 stacks
        (``num_serialized_tables=2``) makes it fit, and raising the limits quickly
        overflows SPMEM.

        Parameters
        ----------
        **kwargs
            Constructor arguments overriding the demo's (``batch_size``,
            ``num_serialized_tables``, any :func:`~scwork.memory.plan` keyword...).
        """
        import scwork
        from scwork.sharding import TableSpec

        tables = [TableSpec(name, vocab, dim, optimizer="adagrad", max_ids_per_partition=max_ids,
                            max_unique_ids_per_partition=max_unique)
                  for name, vocab, dim, max_ids, max_unique in _DEMO_TABLES]
        options = {"batch_size": 65536, "stacking": [list(s) for s in _DEMO_STACKS],
                   "dense_weights_bytes": 7 * 2**30, "tensorcore_activation_bytes": 2**30,
                   "prefetch_bytes_per_step": 512 * 2**20, "maximum_parallel_iterations": 2}
        options.update(kwargs)
        return cls(tables, scwork.Topology.for_chip("v5p", num_chips=64), **options)

    # -- engine ---------------------------------------------------------------------

    def _limits(self) -> tuple[int | None, int | None] | None:
        """``limits=`` of plan(): None when both sliders keep every stack's own limits."""
        ids, unique = self.max_ids_per_partition, self.max_unique_ids_per_partition
        if not ids and not unique:
            return None
        return (ids or None, unique or None)

    def _plan(self):
        kwargs = dict(self._plan_kwargs, batch_size=self.batch_size,
                      num_serialized_tables=self.num_serialized_tables,
                      maximum_parallel_iterations=self.maximum_parallel_iterations,
                      stage_gather_operands_in_hbm=self.stage_gather_operands_in_hbm, limits=self._limits())
        report = memory.plan(self._model, self._topology, **kwargs)
        capped = self._unique_limits_capped(report)
        if capped:
            report = memory.plan(self._model, self._topology, **{**kwargs, "stack_limits": capped})
        return report

    def _unique_limits_capped(self, report) -> dict[str, tuple[int, int]]:
        """``stack_limits`` with every stack's unique limit at most its max ids, when a slider broke that.

        A limit slider sets one limit of every stack while the other stays the stack's
        own: e.g. max ids 8 against a configured max unique of 768. Unique ids cannot
        outnumber ids, so such a pair only oversizes the unique-id buffers, and the
        engine flags it on every stack (``unique_exceeds_ids``: one warning per stack
        on one slider move). The slider means "at most this many ids", so those stacks
        get ``(max_ids, max_ids)``, the engine's own fix of that finding. Empty when no
        slider is set or no pair is broken; the user's ``stack_limits`` are kept as given.
        """
        if self._limits() is None:
            return {}
        user = {name: tuple(pair) for name, pair in (self._plan_kwargs.get("stack_limits") or {}).items()}
        spm = report.spmem
        capped = {name: (int(ids), int(ids)) for name, ids, unique in zip(spm.stacks, spm.max_ids, spm.max_unique)
                  if unique > ids and name not in user}
        return {**capped, **user} if capped else {}

    def apply_fix(self, fix: memory.Fix) -> None:
        """Set the control a fix of the engine names to its value (e.g. ``num_serialized_tables=3``).

        Parameters
        ----------
        fix : scwork.memory.Fix
            One of ``report.fixes`` (or of a finding's ``fixes``).

        Raises
        ------
        ValueError
            The fix changes something this explorer has no control for (limits of
            single stacks, dtype, chips, headroom): build a new explorer with it.
        """
        if not self.fix_has_control(fix):
            raise ValueError(f"{fix.parameter} is not a control of this explorer; pass "
                             f"{fix.parameter}={fix.value!r} to MemoryTimeline(...) instead")
        setattr(self, fix.parameter, fix.value)

    @staticmethod
    def fix_has_control(fix: memory.Fix) -> bool:
        """Whether :meth:`apply_fix` (the "apply" button) can set this fix: a control for its parameter and a value."""
        return fix.parameter in _FIX_TRAITS and fix.value is not None

    @classmethod
    def fix_label(cls, fix: memory.Fix) -> str:
        """The fix as the verdict lists it, plus how to apply it when no control can.

        Parameters
        ----------
        fix : scwork.memory.Fix

        Returns
        -------
        str
            ``str(fix)``; for a fix without a control (dtype, chips, headroom, the limits
            of single stacks) or without a computed value, followed by why the
            "apply" button cannot set it and what to do instead.
        """
        if cls.fix_has_control(fix):
            return str(fix)
        if fix.value is None:
            return f"{fix} [no computed value: cannot be applied]"
        return f"{fix} [no control here: pass {fix.parameter}={fix.value!r} to MemoryTimeline(...)]"

    # -- construction -----------------------------------------------------------------

    def _build_views(self) -> None:
        self._hbm = _bokeh.StackedAreaChart(
            title="HBM per chip over one training step", x_axis_label="event (program order)",
            y_axis_label="HBM per chip", value_names=("buffer", "size", "lifetime", "padding", "event"),
            group_name="category", width=_CHART_WIDTH, height=320)
        self._gantt = _bokeh.Gantt(
            title="Lifetimes of the buffers live at the peak", x_axis_label="event (program order)",
            value_names=("buffer", "category", "size", "padding", "lifetime"), width=_CHART_WIDTH,
            lane_height=_LANE_PX)
        self._gantt.figure.add_tools(TapTool())
        # Under the HBM chart, on its x axis: event i is the same pixel column in both.
        align_x_axis(self._gantt.figure, self._hbm.figure, min_border_left=_PLOT_LEFT_PX)
        # Not sortable: a click on a header would sort the rows in the browser, and BokehJS
        # re-applies that sort to every new data, so "by padding waste" would still show
        # the rows by size. The order is the sort_by control's (the engine's order).
        self._live_table = DataTable(
            source=self._gantt.bars, width=_TABLE_WIDTH, height=_LANE_PX * 14, index_position=None,
            row_height=_LANE_PX + 2, header_row=True, sortable=False, reorderable=False,
            # The columns' own widths (they add up to _TABLE_WIDTH): BokehJS's default
            # "force_fit" measures and re-applies every column's width in the page after
            # each new data and each layout of the view (any change of the charts above).
            autosize_mode="none",
            columns=[
                TableColumn(field="rank", title="#", width=28),
                TableColumn(field="buffer", title="buffer", width=212),
                TableColumn(field="category", title="category", width=120),
                TableColumn(field="mib", title="MiB", width=75, formatter=NumberFormatter(format="0,0.0")),
                TableColumn(field="waste_mib", title="padding MiB", width=85,
                            formatter=NumberFormatter(format="0,0.0")),
            ])
        # Selecting a table row or a Gantt bar highlights the buffer in the HBM chart.
        _bokeh.link_selection(self._gantt.bars, self._hbm.segments, source_key="item", target_key="item")

        self._spmem = _bokeh.BarChart(
            title="SPMEM of one tile, per stacked table", x_axis_label="stacked table",
            y_axis_label="bytes per tile", category_name="stack", group_name="buffer", value_name="bytes",
            width=_CHART_WIDTH - 170, height=240)
        self._spmem.figure.yaxis.formatter = _bokeh.bytes_tick_formatter()
        self._spmem.figure.yaxis.ticker = _bokeh.bytes_ticker()
        self._spmem.figure.xaxis.major_label_orientation = 0.7
        self._spmem_highlight = ColumnDataSource({k: [] for k in ("left", "right", "bottom", "top")})
        self._spmem.figure.quad(left="left", right="right", bottom="bottom", top="top",
                                source=self._spmem_highlight, fill_color=None, line_color=_HIGHLIGHT_COLOR,
                                line_width=2.5)

        # Texts are HTML panes, not bokeh Divs (see scwork.widgets._panes).
        self._hbm_caption = TextPane(width=_CHART_WIDTH + 150)
        self._spmem_caption = TextPane(width=_CHART_WIDTH)
        # The verdict beside the HBM chart and the live-at-peak caption above the Gantt
        # stay bokeh Divs, inside the view of the charts they sit between (see below).
        self._live_caption = Div(width=_CHART_WIDTH)
        self._verdict = Div(width=_SIDE_WIDTH, height=_VERDICT_HEIGHT_PX, styles={"overflow-y": "auto"})
        self._spmem_detail = TextPane(width=_SIDE_WIDTH + 150)
        measured_rows = []
        if self.measured is not None:
            self._measured_chart = _bokeh.StackedAreaChart(
                title="Measured: XLA's buffer assignment", x_axis_label="schedule step (XLA's live ranges)",
                y_axis_label="bytes", value_names=("buffer", "size", "lifetime", "padding", "event"),
                group_name="allocation", width=_CHART_WIDTH, height=240)
            self._measured_caption = TextPane(width=_CHART_WIDTH + 150)
            measured_rows = [self._measured_caption, figure_view(self._measured_chart.figure)]
        # The HBM chart, the Gantt chart and the table are one bokeh view: the Gantt
        # shares the HBM chart's x range and ticker, the table the Gantt's source, and
        # a selection in either selects the buffer in the HBM chart (a browser-side
        # link). They are stacked in one column no wider than the charts, so the view
        # fits a narrow output (JupyterLab with the file browser open) whole: a bokeh
        # row cannot wrap, and squeezed the table to its first two columns there. The
        # verdict is a view of its own beside that column, below it when the output is
        # narrow (a wrapping box); its text changes re-lay out only itself.
        self._linked_view = figure_view(column(self._hbm.figure, self._live_caption, self._gantt.figure,
                                               self._live_table))
        self._views = vbox([
            self._hbm_caption,
            hbox([self._linked_view, figure_view(self._verdict)]),
            *measured_rows,
            hbox([vbox([self._spmem_caption, figure_view(self._spmem.figure)]), self._spmem_detail]),
        ])
        self.sources = {
            "hbm_segments": self._hbm.segments, "hbm_outline": self._hbm.outline,
            "hbm_lines": self._hbm.lines, "hbm_peak": self._hbm.bands,
            "live_at_peak": self._gantt.bars,
            "spmem_bars": self._spmem.bars, "spmem_capacity": self._spmem.lines,
            "spmem_highlight": self._spmem_highlight,
        }
        self.figures = {"hbm": self._hbm.figure, "lifetimes": self._gantt.figure, "spmem": self._spmem.figure}
        if self.measured is not None:
            self.sources["measured_segments"] = self._measured_chart.segments
            self.figures["measured"] = self._measured_chart.figure
            self._draw_measured()

    def _build_controls(self) -> None:
        W = ipywidgets.Layout
        wide = _LABEL_STYLE
        knobs = self.report.knobs
        partitions = knobs.num_partitions
        # Ranges from the first plan; the sync grows them if a trait is set beyond.
        batch_max = max(4 * self.batch_size, 8 * partitions)
        limit_max = max(4 * int(max(self.report.spmem.max_ids.max(), self.report.spmem.max_unique.max())), 1024)
        self._batch = ipywidgets.IntSlider(
            min=partitions, max=-(-batch_max // partitions) * partitions, step=partitions,
            description="batch size", style=wide, layout=W(width="560px"), continuous_update=False)
        self._serialized = ipywidgets.IntSlider(
            min=0, max=max(len(self.report.stacks), 1), description="serialized tables", style=wide,
            layout=W(width="420px"), continuous_update=False,
            tooltip="xla_sc_num_serialized_tables_to_optimize_hbm")
        self._prefetch = ipywidgets.IntSlider(
            min=1, max=max(8, 2 * self.maximum_parallel_iterations), description="prefetch depth", style=wide,
            layout=W(width="420px"), continuous_update=False, tooltip="maximum_parallel_iterations")
        self._max_ids = ipywidgets.IntSlider(
            min=0, max=-(-limit_max // 8) * 8, step=8, description="max ids / partition", style=wide,
            layout=W(width="560px"), continuous_update=False)
        self._max_unique = ipywidgets.IntSlider(
            min=0, max=-(-limit_max // 8) * 8, step=8, description="max unique ids / partition", style=wide,
            layout=W(width="560px"), continuous_update=False)
        self._stage = ipywidgets.Checkbox(description="stage gather operands in HBM", indent=False,
                                          style=_LABEL_STYLE, layout=W(width="auto"))
        self._x_axis = ipywidgets.ToggleButtons(options=[("program order", "program_order"),
                                                         ("modelled time", "time")],
                                                description="x axis", style={**_LABEL_STYLE, "button_width": "auto"})
        self._stack = ipywidgets.Dropdown(options=list(self.report.stacks), description="SPMEM of stack",
                                          style=_LABEL_STYLE, layout=W(width="430px"))
        self._sort = ipywidgets.ToggleButtons(options=[("by size", "bytes"), ("by padding waste", "waste_bytes")],
                                              description="live at the peak",
                                              style={**_LABEL_STYLE, "button_width": "auto"})
        # As wide as its longest fix (up to the page): the fixes are read, not guessed.
        self._fix = ipywidgets.Dropdown(options=[], description="engine's fix", style=_LABEL_STYLE,
                                        layout=W(width="auto", max_width="1100px"))
        self._apply = ipywidgets.Button(description="apply", layout=W(width="80px"),
                                        tooltip="set the control this fix names")
        self._apply.on_click(self._on_apply)
        self._fix.observe(self._on_fix_choice, names="value")
        self._limits_hint = ipywidgets.HTML(
            "<span style='color:#666;font-size:12px'>limits of every stack; 0 = each stack's own; "
            "a unique limit above a stack's max ids is cut to it</span>")
        self._error_area = ipywidgets.HTML()
        self._trait_of_control = {
            self._batch: "batch_size", self._serialized: "num_serialized_tables",
            self._prefetch: "maximum_parallel_iterations", self._max_ids: "max_ids_per_partition",
            self._max_unique: "max_unique_ids_per_partition", self._stage: "stage_gather_operands_in_hbm",
            self._x_axis: "x_axis", self._stack: "stack", self._sort: "sort_by",
        }
        for control in self._trait_of_control:
            control.observe(self._on_control, names="value")
        self.controls = {name: control for control, name in self._trait_of_control.items()}
        self.controls.update({"fix": self._fix, "apply_fix": self._apply})
        self.children = [
            ipywidgets.HBox([self._batch, self._serialized]),
            ipywidgets.HBox([self._max_ids, self._prefetch]),
            ipywidgets.HBox([self._max_unique, self._stage, self._limits_hint]),
            ipywidgets.HBox([self._x_axis, self._sort, self._stack]),
            ipywidgets.HBox([self._fix, self._apply]),
            self._error_area,
            self._views,
        ]

    # -- events -----------------------------------------------------------------------

    def _on_engine_trait(self, change) -> None:
        try:
            report = self._plan()
        except ScworkError as err:
            self.set_trait("error", str(err))
            self._error_area.value = _bokeh.message_html(self.error, "error")
            self._sync_controls()
            return
        self.set_trait("error", "")
        self._error_area.value = ""
        self.report = report
        self.summary = report.summary()
        if self.stack not in report.stacks:  # automatic stacking re-planned the stacks
            with self._quiet():
                self.stack = self.summary["max_spmem_stack"]
        self._draw()

    @traitlets.validate("stack")
    def _valid_stack(self, proposal):
        report = getattr(self, "report", None)
        if report is not None and proposal["value"] not in report.stacks:
            raise traitlets.TraitError(f"no stack {proposal['value']!r}; stacks are {list(report.stacks)}")
        return proposal["value"]

    def _on_view_trait(self, change) -> None:
        if not self._syncing:
            self._draw()

    def _on_control(self, change) -> None:
        # Controls echo the traits after every draw; only user edits come through.
        if self._syncing:
            return
        setattr(self, self._trait_of_control[change["owner"]], change["new"])

    def _on_apply(self, _button) -> None:
        if self._fix.value is not None and self.fix_has_control(self._fix.value):
            self.apply_fix(self._fix.value)

    def _on_fix_choice(self, change) -> None:
        # A fix without a control stays in the menu (with how to apply it), unappliable.
        fix = change["new"]
        self._apply.disabled = fix is None or not self.fix_has_control(fix)

    def _sync_controls(self) -> None:
        """Show the traits in the controls (growing slider ranges to hold them)."""
        with self._quiet():
            for control, name in self._trait_of_control.items():
                value = getattr(self, name)
                if isinstance(control, ipywidgets.IntSlider):
                    control.max = max(control.max, value)
                    control.min = min(control.min, value)
                if name == "stack":
                    control.options = list(self.report.stacks)
                control.value = value
            self._serialized.max = max(len(self.report.stacks), self.num_serialized_tables, 1)
            # Every fix the verdict lists, in its order; the first one a control can set is chosen.
            fixes = list(self.report.fixes)
            self._fix.options = [(self.fix_label(fix), fix) for fix in fixes]
            self._fix.value = next((fix for fix in fixes if self.fix_has_control(fix)), fixes[0] if fixes else None)
            self._fix.disabled = not fixes
            self._apply.disabled = self._fix.value is None or not self.fix_has_control(self._fix.value)

    # -- drawing ----------------------------------------------------------------------

    def _draw(self) -> None:
        timeline = self.report.timeline
        order = sorted(range(len(timeline.intervals)), key=lambda j: self._stacking_key(timeline.intervals[j]))
        # Item k of the HBM chart is interval order[k]; the table links to it by k.
        item_of_interval = {j: k for k, j in enumerate(order)}
        self._draw_hbm(timeline, order)
        self._draw_live_at_peak(timeline, item_of_interval)
        self._draw_spmem()
        self._verdict.text = self._verdict_html()
        self._sync_controls()

    @staticmethod
    def _stacking_key(interval) -> tuple:
        # Categories in the engine's order (tables at the bottom), larger buffers lower.
        return (_CATEGORY_INDEX[interval.category], interval.start, -interval.bytes, interval.name)

    @staticmethod
    def _x_scale(timeline) -> tuple[float, str]:
        """Seconds -> drawn unit: ms, or microseconds for steps under a millisecond."""
        return (1e3, "ms") if timeline.duration_s >= 1e-3 else (1e6, "\u00b5s")

    def _event_extent(self, timeline) -> tuple[np.ndarray, np.ndarray]:
        if self.x_axis == "program_order":
            index = np.arange(len(timeline.events), dtype=np.float64)
            return index, index + 1
        scale, _ = self._x_scale(timeline)
        return (np.array([e.start_s for e in timeline.events]) * scale,
                np.array([e.end_s for e in timeline.events]) * scale)

    def _lifetime_text(self, timeline, interval) -> str:
        events = timeline.events
        first, last = events[interval.start], events[interval.end - 1]
        scale, unit = self._x_scale(timeline)
        span = "event " + str(first.index) if first is last else f"events {first.index}-{last.index}"
        where = first.name if first is last else f"{first.name} \u2192 {last.name}"
        return (f"{where} ({span}; {interval.start_s * scale:.3g}-{interval.end_s * scale:.3g} {unit})")

    def _draw_hbm(self, timeline, order: list[int]) -> None:
        intervals = [timeline.intervals[j] for j in order]
        events = timeline.events
        left, right = self._event_extent(timeline)
        start = np.array([iv.start for iv in intervals], dtype=np.int64)
        end = np.array([iv.end for iv in intervals], dtype=np.int64)
        size = np.array([iv.bytes for iv in intervals], dtype=np.float64)
        event = np.arange(len(events))[:, None]
        live = (event >= start[None, :]) & (event < end[None, :])
        peak = timeline.peak_event
        headroom = self.report.knobs.headroom
        program = self.x_axis == "program_order"
        _, unit = self._x_scale(timeline)
        self._hbm.update(
            left, right, live * size[None, :],
            item_groups=[iv.category for iv in intervals], groups=CATEGORIES,
            item_values={
                "buffer": [iv.name for iv in intervals],
                "size": [_bokeh.format_bytes(iv.bytes) for iv in intervals],
                "lifetime": [self._lifetime_text(timeline, iv) for iv in intervals],
                "padding": [_bokeh.format_bytes(iv.waste_bytes) for iv in intervals],
            },
            step_values={"event": [f"{e.index}: {e.name} ({_bokeh.format_bytes(timeline.usage_bytes[e.index])} live)"
                                   for e in events]},
            lines=[(f"HBM {_bokeh.format_bytes(timeline.capacity_bytes)}", timeline.capacity_bytes),
                   (f"usable {_bokeh.format_bytes(timeline.usable_bytes)} ({headroom:.0%} headroom)",
                    timeline.usable_bytes, _USABLE_COLOR, "dashed")],
            shaded_steps=[peak.index], shade_label="peak",
            step_labels=[e.name for e in events] if program else None,
            title=(f"HBM per chip over one training step: peak {_bokeh.format_bytes(timeline.peak_bytes)} "
                   f"at {peak.name!r}"),
        )
        fig = self._hbm.figure
        fig.xaxis.axis_label = ("event (program order)" if program
                                else f"modelled time ({unit}; HBM-traffic lower bound)")
        fig.xaxis.major_label_orientation = 0.6 if program and len(events) > 6 else "horizontal"
        serialized = timeline.serialized_stacks
        self._hbm_caption.text = (
            "<b>HBM of one chip, event by event</b>: every band is one buffer, colored by category "
            "(hover for its size and lifetime); solid red line = HBM, dashed = usable after headroom; "
            "gray = the peak event. "
            + (f"{len(serialized)} {'stack' if len(serialized) == 1 else 'stacks'} serialized, "
               f"one per SparseCore slot: {', '.join(serialized)}."
               if serialized else "No stack serialized: every stack's HBM stack is live through its whole phase.")
            + ("" if program else " Events that move no bytes take no time and do not show here.")
        )

    def _draw_measured(self) -> None:
        """The measured timeline (it does not change with the controls: drawn once)."""
        measured = self.measured
        intervals = list(measured.intervals)
        n = len(measured.events)
        step = np.arange(n)[:, None]
        start = np.array([iv.start for iv in intervals], dtype=np.int64)
        end = np.array([iv.end for iv in intervals], dtype=np.int64)
        size = np.array([iv.bytes for iv in intervals], dtype=np.float64)
        live = (step >= start[None, :]) & (step < end[None, :])
        index = np.arange(n, dtype=np.float64)
        peak = measured.peak_event
        self._measured_chart.update(
            index, index + 1, live * size[None, :], item_groups=[iv.category for iv in intervals],
            item_values={"buffer": [iv.name for iv in intervals],
                         "size": [_bokeh.format_bytes(iv.bytes) for iv in intervals],
                         "lifetime": [f"steps {iv.start}-{iv.end - 1}" for iv in intervals],
                         "padding": [_bokeh.format_bytes(iv.waste_bytes) for iv in intervals]},
            step_values={"event": [f"{e.index}: {e.name}" for e in measured.events]},
            shaded_steps=[peak.index], shade_label="peak",
            title=f"Measured (XLA): peak {_bokeh.format_bytes(measured.peak_bytes)} at {peak.name!r}")
        self._measured_caption.text = (
            "<b>What XLA measured</b> (its buffer assignment and live ranges, one band per buffer, colored by "
            f"allocation kind): peak {_bokeh.format_bytes(measured.peak_bytes)}, against the model's "
            f"{_bokeh.format_bytes(self.report.timeline.peak_bytes)} above. The x axis is XLA's schedule, not the "
            "model's events.")

    def _draw_live_at_peak(self, timeline, item_of_interval: dict[int, int]) -> None:
        live = timeline.live_at_peak(sort_by=self.sort_by)
        shown = live[:MAX_LISTED_BUFFERS]
        index_of = {id(iv): j for j, iv in enumerate(timeline.intervals)}
        events = timeline.events
        program = self.x_axis == "program_order"
        scale, _ = self._x_scale(timeline)
        if program:
            left = [float(iv.start) for iv in shown]
            right = [float(iv.end) for iv in shown]
        else:
            left = [iv.start_s * scale for iv in shown]
            right = [iv.end_s * scale for iv in shown]
        x_end = float(self._hbm.figure.x_range.end)  # the HBM chart's, drawn just before
        lanes = np.arange(len(shown))
        self._gantt.bars.selected.indices = []
        self._gantt.set_bars({
            "lane": lanes, "left": left, "right": right,
            "color": _bokeh.category_colors(np.array([_CATEGORY_INDEX[iv.category] for iv in shown], np.int64)),
            "rank": lanes + 1,
            "item": [item_of_interval[index_of[id(iv)]] for iv in shown],
            "buffer": [iv.name for iv in shown],
            "category": [iv.category for iv in shown],
            "bytes": np.array([iv.bytes for iv in shown], np.float64),
            "waste_bytes": np.array([iv.waste_bytes for iv in shown], np.float64),
            "mib": np.array([iv.bytes / 2**20 for iv in shown]),
            "waste_mib": np.array([iv.waste_bytes / 2**20 for iv in shown]),
            "size": [_bokeh.format_bytes(iv.bytes) for iv in shown],
            "padding": [_bokeh.format_bytes(iv.waste_bytes) for iv in shown],
            "lifetime": [self._lifetime_text(timeline, iv) for iv in shown],
            "start": np.array([iv.start for iv in shown], np.int64),
            "end": np.array([iv.end for iv in shown], np.int64),
            "start_event": [events[iv.start].name for iv in shown],
            "end_event": [events[iv.end - 1].name for iv in shown],
        })
        # The x range is the HBM chart's (shared): no room to the right for labels.
        self._gantt.set_lanes([f"{i + 1}. {_short(iv.name, _LANE_NAME_CHARS)}" for i, iv in enumerate(shown)],
                              x_end=x_end, label_room=0.0)
        peak = timeline.peak_event
        peak_x = (peak.index + 0.5) if program else (peak.start_s + peak.end_s) / 2 * scale
        self._gantt.set_marker(lanes, [peak_x] * len(shown))
        # Sizes at the start of each bar, inside the frame (bars may end at the right edge).
        self._gantt.set_lane_labels(lanes, left, [_bokeh.format_bytes(iv.bytes) for iv in shown])
        # Same event-name ticks (or time ticks) as the HBM chart above, and the same pixels.
        align_x_axis(self._gantt.figure, self._hbm.figure, min_border_left=_PLOT_LEFT_PX)
        # Table rows next to the Gantt lanes: same height, so the two read together.
        self._live_table.height = (_LANE_PX + 2) * (len(shown) + 1) + 8
        order = "size" if self.sort_by == "bytes" else "padding waste"
        more = (f"the first {len(shown)} of {len(live)}" if len(live) > len(shown) else f"all {len(live)}")
        self._live_caption.text = (
            f"<b>Live at the peak ({peak.name})</b>, by {order}: {more} buffers "
            f"({_bokeh.format_bytes(timeline.peak_bytes)} in all). Shrink the top rows to lower the peak. "
            "Select a row or click a bar to highlight the buffer in the HBM chart; the red ticks mark the peak."
        )

    def _draw_spmem(self) -> None:
        spm = self.report.spmem
        stacks = list(spm.stacks)
        capacity = int(spm.capacity)
        chosen = stacks.index(self.stack)
        total = spm.total
        self._spmem.update(
            spm.buffers.T, groups=[name for name, _ in SPMEM_BUFFERS], mode="stack", categories=stacks,
            lines=[(f"TileSpmem {_bokeh.format_bytes(capacity)}", capacity)],
            title=f"SPMEM of one tile, per stacked table ({len(stacks)} {'stack' if len(stacks) == 1 else 'stacks'})")
        fig = self._spmem.figure
        fig.xaxis.major_label_overrides = {i: _short(name, 18) for i, name in enumerate(stacks)}
        fig.y_range.end = 1.1 * max(capacity, int(total.max()))
        self._spmem_highlight.data = {"left": [chosen - 0.46], "right": [chosen + 0.46], "bottom": [0],
                                      "top": [float(total[chosen])]}
        over = int((total > capacity).sum())
        self._spmem_caption.text = (
            "<b>SPMEM per tile</b> (statically sized at compile time): each bar is one stacked table's "
            "SparseCore op, its buffers stacked; dashed red = TileSpmem. "
            + (f"<b style='color:#b71c1c'>{over} stack(s) over.</b> " if over else "Every stack fits. ")
            + f"Outlined: {self.stack}."
        )
        self._spmem_detail.text = self._spmem_detail_html(chosen)

    def _spmem_detail_html(self, row_index: int) -> str:
        spm = self.report.spmem
        capacity = int(spm.capacity)
        buffers = [int(b) for b in spm.buffers[row_index]]
        rows = [(name, kind, size, f"{100 * size / capacity:.1f} %")
                for (name, kind), size in zip(SPMEM_BUFFERS, buffers)]
        total = int(spm.total[row_index])
        out = _bokeh.columns_table_html(["buffer", "allocation", "bytes", "of TileSpmem"], rows,
                                        title=f"Stack {spm.stacks[row_index]}")
        out += _bokeh.summary_table_html([
            ("fixed / row-dependent", f"{int(spm.fixed[row_index]):,} / {int(spm.row_dependent[row_index]):,}"),
            ("total per tile", f"{total:,} of {capacity:,} ({100 * total / capacity:.1f} %)"),
            ("max ids / unique ids", (f"{int(spm.max_ids[row_index])} / {int(spm.max_unique[row_index])} "
                                      f"({spm.limit_source[row_index]})")),
            ("feature width (padded)", int(spm.feature_width[row_index])),
            ("sample count per SparseCore", int(spm.sample_count[row_index])),
        ])
        if total > capacity:
            out += _bokeh.message_html(f"over by {total - capacity:,} bytes per tile", "error")
        return out

    def _verdict_html(self) -> str:
        report, summary = self.report, self.summary
        if report.fits:
            head = _bokeh.message_html("Fits: every stack in TileSpmem, the step's peak in usable HBM.", "ok")
        else:
            failing = [name for name, bad in (("SPMEM", not report.spmem_fits), ("HBM", not report.hbm_fits)) if bad]
            head = _bokeh.message_html(f"Does not fit: {' and '.join(failing)}.", "error")
        numbers = _bokeh.summary_table_html([
            ("slice", f"{summary['num_chips']} x {summary['chip']}, {summary['num_partitions']} SparseCores"),
            ("batch (per SparseCore)", f"{summary['batch_size']:,} ({summary['samples_per_sc']:,})"),
            ("tables / stacks", f"{summary['num_tables']} / {summary['num_stacks']}"),
            ("SPMEM, worst stack", (f"{_bokeh.format_bytes(summary['max_spmem_bytes_per_tile'])} of "
                                    f"{_bokeh.format_bytes(summary['tile_spmem_bytes'])} per tile "
                                    f"({100 * summary['max_spmem_utilization']:.0f} %)")),
            ("HBM peak", (f"{_bokeh.format_bytes(summary['peak_hbm_bytes'])} of "
                          f"{_bokeh.format_bytes(summary['usable_hbm_bytes'])} usable")),
            ("peak event", summary["peak_event"]),
        ])
        fixes = ""
        if report.fixes:
            items = "".join(f"<li><code>{html.escape(str(fix))}</code></li>" for fix in report.fixes)
            fixes = (f"<div style='font-size:12px;margin:4px 0'><b>Each of these alone makes the model fit</b> "
                     f"(verified by the engine):<ul style='margin:2px 0 0 0;padding-left:18px'>{items}</ul></div>")
        return head + numbers + fixes + "".join(self._finding_html(f) for f in report.diagnoses)

    @staticmethod
    def _finding_html(finding) -> str:
        """The engine's message, with its evidence and fixes folded away."""
        details = []
        if finding.evidence:
            details.append("evidence: " + ", ".join(f"{k}={v}" for k, v in finding.evidence.items()))
        details += [f"fix: {fix}" for fix in finding.fixes]
        folded = ""
        if details:
            folded = ("<details style='font-size:11px;margin:0 0 4px 8px'><summary>evidence and fixes</summary>"
                      + _bokeh.message_html("\n".join(details), "info") + "</details>")
        # Severities (error, warning, info) are message_html levels too.
        return _bokeh.message_html(f"[{finding.severity}] {finding.message}", finding.severity) + folded

    # -- export -----------------------------------------------------------------------

    def to_html(self, path, title: str | None = None):
        """Write the current views to a standalone HTML file that works offline.

        Parameters
        ----------
        path : str or pathlib.Path
        title : str, optional
            Page title; default names the slice and the verdict.

        Returns
        -------
        pathlib.Path
            The file written (BokehJS inlined: no CDN needed). Hovers, the table
            and its link to the HBM chart work in the file; the sliders do not.
        """
        s = self.summary
        default = (f"scwork memory plan: {s['num_tables']} tables on {s['num_chips']} {s['chip']}, batch "
                   f"{s['batch_size']} ({'fits' if s['fits'] else 'does not fit'})")
        return self._export(path, title or default)


# The demo model: (name, vocabulary, width, max_ids_per_partition, max_unique_ids_per_partition).
_DEMO_TABLES: tuple[tuple[str, int, int, int, int], ...] = (
    ("user_id", 1_760_000_000, 128, 1024, 768),
    ("item_id", 1_035_000_000, 128, 1024, 768),
    ("user_history_items", 1_035_000_000, 128, 1536, 896),
    ("query_tokens", 575_000_000, 64, 2048, 1280),
    ("user_history_queries", 575_000_000, 64, 2048, 1280),
    ("ad_id", 460_000_000, 64, 1024, 768),
    ("page_url", 345_000_000, 64, 1024, 768),
    ("creative", 115_000_000, 32, 1024, 768),
    ("campaign", 69_000_000, 32, 1024, 768),
    ("advertiser", 23_000_000, 32, 1024, 768),
    ("app_id", 46_000_000, 32, 1024, 768),
    ("domain", 11_500_000, 32, 1024, 768),
    ("city", 2_300_000, 16, 768, 512),
    ("device_model", 575_000, 16, 768, 512),
    ("region", 57_500, 16, 768, 512),
    ("country", 300, 8, 512, 64),
    ("language", 200, 8, 512, 64),
    ("os_version", 2_000, 8, 512, 64),
    ("app_category", 500, 8, 512, 64),
    ("hour_of_week", 168, 8, 512, 64),
    ("position", 64, 4, 512, 64),
    ("is_weekend", 2, 1, 512, 8),
    ("is_logged_in", 2, 1, 512, 8),
    ("gender", 4, 1, 512, 8),
    ("user_bias", 1_000_000_000, 1, 512, 256),
    ("item_bias", 500_000_000, 1, 512, 256),
)
_DEMO_STACKS: tuple[tuple[str, ...], ...] = (
    ("user_id",), ("item_id",), ("user_history_items",), ("query_tokens", "user_history_queries"),
    ("ad_id", "page_url"), ("creative", "campaign", "advertiser", "app_id", "domain"),
    ("city", "device_model", "region"),
    ("country", "language", "os_version", "app_category", "hour_of_week", "position"),
    ("is_weekend", "is_logged_in", "gender"), ("user_bias", "item_bias"),
)
