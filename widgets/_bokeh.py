"""Shared bokeh drawing helpers for the scwork explorers.

Every explorer (layouts, load skew, memory timeline, all-reduce stepper, pipeline
Gantt) draws through these helpers so colors, grids and exports look and behave the
same. Nothing here knows about layouts or chips: the helpers take plain arrays.

- :data:`CATEGORY_PALETTE`, :func:`category_colors`: cycling colors for integer ids
  (tiles, channels, devices...), with fixed colors for "empty" ids.
- :class:`CellGrid`: a 2-D grid of categorical cells, updated in place. Small grids are
  drawn as ``rect`` cells with text labels; large grids switch to one ``image`` glyph
  with a hover tool so a 512x512 grid stays responsive.
- :class:`AddressStrip`: a 1-D buffer in address order wrapped into rows of a
  :func:`strip_width`, drawn with a :class:`CellGrid`.
- :func:`summary_table_html`, :func:`message_html`: small HTML snippets for summaries
  and status lines.
- :func:`wrap`: a bokeh layout as a ``jupyter_bokeh.BokehModel`` widget.
- :func:`export_html`: a standalone HTML file with inline resources (works offline).

Grid convention: row 0 is at the top. Row ``r`` spans ``y`` in ``[-(r+1), -r]`` and
column ``c`` spans ``x`` in ``[c, c+1]``; the tick formatters print row/column numbers.
Negative ``y`` is used instead of a flipped range because bokeh's image hover has had
bugs on flipped ranges (bokeh issues #7959, #8778, #13555).
"""

from __future__ import annotations

import contextlib

import html
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from bokeh.embed import file_html
from bokeh.models import (
    BasicTicker,
    ColumnDataSource,
    CustomJSTickFormatter,
    FixedTicker,
    HoverTool,
    LinearColorMapper,
    Range1d,
)
from bokeh.plotting import figure
from bokeh.resources import INLINE

__all__ = [
    "CATEGORY_PALETTE",
    "PADDING_COLOR",
    "EMPTY_COLOR",
    "PADDING_HATCH",
    "category_colors",
    "text_colors",
    "CellGrid",
    "AddressStrip",
    "strip_width",
    "summary_table_html",
    "message_html",
    "wrap",
    "ensure_bokehjs",
    "sync_views",
    "SyncedDisplay",
    "export_html",
]

#: Colors for ids 0, 1, 2, ... (cycling). Category20 without its two grays (reserved
#: for padding), reordered so that consecutive ids alternate dark/light and change hue:
#: neighbouring tiles never share a color unless there are more than 18 of them in a row.
CATEGORY_PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ffbb78", "#2ca02c", "#ff9896", "#9467bd", "#c49c94",
    "#e377c2", "#dbdb8d", "#17becf", "#aec7e8", "#ff7f0e", "#98df8a",
    "#d62728", "#c5b0d5", "#8c564b", "#f7b6d2", "#bcbd22", "#9edae5",
)
#: Color of padding cells (id -1 in a padded grid); gray is not in the palette.
PADDING_COLOR = "#d4d4d4"
#: Color of free / unused cells (id -1 in an occupancy map): shown blank.
EMPTY_COLOR = "#ffffff"
#: Hatch pattern drawn over padding cells on the small-grid (rect) path.
PADDING_HATCH = "/"

_DARK_TEXT = "#202020"
_LIGHT_TEXT = "#ffffff"


def _luminance(color: str) -> float:
    """Relative luminance (0 dark .. 1 light) of a ``#rrggbb`` color."""
    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def category_colors(ids: np.ndarray, *, palette: Sequence[str] = CATEGORY_PALETTE,
                    empty_color: str = PADDING_COLOR) -> np.ndarray:
    """Color of every id: ``palette[id % len(palette)]``, ``empty_color`` for ``id < 0``.

    Parameters
    ----------
    ids : array of int
        Category ids of any shape; negative means "no category" (padding, free).
    palette : sequence of str
        ``#rrggbb`` colors, cycled.
    empty_color : str
        Color of negative ids.

    Returns
    -------
    numpy.ndarray of str
        Same shape as ``ids``.
    """
    ids = np.asarray(ids)
    table = np.array([*palette, empty_color], dtype=object)
    index = np.where(ids >= 0, ids % len(palette), len(palette))
    return table[index]


def text_colors(ids: np.ndarray, *, palette: Sequence[str] = CATEGORY_PALETTE,
                empty_color: str = PADDING_COLOR) -> np.ndarray:
    """A readable label color (dark or white) for every id's cell color."""
    ids = np.asarray(ids)
    table = np.array([_LIGHT_TEXT if _luminance(c) < 0.45 else _DARK_TEXT
                      for c in (*palette, empty_color)], dtype=object)
    index = np.where(ids >= 0, ids % len(palette), len(palette))
    return table[index]


def _as_column(values: np.ndarray) -> np.ndarray:
    """A numpy array bokeh serializes compactly (int64 -> int32 when the values fit)."""
    values = np.asarray(values)
    if values.dtype.kind in "iu" and values.size and values.dtype.itemsize > 4:
        if values.min() >= np.iinfo(np.int32).min and values.max() <= np.iinfo(np.int32).max:
            return values.astype(np.int32)
    if values.dtype == bool:
        return values.astype(np.int8)
    return values


