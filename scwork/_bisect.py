"""Bisection over integers: the boundary of a monotone yes/no question, in O(log n) asks.

Used where a fix is searched over a range too wide to scan (batch sizes, chip counts,
tensor rows up to 10**9): the memory diagnosis (:mod:`scwork.memory._diagnose`) and
the Sophgo local-memory fit hints (:mod:`scwork.layout.npu`).

Examples
--------
>>> last_true(0, 100, lambda x: x * x <= 50)
7
>>> first_true(0, 100, lambda x: x * x > 50)
8
"""

from __future__ import annotations

from typing import Callable

__all__ = ["first_true", "last_true"]


def last_true(good: int, bad: int, pred: Callable[[int], bool]) -> int:
    """Largest ``x`` in ``[good, bad)`` with ``pred(x)``, for ``pred`` true then false.

    ``pred(good)`` must hold and ``bad`` counts as false; neither end is evaluated.
    """
    while bad - good > 1:
        mid = (good + bad) // 2
        if pred(mid):
            good = mid
        else:
            bad = mid
    return good


def first_true(bad: int, good: int, pred: Callable[[int], bool]) -> int:
    """Smallest ``x`` in ``(bad, good]`` with ``pred(x)``, for ``pred`` false then true.

    ``pred(good)`` must hold and ``bad`` counts as false; neither end is evaluated.
    It is the step after the last ``x`` for which ``pred`` is false.
    """
    return last_true(bad, good, lambda x: not pred(x)) + 1
