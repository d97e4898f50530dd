"""What a plan search returns: every candidate as a Dataset, the front, the best plan.

Every candidate is a row of an xarray Dataset; the library's own plan is kept beside the best one.

- :class:`PlanSearchResult`: ``dataset`` (dim ``candidate``), ``front`` (indices on the
  Pareto front), ``best``, ``baseline`` (the library's default plan at the best
  plan's topology and batch size), ``baselines`` (at each), :meth:`~PlanSearchResult.with_constraints`
  (re-ranks without running the engine again).
- :class:`PlanCandidate`: one plan: its knobs, figures, stacks and limits,
  :meth:`~PlanCandidate.to_jax_tpu_embedding`, :meth:`~PlanCandidate.to_config` and
  :meth:`~PlanCandidate.write_toml` (a config :func:`scwork.config.load_config` reads
  back to the same plan), :meth:`~PlanCandidate.diff` against another plan.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from scwork.errors import ConfigError, InternalError, NoFeasiblePlanError
from scwork.plan._groupings import label
from scwork.plan.constraints import LIBRARY_LIMIT_RULE, Constraints

__all__ = ["PlanSearchResult", "PlanCandidate", "constraint_failures", "objective_value", "pareto_front",
           "no_feasible_error", "to_toml"]


def objective_value(rec, objective: str) -> float:
    """The figure ``objective`` names, for one evaluated candidate (lower is better)."""
    if objective == "step_time":
        return rec.step_time_s
    if objective == "time_per_sample":
        return rec.step_time_s / rec.context.batch_size
    if objective == "peak_hbm":
        return float(rec.peak_hbm_bytes)
    return rec.drop_rate


def constraint_failures(rec, constraints: Constraints) -> list[str]:
    """Names of the constraints one evaluated candidate fails."""
    out = []
    if constraints.fits_memory and not rec.fits_spmem:
        out.append("fits_spmem")
    if constraints.fits_memory and not rec.fits_hbm:
        out.append("fits_hbm")
    if rec.drop_rate > constraints.max_drop_rate:
        out.append("max_drop_rate")
    if constraints.max_step_time_s is not None and not rec.step_time_s <= constraints.max_step_time_s:
        out.append("max_step_time_s")
    if constraints.max_peak_hbm_bytes is not None and rec.peak_hbm_bytes > constraints.max_peak_hbm_bytes:
        out.append("max_peak_hbm_bytes")
    if constraints.max_spmem_bytes_per_tile is not None \
            and rec.max_spmem_bytes_per_tile > constraints.max_spmem_bytes_per_tile:
        out.append("max_spmem_bytes_per_tile")
    return out


def pareto_front(points: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of ``points`` (n, k) that no other row dominates (all objectives minimised).

    A row dominates another when it is no worse in every column and better in one;
    equal rows do not dominate each other (both stay on the front).

    Examples
    --------
    >>> pareto_front(np.array([[1, 2], [2, 1], [2, 2], [1, 2]])).tolist()
    [True, True, False, True]
    """
    try:
        points = np.asarray(points, dtype=float)
    except (TypeError, ValueError) as error:       # ragged lists, texts, complex numbers
        raise ConfigError(f"points must be an (n, k) array of numbers: {error}") from None
    if points.ndim != 2 or np.isnan(points).any():
        raise ConfigError(f"points must be an (n, k) array of numbers without NaN, got shape {points.shape}")
    n = points.shape[0]
    keep = np.ones(n, bool)
    for i in range(n):
        le = (points <= points[i]).all(axis=1)
        lt = (points < points[i]).any(axis=1)
        if (le & lt).any():
            keep[i] = False
    return keep


def _is_default(rec) -> bool:
    return rec.grouping == "auto" and rec.rule == LIBRARY_LIMIT_RULE and not rec.static_buffer \
        and not rec.minibatching


