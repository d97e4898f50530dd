"""jax.profiler profiles on scwork's lanes: a real CPU profile recorded here, XProf-named TPU traces, the overlay."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError, TraceError
from scwork.interop.profile import (
    DEFAULT_LANE_PATTERNS,
    find_profile,
    overlay,
    read_jax_profile,
)
from scwork.pipeline import PHASES, compare, expected_stats, step_model

NUM_STEPS = 5

# A forward and a backward jitted function (their XLA modules are jit_forward and
# jit_backward), host preprocessing in a TraceAnnotation, one StepTraceAnnotation per step.
PROGRAM = """
import sys
import numpy as np
import jax
import jax.numpy as jnp

logdir, num_steps = sys.argv[1], int(sys.argv[2])

def loss(w, x):
    return jnp.tanh(x @ w).sum()

@jax.jit
def forward(w, x):
    return jnp.tanh(x @ w)

@jax.jit
def backward(w, x):
    return w - 0.01 * jax.grad(loss)(w, x)

rng = np.random.default_rng(0)
w, x = jnp.ones((256, 256)), jnp.ones((128, 256))
forward(w, x).block_until_ready()   # compiled before the profile: steps hold execution only
backward(w, x).block_until_ready()
with jax.profiler.trace(logdir, create_perfetto_trace=True):
    for step in range(num_steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            with jax.profiler.TraceAnnotation("preprocess_ids"):
                ids = np.unique(rng.integers(0, 1000, 20000))
            y = forward(w, x)
            w = backward(w, x)
            w.block_until_ready()
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A real jax.profiler profile of PROGRAM on the CPU client: (logdir, run folder)."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed (the oracle extra, Python >= 3.12)")
    root = tmp_path_factory.mktemp("jax_profile")
    script = root / "program.py"
    script.write_text(PROGRAM, encoding="utf-8")
    logdir = root / "logdir"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, str(script), str(logdir), str(NUM_STEPS)], check=False, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = list((logdir / "plugins" / "profile").iterdir())
    assert len(runs) == 1
    return logdir, runs[0]


