"""AllReduceStepper: watch two all-reduce algorithms run step by step on one network.

Pick a topology (ring, line, 2-D torus or mesh, grids that wrap in some dimensions,
3-D tori drawn as slices or in a pseudo-3-D projection; one or more cores per chip),
two algorithms and a message size. For each algorithm the stepper shows, side by side:

- the network: chips (boxes) holding cores (circles), links in gray, wraparound
  links as dashed stubs leaving and entering the grid;
- the transfers of the current step as arrows, hue = color (independent
  sub-collective), dark solid = reduce-scatter (combine), light dashed = all-gather
  (copy); the two directions of a full-duplex link are drawn side by side;
- every node's buffer state: circle fill = fraction of shards fully reduced, the bar
  under it = complete / partial sum / own data only / empty;
- the link utilisation of the current step (busy time / step time per directed link);
- a filter to show the arrows and links of one dimension and/or one color only
  (``show_dim``, ``show_color``): big 3-D tori are readable one dimension at a time;
- a shared cost timeline: every step as an interval of its alpha-beta time, the
  current step outlined and a red tick at the time reached so far;
- steps, total time, algbw and busbw ([nccl-tests] definitions).

Every number comes from the engine (:mod:`scwork.collectives`): the schedule
builders, :func:`~scwork.collectives.frames` (per-step transfers, buffer states,
link utilisation, step times) and :func:`~scwork.collectives.cost`. They run once
per (topology, algorithm, message size) and are cached; moving the step slider only
swaps precomputed column data.

Examples
--------
>>> from scwork.widgets import AllReduceStepper                       # doctest: +SKIP
>>> from scwork.collectives import Network                            # doctest: +SKIP
>>> AllReduceStepper(Network.ring(8), ("single_path", "rotated_pincer"))  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Any

import ipywidgets
import numpy as np
import traitlets
from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, HoverTool, Range1d
from bokeh.plotting import figure

from scwork.collectives import Network, cost, frames
from scwork.errors import ConfigError, ScworkError
from scwork.widgets import _bokeh
from scwork.widgets._display import figure_view
from scwork.widgets._panes import TextPane, hbox, vbox
from scwork.widgets._allreduce_steps import (
    _DIM_COLORS,
    _KIND_NDIM,
    _ON_CHIP_COLOR,
    _PHASE_BAR_COLORS,
    ALGORITHM_CHOICES,
    TOPOLOGY_KINDS,
    _color_legend_html,
    _dimension_name,
    _EngineRun,
    _format_bytes,
    _Geometry,
    _geometry,
    _kind_of,
    _kind_wraparound,
    _legend_html,
    _StepData,
    _time_unit,
    phase_summary_html,
    schedule_for,
)

__all__ = ["ALGORITHM_CHOICES", "MAX_NODES", "MESSAGE_SIZES", "NEAREST_ALGORITHMS", "TOPOLOGY_KINDS",
           "AllReduceStepper", "nearest_algorithm"]


_DEFAULT_SHAPES = {1: (8,), 2: (4, 4), 3: (4, 4, 4)}

#: Message sizes in the size dropdown (bytes per node vector): 1 KiB to 1 GiB.
MESSAGE_SIZES: tuple[int, ...] = tuple(2**p for p in range(10, 31, 2))

#: Largest network drawn (nodes). Bigger ones show an error instead of freezing the
#: notebook; the engine has no such limit.
MAX_NODES = 512

_SIDES = ("left", "right")
#: Width of one algorithm's panel (pixels): its link-utilisation chart with axes and tools.
PANEL_WIDTH = 680
# Engine results kept per (network, algorithm, size); a 16x16 torus frame set is ~80 MB.
_CACHE_SIZE = 6


class _Panel:
    """The views of one algorithm: network with arrows, utilisation bars, captions."""

    def __init__(self, side: str, x_range: Range1d, y_range: Range1d):
        self.side = side
        self.graph = _bokeh.NodeLinkGraph(
            title=f"{side} algorithm", x_range=x_range, y_range=y_range, max_width=600,
            max_height=470, node_value_names=("complete", "partial", "own data"),
            arrow_value_names=("transfer", "bytes", "chunks", "color_index", "phase"),
            value_formats={"complete": "{0%}", "partial": "{0%}", "own data": "{0%}",
                           "bytes": "{0,0}"})
        self.utilisation_figure = figure(
            title="", frame_width=600, frame_height=110, y_range=Range1d(0, 1.05),
            x_range=Range1d(-0.5, 0.5), tools="xpan,xwheel_zoom,reset,save",
            toolbar_location="right", x_axis_label="directed link (grouped by dimension, direction)",
            y_axis_label="link busy / step time")
        # The title counts the busy links of the step (long: a smaller font keeps it whole).
        self.utilisation_figure.title.text_font_size = "11px"
        self.utilisation = ColumnDataSource({k: [] for k in ("link", "utilisation", "color", "name",
                                                             "bytes")})
        self.utilisation_figure.vbar(x="link", top="utilisation", width=0.85, source=self.utilisation,
                                     fill_color="color", line_color=None)
        self.utilisation_figure.add_tools(HoverTool(tooltips=[
            ("link", "@name"), ("busy", "@utilisation{0%}"), ("bytes", "@bytes{0,0}")]))
        self.utilisation_figure.xgrid.visible = False
        # Texts are HTML panes, not bokeh Divs (see scwork.widgets._panes).
        self.caption = TextPane(width=PANEL_WIDTH)
        # The arrow colors of this panel's schedule (as many entries as it has colors).
        self.colors = TextPane(width=PANEL_WIDTH)
        self.status = TextPane(width=PANEL_WIDTH)
        # A fixed-width box: the two drawings (one bokeh view, for their shared ranges)
        # stay under their captions whatever the aspect of the network.
        self.graph_box = column(self.graph.figure, width=PANEL_WIDTH)


class AllReduceStepper(_bokeh.SyncedDisplay, ipywidgets.VBox):
    """Two all-reduce algorithms side by side on one network, step by step.

    Parameters
    ----------
    network : scwork.collectives.Network, optional
        The network to start with (default: a 4x4 torus). Its link bandwidths and
        latencies are kept when the topology controls change its shape.
    algorithms : pair of str
        Left and right algorithm: keys of :data:`ALGORITHM_CHOICES` (or of the
        engine's ``ALGORITHMS``).
    vector_bytes : int
        Bytes per node vector (the all-reduce message size).
    **kwargs
        Initial values of the other traits (``step``, ``view3d``...) and the usual
        ``ipywidgets.VBox`` arguments.

    Attributes
    ----------
    step : int
        0 = before the first transfer; ``s`` = the transfers of step ``s`` (1-based,
        as in [md-allreduce]: "step 1 A->H and B->C") and the buffers after it. Clamped to
        ``[0, num_steps]``.
    num_steps : int
        Steps of the longer of the two algorithms. Read-only.
    kind : str
        Topology kind, a key of :data:`TOPOLOGY_KINDS`; follows ``shape`` and
        ``wraparound``, and setting it sets them.
    shape : tuple of int
        Chips per dimension (1 to 3 dimensions).
    wraparound : tuple of bool
        Per dimension, whether it wraps.
    cores_per_chip : int
    view3d : {"slices", "isometric"}
        3-D drawing: z-slices in a grid, or a pseudo-3-D (oblique) projection.
    show_dim : "all", int or "on_chip"
        Draw only the arrows and links of this dimension (0 = x, 1 = y, 2 = z) or only
        the on-chip ones; ``"all"`` draws everything. A filter of the drawing: the
        engine is not called again. Reset to ``"all"`` when the topology loses it.
    show_color : "all" or int
        Draw only the arrows of this color (sub-collective) of the schedules. Reset to
        ``"all"`` when neither schedule has that color.
    algorithm_left, algorithm_right : str
    vector_bytes : int
    error : str
        Why the last requested combination could not be shown (engine message);
        empty when the views match the traits. Read-only. The views keep the last
        valid state meanwhile.
    notice : str
        What the explorer changed on its own at the last redraw: the algorithm it
        switched to when a new topology could not run the one shown (the nearest one
        it runs, :data:`NEAREST_ALGORITHMS`); empty otherwise. Read-only.
    network : Network
        The network drawn.
    schedules, frames : dict of str
        ``"left"``/``"right"``: the engine's schedule and ``frames`` dataset drawn.
    summary : dict of str to dict
        ``"left"``/``"right"``: ``algorithm``, ``network``, ``steps``, ``transfers``,
        ``total_time`` (s), ``algbw``, ``busbw`` (B/s), ``conflicts`` (from ``cost``).
    valid_algorithms : list of str
        Menu algorithms the engine accepts on the current network.
    sources, figures : dict
        The bokeh ColumnDataSources and figures (keys ``<view>_<side>``, ``timeline``...).
    controls : dict of str to ipywidgets.Widget

    Examples
    --------
    >>> from scwork.collectives import Network                          # doctest: +SKIP
    >>> s = AllReduceStepper(Network.ring(8), ("single_path", "pincer"))  # doctest: +SKIP
    >>> s.step = 1                                                      # doctest: +SKIP
    >>> sorted(s.sources["arrows_right"].data["transfer"])              # doctest: +SKIP
    ['A -> H', 'B -> C']
    """

    step = traitlets.Int(0)
    num_steps = traitlets.Int(0, read_only=True)
    kind = traitlets.Enum(tuple(TOPOLOGY_KINDS), default_value="2d_torus")
    shape = traitlets.Tuple(default_value=(4, 4))
    wraparound = traitlets.Tuple(default_value=(True, True))
    cores_per_chip = traitlets.Int(1)
    view3d = traitlets.Enum(("slices", "isometric"), default_value="slices")
    show_dim = traitlets.Any("all")
    show_color = traitlets.Any("all")
    algorithm_left = traitlets.Unicode("ring_all_reduce")
    algorithm_right = traitlets.Unicode("multi_color_all_reduce")
    vector_bytes = traitlets.Int(2**24)
    error = traitlets.Unicode("", read_only=True)
    notice = traitlets.Unicode("", read_only=True)

    _TOPOLOGY_TRAITS = ("kind", "shape", "wraparound", "cores_per_chip")
    _ENGINE_TRAITS = ("algorithm_left", "algorithm_right", "vector_bytes")

    def __init__(self, network: Network | None = None,
                 algorithms: tuple[str, str] = ("ring_all_reduce", "multi_color_all_reduce"),
                 *, vector_bytes: int = 2**24, **kwargs: Any):
        state = {name: kwargs.pop(name) for name in
                 ("step", "kind", "shape", "wraparound", "cores_per_chip", "view3d", "show_dim",
                  "show_color") if name in kwargs}
        super().__init__(**kwargs)
        self._given_network = network
        self._link_params = self._link_parameters(network)
        self._engine_cache: OrderedDict = OrderedDict()
        self._valid_cache: OrderedDict = OrderedDict()
        self._batch_depth = 0
        self._refresh_pending = False
        self._topology_changed = False
        self._syncing = False
        self.network: Network | None = None
        self.schedules: dict[str, Any] = {}
        self.frames: dict[str, Any] = {}
        self.summary: dict[str, dict] = {}
        self.valid_algorithms: list[str] = []
        self._steps: dict[str, _StepData] = {}
        self._geometry: _Geometry | None = None
        self._drawn_key = None
        self._drawn_runs: dict[str, _EngineRun] = {}

        self._build_views()
        self._build_controls()
        self.observe(self._on_topology, names=list(self._TOPOLOGY_TRAITS))
        self.observe(self._on_engine_trait, names=list(self._ENGINE_TRAITS))
        self.observe(self._on_view3d, names=["view3d"])
        self.observe(self._on_step, names=["step"])
        self.observe(self._on_filter, names=["show_dim", "show_color"])
        # Observers see the initial values (setting `kind` sets the shape...), but the
        # engine runs once, at the end of the batch.
        with self._batch():
            if network is not None:
                self.shape = tuple(network.shape)
                self.wraparound = tuple(network.wraparound)
                self.cores_per_chip = network.cores_per_chip
            self.algorithm_left, self.algorithm_right = algorithms
            self.vector_bytes = vector_bytes
            for name, value in state.items():
                if name not in ("step", "show_dim", "show_color"):
                    setattr(self, name, value)
            self._request_refresh()
        # The filters are checked against the network and schedules drawn.
        for name in ("show_dim", "show_color", "step"):
            if name in state:
                setattr(self, name, state[name])

    # -- construction ---------------------------------------------------------------

    @staticmethod
    def _link_parameters(network: Network | None) -> dict:
        """Keyword arguments of Network.grid that rebuild ``network``'s links."""
        if network is None:
            return {}
        ici = network.link_classes["ici"]
        params = {"chip": network.chip, "link_bandwidth": ici.bandwidth, "link_latency": ici.latency,
                  "bidirectional": network.bidirectional}
        on_chip = network.link_classes.get("on_chip")
        if on_chip is not None:
            params.update(on_chip_bandwidth=on_chip.bandwidth, on_chip_latency=on_chip.latency)
        return params

    def _build_views(self) -> None:
        # Both network drawings share their ranges: zooming one zooms the other.
        x_range, y_range = Range1d(-1, 1), Range1d(-1, 1)
        self._panels = {side: _Panel(side, x_range, y_range) for side in _SIDES}
        self._timeline = _bokeh.Gantt(
            title="Cost timeline: every step as its alpha-beta time (outlined: current step)",
            value_names=("step", "time", "cumulative", "phase"), width=1180)
        self._header = TextPane(width=2 * PANEL_WIDTH)
        self._legend = TextPane(_legend_html(None), width=2 * PANEL_WIDTH)
        self.sources: dict[str, Any] = {}
        self.figures: dict[str, Any] = {}
        for side, panel in self._panels.items():
            graph = panel.graph
            self.sources.update({
                f"nodes_{side}": graph.nodes, f"bars_{side}": graph.bars, f"links_{side}": graph.links,
                f"chips_{side}": graph.groups, f"arrows_{side}": graph.arrows,
                f"utilisation_{side}": panel.utilisation,
            })
            self.figures.update({f"topology_{side}": graph.figure,
                                 f"utilisation_{side}": panel.utilisation_figure})
        self.sources.update({"timeline": self._timeline.bars, "timeline_marker": self._timeline.marker,
                             "timeline_highlight": self._timeline.highlight})
        self.figures["timeline"] = self._timeline.figure

    def _build_controls(self) -> None:
        W = ipywidgets.Layout
        short = {"description_width": "initial"}
        self._kind_box = ipywidgets.Dropdown(options=[(v, k) for k, v in TOPOLOGY_KINDS.items()],
                                             description="topology", layout=W(width="230px"), style=short)
        self._shape_boxes = [ipywidgets.BoundedIntText(value=4, min=1, max=64, description=d,
                                                       layout=W(width="95px"), style=short)
                             for d in ("x", "y", "z")]
        self._wrap_boxes = [ipywidgets.Checkbox(value=True, description=f"wrap {d}", indent=False,
                                                layout=W(width="75px")) for d in ("x", "y", "z")]
        self._cores_box = ipywidgets.BoundedIntText(value=1, min=1, max=4, description="cores/chip",
                                                    layout=W(width="130px"), style=short)
        self._view3d_box = ipywidgets.ToggleButtons(options=[("slices", "slices"), ("3-D", "isometric")],
                                                    style={"button_width": "60px"})
        self._dim_box = ipywidgets.Dropdown(options=[("all", "all")], value="all", description="show",
                                            layout=W(width="190px"), style=short)
        self._color_box = ipywidgets.Dropdown(options=[("all", "all")], value="all", description="color",
                                              layout=W(width="150px"), style=short)
        self._algorithm_boxes = {
            side: ipywidgets.Dropdown(description=side, layout=W(width="360px"), style=short)
            for side in _SIDES}
        self._size_box = ipywidgets.Dropdown(description="message", layout=W(width="170px"), style=short)
        self._slider = ipywidgets.IntSlider(value=0, min=0, max=0, description="step",
                                            layout=W(width="560px"), continuous_update=True)
        self._play = ipywidgets.Play(value=0, min=0, max=0, interval=700, description="play")
        # Python-side links: the kernel redraws every step, so both go through `step`.
        ipywidgets.link((self, "step"), (self._slider, "value"))
        ipywidgets.link((self, "step"), (self._play, "value"))
        ipywidgets.link((self, "view3d"), (self._view3d_box, "value"))
        for box in (self._kind_box, *self._shape_boxes, *self._wrap_boxes, self._cores_box,
                    *self._algorithm_boxes.values(), self._size_box, self._dim_box, self._color_box):
            box.observe(self._on_control, names="value")
        self._error_area = ipywidgets.HTML()
        left, right = self._panels["left"], self._panels["right"]
        # One bokeh view per figure group: a size change re-lays out only its own.
        self._graphs_view = figure_view(row(left.graph_box, right.graph_box))
        self._views = vbox([
            self._header,
            hbox([vbox([panel.caption, panel.colors], width=f"{PANEL_WIDTH}px") for panel in (left, right)]),
            self._graphs_view,
            hbox([vbox([panel.status, figure_view(panel.utilisation_figure)], width=f"{PANEL_WIDTH}px")
                  for panel in (left, right)]),
            figure_view(self._timeline.figure), self._legend])
        self.controls = {
            "kind": self._kind_box, "shape": self._shape_boxes, "wraparound": self._wrap_boxes,
            "cores_per_chip": self._cores_box, "view3d": self._view3d_box,
            "algorithm_left": self._algorithm_boxes["left"],
            "algorithm_right": self._algorithm_boxes["right"],
            "vector_bytes": self._size_box, "step": self._slider, "play": self._play,
            "show_dim": self._dim_box, "show_color": self._color_box,
        }
        self.children = [
            ipywidgets.HBox([self._kind_box, *self._shape_boxes, *self._wrap_boxes, self._cores_box,
                             self._view3d_box]),
            ipywidgets.HBox([*self._algorithm_boxes.values(), self._size_box]),
            ipywidgets.HBox([self._play, self._slider, self._dim_box, self._color_box]),
            self._error_area, self._views,
        ]

    # -- trait and control events ------------------------------------------------------

    @traitlets.validate("step")
    def _valid_step(self, proposal):
        return int(min(max(proposal["value"], 0), self.num_steps))

    @traitlets.validate("shape")
    def _valid_shape(self, proposal):
        value = proposal["value"]
        return tuple(value) if isinstance(value, (list, tuple)) else (value,)

    @traitlets.validate("wraparound")
    def _valid_wraparound(self, proposal):
        value = proposal["value"]
        return tuple(bool(v) for v in (value if isinstance(value, (list, tuple)) else (value,)))

    @traitlets.validate("show_dim")
    def _valid_show_dim(self, proposal):
        value = proposal["value"]
        if isinstance(value, np.integer):
            value = int(value)
        if self.network is None:  # nothing drawn yet: checked when the network is drawn
            choices = [0, 1, 2, "on_chip"]
            name = "a network"
        else:
            choices, name = self._dims_drawn(), self.network.name
        if value == "all" or (value in choices and not isinstance(value, bool)):
            return value
        raise ConfigError(f"show_dim={value!r}: {name} has the dimensions {choices}; pass one of "
                          f"them or 'all'")

    @traitlets.validate("show_color")
    def _valid_show_color(self, proposal):
        value = proposal["value"]
        if isinstance(value, np.integer):
            value = int(value)
        if value == "all":
            return value
        valid_type = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        # Only the colors of the drawn schedules can be shown (once there are some).
        if valid_type and (not self._steps or value in self._colors_drawn()):
            return value
        colors = self._colors_drawn() if self._steps else "0, 1, ..."
        raise ConfigError(f"show_color={value!r}: pass a color index of the drawn schedules "
                          f"({colors}, listed above each drawing) or 'all'")

    def _on_filter(self, change) -> None:
        # Only the drawing changes: precomputed arrows are masked, the engine is not called.
        if self._syncing or not self._steps:
            return
        self._draw_links()
        self._draw_step()
        self._sync_controls()

    def _on_topology(self, change) -> None:
        if self._syncing:
            return
        with self._batch():
            if change["name"] == "kind":
                ndim = _KIND_NDIM[change["new"]]
                if len(self.shape) != ndim:
                    self.shape = _DEFAULT_SHAPES[ndim]
                self.wraparound = _kind_wraparound(change["new"])
            elif change["name"] == "shape" and len(self.wraparound) != len(self.shape):
                self.wraparound = (True,) * len(self.shape)
            # The kind always names the current shape and wraparound.
            if len(self.shape) == len(self.wraparound) and 1 <= len(self.shape) <= 3:
                with self._quiet():
                    self.kind = _kind_of(self.shape, self.wraparound)
            self._topology_changed = True
            self._request_refresh()

    def _on_engine_trait(self, change) -> None:
        if not self._syncing:
            self._request_refresh()

    def _on_view3d(self, change) -> None:
        if self.network is not None and self.network.ndim == 3:
            self._draw_network()
            self._draw_links()
            self._draw_step()

    def _on_step(self, change) -> None:
        self._draw_step()

    def _on_control(self, change) -> None:
        # Controls echo the traits after every refresh; only user edits come through.
        if self._syncing:
            return
        owner = change["owner"]
        if owner is self._kind_box:
            self.kind = owner.value
        elif owner in self._shape_boxes:
            self.shape = tuple(box.value for box in self._shape_boxes[:len(self.shape)])
        elif owner in self._wrap_boxes:
            self.wraparound = tuple(box.value for box in self._wrap_boxes[:len(self.shape)])
        elif owner is self._cores_box:
            self.cores_per_chip = owner.value
        elif owner is self._size_box:
            self.vector_bytes = owner.value
        elif owner is self._dim_box:
            self.show_dim = owner.value
        elif owner is self._color_box:
            self.show_color = owner.value
        else:
            for side, box in self._algorithm_boxes.items():
                if owner is box:
                    setattr(self, f"algorithm_{side}", owner.value)

    @contextlib.contextmanager
    def _batch(self):
        """Change several traits with one refresh at the end."""
        self._batch_depth += 1
        try:
            yield
        finally:
            self._batch_depth -= 1
            if self._batch_depth == 0 and self._refresh_pending:
                self._refresh_pending = False
                self._refresh()

    def _request_refresh(self) -> None:
        if self._batch_depth:
            self._refresh_pending = True
        else:
            self._refresh()

    # -- engine ---------------------------------------------------------------------------

    def _network_key(self) -> tuple:
        return (tuple(self.shape), tuple(self.wraparound), int(self.cores_per_chip))

    def _make_network(self) -> Network:
        given = self._given_network
        if given is not None and self._network_key() == (tuple(given.shape), tuple(given.wraparound),
                                                          given.cores_per_chip):
            return given
        network = Network.grid(tuple(self.shape), tuple(self.wraparound),
                               cores_per_chip=self.cores_per_chip, **self._link_params)
        if network.num_nodes > MAX_NODES:
            raise _TooLarge(
                f"{network.name} has {network.num_nodes:,} nodes; this explorer draws at most MAX_NODES="
                f"{MAX_NODES} (the engine itself has no such limit: below, its per-phase summary; for more use "
                "scwork.collectives.cost(schedule, link_summary=True), phase_summary(schedule) or "
                "`scwork allreduce --topology ...`)", network)
        return network

    def _valid_for(self, network: Network, key: tuple) -> list[str]:
        """Menu algorithms whose schedule the engine builds on ``network`` (cached)."""
        if key not in self._valid_cache:
            valid = []
            for name in ALGORITHM_CHOICES:
                try:
                    schedule_for(name, network, 2**20)
                except (ScworkError, ValueError):
                    continue
                valid.append(name)
            self._valid_cache[key] = valid
            while len(self._valid_cache) > 4 * _CACHE_SIZE:
                self._valid_cache.popitem(last=False)
        return self._valid_cache[key]

    def _engine_run(self, network: Network, key: tuple, name: str) -> _EngineRun:
        """Schedule, frames and cost of one algorithm: computed once, then cached."""
        cache_key = (key, name, int(self.vector_bytes))
        if cache_key in self._engine_cache:
            self._engine_cache.move_to_end(cache_key)
            return self._engine_cache[cache_key]
        schedule = schedule_for(name, network, int(self.vector_bytes))
        run = _EngineRun(schedule=schedule, frames=frames(schedule), cost=cost(schedule),
                         messages=schedule.messages(), conflicts=len(schedule.conflicts()))
        self._engine_cache[cache_key] = run
        while len(self._engine_cache) > _CACHE_SIZE:
            self._engine_cache.popitem(last=False)
        return run

    def _refresh(self) -> None:
        """Recompute what changed; on an engine error keep the last views and say why."""
        try:
            network = self._make_network()
        except _TooLarge as err:
            self._fail(str(err))
            # Too many links to draw: what each algorithm does per phase and dimension.
            self._error_area.value += "".join(
                phase_summary_html(f"{side}: {getattr(self, f'algorithm_{side}')}", getattr(
                    self, f"algorithm_{side}"), err.network, int(self.vector_bytes)) for side in _SIDES)
            return
        except (ScworkError, ValueError) as err:
            self._fail(str(err))
            return
        key = self._network_key()
        valid = self._valid_for(network, key)
        topology_changed, self._topology_changed = self._topology_changed, False
        switched = []
        if topology_changed:
            # A new topology that cannot run an algorithm shown: switch that side to the
            # nearest one it runs (and say so) instead of leaving the views stale.
            for side in _SIDES:
                name = getattr(self, f"algorithm_{side}")
                if name in valid:
                    continue
                replacement = nearest_algorithm(name, valid)
                if replacement is not None:
                    with self._quiet():
                        setattr(self, f"algorithm_{side}", replacement)
                    switched.append(f"{side}: {ALGORITHM_CHOICES.get(name, name)} does not run on "
                                    f"{network.name}; switched to {ALGORITHM_CHOICES[replacement]}.")
        runs, errors = {}, []
        for side in _SIDES:
            name = getattr(self, f"algorithm_{side}")
            try:
                runs[side] = self._engine_run(network, key, name)
            except (ScworkError, ValueError) as err:  # ConfigError / TopologyError / ScheduleError
                errors.append(f"{side} algorithm {name!r} on {network.name}: {err}")
        self.valid_algorithms = list(valid)
        if errors:
            self._fail("\n".join(errors) + "\nPick an algorithm from the menu (it lists the ones "
                       "valid on this topology) or change the topology; the views show the last "
                       "valid combination.")
            return
        self.set_trait("error", "")
        self.set_trait("notice", "\n".join(switched))
        self._error_area.value = _bokeh.message_html(self.notice, "warning")
        self._commit(network, key, runs)

    def _fail(self, message: str) -> None:
        self.set_trait("error", message)
        self.set_trait("notice", "")
        self._error_area.value = _bokeh.message_html(message, "error")
        self._sync_controls()

    # -- drawing ----------------------------------------------------------------------------

    def _commit(self, network: Network, key: tuple, runs: dict) -> None:
        network_changed = self._drawn_key != key or self.network is not network
        self.network = network
        self._drawn_key = key
        # The drawn runs are kept here too: the cache may drop them while later
        # requests fail, and the views must still redraw (e.g. another 3-D view).
        self._drawn_runs = dict(runs)
        self.schedules = {side: run.schedule for side, run in runs.items()}
        self.frames = {side: run.frames for side, run in runs.items()}
        self.summary = {side: self._summary(getattr(self, f"algorithm_{side}"), run, network)
                        for side, run in runs.items()}
        if network_changed or self._geometry is None:
            self._draw_network()
        else:
            self._prepare_steps()
        steps = max(run.schedule.num_steps for run in runs.values())
        self.set_trait("num_steps", steps)
        self._reset_filters()
        self._draw_links()
        self._draw_static()
        # Clamp the step before shrinking the slider (which would clamp it on its own).
        self.step = min(self.step, steps)
        self._slider.max = self._play.max = steps
        self._draw_step()
        self._sync_controls()

    def _colors_drawn(self) -> list[int]:
        """Color indices of either drawn schedule (the color filter's choices)."""
        return sorted(set().union(*(data.color_phases for data in self._steps.values())))

    def _dims_drawn(self) -> list:
        """Dimension filter choices of the drawn network."""
        network = self.network
        return list(range(network.ndim)) + (["on_chip"] if network.cores_per_chip > 1 else [])

    def _reset_filters(self) -> None:
        """Show everything again when the new network or schedules lack the filtered dim/color."""
        with self._quiet():
            if self.show_dim != "all" and self.show_dim not in self._dims_drawn():
                self.show_dim = "all"
            if self.show_color != "all" and self.show_color not in self._colors_drawn():
                self.show_color = "all"

    def _draw_links(self) -> None:
        """The network's links, only those of the shown dimension when ``show_dim`` filters."""
        base = self._geometry.base_links
        if self.show_dim != "all":
            keep = base["dim"] == (-1 if self.show_dim == "on_chip" else self.show_dim)
            base = {name: np.asarray(values)[keep] for name, values in base.items()}
        for panel in self._panels.values():
            panel.graph.set_links(base)

    def _filter_text(self, shown: dict | None, step_arrows: dict | None) -> str:
        """What the filters hide, for the drawing's title (empty when showing everything)."""
        parts = []
        if self.show_dim != "all":
            parts.append(_dimension_name(-1 if self.show_dim == "on_chip" else self.show_dim))
        if self.show_color != "all":
            parts.append(f"color {self.show_color}")
        if not parts:
            return ""
        counts = ""
        if shown is not None:
            # One message per (source, destination) of a step; a wraparound one is two arrow pieces.
            def messages(arrows):
                return len(set(zip(arrows["source"].tolist(), arrows["destination"].tolist())))

            counts = f": {messages(shown)} of {messages(step_arrows)} messages"
        return f" [showing {', '.join(parts)} only{counts}]"

    def _arrow_filter(self, arrows: dict) -> dict:
        """The arrows of the shown dimension and color (all of them when not filtering)."""
        keep = np.ones(len(arrows["x0"]), dtype=bool)
        if self.show_dim != "all":
            keep &= arrows["dim"] == (-1 if self.show_dim == "on_chip" else self.show_dim)
        if self.show_color != "all":
            keep &= arrows["color_index"] == self.show_color
        return arrows if keep.all() else {name: values[keep] for name, values in arrows.items()}

    def _summary(self, name: str, run: _EngineRun, network: Network) -> dict:
        c = run.cost
        return {
            "algorithm": name, "schedule": run.schedule.name, "network": network.name,
            "steps": run.schedule.num_steps,
            "transfers": run.schedule.num_transfers, "vector_bytes": run.schedule.nbytes,
            "total_time": float(c.total_time), "algbw": float(c.algbw), "busbw": float(c.busbw),
            "conflicts": run.conflicts,
        }

    def _draw_network(self) -> None:
        network = self.network
        geom = _geometry(network, self.view3d)
        self._geometry = geom
        nodes = {"x": geom.node_x, "y": geom.node_y, "radius": np.full(network.num_nodes, geom.radius),
                 "label": geom.labels,
                 **{name: np.zeros(network.num_nodes) for name in ("complete", "partial", "own data")}}
        # Keep the buffer bars under the nodes (and the slice names) in view.
        extent_x, extent_y = [geom.node_x], [geom.node_y - geom.radius - 0.25]
        if geom.notes is not None:
            extent_x.append(np.asarray(geom.notes["x"]) + 1.2)
            extent_y.append(np.asarray(geom.notes["y"]) + 0.3)
        for panel in self._panels.values():
            panel.graph.set_graph(nodes, geom.base_links, geom.groups, notes=geom.notes,
                                  show_labels=geom.show_labels,
                                  extent=(np.concatenate(extent_x), np.concatenate(extent_y)),
                                  pad=0.45)
        self._legend.text = _legend_html(network)
        self._prepare_steps()

    def _prepare_steps(self) -> None:
        """Per-step drawing data of both algorithms (engine results already cached)."""
        runs = self._drawn_runs
        self._steps = {side: _StepData(run, self.network, self._geometry,
                                        f"{side} ({getattr(self, f'algorithm_{side}')})")
                       for side, run in runs.items()}
        network = self.network
        kind = network.link_kind
        link_colors = np.where(kind == "on_chip", _ON_CHIP_COLOR,
                               np.asarray(_DIM_COLORS, dtype=object)[np.clip(network.link_dim, 0, 2)])
        self._link_static = {"link": np.arange(network.num_links), "color": link_colors,
                             "name": np.array([network.link_label(i) + ("" if k == "ici" else " (on chip)")
                                               for i, k in enumerate(kind)], dtype=object)}

    def _draw_static(self) -> None:
        """Captions, summaries and the timeline bars: everything that does not move with ``step``."""
        runs = self._drawn_runs
        network = self.network
        totals = {side: self.summary[side]["total_time"] for side in runs}
        unit, scale = _time_unit(max(totals.values()))
        for side, panel in self._panels.items():
            run, info = runs[side], self.summary[side]
            label = ALGORITHM_CHOICES.get(info["algorithm"], run.schedule.description.split(":")[0])
            rows = [("steps", info["steps"]), ("transfers", info["transfers"]),
                    ("total time", f"{info['total_time'] * scale:.4g} {unit}"),
                    ("algbw", f"{info['algbw'] / 1e9:.3g} GB/s"),
                    ("busbw", f"{info['busbw'] / 1e9:.3g} GB/s"),
                    ("link conflicts", info["conflicts"])]
            description = run.schedule.description.split("\n")[0]
            panel.caption.text = (f"<div style='font-size:14px;font-weight:700'>{side}: "
                                  f"{_escape(info['algorithm'])} <span style='font-weight:400'>"
                                  f"({_escape(label)})</span></div>" + _bokeh.summary_table_html(rows)
                                  + f"<div style='font-size:11px;color:#555;max-width:620px'>"
                                  f"{_escape(description)}</div>")
            panel.colors.text = _color_legend_html(self._steps[side].color_phases, f"<b>{side}</b>: ")
            panel.utilisation_figure.x_range.start = -0.5
            panel.utilisation_figure.x_range.end = network.num_links - 0.5
        left, right = (self.summary[s] for s in _SIDES)
        faster, slower = (right, left) if right["total_time"] <= left["total_time"] else (left, right)
        ratio = slower["total_time"] / faster["total_time"] if faster["total_time"] > 0 else float("inf")
        self._header.text = (
            f"<div style='font-size:14px'><b>{_escape(network.name)}</b>, {network.num_nodes} nodes, "
            f"{_format_bytes(int(self.vector_bytes))} per node. <b>{faster['algorithm']}</b> takes "
            f"{faster['total_time'] * scale:.4g} {unit} in {faster['steps']} steps: "
            f"{ratio:.3g}x {'faster than' if ratio != 1 else 'the time of'} <b>{slower['algorithm']}</b> "
            f"({slower['total_time'] * scale:.4g} {unit}, {slower['steps']} steps).</div>")
        lanes = [f"{side}: {self.summary[side]['algorithm']}" for side in _SIDES]
        self._timeline.set_lanes(lanes, x_end=max(totals.values()) * scale)
        bars: dict[str, list] = {k: [] for k in ("lane", "left", "right", "color", "step", "time",
                                                 "cumulative", "phase")}
        for lane, side in enumerate(_SIDES):
            data = self._steps[side]
            S = data.num_steps
            bars["lane"].append(np.full(S, lane))
            bars["left"].append((data.cumulative - data.step_time) * scale)
            bars["right"].append(data.cumulative * scale)
            bars["color"].append(np.array([_PHASE_BAR_COLORS[p] if p in _PHASE_BAR_COLORS
                                           else _PHASE_BAR_COLORS["mixed"] for p in data.step_phase],
                                          dtype=object))
            bars["step"].append(np.arange(1, S + 1))
            bars["time"].append(np.array([f"{t * scale:.4g} {unit}" for t in data.step_time], dtype=object))
            bars["cumulative"].append(np.array([f"{t * scale:.4g} {unit}" for t in data.cumulative],
                                               dtype=object))
            bars["phase"].append(np.asarray(data.step_phase, dtype=object))
        self._timeline.set_bars({k: np.concatenate(v) for k, v in bars.items()})
        self._timeline.figure.xaxis.axis_label = f"time ({unit})"
        self._timeline.set_lane_labels(
            [0, 1], [totals[s] * scale for s in _SIDES],
            [f"{totals[s] * scale:.4g} {unit}" for s in _SIDES])
        self._time_scale = (unit, scale)

    def _draw_step(self) -> None:
        """Show step ``self.step``: only slices of the precomputed arrays change."""
        if not self._steps:
            return
        k = int(self.step)
        _, scale = self._time_scale
        marker_x, hl_lanes, hl_left, hl_right = [], [], [], []
        for lane, side in enumerate(_SIDES):
            data, panel = self._steps[side], self._panels[side]
            S = data.num_steps
            f = min(k, S)
            node_fill, frac, bar_x, bar_width = data.frame(f)
            panel.graph.update_nodes(fill_color=node_fill, complete=frac[:, 0],
                                     partial=frac[:, 1], **{"own data": frac[:, 2]})
            panel.graph.set_bars({"x": bar_x, "width": bar_width, **data.bar_static})
            if 1 <= k <= S:
                step_arrows = data.arrows(k)
                shown = self._arrow_filter(step_arrows)
                panel.graph.set_arrows(shown)
                util, link_bytes = data.utilisation[k - 1], data.link_bytes[k - 1]
                hl_lanes.append(lane)
                hl_left.append((data.cumulative[k - 1] - data.step_time[k - 1]) * scale)
                hl_right.append(data.cumulative[k - 1] * scale)
            else:
                panel.graph.set_arrows(data.no_arrows())
                shown = step_arrows = None
                util = link_bytes = np.zeros(self.network.num_links)
            panel.utilisation.data = {**self._link_static, "utilisation": util, "bytes": link_bytes}
            marker_x.append(data.cumulative[f - 1] * scale if f >= 1 else 0.0)
            if k > S:
                panel.status.text = (f"<b>{side} ({self.summary[side]['algorithm']})</b> finished after "
                                     f"step {S}: every node holds the result")
            else:
                panel.status.text = data.status_line(k)
            panel.utilisation_figure.title.text = data.utilisation_title(k) if k <= S else \
                f"finished after step {S}: no transfers"
            panel.graph.figure.title.text = (
                f"{self.summary[side]['algorithm']}: " + ("start" if k == 0 else
                                                          f"step {min(k, S)} of {S}" + (" (done)" if k >= S else ""))
                + self._filter_text(shown, step_arrows))
        self._timeline.set_marker([0, 1], marker_x, highlight_left=hl_left or None,
                                  highlight_right=hl_right, highlight_lanes=hl_lanes)

    # -- controls <- traits ----------------------------------------------------------------

    def _sync_controls(self) -> None:
        with self._quiet():
            self._kind_box.value = self.kind
            ndim = len(self.shape)
            for i, (box, wrap) in enumerate(zip(self._shape_boxes, self._wrap_boxes)):
                visible = i < ndim
                box.layout.display = wrap.layout.display = None if visible else "none"
                if visible:
                    if isinstance(self.shape[i], (int, np.integer)) and self.shape[i] >= 1:
                        box.value = min(int(self.shape[i]), box.max)
                    if i < len(self.wraparound):
                        wrap.value = bool(self.wraparound[i])
            self._cores_box.value = min(max(int(self.cores_per_chip), 1), self._cores_box.max)
            self._view3d_box.layout.display = None if ndim == 3 else "none"
            if self.network is not None and self._steps:
                self._dim_box.options = [("all", "all")] + [
                    (_dimension_name(-1 if d == "on_chip" else d), d) for d in self._dims_drawn()]
                self._dim_box.value = self.show_dim
                self._color_box.options = [("all", "all")] + [(f"color {c}", c) for c in self._colors_drawn()]
                self._color_box.value = self.show_color
            for side, box in self._algorithm_boxes.items():
                current = getattr(self, f"algorithm_{side}")
                options = [(ALGORITHM_CHOICES[name], name) for name in self.valid_algorithms]
                if current not in self.valid_algorithms:
                    # Keep the requested value visible (and say it does not apply here).
                    options.append((f"{ALGORITHM_CHOICES.get(current, current)} (not valid here)", current))
                box.options = options
                box.value = current
            sizes = list(MESSAGE_SIZES)
            if int(self.vector_bytes) not in sizes:
                sizes = sorted(sizes + [int(self.vector_bytes)])
            self._size_box.options = [(_format_bytes(n), n) for n in sizes]
            self._size_box.value = int(self.vector_bytes)

    # -- export -------------------------------------------------------------------------------

    def to_html(self, path, title: str | None = None):
        """Write the current step's views to a standalone, offline HTML file.

        Parameters
        ----------
        path : str or pathlib.Path
        title : str, optional
            Page title; default names the network, algorithms and step.

        Returns
        -------
        pathlib.Path
            The file written (BokehJS is inlined: no CDN needed).
        """
        default = (f"scwork all-reduce: {self.algorithm_left} vs {self.algorithm_right} on "
                   f"{self.network.name if self.network is not None else '?'}, step {self.step}")
        return self._export(path, title or default)


#: For an algorithm a new topology cannot run, the algorithms to switch to, nearest
#: first: the same idea with fewer requirements (a pincer needs a ring to split the
#: vector over, a single path runs on a line; multi-color needs a wrapped dimension,
#: dimension by dimension runs on any grid). The first of them the topology runs is
#: taken; when none is, the first valid one of the menu.
NEAREST_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "pincer": ("single_path",),
    "rotated_pincer": ("pincer", "single_path"),
    "improved_rotated_pincer": ("rotated_pincer", "pincer", "single_path"),
    "ring": ("single_path",),
    "ring_all_reduce": ("multi_dim_all_reduce", "single_path"),
    "multi_color_all_reduce": ("multi_dim_all_reduce", "single_path"),
    "mesh_loop_all_reduce": ("multi_color_all_reduce", "multi_dim_all_reduce", "single_path"),
    "multi_dim_all_reduce": ("single_path",),
    "single_path": ("multi_dim_all_reduce",),
    "reduce_scatter": ("all_gather", "multi_dim_all_reduce"),
    "all_gather": ("reduce_scatter", "multi_dim_all_reduce"),
}


def nearest_algorithm(name: str, valid: list[str]) -> str | None:
    """The algorithm of ``valid`` to switch to from ``name`` (see :data:`NEAREST_ALGORITHMS`); None if none is valid."""
    for candidate in NEAREST_ALGORITHMS.get(name, ()):
        if candidate in valid:
            return candidate
    return valid[0] if valid else None


class _TooLarge(ConfigError):
    """The network is larger than this explorer draws (the engine still summarises it)."""

    def __init__(self, message: str, network: Network):
        super().__init__(message)
        self.network = network


def _escape(text: str) -> str:
    import html

    return html.escape(str(text))
