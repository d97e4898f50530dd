"""Tests of LayoutExplorer without a browser: traits in, bokeh sources out."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("bokeh")
pytest.importorskip("jupyter_bokeh")

import scwork  # noqa: E402
from scwork.layout import npu  # noqa: E402
from scwork.widgets import LayoutExplorer, _bokeh  # noqa: E402
from scwork.widgets.layout_explorer import PRESETS  # noqa: E402

pytestmark = pytest.mark.requires_widgets

SPEC_EXAMPLE = "f32[3,5]{1,0:T(2,2)}"
BF16_REPEATED = "bf16[4,8]{1,0:T(2,4)(2,1)}"
LARGE = "bf16[512,512]{1,0:T(8,128)(2,1)}"


@pytest.fixture
def explorer():
    return LayoutExplorer()


def cells_by_position(source):
    """{(row, col): index into the columns} of a rect-path source."""
    data = source.data
    return {(r, c): i for i, (r, c) in enumerate(zip(data["row"], data["col"]))}


def grid_labels(explorer):
    """The grid's labels as a 2-D array of str (rect path)."""
    data = explorer.sources["grid_cells"].data
    n_rows, n_cols = max(data["row"]) + 1, max(data["col"]) + 1
    out = np.full((n_rows, n_cols), "", dtype=object)
    out[np.asarray(data["row"]), np.asarray(data["col"])] = data["label"]
    return out


# -- XLA mode --------------------------------------------------------------------------

def test_default_is_the_spec_example(explorer):
    assert explorer.mode == "xla"
    assert explorer.text == SPEC_EXAMPLE
    assert explorer.error == ""
    assert str(explorer.shape) == SPEC_EXAMPLE
    assert explorer.summary == explorer.shape.summary()
    assert explorer.controls["text"].value == SPEC_EXAMPLE
    assert explorer.controls["preset"].value == SPEC_EXAMPLE


def test_spec_example_grid(explorer):
    data = explorer.sources["grid_cells"].data
    # padded view 4x6: 24 cells, 9 of them padding ([xla-tiled]).
    assert len(data["x"]) == 24
    assert sum(data["padding"]) == 9
    assert list(data["hatch"]).count(_bokeh.PADDING_HATCH) == 9
    assert list(data["color"]).count(_bokeh.PADDING_COLOR) == 9
    at = cells_by_position(explorer.sources["grid_cells"])
    assert data["label"][at[2, 3]] == "17"
    assert data["address"][at[2, 3]] == 17
    assert data["category"][at[2, 3]] == 4  # tile (1, 1) of a 2x3 tile grid
    assert data["padding"][at[3, 0]] == 1 and data["padding"][at[0, 5]] == 1
    # Only the rect path is used for 24 cells.
    assert len(explorer.sources["grid_image"].data["image"]) == 0
    assert explorer.figures["grid"].x_range.end == 6
    assert explorer.figures["grid"].y_range.start == -4


def test_spec_example_strip_is_in_address_order(explorer):
    data = explorer.sources["strip_cells"].data
    assert list(data["address"]) == list(range(24))
    # Address 17 stores logical element (2, 3) = flat index 13.
    assert data["label"][17] == "13"
    assert data["element"][17] == 13
    assert data["view row"][17] == 2 and data["view col"][17] == 3
    assert sum(e == -1 for e in data["element"]) == 9
    assert list(data["color"]).count(_bokeh.PADDING_COLOR) == 9
    # The first four addresses hold tile 0.
    assert list(data["category"][:4]) == [0, 0, 0, 0]
    assert data["category"][4] == 1


def test_changing_text_updates_sources_in_place(explorer):
    sources = dict(explorer.sources)
    figures = dict(explorer.figures)
    children = explorer.children
    explorer.text = BF16_REPEATED
    assert explorer.error == ""
    labels = grid_labels(explorer)
    assert list(labels[0]) == [str(a) for a in range(0, 16, 2)]
    assert list(labels[1]) == [str(a) for a in range(1, 16, 2)]
    assert len(explorer.sources["grid_cells"].data["x"]) == 32
    # Same bokeh models and widget tree: only the data changed.
    assert all(explorer.sources[k] is v for k, v in sources.items())
    assert all(explorer.figures[k] is v for k, v in figures.items())
    assert explorer.children == children
    assert explorer.controls["preset"].value == BF16_REPEATED


