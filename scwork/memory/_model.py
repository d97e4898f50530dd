"""Core of the memory model: the model resolved once, numbers recomputed per knob setting.

Everything here is plain Python and numpy (no xarray): :func:`scwork.memory.plan`
must stay well under 50 ms for ~30 tables, and the fix searches of the diagnoses
re-evaluate the model many times. The public modules (:mod:`~scwork.memory.spmem`,
:mod:`~scwork.memory.hbm`, :mod:`~scwork.memory.timeline`,
:mod:`~scwork.memory.report`) build their xarray views from these numbers lazily.

Two objects:

- :class:`Model`: what does not change when a knob moves: the tables (vocabulary,
  width, optimizer, slot count, dtype), the stacks (which tables, how many
  features, configured / observed limits, ids per sample) and the chip.
- :class:`Knobs`: everything a user sweeps (batch, chips, limits, dtype,
  serialization, prefetch depth, heap sizes, capacities).

:func:`spmem_numbers` and :func:`hbm_numbers` evaluate one ``(Model, Knobs)`` pair.
"""

from __future__ import annotations

from scwork._rounding import ceil_div, round_up  # round_up re-exported for the memory modules

import dataclasses
import math
import numbers
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scwork._validate import shown
from scwork.errors import ConfigError

__all__ = [
    "ACTIVATION_BYTES",
    "INDEX_BYTES",
    "GAIN_BYTES",
    "CSR_ALIGNMENT",
    "DTYPE_SIZES",
    "OPTIMIZER_SLOTS",
    "CATEGORIES",
    "TableInfo",
    "StackInfo",
    "Model",
    "Knobs",
    "estimate_limits",
    "optimizer_slot_count",
    "round_up",
]


#: Bytes of one activation / gradient / gather-operand element (float32 accumulation).
ACTIVATION_BYTES = 4
#: Bytes of one embedding id, sample id or row pointer (int32 on the device,
#: [jte] preprocess_sparse_dense_matmul_input).
INDEX_BYTES = 4
#: Bytes of one gain (float32, [jte] preprocess_sparse_dense_matmul_input).
GAIN_BYTES = 4
#: CSR partitions start at multiples of 8 entries (TPU vector-register alignment,
#: [jte] preprocess_sparse_dense_matmul_input).
CSR_ALIGNMENT = 8

#: Table dtypes and their sizes in bytes (as :mod:`scwork.layout.embedding`).
DTYPE_SIZES: dict[str, int] = {"f32": 4, "bf16": 2, "f16": 2, "s8": 1}
_DTYPE_ALIASES = {"float32": "f32", "fp32": "f32", "bfloat16": "bf16", "float16": "f16",
                  "fp16": "f16", "int8": "s8", "i8": "s8"}

#: Slot variables (arrays of the table's shape) each optimizer keeps per table.
#: jax-tpu-embedding ``embedding_spec.py`` slot namedtuples: sgd (), adagrad
#: (accumulator), adam (momentum, velocity), adagrad_momentum (accumulator, momentum),
#: ftrl (accumulator, linear), laprop (mu, nu). TensorFlow TPU embedding optimizers
#: (``tpu_embedding_v2_utils.py``): momentum (momenta), rmsprop (ms, mom),
#: centered_rmsprop (ms, mom, mg), adadelta (accumulator, update), proximal_adagrad
#: (accumulator), proximal_yogi (v, m). LAMB by its definition (You et al. 2019):
#: first and second moments (m, v).
OPTIMIZER_SLOTS: dict[str, int] = {
    "sgd": 0,
    "adagrad": 1,
    "adagrad_momentum": 2,
    "adam": 2,
    "ftrl": 2,
    "laprop": 2,
    "momentum": 1,
    "lamb": 2,
    "rmsprop": 2,
    "centered_rmsprop": 3,
    "adadelta": 2,
    "proximal_adagrad": 1,
    "proximal_yogi": 2,
}

#: HBM categories, in the order the reports list them.
CATEGORIES: tuple[str, ...] = (
    "tables",
    "optimizer_slots",
    "sc_forward_stack",
    "sc_backward_stack",
    "staged_gather_operands",
    "embedding_activations",
    "embedding_gradients",
    "tensorcore_activations",
    "dense_weights",
    "constants",
    "prefetch",
)
#: Categories XLA counts as SparseCore HBM usage (the rest: TensorCore and host heap).
SPARSECORE_CATEGORIES = frozenset(
    {"tables", "optimizer_slots", "sc_forward_stack", "sc_backward_stack", "staged_gather_operands"}
)
_CAT_INDEX = {c: i for i, c in enumerate(CATEGORIES)}


