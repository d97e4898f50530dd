"""The sharding engine's checks: limits, out-of-vocabulary ids, gains, the scratch budget.

Each raises a typed error of :mod:`scwork.errors` saying what, where and how to fix
it (moved out of :mod:`scwork.sharding.engine`, which runs the work).
"""

from __future__ import annotations

import numpy as np

from scwork.errors import ConfigError, LimitExceededError, OutOfVocabularyError
from scwork.sharding._plan_cache import plan_derived
from scwork.sharding._scratch import SCRATCH_LIMIT_ENV, scratch_limit_bytes
from scwork.sharding.batch import FeatureBatch, _check_gains
from scwork.sharding.results import _ALIGN, round_up_array
from scwork.sharding.specs import SparsecoreConfig, round_up
from scwork.sharding.stacking import Stack, StackingPlan

__all__ = ["estimate_scratch_bytes"]


def _lbits(K: int, n: int) -> int:
    return int(K * n - 1).bit_length()


# --------------------------------------------------------------------------------------
# limit checks
# --------------------------------------------------------------------------------------
def _check_limits(stack: Stack, res: dict, G: int, S: int, config: SparsecoreConfig, B: int) -> None:
    cap = config.max_ids_per_chip_per_sample
    if cap is None and (config.allow_id_dropping or (stack.max_ids_per_partition is None
                                                     and stack.max_unique_ids_per_partition is None)):
        return                                 # nothing configured to check (the common case)
    P = stack.num_partitions
    tables = ", ".join(stack.table_names)
    table_attr = stack.table_names[0] if len(stack.tables) == 1 else tables
    if not config.allow_id_dropping:
        for limit, observed, configured in (
                ("max_ids_per_partition", res["pairs"], stack.max_ids_per_partition),
                ("max_unique_ids_per_partition", res["distinct"], stack.max_unique_ids_per_partition)):
            if configured is None:
                continue
            over = observed > configured
            if over.any():
                c = int(np.argmax(observed))
                d, s, p = c // (S * P), (c // P) % S, c % P
                raise LimitExceededError(
                    f"stack {stack.name!r} (tables: {tables}): source SparseCore {s} of device {d} sends "
                    f"{int(observed[c])} {'distinct ' if 'unique' in limit else ''}ids to partition {p}, "
                    f"above {limit}={configured} ({int(over.sum())} of {observed.size} (device, SC, "
                    f"partition) streams exceed it). Raise the limit (TableSpec.{limit} or "
                    "stack_limits=...), set SparsecoreConfig(allow_id_dropping=True), or use a smaller batch.",
                    limit=limit, observed=int(observed[c]), configured=int(configured), stack=stack.name,
                    table=table_attr, device=d, sc=s, partition=p)
    if cap is not None:
        per_sc = round_up_array(res["kept"].reshape(G, S, P)).sum(axis=2)
        per_device = per_sc.sum(axis=1)
        samples = len(stack.features) * B // G
        configured = cap * samples
        if (per_device > configured).any():
            d = int(np.argmax(per_device))
            raise LimitExceededError(
                f"stack {stack.name!r} (tables: {tables}): device {d} fills {int(per_device[d])} CSR slots "
                f"(padding included) for {samples} samples, above max_ids_per_chip_per_sample={cap} x "
                f"{samples} = {configured} ({per_device[d] / samples:.1f} per sample). Raise "
                "SparsecoreConfig.max_ids_per_chip_per_sample (or set it to None).",
                limit="max_ids_per_chip_per_sample", observed=int(per_device[d]), configured=int(configured),
                stack=stack.name, table=table_attr, device=d)


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------
def _oov_masks(batch: FeatureBatch, plan: StackingPlan) -> dict[str, np.ndarray]:
    masks = {}
    for f in plan.features:
        ids = batch.ids(f.name)
        masks[f.name] = ids >= f.table.vocab_size
    return masks


