"""Batches whose tasks the workers take in turn inside one compiled call per job (the task queue).

``count_group_tasks`` (statistics), ``slice_pairs_tasks`` (CSR sizes), ``write_group_tasks``
(CSR) and ``naive_group_tasks`` (the naive view) loop over a job's rows of a batch's task
table, each call taking its next task from the job's shared counter
(``_task_queue.take_next``). Pinned here: every task runs once whatever the threads, on
both backends; each kernel equals its one-task kernel; the engine gives what one Python
call per task gives (statistics and CSR bit for bit), errors included; the profile counts
a queued batch's GIL-held Python once per worker and job.
"""

from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import InputError, OutOfVocabularyError
from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, compute_stats, preprocess
from scwork.sharding import _naive_kernels as NK
from scwork.sharding import _split_kernels as SK
from scwork.sharding._profile import CallProfile, profiled
from scwork.sharding._synthetic import synthetic_batch
from scwork.sharding._task_queue import take_next

engine = importlib.import_module("scwork.sharding.engine")
_stack = importlib.import_module("tests.sharding.test_split_kernels")._stack
_errors_batch = importlib.import_module("tests.sharding.test_threads")._errors_batch


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
    counters = np.zeros(16, np.int64)
    taken = _in_threads(lambda w: [take_next(counters, 8 * (w % 2)) for _ in range(500)], 6)
    for slot in (0, 1):
        mine = [v for w, vals in enumerate(taken) if w % 2 == slot for v in vals]
        assert sorted(mine) == list(range(1500))
    assert counters.tolist() == [1500] + [0] * 7 + [1500] + [0] * 7


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_task_table_orders_tasks_by_job_then_largest_first(seed):
    rng = np.random.default_rng(seed)
    n, J = int(rng.integers(0, 60)), int(rng.integers(1, 7))
    cut = rng.integers(0, 6, (n, 4)).astype(np.int64)              # few sizes: many ties
    job_of = np.sort(rng.integers(0, J, n)).astype(np.int64) if rng.random() < 0.5 else rng.integers(0, J, n)
    by_hand = sorted(range(n), key=lambda i: (job_of[i], -cut[i, 3], i))
    for fn in (SK.order_by_job, SK.order_by_job_reference):
        order, starts = np.full(n, -1, np.int64), np.full(J + 1, -1, np.int64)
        fn(cut, 3, job_of, order, starts)
        assert order.tolist() == by_hand
        assert starts.tolist() == [int(np.sum(job_of < j)) for j in range(J + 1)]
    # the rows of a cut by groups (one job) and of a cut by slices (several)
    groups = rng.integers(1, 5, J).astype(np.int64)
    for by_slices in (False, True):
        c = cut.copy()
        if by_slices:
            c[:, 0] = job_of
        outs = []
        for fn in (SK.slice_task_rows, SK.slice_task_rows_reference):
            rows, jobs = np.full((n, 4), -1, np.int64), np.full(n, -1, np.int64)
            fn(c, by_slices, groups, rows, jobs)
            outs.append((rows, jobs))
        expected = [(c[i, 1], c[i, 2], 0, groups[c[i, 0]]) if by_slices else (c[i, 0], c[i, 0] + 1, c[i, 1], c[i, 2])
                    for i in range(n)]
        for rows, jobs in outs:
            assert [tuple(r) for r in rows.tolist()] == expected
            assert jobs.tolist() == (c[:, 0].tolist() if by_slices else [0] * n)


def _two_stacks_in_turn(run, order, num_threads: int) -> list:
    """``run(first, last, counters, slot, worker)`` for the two halves of ``order`` (as two jobs of a
    batch, counters 64 bytes apart), on ``num_threads`` threads that all go round both halves."""
    half = len(order) // 2
    ranges = [(0, half), (half, len(order))]
    counters = np.zeros(16, np.int64)

    def worker(w):
        out = 0
        for k in range(2):
            first, last = ranges[(w + k) % 2]
            out += run(first, last, counters, 8 * ((w + k) % 2), w)
        return out

    out = _in_threads(worker, num_threads)
    for slot, (first, last) in zip((0, 8), ranges):
        assert last - first <= counters[slot] <= last - first + num_threads     # a take past the end ends a call
    return out


