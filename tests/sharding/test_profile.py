"""The profiling mode behind ``bench_sharding.py --project``: same results, sound arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork.sharding import compute_stats, minibatch, preprocess
from scwork.sharding._profile import CallProfile, lpt_makespan, profiled
from scwork.sharding._synthetic import synthetic_batch


def test_lpt_makespan():
    assert lpt_makespan([3.0, 3.0, 2.0, 2.0, 2.0], 2) == 7.0       # LPT, not the optimum 6
    assert lpt_makespan([5.0, 4.0, 3.0, 3.0, 3.0], 2) == 10.0
    assert lpt_makespan([1.0, 2.0, 3.0], 1) == 6.0
    assert lpt_makespan([1.0, 2.0, 3.0], 8) == 3.0
    assert lpt_makespan([], 4) == 0.0
    with pytest.raises(ValueError):
        lpt_makespan([1.0], 0)


def test_profiled_calls_give_the_same_results_and_record_their_tasks():
    batch, feats = synthetic_batch(batch_size=512, num_features=6, vocab_size=5000, seed=3)
    topo = scwork.Topology(2, 4)
    base = compute_stats(batch, feats, topo, "auto", num_threads=1)
    base_pre = preprocess(batch, feats, topo, None, num_threads=1)
    with profiled(16) as profiles:
        stats = compute_stats(batch, feats, topo, "auto")
        pre = preprocess(batch, feats, topo, None)
        mb = minibatch(batch, feats, topo, stacking=None)
    assert stats.equals(base) and pre.stats.equals(base_pre.stats)
    for name, buf in pre.csr.items():
        assert np.array_equal(buf.embedding_ids, base_pre.csr[name].embedding_ids)
    assert len(profiles) == 3                    # one per call, minibatch's own engine work included
    names = [[n for n, _ in p.batches] for p in profiles]
    assert names[0] == ["slices", "finish"]
    assert names[1] == ["count", "slices", "finish"]     # 16 threads: CSR sizes counted first
    # minibatch: each table's keys by slices, then by ranges of ids (every id in one task of
    # each), then the stacks' checks and their mini-batch sums
    assert names[2] == ["slices", "ranges", "stacks", "minibatches"]
    assert [len(ts) for _, ts in profiles[2].batches][2:] == [6, 6]
    assert [sum(sz) for sz in profiles[2].sizes[:2]] == [batch.num_ids, batch.num_ids]
    assert len(profiles[2].sizes[1]) > 6                 # tables cut finer than one task each
    for p in profiles:
        assert p.plan_threads == 16 and 0 <= p.task_s <= p.total_s
        assert p.serial_s <= p.total_s
        # more workers never lengthen the critical path; one worker runs everything
        assert p.critical_path_s(64) <= p.critical_path_s(16) <= p.critical_path_s(1)
        assert p.critical_path_s(1) == pytest.approx(p.serial_s + p.overlap_s + p.task_s)
        assert len(p.overlaps) == len(p.batches) and min(p.overlaps) >= 0
        assert 0 < p.largest_task_share() <= 1
        assert [len(sz) for sz in p.sizes] == [len(ts) for _, ts in p.batches]
        assert 0 < p.largest_size_share() <= 1
    # the engine builds the statistics (and the naive view's task list) while the slices run
    for p in profiles[:2]:
        names_p = [n for n, _ in p.batches]
        assert p.overlaps[names_p.index("slices")] > 0 and p.overlaps[names_p.index("finish")] == 0
    # every raw id of the batch is in exactly one slices task (the cut loses and repeats none)
    slices = dict(zip([n for n, _ in profiles[0].batches], profiles[0].sizes))["slices"]
    assert sum(slices) == batch.num_ids and max(slices) <= batch.num_ids / (16 * 8) + max(
        int(n) for n in np.diff(batch._splits[:, ::512 // 8], axis=1).ravel())
    assert mb.num_threads == 16
    # outside the block nothing is recorded and num_threads means itself again
    compute_stats(batch, feats, topo, "auto", num_threads=1)
    assert len(profiles) == 3


def test_best_of_takes_each_tasks_least_time():
    a = CallProfile(4, [("slices", [1.0, 5.0]), ("finish", [2.0])], total_s=10.0)
    b = CallProfile(4, [("slices", [3.0, 1.0]), ("finish", [1.0])], total_s=6.0)
    best = CallProfile.best_of([a, b])
    assert best.batches == [("slices", [1.0, 1.0]), ("finish", [1.0])]
    assert best.serial_s == pytest.approx(min(a.serial_s, b.serial_s))      # 1.0
    with pytest.raises(ValueError):
        CallProfile.best_of([a, CallProfile(4, [("slices", [1.0])], total_s=2.0)])


def test_lpt_makespan_with_worker_0_busy_first():
    # worker 0 does the batch's overlapped serial work, then takes tasks
    assert lpt_makespan([1.0, 1.0, 1.0], 2, first_busy=0.5) == 2.0
    assert lpt_makespan([2.0, 1.0, 1.0, 1.0], 3, first_busy=1.0) == 2.0   # hidden in full
    assert lpt_makespan([1.0, 1.0], 2, first_busy=3.0) == 3.0     # longer than the batch: it is the makespan
    assert lpt_makespan([1.0, 1.0], 1, first_busy=0.5) == 2.5     # one worker: it adds in full
    assert lpt_makespan([], 4, first_busy=0.25) == 0.25
    with pytest.raises(ValueError):
        lpt_makespan([1.0], 2, first_busy=-1.0)


def test_overlap_is_timed_apart_from_tasks_and_serial_time():
    from scwork.sharding._profile import call
    from scwork.sharding._threads import _run_tasks

    order = []

    def spin(seconds):
        from scwork.sharding._profile import thread_cpu_s

        end = thread_cpu_s() + seconds
        while thread_cpu_s() < end:
            pass

    with profiled(4) as profiles, call():
        out = _run_tasks(lambda x, w: order.append(x) or x * 2, [1, 2, 3], [1, 2, 3], 4, "t",
                         overlap=lambda: (order.append("overlap"), spin(0.02)))
    assert out == [2, 4, 6] and order == ["overlap", 3, 2, 1]   # before the tasks: a dependency shows
    (p,) = profiles
    assert p.overlaps == [pytest.approx(p.overlap_s)] and p.overlap_s >= 0.02
    assert p.serial_s < 0.02                    # not counted as serial time
    # worker 0 takes tasks only after 20 ms: the three tiny tasks go to the other workers
    assert p.critical_path_s(4) == pytest.approx(p.serial_s + p.overlap_s, rel=0.05)
    assert p.critical_path_s(1) == pytest.approx(p.serial_s + p.overlap_s + p.task_s)


def test_work_recorded_as_a_task_inside_an_overlap_or_a_task_is_counted_once():
    """A dataset chunk's batch copy done inside collect_stats' read-ahead step (an overlap)
    is recorded as a read task: the overlap's own time must not hold it too, or the call's
    serial time goes negative (and is shown as 0)."""
    from scwork.sharding import _profile

    prof = _profile.CallProfile(4)
    spent = []

    def copy_recorded_as_a_task():
        start = _profile.thread_cpu_s()
        while _profile.thread_cpu_s() - start < 0.02:      # 20 ms of this thread's CPU
            pass
        seconds = _profile.thread_cpu_s() - start
        spent.append(seconds)
        _profile.record_task(prof, "reads", seconds, 10)

    _profile.run_serially(prof, "slices", lambda item, worker: copy_recorded_as_a_task(), [0], [1.0],
                          overlap=copy_recorded_as_a_task)
    names = [name for name, _ in prof.batches]
    assert names == ["reads", "slices"]
    assert prof.batches[0][1] == spent and prof.sizes[0] == [10.0, 10.0]
    assert prof.recorded_s == sum(spent)
    # what is left of the overlap and of the task around the recorded copies: bookkeeping only
    assert 0 <= prof.overlaps[1] < 0.5 * spent[0]
    assert 0 <= prof.batches[1][1][0] < 0.5 * spent[1]
    # the recorded tasks are counted once: as tasks
    assert prof.task_s == pytest.approx(sum(spent) + prof.batches[1][1][0], abs=0)


def _spin(seconds: float) -> float:
    """Burn ``seconds`` of this thread's CPU; the seconds burnt."""
    from scwork.sharding import _profile

    start = _profile.thread_cpu_s()
    while _profile.thread_cpu_s() - start < seconds:
        pass
    return _profile.thread_cpu_s() - start