def _raw_events(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


@pytest.fixture(scope="module")
def measured(recorded):
    return read_jax_profile(recorded[0])


@pytest.fixture(scope="module")
def model():
    topo = scwork.Topology.for_chip("v5p", num_chips=1)
    stats = expected_stats({"user": 12.0, "item": 4.0}, topo, batch_size=2048)
    return step_model(stats, widths={"user": 64, "item": 16}, topology=topo, tc_forward_s=2e-4,
                      tc_backward_s=4e-4, pipelining=False)


# --------------------------------------------------------------------------------------
# the recorded CPU profile
# --------------------------------------------------------------------------------------
def test_jax_writes_the_files_and_every_way_in_reads_the_same(recorded):
    logdir, run = recorded
    names = sorted(p.name for p in run.iterdir())
    assert any(n.endswith(".trace.json.gz") for n in names) and any(n.endswith(".xplane.pb") for n in names)
    assert "perfetto_trace.json.gz" in names
    found = find_profile(logdir)
    assert found.parent == run and found.name.endswith(".trace.json.gz")
    assert find_profile(run) == found
    a = read_jax_profile(logdir)
    for other in (read_jax_profile(run), read_jax_profile(found), read_jax_profile(run / "perfetto_trace.json.gz")):
        assert Counter(zip(other.phase, other.name)) == Counter(zip(a.phase, a.name))
        np.testing.assert_allclose(other.steps, a.steps)


def test_cpu_profile_steps_come_from_the_step_annotations(recorded, measured):
    raw = _raw_events(find_profile(recorded[0]))
    annotations = sorted((e["ts"], e["ts"] + e["dur"]) for e in raw
                         if e.get("ph") == "X" and isinstance(e.get("args"), dict) and "step_num" in e["args"])
    assert len(annotations) == NUM_STEPS
    assert measured.num_steps == NUM_STEPS
    np.testing.assert_allclose(measured.steps, np.array(annotations) * 1e-6)
    # the markers are taken off the Python thread: none of them is also a host event
    # (comparing durations instead was flaky: on a loaded machine one host event can
    # outlast a short step)
    host = measured.kind == "host"
    spans = np.stack([measured.start[host], measured.end[host]], axis=1)
    for start, end in np.array(annotations) * 1e-6:
        assert not (np.isclose(spans[:, 0], start, rtol=0, atol=1e-9)
                    & np.isclose(spans[:, 1], end, rtol=0, atol=1e-9)).any()
    assert set(measured.step) == set(range(NUM_STEPS))


def test_cpu_thunks_are_the_tensorcore_lane_split_by_module(recorded, measured):
    raw = _raw_events(find_profile(recorded[0]))
    thunks = Counter(f"{e['args']['hlo_module']}/{e['name']}" for e in raw
                     if e.get("ph") == "X" and isinstance(e.get("args"), dict) and "hlo_op" in e["args"])
    assert thunks, "the CPU client recorded no thunk with its hlo_op"
    tc = measured.kind == "tc"
    assert Counter(measured.name[tc]) == thunks          # every executed op, once, nothing else
    assert set(measured.kind) == {"host", "tc"}
    for name, phase in zip(measured.name[tc], measured.phase[tc]):
        assert phase == ("tc_backward" if name.startswith("jit_backward/") else "tc_forward"), name
    assert "tc_forward" in set(measured.phase) and "tc_backward" in set(measured.phase)
    host_names = Counter(measured.name[measured.kind == "host"])
    assert host_names["preprocess_ids"] == NUM_STEPS
    assert host_names["PjitFunction(forward)"] == NUM_STEPS
    assert not any(n.startswith("$") or "Await" in n for n in host_names)   # frames and waits left out
    # Executor markers are counted, not mapped: each one the profiler recorded, once. (How
    # many it records varies with the machine's load, 4 or 5 "end: dot" in 5 steps: the
    # reader is held to the file, not to the profiler.)
    markers = Counter(e["name"] for e in raw if str(e.get("name", "")).startswith("end: "))
    assert markers, "the CPU client recorded no executor marker"
    assert {name: measured.unmapped.get(name, 0) for name in markers} == dict(markers)
    assert not any("XLAExecute" in t for t in measured.unknown_threads)


def test_cpu_phase_times_are_busy_time_within_each_step(measured):
    times = measured.phase_times()
    per_step = times["per_step"]
    lengths = measured.steps[:, 1] - measured.steps[:, 0]
    for phase in ("host", "tc_forward", "tc_backward"):
        values = per_step.sel(phase=phase).values
        assert (values > 0).all() and (values <= lengths + 1e-12).all(), phase
        # busy time is at most the summed durations of the phase's events in the step
        for i in range(measured.num_steps):
            sel = (measured.phase == phase) & (measured.step == i)
            assert values[i] <= (measured.end[sel] - measured.start[sel]).sum() + 1e-12
    for phase in ("sc_forward", "ici_forward", "ici_backward", "sc_backward"):
        assert float(times["measured"].sel(phase=phase)) == 0.0


def test_lane_patterns_are_overridable(recorded):
    executor = r"^/host:CPU\b[^|]*\|\s*tf_XLA(?:Execute|Eigen)\b"
    as_sc = read_jax_profile(recorded[0], patterns=[("sc", executor, r"^(?!end: |Threadpool|ThunkExecutor)")])
    assert set(as_sc.kind) == {"sc"}
    assert set(as_sc.phase) == {"sc_forward", "sc_backward"}
    assert any("python" in t for t in as_sc.unknown_threads)
    bare = read_jax_profile(recorded[0], qualify_names=False)
    assert "dot" in set(bare.name) and not any("/" in n for n in bare.name)
    # without module names nothing says backward any more
    assert "tc_backward" not in set(bare.phase)


def test_compare_and_overlay_on_the_recorded_profile(model, measured):
    ds = compare(model, measured)
    assert set(ds["phase"].values) == set(PHASES) | {"step"}
    ov = overlay(model, measured)
    assert list(ov.attrs) and ov.attrs["sorted_by"].startswith("divergence")
    for phase in ds["phase"].values:
        assert float(ov["measured"].sel(phase=phase)) == pytest.approx(float(ds["measured"].sel(phase=phase)))
        assert float(ov["modelled"].sel(phase=phase)) == pytest.approx(float(ds["modelled"].sel(phase=phase)))
    div = ov["divergence"].values
    known = list(div[~np.isnan(div)])
    assert known == sorted(known, reverse=True)
    # SparseCore and ICI phases: modelled, absent from a CPU profile -> infinite, first, not observed
    for phase in ("sc_forward", "sc_backward"):
        assert math.isinf(float(ov["divergence"].sel(phase=phase)))
        assert not bool(ov["observed"].sel(phase=phase))
    assert bool(ov["observed"].sel(phase="tc_backward"))
    assert list(ov["lane"].sel(phase=["host", "tc_forward", "step"]).values) == ["host", "tc", "step"]
    tcf = ov.sel(phase="tc_forward")
    assert float(tcf["log_ratio"]) == pytest.approx(math.log(float(tcf["measured"]) / 2e-4))


# --------------------------------------------------------------------------------------
# .xplane.pb through XProf's converter
# --------------------------------------------------------------------------------------
def test_xplane_is_read_through_xprof_like_the_json(recorded):
    pytest.importorskip("xprof.convert.raw_to_tool_data")
    run = recorded[1]
    (xplane,) = run.glob("*.xplane.pb")
    from_pb = read_jax_profile(xplane)
    from_json = read_jax_profile(run / xplane.name.replace(".xplane.pb", ".trace.json.gz"))
    assert Counter(zip(from_pb.phase, from_pb.name)) == Counter(zip(from_json.phase, from_json.name))
    np.testing.assert_allclose(from_pb.steps, from_json.steps)


def test_corrupt_xplane_raises_trace_error(tmp_path):
    pytest.importorskip("xprof.convert.raw_to_tool_data")
    bad = tmp_path / "host.xplane.pb"
    bad.write_bytes(b"not an XSpace protobuf at all")
    with pytest.raises(TraceError, match="XProf could not convert"):
        read_jax_profile(bad)


def test_xplane_without_xprof_says_what_to_install(tmp_path, monkeypatch):
    for name in ("xprof", "xprof.convert", "xprof.convert.raw_to_tool_data"):
        monkeypatch.setitem(sys.modules, name, None)   # import fails as if not installed
    pb = tmp_path / "host.xplane.pb"
    pb.write_bytes(b"\x0a\x00")
    with pytest.raises(TraceError, match=r"pip install xprof") as err:
        read_jax_profile(tmp_path)
    assert "trace.json.gz" in str(err.value)


# --------------------------------------------------------------------------------------
# TPU profiles in XProf's naming
# --------------------------------------------------------------------------------------
def _meta(pid, process, threads):
    out = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process}}]
    out += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
            for tid, name in threads.items()]
    return out


