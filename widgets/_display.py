"""Showing bokeh figures in Jupyter and exporting them: BokehJS loading, the ``BokehModel`` wrapper, keeping several views in sync, standalone HTML export (inline resources, works offline).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from bokeh.embed import file_html
from bokeh.resources import INLINE

__all__ = ["ensure_bokehjs", "wrap", "sync_views", "SyncedDisplay", "export_html"]


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