def test_text_control_drives_the_trait(explorer):
    explorer.controls["text"].value = BF16_REPEATED
    assert explorer.text == BF16_REPEATED
    assert str(explorer.shape) == BF16_REPEATED
    assert len(explorer.sources["grid_cells"].data["x"]) == 32
    explorer.text = SPEC_EXAMPLE
    assert explorer.controls["text"].value == SPEC_EXAMPLE


def test_preset_dropdown_sets_text(explorer):
    explorer.controls["preset"].value = LARGE
    assert explorer.text == LARGE
    assert str(explorer.shape) == LARGE
    explorer.text = "f32[7]"  # not a preset: the dropdown shows nothing selected
    assert explorer.controls["preset"].value is None


def test_invalid_text_sets_error_and_keeps_the_plots(explorer):
    before = {name: dict(src.data) for name, src in explorer.sources.items()}
    shape_before = explorer.shape
    explorer.controls["text"].value = "f32[3,5]{1,0:T(2,2)"
    assert explorer.error
    assert "position 19" in explorer.error
    assert explorer.shape is shape_before
    # Not one column was replaced.
    for name, src in explorer.sources.items():
        assert src.data.keys() == before[name].keys()
        assert all(src.data[column] is values for column, values in before[name].items())
    # A valid text clears the error.
    explorer.text = BF16_REPEATED
    assert explorer.error == ""


def test_error_message_is_shown_inline(explorer):
    explorer.text = "f32[123,456,789]{1:T(2,*,128)}"
    assert "Dimensions size is 3, but minor to major size is 1." in explorer.error
    html = explorer._error_area.value
    assert "Dimensions size is 3" in html and "#b71c1c" in html
    explorer.text = SPEC_EXAMPLE
    assert explorer._error_area.value == ""


@pytest.mark.parametrize("label, text", PRESETS)
def test_every_preset_parses_and_draws(explorer, label, text):
    explorer.text = text
    assert explorer.error == ""
    shape = scwork.layout.parse(text)
    assert str(explorer.shape) == str(shape)
    view = shape.padded_view_shape
    n_cols = view[-1]
    n_rows = math.prod(view) // n_cols
    grid = explorer._grid
    assert grid.shape == (n_rows, n_cols)
    if grid.uses_image:
        assert explorer.sources["grid_image"].data["image"][0].shape == (n_rows, n_cols)
        assert len(explorer.sources["grid_cells"].data["x"]) == 0
    else:
        data = explorer.sources["grid_cells"].data
        assert len(data["x"]) == n_rows * n_cols
        # Labels are the engine's addresses, cell by cell.
        expected = shape.view_index_map().reshape(n_rows, n_cols)
        assert np.array_equal(grid_labels(explorer).astype(np.int64), expected)
    strip = explorer._strip.grid
    assert strip.shape[0] * strip.shape[1] >= shape.padded_elements


def test_combined_dims_fold_to_two_dimensions(explorer):
    explorer.text = "f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}"
    # view (112, 110) padded to the (2, 3) tile: (112, 111).
    assert explorer._grid.shape == (112, 111)


def test_rank_three_view_folds_major_dims(explorer):
    explorer.text = "f32[2,3,4]{2,1,0:T(2,2)}"
    shape = explorer.shape
    assert explorer._grid.shape == (2 * 4, 4)
    expected = shape.view_index_map().reshape(8, 4)
    assert np.array_equal(grid_labels(explorer).astype(np.int64), expected)


