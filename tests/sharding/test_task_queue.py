"""Batches whose tasks the workers take in turn inside one compiled call each (the task queue).

``count_group_tasks`` (a statistics job's slices batch) and ``naive_group_tasks`` (its
naive-view tasks) loop over a task table, each call taking its next task from a shared
counter (``_task_queue.take_next``). Pinned here: every task runs once whatever the
threads, on both backends; each equals its one-task kernel; the engine gives what one
Python call per task gives, errors included; the profile counts a queued batch's
GIL-held Python once per worker.
"""

from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import OutOfVocabularyError
from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, compute_stats
from scwork.sharding import _naive_kernels as NK
from scwork.sharding import _split_kernels as SK
from scwork.sharding._profile import CallProfile, profiled
from scwork.sharding._synthetic import synthetic_batch
from scwork.sharding._task_queue import take_next

engine = importlib.import_module("scwork.sharding.engine")
_stack = importlib.import_module("tests.sharding.test_split_kernels")._stack


def _in_threads(fn, num_threads: int) -> list:
    """``[fn(w) for w in range(num_threads)]``, each on a thread of its own, started together."""
    out = [None] * num_threads
    start = threading.Barrier(num_threads)

    def run(w):
        start.wait()
        out[w] = fn(w)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(num_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_take_next_hands_out_each_value_once_across_threads():
    counter = np.zeros(1, np.int64)
    taken = _in_threads(lambda w: [take_next(counter) for _ in range(500)], 6)
    assert sorted(v for vals in taken for v in vals) == list(range(3000))
    assert int(counter[0]) == 3000


def _group_tasks(job, rng):
    """A random task table ``(slice, g0, g1, size)`` covering every (slice, group) run once,
    and a random hand-out order."""
    ng = len(job.groups)
    rows = []
    for sl in range(job.nsl):
        cuts = sorted({0, ng, *rng.integers(0, ng + 1, 2).tolist()})
        rows += [(sl, a, b, int(rng.integers(0, 100))) for a, b in zip(cuts, cuts[1:])]
    return np.array(rows, np.int64).reshape(-1, 4), rng.permutation(len(rows)).astype(np.int64)


def _fresh_job(stack, batch, G, S):
    job = engine._StackJob(stack, batch, G, S, False, SparsecoreConfig())
    job.ulist = np.full(job.ulist_size, -7, np.int64)
    return job


def _scratch(job):
    return {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64)
            for k, v in job.scratch_needs().items()}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_count_group_tasks_is_its_tasks_one_by_one_on_any_thread_count(seed, num_threads):
    batch, stack, G, S, rng = _stack(seed)
    weights, has_w = engine._weights_of(batch)
    kern = engine._Backend("numba")
    # each task on its own: count_groups (already pinned against its reference)
    one = _fresh_job(stack, batch, G, S)
    tasks, order = _group_tasks(one, rng)
    sc = _scratch(one)
    expected_failed = [one.run_groups(kern, batch, weights, has_w, int(sl), int(sl) + 1, int(g0), int(g1), sc)
                       is not one.clean_record for sl, g0, g1, _ in tasks]
    for backend in ("numba", "numpy"):
        fn = engine._Backend(backend).count_group_tasks
        job = _fresh_job(stack, batch, G, S)
        next_task = np.zeros(1, np.int64)
        task_failed = np.full(len(tasks), -5, np.int64)
        scratch = [_scratch(job) for _ in range(num_threads)]

        def drain(w, job=job, fn=fn, next_task=next_task, task_failed=task_failed, scratch=scratch):
            s = scratch[w]
            return fn(batch._ids, batch._splits, weights, has_w, job.n, job.P, job.lbits, job.gptr, job.feat_rows,
                      job.feat_k, job.g_vocab, job.g_shift, job.g_qbits, job.g_uloff, job.g_sloff, tasks, order,
                      next_task, s["sk"], s["ak"], s["bk"], s["hist"], job.pairs_g, job.distinct_g, job.ulist,
                      job.ul_cnt, s["oov"], task_failed)

        failed = _in_threads(drain, num_threads)
        assert sum(failed) == sum(expected_failed)
        assert ((task_failed > 0) == np.array(expected_failed)).all()      # every task written, once
        assert len(tasks) <= int(next_task[0]) <= len(tasks) + num_threads  # a take past the end ends a call
        for name in ("pairs_g", "distinct_g", "ul_cnt"):
            assert np.array_equal(getattr(job, name), getattr(one, name)), (backend, name)
        for at, count in zip((one.g_uloff[:, None] + one.g_sloff[:, :-1]).ravel(), one.ul_cnt):
            assert np.array_equal(job.ulist[at:at + count], one.ulist[at:at + count]), backend   # each run's ids


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_naive_group_tasks_is_its_tasks_one_by_one_on_any_thread_count(seed, num_threads):
    rng = np.random.default_rng(seed)
    ng, nsl, P = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 9))
    qbits = rng.integers(0, 4, ng).astype(np.int64)
    # each (group, slice) run: sorted distinct ids below P << qbits[g] (partition u >> qbits[g])
    runs = [np.sort(rng.choice(P << int(qbits[g]), size=int(rng.integers(0, (P << int(qbits[g])) + 1)),
                               replace=False)) for g in range(ng) for _ in range(nsl)]
    counts = np.array([len(r) for r in runs], np.int64)
    starts = (np.cumsum(counts) - counts).reshape(ng, nsl)
    ulist = np.concatenate([*runs, [0]]).astype(np.int64)
    rows = []
    for g in range(ng):
        edges = sorted({0, P, *rng.integers(0, P + 1, 2).tolist()})
        rows += [(g, a, b) for a, b in zip(edges, edges[1:])]
    rows = np.array(rows, np.int64)
    order = rng.permutation(len(rows)).astype(np.int64)
    expected = np.zeros((ng, P), np.int64)
    for g, p0, p1 in rows.tolist():
        NK.naive_of_group_reference(ulist, starts, counts, qbits, g, p0, p1, expected)
    for fn in (NK.naive_group_tasks, NK.naive_group_tasks_reference):
        naive = np.zeros((ng, P), np.int64)
        next_task = np.zeros(1, np.int64)
        done = _in_threads(lambda w, fn=fn, naive=naive, next_task=next_task:
                           fn(ulist, starts, counts, qbits, rows, order, next_task, naive), num_threads)
        assert sum(done) == len(rows)
        assert np.array_equal(naive, expected)
    # the independent value: distinct ids per (group, partition) counted in plain Python
    by_hand = np.zeros((ng, P), np.int64)
    for g in range(ng):
        ids = {int(u) for sl in range(nsl)
               for u in ulist[starts[g, sl]:starts[g, sl] + counts[g * nsl + sl]]}
        for u in ids:
            by_hand[g, u >> int(qbits[g])] += 1
    assert np.array_equal(expected, by_hand)