def test_own_work_around_tasks_is_recorded_once_as_a_task_of_its_own():
    """A dataset chunk task's own Python (record_own_work) is recorded as one task, less the
    engine tasks, overlaps and reads recorded inside it: each second counted once."""
    from scwork.sharding import _profile

    prof = _profile.CallProfile(4)
    mark = _profile.own_work_mark(prof)
    own = _spin(0.01)
    inside = []
    _profile.run_serially(prof, "slices", lambda item, worker: inside.append(_spin(0.02)), [0, 1], [1.0, 1.0],
                          overlap=lambda: _spin(0.01))
    _profile.record_task(prof, "reads", _spin(0.015), 5)
    own += _spin(0.01)
    recorded = _profile.record_own_work(prof, "chunks", mark)
    names = [name for name, _ in prof.batches]
    assert names == ["slices", "reads", "chunks"]
    assert prof.batches[2][1] == [recorded] and prof.sizes[2] == [0.0]
    # the own work only (clock reads and bookkeeping add a little; the 50 ms inside do not)
    assert own <= recorded < own + 0.005
    # what was serial before is a task now: a second chunk's like it would run beside it
    total = own + sum(inside) + prof.overlaps[0] + 0.015
    prof.total_s = total + prof.profiler_s
    assert prof.serial_s < 0.005


