"""Tests of the shared bokeh drawing helpers (no browser needed)."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("bokeh")
pytest.importorskip("jupyter_bokeh")

from scwork.widgets import _bokeh  # noqa: E402

pytestmark = pytest.mark.requires_widgets


def test_category_colors_cycle_and_mark_empty():
    palette = _bokeh.CATEGORY_PALETTE
    ids = np.array([0, 1, len(palette), -1])
    colors = _bokeh.category_colors(ids)
    assert colors[0] == palette[0]
    assert colors[1] == palette[1]
    assert colors[2] == palette[0]  # cycles
    assert colors[3] == _bokeh.PADDING_COLOR
    assert _bokeh.category_colors(np.array([-1]), empty_color="#ffffff")[0] == "#ffffff"


def test_palette_has_no_padding_color_and_neighbours_differ():
    palette = _bokeh.CATEGORY_PALETTE
    assert _bokeh.PADDING_COLOR not in palette
    assert len(set(palette)) == len(palette)


def test_text_colors_are_readable_on_dark_and_light_cells():
    palette = _bokeh.CATEGORY_PALETTE
    dark = palette.index("#1f77b4")
    light = palette.index("#ffbb78")
    colors = _bokeh.text_colors(np.array([dark, light]))
    assert colors[0] == "#ffffff"
    assert colors[1] != "#ffffff"


def test_cell_grid_small_uses_rects_with_labels():
    grid = _bokeh.CellGrid(category_name="tile", value_names=("address",))
    categories = np.array([[0, 0, 1], [2, -1, -2]])
    grid.update(categories, labels=np.arange(6).reshape(2, 3),
                values={"address": np.arange(6).reshape(2, 3) * 10})
    data = grid.cells.data
    assert not grid.uses_image
    assert grid.rect_renderer.visible and not grid.image_renderer.visible
    # The absent cell (-2) is not drawn; 5 cells remain.
    assert len(data["x"]) == 5
    assert list(data["label"]) == ["0", "1", "2", "3", "4"]
    assert list(data["address"]) == [0, 10, 20, 30, 40]
    # Row 0 at the top: y decreases with the row.
    assert data["y"][0] == -0.5 and data["y"][3] == -1.5
    assert data["color"][4] == _bokeh.PADDING_COLOR
    assert data["hatch"][4] == _bokeh.PADDING_HATCH
    assert len(grid.image.data["image"]) == 0
    assert grid.figure.x_range.end == 3 and grid.figure.y_range.start == -2


def test_cell_grid_empty_mask_keeps_category_for_hover():
    grid = _bokeh.CellGrid(category_name="tile")
    grid.update(np.array([[3, 3]]), empty=np.array([[False, True]]))
    data = grid.cells.data
    assert list(data["category"]) == [3, 3]
    assert data["color"][0] == _bokeh.CATEGORY_PALETTE[3]
    assert data["color"][1] == _bokeh.PADDING_COLOR


def test_cell_grid_large_switches_to_image_and_back():
    grid = _bokeh.CellGrid(category_name="tile", value_names=("address",), max_rect_cells=100)
    categories = np.arange(400).reshape(20, 20) // 8
    categories[0, 0] = -1
    grid.update(categories, labels=categories, values={"address": np.arange(400).reshape(20, 20)})
    assert grid.uses_image
    assert not grid.rect_renderer.visible and not grid.text_renderer.visible
    assert len(grid.cells.data["x"]) == 0
    image = grid.image.data["image"][0]
    assert image.shape == (20, 20)
    # Stored bottom row first, as bokeh draws images: grid row 0 is the last image row.
    assert np.array_equal(grid.image.data["row"][0][-1], np.zeros(20))
    assert np.array_equal(grid.image.data["address"][0][-1], np.arange(20))
    n = len(_bokeh.CATEGORY_PALETTE)
    assert image[-1, 0] == n  # the empty slot of the color mapper
    assert image[-1, 8] == 1 % n
    # The hover covers the image renderer and reads the 2-D columns.
    assert grid.image_renderer in grid.hover.renderers
    assert ("address", "@{address}") in grid.hover.tooltips

    grid.update(np.zeros((2, 2), dtype=int), values={"address": np.zeros((2, 2))})
    assert not grid.uses_image
    assert len(grid.cells.data["x"]) == 4
    assert len(grid.image.data["image"]) == 0


def test_cell_grid_keeps_its_models_across_updates():
    grid = _bokeh.CellGrid(value_names=("v",))
    figure, cells, image = grid.figure, grid.cells, grid.image
    for shape in [(2, 3), (40, 40), (5, 1)]:
        grid.update(np.zeros(shape, dtype=int), values={"v": np.ones(shape)})
    assert grid.figure is figure and grid.cells is cells and grid.image is image


def test_cell_grid_rejects_mismatched_arrays():
    grid = _bokeh.CellGrid(value_names=("v",))
    with pytest.raises(ValueError, match="missing"):
        grid.update(np.zeros((2, 2), dtype=int))
    with pytest.raises(ValueError, match="shape"):
        grid.update(np.zeros((2, 2), dtype=int), values={"v": np.zeros(3)})
    with pytest.raises(ValueError, match="2-D"):
        grid.update(np.zeros(3, dtype=int), values={"v": np.zeros(3)})


def test_cell_grid_hides_labels_on_tiny_cells():
    grid = _bokeh.CellGrid(max_rect_cells=10_000)
    grid.update(np.zeros((1, 4), dtype=int), labels=np.arange(4).reshape(1, 4))
    assert grid.text_renderer.visible
    # 60 rows in a 480 px frame: 8 px cells, too small for text (hover still works).
    grid.update(np.zeros((60, 60), dtype=int), labels=np.zeros((60, 60), dtype=int))
    assert not grid.text_renderer.visible
    assert grid.has_labels


@pytest.mark.parametrize("n, width", [(1, 1), (24, 24), (64, 64), (4096, 128), (262144, 1024)])
def test_strip_width(n, width):
    assert _bokeh.strip_width(n) == width


def test_address_strip_wraps_and_marks_the_tail_absent():
    strip = _bokeh.AddressStrip(category_name="tile", value_names=("element",),
                                max_rect_cells=4096)
    n = 100
    categories = np.arange(n) // 4
    strip.update(categories, empty=np.arange(n) % 4 == 3,
                 labels=np.arange(n).astype(str), values={"element": np.arange(n)},
                 width=32)
    assert strip.width == 32
    assert strip.grid.shape == (4, 32)
    data = strip.grid.cells.data
    assert len(data["x"]) == n  # 28 tail cells of the last row are not drawn
    assert list(data["address"][:5]) == [0, 1, 2, 3, 4]
    assert data["row"][40] == 1 and data["col"][40] == 8
    assert data["color"][3] == _bokeh.PADDING_COLOR
    assert "32 addresses" in strip.figure.yaxis[0].axis_label


def test_address_strip_large_uses_image():
    strip = _bokeh.AddressStrip(category_name="tile")
    strip.update(np.arange(8192) // 64)
    assert strip.grid.uses_image
    assert strip.grid.shape == (8192 // strip.width, strip.width)


def test_summary_table_html_formats_and_escapes():
    html = _bokeh.summary_table_html({"bytes": 12345, "shape": (3, 5), "frac": 0.375,
                                      "name": "<b>x</b>"}, title="T & U")
    assert "12,345" in html
    assert "(3, 5)" in html
    assert "0.375" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html
    assert "T &amp; U" in html
    assert _bokeh.summary_table_html([("a", 1)]).count("<tr>") == 1


def test_message_html():
    assert _bokeh.message_html("") == ""
    error = _bokeh.message_html("bad <input>\n    ^", "error")
    assert "&lt;input&gt;" in error and "#b71c1c" in error and "<pre" in error
    with pytest.raises(ValueError):
        _bokeh.message_html("x", "loud")


def test_wrap_returns_a_bokeh_widget():
    from jupyter_bokeh import BokehModel

    grid = _bokeh.CellGrid()
    grid.update(np.zeros((2, 2), dtype=int))
    widget = _bokeh.wrap(grid.figure)
    assert isinstance(widget, BokehModel)
    # Later updates go through the same document (patches, no new widget).
    grid.update(np.ones((3, 3), dtype=int))
    assert grid.figure.document is not None


def test_export_html_is_standalone_and_offline(tmp_path):
    grid = _bokeh.CellGrid(value_names=("v",))
    grid.update(np.arange(6).reshape(2, 3), values={"v": np.arange(6).reshape(2, 3)})
    _bokeh.wrap(grid.figure)  # exporting a model already shown in a notebook works too
    path = _bokeh.export_html(grid.figure, tmp_path / "grid.html", title="grid test")
    html = path.read_text(encoding="utf-8")
    assert "<title>grid test</title>" in html
    # INLINE resources: BokehJS is embedded, nothing is loaded from a CDN.
    assert re.search(r"<script[^>]*\bsrc=", html) is None
    assert re.search(r"<link[^>]*\bhref=[\"']https?://", html) is None
    assert "cdn.bokeh.org" not in html
    assert "Bokeh" in html and len(html) > 100_000


def test_bokehjs_is_sent_once_to_every_page_of_a_kernel(monkeypatch):
    """Each client (page) of a kernel gets the BokehJS loader once: a re-opened or second page too."""
    import IPython
    import IPython.display

    from scwork.widgets import _display

    class Kernel:
        session = "page-1"

        def get_parent(self):
            return {"header": {"session": self.session, "msg_type": "execute_request"}}

    class Shell:
        kernel = Kernel()

    published = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell())
    monkeypatch.setattr(IPython.display, "publish_display_data", lambda data, *a, **k: published.append(data))
    monkeypatch.setattr(_display, "_BOKEHJS_SENT_TO", set())
    _display.ensure_bokehjs()
    _display.ensure_bokehjs()
    assert len(published) == 1, "the same page got BokehJS twice"
    [data] = published
    code = data["application/javascript"]
    # Guarded: a page that already has this BokehJS runs none of the bundle again.
    import bokeh

    assert code.startswith("if (typeof window.Bokeh === 'undefined' || "
                           f"window.Bokeh.version !== \"{bokeh.__version__}\")")
    assert "Bokeh.set_log_level" in code  # the inline bundle itself is inside
    Shell.kernel.session = "page-2"  # the notebook re-opened: a new client of the same kernel
    _display.ensure_bokehjs()
    assert len(published) == 2
    Shell.kernel.session = "page-1"
    _display.ensure_bokehjs()
    assert len(published) == 2


def test_bokehjs_needs_a_kernel(monkeypatch):
    """Outside a kernel (scripts, terminal IPython) nothing is published."""
    import IPython
    import IPython.display

    from scwork.widgets import _display

    published = []
    monkeypatch.setattr(IPython.display, "publish_display_data", lambda data, *a, **k: published.append(data))
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    _display.ensure_bokehjs()
    monkeypatch.setattr(IPython, "get_ipython", lambda: type("TerminalShell", (), {"kernel": None})())
    _display.ensure_bokehjs()
    assert published == []


def test_a_trait_change_walks_each_bokeh_document_once(monkeypatch):
    """The MemoryTimeline's x axis switch changes two tickers of one document: bokeh walked
    the whole document after each (about 250 ms each); now once, at the end of the change."""
    from bokeh.document.models import DocumentModelManager

    from scwork.widgets import MemoryTimeline

    explorer = MemoryTimeline.demo()
    walks = []
    recompute = DocumentModelManager.recompute
    monkeypatch.setattr(DocumentModelManager, "recompute",
                        lambda self: (walks.append(id(self)), recompute(self))[1])
    ticker = explorer._gantt.figure.xaxis[0].ticker
    explorer.x_axis = "time" if explorer.x_axis != "time" else "program_order"
    assert explorer._gantt.figure.xaxis[0].ticker is not ticker  # the tickers did change
    assert walks and len(walks) == len(set(walks)), "a document was walked more than once"
    walks.clear()
    explorer.controls["batch_size"].value = explorer.controls["batch_size"].value + explorer.controls["batch_size"].step
    assert walks == []  # new data only: no walk at all
    # The Gantt's new ticker is a model of the document (the deferred walk found it).
    document = explorer._gantt.figure.document
    assert document.get_model_by_id(explorer._gantt.figure.xaxis[0].ticker.id) is not None