def _group_tasks(job, rng):
    """A random task table ``(s0, s1, g0, g1)`` covering every (slice, group) run once (a slice
    range or a group range at a time), and a random hand-out order."""
    ng = len(job.groups)
    rows = []
    if rng.random() < 0.5:
        cuts = sorted({0, job.nsl, *rng.integers(0, job.nsl + 1, 2).tolist()})
        rows = [(a, b, 0, ng) for a, b in zip(cuts, cuts[1:])]
    else:
        for sl in range(job.nsl):
            cuts = sorted({0, ng, *rng.integers(0, ng + 1, 2).tolist()})
            rows += [(sl, sl + 1, a, b) for a, b in zip(cuts, cuts[1:])]
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
    expected_failed = [one.run_groups(kern, batch, weights, has_w, *map(int, row), sc) is not one.clean_record
                       for row in tasks]
    for backend in ("numba", "numpy"):
        fn = engine._Backend(backend).count_group_tasks
        job = _fresh_job(stack, batch, G, S)
        task_failed = np.full(len(tasks), -5, np.int64)
        scratch = [_scratch(job) for _ in range(num_threads)]

        def run(first, last, counters, slot, worker, job=job, fn=fn, task_failed=task_failed, scratch=scratch):
            s = scratch[worker]
            return fn(batch._ids, batch._splits, weights, has_w, job.n, job.P, job.lbits, job.gptr, job.feat_rows,
                      job.feat_k, job.g_vocab, job.g_shift, job.g_qbits, job.g_uloff, job.g_sloff, tasks, order,
                      first, last, counters, slot, s["sk"], s["ak"], s["bk"], s["hist"], job.pairs_g,
                      job.distinct_g, job.ulist, job.ul_cnt, s["oov"], task_failed)

        failed = _two_stacks_in_turn(run, order, num_threads)
        assert sum(failed) == sum(expected_failed)
        assert ((task_failed > 0) == np.array(expected_failed)).all()      # every task written, once
        for name in ("pairs_g", "distinct_g", "ul_cnt"):
            assert np.array_equal(getattr(job, name), getattr(one, name)), (backend, name)
        for at, count in zip((one.g_uloff[:, None] + one.g_sloff[:, :-1]).ravel(), one.ul_cnt):
            assert np.array_equal(job.ulist[at:at + count], one.ulist[at:at + count]), backend   # each run's ids


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_slice_pairs_and_write_group_tasks_are_their_tasks_one_by_one(seed, num_threads):
    """The count and the CSR of a stack without limits, queued: what each task on its own gives."""
    batch, stack, G, S, rng = _stack(seed)
    weights, has_w = engine._weights_of(batch)
    cfg = SparsecoreConfig()
    kern = engine._Backend("numba")

    def counted_job():
        job = engine._StackJob(stack, batch, G, S, True, cfg, count_first=True)
        job.ulist = np.full(job.ulist_size, -7, np.int64)
        return job

    one = counted_job()
    tasks, order = _group_tasks(one, rng)
    for row in tasks:
        one.count_task(kern, batch, *map(int, row))
    one.set_counted_size()
    one.emb, one.smp = np.full(one.out_size, -3, np.int32), np.full(one.out_size, -3, np.int32)
    one.gout = np.full(one.out_size, -3, np.float32)
    sc = _scratch(one)
    expected_failed = [one.run_write_groups(kern, batch, weights, has_w, *map(int, row), sc) is not one.clean_record
                       for row in tasks]
    for backend in ("numba", "numpy"):
        k = engine._Backend(backend)
        job = counted_job()

        def count(first, last, counters, slot, worker, job=job, k=k):
            return k.slice_pairs_tasks(batch._ids, batch._splits, job.n, job.P, job.gptr, job.feat_rows, job.g_vocab,
                                       job.g_shift, tasks, order, first, last, counters, slot, job.count_pairs)

        assert sum(_two_stacks_in_turn(count, order, num_threads)) == len(tasks)
        assert np.array_equal(job.count_pairs, one.count_pairs), backend
        job.set_counted_size()
        job.emb, job.smp = np.full(job.out_size, -3, np.int32), np.full(job.out_size, -3, np.int32)
        job.gout = np.full(job.out_size, -3, np.float32)
        task_failed = np.full(len(tasks), -5, np.int64)
        scratch = [_scratch(job) for _ in range(num_threads)]

        def write(first, last, counters, slot, worker, job=job, k=k, scratch=scratch, task_failed=task_failed):
            s = scratch[worker]
            return k.write_group_tasks(batch._ids, batch._splits, weights, has_w, job.combiner, job.n, job.P,
                                       job.lbits, job.gptr, job.feat_rows, job.feat_k, job.g_vocab, job.g_shift,
                                       job.g_qbits, job.g_rowoff, job.g_mode, job.g_uloff, job.g_sloff, tasks, order,
                                       first, last, counters, slot, s["sk"], s["sg"], s["ak"], s["ag"], s["bk"],
                                       s["bg"], s["hist"], job.offs, job.pad_lo, job.pad_hi, job.rowgain, job.emb,
                                       job.smp, job.gout, job.distinct_g, job.ulist, job.ul_cnt, s["oov"], s["bad"],
                                       task_failed)

        assert sum(_two_stacks_in_turn(write, order, num_threads)) == sum(expected_failed)
        assert ((task_failed > 0) == np.array(expected_failed)).all()
        for name in ("emb", "smp", "distinct_g", "ul_cnt", "row_pointers"):
            assert np.array_equal(getattr(job, name), getattr(one, name)), (backend, name)
        assert np.array_equal(job.gout.view(np.int32), one.gout.view(np.int32)), backend   # NaN pads, bit for bit


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
        done = _two_stacks_in_turn(lambda first, last, counters, slot, worker, fn=fn, naive=naive:
                                   fn(ulist, starts, counts, qbits, rows, order, first, last, counters, slot, naive),
                                   order, num_threads)
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
    """Counts of the batches run swept (one compiled call per worker and job), by batch name."""
    ran: dict = {}
    real = engine._run_swept

    def spy(name, *args, **kwargs):
        ran[name] = ran.get(name, 0) + 1
        return real(name, *args, **kwargs)

    monkeypatch.setattr(engine, "_run_swept", spy)
    return ran


