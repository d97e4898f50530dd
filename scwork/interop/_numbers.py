"""Decimal integers read from text, bounded before ``int()`` sees them.

Python's ``int()`` refuses decimal texts longer than 4,300 digits with a ValueError,
and a count past int64 cannot go into the int64 arrays the readers build; both are
answered here by the digit count first, so a reader can raise its own typed error
naming the file and line.
"""

from __future__ import annotations

__all__ = ["INT64_MAX", "decimal_int"]

INT64_MAX = 2**63 - 1


def decimal_int(text: str, maximum: int = INT64_MAX) -> int | None:
    """``int(text)`` for a text of ASCII digits (an optional sign first) up to ``maximum`` in size.

    Returns None when the text is not such a number or its magnitude exceeds
    ``maximum`` (checked on the digit count first, so a 5,000-digit text never
    reaches ``int()``).

    Examples
    --------
    >>> decimal_int("042"), decimal_int("-7"), decimal_int("9" * 5000), decimal_int("١٢")
    (42, -7, None, None)
    """
    if not isinstance(text, str):
        return None
    digits = text[1:] if text[:1] in "+-" else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    if len(digits.lstrip("0")) > len(str(maximum)):
        return None
    value = int(text)
    return value if abs(value) <= maximum else None
