"""Showing bokeh figures in Jupyter and exporting them.

BokehJS loading, the ``BokehModel`` wrapper, keeping several views in sync, and
standalone HTML export (inline resources, works offline).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

import numpy as np
from bokeh.embed import file_html
from bokeh.resources import INLINE

from scwork.widgets._panes import export_layout

__all__ = ["ensure_bokehjs", "wrap", "figure_view", "sync_views", "SyncedDisplay", "export_html",
           "batched_patches", "stop_echoes", "collapse_patch_events", "hold_render_around", "SentColumns"]


#: The kernel clients (pages) that were sent BokehJS, by the ``session`` of their
#: messages' headers. JupyterLab gives every connection to a kernel a session id of its
#: own: a page opened or reloaded on a running kernel, or a second page on it, is a new
#: client and needs BokehJS again; a restarted kernel starts with an empty set.
_BOKEHJS_SENT_TO: set[str] = set()


def _client_session(shell) -> str | None:
    """The session id of the client whose request the kernel is running now (None if unknown)."""
    get_parent = getattr(shell.kernel, "get_parent", None)
    parent = get_parent() if get_parent is not None else getattr(shell, "parent_header", None)
    session = ((parent or {}).get("header") or {}).get("session")
    return session or None


@functools.cache
def _bokehjs_load_js() -> str:
    """The script that loads BokehJS (inlined) into a page that does not have this version yet.

    bokeh's own notebook loader (``bokeh.io.notebook.load_notebook``, with ``INLINE``
    resources) runs the whole bundle again in a page that already has it; the guard
    skips it there (a kernel restarted under an open page, two notebooks of one page
    on one kernel), so the views already drawn keep their BokehJS.

    It is sent as ``application/javascript``, which JupyterLab evaluates as soon as the
    output arrives. bokeh's ``output_notebook`` also offers it as
    ``application/vnd.bokehjs_load.v0+json``, which JupyterLab prefers and jupyter_bokeh
    runs as a ``<script>`` element: a script runs only once its element is in the
    document, and JupyterLab leaves the cells scrolled out of view out of the
    document, so an explorer's view could be created before BokehJS (seen as "Could
    not create a view for model id" after Run All in a re-opened page).

    After the guard comes :data:`._bokehjs_fixes.DATATABLE_WHEN_CONNECTED_JS`, which
    patches the page's BokehJS once (whether this load or an earlier one brought it).
    """
    import json

    from bokeh import __version__ as bokeh_version
    from bokeh.embed.bundle import bundle_for_objs_and_resources
    from bokeh.io.notebook import _loading_js

    from ._bokehjs_fixes import DATATABLE_WHEN_CONNECTED_JS

    loader = _loading_js(bundle_for_objs_and_resources(None, INLINE), None, 5000, register_mime=True)
    version = json.dumps(bokeh_version)
    return (f"if (typeof window.Bokeh === 'undefined' || window.Bokeh.version !== {version}) {{\n"
            f"{loader}\n}}\n{DATATABLE_WHEN_CONNECTED_JS}")


def ensure_bokehjs() -> None:
    """Load BokehJS into the notebook page that runs this cell, once per page (inlined: works offline).

    jupyter_bokeh's ``BokehModel`` renders with the page's BokehJS (``window.Bokeh``)
    but never loads it: without this, every explorer shows "Could not create a view
    for model id" in JupyterLab. The load must be inline (not CDN): the widget view
    needs BokehJS synchronously when it is created. BokehJS lives in the page, not in
    the kernel, so the load is sent once per client of the kernel (a page, see
    :data:`_BOKEHJS_SENT_TO`), as an output of the cell being run, before the
    explorer's own output. It is the loader bokeh's ``output_notebook`` publishes,
    guarded so that a page that has this BokehJS runs nothing (see
    :func:`_bokehjs_load_js`).
    Outside a Jupyter kernel (scripts, terminal IPython) there is no page and nothing
    happens.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return
    session = _client_session(shell)
    if session is not None and session in _BOKEHJS_SENT_TO:
        return
    from IPython.display import publish_display_data

    publish_display_data({"application/javascript": _bokehjs_load_js()})
    if session is not None:
        _BOKEHJS_SENT_TO.add(session)


class _PatchBatch:
    """Bokeh changes held back while :func:`batched_patches` blocks are open."""

    depth = 0
    #: id(widget) -> (widget, its held events), in the order of the first held event.
    held: dict[int, tuple] = {}


