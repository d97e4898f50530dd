"""Mini-batching plans whose every expected value is worked out by hand (issue 21).

tests/sharding/test_minibatch.py checks properties and the kernels against their
references, test_minibatch_golden.py two small stacks, tests/oracle the real
jax-tpu-embedding. Here each number is written out with its arithmetic from the
definitions: jax-tpu-embedding's ``ComputeMinibatchingSplit`` (a tree node is split
when its two children's counts add up *above* the limit; the larger child is carried
up then, else the sum) and ``GetSplitPos``; the identity bucket hash
(``col_id & (num_buckets - 1)``, the hash the library's own tests use) with
``col_id = p + P * (id // P + row_offset_in_shard)``, ``p = (id + col_shift) % P``;
the greedy sample runs of the sample strategy; and how the vocabulary scan cuts its
work into tasks (visible through :func:`scwork.sharding._profile.profiled`, which
records every task's size, and through the scratch estimate of the memory check).

``Topology(d, s)`` has ``G = d`` devices, ``S = s`` SparseCores per device and
``P = d * s`` partitions; a slice is the ``n = B / (G * S)`` samples of one source
SparseCore, slice ``d * S + s``.
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError, LimitExceededError, OutOfVocabularyError
from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, minibatch
from scwork.sharding._profile import profiled
from scwork.sharding.minibatch import (
    bucket_of,
    compute_minibatching_split,
    split_positions,
    split_to_minibatches,
)

IDENTITY = dict(stacking=None, bucket_hash="identity")
mbmod = importlib.import_module("scwork.sharding.minibatch")   # the module (scwork.sharding.minibatch is the function)


# --------------------------------------------------------------------------------------
# the split tree
# --------------------------------------------------------------------------------------
def test_a_node_is_split_only_above_the_limit():
    # 2 buckets: one node (the root); 3 + 2 = 5 fits 5, not 4
    assert compute_minibatching_split([3, 2], 5) == 0
    assert compute_minibatching_split([3, 2], 4) == 0b1
    # 4 buckets, limit 5: level 1 nodes 0 (3 + 2 = 5, fits, carries 5) and 1 (0 + 1 = 1,
    # carries 1); root (node 2): 5 + 1 = 6 > 5, split
    assert compute_minibatching_split([3, 2, 0, 1], 5) == 0b100
    # 4 buckets, limit 4: node 0 splits (5 > 4) and carries max(3, 2) = 3; root 3 + 1 = 4 fits
    assert compute_minibatching_split([3, 2, 0, 1], 4) == 0b1
    # no limit: never split; one bucket: no node at all
    assert compute_minibatching_split([9, 9], None) == 0
    assert compute_minibatching_split([100], 1) == 0
    assert compute_minibatching_split(np.zeros((0, 8), np.int64), 1) == 0


def test_the_masks_of_several_rows_are_ored_and_any_shape_is_rows():
    # row 0 [1, 1, 0, 0] limit 2: node 0 carries 2, node 1 carries 0, root 2 fits: no bit.
    # row 1 [0, 0, 1, 2]: node 1 splits (3 > 2) and carries 2, root 0 + 2 fits: bit 1.
    rows = np.array([[[1, 1, 0, 0]], [[0, 0, 1, 2]]])            # (2, 1, 4): two rows of 4
    assert compute_minibatching_split(rows, 2) == 0b10
    assert compute_minibatching_split(rows[0], 2) == 0
    # the input is not modified (the tree works on a copy)
    assert rows.tolist() == [[[1, 1, 0, 0]], [[0, 0, 1, 2]]]


def test_the_carried_count_is_the_larger_child_after_a_split():
    # 8 buckets, limit 10: level 1: node 0 (9 + 0) carries 9, node 1 (0 + 0) 0, node 2
    # (6 + 6 = 12 > 10) splits and carries 6, node 3 carries 0. level 2: node 4 (9 + 0)
    # carries 9, node 5 (6 + 0) carries 6. root (node 6): 15 > 10 splits.
    assert compute_minibatching_split([9, 0, 0, 0, 6, 6, 0, 0], 10) == (1 << 2) | (1 << 6)
    # [4, 7, 0, 0, 0, 0, 0, 0], limit 10: node 0 splits (11), carries 7 (not 4, not 11);
    # node 4: 7 + 0 fits; root 7 + 0 fits.
    assert compute_minibatching_split([4, 7, 0, 0, 0, 0, 0, 0], 10) == 0b1
    # [4, 7, 4, 0, ...], limit 10: node 0 splits, carries 7; node 4: 7 + 4 = 11 splits
    assert compute_minibatching_split([4, 7, 4, 0, 0, 0, 0, 0], 10) == 0b10001
    # were the smaller child (4) carried, node 4 would hold 4 + 4 = 8 and fit
    assert compute_minibatching_split([7, 4, 4, 0, 0, 0, 0, 0], 10) == 0b10001


@pytest.mark.parametrize("bad", [0, -2, 3, 6, 65, 96, 128, True, 2.0, "8", None])
def test_num_buckets_is_a_power_of_two_up_to_64(bad):
    with pytest.raises(ConfigError, match=r"num_buckets must be a power of two between 1 and 64 .* got "):
        split_to_minibatches(0, bad)


def test_split_positions_and_minibatches_at_every_size():
    # 1 bucket: no node, one mini-batch
    assert split_positions(0, 1) == 0
    assert split_to_minibatches(0, 1).tolist() == [0]
    # 2 buckets: node 0 is the root, cut after bucket 0
    assert split_positions(1, 2) == 1
    assert split_to_minibatches(1, 2).tolist() == [0, 1]
    assert split_to_minibatches(np.int64(1), np.int64(2)).tolist() == [0, 1]
    # 4 buckets: nodes 0, 1 (level 1) cut after buckets 0 and 2; node 2 (root) after 1
    assert [split_positions(1 << k, 4) for k in range(3)] == [0b1, 0b100, 0b10]
    assert split_to_minibatches(0b101, 4).tolist() == [0, 1, 2, 2]
    # 64 buckets: node 31 is the last of level 1 (cut after bucket 62), node 32 the first
    # of level 2 (after bucket 1), node 62 the root (after bucket 31)
    assert split_positions(1 << 31, 64) == 1 << 62
    assert split_positions(1 << 32, 64) == 1 << 1
    assert split_positions(1 << 62, 64) == 1 << 31
    groups = split_to_minibatches((1 << 62) | (1 << 31), 64)
    assert groups.tolist() == [0] * 32 + [1] * 31 + [2]
    # every node of 8 buckets (bits 0..6) split: every bucket its own mini-batch
    assert split_positions(np.int64(0b1111111), 8) == 0b1111111
    assert split_to_minibatches(0b1111111, 8).tolist() == list(range(8))


@pytest.mark.parametrize("split, nb", [(-1, 8), (1 << 7, 8), (0b11111111, 8), (1, 1), (2, 2), (3, 2), (True, 2),
                                       (1.0, 8), ("1", 8), (1 << 63, 64), (1 << 64, 64)])
def test_a_split_mask_has_one_bit_per_node_of_the_tree(split, nb):
    # 8 buckets have 7 nodes (bits 0..6), 1 bucket none, 2 buckets one
    with pytest.raises(ConfigError, match=rf"split must be a mask of the {nb - 1} nodes of the tree of {nb} buckets"):
        split_positions(split, nb)
    with pytest.raises(ConfigError, match="split must be a mask"):
        split_to_minibatches(split, nb)


def test_the_sample_strategy_takes_split_scope_stack():
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 2, 4])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8, max_ids_per_partition=2))]
    mb = minibatch(batch, feats, scwork.Topology(1, 1), strategy="sample", split_scope="stack", stacking=None)
    assert mb.split_scope == "stack" and mb.num_minibatches.values.tolist() == [2]
    with pytest.raises(ConfigError, match="split_scope='batch' needs strategy='vocabulary'"):
        minibatch(batch, feats, scwork.Topology(1, 1), strategy="sample", split_scope="batch", stacking=None)


def test_the_split_mask_message_gives_the_range():
    with pytest.raises(ConfigError) as info:
        split_positions(1 << 7, 8)
    assert str(info.value) == ("split must be a mask of the 7 nodes of the tree of 8 buckets: an int in 0..2**7 - 1, "
                               "as compute_minibatching_split returns it; got 128")


def test_counts_and_limit_are_checked_not_rounded():
    # 1.5 + 2.7 = 4.2 > 3 would split; truncated to 1 + 2 it would fit: floats are refused
    for bad in ([1.5, 2.7], [True, False], 5, np.array(3), ["1", "2"]):
        with pytest.raises(ConfigError, match=r"counts must be an integer array of shape \(\.\.\., num_buckets\)"):
            compute_minibatching_split(bad, 3)
    with pytest.raises(ConfigError) as info:
        compute_minibatching_split(7, 3)
    assert str(info.value) == ("counts must be an integer array of shape (..., num_buckets), got a scalar: 7; "
                               "pass whole counts of ids per bucket")
    with pytest.raises(ConfigError) as info:
        compute_minibatching_split(np.array([0.5, 1.0]), 3)
    assert str(info.value) == ("counts must be an integer array of shape (..., num_buckets), got dtype float64: "
                               "array([0.5, 1. ]); pass whole counts of ids per bucket")
    with pytest.raises(ConfigError, match=r"counts must be in 0\.\.4611686018427387903 .* got -1"):
        compute_minibatching_split([0, -1], 3)
    # the largest count of 2 buckets: (2**63 - 1) // 2; the two add up to 2**63 - 2, no wrap
    top = (2**63 - 1) // 2
    assert compute_minibatching_split([top, top], 2**63 - 3) == 1
    assert compute_minibatching_split(np.array([top, top], np.uint64), 2**63 - 2) == 0
    with pytest.raises(ConfigError, match=f"counts must be in 0..{top} .* got {top + 1}"):
        compute_minibatching_split([top + 1, 0], 2**62)
    with pytest.raises(ConfigError, match=f"counts must be in 0..{top} .* got {top + 1}$"):
        compute_minibatching_split([top + 1, 5], 2**62)        # the count out of range, not the smallest
    # one bucket: any int64 count (no node, no sum)
    assert compute_minibatching_split([2**63 - 1], 5) == 0
    # 64 buckets: (2**63 - 1) // 64 = 144115188075855871
    assert compute_minibatching_split([144115188075855871] + [0] * 63, 144115188075855871) == 0
    with pytest.raises(ConfigError, match="got 144115188075855872"):
        compute_minibatching_split([144115188075855872] + [0] * 63, 1)
    assert compute_minibatching_split(np.array([0, 1], np.uint8), 0) == 1
    assert compute_minibatching_split([0, 0], 0) == 0
    assert compute_minibatching_split([2, 1], np.int64(2)) == 1
    for bad in (-1, True, 2.0, "3"):
        with pytest.raises(ConfigError, match="limit must be None or an int >= 0"):
            compute_minibatching_split([1, 1], bad)
    with pytest.raises(ConfigError, match="num_buckets must be a power of two"):
        compute_minibatching_split([1, 1, 1], 3)


# --------------------------------------------------------------------------------------
# buckets
# --------------------------------------------------------------------------------------
def test_bucket_of_uses_shift_and_row_offset_and_any_array_shape():
    # P = 4, col_shift 1, row offset 2: id 6 -> p = 7 % 4 = 3, col = 3 + 4 * (1 + 2) = 15;
    # id 3 -> p = 0, col = 0 + 4 * (0 + 2) = 8; 16 buckets: 15 and 8
    assert bucket_of([[6], [3]], 4, 1, 2, num_buckets=16, bucket_hash="identity").tolist() == [15, 8]
    # 4 buckets: 15 & 3 = 3, 8 & 3 = 0
    assert bucket_of(np.array([6, 3]), 4, 1, 2, num_buckets=4, bucket_hash="identity").tolist() == [3, 0]
    assert bucket_of([], 4, bucket_hash="identity").tolist() == []
    for bad in ("md5", "fnv", "", "Highway", "zz"):        # names sorting before, between and after the two
        with pytest.raises(ConfigError, match="bucket_hash must be one of"):
            bucket_of([1], 4, bucket_hash=bad)
    with pytest.raises(ConfigError, match="num_buckets"):
        bucket_of([1], 4, num_buckets=128)


# --------------------------------------------------------------------------------------
# the plan object
# --------------------------------------------------------------------------------------
def _two_stacks(split_scope):
    # P = 1, 8 buckets, identity hash. t: ids 0..7 in two samples of four, limits 4: its
    # root splits (4 + 4 > 4), buckets 0..3 | 4..7. u: 4 ids, limit 64: fits.
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 6, 7], [0, 4, 8]), "g": ([0, 5, 1, 6], [0, 2, 4])})
    t = TableSpec("t", 64, 8, max_ids_per_partition=4, max_unique_ids_per_partition=4)
    u = TableSpec("u", 64, 8, max_ids_per_partition=64)
    return minibatch(batch, [FeatureSpec("f", t), FeatureSpec("g", u)], scwork.Topology(1, 1), num_buckets=8,
                     split_scope=split_scope, **IDENTITY)


def test_repr_names_every_stack_and_the_largest_count():
    mb = _two_stacks("stack")           # t: 2 mini-batches, u: 1
    assert mb.max_minibatches == 2
    assert repr(mb) == (
        "MiniBatchPlan(strategy='vocabulary', split_scope='stack', 2 stacks, max 2 mini-batches)\n"
        "  t: 2 mini-batches (max_ids_per_partition=4, max_unique_ids_per_partition=4)\n"
        "  u: 1 mini-batches (max_ids_per_partition=64, max_unique_ids_per_partition=None)")
    html = mb._repr_html_()
    assert "MiniBatchPlan (strategy vocabulary, split per stack): at most 2 mini-batches per step on 1 chip" in html
    cells = [row.split("</td>")[:4] for row in html.split("<tr>")[2:]]
    assert [[c.rsplit(">", 1)[1] for c in row] for row in cells] == [["t", "2", "4", "4"], ["u", "1", "64", ""]]   # None: an empty cell


def test_batch_for_takes_an_index_below_the_largest_count():
    mb = _two_stacks("stack")
    for bad in (-1, 2, 3, True, 1.0, "1"):               # 2 mini-batches: 0 and 1; 2 and 3 are past them
        with pytest.raises(ConfigError, match=r"mini-batch index must be an int in 0\.\.1, got "):
            mb.batch_for(bad)
    # the last index: t's ids 4..7 (buckets 4..7), nothing of u (one mini-batch only)
    last = mb.batch_for(np.int64(1))
    assert last.ids("f").tolist() == [4, 5, 6, 7] and last.ids("g").tolist() == []
    assert [b.ids("g").tolist() for b in mb.batches()] == [[0, 5, 1, 6], []]
    # the same array every call (cached), aligned with the batch's ids
    assert mb.minibatch_of("f") is mb.minibatch_of("f")
    assert mb.minibatch_of("f").tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    # with one split for the batch u is cut at t's boundary: g's 0, 1 | 5, 6
    both = _two_stacks(None)
    assert [b.ids("g").tolist() for b in both.batches()] == [[0, 1], [5, 6]]
    # preprocess of a mini-batch: its CSR, 4 ids of t (one 8-entry segment), 2 of u
    res = both.preprocess(1, num_threads=1)
    assert res.csr["t"].buffer_size_per_sc == 8 and int(res.stats["ids"].sel(stack="t").sum()) == 4
    assert int(res.stats["ids"].sel(stack="u").sum()) == 2


# --------------------------------------------------------------------------------------
# out-of-vocabulary ids
# --------------------------------------------------------------------------------------
def _oov_case():
    # g (table u, vocab 8) first in the batch: sample 1 holds 12 and 13; f (table t, vocab 8):
    # 7 (the last id of the vocabulary, kept), then 8 and 9 in sample 1
    batch = FeatureBatch.from_ragged({"g": ([1, 12, 13], [0, 1, 3]), "f": ([7, 8, 9], [0, 1, 3])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8, max_ids_per_partition=2)), FeatureSpec("g", TableSpec("u", 8, 8))]
    return batch, feats


@pytest.mark.parametrize("strategy", ["vocabulary", "sample"])
def test_out_of_vocabulary_ids_are_reported_from_the_first_feature_of_the_batch(strategy):
    batch, feats = _oov_case()
    with pytest.raises(OutOfVocabularyError) as info:
        minibatch(batch, feats, scwork.Topology(1, 1), strategy=strategy, **IDENTITY)
    err = info.value
    assert (err.feature, err.sample, err.id, err.vocab_size, err.count) == ("g", 1, 12, 8, 4)   # the first


@pytest.mark.parametrize("strategy", ["vocabulary", "sample"])
def test_out_of_vocabulary_ids_are_dropped_and_counted_per_stack(strategy):
    batch, feats = _oov_case()
    mb = minibatch(batch, feats, scwork.Topology(1, 1), strategy=strategy, on_out_of_vocabulary="drop",
                   num_buckets=8, **IDENTITY)
    assert mb.stats["out_of_vocabulary_ids"].values.tolist() == [2, 2]        # stacks t, u
    assert mb.batch.ids("f").tolist() == [7] and mb.batch.ids("g").tolist() == [1]
    assert mb.num_minibatches.values.tolist() == [1, 1]
    assert mb.stats["ids"].sel(minibatch=0).values.ravel().tolist() == [1, 1]
    # every id within its vocabulary (7 of 8): nothing dropped, nothing counted
    fine = FeatureBatch.from_ragged({"g": ([1, 7], [0, 1, 2]), "f": ([7, 0, 6], [0, 1, 3])})
    mb = minibatch(fine, feats, scwork.Topology(1, 1), strategy=strategy, on_out_of_vocabulary="drop",
                   num_buckets=8, **IDENTITY)
    assert mb.stats["out_of_vocabulary_ids"].values.tolist() == [0, 0]
    assert mb.batch is fine


# --------------------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------------------
KERNELS = ("bin_slices", "scan_range", "add_range_counts", "minibatch_sums", "sample_split", "naive_by_run")


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("strategy", ["vocabulary", "sample"])
def test_the_backend_picks_the_kernels_or_their_references(backend, strategy, monkeypatch):
    """``backend="numpy"`` runs the slow references only, ``"numba"`` the kernels only."""
    from scwork.sharding import _minibatch_kernels as K

    calls = []
    for name in KERNELS:
        for full in (name, name + "_reference"):
            def spy(*args, _fn=getattr(K, full), _name=full):
                calls.append(_name)
                return _fn(*args)
            monkeypatch.setattr(K, full, spy)
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 6, 7], [0, 4, 8])})
    t = TableSpec("t", 64, 8, max_ids_per_partition=4)
    mb = minibatch(batch, [FeatureSpec("f", t)], scwork.Topology(1, 1), strategy=strategy, backend=backend,
                   num_buckets=8, num_threads=2, **IDENTITY)
    assert mb.max_minibatches == 2
    used = set(calls)
    expected = {"vocabulary": {"bin_slices", "scan_range", "add_range_counts", "minibatch_sums"},
                "sample": {"sample_split", "naive_by_run"}}[strategy]
    assert used == {name if backend == "numba" else name + "_reference" for name in expected}


# --------------------------------------------------------------------------------------
# how the vocabulary scan cuts its work (task sizes as profiled) and what it allocates
# --------------------------------------------------------------------------------------
# The scan's tasks for T threads: a table's ids are cut by slices into runs of about
# target = total / (8 T) ids (one task for the whole table when it holds at most 1 / T
# of the ids, one per table with T = 1), then into ranges of u = p << qbits | q
# (q = id // P, qbits = bit_length((vocab - 1) // P)), whole bins of u >> cshift,
# cshift = min(qbits, max(0, pbits + qbits - 10)) for T > 1, pbits + qbits for T = 1
# (one bin), pbits = bit_length(P - 1). A range is a run of bins whose first ids (the
# ids before it in the table) fall in one multiple of target, and a bin above target
# runs alone. With a prefix cut (allow_id_dropping and a limit) a range is whole
# partitions instead: partitions are added while the range stays within target.
# The scan allocates 8 bytes per key, per bin position (bins + 1 per slice task) and per
# counter of every stack (3 S P B + S B + P B + B for S slices, P partitions, B
# buckets), and per thread the scratch of the largest slice task (3 per id) and one
# counter set; above SCWORK_MAX_SCRATCH_BYTES it refuses.
def _profile_sizes(batch, feats, topo, threads, **kw):
    with profiled(threads) as profiles:
        minibatch(batch, feats, topo, **kw)
    (profile,) = profiles
    assert [name for name, _ in profile.batches] == ["slices", "ranges", "stacks", "minibatches"]
    return [[int(s) for s in sizes] for sizes in profile.sizes]


def _scratch_needed(batch, feats, topo, threads, monkeypatch, **kw):
    """The bytes of the refusal message; the call passes with exactly that many."""
    monkeypatch.setenv("SCWORK_MAX_SCRATCH_BYTES", "1")
    with pytest.raises(ConfigError, match=r"vocabulary mini-batching would allocate about [\d,]+ bytes") as info:
        minibatch(batch, feats, topo, num_threads=threads, **kw)
    need = int(str(info.value).split("about ")[1].split(" bytes")[0].replace(",", ""))
    for limit, ok in ((need - 1, False), (need, True)):
        monkeypatch.setenv("SCWORK_MAX_SCRATCH_BYTES", str(limit))
        if ok:
            minibatch(batch, feats, topo, num_threads=threads, **kw)
        else:
            with pytest.raises(ConfigError, match=f"above the limit of {limit:,} bytes"):
                minibatch(batch, feats, topo, num_threads=threads, **kw)
    monkeypatch.delenv("SCWORK_MAX_SCRATCH_BYTES")
    return need


def test_scratch_of_one_table_on_one_and_two_threads(monkeypatch):
    # Topology(1, 2): 2 slices, P = 2 (pbits 1); vocab 64: qbits = bit_length(31) = 5.
    # Slice 0 holds ids 0, 1, 2, slice 1 holds 3: 4 ids. Counters of 8 buckets:
    # 3 * 2 * 2 * 8 + 2 * 8 + 2 * 8 + 8 = 136.
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 3, 4])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=1))]
    topo = scwork.Topology(1, 2)
    kw = dict(num_buckets=8, **IDENTITY)
    # T = 1: one slice task of 4 ids, one bin (2 positions):
    # 8 * (4 + 2 + 136) + 1 * 8 * (3 * 4 + 136) = 1136 + 1184
    assert _scratch_needed(batch, feats, topo, 1, monkeypatch, **kw) == 2320
    # T = 2: target max(1, 4 / 16) = 1; the table (4 ids) is more than 1 / 2 of the ids,
    # so it is cut by slices: first ids 0 and 3 are in runs 0 and 3, two tasks (3 and 1
    # ids); cshift = min(5, max(0, 1 + 5 - 10)) = 0: 64 bins, 2 * 65 positions:
    # 8 * (4 + 130 + 136) + 2 * 8 * (3 * 3 + 136) = 2160 + 2320
    assert _scratch_needed(batch, feats, topo, 2, monkeypatch, **kw) == 4480
    # u of ids 0, 1, 2, 3: (0, 0) -> 0, (1, 0) -> 32, (0, 1) -> 1, (1, 1) -> 33: four bins of
    # one id each, each its own run of target 1: four ranges
    assert _profile_sizes(batch, feats, topo, 2, **kw) == [[3, 1], [1, 1, 1, 1], [4], [4]]
    assert _profile_sizes(batch, feats, topo, 1, **kw) == [[4], [4], [4], [4]]


def test_slice_tasks_of_two_tables(monkeypatch):
    # Topology(1, 4): 4 slices (one sample each), P = 4 (pbits 2), vocab 64: qbits 4.
    # f (table t): one id per slice, 4; g (table u): 10, 1, 1, 10 ids, 22. 26 in all.
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 1, 2, 3, 4]),
                                      "g": (list(range(22)), [0, 10, 11, 12, 22])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=8)),
             FeatureSpec("g", TableSpec("u", 64, 8, max_ids_per_partition=8))]
    topo = scwork.Topology(1, 4)
    kw = dict(num_buckets=8, **IDENTITY)
    # T = 2, target 26 / 16 = 1.625. t: 4 * 2 <= 26, one task. u: ids before its slices
    # 0, 10, 11, 12 -> runs 0, 6, 6, 7: tasks of slices [0], [1, 2], [3]: 10, 2, 10 ids.
    assert _profile_sizes(batch, feats, topo, 2, **kw)[0] == [4, 10, 2, 10]
    # counters (S = 4, P = 4, 8 buckets): 3 * 4 * 4 * 8 + 4 * 8 + 4 * 8 + 8 = 456 per stack.
    # T = 2: 64 bins (cshift 0), 1 + 3 slice tasks: 4 * 65 positions, largest task 10:
    # 8 * (26 + 260 + 2 * 456) + 2 * 8 * (3 * 10 + 456) = 9584 + 7776
    assert _scratch_needed(batch, feats, topo, 2, monkeypatch, **kw) == 17360
    # T = 1: one bin per table, a task each (4 and 22 ids): 8 * (26 + 4 + 912) + 8 * (66 + 456)
    assert _scratch_needed(batch, feats, topo, 1, monkeypatch, **kw) == 11712
    # two tables of exactly half the ids each (4 * 2 <= 8): each one task, not cut by slices
    half = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 3, 3, 3, 4]), "g": ([0, 1, 2, 3], [0, 1, 1, 1, 4])})
    assert _profile_sizes(half, feats, topo, 2, **kw)[0] == [4, 4]


def test_range_tasks_are_runs_of_about_target_ids_and_a_hot_bin_alone():
    # Topology(1, 2): P = 2, vocab 64 (qbits 5), T = 2: 64 bins, one per u = p << 5 | q.
    # slice 0: id 0 six times (u 0), 2 (u 1), 4 twice (u 2), 6, 8, 10, 12, 14 (u 3..7): 14;
    # slice 1: the odd ids 1..35 (u 32..49, one each): 18. 32 ids, target 32 / 16 = 2.
    slice0 = [0] * 6 + [2, 4, 4, 6, 8, 10, 12, 14]
    slice1 = list(range(1, 36, 2))
    batch = FeatureBatch.from_ragged({"f": (slice0 + slice1, [0, 14, 32])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=64))]
    sizes = _profile_sizes(batch, feats, scwork.Topology(1, 2), 2, num_buckets=8, **IDENTITY)
    # slices: ids before them 0 and 14, runs 0 and 7: two tasks
    assert sizes[0] == [14, 18]
    # ranges: bins with ids 6, 1, 2, 1, 1, 1, 1, 1 | 1 x 18, ids before them 0, 6, 7, 9,
    # 10, 11, 12, 13 | 14, 15, ..., 31 in runs 0, 3, 3, 4, 5, 5, 6, 6 | 7, 7, 8, 8, ...:
    # u 0 (6 > 2, alone), u 1-2 (the 2 of u 2 equals target: not alone), u 3, u 4-5, u 6-7,
    # then pairs.
    assert sizes[1] == [6, 3, 1, 2, 2] + [2] * 9
    assert sizes[2] == sizes[3] == [32]


def test_with_a_prefix_cut_ranges_are_whole_partitions():
    # Topology(1, 4): P = 4; vocab 4: qbits = bit_length(3 // 4) = 0, so with T = 2 the
    # bins are the partitions (cshift 0, 4 bins). ids 0, 1, 2, 3 (partition = id) 2, 2,
    # 30 and 30 times: 64 ids, target 4. Partitions 0 and 1 (2 + 2 = 4, within target)
    # make one range, 2 and 3 one each.
    samples = [[0, 1] + [2] * 8 + [3] * 8] * 2 + [[2] * 7 + [3] * 7] * 2
    ids = [x for s in samples for x in s]
    batch = FeatureBatch.from_ragged({"f": (ids, np.cumsum([0] + [len(s) for s in samples]).tolist())})
    feats = [FeatureSpec("f", TableSpec("t", 4, 8, max_ids_per_partition=100))]
    topo = scwork.Topology(1, 4)
    kw = dict(num_buckets=8, config=SparsecoreConfig(allow_id_dropping=True), **IDENTITY)
    assert _profile_sizes(batch, feats, topo, 2, **kw)[1] == [4, 30, 30]
    # T = 1: one bin (cshift 2 + 0), one range of every partition
    assert _profile_sizes(batch, feats, topo, 1, **kw)[1] == [64]
    # without id dropping, ranges of bins as above: ids before the bins 0, 2, 4, 34 in runs
    # 0, 0, 1, 8: partitions 0-1, then 2 and 3 alone (30 > 4)
    assert _profile_sizes(batch, feats, topo, 2, num_buckets=8, **IDENTITY)[1] == [4, 30, 30]
    # the counts do not depend on the cut: per partition, ids each slice sends
    one = minibatch(batch, feats, topo, num_threads=1, **kw)
    two = minibatch(batch, feats, topo, num_threads=2, **kw)
    assert one.stats.equals(two.stats) and one.assignment.equals(two.assignment)
    assert one.stats["ids"].sel(minibatch=0, stack="t", device=0).values.tolist() == \
        [[1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1]]


def test_defaults_are_64_buckets():
    # the root of 64 buckets is node 62: a cut between buckets 31 and 32
    assert split_positions(1 << 62) == 1 << 31
    assert split_to_minibatches(1 << 62).tolist() == [0] * 32 + [1] * 32
    # identity hash with the default 64 buckets, shift 0 and row offset 0: col_id = id
    # on P = 1, and 64 folds to 0
    assert bucket_of([5, 63, 64, 70], 1, bucket_hash="identity").tolist() == [5, 63, 0, 6]


def test_the_sample_strategy_checks_and_plans_one_task_per_feature_and_stack():
    # f: 5 ids, g: 3 (stacks t and u); the out-of-vocabulary check is a task per feature
    # (in the plan's order: f, g), the runs a task per stack, each sized by its raw ids
    batch = FeatureBatch.from_ragged({"g": ([1, 7, 3], [0, 1, 3]), "f": ([7, 0, 6, 1, 2], [0, 1, 5])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8, max_ids_per_partition=4)), FeatureSpec("g", TableSpec("u", 8, 8))]
    with profiled(2) as profiles:
        minibatch(batch, feats, scwork.Topology(1, 1), strategy="sample", stacking=None)
    assert [name for name, _ in profiles[0].batches] == ["oov", "stacks"]
    assert profiles[0].sizes == [[5, 3], [5, 3]]
    # one stack of both tables: one task of 8 ids
    with profiled(2) as profiles:
        minibatch(batch, feats, scwork.Topology(1, 1), strategy="sample", stacking=[["t", "u"]])
    assert profiles[0].sizes == [[5, 3], [8]]


# --------------------------------------------------------------------------------------
# a bucket or a sample over a limit: where, and what limit it needs
# --------------------------------------------------------------------------------------
def _samples(rows):
    """Ragged ids from a list of samples."""
    return ([x for r in rows for x in r], np.cumsum([0] + [len(r) for r in rows]).tolist())


def test_the_largest_bucket_over_the_ids_limit_is_named():
    # Topology(2, 2): P = 4, slices of n = 5 samples (B = 20). One table, identity hash,
    # 8 buckets: col_id = id, bucket = id & 7, partition = id % 4.
    # slice 0 (device 0, sc 0): id 1 in samples 0..3: 4 ids to partition 1, bucket 1;
    # slice 1 (device 0, sc 1): id 5 in samples 5..8: 4 ids to partition 1, bucket 5;
    # slice 3 (device 1, sc 1): id 6 in samples 15..19: 5 ids to partition 2, bucket 6.
    # Three buckets overflow (in two partitions); bucket 6's stream is the largest.
    rows = [[1]] * 4 + [[]] + [[5]] * 4 + [[]] * 6 + [[6]] * 5
    batch = FeatureBatch.from_ragged({"f": _samples(rows)})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=3))]
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, feats, scwork.Topology(2, 2), num_buckets=8, **IDENTITY)
    err = info.value
    assert (err.limit, err.observed, err.configured, err.required) == ("max_ids_per_partition", 5, 3, 5)
    assert (err.stack, err.table, err.device, err.sc, err.partition, err.bucket) == ("t", "t", 1, 1, 2, 6)
    assert str(err).startswith(
        "stack 't' (tables: t): bucket 6 alone holds 5 ids that source SparseCore 1 of device 1 sends to "
        "partition 2, above max_ids_per_partition=3 (3 of 8 buckets overflow on their own); ")
    assert "It would need max_ids_per_partition >= 5 (the largest single-bucket count of this stack)" in str(err)
    # with a limit of 5 all fit, and as the buckets are in different streams (slices 0,
    # 1 and 3) nothing is split
    ok = minibatch(batch, [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=5))], scwork.Topology(2, 2),
                   num_buckets=8, **IDENTITY)
    assert ok.max_minibatches == 1


def test_a_bucket_over_the_distinct_ids_limit_is_named_after_the_ids_limit_fits():
    # Topology(2, 2), B = 20. Stack t_u of tables t (vocab 64, first: col_id = id) and u.
    # slice 2 (device 1, sc 0), sample 10: ids 1, 9, 17 of t: 3 distinct ids to partition 1,
    # all in bucket 1 (3 ids too: within max_ids 10). slice 0, sample 0: 6 and 14, 2 distinct
    # (bucket 6, fits). u's one id is in slice 1, alone there.
    f_rows = [[6, 14]] + [[]] * 9 + [[1, 9, 17]] + [[]] * 9
    g_rows = [[]] * 5 + [[3]] + [[]] * 14
    batch = FeatureBatch.from_ragged({"f": _samples(f_rows), "g": _samples(g_rows)})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8)), FeatureSpec("g", TableSpec("u", 64, 8))]
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, feats, scwork.Topology(2, 2), stacking=[["t", "u"]], stack_limits={"t_u": (10, 2)},
                  num_buckets=8, bucket_hash="identity")
    err = info.value
    assert (err.limit, err.observed, err.configured, err.required) == ("max_unique_ids_per_partition", 3, 2, 3)
    assert (err.stack, err.table, err.device, err.sc, err.partition, err.bucket) == ("t_u", "t, u", 1, 0, 1, 1)
    assert str(err).startswith(
        "stack 't_u' (tables: t, u): bucket 1 alone holds 3 distinct ids that source SparseCore 0 of device 1 "
        "sends to partition 1, above max_unique_ids_per_partition=2 (1 of 8 buckets overflow on their own); ")


def test_the_message_counts_overflowing_buckets_not_streams():
    # "(k of nb buckets overflow on their own)" counts buckets over the limit in any slice
    # and partition: neither the slices nor the (slice, partition) streams that hold them.
    # Identity hash, 8 buckets, max_ids_per_partition = 2.
    t = TableSpec("t", 64, 8, max_ids_per_partition=2)
    # Topology(1, 1): one slice of 8 samples, P = 1, col_id = id. id 1 in samples 0..2
    # (3 ids, bucket 1), id 2 in samples 3..6 (4 ids, bucket 2), id 3 in sample 7 (1 id,
    # bucket 3): buckets 1 and 2 overflow, both in slice 0; bucket 2 is the largest.
    batch = FeatureBatch.from_ragged({"f": _samples([[1]] * 3 + [[2]] * 4 + [[3]])})
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, [FeatureSpec("f", t)], scwork.Topology(1, 1), num_buckets=8, **IDENTITY)
    err = info.value
    assert (err.observed, err.device, err.sc, err.partition, err.bucket) == (4, 0, 0, 0, 2)
    assert str(err).startswith(
        "stack 't' (tables: t): bucket 2 alone holds 4 ids that source SparseCore 0 of device 0 sends to "
        "partition 0, above max_ids_per_partition=2 (2 of 8 buckets overflow on their own); ")
    # Topology(2, 1): P = 2, slices of 4 samples. id 1 (partition 1, col_id 1 + 2 * 0 = 1,
    # bucket 1) in samples 0..2 (slice 0: 3 ids) and 4..7 (slice 1: 4 ids): one bucket
    # overflows, in two slices; the largest stream is slice 1's (device 1, sc 0).
    batch = FeatureBatch.from_ragged({"f": _samples([[1]] * 3 + [[]] + [[1]] * 4)})
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, [FeatureSpec("f", t)], scwork.Topology(2, 1), num_buckets=8, **IDENTITY)
    err = info.value
    assert (err.observed, err.device, err.sc, err.partition, err.bucket) == (4, 1, 0, 1, 1)
    assert str(err).startswith(
        "stack 't' (tables: t): bucket 1 alone holds 4 ids that source SparseCore 0 of device 1 sends to "
        "partition 1, above max_ids_per_partition=2 (1 of 8 buckets overflow on their own); ")


def test_the_first_sample_over_a_limit_is_named_with_the_largest_sample_count():
    # Topology(2, 2), B = 8: slices of 2 samples. Sample 5 (slice 2: device 1, sc 0, local
    # sample 1) sends ids 1, 5, 9 to partition 1: 3 distinct; sample 7 (slice 3) sends 3, 7,
    # 11, 15 to partition 3: 4. Slices are planned in order: sample 5 is reported, and the
    # limit needed is the largest single-sample count, 4.
    rows = [[]] * 5 + [[1, 5, 9]] + [[]] + [[3, 7, 11, 15]]
    batch = FeatureBatch.from_ragged({"f": _samples(rows)})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_unique_ids_per_partition=2))]
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, feats, scwork.Topology(2, 2), strategy="sample", stacking=None)
    err = info.value
    assert (err.limit, err.observed, err.configured, err.required) == ("max_unique_ids_per_partition", 3, 2, 4)
    assert (err.stack, err.table, err.device, err.sc, err.partition, err.sample) == ("t", "t", 1, 0, 1, 5)
    assert str(err).startswith(
        "stack 't' (tables: t): sample 5 alone sends 3 distinct ids to partition 1 from source SparseCore 0 of "
        "device 1, above max_unique_ids_per_partition=2; sample mini-batching cannot split a sample. It would "
        "need max_unique_ids_per_partition >= 4 (the largest single-sample count of this stack).")


@pytest.mark.parametrize("limit, which, expected", [
    # two features of table t in one stack, Topology(1, 2) (P = 2, one sample per slice).
    # sample 1 (slice 1: device 0, sc 1): f [1, 3] and g [1, 3], all to partition 1:
    # 4 ids (each feature's own rows) but 2 distinct ids; sample 0: f [0, 5], g [2]:
    # partition 0 gets 0 and 2 (2 ids, 2 distinct), partition 1 gets 5 (1).
    ((3, None), "max_ids_per_partition", (1, 1, 1, 4, 4)),
    ((None, 1), "max_unique_ids_per_partition", (0, 0, 0, 2, 2)),
])
def test_a_sample_counts_ids_per_feature_and_distinct_ids_over_features(limit, which, expected):
    batch = FeatureBatch.from_ragged({"f": _samples([[0, 5], [1, 3]]), "g": _samples([[2], [1, 3]])})
    t = TableSpec("t", 64, 8)
    feats = [FeatureSpec("f", t), FeatureSpec("g", t)]
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, feats, scwork.Topology(1, 2), strategy="sample", stack_limits={"t": limit})
    err = info.value
    assert err.limit == which and err.configured == [v for v in limit if v is not None][0]
    assert (err.sample, err.sc, err.partition, err.observed, err.required) == expected
    assert f"above {which}={err.configured};" in str(err)


# --------------------------------------------------------------------------------------
# the datasets, every value by hand
# --------------------------------------------------------------------------------------
def test_sample_runs_and_their_statistics():
    # Topology(1, 2): P = 2, slices of n = 2 samples (B = 4); limit 2 ids per partition.
    # slice 0: sample 0 [0, 1, 9] (partition 0: 0; partition 1: 1, 9), sample 1 [2, 4]
    # (partition 0: 2, 4): with sample 0, partition 0 would get 3 > 2: runs [0, 1), [1, 2).
    # slice 1: sample 2 [3, 6] (p1: 3, p0: 6), sample 3 [5] (p1): partition 1 gets 2: one run.
    batch = FeatureBatch.from_ragged({"f": _samples([[0, 1, 9], [2, 4], [3, 6], [5]])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=2))]
    mb = minibatch(batch, feats, scwork.Topology(1, 2), strategy="sample", stacking=None)
    asg = mb.assignment.sel(stack="t", device=0)
    assert asg["runs_per_sc"].values.tolist() == [2, 1]
    assert asg["run_start"].values.tolist() == [[0, 1], [0, -1]]
    assert asg["run_stop"].values.tolist() == [[1, 2], [2, -1]]
    assert mb.assignment.attrs == {"strategy": "sample", "samples_per_sc": 2, "split_scope": "stack"}
    assert mb.minibatch_of("f").tolist() == [0, 0, 0, 1, 1, 0, 0, 0]
    s = mb.stats.sel(stack="t", device=0)
    # mini-batch 0: run 0 of both slices (samples 0, 2, 3); mini-batch 1: sample 1
    assert s["ids"].values.tolist() == [[[1, 2], [1, 2]], [[2, 0], [0, 0]]]           # (minibatch, sc, p)
    assert s["unique_ids"].values.tolist() == [[[1, 2], [1, 2]], [[2, 0], [0, 0]]]
    assert s["kept_ids"].values.tolist() == [[[1, 2], [1, 2]], [[2, 0], [0, 0]]]
    assert s["input_ids"].values.tolist() == [[3, 3], [2, 0]]                          # (minibatch, sc)
    assert s["max_ids_per_partition"].values.tolist() == [[1, 2], [2, 0]]              # max over sc
    assert s["max_unique_ids_per_partition"].values.tolist() == [[1, 2], [2, 0]]
    assert s["required_buffer_size_per_sc"].values.tolist() == [[16, 16], [8, 0]]      # round_up(ids, 8) summed
    assert s["required_buffer_size_per_device"].values.tolist() == [32, 8]
    whole = mb.stats.sel(stack="t")
    assert whole["naive_ids_per_partition"].values.tolist() == [[2, 4], [2, 0]]
    # whole-batch distinct ids: mini-batch 0 holds 0, 6 (p0) and 1, 9, 3, 5 (p1)
    assert whole["naive_unique_ids_per_partition"].values.tolist() == [[2, 4], [2, 0]]
    assert whole["dropped_ids"].values.tolist() == [0, 0]
    assert int(whole["num_minibatches"]) == 2
    assert int(whole["samples_per_device"]) == 4
    assert int(whole["out_of_vocabulary_ids"]) == 0
    assert int(whole["configured_max_ids_per_partition"]) == 2
    assert int(whole["configured_max_unique_ids_per_partition"]) == -1                # none
    assert {k: mb.stats.attrs[k] for k in ("num_devices", "sparsecores_per_device", "num_partitions", "batch_size",
                                           "samples_per_sc", "strategy", "split_scope")} == \
        {"num_devices": 1, "sparsecores_per_device": 2, "num_partitions": 2, "batch_size": 4, "samples_per_sc": 2,
         "strategy": "sample", "split_scope": "stack"}
    assert mb.stats["minibatch"].values.tolist() == [0, 1]
    # two devices of one SparseCore: 4 samples of one feature are 2 per device and per SparseCore
    two = minibatch(batch, [FeatureSpec("f", TableSpec("t", 64, 8, max_unique_ids_per_partition=2))],
                    scwork.Topology(2, 1), strategy="sample", stacking=None)
    assert int(two.stats["samples_per_device"].sel(stack="t")) == 2
    assert two.stats.attrs["samples_per_sc"] == 2 and two.assignment.attrs["samples_per_sc"] == 2
    assert int(two.stats["configured_max_ids_per_partition"].sel(stack="t")) == -1
    assert int(two.stats["configured_max_unique_ids_per_partition"].sel(stack="t")) == 2


def test_a_stack_without_ids_is_cut_with_the_others_and_counts_nothing():
    # Topology(1, 2), identity hash, 8 buckets: P = 2, col_id = id, bucket = id. t: slice 0
    # sends 0, 2 to partition 0 and 1 to partition 1, slice 1 sends 3 to partition 1; limit
    # 1. Stream (slice 0, p0) holds buckets 0 and 2: level 1 nodes 0 (0 + 1) and 1 (2 + 3)
    # carry 1 each, level 2 node 4 (buckets 0..3) 1 + 1 = 2 > 1 splits: a cut after bucket
    # 1. The other streams hold one id. u's feature g has no ids at all.
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 3, 4]), "g": ([], [0, 0, 0])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=1)),
             FeatureSpec("g", TableSpec("u", 64, 8, max_ids_per_partition=1))]
    topo = scwork.Topology(1, 2)
    # T = 2: t cut by slices (3 and 1 ids), u one empty task; t's four ranges, none of u
    sizes = _profile_sizes(batch, feats, topo, 2, num_buckets=8, **IDENTITY)
    assert sizes == [[3, 1, 0], [1, 1, 1, 1], [4, 0], [4, 0]]
    for threads in (1, 2):
        mb = minibatch(batch, feats, topo, num_buckets=8, num_threads=threads, **IDENTITY)
        assert mb.assignment["stack_split_mask"].values.tolist() == [1 << 4, 0]
        assert mb.assignment["split_mask"].values.tolist() == [1 << 4, 1 << 4]
        assert mb.assignment["minibatch_of_bucket"].values.tolist() == [[0, 0, 1, 1, 1, 1, 1, 1]] * 2
        assert mb.assignment["bucket_ids"].values.tolist() == [[1, 1, 1, 1, 0, 0, 0, 0], [0] * 8]
        assert mb.assignment["bucket_max_ids"].values.tolist() == [[1, 1, 1, 1, 0, 0, 0, 0], [0] * 8]
        assert mb.assignment["split_positions"].values.tolist() == [0b10, 0b10]      # the cut after bucket 1
        assert mb.num_minibatches.values.tolist() == [2, 2]
        ids = mb.stats["ids"].sel(device=0).transpose("stack", "minibatch", "sc", "partition").values
        assert ids.tolist() == [[[[1, 1], [0, 0]], [[1, 0], [0, 1]]], [[[0, 0], [0, 0]]] * 2]


@pytest.mark.parametrize("threads", [1, 2])
def test_three_partitions(threads):
    # Topology(1, 3): P = 3 (not a power of two), one sample per slice; vocab 64: qbits =
    # bit_length(63 // 3) = 5, pbits = 2. Identity hash, 8 buckets: col_id = id, bucket = id & 7.
    # Slice 0 sends 0 and 3 to partition 0 (buckets 0 and 3), slice 1 sends 1 to p1, slice 2
    # 5 to p2. Limit 1: stream (0, p0) splits node 4 (buckets 0..3: 1 + 1 = 2 > 1): a cut
    # after bucket 1.
    batch = FeatureBatch.from_ragged({"f": ([0, 3, 1, 5], [0, 2, 3, 4])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=1))]
    topo = scwork.Topology(1, 3)
    mb = minibatch(batch, feats, topo, num_buckets=8, num_threads=threads, **IDENTITY)
    assert int(mb.assignment["split_mask"].sel(stack="t")) == 1 << 4
    ids = mb.stats["ids"].sel(stack="t", device=0).values                  # (minibatch, sc, partition)
    assert ids.tolist() == [[[1, 0, 0], [0, 1, 0], [0, 0, 0]], [[1, 0, 0], [0, 0, 0], [0, 0, 1]]]
    assert mb.stats["naive_unique_ids_per_partition"].sel(stack="t").values.tolist() == [[1, 1, 0], [1, 0, 1]]
    # T = 2: total 4, target 1: slices of 2, 1, 1 ids; cshift 0: 96 bins, ids in u = 0, 1
    # (partition 0, q 0 and 1), 32 and 65: four ranges. T = 1: one bin, whose partitions
    # are 0 .. 3 by its bits but only 0 .. 2 exist.
    sizes = _profile_sizes(batch, feats, topo, threads, num_buckets=8, **IDENTITY)
    assert sizes[:2] == ([[2, 1, 1], [1, 1, 1, 1]] if threads == 2 else [[4], [4]])


def test_an_out_of_vocabulary_id_first_in_the_batch_is_found():
    # the very first id (flat position 0) is out of the vocabulary
    batch = FeatureBatch.from_ragged({"f": ([8, 1], [0, 1, 2])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    for threads in (1, 2):
        with pytest.raises(OutOfVocabularyError) as info:
            minibatch(batch, feats, scwork.Topology(1, 1), num_threads=threads, **IDENTITY)
        assert (info.value.feature, info.value.sample, info.value.id, info.value.count) == ("f", 0, 8, 1)


def test_a_prefix_cut_over_two_tables_by_hand_at_every_thread_count():
    # Stack t_u on Topology(1, 2), rotation 1: P = 2, t (vocab 64, padded to 64: 32 rows per
    # shard) then u (row offset 32, col_shift 1). col_id of t's x: x; of u's x: p + 2 * (x // 2
    # + 32) with p = (x + 1) % 2: 0 -> 65, 1 -> 64, 2 -> 67, 3 -> 66. Two buckets (col_id & 1):
    # a bucket is a partition here.
    # slice 0: t 0..5, u 0..3; slice 1: t 0, 2 and u 1.
    # Streams: (slice 0, p0) cols 0, 2, 4, 64, 66; (slice 0, p1) 1, 3, 5, 65, 67; (slice 1, p0)
    # 0, 2, 64. 5 ids > limit 2 in bucket 0 alone: the root splits, bucket 0 | bucket 1.
    # Prefix cut (limits 2 ids, 1 distinct id, dropping on), in col_id order: each stream
    # keeps its first id only.
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 0, 2], [0, 6, 8]),
                                      "g": ([0, 1, 2, 3, 1], [0, 4, 5])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8)), FeatureSpec("g", TableSpec("u", 64, 8))]
    topo = scwork.Topology(1, 2)
    kw = dict(stacking=[["t", "u"]], rotation=1, stack_limits={"t_u": (2, 1)}, num_buckets=2,
              bucket_hash="identity", config=SparsecoreConfig(allow_id_dropping=True))
    for threads in (1, 2, 3):
        mb = minibatch(batch, feats, topo, num_threads=threads, **kw)
        s = mb.stats.sel(stack="t_u", device=0)
        assert mb.assignment["split_mask"].values.tolist() == [1]
        # per bucket: the largest stream (5 and 5 ids, 5 and 5 distinct) and the sum (5 + 3, 5)
        assert mb.assignment["bucket_max_ids"].values.tolist() == [[5, 5]]
        assert mb.assignment["bucket_max_unique_ids"].values.tolist() == [[5, 5]]
        assert mb.assignment["bucket_ids"].values.tolist() == [[8, 5]]
        assert s["ids"].values.tolist() == [[[5, 0], [3, 0]], [[0, 5], [0, 0]]]      # (minibatch, sc, p)
        assert s["kept_ids"].values.tolist() == [[[1, 0], [1, 0]], [[0, 1], [0, 0]]]
        assert mb.stats["dropped_ids"].sel(stack="t_u").values.tolist() == [6, 4]
        assert s["required_buffer_size_per_device"].values.tolist() == [16, 8]
    # T = 2: 13 ids, target 1: with the cut the ranges are whole partitions, p0 (8 ids:
    # slice 0's t 0, 2, 4 and u 1, 3, slice 1's t 0, 2 and u 1) and p1 (5)
    assert _profile_sizes(batch, feats, topo, 2, **kw)[1] == [8, 5]


def test_coarse_bins_are_about_10_bits_of_u(monkeypatch):
    # Topology(1, 2), T = 2, ids 0, 1, 2 | 3. vocab 4096: qbits = bit_length(4095 // 2) = 11,
    # pbits 1: cshift = min(11, 1 + 11 - 10) = 2, bins (2 << 11) >> 2 = 1024; two slice
    # tasks (3 and 1 ids): 8 * (4 + 2 * 1025 + 136) + 2 * 8 * (3 * 3 + 136) = 17520 + 2320
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 3, 4])})
    feats = [FeatureSpec("f", TableSpec("t", 4096, 8, max_ids_per_partition=1))]
    kw = dict(num_buckets=8, **IDENTITY)
    assert _scratch_needed(batch, feats, scwork.Topology(1, 2), 2, monkeypatch, **kw) == 19840
    # u >> 2 of ids 0 and 2 (q 0, 1) is bin 0, of 1 and 3 bin 512: two ranges of 2 ids
    assert _profile_sizes(batch, feats, scwork.Topology(1, 2), 2, **kw)[1] == [2, 2]


def test_coarse_bins_never_merge_partitions(monkeypatch):
    # Topology(2048, 1): P = 2048, pbits 11; vocab 1: qbits 0. pbits + qbits - 10 = 1, but
    # cshift = min(qbits, 1) = 0: a bin never spans two partitions, 2048 bins.
    # Samples 0 and 1 hold id 0 (2 ids, target 1): slice tasks [0], [1], [2, 2048) of
    # 1, 1 and 0 ids, 3 * 2049 bin positions. Counters of 2048 slices x 2048 partitions x 1
    # bucket: 3 * 2048 * 2048 + 2048 + 2048 + 1 = 12587009.
    # 8 * (2 + 6147 + 12587009) + 2 * 8 * (3 * 1 + 12587009) = 100745264 + 201392192
    batch = FeatureBatch.from_ragged({"f": ([0, 0], [0, 1, 2] + [2] * 2046)})
    feats = [FeatureSpec("f", TableSpec("t", 1, 8, max_ids_per_partition=1))]
    monkeypatch.setenv("SCWORK_MAX_SCRATCH_BYTES", "302137455")
    with pytest.raises(ConfigError, match=r"about 302,137,456 bytes \(0\.3 GiB\) for 2 ids of 1 stack\(s\) on 2048 "
                                          r"SparseCores x 2048 partitions, above the limit of 302,137,455 bytes"):
        minibatch(batch, feats, scwork.Topology(2048, 1), num_buckets=1, num_threads=2, stacking=None)


@pytest.mark.parametrize("threads", [1, 2])
def test_sample_strategy_stacks_with_different_counts(threads):
    # Topology(1, 1), stacks t and u planned alone. t: samples [0, 1] and [2, 3] with a
    # limit of 2 ids: runs [0, 1) and [1, 2): 2 mini-batches. u: one id per sample, limit 2:
    # one run. u is zero in mini-batch 1.
    batch = FeatureBatch.from_ragged({"f": _samples([[0, 1], [2, 3]]), "g": _samples([[5], [6]])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8, max_ids_per_partition=2)),
             FeatureSpec("g", TableSpec("u", 8, 8, max_ids_per_partition=2))]
    mb = minibatch(batch, feats, scwork.Topology(1, 1), strategy="sample", stacking=None, num_threads=threads)
    assert mb.num_minibatches.values.tolist() == [2, 1]
    assert mb.stats["ids"].transpose("stack", "minibatch", ...).values.reshape(2, 2).tolist() == [[2, 2], [2, 0]]
    assert mb.stats["input_ids"].transpose("stack", "minibatch", ...).values.reshape(2, 2).tolist() == \
        [[2, 2], [2, 0]]
    assert mb.stats["naive_unique_ids_per_partition"].transpose("stack", "minibatch", ...).values.reshape(2, 2) \
        .tolist() == [[2, 2], [2, 0]]
    assert mb.assignment["run_start"].sel(device=0, sc=0).values.tolist() == [[0, 1], [0, -1]]
    assert mb.assignment["run_stop"].sel(device=0, sc=0).values.tolist() == [[1, 2], [2, -1]]
    assert mb.assignment["runs_per_sc"].values.ravel().tolist() == [2, 1]
    assert mb.minibatch_of("g").tolist() == [0, 0]


def test_a_sample_over_a_limit_with_an_empty_feature_first_in_its_stack():
    # stack t of features e (no ids) and f: sample 0 of f sends 1, 2, 3 to the one
    # partition, above 2; the largest single-sample count is 3
    batch = FeatureBatch.from_ragged({"e": ([], [0, 0, 0]), "f": _samples([[1, 2, 3], [4]])})
    t = TableSpec("t", 8, 8, max_ids_per_partition=2)
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, [FeatureSpec("e", t), FeatureSpec("f", t)], scwork.Topology(1, 1), strategy="sample")
    assert (info.value.sample, info.value.observed, info.value.required) == (0, 3, 3)


def test_a_sample_over_a_limit_in_a_stack_of_two_tables_names_both():
    # stack t_u (Topology(1, 1): one partition): sample 1 sends f's 1, 2 and g's 3 (3 ids)
    batch = FeatureBatch.from_ragged({"f": _samples([[0], [1, 2]]), "g": _samples([[], [3]])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8)), FeatureSpec("g", TableSpec("u", 8, 8))]
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, feats, scwork.Topology(1, 1), strategy="sample", stacking=[["t", "u"]],
                  stack_limits={"t_u": (2, None)})
    err = info.value
    assert (err.stack, err.table, err.sample, err.observed, err.required) == ("t_u", "t, u", 1, 3, 3)
    assert str(err).startswith("stack 't_u' (tables: t, u): sample 1 alone sends 3 ids to partition 0 ")


@pytest.mark.parametrize("strategy", ["sample", "vocabulary"])
def test_one_slice_of_many_distinct_ids(strategy):
    # 100 distinct ids in one sample of one SparseCore (far more than the sample planner's
    # first table of 16 entries holds), limits 100: one mini-batch of 100 ids
    batch = FeatureBatch.from_ragged({"f": (list(range(100)), [0, 100])})
    feats = [FeatureSpec("f", TableSpec("t", 128, 8, max_ids_per_partition=100, max_unique_ids_per_partition=100))]
    mb = minibatch(batch, feats, scwork.Topology(1, 1), strategy=strategy, stacking=None)
    assert mb.max_minibatches == 1
    assert mb.stats["ids"].values.ravel().tolist() == [100]
    assert mb.stats["naive_unique_ids_per_partition"].values.ravel().tolist() == [100]
    # with a limit of 99 no sample run fits: the one sample needs 100
    if strategy == "sample":
        feats99 = [FeatureSpec("f", TableSpec("t", 128, 8, max_ids_per_partition=99))]
        with pytest.raises(LimitExceededError) as info:
            minibatch(batch, feats99, scwork.Topology(1, 1), strategy=strategy, stacking=None)
        assert (info.value.observed, info.value.required) == (100, 100)


def test_dropping_with_only_a_distinct_ids_limit():
    # Topology(1, 1), one bucket (the engine's own cut): samples [0, 1] and [0, 2], limit 2
    # distinct ids, no limit on ids. The stream in col_id order: 0 (twice), 1, 2: the third
    # distinct id (2) is dropped.
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 0, 2], [0, 2, 4])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8, max_unique_ids_per_partition=2))]
    cfg = SparsecoreConfig(allow_id_dropping=True)
    for threads in (1, 2):
        mb = minibatch(batch, feats, scwork.Topology(1, 1), config=cfg, num_buckets=1, num_threads=threads, **IDENTITY)
        assert mb.stats["ids"].values.ravel().tolist() == [4]
        assert mb.stats["kept_ids"].values.ravel().tolist() == [3]
        assert mb.stats["dropped_ids"].values.ravel().tolist() == [1]


def test_dropping_allowed_without_limits_cuts_the_work_by_bins():
    # the case of test_range_tasks_are_runs_of_about_target_ids_and_a_hot_bin_alone, with
    # id dropping allowed but no limit: no prefix cut, so ranges of bins, not of partitions
    slice0 = [0] * 6 + [2, 4, 4, 6, 8, 10, 12, 14]
    slice1 = list(range(1, 36, 2))
    batch = FeatureBatch.from_ragged({"f": (slice0 + slice1, [0, 14, 32])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8))]
    cfg = SparsecoreConfig(allow_id_dropping=True)
    sizes = _profile_sizes(batch, feats, scwork.Topology(1, 2), 2, num_buckets=8, config=cfg, **IDENTITY)
    assert sizes[1] == [6, 3, 1, 2, 2] + [2] * 9
    # a limit makes it a prefix cut: partitions 0 (14 ids) and 1 (18)
    limited = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=64))]
    sizes = _profile_sizes(batch, limited, scwork.Topology(1, 2), 2, num_buckets=8, config=cfg, **IDENTITY)
    assert sizes[1] == [14, 18]
    limited = [FeatureSpec("f", TableSpec("t", 64, 8, max_unique_ids_per_partition=64))]
    sizes = _profile_sizes(batch, limited, scwork.Topology(1, 2), 2, num_buckets=8, config=cfg, **IDENTITY)
    assert sizes[1] == [14, 18]


@pytest.mark.parametrize("strategy", ["vocabulary", "sample"])
def test_stack_limits_are_int32_like_the_tables(strategy):
    # 2**31 - 1 is the largest limit a TableSpec takes; a stack limit above it (2**63
    # failed with an OverflowError in the int64 arrays) is refused the same way
    batch = FeatureBatch.from_ragged({"f": ([0, 1], [0, 1, 2])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    mb = minibatch(batch, feats, scwork.Topology(1, 1), strategy=strategy, stack_limits={"t": (2**31 - 1, 2**31 - 1)})
    assert int(mb.stats["configured_max_ids_per_partition"].sel(stack="t")) == 2**31 - 1
    for limits in ((2**31, None), (None, 2**31), (2**63, None), (0, None)):
        with pytest.raises(ConfigError, match=r"stack_limits\['t'\]: limits must be positive ints up to 2147483647 "):
            minibatch(batch, feats, scwork.Topology(1, 1), strategy=strategy, stack_limits={"t": limits})


def test_the_sample_strategy_with_a_stack_without_ids():
    # u's feature g has no ids: one empty run per slice, nothing counted, no error
    batch = FeatureBatch.from_ragged({"f": _samples([[0, 1], [2, 3]]), "g": _samples([[], []])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8, max_ids_per_partition=2)),
             FeatureSpec("g", TableSpec("u", 8, 8, max_ids_per_partition=1))]
    mb = minibatch(batch, feats, scwork.Topology(1, 2), strategy="sample", stacking=None)
    assert mb.num_minibatches.values.tolist() == [1, 1]
    assert mb.assignment["runs_per_sc"].values.tolist() == [[[1, 1]], [[1, 1]]]
    assert mb.assignment["run_stop"].values.ravel().tolist() == [1, 1, 1, 1]
    assert mb.stats["ids"].sel(stack="u").values.ravel().tolist() == [0, 0, 0, 0]
    assert mb.stats["ids"].sel(stack="t").values.ravel().tolist() == [1, 1, 1, 1]


def test_one_partition_and_a_large_vocabulary(monkeypatch):
    # Topology(1, 1): P = 1, pbits 0; vocab 2048: qbits 11, cshift = min(11, 0 + 11 - 10) = 1:
    # 1024 bins. One slice task of 4 ids, counters 3 * 8 + 8 + 8 + 8 = 48 (8 buckets):
    # 8 * (4 + 1025 + 48) + 2 * 8 * (3 * 4 + 48) = 8616 + 960
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 4])})
    feats = [FeatureSpec("f", TableSpec("t", 2048, 8, max_ids_per_partition=4))]
    assert _scratch_needed(batch, feats, scwork.Topology(1, 1), 2, monkeypatch, num_buckets=8, **IDENTITY) == 9576


@pytest.mark.parametrize("threads", [1, 2])
def test_the_largest_vocabulary_sorts_in_three_passes_of_11_bits(threads):
    # vocab 2**31 - 32 (the largest whose padding to 8 * P = 32 rows stays within int32) on
    # P = 4: qbits = bit_length((2**31 - 33) // 4) = 29, pbits 2: keys of 31 bits, sorted in 3
    # passes of 11 bits (3 * 2048 histogram entries). Identity hash, 8 buckets: col_id = id.
    top = 2**31 - 33
    batch = FeatureBatch.from_ragged({"f": ([0, 5, top - 1, top], [0, 1, 2, 3, 4])})
    feats = [FeatureSpec("f", TableSpec("t", 2**31 - 32, 8, max_ids_per_partition=1))]
    mb = minibatch(batch, feats, scwork.Topology(1, 4), num_buckets=8, num_threads=threads, **IDENTITY)
    # partitions: 0, 5 % 4 = 1, (2**31 - 34) % 4 = 2, (2**31 - 33) % 4 = 3; one id per stream
    assert mb.max_minibatches == 1
    assert mb.stats["ids"].sel(stack="t", device=0, minibatch=0).values.tolist() == \
        [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    # buckets: 0, 5, (2**31 - 34) & 7 = 6, (2**31 - 33) & 7 = 7
    assert mb.assignment["bucket_ids"].sel(stack="t").values.tolist() == [1, 0, 0, 0, 0, 1, 1, 1]


def test_a_prefix_cut_range_is_closed_when_the_next_partition_would_pass_target():
    # as test_with_a_prefix_cut_ranges_are_whole_partitions, ids 0, 1, 2, 3 (partition = id)
    # 1, 4, 29 and 30 times, target 4: 1 + 4 > 4 closes partition 0 alone, then 4, 29, 30
    samples = [[0, 1, 1] + [2] * 8 + [3] * 8, [1, 1] + [2] * 8 + [3] * 8, [2] * 7 + [3] * 7, [2] * 6 + [3] * 7]
    ids = [x for s in samples for x in s]
    assert len(ids) == 64
    batch = FeatureBatch.from_ragged({"f": (ids, np.cumsum([0] + [len(s) for s in samples]).tolist())})
    feats = [FeatureSpec("f", TableSpec("t", 4, 8, max_ids_per_partition=100))]
    kw = dict(num_buckets=8, config=SparsecoreConfig(allow_id_dropping=True), **IDENTITY)
    assert _profile_sizes(batch, feats, scwork.Topology(1, 4), 2, **kw)[1] == [1, 4, 29, 30]


# --------------------------------------------------------------------------------------
# survivors of the mutation run (issue 21)
# --------------------------------------------------------------------------------------
def test_minibatch_of_a_feature_takes_its_own_table_in_a_stack_of_two():
    # Tables t and u (vocab 8, P = 1) stacked as t_u: u's rows follow t's, row offset 8.
    # Identity hash, 16 buckets: z (table t) ids 0..3 -> buckets 0..3; a (table u) ids
    # 0..3 -> col ids 8..11 -> buckets 8..11. Stack limit 4 ids: the root (8 ids) splits
    # at bucket 8, so buckets 0..7 are mini-batch 0 and 8..15 mini-batch 1. The stack's
    # features are z then a ("z" sorts after "a"): a must use u's offset, not z's table.
    batch = FeatureBatch.from_ragged({"a": ([0, 1, 2, 3], [0, 4, 4]), "z": ([0, 1, 2, 3], [0, 0, 4])})
    t = TableSpec("t", 8, 8)
    u = TableSpec("u", 8, 8)
    mb = minibatch(batch, [FeatureSpec("z", t), FeatureSpec("a", u)], scwork.Topology(1, 1),
                   stacking=[["t", "u"]], num_buckets=16, bucket_hash="identity", stack_limits={"t_u": (4, 4)})
    assert [f.name for f in mb.plan.stacks[0].features] == ["z", "a"]
    assert mb.minibatch_of("a").tolist() == [1, 1, 1, 1]
    assert mb.minibatch_of("z").tolist() == [0, 0, 0, 0]
    assert [b.ids("a").tolist() for b in mb.batches()] == [[], [0, 1, 2, 3]]


@pytest.mark.parametrize("ids, splits", [([0, 0, 0], [0, 1, 2, 3]), ([], [0, 0])])
def test_a_batch_within_its_vocabularies_is_used_as_given(ids, splits):
    # vocab 1: the only id is 0. Ids all 0 (largest 0 < 1) or none at all (the largest
    # of no ids starts below every id, -1 < 1): nothing is out of the vocabulary, so
    # the plan keeps the caller's batch itself, not a copy with nothing removed. One id
    # per sample: each counts once, 3 ids (or none) in all.
    batch = FeatureBatch.from_ragged({"f": (ids, splits)})
    mb = minibatch(batch, [FeatureSpec("f", TableSpec("t", 1, 8))], scwork.Topology(1, 1), strategy="sample",
                   num_threads=1, **IDENTITY)
    assert mb.batch is batch
    assert int(mb.stats["ids"].sum()) == len(ids)


def test_an_empty_batch_on_two_threads_plans_one_minibatch_without_warnings():
    # No ids at all: 0 ids over 2 threads x 8 tasks each. The task target stays at
    # least 1 id (never 0, whose floor division would give NaN runs and a
    # RuntimeWarning); the stack has nothing to split: 1 mini-batch, 0 ids.
    batch = FeatureBatch.from_ragged({"f": ([], [0, 0, 0])})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mb = minibatch(batch, [FeatureSpec("f", TableSpec("t", 8, 8, max_ids_per_partition=4))],
                       scwork.Topology(1, 2), num_threads=2, **IDENTITY)
    assert mb.max_minibatches == 1
    assert int(mb.stats["ids"].sum()) == 0


@pytest.mark.parametrize("strategy", ["vocabulary", "sample"])
@pytest.mark.parametrize(("devices", "sparsecores", "per_sc"), [(1, 2, 4), (2, 2, 2), (1, 1, 8)])
def test_samples_per_sparsecore_is_the_batch_over_every_sparsecore(strategy, devices, sparsecores, per_sc):
    # 8 samples over G devices of S SparseCores each: 8 // (G * S) samples a SparseCore
    # (1 x 2 -> 4, 2 x 2 -> 2, 1 x 1 -> 8). The batch of 4 on 2 SparseCores in the tests
    # above gives 2 both as 4 // 2 and as 4 - 2, so it could not tell a quotient from a
    # difference; 8 on 2 x 2 (2, not 4) and 8 on 1 x 1 (8, not 7) can.
    batch = FeatureBatch.from_ragged({"f": _samples([[i] for i in range(8)])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8))]
    mb = minibatch(batch, feats, scwork.Topology(devices, sparsecores), strategy=strategy, stacking=None)
    assert mb.stats.attrs["batch_size"] == 8
    assert mb.stats.attrs["samples_per_sc"] == per_sc
    if strategy == "sample":
        assert mb.assignment.attrs["samples_per_sc"] == per_sc


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_no_counts_of_any_dtype_split_nothing(dtype):
    # No rows at all: nothing to round, so an empty array is taken whatever its dtype (an
    # empty list comes out of numpy as float64): no node is split, mask 0. A float array
    # with counts in it is refused (test_counts_and_limit_are_checked_not_rounded).
    assert compute_minibatching_split(np.zeros((0, 8), dtype), 1) == 0
    assert compute_minibatching_split(np.zeros((2, 0, 4), dtype), 0) == 0


@pytest.mark.parametrize("strategy", ["vocabulary", "sample"])
def test_a_plan_whose_stacks_were_made_for_another_topology_is_refused(strategy):
    # Stack t made for Topology(1, 1) (P = 1: t's 16 rows in one shard) and stack u for
    # Topology(1, 2) (P = 2), put in one plan of Topology(1, 2): t would be sharded over
    # 1 partition of the 2 there are. The plan says P = 2, its first stack 1, its last 2;
    # every stack and table must be for P = 2. A ConfigError names t (and its table t).
    t, u = TableSpec("t", 16, 8), TableSpec("u", 16, 8)
    feats = [FeatureSpec("f", t), FeatureSpec("g", u)]
    one = scwork.sharding.plan_stacking(feats, scwork.Topology(1, 1), None)
    two = scwork.sharding.plan_stacking(feats, scwork.Topology(1, 2), None)
    mixed = scwork.sharding.StackingPlan([one.stacks[0], two.stacks[1]], scwork.Topology(1, 2), two.rotation)
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 2, 4]), "g": ([0, 1, 2, 3], [0, 2, 4])})
    with pytest.raises(ConfigError, match=r"P=2 partitions but some of its stacks .* another P: "
                                          r"\{'t': 1, 't/t': 1\}; build every stack of the plan for P=2"):
        minibatch(batch, feats, scwork.Topology(1, 2), stacking=mixed, strategy=strategy, num_threads=1)


@pytest.mark.parametrize("field, value", [("max_unique_ids_per_partition", 2**31),
                                          ("max_ids_per_partition", 2**62 + 1),
                                          ("max_ids_per_partition", 0),
                                          ("suggested_coo_buffer_size_per_device", -8),
                                          ("max_unique_ids_per_partition", True),
                                          ("max_ids_per_partition", 7.0)])
def test_a_hand_built_plan_with_limits_outside_int32_is_refused(field, value):
    # plan_stacking and stack_limits take limits from 1 to 2**31 - 1 (the library's int32);
    # a StackingPlan built by hand is held to the same range by every engine call.
    import dataclasses

    feats = [FeatureSpec("f", TableSpec("t", 16, 8))]
    topo = scwork.Topology(1, 2)
    plan = scwork.sharding.plan_stacking(feats, topo, None)
    bad = scwork.sharding.StackingPlan([dataclasses.replace(plan.stacks[0], **{field: value})], topo, plan.rotation)
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 2, 4])})
    for call in (lambda: minibatch(batch, feats, topo, stacking=bad, num_threads=1),
                 lambda: scwork.sharding.compute_stats(batch, feats, topo, bad, num_threads=1),
                 lambda: scwork.sharding.preprocess(batch, feats, topo, bad, num_threads=1)):
        with pytest.raises(ConfigError, match=rf"stack 't' of the StackingPlan has {field}={value!r}; limits "
                                              r"must be None or ints from 1 to 2147483647"):
            call()
    good = scwork.sharding.StackingPlan([dataclasses.replace(plan.stacks[0], **{field: 2**31 - 1})], topo,
                                        plan.rotation)
    assert int(scwork.sharding.compute_stats(batch, feats, topo, good, num_threads=1)["ids"].sum()) == 4


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_dropped_ids_are_counted_in_their_own_stack_only(backend):
    # Stacks t (limit 2 distinct ids) then u (no limit), Topology(1, 1), one bucket, dropping
    # on. Both get samples [0, 1] and [0, 2]: t's stream in col_id order is 0 (twice), 1, 2,
    # its third distinct id (2) dropped; u keeps all 4. One mini-batch: dropped 1 for t and 0
    # for u (t's count summed into u's column too would give u 1).
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 0, 2], [0, 2, 4]), "g": ([0, 1, 0, 2], [0, 2, 4])})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8, max_unique_ids_per_partition=2)),
             FeatureSpec("g", TableSpec("u", 8, 8))]
    mb = minibatch(batch, feats, scwork.Topology(1, 1), config=SparsecoreConfig(allow_id_dropping=True),
                   num_buckets=1, backend=backend, num_threads=1, **IDENTITY)
    assert mb.stats["dropped_ids"].sel(stack="t").values.tolist() == [1]
    assert mb.stats["dropped_ids"].sel(stack="u").values.tolist() == [0]
    assert mb.stats["kept_ids"].sel(stack="t").values.ravel().tolist() == [3]
    assert mb.stats["kept_ids"].sel(stack="u").values.ravel().tolist() == [4]


def test_with_a_prefix_cut_partitions_under_target_share_a_range():
    # As test_with_a_prefix_cut_ranges_are_whole_partitions (P = 4, bins = partitions, T = 2),
    # with 1, 1, 31 and 31 ids in partitions 0..3: 64 ids, target 64 / (2 * 8) = 4.
    # Partition 0 opens a range of 1 id; partition 1 adds 1 (2, under target 4: kept
    # together); partition 2's 31 would make 33 > 4, so the range closes at 2 ids and 2 and
    # 3 run alone: [2, 31, 31] (closing every range below target would give [1, 1, 31, 31]).
    samples = [[0, 1] + [2] * 8 + [3] * 8, [2] * 8 + [3] * 8, [2] * 8 + [3] * 8, [2] * 7 + [3] * 7]
    ids = [x for s in samples for x in s]
    batch = FeatureBatch.from_ragged({"f": (ids, np.cumsum([0] + [len(s) for s in samples]).tolist())})
    feats = [FeatureSpec("f", TableSpec("t", 4, 8, max_ids_per_partition=100))]
    kw = dict(num_buckets=8, config=SparsecoreConfig(allow_id_dropping=True), **IDENTITY)
    assert _profile_sizes(batch, feats, scwork.Topology(1, 4), 2, **kw)[1] == [2, 31, 31]


def test_a_range_task_sizes_its_own_histograms(monkeypatch):
    # Topology(1, 1), T = 2, vocab 2**31 - 8 (P = 1, padded to 8: itself): qbits 31, cshift
    # min(31, 0 + 31 - 10) = 21, 1024 bins of 2**21 ids. 32 samples of one id each: id 0 in
    # samples 0..29 (bin 0), 2**21 + 5 (bin 1), 600 * 2**21 + 7 (bin 600). Target 32 / 16 = 2:
    # bin 0 (30 > 2) alone, then bins [1, 601) together (1 + 1 ids). That range spans
    # 600 * 2**21 values of u, 31 bits: three radix passes of 11 bits, 3 * 2048 histogram
    # entries. Each range task runs here on a worker that ran no slice task (workers 2 and 3),
    # so it cannot borrow the slice task's histograms: it must ask for its own 3 * 2048.
    # Two identity buckets (col = id): id 0 -> bucket 0, the two others (odd) -> bucket 1.
    orig = mbmod._VocabularyScan.range_task
    monkeypatch.setattr(mbmod._VocabularyScan, "range_task", lambda self, item, worker: orig(self, item, worker + 2))
    big = [2**21 + 5, 600 * 2**21 + 7]
    batch = FeatureBatch.from_ragged({"f": ([0] * 30 + big, list(range(33)))})
    feats = [FeatureSpec("f", TableSpec("t", 2**31 - 8, 8))]
    mb = minibatch(batch, feats, scwork.Topology(1, 1), num_buckets=2, num_threads=2, **IDENTITY)
    # one stream: per bucket its ids (one per sample) and distinct ids (1 and 2)
    assert mb.assignment["bucket_max_ids"].values.tolist() == [[30, 2]]
    assert mb.assignment["bucket_max_unique_ids"].values.tolist() == [[1, 2]]
    assert mb.stats["unique_ids"].values.ravel().tolist() == [3]
    assert _profile_sizes(batch, feats, scwork.Topology(1, 1), 2, num_buckets=2, **IDENTITY)[1] == [30, 2]


def test_the_sample_planner_takes_a_slice_of_40_distinct_ids():
    # One slice (Topology(1, 1)) whose one sample holds ids 0..39: 40 distinct col ids in the
    # sample planner's open-addressing table, sized 16 doubled while below 2 * 40 = 80: 128
    # slots, a power of two, so that h & (cap - 1) reaches every slot. (A capacity of 144,
    # 16 tripled twice, would reach only the 32 slots whose index bits lie in 143 = 0b10001111,
    # and the 33rd id would probe forever.) Limit 40: one run, 40 ids, 40 distinct.
    batch = FeatureBatch.from_ragged({"f": (list(range(40)), [0, 40])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_ids_per_partition=40))]
    mb = minibatch(batch, feats, scwork.Topology(1, 1), strategy="sample", stacking=None)
    assert mb.max_minibatches == 1
    assert mb.stats["ids"].values.ravel().tolist() == [40]
    assert mb.stats["unique_ids"].values.ravel().tolist() == [40]


def test_a_bucket_over_the_distinct_ids_limit_is_named_without_an_ids_limit():
    # Only max_unique_ids_per_partition (2) is set: the check of the ids limit is skipped, not
    # the whole check. Topology(1, 1), one bucket: sample 0 sends ids 0, 1, 2 (3 distinct ids)
    # to partition 0, all in bucket 0, over 2 on their own: no split can fix it.
    batch = FeatureBatch.from_ragged({"f": ([0, 1, 2], [0, 3])})
    feats = [FeatureSpec("f", TableSpec("t", 64, 8, max_unique_ids_per_partition=2))]
    with pytest.raises(LimitExceededError) as info:
        minibatch(batch, feats, scwork.Topology(1, 1), num_buckets=1, **IDENTITY)
    err = info.value
    assert (err.limit, err.observed, err.configured, err.required) == ("max_unique_ids_per_partition", 3, 2, 3)
    assert (err.stack, err.partition, err.bucket) == ("t", 0, 0)
