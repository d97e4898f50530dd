"""Threads give the same results as one thread; the slice-major kernels equal their references.

The engine cuts each stack into ranges of (device, source SC) slices run by
``num_threads`` workers (:mod:`scwork.sharding.engine`), statistics-only stacks further
into ranges of tables, and counts the naive view from per-slice lists in tasks over
partition ranges. Whatever the split, the worker that runs a task, statistics, CSR buffers
(gains bit for bit), dropped ids and errors must be those of one thread, and those
of the literal reference (:mod:`scwork.sharding._reference`).
"""

from __future__ import annotations

import importlib
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import InputError, LimitExceededError, OutOfVocabularyError
from scwork.sharding import (
    FeatureBatch,
    FeatureSpec,
    SparsecoreConfig,
    TableSpec,
    _scratch,
    compute_stats,
    plan_stacking,
    preprocess,
)
from scwork.sharding import _kernels as K
from scwork.sharding import _naive_kernels as NK
from scwork.sharding._reference import reference_preprocess
from scwork.testing import garbage_empty

engine = importlib.import_module("scwork.sharding.engine")


# --------------------------------------------------------------------------------------
# random cases
# --------------------------------------------------------------------------------------
def _case(seed: int):
    """A random batch with several stacks, weights, combiners, limits and dropping."""
    rng = np.random.default_rng(seed)
    G, S = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    topo = scwork.Topology(G, S)
    GS = G * S
    comb = str(rng.choice(["sum", "mean", "sqrtn"]))
    limits = rng.random() < 0.5
    nt = int(rng.integers(1, 5))
    tables = []
    for i in range(nt):
        vocab = int(rng.choice([int(rng.integers(1, 50)), int(rng.integers(50, 5000)), 10**8]))
        tables.append(TableSpec(
            f"t{i}", vocab, int(rng.integers(1, 20)), combiner=comb,
            max_ids_per_partition=int(rng.integers(1, 12)) if limits and rng.random() < 0.7 else None,
            max_unique_ids_per_partition=int(rng.integers(1, 8)) if limits and rng.random() < 0.5 else None))
    feats = [FeatureSpec(f"f{i}", tables[int(rng.integers(0, nt))]) for i in range(int(rng.integers(1, 6)))]
    B = GS * int(rng.integers(1, 9))
    data = {}
    for f in feats:
        lengths = rng.integers(0, 9, size=B)
        vocab = f.table.vocab_size
        hot = rng.integers(0, vocab, size=4)
        m = int(lengths.sum())
        ids = np.where(rng.random(m) < 0.4, rng.choice(hot, size=m), rng.integers(0, vocab, size=m))
        rs = np.concatenate([[0], np.cumsum(lengths)])
        data[f.name] = (ids, rs, rng.uniform(0.5, 2, m)) if rng.random() < 0.5 else (ids, rs)
    used = sorted({f.table.name for f in feats})
    stacking = [None, [used], "auto"][int(rng.integers(0, 3))]
    cfg = SparsecoreConfig(allow_id_dropping=bool(rng.random() < 0.8), max_ids_per_chip_per_sample=None)
    return FeatureBatch(data), feats, topo, stacking, cfg


def _assert_same_preprocess(a, b):
    assert a.stats.equals(b.stats)
    assert a.csr.keys() == b.csr.keys()
    for name, buf in a.csr.items():
        other = b.csr[name]
        assert buf.buffer_size_per_sc == other.buffer_size_per_sc
        for key in ("row_pointers", "embedding_ids", "sample_ids"):
            assert np.array_equal(getattr(buf, key), getattr(other, key)), (name, key)
        assert np.array_equal(buf.gains.view(np.int32), other.gains.view(np.int32)), name   # bit for bit
    assert a.dropped.equals(b.dropped)


def _run_or_error(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (LimitExceededError, InputError) as err:
        return err


def _assert_same_outcome(a, b):
    if isinstance(a, Exception) or isinstance(b, Exception):
        assert type(a) is type(b) and str(a) == str(b)
    elif hasattr(a, "csr"):
        _assert_same_preprocess(a, b)
    else:
        assert a.equals(b)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_threads_give_the_results_of_one_thread(seed):
    batch, feats, topo, stacking, cfg = _case(seed)
    one = {}
    for fn in (preprocess, compute_stats):
        one[fn] = _run_or_error(fn, batch, feats, topo, stacking, cfg)
        for nt in (2, 3, 8):
            _assert_same_outcome(one[fn], _run_or_error(fn, batch, feats, topo, stacking, cfg, num_threads=nt))
    # preprocess counts CSR sizes first at every thread count (_COUNT_FIRST_THREADS); the
    # staged path (slices at a bounding stride, moved left) must give the same
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "_COUNT_FIRST_THREADS", 10**6)
        for nt in (1, 3):
            _assert_same_outcome(one[preprocess],
                                 _run_or_error(preprocess, batch, feats, topo, stacking, cfg, num_threads=nt))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_threads_match_the_literal_reference(seed):
    batch, feats, topo, stacking, cfg = _case(seed)
    cfg = SparsecoreConfig(allow_id_dropping=True, max_ids_per_chip_per_sample=None)
    plan = plan_stacking(feats, topo, stacking, batch_size=batch.batch_size, config=cfg)
    ref = reference_preprocess(batch, plan, topo, allow_id_dropping=True)
    res = preprocess(batch, feats, topo, stacking, cfg, num_threads=2)
    stats = compute_stats(batch, feats, topo, stacking, cfg, num_threads=2)
    for name, r in ref.items():
        s = res.stats.sel(stack=name)
        assert np.array_equal(s["ids"].values, r["ids"])
        assert np.array_equal(s["unique_ids"].values, r["unique"])
        assert np.array_equal(s["kept_ids"].values, r["kept"])
        assert np.array_equal(s["naive_unique_ids_per_partition"].values, r["naive_unique"])
        assert s["dropped_ids"].item() == r["dropped"]
        buf = res.csr[name]
        assert buf.buffer_size_per_sc == r["buffer_size_per_sc"]
        for key in ("row_pointers", "embedding_ids", "sample_ids"):
            assert np.array_equal(getattr(buf, key), r[key])
        assert np.array_equal(buf.gains, r["gains"], equal_nan=True)
        d = res.dropped[res.dropped["stack"] == name]
        got = sorted(zip(d["device"], d["sc"], d["partition"], d["sample"], d["feature"], d["id"], d["count"]))
        assert got == r["drops"]
    assert stats.equals(res.stats)


