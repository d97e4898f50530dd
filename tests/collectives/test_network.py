"""Networks: constructors, links, impossible requests, rings through all nodes, layout."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import scwork
from scwork.collectives import ICI_LATENCY_S, LinkClass, Network, mesh_loop_all_reduce
from scwork.errors import ConfigError, TopologyError


def expected_ici_links(shape, wrap):
    """Directed ICI links of a grid, counted by hand: per dimension and line,
    s-1 cables (s with wraparound when s > 2), two directions each."""
    total = 0
    for d, s in enumerate(shape):
        lines = math.prod(shape) // s
        cables = s if (wrap[d] and s > 2) else s - 1
        total += 2 * cables * lines
    return total


@pytest.mark.parametrize("shape,wrap", [
    ((8,), (True,)), ((8,), (False,)), ((2,), (True,)), ((4, 4), (True, True)),
    ((16, 4), (True, False)), ((3, 5), (False, False)), ((2, 3, 4), (True, False, True)),
    ((16, 16, 16), (True, True, True)), ((1, 6), (True, True)),
])
def test_link_counts_match_hand_count(shape, wrap):
    net = Network.grid(shape, wrap)
    assert net.num_nodes == math.prod(shape)
    assert net.num_links == expected_ici_links(shape, wrap)
    # Every link joins grid neighbours along its dimension.
    a = net.chip_coords[net.link_src_chip]
    b = net.chip_coords[net.link_dst_chip]
    diff = (b - a)[np.arange(net.num_links), net.link_dim]
    size = np.asarray(shape)[net.link_dim]
    assert np.all(diff % size == net.link_sign % size)
    assert np.all(net.link_wrap == (np.abs(diff) > 1))


def test_shorthand_constructors():
    assert Network.ring(8).wraparound == (True,)
    assert Network.line(8).num_links == 14
    assert Network.torus((4, 4)).wraparound == (True, True)
    assert Network.mesh((4, 4)).wraparound == (False, False)
    assert Network.ring(8, bidirectional=False).num_links == 8
    assert Network.grid((5, 5)).wraparound == (True, True)  # default: sizes > 2 wrap
    assert Network.grid((2, 5)).wraparound == (False, True)


def test_cores_per_chip_adds_on_chip_links():
    net = Network.torus((3, 3), cores_per_chip=2)
    assert net.num_nodes == 18
    on_chip = net.link_kind == "on_chip"
    assert on_chip.sum() == 9 * 2
    assert np.all(net.link_src_chip[on_chip] == net.link_dst_chip[on_chip])
    assert net.link_classes["on_chip"].bandwidth > 0
    # Any core may use an ICI link; a core pair on one chip uses its on-chip link.
    l_ici = net.link_ids([net.node((0, 0), 1)], [net.node((1, 0), 0)])[0]
    l_chip = net.link_ids([net.node((0, 0), 0)], [net.node((0, 0), 1)])[0]
    assert net.link_kind[l_ici] == "ici" and net.link_kind[l_chip] == "on_chip"
    assert net.link_ids([net.node((0, 0), 0)], [net.node((1, 0), 1)])[0] == l_ici


def test_ici_defaults_come_from_the_hardware_catalog():
    v5e = scwork.hardware.get("v5e")
    net = Network.torus((4, 4))
    assert net.link_classes["ici"].bandwidth == v5e.ici_link_bytes_per_s == 4.5e10
    assert net.link_classes["ici"].latency == ICI_LATENCY_S == 1e-6
    v5p = Network.torus((4, 4, 4), chip="v5p")
    assert v5p.link_classes["ici"].bandwidth == scwork.hardware.get("v5p").ici_link_bytes_per_s
    assert "catalog" in v5p.link_classes["ici"].source
    custom = Network.ring(4, link_bandwidth=1e9, link_latency=2e-6)
    assert (custom.link_bandwidth == 1e9).all() and (custom.link_latency == 2e-6).all()
    two = Network.ring(4, cores_per_chip=2)
    assert two.link_classes["on_chip"].bandwidth == scwork.hardware.get("v5e").hbm_bandwidth_bytes_per_s
    assert "assum" in two.link_classes["on_chip"].source


def test_from_topology_takes_shape_wraparound_and_chip():
    topo = scwork.Topology.for_chip("v5e", shape=(16, 4), wraparound=(True, False))
    net = Network.from_topology(topo)
    assert net.shape == (16, 4) and net.wraparound == (True, False)
    assert net.num_links == expected_ici_links((16, 4), (True, False))
    v5p = Network.from_topology(scwork.Topology.for_chip("v5p", shape=(4, 4, 4)), cores_per_chip=2)
    assert v5p.link_classes["ici"].bandwidth == 9e10 and v5p.num_nodes == 128
    with pytest.raises(TopologyError, match="scwork.Topology"):
        Network.from_topology((4, 4))
    dual = Network.from_topology(scwork.Topology.for_chip("tpu7x", shape=(2, 2, 2)))
    assert dual.cores_per_chip == 2 and dual.num_nodes == 16  # two JAX devices per chip
    assert scwork.collectives.Network is Network  # lazy subpackage of scwork


@pytest.mark.parametrize("call,match", [
    (lambda: Network.ring(1), "ring of one"),
    (lambda: Network.ring(0), "at least one node"),
    (lambda: Network.line(0), "at least one chip"),
    (lambda: Network.grid((4, 0)), "no nodes"),
    (lambda: Network.grid(()), "empty"),
    (lambda: Network.grid((4, 4), wraparound=(True,)), "one flag per dimension"),
    (lambda: Network.grid((4, 4), wraparound=(True, True, False)), "one flag per dimension"),
    (lambda: Network.ring(4, link_bandwidth=-1.0), ">= 0"),
    (lambda: Network.ring(4, link_bandwidth=0.0), "0 bytes/s"),
    (lambda: Network.ring(4, link_latency=-1e-6), ">= 0"),
    (lambda: Network.ring(4, cores_per_chip=2, on_chip_bandwidth=-5.0), ">= 0"),
    (lambda: Network.grid((2, 2, 2, 2)), "1 to 3"),
    (lambda: Network.grid((4, 4), cores_per_chip=0), ">= 1"),
    (lambda: Network.grid((4.5, 4)), "integer"),
])
def test_impossible_networks_raise_topology_error(call, match):
    with pytest.raises(TopologyError, match=match):
        call()


def test_topology_errors_are_config_and_value_errors():
    with pytest.raises(ValueError):
        Network.ring(1)
    with pytest.raises(ConfigError):
        LinkClass("ici", float("nan"), 1e-6)


def test_link_lookup_rejects_non_neighbours_with_a_hint():
    net = Network.mesh((4, 4))
    with pytest.raises(TopologyError, match="no link joins node 0 .* to node 3"):
        net.link_ids([0], [3])  # (0,0) -> (0,3): no wraparound on a mesh
    with pytest.raises(TopologyError, match="node ids"):
        net.link_ids([0], [99])
    torus = Network.torus((4, 4))
    assert torus.link_wrap[torus.link_ids([0], [3])[0]]


def test_mesh_loops_need_two_cores_per_chip():
    with pytest.raises(TopologyError, match="2 cores per chip.*cores_per_chip=2"):
        mesh_loop_all_reduce(Network.mesh((3, 3)))


def assert_is_ring(net, ring):
    assert sorted(ring.tolist()) == list(range(net.num_nodes))
    net.link_ids(ring, np.roll(ring, -1))  # raises if two consecutive nodes are not linked


@pytest.mark.parametrize("shape,wrap,k", [
    ((8,), (True,), 1), ((2,), (False,), 1), ((4, 4), (True, True), 1), ((3, 4), (False, False), 1),
    ((3, 3), (True, True), 1), ((3, 5), (True, True), 1), ((5,), (False,), 2), ((3, 3), (False, False), 2),
    ((2, 3, 3), (False, False, False), 1), ((3, 3, 3), (True, True, True), 1), ((1,), (False,), 3),
    ((16, 16), (True, True), 1), ((4, 4), (True, True), 2), ((3, 3, 3), (False, False, False), 2),
])
def test_ring_order_visits_every_node_over_existing_links(shape, wrap, k):
    net = Network.grid(shape, wrap, cores_per_chip=k)
    assert_is_ring(net, net.ring_order())


@pytest.mark.parametrize("shape,wrap", [((5,), (False,)), ((3, 3), (False, False)), ((3, 5, 1), (False, False, False))])
def test_no_ring_without_wraparound_or_second_core(shape, wrap):
    net = Network.grid(shape, wrap)
    with pytest.raises(TopologyError, match="no ring through all its nodes.*2 cores per chip"):
        net.ring_order()
    assert_is_ring(Network.grid(shape, wrap, cores_per_chip=2),
                   Network.grid(shape, wrap, cores_per_chip=2).ring_order())


def test_mesh_loop_turns_on_chip_at_the_corners():
    net = Network.line(5, cores_per_chip=2)
    ring = net.ring_order()
    links = net.link_ids(ring, np.roll(ring, -1))
    on_chip = net.link_kind[links] == "on_chip"
    turning_chips = set(net.link_src_chip[links[on_chip]].tolist())
    assert turning_chips == {0, 4}  # only the two end chips route between their cores
    # Every directed ICI link is used exactly once by the loop.
    ici = links[~on_chip]
    assert sorted(ici.tolist()) == sorted(np.flatnonzero(net.link_kind == "ici").tolist())


def test_path_order_is_a_hamiltonian_path():
    for net in (Network.mesh((3, 4)), Network.grid((2, 3, 3), (True, False, True), cores_per_chip=2)):
        path = net.path_order()
        assert sorted(path.tolist()) == list(range(net.num_nodes))
        net.link_ids(path[:-1], path[1:])


def test_layout_dataset_for_drawing():
    net = Network.torus((3, 4), cores_per_chip=2)
    ds = net.layout()
    assert dict(ds.sizes) == {"node": 24, "link": net.num_links}
    assert ds.bandwidth.attrs["units"] == "B/s" and ds.latency.attrs["units"] == "s"
    # The two cores of a chip are side by side around the chip position.
    x = ds.x.values.reshape(12, 2)
    assert np.all(x[:, 0] < x[:, 1])
    np.testing.assert_allclose(x.mean(axis=1), np.repeat(np.arange(3), 4))
    ici = ds.kind.values == "ici"
    assert (ds.source_node.values[ici] == -1).all() and (ds.source_node.values[~ici] >= 0).all()
    ring = Network.ring(8).layout()
    r = np.hypot(ring.x.values, ring.y.values)
    np.testing.assert_allclose(r, r[0])  # rings are drawn on a circle
    assert ring.label.values.tolist() == list("ABCDEFGH")


def test_labels_and_repr():
    net = Network.torus((2, 2), cores_per_chip=2)
    assert net.node_label(3) == "(0,1).1"
    assert "8 nodes" in repr(net)
    with pytest.raises(TopologyError, match="outside the grid"):
        net.node((2, 0))
    with pytest.raises(TopologyError, match="core 2"):
        net.node((0, 0), 2)


def test_every_small_torus_has_a_ring():
    for shape in itertools.product(range(1, 6), repeat=2):
        if math.prod(shape) < 2:
            continue
        net = Network.torus(shape)
        assert_is_ring(net, net.ring_order())


def test_networks_beyond_any_pod_are_refused_before_allocating():
    """torus:100000x100000 raised numpy's MemoryError (74.5 GiB of node arrays)."""
    from scwork.collectives.network import MAX_NODES
    from scwork.testing import check_surface

    _, error = check_surface("collectives.network", lambda: Network.torus((100_000, 100_000)), seconds=10)
    assert isinstance(error, TopologyError) and "MAX_NODES" in str(error)
    assert Network.torus((16, 24, 24)).num_nodes == 9216 <= MAX_NODES   # a TPU7x pod still works
