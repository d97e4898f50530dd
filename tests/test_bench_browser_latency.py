"""The browser-latency benchmark's Markdown table (the browser run itself is benchmarks/bench_browser_latency.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_browser_latency.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_browser_latency", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_markdown_table_has_one_row_per_control_and_marks_the_ones_over_target():
    data = {"Stepper": {
        "__load_average__": {"before": [1.25, 1, 1], "after": [2.0, 1, 1]},
        "shape[0]": {"kind": "BoundedIntText", "state": "3-D torus", "median_s": 0.3104, "times_s": [0.61, 0.31, 0.30],
                     "max_s": 0.61, "kernel_s": 0.1, "paint_s": 0.02, "long_tasks_s": 0.0, "round_trips": 1},
        "step": {"kind": "IntSlider", "median_s": 0.12, "times_s": [0.12, 0.13, 0.11], "max_s": 0.13,
                 "kernel_s": 0.03, "paint_s": 0.02, "long_tasks_s": 0.05, "round_trips": 1},
        "play": {"kind": "Play", "skip": "an animation"},
    }}
    lines = _bench().markdown_table(data).splitlines()
    assert lines[0].startswith("| explorer | control | kind | median | first | worst |")
    assert len(lines) == 2 + 3
    assert ("| Stepper | shape[0] (3-D torus) | BoundedIntText | 310 **over** | 610 | 610 | 100 | 20 | 0 | 1 "
            "| 1.2/2.0 |") in lines
    assert "| Stepper | step | IntSlider | 120 | 120 | 130 | 30 | 20 | 50 | 1 | 1.2/2.0 |" in lines
    assert any(line.startswith("| Stepper | play | Play | skipped: an animation |") for line in lines)