class PlanCandidate:
    """One evaluated plan of a search (get it from :class:`PlanSearchResult`).

    Attributes
    ----------
    index : int
        Its ``candidate`` coordinate in the result's dataset.
    knobs : dict
        ``chip``, ``num_chips``, ``topology``, ``per_chip_batch``, ``batch_size``,
        ``stacking``, ``limit_rule``, ``static_buffer``, ``minibatching``.
    metrics : dict
        ``step_time_s``, ``time_per_sample_s``, ``peak_hbm_bytes``, ``usable_hbm_bytes``,
        ``max_spmem_bytes_per_tile``, ``tile_spmem_bytes``, ``drop_rate``,
        ``dropped_ids``, ``held_out_ids``, ``max_minibatches``, ``feasible``.
    plan : StackingPlan
        The stacks with the limits and static buffers the plan sets.
    features : tuple of FeatureSpec
        The model's features (tables without their own limits: the plan's stacks set them).
    """

    def __init__(self, index: int, record, features, feasible: bool, allow_id_dropping: bool,
                 memory_kwargs: Mapping[str, Any] | None = None):
        self.index = index
        self._memory_kwargs = dict(memory_kwargs or {})
        self._record = record
        self.plan = record.plan
        self.features = tuple(features)
        self.topology = record.context.topology
        self.batch_size = record.context.batch_size
        self.allow_id_dropping = allow_id_dropping
        topo = self.topology
        self.knobs = {
            "chip": topo.chip or "", "num_chips": topo.num_chips, "topology": str(topo),
            "per_chip_batch": record.context.per_chip_batch, "batch_size": record.context.batch_size,
            "stacking": label(record.grouping), "limit_rule": record.rule.name,
            "static_buffer": record.static_buffer, "minibatching": record.minibatching,
        }
        self.metrics = {
            "step_time_s": record.step_time_s, "time_per_sample_s": record.step_time_s / record.context.batch_size,
            "peak_hbm_bytes": record.peak_hbm_bytes, "usable_hbm_bytes": record.usable_hbm_bytes,
            "max_spmem_bytes_per_tile": record.max_spmem_bytes_per_tile,
            "tile_spmem_bytes": record.tile_spmem_bytes, "drop_rate": record.drop_rate,
            "dropped_ids": record.dropped_ids, "held_out_ids": record.held_out_ids,
            "max_minibatches": record.max_minibatches, "feasible": bool(feasible),
        }
        self.step_breakdown = dict(record.step_breakdown)
        self.minibatches = dict(record.minibatches)
        self.memory_errors = tuple(record.memory_errors)

    @property
    def is_default(self) -> bool:
        """True for the library's default plan (automatic stacking, FDO limits, no static buffer or mini-batching)."""
        return _is_default(self._record)

    def stacks(self) -> list[dict[str, Any]]:
        """Per stack: name, tables, features, width, limits, static buffer and mini-batches."""
        return [{"stack": st.name, "tables": list(st.table_names), "features": [f.name for f in st.features],
                 "embedding_dim": st.embedding_dim, "max_ids_per_partition": st.max_ids_per_partition,
                 "max_unique_ids_per_partition": st.max_unique_ids_per_partition,
                 "suggested_coo_buffer_size_per_device": st.suggested_coo_buffer_size_per_device,
                 "minibatches": self.minibatches.get(st.name, 1)} for st in self.plan.stacks]

    def memory(self, **kwargs: Any):
        """:func:`scwork.memory.plan` of this plan as the search evaluated it (a :class:`~scwork.memory.MemoryReport`).

        ``kwargs`` override the search's ``memory_kwargs``.
        """
        from scwork.memory import plan as memory_plan
        from scwork.sharding.specs import SparsecoreConfig

        config = SparsecoreConfig(allow_id_dropping=self.allow_id_dropping, max_ids_per_chip_per_sample=None)
        return memory_plan(self.plan, self.topology, **{"batch_size": self.batch_size, "config": config,
                                                        **self._memory_kwargs, **kwargs})

    def diff(self, other: PlanCandidate) -> dict[str, tuple[Any, Any]]:
        """What differs from ``other``: knobs, figures and per-stack limits, as ``{name: (this, other)}``."""
        out = {}
        for k in self.knobs:
            if self.knobs[k] != other.knobs[k]:
                out[k] = (self.knobs[k], other.knobs[k])
        for k in self.metrics:
            if self.metrics[k] != other.metrics[k]:
                out[k] = (self.metrics[k], other.metrics[k])
        mine = {s["stack"]: s for s in self.stacks()}
        theirs = {s["stack"]: s for s in other.stacks()}
        for name in sorted(set(mine) | set(theirs)):
            a, b = mine.get(name), theirs.get(name)
            if a is None or b is None:
                out[f"stack {name}"] = ("present" if a else "absent", "present" if b else "absent")
                continue
            for k in ("max_ids_per_partition", "max_unique_ids_per_partition",
                      "suggested_coo_buffer_size_per_device", "minibatches"):
                if a[k] != b[k]:
                    out[f"{name}.{k}"] = (a[k], b[k])
        return out

    def to_jax_tpu_embedding(self, **kwargs: Any):
        """The library's FeatureSpecs for this plan (:func:`scwork.interop.jax_tpu_embedding.to_jax_tpu_embedding`).

        Needs jax-tpu-embedding (the ``interop`` extra). Every stack gets the plan's
        limits and static buffer; ``kwargs`` go to that function.
        """
        from scwork.interop.jax_tpu_embedding import to_jax_tpu_embedding

        return to_jax_tpu_embedding(list(self.features), self.plan, batch_size=self.batch_size, **kwargs)

    def to_config(self, *, memory: Any = None, columns: Mapping[str, str] | None = None,
                  ids_per_sample: Mapping[str, float] | None = None, source: str = "<plan>"):
        """This plan as a :class:`scwork.config.ModelConfig` (stacking groups, ``[stacks]`` limits and buffers).

        ``memory`` (:class:`scwork.config.MemoryOptions`), ``columns`` and
        ``ids_per_sample`` carry over from the config the search started from.
        """
        from scwork.config import MemoryOptions, ModelConfig
        from scwork.sharding.specs import SparsecoreConfig

        tables = tuple({f.table.name: f.table for f in self.features}.values())
        grouping = self._record.grouping
        if grouping == "auto":
            # Every automatic group written out, single tables included: listed single
            # tables are stacked as the library's auto_stack_tables stacks them.
            stacking: Any = tuple(tuple(st.table_names) for st in self.plan.stacks)
        else:
            stacking = tuple(tuple(g) for g in grouping) or None
        stacks = {}
        for st in self.plan.stacks:
            entry = {"max_ids_per_partition": st.max_ids_per_partition,
                     "max_unique_ids_per_partition": st.max_unique_ids_per_partition,
                     "suggested_coo_buffer_size_per_device": st.suggested_coo_buffer_size_per_device}
            stacks[st.name] = {k: v for k, v in entry.items() if v is not None}
        return ModelConfig(source=source, tables=tables, features=self.features, topology=self.topology,
                           # TOML has no null, so the TensorFlow-only per-chip cap keeps its
                           # default here; jax-tpu-embedding, which the search models, has none.
                           sparsecore_config=SparsecoreConfig(allow_id_dropping=self.allow_id_dropping),
                           batch_size=self.batch_size, stacking=stacking,
                           memory=memory if memory is not None else MemoryOptions(), stacks=stacks,
                           columns=dict(columns or {}), ids_per_sample=dict(ids_per_sample or {}))

    def write_toml(self, path: str | os.PathLike, *, memory: Any = None, columns: Mapping[str, str] | None = None,
                   ids_per_sample: Mapping[str, float] | None = None) -> Path:
        """Write :meth:`to_config` as a TOML config file, all or nothing (a temporary file renamed).

        The file is checked by reading it back before it replaces ``path``: its
        ``stacking_plan()`` must equal this plan.
        """
        path = Path(path)
        if path.suffix.lower() != ".toml":
            raise ConfigError(f"{path}: a plan is written as TOML. How to fix: name the file .toml")
        cfg = self.to_config(memory=memory, columns=columns, ids_per_sample=ids_per_sample)
        text = self.toml_header() + to_toml(cfg.to_dict())
        from scwork.config import parse_config

        back = parse_config(__import__("tomllib").loads(text), source=str(path), base_dir=path.parent)
        if not same_plan(back.stacking_plan(), self.plan):
            raise InternalError(f"{path}: the config written for candidate #{self.index} reads back to a different "
                                "plan than the one searched (scwork.plan.result.PlanCandidate.write_toml)")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path

    def toml_header(self) -> str:
        """Comment lines saying what the search found (the knobs a config does not hold)."""
        m = self.metrics
        return (f"# scwork plan: candidate #{self.index} ({'the library default' if self.is_default else 'searched'})\n"
                f"# {self.knobs['topology']}, {self.knobs['per_chip_batch']} samples per chip, stacking "
                f"{self.knobs['stacking']}, limits {self.knobs['limit_rule']}, static buffer "
                f"{'on' if self.knobs['static_buffer'] else 'off'}\n"
                f"# mini-batching: {'on (enable it in the input pipeline)' if self.knobs['minibatching'] else 'off'}\n"
                f"# modelled step {m['step_time_s'] * 1e3:.3f} ms, peak HBM {m['peak_hbm_bytes'] / 2**30:.2f} GiB, "
                f"held-out drop rate {m['drop_rate']:.3g}\n\n")

    def __repr__(self) -> str:
        m = self.metrics
        return (f"PlanCandidate(#{self.index}: {self.knobs['topology']}, {self.knobs['per_chip_batch']}/chip, "
                f"stacking {self.knobs['stacking']}, limits {self.knobs['limit_rule']}, static buffer "
                f"{self.knobs['static_buffer']}, minibatching {self.knobs['minibatching']}: step "
                f"{m['step_time_s'] * 1e3:.3f} ms, peak HBM {m['peak_hbm_bytes'] / 2**30:.2f} GiB, drop rate "
                f"{m['drop_rate']:.3g}{'' if m['feasible'] else ', infeasible'})")


