"""Feature stacking and table stacking ([jte] table_stacking.py).

A *stack* is one logical table made of several tables concatenated row-wise; its
input is the concatenation of the inputs of every feature that looks up one of its
tables. With ``P`` partitions (SparseCores of the whole system):

- every table is padded: ``padded_vocab = round_up(vocab, 8 * P)``,
  ``padded_dim = round_up(dim, 8)``; the stack's width is the largest padded dim;
- table ``i`` of a stack starts at ``row_offset_in_shard_i = sum_{j<i} padded_vocab_j / P``
  inside every shard and is rotated by ``shard_rotation_i = (i * rotation) % P``
  (``rotation`` defaults to ``S``, the SparseCores of one device), used as the
  ``col_shift`` of the id transform ``partition = (id + col_shift) % P``,
  ``local row = id // P + row_offset_in_shard``;
- feature ``k`` of a stack gets row offset ``sum_{j<k} batch_j`` (feature stacking:
  each feature's samples are their own rows).

:func:`plan_stacking` builds a :class:`StackingPlan` from manual groups, automatic
grouping (``"auto"``) or no stacking. Automatic stacking groups tables by
``(padded dim, optimizer, combiner, quantization)`` in the order the tables first
appear in the flattened feature list (a dict of features in sorted key order) and
splits each group greedily (first fit) so that its activation memory,
``sum of padded_dim * samples_per_sc * 4 B``, stays within a budget (2 MiB by
default), where ``samples_per_sc = batch // P`` for each feature of the table.
jax-tpu-embedding 0.2.0's docstring says "alphabetical order"; its code (and so
scwork) uses first appearance, which the oracle tests check against the library.

Reference: ``jax_tpu_embedding/sparsecore/lib/nn/table_stacking.py``
(``_compute_table_to_setting_in_stack``, ``_stack_feature_specs``,
``_group_tables_for_stacking``, ``_split_groups_by_memory_limit``, ``_get_stack_name``).
Limits of a stack (``_get_limits_for_stack``): a stack of one table has that table's
limits; a stack of several tables ignores its tables' limits and gets the library's
default, ``stack_to_max_ids_per_partition(stack, samples)`` = 256 (``get_default_limits``),
unless ``stack_limits`` names the stack. ``stack_limit_rule="largest_table"`` keeps
scwork's earlier choice instead: the largest limit its tables set. Where scwork
deliberately differs: a table may leave its limits unset (no limit; the library's
``TableSpec`` defaults to 256), and a stack of such tables has no limits either.

Examples
--------
>>> import scwork
>>> from scwork.sharding import TableSpec, FeatureSpec, plan_stacking
>>> t0, t1 = TableSpec("t0", 100, 16), TableSpec("t1", 30, 16)
>>> feats = [FeatureSpec("f0", t0), FeatureSpec("f1", t1), FeatureSpec("f2", t0)]
>>> plan = plan_stacking(feats, scwork.Topology(2, 2), stacking=[["t0", "t1"]])
>>> st = plan.stacks[0]
>>> st.name, [t.row_offset_in_shard for t in st.tables], [t.shard_rotation for t in st.tables]
('t0_t1', [0, 32], [0, 2])
>>> [t.padded_vocab_size for t in st.tables], st.rows_per_shard
([128, 32], 40)
>>> [f.name for f in st.features]
['f0', 'f1', 'f2']
"""

from __future__ import annotations

import dataclasses

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from scwork._validate import integer
from scwork.errors import ConfigError
from scwork.hardware.topology import Topology
from scwork.sharding.specs import INT32_MAX, FeatureSpec, SparsecoreConfig, TableSpec, round_up

__all__ = [
    "TableInStack",
    "Stack",
    "StackingPlan",
    "plan_stacking",
    "normalize_features",
    "stack_name",
    "DEFAULT_ACTIVATION_MEM_BYTES_LIMIT",
    "DEFAULT_STACK_LIMIT",
    "STACK_LIMIT_RULES",
]

#: Activation-memory budget of one automatic stack (``auto_stack_tables`` default: 2 MiB).
DEFAULT_ACTIVATION_MEM_BYTES_LIMIT = 2048 * 1024

#: Limits of a stack of several tables: jax-tpu-embedding's ``get_default_limits`` (256).
DEFAULT_STACK_LIMIT = 256

#: How a stack of several tables gets its limits (``plan_stacking(stack_limit_rule=...)``).
STACK_LIMIT_RULES = ("jax_tpu_embedding", "largest_table")

StackingArg = Union[str, None, Sequence[Sequence[str]], "StackingPlan"]


@dataclass(frozen=True)
class TableInStack:
    """Where one table sits in its stack (``TableSettingInStack`` of jax-tpu-embedding)."""

    table: TableSpec
    """The table."""
    stack: str
    """Name of its stack."""
    position: int
    """Index of the table in the stack (0-based)."""
    padded_vocab_size: int
    """``round_up(vocab_size, 8 * P)``. Unit: rows."""
    padded_embedding_dim: int
    """``round_up(embedding_dim, 8)`` of this table. Unit: float32 values."""
    row_offset_in_shard: int
    """First row of this table inside every shard of the stack. Unit: rows."""
    shard_rotation: int
    """``(position * rotation) % P``; the ``col_shift`` of the id transform."""
    num_partitions: int
    """``P``, the partitions the table is sharded over."""

    def __post_init__(self) -> None:
        # jax-tpu-embedding applies the rotation modulo the partitions (its id
        # transformation puts id i in partition (i + col_shift) % P), so a rotation of P
        # or more is that rotation reduced; the kernels take 0 <= shard_rotation < P.
        P = integer("TableInStack.num_partitions", self.num_partitions, minimum=1)
        rotation = integer("TableInStack.shard_rotation", self.shard_rotation, minimum=0,
                           context=f"table {self.stack!r}/{getattr(self.table, 'name', self.table)!r}")
        object.__setattr__(self, "shard_rotation", rotation % P)

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def col_shift(self) -> int:
        """Same as :attr:`shard_rotation` (the id transform's name for it)."""
        return self.shard_rotation

    @property
    def rows_per_shard(self) -> int:
        """Rows of this table in every shard (``padded_vocab_size / P``)."""
        return self.padded_vocab_size // self.num_partitions


