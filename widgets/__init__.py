"""Jupyter explorers for scwork (imported as ``scwork.widgets``).

This package draws what the engine computes; it holds no model logic. It needs
the ``widgets`` extra (ipywidgets, bokeh, jupyter_bokeh)::

    pip install "scwork[widgets]"

Each explorer lives in its own module and is imported on first use, so importing
one does not pay for the others. Shared drawing helpers live in
:mod:`scwork.widgets._bokeh`.

Examples
--------
>>> from scwork.widgets import LayoutExplorer  # doctest: +SKIP
>>> LayoutExplorer(text="bf16[16,256]{1,0:T(8,128)(2,1)}")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import importlib.util

#: Explorer name -> module that defines it.
_EXPLORERS = {
    "LayoutExplorer": "scwork.widgets.layout_explorer",
    "LoadSkewExplorer": "scwork.widgets.load_skew",
    "MemoryTimeline": "scwork.widgets.memory_timeline",
    "AllReduceStepper": "scwork.widgets.allreduce_stepper",
    "PipelineTimeline": "scwork.widgets.pipeline_timeline",
    "PlanExplorer": "scwork.widgets.plan_explorer",
}

# Only explorers whose module ships in this version (later issues add the rest).
__all__ = ["show", *sorted(name for name, module in _EXPLORERS.items() if importlib.util.find_spec(module))]


def show(bokeh_object) -> None:
    """Display a bokeh figure or layout in the notebook, offline (BokehJS inlined once).

    Use it instead of ``bokeh.io.show`` after ``output_notebook()``, which fetches
    BokehJS from a CDN: that fails without internet and mixes two ways of loading
    BokehJS in one page. The figure becomes a ``jupyter_bokeh.BokehModel`` widget, so
    later changes to its data sources update it in place.
    """
    from IPython.display import display

    from scwork.widgets._bokeh import sync_views, wrap

    widget = wrap(bokeh_object)
    sync_views(widget)
    display(widget)


def __getattr__(name: str):
    if name in _EXPLORERS:
        try:
            module = importlib.import_module(_EXPLORERS[name])
        except ModuleNotFoundError as err:
            if err.name != _EXPLORERS[name]:
                raise
            raise AttributeError(f"{name} is not available in this version of scwork") from None
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'scwork.widgets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPLORERS))
