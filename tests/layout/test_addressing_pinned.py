"""Element addresses, maps and buffers of scwork/layout/_addressing.py, pinned by hand.

The worked example throughout is F32[3,5]{1,0:T(2,2)} (the XLA "Tiled layout" page's
example): padded to 4 x 6, 2 x 3 tiles of 2 x 2, so element (i, j) sits in slot
(i // 2) * 12 + (j // 2) * 4 + (i % 2) * 2 + j % 2 of a 24-slot buffer. Pinned here:
every element's slot through ``linear_index``, each index check at its bounds with its
message, which engine ``index_map`` and ``address_map`` take on either side of the
4096-element threshold and which kernel a layout with or without '*' runs, the buffer
``to_physical`` writes slot by slot, and which fill values it stores exactly. Beside it:
rank-3 and implicit-major-dimension contribution tables, the numpy map's peak memory,
and NaT fills.
"""

from __future__ import annotations

import numpy as np
import pytest

from scwork.errors import InternalError, LayoutError
from scwork.layout import parse
from scwork.layout import _kernels as K
from scwork.layout.shape import Shape

SHAPE = "f32[3,5]{1,0:T(2,2)}"
# Slot of element (i, j), by the formula in the module docstring.
SLOTS = [[0, 1, 4, 5, 8],
         [2, 3, 6, 7, 10],
         [12, 13, 16, 17, 20]]
ENGINE_HINT = "use 'auto', 'numpy' or 'numba'"


def reason_and_hint(call):
    with pytest.raises(LayoutError) as info:
        call()
    return info.value.reason, info.value.hint


# --------------------------------------------------------------------------------------
# linear_index and its checks
# --------------------------------------------------------------------------------------
def test_linear_index_of_every_element():
    s = parse(SHAPE)
    assert [[s.linear_index((i, j)) for j in range(5)] for i in range(3)] == SLOTS
    # The transpose: dimension 1 major, (j // 2) * 8 + (i // 2) * 4 + (j % 2) * 2 + i % 2.
    t = parse("f32[3,5]{0,1:T(2,2)}")
    assert [t.linear_index((i, 4)) for i in range(3)] == [16, 17, 20]
    # A tile longer than the shape: the implicit major dimension has coordinate 0.
    assert [parse("f32[5]{0:T(2,4)}").linear_index((k,)) for k in range(5)] == [0, 1, 2, 3, 8]
    assert parse("f32[]{:T(256)}").linear_index(()) == 0
    assert type(s.linear_index((2, 4))) is int


@pytest.mark.parametrize("index, reason", [
    (5, "an index is a sequence of 2 integers, got 5"),
    ((1,), f"index (1,) has 1 entries but {SHAPE} has rank 2"),
    ((1, 2, 3), f"index (1, 2, 3) has 3 entries but {SHAPE} has rank 2"),
    ((3, 0), "index 3 is out of range for dimension 0 of size 3 (valid: 0..2)"),
    ((0, 5), "index 5 is out of range for dimension 1 of size 5 (valid: 0..4)"),
    ((0, -1), "index -1 is out of range for dimension 1 of size 5 (valid: 0..4)"),
    # Past the size, not only at it: 4 and 6 are neither below the size nor equal to it.
    ((4, 0), "index 4 is out of range for dimension 0 of size 3 (valid: 0..2)"),
    ((0, 6), "index 6 is out of range for dimension 1 of size 5 (valid: 0..4)"),
    ((True, 0), "index entry 0 must be an integer, got True"),
    ((0, 1.0), "index entry 1 must be an integer, got 1.0"),
])
def test_index_checks(index, reason):
    assert reason_and_hint(lambda: parse(SHAPE).linear_index(index))[0] == reason


def test_index_bounds_are_inclusive_of_zero_and_size_minus_one():
    s = parse(SHAPE)
    assert (s.linear_index((0, 0)), s.linear_index((2, 4)), s.linear_index([np.int64(2), np.int32(3)])) == (0, 20, 17)
    assert reason_and_hint(lambda: parse("f32[2,0]").linear_index((1, 0)))[0] == (
        "dimension 1 has size 0: no index is valid")


