"""Mini-batching (vocabulary and sample dimension): reference algorithms, kernels, properties."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import ConfigError, LimitExceededError, OutOfVocabularyError
from scwork.sharding import (
    FeatureBatch,
    FeatureSpec,
    SparsecoreConfig,
    TableSpec,
    compute_stats,
    minibatch,
)
from scwork.sharding import _minibatch_kernels as K
from scwork.sharding.stacking import StackingPlan

mbmod = importlib.import_module("scwork.sharding.minibatch")
NO_CHIP_CAP = SparsecoreConfig(max_ids_per_chip_per_sample=None)
EXAMPLES = int(os.environ.get("SCWORK_MINIBATCH_EXAMPLES", "40"))


# --------------------------------------------------------------------------------------
# HighwayHash
# --------------------------------------------------------------------------------------
# google/highwayhash c/highwayhash_test.c: kExpected64 for data[i] = i, sizes 0..64, key kTestKey1
KEY1 = [0x0706050403020100, 0x0F0E0D0C0B0A0908, 0x1716151413121110, 0x1F1E1D1C1B1A1918]
EXPECTED64 = [
    0x907A56DE22C26E53, 0x7EAB43AAC7CDDD78, 0xB8D0569AB0B53D62, 0x5C6BEFAB8A463D80, 0xF205A46893007EDA,
    0x2B8A1668E4A94541, 0xBD4CCC325BEFCA6F, 0x4D02AE1738F59482, 0xE1205108E55F3171, 0x32D2644EC77A1584,
    0xF6E10ACDB103A90B, 0xC3BBF4615B415C15, 0x243CC2040063FA9C, 0xA89A58CE65E641FF, 0x24B031A348455A23,
    0x40793F86A449F33B, 0xCFAB3489F97EB832, 0x19FE67D2C8C5C0E2, 0x04DD90A69C565CC2, 0x75D9518E2371C504,
    0x38AD9B1141D3DD16, 0x0264432CCD8A70E0, 0xA9DB5A6288683390, 0xD7B05492003F028C, 0x205F615AEA59E51E,
    0xEEE0C89621052884, 0x1BFC1A93A7284F4F, 0x512175B5B70DA91D, 0xF71F8976A0A2C639, 0xAE093FEF1F84E3E7,
    0x22CA92B01161860F, 0x9FC7007CCF035A68, 0xA0C964D9ECD580FC, 0x2C90F73CA03181FC, 0x185CF84E5691EB9E,
    0x4FC1F5EF2752AA9B, 0xF5B7391A5E0A33EB, 0xB9B84B83B4E96C9C, 0x5E42FE712A5CD9B4, 0xA150F2F90C3F97DC,
    0x7FA522D75E2D637D, 0x181AD0CC0DFFD32B, 0x3889ED981E854028, 0xFB4297E8C586EE2D, 0x6D064A45BB28059C,
    0x90563609B3EC860C, 0x7AA4FCE94097C666, 0x1326BAC06B911E08, 0xB926168D2B154F34, 0x9919848945B1948D,
    0xA2A98FC534825EBE, 0xE9809095213EF0B6, 0x582E5483707BC0E9, 0x086E9414A88A6AF5, 0xEE86B98D20F6743D,
    0xF89B7FF609B1C0A7, 0x4C7D9CC19E22C3E8, 0x9A97005024562A6F, 0x5DD41CF423E6EBEF, 0xDF13609C0468E227,
    0x6E0DA4F64188155A, 0xB755BA4B50D7D4A1, 0x887A3484647479BD, 0xAB8EEBE9BF2139A0, 0x75542C5D4CD2A6FF,
]


def test_highway_reference_matches_upstream_test_vectors():
    data = bytes(range(65))
    assert [K.highway_hash64_reference(data[:i], KEY1) for i in range(65)] == EXPECTED64
    data2 = bytes(128 + i for i in range(33))
    assert K.highway_hash64_reference(data2, [1, 2, 3, 4]) == 0x53C516CCE478CAD7


def test_highway_numba_matches_reference_on_4_byte_vector():
    out = np.empty(1, np.uint64)
    K.highway_hash_int32(np.array([0x03020100], np.int64), np.array(KEY1, np.uint64), out)
    assert int(out[0]) == EXPECTED64[4]


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=40), st.booleans())
def test_highway_numba_equals_reference(values, library_key):
    key = K.HIGHWAY_KEY if library_key else np.array(KEY1, np.uint64)
    vals = np.array(values, np.int64)
    out = np.empty(vals.size, np.uint64)
    K.highway_hash_int32(vals, key, out)
    assert out.tolist() == K.highway_hash_int32_reference(vals, key).tolist()


def test_bucket_hash_spreads_ids():
    b = mbmod.bucket_of(np.arange(64 * 200), 16)
    counts = np.bincount(b, minlength=64)
    assert counts.min() > 100 and counts.max() < 320          # ~200 per bucket, no structure
    assert mbmod.bucket_of(np.arange(10), 4, bucket_hash="identity", num_buckets=8).tolist() == \
        [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]


# --------------------------------------------------------------------------------------
# the split tree: the reference's own test vectors, and a literal transcription
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("counts, limit, expected", [
    ([10] * 8, 100, 0),                                          # Full Merge
    ([100] * 8, 150, 0b1111111),                                 # No Merges
    ([10, 20, 30, 40, 50, 60, 70, 80], 100, 0b1101100),          # Partial Merge
    ([50, 50, 20, 80, 10, 10, 70, 10], 100, 0b1010000),          # Partial Merge 2
    ([90, 10, 90, 10, 90, 10, 90, 10], 100, 0b1110000),          # Partial Merge 3
    ([2, 5, 1, 6, 3, 4, 2, 0], 7, 0b1110000),                    # the header's example
])
def test_split_reference_vectors(counts, limit, expected):
    assert mbmod.compute_minibatching_split(counts, limit) == expected


@pytest.mark.parametrize("split, expected", [
    (0b1111111, 0b1111111), (0b1100011, 0b0101101), (0b0, 0b0), (0b1010000, 0b0001010), (0b1110000, 0b0101010),
])
def test_split_positions_reference_vectors(split, expected):
    assert mbmod.split_positions(split, 8) == expected


def _cpp_split(row, limit):
    """ComputeMinibatchingSplit, transcribed line by line."""
    v = list(row)
    N = len(v)
    split, idx, size = 0, 0, 2
    while size <= N:
        for i in range(0, N, size):
            left, right = v[i], v[i + size // 2]
            if left + right > limit:
                split |= 1 << idx
                v[i] = max(left, right)
            else:
                v[i] += right
            idx += 1
        size *= 2
    return split


def _cpp_merge_groups(split, N):
    """MergeBuckets + MergeBucketCoos on bucket index lists: the resulting groups."""
    groups = [[b] for b in range(N)]
    merged = [False] * N
    idx, size = 0, 2
    while size <= N:
        for i in range(0, N, size):
            if not split >> idx & 1:
                left, right = i, i + size // 2
                a, b = right - 1, right
                while a > left and merged[a]:
                    a -= 1
                while b < right + size // 2 and merged[b]:
                    b += 1
                groups[b] = groups[a] + groups[b]
                groups[a] = []
                merged[a] = True
            idx += 1
        size *= 2
    return [g for g in groups if g]


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 16, 64]), st.integers(1, 5), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_split_equals_transcription_and_groups_fit(nb, rows, limit, seed):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, limit + 1, size=(rows, nb)) * (rng.random((rows, nb)) < 0.6)
    split = mbmod.compute_minibatching_split(counts, limit)
    expected = 0
    for r in counts:
        expected |= _cpp_split(r, limit)
    assert split == expected
    groups = mbmod.split_to_minibatches(split, nb)
    assert int(groups[-1]) + 1 == bin(split).count("1") + 1
    # same groups as the reference's merge procedure
    assert [list(np.flatnonzero(groups == g)) for g in range(groups[-1] + 1)] == _cpp_merge_groups(split, nb)
    # every mini-batch of every row fits (no single bucket exceeds the limit here)
    for g in range(groups[-1] + 1):
        assert (counts[:, groups == g].sum(axis=1) <= limit).all()
    # nothing to split when the whole row fits
    if (counts.sum(axis=1) <= limit).all():
        assert split == 0


def test_split_bad_num_buckets():
    with pytest.raises(ConfigError, match="power of two"):
        mbmod.compute_minibatching_split([1, 2, 3], 4)
    with pytest.raises(ConfigError, match="num_buckets"):
        minibatch(FeatureBatch.from_ragged({"f": ([0], [0, 1])}), [FeatureSpec("f", TableSpec("t", 4, 8))],
                  scwork.Topology(1, 1), num_buckets=128)


# --------------------------------------------------------------------------------------
# kernels against their references
# --------------------------------------------------------------------------------------
def _random_case(seed, max_features=3):
    rng = np.random.default_rng(seed)
    G, S, n = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 5))
    B = G * S * n
    nf = int(rng.integers(1, max_features + 1))
    data, feats = {}, []
    tables = [TableSpec("ta", int(rng.integers(1, 50)), 8), TableSpec("tb", int(rng.integers(1, 90)), 8)]
    for i in range(nf):
        t = tables[int(rng.integers(0, 2))]
        lengths = rng.integers(0, 6, B)
        hot = rng.integers(0, t.vocab_size, 3)
        m = int(lengths.sum())
        ids = np.where(rng.random(m) < 0.5, rng.choice(hot, m), rng.integers(0, t.vocab_size, m))
        data[f"f{i}"] = (ids, np.r_[0, np.cumsum(lengths)])
        feats.append(FeatureSpec(f"f{i}", t))
    return FeatureBatch(data), feats, scwork.Topology(G, S), rng


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 8, 64]), st.sampled_from([0, 1]))
def test_scan_group_buckets_equals_reference(seed, nb, mode):
    from scwork.sharding import engine as E

    batch, feats, topo, rng = _random_case(seed)
    plan = scwork.sharding.plan_stacking(feats, topo, stacking=[["ta", "tb"]] if len({f.table.name for f in feats})
                                         == 2 else None)
    G, S, P = topo.num_devices, topo.sparsecores_per_device, topo.num_partitions
    limits = (int(rng.integers(1, 6)), int(rng.integers(1, 6))) if rng.random() < 0.7 else (2**62, 2**62)
    for stk in plan.stacks:
        outs = []
        for fn in (K.scan_group_buckets, K.scan_group_buckets_reference):
            arrs = [np.zeros(G * S * P * nb, np.int64) for _ in range(3)] + \
                [np.zeros(G * S * nb, np.int64), np.zeros(P * nb, np.int64), np.zeros(nb, np.int64)]
            for g, keys, m, lbits in E._iter_sorted_group_keys(stk, batch, G, S):
                fn(keys, m, P, 0, P, g.qbits, lbits, g.row_offset, nb, mode, K.HIGHWAY_KEY, *limits, *arrs)
            outs.append(arrs)
        for a, b in zip(*outs):
            assert a.tolist() == b.tolist()


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.integers(0, 10**6), max_size=30), st.integers(1, 20), st.integers(0, 19), st.integers(0, 50),
       st.sampled_from([1, 4, 64]), st.sampled_from([0, 1]))
def test_ids_to_buckets_equals_reference(ids, P, shift, offset, nb, mode):
    x = np.array(ids, np.int64)
    a, b = np.empty(x.size, np.int64), np.empty(x.size, np.int64)
    K.ids_to_buckets(x, P, shift % P, offset, nb, mode, K.HIGHWAY_KEY, a)
    K.ids_to_buckets_reference(x, P, shift % P, offset, nb, mode, K.HIGHWAY_KEY, b)
    assert a.tolist() == b.tolist()


# --------------------------------------------------------------------------------------
# the scan cut finer than a table: slices sorted by coarse bins, ranges of u
# --------------------------------------------------------------------------------------
def _group_inputs(batch, stk, topo, g):
    """The arguments of bin_slices for group ``g`` of ``stk``: (rows, ks, shift, offset, vocab, qbits, lbits, n)."""
    from scwork.sharding import engine as E

    G, S, P = topo.num_devices, topo.sparsecores_per_device, topo.num_partitions
    n = batch.batch_size // (G * S)
    grp = E._groups(stk, batch, G * S)[g]
    return grp, n, E._lbits(len(stk.features), n)


def _binned(fn, batch, stk, topo, g, cuts, cshift, vocab=None, sort_all=True):
    """Keys of group ``g`` binned by slice tasks ``cuts`` (slice boundaries) with ``fn``.

    Returns ``(binned, pre, results, group, lbits, cshift, sorted)``: one slice task sorts its
    keys outright (``sort_all``, as the driver asks of a group's one task) unless told not to.
    """
    grp, n, lbits = _group_inputs(batch, stk, topo, g)
    P = topo.num_partitions
    C = (((P << grp.qbits) - 1) >> cshift) + 1
    total = max(1, grp.num_ids)
    binned = np.full(total, -7, np.int64)
    pre = np.zeros((len(cuts) - 1, C + 1), np.int64)
    base, results = 0, []
    has_w = np.zeros(len(batch), np.int8)
    for k, (s0, s1) in enumerate(zip(cuts[:-1], cuts[1:])):
        m, oov = fn(batch._ids, batch._splits, has_w, grp.feat_rows, grp.feat_k, n, s0, s1,
                    grp.vocab if vocab is None else vocab, P, grp.col_shift, grp.qbits, lbits, cshift, C,
                    len(cuts) == 2 and sort_all, np.empty(total, np.int64), binned, base, pre[k],
                    np.empty(3 * 2048, np.int64))
        results.append((m, oov))
        base += m
    return binned, pre, results, grp, lbits, cshift, len(cuts) == 2 and sort_all


def _random_cuts(rng, nsl):
    inner = sorted(set(rng.integers(1, nsl, int(rng.integers(0, nsl))).tolist())) if nsl > 1 else []
    return [0, *inner, nsl]


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_bin_slices_equals_reference(seed):
    batch, feats, topo, rng = _random_case(seed)
    plan = scwork.sharding.plan_stacking(feats, topo, stacking=None)
    nsl = topo.num_devices * topo.sparsecores_per_device
    for stk in plan.stacks:
        grp, _, _ = _group_inputs(batch, stk, topo, 0)
        # cshift up to qbits (bins of whole partitions) or every bit of u (one bin, as with one thread)
        cshift = int(rng.integers(0, grp.qbits + 1)) if rng.random() < 0.8 else (topo.num_partitions - 1).bit_length() \
            + grp.qbits
        cuts = _random_cuts(rng, nsl)
        # now and then a vocabulary too small: both report the same first out-of-vocabulary id
        vocab = int(rng.integers(1, grp.vocab + 1)) if rng.random() < 0.2 else None
        sort_all = rng.random() < 0.5
        a = _binned(K.bin_slices, batch, stk, topo, 0, cuts, cshift, vocab, sort_all)
        b = _binned(K.bin_slices_reference, batch, stk, topo, 0, cuts, cshift, vocab, sort_all)
        assert a[2] == b[2]
        if any(oov >= 0 for _, oov in a[2]):
            continue
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
        # every key once, each task's bins in order of u >> cshift (of u when sorted outright)
        assert sum(m for m, _ in a[2]) == grp.num_ids
        u = (a[0][:grp.num_ids] >> 32) >> (0 if a[6] else cshift)
        for k in range(len(cuts) - 1):
            seg = u[a[1][k, 0]:a[1][k, -1]]
            assert (np.diff(seg) >= 0).all()


def _whole_group_counts(batch, stk, topo, nb, mode, limits):
    """The stack's counters the old way: each table's keys sorted at once, scanned whole (the reference)."""
    from scwork.sharding import engine as E

    G, S, P = topo.num_devices, topo.sparsecores_per_device, topo.num_partitions
    arrs = [np.zeros(G * S * P * nb, np.int64) for _ in range(3)] + \
        [np.zeros(G * S * nb, np.int64), np.zeros(P * nb, np.int64), np.zeros(nb, np.int64)]
    for g, keys, m, lbits in E._iter_sorted_group_keys(stk, batch, G, S, backend="numpy"):
        K.scan_group_buckets_reference(keys, m, P, 0, P, g.qbits, lbits, g.row_offset, nb, mode, K.HIGHWAY_KEY,
                                       *limits, *arrs)
    return arrs


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 8, 64]), st.sampled_from([0, 1]))
def test_scan_range_equals_reference_and_ranges_add_up_to_the_whole_scan(seed, nb, mode):
    batch, feats, topo, rng = _random_case(seed)
    two = len({f.table.name for f in feats}) == 2
    plan = scwork.sharding.plan_stacking(feats, topo, stacking=[["ta", "tb"]] if two else None)
    G, S, P = topo.num_devices, topo.sparsecores_per_device, topo.num_partitions
    nsl = G * S
    cut = rng.random() < 0.5
    limits = (int(rng.integers(1, 6)), int(rng.integers(1, 6))) if cut else (2**62, 2**62)
    for stk in plan.stacks:
        ngroups = len(stk.tables)
        one_bin = rng.random() < 0.2              # as with one thread: one bin, one range of every partition
        qbits = [_group_inputs(batch, stk, topo, g)[0].qbits for g in range(ngroups)]
        binned = [_binned(K.bin_slices_reference, batch, stk, topo, g, _random_cuts(rng, nsl),
                          (P - 1).bit_length() + qbits[g] if one_bin else int(rng.integers(0, qbits[g] + 1)),
                          sort_all=rng.random() < 0.5)
                  for g in range(ngroups)]
        # ranges: with a prefix cut whole partitions (every table in turn), else any cut of the bins
        if one_bin:
            ranges = [[(g, 0, 1) for g in range(ngroups)]]
        elif cut:
            bounds = _random_cuts(rng, P) if P > 1 else [0, 1]
            ranges = [[(g, p0 * (b[1].shape[1] - 1) // P, p1 * (b[1].shape[1] - 1) // P)
                       for g, b in enumerate(binned)] for p0, p1 in zip(bounds[:-1], bounds[1:])]
        else:
            ranges = []
            for g, b in enumerate(binned):
                C = b[1].shape[1] - 1
                bounds = sorted({0, C, *rng.integers(0, C + 1, int(rng.integers(0, 6))).tolist()})
                ranges += [[(g, c0, c1)] for c0, c1 in zip(bounds[:-1], bounds[1:])]
        whole = [np.zeros(G * S * P * nb, np.int64) for _ in range(3)] + \
            [np.zeros(G * S * nb, np.int64), np.zeros(P * nb, np.int64), np.zeros(nb, np.int64)]
        for parts in ranges:
            if all(c0 == c1 for _, c0, c1 in parts):
                continue
            p_lo = min((c0 << binned[g][5]) >> binned[g][3].qbits for g, c0, c1 in parts if c1 > c0)
            p_hi = min(P - 1, max(((c1 << binned[g][5]) - 1) >> binned[g][3].qbits for g, c0, c1 in parts if c1 > c0))
            Pc = p_hi - p_lo + 1
            got = []
            for fn in (K.scan_range, K.scan_range_reference):
                loc = np.zeros(K.range_counter_size(nsl, Pc, nb), np.int64)
                views = K.range_counter_views(loc, nsl, Pc, nb)
                for g, c0, c1 in parts:
                    bn, pre, _, grp, lbits, cshift, is_sorted = binned[g]
                    if c1 == c0:
                        continue
                    fn(bn, pre, c0, c1, cshift, P, p_lo, Pc, grp.qbits, lbits, grp.row_offset, nb, mode,
                       K.HIGHWAY_KEY, *limits, *views, np.empty(bn.size, np.int64), np.empty(bn.size, np.int64),
                       np.empty(3 * 2048, np.int64), is_sorted)
                got.append(loc)
            assert got[0].tolist() == got[1].tolist()
            K.add_range_counts(got[0], nsl, p_lo, Pc, P, nb, *whole)
            assert not got[0].any()                  # zeroed for the next range
        ref = _whole_group_counts(batch, stk, topo, nb, mode, limits)
        for a, b in zip(whole, ref):
            assert a.tolist() == b.tolist()


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_add_range_counts_equals_reference(seed):
    rng = np.random.default_rng(seed)
    nsl, P, nb = int(rng.integers(1, 5)), int(rng.integers(1, 6)), int(rng.choice([1, 4, 64]))
    p_lo = int(rng.integers(0, P))
    Pc = int(rng.integers(1, P - p_lo + 1))
    size = K.range_counter_size(nsl, P, nb)
    whole = rng.integers(0, 100, size)
    loc = rng.integers(0, 100, K.range_counter_size(nsl, Pc, nb))
    a, b = whole.copy(), whole.copy()
    la, lb = loc.copy(), loc.copy()
    K.add_range_counts(la, nsl, p_lo, Pc, P, nb, *K.range_counter_views(a, nsl, P, nb))
    K.add_range_counts_reference(lb, nsl, p_lo, Pc, P, nb, *K.range_counter_views(b, nsl, P, nb))
    assert a.tolist() == b.tolist() and not la.any() and not lb.any()
    assert int(a.sum() - whole.sum()) == int(loc.sum())


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_minibatch_sums_equals_reference(seed):
    rng = np.random.default_rng(seed)
    rows, nb = int(rng.integers(0, 6)), int(rng.choice([1, 2, 8, 64]))
    split = int(rng.integers(0, 2 ** (nb - 1))) if nb > 1 else 0
    groups = mbmod.split_to_minibatches(split, nb)
    M = int(groups[-1]) + 1
    counts = rng.integers(0, 50, (rows, nb))
    big_a, big_b = np.zeros((M, 3, rows), np.int64), np.zeros((M, 3, rows), np.int64)
    K.minibatch_sums(counts, groups, big_a[:, 1])            # a strided view, as the driver writes
    K.minibatch_sums_reference(counts, groups, big_b[:, 1])
    assert big_a.tolist() == big_b.tolist()
    assert big_a[:, 1].sum(axis=0).tolist() == counts.sum(axis=1).tolist()


def _sample_args(batch, stk, topo, max_ids, max_uniq):
    G, S, P = topo.num_devices, topo.sparsecores_per_device, topo.num_partitions
    n = batch.batch_size // (G * S)
    rows = np.array([batch._feature_index(f.name) for f in stk.features], np.int64)
    shifts = np.array([stk.table(f.table.name).shard_rotation for f in stk.features], np.int64)
    offs = np.array([stk.table(f.table.name).row_offset_in_shard for f in stk.features], np.int64)
    nsl = G * S
    total = max(1, sum(int(batch._splits[r, -1] - batch._splits[r, 0]) for r in rows))
    return [batch._ids, batch._splits, rows, shifts, offs, n, nsl, P, max_ids, max_uniq,
            np.empty((64 * 64, 4), np.int32), np.zeros(nsl * n, np.int64), np.zeros(nsl, np.int64),
            np.zeros((total, 5), np.int64), np.zeros(nsl * n, np.int64)]


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_sample_split_equals_reference(seed):
    batch, feats, topo, rng = _random_case(seed)
    plan = scwork.sharding.plan_stacking(feats, topo, stacking=None)
    for stk in plan.stacks:
        lim = (int(rng.integers(1, 12)), int(rng.integers(1, 12)))
        a = _sample_args(batch, stk, topo, *lim)
        b = _sample_args(batch, stk, topo, *lim)
        ra, rb = K.sample_split(*a), K.sample_split_reference(*b)
        assert ra == rb
        if ra < 0:
            assert a[13][0].tolist() == b[13][0].tolist()
            continue
        nruns = a[12]
        assert nruns.tolist() == b[12].tolist()
        n = a[5]
        for sl in range(a[6]):
            k = int(nruns[sl])
            assert a[11][sl * n:sl * n + k].tolist() == b[11][sl * n:sl * n + k].tolist()
            assert a[14][sl * n:sl * n + k].tolist() == b[14][sl * n:sl * n + k].tolist()
        assert sorted(map(tuple, a[13][:ra].tolist())) == sorted(map(tuple, b[13][:rb].tolist()))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_naive_by_run_equals_reference(seed):
    from scwork.sharding import engine as E

    batch, feats, topo, rng = _random_case(seed)
    plan = scwork.sharding.plan_stacking(feats, topo, stacking=None)
    G, S, P = topo.num_devices, topo.sparsecores_per_device, topo.num_partitions
    n = batch.batch_size // (G * S)
    R = 3
    runs = rng.integers(0, R, batch.batch_size)
    for stk in plan.stacks:
        got, ref = np.zeros(R * P, np.int64), np.zeros(R * P, np.int64)
        for g, keys, m, lbits in E._iter_sorted_group_keys(stk, batch, G, S):
            K.naive_by_run(keys, m, P, g.qbits, lbits, n, runs, np.full(R, -1, np.int64), got)
            K.naive_by_run_reference(keys, m, P, g.qbits, lbits, n, runs, None, ref)
        assert got.tolist() == ref.tolist()


# --------------------------------------------------------------------------------------
# end to end: the properties
# --------------------------------------------------------------------------------------
def _multiset(batch):
    out = Counter()
    for f in batch.feature_names:
        ids = batch.ids(f)
        sample = np.repeat(np.arange(batch.batch_size), batch.lengths(f))
        out.update(zip([f] * ids.size, sample.tolist(), ids.tolist()))
    return out


def _free(plan):
    return StackingPlan([dataclasses.replace(s, max_ids_per_partition=None, max_unique_ids_per_partition=None)
                         for s in plan.stacks], plan.topology, plan.rotation, plan.batch_size)


def _check_minibatches_partition_the_input(mb, batch, feats, topo) -> None:
    """The mini-batches together are exactly the input (nothing lost or duplicated), each
    fits its limits (compute_stats raises otherwise) and the plan's per-mini-batch stats
    are the engine's stats of that mini-batch."""
    parts = list(mb.batches())
    total = Counter()
    for b in parts:
        total.update(_multiset(b))
    assert total == _multiset(batch)
    free = _free(mb.plan)
    for m, b in enumerate(parts):
        compute_stats(b, feats, topo, stacking=mb.plan, config=NO_CHIP_CAP)
        ref = compute_stats(b, feats, topo, stacking=free, config=NO_CHIP_CAP)
        got = mb.stats.isel(minibatch=m)
        for v in ("ids", "unique_ids", "max_ids_per_partition", "max_unique_ids_per_partition",
                  "required_buffer_size_per_sc", "input_ids", "naive_ids_per_partition",
                  "naive_unique_ids_per_partition"):
            assert got[v].values.tolist() == ref[v].values.tolist(), v


def _brute_streams(batch, plan, topo, key_of):
    """{(stack, slice, partition, key): (set of (col, row) pairs, set of cols)} computed with Python sets."""
    G, S, P = topo.num_devices, topo.sparsecores_per_device, topo.num_partitions
    n = batch.batch_size // (G * S)
    out = {}
    for stk in plan.stacks:
        for k, f in enumerate(stk.features):
            t = stk.table(f.table.name)
            ids, rs = batch[f.name]
            for b in range(batch.batch_size):
                sl = b // n
                for x in ids[rs[b]:rs[b + 1]].tolist():
                    p = (x + t.shard_rotation) % P
                    col = p + P * (x // P + t.row_offset_in_shard)
                    e = out.setdefault((stk.name, sl, p, key_of(stk, t, x, b)), (set(), set()))
                    e[0].add((col, k * n + b % n))
                    e[1].add(col)
    return out


def _model(seed):
    batch, feats, topo, rng = _random_case(seed)
    stacking = [["ta", "tb"]] if len({f.table.name for f in feats}) == 2 and rng.random() < 0.5 else None
    lim_ids = int(rng.integers(1, 14)) if rng.random() < 0.9 else None
    lim_uniq = int(rng.integers(1, 14)) if rng.random() < 0.7 else None
    plan0 = scwork.sharding.plan_stacking(feats, topo, stacking=stacking)
    limits = {s.name: (lim_ids, lim_uniq) for s in plan0.stacks}
    return batch, feats, topo, stacking, limits, rng


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 8, 64]), st.sampled_from(["highway", "identity"]))
def test_vocabulary_minibatching_properties(seed, nb, bucket_hash):
    batch, feats, topo, stacking, limits, _ = _model(seed)
    try:
        mb = minibatch(batch, feats, topo, stacking=stacking, stack_limits=limits, num_buckets=nb,
                       bucket_hash=bucket_hash)
    except LimitExceededError as err:
        # only when one bucket alone overflows
        plan = scwork.sharding.plan_stacking(feats, topo, stacking=stacking, stack_limits=limits)

        def key_of(stk, t, x, b):
            return int(mbmod.bucket_of([x], topo.num_partitions, t.shard_rotation, t.row_offset_in_shard,
                                       num_buckets=nb, bucket_hash=bucket_hash)[0])

        streams = _brute_streams(batch, plan, topo, key_of)
        worst = {}
        for (name, sl, p, b), (pairs, cols) in streams.items():
            a, u = limits[name]
            if (a is not None and len(pairs) > a) or (u is not None and len(cols) > u):
                worst.setdefault(name, []).append(b)
        assert err.stack in worst and err.bucket in worst[err.stack]
        observed = err.observed
        assert observed > err.configured and err.required == observed
        assert f"bucket {err.bucket} alone" in str(err) and f">= {observed}" in str(err)
        return
    _check_minibatches_partition_the_input(mb, batch, feats, topo)
    # count = popcount(split) + 1, one split for the whole batch (the OR of every
    # stack's own mask); a stack that fits at once adds no bit, and when every stack
    # fits there is one mini-batch
    whole = compute_stats(batch, feats, topo, stacking=_free(mb.plan), config=NO_CHIP_CAP)
    assert mb.split_scope == mb.assignment.attrs["split_scope"] == "batch"
    combined = 0
    all_fit = True
    for s in mb.plan.stacks:
        own = int(mb.assignment["stack_split_mask"].sel(stack=s.name))
        combined |= own
        a, u = limits[s.name]
        fits = (a is None or int(whole["ids"].sel(stack=s.name).max()) <= a) and \
            (u is None or int(whole["unique_ids"].sel(stack=s.name).max()) <= u)
        if fits:
            assert own == 0
        all_fit &= fits
    for s in mb.plan.stacks:
        assert int(mb.assignment["split_mask"].sel(stack=s.name)) == combined
        assert int(mb.num_minibatches.sel(stack=s.name)) == bin(combined).count("1") + 1
        assert mb.assignment["minibatch_of_bucket"].sel(stack=s.name).values.tolist() == \
            mbmod.split_to_minibatches(combined, nb).tolist()
    if all_fit:
        assert mb.max_minibatches == 1
    # per stack: each stack cut by its own mask, ids beyond its count absent
    alone = minibatch(batch, feats, topo, stacking=stacking, stack_limits=limits, num_buckets=nb,
                      bucket_hash=bucket_hash, split_scope="stack")
    _check_minibatches_partition_the_input(alone, batch, feats, topo)
    for s in alone.plan.stacks:
        own = int(alone.assignment["split_mask"].sel(stack=s.name))
        assert own == int(mb.assignment["stack_split_mask"].sel(stack=s.name))
        M = int(alone.num_minibatches.sel(stack=s.name))
        assert M == bin(own).count("1") + 1
        assert int(alone.stats["ids"].sel(stack=s.name).isel(minibatch=slice(M, None)).sum()) == 0


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_vocabulary_split_mask_equals_reference_tree_on_brute_counts(seed):
    batch, feats, topo, stacking, limits, _ = _model(seed)
    nb = 8
    try:
        mb = minibatch(batch, feats, topo, stacking=stacking, stack_limits=limits, num_buckets=nb)
    except LimitExceededError:
        return

    def key_of(stk, t, x, b):
        return int(mbmod.bucket_of([x], topo.num_partitions, t.shard_rotation, t.row_offset_in_shard,
                                   num_buckets=nb)[0])

    streams = _brute_streams(batch, mb.plan, topo, key_of)
    for s in mb.plan.stacks:
        a, u = limits[s.name]
        rows = {}
        for (name, sl, p, b), (pairs, cols) in streams.items():
            if name == s.name:
                r = rows.setdefault((sl, p), np.zeros((2, nb), np.int64))
                r[0, b], r[1, b] = len(pairs), len(cols)
        expected = 0
        for r in rows.values():
            if a is not None:
                expected |= _cpp_split(r[0], a)
            if u is not None:
                expected |= _cpp_split(r[1], u)
        assert int(mb.assignment["stack_split_mask"].sel(stack=s.name)) == expected


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_sample_minibatching_properties(seed):
    batch, feats, topo, stacking, limits, _ = _model(seed)
    G, S = topo.num_devices, topo.sparsecores_per_device
    n = batch.batch_size // (G * S)
    try:
        mb = minibatch(batch, feats, topo, stacking=stacking, stack_limits=limits, strategy="sample")
    except LimitExceededError as err:
        plan = scwork.sharding.plan_stacking(feats, topo, stacking=stacking, stack_limits=limits)
        streams = _brute_streams(batch, plan, topo, lambda stk, t, x, b: b)
        a, u = limits[err.stack]
        bad = {b for (name, sl, p, b), (pairs, cols) in streams.items() if name == err.stack and
               ((a is not None and len(pairs) > a) or (u is not None and len(cols) > u))}
        assert err.sample in bad
        assert err.required == max(len(pairs) if err.limit == "max_ids_per_partition" else len(cols)
                                   for (name, _, _, _), (pairs, cols) in streams.items() if name == err.stack)
        assert f"sample {err.sample} alone" in str(err)
        return
    _check_minibatches_partition_the_input(mb, batch, feats, topo)
    # runs are contiguous, cover the slice, and greedy is maximal: a run plus the next sample does not fit
    for s in mb.plan.stacks:
        a, u = limits[s.name]
        asg = mb.assignment.sel(stack=s.name)
        for d in range(G):
            for sc in range(S):
                k = int(asg["runs_per_sc"].sel(device=d, sc=sc))
                starts = asg["run_start"].sel(device=d, sc=sc).values[:k].tolist()
                stops = asg["run_stop"].sel(device=d, sc=sc).values[:k].tolist()
                assert starts[0] == 0 and stops[-1] == n and starts[1:] == stops[:-1]
                sl = d * S + sc
                for r in range(k - 1):
                    samples = set(range(sl * n + starts[r], sl * n + stops[r] + 1))
                    streams = _brute_streams(batch, mb.plan, topo, lambda stk, t, x, b, samples=samples: b in samples)
                    over = any((a is not None and len(pr) > a) or (u is not None and len(cl) > u)
                               for (name, sl2, p, inside), (pr, cl) in streams.items()
                               if name == s.name and sl2 == sl and inside)
                    assert over
        assert int(mb.num_minibatches.sel(stack=s.name)) == int(asg["runs_per_sc"].max())


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["vocabulary", "sample"]))
def test_numpy_backend_equals_numba(seed, strategy):
    batch, feats, topo, stacking, limits, _ = _model(seed)
    kw = dict(stacking=stacking, stack_limits=limits, strategy=strategy, num_buckets=8)
    try:
        a = minibatch(batch, feats, topo, **kw)
    except LimitExceededError as err:
        with pytest.raises(LimitExceededError) as info:
            minibatch(batch, feats, topo, backend="numpy", **kw)
        assert str(info.value) == str(err)
        return
    b = minibatch(batch, feats, topo, backend="numpy", **kw)
    assert a.stats.equals(b.stats) and a.assignment.equals(b.assignment)


