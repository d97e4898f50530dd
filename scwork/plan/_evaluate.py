"""Evaluating one candidate plan exactly where scwork can, with every reusable piece cached.

A candidate is (context = topology x per-chip batch, stacking, limit rule, static CSR
buffer on/off, mini-batching on/off). Its figures:

- **limits** per stack: the :class:`~scwork.plan.LimitRule` applied to the stack's
  per-step maxima on the observation batches (stack counts from the per-table counts,
  exactly: see :mod:`scwork.plan._context`);
- **dropped ids and mini-batches** on the held-out batches: zero and one wherever no
  held-out stream of a stack exceeds its limits or static buffer (exact: the prefix
  cut and the bucket tree touch nothing then); otherwise the sharding engine runs on
  the stacks concerned (:func:`~scwork.sharding.compute_stats` with
  ``allow_id_dropping``, or :func:`~scwork.sharding.minibatch` with mini-batching on;
  the step's mini-batch count is the one of the batch's combined split, for every
  stack: jax-tpu-embedding ORs the split masks of all stacks, returns one count for
  the whole input and runs every stack that many times);
- **SPMEM and HBM**: :func:`scwork.memory.plan` of the stacking plan with those limits
  and buffers;
- **step time**: :func:`scwork.pipeline.step_model` on the statistics of the held-out step
  with the most ids (with its mini-batch counts): the same step for every plan of a
  context, and the slowest steps bound a pipelined steady state.

Caches (per evaluator): stacking plans per (context, stacking); memory reports per
(context, stacking, limits, buffers) (mini-batching does not change them); engine runs
per (context, stacks over their limits, mini-batching); step models per (context,
stacking, limits, mini-batch counts) (the static buffer does not change them).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from scwork._rounding import round_up
from scwork.errors import ScworkError, StaticBufferWarning
from scwork.plan._context import _Context
from scwork.plan._groupings import label
from scwork.plan.constraints import LimitRule
from scwork.sharding.specs import SparsecoreConfig, round_up
from scwork.sharding.stacking import StackingPlan, plan_stacking

__all__: list[str] = []


@dataclasses.dataclass
class _Record:
    """Everything known about one evaluated candidate."""

    context: _Context
    grouping: Any
    rule: LimitRule
    static_buffer: bool
    minibatching: bool
    plan: StackingPlan
    limits: dict[str, dict[str, int | None]]
    step_time_s: float
    step_breakdown: dict[str, float]
    peak_hbm_bytes: int
    usable_hbm_bytes: int
    max_spmem_bytes_per_tile: int
    tile_spmem_bytes: int
    fits_spmem: bool
    fits_hbm: bool
    dropped_ids: int
    held_out_ids: int
    minibatches: dict[str, int]
    memory_errors: tuple[str, ...]

    @property
    def drop_rate(self) -> float:
        return self.dropped_ids / self.held_out_ids if self.held_out_ids else 0.0

    @property
    def max_minibatches(self) -> int:
        return max(self.minibatches.values(), default=1)


def _stack_key(stack) -> tuple[tuple[str, int], ...]:
    return tuple((t.table.name, t.shard_rotation) for t in stack.tables)


class _Evaluator:
    def __init__(self, features, memory_kwargs: Mapping[str, Any], step_kwargs: Mapping[str, Any],
                 tc_seconds_per_sample, activation_mem_bytes_limit: int, allow_id_dropping: bool):
        self.features = features
        self.memory_kwargs = dict(memory_kwargs)
        self.step_kwargs = dict(step_kwargs)
        self.tc = tc_seconds_per_sample
        self.activation_limit = activation_mem_bytes_limit
        self.config = SparsecoreConfig(allow_id_dropping=allow_id_dropping, max_ids_per_chip_per_sample=None)
        self._plans: dict = {}
        self._memory: dict = {}
        self._engine: dict = {}
        self._steps: dict = {}
        self._step_stats: dict = {}
        self.counts = {"candidates": 0, "memory_plans": 0, "engine_runs": 0, "step_models": 0,
                       "stack_sums": 0}

    # -- plans ------------------------------------------------------------------------
    def bare_plan(self, ctx: _Context, grouping) -> StackingPlan:
        key = (id(ctx), grouping)
        plan = self._plans.get(key)
        if plan is None:
            stacking = "auto" if grouping == "auto" else ([list(g) for g in grouping] or None)
            plan = plan_stacking(self.features, ctx.topology, stacking, batch_size=ctx.batch_size,
                                 activation_mem_bytes_limit=self.activation_limit)
            self._plans[key] = plan
        return plan

    def limits(self, ctx: _Context, plan: StackingPlan, rule: LimitRule, static_buffer: bool):
        S, P = ctx.topology.sparsecores_per_device, ctx.topology.num_partitions
        out = {}
        for st in plan.stacks:
            counts = ctx.stack_counts(_stack_key(st))
            steps = counts["obs_ids"].shape[0]
            max_ids = rule.value(counts["obs_ids"].reshape(steps, -1).max(axis=1))
            max_uniq = min(rule.value(counts["obs_uniq"].reshape(steps, -1).max(axis=1)), max_ids)
            buffer = None
            if static_buffer:
                kept = np.minimum(counts["obs_ids"], max_ids)
                per_sc = round_up(kept, 8).sum(axis=-1)            # (step, device, sc)
                need = round_up(rule.value(per_sc.reshape(steps, -1).max(axis=1)), 8)
                # Never above what the limits can fill (the library aborts there).
                buffer = min(max(need, 8) * S, round_up(max_ids, 8) * S * P)
            out[st.name] = {"max_ids_per_partition": max_ids, "max_unique_ids_per_partition": max_uniq,
                            "suggested_coo_buffer_size_per_device": buffer}
        return out

    # -- held-out checks ----------------------------------------------------------------
    def _over(self, ctx: _Context, st, lim) -> bool:
        counts = ctx.stack_counts(_stack_key(st))
        if (counts["held_ids"] > lim["max_ids_per_partition"]).any():
            return True
        if (counts["held_uniq"] > lim["max_unique_ids_per_partition"]).any():
            return True
        buf = lim["suggested_coo_buffer_size_per_device"]
        if buf is not None:
            S = ctx.topology.sparsecores_per_device
            per_sc = round_up(counts["held_ids"], 8).sum(axis=-1)
            if (per_sc > round_up(buf, 8 * S) // S).any():
                return True
        return False

    def held_out(self, ctx: _Context, plan: StackingPlan, minibatching: bool):
        """Per held-out step: (dropped ids, {stack: mini-batches}), engine only where needed."""
        over = [st for st in plan.stacks if self._over(ctx, st, {
            "max_ids_per_partition": st.max_ids_per_partition,
            "max_unique_ids_per_partition": st.max_unique_ids_per_partition,
            "suggested_coo_buffer_size_per_device": st.suggested_coo_buffer_size_per_device})]
        n = len(ctx.held_out_batches)
        if not minibatching:
            closed = [self._dropped_in_closed_form(ctx, st) for st in over]
            if all(c is not None for c in closed):
                dropped = [int(sum(c[k] for c in closed)) for k in range(n)]
                return dropped, [dict.fromkeys((st.name for st in plan.stacks), 1) for _ in range(n)]
        if not over:
            return [0] * n, [dict.fromkeys((st.name for st in plan.stacks), 1) for _ in range(n)]
        key = (id(ctx), tuple((_stack_key(st), st.max_ids_per_partition, st.max_unique_ids_per_partition,
                               st.suggested_coo_buffer_size_per_device) for st in over), minibatching)
        hit = self._engine.get(key)
        if hit is None:
            hit = self._engine[key] = self._run_engine(ctx, plan, over, minibatching)
        dropped, per_step = hit
        # jax-tpu-embedding cuts the whole input by one split, the OR of every stack's
        # mask (SyncMinibatchingSplit), and runs every stack that many times. A stack
        # within its limits adds no bit to it, so the split of the stacks over their
        # limits, which minibatch() gives every one of them, is the step's count for
        # every stack of the plan (the oracle test checks the split against the library).
        counts = [dict.fromkeys((st.name for st in plan.stacks), max(mb.values(), default=1)) for mb in per_step]
        return dropped, counts

    def _dropped_in_closed_form(self, ctx: _Context, st) -> np.ndarray | None:
        """Per held-out step, the ids a stack drops, when the prefix cut reduces to ``ids - max_ids``.

        That is when no stream of the stack exceeds its distinct-id limit (the rank
        condition of the prefix cut never binds, so a stream keeps its first
        ``max_ids`` pairs), the kept ids fit the static buffer, and every (device,
        source SparseCore) slice with an overflowing stream has no id twice in one
        sample (each dropped pair is one raw id). Otherwise None: the engine decides.
        """
        counts = ctx.stack_counts(_stack_key(st))
        ids, uniq = counts["held_ids"], counts["held_uniq"]
        if (uniq > st.max_unique_ids_per_partition).any():
            return None
        kept = np.minimum(ids, st.max_ids_per_partition)
        if st.suggested_coo_buffer_size_per_device is not None:
            per_sc = round_up(kept, 8).sum(axis=-1)
            if (per_sc > st.static_buffer_size_per_sc(ctx.topology.sparsecores_per_device)).any():
                return None
        excess = ids - kept
        overflowing = excess.sum(axis=-1) > 0                       # (step, device, sc)
        if (counts["held_input"][overflowing] != ids.sum(axis=-1)[overflowing]).any():
            return None
        return excess.reshape(excess.shape[0], -1).sum(axis=1)

    def _run_engine(self, ctx, plan, over, minibatching):
        from scwork.sharding.engine import compute_stats
        from scwork.sharding.minibatch import minibatch

        sub = StackingPlan(over, ctx.topology, plan.rotation, plan.batch_size)
        feats = [f for st in over for f in st.features]
        names = [f.name for f in feats]
        config = dataclasses.replace(self.config, allow_id_dropping=True)
        dropped, per_step = [], []
        for batch in ctx.held_out_batches:
            self.counts["engine_runs"] += 1
            part = batch.select(names)
            if minibatching:
                mb = minibatch(part, feats, ctx.topology, strategy="vocabulary", stacking=sub, config=config,
                               num_threads=ctx.num_threads)
                dropped.append(int(mb.stats["dropped_ids"].sum()))
                per_step.append({str(s): int(v) for s, v in zip(mb.num_minibatches["stack"].values,
                                                                 mb.num_minibatches.values)})
            else:
                with warnings.catch_warnings():
                    # The ids a static buffer drops are counted here, not warned about once per candidate.
                    warnings.simplefilter("ignore", StaticBufferWarning)
                    stats = compute_stats(part, feats, ctx.topology, sub, config, num_threads=ctx.num_threads)
                dropped.append(int(stats["dropped_ids"].sum()) + int(stats["static_buffer_dropped_ids"].sum()))
                per_step.append({})
        return dropped, per_step

    # -- memory and time ----------------------------------------------------------------
    def memory(self, ctx: _Context, grouping, plan: StackingPlan, limits):
        from scwork.memory import plan as memory_plan

        key = (id(ctx), grouping, tuple((n, tuple(v.values())) for n, v in limits.items()))
        hit = self._memory.get(key)
        if hit is None:
            self.counts["memory_plans"] += 1
            report = memory_plan(plan, ctx.topology, batch_size=ctx.batch_size, config=self.config,
                                 **self.memory_kwargs)
            hit = self._memory[key] = (
                int(report.peak_hbm_bytes), int(report.usable_hbm_bytes), int(report.spmem.total.max()),
                int(report.spmem.capacity), report.spmem_fits, report.hbm_fits,
                tuple(f.message for f in report.errors))
        return hit

    def step_stats(self, ctx: _Context, plan: StackingPlan, step: int):
        """A :func:`~scwork.sharding.compute_stats`-shaped Dataset of one held-out step (for the step model).

        The counts depend on the stacking only; the configured limits are set on a
        copy of the cached counts.
        """
        key = (id(ctx), tuple(_stack_key(st) for st in plan.stacks), step)
        base = self._step_stats.get(key)
        if base is None:
            base = self._step_stats[key] = self._counts_dataset(ctx, plan, step)

        def cfg(v):
            return ("stack", np.array([-1 if x is None else x for x in v], np.int64))

        return base.assign(configured_max_ids_per_partition=cfg(st.max_ids_per_partition for st in plan.stacks),
                           configured_max_unique_ids_per_partition=cfg(st.max_unique_ids_per_partition
                                                                       for st in plan.stacks))

    def _counts_dataset(self, ctx: _Context, plan: StackingPlan, step: int):
        import xarray as xr

        names = [st.name for st in plan.stacks]
        arrays = [ctx.stack_counts(_stack_key(st)) for st in plan.stacks]
        G, S, P = ctx.topology.num_devices, ctx.topology.sparsecores_per_device, ctx.topology.num_partitions
        dims4 = ("stack", "device", "sc", "partition")

        return xr.Dataset(
            {"ids": (dims4, np.stack([a["held_ids"][step] for a in arrays])),
             "unique_ids": (dims4, np.stack([a["held_uniq"][step] for a in arrays])),
             "input_ids": (("stack", "device", "sc"), np.stack([a["held_input"][step] for a in arrays]))},
            coords={"stack": np.array(names, dtype=object), "device": np.arange(G), "sc": np.arange(S),
                    "partition": np.arange(P)},
            attrs={"batch_size": ctx.batch_size, "samples_per_sc": ctx.batch_size // P})

    def step_time(self, ctx: _Context, grouping, plan: StackingPlan, limits, minibatches):
        from scwork.pipeline import step_model

        # The step model reads the limits only to clip the counts of streams above
        # them; for the other stacks the limits do not change its answer.
        step = ctx.heaviest_held_out_step
        clipped = tuple((st.name, st.max_ids_per_partition, st.max_unique_ids_per_partition)
                        for st in plan.stacks if self._clipped(ctx, st, step))
        mb = minibatches[step]
        key = (id(ctx), grouping, clipped, tuple(sorted(mb.items())))
        hit = self._steps.get(key)
        if hit is None:
            # The steady-state step time does not depend on how many steps the
            # timelines lay out; three is the fewest step_model takes.
            kwargs = {"num_steps": 3, **self.step_kwargs}
            if self.tc is not None:
                kwargs.setdefault("tc_forward_s", self.tc[0] * ctx.per_chip_batch)
                kwargs.setdefault("tc_backward_s", self.tc[1] * ctx.per_chip_batch)
            self.counts["step_models"] += 1
            model = step_model(self.step_stats(ctx, plan, step), plan, num_minibatches=mb, **kwargs)
            hit = self._steps[key] = (float(model.step_time), _phase_times(model))
        return hit

    def _clipped(self, ctx: _Context, st, step: int) -> bool:
        counts = ctx.stack_counts(_stack_key(st))
        return bool((counts["held_ids"][step] > st.max_ids_per_partition).any()
                    or (counts["held_uniq"][step] > st.max_unique_ids_per_partition).any())

    # -- one candidate --------------------------------------------------------------------
    def evaluate(self, ctx: _Context, grouping, rule: LimitRule, static_buffer: bool,
                 minibatching: bool) -> _Record:
        self.counts["candidates"] += 1
        bare = self.bare_plan(ctx, grouping)
        limits = self.limits(ctx, bare, rule, static_buffer)
        plan = plan_stacking(self.features, ctx.topology, bare, stack_limits=limits)
        dropped, minibatches = self.held_out(ctx, plan, minibatching)
        peak, usable, spmem, capacity, fits_spmem, fits_hbm, errors = self.memory(ctx, grouping, plan, limits)
        try:
            step_time, parts = self.step_time(ctx, grouping, plan, limits, minibatches)
        except ScworkError as err:    # e.g. more mini-batches than the step model lays out
            step_time, parts = float("inf"), {"error": str(err)}
        held = int(ctx.held_input.sum())
        return _Record(ctx, grouping, rule, static_buffer, minibatching, plan, limits, step_time, parts, peak,
                       usable, spmem, capacity, fits_spmem, fits_hbm, int(sum(dropped)), held,
                       {n: max(mb[n] for mb in minibatches) for n in minibatches[0]} if minibatches else {},
                       errors)

    def describe(self, rec: _Record) -> str:
        return (f"{rec.context.topology} x {rec.context.per_chip_batch}/chip, stacking {label(rec.grouping)}, "
                f"limits {rec.rule.name}, static buffer {'on' if rec.static_buffer else 'off'}, "
                f"mini-batching {'on' if rec.minibatching else 'off'}")


def _phase_times(model) -> dict[str, float]:
    """Seconds per phase of one step (the slowest unit's) of a :class:`~scwork.pipeline.StepModel`."""
    return {str(k): float(v) for k, v in model.phase_time.items()}