def test_record_own_work_inside_an_overlap_is_taken_out_of_it():
    """Own work recorded inside an overlap (a chunk task run by a read-ahead step) leaves the overlap."""
    from scwork.sharding import _profile

    prof = _profile.CallProfile(2)
    seconds = []

    def step():
        mark = _profile.own_work_mark(prof)
        _spin(0.02)
        seconds.append(_profile.record_own_work(prof, "chunks", mark))

    _profile.run_serially(prof, "slices", lambda item, worker: None, [0], [1.0], overlap=step)
    assert [n for n, _ in prof.batches] == ["chunks", "slices"]
    assert 0 <= prof.overlaps[1] < 0.5 * seconds[0]


@pytest.mark.parametrize("n", [0, 1, 5, 32, 33, 500])
def test_dispatch_order_is_largest_first_ties_in_item_order(n):
    """The dispatcher's order (an argsort beyond 32 items) equals the stable sort by descending size."""
    from scwork.sharding._profile import dispatch_order

    rng = np.random.default_rng(n)
    for sizes in (rng.integers(0, 5, n).tolist(), rng.integers(0, 10**9, n), rng.random(n).tolist()):
        expected = sorted(range(n), key=lambda i: -sizes[i])
        assert dispatch_order(sizes) == expected


def test_the_dispatch_order_is_counted_as_serial_time_not_the_profilers():
    """Ordering the tasks is what the threaded dispatcher does on the calling thread before any
    task: the profile counts it as the call's serial time."""
    from scwork.sharding import _profile

    prof = _profile.CallProfile(4)
    calls = []
    real = _profile.dispatch_order

    def slow_order(sizes):
        calls.append(_spin(0.02))
        return real(sizes)

    try:
        _profile.dispatch_order = slow_order
        start = _profile.thread_cpu_s()
        _profile.run_serially(prof, "slices", lambda item, worker: None, [0, 1], [1.0, 2.0])
        prof.total_s = _profile.thread_cpu_s() - start
    finally:
        _profile.dispatch_order = real
    assert len(calls) == 1
    assert prof.profiler_s < 0.5 * calls[0]
    assert prof.serial_s >= calls[0]


