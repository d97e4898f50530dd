"""The sharding engine: per-partition statistics, limits and CSR buffers.

It follows [jte] ``preprocess_sparse_dense_matmul_input``.

(The module is called ``engine`` rather than ``preprocess`` so that
``scwork.sharding.preprocess`` is always the function, never this module.)

:func:`preprocess` reproduces the host preprocessing of the JAX SparseCore library
(jax-tpu-embedding, ``PreprocessSparseDenseMatmulInput`` in
``jax_tpu_embedding/sparsecore/lib/core/input_preprocessing.cc``):

- global batch ``B``, ``G`` devices with ``S`` SparseCores, ``P = G * S``
  partitions; device ``d`` owns samples ``[d * B / G, (d + 1) * B / G)``, its
  *source* SparseCore ``s`` the ``n = B / (G * S)`` samples from ``(d * S + s) * n``,
  of every feature (``kSplitThenStack``: inside the slice, feature ``k`` of the
  stack is local rows ``[k * n, (k + 1) * n)``);
- each (device, source SC) slice is processed on its own: per-sample dedup (same
  sample, same id: gains add), then every id goes to partition
  ``(id + col_shift) % P`` at local row ``id // P + row_offset_in_shard``;
- ``ids[d, s, p]``: (sample, id) pairs after dedup, ``unique_ids[d, s, p]``: distinct
  ids; ``max_ids_per_partition[d, p] = max over s``;
  ``required_buffer_size_per_sc[d, s] = sum over p of round_up(ids[d, s, p], 8)``
  ([jte] preprocess_sparse_dense_matmul_input; recent reference versions add 1 for a sentinel entry, scwork does not);
- limits: observed above configured raises :class:`~scwork.errors.LimitExceededError`,
  or with ``allow_id_dropping`` applies the prefix cut (in each ``(d, s, p)`` stream
  sorted by (local id, row), pair ``i`` is kept iff ``i < max_ids`` and its id's rank
  ``< max_unique``) and counts the dropped raw ids;
- CSR per SparseCore (``FillRowPointersPerLocalDevice`` in
  ``input_preprocessing_util.cc``): partitions in order, each starting at
  ``round_up(previous end, 8)``, ``max(P, 8)`` row pointers (end offsets), padding id
  and sample ``2**31 - 1``, gain NaN. Unlike the reference every slot of every
  buffer is written.

:func:`compute_stats` computes only the statistics (faster: no gains, no CSR).

How it runs (and why it is fast)
--------------------------------
Slices are independent, so the work is cut into tasks of at most ``total ids /
(8 * num_threads)`` ids each, run by ``num_threads`` worker threads (the numba
kernels release the GIL; with one thread every stack is one task): ranges of a
stack's ``G * S`` slices, and a slice larger than that cut further into ranges of
its groups (tables), whose counts add up exactly (per-sample dedup and distinct ids
never cross tables); only one table of one slice may be larger. Per slice and group the ids are radix-sorted in cache,
counted, and with CSR written partition by partition (:mod:`scwork.sharding._kernels`,
:mod:`scwork.sharding._split_kernels`). Every step after the slices is a batch of
tasks too: the naive view by (group, partition range), and, without a configured
``max_ids_per_partition``, the buffer size ``C`` (the longest slice): every slice's
CSR size is counted first (a pass over the ids without sorting) so that each
(slice, table) task writes in place, at any number of threads; only a prefix cut
(limits with ``allow_id_dropping``) writes slices at a bounding stride and moves
them left in place afterwards, one task per stack. For
statistics only (:func:`compute_stats`), neighbouring stacks run as one job whose
groups are all their tables (:class:`_MergedStacks`: each stack's counters are the
sums of its groups'), so that a call builds one job, one task list and one result
block whatever the number of stacks. What stays serial (planning, checks, building
the Dataset) is about a millisecond, built for all stacks at once where it can be
(:func:`_make_jobs`, :func:`_set_counted_sizes`), what depends on the plan alone
kept for the plan (:func:`_derived`);
``python benchmarks/bench_sharding.py --project`` measures it and projects the
speedup at 16 to 208 threads (:mod:`scwork.sharding._profile`). Results do not
depend on the number of threads or on which thread ran what. Buffers of finished
calls are recycled (scratch at once, CSR buffers when the caller drops them),
because faulting in fresh pages costs about as much as the kernels: the engine
keeps up to an eighth of the memory (512 MiB to 4 GiB) of such buffers
(:func:`release_buffers` drops them).

Both also report the *naive* whole-batch view (the recipe of [sc-guide] §7 without the split
over SparseCores): the same
counting without the device/SparseCore split, i.e. what a GPU all-to-all sees per
destination (``naive_ids_per_partition``, ``naive_unique_ids_per_partition``).

Worked example ([jte] preprocess_sparse_dense_matmul_input)
-----------------------
Ids ``[[0, 1, 2, 3], [1, 3, 5]]`` on 1 chip x 2 SparseCores (``P = 2``), vocabulary 16.
SC 0 gets sample 0: ids 0, 2 go to partition 0 and ids 1, 3 to partition 1, so
``ids[0, 0] = [2, 2]``. SC 1 gets sample 1: ids 1, 3, 5 all go to partition 1, so
``ids[0, 1] = [0, 3]``. Then ``max_ids_per_partition = [max(2, 0), max(2, 3)] = [2, 3]``,
the same for unique ids (no id repeats inside one slice), and
``required_buffer_size_per_sc = [8 + 8, 0 + 8] = [16, 8]``. Without the split
(naive view) partition 0 receives ids 0, 2 and partition 1 receives 1, 3, 1, 3, 5:
``[2, 5]`` ids, of which ``[2, 3]`` distinct.

>>> import numpy as np, scwork
>>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats
>>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])})
>>> stats = compute_stats(batch, [FeatureSpec("f", TableSpec("t", 16, 8))], scwork.Topology(1, 2))
>>> stats["max_ids_per_partition"].sel(stack="t").values.tolist()
[[2, 3]]
>>> stats["max_unique_ids_per_partition"].sel(stack="t").values.tolist()
[[2, 3]]
>>> stats["required_buffer_size_per_sc"].sel(stack="t").values.tolist()
[[16, 8]]
>>> stats["naive_ids_per_partition"].sel(stack="t").values.tolist()
[2, 5]
>>> stats["naive_unique_ids_per_partition"].sel(stack="t").values.tolist()
[2, 3]
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scwork.errors import (
    ConfigError,
    InputError,
    StaticBufferWarning,
    TopologyError,
)
from scwork.hardware.topology import Topology
from scwork.sharding import _profile
from scwork.sharding._checks import (
    _check_gain_inputs,
    _check_limits,
    _lbits,
    _check_scratch,
    _oov_masks,
    _raise_oov,
    estimate_scratch_bytes,
)
from scwork.sharding._scratch import (
    _POOL,
    _carve,
    _carve_owned,
    _layout,
    _views,
    free_leftovers,
    keep_until_next_call,
    release_buffers,
)
from scwork.sharding._plan_cache import plan_derived
from scwork.sharding._profile import dispatch_order
from scwork.sharding._threads import _TASKS_PER_THREAD, _run_tasks, let_workers_run, resolve_num_threads
from scwork.sharding.batch import FeatureBatch, _check_gains
from scwork.sharding.results import (
    _ALIGN,
    CsrBuffers,
    PreprocessResult,
    _StatsBuilder,
    _written_within,
    round_up_array,
)
from scwork.sharding.specs import SparsecoreConfig, round_up
from scwork.sharding.stacking import (
    DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
    Stack,
    StackingPlan,
    normalize_features,
    plan_stacking,
)

__all__ = ["preprocess", "compute_stats", "PreprocessResult", "CsrBuffers", "release_buffers"]


_COMBINER_CODE = {"sum": 0, "mean": 1, "sqrtn": 2}
# From this many threads on, preprocess counts every slice's CSR size first (an
# extra pass over the ids, about a third of the sort's cost) so that slices are
# written in place and no step after the slices is serial. That is every count:
# writing slices at a bounding stride and moving them left afterwards (the path a
# prefix cut still needs) was measured slower even on one thread, where it was
# meant to save the extra pass: standard input of benchmarks/bench_sharding.py,
# one thread, preprocess CPU 200 ms staged vs 115 ms counted on a 2-core AMD EPYC,
# 904 ms vs 273 ms (summed over 16 threads) on a 16-core Xeon VM, whose page walks
# make the sparse bounding-stride writes dearer still. Tests set it higher to run
# the staged path on unlimited input.
_COUNT_FIRST_THREADS = 1
# stack_slices takes a bitmap for the naive view; the engine always uses lists
_NO_BITMAP = np.zeros(1, np.int64)
_NO_LIMIT = 2**62
# a statistics task's dropped pairs: none (shared, never written)
_NO_DROPS = np.zeros((0, 4), np.int64)
_NO_DROP_G = np.zeros(0, np.int64)
# a job's gains and row pointers when the kernels never read them (never written)
_NO_GAINS = np.zeros(1, np.float32)
_NO_ROW_POINTERS = np.zeros(1, np.int32)
_HIST_SIZE = 3 * 2048
# the configuration of calls that give none: one shared (frozen) object, so that a call
# neither builds and checks a new one nor hashes a new one for its plan lookup
_DEFAULT_CONFIG = SparsecoreConfig()


def _slots_of(slots: np.ndarray, g0: int, g1: int, ng: int) -> np.ndarray:
    """A failed task's error slots for its record: groups ``[g0, g1)`` as the kernel left them
    in the worker's scratch (which its next task overwrites), -1 for the job's other groups."""
    out = np.full(ng, -1, np.int64)
    out[g0:g1] = slots[g0:g1]
    return out


# --------------------------------------------------------------------------------------
# input checks and per-stack metadata
# --------------------------------------------------------------------------------------
def _batch_hint(B: int, GS: int) -> str:
    lower = B - B % GS
    sizes = [s for s in (lower, lower + GS) if s >= GS]
    return " or ".join(str(s) for s in sizes)


def _check_inputs(batch, features, topology, config, on_out_of_vocabulary):
    if not isinstance(batch, FeatureBatch):
        raise InputError(f"batch must be a FeatureBatch (e.g. FeatureBatch.from_ragged(...)), "
                         f"got {type(batch).__name__}")
    if not isinstance(topology, Topology):
        raise ConfigError(f"topology must be a scwork.Topology, got {type(topology).__name__}")
    if not isinstance(config, SparsecoreConfig):
        raise ConfigError(f"config must be a SparsecoreConfig, got {type(config).__name__}")
    if on_out_of_vocabulary not in ("error", "drop"):
        raise ConfigError(f"on_out_of_vocabulary must be 'error' or 'drop', got {on_out_of_vocabulary!r}")
    G, S = topology.num_devices, topology.sparsecores_per_device
    if S < 1:
        raise TopologyError(f"topology {topology} has no SparseCore; SparseCore sharding needs "
                            "sparsecores_per_chip >= 1")
    # the paths built on the engine pass the same feature list with batches of the same
    # features and size again and again: what passed is kept (specs are frozen)
    key = (tuple(map(id, features)), batch._names, batch.batch_size, G * S) \
        if isinstance(features, (list, tuple)) else None
    passed = _CHECKED_INPUTS.get(key) if key is not None else None
    if passed is not None:
        return passed[1]
    checked = _check_features_and_batch(batch, features, G, S)
    if key is not None:
        if len(_CHECKED_INPUTS) >= 64:
            _CHECKED_INPUTS.clear()       # full: start again (no eviction to race with another thread)
        _CHECKED_INPUTS[key] = (tuple(features), checked)     # holds the specs: their ids stay theirs
    return checked


# (ids of the feature specs, batch feature names, batch size, slices) -> (the specs, their
# normalized tuple) of the inputs that passed _check_features_and_batch
_CHECKED_INPUTS: dict[tuple, tuple] = {}


def _check_features_and_batch(batch, features, G: int, S: int) -> tuple:
    """The checks of :func:`_check_inputs` that depend on the features and the batch's layout."""
    features = normalize_features(features)
    names = {f.name for f in features}
    missing = [f.name for f in features if f.name not in batch]
    if missing:
        raise InputError(f"features {missing} have no ids in the batch; the batch has {list(batch)}")
    extra = [n for n in batch if n not in names]
    if extra:
        raise InputError(f"the batch has features {extra} that no FeatureSpec describes; "
                         "give a FeatureSpec for each, or batch.select([...]) the ones to use")
    B = batch.batch_size
    GS = G * S
    if B % GS != 0 or B < GS:
        raise InputError(
            f"batch size {B} does not divide over {G} devices x {S} SparseCores = {GS} slices; "
            f"use a multiple of {GS}, e.g. {_batch_hint(B, GS)}"
        )
    return features


@dataclass
class _Group:
    table: str
    feat_rows: np.ndarray   # rows of batch._splits
    feat_k: np.ndarray      # positions in the stack
    feature_names: tuple[str, ...]
    col_shift: int
    row_offset: int
    vocab: int
    qbits: int              # bit_length((vocab - 1) // P): key layout of _kernels
    # raw ids of the group, in all and in each (device, source SC) slice (from _groups;
    # None in an engine job's groups, which are kept for the plan: the job has the counts)
    num_ids: int | None
    slice_ids: np.ndarray | None


def _slice_counts(batch: FeatureBatch, nsl: int) -> np.ndarray:
    """Raw ids of every feature (row of ``batch._splits``) in every slice: ``(features, nsl)``."""
    n = batch.batch_size // nsl
    return batch._splits[:, n::n] - batch._splits[:, :-1:n]


