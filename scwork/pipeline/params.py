"""Every assumption of the step-time model, as one frozen dataclass.

:class:`StepModelParams` holds the numbers the step model needs that are *not*
in the hardware catalog (:mod:`scwork.hardware`) and not a property of the
workload (tables, ids, TensorCore time). Each field states its unit, default and
where the default comes from in ``dataclasses.fields(StepModelParams)[i].metadata``
(``unit``, ``source``) and in the string literal under it. Several defaults are
*assumptions* (the hardware numbers are not published): they are marked so, and
you should override them with measured values (``dataclasses.replace`` or
:meth:`StepModelParams.replace`).

Examples
--------
>>> from scwork.pipeline import StepModelParams
>>> p = StepModelParams()
>>> p.host_ids_per_s, p.dma_compute_overlap
(47000000.0, True)
>>> p.replace(host_threads=8).host_threads
8
>>> rows = StepModelParams.describe()
>>> [r["unit"] for r in rows if r["name"] == "sc_op_overhead_s"]
['s']
>>> StepModelParams(host_threads=0)
Traceback (most recent call last):
...
scwork.errors.ConfigError: StepModelParams.host_threads must be >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from scwork._validate import shown
from scwork.errors import ConfigError

__all__ = ["StepModelParams", "DEFAULT_OPTIMIZER_VECTOR_OPS", "REFERENCE_HOST_IDS_PER_S", "DTYPE_SIZES"]

#: Table dtypes the model knows and their sizes (bytes), as :mod:`scwork.layout.embedding`.
DTYPE_SIZES: Mapping[str, int] = {"f32": 4, "bf16": 2, "f16": 2, "s8": 1}

#: Ids per second one host thread of the public C++ input preprocessing of
#: jax-tpu-embedding turns into SparseCore CSR input (order of magnitude, as given
#: in scwork's design brief for issue 6; no published benchmark number was found:
#: the library's ``preprocess_input_benchmarks`` reports timings but no figure is
#: published). Measure your own pipeline and pass ``host_ids_per_s``.
REFERENCE_HOST_IDS_PER_S = 47e6

#: Vector operations per table element for one optimizer update, counted from each
#: optimizer's update formula (one vector instruction per add, multiply, compare,
#: square root or reciprocal; an assumption about instruction selection):
#: sgd ``w -= lr * g`` (2); adagrad ``a += g*g; w -= lr * g * rsqrt(a)`` (6);
#: adagrad_momentum adds ``m = b*m + g'`` (8); adam ``m, v`` moments, bias
#: correction folded into lr, ``w -= lr * m / (sqrt(v) + eps)`` (10); ftrl
#: (accumulator, linear, shrinkage with compare and select: 14); laprop (like adam: 10).
DEFAULT_OPTIMIZER_VECTOR_OPS: Mapping[str, int] = MappingProxyType({
    "sgd": 2,
    "adagrad": 6,
    "adagrad_momentum": 8,
    "adam": 10,
    "ftrl": 14,
    "laprop": 10,
})


def _p(default, unit: str, source: str, *, factory: bool = False):
    meta = {"unit": unit, "source": source}
    if factory:
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class StepModelParams:
    """Named assumptions of :func:`scwork.pipeline.step_model`.

    Hardware numbers that the catalog has (HBM bandwidth, SIMD widths, tiles,
    DMA granule, ICI link bandwidth, TensorCores per chip) are *not* here: they come
    from :mod:`scwork.hardware` (override the chip with
    :func:`scwork.hardware.override`). ``None`` for an optional field means "take
    it from the catalog / the collectives engine".
    """

    # -- host ---------------------------------------------------------------------------
    host_ids_per_s: float = _p(REFERENCE_HOST_IDS_PER_S, "ids/s per thread",
                               "scwork design brief (issue 6): public C++ reference ~47 M ids/s per "
                               "thread; unverified order of magnitude, measure your own")
    """Raw ids one host thread preprocesses per second (COO conversion, sort, dedup,
    CSR build, jax-tpu-embedding's host preprocessing). Unit: ids/s per thread. Default 47e6 (see
    :data:`REFERENCE_HOST_IDS_PER_S`): an order of magnitude, not a measurement."""

    host_threads: int = _p(1, "threads", "assumption: one preprocessing thread; set yours")
    """Preprocessing threads per host working on one step. Unit: threads. Default 1."""

    host_overhead_s: float = _p(0.0, "s", "assumption: none")
    """Fixed host time per step on top of the ids (reading, Python overhead,
    host-to-device copy setup). Unit: seconds. Default 0."""

    chips_per_host: int = _p(4, "chips", "Cloud TPU docs: v4 / v5p hosts drive 4 chips (v5e / v6e "
                                         "multi-host slices: 4 per host)")
    """Chips one host feeds; hosts preprocess in parallel. Unit: chips. Default 4."""

    input_buffers: int = _p(1, "steps", "memory model default maximum_parallel_iterations = 1 "
                                        "(scwork.memory.plan)")
    """Prepared inputs the device can hold (``maximum_parallel_iterations``): the host
    may start preparing step ``i`` once the SparseCore forward pass of step
    ``i - input_buffers`` has consumed its input. Unit: steps. Default 1."""

    # -- SparseCore -----------------------------------------------------------------------
    sc_hbm_bandwidth_fraction: float = _p(1.0, "1", "assumption: SparseCores can use the chip's whole "
                                                    "HBM bandwidth (no published split)")
    """Fraction of the chip's HBM bandwidth the SparseCores of a chip share (evenly
    between SparseCores, then between tiles). Unit: 1. Default 1.0."""

    sc_tile_vector_ops_per_s: float = _p(1e9, "vector instructions/s per tile",
                                         "assumption: one SIMD instruction per cycle at ~1 GHz "
                                         "(SparseCore clock not published)")
    """SIMD instructions one tile issues per second (each on ``simd_width`` lanes).
    Unit: 1/s. Default 1e9: an assumption, the clock is not published."""

    sc_op_overhead_s: float = _p(2e-6, "s", "assumption: launch + sequencer sync per SparseCore op "
                                            "(not published)")
    """Fixed cost of one SparseCore op (one stacked table, one mini-batch, one
    direction): launch, SCS-tile synchronisation. Unit: seconds. Default 2e-6 (assumption)."""

    dma_compute_overlap: bool = _p(True, "", "assumption: SparseCore DMA engines run asynchronously "
                                             "to the tiles' vector units")
    """True: a SparseCore phase lasts ``max(DMA time, vector time)`` of the work that
    may overlap; False: their sum. Default True."""

    combine_ops_per_element: int = _p(1, "vector instructions per element",
                                      "one fused multiply-add (gain x row + accumulator), the gains of "
                                      "[jte] preprocess_sparse_dense_matmul_input")
    """Vector instructions per element to combine one gathered row into a sample's
    activation (forward) or to scatter one gradient row (backward). Default 1."""

    dequantize_ops_per_element: int = _p(1, "vector instructions per element",
                                         "assumption: one convert(+scale) per element of an s8 row")
    """Extra vector instructions per element for ``s8`` tables (int -> float). Default 1."""

    optimizer_ops_per_element: Mapping[str, int] = _p(lambda: DEFAULT_OPTIMIZER_VECTOR_OPS,
                                                      "vector instructions per element",
                                                      "counted from the update formulas, see "
                                                      "DEFAULT_OPTIMIZER_VECTOR_OPS", factory=True)
    """Vector instructions per element of one optimizer update, by optimizer name
    (:data:`DEFAULT_OPTIMIZER_VECTOR_OPS`)."""

    csr_bytes_per_id: int = _p(12, "bytes", "[jte] preprocess_sparse_dense_matmul_input: CSR entry = "
                                            "int32 id + int32 sample + float32 gain")
    """Bytes of one CSR input entry the SparseCore reads. Default 12."""

    activation_bytes: int = _p(4, "bytes", "float32 activations and gradients (scwork.memory "
                                           "ACTIVATION_BYTES)")
    """Bytes of one activation / activation-gradient element (SC <-> TC through HBM). Default 4."""

    # -- ICI ------------------------------------------------------------------------------
    ici_index_bytes: int = _p(4, "bytes", "int32 id sent to the owner of each unique row "
                                          "([jte] preprocess_sparse_dense_matmul_input)")
    """Bytes sent besides each unique row over ICI (its id). Default 4."""

    ici_link_bytes_per_s: float | None = _p(None, "bytes/s", "catalog ici_link_bytes_per_s ([cloud-tpu])")
    """ICI bandwidth per link and direction; None: the chip's catalog value."""

    ici_latency_s: float | None = _p(None, "s", "scwork.collectives.ICI_LATENCY_S = 1e-6 "
                                                "(scaling-book: ~1 us per hop)")
    """ICI latency per hop; None: :data:`scwork.collectives.ICI_LATENCY_S`."""

    ici_schedule_max_nodes: int = _p(64, "nodes", "scwork choice: the explicit ring schedule costs "
                                                  "O(N^2) messages")
    """Rings (a 1-D slice, or one axis of a grid) of up to this many devices get their
    all-to-all time from the collectives engine's explicit schedule
    (:func:`scwork.collectives.all_to_all` + its alpha-beta cost); longer ones from the
    closed form ``V / (4 * 2W)`` (scaling-book). Default 64."""

    # -- TensorCore ---------------------------------------------------------------------
    tc_efficiency: float = _p(1.0, "1", "assumption: FLOPs run at peak unless you say otherwise")
    """Fraction of ``tc_peak_flops`` achieved when TensorCore time comes from FLOPs. Default 1.0."""

    tc_backward_to_forward: float = _p(2.0, "1", "standard training accounting: backward ~ 2x "
                                                 "forward FLOPs (Kaplan et al. 2020, 6N = 2N + 4N)")
    """Backward / forward ratio used when only the forward TensorCore time or FLOPs are
    given. Default 2.0."""

    def __post_init__(self) -> None:
        def check(name, value, *, integer=False, minimum=0, strict=False, maximum=None):
            if integer and maximum is None:
                maximum = 2**31 - 1     # counts and byte sizes per element: keeps int64 products exact
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ConfigError(f"StepModelParams.{name} must be a number, got {shown(value)}")
            if integer and not isinstance(value, numbers.Integral):
                raise ConfigError(f"StepModelParams.{name} must be an integer, got {shown(value)}")
            try:
                finite = math.isfinite(value)
            except OverflowError:       # an int beyond float range
                finite = False
            if not finite:
                raise ConfigError(f"StepModelParams.{name} must be finite, got {shown(value)}")
            if value < minimum or (strict and value == minimum):
                raise ConfigError(f"StepModelParams.{name} must be {'>' if strict else '>='} {minimum}, "
                                  f"got {shown(value)}")
            if maximum is not None and value > maximum:
                raise ConfigError(f"StepModelParams.{name} must be <= {maximum}, got {shown(value)}")

        check("host_ids_per_s", self.host_ids_per_s, strict=True)
        check("host_threads", self.host_threads, integer=True, minimum=1)
        check("host_overhead_s", self.host_overhead_s)
        check("chips_per_host", self.chips_per_host, integer=True, minimum=1)
        check("input_buffers", self.input_buffers, integer=True, minimum=1)
        check("sc_hbm_bandwidth_fraction", self.sc_hbm_bandwidth_fraction, strict=True, maximum=1.0)
        check("sc_tile_vector_ops_per_s", self.sc_tile_vector_ops_per_s, strict=True)
        check("sc_op_overhead_s", self.sc_op_overhead_s)
        if not isinstance(self.dma_compute_overlap, bool):
            raise ConfigError(f"StepModelParams.dma_compute_overlap must be True or False, "
                              f"got {shown(self.dma_compute_overlap)}")
        check("combine_ops_per_element", self.combine_ops_per_element, integer=True, minimum=1)
        check("dequantize_ops_per_element", self.dequantize_ops_per_element, integer=True)
        check("csr_bytes_per_id", self.csr_bytes_per_id, integer=True)
        check("activation_bytes", self.activation_bytes, integer=True, minimum=1)
        check("ici_index_bytes", self.ici_index_bytes, integer=True)
        if not isinstance(self.optimizer_ops_per_element, Mapping):
            raise ConfigError("StepModelParams.optimizer_ops_per_element must be a mapping "
                              f"optimizer -> int, got {shown(self.optimizer_ops_per_element)}")
        ops = {}
        for key, value in self.optimizer_ops_per_element.items():
            check(f"optimizer_ops_per_element[{shown(key)}]", value, integer=True, minimum=1)
            ops[str(key)] = int(value)
        object.__setattr__(self, "optimizer_ops_per_element", MappingProxyType(ops))
        if self.ici_link_bytes_per_s is not None:
            check("ici_link_bytes_per_s", self.ici_link_bytes_per_s, strict=True)
        if self.ici_latency_s is not None:
            check("ici_latency_s", self.ici_latency_s)
        check("ici_schedule_max_nodes", self.ici_schedule_max_nodes, integer=True, minimum=1)
        check("tc_efficiency", self.tc_efficiency, strict=True, maximum=1.0)
        check("tc_backward_to_forward", self.tc_backward_to_forward)

    def __hash__(self) -> int:  # MappingProxyType is not hashable
        values = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            values.append(tuple(sorted(v.items())) if isinstance(v, Mapping) else v)
        return hash(tuple(values))

    def replace(self, **changes: Any) -> "StepModelParams":
        """A copy with some fields changed (validated again)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown StepModelParams field(s) {sorted(unknown)}; fields are "
                              f"{[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes)

    def optimizer_ops(self, optimizer: str) -> int:
        """Vector instructions per element of ``optimizer``'s update.

        Raises
        ------
        ConfigError
            The optimizer has no entry in ``optimizer_ops_per_element``.
        """
        try:
            return self.optimizer_ops_per_element[optimizer]
        except KeyError:
            raise ConfigError(
                f"no vector-op count for optimizer {shown(optimizer)}; pass "
                f"StepModelParams(optimizer_ops_per_element={{..., {shown(optimizer)}: n}})") from None

    @classmethod
    def describe(cls, params: "StepModelParams | None" = None) -> list[dict[str, Any]]:
        """One row per field: ``name``, ``value``, ``default``, ``unit``, ``source``.

        Parameters
        ----------
        params : StepModelParams, optional
            Whose values to show (default: the defaults).
        """
        params = cls() if params is None else params
        defaults = cls()
        rows = []
        for f in dataclasses.fields(cls):
            value = getattr(params, f.name)
            default = getattr(defaults, f.name)
            if isinstance(value, Mapping):
                value, default = dict(value), dict(default)
            rows.append({"name": f.name, "value": value, "default": default,
                         "unit": f.metadata.get("unit", ""), "source": f.metadata.get("source", "")})
        return rows