def same_plan(a, b) -> bool:
    """True when two stacking plans have the same stacks, tables, features, limits and buffers."""
    def facts(plan):
        return [(s.name, s.table_names, tuple(f.name for f in s.features), s.max_ids_per_partition,
                 s.max_unique_ids_per_partition, s.suggested_coo_buffer_size_per_device,
                 tuple((t.row_offset_in_shard, t.shard_rotation) for t in s.tables)) for s in plan.stacks]

    return a.num_partitions == b.num_partitions and facts(a) == facts(b)


class PlanSearchResult:
    """Every candidate of a plan search, ranked under its constraints.

    Attributes
    ----------
    dataset : xarray.Dataset
        Dim ``candidate``: the knobs (``chip``, ``num_chips``, ``per_chip_batch``,
        ``batch_size``, ``stacking``, ``num_stacks``, ``limit_rule``, ``static_buffer``,
        ``minibatching``) and figures (``step_time_s``, ``time_per_sample_s``,
        ``peak_hbm_bytes``, ``usable_hbm_bytes``, ``max_spmem_bytes_per_tile``,
        ``tile_spmem_bytes``, ``fits_spmem``, ``fits_hbm``, ``drop_rate``,
        ``dropped_ids``, ``held_out_ids``, ``max_minibatches``), the verdicts
        (``fails_<constraint>``, ``feasible``, ``on_front``, ``is_default``).
    front : list of int
        Feasible candidates no other feasible candidate beats on (time, peak HBM, drop rate).
    constraints : Constraints
    objective : str
    attrs : dict
        How the search ran: seconds, what was reused, the held-out batches.
    """

    def __init__(self, records, *, features, constraints: Constraints, objective: str, evaluator, moves, attrs):
        self.records = list(records)
        self.features = features
        self.constraints = constraints
        self.objective = objective
        self._evaluator = evaluator
        self.moves = list(moves)
        self.attrs = dict(attrs)
        # What was computed (the rest came from the caches, see scwork.plan._evaluate).
        self.attrs.update({f"computed_{k}" if k != "candidates" else "evaluations": v
                           for k, v in evaluator.counts.items()})
        self.dataset = self._build()

    # -- ranking --------------------------------------------------------------------------
    @property
    def time_axis(self) -> str:
        """``time_per_sample_s`` when the objective is time per sample, else ``step_time_s``."""
        return "time_per_sample_s" if self.objective == "time_per_sample" else "step_time_s"

    def _verdicts(self, constraints: Constraints):
        fails = {name: np.array([name in constraint_failures(r, constraints) for r in self.records], bool)
                 for name in ("fits_spmem", "fits_hbm", "max_drop_rate", "max_step_time_s", "max_peak_hbm_bytes",
                              "max_spmem_bytes_per_tile")}
        feasible = ~np.any(np.stack(list(fails.values())), axis=0)
        return fails, feasible

    def _front(self, feasible: np.ndarray) -> np.ndarray:
        time_values = np.array([objective_value(r, "time_per_sample" if self.time_axis == "time_per_sample_s"
                                                else "step_time") for r in self.records])
        points = np.stack([time_values, [r.peak_hbm_bytes for r in self.records],
                           [r.drop_rate for r in self.records]], axis=1)
        on = np.zeros(len(self.records), bool)
        idx = np.flatnonzero(feasible)
        if idx.size:
            on[idx[pareto_front(points[idx])]] = True
        return on

    def _build(self):
        import xarray as xr

        recs = self.records
        fails, feasible = self._verdicts(self.constraints)
        on_front = self._front(feasible)

        def var(values, long_name, units="1", dtype=None):
            return ("candidate", np.asarray(values, dtype=dtype), {"long_name": long_name, "units": units})

        data = {
            "chip": var([r.context.topology.chip or "" for r in recs], "chip", "", object),
            "num_chips": var([r.context.topology.num_chips for r in recs], "chips of the slice", "chips"),
            "per_chip_batch": var([r.context.per_chip_batch for r in recs], "samples per chip per step", "samples"),
            "batch_size": var([r.context.batch_size for r in recs], "global batch", "samples"),
            "stacking": var([label(r.grouping) for r in recs], "stacking (groups joined by |)", "", object),
            "num_stacks": var([len(r.plan.stacks) for r in recs], "stacked tables", "stacks"),
            "limit_rule": var([r.rule.name for r in recs], "rule setting the per-stack limits", "", object),
            "static_buffer": var([r.static_buffer for r in recs], "static CSR buffer size set"),
            "minibatching": var([r.minibatching for r in recs], "vocabulary mini-batching on"),
            "step_time_s": var([r.step_time_s for r in recs], "modelled step time of the heaviest held-out step", "s"),
            "time_per_sample_s": var([r.step_time_s / r.context.batch_size for r in recs],
                                     "modelled step time per global sample", "s"),
            "peak_hbm_bytes": var([r.peak_hbm_bytes for r in recs], "HBM peak per chip", "bytes"),
            "usable_hbm_bytes": var([r.usable_hbm_bytes for r in recs], "usable HBM per chip", "bytes"),
            "max_spmem_bytes_per_tile": var([r.max_spmem_bytes_per_tile for r in recs],
                                            "SPMEM of the worst tile over the stacks", "bytes"),
            "tile_spmem_bytes": var([r.tile_spmem_bytes for r in recs], "TileSpmem per tile", "bytes"),
            "fits_spmem": var([r.fits_spmem for r in recs], "every stack fits in TileSpmem"),
            "fits_hbm": var([r.fits_hbm for r in recs], "step peak fits in usable HBM"),
            "drop_rate": var([r.drop_rate for r in recs], "dropped share of the held-out ids"),
            "dropped_ids": var([r.dropped_ids for r in recs], "ids dropped on the held-out batches", "ids"),
            "held_out_ids": var([r.held_out_ids for r in recs], "ids of the held-out batches", "ids"),
            "max_minibatches": var([r.max_minibatches for r in recs],
                                   "most mini-batches of a stack on a held-out step", "mini-batches"),
            **{f"fails_{k}": var(v, f"fails the constraint {k}") for k, v in fails.items()},
            "feasible": var(feasible, "meets every constraint"),
            "on_front": var(on_front, "on the Pareto front (time, peak HBM, drop rate) of the feasible"),
            "is_default": var([_is_default(r) for r in recs], "the library's default plan"),
        }
        attrs = {k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in self.attrs.items()}
        attrs.update(objective=self.objective, constraints=repr(self.constraints), time_axis=self.time_axis)
        return xr.Dataset(data, coords={"candidate": ("candidate", np.arange(len(recs)))}, attrs=attrs)

    def with_constraints(self, constraints: Constraints) -> PlanSearchResult:
        """The same candidates ranked under other constraints (no engine run).

        Raises :class:`~scwork.errors.NoFeasiblePlanError` only when asked for ``best``.
        """
        if not isinstance(constraints, Constraints):
            raise ConfigError(f"constraints must be a scwork.plan.Constraints, got {type(constraints).__name__}")
        out = object.__new__(PlanSearchResult)
        out.__dict__.update(self.__dict__)
        out.constraints = constraints
        out.dataset = out._build()
        return out

    @property
    def front(self) -> list[int]:
        return [int(i) for i in np.flatnonzero(self.dataset["on_front"].values)]

    def candidate(self, index: int) -> PlanCandidate:
        """The candidate with coordinate ``index``."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(self.records):
            raise ConfigError(f"candidate index must be an integer in [0, {len(self.records)}), got {index!r}")
        index = int(index)
        return PlanCandidate(index, self.records[index], self._evaluator.features,
                             bool(self.dataset["feasible"].values[index]), self._evaluator.config.allow_id_dropping,
                             self._evaluator.memory_kwargs)

    @property
    def best(self) -> PlanCandidate:
        """The feasible candidate with the lowest objective (ties: step time, peak HBM, drop rate, index)."""
        feasible = np.flatnonzero(self.dataset["feasible"].values)
        if not feasible.size:
            raise no_feasible_error(self)
        keys = [(objective_value(self.records[i], self.objective), self.records[i].step_time_s,
                 self.records[i].peak_hbm_bytes, self.records[i].drop_rate, i) for i in feasible]
        return self.candidate(min(keys)[-1])

    @property
    def baselines(self) -> list[PlanCandidate]:
        """The library's default plan at every (topology, per-chip batch) searched."""
        return [self.candidate(i) for i in np.flatnonzero(self.dataset["is_default"].values)]

    @property
    def baseline(self) -> PlanCandidate:
        """The library's default plan at the best plan's topology and per-chip batch.

        With no plan feasible, the first default plan.
        """
        bases = self.baselines
        if not self.dataset["feasible"].values.any():
            return bases[0]
        best = self.best
        for b in bases:
            if (b.knobs["topology"] == best.knobs["topology"]
                    and b.knobs["per_chip_batch"] == best.knobs["per_chip_batch"]):
                return b
        return bases[0]

    def gain(self) -> dict[str, float]:
        """The best plan against :attr:`baseline`: step-time speed-up and the HBM and drop-rate changes."""
        best, base = self.best, self.baseline
        bt, ft = base.metrics["step_time_s"], best.metrics["step_time_s"]
        return {"speedup": bt / ft if ft > 0 else math.inf, "step_time_saved_s": bt - ft,
                "peak_hbm_saved_bytes": base.metrics["peak_hbm_bytes"] - best.metrics["peak_hbm_bytes"],
                "drop_rate_change": best.metrics["drop_rate"] - base.metrics["drop_rate"],
                "baseline_feasible": base.metrics["feasible"]}

    def summary(self) -> str:
        """A few lines: candidates, feasible, front, best and the gain over the library's plan."""
        ds = self.dataset
        lines = [f"{ds.sizes['candidate']} candidates, {int(ds['feasible'].sum())} feasible, {len(self.front)} on "
                 f"the front ({self.attrs.get('seconds', 0):.1f} s)"]
        if ds["feasible"].values.any():
            g = self.gain()
            lines += [f"best:     {self.best!r}", f"baseline: {self.baseline!r}",
                      f"modelled speed-up over the library's plan: {g['speedup']:.3f}x, HBM saved "
                      f"{g['peak_hbm_saved_bytes'] / 2**20:.1f} MiB"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"PlanSearchResult({self.summary()})"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"cannot write {value!r} in TOML")
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise ConfigError(f"cannot write a {type(value).__name__} in TOML")


