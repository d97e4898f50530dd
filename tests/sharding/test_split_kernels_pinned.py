"""The split kernels' error records and task boundaries, with values worked out by hand.

``tests/sharding/test_split_kernels.py`` compares each kernel with its numpy
reference on random stacks; these cases pin what both must give where random
inputs rarely land: an error at flat position 0 (which a ``> 0`` test would miss), a
second error in a later slice of the same task (which must not replace the first),
a zero-divisor sample after position 0, and a task that must leave another slice's
padding alone.

The stack: tables ``t0`` and ``t1`` (vocabulary 8 each), features ``f0 -> t0`` and
``f1 -> t1``, 1 chip x 2 SparseCores (two slices of 2 samples each), batch of 4
samples. Flat ids are the features' rows one after the other, so ``f0``'s ids come
first: ``f0`` = [[9, 1], [2], [10], [3]] puts out-of-vocabulary ids at flat positions
0 (slice 0) and 3 (slice 1); ``f1`` = [[4], [5, 6], [7], [0]] is clean, at positions
5, 6, 7, 8, 9.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import scwork
from scwork.errors import InputError, OutOfVocabularyError
from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, plan_stacking, preprocess

engine = importlib.import_module("scwork.sharding.engine")

BACKENDS = ["numba", "numpy"]      # the kernel and its reference: both must give the hand values


def _batch(f0_rows, f1_rows, f0_weights=None, f1_weights=None):
    data = {}
    for name, rows, weights in (("f0", f0_rows, f0_weights), ("f1", f1_rows, f1_weights)):
        ids = np.array([x for r in rows for x in r], np.int64)
        splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        if weights is None:
            data[name] = (ids, splits)
        else:
            data[name] = (ids, splits, np.array([w for r in weights for w in r], np.float64))
    return FeatureBatch(data)


def _stack(combiner="sum"):
    tables = [TableSpec("t0", 8, 4, combiner=combiner), TableSpec("t1", 8, 4, combiner=combiner)]
    feats = [FeatureSpec("f0", tables[0]), FeatureSpec("f1", tables[1])]
    plan = plan_stacking(feats, scwork.Topology(1, 2), [["t0", "t1"]], batch_size=4)
    return plan.stacks[0], feats


def _scratch(job):
    return {k: np.zeros(v, np.float32 if k in ("sg", "ag", "bg") else np.int64)
            for k, v in job.scratch_needs().items()}


def _count_job(batch, stack):
    job = engine._StackJob(stack, batch, 1, 2, False, SparsecoreConfig())
    job.ulist = np.full(job.ulist_size, -7, np.int64)
    return job


def _write_job(batch, stack, backend):
    job = engine._StackJob(stack, batch, 1, 2, True, SparsecoreConfig(), count_first=True)
    assert job.split_csr
    job.count_task(engine._Backend(backend), batch, 0, job.nsl)
    job.set_counted_size()
    job.ulist = np.full(job.ulist_size, -7, np.int64)
    job.emb, job.smp = np.full(job.out_size, -3, np.int32), np.full(job.out_size, -3, np.int32)
    job.gout = np.full(job.out_size, -3, np.float32)
    return job


OOV_F0 = [[9, 1], [2], [10], [3]]       # out of vocabulary at flat positions 0 (slice 0) and 3 (slice 1)
CLEAN_F1 = [[4], [5, 6], [7], [0]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_count_groups_keeps_the_first_oov_at_position_0_across_slices(backend):
    batch = _batch(OOV_F0, CLEAN_F1)
    stack, _ = _stack()
    job = _count_job(batch, stack)
    out = job.run_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, 2, _scratch(job))
    # group 0 (t0): position 0, not slice 1's position 3; group 1 (t1) is clean
    assert out["oov"].tolist() == [0, -1]
    assert out["clean"] is False
    # the clean group was counted in both slices: f1's ids after dedup per (slice, partition)
    P = job.P
    t1 = job.pairs_g[1 * job.nsl * P:2 * job.nsl * P].reshape(job.nsl, P).sum(axis=1)
    assert t1.tolist() == [3, 2]        # slice 0: {4}, {5, 6}; slice 1: {7}, {0}
    # the failing group's slice 1 was not counted after its error
    t0 = job.pairs_g[:job.nsl * P].reshape(job.nsl, P).sum(axis=1)
    assert t0[1] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_groups_keeps_the_first_oov_at_position_0_across_slices(backend):
    batch = _batch(OOV_F0, CLEAN_F1)
    stack, _ = _stack()
    # the count pass skips out-of-vocabulary ids (the sort reports them): build the layout
    # from a clean copy of the ids, then write from the batch with the bad ids
    clean = _batch([[1, 1], [2], [2], [3]], CLEAN_F1)
    job = _write_job(clean, stack, backend)
    out = job.run_write_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, 2,
                               _scratch(job))
    assert out["oov"].tolist() == [0, -1]
    assert out["bad"].tolist() == [-1, -1]
    # the clean group was still written in both slices (its distinct ids per slice)
    P = job.P
    t1 = job.distinct_g[1 * job.nsl * P:2 * job.nsl * P].reshape(job.nsl, P).sum(axis=1)
    assert t1.tolist() == [3, 2]        # slice 0: 4, 5, 6; slice 1: 7, 0


# mean combiner: a sample whose weights sum to 0 divides by 0. f1 (feature 1) has such
# samples at b = 0 (slice 0) and b = 2 (slice 1): bad position f * B + b = 4 then 6.
# f0 is clean. With f1 at b = 1 instead: position 5.
ZERO_AT_0_AND_2 = [[1.0], [1.0, 1.0], [0.0], [1.0]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_groups_records_the_first_zero_divisor_sample(backend):
    stack, _ = _stack("mean")
    f0_rows, f0_w = [[1, 2], [2], [3], [3]], [[1.0, 2.0], [1.0], [1.0], [1.0]]
    f1_rows = [[4], [5, 6], [7], [0]]
    batch = _batch(f0_rows, f1_rows, f0_w, [[0.0], [1.0, 2.0], [0.0], [1.0]])
    job = _write_job(batch, stack, backend)
    out = job.run_write_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, 2,
                               _scratch(job))
    assert out["oov"].tolist() == [-1, -1]
    assert out["bad"].tolist() == [-1, 4]       # feature 1, sample 0; not sample 2 (position 6)
    # a zero divisor after position 0 is recorded too (feature 1, sample 1: 4 + 1)
    batch = _batch(f0_rows, f1_rows, f0_w, [[1.0], [1.0, -1.0], [2.0], [1.0]])
    job = _write_job(batch, stack, backend)
    out = job.run_write_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, 2,
                               _scratch(job))
    assert out["bad"].tolist() == [-1, 5]
    # at position 0 (feature 0, sample 0) and again at sample 2 (position 2): 0 is kept
    batch = _batch(f0_rows, f1_rows, [[1.0, -1.0], [1.0], [0.0], [1.0]], [[1.0], [1.0, 2.0], [2.0], [1.0]])
    job = _write_job(batch, stack, backend)
    out = job.run_write_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, 2,
                               _scratch(job))
    assert out["bad"].tolist() == [0, -1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_task_of_one_slice_pads_only_that_slice(backend):
    """Slice 1's task (all groups, so it pads) leaves slice 0's entries and padding as they were."""
    batch = _batch([[1, 1], [2], [2], [3]], CLEAN_F1)
    stack, _ = _stack()
    job = _write_job(batch, stack, backend)
    out = job.run_write_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 1, 2, 0, 2,
                               _scratch(job))
    assert out["oov"].max() < 0
    C = job.out_size // job.nsl
    # slice 0's part of the buffers: untouched (the -3 they were filled with)
    assert (job.emb[:C] == -3).all() and (job.smp[:C] == -3).all() and (job.gout[:C] == -3).all()
    # slice 1's part: every entry written, ids or padding (no -3 left)
    assert (job.emb[C:] != -3).all() and (job.smp[C:] != -3).all()
    # f0 and f1 of slice 1 (samples 2 and 3): ids {2, 3} of t0 and {7, 0} of t1, four entries
    from scwork.sharding._kernels import PAD_ID
    assert int((job.emb[C:] != PAD_ID).sum()) == 4


def test_preprocess_names_the_first_out_of_vocabulary_id_when_tables_are_split(monkeypatch):
    """Through the engine with every slice cut by tables: the error is at f0's sample 0 (flat position 0)."""
    monkeypatch.setattr(engine, "_TASKS_PER_THREAD", 10**6)
    monkeypatch.setattr(engine, "_COUNT_FIRST_THREADS", 1)
    batch = _batch(OOV_F0, CLEAN_F1)
    _, feats = _stack()
    for threads in (1, 3):
        with pytest.raises(OutOfVocabularyError, match=r"feature 'f0', sample 0: id 9 is outside"):
            preprocess(batch, feats, scwork.Topology(1, 2), [["t0", "t1"]], num_threads=threads)


