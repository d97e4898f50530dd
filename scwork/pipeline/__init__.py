"""Step-time model: where a training step's time goes and what pipelining buys.

Sources: [sc-guide] §5 (pipelining) and §10 (bottlenecks).

- :mod:`~scwork.pipeline.params`: :class:`StepModelParams`, every assumption with its
  unit, default and source.
- :mod:`~scwork.pipeline.model`: :func:`step_model` -> :class:`StepModel` (both
  schedules; speed-up; staleness; bottleneck; what-ifs).
- :mod:`~scwork.pipeline.phase_costs`: the phase times (a tile-level SparseCore
  model, the collectives engine's ICI cost, host and TensorCore times).
- :mod:`~scwork.pipeline.expected`: :func:`expected_stats` (statistics from
  averages, for what-ifs without data).
- :mod:`~scwork.pipeline.phases`: the seven phases of a step and the resource kind
  that runs each.
- :mod:`~scwork.pipeline.timeline`: :func:`simulate`, :class:`Timeline`,
  :class:`Interval`, :class:`Units`: the sequential and pipelined schedules as
  intervals on host / SparseCore / ICI / TensorCore lanes (for Gantt charts).
- :mod:`~scwork.pipeline.chrome_trace`: Chrome trace export (:func:`to_chrome_trace`,
  :func:`write_chrome_trace`, :func:`validate_chrome_trace`) and the HBM use over
  the modelled run (:func:`hbm_usage`).
- :mod:`~scwork.pipeline.trace`: measured-trace import (:func:`read_trace`,
  :class:`MeasuredTrace`) and the overlay (:func:`compare`).

Importing this package imports numpy only (xarray on first use of a dataset
view); it never imports numba.

Examples
--------
>>> import scwork
>>> from scwork.pipeline import step_model, expected_stats
>>> topo = scwork.Topology.for_chip("v5p", num_chips=4)
>>> stats = expected_stats({"user": 20.0, "item": 5.0}, topo, batch_size=16384)
>>> m = step_model(stats, widths={"user": 64, "item": 32}, topology=topo,
...                tc_forward_s=2e-4, tc_backward_s=4e-4)
>>> m.bottleneck                      # one preprocessing thread cannot keep up
'host'
>>> faster = m.replace(host_threads=16)
>>> faster.step_time < m.step_time, round(faster.speedup, 2) > 1.0
(True, True)
"""

from scwork.pipeline._inputs import DIRECTIONS
from scwork.pipeline.chrome_trace import hbm_usage, to_chrome_trace, validate_chrome_trace, write_chrome_trace
from scwork.pipeline.expected import expected_stats
from scwork.pipeline.model import StepModel, step_model
from scwork.pipeline.params import DEFAULT_OPTIMIZER_VECTOR_OPS, DTYPE_SIZES, REFERENCE_HOST_IDS_PER_S, StepModelParams
from scwork.pipeline.timeline import (
    PHASE_RESOURCE,
    PHASES,
    RESOURCE_KINDS,
    STAGES,
    Interval,
    Timeline,
    Units,
    simulate,
)
from scwork.pipeline.trace import (
    DEFAULT_PHASE_PATTERNS,
    DEFAULT_RESOURCE_PATTERNS,
    DEFAULT_STEP_PATTERN,
    MeasuredTrace,
    TraceError,
    compare,
    read_trace,
)

__all__ = [
    "step_model",
    "StepModel",
    "StepModelParams",
    "expected_stats",
    "simulate",
    "Timeline",
    "Interval",
    "Units",
    "PHASES",
    "PHASE_RESOURCE",
    "RESOURCE_KINDS",
    "STAGES",
    "DIRECTIONS",
    "DTYPE_SIZES",
    "DEFAULT_OPTIMIZER_VECTOR_OPS",
    "REFERENCE_HOST_IDS_PER_S",
    "to_chrome_trace",
    "write_chrome_trace",
    "validate_chrome_trace",
    "read_trace",
    "MeasuredTrace",
    "compare",
    "hbm_usage",
    "TraceError",
    "DEFAULT_RESOURCE_PATTERNS",
    "DEFAULT_PHASE_PATTERNS",
    "DEFAULT_STEP_PATTERN",
]
