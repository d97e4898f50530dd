"""Executing schedules on real numbers: exact results, error localisation, frames."""

from __future__ import annotations

import numpy as np
import pytest

from scwork.collectives import (
    Network,
    Schedule,
    ScheduleError,
    all_gather,
    all_to_all,
    execute,
    frames,
    improved_rotated_pincer,
    mesh_loop_all_reduce,
    multi_color_all_reduce,
    multi_dim_all_reduce,
    pincer,
    reduce_scatter,
    reference_result,
    ring_all_reduce,
    rotated_pincer,
    single_path,
)
from scwork.errors import ConfigError

NETS = {
    "ring8": Network.ring(8), "ring7": Network.ring(7), "torus4x4": Network.torus((4, 4)),
    "grid16x4": Network.grid((16, 4), (True, False)), "torus3x3x3": Network.torus((3, 3, 3)),
    "mesh3x3x2core": Network.mesh((3, 3), cores_per_chip=2), "torus2x4x2core": Network.torus((2, 4), cores_per_chip=2),
}

BUILDERS = {
    "single_path": single_path, "pincer": pincer, "rotated_pincer": rotated_pincer,
    "ring": lambda n: ring_all_reduce(n, bidirectional=False), "bidirectional_ring": ring_all_reduce,
    "dim_by_dim": lambda n: multi_dim_all_reduce(n, colors=1),
    "multi_color": multi_color_all_reduce,
    "multi_color_pincer": lambda n: multi_color_all_reduce(n, algorithm="pincer"),
}


@pytest.mark.parametrize("net_name", NETS)
@pytest.mark.parametrize("algo", BUILDERS)
@pytest.mark.parametrize("length", [1, 5, 97])
def test_every_node_ends_with_the_exact_integer_sum(net_name, algo, length):
    net = NETS[net_name]
    s = BUILDERS[algo](net)        # every builder supports every network here: none may refuse
    data = np.random.default_rng(length).integers(-(2**40), 2**40, size=(net.num_nodes, length))
    run = execute(s, data)
    assert run.buffers.dtype == np.int64
    assert (run.buffers == data.sum(axis=0)).all()
    assert run.max_error == 0 and run.consistent


def test_improved_rotated_pincer_exact():
    net = Network.ring(10)
    data = np.random.default_rng(0).integers(0, 1000, size=(10, 33))
    assert (execute(improved_rotated_pincer(net), data).buffers == data.sum(axis=0)).all()


def test_float64_and_float32():
    net = Network.torus((4, 4))
    s = multi_color_all_reduce(net)
    rng = np.random.default_rng(1)
    d64 = rng.standard_normal((16, 1001))
    run = execute(s, d64)
    assert run.buffers.dtype == np.float64 and run.consistent
    assert run.max_error < 1e-13
    d32 = d64.astype(np.float32)
    run32 = execute(s, d32)
    assert run32.buffers.dtype == np.float32
    ref = d32.astype(np.float64).sum(axis=0)
    bound = 16 * np.finfo(np.float32).eps * np.abs(d32).astype(np.float64).sum(axis=0)
    assert (np.abs(run32.buffers - ref) <= bound).all()
    assert run32.max_error > 0  # float32 rounding is visible and tolerated
    # Every node holds bit-identical copies of the reduced shards.
    assert (run32.buffers == run32.buffers[0]).all()


def test_float16_is_summed_in_float32():
    s = rotated_pincer(Network.ring(4))
    run = execute(s, np.ones((4, 10), dtype=np.float16))
    assert run.buffers.dtype == np.float32 and (run.buffers == 4).all()


def test_vector_shorter_than_the_number_of_chunks():
    s = multi_color_all_reduce(Network.torus((4, 4)))  # 64 chunks
    data = np.arange(16 * 3).reshape(16, 3)
    assert (execute(s, data).buffers == data.sum(axis=0)).all()


def test_reduce_scatter_and_all_gather_results():
    net = Network.grid((4, 6), (True, False))
    rs = reduce_scatter(net, colors=2)
    data = np.random.default_rng(3).integers(-99, 99, size=(24, 50))
    run = execute(rs, data)
    ref = reference_result(rs, data)
    node, c0, c1 = rs.owners
    b = rs.element_bounds(50)
    for n, a, z in zip(node, c0, c1):
        np.testing.assert_array_equal(run.buffers[n, b[a]:b[z]], data.sum(axis=0)[b[a]:b[z]])
        np.testing.assert_array_equal(ref[n, b[a]:b[z]], data.sum(axis=0)[b[a]:b[z]])
    ag = all_gather(net, colors=2, algorithm="pincer")
    b = ag.element_bounds(50)
    gathered = np.zeros(50, dtype=np.int64)
    for n, a, z in zip(*ag.owners):
        gathered[b[a]:b[z]] = data[n, b[a]:b[z]]
    run = execute(ag, data)
    assert (run.buffers == gathered).all()


