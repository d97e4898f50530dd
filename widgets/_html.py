"""Small HTML snippets of the explorers.

Summary tables, status messages, column tables, byte counts in binary units.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["summary_table_html", "message_html", "columns_table_html", "format_bytes", "SECONDS_SCALE",
           "seconds_unit", "format_seconds"]


def _format_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.4g}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_format_value(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def summary_table_html(rows: Mapping[str, Any] | Sequence[tuple[str, Any]], *,
                       title: str | None = None) -> str:
    """A compact two-column HTML table (name, value); values are escaped.

    Integers get thousands separators, floats 4 significant digits, tuples are
    printed element-wise.
    """
    items = rows.items() if isinstance(rows, Mapping) else rows
    body = "".join(
        f"<tr><th style='text-align:left;padding:1px 12px 1px 0;font-weight:600'>"
        f"{html.escape(str(name))}</th>"
        f"<td style='padding:1px 0;font-family:monospace'>{html.escape(_format_value(value))}</td></tr>"
        for name, value in items
    )
    caption = (f"<caption style='text-align:left;font-weight:700;padding-bottom:4px'>"
               f"{html.escape(title)}</caption>") if title else ""
    return f"<table style='border-collapse:collapse;font-size:13px'>{caption}{body}</table>"


_MESSAGE_STYLES = {
    "info": ("#333333", "#f4f4f4"),
    "ok": ("#1b5e20", "#e8f5e9"),
    "warning": ("#7a4f01", "#fff4e0"),
    "error": ("#b71c1c", "#fdecea"),
}


def message_html(text: str, level: str = "info") -> str:
    """A one-block status message (``level``: info, ok, warning, error); text is escaped.

    Line breaks and caret lines (as in parser errors) are preserved.
    """
    if level not in _MESSAGE_STYLES:
        raise ValueError(f"level must be one of {sorted(_MESSAGE_STYLES)}, got {level!r}")
    if not text:
        return ""
    color, background = _MESSAGE_STYLES[level]
    return (f"<pre style='color:{color};background:{background};margin:2px 0;"
            f"padding:4px 8px;white-space:pre-wrap;font-size:12px'>{html.escape(text)}</pre>")


def columns_table_html(header: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> str:
    """A compact HTML table with a header row (values formatted as in :func:`summary_table_html`)."""
    head = "".join(f"<th style='text-align:left;padding:1px 10px 1px 0;font-weight:600'>{html.escape(str(h))}</th>"
                   for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td style='padding:1px 10px 1px 0;font-family:monospace'>"
                         f"{html.escape(_format_value(v))}</td>" for v in r) + "</tr>"
        for r in rows)
    caption = (f"<caption style='text-align:left;font-weight:700;padding-bottom:4px'>"
               f"{html.escape(title)}</caption>") if title else ""
    return (f"<table style='border-collapse:collapse;font-size:12px'>{caption}<tr>{head}</tr>{body}</table>")


# ======================================================================================
# Stepped stacked areas against a capacity, byte formatting, linked selections
# (appended for the memory timeline; generic: any "what is live at each step" chart).
# ======================================================================================


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: float) -> str:
    """Bytes in binary units with two decimals: ``format_bytes(1536) == '1.50 KiB'``.

    Examples
    --------
    >>> format_bytes(1536), format_bytes(100), format_bytes(3 * 2**30)
    ('1.50 KiB', '100 B', '3.00 GiB')
    """
    n = float(n)
    magnitude, unit = abs(n), 0
    while magnitude >= 1024 and unit < len(_BYTE_UNITS) - 1:
        magnitude /= 1024
        unit += 1
    sign = "-" if n < 0 else ""
    if unit == 0:
        return f"{sign}{round(magnitude)} B"
    return f"{sign}{magnitude:.2f} {_BYTE_UNITS[unit]}"


# ======================================================================================
# Durations in one unit (appended for the pipeline timeline): the unit a reader sees on an
# axis is the unit of every tooltip, summary and advisor number next to it.
# ======================================================================================


#: Time units drawn by the explorers and the factor from seconds to each (micro is the sign "\u00b5").
SECONDS_SCALE: Mapping[str, float] = {"s": 1.0, "ms": 1e3, "\u00b5s": 1e6}


def seconds_unit(seconds: float) -> str:
    """The unit a duration reads best in: ``s`` from 1 s, ``ms`` from 1 ms, else ``\u00b5s``.

    Examples
    --------
    >>> seconds_unit(2.5e-4), seconds_unit(3e-3), seconds_unit(0.0)
    ('\u00b5s', 'ms', '\u00b5s')
    """
    magnitude = abs(float(seconds))
    return "s" if magnitude >= 1 else "ms" if magnitude >= 1e-3 else "\u00b5s"


def format_seconds(value: float, unit: str | None = None, *, digits: int = 4) -> str:
    """A duration in seconds as text in ``unit`` (default: :func:`seconds_unit` of the value).

    Pass one ``unit`` for every number of a view so that they compare at a glance; the
    number has ``digits`` significant digits and never an exponent.

    Parameters
    ----------
    value : float
        Seconds.
    unit : {"s", "ms", "\u00b5s"}, optional
    digits : int
        Significant digits.

    Raises
    ------
    scwork.errors.ConfigError
        An unknown unit.

    Examples
    --------
    >>> format_seconds(2.5e-4), format_seconds(2.5e-4, "ms"), format_seconds(0.0123)
    ('250 \u00b5s', '0.25 ms', '12.3 ms')
    """
    if unit is None:
        unit = seconds_unit(value)
    if unit not in SECONDS_SCALE:
        from scwork.errors import ConfigError

        raise ConfigError(f"format_seconds: unit must be one of {list(SECONDS_SCALE)}, got {unit!r}")
    number = np.format_float_positional(float(value) * SECONDS_SCALE[unit], precision=digits, unique=False,
                                        fractional=False, trim="-")
    return f"{number} {unit}"