class CellGrid:
    """A 2-D grid of categorical cells in one bokeh figure, updated in place.

    Call :meth:`update` with new arrays; the figure, its sources and its ranges are
    reused, so a widget that holds a ``CellGrid`` only sends data patches to the browser.
    Grids with at most ``max_rect_cells`` cells are drawn as ``rect`` cells (with text
    labels when given); larger grids as a single ``image`` glyph whose hover shows
    row, column, category and every value array.

    Parameters
    ----------
    title : str
        Figure title (can be changed later through :meth:`update`).
    category_name : str
        Name of the category in hover tooltips (e.g. ``"tile"``, ``"channel"``).
    value_names : sequence of str
        Extra per-cell arrays passed to :meth:`update` and shown in the hover.
    empty_color : str
        Color of cells whose category is -1 (padding, free).
    empty_hatch : str or None
        Hatch pattern over category -1 cells on the rect path (None: no hatch).
    max_rect_cells : int
        Largest grid drawn cell by cell; above this the image path is used.
    max_width, max_height : int
        Largest frame size in pixels; cells stay square.
    max_cell_px : int
        Largest cell size in pixels, so tiny grids do not become huge.
    min_label_cell_px : int
        Smallest cell size in pixels at which text labels are drawn.
    x_axis_label, y_axis_label : str
        Axis titles.
    palette : sequence of str
        Category colors, cycled.

    Attributes
    ----------
    figure : bokeh.plotting.figure
    cells : ColumnDataSource
        Rect-path data, one row per drawn cell: ``x, y, row, col, category, color,
        text_color, hatch, label`` and the value columns. Empty on the image path.
    image : ColumnDataSource
        Image-path data, one row: ``image`` (color index, NaN = absent), ``x, y, dw, dh``
        and 2-D ``row, col, category`` and value columns (stored bottom row first, as
        bokeh draws images). Empty on the rect path.

    Notes
    -----
    Category ids: ``>= 0`` a category (palette color), ``-1`` empty (``empty_color``),
    ``<= -2`` absent (not drawn, e.g. the unused tail of a wrapped strip).
    """

    def __init__(self, *, title: str = "", category_name: str = "category",
                 value_names: Sequence[str] = (), empty_color: str = PADDING_COLOR,
                 empty_hatch: str | None = PADDING_HATCH, max_rect_cells: int = 1024,
                 max_width: int = 720, max_height: int = 480, max_cell_px: int = 44,
                 min_label_cell_px: int = 14,
                 x_axis_label: str = "column", y_axis_label: str = "row",
                 palette: Sequence[str] = CATEGORY_PALETTE):
        self.category_name = category_name
        self.value_names = tuple(value_names)
        self.empty_color = empty_color
        self.empty_hatch = empty_hatch
        self.max_rect_cells = int(max_rect_cells)
        self.max_width = int(max_width)
        self.max_height = int(max_height)
        self.max_cell_px = int(max_cell_px)
        self.min_label_cell_px = int(min_label_cell_px)
        self.palette = tuple(palette)
        self.shape: tuple[int, int] = (0, 0)
        self.has_labels = False

        self.cells = ColumnDataSource(self._empty_cells())
        self.image = ColumnDataSource(self._empty_image())
        self.figure = figure(
            title=title, x_range=Range1d(0, 1), y_range=Range1d(-1, 0),
            frame_width=self.max_cell_px, frame_height=self.max_cell_px,
            tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="right",
            x_axis_label=x_axis_label, y_axis_label=y_axis_label,
            match_aspect=True,
        )
        fig = self.figure
        fig.grid.visible = False
        fig.background_fill_color = "#fafafa"
        # Rows grow downwards on a negative y axis (see the module docstring), so the
        # labels print -tick; floor() maps both cell-centre and cell-edge ticks to the
        # index of the cell that starts there. The epsilon guards float round-off.
        fig.xaxis.formatter = CustomJSTickFormatter(code="return String(Math.floor(tick + 1e-9))")
        fig.yaxis.formatter = CustomJSTickFormatter(code="return String(Math.floor(-tick + 1e-9))")
        self._centre_ticks_x = FixedTicker(ticks=[])
        self._centre_ticks_y = FixedTicker(ticks=[])
        self._auto_ticks_x = BasicTicker(min_interval=1, desired_num_ticks=8)
        self._auto_ticks_y = BasicTicker(min_interval=1, desired_num_ticks=8)

        self.rect_renderer = fig.rect(
            x="x", y="y", width=0.94, height=0.94, source=self.cells,
            fill_color="color", line_color=None, hatch_pattern="hatch",
            hatch_color="#8a8a8a", hatch_alpha=0.7, hatch_scale=6,
        )
        self.text_renderer = fig.text(
            x="x", y="y", text="label", source=self.cells, text_color="text_color",
            text_align="center", text_baseline="middle", text_font_size="11px",
        )
        n_colors = len(self.palette)
        self.color_mapper = LinearColorMapper(
            palette=[*self.palette, self.empty_color], low=-0.5, high=n_colors + 0.5,
            nan_color="rgba(0, 0, 0, 0)",
        )
        self.image_renderer = fig.image(
            image="image", x="x", y="y", dw="dw", dh="dh", source=self.image,
            color_mapper=self.color_mapper,
        )
        tooltips = [("row", "@row"), ("col", "@col"), (self.category_name, "@category")]
        tooltips += [(name, f"@{{{name}}}") for name in self.value_names]
        self.hover = HoverTool(renderers=[self.rect_renderer, self.image_renderer],
                               tooltips=tooltips)
        fig.add_tools(self.hover)

    # -- data ----------------------------------------------------------------------

    def _empty_cells(self) -> dict[str, list]:
        columns = ["x", "y", "row", "col", "category", "color", "text_color", "hatch", "label"]
        return {name: [] for name in (*columns, *self.value_names)}

    def _empty_image(self) -> dict[str, list]:
        columns = ["image", "x", "y", "dw", "dh", "row", "col", "category"]
        return {name: [] for name in (*columns, *self.value_names)}

    @property
    def uses_image(self) -> bool:
        """True when the current grid is drawn with the image glyph."""
        return bool(self.image_renderer.visible)

    def update(self, categories: np.ndarray, *, empty: np.ndarray | None = None,
               labels: np.ndarray | None = None,
               values: Mapping[str, np.ndarray] | None = None,
               title: str | None = None) -> None:
        """Draw a new grid, reusing the figure and its sources.

        Parameters
        ----------
        categories : 2-D array of int
            Category id of every cell (see the class notes for -1 and <= -2).
        empty : 2-D array of bool, optional
            Cells drawn as empty (``empty_color``, hatched) although they have a
            category, e.g. padding cells that belong to a tile; the hover still shows
            their category.
        labels : 2-D array, optional
            Text drawn in each cell on the rect path (converted with ``str``); None
            draws no text. Ignored on the image path, where the hover shows values.
        values : mapping of str to 2-D array, optional
            One array per name given as ``value_names``, shown in the hover.
        title : str, optional
            New figure title.
        """
        categories = np.asarray(categories)
        if categories.ndim != 2:
            raise ValueError(f"categories must be 2-D, got shape {categories.shape}")
        values = dict(values or {})
        missing = set(self.value_names) - set(values)
        if missing:
            raise ValueError(f"missing value arrays {sorted(missing)}")
        for name, array in values.items():
            if np.shape(array) != categories.shape:
                raise ValueError(f"value {name!r} has shape {np.shape(array)}, "
                                 f"expected {categories.shape}")
        empty = (categories == -1) if empty is None else (np.asarray(empty, bool) | (categories == -1))
        if empty.shape != categories.shape:
            raise ValueError(f"empty has shape {empty.shape}, expected {categories.shape}")
        if labels is not None and np.shape(labels) != categories.shape:
            raise ValueError(f"labels have shape {np.shape(labels)}, expected {categories.shape}")

        n_rows, n_cols = categories.shape
        self.shape = (n_rows, n_cols)
        if title is not None:
            self.figure.title.text = title
        if categories.size <= self.max_rect_cells:
            self._draw_rects(categories, empty, labels, values)
        else:
            self._draw_image(categories, empty, values)
        self._resize(n_rows, n_cols)

    def _draw_rects(self, categories, empty, labels, values) -> None:
        n_rows, n_cols = categories.shape
        rows, cols = np.indices(categories.shape)
        drawn = (categories >= -1).ravel()
        cat = categories.ravel()[drawn]
        # Color by category, except empty cells which take the empty color (id -1).
        color_id = np.where(empty.ravel()[drawn], -1, cat)
        data = {
            "x": cols.ravel()[drawn] + 0.5,
            "y": -(rows.ravel()[drawn] + 0.5),
            "row": _as_column(rows.ravel()[drawn]),
            "col": _as_column(cols.ravel()[drawn]),
            "category": _as_column(cat),
            "color": category_colors(color_id, palette=self.palette, empty_color=self.empty_color),
            "text_color": text_colors(color_id, palette=self.palette, empty_color=self.empty_color),
            "hatch": np.where(color_id == -1, self.empty_hatch or " ", " ").astype(object),
            "label": (np.full(cat.shape, "", dtype=object) if labels is None
                      else np.array([str(v) for v in np.asarray(labels).ravel()[drawn]],
                                    dtype=object)),
        }
        for name in self.value_names:
            data[name] = _as_column(np.asarray(values[name]).ravel()[drawn])
        self.image.data = self._empty_image()
        self.cells.data = data
        self.rect_renderer.visible = True
        self.has_labels = labels is not None
        self.image_renderer.visible = False
        # Small grids get one tick per cell centre (up to 64); larger ones automatic ticks.
        if n_cols <= 64:
            self._centre_ticks_x.ticks = [c + 0.5 for c in range(n_cols)]
            self.figure.xaxis.ticker = self._centre_ticks_x
        else:
            self.figure.xaxis.ticker = self._auto_ticks_x
        if n_rows <= 64:
            self._centre_ticks_y.ticks = [-(r + 0.5) for r in range(n_rows)]
            self.figure.yaxis.ticker = self._centre_ticks_y
        else:
            self.figure.yaxis.ticker = self._auto_ticks_y

    def _draw_image(self, categories, empty, values) -> None:
        n_rows, n_cols = categories.shape
        n_colors = len(self.palette)
        # Color index per cell: palette slot, the empty slot, or NaN (transparent).
        color_index = np.where(empty | (categories < 0), n_colors,
                               categories % n_colors).astype(np.float32)
        color_index[categories <= -2] = np.nan
        rows, cols = np.indices(categories.shape)
        self._set_image(color_index, rows, cols, categories, values, x=0, y=-n_rows, dw=n_cols, dh=n_rows)

    def _set_image(self, color_index, rows, cols, categories, values, *, x, y, dw, dh) -> None:
        """Show one image glyph of ``color_index`` at ``(x, y)`` sized ``dw x dh``, with 2-D hover columns."""
        # bokeh draws image row 0 at the bottom: flip every 2-D column the same way so
        # the hover reads the value of the cell under the mouse.
        data = {
            "image": [np.flipud(color_index)],
            "x": [x], "y": [y], "dw": [dw], "dh": [dh],
            "row": [np.flipud(_as_column(rows))],
            "col": [np.flipud(_as_column(cols))],
            "category": [np.flipud(_as_column(categories))],
        }
        for name in self.value_names:
            data[name] = [np.flipud(_as_column(values[name]))]
        self.cells.data = self._empty_cells()
        self.image.data = data
        self.rect_renderer.visible = False
        self.has_labels = False
        self.image_renderer.visible = True
        self.figure.xaxis.ticker = self._auto_ticks_x
        self.figure.yaxis.ticker = self._auto_ticks_y

    def _resize(self, n_rows: int, n_cols: int) -> None:
        # Square cells as large as fit, capped so a 3x5 grid is not a poster.
        cell_px = min(self.max_width / max(n_cols, 1), self.max_height / max(n_rows, 1),
                      self.max_cell_px)
        fig = self.figure
        fig.frame_width = max(int(round(cell_px * n_cols)), 40)
        fig.frame_height = max(int(round(cell_px * n_rows)), 20)
        fig.x_range.start, fig.x_range.end = 0, max(n_cols, 1)
        fig.y_range.start, fig.y_range.end = -max(n_rows, 1), 0
        # Labels like "1023" must fit in a cell: scale the font with the cell size, and
        # hide labels on cells too small to read (the hover still shows every value).
        self.text_renderer.glyph.text_font_size = f"{int(max(6, min(12, cell_px * 0.38)))}px"
        self.text_renderer.visible = self.has_labels and cell_px >= self.min_label_cell_px


