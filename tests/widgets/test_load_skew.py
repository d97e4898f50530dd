"""Tests of LoadSkewExplorer without a browser: traits in, engine numbers in the bokeh sources."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("bokeh")
pytest.importorskip("jupyter_bokeh")

import scwork  # noqa: E402
import traitlets  # noqa: E402
from scwork import datasets  # noqa: E402
from scwork.errors import InputError  # noqa: E402
from scwork.sharding import (  # noqa: E402
    FeatureBatch,
    FeatureSpec,
    SparsecoreConfig,
    TableSpec,
    compute_stats,
)
from scwork.widgets import LoadSkewExplorer  # noqa: E402
from scwork.widgets import load_skew  # noqa: E402

pytestmark = pytest.mark.requires_widgets

BATCH = 512
VOCAB = 2000


def _features(num=4):
    # Two widths -> automatic stacking makes two stacks of two tables.
    return [FeatureSpec(f"f{i}", TableSpec(f"t{i}", VOCAB, 16 if i < num // 2 else 32)) for i in range(num)]


def _steps(num_steps=2, hashed=True, zipf=1.05):
    data = datasets.synthetic(BATCH, num_steps=num_steps, features=4, vocab_size=VOCAB, valency=6,
                              zipf_exponent=zipf, hashed=hashed, seed=3)
    return [FeatureBatch.from_ragged(step) for step in data.batches()]


@pytest.fixture(scope="module")
def steps():
    return _steps()


@pytest.fixture
def explorer(steps):
    return LoadSkewExplorer(steps, _features(), chip="v5p", num_chips=2)


def engine_stats(explorer, steps, **kwargs):
    """The engine's stats for the explorer's current setting (the widget's expected input)."""
    config = SparsecoreConfig(allow_id_dropping=explorer.allow_id_dropping)
    stacking = "auto" if explorer.stacking == "auto" else None
    return compute_stats(steps[explorer.step], _features(), explorer.topology, stacking, config,
                         rotation=explorer.rotation, **kwargs)


def bars_matrix(source, n_partitions):
    """Bar heights of a split chart as (groups, partitions), groups in drawing order."""
    values = np.asarray(source.data["value"])
    return values.reshape(-1, n_partitions)


def assert_views_match(explorer, stats):
    sel = stats.sel(stack=explorer.stack)
    G, S, P = sel["ids"].shape
    ids = bars_matrix(explorer.sources["ids_bars"], P)
    unique = bars_matrix(explorer.sources["unique_bars"], P)
    np.testing.assert_array_equal(ids, sel["ids"].values.reshape(G * S, P))
    np.testing.assert_array_equal(unique, sel["unique_ids"].values.reshape(G * S, P))
    np.testing.assert_array_equal(explorer.sources["ids_max"].data["value"],
                                  sel["max_ids_per_partition"].max("device").values)
    np.testing.assert_array_equal(explorer.sources["unique_max"].data["value"],
                                  sel["max_unique_ids_per_partition"].max("device").values)
    heat = np.asarray(explorer.sources["heatmap"].data["value"]).reshape(G, P)
    np.testing.assert_array_equal(heat, sel[explorer.heatmap_stat].values)
    assert explorer.summary["max_ids_per_partition"] == int(sel["max_ids_per_partition"].max())
    assert explorer.summary["num_partitions"] == P


# -- construction ------------------------------------------------------------------

def test_demo_builds_synthetic_multi_step_data():
    ex = LoadSkewExplorer.demo(batch_size=256, num_features=2, num_steps=2, vocab_size=1000)
    assert ex.error == ""
    assert ex.num_steps == 2
    assert ex.controls["step"].layout.display is None   # slider shown for several steps
    assert ex.summary["topology"].startswith("4 v5p")
    assert len(ex.sources["ids_bars"].data["value"]) == 16 * 16   # 16 sources x 16 partitions
    assert set(ex.figures) == {"ids", "unique_ids", "heatmap"}


def test_bars_and_heatmap_are_the_engine_stats(explorer, steps):
    assert explorer.error == ""
    assert explorer.stack == "t0_t1"
    assert explorer.summary["stacks"] == ["t0_t1", "t2_t3"]
    stats = engine_stats(explorer, steps)
    assert_views_match(explorer, stats)
    assert explorer.stats.identical(stats) or np.array_equal(explorer.stats["ids"], stats["ids"])


def test_selecting_the_other_stack_redraws_it(explorer, steps):
    explorer.stack = "t2_t3"
    assert_views_match(explorer, engine_stats(explorer, steps))
    assert explorer.controls["stack"].value == "t2_t3"
    assert explorer.summary["tables"] == ["t2", "t3"]


def test_single_batch_has_no_step_slider(steps):
    ex = LoadSkewExplorer(steps[0], _features(), num_chips=1)
    assert ex.num_steps == 1
    assert ex.controls["step"].layout.display == "none"


def test_bad_inputs_are_reported():
    with pytest.raises(InputError):
        LoadSkewExplorer([], _features())
    with pytest.raises(InputError):
        LoadSkewExplorer("ids", _features())


# -- [jte] preprocess_sparse_dense_matmul_input worked example ---------------------------------------------------

@pytest.fixture
def spec_example():
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])})
    return LoadSkewExplorer(batch, [FeatureSpec("f", TableSpec("t", 16, 8))], topology=scwork.Topology(1, 2))