def _raise_oov(batch: FeatureBatch, plan: StackingPlan, position: int) -> None:
    masks = _oov_masks(batch, plan)
    total = int(sum(m.sum() for m in masks.values()))
    f = next(i for i, name in enumerate(batch.feature_names)
             if batch._splits[i, 0] <= position < batch._splits[i, -1] and name in masks)
    name = batch.feature_names[f]
    spec = next(s for s in plan.features if s.name == name)
    rs = batch._splits[f]
    sample = int(np.searchsorted(rs, position, side="right") - 1)
    bad = int(batch._ids[position])
    raise OutOfVocabularyError(
        f"feature {name!r}, sample {sample}: id {bad} is outside the vocabulary of table "
        f"{spec.table.name!r} (vocab_size={spec.table.vocab_size}, ids 0..{spec.table.vocab_size - 1}); "
        f"{total} id(s) of the batch are out of vocabulary. Fix the ids, enlarge the table, or pass "
        "on_out_of_vocabulary='drop' to drop and count them.",
        feature=name, sample=sample, id=bad, vocab_size=spec.table.vocab_size, count=total)


def _stack_rows(stacks: tuple, batch: FeatureBatch) -> tuple[np.ndarray, np.ndarray, bool, int]:
    """Batch rows of every stack's features in order, where each stack starts among them,
    whether every stack has features, and the sum of the stacks' partition counts.

    Kept by the stacks' identity and the batch's feature names (plans never
    change; the paths built on the engine run one plan many times).
    """
    return plan_derived("stack_rows", stacks, batch.feature_names, lambda: _compute_stack_rows(stacks, batch))


def _compute_stack_rows(stacks: tuple, batch: FeatureBatch) -> tuple:
    rows, starts = [], []
    for st in stacks:
        starts.append(len(rows))
        rows += [batch._feature_index(f.name) for f in st.features]
    return (np.array(rows, np.int64), np.array(starts, np.int64), all(st.features for st in stacks),
            sum(int(st.num_partitions) for st in stacks))


def estimate_scratch_bytes(plan: StackingPlan, batch: FeatureBatch, G: int, S: int, want_csr: bool,
                           num_threads: int = 1, slice_counts: np.ndarray | None = None,
                           stack_counts: np.ndarray | None = None,
                           stack_sums: tuple[int, int] | None = None) -> int:
    """Upper estimate (exact integers) of the bytes one call allocates.

    Per stack: the per-(device, SC, partition) counters and their copies in the
    statistics Dataset (about 8 int64 arrays of ``G * S * P``), the naive-view
    lists (8 bytes per id), per-worker sort scratch (about 40 bytes per id of the
    largest slice), and with CSR the row pointers, the stacked-row gains and the
    ``emb``/``smp``/``gout`` buffers (12 bytes per slot, padding included).
    ``slice_counts``: the raw ids of every feature in every slice, ``(features, G * S)``,
    if the caller has them already (computed here otherwise); ``stack_counts`` those of
    every stack, ``(stacks, G * S)``, likewise; ``stack_sums`` their total and the sum of
    every stack's largest slice, likewise (all a statistics-only estimate reads of them).
    """
    nsl = G * S
    n = batch.batch_size // nsl
    # the engine starts at most one worker per slice range, at most nsl per stack
    workers = min(num_threads, nsl * max(1, len(plan.stacks)))
    if stack_sums is not None and not want_csr:
        total_ids, largest_slices = stack_sums
        sum_partitions = _stack_rows(plan.stacks, batch)[3]
        return 8 * 8 * nsl * sum_partitions + 8 * int(total_ids) + 48 * int(largest_slices) * workers
    # raw ids of every stack in every slice, for all stacks at once (a numpy pass
    # per feature and stack cost more than the rest of this estimate)
    rows, starts, every_stack_has_features, sum_partitions = _stack_rows(plan.stacks, batch)
    splits = batch._splits
    per_feature = splits[:, n::n] - splits[:, :-1:n] if slice_counts is None else slice_counts
    if stack_counts is not None:
        per_stack = stack_counts
    elif rows.size and every_stack_has_features:
        per_stack = np.add.reduceat(per_feature[rows], starts, axis=0)
    else:
        per_stack = np.zeros((len(plan.stacks), nsl), np.int64)
        for i, st in enumerate(plan.stacks):
            for f in st.features:
                per_stack[i] += per_feature[batch._feature_index(f.name)]
    if not want_csr:
        # the same sum as the loop below, in Python ints (no overflow whatever the topology)
        return (8 * 8 * nsl * sum_partitions + 8 * int(per_stack.sum())
                + 48 * int(per_stack.max(axis=1, initial=0).sum()) * workers)
    stack_ids = per_stack.sum(axis=1).tolist()
    stack_max = per_stack.max(axis=1, initial=0).tolist()
    fixed, per_id = plan_derived("csr_scratch_terms", plan.stacks, (nsl, n),
                                 lambda: _csr_scratch_terms(plan.stacks, nsl, n))
    total = 0
    for bytes_fixed, bytes_per_id, ids, largest in zip(fixed, per_id, stack_ids, stack_max):
        total += bytes_fixed + bytes_per_id * int(ids) + 48 * int(largest) * workers
    return total


