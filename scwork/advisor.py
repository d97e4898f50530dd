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

import dataclasses
import html
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scwork._rounding import round_up

from scwork.errors import ConfigError, ScworkError

__all__ = ["advise", "Advice", "Finding", "AdvisorThresholds", "CHECKS", "SEVERITIES"]

#: Finding severities, most severe first.
SEVERITIES: tuple[str, ...] = ("error", "warning", "info")

#: Every check :func:`advise` knows, in [sc-guide] §10 order.
CHECKS: tuple[str, ...] = (
    "host_preprocessing_slow",
    "pipelining_off",
    "limits_too_low",
    "minibatching_overhead",
    "limits_too_high",
    "partition_skew",
    "too_few_stacked_tables",
    "too_many_stacked_tables",
    "fp32_where_lower_precision_would_do",
    "hbm_bandwidth_saturation",
    "spmem_overflow",
    "hbm_stack_overflow",
    "hbm_heap_exhaustion",
)

FLAG_PIPELINING = "tf_xla_disable_full_embedding_pipelining"
FLAG_SERIALIZE = "xla_sc_num_serialized_tables_to_optimize_hbm"
FLAG_PREFETCH = "maximum_parallel_iterations"


@dataclass(frozen=True)
class AdvisorThresholds:
    """When a check fires. Every field is a scwork choice unless its docstring cites a source."""

    min_gain_fraction: float = 0.02
    """Time findings fire only if they save at least this fraction of the step time. Unit: 1."""

    skew_ratio: float = 1.25
    """Partition skew fires when the slowest SparseCore's time (or the busiest partition's
    ids) exceeds this multiple of the mean. Unit: 1."""

    limits_high_ratio: float = 2.0
    """Limits are too high when the configured limit exceeds this multiple of the observed
    maximum. Unit: 1."""

    min_tables_per_stack: int = 5
    """Fewest tables a stack should have: [sc-guide] §10 recommends 5 to 100. Unit: tables."""

    max_tables_per_stack: int = 100
    """Most tables a stack should have: [sc-guide] §10 recommends 5 to 100. Unit: tables."""

    sc_bound_utilization: float = 0.8
    """HBM-bandwidth saturation needs the SparseCores busy at least this share of the step. Unit: 1."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"AdvisorThresholds.{f.name} must be a finite number >= 0, got {v!r}")
        if self.min_tables_per_stack > self.max_tables_per_stack:
            raise ConfigError("AdvisorThresholds.min_tables_per_stack must be <= max_tables_per_stack")


@dataclass(frozen=True)
class Finding:
    """One bottleneck, with the numbers that show it, the fix and what it is worth.

    Attributes
    ----------
    id : str
        One of :data:`CHECKS`.
    title : str
    severity : {"error", "warning", "info"}
    evidence : mapping
        The numbers behind the finding, by name (seconds, bytes, counts).
    fix : str
        What to change, in words.
    flags : tuple of str
        Flag, configuration field or parameter names the fix changes.
    gain_s : float or None
        Estimated seconds saved per training step (None: not a time finding or not
        estimable from the inputs).
    gain_bytes : int or None
        Estimated bytes saved (or that must be freed to fit), per chip unless the
        evidence says otherwise.
    gain_basis : str
        How the gain was estimated.
    stack : str or None
        The stacked table concerned, if one.
    step_time_s : float or None
        The modelled step time the gain compares with.
    """

    id: str
    title: str
    severity: str
    evidence: Mapping[str, Any]
    fix: str
    flags: tuple[str, ...] = ()
    gain_s: float | None = None
    gain_bytes: int | None = None
    gain_basis: str = ""
    stack: str | None = None
    step_time_s: float | None = None

    @property
    def gain_fraction(self) -> float | None:
        """``gain_s / step_time_s`` when both are known."""
        if self.gain_s is None or not self.step_time_s:
            return None
        return self.gain_s / self.step_time_s

    @property
    def expected_gain(self) -> str:
        """The gain in words, e.g. ``"1.2 ms per step (35% of the step)"``."""
        parts = []
        if self.gain_s is not None:
            text = f"{_fmt_s(self.gain_s)} per step"
            if self.gain_fraction is not None:
                text += f" ({self.gain_fraction:.0%} of the step)"
            parts.append(text)
        if self.gain_bytes is not None:
            parts.append(f"{_fmt_bytes(self.gain_bytes)}")
        return "; ".join(parts) if parts else "not estimated"

    def __str__(self) -> str:
        ev = ", ".join(f"{k}={_fmt_value(v)}" for k, v in self.evidence.items())
        return (f"[{self.severity}] {self.id}: {self.title}\n  evidence: {ev}\n  fix: {self.fix}"
                + (f" ({', '.join(self.flags)})" if self.flags else "")
                + f"\n  expected gain: {self.expected_gain} - {self.gain_basis}")


def _fmt_s(s: float) -> str:
    a = abs(s)
    if a >= 1:
        return f"{s:.3g} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} \u00b5s"


def _fmt_bytes(b: float) -> str:
    a = abs(b)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if a >= size:
            return f"{b / size:.3g} {unit}"
    return f"{int(b)} B"


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class Advice(list):
    """Findings, most impactful first, plus the checks that could not run.

    Attributes
    ----------
    skipped : dict of str -> str
        Check id -> why it did not run (missing input).
    step_time_s : float or None
        Modelled step time, when a step model was available.
    """

    def __init__(self, findings, skipped: Mapping[str, str], step_time_s: float | None):
        super().__init__(findings)
        self.skipped = dict(skipped)
        self.step_time_s = step_time_s

    @property
    def ids(self) -> list[str]:
        return [f.id for f in self]

    def get(self, id: str) -> list[Finding]:
        """Findings with this id."""
        return [f for f in self if f.id == id]

    def records(self) -> list[dict[str, Any]]:
        """One plain dict per finding (evidence as a dict)."""
        out = []
        for rank, f in enumerate(self, 1):
            out.append({"rank": rank, "id": f.id, "severity": f.severity, "title": f.title, "stack": f.stack,
                        "gain_s": f.gain_s, "gain_fraction": f.gain_fraction, "gain_bytes": f.gain_bytes,
                        "fix": f.fix, "flags": ", ".join(f.flags), "gain_basis": f.gain_basis,
                        "evidence": dict(f.evidence)})
        return out

    def to_dataframe(self):
        """The findings as a :class:`pandas.DataFrame` (needs pandas), one row per finding."""
        import pandas as pd

        rows = self.records()
        for r in rows:
            r["evidence"] = ", ".join(f"{k}={_fmt_value(v)}" for k, v in r["evidence"].items())
        return pd.DataFrame(rows, columns=["rank", "id", "severity", "title", "stack", "gain_s", "gain_fraction",
                                           "gain_bytes", "fix", "flags", "gain_basis", "evidence"]).set_index("rank")

    def __str__(self) -> str:
        if not self:
            text = "No bottleneck found."
        else:
            text = "\n".join(f"{i}. {f}" for i, f in enumerate(self, 1))
        if self.skipped:
            text += "\nNot checked: " + "; ".join(f"{k} ({v})" for k, v in self.skipped.items())
        return text

    def __repr__(self) -> str:
        return f"Advice({len(self)} findings: {self.ids}; {len(self.skipped)} checks skipped)"

    def _repr_html_(self) -> str:
        colors = {"error": "#c62828", "warning": "#ef6c00", "info": "#1565c0"}
        rows = []
        for i, f in enumerate(self, 1):
            ev = "<br>".join(f"{html.escape(str(k))} = {html.escape(_fmt_value(v))}" for k, v in f.evidence.items())
            rows.append(
                f"<tr><td>{i}</td><td style='color:{colors[f.severity]}'>{f.severity}</td>"
                f"<td><b>{html.escape(f.title)}</b><br><code>{f.id}</code></td>"
                f"<td><small>{ev}</small></td>"
                f"<td>{html.escape(f.fix)}<br><code>{html.escape(', '.join(f.flags))}</code></td>"
                f"<td>{html.escape(f.expected_gain)}<br><small>{html.escape(f.gain_basis)}</small></td></tr>")
        skipped = ""
        if self.skipped:
            skipped = "<p><small>Not checked: " + html.escape(
                "; ".join(f"{k} ({v})" for k, v in self.skipped.items())) + "</small></p>"
        return ("<div><table><tr><th>#</th><th>severity</th><th>finding</th><th>evidence</th><th>fix</th>"
                f"<th>expected gain</th></tr>{''.join(rows)}</table>{skipped}</div>")


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def _round8(x: float) -> int:
    return int(round_up(math.ceil(x), 8))


def _collapse(stats, limits: bool = True):
    """Statistics without a minibatch dim (ids of vocabulary mini-batches add up).

    ``limits=False`` also drops the configured limits, for what-ifs in which the limits
    are raised to what the batch needs (the step model would otherwise clip to them).
    """
    if not limits:
        stats = stats.drop_vars([v for v in ("configured_max_ids_per_partition",
                                             "configured_max_unique_ids_per_partition") if v in stats])
    if "minibatch" not in stats["ids"].dims:
        return stats
    keep = {}
    for name in ("ids", "unique_ids", "input_ids"):
        if name in stats:
            keep[name] = stats[name].sum("minibatch") if "minibatch" in stats[name].dims else stats[name]
    for name in ("configured_max_ids_per_partition", "configured_max_unique_ids_per_partition", "dropped_ids"):
        if name in stats:
            v = stats[name]
            keep[name] = v.max("minibatch") if "minibatch" in v.dims and name.startswith("conf") else (
                v.sum("minibatch") if "minibatch" in v.dims else v)
    import xarray as xr

    return xr.Dataset(keep, attrs=dict(stats.attrs))


def _balanced(stats):
    """The same ids per source SparseCore, spread evenly over the partitions (no skew)."""
    out = stats.copy()
    for name in ("ids", "unique_ids"):
        a = stats[name].transpose("stack", "device", "sc", "partition").values
        P = a.shape[-1]
        tot = a.sum(axis=-1, keepdims=True)
        even = np.broadcast_to(tot // P, a.shape).copy()
        rem = (tot % P)[..., 0]
        idx = np.arange(P)
        even += (idx[None, None, None, :] < rem[..., None]).astype(even.dtype)
        out[name] = (("stack", "device", "sc", "partition"), even, dict(stats[name].attrs))
    out["unique_ids"] = out["unique_ids"].where(out["unique_ids"] <= out["ids"], out["ids"])
    return out


def _observed_limits(stats) -> dict[str, tuple[int, int]]:
    s = _collapse(stats)
    ids = s["ids"].max(("device", "sc", "partition"))
    uniq = s["unique_ids"].max(("device", "sc", "partition"))
    return {str(k): (int(i), int(u)) for k, i, u in zip(s["stack"].values, ids.values, uniq.values)}


def _configured_limits(stats, plan, config) -> dict[str, tuple[int | None, int | None]]:
    out: dict[str, tuple[int | None, int | None]] = {}
    if plan is not None:
        for st in plan.stacks:
            out[st.name] = (st.max_ids_per_partition, st.max_unique_ids_per_partition)
    if stats is not None and "configured_max_ids_per_partition" in stats:
        s = _collapse(stats)
        for k, a, b in zip(s["stack"].values, s["configured_max_ids_per_partition"].values,
                           s["configured_max_unique_ids_per_partition"].values):
            a, b = int(a), int(b)
            prev = out.get(str(k), (None, None))
            out[str(k)] = (a if a >= 0 else prev[0], b if b >= 0 else prev[1])
    return out


# --------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------
class _Ctx:
    def __init__(self, config, plan, stats, memory, model, minibatch, thresholds, batch_size, dtype):
        self.config = config
        self.plan = plan
        self.stats = stats
        self.memory = memory
        self.model = model
        self.minibatch = minibatch
        self.t = thresholds
        self.batch_size = batch_size
        self.dtype = dtype
        self.findings: list[Finding] = []
        self.skipped: dict[str, str] = {}
        self.step = model.step_time if model is not None else None

    def add(self, **kw):
        kw.setdefault("step_time_s", self.step)
        # A what-if that does not shorten the step is no gain: never offer a loss as one.
        for name in ("gain_s", "gain_bytes"):
            if kw.get(name) is not None and not kw[name] > 0:
                kw[name] = None
        kw["evidence"] = dict(kw.get("evidence", {}))
        kw["flags"] = tuple(kw.get("flags", ()))
        self.findings.append(Finding(**kw))

    def skip(self, check: str, why: str):
        self.skipped[check] = why

    def worth(self, gain_s: float | None) -> bool:
        return gain_s is not None and self.step is not None and gain_s >= self.t.min_gain_fraction * self.step


def _check_host(c: _Ctx):
    m = c.model
    if m is None:
        return c.skip("host_preprocessing_slow", "needs a step model (host time)")
    busy = m.busy_per_step()
    others = max(busy["sc"], busy["ici"], busy["tc"])
    host = busy["host"]
    p = m.params
    if host <= others:
        return
    per_thread = (host - p.host_overhead_s) * p.host_threads
    if others <= p.host_overhead_s:
        threads = None
    else:
        threads = max(p.host_threads + 1, math.ceil(per_thread / (others - p.host_overhead_s) - 1e-9))
    if threads is not None:
        faster = m.replace(host_threads=threads)
        gain = m.step_time - faster.step_time
        basis = (f"step model re-run with host_threads={threads} (host {_fmt_s(faster.phase_time['host'])} "
                 f"<= the busiest device resource {_fmt_s(others)})")
    else:
        gain = m.step_time - m.step_time_with(durations={"host": p.host_overhead_s})
        basis = "step model with the host's per-id work removed (host_overhead_s alone exceeds the device)"
    if not c.worth(gain):
        return
    c.add(id="host_preprocessing_slow", title="Host preprocessing is slower than the device step",
          severity="warning",
          evidence={"host_time_s": host, "busiest_device_resource_s": others, "host_threads": p.host_threads,
                    "host_ids_per_step": float(m.detail["host_ids"].max()), "host_ids_per_s": p.host_ids_per_s,
                    "threads_needed": threads},
          fix=(f"preprocess with {threads} threads per host (or faster preprocessing); prefetch more input "
               "steps" if threads else "cut the fixed host overhead per step; prefetch more input steps"),
          flags=("host_threads", FLAG_PREFETCH), gain_s=gain, gain_basis=basis)


def _check_pipelining(c: _Ctx):
    m = c.model
    if m is None:
        return c.skip("pipelining_off", "needs a step model")
    if m.pipelining:
        return
    gain = m.sequential_step_time - m.pipelined_step_time
    if not c.worth(gain):
        return
    c.add(id="pipelining_off", title="SparseCore and TensorCore do not overlap (pipelining off)",
          severity="warning",
          evidence={"sequential_step_s": m.sequential_step_time, "pipelined_step_s": m.pipelined_step_time,
                    "speedup": m.speedup, "staleness_steps_if_on": m.staleness_steps},
          fix=(f"set {FLAG_PIPELINING}=false; the SparseCore then uses embeddings {m.staleness_steps} step(s) "
               f"stale (updates of step i visible at step i+{m.update_offset}): check convergence"),
          flags=(FLAG_PIPELINING,), gain_s=gain,
          gain_basis="step model: sequential minus pipelined steady-state step time")


def _limits_below_observed(conf, obs) -> list[str]:
    """Names of the configured limits below the observed maximum (none when either is unknown)."""
    if obs is None:
        return []
    names = ("max_ids_per_partition", "max_unique_ids_per_partition")
    return [name for name, cfg, seen in zip(names, conf, obs) if cfg is not None and seen > cfg]


def _one_minibatch_gain(m, stack: str) -> float:
    """Seconds per step saved by running ``stack`` in one mini-batch (limits at the observed maximum)."""
    cur = dict(zip(m.stacks, (int(x) for x in m.detail["num_minibatches"])))
    base_stats = m._inputs["stats"]
    if hasattr(base_stats, "num_minibatches") or "minibatch" in getattr(base_stats, "dims", {}):
        raw = base_stats.stats if hasattr(base_stats, "num_minibatches") else base_stats
        cur.pop(stack)
        what = m.replace(stats=_collapse(raw, limits=False), num_minibatches={**cur, stack: 1},
                         plan=m._inputs.get("plan") or getattr(base_stats, "plan", None), topology=m.topology)
    else:
        cur[stack] = 1
        what = m.replace(num_minibatches=cur)
    return m.step_time - what.step_time


def _check_limits_low(c: _Ctx):
    stats = c.stats
    if stats is None and c.minibatch is not None:
        stats = c.minibatch.stats
    if stats is None and c.model is None:
        c.skip("minibatching_overhead", "needs a mini-batch plan or a step model")
        return c.skip("limits_too_low", "needs stats, a mini-batch plan or a step model")
    m = c.model
    nmb: dict[str, int] = {}
    if c.minibatch is not None:
        nmb = {str(k): int(v) for k, v in zip(c.minibatch.num_minibatches["stack"].values,
                                              c.minibatch.num_minibatches.values)}
    elif m is not None:
        nmb = {s: int(n) for s, n in zip(m.stacks, m.detail["num_minibatches"])}
    else:
        c.skip("minibatching_overhead", "needs a mini-batch plan or a step model")
    observed = _observed_limits(stats) if stats is not None else {}
    configured = _configured_limits(stats, c.plan, c.config)
    dropped = {}
    if stats is not None and "dropped_ids" in stats:
        d = _collapse(stats)["dropped_ids"]
        dropped = {str(k): int(v) for k, v in zip(d["stack"].values, d.values) if int(v) > 0}
    multi = {s: n for s, n in nmb.items() if n > 1}
    for stack in sorted(set(multi) | set(dropped)):
        obs = observed.get(stack)
        conf = configured.get(stack, (None, None))
        below = _limits_below_observed(conf, obs)
        gain, basis = None, "no step model: time not estimated"
        if stack in multi and m is not None:
            gain = _one_minibatch_gain(m, stack)
            basis = f"step model re-run with stack {stack!r} in one mini-batch (limits at the observed maximum)"
        evidence = {"num_minibatches": nmb.get(stack, 1), "dropped_ids": dropped.get(stack, 0),
                    "configured_max_ids_per_partition": conf[0], "configured_max_unique_ids_per_partition": conf[1]}
        if obs is not None:
            evidence.update({"observed_max_ids_per_partition": obs[0],
                             "observed_max_unique_ids_per_partition": obs[1]})
        if stack not in dropped and not below:
            # Mini-batches no configured limit explains (set by hand, e.g. num_minibatches=4): they
            # cost SparseCore op overheads, but say nothing about the limits.
            if gain is not None and not c.worth(gain):
                continue
            why = ("no limits are configured for it" if conf == (None, None) else
                   f"its configured limits ({conf[0]}, {conf[1]}) are not below the observed maximum"
                   + (f" ({obs[0]}, {obs[1]})" if obs is not None else ""))
            c.add(id="minibatching_overhead",
                  title=f"Stack {stack!r} runs in {nmb[stack]} mini-batches that its limits do not require",
                  severity="info", evidence=evidence, stack=stack, flags=("num_minibatches",), gain_s=gain,
                  fix=(f"run stack {stack!r} in one mini-batch (num_minibatches=1): {why}; every extra "
                       "mini-batch adds a SparseCore op (sc_op_overhead_s) per direction"),
                  gain_basis=basis)
            continue
        evidence["limits_below_observed"] = below
        suggest = (None if obs is None else (_round8(obs[0]), _round8(obs[1])))
        if stack in dropped and stats is not None and "input_ids" in stats:
            total = int(_collapse(stats)["input_ids"].sel(stack=stack).sum())
            evidence["dropped_share"] = dropped[stack] / total if total else 0.0
        fix = (f"raise the limits of stack {stack!r}"
               + (f" to max_ids_per_partition={suggest[0]}, max_unique_ids_per_partition={suggest[1]} "
                  "(observed maximum rounded up to 8)" if suggest else "")
               + ("; dropped ids change the model: keep allow_id_dropping=False unless intended"
                  if stack in dropped else "")
               + "; check SPMEM / HBM stack with scwork.memory.plan before compiling")
        severity = "warning" if stack in dropped else "info"
        if stack in multi and stack not in dropped and gain is not None and not c.worth(gain):
            continue
        c.add(id="limits_too_low", title=f"Limits of stack {stack!r} are too low "
              + ("(ids dropped)" if stack in dropped else f"({nmb[stack]} mini-batches)"),
              severity=severity, evidence=evidence, fix=fix, stack=stack,
              flags=("max_ids_per_partition", "max_unique_ids_per_partition", "allow_id_dropping",
                     "xla_sparse_core_max_ids_file"),
              gain_s=gain, gain_basis=basis if stack in multi else "accuracy: dropped ids are lost lookups")


def _check_limits_high(c: _Ctx):
    if c.stats is None:
        return c.skip("limits_too_high", "needs stats (observed limits)")
    observed = _observed_limits(c.stats)
    configured = _configured_limits(c.stats, c.plan, c.config)
    r = c.t.limits_high_ratio
    for stack, (cfg_ids, cfg_uniq) in sorted(configured.items()):
        if stack not in observed:
            continue
        obs_ids, obs_uniq = observed[stack]
        high_ids = cfg_ids is not None and cfg_ids > r * max(obs_ids, 1)
        high_uniq = cfg_uniq is not None and cfg_uniq > r * max(obs_uniq, 1)
        if not (high_ids or high_uniq):
            continue
        new = (_round8(max(obs_ids, 1)), _round8(max(obs_uniq, 1)))
        gain_bytes, basis = None, ""
        if c.memory is not None:
            try:
                smaller = c.memory.replace(stack_limits={**dict(c.memory.inputs.get("stack_limits") or {}),
                                                         stack: new})
                gain_bytes = int(c.memory.peak_hbm_bytes - smaller.peak_hbm_bytes)
                spmem_now = int(c.memory.spmem.total[list(c.memory.spmem.stacks).index(stack)])
                spmem_new = int(smaller.spmem.total[list(smaller.spmem.stacks).index(stack)])
                basis = (f"scwork.memory.plan re-run with stack_limits {new}: HBM peak per chip; SPMEM per tile "
                         f"{spmem_now} -> {spmem_new} bytes")
            except (ScworkError, ValueError) as err:
                basis = f"memory re-run failed: {err}"
        if gain_bytes is None and c.plan is not None and cfg_uniq is not None:
            from scwork.memory import hbm_stack_bytes

            st = c.plan.stack(stack)
            P = c.plan.num_partitions
            now = sum(hbm_stack_bytes(st.embedding_dim, cfg_uniq, P))
            lower = sum(hbm_stack_bytes(st.embedding_dim, min(new[1], cfg_uniq), P))
            per_chip = c.plan.topology.sparsecores_per_chip
            gain_bytes = int((now - lower) * per_chip)
            basis = ("the HBM stack formulas of [sc-guide] §9 (forward + backward, logical_replica_count = P) x SparseCores "
                     "per chip, configured vs observed max_unique_ids_per_partition")
        c.add(id="limits_too_high", title=f"Limits of stack {stack!r} are far above what the data needs",
              severity="info",
              evidence={"configured_max_ids_per_partition": cfg_ids, "observed_max_ids_per_partition": obs_ids,
                        "configured_max_unique_ids_per_partition": cfg_uniq,
                        "observed_max_unique_ids_per_partition": obs_uniq, "ratio_threshold": r},
              fix=(f"lower the limits of stack {stack!r} towards max_ids_per_partition={new[0]}, "
                   f"max_unique_ids_per_partition={new[1]} (observed, rounded up to 8; keep margin for rarer "
                   "batches: scwork.sharding.tune_limits over many steps)"),
              flags=("max_ids_per_partition", "max_unique_ids_per_partition", "xla_sparse_core_max_ids_file"),
              gain_bytes=gain_bytes, gain_basis=basis or "not estimated (no memory report or plan)", stack=stack)


def _check_skew(c: _Ctx):
    m = c.model
    if m is not None:
        sc = np.asarray(m.durations["sc_forward"]) + np.asarray(m.durations["sc_backward"])
        mean = float(sc.mean())
        worst = float(sc.max())
        if mean <= 0 or worst <= c.t.skew_ratio * mean:
            return
        stats = m._inputs["stats"]
        raw = stats.stats if hasattr(stats, "num_minibatches") else stats
        kwargs = {}
        if hasattr(stats, "num_minibatches") or "minibatch" in raw["ids"].dims:
            kwargs = {"num_minibatches": {s: int(n) for s, n in zip(m.stacks, m.detail["num_minibatches"])},
                      "plan": m._inputs.get("plan") or getattr(stats, "plan", None), "topology": m.topology}
        balanced = m.replace(stats=_balanced(_collapse(raw, limits=False)), **kwargs)
        gain = m.step_time - balanced.step_time
        if not c.worth(gain):
            return
        unit = int(np.argmax(sc))
        S = m.topology.sparsecores_per_device
        c.add(id="partition_skew", title="Some SparseCores get far more ids than others (partition skew)",
              severity="warning",
              evidence={"slowest_sc_s": worst, "mean_sc_s": mean, "ratio": worst / mean,
                        "slowest_device": unit // S, "slowest_sc": unit % S},
              fix=("spread hot ids: shuffle ids during mini-batching for stacked hot tables, stack the hot table "
                   "with others (shard rotation moves its hot ids to other chips), or re-hash ids; then set "
                   "balanced per-table limits"),
              flags=("rotation (plan_stacking)", "max_ids_per_partition"), gain_s=gain,
              gain_basis="step model re-run with each source SparseCore's ids spread evenly over the partitions")
        return
    if c.stats is None:
        return c.skip("partition_skew", "needs a step model or stats")
    s = _collapse(c.stats)
    load = s["ids"].sum(("device", "sc"))                                  # (stack, partition)
    for stack in load["stack"].values:
        row = load.sel(stack=stack).values.astype(float)
        mean = row.mean()
        if mean > 0 and row.max() > c.t.skew_ratio * mean:
            c.add(id="partition_skew", title=f"Partition skew in stack {stack!r}", severity="warning",
                  evidence={"max_partition_ids": int(row.max()), "mean_partition_ids": float(mean),
                            "ratio": float(row.max() / mean), "hot_partition": int(row.argmax())},
                  fix="spread hot ids (shuffle during mini-batching, stacking rotation, re-hashing)",
                  flags=("rotation (plan_stacking)", "max_ids_per_partition"), stack=str(stack),
                  gain_basis="no step model: time not estimated")


def _check_stacking(c: _Ctx):
    plan = c.plan or (c.model._inputs.get("plan") if c.model is not None else None)
    if plan is None:
        c.skip("too_few_stacked_tables", "needs a stacking plan")
        c.skip("too_many_stacked_tables", "needs a stacking plan")
        return
    groups: dict[tuple, list] = {}
    for st in plan.stacks:
        groups.setdefault((st.embedding_dim, st.optimizer, st.combiner), []).append(st)
    m = c.model
    for key, stacks in groups.items():
        small = [st for st in stacks if len(st.tables) < c.t.min_tables_per_stack]
        if len(small) < 2:
            continue
        k = len(small)
        gain, basis = None, "no step model: time not estimated"
        if m is not None:
            from scwork.pipeline.phase_costs import _Ici

            ici = _Ici(m.topology, m.chip, m.params)
            latency = ici.time(1e-9) if ici.N > 1 else 0.0
            gain = (k - 1) * 2 * (m.params.sc_op_overhead_s + latency)
            basis = (f"{k} stacks -> 1 saves {k - 1} SparseCore op overheads (sc_op_overhead_s) and {k - 1} "
                     "all-to-all latencies per direction; the bandwidth terms do not change")
            if not c.worth(gain):
                continue
        names = [st.name for st in small]
        c.add(id="too_few_stacked_tables",
              title=f"{k} compatible stacks hold fewer than {c.t.min_tables_per_stack} tables each",
              severity="info",
              evidence={"stacks": names, "tables_per_stack": [len(st.tables) for st in small],
                        "embedding_dim": key[0], "optimizer": key[1], "combiner": key[2]},
              fix=(f"stack them together (plan_stacking(stacking=[[...tables of {names}...]]) or 'auto' with a "
                   "larger activation_mem_bytes_limit); [sc-guide] §10 recommends 5 to 100 tables per stack"),
              flags=("disable_table_stacking", "stacking", "activation_mem_bytes_limit"), gain_s=gain,
              gain_basis=basis)
    for st in plan.stacks:
        if len(st.tables) > c.t.max_tables_per_stack:
            ev = {"tables": len(st.tables), "rows": st.vocab_size, "features": len(st.features)}
            gain_bytes, basis = None, "not estimated"
            if c.memory is not None and st.name in c.memory.spmem.stacks:
                row = list(c.memory.spmem.stacks).index(st.name)
                ev["spmem_bytes_per_tile"] = int(c.memory.spmem.total[row])
                gain_bytes = None
                basis = "SPMEM of the stack from the memory report (splitting divides it)"
            c.add(id="too_many_stacked_tables", title=f"Stack {st.name!r} holds {len(st.tables)} tables",
                  severity="warning", evidence=ev, stack=st.name,
                  fix="split it into stacks of at most 100 tables (manual groups or a smaller "
                      "activation_mem_bytes_limit); huge logical tables hit resource limits",
                  flags=("stacking", "activation_mem_bytes_limit"), gain_bytes=gain_bytes, gain_basis=basis)


def _check_precision(c: _Ctx):
    m = c.model
    plan = c.plan or (m._inputs.get("plan") if m is not None else None)
    if m is None and plan is None:
        return c.skip("fp32_where_lower_precision_would_do", "needs a step model or a plan")
    if m is not None:
        f32 = [s.name for s in m._stacks if s.dtype == "f32"]
    elif c.dtype is None and c.memory is not None:
        f32 = [st.name for st in c.memory.model.stacks if st.dtype == "f32"]
    else:
        dt = c.dtype or "f32"
        f32 = [st.name for st in plan.stacks if (dt.get(st.name, "f32") if isinstance(dt, Mapping) else dt) == "f32"]
    if not f32:
        return
    gain = None
    basis = []
    if m is not None:
        current = {s.name: s.dtype for s in m._stacks}
        what = m.replace(dtype={**current, **{s: "bf16" for s in f32}})
        gain = m.step_time - what.step_time
        basis.append("step model re-run with bf16 tables (rows of 16 elements per 32-byte granule, 16-lane SIMD "
                     "where the chip has it)")
        if not gain > 0:
            # bf16 does not shorten this step (another resource bounds it): no time gain to offer.
            basis[-1] += f": no time gain (step time {_fmt_s(m.step_time)} -> {_fmt_s(what.step_time)})"
            gain = None
    saved_bf16 = saved_s8 = None
    if plan is not None:
        from scwork.quant import hbm_savings

        tables = [t.table for st in plan.stacks if st.name in f32 for t in st.tables]
        bf = hbm_savings(tables, topology=plan.topology, to_dtype="bf16")
        s8 = hbm_savings(tables, topology=plan.topology, to_dtype="s8")
        chips = plan.topology.num_chips
        saved_bf16 = bf["saved_bytes"] // chips
        saved_s8 = s8["saved_bytes"] // chips
        basis.append("scwork.quant.hbm_savings (tables only, padded to 32-byte lines) per chip")
    if not (c.worth(gain) or (saved_bf16 or 0) > 0):
        return
    c.add(id="fp32_where_lower_precision_would_do", title=f"{len(f32)} stack(s) stored and gathered in FP32",
          severity="info",
          evidence={"f32_stacks": f32, "step_gain_bf16_s": gain, "table_bytes_saved_bf16_per_chip": saved_bf16,
                    "table_bytes_saved_int8_per_chip": saved_s8},
          fix=("try bf16 tables, or int8 with simulated quantization (quantization_config_num_buckets=256, "
               "quantization_config_low/high from scwork.quant.calibrate); check the error with "
               "scwork.quant.sweep / pooled_error_stats first"),
          flags=("dtype", "quantization_config_num_buckets", "quantization_config_low", "quantization_config_high"),
          gain_s=gain, gain_bytes=saved_bf16,
          gain_basis="; ".join(basis))


def _check_bandwidth(c: _Ctx):
    m = c.model
    if m is None:
        return c.skip("hbm_bandwidth_saturation", "needs a step model")
    util = m.utilization()
    busy = m.busy_per_step()
    if busy["sc"] < max(busy["host"], busy["ici"], busy["tc"]) or util["sc"] < c.t.sc_bound_utilization:
        return
    d = m.detail
    sc_total = np.asarray(m.durations["sc_forward"]) + np.asarray(m.durations["sc_backward"])
    u = int(np.argmax(sc_total))
    dma = d["dma_time"].reshape(len(m.stacks), 2, -1)[:, :, u].sum()
    vec = d["vector_time"].reshape(len(m.stacks), 2, -1)[:, :, u].sum()
    if dma < vec:
        return
    T = m.chip.tiles_per_sparsecore
    moved = float(d["dma_bytes"].reshape(len(m.stacks), 2, -1)[:, :, u].sum() * T)
    from scwork.pipeline.params import DTYPE_SIZES

    eff = {s.name: round(s.dim * DTYPE_SIZES[s.dtype] / (int(g) * m.chip.dma_granule_bytes), 3)
           for s, g in zip(m._stacks, d["row_granules"])}
    gain = m.step_time - m.step_time_with(scale={"sc_forward": 0.5, "sc_backward": 0.5})
    if not c.worth(gain):
        return
    narrow = [k for k, v in eff.items() if v < 0.5]
    c.add(id="hbm_bandwidth_saturation", title="SparseCore HBM traffic bounds the step", severity="warning",
          evidence={"sc_busy_per_step_s": busy["sc"], "sc_utilization": util["sc"], "dma_s": float(dma),
                    "vector_s": float(vec), "bytes_moved_by_busiest_sc": moved,
                    "row_gather_efficiency": eff},
          fix=("more chips (fewer ids per SparseCore), fewer lookups per sample, wider features instead of many "
               "narrow ones" + (f"; narrow stacks {narrow} move mostly padding (32-byte granules)" if narrow else "")),
          flags=("num_chips", "embedding_dim", "valency"), gain_s=gain,
          gain_basis="step model with SparseCore phases halved (twice the chips at the same global batch halves "
                     "the ids per SparseCore; other phases unchanged)")


def _check_memory(c: _Ctx):
    r = c.memory
    if r is None:
        for check in ("spmem_overflow", "hbm_stack_overflow", "hbm_heap_exhaustion"):
            c.skip(check, "needs a memory report (scwork.memory.plan)")
        return
    for f in r.diagnoses:
        if f.severity == "error" and f.resource == "spmem":
            ev = dict(f.evidence)
            gain_bytes = None
            if f.stack in r.spmem.stacks:
                row = list(r.spmem.stacks).index(f.stack)
                gain_bytes = int(r.spmem.total[row] - r.spmem.capacity)
                ev["spmem_bytes_per_tile"] = int(r.spmem.total[row])
            c.add(id="spmem_overflow", title=f"Stack {f.stack!r} does not fit in TileSpmem", severity="error",
                  evidence={"memory_code": f.code, **ev}, stack=f.stack,
                  fix="; ".join(str(x) for x in f.fixes) or f.message,
                  flags=tuple(dict.fromkeys(x.flag or x.parameter for x in f.fixes)),
                  gain_bytes=gain_bytes, gain_basis="bytes per tile over the TileSpmem capacity (memory model)"
                  if gain_bytes is not None else "memory model: " + f.message[:120])
    oom = [f for f in r.diagnoses if f.code == "hbm_out_of_memory"]
    if not oom:
        return
    f = oom[0]
    at_peak = r.timeline.category_bytes_at_peak()
    stack_b = at_peak.get("sc_forward_stack", 0) + at_peak.get("sc_backward_stack", 0)
    heap_b = at_peak.get("dense_weights", 0) + at_peak.get("constants", 0) + at_peak.get("prefetch", 0)
    over = int(r.peak_hbm_bytes - r.usable_hbm_bytes)
    fixes = {x.parameter: x for x in f.fixes}
    common = {"peak_bytes": r.peak_hbm_bytes, "usable_bytes": r.usable_hbm_bytes, "over_bytes": over,
              "hbm_stack_bytes_at_peak": stack_b, "heap_bytes_at_peak": heap_b,
              "peak_event": r.timeline.peak_event.name}
    if stack_b >= heap_b or "num_serialized_tables" in fixes:
        ev = dict(common)
        fix_text = "serialize the largest stacks"
        cost = None
        if "num_serialized_tables" in fixes and fixes["num_serialized_tables"].value is not None:
            n = int(fixes["num_serialized_tables"].value)
            fix_text = f"set {FLAG_SERIALIZE}={n} (serialize the {n} stacks with the largest HBM stack)"
            ev["num_serialized_tables"] = n
            if c.model is not None:
                cost = c.model.replace(num_serialized_tables=n).step_time - c.model.step_time
                ev["time_cost_s"] = cost
        fix_text += "; or lower max_unique_ids_per_partition of the largest stacks (the stack is proportional)"
        c.add(id="hbm_stack_overflow", title="HBM stack overflow: the step's HBM peak does not fit",
              severity="error", evidence=ev, fix=fix_text,
              flags=(FLAG_SERIALIZE, "max_unique_ids_per_partition"), gain_bytes=over,
              gain_basis="bytes to free at the HBM peak (memory model)"
                         + ("; time cost of serializing from the step model" if cost is not None else ""))
    if heap_b > stack_b or "maximum_parallel_iterations" in fixes:
        ev = dict(common)
        ev.update({k: at_peak.get(k, 0) for k in ("dense_weights", "constants", "prefetch")})
        fix_text = "shrink the heap: fewer prefetched input steps, smaller dense weights or constants"
        if "maximum_parallel_iterations" in fixes and fixes["maximum_parallel_iterations"].value is not None:
            fix_text = (f"set {FLAG_PREFETCH}={fixes['maximum_parallel_iterations'].value}; " + fix_text)
        c.add(id="hbm_heap_exhaustion", title="HBM heap exhaustion: dense weights, constants or prefetch",
              severity="error", evidence=ev, fix=fix_text, flags=(FLAG_PREFETCH, "dense_weights_bytes"),
              gain_bytes=over, gain_basis="bytes to free at the HBM peak (memory model)")


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
                memory = memory_plan(plan, plan.topology, batch_size=int(bs), stats=_collapse(stats)
                                     if stats is not None else None, config=config, **kw)
            except (ScworkError, ValueError) as err:
                skipped_memory = f"memory model failed: {err}"
    ctx = _Ctx(config, plan, stats, memory, model, minibatch, thresholds, batch_size, dtype)
    for check in (_check_memory, _check_host, _check_pipelining, _check_limits_low, _check_limits_high,
                  _check_skew, _check_stacking, _check_precision, _check_bandwidth):
        check(ctx)
    if skipped_memory:
        for check in ("spmem_overflow", "hbm_stack_overflow", "hbm_heap_exhaustion"):
            ctx.skipped[check] = skipped_memory
    rank = {s: i for i, s in enumerate(SEVERITIES)}

    def key(f: Finding):
        blocking = 0 if f.severity == "error" else 1
        return (blocking, -(f.gain_s or 0.0), -(f.gain_bytes or 0), rank[f.severity], CHECKS.index(f.id))

    return Advice(sorted(ctx.findings, key=key), ctx.skipped, ctx.step)
