"""jax-tpu-embedding's FeatureSpecs and ``EmbeddingSpecProto`` to and from scwork.

jax-tpu-embedding describes a model as a pytree of ``FeatureSpec`` (each with its
``TableSpec``); stacking (``auto_stack_tables``, ``stack_tables``,
``prepare_feature_specs_for_training``) writes on them where every table sits
(``setting_in_stack``), how every feature's ids move (``id_transformation``) and the
stack's limits (``stacked_table_spec``, which ``update_preprocessing_parameters``
later changes from FDO statistics). Checkpoints save the same facts as an
``EmbeddingSpecProto`` in text format (``embedding_spec/proto.pbtxt``, written by
Orbax's ``ProtoCheckpointHandler`` from ``create_proto_from_feature_specs``).

- :func:`from_jax_tpu_embedding`: specs (stacked or not, a list, dict or any
  nesting) -> :class:`ImportedModel`: scwork features, the identical
  :class:`~scwork.sharding.StackingPlan` (stack names, table order, row offsets,
  rotations, limits, static buffer sizes) and the ``stacking`` / ``stack_limits``
  that :func:`~scwork.sharding.plan_stacking` turns back into it.
- :func:`to_jax_tpu_embedding`: scwork features and a plan -> the library's specs,
  stacked with the library's own functions and carrying the plan's limits, ready
  for ``preprocess_sparse_dense_matmul_input`` (a plan tuned in scwork, applied).
- :func:`read_embedding_spec`, :func:`write_embedding_spec`,
  :func:`embedding_spec_message`, :func:`from_embedding_spec`: the text format.

Nothing here imports jax, the library or protobuf at import time: the specs are read
by duck typing and the text format by scwork's own reader; only
:func:`to_jax_tpu_embedding` imports the library (the ``interop`` extra).

Examples
--------
>>> import scwork
>>> from scwork.sharding import FeatureSpec, TableSpec, plan_stacking
>>> t = TableSpec("items", 1000, 16, max_ids_per_partition=64, max_unique_ids_per_partition=32)
>>> plan = plan_stacking([FeatureSpec("clicked", t), FeatureSpec("viewed", t)], scwork.Topology(2, 4),
...                      stacking=None, batch_size=64)
>>> message = embedding_spec_message(plan.features, plan)
>>> print(format_embedding_spec(message).splitlines()[:4])
['stacked_table_specs {', '  stack_name: "items"', '  stack_vocab_size: 1024', '  stack_embedding_dim: 16']
>>> model = from_embedding_spec(message, num_sc_per_device=4)
>>> model.plan.stacks == plan.stacks, model.stacking is None
(True, True)
"""

from __future__ import annotations

import dataclasses
import math
import operator
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scwork._validate import shown
from scwork.errors import ConfigError, InputError
from scwork.hardware.topology import Topology
from scwork.interop import _pbtxt
from scwork.quant import QuantizationConfig
from scwork.sharding.specs import OPTIMIZERS, FeatureSpec, TableSpec
from scwork.sharding.stacking import (
    DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
    Stack,
    StackingPlan,
    TableInStack,
    normalize_features,
    plan_stacking,
    stack_name,
)

__all__ = [
    "ImportedModel",
    "from_jax_tpu_embedding",
    "to_jax_tpu_embedding",
    "embedding_spec_message",
    "from_embedding_spec",
    "read_embedding_spec",
    "write_embedding_spec",
    "parse_embedding_spec",
    "format_embedding_spec",
    "EMBEDDING_PROTO_SCHEMA",
    "LIBRARY_DEFAULT_LIMIT",
]

#: ``TableSpec.max_ids_per_partition`` / ``max_unique_ids_per_partition`` default of the library.
LIBRARY_DEFAULT_LIMIT = 256

#: scwork optimizer name -> the library's ``OptimizerSpec`` class
#: (``jax_tpu_embedding/sparsecore/lib/nn/embedding_spec.py``; ``short_name()`` is the scwork name).
_OPTIMIZER_CLASSES = {"sgd": "SGDOptimizerSpec", "adagrad": "AdagradOptimizerSpec",
                      "adagrad_momentum": "AdagradMomentumOptimizerSpec", "adam": "AdamOptimizerSpec",
                      "ftrl": "FTRLOptimizerSpec", "laprop": "LaPropOptimizerSpec"}
#: ``OptimizerSpecProto.OptimizerType`` -> scwork name (``embedding_proto_utils.py``); an absent or
#: UNSPECIFIED optimizer is SGD there. LaProp is written as CUSTOM, F2A has no scwork kernel.
_PROTO_OPTIMIZERS = {"OPTIMIZER_TYPE_UNSPECIFIED": "sgd", "SGD": "sgd", "ADAGRAD": "adagrad", "ADAM": "adam",
                     "FTRL": "ftrl", "ADAGRAD_MOMENTUM": "adagrad_momentum"}
_OPTIMIZER_TYPES = {"sgd": "SGD", "adagrad": "ADAGRAD", "adam": "ADAM", "ftrl": "FTRL",
                    "adagrad_momentum": "ADAGRAD_MOMENTUM", "laprop": "CUSTOM"}

