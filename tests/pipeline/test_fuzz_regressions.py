"""Regression tests for root causes the memory/pipeline fuzz suite (tests/fuzz/test_fuzz_memory_pipeline.py) found."""

from __future__ import annotations

import json

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError, TraceError
from scwork.pipeline import (
    expected_stats,
    read_trace,
    step_model,
    to_chrome_trace,
    validate_chrome_trace,
)

TOPO = scwork.Topology.for_chip("v5p", num_chips=2)


@pytest.fixture(scope="module")
def trace():
    stats = expected_stats({"user": 12.0, "item": 4.0}, TOPO, batch_size=2048)
    model = step_model(stats, widths={"user": 64, "item": 16}, topology=TOPO, tc_forward_s=2e-4, num_steps=3)
    return to_chrome_trace(model)


def test_num_minibatches_is_bounded_before_allocating():
    # (num_minibatches, stack, device, sc, partition) counts: 2**40 asked for 384 TiB.
    stats = expected_stats({"user": 12.0}, TOPO, batch_size=2048)
    with pytest.raises(ConfigError, match="MAX_MINIBATCHES=64"):
        step_model(stats, widths=64, topology=TOPO, num_minibatches=2**40)
    assert step_model(stats, widths=64, topology=TOPO, num_minibatches=64).step_time > 0


def test_expected_stats_checks_topology_fractions_rates_and_names():
    with pytest.raises(ConfigError, match="topology must be a scwork.Topology"):
        expected_stats({"a": 1.0}, 1j, batch_size=8)
    with pytest.raises(ConfigError, match="unique_fraction"):
        expected_stats({"a": 1.0}, TOPO, batch_size=8, unique_fraction="")
    with pytest.raises(ConfigError, match="beyond int64 counts"):
        expected_stats({"a": 1e300}, TOPO, batch_size=8)     # OverflowError in np.full before
    with pytest.raises(ConfigError, match="keys must be stack names"):
        expected_stats({1: 1.0}, TOPO, batch_size=8)         # KeyError before
    with pytest.raises(ConfigError, match="about 5000 digits"):
        expected_stats({"a": 10**5000}, TOPO, batch_size=8)


def test_read_trace_checks_options(trace):
    with pytest.raises(ConfigError, match="patterns must be a list"):
        read_trace(trace, phase_patterns=3)
    with pytest.raises(ConfigError, match="bad phase pattern"):
        read_trace(trace, phase_patterns=[("sc_forward", b"sc")])     # TypeError when matching before
    with pytest.raises(ConfigError, match="step_pattern must be a regular expression"):
        read_trace(trace, step_pattern=b"Steps")
    with pytest.raises(ConfigError, match="time_unit"):
        read_trace(trace, time_unit=["us"])
    with pytest.raises(ConfigError, match="num_steps must be an integer from 1"):
        read_trace(trace, step_pattern=None, num_steps=10**12)


def test_read_trace_survives_names_and_ids_that_cannot_be_printed(trace):
    events = json.loads(json.dumps(trace))["traceEvents"]
    for event in events:
        if event.get("ph") == "X":
            event["name"] = 10**5000                      # str() of it raised ValueError
            break
    events.append({"ph": "X", "pid": 10**5000, "tid": 1, "ts": 0, "dur": 1, "name": "x"})
    with pytest.raises(TraceError, match="about 5000 digits"):
        read_trace({"traceEvents": events})
    measured = read_trace({"traceEvents": events[:-1]})
    assert measured.num_steps == 3
    # without markers the step count only divides the busy time: no (num_steps x phases) array
    no_markers = read_trace({"traceEvents": events[:-1]}, step_pattern=None, num_steps=2**31)
    assert np.isfinite(no_markers.phase_times()["measured"].values).all()


def test_validate_chrome_trace_reports_odd_ids_instead_of_failing(trace):
    events = json.loads(json.dumps(trace))["traceEvents"]
    events[0]["ph"] = {"X": 1}
    events[1]["pid"] = {"a": 1}
    flow = next(e for e in events if e.get("ph") == "s")
    flow["id"] = [1]
    events.append({"ph": "X", "pid": 1, "tid": 1, "ts": 10**5000, "dur": 1, "name": "x"})
    with pytest.raises(TraceError) as info:
        validate_chrome_trace({"traceEvents": events})
    text = "\n".join(info.value.problems)
    assert "unknown ph" in text and "pid must be an integer" in text and "flow id must be" in text
    assert "ts must be a finite number" in text
    with pytest.raises(ConfigError, match="tolerance_us"):
        validate_chrome_trace(trace, tolerance_us=b"1")
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    deep = {"traceEvents": [], "otherData": nested}      # json.dumps raised RecursionError
    with pytest.raises(TraceError, match="nested too deeply"):
        validate_chrome_trace(deep)


def test_huge_integers_and_odd_flags_give_typed_errors(trace):
    with pytest.raises(ConfigError, match="hot_partition must be .*got an integer of about 5000 digits"):
        expected_stats({"a": 1.0}, TOPO, batch_size=8, hot_partition=10**5000)
    with pytest.raises(ConfigError, match="top_level_only must be True or False"):
        read_trace(trace, top_level_only=np.array([]))
    events = json.loads(json.dumps(trace))["traceEvents"]
    counter = next(e for e in events if e.get("ph") == "C")
    counter["name"] = 10**5000                                   # str() of it raised ValueError
    with pytest.raises(TraceError, match="name must be a string"):
        validate_chrome_trace({"traceEvents": events})


def test_odd_dtype_and_flow_binding_are_reported(trace):
    stats = expected_stats({"a": 12.0}, TOPO, batch_size=2048)
    with pytest.raises(ConfigError, match="dtype must be one of"):
        step_model(stats, widths=64, topology=TOPO, dtype=[])              # unhashable before
    events = json.loads(json.dumps(trace))["traceEvents"]
    flow_end = next((e for e in events if e.get("ph") == "f"), None)
    assert flow_end is not None, "the exported trace has flow events (mini-batch and step arrows)"
    flow_end["bp"] = np.array([])                                          # ambiguous truth value before
    summary_or_error = None
    try:
        summary_or_error = validate_chrome_trace({"traceEvents": events})
    except TraceError as error:
        summary_or_error = error
    assert "bp='e'" in str(summary_or_error)


def test_read_trace_skips_events_whose_ph_is_not_text(trace):
    events = json.loads(json.dumps(trace))["traceEvents"]
    events[0]["ph"] = np.array([], np.int8)      # '==' on it raised "truth value of an empty array" before
    read_trace({"traceEvents": events})
