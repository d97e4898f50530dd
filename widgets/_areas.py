"""Stepped stacked areas against a capacity: what is live at each step.

:class:`StackedAreaChart`, byte axes, and selections linked between two sources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from bokeh.core.properties import field as _field
from bokeh.models import (
    BasicTicker,
    ColumnDataSource,
    CustomJSTickFormatter,
    FixedTicker,
    HoverTool,
    Range1d,
)
from bokeh.models import CustomJS as _CustomJS
from bokeh.models import Legend as _Legend
from bokeh.models import LegendItem as _LegendItem
from bokeh.models import NumeralTickFormatter as _NumeralTickFormatter
from bokeh.plotting import figure

from scwork.widgets._cells import _as_column
from scwork.widgets._colors import CATEGORY_PALETTE, LIMIT_COLOR

__all__ = ["bytes_tick_formatter", "bytes_ticker", "link_selection", "StackedAreaChart"]


def bytes_tick_formatter() -> CustomJSTickFormatter:
    """Axis labels in binary byte units: ``0``, ``512 KiB``, ``80 GiB``."""
    return CustomJSTickFormatter(code="""
        const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
        if (tick === 0) { return "0"; }
        let v = Math.abs(tick), i = 0;
        while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
        let text = v >= 100 ? v.toFixed(0) : v.toPrecision(3);
        if (text.includes(".")) { text = text.replace(/\\.?0+$/, ""); }
        return (tick < 0 ? "-" : "") + text + " " + units[i];
    """)


def bytes_ticker(*, desired_num_ticks: int = 6):
    """Axis ticks at round binary sizes (``128 KiB``, ``16 GiB``...) for :func:`bytes_tick_formatter`."""
    from bokeh.models import AdaptiveTicker

    return AdaptiveTicker(base=1024, mantissas=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
                          min_interval=1, desired_num_ticks=desired_num_ticks)


def link_selection(source: ColumnDataSource, target: ColumnDataSource, *, source_key: str,
                   target_key: str) -> None:
    """Select, in the browser, the rows of ``target`` whose key matches a selected row of ``source``.

    E.g. selecting a buffer in a table selects every segment of that buffer in a
    chart. Works in notebooks and in exported HTML files (no Python round trip).

    Parameters
    ----------
    source, target : ColumnDataSource
    source_key, target_key : str
        Columns holding the shared key (e.g. an item id) in each source.
    """
    callback = _CustomJS(args={"source": source, "target": target, "source_key": source_key,
                               "target_key": target_key}, code="""
        const keys = new Set(source.selected.indices.map((i) => source.data[source_key][i]));
        const column = target.data[target_key];
        const picked = [];
        for (let j = 0; j < column.length; j++) {
            if (keys.has(column[j])) { picked.push(j); }
        }
        target.selected.indices = picked;
    """)
    source.selected.js_on_change("indices", callback)


class StackedAreaChart:
    """Items stacked over consecutive steps (a stepped stacked area), against reference lines.

    Step ``i`` spans ``x`` in ``[left[i], right[i])``. In every step the items with a
    non-zero value are stacked in item order, each drawn as one ``quad`` colored by
    its group: items of one group placed next to each other read as that group's
    area, while the hover names the item under the mouse. Horizontal reference lines
    (e.g. a capacity and a usable limit) are labelled on the chart, and some steps
    can be shaded (e.g. the peak). Figure and sources are reused by every
    :meth:`update`.

    Parameters
    ----------
    title, x_axis_label, y_axis_label : str
    value_names : sequence of str
        Item or step columns shown in the hover, after the group.
    group_name : str
        Name of the group in the hover.
    width, height : int
        Frame size in pixels.
    y_format : {"bytes", "number"}
        Y axis labels in binary byte units (``80 GiB``) or plain numbers.
    palette : sequence of str
        Group colors, by the group's index in ``groups`` (cycled).
    max_step_labels : int
        Steps are labelled on the x axis (``step_labels`` of :meth:`update`) up to
        this many steps; more steps get automatic numeric ticks.

    Attributes
    ----------
    figure : bokeh.plotting.figure
    segments : ColumnDataSource
        One row per drawn (step, item): ``left, right, bottom, top, value, step,
        item, group, color`` and the value columns. Selected rows stay opaque,
        the others fade (see :func:`link_selection`).
    outline : ColumnDataSource
        ``x, y``: the top of the stack as a step line (one point per step start and
        one at the end of the last step).
    lines : ColumnDataSource
        ``x0, x1, y, label, color, dash`` of the reference lines.
    bands : ColumnDataSource
        ``left, right, bottom, top, label`` of the shaded steps.
    """

    def __init__(self, *, title: str = "", x_axis_label: str = "step", y_axis_label: str = "value",
                 value_names: Sequence[str] = (), group_name: str = "group", width: int = 700,
                 height: int = 300, y_format: str = "bytes", palette: Sequence[str] = CATEGORY_PALETTE,
                 max_step_labels: int = 24):
        if y_format not in ("bytes", "number"):
            raise ValueError(f"y_format must be 'bytes' or 'number', got {y_format!r}")
        self.value_names = tuple(value_names)
        self.palette = tuple(palette)
        self.max_step_labels = int(max_step_labels)
        self.segments = ColumnDataSource({name: [] for name in (
            "left", "right", "bottom", "top", "value", "step", "item", "group", "color", *self.value_names)})
        self.outline = ColumnDataSource({"x": [], "y": []})
        self.lines = ColumnDataSource({name: [] for name in ("x0", "x1", "y", "label", "color", "dash")})
        self.bands = ColumnDataSource({name: [] for name in ("left", "right", "bottom", "top", "label")})
        self.figure = figure(
            title=title, frame_width=int(width), frame_height=int(height), x_range=Range1d(0, 1),
            y_range=Range1d(0, 1), tools="xpan,xwheel_zoom,box_zoom,reset,save", toolbar_location="right",
            x_axis_label=x_axis_label, y_axis_label=y_axis_label,
        )
        fig = self.figure
        fig.xgrid.visible = False
        if y_format == "bytes":
            fig.yaxis.formatter = bytes_tick_formatter()
            fig.yaxis.ticker = bytes_ticker()
        else:
            fig.yaxis.formatter = _NumeralTickFormatter(format="0,0")
        self._step_ticks = FixedTicker(ticks=[])
        self._auto_ticks = BasicTicker(desired_num_ticks=10)
        fig.quad(left="left", right="right", bottom="bottom", top="top", source=self.bands,
                 fill_color="#000000", fill_alpha=0.07, line_color=None)
        fig.text(x="left", y="top", text="label", source=self.bands, text_font_size="10px",
                 text_color="#555555", text_baseline="top", x_offset=3, y_offset=3)
        self.segment_renderer = fig.quad(
            left="left", right="right", bottom="bottom", top="top", source=self.segments,
            fill_color="color", line_color="color", line_width=0.5,
            nonselection_fill_alpha=0.2, nonselection_line_alpha=0.2,
        )
        fig.step(x="x", y="y", source=self.outline, mode="after", line_color="#202020", line_width=1.5)
        self.line_renderer = fig.segment(x0="x0", x1="x1", y0="y", y1="y", source=self.lines,
                                         line_color="color", line_dash="dash", line_width=2)
        fig.text(x="x0", y="y", text="label", source=self.lines, text_color="color", text_font_size="11px",
                 text_baseline="bottom", x_offset=4, y_offset=-2)
        tooltips = [(group_name, "@group")] + [(name, f"@{{{name}}}") for name in self.value_names]
        fig.add_tools(HoverTool(renderers=[self.segment_renderer], tooltips=tooltips))
        fig.add_layout(_Legend(items=[_LegendItem(label=_field("group"), renderers=[self.segment_renderer])],
                               location="top_left", label_text_font_size="10px", glyph_height=12,
                               glyph_width=14, spacing=0, padding=4, margin=4), "right")

    def update(self, left: Sequence[float], right: Sequence[float], values: np.ndarray, *,
               item_groups: Sequence[str], groups: Sequence[str] | None = None,
               item_values: Mapping[str, Sequence[Any]] | None = None,
               step_values: Mapping[str, Sequence[Any]] | None = None,
               lines: Sequence[tuple] = (), shaded_steps: Sequence[int] = (), shade_label: str = "",
               step_labels: Sequence[str] | None = None, title: str | None = None) -> None:
        """Draw new steps and items.

        Parameters
        ----------
        left, right : 1-D arrays of float, length n_steps
            Extent of every step on the x axis (contiguous steps: ``left[i+1] == right[i]``).
        values : 2-D array, shape (n_steps, n_items)
            Value of every item in every step (non-negative; 0: not drawn).
        item_groups : sequence of str, length n_items
            Group of every item (color, legend, hover).
        groups : sequence of str, optional
            Every group in color order (``palette[index]``); default the groups of
            ``item_groups`` in order of appearance. Fixing it keeps a group's color
            when others come and go.
        item_values, step_values : mapping of str to sequence, optional
            Hover columns (names of ``value_names``), one value per item or per step.
        lines : sequence of tuple
            Reference lines ``(label, y)``, ``(label, y, color)`` or
            ``(label, y, color, dash)``; default color :data:`LIMIT_COLOR`, the first
            line solid and the others dashed.
        shaded_steps : sequence of int
            Steps shaded from the bottom to the top of the chart.
        shade_label : str
            Text written at the top of every shaded step.
        step_labels : sequence of str, optional
            Axis label of every step, at its centre (only up to ``max_step_labels`` steps).
        title : str, optional
        """
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 2:
            raise ValueError(f"values must be 2-D (steps, items), got shape {values.shape}")
        n_steps, n_items = values.shape
        left = np.asarray(left, dtype=np.float64)
        right = np.asarray(right, dtype=np.float64)
        if left.shape != (n_steps,) or right.shape != (n_steps,):
            raise ValueError(f"left and right need {n_steps} values, got {left.shape} and {right.shape}")
        if len(item_groups) != n_items:
            raise ValueError(f"{len(item_groups)} item groups for {n_items} items")
        groups = list(dict.fromkeys(item_groups)) if groups is None else list(groups)
        position = {g: i for i, g in enumerate(groups)}
        unknown = sorted({g for g in item_groups if g not in position})
        if unknown:
            raise ValueError(f"item groups {unknown} are not in groups")
        group_of_item = np.asarray(item_groups, dtype=object)
        color_of_item = np.array([self.palette[position[g] % len(self.palette)] for g in item_groups],
                                 dtype=object)
        columns: dict[str, tuple[str, np.ndarray]] = {}
        for kind, mapping, length in (("item", item_values or {}, n_items), ("step", step_values or {}, n_steps)):
            for name, column in mapping.items():
                column = np.asarray(column, dtype=object)
                if column.shape != (length,):
                    raise ValueError(f"{kind} value {name!r} needs {length} values, got shape {column.shape}")
                columns[name] = (kind, column)
        missing = [name for name in self.value_names if name not in columns]
        if missing:
            raise ValueError(f"missing hover columns {missing}")

        tops = np.cumsum(values, axis=1)
        step, item = np.nonzero(values)  # step-major: the legend lists groups bottom-up
        data = {
            "left": left[step], "right": right[step],
            "bottom": (tops - values)[step, item], "top": tops[step, item],
            "value": values[step, item], "step": _as_column(step), "item": _as_column(item),
            "group": group_of_item[item], "color": color_of_item[item],
        }
        for name in self.value_names:
            kind, column = columns[name]
            data[name] = column[item] if kind == "item" else column[step]
        self.segments.selected.indices = []
        self.segments.data = data

        totals = tops[:, -1] if n_items else np.zeros(n_steps)
        if n_steps:
            self.outline.data = {"x": np.append(left, right[-1]), "y": np.append(totals, totals[-1])}
        else:
            self.outline.data = {"x": [], "y": []}
        x0 = float(left.min()) if n_steps else 0.0
        x1 = float(right.max()) if n_steps else 1.0
        rows = []
        for i, line in enumerate(lines):
            label, y = line[0], line[1]
            color = line[2] if len(line) > 2 else LIMIT_COLOR
            dash = line[3] if len(line) > 3 else ("solid" if i == 0 else "dashed")
            rows.append((x0, x1, float(y), str(label), color, dash))
        self.lines.data = {name: [r[k] for r in rows] for k, name in
                           enumerate(("x0", "x1", "y", "label", "color", "dash"))}
        y_top = max([float(totals.max()) if n_steps else 0.0] + [r[2] for r in rows] + [1.0]) * 1.08
        shaded = [int(s) for s in shaded_steps]
        self.bands.data = {"left": left[shaded], "right": right[shaded], "bottom": [0.0] * len(shaded),
                           "top": [y_top] * len(shaded), "label": [shade_label] * len(shaded)}

        fig = self.figure
        fig.x_range.start, fig.x_range.end = x0, x1 if x1 > x0 else x0 + 1.0
        fig.y_range.start, fig.y_range.end = 0.0, y_top
        if step_labels is not None and 0 < n_steps <= self.max_step_labels:
            centres = (left + right) / 2
            self._step_ticks.ticks = [float(c) for c in centres]
            fig.xaxis.ticker = self._step_ticks
            fig.xaxis.major_label_overrides = {float(c): str(s) for c, s in zip(centres, step_labels)}
        else:
            fig.xaxis.ticker = self._auto_ticks
            fig.xaxis.major_label_overrides = {}
        if title is not None:
            fig.title.text = title
