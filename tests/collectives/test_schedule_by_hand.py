"""Schedules built from explicit arrays, every column and statistic worked out by hand.

Survivors of the mutation run of scwork/collectives/schedule.py: the explicit
constructor (step compaction, default colours, the offsets of each step), indexing
from the end, byte ranges of uneven chunks, messages, link loads with two cores per
chip, conflicts, bytes sent per link class and the per-link matrix were only ever
compared with the compact schedules of the same module, never with values written out.

Link ids, as ``Network`` numbers them (each dimension, +1 direction then -1, then the
on-chip links chip by chip, core pairs in ``itertools.permutations`` order):

* ``Network.ring(4)``: 0: 0->1, 1: 1->2, 2: 2->3, 3: 3->0, 4: 0->3, 5: 1->0, 6: 2->1, 7: 3->2.
* ``Network.line(2, cores_per_chip=2)`` (node = 2 * chip + core): 0: chip 0 -> chip 1,
  1: chip 1 -> chip 0, 2: node 0->1, 3: node 1->0, 4: node 2->3, 5: node 3->2.
"""

from __future__ import annotations

import numpy as np
import pytest

from scwork.collectives import Network
from scwork.collectives.schedule import Schedule, Transfer
from scwork.errors import ConfigError

RING4 = Network.ring(4)
RING8 = Network.ring(8)
LINE2X2 = Network.line(2, cores_per_chip=2)


def _ring_schedule(**extra) -> Schedule:
    """Five transfers on a 4-ring, given out of step order, steps 7 and 2 (gaps to drop).

    10 elements of 4 bytes in 3 chunks: ``chunk_bounds(10, 3)`` = [0, 3, 6, 10]
    (c * 3 + c // 3), bytes [0, 12, 24, 40].

    ====  ====  ========  ======  =======  =====  =====
    in    step  src->dst  chunks  op       color  phase
    ====  ====  ========  ======  =======  =====  =====
    t0    7     0->1      [0,1)   combine  0      reduce_scatter
    t1    2     1->2      [1,3)   combine  2      reduce_scatter
    t2    7     3->0      [2,3)   copy     1      all_gather
    t3    2     2->1      [0,3)   copy     0      all_gather
    t4    2     1->2      [0,1)   combine  0      reduce_scatter
    ====  ====  ========  ======  =======  =====  =====

    Stable sort by step: t1, t3, t4 (step 2 -> 0), t0, t2 (step 7 -> 1).
    """
    kw = dict(name="by_hand", collective="all_reduce", num_chunks=3,
              step=[7, 2, 7, 2, 2], source=[0, 1, 3, 2, 1], destination=[1, 2, 0, 1, 2],
              start=[0, 1, 2, 0, 0], stop=[1, 3, 3, 3, 1], op=[0, 0, 1, 1, 0], color=[0, 2, 1, 0, 0],
              phase=[0, 0, 1, 1, 0], nbytes=40, itemsize=4)
    kw.update(extra)
    return Schedule(RING4, **kw)


def test_explicit_constructor_sorts_and_compacts_the_steps():
    s = _ring_schedule()
    assert s.num_steps == 2 and len(s) == 2
    assert s.num_transfers == 5
    assert s.num_colors == 3                  # largest colour 2, plus one
    assert s.num_elements == 10
    assert s.step.tolist() == [0, 0, 0, 1, 1]
    assert s.source.tolist() == [1, 2, 1, 0, 3]
    assert s.destination.tolist() == [2, 1, 2, 1, 0]
    assert s.start.tolist() == [1, 0, 0, 0, 2]
    assert s.stop.tolist() == [3, 3, 1, 1, 3]
    assert s.link.tolist() == [1, 6, 1, 0, 3]
    assert s.op.tolist() == [0, 1, 0, 0, 1]
    assert s.color.tolist() == [2, 0, 0, 0, 1]
    assert s.phase.tolist() == [0, 1, 0, 0, 1]
    assert s.origin.tolist() == [-1] * 5
    # bytes: [1,3) = 40 - 12, [0,3) = 40, [0,1) = 12, [0,1) = 12, [2,3) = 40 - 24
    assert s.bytes.tolist() == [28, 40, 12, 12, 16]
    assert s.transfers_per_step.tolist() == [3, 2]
    assert s.used_links.tolist() == [0, 1, 3, 6]
    assert s.element_bounds().tolist() == [0, 3, 6, 10]
    assert s.element_bounds(5).tolist() == [0, 1, 3, 5]     # c * 1 + (c * 2) // 3
    assert not s.compact and s.explicit() is s


def test_given_colour_count_and_group_size_are_kept():
    s = _ring_schedule(num_colors=5, group_size=2)
    assert s.num_colors == 5 and s.group_size == 2
    assert _ring_schedule().group_size == 4                 # default: every node
    one = Schedule(RING4, name="one", collective="all_gather", num_chunks=1, step=[3], source=[2],
                   destination=[3], start=[0], stop=[1], op=[1], color=[0], phase=[1])
    assert (one.num_steps, one.num_colors, one.step.tolist(), one.link.tolist()) == (1, 1, [0], [2])
    assert one.nbytes == 2**20 and one.itemsize == 4      # the documented defaults
    # one link used (2 -> 3, link 2): one column of link loads, the whole 1 MiB vector on it
    (_, _, nbytes, msgs, _, cols), = list(one.link_loads())
    assert (nbytes.tolist(), msgs.tolist(), cols) == ([[2**20]], [[True]], None)
    assert one.link_bytes().tolist() == [[0, 0, 2**20, 0, 0, 0, 0, 0]]


