"""The index-map kernels of scwork/layout/_kernels.py and their references, pinned by hand.

test_kernels.py compares each kernel with its numpy reference; nothing there says
either is right. Here every expected address is worked out by hand from XLA's tiling
semantics (the "Tiled layout" page of the XLA documentation: pad each tiled dimension
up to a multiple of its tile, split it into tile-count and in-tile coordinates, tiles
row-major and elements row-major inside a tile, a second tile applied to the in-tile
dimensions of the first, '*' flattening a dimension row-major into the next one before
the split) and written out below, for the tiling programs of small layouts given as
literal arrays: F32[3,5]{1,0:T(2,2)}, its transpose, a padded two-level
bf16 T(2,4)(2,1) and T(8,128)(2,1) (two bf16 rows interleaved into 32-bit words), '*'
tiles, a first tile longer than the shape and the scalar T(256)(4). Each is run through
the jitted kernel, its pure-Python function and the reference, and the programs are
checked against what :class:`~scwork.layout.Shape` builds.
"""

from __future__ import annotations

import numpy as np
import pytest

from scwork.layout import parse
from scwork.layout import _kernels as K
from scwork.testing import python_version

I64 = np.int64

# F32[3,5]{1,0:T(2,2)}: padded to 4 x 6, 2 x 3 tiles of 2 x 2 (12 slots a row of tiles, 4 a
# tile): address(i, j) = (i // 2) * 12 + (j // 2) * 4 + (i % 2) * 2 + j % 2.
F32_3x5_T22 = [[0, 1, 4, 5, 8],
               [2, 3, 6, 7, 10],
               [12, 13, 16, 17, 20]]
# Its inverse over the 24 slots: the row-major logical index (5 i + j) in each, -1 = padding.
F32_3x5_T22_SLOTS = [0, 1, 5, 6, 2, 3, 7, 8, 4, -1, 9, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, -1, -1, -1]

# F32[3,5]{0,1:T(2,2)}: dimension 1 is major; the physical 5 x 3 pads to 6 x 4:
# address(i, j) = (j // 2) * 8 + (i // 2) * 4 + (j % 2) * 2 + i % 2.
F32_3x5_T22_TRANSPOSED = [[0, 2, 8, 10, 16],
                          [1, 3, 9, 11, 17],
                          [4, 6, 12, 14, 20]]

# BF16[4,8]{1,0:T(2,4)(2,1)}: tiles of 2 x 4, then inside each the pairs of rows (2,1):
# address(i, j) = (i // 2) * 16 + (j // 4) * 8 + (j % 4) * 2 + i % 2.
BF16_4x8_T24_21 = [[0, 2, 4, 6, 8, 10, 12, 14],
                   [1, 3, 5, 7, 9, 11, 13, 15],
                   [16, 18, 20, 22, 24, 26, 28, 30],
                   [17, 19, 21, 23, 25, 27, 29, 31]]

# BF16[3,6]{1,0:T(2,4)(2,1)}: the same tiles with padding in both dimensions (4 x 8 slots).
BF16_3x6_T24_21 = [[0, 2, 4, 6, 8, 10],
                   [1, 3, 5, 7, 9, 11],
                   [16, 18, 20, 22, 24, 26]]

# F32[2,3,5]{2,1,0:T(*,2,4)}: '*' flattens (i, j) into a = 3 i + j (6 values, 3 tiles of 2),
# k is tiled by 4 (2 tiles): address = (a // 2) * 16 + (k // 4) * 8 + (a % 2) * 4 + k % 4.
F32_2x3x5_TSTAR24 = [[[0, 1, 2, 3, 8], [4, 5, 6, 7, 12], [16, 17, 18, 19, 24]],
                     [[20, 21, 22, 23, 28], [32, 33, 34, 35, 40], [36, 37, 38, 39, 44]]]

# F32[5]{0:T(2,4)}: the tile has one dimension more than the shape, an implicit major
# dimension of size 1 (padded to 2): address(k) = (k // 4) * 8 + k % 4.
F32_5_T24 = [0, 1, 2, 3, 8]