@pytest.mark.parametrize("stacking", [None, "auto", "one"])
def test_fine_splits_agree(monkeypatch, stacking):
    """Many tasks per stack (one slice, one table, one partition each) give the same results."""
    rng = np.random.default_rng(5)
    topo = scwork.Topology(2, 4)
    B = 8 * 40
    feats, data = [], {}
    for i, vocab in enumerate([100, 5000, 10**6, 10**9]):
        t = TableSpec(f"t{i}", vocab, 8, combiner="mean")
        for j in range(2):
            name = f"f{i}_{j}"
            feats.append(FeatureSpec(name, t))
            lengths = rng.integers(0, 12, size=B)
            m = int(lengths.sum())
            ids = np.where(rng.random(m) < 0.3, rng.integers(0, 3, m), rng.integers(0, vocab, m))
            rs = np.concatenate([[0], np.cumsum(lengths)])
            data[name] = (ids, rs, rng.uniform(0.5, 2, m)) if i % 2 else (ids, rs)   # weighted and not
    batch = FeatureBatch(data)
    if stacking == "one":
        stacking = [[f"t{i}" for i in range(4)]]
    base = preprocess(batch, feats, topo, stacking)
    base_stats = compute_stats(batch, feats, topo, stacking)
    monkeypatch.setattr(engine, "_TASKS_PER_THREAD", 64)          # every slice its own task
    for nt in (2, 4):
        _assert_same_preprocess(base, preprocess(batch, feats, topo, stacking, num_threads=nt))
        assert base_stats.equals(compute_stats(batch, feats, topo, stacking, num_threads=nt))
    monkeypatch.setattr(engine, "_TASKS_PER_THREAD", 10**6)       # slices cut by tables, naive by partition
    for nt in (2, 3, 5):
        _assert_same_preprocess(base, preprocess(batch, feats, topo, stacking, num_threads=nt))
        assert base_stats.equals(compute_stats(batch, feats, topo, stacking, num_threads=nt))
    monkeypatch.setattr(engine, "_COUNT_FIRST_THREADS", 1)        # CSR sizes counted first, written by tables
    for nt in (1, 2, 3, 5):
        _assert_same_preprocess(base, preprocess(batch, feats, topo, stacking, num_threads=nt))


def test_workers_sharing_a_stack_give_the_results_of_one_thread(monkeypatch):
    """Every stack's tasks spread over both workers (lists merged by the naive tasks)."""
    import threading
    import time

    batch, feats = _big_case()
    topo = scwork.Topology(2, 4)
    cfg = SparsecoreConfig(allow_id_dropping=True, max_ids_per_chip_per_sample=None)
    one = {fn: fn(batch, feats, topo, "auto", cfg) for fn in (preprocess, compute_stats)}
    ran = []

    def slowed(method):
        def run(self, *args, **kwargs):
            ran.append((self.stack.name, threading.get_ident()))
            time.sleep(0.002)              # lets the other worker take the next range
            return method(self, *args, **kwargs)
        return run

    monkeypatch.setattr(engine._StackJob, "run_slices", slowed(engine._StackJob.run_slices))
    monkeypatch.setattr(engine._StackJob, "run_groups", slowed(engine._StackJob.run_groups))
    monkeypatch.setattr(engine, "_TASKS_PER_THREAD", 8)
    for fn in (preprocess, compute_stats):
        ran.clear()
        _assert_same_outcome(one[fn], fn(batch, feats, topo, "auto", cfg, num_threads=2))
        by_stack = {}
        for name, ident in ran:
            by_stack.setdefault(name, set()).add(ident)
        assert any(len(idents) == 2 for idents in by_stack.values()), by_stack


def _big_case():
    """Two stacked and one lone table, weights, limits that drop ids: many slices each."""
    rng = np.random.default_rng(17)
    B = 8 * 64
    feats, data = [], {}
    tables = [TableSpec("ta", 3000, 8, combiner="sqrtn", max_ids_per_partition=6, max_unique_ids_per_partition=5),
              TableSpec("tb", 200, 8, combiner="sqrtn"), TableSpec("tc", 10**6, 8, combiner="sqrtn")]
    for i, t in enumerate(tables * 2):
        name = f"f{i}"
        feats.append(FeatureSpec(name, t))
        lengths = rng.integers(0, 10, size=B)
        m = int(lengths.sum())
        ids = np.where(rng.random(m) < 0.3, rng.integers(0, 5, m), rng.integers(0, t.vocab_size, m))
        rs = np.concatenate([[0], np.cumsum(lengths)])
        data[name] = (ids, rs, rng.uniform(0.5, 2, m)) if i % 2 else (ids, rs)
    return FeatureBatch(data), feats


