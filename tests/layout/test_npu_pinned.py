"""scwork/layout/npu.py on small shapes, every number worked out by hand.

Written for the mutation run of npu.py: strides of the three layout kinds on shapes where
they all differ, the start lane's extra slot, element addresses across lanes (4-bit types
included), the edges of every range check, the fixes check_fits proposes, the occupancy map
of a line-aligned tensor, and the summary a widget shows. The rules are those of [tpu-mlir]
(local-memory layout): EU_NUM = EU_BYTES * 8 / bits, slot = ceil(H*W / EU_NUM) * EU_NUM
(aligned), H*W (compact) or H * align_up(W, EU_NUM) (line-aligned), n-stride =
ceil((start_lane + C) / NPU_NUM) slots.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from scwork.errors import ConfigError, HardwareError, LayoutError
from scwork.layout import npu
from scwork.layout.npu import LocalLayout, NpuStrides, bytes_of, global_strides, local_layout


# -- sizes --------------------------------------------------------------------------
def test_bytes_of_rounds_bits_up_to_whole_bytes():
    # 3 nibbles = 12 bits -> 2 bytes; 4 nibbles = 16 bits -> 2 bytes; 5 nibbles = 20 bits -> 3 bytes
    assert (bytes_of(3, 4), bytes_of(4, 4), bytes_of(5, 4)) == (2, 2, 3)
    # 7 f32 = 224 bits = 28 bytes; 1 s8 = 1 byte; 0 elements = 0 bytes
    assert (bytes_of(7, 32), bytes_of(1, 8), bytes_of(0, 16)) == (28, 1, 0)


@pytest.mark.parametrize("name, canonical, itemsize, bits", [
    ("f32", "f32", 4, 32), ("  FP16 ", "f16", 2, 16), ("bfloat16", "bf16", 2, 16), ("int8", "s8", 1, 8),
    ("ui8", "u8", 1, 8), ("si16", "s16", 2, 16), ("uint16", "u16", 2, 16), ("i32", "s32", 4, 32),
    ("ui32", "u32", 4, 32), ("int4", "s4", 0.5, 4), ("UINT4", "u4", 0.5, 4),
])
def test_dtype_names_sizes_and_bits(name, canonical, itemsize, bits):
    lay = LocalLayout((1, 1, 1, 1), name, 1, 4)
    assert (lay.dtype, lay.itemsize, lay.element_bits) == (canonical, itemsize, bits)
    # eu_bytes = 4 holds 32 bits: 32 / bits elements per EU row
    assert lay.eu_num == 32 // bits


def test_dtype_must_be_a_known_name():
    with pytest.raises(LayoutError, match="dtype must be a name such as 'f32', got 4"):
        LocalLayout((1, 1, 1, 1), 4, 1, 4)
    with pytest.raises(LayoutError, match="unknown dtype 'f64'"):
        LocalLayout((1, 1, 1, 1), "f64", 1, 4)


# -- strides ------------------------------------------------------------------------
def test_strides_scaled_and_global():
    assert NpuStrides(6, 5, 3, 1).scaled(4) == NpuStrides(24, 20, 12, 4)
    # (N, C, H, W) = (7, 2, 3, 5): w = 1, h = W = 5, c = H*W = 15, n = C*H*W = 30
    assert global_strides((7, 2, 3, 5)) == NpuStrides(n=30, c=15, h=5, w=1)


# f32 on EU rows of 16 bytes: EU_NUM = 16 * 8 / 32 = 4; H*W = 3*5 = 15; 4 lanes.
#   aligned:      c = round_up(15, 4) = 16, h = W = 5
#   compact:      c = 15, h = 5
#   line_aligned: h = round_up(5, 4) = 8, c = 3 * 8 = 24
# C = 5 channels from lane 0 need ceil(5 / 4) = 2 slots a batch: n = 2 * c.
@pytest.mark.parametrize("kind, elements, nbytes", [
    ("aligned", (32, 16, 5, 1), (128, 64, 20, 4)),
    ("compact", (30, 15, 5, 1), (120, 60, 20, 4)),
    ("line_aligned", (48, 24, 8, 1), (192, 96, 32, 4)),
])
def test_strides_of_each_kind(kind, elements, nbytes):
    lay = local_layout((2, 5, 3, 5), "f32", npu_num=4, eu_bytes=16, kind=kind)
    assert lay.strides_elements.as_tuple() == elements
    assert lay.strides_bytes.as_tuple() == nbytes
    assert lay.slots_per_batch == 2
    # 2 batches of n elements of 4 bytes on the busiest lane, the same range on all 4 lanes
    assert lay.bytes_per_lane == 2 * elements[0] * 4
    assert lay.reserved_bytes == 4 * 2 * elements[0] * 4
    assert lay.data_bytes == 2 * 5 * 3 * 5 * 4 == 600
    assert lay.utilization == pytest.approx(600 / (4 * 2 * elements[0] * 4))


@pytest.mark.parametrize("c, start_lane, slots", [
    (4, 0, 1),    # C a multiple of the 4 lanes: one slot
    (4, 1, 2),    # lanes 1, 2, 3, then channel 3 wraps to lane 0 one slot down
    (4, 3, 2),    # (3 + 4) / 4 -> 2
    (5, 0, 2),    # one channel past the last lane
    (6, 3, 3),    # (3 + 6) / 4 = 2.25 -> 3
    (1, 3, 1),    # one channel on the last lane
])
def test_start_lane_adds_slots(c, start_lane, slots):
    lay = local_layout((1, c, 3, 5), "f32", npu_num=4, eu_bytes=16, start_lane=start_lane)
    assert lay.slots_per_batch == slots
    assert lay.strides_elements.n == slots * 16       # aligned slot: round_up(15, 4) = 16


def test_hw_a_multiple_of_eu_num_has_no_padding():
    # H*W = 2*6 = 12 f32, EU_NUM = 4: aligned slot = 12 = compact; W = 6 -> line stride 8, slot 16
    aligned = local_layout((1, 4, 2, 6), "f32", npu_num=4, eu_bytes=16)
    line = local_layout((1, 4, 2, 6), "f32", npu_num=4, eu_bytes=16, kind="line_aligned")
    assert aligned.strides_elements.as_tuple() == (12, 12, 6, 1)
    assert line.strides_elements.as_tuple() == (16, 16, 8, 1)
    # 4 channels on 4 lanes, 12 f32 each: nothing reserved is padding
    assert aligned.utilization == 1.0
    assert line.utilization == pytest.approx(12 / 16)


def test_four_bit_compact_strides_and_sizes():
    # s4 on EU rows of 4 bytes: EU_NUM = 4 * 8 / 4 = 8. Compact slot H*W = 3*5 = 15 nibbles;
    # C = 3 on 2 lanes: 2 slots, n = 30 nibbles. Bytes: 30 -> 15, 15 -> 8, 5 -> 3, 1 -> 1.
    lay = local_layout((1, 3, 3, 5), "s4", npu_num=2, eu_bytes=4, kind="compact")
    assert lay.eu_num == 8
    assert lay.strides_elements.as_tuple() == (30, 15, 5, 1)
    assert lay.strides_bytes.as_tuple() == (15, 8, 3, 1)
    assert lay.bytes_per_lane == 15
    # 45 nibbles of data = 22.5 bytes -> 23; 2 lanes x 15 bytes reserved
    assert (lay.data_bytes, lay.reserved_bytes) == (23, 30)
    assert lay.utilization == pytest.approx(23 / 30)
    # aligned: slot round_up(15, 8) = 16 nibbles = 8 bytes, n = 32 nibbles = 16 bytes
    aligned = local_layout((1, 3, 3, 5), "s4", npu_num=2, eu_bytes=4)
    assert aligned.strides_bytes.as_tuple() == (16, 8, 3, 1)


def test_eu_bytes_must_hold_whole_elements():
    # f32 is 32 bits: 6 bytes = 48 bits is 1.5 elements
    with pytest.raises(ConfigError, match="eu_bytes=6 is not a multiple of the f32 size"):
        LocalLayout((1, 1, 1, 1), "f32", 1, 6)
    # 4-bit types fit two to a byte, so one byte is a whole EU_NUM of 2
    assert LocalLayout((1, 1, 1, 1), "u4", 1, 1).eu_num == 2
    assert LocalLayout((1, 1, 1, 1), "f32", 1, 4).eu_num == 1


# -- addresses ----------------------------------------------------------------------
def test_addresses_across_lanes_with_a_start_lane():
    # f32, 4 lanes, EU_NUM 4, start lane 3, C = 5: (3 + 5) / 4 = 2 slots; aligned strides
    # n = 32, c = 16, h = 5, w = 1 (elements), 4 bytes each.
    lay = local_layout((2, 5, 3, 5), "f32", npu_num=4, eu_bytes=16, start_lane=3)
    assert lay.strides_elements.as_tuple() == (32, 16, 5, 1)
    assert [lay.lane_of(c) for c in range(5)] == [3, 0, 1, 2, 3]
    assert [lay.slot_of(c) for c in range(5)] == [0, 1, 1, 1, 1]
    assert lay.address(0, 0, 0, 0) == (3, 0)
    # channel 1: divmod(3 + 1, 4) = slot 1, lane 0 -> 16 elements = 64 bytes
    assert lay.address(0, 1, 0, 0) == (0, 64)
    # (1, 2, 1, 4): divmod(5, 4) = (1, 1); 1*32 + 1*16 + 1*5 + 4 = 57 elements = 228 bytes
    assert lay.address(1, 2, 1, 4) == (1, 228)
    # (1, 4, 2, 3): divmod(7, 4) = (1, 3); 32 + 16 + 10 + 3 = 61 elements = 244 bytes
    assert lay.address(1, 4, 2, 3) == (3, 244)


def test_four_bit_addresses_are_the_byte_holding_the_nibble():
    # s4 compact (1, 3, 3, 5) on 2 lanes: n = 30, c = 15, h = 5 nibbles.
    lay = local_layout((1, 3, 3, 5), "s4", npu_num=2, eu_bytes=4, kind="compact")
    # (0, 2, 1, 3): divmod(2, 2) = (1, 0); 15 + 5 + 3 = 23 nibbles -> byte 11 (23 * 4 // 8)
    assert lay.address(0, 2, 1, 3) == (0, 11)
    # (0, 1, 2, 4): divmod(1, 2) = (0, 1); 10 + 4 = 14 nibbles -> byte 7
    assert lay.address(0, 1, 2, 4) == (1, 7)
    # (0, 0, 0, 1): nibble 1 -> byte 0
    assert lay.address(0, 0, 0, 1) == (0, 0)


def test_line_aligned_address_skips_the_line_padding():
    # f16 on 8-byte EU rows: EU_NUM = 4; W = 3 -> h = 4, c = 2 * 4 = 8, n = 8 (C = 2 on 2 lanes)
    lay = local_layout((2, 2, 2, 3), "f16", npu_num=2, eu_bytes=8, kind="line_aligned")
    assert lay.strides_elements.as_tuple() == (8, 8, 4, 1)
    # (1, 1, 1, 2): lane 1, 1*8 + 0 + 1*4 + 2 = 14 elements = 28 bytes
    assert lay.address(1, 1, 1, 2) == (1, 28)


@pytest.mark.parametrize("index, name", [((2, 0, 0, 0), "n"), ((0, 5, 0, 0), "c"), ((0, 0, 3, 0), "h"),
                                         ((0, 0, 0, 5), "w"), ((0, 0, 0, -1), "w"), ((-1, 0, 0, 0), "n"),
                                         ((0, 7, 0, 0), "c"), ((0, 0, 4, 0), "h")])
def test_address_refuses_each_index_past_its_edge(index, name):
    lay = local_layout((2, 5, 3, 5), "f32", npu_num=4, eu_bytes=16)
    with pytest.raises(LayoutError, match=f"index {name}="):
        lay.address(*index)


def test_address_index_types():
    lay = local_layout((2, 5, 3, 5), "f32", npu_num=4, eu_bytes=16)
    # the last element: divmod(4, 4) = (1, 0); 32 + 16 + 10 + 4 = 62 elements = 248 bytes
    assert lay.address(np.int64(1), 4, 2, 4) == (0, 248)
    with pytest.raises(LayoutError, match="index h must be an integer, got True"):
        lay.address(0, 0, True, 0)
    with pytest.raises(LayoutError, match="index c must be an integer, got 1.0"):
        lay.lane_of(1.0)
    with pytest.raises(LayoutError, match=r"index c=5 is out of range for C=5 \(valid 0..4\)"):
        lay.slot_of(5)


# -- validation edges ---------------------------------------------------------------
def test_shape_edges():
    assert local_layout((1, 1, 1, 1), "f32", npu_num=1, eu_bytes=4).strides_elements.as_tuple() == (1, 1, 1, 1)
    big = 2**63 - 1
    assert global_strides((big, 1, 1, 1)) == NpuStrides(1, 1, 1, 1)
    with pytest.raises(LayoutError, match="N = 9223372036854775808 does not fit"):
        global_strides((2**63, 1, 1, 1))
    with pytest.raises(LayoutError, match=r"H must be >= 1, got 0"):
        global_strides((1, 1, 0, 1))
    with pytest.raises(LayoutError, match="W must be an integer, got True"):
        global_strides((1, 1, 1, True))
    with pytest.raises(LayoutError, match="C must be an integer"):
        global_strides((1, 1.5, 1, 1))
    with pytest.raises(LayoutError, match="shape must have 4 dimensions"):
        global_strides((1, 1, 1))
    with pytest.raises(LayoutError, match=r"shape must have 4 dimensions \(N, C, H, W\), got 5"):
        global_strides((1, 1, 1, 1, 1))
    with pytest.raises(LayoutError, match="shape must be 4 integers"):
        global_strides(4)
    assert global_strides(np.array([1, 2, 3, 4])) == NpuStrides(24, 12, 4, 1)


def test_start_lane_edges():
    assert local_layout((1, 1, 1, 1), "f32", npu_num=4, eu_bytes=4, start_lane=3).lane_of(0) == 3
    assert local_layout((1, 1, 1, 1), "f32", npu_num=4, eu_bytes=4, start_lane=np.int8(2)).start_lane == 2
    for bad in (4, 5, -1):
        with pytest.raises(LayoutError, match=rf"start_lane={bad} is outside 0..3 \(npu_num=4\)") as info:
            local_layout((1, 1, 1, 1), "f32", npu_num=4, eu_bytes=4, start_lane=bad)
        assert info.value.hint == "pick a lane between 0 and 3"
    with pytest.raises(LayoutError, match="start_lane must be an integer, got False"):
        local_layout((1, 1, 1, 1), "f32", npu_num=4, eu_bytes=4, start_lane=False)
    with pytest.raises(LayoutError, match="start_lane must be an integer"):
        local_layout((1, 1, 1, 1), "f32", npu_num=4, eu_bytes=4, start_lane="1")


def test_kind_must_be_a_known_string():
    for bad in ("Aligned", 0, None):
        with pytest.raises(LayoutError, match="unknown layout kind"):
            LocalLayout((1, 1, 1, 1), "f32", 1, 4, kind=bad)


def test_cv18xx_holds_bf16_but_not_f16():
    # cv183x: 32 lanes, 16-byte EU rows, strides in bytes. bf16: EU_NUM 8, H*W = 3 -> slot 8
    lay = local_layout((1, 1, 1, 3), "bf16", chip="cv183x")
    assert lay.native_stride_unit == "bytes"
    assert lay.native_strides.as_tuple() == (16, 16, 6, 2)
    assert lay.strides_elements.as_tuple() == (8, 8, 3, 1)
    with pytest.raises(LayoutError, match="cv183x local memory holds only int8, uint8 and bf16 tensors, not f16"):
        local_layout((1, 1, 1, 3), "f16", chip="cv183x")
    bm = local_layout((1, 1, 1, 3), "f16", chip="bm1684x")
    assert bm.native_stride_unit == "elements" and bm.native_strides == bm.strides_elements


def test_a_tpu_is_not_an_npu():
    with pytest.raises(HardwareError, match="v5p is a TPU, not a Sophgo NPU"):
        local_layout((1, 1, 1, 1), chip="v5p")


def test_local_layout_needs_both_constants_without_a_chip():
    with pytest.raises(ConfigError, match=r"missing: npu_num, eu_bytes\)"):
        local_layout((1, 1, 1, 1))
    with pytest.raises(ConfigError, match=r"missing: eu_bytes\)"):
        local_layout((1, 1, 1, 1), npu_num=4)
    with pytest.raises(ConfigError, match=r"missing: npu_num\)"):
        local_layout((1, 1, 1, 1), eu_bytes=4)


def test_local_layout_int64_bounds_on_lanes_and_eu_bytes():
    assert local_layout((1, 1, 1, 1), "s8", npu_num=2**63 - 1, eu_bytes=1).npu_num == 2**63 - 1
    with pytest.raises(ConfigError, match="npu_num = 9223372036854775808 does not fit"):
        local_layout((1, 1, 1, 1), "s8", npu_num=2**63, eu_bytes=1)
    with pytest.raises(ConfigError, match="eu_bytes = 9223372036854775808 does not fit"):
        local_layout((1, 1, 1, 1), "s8", npu_num=1, eu_bytes=2**63)


def test_chip_overrides_keep_the_memory_size():
    # bm1684x: 64 lanes, 64-byte EU rows, 256 KiB a lane. 32 lanes: C = 40 takes 2 slots.
    lay = local_layout((1, 40, 1, 1), "f32", chip="bm1684x", npu_num=32)
    assert (lay.npu_num, lay.eu_bytes, lay.chip.npu_num, lay.chip.eu_bytes) == (32, 64, 32, 64)
    assert lay.chip.local_memory_bytes_per_lane == 262144
    assert lay.slots_per_batch == 2
    # only eu_bytes changed: f32 EU_NUM = 8, so H*W = 1 takes an 8-element slot
    lay = local_layout((1, 1, 1, 1), "f32", chip="bm1684x", eu_bytes=32)
    assert (lay.chip.npu_num, lay.chip.eu_bytes, lay.strides_elements.c) == (64, 32, 8)
    # the same values as the chip's: the chip object is kept as is
    assert local_layout((1, 1, 1, 1), "f32", chip="bm1684x", npu_num=64, eu_bytes=64).fits("bm1684x")


# -- capacity -----------------------------------------------------------------------
def test_fits_at_exactly_the_lane_size():
    # bm1684x lanes hold 262144 bytes. Compact (1, 64, 256, 256) f32: one slot of
    # 65536 elements = 262144 bytes: fits exactly; one more column does not.
    exact = local_layout((1, 64, 256, 256), "f32", chip="bm1684x", kind="compact")
    assert exact.bytes_per_lane == 262144
    assert exact.fits() and exact.fits("bm1684x")
    assert exact.check_fits() is None
    over = local_layout((1, 64, 256, 257), "f32", chip="bm1684x", kind="compact")
    assert over.bytes_per_lane == 256 * 257 * 4 == 263168
    assert not over.fits()


def test_fits_against_another_chip_needs_the_same_constants():
    lay = local_layout((1, 1, 1, 1), "f32", npu_num=64, eu_bytes=64)
    assert lay.fits("bm1684x")
    with pytest.raises(ConfigError, match="computed for npu_num=64, eu_bytes=64 but bm1688 has npu_num=32"):
        lay.fits("bm1688")
    with pytest.raises(ConfigError, match="npu_num=64, eu_bytes=32"):
        local_layout((1, 1, 1, 1), "f32", npu_num=64, eu_bytes=32).fits("bm1684x")
    with pytest.raises(ConfigError, match="no chip to check against"):
        lay.check_fits()


def _fit_error(*args, **kwargs) -> LayoutError:
    with pytest.raises(LayoutError) as info:
        local_layout(*args, chip="bm1684x", **kwargs).check_fits()
    return info.value


def test_check_fits_one_batch_fits():
    # Compact (2, 64, 256, 256) f32: 2 batches x 262144 bytes = 524288; one batch fits exactly.
    err = _fit_error((2, 64, 256, 256), "f32", kind="compact")
    assert str(err).splitlines()[0] == (
        "(2, 64, 256, 256) f32 (compact) needs 524288 bytes per lane but bm1684x has 262144 bytes per lane "
        "(256 KiB); 262144 bytes too many")
    assert err.hint == "slice N: at most 1 batch(es) per tile fit. Smaller H/W/N tiles are the usual fix."


def test_check_fits_three_batches_fit():
    # Compact (5, 64, 128, 128) f32: 65536 bytes a batch, 327680 in all; 262144 // 65536 = 4
    err = _fit_error((5, 64, 128, 128), "f32", kind="compact")
    assert "needs 327680 bytes" in str(err) and "65536 bytes too many" in str(err)
    assert err.hint.startswith("slice N: at most 4 batch(es) per tile fit.")


def test_check_fits_slices_h_and_start_lane():
    # Compact (1, 64, 129, 256) f32 from lane 1: (1 + 64) / 64 -> 2 slots of 129 * 256 elements,
    # 2 * 33024 * 4 = 264192 bytes > 262144. H rows take 2 * 256 * 4 = 2048 bytes: at most 128 rows.
    err = _fit_error((1, 64, 129, 256), "f32", kind="compact", start_lane=1)
    assert "needs 264192 bytes per lane" in str(err) and "; 2048 bytes too many" in str(err)
    assert err.hint == ("slice H: N=1 with at most H=128 rows per tile fits; start_lane=0 saves one slot per batch. "
                        "Smaller H/W/N tiles are the usual fix.")


def test_check_fits_start_lane_that_adds_no_slot_is_not_blamed():
    # 63 channels from lane 1 end on lane 63: (1 + 63) / 64 = 1 slot, as from lane 0.
    # Compact (1, 63, 300, 256) f32: 300 * 256 * 4 = 307200 bytes; 1024 a row -> 256 rows.
    err = _fit_error((1, 63, 300, 256), "f32", kind="compact", start_lane=1)
    assert err.hint == "slice H: N=1 with at most H=256 rows per tile fits. Smaller H/W/N tiles are the usual fix."


def test_check_fits_not_even_one_row():
    # Compact (1, 64, 2, 70000) f32: one row of 70000 * 4 = 280000 bytes is already too big.
    err = _fit_error((1, 64, 2, 70000), "f32", kind="compact")
    assert "needs 560000 bytes per lane" in str(err)
    assert err.hint.startswith("slice W or C too: even one row of one batch does not fit.")


def test_check_fits_suggests_the_compact_layout():
    # Line-aligned f32 on bm1684x: EU_NUM 16, W = 17 -> lines of 32 elements = 128 bytes.
    # H = 3000: 384000 bytes; at most 262144 // 128 = 2048 rows. Compact: 3000 * 17 * 4 = 204000 (fits).
    err = _fit_error((1, 64, 3000, 17), "f32", kind="line_aligned")
    assert "needs 384000 bytes" in str(err)
    assert err.hint == ("slice H: N=1 with at most H=2048 rows per tile fits; compact layout needs 204000 bytes "
                        "per lane (fits). Smaller H/W/N tiles are the usual fix.")
    # H = 5000: 640000 bytes; compact 5000 * 17 * 4 = 340000, still over 262144
    err = _fit_error((1, 64, 5000, 17), "f32", kind="line_aligned")
    assert "compact layout needs 340000 bytes per lane (still too big)" in err.hint


def test_check_fits_does_not_suggest_a_compact_layout_of_the_same_size():
    # Aligned (1, 64, 300, 256) f32: H*W = 76800 is a multiple of 16, so compact is as big (307200).
    err = _fit_error((1, 64, 300, 256), "f32")
    assert "needs 307200 bytes" in str(err)
    assert "compact" not in err.hint


# -- occupancy ----------------------------------------------------------------------
def test_occupancy_of_a_line_aligned_tensor():
    # s8 on 4-byte EU rows: EU_NUM 4; W = 3 -> lines of 4 bytes (3 of data), slot 2 * 4 = 8,
    # C = 3 on 2 lanes: 2 slots, n = 16; 2 batches -> 32 bytes a lane = 8 rows.
    # Lane 0: c0 (slot 0) then c2 (slot 1) per batch; lane 1: c1 then an empty slot.
    occ = local_layout((2, 3, 2, 3), "s8", npu_num=2, eu_bytes=4, kind="line_aligned").occupancy()
    assert occ["channel"].values.tolist() == [[0, 0, 2, 2, 0, 0, 2, 2], [1, 1, -1, -1, 1, 1, -1, -1]]
    assert occ["batch"].values.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, -1, -1, 1, 1, -1, -1]]
    assert occ["used_bytes"].values.tolist() == [[3] * 8, [3, 3, 0, 0, 3, 3, 0, 0]]
    assert occ["owners"].values.tolist() == [[1] * 8, [1, 1, 0, 0, 1, 1, 0, 0]]
    assert occ["row_offset_bytes"].values.tolist() == [0, 4, 8, 12, 16, 20, 24, 28]
    assert occ["lane"].values.tolist() == [0, 1] and occ["row"].values.tolist() == list(range(8))
    assert "bank" not in occ.coords
    assert occ.attrs == {
        "units": "bytes", "row_bytes": 4, "shape": "(2, 3, 2, 3)", "dtype": "s8", "kind": "line_aligned",
        "start_lane": 0, "npu_num": 2, "eu_bytes": 4, "bytes_per_lane": 32, "chip": "",
        "long_name": "NPU local-memory occupancy (lanes x EU rows)",
    }
    assert occ["used_bytes"].attrs["units"] == "bytes" and occ["owners"].attrs["units"] == "count"


def test_occupancy_skips_empty_lanes_before_used_ones():
    # One f32 channel on lane 1 of 3: lanes 0 and 2 stay free. 4-byte rows, 1 row.
    occ = local_layout((1, 1, 1, 1), "f32", npu_num=3, eu_bytes=4, start_lane=1).occupancy()
    assert occ["channel"].values.tolist() == [[-1], [0], [-1]]
    assert occ["used_bytes"].values.tolist() == [[0], [4], [0]]


def test_occupancy_of_nibbles_sharing_a_byte():
    # s4 compact (1, 2, 1, 3) on 1 lane, 1-byte rows: c0 is nibbles 0-2 (bytes 0, 1), c1 nibbles
    # 3-5 (bytes 1, 2). Byte 1 holds c0's last nibble and c1's first: 2 owners, c0 listed.
    occ = local_layout((1, 2, 1, 3), "s4", npu_num=1, eu_bytes=1, kind="compact").occupancy()
    assert occ["channel"].values.tolist() == [[0, 0, 1]]
    assert occ["owners"].values.tolist() == [[1, 2, 1]]
    assert occ["used_bytes"].values.tolist() == [[1, 1, 1]]


def test_occupancy_banks_on_a_chip():
    # bm1684x: (1, 64, 128, 128) f32 = 65536 bytes a lane = 1024 rows of 64 bytes; banks of 16384
    # bytes are 256 rows each.
    occ = local_layout((1, 64, 128, 128), "f32", chip="bm1684x").occupancy()
    bank = occ["bank"].values
    assert (bank[0], bank[255], bank[256], bank[1023]) == (0, 0, 1, 3)
    assert occ.attrs["chip"] == "bm1684x"


def test_occupancy_cell_limits():
    # s8 compact (1, 8, 1, 1) on 1 lane of 64-byte rows: 1 row (1 cell) but 8 runs (one a channel)
    lay = local_layout((1, 8, 1, 1), "s8", npu_num=1, eu_bytes=64, kind="compact")
    assert lay.occupancy(max_cells=8)["used_bytes"].values.tolist() == [[8]]
    with pytest.raises(LayoutError, match="1 lanes x 1 EU rows and 8 data runs, more than max_cells=7"):
        lay.occupancy(max_cells=7)
    # s8 aligned (1, 1, 1, 3) on 2 lanes of 1-byte rows: 3 rows x 2 lanes = 6 cells, 1 run
    lay = local_layout((1, 1, 1, 3), "s8", npu_num=2, eu_bytes=1)
    assert lay.occupancy(max_cells=6).sizes == {"lane": 2, "row": 3}
    with pytest.raises(LayoutError, match="2 lanes x 3 EU rows and 1 data runs"):
        lay.occupancy(max_cells=5)
    # line-aligned (1, 1, 3, 2) s8 on 4-byte rows: lines padded from 2 to 4 bytes, one run a
    # line (H = 3 runs, not W = 2), one 4-byte row a line
    lay = local_layout((1, 1, 3, 2), "s8", npu_num=1, eu_bytes=4, kind="line_aligned")
    with pytest.raises(LayoutError, match="1 lanes x 3 EU rows and 3 data runs, more than max_cells=2"):
        lay.occupancy(max_cells=2)
    # the cap on max_cells is 2**25 = 33,554,432 cells (five int64 maps: 1.25 GiB)
    assert npu.MAX_OCCUPANCY_CELLS == 33_554_432
    with pytest.raises(LayoutError, match="max_cells=33,554,433 is more than MAX_OCCUPANCY_CELLS=33,554,432"):
        lay.occupancy(max_cells=33_554_433)
    assert lay.occupancy(max_cells=33_554_432).sizes == {"lane": 1, "row": 3}


def test_occupancy_int64_edge():
    # s8 compact (1, 1, 1, W) on 1 lane: bits per lane 8W plus one batch stride 8W = 16W bits.
    # W = 2**58 reaches 2**62 and is refused as beyond int64; one less passes that check and
    # is refused for its size instead.
    at = local_layout((1, 1, 1, 2**58), "s8", npu_num=1, eu_bytes=64, kind="compact")
    with pytest.raises(LayoutError, match="beyond what int64 holds"):
        at.occupancy()
    below = local_layout((1, 1, 1, 2**58 - 1), "s8", npu_num=1, eu_bytes=64, kind="compact")
    with pytest.raises(LayoutError, match="more than max_cells"):
        below.occupancy()


# -- summary ------------------------------------------------------------------------
def test_summary_without_a_chip():
    # f16 (1, 3, 2, 3) on 2 lanes of 8-byte rows: EU_NUM 4, slot round_up(6, 4) = 8, 2 slots -> n = 16
    d = local_layout((1, 3, 2, 3), "f16", npu_num=2, eu_bytes=8).summary()
    assert d == {
        "shape": (1, 3, 2, 3), "dtype": "f16", "itemsize": 2, "element_bits": 16, "kind": "aligned",
        "chip": None, "npu_num": 2, "eu_bytes": 8, "eu_num": 4, "start_lane": 0,
        "strides_elements": (16, 8, 3, 1), "strides_bytes": (32, 16, 6, 2), "native_stride_unit": "elements",
        "slots_per_batch": 2, "bytes_per_lane": 32, "data_bytes": 36, "reserved_bytes": 64,
        "utilization": 36 / 64, "notes": [],
    }


def test_summary_with_a_chip_and_the_4n_note():
    d = local_layout((1, 1, 1, 1), "f32", chip="bm1684").summary()
    assert (d["chip"], d["local_memory_bytes_per_lane"], d["fits"], d["notes"]) == ("bm1684", 524288, True, [])
    assert local_layout((1, 1, 1, 1), "f16", chip="bm1684").summary()["notes"] == [
        "BM1684 stores 1/2-byte tensors in 4N mode, which is not modelled here"]
    assert local_layout((1, 1, 1, 1), "f16", chip="bm1684x").summary()["notes"] == []


def test_html_shows_the_utilization_as_percent_and_the_notes():
    html = local_layout((1, 3, 2, 3), "f16", npu_num=2, eu_bytes=8)._repr_html_()
    assert html.startswith("<table><caption>LocalLayout (1, 3, 2, 3) f16 (aligned)</caption>")
    assert "<th style='text-align:left'>utilization</th><td style='text-align:left'>56.2%</td>" in html
    assert "notes" not in html
    html = local_layout((1, 1, 1, 1), "s8", chip="bm1684")._repr_html_()
    assert "<th style='text-align:left'>notes</th><td style='text-align:left'>BM1684 stores" in html
    assert "<th style='text-align:left'>fits</th><td style='text-align:left'>True</td>" in html


def test_check_fits_compact_fitting_exactly():
    # bm1684x with EU rows changed to 24 bytes: s8 EU_NUM = 24. (1, 64, 512, 512) s8 aligned: slot
    # round_up(262144, 24) = 10923 * 24 = 262152 bytes, 8 over the 262144 a lane holds; compact is
    # 262144, exactly the lane. Rows of 512: 511 rows -> round_up(261632, 24) = 10902 * 24 = 261648 fit.
    err = _fit_error((1, 64, 512, 512), "s8", eu_bytes=24)
    assert "needs 262152 bytes per lane" in str(err) and "; 8 bytes too many" in str(err)
    assert err.hint == ("slice H: N=1 with at most H=511 rows per tile fits; compact layout needs 262144 bytes "
                        "per lane (fits). Smaller H/W/N tiles are the usual fix.")


def test_occupancy_max_cells_zero_is_a_size_not_a_type_error():
    # max_cells = 0 is a valid (if useless) bound: the map of 1 lane x 1 row is over it
    lay = local_layout((1, 1, 1, 1), "s8", npu_num=1, eu_bytes=1)
    with pytest.raises(LayoutError, match="1 lanes x 1 EU rows and 1 data runs, more than max_cells=0"):
        lay.occupancy(max_cells=0)
    with pytest.raises(LayoutError, match="max_cells"):
        lay.occupancy(max_cells=-1)


def test_repr_leaves_out_the_byte_strides():
    # the byte strides follow from the element strides and itemsize; the repr shows the latter
    text = repr(local_layout((1, 1, 1, 1), "f32", npu_num=1, eu_bytes=4))
    assert text.endswith("itemsize=4, strides_elements=NpuStrides(n=1, c=1, h=1, w=1))")
    assert "strides_bytes" not in text


def test_check_fits_gives_the_lane_size_in_kib():
    # A bm1684x with 1 MiB lanes: 2**20 // 1024 = 1024 KiB. Compact (2, 64, 512, 512) f32 is
    # 512 * 512 * 4 = 2**20 bytes a batch, 2**21 for two: one batch fits.
    from scwork.hardware import override

    big = override("bm1684x", local_memory_bytes_per_lane=2**20)
    with pytest.raises(LayoutError) as info:
        local_layout((2, 64, 512, 512), "f32", chip=big, kind="compact").check_fits()
    assert str(info.value).splitlines()[0] == (
        "(2, 64, 512, 512) f32 (compact) needs 2097152 bytes per lane but bm1684x has 1048576 bytes per lane "
        "(1024 KiB); 1048576 bytes too many")


def test_default_occupancy_bound_is_2_24_cells():
    # s8 compact (1, 1, 1, 2**25) on 1 lane of 1-byte rows: 2**25 rows, over the default 2**24
    lay = local_layout((1, 1, 1, 2**25), "s8", npu_num=1, eu_bytes=1, kind="compact")
    with pytest.raises(LayoutError, match="1 lanes x 33,554,432 EU rows and 1 data runs, more than max_cells=16,777,216"):
        lay.occupancy()


def test_importing_npu_does_not_import_xarray():
    # xarray is imported when an occupancy map is built, not with the module
    code = "import sys, scwork.layout.npu; print('xarray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_check_fits_one_row_fits_two_do_not():
    # Compact (1, 64, 2, 40000) f32 on bm1684x: a row is 160000 bytes (fits 262144), two are 320000
    err = _fit_error((1, 64, 2, 40000), "f32", kind="compact")
    assert "needs 320000 bytes per lane" in str(err)
    assert err.hint == "slice H: N=1 with at most H=1 rows per tile fits. Smaller H/W/N tiles are the usual fix."


def test_occupancy_counts_one_run_per_channel_when_lines_touch():
    # s8 compact (1, 8, 2, 1) on 1 lane of 64-byte rows: 16 bytes, 1 row; the lines of a channel
    # touch (h stride 1 == W), so 8 runs, one a channel, not 16 (one a line)
    lay = local_layout((1, 8, 2, 1), "s8", npu_num=1, eu_bytes=64, kind="compact")
    assert lay.occupancy(max_cells=8)["owners"].values.tolist() == [[8]]


def test_fits_refuses_a_chip_with_fewer_lanes():
    with pytest.raises(ConfigError, match="computed for npu_num=65, eu_bytes=64 but bm1684x has npu_num=64"):
        local_layout((1, 1, 1, 1), "f32", npu_num=65, eu_bytes=64).fits("bm1684x")


# -- the last survivors of the npu.py mutation run ----------------------------------------

def test_strides_are_frozen():
    import dataclasses

    s = NpuStrides(n=12, c=6, h=2, w=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.n = 13


def test_chip_constants_overridden_upwards_are_kept_on_the_layouts_chip():
    # bm1684x has 64 lanes of 64-byte EUs. Asking for 128 lanes and 128-byte EUs keeps the
    # chip (its memory and stride unit) with both constants raised, so fits() compares the
    # layout with a chip of the same constants instead of refusing the mismatch.
    lay = local_layout((1, 3, 4, 5), "f32", chip="bm1684x", npu_num=128, eu_bytes=128)
    assert (lay.npu_num, lay.eu_bytes, lay.chip.npu_num, lay.chip.eu_bytes) == (128, 128, 128, 128)
    assert lay.fits()
    wide = local_layout((1, 3, 4, 5), "f32", chip="bm1684x", npu_num=128)
    assert (wide.chip.npu_num, wide.chip.eu_bytes) == (128, 64)
    deep = local_layout((1, 3, 4, 5), "f32", chip="bm1684x", eu_bytes=128)
    assert (deep.chip.npu_num, deep.chip.eu_bytes) == (64, 128)


def test_fits_refuses_a_chip_with_smaller_eus_than_the_layout():
    # Computed for 64 lanes of 128-byte EUs; bm1684x has 64-byte EUs: a mismatch either way.
    lay = local_layout((1, 3, 4, 5), "f32", npu_num=64, eu_bytes=128)
    with pytest.raises(ConfigError, match="npu_num=64, eu_bytes=128 but bm1684x has npu_num=64, eu_bytes=64"):
        lay.fits(chip="bm1684x")


def test_a_negative_max_cells_is_refused_as_such():
    lay = local_layout((1, 3, 4, 5), "f32", chip="bm1684x")
    with pytest.raises(LayoutError, match="max_cells must be >= 0, got -1"):
        lay.occupancy(max_cells=-1)
