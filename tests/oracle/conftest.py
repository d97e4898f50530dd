"""Oracle suite: scwork against the real jax-tpu-embedding library, on the same inputs.

Every test here is marked ``oracle`` and skips, saying why, only where
``jax_tpu_embedding`` cannot be imported (it needs Python >= 3.12; install the
``oracle`` extra). ``pytest --oracle-examples N`` runs N hypothesis examples per test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.oracle)


def pytest_configure(config):
    # The library logs a warning per stack it builds; keep the test output readable.
    try:
        from absl import logging as absl_logging
    except ImportError:
        return
    absl_logging.set_verbosity(absl_logging.ERROR)
