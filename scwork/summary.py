"""One table for a sharding plan, in the spirit of TorchRec's planner summary ([torchrec]).

TorchRec's ``EmbeddingShardingPlanner`` prints, per rank, the memory each rank uses
against its capacity, the shards and the estimated cost, so a user sees at once
whether a plan fits and where it is unbalanced. :func:`plan_summary` gives the same
view of a SparseCore plan from scwork's own engine objects:

- per chip: HBM at the step's peak against the chip's HBM, the fullest SparseCore
  tile's SPMEM against its capacity (both from :func:`scwork.memory.plan`; the model is
  the same on every chip, tables being mod-sharded evenly), and, when statistics of
  real ids are given, the ids the chip's partitions receive and that load against the
  mean chip;
- per partition: ``imbalance = max / mean`` of the ids each partition receives (summed
  over stacks and source SparseCores) and the Kullback-Leibler divergence of that load
  from the uniform one, ``KL = sum_p q_p log2(q_p * P)`` in bits (0 when every
  partition gets the same share; ``log2 P`` when one partition gets everything);
- per stack: the limits in force against the largest observed counts, and whether
  the batch fits them;
- the critical path of the step (:func:`scwork.pipeline.step_model`): the phases of the
  sequential step with their times, the pipelined step time and its bottleneck.

Examples
--------
>>> import scwork
>>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats
>>> from scwork.summary import plan_summary
>>> topo = scwork.Topology.for_chip("v5p", num_chips=2)
>>> features = [FeatureSpec("f", TableSpec("t", 4096, 16, max_ids_per_partition=256,
...                                        max_unique_ids_per_partition=256))]
>>> batch = FeatureBatch.from_ragged(scwork.datasets.synthetic(256, features=["f"], vocab_size=4096,
...                                                            seed=0).step(0))
>>> s = plan_summary(features, topo, batch_size=256, stats=compute_stats(batch, features, topo))
>>> s.fits, s.per_chip.sizes["chip"], round(float(s.partition_imbalance), 2) >= 1.0
(True, 2, True)
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from scwork._validate import shown
from scwork.errors import ConfigError

__all__ = ["PlanSummary", "plan_summary"]


@dataclass(frozen=True, eq=False)
class PlanSummary:
    """What :func:`plan_summary` returns; ``str()`` is the table, ``_repr_html_`` the same in HTML."""

    memory: Any
    """The :class:`~scwork.memory.MemoryReport` the memory columns come from."""
    step: Any
    """The :class:`~scwork.pipeline.StepModel` of the critical path, or None."""
    per_chip: Any
    """:class:`xarray.Dataset` with dim ``chip``: HBM, SPMEM and (with ids) load per chip."""
    per_stack: Any
    """:class:`xarray.Dataset` with dim ``stack``: limits in force and observed maxima."""
    partition_imbalance: float | None
    """Max / mean ids received per partition (None without statistics)."""
    partition_divergence_bits: float | None
    """KL divergence of the partition load from uniform, in bits (None without statistics)."""

    @property
    def fits(self) -> bool:
        """The memory model's verdict (SPMEM and HBM) and every stack within its limits."""
        within = bool(np.all(self.per_stack["within_limits"].values)) if "within_limits" in self.per_stack else True
        return bool(self.memory.fits) and within

    @property
    def critical_path(self) -> list[tuple[str, float]]:
        """``(phase, seconds)`` on the critical path of the sequential step, in order.

        The sequential step's steady-state time is the device chain (SparseCore
        forward, ICI, TensorCore forward and backward, ICI, SparseCore backward) when
        the host's preprocessing of the next batch fits under it (it overlaps), or the
        host's time plus the chain when it does not; the path is the phases whose
        times add up to the step time (within 0.1%). Empty without a step model.
        """
        if self.step is None:
            return []
        from scwork.pipeline import PHASES

        times = {p: float(self.step.phase_time[p]) for p in PHASES}
        device = [p for p in PHASES if p != "host"]
        target = float(self.step.sequential_step_time)
        for path in (device, list(PHASES)):
            if abs(sum(times[p] for p in path) - target) <= 1e-3 * max(target, 1e-12):
                return [(p, times[p]) for p in path]
        if times["host"] >= target * (1 - 1e-3):
            return [("host", times["host"])]
        return [(p, times[p]) for p in PHASES]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per chip, the table's rows."""
        pc = self.per_chip
        out = []
        for i, chip in enumerate(pc["chip"].values.tolist()):
            row = {"chip": chip,
                   "hbm (peak / usable)": f"{_size(pc['hbm_peak_bytes'].values[i])} / "
                                          f"{_size(pc['hbm_usable_bytes'].values[i])}"
                                          f" ({100 * float(pc['hbm_utilization'].values[i]):.0f}%)",
                   "spmem per tile": f"{_size(pc['spmem_worst_tile_bytes'].values[i])} / "
                                     f"{_size(pc['spmem_capacity_bytes'].values[i])}"
                                     f" ({100 * float(pc['spmem_utilization'].values[i]):.0f}%)"}
            if "ids_received" in pc:
                row["ids received"] = f"{int(pc['ids_received'].values[i]):,}"
                row["load / mean chip"] = f"{float(pc['load_vs_mean'].values[i]):.2f}"
            out.append(row)
        return out

    def __str__(self) -> str:
        lines = []
        rows = self.rows()
        header = list(rows[0]) if rows else []
        widths = [max(len(h), *(len(str(r[h])) for r in rows)) for h in header]
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        lines.append("  ".join("-" * w for w in widths))
        for r in rows:
            lines.append("  ".join(str(r[h]).ljust(w) for h, w in zip(header, widths)))
        if rows:
            capacity, usable = (int(self.per_chip[name].values[0])
                                for name in ("hbm_capacity_bytes", "hbm_usable_bytes"))
            lines.append(f"usable HBM: {_size(usable)} = the chip's {_size(capacity)} less the "
                         f"{1 - usable / capacity:.0%} headroom kept free (as scwork memory counts it)")
        if self.partition_imbalance is not None:
            lines.append(f"partitions: imbalance (max / mean ids) {self.partition_imbalance:.2f}, "
                         f"divergence from uniform {self.partition_divergence_bits:.3f} bits")
        ps = self.per_stack
        lines.append("stacks: " + "; ".join(
            f"{name} limits {_limit(ps['max_ids_per_partition'].values[i])}/"
            f"{_limit(ps['max_unique_ids_per_partition'].values[i])}"
            + (f", observed {int(ps['observed_max_ids'].values[i])}/{int(ps['observed_max_unique_ids'].values[i])}"
               f" ({'ok' if ps['within_limits'].values[i] else 'OVER'})" if "observed_max_ids" in ps else "")
            for i, name in enumerate(ps["stack"].values.tolist())))
        if self.step is not None:
            path = self.critical_path
            shown = " -> ".join(f"{p} {_time(t)}" for p, t in path if t > 0)
            overlapped = "" if any(p == "host" for p, _ in path) else \
                f" (host {_time(self.step.phase_time['host'])} overlaps with the previous step)"
            lines.append(f"critical path (sequential step {_time(self.step.sequential_step_time)}): {shown}"
                         f"{overlapped}")
            lines.append(f"pipelined step {_time(self.step.pipelined_step_time)}, bottleneck {self.step.bottleneck}")
        lines.append("fits" if self.fits else "DOES NOT FIT")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = self.rows()
        header = list(rows[0]) if rows else []
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[h]))}</td>" for h in header) + "</tr>"
                       for r in rows)
        notes = "".join(f"<div>{html.escape(line)}</div>" for line in str(self).splitlines()[len(rows) + 2:])
        return f"<div><table><tr>{head}</tr>{body}</table>{notes}</div>"

    def __repr__(self) -> str:
        chips, stacks = self.per_chip.sizes['chip'], self.per_stack.sizes['stack']
        return (f"PlanSummary({chips} {'chip' if chips == 1 else 'chips'}, "
                f"{stacks} {'stack' if stacks == 1 else 'stacks'}, "
                f"{'fits' if self.fits else 'does not fit'})")