def test_steps_from_the_front_and_from_the_end():
    s = _ring_schedule()
    last = [Transfer(1, 0, 1, 0, (0, 1), (0, 12), 12, "combine", 0, "reduce_scatter", -1),
            Transfer(1, 3, 0, 3, (2, 3), (24, 40), 16, "copy", 1, "all_gather", -1)]
    first = [Transfer(0, 1, 2, 1, (1, 3), (12, 40), 28, "combine", 2, "reduce_scatter", -1),
             Transfer(0, 2, 1, 6, (0, 3), (0, 40), 40, "copy", 0, "all_gather", -1),
             Transfer(0, 1, 2, 1, (0, 1), (0, 12), 12, "combine", 0, "reduce_scatter", -1)]
    assert s[1] == last and s[-1] == last
    assert s[0] == first and s[-2] == first
    assert s.steps == [first, last] and list(s) == [first, last]
    assert s.step_slice(0) == slice(0, 3) and s.step_slice(-1) == slice(3, 5) and s.step_slice(1) == slice(3, 5)
    for bad in (2, -3):
        with pytest.raises(IndexError, match="out of range: the schedule has 2 steps"):
            s[bad]
        with pytest.raises(IndexError, match="out of range"):
            s.step_slice(bad)


def test_messages_group_transfers_of_one_step_source_and_destination():
    m = _ring_schedule().messages()
    # keys (step * 4 + src) * 4 + dst: t1 6, t3 9, t4 6, t0 17, t2 28 -> messages [6, 9, 17, 28]
    assert m["index"].tolist() == [0, 1, 0, 2, 3]
    assert m["step"].tolist() == [0, 0, 1, 1]
    assert m["source"].tolist() == [1, 2, 0, 3]
    assert m["destination"].tolist() == [2, 1, 1, 0]
    assert m["link"].tolist() == [1, 6, 0, 3]
    assert m["bytes"].tolist() == [28 + 12, 40, 12, 16]


def test_per_link_and_per_node_totals_on_a_ring():
    s = _ring_schedule()
    expected = np.zeros((2, 8))
    expected[0, 1] = 28 + 12                  # 1->2 carries t1 and t4
    expected[0, 6] = 40                       # 2->1
    expected[1, 0] = 12                       # 0->1
    expected[1, 3] = 16                       # 3->0
    assert s.link_bytes().tolist() == expected.tolist()
    assert s.bytes_sent().tolist() == [12, 40, 40, 16]
    assert s.bytes_sent("ici").tolist() == [12, 40, 40, 16]
    assert s.links_used() == {"ici": 4}
    assert s.conflicts() == [] and s.num_conflicts() == 0 and s.conflict_free
    (s0, s1, nbytes, msgs, largest, cols), = list(s.link_loads())
    # columns: used links [0, 1, 3, 6]
    assert (s0, s1, cols) == (0, 2, None)
    assert nbytes.tolist() == [[0, 40, 0, 40], [12, 0, 16, 0]]
    assert msgs.tolist() == [[False, True, False, True], [True, False, True, False]]
    assert msgs.dtype == bool                 # one core per chip: a flag per link, not a count
    assert largest.tolist() == nbytes.tolist()


def test_streamed_records_carry_the_bytes_of_uneven_chunks():
    s = _ring_schedule()
    batches = list(s.stream_records(with_phase=True))
    assert [(a, b) for a, b, _ in batches] == [(0, 2)]
    r = batches[0][2]
    assert r["step"].tolist() == [0, 0, 0, 1, 1]
    assert r["source"].tolist() == [1, 2, 1, 0, 3]
    assert r["destination"].tolist() == [2, 1, 2, 1, 0]
    assert r["u"].tolist() == [1, 3, 1, 0, 2]                 # positions in used links [0, 1, 3, 6]
    assert r["nbytes"].tolist() == [28, 40, 12, 12, 16]
    assert r["phase"].tolist() == [0, 1, 0, 0, 1]
    # a budget of 3 records: step 0 (3 records), then step 1 (2)
    assert [(a, b, len(r["step"])) for a, b, r in s.stream_records(budget=3)] == [(0, 1, 3), (1, 2, 2)]
    assert "phase" not in s.stream_records().__next__()[2]


def test_to_dataset_columns_and_attributes():
    ds = _ring_schedule().to_dataset()
    assert ds.sizes == {"transfer": 5}
    assert ds["transfer"].values.tolist() == [0, 1, 2, 3, 4]
    assert ds["byte_start"].values.tolist() == [12, 0, 0, 0, 24]
    assert ds["byte_stop"].values.tolist() == [40, 40, 12, 12, 40]
    assert ds["bytes"].values.tolist() == [28, 40, 12, 12, 16]
    assert ds["op"].values.tolist() == ["combine", "copy", "combine", "combine", "copy"]
    assert ds["phase"].values.tolist() == ["reduce_scatter", "all_gather", "reduce_scatter", "reduce_scatter",
                                           "all_gather"]
    assert ds["color"].values.tolist() == [2, 0, 0, 0, 1] and ds["color"].dtype == np.int64
    assert ds["link"].values.tolist() == [1, 6, 1, 0, 3]
    assert ds["shard_start"].attrs["units"] == "chunks" and ds["bytes"].attrs["units"] == "B"
    assert ds.attrs == {"name": "by_hand", "collective": "all_reduce", "network": RING4.name, "num_steps": 2,
                        "num_chunks": 3, "nbytes": 40, "itemsize": 4}


def test_with_size_keeps_the_transfers_and_changes_the_bytes():
    s = _ring_schedule()
    # 8 elements of 2 bytes: chunk_bounds(8, 3) = [0, 2, 5, 8] -> bytes [0, 4, 10, 16]
    t = s.with_size(16, itemsize=2)
    assert (t.nbytes, t.itemsize, t.num_elements) == (16, 2, 8)
    assert t.bytes.tolist() == [16 - 4, 16, 4, 4, 16 - 10]
    assert (s.nbytes, s.itemsize) == (40, 4)                # the original is untouched
    u = s.with_size(80)                                     # itemsize kept: 20 elements, bounds [0, 6, 13, 20]
    assert u.itemsize == 4 and u.bytes.tolist() == [(20 - 6) * 4, 80, 24, 24, (20 - 13) * 4]


