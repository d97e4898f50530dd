"""Which bottleneck bites first, and how to fix it: findings ordered by estimated impact.

:func:`advise` takes whatever you know (all optional): the SparseCore
configuration, the stacking plan, the statistics of a batch, a mini-batching plan,
a memory report (:func:`scwork.memory.plan`) and a step model
(:func:`scwork.pipeline.step_model`), runs every check of [sc-guide] §10 that its inputs
allow, and returns :class:`Advice`: a list of :class:`Finding` (id, title,
evidence numbers, fix with the flag or parameter names, expected gain with how it
was estimated), most impactful first, plus the checks it could not run and why.

The checks (``Finding.id``):

======================================= ============================================ ===========================
id                                      fires when                                   needs
======================================= ============================================ ===========================
``spmem_overflow``                      a stack does not fit in TileSpmem            memory report
``hbm_stack_overflow``                  HBM peak > usable and the SparseCore HBM     memory report
                                        stack is the larger part (or serializing
                                        tables fixes it)
``hbm_heap_exhaustion``                 HBM peak > usable and the heap (dense        memory report
                                        weights, constants, prefetch) is the larger
                                        part (or less prefetch fixes it)
``host_preprocessing_slow``             more host threads would shorten the step     step model
``pipelining_off``                      the step model runs sequentially and         step model
                                        pipelining would gain
``limits_too_low``                      dropped ids, or more than one mini-batch     stats / mini-batch plan /
                                        with a configured limit below the observed   step model
                                        maximum
``minibatching_overhead``               more than one mini-batch that no configured  mini-batch plan or step
                                        limit below the observed maximum explains    model
                                        (e.g. ``num_minibatches`` set by hand) and
                                        one mini-batch would gain
``limits_too_high``                     configured limits > ``limits_high_ratio`` x  stats (+ plan or memory)
                                        observed
``partition_skew``                      slowest SparseCore > ``skew_ratio`` x the    step model (or stats)
                                        mean
``too_few_stacked_tables``              compatible stacks of < 5 tables that could   plan
                                        be one stack
``too_many_stacked_tables``             a stack of > 100 tables                      plan
``fp32_where_lower_precision_would_do`` f32 tables whose bf16 / int8 storage would   step model or plan
                                        save time or HBM
``hbm_bandwidth_saturation``            the SparseCores bound the step and their     step model
                                        busiest tile is DMA-bound
======================================= ============================================ ===========================

Order: findings that stop compilation or training (severity ``error``) first,
then by estimated seconds saved per step, then by bytes saved, then the rest.
Expected gains are estimates from scwork's models (``gain_basis`` says which
what-if produced each one); thresholds are the fields of :class:`AdvisorThresholds`.

Examples
--------
>>> import scwork
>>> from scwork.pipeline import step_model, expected_stats
>>> from scwork.advisor import advise
>>> topo = scwork.Topology.for_chip("v5p", num_chips=4)
>>> stats = expected_stats({"user": 20.0}, topo, batch_size=16384)
>>> model = step_model(stats, widths={"user": 64}, topology=topo, tc_forward_s=2e-4,
...                    pipelining=False)
>>> advice = advise(model=model)
>>> advice.ids                       # one preprocessing thread: the host bites first
['host_preprocessing_slow']
>>> threads = advice[0].evidence["threads_needed"]
>>> advice[0].gain_s > 0.5 * model.step_time
True

Each gain is the what-if of that one fix alone; apply the first and ask again:

>>> again = advise(model=model.replace(host_threads=threads))
>>> again.ids
['pipelining_off', 'fp32_where_lower_precision_would_do']
>>> print(again[0].flags)
('tf_xla_disable_full_embedding_pipelining',)
"""

from __future__ import annotations

from typing import Any

from scwork.advisor._context import collapse, Context
from scwork.advisor._limit_checks import check_limits_high, check_limits_low
from scwork.advisor._memory_checks import check_memory, check_stacking
from scwork.advisor._time_checks import (
    check_bandwidth,
    check_host,
    check_pipelining,
    check_precision,
    check_skew,
)
from scwork.advisor.findings import Advice, AdvisorThresholds, CHECKS, Finding, SEVERITIES
from scwork.errors import ConfigError, ScworkError

__all__ = ["advise", "Advice", "Finding", "AdvisorThresholds", "CHECKS", "SEVERITIES"]