def test_spec5_worked_example(spec_example):
    ex = spec_example
    assert ex.error == ""
    assert ex.chip == "" and ex.num_chips == 1
    assert list(ex.sources["ids_max"].data["value"]) == [2, 3]
    assert list(ex.sources["unique_max"].data["value"]) == [2, 3]
    # SC 0 sends [2, 2] (ids 0, 2 | 1, 3), SC 1 sends [0, 3] (ids 1, 3, 5 all to partition 1).
    assert bars_matrix(ex.sources["ids_bars"], 2).tolist() == [[2, 2], [0, 3]]
    assert list(ex.sources["ids_bars"].data["group"]) == ["device 0 SC 0"] * 2 + ["device 0 SC 1"] * 2
    assert ex.summary["required_buffer_size_per_sc"] == [[16, 8]]
    assert ex.summary["naive_ids_per_partition"] == [2, 5]
    assert ex.summary["naive_unique_ids_per_partition"] == [2, 3]
    # No max_ids limit: the CSR buffer of an SC is the largest required size (16 entries).
    assert ex.summary["coo_buffer_entries_per_device"] == 2 * 16
    assert ex.sources["ids_limit"].data["y"] == []


def test_spec5_limit_overflow_shows_error_and_keeps_drawing(spec_example):
    ex = spec_example
    ex.max_ids_per_partition = 2
    assert "above max_ids_per_partition=2" in ex.error
    assert "above max_ids_per_partition=2" in ex._error_area.value
    assert "#b71c1c" in ex._error_area.value          # the error style (red)
    # The observed statistics are still drawn, with the limit line.
    assert list(ex.sources["ids_max"].data["value"]) == [2, 3]
    assert ex.sources["ids_limit"].data["y"] == [2.0]
    assert ex.summary["configured_max_ids_per_partition"] == 2
    assert ex.summary["error"] == ex.error
    over = ex.sources["heatmap_over_limit"].data                  # partition 1 is over
    assert (list(over["row"]), list(over["col"]), list(over["value"])) == ([0], [1], [3])


def test_spec5_dropping_counts_the_dropped_ids(spec_example):
    ex = spec_example
    ex.max_ids_per_partition = 2
    ex.allow_id_dropping = True
    assert ex.error == ""
    # SC 1 sends ids 1, 3, 5 to partition 1: the third is cut.
    assert ex.summary["dropped_ids"] == 1
    assert list(ex.sources["ids_max"].data["value"]) == [2, 3]   # observed, before the drop
    # With max_ids configured the buffer is round_up(2, 8) * P entries per SC.
    assert ex.summary["coo_buffer_entries_per_device"] == 2 * 8 * 2
    ex.allow_id_dropping = False
    assert ex.error and ex.summary["dropped_ids"] == 0


def panel_rows(text):
    """``{row name: value}`` of the stats panel's name/value tables."""
    import html
    import re

    return {html.unescape(name): html.unescape(value)
            for name, value in re.findall(r"<th[^>]*>(.*?)</th><td[^>]*>(.*?)</td>", text)}