@dataclass(frozen=True)
class Stack:
    """One stacked table: its tables, features, width and limits."""

    name: str
    """Stack name (``"_".join(table names)``, shortened with a hash past 50 characters)."""
    tables: tuple[TableInStack, ...]
    """Tables in stack order."""
    features: tuple[FeatureSpec, ...]
    """Features looking up the stack's tables, in stack (row offset) order."""
    embedding_dim: int
    """Width of the stack: the largest padded dim of its tables. Unit: float32 values."""
    optimizer: str
    """Optimizer shared by the tables."""
    combiner: str
    """Combiner shared by the tables."""
    num_partitions: int
    """``P``."""
    max_ids_per_partition: int | None
    """Configured limit on ids per (source SC, partition); None: not configured."""
    max_unique_ids_per_partition: int | None
    """Configured limit on distinct ids per (source SC, partition); None: not configured."""
    suggested_coo_buffer_size_per_device: int | None = None
    """Static CSR buffer size of one device (jax-tpu-embedding's
    ``StackedTableSpec.suggested_coo_buffer_size_per_device``): the table's own value for
    a table left unstacked, None for stacks built by stacking (the library drops it
    there), or ``stack_limits[name]["suggested_coo_buffer_size_per_device"]``. Unit:
    CSR entries. None: sized from ``max_ids_per_partition``."""
    activation_mem_bytes_limit: int = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT
    """The activation memory budget the stack was built with (jax-tpu-embedding's
    ``StackedTableSpec.activation_mem_bytes_limit``, saved in the checkpoint's
    ``EmbeddingSpecProto``): the ``activation_mem_bytes_limit`` of
    :func:`plan_stacking` for stacks it groups, the library's default (2 MiB) for
    tables left unstacked. Unit: bytes."""

    def static_buffer_size_per_sc(self, sparsecores_per_device: int) -> int | None:
        """CSR entries one SparseCore's buffer holds when the size is static, else None.

        ``round_up(suggested, 8 * S) / S`` (jax-tpu-embedding's ``MayBeUpdateBufferSize``:
        every SparseCore's share stays aligned to 8 entries).
        """
        if self.suggested_coo_buffer_size_per_device is None:
            return None
        S = sparsecores_per_device
        return round_up(self.suggested_coo_buffer_size_per_device, 8 * S) // S

    @property
    def vocab_size(self) -> int:
        """Rows of the stack: sum of padded vocabularies."""
        return sum(t.padded_vocab_size for t in self.tables)

    @property
    def rows_per_shard(self) -> int:
        """Rows of the stack in every shard (``vocab_size / P``)."""
        return self.vocab_size // self.num_partitions

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(t.table.name for t in self.tables)

    def table(self, name: str) -> TableInStack:
        for t in self.tables:
            if t.table.name == name:
                return t
        raise ConfigError(f"table {name!r} is not in stack {self.name!r} (tables: {list(self.table_names)})")

    def feature_position(self, name: str) -> int:
        """Index ``k`` of feature ``name`` in the stack; its row offset is ``k * batch``."""
        for k, f in enumerate(self.features):
            if f.name == name:
                return k
        raise ConfigError(f"feature {name!r} is not in stack {self.name!r}")

    def activation_bytes(self, batch_size: int) -> int:
        """``sum over features of padded_dim * (batch // P) * 4`` (the auto-stacking measure)."""
        return sum(self.table(f.table.name).padded_embedding_dim * (batch_size // self.num_partitions) * 4
                   for f in self.features)


def normalize_features(features: Any) -> tuple[FeatureSpec, ...]:
    """Features as a tuple, checking names are unique and tables consistent."""
    if isinstance(features, FeatureSpec):
        features = [features]
    elif isinstance(features, Mapping):
        for key, f in features.items():
            if isinstance(f, FeatureSpec) and f.name != key:
                raise ConfigError(f"features[{key!r}] is FeatureSpec {f.name!r}; keys must match names")
        # jax-tpu-embedding flattens features with jax.tree.leaves: a dict in sorted
        # key order. Stack order follows this flattened order.
        features = [features[key] for key in sorted(features)]
    try:
        features = tuple(features)
    except TypeError:
        raise ConfigError(f"features must be a list of FeatureSpec, got {type(features).__name__}") from None
    if not features:
        raise ConfigError("features is empty; give at least one FeatureSpec")
    seen: set[str] = set()
    tables: dict[str, TableSpec] = {}
    for f in features:
        if not isinstance(f, FeatureSpec):
            raise ConfigError(f"features must be FeatureSpec objects, got {f!r}")
        if f.name in seen:
            raise ConfigError(f"feature name {f.name!r} appears twice")
        seen.add(f.name)
        other = tables.setdefault(f.table.name, f.table)
        # identity first: a dataclass compares every field even with itself
        if other is not f.table and other != f.table:
            raise ConfigError(
                f"two different tables are named {f.table.name!r}: {other} and {f.table}; "
                "table names must be unique"
            )
    return features


def stack_name(table_names: Sequence[str], max_length: int = 50, hash_length: int = 12) -> str:
    """``"_".join(table_names)``, cut at ``max_length`` plus ``"..." + sha256[:hash_length]``.

    >>> stack_name(["a", "b"])
    'a_b'
    >>> len(stack_name([f"table_{i}" for i in range(20)]))
    65
    """
    name = "_".join(table_names)
    if len(name) <= max_length:
        return name
    return name[:max_length] + "..." + hashlib.sha256(name.encode("utf-8")).hexdigest()[:hash_length]


class StackingPlan:
    """Stacks of a model on a topology: inspectable with :meth:`to_dataset` and ``repr``.

    Build it with :func:`plan_stacking`.
    """

    def __init__(self, stacks: Sequence[Stack], topology: Topology, rotation: int,
                 batch_size: int | None = None):
        self.stacks: tuple[Stack, ...] = tuple(stacks)
        self.topology = topology
        self.rotation = rotation
        self.batch_size = batch_size
        self._by_table = {t.table.name: (s, t) for s in self.stacks for t in s.tables}
        self._by_feature = {f.name: s for s in self.stacks for f in s.features}

    @property
    def num_partitions(self) -> int:
        return self.topology.num_partitions

    @property
    def features(self) -> tuple[FeatureSpec, ...]:
        return tuple(f for s in self.stacks for f in s.features)

    def stack(self, name: str) -> Stack:
        """The stack called ``name``."""
        for s in self.stacks:
            if s.name == name:
                return s
        raise ConfigError(f"no stack {name!r}; stacks are {[s.name for s in self.stacks]}")

    def stack_of_table(self, table: str) -> Stack:
        try:
            return self._by_table[table][0]
        except KeyError:
            raise ConfigError(f"no table {table!r} in this plan") from None

    def stack_of_feature(self, feature: str) -> Stack:
        try:
            return self._by_feature[feature]
        except KeyError:
            raise ConfigError(f"no feature {feature!r} in this plan") from None

    def table(self, name: str) -> TableInStack:
        """The :class:`TableInStack` of table ``name``."""
        self.stack_of_table(name)
        return self._by_table[name][1]

    def to_dataset(self):
        """The plan as an :class:`xarray.Dataset` with dims ``table``, ``feature``, ``stack``.

        Examples
        --------
        >>> import scwork
        >>> from scwork.sharding import TableSpec, FeatureSpec, plan_stacking
        >>> feats = [FeatureSpec("f0", TableSpec("t0", 100, 16)), FeatureSpec("f1", TableSpec("t1", 30, 12))]
        >>> ds = plan_stacking(feats, scwork.Topology(2, 2), stacking=[["t0", "t1"]]).to_dataset()
        >>> ds["row_offset_in_shard"].values.tolist(), ds["col_shift"].values.tolist()
        ([0, 32], [0, 2])
        >>> ds["stack_vocab_size"].sel(stack="t0_t1").item()
        160
        """
        import numpy as np
        import xarray as xr

        P = self.num_partitions
        tables = [(s, t) for s in self.stacks for t in s.tables]
        feats = [(s, k, f) for s in self.stacks for k, f in enumerate(s.features)]

        def var(dim, values, long_name, units="1", dtype=None):
            return xr.Variable(dim, np.asarray(values, dtype=dtype),
                               attrs={"long_name": long_name, "units": units})

        data = {
            "stack_of_table": var("table", [s.name for s, _ in tables], "stack holding the table", "", object),
            "position": var("table", [t.position for _, t in tables], "index of the table in its stack"),
            "vocab_size": var("table", [t.table.vocab_size for _, t in tables], "vocabulary size", "rows"),
            "embedding_dim": var("table", [t.table.embedding_dim for _, t in tables], "embedding dim",
                                 "float32 values"),
            "padded_vocab_size": var("table", [t.padded_vocab_size for _, t in tables],
                                     "round_up(vocab_size, 8 * P)", "rows"),
            "padded_embedding_dim": var("table", [t.padded_embedding_dim for _, t in tables],
                                        "round_up(embedding_dim, 8)", "float32 values"),
            "row_offset_in_shard": var("table", [t.row_offset_in_shard for _, t in tables],
                                       "first row of the table in every shard", "rows"),
            "col_shift": var("table", [t.shard_rotation for _, t in tables],
                             "shard rotation (col_shift): partition = (id + col_shift) % P", "partitions"),
            "col_offset": var("table", [t.row_offset_in_shard * P for _, t in tables],
                              "row_offset_in_shard * P (the id transform's col_offset)", "ids"),
            "combiner": var("table", [t.table.combiner for _, t in tables], "row combiner", "", object),
            "optimizer": var("table", [t.table.optimizer for _, t in tables], "optimizer", "", object),
            "stack_of_feature": var("feature", [s.name for s, _, _ in feats], "stack of the feature", "",
                                    object),
            "table_of_feature": var("feature", [f.table.name for _, _, f in feats], "table looked up", "",
                                    object),
            "feature_position": var("feature", [k for _, k, _ in feats], "index of the feature in its stack"),
            "stack_num_tables": var("stack", [len(s.tables) for s in self.stacks], "tables in the stack"),
            "stack_num_features": var("stack", [len(s.features) for s in self.stacks], "features in the stack"),
            "stack_vocab_size": var("stack", [s.vocab_size for s in self.stacks],
                                    "rows of the stack (sum of padded vocabularies)", "rows"),
            "stack_rows_per_shard": var("stack", [s.rows_per_shard for s in self.stacks],
                                        "rows of the stack in every shard", "rows"),
            "stack_embedding_dim": var("stack", [s.embedding_dim for s in self.stacks],
                                       "stack width (largest padded dim)", "float32 values"),
            "stack_bytes": var("stack", [s.vocab_size * s.embedding_dim * 4 for s in self.stacks],
                               "float32 size of the stacked table", "bytes"),
            "configured_max_ids_per_partition": var(
                "stack", [-1 if s.max_ids_per_partition is None else s.max_ids_per_partition
                          for s in self.stacks], "configured max ids per partition (-1: none)", "ids"),
            "configured_max_unique_ids_per_partition": var(
                "stack", [-1 if s.max_unique_ids_per_partition is None else s.max_unique_ids_per_partition
                          for s in self.stacks], "configured max unique ids per partition (-1: none)", "ids"),
        }
        if self.batch_size is not None:
            B = self.batch_size
            data["feature_row_offset"] = var("feature", [k * B for _, k, _ in feats],
                                             "row offset of the feature in the stacked input", "samples")
            data["stack_activation_bytes"] = var(
                "stack", [s.activation_bytes(B) for s in self.stacks],
                "sum of padded_dim * samples_per_sc * 4 over the stack's features", "bytes")
            data["stack_samples"] = var("stack", [len(s.features) * B for s in self.stacks],
                                        "samples of the stacked input", "samples")
        ds = xr.Dataset(
            data,
            coords={
                "table": [t.table.name for _, t in tables],
                "feature": [f.name for _, _, f in feats],
                "stack": [s.name for s in self.stacks],
            },
            attrs={"num_partitions": P, "rotation": self.rotation, "topology": str(self.topology),
                   "batch_size": -1 if self.batch_size is None else self.batch_size},
        )
        return ds

    def _repr_html_(self) -> str:
        from scwork._html import html_table

        rows = [(s.name, ", ".join(s.table_names), ", ".join(f.name for f in s.features), s.vocab_size,
                 s.embedding_dim, s.optimizer, s.combiner, s.max_ids_per_partition, s.max_unique_ids_per_partition)
                for s in self.stacks]
        caption = (f"StackingPlan: {len(self.stacks)} stacks, P={self.num_partitions}, rotation={self.rotation}"
                   + (f", batch_size={self.batch_size}" if self.batch_size is not None else ""))
        return html_table(rows, header=("stack", "tables", "features", "rows", "width", "optimizer", "combiner",
                                        "max_ids_per_partition", "max_unique_ids_per_partition"), caption=caption)

    def __repr__(self) -> str:
        lines = [f"StackingPlan({len(self.stacks)} stacks, P={self.num_partitions}, rotation={self.rotation}"
                 + (f", batch_size={self.batch_size})" if self.batch_size is not None else ")")]
        for s in self.stacks:
            limits = ""
            if s.max_ids_per_partition is not None or s.max_unique_ids_per_partition is not None:
                limits = f", limits ids<={s.max_ids_per_partition} unique<={s.max_unique_ids_per_partition}"
            lines.append(f"  {s.name}: {len(s.tables)} tables, {len(s.features)} features, "
                         f"{s.vocab_size} rows x {s.embedding_dim}, {s.optimizer}/{s.combiner}{limits}")
            for t in s.tables:
                lines.append(f"    {t.table.name:<20} vocab {t.table.vocab_size:>11} -> {t.padded_vocab_size:>11}"
                             f"  row_offset_in_shard {t.row_offset_in_shard:>9}  col_shift {t.shard_rotation:>4}")
        return "\n".join(lines)


def _stack_limits(stack: str, tables: Sequence[TableSpec], P: int, config: SparsecoreConfig,
                  overrides: Mapping[str, Any] | None,
                  rule: str = "jax_tpu_embedding") -> tuple[int | None, int | None]:
    if overrides and stack in overrides:
        value = overrides[stack]
        if isinstance(value, Mapping):
            pair = (value.get("max_ids_per_partition"), value.get("max_unique_ids_per_partition"))
        elif isinstance(value, (tuple, list)) and len(value) == 2:
            pair = (value[0], value[1])
        else:
            raise ConfigError(
                f"stack_limits[{stack!r}] must be (max_ids, max_unique_ids) or a dict, got {value!r}"
            )
        for v in pair:
            # the library's limits are int32 fields, and TableSpec caps its own the same way
            if not _int32_limit(v):
                raise ConfigError(f"stack_limits[{stack!r}]: limits must be positive ints up to {INT32_MAX} (ids "
                                  f"per partition) or None, got {v!r}")
        return pair  # type: ignore[return-value]
    configured = [(t.max_ids_per_partition, t.max_unique_ids_per_partition, *config.table_limits(t.name, P))
                  for t in tables]
    if len(tables) > 1 and rule == "jax_tpu_embedding":
        # _get_limits_for_stack: the tables' own limits are ignored for a stack of
        # several tables; the stack gets the default limits. scwork lets a table leave
        # its limits unset (no limit, where the library's TableSpec defaults to 256): a
        # stack of such tables stays unconfigured.
        if any(v is not None for limits in configured for v in limits):
            return DEFAULT_STACK_LIMIT, DEFAULT_STACK_LIMIT
        return None, None
    ids, uniq = [], []
    for t in tables:
        from_table = config.table_limits(t.name, P)
        a = t.max_ids_per_partition if t.max_ids_per_partition is not None else from_table[0]
        b = t.max_unique_ids_per_partition if t.max_unique_ids_per_partition is not None else from_table[1]
        if a is not None:
            ids.append(a)
        if b is not None:
            uniq.append(b)
    return (max(ids) if ids else None, max(uniq) if uniq else None)


def _stack_buffer(stack: str, default: int | None, overrides: Mapping[str, Any] | None, max_ids: int | None,
                  topology: Topology) -> int | None:
    """The stack's static CSR buffer per device (checked against its theoretical maximum)."""
    value = default
    if overrides and stack in overrides and isinstance(overrides[stack], Mapping) \
            and "suggested_coo_buffer_size_per_device" in overrides[stack]:
        value = overrides[stack]["suggested_coo_buffer_size_per_device"]
        if not _int32_limit(value):
            raise ConfigError(f"stack_limits[{stack!r}]: suggested_coo_buffer_size_per_device must be a positive "
                              f"int (CSR entries per device) or None, got {value!r}")
    if value is None or max_ids is None:
        return value
    S, P = topology.sparsecores_per_device, topology.num_partitions
    rounded = round_up(value, 8 * S)
    theoretical = round_up(max_ids, 8) * S * P
    if rounded > theoretical:
        # The library aborts here (a CHECK failure in MayBeUpdateBufferSize).
        raise ConfigError(
            f"stack {stack!r}: suggested_coo_buffer_size_per_device {value} (rounded up to {rounded}, a multiple "
            f"of 8 x {S} SparseCores) exceeds the largest buffer its limits can fill, round_up(max_ids_per_partition"
            f"={max_ids}, 8) x {S} x {P} = {theoretical} entries per device; lower the suggestion or raise "
            f"max_ids_per_partition")
    return value


#: Plans of recent calls, by their arguments (see :func:`_plan_key`).
_PLAN_CACHE: dict[tuple, "StackingPlan"] = {}
_PLAN_CACHE_SIZE = 32


class _FeaturesKey:
    """A tuple of FeatureSpec with its hash computed once (a dataclass hashes all its fields per call)."""

    __slots__ = ("items", "_hash")

    def __init__(self, items: tuple):
        self.items = items
        self._hash = hash(items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, _FeaturesKey) and (self is other or self.items == other.items)


_FEATURES_KEYS: dict[tuple[int, ...], _FeaturesKey] = {}


def _features_key(features) -> _FeaturesKey:
    """The :class:`_FeaturesKey` of ``features``, the same object for the same FeatureSpec objects.

    Callers pass the same list again and again (every engine call of a scenario, a
    collect_stats step): looked up by the objects' identity first, so that the
    26 dataclass hashes are computed once.
    """
    ids = tuple(map(id, features))
    key = _FEATURES_KEYS.get(ids)
    if key is not None:              # its items are alive (the key holds them): the ids are theirs
        return key
    key = _FeaturesKey(tuple(features))
    if len(_FEATURES_KEYS) >= 64:
        _FEATURES_KEYS.clear()          # full: start again (no eviction to race with another thread)
    _FEATURES_KEYS[ids] = key            # the key holds the objects: their ids stay theirs
    return key


def _plan_key(features, topology, stacking, batch_size, rotation, activation_mem_bytes_limit, config, stack_limits,
              stack_limit_rule) -> tuple | None:
    """A key of :func:`plan_stacking`'s arguments, or None when they have none (one that does
    not hash, e.g. a list given for a number, is found out by the lookup: not kept).

    Every engine call plans its stacks, and the paths built on it (``collect_stats``
    over many steps, the explorers' scenarios) plan the same ones again and again:
    building 26 stacks of checked dataclasses is about 0.3 ms, a tenth of a call's
    serial time. Plans never change once made, so equal arguments may share one.
    Only plain arguments are keyed: a list or tuple of FeatureSpec, stacking None, a
    string or a StackingPlan (by identity), stack_limits of plain pairs. The types of the
    numbers are part of the key (``True == 1`` must not find the plan of 1).
    ``stack_limits`` is keyed when every value is a tuple of ints or None (what
    :class:`~scwork.sharding.Scenario` passes), in the mapping's order.
    """
    from scwork.sharding.specs import FeatureSpec

    if not isinstance(features, (list, tuple)):
        return None
    features_key = _FEATURES_KEYS.get(tuple(map(id, features)))
    if features_key is None:         # not seen: every item must be a FeatureSpec to be keyed
        if not all(type(f) is FeatureSpec for f in features):
            return None
        features_key = _features_key(features)
    if not (stacking is None or isinstance(stacking, (str, StackingPlan))):
        return None
    limits_key = None                       # an empty stack_limits plans as None does
    if stack_limits is not None:
        if not isinstance(stack_limits, Mapping):
            return None
        # (name, limits) pairs in the mapping's order, each limit with its type; a pair
        # of plain numbers or None only (what Scenario passes: every stack's limits)
        limits_key = []
        for name, value in stack_limits.items():
            if not (type(name) is str and type(value) is tuple
                    and all(v is None or type(v) is int for v in value)):
                return None
            limits_key.append((name, value))
        limits_key = tuple(limits_key) or None
    scalars = (batch_size, rotation, activation_mem_bytes_limit)
    # a StackingPlan compares by identity: the key holds the plan itself, never an id of a dead one
    # (whether it hashes is found out by the cache lookup: hashing it here too doubled the
    # topology's and config's dataclass hashes of every call)
    return (features_key, topology, stacking, scalars, (type(batch_size), type(rotation),
            type(activation_mem_bytes_limit)), config, stack_limit_rule, limits_key)


def plan_stacking(features: Any, topology: Topology, stacking: StackingArg = "auto", *,
                  batch_size: int | None = None, rotation: int | None = None,
                  activation_mem_bytes_limit: int = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
                  config: SparsecoreConfig | None = None,
                  stack_limits: Mapping[str, Any] | None = None,
                  stack_limit_rule: str = "jax_tpu_embedding") -> StackingPlan:
    """Decide the stacks of ``features`` on ``topology``.

    Parameters
    ----------
    features : sequence or mapping of FeatureSpec
        The features; their tables are stacked.
    topology : scwork.Topology
        Gives ``P`` (partitions) and ``S`` (default rotation).
    stacking : "auto", None, list of lists of table names, or StackingPlan
        ``"auto"`` (default): automatic grouping (needs ``batch_size``); ``None``
        (or ``"none"``): every table alone; a list such as ``[["t0", "t1"], ["t2"]]``:
        manual groups, tables not listed stay alone; a :class:`StackingPlan`: used as
        is after checking it matches ``topology`` (every stack and table built for its
        ``P``) and ``features`` (its own limits
        are kept, except for the stacks named in ``stack_limits``, which override them).
        ``config.disable_table_stacking`` forces ``None`` (except for a plan).
    batch_size : int, optional
        Samples per feature; needed by ``"auto"`` (activation memory) and for the
        feature row offsets shown by :meth:`StackingPlan.to_dataset`.
    rotation : int, optional
        Shard rotation step between successive tables of a stack; default ``S``.
    activation_mem_bytes_limit : int
        Budget of one automatic stack, in bytes. Default 2 MiB. Recorded on every
        stack built from groups (``Stack.activation_mem_bytes_limit``, as the
        library's stacking functions do); tables left unstacked keep the default.
    config : SparsecoreConfig, optional
        For ``disable_table_stacking`` and table-level limits.
    stack_limits : dict, optional
        ``{stack name: (max_ids_per_partition, max_unique_ids_per_partition)}``:
        overrides the limits derived from the tables.
    stack_limit_rule : {"jax_tpu_embedding", "largest_table"}
        Limits of a stack of several tables not named in ``stack_limits``:
        ``"jax_tpu_embedding"`` (default, what the library does) gives it
        :data:`DEFAULT_STACK_LIMIT` (256) for both limits whatever its tables set
        (when at least one of them, or ``config``, sets a limit: a stack of tables
        without limits has none);
        ``"largest_table"`` gives it the largest limit its tables set (None when
        none does). A stack of one table always has that table's limits.

    Raises
    ------
    ConfigError
        Unknown or repeated tables in manual groups, tables of one group with
        different optimizers, combiners or quantization, a stack too large for int32 ids,
        a StackingPlan made for another topology (or with a stack built for another ``P``).

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import TableSpec, FeatureSpec, plan_stacking
    >>> feats = [FeatureSpec(f"f{i}", TableSpec(f"t{i}", 1000, 16)) for i in range(3)]
    >>> plan = plan_stacking(feats, scwork.Topology(4, 4), batch_size=4096)
    >>> [s.name for s in plan.stacks], [t.shard_rotation for t in plan.stacks[0].tables]
    (['t0_t1_t2'], [0, 4, 8])
    >>> small = plan_stacking(feats, scwork.Topology(4, 4), batch_size=4096,
    ...                       activation_mem_bytes_limit=2 * 16 * 256 * 4)
    >>> [s.name for s in small.stacks]
    ['t0_t1', 't2']
    >>> [s.name for s in plan_stacking(feats, scwork.Topology(4, 4), stacking=None).stacks]
    ['t0', 't1', 't2']
    """
    key = _plan_key(features, topology, stacking, batch_size, rotation, activation_mem_bytes_limit, config,
                    stack_limits, stack_limit_rule)
    if key is not None:
        try:
            plan = _PLAN_CACHE.get(key)
        except TypeError:                   # an unhashable argument: not kept
            key = plan = None
        if plan is not None:
            return plan
    plan = _plan_stacking(features, topology, stacking, batch_size=batch_size, rotation=rotation,
                          activation_mem_bytes_limit=activation_mem_bytes_limit, config=config,
                          stack_limits=stack_limits, stack_limit_rule=stack_limit_rule)
    if key is not None:
        if len(_PLAN_CACHE) >= _PLAN_CACHE_SIZE:
            _PLAN_CACHE.pop(next(iter(_PLAN_CACHE)))
        _PLAN_CACHE[key] = plan
    return plan


def _plan_stacking(features: Any, topology: Topology, stacking: StackingArg = "auto", *,
                  batch_size: int | None = None, rotation: int | None = None,
                  activation_mem_bytes_limit: int = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
                  config: SparsecoreConfig | None = None,
                  stack_limits: Mapping[str, Any] | None = None,
                  stack_limit_rule: str = "jax_tpu_embedding") -> StackingPlan:
    """:func:`plan_stacking` without the cache of recent plans."""
    features = normalize_features(features)
    if not isinstance(topology, Topology):
        raise ConfigError(f"topology must be a scwork.Topology, got {type(topology).__name__}")
    P = topology.num_partitions
    S = topology.sparsecores_per_device
    if P < 1:
        raise ConfigError(f"topology {topology} has no SparseCore: SparseCore sharding needs P >= 1")
    config = SparsecoreConfig() if config is None else config
    if not isinstance(config, SparsecoreConfig):
        raise ConfigError(f"config must be a SparsecoreConfig, got {type(config).__name__}")
    if rotation is None:
        rotation = S
    if isinstance(rotation, bool) or not isinstance(rotation, int) or rotation < 0:
        raise ConfigError(f"rotation must be a non-negative int, got {rotation!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or batch_size < 1):
        raise ConfigError(f"batch_size must be a positive int, got {batch_size!r}")
    if stack_limit_rule not in STACK_LIMIT_RULES:
        raise ConfigError(f"stack_limit_rule must be one of {STACK_LIMIT_RULES}, got {stack_limit_rule!r}")
    if isinstance(activation_mem_bytes_limit, bool) or not isinstance(activation_mem_bytes_limit, int) \
            or activation_mem_bytes_limit < 1:
        raise ConfigError(f"activation_mem_bytes_limit must be a positive int, got {activation_mem_bytes_limit!r}")
    if stack_limits is not None and not isinstance(stack_limits, Mapping):
        raise ConfigError("stack_limits must be a dict {stack name: (max_ids, max_unique_ids) or a dict of "
                          f"limits}}, got {type(stack_limits).__name__}")

    tables: dict[str, TableSpec] = {}
    for f in features:
        tables.setdefault(f.table.name, f.table)

    if isinstance(stacking, StackingPlan):
        _check_plan(stacking, features, topology)
        if not stack_limits:
            return stacking
        # Explicit limits override the plan's own; never ignore them silently.
        _check_stack_names(stack_limits, [st.name for st in stacking.stacks])
        stacks = []
        for st in stacking.stacks:
            if st.name in stack_limits:
                max_ids, max_uniq = _stack_limits(st.name, [t.table for t in st.tables], P, config, stack_limits,
                                                  stack_limit_rule)
                st = dataclasses.replace(
                    st, max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_uniq,
                    suggested_coo_buffer_size_per_device=_stack_buffer(
                        st.name, st.suggested_coo_buffer_size_per_device, stack_limits, max_ids, topology))
            stacks.append(st)
        return StackingPlan(stacks, stacking.topology, stacking.rotation, stacking.batch_size)
    # Groups the library stacks itself (stack_tables, auto_stack_tables) keep the
    # flattened feature order; tables left unstacked get a stack of their own from
    # prepare_feature_specs_for_training, which orders their features by name.
    unstacked: set[str] = set()
    if config.disable_table_stacking or stacking is None or (isinstance(stacking, str) and stacking == "none"):
        groups = [[name] for name in tables]
        unstacked = set(tables)
    elif isinstance(stacking, str):
        if stacking != "auto":
            raise ConfigError(f"stacking must be 'auto', None, a list of table groups or a StackingPlan, "
                              f"got {stacking!r}")
        if batch_size is None:
            raise ConfigError("stacking='auto' needs batch_size (activation memory per stack); "
                              "pass batch_size=... or give manual groups")
        groups = _auto_groups(features, tables, P, batch_size, activation_mem_bytes_limit)
    else:
        groups = _manual_groups(stacking, tables)
        listed = {name for group in stacking for name in group}
        unstacked = {name for name in tables if name not in listed}

    features_of = _features_by_table(features)
    stacks = []
    for group in groups:
        specs = [tables[n] for n in group]
        name = stack_name(group) if len(group) > 1 else group[0]
        opt = {t.optimizer for t in specs}
        comb = {t.combiner for t in specs}
        if len(opt) > 1:
            raise ConfigError(f"tables {group} in stack {name!r} have different optimizers {sorted(opt)}; "
                              "stack only tables with the same optimizer")
        if len(comb) > 1:
            raise ConfigError(f"tables {group} in stack {name!r} have different combiners {sorted(comb)}; "
                              "stack only tables with the same combiner")
        if len({t.quantization for t in specs}) > 1:
            raise ConfigError(f"tables {group} in stack {name!r} have different quantization settings; "
                              "stack only tables with the same TableSpec.quantization")
        in_stack = []
        offset = 0
        for i, t in enumerate(specs):
            pv = t.padded_vocab_size(P)
            in_stack.append(TableInStack(t, name, i, pv, t.padded_embedding_dim(), offset,
                                         (i * rotation) % P, P))
            offset += pv // P
        if offset * P > INT32_MAX:
            raise ConfigError(
                f"stack {name!r} has {offset * P} rows; embedding ids are int32 on the device, so a "
                f"stack holds at most {INT32_MAX} rows: split it into smaller stacks"
            )
        feats = _group_features(group, features, features_of, unstacked)
        max_ids, max_uniq = _stack_limits(name, specs, P, config, stack_limits, stack_limit_rule)
        # Only a table the library leaves unstacked keeps its static buffer size
        # (prepare_feature_specs_for_training); its stacking functions drop it.
        own_buffer = specs[0].suggested_coo_buffer_size_per_device if group[0] in unstacked else None
        buffer = _stack_buffer(name, own_buffer, stack_limits, max_ids, topology)
        # The library's stacking functions record the budget on every stack they build;
        # prepare_feature_specs_for_training leaves its default on the tables it stacks.
        budget = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT if group[0] in unstacked else activation_mem_bytes_limit
        stacks.append(Stack(name, tuple(in_stack), feats, max(t.padded_embedding_dim() for t in specs),
                            specs[0].optimizer, specs[0].combiner, P, max_ids, max_uniq, buffer, budget))
    names = [s.name for s in stacks]
    if len(set(names)) != len(names):
        raise ConfigError(f"stack names collide: {names}")
    if stack_limits:
        _check_stack_names(stack_limits, names)
    return StackingPlan(stacks, topology, rotation, batch_size)


def _features_by_table(features) -> dict[str, list[FeatureSpec]]:
    """Features of each table, in the given order.

    One pass: a set per feature and stack was quadratic in the tables, most of a
    call's planning time at 26 tables.
    """
    features_of: dict[str, list[FeatureSpec]] = {}
    for f in features:
        features_of.setdefault(f.table.name, []).append(f)
    return features_of


def _group_features(group: list[str], features, features_of: dict, unstacked: set[str]) -> tuple:
    """Features of a group's tables: in the given order, or by name for a table left unstacked."""
    if len(group) == 1:
        feats = tuple(features_of.get(group[0], ()))
    else:
        members = set(group)
        feats = tuple(f for f in features if f.table.name in members)
    if len(group) == 1 and group[0] in unstacked:
        feats = tuple(sorted(feats, key=lambda f: f.name))
    return feats


def _check_stack_names(stack_limits: Mapping[str, Any], names: Sequence[str]) -> None:
    unknown = sorted(set(stack_limits) - set(names))
    if unknown:
        raise ConfigError(f"stack_limits names unknown stacks {unknown}; stacks are {list(names)}")


def _manual_groups(stacking: Any, tables: Mapping[str, TableSpec]) -> list[list[str]]:
    try:
        groups = [list(g) for g in stacking]
    except TypeError:
        raise ConfigError(f"stacking must be a list of lists of table names, got {stacking!r}") from None
    seen: set[str] = set()
    for g in groups:
        if not g or any(not isinstance(n, str) for n in g):
            raise ConfigError(f"every stacking group must be a non-empty list of table names, got {g!r}")
        for n in g:
            if n not in tables:
                raise ConfigError(f"stacking names table {n!r}, which no feature uses; tables: {sorted(tables)}")
            if n in seen:
                raise ConfigError(f"table {n!r} appears in more than one stacking group (or twice)")
            seen.add(n)
    groups += [[n] for n in tables if n not in seen]
    return groups


def _auto_groups(features, tables, P, batch_size, limit) -> list[list[str]]:
    # _group_tables_for_stacking: key (padded dim, optimizer, combiner, quantization),
    # tables in the order they first appear in the flattened features (the library's
    # dict insertion order; its docstring says alphabetical, its code does not sort).
    by_key: dict[tuple, list[str]] = {}
    for name in tables:
        t = tables[name]
        by_key.setdefault((t.padded_embedding_dim(), t.optimizer, t.combiner, t.quantization), []).append(name)
    # _calculate_activation_memory_metrics: samples per SC summed over the table's features.
    samples = {n: 0 for n in tables}
    for f in features:
        samples[f.table.name] += batch_size // P
    act = {n: tables[n].padded_embedding_dim() * samples[n] * 4 for n in tables}
    groups: list[list[str]] = []
    for group in by_key.values():
        split: list[list[str]] = []
        for name in group:  # _split_groups_by_memory_limit: first fit
            for cand in split:
                if sum(act[c] for c in cand) + act[name] <= limit:
                    cand.append(name)
                    break
            else:
                split.append([name])
        groups.extend(split)
    return groups


def _int32_limit(value) -> bool:
    """Whether ``value`` is a limit or CSR size scwork takes: None (not set) or an int from 1 to
    ``INT32_MAX`` (the library's fields are int32; bools are not ints here)."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= INT32_MAX)


def _check_plan(plan: StackingPlan, features, topology: Topology) -> None:
    if plan.num_partitions != topology.num_partitions:
        raise ConfigError(f"the StackingPlan was made for P={plan.num_partitions} partitions but the "
                          f"topology has {topology.num_partitions}; plan again for this topology")
    # The plan's P is its topology's; a stack (or a table in it) built for another P
    # would be sharded over partitions that do not exist, or miss some, and the
    # engine's arrays would not line up.
    other = {st.name: st.num_partitions for st in plan.stacks if st.num_partitions != topology.num_partitions}
    other.update({f"{st.name}/{t.name}": t.num_partitions for st in plan.stacks for t in st.tables
                  if t.num_partitions != topology.num_partitions})
    if other:
        raise ConfigError(f"the StackingPlan's topology has P={topology.num_partitions} partitions but some of "
                          f"its stacks (and tables, as stack/table) were made for another P: {other}; build every "
                          f"stack of the plan for P={topology.num_partitions} (plan_stacking does), or plan again "
                          "for this topology")
    # plan_stacking and stack_limits refuse limits outside int32 (the library's compiled
    # limits and CSR sizes are int32); a plan built by hand must keep to the same range
    for st in plan.stacks:
        for field_name in ("max_ids_per_partition", "max_unique_ids_per_partition",
                           "suggested_coo_buffer_size_per_device"):
            value = getattr(st, field_name)
            if not _int32_limit(value):
                raise ConfigError(f"stack {st.name!r} of the StackingPlan has {field_name}={value!r}; limits "
                                  f"must be None or ints from 1 to {INT32_MAX} (int32, as plan_stacking and "
                                  "stack_limits take them): set it in that range, or None for no limit")
    planned = {f.name: f for f in plan.features}
    for f in features:
        if f.name not in planned:
            raise ConfigError(f"feature {f.name!r} is not in the StackingPlan")
        if planned[f.name] != f:
            raise ConfigError(f"feature {f.name!r} differs from the one in the StackingPlan")
    extra = sorted(set(planned) - {f.name for f in features})
    if extra:
        raise ConfigError(f"the StackingPlan has features {extra} that are not in features; "
                          "plan again for these features")