def test_preprocess_names_the_first_zero_divisor_sample_when_tables_are_split(monkeypatch):
    monkeypatch.setattr(engine, "_TASKS_PER_THREAD", 10**6)
    monkeypatch.setattr(engine, "_COUNT_FIRST_THREADS", 1)
    f0_rows, f0_w = [[1, 2], [2], [3], [3]], [[1.0, 2.0], [1.0], [1.0], [1.0]]
    batch = _batch(f0_rows, [[4], [5, 6], [7], [0]], f0_w, [[0.0], [1.0, 2.0], [0.0], [1.0]])
    _, feats = _stack("mean")
    for threads in (1, 3):
        with pytest.raises(InputError, match=r"feature 'f1', sample 0: the weights sum to 0"):
            preprocess(batch, feats, scwork.Topology(1, 2), [["t0", "t1"]], num_threads=threads)


def test_warmup_runs_every_split_kernel_on_in_bounds_inputs():
    """``warmup()`` calls each kernel on tiny inputs: they must be valid (pure Python checks bounds).

    Compiled, each kernel then holds the signature the engine calls it with.
    """
    from scwork.sharding import _split_kernels as SK

    SK.warmup()
    for kernel in (SK.slice_pairs, SK.cut_groups, SK.count_groups):
        signatures = getattr(kernel, "signatures", None)
        if signatures is not None:           # compiled (not NUMBA_DISABLE_JIT=1)
            assert len(signatures) >= 1


