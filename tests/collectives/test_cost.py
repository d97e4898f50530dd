"""Alpha-beta cost model, nccl-tests bandwidths, and the published reference numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scwork.collectives import (
    SCALING_BOOK_V5E_EXAMPLE,
    Network,
    all_gather,
    bandwidths,
    bus_factor,
    cost,
    multi_color_all_reduce,
    ring_all_reduce,
    rotated_pincer,
    scaling_book_time,
    single_path,
)
from scwork.errors import ConfigError


def test_alpha_beta_by_hand():
    alpha, W = 2e-6, 1e9
    net = Network.ring(4, link_bandwidth=W, link_latency=alpha)
    s = ring_all_reduce(net, bidirectional=False)
    c = cost(s, nbytes=8_000_000)
    # 6 steps, each moving one shard of V/4 = 2 MB over every link.
    np.testing.assert_allclose(c.step_time.values, alpha + 2e6 / W)
    assert math.isclose(float(c.total_time), 6 * (alpha + 2e6 / W))
    assert c.step_time.attrs["units"] == "s" and c.algbw.attrs["units"] == "B/s"
    assert c.step_time.dims == ("step",)
    np.testing.assert_allclose(c.cumulative_time.values, np.cumsum(c.step_time.values))


def test_transfers_sharing_a_link_serialize():
    net = Network.mesh((3, 3), cores_per_chip=2, link_bandwidth=1e9, link_latency=0.0,
                       on_chip_bandwidth=1e12, on_chip_latency=0.0)
    from scwork.collectives import mesh_loop_all_reduce

    s = mesh_loop_all_reduce(net, colors=1)
    c = cost(s, per_link=True)
    t, link, _ = s.conflicts()[0]
    sl = s.step_slice(t)
    on = s.link[sl] == link
    assert math.isclose(float(c.link_time[t, link]), s.bytes[sl][on].sum() / 1e9)
    assert math.isclose(float(c.step_time[t]), float(c.link_time[t].max()))


def test_ring_busbw_equals_link_bandwidth_for_large_messages():
    # nccl-tests: for a ring all-reduce, busbw approaches the per-link bandwidth.
    net = Network.ring(8, link_bandwidth=1e10, link_latency=1e-6)
    c = cost(ring_all_reduce(net, bidirectional=False), nbytes=2**30)
    assert 0.99 * 1e10 < float(c.busbw) <= 1e10
    algbw, busbw = bandwidths(2**30, float(c.total_time), "all_reduce", 8)
    assert math.isclose(algbw, float(c.algbw)) and math.isclose(busbw, float(c.busbw))


def test_bus_factors_follow_nccl_tests():
    assert bus_factor("all_reduce", 4) == 1.5
    assert bus_factor("reduce_scatter", 4) == bus_factor("all_gather", 4) == bus_factor("all_to_all", 4) == 0.75
    assert bus_factor("broadcast", 4) == 1.0
    with pytest.raises(ConfigError):
        bus_factor("gossip", 4)
    with pytest.raises(ConfigError):
        bandwidths(1, 0.0, "all_reduce", 2)


def test_scaling_book_v5e_all_gather_example():
    """[scaling-book], sharding chapter, pop quiz 2 (AllGather time).

    Inputs: TPU v5e, 2-D mesh {'X': 8, 'Y': 4}, AllGather_Y of bf16[E=2048, F=8192]
    (V = 2048 * 8192 * 2 = 33,554,432 B; each device holds V/4 = 8.4 MB), one
    ICI link 4.5e10 B/s one way, latency 1 us per hop. The book: V / W_bidir =
    34e6 / 9e10 = 377 us with a bidirectional ring (wraparound); without
    wraparound (v5e wraps only axes of 16) the ring is a line: 3 hops of
    8.4e6 B / 4.5e10 = 560 us.

    Our schedules: all-gather along dimension 1 with whole shards both ways
    ("pincer"): 2 steps of V/4 on the torus, 3 steps of V/4 on the mesh.
    """
    ex = SCALING_BOOK_V5E_EXAMPLE
    V = ex["array_bytes"]
    assert V == 33_554_432
    torus = Network.grid(ex["shape"], (True, True), chip="v5e")
    mesh = Network.grid(ex["shape"], (False, False), chip="v5e")
    t_wrap = float(cost(all_gather(torus, dims=(ex["axis"],), algorithm="pincer"), nbytes=V).total_time)
    t_line = float(cost(all_gather(mesh, dims=(ex["axis"],), algorithm="pincer"), nbytes=V).total_time)
    print(f"\nscaling-book v5e all-gather: model {t_wrap * 1e6:.1f} us (book 377 us) with wraparound, "
          f"{t_line * 1e6:.1f} us (book 560 us) without")
    assert abs(t_wrap / ex["time_with_wraparound_s"] - 1) < 0.02
    assert abs(t_line / ex["time_without_wraparound_s"] - 1) < 0.02
    assert t_line < ex["measured_s"]  # the profile (680 us) is slower than the ideal
    # The same with the book's closed form.
    assert abs(scaling_book_time("all_gather", V, [4]) / t_wrap - 1) < 0.02
    assert abs(scaling_book_time("all_gather", V, [4], wraparound=False) / t_line - 1) < 0.02


@pytest.mark.parametrize("n", [4, 8, 16])
def test_bidirectional_all_gather_matches_v_over_w_bidir(n):
    # Bandwidth-bound form of the book: V / W_ICI(bidirectional), independent of n (even n).
    net = Network.ring(n, link_latency=0.0)
    V = 2**26 * n
    t = float(cost(all_gather(net, algorithm="pincer"), nbytes=V).total_time)
    assert math.isclose(t, V / (2 * 4.5e10))
    assert math.isclose(t, scaling_book_time("all_gather", V, [n], latency=0.0))
    # All-reduce = 2 x all-gather in the bandwidth-bound regime (odd n: exact).
    odd = Network.ring(n + 1, link_latency=0.0)
    t_ar = float(cost(rotated_pincer(odd), nbytes=V).total_time)
    assert math.isclose(t_ar, 2 * float(cost(all_gather(odd, algorithm="pincer"), nbytes=V).total_time))


def test_multi_color_2d_versus_1d_ring_on_16x16():
    """Multi-color 2-D all-reduce against the 1-D bidirectional ring on a 16x16 v5e torus.

    Latency-bound (1 KiB per node): 510 steps of the 1-D ring against 60 steps,
    a factor ~8.5 (2(N-1) / (4(sqrt(N)-1)) = 510 / 60). Bandwidth-bound (1 GiB):
    the 2-D schedule uses 4 links per chip instead of 2, a factor ~2.0.
    """
    net = Network.torus((16, 16))
    one, two = ring_all_reduce(net), multi_color_all_reduce(net)
    assert (one.num_steps, two.num_steps) == (510, 60)
    factors = {}
    for label, V in (("latency-bound 1 KiB", 1024), ("bandwidth-bound 1 GiB", 2**30)):
        t1 = float(cost(one, nbytes=V).total_time)
        t2 = float(cost(two, nbytes=V).total_time)
        factors[label] = t1 / t2
        print(f"\n16x16 all-reduce, {label}: 1-D ring {t1 * 1e6:.1f} us, multi-color 2-D "
              f"{t2 * 1e6:.1f} us, reduction x{t1 / t2:.2f}")
    assert 8.0 < factors["latency-bound 1 KiB"] < 8.6
    assert 1.9 < factors["bandwidth-bound 1 GiB"] < 2.1


def test_pipelining_helps_chains_not_saturated_rings():
    net = Network.ring(8)
    chain = single_path(net)
    V = 2**28
    t1 = float(cost(chain, nbytes=V).total_time)
    t16 = float(cost(chain, nbytes=V, pipeline_chunks=16).total_time)
    assert t16 < t1 / 3
    # Streaming a chain of S steps in k chunks: (S + k - 1) chunk times.
    chunk = 1e-6 + V / 16 / 4.5e10
    assert math.isclose(t16, (14 + 15) * chunk, rel_tol=1e-9)
    ring = ring_all_reduce(net)
    r1 = float(cost(ring, nbytes=V).total_time)
    r16 = float(cost(ring, nbytes=V, pipeline_chunks=16).total_time)
    assert r16 >= r1  # every link is busy in every step: only extra latency
    one_buffer = float(cost(chain, nbytes=V, pipeline_chunks=16, buffers_per_direction=1).total_time)
    assert one_buffer > t1  # no overlap, 16 latencies per step
    c = cost(chain, nbytes=V, pipeline_chunks=4, buffers_per_direction=5)
    assert c.attrs["buffer_bytes_per_node"] == 5 * 1 * 2 * V / 4
    with pytest.raises(ConfigError):
        cost(chain, pipeline_chunks=0)


def test_cost_of_an_empty_schedule():
    c = cost(single_path(Network.line(1)))
    assert float(c.total_time) == 0.0 and c.sizes["step"] == 0


def test_scaling_book_all_to_all_is_n_dimensional():
    """[scaling-book]: all-to-all costs V * max axis / (4 N W) on a torus."""
    from scwork.collectives import scaling_book_time

    V, W = 2 * 2048 * 8192, 2 * 4.5e10
    # the book's worked number: bf16[2048, 8192] on a ring of 8 v5e chips, 93.2 us
    assert round(scaling_book_time("all_to_all", V, [8]) * 1e6, 1) == 93.2
    # 2-D 4x4: each axis carries V * 4 / (4 * 16 * W) = V / (16 W): four times less than a ring
    assert scaling_book_time("all_to_all", V, [4, 4], latency=0) == pytest.approx(V / (16 * W))
    # the largest axis is the bottleneck: 4x8 -> V * 8 / (4 * 32 * W)
    assert scaling_book_time("all_to_all", V, [4, 8], latency=0) == pytest.approx(V * 8 / (128 * W))
    assert scaling_book_time("all_to_all", V, [8, 4], latency=0) == scaling_book_time("all_to_all", V, [4, 8],
                                                                                      latency=0)
    # a line (no wraparound) doubles it, on one axis or several
    assert scaling_book_time("all_to_all", V, [8], wraparound=False, latency=0) == pytest.approx(V / (2 * W))
    assert scaling_book_time("all_to_all", V, [4, 4], wraparound=False, latency=0) == pytest.approx(V / (8 * W))
    # the book's form is bandwidth-only: the latency argument does not change it
    assert scaling_book_time("all_to_all", 8, [8, 8], latency=1e-3) == pytest.approx(8 * 8 / (4 * 64 * W))