def test_the_gil_bound_adds_up_each_batchs_held_seconds_by_hand():
    # four tasks of 1 s, each holding the GIL 0.5 s outside its kernel: 4 workers would end
    # at 1 s, but the four 0.5 s pieces run one at a time, 2 s
    prof = CallProfile(4, [("a", [1.0, 1.0, 1.0, 1.0])], total_s=4.25)
    prof.held = [[0.5, 0.5, 0.5, 0.5]]
    prof.overlaps = [0.0]
    assert prof.serial_s == 0.25 and prof.held_s == 2.0
    assert prof.critical_path_s(4) == 1.25
    assert prof.gil_path_s(4) == 2.25
    assert prof.gil_path_s(1) == prof.critical_path_s(1) == 4.25    # one worker: the LPT bound is larger
    # the overlapped serial work holds the GIL too: 0.75 s of it before the 2 s of tasks
    prof = CallProfile(4, [("a", [1.0, 1.0, 1.0, 1.0]), ("b", [0.25])], total_s=5.5)
    prof.held = [[0.5, 0.5, 0.5, 0.5], []]         # b: not split (no timed kernel): unknown, not counted
    prof.overlaps = [0.75, 0.0]
    assert prof.serial_s == 0.5
    assert prof.critical_path_s(4) == 0.5 + 1.75 + 0.25       # worker 0 starts its task at 0.75
    assert prof.gil_path_s(4) == 0.5 + 2.75 + 0.25
    assert prof.summary()["held_s"] == 2.0


def test_best_of_takes_each_tasks_least_held_time():
    a = CallProfile(2, [("a", [1.0, 2.0])], total_s=3.0)
    a.held = [[0.2, 0.1]]
    b = CallProfile(2, [("a", [1.5, 1.0])], total_s=2.5)
    b.held = [[0.1, 0.3]]
    assert CallProfile.best_of([a, b]).held == [[0.1, 0.1]]
    b.held = [[]]                                   # one repeat did not split the batch: neither does best
    assert CallProfile.best_of([a, b]).held == [[]]


def test_profiled_engine_calls_split_each_task_into_kernel_and_gil_held_time():
    batch, feats = synthetic_batch(batch_size=512, num_features=6, vocab_size=5000, seed=3)
    topo = scwork.Topology(2, 4)
    base = preprocess(batch, feats, topo, None, num_threads=1)
    with profiled(16) as profiles:
        pre = preprocess(batch, feats, topo, None)
        minibatch(batch, feats, topo, stacking=None)
    assert pre.stats.equals(base.stats)            # the timed kernels compute the same
    engine_call, path = profiles
    assert engine_call.kernel_s > 0
    assert [len(h) for h in engine_call.held] == [len(ts) for _, ts in engine_call.batches]
    for (_, ts), held in zip(engine_call.batches, engine_call.held):
        assert all(0 <= h <= t for h, t in zip(held, ts))
    assert 0 < engine_call.held_s < engine_call.task_s
    for T in (1, 16, 64):
        assert engine_call.gil_path_s(T) >= engine_call.critical_path_s(T)
    # minibatch's own kernels are not timed: its batches are not split, so not bounded
    assert path.held[0] == [] and path.gil_path_s(16) >= path.critical_path_s(16)
    # outside a profile the engine calls the kernels themselves
    from scwork.sharding import _split_kernels, engine

    assert engine._backend("numba").write_groups is _split_kernels.write_groups
    with profiled(4):
        assert engine._backend("numba").write_groups.__wrapped__ is _split_kernels.write_groups