def _two_core_schedule() -> Schedule:
    """Two chips of two cores (16 elements of 4 bytes, 4 chunks of 16 bytes).

    Step 0: node 0->2 [0,1) and [3,4) (core pair (0, 0), one message of 32 B) and node
    1->3 [1,3) (core pair (1, 1), 32 B) share the ICI link chip 0 -> chip 1 (link 0):
    two messages, 64 B, the largest 32 B; node 2->3 [0,4) is on chip 1 (link 4, 64 B).
    Step 1: node 3->1 [2,4) on chip 1 -> chip 0 (link 1, 32 B).
    """
    return Schedule(LINE2X2, name="two_core", collective="all_reduce", num_chunks=4,
                    step=[0, 0, 0, 0, 1], source=[0, 1, 0, 2, 3], destination=[2, 3, 2, 3, 1],
                    start=[0, 1, 3, 0, 2], stop=[1, 3, 4, 4, 4], op=[0] * 5, color=[0] * 5, phase=[0] * 5,
                    nbytes=64, itemsize=4)


def test_two_cores_per_chip_count_messages_per_core_pair():
    s = _two_core_schedule()
    assert s.link.tolist() == [0, 0, 0, 4, 1]
    assert s.used_links.tolist() == [0, 1, 4]
    (s0, s1, nbytes, msgs, largest, cols), = list(s.link_loads())
    assert (s0, s1, cols) == (0, 2, None)
    assert nbytes.tolist() == [[64, 0, 64], [0, 32, 0]]
    assert msgs.tolist() == [[2, 0, 1], [0, 1, 0]]
    assert largest.tolist() == [[32, 0, 64], [0, 32, 0]]
    assert s.conflicts() == [(0, 0, 2)]
    assert s.num_conflicts() == 1 and not s.conflict_free
    # one step per batch once a batch may hold only 3 links x 4 core pairs = 12 cells
    assert [(a, b) for a, b, *_ in s.link_loads(budget=12)] == [(0, 1), (1, 2)]
    m = s.messages()
    assert m["index"].tolist() == [0, 1, 0, 2, 3]
    assert m["bytes"].tolist() == [32, 32, 64, 32]


def test_two_cores_per_chip_totals_by_link_class():
    s = _two_core_schedule()
    assert s.bytes_sent().tolist() == [32, 32, 64, 32]
    assert s.bytes_sent("ici").tolist() == [32, 32, 0, 32]
    assert s.bytes_sent("on_chip").tolist() == [0, 0, 64, 0]
    assert s.links_used() == {"ici": 2, "on_chip": 1}
    expected = np.zeros((2, 6))
    expected[0, 0], expected[0, 4], expected[1, 1] = 64, 64, 32
    assert s.link_bytes().tolist() == expected.tolist()


@pytest.mark.parametrize("bad, match", [
    (dict(step=[-1, 2, 7, 2, 2]), "steps must be >= 0"),
    (dict(start=[0, 1, 2, 0, -1]), r"transfer 4 has chunk range \[-1, 1\)"),
    (dict(stop=[1, 4, 3, 3, 1]), r"transfer 1 has chunk range \[1, 4\) outside \[0, 3\)"),
    (dict(stop=[1, 3, 2, 3, 1]), r"transfer 2 has chunk range \[2, 2\)"),
    (dict(start=[0, 1, 2, 2, 0], stop=[1, 3, 3, 1, 1]), r"transfer 3 has chunk range \[2, 1\)"),
    (dict(op=[0, 0, 2, 1, 0]), "op codes must index"),
    (dict(op=[0, -1, 1, 1, 0]), "op codes must index"),
    (dict(op=[0, 0, 1, 1, 5]), "op codes must index"),
    (dict(phase=[0, 4, 1, 1, 0]), "phase codes"),
    (dict(phase=[0, 0, 3, 1, 0]), "phase codes"),
    (dict(phase=[0, 0, -1, 1, 0]), "phase codes"),
    (dict(color=[0, 0, 0, 0]), "same length"),
    (dict(origin=[-1, -1]), "same length"),
    (dict(op=[0, 0, 1, 1, 0, 0]), "same length"),        # one too many
    (dict(collective="broadcast"), "collective must be one of"),
    (dict(num_chunks=0), "num_chunks must be >= 1"),
])
def test_bad_explicit_arrays_are_config_errors(bad, match):
    with pytest.raises(ConfigError, match=match):
        _ring_schedule(**bad)


def test_boundary_chunk_ranges_and_codes_are_accepted():
    # [0, 3) is the whole vector (stop == num_chunks), op 1 and phase 2 are the last codes
    s = _ring_schedule(stop=[1, 3, 3, 3, 1], op=[0, 1, 1, 1, 0], phase=[0, 2, 1, 1, 0])
    assert s.stop.tolist() == [3, 3, 1, 1, 3]
    assert s.phase.tolist() == [2, 1, 0, 0, 1]


# -- compact schedules (step programs): the same statistics without writing the transfers out ----------
def _ring4_link_bytes() -> list[list[int]]:
    """Bytes per (step, link) of the bidirectional ring all-reduce on 4 chips, 10 f32 per node.

    8 chunks (4 per direction): ``chunk_bounds(10, 8)`` = c + 2c // 8 = [0, 1, 2, 3, 5, 6,
    7, 8, 10], so chunks 3 and 7 hold 2 elements (8 B) and the others 1 (4 B). Clockwise
    (links 0-3, node i -> i+1 on link i) node i sends chunk (i - t - 1) % 4 in
    reduce-scatter step t and chunk (i - t) % 4 in all-gather step t; counter-clockwise
    (node i -> i-1 on link 4 + i) chunk 4 + (2 - i - t) % 4, then 4 + (3 - i - t) % 4.
    The 8-byte chunk (index 3 of its direction) therefore crosses link t and link
    4 + (3 - t) % 4 in reduce-scatter step t, link (t + 3) % 4 and 4 + (-t) % 4 in
    all-gather step t.
    """
    rows = []
    for t in range(3):
        row = [4] * 8
        row[t], row[4 + (3 - t) % 4] = 8, 8
        rows.append(row)
    for t in range(3):
        row = [4] * 8
        row[(t + 3) % 4], row[4 + (-t) % 4] = 8, 8
        rows.append(row)
    return rows


