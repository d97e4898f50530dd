"""AllReduceStepper above its node limit: a per-phase summary instead of a drawing.

No browser: the summary is HTML in the stepper's error area, checked as text.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("bokeh")
pytest.importorskip("jupyter_bokeh")

from scwork.collectives import Network, multi_color_all_reduce, phase_summary  # noqa: E402
from scwork.widgets import AllReduceStepper  # noqa: E402
from scwork.widgets import _allreduce_steps as steps_module  # noqa: E402
from scwork.widgets import allreduce_stepper as module  # noqa: E402


def test_above_the_node_limit_the_stepper_summarises_each_phase():
    s = AllReduceStepper(Network.torus((4, 4)), ("multi_dim_all_reduce", "multi_color_all_reduce"))
    assert s.error == ""
    s.shape = (24, 24)  # 576 nodes > MAX_NODES
    assert f"MAX_NODES={module.MAX_NODES}" in s.error and "576 nodes" in s.error
    assert "phase_summary" in s.error  # says what to use instead
    assert s.network.name == "4x4 torus"  # the drawing keeps the last network
    html = s._error_area.value
    assert html.count("class='scwork-phase-summary'") == 2
    # The engine's numbers: multi-color on a 24x24 torus, reduce-scatter along x first.
    expected = phase_summary(multi_color_all_reduce(Network.torus((24, 24)), nbytes=s.vector_bytes))
    right = html.split("right: multi_color_all_reduce")[1]
    rows = re.findall(r"<tr><td>([a-z-]+)</td><td>([^<]+)</td><td>(\d+)</td>", right)
    assert [(p, int(n)) for p, _, n in rows] == [
        (p.replace("_", "-"), int(n)) for p, n in zip(expected.phase.values, expected.steps.values)]
    assert "busiest link" in right


def test_a_summary_too_large_to_stream_points_to_the_command_line(monkeypatch):
    monkeypatch.setattr(steps_module, "SUMMARY_MAX_RECORDS", 10)
    html = steps_module.phase_summary_html("left: ring", "ring", Network.torus((24, 24)), 2**20)
    assert "scwork allreduce --topology" in html and "transfer records" in html
    bad = steps_module.phase_summary_html("left", "improved_rotated_pincer", Network.ring(5), 2**20)
    assert "even number of nodes" in bad
