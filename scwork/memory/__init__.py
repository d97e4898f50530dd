"""Memory model: will the limits, batch and tables fit in SparseCore SPMEM and chip HBM?

Before compiling, :func:`plan` answers: does every stacked table's SparseCore op
fit in one tile's TileSpmem, does one training step fit in a chip's HBM, what is
live at the HBM peak, what fails and which change makes it fit.

- :mod:`~scwork.memory.spmem`: SPMEM buffers per tile (:func:`spmem_report`,
  :func:`check_spmem`, :func:`tile_buffers`).
- :mod:`~scwork.memory.hbm`: tables, optimizer slots, HBM stack, heap per chip
  (:func:`hbm_report`, :func:`check_hbm`, :func:`hbm_stack_bytes`,
  :func:`table_hbm_bytes`, :func:`optimizer_slot_count`).
- :mod:`~scwork.memory.timeline`: one step as allocation intervals, usage over
  program order and modelled time, the peak and what is live there
  (:func:`step_timeline`, :class:`Timeline`).
- :mod:`~scwork.memory.report`: :func:`plan` -> :class:`MemoryReport`, :func:`sweep`.
- :mod:`~scwork.memory.findings`: :class:`Finding`, :class:`Fix`, :class:`MemoryFitError`.
- Underneath: ``_model.py`` (constants, the checked :class:`Model` and :class:`Knobs`),
  ``_resolve.py`` (from what :func:`plan` is given to those), ``_spmem_numbers.py`` and
  ``_hbm_numbers.py`` (the byte counts the reports show), ``_diagnose.py`` (findings
  and fixes).

Every modelling assumption is stated, with its basis, in the docstrings of
:mod:`~scwork.memory.spmem`, :mod:`~scwork.memory.hbm` and
:mod:`~scwork.memory.timeline` (and in the ``assumptions`` attribute of every dataset).

Examples
--------
>>> import scwork
>>> from scwork.sharding import TableSpec
>>> tables = [TableSpec(f"t{i}", 10**6, 64, optimizer="adam", max_ids_per_partition=512,
...                     max_unique_ids_per_partition=256) for i in range(8)]
>>> report = scwork.memory.plan(tables, scwork.Topology.for_chip("v5p", num_chips=4),
...                             batch_size=65536, stacking=[[t.name for t in tables]])
>>> report.fits
False
>>> print(report.errors[0].message[:40])
Gather operand too large for stack 't0_t
>>> report.replace(stage_gather_operands_in_hbm=True).fits
True
"""

from __future__ import annotations

from scwork.memory._model import CATEGORIES, OPTIMIZER_SLOTS, estimate_limits, optimizer_slot_count
from scwork.memory.findings import Finding, Fix, MemoryFitError
from scwork.memory.hbm import check_hbm, hbm_report, hbm_stack_bytes, table_hbm_bytes
from scwork.memory.report import MemoryReport, plan, sweep
from scwork.memory.spmem import SPMEM_BUFFERS, check_spmem, spmem_report, tile_buffers
from scwork.memory.timeline import Event, Interval, Timeline, step_timeline

__all__ = [
    "plan",
    "sweep",
    "MemoryReport",
    "spmem_report",
    "check_spmem",
    "tile_buffers",
    "SPMEM_BUFFERS",
    "hbm_report",
    "check_hbm",
    "hbm_stack_bytes",
    "table_hbm_bytes",
    "optimizer_slot_count",
    "OPTIMIZER_SLOTS",
    "CATEGORIES",
    "estimate_limits",
    "step_timeline",
    "Timeline",
    "Interval",
    "Event",
    "Finding",
    "Fix",
    "MemoryFitError",
]