def test_compact_ring_all_reduce_link_loads_by_hand():
    from scwork.collectives import ring_all_reduce

    s = ring_all_reduce(RING4, bidirectional=True, nbytes=40, itemsize=4)
    assert s.compact and s.num_chunks == 8 and s.num_steps == 6
    expected = _ring4_link_bytes()
    assert expected[0] == [8, 4, 4, 4, 4, 4, 4, 8] and expected[3] == [4, 4, 4, 8, 8, 4, 4, 4]
    assert s.link_bytes().tolist() == expected
    assert s.transfers_per_step.tolist() == [8] * 6 and s.num_transfers == 48
    # every node sends on its two outgoing links: 3 x 4 + 8 on one, 2 x 4 + ... = 60 B in all,
    # 2 (N - 1) / N of the 40-byte vector
    assert s.bytes_sent().tolist() == [60, 60, 60, 60]
    assert s.links_used() == {"ici": 8}
    assert s.num_conflicts() == 0 and s.conflicts() == []
    # the program lists the links clockwise, then counter-clockwise from node 3: the columns of link_loads
    assert s.used_links.tolist() == [0, 1, 2, 3, 7, 6, 5, 4]
    by_column = [[row[u] for u in (0, 1, 2, 3, 7, 6, 5, 4)] for row in expected]
    # a budget of 16 records (2 steps of 8): three batches, all 8 links as columns
    batches = list(s.link_loads(budget=16))
    assert [(a, b, cols) for a, b, _, _, _, cols in batches] == [(0, 2, None), (2, 4, None), (4, 6, None)]
    assert [nb.tolist() for _, _, nb, _, _, _ in batches] == [by_column[0:2], by_column[2:4], by_column[4:6]]
    assert all(m.all() for _, _, _, m, _, _ in batches)
    # a budget of 24 records: batches of 3 steps
    assert [(a, b) for a, b, *_ in s.link_loads(budget=24)] == [(0, 3), (3, 6)]
    assert s.compact                          # none of this wrote the transfers out


def test_compact_steps_from_the_end_without_writing_out():
    from scwork.collectives import ring_all_reduce

    s = ring_all_reduce(RING4, bidirectional=True, nbytes=40, itemsize=4)
    last = s[-1]
    assert s.compact
    # all-gather step 2: clockwise node i sends chunk (i - 2) % 4, counter-clockwise 4 + (1 - i) % 4
    assert sorted((t.source, t.destination, t.shard, t.bytes, t.op, t.phase, t.step) for t in last) == sorted(
        [(i, (i + 1) % 4, ((i - 2) % 4, (i - 2) % 4 + 1), 8 if (i - 2) % 4 == 3 else 4, "copy", "all_gather", 5)
         for i in range(4)]
        + [(i, (i - 1) % 4, (4 + (1 - i) % 4, 5 + (1 - i) % 4), 8 if (1 - i) % 4 == 3 else 4, "copy",
            "all_gather", 5) for i in range(4)])
    assert s[-6] == s[0] and s[-1] == s[5]
    for bad in (6, 7, -7):
        with pytest.raises(IndexError, match="out of range: the schedule has 6 steps"):
            s[bad]
    assert s.compact
    # the explicit columns, once written, give the same steps
    first = s[0]
    assert s.explicit() is s and not s.compact
    assert s[0] == first and s[-1] == last
    assert s.step.tolist() == [t for t in range(6) for _ in range(8)]
    assert s.bytes.sum() == 4 * 60


def test_compact_single_path_loads_keep_only_the_links_each_batch_uses():
    from scwork.collectives import single_path

    # line of 4: 0->1, 1->2, 2->3 (links 0, 1, 2), then back 3->2, 2->1, 1->0 (links 5, 4, 3); one chunk of 40 B
    s = single_path(Network.line(4), nbytes=40, itemsize=4)
    assert s.used_links.tolist() == [0, 1, 2, 3, 4, 5]
    route = [0, 1, 2, 5, 4, 3]
    expected = np.zeros((6, 6))
    expected[np.arange(6), route] = 40
    assert s.link_bytes().tolist() == expected.tolist()
    # one record per step: a batch of steps [a, e) may hold (e - a) x (records) <= budget = 4,
    # so two steps per batch, each keeping only the two links it uses as columns
    batches = list(s.link_loads(budget=4))
    assert [(a, b, cols.tolist()) for a, b, _, _, _, cols in batches] == [(0, 2, [0, 1]), (2, 4, [2, 5]),
                                                                         (4, 6, [3, 4])]
    assert [nb.tolist() for _, _, nb, _, _, _ in batches] == [[[40, 0], [0, 40]], [[40, 0], [0, 40]],
                                                              [[0, 40], [40, 0]]]
    assert [m.tolist() for _, _, _, m, _, _ in batches] == [[[True, False], [False, True]]] * 2 + [
        [[False, True], [True, False]]]
    assert s.bytes_sent().tolist() == [40, 80, 80, 40]
    assert s.links_used() == {"ici": 6}
    assert s.compact


# -- limits at their boundaries ---------------------------------------------------------------------------
def test_size_limits_accept_the_limit_and_refuse_one_more():
    from scwork.collectives.schedule import MAX_NBYTES

    s = _ring_schedule()
    assert s.with_size(MAX_NBYTES, itemsize=MAX_NBYTES).nbytes == MAX_NBYTES
    assert s.with_size(0).num_elements == 0
    with pytest.raises(ConfigError, match=r"itemsize .* is more than scwork.collectives.schedule.MAX_NBYTES"):
        s.with_size(8, itemsize=MAX_NBYTES + 1)
    with pytest.raises(ConfigError, match=r"bytes per node is more than the limit"):
        s.with_size(MAX_NBYTES + 1)
    with pytest.raises(ConfigError, match="itemsize"):
        s.with_size(8, itemsize=0)
    with pytest.raises(ConfigError, match="nbytes"):
        s.with_size(-1)


