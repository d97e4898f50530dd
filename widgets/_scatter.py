"""A scatter of candidates with a colour scale, a drawn front, marked points and a tap selection.

:class:`ScatterChart` draws points ``(x, y)`` coloured by a value on a continuous
ramp (with a colour bar), faded where ``active`` is False, a line through the points
of a front (in x order), extra marked points (e.g. a baseline) and the selected point.
Tapping a point selects it; ``on_select`` gets its index. Every update replaces the
sources' data in place, so the view never rebuilds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["ScatterChart"]


class ScatterChart:
    """Points coloured by a value, a front line, marked points and a tap selection.

    Attributes
    ----------
    figure : bokeh figure
    sources : dict of str to ColumnDataSource
        ``points`` (``x``, ``y``, ``value``, ``alpha``, ``index`` and any extra
        columns for the hover), ``front`` (``x``, ``y``), ``marked`` (``x``, ``y``,
        ``label``), ``selected`` (``x``, ``y``).
    """

    def __init__(self, *, x_label: str, y_label: str, value_label: str, width: int = 560, height: int = 380,
                 tooltips: Sequence[tuple[str, str]] = (), palette: Sequence[str] | None = None):
        from bokeh.models import ColorBar, ColumnDataSource, HoverTool, LinearColorMapper, TapTool
        from bokeh.palettes import Viridis256
        from bokeh.plotting import figure

        self.sources = {
            "points": ColumnDataSource({"x": [], "y": [], "value": [], "alpha": [], "index": []}),
            "front": ColumnDataSource({"x": [], "y": []}),
            "marked": ColumnDataSource({"x": [], "y": [], "label": []}),
            "selected": ColumnDataSource({"x": [], "y": []}),
        }
        self.mapper = LinearColorMapper(palette=list(palette or Viridis256), low=0, high=1)
        fig = figure(width=width, height=height, x_axis_label=x_label, y_axis_label=y_label,
                     tools="pan,wheel_zoom,box_zoom,reset", toolbar_location="right")
        points = fig.scatter("x", "y", source=self.sources["points"], size=8, line_color=None,
                             fill_color={"field": "value", "transform": self.mapper}, fill_alpha="alpha")
        fig.line("x", "y", source=self.sources["front"], line_color="#d62728", line_width=2, legend_label="front")
        fig.scatter("x", "y", source=self.sources["marked"], marker="diamond", size=16, fill_color=None,
                    line_color="black", line_width=2, legend_label="library default")
        fig.scatter("x", "y", source=self.sources["selected"], size=18, fill_color=None, line_color="#ff7f0e",
                    line_width=3)
        fig.add_tools(HoverTool(renderers=[points], tooltips=[("#", "@index"), *tooltips]),
                      TapTool(renderers=[points]))
        fig.add_layout(ColorBar(color_mapper=self.mapper, title=value_label, width=10), "right")
        fig.legend.location = "top_right"
        fig.legend.click_policy = "hide"
        self.figure = fig
        self._callbacks: list[Callable[[int], None]] = []
        self.sources["points"].selected.on_change("indices", self._on_tap)

    def on_select(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(index)`` with the ``index`` column of a tapped point."""
        self._callbacks.append(callback)

    def _on_tap(self, attr, old, new) -> None:
        if not new:
            return
        index = int(self.sources["points"].data["index"][new[0]])
        for callback in self._callbacks:
            callback(index)

    def update(self, x, y, value, active, *, index=None, extra: dict | None = None, front: Sequence[int] = (),
               marked: Sequence[tuple[int, str]] = (), selected: int | None = None) -> None:
        """Replace everything drawn: points, colours (``value``, scaled to its range), front, marks, selection."""
        x, y, value = (np.asarray(a, dtype=float) for a in (x, y, value))
        index = np.arange(x.size) if index is None else np.asarray(index)
        finite = value[np.isfinite(value)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        self.mapper.update(low=low, high=high if high > low else low + 1e-12)
        self.sources["points"].data = {"x": x, "y": y, "value": value, "index": index,
                                       "alpha": np.where(np.asarray(active, bool), 0.9, 0.15), **(extra or {})}
        order = sorted(front, key=lambda i: (x[i], y[i]))
        self.sources["front"].data = {"x": x[order], "y": y[order]}
        self.sources["marked"].data = {"x": [x[i] for i, _ in marked], "y": [y[i] for i, _ in marked],
                                       "label": [label for _, label in marked]}
        self.select(selected, x, y)

    def select(self, selected: int | None, x=None, y=None) -> None:
        """Ring the point ``selected`` (None: none)."""
        data = self.sources["points"].data
        x = data["x"] if x is None else x
        y = data["y"] if y is None else y
        if selected is None or not 0 <= selected < len(x):
            self.sources["selected"].data = {"x": [], "y": []}
        else:
            self.sources["selected"].data = {"x": [x[selected]], "y": [y[selected]]}
