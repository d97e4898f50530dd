"""read_jax_profile / find_profile at their edges: bounds, bad events, which run and step line.

Survivors of the mutation run of scwork/interop/profile.py: no test pinned the default
bounds, which run of a logdir is read, the size check at max_bytes, how bad events are
reported (all of them, the first 20 listed, pid before tid), an 'E' closing the
innermost 'B', which of two device step lines is used, or the log ratio of a phase
neither modelled nor measured. Also: events no rule maps are counted one by one.
"""

from __future__ import annotations

import errno
import os

import pytest

from scwork.errors import TraceError
from scwork.interop.profile import DEFAULT_MAX_BYTES, DEFAULT_MAX_EVENTS, find_profile, read_jax_profile


def test_default_bounds():
    # 512 MiB of file or JSON text, five million events (the documented defaults)
    assert DEFAULT_MAX_BYTES == 536_870_912 and DEFAULT_MAX_EVENTS == 5_000_000


def _bad(events, **kw):
    with pytest.raises(TraceError) as info:
        read_jax_profile(events, num_steps=1, steps=None, **kw)
    return info.value.problems


def test_every_bad_event_is_reported_in_order():
    events = [{"ph": "X", "pid": True, "tid": 1, "ts": 0, "dur": 1, "name": "a"},      # bool pid
              {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": -1, "name": "b"},        # negative dur
              {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": float("nan"), "name": "c"},
              {"ph": "E", "pid": 1, "tid": 2, "ts": 5},                                # E without B
              {"ph": "X", "pid": 1, "tid": 1, "ts": float("inf"), "dur": 1, "name": "d"}]
    assert _bad(events) == ["event 0: pid/tid True/1 must be integers or strings",
                            "event 1: dur -1 is not a number >= 0",
                            "event 2: dur nan is not a number >= 0",
                            "event 3: 'E' without a matching earlier 'B' on pid 1 tid 2",
                            "event 4: ts inf is not a finite number"]


def test_zero_duration_is_fine_and_E_closes_the_innermost_B():
    # B at 0, B at 10, E at 5: the E would close the inner B (opened at 10) before it opened
    problems = _bad([{"ph": "B", "pid": 3, "tid": 4, "ts": 0, "name": "outer"},
                     {"ph": "B", "pid": 3, "tid": 4, "ts": 10, "name": "inner"},
                     {"ph": "E", "pid": 3, "tid": 4, "ts": 5},
                     {"ph": "X", "pid": 3, "tid": 4, "ts": 0, "dur": 0, "name": "zero"}])
    assert problems[0] == "event 2: 'E' without a matching earlier 'B' on pid 3 tid 4"
    assert problems[1:] == ["2 'B' event(s) without 'E' on pid 3 tid 4"]


@pytest.mark.parametrize("count,listed", [(20, 20), (21, 21), (23, 21)])
def test_problems_are_cut_at_20_with_a_count_of_the_rest(count, listed):
    problems = _bad([{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": -1, "name": "x"}] * count)
    assert len(problems) == listed
    assert problems[19] == "event 19: dur -1 is not a number >= 0"
    if count > 20:
        assert problems[20] == f"... and {count - 20} more"


def test_the_newest_run_of_a_logdir_is_read(tmp_path):
    runs = tmp_path / "plugins" / "profile"
    for name, mtime in (("2026_11_27_10_00_00", 1_000_000), ("2026_11_27_09_00_00", 2_000_000)):
        (runs / name).mkdir(parents=True)
        (runs / name / "host.trace.json.gz").write_bytes(b"")
        os.utime(runs / name, (mtime, mtime))
    assert find_profile(tmp_path) == runs / "2026_11_27_09_00_00" / "host.trace.json.gz"   # newer by mtime


def test_a_file_over_max_bytes_is_refused_one_at_it_is_read(tmp_path):
    path = tmp_path / "t.trace.json"
    path.write_text('{"traceEvents": []}')             # 19 bytes
    with pytest.raises(TraceError, match="is 19 bytes, more than max_bytes=18"):
        read_jax_profile(path, max_bytes=18, steps=None, num_steps=1)
    at_bound = read_jax_profile(path, max_bytes=19, steps=None, num_steps=1)      # read, nothing mapped
    assert len(at_bound.name) == 0 and at_bound.unmapped == {}


def test_paths_in_messages_are_cut_to_200_characters(tmp_path):
    missing = tmp_path / ("m" * 100) / ("m" * 100) / ("m" * 100)
    with pytest.raises(TraceError) as info:
        find_profile(missing)
    assert info.value.problems[0].startswith(f"no profile at {str(missing)[:200]!r}: ")
    too_long = "n" * 5000                               # longer than any file name: OSError
    with pytest.raises(TraceError) as info:
        find_profile(too_long)
    # the reason in words (strerror), not the OSError with the whole name again
    assert info.value.problems[0] == f"cannot look at {too_long[:200]!r}: {os.strerror(errno.ENAMETOOLONG)}"


def _meta(pid, process, threads):
    out = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process}}]
    out += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
            for tid, name in threads.items()]
    return out


def test_first_device_step_line_by_name_is_used():
    # two TPUs with a Steps line each; TPU:0 sorts first and has 2 steps, TPU:1 has 3
    events = _meta(2, "/device:TPU:1", {1: "Steps"}) + _meta(1, "/device:TPU:0", {1: "Steps"})
    events += [{"ph": "X", "pid": 1, "tid": 1, "name": str(i), "ts": 100 * i, "dur": 90} for i in range(2)]
    events += [{"ph": "X", "pid": 2, "tid": 1, "name": str(i), "ts": 50 * i, "dur": 40} for i in range(3)]
    m = read_jax_profile(events, steps="device")
    assert len(m.steps) == 2


def test_a_phase_neither_modelled_nor_measured_has_log_ratio_0():
    """One chip: the model has no ICI time; the profile below has one forward all-to-all
    and no backward one, so ICI backward is 0 against 0: log ratio 0 (not NaN), divergence 0."""
    import scwork
    from scwork.interop.profile import overlay
    from scwork.pipeline import expected_stats, step_model

    topo = scwork.Topology.for_chip("v5p", num_chips=1)
    model = step_model(expected_stats({"user": 12.0}, topo, batch_size=2048), widths={"user": 64},
                       topology=topo, tc_forward_s=2e-4, tc_backward_s=4e-4, pipelining=False)
    assert model.phase_time["ici_forward"] == 0 and model.phase_time["ici_backward"] == 0
    events = _meta(1, "/device:TPU:0", {1: "Steps", 2: "XLA Ops"}) + [
        {"ph": "X", "pid": 1, "tid": 1, "name": "0", "ts": 0, "dur": 1000},
        {"ph": "X", "pid": 1, "tid": 2, "name": "fusion.5", "ts": 10, "dur": 200},
        {"ph": "X", "pid": 1, "tid": 2, "name": "all-to-all.3", "ts": 300, "dur": 50}]
    ov = overlay(model, events)
    phase = "ici_backward"
    assert float(ov["modelled"].sel(phase=phase)) == 0 and float(ov["measured"].sel(phase=phase)) == 0
    assert float(ov["log_ratio"].sel(phase=phase)) == 0.0 and float(ov["divergence"].sel(phase=phase)) == 0.0
    # measured but not modelled: +inf; one event is enough to count as observed
    assert float(ov["log_ratio"].sel(phase="ici_forward")) == float("inf")
    assert int(ov["events"].sel(phase="tc_forward")) == 1 and bool(ov["observed"].sel(phase="tc_forward"))
    assert not bool(ov["observed"].sel(phase="ici_backward"))


def test_bounds_of_one_are_accepted():
    events = [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "name": "a"}]
    m = read_jax_profile(events, steps=None, num_steps=1, max_events=1, max_bytes=1)
    assert len(m.name) == 0 and m.unmapped == {}
    with pytest.raises(TraceError, match="more than max_events=1"):
        read_jax_profile(events * 2, steps=None, num_steps=1, max_events=1)