THREADS = (1, 2, 3, 16)


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([8, 64]), st.sampled_from(["batch", "stack"]), st.booleans())
def test_vocabulary_results_do_not_depend_on_threads(seed, nb, scope, allow):
    """The scan is cut by slices and ranges as the thread count asks; every count adds up the same."""
    batch, feats, topo, stacking, limits, _ = _model(seed)
    cfg = SparsecoreConfig(allow_id_dropping=allow, max_ids_per_chip_per_sample=None)
    kw = dict(stacking=stacking, stack_limits=limits, num_buckets=nb, split_scope=scope, config=cfg)
    outcomes = []
    for threads in THREADS:
        try:
            mb = minibatch(batch, feats, topo, num_threads=threads, **kw)
            outcomes.append((mb.stats, mb.assignment))
        except LimitExceededError as err:
            outcomes.append(str(err))
    first = outcomes[0]
    for other in outcomes[1:]:
        if isinstance(first, str):
            assert other == first
        else:
            assert first[0].equals(other[0]) and first[1].equals(other[1])


@pytest.mark.parametrize("threads", THREADS)
def test_golden_cases_at_every_thread_count(threads, monkeypatch):
    """The hand-computed cases of test_minibatch_golden, with the work cut for 1, 2, 3 and 16 threads."""
    spec = importlib.util.spec_from_file_location("minibatch_golden_cases",
                                                  Path(__file__).with_name("test_minibatch_golden.py"))
    golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(golden)
    monkeypatch.setattr(mbmod, "resolve_num_threads", lambda n: threads)
    ran = 0
    for name in dir(golden):
        fn = getattr(golden, name)
        if name.startswith("test_vocabulary") and callable(fn):
            for backend in ("numba", "numpy"):
                fn(backend)
                ran += 1
    assert ran >= 4


