"""Tests of PlanExplorer without a browser: a search result in, its numbers in the bokeh sources and panes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("bokeh")
pytest.importorskip("jupyter_bokeh")

import scwork  # noqa: E402
from scwork.errors import InputError  # noqa: E402
from scwork.plan import Constraints, search  # noqa: E402
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec  # noqa: E402
from scwork.widgets import PlanExplorer  # noqa: E402

pytestmark = pytest.mark.requires_widgets


@pytest.fixture(scope="module")
def result():
    names = ["a", "b", "c", "d"]
    vocab = {"a": 4000, "b": 900, "c": 20000, "d": 3000}
    data = scwork.datasets.synthetic(512, num_steps=4, features=names, vocab_size=vocab, valency=3, seed=4)
    feats = [FeatureSpec(n, TableSpec(f"t_{n}", vocab[n], 16)) for n in names]
    batches = [FeatureBatch.from_ragged(data.step(k)) for k in range(4)]
    return search(feats, batches, "v5p:4", per_chip_batch_sizes=[128], local_search_steps=8, progress=False,
                  constraints=Constraints(max_drop_rate=0.01))


@pytest.fixture
def explorer(result):
    return PlanExplorer(result)


def test_scatter_shows_every_candidate_front_and_default(explorer, result):
    ds = result.dataset
    pts = explorer.sources["points"].data
    np.testing.assert_allclose(pts["x"], ds["step_time_s"].values * 1e3)
    np.testing.assert_allclose(pts["y"], ds["peak_hbm_bytes"].values / 2**30)
    np.testing.assert_allclose(pts["value"], ds["drop_rate"].values)
    np.testing.assert_array_equal(np.asarray(pts["alpha"]) > 0.5, ds["feasible"].values)
    front = explorer.sources["front"].data
    assert sorted(zip(front["x"], front["y"])) == sorted(
        (ds["step_time_s"].values[i] * 1e3, ds["peak_hbm_bytes"].values[i] / 2**30) for i in result.front)
    default = int(np.flatnonzero(ds["is_default"].values)[0])
    assert list(explorer.sources["marked"].data["x"]) == [pts["x"][default]]
    assert explorer.best == result.best.index and explorer.selected == result.best.index
    assert "candidate #%d" % result.best.index in explorer.detail_pane.text


def test_constraint_controls_rerank_without_the_engine(explorer, result):
    records = explorer.result.records
    cap = float(np.median(result.dataset["peak_hbm_bytes"].values)) / 2**30
    explorer.controls["max_peak_hbm_gib"].value = cap
    assert explorer.max_peak_hbm_gib == cap
    expect = result.with_constraints(Constraints(max_drop_rate=0.01, max_peak_hbm_bytes=int(cap * 2**30)))
    np.testing.assert_array_equal(np.asarray(explorer.sources["points"].data["alpha"]) > 0.5,
                                  expect.dataset["feasible"].values)
    assert explorer.result.records is records            # the same evaluated candidates
    assert explorer.best == expect.best.index
    explorer.max_drop_rate = 0.0
    explorer.max_peak_hbm_gib = 1e-9                      # nothing fits
    assert explorer.best == -1 and "none meets" in explorer.summary_pane.text


def test_selecting_a_point_shows_its_plan_and_the_difference_from_the_default(explorer, result):
    other = next(i for i in range(len(result.records)) if not result.candidate(i).is_default
                 and result.candidate(i).knobs["stacking"] != "auto")
    explorer.chart.sources["points"].selected.indices = [other]      # a tap in the page
    assert explorer.selected == other
    assert list(explorer.sources["selected"].data["x"]) == [explorer.sources["points"].data["x"][other]]
    text = explorer.detail_pane.text
    cand = result.candidate(other)
    assert f"candidate #{other}" in text and "difference from the library" in text
    for st in cand.stacks():
        assert st["stack"] in text
    assert "stacking" in text.split("difference from the library")[1]


def test_export_and_bad_input(explorer, tmp_path):
    page = explorer.to_html(tmp_path / "plan.html").read_text()
    assert "Bokeh" in page and "plan search" in page
    with pytest.raises(InputError, match="PlanSearchResult"):
        PlanExplorer({"not": "a result"})


def test_detail_shows_the_hbm_at_the_peak_by_category(explorer, result):
    from scwork.memory import CATEGORIES
    from scwork.widgets._html import format_bytes

    cand = result.candidate(explorer.selected)
    report = cand.memory()
    at_peak = report.hbm.usage_by_category[report.hbm.peak_event]
    text = explorer.detail_pane.text
    assert "HBM per chip at the peak" in text
    for category, value in zip(CATEGORIES, at_peak):
        if value:
            assert category in text and format_bytes(int(value)) in text
