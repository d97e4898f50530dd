"""LayoutExplorer: see where every element of a tensor lives in memory.

Two modes:

- ``"xla"``: type an XLA shape with a tiled layout ([xla-tiled]), e.g.
  ``f32[3,5]{1,0:T(2,2)}``, and see (1) the logical view colored by first-level tile
  with each cell's linear address, padding hatched gray; (2) the buffer in address
  order, each address colored by the tile of the element stored there; (3) a summary
  of shapes, bytes and padding.
- ``"npu"``: pick an NCHW shape, dtype, Sophgo chip, layout kind and start lane
  ([tpu-mlir], local-memory layout) and see which (batch, channel) owns every EU row of every NPU lane, the
  strides in elements and bytes, and whether the tensor fits in local memory.

All numbers come from the engine (:func:`scwork.layout.parse`,
:func:`scwork.layout.npu.local_layout`); this module only arranges and draws them.

Examples
--------
>>> from scwork.widgets import LayoutExplorer            # doctest: +SKIP
>>> explorer = LayoutExplorer(text="bf16[16,256]{1,0:T(8,128)(2,1)}")  # doctest: +SKIP
>>> explorer                                             # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import ipywidgets
import numpy as np
import traitlets
from bokeh.events import RangesUpdate

from scwork import hardware, layout
from scwork.errors import LayoutError, ScworkError
from scwork.layout import npu
from scwork.layout.view import ViewGeometry, buffer_window, view_overview
from scwork.widgets import _bokeh
from scwork.widgets._display import figure_view
from scwork.widgets._panes import TextPane, hbox, vbox
from scwork.widgets._zoom import ZoomGrid

__all__ = ["LayoutExplorer", "PRESETS", "MAX_DRAWN_CELLS", "ZOOM_BLOCKS", "STRIP_WINDOW"]

#: Example layouts offered in the presets dropdown: (label, layout text).
PRESETS: tuple[tuple[str, str], ...] = (
    ("f32[3,5] T(2,2): the worked example of XLA's tiled layout doc", "f32[3,5]{1,0:T(2,2)}"),
    ("bf16[4,8] T(2,4)(2,1): tiling repeated", "bf16[4,8]{1,0:T(2,4)(2,1)}"),
    ("bf16[16,256] T(8,128)(2,1): TPU bf16 layout", "bf16[16,256]{1,0:T(8,128)(2,1)}"),
    ("s4[8,128] T(8,128)(2,1) E(4): int4", "s4[8,128]{1,0:T(8,128)(2,1)E(4)}"),
    ("f32[2,7,8,11,10] T(*,*,2,*,3): combined dims", "f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}"),
    ("bf16[512,512] T(8,128)(2,1): large", "bf16[512,512]{1,0:T(8,128)(2,1)}"),
)

#: Largest layout (view cells and buffer slots) drawn whole, cell by cell. Larger
#: layouts are drawn zoomable: an overview of tiles (or groups of tiles) that turns
#: into single elements as the user zooms in, computing only the visible window.
MAX_DRAWN_CELLS = 2**22

#: Most drawn cells (rows, cols) of the zoomable view; each stands for a block of
#: the layout when the window is larger.
ZOOM_BLOCKS = (256, 512)

#: Addresses shown in the memory strip of a zoomable layout: the buffer from the
#: first visible cell's address on.
STRIP_WINDOW = 16384

_DEFAULT_TEXT = PRESETS[0][1]


class LayoutExplorer(_bokeh.SyncedDisplay, ipywidgets.VBox):
    """Interactive view of XLA tiled layouts and Sophgo NPU local-memory layouts.

    Parameters
    ----------
    **kwargs
        Initial values of any trait below (``text``, ``mode``, ``npu_shape``...) and
        the usual ``ipywidgets.VBox`` arguments.

    Attributes
    ----------
    mode : {"xla", "npu"}
        Which explorer is shown.
    text : str
        XLA shape-with-layout text (e.g. ``"f32[3,5]{1,0:T(2,2)}"``).
    error : str
        The message of the last invalid input of the current mode; empty when the
        input is valid. Read-only. The plots keep the last valid state meanwhile.
    npu_shape : tuple of 4 int
        NCHW shape of the NPU tensor.
    npu_dtype : str
        Element type (``"f16"``, ``"f32"``, ``"s8"``... and aliases such as ``"fp16"``).
    npu_chip : str
        Sophgo chip name (``scwork.hardware.names(kind="npu")``).
    npu_num, npu_eu_bytes : int or None
        Overrides of the chip's lane count and EU row bytes; None uses the chip's.
        Choosing another chip in the dropdown resets both.
    npu_kind : {"aligned", "compact", "line_aligned"}
        Local-memory layout kind.
    npu_start_lane : int
        Lane of channel 0.
    shape : scwork.layout.Shape or None
        The last valid XLA shape drawn.
    npu_layout : scwork.layout.npu.LocalLayout or None
        The last valid NPU layout drawn.
    summary : dict
        The engine's ``summary()`` of the current mode's layout.
    sources : dict of str to bokeh ColumnDataSource
        ``grid_cells``/``grid_image`` (logical view), ``strip_cells``/``strip_image``
        (memory in address order), ``lane_cells``/``lane_image`` (NPU lanes x rows).
        ``*_cells`` hold one row per cell on the small-grid path, ``*_image`` one 2-D
        image on the large-grid path; the unused one of each pair is empty.
    figures : dict of str to bokeh figure
        ``grid``, ``strip`` and ``lanes``.
    controls : dict of str to ipywidgets.Widget
        The input widgets: ``mode``, ``preset``, ``text``, ``n``, ``c``, ``h``, ``w``,
        ``dtype``, ``chip``, ``npu_num``, ``eu_bytes``, ``kind``, ``start_lane``.

    Examples
    --------
    >>> ex = LayoutExplorer(text="f32[3,5]{1,0:T(2,2)}")        # doctest: +SKIP
    >>> ex.summary["padded_elements"]                            # doctest: +SKIP
    24
    >>> ex.text = "f32[3,5]{1,0:T(2,2)"   # typo: ex.error explains, plots unchanged  # doctest: +SKIP
    """

    mode = traitlets.Enum(("xla", "npu"), default_value="xla")
    text = traitlets.Unicode(_DEFAULT_TEXT)
    error = traitlets.Unicode("", read_only=True)
    npu_shape = traitlets.Tuple(traitlets.Int(), traitlets.Int(), traitlets.Int(), traitlets.Int(),
                                default_value=(2, 3, 4, 5))
    npu_dtype = traitlets.Unicode("f16")
    npu_chip = traitlets.Unicode("bm1684x")
    npu_num = traitlets.Int(None, allow_none=True)
    npu_eu_bytes = traitlets.Int(None, allow_none=True)
    npu_kind = traitlets.Enum(npu.LAYOUT_KINDS, default_value="aligned")
    npu_start_lane = traitlets.Int(0)

    _XLA_TRAITS = ("text",)
    _NPU_TRAITS = ("npu_shape", "npu_dtype", "npu_chip", "npu_num", "npu_eu_bytes",
                   "npu_kind", "npu_start_lane")

    def __init__(self, **kwargs: Any):
        # Trait values are applied after the views exist, so observers never see a
        # half-built widget; everything else goes to VBox.
        state = {name: kwargs.pop(name) for name in ("mode", *self._XLA_TRAITS, *self._NPU_TRAITS)
                 if name in kwargs}
        super().__init__(**kwargs)
        self.shape = None
        self.npu_layout = None
        self.summary: dict[str, Any] = {}
        self._errors = {"xla": "", "npu": ""}
        self._stale = {"xla": True, "npu": True}
        self._syncing = False

        self._build_views()
        self._build_controls()
        for name, value in state.items():
            setattr(self, name, value)
        self.observe(self._on_xla_trait, names=list(self._XLA_TRAITS))
        self.observe(self._on_npu_trait, names=list(self._NPU_TRAITS))
        self.observe(self._on_mode, names=["mode"])
        self._refresh()

    # -- construction --------------------------------------------------------------

    def _build_views(self) -> None:
        self._grid = ZoomGrid(
            title="Logical view", category_name="tile", value_names=("address", "padding"),
            max_width=960, max_height=600, x_axis_label="view column", y_axis_label="view row",
        )
        self._strip = _bokeh.AddressStrip(
            title="Memory in address order", category_name="tile",
            value_names=("element", "view row", "view col"), max_width=960, max_height=300,
        )
        strip_figure = self._strip.figure
        # Room for the y-axis title and readable tick labels (they were clipped / ~7 px).
        strip_figure.min_border_left = 72
        for fig in (strip_figure, self._grid.figure):
            fig.axis.major_label_text_font_size = "11px"
            fig.axis.axis_label_text_font_size = "12px"
        self._lanes = _bokeh.CellGrid(
            title="NPU local memory", category_name="channel",
            value_names=("batch", "used bytes", "owners", "row offset"),
            empty_color=_bokeh.EMPTY_COLOR, empty_hatch=None,
            x_axis_label="NPU lane", y_axis_label="EU row", max_width=960, max_height=520,
        )
        self._lanes.figure.axis.major_label_text_font_size = "11px"
        # The zoomable layout view redraws the window in view after a pan or zoom.
        self._zoomable = None
        self._grid.figure.on_event(RangesUpdate, self._on_ranges)
        # Texts are HTML panes, not bokeh Divs (see scwork.widgets._panes).
        # Captions wrap at the plots' width instead of pushing the summary off screen.
        self._grid_caption = TextPane(width=self._grid.max_width)
        self._strip_caption = TextPane(width=self._grid.max_width)
        self._xla_summary = TextPane(width=380)
        self._lanes_caption = TextPane()
        self._npu_summary = TextPane(width=420)
        # One bokeh view per figure: the grid and the strip share no bokeh model (a zoom
        # of the grid redraws the strip from Python, both changes in one batch), so a
        # size change re-lays out only its own small document.
        # Python learns the grid's ranges from the RangesUpdate events (_on_ranges).
        self._grid_view = figure_view(self._grid.figure)
        self._strip_view = figure_view(self._strip.figure)
        self._lanes_view = figure_view(self._lanes.figure)
        # One box per mode; the mode not shown is hidden (display: none).
        self._xla_view = vbox([
            hbox([vbox([self._grid_caption, self._grid_view]), self._xla_summary]),
            self._strip_caption, self._strip_view,
        ])
        self._npu_view = hbox([vbox([self._lanes_caption, self._lanes_view]), self._npu_summary])
        self._views = vbox([self._xla_view, self._npu_view])

        self.sources = {
            "grid_cells": self._grid.cells, "grid_image": self._grid.image,
            "strip_cells": self._strip.grid.cells, "strip_image": self._strip.grid.image,
            "lane_cells": self._lanes.cells, "lane_image": self._lanes.image,
        }
        self.figures = {"grid": self._grid.figure, "strip": self._strip.figure,
                        "lanes": self._lanes.figure}

    def _build_controls(self) -> None:
        W = ipywidgets.Layout
        self._mode_toggle = ipywidgets.ToggleButtons(
            options=[("XLA tiled layout", "xla"), ("Sophgo NPU local memory", "npu")],
            value=self.mode, style={"button_width": "auto"},
        )
        # link(source, target) copies source -> target first: the traits are the source.
        ipywidgets.link((self, "mode"), (self._mode_toggle, "value"))

        self._preset = ipywidgets.Dropdown(options=list(PRESETS), value=None,
                                           description="Preset", layout=W(width="430px"))
        # Parse on Enter (or when the box loses focus), not on every keystroke: a
        # half-typed layout is never drawn and typing stays responsive.
        self._text_box = ipywidgets.Text(description="Layout", continuous_update=False,
                                         placeholder="e.g. bf16[4096,4096]{1,0:T(8,128)(2,1)} then Enter",
                                         layout=W(width="640px"))
        ipywidgets.link((self, "text"), (self._text_box, "value"))
        self._preset.observe(self._on_preset, names="value")

        int_box = dict(layout=W(width="130px"), style={"description_width": "22px"})
        self._nchw = [ipywidgets.IntText(value=v, description=d, **int_box)
                      for v, d in zip(self.npu_shape, "NCHW")]
        self._dtype = ipywidgets.Dropdown(options=list(npu.DTYPE_SIZES), description="dtype",
                                          layout=W(width="170px"), style={"description_width": "40px"})
        self._chip = ipywidgets.Dropdown(options=hardware.names(kind="npu"), description="chip",
                                         layout=W(width="190px"), style={"description_width": "40px"})
        self._lane_count = ipywidgets.IntText(description="NPU lanes", layout=W(width="170px"),
                                              style={"description_width": "70px"})
        self._eu_bytes = ipywidgets.IntText(description="EU bytes", layout=W(width="170px"),
                                            style={"description_width": "70px"})
        self._kind = ipywidgets.Dropdown(options=list(npu.LAYOUT_KINDS), description="kind",
                                         layout=W(width="200px"), style={"description_width": "40px"})
        self._start_lane = ipywidgets.IntText(description="start lane", layout=W(width="170px"),
                                              style={"description_width": "70px"})
        for control in (*self._nchw, self._dtype, self._chip, self._lane_count,
                        self._eu_bytes, self._kind, self._start_lane):
            control.observe(self._on_npu_control, names="value")

        self._error_area = ipywidgets.HTML()
        self._xla_controls = ipywidgets.VBox([self._preset, self._text_box])
        self._npu_controls = ipywidgets.VBox([
            ipywidgets.HBox(self._nchw),
            ipywidgets.HBox([self._dtype, self._chip, self._lane_count, self._eu_bytes]),
            ipywidgets.HBox([self._kind, self._start_lane]),
        ])
        self.controls = {
            "mode": self._mode_toggle, "preset": self._preset, "text": self._text_box,
            **{name: box for name, box in zip("nchw", self._nchw)},
            "dtype": self._dtype, "chip": self._chip, "npu_num": self._lane_count,
            "eu_bytes": self._eu_bytes, "kind": self._kind, "start_lane": self._start_lane,
        }
        self.children = [self._mode_toggle, self._xla_controls, self._npu_controls,
                         self._error_area, self._views]
        self._sync_controls()

    # -- events ---------------------------------------------------------------------

    def _on_xla_trait(self, change) -> None:
        self._stale["xla"] = True
        self._sync_preset()
        if self.mode == "xla":
            self._refresh()

    def _on_npu_trait(self, change) -> None:
        self._stale["npu"] = True
        if self.mode == "npu":
            self._refresh()
        else:
            self._sync_controls()

    def _on_mode(self, change) -> None:
        self._refresh()

    def _on_preset(self, change) -> None:
        if change["new"] is not None and not self._syncing:
            self.text = change["new"]

    def _on_npu_control(self, change) -> None:
        # Controls echo the traits after every refresh; only user edits come through.
        if self._syncing:
            return
        owner = change["owner"]
        if owner in self._nchw:
            self.npu_shape = tuple(box.value for box in self._nchw)
        elif owner is self._dtype:
            self.npu_dtype = owner.value
        elif owner is self._chip:
            # A new chip brings its own lane count and EU width: drop the overrides.
            with self._one_refresh():
                self.npu_num = None
                self.npu_eu_bytes = None
                self.npu_chip = owner.value
        elif owner is self._lane_count:
            self.npu_num = owner.value
        elif owner is self._eu_bytes:
            self.npu_eu_bytes = owner.value
        elif owner is self._kind:
            self.npu_kind = owner.value
        elif owner is self._start_lane:
            self.npu_start_lane = owner.value

    @contextlib.contextmanager
    def _one_refresh(self):
        """Change several NPU traits with one redraw at the end."""
        self.unobserve(self._on_npu_trait, names=list(self._NPU_TRAITS))
        try:
            yield
        finally:
            self.observe(self._on_npu_trait, names=list(self._NPU_TRAITS))
            with _bokeh.batched_patches():
                self._on_npu_trait(None)

    # -- refresh --------------------------------------------------------------------

    def _refresh(self) -> None:
        """Recompute the current mode if its inputs changed, then show it."""
        if self._stale[self.mode]:
            if self.mode == "xla":
                self._refresh_xla()
            else:
                self._refresh_npu()
            self._stale[self.mode] = False
        shown = self.shape if self.mode == "xla" else self.npu_layout
        self.summary = shown.summary() if shown is not None else {}
        self.set_trait("error", self._errors[self.mode])
        message = self.error
        if message and shown is not None:
            # Never let the plots pass for the text in the box: say what they show.
            what = str(shown) if self.mode == "xla" else f"{shown.dtype} {tuple(shown.shape)} ({shown.kind})"
            message += f"\nThe plots still show the last valid layout: {what}"
        self._error_area.value = _bokeh.message_html(message, "error")
        is_xla = self.mode == "xla"
        for widget, visible in ((self._xla_controls, is_xla), (self._xla_view, is_xla),
                                (self._npu_controls, not is_xla), (self._npu_view, not is_xla)):
            widget.layout.display = None if visible else "none"
        self._sync_controls()

    def _refresh_xla(self) -> None:
        try:
            shape = layout.parse(self.text)
            arrays = None if self._is_large(shape) else self._xla_arrays(shape)
        except ScworkError as err:
            self._errors["xla"] = str(err)
            return
        self._errors["xla"] = ""
        self.shape = shape
        if arrays is None:
            self._draw_xla_zoomable(shape)
        else:
            self._zoomable = None
            self._draw_xla(shape, arrays)

    @staticmethod
    def _is_large(shape) -> bool:
        return max(math.prod(shape.padded_view_shape), shape.padded_elements) > MAX_DRAWN_CELLS

    def _refresh_npu(self) -> None:
        try:
            lay = npu.local_layout(
                self.npu_shape, self.npu_dtype, chip=self.npu_chip or None,
                npu_num=self.npu_num, eu_bytes=self.npu_eu_bytes, kind=self.npu_kind,
                start_lane=self.npu_start_lane,
            )
            n_rows = math.ceil(lay.bytes_per_lane / lay.eu_bytes)
            if n_rows * lay.npu_num > MAX_DRAWN_CELLS:
                raise LayoutError(
                    f"the lane map has {lay.npu_num} lanes x {n_rows:,} EU rows, more than the "
                    f"{MAX_DRAWN_CELLS:,} cells this explorer draws",
                    hint="use a smaller N, C, H or W; the engine (scwork.layout.npu) has no such limit",
                )
            occupancy = lay.occupancy()
        except ScworkError as err:
            self._errors["npu"] = str(err)
            return
        self._errors["npu"] = ""
        self.npu_layout = lay
        self._draw_npu(lay, occupancy)

    # -- XLA drawing ----------------------------------------------------------------

    @staticmethod
    def _xla_arrays(shape) -> dict[str, np.ndarray]:
        """The engine's maps of ``shape``, folded to 2-D, plus the address-order inverse.

        Raises LayoutError when the layout is too large to draw.
        """
        view = tuple(shape.padded_view_shape)
        n_cells = math.prod(view)
        if max(n_cells, shape.padded_elements) > MAX_DRAWN_CELLS:
            raise LayoutError(
                f"{shape} has {max(n_cells, shape.padded_elements):,} cells, more than the "
                f"{MAX_DRAWN_CELLS:,} this explorer draws",
                hint="try smaller dimensions; the engine (scwork.layout) has no such limit",
            )
        # Ranks > 2 fold to rows = product of the major view dims, cols = the most minor.
        n_cols = view[-1] if view else 1
        n_rows = n_cells // n_cols if n_cols else 0
        tile = np.asarray(shape.view_tile_map(), dtype=np.int64).reshape(n_rows, n_cols)
        address = np.asarray(shape.view_index_map(), dtype=np.int64).reshape(n_rows, n_cols)
        padding = np.asarray(shape.view_padding_mask(), dtype=bool).reshape(n_rows, n_cols)
        element = np.asarray(shape.address_map(), dtype=np.int64)

        # Invert the engine's view -> address map to know, for every address, which
        # view cell (and so which tile) it holds. Addresses no view cell maps to are
        # later-level or tail padding: no tile.
        n_addresses = element.size
        tile_at = np.full(n_addresses, -1, dtype=np.int64)
        cell_at = np.full(n_addresses, -1, dtype=np.int64)
        flat_address = address.ravel()
        inside = (flat_address >= 0) & (flat_address < n_addresses)
        tile_at[flat_address[inside]] = tile.ravel()[inside]
        cell_at[flat_address[inside]] = np.flatnonzero(inside)
        return {
            "tile": tile, "address": address, "padding": padding, "element": element,
            "tile_at": tile_at, "cell_at": cell_at,
        }

    def _draw_xla(self, shape, arrays: dict[str, np.ndarray]) -> None:
        tile, address, padding = arrays["tile"], arrays["address"], arrays["padding"]
        n_rows, n_cols = tile.shape
        self._grid.update(
            tile, empty=padding, labels=address,
            values={"address": address, "padding": padding.astype(np.int8)},
        )
        view = tuple(shape.padded_view_shape)
        folded = "" if len(view) <= 2 else f", folded to {n_rows} x {n_cols}"
        labels_note = ("labels: linear address" if self._grid.text_renderer.visible
                       else "hover a cell for its address")
        self._grid_caption.text = (
            f"<b>Logical view</b> {_dims(view)}{folded}: color = first-level tile, "
            f"gray hatched = padding, {labels_note}"
        )

        element, tile_at, cell_at = arrays["element"], arrays["tile_at"], arrays["cell_at"]
        is_padding = element < 0
        # Label strings only matter on the small (rect) path; skip them for big buffers.
        small = element.size <= self._strip.grid.max_rect_cells
        self._strip.update(
            tile_at, empty=is_padding,
            labels=np.where(is_padding, "", element.astype(str)).astype(object) if small else None,
            values={
                "element": element,
                "view row": np.where(cell_at >= 0, cell_at // max(n_cols, 1), -1),
                "view col": np.where(cell_at >= 0, cell_at % max(n_cols, 1), -1),
            },
        )
        self._fit_strip_axis()
        strip_note = ("labels: flat logical index of the element stored there"
                      if self._strip.grid.text_renderer.visible
                      else "hover an address for the element stored there")
        self._strip_caption.text = (
            f"<b>Memory in address order</b> ({element.size:,} addresses, "
            f"{self._strip.width} per row): color = tile of the stored element, "
            f"gray = padding, {strip_note}"
        )
        self._xla_summary.text = _bokeh.summary_table_html(
            self._xla_summary_rows(shape), title=str(shape))

    @staticmethod
    def _xla_summary_rows(shape) -> list[tuple[str, Any]]:
        info = shape.summary()
        rows = [
            ("dtype (bits per element)", f"{info['dtype']} ({info['element_bits']})"),
            ("logical shape", tuple(info["logical_shape"])),
            ("physical shape", tuple(info["physical_shape"])),
            ("tiled shape", tuple(info["tiled_shape"])),
            ("view (after * merges)", tuple(shape.view_shape)),
            ("padded view", tuple(shape.padded_view_shape)),
            ("elements / padded", f"{info['num_elements']:,} / {info['padded_elements']:,}"),
            ("unpadded bytes", info["unpadded_bytes"]),
            ("padded bytes", info["padded_bytes"]),
            ("padding", f"{100 * info['padding_fraction']:.1f} %"),
        ]
        # XLA's ShapeUtil::ArraySize uses only the first tile ([xla-tiled]): show it when
        # it tells a different story, and say when it cannot be computed ('*' tiles).
        xla_bytes = info.get("xla_array_size_bytes")
        if xla_bytes is None:
            rows.append(("XLA ArraySize (first tile)", "n/a for '*' tiles"))
        elif xla_bytes != info["padded_bytes"]:
            rows.append(("XLA ArraySize (first tile)", xla_bytes))
        return rows

    # -- zoomable XLA drawing (layouts too large to draw whole) ----------------------

    def zoom_to(self, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> None:
        """Show view rows ``rows`` and columns ``cols`` (``(start, stop)``; None: all).

        What the wheel and box zoom do in the browser, for scripts and tests. Only
        a zoomable (large) layout is redrawn at the new detail; a small one is drawn
        whole and only its ranges change.
        """
        fig = self._grid.figure
        n_rows, n_cols = self._grid.extent
        r0, r1 = rows if rows is not None else (0, n_rows)
        c0, c1 = cols if cols is not None else (0, n_cols)
        fig.x_range.start, fig.x_range.end = c0, c1
        fig.y_range.start, fig.y_range.end = -r1, -r0
        self._on_ranges(None)

    def _on_ranges(self, event) -> None:
        if self._zoomable is None or self.mode != "xla":
            return
        if event is not None and getattr(event, "x0", None) is not None:
            fig = self._grid.figure
            fig.x_range.start, fig.x_range.end = event.x0, event.x1
            fig.y_range.start, fig.y_range.end = event.y0, event.y1
        self._draw_xla_window(self._zoomable)

    def _draw_xla_zoomable(self, shape) -> None:
        geometry = ViewGeometry(shape)
        self._zoomable = shape
        self._grid.set_extent(geometry.n_rows, geometry.n_cols)
        self._draw_xla_window(shape)
        self._xla_summary.text = _bokeh.summary_table_html(
            self._xla_summary_rows(shape), title=str(shape))

    def _fit_strip_axis(self) -> None:
        # A strip of a few rows is too short for a long vertical title (it was clipped):
        # the caption says how many addresses a row holds.
        rows = self._strip.grid.shape[0]
        self._strip.figure.yaxis.axis_label = "row" if rows <= 6 else f"row ({self._strip.width} each)"

    def _draw_xla_window(self, shape) -> None:
        """Draw the visible window of a large layout at the detail that fits."""
        r0, r1, c0, c1 = self._grid.visible_window()
        overview = view_overview(shape, (r0, r1), (c0, c1), max_blocks=ZOOM_BLOCKS)
        level = overview.attrs["level"]
        block = (overview.attrs["block_rows"], overview.attrs["block_cols"])
        tile = overview["tile"].values
        address = overview["address"].values
        padding = overview["padding_fraction"].values
        labels = address if level == "elements" and tile.size <= self._grid.max_rect_cells else None
        self._grid.show(tile, row_starts=overview["row"].values, col_starts=overview["col"].values,
                        block=block, empty=padding >= 1.0, labels=labels,
                        values={"address": address, "padding": padding})
        view = tuple(shape.padded_view_shape)
        n_rows, n_cols = self._grid.extent
        folded = "" if len(view) <= 2 else f", folded to {n_rows:,} x {n_cols:,}"
        if level == "elements":
            what = "single elements: color = first-level tile, gray = padding"
        else:
            what = (f"{level}, {block[0]:,} x {block[1]:,} cells each: color = tile of each block's "
                    "first cell, gray = all padding, hover for the padding fraction; zoom in "
                    "(wheel or box zoom) to reach single elements")
        shown_rows = self._grid.window[1] - self._grid.window[0]
        shown_cols = self._grid.window[3] - self._grid.window[2]
        self._grid_caption.text = (
            f"<b>Logical view</b> {_dims(view)}{folded}: showing rows {self._grid.window[0]:,}-"
            f"{self._grid.window[1] - 1:,} and columns {self._grid.window[2]:,}-"
            f"{self._grid.window[3] - 1:,} ({shown_rows * shown_cols:,} cells) as {what}")

        # The strip: the buffer from the first visible cell's address on.
        first = int(address.flat[0]) if address.size else 0
        start = first - first % 64
        stop = min(start + STRIP_WINDOW, shape.padded_elements)
        window = buffer_window(shape, start, stop)
        element = window["element"].values
        small = element.size <= self._strip.grid.max_rect_cells
        self._strip.update(
            window["tile"].values, empty=element < 0,
            labels=np.where(element < 0, "", element.astype(str)).astype(object) if small else None,
            values={"element": element, "view row": window["view_row"].values,
                    "view col": window["view_col"].values},
            address_offset=start,
        )
        self._fit_strip_axis()
        self._strip_caption.text = (
            f"<b>Memory in address order</b>: addresses {start:,}-{stop - 1:,} of "
            f"{shape.padded_elements:,} (from the first visible cell on; {self._strip.width} per row): "
            "color = tile of the stored element, gray = padding, hover an address for the element")

    # -- NPU drawing ----------------------------------------------------------------

    def _draw_npu(self, lay, occupancy) -> None:
        # occupancy is (lane, row); draw memory rows downwards and lanes across.
        def grid(name):
            return np.asarray(occupancy[name].transpose("row", "lane").values)

        channel, batch = grid("channel"), grid("batch")
        row_offset = np.broadcast_to(
            np.asarray(occupancy["row_offset_bytes"].values)[:, None], channel.shape)
        labels = None
        if channel.size <= self._lanes.max_rect_cells:  # text only on the small path
            labels = np.where(channel >= 0, np.char.add(np.char.add(batch.astype(str), ","),
                                                        channel.astype(str)), "").astype(object)
        self._lanes.update(
            channel, labels=labels,
            values={"batch": batch, "used bytes": grid("used_bytes"), "owners": grid("owners"),
                    "row offset": row_offset},
        )
        _readable_frame(self._lanes)
        n, c, h, w = lay.shape
        self._lanes_caption.text = (
            f"<b>{lay.dtype} ({n}, {c}, {h}, {w}), {lay.kind}</b> on {lay.npu_num} lanes, "
            f"rows of {lay.eu_bytes} bytes: color = channel, label = batch,channel, blank = free"
        )
        self._npu_summary.text = self._npu_summary_html(lay)

    @staticmethod
    def _npu_summary_html(lay) -> str:
        info = lay.summary()
        strides = ", ".join(f"{k}={v}" for k, v in zip("nchw", info["strides_elements"]))
        strides_b = ", ".join(f"{k}={v}" for k, v in zip("nchw", info["strides_bytes"]))
        rows = [
            ("chip", info["chip"] or "(none)"),
            ("NPU lanes", info["npu_num"]),
            ("EU bytes / EU_NUM", f"{info['eu_bytes']} / {info['eu_num']}"),
            ("start lane", info["start_lane"]),
            ("strides (elements)", strides),
            ("strides (bytes)", strides_b),
            ("chip's stride unit", info["native_stride_unit"]),
            ("slots per batch", info["slots_per_batch"]),
            ("bytes per lane", info["bytes_per_lane"]),
            ("data bytes", info["data_bytes"]),
            ("reserved bytes (all lanes)", info["reserved_bytes"]),
            ("utilization", f"{100 * info['utilization']:.1f} %"),
        ]
        if "local_memory_bytes_per_lane" in info:
            rows.append(("local memory per lane", info["local_memory_bytes_per_lane"]))
        title = f"{info['dtype']} {tuple(info['shape'])} ({info['kind']})"
        out = _bokeh.summary_table_html(rows, title=title)
        if "fits" in info:
            if info["fits"]:
                out += _bokeh.message_html(
                    f"fits: {info['bytes_per_lane']:,} of "
                    f"{info['local_memory_bytes_per_lane']:,} bytes per lane", "ok")
            else:
                try:
                    lay.check_fits()
                    reason = "does not fit"
                except LayoutError as err:
                    reason = f"does not fit: {err}"
                out += _bokeh.message_html(reason, "error")
        for note in info.get("notes", []):
            out += _bokeh.message_html(note, "warning")
        return out

    # -- controls <- traits ----------------------------------------------------------

    def _sync_preset(self) -> None:
        presets = {text for _, text in PRESETS}
        with self._quiet():
            self._preset.value = self.text if self.text in presets else None

    def _sync_controls(self) -> None:
        """Show the current trait values (and the drawn layout's resolved values)."""
        lay = self.npu_layout
        with self._quiet():
            for box, value in zip(self._nchw, self.npu_shape):
                box.value = value
            # Show the canonical names the engine resolved (e.g. "fp16" -> "f16").
            dtype = lay.dtype if lay is not None and self._errors["npu"] == "" else self.npu_dtype
            if dtype in self._dtype.options:
                self._dtype.value = dtype
            chip = self.npu_chip.strip().lower()
            if chip in self._chip.options:
                self._chip.value = chip
            if lay is not None and self._errors["npu"] == "":
                self._lane_count.value = lay.npu_num
                self._eu_bytes.value = lay.eu_bytes
            else:
                self._set_chip_constants(chip)
            self._kind.value = self.npu_kind
            self._start_lane.value = self.npu_start_lane
        self._sync_preset()

    def _set_chip_constants(self, chip: str) -> None:
        try:
            info = hardware.get(chip)
        except ScworkError:
            return
        self._lane_count.value = self.npu_num if self.npu_num is not None else info.npu_num
        self._eu_bytes.value = self.npu_eu_bytes if self.npu_eu_bytes is not None else info.eu_bytes

    # -- export -----------------------------------------------------------------------

    def to_html(self, path, title: str | None = None):
        """Write the current mode's views to a standalone, offline HTML file.

        Parameters
        ----------
        path : str or pathlib.Path
        title : str, optional
            Page title; default names the layout shown.

        Returns
        -------
        pathlib.Path
            The file written (BokehJS is inlined: no CDN needed).
        """
        if self.mode == "xla":
            default_title = f"scwork layout: {self.shape}"
        else:
            lay = self.npu_layout
            default_title = (f"scwork NPU layout: {lay.dtype} {lay.shape} ({lay.kind})"
                             if lay is not None else "scwork NPU layout")
        # The mode not shown is hidden, and export_layout leaves hidden boxes out.
        return self._export(path, title or default_title)


def _readable_frame(grid, *, min_width: int = 480, min_height: int = 180, min_tick_px: int = 24) -> None:
    """Keep a cell grid readable whatever its proportions.

    Square cells make a 64-lane x 2-row map 960 x 30 px and a 64 x 1,500 one 40 px
    wide: below ``min_width`` x ``min_height`` the cells stretch instead; and one
    tick per cell only while a cell is wide enough for its label.
    """
    fig = grid.figure
    n_rows, n_cols = grid.shape
    if fig.frame_width < min_width or fig.frame_height < min_height:
        fig.match_aspect = False
        fig.frame_width = max(fig.frame_width, min(min_width, grid.max_width))
        fig.frame_height = max(fig.frame_height, min(min_height, grid.max_height))
    else:
        fig.match_aspect = True
    if fig.frame_width / max(n_cols, 1) < min_tick_px:
        fig.xaxis.ticker = grid._auto_ticks_x
    if fig.frame_height / max(n_rows, 1) < min_tick_px * 0.6:
        fig.yaxis.ticker = grid._auto_ticks_y


def _dims(dims) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"
