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
  32 for s8; [jte] table_stacking.py; [sc-guide] §9). One row gather costs ``ceil(w * b / 32)`` granules of 32 B,
  so a width-1 f32 table moves 32 B to use 4 (7/8 waste) and costs what a width-8
  table costs.
- **Source role** (the SparseCore that owns a slice of the batch, [jte] preprocess_sparse_dense_matmul_input): for
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
  :class:`~scwork.sharding.MiniBatchPlan` its per-mini-batch statistics are used
  (by default one split for the whole batch, so every stack runs the same number of
  ops, as jax-tpu-embedding runs them); with a bare ``num_minibatches`` the counts
  of every (slice, partition) are split as evenly as integers allow. Activations are written once per
  stack (mini-batches
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
Rings longer than ``ici_schedule_max_nodes`` use the closed form of [scaling-book]
``V / (4 * 2W)`` plus ``N/2`` hop latencies. Stacking tables pays the per-hop
latency once for all of them.

With ``a2a="data"`` the all-to-all is the statistics' own instead of a uniform one:
per stack, direction and mini-batch, device ``g`` receives from device ``h`` the
rows of the unique ids it requested from ``h``'s partitions (and sends their
gradients back), routed over the chip grid with dimension-order routing (x, then
y, then z, the shorter way round a torus; :mod:`scwork.collectives.embedding_a2a`).
Each all-to-all takes the busiest link's bytes / bandwidth plus the farthest
route's hops x latency, so skewed ids show up as a hot link; the per-link bytes
and the hottest link are :attr:`StepModel.ici_links`. The default
``a2a="uniform"`` keeps the model above (what :func:`expected_stats`, which has no
real per-pair traffic, describes).

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
import html
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from scwork._rounding import ceil_div
from scwork._validate import shown
from scwork.errors import ConfigError
from scwork.pipeline._inputs import DIRECTIONS, MAX_TIMELINE_STEPS, _as_count, _nonneg, _resolve_inputs
from scwork.pipeline.expected import expected_stats
from scwork.pipeline.params import DTYPE_SIZES, StepModelParams
from scwork.pipeline.phase_costs import _ici_model, _ici_routed, _sc_model, _sc_parts, _tc_times
from scwork.pipeline.timeline import PHASE_RESOURCE, PHASES, RESOURCE_KINDS, Timeline, Units, simulate

__all__ = ["StepModel", "step_model", "expected_stats", "DTYPE_SIZES", "DIRECTIONS"]


_SIM_STEPS_FOR_PERIOD = 40


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

    @property
    def ici_links(self):
        """Per-link ICI bytes and the hottest link (``a2a="data"``), else None.

        An :class:`xarray.Dataset` laid out as :func:`scwork.collectives.route_all_to_all`
        (``link_bytes`` (link, direction) summed over stacks and mini-batches,
        ``hottest_link_label``, ``hottest_link_bytes``, ``hottest_link_share``,
        ``link_imbalance`` per direction); its ``time`` is the ICI phase time.
        """
        return self.detail.get("ici_links")

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
                raise ConfigError(f"unknown phase {shown(phase)}; phases are {list(PHASES)}")
            factor = _nonneg(f"scale[{shown(phase)}]", factor)
            dur[phase] = dur[phase] * factor
        for phase, value in (durations or {}).items():
            if phase not in dur:
                raise ConfigError(f"unknown phase {shown(phase)}; phases are {list(PHASES)}")
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
        With ``a2a="data"`` also ``ici_link_bytes`` (link, direction),
        ``ici_hottest_link_share`` (direction) and the attr ``ici_hottest_link``.
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
        links = self.ici_links
        if links is not None:
            # a2a="data": the routed all-to-all's per-link bytes and its hottest link.
            data["ici_link_bytes"] = (("link", "direction"), links["link_bytes"].values,
                                      {"long_name": "bytes crossing each link per step (all stacks)",
                                       "units": "bytes"})
            data["ici_hottest_link_share"] = ("direction", links["hottest_link_share"].values,
                                              {"long_name": "hottest link's bytes / bytes on all links",
                                               "units": "1"})
            coords["link"] = ("link", links["link"].values)
            attrs["ici_hottest_link"] = [str(v) for v in links["hottest_link_label"].values]
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
                f"bottleneck {self.bottleneck}, {len(self.stacks)} {'stack' if len(self.stacks) == 1 else 'stacks'} "
                f"on {self.topology})")

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{p}</td><td style='text-align:right'>{self.phase_time[p] * 1e6:.3f}</td></tr>"
                       for p in PHASES)
        return (f"<div><b>{html.escape(repr(self))}</b><table><tr><th>phase</th><th>time per step (us)</th></tr>"
                f"{rows}</table></div>")


