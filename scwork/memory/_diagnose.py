"""Findings of the memory model and the searches that compute their fixes.

Every fix value is found by re-evaluating the model (never guessed): a search over
one knob with all other inputs unchanged, then a final check that the value found
does resolve the finding. With automatic stacking, every batch size or chip count
tried is re-planned (the grouping depends on the samples per SparseCore), and an
SPMEM fix then has to make every stack fit. Searches assume monotonicity where the model guarantees it
(SPMEM and HBM never grow when the batch shrinks, the HBM peak never grows when
serialization increases or the prefetch depth decreases) and verify otherwise (more
chips shrink tables and gather operands but, with fixed limits, grow the HBM stack
through ``logical_replica_count = P``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scwork._bisect import first_true, last_true
from scwork.errors import ConfigError
from scwork.memory._hbm_numbers import HbmNumbers, hbm_numbers
from scwork.memory._model import (
    ACTIVATION_BYTES,
    CATEGORIES,
    CSR_ALIGNMENT,
    GAIN_BYTES,
    INDEX_BYTES,
    SPARSECORE_CATEGORIES,
    Knobs,
    Model,
    round_up,
)
from scwork.memory._spmem_numbers import SpmemNumbers, spmem_numbers
from scwork.memory.findings import Finding, Fix

__all__ = ["spmem_findings", "hbm_findings", "input_findings", "model_fixes", "fmt_bytes"]

Pred = Callable[[Knobs], bool]

FLAG_SERIALIZE = "xla_sc_num_serialized_tables_to_optimize_hbm"
FLAG_PREFETCH = "maximum_parallel_iterations"
FLAG_LIMITS = "max_ids_per_partition / max_unique_ids_per_partition (limits file: xla_sparse_core_max_ids_file)"


def fmt_bytes(n: float) -> str:
    """Bytes in a readable unit: ``fmt_bytes(1536) == '1.50 KiB'``."""
    n = float(n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _largest_batch(knobs: Knobs, ok: Pred) -> int | None:
    """Largest ``n * P`` below the current batch for which ``ok``; None if not even ``n = 1``."""
    P = knobs.num_partitions
    n_cur = knobs.samples_per_sc
    if n_cur <= 1 or not ok(knobs.replace(batch_size=P)):
        return None
    return P * last_true(1, n_cur, lambda n: ok(knobs.replace(batch_size=n * P)))


def _slice_counts(model: Model) -> tuple[int, ...] | None:
    """Chip counts of the chip's documented slices, or None (no catalog chip: any count)."""
    from scwork.hardware.slices import slice_chip_counts

    chip = getattr(model.chip, "name", None)
    if chip is None:
        return None
    try:
        return slice_chip_counts(chip)
    except ConfigError:  # HardwareError/TopologyError: a chip without slice shapes
        return None


def _smallest_chips(knobs: Knobs, ok: Pred, max_chips: int, model: Model | None = None) -> int | None:
    """Smallest chip count above the current one for which ``ok`` (verified).

    With a catalog chip only the chip counts of real slices are candidates (a
    suggestion of 6 v5p chips would name a slice that cannot be had).
    """
    cur = knobs.num_chips
    counts = _slice_counts(model) if model is not None else None
    if counts is not None:
        candidates = [c for c in counts if cur < c <= max_chips]
        if not candidates or not ok(knobs.replace(num_chips=candidates[-1])):
            return None
        # The first fitting slice: bisect over the candidate list (fits only get easier
        # with more chips), each try a whole model evaluation.
        index = first_true(-1, len(candidates) - 1,
                            lambda i: ok(knobs.replace(num_chips=candidates[i])))
        return candidates[index]
    if cur >= max_chips:
        return None
    # Doubling first (each try is a whole model evaluation), then bisect the last gap.
    candidates = []
    c = cur * 2
    while c < max_chips:
        candidates.append(c)
        c *= 2
    candidates.append(max_chips)
    lo = cur
    for c in candidates:
        if ok(knobs.replace(num_chips=c)):
            return first_true(lo, c, lambda n: ok(knobs.replace(num_chips=n)))
        lo = c
    return None


