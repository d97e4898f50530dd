"""frames(): the incremental per-frame states equal the whole-state reference after every step."""

from __future__ import annotations

import numpy as np
import pytest

from scwork.collectives import Network, build, frames
from scwork.collectives._frame_status import frame_status_reference
from scwork.collectives.execute import _initial_bits, _target_bits, _Tracker

CASES = [
    ("ring", Network.ring(5), {}),
    ("bidirectional_ring", Network.torus((3, 4)), {}),
    ("single_path", Network.line(6), {}),
    ("pincer", Network.ring(6), {}),
    ("rotated_pincer", Network.ring(7), {}),
    ("multi_color", Network.torus((2, 3, 4)), {}),
    ("dimension_by_dimension", Network.mesh((3, 3), cores_per_chip=2), {}),
    ("reduce_scatter", Network.ring(6), {}),
    ("all_gather", Network.torus((4, 4)), {}),
    ("dimension_by_dimension", Network.torus((4, 4)), {"dims": (0,)}),
]


def reference_frames(schedule):
    """Counts and states recomputed over the whole state after every step."""
    tracker = _Tracker(schedule)
    target, mask = _target_bits(schedule)
    own = _initial_bits(schedule) if schedule.collective != "all_gather" else None
    out = [frame_status_reference(tracker.bits, target, mask, own, schedule.collective == "all_reduce")]
    for t in range(schedule.num_steps):
        tracker.step(t, schedule.step_slice(t))
        out.append(frame_status_reference(tracker.bits, target, mask, own, schedule.collective == "all_reduce"))
    return np.stack([c for c, _ in out]), np.stack([s for _, s in out])


@pytest.mark.parametrize("name, network, kwargs", CASES, ids=[f"{c[0]}-{c[1].name}" for c in CASES])
def test_frames_match_the_whole_state_reference(name, network, kwargs):
    schedule = build(name, network, **kwargs)
    f = frames(schedule)
    counts, status = reference_frames(schedule)
    np.testing.assert_array_equal(f.contributions.values, counts)
    np.testing.assert_array_equal(f.status.values, status)
    assert (status[-1] == 3).any() and (status[0] != 3).any()    # the states do move