# The programs tiled_index_fill runs (see the module docstring of _kernels), by hand:
# (logical_dims, physical_axes, extra_major, tile_sizes, tile_starts, shape_sizes, shape_starts,
# final_strides).
PROGRAMS = {
    "f32[3,5]{1,0:T(2,2)}": ([3, 5], [0, 1], 0, [2, 2], [0, 2], [3, 5], [0, 2], [12, 4, 2, 1]),
    "f32[3,5]{0,1:T(2,2)}": ([3, 5], [1, 0], 0, [2, 2], [0, 2], [5, 3], [0, 2], [8, 4, 2, 1]),
    # The second tile applies to the last two of the four dimensions the first one made.
    "bf16[4,8]{1,0:T(2,4)(2,1)}": ([4, 8], [0, 1], 0, [2, 4, 2, 1], [0, 2, 4], [4, 8, 2, 2, 2, 4], [0, 2, 6],
                                   [16, 8, 8, 2, 1, 1]),
    "bf16[3,6]{1,0:T(2,4)(2,1)}": ([3, 6], [0, 1], 0, [2, 4, 2, 1], [0, 2, 4], [3, 6, 2, 2, 2, 4], [0, 2, 6],
                                   [16, 8, 8, 2, 1, 1]),
    "f32[2,3,5]{2,1,0:T(*,2,4)}": ([2, 3, 5], [0, 1, 2], 0, [-1, 2, 4], [0, 3], [2, 3, 5], [0, 3], [16, 8, 4, 1]),
    "f32[5]{0:T(2,4)}": ([5], [0], 1, [2, 4], [0, 2], [1, 5], [0, 2], [16, 8, 4, 1]),
    # A scalar: T(256) on the implicit (1,), then T(4) on its 256: (1, 64, 4).
    "f32[]{:T(256)(4)}": ([], [], 1, [256, 4], [0, 1, 2], [1, 1, 256], [0, 1, 3], [256, 4, 1]),
    # Two '*' merge all three dimensions into one run of 30 (32 slots); the coordinates
    # need three entries while the tiled shape has only two.
    "f32[2,3,5]{2,1,0:T(*,*,4)}": ([2, 3, 5], [0, 1, 2], 0, [-1, -1, 4], [0, 3], [2, 3, 5], [0, 3], [4, 1]),
    # A second tile merging all four dimensions of the first one's (2, 3, 2, 2) into one run
    # of 24 tiled by 2: the same addresses as T(2,2) alone, but the second level needs four
    # coordinates where the logical shape and the final tiled shape have two.
    "f32[3,5]{1,0:T(2,2)(*,*,*,2)}": ([3, 5], [0, 1], 0, [2, 2, -1, -1, -1, 2], [0, 2, 6], [3, 5, 2, 3, 2, 2],
                                      [0, 2, 6], [2, 1]),
    # The same on f32[5]{0:T(2,4)}, whose first tile adds a major dimension: the second level
    # writes a tile count into that dimension's coordinate, which must be 0 again for the
    # next element.
    "f32[5]{0:T(2,4)(*,*,*,2)}": ([5], [0], 1, [2, 4, -1, -1, -1, 2], [0, 2, 6], [1, 5, 1, 2, 2, 4], [0, 2, 6],
                                  [2, 1]),
}
MAPS = {
    "f32[3,5]{1,0:T(2,2)}": F32_3x5_T22,
    "f32[3,5]{0,1:T(2,2)}": F32_3x5_T22_TRANSPOSED,
    "bf16[4,8]{1,0:T(2,4)(2,1)}": BF16_4x8_T24_21,
    "bf16[3,6]{1,0:T(2,4)(2,1)}": BF16_3x6_T24_21,
    "f32[2,3,5]{2,1,0:T(*,2,4)}": F32_2x3x5_TSTAR24,
    "f32[5]{0:T(2,4)}": F32_5_T24,
    "f32[]{:T(256)(4)}": 0,
    "f32[2,3,5]{2,1,0:T(*,*,4)}": np.arange(30).reshape(2, 3, 5).tolist(),
    "f32[3,5]{1,0:T(2,2)(*,*,*,2)}": F32_3x5_T22,
    "f32[5]{0:T(2,4)(*,*,*,2)}": F32_5_T24,
}
# tiled_index_fill_reference's (levels, tiled_shape) of the same layouts, by hand.
LEVELS = {
    "f32[3,5]{1,0:T(2,2)}": ([((3, 5), (2, 2))], (2, 3, 2, 2)),
    "f32[3,5]{0,1:T(2,2)}": ([((5, 3), (2, 2))], (3, 2, 2, 2)),
    "bf16[4,8]{1,0:T(2,4)(2,1)}": ([((4, 8), (2, 4)), ((2, 2, 2, 4), (2, 1))], (2, 2, 1, 4, 2, 1)),
    "bf16[3,6]{1,0:T(2,4)(2,1)}": ([((3, 6), (2, 4)), ((2, 2, 2, 4), (2, 1))], (2, 2, 1, 4, 2, 1)),
    "f32[2,3,5]{2,1,0:T(*,2,4)}": ([((2, 3, 5), (-1, 2, 4))], (3, 2, 2, 4)),
    "f32[5]{0:T(2,4)}": ([((1, 5), (2, 4))], (1, 2, 2, 4)),
    "f32[]{:T(256)(4)}": ([((1,), (256,)), ((1, 256), (4,))], (1, 64, 4)),
    "f32[2,3,5]{2,1,0:T(*,*,4)}": ([((2, 3, 5), (-1, -1, 4))], (8, 4)),
    "f32[3,5]{1,0:T(2,2)(*,*,*,2)}": ([((3, 5), (2, 2)), ((2, 3, 2, 2), (-1, -1, -1, 2))], (12, 2)),
    "f32[5]{0:T(2,4)(*,*,*,2)}": ([((1, 5), (2, 4)), ((1, 2, 2, 4), (-1, -1, -1, 2))], (8, 2)),
}


