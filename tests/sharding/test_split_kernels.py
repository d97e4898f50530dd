"""Kernels that cut the engine's work finer than one slice, against their numpy references.

``count_groups`` (statistics of (slice, table) rectangles into per-table counters)
must add up to what ``stack_slices`` counts per slice; ``slice_pairs`` (ids per
(slice, partition) after per-sample dedup, without sorting) must equal the sorted
count, since it fixes the CSR size before any slice is written.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, plan_stacking, preprocess
from scwork.sharding import _split_kernels as SK

engine = importlib.import_module("scwork.sharding.engine")


def _stack(seed: int):
    """A random stack of 1-3 tables (some sharing features), long rows included."""
    rng = np.random.default_rng(seed)
    G, S = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    topo = scwork.Topology(G, S)
    comb = str(rng.choice(["sum", "mean", "sqrtn"]))
    tables = [TableSpec(f"t{i}", int(rng.choice([3, 50, 5000, 10**8])), 8, combiner=comb)
              for i in range(int(rng.integers(1, 4)))]
    feats = [FeatureSpec(f"f{i}", tables[i % len(tables)]) for i in range(len(tables) + int(rng.integers(0, 3)))]
    B = G * S * int(rng.integers(1, 6))
    data = {}
    for f in feats:
        # mostly short rows; now and then one of tens of ids, and rarely one about as
        # long as slice_pairs' short-row limit (its table) or past it (a sorted copy)
        u = rng.random(B)
        lengths = np.where(u < 0.1, rng.integers(40, 120, B), rng.integers(0, 9, B))
        lengths = np.where(u < 0.03, rng.integers(SK._SHORT_ROW - 8, SK._SHORT_ROW + 64, B), lengths)
        m = int(lengths.sum())
        vocab = f.table.vocab_size
        ids = np.where(rng.random(m) < 0.4, rng.integers(0, min(vocab, 4), m), rng.integers(0, vocab, m))
        rs = np.concatenate([[0], np.cumsum(lengths)])
        data[f.name] = (ids, rs, rng.uniform(0.5, 2, m)) if rng.random() < 0.5 else (ids, rs)
    batch = FeatureBatch(data)
    plan = plan_stacking(feats, topo, [[t.name for t in tables]], batch_size=B)
    return batch, plan.stacks[0], G, S, rng


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_slice_pairs_matches_reference_and_the_sorted_count(seed):
    batch, stack, G, S, rng = _stack(seed)
    job = engine._StackJob(stack, batch, G, S, False, SparsecoreConfig())
    s0 = int(rng.integers(0, job.nsl))
    s1 = int(rng.integers(s0 + 1, job.nsl + 1))
    outs = []
    ng = len(job.groups)
    for fn in (SK.slice_pairs, SK.slice_pairs_reference):
        pairs = np.full(ng * job.nsl * job.P, 3, np.int64)
        fn(batch._ids, batch._splits, job.n, job.P, job.gptr, job.feat_rows, job.g_vocab, job.g_shift, s0, s1,
           0, ng, pairs)
        outs.append(pairs)
    assert np.array_equal(outs[0], outs[1])
    # the engine's sorted count of the same slices
    stats = scwork.sharding.compute_stats(batch, list(stack.features), scwork.Topology(G, S),
                                          [list(stack.table_names)], num_threads=1)
    sorted_pairs = stats["ids"].values.reshape(job.nsl, job.P)
    got = (outs[0].reshape(ng, job.nsl, job.P) - 3).sum(axis=0)
    assert np.array_equal(got[s0:s1], sorted_pairs[s0:s1])
    assert (got[:s0] == 0).all() and (got[s1:] == 0).all()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_count_groups_matches_reference_and_adds_up_to_the_slice_counts(seed):
    batch, stack, G, S, rng = _stack(seed)
    weights, has_w = engine._weights_of(batch)
    outs = []
    for backend in ("numba", "numpy"):
        kern = engine._Backend(backend)
        job = engine._StackJob(stack, batch, G, S, False, SparsecoreConfig())
        job.ulist = np.full(job.ulist_size, -7, np.int64)
        needs = job.scratch_needs()
        sc = {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64) for k, v in needs.items()}
        ng = len(job.groups)
        # a rectangle split: slices in two ranges, groups in two ranges
        s_cut = int(rng.integers(0, job.nsl + 1)) if backend == "numba" else s_cut
        g_cut = int(rng.integers(0, ng + 1)) if backend == "numba" else g_cut
        for s0, s1 in ((0, s_cut), (s_cut, job.nsl)):
            for g0, g1 in ((0, g_cut), (g_cut, ng)):
                job.task_done(job.run_groups(kern, batch, weights, has_w, s0, s1, g0, g1, sc))
        lists = [job.ulist[s:s + c] for s, c in zip((job.g_uloff[:, None] + job.g_sloff[:, :-1]).ravel(),
                                                     job.ul_cnt)]
        job.finish_counts()
        outs.append([job.pairs_g, job.distinct_g, job.ul_cnt, *lists])
        if backend == "numba":
            # the whole-slice kernel on the same stack
            whole = engine._StackJob(stack, batch, G, S, False, SparsecoreConfig())
            whole.ulist = np.zeros(whole.ulist_size, np.int64)
            whole.emb, whole.smp, whole.gout = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32)
            whole.run_slices(kern, batch, weights, has_w, 0, whole.nsl, 0, sc)
            assert np.array_equal(job.pairs, whole.pairs) and np.array_equal(job.distinct, whole.distinct)
            assert np.array_equal(job.kept, whole.kept) and np.array_equal(job.ul_cnt, whole.ul_cnt)
    for a, b in zip(*outs, strict=True):
        assert np.array_equal(a, b)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_write_groups_matches_reference_and_the_whole_slice_kernel(seed):
    """CSR of a stack without limits written by (slice, table) tasks: the layout of stack_slices."""
    batch, stack, G, S, rng = _stack(seed)
    weights, has_w = engine._weights_of(batch)
    cfg = SparsecoreConfig()
    s_cut = g_cut = None
    outs = []
    for backend in ("numba", "numpy"):
        kern = engine._Backend(backend)
        job = engine._StackJob(stack, batch, G, S, True, cfg, count_first=True)
        assert job.split_csr
        job.count_task(kern, batch, 0, job.nsl)
        job.set_counted_size()
        job.ulist = np.full(job.ulist_size, -7, np.int64)
        job.emb, job.smp = np.full(job.out_size, -3, np.int32), np.full(job.out_size, -3, np.int32)
        job.gout = np.full(job.out_size, -3, np.float32)
        needs = job.scratch_needs()
        sc = {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64) for k, v in needs.items()}
        ng = len(job.groups)
        if s_cut is None:
            s_cut, g_cut = int(rng.integers(0, job.nsl + 1)), int(rng.integers(0, ng + 1))
        for s0, s1 in ((0, s_cut), (s_cut, job.nsl)):
            for g0, g1 in ((0, g_cut), (g_cut, ng)):
                job.task_done(job.run_write_groups(kern, batch, weights, has_w, s0, s1, g0, g1, sc))
        job.finish_counts()
        outs.append([job.emb, job.smp, job.gout.view(np.int32), job.row_pointers, job.pairs, job.distinct,
                     job.ul_cnt])
    for a, b in zip(*outs, strict=True):
        assert np.array_equal(a, b)
    # the same CSR as the engine's per-slice path (stack_slices, one task per slice range)
    whole = engine._StackJob(stack, batch, G, S, True, cfg, count_first=True)
    whole.split_csr = False
    whole.count_task(engine._Backend("numba"), batch, 0, whole.nsl)
    whole.set_counted_size()
    whole.ulist = np.zeros(whole.ulist_size, np.int64)
    whole.emb, whole.smp = np.full(whole.out_size, -3, np.int32), np.full(whole.out_size, -3, np.int32)
    whole.gout = np.full(whole.out_size, -3, np.float32)
    sc = {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64) for k, v in whole.scratch_needs().items()}
    whole.run_slices(engine._Backend("numba"), batch, weights, has_w, 0, whole.nsl, 0, sc)
    got = outs[0]
    assert np.array_equal(got[0], whole.emb) and np.array_equal(got[1], whole.smp)
    assert np.array_equal(got[2], whole.gout.view(np.int32)) and np.array_equal(got[3], whole.row_pointers)
    assert np.array_equal(got[4], whole.pairs) and np.array_equal(got[5], whole.distinct)


@pytest.mark.parametrize("count_first", [False, True])
@pytest.mark.parametrize("nt", [1, 2, 3, 5])
def test_forced_fine_splits_match_the_literal_reference(monkeypatch, nt, count_first):
    """Every slice cut by tables and the naive view by partitions: the reference's results."""
    from scwork.sharding._reference import reference_preprocess

    monkeypatch.setattr(engine, "_TASKS_PER_THREAD", 10**6)
    monkeypatch.setattr(engine, "_COUNT_FIRST_THREADS", 1 if count_first else 10**6)
    for seed in range(6):
        batch, stack, G, S, _ = _stack(seed)
        topo = scwork.Topology(G, S)
        stacking = [list(stack.table_names)]
        feats = list(stack.features)
        plan = plan_stacking(feats, topo, stacking, batch_size=batch.batch_size)
        ref = reference_preprocess(batch, plan, topo, allow_id_dropping=True)
        res = preprocess(batch, feats, topo, stacking, num_threads=nt)
        stats = scwork.sharding.compute_stats(batch, feats, topo, stacking, num_threads=nt)
        for name, r in ref.items():
            s = res.stats.sel(stack=name)
            assert np.array_equal(s["ids"].values, r["ids"])
            assert np.array_equal(s["unique_ids"].values, r["unique"])
            assert np.array_equal(s["naive_unique_ids_per_partition"].values, r["naive_unique"])
            buf = res.csr[name]
            assert buf.buffer_size_per_sc == r["buffer_size_per_sc"]
            for key in ("row_pointers", "embedding_ids", "sample_ids"):
                assert np.array_equal(getattr(buf, key), r[key])
            assert np.array_equal(buf.gains, r["gains"], equal_nan=True)
        assert stats.equals(res.stats)


