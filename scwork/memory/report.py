"""One entry point: does a model fit in SparseCore SPMEM and chip HBM, and what to change.

:func:`plan` combines the SPMEM model (:mod:`scwork.memory.spmem`), the HBM model
(:mod:`scwork.memory.hbm`) and the step timeline (:mod:`scwork.memory.timeline`)
into a :class:`MemoryReport`: ``fits``, ``diagnoses`` (findings with evidence and
fixes), ``fixes`` (single changes that make the whole model fit), the timeline, and
xarray views. :func:`sweep` evaluates one knob over many values.

A call takes well under a millisecond per table (no xarray until a dataset is
asked for), so an explorer can call it on every slider move.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import Any

import numpy as np

from scwork._validate import shown
from scwork.errors import ConfigError
from scwork.memory._diagnose import (
    fmt_bytes,
    hbm_findings,
    input_findings,
    model_fixes,
    spmem_findings,
)
from scwork.memory._hbm_numbers import HbmNumbers, hbm_numbers
from scwork.memory._model import CATEGORIES, SPARSECORE_CATEGORIES, Knobs, Model
from scwork.memory._resolve import resolve
from scwork.memory._spmem_numbers import SpmemNumbers, spmem_numbers
from scwork.memory.findings import Finding, Fix, MemoryFitError

__all__ = ["MemoryReport", "plan", "sweep"]


class MemoryReport:
    """SPMEM, HBM and timeline of one model on one topology. Build it with :func:`plan`.

    Attributes
    ----------
    fits : bool
        Every stack fits in TileSpmem and the step's HBM peak fits in usable HBM.
    spmem_fits, hbm_fits : bool
        The two halves.
    diagnoses : list of Finding
        Errors first (what does not fit, with evidence numbers and the fixes that
        resolve each finding alone), then warnings and notes.
    inputs : dict
        The keywords :func:`plan` was called with.
    spmem : SpmemNumbers
        Raw SPMEM numbers (arrays over stacks).
    hbm : HbmNumbers
        Raw HBM numbers (arrays over tables, stacks, events).
    """

    def __init__(self, model_arg: Any, topology: Any, inputs: dict, model: Model, knobs: Knobs,
                 spmem: SpmemNumbers, hbm: HbmNumbers, diagnoses: list[Finding]):
        self._model_arg = model_arg
        self.topology = topology
        self.inputs = dict(inputs)
        self.model = model
        self.knobs = knobs
        self.spmem = spmem
        self.hbm = hbm
        order = {"error": 0, "warning": 1, "info": 2}
        self.diagnoses = sorted(diagnoses, key=lambda f: order[f.severity])

    # -- verdicts --------------------------------------------------------------------
    @property
    def spmem_fits(self) -> bool:
        return bool(self.spmem.fits.all())

    @property
    def hbm_fits(self) -> bool:
        return bool(self.hbm.fits)

    @property
    def fits(self) -> bool:
        return self.spmem_fits and self.hbm_fits

    @property
    def errors(self) -> list[Finding]:
        """The findings of severity ``"error"``."""
        return [f for f in self.diagnoses if f.severity == "error"]

    @property
    def stacks(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.model.stacks)

    @property
    def peak_hbm_bytes(self) -> int:
        return self.hbm.peak_bytes

    @property
    def usable_hbm_bytes(self) -> int:
        return self.hbm.usable

    @cached_property
    def timeline(self):
        """The step's :class:`~scwork.memory.timeline.Timeline`."""
        from scwork.memory.timeline import Timeline

        return Timeline(self.hbm, self.knobs, self.model)

    @cached_property
    def fixes(self) -> list[Fix]:
        """Single changes, each of which alone makes the whole model fit (verified).

        Empty when the model fits. Apply one with ``report.replace(**fix.as_kwargs())``.
        """
        return model_fixes(self.model, self.knobs, need_spmem=not self.spmem_fits, need_hbm=not self.hbm_fits)

    def replace(self, **changes) -> "MemoryReport":
        """:func:`plan` again with some inputs changed (e.g. ``num_serialized_tables=4``)."""
        inputs = {**self.inputs, **changes}
        return plan(self._model_arg, self.topology, **inputs)

    def raise_if_not_fits(self) -> "MemoryReport":
        """Return ``self`` if it fits, else raise :class:`~scwork.memory.MemoryFitError`."""
        if self.fits:
            return self
        errors = self.errors
        resource = "+".join(r for r, bad in (("spmem", not self.spmem_fits), ("hbm", not self.hbm_fits)) if bad)
        if not self.spmem_fits:
            row = int(np.argmax(self.spmem.total - self.spmem.capacity))
            required, available, stack = int(self.spmem.total[row]), int(self.spmem.capacity), self.spmem.stacks[row]
        else:
            required, available, stack = self.hbm.peak_bytes, self.hbm.usable, None
        raise MemoryFitError("\n".join(str(f) for f in errors), resource=resource, findings=errors,
                             required_bytes=required, available_bytes=available, stack=stack, report=self)

    # -- views -----------------------------------------------------------------------
    def spmem_dataset(self):
        """The SPMEM dataset of :func:`scwork.memory.spmem.spmem_report`."""
        from scwork.memory import spmem as _spmem

        return _spmem._dataset(self.model, self.knobs, self.spmem,
                               [f for f in self.diagnoses if f.resource in ("spmem", "input")])

    def hbm_dataset(self):
        """The HBM dataset of :func:`scwork.memory.hbm.hbm_report`."""
        from scwork.memory import hbm as _hbm

        return _hbm._dataset(self.model, self.knobs, self.hbm,
                             [f for f in self.diagnoses if f.resource in ("hbm", "input")])

    def to_dataset(self):
        """SPMEM, HBM and timeline in one :class:`xarray.Dataset`.

        Dims ``stack``, ``buffer`` (SPMEM buffers), ``table``, ``category``, ``chip``,
        ``event`` and ``interval`` (timeline allocations). Every variable has
        ``units``; attributes hold ``fits``, ``spmem_fits``, ``hbm_fits``, the
        diagnoses as text and the modelling assumptions.
        """
        import xarray as xr

        from scwork.memory import hbm as _hbm
        from scwork.memory import spmem as _spmem

        s_data, s_coords = _spmem.spmem_variables(self.model, self.knobs, self.spmem)
        h_data, h_coords, h_attrs = _hbm.hbm_variables(self.model, self.knobs, self.hbm)
        tl = self.timeline
        usage = tl.usage()
        ivs = tl.intervals_dataset().rename({"buffer": "interval", "category": "interval_category",
                                             "stack": "interval_stack", "table": "interval_table"})
        for name in ("feature_width", "max_ids_per_partition", "max_unique_ids_per_partition", "sample_count",
                     "limits_source"):
            s_data.pop(name)  # identical in the HBM variables
        data = {**s_data, **h_data}
        data["usage_bytes"] = usage["usage_bytes"].variable
        data["usage_by_category"] = usage["usage_by_category"].variable
        for name, v in ivs.data_vars.items():
            data[f"interval_{name}" if not name.startswith("interval") else name] = v.variable
        coords = {**s_coords, **h_coords}
        for name, c in usage.coords.items():
            if name != "category":
                coords[name] = c.variable
        for name, c in ivs.coords.items():
            coords[name] = c.variable
        attrs = dict(h_attrs)
        attrs.update({
            "long_name": "SparseCore memory plan",
            "fits": int(self.fits), "spmem_fits": int(self.spmem_fits), "hbm_fits": int(self.hbm_fits),
            "chip": getattr(self.model.chip, "name", ""),
            "topology": str(self.topology),
            "batch_size": self.knobs.batch_size,
            "tile_spmem_bytes": int(self.spmem.capacity),
            "tiles_per_sparsecore": self.knobs.tiles_per_sparsecore,
            "diagnoses": [str(f) for f in self.diagnoses],
            "assumptions": list(_spmem.ASSUMPTIONS) + list(_hbm.ASSUMPTIONS),
        })
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def summary(self) -> dict[str, Any]:
        """Every headline number as a plain dict.

        Examples
        --------
        >>> import scwork
        >>> from scwork.sharding import TableSpec
        >>> r = plan([TableSpec("t", 1000, 8, max_ids_per_partition=8)],
        ...          scwork.Topology.for_chip("v5p", num_chips=1), batch_size=64)
        >>> s = r.summary()
        >>> s["fits"], s["num_stacks"], s["errors"]
        (True, 1, 0)
        """
        spm, hbm = self.spmem, self.hbm
        worst = int(np.argmax(spm.total))
        at_peak = hbm.usage_by_category[hbm.peak_event]
        out = {
            "fits": self.fits,
            "spmem_fits": self.spmem_fits,
            "hbm_fits": self.hbm_fits,
            "chip": getattr(self.model.chip, "name", ""),
            "num_chips": self.knobs.num_chips,
            "num_partitions": self.knobs.num_partitions,
            "batch_size": self.knobs.batch_size,
            "samples_per_sc": self.knobs.samples_per_sc,
            "num_tables": len(self.model.tables),
            "num_stacks": len(self.model.stacks),
            "tile_spmem_bytes": int(spm.capacity),
            "max_spmem_bytes_per_tile": int(spm.total[worst]),
            "max_spmem_stack": spm.stacks[worst],
            "max_spmem_utilization": float(spm.total[worst] / spm.capacity),
            "peak_hbm_bytes": hbm.peak_bytes,
            "peak_event": hbm.ev_name[hbm.peak_event],
            "usable_hbm_bytes": hbm.usable,
            "hbm_bytes": hbm.capacity,
            "hbm_utilization": hbm.peak_bytes / hbm.capacity,
            "sparsecore_hbm_bytes_at_peak": int(sum(at_peak[i] for i, c in enumerate(CATEGORIES)
                                                    if c in SPARSECORE_CATEGORIES)),
            "errors": sum(f.severity == "error" for f in self.diagnoses),
            "warnings": sum(f.severity == "warning" for f in self.diagnoses),
        }
        out.update({f"{c}_bytes_at_peak": int(at_peak[i]) for i, c in enumerate(CATEGORIES)})
        return out

    # -- display -----------------------------------------------------------------------
    def __repr__(self) -> str:
        verdict = "fits" if self.fits else "DOES NOT FIT"
        n = len(self.model.stacks)
        return (f"MemoryReport({verdict}: {n} {'stack' if n == 1 else 'stacks'} on {self.topology}, batch "
                f"{self.knobs.batch_size}; SPMEM max {fmt_bytes(self.spmem.total.max())} / "
                f"{fmt_bytes(self.spmem.capacity)} per tile; HBM peak {fmt_bytes(self.hbm.peak_bytes)} / "
                f"{fmt_bytes(self.hbm.usable)} usable)")

    def __str__(self) -> str:
        lines = [repr(self), "", "SPMEM per tile (bytes):"]
        spm = self.spmem
        for i, name in enumerate(spm.stacks):
            mark = "ok " if spm.fits[i] else "OVER"
            lines.append(f"  {mark} {name:<30} fixed {int(spm.fixed[i]):>9}  row-dependent "
                         f"{int(spm.row_dependent[i]):>9}  total {int(spm.total[i]):>9} / {int(spm.capacity)}")
        lines += ["", f"HBM per chip at the peak ({self.hbm.ev_name[self.hbm.peak_event]}):"]
        at_peak = self.hbm.usage_by_category[self.hbm.peak_event]
        for i, c in enumerate(CATEGORIES):
            if at_peak[i]:
                lines.append(f"  {c:<26} {fmt_bytes(at_peak[i]):>12}")
        lines.append(f"  {'total':<26} {fmt_bytes(self.hbm.peak_bytes):>12} of {fmt_bytes(self.hbm.usable)} usable")
        lines.append(f"  (usable HBM: the chip's {fmt_bytes(self.hbm.capacity)} less the {self.knobs.headroom:.0%} "
                     "headroom kept free)")
        if self.diagnoses:
            lines += ["", "Diagnoses:"] + [str(f) for f in self.diagnoses]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        color = "#2e7d32" if self.fits else "#c62828"
        spm = self.spmem
        rows = "".join(
            f"<tr><td>{html.escape(n)}</td><td style='text-align:right'>{int(spm.fixed[i])}</td>"
            f"<td style='text-align:right'>{int(spm.row_dependent[i])}</td>"
            f"<td style='text-align:right'>{int(spm.total[i])}</td>"
            f"<td>{'ok' if spm.fits[i] else '<b>over</b>'}</td></tr>" for i, n in enumerate(spm.stacks))
        at_peak = self.hbm.usage_by_category[self.hbm.peak_event]
        cats = "".join(f"<tr><td>{c}</td><td style='text-align:right'>{fmt_bytes(at_peak[i])}</td></tr>"
                       for i, c in enumerate(CATEGORIES) if at_peak[i])
        diag = "".join(f.__class__._repr_html_(f) for f in self.diagnoses)
        return (
            f"<div><p style='color:{color}'><b>{html.escape(repr(self))}</b></p>"
            f"<p>SPMEM per tile (TileSpmem {int(spm.capacity)} bytes)</p><table><tr><th>stack</th><th>fixed</th>"
            f"<th>row-dependent</th><th>total</th><th></th></tr>{rows}</table>"
            f"<p>HBM per chip at the peak ({html.escape(self.hbm.ev_name[self.hbm.peak_event])})</p>"
            f"<table>{cats}<tr><th>total</th><th style='text-align:right'>{fmt_bytes(self.hbm.peak_bytes)}</th>"
            f"</tr></table>{diag}</div>"
        )