def _same_csr(a, b) -> bool:
    """Every stack's CSR arrays bit for bit (the gains' NaN padding included)."""
    assert list(a.csr) == list(b.csr)
    return all(np.array_equal(getattr(a.csr[name], field).view(np.int32), getattr(b.csr[name], field).view(np.int32))
               for name in a.csr for field in ("row_pointers", "embedding_ids", "sample_ids", "gains"))


@pytest.mark.parametrize("stacking", ["none", "auto", [["t0", "t1"], ["t2"], ["t3", "t4", "t5"]]])
def test_queued_batches_give_what_one_call_per_task_gives(monkeypatch, stacking):
    batch, feats = synthetic_batch(batch_size=256, num_features=6, vocab_size=5000, seed=5)
    topo = scwork.Topology(2, 4)
    if isinstance(stacking, list):
        stacking = [[feats[int(t[1:])].table.name for t in group] for group in stacking]
    monkeypatch.setattr(engine, "_SWEEP_BATCHES", False)
    per_task = {T: (compute_stats(batch, feats, topo, stacking, num_threads=T),
                    preprocess(batch, feats, topo, stacking, num_threads=T)) for T in (2, 7)}
    monkeypatch.setattr(engine, "_SWEEP_BATCHES", True)
    ran = _spy(monkeypatch)
    one = (compute_stats(batch, feats, topo, stacking, num_threads=1),
           preprocess(batch, feats, topo, stacking, num_threads=1))
    assert ran == {}                                       # one thread: no queue
    for T, (stats, pre) in per_task.items():
        got_stats = compute_stats(batch, feats, topo, stacking, num_threads=T)
        got = preprocess(batch, feats, topo, stacking, num_threads=T)
        assert got_stats.identical(stats) and got_stats.identical(one[0])
        assert got.stats.identical(pre.stats) and got.stats.identical(one[1].stats)
        assert _same_csr(got, pre) and _same_csr(got, one[1])
    # per thread count: compute_stats' slices and finish, preprocess's count, slices and finish
    assert ran == {"slices": 4, "finish": 4, "count": 2}