# --------------------------------------------------------------------------------------
# hand-made cases, errors, dropping, CSR
# --------------------------------------------------------------------------------------
def test_worked_example_identity_hash():
    # 1 device x 1 SC (P = 1): ids 0..7 in two samples, limit 4 -> buckets {0..3} and {4..7}
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 6, 7], [0, 4, 8])})
    t = TableSpec("t", 64, 8, max_ids_per_partition=4, max_unique_ids_per_partition=4)
    mb = minibatch(batch, [FeatureSpec("f", t)], scwork.Topology(1, 1), stacking=None, bucket_hash="identity",
                   num_buckets=8)
    # tree: level 1 sums 1+1=2 fit; level 2: 2+2=4 fit; root 4+4=8 > 4 -> split bit 6
    assert int(mb.assignment["split_mask"].sel(stack="t")) == 0b1000000
    assert mb.stats["ids"].values.ravel().tolist() == [4, 4]
    assert mb.stats["required_buffer_size_per_sc"].values.ravel().tolist() == [8, 8]
    assert [b.ids("f").tolist() for b in mb.batches()] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [b.row_splits("f").tolist() for b in mb.batches()] == [[0, 4, 4], [0, 0, 4]]


def _two_tables(u_ids, u_limit):
    # P = 1, identity hash, 8 buckets: table t holds ids 0..7 (two samples of four) with
    # limits 4, so its own tree splits at the root (bit 6: buckets 0..3 | 4..7)
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 6, 7], [0, 4, 8]), "g": (u_ids, [0, 2, 4])})
    t = TableSpec("t", 64, 8, max_ids_per_partition=4, max_unique_ids_per_partition=4)
    u = TableSpec("u", 64, 8, max_ids_per_partition=u_limit, max_unique_ids_per_partition=u_limit)
    return batch, [FeatureSpec("f", t), FeatureSpec("g", u)]


