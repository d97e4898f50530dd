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

#: The chips, in the column order of :data:`_ROWS`.
_NAMES = ("v4", "v5e", "v5p", "v6e", "tpu7x")
_MARKETING = ("TPU v4", "TPU v5e", "TPU v5p", "Trillium (TPU v6e)", "Ironwood (TPU7x)")

_NO_SC = "no SparseCore"
_SPMEM_SHARED = "unpublished for every chip: pass your own value (override) to model it"
_TILES = "[sc-guide] §1 (Tiles/SparseCore = 16)"
_SIMD_8 = "[sc-guide] §1 (SIMD width 8)"
_SIMD_8_BF16 = "[sc-guide] §1 (SIMD width 8; no separate BF16 width given)"
_GRANULE = "[cloud-tpu]: 32 B"
_ONE_DEVICE = "[cloud-tpu]: one JAX device per chip"

#: One row per field: its value on each chip of :data:`_NAMES`, then where each value
#: comes from. A single source string is a template for every chip (``{chip}``: the
#: catalog name, ``{gb}``: the value in GB, ``{e10}``: the value in 1e10); otherwise one
#: source per chip.
_ROWS: tuple[tuple[str, tuple, str | tuple[str, ...]], ...] = (
    ("sparsecores_per_chip", (4, 0, 4, 2, 4), (
        "[sc-guide] §1 (SparseCores/Chip = 4)", "[cloud-tpu] v5e: no SparseCore",
        "[sc-guide] §1 (SparseCores/Chip = 4)", "[sc-guide] §1 (SparseCores/Chip = 2)",
        "[cloud-tpu] tpu7x: 4 SparseCores, 2 per JAX device (dual chiplet)")),
    ("tiles_per_sparsecore", (16, 0, 16, 16, 16), (_TILES, _NO_SC, _TILES, _TILES, "[openxla-sc]: 16 tiles")),
    ("simd_width_f32", (8, 0, 8, 8, 16), (
        _SIMD_8, _NO_SC, _SIMD_8, "[sc-guide] §1: 8 (F32)", "[openxla-sc] tpu_info.py: 16 (F32)")),
    ("simd_width_bf16", (8, 0, 8, 16, 32), (
        _SIMD_8_BF16, _NO_SC, _SIMD_8_BF16, "[sc-guide] §1: 16 (BF16)", "[openxla-sc] tpu_info.py: 32 (BF16)")),
    ("tile_spmem_bytes", (None, None, 512 * KiB, 256 * KiB, 512 * KiB), (
        "unpublished ([cloud-tpu]: unknown)", _NO_SC, "[openxla-sc] tpu_info.py: 512 KiB TileSpmem",
        "[openxla-sc] tpu_info.py: 256 KiB TileSpmem", "[openxla-sc] tpu_info.py: 512 KiB TileSpmem")),
    ("shared_spmem_bytes", (None,) * 5, (_SPMEM_SHARED, _NO_SC, _SPMEM_SHARED, _SPMEM_SHARED, _SPMEM_SHARED)),
    ("dma_granule_bytes", (32,) * 5, (
        "[cloud-tpu] / [sc-guide] §1: features padded to 32-byte lines",
        "[cloud-tpu] (32 B granule; irrelevant without SparseCore)", _GRANULE, _GRANULE, _GRANULE)),
    ("tensorcores_per_chip", (2, 1, 2, 1, 2), (
        "[cloud-tpu] v4 (2 TensorCores, megacore)", "[cloud-tpu] v5e (1 TensorCore)",
        "[cloud-tpu] v5p (2 TensorCores, megacore)", "[cloud-tpu] v6e (1 TensorCore)",
        "[cloud-tpu] tpu7x (2 TensorCores, one per chiplet)")),
    ("hbm_bytes", (32 * GiB, 16 * GiB, 95 * GiB, 32 * GiB, 192 * GiB), (
        "[cloud-tpu] v4 32 GiB ([sc-guide] §1: 32 GB)", "[cloud-tpu] v5e 16 GB, taken as GiB",
        "[cloud-tpu] v5p 95 GiB ([sc-guide] §1 says 96 GiB)",
        "[cloud-tpu] v6e 32 GB, taken as GiB ([sc-guide] §1: 32 GB)", "[cloud-tpu] tpu7x 192 GiB")),
    ("hbm_bandwidth_bytes_per_s", (1200 * GB, 819 * GB, 2765 * GB, 1638 * GB, 7380 * GB),
     "[cloud-tpu] {chip} {gb} GB/s"),
    ("ici_ports", (6, 4, 6, 4, 6), (
        "[cloud-tpu] v4: 6 ICI links, 3D torus", "[cloud-tpu] v5e: 4 ICI ports, 2D torus",
        "[cloud-tpu] v5p: 3D torus, 6 neighbours", "[cloud-tpu] v6e: 4 ICI ports, 2D torus",
        "[cloud-tpu] tpu7x: 3D torus (4x4x4 cubes), 6 neighbours")),
    ("ici_topology", ("3D torus", "2D torus", "3D torus", "2D torus", "3D torus"), "[cloud-tpu] {chip}"),
    ("ici_bytes_per_s_bidirectional", (None, 400 * GB, 1200 * GB, 800 * GB, 1200 * GB), (
        "not given in [cloud-tpu]", "[cloud-tpu]: 400 GB/s per chip, bidirectional",
        "[cloud-tpu] v5p 1200 GB/s", "[cloud-tpu] v6e 800 GB/s", "[cloud-tpu] tpu7x 1200 GB/s")),
    ("ici_link_bytes_per_s", (4.5e10, 4.5e10, 9e10, 9e10, 9e10), "[scaling-book] {e10:g}e10 B/s one way"),
    ("max_slice_chips", (4096, 256, 8960, 256, 9216), (
        "[cloud-tpu] v4: 4096 chips (16x16x16)", "[cloud-tpu] v5e: 256 chips (16x16)",
        "[cloud-tpu] v5p: 8960 chips (largest job 16x16x24)", "[cloud-tpu] v6e: 256 chips (16x16)",
        "[cloud-tpu] tpu7x: 9216 chips")),
    ("jax_devices_per_chip", (1, 1, 1, 1, 2), (
        _ONE_DEVICE, _ONE_DEVICE, _ONE_DEVICE, _ONE_DEVICE,
        "[cloud-tpu] tpu7x: dual chiplet, 2 JAX devices per chip")),
)


def _chip(column: int) -> TpuChip:
    """The catalog entry of column ``column`` of :data:`_ROWS`."""
    name = _NAMES[column]
    values, sources = {}, {}
    for field_name, row, source in _ROWS:
        value = values[field_name] = row[column]
        if isinstance(source, str):
            number = isinstance(value, (int, float))
            sources[field_name] = source.format(chip=name, gb=value // GB if number else None,
                                                e10=value / 1e10 if number else None)
        else:
            sources[field_name] = source[column]
    return TpuChip(name=name, marketing_name=_MARKETING[column], **values, sources=sources)


V4, V5E, V5P, V6E, TPU7X = (_chip(column) for column in range(len(_NAMES)))
TPU_CHIPS: tuple[TpuChip, ...] = (V4, V5E, V5P, V6E, TPU7X)
