"""chunk_bounds: boundary ``c`` is ``floor(c * n / C)``, checked by hand and with exact fractions."""

from __future__ import annotations

from fractions import Fraction

import pytest

from scwork.collectives import chunk_bounds


@pytest.mark.parametrize("n,chunks,expected", [
    (10, 4, [0, 2, 5, 7, 10]),      # 2.5 -> 2, 5, 7.5 -> 7
    (7, 3, [0, 2, 4, 7]),           # 2.33 -> 2, 4.67 -> 4 (rounding down, not to nearest)
    (3, 5, [0, 0, 1, 1, 2, 3]),     # fewer elements than chunks: empty chunks first
    (8, 4, [0, 2, 4, 6, 8]),
    (0, 3, [0, 0, 0, 0]),
    (5, 1, [0, 5]),
])
def test_chunk_bounds_by_hand(n, chunks, expected):
    assert chunk_bounds(n, chunks).tolist() == expected


@pytest.mark.parametrize("n", [1, 2, 9, 97, 1000, 2**40 + 3, 2**62 - 1])
@pytest.mark.parametrize("chunks", [1, 2, 3, 7, 16, 255])
def test_chunk_bounds_equal_exact_floor(n, chunks):
    got = chunk_bounds(n, chunks).tolist()
    assert got == [int(Fraction(c * n, chunks)) for c in range(chunks + 1)]   # int() of a Fraction >= 0 floors
    sizes = [b - a for a, b in zip(got, got[1:])]
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
