"""Regression tests for root causes the collectives fuzz suite (tests/fuzz/test_fuzz_collectives.py) found."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from scwork.collectives import (
    Network,
    bandwidths,
    build,
    bus_factor,
    cost,
    execute,
    frames,
    multi_color_all_reduce,
    multi_dim_all_reduce,
    ring_all_reduce,
    scaling_book_time,
)
from scwork.errors import ConfigError, InputError, TopologyError

# The package re-exports execute() under the module's name: import the modules by path.
execute_module = importlib.import_module("scwork.collectives.execute")
schedule_module = importlib.import_module("scwork.collectives.schedule")


def test_build_refuses_keywords_the_algorithm_does_not_take():
    net = Network.ring(4)
    with pytest.raises(ConfigError, match="takes no keyword.*core_scheme"):
        build("pincer", net, core_scheme="zigzag")
    with pytest.raises(ConfigError, match="takes no keyword.*bidirectional"):   # "ring" fixes it
        build("ring", net, bidirectional=True)
    with pytest.raises(ConfigError, match="unknown algorithm"):
        build(["ring"], net)
    assert build("multi_color", Network.torus((2, 2)), colors=1).num_colors == 1


def test_network_methods_check_their_arguments():
    net = Network.torus((3, 3), cores_per_chip=2)
    with pytest.raises(TopologyError, match="chip_coord must be a sequence"):
        net.node(None)
    with pytest.raises(TopologyError, match="chip_coord\\[0\\]"):
        net.node(("a", 1))
    with pytest.raises(TopologyError, match="core must be"):
        net.node((0, 0), "1")
    with pytest.raises(TopologyError, match="does not exist"):
        net.node_label(18)
    with pytest.raises(TopologyError, match="node"):
        net.node_label(np.array([1, 2]))
    with pytest.raises(TopologyError, match="integer node ids"):
        net.link_ids([0.5], [1])
    with pytest.raises(TopologyError, match="shape"):
        net.link_ids([0, 1], [2])
    with pytest.raises(TopologyError, match="dim must be"):
        net.lines("0")
    with pytest.raises(TopologyError, match="link"):
        net.link_label(10**6)
    assert int(net.link_ids(0, 1)) == int(net.link_ids([0], [1])[0])     # scalars work too


def test_network_flags_must_be_booleans():
    # bool("no") is True: a text flag silently made a dimension wrap.
    with pytest.raises(TopologyError, match="wraparound must be True, False"):
        Network.grid((4, 4), ("no", "no"))
    with pytest.raises(TopologyError, match="bidirectional must be True or False"):
        Network.ring(4, bidirectional="False")
    assert Network.grid((4, 4), (x for x in (True, False))).wraparound == (True, False)


def test_algorithm_options_are_checked():
    net = Network.torus((2, 3))
    with pytest.raises(ConfigError, match="dims must be a sequence"):
        multi_dim_all_reduce(net, dims=1)
    with pytest.raises(ConfigError, match="orders must be a list"):
        multi_dim_all_reduce(net, orders=3)
    with pytest.raises(ConfigError, match="bidirectional must be True or False"):
        multi_dim_all_reduce(net, bidirectional="yes")
    with pytest.raises(ConfigError, match="bidirectional must be True or False"):
        ring_all_reduce(net, bidirectional=None)
    with pytest.raises(ConfigError, match="core_scheme"):
        multi_dim_all_reduce(net, core_scheme=np.array(["zigzag"]))
    with pytest.raises(ConfigError, match="dims must be a sequence"):
        multi_color_all_reduce(net, dims=1j)


def test_cost_formulas_check_inputs_and_never_return_negative_or_infinite():
    with pytest.raises(ConfigError, match="n \\(ranks\\)"):
        bus_factor("all_reduce", "8")
    with pytest.raises(ConfigError, match="collective must be a name"):
        bus_factor(["all_reduce"], 8)
    with pytest.raises(ConfigError, match="nbytes must be a finite number >= 0"):
        bandwidths(-1e9, 1.0, "all_reduce", 8)      # gave negative bandwidths
    with pytest.raises(ConfigError, match="time_s"):
        bandwidths(1e9, b"1", "all_reduce", 8)
    with pytest.raises(ConfigError, match="axis_sizes\\[0\\]"):
        scaling_book_time("all_gather", 1e6, [1j])
    with pytest.raises(ConfigError, match="MAX_NODES"):
        scaling_book_time("all_gather", 1e6, [10**5000])
    with pytest.raises(ConfigError, match="overflows float64"):
        scaling_book_time("all_gather", 1e308, [4], latency=1e308)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # the typed error alone, no numpy warning before it
def test_cost_refuses_times_past_float64():
    net = Network.ring(4, link_bandwidth=5e-324)
    with pytest.raises(ConfigError, match="overflow float64"):
        cost(build("ring", net))
    with pytest.raises(ConfigError, match="overflow float64"):
        cost(build("ring", net), per_link=True)


def test_execute_refuses_float_sums_that_overflow():
    schedule = build("ring", Network.ring(4))
    # float32: the overflowing sum was blamed on the schedule (ScheduleError);
    # float64: inf == inf made it look right (max_error 0).
    for data in (np.full((4, 1), 3e38, np.float32), np.full((4, 1), 1e308)):
        with pytest.raises(InputError, match="would overflow to inf"):
            execute(schedule, data)
    gathered = execute(build("all_gather", Network.ring(4)), np.full((4, 4), 1e308))   # copies never overflow
    assert np.isfinite(gathered.buffers).all()
    with pytest.raises(ConfigError, match="data must be an array"):
        execute(schedule, [[1, 2], [3]] * 2)


def test_contribution_tracking_is_bounded_before_allocating():
    schedule = build("ring", Network.ring(4096))     # 4096 nodes x 4096 chunks x 64 words: 8 GiB
    with pytest.raises(ConfigError, match="MAX_TRACKER_BYTES"):
        execute(schedule, np.ones((4096, 2), np.int64), conflicts="ignore")
    with pytest.raises(ConfigError, match="max_cells must be"):
        frames(build("ring", Network.ring(4)), max_cells="20")
    assert execute_module.MAX_TRACKER_BYTES == 2**30


def test_conflict_list_is_bounded(monkeypatch):
    schedule = build("bidirectional_ring", Network.mesh((3, 3), cores_per_chip=2))
    count = schedule.num_conflicts()
    assert count > 2
    monkeypatch.setattr(schedule_module, "MAX_LISTED_CONFLICTS", 2)
    with pytest.raises(ConfigError, match="num_conflicts"):
        schedule.conflicts()
    assert schedule.num_conflicts() == count


def test_vector_sizes_beyond_the_limit_give_a_printable_error():
    with pytest.raises(ConfigError, match="about 5000 digits"):
        cost(build("ring", Network.ring(4)), nbytes=10**5000)


def test_per_chunk_state_is_bounded_before_allocating(monkeypatch):
    # (nodes, chunks) owner masks: 131,072 x 262,144 asked for 32 GiB even with track=False.
    schedule = build("reduce_scatter", Network.ring(8))
    monkeypatch.setattr(execute_module, "MAX_STATE_CELLS", 8 * schedule.num_chunks - 1)
    with pytest.raises(ConfigError, match="MAX_STATE_CELLS"):
        execute(schedule, np.ones((8, 16), np.int64), track=False, conflicts="ignore")


@pytest.mark.parametrize("keyword", ["link_bandwidth", "link_latency", "on_chip_bandwidth", "on_chip_latency"])
def test_link_parameters_must_be_numbers(keyword):
    """An empty array as a latency raised numpy's 'truth value of an empty array is ambiguous'."""
    from scwork.collectives import Network
    from scwork.errors import TopologyError

    with pytest.raises(TopologyError, match=f"{keyword} must be a number"):
        Network.line(4, **{keyword: np.array([])})