@pytest.mark.parametrize("cut", ["cut_groups", "cut_groups_reference"])
def test_cut_groups_by_hand(cut):
    """Runs of contiguous groups per slice, each within the target unless one group alone exceeds it."""
    from scwork.sharding import _split_kernels as SK

    fn = getattr(SK, cut)
    # one slice, three groups of 1 id, target 1.5: every group a run of its own
    units = np.full((3, 4), -9, np.int64)
    assert fn(np.array([[1], [1], [1]], np.int64), 1.5, units) == 3
    assert units.tolist() == [[0, 0, 1, 1], [0, 1, 2, 1], [0, 2, 3, 1]]
    # one slice, groups of 0, 5, 0, 1, 1 ids, target 2: the empty group 0 joins the 5
    # (a run of empty groups takes the next), the 5 is a run of its own past the target,
    # the empty group 2 opens the last run, which ends at 2 ids (not over the target)
    units = np.full((5, 4), -9, np.int64)
    assert fn(np.array([[0], [5], [0], [1], [1]], np.int64), 2, units) == 2
    assert units[:2].tolist() == [[0, 0, 2, 5], [0, 2, 5, 2]]
    # a run of exactly the target is not cut: groups of 1 and 1 id, target 2
    units = np.full((2, 4), -9, np.int64)
    assert fn(np.array([[1], [1]], np.int64), 2, units) == 1
    assert units[0].tolist() == [0, 0, 2, 2]
    # two slices: each cut on its own column
    units = np.full((4, 4), -9, np.int64)
    assert fn(np.array([[2, 1], [2, 1]], np.int64), 3, units) == 3
    assert units[:3].tolist() == [[0, 0, 1, 2], [0, 1, 2, 2], [1, 0, 2, 2]]


