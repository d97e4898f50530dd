"""read_jax_profile on small traces written out here: what it maps, and what it counts but does not map."""

from __future__ import annotations

from scwork.interop.profile import read_jax_profile


def _meta(pid, process, threads):
    out = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process}}]
    out += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
            for tid, name in threads.items()]
    return out


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