def test_one_split_for_the_batch_cuts_a_stack_that_fits():
    """Only t overflows; the library's one split for the batch cuts u at t's boundary too."""
    batch, feats = _two_tables([0, 5, 1, 6], 64)      # u: buckets 0, 5 | 1, 6, 4 ids, fits
    kw = dict(stacking=None, bucket_hash="identity", num_buckets=8)
    mb = minibatch(batch, feats, scwork.Topology(1, 1), **kw)
    assert mb.split_scope == "batch" and mb.assignment.attrs["split_scope"] == "batch"
    assert mb.assignment["stack_split_mask"].values.tolist() == [0b1000000, 0]
    assert mb.assignment["split_mask"].values.tolist() == [0b1000000, 0b1000000]
    assert mb.num_minibatches.values.tolist() == [2, 2]
    assert mb.assignment["minibatch_of_bucket"].values.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]] * 2
    assert mb.minibatch_of("g").tolist() == [0, 1, 0, 1]
    # ids per mini-batch (stack, then mini-batch): t 4 | 4, u 2 | 2
    assert mb.stats["ids"].transpose("stack", "minibatch", ...).values.reshape(2, 2).tolist() == [[4, 4], [2, 2]]
    assert [sorted(b.ids("g").tolist()) for b in mb.batches()] == [[0, 1], [5, 6]]
    # per stack (the old plan): u stays whole, one mini-batch, nothing in the second
    alone = minibatch(batch, feats, scwork.Topology(1, 1), split_scope="stack", **kw)
    assert alone.split_scope == "stack"
    assert alone.assignment["split_mask"].values.tolist() == [0b1000000, 0]
    assert alone.num_minibatches.values.tolist() == [2, 1]
    assert alone.minibatch_of("g").tolist() == [0, 0, 0, 0]
    assert alone.stats["ids"].transpose("stack", "minibatch", ...).values.reshape(2, 2).tolist() == \
        [[4, 4], [4, 0]]
    assert [sorted(b.ids("g").tolist()) for b in alone.batches()] == [[0, 1, 5, 6], []]