#: Prefetched input steps listed one buffer each; a deeper prefetch is one buffer.
_NAMED_PREFETCH_STEPS = 64
_INT64_MAX = 2**63 - 1


# --------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------
def finite(value: Any) -> bool:
    """``math.isfinite`` that says False (instead of raising) for ints beyond float range."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_int(name: str, value: Any, *, minimum: int = 0, allow_none: bool = False,
              unit: str = "", maximum: int | None = None) -> int | None:
    """``value`` as an int >= ``minimum`` (and <= ``maximum``; integral floats accepted), else ConfigError."""
    if value is None and allow_none:
        return None
    unit_text = f" {unit}" if unit else ""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer >= {minimum}{unit_text}, got {shown(value)}")
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        if not finite(value) or value != int(value):
            raise ConfigError(f"{name} must be an integer >= {minimum}{unit_text}, got {shown(value)}")
        value = int(value)
    try:
        number = operator.index(value)
    except TypeError:
        raise ConfigError(
            f"{name} must be an integer >= {minimum}{unit_text}, got {shown(value)} ({type(value).__name__})"
        ) from None
    if number < minimum:
        raise ConfigError(f"{name} must be >= {minimum}{unit_text}, got {shown(number)}")
    if maximum is not None and number > maximum:
        raise ConfigError(f"{name} must be <= {maximum:,}{unit_text}, got {shown(number)}")
    return int(number)


def parse_dtype(dtype: Any, where: str = "dtype") -> tuple[str, int]:
    """``(canonical name, itemsize)`` of a table dtype, else ConfigError."""
    key = dtype.strip().lower() if isinstance(dtype, str) else None    # dtypes are names
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_SIZES:
        raise ConfigError(f"{where} must be one of {', '.join(DTYPE_SIZES)}, got {shown(dtype)}")
    return key, DTYPE_SIZES[key]


def optimizer_slot_count(optimizer: str, custom: Mapping[str, int] | None = None) -> int:
    """Slot variables the optimizer keeps per table (each of the table's padded shape).

    Parameters
    ----------
    optimizer : str
        Optimizer name (case-insensitive), see :data:`OPTIMIZER_SLOTS`.
    custom : mapping, optional
        Extra or overriding ``{name: slot count}`` for optimizers scwork does not know.

    Raises
    ------
    ConfigError
        Unknown optimizer; the message lists the known ones and how to add one.

    Examples
    --------
    >>> optimizer_slot_count("adam"), optimizer_slot_count("sgd")
    (2, 0)
    >>> optimizer_slot_count("shampoo", custom={"shampoo": 4})
    4
    """
    if not isinstance(optimizer, str):
        raise ConfigError(f"optimizer must be a name (str), got {shown(optimizer)}")
    key = optimizer.strip().lower()
    table = dict(OPTIMIZER_SLOTS)
    if custom is not None and not isinstance(custom, Mapping):
        raise ConfigError(f"optimizer_slots must be a dict optimizer name -> slot count, got {shown(custom)}")
    if custom:
        for name, count in custom.items():
            if not isinstance(name, str):
                raise ConfigError(f"optimizer_slots keys must be optimizer names, got {shown(name)}")
            table[name.strip().lower()] = check_int(f"optimizer_slots[{shown(name)}]", count, minimum=0,
                                                   unit="slot variables")
    if key not in table:
        raise ConfigError(
            f"unknown optimizer {shown(optimizer)}: known optimizers are {', '.join(sorted(table))}; "
            f"for another one pass optimizer_slots={{{shown(optimizer)}: <number of slot variables>}}"
        )
    return table[key]


def estimate_limits(samples_per_sc: int, ids_per_sample: float, num_partitions: int) -> tuple[int, int]:
    """Closed-form estimate of ``(max_ids_per_partition, max_unique_ids_per_partition)`` ([sc-guide] §6).

    With ``L = samples_per_sc * ids_per_sample`` (ids one source SparseCore sends
    for one stack) and ``peak = 0.2 L + 0.8 L / P + 2 sqrt(L / P)``:
    ``max_ids = round_up(1.25 peak, 8)``, ``max_unique = round_up(0.625 peak, 8)``
    (fractional values are rounded up to the next multiple of 8). Both are at
    least 8.

    Examples
    --------
    L = 128 * 4 = 512, P = 16: peak = 102.4 + 25.6 + 2 * sqrt(32) = 139.31;
    1.25 peak = 174.1 -> 176; 0.625 peak = 87.1 -> 88.

    >>> estimate_limits(128, 4, 16)
    (176, 88)
    """
    samples_per_sc = check_int("samples_per_sc", samples_per_sc, minimum=0, unit="samples")
    num_partitions = check_int("num_partitions", num_partitions, minimum=1, unit="partitions")
    if not isinstance(ids_per_sample, numbers.Real) or isinstance(ids_per_sample, bool) \
            or not finite(ids_per_sample) or ids_per_sample < 0:
        raise ConfigError(f"ids_per_sample must be a finite number >= 0, got {shown(ids_per_sample)}")
    L = samples_per_sc * float(ids_per_sample)
    peak = 0.2 * L + 0.8 * L / num_partitions + 2.0 * math.sqrt(L / num_partitions)
    max_ids = max(CSR_ALIGNMENT, CSR_ALIGNMENT * math.ceil(1.25 * peak / CSR_ALIGNMENT - 1e-12))
    max_unique = max(CSR_ALIGNMENT, CSR_ALIGNMENT * math.ceil(0.625 * peak / CSR_ALIGNMENT - 1e-12))
    return int(max_ids), int(max_unique)


# --------------------------------------------------------------------------------------
# the resolved model
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableInfo:
    """One embedding table as the memory model sees it."""

    name: str
    stack: str
    vocab_size: int
    embedding_dim: int
    optimizer: str
    slot_count: int
    dtype: str
    """Table dtype before any what-if override (see :attr:`Knobs.dtype_override`)."""
    slot_dtype: str | None
    """Slot dtype; None: the table's dtype."""


@dataclass(frozen=True)
class StackInfo:
    """One stacked table (the logical table the compiler sees)."""

    name: str
    tables: tuple[str, ...]
    features: tuple[str, ...]
    dims: tuple[int, ...]
    """Raw embedding dims of ``tables`` (same order)."""
    dtype: str
    optimizer: str
    configured_max_ids: int | None
    configured_max_unique: int | None
    stats_max_ids: int | None
    stats_max_unique: int | None
    ids_per_sample: float | None
    """Ids per sample summed over the stack's features, for the closed-form estimate ([sc-guide] §6)."""
    feature_dims: tuple[int, ...] = ()
    """Raw dim of the table each feature looks up (same order as ``features``)."""
    static_entries_per_sc: int | None = None
    """CSR entries of one SparseCore's buffer when the stack has a static size
    (``suggested_coo_buffer_size_per_device``), else None: sized from the limits."""

    @property
    def num_features(self) -> int:
        return len(self.features)


@dataclass(frozen=True)
class Model:
    """Tables, stacks and chip of a model: what does not move with the knobs."""

    tables: tuple[TableInfo, ...]
    stacks: tuple[StackInfo, ...]
    chip: Any
    """The :class:`~scwork.hardware.TpuChip` (possibly with user overrides)."""
    plan: Any = None
    """The :class:`~scwork.sharding.StackingPlan` the stacks come from."""
    rebuild: Any = field(default=None, compare=False, repr=False)
    """With automatic stacking: ``rebuild(batch_size, num_chips) -> (Model, Knobs)`` re-plans the
    stacks (their grouping depends on the samples per SparseCore); None otherwise."""
    built_for: tuple[int, int] = (0, 0)
    """``(batch_size, num_chips)`` the stacks were planned for."""

    def at(self, knobs: "Knobs") -> tuple["Model", "Knobs"]:
        """The model to evaluate ``knobs`` with: automatic stacking is re-planned when the
        batch or the chip count differs from :attr:`built_for` (what-if searches)."""
        if self.rebuild is None or (knobs.batch_size, knobs.num_chips) == self.built_for:
            return self, knobs
        model, fresh = self.rebuild(knobs.batch_size, knobs.num_chips)
        return model, dataclasses.replace(knobs, limits=fresh.limits, stack_limits=fresh.stack_limits)

    def stack_index(self, name: str) -> int:
        for i, st in enumerate(self.stacks):
            if st.name == name:
                return i
        raise ConfigError(f"no stack {shown(name)}; stacks are {[s.name for s in self.stacks]}")


@dataclass(frozen=True)
class Knobs:
    """Everything a user may sweep. Build it with :func:`resolve`; change it with ``replace``."""

    batch_size: int
    num_chips: int
    sparsecores_per_chip: int
    devices_per_chip: int
    tiles_per_sparsecore: int
    tile_spmem_bytes: int | None
    hbm_bytes: int
    hbm_bandwidth_bytes_per_s: float
    line_bytes: int
    stage_gather_operands_in_hbm: bool = False
    num_serialized_tables: int = 1
    dense_weights_bytes: int = 0
    constants_bytes: int = 0
    tensorcore_activation_bytes: int = 0
    prefetch_bytes_per_step: int | None = None
    maximum_parallel_iterations: int = 1
    headroom: float = 0.1
    logical_replica_count: int | None = None
    dtype_override: str | None = None
    limits: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)
    """Per-stack ``(max_ids, max_unique)`` overriding everything (``stack_limits`` / ``limits``)."""
    stack_limits: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)
    """The explicit per-stack part of :attr:`limits` (the user's ``stack_limits``)."""

    def replace(self, **changes) -> "Knobs":
        return dataclasses.replace(self, **changes)

    @property
    def num_partitions(self) -> int:
        """``P``: SparseCores of the whole system."""
        return self.num_chips * self.sparsecores_per_chip

    @property
    def samples_per_sc(self) -> int:
        """``n = ceil(B / P)``: samples of one feature each source SparseCore handles."""
        return ceil_div(self.batch_size, self.num_partitions)

    @property
    def batch_divides(self) -> bool:
        return self.batch_size % self.num_partitions == 0

    @property
    def usable_hbm_bytes(self) -> int:
        """``floor(hbm_bytes * (1 - headroom))``."""
        return int(math.floor(self.hbm_bytes * (1.0 - self.headroom)))

    @property
    def lrc(self) -> int:
        """The logical replica count used by the HBM stack formula (default ``P``)."""
        return self.num_partitions if self.logical_replica_count is None else self.logical_replica_count


