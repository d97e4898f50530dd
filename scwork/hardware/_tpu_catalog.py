"""The TPU chips of the catalog, each field with the public source of its value.

Sources, by their keys in ``docs/references.md``:

- *[sc-guide] §1*: the "at a glance" table of the SparseCore guide.
- *[cloud-tpu]*: Cloud TPU system-architecture pages for v4, v5e, v5p, v6e, tpu7x.
- *[scaling-book]*: [scaling-book], TPU chapter (per-link ICI bandwidth).
- *[openxla-sc]*: JAX ``tpu_info.py`` and the OpenXLA SparseCore notes (TileSpmem, SIMD).

Where sources disagree (GB vs GiB) one value is kept and the note says which.
HBM capacities quoted as "GB" in public pages are taken as GiB, the unit HBM
stacks are built in; override with :func:`scwork.hardware.override` if needed.
"""

from __future__ import annotations

from scwork.hardware.chips import GB, GiB, KiB, TpuChip

_SPMEM_SHARED = "unpublished for every chip: pass your own value (override) to model it"

V4 = TpuChip(
    name="v4", marketing_name="TPU v4",
    sparsecores_per_chip=4, tiles_per_sparsecore=16,
    simd_width_f32=8, simd_width_bf16=8,
    tile_spmem_bytes=None, shared_spmem_bytes=None, dma_granule_bytes=32,
    tensorcores_per_chip=2, hbm_bytes=32 * GiB, hbm_bandwidth_bytes_per_s=1200 * GB,
    ici_ports=6, ici_topology="3D torus", ici_bytes_per_s_bidirectional=None,
    ici_link_bytes_per_s=4.5e10, max_slice_chips=4096,
    sources={
        "sparsecores_per_chip": "[sc-guide] §1 (SparseCores/Chip = 4)",
        "tiles_per_sparsecore": "[sc-guide] §1 (Tiles/SparseCore = 16)",
        "simd_width_f32": "[sc-guide] §1 (SIMD width 8)",
        "simd_width_bf16": "[sc-guide] §1 (SIMD width 8; no separate BF16 width given)",
        "tile_spmem_bytes": "unpublished ([cloud-tpu]: unknown)",
        "shared_spmem_bytes": _SPMEM_SHARED,
        "dma_granule_bytes": "[cloud-tpu] / [sc-guide] §1: features padded to 32-byte lines",
        "tensorcores_per_chip": "[cloud-tpu] v4 (2 TensorCores, megacore)",
        "hbm_bytes": "[cloud-tpu] v4 32 GiB ([sc-guide] §1: 32 GB)",
        "hbm_bandwidth_bytes_per_s": "[cloud-tpu] v4 1200 GB/s",
        "ici_ports": "[cloud-tpu] v4: 6 ICI links, 3D torus",
        "ici_topology": "[cloud-tpu] v4",
        "ici_bytes_per_s_bidirectional": "not given in [cloud-tpu]",
        "ici_link_bytes_per_s": "[scaling-book] 4.5e10 B/s one way",
        "max_slice_chips": "[cloud-tpu] v4: 4096 chips (16x16x16)",
        "jax_devices_per_chip": "[cloud-tpu]: one JAX device per chip",
    },
)

