"""cost(), phase_summary() and the closed forms, against values worked out by hand.

Every expected number below is written out with its arithmetic in a comment; none is
computed by running the model's own formulas. The schedules are tiny (2 to 4 chips),
built from explicit transfers so that each step's messages are known exactly, with
``itemsize=1`` and ``nbytes = 100 * num_chunks`` so that every chunk is 100 bytes.

Networks used:

* ``ONE_WAY``: ``Network.ring(3, bidirectional=False)``, links 0: A->B, 1: B->C,
  2: C->A, 100 B/s and 1 s per message on every link (one link class: the
  uniform path of ``cost``).
* ``TWO_CORES``: ``Network.line(2, cores_per_chip=2)``, nodes 0, 1 on chip A and
  2, 3 on chip B; links 0: A->B and 1: B->A (ICI, 1 s, 100 B/s), 2: A.0->A.1,
  3: A.1->A.0, 4: B.0->B.1, 5: B.1->B.0 (on chip, 0.5 s, 200 B/s): two link
  classes, the general path.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from scwork.collectives import (
    SCALING_BOOK_V5E_EXAMPLE,
    Network,
    Schedule,
    bandwidths,
    bus_factor,
    cost,
    phase_summary,
    ring_all_reduce,
    scaling_book_time,
    single_path,
)
from scwork.collectives import _program
from scwork.collectives.cost import MAX_PIPELINE_CHUNKS, _busiest
from scwork.collectives.network import MAX_NODES
from scwork.errors import ConfigError

RS, AG, A2A = 0, 1, 2   # phase codes (scwork.collectives.PHASES)


def hand_schedule(net, transfers, *, num_chunks=4, collective="all_reduce", nbytes=None, color=None):
    """An explicit schedule from ``(step, source, destination, start, stop[, phase])`` tuples.

    ``itemsize=1`` and, unless given, ``nbytes = 100 * num_chunks``: 100 B per chunk.
    """
    rows = [t if len(t) == 6 else (*t, RS) for t in transfers]
    step, src, dst, c0, c1, phase = (list(col) for col in zip(*rows)) if rows else ([],) * 6
    n = len(rows)
    return Schedule(net, name="by hand", collective=collective, num_chunks=num_chunks, step=step, source=src,
                    destination=dst, start=c0, stop=c1, op=[0] * n, color=[0] * n if color is None else color,
                    phase=phase, nbytes=100 * num_chunks if nbytes is None else nbytes, itemsize=1)


def one_way(latency=1.0):
    return Network.ring(3, bidirectional=False, link_bandwidth=100.0, link_latency=latency)


def two_cores(**kwargs):
    params = dict(link_bandwidth=100.0, link_latency=1.0, on_chip_bandwidth=200.0, on_chip_latency=0.5)
    params.update(kwargs)
    return Network.line(2, cores_per_chip=2, **params)


def uniform_schedule(latency=1.0):
    """Two steps on ONE_WAY.

    step 0: A->B chunks [0, 2) (200 B on link 0), B->C chunk 2 (100 B on link 1);
    step 1: C->A chunks 0 and 1 as two transfers of one message (200 B on link 2),
            A->B chunk 3 (100 B on link 0).
    """
    return hand_schedule(one_way(latency), [(0, 0, 1, 0, 2), (0, 1, 2, 2, 3),
                                            (1, 2, 0, 0, 1), (1, 2, 0, 1, 2), (1, 0, 1, 3, 4)])


def general_schedule():
    """Three steps on TWO_CORES (phases for phase_summary in brackets).

    step 0: 0->2 chunk 0, 1->3 chunks [1, 3), 0->3 chunk 3: three messages on link 0
            (100 + 200 + 100 = 400 B) [RS]; 2->3 chunk 0 on link 4 (100 B) [RS].
    step 1: 3->2 chunks [0, 2) on link 5 (200 B) [AG]; 2->0 chunk 2 on link 1 (100 B) [AG].
    step 2: 0->2 chunk 3 on link 0 (100 B) [AG]; 0->1 chunks [0, 3) on link 2 (300 B) [RS].
    """
    return hand_schedule(two_cores(), [
        (0, 0, 2, 0, 1, RS), (0, 1, 3, 1, 3, RS), (0, 0, 3, 3, 4, RS), (0, 2, 3, 0, 1, RS),
        (1, 3, 2, 0, 2, AG), (1, 2, 0, 2, 3, AG),
        (2, 0, 2, 3, 4, AG), (2, 0, 1, 0, 3, RS)])


def values(da):
    return np.asarray(da.values).tolist()


def assert_close(da, expected, rel):
    """A (step, link) matrix against hand values, to ``rel`` of each value (0 exactly)."""
    np.testing.assert_allclose(da.values, expected, rtol=rel, atol=0)


# -- cost: one link class (the uniform path) ---------------------------------------


def test_uniform_bulk_steps_links_and_bandwidths():
    c = cost(uniform_schedule(), link_summary=True)
    # step 0: link 0 carries 200 B: 1 + 200 / 100 = 3 s; link 1: 1 + 1 = 2 s -> 3 s.
    # step 1: link 2 carries one message of 200 B: 3 s; link 0: 2 s -> 3 s.
    assert values(c.step_time) == [3.0, 3.0]
    assert values(c.cumulative_time) == [3.0, 6.0]
    assert values(c.step_bytes) == [200.0, 200.0]
    assert float(c.total_time) == 6.0
    assert c.total_time.attrs["mode"] == "bulk-synchronous"
    # algbw = 400 B / 6 s; busbw = algbw * 2 (3 - 1) / 3 (all-reduce over 3 nodes).
    assert float(c.algbw) == pytest.approx(400 / 6, rel=1e-15, abs=0)
    assert float(c.busbw) == pytest.approx(400 / 6 * 4 / 3, rel=1e-15, abs=0)
    assert c.busbw.attrs["definition"] == "algbw * f, f = 1.333"
    assert values(c.busy_links) == [2, 2]
    # mean utilisation: step 0 (3 + 2) / 3 over 2 links; step 1 (3 + 2) / 3 over 2 links.
    assert values(c.mean_utilisation) == pytest.approx([5 / 6, 5 / 6], rel=1e-15, abs=0)
    assert values(c.busiest_link) == [0, 2]
    assert values(c.link_total_bytes) == [300.0, 100.0, 200.0]
    # link 0: two messages (2 s of latency) + 300 B / 100 = 5 s; link 1: 1 + 1; link 2: 1 + 2.
    assert values(c.link_busy_time) == [5.0, 2.0, 3.0]
    assert values(c.link_utilisation) == pytest.approx([5 / 6, 2 / 6, 3 / 6], rel=1e-15, abs=0)
    assert values(c.link) == [0, 1, 2] and values(c.step) == [0, 1]
    assert list(c.coords) == ["step", "link"]
    # Buffers: 5 per direction x 1 color x 1 direction (one-way ring) x largest message 200 B.
    assert c.attrs["buffer_bytes_per_node"] == 1000.0
    assert c.attrs["pipeline_chunks"] == 1 and c.attrs["buffers_per_direction"] == 5
    assert (c.attrs["nbytes"], c.attrs["itemsize"]) == (400, 1)
    assert (c.attrs["schedule"], c.attrs["collective"], c.attrs["network"]) == ("by hand", "all_reduce", "3 ring")


def test_buffers_per_color():
    # The uniform schedule with its step-1 message in a second color: 2 colors.
    s = hand_schedule(one_way(), [(0, 0, 1, 0, 2), (0, 1, 2, 2, 3), (1, 2, 0, 0, 1), (1, 2, 0, 1, 2),
                                  (1, 0, 1, 3, 4)], color=[0, 0, 1, 1, 0])
    assert s.num_colors == 2
    # 5 buffers x 2 colors x 1 direction x 200 B; 3 buffers: 3 x 2 x 1 x 200 / 2.
    assert cost(s).attrs["buffer_bytes_per_node"] == 2000.0
    assert cost(s, buffers_per_direction=3, pipeline_chunks=2).attrs["buffer_bytes_per_node"] == 600.0
    assert float(cost(s).total_time) == 6.0          # colors share links: the times do not change


def test_uniform_bulk_without_link_columns_has_no_link_dim():
    c = cost(uniform_schedule())
    assert "link" not in c.dims and "busiest_link" not in c and "link_time" not in c
    assert float(c.total_time) == 6.0


def test_uniform_per_link_matrix():
    c = cost(uniform_schedule(), per_link=True)
    assert values(c.link_time) == [[3.0, 2.0, 0.0], [2.0, 0.0, 3.0]]
    assert values(c.link_bytes) == [[200.0, 100.0, 0.0], [100.0, 0.0, 200.0]]
    # busy time / step time: 3 / 3, 2 / 3, 0.
    assert_close(c.utilisation, [[1.0, 2 / 3, 0.0], [2 / 3, 0.0, 1.0]], rel=1e-15)
    assert float(c.total_time) == 6.0 and values(c.link) == [0, 1, 2]
    assert c.link_time.dims == ("step", "link")


def test_nbytes_argument_resizes_the_schedule():
    # 800 B over 4 chunks: 200 B per chunk. step 0: link 0 carries 400 B: 1 + 4 = 5 s;
    # step 1: link 2 carries 400 B: 5 s.
    c = cost(uniform_schedule(), nbytes=800)
    assert values(c.step_time) == [5.0, 5.0] and c.attrs["nbytes"] == 800
    assert float(c.algbw) == 80.0           # 800 B / 10 s


@pytest.mark.parametrize("buffers", [5, 2])
def test_uniform_pipelined_two_segments_busiest_link_bound(buffers):
    c = cost(uniform_schedule(), pipeline_chunks=2, buffers_per_direction=buffers, link_summary=True)
    # One segment: step 0 link 0 carries 100 B: 1 + 1 = 2 s (link 1: 1 + 0.5); step 1 link 2: 2 s.
    # Critical path: 2 + 2 + (2 - 1) * 2 = 6 s. Busiest link, link 0: per segment two
    # messages and 150 B: 2 + 1.5 = 3.5 s, times 2 segments = 7 s > 6 s.
    assert float(c.total_time) == 7.0
    assert c.total_time.attrs["mode"] == "pipelined: max(critical path, busiest link)"
    assert values(c.step_time) == [4.0, 4.0]          # whole transfers: 2 segments of 2 s
    assert values(c.cumulative_time) == [4.0, 8.0]
    # Busy time over 2 segments: link 0 7 s, link 1 2 x (1 + 0.5) = 3 s, link 2 2 x (1 + 1) = 4 s.
    assert values(c.link_busy_time) == [7.0, 3.0, 4.0]
    assert values(c.link_utilisation) == pytest.approx([1.0, 3 / 7, 4 / 7], rel=1e-15, abs=0)
    # Per segment, step 0: link 0 2 s, link 1 1 + 50 / 100 = 1.5 s of a 2 s step, over 2 busy
    # links: (1 + 0.75) / 2; step 1 the same (link 2 2 s, link 0 1.5 s). The 50 B count: a
    # byte total rounded down to whole seconds (150 // 200 = 0) would give (2 + 0) / 2 / 2.
    assert values(c.mean_utilisation) == [0.875, 0.875]
    assert values(c.busy_links) == [2, 2] and values(c.busiest_link) == [0, 2]
    # buffers x 1 color x 1 direction x largest segment (200 B / 2).
    assert c.attrs["buffer_bytes_per_node"] == buffers * 100.0
    assert c.attrs["pipeline_chunks"] == 2 and c.attrs["buffers_per_direction"] == buffers


def test_uniform_three_segments_and_one_buffer():
    c3 = cost(uniform_schedule(), pipeline_chunks=3)
    # Segment time: step 0 link 0 1 + 200 / 300 = 5/3 s; step 1 link 2 the same.
    # Critical path 10/3 + 2 x 5/3 = 20/3 s; link 0: 3 x 2 latencies + 300 / 100 = 9 s.
    assert float(c3.total_time) == pytest.approx(9.0, rel=1e-14, abs=0)
    assert values(c3.step_time) == pytest.approx([5.0, 5.0], rel=1e-14, abs=0)
    one = cost(uniform_schedule(), pipeline_chunks=3, buffers_per_direction=1)
    # No overlap: 3 segments one after the other in each step, 3 x (5/3 + 5/3) = 10 s.
    assert float(one.total_time) == pytest.approx(10.0, rel=1e-14, abs=0)
    assert one.total_time.attrs["mode"] == "segmented, no overlap (1 buffer)"
    assert one.attrs["buffer_bytes_per_node"] == pytest.approx(200 / 3, rel=1e-14, abs=0)   # 1 x 1 x 1 x 200 / 3
    # The same through the general path (per_link): segments of 200 / 3 B, not 66.
    general = cost(uniform_schedule(), pipeline_chunks=3, buffers_per_direction=1, per_link=True)
    assert general.attrs["buffer_bytes_per_node"] == pytest.approx(200 / 3, rel=1e-14, abs=0)
    assert float(general.total_time) == pytest.approx(10.0, rel=1e-14, abs=0)


def chain_schedule():
    """A chain on Network.line(3): 300 B over link 0 (A->B), then 100 B over link 1 (B->C)."""
    net = Network.line(3, link_bandwidth=100.0, link_latency=1.0)
    return hand_schedule(net, [(0, 0, 1, 0, 3), (1, 1, 2, 0, 1)])


def test_pipelined_chain_is_bound_by_its_critical_path():
    c2 = cost(chain_schedule(), pipeline_chunks=2)
    # Segments: step 0 1 + 150 / 100 = 2.5 s, step 1 1 + 50 / 100 = 1.5 s.
    # Critical path 2.5 + 1.5 + (2 - 1) x 2.5 = 6.5 s; link 0: 2 x 1 + 3 = 5 s.
    assert float(c2.total_time) == 6.5
    assert values(c2.step_time) == [5.0, 3.0]
    c3 = cost(chain_schedule(), pipeline_chunks=3)
    # Segments 1 + 1 = 2 s and 1 + 1/3 s: 2 + 4/3 + 2 x 2 = 22/3 s; link 0: 3 + 3 = 6 s.
    assert float(c3.total_time) == pytest.approx(22 / 3, rel=1e-14, abs=0)
    bulk = cost(chain_schedule())
    assert float(bulk.total_time) == 6.0           # (1 + 3) + (1 + 1)
    # Bidirectional line: buffers count both directions, 5 x 1 x 2 x 150 B.
    assert c2.attrs["buffer_bytes_per_node"] == 1500.0


def test_latency_only_steps_of_a_zero_byte_schedule():
    c = cost(uniform_schedule(), nbytes=0, link_summary=True)
    # No bytes, one message per busy link: every step takes the 1 s latency.
    assert values(c.step_time) == [1.0, 1.0] and values(c.step_bytes) == [0.0, 0.0]
    assert values(c.busy_links) == [2, 2]
    # Ties at 0 B: the smallest busy link id (step 1 uses links 0 and 2).
    assert values(c.busiest_link) == [0, 0]
    assert values(c.link_busy_time) == [2.0, 1.0, 1.0]
    assert float(c.algbw) == 0.0 and float(c.busbw) == 0.0
    assert c.attrs["buffer_bytes_per_node"] == 0.0


@pytest.mark.parametrize("per_link", [False, True])
def test_total_time_below_one_second(per_link):
    # 0 B, 0.25 s per message: every step takes 0.25 s, 0.5 s in all (times below 1 s
    # are divided like any other).
    c = cost(uniform_schedule(latency=0.25), nbytes=0, link_summary=True, per_link=per_link)
    assert float(c.total_time) == 0.5
    assert float(c.algbw) == 0.0 and float(c.busbw) == 0.0          # 0 B / 0.5 s
    # link 0 carries a message in both steps: 0.5 s of 0.5 s; links 1 and 2 one each.
    assert values(c.link_busy_time) == [0.5, 0.25, 0.25]
    assert values(c.link_utilisation) == [1.0, 0.5, 0.5]
    assert values(c.mean_utilisation) == [1.0, 1.0]
    c = cost(uniform_schedule(latency=0.25), nbytes=4, per_link=per_link)    # 1 B chunks, 1 / 100 s per byte
    # step 0: link 0 0.25 + 2 / 100 = 0.27 s; step 1: link 2 0.27 s. 4 B / 0.54 s.
    assert float(c.total_time) == pytest.approx(0.54, rel=1e-15, abs=0)
    assert float(c.algbw) == pytest.approx(4 / 0.54, rel=1e-15, abs=0)
    if per_link:
        # 0 B again: each busy link is busy its step's whole 0.25 s (steps shorter than 1 s count).
        c = cost(uniform_schedule(latency=0.25), nbytes=0, per_link=True)
        assert values(c.utilisation) == [[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]]


@pytest.mark.parametrize("per_link", [False, True])     # the uniform path, the general path
@pytest.mark.parametrize("k", [1, 2])
def test_zero_total_time(per_link, k):
    c = cost(uniform_schedule(latency=0.0), nbytes=0, link_summary=True, per_link=per_link, pipeline_chunks=k)
    assert float(c.total_time) == 0.0 and values(c.step_time) == [0.0, 0.0]
    assert float(c.algbw) == math.inf and float(c.busbw) == math.inf    # 0 B in 0 s, f = 4/3
    assert values(c.link_utilisation) == [0.0, 0.0, 0.0]
    assert values(c.mean_utilisation) == [0.0, 0.0]
    assert values(c.busy_links) == [2, 2]
    assert values(c.busiest_link) == [0, 0]
    if per_link:
        assert values(c.utilisation) == [[0.0] * 3, [0.0] * 3]


def test_zero_total_time_with_two_link_classes():
    net = two_cores(link_latency=0.0, on_chip_latency=0.0)
    s = hand_schedule(net, [(0, 0, 2, 0, 1), (0, 2, 3, 1, 2), (1, 1, 3, 2, 3)], nbytes=0)
    c = cost(s, link_summary=True, per_link=True)
    assert float(c.total_time) == 0.0 and values(c.step_time) == [0.0, 0.0]
    assert values(c.busy_links) == [2, 1] and values(c.mean_utilisation) == [0.0, 0.0]
    assert values(c.utilisation) == [[0.0] * 6, [0.0] * 6]
    assert values(c.link_utilisation) == [0.0] * 6
    # Every busy link ties at 0 s: the smallest id (step 0: links 0 and 4).
    assert values(c.busiest_link) == [0, 0]


@pytest.mark.parametrize("k", [1, 2])
def test_empty_schedule_on_one_chip(k):
    c = cost(single_path(Network.line(1)), pipeline_chunks=k, per_link=True, link_summary=True)
    assert float(c.total_time) == 0.0 and c.sizes["step"] == 0 and c.sizes["link"] == 0
    # One node: algbw is infinite (no time), the bus factor 0: busbw 0, not inf x 0 = nan.
    assert float(c.algbw) == math.inf and float(c.busbw) == 0.0
    assert c.attrs["buffer_bytes_per_node"] == 0.0


@pytest.mark.parametrize("budget", [None, 2, 3])
def test_compact_chain_uses_sparse_link_columns(monkeypatch, budget):
    # single_path on a line of 4: 6 steps, one 400 B message each, over links
    # 0 (A->B), 1, 2 and back 5 (D->C), 4, 3; 1 + 400 / 100 = 5 s per step.
    # Batches of 2 or 3 records carry the columns of 1 or 2 of the 6 links only.
    if budget is not None:
        monkeypatch.setitem(Schedule.link_loads.__kwdefaults__, "budget", budget)
    s = single_path(Network.line(4, link_bandwidth=100.0, link_latency=1.0), nbytes=400)
    c = cost(s, link_summary=True)
    assert values(c.step_time) == [5.0] * 6 and float(c.total_time) == 30.0
    assert values(c.busiest_link) == [0, 1, 2, 5, 4, 3]
    assert values(c.link_busy_time) == [5.0] * 6
    # One busy link per step, busy the whole step.
    assert values(c.busy_links) == [1] * 6 and values(c.mean_utilisation) == [1.0] * 6
    assert values(c.link_utilisation) == pytest.approx([1 / 6] * 6, rel=1e-15, abs=0)     # 5 s of 30 s
    p = cost(s, per_link=True, pipeline_chunks=2)
    # Two segments of 1 + 2 = 3 s: link_time 6 s on the diagonal the chain walks.
    expected = np.zeros((6, 6))
    expected[range(6), [0, 1, 2, 5, 4, 3]] = 6.0
    assert values(p.link_time) == expected.tolist()
    # Critical path 6 x 3 + 3 = 21 s.
    assert float(p.total_time) == 21.0


# -- cost: two link classes (the general path) -------------------------------------


def test_general_bulk_steps_and_link_summary():
    c = cost(general_schedule(), link_summary=True)
    # step 0: link 0 three messages, 3 x 1 + 400 / 100 = 7 s; link 4: 0.5 + 100 / 200 = 1 s.
    # step 1: link 5 0.5 + 200 / 200 = 1.5 s; link 1 1 + 1 = 2 s.
    # step 2: link 0 1 + 1 = 2 s; link 2 0.5 + 300 / 200 = 2 s (a tie).
    assert values(c.step_time) == [7.0, 2.0, 2.0]
    assert float(c.total_time) == 11.0
    # The most bytes on one link: 400 (link 0), 200 (link 5), 300 (link 2).
    assert values(c.step_bytes) == [400.0, 200.0, 300.0]
    assert values(c.busy_links) == [2, 2, 2]
    # (7 + 1) / 7 / 2, (1.5 + 2) / 2 / 2, (2 + 2) / 2 / 2.
    assert values(c.mean_utilisation) == pytest.approx([4 / 7, 0.875, 1.0], rel=1e-15, abs=0)
    # Step 2's tie goes to the smaller link id (0 with 100 B, not 2 with 300 B).
    assert values(c.busiest_link) == [0, 1, 0]
    assert values(c.link_total_bytes) == [500.0, 100.0, 300.0, 0.0, 100.0, 200.0]
    assert values(c.link_busy_time) == [9.0, 2.0, 2.0, 0.0, 1.0, 1.5]
    assert values(c.link_utilisation) == pytest.approx([9 / 11, 2 / 11, 2 / 11, 0.0, 1 / 11, 1.5 / 11],
                                                       rel=1e-15, abs=0)
    # 400 B in 11 s; all-reduce over 4 nodes: f = 2 x 3 / 4.
    assert float(c.algbw) == pytest.approx(400 / 11, rel=1e-15, abs=0)
    assert float(c.busbw) == pytest.approx(400 / 11 * 1.5, rel=1e-15, abs=0)
    # Largest message 300 B (step 2, link 2; link 0's 400 B are three messages):
    # 5 buffers x 1 color x 2 directions x 300 B.
    assert c.attrs["buffer_bytes_per_node"] == 3000.0


def test_general_per_link_matrix():
    c = cost(general_schedule(), per_link=True)
    assert values(c.link_time) == [[7.0, 0, 0, 0, 1.0, 0], [0, 2.0, 0, 0, 0, 1.5], [2.0, 0, 2.0, 0, 0, 0]]
    assert values(c.link_bytes) == [[400.0, 0, 0, 0, 100.0, 0], [0, 100.0, 0, 0, 0, 200.0],
                                    [100.0, 0, 300.0, 0, 0, 0]]
    assert_close(c.utilisation, [[1, 0, 0, 0, 1 / 7, 0], [0, 1, 0, 0, 0, 0.75], [1, 0, 1, 0, 0, 0]], rel=1e-15)


def test_general_three_segments():
    c = cost(general_schedule(), pipeline_chunks=3, per_link=True, link_summary=True)
    # Segment times: step 0 link 0 3 + 400 / 300 = 13/3 s (link 4 0.5 + 1/6 = 2/3 s);
    # step 1 link 1 1 + 1/3 = 4/3 s (link 5 0.5 + 1/3); step 2 link 0 1 + 1/3 = 4/3 s (link 2 0.5 + 0.5).
    assert values(c.step_time) == pytest.approx([13.0, 4.0, 4.0], rel=1e-14, abs=0)
    # Critical path 13/3 + 8/3 + 2 x 13/3 = 47/3 s; link 0 3 x (13/3 + 4/3) = 17 s.
    assert float(c.total_time) == pytest.approx(17.0, rel=1e-14, abs=0)
    assert values(c.link_busy_time) == pytest.approx([17.0, 4.0, 3.0, 0.0, 2.0, 2.5], rel=1e-14, abs=0)
    assert values(c.link_time[0]) == pytest.approx([13.0, 0, 0, 0, 2.0, 0], rel=1e-14, abs=0)
    assert values(c.utilisation[0]) == pytest.approx([1.0, 0, 0, 0, 2 / 13, 0], rel=1e-14, abs=0)
    # Largest segment 300 / 3 B: 5 x 1 x 2 x 100.
    assert c.attrs["buffer_bytes_per_node"] == pytest.approx(1000.0, rel=1e-14, abs=0)
    # 7 segments: 300 / 7 B (not a whole number of bytes): 5 x 1 x 2 x 300 / 7.
    c7 = cost(general_schedule(), pipeline_chunks=7)
    assert c7.attrs["buffer_bytes_per_node"] == pytest.approx(3000 / 7, rel=1e-14, abs=0)


def test_general_busiest_link_is_not_the_smallest_busy_id():
    # Step 0 on TWO_CORES: 0->2 chunk 0 on link 0 (1 + 100 / 100 = 2 s) and 2->3 chunks
    # [0, 4) on link 4 (0.5 + 400 / 200 = 2.5 s): link 4 sets the step time, not link 0.
    c = cost(hand_schedule(two_cores(), [(0, 0, 2, 0, 1), (0, 2, 3, 0, 4)]), link_summary=True)
    assert values(c.step_time) == [2.5] and values(c.step_bytes) == [400.0]
    assert values(c.busiest_link) == [4]
    assert values(c.busy_links) == [2]
    assert values(c.mean_utilisation) == [0.9]            # (2 / 2.5 + 1) / 2
    assert values(c.link_busy_time) == [2.0, 0.0, 0.0, 0.0, 2.5, 0.0]


def test_busiest_sentinel_and_ties():
    # Per step the smallest link id among the busiest (ties), -1 with none busy. Links
    # stored as [5, 3]: step 0 none, step 1 both (3 < 5), step 2 only the second (3).
    is_max = np.array([[False, False], [True, True], [False, True]])
    assert _busiest(is_max, np.array([5, 3])).tolist() == [-1, 3, 3]
    assert _busiest(np.array([[True, False]]), np.array([5, 3])).tolist() == [5]
    # No link columns at all: every step has no busy link.
    assert _busiest(np.zeros((2, 0), dtype=bool), np.zeros(0, dtype=np.int64)).tolist() == [-1, -1]


def test_two_cores_with_equal_link_classes_count_each_message():
    # Both classes at 1 s and 100 B/s: the links look alike, but with two cores per
    # chip two messages (0->2 and 1->3) share link 0: 2 x 1 + 200 / 100 = 4 s, not 3.
    net = two_cores(on_chip_bandwidth=100.0, on_chip_latency=1.0)
    c = cost(hand_schedule(net, [(0, 0, 2, 0, 1), (0, 1, 3, 1, 2)]), link_summary=True)
    assert values(c.step_time) == [4.0]
    assert values(c.link_busy_time) == [4.0, 0, 0, 0, 0, 0]
    assert values(c.busiest_link) == [0]
    # Largest message 100 B: 5 x 1 x 2 x 100.
    assert c.attrs["buffer_bytes_per_node"] == 1000.0


def test_link_times_past_float64_are_refused():
    huge = Network.ring(3, bidirectional=False, link_bandwidth=100.0, link_latency=1e308)
    s = hand_schedule(huge, [(0, 0, 1, 0, 1), (0, 1, 2, 1, 2)])
    assert float(cost(s).total_time) == 1e308          # one latency per step: still finite
    # Each step fits float64, their sum does not: 1e308 + 1e308 (a bug once: total_time inf).
    two_steps = hand_schedule(huge, [(0, 0, 1, 0, 1), (1, 1, 2, 1, 2)])
    with pytest.raises(ConfigError, match="total time of by hand on 3 ring overflows float64"):
        cost(two_steps)
    with pytest.raises(ConfigError, match="total time .* overflows float64"):
        cost(s, pipeline_chunks=2, buffers_per_direction=1)   # 2 segments one after the other: 2e308
    with pytest.raises(ConfigError, match="total time .* overflows float64"):
        cost(s, pipeline_chunks=2)                            # critical path 1e308 + (2 - 1) x 1e308
    tiny = Network.ring(3, bidirectional=False, link_bandwidth=5e-324, link_latency=0.0)
    with pytest.raises(ConfigError, match="overflow float64"):
        cost(hand_schedule(tiny, [(0, 0, 1, 0, 1)]))
    two = two_cores(on_chip_bandwidth=5e-324)
    with pytest.raises(ConfigError, match="overflow float64"):
        cost(hand_schedule(two, [(0, 0, 1, 0, 1)]))


# -- cost: argument checks ---------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "2", None])
def test_bad_pipeline_chunks(bad):
    with pytest.raises(ConfigError, match="pipeline_chunks must be an integer >= 1"):
        cost(uniform_schedule(), pipeline_chunks=bad)


@pytest.mark.parametrize("bad", [0, False, 1.0])
def test_bad_buffers_per_direction(bad):
    with pytest.raises(ConfigError, match="buffers_per_direction must be an integer >= 1"):
        cost(uniform_schedule(), buffers_per_direction=bad)


def test_pipeline_chunks_cap_is_int32_max():
    # The documented cap, 2**31 - 1 segments, written out.
    assert MAX_PIPELINE_CHUNKS == 2_147_483_647
    cost(uniform_schedule(), pipeline_chunks=2_147_483_647)
    with pytest.raises(ConfigError, match="MAX_PIPELINE_CHUNKS=2,147,483,647"):
        cost(uniform_schedule(), pipeline_chunks=2_147_483_648)


def test_pipeline_chunks_at_and_past_the_cap():
    # At the cap every segment pays 1 s: link 0's 2 messages alone take 2 x (2**31 - 1) s.
    c = cost(uniform_schedule(), pipeline_chunks=np.int64(MAX_PIPELINE_CHUNKS), buffers_per_direction=np.int64(1))
    assert c.attrs["pipeline_chunks"] == MAX_PIPELINE_CHUNKS and c.attrs["buffers_per_direction"] == 1
    assert float(c.total_time) == pytest.approx(2 * MAX_PIPELINE_CHUNKS, rel=1e-9, abs=0)
    with pytest.raises(ConfigError, match="MAX_PIPELINE_CHUNKS"):
        cost(uniform_schedule(), pipeline_chunks=MAX_PIPELINE_CHUNKS + 1)


# -- phase_summary -----------------------------------------------------------------


def columns(ps):
    return {name: values(ps[name]) for name in ("phase", "dim", "steps", "first_step", "last_step", "bytes",
                                                 "links", "busiest_link", "busiest_link_bytes")}


def test_phase_summary_with_on_chip_parts():
    ps = phase_summary(general_schedule())
    # Parts in order of their first step (then phase, then dimension, on chip last):
    # RS dim 0: step 0, link 0 400 B (three messages).
    # RS on chip: steps 0 and 2, link 4 100 B and link 2 300 B.
    # AG dim 0: steps 1 and 2, link 1 100 B and link 0 100 B (a tie: link 0).
    # AG on chip: step 1, link 5 200 B.
    assert columns(ps) == {
        "phase": ["reduce_scatter", "reduce_scatter", "all_gather", "all_gather"],
        "dim": [0, -1, 0, -1], "steps": [1, 2, 2, 1], "first_step": [0, 0, 1, 1], "last_step": [0, 2, 2, 1],
        "bytes": [400.0, 400.0, 200.0, 200.0], "links": [1, 2, 2, 1], "busiest_link": [0, 2, 0, 5],
        "busiest_link_bytes": [400.0, 300.0, 100.0, 200.0]}
    assert values(ps.part) == [0, 1, 2, 3]
    assert ps.attrs == {"schedule": "by hand", "network": "2 line, 2 cores/chip", "nbytes": 400, "num_steps": 3}


def test_phase_summary_on_chip_part_of_a_two_dimensional_grid():
    # Network.mesh((2, 2), cores_per_chip=2): chips A (0, 0), B (0, 1), C (1, 0), D (1, 1),
    # nodes 2 per chip. A->C runs along dimension 0, A->B along dimension 1, A.0->A.1 on chip.
    net = Network.mesh((2, 2), cores_per_chip=2, link_bandwidth=100.0, link_latency=1.0,
                       on_chip_bandwidth=200.0, on_chip_latency=0.5)
    a_c, a_b, on_a = (int(net.link_ids([s], [d])[0]) for s, d in ((0, 4), (0, 2), (0, 1)))
    # Steps 0-1 reduce-scatter; step 2 an all-to-all (phase code 2) over the same three links.
    s = hand_schedule(net, [(0, 0, 4, 0, 1, RS), (0, 0, 2, 1, 3, RS), (1, 0, 1, 0, 4, RS),
                            (2, 0, 4, 0, 2, A2A), (2, 0, 2, 2, 3, A2A), (2, 0, 1, 3, 4, A2A)])
    ps = phase_summary(s)
    assert columns(ps) == {
        "phase": ["reduce_scatter"] * 3 + ["all_to_all"] * 3, "dim": [0, 1, -1, 0, 1, -1],
        "steps": [1] * 6, "first_step": [0, 0, 1, 2, 2, 2], "last_step": [0, 0, 1, 2, 2, 2],
        "bytes": [100.0, 200.0, 400.0, 200.0, 100.0, 100.0], "links": [1] * 6,
        "busiest_link": [a_c, a_b, on_a] * 2, "busiest_link_bytes": [100.0, 200.0, 400.0, 200.0, 100.0, 100.0]}
    assert net.link_kind[on_a] == "on_chip" and (net.link_dim[a_c], net.link_dim[a_b]) == (0, 1)


def test_one_link():
    # Two steps on link 0 of ONE_WAY: 100 B, then 300 B; 1 + 1 s and 1 + 3 s.
    s = hand_schedule(one_way(), [(0, 0, 1, 0, 1, RS), (1, 0, 1, 1, 4, AG)])
    c = cost(s, link_summary=True)
    assert values(c.step_time) == [2.0, 4.0] and values(c.link_busy_time) == [6.0, 0.0, 0.0]
    assert values(c.busiest_link) == [0, 0]
    assert columns(phase_summary(s)) == {
        "phase": ["reduce_scatter", "all_gather"], "dim": [0, 0], "steps": [1, 1], "first_step": [0, 1],
        "last_step": [0, 1], "bytes": [100.0, 300.0], "links": [1, 1], "busiest_link": [0, 0],
        "busiest_link_bytes": [100.0, 300.0]}


def test_phase_summary_of_zero_bytes_names_a_link_the_part_uses():
    # With 0 B every link ties; the busiest is the smallest id among the part's own links.
    s = hand_schedule(one_way(), [(0, 0, 1, 0, 1, RS), (1, 1, 2, 1, 2, AG), (1, 2, 0, 2, 3, AG)], nbytes=0)
    ps = phase_summary(s)
    assert columns(ps) == {
        "phase": ["reduce_scatter", "all_gather"], "dim": [0, 0], "steps": [1, 1], "first_step": [0, 1],
        "last_step": [0, 1], "bytes": [0.0, 0.0], "links": [1, 2], "busiest_link": [0, 1],
        "busiest_link_bytes": [0.0, 0.0]}


def test_phase_summary_busiest_link_is_not_the_first_one():
    # The all-gather part uses link 1 (100 B) and link 2 (200 B): link 2 is the busiest.
    s = hand_schedule(one_way(), [(0, 0, 1, 0, 1, RS), (1, 1, 2, 1, 2, AG), (1, 2, 0, 2, 4, AG)])
    ps = phase_summary(s)
    assert values(ps.busiest_link) == [0, 2] and values(ps.busiest_link_bytes) == [100.0, 200.0]
    assert values(ps.bytes) == [100.0, 300.0] and values(ps.links) == [1, 2]


def test_phase_summary_nbytes_argument():
    ps = phase_summary(general_schedule(), nbytes=800)       # 200 B per chunk: every byte count doubles
    assert values(ps.bytes) == [800.0, 800.0, 400.0, 400.0]
    assert values(ps.busiest_link_bytes) == [800.0, 600.0, 200.0, 400.0]
    assert ps.attrs["nbytes"] == 800


def test_phase_summary_of_an_empty_schedule():
    ps = phase_summary(single_path(Network.line(1)))
    assert ps.sizes["part"] == 0 and values(ps.busiest_link) == [] and values(ps.busiest_link_bytes) == []
    assert ps.attrs["num_steps"] == 0


def test_phase_summary_needs_a_schedule():
    with pytest.raises(ConfigError, match="phase_summary needs a Schedule"):
        phase_summary(cost(uniform_schedule()))


RING_PARTS = {
    # ring all-reduce on ONE_WAY, 300 B (3 chunks of 100 B): two reduce-scatter steps,
    # then two all-gather steps, each moving one chunk over each of the 3 links.
    "phase": ["reduce_scatter", "all_gather"], "dim": [0, 0], "steps": [2, 2], "first_step": [0, 2],
    "last_step": [1, 3], "bytes": [600.0, 600.0], "links": [3, 3], "busiest_link": [0, 0],
    "busiest_link_bytes": [200.0, 200.0]}


@pytest.mark.parametrize("budget", [None, 2, 4, 9])
def test_phase_summary_of_a_compact_ring_streamed_in_any_batches(monkeypatch, budget):
    # Budgets of 2 and 4 records stream one step at a time; 9 streams steps [0, 3)
    # (both phases in one batch) and [3, 4).
    if budget is not None:
        monkeypatch.setattr(_program, "BATCH_RECORDS", budget)
    s = ring_all_reduce(one_way(), bidirectional=False)
    assert s.compact
    assert columns(phase_summary(s, nbytes=300)) == RING_PARTS


@pytest.mark.parametrize("budget", [None, 1, 2])
def test_phase_summary_of_a_compact_chain(monkeypatch, budget):
    # single_path on a line of 4 (one record per step: the sparse path), 400 B:
    # reduce-scatter over links 0, 1, 2, all-gather back over 5, 4, 3.
    if budget is not None:
        monkeypatch.setattr(_program, "BATCH_RECORDS", budget)
    s = single_path(Network.line(4), nbytes=400)
    assert columns(phase_summary(s)) == {
        "phase": ["reduce_scatter", "all_gather"], "dim": [0, 0], "steps": [3, 3], "first_step": [0, 3],
        "last_step": [2, 5], "bytes": [1200.0, 1200.0], "links": [3, 3], "busiest_link": [0, 3],
        "busiest_link_bytes": [400.0, 400.0]}


@pytest.mark.parametrize("budget", [None, 18, 40])
def test_phase_summary_of_a_compact_two_dimensional_torus(monkeypatch, budget):
    # multi_dim_all_reduce on a 3 x 2 torus, 2400 B per node in 12 chunks of 200 B.
    # Dimension 0 (bidirectional rings of 3 over links 0-11): two reduce-scatter steps
    # in which every link carries one 400 B shard (half the vector per direction, in
    # thirds); dimension 1 (pairs over links 12-17): one step, each node sends its
    # partner half of the 800 B it holds (two chunks); then the all-gather mirrors it.
    # Budgets of 18 and 40 records stream 1 and 2 steps at a time (18 used links).
    if budget is not None:
        monkeypatch.setattr(_program, "BATCH_RECORDS", budget)
    from scwork.collectives import multi_dim_all_reduce

    net = Network.torus((3, 2), link_bandwidth=100.0, link_latency=1.0)
    ps = phase_summary(multi_dim_all_reduce(net), nbytes=2400)
    assert columns(ps) == {
        "phase": ["reduce_scatter", "reduce_scatter", "all_gather", "all_gather"], "dim": [0, 1, 1, 0],
        "steps": [2, 1, 1, 2], "first_step": [0, 2, 3, 4], "last_step": [1, 2, 3, 5],
        # 2 steps x 12 links x 400 B; 6 links x 400 B.
        "bytes": [9600.0, 2400.0, 2400.0, 9600.0], "links": [12, 6, 6, 12],
        "busiest_link": [0, 12, 12, 0], "busiest_link_bytes": [800.0, 400.0, 400.0, 800.0]}


# -- bus_factor, bandwidths, scaling_book_time --------------------------------------


def test_scaling_book_example_constants():
    # jax-ml scaling-book, "Sharded Matrices and How to Multiply Them", pop quiz 2:
    # bf16[E=2048, F=8192] = 33,554,432 B, AllGather over Y (4) of a v5e {'X': 8, 'Y': 4};
    # 377 us with wraparound, 560 us without, 680 us measured; 4.5e10 B/s per link.
    assert SCALING_BOOK_V5E_EXAMPLE == {
        "shape": (8, 4), "axis": 1, "array_bytes": 33_554_432, "link_bytes_per_s": 45_000_000_000.0,
        "time_with_wraparound_s": 0.000377, "time_without_wraparound_s": 0.00056, "measured_s": 0.00068,
        "source": "jax-ml scaling-book, 'Sharded Matrices and How to Multiply Them', pop quiz 2"}



def test_bus_factor_by_hand():
    assert bus_factor("all_reduce", 3) == 4 / 3             # 2 (3 - 1) / 3
    assert bus_factor("all_reduce", 1) == 0.0
    assert bus_factor("reduce_scatter", 5) == 0.8           # (5 - 1) / 5
    assert bus_factor("all_gather", 2) == 0.5
    assert bus_factor("all_to_all", 3) == 2 / 3
    assert bus_factor("reduce", 7) == 1.0 and bus_factor("broadcast", 1) == 1.0
    assert bus_factor("all_reduce", np.int64(4)) == 1.5
    for name in ("aaa", "zzz", "all_reduce_", "reduce_scatterx", ""):
        with pytest.raises(ConfigError, match="unknown collective"):
            bus_factor(name, 4)
    with pytest.raises(ConfigError, match="collective must be a name"):
        bus_factor(2, 4)
    with pytest.raises(ConfigError):
        bus_factor("all_reduce", 0)
    with pytest.raises(ConfigError):
        bus_factor("all_reduce", 2.0)


def test_bandwidths_by_hand():
    assert bandwidths(300, 2.0, "all_reduce", 3) == (150.0, 200.0)     # 300 / 2; x 4/3
    assert bandwidths(0, 1.0, "all_gather", 4) == (0.0, 0.0)
    assert bandwidths(np.int64(10), np.float32(4.0), "broadcast", 2) == (2.5, 2.5)
    with pytest.raises(ConfigError, match=r"time_s must be a finite number > 0, got 0"):
        bandwidths(1, 0, "all_reduce", 2)
    with pytest.raises(ConfigError, match=r"nbytes must be a finite number >= 0"):
        bandwidths(-1, 1.0, "all_reduce", 2)
    with pytest.raises(ConfigError, match="time_s must be a number"):
        bandwidths(1, True, "all_reduce", 2)
    with pytest.raises(ConfigError, match="nbytes must be a number"):
        bandwidths(np.bool_(True), 1.0, "all_reduce", 2)
    with pytest.raises(ConfigError, match="nbytes must be a number"):
        bandwidths("1", 1.0, "all_reduce", 2)
    with pytest.raises(ConfigError, match="beyond float range"):
        bandwidths(10**400, 1.0, "all_reduce", 2)
    for bad in (math.inf, math.nan, -math.inf):
        with pytest.raises(ConfigError, match="must be a finite number"):
            bandwidths(1, bad, "all_reduce", 2)
    with pytest.raises(ConfigError, match="beyond float64"):
        bandwidths(1e308, 1e-10, "all_reduce", 2)


def test_scaling_book_time_with_wraparound_by_hand():
    # max(latency x sum(axes) / 2, V / (2 W x axes)).
    # Bandwidth-bound: 1600 B on [4, 2] at 100 B/s: 1600 / (200 x 2) = 4 s > 1 x 6 / 2 = 3 s.
    assert scaling_book_time("all_gather", 1600, [4, 2], link_bandwidth=100.0, latency=1.0) == 4.0
    assert scaling_book_time("reduce_scatter", 1600, [4, 2], link_bandwidth=100.0, latency=1.0) == 4.0
    assert scaling_book_time("all_reduce", 1600, [4, 2], link_bandwidth=100.0, latency=1.0) == 8.0
    # Latency-bound: 400 B: 400 / 400 = 1 s < 3 s.
    assert scaling_book_time("all_gather", 400, [4, 2], link_bandwidth=100.0, latency=1.0) == 3.0
    assert scaling_book_time("all_reduce", 400, [4, 2], link_bandwidth=100.0, latency=1.0) == 6.0
    assert scaling_book_time("all_gather", 0, [5], link_bandwidth=100.0, latency=2.0) == 5.0   # 2 x 5 / 2
    # An odd number of hops: 1 s x 3 / 2 = 1.5 s (a half second, not rounded down to 1 s).
    assert scaling_book_time("all_gather", 0, [3], link_bandwidth=100.0, latency=1.0) == 1.5
    # 100 B on [3, 2]: 1 x 5 / 2 = 2.5 s > 100 / (200 x 2) = 0.25 s; all-reduce twice: 5 s.
    assert scaling_book_time("all_reduce", 100, [3, 2], link_bandwidth=100.0, latency=1.0) == 5.0


def test_scaling_book_time_without_wraparound_by_hand():
    # A line of x chips: max(latency (x - 1), (x - 1) V / x / W).
    # 400 B on 4 chips at 100 B/s: 3 hops of 100 B = 3 s > 3 x 0.5 s.
    assert scaling_book_time("all_gather", 400, [4], link_bandwidth=100.0, latency=0.5, wraparound=False) == 3.0
    assert scaling_book_time("all_reduce", 400, [4], link_bandwidth=100.0, latency=0.5,
                             wraparound=np.bool_(False)) == 6.0
    # 402 B: 3 hops of 100.5 B = 3.015 s (not a whole number of bytes per hop).
    assert scaling_book_time("all_gather", 402, [4], link_bandwidth=100.0, latency=0.5,
                             wraparound=False) == pytest.approx(3.015, rel=1e-15, abs=0)
    # Latency-bound: 0 B, 3 hops of 2 s.
    assert scaling_book_time("reduce_scatter", 0, [4], link_bandwidth=100.0, latency=2.0, wraparound=False) == 6.0
    with pytest.raises(ConfigError, match="one axis"):
        scaling_book_time("all_gather", 400, [4, 2], wraparound=False)
    # The book's v5e numbers: 3 hops of 8,388,608 B at 4.5e10 B/s = 559.2 us.
    assert scaling_book_time("all_gather", 2048 * 8192 * 2, [4], wraparound=False) == pytest.approx(
        3 * 8_388_608 / 4.5e10, rel=1e-15, abs=0)


def test_scaling_book_all_to_all_by_hand():
    # V max(axes) / (4 N 2W): 1600 B on [4, 2] (N = 8) at 100 B/s: 1600 x 4 / (4 x 8 x 200) = 1 s.
    assert scaling_book_time("all_to_all", 1600, [4, 2], link_bandwidth=100.0) == 1.0
    assert scaling_book_time("all_to_all", 1600, [2, 4], link_bandwidth=100.0, wraparound=False) == 2.0
    assert scaling_book_time("all_to_all", 800, [1], link_bandwidth=100.0) == 1.0    # 800 / (4 x 200)


@pytest.mark.parametrize("name", ["aaa", "all_gatherz", "all_to", "zzz", "reduce"])
def test_scaling_book_time_unknown_collectives(name):
    with pytest.raises(ConfigError, match="unknown collective"):
        scaling_book_time(name, 100, [2])
    with pytest.raises(ConfigError, match="unknown collective"):
        scaling_book_time(name, 100, [2], wraparound=False)


def test_scaling_book_time_bad_arguments():
    with pytest.raises(ConfigError, match="collective must be a name"):
        scaling_book_time(None, 100, [2])
    for bad in ("44", b"44", 4):
        with pytest.raises(ConfigError, match="axis_sizes must be a list"):
            scaling_book_time("all_gather", 100, bad)
    with pytest.raises(ConfigError, match="axis_sizes is empty"):
        scaling_book_time("all_gather", 100, [])
    with pytest.raises(ConfigError, match=r"axis_sizes\[1\]"):
        scaling_book_time("all_gather", 100, [2, 0])
    with pytest.raises(ConfigError, match="MAX_NODES"):
        scaling_book_time("all_gather", 100, [MAX_NODES + 1])
    # Exactly MAX_NODES chips is allowed: 1 s of latency x MAX_NODES / 2 dominates 0 B.
    assert scaling_book_time("all_gather", 0, [MAX_NODES], latency=1.0) == MAX_NODES / 2
    with pytest.raises(ConfigError, match="wraparound must be True or False"):
        scaling_book_time("all_gather", 100, [2], wraparound=1)
    with pytest.raises(ConfigError, match="link_bandwidth must be a finite number > 0"):
        scaling_book_time("all_gather", 100, [2], link_bandwidth=0.0)
    with pytest.raises(ConfigError, match="latency must be a finite number >= 0"):
        scaling_book_time("all_gather", 100, [2], latency=-1.0)
    assert scaling_book_time("all_gather", 100, [2], latency=0, link_bandwidth=50) == 1.0   # 100 / (2 x 50 x 1)
    with pytest.raises(ConfigError, match="overflows float64"):
        scaling_book_time("all_gather", 1e308, [2], link_bandwidth=1e-300)
    with pytest.raises(ConfigError, match="overflows float64"):
        scaling_book_time("all_reduce", 1.5e308, [1], link_bandwidth=0.5)      # t = 1.5e308, 2t = inf
    with pytest.raises(ConfigError, match="overflows float64"):
        scaling_book_time("all_to_all", 1e308, [2], link_bandwidth=1e-300)


@pytest.mark.parametrize("chips", [3, 4])
def test_utilisation_of_links_busy_every_step_is_exactly_one(chips):
    # A one-way ring all-reduce of 0 bytes: in each of its 2 (n - 1) steps every chip sends
    # one message to the next, so each of the n links is busy 0.1 s of every 0.1 s step.
    # Busy / total time is 1 for every link and every step, exactly: 0.1 * 6 (one link's
    # six messages) is one ulp above 0.1 + ... + 0.1 (the six step times), and 0.1 * 3 / 0.1
    # (three busy links) one ulp above 3, which used to read 1.0000000000000002.
    net = Network.ring(chips, bidirectional=False, link_bandwidth=100.0, link_latency=0.1)
    for chunks in (1, 2):
        ds = cost(ring_all_reduce(net, bidirectional=False), 0, link_summary=True, pipeline_chunks=chunks)
        assert ds.sizes["step"] == 2 * (chips - 1)
        assert ds.link_utilisation.values.tolist() == [1.0] * chips
        assert ds.mean_utilisation.values.tolist() == [1.0] * (2 * (chips - 1))
        assert ds.busy_links.values.tolist() == [chips] * (2 * (chips - 1))
