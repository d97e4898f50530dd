"""How the explorers' bokeh changes reach the page: one patch per update, no echoes.

These tests replay what the kernel sends (the PATCH-DOC fragments of
``BatchedBokehModel``) on a copy of the document as the page had it, with bokeh's
own protocol receiver, and compare the result with the kernel's models: the page
must end up with exactly the kernel's state, whatever the batching dropped or
reordered.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("bokeh")
pytest.importorskip("jupyter_bokeh")

from bokeh.document import Document  # noqa: E402
from bokeh.document.events import ColumnDataChangedEvent, ModelChangedEvent  # noqa: E402
from bokeh.models import ColumnDataSource, Div, Plot, Range1d, Selection  # noqa: E402
from bokeh.plotting import figure  # noqa: E402
from bokeh.protocol.receiver import Receiver  # noqa: E402

from scwork.widgets import _bokeh, _display  # noqa: E402

pytestmark = pytest.mark.requires_widgets


class _Recorder:
    """Collects what a BatchedBokehModel sends, as the page receives it."""

    def __init__(self, monkeypatch):
        self.fragments: list = []
        cls = _display._batched_bokeh_model()
        monkeypatch.setattr(cls, "send", lambda widget, content, buffers=None: self.fragments.append(
            (widget, content, buffers)))

    def patches(self, widget) -> list:
        """The complete PATCH-DOC messages sent for ``widget``, decoded by bokeh's receiver."""
        from bokeh.protocol import Protocol

        receiver, messages = Receiver(Protocol()), []
        for sender, content, buffers in self.fragments:
            if sender is not widget:
                continue
            fragment = content["payload"] if content.get("payload") is not None else bytes(buffers[0])
            message = _consume(receiver, fragment)
            if message is not None:
                messages.append(message)
        return messages


def _consume(receiver, fragment):
    import asyncio

    return asyncio.run(receiver.consume(fragment))


def _page_copy(widget) -> Document:
    """The document as the page holds it now (a deep copy through its JSON)."""
    return Document.from_json(json.loads(json.dumps(widget._document.to_json(deferred=False))))


def _state(document: Document) -> dict:
    """Every model's properties, comparable across copies (ids kept, arrays as lists)."""
    def plain(value):
        if isinstance(value, float) and value != value:
            return "nan"  # unset box edges: NaN is not equal to itself
        if isinstance(value, np.ndarray):
            return plain(value.tolist())
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if hasattr(value, "id") and hasattr(value, "properties_with_values"):
            return ("ref", value.id)
        return value

    return {model.id: {name: plain(value) for name, value in model.properties_with_values(include_defaults=True).items()
                       if name not in ("hold_render",)}
            for model in document.models}


def _replay(widget, before: Document, recorder: _Recorder) -> Document:
    """Apply what was sent for ``widget`` to ``before`` as BokehJS applies it.

    A ``ColumnDataChanged`` event with ``cols`` replaces only those columns in BokehJS
    (``Document.apply_json_patch`` keeps the others); bokeh's Python receiver replaces
    the whole data with them, so the columns not sent are put back here.
    """
    for message in recorder.patches(widget):
        kept = {}
        for event in message.content["events"]:
            if event["kind"] == "ColumnDataChanged" and event.get("cols") is not None:
                model = before.get_model_by_id(event["model"]["id"])
                kept[model.id] = dict(model.data)
        message.apply_to_document(before)
        for model_id, old in kept.items():
            model = before.get_model_by_id(model_id)
            model.data = {**old, **model.data}
    return before


def test_one_update_is_one_patch_and_the_page_ends_with_the_kernels_state(monkeypatch):
    from scwork.widgets import PipelineTimeline

    explorer = PipelineTimeline.demo()
    widget = explorer._gantts_view  # the one bokeh view of both Gantt charts (shared time axis)
    page = _page_copy(widget)
    recorder = _Recorder(monkeypatch)
    explorer.controls["num_minibatches"].value = 4  # from 0 (none): the bars change
    patches = recorder.patches(widget)
    assert len(patches) == 1, f"{len(patches)} patches for one control change"
    # Arrays travel inside the content: three comm messages, not two more per array.
    sent = [fragment for fragment in recorder.fragments if fragment[0] is widget]
    assert len(sent) == 3 and all(buffers is None for _, _, buffers in sent)
    events = patches[0].content["events"]
    assert any(event["kind"] == "ColumnDataChanged" for event in events)
    _replay(widget, page, recorder)
    assert _state(page) == _state(widget._document)


