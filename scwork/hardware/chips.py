"""Chip descriptions: frozen dataclasses whose fields carry units and sources.

Every field states its unit in ``metadata["unit"]``; every catalog entry records,
per field, where its value comes from in ``sources`` (see :func:`scwork.hardware.describe`).
Override any field with :func:`dataclasses.replace`; the override is recorded in
``sources`` as ``"user override"`` when done through :func:`scwork.hardware.override`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

__all__ = ["TpuChip", "NpuChip", "GiB", "KiB", "GB"]

KiB = 1024
GiB = 1024**3
GB = 10**9


def _f(unit: str, doc: str, default=dataclasses.MISSING):
    meta = {"unit": unit, "doc": doc}
    if default is dataclasses.MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class _Sourced:
    """What every catalog entry carries besides its values: the source of each one."""

    sources: Mapping[str, str] = field(
        default_factory=dict, compare=False, repr=False, kw_only=True,
        metadata={"unit": "", "doc": "Field name -> where its value comes from."},
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))


@dataclass(frozen=True)
class TpuChip(_Sourced):
    """One TPU generation, as far as scwork's models need it.

    Values are per chip unless the name says otherwise. ``None`` means "not
    published"; models that need such a value take it as an explicit parameter.
    """

    name: str = _f("", "Catalog key, e.g. 'v5p'.")
    marketing_name: str = _f("", "Name used in public docs, e.g. 'TPU v5p'.")
    sparsecores_per_chip: int = _f("count", "SparseCores per chip (0: none).")
    tiles_per_sparsecore: int = _f("count", "Vector subcores (tiles) per SparseCore.")
    simd_width_f32: int = _f("lanes", "SparseCore SIMD width for 32-bit elements.")
    simd_width_bf16: int = _f("lanes", "SparseCore SIMD width for 16-bit elements.")
    tile_spmem_bytes: int | None = _f("bytes", "TileSpmem per tile (None: unpublished).")
    shared_spmem_bytes: int | None = _f(
        "bytes", "Shared Spmem per SparseCore; unpublished for every chip, so a parameter."
    )
    dma_granule_bytes: int = _f("bytes", "SparseCore DMA granule for HBM row gathers.")
    tensorcores_per_chip: int = _f("count", "TensorCores per chip.")
    hbm_bytes: int = _f("bytes", "HBM capacity per chip.")
    hbm_bandwidth_bytes_per_s: float = _f("bytes/s", "HBM bandwidth per chip.")
    ici_ports: int = _f("count", "ICI ports (links) per chip.")
    ici_topology: str = _f("", "Native ICI topology, e.g. '3D torus'.")
    ici_bytes_per_s_bidirectional: float | None = _f(
        "bytes/s", "ICI bandwidth per chip, both directions, all ports (None: unpublished)."
    )
    ici_link_bytes_per_s: float = _f("bytes/s", "ICI bandwidth of one link, one direction.")
    max_slice_chips: int = _f("count", "Largest slice (chips).")
    jax_devices_per_chip: int = _f(
        "count", "JAX devices per chip (2 on dual-chiplet TPU7x, else 1).", default=1
    )
    @property
    def sparsecores_per_device(self) -> int:
        """SparseCores one JAX device owns (the ``S`` of [jte] preprocess_sparse_dense_matmul_input)."""
        return self.sparsecores_per_chip // self.jax_devices_per_chip

    @property
    def has_sparsecore(self) -> bool:
        return self.sparsecores_per_chip > 0

    @property
    def kind(self) -> str:
        return "tpu"


@dataclass(frozen=True)
class NpuChip(_Sourced):
    """A Sophgo NPU, described by the constants of its local memory ([tpu-mlir], local-memory layout)."""

    name: str = _f("", "Catalog key, e.g. 'bm1684x'.")
    marketing_name: str = _f("", "Public name, e.g. 'BM1684X'.")
    npu_num: int = _f("lanes", "NPU lanes (NPU_NUM); channel c lives on lane (start + c) % npu_num.")
    eu_bytes: int = _f("bytes", "Bytes per execution-unit row (EU_BYTES); EU_NUM = eu_bytes / dtype size.")
    local_memory_bytes_per_lane: int = _f("bytes", "Local memory per lane (LMEM_BYTES).")
    local_memory_banks: int = _f("count", "Banks of one lane's local memory.")
    byte_strides: bool = _f(
        "", "True for the CV18xx series, whose local strides are counted in bytes.", default=False
    )
    @property
    def local_memory_bytes(self) -> int:
        """Local memory over all lanes."""
        return self.npu_num * self.local_memory_bytes_per_lane

    @property
    def bank_bytes(self) -> int:
        return self.local_memory_bytes_per_lane // self.local_memory_banks

    @property
    def kind(self) -> str:
        return "npu"
