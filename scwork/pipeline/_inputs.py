"""What ``step_model`` is given, checked and normalised: statistics or a plan, widths, dtypes.

Also the per-stack optimizers and counts of :func:`~scwork.pipeline.step_model`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from scwork._validate import shown
from scwork.errors import ConfigError, InputError
from scwork.pipeline.params import DTYPE_SIZES

__all__ = ["DIRECTIONS", "MAX_TIMELINE_STEPS", "MAX_MINIBATCHES"]


_DTYPE_ALIASES = {"float32": "f32", "fp32": "f32", "bfloat16": "bf16", "float16": "f16", "fp16": "f16",
                  "int8": "s8", "i8": "s8"}
#: SparseCore pass directions.
DIRECTIONS: tuple[str, ...] = ("forward", "backward")


def _parse_dtype(dtype: Any, where: str) -> str:
    key = dtype.strip().lower() if isinstance(dtype, str) else None    # dtypes are names
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_SIZES:
        raise ConfigError(f"{where}: dtype must be one of {', '.join(DTYPE_SIZES)}, got {shown(dtype)}")
    return key


# --------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Stack:
    name: str
    dim: int
    features: int
    optimizer: str
    dtype: str
    max_ids: int  # configured, -1: none
    max_unique: int


def _per_stack(value: Any, stacks: list[str], name: str, default: Any) -> dict[str, Any]:
    if value is None:
        return {s: default for s in stacks}
    if isinstance(value, Mapping):
        missing = [s for s in stacks if s not in value]
        if missing and default is dataclasses.MISSING:
            raise ConfigError(f"{name} has no entry for stack(s) {missing}; give one per stack")
        return {s: value.get(s, default) for s in stacks}
    return {s: value for s in stacks}


#: Most steps :func:`step_model` lays out (each one interval by interval).
MAX_TIMELINE_STEPS = 1024

_INT32_MAX = 2**31 - 1  # widths and feature counts are int32 on the device, as in TableSpec

#: Most mini-batches per stack: the 64 buckets of jax-tpu-embedding's mini-batching split.
MAX_MINIBATCHES = 64


def _as_count(name: str, value: Any, minimum: int = 1, maximum: int = 2**62) -> int:
    """An integer in ``[minimum, maximum]``; the default maximum keeps int64 arithmetic exact."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {shown(value)}")
    if value > maximum:
        raise ConfigError(f"{name} must be <= {maximum:,}, got {shown(value)}")
    return int(value)


def _nonneg(name: str, value: Any) -> float:
    try:
        finite = math.isfinite(value)
    except (TypeError, OverflowError):      # not a number, or an int beyond float range
        finite = False
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not finite or value < 0:
        raise ConfigError(f"{name} must be a finite number >= 0, got {shown(value)}")
    return float(value)


def _resolve_inputs(stats, plan, topology, widths, optimizers, features_per_stack, dtype, num_minibatches):
    """Normalise the many ways of describing the workload into arrays and stack records."""
    stats, plan, topology, mb_counts = _unwrap_minibatch_plan(stats, plan, topology)
    _check_stats(stats)
    stack_names = [str(s) for s in stats["stack"].values]
    topology = _check_plan_and_topology(stats, stack_names, plan, topology, widths)
    P = int(stats.sizes["partition"])
    stacks = _stack_records(stats, stack_names, plan, widths, optimizers, features_per_stack, dtype)
    if "samples_per_sc" in stats.attrs:
        n = int(stats.attrs["samples_per_sc"])
    elif "batch_size" in stats.attrs:
        n = int(stats.attrs["batch_size"]) // P
    else:
        raise InputError("stats.attrs has neither samples_per_sc nor batch_size (compute_stats sets both)")
    ids, uniq, nmb = _counts_per_minibatch(stats, stack_names, mb_counts, num_minibatches)
    _clip_to_limits(ids, uniq, stacks)
    raw_ids, raw_source = _raw_ids(stats, ids)
    return stats, plan, topology, stacks, ids, uniq, nmb, n, raw_ids, raw_source