def test_panel_says_which_setting_dropped_ids_and_minibatches_refer_to(spec_example):
    ex = spec_example
    ex.max_ids_per_partition = 2
    ex.allow_id_dropping = True
    rows = panel_rows(ex._panel.text)
    assert rows["dropped ids (with id dropping on, at these limits)"] == "1"
    assert rows["mini-batches needed instead (no dropping)"] == str(ex.summary["num_minibatches"])
    assert ex.summary["num_minibatches"] >= 2
    assert "dropped ids (dropping on)" in ex._panel.text and "mini-batches instead (no dropping)" in ex._panel.text
    assert "dropped ids" not in rows                     # no bare, ambiguous row
    ex.allow_id_dropping = False
    rows = panel_rows(ex._panel.text)
    assert rows["dropped ids"] == "0 (id dropping is off)"
    assert rows["mini-batches needed to fit the limits (no dropping)"] == str(ex.summary["num_minibatches"])
    assert not any(name.startswith("dropped ids (with") for name in rows)
    assert "0 (dropping off)" in ex._panel.text          # the all-stacks table too


# -- controls ---------------------------------------------------------------------------

def test_chip_count_change_updates_sources_and_summary(explorer, steps):
    before = len(explorer.sources["ids_bars"].data["value"])
    explorer.num_chips = 4
    assert explorer.error == ""
    assert explorer.topology.num_partitions == 16
    assert explorer.summary["num_partitions"] == 16
    assert len(explorer.sources["ids_bars"].data["value"]) == 16 * 16 != before
    assert_views_match(explorer, engine_stats(explorer, steps))
    # The widget controls drive the same traits.
    explorer.controls["num_chips"].value = 1
    assert explorer.num_chips == 1 and explorer.summary["num_partitions"] == 4


def test_chip_type_change(explorer, steps):
    explorer.controls["chip"].value = "v6e"       # 2 SparseCores per chip
    assert explorer.chip == "v6e"
    assert explorer.topology.sparsecores_per_device == 2
    assert_views_match(explorer, engine_stats(explorer, steps))
    assert "v6e" in explorer.summary["topology"]


def test_stacking_none_lists_the_tables(explorer, steps):
    explorer.stacking = "none"
    assert explorer.summary["stacks"] == ["t0", "t1", "t2", "t3"]
    assert list(explorer.controls["stack"].options) == ["t0", "t1", "t2", "t3"]
    assert explorer.stack == "t0"
    assert_views_match(explorer, engine_stats(explorer, steps))


def test_rotation_changes_the_partitions_of_the_second_table(steps):
    features = _features()
    # Unhashed Zipf: the hottest ids are 0, 1, 2...; rotation moves t1's onto other partitions.
    skewed = _steps(num_steps=1, hashed=False, zipf=1.3)
    ex = LoadSkewExplorer(skewed, features, num_chips=2)
    assert ex.controls["rotation"].value == 4           # default: SparseCores per device
    rotated = ex.stats["naive_ids_per_partition"].sel(stack="t0_t1").values
    ex.rotation = 0
    assert ex.controls["rotation"].value == 0
    unrotated = ex.stats["naive_ids_per_partition"].sel(stack="t0_t1").values
    assert not np.array_equal(rotated, unrotated)
    assert_views_match(ex, engine_stats(ex, skewed))
    assert ex.summary["imbalance"] > 1.0


def test_limits_update_line_summary_and_are_kept_per_stack(explorer, steps):
    observed = explorer.summary["max_ids_per_partition"]
    explorer.max_ids_per_partition = observed + 10
    explorer.max_unique_ids_per_partition = 10_000
    assert explorer.error == ""
    assert explorer.sources["ids_limit"].data["y"] == [observed + 10]
    assert explorer.sources["unique_limit"].data["y"] == [10_000]
    assert explorer.summary["configured_max_ids_per_partition"] == observed + 10
    assert explorer.stats["configured_max_ids_per_partition"].sel(stack="t0_t1") == observed + 10
    # The other stack keeps its own (none); coming back shows the first stack's again.
    explorer.stack = "t2_t3"
    assert explorer.max_ids_per_partition == 0
    assert explorer.sources["ids_limit"].data["y"] == []
    explorer.stack = "t0_t1"
    assert explorer.max_ids_per_partition == observed + 10
    assert explorer.controls["max_ids"].value == observed + 10
    explorer.max_ids_per_partition = 0                  # 0 = no limit
    assert explorer.summary["configured_max_ids_per_partition"] is None