@pytest.mark.parametrize("nt", [1, 2, 3, 5])
def test_naive_view_for_small_and_huge_vocabularies(monkeypatch, nt):
    """Partition-range tasks count the union of the slices' lists (bitmap range or sort)."""
    batch = FeatureBatch.from_ragged({"a": (np.arange(4000) % 1000, np.arange(0, 4001, 10)),
                                      "b": (np.arange(4000) % 7, np.arange(0, 4001, 10))})
    feats = [FeatureSpec("a", TableSpec("big", 10**9, 8)), FeatureSpec("b", TableSpec("small", 1000, 8))]
    topo = scwork.Topology(2, 2)
    monkeypatch.setattr(engine, "_TASKS_PER_THREAD", 10**6)
    stats = compute_stats(batch, feats, topo, None, num_threads=nt)
    big = stats["naive_unique_ids_per_partition"].sel(stack="big").values
    assert big.tolist() == np.bincount(np.arange(1000) % 4, minlength=4).tolist()
    small = stats["naive_unique_ids_per_partition"].sel(stack="small").values
    assert small.tolist() == np.bincount(np.arange(7) % 4, minlength=4).tolist()


def test_every_csr_slot_is_written_with_threads(monkeypatch):
    """Buffers come from np.empty: garbage first, then compare with one clean thread."""
    clean = {}
    for seed in range(8):
        batch, feats, topo, stacking, cfg = _case(seed)
        clean[seed] = _run_or_error(preprocess, batch, feats, topo, stacking, cfg)
    garbage_empty(monkeypatch, engine)
    for seed in range(8):
        batch, feats, topo, stacking, cfg = _case(seed)
        _assert_same_outcome(clean[seed], _run_or_error(preprocess, batch, feats, topo, stacking, cfg,
                                                        num_threads=2))


# --------------------------------------------------------------------------------------
# errors are those of a stack-by-stack, group-by-group run
# --------------------------------------------------------------------------------------
def _errors_batch():
    rng = np.random.default_rng(3)
    B = 64
    data = {}
    for name in ("a", "b", "c"):
        lengths = rng.integers(1, 6, size=B)
        data[name] = (rng.integers(0, 50, size=int(lengths.sum())), np.concatenate([[0], np.cumsum(lengths)]))
    return data, B


@pytest.mark.parametrize("stacking", [None, [["ta", "tb", "tc"]]])
def test_out_of_vocabulary_error_is_the_same_with_threads(stacking):
    data, B = _errors_batch()
    ids_b, rs_b = data["b"]
    ids_c, rs_c = data["c"]
    ids_b = ids_b.copy()
    ids_c = ids_c.copy()
    ids_c[rs_c[5]] = 99                     # table c: an early slice
    ids_b[rs_b[B - 3]] = 77                 # table b: the last slice, but b comes first
    ids_b[rs_b[B - 2]] = 88
    data = dict(data, b=(ids_b, rs_b), c=(ids_c, rs_c))
    feats = [FeatureSpec(n, TableSpec(f"t{n}", 50, 8)) for n in ("a", "b", "c")]
    batch = FeatureBatch(data)
    topo = scwork.Topology(2, 4)
    errors = []
    for nt in (1, 2, 3):
        for fn in (compute_stats, preprocess):
            with pytest.raises(OutOfVocabularyError) as info:
                fn(batch, feats, topo, stacking, num_threads=nt)
            errors.append((info.value.feature, info.value.sample, info.value.id, info.value.count))
    assert set(errors) == {("b", B - 3, 77, 3)}
    dropped = [compute_stats(batch, feats, topo, stacking, on_out_of_vocabulary="drop", num_threads=nt)
               for nt in (1, 2)]
    assert dropped[0].equals(dropped[1]) and int(dropped[0]["out_of_vocabulary_ids"].sum()) == 3


def test_zero_weight_error_is_the_same_with_threads():
    data, B = _errors_batch()
    weights = {}
    for name, (ids, rs) in data.items():
        w = np.ones(ids.size, np.float32)
        weights[name] = w
    w = weights["c"]
    rs = data["c"][1]
    w[rs[B - 1]:rs[B]] = 0.0               # table c, last sample: divisor 0
    batch = FeatureBatch({n: (ids, rs, weights[n]) for n, (ids, rs) in data.items()})
    feats = [FeatureSpec(n, TableSpec(f"t{n}", 50, 8, combiner="mean")) for n in ("a", "b", "c")]
    topo = scwork.Topology(2, 4)
    messages = set()
    for nt in (1, 2, 3):
        with pytest.raises(InputError, match="weights sum to 0") as info:
            preprocess(batch, feats, topo, [["ta", "tb", "tc"]], num_threads=nt)
        messages.add(str(info.value))
    expected = (f"feature 'c', sample {B - 1}: the weights sum to 0, so the 'mean' combiner divides by 0 "
                "(gains would be NaN or infinite); give that sample non-zero weights or use combiner='sum'")
    assert messages == {expected}
    compute_stats(batch, feats, topo, [["ta", "tb", "tc"]], num_threads=2)   # no gains: no error


def test_limit_error_is_the_same_with_threads():
    data, _ = _errors_batch()
    batch = FeatureBatch(data)
    feats = [FeatureSpec(n, TableSpec(f"t{n}", 50, 8, max_ids_per_partition=3 if n != "a" else None))
             for n in ("a", "b", "c")]
    topo = scwork.Topology(2, 4)
    messages = set()
    for nt in (1, 2, 3):
        for fn in (compute_stats, preprocess):
            with pytest.raises(LimitExceededError) as info:
                fn(batch, feats, topo, None, num_threads=nt)
            messages.add((info.value.stack, str(info.value)))
    assert len(messages) == 1 and next(iter(messages))[0] == "tb"


