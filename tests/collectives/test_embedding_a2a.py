"""The embedding all-to-all from data.

Byte matrix by hand, routes against a hop-by-hop walk, hot links, step model, SOK.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import xarray as xr

import scwork
from scwork.collectives import (
    ICI_LATENCY_S,
    MAX_DEVICE_PAIRS,
    Network,
    device_hops,
    embedding_all_to_all,
    route_all_to_all,
)
from scwork.errors import ConfigError, InputError, TopologyError
from scwork.pipeline import expected_stats, step_model
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats, sok

DIMS = ("stack", "device", "sc", "partition")


def stats_of(unique, stacks=None, **extra):
    unique = np.asarray(unique)
    dims = DIMS if unique.ndim == 4 else ("minibatch",) + DIMS
    stacks = stacks or [f"s{k}" for k in range(unique.shape[dims.index("stack")])]
    return xr.Dataset({"unique_ids": (dims, unique), **extra}, coords={"stack": stacks})


# -- the byte matrix ----------------------------------------------------------------------------
def test_byte_matrix_by_hand():
    # 2 devices x 2 SparseCores: partitions 0, 1 on device 0, partitions 2, 3 on device 1.
    topo = scwork.Topology(2, 2)
    u = np.zeros((2, 2, 2, 4), np.int64)
    u[0, 0, 0] = [1, 2, 3, 4]      # stack a, device 0 SC 0: 3 rows from device 0, 7 from device 1
    u[0, 1, 1] = [5, 0, 0, 6]      # stack a, device 1 SC 1: 5 from device 0, 6 from device 1
    u[1, 0, 1] = [0, 0, 2, 0]      # stack b, device 0 SC 1: 2 from device 1
    a2a = embedding_all_to_all(stats_of(u, ["a", "b"]), topo, widths={"a": 4, "b": 16},
                               dtype_bytes={"a": 4, "b": 2}, gradient_dtype_bytes=4, index_bytes=1)
    # rows a: 16 B + 1, gradients 16 B + 1; rows b: 32 B + 1, gradients 64 B + 1.
    fwd = a2a["bytes"].sel(direction="forward").values
    bwd = a2a["bytes"].sel(direction="backward").values
    # forward[owner, requester]
    assert fwd.tolist() == [[3 * 17, 5 * 17], [7 * 17 + 2 * 33, 6 * 17]]
    # backward[requester, owner]
    assert bwd.tolist() == [[3 * 17, 7 * 17 + 2 * 65], [5 * 17, 6 * 17]]
    assert a2a["bytes"].dims == ("source", "destination", "direction")
    assert a2a["bytes"].attrs["units"] == "bytes"
    assert a2a["rows"].values.tolist() == [[3, 9], [5, 6]]
    assert a2a["remote_bytes"].values.tolist() == [7 * 17 + 2 * 33 + 5 * 17, 7 * 17 + 2 * 65 + 5 * 17]
    assert a2a["sent_bytes"].sel(direction="forward").values.tolist() == [5 * 17, 7 * 17 + 2 * 33]
    assert a2a["received_bytes"].sel(direction="backward").values.tolist() == [5 * 17, 7 * 17 + 2 * 65]
    assert a2a["stack_bytes"].sel(stack="b").values.tolist() == [2 * 33, 2 * 65]
    assert int(a2a["stack_bytes"].sum()) == int(a2a["bytes"].sum())


def test_minibatches_are_summed_and_dropped_ids_clipped():
    topo = scwork.Topology(2, 1)
    # (minibatch, stack, device, sc, partition)
    u = np.array([[[[1, 2]], [[3, 4]]], [[[5, 6]], [[7, 9]]]])[:, None]
    limit = xr.DataArray([8], dims="stack")
    a2a = embedding_all_to_all(stats_of(u, ["t"], configured_max_unique_ids_per_partition=limit), topo, widths=1,
                               dtype_bytes=1)
    # rows[g, h] = sum over mini-batches, each clipped to 8: device 1 asks device 1 for 4 + min(9, 8).
    assert a2a["rows"].values.tolist() == [[6, 8], [10, 12]]


@pytest.mark.parametrize(("bad", "error", "match"), [
    ({"stats": xr.Dataset()}, InputError, "unique_ids"),
    ({"topology": scwork.Topology(3, 2)}, InputError, "computed for 2 devices"),
    ({"widths": {"other": 4}}, ConfigError, "no entry for stack"),
    ({"widths": 0}, ConfigError, "widths of stack 't' must be an integer >= 1"),
    ({"dtype_bytes": 2.5}, ConfigError, "dtype_bytes"),
    ({"index_bytes": -1}, ConfigError, "index_bytes"),
    ({"topology": "2x2"}, TopologyError, "scwork.Topology"),
])
def test_bad_inputs_are_refused(bad, error, match):
    args = {"stats": stats_of(np.ones((1, 2, 2, 4), np.int64), ["t"]), "topology": scwork.Topology(2, 2),
            "widths": 4}
    args.update(bad)
    with pytest.raises(error, match=match):
        embedding_all_to_all(args.pop("stats"), args.pop("topology"), **args)


def test_too_many_devices_are_refused_before_anything_is_read():
    side = int(np.ceil(np.sqrt(MAX_DEVICE_PAIRS))) + 1
    big = scwork.Topology(side, 1)
    with pytest.raises(TopologyError, match=f"{side:,} devices.*{side * side:,} device pairs.*MAX_DEVICE_PAIRS"):
        embedding_all_to_all(xr.Dataset(), big, widths=8)
    with pytest.raises(TopologyError, match="MAX_DEVICE_PAIRS"):
        route_all_to_all(np.zeros((2, 2)), big)


# -- routing --------------------------------------------------------------------------------------
def walk(matrix, topo, tie="split"):
    """Reference: every pair's route hop by hop (x, then y, then z), bytes added to each link it crosses."""
    net = Network.from_topology(topo)
    k, shape, wrap = topo.devices_per_chip, net.shape, net.wraparound
    loads = np.zeros(net.num_links)

    def link(a, b):
        return int(net.link_ids([a * k], [b * k])[0])

    for g, h in itertools.product(range(len(matrix)), repeat=2):
        w = float(matrix[g, h])
        if w == 0 or g == h:
            continue
        if g // k == h // k:
            loads[int(net.link_ids([g], [h])[0])] += w
            continue
        target = np.unravel_index(h // k, shape)
        paths = [(list(np.unravel_index(g // k, shape)), w)]
        for d, X in enumerate(shape):
            moved = []
            for pos, part in paths:
                up, down = (target[d] - pos[d]) % X, (pos[d] - target[d]) % X
                if up == 0:
                    moved.append((pos, part))
                    continue
                if not wrap[d]:
                    ways = [(1, up, 1.0)] if target[d] > pos[d] else [(-1, down, 1.0)]
                elif up != down:
                    ways = [(1, up, 1.0)] if up < down else [(-1, down, 1.0)]
                else:
                    ways = [(1, up, 0.5), (-1, down, 0.5)] if tie == "split" else [(1, up, 1.0)]
                for sign, hops, frac in ways:
                    p = list(pos)
                    for _ in range(hops):
                        a = int(np.ravel_multi_index(p, shape))
                        p[d] = (p[d] + sign) % X
                        loads[link(a, int(np.ravel_multi_index(p, shape)))] += part * frac
                    moved.append((p, part * frac))
            paths = moved
    return loads


TOPOLOGIES = [
    scwork.Topology(5, 1, chip="v5p"),                                        # odd ring: no ties
    scwork.Topology(4, 1, chip="v5p"),                                        # even ring: ties
    scwork.Topology(4, 1, chip="v5p", wraparound=(False,)),                   # line
    scwork.Topology(6, 1, chip="v5p", shape=(3, 2), wraparound=(False, False)),
    scwork.Topology(16, 1, chip="v5p", shape=(4, 4)),                         # torus
    scwork.Topology(12, 1, chip="v5p", shape=(4, 3), wraparound=(True, False)),
    scwork.Topology(24, 1, chip="v5p", shape=(2, 3, 4)),
    scwork.Topology(6, 2, chip="tpu7x", shape=(3, 2), devices_per_chip=2),   # two devices per chip
]


@pytest.mark.parametrize("tie", ["split", "positive"])
@pytest.mark.parametrize("topo", TOPOLOGIES, ids=str)
def test_routes_match_a_hop_by_hop_walk_and_conserve_bytes(topo, tie):
    G = topo.num_devices
    matrix = np.random.default_rng(G).integers(0, 1000, size=(G, G))
    r = route_all_to_all(matrix, topo, tie=tie)
    loads = r["link_bytes"].sel(direction="all_to_all").values
    np.testing.assert_array_equal(loads, walk(matrix, topo, tie))
    # exact conservation: bytes over links = bytes x hops over pairs
    assert loads.sum() == float((matrix * device_hops(topo)).sum())
    assert float(r["total_link_bytes"][0]) == loads.sum()


def test_routes_by_hand_on_a_3x3_torus():
    topo = scwork.Topology(9, 1, chip="v5p", shape=(3, 3))
    m = np.zeros((9, 9))
    m[0, 8] = 300.0                 # (0,0) -> (2,2): x the short way (-1, through the wraparound), then y (-1)
    r = route_all_to_all(m, topo)
    used = np.flatnonzero(r["link_bytes"][:, 0].values)
    pairs = sorted((int(r.source_chip[i]), int(r.destination_chip[i])) for i in used)
    assert pairs == [(0, 6), (6, 8)]                 # (0,0)->(2,0), (2,0)->(2,2)
    assert r["link_bytes"][used, 0].values.tolist() == [300.0, 300.0]
    assert device_hops(topo)[0, 8] == 2
    # time = bytes / bandwidth of the busiest link + 2 hops x 1 us (v5p: 9e10 B/s)
    assert float(r["time"][0]) == pytest.approx(300 / 9e10 + 2 * ICI_LATENCY_S, rel=1e-12)
    assert float(r["latency_time"][0]) == pytest.approx(2 * ICI_LATENCY_S)


def test_ties_on_an_even_ring():
    topo = scwork.Topology(4, 1, chip="v5p")
    m = np.zeros((4, 4))
    m[0, 2] = 100.0
    net = Network.from_topology(topo)
    links = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(net.link_src_chip, net.link_dst_chip))}
    split = route_all_to_all(m, topo)["link_bytes"][:, 0].values
    assert {p: split[i] for p, i in links.items() if split[i]} == {(0, 1): 50, (1, 2): 50, (0, 3): 50, (3, 2): 50}
    positive = route_all_to_all(m, topo, tie="positive")["link_bytes"][:, 0].values
    assert {p: positive[i] for p, i in links.items() if positive[i]} == {(0, 1): 100, (1, 2): 100}
    with pytest.raises(ConfigError, match="tie must be one of"):
        route_all_to_all(m, topo, tie="left")


def test_devices_of_one_chip_use_their_on_chip_link():
    topo = scwork.Topology.for_chip("tpu7x", num_chips=2)          # 2 chips x 2 devices
    m = np.zeros((4, 4))
    m[0, 1] = 1e6                                                   # same chip
    r = route_all_to_all(m, topo)
    hot = int(r["hottest_link"][0])
    assert str(r["kind"][hot].values) == "on_chip" and float(r["total_link_bytes"][0]) == 1e6
    assert float(r["latency_time"][0]) == pytest.approx(scwork.collectives.ON_CHIP_LATENCY_S)


@pytest.mark.parametrize(("bad", "match"), [(np.zeros((3, 3)), "3 x 3 but the topology has 4"),
                                        (-np.ones((4, 4)), ">= 0"), (np.zeros(4), "2-D")])
def test_bad_matrices_are_refused(bad, match):
    with pytest.raises(InputError, match=match):
        route_all_to_all(bad, scwork.Topology(4, 1))


# -- skew shows up as a hot link -------------------------------------------------------------------
TORUS = scwork.Topology.for_chip("v5p", shape=(4, 4))
P = TORUS.num_partitions
FEATURES = [FeatureSpec("f", TableSpec("t", vocab_size=4096 * P, embedding_dim=32))]
HOT_PARTITION = 5                                                   # device 1 = chip (0, 1)
WIDTH = 512                                     # 2 KiB rows: bandwidth, not the 1 us hops, sets the time


def batch_stats(hot: bool):
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 4096, size=(16 * P, 8)) * P + HOT_PARTITION if hot \
        else rng.integers(0, 4096 * P, size=(16 * P, 8))
    return compute_stats(FeatureBatch.from_dense({"f": ids}), FEATURES, TORUS, stacking=None, num_threads=1,
                         backend="numpy")


@pytest.fixture(scope="module")
def routed():
    out = {}
    for name in ("uniform", "hot"):
        stats = batch_stats(name == "hot")
        a2a = embedding_all_to_all(stats, TORUS, widths=WIDTH)
        out[name] = (stats, a2a, route_all_to_all(a2a, TORUS))
    return out


def test_ids_of_one_partition_make_a_hot_link(routed):
    _, hot_a2a, hot = routed["hot"]
    _, uni_a2a, uni = routed["uniform"]
    owner_chip = HOT_PARTITION // TORUS.sparsecores_per_device
    # Every forward row leaves the owner's chip, every gradient enters it.
    fwd_hot, bwd_hot = (int(hot["hottest_link"].sel(direction=d)) for d in ("forward", "backward"))
    assert int(hot["source_chip"][fwd_hot]) == owner_chip
    assert int(hot["destination_chip"][bwd_hot]) == owner_chip
    assert (hot_a2a["bytes"].sel(direction="forward").values[np.arange(16) != owner_chip] == 0).all()
    # Similar volumes, very different hottest links and times.
    ratio = float(hot_a2a["remote_bytes"][0]) / float(uni_a2a["remote_bytes"][0])
    assert 0.8 < ratio < 1.2
    for d in ("forward", "backward"):
        assert float(hot["hottest_link_bytes"].sel(direction=d)) > 3 * float(uni["hottest_link_bytes"].sel(direction=d))
        assert float(hot["time"].sel(direction=d)) > 3 * float(uni["time"].sel(direction=d))
        assert float(hot["link_imbalance"].sel(direction=d)) > 3 > float(uni["link_imbalance"].sel(direction=d))
    # hot: every route leaves (0,1) through its 4 links, so one carries a large share of all link bytes;
    # uniform: 64 links share them about evenly
    assert float(hot["hottest_link_share"][0]) > 0.15
    assert float(uni["hottest_link_share"][0]) < 0.05


def test_time_is_the_busiest_link_plus_the_farthest_route(routed):
    for name in ("uniform", "hot"):
        _, a2a, r = routed[name]
        for d in ("forward", "backward"):
            one = r.sel(direction=d)
            busiest = float((one["link_bytes"] / one["bandwidth"]).max())
            hops = device_hops(TORUS)[a2a["bytes"].sel(direction=d).values > 0].max()
            assert float(one["time"]) == pytest.approx(busiest + hops * ICI_LATENCY_S, rel=1e-12)
            assert float(one["total_link_bytes"]) == float((a2a["bytes"].sel(direction=d).values
                                                            * device_hops(TORUS)).sum())


# -- the step model ----------------------------------------------------------------------------------
KW = {"widths": {"t": WIDTH}, "topology": TORUS, "tc_forward_s": 1e-4}


def test_step_model_default_is_the_uniform_model(routed):
    stats = routed["hot"][0]
    default = step_model(stats, **KW)
    assert default.ici_links is None and "ici_link_bytes" not in default.to_dataset()
    assert default.summary() == step_model(stats, a2a="uniform", **KW).summary()
    with pytest.raises(ConfigError, match="a2a must be 'uniform'"):
        step_model(stats, a2a="routed", **KW)


def test_step_model_routes_the_statistics(routed):
    times = {}
    for name in ("uniform", "hot"):
        m = step_model(routed[name][0], a2a="data", **KW)
        links = m.ici_links
        assert links is not None and "dimension-order routing" in " ".join(m.assumptions)
        # one stack, one mini-batch: the phase is one routed all-to-all of the model's row bytes
        fwd_row = WIDTH * 4 + m.params.ici_index_bytes
        rows = embedding_all_to_all(routed[name][0], TORUS, widths=WIDTH, dtype_bytes=4,
                                    index_bytes=m.params.ici_index_bytes)
        own = route_all_to_all(rows, TORUS)
        assert fwd_row == int(rows["row_bytes"].sel(direction="forward").item())
        assert m.phase_time["ici_forward"] == pytest.approx(float(own["time"].sel(direction="forward")), rel=1e-12)
        np.testing.assert_allclose(links["link_bytes"].sel(direction="forward"),
                                   own["link_bytes"].sel(direction="forward"))
        ds = m.to_dataset()
        assert ds["ici_link_bytes"].dims == ("link", "direction")
        assert ds.attrs["ici_hottest_link"][0] == str(links["hottest_link_label"].sel(direction="forward").values)
        again = m.replace(host_threads=2)                                 # replace keeps a2a
        np.testing.assert_array_equal(again.ici_links["link_bytes"], links["link_bytes"])
        assert again.phase_time["ici_forward"] == m.phase_time["ici_forward"]
        times[name] = m.phase_time["ici_forward"]
    assert times["hot"] > 3 * times["uniform"]


def test_step_model_on_one_device_has_no_ici():
    topo = scwork.Topology.for_chip("v5p", num_chips=1)
    m = step_model(expected_stats({"t": 8.0}, topo, batch_size=64), widths={"t": 8}, topology=topo, a2a="data")
    assert m.phase_time["ici_forward"] == 0.0 and str(m.ici_links["hottest_link_label"][0].values) == "none"


def test_expected_stats_can_be_routed_too():
    topo = scwork.Topology.for_chip("v5p", shape=(2, 2))
    even = expected_stats({"t": 20.0}, topo, batch_size=4096)
    hot = expected_stats({"t": 20.0}, topo, batch_size=4096, hot_fraction=1.0, hot_partition=5)
    t = {name: step_model(s, widths={"t": 64}, topology=topo, a2a="data").phase_time["ici_backward"]
         for name, s in (("even", even), ("hot", hot))}
    assert t["hot"] > 2 * t["even"]


@pytest.mark.slow
def test_4096_chips_route_within_the_limit():
    topo = scwork.Topology(4096, 4, chip="v5p", shape=(16, 16, 16))
    m = np.ones((4096, 4096))
    r = route_all_to_all(m, topo)
    # uniform traffic on a symmetric torus: every link carries the same bytes
    loads = r["link_bytes"][:, 0].values
    assert loads.min() == loads.max() and loads.sum() == float(device_hops(topo).sum())


# -- SOK -------------------------------------------------------------------------------------------
def test_sok_uniform_exchange_runs_at_the_link_bandwidth():
    G = 4
    keys = [np.arange(8 * G) + g for g in range(G)]                 # every GPU asks every GPU for 8 keys
    plan = sok.dispatch(keys, num_gpus=G)
    t = sok.all_to_all_time(plan, embedding_dim=16, bandwidth=1e10)
    for phase in ("keys", "vectors", "gradients"):
        one = t.sel(phase=phase)
        assert float(one["time"]) == pytest.approx(float(one["balanced_time"]))
        assert float(one["busbw"]) == pytest.approx(1e10)           # nccl-tests: busbw = link bandwidth
    # vectors: 3 peers x 8 keys x 64 B sent and received by every GPU
    assert float(t["time"].sel(phase="vectors")) == pytest.approx(3 * 8 * 64 / 1e10)


def test_sok_skewed_keys_wait_for_the_owner():
    G = 4
    keys = [np.arange(0, 32 * G, G) for _ in range(G)]             # every key lives on GPU 0
    plan = sok.dispatch(keys, num_gpus=G)
    t = sok.all_to_all_time(plan, embedding_dim=16, bandwidth=1e10, latency=1e-6)
    vec = t.sel(phase="vectors")
    assert int(vec["bottleneck_gpu"]) == 0
    # GPU 0 sends 3 x 32 vectors of 64 B; an even spread would need a quarter of that
    assert float(vec["time"]) == pytest.approx(1e-6 + 3 * 32 * 64 / 1e10)
    assert float(vec["balanced_time"]) == pytest.approx(1e-6 + 3 * 32 * 64 / 4 / 1e10)
    assert t["bytes"].sel(phase="vectors").values[0].tolist() == [32 * 64] * 4
    with pytest.raises(ConfigError, match="bandwidth must be a finite number > 0"):
        sok.all_to_all_time(plan, embedding_dim=16, bandwidth=0)
    with pytest.raises(ConfigError, match="latency"):
        sok.all_to_all_time(plan, embedding_dim=16, bandwidth=1e9, latency=-1)


# -- the timeline widget -----------------------------------------------------------------------------
@pytest.mark.requires_widgets
def test_pipeline_timeline_names_the_hottest_link():
    pytest.importorskip("ipywidgets")
    pytest.importorskip("bokeh")
    pytest.importorskip("jupyter_bokeh")
    import re

    from scwork.widgets import PipelineTimeline

    topo = scwork.Topology.for_chip("v5p", shape=(2, 2))
    stats = expected_stats({"u": 20.0}, topo, batch_size=4096, hot_fraction=1.0, hot_partition=5)
    w = PipelineTimeline(stats, topology=topo, widths={"u": 64}, tc_forward_s=1e-4, a2a="data")
    text = re.sub("<[^>]+>", " ", w._summary_div.text).replace("&gt;", ">")
    # device 1 = chip (0,1) sends every row: (0,1)->(1,1) carries the rows for (1,0) and (1,1), half of all
    assert "ICI forward all-to-all" in text and "hottest link (0,1)->(1,1)" in text and "(50% of all link" in text
    notes = [n for n, p in zip(w._schedule_views["pipelined"].gantt.bars.data["ici_note"],
                               w._schedule_views["pipelined"].gantt.bars.data["phase"]) if p == "ici_backward"]
    assert notes and all("hottest link (0,0)->(0,1)" in n for n in notes)
    uniform = PipelineTimeline(stats, topology=topo, widths={"u": 64}, tc_forward_s=1e-4)
    assert "uniform all-to-all" in re.sub("<[^>]+>", " ", uniform._summary_div.text)


# -- regressions of issue 22 ----------------------------------------------------------------------------
def _two_device_stats(u, dtype=None):
    import xarray as xr

    u = np.asarray(u, dtype=dtype)
    return xr.Dataset({"unique_ids": (("stack", "device", "sc", "partition"), u)}, coords={"stack": ["t"]})


@pytest.mark.parametrize("kwargs", [dict(widths=2**62), dict(widths=2**62, dtype_bytes=4), dict(widths=2**63),
                                    dict(widths=4, dtype_bytes=2**64), dict(widths=1, index_bytes=2**63),
                                    dict(widths=2**40, dtype_bytes=2**21)])
def test_byte_sizes_past_int64_are_refused_before_wrapping(kwargs):
    """widths=2**62 x 4 bytes wrapped to 0 bytes in int64 before the overflow check ran."""
    from scwork.errors import ConfigError

    with pytest.raises(ConfigError, match="does not fit in int64"):
        embedding_all_to_all(_two_device_stats([[[[1, 2]], [[0, 5]]]]), scwork.Topology(2, 1), **kwargs)


def test_largest_exact_byte_sizes_are_kept_exactly():
    a2a = embedding_all_to_all(_two_device_stats([[[[1, 0]], [[0, 0]]]]), scwork.Topology(2, 1),
                               widths=2**61, dtype_bytes=2, index_bytes=2**62 - 1)
    assert int(a2a["bytes"].sel(source=0, destination=0, direction="forward")) == 2**63 - 1


@pytest.mark.parametrize("counts", [[[[[1.5, 2]], [[0, 5]]]], [[[[np.nan, 2]], [[0, 5]]]], [[[[np.inf, 2]], [[0, 5]]]],
                                    [[[[-1, 2]], [[0, 5]]]], [[[[True, False]], [[False, True]]]],
                                    [[[[2**62, 2**62]], [[2**62, 5]]]]])
def test_nan_fractional_and_huge_unique_counts_are_input_errors(counts):
    from scwork.errors import InputError

    with pytest.raises(InputError, match="unique_ids"):
        embedding_all_to_all(_two_device_stats(counts), scwork.Topology(2, 1), widths=1)


def test_whole_float_counts_are_accepted_as_ints():
    a2a = embedding_all_to_all(_two_device_stats([[[[1.0, 2.0]], [[0.0, 5.0]]]]), scwork.Topology(2, 1), widths=4,
                               dtype_bytes=2)
    assert a2a["bytes"].sel(direction="forward").values.tolist() == [[8, 0], [16, 40]]


def test_route_time_must_be_finite():
    from scwork.errors import ConfigError

    topo = scwork.Topology(4, 1, chip="v5p", shape=(2, 2))
    m = np.zeros((4, 4))
    m[0, 3] = 1e10
    with pytest.raises(ConfigError, match="not a finite number of seconds"):
        route_all_to_all(m, topo, link_bandwidth=1e-300)
    with pytest.raises(ConfigError, match="must be a name and numbers"):
        route_all_to_all(m, topo, link_bandwidth=[1.0])
    assert np.isfinite(route_all_to_all(m, topo, link_bandwidth=1.0)["time"].values).all()


def test_tie_that_is_not_a_name_is_a_config_error():
    """An array as tie made 'tie not in TIE_RULES' raise ValueError (found by the fuzz run)."""
    from scwork.errors import ConfigError

    for tie in (np.array([]), np.array(["split", "split"]), 5, None):
        with pytest.raises(ConfigError, match="tie must be one of"):
            route_all_to_all(np.zeros((2, 2)), scwork.Topology(2, 1), tie=tie)