def test_overflow_and_dropping_on_synthetic_data(explorer, steps):
    low = explorer.summary["max_ids_per_partition"] // 2
    explorer.max_ids_per_partition = low
    assert "above max_ids_per_partition" in explorer.error
    assert_views_match(explorer, engine_stats(explorer, steps))     # observed stats drawn
    explorer.allow_id_dropping = True
    assert explorer.error == ""
    expected = compute_stats(steps[0], _features(), explorer.topology, "auto",
                             SparsecoreConfig(allow_id_dropping=True), stack_limits={"t0_t1": (low, None)})
    assert explorer.summary["dropped_ids"] == int(expected["dropped_ids"].sel(stack="t0_t1")) > 0
    assert "dropped by the limits" in explorer._panel.text


def test_constructor_stack_limits_and_table_limits(steps):
    features = [FeatureSpec(f"f{i}", TableSpec(f"t{i}", VOCAB, 16, max_ids_per_partition=4000))
                for i in range(4)]
    ex = LoadSkewExplorer(steps, features, num_chips=1, stacking="none", stack_limits={"t1": (3000, 900)})
    assert ex.max_ids_per_partition == 4000            # from the TableSpec
    ex.stack = "t1"
    assert (ex.max_ids_per_partition, ex.max_unique_ids_per_partition) == (3000, 900)


def test_initial_limits_given_as_traits_apply_to_the_initial_stack(steps):
    ex = LoadSkewExplorer(steps, _features(), num_chips=1, stack="t2_t3", max_ids_per_partition=5000)
    assert ex.summary["stack"] == "t2_t3"
    assert ex.summary["configured_max_ids_per_partition"] == 5000
    assert ex.summary["configured_max_unique_ids_per_partition"] is None


def test_step_slider_switches_steps(explorer, steps):
    first = explorer.sources["ids_bars"].data["value"].copy()
    explorer.controls["step"].value = 1
    assert explorer.step == 1
    assert explorer.summary["step"] == 1
    assert not np.array_equal(first, explorer.sources["ids_bars"].data["value"])
    assert_views_match(explorer, engine_stats(explorer, steps))
    with pytest.raises(traitlets.TraitError):            # two steps: 0 and 1
        explorer.step = 2


def test_heatmap_stat_switch(explorer, steps):
    explorer.heatmap_stat = "max_unique_ids_per_partition"
    assert_views_match(explorer, engine_stats(explorer, steps))
    assert "max_unique_ids_per_partition" in explorer._heatmap_caption.text


def test_split_by_table_stacks_the_worst_stream(explorer, steps):
    explorer.split_by = "table"
    stats = engine_stats(explorer, steps)
    sel = stats.sel(stack="t0_t1")
    P = sel.sizes["partition"]
    data = explorer.sources["ids_bars"].data
    assert sorted(set(data["group"])) == ["t0", "t1"]
    layers = bars_matrix(explorer.sources["ids_bars"], P)
    # Layers add up to the partition's busiest stream, which is the partition maximum.
    np.testing.assert_array_equal(layers.sum(axis=0), sel["max_ids_per_partition"].max("device").values)
    np.testing.assert_array_equal(np.asarray(data["top"])[P:], layers.sum(axis=0))
    # The per-table statistics add up to the stack's, stream by stream.
    tables = explorer.table_stats
    for var in ("ids", "unique_ids"):
        total = tables[var].sel(stack="t0").values + tables[var].sel(stack="t1").values
        np.testing.assert_array_equal(total, sel[var].values)
    explorer.split_by = "sc"
    assert explorer.table_stats is None
    assert_views_match(explorer, stats)


def legend_labels(chart):
    """The legend entries a person sees: visible items, a field item expanded to its groups."""
    labels = []
    for item in chart.legend.items:
        if not item.visible:
            continue
        if hasattr(item.label, "field"):       # one entry per distinct group, as BokehJS draws it
            labels += list(dict.fromkeys(chart.bars.data[item.label.field]))
        else:
            labels.append(item.label.value)
    return labels


