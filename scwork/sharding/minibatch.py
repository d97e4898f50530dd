"""Mini-batching: splitting a batch that overflows the per-partition limits.

As [jte] preprocess_sparse_dense_matmul_input does it.

When the ids one source SparseCore sends to one partition exceed
``max_ids_per_partition`` or ``max_unique_ids_per_partition``, the host can split
the batch into several *mini-batches* that each fit, at the cost of more device
steps (equivalent results). :func:`minibatch` plans that split in two ways.

Vocabulary dimension (``strategy="vocabulary"``, what jax-tpu-embedding does)
----------------------------------------------------------------------------
Reproduces ``SortAndGroupCooTensorsPerLocalDeviceImpl`` and
``ComputeMinibatchingSplit`` of jax-tpu-embedding
(``jax_tpu_embedding/sparsecore/lib/core/sort_and_group_coo_tensors_impl.h``,
``minibatching_splits_impl.h``, ``partitioned_coo_tensors.h``, ``coo_format.h``):

1. every id gets a bucket ``HighwayHash(col_id) & 63`` where ``col_id = p + P * (id
   // P + row_offset_in_shard)`` is the transformed column id (partition in the low
   part, local row above; ``CooFormat::GetColId``) and HighwayHash-64 runs over its
   4 little-endian bytes with the library's fixed key (``kHighwayHashKey``);
2. per (device, source SC) slice, per destination partition and per bucket, count
   ids (after per-sample dedup) and distinct ids;
3. for every (slice, partition) row of 64 bucket counts, walk the binary tree of
   buckets bottom-up (sibling subtrees of size 2, 4, ... 64): if the two siblings'
   counts add up above the limit, set the node's *split* bit and carry the larger
   of the two up, else carry their sum; done once with the ids and
   ``max_ids_per_partition``, once with the distinct ids and
   ``max_unique_ids_per_partition``;
4. OR the 63-bit split masks of every row of every slice and of *every stacked
   table of the batch* (``SyncMinibatchingSplit`` in ``input_preprocessing.cc``:
   the tables' masks are OR-ed, then all-reduced over devices and hosts): one
   split for the whole input, so every stack is cut at the same bucket boundaries
   and has the same number of mini-batches, and a stack that fits its limits is
   split too. ``split_scope="stack"`` instead cuts each stack by its own mask (a
   what-if on one stack);
5. a set bit cuts the bucket sequence at its node's middle; the mini-batches are
   the runs of consecutive buckets between cuts (``popcount(split) + 1`` of them,
   the same count for every stack with the default ``split_scope="batch"``);
6. a single bucket above a limit cannot be split: the reference aborts (or, with
   ``allow_id_dropping``, drops by the prefix cut inside each bucket's stream);
   scwork raises :class:`~scwork.errors.LimitExceededError` saying which bucket and
   what limit would be needed (or drops and counts, likewise per bucket).

How scwork cuts the work (none of it changes a count): the counts of step 2 come
from each table's keys sorted by transformed id, as the reference sorts a
partition's COO tensors. A task of slices builds their keys and sorts them by the
top bits of the id (partition first); a task of a range of those bins gathers the
range from every slice task, sorts it and counts it. A range holds every key of
each of its ids, so the whole-batch distinct ids add up over ranges; with a prefix
cut (``allow_id_dropping``) a range is whole partitions, its tables in stack order.

The reference first checks whether any stream overflows at all (pass 1) and only
then buckets (pass 2); the tree gives no split when nothing overflows (every
carried count is at most its subtree's total), so both give one mini-batch then.
The reference requires ``P`` to be a power of two and 64 buckets; scwork works for
any ``P`` and any power-of-two ``num_buckets`` (``col_id`` as above), and offers
``bucket_hash="identity"`` (``col_id & (num_buckets - 1)``, the hash the reference's
own tests use).

Sample dimension (``strategy="sample"``, on the roadmap of [sc-guide] §14)
-----------------------------------------------------------
Each (device, source SC) slice of ``n = B / (G * S)`` samples is cut greedily into
the fewest contiguous runs of samples whose per-partition ids and distinct ids fit
the limits (a sample goes to the current run if the run still fits with it).
Mini-batch ``m`` holds run ``m`` of every slice; the count of a stack is the
largest number of runs of any slice (all SparseCores loop the same number of
times). Each stack is planned alone (its own runs and count; there is no
batch-wide split). A sample that alone exceeds a limit cannot be split: error.

Examples
--------
>>> import scwork
>>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
>>> from scwork.sharding.minibatch import minibatch
>>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 6, 7], [0, 4, 8])})
>>> table = TableSpec("t", 64, 8, max_ids_per_partition=4, max_unique_ids_per_partition=4)
>>> plan = minibatch(batch, [FeatureSpec("f", table)], scwork.Topology(1, 1), stacking=None,
...                  bucket_hash="identity", num_buckets=8)
>>> int(plan.num_minibatches.sel(stack="t"))
2
>>> plan.assignment["minibatch_of_bucket"].sel(stack="t").values.tolist()
[0, 0, 0, 0, 1, 1, 1, 1]
>>> [sorted(b.ids("f").tolist()) for b in plan.batches()]
[[0, 1, 2, 3], [4, 5, 6, 7]]

A second table ``u`` that fits its limits is cut with ``t`` (one split for the
batch, as the library does); ``split_scope="stack"`` leaves it whole:

>>> u = TableSpec("u", 64, 8, max_ids_per_partition=64, max_unique_ids_per_partition=64)
>>> batch2 = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 6, 7], [0, 4, 8]),
...                                    "g": ([0, 5, 1, 6], [0, 2, 4])})
>>> features = [FeatureSpec("f", table), FeatureSpec("g", u)]
>>> both = minibatch(batch2, features, scwork.Topology(1, 1), stacking=None, bucket_hash="identity",
...                  num_buckets=8)
>>> both.num_minibatches.values.tolist(), both.minibatch_of("g").tolist()
([2, 2], [0, 1, 0, 1])
>>> alone = minibatch(batch2, features, scwork.Topology(1, 1), stacking=None, bucket_hash="identity",
...                   num_buckets=8, split_scope="stack")
>>> alone.num_minibatches.values.tolist(), alone.minibatch_of("g").tolist()
([2, 1], [0, 0, 0, 0])
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from scwork._rounding import round_up

from scwork.errors import ConfigError, LimitExceededError
from scwork.hardware.topology import Topology
from scwork.sharding import engine as _engine
from scwork.sharding import _profile
from scwork.sharding._scratch import _POOL, SCRATCH_LIMIT_ENV, _carve, scratch_limit_bytes
from scwork.sharding._threads import _TASKS_PER_THREAD, _run_tasks, resolve_num_threads
from scwork.sharding.batch import FeatureBatch
from scwork.sharding.column_id import column_id_of_id
from scwork.sharding.results import _dataset, cached_coords, stats_coords
from scwork.sharding.specs import SparsecoreConfig
from scwork.sharding.stacking import (
    DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
    StackingPlan,
    plan_stacking,
)

__all__ = [
    "minibatch",
    "MiniBatchPlan",
    "compute_minibatching_split",
    "split_to_minibatches",
    "split_positions",
    "bucket_of",
    "STRATEGIES",
    "SPLIT_SCOPES",
    "BUCKET_HASHES",
]

#: Mini-batching strategies of :func:`minibatch`.
STRATEGIES: tuple[str, ...] = ("vocabulary", "sample")
#: Scopes of the vocabulary split: ``"batch"`` (one split for every stack, as
#: jax-tpu-embedding) or ``"stack"`` (each stack cut by its own mask).
SPLIT_SCOPES: tuple[str, ...] = ("batch", "stack")
#: Bucket hashes: ``"highway"`` (jax-tpu-embedding's default) or ``"identity"``.
BUCKET_HASHES: tuple[str, ...] = ("highway", "identity")

_NO_LIMIT = 2**62
_INT64_MAX = 2**63 - 1


# --------------------------------------------------------------------------------------
# the split tree (minibatching_splits_impl.h)
# --------------------------------------------------------------------------------------
def _check_num_buckets(num_buckets: Any) -> int:
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)) or num_buckets < 1 \
            or num_buckets & (num_buckets - 1) or num_buckets > 64:
        raise ConfigError(f"num_buckets must be a power of two between 1 and 64 (the split mask has "
                          f"num_buckets - 1 <= 63 bits), got {num_buckets!r}; the reference uses 64")
    return int(num_buckets)


def _check_split(split: Any, nb: int) -> int:
    if isinstance(split, bool) or not isinstance(split, (int, np.integer)) or not 0 <= split < 1 << (nb - 1):
        raise ConfigError(f"split must be a mask of the {nb - 1} nodes of the tree of {nb} buckets: an int in "
                          f"0..2**{nb - 1} - 1, as compute_minibatching_split returns it; got {split!r}")
    return int(split)


def _count_rows(counts: Any) -> np.ndarray:
    """``counts`` as an int64 copy of shape (rows, num_buckets), checked."""
    v = np.asarray(counts)
    if v.ndim == 0 or v.dtype == np.bool_ or not (v.dtype.kind in "iu" or v.size == 0):
        raise ConfigError(f"counts must be an integer array of shape (..., num_buckets), got "
                          f"{'a scalar' if v.ndim == 0 else f'dtype {v.dtype}'}: {counts!r:.60}; pass whole counts "
                          "of ids per bucket")
    nb = _check_num_buckets(v.shape[-1])
    if v.size and (int(v.min()) < 0 or int(v.max()) > _INT64_MAX // nb):
        bad = int(v.min()) if int(v.min()) < 0 else int(v.max())
        raise ConfigError(f"counts must be in 0..{_INT64_MAX // nb} (int64 max // {nb} buckets, so that a "
                          f"subtree's sum fits in int64), got {bad}")
    return v.astype(np.int64).reshape(-1, nb)


def compute_minibatching_split(counts: Any, limit: int | None) -> int:
    """Split mask of the bucket tree (``ComputeMinibatchingSplit`` of jax-tpu-embedding).

    Parameters
    ----------
    counts : array_like of int, shape (..., num_buckets)
        Counts per bucket (ids or distinct ids) of one or more (slice, partition)
        streams; ``num_buckets`` a power of two. Each row gets its own tree; the
        masks are OR-ed (as the reference ORs them over streams). Integers from 0 to
        ``(2**63 - 1) // num_buckets`` (so that a subtree's sum fits in int64).
    limit : int or None
        The limit the merged counts must stay within (None: no limit, no split).

    Raises
    ------
    ConfigError
        Counts that are not integers (floats are not rounded) or out of range, a
        scalar, a last dimension that is not a power of two up to 64, a limit that
        is not a non-negative int.

    Returns
    -------
    int
        Bit ``k`` is set when tree node ``k`` is split. Nodes are numbered level by
        level from the leaves' parents: subtree size 2 gives nodes
        ``0 .. N/2 - 1`` (left to right), size 4 the next ``N/4``, ..., the root last.

    Examples
    --------
    The reference's own test cases (``minibatching_splits_test.cc``, 8 buckets):

    >>> bin(compute_minibatching_split([10, 20, 30, 40, 50, 60, 70, 80], 100))
    '0b1101100'
    >>> bin(compute_minibatching_split([50, 50, 20, 80, 10, 10, 70, 10], 100))
    '0b1010000'
    >>> compute_minibatching_split([10] * 8, 100), bin(compute_minibatching_split([100] * 8, 150))
    (0, '0b1111111')
    """
    v = _count_rows(counts)
    nb = v.shape[1]
    if limit is None:
        return 0
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0:
        raise ConfigError(f"limit must be None or an int >= 0 (ids per partition), got {limit!r}")
    split = 0
    index = 0
    size = 2
    while size <= nb:
        left = v[:, 0::size]
        right = v[:, size // 2::size]
        over = (left + right) > limit
        bits = np.flatnonzero(over.any(axis=0))
        for j in bits.tolist():
            split |= 1 << (index + j)
        v[:, 0::size] = np.where(over, np.maximum(left, right), left + right)
        index += nb // size
        size *= 2
    return split


def split_positions(split: int, num_buckets: int = 64) -> int:
    """Cut positions of a split mask: bit ``b`` set when buckets ``b`` and ``b + 1`` are apart.

    Same as ``GetSplitPos`` of jax-tpu-embedding.

    Examples
    --------
    >>> bin(split_positions(0b1100011, 8)), bin(split_positions(0b1010000, 8))
    ('0b101101', '0b1010')
    """
    nb = _check_num_buckets(num_buckets)
    split = _check_split(split, nb)
    pos = 0
    index = 0
    size = 2
    while size <= nb:
        for j in range(nb // size):
            if split >> (index + j) & 1:
                pos |= 1 << (j * size + size // 2 - 1)
        index += nb // size
        size *= 2
    return pos


def split_to_minibatches(split: int, num_buckets: int = 64) -> np.ndarray:
    """Mini-batch index of every bucket: runs of buckets between the cuts of ``split``.

    Examples
    --------
    >>> split_to_minibatches(0b1010000, 8).tolist()
    [0, 0, 1, 1, 2, 2, 2, 2]
    """
    nb = _check_num_buckets(num_buckets)
    pos = split_positions(split, nb)
    cuts = np.array([(pos >> b) & 1 for b in range(nb - 1)], np.int64)
    out = np.zeros(nb, np.int64)
    out[1:] = np.cumsum(cuts)
    return out


# --------------------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------------------
class MiniBatchPlan:
    """Result of :func:`minibatch`: how many mini-batches each stack needs and which ids go where.

    Attributes
    ----------
    strategy : str
        ``"vocabulary"`` or ``"sample"``.
    split_scope : str
        ``"batch"``: one vocabulary split for every stack (jax-tpu-embedding's
        mini-batching, every stack has the same count); ``"stack"``: each stack
        planned alone (always so for ``"sample"``).
    plan : StackingPlan
        The stacks (with their configured limits).
    topology : scwork.Topology
    batch : FeatureBatch
        The input batch (without out-of-vocabulary ids when those were dropped).
    num_minibatches : xarray.DataArray
        Dim ``stack``: mini-batches of each stack (1: no mini-batching); equal for
        every stack with ``split_scope="batch"``.
    stats : xarray.Dataset
        The engine's statistics (as :func:`~scwork.sharding.compute_stats`) of every
        mini-batch, with a leading dim ``minibatch`` (``0 .. max - 1``); stacks that
        need fewer mini-batches are zero there. Only the per-stack variables
        ``num_minibatches``, configured limits and ``samples_per_device`` lack it.
    assignment : xarray.Dataset
        Which buckets (vocabulary) or sample runs (sample) form which mini-batch;
        see :func:`minibatch`.
    """

    def __init__(self, *, strategy, plan, topology, batch, config, num_minibatches, stats, assignment,
                 bucket_hash, num_buckets, hash_key, run_of_sample=None, features=None, num_threads=None,
                 split_scope="stack"):
        self.strategy = strategy
        self.split_scope = split_scope
        self.plan = plan
        self.topology = topology
        self.batch = batch
        self.config = config
        self.num_minibatches = num_minibatches
        self.stats = stats
        self.assignment = assignment
        self.bucket_hash = bucket_hash
        self.num_buckets = num_buckets
        self._key = hash_key
        self._run_of_sample = run_of_sample or {}
        self._features = features
        self.num_threads = num_threads
        self._cache: dict[str, np.ndarray] = {}

    @property
    def max_minibatches(self) -> int:
        """Largest mini-batch count over stacks (device steps per batch)."""
        return int(self.num_minibatches.max())

    def minibatch_of(self, feature: str) -> np.ndarray:
        """Mini-batch index of every id of ``feature``, aligned with ``batch.ids(feature)``.

        Examples
        --------
        >>> import scwork
        >>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
        >>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 3, 2], [0, 2, 4, 6])})
        >>> t = TableSpec("t", 8, 8, max_unique_ids_per_partition=2)
        >>> mb = minibatch(batch, [FeatureSpec("f", t)], scwork.Topology(1, 1), stacking=None,
        ...                strategy="sample")
        >>> mb.minibatch_of("f").tolist()    # runs: sample 0 | samples 1, 2 (same two ids)
        [0, 0, 1, 1, 1, 1]
        """
        if feature in self._cache:
            return self._cache[feature]
        st = self.plan.stack_of_feature(feature)
        ids = self.batch.ids(feature)
        if self.strategy == "vocabulary":
            spec = next(f for f in st.features if f.name == feature)
            t = st.table(spec.table.name)
            buckets = bucket_of(ids, st.num_partitions, t.shard_rotation, t.row_offset_in_shard,
                                num_buckets=self.num_buckets, bucket_hash=self.bucket_hash)
            groups = self.assignment["minibatch_of_bucket"].sel(stack=st.name).values
            out = groups[buckets]
        else:
            runs = self._run_of_sample[st.name]
            out = np.repeat(runs, self.batch.lengths(feature))
        out = np.asarray(out, np.int64)
        self._cache[feature] = out
        return out

    def batch_for(self, m: int) -> FeatureBatch:
        """The ids of mini-batch ``m`` (every feature, same batch size and sample rows).

        Ids keep their sample (row) and order; features of stacks with fewer
        mini-batches have no ids there. Feeding each to
        :func:`~scwork.sharding.compute_stats` reproduces ``stats.isel(minibatch=m)``
        (with :attr:`plan` as ``stacking``).
        """
        M = self.max_minibatches
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 0 <= m < M:
            raise ConfigError(f"mini-batch index must be an int in 0..{M - 1}, got {m!r}")
        drop = {f: self.minibatch_of(f) != m for f in self.batch.feature_names}
        return self.batch._without(drop)

    def batches(self) -> Iterator[FeatureBatch]:
        """Yield :meth:`batch_for` ``(0), (1), ...`` (``max_minibatches`` batches)."""
        for m in range(self.max_minibatches):
            yield self.batch_for(m)

    def preprocess(self, m: int, **kwargs: Any):
        """:func:`~scwork.sharding.preprocess` of mini-batch ``m`` (its CSR buffers and stats).

        Uses :attr:`plan` (stacks and limits) and :attr:`config`; ``kwargs`` go to
        ``preprocess``. The layout is one engine CSR per mini-batch, not the
        reference's combined mini-batched buffer.
        """
        kwargs.setdefault("num_threads", self.num_threads)
        return _engine.preprocess(self.batch_for(m), self._features, self.topology, stacking=self.plan,
                                  config=kwargs.pop("config", self.config), **kwargs)

    def _repr_html_(self) -> str:
        from scwork._html import html_table

        rows = [(st.name, int(self.num_minibatches.sel(stack=st.name)), st.max_ids_per_partition,
                 st.max_unique_ids_per_partition) for st in self.plan.stacks]
        return html_table(rows, header=("stack", "mini-batches", "max_ids_per_partition",
                                        "max_unique_ids_per_partition"),
                          caption=f"MiniBatchPlan (strategy {self.strategy}, split per {self.split_scope}): "
                                  f"at most {self.max_minibatches} "
                                  f"mini-batches per step on {self.topology}")

    def __repr__(self) -> str:
        lines = [f"MiniBatchPlan(strategy={self.strategy!r}, split_scope={self.split_scope!r}, "
                 f"{len(self.plan.stacks)} stacks, "
                 f"max {self.max_minibatches} mini-batches)"]
        for st in self.plan.stacks:
            lines.append(f"  {st.name}: {int(self.num_minibatches.sel(stack=st.name))} mini-batches "
                         f"(max_ids_per_partition={st.max_ids_per_partition}, "
                         f"max_unique_ids_per_partition={st.max_unique_ids_per_partition})")
        return "\n".join(lines)


def bucket_of(ids: Any, num_partitions: int, col_shift: int = 0, row_offset_in_shard: int = 0, *,
              num_buckets: int = 64, bucket_hash: str = "highway") -> np.ndarray:
    """Mini-batching bucket of raw ids of one table (``CooFormat::GetBucketId``).

    ``col_id = (id + col_shift) % P + P * (id // P + row_offset_in_shard)``, bucket
    ``HighwayHash64(col_id as 4 little-endian bytes) & (num_buckets - 1)`` (or
    ``col_id & (num_buckets - 1)`` with ``bucket_hash="identity"``).

    Examples
    --------
    >>> bucket_of([0, 1, 2, 3, 9], 2, bucket_hash="identity", num_buckets=4).tolist()
    [0, 1, 2, 3, 1]
    >>> int(bucket_of([5], 4)[0]) == int(bucket_of([5], 4)[0]) < 64
    True
    """
    from scwork.sharding import _minibatch_kernels as K

    nb = _check_num_buckets(num_buckets)
    mode = _hash_mode(bucket_hash)
    arr = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).ravel())
    out = np.empty(arr.size, np.int64)
    K.ids_to_buckets(arr, int(num_partitions), int(col_shift), int(row_offset_in_shard), nb, mode,
                     K.HIGHWAY_KEY, out)
    return out


def _hash_mode(bucket_hash: Any) -> int:
    """The kernels' code for a bucket hash name (``K.HASH_HIGHWAY`` or ``K.HASH_IDENTITY``)."""
    from scwork.sharding import _minibatch_kernels as K   # (numba loads on first use, not at import)

    if bucket_hash == "highway":
        return K.HASH_HIGHWAY
    if bucket_hash == "identity":
        return K.HASH_IDENTITY
    raise ConfigError(f"bucket_hash must be one of {BUCKET_HASHES}, got {bucket_hash!r}")


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------
@_profile.one_call
def minibatch(batch: FeatureBatch, features: Any, topology: Topology, *, strategy: str = "vocabulary",
              stacking: Any = "auto", config: SparsecoreConfig | None = None,
              stack_limits: Mapping[str, Any] | None = None, num_buckets: int = 64,
              bucket_hash: str = "highway", rotation: int | None = None,
              activation_mem_bytes_limit: int = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
              on_out_of_vocabulary: str = "error", backend: str = "numba",
              num_threads: int | None = None, split_scope: str | None = None) -> MiniBatchPlan:
    """Plan the mini-batches that make every stack of a batch fit its limits.

    Parameters
    ----------
    batch, features, topology, stacking, config, stack_limits, rotation, activation_mem_bytes_limit, \
on_out_of_vocabulary
        As for :func:`~scwork.sharding.compute_stats`. The limits are each stack's
        configured ``max_ids_per_partition`` / ``max_unique_ids_per_partition``
        (TableSpec, ``config``'s table-level limits or ``stack_limits``); a stack
        without limits needs one mini-batch.
    strategy : {"vocabulary", "sample"}
        Split the ids by bucket (the reference's mini-batching) or the samples of
        every slice into runs (the roadmap's sample-dimension mini-batching).
    num_buckets : int
        Buckets of the vocabulary strategy, a power of two <= 64 (reference: 64).
    bucket_hash : {"highway", "identity"}
        Bucket of an id: ``HighwayHash(col_id) & (num_buckets - 1)`` (reference) or
        ``col_id & (num_buckets - 1)``.
    backend : {"numba", "numpy"}
        ``"numpy"``: the slow reference kernels (small inputs only).
    split_scope : {"batch", "stack"} or None
        Vocabulary strategy only. ``"batch"`` (the default, None, for
        ``"vocabulary"``): the split masks of every stack are OR-ed and every stack is
        cut by that one mask, as jax-tpu-embedding does, so all stacks have the same
        ``num_minibatches`` (``popcount(mask) + 1``) and a stack that fits its limits
        is split too. ``"stack"``: each stack is cut by its own mask (a what-if on one
        stack: a stack that fits stays one mini-batch). The sample strategy always
        plans each stack alone (None or ``"stack"``).
    num_threads : int or None
        Threads of the engine runs the plan makes (:meth:`MiniBatchPlan.preprocess`
        of each mini-batch); None (default): every available core, as for
        :func:`~scwork.sharding.compute_stats`. The bucket assignment runs on as
        many threads (results do not depend on it): with the vocabulary strategy a
        table's ids are cut into tasks of slices and then of ranges of ids (so that
        no task holds much more than ``1 / (8 * num_threads)`` of the ids, unless one
        id alone does), with the sample strategy one stack per task.

    Returns
    -------
    MiniBatchPlan
        ``.num_minibatches`` (dim ``stack``), ``.stats`` (engine statistics per
        mini-batch, leading dim ``minibatch``), ``.assignment``, ``.batches()``.

        ``assignment`` for ``"vocabulary"``: ``minibatch_of_bucket`` (stack,
        bucket), ``bucket_max_ids`` / ``bucket_max_unique_ids`` (stack, bucket: the
        largest count of the bucket over every (device, sc, partition) stream),
        ``bucket_ids`` (stack, bucket: deduplicated ids of the bucket in the whole
        batch), ``split_mask`` and ``split_positions`` (stack, int64 bit masks, see
        :func:`compute_minibatching_split`: the mask that cuts the stack, the same
        for every stack with ``split_scope="batch"``) and ``stack_split_mask``
        (stack: the mask the stack's own counts give; their OR is ``split_mask``
        under ``"batch"``); attrs ``split_scope``. For ``"sample"``: ``run_start`` and
        ``run_stop`` (stack, device, sc, minibatch: first and one-past-last local
        sample of each run, -1 where the slice has fewer runs), ``runs_per_sc``
        (stack, device, sc).

    Raises
    ------
    LimitExceededError
        A single bucket (vocabulary, without ``allow_id_dropping``) or a single
        sample (sample strategy) alone exceeds a limit: no split can fix it. The
        message names the bucket or sample, the stream and the limit it would need
        (attributes ``bucket`` / ``sample`` and ``required`` are set too).
    ConfigError, InputError, OutOfVocabularyError
        As :func:`~scwork.sharding.compute_stats`.

    Notes
    -----
    With ``allow_id_dropping`` (vocabulary), a bucket above a limit does not raise:
    the prefix cut runs inside each bucket's stream, as the reference does once
    buckets exist; ``stats`` ``kept_ids`` / ``dropped_ids`` report it, while
    :meth:`MiniBatchPlan.batches` yields every id of the mini-batch (before
    dropping). The sample strategy never drops: a sample above a limit raises even
    with ``allow_id_dropping``. The ``max_ids_per_chip_per_sample`` check is not
    applied. The reference's combined mini-batched CSR layout (buffers x 64) is not
    built: :meth:`MiniBatchPlan.preprocess` gives one engine CSR per mini-batch.

    Examples
    --------
    Two samples of four distinct ids on one SparseCore with a limit of 4: the
    sample strategy puts one sample in each mini-batch.

    >>> import scwork
    >>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
    >>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 4, 5, 6, 7], [0, 4, 8])})
    >>> t = TableSpec("t", 64, 8, max_ids_per_partition=4)
    >>> mb = minibatch(batch, [FeatureSpec("f", t)], scwork.Topology(1, 1), stacking=None, strategy="sample")
    >>> int(mb.num_minibatches.sel(stack="t")), mb.minibatch_of("f").tolist()
    (2, [0, 0, 0, 0, 1, 1, 1, 1])
    >>> mb.stats["ids"].sel(stack="t").values.ravel().tolist()      # per mini-batch
    [4, 4]
    """
    config = SparsecoreConfig() if config is None else config
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    split_scope = _check_split_scope(split_scope, strategy)
    nb = _check_num_buckets(num_buckets)
    mode = _hash_mode(bucket_hash)
    if backend not in ("numba", "numpy"):
        raise ConfigError(f"backend must be 'numba' or 'numpy', got {backend!r}")
    features = _engine._check_inputs(batch, features, topology, config, on_out_of_vocabulary)
    plan = plan_stacking(features, topology, stacking, batch_size=batch.batch_size, rotation=rotation,
                         activation_mem_bytes_limit=activation_mem_bytes_limit, config=config,
                         stack_limits=stack_limits)
    num_threads = resolve_num_threads(num_threads)
    if strategy != "vocabulary":
        batch, oov_counts = _handle_oov(batch, plan, on_out_of_vocabulary, num_threads)

    from scwork.sharding import _minibatch_kernels as K

    G, S = topology.num_devices, topology.sparsecores_per_device

    if strategy == "vocabulary":
        # A table's scan is cut in two batches of tasks finer than a table: its
        # slices (keys built, sorted by the top bits of u), then ranges of u (every
        # slice's keys of the range gathered, sorted, counted); then a task per stack
        # (its checks and split mask) and per stack again (its mini-batch sums).
        # The slice tasks meet every id: they look for ids out of their vocabulary
        # (a pass over the batch of its own before); only when one is found does the
        # batch get checked the slow way (error, or the ids dropped and scanned again).
        try:
            stats, assignment = _vocabulary(plan, topology, batch, nb, mode, config, backend, K, num_threads,
                                            split_scope, {st.name: 0 for st in plan.stacks})
        except _engine._Oov:
            batch, oov_counts = _handle_oov(batch, plan, on_out_of_vocabulary, num_threads)
            stats, assignment = _vocabulary(plan, topology, batch, nb, mode, config, backend, K, num_threads,
                                            split_scope, oov_counts)
        run_of_sample = {}
    else:
        # stacks are independent: one task each, on the engine's worker threads (the
        # kernels release the GIL); results and errors in stack order
        per_stack = _run_tasks(lambda st, worker: _sample_stack(st, batch, G, S, config, backend, K), plan.stacks,
                               [_stack_ids(st, batch) for st in plan.stacks], num_threads, "stacks")
        run_of_sample = {st.name: res.pop("run_of_sample") for st, res in zip(plan.stacks, per_stack)}
        Ms = [r["M"] for r in per_stack]
        arrays = _stats_arrays(max(Ms), len(per_stack), G, S, topology.num_partitions)
        for a, r in enumerate(per_stack):
            k = r["M"]
            for key in ("ids", "unique", "kept"):
                arrays[key][:k, a] = r[key].reshape(arrays[key][:k, a].shape)
            arrays["raw"][:k, a] = r["raw"].reshape(k, G, S)
            arrays["naive_unique"][:k, a] = r["naive_unique"]
            arrays["dropped"][:k, a] = r["dropped"]
            _fill_derived(arrays, a)
        stats = _stats_dataset(plan, topology, batch, arrays, Ms, oov_counts, strategy, split_scope)
        assignment = _assignment_dataset(plan, topology, per_stack, strategy, nb, batch.batch_size, split_scope)
    return MiniBatchPlan(strategy=strategy, plan=plan, topology=topology, batch=batch, config=config,
                         num_minibatches=stats["num_minibatches"], stats=stats, assignment=assignment,
                         bucket_hash=bucket_hash, num_buckets=nb, hash_key=K.HIGHWAY_KEY,
                         run_of_sample=run_of_sample, features=features, num_threads=num_threads,
                         split_scope=split_scope)


def _check_split_scope(split_scope: Any, strategy: str) -> str:
    if split_scope is None:
        return "batch" if strategy == "vocabulary" else "stack"
    if not isinstance(split_scope, str) or split_scope not in SPLIT_SCOPES:
        raise ConfigError(f"split_scope must be one of {SPLIT_SCOPES} (or None: 'batch' for the vocabulary "
                          f"strategy), got {split_scope!r}")
    if strategy == "sample" and split_scope != "stack":
        raise ConfigError("split_scope='batch' needs strategy='vocabulary': the sample strategy cuts each stack's "
                          "samples into its own runs; pass split_scope='stack' or None with strategy='sample'")
    return split_scope


def _stack_ids(st, batch: FeatureBatch) -> int:
    """Raw ids of a stack (the size of its task)."""
    return int(sum(batch._splits[batch._feature_index(f.name), -1] - batch._splits[batch._feature_index(f.name), 0]
                   for f in st.features))


def _has_cut(st, config) -> bool:
    """Whether the vocabulary scan applies a prefix cut (its counts then depend on the tables before)."""
    max_ids, max_uniq = _limits_of(st)
    return bool(config.allow_id_dropping) and (max_ids < _NO_LIMIT or max_uniq < _NO_LIMIT)


def _handle_oov(batch: FeatureBatch, plan: StackingPlan, on_out_of_vocabulary: str, num_threads: int = 1):
    # First only each feature's largest id, one task per feature (numpy's reduction
    # releases the GIL): a pass over every id that was serial, and a batch within
    # its vocabularies (the usual case) needs no mask at all.
    feats = list(plan.features)
    sizes = [int(batch._splits[batch._feature_index(f.name), -1] - batch._splits[batch._feature_index(f.name), 0])
             for f in feats]
    largest = _run_tasks(lambda f, worker: int(batch.ids(f.name).max(initial=-1)), feats, sizes, num_threads,
                         "oov")
    if all(m < f.table.vocab_size for m, f in zip(largest, feats)):
        return batch, {st.name: 0 for st in plan.stacks}
    # some feature's largest id is at or above its vocabulary: its mask is not empty
    masks = _engine._oov_masks(batch, plan)
    counts = {st.name: int(sum(int(masks[f.name].sum()) for f in st.features)) for st in plan.stacks}
    if on_out_of_vocabulary == "error":
        for f in batch.feature_names:
            bad = np.flatnonzero(masks[f])
            if bad.size:
                _engine._raise_oov(batch, plan, int(batch._splits[batch._feature_index(f), 0] + bad[0]))
    return batch._without(masks), counts


def _limits_of(st) -> tuple[int, int]:
    a = _NO_LIMIT if st.max_ids_per_partition is None else int(st.max_ids_per_partition)
    b = _NO_LIMIT if st.max_unique_ids_per_partition is None else int(st.max_unique_ids_per_partition)
    return a, b


def _vocabulary_stack_counts(st, counters, config, nb, G, S) -> dict:
    """A stack's per-bucket counts (``counters``: its range counter views, every range added) and its own split mask."""
    P = st.num_partitions
    nsl = G * S
    pairs, distinct, kept, raw, naive, dropped = counters
    pairs = pairs.reshape(nsl, P, nb)
    distinct = distinct.reshape(nsl, P, nb)
    if not config.allow_id_dropping:
        _check_buckets(st, pairs, distinct, G, S, nb)
    split = compute_minibatching_split(pairs.reshape(-1, nb), st.max_ids_per_partition) | \
        compute_minibatching_split(distinct.reshape(-1, nb), st.max_unique_ids_per_partition)
    return {"pairs": pairs, "distinct": distinct, "kept": kept.reshape(nsl, P, nb), "raw": raw.reshape(nsl, nb),
            "naive": naive.reshape(P, nb), "dropped": dropped, "stack_split": split}


# --------------------------------------------------------------------------------------
# the vocabulary strategy: a table's scan cut by slices, then by ranges of u
# --------------------------------------------------------------------------------------
# Coarse bins of u (u >> cshift) per group: at most about this many, so that a slice
# task's bin positions stay small beside its keys while a range can still isolate a
# hot id (under Zipf 1.05 a table's hottest id holds some 9% of its ids).
_COARSE_BITS = 10


class _VocabularyScan:
    """One call's vocabulary scan: its groups (tables of stacks), slice tasks and range tasks.

    Built serially from the plan (a few numpy calls for every table at once); the
    kernels run in :meth:`bin_task` (a group's slices ``[s0, s1)``: keys built and
    sorted by coarse bin; the group's last slice task to finish cuts its bins into
    ranges) and :meth:`range_task` (a range of bins of a group, or of every group of
    a stack with a prefix cut: gathered from every slice task, sorted, scanned, added
    into the stack's counters). Counts do not depend on how the work is cut: ranges
    hold whole ids (all slices of a ``u``), and their counters add up.
    """

    def __init__(self, plan, batch, G, S, nb, mode, config, backend, K, num_threads):
        self.K = K
        self.bin_fn = K.bin_slices if backend == "numba" else K.bin_slices_reference
        self.scan_fn = K.scan_range if backend == "numba" else K.scan_range_reference
        self.add_fn = K.add_range_counts if backend == "numba" else K.add_range_counts_reference
        self.batch, self.nb, self.mode = batch, nb, mode
        self.nsl = nsl = G * S
        self.n = n = batch.batch_size // nsl
        self.P = P = plan.stacks[0].num_partitions             # features are never empty: a stack at least
        self.stacks = plan.stacks
        self.cut = [_has_cut(st, config) for st in plan.stacks]
        self.limits = [_limits_of(st) if c else (_NO_LIMIT, _NO_LIMIT) for st, c in zip(plan.stacks, self.cut)]
        self.has_w = _engine._weights_of(batch)[1]
        pbits = max(0, P - 1).bit_length()
        # groups: (stack, feature rows, positions in the stack, col shift, row offset, vocab, qbits, lbits,
        # cshift, bins)
        groups, rows_all, first_row = [], [], []
        for a, st in enumerate(plan.stacks):
            lbits = _engine._lbits(len(st.features), n)
            for t in st.tables:
                ks = [k for k, f in enumerate(st.features) if f.table.name == t.table.name]
                rows = [batch._feature_index(st.features[k].name) for k in ks]
                vocab = t.table.vocab_size
                qbits = int((vocab - 1) // P).bit_length()
                # one thread: one bin (the group's keys sorted whole, scanned whole)
                cshift = pbits + qbits if num_threads == 1 else min(qbits, max(0, pbits + qbits - _COARSE_BITS))
                groups.append((a, np.array(rows, np.int64), np.array(ks, np.int64), t.shard_rotation,
                               t.row_offset_in_shard, vocab, qbits, lbits, cshift, (((P << qbits) - 1) >> cshift) + 1))
                first_row.append(len(rows_all))
                rows_all += rows
        self.groups = groups
        ng = len(groups)
        # raw ids per (group, slice) and the slice tasks: runs of slices of at most about
        # `target` ids (one run per group with one thread)
        per_slice = np.add.reduceat(_engine._slice_counts(batch, nsl)[rows_all], first_row, axis=0)
        total = int(per_slice.sum())
        self.target = target = max(1.0, total / (num_threads * _TASKS_PER_THREAD)) if num_threads > 1 else np.inf
        before = np.cumsum(per_slice, axis=1) - per_slice                   # ids of the group before each slice
        group_ids = per_slice.sum(axis=1)
        # A group of at most 1 / T of the ids is sorted whole by one task, which its
        # range tasks then scan piece by piece: cutting it by slices costs two more
        # passes over its keys (binning, then each range's sort), about a third more
        # work, which pays only once a table is too large a share for T workers.
        self.whole = whole = group_ids * num_threads <= total
        first = np.ones((ng, nsl), bool)
        if np.isfinite(target):
            run = before // target
            first[:, 1:] = run[:, 1:] != run[:, :-1]
        first[whole, 1:] = False
        gi, s0 = np.nonzero(first)
        group_base = np.cumsum(group_ids) - group_ids
        last = np.r_[gi[1:] != gi[:-1], True]                          # every group has a first task
        s1 = np.where(last, nsl, np.r_[s0[1:], nsl])
        chunk_base = group_base[gi] + before[gi, s0]
        chunk_ids = np.where(last, group_ids[gi], before[gi, np.minimum(s1, nsl - 1)]) - before[gi, s0]
        # every slice task's bin positions, group by group ((chunks, bins + 1) each)
        self.nchunk = nchunk = np.bincount(gi, minlength=ng)
        self.bins = bins = np.array([g[9] for g in groups], np.int64)
        pre_size = nchunk * (bins + 1)
        self.pre_off = np.cumsum(pre_size) - pre_size
        need = 8 * (total + int(pre_size.sum()) + len(plan.stacks) * K.range_counter_size(nsl, P, nb)) \
            + 8 * num_threads * (3 * int(chunk_ids.max()) + K.range_counter_size(nsl, P, nb))
        if need > scratch_limit_bytes():
            raise ConfigError(
                f"vocabulary mini-batching would allocate about {need:,} bytes ({need / 2**30:,.1f} GiB) for "
                f"{total:,} ids of {len(plan.stacks)} stack(s) on {nsl} SparseCores x {P} partitions, above the "
                f"limit of {scratch_limit_bytes():,} bytes ({SCRATCH_LIMIT_ENV}, the machine's memory or the "
                f"process's data-size limit). Use a "
                f"smaller batch or topology, or raise {SCRATCH_LIMIT_ENV} if the machine has the memory.")
        # the keys of every group and the bin positions: one buffer of the engine's pool
        # (fresh pages cost about as much as the kernels that fill them), given back by
        # release()
        (self.binned, self.pre_all), self._buffer = _carve([(total, np.int64), (int(pre_size.sum()), np.int64)])
        self.bin_off = np.cumsum(bins) - bins
        self.tot = np.zeros(max(1, int(bins.sum())), np.int64)        # ids per bin of every group
        self.group_locks = [threading.Lock() for _ in range(ng)]
        self.left = nchunk.tolist()                                    # slice tasks of each group still to end
        self.ranges: list = [None] * ng                                # each group's range tasks, once cut
        k_of = np.arange(gi.size) - (np.cumsum(nchunk) - nchunk)[gi]   # the chunk's index in its group
        self.bin_items = list(zip(gi.tolist(), s0.tolist(), s1.tolist(), chunk_base.tolist(), k_of.tolist()))
        self.bin_sizes = chunk_ids.tolist()
        self.max_chunk = int(chunk_ids.max())
        # every stack's counters, allocated by its first range task (zeroing them
        # all here was a tenth of a millisecond of serial time)
        self.counters: list = [None] * len(plan.stacks)
        self.stack_locks = [threading.Lock() for _ in range(len(plan.stacks))]
        self.scratch: dict[int, dict] = {}

    def release(self) -> None:
        """Give the key buffer back to the engine's pool (nothing may read it after)."""
        self.binned = self.pre_all = None
        _POOL.give(self._buffer)

    def _scratch(self, worker, name, size, zero=False):
        mine = self.scratch.setdefault(worker, {})
        buf = mine.get(name)
        if buf is None or buf.size < size:
            buf = mine[name] = np.zeros(max(1, size), np.int64) if zero else np.empty(max(1, size), np.int64)
        return buf

    def pre(self, g):
        """Group ``g``'s bin positions, one row per slice task."""
        o, k, c = int(self.pre_off[g]), int(self.nchunk[g]), int(self.bins[g])
        return self.pre_all[o:o + k * (c + 1)].reshape(k, c + 1)

    def bin_task(self, item, worker):
        g, s0, s1, base, k = item
        a, rows, ks, shift, _, vocab, qbits, lbits, cshift, C = self.groups[g]
        pre = self.pre(g)[k]
        m, oov = self.bin_fn(self.batch._ids, self.batch._splits, self.has_w, rows, ks, self.n, s0, s1, vocab,
                             self.P, shift, qbits, lbits, cshift, C, bool(self.whole[g]),
                             self._scratch(worker, "build", self.max_chunk),
                             self.binned, base, pre, self._scratch(worker, "hist", 3 * 2048))
        if oov >= 0:                 # the caller checks the batch and raises or drops them
            raise _engine._Oov(int(oov))
        counts = pre[1:] - pre[:-1]
        o = int(self.bin_off[g])
        with self.group_locks[g]:
            self.tot[o:o + C] += counts
            self.left[g] -= 1
            done = self.left[g] == 0
        if done and not self.cut[a]:
            # the group's bins are all counted: cut them into ranges here, in a task
            self.ranges[g] = self._group_ranges(g)

    def _group_ranges(self, g):
        """Group ``g``'s range tasks ``(stack, ((g, c0, c1),), p_lo, Pc, ids)``: runs of about ``target`` ids.

        A bin larger than ``target`` (a hot id) runs alone. Ranges hold whole bins,
        so the keys of one id are never split.
        """
        a, _, _, _, _, _, qbits, _, cshift, C = self.groups[g]
        o = int(self.bin_off[g])
        tot = self.tot[o:o + C]
        idx = np.flatnonzero(tot)
        if not idx.size:
            return []
        w = tot[idx]
        if np.isfinite(self.target):
            run = (np.cumsum(w) - w) // self.target
            big = w > self.target
            start = np.flatnonzero(np.r_[True, (run[1:] != run[:-1]) | big[1:] | big[:-1]])
        else:
            start = np.zeros(1, np.int64)
        stop = np.r_[start[1:], idx.size]
        c0, c1 = idx[start], idx[stop - 1] + 1
        sizes = np.add.reduceat(w, start)
        p_lo = (c0 << cshift) >> qbits
        p_hi = np.minimum(((c1 << cshift) - 1) >> qbits, self.P - 1)   # one bin: u < P << qbits
        return [(a, ((g, lo, hi),), p, q - p + 1, z) for lo, hi, p, q, z in
                zip(c0.tolist(), c1.tolist(), p_lo.tolist(), p_hi.tolist(), sizes.tolist())]

    def range_items(self):
        """The range tasks (after every slice task): ``(stack, ((group, c0, c1), ...), p_lo, Pc, ids)``, sizes."""
        items = []
        for g, grp in enumerate(self.groups):
            if not self.cut[grp[0]] and self.ranges[g]:
                items += self.ranges[g]
        for a in np.flatnonzero(self.cut).tolist():
            items += self._cut_stack_items(a)
        return items, [it[4] for it in items]

    def _cut_stack_items(self, a):
        """With a prefix cut a stream's ranks run over the stack's tables in order: ranges of whole partitions."""
        P, target = self.P, self.target
        mine = [g for g, grp in enumerate(self.groups) if grp[0] == a]
        per_part = np.zeros(P, np.int64)
        for g in mine:
            C = int(self.bins[g])
            o = int(self.bin_off[g])
            if C >= P:                          # C = P << (qbits - cshift): whole partitions of bins
                per_part += self.tot[o:o + C].reshape(P, C // P).sum(axis=1)
            else:                               # one bin (one thread): one range of every partition
                per_part[0] += self.tot[o:o + C].sum()

        def bin_of(g, p):
            C = int(self.bins[g])
            return p * (C // P) if C >= P else (0 if p == 0 else C)

        items = []
        p0, size = 0, 0
        for p in range(P + 1):
            if p == P or (size and size + per_part[p] > target and int(self.bins[mine[0]]) >= P):
                if size:
                    items.append((a, tuple((g, bin_of(g, p0), bin_of(g, p)) for g in mine), p0, p - p0, int(size)))
                p0, size = p, 0
            if p < P:
                size += int(per_part[p])
        return items

    def range_task(self, item, worker):
        a, parts, p_lo, Pc, cap = item
        K, nsl, nb, P = self.K, self.nsl, self.nb, self.P
        loc = self._scratch(worker, "counters", K.range_counter_size(nsl, Pc, nb), zero=True)
        views = K.range_counter_views(loc, nsl, Pc, nb)
        ka, kb = self._scratch(worker, "keys", cap), self._scratch(worker, "sorted", cap)   # untouched if sorted
        hist = self._scratch(worker, "hist", 3 * 2048)
        max_ids, max_uniq = self.limits[a]
        for g, c0, c1 in parts:
            _, _, _, _, offset, _, qbits, lbits, cshift, _ = self.groups[g]
            self.scan_fn(self.binned, self.pre(g), c0, c1, cshift, P, p_lo, Pc, qbits, lbits, offset, nb, self.mode,
                         K.HIGHWAY_KEY, max_ids, max_uniq, *views, ka, kb, hist, bool(self.whole[g]))
        with self.stack_locks[a]:
            if self.counters[a] is None:
                self.counters[a] = np.zeros(K.range_counter_size(nsl, P, nb), np.int64)
            self.add_fn(loc, nsl, p_lo, Pc, P, nb, *K.range_counter_views(self.counters[a], nsl, P, nb))

    def stack_counts(self, a, config, G, S) -> dict:
        """Stack ``a``'s per-bucket counts once every range task has run, checked, with its own split mask."""
        counters = self.counters[a]
        if counters is None:                    # no ids
            counters = np.zeros(self.K.range_counter_size(self.nsl, self.P, self.nb), np.int64)
        return _vocabulary_stack_counts(self.stacks[a], self.K.range_counter_views(counters, self.nsl, self.P, self.nb),
                                        config, self.nb, G, S)


def _vocabulary(plan, topology, batch, nb, mode, config, backend, K, num_threads, split_scope, oov_counts):
    """The vocabulary strategy: its statistics and assignment Datasets."""
    G, S = topology.num_devices, topology.sparsecores_per_device
    scan = _VocabularyScan(plan, batch, G, S, nb, mode, config, backend, K, num_threads)
    try:
        _run_tasks(scan.bin_task, scan.bin_items, scan.bin_sizes, num_threads, "slices")
        items, sizes = scan.range_items()
        _run_tasks(scan.range_task, items, sizes, num_threads, "ranges")
    finally:
        scan.release()
    ns = len(plan.stacks)
    stack_sizes = [_stack_ids(st, batch) for st in plan.stacks]
    counts = _run_tasks(lambda a, worker: scan.stack_counts(a, config, G, S), list(range(ns)), stack_sizes,
                        num_threads, "stacks")
    if split_scope == "batch":
        # jax-tpu-embedding ORs the split of every stacked table of the batch
        # (input_preprocessing.cc, SyncMinibatchingSplit): one cut for the
        # whole input, so every stack loops the same number of times.
        combined = 0
        for c in counts:
            combined |= c["stack_split"]
        splits = [combined] * ns
    else:
        splits = [c["stack_split"] for c in counts]
    Ms = [bin(s).count("1") + 1 for s in splits]           # mini-batches: the runs between the cuts
    arrays = _stats_arrays(max(Ms), ns, G, S, scan.P)
    positions = {s: split_positions(s, nb) for s in set(splits)}
    assignment = {"groups": np.zeros((ns, nb), np.int64), "bucket_max_ids": np.zeros((ns, nb), np.int64),
                  "bucket_max_unique": np.zeros((ns, nb), np.int64), "bucket_ids": np.zeros((ns, nb), np.int64),
                  "split": np.array(splits, np.int64), "stack_split": np.array([c["stack_split"] for c in counts],
                                                                                np.int64),
                  "split_positions": np.array([positions[s] for s in splits], np.int64)}
    sums = K.minibatch_sums if backend == "numba" else K.minibatch_sums_reference

    def one_stack(a, worker):
        _vocabulary_minibatches_into(counts[a], splits[a], nb, arrays, assignment, a, sums)
        _fill_derived(arrays, a)

    _run_tasks(one_stack, list(range(ns)), stack_sizes, num_threads, "minibatches")
    return (_stats_dataset(plan, topology, batch, arrays, Ms, oov_counts, "vocabulary", split_scope),
            _vocabulary_assignment_dataset(plan, assignment, nb, split_scope))


def _vocabulary_minibatches_into(counts, split, nb, out, assignment, a, sums) -> None:
    """Stack ``a``'s counters summed per mini-batch of ``split`` into ``out[...][:, a]``; its assignment rows."""
    pairs, distinct = counts["pairs"], counts["distinct"]
    groups = split_to_minibatches(split, nb)
    nsl, P = pairs.shape[0], pairs.shape[1]
    rows = nsl * P
    M = out["ids"].shape[0]

    def view(key, width):                    # stack a's rows of out[key], (M, width)
        return out[key][:, a].reshape(M, width)

    sums(pairs.reshape(rows, nb), groups, view("ids", rows))
    sums(distinct.reshape(rows, nb), groups, view("unique", rows))
    # without a prefix cut the scan ran with no limits: every id kept, kept == pairs
    sums(counts["kept"].reshape(rows, nb), groups, view("kept", rows))
    sums(counts["raw"].reshape(nsl, nb), groups, view("raw", nsl))
    sums(counts["naive"].reshape(P, nb), groups, out["naive_unique"][:, a])
    sums(counts["dropped"].reshape(1, nb), groups, out["dropped"][:, a:a + 1])
    flat = pairs.reshape(rows, nb)
    assignment["groups"][a] = groups
    flat.max(axis=0, out=assignment["bucket_max_ids"][a])            # rows = S * P >= 1
    distinct.reshape(rows, nb).max(axis=0, out=assignment["bucket_max_unique"][a])
    flat.sum(axis=0, out=assignment["bucket_ids"][a])


def _stats_arrays(M, ns, G, S, P) -> dict:
    """The statistics' arrays of every mini-batch and stack, zero (filled stack by stack)."""
    z = np.zeros
    return {"ids": z((M, ns, G, S, P), np.int64), "unique": z((M, ns, G, S, P), np.int64),
            "kept": z((M, ns, G, S, P), np.int64), "raw": z((M, ns, G, S), np.int64),
            "naive_unique": z((M, ns, P), np.int64), "dropped": z((M, ns), np.int64),
            "max_ids": z((M, ns, G, P), np.int64), "max_unique": z((M, ns, G, P), np.int64),
            "buffer_sc": z((M, ns, G, S), np.int64), "buffer_device": z((M, ns, G), np.int64),
            "naive_ids": z((M, ns, P), np.int64)}


def _fill_derived(arrays, a) -> None:
    """Stack ``a``'s variables derived from its ids (maxima over source SparseCores, buffer sizes, naive ids)."""
    ids, uniq, kept = arrays["ids"][:, a], arrays["unique"][:, a], arrays["kept"][:, a]     # (M, G, S, P)
    ids.max(axis=2, out=arrays["max_ids"][:, a])
    uniq.max(axis=2, out=arrays["max_unique"][:, a])
    round_up(ids, 8).sum(axis=3, out=arrays["buffer_sc"][:, a])
    round_up(kept, 8).sum(axis=3).sum(axis=2, out=arrays["buffer_device"][:, a])
    ids.sum(axis=(1, 2), out=arrays["naive_ids"][:, a])


def _check_buckets(st, pairs, distinct, G, S, nb) -> None:
    P = st.num_partitions
    tables = ", ".join(st.table_names)
    for limit, counts, configured, what in (
            ("max_ids_per_partition", pairs, st.max_ids_per_partition, "ids"),
            ("max_unique_ids_per_partition", distinct, st.max_unique_ids_per_partition, "distinct ids")):
        if configured is None:
            continue
        over = counts > configured
        if not over.any():
            continue
        c = int(np.argmax(counts))
        sl, rest = divmod(c, P * nb)
        p, b = divmod(rest, nb)
        d, s = divmod(sl, S)
        observed = int(counts.ravel()[c])
        nbad = int(over.any(axis=(0, 1)).sum())
        err = LimitExceededError(
            f"stack {st.name!r} (tables: {tables}): bucket {b} alone holds {observed} {what} that source "
            f"SparseCore {s} of device {d} sends to partition {p}, above {limit}={configured} ({nbad} of {nb} "
            "buckets overflow on their own); vocabulary mini-batching only groups whole buckets (an id's "
            f"bucket is fixed by its hash), so no split makes it fit. It would need {limit} >= {observed} "
            "(the largest single-bucket count of this stack). Raise the limit, set "
            "SparsecoreConfig(allow_id_dropping=True), use more buckets, or strategy='sample'.",
            limit=limit, observed=observed, configured=int(configured), stack=st.name,
            table=st.table_names[0] if len(st.tables) == 1 else tables, device=d, sc=s, partition=p,
            bucket=b, required=observed)
        raise err


def _sample_stack(st, batch, G, S, config, backend, K) -> dict:
    P = st.num_partitions
    nsl = G * S
    B = batch.batch_size
    n = B // nsl
    max_ids, max_uniq = _limits_of(st)
    feat_rows = np.array([batch._feature_index(f.name) for f in st.features], np.int64)
    shifts = np.array([st.table(f.table.name).shard_rotation for f in st.features], np.int64)
    offsets = np.array([st.table(f.table.name).row_offset_in_shard for f in st.features], np.int64)
    spl = batch._splits
    per_slice = np.zeros(nsl, np.int64)
    total = 0
    for r in feat_rows:
        cnt = spl[r, n::n] - spl[r, :-1:n]
        per_slice += cnt
        total += int(spl[r, -1] - spl[r, 0])
    cap = 16
    while cap < 2 * max(1, int(per_slice.max())):              # a slice per source SparseCore: never empty
        cap *= 2
    table = np.empty((cap, 4), np.int32)
    starts = np.zeros(nsl * n, np.int64)
    nruns = np.zeros(nsl, np.int64)
    rec = np.zeros((max(1, total), 5), np.int64)
    raw_runs = np.zeros(nsl * n, np.int64)
    fn = K.sample_split if backend == "numba" else K.sample_split_reference
    nrec = int(fn(batch._ids, spl, feat_rows, shifts, offsets, n, nsl, P, max_ids, max_uniq, table, starts,
                  nruns, rec, raw_runs))
    if nrec < 0:
        sl, i, p, observed, which = (int(v) for v in rec[0])
        d, s = divmod(sl, S)
        limit = "max_ids_per_partition" if which == 0 else "max_unique_ids_per_partition"
        configured = max_ids if which == 0 else max_uniq
        tables = ", ".join(st.table_names)
        required = _largest_sample_count(st, batch, n, nsl, which)
        err = LimitExceededError(
            f"stack {st.name!r} (tables: {tables}): sample {sl * n + i} alone sends {observed} "
            f"{'ids' if which == 0 else 'distinct ids'} to partition {p} from source SparseCore {s} of device "
            f"{d}, above {limit}={configured}; sample mini-batching cannot split a sample. It would need "
            f"{limit} >= {required} (the largest single-sample count of this stack). Raise the limit or use "
            "strategy='vocabulary'.",
            limit=limit, observed=observed, configured=int(configured), stack=st.name,
            table=st.table_names[0] if len(st.tables) == 1 else tables, device=d, sc=s, partition=p,
            sample=sl * n + i, required=required)
        raise err
    M = int(nruns.max())                                       # a slice has at least one run, empty or not
    rec = rec[:nrec]
    ids = np.zeros((M, nsl, P), np.int64)
    uniq = np.zeros((M, nsl, P), np.int64)
    ids[rec[:, 1], rec[:, 0], rec[:, 2]] = rec[:, 3]
    uniq[rec[:, 1], rec[:, 0], rec[:, 2]] = rec[:, 4]
    raw = np.zeros((M, nsl), np.int64)
    run_start = np.full((nsl, M), -1, np.int64)
    run_stop = np.full((nsl, M), -1, np.int64)
    run_of_sample = np.empty(B, np.int64)
    for sl in range(nsl):
        k = int(nruns[sl])
        st_ = starts[sl * n:sl * n + k]
        stop = np.r_[st_[1:], n]
        run_start[sl, :k] = st_
        run_stop[sl, :k] = stop
        raw[:k, sl] = raw_runs[sl * n:sl * n + k]
        run_of_sample[sl * n:(sl + 1) * n] = np.repeat(np.arange(k), stop - st_)
    # whole-batch distinct ids per (mini-batch, partition), from the engine's sorted keys
    naive = np.zeros(M * P, np.int64)
    stamp = np.full(M, -1, np.int64)
    naive_fn = K.naive_by_run if backend == "numba" else K.naive_by_run_reference
    for g, keys, m, lbits in _engine._iter_sorted_group_keys(st, batch, G, S, backend):
        stamp[:] = -1
        naive_fn(keys, m, P, g.qbits, lbits, n, run_of_sample, stamp, naive)
    naive = naive.reshape(M, P)
    return {"M": M, "ids": ids, "unique": uniq, "kept": ids, "raw": raw, "naive_unique": naive,
            "dropped": np.zeros(M, np.int64), "run_start": run_start, "run_stop": run_stop,
            "nruns": nruns, "run_of_sample": run_of_sample}


def _largest_sample_count(st, batch, n, nsl, which) -> int:
    """Largest per-sample (pairs or distinct ids) count to one partition over every sample of the stack."""
    P = st.num_partitions
    parts = []
    for f in st.features:
        t = st.table(f.table.name)
        x = batch.ids(f.name)
        if not x.size:
            continue
        col = column_id_of_id(x, P, t.shard_rotation, t.row_offset_in_shard)
        sample = np.repeat(np.arange(batch.batch_size), batch.lengths(f.name))
        k = st.feature_position(f.name)
        # pairs: (sample, feature, col) distinct; distinct ids: (sample, col) distinct
        parts.append(np.stack([sample, np.full(x.size, k if which == 0 else 0), col], axis=1))
    # called once a sample overflowed: some feature has ids, parts is not empty
    rows = np.unique(np.concatenate(parts), axis=0)
    key = rows[:, 0] * P + rows[:, 2] % P
    return int(np.bincount(key).max())


# --------------------------------------------------------------------------------------
# datasets
# --------------------------------------------------------------------------------------
def _minibatch_coords(names: tuple, G: int, S: int, P: int, M: int):
    """The coordinates of the mini-batch statistics as a Dataset (cached: building indexes is most of the cost)."""
    return cached_coords(("minibatch", names, G, S, P, M), lambda: {
        "minibatch": ("minibatch", np.arange(M), {"long_name": "mini-batch index"}),
        **stats_coords(names, G, S, P),
    })


def _stats_dataset(plan, topology, batch, arrays, Ms, oov_counts, strategy, split_scope):
    """The statistics per mini-batch from :func:`_stats_arrays` (filled); ``Ms`` each stack's mini-batches."""
    G, S, P = topology.num_devices, topology.sparsecores_per_device, topology.num_partitions
    B = batch.batch_size
    names = [st.name for st in plan.stacks]
    M = arrays["ids"].shape[0]
    ids, uniq, kept, raw = arrays["ids"], arrays["unique"], arrays["kept"], arrays["raw"]
    naive_u, dropped = arrays["naive_unique"], arrays["dropped"]

    def var(dims, values, long_name, units):
        return (dims, values, {"long_name": long_name, "units": units})

    MSDSP = ("minibatch", "stack", "device", "sc", "partition")
    limit_ids = np.array([-1 if st.max_ids_per_partition is None else st.max_ids_per_partition
                          for st in plan.stacks], np.int64)
    limit_uniq = np.array([-1 if st.max_unique_ids_per_partition is None else st.max_unique_ids_per_partition
                           for st in plan.stacks], np.int64)
    ds = _dataset(
        {
            "ids": var(MSDSP, ids, "ids source SparseCore (device, sc) sends to partition in the mini-batch, "
                       "after per-sample dedup", "ids"),
            "unique_ids": var(MSDSP, uniq, "distinct ids source SparseCore (device, sc) sends to partition in "
                              "the mini-batch", "ids"),
            "kept_ids": var(MSDSP, kept, "ids kept after the limits' prefix cut (per bucket)", "ids"),
            "max_ids_per_partition": var(("minibatch", "stack", "device", "partition"), arrays["max_ids"],
                                         "max over source SparseCores of ids", "ids"),
            "max_unique_ids_per_partition": var(("minibatch", "stack", "device", "partition"), arrays["max_unique"],
                                                "max over source SparseCores of distinct ids", "ids"),
            "required_buffer_size_per_sc": var(("minibatch", "stack", "device", "sc"),
                                               arrays["buffer_sc"],
                                               "sum over partitions of round_up(ids, 8)", "CSR entries"),
            "required_buffer_size_per_device": var(("minibatch", "stack", "device"),
                                                   arrays["buffer_device"],
                                                   "CSR entries one device fills after dropping", "CSR entries"),
            "input_ids": var(("minibatch", "stack", "device", "sc"), raw,
                             "raw ids of the slice in the mini-batch, before dedup", "ids"),
            "dropped_ids": var(("minibatch", "stack"), dropped,
                               "raw ids dropped by the per-bucket prefix cut (duplicates included)", "ids"),
            "naive_ids_per_partition": var(("minibatch", "stack", "partition"), arrays["naive_ids"],
                                           "whole-batch view: ids per destination partition after per-sample "
                                           "dedup", "ids"),
            "naive_unique_ids_per_partition": var(("minibatch", "stack", "partition"), naive_u,
                                                  "whole-batch view: distinct ids per destination partition",
                                                  "ids"),
            "num_minibatches": var("stack", np.array(Ms, np.int64),
                                   "mini-batches of the stack (1: none; split_scope 'batch': the same for "
                                   "every stack)", "mini-batches"),
            "samples_per_device": var("stack", np.array([len(st.features) * B // G for st in plan.stacks],
                                                        np.int64),
                                      "samples of the stacked input per device (features x B / G)", "samples"),
            "out_of_vocabulary_ids": var("stack", np.array([oov_counts[nm] for nm in names], np.int64),
                                         "ids >= vocab_size dropped before mini-batching", "ids"),
            "configured_max_ids_per_partition": var("stack", limit_ids,
                                                    "configured max ids per partition (-1: none)", "ids"),
            "configured_max_unique_ids_per_partition": var(
                "stack", limit_uniq, "configured max unique ids per partition (-1: none)", "ids"),
        },
        _minibatch_coords(tuple(names), G, S, P, M),
        {
            "topology": str(topology),
            "num_devices": G,
            "sparsecores_per_device": S,
            "num_partitions": P,
            "batch_size": B,
            "samples_per_sc": B // (G * S),
            "source": ("[jte] preprocess_sparse_dense_matmul_input; [jte] sort_and_group_coo_tensors_impl.h, "
                       "minibatching_splits_impl.h"),
            "strategy": strategy,
            "split_scope": split_scope,
        },
    )
    return ds


def _assignment_coords(names: tuple, dims: tuple):
    """The coordinates ``stack`` (``names``) and ``arange(size)`` per ``(dim, size)``, cached."""
    return cached_coords(("assignment", names, dims), lambda: {
        "stack": np.array(list(names), dtype=object), **{dim: np.arange(size) for dim, size in dims}})


def _vocabulary_assignment_dataset(plan, asg, nb, split_scope):
    """Which buckets form which mini-batch, from the arrays ``asg`` (stack rows filled by the tasks)."""
    # built directly on cached coordinates (results._dataset: no alignment, no
    # index building, about 1 ms of the call's serial time with xr.Dataset)
    return _dataset(
        {
            "minibatch_of_bucket": (("stack", "bucket"), asg["groups"],
                                    {"long_name": "mini-batch of each bucket", "units": "mini-batch"}),
            "bucket_max_ids": (("stack", "bucket"), asg["bucket_max_ids"],
                               {"long_name": "largest ids of the bucket over (device, sc, partition) streams",
                                "units": "ids"}),
            "bucket_max_unique_ids": (("stack", "bucket"), asg["bucket_max_unique"],
                                      {"long_name": "largest distinct ids of the bucket over streams",
                                       "units": "ids"}),
            "bucket_ids": (("stack", "bucket"), asg["bucket_ids"],
                           {"long_name": "ids of the bucket in the whole batch after per-sample dedup",
                            "units": "ids"}),
            "split_mask": ("stack", asg["split"],
                           {"long_name": "split bits that cut the stack's buckets (split_scope 'batch': the "
                                         "OR of every stack's stack_split_mask)", "units": "bit mask"}),
            "stack_split_mask": ("stack", asg["stack_split"],
                                 {"long_name": "split bits of the stack's own bucket tree "
                                               "(ComputeMinibatchingSplit)", "units": "bit mask"}),
            "split_positions": ("stack", asg["split_positions"],
                                {"long_name": "bit b set: buckets b and b+1 in different mini-batches",
                                 "units": "bit mask"}),
        },
        _assignment_coords(tuple(st.name for st in plan.stacks), (("bucket", nb),)),
        {"strategy": "vocabulary", "num_buckets": nb, "split_scope": split_scope},
    )


def _assignment_dataset(plan, topology, per_stack, strategy, nb, B, split_scope):
    """The sample strategy's runs of every slice."""
    names = tuple(st.name for st in plan.stacks)
    G, S = topology.num_devices, topology.sparsecores_per_device
    M = max(r["M"] for r in per_stack)
    rs = np.full((len(per_stack), G, S, M), -1, np.int64)
    re_ = np.full_like(rs, -1)
    nr = np.zeros((len(per_stack), G, S), np.int64)
    for a, r in enumerate(per_stack):
        k = r["M"]
        rs[a, :, :, :k] = r["run_start"].reshape(G, S, k)
        re_[a, :, :, :k] = r["run_stop"].reshape(G, S, k)
        nr[a] = r["nruns"].reshape(G, S)
    dims = ("stack", "device", "sc", "minibatch")
    return _dataset(
        {
            "run_start": (dims, rs, {"long_name": "first local sample of the run (-1: none)", "units": "samples"}),
            "run_stop": (dims, re_, {"long_name": "one past the last local sample of the run (-1: none)",
                                     "units": "samples"}),
            "runs_per_sc": (("stack", "device", "sc"), nr, {"long_name": "runs of the slice",
                                                              "units": "mini-batches"}),
        },
        _assignment_coords(names, (("device", G), ("sc", S), ("minibatch", M))),
        {"strategy": strategy, "samples_per_sc": B // (G * S), "split_scope": split_scope},
    )
