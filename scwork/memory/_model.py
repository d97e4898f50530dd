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

import dataclasses
import math
import numbers
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
    "SpmemNumbers",
    "HbmNumbers",
    "estimate_limits",
    "optimizer_slot_count",
    "round_up",
    "spmem_numbers",
    "hbm_numbers",
    "resolve",
]

#: Bytes of one activation / gradient / gather-operand element (float32 accumulation).
ACTIVATION_BYTES = 4
#: Bytes of one embedding id, sample id or row pointer (int32 on the device, jax-tpu-embedding's preprocess_sparse_dense_matmul_input).
INDEX_BYTES = 4
#: Bytes of one gain (float32, jax-tpu-embedding's preprocess_sparse_dense_matmul_input).
GAIN_BYTES = 4
#: CSR partitions start at multiples of 8 entries (TPU vector-register alignment, jax-tpu-embedding's preprocess_sparse_dense_matmul_input).
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


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is ``>= value``.

    >>> round_up(13, 8), round_up(0, 8)
    (16, 0)
    """
    return -(-value // multiple) * multiple


# --------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------
def check_int(name: str, value: Any, *, minimum: int = 0, allow_none: bool = False,
              unit: str = "") -> int | None:
    """``value`` as an int >= ``minimum`` (integral floats accepted), else ConfigError."""
    if value is None and allow_none:
        return None
    unit_text = f" {unit}" if unit else ""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer >= {minimum}{unit_text}, got {value!r}")
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        if not math.isfinite(value) or value != int(value):
            raise ConfigError(f"{name} must be an integer >= {minimum}{unit_text}, got {value!r}")
        value = int(value)
    try:
        number = operator.index(value)
    except TypeError:
        raise ConfigError(
            f"{name} must be an integer >= {minimum}{unit_text}, got {value!r} ({type(value).__name__})"
        ) from None
    if number < minimum:
        raise ConfigError(f"{name} must be >= {minimum}{unit_text}, got {number}")
    return int(number)


def parse_dtype(dtype: Any, where: str = "dtype") -> tuple[str, int]:
    """``(canonical name, itemsize)`` of a table dtype, else ConfigError."""
    key = dtype.strip().lower() if isinstance(dtype, str) else dtype
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_SIZES:
        raise ConfigError(f"{where} must be one of {', '.join(DTYPE_SIZES)}, got {dtype!r}")
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
        raise ConfigError(f"optimizer must be a name (str), got {optimizer!r}")
    key = optimizer.strip().lower()
    table = dict(OPTIMIZER_SLOTS)
    if custom:
        for name, count in custom.items():
            if not isinstance(name, str):
                raise ConfigError(f"optimizer_slots keys must be optimizer names, got {name!r}")
            table[name.strip().lower()] = check_int(f"optimizer_slots[{name!r}]", count, minimum=0,
                                                   unit="slot variables")
    if key not in table:
        raise ConfigError(
            f"unknown optimizer {optimizer!r}: known optimizers are {', '.join(sorted(table))}; "
            f"for another one pass optimizer_slots={{{optimizer!r}: <number of slot variables>}}"
        )
    return table[key]


def estimate_limits(samples_per_sc: int, ids_per_sample: float, num_partitions: int) -> tuple[int, int]:
    """jax-tpu-embedding's preprocess_sparse_dense_matmul_input closed-form estimate of ``(max_ids_per_partition, max_unique_ids_per_partition)``.

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
            or not math.isfinite(ids_per_sample) or ids_per_sample < 0:
        raise ConfigError(f"ids_per_sample must be a finite number >= 0, got {ids_per_sample!r}")
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
    """Ids per sample summed over the stack's features (for the jax-tpu-embedding's preprocess_sparse_dense_matmul_input estimate)."""
    feature_dims: tuple[int, ...] = ()
    """Raw dim of the table each feature looks up (same order as ``features``)."""

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
        raise ConfigError(f"no stack {name!r}; stacks are {[s.name for s in self.stacks]}")


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
        return -(-self.batch_size // self.num_partitions)

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
    plan > observed statistics > jax-tpu-embedding's preprocess_sparse_dense_matmul_input estimate from ``ids_per_sample``. A missing
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
            f"stack {stack.name!r} has no max_ids_per_partition: SPMEM and HBM buffers are sized by the "
            "limits. Set TableSpec(max_ids_per_partition=..., max_unique_ids_per_partition=...), pass "
            "stack_limits={stack: (max_ids, max_unique)} or limits=(max_ids, max_unique), "
            "stats=scwork.sharding.compute_stats(...) (observed limits), or ids_per_sample=... "
            "(jax-tpu-embedding's preprocess_sparse_dense_matmul_input closed-form estimate)"
        )
    if uniq is None:
        uniq, src_uniq = ids, "max_ids"
    source = src_ids if src_ids == src_uniq else f"{src_ids}/{src_uniq}"
    return int(ids), int(uniq), source