# --------------------------------------------------------------------------------------
# index_map: arguments, empty shapes, engines
# --------------------------------------------------------------------------------------
def test_index_map_arguments():
    s = parse(SHAPE)
    assert reason_and_hint(lambda: s.index_map(engine=3)) == ("unknown engine 3", ENGINE_HINT)
    assert reason_and_hint(lambda: s.index_map(engine="NUMPY")) == ("unknown engine 'NUMPY'", ENGINE_HINT)
    assert reason_and_hint(lambda: s.index_map(max_elements=True))[0] == "max_elements must be an integer, got True"
    # The engine is checked before anything else: on a shape without elements (which
    # returns early) and before max_elements, whatever the string sorts next to.
    for engine in ("aaa", "zzz", "numbb", "autp", b"numpy"):
        assert reason_and_hint(lambda: parse("f32[0,3]").index_map(engine)) == (
            f"unknown engine {engine!r}", ENGINE_HINT)
        assert reason_and_hint(lambda: s.index_map(engine, max_elements=True)) == (
            f"unknown engine {engine!r}", ENGINE_HINT)
    # max_elements bounds the element count inclusively.
    np.testing.assert_array_equal(s.index_map(max_elements=15), SLOTS)
    assert "more than max_elements=14" in reason_and_hint(lambda: s.index_map(max_elements=14))[0]
    for engine in ("auto", "numpy", "numba"):
        got = s.index_map(engine)
        np.testing.assert_array_equal(got, SLOTS)
        assert got.dtype == np.int64 and got.shape == (3, 5)


def test_index_map_of_shapes_without_elements():
    for engine in ("numpy", "numba"):
        got = parse("f32[0,3]{1,0:T(2,2)}").index_map(engine)
        assert got.shape == (0, 3) and got.dtype == np.int64
    assert reason_and_hint(lambda: parse("f32[0,4294967296,4294967296]").index_map()) == (
        "numpy cannot make an empty array of shape (0, 4294967296, 4294967296): its non-zero dimensions multiply "
        "past int64", "use linear_index or smaller dimensions")


class EngineSpy:
    """Records which of Shape's numpy / numba index maps and which kernels run."""

    def __init__(self, monkeypatch):
        self.calls = []
        for name in ("_index_map_numpy", "_index_map_numba"):
            real = getattr(Shape, name)
            monkeypatch.setattr(Shape, name, self.wrap(name, real))
        for name in ("outer_sum_fill", "tiled_index_fill", "invert_index_map"):
            monkeypatch.setattr(K, name, self.wrap(name, getattr(K, name)))

    def wrap(self, name, real):
        def recorded(*args):
            self.calls.append(name)
            return real(*args)
        return recorded


@pytest.mark.parametrize("text, engine, expected", [
    # "auto" takes numba above NUMBA_MIN_ELEMENTS = 4096 elements, numpy up to it.
    ("f32[3,5]{1,0:T(2,2)}", "auto", ["_index_map_numpy"]),
    ("f32[4095]{0:T(128)}", "auto", ["_index_map_numpy"]),
    ("f32[4096]{0:T(128)}", "auto", ["_index_map_numpy"]),
    ("f32[4097]{0:T(128)}", "auto", ["_index_map_numba", "outer_sum_fill"]),
    ("f32[64,65]{1,0:T(8,128)}", "auto", ["_index_map_numba", "outer_sum_fill"]),
    # A '*' makes the layout non-separable: the general kernel.
    ("f32[2,3,5]{2,1,0:T(*,2,4)}", "numba", ["_index_map_numba", "tiled_index_fill"]),
    ("f32[3,5]{1,0:T(2,2)}", "numba", ["_index_map_numba", "outer_sum_fill"]),
    ("f32[3,5]{1,0:T(2,2)}", "numpy", ["_index_map_numpy"]),
    # A scalar has no dimension to run a kernel over.
    ("f32[]{:T(256)}", "numba", ["_index_map_numpy"]),
])
def test_which_engine_and_kernel_run(monkeypatch, text, engine, expected):
    shape = parse(text)
    spy = EngineSpy(monkeypatch)
    shape.index_map(engine)
    assert spy.calls == expected