def test_all_to_all_delivers_every_block():
    net = Network.ring(6)
    s = all_to_all(net)
    data = np.arange(6 * 13).reshape(6, 13) * 10
    run = execute(s, data)
    b = s.element_bounds(13)
    ring = net.ring_order()
    for pos, node in enumerate(ring):
        want = np.concatenate([data[i, b[pos]:b[pos + 1]] for i in range(6)])
        np.testing.assert_array_equal(run.received[node], want)


# -- wrong schedules -------------------------------------------------------------------
def tamper(s: Schedule, keep=None, extra=None) -> Schedule:
    """A copy of ``s`` with only the transfers in ``keep`` plus ``extra`` rows."""
    cols = dict(step=s.step, source=s.source, destination=s.destination, start=s.start, stop=s.stop,
                op=s.op, color=s.color, phase=s.phase)
    if keep is not None:
        cols = {k: v[keep] for k, v in cols.items()}
    if extra is not None:
        cols = {k: np.concatenate([v, np.atleast_1d(extra[k])]) for k, v in cols.items()}
    return Schedule(s.network, name="tampered", collective=s.collective, num_chunks=s.num_chunks,
                    owners=s.owners, **cols)


def test_missing_transfer_is_reported_with_step_node_and_shard():
    s = ring_all_reduce(Network.ring(5), bidirectional=False)
    victim = int(np.flatnonzero((s.step == 2) & (s.source == 3))[0])  # a reduce-scatter transfer
    keep = np.ones(s.num_transfers, bool)
    keep[victim] = False
    with pytest.raises(ScheduleError) as err:
        execute(tamper(s, keep), np.ones((5, 10), dtype=int))
    e = err.value
    assert e.node is not None and e.shard is not None
    assert "missing contributions" in str(e) or "overwrites contributions" in str(e)
    assert e.step is not None and e.step >= 2


def test_double_counting_is_caught_at_its_step():
    s = rotated_pincer(Network.ring(6))
    i = int(np.flatnonzero(s.step == 1)[0])
    extra = {k: getattr(s, a)[i] for k, a in (("step", "step"), ("source", "source"), ("destination", "destination"),
                                                ("start", "start"), ("stop", "stop"), ("op", "op"),
                                                ("color", "color"), ("phase", "phase"))}
    extra["step"] = 2  # the same combine again one step later
    with pytest.raises(ScheduleError, match="second time") as err:
        execute(tamper(s, extra=extra), np.ones((6, 6), dtype=int))
    assert err.value.step == 2 and err.value.node == int(s.destination[i])
    assert err.value.shard[0] >= int(s.start[i])


def test_copy_that_throws_away_contributions_is_caught():
    s = single_path(Network.line(4))
    # B copies its own data over A's in the first step: A's contribution is lost.
    extra = {"step": 0, "source": 1, "destination": 0, "start": 0, "stop": 1, "op": 1, "color": 0, "phase": 1}
    with pytest.raises(ScheduleError, match="overwrites") as err:
        execute(tamper(s, extra=extra), np.ones((4, 3), dtype=int))
    assert err.value.step == 0 and err.value.node == 0
    # A later copy of a superset (B's partial sum {A, B} onto A) loses nothing: accepted.
    ok = {"step": 1, "source": 1, "destination": 0, "start": 0, "stop": 1, "op": 1, "color": 0, "phase": 1}
    assert (execute(tamper(s, extra=ok), np.ones((4, 3), dtype=int)).buffers == 4).all()


def test_sending_data_one_does_not_hold_is_caught():
    s = all_gather(Network.ring(4), bidirectional=False)
    first = s.step == 0
    keep = ~first
    with pytest.raises(ScheduleError, match="before holding any data") as err:
        execute(tamper(s, keep), np.ones((4, 8), dtype=int))
    assert err.value.step is not None


def test_link_conflicts_reported_or_raised():
    net = Network.mesh((3, 3), cores_per_chip=2)
    s = mesh_loop_all_reduce(net, colors=1)
    assert s.conflicts()
    data = np.ones((18, 4), dtype=int)
    run = execute(s, data, conflicts="report")
    assert run.conflicts == s.conflicts() and (run.buffers == 18).all()
    with pytest.raises(ScheduleError, match="messages") as err:
        execute(s, data, conflicts="raise")
    assert err.value.link is not None and err.value.step is not None
    assert execute(s, data, conflicts="ignore").conflicts == []
    with pytest.raises(ConfigError):
        execute(s, data, conflicts="maybe")


