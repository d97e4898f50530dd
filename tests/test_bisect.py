"""The one integer bisection (scwork._bisect) against a plain scan."""

from __future__ import annotations

import random

from scwork._bisect import first_true, last_true


def test_last_and_first_true_match_a_scan_and_ask_only_inside_the_range():
    rng = random.Random(5)
    for _ in range(500):
        lo = rng.randint(-20, 20)
        hi = lo + rng.randint(1, 60)
        edge = rng.randint(lo, hi - 1)           # pred true on [lo, edge], false after
        asked = []

        def pred(x, edge=edge, asked=asked):
            asked.append(x)
            return x <= edge

        assert last_true(lo, hi, pred) == max(x for x in range(lo, hi) if x <= edge) == edge
        assert all(lo < x < hi for x in asked)
        asked.clear()
        first = first_true(lo, hi, lambda x, edge=edge: x > edge)   # false up to edge, true after
        assert first == edge + 1


def test_bisection_asks_logarithmically_often():
    asked = []
    assert last_true(0, 10**9, lambda x: asked.append(x) or x <= 123_456_789) == 123_456_789
    assert len(asked) <= 31