@pytest.mark.parametrize("strategy", ["vocabulary", "sample"])
def test_minibatch_tasks_give_the_results_of_one_thread(strategy):
    """Stacks, and the tables of a stack, run as tasks: the plan does not depend on the threads."""
    from scwork.sharding import minibatch

    rng = np.random.default_rng(11)
    B = 8 * 32
    tables = [TableSpec(f"t{i}", 500, 8, max_ids_per_partition=12, max_unique_ids_per_partition=10)
              for i in range(5)]
    feats = [FeatureSpec(f"f{i}", tables[i % 5]) for i in range(7)]
    data = {}
    for f in feats:
        lengths = rng.integers(0, 6, B)
        data[f.name] = (rng.integers(0, 500, int(lengths.sum())), np.concatenate([[0], np.cumsum(lengths)]))
    batch = FeatureBatch(data)
    topo = scwork.Topology(2, 4)
    for stacking, limits in ((None, None), ([["t0", "t1", "t2"], ["t3", "t4"]],
                                            {"t0_t1_t2": (20, 16), "t3_t4": (14, 12)})):
        for cfg in (SparsecoreConfig(), SparsecoreConfig(allow_id_dropping=True)):
            one = minibatch(batch, feats, topo, stacking=stacking, config=cfg, strategy=strategy, num_threads=1,
                            stack_limits=limits)
            assert int(one.num_minibatches.max()) > 1          # the limits do split the batch
            for nt in (2, 3, 5):
                other = minibatch(batch, feats, topo, stacking=stacking, config=cfg, strategy=strategy,
                                  num_threads=nt, stack_limits=limits)
                assert one.stats.equals(other.stats) and one.assignment.equals(other.assignment)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_counted_sizes_of_all_stacks_at_once_equal_each_stack_on_its_own(seed):
    """_set_counted_sizes (stacks of one shape stacked, a few numpy calls) = set_counted_size per job."""
    rng = np.random.default_rng(seed)
    G, S = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    topo = scwork.Topology(G, S)
    B = G * S * int(rng.integers(1, 5))
    tables = [TableSpec(f"t{i}", int(rng.choice([7, 300, 10**6])), 8) for i in range(int(rng.integers(1, 6)))]
    feats = [FeatureSpec(f"f{i}", tables[i % len(tables)]) for i in range(len(tables) + int(rng.integers(0, 3)))]
    data = {}
    for f in feats:
        lengths = rng.integers(0, 12, B)
        ids = rng.integers(0, f.table.vocab_size, int(lengths.sum()))
        data[f.name] = (ids, np.concatenate([[0], np.cumsum(lengths)]))
    batch = FeatureBatch(data)
    # no stacking (one-table stacks) and random groups (stacks of several shapes)
    names = [t.name for t in tables]
    cut = int(rng.integers(1, len(names) + 1))
    for stacking in (None, [names[:cut]] + ([names[cut:]] if names[cut:] else [])):
        plan = plan_stacking(feats, topo, stacking, batch_size=B)
        _, has_w = engine._weights_of(batch)
        counts = engine._slice_counts(batch, G * S)
        kern = engine._Backend("numba")
        together = engine._make_jobs(plan, batch, G, S, True, SparsecoreConfig(), has_w, counts, True)
        alone = [engine._StackJob(stack, batch, G, S, True, SparsecoreConfig(), count_first=True)
                 for stack in plan.stacks]
        for a, b in zip(together, alone, strict=True):
            assert a.counted and b.counted
            a.count_task(kern, batch, 0, a.nsl)
            b.count_task(kern, batch, 0, b.nsl)
            b.set_counted_size()
        engine._set_counted_sizes(together)
        for a, b in zip(together, alone, strict=True):
            assert (a.C, a.cap, a.out_size) == (b.C, b.cap, b.out_size)
            for name in ("base", "offs", "pad_lo", "pad_hi", "row_pointers", "used"):
                assert np.array_equal(getattr(a, name), getattr(b, name)), name
                assert getattr(a, name).flags.c_contiguous, name


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(1.0, 400.0))
def test_task_ranges_cover_every_slice_once_and_stay_within_the_target(seed, target):
    """Slice ranges: contiguous, covering, each within target ids unless one slice alone is larger."""
    batch, stack, G, S, rng = _stack(seed)
    job = engine._StackJob(stack, batch, G, S, False, SparsecoreConfig())
    for by_group in (False, True):
        units, sizes = job.work_units(target, by_group)
        counts = job.counts
        seen = np.zeros((len(job.groups), job.nsl), np.int64)
        for (s0, s1, g0, g1), size in zip(units, sizes, strict=True):
            seen[g0:g1, s0:s1] += 1
            assert size == int(counts[g0:g1, s0:s1].sum())
            # over the target only when one slice holds its ids (empty slices ride along),
            # and within that slice one table or the whole stack (ranges)
            if size > target:
                assert np.count_nonzero(counts[g0:g1, s0:s1].sum(axis=0)) == 1
                assert np.count_nonzero(counts[g0:g1, s0:s1]) == 1 or (g0, g1) == (0, len(job.groups))
        assert (seen == 1).all()
    assert job.work_units(float("inf"), True) == ([(0, job.nsl, 0, len(job.groups))], [job.num_ids])