@pytest.mark.parametrize("fn", ["slice_pairs", "slice_pairs_reference"])
def test_slice_pairs_long_first_row_by_hand(fn):
    """A feature whose first row (offset 0) is the only row past the short-row limit.

    The long row is deduplicated through a sorted copy; its smallest id is 1 (the
    sorted walk must not take it for the start marker) and it holds ids 8 ==
    vocabulary and 9 (skipped: the sorting pass reports them). Table of vocabulary 8
    on P = 2 partitions (partition ``x % 2``), two slices of one sample: row 0
    (slice 0) = 1, 3, 5, 8 and 9, each 103 times (515 ids, past the limit of 512;
    distinct in vocabulary 1, 3, 5: all odd, partition 1; 8 and 9 are not in it); row
    1 (slice 1) = 2, 2, 8, 4 (short: distinct in vocabulary 2 and 4, partition 0).
    Each slice is its own call, so the first one sorts before any short row.
    """
    from scwork.sharding import _split_kernels as SK

    assert 5 * 103 == SK._SHORT_ROW + 3
    ids = np.array([1, 3, 5, 8, 9] * 103 + [2, 9, 8, 4], np.int64)
    splits = np.array([[0, 515, 519]], np.int64)
    args = (np.array([0, 1], np.int64), np.zeros(1, np.int64), np.array([8], np.int64), np.zeros(1, np.int64))
    pairs = np.zeros(4, np.int64)                   # (slice, partition)
    getattr(SK, fn)(ids, splits, 1, 2, *args, 0, 1, 0, 1, pairs)
    assert pairs.tolist() == [0, 3, 0, 0]           # slice 0: 1, 3, 5 in partition 1
    getattr(SK, fn)(ids, splits, 1, 2, *args, 1, 2, 0, 1, pairs)
    assert pairs.tolist() == [0, 3, 2, 0]           # slice 1: 2, 4 in partition 0


LATE_OOV_F0 = [[1, 1], [2], [10], [3]]  # out of vocabulary only at flat position 3 (slice 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_oov_id_after_position_0_is_recorded_at_its_position(backend):
    batch = _batch(LATE_OOV_F0, CLEAN_F1)
    stack, _ = _stack()
    job = _count_job(batch, stack)
    out = job.run_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, 2, _scratch(job))
    assert out["oov"].tolist() == [3, -1]
    job = _write_job(_batch([[1, 1], [2], [2], [3]], CLEAN_F1), stack, backend)
    out = job.run_write_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, 2,
                               _scratch(job))
    assert out["oov"].tolist() == [3, -1]