def _groups(stack: Stack, batch: FeatureBatch, nsl: int = 1, slice_counts: np.ndarray | None = None) -> list[_Group]:
    out = []
    P = stack.num_partitions
    if slice_counts is None:
        slice_counts = _slice_counts(batch, nsl)
    for t in stack.tables:
        ks = [k for k, f in enumerate(stack.features) if f.table.name == t.table.name]
        rows = np.array([batch._feature_index(stack.features[k].name) for k in ks], np.int64)
        per_slice = slice_counts[rows[0]].copy() if rows.size == 1 else slice_counts[rows].sum(axis=0)
        vocab = t.table.vocab_size
        out.append(_Group(t.table.name, rows, np.array(ks, np.int64),
                          tuple(stack.features[k].name for k in ks), t.shard_rotation,
                          t.row_offset_in_shard, vocab, int((vocab - 1) // P).bit_length(), int(per_slice.sum()),
                          per_slice))
    return out


class _Backend:
    """The kernels of one backend: numba, or the slow numpy references (same signatures)."""

    def __init__(self, backend: str):
        from scwork.sharding import _kernels, _naive_kernels, _split_kernels

        if backend not in ("numba", "numpy"):
            raise ConfigError(f"backend must be 'numba' or 'numpy', got {backend!r}")
        ref = "_reference" if backend == "numpy" else ""
        for module, names in ((_kernels, ("sort_group", "stack_slices", "compact_slices")),
                              (_split_kernels, ("count_groups", "count_group_tasks", "slice_pairs",
                                                "slice_pairs_tasks", "write_groups", "write_group_tasks")),
                              (_naive_kernels, ("naive_of_group", "naive_group_tasks"))):
            for name in names:
                setattr(self, name, getattr(module, name + ref))


_BACKENDS: dict[tuple[str, bool], _Backend] = {}


def _backend(backend: str) -> _Backend:
    """The kernels of ``backend``, made once (:class:`_Backend` raises on an unknown name).

    While profiling (:func:`~scwork.sharding._profile.profiled`), the same kernels each
    wrapped by :func:`~scwork.sharding._profile.timed_kernel`, so that the profile tells
    a task's kernel time from its GIL-held time.
    """
    profiling = _profile.plan_threads() is not None
    key = (backend, profiling)
    kern = _BACKENDS.get(key) if isinstance(backend, str) else None
    if kern is None:
        kern = _Backend(backend)
        if profiling:
            for name, kernel in list(vars(kern).items()):
                setattr(kern, name, _profile.timed_kernel(kernel))
        _BACKENDS[key] = kern
    return kern


class _Oov(Exception):
    """Raised when the kernels find an out-of-vocabulary id."""

    def __init__(self, position: int):
        self.position = position


def _weights_of(batch: FeatureBatch):
    """``(weights, has_w)`` as the kernels read them (float32 weights of every id, one int8
    flag per feature); for a batch without weights, arrays shared by every call with as
    many features (the kernels only read them)."""
    if batch._weights is None:
        nf = len(batch)
        shared = _UNWEIGHTED.get(nf)
        if shared is None:
            shared = _UNWEIGHTED[nf] = (np.zeros(0, np.float32), np.zeros(nf, np.int8))
        return shared
    return batch._weights, np.array(batch._has_weights, np.int8)


# feature count -> (no weights, all-zero flags): a call made them twice (two allocations each)
_UNWEIGHTED: dict[int, tuple[np.ndarray, np.ndarray]] = {}


# --------------------------------------------------------------------------------------
# one stack
# --------------------------------------------------------------------------------------
def _limits(stack: Stack) -> tuple[int, int]:
    a = _NO_LIMIT if stack.max_ids_per_partition is None else stack.max_ids_per_partition
    b = _NO_LIMIT if stack.max_unique_ids_per_partition is None else stack.max_unique_ids_per_partition
    return a, b


def _iter_sorted_group_keys(stack: Stack, batch: FeatureBatch, G: int, S: int, backend: str = "numba",
                            only: int | None = None):
    """Internal hook (used by :mod:`scwork.sharding.minibatch`): the sorted keys of each group.

    Yields ``(group, keys, m, lbits)`` for every group (table) of ``stack`` in stack
    order: ``keys[:m]`` sorted by :func:`~scwork.sharding._kernels.sort_group`
    (partition-major over the whole batch; key layout in
    :mod:`scwork.sharding._kernels`). The key buffer is reused: consume it before
    asking for the next group. Raises :class:`_Oov` on an id ``>= vocab_size``.
    With ``only``, just that group (index in stack order).
    """
    sort_group = _Backend(backend).sort_group
    P = stack.num_partitions
    nsl = G * S
    n = batch.batch_size // nsl
    K = len(stack.features)
    groups = _groups(stack, batch, nsl)
    if only is not None:
        groups = [groups[only]]
    size = max(1, max(g.num_ids for g in groups))
    keys = np.empty(size, np.int64)
    tmp = np.empty(size, np.int64)
    dummy_g = np.empty(0, np.float32)
    hist = np.empty(_HIST_SIZE, np.int64)
    weights, has_w = _weights_of(batch)
    lbits = _lbits(K, n)
    for g in groups:
        m, oov, _ = sort_group(batch._ids, batch._splits, weights, has_w, g.feat_rows, g.feat_k, 0, n, nsl, K,
                               g.vocab, P, g.col_shift, g.qbits, lbits, False, keys, dummy_g, tmp, dummy_g, hist)
        if oov >= 0:
            raise _Oov(int(oov))
        yield g, keys, int(m), lbits


@dataclass(frozen=True)
class _OneStack:
    """What :func:`_make_jobs` reads of a plan (its stacks), for one stack on its own."""

    stacks: tuple[Stack, ...]


class _StackJob:
    """One stack: group tables for the kernels, per-slice outputs, buffer sizes.

    Made by :func:`_make_jobs`, which builds the tables of every stack of a call in
    one pass (a few numpy calls for all stacks rather than some forty per stack:
    with 26 one-table stacks that per-stack Python was most of a call's serial time).
    """

    def __init__(self, stack: Stack | None = None, batch: FeatureBatch | None = None, G: int = 1, S: int = 1,
                 want_csr: bool = False, config: SparsecoreConfig | None = None, has_w: np.ndarray | None = None,
                 slice_counts: np.ndarray | None = None, count_first: bool = False):
        """One stack on its own (``_StackJob()``: empty, for :class:`_JobTemplate` to fill)."""
        if stack is None:
            return
        if has_w is None:
            _, has_w = _weights_of(batch)
        if slice_counts is None:
            slice_counts = _slice_counts(batch, G * S)
        (job,) = _make_jobs(_OneStack((stack,)), batch, G, S, want_csr, config or SparsecoreConfig(), has_w,
                            slice_counts, count_first)
        self.__dict__.update(job.__dict__)
        self.__dict__.pop("counted_layout", None)        # (the layout names the job made, not this copy)

    def setup_shape(self, stack: Stack, G: int, S: int, n: int, groups: list[_Group], want_csr: bool,
                    config: SparsecoreConfig, weighted: list[bool], meta: dict, zeros, count_first: bool) -> None:
        """What depends on the stack and the call's shape, not on its counts (:class:`_JobTemplate` keeps it).

        Every counter is a ``zeros`` view; arrays set here other than those are only read.
        """
        P = stack.num_partitions
        nsl = G * S
        K = len(stack.features)
        self.stack, self.G, self.S, self.P, self.nsl, self.n = stack, G, S, P, nsl, n
        self.lbits = _lbits(K, n)
        self.groups = groups
        ng = len(groups)
        self.want_csr = want_csr
        self.max_ids, self.max_uniq = _limits(stack)
        limited = self.max_ids < _NO_LIMIT or self.max_uniq < _NO_LIMIT
        self.allow_cut = bool(config.allow_id_dropping)
        self.keep_all = want_csr or (limited and self.allow_cut)
        self.combiner = _COMBINER_CODE[stack.combiner] if want_csr else 0
        self.any_gains = want_csr and any(weighted)

        self.gptr = meta["gptr"]
        self.feat_rows = meta["feat_rows"]
        self.feat_k = meta["feat_k"]
        self.g_vocab = meta["g_vocab"]
        self.g_shift = meta["g_shift"]
        self.g_qbits = meta["g_qbits"]
        self.g_rowoff = meta["g_rowoff"]
        self.g_mode = meta["g_mode"]
        # naive view: every (group, slice) run appends its sorted distinct ids to
        # ulist (carved by _execute); tasks over partition ranges merge them
        self.g_bitmap = meta["bitmap"]
        self.g_bmoff = zeros(ng)
        self.ul_cnt = zeros(ng * nsl)
        # statistics-only stacks count each (group, slice) run into its group's
        # counters, so that tasks may split a slice by groups
        self.by_group = not self.keep_all
        self.pairs_g = zeros(ng * nsl * P if self.by_group else 1)
        self.distinct_g = zeros(ng * nsl * P if self.by_group else 1)
        self.naive_g = zeros(ng * P).reshape(ng, P)

        self.pairs = zeros(nsl * P)
        self.distinct = zeros(nsl * P)
        self.kept = zeros(nsl * P)
        self.dropped = zeros(nsl)
        self.used = zeros(nsl)
        self.R = max(P, _ALIGN)
        self.C = None
        self.cap = -1
        self.base = meta["zeros_nsl"]                            # read-only zeros until set below
        self.out_size = 1                                        # entries of emb / smp / gout
        if want_csr and stack.max_ids_per_partition is not None:
            # C is known: the tasks write every slice in place, padding included
            self.C = self.cap = round_up(stack.max_ids_per_partition, _ALIGN) * P
            self.base = np.arange(nsl, dtype=np.int64) * self.C
            self.out_size = nsl * self.C
        # Without a configured C (and with count_first, see _COUNT_FIRST_THREADS), C
        # (the longest slice) is counted first (slice_pairs, no sort) so that slices
        # are written in place at once, by tasks as small as one table of one slice.
        # Else slices are written at a bounding stride and moved left afterwards (one
        # task per stack); a prefix cut (limits with allow_id_dropping) always needs
        # that, as only the sort knows a slice's size.
        self.counted = want_csr and self.C is None and not (limited and self.allow_cut) and count_first
        self.count_pairs = zeros(ng * nsl * P if self.counted else 1)
        # Without limits the count also fixes where each group's ids of each stream
        # go, so that tasks may split a slice by groups (write_groups)
        self.split_csr = self.counted and not limited
        if self.split_csr:
            self.distinct_g = zeros(ng * nsl * P)
        if self.counted:
            # the layout the count gives (_set_counted_sizes), in the call's block too: one
            # compiled call writes every counted stack's (counted_layouts)
            self.base = zeros(nsl)
            if self.split_csr:
                self.offs = zeros(ng * nsl * P)
                self.pad_lo = zeros(nsl * (P + 1))
                self.pad_hi = zeros(nsl * (P + 1))
        self.staged = want_csr and self.C is None and not self.counted
        self.no_bad = np.full(ng, -1, np.int64)                 # statistics tasks: never a zero divisor
        self.no_bad.flags.writeable = False
        # what a task without an error returns (:meth:`run_groups`, :meth:`run_write_groups`):
        # one record shared by every such task, read-only
        self.clean_record = {"s0": -1, "oov": self.no_bad, "bad": self.no_bad, "drops": _NO_DROPS,
                             "drop_g": _NO_DROP_G, "clean": True}

    def setup_counts(self, uloff: np.ndarray, counts: np.ndarray, sloff: np.ndarray, slice_ids: np.ndarray,
                     slice_list: list[int], group_slice_max: int) -> None:
        """What depends on the call's per-slice counts (after :meth:`setup_shape`)."""
        nsl = self.nsl
        self.g_uloff = uloff
        self.g_sloff = sloff
        self.slice_ids = slice_ids                              # raw ids of the stack per slice
        self.slice_list = slice_list
        self.num_ids = sum(slice_list)
        self.group_slice_max = group_slice_max
        self.stack_slice_max = max(slice_list) if nsl else 0
        self.counts = counts                                    # (ng, nsl) raw ids per group and slice
        self.ulist_size = max(1, self.num_ids)
        # (a counted job's C, base and size come from its counts: _set_counted_sizes)
        if self.staged:
            # C = the longest slice, known only at the end: slice sl is written at
            # sl * stride, stride bounding every slice (raw ids + 7 padding slots per
            # partition), then compact_slices moves it left to sl * C in place (no
            # second buffer: fresh memory is what costs most here)
            self.stride = max(_ALIGN, self.stack_slice_max + (_ALIGN - 1) * self.P)
            self.base = np.arange(nsl, dtype=np.int64) * self.stride
            self.out_size = nsl * self.stride

    def complete(self) -> None:
        """What :func:`_make_jobs` left for later (``defer``): the counters' views the count
        batch does not write, and :meth:`setup_fresh`. Nothing for a complete job."""
        rest = self.__dict__.pop("_rest", None)
        if rest is not None:
            block, counters, batch, row_pointers = rest
            _add_views(self.__dict__, block, counters)
            self.setup_fresh(batch, row_pointers)

    def setup_fresh(self, batch: FeatureBatch, row_pointers: np.ndarray | None = None) -> None:
        """What each call's job has of its own (written, or handed to the caller), whatever its counts.

        ``row_pointers``: the job's ``nsl * R`` int32 row pointers (a view of the call's
        block, :func:`_make_jobs`), or None for a fresh array.
        """
        # (kernels read rowgain only with a combiner; without CSR they never touch row_pointers)
        self.rowgain = (_row_gains(self.stack, batch, self.nsl, self.n, self.lbits)
                        if self.want_csr and self.combiner else _NO_GAINS)
        if not self.want_csr:
            self.row_pointers = _NO_ROW_POINTERS
        else:
            self.row_pointers = np.empty(self.nsl * self.R, np.int32) if row_pointers is None else row_pointers
        self.ulist = None
        self.naive_starts = None
        self.emb = self.smp = self.gout = None
        self.tasks: list[dict] = []
        self.lock = threading.Lock()
        self.naive_counts: np.ndarray | None = None

    def set_counted_size(self) -> None:
        """``C`` from the counted pairs (:func:`~scwork.sharding._split_kernels.slice_pairs`): slices in place.

        Without limits also the layout :func:`~scwork.sharding._split_kernels.write_groups`
        writes: each group's first slot in each stream, the row pointers, the padding.
        """
        ng, nsl, P = len(self.groups), self.nsl, self.P
        per_group = self.count_pairs.reshape(ng, nsl, P)
        pairs = per_group.sum(axis=0)
        aligned = round_up_array(pairs)
        used = aligned.sum(axis=1)
        self.C = self.cap = max(_ALIGN, int(used.max()) if used.size else _ALIGN)
        self.base = np.arange(nsl, dtype=np.int64) * self.C
        self.out_size = nsl * self.C
        if not self.split_csr:
            return
        pstart = np.cumsum(aligned, axis=1) - aligned + self.base[:, None]      # (nsl, P), absolute
        self.offs = (np.cumsum(per_group, axis=0) - per_group + pstart[None]).ravel()
        rp = self.row_pointers.reshape(nsl, self.R)
        rp[:, :P] = pstart - self.base[:, None] + pairs
        rp[:, P:] = used[:, None]
        self.pad_lo = np.concatenate([pstart + pairs, (self.base + used)[:, None]], axis=1).ravel()
        self.pad_hi = np.concatenate([pstart + aligned, (self.base + self.C)[:, None]], axis=1).ravel()
        self.used[:] = used

    def count_task(self, kern: _Backend, batch: FeatureBatch, s0: int, s1: int, g0: int = 0,
                   g1: int | None = None) -> None:
        """Task: pairs per (group, slice, partition) of slices ``[s0, s1)`` x groups ``[g0, g1)``.

        For ``C``, the layout.
        """
        kern.slice_pairs(batch._ids, batch._splits, self.n, self.P, self.gptr, self.feat_rows, self.g_vocab,
                         self.g_shift, s0, s1, g0, len(self.groups) if g1 is None else g1, self.count_pairs)

    def work_units(self, target: float, by_group: bool) -> tuple[list[tuple[int, int, int, int]], list[int]]:
        """Tasks ``(s0, s1, g0, g1)`` of about ``target`` raw ids (one if ``target`` is inf), and their sizes.

        Slice ranges; with ``by_group`` (a stack counted per group: statistics only,
        CSR without limits, or the count of a CSR size) a slice larger than
        ``target`` is cut further into ranges of its groups (tables).
        """
        items, sizes = self.tasks_of(target, by_group)
        return [tuple(item[1:]) for item in items], (sizes.tolist() if isinstance(sizes, np.ndarray) else sizes)

    def tasks_of(self, target: float, by_group: bool) -> tuple[Any, list[int]]:
        """:meth:`work_units` as the dispatcher takes them, ``(job, s0, s1, g0, g1)`` items, and their sizes.

        The items are a list, or for a cut by groups a :class:`_GroupCut` that makes
        each item when a worker takes it (hundreds of tuples made, and freed after
        the call, were a tenth of a statistics call's serial time), its sizes an int64
        array (the dispatcher argsorts them: no list of Python ints to make and sort).
        """
        ng = len(self.groups)
        if not math.isfinite(target) or not by_group or ng == 1 or self.stack_slice_max <= target:
            # plain Python on the per-slice counts: a few numpy calls per stack cost
            # more than these lists (nsl is the number of SparseCores, tens)
            cum = [0, *itertools.accumulate(self.slice_list)]
            ranges = self.ranges(target)
            return [(self, s0, s1, 0, ng) for s0, s1 in ranges], [cum[s1] - cum[s0] for s0, s1 in ranges]
        # a slice larger than target: runs of its groups (compiled greedy cut, one call for all slices)
        from scwork.sharding._split_kernels import cut_groups

        cut = np.empty((ng * self.nsl, 4), np.int64)
        k = cut_groups(self.counts, float(target), cut)
        return _GroupCut(self, cut[:k]), cut[:k, 3]          # (sizes as an array: the dispatcher argsorts them)

    def naive_units(self, target: float) -> list[tuple[int, int, int]]:
        """Naive-view tasks ``(group, p0, p1)``: partition ranges of about ``target`` ids."""
        return self.naive_tasks(target)[0]

    def naive_tasks(self, target: float) -> tuple[list[tuple[int, int, int]], list[int]]:
        """:meth:`naive_units` and each task's size (its group's ids times its share of the partitions).

        Group ``g`` gets ``round(ids / target)`` ranges (1 to ``P``), cut at
        ``P * k // parts``: strictly increasing edges, as ``parts <= P``.
        """
        items, sizes = self.naive_items(target)
        return [unit for _, unit in items], sizes

    def naive_items(self, target: float) -> tuple[Any, list[int]]:
        """:meth:`naive_tasks` as the finish batch takes them, ``(job, (g, p0, p1))`` items, and their sizes.

        The items are a list, or with many groups a :class:`_NaiveCut` that makes each
        item when a worker takes it (no tuples to make and free on the calling thread).
        """
        P, ng = self.P, len(self.groups)
        if ng <= 4:
            # few groups (a stack of its own: preprocess has one job per stack): plain
            # Python on the group totals costs less than the numpy calls below
            units, sizes = [], []
            for g, num in enumerate(self.g_sloff[:, -1].tolist()):
                parts = 1 if not math.isfinite(target) else min(P, max(1, round(num / max(target, 1.0))))
                edges = [P * k // parts for k in range(parts + 1)]
                units += [(self, (g, a, b)) for a, b in itertools.pairwise(edges)]
                sizes += [num * (b - a) // P for a, b in itertools.pairwise(edges)]
            return units, sizes
        nums = self.counts.sum(axis=1)
        if not math.isfinite(target):
            return [(self, (i, 0, P)) for i in range(ng)], nums.tolist()
        parts = np.clip(np.rint(nums / max(target, 1.0)), 1, P).astype(np.int64)
        group = np.repeat(np.arange(ng, dtype=np.int64), parts)
        k = np.arange(group.size, dtype=np.int64) - np.repeat(np.cumsum(parts) - parts, parts)
        per = parts[group]
        p0 = P * k // per
        p1 = P * (k + 1) // per
        sizes = nums[group] * (p1 - p0) // P
        return _NaiveCut(self, np.stack([group, p0, p1], axis=1)), sizes.tolist()

    def naive_task(self, kern: _Backend, g: int, p0: int, p1: int) -> None:
        """Task: the naive view of group ``g`` over partitions ``[p0, p1)``."""
        kern.naive_of_group(self.ulist, self.list_starts(), self.ul_cnt, self.g_qbits, g, p0, p1, self.naive_g)

    def list_starts(self) -> np.ndarray:
        """``(groups, slices)``: where each (group, slice) run's sorted distinct ids start in
        ``ulist``; made once per job by the first naive-view task (tasks only read it; two
        tasks may both make it, the same array)."""
        starts = self.naive_starts
        if starts is None:
            starts = self.naive_starts = self.g_uloff[:, None] + self.g_sloff[:, :-1]
        return starts

    def ranges(self, target: float) -> list[tuple[int, int]]:
        """Contiguous slice ranges of at most ``target`` raw ids each (one if ``target`` is inf).

        Greedy: a range takes the next slice while it stays within ``target``; a
        slice larger than ``target`` is a range of its own. (Cutting at fractions of
        the total merged neighbouring slices into tasks of up to twice the target,
        the largest tasks at 64 threads.)
        """
        nsl = self.nsl
        if not math.isfinite(target) or self.num_ids <= target:
            return [(0, nsl)]
        out = []
        s0, acc = 0, 0
        for sl, c in enumerate(self.slice_list):
            if acc and acc + c > target:
                out.append((s0, sl))
                s0, acc = sl, 0
            acc += c
        out.append((s0, nsl))
        return out

    def scratch_needs(self) -> dict[str, int]:
        """Lengths of the per-worker scratch arrays a task of this stack uses."""
        gmax = max(1, self.group_slice_max)
        sk = max(1, self.stack_slice_max if self.keep_all else gmax)
        return {"sk": sk, "sg": sk if self.any_gains else 1, "ak": gmax, "bk": gmax,
                "ag": gmax if self.any_gains else 1, "bg": gmax if self.any_gains else 1,
                "hist": _HIST_SIZE, "gm": len(self.groups), "bounds": len(self.groups) * (self.P + 1),
                "oov": len(self.groups), "bad": len(self.groups)}

    def run_groups(self, kern: _Backend, batch: FeatureBatch, weights, has_w, s0: int, s1: int, g0: int, g1: int,
                   sc: dict) -> dict:
        """Task: :func:`~scwork.sharding._split_kernels.count_groups` on slices ``[s0, s1)`` x groups ``[g0, g1)``."""
        g_oov = sc["oov"]                # the worker's error slots: the kernel sets them to -1 first
        if not kern.count_groups(batch._ids, batch._splits, weights, has_w, self.n, self.P, self.lbits, self.gptr,
                                 self.feat_rows, self.feat_k, self.g_vocab, self.g_shift, self.g_qbits, self.g_uloff,
                                 self.g_sloff, s0, s1, g0, g1, sc["sk"], sc["ak"], sc["bk"], sc["hist"], self.pairs_g,
                                 self.distinct_g, self.ulist, self.ul_cnt, g_oov):
            # the kernel found no error: nothing to look at, no record made (this Python runs
            # after the kernel has streamed megabytes, cold, holding the GIL: every
            # operation left out here is one a task of every other thread may wait for)
            return self.clean_record
        # no gains, no cut: only an out-of-vocabulary id is worth a record
        return {"s0": s0, "oov": _slots_of(g_oov, g0, g1, len(self.groups)), "bad": self.no_bad,
                "drops": _NO_DROPS, "drop_g": _NO_DROP_G, "clean": False}

    def run_write_groups(self, kern: _Backend, batch: FeatureBatch, weights, has_w, s0: int, s1: int, g0: int,
                         g1: int, sc: dict) -> dict:
        """Task: :func:`~scwork.sharding._split_kernels.write_groups` on slices ``[s0, s1)`` x groups ``[g0, g1)``."""
        g_oov, g_bad = sc["oov"], sc["bad"]      # the worker's error slots: the kernel sets them to -1 first
        if not kern.write_groups(batch._ids, batch._splits, weights, has_w, self.combiner, self.n, self.P,
                                 self.lbits, self.gptr, self.feat_rows, self.feat_k, self.g_vocab, self.g_shift,
                                 self.g_qbits, self.g_rowoff, self.g_mode, self.g_uloff, self.g_sloff, s0, s1, g0, g1,
                                 sc["sk"], sc["sg"], sc["ak"], sc["ag"], sc["bk"], sc["bg"], sc["hist"], self.offs,
                                 self.pad_lo, self.pad_hi, self.rowgain, self.emb, self.smp, self.gout,
                                 self.distinct_g, self.ulist, self.ul_cnt, g_oov, g_bad):
            return self.clean_record       # no error (as run_groups)
        # no cut here (no limits): nothing is dropped, so a task is worth a record only with an error
        ng = len(self.groups)
        return {"s0": s0, "oov": _slots_of(g_oov, g0, g1, ng), "bad": _slots_of(g_bad, g0, g1, ng),
                "drops": _NO_DROPS, "drop_g": _NO_DROP_G, "clean": False}

    def run_slices(self, kern: _Backend, batch: FeatureBatch, weights, has_w, s0: int, s1: int, worker: int,
                   sc: dict) -> dict:
        """Task: :func:`~scwork.sharding._kernels.stack_slices` on slices ``[s0, s1)``."""
        ng = len(self.groups)
        g_oov = np.full(ng, -1, np.int64)
        g_bad = np.full(ng, -1, np.int64)
        drops = np.zeros((1, 4), np.int64)
        drop_g = np.zeros(1, np.int64)
        nd, drops, drop_g = kern.stack_slices(
            batch._ids, batch._splits, weights, has_w, self.combiner, self.n, self.P, self.lbits,
            self.gptr, self.feat_rows, self.feat_k, self.g_vocab, self.g_shift, self.g_qbits, self.g_rowoff,
            self.g_mode, self.g_bitmap, self.g_bmoff, self.g_uloff, self.g_sloff, s0, s1, self.keep_all,
            self.max_ids, self.max_uniq, self.allow_cut,
            sc["sk"], sc["sg"], sc["ak"], sc["ag"], sc["bk"], sc["bg"], sc["hist"], sc["gm"], sc["bounds"],
            self.pairs, self.distinct, self.kept, self.dropped, self.used, g_oov, g_bad, _NO_BITMAP,
            self.ulist, self.ul_cnt,
            self.want_csr, self.cap, self.base, self.R, self.rowgain, self.emb, self.smp, self.gout,
            self.row_pointers, drops, drop_g)
        return {"s0": s0, "oov": g_oov, "bad": g_bad, "drops": drops[:nd], "drop_g": drop_g[:nd]}

    def first_error(self, kinds=("oov", "bad")) -> tuple[str, int] | None:
        """``("oov" | "bad", position)`` of the first failing group (stack order), if any.

        As a whole-group sort would report it: the first out-of-vocabulary id of the
        group in (slice, feature, sample) order, else its first zero-divisor sample.
        (Only tasks with an error or a dropped pair were kept.)
        """
        if not self.tasks:
            return None
        tasks = sorted(self.tasks, key=lambda t: t["s0"])
        for g in range(len(self.groups)):
            for kind in kinds:
                for t in tasks:
                    if t[kind][g] >= 0:
                        return kind, int(t[kind][g])
        return None

    def task_done(self, out: dict) -> None:
        """Record a slice task's errors and dropped pairs (tasks with neither need no record)."""
        clean = out.get("clean")
        if clean:
            return
        if clean is not None or out["drops"].shape[0] or max(out["oov"].tolist(), default=-1) >= 0 \
                or max(out["bad"].tolist(), default=-1) >= 0:
            with self.lock:
                self.tasks.append(out)

    def compact(self, kern: _Backend) -> None:
        """Task (staged stacks): ``C``, then slices moved from ``sl * stride`` to ``sl * C`` and padded."""
        self.C = max(_ALIGN, int(self.used.max()) if self.used.size else _ALIGN)
        kern.compact_slices(self.emb, self.smp, self.gout, self.stride, self.used, self.nsl, self.C)
        size = self.nsl * self.C
        self.emb, self.smp, self.gout = self.emb[:size], self.smp[:size], self.gout[:size]

    def finish_counts(self) -> None:
        """Per-group counters summed (statistics-only stacks) and the naive view."""
        self.finish_sums()
        self.finish_naive()

    def finish_sums(self) -> None:
        """Per-group counters summed (statistics-only stacks): needs the slices, not the naive view."""
        if self.by_group or self.split_csr:
            pairs, distinct, kept = self.counter_rows()
            if len(self.groups) == 1:
                # one table: its counters are the stack's (read from here on, never written)
                self.pairs, self.distinct, self.kept = pairs, distinct, kept
            else:
                self.pairs[:] = pairs
                self.distinct[:] = distinct
                self.kept[:] = pairs

    def counter_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(pairs, distinct, kept)``: the groups' counters summed, without setting them (another
        task may be reading the job meanwhile: the checks' parts); :meth:`finish_sums` keeps them."""
        ng = len(self.groups)
        if self.by_group or self.split_csr:
            per_group = self.count_pairs if self.split_csr else self.pairs_g
            if ng == 1:
                return per_group, self.distinct_g, per_group
            pairs = per_group.reshape(ng, -1).sum(axis=0)
            return pairs, self.distinct_g.reshape(ng, -1).sum(axis=0), pairs
        return self.pairs, self.distinct, self.kept

    def drop_counts(self, kept: np.ndarray) -> tuple[int, int]:
        """``(dropped, static_dropped)``: ids dropped (by the limits' cut, plus those past a
        static CSR buffer), and those past the static buffer alone."""
        capacity = self.stack.static_buffer_size_per_sc(self.S)
        static = 0
        if capacity is not None:
            rows = kept.reshape(self.nsl, self.P)
            static = int(rows.sum() - _written_within(rows, capacity).sum())
        return int(self.dropped.sum()) + static, static

    def statistics_row(self) -> dict:
        """What the statistics take of this stack's result (:meth:`result` without CSR), from the
        counters as they are after the slices."""
        pairs, distinct, kept = self.counter_rows()
        dropped, static = self.drop_counts(kept)
        return {"pairs": pairs, "distinct": distinct, "kept": kept, "input": self.slice_ids, "dropped": dropped,
                "static_dropped": static}

    naive_out = None

    def naive_into(self, out: np.ndarray) -> None:
        """Make the stack's naive view land in the caller's ``out``, ``(1, P)`` int64 (a row of the
        statistics), before the naive-view tasks: with one table they add straight into it
        (zeroed here), else :meth:`finish_naive` sums the tables' rows into it."""
        if len(self.groups) == 1:
            out[...] = 0
            self.naive_g = out
        self.naive_out = out

    def finish_naive(self) -> None:
        """The stack's naive view: its groups' sum (after the naive-view tasks)."""
        if len(self.groups) == 1:
            self.naive_counts = self.naive_g[0]
        elif self.naive_out is not None:
            self.naive_counts = np.sum(self.naive_g, axis=0, out=self.naive_out[0])
        else:
            self.naive_counts = self.naive_g.sum(axis=0)

    def naive_rows(self) -> np.ndarray:
        """``(stacks, P)``: the naive view of each stack this job ran, after the naive-view tasks."""
        self.finish_naive()
        return self.naive_counts[None]

    def results(self, naive: bool = True) -> list[dict]:
        """The results of the stacks this job ran (one); ``naive=False``: without the naive view."""
        return [self.result(naive)]

    def result(self, naive: bool = True) -> dict:
        dropped, static = self.drop_counts(self.kept)
        out = {"pairs": self.pairs, "distinct": self.distinct, "kept": self.kept, "input": self.slice_ids,
               "dropped": dropped, "static_dropped": static}
        if naive:
            out["naive"] = self.naive_counts
        capacity = self.stack.static_buffer_size_per_sc(self.S)
        if not self.want_csr:
            return out
        if capacity is not None and capacity != self.C:
            self._resize_csr(capacity)
        G, S, P, C, R = self.G, self.S, self.P, self.C, self.R
        out["csr"] = CsrBuffers(self.stack.name, self.row_pointers.reshape(G, S * R), self.emb.reshape(G, S * C),
                                self.smp.reshape(G, S * C), self.gout.reshape(G, S * C), P, S, C)
        feature_names = tuple(f.name for f in self.stack.features)
        parts = []
        for t in sorted(self.tasks, key=lambda t: t["s0"]):
            recs, rg = t["drops"], t["drop_g"]
            if recs.shape[0] == 0:
                continue
            for i, g in enumerate(self.groups):
                mine = recs[rg == i]
                if mine.shape[0]:
                    parts.append((g.table, feature_names, S, self.n, g.qbits, self.lbits, g.col_shift, P, mine))
        out["drops"] = parts
        return out


    def _resize_csr(self, capacity: int) -> None:
        """Give every SparseCore's CSR buffer ``capacity`` entries (a static size).

        As jax-tpu-embedding's ``FillBufferSegment`` fills a static buffer: partitions in
        order, each starting at a multiple of 8; the first entry that does not fit ends
        the SparseCore's buffer (it and every later id of the slice are dropped) and the
        row pointers of the partitions not reached point at the end. That is the prefix
        of the unbounded layout: its first ``capacity`` entries, row pointers capped.
        """
        nsl, C = self.nsl, self.C
        keep = min(C, capacity)
        pad = np.iinfo(np.int32).max
        arrays = []
        for old, fill, dtype in ((self.emb, pad, np.int32), (self.smp, pad, np.int32),
                                 (self.gout, np.nan, np.float32)):
            new = np.full((nsl, capacity), fill, dtype)
            new[:, :keep] = old[:nsl * C].reshape(nsl, C)[:, :keep]
            arrays.append(new.ravel())
        self.emb, self.smp, self.gout = arrays
        np.minimum(self.row_pointers, capacity, out=self.row_pointers)
        self.C = capacity


class _MergedStacks:
    """Statistics-only stacks of one partition count, run as one job whose groups are all their tables.

    A statistics-only job counts every (group, slice) run into its group's own
    counters (:func:`~scwork.sharding._split_kernels.count_groups`) and adds the
    groups afterwards, so a job whose groups are the tables of several stacks
    gives each stack's counters as the sum over that stack's groups, exactly.
    One job instead of one per stack: its tables, task lists, checks and results
    are built once per call (with 26 one-table stacks the per-stack Python was
    most of a compute_stats call's serial time). The job reads what
    :func:`_make_jobs` reads of a :class:`~scwork.sharding.stacking.Stack`.
    """

    combiner = "sum"
    max_ids_per_partition = None
    max_unique_ids_per_partition = None

    def __init__(self, stacks: list[Stack]):
        self.parts = tuple(stacks)
        self.name = stacks[0].name
        self.features = tuple(f for st in stacks for f in st.features)
        self.tables = tuple(t for st in stacks for t in st.tables)
        self.num_partitions = stacks[0].num_partitions
        # first group (table) of each part, and the number of groups last
        self.group_starts = [0, *itertools.accumulate(len(st.tables) for st in stacks)]

    def static_buffer_size_per_sc(self, sparsecores_per_device: int) -> None:
        return None


def _merge_statistics_stacks(stacks, config: SparsecoreConfig, batch_size: int) -> list:
    """``stacks`` with every run of neighbouring statistics-only stacks of one ``P`` as one :class:`_MergedStacks`.

    Statistics-only: no prefix cut (a stack with limits and ``allow_id_dropping``
    runs on its own: the cut needs the whole stream). Runs keep the stacks' order,
    so errors are met in the order a stack-by-stack run meets them. A run stops
    where its features x samples would pass 2**31 - 1 (the kernels' row keys).
    """
    out: list = []
    run: list[Stack] = []
    rows = 0

    def close():
        if len(run) > 1:
            out.append(_MergedStacks(run))
        else:
            out.extend(run)

    for st in stacks:
        limited = st.max_ids_per_partition is not None or st.max_unique_ids_per_partition is not None
        alone = (limited and config.allow_id_dropping) or not st.tables or not st.features
        k_rows = len(st.features) * batch_size
        if alone or (run and (st.num_partitions != run[0].num_partitions or rows + k_rows > 2**31 - 1)):
            close()
            run, rows = [], 0
        if alone:
            out.append(st)
            continue
        run.append(st)
        rows += k_rows
    close()
    return out


class _MergedJob:
    """Mixin of :class:`_StackJob` for a :class:`_MergedStacks` job: per-part counters and results."""

    def finish_counts(self) -> None:
        """The naive view per group; each part's counters are its groups' sums (in :meth:`results`)."""

    def finish_sums(self) -> None:
        """Nothing: each part's counters are its groups' sums, made in :meth:`results`."""

    naive_out = None

    def naive_into(self, out: np.ndarray) -> None:
        """Make :meth:`naive_rows` the caller's ``out``, ``(parts, P)`` int64 (before the naive-view tasks).

        With one table per part the naive-view tasks add straight into ``out`` (zeroed
        here); else the groups' rows are summed into it: no copy of the rows after the
        tasks (the statistics' array is ``out``).
        """
        if len(self.stack.group_starts) - 1 == len(self.groups):
            out[...] = 0
            self.naive_g = out
        self.naive_out = out

    def naive_rows(self) -> np.ndarray:
        """``(parts, P)``: each part's naive view, the sum of its groups' (after the naive-view tasks)."""
        starts = self.stack.group_starts[:-1]
        if len(starts) == len(self.groups):
            return self.naive_g
        return np.add.reduceat(self.naive_g, np.array(starts, np.int64), axis=0, out=self.naive_out)

    def results(self, naive: bool = True) -> list[dict]:
        """One result per stack of the run, as each stack's own job gives it.

        ``naive=False``: without the naive view (before its tasks ran; :meth:`naive_rows` then).
        """
        merged = self.stack
        ng, nsl, P = len(self.groups), self.nsl, self.P
        starts = merged.group_starts[:-1]
        pairs_g = self.pairs_g.reshape(ng, nsl * P)
        distinct_g = self.distinct_g.reshape(ng, nsl * P)
        if len(starts) == ng:                     # one table per part: the group rows are the parts'
            pairs, distinct, inputs = pairs_g, distinct_g, self.counts
        else:
            at = np.array(starts, np.int64)
            pairs = np.add.reduceat(pairs_g, at, axis=0)
            distinct = np.add.reduceat(distinct_g, at, axis=0)
            inputs = np.add.reduceat(self.counts, at, axis=0)
        out = []
        # the rows' arrays, so that the statistics take them whole (results._block_of)
        block = {"pairs": pairs, "distinct": distinct, "input": inputs}
        if naive:
            block["naive"] = self.naive_rows()
        for i, st in enumerate(merged.parts):
            row = pairs[i]
            res = {"pairs": row, "distinct": distinct[i], "kept": row,
                   "input": inputs[i], "dropped": 0, "static_dropped": 0, "block": block, "row": i}
            if naive:
                res["naive"] = block["naive"][i]
            capacity = st.static_buffer_size_per_sc(self.S)
            if capacity is not None:
                kept = row.reshape(nsl, P)
                res["static_dropped"] = res["dropped"] = int(kept.sum() - _written_within(kept, capacity).sum())
            out.append(res)
        return out


class _StackJobOfMerged(_MergedJob, _StackJob):
    """A :class:`_StackJob` of a :class:`_MergedStacks`."""


def _describe_groups(stacks, batch: FeatureBatch):
    """Per stack, per group (table): ``(table, ks, rows, names, shift, row offset, vocab, qbits)``.

    Also the feature rows of every group in order, where each group starts among
    them, and the first group of each stack (a last entry: the number of groups).
    """
    index = batch._index
    rows_in_order: list[int] = []          # feature rows, group by group, stack by stack
    group_starts: list[int] = []           # first position of each group in rows_in_order
    stack_groups: list[int] = [0]          # first group of each stack
    described = []
    for st in stacks:
        P = st.num_partitions
        k_of_table: dict[str, list[int]] = {}
        for k, f in enumerate(st.features):
            k_of_table.setdefault(f.table.name, []).append(k)
        mine = []
        for t in st.tables:
            name = t.table.name
            ks = k_of_table.get(name, [])
            rows = []
            for k in ks:
                fname = st.features[k].name
                if fname not in index:
                    batch._feature_index(fname)                # raises the InputError
                rows.append(index[fname])
            group_starts.append(len(rows_in_order))
            rows_in_order += rows
            vocab = t.table.vocab_size
            mine.append((name, ks, rows, tuple(st.features[k].name for k in ks), t.shard_rotation,
                         t.row_offset_in_shard, vocab, int((vocab - 1) // P).bit_length()))
        described.append(mine)
        stack_groups.append(stack_groups[-1] + len(mine))
    return described, rows_in_order, group_starts, stack_groups


class _StaticTables:
    """What :func:`_make_jobs` builds from a plan and a batch's layout alone (no counts).

    Per stack, its groups (tables) and the small int64 rows the kernels read
    (``gptr``, ``feat_rows``, ``feat_k``, ``g_vocab``...) as views of one array, all
    of it kept between calls with the :class:`_JobTemplate`: those arrays are only read. The
    rows that depend on the counts (``g_uloff``) are made per call.
    """

    def __init__(self, stacks, batch: FeatureBatch, want_csr: bool, has_w_list: list[int]):
        described, rows_in_order, group_starts, stack_groups = _describe_groups(stacks, batch)
        self.stack_groups = stack_groups
        self.total_groups = total = stack_groups[-1]
        self.rows = np.array(rows_in_order, np.int64)
        self.starts = np.array(group_starts, np.int64)
        self.ng_of = [stack_groups[si + 1] - stack_groups[si] for si in range(len(stacks))]
        flat: list[int] = []
        self.layout = []
        for si, st in enumerate(stacks):
            mine = described[si]
            weighted = [any(has_w_list[r] for r in g[2]) for g in mine]
            combiner = _COMBINER_CODE[st.combiner] if want_csr else 0
            gptr = [0]
            for g in mine:
                gptr.append(gptr[-1] + len(g[2]))
            parts = {
                "gptr": gptr,
                "feat_rows": [r for g in mine for r in g[2]],
                "feat_k": [k for g in mine for k in g[1]],
                "g_vocab": [g[6] for g in mine],
                "g_shift": [g[4] for g in mine],
                "g_qbits": [g[7] for g in mine],
                "g_rowoff": [g[5] for g in mine],
                "g_mode": [(2 if w else (1 if combiner else 0)) if want_csr else 0 for w in weighted],
            }
            spans = {}
            for key, vals in parts.items():
                spans[key] = (len(flat), len(flat) + len(vals))
                flat += vals
            self.layout.append((spans, weighted, gptr))
        self.meta_all = meta_all = np.array(flat, np.int64)
        self.metas = []
        self.groups = []
        for si, (spans, _, gptr) in enumerate(self.layout):
            meta = {key: meta_all[a:b] for key, (a, b) in spans.items()}
            rows_view, ks_view = meta["feat_rows"], meta["feat_k"]
            self.metas.append(meta)
            # the jobs read counts from the job (job.counts), not from their groups
            self.groups.append([_Group(d[0], rows_view[gptr[i]:gptr[i + 1]], ks_view[gptr[i]:gptr[i + 1]],
                                       d[3], d[4], d[5], d[6], d[7], None, None)
                                for i, d in enumerate(described[si])])
        # g_uloff (each group's first place in its stack's naive-view list: the ids of
        # the stack's earlier groups) = exclusive running sum over all groups minus
        # that at the stack's first group
        self.stack_starts = np.array(stack_groups[:-1], np.int64)
        # the first group of each stack before merging (None: one group each)
        parts = [p for st in stacks for p in getattr(st, "parts", (st,))]
        self.parts_are_stacks = len(parts) == len(stacks)
        part_groups = [len(p.tables) for p in parts]
        self.part_starts = None if part_groups == [1] * total else \
            np.array([0, *itertools.accumulate(part_groups)][:-1], np.int64)
        self.first_group = np.repeat(self.stack_starts, self.ng_of) if total else np.zeros(0, np.int64)
        self.all_counted = bool(total) and all(self.ng_of)


class _JobTemplate:
    """The jobs of a plan's stacks for one shape of call, before any count: kept by :func:`_make_jobs`.

    A job's attributes but its counts', its counters' content and what each call has
    of its own (:meth:`_StackJob.setup_fresh`) depend on the plan, the batch's layout
    (feature names, batch size, weighted features), the topology, the config's
    ``allow_id_dropping``, the threads (``count_first``) and whether CSR is written,
    nothing else (:meth:`_StackJob.setup_shape`). They are made once and every call's
    job starts as a copy of them, its counters views of its own zeroed block at the
    places the template's had in the template's block: setting some sixty attributes
    and a dozen views per stack anew was most of what a call did before its first task.
    """

    def __init__(self, stacks, tables: _StaticTables, batch: FeatureBatch, G: int, S: int, want_csr: bool,
                 config: SparsecoreConfig, count_first: bool):
        nsl = G * S
        n = batch.batch_size // nsl
        self.tables = tables
        # read-only zeros and, the engine's naive view always using lists (no bitmap), one
        # zero flag per group: read by the kernels, never written, shared by every call
        zeros_nsl = np.zeros(nsl, np.int64)
        zeros_nsl.flags.writeable = False
        bitmaps = np.zeros(max(1, tables.total_groups), np.int8)
        block_len = 0
        for si, st in enumerate(stacks):
            ng, P = tables.ng_of[si], st.num_partitions
            block_len += ng + ng * nsl + 5 * ng * nsl * P + ng * P + 3 * nsl * P + 2 * nsl * (P + 1) + 3 * nsl + 2
        block = np.zeros(max(1, block_len), np.int64)
        pos = [0]

        def zeros(length: int) -> np.ndarray:
            start = pos[0]
            pos[0] = start + length
            if pos[0] > block.size:                      # sized above; a miscount must not alias
                raise RuntimeError("engine job layout: zero block too small")
            return block[start:start + length]

        self.kinds, self.statics, self.counters = [], [], []
        # each CSR job's row pointers: its place in the call's int32 block
        self.row_pointer_spans: list[tuple[int, int] | None] = []
        rp_len = 0
        # the counted jobs' places in the block (rows of counted_layouts' table)
        counted_rows: list[list[int]] = []
        self.counted_stacks: list[int] = []
        stack_groups = tables.stack_groups
        for si, st in enumerate(stacks):
            g0, g1 = stack_groups[si], stack_groups[si + 1]
            _, weighted, _ = tables.layout[si]
            meta = dict(tables.metas[si], zeros_nsl=zeros_nsl, bitmap=bitmaps[g0:g1])
            kind = _StackJobOfMerged if isinstance(st, _MergedStacks) else _StackJob
            job = kind()
            job.setup_shape(st, G, S, n, tables.groups[si], want_csr, config, weighted, meta, zeros, count_first)
            # the counters (views of the block) are placed anew per call; the rest is shared
            counters = []
            where = {}
            for name, value in list(job.__dict__.items()):
                if isinstance(value, np.ndarray) and value.base is block:
                    offset = (value.ctypes.data - block.ctypes.data) // block.itemsize
                    counters.append((name, offset, offset + value.size, value.shape))
                    where[name] = offset
                    del job.__dict__[name]
            if want_csr:
                self.row_pointer_spans.append((rp_len, rp_len + nsl * job.R))
                rp_len += nsl * job.R
            else:
                self.row_pointer_spans.append(None)
            if job.counted:
                split = job.split_csr
                counted_rows.append([where["count_pairs"], len(job.groups), job.P, job.R, int(split), where["base"],
                                     where["used"], where["offs"] if split else 0, where["pad_lo"] if split else 0,
                                     where["pad_hi"] if split else 0, self.row_pointer_spans[-1][0]])
                self.counted_stacks.append(si)
            self.kinds.append(kind)
            self.statics.append(job.__dict__)
            self.counters.append(counters)
        # each job's counters split once: those the count batch writes, the others
        self.count_counters = [[c for c in cs if c[0] in _COUNT_COUNTERS] for cs in self.counters]
        self.later_counters = [[c for c in cs if c[0] not in _COUNT_COUNTERS] for cs in self.counters]
        self.row_pointers_len = rp_len
        self.counted_table = np.array(counted_rows, np.int64).reshape(len(counted_rows), 11)
        # what the views use of the bound above (about half: a statistics-only job has no
        # CSR counters): each call zeroes that much
        self.block_len = max(1, pos[0])

    def job(self, si: int, block: np.ndarray, count_only: bool = False) -> _StackJob:
        """Stack ``si``'s job for one call, its counters views of ``block`` (zeroed, :attr:`block_len`).

        ``count_only``: make just the views the count batch writes (:data:`_COUNT_COUNTERS`);
        :meth:`_StackJob.complete` makes the others (:attr:`later_counters`).
        """
        job = self.kinds[si]()
        attrs = job.__dict__
        attrs.update(self.statics[si])
        _add_views(attrs, block, self.count_counters[si] if count_only else self.counters[si])
        return job


def _add_views(attrs: dict, block: np.ndarray, counters) -> None:
    """Set each counter ``(name, start, end, shape)`` in ``attrs`` as a view of ``block``."""
    for name, a, b, shape in counters:
        view = block[a:b]
        attrs[name] = view if len(shape) == 1 else view.reshape(shape)


# The counters a count batch writes (:meth:`_StackJob.count_task`): the only views a deferred
# job has before :meth:`_StackJob.complete` (:func:`_make_jobs`).
_COUNT_COUNTERS = ("count_pairs",)

# (writable, as the plan's part starts: a read-only array is another type to numba, another compilation)
_NO_PARTS = np.zeros(0, np.int64)


def _group_tables_numpy(tables: _StaticTables, stacks, slice_counts: np.ndarray, nsl: int, before_counters):
    """The jobs' tables with numpy, where some stack has no group (or no slice): what
    :func:`~scwork.sharding._kernels.group_tables` computes otherwise."""
    total_groups = tables.total_groups
    if total_groups == 0 or not tables.rows.size:
        gcounts = np.zeros((total_groups, nsl), np.int64)
    else:
        gcounts = np.add.reduceat(slice_counts[tables.rows], tables.starts, axis=0).astype(np.int64, copy=False)
    # a group without features (cannot happen for a checked plan) counts nothing
    sloff_all = np.zeros((total_groups, nsl + 1), np.int64)
    np.cumsum(gcounts, axis=1, out=sloff_all[:, 1:])
    totals = sloff_all[:, -1]
    before = np.cumsum(totals) - totals
    if len(stacks) == 1:                  # one job (a statistics call on one P): its offsets as they are
        uloff_all = before
    else:
        uloff_all = before - before[tables.first_group] if total_groups else np.zeros(0, np.int64)
    stack_slices_all = np.add.reduceat(gcounts, tables.stack_starts, axis=0) if tables.all_counted else None
    if before_counters is not None:
        if not tables.all_counted:
            before_counters(None)
        elif tables.part_starts is None:
            before_counters(gcounts)
        elif tables.parts_are_stacks:
            before_counters(stack_slices_all)
        else:
            before_counters(np.add.reduceat(gcounts, tables.part_starts, axis=0))
    return gcounts, sloff_all, uloff_all, stack_slices_all


def _make_jobs(plan: StackingPlan, batch: FeatureBatch, G: int, S: int, want_csr: bool, config: SparsecoreConfig,
               has_w: np.ndarray, slice_counts: np.ndarray, count_first: bool, before_counters=None,
               defer: bool = False) -> list[_StackJob]:
    """Every stack's :class:`_StackJob`, their tables built in one pass over all stacks.

    The same tables as building each stack on its own (:func:`_groups` per stack),
    but the per-(group, slice) counts, their offsets and maxima are computed for all
    groups of all stacks in one compiled pass (:func:`~scwork.sharding._kernels.group_tables`),
    the small per-group rows come from
    one int64 array kept for the plan (:class:`_StaticTables`), each job starts as a
    copy of its :class:`_JobTemplate` (kept for the plan and the call's shape) and
    every zero-filled counter is a view of one zeroed block.

    ``before_counters(part_counts, part_sums)``: called before anything the size of the
    topology is allocated (the scratch check), with the raw ids of each of
    ``plan.parts`` (the stacks before merging; ``plan.stacks`` if it has none) in
    each slice, ``(parts, slices)``, or None where a stack has no table; and
    ``(their total, the sum of each part's largest slice)`` or None.

    ``defer``: each job gets only what the count batch reads and writes (its counts and
    ``count_pairs``); :meth:`_StackJob.complete` makes the rest, which :func:`_execute`
    does while the count batch runs (a dozen views and attributes per stack, a
    quarter of a call's serial time before its first task at 26 stacks).
    """
    nsl = G * S
    stacks = plan.stacks
    has_w_list = has_w.tolist()
    layout = (batch._names, bool(want_csr), tuple(has_w_list))
    tables = plan_derived("tables", stacks, layout, lambda: _StaticTables(stacks, batch, want_csr, has_w_list))
    stack_groups = tables.stack_groups
    total_groups = tables.total_groups
    if tables.all_counted and tables.rows.size and nsl:
        # every stack has a group (every engine call on a checked plan): the tables in
        # one compiled pass (a dozen numpy calls on these small arrays, cold after the
        # previous call's tasks, were a third of the call's serial time before its first task)
        from scwork.sharding._kernels import group_tables

        part_starts = tables.part_starts if tables.part_starts is not None and not tables.parts_are_stacks \
            else _NO_PARTS
        gcounts, sloff_all, uloff_all, group_max_all, stack_slices_all, stack_max_all, part_slices = group_tables(
            slice_counts, tables.rows, tables.starts, tables.first_group, tables.stack_starts, part_starts,
            len(stacks) == 1)
        stack_max = stack_max_all.tolist()
        slice_lists = stack_slices_all.tolist()
        if before_counters is not None:
            # with the parts' raw ids in all and the sum of their largest slices (what a
            # statistics call's estimate takes), from what is at hand: no reduction of the
            # parts' counts for it
            total = sum(map(sum, slice_lists))
            if tables.part_starts is None:          # every part one group (no stacking): its rows
                before_counters(gcounts, (total, sum(group_max_all.tolist())))
            elif tables.parts_are_stacks:
                before_counters(stack_slices_all, (total, sum(map(max, slice_lists))))
            else:
                before_counters(part_slices, (total, sum(map(max, part_slices.tolist()))))
    else:
        gcounts, sloff_all, uloff_all, stack_slices_all = _group_tables_numpy(tables, stacks, slice_counts, nsl,
                                                                                before_counters)
        stack_max = slice_lists = None
    shape = (batch.batch_size, G, S, bool(config.allow_id_dropping), bool(count_first))
    template = plan_derived("jobs", stacks, layout + shape,
                            lambda: _JobTemplate(stacks, tables, batch, G, S, want_csr, config, count_first))
    # one zeroed block for every counter of every job, one int32 block for their row pointers
    block = np.zeros(template.block_len, np.int64)
    row_pointers = np.empty(template.row_pointers_len, np.int32) if want_csr else None
    spans = template.row_pointer_spans
    jobs = []
    for si in range(len(stacks)):
        g0, g1 = stack_groups[si], stack_groups[si + 1]
        job = template.job(si, block, count_only=defer)
        if stack_max is not None:
            job.setup_counts(uloff_all[g0:g1], gcounts[g0:g1], sloff_all[g0:g1], stack_slices_all[si],
                             slice_lists[si], stack_max[si])
        else:
            slice_ids = gcounts[g0:g1].sum(axis=0)
            job.setup_counts(uloff_all[g0:g1], gcounts[g0:g1], sloff_all[g0:g1], slice_ids, slice_ids.tolist(),
                             int(gcounts[g0:g1].max(initial=0)) if g1 > g0 and nsl else 0)
        span = spans[si]
        rp = None if span is None else row_pointers[span[0]:span[1]]
        if defer:
            job._rest = (block, template.later_counters[si], batch, rp)
        else:
            job.setup_fresh(batch, rp)
        jobs.append(job)
    if template.counted_stacks:
        # what _set_counted_sizes needs to lay out every counted job in one compiled call
        # (the jobs by id: a list of them here would be a reference cycle, which kept the
        # call's CSR buffers from the pool until the garbage collector ran)
        jobs[template.counted_stacks[0]].counted_layout = _CountedLayout(
            block, template.counted_table, nsl, row_pointers, tuple(id(jobs[si]) for si in template.counted_stacks))
    return jobs


@dataclass
class _CountedLayout:
    """A call's counted jobs as :func:`~scwork.sharding._split_kernels.counted_layouts` reads them:
    their counters' block, one row per job of places in it, the row pointers' block, and
    the ids of the jobs the rows are (in order)."""

    block: np.ndarray
    table: np.ndarray
    nsl: int
    row_pointers: np.ndarray
    job_ids: tuple


def _set_counted_sizes(jobs: list[_StackJob]) -> None:
    """:meth:`_StackJob.set_counted_size` of every job.

    The counted jobs of one call, as :func:`_make_jobs` made them (their layout
    arrays views of the call's block): one compiled call for all
    (:func:`~scwork.sharding._split_kernels.counted_layouts`), then each job's ``C``.
    Other lists (jobs of several calls, or made one by one): jobs of the same shape
    (groups, slices, partitions) stacked and computed with numpy at once (the
    per-job method costs some twenty numpy calls per stack; the numpy calls per
    shape still cost 0.4 ms at 26 stacks, a fifth of a preprocess call's serial time).
    """
    layout = getattr(jobs[0], "counted_layout", None) if jobs else None
    if layout is not None and layout.job_ids == tuple(map(id, jobs)) \
            and all(j.base.base is layout.block for j in jobs):
        from scwork.sharding._split_kernels import counted_layouts

        C = np.empty(len(jobs), np.int64)
        counted_layouts(layout.block, layout.table, layout.nsl, layout.row_pointers, C)
        for j, c in zip(jobs, C.tolist()):
            j.C = j.cap = c
            j.out_size = j.nsl * c
        return
    by_shape: dict[tuple, list[_StackJob]] = {}
    for j in jobs:
        by_shape.setdefault((len(j.groups), j.nsl, j.P, j.split_csr), []).append(j)
    for (ng, nsl, P, split), same in by_shape.items():
        m = len(same)
        per_group = np.stack([j.count_pairs for j in same]).reshape(m, ng, nsl, P)
        pairs = per_group.sum(axis=1)                                            # (m, nsl, P)
        aligned = round_up_array(pairs)
        used = aligned.sum(axis=2)                                               # (m, nsl)
        C = np.maximum(used.max(axis=1), _ALIGN) if nsl else np.full(m, _ALIGN, np.int64)
        base = np.arange(nsl, dtype=np.int64)[None, :] * C[:, None]             # (m, nsl)
        C_list = C.tolist()
        for i, j in enumerate(same):
            j.C = j.cap = C_list[i]
            j.base = base[i]
            j.out_size = nsl * C_list[i]
        if not split:
            continue
        pstart = np.cumsum(aligned, axis=2) - aligned + base[:, :, None]         # (m, nsl, P), absolute
        offs = (np.cumsum(per_group, axis=1) - per_group + pstart[:, None]).reshape(m, -1)
        R = same[0].R
        rp = np.empty((m, nsl, R), np.int32)
        rp[:, :, :P] = pstart - base[:, :, None] + pairs
        rp[:, :, P:] = used[:, :, None]
        pad_lo = np.concatenate([pstart + pairs, (base + used)[:, :, None]], axis=2).reshape(m, -1)
        pad_hi = np.concatenate([pstart + aligned, (base + C[:, None])[:, :, None]], axis=2).reshape(m, -1)
        rp = rp.reshape(m, nsl * R)
        for i, j in enumerate(same):
            j.offs, j.pad_lo, j.pad_hi = offs[i], pad_lo[i], pad_hi[i]
            j.row_pointers = rp[i]
            j.used[:] = used[i]


def _csr_views(specs_of: list[int]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(emb, smp, gout)`` of the given lengths, all carved from one pooled buffer."""
    flat = _carve_owned([(n, dt) for n in specs_of for dt in (np.int32, np.int32, np.float32)])
    return [tuple(flat[3 * i:3 * i + 3]) for i in range(len(specs_of))]


def _row_gains(stack: Stack, batch: FeatureBatch, nsl: int, n: int, lbits: int) -> np.ndarray:
    """float32 gain of one id of each stacked row ``R' = sl << lbits | k * n + i``.

    Unweighted mean: ``1 / len``, sqrtn: ``1 / sqrt(len)`` (len: raw ids of the sample).
    """
    out = np.ones((nsl, 1 << lbits), np.float32)
    for k, f in enumerate(stack.features):
        lengths = batch.lengths(f.name).astype(np.float32).reshape(nsl, n)
        div = lengths if stack.combiner == "mean" else np.sqrt(lengths)
        with np.errstate(divide="ignore"):
            out[:, k * n:(k + 1) * n] = np.float32(1.0) / div
    return out.ravel()


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------
def _execute(plan: StackingPlan, batch: FeatureBatch, G: int, S: int, kern: _Backend, config: SparsecoreConfig,
             want_csr: bool, num_threads: int, prepare=None, after_slices=None,
             counts: np.ndarray | None = None, jobs: list | None = None,
             fill_statistics=None) -> tuple[list[dict], np.ndarray]:
    """Run every stack: task batches (counts for C, slices, naive view and compaction), checks, results.

    Every step that grows with the input runs as tasks of about ``total ids /
    (threads * _TASKS_PER_THREAD)`` ids, so that the threads finish together; with one
    thread each batch has one task per stack. ``prepare`` (no arguments): serial work
    of the caller that does not depend on the results (the statistics' buffers and
    Dataset), done by the calling thread while the slices run, with the naive view's
    task list. ``after_slices(results, first, fill)``: what the caller does with the
    results of the stacks ``first, first + 1, ...`` (checks; with ``fill``, the
    statistics too), run as more tasks beside the naive view's (it needs the slices,
    not the naive view); ``fill_statistics(rows)``: with CSR, the statistics filled
    from every stack's counters (:meth:`_StackJob.statistics_row`), a task of its own
    while ``after_slices`` checks the stacks part by part (``fill`` False). Errors of
    these tasks are raised after the batch, the first a single task over every stack
    in order would have raised.

    ``counts``: :func:`_slice_counts` of ``batch`` if the caller has it; ``jobs``:
    :func:`_jobs_of` for these arguments, if made ahead (their counters untouched).

    Returns the per-stack results (without the naive view) and the naive view of
    every stack, ``(stacks, P)``, or None where each job wrote its own into the
    caller's rows (:meth:`_StackJob.naive_into`, made while the slices ran).
    """
    weights, has_w = _weights_of(batch)
    if jobs is None:
        jobs = _jobs_of(plan, batch, G, S, want_csr, config, num_threads, counts, defer=True)
    total = sum(j.num_ids for j in jobs)
    target = total / (num_threads * _TASKS_PER_THREAD) if num_threads > 1 else np.inf

    counted = [j for j in jobs if j.counted]
    count_units = None
    # The slices' task list, scratch and naive-view lists depend on the raw counts alone,
    # not on what the count batch counts: made by the calling thread while that batch
    # runs (below), else before the slices. Buffers taken are given back at the end.
    held: dict = {}

    def slices_setup() -> None:
        for j in jobs:                     # (the jobs' views the count batch does not write)
            j.complete()
        if count_units is not None and len(counted) == len(jobs) and all(j.split_csr for j in jobs):
            work, sizes = count_units      # the same cut (every job is cut by groups either way)
            held["table"] = held.get("count_table")
        else:
            work, sizes = _units(jobs, target, lambda j: j.by_group or j.split_csr)
            held["table"] = _task_table(work, sizes, num_threads)
        threads = min(num_threads, len(work))          # no scratch for threads without work
        # scratch per worker and the naive-view lists (internal, back to the pool at the
        # end of the call): one pooled buffer for every worker (recycled by the next call:
        # no fresh pages); each worker makes its own views at its first task
        needs = _scratch_needs(jobs)
        names = list(needs)
        specs = [(needs[name], np.float32 if name in ("sg", "ag", "bg") else np.int64) for name in names]
        offsets, per_worker = _layout(specs)
        per_worker = (per_worker + 63) // 64 * 64
        scratch_buf = held["scratch_buf"] = _POOL.take(per_worker * threads)
        scratch: list[dict | None] = [None] * threads

        def scratch_of(worker: int) -> dict:
            if scratch[worker] is None:                       # only this worker touches its entry
                mine = scratch_buf[worker * per_worker:(worker + 1) * per_worker]
                scratch[worker] = dict(zip(names, _views(mine, specs, offsets)))
            return scratch[worker]

        ulists, held["ulist_buf"] = _carve([(j.ulist_size, np.int64) for j in jobs])
        for j, ul in zip(jobs, ulists):
            j.ulist = ul
        held.update(work=work, sizes=sizes, threads=threads, scratch_of=scratch_of)

    try:
        if counted:
            count_units = _units(counted, target, lambda j: True)
            held["count_table"] = _task_table(*count_units, num_threads)
            _run_count_batch(kern, batch, count_units, num_threads, slices_setup, held.get("count_table"))
            _set_counted_sizes(counted)
        else:
            slices_setup()
        work, sizes, num_threads, scratch_of = held["work"], held["sizes"], held["threads"], held["scratch_of"]
        if want_csr:
            for j, (e, s, g) in zip(jobs, _csr_views([j.out_size for j in jobs])):
                j.emb, j.smp, j.gout = e, s, g
        else:
            for j in jobs:
                j.emb, j.smp, j.gout = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32)

        def slices(item, worker):
            j, s0, s1, g0, g1 = item
            if j.by_group:
                j.task_done(j.run_groups(kern, batch, weights, has_w, s0, s1, g0, g1, scratch_of(worker)))
            elif j.split_csr:
                j.task_done(j.run_write_groups(kern, batch, weights, has_w, s0, s1, g0, g1, scratch_of(worker)))
            else:
                j.task_done(j.run_slices(kern, batch, weights, has_w, s0, s1, worker, scratch_of(worker)))

        # naive view (per group and partition range) and the compaction of staged stacks:
        # the task list depends on the counts alone, so it is made while the slices run
        finish, finish_sizes, largest, order = [], [], [0], []
        overlap = _finish_list_steps(jobs, target, finish, finish_sizes, largest, order, held, num_threads)
        if prepare is not None:
            overlap += list(prepare) if isinstance(prepare, (list, tuple)) else [prepare]
        _run_slices_batch(slices, kern, work, sizes, batch, weights, has_w, num_threads, scratch_of, overlap,
                          held["table"])
        # errors in stack order, as a stack-by-stack run would raise them (only a job with
        # an error or a dropped pair kept a task record)
        for j in [j for j in jobs if j.tasks]:
            err = j.first_error(("oov",))
            if err is not None:
                raise _Oov(err[1])
        staged = any(j.staged for j in jobs)      # results read the compacted CSR: after it
        split = want_csr and not staged and fill_statistics is not None and num_threads > 1
        parts = _ResultParts(jobs, batch, G, S, config, want_csr, after_slices, fill_statistics,
                             num_threads if split else 1)
        firsts = None if staged else parts.items()
        if not staged:
            # first in the batch (the largest sizes): what follows the batch waits for them
            # (the largest, found while the slices ran; their indices: the chain's last items)
            finish.append(firsts)
            finish_sizes.extend([largest[0] + 1] * len(firsts))
            order[:0] = range(len(finish_sizes) - len(firsts), len(finish_sizes))
        _run_finish_batch(kern, held.get("naive_table"), finish, finish_sizes, order, firsts, num_threads)
        if staged:
            parts.run(0)
        results = parts.results()
        naive = _naive_views(jobs)
        if want_csr:
            # the caller's CSR buffers go back to the pool once the caller drops them:
            # the jobs kept below must not hold them
            for j in jobs:
                j.emb = j.smp = j.gout = None
        # nobody reads the call's jobs and task lists any more (their counters and CSR are
        # in the results): the next call frees them while its slices run, not this one
        # after its last task (some thousand small objects: 0.1 ms at 26 stacks)
        keep_until_next_call((jobs, work, sizes, finish, finish_sizes))
        return results, naive
    finally:
        for j in jobs:
            j.ulist = None
        for key in ("scratch_buf", "ulist_buf"):
            if key in held:
                _POOL.give(held.pop(key))


# Whether the batches that can run as one compiled call per worker and stack over a task
# table (_run_swept) do so; off, every batch runs one Python call per task. Kept switchable
# for the benchmark that compares the two in one process (bench_task_queue.py).
_SWEEP_BATCHES = True


class _TaskTable:
    """A batch's tasks of one or several jobs as one int64 table, for the queued kernels.

    ``rows``: ``(s0, s1, g0, g1)`` per task of a count or slices batch, ``(g, p0, p1)`` per
    naive-view task; ``job_of``: each row's index into ``jobs``; ``order``: the row indices
    by job, largest size first within a job (ties in row order, as
    :func:`~scwork.sharding._profile.dispatch_order`); job ``j``'s rows are
    ``order[starts[j]:starts[j + 1]]``. Made by compiled calls where the batch's cut is
    an array already (:func:`~scwork.sharding._split_kernels.slice_task_rows`,
    ``order_by_job``): on the calling thread, after the kernels before it have evicted the
    caches, a dozen numpy calls took 0.15 ms.
    """

    __slots__ = ("jobs", "rows", "job_of", "order", "starts")

    def __init__(self, jobs: list, rows: np.ndarray, job_of: np.ndarray, sized: np.ndarray, size_col: int):
        from scwork.sharding._split_kernels import order_by_job

        self.jobs, self.rows, self.job_of = jobs, rows, job_of
        self.order = np.empty(rows.shape[0], np.int64)
        starts = np.empty(len(jobs) + 1, np.int64)
        order_by_job(sized, size_col, job_of, self.order, starts)
        self.starts = starts.tolist()

    @classmethod
    def of_slices(cls, work, sizes) -> "_TaskTable | None":
        """The ``(job, s0, s1, g0, g1)`` items of a count or slices batch (:func:`_units`) as a table;
        None for items of another kind."""
        if isinstance(work, (_SliceCut, _GroupCut)):      # the cut's rows: one compiled call
            from scwork.sharding._split_kernels import slice_task_rows

            by_slices = isinstance(work, _SliceCut)
            jobs = list(work.job) if by_slices else [work.job]
            groups = np.array([len(j.groups) for j in jobs], np.int64) if by_slices else _NO_GROUPS
            rows = np.empty((work.rows.shape[0], 4), np.int64)
            job_of = np.empty(work.rows.shape[0], np.int64)
            slice_task_rows(work.rows, by_slices, groups, rows, job_of)
            return cls(jobs, rows, job_of, work.rows, 3)
        jobs, blocks = [], []
        for part in work.parts if isinstance(work, _Chain) else [work]:
            if isinstance(part, _GroupCut):
                from scwork.sharding._split_kernels import slice_task_rows

                block = np.empty((part.rows.shape[0], 4), np.int64)
                slice_task_rows(part.rows, False, _NO_GROUPS, block, np.empty(part.rows.shape[0], np.int64))
                jobs.append(part.job)
            elif isinstance(part, list) and part and all(len(item) == 5 for item in part):
                block = np.array([item[1:] for item in part], np.int64).reshape(-1, 4)
                jobs.append(part[0][0])
            else:
                return None
            blocks.append(block)
        return cls._of_blocks(jobs, blocks, sizes)

    @classmethod
    def of_naive(cls, parts: list, sizes) -> "_TaskTable | None":
        """The naive-view items ``(job, (g, p0, p1))`` of the finish batch, one part per job."""
        jobs, blocks = [], []
        for part in parts:
            if isinstance(part, _NaiveCut):
                jobs.append(part.job)
                blocks.append(part.rows)
            elif isinstance(part, list) and part and all(unit is not None and job is part[0][0] for job, unit in part):
                jobs.append(part[0][0])
                blocks.append(np.array([unit for _, unit in part], np.int64).reshape(-1, 3))
            elif len(part):
                return None
        return cls._of_blocks(jobs, blocks, sizes)

    @classmethod
    def _of_blocks(cls, jobs: list, blocks: list, sizes) -> "_TaskTable | None":
        """One job's rows per block, the blocks' rows' ``sizes`` in order."""
        if not blocks or len(set(map(id, jobs))) != len(jobs):
            return None
        job_of = np.repeat(np.arange(len(jobs), dtype=np.int64), [b.shape[0] for b in blocks])
        rows = np.ascontiguousarray(blocks[0]) if len(blocks) == 1 else np.concatenate(blocks)
        return cls(jobs, rows, job_of, np.ascontiguousarray(sizes, np.int64).reshape(-1, 1), 0)


_NO_GROUPS = np.zeros(1, np.int64)


def _sweeps(num_threads: int) -> bool:
    """Whether a call on ``num_threads`` threads runs its batches swept (:func:`_run_swept`)
    where their tasks allow it: on several threads, unless switched off."""
    return _SWEEP_BATCHES and num_threads > 1


def _task_table(work, sizes, num_threads: int) -> _TaskTable | None:
    """:meth:`_TaskTable.of_slices` of a count or slices batch's items where the batch runs swept; else None."""
    return _TaskTable.of_slices(work, sizes) if _sweeps(num_threads) else None


def _run_swept(name: str, table: _TaskTable, call, num_threads: int, overlap=None, firsts=()) -> int:
    """Run ``table``'s tasks on ``num_threads`` workers, each making one compiled call per job it helps with.

    ``call(job, first, last, counters, slot, worker)`` runs a queued kernel over
    ``table.order[first:last]`` (the job's tasks, largest first), taking tasks from
    ``counters[slot]``, and returns how many of them failed. Worker ``w`` starts at job
    ``w * jobs // num_threads`` and goes round the jobs once, calling where tasks are
    left: a job's tasks go to the workers that started on it and to those that reach it
    after theirs, so the workers rarely meet and each makes few calls (one per job it
    helps with: each call is one turn of the GIL, where one call per task made a turn per
    task). ``firsts``: callables (no arguments) the workers take before the sweep (the
    finish batch's checks and results). Returns the number of failed tasks.
    """
    jobs, starts = table.jobs, table.starts
    J = len(jobs)
    counters = np.zeros(8 * J, np.int64)          # each job's counter on a 64-byte line of its own

    def sweep(worker: int) -> int:
        failed = 0
        j = worker * J // num_threads
        for _ in range(J):
            first, last = starts[j], starts[j + 1]
            if first + counters[8 * j] < last:
                failed += call(jobs[j], first, last, counters, 8 * j, worker)
            j = j + 1 if j + 1 < J else 0
        return failed

    def item(k, worker: int) -> int:
        if k < len(firsts):
            firsts[k]()
            return 0
        return sweep(worker)

    items = list(range(len(firsts) + num_threads))
    return sum(_run_tasks(item, items, [1] * len(items), num_threads, name, overlap=overlap, order=items))


def _run_batch(name: str, fn, items, sizes, num_threads: int, table: _TaskTable | None, call=None, overlap=None,
               order=None, firsts=()) -> int:
    """A batch of tasks: ``fn(item, worker)`` per item (:func:`_run_tasks`) without a ``table``;
    with one, :func:`_run_swept` of ``call``. While profiling a swept batch still runs item by
    item, so that the projection sees every task, recorded as swept over the table's jobs
    (``queued``). Returns the number of failed tasks of a swept run (0 otherwise: one call per
    task records its own)."""
    if table is None or _profile.active() is not None:
        _run_tasks(fn, items, sizes, num_threads, name, overlap=overlap, order=order,
                   queued=0 if table is None else len(table.jobs))
        return 0
    return _run_swept(name, table, call, num_threads, overlap, firsts)


def _run_slices_batch(slices, kern: _Backend, work, sizes, batch: FeatureBatch, weights, has_w, num_threads: int,
                      scratch_of, overlap, table: _TaskTable | None) -> None:
    """The slices batch: ``slices(item, worker)`` per task; or, where every job is counted by
    groups (statistics: :func:`~scwork.sharding._split_kernels.count_group_tasks`) or written by
    groups (CSR without limits: ``write_group_tasks``), swept (:func:`_run_batch`). A task that
    failed (an out-of-vocabulary id, a zero divisor) runs again on its own afterwards for its
    error record, as a per-task run would have kept it: the call raises or starts over without
    those ids, so what it wrote again does not matter."""
    if table is not None and not all(j.by_group or j.split_csr for j in table.jobs):
        table = None
    rows, order = (table.rows, table.order) if table is not None else (None, None)
    task_failed = np.empty(0 if table is None else rows.shape[0], np.int64)
    ids, splits = batch._ids, batch._splits

    def call(j, first, last, counters, slot, worker) -> int:
        sc = scratch_of(worker)
        if j.by_group:
            return kern.count_group_tasks(ids, splits, weights, has_w, j.n, j.P, j.lbits, j.gptr, j.feat_rows,
                                          j.feat_k, j.g_vocab, j.g_shift, j.g_qbits, j.g_uloff, j.g_sloff, rows,
                                          order, first, last, counters, slot, sc["sk"], sc["ak"], sc["bk"],
                                          sc["hist"], j.pairs_g, j.distinct_g, j.ulist, j.ul_cnt, sc["oov"],
                                          task_failed)
        return kern.write_group_tasks(ids, splits, weights, has_w, j.combiner, j.n, j.P, j.lbits, j.gptr,
                                      j.feat_rows, j.feat_k, j.g_vocab, j.g_shift, j.g_qbits, j.g_rowoff, j.g_mode,
                                      j.g_uloff, j.g_sloff, rows, order, first, last, counters, slot, sc["sk"],
                                      sc["sg"], sc["ak"], sc["ag"], sc["bk"], sc["bg"], sc["hist"], j.offs,
                                      j.pad_lo, j.pad_hi, j.rowgain, j.emb, j.smp, j.gout, j.distinct_g, j.ulist,
                                      j.ul_cnt, sc["oov"], sc["bad"], task_failed)

    if _run_batch("slices", slices, work, sizes, num_threads, table, call, overlap):
        for i in np.flatnonzero(task_failed).tolist():
            j = table.jobs[int(table.job_of[i])]
            s0, s1, g0, g1 = rows[i].tolist()
            run = j.run_groups if j.by_group else j.run_write_groups
            j.task_done(run(kern, batch, weights, has_w, s0, s1, g0, g1, scratch_of(0)))


def _run_count_batch(kern: _Backend, batch: FeatureBatch, count_units, num_threads: int, overlap,
                     table: _TaskTable | None) -> None:
    """The count batch (:meth:`_StackJob.count_task` per task); with a task table, swept
    (:func:`_run_batch`) over :func:`~scwork.sharding._split_kernels.slice_pairs_tasks`."""
    def count(item, worker):
        item[0].count_task(kern, batch, *item[1:])

    def call(j, first, last, counters, slot, worker) -> int:
        kern.slice_pairs_tasks(batch._ids, batch._splits, j.n, j.P, j.gptr, j.feat_rows, j.g_vocab, j.g_shift,
                               table.rows, table.order, first, last, counters, slot, j.count_pairs)
        return 0

    _run_batch("count", count, *count_units, num_threads, table, call, overlap)


def _run_finish_batch(kern: _Backend, table: _TaskTable | None, finish: list, finish_sizes: list, order: list,
                      firsts: list | None, num_threads: int) -> None:
    """The finish batch (naive view, compactions, the checks-and-results parts ``firsts``, None
    for staged stacks), one call per task; or with the naive-view tasks' ``table``
    (:func:`_finish_list_steps`) and no staged stack, swept (:func:`_run_batch`): the parts
    first, then every job's naive-view tasks in
    :func:`~scwork.sharding._naive_kernels.naive_group_tasks` calls."""
    if firsts is None:                    # staged stacks: compactions in the batch, one call per task
        table = None

    def call(j, first, last, counters, slot, worker) -> int:
        kern.naive_group_tasks(j.ulist, j.list_starts(), j.ul_cnt, j.g_qbits, table.rows, table.order, first, last,
                               counters, slot, j.naive_g)
        return 0

    _run_batch("finish", _finish_task(kern), _Chain(finish), finish_sizes, num_threads, table, call, order=order,
               firsts=[unit for _, unit in firsts or ()])


def _naive_views(jobs) -> np.ndarray | None:
    """Every job's naive view after the naive-view tasks, ``(stacks, P)``; or None where each
    job's is in the caller's rows already (:meth:`_StackJob.naive_into`: a stack of several
    tables sums them into its row here)."""
    if not isinstance(jobs[0], _MergedJob) and all(j.naive_out is not None for j in jobs):
        for j in jobs:
            if len(j.groups) > 1:
                j.finish_naive()
        return None
    naive = [j.naive_rows() for j in jobs]
    return naive[0] if len(naive) == 1 else np.concatenate(naive)


class _ResultParts:
    """The finish batch's checks and results (:func:`_execute`), in parts of consecutive jobs.

    With CSR each stack is a job, and its checks, CSR buffers (``CsrBuffers``), drop
    records and statistics were one task: 0.5 ms at 26 stacks, the finish batch's
    longest at 64 threads. With ``parts_of`` threads (> 1) they run as parts of
    consecutive jobs (:func:`_result_parts`), each checking its stacks
    (``after_slices(results, first, False)``), beside one task that fills the
    statistics from every stack's counters (``fill_statistics``, from
    :meth:`_StackJob.statistics_row`: filling them part by part cost a dozen numpy calls
    a part). With one, a single part does it all (``after_slices(results, 0, True)``).
    Errors are kept and :meth:`results` raises the one a single task over every stack
    in order raises first: the errors of a call come in phases (limits of every stack,
    then zero divisors, then the caller's checks, then the fill), stacks in order within
    a phase, so the least (phase, part).
    """

    def __init__(self, jobs, batch, G, S, config, want_csr, after_slices, fill_statistics, parts_of: int):
        self.jobs, self.batch, self.G, self.S, self.config, self.want_csr = jobs, batch, G, S, config, want_csr
        self.after_slices, self.fill_statistics = after_slices, fill_statistics
        self.cuts = _result_parts(len(jobs), parts_of)
        self.split = parts_of > 1
        self.done: list = [None] * (len(self.cuts) - 1)
        self.failed: list = []          # (phase, part, error), appended by the tasks (one step under the GIL)

    def items(self) -> list:
        """The finish batch's items of the parts (and the fill task first, when split)."""
        firsts = [(None, functools.partial(self.run, k)) for k in range(len(self.done))]
        if self.split:
            firsts.insert(0, (None, self.fill))
        return firsts

    def fill(self) -> None:
        """Task: the statistics of every stack, from the jobs' counters."""
        try:
            self.fill_statistics([j.statistics_row() for j in self.jobs])
        except Exception as err:  # noqa: BLE001 - raised by results(), after every check's
            self.failed.append((3, 0, err))

    def run(self, k: int) -> None:
        """Task: part ``k``'s checks and results. It is Python holding the GIL, which the other
        workers need between their tasks: it lets go of it between its steps."""
        a, b = self.cuts[k], self.cuts[k + 1]
        mine = self.jobs[a:b]
        phase = [0]
        try:
            for j in mine:
                j.finish_sums()
            let_workers_run()
            results = _check_jobs(mine, self.batch, self.G, self.S, self.config, self.want_csr, phase)
            if self.after_slices is not None:
                let_workers_run()
                phase[:] = [2]
                self.after_slices(results, a, not self.split)
        except Exception as err:  # noqa: BLE001 - raised by results(), in call order
            self.failed.append((phase[0], k, err))
            return
        self.done[k] = results

    def results(self) -> list[dict]:
        """Every part's results in job order, after the batch; or the call's first error raised."""
        if self.failed:
            raise min(self.failed, key=lambda f: f[:2])[2]
        return self.done[0] if len(self.done) == 1 else [res for part in self.done for res in part]


# jobs per part of the finish batch's checks-and-results tasks (each part also fills its rows
# of the statistics, a dozen numpy calls: parts of fewer jobs would cost more than they save)
_JOBS_PER_RESULT_PART = 3


def _result_parts(num_jobs: int, num_threads: int) -> list[int]:
    """Cuts ``[0, ..., num_jobs]`` of the checks-and-results parts: one part with one thread, else
    up to ``num_threads`` parts of at least :data:`_JOBS_PER_RESULT_PART` consecutive jobs, sizes
    as even as the cut allows."""
    parts = max(1, min(num_threads, num_jobs // _JOBS_PER_RESULT_PART))
    return [num_jobs * k // parts for k in range(parts + 1)]


def _scratch_needs(jobs) -> dict[str, int]:
    """The longest of each per-worker scratch array over ``jobs``' :meth:`_StackJob.scratch_needs` (at least 1)."""
    if len(jobs) == 1:
        return {name: max(1, length) for name, length in jobs[0].scratch_needs().items()}
    # (the maxima of its terms over the jobs: a dict per job was most of this step)
    gmax = max(max(1, j.group_slice_max) for j in jobs)
    sk = max(max(1, j.stack_slice_max if j.keep_all else j.group_slice_max) for j in jobs)
    gains = [j for j in jobs if j.any_gains]
    sg = max((max(1, j.stack_slice_max if j.keep_all else j.group_slice_max) for j in gains), default=1)
    ag = max((max(1, j.group_slice_max) for j in gains), default=1)
    groups = max(1, max(len(j.groups) for j in jobs))
    return {"sk": sk, "sg": sg, "ak": gmax, "bk": gmax, "ag": ag, "bg": ag, "hist": _HIST_SIZE, "gm": groups,
            "bounds": max(1, max(len(j.groups) * (j.P + 1) for j in jobs)), "oov": groups, "bad": groups}


def _finish_list_steps(jobs, target: float, finish: list, finish_sizes: list, largest: list, order: list,
                       tables: dict | None = None, num_threads: int = 1) -> list:
    """Steps that append the finish batch's tasks (naive view, compaction) to ``finish``, as
    sequences of items (read as one by :class:`_Chain`), and their sizes to ``finish_sizes``:
    one per job, so that the calling thread, making them while the slices run, lets a
    worker take the GIL between two. ``largest[0]`` becomes the largest size (from 0),
    ``order`` the items' dispatch order (:func:`~scwork.sharding._profile.dispatch_order`).
    With ``tables`` and several threads (the batch runs swept), a last step puts the
    naive-view tasks' table in ``tables["naive_table"]`` (:meth:`_TaskTable.of_naive`)."""
    def naive_list(j):
        def make():
            items, item_sizes = j.naive_items(target)
            finish.append(items)
            finish_sizes.extend(item_sizes)
            largest[0] = max(largest[0], max(item_sizes, default=0))
        return make

    def staged_list():
        staged = [j for j in jobs if j.staged]
        finish.append([(j, None) for j in staged])
        finish_sizes.extend(4 * j.num_ids for j in staged)
        largest[0] = max([largest[0], *(4 * j.num_ids for j in staged)])
        # and their dispatch order (the dispatcher's serial work, done here instead)
        order[:] = dispatch_order(finish_sizes)

    def naive_table():
        if not any(j.staged for j in jobs):          # (with staged stacks the batch runs one call per task)
            naive = finish[:len(jobs)]
            tables["naive_table"] = _TaskTable.of_naive(naive, finish_sizes[:sum(len(part) for part in naive)])

    swept = tables is not None and _sweeps(num_threads)
    return [naive_list(j) for j in jobs] + [staged_list] + ([naive_table] if swept else [])


def _jobs_of(plan: StackingPlan, batch: FeatureBatch, G: int, S: int, want_csr: bool, config: SparsecoreConfig,
             num_threads: int, counts: np.ndarray | None = None, before_counters=None,
             defer: bool = False) -> list[_StackJob]:
    """The jobs :func:`_execute` runs: statistics-only stacks merged, tables and zeroed counters made.

    ``before_counters``, ``defer``: as :func:`_make_jobs`' (the raw ids of each of ``plan.stacks``).
    """
    _, has_w = _weights_of(batch)
    if counts is None:
        counts = _slice_counts(batch, G * S)
    count_first = num_threads >= _COUNT_FIRST_THREADS
    if not want_csr:
        stacks = plan.stacks
        plan = plan_derived("merged", stacks, (bool(config.allow_id_dropping), batch.batch_size),
                            lambda: _OneStack(tuple(_merge_statistics_stacks(stacks, config, batch.batch_size))))
    return _make_jobs(plan, batch, G, S, want_csr, config, has_w, counts, count_first, before_counters, defer)


class _LazyRows:
    """Tasks of one job as rows of an int array, each turned into its task tuple only when
    taken (``__getitem__``): the calling thread builds no list of hundreds of tuples.

    The rows become Python lists once, when the first task is taken (one ``tolist`` of
    the whole array, by that worker): a numpy row and its ``tolist`` per task were two
    numpy calls in every task's GIL-held Python, made after the kernels before it had
    evicted the caches (``benchmarks/bench_cold_python.py``).
    """

    __slots__ = ("job", "rows", "_listed")

    def __init__(self, job, rows: np.ndarray):
        self.job, self.rows = job, rows
        self._listed = None

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def _row(self, i: int) -> list:
        listed = self._listed
        if listed is None:               # two workers may both make it: the same list, either kept
            listed = self._listed = self.rows.tolist()
        return listed[i]


class _GroupCut(_LazyRows):
    """Rows ``(slice, g0, g1, size)`` of :func:`~scwork.sharding._split_kernels.cut_groups`:
    item ``i`` is the task ``(job, slice, slice + 1, g0, g1)``."""

    __slots__ = ()

    def __getitem__(self, i: int) -> tuple:
        sl, g0, g1, _ = self._row(i)
        return self.job, sl, sl + 1, g0, g1


class _NaiveCut(_LazyRows):
    """The naive-view tasks, rows ``(g, p0, p1)``: item ``i`` is ``(job, (g, p0, p1))``."""

    __slots__ = ()

    def __getitem__(self, i: int) -> tuple:
        return self.job, tuple(self._row(i))


class _Chain:
    """Item sequences read as one (each job's tasks of a batch; the finish batch's naive-view
    tasks, compactions and checks): item ``i`` is found by a bisection over the parts' ends."""

    __slots__ = ("parts", "ends")

    def __init__(self, parts: list):
        self.parts = [p for p in parts if len(p)]
        self.ends = list(itertools.accumulate(len(p) for p in self.parts))

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def __getitem__(self, i: int):
        k = bisect.bisect_right(self.ends, i)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.parts[k][i - (self.ends[k - 1] if k else 0)]

    def __iter__(self):
        return (item for part in self.parts for item in part)


class _SliceCut(_LazyRows):
    """Rows ``(job, s0, s1, size)`` of :func:`~scwork.sharding._split_kernels.cut_slices` over a
    list of jobs (``self.job``): item ``i`` is the task ``(jobs[job], s0, s1, 0, groups)``."""

    __slots__ = ()

    def __getitem__(self, i: int) -> tuple:
        j, s0, s1, _ = self._row(i)
        job = self.job[j]
        return job, s0, s1, 0, len(job.groups)


def _units(jobs, target: float, by_group) -> tuple[Any, list[int]]:
    """``(job, s0, s1, g0, g1)`` tasks of every job (a sequence) and their sizes (raw ids)."""
    if len(jobs) == 1:                    # one job (every statistics call on one P): its own items
        return jobs[0].tasks_of(target, by_group(jobs[0]))
    if all(len(j.groups) == 1 for j in jobs) and len({j.nsl for j in jobs}) == 1:
        # one table per job (preprocess without stacking: a job per stack): every job is cut
        # by slices alone (_StackJob.ranges), all in one compiled call instead of a few list
        # operations per job; a worker makes its task's tuple when it takes it
        from scwork.sharding._split_kernels import cut_slices

        counts = np.array([j.slice_list for j in jobs], np.int64).reshape(len(jobs), jobs[0].nsl)
        cut = np.empty((counts.size + len(jobs), 4), np.int64)
        k = cut_slices(counts, float(target), cut)
        return _SliceCut(jobs, cut[:k]), cut[:k, 3]
    # each job's items as they are (a lazy cut stays lazy: a list of them made here was
    # some 400 tuples at 4 stacks of 8 tables, 0.3 ms of a call's serial time at 64 threads)
    parts, size_parts = [], []
    for j in jobs:
        items, item_sizes = j.tasks_of(target, by_group(j))
        parts.append(items)
        size_parts.append(np.asarray(item_sizes, np.int64))
    return _Chain(parts), np.concatenate(size_parts) if size_parts else np.zeros(0, np.int64)


def _finish_task(kern: _Backend):
    def run(item, worker):
        j, unit = item
        if j is None:
            unit()
        elif unit is None:
            j.compact(kern)
        else:
            j.naive_task(kern, *unit)
    return run


def _check_jobs(jobs, batch, G, S, config, want_csr, phase: list | None = None):
    """Limit and gain errors, in the order compute_stats meets them; then the results.

    ``phase``: set to ``[1]`` once the limits passed (an error raised after is a gain's
    zero divisor), for a caller that orders the errors of several parts of a call.
    """
    B = batch.batch_size
    # errors in the order compute_stats (which computes no gains) meets them:
    # out-of-vocabulary ids (checked by the caller), then the limits, then the gains' zero divisors
    if want_csr:
        for j in jobs:
            _check_limits(j.stack, {"pairs": j.pairs, "distinct": j.distinct, "kept": j.kept}, G, S, config, B)
    if phase is not None:
        phase[:] = [1]
    for j in jobs:
        err = j.first_error()
        if err is not None:
            kind, pos = err
            if kind == "oov":
                raise _Oov(pos)
            f, b = divmod(pos, B)
            # the float64 analysis says why (underflowing squares, cancelling weights)
            # rather than the bare "sum to 0" the float32 kernel saw
            _check_gains(batch, batch.feature_names[f], j.stack.combiner)
            raise InputError(
                f"feature {batch.feature_names[f]!r}, sample {b}: the weights sum to 0, so the "
                f"{j.stack.combiner!r} combiner divides by 0 (gains would be NaN or infinite); give "
                "that sample non-zero weights or use combiner='sum'"
            )
    return [res for j in jobs for res in j.results(naive=False)]


def _run(*args, **kwargs):
    """:func:`_run_call`, recorded as one call while profiling (:mod:`scwork.sharding._profile`)."""
    if not _profile.recording():          # not profiling, or nested in a recorded call
        return _run_call(*args, **kwargs)
    with _profile.call():
        return _run_call(*args, **kwargs)


def _run_call(batch, features, topology, stacking, config, on_out_of_vocabulary, stack_limits, rotation,
              activation_mem_bytes_limit, num_threads, backend, want_csr, dataset=True):
    """One engine call: ``(plan, statistics, per-stack results, any id dropped)``.

    The statistics are a Dataset, or with ``dataset=False`` its parts (variables,
    coordinates, attributes: :func:`~scwork.sharding.results._stats_parts`). The
    per-stack results are those of :func:`_check_jobs` with CSR; a statistics-only
    call's list is empty (they are in the statistics; the next call frees them).
    "Any id dropped": whether ``dropped_ids`` has a non-zero entry.
    """
    return _complete_call(_prepare_call(batch, features, topology, stacking, config, on_out_of_vocabulary,
                                        stack_limits, rotation, activation_mem_bytes_limit, num_threads, backend,
                                        want_csr), dataset)


def _plan_of(features: tuple, topology, stacking, batch_size: int, rotation, activation_mem_bytes_limit, config,
             stack_limits) -> StackingPlan:
    """:func:`plan_stacking` for a call, the last call's plan when its arguments are the same objects.

    ``features`` is the tuple :func:`_check_inputs` keeps, so the calls of a path built
    on the engine pass the same objects each time; comparing them by identity costs
    less than building and hashing the plan cache's key (the topology's and config's
    dataclass hashes, twice).
    """
    last = _LAST_PLAN[0]          # one read: another thread may replace it meanwhile
    args = (features, topology, stacking, config)
    if (stack_limits is None and last is not None and all(a is b for a, b in zip(args, last[0]))
            and last[1] == (batch_size, rotation, activation_mem_bytes_limit)
            and last[2] == (type(batch_size), type(rotation), type(activation_mem_bytes_limit))):
        return last[3]
    plan = plan_stacking(features, topology, stacking, batch_size=batch_size, rotation=rotation,
                         activation_mem_bytes_limit=activation_mem_bytes_limit, config=config,
                         stack_limits=stack_limits)
    if stack_limits is None:
        scalars = (batch_size, rotation, activation_mem_bytes_limit)
        _LAST_PLAN[0] = (args, scalars, tuple(map(type, scalars)), plan)
    return plan


# [(the arguments compared by identity, the numbers, their types, plan)] of the last call
# without stack_limits (the arguments are held, so their ids stay theirs)
_LAST_PLAN: list = [None]


@dataclass
class _PreparedCall:
    """An engine call up to its first task: inputs checked, plan made, jobs built (:func:`_prepare_call`)."""

    batch: FeatureBatch
    topology: Topology
    config: SparsecoreConfig
    on_out_of_vocabulary: str
    plan: StackingPlan
    kern: _Backend
    num_threads: int
    want_csr: bool
    slice_counts: np.ndarray
    jobs: list


def _prepare_call(batch, features, topology, stacking, config, on_out_of_vocabulary, stack_limits, rotation,
                  activation_mem_bytes_limit, num_threads, backend, want_csr) -> _PreparedCall:
    """The part of an engine call before its tasks: checks, plan, scratch estimate, jobs.

    It depends on the call's arguments alone, so ``collect_stats`` prepares its next
    step while the worker threads run this one's slices (:func:`_complete_call`).
    """
    features = _check_inputs(batch, features, topology, config, on_out_of_vocabulary)
    num_threads = resolve_num_threads(num_threads)
    G, S = topology.num_devices, topology.sparsecores_per_device
    if stack_limits is not None and not isinstance(stack_limits, Mapping):
        raise ConfigError(f"stack_limits must be a dict stack name -> (max_ids_per_partition, "
                          f"max_unique_ids_per_partition), got {type(stack_limits).__name__} {stack_limits!r}"[:300])
    plan = _plan_of(features, topology, stacking, batch.batch_size, rotation, activation_mem_bytes_limit, config,
                    stack_limits)
    kern = _backend(backend)
    widest = plan_derived("widest", plan.stacks, (), lambda: max((len(st.features) for st in plan.stacks), default=0))
    if widest * batch.batch_size > 2**31 - 1:         # (one multiplication per call: the plan's widest stack)
        for st in plan.stacks:
            if len(st.features) * batch.batch_size > 2**31 - 1:
                raise InputError(f"stack {st.name!r}: {len(st.features)} features x {batch.batch_size} samples "
                                 "exceed 2**31 - 1 rows (sample ids are int32); use a smaller batch or split the "
                                 "stack")
    # raw ids of every feature in every slice: the scratch estimate's and the jobs' (the
    # retry without out-of-vocabulary ids counts again)
    slice_counts = _slice_counts(batch, G * S)

    def check_scratch(stack_counts, stack_sums=None):
        # between the jobs' counts and their counters: from the counts the jobs make anyway
        _check_scratch(plan, batch, G, S, want_csr, num_threads, slice_counts, stack_counts, stack_sums)

    jobs = _jobs_of(plan, batch, G, S, want_csr, config, num_threads, slice_counts, check_scratch, defer=True)
    return _PreparedCall(batch, topology, config, on_out_of_vocabulary, plan, kern, num_threads, want_csr,
                         slice_counts, jobs)


def _complete_call(call: _PreparedCall, dataset: bool = True, overlap=None):
    """Run a prepared call: ``(plan, statistics, per-stack results, any id dropped)`` as :func:`_run_call`.

    ``overlap``: more serial work (a callable or a list of them) for the calling
    thread while the slices run (``collect_stats``: the next step's
    :func:`_prepare_call`); it must not depend on this call's results.
    """
    batch, topology, config, plan = call.batch, call.topology, call.config, call.plan
    on_out_of_vocabulary, kern, num_threads, want_csr = (call.on_out_of_vocabulary, call.kern, call.num_threads,
                                                          call.want_csr)
    G, S = topology.num_devices, topology.sparsecores_per_device
    slice_counts = call.slice_counts
    oov_counts = {st.name: 0 for st in plan.stacks}
    batch_used = batch
    built: list[_StatsBuilder] = []

    def prepare_arrays():
        # the statistics' arrays and Dataset, built while the slices run (they depend
        # on the plan and the out-of-vocabulary counts alone; filled below)
        built[:] = [_StatsBuilder(plan, topology, batch_used, oov_counts)]

    def prepare_dataset():
        if dataset:
            built[0].build_dataset()

    def place_naive():
        # each job writes its naive view into the statistics' array itself: no copy
        # after the last task (a statistics call's one job, every stack merged, all of
        # it; a preprocess call's job per stack its row). A retry has other jobs.
        jobs = call.jobs
        if batch_used is not batch:
            return
        rows = built[0].naive_unique
        if len(jobs) == 1 and isinstance(jobs[0], _MergedJob):
            jobs[0].naive_into(rows)
        elif len(jobs) == rows.shape[0] and not any(isinstance(j, _MergedJob) for j in jobs):
            for si, j in enumerate(jobs):
                j.naive_into(rows[si:si + 1])

    prepare = [prepare_arrays, place_naive, prepare_dataset, free_leftovers]
    if overlap is not None:
        prepare += list(overlap) if isinstance(overlap, (list, tuple)) else [overlap]

    # what the serial end of the call needs of the results, found by the checks' task:
    # the stacks that dropped ids past a static buffer (warned about), whether any id was dropped
    found = {"static": [], "dropped": False}

    def after_slices(results, first=0, fill=True):
        # checks and statistics (all but the naive view) of the stacks first, first + 1, ...
        # (with CSR the call's stacks come in parts, each a task beside the naive view's, and
        # fill_statistics fills the statistics of all, in a task of its own)
        end = first + len(results)
        if not want_csr:
            for st, res in zip(plan.stacks[first:end], results):
                _check_limits(st, res, G, S, config, batch.batch_size)
        else:
            # last, so that preprocess raises what compute_stats raises first (the kernels'
            # float32 gains of a rejected sample are never returned)
            _check_gain_inputs(batch_used, plan, first, end)
        if fill:
            let_workers_run()
            fill_statistics(results, first)

    def fill_statistics(rows, first=0):
        builder = built[0]
        builder.fill(rows, naive=False, first=first)
        end = first + len(rows)
        found["static"] = [i for i, res in enumerate(rows, start=first) if res["static_dropped"]]
        found["dropped"] = bool(np.count_nonzero(builder.dropped[first:end]))
        if not want_csr:
            # a statistics call's per-stack results are in the statistics now and nobody
            # reads them after: freed by the next call while its slices run (not here: this
            # task is the finish batch's longest at 64 threads; not at the end of the call)
            keep_until_next_call(rows)

    for attempt in range(2):
        try:
            first = batch_used is batch
            results, naive = _execute(plan, batch_used, G, S, kern, config, want_csr, num_threads, prepare,
                                      after_slices, slice_counts if first else None, call.jobs if first else None,
                                      fill_statistics)
            break
        except _Oov as err:
            if on_out_of_vocabulary == "error" or attempt == 1:
                _raise_oov(batch_used, plan, err.position)
            # the caller's overlap ran with the first attempt's slices: not again
            prepare = prepare[:4]
            masks = _oov_masks(batch, plan)
            for st in plan.stacks:
                oov_counts[st.name] = int(sum(masks[f.name].sum() for f in st.features))
            batch_used = batch._without(masks)
    (stats_builder,) = built
    if naive is not None:
        stats_builder.fill_naive(naive)
    parts = stats_builder.parts
    stats = stats_builder.dataset if dataset else parts
    for i in sorted(found["static"]):
        st = plan.stacks[i]
        # The library drops these with a log line whatever allow_id_dropping says;
        # scwork does the same, counts them, and says so.
        warnings.warn(StaticBufferWarning(
            f"stack {st.name!r}: {int(stats_builder.static_dropped[i])} ids did not fit the static CSR buffer of "
            f"{st.suggested_coo_buffer_size_per_device} entries per device "
            f"(suggested_coo_buffer_size_per_device) and were dropped; the batch needs "
            f"{int(parts[0]['required_buffer_size_per_device'][1][i].max())} entries on its "
            f"fullest device: raise the suggestion or leave it unset"), stacklevel=3)
    return plan, stats, (results if want_csr else []), found["dropped"]


def _statistics_parts(batch: FeatureBatch, features: Any, topology: Topology, stacking: Any,
                      config: SparsecoreConfig, on_out_of_vocabulary: str, num_threads: int | None, backend: str):
    """:func:`compute_stats` as ``(variables, coordinates Dataset, attributes)``, no Dataset built.

    For ``collect_stats``, which stacks the variables of its steps into one Dataset
    (a Dataset per step was a third of its serial time).
    """
    _, parts, _, _ = _run(batch, features, topology, stacking, config, on_out_of_vocabulary, None, None,
                          DEFAULT_ACTIVATION_MEM_BYTES_LIMIT, num_threads, backend, want_csr=False, dataset=False)
    return parts


def _prepare_statistics(batch: FeatureBatch, features: Any, topology: Topology, stacking: Any,
                        config: SparsecoreConfig, on_out_of_vocabulary: str, num_threads: int | None,
                        backend: str) -> _PreparedCall:
    """:func:`_statistics_parts` up to its first task (:func:`_prepare_call`)."""
    return _prepare_call(batch, features, topology, stacking, config, on_out_of_vocabulary, None, None,
                         DEFAULT_ACTIVATION_MEM_BYTES_LIMIT, num_threads, backend, False)


def _statistics_of_prepared(call: _PreparedCall, overlap=None):
    """The rest of :func:`_statistics_parts` for a call of :func:`_prepare_statistics`.

    ``overlap``: serial work for the calling thread while the slices run (the next
    step's preparation), independent of this call's results.
    """
    if not _profile.recording():
        return _complete_call(call, False, overlap)[1]
    with _profile.call():
        _, parts, _, _ = _complete_call(call, False, overlap)
    return parts


def compute_stats(batch: FeatureBatch, features: Any, topology: Topology, stacking: Any = "auto",
                  config: SparsecoreConfig | None = None, on_out_of_vocabulary: str = "error", *,
                  stack_limits: Mapping[str, Any] | None = None, rotation: int | None = None,
                  activation_mem_bytes_limit: int = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
                  num_threads: int | None = None, backend: str = "numba"):
    """Per-partition statistics of a batch, without building the CSR buffers.

    Parameters
    ----------
    batch : FeatureBatch
        The ids; its batch size must be a multiple of ``G * S``.
    features : sequence or mapping of FeatureSpec
        One per feature of ``batch``.
    topology : scwork.Topology
        ``G`` devices x ``S`` SparseCores (any counts, not only powers of two).
    stacking : "auto", None, list of table groups, or StackingPlan
        See :func:`~scwork.sharding.plan_stacking`. Default ``"auto"``.
    config : SparsecoreConfig, optional
        Flags (limits, dropping). Default ``SparsecoreConfig()``.
    on_out_of_vocabulary : {"error", "drop"}
        Ids ``>= vocab_size``: raise :class:`~scwork.errors.OutOfVocabularyError`
        (default), or drop them before anything else (they count in no mean/sqrtn
        divisor) and count them in ``out_of_vocabulary_ids``.
    stack_limits : dict, optional
        ``{stack: (max_ids_per_partition, max_unique_ids_per_partition)}`` overrides.
    rotation : int, optional
        Shard rotation step of stacked tables (default ``S``).
    activation_mem_bytes_limit : int
        Budget of one automatic stack (default 2 MiB).
    num_threads : int or None
        Worker threads: every stack's (device, source SC) slices are split into
        ranges run in parallel (numba kernels release the GIL). The results do not
        depend on it. Default None: every available core, as jax-tpu-embedding's
        thread pool; 1 runs on the calling thread only.
    backend : {"numba", "numpy"}
        ``"numpy"`` runs the slow reference kernels (for checks and benchmarks).

    Returns
    -------
    xarray.Dataset
        Dims ``stack, device, sc, partition``. Variables: ``ids``, ``unique_ids``
        (stack, device, sc, partition); ``max_ids_per_partition``,
        ``max_unique_ids_per_partition`` (stack, device, partition), max over sc;
        ``required_buffer_size_per_sc`` (stack, device, sc); ``input_ids`` (raw ids
        per slice); ``kept_ids`` (after the prefix cut); ``dropped_ids`` and
        ``out_of_vocabulary_ids`` (stack); ``required_buffer_size_per_device`` and
        ``samples_per_device`` (the ``max_ids_per_chip_per_sample`` check);
        the configured limits (-1: none); the naive whole-batch view
        ``naive_ids_per_partition`` and ``naive_unique_ids_per_partition``
        (stack, partition). Statistics are observed before any drop.

    Raises
    ------
    InputError
        Batch size not divisible by ``G * S`` (the message lists sizes that divide),
        features missing from the batch.
    OutOfVocabularyError
        An id ``>= vocab_size`` with ``on_out_of_vocabulary="error"``.
    LimitExceededError
        Observed above configured limits without ``allow_id_dropping``, or the
        ``max_ids_per_chip_per_sample`` check.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats
    >>> batch = FeatureBatch.from_dense({"a": [[1, 1, 2], [3, -1, -1], [2, 5, -1], [0, 0, 0]]})
    >>> ds = compute_stats(batch, [FeatureSpec("a", TableSpec("t", 8, 4))], scwork.Topology(2, 1))
    >>> ds["ids"].sel(stack="t").values[:, 0, :].tolist()    # [device][partition]
    [[1, 2], [2, 1]]
    >>> ds["input_ids"].sel(stack="t").values.ravel().tolist()
    [4, 5]
    """
    config = _DEFAULT_CONFIG if config is None else config
    _, stats, _, _ = _run(batch, features, topology, stacking, config, on_out_of_vocabulary, stack_limits, rotation,
                          activation_mem_bytes_limit, num_threads, backend, want_csr=False)
    return stats


def _statistics_and_drops(batch: FeatureBatch, features: Any, topology: Topology, stacking: Any,
                          config: SparsecoreConfig, *, rotation: int | None = None, num_threads: int | None = None):
    """:func:`compute_stats` (``on_out_of_vocabulary="error"``, default memory limit) and whether
    any id was dropped (a non-zero ``dropped_ids``), found by the call's checks task.

    For :class:`~scwork.sharding.Scenario` (``over_limits``): reading the Dataset's
    variable after the call was a tenth of what the scenario adds to its serial time.
    """
    _, stats, _, dropped = _run(batch, features, topology, stacking, config, "error", None, rotation,
                                DEFAULT_ACTIVATION_MEM_BYTES_LIMIT, num_threads, "numba", want_csr=False)
    return stats, dropped


def preprocess(batch: FeatureBatch, features: Any, topology: Topology, stacking: Any = "auto",
               config: SparsecoreConfig | None = None, on_out_of_vocabulary: str = "error", *,
               stack_limits: Mapping[str, Any] | None = None, rotation: int | None = None,
               activation_mem_bytes_limit: int = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
               num_threads: int | None = None, backend: str = "numba") -> PreprocessResult:
    """Statistics, limit checks and CSR buffers of a batch, as jax-tpu-embedding computes them.

    Same arguments as :func:`compute_stats`. With ``config.allow_id_dropping`` the
    ids beyond the limits are dropped by the prefix cut of [jte] preprocess_sparse_dense_matmul_input and listed in
    :attr:`PreprocessResult.dropped`.

    Returns
    -------
    PreprocessResult
        ``.stats`` (as :func:`compute_stats`), ``.csr`` (per stack:
        :class:`CsrBuffers`), ``.plan``, ``.dropped``.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, preprocess
    >>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])})
    >>> res = preprocess(batch, [FeatureSpec("f", TableSpec("t", 16, 8, combiner="mean"))],
    ...                  scwork.Topology(1, 2))
    >>> buf = res.csr["t"]
    >>> buf.for_sc(0, 1)["row_pointers"].tolist()    # SC 1: nothing for p0, 3 ids for p1
    [0, 3, 8, 8, 8, 8, 8, 8]
    >>> ids, samples, gains = buf.partition(0, 1, 1)
    >>> ids.tolist(), samples.tolist(), [round(float(g), 3) for g in gains]   # local rows id // 2
    ([0, 1, 2], [0, 0, 0], [0.333, 0.333, 0.333])
    >>> int(buf.for_sc(0, 1)["embedding_ids"][3])    # padding
    2147483647
    """
    config = _DEFAULT_CONFIG if config is None else config
    plan, stats, results, _ = _run(batch, features, topology, stacking, config, on_out_of_vocabulary, stack_limits,
                                   rotation, activation_mem_bytes_limit, num_threads, backend, want_csr=True)
    csr = {st.name: r["csr"] for st, r in zip(plan.stacks, results)}
    drops = {st.name: r["drops"] for st, r in zip(plan.stacks, results)}
    return PreprocessResult(stats, csr, plan, drops)
