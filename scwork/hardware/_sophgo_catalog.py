"""The Sophgo NPUs of the catalog, each value read from tpu-mlir's backend sources.

Every value was read from the sources named in each entry's ``sources``:

- BM168x chips: the constructor of the chip's backend class in sophgo/tpu-mlir,
  ``include/tpu_mlir/Backend/BM168x/<CHIP>.h``, which sets ``NPU_NUM``,
  ``EU_BYTES``, ``LMEM_BYTES`` (per lane) and ``LMEM_BANKS``. Local strides there
  count elements (``BM168x::getLocalStride`` in ``lib/Backend/BM168x/BM168x.cpp``).
- CV18xx chips: tpu-mlir's ``CV18xx`` constructor (``lib/Backend/CV18xx/CV18xx.cpp``)
  copies ``npu_num``, ``eu_num``, ``lmem_size`` and ``lmem_banks`` from the
  cvikernel chip info, whose values are the ``*_HW_*_SHIFT`` / ``*_HW_LMEM_BANKS``
  macros of cvikernel's ``*_tpu_cfg.h`` (read in the copy of cvikernel shipped in
  milkv-duo/duo-buildroot-sdk-v2). cvikernel registers CV183X with its BM1880v2
  configuration and CV182X with its BM1822 configuration. Its ``tl_default_stride``
  returns strides in bytes (``w = element size``, ``c = align_up(h*w*size, eu_num)``),
  so ``eu_num`` there is a byte count: it is our ``eu_bytes``.
"""

from __future__ import annotations

from scwork.hardware.chips import KiB, NpuChip

_BM_HEADER = "tpu-mlir include/tpu_mlir/Backend/BM168x/{chip}.h constructor"
_BM_STRIDES = "tpu-mlir BM168x::getLocalStride (lib/Backend/BM168x/BM168x.cpp): strides count elements"


def _bm_sources(chip: str, npu: int, eu: int, lmem: str, banks: int, eu_note: str = "") -> dict[str, str]:
    header = _BM_HEADER.format(chip=chip)
    return {
        "npu_num": f"{header}: NPU_NUM = {npu}",
        "eu_bytes": f"{header}: EU_BYTES = {eu}{eu_note}",
        "local_memory_bytes_per_lane": f"{header}: LMEM_BYTES = {lmem}",
        "local_memory_banks": f"{header}: LMEM_BANKS = {banks}",
        "byte_strides": _BM_STRIDES,
    }


_CV_READ = "tpu-mlir lib/Backend/CV18xx/CV18xx.cpp reads cvikernel chip info"
_CV_STRIDES = (
    "cvikernel cvk*_tl_default_stride: w = element bytes, c = align_up(h*w*bytes, eu_num) "
    "(strides count bytes)"
)


def _cv_sources(cfg: str, prefix: str, npu_shift: int, note: str = "") -> dict[str, str]:
    where = f"{_CV_READ}; cvikernel {cfg}{note}"
    return {
        "npu_num": f"{where}: {prefix}_HW_NPU_SHIFT = {npu_shift} (NPU_NUM = {1 << npu_shift})",
        "eu_bytes": f"{where}: {prefix}_HW_EU_SHIFT = 4 (eu_num = 16, used as EU_BYTES)",
        "local_memory_bytes_per_lane": f"{where}: {prefix}_HW_LMEM_SHIFT = 15 (32 KiB per lane)",
        "local_memory_banks": f"{where}: {prefix}_HW_LMEM_BANKS = 8 (bank size 0x1000)",
        "byte_strides": _CV_STRIDES,
    }


BM1684X = NpuChip(
    "bm1684x", "BM1684X", 64, 64, 256 * KiB, 16,
    sources=_bm_sources("BM1684X", 64, 64, "1 << 18 (256 KiB)", 16),
)
BM1688 = NpuChip(
    "bm1688", "BM1688", 32, 16, 128 * KiB, 16,
    sources=_bm_sources("BM1688", 32, 16, "1 << 17 (128 KiB)", 16),
)
BM1690 = NpuChip(
    "bm1690", "BM1690", 64, 64, 256 * KiB, 16,
    sources=_bm_sources("BM1690", 64, 64, "1 << 18 (256 KiB)", 16, " (vector length 512 bit)"),
)
# BM1684 stores 1- and 2-byte tensors in "4N mode" (ALIGN_4N = true: 4 batches packed
# in one 32-bit word); scwork models the plain layout of [tpu-mlir] and says so in
# scwork.layout.npu.
BM1684 = NpuChip(
    "bm1684", "BM1684", 64, 128, 512 * KiB, 8,
    sources=_bm_sources(
        "BM1684", 64, 128, "1 << 19 (512 KiB)", 8,
        " (header comment: 'only for int8; 128 for fp32'; ALIGN_4N = true)",
    ),
)

CV183X = NpuChip(
    "cv183x", "CV183X", 32, 16, 32 * KiB, 8, True,
    sources=_cv_sources(
        "include/bmkernel/bm1880v2/bm1880v2_tpu_cfg.h", "BM1880V2", 5,
        " (CV183X runs on the BM1880v2 configuration)",
    ),
)
CV182X = NpuChip(
    "cv182x", "CV182X", 8, 16, 32 * KiB, 8, True,
    sources=_cv_sources(
        "bm1822_tpu_cfg.h", "BM1822", 3,
        " (cvikernel_get_chip_info_1822 returns 'cv182x')",
    ),
)
CV181X = NpuChip(
    "cv181x", "CV181X", 8, 16, 32 * KiB, 8, True,
    sources=_cv_sources("include/cvikernel/cv181x/cv181x_tpu_cfg.h", "CV181X", 3),
)
CV180X = NpuChip(
    "cv180x", "CV180X", 2, 16, 32 * KiB, 8, True,
    sources=_cv_sources("include/cvikernel/cv180x/cv180x_tpu_cfg.h", "CV180X", 1),
)

NPU_CHIPS: tuple[NpuChip, ...] = (BM1684X, BM1688, BM1690, BM1684, CV183X, CV182X, CV181X, CV180X)