@pytest.mark.parametrize("num_chips", [1, 8])
def test_legend_names_what_the_bar_colors_are(steps, num_chips):
    ex = LoadSkewExplorer(steps, _features(), chip="v5p", num_chips=num_chips)
    assert ex.error == ""
    sel = ex.stats.sel(stack=ex.stack)
    G, S, P = sel["ids"].shape
    assert (G * S, P) == (4 * num_chips, 4 * num_chips)
    for chart, variable in ((ex._ids_chart, "ids"), (ex._unique_chart, "unique_ids")):
        streams = sel[variable].values.reshape(G * S, P)
        labels = legend_labels(chart)
        if num_chips == 1:            # 4 sources: one bar (color) per source SparseCore
            assert chart.legend.title == "bar color = source SC"
            assert labels[:4] == [f"device 0 SC {s}" for s in range(4)]
            assert "partition max" in labels
            assert not chart.distribution_mode
            assert len(chart.spread.data["x"]) == 0
        else:                         # 32 sources: the distribution over them, per partition
            assert chart.legend.title == "over 32 source SCs"
            assert labels == ["max (bar)", "partition max", "median (dash)", "min (dash)"]
            assert chart.distribution_mode
            # One glyph row per partition, not partitions x sources.
            assert len(chart.bars.data["x"]) == P == len(chart.spread.data["x"]) == 32
            np.testing.assert_array_equal(chart.bars.data["value"], streams.max(axis=0))
            np.testing.assert_array_equal(chart.spread.data["median"], np.median(streams, axis=0))
            np.testing.assert_array_equal(chart.spread.data["low"], streams.min(axis=0))
            assert np.all(np.asarray(chart.spread.data["low"]) <= chart.spread.data["median"])
    if num_chips == 8:
        assert "median" in ex._bars_caption.text and "minimum" in ex._bars_caption.text
        assert ex.sources["ids_spread"] is ex._ids_chart.spread
    # By table, the colors are the stack's tables.
    ex.split_by = "table"
    assert ex._ids_chart.legend.title == "bar color = table"
    assert legend_labels(ex._ids_chart)[:2] == ["t0", "t1"]
    assert not ex._ids_chart.distribution_mode
    assert len(ex._ids_chart.bars.data["x"]) == 2 * ex.summary["num_partitions"]


def test_many_sources_show_the_distribution_per_partition(steps):
    ex = LoadSkewExplorer(steps, _features(), num_chips=16)      # 16 x 4 = 64 sources
    P = 64
    assert len(ex.sources["ids_bars"].data["value"]) == P
    np.testing.assert_array_equal(ex.sources["ids_bars"].data["value"],
                                  ex.stats["max_ids_per_partition"].sel(stack=ex.stack).max("device").values)
    assert ex._ids_chart.legend.title == "over 64 source SCs"
    # Back to few sources: bars per source again, the distribution glyphs gone.
    ex.num_chips = 2
    assert len(ex.sources["ids_bars"].data["value"]) == 8 * 8
    assert len(ex.sources["ids_spread"].data["x"]) == 0
    assert not ex._ids_chart.median_renderer.visible and not ex._ids_chart.median_legend_item.visible


def test_stack_selection_survives_toggling_stacking(explorer):
    explorer.controls["stack"].value = "t2_t3"          # the user picks the second stack
    assert explorer.stack == "t2_t3"
    explorer.controls["stacking"].value = "none"
    assert explorer.stacking == "none"
    assert explorer.stack == "t0"                        # t2_t3 is gone: the first stack
    explorer.controls["stacking"].value = "auto"
    assert explorer.stack == "t2_t3"                     # and back to the user's choice
    assert explorer.controls["stack"].value == "t2_t3"
    assert explorer.summary["stack"] == "t2_t3" and explorer.summary["tables"] == ["t2", "t3"]
    # A choice made while stacking is off is the one remembered.
    explorer.stacking = "none"
    explorer.stack = "t3"
    explorer.stacking = "auto"
    assert explorer.stack == "t0_t1"
    explorer.stacking = "none"
    assert explorer.stack == "t3"