def test_the_batch_split_is_the_or_of_both_stacks_masks():
    # u: ids 0, 1 | 2, 3 with limits 2: level 1 carries 2 and 2, level 2 (buckets 0..3)
    # holds 4 > 2 -> bit 4 (a cut after bucket 1); the root then carries 2 + 0, no cut:
    # u alone is buckets 0..1 | 2..7, two mini-batches; with t's root cut, three
    batch, feats = _two_tables([0, 1, 2, 3], 2)
    kw = dict(stacking=None, bucket_hash="identity", num_buckets=8)
    mb = minibatch(batch, feats, scwork.Topology(1, 1), **kw)
    assert mb.assignment["stack_split_mask"].values.tolist() == [0b1000000, 0b10000]
    assert mb.assignment["split_mask"].values.tolist() == [0b1010000] * 2
    assert mb.num_minibatches.values.tolist() == [3, 3]
    assert mb.assignment["minibatch_of_bucket"].values.tolist() == [[0, 0, 1, 1, 2, 2, 2, 2]] * 2
    assert mb.stats["ids"].transpose("stack", "minibatch", ...).values.reshape(2, 3).tolist() == \
        [[2, 2, 4], [2, 2, 0]]
    alone = minibatch(batch, feats, scwork.Topology(1, 1), split_scope="stack", **kw)
    assert alone.num_minibatches.values.tolist() == [2, 2]
    assert alone.assignment["minibatch_of_bucket"].values.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1],
                                                                        [0, 0, 1, 1, 1, 1, 1, 1]]
    assert alone.stats["ids"].transpose("stack", "minibatch", ...).values.reshape(2, 2).tolist() == \
        [[4, 4], [2, 2]]


