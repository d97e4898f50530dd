"""Chip HBM: tables, optimizer slots, SparseCore HBM stack, heap ([sc-guide] §9).

Every number is *per chip* (all chips hold the same amounts: tables are mod-sharded
evenly and every chip runs the same program). The total that must fit is the peak
of the step's memory timeline (:mod:`scwork.memory.timeline`), compared with
``floor(hbm_bytes * (1 - headroom))``.

The model
---------
These are *modelling assumptions*; the basis of each is given.

- **Tables.** ``padded_vocab = round_up(vocab, 8 * P)`` ([jte] table_stacking.py); a chip holds its
  ``sparsecores_per_chip`` partitions of ``padded_vocab / P`` rows each, i.e.
  ``padded_vocab / num_chips`` rows. Every row has the *stack's* width: the largest
  dim of the stack's tables padded to whole 32-byte lines (8 f32 / 16 bf16 elements;
  [jte] table_stacking.py, [sc-guide] §9, :mod:`scwork.layout.embedding`), because a stacked table is one
  array. Padding waste = padded bytes - ``vocab * dim * itemsize / num_chips``.
- **Optimizer slots.** ``slots * table bytes`` in the slot dtype (default: the table
  dtype). Slot counts (:data:`OPTIMIZER_SLOTS`): jax-tpu-embedding's slot
  namedtuples (sgd 0, adagrad 1, adagrad_momentum 2, adam 2, ftrl 2, laprop 2),
  TensorFlow's TPU embedding optimizers (momentum 1, rmsprop 2, centered_rmsprop 3,
  adadelta 2, proximal_adagrad 1, proximal_yogi 2) and LAMB by definition (m, v: 2).
- **HBM stack** ([sc-guide] §9), per stacked table and per
  SparseCore:

  * forward ``(2 * feature_width + 1) * max_unique_nz_per_row * logical_replica_count * 4``
  * backward ``3 * feature_width * max_unique_nz_per_row * logical_replica_count * 4``

  with ``feature_width`` the stack width (padded, elements), ``max_unique_nz_per_row``
  the stack's ``max_unique_ids_per_partition`` (scwork reads a "row" as one partition
  segment of the SparseCore's CSR input, whose length the per-partition limits bound;
  XLA's E3001 describes ``max_nz_per_row`` / ``max_unique_nz_per_row`` as the maximum
  non-unique / unique lookup ids the compiler allocates for) and
  ``logical_replica_count = P``, the number of partitions (all SparseCores of the
  system) by default. Basis for ``P``: XLA's E3001 describes the logical replica
  count as how the compiler partitions a SparseCore's input into chunks that each
  get their own buffers; the finest partitioning the limits describe is one chunk
  per destination partition, so ``max_unique_nz_per_row * P`` is the SparseCore's
  whole unique-id budget per step (its ``P`` CSR rows at their limit), and
  ``(2 * fw + 1)`` per unique id reads as gathered row + combined/partial row +
  one id. The count is compiler-chosen and not published: override it with
  ``logical_replica_count=``. Each SparseCore runs its own program with its own
  stack, so a chip holds ``sparsecores_per_chip`` of them.
- **Serialization** (``num_serialized_tables`` =
  ``xla_sc_num_serialized_tables_to_optimize_hbm = N``): the ``N`` stacks with the
  largest forward stack run one after another, each alone in its slot, while the
  other stacks run concurrently through the whole SparseCore phase. ``N <= 1`` is
  everything concurrent. The peak stack is then ``sum(concurrent) +
  max(serialized)``, which never grows with ``N`` ([sc-guide] §9: a larger value lowers
  the peak HBM stack at the cost of parallelism).
- **Embedding activations and gradients** (SC <-> TC through HBM, [sc-guide]
  §8): ``sparsecores_per_chip * sample_count * feature_width * 4`` per stack (float32),
  activations from the stack's SparseCore forward pass to the end of the TensorCore
  forward pass, gradients from the TensorCore backward pass to the end of the
  stack's SparseCore backward pass. With ``stage_gather_operands_in_hbm`` the gather
  operand (same size) also lives in HBM during the stack's SparseCore forward pass.
- **Heap** (host managed): ``dense_weights_bytes + constants_bytes +
  maximum_parallel_iterations * prefetch_bytes_per_step``; by default one step's
  input is the CSR input of every stack, ``sparsecores_per_chip * (max(P, 8) * 4 +
  round_up(max_ids, 8) * P * 12)`` bytes ([jte] preprocess_sparse_dense_matmul_input: the COO buffer of a device is
  ``round_up(max_ids, 8) * S * P`` entries of id, sample id and gain, plus row
  pointers). Dense-feature inputs are not known to the model: pass
  ``prefetch_bytes_per_step`` to replace the default. ``tensorcore_activation_bytes``
  (dense activations kept from the TensorCore forward to its backward pass) is
  also a parameter.

Examples
--------
>>> hbm_stack_bytes(8, 8, 16)      # fw 8, 8 unique ids per partition row, P = 16
(8704, 12288)
>>> table_hbm_bytes(1000, 1, num_chips=1, sparsecores_per_chip=2, optimizer="adagrad")["slot_bytes"]
32256
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scwork.memory._hbm_numbers import HbmNumbers, hbm_numbers, stack_bytes_per_sc
from scwork.memory._model import (
    CATEGORIES,
    CSR_ALIGNMENT,
    OPTIMIZER_SLOTS,
    SPARSECORE_CATEGORIES,
    Knobs,
    Model,
    check_int,
    optimizer_slot_count,
    padded_dim,
    parse_dtype,
    round_up,
)
from scwork.memory._resolve import resolve
from scwork.memory.findings import Finding, MemoryFitError

__all__ = [
    "OPTIMIZER_SLOTS",
    "CATEGORIES",
    "ASSUMPTIONS",
    "optimizer_slot_count",
    "hbm_stack_bytes",
    "table_hbm_bytes",
    "hbm_report",
    "check_hbm",
]

#: The modelling assumptions, one line each (also in the datasets' attrs).
ASSUMPTIONS: tuple[str, ...] = (
    "tables: padded_vocab / num_chips rows per chip of the stack width (largest dim padded to 32-byte lines)",
    "optimizer slots: slot count x table shape, in the slot dtype (default: table dtype)",
    "HBM stack per SparseCore: forward (2 fw + 1) U LRC 4 B, backward 3 fw U LRC 4 B ([sc-guide] §9)",
    "U = max_unique_ids_per_partition; LRC = logical_replica_count, default P (all SparseCores)",
    "a chip holds sparsecores_per_chip HBM stacks per stacked table",
    "serialization N: the N largest stacks run one at a time, the rest concurrently; N <= 1: all concurrent",
    "activations / gradients: sparsecores_per_chip x sample_count x fw x 4 B per stack",
    ("heap: dense weights + constants + maximum_parallel_iterations x prefetched input "
     "(default: the CSR input of every stack)"),
    "usable HBM = floor(hbm_bytes x (1 - headroom)); the total is the peak of the step timeline",
)


def hbm_stack_bytes(feature_width: int, max_unique_nz_per_row: int,
                    logical_replica_count: int) -> tuple[int, int]:
    """Forward and backward HBM stack of one stacked table on one SparseCore ([sc-guide] §9).

    Parameters
    ----------
    feature_width : int
        Padded width of the stack (elements).
    max_unique_nz_per_row : int
        ``max_unique_ids_per_partition`` of the stack.
    logical_replica_count : int
        The compiler's logical replica count (scwork's default: ``P``, see the module
        docstring).

    Returns
    -------
    (int, int)
        ``((2 * fw + 1) * U * LRC * 4, 3 * fw * U * LRC * 4)`` bytes.

    Examples
    --------
    Width 64, 128 unique ids, 16 partitions: forward ``129 * 128 * 16 * 4 = 1056768``,
    backward ``192 * 128 * 16 * 4 = 1572864``.

    >>> hbm_stack_bytes(64, 128, 16)
    (1056768, 1572864)
    """
    fw = check_int("feature_width", feature_width, minimum=1, unit="elements")
    U = check_int("max_unique_nz_per_row", max_unique_nz_per_row, minimum=0, unit="ids")
    lrc = check_int("logical_replica_count", logical_replica_count, minimum=1, unit="replicas")
    return stack_bytes_per_sc(fw, U, lrc)


def table_hbm_bytes(vocab_size: int, embedding_dim: int, *, num_chips: int, sparsecores_per_chip: int,
                    dtype: str = "f32", optimizer: str = "sgd", slot_dtype: str | None = None,
                    optimizer_slots: Mapping[str, int] | None = None, line_bytes: int = 32,
                    width: int | None = None) -> dict[str, Any]:
    """HBM of one table and its optimizer slots on one chip.

    Parameters
    ----------
    vocab_size, embedding_dim : int
        Table rows and width, >= 1.
    num_chips, sparsecores_per_chip : int
        The topology: ``P = num_chips * sparsecores_per_chip``.
    dtype : str, default "f32"
        Table dtype (``f32``, ``bf16``, ``f16``, ``s8``).
    optimizer : str, default "sgd"
        Optimizer name (slot count from :data:`OPTIMIZER_SLOTS` or ``optimizer_slots``).
    slot_dtype : str, optional
        Slot dtype; default the table dtype.
    optimizer_slots : mapping, optional
        Extra ``{optimizer: slot count}``.
    line_bytes : int, default 32
        Rows are padded to whole lines of this size.
    width : int, optional
        Row width when the table is part of a wider stack (elements, >= the padded dim).

    Returns
    -------
    dict
        ``padded_vocab``, ``padded_dim`` (row width used), ``rows_per_chip``,
        ``slot_count``, ``table_bytes``, ``slot_bytes``, ``waste_bytes`` (table and slots).

    Raises
    ------
    ConfigError
        Non-positive sizes, unknown dtype or optimizer.

    Examples
    --------
    1000 x 1 f32 on 1 chip with 2 SparseCores: ``padded_vocab = round_up(1000, 16) =
    1008``, width 8, ``1008 * 8 * 4 = 32256`` bytes, of which ``32256 - 4000 = 28256``
    padding.

    >>> d = table_hbm_bytes(1000, 1, num_chips=1, sparsecores_per_chip=2)
    >>> d["padded_vocab"], d["padded_dim"], d["table_bytes"], d["waste_bytes"]
    (1008, 8, 32256, 28256.0)
    """
    vocab = check_int("vocab_size", vocab_size, minimum=1, unit="rows")
    dim = check_int("embedding_dim", embedding_dim, minimum=1, unit="elements")
    chips = check_int("num_chips", num_chips, minimum=1, unit="chips")
    S = check_int("sparsecores_per_chip", sparsecores_per_chip, minimum=1, unit="SparseCores")
    line = check_int("line_bytes", line_bytes, minimum=1, unit="bytes")
    _, e = parse_dtype(dtype)
    se = e if slot_dtype is None else parse_dtype(slot_dtype, "slot_dtype")[1]
    slots = optimizer_slot_count(optimizer, optimizer_slots)
    pd = padded_dim(dim, e, line)
    w = pd if width is None else check_int("width", width, minimum=pd, unit="elements")
    P = chips * S
    pv = round_up(vocab, CSR_ALIGNMENT * P)
    rows = pv // chips
    table = rows * w * e
    slot = slots * rows * w * se
    unpadded = vocab * dim / chips
    return {"padded_vocab": pv, "padded_dim": w, "rows_per_chip": rows, "slot_count": slots,
            "table_bytes": table, "slot_bytes": slot,
            "waste_bytes": float(table + slot - unpadded * (e + slots * se))}


def hbm_variables(model: Model, knobs: Knobs, hbm: HbmNumbers) -> tuple[dict, dict, dict]:
    """xarray variables, coordinates and attrs of the HBM model (shared with the report)."""
    import xarray as xr

    def var(dims, values, long_name, units):
        return xr.Variable(dims, values, attrs={"long_name": long_name, "units": units})

    T = len(model.stacks)
    serial = np.full(T, -1, np.int64)
    for j, i in enumerate(hbm.chain):
        serial[i] = j
    at_peak = hbm.usage_by_category[hbm.peak_event]
    cat_max = hbm.usage_by_category.max(axis=0)
    lrc = knobs.lrc
    data = {
        # tables
        "vocab_size": var("table", np.array([t.vocab_size for t in model.tables], np.int64), "vocabulary", "rows"),
        "embedding_dim": var("table", np.array([t.embedding_dim for t in model.tables], np.int64),
                             "embedding dim", "elements"),
        "padded_vocab": var("table", hbm.table_padded_vocab, "round_up(vocab, 8 * P)", "rows"),
        "row_width": var("table", hbm.table_width, "row width in HBM: stack width (padded)", "elements"),
        "rows_per_chip": var("table", hbm.table_padded_vocab // knobs.num_chips, "rows stored on each chip",
                             "rows"),
        "slot_count": var("table", np.array([t.slot_count for t in model.tables], np.int64),
                          "optimizer slot variables", "count"),
        "table_bytes": var("table", hbm.table_bytes, "table bytes per chip", "bytes"),
        "slot_bytes": var("table", hbm.slot_bytes, "optimizer slot bytes per chip", "bytes"),
        "table_waste_bytes": var("table", hbm.table_waste + hbm.slot_waste,
                                 "padding bytes per chip (table and slots)", "bytes"),
        # stacks
        "feature_width": var("stack", hbm.feature_width, "stack width padded to 32-byte lines", "elements"),
        "max_ids_per_partition": var("stack", hbm.max_ids, "compiled max ids per partition", "ids"),
        "max_unique_ids_per_partition": var("stack", hbm.max_unique,
                                            "compiled max unique ids per partition (max_unique_nz_per_row)", "ids"),
        "limits_source": var("stack", np.array(hbm.limit_source, dtype=object), "where the limits come from", ""),
        "sample_count": var("stack", hbm.sample_count, "input rows one SparseCore handles", "samples"),
        "forward_stack_bytes_per_sc": var("stack", hbm.fwd_stack_sc,
                                          "(2 fw + 1) * U * LRC * 4: forward HBM stack of one SparseCore", "bytes"),
        "backward_stack_bytes_per_sc": var("stack", hbm.bwd_stack_sc,
                                           "3 fw * U * LRC * 4: backward HBM stack of one SparseCore", "bytes"),
        "forward_stack_bytes": var("stack", hbm.fwd_stack, "forward HBM stack per chip", "bytes"),
        "backward_stack_bytes": var("stack", hbm.bwd_stack, "backward HBM stack per chip", "bytes"),
        "staged_gather_bytes": var("stack", hbm.staged_gather, "gather operand staged in HBM per chip", "bytes"),
        "activation_bytes": var("stack", hbm.activations, "embedding activations (= gradients) per chip",
                                "bytes"),
        "input_bytes_per_step": var("stack", hbm.csr_bytes, "CSR input of one step per chip", "bytes"),
        "serialization_slot": var("stack", serial, "slot in the serialized chain (-1: concurrent)", "1"),
        # categories
        "bytes_at_peak": var("category", at_peak, "bytes live at the step's peak", "bytes"),
        "max_bytes": var("category", cat_max, "largest amount live during the step", "bytes"),
        "chip_bytes_at_peak": var(("chip", "category"),
                                  np.broadcast_to(at_peak, (knobs.num_chips, len(CATEGORIES))),
                                  "bytes live at the peak on each chip (every chip holds the same)", "bytes"),
        # scalars
        "peak_bytes": var((), hbm.peak_bytes, "peak HBM of the step", "bytes"),
        "usable_bytes": var((), hbm.usable, "HBM per chip after headroom", "bytes"),
        "hbm_bytes": var((), hbm.capacity, "HBM capacity per chip", "bytes"),
        "free_bytes": var((), hbm.usable - hbm.peak_bytes, "usable HBM left at the peak", "bytes"),
        "hbm_fits": var((), hbm.fits, "peak <= usable HBM", "1"),
    }
    coords = {
        "table": ("table", np.array([t.name for t in model.tables], dtype=object), {"long_name": "embedding table"}),
        "stack_of_table": ("table", np.array([t.stack for t in model.tables], dtype=object),
                           {"long_name": "stack holding the table"}),
        "optimizer": ("table", np.array([t.optimizer for t in model.tables], dtype=object),
                      {"long_name": "optimizer"}),
        "dtype": ("table", np.array([knobs.dtype_override or t.dtype for t in model.tables], dtype=object),
                  {"long_name": "table dtype"}),
        "stack": ("stack", np.array([s.name for s in model.stacks], dtype=object), {"long_name": "stacked table"}),
        "category": ("category", np.array(CATEGORIES, dtype=object), {"long_name": "HBM use"}),
        "sparsecore_category": ("category", np.array([c in SPARSECORE_CATEGORIES for c in CATEGORIES]),
                                {"long_name": "counted as SparseCore HBM usage"}),
        "chip": ("chip", np.arange(knobs.num_chips), {"long_name": "chip index"}),
    }
    attrs = {
        "units": "bytes",
        "hbm_fits": int(hbm.fits),
        "peak_bytes": hbm.peak_bytes,
        "peak_event": hbm.ev_name[hbm.peak_event],
        "usable_bytes": hbm.usable,
        "hbm_bytes": hbm.capacity,
        "headroom": knobs.headroom,
        "num_chips": knobs.num_chips,
        "num_partitions": knobs.num_partitions,
        "logical_replica_count": lrc,
        "num_serialized_tables": knobs.num_serialized_tables,
        "maximum_parallel_iterations": knobs.maximum_parallel_iterations,
        "prefetch_bytes_per_step": hbm.prefetch_per_step,
        "prefetch_default": int(hbm.prefetch_computed),
        "dense_weights_bytes": knobs.dense_weights_bytes,
        "constants_bytes": knobs.constants_bytes,
        "tensorcore_activation_bytes": knobs.tensorcore_activation_bytes,
        "stage_gather_operands_in_hbm": int(knobs.stage_gather_operands_in_hbm),
    }
    return data, coords, attrs


def _dataset(model: Model, knobs: Knobs, hbm: HbmNumbers, findings: list[Finding]):
    import xarray as xr

    data, coords, attrs = hbm_variables(model, knobs, hbm)
    attrs.update({"long_name": "HBM per chip over one training step", "fits": int(hbm.fits),
                  "diagnoses": [str(f) for f in findings], "assumptions": list(ASSUMPTIONS)})
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _evaluate(model: Any, topology: Any, kwargs: dict):
    from scwork.memory._diagnose import hbm_findings, input_findings

    m, k = resolve(model, topology, **kwargs)
    hbm = hbm_numbers(m, k)
    return m, k, hbm, hbm_findings(m, k, hbm) + input_findings(m, k, hbm, None)


def hbm_report(model: Any, topology: Any, **kwargs):
    """HBM per chip: tables, slots, HBM stacks, heap, and the step's peak against capacity.

    Parameters
    ----------
    model, topology
        As in :func:`scwork.memory.plan`.
    **kwargs
        The keywords of :func:`scwork.memory.plan` (``batch_size`` is required;
        ``tile_spmem_bytes`` is not needed here).

    Returns
    -------
    xarray.Dataset
        Dims ``table``, ``stack``, ``category`` and ``chip``. Per table:
        ``table_bytes``, ``slot_bytes``, ``table_waste_bytes``, ``padded_vocab``,
        ``row_width``, ``rows_per_chip``, ``slot_count`` (coords ``stack_of_table``,
        ``optimizer``, ``dtype``). Per stack: ``forward_stack_bytes(_per_sc)``,
        ``backward_stack_bytes(_per_sc)``, ``staged_gather_bytes``,
        ``activation_bytes``, ``input_bytes_per_step``, ``serialization_slot``,
        limits. Per category (:data:`CATEGORIES`): ``bytes_at_peak``, ``max_bytes``;
        ``chip_bytes_at_peak`` (chip, category). Scalars ``peak_bytes``,
        ``usable_bytes``, ``hbm_bytes``, ``free_bytes``, ``hbm_fits``. All in bytes
        (``units`` attrs). Attributes: ``fits``, ``diagnoses``, ``assumptions`` and
        the inputs that matter.

    Raises
    ------
    ConfigError
        Invalid inputs (negative sizes, unknown optimizer, ...).

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import TableSpec
    >>> t = TableSpec("t", 10**6, 16, optimizer="adagrad", max_ids_per_partition=256,
    ...               max_unique_ids_per_partition=128)
    >>> ds = hbm_report([t], scwork.Topology.for_chip("v5p", num_chips=4), batch_size=16384)
    >>> int(ds["table_bytes"].sel(table="t"))      # round_up(10**6, 8 * 16) / 4 chips * 16 * 4 B
    16001024
    >>> ds.attrs["fits"]
    1
    """
    m, k, hbm, findings = _evaluate(model, topology, kwargs)
    return _dataset(m, k, hbm, findings)


def check_hbm(model: Any, topology: Any, **kwargs):
    """Like :func:`hbm_report`, but raise when the step's peak exceeds usable HBM.

    Raises
    ------
    MemoryFitError
        ``resource="hbm"``, ``required_bytes`` (peak) and ``available_bytes``
        (usable HBM); ``findings`` holds the out-of-memory finding with its fixes
        (``num_serialized_tables``, ``maximum_parallel_iterations``, ``dtype``,
        ``num_chips``, ``batch_size``, ...).

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import TableSpec
    >>> t = TableSpec("big", 4 * 10**9 // 2, 64, max_ids_per_partition=64)
    >>> try:
    ...     check_hbm([t], scwork.Topology.for_chip("v5p", num_chips=4), batch_size=4096)
    ... except MemoryFitError as err:
    ...     print(err.resource, [f.parameter for f in err.findings[0].fixes][:2])
    hbm ['dtype', 'num_chips']
    """
    m, k, hbm, findings = _evaluate(model, topology, kwargs)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise MemoryFitError("\n".join(str(f) for f in errors), resource="hbm", findings=errors,
                             required_bytes=hbm.peak_bytes, available_bytes=hbm.usable,
                             report=_dataset(m, k, hbm, findings))
    return _dataset(m, k, hbm, findings)