def test_explicit_limit_counts_the_transfers(monkeypatch):
    from scwork.collectives import ring_all_reduce
    from scwork.collectives import schedule as schedule_module

    # 6 steps x 8 transfers = 48
    monkeypatch.setattr(schedule_module, "MAX_EXPLICIT_TRANSFERS", 48)
    assert ring_all_reduce(RING4, nbytes=40).explicit().num_transfers == 48
    monkeypatch.setattr(schedule_module, "MAX_EXPLICIT_TRANSFERS", 47)
    with pytest.raises(ConfigError, match=r"has 48 transfers; .*MAX_EXPLICIT_TRANSFERS=47"):
        ring_all_reduce(RING4, nbytes=40).explicit()


def test_link_matrix_limit_counts_steps_times_links(monkeypatch):
    from scwork.collectives import schedule as schedule_module

    s = _ring_schedule()                      # 2 steps x 8 links = 16 cells
    monkeypatch.setattr(schedule_module, "MAX_EXPLICIT_TRANSFERS", 16)
    assert s.link_bytes().shape == (2, 8)
    monkeypatch.setattr(schedule_module, "MAX_EXPLICIT_TRANSFERS", 15)
    with pytest.raises(ConfigError, match=r"has 2 x 8 = 16 cells, more than the limit of 15"):
        s.link_bytes()


def test_listed_conflicts_limit(monkeypatch):
    from scwork.collectives import schedule as schedule_module

    s = _two_core_schedule()                  # one conflict
    monkeypatch.setattr(schedule_module, "MAX_LISTED_CONFLICTS", 1)
    assert s.conflicts() == [(0, 0, 2)]
    monkeypatch.setattr(schedule_module, "MAX_LISTED_CONFLICTS", 0)
    with pytest.raises(ConfigError, match="more than MAX_LISTED_CONFLICTS=0 link conflicts"):
        s.conflicts()
    assert s.num_conflicts() == 1             # counting needs no list


def test_stream_limit_counts_the_records(monkeypatch):
    from scwork.collectives import ring_all_reduce
    from scwork.collectives import schedule as schedule_module

    s = ring_all_reduce(RING4, nbytes=40)     # 48 records (one per message)
    monkeypatch.setattr(schedule_module, "MAX_STREAM_RECORDS", 48)
    assert sum(len(r["step"]) for _, _, r in s.stream_records()) == 48
    assert s.link_bytes().sum() == 4 * 60
    assert s.bytes_sent().sum() == 4 * 60
    monkeypatch.setattr(schedule_module, "MAX_STREAM_RECORDS", 47)
    for what in (lambda: list(s.stream_records()), s.link_bytes, s.bytes_sent, s.links_used):
        with pytest.raises(ConfigError, match="needs 48 transfer records, more than the limit of 47"):
            what()


def test_two_core_stream_limit_counts_steps_links_and_core_pairs(monkeypatch):
    from scwork.collectives import schedule as schedule_module

    s = _two_core_schedule()                  # 2 steps x 3 used links x 4 core pairs = 24 cells
    monkeypatch.setattr(schedule_module, "MAX_STREAM_RECORDS", 24)
    assert s.num_conflicts() == 1
    monkeypatch.setattr(schedule_module, "MAX_STREAM_RECORDS", 23)
    with pytest.raises(ConfigError, match=r"\(2 steps x 3 links x 4 core pairs\) needs 24 transfer records"):
        s.num_conflicts()


def test_repr_and_html_summary():
    import re

    s = _ring_schedule()
    assert repr(s) == "Schedule('by_hand', all_reduce, 4 ring: 2 steps, 5 transfers, 3 chunks)"

    def fields(schedule):
        return re.findall(r"<td[^>]*>([^<]*)</td><td[^>]*>([^<]*)</td>", schedule._repr_html_())

    assert fields(s) == [("algorithm", "by_hand"), ("collective", "all_reduce"), ("network", "4 ring"),
                         ("nodes", "4"), ("steps", "2"), ("transfers", "5"), ("chunks", "3"), ("colors", "3"),
                         ("bytes per node", "40"), ("link conflicts", "0"), ("links used", "ici: 4")]
    assert "<caption style='text-align:left'>Schedule by_hand</caption>" in s._repr_html_()
    two = dict(fields(_two_core_schedule()))
    assert (two["link conflicts"], two["links used"], two["colors"]) == ("1", "ici: 2, on_chip: 1", "1")


def test_chunk_count_limit_is_named_in_the_error():
    from scwork.collectives import chunk_bounds

    with pytest.raises(ConfigError, match=r"chunk_bounds\(10, 67,108,865\): at most 67,108,864 chunks"):
        chunk_bounds(10, 2**26 + 1)
    with pytest.raises(ConfigError, match="2\\*\\*63 - 1 elements"):
        chunk_bounds(2**63, 2)
    assert chunk_bounds(2**63 - 1, 1).tolist() == [0, 2**63 - 1]


# -- the explicit builder the frozen reference of the algorithms uses -------------------------------------
def test_builder_broadcasts_drops_empty_ranges_and_fills_defaults():
    from scwork.collectives.schedule import _Builder

    b = _Builder(RING4, 4)
    # one call, four transfers by broadcasting: node i -> i + 1 at step 3, chunks [i, i + 1),
    # except node 2 whose range [2, 2) is empty and dropped
    b.add(3, [0, 1, 2, 3], [1, 2, 3, 0], [0, 1, 2, 3], [1, 2, 2, 4], op=0)
    b.add(5, 1, 0, 0, 4, op=1, color=1, phase=1)
    b.add(4, 3, 2, 2, 2, op=1)                # all empty: adds nothing
    b.add(4, 3, 2, 3, 1, op=1)                # reversed: dropped too
    s = b.build(name="built", collective="all_reduce")
    assert s.num_steps == 2 and s.num_transfers == 4
    assert s.source.tolist() == [0, 1, 3, 1] and s.destination.tolist() == [1, 2, 0, 0]
    assert s.start.tolist() == [0, 1, 3, 0] and s.stop.tolist() == [1, 2, 4, 4]
    assert s.op.tolist() == [0, 0, 0, 1]
    assert s.color.tolist() == [0, 0, 0, 1] and s.num_colors == 2
    assert s.phase.tolist() == [0, 0, 0, 1]   # default phase 0: reduce_scatter
    assert s.origin.tolist() == [-1] * 4
    empty = _Builder(RING4, 2).build(name="empty", collective="all_gather")
    assert (empty.num_steps, empty.num_transfers, empty.num_colors) == (0, 0, 1)
    assert [len(c) for c in _Builder(RING4, 2).columns()] == [0] * 9