def test_a_preset_of_small_cells_sends_no_labels(explorer):
    """The notebook's switch from bf16[16,256] to s4[8,128]: 1024 rect cells of 7.5 px, no label fits.

    Both grids (layout and memory strip) keep their labels in the cells' source and
    send none to the text glyphs: on the page each hidden label was measured on every
    redraw (the preset change took over 300 ms of page work).
    """
    explorer.text = "bf16[16,256]{1,0:T(8,128)(2,1)}"
    explorer.controls["preset"].index = 3
    assert explorer.text == "s4[8,128]{1,0:T(8,128)(2,1)E(4)}"
    for grid in (explorer._grid, explorer._strip.grid):
        assert not grid.uses_image and len(grid.cells.data["x"]) == 1024
        assert grid.has_labels and not grid.text_renderer.visible
        assert len(grid.labels.data["x"]) == 0
    explorer.text = "f32[3,5]{1,0:T(2,2)}"  # large cells: the labels are drawn, and sent
    grid = explorer._grid
    assert grid.text_renderer.visible
    assert sorted(grid.labels.data["label"], key=int) == sorted(grid.cells.data["label"], key=int)
    assert len(grid.labels.data["label"]) == 24


def test_large_preset_uses_the_image_glyph(explorer):
    explorer.text = LARGE
    grid = explorer._grid
    assert grid.uses_image
    assert explorer.figures["grid"].renderers.count(grid.image_renderer) == 1
    assert grid.image_renderer.visible and not grid.rect_renderer.visible
    assert len(explorer.sources["grid_cells"].data["x"]) == 0
    image_data = explorer.sources["grid_image"].data
    assert image_data["image"][0].shape == (512, 512)
    # 2-D hover columns, stored bottom row first: grid row 0 is the last image row.
    expected = explorer.shape.view_index_map()
    assert np.array_equal(image_data["address"][0][::-1], expected)
    assert image_data["row"][0][-1, 0] == 0 and image_data["col"][0][-1, 7] == 7
    assert ("address", "@{address}") in grid.hover.tooltips
    strip = explorer._strip
    assert strip.grid.uses_image
    assert strip.width * strip.grid.shape[0] == explorer.shape.padded_elements
    # Whatever the engine path (numpy or numba), the drawing must be a permutation:
    # every logical element stored once, every drawn address inside the buffer.
    elements = explorer.sources["strip_image"].data["element"][0].ravel()
    assert np.array_equal(np.sort(elements), np.arange(512 * 512))
    addresses = image_data["address"][0]
    assert addresses.min() == 0 and addresses.max() == 512 * 512 - 1
    # ... and back to the small path.
    explorer.text = SPEC_EXAMPLE
    assert not grid.uses_image
    assert len(explorer.sources["grid_cells"].data["x"]) == 24
    assert len(explorer.sources["grid_image"].data["image"]) == 0


HUGE = "bf16[65536,65536]{1,0:T(8,128)(2,1)}"


def test_large_layouts_are_drawn_zoomable_tiles_first_then_elements(explorer):
    """Any size draws: an overview of tile blocks, single elements once zoomed in."""
    from scwork.layout import parse
    from scwork.layout.view import view_window

    explorer.text = "bf16[4096,4096]{1,0:T(8,128)(2,1)}"
    assert explorer.error == ""
    assert str(explorer.shape) == "bf16[4096,4096]{1,0:T(8,128)(2,1)}"
    assert "16,777,216 cells" in explorer._grid_caption.text and "tile blocks" in explorer._grid_caption.text
    assert "[4096,4096]" in explorer._xla_summary.text or "4096" in explorer._xla_summary.text

    explorer.text = HUGE
    grid = explorer._grid
    assert grid.extent == (65536, 65536)
    image = explorer.sources["grid_image"].data
    n_rows, n_cols = image["image"][0].shape
    assert n_rows <= 256 and n_cols <= 512  # only what is on screen, aggregated
    # Zoomed into 20 x 40 elements: one cell per element, addresses from the engine.
    explorer.zoom_to((1000, 1020), (500, 540))
    assert "single elements" in explorer._grid_caption.text
    cells = explorer.sources["grid_cells"].data
    assert len(cells["address"]) == 20 * 40
    expected = view_window(parse(HUGE), (1000, 1020), (500, 540))["address"].values.ravel()
    assert np.array_equal(np.sort(np.asarray(cells["address"])), np.sort(expected))
    # The strip shows the buffer from the first visible cell on, with real addresses.
    first = parse(HUGE).linear_index((1000, 500))
    strip = explorer.sources["strip_image"].data or explorer.sources["strip_cells"].data
    addresses = np.asarray(strip["address"][0] if explorer._strip.grid.uses_image else strip["address"])
    assert addresses.min() <= first < addresses.max()
    # Zooming out again returns to the aggregated view.
    explorer.zoom_to()
    assert "tile blocks" in explorer._grid_caption.text