def _tpu_trace(model, factors, *, num_steps=3, step_s=None):
    """A TPU profile whose phases take ``factors[phase] * modelled`` per step, laid out one after the other."""
    us = 1e6
    pt = {p: model.phase_time[p] for p in PHASES}
    step_s = step_s or sum(pt[p] * factors[p] for p in PHASES) * 1.25
    events = (_meta(1, "/device:TPU:0", {1: "Steps", 2: "XLA Ops", 3: "XLA Modules"})
              + _meta(2, "/device:TPU:0 SparseCore 0", {1: "Sparse Core Steps", 2: "Sparse Core Ops"})
              + _meta(3, "/host:CPU", {7: "python3"}))
    where = {"host": (3, 7, "preprocess", None),
             "sc_forward": (2, 2, "sc_gather.1", None), "sc_backward": (2, 2, "sc_embedding_update.2", None),
             "ici_forward": (1, 2, "all-to-all.3", "jit(step)/jvp(embed)/all_to_all"),
             "ici_backward": (1, 2, "all-to-all.4", "jit(step)/transpose(jvp(embed))/all_to_all"),
             "tc_forward": (1, 2, "fusion.5", "jit(step)/jvp(dense)/dot_general"),
             "tc_backward": (1, 2, "fusion.6", "jit(step)/transpose(jvp(dense))/dot_general")}
    for i in range(num_steps):
        t0 = i * step_s
        events.append({"ph": "X", "pid": 1, "tid": 1, "name": str(i), "ts": t0 * us, "dur": step_s * us})
        events.append({"ph": "X", "pid": 2, "tid": 1, "name": f"sc step {i}", "ts": t0 * us, "dur": step_s * us})
        events.append({"ph": "X", "pid": 1, "tid": 3, "name": "jit_step(7)", "ts": t0 * us, "dur": step_s * us})
        t = t0
        for p in PHASES:
            pid, tid, name, op = where[p]
            dur = pt[p] * factors[p]
            ev = {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": t * us, "dur": dur * us}
            if op:
                ev["args"] = {"tf_op": op}
            events.append(ev)
            t += dur
    return {"traceEvents": events}, step_s


def test_tpu_profile_maps_xprof_lines_and_overlay_sorts_by_divergence():
    topo = scwork.Topology.for_chip("v5p", num_chips=2)   # two chips: the model has ICI time
    model = step_model(expected_stats({"user": 12.0, "item": 4.0}, topo, batch_size=2048),
                       widths={"user": 64, "item": 16}, topology=topo, tc_forward_s=2e-4, tc_backward_s=4e-4,
                       pipelining=False)
    assert all(model.phase_time[p] > 0 for p in PHASES)
    factors = {"host": 1.0, "sc_forward": 3.0, "ici_forward": 0.5, "tc_forward": 1.2, "tc_backward": 0.9,
               "ici_backward": 1.5, "sc_backward": 0.25}
    trace, step_s = _tpu_trace(model, factors)
    m = read_jax_profile(trace)
    assert m.num_steps == 3                                   # the device Steps line, not Sparse Core Steps
    assert sorted(set(zip(m.kind, m.phase))) == sorted((("host", "host"), ("sc", "sc_forward"), ("sc", "sc_backward"),
                                                        ("ici", "ici_forward"), ("ici", "ici_backward"),
                                                        ("tc", "tc_forward"), ("tc", "tc_backward")))
    assert "/device:TPU:0 | XLA Modules" in m.unknown_threads
    assert "/device:TPU:0 SparseCore 0 | Sparse Core Steps" in m.unknown_threads
    ov = overlay(model, m)
    expected = {p: abs(math.log(f)) for p, f in factors.items()}
    expected["step"] = abs(math.log(step_s / model.step_time))
    for p, d in expected.items():
        assert float(ov["divergence"].sel(phase=p)) == pytest.approx(d, rel=1e-6), p
        assert float(ov["ratio"].sel(phase=p)) == pytest.approx(math.exp(math.copysign(d, math.log(
            factors[p] if p != "step" else step_s / model.step_time))), rel=1e-6)
    assert list(ov["phase"].values) == sorted(expected, key=lambda p: (-expected[p], (*PHASES, "step").index(p)))
    assert ov["observed"].values.all()


def test_tpu_chip_and_sparsecore_numbers_come_from_the_plane_names():
    events = (_meta(1, "/device:TPU:3", {1: "XLA Ops", 2: "Async XLA Ops"})
              + _meta(2, "/device:TPU:3 SparseCore 2", {1: "Sparse Core Ops"}))
    events += [{"ph": "X", "pid": 1, "tid": 1, "name": "fusion.1", "ts": 0, "dur": 5},
               {"ph": "X", "pid": 1, "tid": 2, "name": "all-reduce-start.2", "ts": 5, "dur": 5},
               {"ph": "X", "pid": 1, "tid": 1, "name": "collective-permute-done.3", "ts": 10, "dur": 1},
               {"ph": "X", "pid": 1, "tid": 1, "name": "sendrecv_fusion", "ts": 12, "dur": 1},
               {"ph": "X", "pid": 2, "tid": 1, "name": "gather", "ts": 0, "dur": 4}]
    m = read_jax_profile(events, num_steps=1)
    got = {(str(n), str(k), int(c), int(u)) for n, k, c, u in zip(m.name, m.kind, m.chip, m.unit)}
    assert got == {("fusion.1", "tc", 3, 0), ("all-reduce-start.2", "ici", 3, 0),
                   ("collective-permute-done.3", "ici", 3, 0), ("sendrecv_fusion", "tc", 3, 0),
                   ("gather", "sc", 3, 2)}
    assert len(m.steps) == 0 and m.num_steps == 1


def test_defaults_are_documented_triples_of_known_lanes():
    assert all(len(rule) == 3 and rule[0] in ("host", "sc", "ici", "tc") for rule in DEFAULT_LANE_PATTERNS)


# --------------------------------------------------------------------------------------
# steps, options and bad inputs
# --------------------------------------------------------------------------------------
def test_step_options(recorded):
    logdir = recorded[0]
    with pytest.raises(TraceError, match="num_steps"):
        read_jax_profile(logdir, step_name="^no such annotation$")
    plain = read_jax_profile(logdir, steps=None, num_steps=NUM_STEPS)
    assert len(plain.steps) == 0 and plain.num_steps == NUM_STEPS
    assert math.isnan(float(plain.phase_times()["step_time"]))
    with pytest.raises(TraceError, match="Steps"):
        read_jax_profile(logdir, steps="device")
    assert read_jax_profile(logdir, steps="host", step_name="^train").num_steps == NUM_STEPS


def test_overlay_without_markers_puts_step_last(model, recorded):
    ov = overlay(model, recorded[0], steps=None, num_steps=NUM_STEPS)
    assert ov["phase"].values[-1] == "step" and math.isnan(float(ov["divergence"].values[-1]))
    with pytest.raises(ConfigError, match="MeasuredTrace"):
        overlay(model, read_jax_profile(recorded[0]), steps=None)
    with pytest.raises(ConfigError, match="StepModel"):
        overlay("not a model", read_jax_profile(recorded[0]))


def test_overlapping_step_markers_raise():
    events = _meta(1, "/host:CPU", {1: "python"}) + [
        {"ph": "X", "pid": 1, "tid": 1, "name": "train", "ts": 0, "dur": 10, "args": {"step_num": "0"}},
        {"ph": "X", "pid": 1, "tid": 1, "name": "train", "ts": 5, "dur": 10, "args": {"step_num": "1"}}]
    with pytest.raises(TraceError, match="overlap"):
        read_jax_profile(events)


@pytest.mark.parametrize("kwargs, match", [
    ({"patterns": [("gpu", "x", "")]}, "unknown lane"),
    ({"patterns": [("tc", "(", "")]}, "bad lane pattern"),
    ({"patterns": [("tc", "x")]}, "bad lane pattern"),
    ({"patterns": "tc"}, "sequence"),
    ({"phase_patterns": [("tc_sideways", "^tc:")]}, "unknown phase"),
    ({"steps": "always"}, "steps must be"),
    ({"step_name": "("}, "regular expression"),
    ({"max_bytes": 0}, "max_bytes"),
    ({"max_events": True}, "max_events"),
])
def test_bad_options_raise_config_error(kwargs, match):
    events = _meta(1, "/device:TPU:0", {1: "XLA Ops"}) + [{"ph": "X", "pid": 1, "tid": 1, "name": "f", "ts": 0,
                                                          "dur": 1}]
    with pytest.raises(ConfigError, match=match):
        read_jax_profile(events, num_steps=1, **kwargs)


def _write_gz(path: Path, data: bytes) -> Path:
    with gzip.open(path, "wb") as fh:
        fh.write(data)
    return path


def test_malformed_and_mismatched_inputs_raise_trace_error(tmp_path, recorded):
    with pytest.raises(TraceError, match="no profile at"):
        read_jax_profile(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceError, match="holds no"):
        read_jax_profile(empty)
    (tmp_path / "norun" / "plugins" / "profile").mkdir(parents=True)
    with pytest.raises(TraceError, match="no profile run"):
        read_jax_profile(tmp_path / "norun")
    two = tmp_path / "two"
    two.mkdir()
    for host in ("a", "b"):
        _write_gz(two / f"{host}.trace.json.gz", b'{"traceEvents": []}')
    with pytest.raises(TraceError, match="one profile per host"):
        read_jax_profile(two)
    good = find_profile(recorded[0]).read_bytes()
    truncated = tmp_path / "t.trace.json.gz"
    truncated.write_bytes(good[: len(good) // 2])
    with pytest.raises(TraceError, match="cannot read"):
        read_jax_profile(truncated)
    with pytest.raises(TraceError, match="JSON"):
        read_jax_profile(_write_gz(tmp_path / "n.trace.json.gz", b"not json"))
    with pytest.raises(TraceError, match="traceEvents"):
        read_jax_profile(_write_gz(tmp_path / "o.trace.json.gz", b'{"events": []}'))
    other = tmp_path / "profile.txt"
    other.write_text("x")
    with pytest.raises(TraceError, match="neither"):
        read_jax_profile(other)
    with pytest.raises(TraceError, match="a profile is a path"):
        read_jax_profile(42)
    bad_events = _meta(1, "/device:TPU:0", {1: "XLA Ops"}) + [
        {"ph": "X", "pid": 1, "tid": 1, "name": "f", "ts": "soon", "dur": 1},
        {"ph": "B", "pid": 1, "tid": 1, "name": "g", "ts": 3},
        {"ph": "X", "pid": [1], "tid": 1, "name": "h", "ts": 0, "dur": 1}]
    with pytest.raises(TraceError) as err:
        read_jax_profile(bad_events, num_steps=1)
    assert "ts 'soon'" in str(err.value) and "without 'E'" in str(err.value) and "pid/tid" in str(err.value)


def test_reading_is_bounded(tmp_path, recorded):
    path = find_profile(recorded[0])
    with pytest.raises(TraceError, match="max_bytes"):
        read_jax_profile(path, max_bytes=path.stat().st_size - 1)
    # a small file that inflates past the bound is stopped while decompressing
    bomb = _write_gz(tmp_path / "bomb.trace.json.gz", b"[" + b" " * (4 * 2**20) + b"]")
    assert bomb.stat().st_size < 2**20
    with pytest.raises(TraceError, match="max_bytes"):
        read_jax_profile(bomb, max_bytes=2**20, num_steps=1)
    with pytest.raises(TraceError, match="max_events"):
        read_jax_profile(path, max_events=100)


# -- regressions of issue 22 ----------------------------------------------------------------------------
@pytest.mark.parametrize("group", [r"(?P<chip>\S+)", r"(?P<chip>[^ ]*)", r"(?P<unit>.+)"])
def test_chip_and_unit_groups_that_capture_non_digits_are_trace_errors(group):
    from scwork.errors import TraceError
    from scwork.interop.profile import read_jax_profile

    events = {"traceEvents": [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "TPU:x SparseCore 1"}},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 5, "name": "op"}]}
    with pytest.raises(TraceError, match="not a number"):
        read_jax_profile(events, patterns=[("sc", rf"TPU:{group} SparseCore", "")], steps=None, num_steps=1)
    ok = read_jax_profile(events, patterns=[("sc", r"TPU:\w SparseCore (?P<unit>\d+)", "")], steps=None,
                          num_steps=1)
    assert ok.unit.tolist() == [1]


