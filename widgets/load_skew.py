"""LoadSkewExplorer: how a batch of embedding ids loads every SparseCore partition.

Bring a batch (or several steps) of ids and the features/tables they look up; pick a
TPU chip and chip count, stacking on or off, the shard rotation, per-partition limits
and whether ids may be dropped, and see ([jte] table_stacking.py; [jte]
preprocess_sparse_dense_matmul_input; [sc-guide] §10):

- per-partition bars of ids and of distinct ids for the selected stack, either split
  by *source* SparseCore (every (device, SC) slice of the batch is processed on its
  own; each bar is one stream the limits apply to) or, for the worst stream of every
  partition, stacked by table (which table of the stack brings the load); a legend
  says what the colors are. With more sources than :data:`MAX_SPLIT_SOURCES` the
  bars would be a pixel wide, so each partition shows the distribution over its
  sources instead (bar: maximum, dashes: median and minimum). The black dash is the
  partition's observed maximum, the dashed red line the configured limit;
- a device x partition heatmap of ``max_ids_per_partition`` (or of the distinct-id
  maximum), cells over the limit outlined in red;
- a stats panel: imbalance (hottest stream / mean stream, per stack), the ids dropped
  with id dropping on, or else the mini-batches needed to stay within the limits, CSR
  buffer sizes, and the naive whole-batch view;
- a step slider when several steps are given.

All numbers come from the engine's :class:`scwork.sharding.Scenario` of the current
step and setting (:meth:`LoadSkewExplorer.scenario`: the run under the limits, the
observed run, mini-batch counts, per-table counts, CSR sizes); this module only
arranges and draws them. A limit overflow without dropping does not break the view:
the engine's :class:`~scwork.errors.LimitExceededError` is shown in red and the
observed statistics (the same ids without limits) are drawn.

Examples
--------
>>> from scwork.widgets import LoadSkewExplorer          # doctest: +SKIP
>>> explorer = LoadSkewExplorer.demo()                    # doctest: +SKIP
>>> explorer.max_ids_per_partition = 64                   # doctest: +SKIP
>>> explorer.summary["dropped_ids"], explorer.error[:40]  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import dataclasses
import html
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ipywidgets
import numpy as np
import traitlets

from scwork import hardware
from scwork.errors import InputError, ScworkError
from scwork.hardware import Topology
from scwork.sharding import FeatureBatch, FeatureSpec, Scenario, SparsecoreConfig, TableSpec
from scwork.sharding.stacking import StackingPlan
from scwork.widgets import _bokeh
from scwork.widgets._charts import DistributionBarChart
from scwork.widgets._display import figure_view
from scwork.widgets._panes import TextPane, hbox, vbox

__all__ = ["LoadSkewExplorer", "HEATMAP_STATS", "SPLIT_MODES", "MAX_SPLIT_SOURCES"]

#: Statistics the heatmap can show (variables of the engine's stats Dataset).
HEATMAP_STATS: tuple[str, ...] = ("max_ids_per_partition", "max_unique_ids_per_partition")
#: How the per-partition bars are split: by source SparseCore, or stacked by table.
SPLIT_MODES: tuple[str, ...] = ("sc", "table")
#: Up to this many source SparseCores (devices x SCs) the bars show one bar per
#: source. There are as many partitions as sources, so 16 sources already draw 256
#: bars (about 2 pixels each); above it every partition shows the maximum, median and
#: minimum over its sources instead.
MAX_SPLIT_SOURCES = 16

_CHIP_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_CHART_WIDTH = 560   # frame width of the bar charts and the heatmap, in pixels


def _sparsecore_chips() -> list[str]:
    """Catalog TPUs that have SparseCores (the only ones this explorer can shard over)."""
    return [c.name for c in hardware.chips(kind="tpu") if c.sparsecores_per_chip > 0]


def _as_batches(batch_or_steps: Any) -> list[FeatureBatch]:
    """One FeatureBatch per step from a batch, a ragged dict, or a sequence of those."""
    def one(item: Any) -> FeatureBatch:
        if isinstance(item, FeatureBatch):
            return item
        if isinstance(item, Mapping):
            return FeatureBatch.from_ragged(item)
        raise InputError(f"a step must be a FeatureBatch or a dict feature -> (ids, row_splits), "
                         f"got {type(item).__name__}")

    if isinstance(batch_or_steps, (FeatureBatch, Mapping)):
        return [one(batch_or_steps)]
    if isinstance(batch_or_steps, (str, bytes)):
        raise InputError("batch_or_steps must be a FeatureBatch or a sequence of them, got a string")
    try:
        steps = [one(item) for item in batch_or_steps]
    except TypeError:
        raise InputError(f"batch_or_steps must be a FeatureBatch or a sequence of them, "
                         f"got {type(batch_or_steps).__name__}") from None
    if not steps:
        raise InputError("batch_or_steps holds no step; give at least one FeatureBatch")
    return steps


def _as_stack_limits(limits: Any) -> dict[str, tuple[int | None, int | None]]:
    """``{stack: (max_ids, max_unique_ids)}`` from a mapping, a limits object or a file path."""
    if limits is None:
        return {}
    if isinstance(limits, (str, os.PathLike)):
        from scwork.sharding.limits_files import read_limits

        limits = read_limits(limits)
    if hasattr(limits, "to_limits"):          # FdoStats
        limits = limits.to_limits()
    if hasattr(limits, "stack_limits"):       # Limits, TunedLimits
        limits = limits.stack_limits()
    if not isinstance(limits, Mapping):
        raise InputError(f"stack_limits must be a mapping {{stack: (max_ids, max_unique_ids)}}, a Limits "
                         f"object or a limits file path, got {type(limits).__name__}")
    out = {}
    for name, value in limits.items():
        if isinstance(value, Mapping):
            value = (value.get("max_ids_per_partition"), value.get("max_unique_ids_per_partition"))
        max_ids, max_unique = value
        out[str(name)] = (_limit(max_ids), _limit(max_unique))
    return out


def _limit(value: int | None) -> int | None:
    """Widget convention (0 = no limit) -> engine convention (None = no limit)."""
    return int(value) if value else None


@dataclass
class _Result:
    """What one engine run gives the views (all stacks of one step and setting)."""

    stats: Any                      # xarray.Dataset of compute_stats / preprocess
    plan: StackingPlan              # the plan run (its limits are the configured ones)
    error: str                      # LimitExceededError message, "" when within limits
    coo_entries: dict[str, int]     # CSR entries per device (all SCs), per stack
    coo_bytes: dict[str, int]       # bytes of the CSR buffers of one device, per stack
    num_minibatches: dict[str, int | None]           # per stack; None where no split fits
    minibatch_notes: dict[str, str]                  # per stack: why its count is missing


class LoadSkewExplorer(_bokeh.SyncedDisplay, ipywidgets.VBox):
    """Per-partition load of embedding ids on SparseCores: bars, heatmap, limits.

    Parameters
    ----------
    batch_or_steps : FeatureBatch, dict, or sequence of them
        The ids of one step, or of several steps (a step slider appears). A dict is
        ``feature -> (ids, row_splits)`` as :meth:`FeatureBatch.from_ragged` takes;
        ``scwork.datasets.synthetic(...)`` results work as they are.
    features : sequence or mapping of FeatureSpec
        One per feature of the batch (the tables they look up).
    topology : scwork.Topology, optional
        Use this topology (e.g. a generic ``scwork.Topology(1, 2)``) instead of a
        catalog chip; the chip menu then also offers "custom" for it.
    chip : str
        Catalog TPU with SparseCores (``v4``, ``v5p``, ``v6e``, ``tpu7x``); ignored
        when ``topology`` is given.
    num_chips : int
        Chips of the system; ignored when ``topology`` is given.
    config : SparsecoreConfig, optional
        Flags; the explorer's ``allow_id_dropping`` replaces the config's.
    stack_limits : dict, Limits, TunedLimits, FdoStats or path, optional
        ``{stack: (max_ids_per_partition, max_unique_ids_per_partition)}`` to start
        from, or anything :mod:`scwork.sharding.limits_files` reads (a ``.json`` /
        ``.csv`` limits file, a tuner's proposal); stacks not listed use the limits
        of their tables (TableSpec / config).
    cache_size : int
        Engine results kept for quick switching back (per step and setting); 0 keeps none.
    **kwargs
        Initial values of the traits below and ``ipywidgets.VBox`` arguments.

    Attributes
    ----------
    chip : str
        Catalog chip name; ``""`` is the custom ``topology`` given to the constructor.
    num_chips : int
    stacking : {"auto", "none"}
        Automatic table stacking ([jte] table_stacking.py) or every table alone.
    rotation : int or None
        Shard rotation between successive tables of a stack; None: the default
        (SparseCores per device).
    stack : str
        The stack shown in the bars and heatmap.
    max_ids_per_partition, max_unique_ids_per_partition : int
        Limits of the selected stack (0 = none). Each stack keeps its own; selecting
        another stack shows its limits. Changing stacking or chips re-plans stacks,
        which start again from their tables' limits.
    allow_id_dropping : bool
        Drop the ids over a limit (counted) instead of raising.
    split_by : {"sc", "table"}
        Bars split by source SparseCore (or, above :data:`MAX_SPLIT_SOURCES` sources,
        their distribution per partition), or the worst stream stacked by table.
    heatmap_stat : {"max_ids_per_partition", "max_unique_ids_per_partition"}
    step : int
        Index of the step shown.
    error : str
        Why the current setting fails (read-only); empty when it does not. After a
        limit overflow the views show the observed statistics; after any other
        error they keep the last valid drawing.
    stats : xarray.Dataset or None
        The engine's statistics of the current step and setting (all stacks). After
        a limit overflow, the statistics computed without limits.
    table_stats : xarray.Dataset or None
        Per-table statistics (one "stack" per table, keeping the table's rotation in
        its stack) when ``split_by == "table"``; else None.
    summary : dict
        Numbers of the stats panel (see :meth:`_summary`).
    sources : dict of str to ColumnDataSource
        ``ids_bars``, ``ids_max``, ``ids_limit``, ``unique_bars``, ``unique_max``,
        ``unique_limit`` (see :class:`scwork.widgets._bokeh.BarChart`), ``ids_spread``
        and ``unique_spread`` (median and minimum over the sources per partition when
        the bars show the distribution; see :class:`scwork.widgets._charts.DistributionBarChart`),
        ``heatmap``, ``heatmap_image`` and ``heatmap_over_limit`` (the cells over the
        limit; see :class:`scwork.widgets._bokeh.Heatmap`).
    figures : dict of str to bokeh figure
        ``ids``, ``unique_ids``, ``heatmap``.
    controls : dict of str to ipywidgets.Widget
        ``chip``, ``num_chips``, ``stacking``, ``rotation``, ``stack``, ``max_ids``,
        ``max_unique_ids``, ``allow_id_dropping``, ``split_by``, ``heatmap_stat``, ``step``.

    Examples
    --------
    >>> import scwork                                                  # doctest: +SKIP
    >>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
    >>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])})
    >>> ex = LoadSkewExplorer(batch, [FeatureSpec("f", TableSpec("t", 16, 8))],
    ...                       topology=scwork.Topology(1, 2))            # doctest: +SKIP
    >>> list(ex.sources["ids_max"].data["value"])                        # doctest: +SKIP
    [2.0, 3.0]
    """

    chip = traitlets.Unicode("v5p")
    num_chips = traitlets.Int(4)
    stacking = traitlets.Enum(("auto", "none"), default_value="auto")
    rotation = traitlets.Int(None, allow_none=True)
    stack = traitlets.Unicode("")
    max_ids_per_partition = traitlets.Int(0)
    max_unique_ids_per_partition = traitlets.Int(0)
    allow_id_dropping = traitlets.Bool(False)
    split_by = traitlets.Enum(SPLIT_MODES, default_value="sc")
    heatmap_stat = traitlets.Enum(HEATMAP_STATS, default_value="max_ids_per_partition")
    step = traitlets.Int(0)
    error = traitlets.Unicode("", read_only=True)

    # Traits whose change needs a new engine run; the others only redraw.
    _ENGINE_TRAITS = ("chip", "num_chips", "stacking", "rotation", "allow_id_dropping", "step")
    _LIMIT_TRAITS = ("max_ids_per_partition", "max_unique_ids_per_partition")
    _VIEW_TRAITS = ("stack", "split_by", "heatmap_stat")

    def __init__(self, batch_or_steps: Any, features: Any, *, topology: Topology | None = None,
                 chip: str = "v5p", num_chips: int = 4, config: SparsecoreConfig | None = None,
                 stack_limits: Mapping[str, Any] | None = None, cache_size: int = 16, **kwargs: Any):
        state = {name: kwargs.pop(name) for name in (*self._ENGINE_TRAITS, *self._VIEW_TRAITS) if name in kwargs}
        # Limits given as traits belong to the initial stack, known only once planned.
        initial_limits = {name: kwargs.pop(name) for name in self._LIMIT_TRAITS if name in kwargs}
        super().__init__(**kwargs)
        self._steps = _as_batches(batch_or_steps)
        self._features = features
        self._config = SparsecoreConfig() if config is None else config
        if not isinstance(self._config, SparsecoreConfig):
            raise InputError(f"config must be a SparsecoreConfig, got {type(self._config).__name__}")
        self._custom_topology = topology
        # User-chosen limits per stack name (None = no limit); stacks not listed take
        # their tables' limits from the plan.
        self._limits: dict[str, tuple[int | None, int | None]] = _as_stack_limits(stack_limits)
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._cache_size = max(0, int(cache_size))
        self._table_cache: collections.OrderedDict = collections.OrderedDict()
        self._syncing = False
        # The stack the user last chose: shown again whenever the plan has it (after
        # stacking is toggled off and on, say), even if another one was shown meanwhile.
        self._chosen_stack: str | None = state.get("stack") or None
        self._result: _Result | None = None
        self.stats = None
        self.table_stats = None
        self.summary: dict[str, Any] = {}

        with self._quiet():
            if topology is not None:
                self.chip = topology.chip or ""
                self.num_chips = topology.num_chips
            else:
                self.chip, self.num_chips = chip, num_chips
            for name, value in state.items():
                setattr(self, name, value)
        self._build_views()
        self._build_controls()
        self.observe(self._on_engine_trait, names=list(self._ENGINE_TRAITS))
        self.observe(self._on_limit_trait, names=list(self._LIMIT_TRAITS))
        self.observe(self._on_view_trait, names=list(self._VIEW_TRAITS))
        self._refresh(recompute=True)
        if initial_limits:
            with self._quiet():
                for name, value in initial_limits.items():
                    setattr(self, name, value)
            self._on_limit_trait(None)

    @classmethod
    def demo(cls, *, batch_size: int = 4096, num_features: int = 4, num_steps: int = 3,
             vocab_size: int = 100_000, valency: Any = 20, zipf_exponent: float = 1.05,
             hashed: bool = True, seed: int = 0, **kwargs: Any) -> "LoadSkewExplorer":
        """An explorer on synthetic Zipf data (:func:`scwork.datasets.synthetic`).

        Feature ``f{i}`` looks up its own table ``t{i}`` of ``vocab_size`` rows; the
        first half of the tables are 16 wide, the others 32, so automatic stacking
        makes two stacks.

        Parameters
        ----------
        batch_size, num_features, num_steps, vocab_size, valency, zipf_exponent, hashed, seed
            Passed to :func:`scwork.datasets.synthetic` (``hashed=False`` puts the
            hottest ids on the first partitions: skew).
        **kwargs
            Passed to the constructor (``chip``, ``num_chips``, traits...).
        """
        from scwork import datasets

        data = datasets.synthetic(batch_size, num_steps=num_steps, features=num_features,
                                  vocab_size=vocab_size, valency=valency, zipf_exponent=zipf_exponent,
                                  hashed=hashed, seed=seed)
        features = [FeatureSpec(name, TableSpec(f"t{i}", vocab_size, 16 if i < (num_features + 1) // 2 else 32))
                    for i, name in enumerate(data.features)]
        return cls([FeatureBatch.from_ragged(step) for step in data.batches()], features, **kwargs)

    # -- construction --------------------------------------------------------------

    def _build_views(self) -> None:
        self._ids_chart = DistributionBarChart(
            title="ids per partition", x_axis_label="destination partition (global SparseCore)",
            y_axis_label="ids", category_name="partition", group_name="bar", value_name="ids",
            mark_label="partition max", width=_CHART_WIDTH, max_legend_groups=MAX_SPLIT_SOURCES)
        self._unique_chart = DistributionBarChart(
            title="distinct ids per partition", x_axis_label="destination partition (global SparseCore)",
            y_axis_label="distinct ids", category_name="partition", group_name="bar",
            value_name="distinct ids", mark_label="partition max", width=_CHART_WIDTH,
            max_legend_groups=MAX_SPLIT_SOURCES)
        for chart in (self._ids_chart, self._unique_chart):
            # Rows as high as their 10px text: with two columns over 8 colors (see
            # _draw_bars), MAX_SPLIT_SOURCES sources plus marks and limit fit the chart.
            chart.legend.label_height = 12
            # Two columns whatever the entries: over 8 colors a one-column legend is
            # taller than the chart and its last items (partition max, limit) are cut
            # off; and a legend that keeps its columns is not built again by BokehJS
            # for a new column count when the sources change (more chips, another chip).
            chart.legend.ncols = 2
            # Label columns at least as wide as the longest usual label ("device 15 SC 3",
            # "median (dash)"): the legend, and with it the chart, keeps its width when
            # its entries change (more chips, another stack), so BokehJS does not lay
            # the chart out again.
            chart.legend.label_width = 72
            chart.legend.title_text_font_size = "10px"
            chart.legend.title_text_font_style = "bold"
        self._heatmap = _bokeh.Heatmap(
            x_axis_label="partition", y_axis_label="device",
            value_name="ids", max_width=_CHART_WIDTH, max_height=240, fill_height_rows=3)
        # Texts are HTML panes, not bokeh Divs (see scwork.widgets._panes).
        self._bars_caption = TextPane(width=_CHART_WIDTH + 40)
        self._heatmap_caption = TextPane(width=_CHART_WIDTH + 40)
        self._panel = TextPane(width=410)
        self.sources = {
            "ids_bars": self._ids_chart.bars, "ids_max": self._ids_chart.marks,
            "ids_limit": self._ids_chart.lines,
            "unique_bars": self._unique_chart.bars, "unique_max": self._unique_chart.marks,
            "unique_limit": self._unique_chart.lines,
            "ids_spread": self._ids_chart.spread, "unique_spread": self._unique_chart.spread,
            "heatmap": self._heatmap.cells, "heatmap_image": self._heatmap.image,
            "heatmap_over_limit": self._heatmap.highlights,
        }
        self.figures = {"ids": self._ids_chart.figure, "unique_ids": self._unique_chart.figure,
                        "heatmap": self._heatmap.figure}

    def _build_controls(self) -> None:
        W = ipywidgets.Layout
        narrow = {"description_width": "initial"}
        chips = _sparsecore_chips()
        chip_options = [(c, c) for c in chips]
        if self._custom_topology is not None:
            chip_options.insert(0, (f"custom ({self._custom_topology.sparsecores_per_chip} SC/chip)", ""))
        self._chip = ipywidgets.Dropdown(options=chip_options, description="chip", style=narrow,
                                         layout=W(width="170px"))
        self._num_chips = ipywidgets.Dropdown(options=list(_CHIP_COUNTS), description="chips", style=narrow,
                                              layout=W(width="120px"))
        self._stacking = ipywidgets.ToggleButtons(options=[("auto stacking", "auto"), ("no stacking", "none")],
                                                  style={"button_width": "auto"})
        self._rotation = ipywidgets.BoundedIntText(min=0, max=2**31 - 1, description="rotation", style=narrow,
                                                   layout=W(width="140px"))
        self._stack = ipywidgets.Dropdown(options=[], description="stack", style=narrow,
                                          layout=W(width="260px"))
        self._max_ids = ipywidgets.BoundedIntText(min=0, max=2**31 - 1, description="max ids / partition",
                                                  style=narrow, layout=W(width="200px"))
        self._max_unique = ipywidgets.BoundedIntText(min=0, max=2**31 - 1, description="max unique",
                                                     style=narrow, layout=W(width="160px"))
        self._dropping = ipywidgets.Checkbox(description="allow id dropping", indent=False,
                                             layout=W(width="150px"))
        self._split = ipywidgets.ToggleButtons(options=[("by source SC", "sc"), ("by table", "table")],
                                               style={"button_width": "auto"})
        self._heatmap_stat = ipywidgets.Dropdown(
            options=[("heatmap: max ids", HEATMAP_STATS[0]), ("heatmap: max unique ids", HEATMAP_STATS[1])],
            layout=W(width="200px"))
        self._step = ipywidgets.IntSlider(min=0, max=max(len(self._steps) - 1, 0), description="step",
                                          continuous_update=False, layout=W(width="420px"))
        self._limits_hint = ipywidgets.HTML("<span style='color:#666;font-size:12px'>0 = no limit</span>")

        # link(source, target) copies source -> target first: the traits are the source.
        for trait, control in (("stacking", self._stacking), ("allow_id_dropping", self._dropping),
                               ("split_by", self._split), ("heatmap_stat", self._heatmap_stat),
                               ("step", self._step), ("max_ids_per_partition", self._max_ids),
                               ("max_unique_ids_per_partition", self._max_unique)):
            ipywidgets.link((self, trait), (control, "value"))
        for control in (self._chip, self._num_chips, self._rotation, self._stack):
            control.observe(self._on_control, names="value")

        self._error_area = ipywidgets.HTML()
        # One bokeh view per figure (they share no models): a size change (the
        # heatmap follows the grid's shape) re-lays out only its own document.
        self._views = hbox([
            vbox([self._bars_caption, figure_view(self._ids_chart.figure),
                  figure_view(self._unique_chart.figure), self._heatmap_caption,
                  figure_view(self._heatmap.figure)]),
            self._panel,
        ])
        self._step.layout.display = None if len(self._steps) > 1 else "none"
        self.controls = {
            "chip": self._chip, "num_chips": self._num_chips, "stacking": self._stacking,
            "rotation": self._rotation, "stack": self._stack, "max_ids": self._max_ids,
            "max_unique_ids": self._max_unique, "allow_id_dropping": self._dropping,
            "split_by": self._split, "heatmap_stat": self._heatmap_stat, "step": self._step,
        }
        self.children = [
            ipywidgets.HBox([self._chip, self._num_chips, self._stacking, self._rotation, self._stack]),
            ipywidgets.HBox([self._max_ids, self._max_unique, self._limits_hint, self._dropping,
                             self._split, self._heatmap_stat]),
            self._step, self._error_area, self._views,
        ]

    @traitlets.validate("step")
    def _valid_step(self, proposal):
        value = proposal["value"]
        if not 0 <= value < len(self._steps):
            raise traitlets.TraitError(f"step must be in 0..{len(self._steps) - 1}, got {value}")
        return value

    # -- events ---------------------------------------------------------------------

    def _on_engine_trait(self, change) -> None:
        if not self._syncing:
            self._refresh(recompute=True)

    def _on_limit_trait(self, change) -> None:
        if self._syncing:
            return
        self._limits[self.stack] = (_limit(self.max_ids_per_partition), _limit(self.max_unique_ids_per_partition))
        self._refresh(recompute=True)

    def _on_view_trait(self, change) -> None:
        if self._syncing:
            return
        if change["name"] == "stack":
            self._chosen_stack = self.stack
            # The limit boxes show the newly selected stack's limits.
            self._sync_limit_traits()
        self._refresh(recompute=False)

    def _on_control(self, change) -> None:
        if self._syncing:
            return
        owner = change["owner"]
        if owner is self._chip:
            self.chip = owner.value
        elif owner is self._num_chips:
            self.num_chips = owner.value
        elif owner is self._rotation:
            self.rotation = owner.value
        elif owner is self._stack and owner.value is not None:
            self.stack = owner.value

    # -- engine ---------------------------------------------------------------------

    @property
    def topology(self) -> Topology:
        """The topology of the current ``chip`` and ``num_chips``."""
        custom = self._custom_topology
        if self.chip == "" and custom is not None:
            return custom if custom.num_chips == self.num_chips else custom.replace(num_chips=self.num_chips)
        if custom is not None and self.chip == custom.chip and self.num_chips == custom.num_chips:
            return custom
        return Topology.for_chip(self.chip, num_chips=self.num_chips)

    @property
    def num_steps(self) -> int:
        """Steps given to the constructor."""
        return len(self._steps)

    def _stacking_arg(self):
        return "auto" if self.stacking == "auto" else None

    def scenario(self) -> Scenario:
        """The engine's :class:`~scwork.sharding.Scenario` of the current step and setting.

        Everything the explorer shows comes from it (a script gets the same numbers with
        ``explorer.scenario().observed`` and so on).
        """
        base = Scenario(self._steps[self.step], self._features, self.topology, stacking=self._stacking_arg(),
                        rotation=self.rotation,
                        config=dataclasses.replace(self._config, allow_id_dropping=self.allow_id_dropping))
        # User limits for stacks of this plan only: after stacking is toggled, limits
        # set for the other plan's stacks do not apply.
        names = {st.name for st in base.own_plan.stacks}
        return base.with_(stack_limits={k: v for k, v in self._limits.items() if k in names})

    def _run_engine(self) -> _Result:
        """Run the engine for the current step and setting (cached)."""
        scenario = self.scenario()
        key = (self.step, scenario.topology, self.stacking, self.rotation, tuple(sorted(scenario.limits.items())),
               self.allow_id_dropping)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key][0]
        # Over its limits, the mini-batch count is a second engine pass over the same
        # ids: compute() runs it on another core while the observed run is made.
        scenario.compute()
        footprint = scenario.csr_footprint
        out = _Result(scenario.effective_stats, scenario.plan, scenario.error,
                      {name: f["entries_per_device"] for name, f in footprint.items()},
                      {name: f["bytes_per_device"] for name, f in footprint.items()},
                      scenario.minibatches.counts, scenario.minibatches.notes)
        if self._cache_size:
            self._cache[key] = (out, scenario)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return out

    def _table_stats(self):
        """Observed statistics of every table on its own (:attr:`Scenario.by_table`), cached
        per step and plan: they do not depend on the limits."""
        key = (self.step, self.topology, self.stacking, self.rotation)
        if key in self._table_cache:
            return self._table_cache[key]
        stats = self.scenario().by_table
        if self._cache_size:
            self._table_cache[key] = stats
            while len(self._table_cache) > self._cache_size:
                self._table_cache.popitem(last=False)
        return stats

    # -- refresh --------------------------------------------------------------------

    def _refresh(self, *, recompute: bool) -> None:
        """Run the engine if its inputs changed, then redraw the selected stack."""
        if recompute or self._result is None:
            try:
                result = self._run_engine()
            except ScworkError as err:
                # Not a limit overflow (a batch that does not divide over the chips, an
                # unknown chip...): keep the last drawing and say why.
                self._set_error(str(err))
                self._sync_controls()
                return
            self._result = result
            self.stats = result.stats
        result = self._result
        names = [str(n) for n in result.stats["stack"].values]
        with self._quiet():
            if self._chosen_stack in names:
                self.stack = self._chosen_stack
            elif self.stack not in names:
                self.stack = names[0]
            self._sync_limit_traits()
        self.table_stats = None
        if self.split_by == "table":
            try:
                self.table_stats = self._table_stats()
            except ScworkError as err:
                self._set_error(str(err))
                return
        self._draw(result)
        self._set_error(result.error)
        self._sync_controls()

    def _set_error(self, message: str) -> None:
        self.set_trait("error", message)
        self._error_area.value = _bokeh.message_html(message, "error")

    def _stack_limits(self, result: _Result, name: str) -> tuple[int | None, int | None]:
        """Limits configured for stack ``name`` in the run (also after an overflow)."""
        st = result.plan.stack(name)
        return st.max_ids_per_partition, st.max_unique_ids_per_partition

    def _sync_limit_traits(self) -> None:
        """Show the selected stack's limits in the limit traits (no refresh)."""
        if self._result is None or self.stack not in [st.name for st in self._result.plan.stacks]:
            return
        max_ids, max_unique = self._stack_limits(self._result, self.stack)
        with self._quiet():
            self.max_ids_per_partition = max_ids or 0
            self.max_unique_ids_per_partition = max_unique or 0

    # -- drawing --------------------------------------------------------------------

    def _draw(self, result: _Result) -> None:
        stats, name = result.stats, self.stack
        sel = stats.sel(stack=name)
        max_ids, max_unique = self._stack_limits(result, name)
        G, S, P = sel["ids"].shape
        for chart, variable, peak, limit in (
                (self._ids_chart, "ids", "max_ids_per_partition", max_ids),
                (self._unique_chart, "unique_ids", "max_unique_ids_per_partition", max_unique)):
            self._draw_bars(chart, sel, variable, name,
                            marks=sel[peak].max("device").values,
                            lines=[(f"limit {limit:,}", limit)] if limit else [],
                            categories=[f"partition {p}" for p in range(P)])
        self._bars_caption.text = self._bars_caption_html(name, G, S, P)

        stat = self.heatmap_stat
        limit = max_ids if stat == "max_ids_per_partition" else max_unique
        grid = sel[stat].values
        self._heatmap.update(grid, highlight=(grid > limit) if limit else None)
        self._heatmap_caption.text = (
            f"<b>Heatmap of stack {html.escape(name)}</b>: {stat}[device, partition], the maximum over "
            f"the device's {S} source SparseCores; "
            f"{'cells over the limit outlined in red' if limit else 'no limit set'}.")
        self.summary = self._summary(result, name)
        self._panel.text = self._panel_html(result, name)

    def _draw_bars(self, chart: DistributionBarChart, sel, variable: str, name: str, **common) -> None:
        """Draw the bars of ``variable`` of stack ``name`` and say in the legend what they are.

        By table: for every partition the stream (device, source SC) with the most
        ids, broken down by the table its ids come from. By source: one bar per
        source SparseCore, or above :data:`MAX_SPLIT_SOURCES` sources the maximum,
        median and minimum over the sources (one bar per partition).
        """
        G, S, P = sel[variable].shape
        streams = sel[variable].values.reshape(G * S, P)
        noun = "ids" if variable == "ids" else "distinct ids"
        if self.split_by == "table" and self.table_stats is not None:
            worst = streams.argmax(axis=0)
            tables = list(self._result.plan.stack(name).table_names)
            layers = np.stack([self.table_stats[variable].sel(stack=t).values.reshape(G * S, P)[worst, np.arange(P)]
                               for t in tables])
            chart.update(layers, groups=tables, mode="stack",
                         title=f"{noun} per partition, stack {name} (worst stream, stacked by table)", **common)
            chart.legend.title = ("bar color = table" if len(tables) <= MAX_SPLIT_SOURCES
                                  else f"{len(tables)} tables (hover a bar)")
        elif G * S <= MAX_SPLIT_SOURCES:
            chart.update(streams, groups=[f"device {d} SC {s}" for d in range(G) for s in range(S)],
                         mode="split", title=f"{noun} per partition, stack {name} (one bar per source SparseCore)",
                         **common)
            chart.legend.title = "bar color = source SC"
        else:
            chart.update_distribution(
                streams.max(axis=0), np.median(streams, axis=0), streams.min(axis=0),
                bar_label="max (bar)", median_label="median (dash)", low_label="min (dash)",
                title=f"{noun} per partition, stack {name} (max / median / min over its {G * S} source SCs)",
                **common)
            chart.legend.title = f"over {G * S} source SCs"

    def _bars_caption_html(self, name: str, G: int, S: int, P: int) -> str:
        if self.split_by == "table":
            how = ("each bar is the partition's busiest stream (one source SparseCore), "
                   "colored by the table its ids come from")
        elif G * S <= MAX_SPLIT_SOURCES:
            how = (f"one bar per source SparseCore ({G} devices x {S} SCs), colored by source: each "
                   "(device, SC) slice of the batch sends its ids to every partition on its own")
        else:
            how = (f"{G * S} source SparseCores ({G} devices x {S} SCs) are too many for a bar each: "
                   "per partition the light bar is the maximum over the sources, the blue dash their "
                   "median, the orange dash their minimum (gray whisker: minimum to maximum)")
        return (f"<b>{html.escape(str(self.topology))}</b>, step {self.step}: {how}. "
                "Black dash: the partition's maximum (what a limit must cover); "
                "dashed red: the configured limit.")

    # -- summary --------------------------------------------------------------------

    def _summary(self, result: _Result, name: str) -> dict[str, Any]:
        """Numbers of the stats panel for stack ``name``.

        ``imbalance`` is the hottest (device, SC, partition) stream over the mean
        stream: how much larger a limit (and buffer) must be than a perfectly
        balanced load; ``naive_imbalance`` the same over the whole-batch counts per
        partition.
        """
        stats = result.stats
        sel = stats.sel(stack=name)
        max_ids, max_unique = self._stack_limits(result, name)
        naive = sel["naive_ids_per_partition"].values
        per_stack = {str(n): _imbalance(stats["ids"].sel(stack=n).values) for n in stats["stack"].values}
        return {
            "topology": str(self.topology),
            "num_devices": int(stats.attrs["num_devices"]),
            "sparsecores_per_device": int(stats.attrs["sparsecores_per_device"]),
            "num_partitions": int(stats.attrs["num_partitions"]),
            "step": self.step,
            "num_steps": self.num_steps,
            "stack": name,
            "tables": list(result.plan.stack(name).table_names),
            "stacks": list(per_stack),
            "max_ids_per_partition": int(sel["max_ids_per_partition"].max()),
            "max_unique_ids_per_partition": int(sel["max_unique_ids_per_partition"].max()),
            "mean_ids_per_stream": float(sel["ids"].mean()),
            "configured_max_ids_per_partition": max_ids,
            "configured_max_unique_ids_per_partition": max_unique,
            "imbalance": per_stack[name],
            "imbalance_per_stack": per_stack,
            "allow_id_dropping": bool(self.allow_id_dropping),
            "dropped_ids": int(sel["dropped_ids"]),
            "dropped_ids_per_stack": {str(n): int(v) for n, v in
                                      zip(stats["stack"].values, stats["dropped_ids"].values)},
            "num_minibatches": result.num_minibatches.get(name),
            "num_minibatches_per_stack": result.num_minibatches,
            "required_buffer_size_per_sc": sel["required_buffer_size_per_sc"].values.tolist(),
            "max_required_buffer_size_per_sc": int(sel["required_buffer_size_per_sc"].max()),
            "coo_buffer_entries_per_device": result.coo_entries[name],
            "coo_buffer_bytes_per_device": result.coo_bytes[name],
            "naive_ids_per_partition": naive.tolist(),
            "naive_unique_ids_per_partition": sel["naive_unique_ids_per_partition"].values.tolist(),
            "naive_max_ids_per_partition": int(naive.max()) if naive.size else 0,
            "naive_imbalance": _imbalance(naive),
            "error": result.error,
        }

    def _panel_html(self, result: _Result, name: str) -> str:
        s = self.summary

        def limit_text(value):
            return "none" if value is None else value

        def imbalance_text(value):
            return "n/a" if np.isnan(value) else f"{value:.2f}x"

        minibatches = ("n/a" if s["num_minibatches"] is None else s["num_minibatches"])
        # The two numbers answer different settings: the ids lost with id dropping on,
        # and the mini-batches that would keep every id (dropping off). Side by side
        # without that, "dropped ids 14" and "mini-batches 2" read as a contradiction.
        if s["allow_id_dropping"]:
            dropped_row = ("dropped ids (with id dropping on, at these limits)", s["dropped_ids"])
            minibatch_row = ("mini-batches needed instead (no dropping)", minibatches)
        else:
            dropped_row = ("dropped ids", "0 (id dropping is off)")
            minibatch_row = ("mini-batches needed to fit the limits (no dropping)", minibatches)
        rows = [
            ("step", f"{s['step']} (of 0..{s['num_steps'] - 1})"),
            ("tables in stack", ", ".join(s["tables"])),
            ("max ids / partition (observed)", s["max_ids_per_partition"]),
            ("  configured", limit_text(s["configured_max_ids_per_partition"])),
            ("max unique ids / partition", s["max_unique_ids_per_partition"]),
            ("  configured", limit_text(s["configured_max_unique_ids_per_partition"])),
            ("mean ids per stream", s["mean_ids_per_stream"]),
            ("imbalance (max / mean stream)", imbalance_text(s["imbalance"])),
            dropped_row,
            minibatch_row,
            ("required buffer / SC (max)", s["max_required_buffer_size_per_sc"]),
            ("COO buffer / device (entries)", s["coo_buffer_entries_per_device"]),
            ("COO buffer / device (bytes)*", s["coo_buffer_bytes_per_device"]),
        ]
        out = _bokeh.summary_table_html(rows, title=f"stack {name}")
        sizing = ("round_up(max_ids, 8) x S x P entries" if s["configured_max_ids_per_partition"] is not None
                  else "no max_ids limit: sized by the largest required buffer")
        out += (f"<div style='font-size:11px;color:#666'>* CSR buffers preprocess allocates on one device "
                f"({sizing}; 12 bytes per entry plus row pointers). Mini-batches: the whole batch cut "
                f"into vocabulary buckets until every part is within the limits, one cut for every stack "
                f"as jax-tpu-embedding makes it, so all stacks have the same count (1: it already fits)."
                f"</div>")
        if name in result.minibatch_notes:
            out += _bokeh.message_html(result.minibatch_notes[name], "warning")
        naive = np.asarray(s["naive_ids_per_partition"])
        naive_unique = np.asarray(s["naive_unique_ids_per_partition"])
        naive_rows = [
            ("ids: max / mean per partition",
             f"{int(naive.max()):,} / {naive.mean():,.1f} (max on {int(naive.argmax())})" if naive.size else "-"),
            ("distinct ids: max / mean",
             f"{int(naive_unique.max()):,} / {naive_unique.mean():,.1f}" if naive_unique.size else "-"),
            ("imbalance (max / mean)", imbalance_text(s["naive_imbalance"])),
        ]
        if naive.size <= 8:   # few partitions: every count fits on a line
            naive_rows[1:1] = [("ids per partition", tuple(naive.tolist())),
                               ("distinct ids per partition", tuple(naive_unique.tolist()))]
        out += "<br>" + _bokeh.summary_table_html(
            naive_rows, title="naive whole-batch view (no device/SC split; what a GPU all-to-all sees)")
        counts = s["num_minibatches_per_stack"]
        dropping = s["allow_id_dropping"]
        out += "<br>" + _bokeh.columns_table_html(
            ("stack", "imbalance", "dropped ids (dropping on)" if dropping else "dropped ids",
             "mini-batches instead (no dropping)" if dropping else "mini-batches (no dropping)"),
            [(n, imbalance_text(s["imbalance_per_stack"][n]),
              s["dropped_ids_per_stack"][n] if dropping else "0 (dropping off)",
              "n/a" if counts is None or counts.get(n) is None else counts[n]) for n in s["stacks"]],
            title="all stacks")
        if result.error:
            out += _bokeh.message_html(
                result.error + "\n(one stack over its limits stops the whole step: the views show "
                "every stack's observed statistics, without limits)", "error")
        elif s["dropped_ids"]:
            out += _bokeh.message_html(f"{s['dropped_ids']:,} ids of stack {name} dropped by the limits",
                                       "warning")
        return out

    # -- controls <- traits ----------------------------------------------------------

    def _sync_controls(self) -> None:
        with self._quiet():
            if self.chip in [value for _, value in self._chip.options]:
                self._chip.value = self.chip
            if self.num_chips not in self._num_chips.options:
                self._num_chips.options = sorted({*_CHIP_COUNTS, self.num_chips})
            self._num_chips.value = self.num_chips
            if self._result is not None:
                names = [str(n) for n in self._result.stats["stack"].values]
                if list(self._stack.options) != names:
                    self._stack.options = names
                if self.stack in names:
                    self._stack.value = self.stack
                self._rotation.value = self._result.plan.rotation

    # -- export -----------------------------------------------------------------------

    def to_html(self, path, title: str | None = None):
        """Write the current views and stats panel to a standalone, offline HTML file.

        Parameters
        ----------
        path : str or pathlib.Path
        title : str, optional
            Page title; default names the stack and topology.

        Returns
        -------
        pathlib.Path
            The file written (BokehJS is inlined: no CDN needed).
        """
        default = f"scwork load skew: stack {self.stack} on {self.summary.get('topology', '')}"
        return self._export(path, title or default)


def _imbalance(counts: np.ndarray) -> float:
    """``max / mean`` of ``counts`` (NaN when there is nothing)."""
    counts = np.asarray(counts)
    mean = float(counts.mean()) if counts.size else 0.0
    return float(counts.max()) / mean if mean > 0 else float("nan")