def test_split_scope_is_checked():
    batch, feats = _two_tables([0, 5, 1, 6], 64)
    with pytest.raises(ConfigError, match="split_scope must be one of"):
        minibatch(batch, feats, scwork.Topology(1, 1), stacking=None, split_scope="table")
    with pytest.raises(ConfigError, match="split_scope='batch' needs strategy='vocabulary'"):
        minibatch(batch, feats, scwork.Topology(1, 1), stacking=None, strategy="sample", split_scope="batch")
    # the sample strategy plans each stack alone: None means "stack" there
    mb = minibatch(batch, feats, scwork.Topology(1, 1), stacking=None, strategy="sample")
    assert mb.split_scope == "stack" and mb.num_minibatches.values.tolist() == [2, 1]


def test_single_bucket_overflow_explains_needed_limit():
    # id 5 in 10 samples of one SparseCore: 10 pairs in its bucket, limit 4
    batch = FeatureBatch.from_ragged({"f": ([5] * 10 + [1, 2], list(range(11)) + [12])})
    t = TableSpec("t", 16, 8, max_ids_per_partition=4)
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, [FeatureSpec("f", t)], scwork.Topology(1, 1), stacking=None)
    err = info.value
    assert err.bucket == int(mbmod.bucket_of([5], 1)[0])
    assert (err.observed, err.configured, err.required, err.limit) == (10, 4, 10, "max_ids_per_partition")
    assert (err.stack, err.device, err.sc, err.partition) == ("t", 0, 0, 0)
    assert "max_ids_per_partition >= 10" in str(err) and "strategy='sample'" in str(err)
    # the sample strategy handles it: one id per sample, 4 samples per run
    mb = minibatch(batch, [FeatureSpec("f", t)], scwork.Topology(1, 1), stacking=None, strategy="sample")
    assert int(mb.num_minibatches.sel(stack="t")) == 3


