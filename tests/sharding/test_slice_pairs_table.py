"""``slice_pairs``'s table of a row's ids, at its edges, with values worked out by hand.

Rows of up to ``_SHORT_ROW`` ids are deduplicated through a table of slots stamped
with the row (linear probing from ``_row_slot``), longer rows by sorting a copy.
Random rows (``tests/sharding/test_split_kernels.py``) rarely land on what is pinned
here: rows of exactly the limit and one past it, rows of one id repeated, different
ids of one row that hash to the same slot (the probe must step past them and wrap
from the last slot to the first), ids at ``vocab - 1`` and ``vocab``, and rotations
by a negative shift on both the mask (P a power of two) and the modulo path. The
kernel and its numpy reference must both give the hand values.

Each row is a slice of one sample (``n = 1``), all in one call, so a row's counts are
its own row of ``pairs`` and the table carries over from one row to the next.

Some of what the table does leaves the counts alone and only changes its cost: the
slot hash, which slots colliding ids take, when the table is cleared, its size, and
when the copy for long rows is made. The last tests pin those on the table itself:
the plain-Python kernel is run with ``np.full`` and ``np.empty`` recorded, and the
stamps and ids it leaves are compared with values worked out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from scwork.sharding import _split_kernels as SK

FNS = ["slice_pairs", "slice_pairs_reference"]


def _counts(fn, rows, P, vocab, shift):
    """Per row, the ids of ``rows`` (one feature, one table) per partition: a ``(len(rows), P)`` list."""
    ids = np.array([x for r in rows for x in r], np.int64)
    splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)[None, :]
    pairs = np.zeros(len(rows) * P, np.int64)
    getattr(SK, fn)(ids, splits, 1, P, np.array([0, 1], np.int64), np.zeros(1, np.int64),
                    np.array([vocab], np.int64), np.array([shift], np.int64), 0, len(rows), 0, 1, pairs)
    return pairs.reshape(len(rows), P).tolist()


@pytest.mark.parametrize("fn", FNS)
def test_rows_at_the_short_row_limit_and_one_past_it(fn):
    """P = 2 (partition ``x % 2``), vocabulary 10**6.

    Row 0: ids 0..255 twice (512 ids, the limit: the table), 128 even and 128 odd.
    Row 1: the same and one more 7 (513 ids: sorted), the same counts. Row 2: 512
    distinct ids 1000..1511 (the table exactly half full), 256 and 256. Row 3: 600
    distinct ids 0..599 (sorted, a longer copy than row 1's), 300 and 300. Row 4: 3,
    3, 4 (the table again after the sorted rows): 4 even, 3 odd.
    """
    half = list(range(256))
    rows = [half + half, half + half + [7], list(range(1000, 1512)), list(range(600)), [3, 3, 4]]
    assert [len(r) for r in rows[:3]] == [SK._SHORT_ROW, SK._SHORT_ROW + 1, SK._SHORT_ROW]
    assert _counts(fn, rows, 2, 10**6, 0) == [[128, 128], [128, 128], [256, 256], [300, 300], [1, 1]]


@pytest.mark.parametrize("fn", FNS)
def test_rows_of_one_id_repeated(fn):
    """One id, however often in a row, counts once; vocabulary 8, P = 2.

    5 forty times, 5 as often as the limit, 5 once past it (sorted): one id in
    partition 1 each time. 6 once: partition 0. 8 (== vocabulary) thirty times:
    nothing.
    """
    rows = [[5] * 40, [5] * SK._SHORT_ROW, [5] * (SK._SHORT_ROW + 1), [6], [8] * 30]
    assert _counts(fn, rows, 2, 8, 0) == [[0, 1], [0, 1], [0, 1], [1, 0], [0, 0]]


def _ids_in_slot(slot, count):
    """The first ``count`` ids from 0 up that ``_row_slot`` sends to ``slot``."""
    candidates = np.arange(100_000, dtype=np.int64)
    # _row_slot is elementwise integer arithmetic, so its Python body takes an array
    slot_of = getattr(SK._row_slot, "py_func", SK._row_slot)(candidates)
    found = candidates[slot_of == slot][:count].tolist()
    assert len(found) == count
    return found


@pytest.mark.parametrize("fn", FNS)
def test_ids_that_share_a_slot_probe_past_each_other_and_wrap_around(fn):
    """Three ids ``a < b < c`` whose first slot is the last one, and ``d`` whose slot is 0.

    In the row a, b, c, d, c, b, a, d, b: b and c probe past a to slots 0 and 1
    (wrapping around), so d finds its own slot taken by b and probes on; the repeats
    must each find their id, not take another slot. Four distinct ids. With
    vocabulary ``c``, c is skipped but still takes its slot, and the three others are
    counted. The next row, d and a, counts both again (a new row, a new stamp).
    """
    last = (1 << SK._SLOT_BITS) - 1
    a, b, c = _ids_in_slot(last, 3)
    (d,) = [x for x in _ids_in_slot(0, 3) if x < c][:1]
    slot_of = getattr(SK._row_slot, "py_func", SK._row_slot)
    assert [int(slot_of(np.int64(x))) for x in (a, b, c, d)] == [last, last, last, 0]
    rows = [[a, b, c, d, c, b, a, d, b], [d, a]]
    P = 3
    for vocab, counted in ((10**6, (a, b, c, d)), (c, (a, b, d))):
        expected = [0] * P
        for x in counted:
            expected[x % P] += 1
        second = [0] * P
        for x in (d, a):
            second[x % P] += 1
        assert _counts(fn, rows, P, vocab, 0) == [expected, second]


@pytest.mark.parametrize("fn", FNS)
def test_ids_at_the_vocabulary_edge(fn):
    """Vocabulary 10, P = 4: 9 (== vocab - 1) counts, in partition 1; 10 (== vocab) does not.

    The short row 10, 9, 10, 9, 0 and a sorted one (10, 9 257 times, then 0: 515 ids)
    both give 9 and 0: partitions 1 and 0.
    """
    rows = [[10, 9, 10, 9, 0], [10, 9] * 257 + [0]]
    assert len(rows[1]) > SK._SHORT_ROW
    assert _counts(fn, rows, 4, 10, 0) == [[1, 1, 0, 0], [1, 1, 0, 0]]


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize(("P", "shift", "expected"), [
    (3, 0, [2, 1, 1]),        # 0, 1, 2, 3 -> 0, 1, 2, 0
    (3, -1, [1, 1, 2]),       # -> -1, 0, 1, 2 -> 2, 0, 1, 2
    (3, -5, [1, 2, 1]),       # -> -5, -4, -3, -2 -> 1, 2, 0, 1
    (4, -1, [1, 1, 1, 1]),    # the mask path: -1 & 3 == 3, as -1 % 4
    (4, -6, [1, 1, 1, 1]),    # -> -6, -5, -4, -3 -> 2, 3, 0, 1
    (4, 0, [1, 1, 1, 1]),
])
def test_negative_and_zero_rotations(fn, P, shift, expected):
    """Id x goes to ``(x + shift) % P``, never a negative partition, short row and sorted row alike.

    The ids 0, 1, 2, 3 (and 0 again), in a short row and repeated 129 times (516 ids).
    """
    rows = [[0, 1, 2, 3, 0], [0, 1, 2, 3] * 129]
    assert len(rows[1]) > SK._SHORT_ROW
    assert _counts(fn, rows, P, 10, shift) == [expected, expected]


def test_stamps_start_again_after_the_last_one_with_the_table_cleared(monkeypatch):
    """The int32 row stamps end at ``_STAMP_END``; then the table is cleared and they restart at 0.

    Run as plain Python (``py_func``, which reads the module's ``_STAMP_END`` at each
    row) with the end moved to 3: rows 0, 1, 2 take stamps 0, 1, 2, then row 3 takes
    stamp 0 again. Row 0 and row 3 are both 1, 2 (P = 2): had the slots of 1 and 2
    kept row 0's stamp, row 3 would find them taken by itself and count nothing; it
    must count 1 and 2 again, one id per partition. Rows 1 and 2 (7; 7, 7) and row
    4 (2, 2, 1, after the restart) count once each, so the wrong table would show.
    """
    kernel = getattr(SK.slice_pairs, "py_func", SK.slice_pairs)
    monkeypatch.setattr(SK, "_STAMP_END", 3)
    rows = [[1, 2], [7], [7, 7], [1, 2], [2, 2, 1]]
    ids = np.array([x for r in rows for x in r], np.int64)
    splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)[None, :]
    pairs = np.zeros(len(rows) * 2, np.int64)
    kernel(ids, splits, 1, 2, np.array([0, 1], np.int64), np.zeros(1, np.int64), np.array([10], np.int64),
           np.zeros(1, np.int64), 0, len(rows), 0, 1, pairs)
    assert pairs.reshape(len(rows), 2).tolist() == [[1, 1], [0, 1], [0, 1], [1, 1], [1, 1]]


def test_the_slot_hash_by_hand():
    """``_row_slot(x)``: bits 22..31 of ``((x ^ (x >> 32)) & 0xFFFFFFFF) * 0x5BD1E995`` (1540483477).

    Any slot function dedups correctly; this pins the documented one (its spread of
    consecutive ids is what keeps the probes short), worked out by hand:
    1 -> 1540483477 >> 22 = 367; 3 -> 4621450431 >> 22 = 1101, & 1023 = 77;
    10**9 -> 1540483477000000000 >> 22 = 367279881715 = 358671759 * 1024 + 499;
    2**32 + 3 -> folded 3 ^ 1 = 2 -> 3080966954 >> 22 = 734;
    2**32 - 1 -> folded 4294967295 -> 6616326152202884715 >> 22 = 1577455080080
    = 1540483476 * 1024 + 656.
    """
    slot_of = getattr(SK._row_slot, "py_func", SK._row_slot)
    assert [int(slot_of(x)) for x in (1, 3, 10**9, 2**32 + 3, 2**32 - 1)] == [367, 77, 499, 734, 656]


def test_ids_left_in_the_table_before_the_restart_are_new_after_it(monkeypatch):
    """The end moved to 3 (plain Python): rows 7 | 1 | 2 take stamps 0, 1, 2, the table is cleared,
    row 1 takes stamp 0 again and row 7, 2 stamp 1.

    Slots 522 (7), 367 (1) and 734 (2) still hold their ids after the clear; only their
    stamps are reset. Row 4 must count 7 and 2 (P = 2: partitions 1 and 0): had the
    clear stamped the slots with 1 instead of "free", row 4 (stamp 1) would find 7 and 2
    in their slots and count neither.
    """
    kernel = getattr(SK.slice_pairs, "py_func", SK.slice_pairs)
    monkeypatch.setattr(SK, "_STAMP_END", 3)
    rows = [[7], [1], [2], [1], [7, 2]]
    ids = np.array([x for r in rows for x in r], np.int64)
    splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)[None, :]
    pairs = np.zeros(len(rows) * 2, np.int64)
    kernel(ids, splits, 1, 2, np.array([0, 1], np.int64), np.zeros(1, np.int64), np.array([10], np.int64),
           np.zeros(1, np.int64), 0, len(rows), 0, 1, pairs)
    assert pairs.reshape(len(rows), 2).tolist() == [[0, 1], [0, 1], [1, 0], [0, 1], [1, 1]]


class _RecordingNumpy:
    """numpy, with the arrays that ``np.full`` and ``np.empty`` make kept in ``made`` (in call order)."""

    def __init__(self):
        self.made = []

    def __getattr__(self, name):
        return getattr(np, name)

    def full(self, *args, **kwargs):
        self.made.append(np.full(*args, **kwargs))
        return self.made[-1]

    def empty(self, *args, **kwargs):
        self.made.append(np.empty(*args, **kwargs))
        return self.made[-1]


def _table_after(monkeypatch, rows):
    """The stamps and ids of the table after a plain-Python call on ``rows`` (P = 2, vocabulary 10),
    with the shapes and dtypes of what the call allocated."""
    kernel = getattr(SK.slice_pairs, "py_func", SK.slice_pairs)
    recording = _RecordingNumpy()
    monkeypatch.setattr(SK, "np", recording)
    ids = np.array([x for r in rows for x in r], np.int64)
    splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)[None, :]
    pairs = np.zeros(len(rows) * 2, np.int64)
    kernel(ids, splits, 1, 2, np.array([0, 1], np.int64), np.zeros(1, np.int64), np.array([10], np.int64),
           np.zeros(1, np.int64), 0, len(rows), 0, 1, pairs)
    made = [(a.shape, a.dtype.name) for a in recording.made]
    stamp, held = recording.made[0], recording.made[1]
    return made, {int(h): (int(stamp[h]), int(held[h])) for h in np.flatnonzero(stamp != -1)}, stamp


def test_the_table_is_1024_slots_free_until_taken(monkeypatch):
    """One short row 5, 5: the table is 1024 int32 stamps (all -1, "free", but the one of
    slot 812) and 1024 int64 ids, 12 KiB as documented; the copy for long rows starts
    empty. 5 -> 7702417385 >> 22 = 1836, & 1023 = 812: stamp 0 (the first row), id 5.
    """
    made, taken, stamp = _table_after(monkeypatch, [[5, 5]])
    assert made == [((1024,), "int32"), ((1024,), "int64"), ((0,), "int64")]
    assert taken == {812: (0, 5)}
    assert np.count_nonzero(stamp == -1) == 1023


def test_the_table_is_cleared_when_the_stamps_reach_their_end_and_only_then(monkeypatch):
    """The end moved to 3. Rows 1, 2 | 7 | 7, 7 take stamps 0, 1, 2; after row 2 the
    stamps reach 3: every slot is made free (-1) and stamps start again at 0, so row
    5, 5 leaves slot 812 with stamp 0 and id 5, and nothing else taken. Clearing after
    every row, never, or to another value, or going on from another stamp, would leave
    a different table (the counts are the same: only the cost of the table differs).
    """
    monkeypatch.setattr(SK, "_STAMP_END", 3)
    made, taken, stamp = _table_after(monkeypatch, [[1, 2], [7], [7, 7], [5, 5]])
    assert taken == {812: (0, 5)}
    assert np.count_nonzero(stamp == -1) == 1023
    # without the end reached, the rows' own stamps stay: 1 and 2 at 367 and 734 (row 0),
    # 7 at 522 (10783384339 >> 22 = 2570, & 1023; rows 1 and 2, the last 2), 5 at 812 (row 3)
    monkeypatch.setattr(SK, "_STAMP_END", 5)
    made, taken, stamp = _table_after(monkeypatch, [[1, 2], [7], [7, 7], [5, 5]])
    assert taken == {367: (0, 1), 734: (0, 2), 522: (2, 7), 812: (3, 5)}
    assert np.count_nonzero(stamp == -1) == 1020


def test_the_stamps_fit_their_int32_table():
    """Rows take stamps 0, 1, ... up to ``_STAMP_END - 1`` before the table is cleared: the
    last one must fit an int32 (at most 2**31 - 1 = 2147483647) and the end must be reached
    counting up from 0 by one (a positive int)."""
    assert type(SK._STAMP_END) is int
    assert 0 < SK._STAMP_END <= 2147483648


def test_the_copy_for_long_rows_grows_only_for_a_longer_row(monkeypatch):
    """Long rows of 600 (at offset 0), 550, 600 and 513 ids, then a short one (3): the copy
    they are sorted in is made once after the table and its empty start, at 600 ids for
    the first row, and reused by the others (the second 600 included). Only the short
    row takes the table: 3 -> 4621450431 >> 22 = 1101, & 1023 = 77, with stamp 0. A long
    row taken by the table would make no copy (and one of over 1024 distinct ids would
    never find a free slot).
    """
    rows = [list(range(600)), list(range(550)), list(range(600, 1200)), list(range(513)), [3]]
    made, taken, stamp = _table_after(monkeypatch, rows)
    assert made == [((1024,), "int32"), ((1024,), "int64"), ((0,), "int64"), ((600,), "int64")]
    assert taken == {77: (0, 3)}


def test_colliding_ids_take_the_next_slots_wrapping_around(monkeypatch):
    """a, b, c (first slot the last, 1023) and d (first slot 0) in the row a, b, c, d, c:
    a takes 1023, b and c step on to 0 and 1 (from the last slot to the first), d finds
    0 and 1 taken and takes 2; the repeated c finds itself at 1. All with the row's stamp 0.
    """
    last = (1 << SK._SLOT_BITS) - 1
    a, b, c = _ids_in_slot(last, 3)
    (d,) = [x for x in _ids_in_slot(0, 3) if x < c][:1]
    made, taken, stamp = _table_after(monkeypatch, [[a, b, c, d, c]])
    assert taken == {1023: (0, a), 0: (0, b), 1: (0, c), 2: (0, d)}
