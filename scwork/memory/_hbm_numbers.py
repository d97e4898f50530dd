"""The numbers behind the HBM report, chip by chip.

Tables, optimizer slots, CSR inputs, activations, the HBM stack and the heap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scwork._rounding import round_up
from scwork.errors import ConfigError
from scwork.memory._model import (
    _CAT_INDEX,
    _INT64_MAX,
    _NAMED_PREFETCH_STEPS,
    ACTIVATION_BYTES,
    CATEGORIES,
    CSR_ALIGNMENT,
    GAIN_BYTES,
    INDEX_BYTES,
    Knobs,
    Model,
    parse_dtype,
    stack_dtype,
    stack_limits,
    stack_width,
)

__all__ = ["HbmNumbers", "hbm_numbers", "stack_bytes_per_sc"]


def stack_bytes_per_sc(feature_width, max_unique_ids, logical_replica_count):
    """Forward and backward HBM stack of one stacked table on one SparseCore, in bytes.

    ``((2 * fw + 1) * U * LRC * 4, 3 * fw * U * LRC * 4)`` (the model of
    :mod:`scwork.memory.hbm`); ints or numpy arrays. The one place of the formula:
    :func:`scwork.memory.hbm_stack_bytes` (checked inputs) and the report call it.

    >>> stack_bytes_per_sc(64, 128, 16)
    (1056768, 1572864)
    """
    fw, U, lrc = feature_width, max_unique_ids, logical_replica_count
    return (2 * fw + 1) * U * lrc * 4, 3 * fw * U * lrc * 4


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
    stacks = _stack_numbers(model, knobs)
    tb = _table_numbers(model, knobs, stacks)
    sc = _sparsecore_buffers(model, knobs, stacks, tb)
    ev = _step_events(knobs, sc)
    iv = _intervals(model, knobs, stacks, tb, sc, ev, with_names)
    by_cat = _usage_by_category(iv, ev.num_events)
    if with_names:
        F = ev.num_slots
        ev_names = [f"SC forward slot {j}" if F > 1 else "SC forward" for j in range(F)]
        ev_names += ["TensorCore forward", "TensorCore backward"]
        ev_names += [f"SC backward slot {j}" if F > 1 else "SC backward" for j in range(F)]
        ev_phase = ["sc_forward"] * F + ["tc_forward", "tc_backward"] + ["sc_backward"] * F
    else:
        ev_names, ev_phase = [None] * ev.num_events, [None] * ev.num_events

    return HbmNumbers(
        table_bytes=tb.bytes, slot_bytes=tb.slot_bytes, table_waste=tb.waste, slot_waste=tb.slot_waste,
        table_padded_vocab=tb.padded_vocab, table_width=tb.width, table_itemsize=tb.itemsize,
        table_slot_itemsize=tb.slot_itemsize,
        feature_width=stacks.widths, max_ids=stacks.max_ids, max_unique=stacks.max_unique,
        limit_source=tuple(stacks.sources),
        sample_count=stacks.sample_count, fwd_stack_sc=sc.fwd_sc, bwd_stack_sc=sc.bwd_sc, fwd_stack=sc.fwd,
        bwd_stack=sc.bwd, fwd_waste=sc.fwd_waste, bwd_waste=sc.bwd_waste, staged_gather=sc.staged,
        activations=sc.acts, activation_waste=stacks.act_waste,
        csr_bytes=sc.csr, csr_waste=sc.csr_waste, fwd_traffic=sc.fwd_traffic, bwd_traffic=sc.bwd_traffic,
        chain=ev.chain, num_slots=ev.num_slots, prefetch_per_step=sc.per_step, prefetch_computed=sc.computed,
        iv_name=iv.names, iv_category=iv.category, iv_bytes=iv.bytes, iv_waste=iv.waste, iv_start=iv.start,
        iv_end=iv.end, iv_stack=iv.stacks, iv_table=iv.tables, ev_name=ev_names, ev_phase=ev_phase,
        ev_start_s=ev.start_s, ev_end_s=ev.end_s, usage=by_cat.sum(axis=1), usage_by_category=by_cat,
        capacity=knobs.hbm_bytes, usable=knobs.usable_hbm_bytes,
    )


@dataclass
class _StackNumbers:
    """Per stack: width, dtype size, limits (and where they came from), samples, activation waste."""

    widths: np.ndarray
    itemsizes: np.ndarray
    max_ids: np.ndarray
    max_unique: np.ndarray
    sources: list
    sample_count: np.ndarray
    act_waste: np.ndarray
    max_dim: np.ndarray


def _stack_numbers(model: Model, knobs: Knobs) -> _StackNumbers:
    S, n = knobs.sparsecores_per_chip, knobs.samples_per_sc
    T = len(model.stacks)
    out = _StackNumbers(*(np.empty(T, np.int64) for _ in range(4)), [], np.empty(T, np.int64),
                        np.empty(T, np.int64), np.empty(T, np.int64))
    for i, st in enumerate(model.stacks):
        _, out.itemsizes[i] = stack_dtype(knobs, st)
        out.widths[i] = stack_width(knobs, st)
        out.max_ids[i], out.max_unique[i], src = stack_limits(knobs, st)
        out.sources.append(src)
        out.sample_count[i] = st.num_features * n
        out.max_dim[i] = max(st.dims)
        dims = st.feature_dims or tuple(max(st.dims) for _ in st.features)
        out.act_waste[i] = S * n * ACTIVATION_BYTES * sum(int(out.widths[i]) - d for d in dims)
    return out


@dataclass
class _TableNumbers:
    """Per table: bytes of the table and its optimizer slots on one chip, their padding waste."""

    bytes: np.ndarray
    slot_bytes: np.ndarray
    waste: np.ndarray
    slot_waste: np.ndarray
    padded_vocab: np.ndarray
    width: np.ndarray
    itemsize: np.ndarray
    slot_itemsize: np.ndarray
    slots_of_stack: np.ndarray


def _table_numbers(model: Model, knobs: Knobs, stacks: _StackNumbers) -> _TableNumbers:
    # tables and slots: each chip holds padded_vocab / num_chips rows of the stack width
    chips, P = knobs.num_chips, knobs.num_partitions
    stack_pos = {st.name: i for i, st in enumerate(model.stacks)}
    nt = len(model.tables)
    out = _TableNumbers(np.empty(nt, np.int64), np.empty(nt, np.int64), np.empty(nt, np.float64),
                        np.empty(nt, np.float64), np.empty(nt, np.int64), np.empty(nt, np.int64),
                        np.empty(nt, np.int64), np.empty(nt, np.int64), np.zeros(len(model.stacks), np.int64))
    for j, t in enumerate(model.tables):
        i = stack_pos[t.stack]
        _, e = parse_dtype(knobs.dtype_override or t.dtype)
        se = e if t.slot_dtype is None else parse_dtype(t.slot_dtype)[1]
        pv = round_up(t.vocab_size, CSR_ALIGNMENT * P)
        w = int(stacks.widths[i])
        rows = pv // chips
        out.padded_vocab[j], out.width[j], out.itemsize[j], out.slot_itemsize[j] = pv, w, e, se
        # Exact byte counts in Python ints, refused before they could wrap in int64.
        largest = rows * w * max(e, se) * max(1, t.slot_count)
        if largest > _INT64_MAX // 64:
            raise ConfigError(
                f"table {t.name!r}: {pv:,} rows x {w:,} wide is {rows * w * e:,} bytes per chip, beyond what "
                f"scwork's 64-bit byte counts hold (and any HBM); check vocab_size and embedding_dim")
        out.bytes[j] = rows * w * e
        out.slot_bytes[j] = t.slot_count * rows * w * se
        unpadded = t.vocab_size * t.embedding_dim / chips
        out.waste[j] = out.bytes[j] - unpadded * e
        out.slot_waste[j] = out.slot_bytes[j] - t.slot_count * unpadded * se
        out.slots_of_stack[i] = max(out.slots_of_stack[i], t.slot_count)
    return out


@dataclass
class _SparseCoreBuffers:
    """Per stack, on one chip: SparseCore stacks, activations, CSR inputs and the HBM traffic they cause."""

    fwd_sc: np.ndarray
    bwd_sc: np.ndarray
    fwd: np.ndarray
    bwd: np.ndarray
    fwd_waste: np.ndarray
    bwd_waste: np.ndarray
    acts: np.ndarray
    staged: np.ndarray
    staged_waste: np.ndarray
    csr: np.ndarray
    csr_waste: np.ndarray
    fwd_traffic: np.ndarray
    bwd_traffic: np.ndarray
    per_step: int
    computed: bool


def _sparsecore_buffers(model: Model, knobs: Knobs, stacks: _StackNumbers,
                        tables: _TableNumbers) -> _SparseCoreBuffers:
    S, P, lrc = knobs.sparsecores_per_chip, knobs.num_partitions, knobs.lrc
    widths, M, U = stacks.widths, stacks.max_ids, stacks.max_unique
    T = len(model.stacks)
    fwd_sc, bwd_sc = stack_bytes_per_sc(widths, U, lrc)
    # waste: what the padding of the stack width to `widths` adds over the widest table
    fwd_unpadded, bwd_unpadded = stack_bytes_per_sc(stacks.max_dim, U, lrc)
    acts = S * stacks.sample_count * widths * ACTIVATION_BYTES
    staged = acts.copy() if knobs.stage_gather_operands_in_hbm else np.zeros(T, np.int64)
    staged_w = stacks.act_waste if knobs.stage_gather_operands_in_hbm else np.zeros(T, np.int64)
    Mr = round_up(M, CSR_ALIGNMENT)
    # CSR entries of one SparseCore: round_up(max_ids, 8) per partition, or the static
    # size a stack was given (suggested_coo_buffer_size_per_device, as jax-tpu-embedding).
    entries_sc = np.array([Mr[i] * P if st.static_entries_per_sc is None else st.static_entries_per_sc
                           for i, st in enumerate(model.stacks)], np.int64)
    csr_sc = max(P, CSR_ALIGNMENT) * INDEX_BYTES + entries_sc * (2 * INDEX_BYTES + GAIN_BYTES)
    csr = S * csr_sc
    csr_w = S * (np.maximum(entries_sc - M * P, 0) * (2 * INDEX_BYTES + GAIN_BYTES)
                 + (max(P, CSR_ALIGNMENT) - P) * INDEX_BYTES)
    gathered = S * U * lrc * widths * stacks.itemsizes
    if knobs.prefetch_bytes_per_step is None:
        per_step, computed = int(csr.sum()), True
    else:
        per_step, computed = int(knobs.prefetch_bytes_per_step), False
    return _SparseCoreBuffers(
        fwd_sc=fwd_sc, bwd_sc=bwd_sc, fwd=S * fwd_sc, bwd=S * bwd_sc,
        fwd_waste=S * (fwd_sc - fwd_unpadded), bwd_waste=S * (bwd_sc - bwd_unpadded),
        acts=acts, staged=staged, staged_waste=staged_w, csr=csr, csr_waste=csr_w,
        fwd_traffic=gathered + acts + csr, bwd_traffic=acts + 2 * gathered * (1 + tables.slots_of_stack) + csr,
        per_step=per_step, computed=computed)


@dataclass
class _StepEvents:
    """The step's events (SC forward slots, TensorCore forward and backward, SC backward slots)."""

    chain: list
    chain_pos: dict
    num_slots: int
    num_events: int
    tc_fwd: int
    tc_bwd: int
    start_s: np.ndarray
    end_s: np.ndarray