def strip_width(n: int, *, aspect: float = 4.0, max_single_row: int = 64) -> int:
    """Addresses per row when a buffer of ``n`` addresses is wrapped into rows.

    Buffers of up to ``max_single_row`` addresses stay on one row; larger ones wrap at
    a power of two (tile sizes are powers of two, so rows hold whole tiles) chosen so
    the strip is about ``aspect`` times wider than tall.
    """
    if n <= max_single_row:
        return max(int(n), 1)
    return int(2 ** round(math.log2(math.sqrt(n * aspect))))


class AddressStrip:
    """A 1-D buffer in address order, wrapped into rows and drawn as a :class:`CellGrid`.

    Parameters
    ----------
    title : str
    category_name : str
        Hover name of the category of each address (e.g. ``"tile"``).
    value_names : sequence of str
        Extra per-address arrays shown in the hover.
    **grid_options
        Passed on to :class:`CellGrid` (``max_rect_cells``, ``empty_color``...).

    Attributes
    ----------
    grid : CellGrid
        The underlying grid; its hover also shows ``address``.
    width : int
        Addresses per row of the current strip.
    """

    def __init__(self, *, title: str = "", category_name: str = "category",
                 value_names: Sequence[str] = (), **grid_options: Any):
        grid_options.setdefault("y_axis_label", "row")
        grid_options.setdefault("x_axis_label", "address mod width")
        self.value_names = tuple(value_names)
        self.grid = CellGrid(title=title, category_name=category_name,
                             value_names=("address", *self.value_names), **grid_options)
        self.width = 1

    @property
    def figure(self):
        """The bokeh figure."""
        return self.grid.figure

    def update(self, categories: np.ndarray, *, empty: np.ndarray | None = None,
               labels: np.ndarray | None = None,
               values: Mapping[str, np.ndarray] | None = None, title: str | None = None,
               width: int | None = None, address_offset: int = 0) -> None:
        """Draw a new buffer (or the part of one that starts at ``address_offset``).

        Parameters
        ----------
        categories : 1-D array of int
            Category of every address (-1 = empty / padding).
        empty : 1-D array of bool, optional
            Addresses drawn as empty although they have a category.
        labels : 1-D array, optional
            Text per address on the rect path.
        values : mapping of str to 1-D array, optional
            Hover values per address, one per ``value_names``.
        title : str, optional
        width : int, optional
            Addresses per row; default :func:`strip_width`.
        address_offset : int
            Address of the first entry, for a window into a larger buffer (the hover
            shows real addresses).
        """
        categories = np.asarray(categories).ravel()
        n = categories.size
        self.width = int(width) if width else strip_width(n)
        n_rows = max(math.ceil(n / self.width), 1)
        cells = n_rows * self.width

        def wrapped(array, fill, dtype):
            out = np.full(cells, fill, dtype=dtype)
            out[:n] = np.asarray(array).ravel()
            return out.reshape(n_rows, self.width)

        values = dict(values or {})
        wrapped_values = {name: wrapped(values[name], -1, np.asarray(values[name]).dtype)
                          for name in self.value_names}
        wrapped_values["address"] = (int(address_offset)
                                     + np.arange(cells, dtype=np.int64)).reshape(n_rows, self.width)
        # The unused tail of the last row is "absent" (-2): not drawn at all.
        self.grid.update(
            wrapped(categories, -2, np.int64),
            empty=None if empty is None else wrapped(empty, False, bool),
            labels=None if labels is None else wrapped(labels, "", object),
            values=wrapped_values, title=title,
        )
        self.grid.figure.yaxis.axis_label = f"row ({self.width} addresses each)"


