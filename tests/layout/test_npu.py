"""Sophgo NPU local-memory layout ([tpu-mlir], local-memory layout): worked examples, formulas, brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import ConfigError, HardwareError, LayoutError
from scwork.layout import npu
from scwork.layout.npu import LocalLayout, NpuStrides, global_strides, local_layout


# ----------------------------------------------------------------------------------
# Worked examples of the Sophgo local-memory article ([tpu-mlir])
# ----------------------------------------------------------------------------------
def test_global_strides_spec_example():
    assert global_strides((2, 2, 3, 2)) == NpuStrides(n=12, c=6, h=2, w=1)
    assert global_strides((2, 2, 3, 2)).as_tuple() == (12, 6, 2, 1)


def test_spec_example_start_lane_0():
    lay = local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64)
    assert lay.eu_num == 32
    assert lay.strides_elements.as_tuple() == (32, 32, 5, 1)
    # byte distance multiplies by the dtype size (2 bytes for fp16)
    assert lay.strides_bytes.as_tuple() == (64, 64, 10, 2)


def test_spec_example_start_lane_2():
    lay = local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64, start_lane=2)
    assert lay.strides_elements.c == 32
    assert lay.strides_elements.n == 64
    # the last channel wraps to lane 0, one slot down; batch 1 starts on lane 2 again
    assert [lay.lane_of(c) for c in range(3)] == [2, 3, 0]
    assert [lay.slot_of(c) for c in range(3)] == [0, 0, 1]
    assert lay.address(1, 0, 0, 0) == (2, 64 * 2)
    assert lay.address(0, 2, 0, 0) == (0, 32 * 2)


def test_f32_w_to_w_plus_1_is_4_bytes():
    lay = local_layout((1, 1, 2, 3), "f32", npu_num=4, eu_bytes=64)
    lane0, off0 = lay.address(0, 0, 1, 1)
    lane1, off1 = lay.address(0, 0, 1, 2)
    assert lane0 == lane1 and off1 - off0 == 4


# ----------------------------------------------------------------------------------
# Layout kinds computed by hand
# ----------------------------------------------------------------------------------
def test_aligned_rounds_channel_slot_up_to_eu_num():
    # f32, eu_bytes 64 -> EU_NUM 16. H*W = 3*7 = 21 -> 32; C=5 on 2 lanes -> 3 slots.
    lay = local_layout((2, 5, 3, 7), "f32", npu_num=2, eu_bytes=64)
    assert lay.strides_elements.as_tuple() == (96, 32, 7, 1)
    assert lay.bytes_per_lane == 2 * 96 * 4


def test_compact_slot_is_exactly_hw():
    lay = local_layout((2, 5, 3, 7), "f32", npu_num=2, eu_bytes=64, kind="compact")
    assert lay.strides_elements.as_tuple() == (63, 21, 7, 1)
    # element (1, 3, 2, 6): lane 1, slot 1 -> 63 + 21 + 14 + 6 = 104 elements
    assert lay.address(1, 3, 2, 6) == (1, 104 * 4)


def test_line_aligned_pads_every_line():
    # s8, eu_bytes 16 -> EU_NUM 16. W=5 -> H stride 16; H=3 -> C stride 48.
    lay = local_layout((1, 3, 3, 5), "s8", npu_num=8, eu_bytes=16, kind="line_aligned", start_lane=6)
    assert lay.strides_elements.as_tuple() == (96, 48, 16, 1)  # ceil((6+3)/8) = 2 slots
    assert lay.address(0, 2, 2, 4) == (0, 48 + 32 + 4)


def test_line_aligned_equals_aligned_when_w_is_a_multiple_of_eu_num():
    a = local_layout((2, 3, 4, 32), "f16", npu_num=4, eu_bytes=64)
    b = local_layout((2, 3, 4, 32), "f16", npu_num=4, eu_bytes=64, kind="line_aligned")
    assert a.strides_elements == b.strides_elements


def test_compact_never_bigger_than_aligned_never_bigger_than_line_aligned():
    for shape in [(1, 3, 3, 5), (2, 70, 7, 9), (3, 1, 1, 1)]:
        sizes = [local_layout(shape, "f16", npu_num=4, eu_bytes=64, kind=k).bytes_per_lane
                 for k in ("compact", "aligned", "line_aligned")]
        assert sizes == sorted(sizes)


# ----------------------------------------------------------------------------------
# Chips from the catalog
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", scwork.hardware.names("npu"))
def test_every_catalog_chip_constructs(name):
    chip = scwork.hardware.get(name)
    dtype = "bf16"  # the one float type every Sophgo chip holds in local memory
    lay = local_layout((2, chip.npu_num + 1, 4, 5), dtype, chip=name, start_lane=1)
    assert lay.chip is chip
    assert (lay.npu_num, lay.eu_bytes) == (chip.npu_num, chip.eu_bytes)
    assert lay.eu_num == chip.eu_bytes // 2
    # C = npu_num + 1 starting at lane 1 wraps once: two slots per batch
    assert lay.slots_per_batch == 2
    assert lay.strides_elements.c == math.ceil(20 / lay.eu_num) * lay.eu_num
    assert lay.strides_bytes == lay.strides_elements.scaled(2)
    assert lay.fits()
    assert lay.native_stride_unit == ("bytes" if chip.byte_strides else "elements")


@pytest.mark.parametrize("name", ["cv183x", "cv182x", "cv181x", "cv180x"])
def test_cv18xx_strides_are_native_bytes(name):
    lay = local_layout((1, 3, 2, 3), "bf16", chip=name)
    assert lay.native_stride_unit == "bytes"
    # cvikernel tl_default_stride: w = 2, h = w * 2, c = align_up(h * w * 2, eu_num=16)
    assert lay.strides_bytes.as_tuple()[1:] == (16, 6, 2)
    assert lay.native_strides == lay.strides_bytes
    assert lay.strides_elements.as_tuple()[1:] == (8, 3, 1)
    lanes = scwork.hardware.get(name).npu_num
    assert lay.strides_bytes.n == math.ceil(3 / lanes) * 16


def test_bm_chips_strides_are_native_elements():
    lay = local_layout((1, 3, 2, 3), "f32", chip="bm1684x")
    assert lay.native_stride_unit == "elements"
    assert lay.native_strides == lay.strides_elements == NpuStrides(16, 16, 3, 1)


def test_cv18xx_refuses_dtypes_it_cannot_hold():
    with pytest.raises(LayoutError, match="int8, uint8 and bf16"):
        local_layout((1, 3, 2, 3), "f32", chip="cv183x")
    assert local_layout((1, 3, 2, 3), "u8", chip="cv180x").itemsize == 1


def test_explicit_values_override_the_chip():
    lay = local_layout((1, 3, 4, 5), "f32", chip="bm1684x", npu_num=4)
    assert lay.npu_num == 4 and lay.eu_bytes == 64
    assert lay.chip.local_memory_bytes_per_lane == 256 * 1024
    assert scwork.hardware.source(lay.chip, "npu_num") == "user override"


def test_bm1684_4n_mode_is_flagged_not_modelled():
    assert "4N" in npu.__doc__
    notes = local_layout((4, 3, 4, 5), "s8", chip="bm1684").summary()["notes"]
    assert any("4N" in note for note in notes)
    assert local_layout((4, 3, 4, 5), "f32", chip="bm1684").summary()["notes"] == []


# ----------------------------------------------------------------------------------
# Capacity
# ----------------------------------------------------------------------------------
def test_fits_and_check_fits_against_local_memory():
    ok = local_layout((1, 64, 56, 56), "f32", chip="bm1684x")
    assert ok.bytes_per_lane == 56 * 56 * 4
    assert ok.fits()
    ok.check_fits()
    big = local_layout((32, 64, 56, 56), "f32", chip="bm1684x")
    assert not big.fits()
    with pytest.raises(LayoutError) as info:
        big.check_fits()
    text = str(info.value)
    assert "401408 bytes per lane" in text and "bm1684x has 262144" in text
    assert "at most 20 batch" in text  # 262144 // 12544 = 20


def test_check_fits_suggests_h_slice_when_one_batch_is_too_big():
    lay = local_layout((1, 1, 300, 300), "f32", chip="bm1688")
    assert lay.bytes_per_lane == 300 * 300 * 4 > 128 * 1024
    with pytest.raises(LayoutError, match=r"at most H=109 rows"):
        lay.check_fits()  # 109 * 300 * 4 = 130800 <= 131072 < 110 * 300 * 4


def test_check_fits_mentions_compact_layout():
    lay = local_layout((60, 1, 1, 1), "f32", npu_num=1, eu_bytes=64, kind="aligned")
    small = scwork.hardware.override("bm1684x", npu_num=1, local_memory_bytes_per_lane=1024)
    assert not lay.fits(small)
    with pytest.raises(LayoutError, match="compact layout needs 240 bytes per lane"):
        lay.check_fits(small)


def test_fits_needs_a_chip():
    lay = local_layout((1, 3, 4, 5), "f32", npu_num=4, eu_bytes=64)
    with pytest.raises(ConfigError, match="pass chip"):
        lay.fits()
    with pytest.raises(ConfigError, match="recompute"):
        lay.fits("bm1684x")  # 64 lanes: a different layout


# ----------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------
def test_without_chip_npu_num_and_eu_bytes_are_required():
    with pytest.raises(ConfigError, match="eu_bytes"):
        local_layout((1, 3, 4, 5), npu_num=4)
    with pytest.raises(ConfigError, match="npu_num, eu_bytes"):
        local_layout((1, 3, 4, 5))


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"kind": "tiled"}, LayoutError, "unknown layout kind"),
        ({"start_lane": 4}, LayoutError, "start_lane=4"),
        ({"start_lane": -1}, LayoutError, "start_lane=-1"),
        ({"npu_num": 0}, ConfigError, "npu_num"),
        ({"eu_bytes": 6}, ConfigError, "not a multiple"),
    ],
)
def test_bad_parameters(kwargs, error, text):
    args = {"npu_num": 4, "eu_bytes": 64, **kwargs}
    with pytest.raises(error, match=text):
        local_layout((1, 3, 4, 5), "f32", **args)


def test_bad_dtype_and_shape():
    with pytest.raises(LayoutError, match="unknown dtype 'f8'"):
        local_layout((1, 3, 4, 5), "f8", npu_num=4, eu_bytes=64)
    with pytest.raises(LayoutError, match="4 dimensions"):
        local_layout((3, 4, 5), npu_num=4, eu_bytes=64)
    with pytest.raises(LayoutError, match="H must be >= 1"):
        global_strides((1, 3, 0, 5))
    assert local_layout((1, 1, 1, 1), "int8", npu_num=4, eu_bytes=64).dtype == "s8"


def test_chip_errors():
    with pytest.raises(HardwareError, match="not a Sophgo NPU"):
        local_layout((1, 3, 4, 5), chip="v5p")
    with pytest.raises(HardwareError, match="Unknown chip"):
        local_layout((1, 3, 4, 5), chip="bm9999")


def test_address_bounds_name_the_index():
    lay = local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64)
    with pytest.raises(LayoutError, match=r"index h=4 is out of range for H=4"):
        lay.address(0, 0, 4, 0)
    with pytest.raises(LayoutError, match=r"index c=-1"):
        lay.lane_of(-1)
    with pytest.raises(LayoutError, match=r"index n=2"):
        lay.address(2, 0, 0, 0)


def test_layout_is_frozen_and_direct_construction_validates():
    lay = local_layout((1, 3, 4, 5), "f32", npu_num=4, eu_bytes=64)
    with pytest.raises(AttributeError):
        lay.kind = "compact"
    direct = LocalLayout((1, 3, 4, 5), "fp32", 4, 64)
    assert direct == lay
    with pytest.raises(LayoutError):
        LocalLayout((1, 3, 4, 5), "f32", 4, 64, kind="packed")


# ----------------------------------------------------------------------------------
# Views
# ----------------------------------------------------------------------------------
def test_occupancy_map_spec_example():
    occ = local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64, start_lane=2).occupancy()
    assert occ["channel"].dims == ("lane", "row")
    assert occ.sizes == {"lane": 4, "row": 4}
    assert occ["channel"].values.tolist() == [[-1, 2, -1, 2], [-1] * 4, [0, -1, 0, -1], [1, -1, 1, -1]]
    assert occ["batch"].values.tolist() == [[-1, 0, -1, 1], [-1] * 4, [0, -1, 1, -1], [0, -1, 1, -1]]
    assert occ["used_bytes"].values.tolist() == [[0, 40, 0, 40], [0] * 4, [40, 0, 40, 0], [40, 0, 40, 0]]
    assert occ["used_bytes"].attrs["units"] == "bytes"
    assert occ["channel"].dtype == np.int64
    assert occ.attrs["bytes_per_lane"] == 256


def test_occupancy_compact_rows_shared_by_two_channels():
    # f32, EU row 16 bytes = 4 elements; H*W = 3 -> channels of one lane share rows.
    lay = local_layout((1, 4, 1, 3), "f32", npu_num=2, eu_bytes=16, kind="compact")
    occ = lay.occupancy()
    # lane 0 holds channels 0 and 2 at elements 0..2 and 3..5 -> rows [0..3], [4..7]
    assert occ["used_bytes"].sel(lane=0).values.tolist() == [16, 8]
    assert occ["owners"].sel(lane=0).values.tolist() == [2, 1]
    assert occ["channel"].sel(lane=0).values.tolist() == [0, 2]


def test_occupancy_has_banks_for_a_chip():
    occ = local_layout((1, 64, 56, 56), "f32", chip="bm1684x").occupancy()
    assert "bank" in occ.coords
    assert int(occ["bank"].max()) == (occ.attrs["bytes_per_lane"] - 1) // (256 * 1024 // 16)


def test_summary_and_html():
    lay = local_layout((2, 3, 4, 5), "f16", chip="bm1684x")
    summary = lay.summary()
    assert summary["strides_elements"] == lay.strides_elements.as_tuple()
    assert summary["bytes_per_lane"] == lay.bytes_per_lane
    assert summary["fits"] is True
    assert summary["utilization"] == pytest.approx(lay.data_bytes / (64 * lay.bytes_per_lane))
    html = lay._repr_html_()
    assert "<table>" in html and "bm1684x" in html and "bytes_per_lane" in html


# ----------------------------------------------------------------------------------
# Brute force: every element, every layout
# ----------------------------------------------------------------------------------
def _check_every_element(lay: LocalLayout) -> None:
    N, C, H, W = lay.shape
    rows = math.ceil(lay.bytes_per_lane / lay.eu_bytes)
    seen = {}
    per_row = np.zeros((lay.npu_num, rows), dtype=np.int64)
    first_byte = {}   # (lane, row) -> (offset, n, c) of the lowest data byte
    owners = {}       # (lane, row) -> {(n, c)}
    for n, c, h, w in itertools.product(range(N), range(C), range(H), range(W)):
        lane, offset = lay.address(n, c, h, w)
        assert lane == (lay.start_lane + c) % lay.npu_num == lay.lane_of(c)
        assert 0 <= offset and offset + lay.itemsize <= lay.bytes_per_lane
        assert offset % lay.itemsize == 0
        assert (lane, offset) not in seen, f"{(n, c, h, w)} collides with {seen.get((lane, offset))}"
        seen[(lane, offset)] = (n, c, h, w)
        if lay.kind != "compact" and h == 0 and w == 0:
            assert offset % lay.eu_bytes == 0  # every slot starts on an EU row
        for byte in range(offset, offset + lay.itemsize):
            cell = (lane, byte // lay.eu_bytes)
            per_row[cell] += 1
            first_byte[cell] = min(first_byte.get(cell, (byte, n, c)), (byte, n, c))
            owners.setdefault(cell, set()).add((n, c))
    assert len(seen) == N * C * H * W
    occ = lay.occupancy()
    assert occ["used_bytes"].values.tolist() == per_row.tolist()
    expected_batch = np.full_like(per_row, -1)
    expected_channel = np.full_like(per_row, -1)
    expected_owners = np.zeros_like(per_row)
    for cell, (_, n, c) in first_byte.items():
        expected_batch[cell], expected_channel[cell] = n, c
        expected_owners[cell] = len(owners[cell])
    assert occ["batch"].values.tolist() == expected_batch.tolist()
    assert occ["channel"].values.tolist() == expected_channel.tolist()
    assert occ["owners"].values.tolist() == expected_owners.tolist()
    if lay.kind != "compact":
        assert occ["owners"].values.max() <= 1  # only compact slots share EU rows


@settings(max_examples=150, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 9), st.integers(1, 4), st.integers(1, 6)),
    npu_num=st.sampled_from([1, 2, 3, 4, 8]),
    eu_bytes=st.sampled_from([4, 8, 16, 32, 64]),
    dtype=st.sampled_from(["f32", "f16", "bf16", "s8", "s32"]),
    kind=st.sampled_from(npu.LAYOUT_KINDS),
    data=st.data(),
)
def test_brute_force_addresses_are_unique_and_in_bounds(shape, npu_num, eu_bytes, dtype, kind, data):
    assume(eu_bytes % npu.DTYPE_SIZES[dtype] == 0)
    start = data.draw(st.integers(0, npu_num - 1))
    _check_every_element(local_layout(shape, dtype, npu_num=npu_num, eu_bytes=eu_bytes,
                                      kind=kind, start_lane=start))


def test_brute_force_spec_example():
    for start in range(4):
        _check_every_element(local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64, start_lane=start))


def test_four_bit_types_follow_tpu_mlir_half_byte_rule():
    """int4/uint4 (BM1688): 0.5 byte per element, EU_NUM doubles, byte sizes
    align_up(elements, 2) * 0.5 (tpu-mlir's rule for 4-bit local memory)."""
    from scwork.layout.npu import DTYPE_BITS, DTYPE_SIZES, bytes_of, local_layout

    assert DTYPE_SIZES["s4"] == DTYPE_SIZES["u4"] == 0.5 and DTYPE_BITS["s4"] == 4
    aligned = local_layout((1, 3, 4, 5), "int4", npu_num=4, eu_bytes=64)
    assert aligned.dtype == "s4" and aligned.eu_num == 128            # 64 bytes hold 128 nibbles
    assert aligned.strides_elements.as_tuple() == (128, 128, 5, 1)    # H*W = 20 aligned up to 128
    assert aligned.strides_bytes.as_tuple() == (64, 64, 3, 1)         # align_up(k, 2) * 0.5
    assert aligned.bytes_per_lane == 64 and aligned.data_bytes == 30   # 60 elements: 30 bytes
    compact = local_layout((1, 3, 4, 5), "uint4", npu_num=4, eu_bytes=64, kind="compact")
    assert compact.strides_bytes.c == 10 and compact.bytes_per_lane == 10
    odd = local_layout((1, 1, 1, 3), "u4", npu_num=4, eu_bytes=64, kind="compact")
    assert odd.bytes_per_lane == 2 == bytes_of(3, 4)                  # 3 nibbles take 2 bytes
    assert [odd.address(0, 0, 0, w)[1] for w in range(3)] == [0, 0, 1]  # two elements per byte
    # The occupancy map counts the bytes the data touches.
    assert int(aligned.occupancy()["used_bytes"].sum()) == 30
    # A chip whose toolchain has no 4-bit local tensors refuses them with a typed error.
    with pytest.raises(LayoutError, match="int8, uint8 and bf16"):
        local_layout((1, 3, 4, 5), "int4", chip="cv183x")
    assert local_layout((1, 64, 8, 8), "int4", chip="bm1688").fits()