@contextlib.contextmanager
def batched_patches():
    """Send the bokeh changes made inside as one patch per shown view, at the end.

    jupyter_bokeh sends each change of a shown bokeh model as a patch of its own
    (three comm messages, plus two per binary array), and the page decodes and
    applies each one apart. One control change redraws tens of models (sources,
    ranges, titles), so the explorers hold the changes of a whole update and send
    them as one patch per view: far fewer messages for the kernel to send and the
    page to handle, one application in BokehJS. Re-entrant: the outermost block
    sends. What the page ends up with is the same as without the block.
    """
    _PatchBatch.depth += 1
    try:
        yield
    finally:
        _PatchBatch.depth -= 1
        if _PatchBatch.depth == 0:
            held, _PatchBatch.held = _PatchBatch.held, {}
            for widget, events in held.values():
                widget._send_patch(events)


def collapse_patch_events(events: list) -> list:
    """The held bokeh changes that still matter, in order: the last change of each model attribute.

    A held patch is serialized when it is sent, from the models' state then, so an
    attribute changed twice (e.g. a figure height set to a default, then to its value)
    needs only its last change: BokehJS lays out the whole document again for each
    size change it applies, and skips a value equal to the one it has. The data of a
    source is sent whole, once (its current columns), whatever mix of replacements,
    streams and patches changed it: the current columns already contain them; and
    after every other change.
    """
    from bokeh.document.events import (
        ColumnDataChangedEvent,
        ColumnsPatchedEvent,
        ColumnsStreamedEvent,
        ModelChangedEvent,
    )

    data_events = (ColumnDataChangedEvent, ColumnsStreamedEvent, ColumnsPatchedEvent)
    last: dict[tuple, int] = {}
    for index, event in enumerate(events):
        if isinstance(event, (ModelChangedEvent, *data_events)):
            last[(event.model.id, event.attr)] = index
    kept, data = [], []
    for index, event in enumerate(events):
        if isinstance(event, (ModelChangedEvent, *data_events)):
            if last[(event.model.id, event.attr)] != index:
                continue
            if isinstance(event, data_events):
                if not (isinstance(event, ColumnDataChangedEvent) and event.data is None and event.cols is None):
                    event = ColumnDataChangedEvent(event.document, event.model, event.attr, setter=event.setter)
                data.append(event)
                continue
        kept.append(event)
    # New data last: BokehJS updates a renderer's arrays for new data asynchronously, so a
    # property change applied after it in the same patch (e.g. a text size) would draw
    # the renderer with arrays of two lengths and fail.
    return kept + data


def hold_render_around(events: list) -> list:
    """``events`` with every plot of their document held from painting until the last one.

    BokehJS lays out the whole document again, and paints every plot at once, for each
    size or text change it applies; a patch of several changes would paint every plot
    several times. Each plot gets ``hold_render`` set first and its own value back last
    (one paint per plot, after the patch) when the patch has two changes or more
    besides new data. Only the message changes: the Python models keep their
    ``hold_render``, and a plot held by its user stays held.
    """
    from bokeh.document.events import ColumnDataChangedEvent, ModelChangedEvent
    from bokeh.models import Plot

    # New data alone repaints only its plots, after the patch: nothing to hold.
    if sum(not isinstance(event, ColumnDataChangedEvent) for event in events) < 2:
        return events
    document = events[0].document
    plots = [model for model in document.models if isinstance(model, Plot) and not model.hold_render]
    hold = [ModelChangedEvent(document, plot, "hold_render", True) for plot in plots]
    release = [ModelChangedEvent(document, plot, "hold_render", False) for plot in plots]
    return hold + events + release


def _same_column(new, old) -> bool:
    """Whether column ``new`` holds what ``old`` (a copy of what was sent) holds: same length, type and values."""
    if isinstance(new, np.ndarray) or isinstance(old, np.ndarray):
        if not (isinstance(new, np.ndarray) and isinstance(old, np.ndarray)):
            return False
        if new.shape != old.shape or new.dtype != old.dtype:
            return False
        if new.dtype.kind in "fc":
            return bool(np.array_equal(new, old, equal_nan=True))
        return bool(np.array_equal(new, old))
    new = list(new)
    if len(new) != len(old):
        return False
    if new and isinstance(new[0], np.ndarray):  # an image glyph's column: one 2-D array per image
        return all(_same_column(a, b) for a, b in zip(new, old))
    try:
        return bool(new == old)
    except (TypeError, ValueError):  # items that do not compare to a truth value: send the column
        return False