def advise(*, config=None, plan=None, stats=None, memory=None, model=None, minibatch=None,
           batch_size: int | None = None, dtype: Any = None,
           thresholds: AdvisorThresholds | None = None) -> Advice:
    """Diagnose the bottlenecks of [sc-guide] §10 from whatever is known; most impactful first.

    Parameters
    ----------
    config : SparsecoreConfig, optional
    plan : StackingPlan, optional
        Default: the step model's or mini-batch plan's plan.
    stats : xarray.Dataset, optional
        :func:`scwork.sharding.compute_stats` output. Default: the step model's or
        mini-batch plan's statistics.
    memory : MemoryReport, optional
        :func:`scwork.memory.plan`. When missing but a plan and a batch size (argument,
        or the statistics' ``batch_size``) are known, it is computed (failures are
        listed in ``skipped``).
    model : StepModel, optional
        :func:`scwork.pipeline.step_model`; time gains come from re-running it.
    minibatch : MiniBatchPlan, optional
    batch_size : int, optional
    dtype : str or dict, optional
        Table dtypes when there is no step model.
    thresholds : AdvisorThresholds, optional

    Returns
    -------
    Advice
        A list of :class:`Finding` (errors first, then by seconds saved, then bytes
        saved), with ``skipped`` (check -> missing input), ``to_dataframe()`` and an
        HTML table in notebooks.

    Raises
    ------
    ConfigError
        Inputs of the wrong type.
    """
    from scwork.sharding import SparsecoreConfig, StackingPlan

    thresholds = AdvisorThresholds() if thresholds is None else thresholds
    if not isinstance(thresholds, AdvisorThresholds):
        raise ConfigError(f"thresholds must be AdvisorThresholds, got {type(thresholds).__name__}")
    if config is not None and not isinstance(config, SparsecoreConfig):
        raise ConfigError(f"config must be a SparsecoreConfig, got {type(config).__name__}")
    if model is not None:
        from scwork.pipeline import StepModel

        if not isinstance(model, StepModel):
            raise ConfigError(f"model must be a scwork.pipeline.StepModel, got {type(model).__name__}")
    if minibatch is not None and not hasattr(minibatch, "num_minibatches"):
        raise ConfigError(f"minibatch must be a MiniBatchPlan, got {type(minibatch).__name__}")
    if plan is None:
        if model is not None and model._inputs.get("plan") is not None:
            plan = model._inputs["plan"]
        elif minibatch is not None:
            plan = minibatch.plan
        elif memory is not None and isinstance(getattr(getattr(memory, "model", None), "plan", None), StackingPlan):
            plan = memory.model.plan
    if plan is not None and not isinstance(plan, StackingPlan):
        raise ConfigError(f"plan must be a StackingPlan, got {type(plan).__name__}")
    if stats is None:
        if model is not None:
            s = model._inputs["stats"]
            stats = s.stats if hasattr(s, "num_minibatches") else s
        elif minibatch is not None:
            stats = minibatch.stats
    if memory is None and model is not None and model.memory is not None:
        memory = model.memory
    skipped_memory = None
    if memory is None and plan is not None:
        bs = batch_size if batch_size is not None else (stats.attrs.get("batch_size") if stats is not None else None)
        if bs is not None:
            try:
                from scwork.memory import plan as memory_plan

                kw = {"dtype": dtype} if isinstance(dtype, str) else {}
                memory = memory_plan(plan, plan.topology, batch_size=int(bs), stats=collapse(stats)
                                     if stats is not None else None, config=config, **kw)
            except (ScworkError, ValueError) as err:
                skipped_memory = f"memory model failed: {err}"
    ctx = Context(config, plan, stats, memory, model, minibatch, thresholds, batch_size, dtype)
    for check in (check_memory, check_host, check_pipelining, check_limits_low, check_limits_high,
                  check_skew, check_stacking, check_precision, check_bandwidth):
        check(ctx)
    if skipped_memory:
        for check in ("spmem_overflow", "hbm_stack_overflow", "hbm_heap_exhaustion"):
            ctx.skipped[check] = skipped_memory
    rank = {s: i for i, s in enumerate(SEVERITIES)}

    def key(f: Finding):
        blocking = 0 if f.severity == "error" else 1
        return (blocking, -(f.gain_s or 0.0), -(f.gain_bytes or 0), rank[f.severity], CHECKS.index(f.id))

    return Advice(sorted(ctx.findings, key=key), ctx.skipped, ctx.step)