def _evaluate(model: Any, topology: Any, kwargs: dict, *, with_fixes: bool = True) -> MemoryReport:
    m, k = resolve(model, topology, **kwargs)
    spm = spmem_numbers(m, k)
    hbm = hbm_numbers(m, k)
    findings = (spmem_findings(m, k, spm, with_fixes=with_fixes) + hbm_findings(m, k, hbm, with_fixes=with_fixes)
                + input_findings(m, k, hbm, spm))
    return MemoryReport(model, topology, kwargs, m, k, spm, hbm, findings)


def plan(model: Any, topology: Any, *, batch_size: int, stacking: Any = "auto", config: Any = None,
         stack_limits: Any = None, limits: Any = None, stats: Any = None, ids_per_sample: Any = None,
         dtype: Any = "f32", slot_dtype: Any = None, optimizers: Any = None, optimizer_slots: Any = None,
         chip: Any = None, num_chips: int | None = None, tile_spmem_bytes: int | None = None,
         hbm_bytes: int | None = None, logical_replica_count: int | None = None,
         stage_gather_operands_in_hbm: bool = False, num_serialized_tables: int = 1,
         dense_weights_bytes: int = 0, constants_bytes: int = 0, tensorcore_activation_bytes: int = 0,
         prefetch_bytes_per_step: int | None = None, maximum_parallel_iterations: int = 1,
         headroom: float = 0.1, stack_limit_rule: str = "jax_tpu_embedding") -> MemoryReport:
    """Will this model fit? SPMEM per tile, HBM per chip over one step, and what to change.

    Parameters
    ----------
    model : list of FeatureSpec or TableSpec, mapping, or StackingPlan
        The features (tables are taken from them) or the tables (each then looked
        up by one feature of the same name), or a ready :class:`~scwork.sharding.StackingPlan`.
    topology : scwork.Topology
        Chips and SparseCores; its ``chip`` gives the hardware (or pass ``chip``).
    batch_size : int
        Global batch: samples per feature per step.
    stacking : "auto", None or list of table-name lists
        As :func:`scwork.sharding.plan_stacking` (ignored for a StackingPlan).
    config : SparsecoreConfig, optional
        For ``disable_table_stacking`` and table-level limits.
    stack_limit_rule : {"jax_tpu_embedding", "largest_table"}
        Limits of a stack of several tables (see
        :func:`scwork.sharding.plan_stacking`): the library's default (256) or the
        largest limit its tables set.
    stack_limits : dict, optional
        ``{stack: (max_ids_per_partition, max_unique_ids_per_partition)}``; beats
        every other source of limits.
    limits : (int, int), optional
        ``(max_ids_per_partition, max_unique_ids_per_partition)`` for every stack not
        in ``stack_limits`` (a slider for all stacks at once).
    stats : xarray.Dataset, optional
        :func:`scwork.sharding.compute_stats` output: observed limits for stacks that
        have no configured ones.
    ids_per_sample : float or dict, optional
        Ids per sample (per feature name, or one value for all) for the closed-form
        limit estimate ([sc-guide] §6, ``xla_sparse_core_estimate_max_ids``) of stacks with
        neither configured nor observed limits.
    dtype : str or dict, default "f32"
        Table dtype (``f32``, ``bf16``, ``f16``, ``s8``), or per table.
    slot_dtype : str or dict, optional
        Optimizer-slot dtype; default the table's dtype.
    optimizers : dict, optional
        ``{table: optimizer}`` overriding ``TableSpec.optimizer`` (e.g. ``"lamb"``).
    optimizer_slots : dict, optional
        ``{optimizer: slot count}`` for optimizers scwork does not know.
    chip : str or TpuChip, optional
        Hardware, e.g. ``scwork.hardware.override("v4", tile_spmem_bytes=...)``;
        default ``topology.chip``.
    num_chips : int, optional
        Overrides ``topology.num_chips`` (for sweeps and fixes).
    tile_spmem_bytes : int, optional
        TileSpmem per tile; required where the catalog has none (v4).
    hbm_bytes : int, optional
        HBM per chip; default the chip's.
    logical_replica_count : int, optional
        HBM stack multiplier; default ``P`` (see :mod:`scwork.memory.hbm`).
    stage_gather_operands_in_hbm : bool, default False
        Gather operands in HBM instead of SPMEM.
    num_serialized_tables : int, default 1
        ``xla_sc_num_serialized_tables_to_optimize_hbm``: stacks run one at a time
        (0 and 1: none).
    dense_weights_bytes, constants_bytes : int, default 0
        Heap: dense-layer weights and constants per chip.
    tensorcore_activation_bytes : int, default 0
        Dense activations kept from the TensorCore forward to its backward pass.
    prefetch_bytes_per_step : int, optional
        Input bytes of one step per chip; default the CSR input of every stack.
    maximum_parallel_iterations : int, default 1
        Steps of input prefetched into the heap.
    headroom : float, default 0.1
        Fraction of HBM kept free.

    Returns
    -------
    MemoryReport

    Raises
    ------
    ConfigError
        Invalid inputs (the message says which and how to fix it): negative sizes,
        unknown optimizer or dtype, a stack without limits, v4 without
        ``tile_spmem_bytes``, a chip without SparseCores.
    TopologyError
        More chips than the chip's largest slice.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import TableSpec
    >>> tables = [TableSpec(f"t{i}", 10**6, 64, optimizer="adagrad", max_ids_per_partition=512,
    ...                     max_unique_ids_per_partition=256) for i in range(8)]
    >>> topo = scwork.Topology.for_chip("v5p", num_chips=4)
    >>> r = plan(tables, topo, batch_size=65536, stacking=[[t.name for t in tables]])
    >>> r.fits, [f.code for f in r.errors]
    (False, ['spmem_gather_operand_too_large'])

    One stack of 8 features x 4096 samples per SparseCore: the gather operand is
    ``32768 * 64 / 16 * 4 = 524288`` bytes per tile, the whole TileSpmem.

    >>> [(f.parameter, f.value) for f in r.fixes]
    [('stage_gather_operands_in_hbm', True), ('batch_size', 56816), ('num_chips', 8)]
    >>> r.replace(batch_size=56816).fits
    True
    """
    kwargs = dict(batch_size=batch_size, stacking=stacking, config=config, stack_limits=stack_limits,
                  limits=limits, stats=stats, ids_per_sample=ids_per_sample, dtype=dtype, slot_dtype=slot_dtype,
                  optimizers=optimizers, optimizer_slots=optimizer_slots, chip=chip, num_chips=num_chips,
                  tile_spmem_bytes=tile_spmem_bytes, hbm_bytes=hbm_bytes,
                  logical_replica_count=logical_replica_count,
                  stage_gather_operands_in_hbm=stage_gather_operands_in_hbm,
                  num_serialized_tables=num_serialized_tables, dense_weights_bytes=dense_weights_bytes,
                  constants_bytes=constants_bytes, tensorcore_activation_bytes=tensorcore_activation_bytes,
                  prefetch_bytes_per_step=prefetch_bytes_per_step,
                  maximum_parallel_iterations=maximum_parallel_iterations, headroom=headroom,
                  stack_limit_rule=stack_limit_rule)
    return _evaluate(model, topology, kwargs)