def _column_copy(column):
    """A copy of a source column as it was sent: arrays copied (also inside lists), other items are immutable."""
    if isinstance(column, np.ndarray):
        return column.copy()
    column = list(column)
    if column and isinstance(column[0], np.ndarray):  # an image glyph's column: one 2-D array per image
        return [item.copy() for item in column]
    return column


class SentColumns:
    """The columns of every data source of one view as the page has them, to send only what changed.

    An explorer's redraw sets every source's data again, most of it unchanged (the HBM
    chart when only the table's order changes, the bars' colors when only their
    heights change). BokehJS recomputes a glyph's every array, spatial index and
    screen coordinates for each new ``data`` it gets, and the page decodes every
    column sent (hundreds of KiB per change in the MemoryTimeline): so each data
    change is sent as the columns that differ from what the page has
    (``ColumnDataChanged`` with ``cols``: BokehJS keeps the other columns), and a
    source whose columns all match is not sent at all. A column removed, or a source
    the page has not seen since the last full serialization, is sent whole.
    """

    def __init__(self):
        self._sent: dict[str, dict] = {}

    def reset(self, document) -> None:
        """The page has every source of ``document`` as it is now (a full serialization was just made)."""
        from bokeh.models import ColumnDataSource

        self._sent = {}
        if document is None:
            return
        for model in document.models:
            if isinstance(model, ColumnDataSource):
                self._sent[model.id] = {name: _column_copy(col) for name, col in model.data.items()}

    def forget(self, model) -> None:
        """Send ``model``'s data whole next time (the page changed it itself); any other model: nothing."""
        if model is not None:
            self._sent.pop(model.id, None)

    def reduce(self, events: list) -> list:
        """``events`` with each whole-data change cut to the columns that changed (dropped if none did)."""
        from bokeh.document.events import ColumnDataChangedEvent

        out = []
        for event in events:
            if not (isinstance(event, ColumnDataChangedEvent) and event.attr == "data"
                    and event.data is None and event.cols is None):
                out.append(event)
                continue
            data = event.model.data
            old = self._sent.get(event.model.id)
            self._sent[event.model.id] = {name: _column_copy(col) for name, col in data.items()}
            if old is None or any(name not in data for name in old):
                out.append(event)
                continue
            changed = [name for name, col in data.items() if name not in old or not _same_column(col, old[name])]
            if changed:
                out.append(ColumnDataChangedEvent(event.document, event.model, "data", cols=changed,
                                                  setter=event.setter))
        return out


def _inline_patch(events: list):
    """A bokeh ``PATCH-DOC`` message of ``events`` with every array inside its content.

    As ``bokeh.protocol.Protocol().create("PATCH-DOC", events)`` builds it, except
    that the serializer is not deferred: arrays are encoded in the JSON (base64)
    instead of as separate binary buffers. BokehJS decodes both forms.
    """
    from bokeh.core.serialization import Serializer
    from bokeh.document.json import PatchJson
    from bokeh.protocol.messages.patch_doc import patch_doc

    [document] = {event.document for event in events}
    serializer = Serializer(references=document.models.synced_references, deferred=False)
    content = PatchJson(events=serializer.encode(events))
    document.models.flush_synced(lambda model: not serializer.has_ref(model))
    return patch_doc(patch_doc.create_header(), {}, content)


