"""The latency benchmark's fixtures: tests/browser's JupyterLab + Chromium harness, loaded from there.

One harness for the browser tests and this benchmark: the fixtures (``lab``,
``lab_server``, ``chromium``...) and helpers are tests/browser/conftest.py's, imported
by path (benchmarks/ is not a package of the tests).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "tests" / "browser" / "conftest.py"
_spec = importlib.util.spec_from_file_location("scwork_browser_harness", _PATH)
_harness = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _harness
_spec.loader.exec_module(_harness)
globals().update({name: value for name, value in vars(_harness).items() if not name.startswith("__")})