def test_single_sample_overflow():
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 0], [0, 5, 6])})
    t = TableSpec("t", 16, 8, max_unique_ids_per_partition=4)
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, [FeatureSpec("f", t)], scwork.Topology(1, 1), stacking=None, strategy="sample")
    err = info.value
    assert (err.sample, err.observed, err.required, err.limit) == (0, 5, 5, "max_unique_ids_per_partition")
    assert "max_unique_ids_per_partition >= 5" in str(err)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_one_bucket_is_the_engine(seed):
    """With one bucket the per-bucket cut is the engine's cut, and overflow is the engine's error."""
    batch, feats, topo, stacking, limits, _ = _model(seed)
    for allow in (False, True):
        cfg = SparsecoreConfig(allow_id_dropping=allow, max_ids_per_chip_per_sample=None)
        try:
            ref = compute_stats(batch, feats, topo, stacking=stacking, stack_limits=limits, config=cfg)
        except LimitExceededError:
            with pytest.raises(LimitExceededError):
                minibatch(batch, feats, topo, stacking=stacking, stack_limits=limits, config=cfg, num_buckets=1)
            continue
        mb = minibatch(batch, feats, topo, stacking=stacking, stack_limits=limits, config=cfg, num_buckets=1)
        assert mb.max_minibatches == 1
        got = mb.stats.isel(minibatch=0)
        for v in ("ids", "unique_ids", "kept_ids", "required_buffer_size_per_device"):
            assert got[v].values.tolist() == ref[v].values.tolist(), v
        assert got["dropped_ids"].values.tolist() == ref["dropped_ids"].values.tolist()