def _unwrap_minibatch_plan(stats, plan, topology):
    """A MiniBatchPlan given as ``stats``: its statistics, plan, topology and mini-batch counts."""
    mb_counts = None
    if hasattr(stats, "num_minibatches") and hasattr(stats, "stats") and hasattr(stats, "plan"):
        mbplan = stats
        plan = mbplan.plan if plan is None else plan
        topology = mbplan.topology if topology is None else topology
        mb_counts = {str(s): int(v) for s, v in zip(mbplan.num_minibatches["stack"].values,
                                                     mbplan.num_minibatches.values)}
        stats = mbplan.stats
    return stats, plan, topology, mb_counts


def _check_stats(stats) -> None:
    """``stats`` must be what compute_stats returns: ids and unique ids per (stack, device, sc, partition)."""
    import xarray as xr

    if not isinstance(stats, xr.Dataset):
        raise InputError(f"stats must be the xarray.Dataset of scwork.sharding.compute_stats (or a "
                         f"MiniBatchPlan), got {type(stats).__name__}")
    for var in ("ids", "unique_ids"):
        if var not in stats:
            raise InputError(f"stats has no variable {shown(var)}: pass the output of scwork.sharding.compute_stats")
        dims = set(stats[var].dims)
        if not {"stack", "device", "sc", "partition"} <= dims or not dims <= {"minibatch", "stack", "device", "sc",
                                                                              "partition"}:
            raise InputError(f"stats[{shown(var)}] has dims {stats[var].dims}; expected (stack, device, sc, partition) "
                             "with an optional leading minibatch dim")
    if stats.sizes["stack"] == 0:
        # A step with no embedding lookups has no SparseCore phases to model (and the
        # per-stack breakdowns below would have no rows): say so rather than fail inside.
        raise InputError("stats has no stacks (its 'stack' dim has length 0): pass the statistics of at least "
                         "one stacked table, e.g. compute_stats of a batch with at least one feature")


def _check_plan_and_topology(stats, stack_names, plan, topology, widths):
    """The topology (given, or the plan's), after checking that plan and statistics belong together."""
    if plan is not None:
        from scwork.sharding import StackingPlan

        if not isinstance(plan, StackingPlan):
            raise ConfigError(f"plan must be a scwork.sharding.StackingPlan, got {type(plan).__name__}")
        topology = plan.topology if topology is None else topology
        known = {s.name: s for s in plan.stacks}
        missing = [s for s in stack_names if s not in known]
        if missing:
            raise ConfigError(f"stats has stacks {missing} that the plan does not know (plan stacks: "
                              f"{sorted(known)}); compute the stats with this plan")
    elif widths is None:
        raise ConfigError("give plan= (a StackingPlan) or widths= ({stack: embedding_dim}) so the model knows "
                          "each stacked table's width")
    if topology is None:
        raise ConfigError("give topology= (scwork.Topology), or a plan / MiniBatchPlan that carries one")
    G = int(stats.sizes["device"])
    S = int(stats.sizes["sc"])
    P = int(stats.sizes["partition"])
    if G != topology.num_devices or S != topology.sparsecores_per_device or P != topology.num_partitions:
        raise InputError(f"stats were computed for {G} devices x {S} SparseCores ({P} partitions) but the "
                         f"topology {topology} has {topology.num_devices} x {topology.sparsecores_per_device}")
    return topology


def _stack_records(stats, stack_names, plan, widths, optimizers, features_per_stack, dtype) -> list:
    """One :class:`_Stack` per stack: width, features, optimizer and dtype (overrides over the plan)."""
    dtypes = _per_stack(dtype, stack_names, "dtype", "f32")
    opts = _per_stack(optimizers, stack_names, "optimizers", None)
    feats = _per_stack(features_per_stack, stack_names, "features_per_stack", None)
    wids = {}
    if widths is not None:
        wids = _per_stack(widths, stack_names, "widths", dataclasses.MISSING if plan is None else None)
        wids = {k: v for k, v in wids.items() if v is not None}
    cfg_ids = stats["configured_max_ids_per_partition"].values if "configured_max_ids_per_partition" in stats \
        else np.full(len(stack_names), -1)
    cfg_uniq = stats["configured_max_unique_ids_per_partition"].values \
        if "configured_max_unique_ids_per_partition" in stats else np.full(len(stack_names), -1)
    stacks = []
    for k, name in enumerate(stack_names):
        if plan is not None:
            st = plan.stack(name)
            dim = max(t.table.embedding_dim for t in st.tables)
            n_feat = len(st.features)
            optimizer = st.optimizer
        else:
            dim, n_feat, optimizer = wids[name], 1, "sgd"
        if name in wids:
            dim = wids[name]
        if feats[name] is not None:
            n_feat = feats[name]
        if opts[name] is not None:
            optimizer = opts[name]
        stacks.append(_Stack(name, _as_count(f"width of stack {shown(name)}", dim, maximum=_INT32_MAX),
                             _as_count(f"features of stack {shown(name)}", n_feat, maximum=_INT32_MAX),
                             str(optimizer),
                             _parse_dtype(dtypes[name], f"stack {shown(name)}"), int(cfg_ids[k]), int(cfg_uniq[k])))
    return stacks


