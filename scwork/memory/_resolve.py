"""The checked inputs of the memory model: what a user passes to ``plan``, as Model and Knobs.

From what a user passes to :func:`~scwork.memory.plan` (features, statistics, limits,
keyword settings) to the checked :class:`Model` and :class:`Knobs` of the memory model.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from scwork.errors import ConfigError
from scwork._validate import shown
from scwork.memory._model import (
    Knobs,
    Model,
    StackInfo,
    TableInfo,
    check_int,
    finite,
    optimizer_slot_count,
    parse_dtype,
    stack_limits,
)

__all__ = ["resolve", "MAX_BATCH_SIZE", "MAX_BYTES", "MAX_COUNT", "MAX_REPLICAS"]

#: Largest byte count a memory knob may hold (2**57 bytes, 128 PiB: beyond any HBM), so
#: that sums of the model's buffers stay within int64.
MAX_BYTES = 2**57

#: Largest global batch the model takes (2**40 samples per step): counts and byte
#: sizes derived from it then stay exact in int64 and float64.
MAX_BATCH_SIZE = 2**40

#: Largest chip, replica, table or iteration count a memory knob may hold (2**31 - 1,
#: int32 as on the device): products with byte sizes then stay within int64.
MAX_COUNT = 2**31 - 1

#: Largest ``logical_replica_count`` (2**20, beyond any slice): it multiplies per-row
#: byte counts held in int64 arrays.
MAX_REPLICAS = 2**20


# --------------------------------------------------------------------------------------
# resolving user inputs
# --------------------------------------------------------------------------------------
_KNOWN_KWARGS = (
    "batch_size", "stacking", "config", "stack_limits", "limits", "stats", "ids_per_sample", "dtype",
    "slot_dtype", "optimizers", "optimizer_slots", "chip", "num_chips", "tile_spmem_bytes", "hbm_bytes",
    "logical_replica_count", "stage_gather_operands_in_hbm", "num_serialized_tables", "dense_weights_bytes",
    "constants_bytes", "tensorcore_activation_bytes", "prefetch_bytes_per_step",
    "maximum_parallel_iterations", "headroom", "stack_limit_rule",
)


def _features(model: Any):
    from scwork.sharding import FeatureSpec, StackingPlan, TableSpec

    if isinstance(model, StackingPlan):
        return model.features, model
    if isinstance(model, (FeatureSpec, TableSpec)):
        model = [model]
    if isinstance(model, Mapping):
        items = list(model.values())
    else:
        try:
            items = list(model)
        except TypeError:
            raise ConfigError(
                "model must be a list of FeatureSpec or TableSpec, a mapping of them, or a "
                f"StackingPlan; got {type(model).__name__}"
            ) from None
    if not items:
        raise ConfigError("model has no tables; give at least one FeatureSpec or TableSpec")
    if all(isinstance(x, TableSpec) for x in items):
        return tuple(FeatureSpec(t.name, t) for t in items), None
    if all(isinstance(x, FeatureSpec) for x in items):
        return (model if isinstance(model, Mapping) else tuple(items)), None
    bad = [x for x in items if not isinstance(x, (FeatureSpec, TableSpec))]
    got = f"got {shown(bad[0])}" if bad else "got a mix of both"
    raise ConfigError(
        "model must hold only FeatureSpec objects or only TableSpec objects (each table then has one "
        f"feature of the same name); {got}"
    )


def _stats_limits(stats: Any, stack: str) -> tuple[int | None, int | None]:
    if stats is None:
        return None, None
    import xarray as xr

    if not isinstance(stats, xr.Dataset):
        raise ConfigError(f"stats must be the Dataset of scwork.sharding.compute_stats, got {shown(stats)}")
    try:
        names = [str(s) for s in stats["stack"].values]
    except (KeyError, TypeError):
        raise ConfigError("stats must be the Dataset of scwork.sharding.compute_stats (no 'stack' dim)") from None
    if stack not in names:
        raise ConfigError(
            f"stats has no stack {shown(stack)} (its stacks: {names}); compute the statistics with the same "
            "stacking as the memory model (pass the same stacking= or the StackingPlan)"
        )
    out = []
    for var in ("max_ids_per_partition", "max_unique_ids_per_partition"):
        if var not in stats:
            raise ConfigError(f"stats has no variable {shown(var)}; pass the Dataset of compute_stats")
        out.append(int(stats[var].sel(stack=stack).max()))
    return out[0], out[1]


def _limit_pair(where: str, value: Any) -> tuple[int | None, int | None]:
    if isinstance(value, Mapping):
        pair = (value.get("max_ids_per_partition"), value.get("max_unique_ids_per_partition"))
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        pair = (value[0], value[1])
    else:
        raise ConfigError(f"{where} must be (max_ids_per_partition, max_unique_ids_per_partition), got {shown(value)}")
    return (check_int(f"{where}[0] (max_ids_per_partition)", pair[0], minimum=1, allow_none=True, unit="ids"),
            check_int(f"{where}[1] (max_unique_ids_per_partition)", pair[1], minimum=1, allow_none=True,
                      unit="ids"))


def resolve(model: Any, topology: Any, **kwargs) -> tuple[Model, Knobs]:
    """Validate the inputs of :func:`scwork.memory.plan` and split them into Model and Knobs.

    The checks run in a fixed order (keywords, batch, topology and chip, memory sizes,
    stacking, limits, per-feature valencies, per-table dtypes and optimizers, knobs), so
    the first problem reported is always the same one.

    Raises
    ------
    ConfigError
        Any invalid input (the message names it and says how to fix it).
    TypeError
        An unknown keyword.
    """
    unknown = sorted(set(kwargs) - set(_KNOWN_KWARGS))
    if unknown:
        raise TypeError(f"unknown keyword argument(s) {unknown}; known: {', '.join(_KNOWN_KWARGS)}")
    kw = dict(kwargs)
    if "batch_size" not in kw:
        raise ConfigError("batch_size is required (global batch: samples per feature per step)")
    batch = check_int("batch_size", kw["batch_size"], minimum=1, unit="samples", maximum=MAX_BATCH_SIZE)
    topology_arg = topology
    chip, topology = _chip_and_topology(kw, topology)
    sizes = _memory_sizes(kw, chip)
    given_plan, stacking, config, splan, user_limits = _stacking(model, kw, topology, batch)
    overrides, explicit = _limit_overrides(kw, [s.name for s in splan.stacks], user_limits)
    valency = _valencies(kw.get("ids_per_sample"), [f.name for f in splan.features])
    tables, stacks = _tables_and_stacks(kw, splan, topology, valency)
    knobs = _knobs(kw, batch, topology, chip, sizes, overrides, explicit)
    rebuild = None
    if given_plan is None and isinstance(stacking, str) and stacking == "auto" and not (
            config is not None and config.disable_table_stacking):
        original_topology, original_kwargs = topology_arg, dict(kwargs)

        def rebuild(batch_size: int, chips: int):
            return resolve(model, original_topology, **{**original_kwargs, "batch_size": batch_size,
                                                          "num_chips": chips})

    model_ = Model(tables=tuple(tables), stacks=tuple(stacks), chip=chip, plan=splan, rebuild=rebuild,
                   built_for=(batch, topology.num_chips))
    for st in model_.stacks:  # fail early on missing limits
        stack_limits(knobs, st)
    return model_, knobs


def _chip_and_topology(kw: dict, topology: Any):
    """The chip (``chip=`` or the topology's) with SparseCores, and the topology resized to ``num_chips=``."""
    from scwork.errors import TopologyError
    from scwork.hardware import TpuChip, get
    from scwork.hardware.topology import Topology

    if not isinstance(topology, Topology):
        raise ConfigError(
            f"topology must be a scwork.Topology, got {type(topology).__name__}; e.g. "
            "scwork.Topology.for_chip('v5p', num_chips=4)"
        )
    chip = kw.get("chip")
    if chip is None:
        chip = topology.chip_info
        if chip is None:
            raise ConfigError(
                f"topology {topology} names no chip: pass chip='v5p' (or a TpuChip, e.g. "
                "scwork.hardware.override('v4', tile_spmem_bytes=...)), or build the topology with "
                "scwork.Topology.for_chip(...)"
            )
    else:
        chip = get(chip)
    if not isinstance(chip, TpuChip):
        raise ConfigError(f"chip must be a TPU, got {shown(chip.name)} ({type(chip).__name__})")
    if not chip.has_sparsecore or topology.sparsecores_per_chip < 1:
        raise ConfigError(
            f"{chip.marketing_name} has no SparseCore (topology {topology}): the SparseCore memory model "
            "needs a chip with SparseCores, e.g. 'v5p', 'v6e' or 'tpu7x'"
        )
    if topology.sparsecores_per_chip != chip.sparsecores_per_chip:
        raise ConfigError(
            f"topology has {topology.sparsecores_per_chip} SparseCores per chip but chip {shown(chip.name)} has "
            f"{chip.sparsecores_per_chip}; build the topology with Topology.for_chip({shown(chip.name)}, ...)"
        )
    try:
        num_chips = check_int("num_chips", kw.get("num_chips"), minimum=1, allow_none=True, unit="chips",
                              maximum=MAX_COUNT)
    except ConfigError as err:
        raise TopologyError(f"{err}: a topology needs at least one chip") from None
    if num_chips is not None and num_chips != topology.num_chips:
        if num_chips > chip.max_slice_chips:
            raise TopologyError(
                f"{num_chips} chips exceed the largest {chip.name} slice ({chip.max_slice_chips} chips)"
            )
        topology = topology.replace(num_chips=num_chips, shape=None, wraparound=None)
    return chip, topology


def _memory_sizes(kw: dict, chip) -> tuple[int | None, int, float]:
    """``(tile_spmem_bytes, hbm_bytes, headroom)``: the chip's values unless overridden."""
    tile_spmem = kw.get("tile_spmem_bytes")
    tile_spmem = chip.tile_spmem_bytes if tile_spmem is None else check_int(
        "tile_spmem_bytes", tile_spmem, minimum=1, unit="bytes", maximum=MAX_BYTES)
    hbm = kw.get("hbm_bytes")
    hbm = chip.hbm_bytes if hbm is None else check_int("hbm_bytes", hbm, minimum=1, unit="bytes", maximum=MAX_BYTES)
    headroom = kw.get("headroom", 0.1)
    if isinstance(headroom, bool) or not isinstance(headroom, numbers.Real) or not finite(headroom) \
            or not 0 <= headroom < 1:
        raise ConfigError(f"headroom must be a fraction in [0, 1) of HBM kept free, got {shown(headroom)}")
    return tile_spmem, hbm, float(headroom)


def _stacking(model: Any, kw: dict, topology, batch: int):
    """The stacking plan for this topology: ``(given_plan, stacking, config, plan, user_limits)``.

    A plan given as the model is kept when its partition count matches; on another
    chip count its stacks (and limits) are planned again.
    """
    from scwork.sharding import SparsecoreConfig, StackingPlan, plan_stacking

    features, given_plan = _features(model)
    config = kw.get("config")
    if config is not None and not isinstance(config, SparsecoreConfig):
        raise ConfigError(f"config must be a SparsecoreConfig, got {type(config).__name__}")
    user_limits = kw.get("stack_limits")
    if user_limits is not None and not isinstance(user_limits, Mapping):
        raise ConfigError(f"stack_limits must be a dict stack name -> (max_ids, max_unique), got {shown(user_limits)}")
    stacking = kw.get("stacking", "auto")
    if given_plan is not None and given_plan.num_partitions == topology.num_partitions:
        splan = plan_stacking(features, topology, given_plan)
    else:
        if given_plan is not None:  # same stacks on another chip count
            stacking = [list(s.table_names) for s in given_plan.stacks]
            base = {s.name: (s.max_ids_per_partition, s.max_unique_ids_per_partition) for s in given_plan.stacks
                    if s.max_ids_per_partition is not None or s.max_unique_ids_per_partition is not None}
            user_limits = {**base, **(user_limits or {})}
        if isinstance(stacking, StackingPlan):
            raise ConfigError("pass a StackingPlan as the model, not as stacking=")
        splan = plan_stacking(features, topology, stacking, batch_size=batch, config=config,
                              stack_limits=None,
                              stack_limit_rule=kw.get("stack_limit_rule", "jax_tpu_embedding"))
    return given_plan, stacking, config, splan, user_limits


def _limit_overrides(kw: dict, names: list[str], user_limits):
    """Per-stack limits set by ``limits=`` (all stacks) and ``stack_limits=`` (explicit ones win)."""
    overrides: dict[str, tuple[int | None, int | None]] = {}
    explicit: dict[str, tuple[int | None, int | None]] = {}
    limits = kw.get("limits")
    if limits is not None:
        pair = _limit_pair("limits", limits)
        overrides = {n: pair for n in names}
    if user_limits:
        unknown_stacks = sorted(set(user_limits) - set(names))
        if unknown_stacks:
            raise ConfigError(f"stack_limits names unknown stacks {unknown_stacks}; stacks are {names}")
        for n_, v in user_limits.items():
            overrides[n_] = explicit[n_] = _limit_pair(f"stack_limits[{shown(n_)}]", v)
    return overrides, explicit


def _valencies(ids_per_sample, feature_names: list[str]):
    """``valency(feature)``: the ids per sample given for a feature (None: not given), checked."""

    def valency(feature: str) -> float | None:
        if ids_per_sample is None:
            return None
        value = ids_per_sample.get(feature) if isinstance(ids_per_sample, Mapping) else ids_per_sample
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not finite(value) or value < 0:
            raise ConfigError(f"ids_per_sample for feature {shown(feature)} must be a number >= 0, got {shown(value)}")
        return float(value)

    if isinstance(ids_per_sample, Mapping):
        extra = sorted(set(ids_per_sample) - set(feature_names))
        if extra:
            raise ConfigError(f"ids_per_sample names unknown features {extra}; features are {feature_names}")
    return valency


def _tables_and_stacks(kw: dict, splan, topology, valency) -> tuple[list[TableInfo], list[StackInfo]]:
    """What the memory model needs of every table (dtype, optimizer slots) and stack (limits, valency)."""
    dtype = kw.get("dtype", "f32")
    slot_dtype = kw.get("slot_dtype")
    optimizers = kw.get("optimizers")
    optimizers = {} if optimizers is None else optimizers      # (an array has no truth value)
    custom_slots = kw.get("optimizer_slots")
    if not isinstance(optimizers, Mapping):
        raise ConfigError(f"optimizers must be a dict table name -> optimizer name, got {shown(optimizers)}")
    table_names = [t.table.name for s in splan.stacks for t in s.tables]
    for label, mapping in (("optimizers", optimizers), ("dtype", dtype), ("slot_dtype", slot_dtype)):
        if isinstance(mapping, Mapping):
            extra = sorted(set(mapping) - set(table_names))
            if extra:
                raise ConfigError(f"{label} names unknown tables {extra}; tables are {table_names}")

    def per_table(value, name, default):
        if isinstance(value, Mapping):
            value = value.get(name, default)
        return value

    tables: list[TableInfo] = []
    stacks: list[StackInfo] = []
    for s in splan.stacks:
        dtypes = set()
        opts = set()
        for t in s.tables:
            d, _ = parse_dtype(per_table(dtype, t.table.name, "f32"), f"dtype of table {shown(t.table.name)}")
            sd = per_table(slot_dtype, t.table.name, None)
            if sd is not None:
                sd, _ = parse_dtype(sd, f"slot_dtype of table {shown(t.table.name)}")
            opt = optimizers.get(t.table.name, t.table.optimizer)
            slots = optimizer_slot_count(opt, custom_slots)
            dtypes.add(d)
            opts.add(str(opt).strip().lower())
            tables.append(TableInfo(t.table.name, s.name, t.table.vocab_size, t.table.embedding_dim,
                                    str(opt).strip().lower(), slots, d, sd))
        if len(dtypes) > 1:
            raise ConfigError(
                f"stack {shown(s.name)} mixes dtypes {sorted(dtypes)}; tables of one stack share a dtype "
                "(stack them separately or give them the same dtype)"
            )
        if len(opts) > 1:
            raise ConfigError(
                f"stack {shown(s.name)} mixes optimizers {sorted(opts)} (optimizers=...); tables of one stack "
                "share an optimizer"
            )
        stats_ids, stats_uniq = _stats_limits(kw.get("stats"), s.name)
        vals = [valency(f.name) for f in s.features]
        ips = None if any(v is None for v in vals) else float(sum(vals))
        dims_by_table = {t.table.name: t.table.embedding_dim for t in s.tables}
        stacks.append(StackInfo(
            name=s.name, tables=s.table_names, features=tuple(f.name for f in s.features),
            dims=tuple(t.table.embedding_dim for t in s.tables), dtype=dtypes.pop(), optimizer=opts.pop(),
            configured_max_ids=s.max_ids_per_partition, configured_max_unique=s.max_unique_ids_per_partition,
            stats_max_ids=stats_ids, stats_max_unique=stats_uniq, ids_per_sample=ips,
            feature_dims=tuple(dims_by_table[f.table.name] for f in s.features),
            static_entries_per_sc=s.static_buffer_size_per_sc(topology.sparsecores_per_device),
        ))
    return tables, stacks


def _knobs(kw: dict, batch: int, topology, chip, sizes, overrides, explicit) -> Knobs:
    """The scalar settings of the memory model, each checked against its bound."""
    tile_spmem, hbm, headroom = sizes
    lrc = check_int("logical_replica_count", kw.get("logical_replica_count"), minimum=1, allow_none=True,
                    unit="replicas", maximum=MAX_REPLICAS)
    stage = kw.get("stage_gather_operands_in_hbm", False)
    if not isinstance(stage, (bool, np.bool_)):
        raise ConfigError(f"stage_gather_operands_in_hbm must be True or False, got {shown(stage)}")
    return Knobs(
        batch_size=batch,
        num_chips=topology.num_chips,
        sparsecores_per_chip=topology.sparsecores_per_chip,
        devices_per_chip=topology.devices_per_chip,
        tiles_per_sparsecore=check_int("chip.tiles_per_sparsecore", chip.tiles_per_sparsecore, minimum=1),
        tile_spmem_bytes=tile_spmem,
        hbm_bytes=hbm,
        hbm_bandwidth_bytes_per_s=float(chip.hbm_bandwidth_bytes_per_s),
        line_bytes=check_int("chip.dma_granule_bytes", chip.dma_granule_bytes, minimum=1, unit="bytes"),
        stage_gather_operands_in_hbm=bool(stage),
        num_serialized_tables=check_int("num_serialized_tables", kw.get("num_serialized_tables", 1), minimum=0,
                                        unit="tables", maximum=MAX_COUNT),
        dense_weights_bytes=check_int("dense_weights_bytes", kw.get("dense_weights_bytes", 0), unit="bytes",
                                      maximum=MAX_BYTES),
        constants_bytes=check_int("constants_bytes", kw.get("constants_bytes", 0), unit="bytes", maximum=MAX_BYTES),
        tensorcore_activation_bytes=check_int("tensorcore_activation_bytes",
                                              kw.get("tensorcore_activation_bytes", 0), unit="bytes",
                                              maximum=MAX_BYTES),
        prefetch_bytes_per_step=check_int("prefetch_bytes_per_step", kw.get("prefetch_bytes_per_step"),
                                          allow_none=True, unit="bytes", maximum=MAX_BYTES),
        maximum_parallel_iterations=check_int("maximum_parallel_iterations",
                                              kw.get("maximum_parallel_iterations", 1), minimum=1, unit="steps",
                                              maximum=MAX_COUNT),
        headroom=headroom,
        logical_replica_count=lrc,
        limits=overrides,
        stack_limits=explicit,
    )