@settings(max_examples=20, deadline=None)              # about 30 s without JIT (test_nojit)
@given(st.integers(0, 2**32 - 1))
def test_statistics_of_stacks_run_as_one_job_equal_each_stack_on_its_own(seed):
    """compute_stats runs neighbouring statistics-only stacks as one job (tables as groups):
    every stack's statistics equal those of that stack computed alone, at any thread count,
    and stacks that need the prefix cut (limits with dropping) stay jobs of their own."""
    from scwork.sharding import StackingPlan, compute_stats

    rng = np.random.default_rng(seed)
    G, S = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    topo = scwork.Topology(G, S)
    B = G * S * int(rng.integers(1, 5))
    tables = [TableSpec(f"t{i}", int(rng.choice([5, 300, 10**6])), 8,
                        max_ids_per_partition=int(rng.integers(1, 6)) if rng.random() < 0.3 else None)
              for i in range(int(rng.integers(2, 7)))]
    feats = [FeatureSpec(f"f{i}", tables[i % len(tables)]) for i in range(len(tables) + int(rng.integers(0, 3)))]
    data = {}
    for f in feats:
        lengths = np.where(rng.random(B) < 0.1, rng.integers(40, 90, B), rng.integers(0, 9, B))
        ids = np.where(rng.random(int(lengths.sum())) < 0.4, rng.integers(0, 3, int(lengths.sum())),
                       rng.integers(0, f.table.vocab_size, int(lengths.sum())))
        data[f.name] = (ids, np.concatenate([[0], np.cumsum(lengths)]))
    batch = FeatureBatch(data)
    names = [t.name for t in tables]
    cut = int(rng.integers(1, len(names)))
    for stacking in (None, [names[:cut], names[cut:]]):
        for cfg in (SparsecoreConfig(allow_id_dropping=True), SparsecoreConfig(allow_id_dropping=False,
                                                                              max_ids_per_chip_per_sample=None)):
            plan = plan_stacking(feats, topo, stacking, batch_size=B, config=cfg)
            runs = engine._merge_statistics_stacks(plan.stacks, cfg, B)
            # the runs keep the stacks' order; a stack needing the cut is alone
            flat = [s for r in runs for s in (r.parts if isinstance(r, engine._MergedStacks) else (r,))]
            assert [s.name for s in flat] == [s.name for s in plan.stacks]
            for r in runs:
                if isinstance(r, engine._MergedStacks):
                    assert len(r.parts) > 1
                    assert all(s.max_ids_per_partition is None or not cfg.allow_id_dropping for s in r.parts)
            merged_any = any(isinstance(r, engine._MergedStacks) for r in runs)
            try:
                whole = [compute_stats(batch, feats, topo, plan, cfg, num_threads=nt) for nt in (1, 3)]
            except scwork.errors.LimitExceededError:
                continue
            assert whole[0].equals(whole[1])
            for stack in plan.stacks:
                alone_plan = StackingPlan([stack], topo, plan.rotation, plan.batch_size)
                sub = batch.select([f.name for f in stack.features])
                alone = compute_stats(sub, list(stack.features), topo, alone_plan, cfg, num_threads=1)
                got = whole[0].sel(stack=[stack.name])
                for var in ("ids", "unique_ids", "kept_ids", "input_ids", "naive_ids_per_partition",
                            "naive_unique_ids_per_partition", "dropped_ids", "required_buffer_size_per_sc"):
                    assert np.array_equal(got[var].values, alone[var].values), (var, stack.name, merged_any)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.5, 60.0))