def _spy(monkeypatch):
    ran = {"group": 0, "naive": 0}
    for key, name in (("group", "_run_group_queue"), ("naive", "_run_naive_queue")):
        real = getattr(engine, name)

        def spy(*args, real=real, key=key, **kwargs):
            ran[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(engine, name, spy)
    return ran


@pytest.mark.parametrize("stacking", ["none", "auto"])
def test_queued_batches_give_what_one_call_per_task_gives(monkeypatch, stacking):
    batch, feats = synthetic_batch(batch_size=256, num_features=6, vocab_size=5000, seed=5)
    topo = scwork.Topology(2, 4)
    monkeypatch.setattr(engine, "_QUEUE_GROUP_TASKS", False)
    per_task = {T: compute_stats(batch, feats, topo, stacking, num_threads=T) for T in (2, 7)}
    monkeypatch.setattr(engine, "_QUEUE_GROUP_TASKS", True)
    ran = _spy(monkeypatch)
    one = compute_stats(batch, feats, topo, stacking, num_threads=1)
    assert ran == {"group": 0, "naive": 0}                # one thread: no queue
    for T, expected in per_task.items():
        got = compute_stats(batch, feats, topo, stacking, num_threads=T)
        assert got.identical(expected) and got.identical(one)
    assert ran["group"] == ran["naive"] == 2


def test_an_out_of_vocabulary_id_in_a_queued_batch_is_reported_as_one_call_per_task_reports_it(monkeypatch):
    rng = np.random.default_rng(0)
    B = 64
    data = {}
    for name in ("a", "b", "c"):
        lengths = rng.integers(1, 6, size=B)
        data[name] = (rng.integers(0, 50, size=int(lengths.sum())), np.concatenate([[0], np.cumsum(lengths)]))
    ids_b, rs_b = data["b"]
    ids_b = ids_b.copy()
    ids_b[rs_b[B - 3]] = 77                # the first bad id of table b, in the last slice
    ids_b[rs_b[B - 2]] = 88
    ids_b[rs_b[4]] = 50                    # and one in an early slice
    data["b"] = (ids_b, rs_b)
    feats = [FeatureSpec(n, TableSpec(f"t{n}", 50, 8)) for n in ("a", "b", "c")]
    batch = FeatureBatch(data)
    topo = scwork.Topology(2, 4)
    ran = _spy(monkeypatch)
    for T in (1, 2, 3, 8):
        with pytest.raises(OutOfVocabularyError) as info:
            compute_stats(batch, feats, topo, None, num_threads=T)
        err = info.value
        assert (err.feature, err.sample, err.id, err.count) == ("b", 4, 50, 3), T
    assert ran["group"] >= 3
    dropped = [compute_stats(batch, feats, topo, None, on_out_of_vocabulary="drop", num_threads=T) for T in (1, 8)]
    assert dropped[0].identical(dropped[1]) and int(dropped[0]["out_of_vocabulary_ids"].sum()) == 3


def test_the_profile_counts_a_queued_batchs_gil_held_python_once_per_worker():
    prof = CallProfile(2, [("slices", [1.0] * 6), ("finish", [1.0] * 6)], total_s=12.0)
    prof.held = [[0.1, 0.3, 0.2, 0.1, 0.1, 0.1], [0.1] * 6]
    prof.overlaps = [0.0, 0.0]
    prof.queued = [True, False]
    assert prof.held_s == pytest.approx(1.5)             # as if each task were its own call
    assert prof.held_at(2) == pytest.approx(0.5 + 0.6)   # slices: the two largest, once per worker
    assert prof.held_at(8) == pytest.approx(0.9 + 0.6)   # more workers than tasks: every task's
    assert CallProfile.best_of([prof, prof]).queued == [True, False]


def test_a_profiled_statistics_call_marks_its_queued_batches():
    batch, feats = synthetic_batch(batch_size=256, num_features=6, vocab_size=5000, seed=3)
    topo = scwork.Topology(2, 4)
    with profiled(16) as profiles:
        compute_stats(batch, feats, topo, "none")
    (prof,) = profiles
    assert [name for name, _ in prof.batches] == ["slices", "finish"]
    assert prof.queued == [True, True]
    assert prof.held_at(16) < prof.held_s
    with profiled(1) as profiles:
        compute_stats(batch, feats, topo, "none")
    assert not any(profiles[0].queued)                   # one thread: one call per task