V5E = TpuChip(
    name="v5e", marketing_name="TPU v5e",
    sparsecores_per_chip=0, tiles_per_sparsecore=0,
    simd_width_f32=0, simd_width_bf16=0,
    tile_spmem_bytes=None, shared_spmem_bytes=None, dma_granule_bytes=32,
    tensorcores_per_chip=1, hbm_bytes=16 * GiB, hbm_bandwidth_bytes_per_s=819 * GB,
    ici_ports=4, ici_topology="2D torus", ici_bytes_per_s_bidirectional=400 * GB,
    ici_link_bytes_per_s=4.5e10, max_slice_chips=256,
    sources={
        "sparsecores_per_chip": "[cloud-tpu] v5e: no SparseCore",
        "tiles_per_sparsecore": "no SparseCore",
        "simd_width_f32": "no SparseCore",
        "simd_width_bf16": "no SparseCore",
        "tile_spmem_bytes": "no SparseCore",
        "shared_spmem_bytes": "no SparseCore",
        "dma_granule_bytes": "[cloud-tpu] (32 B granule; irrelevant without SparseCore)",
        "tensorcores_per_chip": "[cloud-tpu] v5e (1 TensorCore)",
        "hbm_bytes": "[cloud-tpu] v5e 16 GB, taken as GiB",
        "hbm_bandwidth_bytes_per_s": "[cloud-tpu] v5e 819 GB/s",
        "ici_ports": "[cloud-tpu] v5e: 4 ICI ports, 2D torus",
        "ici_topology": "[cloud-tpu] v5e",
        "ici_bytes_per_s_bidirectional": "[cloud-tpu]: 400 GB/s per chip, bidirectional",
        "ici_link_bytes_per_s": "[scaling-book] 4.5e10 B/s one way",
        "max_slice_chips": "[cloud-tpu] v5e: 256 chips (16x16)",
        "jax_devices_per_chip": "[cloud-tpu]: one JAX device per chip",
    },
)

V5P = TpuChip(
    name="v5p", marketing_name="TPU v5p",
    sparsecores_per_chip=4, tiles_per_sparsecore=16,
    simd_width_f32=8, simd_width_bf16=8,
    tile_spmem_bytes=512 * KiB, shared_spmem_bytes=None, dma_granule_bytes=32,
    tensorcores_per_chip=2, hbm_bytes=95 * GiB, hbm_bandwidth_bytes_per_s=2765 * GB,
    ici_ports=6, ici_topology="3D torus", ici_bytes_per_s_bidirectional=1200 * GB,
    ici_link_bytes_per_s=9e10, max_slice_chips=8960,
    sources={
        "sparsecores_per_chip": "[sc-guide] §1 (SparseCores/Chip = 4)",
        "tiles_per_sparsecore": "[sc-guide] §1 (Tiles/SparseCore = 16)",
        "simd_width_f32": "[sc-guide] §1 (SIMD width 8)",
        "simd_width_bf16": "[sc-guide] §1 (SIMD width 8; no separate BF16 width given)",
        "tile_spmem_bytes": "[openxla-sc] tpu_info.py: 512 KiB TileSpmem",
        "shared_spmem_bytes": _SPMEM_SHARED,
        "dma_granule_bytes": "[cloud-tpu]: 32 B",
        "tensorcores_per_chip": "[cloud-tpu] v5p (2 TensorCores, megacore)",
        "hbm_bytes": "[cloud-tpu] v5p 95 GiB ([sc-guide] §1 says 96 GiB)",
        "hbm_bandwidth_bytes_per_s": "[cloud-tpu] v5p 2765 GB/s",
        "ici_ports": "[cloud-tpu] v5p: 3D torus, 6 neighbours",
        "ici_topology": "[cloud-tpu] v5p",
        "ici_bytes_per_s_bidirectional": "[cloud-tpu] v5p 1200 GB/s",
        "ici_link_bytes_per_s": "[scaling-book] 9e10 B/s one way",
        "max_slice_chips": "[cloud-tpu] v5p: 8960 chips (largest job 16x16x24)",
        "jax_devices_per_chip": "[cloud-tpu]: one JAX device per chip",
    },
)