def _counts_per_minibatch(stats, stack_names, mb_counts, num_minibatches):
    """``(ids, unique ids, mini-batches per stack)``, counts as (minibatch, stack, device, sc, partition).

    Statistics without a minibatch dim are split evenly over ``num_minibatches``.
    """
    ids = stats["ids"].transpose(*[d for d in ("minibatch", "stack", "device", "sc", "partition")
                                   if d in stats["ids"].dims]).values.astype(np.int64)
    uniq = stats["unique_ids"].transpose(*[d for d in ("minibatch", "stack", "device", "sc", "partition")
                                           if d in stats["unique_ids"].dims]).values.astype(np.int64)
    if ids.ndim == 4:
        ids, uniq = ids[None], uniq[None]
        has_mb_dim = False
    else:
        has_mb_dim = True
    if (ids < 0).any() or (uniq < 0).any():
        raise InputError("stats hold negative id counts")
    if (uniq > ids).any():
        raise InputError("stats hold more unique ids than ids in some (stack, device, sc, partition)")
    K = len(stack_names)
    if has_mb_dim:
        if mb_counts is None:
            if "num_minibatches" in stats:
                mb_counts = {s: int(v) for s, v in zip(stack_names, stats["num_minibatches"].values)}
            else:
                mb_counts = {s: ids.shape[0] for s in stack_names}
        if num_minibatches is not None:
            raise ConfigError("the statistics already have a minibatch dim; do not pass num_minibatches too")
        nmb = np.array([max(1, mb_counts.get(s, 1)) for s in stack_names], np.int64)
    else:
        nmb_map = _per_stack(num_minibatches, stack_names, "num_minibatches", 1)
        # One (minibatch, stack, device, sc, partition) array of counts is made per
        # mini-batch below; the reference never makes more than its 64 buckets.
        nmb = np.array([_as_count(f"num_minibatches[{shown(s)}] (MAX_MINIBATCHES={MAX_MINIBATCHES}: the reference's "
                                  "buckets)", nmb_map[s], maximum=MAX_MINIBATCHES) for s in stack_names], np.int64)
        M = int(nmb.max()) if K else 1
        if M > 1:
            base_i, base_u = ids[0], uniq[0]
            new_i = np.zeros((M,) + base_i.shape, np.int64)
            new_u = np.zeros((M,) + base_u.shape, np.int64)
            for k in range(K):
                m = int(nmb[k])
                for j in range(m):
                    new_i[j, k] = base_i[k] // m + (j < base_i[k] % m)
                    new_u[j, k] = np.minimum(base_u[k] // m + (j < base_u[k] % m), new_i[j, k])
            ids, uniq = new_i, new_u
    return ids, uniq, nmb


def _clip_to_limits(ids, uniq, stacks) -> None:
    """Dropping: clip to the configured limits (observed > configured implies allow_id_dropping)."""
    for k, st in enumerate(stacks):
        if st.max_ids >= 0:
            ids[:, k] = np.minimum(ids[:, k], st.max_ids)
        if st.max_unique >= 0:
            uniq[:, k] = np.minimum(uniq[:, k], st.max_unique)
        uniq[:, k] = np.minimum(uniq[:, k], ids[:, k])


def _raw_ids(stats, ids):
    """Ids each (stack, device, sc) receives before dedup (host work), and where that number comes from."""
    if "input_ids" in stats:
        raw = stats["input_ids"]
        if "minibatch" in raw.dims:
            raw = raw.sum("minibatch")
        return raw.transpose("stack", "device", "sc").values.astype(np.int64), "input_ids (raw ids before dedup)"
    return ids.sum(axis=(0, 4)), "ids (after per-sample dedup: input_ids missing)"