def _step_events(knobs: Knobs, sc: _SparseCoreBuffers) -> _StepEvents:
    bw = float(knobs.hbm_bandwidth_bytes_per_s)
    T = len(sc.fwd)
    chain, F = _serialization(knobs.num_serialized_tables, sc.fwd + sc.staged)
    chain_pos = {s: j for j, s in enumerate(chain)}
    E = 2 * F + 2
    ev_tc_fwd, ev_tc_bwd = F, F + 1
    # events and their modelled times (HBM-traffic lower bound)
    group = [i for i in range(T) if i not in chain_pos]
    group_fwd = float(sc.fwd_traffic[group].sum()) if group else 0.0
    group_bwd = float(sc.bwd_traffic[group].sum()) if group else 0.0
    durations = np.zeros(E)
    for j in range(F):
        c = chain[j] if chain else None
        durations[j] = ((float(sc.fwd_traffic[c]) if c is not None else 0.0) + group_fwd / F) / bw
        durations[F + 2 + j] = ((float(sc.bwd_traffic[c]) if c is not None else 0.0) + group_bwd / F) / bw
    durations[ev_tc_fwd] = (knobs.dense_weights_bytes + knobs.tensorcore_activation_bytes + sc.acts.sum()) / bw
    durations[ev_tc_bwd] = (2 * knobs.dense_weights_bytes + knobs.tensorcore_activation_bytes + sc.acts.sum()) / bw
    ev_end = np.cumsum(durations)
    return _StepEvents(chain, chain_pos, F, E, ev_tc_fwd, ev_tc_bwd, ev_end - durations, ev_end)