#: ``jax_tpu_embedding/sparsecore/lib/proto/embedding_spec.proto`` (proto3), fields in number order.
EMBEDDING_PROTO_SCHEMA: dict[str, list[tuple[str, Any, str]]] = {
    "EmbeddingSpecProto": [("stacked_table_specs", "StackedTableSpecProto", "repeated")],
    "StackedTableSpecProto": [
        ("stack_name", "string", "optional"), ("stack_vocab_size", "int", "optional"),
        ("stack_embedding_dim", "int", "optional"), ("total_sample_count", "int", "optional"),
        ("max_ids_per_partition", "int", "optional"), ("max_unique_ids_per_partition", "int", "optional"),
        ("num_sparsecores", "int", "optional"), ("table_specs", "TableSpecProto", "repeated"),
        ("activation_mem_bytes_limit", "int", "explicit")],
    "TableSpecProto": [
        ("table_name", "string", "optional"), ("vocab_size", "int", "optional"),
        ("embedding_dim", "int", "optional"), ("max_ids_per_partition", "int", "optional"),
        ("max_unique_ids_per_partition", "int", "optional"), ("padded_vocab_size", "int", "optional"),
        ("padded_embedding_dim", "int", "optional"), ("row_offset_in_shard", "int", "optional"),
        ("shard_rotation", "int", "optional"), ("feature_specs", "FeatureSpecProto", "repeated"),
        ("combiner", "string", "optional"), ("optimizer", "OptimizerSpecProto", "explicit")],
    "FeatureSpecProto": [
        ("feature_name", "string", "optional"), ("input_shape", "int", "repeated"),
        ("output_shape", "int", "repeated"), ("row_offset", "int", "optional"),
        ("col_offset", "int", "optional"), ("col_shift", "int", "optional")],
    "OptimizerSpecProto": [
        ("type", "enum:OptimizerType", "optional"), ("learning_rate", "float", "explicit"),
        ("learning_rate_tag", "string", "explicit"), ("float_params", ("map", "string", "float"), "optional"),
        ("bool_params", ("map", "string", "bool"), "optional")],
}
_ENUMS = {"OptimizerType": ["OPTIMIZER_TYPE_UNSPECIFIED", "SGD", "ADAGRAD", "ADAM", "FTRL", "F2A",
                            "ADAGRAD_MOMENTUM", "CUSTOM"]}
#: File name Orbax's ProtoCheckpointHandler writes in the ``embedding_spec`` item of a checkpoint.
_PROTO_FILE = "proto.pbtxt"


@dataclass(frozen=True)
class ImportedModel:
    """A jax-tpu-embedding model seen by scwork: features, topology and the stacking plan.

    ``plan_stacking(features, topology, stacking, batch_size=batch_size,
    rotation=rotation, stack_limits=stack_limits)`` returns ``plan`` again, so the
    stacking can be changed (``stacking``, limits) and planned anew.
    """

    features: tuple[FeatureSpec, ...]
    """scwork features in the library's flattened order (``jax.tree.leaves``)."""
    topology: Topology
    """``Topology(global_device_count, num_sc_per_device)``."""
    batch_size: int
    """Samples of every feature (``prod(output_shape[:-1])``)."""
    plan: StackingPlan
    """The stacks exactly as the library holds them."""
    stacking: Any
    """What :func:`~scwork.sharding.plan_stacking` takes to rebuild ``plan``: None (no
    stacking), explicit groups (lists of table names; single tables whose features the
    library ordered by name are left out, as ``prepare_feature_specs_for_training``
    stacks them), or ``plan`` itself when groups cannot say it (a stack name of the
    caller's choice, rotations that differ between stacks)."""
    rotation: int
    """Shard rotation between the tables of a stack (the library's default: SparseCores per device)."""
    stack_limits: dict[str, dict[str, int | None]]
    """Per stack: ``max_ids_per_partition``, ``max_unique_ids_per_partition`` and
    ``suggested_coo_buffer_size_per_device`` of the library's ``StackedTableSpec``."""
    activation_mem_bytes_limit: int = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT
    """The activation budget the library's stacking functions recorded on the stacks
    built from ``stacking``'s groups (the ``activation_mem_bytes_limit`` to plan them
    with again). Unit: bytes."""

    def replan(self, **changes: Any) -> StackingPlan:
        """``plan_stacking`` with this model's arguments, ``changes`` overriding them.

        ``topology=`` gives the same plan on another topology with the same devices
        and SparseCores (e.g. a catalog chip's, for the memory model).
        """
        topology = changes.pop("topology", self.topology)
        kwargs = dict(stacking=self.stacking, batch_size=self.batch_size, rotation=self.rotation,
                      stack_limits=self.stack_limits, activation_mem_bytes_limit=self.activation_mem_bytes_limit)
        kwargs.update(changes)
        return plan_stacking(self.features, topology, **kwargs)


# --------------------------------------------------------------------------------------
# library specs -> scwork
# --------------------------------------------------------------------------------------
def _leaves(tree: Any, where: str = "feature_specs") -> list[Any]:
    """``jax.tree.leaves`` of a FeatureSpec pytree: dicts in sorted key order, None dropped."""
    if tree is None:
        return []
    if hasattr(tree, "table_spec") and hasattr(tree, "name"):
        return [tree]
    if isinstance(tree, Mapping):
        try:
            keys = sorted(tree)
        except TypeError:
            raise ConfigError(f"{where}: dict keys must be sortable (jax flattens a dict in sorted key order), "
                              f"got {list(tree)!r}") from None
        return [leaf for key in keys for leaf in _leaves(tree[key], f"{where}[{key!r}]")]
    if isinstance(tree, (list, tuple)):
        return [leaf for i, item in enumerate(tree) for leaf in _leaves(item, f"{where}[{i}]")]
    raise ConfigError(f"{where}: expected a jax-tpu-embedding FeatureSpec (with .name and .table_spec) or a "
                      f"list / dict of them, got {type(tree).__name__}")


def _stacked_spec(table: Any) -> Any:
    is_stacked = getattr(table, "is_stacked", None)
    if callable(is_stacked):
        return table.stacked_table_spec if is_stacked() else None
    return getattr(table, "stacked_table_spec", None)


def _optimizer_name(table_name: str, optimizer: Any, overrides: Mapping[str, str]) -> str:
    if table_name in overrides:
        name = overrides[table_name]
    else:
        short = getattr(optimizer, "short_name", None)
        name = short() if callable(short) else getattr(optimizer, "name", optimizer)
    if not isinstance(name, str) or name not in OPTIMIZERS:
        raise ConfigError(f"table {table_name!r}: optimizer {shown(name)} has no SparseCore kernel scwork knows "
                          f"({', '.join(OPTIMIZERS)}); pass optimizers={{{table_name!r}: 'sgd'}} (any name: "
                          "only tables with the same optimizer stack)")
    return name


