"""Schedules of the algorithms of [md-allreduce] and the ring baselines: structure and promises."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scwork.collectives import (
    ALGORITHMS,
    Network,
    Schedule,
    all_gather,
    all_to_all,
    build,
    execute,
    improved_rotated_pincer,
    mesh_loop_all_reduce,
    multi_color_all_reduce,
    multi_dim_all_reduce,
    pincer,
    reduce_scatter,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    rotated_pincer,
    single_path,
)
from scwork.errors import ConfigError, TopologyError


def hops(net, step):
    return sorted(f"{net.node_label(t.source)}->{net.node_label(t.destination)}" for t in step)


def test_pincer_on_eight_nodes_follows_spec_11():
    net = Network.ring(8)
    s = pincer(net)
    got = [hops(net, step) for step in s]
    assert got == [
        ["A->H", "B->C"], ["C->D", "H->G"], ["D->E", "G->F"],  # two chains towards each other
        ["E->F", "F->E"],  # even count: final exchange
        ["E->D", "F->G"], ["D->C", "G->H"], ["C->B", "H->A"],  # broadcast back
    ]
    ops = [{t.op for t in step} for step in s]
    assert ops == [{"combine"}] * 4 + [{"copy"}] * 3
    assert all(t.bytes == s.nbytes for t in s[0])  # the whole vector moves


def test_pincer_odd_count_meets_on_one_node():
    net = Network.ring(7)
    s = pincer(net)
    assert s.num_steps == 6
    assert hops(net, s[2]) == ["D->E", "F->E"]  # both chains end on E
    assert hops(net, s[3]) == ["E->D", "E->F"]


def test_single_path_reduces_along_the_path_then_comes_back():
    net = Network.line(5)
    s = single_path(net)
    assert s.num_steps == 8 and all(len(step) == 1 for step in s)
    assert [hops(net, s[t])[0] for t in range(8)] == [
        "A->B", "B->C", "C->D", "D->E", "E->D", "D->C", "C->B", "B->A"]
    one_way = single_path(Network.ring(4, bidirectional=False))
    assert all(t.link in one_way.network.link_ids([t.source], [t.destination]) for st in one_way for t in st)
    assert hops(one_way.network, one_way[3]) == ["D->A"]  # the result continues forward


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16])
def test_rotated_pincer_uses_every_directed_link_in_every_step(n):
    net = Network.ring(n)
    s = rotated_pincer(net)
    assert s.num_steps == n - 1
    assert s.conflict_free
    for step in s:
        assert sorted(t.link for t in step) == list(range(net.num_links)) or n == 2
    # Every shard is one instance: chunk j only ever moves as shard (j, j+1).
    assert all(t.shard[1] - t.shard[0] == 1 for st in s for t in st)


def test_improved_rotated_pincer_sends_half_each_way_from_the_apex():
    net = Network.ring(8)
    s = improved_rotated_pincer(net)
    assert s.num_steps == 8 and s.conflict_free
    # Shard 0 (chunks [0, 2)) starts at A: in step 0 A sends one half to H and the other to B.
    sent = {"B": set(), "H": set()}
    for t in s[0]:
        if t.source == 0:
            sent[net.node_label(t.destination)] |= set(range(*t.shard))
    assert 1 in sent["H"] and 0 not in sent["H"]  # second half of shard 0 goes left
    assert 0 in sent["B"] and 1 not in sent["B"]  # first half goes right
    # Final step: A receives disjoint halves of its shard from B and H.
    last = [t for t in s[-1] if t.destination == 0]
    assert sorted(net.node_label(t.source) for t in last) == ["B", "H"]
    assert sorted(t.shard for t in last) == [(0, 1), (1, 2)]
    with pytest.raises(ConfigError, match="even number"):
        improved_rotated_pincer(Network.ring(7))


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12])
def test_ring_all_reduce_moves_2_n_minus_1_over_n_v_per_node(n):
    V = n * 3 * 1024  # divisible: every node sends exactly 2(n-1)/n V
    for bidir in (False, True):
        s = ring_all_reduce(Network.ring(n), bidirectional=bidir, nbytes=V)
        np.testing.assert_allclose(s.bytes_sent(), 2 * (n - 1) / n * V)
        assert s.num_steps == 2 * (n - 1)
    # Any size: in total 2(n-1) V bytes cross the links.
    odd = ring_all_reduce(Network.ring(n), bidirectional=False, nbytes=1000 * 4 + 4)
    assert odd.bytes_sent().sum() == 2 * (n - 1) * odd.nbytes


def test_ring_reduce_scatter_and_all_gather_are_halves():
    net = Network.ring(6)
    rs, ag = ring_reduce_scatter(net), ring_all_gather(net)
    ar = ring_all_reduce(net)
    assert rs.num_steps + ag.num_steps == ar.num_steps
    assert rs.bytes_sent().sum() + ag.bytes_sent().sum() == ar.bytes_sent().sum()
    assert {t.op for st in rs for t in st} == {"combine"} and {t.op for st in ag for t in st} == {"copy"}


def owners_partition(s: Schedule):
    node, c0, c1 = s.owners
    cover = np.zeros((s.network.num_nodes, s.num_chunks), dtype=int)
    for n, a, b in zip(node, c0, c1):
        cover[n, a:b] += 1
    return cover


@pytest.mark.parametrize("net", [Network.torus((4, 4)), Network.grid((16, 4), (True, False)),
                                 Network.torus((2, 3, 4), cores_per_chip=2), Network.mesh((3, 3), cores_per_chip=2)])
def test_reduce_scatter_owners_partition_the_vector(net):
    s = reduce_scatter(net, colors=net.ndim)
    cover = owners_partition(s)
    assert (cover.sum(axis=0) == 1).all()  # every chunk owned by exactly one node
    per_node = cover.sum(axis=1)
    assert per_node.min() == per_node.max() == s.num_chunks // net.num_nodes


def test_dimension_by_dimension_shrinks_the_payload_by_the_row_size():
    net = Network.torus((4, 8))
    s = multi_dim_all_reduce(net, colors=1, bidirectional=False, nbytes=4 * 2**20)
    dims = net.link_dim[s.link]
    b = s.bytes
    first = s.step < 3   # reduce-scatter along dimension 0: 3 steps
    second = (s.step >= 3) & (s.step < 10)  # then 7 steps along dimension 1
    assert set(dims[first]) == {0} and set(dims[second]) == {1}
    assert b[first].max() == 4 * 2**20 // 4
    assert b[second].max() == b[first].max() // 8  # 1/size of the reduced fraction
    # Steps: 2 x ((X-1) + (Y-1)) instead of 2 x (X*Y - 1) for the 1-D ring.
    assert s.num_steps == 2 * (3 + 7)
    assert ring_all_reduce(net, bidirectional=False).num_steps == 2 * (32 - 1)
    # All-gather goes in the reverse dimension order.
    ag = s.phase == 1
    order = [int(dims[ag & (s.step == t)][0]) for t in range(10, 20)]
    assert order == [1] * 7 + [0] * 3


def test_multi_color_keeps_every_ici_link_busy_on_a_16x16_torus():
    net = Network.torus((16, 16))
    s = multi_color_all_reduce(net)
    assert s.num_colors == 2 and s.promises["conflict_free"] and s.conflict_free
    assert s.num_steps == 60
    for t in (0, 7, 14, 15, 29, 30, 59):
        used = np.unique(s.link[s.step == t])
        assert len(used) == net.num_links  # all 1024 directed links carry data
    # Color 0 starts along dimension 0, color 1 along dimension 1, on disjoint data.
    dims0 = set(net.link_dim[s.link[(s.step == 0) & (s.color == 0)]])
    dims1 = set(net.link_dim[s.link[(s.step == 0) & (s.color == 1)]])
    assert dims0 == {0} and dims1 == {1}
    c0 = set(np.concatenate([np.arange(a, b) for a, b in zip(s.start[s.color == 0], s.stop[s.color == 0])]))
    c1 = set(np.concatenate([np.arange(a, b) for a, b in zip(s.start[s.color == 1], s.stop[s.color == 1])]))
    assert not c0 & c1 and len(c0) + len(c1) == s.num_chunks


def test_multi_color_3d_rotates_the_dimension_order():
    net = Network.torus((4, 4, 4))
    s = multi_color_all_reduce(net)
    firsts = [set(net.link_dim[s.link[(s.step == 0) & (s.color == c)]]) for c in range(3)]
    assert firsts == [{0}, {1}, {2}]
    assert s.conflict_free


def test_grid_wrapping_in_one_dimension_uses_ring_there_and_line_elsewhere():
    net = Network.grid((16, 4), (True, False))
    s = multi_dim_all_reduce(net, colors=1, bidirectional=False)
    assert not net.link_wrap[s.link[net.link_dim[s.link] == 1]].any()
    assert net.link_wrap[s.link[net.link_dim[s.link] == 0]].any()  # the ring closes through wraparound
    # The line phase along dimension 1 sends in both directions.
    assert set(net.link_sign[s.link[net.link_dim[s.link] == 1]]) == {-1, 1}
    assert s.conflict_free
    execute(s, np.arange(64 * 10).reshape(64, 10))


def test_two_core_torus_zigzag_keeps_half_the_traffic_on_chip():
    net = Network.ring(8, cores_per_chip=2)
    s = ring_all_reduce(net, bidirectional=False)
    on_chip = s.bytes_sent(kind="on_chip").sum()
    ici = s.bytes_sent(kind="ici").sum()
    assert on_chip == ici  # a shard enters core 0, is summed, moves on chip to core 1, then on
    assert s.conflict_free
    # Multi-dimensional: first phase zigzags, later phases keep cores apart in opposite directions.
    md = multi_dim_all_reduce(Network.torus((4, 4), cores_per_chip=2), colors=1, bidirectional=False)
    assert md.promises["conflict_free"] and md.conflict_free
    assert md.bytes_sent(kind="on_chip").sum() > 0


def test_mesh_loops_use_both_directions_of_every_mesh_link():
    net = Network.mesh((4, 4), cores_per_chip=2)
    s = mesh_loop_all_reduce(net, colors=1)
    first = s.step < 7  # first reduce-scatter phase: loops of 8 cores along dimension 0
    used = np.unique(s.link[first])
    kinds = net.link_kind[used]
    dim0 = np.flatnonzero((net.link_kind == "ici") & (net.link_dim == 0))
    assert set(used[kinds == "ici"]) == set(dim0)  # both directions of every dimension-0 link
    corner_chips = set(net.link_src_chip[used[kinds == "on_chip"]])
    assert corner_chips == {c for c in range(16) if net.chip_coords[c][0] in (0, 3)}
    # The loops themselves are conflict-free; only the per-core lines of dimension 1 share links.
    assert s.promises["conflict_free"] is False
    assert all(net.link_dim[link] == 1 for _, link, _ in s.conflicts())
    execute(s, np.arange(32 * 5).reshape(32, 5))


def test_all_to_all_busiest_link_carries_the_documented_number_of_blocks():
    for n in (4, 6, 8, 9):
        net = Network.ring(n)
        s = all_to_all(net, nbytes=n * 1024)
        per_link = s.link_bytes().sum(axis=0)
        D = n // 2
        assert per_link.max() == D * (D + 1) // 2 * 1024
        assert s.num_steps == D and s.conflict_free


def test_all_gather_pincer_hop_counts():
    assert all_gather(Network.ring(8), algorithm="pincer").num_steps == 4  # ceil(7/2)
    assert all_gather(Network.ring(7), algorithm="pincer").num_steps == 3
    assert all_gather(Network.line(8), algorithm="pincer").num_steps == 7
    assert all_gather(Network.ring(8), algorithm="ring", bidirectional=True).num_steps == 7


def test_axis_subset_reduces_every_line_on_its_own():
    net = Network.torus((4, 8))
    s = multi_dim_all_reduce(net, dims=(1,))
    assert s.group_size == 8
    assert set(net.link_dim[s.link]) == {1}
    data = np.arange(32 * 6).reshape(32, 6)
    run = execute(s, data)
    rows = data.reshape(4, 8, 6).sum(axis=1)
    np.testing.assert_array_equal(run.buffers.reshape(4, 8, 6), np.repeat(rows[:, None], 8, axis=1))


def test_registry_and_bad_arguments():
    two_core = Network.torus((4, 4), cores_per_chip=2)
    for name in ALGORITHMS:
        s = build(name, two_core)
        assert isinstance(s, Schedule) and s.num_steps > 0
        execute(s, np.arange(32 * 3).reshape(32, 3))
    net = Network.torus((4, 4))
    with pytest.raises(ConfigError, match="unknown algorithm"):
        build("butterfly", net)
    with pytest.raises(ConfigError, match="colors"):
        multi_dim_all_reduce(net, colors=3)
    with pytest.raises(ConfigError, match="algorithm must be"):
        multi_dim_all_reduce(net, algorithm="tree")
    with pytest.raises(ConfigError, match="dims"):
        multi_dim_all_reduce(net, dims=(0, 0))
    with pytest.raises(ConfigError, match="permutation"):
        multi_dim_all_reduce(net, orders=[(0,)])
    with pytest.raises(ConfigError, match="nbytes"):
        ring_all_reduce(net, nbytes=-1)
    with pytest.raises(TopologyError, match="one-way"):
        rotated_pincer(Network.ring(5, bidirectional=False))
    with pytest.raises(TopologyError, match="no ring"):
        ring_all_reduce(Network.line(5))


def test_schedule_views():
    net = Network.ring(4)
    s = rotated_pincer(net, nbytes=1000, itemsize=4)
    t = s[0][0]
    assert t.byte_range[1] - t.byte_range[0] == t.bytes
    assert sum(len(step) for step in s.steps) == s.num_transfers == len(s.to_dataset().transfer)
    assert s.to_dataset().bytes.attrs["units"] == "B"
    assert s.with_size(4000).bytes.sum() == 4 * s.bytes.sum()
    assert "rotated_pincer" in repr(s)
    with pytest.raises(IndexError):
        s[10]
    assert math.isclose(s.bytes.sum(), 2 * 1000 * 3)  # N-1 steps, 2N links, V/N each


def test_on_chip_first_sums_the_cores_of_a_chip_before_the_network():
    net = Network.torus((4, 4), cores_per_chip=2)
    s = multi_dim_all_reduce(net, colors=1, bidirectional=False, core_scheme="on_chip_first")
    first = s.step == 0
    assert set(net.link_kind[s.link[first]]) == {"on_chip"}  # step 0: cores of a chip exchange halves
    assert set(net.link_kind[s.link[~first & (s.phase == 0)]]) == {"ici"}
    assert s.promises["conflict_free"] and s.conflict_free
    # Per chip, the on-chip reduce-scatter moves half the vector each way: V/2 per core.
    np.testing.assert_allclose(s.bytes_sent(kind="on_chip"), s.nbytes)  # V/2 in, V/2 back out
    data = np.random.default_rng(0).integers(0, 9, size=(32, 40))
    assert (execute(s, data).buffers == data.sum(axis=0)).all()
    with pytest.raises(ConfigError, match="core_scheme"):
        multi_dim_all_reduce(net, core_scheme="smart")


def test_importing_the_collectives_stays_light():
    import json
    import subprocess
    import sys

    code = ("import json, sys; import scwork.collectives; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    loaded = set(json.loads(out.stdout))
    assert not loaded & {"numba", "llvmlite", "xarray", "ipywidgets", "bokeh"}