def _toml_key(key: str) -> str:
    import re

    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_value(key)


def to_toml(tree: Mapping[str, Any]) -> str:
    """A config tree (:meth:`scwork.config.ModelConfig.to_dict`) as TOML text.

    Top-level scalars first, then one section per table of keys (``[stacks]`` as
    ``[stacks.NAME]`` sections), then ``[[tables]]``.

    Examples
    --------
    >>> print(to_toml({"batch_size": 64, "topology": {"chip": "v5p", "num_chips": 4}}))
    batch_size = 64
    <BLANKLINE>
    [topology]
    chip = "v5p"
    num_chips = 4
    <BLANKLINE>
    """
    if not isinstance(tree, Mapping):
        raise ConfigError(f"to_toml writes a dict of config keys, got {type(tree).__name__}")
    lines = []
    for k, v in tree.items():
        if not isinstance(v, Mapping) and k != "tables":
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for k, v in tree.items():
        if isinstance(v, Mapping) and k != "stacks":
            lines += ["", f"[{_toml_key(k)}]"] + [f"{_toml_key(a)} = {_toml_value(b)}" for a, b in v.items()]
    for name, entry in tree.get("stacks", {}).items():
        lines += ["", f"[stacks.{_toml_key(name)}]"] + [f"{a} = {_toml_value(b)}" for a, b in entry.items()]
    for table in tree.get("tables", []):
        lines += ["", "[[tables]]"] + [f"{_toml_key(a)} = {_toml_value(b)}" for a, b in table.items()]
    return "\n".join(lines) + "\n"