def _chips_text(model: Model, chips: int) -> str:
    """``"64 chips (a 4x4x4 slice: Topology.for_chip('v5p', shape=(4, 4, 4)))"``."""
    from scwork.hardware.slices import format_shape, smallest_slice

    name = getattr(model.chip, "name", None)
    if _slice_counts(model) is None or name is None:
        return f"{chips} chips (Topology(num_chips={chips}))"
    shape = smallest_slice(name, chips)
    return (f"{chips} chips (a {format_shape(shape)} slice: "
            f"Topology.for_chip({name!r}, shape={tuple(shape)}))")


def _smallest_serialization(knobs: Knobs, ok: Pred, num_stacks: int) -> int | None:
    start = max(2, knobs.num_serialized_tables + 1)
    if start > num_stacks or not ok(knobs.replace(num_serialized_tables=num_stacks)):
        return None
    # The peak is non-increasing in the number of serialized tables.
    return first_true(start - 1, num_stacks, lambda n: ok(knobs.replace(num_serialized_tables=n)))


def _largest_prefetch_depth(knobs: Knobs, ok: Pred) -> int | None:
    cur = knobs.maximum_parallel_iterations
    if cur <= 1 or not ok(knobs.replace(maximum_parallel_iterations=1)):
        return None
    return last_true(1, cur, lambda n: ok(knobs.replace(maximum_parallel_iterations=n)))


def _max_chips(model: Model) -> int:
    return int(getattr(model.chip, "max_slice_chips", 1) or 1)


def _at(model: Model, k: Knobs):
    """``model.at(k)``, or None when the re-planned model is invalid (e.g. renamed stacks)."""
    try:
        return model.at(k)
    except ConfigError:
        return None


def _spmem_ok(model: Model, only=None) -> Pred:
    """The stacks ``only`` fit in SPMEM (every stack when automatic stacking was re-planned)."""
    def ok(k: Knobs) -> bool:
        at = _at(model, k)
        if at is None:
            return False
        m, k2 = at
        return bool(spmem_numbers(m, k2, only=only if m is model else None).fits.all())
    return ok


def _hbm_ok(model: Model) -> Pred:
    def ok(k: Knobs) -> bool:
        at = _at(model, k)
        return at is not None and hbm_numbers(*at, with_names=False).fits
    return ok