# --------------------------------------------------------------------------------------
# SPMEM
# --------------------------------------------------------------------------------------
#: SPMEM buffers of one tile, in report order, with the allocation class the compiler
#: reports them in (E3001: fixed_size_allocation_bytes / row_dependent_size_allocation_bytes).
SPMEM_BUFFERS: tuple[tuple[str, str], ...] = (
    ("gather_operand", "fixed"),
    ("row_pointers", "fixed"),
    ("unique_ids", "fixed"),
    ("gathered_rows", "fixed"),
    ("embedding_ids", "row_dependent"),
    ("sample_ids", "row_dependent"),
    ("gains", "row_dependent"),
)


def tile_buffer_bytes(max_ids: int, max_unique: int, feature_width: int, sample_count: int, *,
                      num_partitions: int, num_tiles: int, itemsize: int,
                      stage_gather_operands_in_hbm: bool) -> tuple[int, ...]:
    """Bytes of every buffer of :data:`SPMEM_BUFFERS` on one tile (see :mod:`scwork.memory.spmem`)."""
    ids = round_up(max_ids, CSR_ALIGNMENT)
    uniq = round_up(max_unique, CSR_ALIGNMENT)
    gather = 0 if stage_gather_operands_in_hbm else \
        -(-(sample_count * feature_width) // num_tiles) * ACTIVATION_BYTES
    return (
        gather,
        max(num_partitions, CSR_ALIGNMENT) * INDEX_BYTES,
        uniq * INDEX_BYTES,
        uniq * feature_width * itemsize,
        ids * INDEX_BYTES,
        ids * INDEX_BYTES,
        ids * GAIN_BYTES,
    )


@dataclass
class SpmemNumbers:
    """SPMEM per tile of every stack (arrays over stacks)."""

    stacks: tuple[str, ...]
    feature_width: np.ndarray
    itemsize: np.ndarray
    max_ids: np.ndarray
    max_unique: np.ndarray
    limit_source: tuple[str, ...]
    sample_count: np.ndarray
    buffers: np.ndarray
    """``(stack, buffer)`` bytes per tile, buffers as :data:`SPMEM_BUFFERS`."""
    capacity: int | None

    @property
    def fixed(self) -> np.ndarray:
        return self.buffers[:, :4].sum(axis=1)

    @property
    def row_dependent(self) -> np.ndarray:
        return self.buffers[:, 4:].sum(axis=1)

    @property
    def total(self) -> np.ndarray:
        return self.buffers.sum(axis=1)

    @property
    def fits(self) -> np.ndarray:
        if self.capacity is None:
            raise ConfigError("TileSpmem capacity unknown")
        return self.total <= self.capacity


def require_tile_spmem(model: Model, knobs: Knobs) -> int:
    if knobs.tile_spmem_bytes is None:
        name = getattr(model.chip, "name", "this chip")
        raise ConfigError(
            f"TileSpmem per tile of {getattr(model.chip, 'marketing_name', name)} is not published, so the "
            "SPMEM model needs it as a parameter: pass tile_spmem_bytes=... (bytes per tile; v5p and "
            "TPU7x have 512 KiB = 524288, v6e 256 KiB = 262144) or a chip with it set, e.g. "
            f"chip=scwork.hardware.override({name!r}, tile_spmem_bytes=524288)"
        )
    return knobs.tile_spmem_bytes


def spmem_numbers(model: Model, knobs: Knobs, *, require_capacity: bool = True,
                  only: Sequence[int] | None = None) -> SpmemNumbers:
    """SPMEM of every stack (or of the stacks with index in ``only``)."""
    capacity = require_tile_spmem(model, knobs) if require_capacity else knobs.tile_spmem_bytes
    index = range(len(model.stacks)) if only is None else only
    P = knobs.num_partitions
    n = knobs.samples_per_sc
    rows, widths, sizes, ids_, uniq_, srcs, samples = [], [], [], [], [], [], []
    for i in index:
        st = model.stacks[i]
        _, itemsize = stack_dtype(knobs, st)
        fw = stack_width(knobs, st)
        M, U, src = stack_limits(knobs, st)
        sc = st.num_features * n
        buffers = tile_buffer_bytes(M, U, fw, sc, num_partitions=P, num_tiles=knobs.tiles_per_sparsecore,
                                    itemsize=itemsize,
                                    stage_gather_operands_in_hbm=knobs.stage_gather_operands_in_hbm)
        if any(int(b) > _INT64_MAX // 64 for b in buffers):
            raise ConfigError(
                f"stack {model.stacks[i].name!r}: its SPMEM buffers ({max(int(b) for b in buffers):,} bytes per "
                f"tile for width {fw:,}, limits {M:,}/{U:,}) are beyond what scwork's 64-bit byte counts hold "
                "(and any TileSpmem); check embedding_dim and the limits")
        rows.append(buffers)
        widths.append(fw)
        sizes.append(itemsize)
        ids_.append(M)
        uniq_.append(U)
        srcs.append(src)
        samples.append(sc)
    return SpmemNumbers(
        stacks=tuple(model.stacks[i].name for i in index),
        feature_width=np.asarray(widths, np.int64),
        itemsize=np.asarray(sizes, np.int64),
        max_ids=np.asarray(ids_, np.int64),
        max_unique=np.asarray(uniq_, np.int64),
        limit_source=tuple(srcs),
        sample_count=np.asarray(samples, np.int64),
        buffers=np.asarray(rows, np.int64).reshape(len(rows), len(SPMEM_BUFFERS)),
        capacity=capacity,
    )


# --------------------------------------------------------------------------------------
# HBM and the step timeline
# --------------------------------------------------------------------------------------
@dataclass
class HbmNumbers:
    """HBM of one chip over one training step (see :mod:`scwork.memory.hbm`)."""

    # tables
    table_bytes: np.ndarray
    slot_bytes: np.ndarray
    table_waste: np.ndarray
    slot_waste: np.ndarray
    table_padded_vocab: np.ndarray
    table_width: np.ndarray
    table_itemsize: np.ndarray
    table_slot_itemsize: np.ndarray
    # stacks
    feature_width: np.ndarray
    max_ids: np.ndarray
    max_unique: np.ndarray
    limit_source: tuple[str, ...]
    sample_count: np.ndarray
    fwd_stack_sc: np.ndarray
    bwd_stack_sc: np.ndarray
    fwd_stack: np.ndarray
    bwd_stack: np.ndarray
    fwd_waste: np.ndarray
    bwd_waste: np.ndarray
    staged_gather: np.ndarray
    activations: np.ndarray
    activation_waste: np.ndarray
    csr_bytes: np.ndarray
    csr_waste: np.ndarray
    fwd_traffic: np.ndarray
    bwd_traffic: np.ndarray
    # serialization
    chain: tuple[int, ...]
    """Stack indices processed one at a time, in order (empty: all concurrently)."""
    num_slots: int
    # heap
    prefetch_per_step: int
    prefetch_computed: bool
    # timeline arrays (one entry per interval)
    iv_name: list
    iv_category: np.ndarray
    iv_bytes: np.ndarray
    iv_waste: np.ndarray
    iv_start: np.ndarray
    iv_end: np.ndarray
    iv_stack: list
    iv_table: list
    ev_name: list
    ev_phase: list
    ev_start_s: np.ndarray
    ev_end_s: np.ndarray
    usage: np.ndarray
    """Bytes live in each event."""
    usage_by_category: np.ndarray
    """``(event, category)`` bytes live."""
    capacity: int
    usable: int

    @property
    def num_events(self) -> int:
        return len(self.ev_name)

    @property
    def peak_bytes(self) -> int:
        return int(self.usage.max())

    @property
    def peak_event(self) -> int:
        return int(self.usage.argmax())

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.usable


def _serialization(num_serialized: int, order_key: np.ndarray) -> tuple[tuple[int, ...], int]:
    """Chain of stacks processed one at a time and the number of slots of an SC phase.

    Model of ``xla_sc_num_serialized_tables_to_optimize_hbm = N``: the ``N`` stacks
    with the largest forward stack (ties: program order) run one after another,
    each in its own slot; the other stacks run concurrently with that chain and are
    live through the whole phase. ``N <= 1`` is a chain of at most one table:
    everything concurrent.
    """
    T = len(order_key)
    if num_serialized <= 1 or T <= 1:
        return (), 1
    k = min(num_serialized, T)
    order = sorted(range(T), key=lambda i: (-int(order_key[i]), i))
    return tuple(order[:k]), k


def hbm_numbers(model: Model, knobs: Knobs, *, with_names: bool = True) -> HbmNumbers:
    """HBM of one chip and the step timeline for one knob setting."""
    chips = knobs.num_chips
    S = knobs.sparsecores_per_chip
    P = knobs.num_partitions
    n = knobs.samples_per_sc
    lrc = knobs.lrc
    bw = float(knobs.hbm_bandwidth_bytes_per_s)

    stack_pos = {st.name: i for i, st in enumerate(model.stacks)}
    T = len(model.stacks)
    widths = np.empty(T, np.int64)
    itemsizes = np.empty(T, np.int64)
    M = np.empty(T, np.int64)
    U = np.empty(T, np.int64)
    sources = []
    sample_count = np.empty(T, np.int64)
    act_waste = np.empty(T, np.int64)
    max_dim = np.empty(T, np.int64)
    for i, st in enumerate(model.stacks):
        _, itemsizes[i] = stack_dtype(knobs, st)
        widths[i] = stack_width(knobs, st)
        M[i], U[i], src = stack_limits(knobs, st)
        sources.append(src)
        sample_count[i] = st.num_features * n
        max_dim[i] = max(st.dims)
        dims = st.feature_dims or tuple(max(st.dims) for _ in st.features)
        act_waste[i] = S * n * ACTIVATION_BYTES * sum(int(widths[i]) - d for d in dims)

    # tables and slots: each chip holds padded_vocab / num_chips rows of the stack width
    nt = len(model.tables)
    t_bytes = np.empty(nt, np.int64)
    s_bytes = np.empty(nt, np.int64)
    t_waste = np.empty(nt, np.float64)
    s_waste = np.empty(nt, np.float64)
    t_pv = np.empty(nt, np.int64)
    t_w = np.empty(nt, np.int64)
    t_e = np.empty(nt, np.int64)
    t_se = np.empty(nt, np.int64)
    slots_of_stack = np.zeros(T, np.int64)
    for j, t in enumerate(model.tables):
        i = stack_pos[t.stack]
        _, e = parse_dtype(knobs.dtype_override or t.dtype)
        se = e if t.slot_dtype is None else parse_dtype(t.slot_dtype)[1]
        pv = round_up(t.vocab_size, CSR_ALIGNMENT * P)
        w = int(widths[i])
        rows = pv // chips
        t_pv[j], t_w[j], t_e[j], t_se[j] = pv, w, e, se
        # Exact byte counts in Python ints, refused before they could wrap in int64.
        largest = rows * w * max(e, se) * max(1, t.slot_count)
        if largest > _INT64_MAX // 64:
            raise ConfigError(
                f"table {t.name!r}: {pv:,} rows x {w:,} wide is {rows * w * e:,} bytes per chip, beyond what "
                f"scwork's 64-bit byte counts hold (and any HBM); check vocab_size and embedding_dim")
        t_bytes[j] = rows * w * e
        s_bytes[j] = t.slot_count * rows * w * se
        unpadded = t.vocab_size * t.embedding_dim / chips
        t_waste[j] = t_bytes[j] - unpadded * e
        s_waste[j] = s_bytes[j] - t.slot_count * unpadded * se
        slots_of_stack[i] = max(slots_of_stack[i], t.slot_count)

    fwd_sc = (2 * widths + 1) * U * lrc * 4
    bwd_sc = 3 * widths * U * lrc * 4
    fwd = S * fwd_sc
    bwd = S * bwd_sc
    fwd_w = S * 2 * (widths - max_dim) * U * lrc * 4
    bwd_w = S * 3 * (widths - max_dim) * U * lrc * 4
    acts = S * sample_count * widths * ACTIVATION_BYTES
    staged = acts.copy() if knobs.stage_gather_operands_in_hbm else np.zeros(T, np.int64)
    staged_w = act_waste if knobs.stage_gather_operands_in_hbm else np.zeros(T, np.int64)
    Mr = -(-M // CSR_ALIGNMENT) * CSR_ALIGNMENT
    csr_sc = max(P, CSR_ALIGNMENT) * INDEX_BYTES + Mr * P * (2 * INDEX_BYTES + GAIN_BYTES)
    csr = S * csr_sc
    csr_w = S * ((Mr - M) * P * (2 * INDEX_BYTES + GAIN_BYTES) + (max(P, CSR_ALIGNMENT) - P) * INDEX_BYTES)
    gathered = S * U * lrc * widths * itemsizes
    fwd_traffic = gathered + acts + csr
    bwd_traffic = acts + 2 * gathered * (1 + slots_of_stack) + csr

    if knobs.prefetch_bytes_per_step is None:
        per_step, computed = int(csr.sum()), True
    else:
        per_step, computed = int(knobs.prefetch_bytes_per_step), False

    chain, F = _serialization(knobs.num_serialized_tables, fwd + staged)
    chain_pos = {s: j for j, s in enumerate(chain)}
    E = 2 * F + 2
    ev_tc_fwd, ev_tc_bwd = F, F + 1

    # events and their modelled times (HBM-traffic lower bound)
    group = [i for i in range(T) if i not in chain_pos]
    group_fwd = float(fwd_traffic[group].sum()) if group else 0.0
    group_bwd = float(bwd_traffic[group].sum()) if group else 0.0
    durations = np.zeros(E)
    for j in range(F):
        c = chain[j] if chain else None
        durations[j] = ((float(fwd_traffic[c]) if c is not None else 0.0) + group_fwd / F) / bw
        durations[F + 2 + j] = ((float(bwd_traffic[c]) if c is not None else 0.0) + group_bwd / F) / bw
    durations[ev_tc_fwd] = (knobs.dense_weights_bytes + knobs.tensorcore_activation_bytes + acts.sum()) / bw
    durations[ev_tc_bwd] = (2 * knobs.dense_weights_bytes + knobs.tensorcore_activation_bytes + acts.sum()) / bw
    ev_end = np.cumsum(durations)
    ev_start = ev_end - durations

    # intervals: (name, category, bytes, waste, start, end, stack, table)
    names: list = []
    cats: list[int] = []
    byts: list[int] = []
    wastes: list[float] = []
    starts: list[int] = []
    ends: list[int] = []
    stacks_of: list = []
    tables_of: list = []

    def add(name, cat, nbytes, waste, start, end, stack=None, table=None):
        if nbytes == 0:  # nothing allocated: no interval
            return
        if with_names:
            names.append(name)
            stacks_of.append(stack)
            tables_of.append(table)
        cats.append(_CAT_INDEX[cat])
        byts.append(int(nbytes))
        wastes.append(float(waste))
        starts.append(start)
        ends.append(end)

    for j, t in enumerate(model.tables):
        add(f"table {t.name}", "tables", t_bytes[j], t_waste[j], 0, E, t.stack, t.name)
        if t.slot_count:
            add(f"slots {t.name}", "optimizer_slots", s_bytes[j], s_waste[j], 0, E, t.stack, t.name)
    add("dense weights", "dense_weights", knobs.dense_weights_bytes, 0, 0, E)
    add("constants", "constants", knobs.constants_bytes, 0, 0, E)
    csr_total_w = float(csr_w.sum()) if computed else 0.0
    depth = knobs.maximum_parallel_iterations
    if depth <= _NAMED_PREFETCH_STEPS:
        for k in range(depth):
            add(f"prefetched input {k}", "prefetch", per_step, csr_total_w, 0, E)
    else:
        # One buffer for a deep prefetch: the same bytes, without a loop (and a
        # list) as long as the depth, which may be 2**31 - 1.
        total = int(per_step) * depth
        if total > _INT64_MAX:
            raise ConfigError(
                f"maximum_parallel_iterations={depth} prefetches {total:,} bytes of input "
                f"({int(per_step):,} per step), beyond what a 64-bit byte count holds; use a depth of at "
                f"most {_INT64_MAX // max(int(per_step), 1):,}")
        add(f"prefetched input (x{depth} steps)", "prefetch", total, csr_total_w * depth, 0, E)
    for i, st in enumerate(model.stacks):
        if i in chain_pos:
            f0, f1 = chain_pos[i], chain_pos[i] + 1
            b0, b1 = F + 2 + chain_pos[i], F + 3 + chain_pos[i]
        else:
            f0, f1, b0, b1 = 0, F, F + 2, E
        add(f"SC forward stack {st.name}", "sc_forward_stack", fwd[i], fwd_w[i], f0, f1, st.name)
        if knobs.stage_gather_operands_in_hbm:
            add(f"staged gather operand {st.name}", "staged_gather_operands", staged[i], staged_w[i], f0, f1,
                st.name)
        add(f"activations {st.name}", "embedding_activations", acts[i], act_waste[i], f0, ev_tc_fwd + 1, st.name)
        add(f"gradients {st.name}", "embedding_gradients", acts[i], act_waste[i], ev_tc_bwd, b1, st.name)
        add(f"SC backward stack {st.name}", "sc_backward_stack", bwd[i], bwd_w[i], b0, b1, st.name)
    add("TensorCore activations", "tensorcore_activations", knobs.tensorcore_activation_bytes, 0,
        ev_tc_fwd, ev_tc_bwd + 1)

    cat_a = np.asarray(cats, np.int64)
    byte_a = np.asarray(byts, np.int64)
    start_a = np.asarray(starts, np.int64)
    end_a = np.asarray(ends, np.int64)
    diff = np.zeros((E + 1, len(CATEGORIES)), np.int64)
    np.add.at(diff, (start_a, cat_a), byte_a)
    np.add.at(diff, (end_a, cat_a), -byte_a)
    by_cat = np.cumsum(diff, axis=0)[:E]

    if with_names:
        ev_names = [f"SC forward slot {j}" if F > 1 else "SC forward" for j in range(F)]
        ev_names += ["TensorCore forward", "TensorCore backward"]
        ev_names += [f"SC backward slot {j}" if F > 1 else "SC backward" for j in range(F)]
        ev_phase = ["sc_forward"] * F + ["tc_forward", "tc_backward"] + ["sc_backward"] * F
    else:
        ev_names, ev_phase = [None] * E, [None] * E

    return HbmNumbers(
        table_bytes=t_bytes, slot_bytes=s_bytes, table_waste=t_waste, slot_waste=s_waste,
        table_padded_vocab=t_pv, table_width=t_w, table_itemsize=t_e, table_slot_itemsize=t_se,
        feature_width=widths, max_ids=M, max_unique=U, limit_source=tuple(sources),
        sample_count=sample_count, fwd_stack_sc=fwd_sc, bwd_stack_sc=bwd_sc, fwd_stack=fwd, bwd_stack=bwd,
        fwd_waste=fwd_w, bwd_waste=bwd_w, staged_gather=staged, activations=acts, activation_waste=act_waste,
        csr_bytes=csr, csr_waste=csr_w, fwd_traffic=fwd_traffic, bwd_traffic=bwd_traffic,
        chain=chain, num_slots=F, prefetch_per_step=per_step, prefetch_computed=computed,
        iv_name=names, iv_category=cat_a, iv_bytes=byte_a, iv_waste=np.asarray(wastes), iv_start=start_a,
        iv_end=end_a, iv_stack=stacks_of, iv_table=tables_of, ev_name=ev_names, ev_phase=ev_phase,
        ev_start_s=ev_start, ev_end_s=ev_end, usage=by_cat.sum(axis=1), usage_by_category=by_cat,
        capacity=knobs.hbm_bytes, usable=knobs.usable_hbm_bytes,
    )


# --------------------------------------------------------------------------------------
# resolving user inputs
# --------------------------------------------------------------------------------------
_KNOWN_KWARGS = (
    "batch_size", "stacking", "config", "stack_limits", "limits", "stats", "ids_per_sample", "dtype",
    "slot_dtype", "optimizers", "optimizer_slots", "chip", "num_chips", "tile_spmem_bytes", "hbm_bytes",
    "logical_replica_count", "stage_gather_operands_in_hbm", "num_serialized_tables", "dense_weights_bytes",
    "constants_bytes", "tensorcore_activation_bytes", "prefetch_bytes_per_step",
    "maximum_parallel_iterations", "headroom", "stack_limit_rule",
)


def _features(model: Any):
    from scwork.sharding import FeatureSpec, StackingPlan, TableSpec

    if isinstance(model, StackingPlan):
        return model.features, model
    if isinstance(model, (FeatureSpec, TableSpec)):
        model = [model]
    if isinstance(model, Mapping):
        items = list(model.values())
    else:
        try:
            items = list(model)
        except TypeError:
            raise ConfigError(
                "model must be a list of FeatureSpec or TableSpec, a mapping of them, or a "
                f"StackingPlan; got {type(model).__name__}"
            ) from None
    if not items:
        raise ConfigError("model has no tables; give at least one FeatureSpec or TableSpec")
    if all(isinstance(x, TableSpec) for x in items):
        return tuple(FeatureSpec(t.name, t) for t in items), None
    if all(isinstance(x, FeatureSpec) for x in items):
        return (model if isinstance(model, Mapping) else tuple(items)), None
    bad = [x for x in items if not isinstance(x, (FeatureSpec, TableSpec))]
    got = f"got {bad[0]!r}" if bad else "got a mix of both"
    raise ConfigError(
        "model must hold only FeatureSpec objects or only TableSpec objects (each table then has one "
        f"feature of the same name); {got}"
    )


def _stats_limits(stats: Any, stack: str) -> tuple[int | None, int | None]:
    if stats is None:
        return None, None
    try:
        names = [str(s) for s in stats["stack"].values]
    except (KeyError, TypeError):
        raise ConfigError("stats must be the Dataset of scwork.sharding.compute_stats (no 'stack' dim)") from None
    if stack not in names:
        raise ConfigError(
            f"stats has no stack {stack!r} (its stacks: {names}); compute the statistics with the same "
            "stacking as the memory model (pass the same stacking= or the StackingPlan)"
        )
    out = []
    for var in ("max_ids_per_partition", "max_unique_ids_per_partition"):
        if var not in stats:
            raise ConfigError(f"stats has no variable {var!r}; pass the Dataset of compute_stats")
        out.append(int(stats[var].sel(stack=stack).max()))
    return out[0], out[1]


def _limit_pair(where: str, value: Any) -> tuple[int | None, int | None]:
    if isinstance(value, Mapping):
        pair = (value.get("max_ids_per_partition"), value.get("max_unique_ids_per_partition"))
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        pair = (value[0], value[1])
    else:
        raise ConfigError(f"{where} must be (max_ids_per_partition, max_unique_ids_per_partition), got {value!r}")
    return (check_int(f"{where}[0] (max_ids_per_partition)", pair[0], minimum=1, allow_none=True, unit="ids"),
            check_int(f"{where}[1] (max_unique_ids_per_partition)", pair[1], minimum=1, allow_none=True,
                      unit="ids"))


def resolve(model: Any, topology: Any, **kwargs) -> tuple[Model, Knobs]:
    """Validate the inputs of :func:`scwork.memory.plan` and split them into Model and Knobs.

    Raises
    ------
    ConfigError
        Any invalid input (the message names it and says how to fix it).
    TypeError
        An unknown keyword.
    """
    unknown = sorted(set(kwargs) - set(_KNOWN_KWARGS))
    if unknown:
        raise TypeError(f"unknown keyword argument(s) {unknown}; known: {', '.join(_KNOWN_KWARGS)}")
    from scwork.hardware import TpuChip, get
    from scwork.hardware.topology import Topology
    from scwork.sharding import SparsecoreConfig, StackingPlan, plan_stacking

    kw = dict(kwargs)
    if "batch_size" not in kw:
        raise ConfigError("batch_size is required (global batch: samples per feature per step)")
    batch = check_int("batch_size", kw["batch_size"], minimum=1, unit="samples")

    topology_arg = topology
    if not isinstance(topology, Topology):
        raise ConfigError(
            f"topology must be a scwork.Topology, got {type(topology).__name__}; e.g. "
            "scwork.Topology.for_chip('v5p', num_chips=4)"
        )
    chip = kw.get("chip")
    if chip is None:
        chip = topology.chip_info
        if chip is None:
            raise ConfigError(
                f"topology {topology} names no chip: pass chip='v5p' (or a TpuChip, e.g. "
                "scwork.hardware.override('v4', tile_spmem_bytes=...)), or build the topology with "
                "scwork.Topology.for_chip(...)"
            )
    else:
        chip = get(chip)
    if not isinstance(chip, TpuChip):
        raise ConfigError(f"chip must be a TPU, got {chip.name!r} ({type(chip).__name__})")
    if not chip.has_sparsecore or topology.sparsecores_per_chip < 1:
        raise ConfigError(
            f"{chip.marketing_name} has no SparseCore (topology {topology}): the SparseCore memory model "
            "needs a chip with SparseCores, e.g. 'v5p', 'v6e' or 'tpu7x'"
        )
    if topology.sparsecores_per_chip != chip.sparsecores_per_chip:
        raise ConfigError(
            f"topology has {topology.sparsecores_per_chip} SparseCores per chip but chip {chip.name!r} has "
            f"{chip.sparsecores_per_chip}; build the topology with Topology.for_chip({chip.name!r}, ...)"
        )
    from scwork.errors import TopologyError

    try:
        num_chips = check_int("num_chips", kw.get("num_chips"), minimum=1, allow_none=True, unit="chips")
    except ConfigError as err:
        raise TopologyError(f"{err}: a topology needs at least one chip") from None
    if num_chips is not None and num_chips != topology.num_chips:
        if num_chips > chip.max_slice_chips:
            raise TopologyError(
                f"{num_chips} chips exceed the largest {chip.name} slice ({chip.max_slice_chips} chips)"
            )
        topology = topology.replace(num_chips=num_chips, shape=None, wraparound=None)

    tile_spmem = kw.get("tile_spmem_bytes")
    tile_spmem = chip.tile_spmem_bytes if tile_spmem is None else check_int(
        "tile_spmem_bytes", tile_spmem, minimum=1, unit="bytes")
    hbm = kw.get("hbm_bytes")
    hbm = chip.hbm_bytes if hbm is None else check_int("hbm_bytes", hbm, minimum=1, unit="bytes")
    headroom = kw.get("headroom", 0.1)
    if isinstance(headroom, bool) or not isinstance(headroom, numbers.Real) or not math.isfinite(headroom) \
            or not 0 <= headroom < 1:
        raise ConfigError(f"headroom must be a fraction in [0, 1) of HBM kept free, got {headroom!r}")

    # --- features, stacking, limits
    features, given_plan = _features(model)
    config = kw.get("config")
    if config is not None and not isinstance(config, SparsecoreConfig):
        raise ConfigError(f"config must be a SparsecoreConfig, got {type(config).__name__}")
    user_limits = kw.get("stack_limits")
    if user_limits is not None and not isinstance(user_limits, Mapping):
        raise ConfigError(f"stack_limits must be a dict stack name -> (max_ids, max_unique), got {user_limits!r}")
    stacking = kw.get("stacking", "auto")
    if given_plan is not None and given_plan.num_partitions == topology.num_partitions:
        splan = plan_stacking(features, topology, given_plan)
    else:
        if given_plan is not None:  # same stacks on another chip count
            stacking = [list(s.table_names) for s in given_plan.stacks]
            base = {s.name: (s.max_ids_per_partition, s.max_unique_ids_per_partition) for s in given_plan.stacks
                    if s.max_ids_per_partition is not None or s.max_unique_ids_per_partition is not None}
            user_limits = {**base, **(user_limits or {})}
        if isinstance(stacking, StackingPlan):
            raise ConfigError("pass a StackingPlan as the model, not as stacking=")
        splan = plan_stacking(features, topology, stacking, batch_size=batch, config=config,
                              stack_limits=None,
                              stack_limit_rule=kw.get("stack_limit_rule", "jax_tpu_embedding"))
    names = [s.name for s in splan.stacks]
    overrides: dict[str, tuple[int | None, int | None]] = {}
    explicit: dict[str, tuple[int | None, int | None]] = {}
    limits = kw.get("limits")
    if limits is not None:
        pair = _limit_pair("limits", limits)
        overrides = {n: pair for n in names}
    if user_limits:
        unknown_stacks = sorted(set(user_limits) - set(names))
        if unknown_stacks:
            raise ConfigError(f"stack_limits names unknown stacks {unknown_stacks}; stacks are {names}")
        for n_, v in user_limits.items():
            overrides[n_] = explicit[n_] = _limit_pair(f"stack_limits[{n_!r}]", v)

    ids_per_sample = kw.get("ids_per_sample")
    feature_names = [f.name for f in splan.features]

    def valency(feature: str) -> float | None:
        if ids_per_sample is None:
            return None
        value = ids_per_sample.get(feature) if isinstance(ids_per_sample, Mapping) else ids_per_sample
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"ids_per_sample for feature {feature!r} must be a number >= 0, got {value!r}")
        return float(value)

    if isinstance(ids_per_sample, Mapping):
        extra = sorted(set(ids_per_sample) - set(feature_names))
        if extra:
            raise ConfigError(f"ids_per_sample names unknown features {extra}; features are {feature_names}")

    # --- dtypes and optimizers
    dtype = kw.get("dtype", "f32")
    slot_dtype = kw.get("slot_dtype")
    optimizers = kw.get("optimizers") or {}
    custom_slots = kw.get("optimizer_slots")
    if not isinstance(optimizers, Mapping):
        raise ConfigError(f"optimizers must be a dict table name -> optimizer name, got {optimizers!r}")
    table_names = [t.table.name for s in splan.stacks for t in s.tables]
    for label, mapping in (("optimizers", optimizers), ("dtype", dtype), ("slot_dtype", slot_dtype)):
        if isinstance(mapping, Mapping):
            extra = sorted(set(mapping) - set(table_names))
            if extra:
                raise ConfigError(f"{label} names unknown tables {extra}; tables are {table_names}")

    def per_table(value, name, default):
        if isinstance(value, Mapping):
            value = value.get(name, default)
        return value

    tables: list[TableInfo] = []
    stacks: list[StackInfo] = []
    for s in splan.stacks:
        dtypes = set()
        opts = set()
        for t in s.tables:
            d, _ = parse_dtype(per_table(dtype, t.table.name, "f32"), f"dtype of table {t.table.name!r}")
            sd = per_table(slot_dtype, t.table.name, None)
            if sd is not None:
                sd, _ = parse_dtype(sd, f"slot_dtype of table {t.table.name!r}")
            opt = optimizers.get(t.table.name, t.table.optimizer)
            slots = optimizer_slot_count(opt, custom_slots)
            dtypes.add(d)
            opts.add(str(opt).strip().lower())
            tables.append(TableInfo(t.table.name, s.name, t.table.vocab_size, t.table.embedding_dim,
                                    str(opt).strip().lower(), slots, d, sd))
        if len(dtypes) > 1:
            raise ConfigError(
                f"stack {s.name!r} mixes dtypes {sorted(dtypes)}; tables of one stack share a dtype "
                "(stack them separately or give them the same dtype)"
            )
        if len(opts) > 1:
            raise ConfigError(
                f"stack {s.name!r} mixes optimizers {sorted(opts)} (optimizers=...); tables of one stack "
                "share an optimizer"
            )
        stats_ids, stats_uniq = _stats_limits(kw.get("stats"), s.name)
        vals = [valency(f.name) for f in s.features]
        ips = None if any(v is None for v in vals) else float(sum(vals))
        dims_by_table = {t.table.name: t.table.embedding_dim for t in s.tables}
        stacks.append(StackInfo(
            name=s.name, tables=s.table_names, features=tuple(f.name for f in s.features),
            dims=tuple(t.table.embedding_dim for t in s.tables), dtype=dtypes.pop(), optimizer=opts.pop(),
            configured_max_ids=s.max_ids_per_partition, configured_max_unique=s.max_unique_ids_per_partition,
            stats_max_ids=stats_ids, stats_max_unique=stats_uniq, ids_per_sample=ips,
            feature_dims=tuple(dims_by_table[f.table.name] for f in s.features),
        ))

    lrc = check_int("logical_replica_count", kw.get("logical_replica_count"), minimum=1, allow_none=True,
                    unit="replicas")
    stage = kw.get("stage_gather_operands_in_hbm", False)
    if not isinstance(stage, (bool, np.bool_)):
        raise ConfigError(f"stage_gather_operands_in_hbm must be True or False, got {stage!r}")
    knobs = Knobs(
        batch_size=batch,
        num_chips=topology.num_chips,
        sparsecores_per_chip=topology.sparsecores_per_chip,
        devices_per_chip=topology.devices_per_chip,
        tiles_per_sparsecore=check_int("chip.tiles_per_sparsecore", chip.tiles_per_sparsecore, minimum=1),
        tile_spmem_bytes=tile_spmem,
        hbm_bytes=hbm,
        hbm_bandwidth_bytes_per_s=float(chip.hbm_bandwidth_bytes_per_s),
        line_bytes=check_int("chip.dma_granule_bytes", chip.dma_granule_bytes, minimum=1, unit="bytes"),
        stage_gather_operands_in_hbm=bool(stage),
        num_serialized_tables=check_int("num_serialized_tables", kw.get("num_serialized_tables", 1), minimum=0,
                                        unit="tables"),
        dense_weights_bytes=check_int("dense_weights_bytes", kw.get("dense_weights_bytes", 0), unit="bytes"),
        constants_bytes=check_int("constants_bytes", kw.get("constants_bytes", 0), unit="bytes"),
        tensorcore_activation_bytes=check_int("tensorcore_activation_bytes",
                                              kw.get("tensorcore_activation_bytes", 0), unit="bytes"),
        prefetch_bytes_per_step=check_int("prefetch_bytes_per_step", kw.get("prefetch_bytes_per_step"),
                                          allow_none=True, unit="bytes"),
        maximum_parallel_iterations=check_int("maximum_parallel_iterations",
                                              kw.get("maximum_parallel_iterations", 1), minimum=1, unit="steps"),
        headroom=float(headroom),
        logical_replica_count=lrc,
        limits=overrides,
        stack_limits=explicit,
    )
    rebuild = None
    if given_plan is None and isinstance(stacking, str) and stacking == "auto" and not (
            config is not None and config.disable_table_stacking):
        original_topology, original_kwargs = topology_arg, dict(kwargs)

        def rebuild(batch_size: int, chips: int):
            return resolve(model, original_topology, **{**original_kwargs, "batch_size": batch_size,
                                                          "num_chips": chips})

    model_ = Model(tables=tuple(tables), stacks=tuple(stacks), chip=chip, plan=splan, rebuild=rebuild,
                   built_for=(batch, topology.num_chips))
    for st in model_.stacks:  # fail early on missing limits
        stack_limits(knobs, st)
    return model_, knobs