def test_held_changes_collapse_to_the_last_value_and_data_goes_last(monkeypatch):
    fig = figure(width=200, height=200)
    source = ColumnDataSource({"x": [0, 1], "y": [0, 1]})
    fig.scatter("x", "y", source=source)
    note = Div(text="a")
    widget = _bokeh.wrap(_bokeh_column(fig, note))
    page = _page_copy(widget)
    recorder = _Recorder(monkeypatch)
    with _bokeh.batched_patches():
        fig.frame_height = 300       # a default first...
        source.data = {"x": [0, 1, 2], "y": [2, 1, 0]}
        fig.frame_height = 260       # ...then the value: only this one is sent
        note.text = "b"
        source.data["y"] = [5, 6, 7]  # a column replaced in place
    [message] = recorder.patches(widget)
    kinds = [(event["kind"], event.get("attr")) for event in message.content["events"]]
    sent = [k for k in kinds if k[1] != "hold_render"]
    assert sent == [("ModelChanged", "frame_height"), ("ModelChanged", "text"), ("ColumnDataChanged", "data")]
    # Every plot is held from painting for the patch, then released.
    assert kinds[0] == ("ModelChanged", "hold_render") and kinds[-1] == ("ModelChanged", "hold_render")
    _replay(widget, page, recorder)
    assert _state(page) == _state(widget._document)
    assert page.get_model_by_id(source.id).data["y"] == [5, 6, 7]
    assert all(not plot.hold_render for plot in page.models if isinstance(plot, Plot))


def test_outside_a_batch_each_change_is_sent_at_once(monkeypatch):
    fig = figure(width=200, height=200)
    widget = _bokeh.wrap(fig)
    recorder = _Recorder(monkeypatch)
    fig.frame_height = 210
    fig.frame_width = 220
    assert len(recorder.patches(widget)) == 2


def test_collapse_keeps_every_other_kind_of_event_in_order():
    doc = Document()
    source = ColumnDataSource({"x": [1]})
    doc.add_root(source)
    first = ModelChangedEvent(doc, source, "name", "a")
    data = ColumnDataChangedEvent(doc, source, "data")
    last = ModelChangedEvent(doc, source, "name", "b")
    assert _display.collapse_patch_events([first, data, last]) == [last, data]
    assert _display.hold_render_around([first]) == [first]
    assert _display.hold_render_around([data, data]) == [data, data]  # new data only: nothing to hold


def test_only_models_python_sets_stop_echoing():
    fig = figure(width=200, height=200, x_range=Range1d(0, 1))
    source = ColumnDataSource({"x": [0], "y": [0]})
    renderer = fig.scatter("x", "y", source=source)
    watched = Div(text="")
    watched.on_change("text", lambda attr, old, new: None)
    zoomed = figure(width=200, height=200)
    zoomed.on_event("rangesupdate", lambda event: None)  # events are published whatever syncable says
    _bokeh.wrap(_bokeh_column(fig, watched, zoomed))
    assert not source.syncable and not fig.syncable and not renderer.syncable and not zoomed.syncable
    assert fig.x_range.syncable  # a person pans it; Python must know to reset it
    assert isinstance(source.selected, Selection) and source.selected.syncable
    assert watched.syncable  # Python listens to it


def test_ranges_python_sets_can_stop_echoing_too_unless_python_listens():
    fig = figure(width=200, height=200, x_range=Range1d(0, 1), y_range=Range1d(0, 1))
    fig.y_range.on_change("start", lambda attr, old, new: None)
    source = ColumnDataSource({"x": [0], "y": [0]})
    fig.scatter("x", "y", source=source)
    widget = _bokeh.wrap(fig, ranges_synced=False)
    assert not fig.x_range.syncable and fig.y_range.syncable and source.selected.syncable
    # Models added later (before display) follow the same rule.
    fig.extra_x_ranges = {"other": Range1d(0, 2)}
    _bokeh.sync_views(widget)
    assert not fig.extra_x_ranges["other"].syncable


def test_cell_grid_hatches_with_one_pattern_layer():
    grid = _bokeh.CellGrid(title="t")
    categories = np.array([[0, -1], [1, -1]])
    grid.update(categories)
    assert grid.rect_renderer.glyph.hatch_pattern is None
    hatch = grid.hatch_renderer.glyph
    assert hatch.hatch_pattern == _bokeh.PADDING_HATCH  # one value, not a column per cell
    assert grid.hatch_renderer.view.filter.group == _bokeh.PADDING_HATCH
    assert list(grid.cells.data["hatch"]).count(_bokeh.PADDING_HATCH) == 2
    grid.set_rect_size(2.0, 3.0)
    assert (hatch.width, hatch.height) == (2.0, 3.0) == (grid.rect_renderer.glyph.width,
                                                          grid.rect_renderer.glyph.height)
    assert _bokeh.CellGrid(title="t", empty_hatch=None).hatch_renderer is None


