"""What-ifs of the sharding engine: a batch, features, topology and settings, results on demand.

A :class:`Scenario` holds the inputs of :func:`~scwork.sharding.preprocess` and answers
the questions a user tuning limits asks of them, each computed on first use and cached:

- :attr:`~Scenario.plan`: the stacks, with the limits in force (a stack's own limits,
  from its tables as jax-tpu-embedding sets them, unless ``stack_limits`` overrides them);
- :attr:`~Scenario.stats` / :attr:`~Scenario.result` (with CSR buffers): the run under those limits (ids
  dropped when ``allow_id_dropping``; :class:`~scwork.errors.LimitExceededError`
  otherwise, kept in :attr:`~Scenario.error`);
- :attr:`~Scenario.observed`: the same ids with no limit at all, i.e. what the limits
  would have to be;
- :attr:`~Scenario.minibatches`: how many vocabulary mini-batches the batch needs to
  stay within its limits (one split for every stack, as jax-tpu-embedding cuts it, so
  every stack has the same count; one when everything already fits);
- :attr:`~Scenario.by_table`: the observed counts of every table alone, at its place in
  its stack (the stack's counts are their sums);
- :attr:`~Scenario.csr_footprint`: CSR entries and bytes per device of each stack.

:meth:`~Scenario.with_` gives the scenario with some inputs changed (another topology,
limits, stacking, id dropping...), with nothing computed yet, so scripts, the CLI and the
explorers ask "what if" the same way. The explorers are: controls -> scenario -> draw.

Examples
--------
>>> import scwork
>>> from scwork.sharding import FeatureBatch, FeatureSpec, Scenario, TableSpec
>>> batch = FeatureBatch.from_ragged({"f": ([0, 2, 4, 6, 1, 3, 5, 7], [0, 4, 8])})
>>> table = TableSpec("t", 16, 8, max_ids_per_partition=2, max_unique_ids_per_partition=2)
>>> s = Scenario(batch, [FeatureSpec("f", table)], scwork.Topology(1, 2), stacking=None)
>>> s.within_limits                 # sample 0 sends its four ids to partition 0
False
>>> s.observed["max_ids_per_partition"].sel(stack="t").values.tolist()
[[4, 4]]
>>> s.minibatches.counts          # vocabulary mini-batches that fit the limits
{'t': 4}
>>> dropping = s.with_(allow_id_dropping=True)
>>> dropping.within_limits, int(dropping.stats["dropped_ids"].sum())
(True, 4)
>>> s.with_(stack_limits={"t": (4, 4)}).within_limits
True
"""

from __future__ import annotations

from scwork._rounding import round_up

import concurrent.futures
import dataclasses
import threading
from collections.abc import Mapping
from functools import cached_property
from typing import Any


from scwork.errors import ConfigError, LimitExceededError, ScworkError
from scwork.hardware.topology import Topology
from scwork.sharding.batch import FeatureBatch
from scwork.sharding.engine import _DEFAULT_CONFIG, _statistics_and_drops, compute_stats, preprocess
from scwork.sharding.results import PreprocessResult
from scwork.sharding.specs import SparsecoreConfig
from scwork.sharding.stacking import StackingPlan, plan_stacking

__all__ = ["Scenario", "MinibatchCounts"]

_CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(SparsecoreConfig))

_executor: concurrent.futures.ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _background() -> concurrent.futures.ThreadPoolExecutor:
    """One worker thread shared by every scenario for a second engine pass."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="scwork-scenario")
        return _executor


@dataclasses.dataclass(frozen=True)
class MinibatchCounts:
    """Vocabulary mini-batches of each stack under the batch's one split (the same count for every stack)."""

    counts: dict[str, int | None]
    """Per stack: the number of mini-batches, or None where no split fits (a single
    bucket over a limit). The other stacks then get the count of the OR of their own
    split masks: the bits of the stacks without a split are unknown, so it is a lower
    bound of what the batch would need once those are fixed."""
    notes: dict[str, str]
    """Per stack whose count is None: why (the engine's message)."""


