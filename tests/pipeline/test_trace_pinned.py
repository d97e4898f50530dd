"""read_trace / MeasuredTrace / compare on small hand-made traces, every value worked out by hand.

Survivors of the mutation run of scwork/pipeline/trace.py: the other trace tests
compare a model with its own export or with a re-simulation, so nothing pinned which
step an event at a step boundary falls in, how the busy time of one unit's threads is
joined, which events count as nested (a parent and a child starting together, events
that touch), the step time without the first and last markers, the four time units, the
int64 bounds of thread ids, the digits of a chip number or the exact problems of bad
B / E / X events. Every expected figure below is written out with its arithmetic.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import warnings

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError, TraceError
from scwork.pipeline import PHASES, compare, expected_stats, step_model
from scwork.pipeline.trace import MeasuredTrace, read_trace


def _process(pid, name):
    return {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}}


def _thread(pid, tid, name):
    return {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}


def _x(pid, tid, name, start, end):
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": start, "dur": end - start}


def _main_trace():
    """Four steps on chip 0's step line; SparseCores, TensorCore, ICI and host events (time in s).

    Step markers [0, 10], [10, 20], [22, 30], [30, 40] (given out of order), so step 2
    leaves a gap [20, 22] after step 1. A second step line (pid 3) must be ignored.
    """
    ev = [_process(1, "/device:TPU:0"), _thread(1, 1, "Steps"), _thread(1, 2, "XLA Ops"), _thread(1, 3, "ICI links"),
          _process(3, "/device:TPU:1"), _thread(3, 1, "Steps"),
          _process(2, "/host:CPU"), _thread(2, 1, "main"),
          _process(5, "TPU:0 SparseCore 0"), _thread(5, 1, "XLA Ops"), _thread(5, 2, "Stream 2"),
          _process(6, "TPU:0 SparseCore 1"), _thread(6, 1, "XLA Ops"),
          _process(7, "TPU:1 SparseCore 0"), _thread(7, 1, "XLA Ops"),
          _process(9, "python3"), _thread(9, 1, "MainThread")]
    ev += [_x(1, 1, "2", 22, 30), _x(1, 1, "0", 0, 10), _x(1, 1, "3", 30, 40), _x(1, 1, "1", 10, 20)]
    ev += [_x(3, 1, "0", 0, 5)]                        # the other step line: neither steps nor events
    ev += [
        # SparseCore 0 of chip 0, thread 1: the child comes first in the list and starts with its parent
        _x(5, 1, "gather.1", 1, 2), _x(5, 1, "SparseDenseMatmulOp", 1, 4),
        _x(5, 1, "SparseDenseMatmulGradOp", 5, 9),
        _x(5, 1, "SparseDenseMatmulOp", 10, 12),     # starts at step 1's start: step 1
        _x(5, 1, "SparseDenseMatmulOp", 20, 21),     # starts at step 1's end, in the gap: no step
        _x(5, 1, "SparseDenseMatmulOp", -3, -1),     # before the first step: no step
        _x(5, 1, "SparseDenseMatmulGradOp", 30, 33),  # at step 3's start (step 2's end): step 3
        # SparseCore 0 of chip 0, thread 2 (same unit): overlaps [1, 4] of thread 1
        _x(5, 2, "SparseDenseMatmulOp", 3, 5),
        # SparseCore 1 of chip 0
        _x(6, 1, "SparseDenseMatmulOp", 1, 4.5), _x(6, 1, "SparseDenseMatmulOp", 11, 16),
        # SparseCore 0 of chip 1
        _x(7, 1, "SparseDenseMatmulOp", 23, 25), _x(7, 1, "SparseDenseMatmulGradOp", 26, 29),
        # TensorCore and ICI of chip 0
        _x(1, 2, "fusion.1", 4, 6), _x(1, 2, "fusion_grad", 6, 7.5), _x(1, 2, "fusion.1", 25, 28),
        _x(1, 3, "all-to-all", 4, 5), _x(1, 3, "all-to-all-grad", 9, 9.5),
        # host: a B/E pair with a nested pair inside
        {"ph": "B", "pid": 2, "tid": 1, "name": "preprocess", "ts": 0.5},
        {"ph": "B", "pid": 2, "tid": 1, "name": "inner", "ts": 0.6},
        {"ph": "E", "pid": 2, "tid": 1, "ts": 0.7},
        {"ph": "E", "pid": 2, "tid": 1, "ts": 1},
        _x(9, 1, "train_loop", 0, 40),                # an unknown thread
    ]
    return {"traceEvents": ev}


def _phase_row(ds, var, **by_phase):
    return {p: float(ds[var].sel(phase=p)) for p in by_phase}


def test_steps_and_step_of_each_event():
    m = read_trace(_main_trace(), time_unit="s")
    # markers sorted by start; the second step line (pid 3, [0, 5]) is not used
    assert m.steps.tolist() == [[0, 10], [10, 20], [22, 30], [30, 40]]
    # mapped: 8 sc_forward + 3 sc_backward + 3 TensorCore + 2 ICI + 1 host = 17
    assert m.num_steps == 4 and len(m) == 17
    assert m.unknown_threads == ["python3 | MainThread"]    # the pid 3 step line is skipped, not unknown
    assert m.unmapped == {}
    sc00 = [(n, float(s), int(i)) for n, s, i, k, c, u, t in
            zip(m.name, m.start, m.step, m.kind, m.chip, m.unit, m.end) if (k, c, u) == ("sc", 0, 0)]
    # sorted by start within each thread; thread 1 first (the child gather.1 is left out)
    assert sc00 == [("SparseDenseMatmulOp", -3.0, -1), ("SparseDenseMatmulOp", 1.0, 0),
                    ("SparseDenseMatmulGradOp", 5.0, 0), ("SparseDenseMatmulOp", 10.0, 1),
                    ("SparseDenseMatmulOp", 20.0, -1), ("SparseDenseMatmulGradOp", 30.0, 3),
                    ("SparseDenseMatmulOp", 3.0, 0)]
    # resources of every mapped event: chip and unit numbers from the thread labels
    assert sorted({(str(k), int(c), int(u)) for k, c, u in zip(m.kind, m.chip, m.unit)}) == [
        ("host", 0, 0), ("ici", 0, 0), ("sc", 0, 0), ("sc", 0, 1), ("sc", 1, 0), ("tc", 0, 0)]
    host = [(str(n), float(s), float(e)) for n, s, e, k in zip(m.name, m.start, m.end, m.kind) if k == "host"]
    assert host == [("preprocess", 0.5, 1.0)]             # the nested 'inner' pair is left out
    assert dict(zip(m.name[m.kind == "tc"], m.phase[m.kind == "tc"])) == {"fusion.1": "tc_forward",
                                                                          "fusion_grad": "tc_backward"}
    assert repr(m) == "MeasuredTrace(17 mapped events, 4 steps, 0 unmapped, 1 unknown threads)"


def test_phase_times_per_step_by_hand():
    ds = read_trace(_main_trace(), time_unit="s").phase_times()
    per = {p: ds["per_step"].sel(phase=p).values.tolist() for p in PHASES}
    # sc_forward, busiest unit per step:
    #   step 0: unit (0, 0) threads 1 and 2: [1, 4] u [3, 5] = [1, 5] = 4; unit (0, 1): [1, 4.5] = 3.5 -> 4
    #   step 1: (0, 0) [10, 12] = 2; (0, 1) [11, 16] = 5 -> 5
    #   step 2: (1, 0) [23, 25] = 2;  step 3: nothing -> 0
    assert per["sc_forward"] == [4.0, 5.0, 2.0, 0.0]
    # sc_backward: step 0 (0, 0) [5, 9] = 4; step 2 (1, 0) [26, 29] = 3; step 3 (0, 0) [30, 33] = 3
    assert per["sc_backward"] == [4.0, 0.0, 3.0, 3.0]
    assert per["tc_forward"] == [2.0, 0.0, 3.0, 0.0]          # [4, 6] and [25, 28]
    assert per["tc_backward"] == [1.5, 0.0, 0.0, 0.0]         # [6, 7.5]
    assert per["host"] == [0.5, 0.0, 0.0, 0.0]                # [0.5, 1]
    assert per["ici_forward"] == [1.0, 0.0, 0.0, 0.0]         # [4, 5]
    assert per["ici_backward"] == [0.5, 0.0, 0.0, 0.0]        # [9, 9.5]
    # the mean over the 4 steps
    assert _phase_row(ds, "measured", **dict.fromkeys(PHASES)) == {
        "host": 0.5 / 4, "sc_forward": (4 + 5 + 2 + 0) / 4, "ici_forward": 1 / 4, "tc_forward": (2 + 3) / 4,
        "tc_backward": 1.5 / 4, "ici_backward": 0.5 / 4, "sc_backward": (4 + 3 + 3) / 4}
    # mapped events, those outside every step included: sc_forward 5 on (0, 0) thread 1 (not the
    # child) + 1 on thread 2 + 2 on (0, 1) + 1 on (1, 0) = 8
    assert dict(zip(ds["phase"].values, ds["events"].values.tolist())) == {
        "host": 1, "sc_forward": 8, "ici_forward": 1, "tc_forward": 2, "tc_backward": 1, "ici_backward": 1,
        "sc_backward": 3}
    # step lengths 10, 10, 8, 10: the first and last are left out -> (10 + 8) / 2 = 9
    assert float(ds["step_time"]) == 9.0
    assert ds["step"].values.tolist() == [0, 1, 2, 3]
    assert ds.attrs == {"num_steps": 4, "unmapped_events": 0}
    assert ds["per_step"].dims == ("step", "phase") and ds["per_step"].shape == (4, 7)


def test_phase_times_without_markers_by_hand():
    m = read_trace(_main_trace(), time_unit="s", step_pattern=None, num_steps=4)
    assert m.num_steps == 4 and m.steps.shape == (0, 2)
    assert set(m.step.tolist()) == {-1}
    # both step lines are now threads no resource pattern matches
    assert m.unknown_threads == ["/device:TPU:0 | Steps", "/device:TPU:1 | Steps", "python3 | MainThread"]
    ds = m.phase_times()
    assert "per_step" not in ds and "step" not in ds.coords
    assert math.isnan(float(ds["step_time"]))
    # busiest unit's whole busy time / 4 steps. sc_forward: (0, 0): [-3, -1] 2 + [1, 5] 4 + [10, 12] 2
    # + [20, 21] 1 = 9; (0, 1): 3.5 + 5 = 8.5; (1, 0): 2 -> 9 / 4
    # sc_backward: (0, 0): [5, 9] 4 + [30, 33] 3 = 7; (1, 0): 3 -> 7 / 4
    assert _phase_row(ds, "measured", **dict.fromkeys(PHASES)) == {
        "host": 0.5 / 4, "sc_forward": 9 / 4, "ici_forward": 1 / 4, "tc_forward": 5 / 4, "tc_backward": 1.5 / 4,
        "ici_backward": 0.5 / 4, "sc_backward": 7 / 4}
    assert ds.attrs == {"num_steps": 4, "unmapped_events": 0}


def test_nested_events_counted_when_not_top_level_only():
    m = read_trace(_main_trace(), time_unit="s", top_level_only=False)
    # the child gather.1 [1, 2] and the host's inner [0.6, 0.7] now count: 17 + 2 events
    assert len(m) == 19
    ds = m.phase_times()
    assert int(ds["events"].sel(phase="sc_forward")) == 9 and int(ds["events"].sel(phase="host")) == 2
    # both lie inside their parents: the busy times do not change
    assert ds["per_step"].sel(phase="sc_forward").values.tolist() == [4.0, 5.0, 2.0, 0.0]
    assert ds["per_step"].sel(phase="host").values.tolist() == [0.5, 0.0, 0.0, 0.0]


def test_partial_overlap_on_one_thread_is_nested_and_touching_is_not():
    ev = [_process(1, "/device:TPU:0"), _thread(1, 1, "Steps"), _thread(1, 2, "XLA Ops"), _x(1, 1, "0", 0, 100),
          _x(1, 2, "a", 0, 2), _x(1, 2, "b", 1.5, 3),       # b starts 0.5 s before a ends: nested
          _x(1, 2, "c", 3, 4),                              # c starts where b ends: top level
          _x(1, 2, "d", 5, 6), _x(1, 2, "e", 6.5, 7)]       # e starts 0.5 s after d: top level
    top = read_trace(ev, time_unit="s")
    assert top.name.tolist() == ["a", "c", "d", "e"]
    # a [0, 2] + c [3, 4] + d [5, 6] + e [6.5, 7] = 2 + 1 + 1 + 0.5
    assert float(top.phase_times()["measured"].sel(phase="tc_forward")) == 4.5
    every = read_trace(ev, time_unit="s", top_level_only=False)
    assert every.name.tolist() == ["a", "b", "c", "d", "e"]
    # union [0, 3] u [3, 4] u [5, 6] u [6.5, 7] = 3 + 1 + 1 + 0.5
    assert float(every.phase_times()["measured"].sel(phase="tc_forward")) == 5.5


def test_start_exactly_one_picosecond_before_the_end_is_top_level():
    # the slack is 1e-12 s: b starts at 1 - 1e-12, not before 1 - 1e-12; c starts 2e-12 before b ends
    ev = [_process(1, "/device:TPU:0"), _thread(1, 2, "XLA Ops"),
          _x(1, 2, "a", 0.0, 1.0), _x(1, 2, "b", 1.0 - 1e-12, 2.0), _x(1, 2, "c", 2.0 - 2e-12, 3.0)]
    m = read_trace(ev, time_unit="s", step_pattern=None, num_steps=1)
    assert m.name.tolist() == ["a", "b"]


def test_rounded_end_and_next_start_are_not_nested():
    # ts 0.1 + dur 0.2 us ends at (0.1 + 0.2) * 1e-6 = 3.0000000000000004e-07 s, the next event
    # starts at 0.3 * 1e-6 = 3e-07 s: 4e-23 s apart, within the reader's 1 ps of slack
    ev = [_process(1, "/device:TPU:0"), _thread(1, 2, "XLA Ops"),
          {"ph": "X", "pid": 1, "tid": 2, "name": "a", "ts": 0.1, "dur": 0.2},
          {"ph": "X", "pid": 1, "tid": 2, "name": "b", "ts": 0.3, "dur": 0.1}]
    assert (0.1 + 0.2) * 1e-6 > 0.3 * 1e-6
    m = read_trace(ev, step_pattern=None, num_steps=1)
    assert m.name.tolist() == ["a", "b"]


def test_busy_time_is_the_union():
    busy = MeasuredTrace._busy
    assert busy([]) == 0.0
    assert busy([(2.0, 5.0)]) == 3.0
    assert busy([(0.0, 10.0), (2.0, 3.0)]) == 10.0            # nested: the parent only
    assert busy([(0.0, 4.0), (2.0, 6.0)]) == 6.0              # overlapping: [0, 6]
    assert busy([(5.0, 6.0), (0.0, 1.0)]) == 2.0              # unsorted, disjoint: 1 + 1
    assert busy([(0.0, 1.0), (1.0, 2.0)]) == 2.0              # touching
    assert busy([(0.0, 1.0), (3.0, 5.0), (4.0, 4.5), (3.0, 3.0)]) == 3.0   # 1 + [3, 5] 2
    assert busy([(1.0, 1.0)]) == 0.0                          # zero length
    # touching events are joined into one span [0.03, 0.84], whose length is 0.84 - 0.03
    # = 0.8099999999999999 in floats; their two lengths added would round to 0.81
    assert busy([(0.03, 0.43), (0.43, 0.84)]) == 0.84 - 0.03 != (0.43 - 0.03) + (0.84 - 0.43)


@pytest.mark.parametrize("lengths, expected", [
    ([7.0], 7.0),                       # one marker: its length
    ([4.0, 6.0], 5.0),                  # two: both, (4 + 6) / 2
    ([4.0, 6.0, 10.0], 6.0),            # three: the middle one only
    ([10.0, 10.0, 8.0, 10.0], 9.0),     # four: (10 + 8) / 2
    ([1.0, 2.0, 4.0, 8.0, 16.0], (2 + 4 + 8) / 3),
])
def test_step_time_leaves_out_first_and_last_from_three_markers(lengths, expected):
    ends = np.cumsum(lengths)
    ev = [_process(1, "/device:TPU:0"), _thread(1, 1, "Steps")]
    ev += [_x(1, 1, str(i), float(e - d), float(e)) for i, (d, e) in enumerate(zip(lengths, ends))]
    ds = read_trace(ev, time_unit="s").phase_times()
    assert float(ds["step_time"]) == pytest.approx(expected, rel=1e-12)
    assert ds["per_step"].shape == (len(lengths), 7)
    assert (ds["per_step"].values == 0).all() and (ds["measured"].values == 0).all()


@pytest.mark.parametrize("unit, seconds", [("us", 1e-6), ("ns", 1e-9), ("ms", 1e-3), ("s", 1.0)])
def test_time_units(unit, seconds):
    ev = [_process(1, "/device:TPU:0"), _thread(1, 1, "Steps"), _thread(1, 2, "XLA Ops"),
          _x(1, 1, "0", 0, 1000), _x(1, 1, "1", 1000, 2000), _x(1, 2, "fusion", 100, 350),
          {"ph": "B", "pid": 1, "tid": 2, "name": "fusion_grad", "ts": 1200}, {"ph": "E", "pid": 1, "tid": 2, "ts": 1300}]
    m = read_trace(ev, time_unit=unit)
    assert m.steps.ravel().tolist() == pytest.approx([0.0, 1000 * seconds, 1000 * seconds, 2000 * seconds], rel=1e-12)
    assert m.start.tolist() == pytest.approx([100 * seconds, 1200 * seconds], rel=1e-12)
    assert m.end.tolist() == pytest.approx([350 * seconds, 1300 * seconds], rel=1e-12)
    ds = m.phase_times()
    # tc_forward 250 units in step 0, none in step 1: (250 + 0) / 2; tc_backward (0 + 100) / 2
    assert float(ds["measured"].sel(phase="tc_forward")) == pytest.approx(125 * seconds, rel=1e-12)
    assert float(ds["measured"].sel(phase="tc_backward")) == pytest.approx(50 * seconds, rel=1e-12)
    assert float(ds["step_time"]) == pytest.approx(1000 * seconds, rel=1e-12)


def test_zero_length_and_missing_dur():
    ev = [_process(1, "/device:TPU:0"), _thread(1, 2, "XLA Ops"),
          {"ph": "X", "pid": 1, "tid": 2, "name": "no_dur", "ts": 5},
          {"ph": "X", "pid": 1, "tid": 2, "name": "zero", "ts": 7, "dur": 0}]
    m = read_trace(ev, time_unit="s", step_pattern=None, num_steps=1)
    assert m.name.tolist() == ["no_dur", "zero"]
    assert m.start.tolist() == [5.0, 7.0] and m.end.tolist() == [5.0, 7.0]


def test_every_bad_event_is_reported_in_order():
    ev = [{"ph": "X", "pid": 1, "tid": 1, "name": "a", "ts": "soon", "dur": 1},          # 0
          {"ph": "X", "pid": 1, "tid": 1, "name": "a", "ts": 0, "dur": -1},             # 1
          {"ph": "X", "pid": 1, "tid": 1, "name": "a", "ts": 0, "dur": "long"},         # 2
          {"ph": "X", "pid": True, "tid": 1, "name": "a", "ts": 0, "dur": 1},           # 3
          {"ph": "E", "pid": 3, "tid": 1, "ts": 3},                                     # 4
          {"ph": "B", "pid": 1, "tid": 2, "name": "a", "ts": 5},                        # 5
          {"ph": "B", "pid": 1, "tid": 2, "name": "b", "ts": 6},                        # 6
          {"ph": "E", "pid": 1, "tid": 2, "ts": 5.5},                                   # 7: closes b at 6
          {"ph": "B", "pid": 2, "tid": 1, "name": "c", "ts": 1}]                        # 8
    with pytest.raises(TraceError) as info:
        read_trace(ev, num_steps=1)
    assert info.value.problems == [
        "event 0: ts 'soon' is not a number",
        "event 1: dur -1 is not a number >= 0",
        "event 2: dur 'long' is not a number >= 0",
        "event 3: pid/tid True/1 must be integers or strings",
        "event 4: 'E' without a matching 'B' on pid 3 tid 1",
        "event 7: 'E' at 5.5 is before its 'B' at 6 on pid 1 tid 2",
        "1 'B' event(s) without 'E' on pid 1 tid 2",
        "1 'B' event(s) without 'E' on pid 2 tid 1",
    ]


def test_thread_ids_at_the_int64_bounds():
    def trace(pid):
        return [_process(pid, "/device:TPU:0"), _thread(pid, 2, "XLA Ops"), _x(pid, 2, "fusion", 0, 3)]

    for pid in (2**63 - 1, -2**63, "host-a"):
        m = read_trace(trace(pid), time_unit="s", step_pattern=None, num_steps=1)
        assert m.kind.tolist() == ["tc"] and m.end.tolist() == [3.0], pid
    for pid in (2**63, -2**63 - 1, 1.0):
        with pytest.raises(TraceError) as info:
            read_trace(trace(pid), step_pattern=None, num_steps=1)
        assert info.value.problems == [f"event 2: pid/tid {pid}/2 must be integers or strings"]
    # a name for a thread id that cannot be one is not used (its events were reported above)
    m = read_trace([_process(2**63, "/device:TPU:0"), _process(1, "/device:TPU:1"), _thread(1, 2, "XLA Ops"),
                    _x(1, 2, "fusion", 0, 3)], step_pattern=None, num_steps=1)
    assert m.chip.tolist() == [1]


def test_chip_and_unit_numbers():
    def trace(process):
        return [_process(1, process), _thread(1, 2, "XLA Ops"), _x(1, 2, "op", 0, 1)]

    m = read_trace(trace("TPU:123456789012345678 SparseCore 7"), step_pattern=None, num_steps=1)   # 18 digits
    assert (m.chip.tolist(), m.unit.tolist()) == ([123456789012345678], [7])
    with pytest.raises(TraceError, match="too long"):
        read_trace(trace("TPU:1234567890123456789 SparseCore 7"), step_pattern=None, num_steps=1)   # 19 digits
    # the message shows the first 20 digits of a 25-digit number
    with pytest.raises(TraceError) as info:
        read_trace(trace("TPU:1234567890123456789012345 SparseCore 7"), step_pattern=None, num_steps=1)
    assert info.value.problems == ["thread 'TPU:1234567890123456789012345 SparseCore 7 | XLA Ops': the chip or "
                                   "unit number 12345678901234567890... is too long to be one"]
    # \d also matches other scripts' digits: ARABIC-INDIC DIGIT THREE is no chip number
    with pytest.raises(TraceError, match="not a number"):
        read_trace(trace("TPU:\u0663 SparseCore 0"), step_pattern=None, num_steps=1)
    # the TensorCore pattern's unit group is optional: unit 0 without it
    m = read_trace(trace("TPU:4 TensorCore"), step_pattern=None, num_steps=1)
    assert (m.kind.tolist(), m.chip.tolist(), m.unit.tolist()) == (["tc"], [4], [0])
    m = read_trace(trace("TPU:4 TensorCore 1"), step_pattern=None, num_steps=1)
    assert (m.chip.tolist(), m.unit.tolist()) == ([4], [1])


def test_custom_patterns_unmapped_and_first_match():
    ev = _main_trace()["traceEvents"]
    m = read_trace(ev, time_unit="s", resource_patterns=[("tc", r"SparseCore (?P<unit>\d+)"), ("sc", r"SparseCore")],
                   phase_patterns=[("tc_backward", r"^tc:.*Grad"), ("tc_forward", r"^tc:SparseDenseMatmulOp$")])
    # the first resource pattern wins: every SparseCore thread is a 'tc' unit now, its chip 0
    assert set(m.kind.tolist()) == {"tc"} and set(m.chip.tolist()) == {0}
    # events of the TensorCore, ICI and host threads: no resource; the SparseCores' 'gather.1'
    # is nested, so only top-level names reach the phase patterns
    assert sorted(m.unknown_threads) == ["/device:TPU:0 | ICI links", "/device:TPU:0 | XLA Ops",
                                         "/host:CPU | main", "python3 | MainThread"]
    assert m.unmapped == {}
    # SparseCore threads' top-level events: 6 on (0, 0) thread 1, 1 on thread 2, 2 on (0, 1), 2 on (1, 0)
    assert len(m) == 11
    assert sorted(m.phase.tolist()) == ["tc_backward"] * 3 + ["tc_forward"] * 8
    only_fwd = read_trace(ev, time_unit="s", phase_patterns=[("sc_forward", r"^sc:SparseDenseMatmulOp$")])
    # 3 sc_backward events, 3 TensorCore, 2 ICI and 1 host event match no phase pattern
    assert only_fwd.unmapped == {"SparseDenseMatmulGradOp": 3, "fusion.1": 2, "fusion_grad": 1, "all-to-all": 1,
                                 "all-to-all-grad": 1, "preprocess": 1}
    ds = only_fwd.phase_times()
    assert ds.attrs["unmapped_events"] == 9
    assert repr(only_fwd) == "MeasuredTrace(8 mapped events, 4 steps, 9 unmapped, 1 unknown threads)"


def test_step_marker_thread_choice():
    # two step lines: the first by (str(pid), str(tid)); pid "10" sorts before pid "9"
    ev = [_process(9, "/device:TPU:0"), _thread(9, 1, "Steps"), _process(10, "/device:TPU:1"), _thread(10, 1, "Steps"),
          _x(9, 1, "0", 0, 4), _x(10, 1, "0", 0, 6), _x(10, 1, "1", 6, 8)]
    m = read_trace(ev, time_unit="s")
    assert m.steps.tolist() == [[0.0, 6.0], [6.0, 8.0]] and m.num_steps == 2
    # a compiled step pattern; an empty one means no markers
    m = read_trace(ev, time_unit="s", step_pattern=re.compile(r"TPU:0 \| Steps"))
    assert m.steps.tolist() == [[0.0, 4.0]]
    with pytest.raises(TraceError, match="pass num_steps"):
        read_trace(ev, step_pattern="")
    # two step lines of one process: the lower tid as text, whichever comes first in the file
    ev = [_process(4, "/device:TPU:0"), _thread(4, 2, "Step"), _thread(4, 1, "Steps"),
          _x(4, 2, "0", 0, 3), _x(4, 1, "0", 0, 5)]
    assert read_trace(ev, time_unit="s").steps.tolist() == [[0.0, 5.0]]
    assert read_trace(ev, step_pattern="", num_steps=3).steps.shape == (0, 2)


def test_num_steps_bounds():
    ev = [_process(1, "/device:TPU:0"), _thread(1, 2, "XLA Ops"), _x(1, 2, "op", 0, 1)]
    for n in (1, 2**31):
        assert read_trace(ev, step_pattern=None, num_steps=n).num_steps == n
    for n in (0, 2**31 + 1, True, 2.0, -1):
        with pytest.raises(ConfigError) as info:
            read_trace(ev, step_pattern=None, num_steps=n)
        assert str(info.value).startswith("num_steps must be an integer from 1 to 2,147,483,648, got ")


def test_option_checks():
    ev = [_process(1, "/device:TPU:0"), _thread(1, 2, "XLA Ops"), _x(1, 2, "op", 0, 1)]
    ok = {"step_pattern": None, "num_steps": 1}
    with pytest.raises(ConfigError, match="unknown kind 'gpu'"):
        read_trace(ev, resource_patterns=[("gpu", "x")], **ok)
    for bad in ("sc", {"sc": "x"}, 5):
        with pytest.raises(ConfigError, match="resource patterns must be a list"):
            read_trace(ev, resource_patterns=bad, **ok)
    for bad in ([("sc",)], [(1, "x")], [("sc", 3)], [("sc", re.compile(b"x"))], [("sc", "(")]):
        with pytest.raises(ConfigError, match="bad resource pattern"):
            read_trace(ev, resource_patterns=bad, **ok)
    for bad in (3, re.compile(b"Steps")):
        with pytest.raises(ConfigError, match="step_pattern must be"):
            read_trace(ev, step_pattern=bad, num_steps=1)
    for bad in (1, None, "yes"):
        with pytest.raises(ConfigError, match="top_level_only"):
            read_trace(ev, top_level_only=bad, **ok)
    assert len(read_trace(ev, top_level_only=np.bool_(False), **ok)) == 1
    for bad in (None, "sec", 1e-6):
        with pytest.raises(ConfigError, match="time_unit must be"):
            read_trace(ev, time_unit=bad, **ok)
    # compiled regexes are accepted as patterns
    m = read_trace(ev, resource_patterns=[("ici", re.compile(r"TPU:(?P<chip>\d+)"))], **ok)
    assert m.kind.tolist() == ["ici"] and m.phase.tolist() == ["ici_forward"]


def test_sources(tmp_path):
    ev = [_process(1, "/device:TPU:0"), _thread(1, 2, "XLA Ops"), _x(1, 2, "op", 0, 1)]
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps({"traceEvents": ev}))
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(json.dumps(ev).encode()))
    for source in (ev, {"traceEvents": ev}, plain, str(plain), packed):
        m = read_trace(source, step_pattern=None, num_steps=1)
        assert m.end.tolist() == [1e-6], source
    # any other suffix, or none, is plain JSON
    for name in ("trace", "trace.dat", "trace.c"):
        (tmp_path / name).write_text(json.dumps(ev))
        assert read_trace(tmp_path / name, step_pattern=None, num_steps=1).end.tolist() == [1e-6], name
    # gzip is chosen by the .gz suffix: the same bytes named .json are no JSON text
    renamed = tmp_path / "packed.json"
    renamed.write_bytes(packed.read_bytes())
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(renamed, step_pattern=None, num_steps=1)
    with pytest.raises(TraceError, match="'traceEvents' list"):
        read_trace({"traceEvents": {"a": 1}}, step_pattern=None, num_steps=1)
    with pytest.raises(TraceError, match="got int"):
        read_trace(5, step_pattern=None, num_steps=1)
    # events that are not objects or carry another ph, metadata without args or for an id that
    # cannot be one (a list cannot key a name), all before the real events, are passed over
    junk = ["x", {"ph": "C", "pid": 1, "tid": 2, "ts": 0}, {"ph": 7},
            {"ph": "M", "pid": 1, "tid": 0, "name": "process_name"},
            {"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": None},
            {"ph": "M", "pid": [1], "tid": 0, "name": "process_name", "args": {"name": "TPU:3"}},
            {"ph": "M", "pid": 1, "tid": {}, "name": "thread_name", "args": {"name": "SparseCore 2"}}]
    m = read_trace(junk + ev, step_pattern=None, num_steps=1)
    assert (m.kind.tolist(), m.chip.tolist(), m.end.tolist()) == (["tc"], [0], [1e-6])


def _model(**kw):
    topo = scwork.Topology.for_chip("v5p", num_chips=1)
    return step_model(expected_stats({"t": 8.0}, topo, batch_size=256), widths={"t": 32}, topology=topo,
                      tc_forward_s=5e-5, **kw)


def test_compare_values():
    model = _model()
    measured = read_trace(_main_trace(), time_unit="s")
    for source in (measured, _main_trace()):
        ds = compare(model, source) if source is measured else compare(model, read_trace(source, time_unit="s"))
        meas = {"host": 0.5 / 4, "sc_forward": 11 / 4, "ici_forward": 1 / 4, "tc_forward": 5 / 4,
                "tc_backward": 1.5 / 4, "ici_backward": 0.5 / 4, "sc_backward": 10 / 4, "step": 9.0}
        assert list(ds["phase"].values) == list(PHASES) + ["step"]
        assert dict(zip(ds["phase"].values, ds["measured"].values.tolist())) == meas
        modelled = {**model.phase_time, "step": model.step_time}
        assert dict(zip(ds["phase"].values, ds["modelled"].values.tolist())) == modelled
        for p in meas:
            if modelled[p] > 0:
                assert float(ds["ratio"].sel(phase=p)) == meas[p] / modelled[p], p
            else:       # this model sends nothing over ICI
                assert math.isnan(float(ds["ratio"].sel(phase=p))), p
            assert float(ds["difference"].sel(phase=p)) == meas[p] - modelled[p], p
        assert ds.attrs == {"num_steps": 4, "unmapped_events": 0, "schedule": "pipelined"}
    assert model.phase_time["ici_forward"] == 0.0 and model.phase_time["sc_forward"] > 0


def test_compare_schedule_and_checks():
    model = _model()
    measured = read_trace(_main_trace(), time_unit="s")
    seq = compare(model, measured, schedule="sequential")
    assert float(seq["modelled"].sel(phase="step")) == model.sequential_step_time
    assert seq.attrs["schedule"] == "sequential"
    pipe = compare(model, measured, schedule="pipelined")
    assert float(pipe["modelled"].sel(phase="step")) == model.pipelined_step_time
    assert model.sequential_step_time != model.pipelined_step_time
    unpiped = _model(pipelining=False)
    ds = compare(unpiped, measured)
    assert ds.attrs["schedule"] == "sequential"
    assert float(ds["modelled"].sel(phase="step")) == unpiped.sequential_step_time
    with pytest.raises(ConfigError, match="schedule must be"):
        compare(model, measured, schedule="fast")
    with pytest.raises(ConfigError, match="needs a StepModel, got MeasuredTrace"):
        compare(measured, measured)
    # a trace read with the defaults (us): read_trace is applied to anything not yet read
    ds = compare(model, _main_trace())
    assert float(ds["measured"].sel(phase="step")) == pytest.approx(9e-6, rel=1e-12)


def test_only_name_metadata_names_threads():
    # XProf and Chrome write other metadata beside the names (sort indices, labels), and an
    # op may itself be called "process_name": none of them renames a process or a thread
    ev = [_process(1, "/device:TPU:0"), _thread(1, 2, "XLA Ops"),
          {"ph": "M", "pid": 1, "tid": 2, "name": "thread_sort_index", "args": {"sort_index": 3}},
          {"ph": "M", "pid": 1, "tid": 2, "name": "process_sort_index", "args": {"sort_index": 1}},
          {"ph": "M", "pid": 1, "tid": 0, "name": "process_labels", "args": {"labels": "TPU v5p"}},
          {"ph": "X", "pid": 1, "tid": 2, "name": "process_name", "ts": 0, "dur": 2,
           "args": {"name": "TPU:7 SparseCore 3"}},
          {"ph": "C", "pid": 1, "tid": 2, "name": "thread_name", "ts": 0, "args": {"name": "Steps"}}]
    m = read_trace(ev, time_unit="s", num_steps=1)
    assert m.steps.shape == (0, 2) and m.unknown_threads == []
    assert (m.kind.tolist(), m.chip.tolist(), m.unit.tolist(), m.phase.tolist(), m.end.tolist()) == (
        ["tc"], [0], [0], ["tc_forward"], [2.0])


def test_same_unit_number_on_two_chips_is_two_units():
    # SparseCore 0 of chip 0 busy [0, 2], SparseCore 0 of chip 1 busy [3, 5], both in step 0:
    # the busiest unit is busy 2 s (not their union, 4 s); with markers and without
    ev = [_process(1, "/device:TPU:0"), _thread(1, 1, "Steps"), _x(1, 1, "0", 0, 10),
          _process(5, "TPU:0 SparseCore 0"), _thread(5, 1, "XLA Ops"), _x(5, 1, "op", 0, 2),
          _process(6, "TPU:1 SparseCore 0"), _thread(6, 1, "XLA Ops"), _x(6, 1, "op", 3, 5)]
    assert float(read_trace(ev, time_unit="s").phase_times()["measured"].sel(phase="sc_forward")) == 2.0
    no_markers = read_trace(ev, time_unit="s", step_pattern=None, num_steps=1)
    assert float(no_markers.phase_times()["measured"].sel(phase="sc_forward")) == 2.0
    # and chip 0's SparseCores 0 and 1 ([0, 2] and [3, 5]) likewise
    ev[6:8] = [_process(6, "TPU:0 SparseCore 1"), _thread(6, 1, "XLA Ops")]
    assert float(read_trace(ev, time_unit="s").phase_times()["measured"].sel(phase="sc_forward")) == 2.0


def test_parent_and_child_starting_at_zero():
    # the child [0, 1] is listed before its parent [0, 3]: the parent, the longer, is the top-level one
    ev = [_process(1, "/device:TPU:0"), _thread(1, 2, "XLA Ops"), _x(1, 2, "child", 0, 1), _x(1, 2, "parent", 0, 3)]
    m = read_trace(ev, time_unit="s", step_pattern=None, num_steps=1)
    assert m.name.tolist() == ["parent"] and m.end.tolist() == [3.0]


def test_events_in_gaps_between_steps():
    # steps [0, 2] and [4, 6]; an event belongs to the step it starts in, end excluded
    ev = [_process(1, "/device:TPU:0"), _thread(1, 1, "Steps"), _thread(1, 2, "XLA Ops"),
          _x(1, 1, "0", 0, 2), _x(1, 1, "1", 4, 6)]
    starts = [-1.0, 0.0, 1.5, 2.0, 3.0, 4.0, 5.5, 6.0, 7.0]
    ev += [_x(1, 2, f"op{i}", t, t + 0.25) for i, t in enumerate(starts)]
    m = read_trace(ev, time_unit="s")
    assert dict(zip(m.start.tolist(), m.step.tolist())) == {
        -1.0: -1, 0.0: 0, 1.5: 0, 2.0: -1, 3.0: -1, 4.0: 1, 5.5: 1, 6.0: -1, 7.0: -1}
    # 2 events of 0.25 s in each step
    assert m.phase_times()["per_step"].sel(phase="tc_forward").values.tolist() == [0.5, 0.5]


def test_no_markers_step_time_is_nan_without_a_warning():
    ev = [_process(1, "/device:TPU:0"), _thread(1, 2, "XLA Ops"), _x(1, 2, "op", 0, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # numpy's "Mean of empty slice" would be one
        ds = read_trace(ev, step_pattern=None, num_steps=2).phase_times()
    assert math.isnan(float(ds["step_time"]))
    assert float(ds["measured"].sel(phase="tc_forward")) == pytest.approx(0.5e-6, rel=1e-12)   # 1 us / 2 steps
    # phases without a single event: 0 s, not NaN nor negative
    assert ds["measured"].drop_sel(phase="tc_forward").values.tolist() == [0.0] * 6