@functools.cache
def _batched_bokeh_model():
    """``jupyter_bokeh.BokehModel`` whose patches :func:`batched_patches` can hold (built on first use)."""
    from jupyter_bokeh import BokehModel

    class BatchedBokehModel(BokehModel):
        """A ``BokehModel`` that holds its patches inside :func:`batched_patches` blocks.

        The page side is jupyter_bokeh's own (same model and view names); only when
        the patches leave the kernel changes.
        """

        def __init__(self, model, *, ranges_synced: bool = True, **kwargs):
            self._ranges_synced = ranges_synced
            self._sent_columns = SentColumns()
            super().__init__(model, **kwargs)

        def update_from_model(self, model) -> None:
            # Every serialization (creation, sync_views) first marks the models only
            # Python sets, those added since the last one included.
            stop_echoes(model, ranges_synced=self._ranges_synced)
            super().update_from_model(model)
            # The page gets the whole document now: later data changes are sent as
            # the columns that differ from it.
            self._sent_columns.reset(model.document)

        def _document_patched(self, event) -> None:
            if event.setter is self:
                # A change the page made (an edited table cell): what it has is no longer
                # what was sent, so the source's next change goes whole.
                self._sent_columns.forget(getattr(event, "model", None))
                return
            if _PatchBatch.depth:
                _PatchBatch.held.setdefault(id(self), (self, []))[1].append(event)
            else:
                self._send_patch([event])

        def _send_patch(self, events) -> None:
            # As jupyter_bokeh sends one event's patch, for several events at once, and
            # with the arrays inside the content (base64) instead of as binary buffers:
            # jupyter_bokeh's page side takes one fragment per comm message, so each
            # buffer cost two more messages (a topology change sent ~100), each decoded
            # and dispatched on its own by JupyterLab. Now a patch is three messages.
            events = self._sent_columns.reduce(collapse_patch_events(events))
            if not events:
                return
            msg = _inline_patch(hold_render_around(events))
            self.send({"msg": "patch", "payload": msg.header_json})
            self.send({"msg": "patch", "payload": msg.metadata_json})
            self.send({"msg": "patch", "payload": msg.content_json})

        def _sync_model(self, model, content, buffers) -> None:
            # A change made in the page (a range, a plot size) may redraw: one patch back.
            with batched_patches():
                super()._sync_model(model, content, buffers)

    return BatchedBokehModel


def stop_echoes(fig_or_layout, *, ranges_synced: bool = True) -> None:
    """Mark the models only Python changes as not synced back from the page (``syncable=False``).

    jupyter_bokeh's page side sends every change it applies back to the kernel, the
    kernel's own patches included: one message per changed model, a whole column
    set for each new ``data``, which the kernel then decodes only to find it unchanged.
    Models whose state only Python sets (sources, texts, axes, glyphs, the figures'
    computed sizes) need nothing back. Kept synced: selections and ranges (changed
    in the page by a person: Python must know them to reset them) and every model
    with Python property callbacks (``on_change``). A model with only ``on_event``
    callbacks is not synced: BokehJS publishes its events (e.g. ``RangesUpdate``)
    whatever its ``syncable``, and syncing it would echo every property the kernel
    sets (a figure's sizes, its ``hold_render`` around each patch).

    With ``ranges_synced=False`` ranges without Python callbacks are not synced
    either: for views whose ranges only Python sets from the data drawn (each one a
    message back per redraw otherwise). A person's zoom in the page then stays until
    Python sets a range to a value other than its own last one.
    """
    from bokeh.models import Range, Selection

    keep = (Range, Selection) if ranges_synced else (Selection,)
    for model in fig_or_layout.references():
        if isinstance(model, keep) or model._callbacks:
            continue
        if model.syncable:
            model.syncable = False


def wrap(fig_or_layout, *, ranges_synced: bool = True):
    """A bokeh figure or layout as an ipywidget (a ``jupyter_bokeh.BokehModel``).

    Later changes to the bokeh models (source data, ranges, titles) are sent to the
    browser as patches once the widget is shown (inside :func:`batched_patches`,
    as one patch at the end); changes made before that are sent by
    :func:`sync_views` when the explorer is displayed (:class:`SyncedDisplay`).
    Loads BokehJS into the notebook page first (:func:`ensure_bokehjs`); changes are
    not echoed back from the page (:func:`stop_echoes`, with ``ranges_synced``).
    """
    ensure_bokehjs()
    return _batched_bokeh_model()(fig_or_layout, ranges_synced=ranges_synced)


def figure_view(fig_or_layout):
    """A bokeh figure or layout of an explorer as a view of its own (a wrapped ``BokehModel``).

    The explorers set their ranges from the data they draw, on every redraw, and never
    read them back (the layout grid learns a person's zoom from ``RangesUpdate``
    events): the ranges are not synced back from the page (``ranges_synced=False``),
    which saves one round trip per range and redraw. A person's zoom stays until a
    redraw sets another extent.

    The view is never wider than the box it is in: a figure wider than the output
    (a 256-column layout grid, a long timeline in a narrow JupyterLab panel) scrolls
    sideways inside its own box instead of being cut at the output's edge or running
    under the panels beside it.
    """
    view = wrap(fig_or_layout, ranges_synced=False)
    view.layout.max_width = "100%"
    view.layout.overflow = "auto hidden"
    return view


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