TC = [("tc", r"TPU:(?P<chip>\d+) \| XLA Ops$", "")]


def test_bad_pid_reported_on_B_and_E_not_on_metadata():
    events = [{"ph": "M", "pid": [1], "name": "process_name", "args": {"name": "x"}},     # skipped
              {"ph": "B", "pid": 1.5, "tid": 1, "ts": 0, "name": "b"},
              {"ph": "E", "pid": None, "tid": False, "ts": 1}]
    assert _bad(events) == ["event 1: pid/tid 1.5/1 must be integers or strings",
                            "event 2: pid/tid None/False must be integers or strings"]


def test_names_qualified_once_and_other_metadata_kept_apart():
    """qualify_names: '<hlo_module>/<name> [<tf_op>]', without repeating what the name has and
    without empty parts; 'process_labels' / 'thread_labels' records rename nothing. An X event
    without 'dur' lasts 0."""
    events = _meta(1, "/device:TPU:0", {2: "XLA Ops"}) + [
        {"ph": "M", "pid": 1, "name": "process_labels", "args": {"labels": "v5p"}},
        {"ph": "M", "pid": 1, "tid": 2, "name": "thread_labels", "args": {"labels": "ops"}},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 0, "dur": 5, "name": "fusion.1",
         "args": {"hlo_module": "mod", "tf_op": "jit(f)/dot"}},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 10, "dur": 5, "name": "mod/fusion.2", "args": {"hlo_module": "mod"}},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 20, "dur": 5, "name": "fusion.3",
         "args": {"hlo_module": "", "tf_op": "fusion"}},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 30, "name": "copy.4", "args": {"tf_op": ""}}]
    m = read_jax_profile(events, patterns=TC, qualify_names=True, steps=None, num_steps=1)
    assert [str(n) for n in m.name] == ["mod/fusion.1 [jit(f)/dot]", "mod/fusion.2", "fusion.3", "copy.4"]
    assert [float(e - s) for s, e in zip(m.start, m.end)] == pytest.approx([5e-6, 5e-6, 5e-6, 0.0], abs=1e-12)


