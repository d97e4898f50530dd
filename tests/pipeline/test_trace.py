"""Chrome trace export, validation, import of a (synthetic) measured profile, and the overlay."""

from __future__ import annotations

import json

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError, InputError
from scwork.pipeline import (
    PHASE_RESOURCE,
    PHASES,
    TraceError,
    compare,
    expected_stats,
    hbm_usage,
    read_trace,
    step_model,
    to_chrome_trace,
    validate_chrome_trace,
    write_chrome_trace,
)
from scwork.pipeline.timeline import simulate


@pytest.fixture(scope="module")
def model():
    topo = scwork.Topology.for_chip("v5p", num_chips=2)
    stats = expected_stats({"user": 12.0, "item": 4.0}, topo, batch_size=2048, unique_fraction=0.6)
    return step_model(stats, widths={"user": 64, "item": 16}, topology=topo, tc_forward_s=2e-4,
                      tc_backward_s=3e-4, num_minibatches={"user": 2}, num_steps=6)


def test_export_validates_nests_and_has_counters_and_flows(model):
    trace = to_chrome_trace(model)
    summary = validate_chrome_trace(trace)
    assert summary["processes"] == ["TPU:0", "TPU:1", "Host 0"]
    assert "TPU:1 | SparseCore 3" in summary["threads"] and "TPU:0 | TensorCore 1" in summary["threads"]
    assert summary["counter_names"] == ["HBM", "HBM total"]
    # Stacks (and the 2 mini-batches of 'user') nest inside every SparseCore phase: depth 2.
    assert summary["max_depth"] == 2
    # Per chip and step: host -> 4 SparseCores, 4 SparseCores -> ICI, ICI -> TensorCore,
    # TensorCore -> ICI, ICI -> 4 SparseCores = 14 flows; 2 chips x 6 steps = 168.
    assert summary["flows"] == 14 * 2 * 6
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X" and e.get("cat") == "stack"}
    assert names == {"item", "user (mini-batch 1/2)", "user (mini-batch 2/2)"}
    # Children exactly tile their parent phase.
    ev = trace["traceEvents"]
    parent = next(e for e in ev if e["ph"] == "X" and e["name"] == "sc_forward" and e["tid"] == 100 and e["pid"] == 1)
    kids = [e for e in ev if e["ph"] == "X" and e.get("cat") == "stack" and e["pid"] == 1 and e["tid"] == 100
            and e["args"]["step"] == parent["args"]["step"] and e["args"]["phase"] == "sc_forward"]
    assert sum(k["dur"] for k in kids) == pytest.approx(parent["dur"])
    assert json.loads(json.dumps(trace)) == trace


def test_counters_from_the_memory_model():
    from scwork.sharding import FeatureSpec, TableSpec, plan_stacking

    topo = scwork.Topology.for_chip("v5p", num_chips=1)
    tables = [TableSpec(f"t{i}", 4096, 32, optimizer="adagrad", max_ids_per_partition=64,
                        max_unique_ids_per_partition=64) for i in range(2)]
    feats = [FeatureSpec(t.name, t) for t in tables]
    plan = plan_stacking(feats, topo, stacking=None)
    mem = scwork.memory.plan(plan, topo, batch_size=256, dense_weights_bytes=10_000)
    stats = expected_stats({"t0": 4.0, "t1": 4.0}, topo, batch_size=256)
    m = step_model(stats, plan, memory=mem, tc_forward_s=1e-5)
    trace = to_chrome_trace(m)
    validate_chrome_trace(trace)
    assert trace["otherData"]["hbm_counter_source"] == "scwork.memory.plan"
    hbm = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "HBM"]
    tables_bytes = sum(iv.bytes for iv in mem.timeline.intervals if iv.category == "tables")
    assert {e["args"]["tables"] for e in hbm} == {tables_bytes}
    assert {e["args"]["dense_weights"] for e in hbm} == {10_000}
    # Activations are live between SparseCore forward and TensorCore forward only.
    act = sum(iv.bytes for iv in mem.timeline.intervals if iv.category == "embedding_activations")
    values = {e["args"]["embedding_activations"] for e in hbm}
    assert 0 in values and act in values
    # Without a memory report: the step model's own estimate (tables from the plan).
    own = to_chrome_trace(step_model(stats, plan, tc_forward_s=1e-5))
    assert own["otherData"]["hbm_counter_source"] == "step model estimate"
    own_hbm = [e for e in own["traceEvents"] if e["ph"] == "C" and e["name"] == "HBM"]
    # 2 tables of 4096 rows x 32 f32 x 4 B on one chip = 2 x 524288 B; adagrad: as many slot bytes.
    assert {e["args"]["tables"] for e in own_hbm} == {2 * 524288}
    assert {e["args"]["optimizer_slots"] for e in own_hbm} == {2 * 524288}