def test_builder_coalesces_adjacent_ranges_of_one_message():
    from scwork.collectives.schedule import _Builder

    b = _Builder(RING4, 6)
    b.add(0, 0, 1, [4, 0, 1], [5, 1, 3], op=0)     # [0,1) + [1,3) merge; [4,5) is not adjacent
    b.add(0, 0, 1, 3, 4, op=1)                      # adjacent to [1,3) but a copy: kept apart
    b.add(0, 0, 1, 5, 6, op=0, color=1)            # adjacent to [4,5) but another colour: kept apart
    b.add(1, 0, 1, 3, 4, op=0)                      # adjacent to [1,3) but another step: kept apart
    b.add(0, 1, 2, 3, 6, op=0)                      # another message
    s = b.build(coalesce=True, name="coalesced", collective="all_reduce")
    rows = sorted(zip(s.step.tolist(), s.source.tolist(), s.destination.tolist(), s.start.tolist(),
                      s.stop.tolist(), s.op.tolist(), s.color.tolist()))
    assert rows == [(0, 0, 1, 0, 3, 0, 0), (0, 0, 1, 3, 4, 1, 0), (0, 0, 1, 4, 5, 0, 0), (0, 0, 1, 5, 6, 0, 1),
                    (0, 1, 2, 3, 6, 0, 0), (1, 0, 1, 3, 4, 0, 0)]
    assert b.build(name="kept", collective="all_reduce").num_transfers == 7


def test_compact_pincer_loads_in_sub_batches_by_hand():
    from scwork.collectives import pincer

    # Ring of 8 (A..H = 0..7): link i is i -> i+1, link 8 + i is i -> i-1. The pincer sends the whole
    # 40-byte vector along two chains that meet: B->C->D->E (links 1, 2, 3) and A->H->G->F (links 8,
    # 15, 14), E and F exchange (links 4 and 13), then back: E->D, F->G (12, 5), D->C, G->H (11, 6),
    # C->B, H->A (10, 7). Two records per step, 16 links: few enough to keep only the links used.
    s = pincer(RING8, nbytes=40, itemsize=4)
    links = [[1, 8], [2, 15], [3, 14], [4, 13], [5, 12], [6, 11], [7, 10]]
    # budget 1: every step alone (its two records exceed the budget, so the sub-batch is one step)
    one = list(s.link_loads(budget=1))
    assert [(a, b, cols.tolist()) for a, b, _, _, _, cols in one] == [(t, t + 1, links[t]) for t in range(7)]
    assert all(nb.tolist() == [[40, 40]] and m.tolist() == [[True, True]] for _, _, nb, m, _, _ in one)
    # budget 8: batches of 4 steps (8 records); a sub-batch of e - a steps keeps (e - a) x records <= 8,
    # 2 x 4 = 8 fits, 3 x 6 does not: sub-batches of two steps, the last one alone
    eight = list(s.link_loads(budget=8))
    assert [(a, b, cols.tolist()) for a, b, _, _, _, cols in eight] == [
        (0, 2, [1, 2, 8, 15]), (2, 4, [3, 4, 13, 14]), (4, 6, [5, 6, 11, 12]), (6, 7, [7, 10])]
    assert eight[0][2].tolist() == [[40, 0, 40, 0], [0, 40, 0, 40]]
    assert eight[1][2].tolist() == [[40, 0, 0, 40], [0, 40, 40, 0]]
    assert eight[2][2].tolist() == [[40, 0, 0, 40], [0, 40, 40, 0]]
    assert eight[3][2].tolist() == [[40, 40]]
    # budget 9: the same cuts (3 steps would need 3 x 6 = 18)
    assert [(a, b) for a, b, *_ in s.link_loads(budget=9)] == [(0, 2), (2, 4), (4, 6), (6, 7)]
    # A and B send once (they start the chains; B's copy comes back to it last), every other node twice
    assert s.bytes_sent().tolist() == [40, 40, 80, 80, 80, 80, 80, 80]
    assert s.links_used() == {"ici": 14}      # all but A->B (0) and B->A (9)


def test_compact_single_path_one_step_per_batch():
    from scwork.collectives import single_path

    s = single_path(Network.line(4), nbytes=40, itemsize=4)
    got = [(a, b, cols.tolist(), nb.tolist()) for a, b, nb, _, _, cols in s.link_loads(budget=1)]
    assert got == [(t, t + 1, [u], [[40]]) for t, u in enumerate([0, 1, 2, 5, 4, 3])]


def test_conflict_list_stops_at_its_documented_limit():
    # Ring of 4 chips of 2 cores: in every step both cores of chip c send to the same core of chip c + 1,
    # two messages on each of the 4 clockwise links: 4 conflicts per step. 2**18 steps give 2**20
    # conflicts, the limit; one more step with one conflict is one too many to list.
    net = Network.ring(4, cores_per_chip=2)
    steps = 2**18
    chip = np.arange(4)
    src = np.concatenate([2 * chip, 2 * chip + 1])
    dst = np.concatenate([2 * ((chip + 1) % 4), 2 * ((chip + 1) % 4) + 1])
    source = np.concatenate([np.tile(src, steps), [0, 1]])
    destination = np.concatenate([np.tile(dst, steps), [2, 3]])
    step = np.concatenate([np.repeat(np.arange(steps), 8), [steps, steps]])
    zero = np.zeros(len(step), np.int64)
    s = Schedule(net, name="crowded", collective="all_reduce", num_chunks=1, step=step, source=source,
                 destination=destination, start=zero, stop=zero + 1, op=zero, color=zero, phase=zero)
    assert s.num_conflicts() == 2**20 + 1
    with pytest.raises(ConfigError, match=r"more than MAX_LISTED_CONFLICTS=1,048,576 link conflicts to list"):
        s.conflicts()


