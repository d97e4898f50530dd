"""A B/E pair with equal timestamps is a span of length 0: both trace readers accept it.

The Trace Event Format lets an op begin and end at the same microsecond (a profiler's
clock resolution, or an op too short to measure). Such a pair is valid; only an 'E'
strictly before its 'B' is an error. Both readers are checked: scwork.interop's
jax.profiler reader and scwork.pipeline's generic trace reader.
"""

from __future__ import annotations

import pytest

from scwork.errors import TraceError
from scwork.interop.profile import read_jax_profile
from scwork.pipeline.trace import read_trace


def _meta(pid, process, threads):
    out = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process}}]
    out += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
            for tid, name in threads.items()]
    return out


def _events(zero_at=10, end_of_second=50):
    return _meta(1, "/device:TPU:0", {1: "Steps", 2: "XLA Ops"}) + [
        {"ph": "X", "pid": 1, "tid": 1, "name": "0", "ts": 0, "dur": 100},
        {"ph": "B", "pid": 1, "tid": 2, "name": "fusion.5", "ts": zero_at},
        {"ph": "E", "pid": 1, "tid": 2, "ts": zero_at},
        {"ph": "B", "pid": 1, "tid": 2, "name": "fusion.6", "ts": 20},
        {"ph": "E", "pid": 1, "tid": 2, "ts": end_of_second},
    ]


@pytest.mark.parametrize("reader", [read_jax_profile, read_trace], ids=["interop", "pipeline"])
def test_zero_length_pair_is_a_span_of_length_zero(reader):
    m = reader(_events())
    spans = {str(n): (float(s), float(e)) for n, s, e in zip(m.name, m.start, m.end)}
    assert sorted(spans) == ["fusion.5", "fusion.6"]
    # microseconds to seconds: fusion.5 [10, 10] us (length 0), fusion.6 [20, 50] us
    assert spans["fusion.5"][0] == pytest.approx(10e-6)
    assert spans["fusion.5"][1] - spans["fusion.5"][0] == 0.0
    assert spans["fusion.6"] == pytest.approx((20e-6, 50e-6))


@pytest.mark.parametrize("reader", [read_jax_profile, read_trace], ids=["interop", "pipeline"])
def test_end_before_begin_is_an_error(reader):
    with pytest.raises(TraceError):
        reader(_events(end_of_second=19))