def _limit(value) -> str:
    return "none" if value is None or int(value) < 0 else str(int(value))


def _size(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


def _check_stats(stats: Any) -> None:
    """The variables plan_summary reads, with the dims and whole counts compute_stats gives them."""
    import xarray as xr

    if not isinstance(stats, xr.Dataset):
        raise ConfigError(f"plan_summary: stats must be the xarray.Dataset of compute_stats, got {shown(stats)}")
    needed = {"ids": ("stack", "device", "sc", "partition"), "max_ids_per_partition": ("stack", "device", "partition"),
              "max_unique_ids_per_partition": ("stack", "device", "partition")}
    for name, dims in needed.items():
        if name not in stats or "stack" not in stats.coords:
            raise ConfigError(f"plan_summary: stats has no {name!r} (or no stack coordinate); pass the output of "
                              "scwork.sharding.compute_stats")
        var = stats[name]
        if set(var.dims) != set(dims):
            raise ConfigError(f"plan_summary: stats[{name!r}] has dims {var.dims}, compute_stats gives {dims}")
        values = np.asarray(var.values)
        if values.dtype.kind not in "iu" and not (values.dtype.kind == "f" and np.isfinite(values).all()
                                                 and (values == np.floor(values)).all()):
            raise ConfigError(f"plan_summary: stats[{name!r}] must hold whole counts, got {values.dtype} values")
        if values.size and (values.min() < 0 or values.max() > 2.0**62):
            raise ConfigError(f"plan_summary: stats[{name!r}] must hold counts between 0 and 2**62")


def _add_observed_load(stats: Any, names: list, topology: Any, C: int, per_chip: dict, per_stack: dict):
    """Add the ids received per chip and the observed counts per stack; return the partition imbalance and divergence.

    ``imbalance`` is max / mean of the ids per partition, ``divergence`` the KL
    divergence in bits of their distribution from uniform.
    """
    sel = stats.sel(stack=names)
    received = sel["ids"].sum(dim=("stack", "device", "sc")).values.astype(np.float64)   # per partition
    P = received.size
    if P != topology.num_partitions:
        raise ConfigError(f"stats has {P} partitions, the topology {topology.num_partitions}; compute the "
                          "statistics on this topology")
    chip_of_partition = (np.arange(P) // topology.sparsecores_per_device) // topology.devices_per_chip
    per_chip_ids = np.bincount(chip_of_partition, weights=received, minlength=C)
    mean_chip = per_chip_ids.mean() if C else 0.0
    per_chip["ids_received"] = ("chip", per_chip_ids.astype(np.int64),
                                {"long_name": "ids the chip's partitions receive (all stacks)", "units": "ids"})
    per_chip["load_vs_mean"] = ("chip", per_chip_ids / mean_chip if mean_chip > 0 else np.ones(C),
                                {"long_name": "ids received / mean over chips", "units": "1"})
    total = received.sum()
    if total > 0:
        imbalance = float(received.max() / received.mean())
        q = received / total
        nz = q > 0
        divergence = float(np.sum(q[nz] * np.log2(q[nz] * P)))
    else:
        imbalance, divergence = 1.0, 0.0
    observed_ids = sel["max_ids_per_partition"].max(dim=("device", "partition")).values
    observed_unique = sel["max_unique_ids_per_partition"].max(dim=("device", "partition")).values
    limit_ids = per_stack["max_ids_per_partition"][1]
    limit_unique = per_stack["max_unique_ids_per_partition"][1]
    within = (((limit_ids < 0) | (observed_ids <= limit_ids))
              & ((limit_unique < 0) | (observed_unique <= limit_unique)))
    per_stack["observed_max_ids"] = ("stack", observed_ids.astype(np.int64),
                                     {"long_name": "largest ids per (source SC, partition)", "units": "ids"})
    per_stack["observed_max_unique_ids"] = ("stack", observed_unique.astype(np.int64),
                                            {"long_name": "largest distinct ids per (source SC, partition)",
                                             "units": "ids"})
    per_stack["within_limits"] = ("stack", within, {"long_name": "observed counts within the limits",
                                                    "units": ""})
    return imbalance, divergence


def plan_summary(features: Any, topology: Any, *, batch_size: int, stats: Any = None, stacking: Any = "auto",
                 config: Any = None, tc_forward_s: float | None = None, tc_backward_s: float | None = None,
                 **memory_kwargs: Any) -> PlanSummary:
    """Per chip memory and load, partition imbalance, per stack limits and the step's critical path.

    Parameters
    ----------
    features : sequence or mapping of FeatureSpec
    topology : scwork.Topology
        A catalog chip's topology (the memory model needs its HBM and SPMEM).
    batch_size : int
        Global batch (samples per feature).
    stats : xarray.Dataset, optional
        :func:`~scwork.sharding.compute_stats` (or ``preprocess(...).stats``) of real ids
        on the same plan: gives the load columns, the imbalance and the observed limits.
    stacking, config
        As :func:`~scwork.sharding.plan_stacking` / :func:`scwork.memory.plan`.
    tc_forward_s, tc_backward_s : float, optional
        TensorCore times per step, for the critical path (default 0: the embedding
        part of the step alone).
    **memory_kwargs
        Passed to :func:`scwork.memory.plan` (``dtype``, ``num_serialized_tables``...).

    Returns
    -------
    PlanSummary
    """
    import inspect

    import xarray as xr

    from scwork import memory
    from scwork.hardware.topology import Topology
    from scwork.sharding import plan_stacking

    # Keywords go on to memory.plan: name the unknown ones here, so the error says plan_summary.
    known = set(inspect.signature(memory.plan).parameters) - {"model", "topology", "batch_size", "stacking",
                                                             "config", "stats"}
    unknown = sorted(set(memory_kwargs) - known)
    if unknown:
        raise ConfigError(f"plan_summary() got unknown keyword {unknown[0]!r}; it takes features, topology, "
                          f"batch_size, stats, stacking, config, tc_forward_s, tc_backward_s and the keywords of "
                          f"scwork.memory.plan ({', '.join(sorted(known))})")
    if not isinstance(topology, Topology):
        raise ConfigError(f"plan_summary: topology must be a scwork.Topology, got {shown(topology)}")
    for name, value in (("tc_forward_s", tc_forward_s), ("tc_backward_s", tc_backward_s)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, np.integer,
                                                                                   np.floating))
                                  or not math.isfinite(value) or value < 0):
            raise ConfigError(f"plan_summary: {name} must be a finite number of seconds >= 0, got {shown(value)}")
    if stats is not None:
        _check_stats(stats)

    plan = plan_stacking(features, topology, stacking, batch_size=batch_size, config=config,
                         stack_limits=memory_kwargs.pop("stack_limits", None))
    report = memory.plan(plan, topology, batch_size=batch_size, config=config, stats=stats, **memory_kwargs)
    names = [st.name for st in plan.stacks]
    if stats is not None:
        missing = sorted(set(names) - {str(n) for n in stats["stack"].values})
        if missing:
            raise ConfigError(f"stats has no stack {missing[0]!r} of this plan (its stacks: "
                              f"{[str(n) for n in stats['stack'].values]}); compute them on the same plan")
    C = topology.num_chips
    summary = report.summary()
    spm = report.spmem
    chip_names = np.arange(C)
    per_chip = {
        "hbm_peak_bytes": ("chip", np.full(C, int(summary["peak_hbm_bytes"]), np.int64),
                           {"long_name": "HBM at the step's peak", "units": "bytes"}),
        "hbm_capacity_bytes": ("chip", np.full(C, int(summary["hbm_bytes"]), np.int64),
                               {"long_name": "HBM of the chip", "units": "bytes"}),
        # One definition of usable HBM with `scwork memory` and scwork.memory: the chip's HBM less
        # the share kept free (headroom, 10% unless given); the verdict compares the peak with it.
        "hbm_usable_bytes": ("chip", np.full(C, int(summary["usable_hbm_bytes"]), np.int64),
                             {"long_name": f"usable HBM: HBM of the chip less the {report.knobs.headroom:.0%} "
                                           "headroom kept free", "units": "bytes"}),
        "hbm_utilization": ("chip", np.full(C, float(summary["peak_hbm_bytes"] / summary["usable_hbm_bytes"])),
                            {"long_name": "HBM at the peak / usable HBM", "units": "1"}),
        "spmem_worst_tile_bytes": ("chip", np.full(C, int(summary["max_spmem_bytes_per_tile"]), np.int64),
                                   {"long_name": f"SPMEM of the fullest tile (stack {summary['max_spmem_stack']})",
                                    "units": "bytes"}),
        "spmem_capacity_bytes": ("chip", np.full(C, int(spm.capacity), np.int64),
                                 {"long_name": "SPMEM of one tile", "units": "bytes"}),
        "spmem_utilization": ("chip", np.full(C, float(summary["max_spmem_utilization"])),
                              {"long_name": "SPMEM of the fullest tile / capacity", "units": "1"}),
    }
    imbalance = divergence = None
    per_stack = {
        "max_ids_per_partition": ("stack", np.array([-1 if st.max_ids_per_partition is None
                                                     else st.max_ids_per_partition for st in plan.stacks], np.int64),
                                  {"long_name": "limit in force (-1: none)", "units": "ids"}),
        "max_unique_ids_per_partition": ("stack", np.array([-1 if st.max_unique_ids_per_partition is None
                                                            else st.max_unique_ids_per_partition
                                                            for st in plan.stacks], np.int64),
                                         {"long_name": "limit in force (-1: none)", "units": "ids"}),
    }
    if stats is not None:
        imbalance, divergence = _add_observed_load(stats, names, topology, C, per_chip, per_stack)

    step = None
    if stats is not None:
        from scwork.pipeline import step_model

        widths = {st.name: st.embedding_dim for st in plan.stacks}
        step = step_model(stats.sel(stack=names), plan, topology=topology, widths=widths,
                          tc_forward_s=float(tc_forward_s or 0.0), tc_backward_s=float(tc_backward_s or 0.0))
    return PlanSummary(
        memory=report, step=step,
        per_chip=xr.Dataset(per_chip, coords={"chip": ("chip", chip_names, {"long_name": "chip index"})},
                            attrs={"note": "the memory model is the same on every chip (tables are mod-sharded "
                                           "evenly); the load columns come from the ids"}),
        per_stack=xr.Dataset(per_stack, coords={"stack": ("stack", np.array(names, dtype=object))}),
        partition_imbalance=imbalance, partition_divergence_bits=divergence)

