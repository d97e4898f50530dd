"""Fuzz suite: generated bad inputs against every input surface, under a watchdog.

Every test here is marked ``fuzz``. CI runs a small slice each time (the default of
:func:`scwork.testing.fuzz_examples`); the full run is
``pytest -m fuzz --fuzz-examples 10000``, and the terminal summary prints, per surface,
how many cases ran and how many ended in a typed error, an untyped error, a hang or a
silently wrong result (all but the first two must be zero).
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.fuzz)


@pytest.fixture(scope="session", autouse=True)
def _kernels_compiled():
    """Compile (or load) every numba kernel before the first case: a cold compile takes
    10-30 s on a fresh machine and would count as a hang under the cases' watchdogs."""
    import scwork

    scwork.warmup(progress=False)
