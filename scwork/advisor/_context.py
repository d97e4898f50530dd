"""What every check of the advisor reads: the inputs of ``advise`` and views they share."""

from __future__ import annotations

import math

import numpy as np

from scwork._rounding import round_up
from scwork.advisor.findings import Finding


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def round8(x: float) -> int:
    return int(round_up(math.ceil(x), 8))


def collapse(stats, limits: bool = True):
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


def balanced(stats):
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


def observed_limits(stats) -> dict[str, tuple[int, int]]:
    s = collapse(stats)
    ids = s["ids"].max(("device", "sc", "partition"))
    uniq = s["unique_ids"].max(("device", "sc", "partition"))
    return {str(k): (int(i), int(u)) for k, i, u in zip(s["stack"].values, ids.values, uniq.values)}


def configured_limits(stats, plan, config) -> dict[str, tuple[int | None, int | None]]:
    out: dict[str, tuple[int | None, int | None]] = {}
    if plan is not None:
        for st in plan.stacks:
            out[st.name] = (st.max_ids_per_partition, st.max_unique_ids_per_partition)
    if stats is not None and "configured_max_ids_per_partition" in stats:
        s = collapse(stats)
        for k, a, b in zip(s["stack"].values, s["configured_max_ids_per_partition"].values,
                           s["configured_max_unique_ids_per_partition"].values):
            a, b = int(a), int(b)
            prev = out.get(str(k), (None, None))
            out[str(k)] = (a if a >= 0 else prev[0], b if b >= 0 else prev[1])
    return out


# --------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------
class Context:
    """The inputs of one :func:`~scwork.advisor.advise` call, and the findings its checks add."""

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