def test_entries_that_are_not_events_are_skipped_not_the_rest():
    assert _bad(["not an event", 7, {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": -2, "name": "x"}]) == [
        "event 2: dur -2 is not a number >= 0"]


def test_unmapped_events_are_counted_one_by_one():
    # one TensorCore op line whose rule takes only "fusion" ops: 3 waits and 1 executor
    # marker on it are counted in unmapped, each once; the fusion is mapped
    events = _meta(1, "/device:TPU:0", {1: "Steps", 2: "XLA Ops"}) + [
        {"ph": "X", "pid": 1, "tid": 1, "name": "0", "ts": 0, "dur": 100},
        {"ph": "X", "pid": 1, "tid": 2, "name": "fusion.1", "ts": 0, "dur": 10},
        {"ph": "X", "pid": 1, "tid": 2, "name": "wait", "ts": 10, "dur": 1},
        {"ph": "X", "pid": 1, "tid": 2, "name": "wait", "ts": 20, "dur": 1},
        {"ph": "X", "pid": 1, "tid": 2, "name": "wait", "ts": 30, "dur": 1},
        {"ph": "X", "pid": 1, "tid": 2, "name": "end: dot", "ts": 40, "dur": 1},
    ]
    m = read_jax_profile(events, patterns=[("tc", r"TPU:(?P<chip>\d+) \| XLA Ops$", r"^fusion")])
    assert m.unmapped == {"wait": 3, "end: dot": 1}
    assert [str(n) for n in m.name] == ["fusion.1"]
    assert m.unknown_threads == []