def test_an_out_of_vocabulary_id_in_a_queued_batch_is_reported_as_one_call_per_task_reports_it(monkeypatch):
    data, B = _errors_batch()              # three features of 64 samples, ids below 50
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
        for fn in (compute_stats, preprocess):
            with pytest.raises(OutOfVocabularyError) as info:
                fn(batch, feats, topo, None, num_threads=T)
            err = info.value
            assert (err.feature, err.sample, err.id, err.count) == ("b", 4, 50, 3), (fn.__name__, T)
    assert ran["slices"] >= 6
    dropped = [compute_stats(batch, feats, topo, None, on_out_of_vocabulary="drop", num_threads=T) for T in (1, 8)]
    assert dropped[0].identical(dropped[1]) and int(dropped[0]["out_of_vocabulary_ids"].sum()) == 3


def test_a_zero_divisor_in_a_queued_csr_batch_is_reported_as_one_call_per_task_reports_it(monkeypatch):
    rng = np.random.default_rng(1)
    B = 64
    data = {}
    for name in ("a", "b"):
        lengths = rng.integers(1, 6, size=B)
        m = int(lengths.sum())
        data[name] = (rng.integers(0, 50, size=m), np.concatenate([[0], np.cumsum(lengths)]), np.ones(m))
    ids, rs, w = data["b"]
    w = w.copy()
    w[rs[40]:rs[41]] = 0.0                  # sample 40 of b: its weights sum to 0
    data["b"] = (ids, rs, w)
    feats = [FeatureSpec(n, TableSpec(f"t{n}", 50, 8, combiner="mean")) for n in ("a", "b")]
    batch = FeatureBatch(data)
    topo = scwork.Topology(2, 4)
    ran = _spy(monkeypatch)
    messages = set()
    for T in (1, 2, 8):
        with pytest.raises(InputError) as info:
            preprocess(batch, feats, topo, None, num_threads=T)
        messages.add(str(info.value))
    assert len(messages) == 1 and "sample 40" in messages.pop()
    assert ran["slices"] == 2


def test_the_profile_counts_a_queued_batchs_gil_held_python_once_per_worker_and_job():
    prof = CallProfile(2, [("slices", [1.0] * 6), ("finish", [1.0] * 6), ("count", [1.0] * 6)], total_s=18.0)
    prof.held = [[0.1, 0.3, 0.2, 0.1, 0.1, 0.1], [0.1] * 6, [0.05, 0.4, 0.1, 0.2, 0.05, 0.3]]
    prof.overlaps = [0.0, 0.0, 0.0]
    prof.queued = [1, 0, 2]                               # one job; not queued; two jobs
    assert prof.held_s == pytest.approx(2.6)             # as if each task were its own call
    # slices: the two largest (a call per worker); count: the three largest (one more for the second job)
    assert prof.held_at(2) == pytest.approx(0.5 + 0.6 + 0.9)
    assert prof.held_at(8) == pytest.approx(0.9 + 0.6 + 1.1)    # more calls than tasks: every task's
    assert prof.gil_path_s(2) == pytest.approx(prof.serial_s + 3 + 3 + 3)
    assert CallProfile.best_of([prof, prof]).queued == [1, 0, 2]


def test_a_profiled_statistics_call_marks_its_queued_batches():
    batch, feats = synthetic_batch(batch_size=256, num_features=6, vocab_size=5000, seed=3)
    topo = scwork.Topology(2, 4)
    with profiled(16) as profiles:
        compute_stats(batch, feats, topo, "none")
    (prof,) = profiles
    assert [name for name, _ in prof.batches] == ["slices", "finish"]
    assert prof.queued == [1, 1]
    assert prof.held_at(16) < prof.held_s
    with profiled(16) as profiles:
        preprocess(batch, feats, topo, "none")
    (prof,) = profiles
    assert [name for name, _ in prof.batches] == ["count", "slices", "finish"]
    assert prof.queued == [6, 6, 6]                       # a job per stack, one table each
    with profiled(1) as profiles:
        compute_stats(batch, feats, topo, "none")
    assert not any(profiles[0].queued)                   # one thread: one call per task