@pytest.mark.parametrize("fn", ["slice_pairs", "slice_pairs_reference"])
def test_slice_pairs_with_a_rotation_on_a_power_of_two(fn):
    """P = 4 (the mask path), the table rotated by 1: id x goes to partition (x + 1) % 4.

    One row 0, 1, 2, 3, 5: partitions 1, 2, 3, 0, 2, so counts [1, 1, 2, 1]. (A shift
    subtracted instead would give [2, 1, 1, 1].)
    """
    from scwork.sharding import _split_kernels as SK

    ids = np.array([0, 1, 2, 3, 5], np.int64)
    pairs = np.zeros(4, np.int64)
    getattr(SK, fn)(ids, np.array([[0, 5]], np.int64), 1, 4, np.array([0, 1], np.int64), np.zeros(1, np.int64),
                    np.array([8], np.int64), np.array([1], np.int64), 0, 1, 0, 1, pairs)
    assert pairs.tolist() == [1, 1, 2, 1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_after_an_oov_id_a_task_skips_the_group_in_its_later_slices(backend):
    """Out of vocabulary at flat positions 1 (slice 0) and 3 (slice 1): 1 is kept, not replaced by 3."""
    batch = _batch([[1, 9], [2], [10], [3]], CLEAN_F1)
    stack, _ = _stack()
    job = _count_job(batch, stack)
    out = job.run_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, 2, _scratch(job))
    assert out["oov"].tolist() == [1, -1]
    job = _write_job(_batch([[1, 1], [2], [2], [3]], CLEAN_F1), stack, backend)
    out = job.run_write_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 0, 2, 0, 2,
                               _scratch(job))
    assert out["oov"].tolist() == [1, -1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_task_of_one_slice_leaves_the_other_slices_tail_padding(backend):
    """Slice 1 holds 11 entries, 10 of them in partition 0, so its slice size C exceeds
    slice 0's entries and slice 0 ends in padding of its own (the range after its last
    partition): slice 1's task must not write it.

    f0 (t0): samples 2 and 3 = 0, 2, 4, 6 each (8 pairs, all even: partition 0);
    f1 (t1, rotation 2 on P = 2: shift 0): sample 2 = 0, 2 (partition 0), sample 3 = 1.
    """
    batch = _batch([[1], [3], [0, 2, 4, 6], [0, 2, 4, 6]], [[5], [7], [0, 2], [1]])
    stack, _ = _stack()
    job = _write_job(batch, stack, backend)
    job.run_write_groups(engine._Backend(backend), batch, *engine._weights_of(batch), 1, 2, 0, 2, _scratch(job))
    from scwork.sharding._kernels import PAD_ID

    C = job.out_size // job.nsl
    assert (job.emb[:C] == -3).all() and (job.smp[:C] == -3).all()
    assert int((job.emb[C:] != PAD_ID).sum()) == 11 and (job.emb[C:] != -3).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_kernels_return_how_many_groups_failed(backend):
    """count_groups and write_groups return the number of groups of the task with an error: the
    engine makes a task's record only then (a clean task returns the job's shared clean record)."""
    kern = engine._Backend(backend)
    stack, _ = _stack("mean")
    clean = _batch([[1, 1], [2], [2], [3]], CLEAN_F1)
    job = _count_job(clean, stack)
    assert _task_count(kern.count_groups, job, clean) == 0
    assert job.run_groups(kern, clean, *engine._weights_of(clean), 0, 2, 0, 2, _scratch(job)) is job.clean_record
    oov = _batch(OOV_F0, CLEAN_F1)
    assert _task_count(kern.count_groups, _count_job(oov, stack), oov) == 1          # t0 only
    assert _task_count(kern.count_groups, _count_job(oov, stack), oov, g0=1) == 0    # t1 alone: clean
    # write_groups: t0 out of vocabulary and t1 a zero divisor (weights summing to 0 at sample 0): 2
    both = _batch(OOV_F0, CLEAN_F1, None, [[0.0], [1.0, 2.0], [1.0], [1.0]])
    job = _write_job(_batch([[1, 1], [2], [2], [3]], CLEAN_F1, None, [[0.0], [1.0, 2.0], [1.0], [1.0]]), stack,
                     backend)
    assert _task_count(kern.write_groups, job, both) == 2
    job = _write_job(clean, stack, backend)
    assert _task_count(kern.write_groups, job, clean) == 0


def _task_count(kernel, job, batch, g0=0):
    """What ``kernel`` (count_groups or write_groups) returns for slices 0-1, groups ``g0``-2 of ``job``."""
    sc = _scratch(job)
    weights, has_w = engine._weights_of(batch)
    ng = len(job.groups)
    g_oov, g_bad = np.full(ng, -1, np.int64), np.full(ng, -1, np.int64)
    if kernel.__name__.startswith("count_groups"):
        return kernel(batch._ids, batch._splits, weights, has_w, job.n, job.P, job.lbits, job.gptr, job.feat_rows,
                      job.feat_k, job.g_vocab, job.g_shift, job.g_qbits, job.g_uloff, job.g_sloff, 0, 2, g0, ng,
                      sc["sk"], sc["ak"], sc["bk"], sc["hist"], job.pairs_g, job.distinct_g, job.ulist, job.ul_cnt,
                      g_oov)
    return kernel(batch._ids, batch._splits, weights, has_w, job.combiner, job.n, job.P, job.lbits, job.gptr,
                  job.feat_rows, job.feat_k, job.g_vocab, job.g_shift, job.g_qbits, job.g_rowoff, job.g_mode,
                  job.g_uloff, job.g_sloff, 0, 2, g0, ng, sc["sk"], sc["sg"], sc["ak"], sc["ag"], sc["bk"], sc["bg"],
                  sc["hist"], job.offs, job.pad_lo, job.pad_hi, job.rowgain, job.emb, job.smp, job.gout,
                  job.distinct_g, job.ulist, job.ul_cnt, g_oov, g_bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_kernels_reset_their_groups_error_slots_first(backend):
    """A worker's error slots serve all its tasks: count_groups and write_groups set the slots of
    their groups to -1 before counting (a slot left by an earlier task must not read as an error)
    and leave the other groups' slots alone."""
    kern = engine._Backend(backend)
    stack, _ = _stack()
    clean = _batch([[1, 1], [2], [2], [3]], CLEAN_F1)
    job = _count_job(clean, stack)
    sc = _scratch(job)
    weights, has_w = engine._weights_of(clean)
    g_oov = np.array([5, 7], np.int64)                     # an earlier task's errors, in both slots
    failed = kern.count_groups(clean._ids, clean._splits, weights, has_w, job.n, job.P, job.lbits, job.gptr,
                               job.feat_rows, job.feat_k, job.g_vocab, job.g_shift, job.g_qbits, job.g_uloff,
                               job.g_sloff, 0, 2, 1, 2, sc["sk"], sc["ak"], sc["bk"], sc["hist"], job.pairs_g,
                               job.distinct_g, job.ulist, job.ul_cnt, g_oov)
    assert failed == 0 and g_oov.tolist() == [5, -1]       # group 1 reset and clean; group 0 not its task's
    job = _write_job(clean, stack, backend)
    g_oov, g_bad = np.array([5, 7], np.int64), np.array([6, 8], np.int64)
    failed = kern.write_groups(clean._ids, clean._splits, weights, has_w, job.combiner, job.n, job.P, job.lbits,
                               job.gptr, job.feat_rows, job.feat_k, job.g_vocab, job.g_shift, job.g_qbits,
                               job.g_rowoff, job.g_mode, job.g_uloff, job.g_sloff, 0, 2, 0, 1, sc["sk"], sc["sg"],
                               sc["ak"], sc["ag"], sc["bk"], sc["bg"], sc["hist"], job.offs, job.pad_lo, job.pad_hi,
                               job.rowgain, job.emb, job.smp, job.gout, job.distinct_g, job.ulist, job.ul_cnt,
                               g_oov, g_bad)
    assert failed == 0 and g_oov.tolist() == [-1, 7] and g_bad.tolist() == [-1, 8]
    # through the engine: a worker's slots dirty from a failed task, then a clean task on them
    oov = _batch(OOV_F0, CLEAN_F1)
    job = _count_job(oov, stack)
    sc = _scratch(job)
    out = job.run_groups(kern, oov, *engine._weights_of(oov), 0, 2, 0, 2, sc)
    assert out["oov"].tolist() == [0, -1] and sc["oov"].tolist() == [0, -1]
    job = _count_job(clean, stack)
    assert job.run_groups(kern, clean, *engine._weights_of(clean), 0, 2, 0, 2, sc) is job.clean_record
    assert out["oov"].tolist() == [0, -1]                  # the record kept a copy of the slots