def test_invalid_setting_keeps_last_drawing(explorer):
    drawn = explorer.sources["ids_bars"].data["value"].copy()
    explorer.num_chips = 256                             # 256 x 4 SCs do not divide 512 samples
    assert "does not divide" in explorer.error
    np.testing.assert_array_equal(explorer.sources["ids_bars"].data["value"], drawn)
    explorer.num_chips = 2
    assert explorer.error == ""


def test_invalid_initial_setting_reports_instead_of_raising(steps):
    ex = LoadSkewExplorer(steps, _features(), num_chips=256)
    assert "does not divide" in ex.error
    assert ex.stats is None and ex.summary == {}
    ex.num_chips = 2                                     # recovers on the next valid setting
    assert ex.error == "" and ex.summary["num_partitions"] == 8


def test_minibatch_count_when_available(spec_example):
    ex = spec_example
    assert ex.summary["num_minibatches"] == 1
    ex.max_ids_per_partition = 2
    assert ex.summary["num_minibatches"] >= 2


@pytest.mark.parametrize("factor", [0.6, 1.5])
def test_minibatch_counts_are_the_engines(explorer, steps, factor):
    from scwork.sharding.minibatch import minibatch

    limit = int(factor * explorer.summary["max_ids_per_partition"])
    explorer.max_ids_per_partition = limit
    expected = minibatch(steps[0], _features(), explorer.topology, stack_limits={"t0_t1": (limit, None)})
    assert explorer.summary["num_minibatches_per_stack"] == {
        name: int(expected.num_minibatches.sel(stack=name)) for name in ("t0_t1", "t2_t3")}
    assert (explorer.summary["num_minibatches"] > 1) == (factor < 1)


def test_minibatch_count_per_stack_when_one_stack_cannot_be_split():
    # "a": 64 distinct ids over 8 samples, limit 40 -> a split into buckets fits.
    # "b": id 0 in every sample, limit 2 -> one bucket holds 8 ids: no split fits.
    batch = FeatureBatch.from_ragged({"a": (np.arange(64), np.arange(0, 65, 8)),
                                      "b": (np.zeros(8, np.int64), np.arange(9))})
    features = [FeatureSpec("a", TableSpec("ta", 1000, 8)), FeatureSpec("b", TableSpec("tb", 4, 8))]
    ex = LoadSkewExplorer(batch, features, topology=scwork.Topology(1, 1), stacking="none",
                          stack_limits={"ta": (40, None), "tb": (2, None)})
    assert "above max_ids_per_partition" in ex.error
    assert ex.summary["num_minibatches_per_stack"]["ta"] >= 2
    assert ex.summary["num_minibatches_per_stack"]["tb"] is None
    ex.stack = "tb"
    assert "no mini-batch split fits" in ex._panel.text


def test_stack_limits_from_a_limits_file(steps, tmp_path):
    from scwork.sharding.limits_files import Limits, write_limits

    path = write_limits(Limits({"t2_t3": (4000, 900)}), tmp_path / "limits.json")
    for given in (path, str(path), Limits({"t2_t3": (4000, 900)})):
        ex = LoadSkewExplorer(steps, _features(), num_chips=1, stack_limits=given, stack="t2_t3")
        assert (ex.max_ids_per_partition, ex.max_unique_ids_per_partition) == (4000, 900)
        assert ex.summary["configured_max_unique_ids_per_partition"] == 900


def test_results_are_cached_per_setting(explorer):
    explorer.num_chips = 1
    stats_one = explorer.stats
    explorer.num_chips = 2
    explorer.num_chips = 1
    assert explorer.stats is stats_one
    uncached = LoadSkewExplorer(explorer._steps, _features(), num_chips=1, cache_size=0)
    assert uncached._cache == {}


def test_to_html_writes_an_offline_file(explorer, tmp_path):
    explorer.max_ids_per_partition = 1
    path = explorer.to_html(tmp_path / "skew.html")
    text = path.read_text(encoding="utf-8")
    assert "cdn.bokeh.org" not in text
    assert "Bokeh" in text and "t0_t1" in text
    assert "max_ids_per_partition=1" in text            # the error is part of the page


