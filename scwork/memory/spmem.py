"""SparseCore SPMEM: the statically sized buffers of one tile, per stacked table ([sc-guide] §9).

The compiler sizes SPMEM buffers at compile time from the limits
``max_ids_per_partition`` and ``max_unique_ids_per_partition``, the padded
embedding width and the per-SparseCore sample count; there is no dynamic
scratchpad allocation ([sc-guide] §9). When they do not fit,
compilation fails with ``Fixed size allocations (...) do not fit in TileSpmem (...)``
or ``Gather operand too large...`` ([sc-guide] §10, error E3001).

The model
---------
All of the following are *modelling assumptions*; the basis of each is given.

- **Unit of allocation: one stacked table.** The compiler sees one logical table per
  stack and compiles one SparseCore lookup per stack; its SPMEM buffers are checked
  against one tile's TileSpmem on their own (buffers of different stacks are not
  live at once). Basis: XLA error E3001 reports the allocation "for the embedding
  table with metadata ..." against ``total_spmem_size_bytes = 524288``, which is one
  v5p tile's TileSpmem.
- **Buffers of one tile** (``P`` partitions, ``T`` tiles per SparseCore, ``fw`` the
  stack width padded to 32-byte lines, ``e`` the table's itemsize, ``M`` and ``U``
  the limits rounded up to multiples of 8, the TPU vector alignment of [jte] preprocess_sparse_dense_matmul_input):

  ============== ================ ===================================================
  buffer         allocation class bytes per tile
  ============== ================ ===================================================
  gather_operand fixed            ``ceil(sample_count * fw / T) * 4``
  row_pointers   fixed            ``max(P, 8) * 4``
  unique_ids     fixed            ``U * 4``
  gathered_rows  fixed            ``U * fw * e``
  embedding_ids  row_dependent    ``M * 4``
  sample_ids     row_dependent    ``M * 4``
  gains          row_dependent    ``M * 4``
  ============== ================ ===================================================

  ``sample_count`` is the number of rows of the stack's input one SparseCore handles:
  ``features_in_stack * ceil(B / P)`` ([jte] preprocess_sparse_dense_matmul_input: each source SparseCore owns
  ``B / (G * S)`` samples of every feature). E3001's text calls it the lookup ids
  "derived from the batch size"; [sc-guide] §10 multiplies it by ``feature_width`` to size
  the gather operand, an output of one row per input row, so scwork reads it as rows. The gather operand (the combined
  activations the SparseCore produces, float32) is *split evenly over the tiles*,
  exactly ``(sample_count * feature_width) / kNumTiles`` of [sc-guide] §10. The CSR
  structures of one partition row ([jte] preprocess_sparse_dense_matmul_input: ids, sample ids and gains of up to
  ``max_ids_per_partition`` entries, int32 / int32 / float32) and the unique-id
  buffers are *not split*: every tile processes whole partition rows and holds a
  full row's buffers. Basis: E3001's sample message, ``max_nz_per_row = 141352``,
  ``max_unique_nz_per_row = 8``, ``feature_width = 8``, ``sample_count = 204800``,
  ``fixed_size_allocation_bytes = 410880``, ``row_dependent_size_allocation_bytes =
  1696224``: the row-dependent part is exactly ``141352 * 12`` and the fixed part is
  ``204800 * 8 * 4 / 16 = 409600`` plus 1280 bytes, which this model reproduces as
  row pointers (``P = 256``: 1024) and gathered rows (256) to within the 32 bytes of
  the unique-id buffer (the message does not give ``P``; 256 is the value that makes
  the numbers meet).
- **Single buffering.** No buffer is counted twice for double buffering: the E3001
  numbers above leave no room for a second copy.
- **Gather operand in HBM.** ``stage_gather_operands_in_hbm=True`` ([sc-guide] §14, "recent
  improvements") removes the gather operand from SPMEM; :mod:`scwork.memory.hbm`
  then counts it in HBM while the stack's SparseCore forward pass runs.
- **No compiler splitting.** The compiler may split the vector or sample dimension
  ("split factor for vector splitting / sample dimension splitting", E3001) to fit;
  the model reports the unsplit requirement, i.e. what fits without relying on it.
- **Shared Spmem** (per SparseCore) is unpublished and not modelled.

Examples
--------
The E3001 example (v5p: 16 tiles of 512 KiB), assuming ``P = 256``:

>>> b = tile_buffers(141352, 8, 8, 204800, num_partitions=256, num_tiles=16)
>>> b["gather_operand"], b["row_pointers"], b["gathered_rows"], b["unique_ids"]
(409600, 1024, 256, 32)
>>> b["embedding_ids"] + b["sample_ids"] + b["gains"]
1696224
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scwork.errors import ConfigError
from scwork.memory._model import ACTIVATION_BYTES, Knobs, Model, check_int
from scwork.memory._resolve import resolve
from scwork.memory._spmem_numbers import SPMEM_BUFFERS, SpmemNumbers, spmem_numbers, tile_buffer_bytes
from scwork.memory.findings import Finding, MemoryFitError

__all__ = ["SPMEM_BUFFERS", "tile_buffers", "spmem_report", "check_spmem", "ASSUMPTIONS"]

#: The modelling assumptions, one line each (also in the datasets' attrs).
ASSUMPTIONS: tuple[str, ...] = (
    "unit: one stacked table's SparseCore op; its buffers alone must fit one tile's TileSpmem (E3001)",
    ("gather operand = ceil(sample_count * feature_width / tiles) * 4 B, split evenly over the tiles "
     "([sc-guide] §10, E3001)"),
    "row pointers max(P, 8) * 4 B, unique ids U * 4 B, gathered rows U * fw * itemsize: fixed, not split",
    "CSR row of one partition: ids, sample ids, gains = 12 B per id up to max_ids: row-dependent, not split (E3001)",
    ("limits rounded up to multiples of 8 (TPU vector alignment, [jte] preprocess_sparse_dense_matmul_input); "
     "single buffering (no double buffers)"),
    "sample_count = features in stack * ceil(batch / P); feature_width = stack width padded to 32-byte lines",
    "no compiler vector/sample splitting; shared Spmem not modelled",
)


def tile_buffers(max_ids_per_partition: int, max_unique_ids_per_partition: int, feature_width: int,
                 sample_count: int, *, num_partitions: int, num_tiles: int = 16, itemsize: int = 4,
                 stage_gather_operands_in_hbm: bool = False) -> dict[str, int]:
    """Bytes of each SPMEM buffer of one tile for one stacked table.

    Parameters
    ----------
    max_ids_per_partition, max_unique_ids_per_partition : int
        The compiled limits (rounded up to multiples of 8 here), >= 1.
    feature_width : int
        Padded width of the stack (elements), >= 1.
    sample_count : int
        Rows of the stack's input one SparseCore handles (features x samples), >= 0.
    num_partitions : int
        ``P``, SparseCores of the system (row pointers: ``max(P, 8)``).
    num_tiles : int, default 16
        Tiles per SparseCore.
    itemsize : int, default 4
        Bytes per table element (gathered rows).
    stage_gather_operands_in_hbm : bool, default False
        True: the gather operand lives in HBM (0 bytes here).

    Returns
    -------
    dict
        Buffer name -> bytes per tile, in :data:`SPMEM_BUFFERS` order.

    Examples
    --------
    ``M = 256``, ``U = 128``, width 16 (f32), 4 features x 256 samples, ``P = 16``,
    16 tiles: gather ``1024 * 16 / 16 * 4 = 4096``; row pointers ``16 * 4 = 64``;
    unique ids ``128 * 4 = 512``; gathered rows ``128 * 16 * 4 = 8192``; each CSR
    array ``256 * 4 = 1024``.

    >>> tile_buffers(256, 128, 16, 1024, num_partitions=16)  # doctest: +NORMALIZE_WHITESPACE
    {'gather_operand': 4096, 'row_pointers': 64, 'unique_ids': 512, 'gathered_rows': 8192,
     'embedding_ids': 1024, 'sample_ids': 1024, 'gains': 1024}
    >>> sum(tile_buffers(256, 128, 16, 1024, num_partitions=16, stage_gather_operands_in_hbm=True).values())
    11840
    """
    M = check_int("max_ids_per_partition", max_ids_per_partition, minimum=1, unit="ids")
    U = check_int("max_unique_ids_per_partition", max_unique_ids_per_partition, minimum=1, unit="ids")
    fw = check_int("feature_width", feature_width, minimum=1, unit="elements")
    sc = check_int("sample_count", sample_count, minimum=0, unit="samples")
    P = check_int("num_partitions", num_partitions, minimum=1, unit="partitions")
    T = check_int("num_tiles", num_tiles, minimum=1, unit="tiles")
    e = check_int("itemsize", itemsize, minimum=1, unit="bytes")
    if not isinstance(stage_gather_operands_in_hbm, (bool, np.bool_)):
        raise ConfigError(f"stage_gather_operands_in_hbm must be True or False, got {stage_gather_operands_in_hbm!r}")
    values = tile_buffer_bytes(M, U, fw, sc, num_partitions=P, num_tiles=T, itemsize=e,
                               stage_gather_operands_in_hbm=bool(stage_gather_operands_in_hbm))
    return {name: int(v) for (name, _), v in zip(SPMEM_BUFFERS, values)}


def spmem_variables(model: Model, knobs: Knobs, spm: SpmemNumbers) -> tuple[dict, dict]:
    """xarray variables and coordinates of the SPMEM model (shared with the report)."""
    import xarray as xr

    cap = spm.capacity
    total = spm.total

    def var(dims, values, long_name, units):
        return xr.Variable(dims, values, attrs={"long_name": long_name, "units": units})

    data = {
        "spmem_buffer_bytes": var(("stack", "buffer"), spm.buffers, "SPMEM bytes of each buffer on one tile",
                                  "bytes"),
        "spmem_fixed_bytes": var("stack", spm.fixed, "fixed-size allocations per tile (E3001 "
                                 "fixed_size_allocation_bytes)", "bytes"),
        "spmem_row_dependent_bytes": var("stack", spm.row_dependent, "row-dependent allocations per tile "
                                         "(E3001 row_dependent_size_allocation_bytes)", "bytes"),
        "spmem_total_bytes": var("stack", total, "SPMEM bytes per tile", "bytes"),
        "spmem_sparsecore_bytes": var("stack", total * knobs.tiles_per_sparsecore,
                                      "SPMEM bytes over the SparseCore's tiles", "bytes"),
        "spmem_free_bytes": var("stack", cap - total, "TileSpmem left per tile (negative: overflow)", "bytes"),
        "spmem_utilization": var("stack", total / cap, "fraction of TileSpmem used", "1"),
        "spmem_fits": var("stack", total <= cap, "the stack's buffers fit in TileSpmem", "1"),
        "feature_width": var("stack", spm.feature_width, "stack width padded to 32-byte lines", "elements"),
        "max_ids_per_partition": var("stack", spm.max_ids, "compiled max ids per partition", "ids"),
        "max_unique_ids_per_partition": var("stack", spm.max_unique, "compiled max unique ids per partition",
                                            "ids"),
        "sample_count": var("stack", spm.sample_count, "input rows one SparseCore handles (features x samples)",
                            "samples"),
        "limits_source": var("stack", np.array(spm.limit_source, dtype=object),
                             "where the limits come from (configured / override / stats / estimate)", ""),
    }
    coords = {
        "stack": ("stack", np.array(spm.stacks, dtype=object), {"long_name": "stacked table"}),
        "buffer": ("buffer", np.array([b for b, _ in SPMEM_BUFFERS], dtype=object),
                   {"long_name": "SPMEM buffer of one tile"}),
        "allocation_class": ("buffer", np.array([c for _, c in SPMEM_BUFFERS], dtype=object),
                             {"long_name": "fixed or row-dependent allocation (E3001 naming)"}),
    }
    return data, coords


def _dataset(model: Model, knobs: Knobs, spm: SpmemNumbers, findings: list[Finding]):
    import xarray as xr

    data, coords = spmem_variables(model, knobs, spm)
    fits = bool(spm.fits.all())
    return xr.Dataset(data, coords=coords, attrs={
        "long_name": "SparseCore SPMEM per tile",
        "units": "bytes",
        "fits": int(fits),
        "tile_spmem_bytes": int(spm.capacity),
        "tiles_per_sparsecore": knobs.tiles_per_sparsecore,
        "num_partitions": knobs.num_partitions,
        "batch_size": knobs.batch_size,
        "stage_gather_operands_in_hbm": int(knobs.stage_gather_operands_in_hbm),
        "gather_operand_element_bytes": ACTIVATION_BYTES,
        "diagnoses": [str(f) for f in findings],
        "assumptions": list(ASSUMPTIONS),
    })


def _evaluate(model: Any, topology: Any, kwargs: dict):
    from scwork.memory._diagnose import input_findings, spmem_findings

    m, k = resolve(model, topology, **kwargs)
    spm = spmem_numbers(m, k)
    return m, k, spm, spmem_findings(m, k, spm) + input_findings(m, k, None, spm)


def spmem_report(model: Any, topology: Any, **kwargs):
    """SPMEM per tile of every stack, whether it fits, and why not.

    Parameters
    ----------
    model, topology
        As in :func:`scwork.memory.plan`.
    **kwargs
        The keywords of :func:`scwork.memory.plan` (``batch_size`` is required; the
        HBM-only ones are accepted and ignored).

    Returns
    -------
    xarray.Dataset
        Dims ``stack`` and ``buffer`` (coordinate ``allocation_class``: ``fixed`` or
        ``row_dependent``). Variables: ``spmem_buffer_bytes`` (stack, buffer);
        ``spmem_fixed_bytes``, ``spmem_row_dependent_bytes``, ``spmem_total_bytes``,
        ``spmem_sparsecore_bytes``, ``spmem_free_bytes``, ``spmem_utilization``,
        ``spmem_fits``, ``feature_width``, ``max_ids_per_partition``,
        ``max_unique_ids_per_partition``, ``sample_count``, ``limits_source``
        (stack); every one with ``units``. Attributes: ``fits`` (1/0), ``diagnoses``
        (the findings as text, with evidence and fixes), ``assumptions``,
        ``tile_spmem_bytes`` and the inputs that matter.

    Raises
    ------
    ConfigError
        Invalid inputs, or a chip whose TileSpmem is unpublished (v4) without
        ``tile_spmem_bytes``.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import TableSpec
    >>> t = TableSpec("t", 10**6, 16, max_ids_per_partition=256, max_unique_ids_per_partition=128)

    1024 samples per SparseCore: gather ``1024 * 16 / 16 * 4 = 4096``, row pointers 64,
    unique ids 512, gathered rows ``128 * 16 * 4 = 8192``, CSR ``256 * 12 = 3072``.

    >>> ds = spmem_report([t], scwork.Topology.for_chip("v5p", num_chips=4), batch_size=16384)
    >>> int(ds["spmem_total_bytes"].sel(stack="t")), ds.attrs["fits"]
    (15936, 1)
    """
    m, k, spm, findings = _evaluate(model, topology, kwargs)
    return _dataset(m, k, spm, findings)


def check_spmem(model: Any, topology: Any, **kwargs):
    """Like :func:`spmem_report`, but raise when a stack does not fit.

    Returns
    -------
    xarray.Dataset
        The :func:`spmem_report` dataset when everything fits.

    Raises
    ------
    MemoryFitError
        ``resource="spmem"``; ``findings`` holds one finding per failing stack
        ("Fixed size allocations ... do not fit in TileSpmem" or "Gather operand too
        large ..."), each with evidence and fixes; ``stack``, ``required_bytes``
        (per tile) and ``available_bytes`` describe the first.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import TableSpec
    >>> t = TableSpec("t", 10**6, 128, max_ids_per_partition=256, max_unique_ids_per_partition=128)
    >>> try:
    ...     check_spmem([t], scwork.Topology.for_chip("v5p", num_chips=1), batch_size=65536)
    ... except MemoryFitError as err:
    ...     print(err.findings[0].code, err.required_bytes > err.available_bytes)
    ...     print([f.parameter for f in err.findings[0].fixes])
    spmem_gather_operand_too_large True
    ['stage_gather_operands_in_hbm', 'batch_size', 'num_chips']
    """
    m, k, spm, findings = _evaluate(model, topology, kwargs)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        findings = errors
        first = findings[0]
        row = spm.stacks.index(first.stack)
        text = "\n".join(str(f) for f in findings)
        raise MemoryFitError(
            f"{len(findings)} stack(s) do not fit in SparseCore TileSpmem:\n{text}", resource="spmem",
            findings=findings, required_bytes=int(spm.total[row]), available_bytes=int(spm.capacity),
            stack=first.stack, report=_dataset(m, k, spm, findings))
    return _dataset(m, k, spm, findings)