def test_compact_pincer_on_four_chips_in_dense_batches_of_one_step():
    from scwork.collectives import pincer

    # Ring of 4 (A..D = 0..3, link i: i -> i+1, link 4 + i: i -> i-1): B->C (1) and A->D (4), the
    # exchange C->D, D->C (2, 7), then C->B, D->A (6, 3); 40 bytes each. Two records per step on 8
    # links is not few (2 x 4 >= 8): dense batches over every link. A budget of 4 records takes two
    # steps from the program, but a (steps, 8 links) array of at most 4 cells holds one step at a time.
    s = pincer(RING4, nbytes=40, itemsize=4)
    assert s.used_links.tolist() == list(range(8))
    got = [(a, b, cols, nb.tolist()) for a, b, nb, _, _, cols in s.link_loads(budget=4)]
    assert got == [(0, 1, None, [[0, 40, 0, 0, 40, 0, 0, 0]]), (1, 2, None, [[0, 0, 40, 0, 0, 0, 0, 40]]),
                   (2, 3, None, [[0, 0, 0, 40, 0, 0, 40, 0]])]
    # a budget of 16: the program's batch holds all 6 records, the array two steps of 8 links
    assert [(a, b) for a, b, *_ in s.link_loads(budget=16)] == [(0, 2), (2, 3)]
    assert [(a, b) for a, b, *_ in s.link_loads(budget=24)] == [(0, 3)]


def test_conflicts_in_a_later_batch_keep_their_step():
    # As in the limit test: 4 conflicts per step on links 0..3. Batches hold at most 2**19 cells of
    # (steps, 4 links x 4 core pairs): 32,768 steps, so step 32,768 is the first of the second batch.
    net = Network.ring(4, cores_per_chip=2)
    steps = 2**15 + 1
    chip = np.arange(4)
    src = np.concatenate([2 * chip, 2 * chip + 1])
    dst = np.concatenate([2 * ((chip + 1) % 4), 2 * ((chip + 1) % 4) + 1])
    zero = np.zeros(8 * steps, np.int64)
    s = Schedule(net, name="crowded", collective="all_reduce", num_chunks=1, step=np.repeat(np.arange(steps), 8),
                 source=np.tile(src, steps), destination=np.tile(dst, steps), start=zero, stop=zero + 1, op=zero,
                 color=zero, phase=zero)
    assert [(a, b) for a, b, *_ in s.link_loads()] == [(0, 2**15), (2**15, 2**15 + 1)]
    out = s.conflicts()
    assert len(out) == 4 * steps
    assert out[:4] == [(0, 0, 2), (0, 1, 2), (0, 2, 2), (0, 3, 2)]
    assert out[-4:] == [(2**15, 0, 2), (2**15, 1, 2), (2**15, 2, 2), (2**15, 3, 2)]


def test_stream_limit_is_the_documented_one():
    from scwork.collectives import ring_all_reduce

    # a one-way ring all-reduce of n chips: 2 (n - 1) steps of n transfers; n = 23,171 gives
    # 2 x 23,170 x 23,171 = 1,073,744,140 records, just over 2**30 = 1,073,741,824
    s = ring_all_reduce(Network.ring(23171, bidirectional=False), bidirectional=False)
    assert s.num_steps == 2 * 23170 and s.num_transfers == 1_073_744_140
    with pytest.raises(ConfigError, match=r"needs 1,073,744,140 transfer records, more than the limit of "
                                          r"1,073,741,824"):
        s.bytes_sent()


def test_explicit_link_loads_in_batches_of_steps():
    s = _ring_schedule()                      # 4 used links [0, 1, 3, 6], 3 + 2 records
    # a budget of 8 cells holds 8 // 4 = 2 steps of 4 links; 7 holds one
    assert [(a, b) for a, b, *_ in s.link_loads(budget=8)] == [(0, 2)]
    got = [(a, b, nb.tolist(), m.tolist(), cols) for a, b, nb, m, _, cols in s.link_loads(budget=7)]
    assert got == [(0, 1, [[0, 40, 0, 40]], [[False, True, False, True]], None),
                   (1, 2, [[12, 0, 16, 0]], [[True, False, True, False]], None)]
    two = _two_core_schedule()               # 3 used links x 4 core pairs = 12 cells per step
    got = [(a, b, nb.tolist(), m.tolist(), big.tolist()) for a, b, nb, m, big, _ in two.link_loads(budget=12)]
    assert got == [(0, 1, [[64, 0, 64]], [[2, 0, 1]], [[32, 0, 64]]),
                   (1, 2, [[0, 32, 0]], [[0, 1, 0]], [[0, 32, 0]])]
    assert [(a, b) for a, b, *_ in two.link_loads(budget=24)] == [(0, 2)]


def test_a_single_chip_has_nothing_to_send():
    from scwork.collectives import single_path

    s = single_path(Network.line(1), nbytes=40, itemsize=4)
    assert s.compact and (s.num_steps, s.num_transfers) == (0, 0)
    assert s.transfers_per_step.tolist() == []
    assert s.bytes_sent().tolist() == [0.0] and s.links_used() == {}
    assert s.conflicts() == [] and s.link_bytes().shape == (0, 0)
    with pytest.raises(IndexError, match="the schedule has 0 steps"):
        s[0]
    assert s.explicit() is s and not s.compact
    assert s.link.tolist() == [] and s.step.tolist() == [] and s.steps == []
    assert s.transfers_per_step.tolist() == []
    assert s.to_dataset().sizes == {"transfer": 0}
    with pytest.raises(IndexError, match="the schedule has 0 steps"):
        s.step_slice(0)


