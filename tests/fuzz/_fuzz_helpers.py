"""Strategy helpers shared by the model fuzz suites (layout, collectives, memory/pipeline, config)."""

from __future__ import annotations

from hypothesis import strategies as st

from scwork.testing import odd_scalars


def weighted(*choices):
    """Strategy: one of ``(weight, strategy)`` pairs with those odds.

    ``st.one_of`` flattens nested one_ofs and weighs every leaf alike, so one
    ``odd_arrays()`` branch (itself five branches) would outweigh a single valid one.
    """
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def arguments(data, valid: dict, odd=None) -> dict:
    """Keyword arguments drawn from ``valid``; in about half the cases one of them is odd instead.

    ``data`` is ``st.data()`` or the ``draw`` of a composite strategy; ``odd`` the
    strategy for the broken argument (default :func:`scwork.testing.odd_scalars`).
    Breaking one argument at a time keeps most cases past the first check, so the
    code behind it meets hostile values too.
    """
    draw = getattr(data, "draw", data)
    names = list(valid)
    broken = draw(st.sampled_from([None] * max(1, len(names)) + names))
    return {name: draw((odd_scalars() if odd is None else odd) if name == broken else strategy)
            for name, strategy in valid.items()}
