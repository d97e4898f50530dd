"""The ICI all-to-all time of the step model (``_Ici``), stage by stage, worked out by hand.

``_Ici(topology, chip, params).time(v)`` is the time for every device to send ``v``
bytes to the others; the step model calls it per mini-batch and the advisor for one
all-to-all's latency. Every case below uses links of 1 B/s and 0.5 s per hop, so a
time is (hops paid) x 0.5 s + (bytes on the busiest link) / 1 B/s. A device's whole
vector includes its own block: ``v x N / (N - 1)`` bytes, cut in N equal blocks.
"""

from __future__ import annotations

import pytest

import scwork
from scwork.collectives import ON_CHIP_LATENCY_S
from scwork.pipeline import StepModelParams
from scwork.pipeline.phase_costs import _Ici

SLOW = StepModelParams(ici_link_bytes_per_s=1.0, ici_latency_s=0.5)


def ici(topology, **params):
    return _Ici(topology, scwork.hardware.get("v5p"), SLOW.replace(**params))


def test_one_device_sends_nothing():
    one = ici(scwork.Topology(1, 1))
    assert one.mode == "none (one device)"
    assert one.stages == []
    # No other device: nothing to send, whatever the volume (no division by N - 1 = 0).
    assert one.time(5.0) == 0.0


def test_two_devices_one_step():
    two = ici(scwork.Topology(2, 1))
    assert two.mode == "collectives engine: ring all-to-all over all devices, alpha-beta cost"
    # v = 1 B: whole vector 1 x 2 / 1 = 2 B, two blocks of 1 B; one step, one block per
    # link: 0.5 + 1 / 1 = 1.5 s. v = 2 B: blocks of 2 B, 0.5 + 2 = 2.5 s.
    assert two.time(1.0) == pytest.approx(1.5)
    assert two.time(2.0) == pytest.approx(2.5)
    # Nothing to send takes no time (no latency paid for an empty all-to-all).
    assert two.time(0.0) == 0.0


def test_a_line_of_three_pays_each_step_on_its_own_busiest_link():
    # 3 chips without wraparound: the path 0 - 1 - 2. v = 2 B: whole vector 2 x 3 / 2 =
    # 3 B, blocks of 1 B. Step 0: chip 0 sends the blocks for 1 and 2 on 0 -> 1 (2 B),
    # chip 2 those for 1 and 0 on 2 -> 1 (2 B), chip 1 one block each way (1 B):
    # 0.5 + 2 = 2.5 s. Step 1: chip 1 relays the two end-to-end blocks, 1 B per link:
    # 0.5 + 1 = 1.5 s. Total 4 s (not the busiest link over both steps, 1 -> 2 with
    # 2 messages and 2 B: 1 + 2 = 3 s). 3 blocks of 1 B are also an uneven split of a
    # reference size that is not a multiple of 3 x 4 bytes.
    line = ici(scwork.Topology(3, 1, shape=(3,), wraparound=(False,)))
    assert line.mode == "collectives engine: ring all-to-all over all devices, alpha-beta cost"
    assert line.time(2.0) == pytest.approx(4.0, rel=1e-12)
    # The same 3 chips in a ring: every block one hop the shorter way, one step:
    # 0.5 + 1 = 1.5 s.
    ring = ici(scwork.Topology(3, 1))
    assert ring.time(2.0) == pytest.approx(1.5, rel=1e-12)


def test_grid_dimensions_of_size_one_are_no_ring():
    # A 2 x 1 grid is the 2-chip line: one ring, the time of test_two_devices_one_step.
    for shape in ((2, 1), (1, 2), (1, 2, 1)):
        grid = ici(scwork.Topology(2, 1, shape=shape))
        assert grid.mode == "collectives engine: ring all-to-all over all devices, alpha-beta cost", shape
        assert len(grid.stages) == 1, shape
        assert grid.time(2.0) == pytest.approx(2.5), shape


def test_a_ring_of_exactly_the_schedule_limit_uses_the_schedule():
    # ici_schedule_max_nodes = 2 and a 2-chip ring: the explicit schedule, 1.5 s for v = 1 B
    # (test_two_devices_one_step), not the closed form (1.0 s, below).
    at = ici(scwork.Topology(2, 1), ici_schedule_max_nodes=2)
    assert "scaling-book" not in at.mode
    assert at.time(1.0) == pytest.approx(1.5)


def test_closed_form_of_a_two_chip_ring():
    # Past the limit (1 node): [scaling-book] V / (4 x 2W) on one ring of n = 2, with
    # V = n x the whole vector = 2 x 2 B = 4 B: 4 / 8 = 0.5 s, plus n // 2 = 1 hop of
    # 0.5 s: 1.0 s.
    closed = ici(scwork.Topology(2, 1), ici_schedule_max_nodes=1)
    assert closed.mode.endswith("rings longer than 1")
    assert closed.time(1.0) == pytest.approx(1.0)
    # n = 5 (a ring of 5, v = 4 B): whole vector 4 x 5 / 4 = 5 B, V = 25 B: 25 / 8 s plus
    # 5 // 2 = 2 hops: 3.125 + 1.0 = 4.125 s.
    five = ici(scwork.Topology(5, 1), ici_schedule_max_nodes=4)
    assert five.time(4.0) == pytest.approx(25 / 8 + 1.0)


def test_devices_of_one_chip_are_a_stage_of_their_own():
    # 2 chips of 2 devices in a line: the 2-chip ring, then the 2 devices of a chip.
    # v = 3 B: whole vector 3 x 4 / 3 = 4 B. Chip ring: 2 blocks of 2 B, one step:
    # 0.5 + 2 = 2.5 s. On-chip pair: the same 2 blocks of 2 B over the link between the
    # chip's cores (the collectives engine's on-chip link: ON_CHIP_LATENCY_S and the
    # catalog chip's HBM bandwidth, not the ICI parameters).
    hbm = scwork.hardware.get("v5p").hbm_bandwidth_bytes_per_s
    topo = scwork.Topology(2, 4, devices_per_chip=2)
    pair = ici(topo)
    assert pair.mode.startswith("collectives engine: dimension by dimension (2 x 2 rings)")
    assert [n for n, _, _ in pair.stages] == [2, 2]
    assert pair.time(3.0) == pytest.approx(2.5 + ON_CHIP_LATENCY_S + 2 / hbm, rel=1e-12)
    # One chip of 2 devices: the on-chip stage alone is the one ring. v = 1 B: whole
    # vector 2 B, blocks of 1 B.
    alone = ici(scwork.Topology(1, 4, devices_per_chip=2))
    assert alone.mode == "collectives engine: ring all-to-all over all devices, alpha-beta cost"
    assert alone.time(1.0) == pytest.approx(ON_CHIP_LATENCY_S + 1 / hbm, rel=1e-12)
