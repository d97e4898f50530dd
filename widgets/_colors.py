"""Colors shared by every explorer.

The categorical palette (ids of tiles, channels, devices...), padding and empty cells,
readable text on a fill, ramps and heatmap palettes, the limit line.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from bokeh import palettes as _palettes

__all__ = [
    "CATEGORY_PALETTE",
    "PADDING_COLOR",
    "EMPTY_COLOR",
    "PADDING_HATCH",
    "category_colors",
    "text_colors",
    "PROGRESS_RAMP",
    "ramp_colors",
    "LIMIT_COLOR",
    "HEATMAP_PALETTE",
]


#: Colors for ids 0, 1, 2, ... (cycling). Category20 without its two grays (reserved
#: for padding), reordered so that consecutive ids alternate dark/light and change hue:
#: neighbouring tiles never share a color unless there are more than 18 of them in a row.
CATEGORY_PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ffbb78", "#2ca02c", "#ff9896", "#9467bd", "#c49c94",
    "#e377c2", "#dbdb8d", "#17becf", "#aec7e8", "#ff7f0e", "#98df8a",
    "#d62728", "#c5b0d5", "#8c564b", "#f7b6d2", "#bcbd22", "#9edae5",
)
#: Color of padding cells (id -1 in a padded grid); gray is not in the palette.
PADDING_COLOR = "#d4d4d4"
#: Color of free / unused cells (id -1 in an occupancy map): shown blank.
EMPTY_COLOR = "#ffffff"
#: Hatch pattern drawn over padding cells on the small-grid (rect) path.
PADDING_HATCH = "/"

_DARK_TEXT = "#202020"
_LIGHT_TEXT = "#ffffff"


def _luminance(color: str) -> float:
    """Relative luminance (0 dark .. 1 light) of a ``#rrggbb`` color."""
    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def category_colors(ids: np.ndarray, *, palette: Sequence[str] = CATEGORY_PALETTE,
                    empty_color: str = PADDING_COLOR) -> np.ndarray:
    """Color of every id: ``palette[id % len(palette)]``, ``empty_color`` for ``id < 0``.

    Parameters
    ----------
    ids : array of int
        Category ids of any shape; negative means "no category" (padding, free).
    palette : sequence of str
        ``#rrggbb`` colors, cycled.
    empty_color : str
        Color of negative ids.

    Returns
    -------
    numpy.ndarray of str
        Same shape as ``ids``.
    """
    ids = np.asarray(ids)
    table = np.array([*palette, empty_color], dtype=object)
    index = np.where(ids >= 0, ids % len(palette), len(palette))
    return table[index]


def text_colors(ids: np.ndarray, *, palette: Sequence[str] = CATEGORY_PALETTE,
                empty_color: str = PADDING_COLOR) -> np.ndarray:
    """A readable label color (dark or white) for every id's cell color."""
    ids = np.asarray(ids)
    table = np.array([_LIGHT_TEXT if _luminance(c) < 0.45 else _DARK_TEXT
                      for c in (*palette, empty_color)], dtype=object)
    index = np.where(ids >= 0, ids % len(palette), len(palette))
    return table[index]


# ---------------------------------------------------------------------------------------
# Node-link graphs with arrows, and step timelines (Gantt charts)
#
# Added for the all-reduce stepper; generic enough for any network drawing (nodes in
# groups, links, arrows of the current step) and any timeline of intervals on lanes
# (pipeline stages, collective steps).
# ---------------------------------------------------------------------------------------


#: Sequential ramp (white to dark green) for "how far along" values in [0, 1].
PROGRESS_RAMP: tuple[str, ...] = (
    "#ffffff", "#e5f5e0", "#c7e9c0", "#a1d99b", "#74c476", "#41ab5d", "#238b45", "#006d2c",
)


def ramp_colors(values: np.ndarray, *, low: float = 0.0, high: float = 1.0,
                ramp: Sequence[str] = PROGRESS_RAMP) -> np.ndarray:
    """Color of every value on a sequential ramp (``low`` -> first color, ``high`` -> last).

    Values outside ``[low, high]`` take the end colors; NaN takes the first color.
    """
    values = np.asarray(values, dtype=float)
    span = (high - low) or 1.0
    position = np.clip(np.nan_to_num((values - low) / span, nan=0.0), 0.0, 1.0)
    index = np.rint(position * (len(ramp) - 1)).astype(np.int64)
    return np.asarray(ramp, dtype=object)[index]


# ======================================================================================
# Bar charts and heatmaps of counts (appended for the load-skew explorer; generic).
# ======================================================================================


#: Color of reference lines such as a configured limit.
LIMIT_COLOR = "#d62728"
#: Sequential palette of :class:`Heatmap` (perceptually uniform, colorblind safe).
HEATMAP_PALETTE: tuple[str, ...] = tuple(_palettes.Viridis256)