def _int(value: Any, where: str, *, optional: bool = False) -> int | None:
    """``value`` as an int (Python or numpy integers; never bools, floats or texts), else ConfigError."""
    if optional and value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{where} must be an integer, got {shown(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise ConfigError(f"{where} must be an integer, got {shown(value)}") from None


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a str, got {shown(value)}")
    return value


def _stack_record(stacked: Any, setting: Any, transform: Any, where: str) -> dict:
    """The stacking facts of one feature, every number an int (ConfigError naming the field otherwise)."""
    fields = dict(
        name=(stacked, "stack_name", str), vocab=(stacked, "stack_vocab_size", int),
        dim=(stacked, "stack_embedding_dim", int), max_ids=(stacked, "max_ids_per_partition", int),
        max_unique=(stacked, "max_unique_ids_per_partition", int),
        buffer=(stacked, "suggested_coo_buffer_size_per_device", None),
        activation_limit=(stacked, "activation_mem_bytes_limit", None),
        setting_stack=(setting, "stack_name", str), padded_vocab=(setting, "padded_vocab_size", int),
        table_offset=(setting, "row_offset_in_shard", int), rotation=(setting, "shard_rotation", int),
        row_offset=(transform, "row_offset", int), col_offset=(transform, "col_offset", int),
        col_shift=(transform, "col_shift", int))
    record = {}
    for key, (obj, attr, kind) in fields.items():
        value = getattr(obj, attr, None) if kind is None else getattr(obj, attr)
        at = f"{where}: {attr}"
        record[key] = _name(value, at) if kind is str else _int(value, at, optional=kind is None)
    if record["activation_limit"] is None:
        record["activation_limit"] = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT
    return record


@dataclass
class _Record:
    """One feature as the library stacked it (``stack`` None: not stacked yet)."""

    feature: FeatureSpec
    samples: int
    stack: dict | None = None


def _table_from_spec(spec: Any, overrides: Mapping[str, str]) -> TableSpec:
    name = _name(spec.name, "a jax-tpu-embedding TableSpec's name")
    quantization = getattr(spec, "quantization_config", None)
    if quantization is not None:
        try:
            quantization = QuantizationConfig(num_buckets=_int(quantization.num_buckets, "num_buckets"),
                                              low=float(quantization.min_value), high=float(quantization.max_value))
        except (TypeError, ValueError, OverflowError) as err:
            raise ConfigError(f"table {name!r}: quantization_config is not usable: {err}") from None
    try:
        return TableSpec(name, _int(spec.vocabulary_size, f"table {name!r}: vocabulary_size"),
                         _int(spec.embedding_dim, f"table {name!r}: embedding_dim"), combiner=spec.combiner,
                         optimizer=_optimizer_name(name, spec.optimizer, overrides),
                         max_ids_per_partition=spec.max_ids_per_partition,
                         max_unique_ids_per_partition=spec.max_unique_ids_per_partition,
                         suggested_coo_buffer_size_per_device=getattr(spec, "suggested_coo_buffer_size_per_device",
                                                                      None),
                         quantization=quantization)
    except ConfigError as err:
        raise ConfigError(f"jax-tpu-embedding table {name!r}: {err}") from None


def _samples(shape: Any, feature: str) -> int:
    if isinstance(shape, (str, bytes, Mapping)) or not isinstance(shape, (Sequence, np.ndarray)):
        raise ConfigError(f"feature {feature!r}: output_shape must be a sequence of ints, got {shown(shape)}")
    dims = [_int(d, f"feature {feature!r}: output_shape[{i}]") for i, d in enumerate(shape)]
    if len(dims) < 2 or math.prod(dims[:-1]) < 1 or min(dims) < 0:
        raise ConfigError(f"feature {feature!r}: output_shape {dims} needs [batch, ..., embedding_dim] with at "
                          "least one sample")
    return math.prod(dims[:-1])


def _topology(global_device_count: Any, num_sc_per_device: Any) -> Topology:
    for value, name in ((global_device_count, "global_device_count"), (num_sc_per_device, "num_sc_per_device")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive int (what the specs were stacked with), got {value!r}")
    return Topology(global_device_count, num_sc_per_device)


def from_jax_tpu_embedding(feature_specs: Any, *, global_device_count: int, num_sc_per_device: int,
                           optimizers: Mapping[str, str] | None = None) -> ImportedModel:
    """scwork features and the identical stacking plan of the library's FeatureSpecs.

    Parameters
    ----------
    feature_specs : pytree of jax-tpu-embedding ``FeatureSpec``
        A list, dict (flattened in sorted key order, as ``jax.tree.leaves`` does) or
        any nesting; stacked (``auto_stack_tables`` / ``stack_tables`` /
        ``prepare_feature_specs_for_training``, limits updated by FDO or not) or not
        (then stacked as ``prepare_feature_specs_for_training`` would: one stack per
        table, its features ordered by name). Read by duck typing; not modified.
    global_device_count, num_sc_per_device : int
        What the specs were (or will be) stacked with; checked against them.
    optimizers : dict, optional
        ``{table: scwork optimizer name}`` for optimizers scwork does not know (F2A,
        custom ones).

    Raises
    ------
    ConfigError
        A bad spec, features of different batch sizes, two different tables of one
        name, or stacking facts that contradict each other or the topology (the
        message names the stack, table or feature and the value).

    Examples
    --------
    Without the library, any objects with the same attributes do:

    >>> from types import SimpleNamespace as NS
    >>> table = NS(name="t", vocabulary_size=100, embedding_dim=8, combiner="sum", optimizer="sgd",
    ...            max_ids_per_partition=64, max_unique_ids_per_partition=32)
    >>> specs = [NS(name="b", table_spec=table, output_shape=[16, 8]), NS(name="a", table_spec=table,
    ...          output_shape=[16, 8])]
    >>> model = from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4)
    >>> [f.name for f in model.plan.stacks[0].features], model.stacking
    (['a', 'b'], None)
    """
    overrides = _overrides(optimizers)
    topology = _topology(global_device_count, num_sc_per_device)
    leaves = _leaves(feature_specs)
    if not leaves:
        raise ConfigError("feature_specs holds no FeatureSpec")
    tables: dict[str, TableSpec] = {}
    records = []
    for leaf in leaves:
        try:
            spec = leaf.table_spec
            table = _table_from_spec(spec, overrides)
            if tables.setdefault(table.name, table) != table:
                raise ConfigError(f"two different tables are named {table.name!r}: {tables[table.name]} and {table}")
            feature_name = _name(leaf.name, "a FeatureSpec's name")
            record = _Record(FeatureSpec(feature_name, table), _samples(leaf.output_shape, feature_name))
            stacked = _stacked_spec(spec)
            if stacked is not None:
                record.stack = _stack_record(stacked, spec.setting_in_stack, leaf.id_transformation,
                                             f"feature {feature_name!r} (table {table.name!r})")
        except AttributeError as err:   # duck typing: say which attribute a spec lacks
            raise ConfigError(f"feature {shown(getattr(leaf, 'name', leaf))} is not a jax-tpu-embedding "
                              f"FeatureSpec as scwork reads it: {err}") from None
        records.append(record)
    return _model(records, topology)


def _overrides(optimizers: Any) -> dict[str, str]:
    if optimizers is None:
        return {}
    if not isinstance(optimizers, Mapping):
        raise ConfigError(f"optimizers must be a dict {{table name: scwork optimizer name}}, got {shown(optimizers)}")
    return {_name(k, "optimizers key"): _name(v, f"optimizers[{k!r}]") for k, v in optimizers.items()}


def _check_stack(name: str, records: list[_Record], P: int, batch: int) -> None:
    """Everything the library wrote on a stack's features must agree (and with P)."""
    first = records[0].stack
    for r in records:
        s = r.stack
        for key in ("vocab", "dim", "max_ids", "max_unique", "buffer", "activation_limit"):
            if s[key] != first[key]:
                raise ConfigError(f"stack {name!r}: features {records[0].feature.name!r} and {r.feature.name!r} "
                                  f"disagree on the stack's {key} ({first[key]} vs {s[key]})")
        t = r.feature.table
        where = f"stack {name!r}, table {t.name!r} (feature {r.feature.name!r})"
        if s["setting_stack"] != name:
            raise ConfigError(f"{where}: setting_in_stack names stack {s['setting_stack']!r}")
        if s["padded_vocab"] != t.padded_vocab_size(P):
            raise ConfigError(f"{where}: padded_vocab_size {s['padded_vocab']} is not round_up({t.vocab_size}, 8 x "
                              f"P={P}); pass the global_device_count and num_sc_per_device the specs were stacked "
                              "with")
        if s["col_offset"] != s["table_offset"] * P or s["col_shift"] != s["rotation"]:
            raise ConfigError(f"{where}: id transformation (col_offset {s['col_offset']}, col_shift "
                              f"{s['col_shift']}) does not match row_offset_in_shard {s['table_offset']} x P={P} "
                              f"and shard_rotation {s['rotation']}")
        if s["row_offset"] % batch:
            raise ConfigError(f"{where}: row_offset {s['row_offset']} is not a multiple of the batch {batch}")


def _stack_from_records(name: str, records: list[_Record], P: int, batch: int) -> Stack:
    _check_stack(name, records, P, batch)
    by_table: dict[str, _Record] = {}
    for r in records:
        by_table.setdefault(r.feature.table.name, r)
    ordered = sorted(by_table.values(), key=lambda r: r.stack["table_offset"])
    in_stack, offset = [], 0
    for position, r in enumerate(ordered):
        t = r.feature.table
        if r.stack["table_offset"] != offset:
            raise ConfigError(f"stack {name!r}: table {t.name!r} starts at row {r.stack['table_offset']} of every "
                              f"shard, but the tables before it end at row {offset}")
        pv = t.padded_vocab_size(P)
        in_stack.append(TableInStack(t, name, position, pv, t.padded_embedding_dim(), offset, r.stack["rotation"], P))
        offset += pv // P
    features = sorted(records, key=lambda r: r.stack["row_offset"])
    offsets = [r.stack["row_offset"] for r in features]
    if offsets != [k * batch for k in range(len(features))]:
        raise ConfigError(f"stack {name!r}: feature row offsets {offsets} are not 0, {batch}, 2 x {batch}, ... "
                          f"(features {[r.feature.name for r in features]})")
    s = records[0].stack
    tables = [r.feature.table for r in ordered]
    width = max(t.padded_embedding_dim() for t in tables)
    if s["vocab"] != offset * P or s["dim"] != width:
        raise ConfigError(f"stack {name!r}: stack_vocab_size {s['vocab']} / stack_embedding_dim {s['dim']} do not "
                          f"match its tables ({offset * P} rows, width {width})")
    # The limits are Python ints here: _stack_record reads them with _int, from_embedding_spec
    # after _pbtxt._checked_message (bools refused, numpy integers made ints).
    for key, label in (("max_ids", "max_ids_per_partition"), ("max_unique", "max_unique_ids_per_partition")):
        if s[key] < 1:
            raise ConfigError(f"stack {name!r}: {label} is {s[key]!r}; scwork limits are integers >= 1 (a limit of "
                              "0 comes from an FDO history without ids: raise it)")
    if len({(t.optimizer, t.combiner, t.quantization) for t in tables}) > 1:
        raise ConfigError(f"stack {name!r}: its tables {[t.name for t in tables]} differ in optimizer, combiner "
                          "or quantization")
    if s["activation_limit"] < 1:
        raise ConfigError(f"stack {name!r}: activation_mem_bytes_limit is {s['activation_limit']}; it must be a "
                          "positive number of bytes")
    return Stack(name, tuple(in_stack), tuple(r.feature for r in features), s["dim"], tables[0].optimizer,
                 tables[0].combiner, P, int(s["max_ids"]), int(s["max_unique"]),
                 None if s["buffer"] is None else int(s["buffer"]), s["activation_limit"])


def _unstacked_stack(table: TableSpec, features: list[FeatureSpec], P: int) -> Stack:
    """The stack ``prepare_feature_specs_for_training`` gives a table left unstacked."""
    return Stack(table.name, (TableInStack(table, table.name, 0, table.padded_vocab_size(P),
                                           table.padded_embedding_dim(), 0, 0, P),),
                 tuple(sorted(features, key=lambda f: f.name)), table.padded_embedding_dim(), table.optimizer,
                 table.combiner, P, table.max_ids_per_partition, table.max_unique_ids_per_partition,
                 table.suggested_coo_buffer_size_per_device)


def _model(records: list[_Record], topology: Topology) -> ImportedModel:
    P, S = topology.num_partitions, topology.sparsecores_per_device
    features = normalize_features([r.feature for r in records])
    batches = {r.samples for r in records}
    if len(batches) > 1:
        sizes = {r.feature.name: r.samples for r in records}
        raise ConfigError(f"features have different batch sizes {sizes}; scwork gives every feature of a batch the "
                          "same number of samples")
    batch = batches.pop()
    stacked: dict[str, list[_Record]] = {}
    unstacked: dict[str, list[FeatureSpec]] = {}
    for r in records:
        if r.stack is None:
            unstacked.setdefault(r.feature.table.name, []).append(r.feature)
        else:
            stacked.setdefault(r.stack["name"], []).append(r)
    clash = sorted(set(stacked) & set(unstacked))
    if clash:
        raise ConfigError(f"tables {clash} are not stacked yet but stacks of these names exist; the library's "
                          "prepare_feature_specs_for_training would fail the same way")
    tables = {f.table.name: f.table for f in features}
    stacks = [_stack_from_records(name, rs, P, batch) for name, rs in stacked.items()]
    stacks += [_unstacked_stack(tables[name], fs, P) for name, fs in unstacked.items()]
    direct = {s.name: s for s in stacks}
    seen = [t for s in stacks for t in s.table_names]
    if len(seen) != len(set(seen)):
        raise ConfigError(f"a table is in more than one stack: {[s.table_names for s in stacks]}")

    multi = [s for s in stacks if len(s.tables) > 1]
    rotation = S if not multi or multi[0].tables[1].shard_rotation == S % P else multi[0].tables[1].shard_rotation
    groups = [list(s.table_names) for s in stacks if not _left_to_prepare(s)]
    budgets = {s.activation_mem_bytes_limit for s in stacks if not _left_to_prepare(s)}
    budget = budgets.pop() if len(budgets) == 1 else DEFAULT_ACTIVATION_MEM_BYTES_LIMIT
    stack_limits = {s.name: {"max_ids_per_partition": s.max_ids_per_partition,
                             "max_unique_ids_per_partition": s.max_unique_ids_per_partition,
                             "suggested_coo_buffer_size_per_device": s.suggested_coo_buffer_size_per_device}
                    for s in stacks}
    stacking: Any = groups or None
    # the names plan_stacking gives groups (and the tables left out of them)
    expressible = all(s.name == (stack_name(s.table_names) if len(s.tables) > 1 else s.table_names[0])
                      for s in stacks)
    if expressible:
        plan = plan_stacking(features, topology, stacking, batch_size=batch, rotation=rotation,
                             stack_limits=stack_limits, activation_mem_bytes_limit=budget)
    if not expressible or {s.name: s for s in plan.stacks} != direct:
        # groups cannot say it (stack names or rotations of the caller's choice): keep the plan itself
        plan = StackingPlan(stacks, topology, rotation, batch)
        stacking = plan
    return ImportedModel(features, topology, batch, plan, stacking, rotation, stack_limits, budget)


# --------------------------------------------------------------------------------------
# scwork -> library specs
# --------------------------------------------------------------------------------------
def _checked_plan(features: Any, plan: Any, batch_size: int | None) -> tuple[tuple[FeatureSpec, ...], int]:
    if not isinstance(plan, StackingPlan):
        raise ConfigError(f"plan must be a scwork StackingPlan (plan_stacking(...)), got {type(plan).__name__}")
    normalized = normalize_features(features)
    plan_stacking(normalized, plan.topology, plan)       # the plan must be the features' plan
    # A Stack may be built without tables and plan_stacking lets it by (it holds no feature), but
    # the library's specs only say stacks through their tables: such a stack would be dropped from a
    # message silently, and stack_tables would be asked for a stack of nothing.
    empty = [s.name for s in plan.stacks if not s.tables]
    if empty:
        raise ConfigError(f"the plan's stacks {empty} hold no table; the library has no stack without tables: "
                          "leave them out of the StackingPlan")
    batch = plan.batch_size if batch_size is None else batch_size
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ConfigError("the library's FeatureSpecs need the batch size (input and output shapes): pass "
                          "batch_size=... or plan with plan_stacking(..., batch_size=...)")
    return normalized, batch


def _left_to_prepare(stack: Stack) -> bool:
    """A stack ``prepare_feature_specs_for_training`` builds itself (one table, features by name, the
    default activation budget: the library's stacking functions record theirs)."""
    names = [f.name for f in stack.features]
    return (len(stack.tables) == 1 and stack.name == stack.tables[0].name and names == sorted(names)
            and stack.activation_mem_bytes_limit == DEFAULT_ACTIVATION_MEM_BYTES_LIMIT)


def to_jax_tpu_embedding(features: Any, plan: StackingPlan, *, batch_size: int | None = None,
                         optimizers: Mapping[str, Any] | None = None, initializer: Any = None,
                         input_shapes: Mapping[str, Sequence[int]] | None = None) -> Any:
    """The library's FeatureSpecs for scwork ``features`` stacked as ``plan`` says.

    Builds one ``TableSpec`` per table and one ``FeatureSpec`` per feature, applies
    the plan's stacks with the library's ``stack_tables`` (its stack names and
    rotations; single tables whose features are in name order are left to
    ``prepare_feature_specs_for_training``, which builds the same stack), prepares
    them for training and sets every stack's ``max_ids_per_partition``,
    ``max_unique_ids_per_partition`` and ``suggested_coo_buffer_size_per_device`` to
    the plan's, as ``update_preprocessing_parameters`` does. A limit the plan leaves
    unset (None) keeps the library's value (the table's, default
    :data:`LIBRARY_DEFAULT_LIMIT`). The result is read back and checked against the
    plan (:class:`~scwork.errors.ConfigError` if the library stacked differently).

    Parameters
    ----------
    features : list or dict of scwork FeatureSpec
        The result has the same structure (a list in this order, or a dict).
    plan : StackingPlan
        From :func:`~scwork.sharding.plan_stacking` (or :attr:`ImportedModel.plan`);
        gives the topology (``global_device_count`` = devices, ``num_sc_per_device``).
    batch_size : int, optional
        Samples per feature; default ``plan.batch_size``.
    optimizers : dict, optional
        ``{table: library OptimizerSpec}``; default: the library's spec of the table's
        optimizer with its default settings.
    initializer : callable, optional
        Table initializer; default ``jax.nn.initializers.truncated_normal()``.
    input_shapes : dict, optional
        ``{feature: input_shape}``; default ``[batch_size, 1]``.
    """
    normalized, batch = _checked_plan(features, plan, batch_size)
    try:
        import jax
        from jax_tpu_embedding.sparsecore.lib.nn import embedding, embedding_spec, table_stacking
    except ImportError as err:
        raise ConfigError(f"to_jax_tpu_embedding needs jax-tpu-embedding (pip install 'scwork[interop]'): {err}") \
            from None
    D, S = plan.topology.num_devices, plan.topology.sparsecores_per_device
    initializer = initializer if initializer is not None else jax.nn.initializers.truncated_normal()
    optimizer_specs = {name: getattr(embedding_spec, cls)() for name, cls in _OPTIMIZER_CLASSES.items()}
    lib_tables, lib_features = {}, {}
    for f in plan.features:
        t = f.table
        if t.name not in lib_tables:
            q = t.quantization
            lib_tables[t.name] = embedding_spec.TableSpec(
                name=t.name, vocabulary_size=t.vocab_size, embedding_dim=t.embedding_dim, initializer=initializer,
                optimizer=(optimizers or {}).get(t.name, optimizer_specs[t.optimizer]), combiner=t.combiner,
                max_ids_per_partition=(LIBRARY_DEFAULT_LIMIT if t.max_ids_per_partition is None
                                       else t.max_ids_per_partition),
                max_unique_ids_per_partition=(LIBRARY_DEFAULT_LIMIT if t.max_unique_ids_per_partition is None
                                              else t.max_unique_ids_per_partition),
                suggested_coo_buffer_size_per_device=t.suggested_coo_buffer_size_per_device,
                quantization_config=None if q is None else embedding_spec.QuantizationConfig(
                    min_value=q.low, max_value=q.high, num_buckets=q.num_buckets))
        lib_features[f.name] = embedding_spec.FeatureSpec(
            name=f.name, table_spec=lib_tables[t.name], input_shape=list((input_shapes or {}).get(f.name, [batch, 1])),
            output_shape=[batch, t.embedding_dim])
    ordered = [lib_features[f.name] for f in plan.features]    # row offsets follow this order
    try:
        for stack in plan.stacks:
            if not _left_to_prepare(stack):
                rotation = stack.tables[1].shard_rotation if len(stack.tables) > 1 else plan.rotation
                table_stacking.stack_tables(ordered, list(stack.table_names), global_device_count=D,
                                            num_sc_per_device=S, rotation=rotation, stack_name=stack.name,
                                            activation_mem_bytes_limit=stack.activation_mem_bytes_limit)
        embedding.prepare_feature_specs_for_training(ordered, global_device_count=D, num_sc_per_device=S)
    except ValueError as err:
        raise ConfigError(f"jax-tpu-embedding refused the plan: {err}") from None
    for lib in ordered:
        spec = lib.table_spec.stacked_table_spec
        stack = plan.stack(spec.stack_name)
        lib.table_spec.stacked_table_spec = dataclasses.replace(
            spec, max_ids_per_partition=stack.max_ids_per_partition or spec.max_ids_per_partition,
            max_unique_ids_per_partition=stack.max_unique_ids_per_partition or spec.max_unique_ids_per_partition,
            suggested_coo_buffer_size_per_device=stack.suggested_coo_buffer_size_per_device,
            activation_mem_bytes_limit=stack.activation_mem_bytes_limit)
    back = from_jax_tpu_embedding(ordered, global_device_count=D, num_sc_per_device=S,
                                  optimizers={t: f.table.optimizer for t, f in
                                              {f.table.name: f for f in plan.features}.items()})
    _check_same_stacks(plan, back.plan)
    if isinstance(features, Mapping):
        return {name: lib_features[name] for name in features}
    return [lib_features[f.name] for f in normalized]


def _stack_facts(stack: Stack, limits: bool) -> tuple:
    return (tuple((t.name, t.row_offset_in_shard, t.shard_rotation, t.padded_vocab_size) for t in stack.tables),
            tuple(f.name for f in stack.features), stack.embedding_dim,
            (stack.max_ids_per_partition, stack.max_unique_ids_per_partition) if limits else None,
            stack.suggested_coo_buffer_size_per_device, stack.activation_mem_bytes_limit)


def _check_same_stacks(plan: StackingPlan, got: StackingPlan) -> None:
    ours = {s.name: s for s in plan.stacks}
    theirs = {s.name: s for s in got.stacks}
    if set(ours) != set(theirs):
        raise ConfigError(f"jax-tpu-embedding built stacks {sorted(theirs)}, the plan has {sorted(ours)}")
    for name, stack in ours.items():
        limits = stack.max_ids_per_partition is not None and stack.max_unique_ids_per_partition is not None
        if _stack_facts(stack, limits) != _stack_facts(theirs[name], limits):
            raise ConfigError(f"jax-tpu-embedding stacked {name!r} differently from the plan: "
                              f"{_stack_facts(theirs[name], limits)} instead of {_stack_facts(stack, limits)}")


# --------------------------------------------------------------------------------------
# EmbeddingSpecProto (text format)
# --------------------------------------------------------------------------------------
def parse_embedding_spec(text: str, source: str = "EmbeddingSpecProto text") -> dict:
    """An ``EmbeddingSpecProto`` in text format as a dict (field name -> value).

    Scalars left out of the text are left out of the dict (their proto3 default);
    :class:`~scwork.errors.InputError` names the line and field of anything malformed.

    >>> parse_embedding_spec('stacked_table_specs { stack_name: "t" num_sparsecores: 8 }')
    {'stacked_table_specs': [{'stack_name': 't', 'num_sparsecores': 8}]}
    """
    if not isinstance(text, str):
        raise InputError(f"{source}: expected text, got {type(text).__name__}")
    return _pbtxt.parse(text, EMBEDDING_PROTO_SCHEMA, "EmbeddingSpecProto", _ENUMS, source)


def format_embedding_spec(message: Mapping[str, Any]) -> str:
    """``message`` as ``text_format.MessageToString`` prints an ``EmbeddingSpecProto``."""
    if not isinstance(message, Mapping):
        raise ConfigError(f"message must be a dict (see parse_embedding_spec), got {type(message).__name__}")
    return _pbtxt.format_message(message, EMBEDDING_PROTO_SCHEMA, "EmbeddingSpecProto", _ENUMS)


def _spec_file(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise InputError(f"the embedding spec path must be a str or os.PathLike naming a file or folder, got "
                         f"{shown(path)}")
    path = Path(path)
    try:
        if path.is_dir():
            for candidate in (path / _PROTO_FILE, path / "embedding_spec" / _PROTO_FILE):
                if candidate.is_file():
                    return candidate
            raise InputError(f"{str(path)!r} holds neither {_PROTO_FILE} nor embedding_spec/{_PROTO_FILE}; give "
                             "the file, the checkpoint step folder or its embedding_spec folder")
    except OSError as err:      # Python 3.13's is_dir raises for names the file system refuses (too long)
        raise InputError(f"cannot read the embedding spec {shown(str(path))}: {err.strerror or err}") from None
    return path


def read_embedding_spec(path: str | os.PathLike) -> dict:
    """Read an ``EmbeddingSpecProto`` text file (a checkpoint's ``embedding_spec/proto.pbtxt``).

    ``path`` may be the file, the ``embedding_spec`` folder or the checkpoint step
    folder holding it. Returns the message as :func:`parse_embedding_spec` does.
    """
    file = _spec_file(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read the embedding spec {str(file)!r}: {err}") from None
    return parse_embedding_spec(text, str(file))


def write_embedding_spec(message: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write ``message`` (a dict, see :func:`embedding_spec_message`) as an ``EmbeddingSpecProto`` text file."""
    text = format_embedding_spec(message)
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot write {str(path)!r} ({err})") from None
    return path


def embedding_spec_message(features: Any, plan: StackingPlan, *, batch_size: int | None = None,
                           optimizers: Mapping[str, Mapping[str, Any]] | None = None,
                           input_shapes: Mapping[str, Sequence[int]] | None = None,
                           activation_mem_bytes_limit: int | None = None) -> dict:
    """The ``EmbeddingSpecProto`` (as a dict) ``create_proto_from_feature_specs`` makes for ``features`` and ``plan``.

    The same message the library builds from :func:`to_jax_tpu_embedding`'s specs
    (stacks, tables and features in the flattened order of ``features``), without
    the library. A table's optimizer is ``{"type": ...}`` unless ``optimizers`` gives
    its full message (``learning_rate``, ``float_params``, ...); limits the plan leaves
    unset are written as the library's default :data:`LIBRARY_DEFAULT_LIMIT`. Every
    stack's ``activation_mem_bytes_limit`` is its own
    (``Stack.activation_mem_bytes_limit``), unless ``activation_mem_bytes_limit``
    gives one for all.
    """
    normalized, batch = _checked_plan(features, plan, batch_size)
    if activation_mem_bytes_limit is not None:
        _positive_budget(activation_mem_bytes_limit, "activation_mem_bytes_limit")
    P = plan.num_partitions
    stacks: dict[str, dict] = {}
    tables: dict[str, dict] = {}
    for f in normalized:
        stack, table = plan.stack_of_feature(f.name), plan.table(f.table.name)
        if stack.name not in stacks:
            stacks[stack.name] = {
                "stack_name": stack.name, "stack_vocab_size": stack.vocab_size,
                "stack_embedding_dim": stack.embedding_dim, "total_sample_count": len(stack.features) * batch,
                "max_ids_per_partition": stack.max_ids_per_partition or LIBRARY_DEFAULT_LIMIT,
                "max_unique_ids_per_partition": stack.max_unique_ids_per_partition or LIBRARY_DEFAULT_LIMIT,
                "num_sparsecores": P, "table_specs": [],
                "activation_mem_bytes_limit": stack.activation_mem_bytes_limit if activation_mem_bytes_limit is None
                else activation_mem_bytes_limit}
        if table.name not in tables:
            tables[table.name] = {
                "table_name": table.name, "vocab_size": table.table.vocab_size,
                "embedding_dim": table.table.embedding_dim, "padded_vocab_size": table.padded_vocab_size,
                "padded_embedding_dim": stack.embedding_dim, "row_offset_in_shard": table.row_offset_in_shard,
                "shard_rotation": table.shard_rotation, "feature_specs": [], "combiner": table.table.combiner,
                "optimizer": dict((optimizers or {}).get(table.name,
                                                         {"type": _OPTIMIZER_TYPES[table.table.optimizer]}))}
            stacks[stack.name]["table_specs"].append(tables[table.name])
        tables[table.name]["feature_specs"].append({
            "feature_name": f.name, "input_shape": list((input_shapes or {}).get(f.name, [batch, 1])),
            "output_shape": [batch, f.table.embedding_dim], "row_offset": stack.feature_position(f.name) * batch,
            "col_offset": table.row_offset_in_shard * P, "col_shift": table.shard_rotation})
    return {"stacked_table_specs": list(stacks.values())}


def _positive_budget(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where} must be a positive int (bytes), got {shown(value)}")
    return value


def from_embedding_spec(message: Any, *, num_sc_per_device: int,
                        optimizers: Mapping[str, str] | None = None) -> ImportedModel:
    """scwork features and stacking plan of an ``EmbeddingSpecProto`` (a dict, text file or checkpoint folder).

    The proto holds the SparseCores of the whole system (``num_sparsecores``) but not
    how many each device has: give ``num_sc_per_device``. Table-level limits and
    static buffer sizes are not in the proto: a table gets its stack's limits when it
    is alone in it (none otherwise), every stack its own limits in ``stack_limits``.
    Features are ordered stack by stack, in row-offset order (a flattened order that
    gives the same stacks).
    """
    if isinstance(message, (str, os.PathLike)):
        message = read_embedding_spec(message)
    if not isinstance(message, Mapping):
        raise ConfigError(f"message must be a dict, a path or a checkpoint folder, got {type(message).__name__}")
    # Every field must hold its proto kind (ConfigError naming it), so the checks below see ints and strs.
    message = _pbtxt._checked_message(message, EMBEDDING_PROTO_SCHEMA, "EmbeddingSpecProto", _ENUMS, "")
    overrides = _overrides(optimizers)
    stacks = message.get("stacked_table_specs", [])
    if not stacks:
        raise InputError("the EmbeddingSpecProto has no stacked_table_specs")
    partitions = {s.get("num_sparsecores", 0) for s in stacks}
    if len(partitions) != 1 or min(partitions) < 1:
        raise InputError(f"stacks disagree on num_sparsecores or leave it unset: {sorted(partitions)}")
    P = partitions.pop()
    if isinstance(num_sc_per_device, bool) or not isinstance(num_sc_per_device, int) or num_sc_per_device < 1 \
            or P % num_sc_per_device:
        raise ConfigError(f"num_sc_per_device must be a positive int dividing num_sparsecores={P}, got "
                          f"{num_sc_per_device!r}")
    topology = _topology(P // num_sc_per_device, num_sc_per_device)
    records = []
    tables: dict[str, TableSpec] = {}
    for s in stacks:
        name = s.get("stack_name", "")
        specs = s.get("table_specs", [])
        for t in specs:
            tname = t.get("table_name", "")
            optimizer = t.get("optimizer", {}).get("type", "OPTIMIZER_TYPE_UNSPECIFIED")
            names = _ENUMS["OptimizerType"]
            if isinstance(optimizer, int) and 0 <= optimizer < len(names):
                optimizer = names[optimizer]      # given by number, as a dict (or the text) may
            if tname not in overrides and optimizer not in _PROTO_OPTIMIZERS:
                raise ConfigError(f"table {tname!r}: optimizer type {optimizer} has no scwork name; pass "
                                  f"optimizers={{{tname!r}: 'sgd'}} (for LaProp: 'laprop')")
            single = len(specs) == 1
            try:
                table = TableSpec(
                    tname, t.get("vocab_size", 0), t.get("embedding_dim", 0), combiner=t.get("combiner", ""),
                    optimizer=overrides.get(tname, _PROTO_OPTIMIZERS.get(optimizer)),
                    max_ids_per_partition=t.get("max_ids_per_partition") or (
                        s.get("max_ids_per_partition") or None if single else None),
                    max_unique_ids_per_partition=t.get("max_unique_ids_per_partition") or (
                        s.get("max_unique_ids_per_partition") or None if single else None))
            except ConfigError as err:
                raise InputError(f"EmbeddingSpecProto stack {name!r}, table {tname!r}: {err}") from None
            if tables.setdefault(tname, table) != table:
                raise InputError(f"EmbeddingSpecProto: table {tname!r} appears twice with different settings")
            for f in t.get("feature_specs", []):
                fname = f.get("feature_name", "")
                record = _Record(FeatureSpec(fname, table), _samples(f.get("output_shape", []), fname))
                record.stack = dict(
                    name=name, vocab=s.get("stack_vocab_size", 0), dim=s.get("stack_embedding_dim", 0),
                    max_ids=s.get("max_ids_per_partition", 0), max_unique=s.get("max_unique_ids_per_partition", 0),
                    buffer=None, setting_stack=name, padded_vocab=t.get("padded_vocab_size", 0),
                    activation_limit=s.get("activation_mem_bytes_limit", DEFAULT_ACTIVATION_MEM_BYTES_LIMIT),
                    table_offset=t.get("row_offset_in_shard", 0), rotation=t.get("shard_rotation", 0),
                    row_offset=f.get("row_offset", 0), col_offset=f.get("col_offset", 0),
                    col_shift=f.get("col_shift", 0))
                records.append(record)
    if not records:
        raise InputError("the EmbeddingSpecProto has no feature_specs")
    records.sort(key=lambda r: ([s.get("stack_name", "") for s in stacks].index(r.stack["name"]),
                                r.stack["row_offset"]))
    return _model(records, topology)