# --------------------------------------------------------------------------------------
# the slice-major kernels against their references
# --------------------------------------------------------------------------------------
def _group(seed):
    rng = np.random.default_rng(seed)
    nsl, n = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    K_ = int(rng.integers(1, 4))
    F = K_ + 1
    B = nsl * n
    vocab = int(rng.choice([int(rng.integers(1, 60)), 2**31 - 1]))
    lengths = rng.integers(0, 7, size=(F, B))
    hot = rng.integers(0, vocab, size=3)
    ids, splits, off = [], np.zeros((F, B + 1), np.int64), 0
    for f in range(F):
        m = int(lengths[f].sum())
        ids.append(np.where(rng.random(m) < 0.5, rng.choice(hot, m), rng.integers(0, vocab, m)).astype(np.int64))
        splits[f, 0] = off
        splits[f, 1:] = off + np.cumsum(lengths[f])
        off += m
    P = int(rng.integers(1, 12))
    k = np.sort(rng.permutation(K_)[:int(rng.integers(1, K_ + 1))]).astype(np.int64)
    return {"ids": np.concatenate(ids), "splits": splits, "weights": rng.choice(np.float32([0.5, 1, 2, 3]), off),
            "has_w": (rng.random(F) < 0.5).astype(np.int8), "feat_rows": rng.permutation(F)[:k.size].astype(np.int64),
            "feat_k": k, "n": n, "nsl": nsl, "K": K_, "vocab": vocab, "P": P, "col_shift": int(rng.integers(0, P)),
            "qbits": ((vocab - 1) // P).bit_length(), "lbits": (K_ * n - 1).bit_length(), "rng": rng}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 2]), st.booleans())
def test_sort_slice_is_sort_group_restricted_to_the_slice(seed, combiner, want_gains):
    c = _group(seed)
    total = c["ids"].size + 1
    args = (c["ids"], c["splits"], c["weights"], c["has_w"], c["feat_rows"], c["feat_k"], combiner, c["n"])
    keys, gains = np.zeros(total, np.int64), np.zeros(total, np.float32)
    m, oov, bad = K.sort_group(*args, c["nsl"], c["K"], c["vocab"], c["P"], c["col_shift"], c["qbits"], c["lbits"],
                               want_gains, keys, gains, np.empty(total, np.int64), np.empty(total, np.float32),
                               np.empty(3 * 2048, np.int64))
    assert oov == -1
    slice_of = (keys[:m] & 0xFFFFFFFF) >> c["lbits"]
    bads = []
    for fn in (K.sort_slice, K.sort_slice_reference):
        for sl in range(c["nsl"]):
            out_k, out_g = np.full(total, -5, np.int64), np.full(total, -5, np.float32)
            ms, oov_s, bad_s = fn(*args, sl, c["vocab"], c["P"], c["col_shift"], c["qbits"], c["lbits"], want_gains,
                                  out_k, out_g, np.empty(total, np.int64), np.empty(total, np.float32),
                                  np.empty(total, np.int64), np.empty(total, np.float32),
                                  np.empty(3 * 2048, np.int64))
            mine = slice_of == sl
            assert oov_s == -1 and ms == mine.sum()
            assert np.array_equal(out_k[:ms], keys[:m][mine])
            if want_gains and bad < 0:
                assert np.array_equal(out_g[:ms].view(np.int32), gains[:m][mine].view(np.int32))
            if bad_s >= 0:
                bads.append(bad_s)
    if want_gains and combiner:
        assert (min(bads) if bads else -1) == bad      # slice order is the group's build order


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_count_slice_matches_reference(seed, use_bitmap):
    c = _group(seed)
    total = c["ids"].size + 1
    sl = int(c["rng"].integers(0, c["nsl"]))
    keys = np.zeros(total, np.int64)
    m, _, _ = K.sort_slice(c["ids"], c["splits"], c["weights"], c["has_w"], c["feat_rows"], c["feat_k"], 0, c["n"],
                           sl, c["vocab"], c["P"], c["col_shift"], c["qbits"], c["lbits"], False, keys,
                           np.zeros(1, np.float32), np.empty(total, np.int64), np.zeros(1, np.float32),
                           np.empty(total, np.int64), np.zeros(1, np.float32), np.empty(3 * 2048, np.int64))
    words = ((c["P"] << c["qbits"]) + 63) >> 6 if use_bitmap else 1
    outs = []
    for fn in (K.count_slice, K.count_slice_reference):
        pairs = np.full(c["nsl"] * c["P"], 2, np.int64)
        distinct = np.zeros(c["nsl"] * c["P"], np.int64)
        bitmap = np.zeros(words + 3, np.int64)
        ulist = np.full(total + 5, -1, np.int64)
        nu = fn(keys, m, c["P"], c["qbits"], sl * c["P"], pairs, distinct, use_bitmap, bitmap, 3, ulist, 5)
        outs.append((pairs, distinct, bitmap, ulist[:5 + nu] if not use_bitmap else ulist[:5], nu))
    for a, b in zip(*outs):
        assert np.array_equal(a, b)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_naive_counts_match_references(seed):
    rng = np.random.default_rng(seed)
    P, qbits = int(rng.integers(1, 20)), int(rng.choice([0, 3, 6, 8, 24]))
    u = rng.integers(0, P << qbits, size=int(rng.integers(0, 300)))
    expect = np.bincount(np.unique(u) >> qbits, minlength=P)
    # each segment a sorted run of distinct values (one slice), with gaps between
    segs = np.array_split(u, int(rng.integers(1, 5)))
    ulist = np.full(u.size + 10 * len(segs), -9, np.int64)
    starts, lens, pos = [], [], 0
    for s in segs:
        s = np.unique(s)
        ulist[pos:pos + s.size] = s
        starts.append(pos)
        lens.append(s.size)
        pos += s.size + 3
    p0 = int(rng.integers(0, P))
    p1 = int(rng.integers(p0 + 1, P + 1))
    inside = np.zeros(P, bool)
    inside[p0:p1] = True
    for fn in (NK.naive_from_slice_lists, NK.naive_from_slice_lists_reference):
        naive = np.ones(P, np.int64)
        fn(ulist, np.array(starts, np.int64), np.array(lens, np.int64), qbits, p0, p1, naive)
        assert np.array_equal(naive, np.where(inside, expect, 0) + 1)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_compact_slices_matches_reference(seed):
    rng = np.random.default_rng(seed)
    nsl = int(rng.integers(1, 6))
    used = rng.integers(0, 5, size=nsl).astype(np.int64) * 8
    C = max(8, int(used.max())) + 8 * int(rng.integers(0, 2))
    stride = C + int(rng.integers(0, 30))
    outs = []
    for fn in (K.compact_slices, K.compact_slices_reference):
        emb = np.arange(nsl * stride, dtype=np.int32)
        smp = emb + 1000
        gout = emb.astype(np.float32) / 2
        fn(emb, smp, gout, stride, used, nsl, C)
        outs.append((emb[:nsl * C], smp[:nsl * C], gout[:nsl * C].view(np.int32)))
        for sl in range(nsl):                     # data moved, the rest padded
            region = slice(sl * C, sl * C + int(used[sl]))
            assert np.array_equal(emb[region], np.arange(sl * stride, sl * stride + used[sl]))
            assert (emb[sl * C + used[sl]:(sl + 1) * C] == K.PAD_ID).all()
            assert np.isnan(gout[sl * C + used[sl]:(sl + 1) * C]).all()
    for a, b in zip(*outs):
        assert np.array_equal(a, b)


def _stack_case(seed):
    """A random stack through the engine's own tables, for the kernel-level comparison."""
    batch, feats, topo, stacking, cfg = _case(seed)
    plan = plan_stacking(feats, topo, stacking, batch_size=batch.batch_size, config=cfg)
    return batch, plan, topo, cfg


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_stack_slices_matches_reference(seed, want_csr):
    batch, plan, topo, cfg = _stack_case(seed)
    G, S = topo.num_devices, topo.sparsecores_per_device
    weights, has_w = engine._weights_of(batch)
    kern = {"numba": engine._Backend("numba"), "numpy": engine._Backend("numpy")}
    for stack in plan.stacks:
        outs = {}
        for backend, kb in kern.items():
            job = engine._StackJob(stack, batch, G, S, want_csr, cfg)
            if job.counted:               # C counted first, as _execute does
                job.count_task(kb, batch, 0, job.nsl)
                job.set_counted_size()
            needs = job.scratch_needs()
            sc = {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64) for k, v in needs.items()}
            job.ulist = np.full(job.ulist_size, -7, np.int64)
            size = job.out_size
            job.emb, job.smp = np.full(size, -3, np.int32), np.full(size, -3, np.int32)
            job.gout = np.full(size, -3, np.float32)
            job.row_pointers[:] = -3
            s0 = int(np.random.default_rng(seed).integers(0, job.nsl))
            t1 = job.run_slices(kb, batch, weights, has_w, 0, s0, 0, sc)      # two tasks
            t2 = job.run_slices(kb, batch, weights, has_w, s0, job.nsl, 0, sc)
            recs = np.concatenate([t1["drops"], t2["drops"]])
            rg = np.concatenate([t1["drop_g"], t2["drop_g"]])
            order = np.lexsort(recs.T[::-1]) if recs.size else np.zeros(0, np.int64)
            lists = [job.ulist[s:s + c] for s, c in zip((job.g_uloff[:, None] + job.g_sloff[:, :-1]).ravel(),
                                                         job.ul_cnt)]
            outs[backend] = [job.pairs, job.distinct, job.kept, job.dropped, *lists, job.ul_cnt,
                             np.concatenate([t1["oov"], t2["oov"], t1["bad"], t2["bad"]])]
            max_ids, max_uniq = engine._limits(stack)
            error = not cfg.allow_id_dropping and ((job.pairs > max_ids).any() or (job.distinct > max_uniq).any())
            if not error:    # else the caller raises: what the kernels leave in the buffers is unspecified
                outs[backend] += [job.used, job.emb, job.smp, job.gout.view(np.int32), job.row_pointers, recs[order],
                                  rg[order]]
        for a, b in zip(outs["numba"], outs["numpy"], strict=True):
            assert np.array_equal(a, b)


# --------------------------------------------------------------------------------------
# recycled buffers
# --------------------------------------------------------------------------------------
def test_csr_buffers_are_recycled_only_when_no_array_uses_them():
    import gc

    from scwork.sharding._synthetic import synthetic_batch

    batch, feats = synthetic_batch(batch_size=2048, num_features=8, vocab_size=10**5, seed=1)
    other, _ = synthetic_batch(batch_size=2048, num_features=8, vocab_size=10**5, seed=2)
    topo = scwork.Topology(2, 4)
    _scratch._POOL.clear()
    res = preprocess(batch, feats, topo, None, num_threads=2)
    keep = {name: (buf.embedding_ids.copy(), buf.sample_ids.copy(), buf.gains.copy()) for name, buf in res.csr.items()}
    view = res.csr["t0"].embedding_ids[0, 3:9]
    first = view.copy()
    gc.collect()
    in_use = view.ctypes.data                         # in use: in no pooled buffer
    assert not any(b.ctypes.data <= in_use < b.ctypes.data + b.size for b in _scratch._POOL.free)
    del res
    for _ in range(3):                                 # other calls must not write into it
        preprocess(other, feats, topo, None, num_threads=2)
    gc.collect()
    held = len(_scratch._POOL.free)
    assert np.array_equal(view, first)
    del view
    gc.collect()
    assert len(_scratch._POOL.free) == held + 1        # the last view gone, the buffer is back
    again = preprocess(batch, feats, topo, None, num_threads=2)      # reused memory, same results
    for name, (e, s, g) in keep.items():
        buf = again.csr[name]
        assert np.array_equal(buf.embedding_ids, e) and np.array_equal(buf.sample_ids, s)
        assert np.array_equal(buf.gains.view(np.int32), g.view(np.int32))
    _scratch._POOL.clear()
    assert _scratch._POOL.free == []


def test_a_grown_buffer_replaces_the_free_one_it_outgrew():
    """A request no free buffer fits drops the free buffers between half its size and its size
    (its own predecessors, from smaller batches); smaller and fitting ones stay. A dataset's
    shards growing in turn kept one stale copy per size otherwise."""
    pool = _scratch._BufferPool()
    huge = _scratch._HUGE_PAGE
    small, stale, large = pool.take(huge), pool.take(8 * huge), pool.take(40 * huge)
    for buf in (small, stale, large):
        pool.give(buf)
    del buf
    grown = pool.take(10 * huge)           # no fit (8 < 10, 40 > 2 x 10): allocated, the 8 dropped
    assert grown.size == 10 * huge
    assert sorted(b.size for b in pool.free) == [huge, 40 * huge]
    pool.give(grown)
    again = pool.take(9 * huge)            # fits the grown one (9 <= 10 <= 18): nothing dropped
    assert again.ctypes.data == grown.ctypes.data
    assert sorted(b.size for b in pool.free) == [huge, 40 * huge]
    pool.give(again)
    assert pool.take(80 * huge).size == 80 * huge      # 40 is exactly half of 80: dropped too
    assert sorted(b.size for b in pool.free) == [huge, 10 * huge]


def test_default_uses_every_available_core_and_one_stays_available():
    """num_threads=None (the default) is every core of the process's affinity mask, as
    jax-tpu-embedding's thread pool; 1 runs on the calling thread; bad values are typed."""
    import inspect

    import scwork
    from scwork.errors import ConfigError
    from scwork.sharding import (
        FeatureBatch,
        FeatureSpec,
        TableSpec,
        collect_stats,
        compute_stats,
        minibatch,
        preprocess,
    )
    from scwork.sharding._threads import available_cores, resolve_num_threads

    for fn in (compute_stats, preprocess, collect_stats, minibatch):
        assert inspect.signature(fn).parameters["num_threads"].default is None, fn.__name__
    assert resolve_num_threads(None) == available_cores() >= 1
    assert resolve_num_threads(1) == 1
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ConfigError, match="num_threads"):
            resolve_num_threads(bad)
    batch = FeatureBatch.from_ragged({"f": (list(range(64)), list(range(0, 65, 4)))})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8))]
    topo = scwork.Topology(2, 2)
    default = compute_stats(batch, feats, topo)
    single = compute_stats(batch, feats, topo, num_threads=1)
    assert default.identical(single)
    plan = minibatch(batch, feats, topo)
    assert plan.num_threads == available_cores()


