"""Bar charts and heatmaps of counts, with limit lines and legends.

:class:`BarChart` and :class:`Heatmap`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from bokeh.core.properties import field as _field
from bokeh.core.properties import value as _value
from bokeh.models import (
    BasicTicker,
    ColumnDataSource,
    CustomJSTickFormatter,
    FixedTicker,
    HoverTool,
    LinearColorMapper,
    Range1d,
)
from bokeh.models import ColorBar as _ColorBar
from bokeh.models import Legend as _Legend
from bokeh.models import LegendItem as _LegendItem
from bokeh.models import NumeralTickFormatter as _NumeralTickFormatter
from bokeh.plotting import figure

from scwork.widgets._cells import _LABEL_COLUMNS, _as_column, show_labels
from scwork.widgets._colors import (
    _DARK_TEXT,
    _LIGHT_TEXT,
    CATEGORY_PALETTE,
    HEATMAP_PALETTE,
    LIMIT_COLOR,
    category_colors,
)
from scwork.widgets._html import _format_value

__all__ = ["BarChart", "DistributionBarChart", "Heatmap"]


class BarChart:
    """Bars over categories ``0..n-1``, split side by side or stacked by group, in place.

    One figure with three sources, reused by every :meth:`update`: the bars, one
    mark per category (e.g. the largest bar of a category, drawn as a black dash)
    and horizontal reference lines (e.g. a configured limit, drawn dashed red).

    Parameters
    ----------
    title : str
    x_axis_label, y_axis_label : str
    category_name, group_name, value_name : str
        Names of the category, group and value in hover tooltips.
    mark_label : str
        Legend label of the per-category marks.
    width, height : int
        Frame size in pixels.
    max_legend_groups : int
        The group legend is shown only up to this many groups (the hover always
        names the group).
    integer_values : bool
        Values are counts: y ticks at whole numbers only.
    palette : sequence of str
        Group colors, cycled.

    Attributes
    ----------
    figure : bokeh.plotting.figure
    bars : ColumnDataSource
        One row per drawn bar: ``x, bottom, top, width, color, group, category,
        value`` (``value = top - bottom``).
    marks : ColumnDataSource
        One row per category with a mark: ``x0, x1, y, category, value``.
    lines : ColumnDataSource
        One row per reference line: ``x0, x1, y, label``.
    """

    def __init__(self, *, title: str = "", x_axis_label: str = "category", y_axis_label: str = "value",
                 category_name: str = "category", group_name: str = "group", value_name: str = "value",
                 mark_label: str = "max", width: int = 620, height: int = 220,
                 max_legend_groups: int = 12, integer_values: bool = True,
                 palette: Sequence[str] = CATEGORY_PALETTE):
        self.palette = tuple(palette)
        self.max_legend_groups = int(max_legend_groups)
        self.bars = ColumnDataSource({name: [] for name in
                                      ("x", "bottom", "top", "width", "color", "group", "category", "value")})
        self.marks = ColumnDataSource({name: [] for name in ("x0", "x1", "y", "category", "value")})
        self.lines = ColumnDataSource({name: [] for name in ("x0", "x1", "y", "label")})
        self.figure = figure(
            title=title, frame_width=int(width), frame_height=int(height), x_range=Range1d(-0.5, 0.5),
            tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="right",
            x_axis_label=x_axis_label, y_axis_label=y_axis_label,
        )
        fig = self.figure
        fig.xgrid.visible = False
        fig.y_range.start = 0
        fig.yaxis.formatter = _NumeralTickFormatter(format="0,0" if integer_values else "0,0.[00]")
        if integer_values:
            fig.yaxis.ticker = BasicTicker(min_interval=1, desired_num_ticks=6)
        self._ticks = FixedTicker(ticks=[])
        self._auto_ticks = BasicTicker(min_interval=1, desired_num_ticks=12)
        self.bar_renderer = fig.vbar(x="x", width="width", bottom="bottom", top="top", source=self.bars,
                                     fill_color="color", line_color="white", line_width=0.5)
        self.mark_renderer = fig.segment(x0="x0", x1="x1", y0="y", y1="y", source=self.marks,
                                         line_color="#202020", line_width=2)
        self.line_renderer = fig.segment(x0="x0", x1="x1", y0="y", y1="y", source=self.lines,
                                         line_color=LIMIT_COLOR, line_width=2, line_dash="dashed")
        fig.add_tools(HoverTool(renderers=[self.bar_renderer], tooltips=[
            (category_name, "@category"), (group_name, "@group"), (value_name, "@value{0,0}")]))
        fig.add_tools(HoverTool(renderers=[self.line_renderer], tooltips=[("", "@label"), ("", "@y{0,0}")]))
        # Legend: one item per group (built from the bars' ``group`` column in the
        # browser), then the marks and the reference lines.
        self.group_legend_item = _LegendItem(label=_field("group"), renderers=[self.bar_renderer])
        self.legend = _Legend(items=[
            self.group_legend_item,
            _LegendItem(label=_value(mark_label), renderers=[self.mark_renderer]),
            _LegendItem(label=_value("limit"), renderers=[self.line_renderer]),
        ], location="top_left", label_text_font_size="10px", glyph_height=12, glyph_width=14,
            spacing=0, padding=4, margin=4)
        fig.add_layout(self.legend, "right")

    def update(self, values: np.ndarray, *, groups: Sequence[str], mode: str = "split",
               marks: np.ndarray | None = None, lines: Sequence[tuple[str, float]] = (),
               categories: Sequence[Any] | None = None, title: str | None = None,
               mark_label: str | None = None) -> None:
        """Draw new bars.

        Parameters
        ----------
        values : 2-D array, shape (n_groups, n_categories)
            Height of every group's bar in every category (non-negative).
        groups : sequence of str
            Name of every group (legend and hover); colors follow the group index.
        mode : {"split", "stack"}
            ``"split"``: the groups' bars side by side inside each category slot;
            ``"stack"``: the groups' bars stacked (group 0 at the bottom).
        marks : 1-D array, optional
            One value per category drawn as a black dash across the slot (NaN: no mark).
        lines : sequence of (label, y)
            Horizontal reference lines across the chart (e.g. ``[("limit", 256)]``).
        categories : sequence, optional
            Hover names of the categories; default ``0..n-1``.
        title, mark_label : str, optional
            New figure title and legend label of the marks.
        """
        values = np.asarray(values)
        if values.ndim != 2:
            raise ValueError(f"values must be 2-D (groups, categories), got shape {values.shape}")
        n_groups, n_categories = values.shape
        if len(groups) != n_groups:
            raise ValueError(f"{len(groups)} group names for {n_groups} groups")
        if mode not in ("split", "stack"):
            raise ValueError(f"mode must be 'split' or 'stack', got {mode!r}")
        categories = np.arange(n_categories) if categories is None else np.asarray(categories)
        group_index = np.repeat(np.arange(n_groups), n_categories)
        category_index = np.tile(np.arange(n_categories), n_groups)
        flat = values.ravel()
        slot = 0.84  # part of a category's unit width covered by its bars
        if mode == "split":
            width = slot / max(n_groups, 1)
            x = category_index - slot / 2 + (group_index + 0.5) * width
            bottom = np.zeros(flat.shape, dtype=flat.dtype)
        else:
            width = slot
            x = category_index.astype(np.float64)
            bottom = (np.cumsum(values, axis=0) - values).ravel()
        self.bars.data = {
            "x": x, "bottom": _as_column(bottom), "top": _as_column(bottom + flat),
            "width": np.full(flat.shape, width), "color": category_colors(group_index, palette=self.palette),
            "group": np.asarray(groups, dtype=object)[group_index],
            "category": categories[category_index], "value": _as_column(flat),
        }
        if marks is None:
            self.marks.data = {name: [] for name in ("x0", "x1", "y", "category", "value")}
        else:
            marks = np.asarray(marks, dtype=np.float64)
            keep = ~np.isnan(marks)
            centre = np.arange(n_categories)[keep]
            self.marks.data = {"x0": centre - slot / 2, "x1": centre + slot / 2, "y": marks[keep],
                               "category": categories[keep], "value": marks[keep]}
        lines = [(label, y) for label, y in lines if y is not None]
        self.lines.data = {"x0": [-0.5] * len(lines), "x1": [n_categories - 0.5] * len(lines),
                           "y": [float(y) for _, y in lines], "label": [str(label) for label, _ in lines]}
        fig = self.figure
        # White outlines separate bars; on bars a few pixels wide they would hide them.
        bar_px = fig.frame_width * width / max(n_categories, 1)
        self.bar_renderer.glyph.line_alpha = 1.0 if bar_px >= 4 else 0.0
        fig.x_range.start, fig.x_range.end = -0.5, max(n_categories, 1) - 0.5
        if n_categories <= 32:
            self._ticks.ticks = list(range(n_categories))
            fig.xaxis.ticker = self._ticks
        else:
            fig.xaxis.ticker = self._auto_ticks
        self.group_legend_item.visible = n_groups <= self.max_legend_groups
        self.legend.items[1].visible = marks is not None
        self.legend.items[2].visible = bool(lines)
        if lines:
            self.legend.items[2].label = _value(lines[0][0] if len(lines) == 1 else "reference lines")
        if mark_label is not None:
            self.legend.items[1].label = _value(mark_label)
        if title is not None:
            fig.title.text = title


class Heatmap:
    """A 2-D array of numbers as colored cells with a color bar, updated in place.

    Uses the grid convention of this module (row 0 at the top). Grids of up to
    ``max_rect_cells`` cells are drawn as ``rect`` cells, with their values as
    text when the cells are large enough and an outline on highlighted cells;
    larger grids as one ``image`` glyph.

    Parameters
    ----------
    title : str
    x_axis_label, y_axis_label : str
    value_name : str
        Name of the value in hover tooltips and on the color bar.
    palette : sequence of str
        Sequential colors, low to high.
    highlight_color : str
        Outline color of highlighted cells (e.g. cells over a limit), drawn on top.
    max_rect_cells, max_width, max_height, max_cell_px, min_label_cell_px : int
        As in :class:`CellGrid`, except that cells are not square: a small grid gets
        cells up to ``max_cell_px`` high and up to twice that wide, and the frame is
        at least ``min_width`` x ``min_height`` pixels (so one row of two cells keeps
        a readable color bar).
    min_width, min_height : int
    fill_height_rows : int, optional
        Grids of at least this many rows are drawn ``max_height`` high (their cells
        grow taller than ``max_cell_px``), so that a change between two such grids
        (e.g. 4 to 8 devices) keeps the frame's size: BokehJS lays a view out again,
        and the page below it moves, for every new frame size. Default: every grid
        gets the height its rows need.

    Attributes
    ----------
    figure : bokeh.plotting.figure
    cells : ColumnDataSource
        Rect path: ``x, y, row, col, value, label, text_color``, one row per cell
        (row-major). Empty on the image path.
    labels : ColumnDataSource
        The value labels drawn: ``x, y, label, text_color`` of every cell while they
        fit their cells, empty otherwise.
    highlights : ColumnDataSource
        ``x, y, row, col, value`` of the highlighted cells (both paths).
    image : ColumnDataSource
        Image path: ``image, x, y, dw, dh`` and 2-D ``row, col`` (bottom row first).
    color_mapper : LinearColorMapper
        Its ``low``/``high`` follow the data (or the ``low``/``high`` of :meth:`update`).
    """

    def __init__(self, *, title: str = "", x_axis_label: str = "column", y_axis_label: str = "row",
                 value_name: str = "value", palette: Sequence[str] = HEATMAP_PALETTE,
                 highlight_color: str = LIMIT_COLOR, max_rect_cells: int = 4096, max_width: int = 620,
                 max_height: int = 260, max_cell_px: int = 40, min_label_cell_px: int = 22,
                 min_width: int = 240, min_height: int = 80, fill_height_rows: int | None = None):
        self.value_name = value_name
        self.palette = tuple(palette)
        self.highlight_color = highlight_color
        self.max_rect_cells = int(max_rect_cells)
        self.max_width, self.max_height = int(max_width), int(max_height)
        self.max_cell_px, self.min_label_cell_px = int(max_cell_px), int(min_label_cell_px)
        self.min_width, self.min_height = int(min_width), int(min_height)
        self.fill_height_rows = None if fill_height_rows is None else int(fill_height_rows)
        self.shape: tuple[int, int] = (0, 0)
        self.cells = ColumnDataSource({name: [] for name in ("x", "y", "row", "col", "value", "label", "text_color")})
        self.highlights = ColumnDataSource({name: [] for name in ("x", "y", "row", "col", "value")})
        self.image = ColumnDataSource({name: [] for name in ("image", "x", "y", "dw", "dh", "row", "col", "value")})
        self.figure = figure(
            title=title, x_range=Range1d(0, 1), y_range=Range1d(-1, 0),
            frame_width=self.max_cell_px, frame_height=self.max_cell_px,
            tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="right",
            x_axis_label=x_axis_label, y_axis_label=y_axis_label,
        )
        fig = self.figure
        fig.grid.visible = False
        fig.xaxis.formatter = CustomJSTickFormatter(code="return String(Math.floor(tick + 1e-9))")
        fig.yaxis.formatter = CustomJSTickFormatter(code="return String(Math.floor(-tick + 1e-9))")
        self._centre_ticks_x = FixedTicker(ticks=[])
        self._centre_ticks_y = FixedTicker(ticks=[])
        self._auto_ticks_x = BasicTicker(min_interval=1, desired_num_ticks=8)
        self._auto_ticks_y = BasicTicker(min_interval=1, desired_num_ticks=8)
        self.color_mapper = LinearColorMapper(palette=list(self.palette), low=0, high=1)
        fill = {"field": "value", "transform": self.color_mapper}
        self.rect_renderer = fig.rect(x="x", y="y", width=1, height=1, source=self.cells, fill_color=fill,
                                      line_color="white", line_width=1)
        # The labels drawn: a copy of the cells' while they fit (see show_labels).
        self.labels = ColumnDataSource({name: [] for name in _LABEL_COLUMNS})
        self.text_renderer = fig.text(x="x", y="y", text="label", source=self.labels, text_color="text_color",
                                      text_align="center", text_baseline="middle", text_font_size="10px")
        self.image_renderer = fig.image(image="image", x="x", y="y", dw="dw", dh="dh", source=self.image,
                                        color_mapper=self.color_mapper)
        # Outlines inset a little so that neighbouring cells never cover them.
        self.highlight_renderer = fig.rect(x="x", y="y", width=0.9, height=0.9, source=self.highlights,
                                           fill_alpha=0, line_color=highlight_color, line_width=3)
        fig.add_tools(HoverTool(renderers=[self.rect_renderer, self.image_renderer], tooltips=[
            ("row", "@row"), ("col", "@col"), (value_name, "@value{0,0.[00]}")]))
        self.color_bar = _ColorBar(color_mapper=self.color_mapper, width=10, title=value_name,
                                  formatter=_NumeralTickFormatter(format="0,0"), title_text_font_size="10px")
        fig.add_layout(self.color_bar, "right")

    @property
    def uses_image(self) -> bool:
        """True when the current grid is drawn with the image glyph."""
        return bool(self.image_renderer.visible)

    def update(self, values: np.ndarray, *, highlight: np.ndarray | None = None, low: float | None = None,
               high: float | None = None, title: str | None = None) -> None:
        """Draw a new grid of values.

        Parameters
        ----------
        values : 2-D array of numbers
        highlight : 2-D array of bool, optional
            Cells outlined in ``highlight_color``.
        low, high : float, optional
            Color scale ends; default 0 (or the minimum if negative) and the maximum.
        title : str, optional
        """
        values = np.asarray(values)
        if values.ndim != 2:
            raise ValueError(f"values must be 2-D, got shape {values.shape}")
        if highlight is not None and np.shape(highlight) != values.shape:
            raise ValueError(f"highlight has shape {np.shape(highlight)}, expected {values.shape}")
        n_rows, n_cols = values.shape
        self.shape = (n_rows, n_cols)
        finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values
        vmin = float(finite.min()) if finite.size else 0.0
        vmax = float(finite.max()) if finite.size else 1.0
        self.color_mapper.low = min(0.0, vmin) if low is None else float(low)
        self.color_mapper.high = max(vmax, self.color_mapper.low + 1) if high is None else float(high)
        frame_width = max(min(self.max_width, 2 * self.max_cell_px * n_cols), self.min_width)
        frame_height = max(min(self.max_height, self.max_cell_px * n_rows), self.min_height)
        if self.fill_height_rows is not None and n_rows >= self.fill_height_rows:
            frame_height = max(self.max_height, self.min_height)
        cell_px = min(frame_width / max(n_cols, 1), frame_height / max(n_rows, 1))
        rows, cols = np.indices(values.shape)
        if values.size <= self.max_rect_cells:
            span = self.color_mapper.high - self.color_mapper.low
            level = (values.astype(np.float64).ravel() - self.color_mapper.low) / span
            # Viridis is dark at the low end: white text there, dark text on the light end.
            text_color = np.where(level < 0.6, _LIGHT_TEXT, _DARK_TEXT).astype(object)
            self.cells.data = {
                "x": cols.ravel() + 0.5, "y": -(rows.ravel() + 0.5),
                "row": _as_column(rows.ravel()), "col": _as_column(cols.ravel()),
                "value": _as_column(values.ravel()),
                "label": np.array([_format_value(v) for v in values.ravel()], dtype=object),
                "text_color": text_color,
            }
            self.image.data = {name: [] for name in ("image", "x", "y", "dw", "dh", "row", "col", "value")}
            self.rect_renderer.visible = True
            self.image_renderer.visible = False
            show_labels(self.text_renderer, self.labels, self.cells, cell_px >= self.min_label_cell_px)
            # One tick per cell while they stay readable, automatic ticks beyond.
            self._centre_ticks_x.ticks = [c + 0.5 for c in range(n_cols)] if n_cols <= 32 else []
            self._centre_ticks_y.ticks = [-(r + 0.5) for r in range(n_rows)] if n_rows <= 32 else []
            self.figure.xaxis.ticker = self._centre_ticks_x if n_cols <= 32 else self._auto_ticks_x
            self.figure.yaxis.ticker = self._centre_ticks_y if n_rows <= 32 else self._auto_ticks_y
        else:
            self.cells.data = {name: [] for name in ("x", "y", "row", "col", "value", "label", "text_color")}
            self.image.data = {
                "image": [np.flipud(values.astype(np.float64))], "x": [0], "y": [-n_rows],
                "dw": [n_cols], "dh": [n_rows], "row": [np.flipud(_as_column(rows))],
                "col": [np.flipud(_as_column(cols))], "value": [np.flipud(_as_column(values))],
            }
            self.rect_renderer.visible = False
            show_labels(self.text_renderer, self.labels, self.cells, False)
            self.image_renderer.visible = True
            self.figure.xaxis.ticker = self._auto_ticks_x
            self.figure.yaxis.ticker = self._auto_ticks_y
        marked = np.zeros(values.shape, bool) if highlight is None else np.asarray(highlight, bool)
        self.highlights.data = {"x": cols[marked] + 0.5, "y": -(rows[marked] + 0.5),
                                "row": _as_column(rows[marked]), "col": _as_column(cols[marked]),
                                "value": _as_column(values[marked])}
        fig = self.figure
        fig.frame_width, fig.frame_height = int(frame_width), int(frame_height)
        fig.x_range.start, fig.x_range.end = 0, max(n_cols, 1)
        fig.y_range.start, fig.y_range.end = -max(n_rows, 1), 0
        if title is not None:
            fig.title.text = title


class DistributionBarChart(BarChart):
    """A :class:`BarChart` that can also draw, per category, a distribution over many groups.

    When there are too many groups for side-by-side bars (the bars would be a pixel
    wide or less), :meth:`update_distribution` draws one bar per category for the
    largest value over the groups, a thin whisker from the smallest to the largest,
    and short dashes at the median and at the minimum, with legend items saying so.
    :meth:`update` draws ordinary split or stacked bars and hides these glyphs.

    Parameters
    ----------
    bar_color, median_color, low_color : str
        Colors of the distribution bars (light, so that the dashes on them show) and
        of the median and minimum dashes.
    **kwargs
        Passed to :class:`BarChart`.

    Attributes
    ----------
    spread : ColumnDataSource
        One row per category in distribution mode (empty otherwise): ``x, x0, x1,
        low, median, high, category``.
    median_legend_item, low_legend_item : bokeh LegendItem
    """

    def __init__(self, *, bar_color: str = "#aec7e8", median_color: str = "#1f77b4", low_color: str = "#ff7f0e",
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.bar_color = bar_color
        self.spread = ColumnDataSource({name: [] for name in _SPREAD_COLUMNS})
        fig = self.figure
        self.whisker_renderer = fig.segment(x0="x", x1="x", y0="low", y1="high", source=self.spread,
                                            line_color="#505050", line_width=1)
        self.median_renderer = fig.segment(x0="x0", x1="x1", y0="median", y1="median", source=self.spread,
                                           line_color=median_color, line_width=3)
        self.low_renderer = fig.segment(x0="x0", x1="x1", y0="low", y1="low", source=self.spread,
                                        line_color=low_color, line_width=3)
        fig.add_tools(HoverTool(renderers=[self.whisker_renderer, self.median_renderer, self.low_renderer],
                                tooltips=[("", "@category"), ("max", "@high{0,0}"),
                                          ("median", "@median{0,0.[0]}"), ("min", "@low{0,0}")]))
        self.median_legend_item = _LegendItem(label=_value("median"), renderers=[self.median_renderer])
        self.low_legend_item = _LegendItem(label=_value("min"), renderers=[self.low_renderer])
        self.legend.items.extend([self.median_legend_item, self.low_legend_item])
        self._show_distribution(False)

    @property
    def distribution_mode(self) -> bool:
        """True when the last drawing was :meth:`update_distribution`."""
        return bool(self.median_renderer.visible)

    def _show_distribution(self, shown: bool) -> None:
        for item in (self.whisker_renderer, self.median_renderer, self.low_renderer,
                     self.median_legend_item, self.low_legend_item):
            item.visible = shown

    def update(self, values: np.ndarray, **kwargs: Any) -> None:
        """Draw split or stacked bars (see :meth:`BarChart.update`); no distribution glyphs."""
        super().update(values, **kwargs)
        self.spread.data = {name: [] for name in _SPREAD_COLUMNS}
        self._show_distribution(False)

    def update_distribution(self, high: np.ndarray, median: np.ndarray, low: np.ndarray, *,
                            bar_label: str, median_label: str, low_label: str, **kwargs: Any) -> None:
        """Draw, per category, a bar up to ``high`` and dashes at ``median`` and ``low``.

        Parameters
        ----------
        high, median, low : 1-D arrays, one value per category
            Largest, median and smallest value over the groups (``low <= median <= high``).
        bar_label, median_label, low_label : str
            Legend labels of the bars and of the two dashes (they say over what the
            statistics are taken).
        **kwargs
            ``marks``, ``lines``, ``categories``, ``title``, ``mark_label`` as in
            :meth:`BarChart.update`.
        """
        high, median, low = (np.asarray(a) for a in (high, median, low))
        if not (high.ndim == 1 and high.shape == median.shape == low.shape):
            raise ValueError(f"high, median and low must be 1-D of one length, got shapes "
                             f"{high.shape}, {median.shape}, {low.shape}")
        BarChart.update(self, high[np.newaxis, :], groups=[bar_label], mode="split", **kwargs)
        n = high.size
        self.bars.data["color"] = np.full(n, self.bar_color, dtype=object)
        centre = np.arange(n, dtype=np.float64)
        half = 0.84 / 4       # dashes half as wide as the bar (the bar's slot is 0.84)
        categories = kwargs.get("categories")
        categories = np.arange(n) if categories is None else np.asarray(categories)
        self.spread.data = {"x": centre, "x0": centre - half, "x1": centre + half,
                            "low": _as_column(low), "median": _as_column(median.astype(np.float64)),
                            "high": _as_column(high), "category": categories}
        self.median_legend_item.label = _value(median_label)
        self.low_legend_item.label = _value(low_label)
        # The bars are wide here: their white outline helps, and one group is always listed.
        self.group_legend_item.visible = True
        self._show_distribution(True)


_SPREAD_COLUMNS = ("x", "x0", "x1", "low", "median", "high", "category")
