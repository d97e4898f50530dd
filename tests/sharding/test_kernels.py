"""Every numba kernel equals its numpy reference on random inputs.

Run once more under ``NUMBA_DISABLE_JIT=1`` (see ``test_pure_python_path``) so the
pure-Python path of the kernels is exercised too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.sharding import _kernels as K

EXAMPLES = int(os.environ.get("SCWORK_KERNEL_EXAMPLES", "60"))
NO_LIMIT = 2**62


def _group_case(seed: int, big_vocab: bool = False):
    """A random batch, a group of features and its stack geometry."""
    rng = np.random.default_rng(seed)
    nsl = int(rng.integers(1, 7))
    n = int(rng.integers(1, 5))
    Kst = int(rng.integers(1, 4))
    B = nsl * n
    F = Kst + int(rng.integers(0, 2))                 # maybe one feature outside the stack
    if big_vocab:
        vocab = int(rng.choice([2**22 + 3, 2**31 - 1, 3_000_000_019 % 2**31]))
    else:
        vocab = int(rng.integers(1, 60))
    lengths = rng.integers(0, 6, size=(F, B))
    hot = rng.integers(0, vocab, size=3)               # duplicates inside samples are likely
    ids_list, splits = [], np.zeros((F, B + 1), np.int64)
    off = 0
    for f in range(F):
        m = int(lengths[f].sum())
        vals = np.where(rng.random(m) < 0.5, rng.choice(hot, size=m), rng.integers(0, vocab, size=m))
        ids_list.append(vals.astype(np.int64))
        splits[f, 0] = off
        splits[f, 1:] = off + np.cumsum(lengths[f])
        off += m
    ids = np.concatenate(ids_list)
    has_w = (rng.random(F) < 0.5).astype(np.int8)
    weights = rng.choice(np.array([0.5, 1.0, 2.0, 3.0, 0.25], np.float32), size=ids.size)
    members = rng.permutation(Kst)[: int(rng.integers(1, Kst + 1))]
    feat_k = np.sort(members).astype(np.int64)
    feat_rows = rng.permutation(F)[: feat_k.size].astype(np.int64)
    P = int(rng.integers(1, 12))
    return dict(ids=ids, splits=splits, weights=weights, has_w=has_w, feat_rows=feat_rows, feat_k=feat_k,
                n=n, nsl=nsl, K=Kst, vocab=vocab, P=P, col_shift=int(rng.integers(0, P)),
                qbits=((vocab - 1) // P).bit_length(), lbits=(Kst * n - 1).bit_length(), rng=rng)


def _sorted(case, combiner, want_gains, fn=K.sort_group):
    total = case["ids"].size + 1
    keys = np.full(total, -7, np.int64)
    gains = np.full(total, -7, np.float32)
    out = fn(case["ids"], case["splits"], case["weights"], case["has_w"], case["feat_rows"], case["feat_k"],
             combiner, case["n"], case["nsl"], case["K"], case["vocab"], case["P"], case["col_shift"],
             case["qbits"], case["lbits"], want_gains, keys, gains,
             np.empty(total, np.int64), np.empty(total, np.float32), np.empty(3 * 2048, np.int64))
    return tuple(int(v) for v in out), keys, gains


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 2]), st.booleans(), st.booleans())
def test_sort_group_matches_reference(seed, combiner, want_gains, big_vocab):
    case = _group_case(seed, big_vocab)
    got, keys, gains = _sorted(case, combiner, want_gains)
    exp, rkeys, rgains = _sorted(case, combiner, want_gains, K.sort_group_reference)
    assert got[0] == exp[0] and got[1] == exp[1] == -1
    m = got[0]
    assert np.array_equal(keys[:m], rkeys[:m])
    if want_gains:
        assert got[2] == exp[2]
        if got[2] < 0:
            assert np.array_equal(gains[:m].view(np.int32), rgains[:m].view(np.int32))   # bit-exact
    # keys sorted as unsigned (partition, id // P, slice, row), and they decode back to the ids
    assert np.all(np.diff(keys[:m].view(np.uint64)) >= 0)
    p, q, sl, local = K.decode_keys(keys[:m], case["qbits"], case["lbits"])
    x = q * case["P"] + (p - case["col_shift"]) % case["P"]
    group_ids = np.concatenate([case["ids"][case["splits"][f, 0]:case["splits"][f, -1]] for f in case["feat_rows"]])
    assert sorted(x.tolist()) == sorted(group_ids.tolist())
    assert (sl < case["nsl"]).all() and (local < case["K"] * case["n"]).all()


@settings(max_examples=max(10, EXAMPLES // 3), deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_sort_group_reports_out_of_vocabulary(seed):
    case = _group_case(seed)
    rows = case["feat_rows"]
    f = int(rows[-1])
    lo, hi = case["splits"][f, 0], case["splits"][f, -1]
    if hi == lo:
        return
    pos = int(case["rng"].integers(lo, hi))
    case["ids"] = case["ids"].copy()
    case["ids"][pos] = case["vocab"] + int(case["rng"].integers(0, 5))
    got, _, _ = _sorted(case, 0, False)
    exp, _, _ = _sorted(case, 0, False, K.sort_group_reference)
    assert got[1] == exp[1] >= 0
    assert case["ids"][got[1]] >= case["vocab"]


def test_zero_divisor_is_flagged():
    ids = np.array([1, 2], np.int64)
    splits = np.array([[0, 2]], np.int64)
    weights = np.array([1.0, -1.0], np.float32)
    case = dict(ids=ids, splits=splits, weights=weights, has_w=np.ones(1, np.int8), feat_rows=np.zeros(1, np.int64),
                feat_k=np.zeros(1, np.int64), n=1, nsl=1, K=1, vocab=4, P=1, col_shift=0, qbits=2, lbits=0)
    for fn in (K.sort_group, K.sort_group_reference):
        got, _, _ = _sorted(case, 1, True, fn)
        assert got == (2, -1, 0)


def test_warmup_runs():
    K.warmup()


@pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT") == "1", reason="already the pure-Python run")
def test_pure_python_path():
    """The same tests with numba disabled: the kernels run as plain Python."""
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", SCWORK_KERNEL_EXAMPLES="8")
    here = Path(__file__)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(here), "-q", "-p", "no:cacheprovider", "-x",
         "--import-mode=importlib", "-k", "not pure_python"],
        cwd=here.parents[2], env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "passed" in proc.stdout


def test_unique_limit_rank_is_stream_wide_across_the_tables_of_a_stack():
    # Two tables stacked on one partition, max_unique = 1: the rank of an id among the
    # stream's distinct ids does not restart at the second table (the prefix cut of [jte]
    # preprocess_sparse_dense_matmul_input).
    import scwork
    from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, preprocess

    batch = FeatureBatch.from_ragged({"fa": ([0, 1], [0, 1, 2]), "fb": ([2, 3], [0, 1, 2])})
    features = [FeatureSpec("fa", TableSpec("ta", 8, 8)), FeatureSpec("fb", TableSpec("tb", 8, 8))]
    config = SparsecoreConfig(allow_id_dropping=True, max_ids_per_chip_per_sample=None)
    dropped = {
        backend: int(preprocess(batch, features, scwork.Topology(1, 1), stacking=[["ta", "tb"]],
                                config=config, stack_limits={"ta_tb": (100, 1)}, backend=backend)
                     .stats["dropped_ids"].sum())
        for backend in ("numba", "numpy")
    }
    assert dropped == {"numba": 3, "numpy": 3}


def _random_layout(rng):
    """Random per-(feature, slice) counts cut into groups of features, the groups into stacks."""
    nf, nsl = int(rng.integers(1, 12)), int(rng.integers(1, 9))
    counts = rng.integers(0, 50, (nf, nsl)).astype(np.int64)
    ng = int(rng.integers(1, nf + 1))
    rows = rng.permutation(nf).astype(np.int64)
    starts = np.concatenate([[0], np.sort(rng.choice(np.arange(1, nf), ng - 1, replace=False))]).astype(np.int64)
    ns = int(rng.integers(1, ng + 1))
    stack_starts = np.concatenate([[0], np.sort(rng.choice(np.arange(1, ng), ns - 1, replace=False))]).astype(np.int64)
    first_group = np.repeat(stack_starts, np.diff(np.append(stack_starts, ng))).astype(np.int64)
    return counts, rows, starts, first_group, stack_starts


@pytest.mark.parametrize("seed", range(40))
def test_group_tables_matches_reference(seed):
    rng = np.random.default_rng(seed)
    counts, rows, starts, first_group, stack_starts = _random_layout(rng)
    ng = starts.size
    for parts in (np.zeros(0, np.int64), np.unique(rng.integers(0, ng, ng)).astype(np.int64)):
        parts[:1] = 0
        for one_stack in (False, True):
            got = K.group_tables(counts, rows, starts, first_group, stack_starts, parts, one_stack)
            exp = K.group_tables_reference(counts, rows, starts, first_group, stack_starts, parts, one_stack)
            for g, e in zip(got, exp):
                assert g.dtype == e.dtype == np.int64
                assert g.shape == e.shape
                np.testing.assert_array_equal(g, e)


def test_group_tables_by_hand():
    # two stacks: groups {f0, f2}, {f1} in the first, {f3} in the second; 2 slices
    counts = np.array([[1, 2], [3, 0], [4, 5], [0, 7]], np.int64)
    rows = np.array([0, 2, 1, 3], np.int64)
    starts = np.array([0, 2, 3], np.int64)
    stack_starts = np.array([0, 2], np.int64)
    first_group = np.array([0, 0, 2], np.int64)
    gcounts, sloff, uloff, gmax, stack_ids, stack_max, part_ids = K.group_tables(
        counts, rows, starts, first_group, stack_starts, np.array([0, 1], np.int64), False)
    np.testing.assert_array_equal(gcounts, [[5, 7], [3, 0], [0, 7]])
    np.testing.assert_array_equal(sloff, [[0, 5, 12], [0, 3, 3], [0, 0, 7]])
    np.testing.assert_array_equal(uloff, [0, 12, 0])           # each from its stack's first group
    np.testing.assert_array_equal(gmax, [7, 3, 7])
    np.testing.assert_array_equal(stack_ids, [[8, 7], [0, 7]])
    np.testing.assert_array_equal(stack_max, [7, 7])
    np.testing.assert_array_equal(part_ids, [[5, 7], [3, 7]])
    # one stack: the running sums over every group as they are
    _, _, uloff_one, _, _, _, _ = K.group_tables(counts, rows, starts, first_group, stack_starts,
                                                 np.zeros(0, np.int64), True)
    np.testing.assert_array_equal(uloff_one, [0, 12, 15])