def test_write_and_read_back(tmp_path, model):
    path = write_chrome_trace(model, tmp_path / "model.json.gz", schedule="sequential")
    import gzip

    with gzip.open(path, "rt") as fh:
        data = json.load(fh)
    assert data["otherData"]["schedule"] == "sequential"
    validate_chrome_trace(data)
    plain = write_chrome_trace(to_chrome_trace(model, chips=[1]), tmp_path / "chip1.json")
    data = json.loads(plain.read_text())
    assert validate_chrome_trace(data)["processes"] == ["TPU:1", "Host 0"]
    with pytest.raises(ConfigError):
        to_chrome_trace(model, chips=[5])
    with pytest.raises(ConfigError):
        to_chrome_trace(model, schedule="fast")


def _event(ph, **kw):
    return {"ph": ph, "pid": 1, "tid": 1, **kw}


NAMES = [_event("M", name="process_name", args={"name": "TPU:0"}),
         _event("M", name="thread_name", args={"name": "SparseCore 0"})]


@pytest.mark.parametrize("events, problem", [
    ([_event("X", name="a", ts=0, dur=10), _event("X", name="b", ts=5, dur=10)], "partially overlaps"),
    ([_event("X", name="a", ts=0, dur=10), _event("s", name="f", id=1, ts=5, cat="t")], "lacks its end"),
    ([_event("X", name="a", ts=0, dur=10), _event("s", name="f", id=1, ts=5),
      _event("f", name="f", id=1, ts=50, bp="e")], "ends outside any slice"),
    ([_event("X", name="a", ts=0, dur=10), _event("s", name="f", id=1, ts=8),
      _event("f", name="f", id=1, ts=2, bp="e")], "ends (2.0) before it starts"),
    ([_event("X", name="a", ts=-1, dur=1)], "ts must be"),
    ([_event("X", name="a", ts=0)], "needs dur"),
    ([_event("C", name="HBM", ts=0, args={"x": "many"})], "non-numeric"),
    ([_event("Q", name="a", ts=0)], "unknown ph"),
    ([_event("X", name="a", ts=0, dur=1, pid=2)], "pid 2 has events but no process_name"),
    ([_event("X", name="a", ts=0, dur=1, tid="x")], "tid must be an integer"),
    ([_event("X", name="a", ts=float("nan"), dur=1)], "finite"),
])
def test_validator_catches_problems(events, problem):
    with pytest.raises(TraceError) as info:
        validate_chrome_trace({"traceEvents": NAMES + events})
    assert any(problem in p for p in info.value.problems), info.value.problems
    assert isinstance(info.value, InputError)


def test_validator_accepts_proper_nesting_and_flows():
    ok = NAMES + [_event("X", name="a", ts=0, dur=10), _event("X", name="b", ts=2, dur=3),
                  _event("X", name="c", ts=10, dur=5), _event("s", name="f", id=7, ts=4),
                  _event("f", name="f", id=7, ts=12, bp="e")]
    summary = validate_chrome_trace(ok)
    assert (summary["max_depth"], summary["flows"]) == (2, 1)
    with pytest.raises(TraceError):
        validate_chrome_trace("not a trace")


# --------------------------------------------------------------------------------------
# a synthetic "measured" profile: XProf-like names, per-phase slow-downs, jitter
# --------------------------------------------------------------------------------------
SC_NAMES = {"sc_forward": "SparseDenseMatmulOp", "sc_backward": "SparseDenseMatmulGradOpWithAdagrad"}
TC_NAMES = {"tc_forward": "dense_fwd.fusion", "tc_backward": "dense_grad.fusion"}
ICI_NAMES = {"ici_forward": "all-to-all", "ici_backward": "all-to-all-grad"}