def test_two_messages_into_one_core_are_two_messages():
    # Both cores of chip 0 send to core 0 of chip 1 (nodes 0 -> 2 and 1 -> 2) over link 0 in one step:
    # core pairs (0, 0) and (1, 0), two messages of 16 and 32 bytes (4 chunks of 16 B).
    s = Schedule(LINE2X2, name="into_one_core", collective="all_reduce", num_chunks=4, step=[0, 0],
                 source=[0, 1], destination=[2, 2], start=[0, 1], stop=[1, 3], op=[0, 0], color=[0, 0],
                 phase=[0, 0], nbytes=64, itemsize=4)
    (_, _, nbytes, msgs, largest, _), = list(s.link_loads())
    assert (nbytes.tolist(), msgs.tolist(), largest.tolist()) == ([[48]], [[2]], [[32]])
    assert s.conflicts() == [(0, 0, 2)]


def test_compact_all_to_all_streams_one_record_per_message():
    from scwork.collectives import all_to_all

    # Ring of 4, 64 bytes = 4 blocks of 16 B, block j for node j. Step 0: node i sends the blocks of
    # i + 1 and i + 2 clockwise to i + 1 (two transfers, one 32-byte message) and the block of i - 1
    # counter-clockwise (16 B); step 1: node i + 1 passes the block of i + 2 on (16 B).
    s = all_to_all(RING4, nbytes=64, itemsize=4)
    assert (s.num_steps, s.num_transfers) == (2, 16)
    records = [(int(st), int(a), int(b), int(n)) for _, _, r in s.stream_records()
               for st, a, b, n in zip(r["step"], r["source"], r["destination"], r["nbytes"])]
    assert sorted(records) == sorted([(0, i, (i + 1) % 4, 32) for i in range(4)]
                                     + [(0, i, (i - 1) % 4, 16) for i in range(4)]
                                     + [(1, i, (i + 1) % 4, 16) for i in range(4)])
    assert s.bytes_sent().tolist() == [64, 64, 64, 64]
    # messages(), ordered by step, source, destination: in step 0 every node sends two
    m = s.messages()
    assert list(zip(m["step"].tolist(), m["source"].tolist(), m["destination"].tolist(), m["bytes"].tolist())) == [
        (0, 0, 1, 32), (0, 0, 3, 16), (0, 1, 0, 16), (0, 1, 2, 32), (0, 2, 1, 16), (0, 2, 3, 32), (0, 3, 0, 32),
        (0, 3, 2, 16), (1, 0, 1, 16), (1, 1, 2, 16), (1, 2, 3, 16), (1, 3, 0, 16)]
    assert m["link"].tolist() == [0, 4, 5, 1, 6, 2, 3, 7, 0, 1, 2, 3]


def test_builder_does_not_merge_overlapping_ranges():
    from scwork.collectives.schedule import _Builder

    # [0, 2) and [1, 3) of one message overlap, they are not adjacent: both stay (a merge would
    # carry chunk 1 once instead of twice)
    b = _Builder(RING4, 4)
    b.add(0, 0, 1, [0, 1], [2, 3], op=0)
    s = b.build(coalesce=True, name="overlap", collective="all_reduce")
    assert sorted(zip(s.start.tolist(), s.stop.tolist())) == [(0, 2), (1, 3)]


def test_compact_pincer_on_five_chips_keeps_only_the_links_it_uses():
    from scwork.collectives import pincer

    # Ring of 5 (A..E = 0..4, link i: i -> i+1, link 5 + i: i -> i-1): B->C (1) and A->E (5), then
    # C->D (2) and E->D (9) meet on D, which sends back D->C (8) and D->E (3), then C->B (7), E->A (4).
    # 8 records in 4 steps over 10 links: 8 x 4 = 32 < 4 x 10 = 40, few enough for a sparse batch.
    s = pincer(Network.ring(5), nbytes=40, itemsize=4)
    (a, b, nbytes, msgs, largest, cols), = list(s.link_loads())
    assert (a, b, cols.tolist()) == (0, 4, [1, 2, 3, 4, 5, 7, 8, 9])
    assert nbytes.tolist() == [[40, 0, 0, 0, 40, 0, 0, 0], [0, 40, 0, 0, 0, 0, 0, 40],
                               [0, 0, 40, 0, 0, 0, 40, 0], [0, 0, 0, 40, 0, 40, 0, 0]]
    assert msgs.tolist() == (nbytes > 0).tolist() and largest.tolist() == nbytes.tolist()


def test_one_step_schedule_indexed_from_the_end():
    # One step: s[-1] is step 0 (-1 % 1 == 0), its slice the one transfer.
    one = Schedule(RING4, name="one", collective="all_gather", num_chunks=1, step=[3], source=[2],
                   destination=[3], start=[0], stop=[1], op=[1], color=[0], phase=[1])
    assert one.step_slice(-1) == slice(0, 1) == one.step_slice(0)
    assert one[-1] == one[0] and len(one[-1]) == 1


def test_link_loads_of_several_steps_on_one_link():
    # Steps 0 and 1 both send 2 -> 3 (link 2), chunks [0, 1) then [1, 2) of 2 chunks of a
    # 1 MiB vector: half of it in each step, one column (the one link used), one row per step.
    two = Schedule(RING4, name="two", collective="all_gather", num_chunks=2, step=[0, 1], source=[2, 2],
                   destination=[3, 3], start=[0, 1], stop=[1, 2], op=[1, 1], color=[0, 0], phase=[1, 1])
    assert two.used_links.tolist() == [2]
    (s0, s1, nbytes, msgs, _, cols), = list(two.link_loads())
    assert (s0, s1, nbytes.tolist(), msgs.tolist(), cols) == (0, 2, [[2**19], [2**19]], [[True], [True]], None)
    assert two.link_bytes().tolist() == [[0, 0, 2**19, 0, 0, 0, 0, 0], [0, 0, 2**19, 0, 0, 0, 0, 0]]