def test_invalid_text_says_which_layout_the_plots_still_show(explorer):
    explorer.text = "bf16[512,512]{1,0:T(8,128)(2,1)}"
    explorer.text = "bf16[4096,4096]{1,0:T(8,128)(2,1)"
    assert explorer.error
    assert "still show the last valid layout: bf16[512,512]{1,0:T(8,128)(2,1)}" in \
        explorer._error_area.value.replace("&#x27;", "'")


def test_the_text_box_updates_on_enter_not_on_every_keystroke(explorer):
    assert explorer.controls["text"].continuous_update is False


def test_summary_shows_the_engine_numbers(explorer):
    html = explorer._xla_summary.text
    assert "(2, 3, 2, 2)" in html  # tiled shape
    assert "96" in html and "60" in html  # padded / unpadded bytes
    assert "37.5 %" in html
    explorer.text = "f32[2,3]{1,0:T(2,3)(2,2)}"
    # Later tiles add padding that XLA's first-tile ArraySize does not count.
    assert "XLA ArraySize" in explorer._xla_summary.text


def test_constructor_accepts_trait_values():
    ex = LayoutExplorer(text=BF16_REPEATED)
    assert str(ex.shape) == BF16_REPEATED
    assert ex.controls["text"].value == BF16_REPEATED


# -- NPU mode ----------------------------------------------------------------------------

def spec_npu_explorer(**traits):
    """The worked example of the Sophgo local-memory article ([tpu-mlir]): fp16 (2,3,4,5), 4 NPUs, EU_BYTES 64."""
    ex = LayoutExplorer(npu_shape=(2, 3, 4, 5), npu_dtype="fp16", npu_num=4, npu_eu_bytes=64,
                        **traits)
    ex.mode = "npu"
    return ex


def lane_map(explorer, column="category"):
    """A rect-path lane source as a (row, lane) array."""
    data = explorer.sources["lane_cells"].data
    out = np.full((max(data["row"]) + 1, max(data["col"]) + 1), -9, dtype=np.int64)
    out[np.asarray(data["row"]), np.asarray(data["col"])] = data[column]
    return out


@pytest.mark.parametrize("start_lane", [0, 2])
def test_npu_mode_fills_the_lane_map(start_lane):
    ex = spec_npu_explorer(npu_start_lane=start_lane)
    assert ex.error == ""
    expected = npu.local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64,
                                start_lane=start_lane)
    assert ex.npu_layout.strides_elements == expected.strides_elements
    occupancy = expected.occupancy()
    assert np.array_equal(lane_map(ex), occupancy["channel"].values.T)
    assert np.array_equal(lane_map(ex, "batch"), occupancy["batch"].values.T)
    assert np.array_equal(lane_map(ex, "used bytes"), occupancy["used_bytes"].values.T)
    assert ex.summary == ex.npu_layout.summary()
    assert ex.summary["bytes_per_lane"] == expected.bytes_per_lane
    n_stride = 32 if start_lane == 0 else 64
    assert ex.summary["strides_elements"] == (n_stride, 32, 5, 1)
    # Free rows are blank (white, no hatch); lanes across, rows down.
    data = ex.sources["lane_cells"].data
    free = [i for i, c in enumerate(data["category"]) if c == -1]
    assert free and all(data["color"][i] == _bokeh.EMPTY_COLOR for i in free)
    assert ex.figures["lanes"].x_range.end == 4


def test_npu_summary_has_strides_and_fit_line():
    ex = spec_npu_explorer()
    html = ex._npu_summary.text
    assert "n=32, c=32, h=5, w=1" in html
    assert "n=64, c=64, h=10, w=2" in html  # bytes: fp16 is 2 bytes
    assert "fits:" in html
    ex.npu_shape = (64, 512, 56, 56)
    assert "does not fit" in ex._npu_summary.text
    assert ex.npu_layout.fits() is False


