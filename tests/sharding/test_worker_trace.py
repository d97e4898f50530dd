"""The real-thread trace behind ``bench_sharding.py --trace``: what it records, and its arithmetic."""

from __future__ import annotations

import time

import pytest

import scwork
from scwork.sharding import _threads, _trace, compute_stats, preprocess
from scwork.sharding._synthetic import synthetic_batch
from scwork.sharding._trace import BatchTrace, summary, traced


def test_summary_of_a_hand_made_batch():
    # 3 workers over 0..10 s: worker 0 runs 0-4 and 6-10 (gap 2), worker 1 starts at 1 and
    # runs 1-3 only, worker 2 runs nothing
    b = BatchTrace("x", workers=3, start=0.0, end=10.0, tasks=[(1, 1.0, 3.0), (0, 0.0, 4.0), (0, 6.0, 10.0)])
    s = summary(b)
    assert s["span_s"] == 10.0 and s["busy_s"] == 10.0
    assert s["utilisation"] == pytest.approx(10.0 / 30.0)
    assert s["ramp_s"] == pytest.approx(0.5)            # (0 + 1) / 2 workers that ran a task
    assert s["gap_s"] == pytest.approx(2.0)             # one gap, worker 0's
    assert s["tail_s"] == pytest.approx(7.0)            # worker 1 ran dry at 3
    assert s["idle_workers"] == 1 and s["tasks"] == 3


def test_summary_of_a_batch_without_tasks():
    s = summary(BatchTrace("x", workers=2, start=1.0, end=1.5))
    assert s["busy_s"] == 0.0 and s["utilisation"] == 0.0 and s["tail_s"] == 0.5 and s["idle_workers"] == 2


def test_run_tasks_records_every_task_once_with_its_worker():
    def task(item, worker):
        time.sleep(0.001)
        return item * 2

    with traced() as batches:
        out = _threads._run_tasks(task, list(range(12)), [1] * 12, 3, "demo")
    assert out == [2 * i for i in range(12)]
    assert len(batches) == 1
    b = batches[0]
    assert b.name == "demo" and b.workers == 3 and len(b.tasks) == 12
    assert all(0 <= w < 3 and b.start <= t0 <= t1 <= b.end for w, t0, t1 in b.tasks)
    busy = sum(t1 - t0 for _, t0, t1 in b.tasks)
    assert busy >= 12 * 0.001
    assert 0.0 < summary(b)["utilisation"] <= 1.0
    assert _trace.sink() is None                         # off again after the block


def test_one_thread_and_outside_the_block_record_nothing():
    with traced() as batches:
        _threads._run_tasks(lambda x, w: x, [1, 2, 3], [1, 1, 1], 1)
    assert batches == []
    _threads._run_tasks(lambda x, w: x, [1, 2, 3], [1, 1, 1], 2)   # no sink: nothing to append to
    assert _trace.sink() is None


def test_traced_engine_calls_give_the_same_results():
    batch, feats = synthetic_batch(batch_size=512, num_features=6, vocab_size=5000, seed=3)
    topo = scwork.Topology(2, 2)
    plain = preprocess(batch, feats, topo, None, num_threads=3)
    stats = compute_stats(batch, feats, topo, None, num_threads=3)
    with traced() as batches:
        got = preprocess(batch, feats, topo, None, num_threads=3)
        got_stats = compute_stats(batch, feats, topo, None, num_threads=3)
    assert got.stats.equals(plain.stats) and got_stats.equals(stats)
    names = [b.name for b in batches]
    assert "slices" in names and all(b.workers <= 3 for b in batches)
    assert all(len(b.tasks) >= 1 for b in batches)


def test_nested_blocks_restore_the_outer_record():
    with traced() as outer:
        with traced() as inner:
            _threads._run_tasks(lambda x, w: x, [1, 2], [1, 1], 2, "in")
        _threads._run_tasks(lambda x, w: x, [1, 2], [1, 1], 2, "out")
    assert [b.name for b in inner] == ["in"] and [b.name for b in outer] == ["out"]