def test_a_5000_digit_line_length_is_a_topology_error():
    """Printing the network's name raised Python's int-to-str conversion limit (ValueError)."""
    from scwork.collectives import Network
    from scwork.errors import TopologyError

    with pytest.raises(TopologyError, match="MAX_NODES"):
        Network.line(10**5000)
    with pytest.raises(TopologyError, match="shape must be an int or a tuple"):
        Network.torus(2.5)


def test_execute_and_network_options_are_typed():
    schedule = build("ring", Network.ring(4))
    data = np.ones((4, 2))
    with pytest.raises(ConfigError, match="rtol must be a finite number"):
        execute(schedule, data, rtol="inf ")            # UFuncTypeError before
    with pytest.raises(ConfigError, match="rtol"):
        execute(schedule, data, rtol=10**5000)           # OverflowError before
    with pytest.raises(ConfigError, match="check must be True or False"):
        execute(schedule, data, check="no")
    with pytest.raises(TopologyError, match="name must be a string"):
        Network.ring(2, name=np.array([]))                # ambiguous truth value before


def test_many_cores_per_chip_is_refused_before_allocating_links():
    from scwork.collectives.network import MAX_LINKS

    with pytest.raises(TopologyError, match="MAX_LINKS"):
        Network.ring(2, cores_per_chip=4000)            # 32 million on-chip links: MemoryError before
    with pytest.raises(TopologyError, match="cores per chip"):
        Network.torus((4, 4), cores_per_chip=2000)
    two_core = Network.torus((16, 16, 24), cores_per_chip=2)     # a v5p pod stays well inside the limit
    assert two_core.num_links < MAX_LINKS