def program(text):
    return tuple(np.array(a, I64) if isinstance(a, list) else a for a in PROGRAMS[text])


@pytest.mark.parametrize("text", sorted(PROGRAMS))
def test_tiled_index_fill_by_hand(text):
    expected = np.array(MAPS[text], I64)
    for kernel in (K.tiled_index_fill, python_version(K.tiled_index_fill)):
        out = np.full(max(expected.size, 1), -7, I64)
        kernel(*program(text), out)
        np.testing.assert_array_equal(out, expected.ravel())


@pytest.mark.parametrize("text", sorted(PROGRAMS))
def test_shape_builds_these_programs_and_levels(text):
    shape = parse(text)
    built = shape._kernel_program()
    for got, want in zip(built, program(text), strict=True):
        np.testing.assert_array_equal(got, want)
    levels, tiled_shape = LEVELS[text]
    assert [(tuple(s), tuple(t)) for s, t in shape._plan.levels] == levels
    assert tuple(shape._plan.tiled_shape) == tiled_shape
    np.testing.assert_array_equal(shape.index_map(engine="numba"), np.array(MAPS[text], I64))


@pytest.mark.parametrize("text", sorted(LEVELS))
def test_reference_by_hand(text):
    dims, axes, extra = PROGRAMS[text][:3]
    levels, tiled_shape = LEVELS[text]
    got = K.tiled_index_fill_reference(tuple(dims), tuple(axes), extra, levels, tiled_shape)
    np.testing.assert_array_equal(got, np.array(MAPS[text], I64))
    assert got.shape == tuple(dims)


def test_tiled_index_fill_leaves_an_empty_output_alone():
    out = np.zeros(0, I64)
    K.tiled_index_fill(np.array([0, 5], I64), np.array([0, 1], I64), 0, np.array([2, 2], I64),
                       np.array([0, 2], I64), np.array([0, 5], I64), np.array([0, 2], I64),
                       np.array([0, 4, 2, 1], I64), out)
    assert out.size == 0