def _format_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.4g}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_format_value(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def summary_table_html(rows: Mapping[str, Any] | Sequence[tuple[str, Any]], *,
                       title: str | None = None) -> str:
    """A compact two-column HTML table (name, value); values are escaped.

    Integers get thousands separators, floats 4 significant digits, tuples are
    printed element-wise.
    """
    items = rows.items() if isinstance(rows, Mapping) else rows
    body = "".join(
        f"<tr><th style='text-align:left;padding:1px 12px 1px 0;font-weight:600'>"
        f"{html.escape(str(name))}</th>"
        f"<td style='padding:1px 0;font-family:monospace'>{html.escape(_format_value(value))}</td></tr>"
        for name, value in items
    )
    caption = (f"<caption style='text-align:left;font-weight:700;padding-bottom:4px'>"
               f"{html.escape(title)}</caption>") if title else ""
    return f"<table style='border-collapse:collapse;font-size:13px'>{caption}{body}</table>"


_MESSAGE_STYLES = {
    "info": ("#333333", "#f4f4f4"),
    "ok": ("#1b5e20", "#e8f5e9"),
    "warning": ("#7a4f01", "#fff4e0"),
    "error": ("#b71c1c", "#fdecea"),
}


def message_html(text: str, level: str = "info") -> str:
    """A one-block status message (``level``: info, ok, warning, error); text is escaped.

    Line breaks and caret lines (as in parser errors) are preserved.
    """
    if level not in _MESSAGE_STYLES:
        raise ValueError(f"level must be one of {sorted(_MESSAGE_STYLES)}, got {level!r}")
    if not text:
        return ""
    color, background = _MESSAGE_STYLES[level]
    return (f"<pre style='color:{color};background:{background};margin:2px 0;"
            f"padding:4px 8px;white-space:pre-wrap;font-size:12px'>{html.escape(text)}</pre>")


_BOKEHJS_LOADED = False


def ensure_bokehjs() -> None:
    """Load BokehJS into the notebook page, once per kernel (inlined: works offline).

    jupyter_bokeh's ``BokehModel`` renders with the page's BokehJS (``window.Bokeh``)
    but never loads it: without this, every explorer shows "Could not create a view
    for model id" in JupyterLab. The load must be inline (not CDN): the widget view
    needs BokehJS synchronously when it is created. Outside a Jupyter kernel (scripts,
    terminal IPython) there is no page and nothing happens.
    """
    global _BOKEHJS_LOADED
    if _BOKEHJS_LOADED:
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return
    from bokeh.io import output_notebook

    output_notebook(resources=INLINE, hide_banner=True)
    _BOKEHJS_LOADED = True


def wrap(fig_or_layout):
    """A bokeh figure or layout as an ipywidget (``jupyter_bokeh.BokehModel``).

    Later changes to the bokeh models (source data, ranges, titles) are sent to the
    browser as patches once the widget is shown; changes made before that are sent
    by :func:`sync_views` when the explorer is displayed (:class:`SyncedDisplay`).
    Loads BokehJS into the notebook page first (:func:`ensure_bokehjs`).
    """
    from jupyter_bokeh import BokehModel

    ensure_bokehjs()
    return BokehModel(fig_or_layout)


def sync_views(widget) -> None:
    """Re-serialize every ``BokehModel`` under ``widget`` (its current bokeh state).

    A BokehModel's browser view starts from the document serialized when the widget
    was created; patches sent before a view exists are lost. Explorers draw after
    creating their BokehModels, so they call this right before being displayed.
    """
    from jupyter_bokeh import BokehModel

    stack = [widget]
    while stack:
        item = stack.pop()
        if isinstance(item, BokehModel):
            item.update_from_model(item._model)
        stack.extend(getattr(item, "children", ()) or ())


class SyncedDisplay:
    """Mixin for explorers (ipywidgets boxes): :func:`sync_views` before every display.

    Also gives every explorer one way to set traits and controls without triggering
    its own observers: ``with self._quiet(): ...`` sets ``self._syncing``, which the
    observers check.
    """

    _syncing = False

    def _repr_mimebundle_(self, **kwargs):
        sync_views(self)
        return super()._repr_mimebundle_(**kwargs)

    @contextlib.contextmanager
    def _quiet(self):
        """Set traits and controls without triggering refreshes (re-entrant)."""
        previous, self._syncing = self._syncing, True
        try:
            yield
        finally:
            self._syncing = previous


def export_html(bokeh_layout, path: str | Path, title: str = "scwork") -> Path:
    """Write ``bokeh_layout`` to a standalone HTML file with INLINE resources.

    The BokehJS code is embedded in the file, so it opens offline and never fetches
    anything from a CDN. Returns the path written.
    """
    path = Path(path)
    # The export is a snapshot: Python callbacks (e.g. a zoomable view's redraw on
    # zoom) cannot run in a static page, which bokeh warns about on every export.
    embed_log = logging.getLogger("bokeh.embed.util")
    level = embed_log.level
    embed_log.setLevel(logging.ERROR)
    try:
        page = file_html(bokeh_layout, resources=INLINE, title=title)
    finally:
        embed_log.setLevel(level)
    path.write_text(page, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------
# Node-link graphs with arrows, and step timelines (Gantt charts)
#
# Added for the all-reduce stepper; generic enough for any network drawing (nodes in
# groups, links, arrows of the current step) and any timeline of intervals on lanes
# (pipeline stages, collective steps).
# ---------------------------------------------------------------------------------------

from bokeh.models import Arrow, VeeHead  # appended section: the imports at the top stay untouched

#: Sequential ramp (white to dark green) for "how far along" values in [0, 1].
PROGRESS_RAMP: tuple[str, ...] = (
    "#ffffff", "#e5f5e0", "#c7e9c0", "#a1d99b", "#74c476", "#41ab5d", "#238b45", "#006d2c",
)


def ramp_colors(values: np.ndarray, *, low: float = 0.0, high: float = 1.0,
                ramp: Sequence[str] = PROGRESS_RAMP) -> np.ndarray:
    """Color of every value on a sequential ramp (``low`` -> first color, ``high`` -> last).

    Values outside ``[low, high]`` take the end colors; NaN takes the first color.
    """
    values = np.asarray(values, dtype=float)
    span = (high - low) or 1.0
    position = np.clip(np.nan_to_num((values - low) / span, nan=0.0), 0.0, 1.0)
    index = np.rint(position * (len(ramp) - 1)).astype(np.int64)
    return np.asarray(ramp, dtype=object)[index]


def arrow_segments(x0, y0, x1, y1, *, offset: float = 0.0, trim_start: float = 0.0,
                   trim_end: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Arrow end points shifted sideways and shortened at both ends.

    Parameters
    ----------
    x0, y0, x1, y1 : array_like of float
        Start and end of every arrow (e.g. the centres of two nodes).
    offset : float or array_like
        Shift to the right of the direction of travel. With the same offset, the
        arrows ``a -> b`` and ``b -> a`` of a full-duplex link are drawn side by side
        instead of on top of each other.
    trim_start, trim_end : float or array_like
        Length cut off at the start and at the end (e.g. the node radius, so the
        arrow head is not hidden under the node). Arrows never flip: at most 45%
        of the length is trimmed from each end.

    Returns
    -------
    tuple of 4 numpy.ndarray
        ``x0, y0, x1, y1`` of the drawn arrows.
    """
    x0, y0, x1, y1 = (np.asarray(a, dtype=float) for a in (x0, y0, x1, y1))
    dx, dy = x1 - x0, y1 - y0
    length = np.hypot(dx, dy)
    safe = np.where(length > 0, length, 1.0)
    ux, uy = dx / safe, dy / safe
    # Right-hand normal of the direction (x, y) -> (y, -x).
    nx, ny = uy, -ux
    offset = np.asarray(offset, dtype=float)
    cut0 = np.minimum(np.asarray(trim_start, dtype=float), 0.45 * length)
    cut1 = np.minimum(np.asarray(trim_end, dtype=float), 0.45 * length)
    return (x0 + ux * cut0 + nx * offset, y0 + uy * cut0 + ny * offset,
            x1 - ux * cut1 + nx * offset, y1 - uy * cut1 + ny * offset)


def fit_equal_aspect(xs: np.ndarray, ys: np.ndarray, *, pad: float = 0.5, max_width: int = 560,
                     max_height: int = 480, min_height: int = 120,
                     min_width: int = 160) -> tuple[tuple[float, float, float, float], int, int]:
    """Ranges and frame size that show every point with one data unit = same pixels on x and y.

    Returns ``((x_start, x_end, y_start, y_end), frame_width, frame_height)``. The frame is
    as large as fits in ``max_width`` x ``max_height``; a flat drawing gets extra vertical
    range instead of a frame thinner than ``min_height`` (and a tall one extra
    horizontal range), so circles stay circles and arrow heads point the right way.
    """
    xs = np.asarray(xs, dtype=float)
    ys = np.asarray(ys, dtype=float)
    if xs.size == 0:
        xs, ys = np.zeros(1), np.zeros(1)
    x_lo, x_hi = float(xs.min()) - pad, float(xs.max()) + pad
    y_lo, y_hi = float(ys.min()) - pad, float(ys.max()) + pad
    width, height = x_hi - x_lo, y_hi - y_lo
    scale = min(max_width / width, max_height / height)  # pixels per data unit
    frame_w = max(int(round(width * scale)), min_width)
    frame_h = max(int(round(height * scale)), min_height)
    # Grow the short side's range so both axes keep the same pixels per unit.
    x_mid, y_mid = (x_lo + x_hi) / 2, (y_lo + y_hi) / 2
    half_w, half_h = frame_w / scale / 2, frame_h / scale / 2
    return (x_mid - half_w, x_mid + half_w, y_mid - half_h, y_mid + half_h), frame_w, frame_h


class NodeLinkGraph:
    """Nodes (optionally inside group boxes), links, arrows and small per-node bars.

    One bokeh figure, updated in place: :meth:`set_graph` draws a new network, and
    :meth:`set_arrows`, :meth:`set_bars`, :meth:`update_nodes` change what happens on
    it (e.g. the transfers of one step), sending only data to the browser.

    Parameters
    ----------
    title : str
    node_value_names, arrow_value_names : sequence of str
        Extra columns shown in the node and arrow hovers.
    value_formats : mapping of str to str, optional
        Hover number formats per column name, e.g. ``{"complete": "{0%}"}``.
    x_range, y_range : bokeh Range1d, optional
        Shared ranges (two graphs of the same network then pan and zoom together).
    max_width, max_height : int
        Largest frame in pixels (see :func:`fit_equal_aspect`).
    head_size : int
        Arrow head size in pixels.

    Attributes
    ----------
    figure : bokeh.plotting.figure
    nodes : ColumnDataSource
        ``x, y, radius, fill_color, line_color, label`` and the node value columns.
    groups : ColumnDataSource
        ``x, y, width, height``: boxes drawn behind the nodes (e.g. chips holding cores).
    links : ColumnDataSource
        ``x0, y0, x1, y1, color, dash``: the network's links, drawn under everything.
    arrows : ColumnDataSource
        ``x0, y0, x1, y1, color, dash, width`` and the arrow value columns.
    bars : ColumnDataSource
        ``x, y, width, height, color``: small rectangles (e.g. a stacked bar per node).
    notes : ColumnDataSource
        ``x, y, text``: free text on the drawing (e.g. the name of a slice).
    """

    _NODE_COLUMNS = ("x", "y", "radius", "fill_color", "line_color", "label")
    _ARROW_COLUMNS = ("x0", "y0", "x1", "y1", "color", "dash", "width")

    def __init__(self, *, title: str = "", node_value_names: Sequence[str] = (),
                 arrow_value_names: Sequence[str] = (), value_formats: Mapping[str, str] | None = None,
                 x_range=None, y_range=None, max_width: int = 560, max_height: int = 480,
                 head_size: int = 9):
        self.node_value_names = tuple(node_value_names)
        self.arrow_value_names = tuple(arrow_value_names)
        self.max_width = int(max_width)
        self.max_height = int(max_height)
        self.nodes = ColumnDataSource({k: [] for k in (*self._NODE_COLUMNS, *self.node_value_names)})
        self.groups = ColumnDataSource({k: [] for k in ("x", "y", "width", "height")})
        self.links = ColumnDataSource({k: [] for k in ("x0", "y0", "x1", "y1", "color", "dash")})
        self.arrows = ColumnDataSource({k: [] for k in (*self._ARROW_COLUMNS, *self.arrow_value_names)})
        self.bars = ColumnDataSource({k: [] for k in ("x", "y", "width", "height", "color")})
        self.notes = ColumnDataSource({k: [] for k in ("x", "y", "text")})
        self.figure = figure(
            title=title, x_range=x_range or Range1d(-1, 1), y_range=y_range or Range1d(-1, 1),
            frame_width=self.max_width, frame_height=self.max_height,
            tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="right",
        )
        fig = self.figure
        fig.axis.visible = False
        fig.grid.visible = False
        fig.background_fill_color = "#fcfcfc"
        fig.rect(x="x", y="y", width="width", height="height", source=self.groups,
                 fill_color="#eeeeee", line_color="#bbbbbb")
        fig.segment(x0="x0", y0="y0", x1="x1", y1="y1", source=self.links,
                    line_color="color", line_dash="dash", line_width=1.5)
        self.node_renderer = fig.circle(
            x="x", y="y", radius="radius", source=self.nodes, fill_color="fill_color",
            line_color="line_color", line_width=1.2)
        fig.rect(x="x", y="y", width="width", height="height", source=self.bars,
                 fill_color="color", line_color=None)
        self.label_renderer = fig.text(
            x="x", y="y", text="label", source=self.nodes, text_align="center",
            text_baseline="middle", text_font_size="10px", text_color="#202020")
        self.arrow_renderer = fig.segment(
            x0="x0", y0="y0", x1="x1", y1="y1", source=self.arrows, line_color="color",
            line_dash="dash", line_width="width", line_cap="round")
        # Heads only: the shaft is the segment above (which the hover can pick).
        self.heads = Arrow(
            source=self.arrows, x_start="x0", y_start="y0", x_end="x1", y_end="y1",
            line_alpha=0.0, start=None,
            end=VeeHead(size=head_size, fill_color={"field": "color"}, line_color={"field": "color"}))
        fig.add_layout(self.heads)
        fig.text(x="x", y="y", text="text", source=self.notes, text_align="left",
                 text_baseline="bottom", text_font_size="11px", text_color="#555555")
        formats = dict(value_formats or {})

        def tooltip(name):
            return (name, f"@{{{name}}}{formats.get(name, '')}")

        fig.add_tools(HoverTool(renderers=[self.node_renderer], tooltips=[
            ("node", "@label"), *[tooltip(n) for n in self.node_value_names]]))
        if self.arrow_value_names:
            fig.add_tools(HoverTool(renderers=[self.arrow_renderer], line_policy="interp",
                                    tooltips=[tooltip(n) for n in self.arrow_value_names]))

    @staticmethod
    def _columns(data: Mapping[str, Any], required: Sequence[str], optional: Mapping[str, Any],
                 what: str) -> dict[str, Any]:
        data = dict(data)
        n = len(next(iter(data.values()))) if data else 0
        for name, default in optional.items():
            data.setdefault(name, [default] * n)
        missing = [name for name in required if name not in data]
        if missing:
            raise ValueError(f"{what} data lacks columns {missing}")
        lengths = {name: len(values) for name, values in data.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{what} columns have different lengths: {lengths}")
        return {name: _as_column(values) for name, values in data.items()}

    def set_graph(self, nodes: Mapping[str, Any], links: Mapping[str, Any],
                  groups: Mapping[str, Any] | None = None, *, notes: Mapping[str, Any] | None = None,
                  show_labels: bool = True, extent: tuple[np.ndarray, np.ndarray] | None = None, pad: float = 0.5) -> None:
        """Draw a new network and fit the view to it.

        Parameters
        ----------
        nodes : mapping of str to array
            ``x, y, radius`` (``fill_color``, ``line_color``, ``label`` optional) and
            every node value column.
        links : mapping of str to array
            ``x0, y0, x1, y1`` (``color``, ``dash`` optional).
        groups : mapping of str to array, optional
            ``x, y, width, height`` boxes.
        notes : mapping of str to array, optional
            ``x, y, text``: text drawn with its bottom-left corner at ``(x, y)``.
        show_labels : bool
            Draw the node labels (turn off for crowded graphs; the hover shows them).
        extent : (xs, ys), optional
            Extra points that must stay in view (e.g. arrow stubs); the nodes, links
            and groups are always included.
        pad : float
            Margin around everything, in data units.
        """
        node_data = self._columns(nodes, ("x", "y", "radius", *self.node_value_names),
                                  {"fill_color": "#ffffff", "line_color": "#444444", "label": ""},
                                  "node")
        link_data = self._columns(links, ("x0", "y0", "x1", "y1"),
                                  {"color": "#9a9a9a", "dash": "solid"}, "link")
        group_data = self._columns(groups or {"x": [], "y": [], "width": [], "height": []},
                                   ("x", "y", "width", "height"), {}, "group")
        self.nodes.data = node_data
        self.links.data = link_data
        self.groups.data = group_data
        self.notes.data = self._columns(notes or {"x": [], "y": [], "text": []},
                                        ("x", "y", "text"), {}, "note")
        self.arrows.data = {k: [] for k in (*self._ARROW_COLUMNS, *self.arrow_value_names)}
        self.bars.data = {k: [] for k in ("x", "y", "width", "height", "color")}
        self.label_renderer.visible = bool(show_labels)
        x = np.asarray(node_data["x"], dtype=float)
        y = np.asarray(node_data["y"], dtype=float)
        r = np.asarray(node_data["radius"], dtype=float)
        gx = np.asarray(group_data["x"], dtype=float)
        gy = np.asarray(group_data["y"], dtype=float)
        gw = np.asarray(group_data["width"], dtype=float) / 2
        gh = np.asarray(group_data["height"], dtype=float) / 2
        xs = [x - r, x + r, gx - gw, gx + gw, link_data["x0"], link_data["x1"]]
        ys = [y - r, y + r, gy - gh, gy + gh, link_data["y0"], link_data["y1"]]
        if extent is not None:
            xs.append(np.asarray(extent[0], dtype=float))
            ys.append(np.asarray(extent[1], dtype=float))
        self.fit(np.concatenate([np.asarray(a, dtype=float).ravel() for a in xs]),
                 np.concatenate([np.asarray(a, dtype=float).ravel() for a in ys]), pad=pad)

    def fit(self, xs: np.ndarray, ys: np.ndarray, *, pad: float = 0.5) -> None:
        """Set ranges and frame size so that every point shows, at equal x/y scale."""
        (x0, x1, y0, y1), width, height = fit_equal_aspect(
            xs, ys, pad=pad, max_width=self.max_width, max_height=self.max_height)
        fig = self.figure
        fig.x_range.start, fig.x_range.end = x0, x1
        fig.y_range.start, fig.y_range.end = y0, y1
        fig.frame_width, fig.frame_height = width, height

    def set_arrows(self, data: Mapping[str, Any]) -> None:
        """Replace the arrows (``x0, y0, x1, y1``; ``color``, ``dash``, ``width`` optional)."""
        self.arrows.data = self._columns(data, ("x0", "y0", "x1", "y1", *self.arrow_value_names),
                                         {"color": "#333333", "dash": "solid", "width": 2.0},
                                         "arrow")

    def set_bars(self, data: Mapping[str, Any]) -> None:
        """Replace the small rectangles (``x, y, width, height, color``)."""
        self.bars.data = self._columns(data, ("x", "y", "width", "height", "color"), {}, "bar")

    def update_nodes(self, **columns: Any) -> None:
        """Replace some node columns (same length as the nodes), e.g. ``fill_color``."""
        n = len(self.nodes.data["x"])
        for name, values in columns.items():
            if len(values) != n:
                raise ValueError(f"node column {name!r} has {len(values)} values for {n} nodes")
        self.nodes.data.update({name: _as_column(values) for name, values in columns.items()})


class Gantt:
    """Intervals on horizontal lanes against time, with a marker per lane.

    Lane ``i`` is drawn at ``y = -i`` (first lane on top) and labelled with its name.
    Use it for any timeline: the steps of a collective, pipeline stages per device.

    Parameters
    ----------
    title : str
    value_names : sequence of str
        Extra interval columns shown in the hover.
    x_axis_label : str
    width : int
        Frame width in pixels.
    lane_height : int
        Pixels per lane.

    Attributes
    ----------
    figure : bokeh.plotting.figure
    bars : ColumnDataSource
        ``lane, left, right, color`` and the value columns (``lane`` = lane index).
    highlight : ColumnDataSource
        ``lane, left, right``: intervals drawn with a thick outline (e.g. the current step).
    marker : ColumnDataSource
        ``lane, x``: a vertical tick per lane (e.g. the time reached so far).
    lane_labels : ColumnDataSource
        ``lane, x, text``: text at the end of each lane (e.g. the total time).
    """

    def __init__(self, *, title: str = "", value_names: Sequence[str] = (),
                 x_axis_label: str = "time", width: int = 1100, lane_height: int = 46):
        self.value_names = tuple(value_names)
        self.lane_height = int(lane_height)
        self.bars = ColumnDataSource({k: [] for k in ("lane", "top", "bottom", "left", "right",
                                                       "color", *self.value_names)})
        self.highlight = ColumnDataSource({k: [] for k in ("top", "bottom", "left", "right")})
        self.marker = ColumnDataSource({k: [] for k in ("x", "y0", "y1")})
        self.lane_labels = ColumnDataSource({k: [] for k in ("x", "y", "text")})
        self.figure = figure(title=title, x_range=Range1d(0, 1), y_range=Range1d(-0.6, 0.6),
                             frame_width=int(width), frame_height=self.lane_height,
                             tools="xpan,xwheel_zoom,reset,save", toolbar_location="right",
                             x_axis_label=x_axis_label)
        fig = self.figure
        fig.ygrid.visible = False
        self._lane_ticks = FixedTicker(ticks=[])
        fig.yaxis.ticker = self._lane_ticks
        bars = fig.quad(left="left", right="right", top="top", bottom="bottom", source=self.bars,
                        fill_color="color", line_color="#ffffff", line_width=0.5)
        fig.quad(left="left", right="right", top="top", bottom="bottom", source=self.highlight,
                 fill_color=None, line_color="#111111", line_width=2.5)
        fig.segment(x0="x", y0="y0", x1="x", y1="y1", source=self.marker,
                    line_color="#d62728", line_width=3)
        fig.text(x="x", y="y", text="text", source=self.lane_labels, text_baseline="middle",
                 text_font_size="11px", x_offset=6)
        if self.value_names:
            fig.add_tools(HoverTool(renderers=[bars], tooltips=[(n, f"@{{{n}}}")
                                                                for n in self.value_names]))

    def set_lanes(self, names: Sequence[str], *, x_end: float, label_room: float = 0.14) -> None:
        """Name the lanes (top to bottom) and set the time axis to ``[0, x_end]``.

        ``label_room`` adds that fraction of ``x_end`` on the right for the lane labels.
        """
        n = len(names)
        fig = self.figure
        self._lane_ticks.ticks = [-i for i in range(n)]
        fig.yaxis.major_label_overrides = {-i: str(name) for i, name in enumerate(names)}
        fig.y_range.start, fig.y_range.end = -(n - 1) - 0.6, 0.6
        fig.frame_height = max(self.lane_height * n, 40)
        end = float(x_end) if x_end > 0 else 1.0
        fig.x_range.start, fig.x_range.end = 0.0, end * (1 + label_room)

    @staticmethod
    def _rows(lane) -> tuple[np.ndarray, np.ndarray]:
        lane = np.asarray(lane, dtype=float)
        return -lane + 0.38, -lane - 0.38

    def set_bars(self, data: Mapping[str, Any]) -> None:
        """Replace the intervals: ``lane, left, right, color`` and the value columns."""
        data = dict(data)
        missing = [k for k in ("lane", "left", "right", "color", *self.value_names) if k not in data]
        if missing:
            raise ValueError(f"Gantt bars lack columns {missing}")
        data["top"], data["bottom"] = self._rows(data["lane"])
        self.bars.data = {k: _as_column(v) for k, v in data.items()}

    def set_marker(self, lanes, x, *, highlight_left=None, highlight_right=None,
                   highlight_lanes=None) -> None:
        """Put the per-lane tick at time ``x`` and outline the given intervals."""
        top, bottom = self._rows(lanes)
        self.marker.data = {"x": np.asarray(x, dtype=float), "y0": bottom - 0.08, "y1": top + 0.08}
        if highlight_left is None:
            self.highlight.data = {k: [] for k in ("top", "bottom", "left", "right")}
        else:
            h_top, h_bottom = self._rows(highlight_lanes if highlight_lanes is not None else lanes)
            self.highlight.data = {"top": h_top, "bottom": h_bottom,
                                   "left": np.asarray(highlight_left, dtype=float),
                                   "right": np.asarray(highlight_right, dtype=float)}

    def set_lane_labels(self, lanes, x, text: Sequence[str]) -> None:
        """Text at time ``x`` on each lane (e.g. the lane's total)."""
        self.lane_labels.data = {"x": np.asarray(x, dtype=float), "y": -np.asarray(lanes, dtype=float),
                                 "text": list(text)}


__all__ += ["PROGRESS_RAMP", "ramp_colors", "arrow_segments", "fit_equal_aspect",
            "NodeLinkGraph", "Gantt"]


# ======================================================================================
# Bar charts and heatmaps of counts (appended for the load-skew explorer; generic).
# ======================================================================================

from bokeh import palettes as _palettes  # noqa: E402  (appended section: keep the top untouched)
from bokeh.core.properties import field as _field  # noqa: E402
from bokeh.core.properties import value as _value  # noqa: E402
from bokeh.models import ColorBar as _ColorBar  # noqa: E402
from bokeh.models import Legend as _Legend  # noqa: E402
from bokeh.models import LegendItem as _LegendItem  # noqa: E402
from bokeh.models import NumeralTickFormatter as _NumeralTickFormatter  # noqa: E402

#: Color of reference lines such as a configured limit.
LIMIT_COLOR = "#d62728"
#: Sequential palette of :class:`Heatmap` (perceptually uniform, colorblind safe).
HEATMAP_PALETTE: tuple[str, ...] = tuple(_palettes.Viridis256)


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

    Attributes
    ----------
    figure : bokeh.plotting.figure
    cells : ColumnDataSource
        Rect path: ``x, y, row, col, value, label, text_color``, one row per cell
        (row-major). Empty on the image path.
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
                 min_width: int = 240, min_height: int = 80):
        self.value_name = value_name
        self.palette = tuple(palette)
        self.highlight_color = highlight_color
        self.max_rect_cells = int(max_rect_cells)
        self.max_width, self.max_height = int(max_width), int(max_height)
        self.max_cell_px, self.min_label_cell_px = int(max_cell_px), int(min_label_cell_px)
        self.min_width, self.min_height = int(min_width), int(min_height)
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
        self.text_renderer = fig.text(x="x", y="y", text="label", source=self.cells, text_color="text_color",
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
            self.text_renderer.visible = cell_px >= self.min_label_cell_px
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
            self.text_renderer.visible = False
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


def columns_table_html(header: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> str:
    """A compact HTML table with a header row (values formatted as in :func:`summary_table_html`)."""
    head = "".join(f"<th style='text-align:left;padding:1px 10px 1px 0;font-weight:600'>{html.escape(str(h))}</th>"
                   for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td style='padding:1px 10px 1px 0;font-family:monospace'>"
                         f"{html.escape(_format_value(v))}</td>" for v in r) + "</tr>"
        for r in rows)
    caption = (f"<caption style='text-align:left;font-weight:700;padding-bottom:4px'>"
               f"{html.escape(title)}</caption>") if title else ""
    return (f"<table style='border-collapse:collapse;font-size:12px'>{caption}<tr>{head}</tr>{body}</table>")


__all__ += ["LIMIT_COLOR", "HEATMAP_PALETTE", "BarChart", "Heatmap", "columns_table_html"]


# ======================================================================================
# Stepped stacked areas against a capacity, byte formatting, linked selections
# (appended for the memory timeline; generic: any "what is live at each step" chart).
# ======================================================================================

from bokeh.models import CustomJS as _CustomJS  # noqa: E402  (appended section: keep the top untouched)

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: float) -> str:
    """Bytes in binary units with two decimals: ``format_bytes(1536) == '1.50 KiB'``.

    Examples
    --------
    >>> format_bytes(1536), format_bytes(100), format_bytes(3 * 2**30)
    ('1.50 KiB', '100 B', '3.00 GiB')
    """
    n = float(n)
    magnitude, unit = abs(n), 0
    while magnitude >= 1024 and unit < len(_BYTE_UNITS) - 1:
        magnitude /= 1024
        unit += 1
    sign = "-" if n < 0 else ""
    if unit == 0:
        return f"{sign}{round(magnitude)} B"
    return f"{sign}{magnitude:.2f} {_BYTE_UNITS[unit]}"


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


__all__ += ["format_bytes", "bytes_tick_formatter", "bytes_ticker", "link_selection", "StackedAreaChart"]
