"""Small escaped HTML tables for the ``_repr_html_`` summaries of result objects.

Jupyter shows an object's ``_repr_html_`` instead of its ``repr``. Every scwork
result that has one builds it here, so they look alike and every cell is escaped
(table and stack names are user input). Nothing here imports a heavy module.

Examples
--------
>>> print(html_table([("a<b", 1)], header=("name", "value"), caption="demo").replace("><", ">\\n<"))
<table class='scwork-table'>
<caption style='text-align:left'>demo</caption>
<tr>
<th style='text-align:left'>name</th>
<th style='text-align:left'>value</th>
</tr>
<tr>
<td style='text-align:left'>a&lt;b</td>
<td style='text-align:right'>1</td>
</tr>
</table>
"""

from __future__ import annotations

import html
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["html_table", "html_fields", "format_cell"]


def format_cell(value: Any) -> str:
    """Text of one cell: floats with 4 significant digits, None as empty, the rest ``str``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return f"{float(value):.4g}"
    return str(value)


def _cell(tag: str, value: Any) -> str:
    numeric = isinstance(value, numbers.Number) and not isinstance(value, bool)
    align = "right" if numeric and tag == "td" else "left"
    return f"<{tag} style='text-align:{align}'>{html.escape(format_cell(value))}</{tag}>"


def html_table(rows: Iterable[Sequence[Any]], header: Sequence[str] | None = None, caption: str | None = None,
               max_rows: int = 200) -> str:
    """An HTML table, every cell escaped; numbers right-aligned.

    Parameters
    ----------
    rows : iterable of sequences
        One sequence of cell values per row.
    header : sequence of str, optional
        Column titles.
    caption : str, optional
        Title above the table.
    max_rows : int
        Rows shown; a last row says how many more there are.
    """
    parts = ["<table class='scwork-table'>"]
    if caption:
        parts.append(f"<caption style='text-align:left'>{html.escape(caption)}</caption>")
    if header:
        parts.append("<tr>" + "".join(_cell("th", h) for h in header) + "</tr>")
    shown = 0
    hidden = 0
    width = len(header) if header else 1
    for row in rows:
        if shown >= max_rows:
            hidden += 1
            continue
        parts.append("<tr>" + "".join(_cell("td", v) for v in row) + "</tr>")
        width = max(width, len(row))
        shown += 1
    if hidden:
        parts.append(f"<tr><td colspan='{width}'>... {hidden} more rows</td></tr>")
    parts.append("</table>")
    return "".join(parts)


def html_fields(fields: Iterable[tuple[str, Any]], caption: str | None = None) -> str:
    """A two-column (name, value) table."""
    return html_table(((name, value) for name, value in fields), caption=caption)
