"""A zoomable categorical grid: draws only the window in view, at the detail that fits.

:class:`ZoomGrid` is a :class:`~scwork.widgets._bokeh.CellGrid` whose data covers a
rectangle of a (possibly huge) grid in *grid coordinates*: each drawn cell may stand
for a block of ``block_rows x block_cols`` grid cells. The figure's ranges span the
whole grid; when the user pans or zooms, the owner recomputes the visible rectangle
(``visible_window``) and draws it again with :meth:`ZoomGrid.show`, so a 65536 x
65536 layout shows tiles at the top level and single elements when zoomed in, and
only ever holds what is on screen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from scwork.widgets._cells import MIN_LABEL_FONT_PX, CellGrid, _as_column, label_font_px
from scwork.widgets._colors import category_colors, text_colors

__all__ = ["ZoomGrid"]


class ZoomGrid(CellGrid):
    """A :class:`CellGrid` over a window of a larger grid (see the module docstring).

    Attributes
    ----------
    extent : tuple of int
        ``(rows, cols)`` of the whole grid the ranges span.
    window : tuple of int
        ``(row_start, row_stop, col_start, col_stop)`` of the data drawn now.
    block : tuple of int
        Grid cells per drawn cell, ``(block_rows, block_cols)``.
    """

    def __init__(self, **options):
        super().__init__(**options)
        self.extent = (0, 0)
        self.window = (0, 0, 0, 0)
        self.block = (1, 1)

    def update(self, categories: np.ndarray, **kwargs) -> None:
        """Draw a whole (small) grid cell by cell, as :meth:`CellGrid.update` does."""
        self.block = (1, 1)
        self.set_rect_size(0.94, 0.94)
        super().update(categories, **kwargs)
        self.extent = self.shape
        self.window = (0, self.shape[0], 0, self.shape[1])

    def set_extent(self, n_rows: int, n_cols: int) -> None:
        """A new whole grid: size the frame for it and show all of it."""
        self.extent = (int(n_rows), int(n_cols))
        cell_px = min(self.max_width / max(n_cols, 1), self.max_height / max(n_rows, 1), self.max_cell_px)
        fig = self.figure
        fig.frame_width = max(int(round(cell_px * n_cols)), 160)
        fig.frame_height = max(int(round(cell_px * n_rows)), 120)
        fig.x_range.start, fig.x_range.end = 0, max(n_cols, 1)
        fig.y_range.start, fig.y_range.end = -max(n_rows, 1), 0

    def visible_window(self) -> tuple[int, int, int, int]:
        """``(row_start, row_stop, col_start, col_stop)`` of the grid inside the ranges."""
        fig = self.figure
        n_rows, n_cols = self.extent
        x0, x1 = sorted((fig.x_range.start, fig.x_range.end))
        y0, y1 = sorted((fig.y_range.start, fig.y_range.end))
        col_start = min(max(int(math.floor(x0)), 0), n_cols)
        col_stop = min(max(int(math.ceil(x1)), col_start), n_cols)
        row_start = min(max(int(math.floor(-y1)), 0), n_rows)
        row_stop = min(max(int(math.ceil(-y0)), row_start), n_rows)
        return row_start, row_stop, col_start, col_stop

    def show(self, categories: np.ndarray, *, row_starts: np.ndarray, col_starts: np.ndarray,
             block: tuple[int, int] = (1, 1), empty: np.ndarray | None = None,
             labels: np.ndarray | None = None, values: Mapping[str, np.ndarray] | None = None,
             title: str | None = None) -> None:
        """Draw cells whose top-left grid coordinates are ``row_starts x col_starts``.

        Each drawn cell covers ``block`` grid cells (clipped at the grid's edge).
        Arguments are as for :meth:`CellGrid.update`; the hover's ``row``/``col``
        show grid coordinates. The ranges are left as they are (the user's zoom).
        """
        categories = np.asarray(categories)
        values = {name: np.asarray(values[name]) for name in self.value_names} if values else {}
        missing = set(self.value_names) - set(values)
        if missing:
            raise ValueError(f"missing value arrays {sorted(missing)}")
        empty = (categories == -1) if empty is None else (np.asarray(empty, bool) | (categories == -1))
        row_starts = np.asarray(row_starts, dtype=np.int64)
        col_starts = np.asarray(col_starts, dtype=np.int64)
        self.block = (int(block[0]), int(block[1]))
        n_rows, n_cols = self.extent
        if categories.size:
            self.window = (int(row_starts[0]), int(min(row_starts[-1] + block[0], n_rows)),
                           int(col_starts[0]), int(min(col_starts[-1] + block[1], n_cols)))
        else:
            self.window = (0, 0, 0, 0)
        if title is not None:
            self.figure.title.text = title
        if categories.size <= self.max_rect_cells:
            self._show_rects(categories, empty, labels, values, row_starts, col_starts)
        else:
            self._show_image(categories, empty, values, row_starts, col_starts)
        self._fit_labels()

    def _show_rects(self, categories, empty, labels, values, row_starts, col_starts) -> None:
        rows = np.broadcast_to(row_starts[:, None], categories.shape).ravel()
        cols = np.broadcast_to(col_starts[None, :], categories.shape).ravel()
        n_rows, n_cols = self.extent
        heights = np.minimum(rows + self.block[0], n_rows) - rows
        widths = np.minimum(cols + self.block[1], n_cols) - cols
        color_id = np.where(empty.ravel(), -1, categories.ravel())
        data = {
            "x": cols + widths / 2, "y": -(rows + heights / 2),
            "row": _as_column(rows), "col": _as_column(cols),
            "category": _as_column(categories.ravel()),
            "color": category_colors(color_id, palette=self.palette, empty_color=self.empty_color),
            "text_color": text_colors(color_id, palette=self.palette, empty_color=self.empty_color),
            "hatch": np.where(color_id == -1, self.empty_hatch or " ", " ").astype(object),
            "label": (np.full(color_id.shape, "", dtype=object) if labels is None
                      else np.array([str(v) for v in np.asarray(labels).ravel()], dtype=object)),
        }
        for name in self.value_names:
            data[name] = _as_column(values[name].ravel())
        self.image.data = self._empty_image()
        self.cells.data = data
        # Rect sizes follow the block (a block of 8 x 128 cells is drawn 8 x 128 wide).
        self.set_rect_size(0.94 * self.block[1], 0.94 * self.block[0])
        self.rect_renderer.visible = True
        self.has_labels = labels is not None
        self.label_chars = max((len(label) for label in data["label"]), default=0)
        self.image_renderer.visible = False
        self.figure.xaxis.ticker = self._auto_ticks_x
        self.figure.yaxis.ticker = self._auto_ticks_y

    def _show_image(self, categories, empty, values, row_starts, col_starts) -> None:
        n_colors = len(self.palette)
        color_index = np.where(empty | (categories < 0), n_colors, categories % n_colors).astype(np.float32)
        color_index[categories <= -2] = np.nan
        rows = np.broadcast_to(row_starts[:, None], categories.shape)
        cols = np.broadcast_to(col_starts[None, :], categories.shape)
        r0, r1, c0, c1 = self.window
        # The image spans whole blocks; the last block may run past the grid's edge.
        height = len(row_starts) * self.block[0]
        width = len(col_starts) * self.block[1]
        self._set_image(color_index, rows, cols, categories, values, x=c0, y=-(r0 + height), dw=width, dh=height)

    def _fit_labels(self) -> None:
        """Labels only where they fit a drawn cell on screen; else hover only.

        A label fits when the longest one (e.g. a 9-digit address) does.
        """
        fig = self.figure
        span_x = abs(fig.x_range.end - fig.x_range.start) or 1
        span_y = abs(fig.y_range.end - fig.y_range.start) or 1
        # Cells are not square when zoomed: the label must fit the narrower side.
        cell_px = min(fig.frame_width / span_x * self.block[1], fig.frame_height / span_y * self.block[0])
        font_px = label_font_px(cell_px, self.label_chars)
        self.text_renderer.glyph.text_font_size = f"{max(font_px, MIN_LABEL_FONT_PX)}px"
        self._show_labels(self.has_labels and cell_px >= self.min_label_cell_px and font_px >= MIN_LABEL_FONT_PX)