def _stack_limit_fix(model: Model, knobs: Knobs, spm: SpmemNumbers, row: int) -> tuple[int, int] | None:
    """Largest ``(max_ids, max_unique)`` (multiples of 8) that make stack ``row`` of ``spm`` fit."""
    cap = spm.capacity
    b = [int(x) for x in spm.buffers[row]]
    gather, rowptr = b[0], b[1]
    fw, e = int(spm.feature_width[row]), int(spm.itemsize[row])
    M, U = int(spm.max_ids[row]), int(spm.max_unique[row])
    per_id = 2 * INDEX_BYTES + GAIN_BYTES
    per_unique = INDEX_BYTES + fw * e
    avail = cap - gather - rowptr - round_up(U, CSR_ALIGNMENT) * per_unique
    m_max = (avail // per_id) // CSR_ALIGNMENT * CSR_ALIGNMENT
    if m_max >= CSR_ALIGNMENT and m_max >= min(U, M):
        pair = (min(m_max, M), min(U, m_max))
    else:
        x = ((cap - gather - rowptr) // (per_id + per_unique)) // CSR_ALIGNMENT * CSR_ALIGNMENT
        if x < CSR_ALIGNMENT:
            return None
        pair = (min(x, M), min(x, U))
    name = spm.stacks[row]
    trial = knobs.replace(limits={**knobs.limits, name: pair})
    idx = model.stack_index(name)
    return pair if bool(spmem_numbers(model, trial, only=[idx]).fits.all()) else None


# --------------------------------------------------------------------------------------
# findings
# --------------------------------------------------------------------------------------
def _user_stack_limits(knobs: Knobs, extra: dict) -> dict:
    merged = {k: tuple(v) for k, v in knobs.stack_limits.items()}
    merged.update(extra)
    return merged


def spmem_findings(model: Model, knobs: Knobs, spm: SpmemNumbers, *, with_fixes: bool = True) -> list[Finding]:
    """One error per stack whose per-tile SPMEM does not fit in TileSpmem."""
    out: list[Finding] = []
    cap = spm.capacity
    fits = spm.fits
    tiles = knobs.tiles_per_sparsecore
    for row in [i for i in range(len(spm.stacks)) if not fits[i]]:
        name = spm.stacks[row]
        b = [int(x) for x in spm.buffers[row]]
        gather = b[0]
        fixed, rowdep = int(spm.fixed[row]), int(spm.row_dependent[row])
        total = fixed + rowdep
        others = total - gather
        evidence = {
            "fixed_size_allocation_bytes": fixed,
            "row_dependent_size_allocation_bytes": rowdep,
            "total_spmem_size_bytes": cap,
            "gather_operand_bytes_per_tile": gather,
            "sample_count": int(spm.sample_count[row]),
            "feature_width": int(spm.feature_width[row]),
            "num_tiles": tiles,
            "max_ids_per_partition": int(spm.max_ids[row]),
            "max_unique_ids_per_partition": int(spm.max_unique[row]),
            "limits_source": spm.limit_source[row],
        }
        gather_case = gather > 0 and others <= cap
        if gather_case:
            code = "spmem_gather_operand_too_large"
            message = (
                f"Gather operand too large for stack {name!r}: (sample_count * feature_width) / kNumTiles = "
                f"({spm.sample_count[row]} * {spm.feature_width[row]}) / {tiles} elements * "
                f"{ACTIVATION_BYTES} B = {gather} bytes per tile, but only {cap - others} of the tile's "
                f"{cap} bytes of TileSpmem are left after the other allocations ({others} bytes)"
            )
        else:
            code = "spmem_fixed_allocations_do_not_fit"
            message = (
                f"Fixed size allocations (fixed_size_allocation_bytes = {fixed}, "
                f"row_dependent_size_allocation_bytes = {rowdep}; {total} bytes per tile) of stack {name!r} "
                f"do not fit in TileSpmem (total_spmem_size_bytes = {cap})"
            )
        fixes: list[Fix] = []
        if with_fixes:
            idx = [model.stack_index(name)]
            ok = _spmem_ok(model, only=idx)
            if gather > 0 and not knobs.stage_gather_operands_in_hbm and ok(
                    knobs.replace(stage_gather_operands_in_hbm=True)):
                staged_bytes = (int(spm.sample_count[row]) * int(spm.feature_width[row])
                                * ACTIVATION_BYTES * knobs.sparsecores_per_chip)
                fixes.append(Fix(
                    "stage_gather_operands_in_hbm", True,
                    f"stage the gather operand in HBM: frees {gather} bytes per tile; costs "
                    f"{fmt_bytes(staged_bytes)}"
                    " of HBM per chip while the stack's SparseCore forward pass runs"))
            pair = _stack_limit_fix(model, knobs, spm, row)
            if pair is not None:
                fixes.append(Fix(
                    "stack_limits", _user_stack_limits(knobs, {name: pair}),
                    f"lower the limits of stack {name!r} to max_ids_per_partition={pair[0]}, "
                    f"max_unique_ids_per_partition={pair[1]} (ids beyond them are mini-batched or, with "
                    "allow_id_dropping, dropped)", flag=FLAG_LIMITS))
            batch = _largest_batch(knobs, ok)
            if batch is not None:
                fixes.append(Fix(
                    "batch_size", batch,
                    f"global batch of at most {batch} ({batch // knobs.num_partitions} samples per "
                    "SparseCore): the gather operand shrinks with the samples per SparseCore"
                    + (" (automatic stacking re-planned: every stack fits)" if model.rebuild else "")))
            chips = _smallest_chips(knobs, ok, _max_chips(model), model)
            if chips is not None:
                fixes.append(Fix(
                    "num_chips", chips,
                    f"{_chips_text(model, chips)}: "
                    "fewer samples per SparseCore; keeps the configured limits"
                    + (" (automatic stacking re-planned: every stack fits)" if model.rebuild else
                       " and the current stacking")))
        out.append(Finding(code, "error", "spmem", message, stack=name, evidence=evidence, fixes=tuple(fixes)))
    return out


def hbm_findings(model: Model, knobs: Knobs, hbm: HbmNumbers, *, with_fixes: bool = True) -> list[Finding]:
    """HBM out of memory (error) and padding waste (info)."""
    out: list[Finding] = []
    peak, usable, cap = hbm.peak_bytes, hbm.usable, hbm.capacity
    at_peak = hbm.usage_by_category[hbm.peak_event]
    sc = int(sum(at_peak[i] for i, c in enumerate(CATEGORIES) if c in SPARSECORE_CATEGORIES))
    tc = peak - sc
    if peak > usable:
        evidence = {"peak_bytes": peak, "usable_bytes": usable, "hbm_bytes": cap, "headroom": knobs.headroom,
                    "peak_event": hbm.ev_name[hbm.peak_event] if hbm.ev_name[0] else hbm.peak_event,
                    "sparsecore_bytes": sc, "tensorcore_and_heap_bytes": tc}
        evidence.update({f"{c}_bytes": int(at_peak[i]) for i, c in enumerate(CATEGORIES) if at_peak[i]})
        message = (
            f"RESOURCE_EXHAUSTED: TPU TensorCore and heap HBM usage: {fmt_bytes(tc)}, SparseCore HBM usage "
            f"{fmt_bytes(sc)}, exceeding available bytes: {fmt_bytes(usable)} ({fmt_bytes(cap)} per chip with "
            f"{knobs.headroom:.0%} headroom) at the step's peak ({evidence['peak_event']})"
        )
        fixes: list[Fix] = []
        if with_fixes:
            ok = _hbm_ok(model)
            T = len(model.stacks)
            stacks_at_peak = int(at_peak[CATEGORIES.index("sc_forward_stack")]
                                 + at_peak[CATEGORIES.index("sc_backward_stack")])
            n_ser = _smallest_serialization(knobs, ok, T)
            if n_ser is not None:
                fixes.append(Fix(
                    "num_serialized_tables", n_ser,
                    f"serialize the {n_ser} stacks with the largest HBM stack (HBM stack at the peak: "
                    f"{fmt_bytes(stacks_at_peak)}); lowers the peak stack at the cost of SparseCore parallelism",
                    flag=FLAG_SERIALIZE))
            if knobs.stage_gather_operands_in_hbm and ok(knobs.replace(stage_gather_operands_in_hbm=False)):
                fixes.append(Fix("stage_gather_operands_in_hbm", False,
                                 "keep gather operands in SPMEM: frees their HBM copy"))
            depth = _largest_prefetch_depth(knobs, ok)
            if depth is not None:
                fixes.append(Fix(
                    "maximum_parallel_iterations", depth,
                    f"prefetch {depth} step(s) of input instead of {knobs.maximum_parallel_iterations} "
                    f"({fmt_bytes(hbm.prefetch_per_step)} per step)", flag=FLAG_PREFETCH))
            dtypes = {t.dtype for t in model.tables} if knobs.dtype_override is None else {knobs.dtype_override}
            if dtypes != {"bf16"} and "s8" not in dtypes and ok(knobs.replace(dtype_override="bf16")):
                fixes.append(Fix("dtype", "bf16", "bf16 tables and slots: half the bytes of f32 (rows are "
                                 "padded to 16 elements instead of 8)"))
            chips = _smallest_chips(knobs, ok, _max_chips(model), model)
            if chips is not None:
                fixes.append(Fix(
                    "num_chips", chips,
                    f"{_chips_text(model, chips)}: fewer table rows and samples per chip (keeps the configured limits; "
                    "with logical_replica_count = P the HBM stack grows with the chip count)"))
            batch = _largest_batch(knobs, ok)
            if batch is not None:
                fixes.append(Fix("batch_size", batch,
                                 f"global batch of at most {batch}: smaller activations and gradients"))
            if peak <= cap:
                h = math.floor((1 - peak / cap) * 1e4) / 1e4
                if h >= 0 and math.floor(cap * (1 - h)) >= peak:
                    fixes.append(Fix("headroom", h, f"keep only {h:.2%} of HBM free (less safety margin)"))
            if stacks_at_peak * 10 >= peak:
                fixes.append(Fix("stack_limits", None,
                                 "lower max_unique_ids_per_partition of the largest stacks: the HBM stack is "
                                 "proportional to it", flag=FLAG_LIMITS))
        out.append(Finding("hbm_out_of_memory", "error", "hbm", message, evidence=evidence, fixes=tuple(fixes)))
    return out


def input_findings(model: Model, knobs: Knobs, hbm: HbmNumbers | None, spm: SpmemNumbers | None) -> list[Finding]:
    """Warnings and notes that do not stop compilation."""
    out: list[Finding] = []
    P = knobs.num_partitions
    if not knobs.batch_divides:
        lower = knobs.batch_size // P * P
        upper = lower + P
        out.append(Finding(
            "batch_not_divisible", "warning", "input",
            f"batch_size {knobs.batch_size} is not a multiple of the {P} SparseCores; the model rounds the "
            f"samples per SparseCore up to {knobs.samples_per_sc} (the sharding engine would reject it)",
            evidence={"batch_size": knobs.batch_size, "num_partitions": P},
            fixes=tuple(Fix("batch_size", b, f"a multiple of {P}") for b in (lower, upper) if b > 0)))
    numbers = spm if spm is not None else hbm
    if numbers is not None:
        for i, st in enumerate(model.stacks):
            M, U = int(numbers.max_ids[i]), int(numbers.max_unique[i])
            if U > M:
                out.append(Finding(
                    "unique_exceeds_ids", "warning", "input",
                    f"stack {st.name!r}: max_unique_ids_per_partition {U} > max_ids_per_partition {M}; "
                    "unique ids cannot outnumber ids, so the unique-id buffers are oversized",
                    stack=st.name, evidence={"max_ids_per_partition": M, "max_unique_ids_per_partition": U},
                    fixes=(Fix("stack_limits", _user_stack_limits(knobs, {st.name: (M, M)}),
                               f"max_unique_ids_per_partition={M}", flag=FLAG_LIMITS),)))
        srcs = {}
        for i, st in enumerate(model.stacks):
            for kind in ("estimate", "stats", "max_ids"):
                if kind in numbers.limit_source[i].split("/"):
                    srcs.setdefault(kind, []).append(st.name)
        notes = {"estimate": "estimated from ids_per_sample with the closed-form estimate behind "
                             "xla_sparse_core_estimate_max_ids ([sc-guide] §6)",
                 "stats": "taken from the observed statistics (stats=)",
                 "max_ids": "not configured for unique ids: max_unique_ids_per_partition = max_ids_per_partition"}
        for kind, names in srcs.items():
            code = "limits_estimated" if kind == "estimate" else f"limits_from_{kind}"
            out.append(Finding(code, "info", "input",
                               f"limits of {len(names)} stack(s) {notes[kind]}: {', '.join(names)}",
                               evidence={"stacks": tuple(names)}))
    if hbm is not None:
        waste = []
        for j, t in enumerate(model.tables):
            width = int(hbm.table_width[j])
            if t.embedding_dim * 2 <= width:
                waste.append((t.name, t.embedding_dim, width, float(hbm.table_waste[j] + hbm.slot_waste[j])))
        if waste:
            total = sum(w[3] for w in waste)
            out.append(Finding(
                "padding_waste", "info", "hbm",
                f"{len(waste)} table(s) are padded to at least twice their width ({fmt_bytes(total)} per chip "
                "of padding with their slots): " + ", ".join(f"{n} ({d} -> {w})" for n, d, w, _ in waste[:8])
                + ("..." if len(waste) > 8 else "") + "; packing narrow rows is on the SparseCore roadmap "
                "(see scwork.layout.embedding.packing_whatif)",
                evidence={"tables": tuple(w[0] for w in waste), "waste_bytes": total}))
    return out


# --------------------------------------------------------------------------------------
# whole-model fixes
# --------------------------------------------------------------------------------------
def model_fixes(model: Model, knobs: Knobs, *, need_spmem: bool, need_hbm: bool) -> list[Fix]:
    """Changes of one knob each that make the whole model fit (SPMEM and HBM), verified."""
    if not (need_spmem or need_hbm):
        return []

    def ok(k: Knobs) -> bool:
        at = _at(model, k)
        if at is None:
            return False
        m, k2 = at
        if k2.tile_spmem_bytes is not None and not bool(spmem_numbers(m, k2).fits.all()):
            return False
        return hbm_numbers(m, k2, with_names=False).fits

    fixes: list[Fix] = []
    T = len(model.stacks)
    for stage in (True, False):
        if knobs.stage_gather_operands_in_hbm != stage and ok(knobs.replace(stage_gather_operands_in_hbm=stage)):
            fixes.append(Fix("stage_gather_operands_in_hbm", stage,
                             "stage gather operands in HBM" if stage else "keep gather operands in SPMEM"))
    if need_spmem and knobs.tile_spmem_bytes is not None:
        spm = spmem_numbers(model, knobs)
        pairs = {}
        for row in [i for i in range(T) if not spm.fits[i]]:
            pair = _stack_limit_fix(model, knobs, spm, row)
            if pair is None:
                pairs = None
                break
            pairs[spm.stacks[row]] = pair
        if pairs:
            trial = knobs.replace(limits={**knobs.limits, **pairs})
            if ok(trial):
                fixes.append(Fix("stack_limits", _user_stack_limits(knobs, pairs),
                                 "lower the limits of " + ", ".join(f"{k} to {v}" for k, v in pairs.items()),
                                 flag=FLAG_LIMITS))
    n_ser = _smallest_serialization(knobs, ok, T)
    if n_ser is not None:
        fixes.append(Fix("num_serialized_tables", n_ser, f"serialize the {n_ser} largest stacks", flag=FLAG_SERIALIZE))
    depth = _largest_prefetch_depth(knobs, ok)
    if depth is not None:
        fixes.append(Fix("maximum_parallel_iterations", depth, f"prefetch {depth} step(s)", flag=FLAG_PREFETCH))
    dtypes = {t.dtype for t in model.tables} if knobs.dtype_override is None else {knobs.dtype_override}
    if dtypes != {"bf16"} and "s8" not in dtypes and ok(knobs.replace(dtype_override="bf16")):
        fixes.append(Fix("dtype", "bf16", "bf16 tables and slots"))
    batch = _largest_batch(knobs, ok)
    if batch is not None:
        fixes.append(Fix("batch_size", batch, f"global batch of at most {batch}"))
    chips = _smallest_chips(knobs, ok, _max_chips(model), model)
    if chips is not None:
        fixes.append(Fix("num_chips", chips, f"{_chips_text(model, chips)} (same configured limits)"))
    if need_hbm and not need_spmem:
        hbm = hbm_numbers(model, knobs, with_names=False)
        if hbm.peak_bytes <= hbm.capacity:
            h = math.floor((1 - hbm.peak_bytes / hbm.capacity) * 1e4) / 1e4
            if ok(knobs.replace(headroom=h)):
                fixes.append(Fix("headroom", h, f"keep only {h:.2%} of HBM free"))
    return fixes