def synthetic_profile(model, factors, *, seed=0, jitter=0.01, steps=8):
    """Re-simulate the model with every phase slowed by its factor, write it the way a
    profiler would (one process per SparseCore as in 'TPU:0 SparseCore 1 (pid 1005)', op
    names instead of phases, B/E pairs on the host, nested child ops, step markers)."""
    rng = np.random.default_rng(seed)
    d = {p: np.asarray(model.durations[p]) * factors.get(p, 1.0) for p in PHASES}
    tl = simulate(d, model.units, num_steps=steps, pipelined=True, input_buffers=model.params.input_buffers)
    u = model.units
    ev = []
    pid_of = {}

    def proc(name, pid):
        ev.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}})

    def thread(pid, tid, name):
        ev.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}})

    proc("/host:CPU", 1)
    thread(1, 7, "tf_data_iterator")
    proc("python3 (pid 99)", 2)
    thread(2, 1, "MainThread")
    ev.append({"ph": "X", "pid": 2, "tid": 1, "name": "train_loop", "ts": 0.0, "dur": 1.0})
    for c in range(u.num_chips):
        pid = 10 + c
        proc(f"/device:TPU:{c} (pid {pid})", pid)
        thread(pid, 1, "Steps")
        thread(pid, 2, "XLA Ops")
        thread(pid, 3, "ICI links")
        for k in range(u.sparsecores_per_chip):
            spid = 1000 + 4 * c + k + 1
            proc(f"TPU:{c} SparseCore {k} (pid {spid})", spid)
            thread(spid, 1, "XLA Ops")
            pid_of[(c, k)] = spid
    for (phase, step), s in tl.start.items():
        e = tl.end[(phase, step)]
        kind = PHASE_RESOURCE[phase]
        for j in range(len(s)):
            ts, dur = s[j] * 1e6, (e[j] - s[j]) * 1e6 * rng.uniform(1 - jitter, 1.0)
            if dur <= 0:
                continue
            if kind == "host":
                ev.append({"ph": "B", "pid": 1, "tid": 7, "name": "SparseCoreInputPreprocessing", "ts": ts})
                ev.append({"ph": "E", "pid": 1, "tid": 7, "ts": ts + dur})
            elif kind == "sc":
                spid = pid_of[(j // u.sparsecores_per_chip, j % u.sparsecores_per_chip)]
                ev.append({"ph": "X", "pid": spid, "tid": 1, "name": SC_NAMES[phase], "ts": ts, "dur": dur})
                # a nested child op that must not count twice (nor as a forward op)
                ev.append({"ph": "X", "pid": spid, "tid": 1, "name": "gather.3", "ts": ts, "dur": dur / 2})
            elif kind == "ici":
                ev.append({"ph": "X", "pid": 10 + j, "tid": 3, "name": ICI_NAMES[phase], "ts": ts, "dur": dur})
            else:
                ev.append({"ph": "X", "pid": 10 + j, "tid": 2, "name": TC_NAMES[phase], "ts": ts, "dur": dur})
    done = tl.step_completion()
    prev = 0.0
    for i, t in enumerate(done):
        for c in range(u.num_chips):
            ev.append({"ph": "X", "pid": 10 + c, "tid": 1, "name": str(i), "ts": prev * 1e6,
                       "dur": (t - prev) * 1e6})
        prev = t
    return {"traceEvents": ev}, tl


FACTORS = {"host": 1.3, "sc_forward": 1.8, "sc_backward": 1.5, "ici_forward": 0.9, "ici_backward": 1.1,
           "tc_forward": 1.2, "tc_backward": 1.0}


def test_measured_profile_overlay_recovers_the_slowdowns(model, tmp_path):
    trace, tl = synthetic_profile(model, FACTORS, seed=1)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(trace))
    measured = read_trace(path)
    assert measured.num_steps == 8
    assert "python3 (pid 99) | MainThread" in measured.unknown_threads
    ds = compare(model, measured)
    assert list(ds["phase"].values) == list(PHASES) + ["step"]
    for phase, factor in FACTORS.items():
        # jitter shortens events by at most 1 %; the ratio is the slow-down
        assert float(ds["ratio"].sel(phase=phase)) == pytest.approx(factor, rel=0.015), phase
    assert ds["ratio"].attrs["units"] == "1" and ds["measured"].attrs["units"] == "s"
    assert float(ds["measured"].sel(phase="step")) == pytest.approx(tl.period(), rel=0.02)
    table = ds.to_dataframe()
    assert list(table.columns) == ["modelled", "measured", "ratio", "difference"]
    per = measured.phase_times()
    assert per["per_step"].dims == ("step", "phase")


def test_measured_profile_without_markers_and_custom_patterns(model):
    trace, _ = synthetic_profile(model, FACTORS, seed=2, jitter=0.0)
    no_markers = {"traceEvents": [e for e in trace["traceEvents"]
                                  if not (e.get("tid") == 1 and 10 <= e.get("pid", 0) < 100 and e["ph"] == "X")]}
    with pytest.raises(TraceError, match="num_steps"):
        read_trace(no_markers)
    m = read_trace(no_markers, num_steps=8)
    ds = compare(model, m)
    assert float(ds["ratio"].sel(phase="tc_forward")) == pytest.approx(1.2, rel=1e-6)
    assert np.isnan(float(ds["measured"].sel(phase="step")))
    # A phase table without catch-alls: the backward SparseCore op is left unmapped.
    custom = read_trace(trace, phase_patterns=[("sc_forward", r"^sc:SparseDenseMatmulOp$")])
    assert set(custom.phase) == {"sc_forward"}
    assert custom.unmapped.get("SparseDenseMatmulGradOpWithAdagrad", 0) > 0
    with pytest.raises(ConfigError, match="unknown phase"):
        read_trace(trace, phase_patterns=[("dense", "x")])
    with pytest.raises(ConfigError, match="bad phase pattern"):
        read_trace(trace, phase_patterns=[("sc_forward", "(")])


def test_own_export_round_trips_exactly(model):
    ds = compare(model, read_trace(to_chrome_trace(model)))
    for phase in PHASES:
        assert float(ds["ratio"].sel(phase=phase)) == pytest.approx(1.0, rel=1e-9), phase


def test_read_errors(tmp_path):
    with pytest.raises(TraceError, match="no trace file"):
        read_trace(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(bad)
    with pytest.raises(TraceError, match="without"):
        read_trace([{"ph": "B", "pid": 1, "tid": 1, "name": "x", "ts": 0}], num_steps=1)
    with pytest.raises(ConfigError, match="time_unit"):
        read_trace([], num_steps=1, time_unit="min")


def test_hbm_usage_follows_the_schedule(model):
    # batch 2048 over 2 chips x 4 SparseCores = 256 samples per SparseCore; a chip holds
    # 4 SparseCores x 256 samples x (64 + 16) float32 x 4 B of activations.
    act = 4 * 256 * (64 + 16) * 4
    pipe = hbm_usage(model, chip=1)
    seq = hbm_usage(model, chip=1, schedule="sequential")
    assert pipe["usage_by_category"].sel(category="embedding_activations").max().item() == act
    assert seq["usage_bytes"].max().item() == act
    # pipelined: step i+1's activations coexist with step i's gradients
    assert pipe["usage_bytes"].max().item() == 2 * act
    assert pipe["time"].attrs["units"] == "s" and pipe["usage_bytes"].attrs["units"] == "bytes"
    with pytest.raises(ConfigError):
        hbm_usage(model, chip=2)


def test_broken_trace_files_are_trace_errors(tmp_path):
    """Truncated or bit-flipped .json.gz, deep nesting, a bad step_pattern, a list pid and an
    'E' before its 'B' raised EOFError, zlib.error, RecursionError, re.error, TypeError or
    became a negative interval."""
    import gzip
    import json

    from scwork.errors import ConfigError, TraceError
    from scwork.pipeline.trace import read_trace

    good = {"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "steps"}},
        {"ph": "X", "name": "0", "pid": 1, "tid": 1, "ts": 0, "dur": 10}]}
    raw = gzip.compress(json.dumps(good).encode())
    (tmp_path / "cut.json.gz").write_bytes(raw[: len(raw) // 2])
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0xFF
    (tmp_path / "flip.json.gz").write_bytes(bytes(flipped))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    for name in ("cut.json.gz", "flip.json.gz", "deep.json"):
        with pytest.raises(TraceError, match="cannot read"):
            read_trace(tmp_path / name)
    with pytest.raises(ConfigError, match="step_pattern"):
        read_trace(good, step_pattern="(")
    bad_pid = {"traceEvents": [{"ph": "X", "name": "a", "pid": [1], "tid": 1, "ts": 0, "dur": 1}]}
    with pytest.raises(TraceError, match="must be integers or strings"):
        read_trace(bad_pid, num_steps=1)
    backwards = {"traceEvents": [{"ph": "B", "name": "a", "pid": 1, "tid": 2, "ts": 50},
                                 {"ph": "E", "pid": 1, "tid": 2, "ts": 10}]}
    with pytest.raises(TraceError, match="before its 'B'"):
        read_trace(backwards, num_steps=1)