# --------------------------------------------------------------------------------------
# BF16[20,300]{1,0:T(8,128)(2,1)}: the TPU's bf16 layout, padded, past the numba threshold
# --------------------------------------------------------------------------------------
# T(8,128) pads 20 x 300 to 24 x 384: 3 x 3 tiles of 1024 slots. (2,1) then pairs rows
# 2r, 2r+1 of a tile into one 32-bit word: within a tile, address = (row // 2) * 256 +
# column * 2 + row % 2.
def bf16_t8_128_21(i, j):
    return (i // 8) * 3072 + (j // 128) * 1024 + ((i % 8) // 2) * 256 + (j % 128) * 2 + i % 2


@pytest.mark.parametrize("index, address", [
    ((0, 0), 0), ((1, 0), 1), ((0, 1), 2), ((2, 0), 256), ((7, 127), 3 * 256 + 254 + 1),
    ((8, 0), 3072), ((0, 128), 1024), ((19, 299), 2 * 3072 + 2 * 1024 + 256 + 43 * 2 + 1),
])
def test_bf16_t8_128_21_addresses(index, address):
    assert bf16_t8_128_21(*index) == address
    assert parse("bf16[20,300]{1,0:T(8,128)(2,1)}").linear_index(index) == address


def test_bf16_t8_128_21_whole_map_and_inverse():
    shape = parse("bf16[20,300]{1,0:T(8,128)(2,1)}")
    i, j = np.indices((20, 300), dtype=I64)
    expected = bf16_t8_128_21(i, j)
    assert shape.num_elements > 4096 and shape.padded_elements == 9 * 1024
    # Through the separable kernel (no '*'), its reference, and the general kernel.
    np.testing.assert_array_equal(shape.index_map(), expected)
    tables, starts = shape._contribution_tables()
    np.testing.assert_array_equal(tables[:3], [0, 1, 256])        # rows 0, 1, 2
    np.testing.assert_array_equal(tables[20:23], [0, 2, 4])       # columns 0, 1, 2
    assert tables[20 + 128] == 1024 and tables[8] == 3072 and starts.tolist() == [0, 20]
    np.testing.assert_array_equal(K.outer_sum_fill_reference(tables, starts, (20, 300)), expected)
    out = np.full(6000, -7, I64)
    K.tiled_index_fill(*shape._kernel_program(), out)
    np.testing.assert_array_equal(out.reshape(20, 300), expected)
    # The inverse through invert_index_map (more than 4096 elements).
    slots = shape.address_map()
    assert slots.shape == (9216,)
    assert (slots[0], slots[1], slots[2], slots[2 * 3072 + 2 * 1024 + 256 + 86 + 1]) == (0, 300, 1, 5999)
    assert slots[2 * 3072 + 2 * 256] == -1            # row 20, the padding of the last row tile
    assert slots[2 * 1024 + 44 * 2] == -1             # column 300, the padding of the last column tile
    assert (slots == -1).sum() == 9216 - 6000
    np.testing.assert_array_equal(slots[expected.ravel()], np.arange(6000))


# --------------------------------------------------------------------------------------
# outer_sum_fill
# --------------------------------------------------------------------------------------
def run_outer_sum(kernel, tables, starts, dims, size=None):
    size = int(np.prod(dims, dtype=I64)) if size is None else size
    out = np.full(size, -7, I64)
    kernel(np.array(tables, I64), np.array(starts, I64), np.array(dims, I64), out)
    return out


OUTER_SUMS = [
    # F32[3,5]{1,0:T(2,2)}: rows contribute (i // 2) * 12 + (i % 2) * 2, columns (j // 2) * 4 + j % 2.
    ([0, 2, 12, 0, 1, 4, 5, 8], [0, 3], [3, 5], np.array(F32_3x5_T22).ravel().tolist()),
    # Tables whose first entries are not 0 and three dimensions: the odometer carries twice.
    ([1000, 2000, 30, 40, 5, 6, 7], [0, 2, 4], [2, 2, 3],
     [1035, 1036, 1037, 1045, 1046, 1047, 2035, 2036, 2037, 2045, 2046, 2047]),
    # One dimension: the table itself.
    ([9, 4, 7], [0], [3], [9, 4, 7]),
    # A size-1 dimension between two others.
    ([100, 200, 5, 0, 1], [0, 2, 3], [2, 1, 2], [105, 106, 205, 206]),
    # One element; rows of one element.
    ([7, 8], [0, 1], [1, 1], [15]),
    ([4, 5, 6, 10], [0, 3], [3, 1], [14, 15, 16]),
]


@pytest.mark.parametrize("tables, starts, dims, expected", OUTER_SUMS)
def test_outer_sum_fill_by_hand(tables, starts, dims, expected):
    for kernel in (K.outer_sum_fill, python_version(K.outer_sum_fill)):
        np.testing.assert_array_equal(run_outer_sum(kernel, tables, starts, dims), expected)
    got = K.outer_sum_fill_reference(np.array(tables, I64), np.array(starts, I64), dims)
    np.testing.assert_array_equal(got, np.array(expected).reshape(dims))


@pytest.mark.filterwarnings("error")    # as plain Python, numpy only warns on an integer division by zero
def test_outer_sum_fill_empty_shapes_and_scalars():
    for kernel in (K.outer_sum_fill, python_version(K.outer_sum_fill)):
        # A scalar: one element at address 0; with no room for it, nothing written.
        np.testing.assert_array_equal(run_outer_sum(kernel, [], [], []), [0])
        assert run_outer_sum(kernel, [], [], [], size=0).size == 0
        # No element: the output stays as it was (and is not indexed).
        assert run_outer_sum(kernel, [], [0, 0], [0, 5]).size == 0
        assert run_outer_sum(kernel, [1, 2, 3], [0, 3], [3, 0]).size == 0
        # The kernel writes the first prod(dims) slots of out and no other.
        np.testing.assert_array_equal(run_outer_sum(kernel, [], [], [], size=2), [0, -7])
        np.testing.assert_array_equal(run_outer_sum(kernel, [9, 4, 7], [0], [3], size=4), [9, 4, 7, -7])
        # A zero-length row with a non-empty output: nothing is written.
        np.testing.assert_array_equal(run_outer_sum(kernel, [1, 2, 3], [0, 3], [3, 0], size=2), [-7, -7])
    assert K.outer_sum_fill_reference(np.zeros(0, I64), np.zeros(0, I64), ()).tolist() == 0
    assert K.outer_sum_fill_reference(np.array([1, 2], I64), np.array([0, 2], I64), (2, 0)).shape == (2, 0)


# --------------------------------------------------------------------------------------
# invert_index_map
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("flat, size, expected, outside", [
    (F32_3x5_T22, 24, F32_3x5_T22_SLOTS, 0),
    ([3, 0, 2], 5, [1, -1, 2, 0, -1], 0),
    # Exactly at the bounds: size is outside, size - 1 and 0 inside, -1 outside.
    ([4, 3, -1, 0], 4, [3, -1, -1, 1], 2),
])
def test_invert_index_map_by_hand(flat, size, expected, outside):
    flat = np.array(flat, I64).ravel()
    for kernel in (K.invert_index_map, python_version(K.invert_index_map)):
        out = np.full(size, -1, I64)
        assert kernel(flat, out) == outside
        np.testing.assert_array_equal(out, expected)
    if not outside:
        np.testing.assert_array_equal(K.invert_index_map_reference(flat, size), expected)
        assert K.invert_index_map_reference(flat, size).dtype == I64


def test_address_map_of_f32_3x5_t22():
    np.testing.assert_array_equal(parse("f32[3,5]{1,0:T(2,2)}").address_map(), F32_3x5_T22_SLOTS)
