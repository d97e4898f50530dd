"""Where a training step's time goes: host, SparseCore, ICI and TensorCore phases.

:func:`step_model` turns what the sharding engine observed (per stacked table, per
source SparseCore and per partition: ids and unique ids,
:func:`scwork.sharding.compute_stats`) plus the tables' widths, dtypes and
optimizers into per-phase times, lays a few steps out sequentially and pipelined
(:mod:`scwork.pipeline.timeline`) and reports the speed-up, the gradient
staleness and the bottleneck. Every assumption is a field of
:class:`~scwork.pipeline.StepModelParams` (unit, default, source); hardware
numbers come from the catalog (:mod:`scwork.hardware`).

The SparseCore model (tile level)
---------------------------------
With ``T`` tiles per SparseCore (``tiles_per_sparsecore``), 32-byte DMA granules
(``dma_granule_bytes``), SIMD width ``W`` (``simd_width_f32``, or
``simd_width_bf16`` for 16-bit tables) and per-tile HBM bandwidth
``hbm_bandwidth_bytes_per_s * sc_hbm_bandwidth_fraction / (sparsecores_per_chip * T)``:

- **Rows.** A stacked table of width ``dim`` in a dtype of ``b`` bytes is padded to
  whole granules: ``w = round_up(dim, 32 / b)`` elements (8 for f32, 16 for bf16,
  32 for s8; jax-tpu-embedding's table stacking / 7). One row gather costs ``ceil(w * b / 32)`` granules of 32 B,
  so a width-1 f32 table moves 32 B to use 4 (7/8 waste) and costs what a width-8
  table costs.
- **Source role** (the SparseCore that owns a slice of the batch, jax-tpu-embedding's preprocess_sparse_dense_matmul_input): for
  every partition ``p``, its ``ids[p]`` (after per-sample dedup) are spread evenly
  over the ``T`` tiles; the busiest tile combines ``sum_p ceil(ids[p] / T)`` rows,
  each ``ceil(w / W) * combine_ops_per_element`` vector instructions (plus
  ``dequantize_ops_per_element`` for s8). It reads its CSR input
  (``sum_p round_up(ids[p], 8) * csr_bytes_per_id``, spread over tiles) and
  writes its activations (``features * samples_per_sc`` rows of the float32 width
  ``round_up(dim, 8)``).
- **Owner role** (the SparseCore that owns partition ``p``, ``target = id % P``):
  it gathers the unique rows every source requests from its shard; per source
  stream the rows are spread over the tiles, so its busiest tile gathers
  ``sum_src ceil(unique[src, p] / T)`` rows. Skew therefore costs what it should:
  a hot partition makes its owner the slowest SparseCore, and the phase waits for
  the slowest one.
- **Backward.** The source reads the activation gradients and scatters them per id
  (same instruction count as the forward combine); the owner reads and writes
  every unique row and its optimizer slots (``2 * (1 + slots)`` row transfers) and
  runs the optimizer (``optimizer_ops_per_element`` instructions per element).
- **Time of one stacked table** = ``num_minibatches * sc_op_overhead_s`` +
  ``max(DMA time, vector time)`` of its busiest tile (``dma_compute_overlap``;
  their sum otherwise). Stacks of one phase share the SparseCore: their DMA and
  vector work overlap (``max(sum DMA, sum vector)``); the ``N``
  stacks serialized by ``xla_sc_num_serialized_tables_to_optimize_hbm = N`` (the
  ones with the largest HBM stack, as in :mod:`scwork.memory`) each run alone in
  a slot, the others spread evenly over the slots, so serializing costs
  parallelism. ``N <= 1``: nothing serialized.
- **Mini-batching.** Mini-batch ``m`` of a stack is a separate op: with a
  :class:`~scwork.sharding.MiniBatchPlan` its per-mini-batch statistics are used;
  with a bare ``num_minibatches`` the counts of every (slice, partition) are split
  as evenly as integers allow. Activations are written once per stack (mini-batches
  accumulate into them).
- **Dropping.** Counts above a configured limit (possible only with
  ``allow_id_dropping``) are clipped to the limit (the prefix cut keeps at most
  ``max_ids`` ids and ``max_unique`` distinct ids per stream).

ICI
---
Every unique row a source requests from a partition on *another device* crosses
ICI forward (the row in the table dtype plus ``ici_index_bytes``) and its gradient
(float32) crosses back. Per stack, direction and mini-batch the traffic is one
all-to-all whose per-device volume is the busiest device's; its time is the
collectives engine's alpha-beta cost of :func:`scwork.collectives.all_to_all`
(uniform blocks): on a one-dimensional slice a ring through all devices; on 2-D /
3-D grids dimension by dimension, one ring all-to-all per axis (then between the
devices of a dual-chiplet chip), each stage moving every device's whole vector.
Rings longer than ``ici_schedule_max_nodes`` use the scaling-book closed form
``V / (4 * 2W)`` plus ``N/2`` hop latencies. Stacking tables pays the per-hop
latency once for all of them.

Host and TensorCore
-------------------
A host preprocesses the raw ids (before dedup; ``input_ids`` of the statistics) of
its ``chips_per_host`` chips at ``host_ids_per_s * host_threads``, plus
``host_overhead_s``. TensorCore phases take the times you give, or FLOPs over
``tc_peak_flops * tc_efficiency``; the backward pass defaults to
``tc_backward_to_forward`` times the forward pass. Without either, the TensorCore
phases are 0 (stated in the result's assumptions).

Examples
--------
One chip with one SparseCore of 2 tiles (a made-up chip, so the arithmetic fits in
a line), one table of width 8 (f32: one 32-byte granule per row), 4 ids and 4
unique ids on the only partition, 1 sample:

>>> import scwork
>>> from scwork.pipeline import step_model, expected_stats, StepModelParams
>>> chip = scwork.hardware.override("v5p", sparsecores_per_chip=1, tiles_per_sparsecore=2,
...                                 hbm_bandwidth_bytes_per_s=64.0)
>>> topo = scwork.Topology(1, 1, chip=None)
>>> stats = expected_stats({"t": 4.0}, topo, batch_size=1, unique_fraction=1.0)
>>> params = StepModelParams(sc_op_overhead_s=0.0, sc_tile_vector_ops_per_s=1.0, csr_bytes_per_id=0)
>>> m = step_model(stats, widths={"t": 8}, topology=topo, chip=chip, params=params)

Per tile: 2 owner rows x 32 B + 1 activation row (8 float32 = 32 B) = 96 B at
64 / 2 = 32 B/s per tile: 3 s of DMA; 2 source ids x ceil(8 / 8) = 2 vector
instructions at 1 per second: 2 s. Forward = max(3, 2) = 3 s.

>>> float(m.phase_time["sc_forward"])
3.0
"""

from __future__ import annotations