def _bokeh_column(*items):
    from bokeh.layouts import column

    return column(*items)


def test_a_redraw_sends_only_the_columns_that_changed(monkeypatch):
    fig = figure(width=200, height=200)
    moved = ColumnDataSource({"x": np.array([0.0, 1.0, np.nan]), "y": np.array([0.0, 1.0, 2.0]),
                              "name": ["a", "b", "c"]})
    same = ColumnDataSource({"x": np.array([0.0, 1.0, np.nan]), "name": ["a", "b", "c"]})
    fig.scatter("x", "y", source=moved)
    fig.scatter("x", "x", source=same)
    widget = _bokeh.wrap(fig)
    page = _page_copy(widget)
    recorder = _Recorder(monkeypatch)
    with _bokeh.batched_patches():
        # Every column set again (new objects, NaN included); only "y" holds other values.
        moved.data = {"x": np.array([0.0, 1.0, np.nan]), "y": np.array([5.0, 6.0, 7.0]), "name": ["a", "b", "c"]}
        same.data = {"x": np.array([0.0, 1.0, np.nan]), "name": ["a", "b", "c"]}
    [message] = recorder.patches(widget)
    data_events = [event for event in message.content["events"] if event["kind"] == "ColumnDataChanged"]
    # The data travels as bokeh's encoded map: [name, column] entries.
    assert [(event["model"]["id"], event["cols"], [name for name, _ in event["data"]["entries"]])
            for event in data_events] == [(moved.id, ["y"], ["y"])]
    _replay(widget, page, recorder)
    assert _state(page) == _state(widget._document)

    # Nothing changed at all: nothing is sent.
    recorder.fragments.clear()
    with _bokeh.batched_patches():
        same.data = {"x": np.array([0.0, 1.0, np.nan]), "name": ["a", "b", "c"]}
    assert recorder.fragments == []

    # A column removed, or a length changed, cannot be a partial update: sent whole or by every column.
    recorder.fragments.clear()
    page = _page_copy(widget)
    with _bokeh.batched_patches():
        moved.data = {"x": np.array([0.0, 1.0, 2.0, 3.0]), "y": np.array([5.0, 6.0, 7.0, 8.0]),
                      "name": ["a", "b", "c", "d"]}
        same.data = {"x": np.array([0.0, 1.0, np.nan])}
    [message] = recorder.patches(widget)
    sent = {event["model"]["id"]: event["cols"] for event in message.content["events"]
            if event["kind"] == "ColumnDataChanged"}
    assert sent == {moved.id: ["x", "y", "name"], same.id: None}
    _replay(widget, page, recorder)
    assert _state(page) == _state(widget._document)


def test_memory_timeline_reorder_sends_the_table_not_the_hbm_chart(monkeypatch):
    """sort_by changes the order of the live buffers only: the HBM chart's data (hundreds of
    segments) stays on the page, the Gantt bars and table are sent, and the page ends with
    the kernel's state."""
    from scwork.widgets import MemoryTimeline

    explorer = MemoryTimeline.demo()
    widget = explorer._linked_view
    page = _page_copy(widget)
    recorder = _Recorder(monkeypatch)
    explorer.controls["sort_by"].index = 1 - explorer.controls["sort_by"].index
    [message] = recorder.patches(widget)
    sent = {event["model"]["id"] for event in message.content["events"] if event["kind"] == "ColumnDataChanged"}
    assert explorer.sources["live_at_peak"].id in sent
    assert explorer.sources["hbm_segments"].id not in sent and len(explorer.sources["hbm_segments"].data["top"]) > 10
    _replay(widget, page, recorder)
    assert _state(page) == _state(widget._document)


def test_data_the_page_changed_is_sent_whole_next_time(monkeypatch):
    fig = figure(width=200, height=200)
    source = ColumnDataSource({"x": [0.0, 1.0], "y": [2.0, 3.0]})
    fig.scatter("x", "y", source=source)
    widget = _bokeh.wrap(fig)
    recorder = _Recorder(monkeypatch)
    # The page edits "x" (as an editable table would): the kernel applies it, sends nothing back.
    source.set_from_json("data", {"x": [5.0, 6.0], "y": [2.0, 3.0]}, setter=widget)
    assert recorder.fragments == []
    # Python then sets what it had sent before: the page has other values, so all of it goes.
    with _bokeh.batched_patches():
        source.data = {"x": [0.0, 1.0], "y": [2.0, 3.0]}
    [message] = recorder.patches(widget)
    [event] = [event for event in message.content["events"] if event["kind"] == "ColumnDataChanged"]
    assert event["cols"] is None
