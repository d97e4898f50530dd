"""Tests of AllReduceStepper without a browser: traits in, bokeh sources out."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("bokeh")
pytest.importorskip("jupyter_bokeh")

from scwork.widgets import AllReduceStepper, _bokeh
from scwork.widgets import _allreduce_steps as steps_module
from scwork.widgets import allreduce_stepper as module

from scwork.collectives import Network, cost
from scwork.errors import ConfigError

pytestmark = pytest.mark.requires_widgets


@pytest.fixture(scope="module")
def default_stepper():
    return AllReduceStepper()


@pytest.fixture
def pincer_stepper():
    return AllReduceStepper(Network.ring(8), ("single_path", "pincer"), vector_bytes=2**20)


def pairs(source):
    data = source.data
    return {(int(s), int(d)) for s, d in zip(data["source"], data["destination"])}


def engine_pairs(frames, step):
    """(source, destination) of the engine's transfers of 1-based ``step``."""
    sel = frames.transfer_step.values == step - 1
    return set(zip(frames.source.values[sel].tolist(), frames.destination.values[sel].tolist()))


@pytest.fixture
def engine_spy(monkeypatch):
    """Count every call into the engine the stepper makes."""
    calls = {"schedule_for": 0, "frames": 0, "cost": 0}
    for name in calls:
        original = getattr(module, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls


# -- construction ---------------------------------------------------------------------------

def test_default_construction(default_stepper):
    s = default_stepper
    assert s.error == ""
    assert (s.kind, s.shape, s.wraparound, s.cores_per_chip) == ("2d_torus", (4, 4), (True, True), 1)
    assert (s.algorithm_left, s.algorithm_right) == ("ring_all_reduce", "multi_color_all_reduce")
    assert s.network.name == "4x4 torus"
    assert set(s.frames) == set(s.summary) == {"left", "right"}
    assert s.num_steps == max(s.summary[side]["steps"] for side in ("left", "right")) == 30
    assert s.step == 0
    # Step 0 is the start: no arrows, every node holds only its own data.
    for side in ("left", "right"):
        assert len(s.sources[f"arrows_{side}"].data["x0"]) == 0
        assert len(s.sources[f"nodes_{side}"].data["x"]) == 16
        assert list(s.sources[f"nodes_{side}"].data["own data"]) == [1.0] * 16
    for key in ("topology_left", "topology_right", "utilisation_left", "utilisation_right", "timeline"):
        assert key in s.figures
    assert "multi_color_all_reduce" in s.valid_algorithms
    assert "mesh_loop_all_reduce" not in s.valid_algorithms  # needs 2 cores per chip
    assert s.controls["step"].max == s.controls["play"].max == 30


def test_unknown_kwargs_go_to_the_vbox():
    s = AllReduceStepper(Network.ring(4), ("pincer", "rotated_pincer"), layout={"width": "90%"},
                         step=2)
    assert s.layout.width == "90%"
    assert s.step == 2


def test_initial_traits_are_consistent():
    s = AllReduceStepper(kind="ring", algorithms=("pincer", "rotated_pincer"))
    assert (s.shape, s.wraparound, s.network.name, s.error) == ((8,), (True,), "8 ring", "")
    # [md-allreduce]: a 16x4 topology may wrap in one dimension only.
    s = AllReduceStepper(Network.grid((16, 4), wraparound=(True, False)),
                         ("single_path", "multi_color_all_reduce"))
    assert (s.kind, s.error) == ("2d_grid", "")
    assert [box.value for box in s.controls["wraparound"][:2]] == [True, False]
    assert s.controls["shape"][2].layout.display == "none"


def test_drawn_state_survives_cache_eviction(monkeypatch):
    monkeypatch.setattr(module, "_CACHE_SIZE", 1)
    s = AllReduceStepper(Network.torus((2, 2, 2)), ("multi_dim_all_reduce", "multi_color_all_reduce"))
    s.algorithm_right = "pincer"  # caches pincer, evicting the drawn runs
    s.algorithm_right = "multi_color_all_reduce"
    s.vector_bytes = -1  # both sides fail: the last valid state stays
    assert "nbytes" in s.error
    s.view3d = "isometric"  # redraws from the drawn runs
    s.step = 1
    assert pairs(s.sources["arrows_right"]) == engine_pairs(s.frames["right"], 1)


# -- stepping -------------------------------------------------------------------------------

@pytest.mark.parametrize("step", [1, 2, 7, 12, 30])
def test_arrows_are_the_engine_transfers_of_the_step(default_stepper, step):
    s = default_stepper
    s.step = step
    for side in ("left", "right"):
        frames = s.frames[side]
        num_steps = s.summary[side]["steps"]
        expected = engine_pairs(frames, step) if step <= num_steps else set()
        assert pairs(s.sources[f"arrows_{side}"]) == expected
        # Node state is frame `step` of the engine (clamped at the end).
        f = min(step, num_steps)
        complete = (frames.status.values[f] == 3).mean(axis=1)
        assert np.allclose(s.sources[f"nodes_{side}"].data["complete"], complete)
        # Link utilisation of that step.
        util = frames.utilisation.values[step - 1] if step <= num_steps else 0
        assert np.allclose(s.sources[f"utilisation_{side}"].data["utilisation"], util)
    s.step = 0


def test_step_data_of_every_step_follows_the_engine():
    """Per-step drawing data (built when a step is first shown) against the engine's frames, all steps."""
    s = AllReduceStepper(Network.torus((4, 3)), ("ring_all_reduce", "multi_color_all_reduce"), cores_per_chip=2)
    for side in ("left", "right"):
        data, frames = s._steps[side], s.frames[side]
        messages = s._drawn_runs[side].messages
        stub = s._geometry.link_stub[messages["link"]]
        assert data.num_steps == s.summary[side]["steps"] > 0
        for k in range(1, data.num_steps + 1):
            arrows = data.arrows(k)
            in_step = messages["step"] == k - 1
            # One arrow per message, two stubs (out of the source, into the destination) for a wraparound.
            assert len(arrows["x0"]) == int(in_step.sum() + stub[in_step].sum())
            assert set(zip(arrows["source"].tolist(), arrows["destination"].tolist())) == engine_pairs(frames, k)
            assert all(len(column) == len(arrows["x0"]) for column in arrows.values())
            assert set(arrows["step"].tolist()) == {k}
            phases = set(frames.phase.values[frames.transfer_step.values == k - 1].tolist())
            assert data.step_phase[k - 1] == (phases.pop() if len(phases) == 1 else "mixed")
            assert f"step {k} of {data.num_steps}: {int(in_step.sum())} messages" in data.status_line(k)
            assert data.arrows(k) is arrows  # built once
        for f in range(data.num_steps + 1):
            fill, fractions, bar_x, bar_width = data.frame(f)
            status = frames.status.values[f]
            assert np.allclose(fractions, np.stack([(status == code).mean(axis=1) for code in (3, 2, 1, 0)], 1))
            assert len(fill) == s.network.num_nodes and len(bar_x) == len(bar_width) == 4 * s.network.num_nodes
        assert all(len(column) == 0 for column in data.no_arrows().values())


def test_final_state_is_complete_everywhere(default_stepper):
    s = default_stepper
    s.step = s.num_steps
    for side in ("left", "right"):
        assert np.allclose(s.sources[f"nodes_{side}"].data["complete"], 1.0)
    s.step = 0


def test_spec_pincer_arrows(pincer_stepper):
    """[md-allreduce]: step 1 A->H and B->C, step 2 H->G and C->D, step 3 G->F and D->E, then F<->E."""
    s = pincer_stepper
    expected = [{"A -> H", "B -> C"}, {"H -> G", "C -> D"}, {"G -> F", "D -> E"}, {"E -> F", "F -> E"}]
    for step, transfers in enumerate(expected, start=1):
        s.step = step
        assert set(s.sources["arrows_right"].data["transfer"]) == transfers
        assert set(s.sources["arrows_right"].data["phase"]) == {"reduce_scatter / combine"}
    # The single path on the left: one transfer per step, A->B first.
    s.step = 1
    assert list(s.sources["arrows_left"].data["transfer"]) == ["A -> B"]
    # The pincer broadcasts back after the exchange: copies.
    s.step = 5
    assert {p.split(" / ")[1] for p in s.sources["arrows_right"].data["phase"]} == {"copy"}


def test_stepping_does_not_call_the_engine(pincer_stepper, monkeypatch):
    s = pincer_stepper

    def forbidden(*args, **kwargs):
        raise AssertionError("stepping must not call the engine")

    for name in ("schedule_for", "frames", "cost"):
        monkeypatch.setattr(module, name, forbidden)
    monkeypatch.setattr(steps_module, "build", forbidden)   # the schedule builder behind schedule_for
    before = {side: s.frames[side] for side in ("left", "right")}
    for step in list(range(s.num_steps + 1)) + [3, 0]:
        s.step = step
    s.controls["play"].value = 2
    assert s.step == 2
    assert all(s.frames[side] is before[side] for side in before)


def test_step_is_clamped_and_shorter_algorithm_stays_finished():
    s = AllReduceStepper(Network.ring(8), ("rotated_pincer", "single_path"))
    assert s.num_steps == 14  # single path: 2 (N - 1)
    s.step = 99
    assert s.step == 14
    # The rotated pincer ended after 7 steps: no arrows, every node complete.
    assert len(s.sources["arrows_left"].data["x0"]) == 0
    assert np.allclose(s.sources["nodes_left"].data["complete"], 1.0)
    assert "finished" in s._panels["left"].status.text
    s.step = -3
    assert s.step == 0


def test_play_is_linked_to_the_slider():
    s = AllReduceStepper(Network.ring(4), ("pincer", "rotated_pincer"))
    play, slider = s.controls["play"], s.controls["step"]
    assert play.max == slider.max == s.num_steps
    play.value = 2
    assert slider.value == 2 and s.step == 2
    slider.value = 1
    assert play.value == 1 and s.step == 1
    s.step = 3
    assert play.value == slider.value == 3


# -- recomputing ------------------------------------------------------------------------------

def test_topology_and_algorithm_changes_recompute(engine_spy):
    s = AllReduceStepper(Network.ring(8), ("pincer", "rotated_pincer"))
    assert engine_spy["frames"] == 2
    first = s.frames["left"]
    s.kind = "2d_torus"
    assert s.shape == (4, 4) and s.wraparound == (True, True)
    assert s.network.name == "4x4 torus"
    assert engine_spy["frames"] == 4 and s.frames["left"] is not first
    s.algorithm_right = "multi_color_all_reduce"
    assert engine_spy["frames"] == 5
    assert s.frames["right"].attrs["schedule"] == "multi_color"
    # Cached: going back computes nothing.
    s.algorithm_right = "rotated_pincer"
    assert engine_spy["frames"] == 5
    s.step = 3
    assert pairs(s.sources["arrows_right"]) == engine_pairs(s.frames["right"], 3)


def test_message_size_changes_the_cost_not_the_transfers():
    s = AllReduceStepper(Network.ring(8), ("ring", "rotated_pincer"), vector_bytes=2**10)
    small = s.summary["left"]["total_time"]
    s.controls["vector_bytes"].value = 2**28
    assert s.vector_bytes == 2**28
    assert s.summary["left"]["total_time"] > 100 * small
    assert s.frames["left"].attrs["nbytes"] == 2**28
    s.step = 1
    assert pairs(s.sources["arrows_left"]) == engine_pairs(s.frames["left"], 1)


def test_summary_equals_engine_cost(default_stepper):
    s = default_stepper
    for side in ("left", "right"):
        c = cost(s.schedules[side])
        info = s.summary[side]
        assert info["steps"] == s.schedules[side].num_steps
        assert info["total_time"] == pytest.approx(float(c.total_time))
        assert info["algbw"] == pytest.approx(float(c.algbw))
        assert info["busbw"] == pytest.approx(float(c.busbw))
        assert info["total_time"] == pytest.approx(s.frames[side].attrs["total_time_s"])
        assert info["conflicts"] == len(s.schedules[side].conflicts())
    # The header names the faster algorithm with its speed-up.
    assert "multi_color" in s._header.text and "faster" in s._header.text


def test_controls_drive_the_traits():
    s = AllReduceStepper(Network.ring(8), ("single_path", "pincer"))
    s.controls["kind"].value = "2d_mesh"
    assert (s.kind, s.shape, s.wraparound) == ("2d_mesh", (4, 4), (False, False))
    s.controls["shape"][1].value = 2
    assert s.shape == (4, 2) and s.network.name == "4x2 mesh"
    s.controls["wraparound"][0].value = True
    assert s.kind == "2d_grid" and s.wraparound == (True, False)
    s.controls["cores_per_chip"].value = 2
    assert s.network.cores_per_chip == 2 and s.error == ""
    s.controls["algorithm_left"].value = "mesh_loop_all_reduce"
    assert s.algorithm_left == "mesh_loop_all_reduce"
    assert s.error == ""


def test_given_network_link_parameters_survive_a_shape_change():
    net = Network.ring(8, link_bandwidth=1e9, link_latency=5e-6)
    s = AllReduceStepper(net, ("ring", "rotated_pincer"))
    assert s.network is net
    s.shape = (6,)
    ici = s.network.link_classes["ici"]
    assert (ici.bandwidth, ici.latency) == (1e9, 5e-6)


# -- errors -------------------------------------------------------------------------------------

def test_topology_change_switches_to_the_nearest_valid_algorithm_and_says_so():
    s = AllReduceStepper()
    assert (s.algorithm_left, s.algorithm_right) == ("ring_all_reduce", "multi_color_all_reduce")
    s.step = 2
    s.kind = "line"  # a line has no ring: ring_all_reduce cannot run there
    assert s.error == ""
    assert s.network.name == "8 line"
    assert s.algorithm_left == "multi_dim_all_reduce"  # NEAREST_ALGORITHMS["ring_all_reduce"][0]
    assert s.algorithm_right == "multi_color_all_reduce"  # runs on a line: kept
    assert s.controls["algorithm_left"].value == "multi_dim_all_reduce"
    assert "left: ring all-reduce, two rings does not run on 8 line; switched to dimension by dimension" in s.notice
    assert "right" not in s.notice
    assert "switched to" in s._error_area.value
    # The views show the line: every arrow of the left schedule is between neighbours.
    assert s.schedules["left"].network is s.network
    assert s.summary["left"]["algorithm"] == "multi_dim_all_reduce"
    # Later changes redraw as usual (and the notice goes).
    total_time = s.summary["left"]["total_time"]
    s.vector_bytes = 2**20
    assert s.error == "" and s.notice == ""
    assert s.summary["left"]["total_time"] < total_time  # a smaller message, redrawn
    # A pincer goes to the single path on a line; nothing valid at all keeps the error path.
    assert module.nearest_algorithm("pincer", s.valid_algorithms) == "single_path"
    assert module.nearest_algorithm("improved_rotated_pincer", ["pincer", "single_path"]) == "pincer"
    assert module.nearest_algorithm("pincer", []) is None
    assert set(module.NEAREST_ALGORITHMS) == set(module.ALGORITHM_CHOICES)


def test_invalid_algorithm_set_by_code_shows_the_error_and_keeps_the_last_state():
    s = AllReduceStepper()
    s.kind = "line"
    s.step = 2
    network, frames = s.network, dict(s.frames)
    arrows = dict(s.sources["arrows_left"].data)
    s.algorithm_left = "ring_all_reduce"  # asked for explicitly: not switched, an error
    assert "no ring" in s.error and "left algorithm 'ring_all_reduce'" in s.error
    assert "#b71c1c" in s._error_area.value or "error" in s._error_area.value
    assert s.network is network and s.frames == frames
    assert list(s.sources["arrows_left"].data["transfer"]) == list(arrows["transfer"])
    # The menus list what is valid on the line, plus the current (invalid) choice, marked.
    options = {value: label for label, value in s.controls["algorithm_left"].options}
    assert "single_path" in options and "pincer" not in options
    assert options["ring_all_reduce"].endswith("(not valid here)")
    assert s.valid_algorithms == [v for v in module.ALGORITHM_CHOICES if v in options and
                                  not options[v].endswith("(not valid here)")]
    # Picking a valid algorithm clears the error and draws the line.
    s.controls["algorithm_left"].value = "single_path"
    assert s.error == "" and s.network.name == "8 line"
    assert s._error_area.value == ""


def test_unknown_algorithm_and_too_large_network_are_errors_not_crashes():
    s = AllReduceStepper(Network.ring(4), ("pincer", "rotated_pincer"))
    s.algorithm_right = "no_such_algorithm"
    assert "unknown algorithm" in s.error
    assert s.summary["right"]["algorithm"] == "rotated_pincer"
    s.algorithm_right = "rotated_pincer"
    assert s.error == ""
    s.shape = (40, 40)
    assert s.kind == "2d_torus"
    assert str(module.MAX_NODES) in s.error
    assert s.network.name == "4 ring"
    s.algorithm_left = "improved_rotated_pincer"
    s.shape = (5,)  # odd ring: the improved rotated pincer does not run there, the nearest does
    assert s.error == "" and s.algorithm_left == "rotated_pincer"
    assert "improved rotated pincer (even N) does not run on 5 ring" in s.notice
    s.algorithm_left = "improved_rotated_pincer"  # asked for by code: the engine's reason
    assert "even number of nodes" in s.error


def test_frames_limit_is_reported():
    # A 16x16 torus ring all-reduce records more state than frames() allows.
    s = AllReduceStepper(Network.torus((16, 16)), ("multi_dim_all_reduce", "multi_color_all_reduce"))
    assert s.error == ""
    s.algorithm_left = "ring_all_reduce"
    assert "too much state" in s.error
    assert s.summary["left"]["algorithm"] == "multi_dim_all_reduce"


# -- drawing --------------------------------------------------------------------------------------

def test_bidirectional_arrows_are_drawn_side_by_side():
    s = AllReduceStepper(Network.ring(8), ("rotated_pincer", "pincer"))
    s.step = 1
    data = s.sources["arrows_left"].data
    mid = {(int(a), int(b)): ((x0 + x1) / 2, (y0 + y1) / 2) for a, b, x0, y0, x1, y1 in
           zip(data["source"], data["destination"], data["x0"], data["y0"], data["x1"], data["y1"],
               strict=True)}
    assert len(mid) == 16  # every directed link of the ring
    for (a, b), (x, y) in mid.items():
        rx, ry = mid[(b, a)]
        assert np.hypot(x - rx, y - ry) > 0.1  # not on top of each other
    # Arrows stop at the node rim, so their heads stay visible.
    nodes = s.sources["nodes_left"].data
    r = nodes["radius"][0]
    for a, x1, y1 in zip(data["destination"], data["x1"], data["y1"]):
        assert np.hypot(x1 - nodes["x"][a], y1 - nodes["y"][a]) >= r


def test_wraparound_transfers_are_drawn_as_stubs(default_stepper):
    s = default_stepper
    s.step = 1
    data = s.sources["arrows_right"].data
    net = s.network
    found = 0
    for a, b in pairs(s.sources["arrows_right"]):
        link = int(net.link_ids([a], [b])[0])
        rows = [i for i in range(len(data["source"])) if (data["source"][i], data["destination"][i]) == (a, b)]
        assert len(rows) == (2 if net.link_wrap[link] else 1)
        found += bool(net.link_wrap[link])
    assert found > 0
    # Stubs stay inside the view.
    fig = s.figures["topology_right"]
    xs = np.r_[data["x0"], data["x1"]]
    assert fig.x_range.start < xs.min() and xs.max() < fig.x_range.end
    s.step = 0


def test_cores_are_drawn_inside_chip_boxes():
    s = AllReduceStepper(Network.mesh((3, 3), cores_per_chip=2),
                         ("mesh_loop_all_reduce", "multi_dim_all_reduce"))
    assert s.error == ""
    chips = s.sources["chips_left"].data
    nodes = s.sources["nodes_left"].data
    assert len(chips["x"]) == 9 and len(nodes["x"]) == 18
    for node, (x, y) in enumerate(zip(nodes["x"], nodes["y"])):
        chip = node // 2
        assert abs(x - chips["x"][chip]) < chips["width"][chip] / 2
        assert abs(y - chips["y"][chip]) < chips["height"][chip] / 2
    on_chip = 0
    for step in range(1, s.num_steps + 1):
        s.step = step
        on_chip += sum(a // 2 == b // 2 for a, b in pairs(s.sources["arrows_left"]))
    assert on_chip > 0  # zigzag loops pass from core to core on chip


def test_buffer_bars_show_the_state_fractions(pincer_stepper):
    s = pincer_stepper
    s.step = 1
    bars = s.sources["bars_right"].data
    assert len(bars["x"]) == 4 * 8
    widths = np.asarray(bars["width"]).reshape(8, 4)
    total = widths.sum(axis=1)
    assert np.allclose(total, total[0])
    # After step 1, C and H hold partial sums (the pincer's first hops).
    state = s.frames["right"].status.values[1, :, 0]
    partial = widths[:, 1] > 0
    assert partial.tolist() == (state == 2).tolist()
    assert partial[2] and partial[7]


@pytest.mark.parametrize("view3d", ["slices", "isometric"])
def test_3d_torus_views(view3d):
    s = AllReduceStepper(Network.torus((2, 3, 4)), ("multi_dim_all_reduce", "multi_color_all_reduce"),
                         view3d=view3d)
    assert s.error == "" and s.kind == "3d_torus"
    nodes = s.sources["nodes_left"].data
    xy = set(zip(np.round(nodes["x"], 6), np.round(nodes["y"], 6)))
    assert len(xy) == 24  # no two nodes drawn on the same spot
    notes = s._panels["left"].graph.notes.data["text"]
    assert (list(notes) == [f"z = {i}" for i in range(4)]) == (view3d == "slices")
    s.step = 1
    assert pairs(s.sources["arrows_right"]) == engine_pairs(s.frames["right"], 1)


def test_switching_the_3d_view_redraws_without_the_engine(monkeypatch):
    s = AllReduceStepper(Network.torus((2, 2, 3)), ("multi_dim_all_reduce", "multi_color_all_reduce"))
    s.step = 2
    before = list(s.sources["nodes_left"].data["x"])
    monkeypatch.setattr(module, "frames", lambda *a, **k: pytest.fail("engine called"))
    s.view3d = "isometric"
    assert list(s.sources["nodes_left"].data["x"]) != before
    assert pairs(s.sources["arrows_left"]) == engine_pairs(s.frames["left"], 2)


def test_timeline_shows_every_step_and_the_current_one(pincer_stepper):
    s = pincer_stepper
    bars = s.sources["timeline"].data
    lanes = np.asarray(bars["lane"])
    assert (lanes == 0).sum() == s.summary["left"]["steps"]
    assert (lanes == 1).sum() == s.summary["right"]["steps"]
    _, scale = module._time_unit(max(v["total_time"] for v in s.summary.values()))
    right_end = np.asarray(bars["right"])[lanes == 1].max()
    assert right_end == pytest.approx(s.summary["right"]["total_time"] * scale)
    s.step = 3
    marker = s.sources["timeline_marker"].data["x"]
    assert marker[1] == pytest.approx(s.frames["right"].cumulative_time.values[2] * scale)
    highlight = s.sources["timeline_highlight"].data
    assert len(highlight["left"]) == 2
    s.step = 0
    assert list(s.sources["timeline_marker"].data["x"]) == [0.0, 0.0]
    assert len(s.sources["timeline_highlight"].data["left"]) == 0


def test_to_html_writes_an_offline_file(pincer_stepper, tmp_path):
    s = pincer_stepper
    s.step = 1
    path = s.to_html(tmp_path / "allreduce.html")
    html = path.read_text(encoding="utf-8")
    assert "<title>scwork all-reduce: single_path vs pincer on 8 ring, step 1</title>" in html
    assert re.search(r"<script[^>]*\bsrc=", html) is None
    assert "cdn.bokeh.org" not in html
    assert "A -&gt; H" in html or "A -> H" in html  # the current step's arrows are exported


# -- shared drawing helpers ------------------------------------------------------------------------

def test_arrow_segments_offset_and_trim():
    x0, y0, x1, y1 = _bokeh.arrow_segments([0, 1], [0, 0], [1, 0], [0, 0], offset=0.1,
                                           trim_start=0.2, trim_end=0.3)
    # a -> b travels +x: shifted to the right (-y); b -> a travels -x: shifted to +y.
    assert np.allclose(y0, [-0.1, 0.1]) and np.allclose(y1, [-0.1, 0.1])
    assert np.allclose(x0, [0.2, 0.8]) and np.allclose(x1, [0.7, 0.3])
    # Trims never flip an arrow.
    x0, _, x1, _ = _bokeh.arrow_segments([0], [0], [0.1], [0], trim_start=1, trim_end=1)
    assert x0[0] < x1[0]


def test_fit_equal_aspect_keeps_square_units():
    (x0, x1, y0, y1), width, height = _bokeh.fit_equal_aspect([0, 10], [0, 1], max_width=500,
                                                              max_height=400, min_height=120)
    assert width == 500 and height == 120
    assert (x1 - x0) / width == pytest.approx((y1 - y0) / height)
    assert x0 <= -0.5 and x1 >= 10.5


def test_fit_equal_aspect_in_a_given_frame_keeps_the_scale_and_centres():
    xs, ys = [0, 10], [0, 4]
    (x0, x1, y0, y1), width, height = _bokeh.fit_equal_aspect(xs, ys, max_width=600, max_height=470)
    scale = width / (x1 - x0)
    (fx0, fx1, fy0, fy1), fw, fh = _bokeh.fit_equal_aspect(xs, ys, max_width=600, max_height=470,
                                                           frame=(600, 470))
    assert (fw, fh) == (600, 470)
    assert fw / (fx1 - fx0) == pytest.approx(scale) == pytest.approx(fh / (fy1 - fy0))
    assert (fx0 + fx1) / 2 == pytest.approx((x0 + x1) / 2) and (fy0 + fy1) / 2 == pytest.approx((y0 + y1) / 2)
    # A frame smaller than the drawing needs grows to it: nothing is cut off.
    _, fw, fh = _bokeh.fit_equal_aspect(xs, ys, max_width=600, max_height=470, frame=(100, 100))
    assert (fw, fh) == (width, height)


@pytest.mark.parametrize("first, second", [((4, 4, 4), (4, 4, 5)), ((4, 4), (5, 4)), ((4, 4), (4, 5))])
def test_a_new_network_of_about_the_same_shape_keeps_the_frame(first, second):
    # Only ranges and data change (BokehJS lays the view out again for a new frame size),
    # at the scale the network had in a frame fitted to it; every node stays in view.
    s = AllReduceStepper(Network.torus(first), ("multi_dim_all_reduce", "multi_color_all_reduce"))
    fig = s.figures["topology_left"]
    before = (fig.frame_width, fig.frame_height)
    s.shape = second
    assert s.error == ""
    assert (fig.frame_width, fig.frame_height) == before == (600, 470)
    x_scale = fig.frame_width / (fig.x_range.end - fig.x_range.start)
    assert x_scale == pytest.approx(fig.frame_height / (fig.y_range.end - fig.y_range.start))
    (x0, x1, y0, y1), width, height = _bokeh.fit_equal_aspect(
        *_drawn_extent(s), pad=0.45, max_width=600, max_height=470)
    assert x_scale == pytest.approx(width / (x1 - x0))
    nodes = s.sources["nodes_left"].data
    r = np.asarray(nodes["radius"])
    assert np.all(np.asarray(nodes["x"]) - r > fig.x_range.start)
    assert np.all(np.asarray(nodes["x"]) + r < fig.x_range.end)
    assert np.all(np.asarray(nodes["y"]) - r > fig.y_range.start)
    assert np.all(np.asarray(nodes["y"]) + r < fig.y_range.end)


def _drawn_extent(s):
    """The points NodeLinkGraph.set_graph fits (nodes, groups, links, bars and slice names)."""
    geom = s._geometry
    r = geom.radius
    xs = [geom.node_x - r, geom.node_x + r, s.sources["links_left"].data["x0"], s.sources["links_left"].data["x1"]]
    ys = [geom.node_y - r, geom.node_y + r, geom.node_y - r - 0.25, s.sources["links_left"].data["y0"],
          s.sources["links_left"].data["y1"]]
    chips = {name: np.asarray(values, float) for name, values in s.sources["chips_left"].data.items()}
    if len(chips["x"]):
        xs += [chips["x"] - chips["width"] / 2, chips["x"] + chips["width"] / 2]
        ys += [chips["y"] - chips["height"] / 2, chips["y"] + chips["height"] / 2]
    if geom.notes is not None:
        xs.append(np.asarray(geom.notes["x"]) + 1.2)
        ys.append(np.asarray(geom.notes["y"]) + 0.3)
    return (np.concatenate([np.asarray(a, float).ravel() for a in xs]),
            np.concatenate([np.asarray(a, float).ravel() for a in ys]))


def test_a_flat_network_gets_a_lower_frame():
    s = AllReduceStepper(Network.torus((4, 4)), ("multi_dim_all_reduce", "multi_dim_all_reduce"))
    s.shape = (8, 2)
    fig = s.figures["topology_left"]
    assert fig.frame_width == 600 and fig.frame_height < 0.75 * 470
    assert fig.frame_width / (fig.x_range.end - fig.x_range.start) == pytest.approx(
        fig.frame_height / (fig.y_range.end - fig.y_range.start))


def test_node_link_graph_validates_columns():
    graph = _bokeh.NodeLinkGraph(node_value_names=("v",))
    with pytest.raises(ValueError, match="lacks columns"):
        graph.set_graph({"x": [0], "y": [0], "radius": [0.2]}, {"x0": [], "y0": [], "x1": [], "y1": []})
    graph.set_graph({"x": [0, 1], "y": [0, 0], "radius": [0.2, 0.2], "v": [1, 2]},
                    {"x0": [0], "y0": [0], "x1": [1], "y1": [0]})
    with pytest.raises(ValueError, match="nodes"):
        graph.update_nodes(v=[1, 2, 3])
    with pytest.raises(ValueError, match="different lengths"):
        graph.set_arrows({"x0": [0], "y0": [0], "x1": [1], "y1": [0, 1]})
    assert graph.figure.x_range.start < -0.2 and graph.figure.x_range.end > 1.2


def test_gantt_lanes_and_marker():
    gantt = _bokeh.Gantt(value_names=("step",))
    gantt.set_lanes(["a", "b", "c"], x_end=10)
    assert gantt.figure.yaxis[0].major_label_overrides == {0: "a", -1: "b", -2: "c"}
    assert gantt.figure.x_range.end > 10
    gantt.set_bars({"lane": [0, 2], "left": [0, 1], "right": [1, 3], "color": ["#000", "#111"],
                    "step": [1, 1]})
    assert list(gantt.bars.data["top"]) == pytest.approx([0.38, -1.62])
    gantt.set_marker([0, 2], [1, 3], highlight_left=[0], highlight_right=[1], highlight_lanes=[0])
    assert list(gantt.marker.data["x"]) == [1, 3]
    assert len(gantt.highlight.data["left"]) == 1
    with pytest.raises(ValueError, match="lack"):
        gantt.set_bars({"lane": [0]})


# -- legends, utilisation title, dimension and color filters (issue 13) ------------------------------

@pytest.fixture(scope="module")
def torus3d_stepper():
    return AllReduceStepper(Network.torus((4, 4, 4)), ("multi_dim_all_reduce", "multi_color_all_reduce"))


def test_color_legend_lists_every_color_of_the_schedule(torus3d_stepper):
    s = torus3d_stepper
    assert s.error == ""
    for side in ("left", "right"):
        schedule = s.schedules[side]
        used = np.unique(s.frames[side].color.values)
        assert len(used) == schedule.num_colors
        text = s._panels[side].colors.text
        assert text.count("class='scwork-arrow-color'") == schedule.num_colors
        assert f"{schedule.num_colors} arrow color" in text
        for c in used:
            assert f"<b>color {c}</b>" in text
    # multi-color on a 3-D torus: three colors, each with its reduce-scatter and all-gather shade.
    right = s._panels["right"].colors.text
    assert s.schedules["right"].num_colors == 3
    for rs, ag in steps_module._COLOR_PAIRS[:3]:
        assert rs in right and ag in right


def test_color_legend_marks_repeated_hues():
    phases = {c: ["reduce_scatter", "all_gather"] for c in range(8)}
    text = steps_module._color_legend_html(phases)
    assert text.count("class='scwork-arrow-color'") == 8
    assert "color i and i + 6 look alike" in text


def test_utilisation_legend_is_in_the_rendered_page(torus3d_stepper, tmp_path):
    html = torus3d_stepper.to_html(tmp_path / "legend.html").read_text(encoding="utf-8")
    for text in ("Link utilisation", "bar height = busy fraction", "time the link carries data / step time",
                 "bar color = dimension", "dim 0 (x)", "dim 1 (y)", "dim 2 (z)"):
        assert text in html, text
    for color in steps_module._DIM_COLORS:
        assert color in torus3d_stepper._legend.text
    # The legend names only the dimensions of the network drawn.
    ring = AllReduceStepper(Network.ring(8), ("single_path", "pincer"))
    assert "dim 0 (x)" in ring._legend.text and "dim 1 (y)" not in ring._legend.text


def test_utilisation_title_counts_links_and_names_the_time_share(pincer_stepper):
    s = pincer_stepper
    s.step = 1
    # Pincer on an 8 ring, step 1: A -> H and B -> C, 2 of the 16 directed links, each
    # busy for the whole step.
    assert s.network.num_links == 16
    title = s.figures["utilisation_right"].title.text
    assert "2 of 16 directed links busy (12.5% of links)" in title
    assert "their mean busy time: 100% of the step" in title
    # Single path: 1 of 16 links.
    assert "1 of 16 directed links busy (6.25% of links)" in s.figures["utilisation_left"].title.text
    s.step = 0


def test_utilisation_title_numbers_agree_with_the_engine(torus3d_stepper):
    s = torus3d_stepper
    for step in (1, 4):
        s.step = step
        util = s.frames["left"].utilisation.values[step - 1]
        busy = util > 0
        title = s.figures["utilisation_left"].title.text
        n_busy, n_links, share = re.search(r"(\d+) of (\d+) directed links busy \(([\d.]+)% of links\)",
                                           title).groups()
        assert (int(n_busy), int(n_links)) == (busy.sum(), len(util))
        assert float(share) == pytest.approx(100 * busy.mean(), rel=1e-2)
        mean = float(re.search(r"their mean busy time: ([\d.]+)% of the step", title).group(1))
        assert mean == pytest.approx(100 * util[busy].mean(), rel=1e-2)
    s.step = 0


def _drawn_link_dims(s, side):
    """Dimension of the network link behind every drawn arrow."""
    data = s.sources[f"arrows_{side}"].data
    links = s.network.link_ids(np.asarray(data["source"]), np.asarray(data["destination"]))
    return s.network.link_dim[links]


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_dimension_filter_draws_only_that_dimension(dim, monkeypatch):
    s = AllReduceStepper(Network.torus((8, 4, 4)), ("multi_dim_all_reduce", "multi_color_all_reduce"))
    assert s.error == ""

    def forbidden(*args, **kwargs):
        raise AssertionError("the filters must not call the engine")

    for name in ("schedule_for", "frames", "cost"):
        monkeypatch.setattr(module, name, forbidden)
    monkeypatch.setattr(steps_module, "build", forbidden)
    s.controls["show_dim"].value = dim
    assert s.show_dim == dim
    seen = 0
    for step in range(1, s.num_steps + 1):
        s.step = step
        for side in ("left", "right"):
            data = s.sources[f"arrows_{side}"].data
            assert set(_drawn_link_dims(s, side)) <= {dim}
            # What a person sees: x arrows are horizontal, y arrows vertical, z arrows
            # (3-D slices) diagonal up-right or down-left.
            dx = np.asarray(data["x1"]) - np.asarray(data["x0"])
            dy = np.asarray(data["y1"]) - np.asarray(data["y0"])
            if dim == 0:
                assert np.allclose(dy, 0, atol=1e-9)
            elif dim == 1:
                assert np.allclose(dx, 0, atol=1e-9)
            else:
                assert np.all(np.abs(dx) > 1e-6) and np.all(dx * dy > 0)
            # The same arrows as without the filter, minus the other dimensions.
            frames = s.frames[side]
            if step <= s.summary[side]["steps"]:
                sel = frames.transfer_step.values == step - 1
                link_dim = s.network.link_dim[frames.transfer_link.values[sel]]
                expected = set(zip(frames.source.values[sel][link_dim == dim].tolist(),
                                   frames.destination.values[sel][link_dim == dim].tolist()))
                assert pairs(s.sources[f"arrows_{side}"]) == expected
                seen += len(expected)
    assert seen > 0
    # The links drawn are that dimension's only.
    link_dims = np.asarray(s.sources["links_left"].data["dim"])
    assert set(link_dims.tolist()) <= {dim}
    assert f"dim {dim}" in s.figures["topology_left"].title.text
    s.show_dim = "all"
    assert len(s.sources["links_left"].data["x0"]) == len(s._geometry.base_links["x0"])


def test_color_filter_and_both_filters_together(torus3d_stepper, monkeypatch):
    s = torus3d_stepper
    monkeypatch.setattr(module, "frames", lambda *a, **k: pytest.fail("engine called"))
    assert [v for _, v in s.controls["show_color"].options] == ["all", 0, 1, 2]
    s.step = 2
    everything = pairs(s.sources["arrows_right"])
    s.controls["show_color"].value = 1
    assert s.show_color == 1
    assert set(s.sources["arrows_right"].data["color_index"]) == {1}
    frames = s.frames["right"]
    sel = (frames.transfer_step.values == 1) & (frames.color.values == 1)
    assert pairs(s.sources["arrows_right"]) == set(zip(frames.source.values[sel].tolist(),
                                                       frames.destination.values[sel].tolist()))
    # Single-color schedule on the left: color 1 hides all of its arrows.
    assert len(s.sources["arrows_left"].data["x0"]) == 0
    s.show_dim = 0
    assert set(_drawn_link_dims(s, "right")) <= {0}
    assert set(s.sources["arrows_right"].data["color_index"]) <= {1}
    shown = pairs(s.sources["arrows_right"])
    assert (f"dim 0 (x), color 1 only: {len(shown)} of {len(everything)} messages"
            in s.figures["topology_right"].title.text)
    s.show_dim = s.show_color = "all"
    assert pairs(s.sources["arrows_right"]) == everything
    s.step = 0


def test_bad_filters_raise_and_stale_ones_reset():
    s = AllReduceStepper(Network.torus((4, 4)), ("multi_dim_all_reduce", "multi_color_all_reduce"),
                         show_dim=1, show_color=1)
    assert (s.show_dim, s.show_color) == (1, 1)
    with pytest.raises(ConfigError, match=r"4x4 torus has the dimensions \[0, 1\]"):
        s.show_dim = 2
    with pytest.raises(ConfigError, match="dimensions"):
        s.show_dim = "on_chip"  # one core per chip: no on-chip links
    for bad in (-1, "blue", True, 2):  # the schedules have colors 0 and 1 only
        with pytest.raises(ConfigError, match=r"color index of the drawn schedules \(\[0, 1\]"):
            s.show_color = bad
    assert (s.show_dim, s.show_color) == (1, 1)
    # A ring has no dimension 1 and its ring schedule no color 1... the filters reset.
    s.kind = "ring"
    s.algorithm_right = "pincer"
    assert s.error == ""
    assert (s.show_dim, s.show_color) == ("all", "all")
    assert s.controls["show_dim"].value == "all"
    assert [v for _, v in s.controls["show_dim"].options] == ["all", 0]


def test_on_chip_filter_shows_only_core_to_core_arrows():
    s = AllReduceStepper(Network.mesh((3, 3), cores_per_chip=2),
                         ("mesh_loop_all_reduce", "multi_dim_all_reduce"))
    assert [v for _, v in s.controls["show_dim"].options] == ["all", 0, 1, "on_chip"]
    s.controls["show_dim"].value = "on_chip"
    assert s.show_dim == "on_chip"
    on_chip = 0
    for step in range(1, s.num_steps + 1):
        s.step = step
        drawn = pairs(s.sources["arrows_left"])
        assert all(a // 2 == b // 2 for a, b in drawn)  # both cores of one chip
        on_chip += len(drawn)
    assert on_chip > 0
    assert set(np.asarray(s.sources["links_left"].data["dim"]).tolist()) == {-1}
    assert "on chip only" in s.figures["topology_left"].title.text