def no_feasible_error(result: PlanSearchResult) -> NoFeasiblePlanError:
    """The typed error of a search with no feasible candidate: the tightest constraint and the closest candidate."""
    ds = result.dataset
    shortfall = {name: int(ds[f"fails_{name}"].sum()) for name in result.constraints.checks()}
    tightest = max(shortfall, key=lambda n: (shortfall[n], -list(shortfall).index(n)))
    failures = [len(constraint_failures(r, result.constraints)) for r in result.records]
    closest = int(np.lexsort((ds["peak_hbm_bytes"].values, ds["step_time_s"].values, np.array(failures)))[0])
    cand = result.candidate(closest)
    failed = ", ".join(constraint_failures(result.records[closest], result.constraints))
    return NoFeasiblePlanError(
        f"no plan of the {ds.sizes['candidate']} candidates meets the constraints; the tightest is {tightest} "
        f"({shortfall[tightest]} of {ds.sizes['candidate']} candidates fail it). Closest candidate #{closest}: "
        f"{result._evaluator.describe(result.records[closest])}: fails {failed} (drop rate "
        f"{cand.metrics['drop_rate']:.3g}, peak HBM {cand.metrics['peak_hbm_bytes'] / 2**30:.2f} GiB of "
        f"{cand.metrics['usable_hbm_bytes'] / 2**30:.2f}, SPMEM {cand.metrics['max_spmem_bytes_per_tile']} of "
        f"{cand.metrics['tile_spmem_bytes']} B per tile). How to fix: relax {tightest}, or search more topologies, "
        "smaller batch sizes or limit rules with headroom",
        constraint=tightest, closest={**cand.knobs, **cand.metrics}, shortfall=shortfall)