V6E = TpuChip(
    name="v6e", marketing_name="Trillium (TPU v6e)",
    sparsecores_per_chip=2, tiles_per_sparsecore=16,
    simd_width_f32=8, simd_width_bf16=16,
    tile_spmem_bytes=256 * KiB, shared_spmem_bytes=None, dma_granule_bytes=32,
    tensorcores_per_chip=1, hbm_bytes=32 * GiB, hbm_bandwidth_bytes_per_s=1638 * GB,
    ici_ports=4, ici_topology="2D torus", ici_bytes_per_s_bidirectional=800 * GB,
    ici_link_bytes_per_s=9e10, max_slice_chips=256,
    sources={
        "sparsecores_per_chip": "[sc-guide] §1 (SparseCores/Chip = 2)",
        "tiles_per_sparsecore": "[sc-guide] §1 (Tiles/SparseCore = 16)",
        "simd_width_f32": "[sc-guide] §1: 8 (F32)",
        "simd_width_bf16": "[sc-guide] §1: 16 (BF16)",
        "tile_spmem_bytes": "[openxla-sc] tpu_info.py: 256 KiB TileSpmem",
        "shared_spmem_bytes": _SPMEM_SHARED,
        "dma_granule_bytes": "[cloud-tpu]: 32 B",
        "tensorcores_per_chip": "[cloud-tpu] v6e (1 TensorCore)",
        "hbm_bytes": "[cloud-tpu] v6e 32 GB, taken as GiB ([sc-guide] §1: 32 GB)",
        "hbm_bandwidth_bytes_per_s": "[cloud-tpu] v6e 1638 GB/s",
        "ici_ports": "[cloud-tpu] v6e: 4 ICI ports, 2D torus",
        "ici_topology": "[cloud-tpu] v6e",
        "ici_bytes_per_s_bidirectional": "[cloud-tpu] v6e 800 GB/s",
        "ici_link_bytes_per_s": "[scaling-book] 9e10 B/s one way",
        "max_slice_chips": "[cloud-tpu] v6e: 256 chips (16x16)",
        "jax_devices_per_chip": "[cloud-tpu]: one JAX device per chip",
    },
)

TPU7X = TpuChip(
    name="tpu7x", marketing_name="Ironwood (TPU7x)",
    sparsecores_per_chip=4, tiles_per_sparsecore=16,
    simd_width_f32=16, simd_width_bf16=32,
    tile_spmem_bytes=512 * KiB, shared_spmem_bytes=None, dma_granule_bytes=32,
    tensorcores_per_chip=2, hbm_bytes=192 * GiB, hbm_bandwidth_bytes_per_s=7380 * GB,
    ici_ports=6, ici_topology="3D torus", ici_bytes_per_s_bidirectional=1200 * GB,
    ici_link_bytes_per_s=9e10, max_slice_chips=9216, jax_devices_per_chip=2,
    sources={
        "sparsecores_per_chip": "[cloud-tpu] tpu7x: 4 SparseCores, 2 per JAX device (dual chiplet)",
        "tiles_per_sparsecore": "openxla-sc: 16 tiles",
        "simd_width_f32": "[openxla-sc] tpu_info.py: 16 (F32)",
        "simd_width_bf16": "[openxla-sc] tpu_info.py: 32 (BF16)",
        "tile_spmem_bytes": "[openxla-sc] tpu_info.py: 512 KiB TileSpmem",
        "shared_spmem_bytes": _SPMEM_SHARED,
        "dma_granule_bytes": "[cloud-tpu]: 32 B",
        "tensorcores_per_chip": "[cloud-tpu] tpu7x (2 TensorCores, one per chiplet)",
        "hbm_bytes": "[cloud-tpu] tpu7x 192 GiB",
        "hbm_bandwidth_bytes_per_s": "[cloud-tpu] tpu7x 7380 GB/s",
        "ici_ports": "[cloud-tpu] tpu7x: 3D torus (4x4x4 cubes), 6 neighbours",
        "ici_topology": "[cloud-tpu] tpu7x",
        "ici_bytes_per_s_bidirectional": "[cloud-tpu] tpu7x 1200 GB/s",
        "ici_link_bytes_per_s": "[scaling-book] 9e10 B/s one way",
        "max_slice_chips": "[cloud-tpu] tpu7x: 9216 chips",
        "jax_devices_per_chip": "[cloud-tpu] tpu7x: dual chiplet, 2 JAX devices per chip",
    },
)

TPU_CHIPS: tuple[TpuChip, ...] = (V4, V5E, V5P, V6E, TPU7X)
