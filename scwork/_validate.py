"""Argument checks shared by the engine, so every module words its errors alike."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

from scwork.errors import ConfigError

__all__ = ["integer", "integers", "positive_int", "non_negative_int", "shown"]


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters.

    Never raises: ``repr`` of an int beyond Python's conversion limit (4300 digits)
    raises ValueError, and a hostile object's ``__repr__`` may raise anything, so
    those are described by their size or type instead.

    Examples
    --------
    >>> shown(10**5000)
    'an integer of about 5000 digits'
    >>> shown("x" * 100, limit=10)
    "'xxxxxx..."
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an error message must not fail on what it describes
        return f"a {type(value).__name__} that cannot be shown"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def integer(name: str, value: Any, *, minimum: int | None = None, context: str = "",
            error: type[Exception] = ConfigError) -> int:
    """``value`` as a Python int, or ``error`` saying what ``name`` must be.

    Accepts Python and numpy integers (anything with ``__index__``), never bools or
    floats, and checks ``value >= minimum`` when a minimum is given. ``context`` is
    appended in parentheses, e.g. the table or shape the value belongs to.
    """
    where = f" ({context})" if context else ""
    if minimum == 1:
        kind = "a positive integer"
    elif minimum == 0:
        kind = "a non-negative integer"
    else:
        kind = "an integer"
    if isinstance(value, bool):
        raise error(f"{name} must be {kind}{where}, got {shown(value)}")
    try:
        number = operator.index(value)
    except TypeError:
        raise error(f"{name} must be {kind}{where}, got {shown(value)}") from None
    if minimum is not None and number < minimum:
        raise error(f"{name} must be >= {minimum}{where}, got {shown(number)}")
    return number


def positive_int(name: str, value: Any, *, context: str = "", error: type[Exception] = ConfigError) -> int:
    """:func:`integer` with ``minimum=1``."""
    return integer(name, value, minimum=1, context=context, error=error)


def non_negative_int(name: str, value: Any, *, context: str = "",
                     error: type[Exception] = ConfigError) -> int:
    """:func:`integer` with ``minimum=0``."""
    return integer(name, value, minimum=0, context=context, error=error)


def integers(name: str, value: Any, *, error: type[Exception] = ConfigError) -> tuple[int, ...]:
    """A sequence of integers (each checked by :func:`integer`, named ``name[i]``) as a tuple.

    Examples
    --------
    >>> integers("dims", [0, 1])
    (0, 1)
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise error(f"{name} must be a sequence of integers, got {shown(value)}")
    return tuple(integer(f"{name}[{i}]", item, error=error) for i, item in enumerate(value))


#: The largest signed 64-bit integer: counts beyond it cannot go into int64 arrays.
INT64_MAX = 2**63 - 1


def decimal_int(text: Any, maximum: int = INT64_MAX) -> int | None:
    """``int(text)`` for a text of ASCII digits (an optional sign first) up to ``maximum`` in size.

    Returns None when the text is not such a number or its magnitude exceeds
    ``maximum``. Python's ``int()`` refuses decimal texts longer than 4,300 digits, so
    the digits are counted first and leading zeros dropped before ``int()`` sees them:
    a reader can then raise its own typed error naming the file and line.

    Examples
    --------
    >>> decimal_int("042"), decimal_int("-7"), decimal_int("9" * 5000), decimal_int("١٢")
    (42, -7, None, None)
    >>> decimal_int("0" * 5000 + "1")
    1
    """
    if not isinstance(text, str):
        return None
    sign = -1 if text[:1] == "-" else 1
    digits = text[1:] if text[:1] in "+-" else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    significant = digits.lstrip("0") or "0"
    if len(significant) > len(str(maximum)):
        return None
    value = sign * int(significant)
    return value if abs(value) <= maximum else None