def test_cut_groups_matches_reference_and_the_greedy_cut(seed, target):
    """Task lists of a stack cut by groups: kernel = reference = the plain greedy cut, runs within target."""
    rng = np.random.default_rng(seed)
    ng, nsl = int(rng.integers(1, 9)), int(rng.integers(1, 7))
    counts = (rng.integers(0, 20, (ng, nsl)) * (rng.random((ng, nsl)) < 0.7)).astype(np.int64)
    got = []
    for fn in (SK.cut_groups, SK.cut_groups_reference):
        units = np.full((ng * nsl, 4), -7, np.int64)
        k = fn(counts, float(target), units)
        got.append([tuple(r) for r in units[:k].tolist()])
    greedy = []
    for sl in range(nsl):
        g0, acc = 0, 0
        for g in range(ng):
            if acc and acc + counts[g, sl] > target:
                greedy.append((sl, g0, g, acc))
                g0, acc = g, 0
            acc += int(counts[g, sl])
        greedy.append((sl, g0, ng, acc))
    assert got[0] == got[1] == greedy
    for sl, g0, g1, size in got[0]:
        assert size == counts[g0:g1, sl].sum()
        assert size <= target or counts[g0:g1, sl].max() == size       # over target: one group alone


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1.0, 7.0, 60.0, 500.0, float("inf")]))
def test_naive_tasks_cover_every_partition_of_every_group_once(seed, target):
    """Naive-view tasks (numpy for many groups, Python for few): round(ids / target) ranges per
    group (1 to P), edges P * k // parts, sizes the group's ids times the range's share."""
    import math

    batch, stack, G, S, rng = _stack(seed)
    job = engine._StackJob(stack, batch, G, S, False, SparsecoreConfig())
    P = job.P
    units, sizes = job.naive_tasks(target)
    expected_units, expected_sizes = [], []
    for g in range(len(job.groups)):
        num = int(job.counts[g].sum())
        parts = 1 if not math.isfinite(target) else min(P, max(1, round(num / target)))
        edges = [P * k // parts for k in range(parts + 1)]
        assert edges == sorted(set(edges))                  # strictly increasing: no empty range
        expected_units += [(g, a, b) for a, b in zip(edges, edges[1:])]
        expected_sizes += [num * (b - a) // P for a, b in zip(edges, edges[1:])]
    assert (units, sizes) == (expected_units, expected_sizes)
    # the numpy path (taken from 5 groups on): the same formula for a stack of 7 tables
    tables = [TableSpec(f"w{i}", int(rng.choice([5, 300, 10**6])), 8) for i in range(7)]
    feats = [FeatureSpec(f"x{i}", tables[i % 7]) for i in range(9)]
    B = G * S * 3
    data = {}
    for f in feats:
        lengths = rng.integers(0, 30, B)
        data[f.name] = (rng.integers(0, f.table.vocab_size, int(lengths.sum())),
                        np.concatenate([[0], np.cumsum(lengths)]))
    wide_batch = FeatureBatch(data)
    wide = plan_stacking(feats, scwork.Topology(G, S), [[t.name for t in tables]], batch_size=B).stacks[0]
    job7 = engine._StackJob(wide, wide_batch, G, S, False, SparsecoreConfig())
    u7, s7 = job7.naive_tasks(target)
    expected_units, expected_sizes = [], []
    for g in range(7):
        num = int(job7.counts[g].sum())
        parts = 1 if not math.isfinite(target) else min(P, max(1, round(num / target)))
        edges = [P * k // parts for k in range(parts + 1)]
        expected_units += [(g, a, b) for a, b in zip(edges, edges[1:])]
        expected_sizes += [num * (b - a) // P for a, b in zip(edges, edges[1:])]
    assert (u7, s7) == (expected_units, expected_sizes)


def _layout_case(rng):
    """Random counted stacks laid out in one block as the engine's jobs are: ``(block, table, nsl, rp_len)``."""
    nsl = int(rng.integers(1, 6))
    rows, pos, rp = [], 0, 0
    parts = []
    for _ in range(int(rng.integers(1, 5))):
        ng, P = int(rng.integers(1, 4)), int(rng.integers(1, 11))
        R = max(P, 8)
        split = int(rng.integers(0, 2))
        where = {}
        # the arrays in a shuffled order, with gaps, as a template's counters fall
        for name in rng.permutation(["count_pairs", "base", "used", "offs", "pad_lo", "pad_hi"]).tolist():
            pos += int(rng.integers(0, 3))
            where[name] = pos
            pos += {"count_pairs": ng * nsl * P, "offs": ng * nsl * P, "base": nsl, "used": nsl}.get(
                name, nsl * (P + 1))
        rows.append([where["count_pairs"], ng, P, R, split, where["base"], where["used"], where["offs"],
                     where["pad_lo"], where["pad_hi"], rp])
        parts.append((where["count_pairs"], ng * nsl * P))
        rp += nsl * R
    block = rng.integers(-50, 50, pos + 2).astype(np.int64)        # not zeroed: each output written where it must be
    for start, size in parts:
        # pairs per (group, slice, partition): zeros, small counts, counts on a multiple of 8
        block[start:start + size] = rng.integers(0, 30, size) * (rng.random(size) < 0.7) \
            + 8 * (rng.random(size) < 0.1)
    return block, np.array(rows, np.int64).reshape(len(rows), len(SK.COUNTED_LAYOUT_COLUMNS)), nsl, rp


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_counted_layouts_matches_reference(seed):
    """counted_layouts (one compiled pass over every counted stack) = its numpy reference, on random layouts:
    the same C, the same block (outside the layouts' places untouched) and row pointers."""
    rng = np.random.default_rng(seed)
    block, table, nsl, rp_len = _layout_case(rng)
    got = []
    for fn in (SK.counted_layouts, SK.counted_layouts_reference):
        b = block.copy()
        rp = np.full(rp_len, -3, np.int32)
        C = np.full(table.shape[0], -1, np.int64)
        fn(b, table, nsl, rp, C)
        got.append((b, rp, C))
    (b1, rp1, C1), (b2, rp2, C2) = got
    assert np.array_equal(C1, C2) and np.array_equal(b1, b2) and np.array_equal(rp1, rp2)
    assert (C1 >= 8).all() and (C1 % 8 == 0).all()
    # the counts are only read; a stack without split gets its C and slice bases, nothing else
    for j, (cp0, ng, P, R, split, b0, u0, o0, lo0, hi0, rp0) in enumerate(table.tolist()):
        assert np.array_equal(b1[cp0:cp0 + ng * nsl * P], block[cp0:cp0 + ng * nsl * P])
        assert b1[b0:b0 + nsl].tolist() == [sl * int(C1[j]) for sl in range(nsl)]
        if not split:
            assert np.array_equal(b1[u0:u0 + nsl], block[u0:u0 + nsl])
            assert (rp1[rp0:rp0 + nsl * R] == -3).all()


def test_counted_layouts_by_hand():
    """One stack, 2 groups, 2 slices, 2 partitions, 8 row pointers a slice: every output worked out."""
    # count_pairs[g, sl, p]: group 0 [[3, 0], [9, 1]], group 1 [[2, 5], [0, 0]]
    block = np.zeros(40, np.int64)
    block[:8] = [3, 0, 9, 1, 2, 5, 0, 0]
    table = np.array([[0, 2, 2, 8, 1, 8, 10, 12, 20, 26, 0]], np.int64)
    for fn in (SK.counted_layouts, SK.counted_layouts_reference):
        b, rp, C = block.copy(), np.zeros(16, np.int32), np.zeros(1, np.int64)
        fn(b, table, 2, rp, C)
        # pairs: slice 0 [5, 5] -> aligned [8, 8], used 16; slice 1 [9, 1] -> [16, 8], used 24: C 24
        assert C.tolist() == [24]
        assert b[8:10].tolist() == [0, 24]                         # base
        assert b[10:12].tolist() == [16, 24]                       # used
        # offs[g, sl, p]: group 0 at each stream's start, group 1 after group 0's pairs
        assert b[12:20].tolist() == [0, 8, 24, 40, 3, 8, 33, 41]
        assert b[20:26].tolist() == [5, 13, 16, 33, 41, 48]        # pad_lo: partitions' ends, slice's end
        assert b[26:32].tolist() == [8, 16, 24, 40, 48, 48]        # pad_hi
        assert rp.tolist() == [5, 13] + [16] * 6 + [9, 17] + [24] * 6


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.5, 80.0))
def test_cut_slices_matches_reference_and_each_stacks_ranges(seed, target):
    """Task lists of one-table stacks cut by slices in one call: kernel = reference = every stack's own
    greedy cut (_StackJob.ranges), runs within target unless one slice alone is larger."""
    rng = np.random.default_rng(seed)
    m, nsl = int(rng.integers(1, 6)), int(rng.integers(1, 7))
    counts = (rng.integers(0, 30, (m, nsl)) * (rng.random((m, nsl)) < 0.7)).astype(np.int64)
    target = float("inf") if rng.random() < 0.1 else target
    got = []
    for fn in (SK.cut_slices, SK.cut_slices_reference):
        units = np.full((m * nsl + m, 4), -7, np.int64)
        k = fn(counts, target, units)
        got.append([tuple(r) for r in units[:k].tolist()])
    assert got[0] == got[1]
    expected = []
    for j in range(m):
        job = engine._StackJob.__new__(engine._StackJob)
        job.nsl, job.slice_list, job.num_ids = nsl, counts[j].tolist(), int(counts[j].sum())
        expected += [(j, s0, s1, int(counts[j, s0:s1].sum())) for s0, s1 in job.ranges(target)]
    assert got[0] == expected
    for j, s0, s1, size in got[0]:
        # within target, or a slice larger than target alone (with empty slices at most)
        assert size <= target or np.count_nonzero(counts[j, s0:s1]) == 1
    assert [(j, s0) for j, s0, _, _ in got[0]] == sorted({(j, s0) for j, s0, _, _ in got[0]})


def test_units_of_one_table_jobs_in_one_call_equal_each_jobs_own():
    """_units over many one-table jobs (one compiled cut, tasks made when taken) = each job's tasks_of."""
    rng = np.random.default_rng(11)
    G, S, B = 2, 3, 24
    topo = scwork.Topology(G, S)
    tables = [TableSpec(f"t{i}", 500, 8) for i in range(7)]
    feats = [FeatureSpec(f"f{i}", tables[i]) for i in range(7)]
    data = {}
    for f in feats:
        lengths = rng.integers(0, 12, B)
        data[f.name] = (rng.integers(0, 500, int(lengths.sum())), np.concatenate([[0], np.cumsum(lengths)]))
    batch = FeatureBatch(data)
    plan = plan_stacking(feats, topo, None, batch_size=B)
    jobs = engine._jobs_of(plan, batch, G, S, True, SparsecoreConfig(), 16)
    for target in (1.0, 7.5, 30.0, 1e9, float("inf")):
        work, sizes = engine._units(jobs, target, lambda j: j.split_csr)
        items, item_sizes = [], []
        for j in jobs:
            its, szs = j.tasks_of(target, j.split_csr)
            items += list(its)
            item_sizes += list(szs)
        assert [tuple(w) for w in work] == items and list(sizes) == item_sizes
        assert [work[i] for i in range(len(work))] == items


@pytest.mark.parametrize("allow", [False, True])
def test_counted_and_configured_stacks_in_one_call_give_one_threads_csr(allow):
    """Stacks with a configured max_ids_per_partition (C known, not counted) between counted ones: the
    counted stacks' layout in one call (counted_layouts, rows for the counted stacks only) gives what
    one thread writes, at 8 and 16 threads (counted) and 2 (staged)."""
    rng = np.random.default_rng(23)
    G, S, B = 2, 2, 32
    topo = scwork.Topology(G, S)
    feats, data = [], {}
    for i in range(9):
        limit = 64 if i % 3 == 1 else None
        t = TableSpec(f"t{i}", int(rng.choice([50, 5000])), 8, combiner=str(rng.choice(["sum", "mean"])),
                      max_ids_per_partition=limit, max_unique_ids_per_partition=limit)
        feats.append(FeatureSpec(f"f{i}", t))
        lengths = rng.integers(0, 9, B)
        data[f"f{i}"] = (rng.integers(0, t.vocab_size, int(lengths.sum())), np.concatenate([[0], np.cumsum(lengths)]))
    batch = FeatureBatch(data)
    cfg = SparsecoreConfig(allow_id_dropping=allow)
    one = preprocess(batch, feats, topo, stacking=None, config=cfg, num_threads=1)
    for nt in (2, 8, 16):
        other = preprocess(batch, feats, topo, stacking=None, config=cfg, num_threads=nt)
        assert other.stats.equals(one.stats), nt
        for name, buf in one.csr.items():
            got = other.csr[name]
            assert got.buffer_size_per_sc == buf.buffer_size_per_sc, (nt, name)
            for field in ("row_pointers", "embedding_ids", "sample_ids", "gains"):
                assert np.array_equal(getattr(buf, field), getattr(got, field), equal_nan=True), (nt, name, field)