def test_overlap_runs_while_the_other_workers_run_tasks():
    """The calling thread's overlapped work really runs concurrently with the tasks.

    A task waits for an event that only the overlap sets, and the overlap waits for
    an event only a task sets: run one after the other, either would time out.
    """
    from scwork.sharding._threads import _run_tasks

    task_started, overlap_ran = threading.Event(), threading.Event()

    def task(item, worker):
        task_started.set()
        assert overlap_ran.wait(10), "the overlap did not run while a task was running"
        return item + 1

    def overlap():
        assert task_started.wait(10), "no task started while the overlap ran"
        overlap_ran.set()

    assert _run_tasks(task, [1, 2], [1, 1], 2, overlap=overlap) == [2, 3]


def test_overlap_runs_first_with_one_thread_and_its_error_stops_the_workers():
    from scwork.sharding._threads import _run_tasks

    seen = []
    assert _run_tasks(lambda x, w: seen.append(x) or x, [1, 2], [1, 1], 1,
                      overlap=lambda: seen.append("overlap")) == [1, 2]
    assert seen == ["overlap", 1, 2]
    done = []

    def slow(item, worker):
        time.sleep(0.05)
        done.append(item)

    def fail():
        raise KeyError("from the overlap")

    with pytest.raises(KeyError, match="from the overlap"):
        _run_tasks(slow, list(range(40)), [1] * 40, 2, overlap=fail)
    # the worker stopped after its current task: far fewer than 40 ran, and none runs later
    n = len(done)
    assert n < 40
    time.sleep(0.2)
    assert len(done) == n