def table_dtype(model: Model, knobs: Knobs, table: TableInfo) -> tuple[str, int]:
    return parse_dtype(knobs.dtype_override or table.dtype)


def stack_dtype(knobs: Knobs, stack: StackInfo) -> tuple[str, int]:
    return parse_dtype(knobs.dtype_override or stack.dtype)


def padded_dim(dim: int, itemsize: int, line_bytes: int) -> int:
    """``round_up(dim, line_bytes / itemsize)``: rows padded to whole DMA lines."""
    return round_up(dim, max(1, line_bytes // itemsize))


def stack_width(knobs: Knobs, stack: StackInfo) -> int:
    """Width of a stack: the largest padded dim of its tables (elements)."""
    _, itemsize = stack_dtype(knobs, stack)
    return max(padded_dim(d, itemsize, knobs.line_bytes) for d in stack.dims)


def stack_limits(knobs: Knobs, stack: StackInfo) -> tuple[int, int, str]:
    """``(max_ids, max_unique, source)`` the compiler sizes buffers for.

    Priority: explicit ``knobs.limits`` > limits configured on the tables / stacking
    plan > observed statistics > the closed-form estimate ([sc-guide] §6) from
    ``ids_per_sample``. A missing
    ``max_unique`` with a known ``max_ids`` is taken equal to ``max_ids`` (every id
    may be distinct). ``source`` names where each came from, e.g. ``"configured"``
    or ``"stats/max_ids"``.
    """
    over = knobs.limits.get(stack.name) if knobs.limits else None
    ids, uniq = (over if over is not None else (None, None))
    src_ids = src_uniq = "override"
    if ids is None:
        ids, src_ids = stack.configured_max_ids, "configured"
    if uniq is None:
        uniq, src_uniq = stack.configured_max_unique, "configured"
    estimate = None
    if ids is None or uniq is None:
        if stack.stats_max_ids is not None and ids is None:
            ids, src_ids = stack.stats_max_ids, "stats"
        if stack.stats_max_unique is not None and uniq is None:
            uniq, src_uniq = stack.stats_max_unique, "stats"
        if (ids is None or uniq is None) and stack.ids_per_sample is not None:
            estimate = estimate_limits(knobs.samples_per_sc, stack.ids_per_sample, knobs.num_partitions)
            if ids is None:
                ids, src_ids = estimate[0], "estimate"
            if uniq is None:
                uniq, src_uniq = estimate[1], "estimate"
    if ids is None:
        raise ConfigError(
            f"stack {shown(stack.name)} has no max_ids_per_partition: SPMEM and HBM buffers are sized by the "
            "limits. Set TableSpec(max_ids_per_partition=..., max_unique_ids_per_partition=...), pass "
            "stack_limits={stack: (max_ids, max_unique)} or limits=(max_ids, max_unique), "
            "stats=scwork.sharding.compute_stats(...) (observed limits), or ids_per_sample=... "
            "(the closed-form estimate of [sc-guide] §6, xla_sparse_core_estimate_max_ids)"
        )
    if uniq is None:
        uniq, src_uniq = ids, "max_ids"
    source = src_ids if src_ids == src_uniq else f"{src_ids}/{src_uniq}"
    return int(ids), int(uniq), source