def _limit_pair(name: str, value: Any) -> tuple[int | None, int | None]:
    """``(max_ids, max_unique_ids)`` from a pair or a mapping; 0 and None mean no limit."""
    if isinstance(value, Mapping):
        value = (value.get("max_ids_per_partition"), value.get("max_unique_ids_per_partition"))
    try:
        max_ids, max_unique = value
    except (TypeError, ValueError):
        raise ConfigError(f"stack_limits[{name!r}] must be (max_ids_per_partition, max_unique_ids_per_partition), "
                          f"got {value!r}") from None
    out = []
    for what, limit in (("max_ids_per_partition", max_ids), ("max_unique_ids_per_partition", max_unique)):
        if limit is None or (isinstance(limit, int) and not isinstance(limit, bool) and limit == 0):
            out.append(None)
        elif isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            out.append(int(limit))
        else:
            raise ConfigError(f"stack_limits[{name!r}]: {what} must be a positive integer, 0 or None (no limit), "
                              f"got {limit!r}")
    return out[0], out[1]


@dataclasses.dataclass(frozen=True, eq=False)
class Scenario:
    """One batch, its features, a topology and settings; the sharding engine's answers on demand.

    Every property is computed on first use and cached; a scenario never changes
    (:meth:`with_` makes a new one). Equality is identity.
    """

    batch: FeatureBatch
    """The ids of one step (:class:`~scwork.sharding.FeatureBatch`)."""
    features: Any
    """Feature specs: a sequence or mapping of :class:`~scwork.sharding.FeatureSpec`."""
    topology: Topology
    """Chips and SparseCores the tables are sharded over (``P = devices x SparseCores``)."""
    stacking: Any = "auto"
    """``"auto"`` (default), None (every table alone), explicit groups of table names, or a
    :class:`~scwork.sharding.StackingPlan`; as :func:`~scwork.sharding.plan_stacking`."""
    rotation: int | None = None
    """Shard rotation between successive tables of a stack; None: ``S``, as jax-tpu-embedding."""
    config: SparsecoreConfig = dataclasses.field(default_factory=lambda: _DEFAULT_CONFIG)
    """Engine settings (``allow_id_dropping``, ``max_ids_per_chip_per_sample``...)."""
    stack_limits: Mapping[str, Any] | None = None
    """Per stack ``(max_ids_per_partition, max_unique_ids_per_partition)`` overriding the
    stack's own limits; 0 or None in a pair means no limit. Default: no override."""
    num_threads: int | None = None
    """Engine worker threads; None (default): all available cores."""

    def __post_init__(self) -> None:
        if not isinstance(self.batch, FeatureBatch):
            raise ConfigError(f"batch must be a FeatureBatch (e.g. FeatureBatch.from_ragged(...)), "
                              f"got {type(self.batch).__name__}")
        if not isinstance(self.topology, Topology):
            raise ConfigError(f"topology must be a scwork.Topology, got {type(self.topology).__name__}")
        if not isinstance(self.config, SparsecoreConfig):
            raise ConfigError(f"config must be a SparsecoreConfig, got {type(self.config).__name__}")
        if self.stack_limits is not None and not isinstance(self.stack_limits, Mapping):
            raise ConfigError(f"stack_limits must be a mapping {{stack: (max_ids, max_unique_ids)}}, "
                              f"got {type(self.stack_limits).__name__}")
        overrides = {str(k): _limit_pair(str(k), v) for k, v in (self.stack_limits or {}).items()}
        object.__setattr__(self, "stack_limits", overrides)

    # -- changes --------------------------------------------------------------------
    def with_(self, **changes: Any) -> Scenario:
        """This scenario with some inputs changed, nothing computed yet.

        Takes the fields of :class:`Scenario`, plus two shortcuts: any field of
        :class:`~scwork.sharding.SparsecoreConfig` (``allow_id_dropping=True``...)
        changes ``config``, and ``num_chips`` changes the topology's chip count.

        Examples
        --------
        >>> import scwork
        >>> from scwork.sharding import FeatureBatch, FeatureSpec, Scenario, TableSpec
        >>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3], [0, 2, 4])})
        >>> s = Scenario(batch, [FeatureSpec("f", TableSpec("t", 8, 8))], scwork.Topology.for_chip("v5p", num_chips=1))
        >>> s.with_(num_chips=2).topology.num_partitions, s.with_(allow_id_dropping=True).config.allow_id_dropping
        (8, True)
        """
        fields = {f.name for f in dataclasses.fields(self)}
        config_changes = {k: changes.pop(k) for k in list(changes) if k in _CONFIG_FIELDS and k not in fields}
        if "num_chips" in changes:
            topology = changes.get("topology", self.topology)
            changes["topology"] = topology.replace(num_chips=changes.pop("num_chips"))
        unknown = sorted(set(changes) - fields)
        if unknown:
            raise ConfigError(f"Scenario.with_ got unknown setting(s) {', '.join(unknown)}; it takes "
                              f"{', '.join(sorted(fields))}, num_chips, or a SparsecoreConfig field")
        if config_changes:
            changes["config"] = dataclasses.replace(changes.get("config", self.config), **config_changes)
        return dataclasses.replace(self, **changes)

    # -- plans ----------------------------------------------------------------------
    def _plan(self, stack_limits=None) -> StackingPlan:
        return plan_stacking(self.features, self.topology, self.stacking, batch_size=self.batch.batch_size,
                             rotation=self.rotation, config=self.config, stack_limits=stack_limits)

    @cached_property
    def own_plan(self) -> StackingPlan:
        """The stacks with their own limits (from their tables), before ``stack_limits``."""
        return self._plan()

    @cached_property
    def limits(self) -> dict[str, tuple[int | None, int | None]]:
        """Per stack ``(max_ids_per_partition, max_unique_ids_per_partition)`` in force (None: no limit)."""
        names = [st.name for st in self.own_plan.stacks]
        unknown = sorted(set(self.stack_limits) - set(names))
        if unknown:
            raise ConfigError(f"stack_limits names {', '.join(map(repr, unknown))}, not a stack of this plan; "
                              f"its stacks are {', '.join(map(repr, names))}")
        return {st.name: self.stack_limits.get(st.name, (st.max_ids_per_partition, st.max_unique_ids_per_partition))
                for st in self.own_plan.stacks}

    @cached_property
    def plan(self) -> StackingPlan:
        """The stacks run, with :attr:`limits` in force."""
        if not self.stack_limits:
            # no override: the limits in force are the stacks' own, and planning with
            # them gives stacks equal to own_plan's (a second plan lookup, keyed by
            # every stack's pair, was a fifth of what a scenario adds to its run)
            return self.own_plan
        return self._plan(self.limits)

    # -- runs -----------------------------------------------------------------------
    # The statistics come from compute_stats (no CSR buffers: about twice as fast);
    # preprocess runs only when CSR buffers are asked for (result, observed_result).
    @cached_property
    def _limited(self) -> tuple[Any, LimitExceededError | None]:
        # Without overrides the engine plans itself, from the same arguments own_plan
        # plans with: its last-plan shortcut (identity of the checked features, the
        # topology, stacking and config) costs less than the plan cache's key, and
        # this call then looks nothing up before the engine's (a scenario's lookup of
        # its own plan, caches cold after the previous run, was a third of what it
        # added to the call). The plan it runs equals own_plan (tested).
        # Whether any id was dropped (over_limits) comes with the statistics, found by the
        # call's checks task: reading the Dataset's variable afterwards was serial time.
        if self.stack_limits:
            planned = {"stacking": self.plan}
        else:
            planned = {"stacking": self.stacking, "rotation": self.rotation}
        try:
            stats, dropped = _statistics_and_drops(self.batch, self.features, self.topology, config=self.config,
                                                   num_threads=self.num_threads, **planned)
        except LimitExceededError as err:
            return None, err
        self.__dict__["_dropped"] = dropped
        return stats, None

    @cached_property
    def result(self) -> PreprocessResult:
        """:func:`~scwork.sharding.preprocess` under :attr:`limits` (CSR buffers and statistics).

        Raises
        ------
        LimitExceededError
            A stream is over its limits and ``config.allow_id_dropping`` is off (the
            message is also in :attr:`error`; :attr:`observed` has the counts).
        """
        stats, error = self._limited
        if stats is None:
            raise error
        return preprocess(self.batch, self.features, self.topology, self.plan, self.config,
                          num_threads=self.num_threads)

    @property
    def stats(self):
        """Statistics under :attr:`limits` (an :class:`xarray.Dataset`, as :attr:`result`'s; raises as it)."""
        stats, error = self._limited
        if stats is None:
            raise error
        return stats

    @property
    def error(self) -> str:
        """Why the run under the limits failed, or ``""`` when it did not."""
        error = self._limited[1]
        return "" if error is None else str(error)

    @property
    def within_limits(self) -> bool:
        """True when the run under the limits succeeded (possibly dropping ids)."""
        return not self.error

    @property
    def over_limits(self) -> bool:
        """True when some stream is over its limits: the run failed, or dropped ids."""
        stats, _ = self._limited
        # a non-zero dropped_ids, as the engine found it (_statistics_and_drops)
        return stats is None or self.__dict__["_dropped"]

    def _observed_args(self):
        plan = self._plan(dict.fromkeys(self.limits, (None, None)))
        config = dataclasses.replace(self.config, max_ids_per_chip_per_sample=None)
        return plan, config

    @cached_property
    def observed(self):
        """Statistics with no limit at all (no dropping, no per-chip cap): what each limit
        would have to be (an :class:`xarray.Dataset`)."""
        plan, config = self._observed_args()
        return compute_stats(self.batch, self.features, self.topology, plan, config, num_threads=self.num_threads)

    @cached_property
    def observed_result(self) -> PreprocessResult:
        """:func:`~scwork.sharding.preprocess` of the same ids with no limit (CSR buffers included)."""
        plan, config = self._observed_args()
        return preprocess(self.batch, self.features, self.topology, plan, config, num_threads=self.num_threads)

    @property
    def effective_stats(self):
        """The statistics to look at: :attr:`stats` when the limits hold, else :attr:`observed`."""
        stats, _ = self._limited
        return stats if stats is not None else self.observed

    @property
    def effective_result(self) -> PreprocessResult:
        """The run to look at with its CSR buffers: :attr:`result` when the limits hold, else
        :attr:`observed_result`."""
        return self.result if self.within_limits else self.observed_result

    @cached_property
    def csr_footprint(self) -> dict[str, dict[str, int]]:
        """Per stack, of the run :attr:`effective_stats` describes: ``entries_per_device`` (all
        SparseCores) and ``bytes_per_device`` (row pointers, embedding ids, sample ids and gains
        of one device), as :func:`~scwork.sharding.preprocess` sizes its CSR buffers.

        Computed from the statistics without building the buffers: a SparseCore's buffer
        holds the static size when one is set, else ``round_up(max_ids_per_partition, 8) * P``
        entries, else (no limit) the longest slice, ``sum over partitions of
        round_up(kept ids, 8)`` (at least 8); ``max(P, 8)`` int32 row pointers and 4-byte
        embedding ids, sample ids and gains.
        """
        stats = self.effective_stats
        plan = self.plan if self.within_limits else self._observed_args()[0]
        S, P = self.topology.sparsecores_per_device, self.topology.num_partitions
        rows = max(P, 8)
        out = {}
        for st in plan.stacks:
            per_sc = st.static_buffer_size_per_sc(S)
            if per_sc is None and st.max_ids_per_partition is not None:
                per_sc = round_up(st.max_ids_per_partition, 8) * P
            if per_sc is None:
                kept = stats["kept_ids"].sel(stack=st.name).values
                per_sc = max(8, int(round_up(kept, 8).sum(axis=-1).max()) if kept.size else 8)
            out[st.name] = {"entries_per_device": int(S * per_sc),
                            "bytes_per_device": int(S * rows * 4 + S * per_sc * 12)}
        return out

    # -- mini-batches ---------------------------------------------------------------
    def _count_minibatches(self) -> MinibatchCounts:
        from scwork.sharding.minibatch import minibatch

        config = self.config
        try:
            counts = minibatch(self.batch, self.features, self.topology, strategy="vocabulary", stacking=self.plan,
                               config=config, num_threads=self.num_threads).num_minibatches
            return MinibatchCounts({str(n): int(counts.sel(stack=n)) for n in counts["stack"].values}, {})
        except ScworkError:
            pass
        # One stack that no split can fit (a single bucket over its limit) fails the
        # whole call: ask again stack by stack so the others still get a count, the
        # one of their combined split (the library ORs the masks of every stack).
        counts_by_stack: dict[str, int | None] = {}
        notes = {}
        plan = self.plan
        combined = 0
        for st in plan.stacks:
            alone = StackingPlan([st], self.topology, plan.rotation, plan.batch_size)
            try:
                mb = minibatch(self.batch.select([f.name for f in st.features]), st.features, self.topology,
                               strategy="vocabulary", stacking=alone, config=config, num_threads=self.num_threads)
                combined |= int(mb.assignment["stack_split_mask"].sel(stack=st.name))
                counts_by_stack[st.name] = 0            # set below, from the combined mask
            except ScworkError as err:
                counts_by_stack[st.name] = None
                notes[st.name] = f"no mini-batch split fits: {err}"
        count = bin(combined).count("1") + 1
        return MinibatchCounts({name: None if c is None else count for name, c in counts_by_stack.items()}, notes)

    @cached_property
    def minibatches(self) -> MinibatchCounts:
        """Vocabulary mini-batches of the batch (:func:`~scwork.sharding.minibatch`).

        One split for the whole batch, as jax-tpu-embedding makes it: every stack that
        can be split has the same count. One per stack when no stream is over its
        limits: the mini-batching bucket tree never splits then, so the second engine
        pass is skipped.
        """
        if not self.over_limits:
            return MinibatchCounts({st.name: 1 for st in self.plan.stacks}, {})
        return self._count_minibatches()

    def compute(self) -> Scenario:
        """Compute the run, and when it is over its limits the observed run and the
        mini-batch counts side by side (the second on a background thread: the numba
        kernels release the GIL). Returns this scenario; later reads are cached."""
        if self.over_limits and "minibatches" not in self.__dict__:
            future = _background().submit(self._count_minibatches)
            if self._limited[0] is None:
                self.observed               # noqa: B018  (computed meanwhile)
            self.__dict__["minibatches"] = future.result()
        return self

    # -- per table ------------------------------------------------------------------
    @cached_property
    def by_table(self):
        """Observed statistics of every table on its own, at its place in its stack.

        Each table becomes a one-table stack that keeps its shard rotation and row
        offset, so its ids land on exactly the partitions they land on in the stack
        and, streams being disjoint per table, the stack's counts are the sums of its
        tables' counts. Dim ``stack`` of the result holds table names.
        """
        singles = []
        plan = self.plan
        for st in plan.stacks:
            for t in st.tables:
                singles.append(dataclasses.replace(
                    st, name=t.table.name, tables=(dataclasses.replace(t, stack=t.table.name),),
                    features=tuple(f for f in st.features if f.table.name == t.table.name),
                    max_ids_per_partition=None, max_unique_ids_per_partition=None))
        per_table = StackingPlan(singles, self.topology, plan.rotation, plan.batch_size)
        config = dataclasses.replace(self.config, allow_id_dropping=False, max_ids_per_chip_per_sample=None)
        return compute_stats(self.batch, self.features, self.topology, per_table, config,
                             num_threads=self.num_threads)

    def __repr__(self) -> str:
        state = "not run" if "_limited" not in self.__dict__ else ("within limits" if self.within_limits
                                                                   else "over limits")
        return (f"Scenario({self.batch.batch_size} samples x {len(self.batch.feature_names)} features on "
                f"{self.topology}, stacking={self.stacking!r}, {state})")