def test_pipeline_chunks_are_bounded():
    from scwork.collectives import cost

    schedule = build("ring", Network.ring(8))
    with pytest.raises(ConfigError, match="MAX_PIPELINE_CHUNKS"):
        cost(schedule, nbytes=2**20, pipeline_chunks=10**20)
    assert float(cost(schedule, nbytes=2**20, pipeline_chunks=4).total_time) > 0


def test_an_itemsize_beyond_int64_offsets_is_refused():
    with pytest.raises(ConfigError, match="itemsize 9223372036854775808"):
        build("all_gather", Network.ring(2), itemsize=2**63)     # OverflowError in link_loads before


def test_infinite_shape_and_overflowing_bandwidth_are_typed():
    from scwork.collectives.cost import bandwidths

    with pytest.raises(TopologyError, match="shape must be a tuple of positive integers"):
        Network.grid([float("inf")])                       # OverflowError from int(inf) before
    with pytest.raises(ConfigError, match="beyond float64"):
        bandwidths(1.0, 5e-324, "all_reduce", 1)           # (inf, nan) returned before


def test_a_5000_digit_dimension_with_mismatched_flags_is_named_briefly():
    with pytest.raises(TopologyError, match=r"wraparound has 2 flags but shape \(30000.*\.\.\. has 1 dimensions"):
        Network.grid((3 * 10**4000,), (False, False))     # str() of the shape raised ValueError before


# -- found by the public-API argument surface (issue 22) ------------------------------------------------
def test_public_collective_helpers_refuse_odd_arguments_with_typed_errors():
    from scwork.collectives import (
        Network,
        build,
        chunk_bounds,
        phase_summary,
        reference_result,
        ring_all_gather,
        ring_reduce_scatter,
    )
    from scwork.collectives.schedule import MAX_CHUNK_BOUNDS
    from scwork.errors import ConfigError, ScworkError

    for args in ((10, 0), (10, -1), (10, 1e19), ("10", 2), (10, MAX_CHUNK_BOUNDS + 1), (2**63, 2), (-1, 2)):
        with pytest.raises(ConfigError):
            chunk_bounds(*args)
    assert chunk_bounds(10, 4).tolist() == [0, 2, 5, 7, 10]
    for schedule in (5, None, "ring"):
        with pytest.raises(ConfigError, match="Schedule"):
            phase_summary(schedule)
        with pytest.raises(ConfigError, match="Schedule"):
            reference_result(schedule, np.zeros((4, 2)))
    for builder in (ring_all_gather, ring_reduce_scatter):
        with pytest.raises(ScworkError, match="needs a Network"):
            builder(5)
    s = build("ring", Network.ring(4))
    assert reference_result(s, np.ones((4, 2))).tolist() == [[4.0, 4.0]] * 4