# -- the shared drawing helpers added for this explorer ----------------------------------

def test_bar_chart_split_and_stacked_geometry():
    chart = load_skew._bokeh.BarChart()
    values = np.array([[1, 2, 3], [4, 5, 6]])
    chart.update(values, groups=["a", "b"], mode="split", marks=np.array([4, 5, np.nan]), lines=[("limit", 5)])
    data = chart.bars.data
    assert list(data["value"]) == [1, 2, 3, 4, 5, 6]
    assert np.all(np.asarray(data["bottom"]) == 0)
    # Group a's bar sits left of group b's inside every category slot.
    assert np.all(np.asarray(data["x"])[:3] < np.asarray(data["x"])[3:])
    assert list(chart.marks.data["value"]) == [4, 5]                     # NaN: no mark
    assert chart.lines.data["y"] == [5.0] and chart.legend.items[2].visible
    chart.update(values, groups=["a", "b"], mode="stack")
    data = chart.bars.data
    assert list(data["bottom"]) == [0, 0, 0, 1, 2, 3]
    assert list(data["top"]) == [1, 2, 3, 5, 7, 9]
    assert len(chart.marks.data["y"]) == 0
    assert not chart.legend.items[2].visible
    with pytest.raises(ValueError):
        chart.update(values, groups=["a"])


def test_heatmap_rects_highlights_and_image_path():
    heat = load_skew._bokeh.Heatmap(max_rect_cells=16)
    values = np.array([[1, 5], [3, 7]])
    heat.update(values, highlight=values > 4)
    assert list(heat.cells.data["value"]) == [1, 5, 3, 7]
    assert list(heat.highlights.data["value"]) == [5, 7]
    assert (heat.color_mapper.low, heat.color_mapper.high) == (0.0, 7.0)
    assert not heat.uses_image
    big = np.arange(100).reshape(5, 20)
    heat.update(big, highlight=big == 99)
    assert heat.uses_image and len(heat.cells.data["value"]) == 0
    assert list(heat.highlights.data["row"]) == [4] and list(heat.highlights.data["col"]) == [19]


def test_heatmap_fill_height_rows_keeps_the_frame_between_larger_grids():
    # 4 and 8 devices: one frame size (a new size makes BokehJS lay the view out again);
    # 1 and 2 devices keep the low frame their rows need.
    heat = load_skew._bokeh.Heatmap(max_width=560, max_height=240, fill_height_rows=3)
    sizes = {}
    for rows in (1, 2, 4, 8):
        heat.update(np.arange(rows * 16).reshape(rows, 16))
        sizes[rows] = (heat.figure.frame_width, heat.figure.frame_height)
        # Every row is in view, none beyond.
        assert (heat.figure.y_range.start, heat.figure.y_range.end) == (-rows, 0)
    assert sizes[4] == sizes[8] == (560, 240)
    assert sizes[1] == (560, 80) and sizes[2] == (560, 80)
    plain = load_skew._bokeh.Heatmap(max_width=560, max_height=240)
    plain.update(np.zeros((4, 16)))
    assert plain.figure.frame_height == 160


def test_the_legend_keeps_its_layout_when_the_sources_change(steps):
    # 16 sources, 32 (the distribution), 8, by table: the legend keeps two columns of
    # labels at least 72 px wide, so the charts keep their width (BokehJS lays a chart
    # out again, and builds its legend again, for a new column count or legend width).
    ex = LoadSkewExplorer(steps, _features(), chip="v5p", num_chips=4)
    charts = (ex._ids_chart, ex._unique_chart)
    for change in ({}, {"num_chips": 8}, {"num_chips": 2}, {"split_by": "table"}):
        for name, value in change.items():
            setattr(ex, name, value)
        assert ex.error == ""
        assert [(chart.legend.ncols, chart.legend.label_width) for chart in charts] == [(2, 72), (2, 72)]
    assert ex._ids_chart.legend.title == "bar color = table"


def test_columns_table_html_escapes_and_formats():
    text = load_skew._bokeh.columns_table_html(("a", "<b>"), [("x<y", 12345), ("z", 0.5)], title="t")
    assert "&lt;b&gt;" in text and "x&lt;y" in text and "12,345" in text and "<caption" in text