@pytest.mark.parametrize("num_threads", [1, 3])
def test_overlap_steps_run_in_order_once(num_threads):
    from scwork.sharding._profile import call, profiled
    from scwork.sharding._threads import _run_tasks

    seen = []
    steps = [lambda i=i: seen.append(i) for i in range(5)]
    assert _run_tasks(lambda x, w: -x, [1, 2, 3], [1, 1, 1], num_threads, overlap=steps) == [-1, -2, -3]
    assert seen == [0, 1, 2, 3, 4]
    seen.clear()
    with profiled(num_threads) as profiles, call():
        _run_tasks(lambda x, w: -x, [1, 2, 3], [1, 1, 1], num_threads, overlap=tuple(steps))
    assert seen == [0, 1, 2, 3, 4] and len(profiles[0].overlaps) == 1


@pytest.mark.parametrize("num_threads", [2, 4])
def test_overlapped_steps_wait_for_every_worker_to_start(monkeypatch, num_threads):
    """The calling thread runs its overlapped steps only once each woken worker has taken a
    task: a worker needs the GIL to start one, which the steps' Python would hold."""
    from scwork.sharding import _threads

    monkeypatch.setattr(_threads, "_START_GATE_S", 30.0)     # no time-out on a loaded machine
    # the steps' own hand-over (sleep(0) before each) lets in only the workers already
    # waiting for the GIL: without it the gate alone decides
    monkeypatch.setattr(_threads, "let_workers_run", lambda: None)
    started, seen_by_step = [], []

    def task(item, worker):
        started.append(worker)
        time.sleep(0.02)                                      # without the GIL, as a kernel
        return item

    items = list(range(3 * num_threads))
    assert _threads._run_tasks(task, items, [1] * len(items), num_threads,
                               overlap=lambda: seen_by_step.append(set(started))) == items
    assert set(range(1, num_threads)) <= seen_by_step[0]
    # switched off, the steps start at once, before a woken worker can take the GIL
    monkeypatch.setattr(_threads, "_START_GATE_S", 0.0)
    started.clear()
    assert _threads._run_tasks(task, items, [1] * len(items), num_threads,
                               overlap=lambda: seen_by_step.append(set(started))) == items
    assert not set(range(1, num_threads)) <= seen_by_step[1]


