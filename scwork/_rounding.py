"""Integer rounding: the one ``ceil_div`` and ``round_up`` of scwork.

Byte counts, padded sizes, CSR entries and buffer sizes all round up to a multiple
(8 CSR entries, ``8 * P`` vocabulary rows, whole DMA lines, whole tiles). They call
these two functions, so the formula is written once. Both are plain arithmetic: they
take Python ints (exact, unbounded), numpy integer arrays (element-wise) and compile
unchanged in numba kernels (``scwork._jit.jit(inline="always")(round_up)``).

Examples
--------
>>> ceil_div(13, 8), ceil_div(16, 8), ceil_div(0, 8)
(2, 2, 0)
>>> round_up(13, 8), round_up(16, 8), round_up(0, 8)
(16, 16, 0)
>>> import numpy as np
>>> round_up(np.array([1, 8, 9]), 8).tolist()
[8, 8, 16]
"""

from __future__ import annotations

__all__ = ["ceil_div", "round_up"]


def ceil_div(a, b):
    """``ceil(a / b)`` for integers ``a >= 0``, ``b >= 1``, without floating point."""
    return -(-a // b)


def round_up(value, multiple):
    """Smallest multiple of ``multiple`` that is >= ``value`` (``value >= 0``, ``multiple >= 1``)."""
    # ceil_div written out: numba compiles this function alone, without its callees
    return -(-value // multiple) * multiple