def step_model(stats, plan=None, *, topology=None, chip=None, widths=None, optimizers=None,
               features_per_stack=None, dtype="f32", num_minibatches=None, num_serialized_tables: int = 1,
               pipelining: bool = True, num_steps: int = 6, tc_forward_s=None, tc_backward_s=None,
               tc_forward_flops=None, tc_backward_flops=None, tc_peak_flops=None, memory=None,
               params: StepModelParams | None = None, a2a: str = "uniform") -> StepModel:
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
        Mini-batches per stack (default 1); not with a MiniBatchPlan. An int gives
        every stack that count, as jax-tpu-embedding's one split for the batch does.
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
    a2a : {"uniform", "data"}, default "uniform"
        How the ICI all-to-all is modelled: ``"uniform"``, the busiest device's
        volume in a uniform all-to-all of the collectives engine (the default, and
        what :func:`expected_stats` stands for); ``"data"``, the statistics' own
        (device, device) traffic routed over the chip grid, so a hot partition
        makes a hot link (:attr:`StepModel.ici_links`). Opt-in, so that results
        computed before stay the same.

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

    params, num_steps = _checked_knobs(params, num_steps, num_serialized_tables, pipelining, a2a)
    inputs = dict(stats=stats, plan=plan, topology=topology, chip=chip, widths=widths, optimizers=optimizers,
                  features_per_stack=features_per_stack, dtype=dtype, num_minibatches=num_minibatches,
                  num_serialized_tables=num_serialized_tables, pipelining=pipelining, num_steps=num_steps,
                  tc_forward_s=tc_forward_s, tc_backward_s=tc_backward_s, tc_forward_flops=tc_forward_flops,
                  tc_backward_flops=tc_backward_flops, tc_peak_flops=tc_peak_flops, memory=memory, a2a=a2a)
    _, plan, topology, stacks, ids, uniq, nmb, n, raw_ids, raw_source = _resolve_inputs(
        stats, plan, topology, widths, optimizers, features_per_stack, dtype, num_minibatches)
    chip = _sparsecore_chip(chip, topology)

    # Phase times: SparseCores, ICI, TensorCores, hosts.
    sc = _sc_model(stacks, ids, uniq, nmb, n, chip, topology, params, int(num_serialized_tables))
    ici_links = None
    if a2a == "data":
        ici_t, ici_bytes, ici_mode, ici_links = _ici_routed(stacks, uniq, topology, chip, params,
                                                            sc["padded_width"])
    else:
        ici_t, ici_bytes, ici_mode = _ici_model(stacks, uniq, topology, chip, params, sc["padded_width"])
    tc_f, tc_b, tc_notes = _tc_times(tc_forward_s, tc_backward_s, tc_forward_flops, tc_backward_flops,
                                     tc_peak_flops, params)
    units, host_ids, host = _host_times(raw_ids, topology, chip, params)

    # The two schedules of those phases.
    num_chips = topology.num_chips
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
    timelines, periods = _schedules(durations, units, parts, num_steps, params)

    G, S = topology.num_devices, topology.sparsecores_per_device
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
        "a2a": a2a, "ici_links": ici_links,
    }
    assumptions = _assumptions(raw_source, units, chip, sc, ici_mode, tc_notes, params)
    return StepModel(inputs=inputs, params=params, chip=chip, topology=topology, units=units, stacks=stacks,
                     detail=detail, durations=durations, parts=parts, timelines=timelines, periods=periods,
                     assumptions=assumptions, memory=memory)


def _checked_knobs(params, num_steps, num_serialized_tables, pipelining, a2a) -> tuple[StepModelParams, int]:
    """The step model's own settings, checked: ``(params, num_steps)``."""
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
        raise ConfigError(f"num_serialized_tables must be an integer >= 0, got {shown(num_serialized_tables)}")
    if not isinstance(pipelining, bool):
        raise ConfigError(f"pipelining must be True or False, got {shown(pipelining)}")
    if a2a not in ("uniform", "data"):
        raise ConfigError(f"a2a must be 'uniform' (a uniform all-to-all) or 'data' (the statistics' own "
                          f"traffic, routed), got {shown(a2a)}")
    return params, num_steps


def _sparsecore_chip(chip, topology):
    """The catalog chip of the model (default: the topology's), which must have the topology's SparseCores."""
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
    return chip


def _host_times(raw_ids, topology, chip, params):
    """The resources of the schedules, and each host's preprocessing time: ``(units, host_ids, host_s)``."""
    num_chips = topology.num_chips
    cph = min(params.chips_per_host, num_chips)
    num_hosts = ceil_div(num_chips, cph)
    sparsecores_per_chip = topology.sparsecores_per_device * topology.devices_per_chip
    units = Units(num_chips=num_chips, sparsecores_per_chip=sparsecores_per_chip,
                  tensorcores_per_chip=chip.tensorcores_per_chip, num_hosts=num_hosts, chips_per_host=cph)
    chip_of_device = np.arange(topology.num_devices) // topology.devices_per_chip
    host_ids = np.zeros(num_hosts)
    np.add.at(host_ids, chip_of_device // cph, raw_ids.sum(axis=(0, 2)))
    host = host_ids / (params.host_ids_per_s * params.host_threads) + params.host_overhead_s
    return units, host_ids, host


def _schedules(durations, units, parts, num_steps: int, params):
    """The sequential and pipelined timelines of ``num_steps`` steps, and each schedule's steady period."""
    timelines, periods = {}, {}
    for name, pipelined in (("sequential", False), ("pipelined", True)):
        long = simulate(durations, units, num_steps=_SIM_STEPS_FOR_PERIOD, pipelined=pipelined,
                        input_buffers=params.input_buffers)
        periods[name] = long.period()
        timelines[name] = simulate(durations, units, num_steps=num_steps, pipelined=pipelined,
                                   input_buffers=params.input_buffers, parts=parts,
                                   steady_state_step_time=periods[name])
    return timelines, periods


def _assumptions(raw_source, units, chip, sc, ici_mode, tc_notes, params) -> list[str]:
    """The step model's assumptions, one sentence each, with the numbers used."""
    return [
        f"host: {raw_source} at {params.host_ids_per_s:.4g} ids/s x {params.host_threads} thread(s) per host "
        f"of {units.chips_per_host} chip(s) + {params.host_overhead_s} s",
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