def test_npu_invalid_input_keeps_the_map():
    ex = spec_npu_explorer()
    before = lane_map(ex)
    ex.npu_start_lane = 7
    assert "start_lane=7" in ex.error
    assert np.array_equal(lane_map(ex), before)
    ex.npu_start_lane = 0
    assert ex.error == ""


def test_error_follows_the_mode():
    ex = LayoutExplorer()
    ex.text = "f32[3,5"
    assert ex.error
    ex.mode = "npu"
    assert ex.error == ""  # the NPU inputs are valid
    ex.mode = "xla"
    assert ex.error


def test_mode_switch_shows_one_view(explorer):
    assert explorer._npu_view.layout.display == "none"
    explorer.controls["mode"].value = "npu"
    assert explorer.mode == "npu"
    assert explorer._xla_view.layout.display == "none"
    assert explorer._npu_view.layout.display != "none"
    drawn = (len(explorer.sources["lane_cells"].data["x"])
             + len(explorer.sources["lane_image"].data["image"]))
    assert drawn > 0


def test_npu_controls_drive_the_traits():
    ex = spec_npu_explorer()
    ex.controls["c"].value = 5
    assert ex.npu_shape == (2, 5, 4, 5)
    assert set(lane_map(ex).ravel()) >= {0, 1, 2, 3, 4}
    ex.controls["kind"].value = "compact"
    assert ex.npu_layout.strides_elements.c == 20
    assert ex.controls["dtype"].value == "f16"  # "fp16" shown by its canonical name
    # Another chip brings its own lanes and EU width.
    ex.controls["chip"].value = "bm1688"
    chip = scwork.hardware.get("bm1688")
    assert ex.npu_num is None and ex.npu_eu_bytes is None
    assert ex.npu_layout.npu_num == chip.npu_num
    assert ex.controls["npu_num"].value == chip.npu_num
    assert ex.controls["eu_bytes"].value == chip.eu_bytes
    ex.controls["npu_num"].value = 8
    assert ex.npu_num == 8 and ex.npu_layout.npu_num == 8


def test_large_npu_map_uses_the_image_glyph():
    ex = LayoutExplorer(mode="npu", npu_shape=(1, 64, 56, 56), npu_dtype="f32")
    grid = ex._lanes
    assert grid.uses_image
    occupancy = ex.npu_layout.occupancy()
    image = ex.sources["lane_image"].data
    assert np.array_equal(image["category"][0][::-1], occupancy["channel"].values.T)


# -- export ------------------------------------------------------------------------------

def assert_offline_html(path):
    html = path.read_text(encoding="utf-8")
    assert re.search(r"<script[^>]*\bsrc=", html) is None
    assert "cdn.bokeh.org" not in html
    return html


def test_to_html_writes_offline_views(explorer, tmp_path):
    path = explorer.to_html(tmp_path / "layout.html")
    html = assert_offline_html(path)
    assert "<title>scwork layout: f32[3,5]{1,0:T(2,2)}</title>" in html
    assert "37.5 %" in html  # the summary is part of the exported layout


def test_to_html_exports_only_the_mode_shown(explorer, tmp_path):
    xla = assert_offline_html(explorer.to_html(tmp_path / "xla.html"))
    assert "Memory in address order" in xla and "NPU local memory" not in xla
    explorer.mode = "npu"
    npu_html = assert_offline_html(explorer.to_html(tmp_path / "npu.html"))
    assert "NPU local memory" in npu_html and "Memory in address order" not in npu_html
    assert "37.5 %" in xla and "37.5 %" not in npu_html  # the XLA summary goes with its mode