def test_dropping_is_per_bucket():
    # P = 1, identity hash, 2 buckets: ids 0, 2 (bucket 0) and 1, 3, 5 (bucket 1), each in 3 samples
    ids = [0, 2, 1, 3, 5] * 3
    batch = FeatureBatch.from_ragged({"f": (ids, [0, 5, 10, 15])})
    t = TableSpec("t", 8, 8, max_ids_per_partition=4, max_unique_ids_per_partition=2)
    cfg = SparsecoreConfig(allow_id_dropping=True)
    mb = minibatch(batch, [FeatureSpec("f", t)], scwork.Topology(1, 1), stacking=None, config=cfg,
                   bucket_hash="identity", num_buckets=2)
    # bucket 0: 6 pairs, 2 ids -> keep 4; bucket 1: 9 pairs, 3 ids: stream (1,1,1,3,3,3,5,5,5) keeps 4 of ids 1, 3
    assert mb.stats["kept_ids"].values.ravel().tolist() == [4, 4]
    assert mb.stats["dropped_ids"].values.ravel().tolist() == [2, 5]


def test_preprocess_of_a_minibatch_and_oov():
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 6, 7, 99], [0, 4, 9])})
    t = TableSpec("t", 64, 8, max_ids_per_partition=4)
    feats = [FeatureSpec("f", t)]
    with pytest.raises(OutOfVocabularyError):
        minibatch(batch, feats, scwork.Topology(1, 1), stacking=None)
    mb = minibatch(batch, feats, scwork.Topology(1, 1), stacking=None, on_out_of_vocabulary="drop",
                   bucket_hash="identity", num_buckets=8)
    assert int(mb.stats["out_of_vocabulary_ids"].sel(stack="t")) == 1
    assert sum(b.num_ids for b in mb.batches()) == 8
    res = mb.preprocess(1)
    assert res.csr["t"].buffer_size_per_sc == 8 and int(res.stats["ids"].sum()) == 4
    assert "mini-batches" in repr(mb)
    with pytest.raises(ConfigError, match="mini-batch index"):
        mb.batch_for(2)


def test_no_limits_one_minibatch_and_bad_arguments():
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 2, 4])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    for strategy in ("vocabulary", "sample"):
        mb = minibatch(batch, feats, scwork.Topology(1, 2), stacking=None, strategy=strategy)
        assert mb.max_minibatches == 1
        assert mb.stats.isel(minibatch=0)["ids"].values.tolist() == \
            compute_stats(batch, feats, scwork.Topology(1, 2))["ids"].values.tolist()
    with pytest.raises(ConfigError, match="strategy"):
        minibatch(batch, feats, scwork.Topology(1, 1), strategy="rows")
    with pytest.raises(ConfigError, match="bucket_hash"):
        minibatch(batch, feats, scwork.Topology(1, 1), bucket_hash="md5")
    with pytest.raises(ConfigError, match="backend"):
        minibatch(batch, feats, scwork.Topology(1, 1), backend="cuda")


def test_benchmark_scale_smoke():
    """A mid-size synthetic batch: vocabulary mini-batching is exact on the largest stack."""
    from scwork.sharding._synthetic import synthetic_batch

    batch, feats = synthetic_batch(batch_size=1024, num_features=4, vocab_size=50_000, seed=5)
    topo = scwork.Topology(2, 2)
    plan = scwork.sharding.plan_stacking(feats, topo, batch_size=1024)
    whole = compute_stats(batch, feats, topo)
    lim = {s.name: (int(whole["ids"].sel(stack=s.name).max()) // 3 + 1,
                    int(whole["unique_ids"].sel(stack=s.name).max()) // 3 + 1) for s in plan.stacks}
    mb = minibatch(batch, feats, topo, stack_limits=lim)
    assert mb.max_minibatches >= 3
    assert int(mb.stats["ids"].sum()) == int(whole["ids"].sum())
    assert (mb.stats["max_ids_per_partition"].max("minibatch").max(["device", "partition"]).values <=
            np.array([lim[s][0] for s in mb.stats["stack"].values])).all()