def sweep(model: Any, topology: Any, parameter: str, values: Iterable[Any], *, progress: bool | None = None,
          **kwargs):
    """Evaluate :func:`plan` for every value of one parameter.

    Parameters
    ----------
    model, topology
        As in :func:`plan`.
    parameter : str
        A keyword of :func:`plan`, e.g. ``"batch_size"``, ``"num_serialized_tables"``,
        ``"maximum_parallel_iterations"``, ``"num_chips"``, ``"limits"``.
    values : iterable
        Its values (for ``limits``: pairs).
    progress : bool or None
        Progress bar, one tick per value: True, False, or None (automatic: shown in
        a terminal or notebook unless ``SCWORK_PROGRESS=0``; see :mod:`scwork._progress`).
    **kwargs
        The other keywords of :func:`plan`.

    Returns
    -------
    xarray.Dataset
        Dim named ``parameter`` (for tuple values: dim ``value`` with coordinate
        ``parameter`` as text). Variables ``fits``, ``spmem_fits``, ``hbm_fits``,
        ``max_spmem_bytes_per_tile``, ``peak_hbm_bytes``, ``usable_hbm_bytes``,
        ``errors`` and ``bytes_at_peak`` (with dim ``category``), in bytes.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import TableSpec
    >>> tables = [TableSpec(f"t{i}", 10**6, 64, max_ids_per_partition=512,
    ...                     max_unique_ids_per_partition=256) for i in range(8)]
    >>> ds = sweep(tables, scwork.Topology.for_chip("v5p", num_chips=4), "batch_size",
    ...            [16384, 32768, 65536], stacking=[[t.name for t in tables]])
    >>> ds["fits"].values.tolist()
    [True, True, False]
    """
    import xarray as xr

    from scwork.memory._resolve import _KNOWN_KWARGS

    if not isinstance(parameter, str) or parameter not in _KNOWN_KWARGS:
        raise ConfigError(f"parameter must be a keyword of scwork.memory.plan to sweep, e.g. 'batch_size', got "
                          f"{shown(parameter)}; keywords: {', '.join(_KNOWN_KWARGS)}")
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ConfigError(f"values must be a list of {parameter} values, got {shown(values)}")
    values = list(values)
    if not values:
        raise ConfigError(f"values is empty: give the {parameter} values to sweep")
    if parameter in kwargs:
        raise TypeError(f"{parameter!r} is swept: do not pass it in kwargs too")  # as a repeated keyword would
    from scwork._progress import progress as _progress

    reports = [_evaluate(model, topology, {**kwargs, parameter: v}, with_fixes=False)
               for v in _progress(values, desc=f"sweeping {parameter}", enabled=progress, unit="value")]
    tuple_values = any(isinstance(v, (tuple, list, dict)) for v in values)
    dim = "value" if tuple_values else parameter
    coord = np.array([str(v) for v in values], dtype=object) if tuple_values else np.asarray(values)

    def var(values_, long_name, units, dims=(dim,)):
        return (dims, np.asarray(values_), {"long_name": long_name, "units": units})

    return xr.Dataset(
        {
            "fits": var([r.fits for r in reports], "SPMEM and HBM fit", "1"),
            "spmem_fits": var([r.spmem_fits for r in reports], "every stack fits in TileSpmem", "1"),
            "hbm_fits": var([r.hbm_fits for r in reports], "step peak fits in usable HBM", "1"),
            "max_spmem_bytes_per_tile": var([int(r.spmem.total.max()) for r in reports],
                                            "largest SPMEM per tile over the stacks", "bytes"),
            "peak_hbm_bytes": var([r.hbm.peak_bytes for r in reports], "HBM peak per chip", "bytes"),
            "usable_hbm_bytes": var([r.hbm.usable for r in reports], "usable HBM per chip", "bytes"),
            "errors": var([len(r.errors) for r in reports], "error findings", "count"),
            "bytes_at_peak": var([r.hbm.usage_by_category[r.hbm.peak_event] for r in reports],
                                 "HBM per category at the peak", "bytes", (dim, "category")),
        },
        coords={dim: (dim, coord, {"long_name": parameter}),
                "category": ("category", np.array(CATEGORIES, dtype=object))},
        attrs={"parameter": parameter, "units": "bytes",
               "tile_spmem_bytes": int(reports[0].spmem.capacity)},
    )