def test_texts_are_html_panes_and_figures_separate_views(explorer):
    """Texts outside bokeh (no whole-document BokehJS layout per text change), one bokeh view per figure."""
    from jupyter_bokeh import BokehModel
    from scwork.widgets._panes import TextPane

    assert explorer._views in explorer.children
    assert explorer._views.children == (explorer._xla_view, explorer._npu_view)
    for pane in (explorer._grid_caption, explorer._strip_caption, explorer._xla_summary,
                 explorer._lanes_caption, explorer._npu_summary):
        assert isinstance(pane, TextPane)
    assert "Logical view" in explorer._grid_caption.text and "Memory in address order" in explorer._strip_caption.text
    # XLA mode: grid caption and grid, summary on their right; then the strip caption and strip.
    top, strip_caption, strip_view = explorer._xla_view.children
    assert top.children[0].children == (explorer._grid_caption, explorer._grid_view)
    assert top.children[1] is explorer._xla_summary
    assert (strip_caption, strip_view) == (explorer._strip_caption, explorer._strip_view)
    assert explorer._npu_view.children[0].children == (explorer._lanes_caption, explorer._lanes_view)
    assert explorer._npu_view.children[1] is explorer._npu_summary
    views = {"grid": explorer._grid_view, "strip": explorer._strip_view, "lanes": explorer._lanes_view}
    for name, view in views.items():
        assert isinstance(view, BokehModel) and view._model is explorer.figures[name]


def test_to_html_in_npu_mode(tmp_path):
    ex = spec_npu_explorer()
    html = assert_offline_html(ex.to_html(tmp_path / "npu.html"))
    assert "scwork NPU layout" in html
    assert "n=32, c=32, h=5, w=1" in html


def test_first_control_change_after_display_imports_nothing():
    """One-time imports (xarray's look for dask, ~0.7 s) happen while the cell runs, not on a first click."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from scwork.widgets import LayoutExplorer\n"
        "ex = LayoutExplorer()\n"
        "ex._repr_mimebundle_()\n"
        "before = set(sys.modules)\n"
        "ex.mode = 'npu'\n"
        "print(sorted(set(sys.modules) - before))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_zoomed_addresses_are_drawn_only_where_they_fit_their_cell():
    """The zoomed 65536 x 65536 layout drew 9-digit addresses over each other: a label is
    drawn only at a font where the longest one fits its cell, else the hover shows it."""
    from scwork.widgets._cells import MIN_LABEL_FONT_PX, _DIGIT_EM, label_font_px

    for cell_px in (10, 14, 20, 25, 37.5, 44, 150):
        for chars in (1, 2, 4, 9, 10):
            font = label_font_px(cell_px, chars)
            if font:
                assert font >= MIN_LABEL_FONT_PX
                assert chars * _DIGIT_EM * font <= cell_px - 4 + 1e-9   # fits across, 2 px each side
                assert font <= cell_px - 4
    assert label_font_px(44, 4) == 12 and label_font_px(25, 9) == 0 and label_font_px(150, 9) == 12
    big = LayoutExplorer(text="bf16[65536,65536]{1,0:T(8,128)(2,1)}")
    big.zoom_to(rows=(4096, 4120), cols=(120, 136))   # 24 x 16 cells of 9-digit addresses
    grid = big._grid
    assert grid.has_labels and grid.label_chars == 9
    assert not grid.text_renderer.visible                # 25 px cells: the addresses do not fit
    hover = [tool for tool in grid.figure.tools if type(tool).__name__ == "HoverTool"][0]
    assert ("address", "@{address}") in hover.tooltips    # ... the hover shows them
    # Labels not drawn are not sent either: the text glyph's own source is empty (BokehJS
    # measures every text of its source, drawn or not), while the cells keep them.
    assert len(grid.labels.data["label"]) == 0 and len(grid.cells.data["label"]) == 24 * 16
    big.zoom_to(rows=(4096, 4100), cols=(120, 124))       # 4 x 4 cells: they fit, drawn
    assert grid.text_renderer.visible
    assert list(grid.labels.data["label"]) == list(grid.cells.data["label"])
    assert list(grid.labels.data["x"]) == list(grid.cells.data["x"]) and len(grid.labels.data["x"]) == 16
    font = int(grid.text_renderer.glyph.text_font_size.rstrip("px"))
    cell_px = min(grid.figure.frame_width / 4, grid.figure.frame_height / 4)
    assert 9 * _DIGIT_EM * font <= cell_px - 4