def test_the_start_gate_opens_with_the_last_worker_or_times_out():
    from scwork.sharding._threads import _StartGate

    gate = _StartGate(3)
    gate.started()
    gate.started()
    t0 = time.perf_counter()
    assert gate.wait(0.05) is False                           # one worker has not started
    assert time.perf_counter() - t0 >= 0.04
    gate.started()
    assert gate.wait(10) is True
    one = _StartGate(1)
    threading.Thread(target=one.started).start()
    assert one.wait(10) is True


def test_the_gil_is_let_go_only_while_pooled_workers_run(monkeypatch):
    """let_workers_run sleeps (hands the GIL over) inside a call with worker threads, between
    overlapped steps and in tasks, and not at all with one thread or after the call."""
    from scwork.sharding import _threads

    sleeps = []
    monkeypatch.setattr(_threads.time, "sleep", lambda s: sleeps.append(s))
    _threads.let_workers_run()
    assert sleeps == []
    _threads._run_tasks(lambda x, w: _threads.let_workers_run() or x, [1, 2, 3], [1, 1, 1], 1,
                        overlap=[lambda: None, lambda: None])
    assert sleeps == []
    in_tasks = []

    def task(x, w):
        before = len(sleeps)
        _threads.let_workers_run()
        in_tasks.append(len(sleeps) - before)
        return x

    assert _threads._run_tasks(task, [1, 2, 3, 4], [1, 1, 1, 1], 3, overlap=[lambda: None, lambda: None]) \
        == [1, 2, 3, 4]
    assert sleeps.count(0) >= 2 and in_tasks == [1, 1, 1, 1]
    assert _threads._helpers_running == 0
    sleeps.clear()
    _threads.let_workers_run()
    assert sleeps == []


# --------------------------------------------------------------------------------------
# parked worker threads (_threads._WorkerPool): reused, per call, nested, after fork
# --------------------------------------------------------------------------------------
def _checked_task(active: dict, lock: threading.Lock, num_threads: int, clash: list):
    """A task recording its worker index while it runs; ``clash`` gets any index used by two
    tasks of the same call at once, or one not below ``num_threads``."""
    def task(item, worker):
        with lock:
            if worker >= num_threads or worker in active:
                clash.append(worker)
            active[worker] = threading.get_ident()
        time.sleep(0.0005)
        with lock:
            del active[worker]
        return item * 3 + 1
    return task


def test_consecutive_calls_reuse_the_same_threads():
    from scwork.sharding._threads import _run_tasks

    idents: list[set] = []

    def task(item, worker):
        time.sleep(0.001)                  # every worker gets some items
        return (item, worker, threading.current_thread())   # objects: OS thread ids get reused

    for call in range(30):
        out = _run_tasks(task, list(range(12)), list(range(12)), 4)
        assert [o[0] for o in out] == list(range(12))
        assert all(0 <= o[1] < 4 for o in out)
        by_worker = {}
        for _, worker, ident in out:
            by_worker.setdefault(worker, set()).add(ident)
        assert all(len(ids) == 1 for ids in by_worker.values()), by_worker   # an index is one thread
        idents.append({ident for _, worker, ident in out if worker > 0})
    used = set().union(*idents)
    assert 1 <= len(used) <= 3, used                         # the same 3 helpers, not 3 per call
    count = threading.active_count()
    for _ in range(20):
        _run_tasks(task, list(range(8)), [1] * 8, 4)
    assert threading.active_count() == count


