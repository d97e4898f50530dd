"""Grids of categorical cells and 1-D address strips.

:class:`CellGrid` draws rect cells with labels when small, one image glyph with hover
when large; :class:`AddressStrip` draws a 1-D buffer in address order wrapped into rows.

Grid convention: row 0 is at the top. Row ``r`` spans ``y`` in ``[-(r+1), -r]`` and
column ``c`` spans ``x`` in ``[c, c+1]``; the tick formatters print row/column numbers.
Negative ``y`` is used instead of a flipped range because bokeh's image hover has had
bugs on flipped ranges (bokeh issues #7959, #8778, #13555).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from bokeh.models import (
    BasicTicker,
    CDSView,
    ColumnDataSource,
    CustomJSTickFormatter,
    FixedTicker,
    GroupFilter,
    HoverTool,
    LinearColorMapper,
    Range1d,
)
from bokeh.plotting import figure

from scwork.widgets._colors import CATEGORY_PALETTE, PADDING_COLOR, PADDING_HATCH, category_colors, text_colors

__all__ = ["CellGrid", "strip_width", "AddressStrip", "label_font_px", "MIN_LABEL_FONT_PX", "show_labels"]


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
    rect_renderer, hatch_renderer : GlyphRenderer
        The rect cells, and the hatch over the empty ones (None without ``empty_hatch``).
    cells : ColumnDataSource
        Rect-path data, one row per drawn cell: ``x, y, row, col, category, color,
        text_color, hatch, label`` and the value columns. Empty on the image path.
    labels : ColumnDataSource
        The labels drawn: ``x, y, label, text_color`` of every cell while the labels
        fit their cells (rect path), empty otherwise.
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
        #: Characters of the longest label drawn (0: none): the labels are drawn only at a
        #: font size at which it fits its cell.
        self.label_chars = 0
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
            fill_color="color", line_color=None,
        )
        # The hatch over the empty cells is a layer of its own with one pattern (the
        # cells whose "hatch" column holds it): BokehJS makes a canvas per cell for a
        # pattern given per cell, hundreds of canvases on every redraw, even blank ones.
        self.hatch_renderer = None
        if empty_hatch is not None:
            self.hatch_renderer = fig.rect(
                x="x", y="y", width=0.94, height=0.94, source=self.cells,
                view=CDSView(filter=GroupFilter(column_name="hatch", group=empty_hatch)),
                fill_color=None, line_color=None, hatch_pattern=empty_hatch,
                hatch_color="#8a8a8a", hatch_alpha=0.7, hatch_scale=6,
            )
        # The labels drawn have a source of their own, filled only while they fit their
        # cells: BokehJS measures every text of a text glyph's source whenever its data
        # or font changes, drawn or not (1024 hidden labels per grid cost the page
        # hundreds of milliseconds per redraw).
        self.labels = ColumnDataSource({name: [] for name in _LABEL_COLUMNS})
        self.text_renderer = fig.text(
            x="x", y="y", text="label", source=self.labels, text_color="text_color",
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

    def _show_labels(self, visible: bool) -> None:
        """Draw the cells' labels (copied from :attr:`cells`) or none: the text renderer's source is empty then."""
        show_labels(self.text_renderer, self.labels, self.cells, visible)

    def _empty_image(self) -> dict[str, list]:
        columns = ["image", "x", "y", "dw", "dh", "row", "col", "category"]
        return {name: [] for name in (*columns, *self.value_names)}

    def set_rect_size(self, width: float, height: float) -> None:
        """Width and height (data units) of the drawn rect cells, hatch included."""
        for renderer in (self.rect_renderer, self.hatch_renderer):
            if renderer is not None:
                renderer.glyph.width, renderer.glyph.height = width, height

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
        self.label_chars = max((len(label) for label in data["label"]), default=0)
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
        # Labels must fit their cell: the font shrinks with the cell and with the longest
        # label (a zoomed 65536 x 65536 layout has 9-digit addresses), and labels that do
        # not fit at a readable size are not drawn (the hover shows every value).
        font_px = label_font_px(cell_px, self.label_chars)
        self.text_renderer.glyph.text_font_size = f"{max(font_px, MIN_LABEL_FONT_PX)}px"
        self._show_labels(self.has_labels and cell_px >= self.min_label_cell_px and font_px >= MIN_LABEL_FONT_PX)


#: Columns of :attr:`CellGrid.labels`, the labels drawn (a copy of those of the cells).
_LABEL_COLUMNS = ("x", "y", "label", "text_color")


def show_labels(renderer, labels, cells, visible: bool) -> None:
    """Show the ``label`` column of source ``cells`` with text ``renderer`` (whose source is ``labels``), or none.

    The text renderer's source holds ``x, y, label, text_color`` copied from ``cells``
    while the labels are drawn and nothing otherwise: BokehJS measures every text of a
    text glyph's source whenever its data or font changes, drawn or not.
    """
    renderer.visible = visible
    if visible:
        labels.data = {name: cells.data[name] for name in _LABEL_COLUMNS}
    elif len(labels.data["x"]):
        labels.data = {name: [] for name in _LABEL_COLUMNS}

#: Smallest label font drawn, in pixels; smaller labels are left to the hover.
MIN_LABEL_FONT_PX = 6
#: Width of one digit in pixels per pixel of font size (bokeh's default sans-serif
#: font; its digits are about 0.55 em wide, 0.6 leaves room for a comma or a minus).
_DIGIT_EM = 0.6


def label_font_px(cell_px: float, chars: int) -> int:
    """Font size (px) of the labels of ``chars`` characters in square cells of ``cell_px``; 0 when none fits.

    The font follows the cell (38% of it, 6 to 12 px, so "1023" fits a 14 px cell) and
    shrinks further until the longest label fits across the cell less 2 px on each side
    (a digit is about 0.6 em). Below :data:`MIN_LABEL_FONT_PX` the label does not fit
    at a readable size: the grids do not draw it, the hover shows it.
    """
    room = cell_px - 4
    font = max(MIN_LABEL_FONT_PX, min(12, cell_px * 0.38))
    if chars:
        font = min(font, room / (_DIGIT_EM * chars))
    return int(font) if font >= MIN_LABEL_FONT_PX else 0


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