def _csr_scratch_terms(stacks: tuple, nsl: int, n: int) -> tuple[list[int], list[int]]:
    """Per stack, what :func:`estimate_scratch_bytes` adds with CSR besides its per-worker sort
    scratch: bytes that depend on the plan and shape alone, and bytes per raw id. Kept per
    plan and shape (Python ints: no overflow whatever the topology).

    The counters (8 int64 arrays of ``nsl * P``), the row pointers and stacked-row
    gains, and 12 bytes per CSR slot: ``nsl * round_up(max_ids_per_partition, 8) * P``
    slots for a configured limit, else the raw ids plus up to 7 padding slots per
    partition and 8 per slice; and 8 bytes per raw id for the naive-view lists.
    """
    fixed, per_id = [], []
    for st in stacks:
        P = int(st.num_partitions)
        lbits = _lbits(len(st.features), n)
        base = 8 * 8 * nsl * P + 4 * nsl * max(P, _ALIGN) + 4 * nsl * (1 << lbits)
        if st.max_ids_per_partition is not None:
            fixed.append(base + 12 * nsl * round_up(st.max_ids_per_partition, _ALIGN) * P)
            per_id.append(8)
        else:
            fixed.append(base + 12 * (nsl * (_ALIGN - 1) * P + nsl * _ALIGN))
            per_id.append(8 + 12)
    return fixed, per_id


def _check_scratch(plan: StackingPlan, batch: FeatureBatch, G: int, S: int, want_csr: bool,
                   num_threads: int, slice_counts: np.ndarray | None = None,
                   stack_counts: np.ndarray | None = None, stack_sums: tuple[int, int] | None = None) -> None:
    need = estimate_scratch_bytes(plan, batch, G, S, want_csr, num_threads, slice_counts, stack_counts, stack_sums)
    limit = scratch_limit_bytes()
    if need > limit:
        P = plan.stacks[0].num_partitions if plan.stacks else 0
        raise ConfigError(
            f"this call would allocate about {need:,} bytes ({need / 2**30:,.1f} GiB) of scratch for "
            f"{len(plan.stacks)} stack(s) on {G} devices x {S} SparseCores x {P} partitions, above the limit "
            f"of {limit:,} bytes ({SCRATCH_LIMIT_ENV}, the machine's memory or the process's data-size "
            f"limit). Use a smaller topology or "
            f"batch, lower max_ids_per_partition, or raise {SCRATCH_LIMIT_ENV} if the machine has the memory."
        )


def _check_gain_inputs(batch: FeatureBatch, plan: StackingPlan, first: int = 0, end: int | None = None) -> None:
    """Reject weights whose float32 gains overflow, underflow or cancel (preprocess only).

    Runs on the batch the kernels used (out-of-vocabulary ids already dropped) after
    the out-of-vocabulary and limit checks, the errors :func:`compute_stats` raises.
    ``first``, ``end``: only the stacks ``plan.stacks[first:end]``.
    """
    for st in plan.stacks[first:end]:
        for f in st.features:
            _check_gains(batch, f.name, st.combiner)


