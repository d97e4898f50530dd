"""Fuzz: the collectives engine (networks, algorithm builders, cost, execute, frames).

Every case runs through :func:`scwork.testing.check_surface`: a bad input must end in
a typed scwork error, never an untyped exception, a hang or unbounded memory. Results
are held to cheap invariants: a network has ``prod(shape) * cores_per_chip`` nodes; a
schedule a builder returns runs on valid data to the exact sum (an integer
all-reduce) without a :class:`~scwork.errors.ScheduleError`; costs are finite and
non-negative; frames end complete.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.collectives import (
    ALGORITHMS,
    Network,
    bandwidths,
    build,
    bus_factor,
    cost,
    execute,
    frames,
    scaling_book_time,
)
from scwork.errors import ScheduleError
from scwork.testing import (
    EDGE_FLOATS,
    arguments,
    check_surface,
    fuzz_examples,
    fuzz_settings,
    odd_arrays,
    odd_scalars,
    report_wrong,
    weighted,
)

#: Public callables this module drives, and the surface label of their cases
#: (tests/fuzz/test_surface_coverage.py).
SURFACES = {
    "scwork.collectives.Network": "collectives.Network.ring",
    "scwork.collectives.LinkClass": ("collectives.Network.grid", "reached through the link_bandwidth / "
                                     "link_latency arguments of the Network constructors"),
    "scwork.collectives.build": "collectives.build.ring",
    "scwork.collectives.single_path": ("collectives.build.single_path", "reached through build('single_path')"),
    "scwork.collectives.pincer": ("collectives.build.pincer", "reached through build('pincer')"),
    "scwork.collectives.rotated_pincer": ("collectives.build.rotated_pincer",
                                          "reached through build('rotated_pincer')"),
    "scwork.collectives.improved_rotated_pincer": ("collectives.build.improved_rotated_pincer",
                                                   "reached through build('improved_rotated_pincer')"),
    "scwork.collectives.ring_all_reduce": ("collectives.build.ring", "reached through build('ring')"),
    "scwork.collectives.multi_dim_all_reduce": ("collectives.build.dimension_by_dimension",
                                                "reached through build('dimension_by_dimension')"),
    "scwork.collectives.multi_color_all_reduce": ("collectives.build.multi_color",
                                                  "reached through build('multi_color')"),
    "scwork.collectives.mesh_loop_all_reduce": ("collectives.build.mesh_loops", "reached through build('mesh_loops')"),
    "scwork.collectives.reduce_scatter": ("collectives.build.reduce_scatter",
                                          "reached through build('reduce_scatter')"),
    "scwork.collectives.all_gather": ("collectives.build.all_gather", "reached through build('all_gather')"),
    "scwork.collectives.all_to_all": ("collectives.build.all_to_all", "reached through build('all_to_all')"),
    "scwork.collectives.Schedule": "collectives.Schedule.conflicts",
    "scwork.collectives.execute": "collectives.execute.all_reduce",
    "scwork.collectives.cost": "collectives.cost",
    "scwork.collectives.frames": "collectives.frames",
    "scwork.collectives.bus_factor": "collectives.bus_factor",
    "scwork.collectives.bandwidths": "collectives.bandwidths",
    "scwork.collectives.scaling_book_time": "collectives.scaling_book_time",
}

_SETTINGS = fuzz_settings()


_HUGE_SIZES = st.sampled_from([2**17, 2**17 + 1, 10**5, 2**31, 2**63, 10**30, 10**5000])
_BANDWIDTHS = weighted((4, st.none()), (1, st.sampled_from([1e9, 1, 1e300, 5e-324])))
_LATENCIES = weighted((4, st.just(1e-6)), (1, st.sampled_from([0.0, 1e300, 5e-324])))


def _shape(rank_max=3, size_max=5):
    return st.lists(st.integers(1, size_max), min_size=1, max_size=rank_max).map(tuple)


@st.composite
def network_calls(draw, size_max=5):
    """``(constructor name, args, kwargs)`` of a Network constructor, valid or with one odd value."""
    kind = draw(st.sampled_from(["ring", "line", "torus", "mesh", "grid", "from_topology"]))
    if kind in ("ring", "line"):
        first = weighted((8, st.integers(1, 2 * size_max)), (1, st.integers(-2, 1)), (1, _HUGE_SIZES))
    elif kind == "from_topology":
        first = weighted((8, st.builds(lambda n, chip: scwork.Topology.for_chip(chip, n), st.integers(1, 8),
                                       st.sampled_from(["v5e", "v5p", "v4", "tpu7x"]))),
                         (1, st.builds(scwork.Topology, st.integers(1, 4), st.integers(0, 4))))
    else:
        first = weighted((8, _shape(size_max=size_max)), (1, st.lists(weighted((3, st.integers(1, 4)),
                                                                               (1, st.integers(-1, 0)),
                                                                               (1, _HUGE_SIZES)),
                                                                      max_size=4).map(tuple)))
    valid = {"first": first}
    if kind != "from_topology":
        valid["cores_per_chip"] = weighted((4, st.just(1)), (2, st.just(2)), (1, st.integers(3, 4)))
        valid["chip"] = weighted((4, st.none()), (1, st.sampled_from(["v5e", "v5p", "v4", "tpu7x", "bm1684x", "x"])))
    else:
        valid["cores_per_chip"] = weighted((4, st.none()), (1, st.integers(1, 2)))
    valid["link_bandwidth"] = _BANDWIDTHS
    valid["link_latency"] = _LATENCIES
    valid["on_chip_bandwidth"] = _BANDWIDTHS
    valid["on_chip_latency"] = _LATENCIES
    if kind in ("ring", "grid"):
        valid["bidirectional"] = st.booleans()
    if kind == "grid":
        valid["wraparound"] = weighted((3, st.none()), (1, st.booleans()),
                                       (1, st.lists(st.booleans(), min_size=1, max_size=3).map(tuple)))
    valid["name"] = weighted((6, st.none()), (1, st.text(max_size=8)))
    kwargs = arguments(draw, valid, odd=weighted((3, odd_scalars()), (1, odd_arrays()),
                                                 (1, st.sampled_from(EDGE_FLOATS))))
    first = kwargs.pop("first")
    args = (first, kwargs.pop("wraparound")) if kind == "grid" else (first,)
    return kind, args, {k: v for k, v in kwargs.items() if v is not None or k == "first"}


def _check_network(surface: str, net: Network) -> None:
    if not isinstance(net, Network) or net.num_nodes != math.prod(net.shape) * net.cores_per_chip \
            or net.num_nodes < 1 or net.num_links < 0:
        report_wrong(surface, f"{net!r}: {net.num_nodes} nodes for shape {net.shape} x {net.cores_per_chip}")
    for link_class in net.link_classes.values():
        if not (math.isfinite(link_class.bandwidth) and link_class.bandwidth > 0
                and math.isfinite(link_class.latency) and link_class.latency >= 0):
            report_wrong(surface, f"{net!r}: link class {link_class!r}")


@settings(**_SETTINGS)
@given(call=network_calls(), data=st.data())
def test_network_constructors(call, data):
    kind, args, kwargs = call
    surface = f"collectives.Network.{kind}"
    net, error = check_surface(surface, lambda: getattr(Network, kind)(*args, **kwargs))
    if error is not None:
        return
    _check_network(surface, net)
    coord = data.draw(weighted((3, st.tuples(*[st.integers(0, s - 1) for s in net.shape])),
                               (1, st.lists(odd_scalars(), max_size=3)), (1, odd_scalars())), label="coord")
    core = data.draw(weighted((3, st.integers(0, net.cores_per_chip - 1)), (1, odd_scalars())), label="core")
    node, error = check_surface("collectives.Network.node", lambda: net.node(coord, core))
    if error is None and not 0 <= node < net.num_nodes:
        report_wrong("collectives.Network.node", f"{net!r}: node({coord!r}, {core!r}) = {node}")
    label_of = data.draw(weighted((3, st.integers(0, net.num_nodes - 1)), (1, odd_scalars())), label="node")
    check_surface("collectives.Network.node_label", lambda: net.node_label(label_of))
    ends = data.draw(weighted((3, st.tuples(st.lists(st.integers(0, net.num_nodes - 1), max_size=4),
                                            st.lists(st.integers(0, net.num_nodes - 1), max_size=4))),
                              (1, st.tuples(odd_arrays(), odd_arrays()))), label="link ends")
    check_surface("collectives.Network.link_ids", lambda: net.link_ids(*ends))
    dim = data.draw(weighted((3, st.integers(0, net.ndim - 1)), (1, odd_scalars())), label="dim")
    check_surface("collectives.Network.lines", lambda: net.lines(dim))
    for method in ("ring_order", "path_order", "positions", "layout"):
        check_surface(f"collectives.Network.{method}", getattr(net, method))
    link = data.draw(weighted((3, st.integers(0, max(net.num_links - 1, 0))), (1, odd_scalars())), label="link")
    check_surface("collectives.Network.link_label", lambda: net.link_label(link))


_ALGORITHM_KWARGS = {
    "colors": weighted((3, st.integers(1, 3)), (1, st.integers(-1, 0))),
    "bidirectional": st.booleans(),
    "algorithm": st.sampled_from(["ring", "pincer"]),
    "dims": weighted((2, st.none()), (1, st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True)),
                     (1, st.lists(st.integers(-1, 4), max_size=3))),
    "orders": weighted((3, st.none()), (1, st.lists(st.permutations([0, 1]), min_size=1, max_size=2))),
    "core_scheme": st.sampled_from(["zigzag", "on_chip_first"]),
    "nbytes": weighted((3, st.integers(0, 2**20)), (1, st.sampled_from([2**50, 2**62, 2**63, 10**30, 10**5000]))),
    "itemsize": st.sampled_from([1, 2, 4, 8]),
}


@st.composite
def small_networks(draw):
    kind = draw(st.sampled_from(["ring", "line", "torus", "mesh"]))
    cores = draw(weighted((3, st.just(1)), (1, st.just(2))))
    if kind in ("ring", "line"):
        n = draw(st.integers(2 if kind == "ring" else 1, 9))
        return getattr(Network, kind)(n, cores_per_chip=cores)
    return getattr(Network, kind)(draw(_shape(size_max=4)), cores_per_chip=cores)


@settings(**_SETTINGS)
@given(net=small_networks(), data=st.data())
def test_builders_execute_cost_frames(net, data):
    name = data.draw(weighted((12, st.sampled_from(sorted(ALGORITHMS))), (1, odd_scalars()),
                              (1, st.sampled_from(["", "ring ", "RING"]))), label="algorithm")
    chosen = data.draw(st.lists(st.sampled_from(sorted(_ALGORITHM_KWARGS)), max_size=3, unique=True),
                       label="keywords")
    kwargs = arguments(data, {k: _ALGORITHM_KWARGS[k] for k in chosen})
    label = name if isinstance(name, str) and name in ALGORITHMS else 'unknown_name'
    schedule, error = check_surface(f"collectives.build.{label}",
                                    lambda: build(name, net, **kwargs))
    if error is not None:
        return
    surface = f"collectives.execute.{schedule.collective}"
    N = net.num_nodes
    length = data.draw(st.integers(0, 12), label="length")
    values = np.asarray(data.draw(st.lists(st.integers(-1000, 1000), min_size=N * length, max_size=N * length),
                                  label="values"), dtype=np.int64).reshape(N, length)
    run, error = check_surface(surface, lambda: execute(schedule, values))
    if isinstance(error, ScheduleError):       # conflicts are only reported: a valid schedule must run
        report_wrong(surface, f"{schedule!r} built by {name!r} {kwargs!r} fails on valid data: {error}")
    # A schedule over some dimensions only (dims=...) reduces within groups of
    # group_size nodes: only a whole-network schedule must leave the full sum everywhere.
    if error is None and schedule.collective == "all_reduce" and schedule.group_size == N and \
            not np.array_equal(run.buffers, np.broadcast_to(values.sum(axis=0), values.shape)):
        report_wrong(surface, f"{schedule!r}: all-reduce result differs from the sum")
    # odd data and options
    odd_data = data.draw(weighted(
        (2, st.sampled_from([np.full((N, 3), np.nan), np.full((N, 3), np.inf), np.full((N, 2), 2**62, np.int64),
                             np.full((N, 2), 2**64 - 1, np.uint64), np.zeros((N, 2), dtype=object),
                             np.zeros((N + 1, 2)), np.zeros(N), np.zeros((N, 2), dtype=complex),
                             np.zeros((N, 2), dtype=bool), np.full((N, 1), 3e38, np.float32),
                             np.array([["a"] * 2] * N)])),
        (1, odd_arrays())), label="odd data")
    options = arguments(data, {"conflicts": st.sampled_from(["report", "raise", "ignore"]),
                                "check": st.booleans(), "track": st.booleans(),
                                "rtol": weighted((3, st.none()), (1, st.floats(0, 1)))})
    run, error = check_surface(surface, lambda: execute(schedule, odd_data, **options))
    if isinstance(error, ScheduleError) and options["conflicts"] != "raise" and options["rtol"] is None:
        # the data is odd, not the schedule: a ScheduleError would blame the wrong thing
        report_wrong(surface, f"{schedule!r} blamed for data {odd_data!r}: {error}")
    if error is None and np.issubdtype(run.buffers.dtype, np.floating) and not np.isfinite(run.buffers).all():
        report_wrong(surface, "non-finite buffers accepted")
    cost_kwargs = arguments(data, {
        "nbytes": weighted((3, st.none()), (2, st.integers(0, 2**30)), (1, st.sampled_from([2**50, 2**63, 10**30]))),
        "pipeline_chunks": weighted((3, st.just(1)), (1, st.integers(2, 8)), (1, st.sampled_from([2**31, 2**62]))),
        "buffers_per_direction": st.integers(1, 6), "per_link": st.booleans()})
    result, error = check_surface("collectives.cost", lambda: cost(schedule, **cost_kwargs))
    if error is None:
        total = float(result["total_time"])
        steps = result["step_time"].values
        if not math.isfinite(total) or total < 0 or (steps.size and (not np.isfinite(steps).all() or steps.min() < 0)):
            report_wrong("collectives.cost", f"{schedule!r} {cost_kwargs!r}: total {total}, steps {steps[:5]}")
        if float(result["busbw"]) < 0 or math.isnan(float(result["busbw"])):
            report_wrong("collectives.cost", f"busbw {float(result['busbw'])}")
    frame_data = data.draw(weighted((3, st.none()), (1, st.just(values)), (1, st.just(odd_data))), label="frame data")
    max_cells = data.draw(weighted((4, st.just(20_000_000)), (1, odd_scalars())), label="max_cells")
    result, error = check_surface("collectives.frames", lambda: frames(schedule, frame_data, max_cells=max_cells))
    if error is None:
        status = result["status"].values
        if status.min() < 0 or status.max() > 3:
            report_wrong("collectives.frames", f"status values {np.unique(status)}")
        if schedule.collective == "all_reduce" and (status[-1] != 3).any():
            report_wrong("collectives.frames", f"{schedule!r}: the last frame is not complete everywhere")


# Each case takes seconds to minutes (a streaming pass may cover 2**30 records): an eighth
# of the examples, at most 40 (5 in the default slice, 40 in the full run).
@pytest.mark.slow
@settings(**{**_SETTINGS, "max_examples": max(2, min(fuzz_examples() // 8, 40))})
@given(shape=st.sampled_from([(2**17,), (2**16,), (4096,), (256, 256), (64, 64, 32), (2**15, 2)]),
       cores=st.sampled_from([1, 2]), name=st.sampled_from(sorted(ALGORITHMS)), data=st.data())
def test_large_networks_are_bounded(shape, cores, name, data):
    net, error = check_surface("collectives.Network.torus", lambda: Network.torus(shape, cores_per_chip=cores),
                               seconds=20)
    if error is not None:
        return
    schedule, error = check_surface(f"collectives.build.{name}", lambda: build(name, net), seconds=20)
    if error is not None:
        return
    what = data.draw(st.sampled_from(["cost", "frames", "execute", "conflicts", "to_dataset"]), label="what")
    per_link = data.draw(st.booleans(), label="per_link")
    if what == "cost":
        check_surface("collectives.cost", lambda: cost(schedule, per_link=per_link), seconds=300)
    elif what == "frames":
        check_surface("collectives.frames", lambda: frames(schedule), seconds=300)
    elif what == "execute":
        check_surface(f"collectives.execute.{schedule.collective}",
                      lambda: execute(schedule, np.ones((net.num_nodes, 2), dtype=np.int64)), seconds=300)
    elif what == "conflicts":
        check_surface("collectives.Schedule.conflicts", schedule.conflicts, seconds=300)
    else:
        check_surface("collectives.Schedule.to_dataset", schedule.to_dataset, seconds=300)


@settings(**_SETTINGS)
@given(data=st.data())
def test_cost_formulas(data):
    collective = data.draw(weighted((4, st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                         "broadcast"])), (1, odd_scalars())), label="collective")
    n = data.draw(weighted((4, st.integers(1, 64)), (1, odd_scalars())), label="n")
    factor, error = check_surface("collectives.bus_factor", lambda: bus_factor(collective, n))
    if error is None and not (math.isfinite(factor) and 0 <= factor <= 2):   # 2(n-1)/n rounds to 2.0 for n > 2**53
        report_wrong("collectives.bus_factor", f"bus_factor({collective!r}, {n!r}) = {factor}")
    nbytes = data.draw(weighted((4, st.floats(0, 1e12)), (1, odd_scalars())), label="nbytes")
    seconds = data.draw(weighted((4, st.floats(1e-9, 10)), (1, odd_scalars())), label="time")
    result, error = check_surface("collectives.bandwidths", lambda: bandwidths(nbytes, seconds, collective, n))
    if error is None and not all(math.isfinite(v) and v >= 0 for v in result):
        report_wrong("collectives.bandwidths", f"bandwidths({nbytes!r}, {seconds!r}) = {result}")
    axes = data.draw(weighted((4, st.lists(st.integers(1, 16), min_size=1, max_size=3)),
                              (1, st.lists(odd_scalars(), max_size=3)), (1, odd_scalars())), label="axes")
    kwargs = arguments(data, {"link_bandwidth": st.just(4.5e10), "latency": st.just(1e-6),
                               "wraparound": st.booleans()})
    result, error = check_surface("collectives.scaling_book_time",
                                  lambda: scaling_book_time(collective, nbytes, axes, **kwargs))
    if error is None and not (math.isfinite(result) and result >= 0):
        report_wrong("collectives.scaling_book_time", f"{collective!r} {nbytes!r} {axes!r} -> {result}")