def test_find_profile_paths_that_are_not_paths_or_too_long():
    from scwork.errors import TraceError
    from scwork.interop.profile import find_profile

    for path in (5, None, 1.5, ["a"]):
        with pytest.raises(TraceError, match="path must be"):
            find_profile(path)
    with pytest.raises(TraceError, match="cannot look at|no profile"):
        find_profile("9" * 5000)


def test_an_event_phase_that_is_not_text_is_skipped():
    """ph = an empty array made 'ph not in (...)' raise ValueError (found by the 1,000-case run)."""
    import numpy as np

    from scwork.interop.profile import read_jax_profile

    events = {"traceEvents": [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:TPU:0 SparseCore 0"}},
        {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "Sparse Core Ops"}},
        {"ph": np.array([]), "pid": 1, "tid": 1, "ts": 0, "dur": 5, "name": "odd"},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "name": "fusion.1"}]}
    trace = read_jax_profile(events, steps=None, num_steps=1)
    assert trace.name.tolist() == ["fusion.1"]


def test_steps_that_is_not_a_name_is_a_config_error():
    """steps = an array made 'steps not in (...)' raise ValueError (found by the 1,000-case run)."""
    import numpy as np

    from scwork.errors import ConfigError
    from scwork.interop.profile import read_jax_profile

    for steps in (np.array([]), np.array(["auto", "host"]), 5):
        with pytest.raises(ConfigError, match="steps must be"):
            read_jax_profile({"traceEvents": []}, steps=steps)