def test_a_pool_grown_for_many_threads_serves_fewer():
    from scwork.sharding._threads import _run_tasks

    lock, active, clash = threading.Lock(), {}, []
    assert _run_tasks(_checked_task(active, lock, 16, clash), list(range(64)), [1] * 64, 16) == \
        [i * 3 + 1 for i in range(64)]
    seen = set()

    def task(item, worker):
        seen.add(worker)
        time.sleep(0.002)
        return -item

    assert _run_tasks(task, list(range(16)), [1] * 16, 4) == [-i for i in range(16)]
    assert seen <= {0, 1, 2, 3} and len(seen) >= 2, seen
    assert clash == []


def test_concurrent_calls_from_two_threads_keep_their_own_workers():
    from scwork.sharding._threads import _run_tasks

    outcomes, clashes = {}, {}

    def caller(key, num_threads, n):
        lock, active, clash = threading.Lock(), {}, []
        task = _checked_task(active, lock, num_threads, clash)
        got = []
        for _ in range(15):
            got.append(_run_tasks(task, list(range(n)), list(range(n)), num_threads))
        outcomes[key] = got
        clashes[key] = clash

    callers = [threading.Thread(target=caller, args=("a", 3, 20)), threading.Thread(target=caller, args=("b", 5, 33))]
    for c in callers:
        c.start()
    for c in callers:
        c.join()
    assert all(r == [i * 3 + 1 for i in range(20)] for r in outcomes["a"])
    assert all(r == [i * 3 + 1 for i in range(33)] for r in outcomes["b"])
    assert clashes == {"a": [], "b": []}


def test_nested_calls_do_not_deadlock():
    from scwork.sharding._threads import _run_tasks

    def inner(item, worker):
        return item + worker * 0

    def outer(item, worker):
        return sum(_run_tasks(inner, list(range(item, item + 5)), [1] * 5, 3))

    result = []
    runner = threading.Thread(target=lambda: result.append(_run_tasks(outer, list(range(6)), [1] * 6, 3)),
                              daemon=True)
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "nested _run_tasks calls deadlocked"
    assert result == [[sum(range(i, i + 5)) for i in range(6)]]


def test_an_error_leaves_the_pool_usable():
    from scwork.sharding._threads import _run_tasks

    def task(item, worker):
        time.sleep(0.0005)
        if item in (7, 3, 11):
            raise ValueError(f"item {item}")
        return item

    for _ in range(3):
        with pytest.raises(ValueError, match="item 3$"):      # the first in item order
            _run_tasks(task, list(range(16)), list(range(16)), 4)
        assert _run_tasks(lambda x, w: x * 2, list(range(16)), [1] * 16, 4) == [x * 2 for x in range(16)]

    def exits(item, worker):
        if item == 2:
            raise SystemExit(5)                # a BaseException in a pooled worker still reaches the caller
        time.sleep(0.0005)
        return item

    for _ in range(4):
        with pytest.raises(SystemExit):
            _run_tasks(exits, list(range(8)), [1] * 8, 3)
    assert _run_tasks(lambda x, w: x + 1, list(range(8)), [1] * 8, 3) == list(range(1, 9))


# Run in a fresh interpreter that imports only scwork: forking the test process itself
# would fork whatever threads other tests left in it (jax's, for one), which Python warns
# may deadlock the child.
_FORK_SCRIPT = """
import multiprocessing, sys, threading, time
from scwork.sharding._threads import _run_tasks

def child(queue):
    idents = set()
    def task(item, worker):
        idents.add(threading.get_ident())
        time.sleep(0.001)
        return item * item
    queue.put((_run_tasks(task, list(range(20)), [1] * 20, 4), len(idents)))

if __name__ == "__main__":
    assert _run_tasks(lambda x, w: x, list(range(20)), [1] * 20, 4) == list(range(20))  # the parent's pool parked
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    try:
        results, threads_used = queue.get(timeout=30)
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0, proc.exitcode
    assert results == [i * i for i in range(20)], results
    assert threads_used >= 2, threads_used          # the child started its own workers
    assert _run_tasks(lambda x, w: -x, list(range(20)), [1] * 20, 4) == [-x for x in range(20)]
    print("ok")
"""


def test_a_forked_child_runs_a_multi_thread_call(tmp_path):
    import multiprocessing
    import subprocess
    import sys

    if sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork start method on this platform")
    script = tmp_path / "fork_child.py"
    script.write_text(_FORK_SCRIPT, encoding="utf-8")
    done = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", str(script)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("nt", [2, 3, 16])
def test_statistics_and_csr_identical_with_parked_threads_reused(nt):
    """The same call twice on the same (reused) threads, and once with 1 thread: identical."""
    batch, feats = _big_case()
    topo = scwork.Topology(2, 4)
    cfg = SparsecoreConfig(allow_id_dropping=True, max_ids_per_chip_per_sample=None)
    for stacking in (None, "auto"):
        one = preprocess(batch, feats, topo, stacking, cfg, num_threads=1)
        stats = compute_stats(batch, feats, topo, stacking, cfg, num_threads=1)
        for _ in range(2):
            _assert_same_preprocess(one, preprocess(batch, feats, topo, stacking, cfg, num_threads=nt))
            assert stats.equals(compute_stats(batch, feats, topo, stacking, cfg, num_threads=nt))


def test_no_thread_at_import_and_parked_threads_do_not_hold_up_exit():
    import subprocess
    import sys

    code = ("import threading, scwork, scwork.sharding.engine\n"
            "from scwork.sharding._threads import _run_tasks\n"
            "before = threading.active_count()\n"
            "assert _run_tasks(lambda x, w: x + 1, list(range(9)), [1] * 9, 4) == list(range(1, 10))\n"
            "print(before, threading.active_count())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "4"]        # none at import; 3 parked after, and exit still returns