def test_bad_data_shape_and_dtype():
    s = pincer(Network.ring(4))
    with pytest.raises(ConfigError, match=r"\(4, L\)"):
        execute(s, np.ones((3, 5)))
    with pytest.raises(ConfigError, match="numeric"):
        execute(s, np.array([["a"]] * 4))


def test_utilisation_is_per_step_and_link():
    net = Network.ring(8)
    run = execute(rotated_pincer(net), np.ones((8, 64), dtype=np.float32))
    u = run.utilisation
    assert u.dims == ("step", "link") and u.attrs["units"] == "1"
    np.testing.assert_allclose(u.values, 1.0)  # every link busy all the time
    run = execute(single_path(net), np.ones((8, 64)))
    assert ((run.utilisation.values > 0).sum(axis=1) == 1).all()  # one link per step
    assert run.link_bytes.attrs["units"] == "B"


def test_frames_record_everything_a_drawing_needs():
    net = Network.torus((3, 3))
    s = multi_color_all_reduce(net)
    f = frames(s)
    S = s.num_steps
    assert f.sizes["frame"] == S + 1 and f.sizes["step"] == S
    assert f.contributions.dims == ("frame", "node", "shard")
    # Contributions only grow, and everything is complete at the end.
    c = f.contributions.values
    assert (np.diff(c, axis=0) >= 0).all()
    assert (f.status.values[-1] == 3).all() and (f.status.values[0] == 1).all()
    assert (c[-1] == 9).all()
    assert (np.diff(f.cumulative_time.values) > 0).all() and f.cumulative_time.attrs["units"] == "s"
    assert set(np.unique(f.color.values)) == {0, 1}
    assert set(np.unique(f.phase.values)) == {"reduce_scatter", "all_gather"}
    assert f.utilisation.dims == ("step", "link")
    assert {"x", "y", "x0", "y1", "label"} <= set(f.data_vars)
    assert int(f.transfer_step.max()) == S - 1
    with pytest.raises(ConfigError, match="too much"):
        frames(s, max_cells=10)


def test_frames_of_a_reduce_scatter_mark_owned_shards_complete():
    s = reduce_scatter(Network.ring(4), bidirectional=False)
    f = frames(s)
    final = f.status.values[-1]
    own = np.zeros_like(final, dtype=bool)
    for n, a, b in zip(*s.owners):
        own[n, a:b] = True
    assert (final[own] == 3).all() and (final[~own] < 3).all()
    assert set(np.unique(final[~own])) == {1, 2}  # own data only, or a partial sum passed on


def test_values_alone_catch_a_wrong_schedule_without_tracking():
    s = rotated_pincer(Network.ring(5))
    keep = np.ones(s.num_transfers, bool)
    keep[np.flatnonzero(s.phase == 1)[0]] = False  # one all-gather copy missing
    data = np.arange(5 * 10).reshape(5, 10)
    with pytest.raises(ScheduleError, match="wrong value") as err:
        execute(tamper(s, keep), data, track=False)
    assert err.value.node is not None and err.value.shard is not None
    unchecked = execute(tamper(s, keep), data, track=False, check=False)
    assert unchecked.max_error > 0


def test_rtol_sets_the_float_check():
    s = ring_all_reduce(Network.ring(4))
    data = np.random.default_rng(5).standard_normal((4, 100)).astype(np.float32)
    run = execute(s, data)  # default: within 4 x eps32 x sum|x|
    assert run.max_error > 0
    with pytest.raises(ScheduleError, match="wrong value"):
        execute(s, data, rtol=0.0)  # float32 sums are not exact


def test_integer_sums_that_would_wrap_are_refused_not_passed():
    """execute(ring, np.full((4, 2), 2**62)) left [0, 0] on every node and passed its own check."""
    from scwork.collectives import Network, execute, ring_all_reduce
    from scwork.errors import InputError

    net = Network.ring(4)
    with pytest.raises(InputError, match=r"element 0: the sum of \|data\| over the nodes is 18446744073709551616"):
        execute(ring_all_reduce(net), np.full((4, 2), 2**62))
    with pytest.raises(InputError, match="does not fit in int64"):
        execute(ring_all_reduce(net), np.full((4, 2), 2**63, dtype=np.uint64))
    ok = np.full((4, 2), 2**60)           # sum 2**62 fits: exact
    run = execute(ring_all_reduce(net), ok)
    assert run.buffers[0].tolist() == [2**62, 2**62]


def test_non_finite_data_is_an_input_error_not_a_schedule_error():
    from scwork.collectives import Network, execute, ring_all_reduce
    from scwork.errors import InputError

    data = np.ones((4, 3))
    data[2, 1] = np.nan
    with pytest.raises(InputError, match=r"data\[2, 1\] is nan"):
        execute(ring_all_reduce(Network.ring(4)), data)