@dataclass
class _Intervals:
    """Every allocation as (name, category, bytes, waste, first event, end event, stack, table)."""

    names: list
    category: np.ndarray
    bytes: np.ndarray
    waste: np.ndarray
    start: np.ndarray
    end: np.ndarray
    stacks: list
    tables: list


def _intervals(model: Model, knobs: Knobs, stacks: _StackNumbers, tb: _TableNumbers, sc: _SparseCoreBuffers,
               ev: _StepEvents, with_names: bool) -> _Intervals:
    E, F = ev.num_events, ev.num_slots
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
        add(f"table {t.name}", "tables", tb.bytes[j], tb.waste[j], 0, E, t.stack, t.name)
        if t.slot_count:
            add(f"slots {t.name}", "optimizer_slots", tb.slot_bytes[j], tb.slot_waste[j], 0, E, t.stack, t.name)
    add("dense weights", "dense_weights", knobs.dense_weights_bytes, 0, 0, E)
    add("constants", "constants", knobs.constants_bytes, 0, 0, E)
    csr_total_w = float(sc.csr_waste.sum()) if sc.computed else 0.0
    per_step = sc.per_step
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
        if i in ev.chain_pos:
            f0, f1 = ev.chain_pos[i], ev.chain_pos[i] + 1
            b0, b1 = F + 2 + ev.chain_pos[i], F + 3 + ev.chain_pos[i]
        else:
            f0, f1, b0, b1 = 0, F, F + 2, E
        add(f"SC forward stack {st.name}", "sc_forward_stack", sc.fwd[i], sc.fwd_waste[i], f0, f1, st.name)
        if knobs.stage_gather_operands_in_hbm:
            add(f"staged gather operand {st.name}", "staged_gather_operands", sc.staged[i], sc.staged_waste[i],
                f0, f1, st.name)
        add(f"activations {st.name}", "embedding_activations", sc.acts[i], stacks.act_waste[i], f0, ev.tc_fwd + 1,
            st.name)
        add(f"gradients {st.name}", "embedding_gradients", sc.acts[i], stacks.act_waste[i], ev.tc_bwd, b1,
            st.name)
        add(f"SC backward stack {st.name}", "sc_backward_stack", sc.bwd[i], sc.bwd_waste[i], b0, b1, st.name)
    add("TensorCore activations", "tensorcore_activations", knobs.tensorcore_activation_bytes, 0,
        ev.tc_fwd, ev.tc_bwd + 1)
    # Every knob is capped (2**57 bytes, 2**31 - 1 steps), but their sum is not: 64
    # prefetched steps of 2**57 bytes are 2**63. The usage per event is a running sum in
    # int64, so the sum of every allocation (Python ints, exact) must fit, else the peak
    # would wrap to a negative number that "fits".
    everything = sum(byts)
    if everything > _INT64_MAX:
        largest = sorted(zip(byts, cats), reverse=True)[:3]
        named = ", ".join(f"{CATEGORIES[c]} {b:,}" for b, c in largest)
        raise ConfigError(
            f"the buffers of one step add up to {everything:,} bytes per chip (largest: {named}), beyond what "
            f"scwork's 64-bit byte counts hold (and any HBM); lower prefetch_bytes_per_step, "
            f"maximum_parallel_iterations or the other byte sizes")
    return _Intervals(names, np.asarray(cats, np.int64), np.asarray(byts, np.int64), np.asarray(wastes),
                      np.asarray(starts, np.int64), np.asarray(ends, np.int64), stacks_of, tables_of)


def _usage_by_category(iv: _Intervals, num_events: int) -> np.ndarray:
    """Bytes live at each event per category: +bytes at an interval's start, -bytes at its end."""
    diff = np.zeros((num_events + 1, len(CATEGORIES)), np.int64)
    np.add.at(diff, (iv.start, iv.category), iv.bytes)
    np.add.at(diff, (iv.end, iv.category), -iv.bytes)
    return np.cumsum(diff, axis=0)[:num_events]