_DEFERRING = [0]  # depth of nested _frozen_documents blocks (only the outermost defers)


@contextlib.contextmanager
def _frozen_documents(widget):
    """Walk each bokeh document under ``widget`` at most once, at the end of the block, and only if needed.

    bokeh walks a whole document again (every model, every property with a model in
    it) each time a property that holds models changes, e.g. an axis's ticker: the
    MemoryTimeline's x axis switch changes two tickers of one document, and each walk
    of that document took about 100 ms in the kernel. Inside the block a document
    only notes that it needs the walk, and it is done once when the block ends,
    before :func:`batched_patches` serializes the changes. (bokeh's own
    ``Document.models.freeze`` walks at its end even when nothing changed: a slider
    that changes only data would pay a walk it never needed.)
    """
    if _DEFERRING[0]:
        yield
        return
    # The explorers' views are BatchedBokehModels: the class is built once (no import
    # here, so a trait change while the interpreter shuts down costs nothing).
    view_class = _batched_bokeh_model()
    documents, stack = {}, [widget]
    while stack:
        item = stack.pop()
        if isinstance(item, view_class) and item._model.document is not None:
            documents[id(item._model.document)] = item._model.document
        stack.extend(getattr(item, "children", ()) or ())
    needed: dict[int, list] = {}
    for key, document in documents.items():
        notes = needed[key] = []
        # An instance attribute: this document's models note the walk instead of doing it.
        document.models.invalidate = functools.partial(notes.append, True)
    _DEFERRING[0] += 1
    try:
        yield
    finally:
        _DEFERRING[0] -= 1
        for key, document in documents.items():
            del document.models.invalidate
            if needed[key]:
                document.models.recompute()


@functools.cache
def _warm_xarray() -> None:
    """Pay xarray's one-time work now, while the cell that shows an explorer runs.

    xarray's first object in a process looks for duck-array libraries and imports
    dask when it is installed (about 0.7 s): without this, an explorer whose first
    view needs no xarray (LayoutExplorer's XLA mode) paid it on the first change of a
    control instead (its NPU mode).
    """
    import xarray

    xarray.Variable(("x",), [0])


class SyncedDisplay:
    """Mixin for explorers (ipywidgets boxes): :func:`sync_views` before every display.

    An explorer shows its figures and texts in ``self._views`` (boxes of
    :mod:`scwork.widgets._panes`); ``self._export(path, title)`` writes them to a
    standalone HTML file for its ``to_html``.

    Also gives every explorer one way to set traits and controls without triggering
    its own observers: ``with self._quiet(): ...`` sets ``self._syncing``, which the
    observers check; and sends the bokeh changes made by the observers of one trait
    change as one patch per view (:func:`batched_patches`).
    """

    _syncing = False

    def notify_change(self, change):
        with batched_patches(), _frozen_documents(self):
            super().notify_change(change)

    def _repr_mimebundle_(self, **kwargs):
        # An explorer built while another page ran the kernel (or before a page was
        # reloaded) is shown in a page that may not have BokehJS yet.
        ensure_bokehjs()
        sync_views(self)
        _warm_xarray()
        return super()._repr_mimebundle_(**kwargs)

    def _export(self, path, title: str) -> Path:
        """Write what ``self._views`` (the explorer's boxes of panes and views) shows to a standalone HTML file."""
        return export_html(export_layout(self._views), path, title)

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
    anything from a CDN. ``bokeh_layout`` may gather models shown in several live
    views (documents, see :func:`scwork.widgets._panes.export_layout`): they are
    copied into one new document for the file and stay where they are. Returns the
    path written.
    """
    path = Path(path)
    # The export is a snapshot: Python callbacks (e.g. a zoomable view's redraw on
    # zoom) cannot run in a static page, which bokeh warns about on every export.
    embed_log = logging.getLogger("bokeh.embed.util")
    level = embed_log.level
    embed_log.setLevel(logging.ERROR)
    try:
        # _always_new: a layout gathering models of several documents (the explorers' views)
        # is re-homed in a temporary document, as bokeh does for models of mixed documents.
        page = file_html(bokeh_layout, resources=INLINE, title=title, _always_new=True)
    finally:
        embed_log.setLevel(level)
    path.write_text(page, encoding="utf-8")
    return path