import dataclasses
import functools
import html
import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from scwork.errors import ConfigError, InputError
from scwork.pipeline.params import DTYPE_SIZES, StepModelParams
from scwork.pipeline.timeline import PHASE_RESOURCE, PHASES, RESOURCE_KINDS, Timeline, Units, simulate

__all__ = ["StepModel", "step_model", "expected_stats", "DTYPE_SIZES", "DIRECTIONS"]

_DTYPE_ALIASES = {"float32": "f32", "fp32": "f32", "bfloat16": "bf16", "float16": "f16", "fp16": "f16",
                  "int8": "s8", "i8": "s8"}
#: SparseCore pass directions.
DIRECTIONS: tuple[str, ...] = ("forward", "backward")

_SIM_STEPS_FOR_PERIOD = 40


def _parse_dtype(dtype: Any, where: str) -> str:
    key = dtype.strip().lower() if isinstance(dtype, str) else dtype
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_SIZES:
        raise ConfigError(f"{where}: dtype must be one of {', '.join(DTYPE_SIZES)}, got {dtype!r}")
    return key


def _round_up(a, m):
    return -(-a // m) * m


def _ceil_div(a, b):
    return -(-a // b)


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


def _as_count(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _nonneg(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _resolve_inputs(stats, plan, topology, widths, optimizers, features_per_stack, dtype, num_minibatches):
    """Normalise the many ways of describing the workload into arrays and stack records."""
    import xarray as xr

    mb_counts = None
    if hasattr(stats, "num_minibatches") and hasattr(stats, "stats") and hasattr(stats, "plan"):
        mbplan = stats
        plan = mbplan.plan if plan is None else plan
        topology = mbplan.topology if topology is None else topology
        mb_counts = {str(s): int(v) for s, v in zip(mbplan.num_minibatches["stack"].values,
                                                     mbplan.num_minibatches.values)}
        stats = mbplan.stats
    if not isinstance(stats, xr.Dataset):
        raise InputError(f"stats must be the xarray.Dataset of scwork.sharding.compute_stats (or a "
                         f"MiniBatchPlan), got {type(stats).__name__}")
    for var in ("ids", "unique_ids"):
        if var not in stats:
            raise InputError(f"stats has no variable {var!r}: pass the output of scwork.sharding.compute_stats")
        dims = set(stats[var].dims)
        if not {"stack", "device", "sc", "partition"} <= dims or not dims <= {"minibatch", "stack", "device", "sc",
                                                                              "partition"}:
            raise InputError(f"stats[{var!r}] has dims {stats[var].dims}; expected (stack, device, sc, partition) "
                             "with an optional leading minibatch dim")
    stack_names = [str(s) for s in stats["stack"].values]
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
        stacks.append(_Stack(name, _as_count(f"width of stack {name!r}", dim),
                             _as_count(f"features of stack {name!r}", n_feat), str(optimizer),
                             _parse_dtype(dtypes[name], f"stack {name!r}"), int(cfg_ids[k]), int(cfg_uniq[k])))
    if "samples_per_sc" in stats.attrs:
        n = int(stats.attrs["samples_per_sc"])
    elif "batch_size" in stats.attrs:
        n = int(stats.attrs["batch_size"]) // P
    else:
        raise InputError("stats.attrs has neither samples_per_sc nor batch_size (compute_stats sets both)")

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
    K = len(stacks)
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
        nmb = np.array([_as_count(f"num_minibatches[{s!r}]", nmb_map[s]) for s in stack_names], np.int64)
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
    # Dropping: clip to the configured limits (observed > configured implies allow_id_dropping).
    for k, st in enumerate(stacks):
        if st.max_ids >= 0:
            ids[:, k] = np.minimum(ids[:, k], st.max_ids)
        if st.max_unique >= 0:
            uniq[:, k] = np.minimum(uniq[:, k], st.max_unique)
        uniq[:, k] = np.minimum(uniq[:, k], ids[:, k])
    if "input_ids" in stats:
        raw = stats["input_ids"]
        if "minibatch" in raw.dims:
            raw = raw.sum("minibatch")
        raw_ids = raw.transpose("stack", "device", "sc").values.astype(np.int64)
        raw_source = "input_ids (raw ids before dedup)"
    else:
        raw_ids = ids.sum(axis=(0, 4))
        raw_source = "ids (after per-sample dedup: input_ids missing)"
    return stats, plan, topology, stacks, ids, uniq, nmb, n, raw_ids, raw_source


# --------------------------------------------------------------------------------------
# ICI
# --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=32)
def _a2a_tables(shape, wraparound, cores_per_chip, chip, link_bw, latency):
    """Per (step, link): message count and bytes of a ring all-to-all of a reference size."""
    from scwork.collectives import Network, all_to_all

    net = Network.grid(shape, wraparound, cores_per_chip=cores_per_chip, chip=chip,
                       link_bandwidth=link_bw, link_latency=latency)
    N = net.num_nodes
    # Reference vector: the message sizes scale linearly with it (times are rescaled in
    # _Ici.time); large enough that the engine's integer chunking is exact (N blocks of
    # 4096 four-byte elements).
    base = N * 4 * 4096
    sched = all_to_all(net, nbytes=base)
    msg = sched.messages()
    L = max(net.num_links, 1)
    key = msg["step"] * L + msg["link"]
    steps = sched.num_steps
    alpha = np.bincount(key, weights=net.link_latency[msg["link"]], minlength=steps * L).reshape(steps, L)
    beta = np.bincount(key, weights=msg["bytes"] / net.link_bandwidth[msg["link"]],
                       minlength=steps * L).reshape(steps, L)
    return alpha, beta / base, N, sched


class _Ici:
    """Time of one all-to-all of ``v`` bytes per device on the topology's network.

    One-dimensional slices: the collectives engine's ring all-to-all over all devices.
    Grids of several dimensions (and chips with several devices): dimension by
    dimension, a ring all-to-all along every axis (the rings of one axis run on
    disjoint links at the same time), then between the devices of a chip; each
    stage moves every device's whole vector, split in equal blocks per ring
    position. Stages longer than ``ici_schedule_max_nodes`` use the scaling-book
    closed form instead of the explicit schedule.
    """

    def __init__(self, topology, chip, params: StepModelParams):
        from scwork.collectives import ICI_LATENCY_S

        self.N = topology.num_devices
        self.bw = float(params.ici_link_bytes_per_s or chip.ici_link_bytes_per_s)
        self.latency = float(ICI_LATENCY_S if params.ici_latency_s is None else params.ici_latency_s)
        self.stages: list[tuple] = []   # (size, alpha, beta) or (size, None, None) for the closed form
        self.mode = "none (one device)"
        if self.N <= 1:
            return
        maxn = params.ici_schedule_max_nodes
        dims = [(int(x), bool(w)) for x, w in zip(topology.shape, topology.wraparound) if x > 1]
        dpc = topology.devices_per_chip
        if len(dims) == 1 and dpc == 1:
            groups = [(dims[0][0], (dims[0][0],), (dims[0][1],), 1)]
        else:
            groups = [(x, (x,), (w,), 1) for x, w in dims]
            if dpc > 1:
                groups.append((dpc, (1,), (False,), dpc))
        closed = False
        for size, shape, wrap, cores in groups:
            if size <= maxn:
                alpha, beta, n, _ = _a2a_tables(shape, wrap, cores, chip.name, self.bw, self.latency)
                self.stages.append((n, alpha, beta))
            else:
                self.stages.append((size, None, None))
                closed = True
        kind = "ring all-to-all over all devices" if len(groups) == 1 else (
            f"dimension by dimension ({' x '.join(str(g[0]) for g in groups)} rings)")
        self.mode = (f"collectives engine: {kind}, alpha-beta cost"
                     + ("; scaling-book closed form V / (4 * 2W) + N/2 hop latencies for rings longer than "
                        f"{maxn}" if closed else ""))

    def time(self, v_remote: float) -> float:
        """Seconds to deliver ``v_remote`` bytes from every device to the others."""
        if self.N <= 1 or v_remote <= 0:
            return 0.0
        vector = v_remote * self.N / (self.N - 1)  # a device's whole vector, its local block included
        total = 0.0
        for n, alpha, beta in self.stages:
            if alpha is not None:
                total += float((alpha + beta * vector).max(axis=1).sum())
            else:
                from scwork.collectives import scaling_book_time

                total += float(scaling_book_time("all_to_all", n * vector, [n], link_bandwidth=self.bw)
                               + self.latency * (n // 2))
        return total


# --------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------
class StepModel:
    """Result of :func:`step_model`: phase times, both schedules, speed-up, staleness.

    Attributes
    ----------
    phase_time : dict of str -> float
        Seconds per step of every phase of :data:`~scwork.pipeline.PHASES` on its
        slowest unit (e.g. the slowest SparseCore).
    sequential, pipelined : Timeline
        ``num_steps`` steps under each schedule.
    sequential_step_time, pipelined_step_time : float
        Steady-state step times (from a longer run of each schedule).
    step_time : float
        The one of the schedule in use (``pipelining``).
    speedup : float
        ``sequential_step_time / pipelined_step_time`` (at most 2).
    update_offset : int
        Under pipelining, updates of step ``i`` are visible to the SparseCore at
        step ``i + update_offset`` (2); ``staleness_steps = update_offset - 1``.
    pipelining : bool
        Whether the user's configuration pipelines (``not tf_xla_disable_full_embedding_pipelining``).
    params : StepModelParams
    assumptions : list of str
        Every assumption that shaped these numbers (parameters and fallbacks).
    """

    def __init__(self, *, inputs: dict, params: StepModelParams, chip, topology, units: Units, stacks,
                 detail: dict, durations: dict, parts: dict, timelines: dict, periods: dict,
                 assumptions: list[str], memory=None):
        self._inputs = inputs
        self.params = params
        self.chip = chip
        self.topology = topology
        self.units = units
        self.stacks = tuple(s.name for s in stacks)
        self._stacks = stacks
        self.detail = detail
        self.durations = durations
        self.parts = parts
        self.sequential: Timeline = timelines["sequential"]
        self.pipelined: Timeline = timelines["pipelined"]
        self.sequential_step_time = periods["sequential"]
        self.pipelined_step_time = periods["pipelined"]
        self.pipelining = bool(inputs.get("pipelining", True))
        self.assumptions = list(assumptions)
        self.memory = memory
        self.phase_time = {p: float(np.max(durations[p])) for p in PHASES}
        self.update_offset = self.pipelined.update_offset() if self.pipelined.num_steps >= 3 else 2
        self.sequential_update_offset = (self.sequential.update_offset()
                                         if self.sequential.num_steps >= 3 else 1)

    # -- headline numbers -------------------------------------------------------------
    @property
    def step_time(self) -> float:
        return self.pipelined_step_time if self.pipelining else self.sequential_step_time

    @property
    def timeline(self) -> Timeline:
        """The timeline of the schedule in use."""
        return self.pipelined if self.pipelining else self.sequential

    @property
    def speedup(self) -> float:
        if self.pipelined_step_time <= 0:
            return 1.0
        return self.sequential_step_time / self.pipelined_step_time

    @property
    def staleness_steps(self) -> int:
        return self.update_offset - 1

    def busy_per_step(self) -> dict[str, float]:
        """Busy seconds per step of the busiest unit of each resource kind."""
        out = {}
        for kind in RESOURCE_KINDS:
            phases = [p for p in PHASES if PHASE_RESOURCE[p] == kind]
            out[kind] = float(np.max(sum(self.durations[p] for p in phases)))
        return out

    def utilization(self, pipelined: bool | None = None) -> dict[str, float]:
        """Busy per step / step time, per resource kind (busiest unit)."""
        pipelined = self.pipelining if pipelined is None else pipelined
        period = self.pipelined_step_time if pipelined else self.sequential_step_time
        busy = self.busy_per_step()
        return {k: (v / period if period > 0 else 0.0) for k, v in busy.items()}

    @property
    def bottleneck(self) -> str:
        """Resource kind with the most busy time per step (``"sc"`` counts SparseCore work only)."""
        busy = self.busy_per_step()
        return max(busy, key=lambda k: (busy[k], -RESOURCE_KINDS.index(k)))

    def step_time_with(self, *, scale: Mapping[str, float] | None = None,
                       durations: Mapping[str, Any] | None = None, pipelined: bool | None = None) -> float:
        """Steady-state step time after changing some phase durations (a quick what-if).

        Parameters
        ----------
        scale : dict phase -> float, optional
            Multiply these phases' durations (every unit) by a factor >= 0.
        durations : dict phase -> float or array, optional
            Replace these phases' durations (seconds per unit).
        pipelined : bool, optional
            Schedule (default: the one in use).

        Examples
        --------
        >>> import scwork
        >>> from scwork.pipeline import step_model, expected_stats
        >>> topo = scwork.Topology.for_chip("v5p", num_chips=1)
        >>> m = step_model(expected_stats({"t": 8.0}, topo, batch_size=256), widths={"t": 32},
        ...                topology=topo, tc_forward_s=1e-4, tc_backward_s=1e-4, pipelining=False)
        >>> m.step_time_with(durations={"host": 0.0}) <= m.step_time
        True
        """
        pipelined = self.pipelining if pipelined is None else bool(pipelined)
        dur = {p: np.array(v, dtype=float) for p, v in self.durations.items()}
        for phase, factor in (scale or {}).items():
            if phase not in dur:
                raise ConfigError(f"unknown phase {phase!r}; phases are {list(PHASES)}")
            factor = _nonneg(f"scale[{phase!r}]", factor)
            dur[phase] = dur[phase] * factor
        for phase, value in (durations or {}).items():
            if phase not in dur:
                raise ConfigError(f"unknown phase {phase!r}; phases are {list(PHASES)}")
            dur[phase] = np.broadcast_to(np.asarray(value, dtype=float), dur[phase].shape).copy()
        return simulate(dur, self.units, num_steps=_SIM_STEPS_FOR_PERIOD, pipelined=pipelined,
                        input_buffers=self.params.input_buffers).period()

    def replace(self, **changes) -> "StepModel":
        """:func:`step_model` again with some inputs changed.

        Accepts every keyword of :func:`step_model` and every field of
        :class:`StepModelParams` (applied to ``params``).

        Examples
        --------
        >>> import scwork
        >>> from scwork.pipeline import step_model, expected_stats
        >>> topo = scwork.Topology.for_chip("v5p", num_chips=1)
        >>> m = step_model(expected_stats({"t": 20.0}, topo, batch_size=4096), widths={"t": 64},
        ...                topology=topo, tc_forward_s=1e-3)
        >>> m.replace(host_threads=4).phase_time["host"] * 4 == m.phase_time["host"]
        True
        """
        fields = {f.name for f in dataclasses.fields(StepModelParams)}
        param_changes = {k: v for k, v in changes.items() if k in fields}
        inputs = {**self._inputs, **{k: v for k, v in changes.items() if k not in fields}}
        params = inputs.pop("params", self.params) or StepModelParams()
        if param_changes:
            params = params.replace(**param_changes)
        stats = inputs.pop("stats")
        return step_model(stats, params=params, **inputs)

    # -- views ------------------------------------------------------------------------
    def to_dataset(self):
        """Everything as one :class:`xarray.Dataset` (dims named, units in attrs).

        Variables: ``phase_time`` (phase); ``sc_time`` (direction, device, sc);
        ``sc_stack_time``, ``sc_dma_time``, ``sc_vector_time``,
        ``sc_dma_bytes_per_tile``, ``sc_vector_instructions_per_tile`` (stack,
        direction, device, sc); ``owner_rows_per_tile`` (stack, device, sc);
        ``ici_time``, ``ici_bytes_per_device`` (stack, direction); ``host_time``
        (host); ``num_minibatches``, ``padded_width``, ``row_granules`` (stack);
        ``step_time`` (schedule); ``start``, ``end`` (schedule, step, phase);
        ``busy_per_step`` (resource_kind); ``utilization`` (schedule, resource_kind).
        Attrs: ``speedup``, ``update_offset``, ``staleness_steps``, ``pipelining``,
        ``bottleneck``, ``chip``, ``topology``, ``assumptions``.
        """
        import xarray as xr

        d = self.detail
        G, S = self.topology.num_devices, self.topology.sparsecores_per_device
        schedules = ("sequential", "pipelined")
        tl = {"sequential": self.sequential.to_dataset(), "pipelined": self.pipelined.to_dataset()}
        busy = self.busy_per_step()
        data = {
            "phase_time": ("phase", np.array([self.phase_time[p] for p in PHASES]),
                           {"long_name": "phase time per step (slowest unit)", "units": "s"}),
            "sc_time": (("direction", "device", "sc"),
                        np.stack([self.durations["sc_forward"], self.durations["sc_backward"]]).reshape(2, G, S),
                        {"long_name": "SparseCore phase time per SparseCore", "units": "s"}),
            "sc_stack_time": (("stack", "direction", "device", "sc"), d["stack_time"],
                              {"long_name": "time of the stack alone on the SparseCore (overhead included)",
                               "units": "s"}),
            "sc_dma_time": (("stack", "direction", "device", "sc"), d["dma_time"],
                            {"long_name": "DMA time of the busiest tile", "units": "s"}),
            "sc_vector_time": (("stack", "direction", "device", "sc"), d["vector_time"],
                               {"long_name": "vector time of the busiest tile", "units": "s"}),
            "sc_dma_bytes_per_tile": (("stack", "direction", "device", "sc"), d["dma_bytes"],
                                      {"long_name": "bytes the busiest tile moves (whole granules)",
                                       "units": "bytes"}),
            "sc_vector_instructions_per_tile": (("stack", "direction", "device", "sc"), d["vector_ops"],
                                                {"long_name": "SIMD instructions of the busiest tile",
                                                 "units": "instructions"}),
            "owner_rows_per_tile": (("stack", "device", "sc"), d["owner_rows"],
                                    {"long_name": "unique rows the owner's busiest tile gathers", "units": "rows"}),
            "ici_time": (("stack", "direction"), d["ici_time"], {"long_name": "all-to-all time", "units": "s"}),
            "ici_bytes_per_device": (("stack", "direction"), d["ici_bytes"],
                                     {"long_name": "bytes the busiest device sends to other devices",
                                      "units": "bytes"}),
            "host_time": ("host", self.durations["host"], {"long_name": "preprocessing time per step",
                                                           "units": "s"}),
            "num_minibatches": ("stack", d["num_minibatches"], {"long_name": "SparseCore ops per pass",
                                                                "units": "count"}),
            "padded_width": ("stack", d["padded_width"], {"long_name": "row width padded to whole granules",
                                                          "units": "elements"}),
            "row_granules": ("stack", d["row_granules"], {"long_name": "DMA granules per row gather",
                                                          "units": "granules"}),
            "step_time": ("schedule", np.array([self.sequential_step_time, self.pipelined_step_time]),
                          {"long_name": "steady-state step time", "units": "s"}),
            "start": (("schedule", "step", "phase"), np.stack([tl[s]["start"].values for s in schedules]),
                      {"long_name": "phase start (earliest unit)", "units": "s"}),
            "end": (("schedule", "step", "phase"), np.stack([tl[s]["end"].values for s in schedules]),
                    {"long_name": "phase end (latest unit)", "units": "s"}),
            "busy_per_step": ("resource_kind", np.array([busy[k] for k in RESOURCE_KINDS]),
                              {"long_name": "busy time per step of the busiest unit", "units": "s"}),
            "utilization": (("schedule", "resource_kind"),
                            np.array([[self.utilization(pipelined=s == "pipelined")[k] for k in RESOURCE_KINDS]
                                      for s in schedules]),
                            {"long_name": "busy per step / step time", "units": "1"}),
        }
        coords = {
            "phase": ("phase", np.array(PHASES, dtype=object)),
            "stack": ("stack", np.array(self.stacks, dtype=object)),
            "direction": ("direction", np.array(DIRECTIONS, dtype=object)),
            "device": ("device", np.arange(G)),
            "sc": ("sc", np.arange(S)),
            "host": ("host", np.arange(self.units.num_hosts)),
            "schedule": ("schedule", np.array(schedules, dtype=object)),
            "step": ("step", np.arange(self.sequential.num_steps)),
            "resource_kind": ("resource_kind", np.array(RESOURCE_KINDS, dtype=object)),
        }
        attrs = {
            "long_name": "training step time model",
            "units": "s",
            "speedup": self.speedup,
            "update_offset": self.update_offset,
            "staleness_steps": self.staleness_steps,
            "pipelining": int(self.pipelining),
            "bottleneck": self.bottleneck,
            "chip": self.chip.name,
            "topology": str(self.topology),
            "assumptions": list(self.assumptions),
        }
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def summary(self) -> dict[str, Any]:
        """Headline numbers as a plain dict."""
        return {
            "step_time_s": self.step_time,
            "sequential_step_time_s": self.sequential_step_time,
            "pipelined_step_time_s": self.pipelined_step_time,
            "speedup": self.speedup,
            "pipelining": self.pipelining,
            "update_offset": self.update_offset,
            "staleness_steps": self.staleness_steps,
            "bottleneck": self.bottleneck,
            **{f"{p}_s": self.phase_time[p] for p in PHASES},
        }

    def to_chrome_trace(self, **kwargs) -> dict:
        """:func:`scwork.pipeline.to_chrome_trace` of this model (memory counters included)."""
        from scwork.pipeline.chrome_trace import to_chrome_trace

        return to_chrome_trace(self, **kwargs)

    def __repr__(self) -> str:
        mode = "pipelined" if self.pipelining else "sequential"
        return (f"StepModel({mode} step {self.step_time:.6g} s; sequential {self.sequential_step_time:.6g} s, "
                f"pipelined {self.pipelined_step_time:.6g} s, speed-up {self.speedup:.3g}x, "
                f"bottleneck {self.bottleneck}, {len(self.stacks)} stacks on {self.topology})")

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{p}</td><td style='text-align:right'>{self.phase_time[p] * 1e6:.3f}</td></tr>"
                       for p in PHASES)
        return (f"<div><b>{html.escape(repr(self))}</b><table><tr><th>phase</th><th>time per step (us)</th></tr>"
                f"{rows}</table></div>")


def _sc_model(stacks, ids, uniq, nmb, n, chip, topology, params, num_serialized_tables):
    """Per stack, direction and SparseCore: DMA bytes, vector instructions, times."""
    K, G, S = ids.shape[1:4]
    T = int(chip.tiles_per_sparsecore)
    granule = int(chip.dma_granule_bytes)
    tile_bw = chip.hbm_bandwidth_bytes_per_s * params.sc_hbm_bandwidth_fraction / (chip.sparsecores_per_chip * T)
    rate = params.sc_tile_vector_ops_per_s
    abytes = params.activation_bytes

    # busiest-tile counts (sum over mini-batches of per-stream ceilings)
    src_tile_ids = _ceil_div(ids, T).sum(axis=(0, 4))                        # (K, G, S)
    csr_entries = _round_up(ids, 8).sum(axis=4)                             # (M, K, G, S)
    csr_tile = _ceil_div(csr_entries, T).sum(axis=0)                        # (K, G, S)
    owner = _ceil_div(uniq, T).sum(axis=(0, 2, 3))                          # (K, P)
    owner_rows = owner.reshape(K, G, S)                                     # partition g*S+s lives on (g, s)

    width = np.zeros(K, np.int64)
    granules = np.zeros(K, np.int64)
    act_row_bytes = np.zeros(K, np.int64)
    simd = np.zeros(K, np.int64)
    shape = (K, G, S)
    dma_f, dma_b = np.zeros(shape), np.zeros(shape)
    ops_f, ops_b = np.zeros(shape), np.zeros(shape)
    overhead = np.zeros(K)
    for k, st in enumerate(stacks):
        b = DTYPE_SIZES[st.dtype]
        per_line = max(1, granule // b)
        width[k] = _round_up(st.dim, per_line)
        granules[k] = _ceil_div(width[k] * b, granule)
        row_bytes = granules[k] * granule
        w_act = _round_up(st.dim, max(1, granule // abytes))
        act_row_bytes[k] = _ceil_div(w_act * abytes, granule) * granule
        act_tile_rows = _ceil_div(st.features * n, T)
        simd[k] = chip.simd_width_bf16 if b == 2 else chip.simd_width_f32
        vec_per_row = _ceil_div(width[k], simd[k])
        combine = params.combine_ops_per_element + (params.dequantize_ops_per_element if st.dtype == "s8" else 0)
        slots = _optimizer_slots(st.optimizer)
        dma_f[k] = (owner_rows[k] * row_bytes + csr_tile[k] * params.csr_bytes_per_id
                    + act_tile_rows * act_row_bytes[k])
        dma_b[k] = (owner_rows[k] * row_bytes * 2 * (1 + slots) + csr_tile[k] * params.csr_bytes_per_id
                    + act_tile_rows * act_row_bytes[k])
        ops_f[k] = src_tile_ids[k] * vec_per_row * combine
        ops_b[k] = (src_tile_ids[k] * vec_per_row * combine
                    + owner_rows[k] * vec_per_row * params.optimizer_ops(st.optimizer))
        overhead[k] = nmb[k] * params.sc_op_overhead_s
    dma_bytes = np.stack([dma_f, dma_b], axis=1)                            # (K, 2, G, S)
    vector_ops = np.stack([ops_f, ops_b], axis=1)
    dma_time = dma_bytes / tile_bw
    vector_time = vector_ops / rate
    if params.dma_compute_overlap:
        alone = np.maximum(dma_time, vector_time)
    else:
        alone = dma_time + vector_time
    stack_time = alone + overhead[:, None, None, None]

    # stacks sharing one SparseCore phase; serialization as in scwork.memory
    max_unique = uniq.max(axis=(0, 2, 3, 4)) if uniq.size else np.zeros(K, np.int64)
    order_key = (2 * width + 1) * max_unique
    if num_serialized_tables <= 1 or K <= 1:
        chain: tuple[int, ...] = ()
    else:
        chain = tuple(sorted(range(K), key=lambda i: (-int(order_key[i]), i))[:min(num_serialized_tables, K)])
    conc = [k for k in range(K) if k not in chain]
    phase = np.zeros((2, G, S))
    if K:
        if params.dma_compute_overlap:
            Dc = dma_time[conc].sum(axis=0) if conc else np.zeros((2, G, S))
            Cc = vector_time[conc].sum(axis=0) if conc else np.zeros((2, G, S))
            if not chain:
                phase = np.maximum(Dc, Cc)
            else:
                nslot = len(chain)
                for k in chain:
                    phase = phase + np.maximum(dma_time[k] + Dc / nslot, vector_time[k] + Cc / nslot)
        else:
            phase = (dma_time + vector_time).sum(axis=0)
        phase = phase + overhead.sum()
    return {
        "dma_bytes": dma_bytes, "vector_ops": vector_ops, "dma_time": dma_time, "vector_time": vector_time,
        "stack_time": stack_time, "phase": phase, "owner_rows": owner_rows, "padded_width": width,
        "row_granules": granules, "serialized": tuple(stacks[k].name for k in chain),
        "tile_bandwidth": tile_bw,
    }


def _optimizer_slots(optimizer: str) -> int:
    from scwork.memory import OPTIMIZER_SLOTS

    try:
        return OPTIMIZER_SLOTS[optimizer]
    except KeyError:
        raise ConfigError(f"unknown optimizer {optimizer!r}; known: {sorted(OPTIMIZER_SLOTS)}") from None


def _ici_model(stacks, uniq, topology, chip, params, widths):
    """Per stack and direction: bytes the busiest device sends off-device, and the time."""
    K, G, S, P = uniq.shape[1:]
    ici = _Ici(topology, chip, params)
    dev_of_p = np.arange(P) // S
    remote = dev_of_p[None, :] != np.arange(G)[:, None]                     # (G, P)
    rows = (uniq * remote[None, None, :, None, :]).sum(axis=(3, 4))          # (M, K, G)
    t = np.zeros((K, 2))
    volume = np.zeros((K, 2))
    for k, st in enumerate(stacks):
        fwd_row = widths[k] * DTYPE_SIZES[st.dtype] + params.ici_index_bytes
        bwd_row = _round_up(st.dim, max(1, chip.dma_granule_bytes // params.activation_bytes)) \
            * params.activation_bytes + params.ici_index_bytes
        for j, row in enumerate((fwd_row, bwd_row)):
            per_mb = rows[:, k].max(axis=1) * row                                # (M,)
            volume[k, j] = float(per_mb.sum())
            t[k, j] = sum(ici.time(float(v)) for v in per_mb if v > 0)
    return t, volume, ici.mode


def _tc_times(tc_forward_s, tc_backward_s, tc_forward_flops, tc_backward_flops, tc_peak_flops, params):
    notes = []
    if (tc_forward_flops is not None or tc_backward_flops is not None) and tc_peak_flops is None:
        raise ConfigError("TensorCore FLOPs given without tc_peak_flops (FLOP/s per chip, not in the catalog); "
                          "pass tc_peak_flops=... or the times tc_forward_s / tc_backward_s")
    if tc_peak_flops is not None:
        tc_peak_flops = _nonneg("tc_peak_flops", tc_peak_flops)
        if tc_peak_flops == 0:
            raise ConfigError("tc_peak_flops must be > 0")
    if tc_forward_s is not None and tc_forward_flops is not None:
        raise ConfigError("give tc_forward_s or tc_forward_flops, not both")
    if tc_backward_s is not None and tc_backward_flops is not None:
        raise ConfigError("give tc_backward_s or tc_backward_flops, not both")
    fwd = None
    if tc_forward_s is not None:
        fwd = _nonneg("tc_forward_s", tc_forward_s)
    elif tc_forward_flops is not None:
        fwd = _nonneg("tc_forward_flops", tc_forward_flops) / (tc_peak_flops * params.tc_efficiency)
        notes.append(f"TensorCore forward = {tc_forward_flops:.4g} FLOP / ({tc_peak_flops:.4g} FLOP/s x "
                     f"tc_efficiency {params.tc_efficiency})")
    bwd = None
    if tc_backward_s is not None:
        bwd = _nonneg("tc_backward_s", tc_backward_s)
    elif tc_backward_flops is not None:
        bwd = _nonneg("tc_backward_flops", tc_backward_flops) / (tc_peak_flops * params.tc_efficiency)
    elif fwd is not None:
        bwd = fwd * params.tc_backward_to_forward
        notes.append(f"TensorCore backward = tc_backward_to_forward ({params.tc_backward_to_forward}) x forward")
    if fwd is None and bwd is None:
        notes.append("no TensorCore time given: TensorCore phases are 0 (pass tc_forward_s or FLOPs)")
    if fwd is None:
        fwd = 0.0
    return fwd, (0.0 if bwd is None else bwd), notes


def step_model(stats, plan=None, *, topology=None, chip=None, widths=None, optimizers=None,
               features_per_stack=None, dtype="f32", num_minibatches=None, num_serialized_tables: int = 1,
               pipelining: bool = True, num_steps: int = 6, tc_forward_s=None, tc_backward_s=None,
               tc_forward_flops=None, tc_backward_flops=None, tc_peak_flops=None, memory=None,
               params: StepModelParams | None = None) -> StepModel:
    """Model one training step: phase times, sequential and pipelined schedules.

    Parameters
    ----------
    stats : xarray.Dataset or MiniBatchPlan
        Statistics of a batch (:func:`scwork.sharding.compute_stats`, or
        :func:`expected_stats` without data), or a
        :class:`~scwork.sharding.MiniBatchPlan` (its per-mini-batch statistics, plan
        and topology are used).
    plan : StackingPlan, optional
        Gives every stack's width (largest table dim), feature count, optimizer and
        topology. Without it, pass ``widths`` (and ``topology``).
    topology : scwork.Topology, optional
        Default ``plan.topology``.
    chip : str or TpuChip, optional
        Hardware; default ``topology.chip``. Must have SparseCores.
    widths, optimizers, features_per_stack : dict or scalar, optional
        Per stack (or one value for all): embedding dim (unpadded), optimizer name,
        number of features looking it up. Override the plan's values.
    dtype : str or dict, default "f32"
        Table dtype (``f32``, ``bf16``, ``f16``, ``s8``), or per stack.
    num_minibatches : int or dict, optional
        Mini-batches per stack (default 1); not with a MiniBatchPlan.
    num_serialized_tables : int, default 1
        ``xla_sc_num_serialized_tables_to_optimize_hbm`` (<= 1: none).
    pipelining : bool, default True
        Whether the configuration pipelines SparseCore and TensorCore
        (``tf_xla_disable_full_embedding_pipelining = not pipelining``); both
        schedules are always computed, this picks :attr:`StepModel.step_time`.
    num_steps : int, default 6
        Steps laid out in the timelines (>= 3 so staleness can be read off; at most
        :data:`MAX_TIMELINE_STEPS`).
    tc_forward_s, tc_backward_s : float, optional
        TensorCore time per step (seconds).
    tc_forward_flops, tc_backward_flops : float, optional
        TensorCore FLOPs per step per chip instead of times; need ``tc_peak_flops``.
    tc_peak_flops : float, optional
        Peak FLOP/s of one chip's TensorCores (not in the catalog: required with FLOPs).
    memory : MemoryReport, optional
        :func:`scwork.memory.plan` of the same model, kept for HBM counter tracks.
    params : StepModelParams, optional
        The assumptions (default ``StepModelParams()``).

    Returns
    -------
    StepModel

    Raises
    ------
    InputError
        Statistics that are not compute_stats output, or do not match the topology.
    ConfigError
        Missing widths / topology, a chip without SparseCores, bad counts, FLOPs
        without ``tc_peak_flops``, unknown dtype or optimizer.

    Examples
    --------
    >>> import scwork
    >>> from scwork.pipeline import step_model, expected_stats
    >>> topo = scwork.Topology.for_chip("v5p", num_chips=4)
    >>> stats = expected_stats({"user": 20.0, "item": 5.0}, topo, batch_size=16384)
    >>> m = step_model(stats, widths={"user": 64, "item": 32}, topology=topo,
    ...                tc_forward_s=2e-4, tc_backward_s=4e-4)
    >>> m.speedup <= 2.0, m.update_offset, m.staleness_steps
    (True, 2, 1)
    >>> m.pipelined_step_time <= m.sequential_step_time
    True
    """
    import xarray as xr  # noqa: F401  (the result's views need it)

    params = StepModelParams() if params is None else params
    if not isinstance(params, StepModelParams):
        raise ConfigError(f"params must be a StepModelParams, got {type(params).__name__}")
    num_steps = _as_count("num_steps", num_steps, minimum=3)
    if num_steps > MAX_TIMELINE_STEPS:
        # Every step of both timelines is laid out interval by interval; a steady
        # state repeats, so a few steps show everything (step_time does not depend on it).
        raise ConfigError(
            f"num_steps={num_steps:,} laid out step by step is more than MAX_TIMELINE_STEPS="
            f"{MAX_TIMELINE_STEPS:,}; the timelines repeat after the first steps, so use fewer "
            "(the step time and speed-up do not depend on it), or raise "
            "scwork.pipeline.model.MAX_TIMELINE_STEPS for a longer trace")
    if isinstance(num_serialized_tables, bool) or not isinstance(num_serialized_tables, numbers.Integral) \
            or num_serialized_tables < 0:
        raise ConfigError(f"num_serialized_tables must be an integer >= 0, got {num_serialized_tables!r}")
    if not isinstance(pipelining, bool):
        raise ConfigError(f"pipelining must be True or False, got {pipelining!r}")
    inputs = dict(stats=stats, plan=plan, topology=topology, chip=chip, widths=widths, optimizers=optimizers,
                  features_per_stack=features_per_stack, dtype=dtype, num_minibatches=num_minibatches,
                  num_serialized_tables=num_serialized_tables, pipelining=pipelining, num_steps=num_steps,
                  tc_forward_s=tc_forward_s, tc_backward_s=tc_backward_s, tc_forward_flops=tc_forward_flops,
                  tc_backward_flops=tc_backward_flops, tc_peak_flops=tc_peak_flops, memory=memory)
    _, plan, topology, stacks, ids, uniq, nmb, n, raw_ids, raw_source = _resolve_inputs(
        stats, plan, topology, widths, optimizers, features_per_stack, dtype, num_minibatches)

    from scwork.hardware import get

    if chip is None:
        if topology.chip is None:
            raise ConfigError("the topology names no chip: pass chip= (e.g. 'v5p') or use Topology.for_chip")
        chip = topology.chip
    chip = get(chip)
    if getattr(chip, "kind", "") != "tpu" or not chip.has_sparsecore:
        raise ConfigError(f"{chip.name} has no SparseCore: the step model needs one (v4, v5p, v6e, tpu7x)")
    if chip.sparsecores_per_chip != topology.sparsecores_per_chip:
        raise ConfigError(f"chip {chip.name} has {chip.sparsecores_per_chip} SparseCores per chip but the "
                          f"topology has {topology.sparsecores_per_chip}; use a matching chip or topology")

    G, S = topology.num_devices, topology.sparsecores_per_device
    sc = _sc_model(stacks, ids, uniq, nmb, n, chip, topology, params, int(num_serialized_tables))
    ici_t, ici_bytes, ici_mode = _ici_model(stacks, uniq, topology, chip, params, sc["padded_width"])
    tc_f, tc_b, tc_notes = _tc_times(tc_forward_s, tc_backward_s, tc_forward_flops, tc_backward_flops,
                                     tc_peak_flops, params)

    num_chips = topology.num_chips
    cph = min(params.chips_per_host, num_chips)
    num_hosts = -(-num_chips // cph)
    units = Units(num_chips=num_chips, sparsecores_per_chip=S * topology.devices_per_chip,
                  tensorcores_per_chip=chip.tensorcores_per_chip, num_hosts=num_hosts, chips_per_host=cph)
    chip_of_device = np.arange(G) // topology.devices_per_chip
    host_ids = np.zeros(num_hosts)
    np.add.at(host_ids, chip_of_device // cph, raw_ids.sum(axis=(0, 2)))
    host = host_ids / (params.host_ids_per_s * params.host_threads) + params.host_overhead_s

    durations = {
        "host": host,
        "sc_forward": sc["phase"][0].reshape(-1),
        "ici_forward": np.full(num_chips, ici_t[:, 0].sum()),
        "tc_forward": np.full(num_chips, tc_f),
        "tc_backward": np.full(num_chips, tc_b),
        "ici_backward": np.full(num_chips, ici_t[:, 1].sum()),
        "sc_backward": sc["phase"][1].reshape(-1),
    }
    parts = _sc_parts(stacks, nmb, sc["stack_time"])
    timelines, periods = {}, {}
    for name, pipelined in (("sequential", False), ("pipelined", True)):
        long = simulate(durations, units, num_steps=_SIM_STEPS_FOR_PERIOD, pipelined=pipelined,
                        input_buffers=params.input_buffers)
        periods[name] = long.period()
        timelines[name] = simulate(durations, units, num_steps=num_steps, pipelined=pipelined,
                                   input_buffers=params.input_buffers, parts=parts,
                                   steady_state_step_time=periods[name])
    detail = {
        "dma_bytes": sc["dma_bytes"].reshape(len(stacks), 2, G, S),
        "vector_ops": sc["vector_ops"].reshape(len(stacks), 2, G, S),
        "dma_time": sc["dma_time"].reshape(len(stacks), 2, G, S),
        "vector_time": sc["vector_time"].reshape(len(stacks), 2, G, S),
        "stack_time": sc["stack_time"].reshape(len(stacks), 2, G, S),
        "owner_rows": sc["owner_rows"],
        "ici_time": ici_t, "ici_bytes": ici_bytes,
        "num_minibatches": nmb, "padded_width": sc["padded_width"], "row_granules": sc["row_granules"],
        "serialized": sc["serialized"], "samples_per_sc": n, "host_ids": host_ids,
        "tile_bandwidth": sc["tile_bandwidth"],
    }
    assumptions = [
        f"host: {raw_source} at {params.host_ids_per_s:.4g} ids/s x {params.host_threads} thread(s) per host "
        f"of {cph} chip(s) + {params.host_overhead_s} s",
        f"SparseCore: {chip.tiles_per_sparsecore} tiles, {chip.dma_granule_bytes}-byte granules, tile HBM "
        f"bandwidth {sc['tile_bandwidth']:.4g} B/s (= {chip.hbm_bandwidth_bytes_per_s:.4g} x "
        f"{params.sc_hbm_bandwidth_fraction} / ({chip.sparsecores_per_chip} SC x {chip.tiles_per_sparsecore} "
        f"tiles)), {params.sc_tile_vector_ops_per_s:.4g} vector instructions/s per tile (assumption), "
        f"{params.sc_op_overhead_s} s per SparseCore op (assumption)",
        "SparseCore DMA and vector work " + ("overlap (max)" if params.dma_compute_overlap else "add up"),
        f"serialized stacks: {list(sc['serialized']) or 'none'}",
        f"ICI: {ici_mode}; link {params.ici_link_bytes_per_s or chip.ici_link_bytes_per_s:.4g} B/s",
        f"pipelining: updates of step i visible to the SparseCore at step i + {2}; input_buffers = "
        f"{params.input_buffers}",
        *tc_notes,
    ]
    return StepModel(inputs=inputs, params=params, chip=chip, topology=topology, units=units, stacks=stacks,
                     detail=detail, durations=durations, parts=parts, timelines=timelines, periods=periods,
                     assumptions=assumptions, memory=memory)


def _sc_parts(stacks, nmb, stack_time):
    """Display breakdown of the SparseCore phases: stack (and mini-batch) shares per SparseCore."""
    K = len(stacks)
    out = {}
    for j, phase in enumerate(("sc_forward", "sc_backward")):
        t = stack_time[:, j].reshape(K, -1)                                  # (K, units)
        labels, rows = [], []
        for k, st in enumerate(stacks):
            m = int(nmb[k])
            for b in range(m):
                labels.append(st.name if m == 1 else f"{st.name} (mini-batch {b + 1}/{m})")
                rows.append(t[k] / m)
        arr = np.array(rows) if rows else np.zeros((0, t.shape[1]))
        total = arr.sum(axis=0)
        frac = np.divide(arr, total, out=np.zeros_like(arr), where=total > 0)
        out[phase] = (labels, frac)
    return out


# --------------------------------------------------------------------------------------
# statistics without data
# --------------------------------------------------------------------------------------
def expected_stats(ids_per_sample: Mapping[str, float], topology, *, batch_size: int, unique_fraction: Any = 1.0,
                   hot_fraction: Any = 0.0, hot_partition: int = 0):
    """Statistics shaped like :func:`scwork.sharding.compute_stats` output, from averages.

    For a what-if without a batch: every source SparseCore handles ``L =
    samples_per_sc * ids_per_sample[stack]`` ids of a stack; a share
    ``hot_fraction`` of them goes to ``hot_partition`` (hot ids), the rest is
    spread evenly over the ``P`` partitions (integer counts, the remainder on the
    first partitions). Unique ids are ``unique_fraction * ids``. Every rounding is
    half up (``floor(x + 0.5)``).

    Parameters
    ----------
    ids_per_sample : dict of str -> float
        Per stack: ids per sample summed over its features (after per-sample dedup).
    topology : scwork.Topology
    batch_size : int
        Global batch; must be a multiple of ``P``.
    unique_fraction, hot_fraction : float or dict, optional
        In ``[0, 1]``, one value or per stack.
    hot_partition : int
        Partition that receives the hot share.

    Returns
    -------
    xarray.Dataset
        ``ids``, ``unique_ids`` (stack, device, sc, partition), ``input_ids``
        (stack, device, sc), and the attrs of compute_stats.

    Raises
    ------
    ConfigError
        Batch not divisible by ``P``, fractions outside ``[0, 1]``, negative rates.

    Examples
    --------
    >>> import scwork
    >>> from scwork.pipeline import expected_stats
    >>> ds = expected_stats({"t": 3.0}, scwork.Topology(1, 2), batch_size=4)
    >>> ds["ids"].sel(stack="t").values.tolist()    # 2 samples x 3 ids per SC over 2 partitions
    [[[3, 3], [3, 3]]]
    """
    import xarray as xr

    P = topology.num_partitions
    G, S = topology.num_devices, topology.sparsecores_per_device
    batch_size = _as_count("batch_size", batch_size)
    if P < 1:
        raise ConfigError(f"topology {topology} has no SparseCore")
    if batch_size % P:
        raise ConfigError(f"batch_size {batch_size} is not a multiple of the {P} SparseCores")
    if not isinstance(ids_per_sample, Mapping) or not ids_per_sample:
        raise ConfigError("ids_per_sample must be a non-empty dict {stack: ids per sample}")
    hot_partition = _as_count("hot_partition", hot_partition, minimum=0)
    if hot_partition >= P:
        raise ConfigError(f"hot_partition must be < {P}, got {hot_partition}")
    names = [str(s) for s in ids_per_sample]
    uf = _per_stack(unique_fraction, names, "unique_fraction", 1.0)
    hf = _per_stack(hot_fraction, names, "hot_fraction", 0.0)
    n = batch_size // P
    K = len(names)
    ids = np.zeros((K, G, S, P), np.int64)
    uniq = np.zeros_like(ids)
    raw = np.zeros((K, G, S), np.int64)
    for k, name in enumerate(names):
        rate = _nonneg(f"ids_per_sample[{name!r}]", ids_per_sample[name])
        u, h = float(uf[name]), float(hf[name])
        for label, f in (("unique_fraction", u), ("hot_fraction", h)):
            if not 0.0 <= f <= 1.0:
                raise ConfigError(f"{label} of stack {name!r} must be in [0, 1], got {f}")
        L = int(math.floor(n * rate + 0.5))
        hot = int(math.floor(L * h + 0.5))
        rest = L - hot
        row = np.full(P, rest // P, np.int64)
        row[: rest % P] += 1
        row[hot_partition] += hot
        ids[k] = row
        uniq[k] = np.floor(row * u + 0.5).astype(np.int64)
        raw[k] = L
    dims = ("stack", "device", "sc", "partition")
    return xr.Dataset(
        {
            "ids": (dims, ids, {"long_name": "ids per (source SC, partition) after per-sample dedup", "units": "ids"}),
            "unique_ids": (dims, uniq, {"long_name": "distinct ids per (source SC, partition)", "units": "ids"}),
            "input_ids": (("stack", "device", "sc"), raw, {"long_name": "raw ids per source SC", "units": "ids"}),
        },
        coords={"stack": ("stack", np.array(names, dtype=object)), "device": np.arange(G), "sc": np.arange(S),
                "partition": np.arange(P)},
        attrs={"topology": str(topology), "num_devices": G, "sparsecores_per_device": S, "num_partitions": P,
               "batch_size": batch_size, "samples_per_sc": n,
               "source": "scwork.pipeline.expected_stats (averages, no data)"},
    )
