"""Keras-RS ``DistributedEmbedding`` configurations to scwork features and stacking plans.

Keras-RS [keras-rs] (``keras_rs.layers.TableConfig``, ``FeatureConfig``,
``DistributedEmbedding``) runs on the SparseCore through jax-tpu-embedding when the
Keras backend is JAX. Its ``sparsecore_build``
(``keras_rs/src/layers/embedding/jax/distributed_embedding.py``) does, for the
features whose table is placed on the SparseCore (``placement="sparsecore"``, or
``"auto"`` on a TPU that has one):

1. key every feature by its path in the nested ``feature_configs``
   (``keras.tree.flatten_with_path``, the path parts joined with ``"."``) and convert
   it to a jax-tpu-embedding ``FeatureSpec`` named after ``FeatureConfig.name``; the
   library flattens that ``{path: spec}`` dict in sorted path order (``"10"`` before
   ``"2"``), which sets the row offsets;
2. stack: ``table_stacking="auto"`` (the default) runs ``auto_stack_tables``, a list
   of lists runs ``stack_tables`` per list, one list of names one ``stack_tables``,
   None nothing; ``prepare_feature_specs_for_training`` stacks every other table
   alone;
3. set every stack's limits to the largest ``max_ids_per_partition`` /
   ``max_unique_ids_per_partition`` of its tables (``update_preprocessing_parameters``);
   Keras-RS tables have no static buffer size.

:func:`from_keras_rs` does the same with scwork alone (no Keras, JAX or library
import), from the configs, a built or unbuilt layer, or the layer's ``get_config()``.
Tables of one optimizer with different settings (learning rate, betas, ...) are
different optimizers to the library's automatic stacking, so they are never stacked
together here either.

Examples
--------
>>> from types import SimpleNamespace as NS
>>> def table(name, dim):
...     return NS(name=name, vocabulary_size=1000, embedding_dim=dim, optimizer="adam", combiner="mean",
...               placement="sparsecore", max_ids_per_partition=64, max_unique_ids_per_partition=32)
>>> items, users = table("items", 16), table("users", 16)
>>> configs = {"clicked": NS(name="clicked", table=items, input_shape=(64, 4), output_shape=(64, 16)),
...            "user": NS(name="user", table=users, input_shape=(64, 1), output_shape=(64, 16))}
>>> model = from_keras_rs(configs, global_device_count=2, num_sc_per_device=4)
>>> [(s.name, s.max_ids_per_partition) for s in model.plan.stacks]
[('items_users', 64)]
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from scwork.errors import ConfigError
from scwork.interop.jax_tpu_embedding import ImportedModel, _samples, _topology
from scwork.sharding.specs import FeatureSpec, TableSpec
from scwork.sharding.stacking import normalize_features, plan_stacking

__all__ = ["from_keras_rs", "KERAS_OPTIMIZER_DEFAULTS"]

#: Settings of the Keras 3 optimizers Keras-RS turns into jax-tpu-embedding specs
#: (``config_conversion.keras_to_jte_optimizer``), with Keras' defaults: what an
#: optimizer given by name (``"adam"``) has.
KERAS_OPTIMIZER_DEFAULTS: dict[str, dict[str, float]] = {
    "sgd": {"learning_rate": 0.01},
    "adagrad": {"learning_rate": 0.001, "initial_accumulator_value": 0.1},
    "adam": {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7},
    "ftrl": {"learning_rate": 0.001, "learning_rate_power": -0.5, "initial_accumulator_value": 0.1,
             "l1_regularization_strength": 0.0, "l2_regularization_strength": 0.0, "beta": 0.0},
}
_PLACEMENTS = ("auto", "default_device", "sparsecore")
_FROM_CONFIG = object()


def _float32(value: float) -> float:
    """The learning rate as Keras keeps it (a float32 variable) and Keras-RS reads it."""
    return struct.unpack("<f", struct.pack("<f", float(value)))[0]


def _optimizer(table: str, optimizer: Any) -> tuple[str, tuple]:
    """(scwork name, settings) of a Keras optimizer: a name, an instance or its serialized dict."""
    if isinstance(optimizer, str):
        name, config = optimizer.lower(), {}
    elif isinstance(optimizer, Mapping):                   # keras.saving.serialize_keras_object
        name, config = str(optimizer.get("class_name", "")).lower(), dict(optimizer.get("config") or {})
    else:
        name = type(optimizer).__name__.lower()
        get_config = getattr(optimizer, "get_config", None)
        config = dict(get_config()) if callable(get_config) else {}
    if name not in KERAS_OPTIMIZER_DEFAULTS:
        raise ConfigError(f"table {table!r}: Keras-RS runs only SGD, Adagrad, Adam and Ftrl on the SparseCore, got "
                          f"optimizer {name!r}")
    settings = dict(KERAS_OPTIMIZER_DEFAULTS[name])
    settings.update({k: config[k] for k in settings if k in config})
    rate = settings["learning_rate"]
    settings["learning_rate"] = _float32(rate) if isinstance(rate, (int, float)) else repr(rate)
    return name, tuple(sorted(settings.items()))


def _get(obj: Any, name: str) -> Any:
    try:
        return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)
    except (KeyError, AttributeError):
        raise ConfigError(f"{type(obj).__name__} {getattr(obj, 'name', '')!r} has no {name!r}: not a Keras-RS "
                          "FeatureConfig / TableConfig (or their get_config() dicts)") from None


def _is_feature(obj: Any) -> bool:
    if isinstance(obj, Mapping):
        return {"name", "table", "output_shape"} <= set(obj)
    return hasattr(obj, "table") and hasattr(obj, "name") and hasattr(obj, "output_shape")


def _with_paths(tree: Any, path: tuple = ()) -> list[tuple[str, Any]]:
    """``keras.tree.flatten_with_path``: dicts in sorted key order, the path joined with '.'."""
    if _is_feature(tree):
        return [(".".join(str(p) for p in path), tree)]
    if isinstance(tree, Mapping):
        return [item for key in sorted(tree) for item in _with_paths(tree[key], path + (key,))]
    if isinstance(tree, (list, tuple)):
        return [item for i, value in enumerate(tree) for item in _with_paths(value, path + (i,))]
    raise ConfigError(f"feature_configs[{'.'.join(map(str, path)) or 'top'}]: expected a Keras-RS FeatureConfig "
                      f"(or a list / dict of them), got {type(tree).__name__}")


def _layer_config(obj: Any) -> Mapping[str, Any] | None:
    """The ``get_config()`` of a DistributedEmbedding layer, or the dict itself."""
    if isinstance(obj, Mapping) and "feature_configs" in obj and "tables" in obj:
        return obj
    get_config = getattr(obj, "get_config", None)
    if callable(get_config) and hasattr(obj, "_feature_configs"):
        return get_config()
    return None


def from_keras_rs(feature_configs: Any, *, global_device_count: int, num_sc_per_device: int,
                  table_stacking: Any = _FROM_CONFIG, auto_placement: str = "sparsecore") -> ImportedModel:
    """scwork features and the stacking plan Keras-RS builds on the SparseCore (JAX backend).

    Parameters
    ----------
    feature_configs : nested ``FeatureConfig``, a ``DistributedEmbedding`` layer, or its ``get_config()``
        Features are read by duck typing (``name``, ``table``, ``output_shape``; the
        table's ``name``, ``vocabulary_size``, ``embedding_dim``, ``optimizer``,
        ``combiner``, ``placement``, ``max_ids_per_partition``,
        ``max_unique_ids_per_partition``).
    global_device_count, num_sc_per_device : int
        The devices of the mesh and the SparseCores of each.
    table_stacking : "auto", None, list of names or list of lists, optional
        As ``DistributedEmbedding(table_stacking=...)``; default the layer's (from a
        layer or its config), else ``"auto"`` (the layer's default).
    auto_placement : {"sparsecore", "default_device"}
        Where ``placement="auto"`` tables go (``"sparsecore"``: a TPU with
        SparseCores). Tables on the default device are left out.

    Returns
    -------
    ImportedModel
        ``stacking`` lists every stack the library's stacking functions build (all of
        them with ``"auto"``) and ``stack_limits`` the limits step 3 sets.

    Raises
    ------
    ConfigError
        No SparseCore feature, an unknown placement or optimizer, two different
        tables of one name, features of different batch sizes, stacking groups that
        name unknown tables.
    """
    config = _layer_config(feature_configs)
    tables_in_config: list[Any] = []
    if config is not None:
        tables_in_config = list(config["tables"])
        if table_stacking is _FROM_CONFIG:
            table_stacking = config.get("table_stacking", "auto")
        feature_configs = config["feature_configs"]
    elif table_stacking is _FROM_CONFIG:
        table_stacking = "auto"
    if auto_placement not in ("sparsecore", "default_device"):
        raise ConfigError(f"auto_placement must be 'sparsecore' or 'default_device', got {auto_placement!r}")
    topology = _topology(global_device_count, num_sc_per_device)

    features: list[tuple[str, FeatureSpec, int]] = []
    tables: dict[str, TableSpec] = {}
    optimizer_keys: dict[str, tuple] = {}
    for path, feature in _with_paths(feature_configs):
        table = _get(feature, "table")
        if isinstance(table, int) and not isinstance(table, bool) and tables_in_config:
            if not 0 <= table < len(tables_in_config):
                raise ConfigError(f"feature {path!r}: table index {table} is not one of the "
                                  f"{len(tables_in_config)} tables of the config")
            table = tables_in_config[table]
        placement = _get(table, "placement")
        if placement not in _PLACEMENTS:
            raise ConfigError(f"feature {path!r}: placement {placement!r} is not one of {_PLACEMENTS}")
        if (auto_placement if placement == "auto" else placement) != "sparsecore":
            continue
        name = str(_get(table, "name"))
        optimizer_keys.setdefault(name, _optimizer(name, _get(table, "optimizer")))
        try:
            spec = TableSpec(name, _get(table, "vocabulary_size"), _get(table, "embedding_dim"),
                             combiner=_get(table, "combiner"), optimizer=optimizer_keys[name][0],
                             max_ids_per_partition=int(_get(table, "max_ids_per_partition")),
                             max_unique_ids_per_partition=int(_get(table, "max_unique_ids_per_partition")))
        except ConfigError as err:
            raise ConfigError(f"Keras-RS table {name!r}: {err}") from None
        if tables.setdefault(name, spec) != spec or optimizer_keys[name] != _optimizer(name, _get(table, "optimizer")):
            raise ConfigError(f"two different tables are named {name!r}; Keras-RS would use the first for both: "
                              "give them different names")
        feature_name = str(_get(feature, "name"))
        features.append((path, FeatureSpec(feature_name, spec), _samples(_get(feature, "output_shape"), feature_name)))
    if not features:
        raise ConfigError("no feature has its table on the SparseCore (placement 'sparsecore', or 'auto' with "
                          "auto_placement='sparsecore'); nothing to plan")
    features.sort(key=lambda item: item[0])                # the library flattens {path: spec} by path
    ordered = normalize_features([f for _, f, _ in features])
    batches = {samples for _, _, samples in features}
    if len(batches) > 1:
        raise ConfigError(f"features have different batch sizes { {f.name: b for _, f, b in features} }; scwork "
                          "gives every feature of a batch the same number of samples")
    batch = batches.pop()
    groups = _groups(table_stacking, ordered, optimizer_keys, topology, batch)
    plan = plan_stacking(ordered, topology, groups, batch_size=batch, stack_limit_rule="largest_table")
    stack_limits = {s.name: {"max_ids_per_partition": s.max_ids_per_partition,
                             "max_unique_ids_per_partition": s.max_unique_ids_per_partition,
                             "suggested_coo_buffer_size_per_device": s.suggested_coo_buffer_size_per_device}
                    for s in plan.stacks}
    return ImportedModel(ordered, topology, batch, plan, groups, topology.sparsecores_per_device, stack_limits)


def _groups(table_stacking: Any, features: Sequence[FeatureSpec], optimizer_keys: Mapping[str, tuple],
            topology: Any, batch: int) -> list[list[str]] | None:
    """The groups the library's stacking functions build (None: no stacking)."""
    if table_stacking is None:
        return None
    if isinstance(table_stacking, str):
        if table_stacking != "auto":
            raise ConfigError(f"table_stacking must be None, 'auto' or lists of table names, got {table_stacking!r}")
        # auto_stack_tables groups by (padded dim, optimizer with its settings, combiner): plan each
        # optimizer setting apart (scwork's own key knows only the optimizer's name)
        by_setting: dict[tuple, list[FeatureSpec]] = {}
        for f in features:
            by_setting.setdefault(optimizer_keys[f.table.name], []).append(f)
        groups = [list(s.table_names) for part in by_setting.values()
                  for s in plan_stacking(part, topology, "auto", batch_size=batch).stacks]
        order = list(dict.fromkeys(f.table.name for f in features))
        return sorted(groups, key=lambda g: order.index(g[0]))
    try:
        items = list(table_stacking)
    except TypeError:
        raise ConfigError(f"table_stacking must be None, 'auto' or lists of table names, got {table_stacking!r}") \
            from None
    if not items:                                          # an empty list stacks nothing
        return None
    if all(isinstance(n, str) for n in items):
        groups = [items]                                   # one list of names: one stack
    elif all(isinstance(g, (list, tuple)) and all(isinstance(n, str) for n in g) for g in items):
        groups = [list(g) for g in items]
    else:
        raise ConfigError(f"table_stacking must be None, 'auto', a list of table names or a list of such lists, "
                          f"got {table_stacking!r}")
    known = {f.table.name for f in features}
    for group in groups:
        unknown = [n for n in group if n not in known]
        if unknown:
            raise ConfigError(f"table_stacking names tables {unknown} that no SparseCore feature uses; "
                              f"SparseCore tables: {sorted(known)}")
        keys = {optimizer_keys[n] for n in group}
        if len(keys) > 1:
            raise ConfigError(f"table_stacking group {group}: its tables' optimizers have different settings "
                              f"({sorted(map(str, keys))}); the library refuses to stack them")
    return groups
