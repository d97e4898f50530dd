"""Shared bokeh drawing helpers for the scwork explorers: the index.

Every explorer (layouts, load skew, memory timeline, all-reduce stepper, pipeline
Gantt) draws through these helpers so colors, grids and exports look and behave the
same. Nothing here knows about layouts or chips: the helpers take plain arrays. Each
kind of figure has its own module; this one re-exports them all, so explorers write
``_bokeh.CellGrid`` and a newcomer finds the helper's code by its kind:

- :mod:`._colors`: :data:`CATEGORY_PALETTE`, :func:`category_colors` (cycling colors
  for integer ids, fixed colors for "empty" ids), :func:`text_colors`, ramps,
  :data:`HEATMAP_PALETTE`, :data:`LIMIT_COLOR`.
- :mod:`._cells`: :class:`CellGrid`, a 2-D grid of categorical cells updated in place
  (``rect`` cells with labels when small, one ``image`` glyph with hover when large,
  so a 512x512 grid stays responsive), and :class:`AddressStrip`, a 1-D buffer in
  address order wrapped into rows of a :func:`strip_width`.
- :mod:`._charts`: :class:`BarChart`, :class:`Heatmap`.
- :mod:`._areas`: :class:`StackedAreaChart` (what is live at each step against a
  capacity), byte axes, :func:`link_selection`.
- :mod:`._graph`: :class:`NodeLinkGraph` (nodes, links, arrows of a step).
- :mod:`._scatter`: :class:`ScatterChart` (points coloured by a value, a front line,
  marked points, a tap selection).
- :mod:`._gantt`: :class:`Gantt` (intervals on lanes).
- :mod:`._html`: :func:`summary_table_html`, :func:`message_html`,
  :func:`columns_table_html`, :func:`format_bytes`.
- :mod:`._display`: :func:`wrap` (a bokeh layout as a ``jupyter_bokeh.BokehModel``
  widget), :func:`sync_views`, :class:`SyncedDisplay`, :func:`batched_patches` (the
  bokeh changes of one update sent as one patch), :func:`export_html` (a
  standalone HTML file with inline resources: works offline).

The zoomable grid for views larger than the screen is :mod:`._zoom`. An explorer's
view is composed in :mod:`._panes`: ipywidgets boxes of :class:`~._panes.TextPane`
texts and separate bokeh views (a text or size change then re-lays out only a
small part of the page), exported as one bokeh layout by
:func:`~._panes.export_layout`.
"""

from __future__ import annotations

from scwork.widgets._areas import StackedAreaChart, bytes_tick_formatter, bytes_ticker, link_selection
from scwork.widgets._cells import AddressStrip, CellGrid, strip_width
from scwork.widgets._charts import BarChart, Heatmap
from scwork.widgets._colors import (
    CATEGORY_PALETTE,
    EMPTY_COLOR,
    HEATMAP_PALETTE,
    LIMIT_COLOR,
    PADDING_COLOR,
    PADDING_HATCH,
    PROGRESS_RAMP,
    category_colors,
    ramp_colors,
    text_colors,
)
from scwork.widgets._display import SyncedDisplay, batched_patches, ensure_bokehjs, export_html, sync_views, wrap
from scwork.widgets._gantt import Gantt
from scwork.widgets._graph import NodeLinkGraph, arrow_segments, fit_equal_aspect
from scwork.widgets._html import columns_table_html, format_bytes, message_html, summary_table_html
from scwork.widgets._scatter import ScatterChart

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
    "batched_patches",
    "export_html",
    "PROGRESS_RAMP",
    "ramp_colors",
    "arrow_segments",
    "fit_equal_aspect",
    "NodeLinkGraph",
    "Gantt",
    "LIMIT_COLOR",
    "HEATMAP_PALETTE",
    "BarChart",
    "Heatmap",
    "columns_table_html",
    "format_bytes",
    "bytes_tick_formatter",
    "bytes_ticker",
    "link_selection",
    "StackedAreaChart",
    "ScatterChart",
]



