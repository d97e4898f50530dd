"""Timelines of intervals on lanes (:class:`Gantt`): pipeline stages, collective steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from bokeh.models import ColumnDataSource, FixedTicker, HoverTool, Range1d
from bokeh.plotting import figure

from scwork.widgets._cells import _as_column

__all__ = ["Gantt"]


class Gantt:
    """Intervals on horizontal lanes against time, with a marker per lane.

    Lane ``i`` is drawn at ``y = -i`` (first lane on top) and labelled with its name.
    Use it for any timeline: the steps of a collective, pipeline stages per device.

    Parameters
    ----------
    title : str
    value_names : sequence of str
        Extra interval columns shown in the hover.
    x_axis_label : str
    width : int
        Frame width in pixels.
    lane_height : int
        Pixels per lane.

    Attributes
    ----------
    figure : bokeh.plotting.figure
    bars : ColumnDataSource
        ``lane, left, right, color`` and the value columns (``lane`` = lane index).
    highlight : ColumnDataSource
        ``lane, left, right``: intervals drawn with a thick outline (e.g. the current step).
    marker : ColumnDataSource
        ``lane, x``: a vertical tick per lane (e.g. the time reached so far).
    lane_labels : ColumnDataSource
        ``lane, x, text``: text at the end of each lane (e.g. the total time).
    """

    def __init__(self, *, title: str = "", value_names: Sequence[str] = (),
                 x_axis_label: str = "time", width: int = 1100, lane_height: int = 46):
        self.value_names = tuple(value_names)
        self.lane_height = int(lane_height)
        self.bars = ColumnDataSource({k: [] for k in ("lane", "top", "bottom", "left", "right",
                                                       "color", *self.value_names)})
        self.highlight = ColumnDataSource({k: [] for k in ("top", "bottom", "left", "right")})
        self.marker = ColumnDataSource({k: [] for k in ("x", "y0", "y1")})
        self.lane_labels = ColumnDataSource({k: [] for k in ("x", "y", "text")})
        self.figure = figure(title=title, x_range=Range1d(0, 1), y_range=Range1d(-0.6, 0.6),
                             frame_width=int(width), frame_height=self.lane_height,
                             tools="xpan,xwheel_zoom,reset,save", toolbar_location="right",
                             x_axis_label=x_axis_label)
        fig = self.figure
        fig.ygrid.visible = False
        self._lane_ticks = FixedTicker(ticks=[])
        fig.yaxis.ticker = self._lane_ticks
        bars = fig.quad(left="left", right="right", top="top", bottom="bottom", source=self.bars,
                        fill_color="color", line_color="#ffffff", line_width=0.5)
        fig.quad(left="left", right="right", top="top", bottom="bottom", source=self.highlight,
                 fill_color=None, line_color="#111111", line_width=2.5)
        fig.segment(x0="x", y0="y0", x1="x", y1="y1", source=self.marker,
                    line_color="#d62728", line_width=3)
        fig.text(x="x", y="y", text="text", source=self.lane_labels, text_baseline="middle",
                 text_font_size="11px", x_offset=6)
        if self.value_names:
            fig.add_tools(HoverTool(renderers=[bars], tooltips=[(n, f"@{{{n}}}")
                                                                for n in self.value_names]))

    def set_lanes(self, names: Sequence[str], *, x_end: float, label_room: float = 0.14) -> None:
        """Name the lanes (top to bottom) and set the time axis to ``[0, x_end]``.

        ``label_room`` adds that fraction of ``x_end`` on the right for the lane labels.
        """
        n = len(names)
        fig = self.figure
        self._lane_ticks.ticks = [-i for i in range(n)]
        fig.yaxis.major_label_overrides = {-i: str(name) for i, name in enumerate(names)}
        fig.y_range.start, fig.y_range.end = -(n - 1) - 0.6, 0.6
        fig.frame_height = max(self.lane_height * n, 40)
        end = float(x_end) if x_end > 0 else 1.0
        fig.x_range.start, fig.x_range.end = 0.0, end * (1 + label_room)

    @staticmethod
    def _rows(lane) -> tuple[np.ndarray, np.ndarray]:
        lane = np.asarray(lane, dtype=float)
        return -lane + 0.38, -lane - 0.38

    def set_bars(self, data: Mapping[str, Any]) -> None:
        """Replace the intervals: ``lane, left, right, color`` and the value columns."""
        data = dict(data)
        missing = [k for k in ("lane", "left", "right", "color", *self.value_names) if k not in data]
        if missing:
            raise ValueError(f"Gantt bars lack columns {missing}")
        data["top"], data["bottom"] = self._rows(data["lane"])
        self.bars.data = {k: _as_column(v) for k, v in data.items()}

    def set_marker(self, lanes, x, *, highlight_left=None, highlight_right=None,
                   highlight_lanes=None) -> None:
        """Put the per-lane tick at time ``x`` and outline the given intervals."""
        top, bottom = self._rows(lanes)
        self.marker.data = {"x": np.asarray(x, dtype=float), "y0": bottom - 0.08, "y1": top + 0.08}
        if highlight_left is None:
            self.highlight.data = {k: [] for k in ("top", "bottom", "left", "right")}
        else:
            h_top, h_bottom = self._rows(highlight_lanes if highlight_lanes is not None else lanes)
            self.highlight.data = {"top": h_top, "bottom": h_bottom,
                                   "left": np.asarray(highlight_left, dtype=float),
                                   "right": np.asarray(highlight_right, dtype=float)}

    def set_lane_labels(self, lanes, x, text: Sequence[str]) -> None:
        """Text at time ``x`` on each lane (e.g. the lane's total)."""
        self.lane_labels.data = {"x": np.asarray(x, dtype=float), "y": -np.asarray(lanes, dtype=float),
                                 "text": list(text)}


# ======================================================================================
# One x axis for a chart and the Gantt under it (appended for the memory timeline): the
# same x is the same pixel column and carries the same tick label in both.
# ======================================================================================


def align_x_axis(figure, reference, *, min_border_left: int) -> None:
    """Draw ``figure``'s x axis exactly as ``reference``'s, one above the other.

    Both figures get the same left border (so that their frames start at the same
    pixel when they are stacked in one column), ``figure`` shares ``reference``'s x
    range (panning or zooming one moves the other) and takes its ticker, tick labels
    (``major_label_overrides``, e.g. event names), label orientation and axis label.
    Call it again after every change of ``reference``'s axis; give both figures the
    same ``frame_width``.

    Parameters
    ----------
    figure, reference : bokeh.plotting.figure
    min_border_left : int
        Pixels left of both frames: at least the wider of the two y axes (tick labels
        and axis label), else the frames start at different pixels.
    """
    figure.min_border_left = reference.min_border_left = int(min_border_left)
    if figure.x_range is not reference.x_range:
        figure.x_range = reference.x_range
    axis, ref_axis = figure.xaxis[0], reference.xaxis[0]
    axis.ticker = ref_axis.ticker
    axis.major_label_overrides = dict(ref_axis.major_label_overrides)
    axis.major_label_orientation = ref_axis.major_label_orientation
    axis.axis_label = ref_axis.axis_label