def test_numba_and_numpy_maps_of_a_star_layout():
    # '*' merges (i, j) into a = 3 i + j: address = (a // 2) * 16 + (k // 4) * 8 + (a % 2) * 4 + k % 4.
    s = parse("f32[2,3,5]{2,1,0:T(*,2,4)}")
    i, j, k = np.indices((2, 3, 5))
    a = 3 * i + j
    expected = (a // 2) * 16 + (k // 4) * 8 + (a % 2) * 4 + k % 4
    np.testing.assert_array_equal(s.index_map("numba"), expected)
    np.testing.assert_array_equal(s.index_map("numpy"), expected)


def test_contribution_tables_of_the_worked_example():
    tables, starts = parse(SHAPE)._contribution_tables()
    # Rows: (i // 2) * 12 + (i % 2) * 2; columns: (j // 2) * 4 + j % 2.
    assert tables.tolist() == [0, 2, 12, 0, 1, 4, 5, 8] and starts.tolist() == [0, 3]
    t_tables, t_starts = parse("f32[3,5]{0,1:T(2,2)}")._contribution_tables()
    assert t_tables.tolist() == [0, 1, 4, 0, 2, 8, 10, 16] and t_starts.tolist() == [0, 3]
    empty_tables, empty_starts = parse("f32[]")._contribution_tables()
    assert empty_tables.size == 0 and empty_starts.size == 0 and empty_tables.dtype == np.int64


@pytest.mark.parametrize("text, tables, addresses", [
    # Row-major 2 x 3 x 4, no tile: strides 12, 4, 1.
    ("f32[2,3,4]{2,1,0}", [0, 12, 0, 4, 8, 0, 1, 2, 3], lambda i, j, k: 12 * i + 4 * j + k),
    # Column-major: dimension 0 minor, strides 1, 2, 6. A rank-3 shape tells a
    # dimension's physical position apart from its mirror image (rank - position).
    ("f32[2,3,4]{0,1,2}", [0, 1, 0, 2, 4, 0, 6, 12, 18], lambda i, j, k: i + 2 * j + 6 * k),
])
def test_contribution_tables_and_numba_map_of_rank_3(text, tables, addresses):
    shape = parse(text)
    got_tables, starts = shape._contribution_tables()
    assert got_tables.tolist() == tables and starts.tolist() == [0, 2, 5]
    expected = addresses(*np.indices((2, 3, 4)))
    for engine in ("numba", "numpy"):
        np.testing.assert_array_equal(shape.index_map(engine), expected)


def test_contribution_tables_with_an_implicit_major_dimension():
    # T(2,2,2) on a rank-2 shape adds one implicit size-1 major dimension (extra_major = 1),
    # padded to 2: the shape is 1 x 3 x 5 padded to 2 x 4 x 6, tiles of 8 slots, 1 x 2 x 3
    # of them. Element (i, j) sits in tile (i // 2) * 3 + j // 2 at (i % 2) * 2 + j % 2.
    shape = parse("f32[3,5]{1,0:T(2,2,2)}")
    tables, starts = shape._contribution_tables()
    assert tables.tolist() == [0, 2, 24, 0, 1, 8, 9, 16] and starts.tolist() == [0, 3]
    expected = [[0, 1, 8, 9, 16], [2, 3, 10, 11, 18], [24, 25, 32, 33, 40]]
    for engine in ("numba", "numpy"):
        assert shape.index_map(engine).tolist() == expected


def test_numpy_index_map_keeps_coordinates_sparse():
    # 16**4 elements: dense coordinates would hold four int64 arrays of the full shape
    # at once (about ten times the map's bytes at the peak); sparse ones are 4 x 16
    # entries, so the peak stays near the result plus one temporary.
    import tracemalloc

    shape = parse("f32[16,16,16,16]{3,2,1,0:T(8,128)}")
    tracemalloc.start()
    try:
        result = shape.index_map("numpy")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.shape == (16, 16, 16, 16) and result[0, 0, 1, 0] == 16 * 8
    assert peak < 4 * result.nbytes


# --------------------------------------------------------------------------------------
# address_map
# --------------------------------------------------------------------------------------
def test_address_map_of_the_worked_example():
    assert parse(SHAPE).address_map().tolist() == [0, 1, 5, 6, 2, 3, 7, 8, 4, -1, 9, -1, 10, 11, -1, -1, 12, 13,
                                                    -1, -1, 14, -1, -1, -1]


@pytest.mark.parametrize("text, kernel_runs", [("f32[3,5]{1,0:T(2,2)}", False), ("f32[4095]{0:T(128)}", False),
                                               ("f32[4096]{0:T(128)}", False), ("f32[4097]{0:T(128)}", True)])
def test_address_map_inverts_with_the_kernel_above_4096_elements(monkeypatch, text, kernel_runs):
    shape = parse(text)
    spy = EngineSpy(monkeypatch)
    slots = shape.address_map()
    assert ("invert_index_map" in spy.calls) == kernel_runs
    n = shape.num_elements
    if shape.rank == 1:
        assert slots[:n].tolist() == list(range(n)) and (slots[n:] == -1).all()
    assert slots.size == shape.padded_elements and sorted(slots[slots >= 0].tolist()) == list(range(n))


def test_address_map_refuses_an_index_map_outside_the_buffer(monkeypatch):
    monkeypatch.setattr(K, "invert_index_map", lambda flat, out: 1)
    with pytest.raises(InternalError) as info:
        parse("f32[4097]{0:T(128)}").address_map()
    assert str(info.value) == ("index map of f32[4097]{0:T(128)} has addresses outside the 4224-slot buffer; "
                               "please report this layout")


# --------------------------------------------------------------------------------------
# to_physical / from_physical
# --------------------------------------------------------------------------------------
def test_buffer_of_the_worked_example_slot_by_slot():
    s = parse(SHAPE)
    array = np.arange(1, 16, dtype=np.int16).reshape(3, 5) * 10
    buffer = s.to_physical(array, fill=-1)
    expected = [10, 20, 60, 70, 30, 40, 80, 90, 50, -1, 100, -1, 110, 120, -1, -1, 130, 140, -1, -1, 150, -1, -1, -1]
    assert buffer.tolist() == expected and buffer.dtype == np.int16
    assert s.to_physical(array).tolist() == [0 if v == -1 else v for v in expected]   # fill 0 by default
    np.testing.assert_array_equal(s.from_physical(buffer), array)
    assert s.from_physical(np.arange(24)).tolist() == [[0, 1, 4, 5, 8], [2, 3, 6, 7, 10], [12, 13, 16, 17, 20]]


def test_buffer_shapes_are_checked():
    s = parse(SHAPE)
    # Larger or smaller in either dimension, and (1, 15), which has the right number of
    # elements and sorts before (3, 5), are all refused.
    for wrong in ((5, 3), (4, 5), (2, 5), (3, 6), (3, 4), (1, 15), (15,), (3, 5, 1)):
        assert reason_and_hint(lambda: s.to_physical(np.zeros(wrong)))[0] == (
            f"array has shape {wrong} but {SHAPE} has logical shape (3, 5)")
    for shape in ((23,), (25,), (24, 1)):
        assert reason_and_hint(lambda: s.from_physical(np.zeros(shape)))[0] == (
            f"buffer has shape {shape} but {SHAPE} needs a 1-D buffer of 24 slots")
    assert reason_and_hint(lambda: s.to_physical([[1, 2], [3]]))[1] == (
        "pass a numpy array (or nested lists of equal lengths)")


@pytest.mark.parametrize("dtype, fill, stored", [
    (np.int64, 3.0, 3),                 # a whole float into an int slot is exact
    (np.float32, 0.1, np.float32(0.1)),  # real numbers round into a float slot
    (np.float64, True, 1.0),
    (np.complex128, 2.5, 2.5 + 0j),
    (np.bool_, 1, True),
    (np.uint8, 255, 255),
    (np.int8, -128, -128),
])
def test_fills_stored_exactly(dtype, fill, stored):
    buffer = parse("f32[3]{0:T(2)}").to_physical(np.zeros(3, dtype), fill=fill)
    assert buffer.dtype == dtype and buffer[-1] == stored and buffer[:3].tolist() == [0, 0, 0]
    assert type(buffer[-1]) is np.dtype(dtype).type


@pytest.mark.parametrize("dtype, fill", [
    (np.int64, 1.5), (np.uint8, -1), (np.uint8, 256), (np.int8, 128), (np.float64, 1 + 2j), (np.int64, "a"),
    (np.bool_, 2), (np.float32, 1e300),
    # datetime64 (kind "M", which sorts before "O"): an integer would become a day count.
    ("datetime64[D]", 3), ("datetime64[D]", 1.5),
])
def test_fills_that_cannot_be_stored(dtype, fill):
    name = np.dtype(dtype).name
    reason, hint = reason_and_hint(lambda: parse("f32[3]{0:T(2)}").to_physical(np.zeros(3, dtype), fill=fill))
    assert reason == f"fill {fill!r} cannot be stored exactly in the array's dtype {name}"
    assert hint == f"pass a fill value of the array's type ({name}), or convert the array first"


def test_fill_must_be_one_value_and_object_arrays_take_any():
    reason, hint = reason_and_hint(lambda: parse("f32[3]{0:T(2)}").to_physical(np.zeros(3), fill=[1, 2]))
    assert reason == "fill must be one value, got an array of shape (2,)"
    assert hint == "pass a fill value of the array's type (float64), or convert the array first"
    # A 0-d fill is one value: a 0-d array of the array's dtype is stored.
    assert parse("f32[3]{0:T(2)}").to_physical(np.zeros(3), fill=np.array(-2.0)).tolist() == [0, 0, 0, -2.0]
    marker = object()
    buffer = parse("f32[3]{0:T(2)}").to_physical(np.array(["a", 1, None], dtype=object), fill=marker)
    assert buffer.dtype == object and buffer[3] is marker and buffer[:3].tolist() == ["a", 1, None]
    # Object slots store the fill as given, even NaN, which equals nothing (not even itself).
    nan = float("nan")
    buffer = parse("f32[3]{0:T(2)}").to_physical(np.array(["a", 1, None], dtype=object), fill=nan)
    assert buffer[3] is nan


def test_nat_fills_are_stored_into_their_own_kind():
    # A datetime fill of the array's own dtype is stored.
    dates = np.array(["2020-01-01", "2020-01-02", "2020-01-03"], dtype="datetime64[D]")
    buffer = parse("f32[3]{0:T(2)}").to_physical(dates, fill=np.datetime64("NaT", "D"))
    assert buffer[:3].tolist() == dates.tolist() and np.isnat(buffer[3]) and buffer.dtype == dates.dtype
    # NaT, like NaN, equals nothing; it is stored into its own kind (any unit), not across kinds.
    gaps = parse("f32[3]{0:T(2)}").to_physical(np.zeros(3, "timedelta64[s]"), fill=np.timedelta64("NaT", "ms"))
    assert np.isnat(gaps[3]) and not np.isnat(gaps[:3]).any() and gaps.dtype == np.dtype("timedelta64[s]")
    for array, fill in ((dates, np.timedelta64("NaT", "D")), (np.zeros(3, np.int64), np.datetime64("NaT", "D")),
                        (np.zeros(3), np.datetime64("NaT", "D"))):
        assert reason_and_hint(lambda: parse("f32[3]{0:T(2)}").to_physical(array, fill=fill))[0] == (
            f"fill {fill!r} cannot be stored exactly in the array's dtype {array.dtype}")
