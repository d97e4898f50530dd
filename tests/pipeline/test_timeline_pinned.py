"""The timeline's small pieces pinned by values worked out by hand.

tests/pipeline/test_timeline.py checks the steady-state period and the schedule's
properties; mutation testing (tools/mutation.py) showed what it does not look at:
``period()`` of runs of 1 to 4 steps and which completions it averages, the
pre-loop / post-loop boundaries, the ``to_dataset()`` columns and attributes, the
unit maps of :class:`Units`, the argument checks and the sequential barrier of the
first steps. Every expected value below is written out with its arithmetic.

The reference schedule ``REF`` is the module docstring's: one chip, one SparseCore,
host 0, SC forward 1, ICI 0, TC forward 1, TC backward 1, SC backward 1, one input
buffer. Worked out op by op (start, end), pipelined, 4 steps::

    step 0: host [0,0] SC/F [0,1] ICI/F [1,1] TC/F [1,2] TC/B [2,3] ICI/B [3,3] SC/B [3,4]
    step 1: host [1,1] SC/F [1,2] ICI/F [2,2] TC/F [3,4] TC/B [4,5] ICI/B [5,5] SC/B [5,6]
    step 2: host [2,2] SC/F [4,5] ICI/F [5,5] TC/F [5,6] TC/B [6,7] ICI/B [7,7] SC/B [7,8]
    step 3: host [5,5] SC/F [6,7] ICI/F [7,7] TC/F [7,8] TC/B [8,9] ICI/B [9,9] SC/B [9,10]

(SC/F 2 waits for SC/B 0, which ends at 4; the host of step i waits for SC/F of
step i - 1 to free the one input buffer.) Completions 4, 6, 8, 10. Sequential, every
step takes 1 + 1 + 1 + 1 = 4: completions 4, 8, 12, 16.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from scwork.errors import ConfigError
from scwork.pipeline.timeline import PHASES, Interval, Timeline, Units, simulate

UNIT = Units(num_chips=1, sparsecores_per_chip=1, tensorcores_per_chip=1, num_hosts=1)
REF = {"host": 0.0, "sc_forward": 1.0, "ici_forward": 0.0, "tc_forward": 1.0, "tc_backward": 1.0,
       "ici_backward": 0.0, "sc_backward": 1.0}
#: The reference durations times 1/16 (exact in binary): a makespan under one second.
SIXTEENTH = 1.0 / 16


def ref(scale=1.0):
    return {p: [v * scale] for p, v in REF.items()}


def hand_timeline(spans, num_steps, pipelined=False):
    """A Timeline of one chip with one SparseCore from ``{(phase, step): (start, end)}``."""
    start = {k: np.array([float(s)]) for k, (s, _) in spans.items()}
    end = {k: np.array([float(e)]) for k, (_, e) in spans.items()}
    return Timeline(UNIT, pipelined, num_steps, start, end, durations={})


def completions_timeline(completions):
    """A sequential timeline whose step i ends at ``completions[i]`` (one SC backward pass each)."""
    return hand_timeline({("sc_backward", i): (c - 0.5, c) for i, c in enumerate(completions)},
                         len(completions))


# -- period() -------------------------------------------------------------------------

@pytest.mark.parametrize(("pipelined", "num_steps", "expected"), [
    (True, 1, 4.0),    # one step: its completion, 4
    (True, 2, 2.0),    # (6 - 4) / 1
    (True, 3, 2.0),    # (8 - 4) / 2
    (True, 4, 2.0),    # last = 2, first = 1: (8 - 6) / 1
    (False, 1, 4.0),
    (False, 2, 4.0),   # (8 - 4) / 1
    (False, 3, 4.0),   # (12 - 4) / 2
    (False, 4, 4.0),   # (12 - 8) / 1
])
def test_period_of_the_reference_for_1_to_4_steps(pipelined, num_steps, expected):
    t = simulate(ref(), UNIT, num_steps=num_steps, pipelined=pipelined)
    assert t.step_completion().tolist() == ([4.0, 6.0, 8.0, 10.0] if pipelined else
                                            [4.0, 8.0, 12.0, 16.0])[:num_steps]
    assert t.period() == expected


@pytest.mark.parametrize(("completions", "expected"), [
    ([2.0], 2.0),                      # one step: c[0]
    ([2.0, 5.0], 3.0),                 # (5 - 2) / (2 - 1)
    ([2.0, 3.0, 5.0], 1.5),            # (5 - 2) / (3 - 1): all of a short run, not (3 - 2) / 1
    ([2.0, 3.0, 5.0, 9.0], 2.0),       # last = 4 - 2 = 2, first = 2 // 2 = 1: (5 - 3) / (2 - 1)
    ([2.0, 3.0, 5.0, 9.0, 17.0], 3.0),  # last = 3, first = 1: (9 - 3) / (3 - 1)
    ([1.0, 2.0, 4.0, 7.0, 13.0, 25.0, 49.0], 7.0),  # last = 5, first = 2: (25 - 4) / (5 - 2)
])
def test_period_averages_the_right_completions(completions, expected):
    # Completion gaps that differ step to step (1, 2, 4, 8...), so that averaging the
    # wrong steps, or dividing by the wrong count, gives another number.
    assert completions_timeline(completions).period() == expected


def test_repr_names_the_schedule():
    pipe = simulate(ref(), UNIT, num_steps=4, pipelined=True)
    seq = simulate(ref(), UNIT, num_steps=4, pipelined=False)
    assert repr(pipe) == ("Timeline(pipelined, 4 steps, 1 chips x 1 SparseCores, makespan 10 s, period 2 s)")
    assert repr(seq) == ("Timeline(sequential, 4 steps, 1 chips x 1 SparseCores, makespan 16 s, period 4 s)")


# -- stages ----------------------------------------------------------------------------

@pytest.mark.parametrize(("start", "end", "stage"), [
    (0.0, 0.5, "pre-loop"),   # ends before the TensorCore's first op (1)
    (0.0, 1.0, "pre-loop"),   # ends exactly when it starts
    (1.0, 1.0, "main"),       # zero length at the TensorCore's first start
    (0.5, 1.5, "main"),       # straddles it
    (5.0, 6.0, "main"),
    (9.0, 9.0, "main"),       # zero length at the TensorCore's last end (9)
    (8.5, 9.5, "main"),       # straddles it
    (9.0, 10.0, "post-loop"),  # starts exactly at it
    (9.5, 10.0, "post-loop"),  # starts after it
])
def test_stage_boundaries_of_the_pipelined_reference(start, end, stage):
    # TC/F 0 starts at 1, TC/B 3 ends at 9 (module docstring).
    t = simulate(ref(), UNIT, num_steps=4, pipelined=True)
    assert t.stage_of(start, end) == stage


def test_sequential_schedule_has_no_stages():
    t = simulate(ref(), UNIT, num_steps=2, pipelined=False)
    # No software pipeline: every interval is "main", wherever it lies.
    for start, end in [(-2.0, -1.0), (-1.0, 0.0), (0.0, 0.0), (100.0, 101.0)]:
        assert t.stage_of(start, end) == "main"


# -- update_offset() ------------------------------------------------------------------

def test_update_offset_with_updates_a_fraction_of_a_second_apart():
    # The reference times 1/16: SC/B 1 ends at 6/16, SC/F 3 starts at 6/16 and SC/F 2 at
    # 4/16, where SC/B 0 ends. SC/B 1 ends 2/16 s after SC/F 2 started: not visible to it.
    # Step 2 sees step 0, step 3 sees step 1: offset 2.
    t = simulate(ref(SIXTEENTH), UNIT, num_steps=4, pipelined=True)
    assert t.start[("sc_forward", 2)].tolist() == [4 * SIXTEENTH]
    assert t.end[("sc_backward", 1)].tolist() == [6 * SIXTEENTH]
    assert t.update_offset() == 2
    assert simulate(ref(SIXTEENTH), UNIT, num_steps=3, pipelined=True).update_offset() == 2
    assert simulate(ref(SIXTEENTH), UNIT, num_steps=3, pipelined=False).update_offset() == 1


def test_update_offset_without_any_visible_update():
    # SC forward passes at 0, 1, 2; every SC backward pass ends at 10 or later: step 2 sees
    # no update at all, i.e. "step -1": offset 2 - (-1) = 3.
    spans = {("sc_forward", i): (float(i), float(i) + 0.5) for i in range(3)}
    spans |= {("sc_backward", i): (10.0 + i, 10.5 + i) for i in range(3)}
    assert hand_timeline(spans, 3).update_offset() == 3


def test_update_offset_ignores_the_first_two_steps():
    # Step 1's forward pass (at 0.5) comes before step 0's update (ends at 1): a gap of 2,
    # but only steps j >= 2 count. Step 2 (at 2.5) sees step 1 (ends at 2): offset 1.
    spans = {("sc_forward", 0): (0.0, 0.0), ("sc_forward", 1): (0.5, 0.5), ("sc_forward", 2): (2.5, 2.5),
             ("sc_backward", 0): (0.5, 1.0), ("sc_backward", 1): (1.5, 2.0), ("sc_backward", 2): (2.5, 3.0)}
    assert hand_timeline(spans, 3).update_offset() == 1


@pytest.mark.parametrize("sc_forward", [0.0, 1.17549435e-38, 1e-300])
def test_update_offset_when_ops_share_a_time_stamp(sc_forward):
    # Host 1 s, SC forward 1e-38 s (or 0), everything else 0: 1.0 + 1e-38 == 1.0 in float64,
    # so SC/B_{j-1} ends at the very time stamp SC/F_j starts. It still runs after SC/F_j on
    # the SparseCore (F_{j-1}, B_{j-2}, F_j, B_{j-1}): the offset is 2 pipelined, 1 sequential.
    # (An absolute 1e-15 s tolerance once read this tie as "visible" and gave 1.)
    d = {p: [0.0] for p in PHASES} | {"host": [1.0], "sc_forward": [sc_forward]}
    pipe = simulate(d, UNIT, num_steps=5, pipelined=True)
    assert pipe.end[("sc_backward", 2)].tolist() == pipe.start[("sc_forward", 3)].tolist() == [4.0]
    assert pipe.update_offset() == 2
    assert simulate(d, UNIT, num_steps=5, pipelined=False).update_offset() == 1


def test_update_offset_of_tiny_ops_is_not_read_with_an_absolute_tolerance():
    # Every op 1e-20 s: the whole run lasts 1e-19 s, far below any fixed tolerance.
    d = {p: [1e-20] for p in PHASES}
    assert simulate(d, UNIT, num_steps=5, pipelined=True).update_offset() == 2
    assert simulate(d, UNIT, num_steps=5, pipelined=False).update_offset() == 1


@pytest.mark.parametrize("pipelined, offset", [(True, 2), (False, 1)])
def test_update_offset_breaks_ties_by_program_order(pipelined, offset):
    # Hand-made spans where every SC/B_i ends exactly when SC/F_{i+1} starts (at i + 1) and
    # SC/F_{i+2} starts at i + 2 too: SC/B_{j-1} ties with SC/F_j. Sequentially B_{j-1} ran
    # first (visible, offset 1); pipelined it runs after F_j (not visible, offset 2).
    spans = {("sc_forward", i): (float(i), float(i)) for i in range(4)}
    spans |= {("sc_backward", i): (float(i) + 0.5, float(i) + 1.0) for i in range(4)}
    # A pipelined Timeline reads its pre-loop / post-loop bounds off the TensorCore's ops.
    spans |= {(p, i): (float(i), float(i) + 0.5) for p in ("tc_forward", "tc_backward") for i in range(4)}
    assert hand_timeline(spans, 4, pipelined=pipelined).update_offset() == offset
    # One ulp earlier, the update is visible in either order.
    spans[("sc_backward", 2)] = (2.5, np.nextafter(3.0, 0.0))
    spans[("sc_backward", 1)] = (1.5, np.nextafter(2.0, 0.0))
    assert hand_timeline(spans, 4, pipelined=pipelined).update_offset() == 1



def test_update_offset_ties_of_earlier_steps_count_too():
    # Two SparseCores, pipelined, each in program order F0 F1 B0 F2 B1 F3 B2 B3:
    #   SC 0: F0 [0,1] F1 [1,2] B0 [2,3] F2 [3,4] B1 [4,5] F3 [5,6] B2 [6,7] B3 [7,8]
    #   SC 1: F0 [0,.5] F1 [.5,1] B0 [1,1.5] F2 [1.5,2] B1 [2,2.5] F3 [3,3.5] B2 [3.5,4] B3 [4,4.5]
    # Updates end (latest SparseCore) at 3, 5, 7, 8; forward passes start (earliest) F2 at
    # 1.5, F3 at 3. Step 2 sees no update: 2 - (-1) = 3. Step 3 starts at 3, the very time
    # B0 ends: B0 comes before F3 in program order (as B1 does, which ends at 5), so it is
    # visible: 3 - 0 = 3. Offset 3 (4 if only B_{j-2}'s tie counted).
    units = Units(num_chips=1, sparsecores_per_chip=2, tensorcores_per_chip=1, num_hosts=1)
    sc = {("sc_forward", 0): ((0, 1), (0, .5)), ("sc_forward", 1): ((1, 2), (.5, 1)),
          ("sc_backward", 0): ((2, 3), (1, 1.5)), ("sc_forward", 2): ((3, 4), (1.5, 2)),
          ("sc_backward", 1): ((4, 5), (2, 2.5)), ("sc_forward", 3): ((5, 6), (3, 3.5)),
          ("sc_backward", 2): ((6, 7), (3.5, 4)), ("sc_backward", 3): ((7, 8), (4, 4.5))}
    start = {k: np.array([float(a[0]), float(b[0])]) for k, (a, b) in sc.items()}
    end = {k: np.array([float(a[1]), float(b[1])]) for k, (a, b) in sc.items()}
    for p in ("tc_forward", "tc_backward"):
        for i in range(4):
            start[(p, i)], end[(p, i)] = np.array([float(i)]), np.array([i + 0.5])
    t = Timeline(units, True, 4, start, end, durations={})
    assert t.update_offset() == 3
    assert t.staleness_steps == 2


def test_update_offset_of_a_tie_with_the_step_s_own_backward_pass():
    # Sequential spans: SC/F 2 at 3 s, zero-length; SC/B 2 zero-length at the same time
    # stamp; SC/B 1 ends at 3.5, SC/B 0 at 1. B2 shares F2's time stamp but runs after it
    # (program order F2, B2): not visible. Step 2 sees step 0: offset 2.
    spans = {("sc_forward", 0): (0.0, 0.0), ("sc_forward", 1): (1.0, 1.0), ("sc_forward", 2): (3.0, 3.0),
             ("sc_backward", 0): (0.5, 1.0), ("sc_backward", 1): (1.5, 3.5), ("sc_backward", 2): (3.0, 3.0)}
    assert hand_timeline(spans, 3).update_offset() == 2


def test_update_offset_is_at_least_one():
    # Spans that put every step's SC backward pass (ending at i + 0.25) before its own
    # forward pass (at i + 0.5): each step "sees" its own update, a gap of 0, but the
    # offset stays 1 (no staleness) and the staleness 0, never negative.
    spans = {("sc_forward", i): (i + 0.5, i + 0.5) for i in range(3)}
    spans |= {("sc_backward", i): (float(i), i + 0.25) for i in range(3)}
    t = hand_timeline(spans, 3)
    assert t.update_offset() == 1
    assert t.staleness_steps == 0

# -- to_dataset() ---------------------------------------------------------------------

def test_to_dataset_columns_of_the_reference_at_one_sixteenth():
    t = simulate(ref(SIXTEENTH), UNIT, num_steps=4, pipelined=True, steady_state_step_time=0.125)
    ds = t.to_dataset()
    s = SIXTEENTH
    # start / end per (step, phase), from the table in the module docstring, in 1/16 s
    starts = [[0, 0, 1, 1, 2, 3, 3], [1, 1, 2, 3, 4, 5, 5], [2, 4, 5, 5, 6, 7, 7], [5, 6, 7, 7, 8, 9, 9]]
    ends = [[0, 1, 1, 2, 3, 3, 4], [1, 2, 2, 4, 5, 5, 6], [2, 5, 5, 6, 7, 7, 8], [5, 7, 7, 8, 9, 9, 10]]
    assert list(ds["phase"].values) == list(PHASES)
    assert ds["start"].values.tolist() == [[v * s for v in row] for row in starts]
    assert ds["end"].values.tolist() == [[v * s for v in row] for row in ends]
    # duration = end - start: 1/16 for SC and TC phases, 0 for the host and the links
    assert ds["duration"].values.tolist() == [[0.0, s, 0.0, s, s, 0.0, s]] * 4
    # stages: before TC/F 0 starts (1/16) pre-loop, after TC/B 3 ends (9/16) post-loop
    assert ds["stage"].sel(step=0).values.tolist() == ["pre-loop", "pre-loop", "main", "main", "main", "main",
                                                       "main"]
    assert ds["stage"].sel(step=3).values.tolist() == ["main"] * 6 + ["post-loop"]
    # busy: SparseCore 4 forward + 4 backward passes of 1/16 = 0.5 s, TensorCore the same;
    # host and links 0. Makespan 10/16 = 0.625 s: utilization 0.5 / 0.625 = 0.8.
    assert ds["resource"].values.tolist() == ["host0", "chip0/sc0", "chip0/ici", "chip0/tc"]
    assert ds["resource_kind"].values.tolist() == ["host", "sc", "ici", "tc"]
    assert ds["busy"].values.tolist() == [0.0, 0.5, 0.0, 0.5]
    assert ds["utilization"].values.tolist() == [0.0, 0.8, 0.0, 0.8]
    assert ds.attrs["makespan"] == 0.625
    assert ds.attrs["pipelined"] == 1
    assert ds.attrs["num_steps"] == 4
    assert ds.attrs["update_offset"] == 2
    assert ds.attrs["steady_state_step_time"] == 0.125


def test_to_dataset_of_an_all_zero_run():
    # Every duration 0: makespan 0, so utilization is 0 everywhere (not 0 / 0).
    t = simulate({p: [0.0] for p in PHASES}, UNIT, num_steps=2, pipelined=False)
    ds = t.to_dataset()
    assert ds.attrs["makespan"] == 0.0
    assert ds["utilization"].values.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert ds["duration"].values.tolist() == [[0.0] * 7] * 2
    # no steady-state step time given: NaN
    assert math.isnan(ds.attrs["steady_state_step_time"])


@pytest.mark.parametrize(("num_steps", "offset"), [(1, None), (2, None), (3, 2), (4, 2)])
def test_to_dataset_update_offset_from_3_steps(num_steps, offset):
    ds = simulate(ref(), UNIT, num_steps=num_steps, pipelined=True).to_dataset()
    assert ds.attrs.get("update_offset") == offset
    assert ds.sizes["step"] == num_steps


def test_to_dataset_resource_kinds_of_two_chips_and_hosts():
    units = Units(num_chips=2, sparsecores_per_chip=2, num_hosts=2)
    ds = simulate({p: 1.0 for p in PHASES}, units, num_steps=1, pipelined=False).to_dataset()
    assert ds["resource"].values.tolist() == ["host0", "host1", "chip0/sc0", "chip0/sc1", "chip0/ici", "chip0/tc",
                                              "chip1/sc0", "chip1/sc1", "chip1/ici", "chip1/tc"]
    assert ds["resource_kind"].values.tolist() == ["host", "host", "sc", "sc", "ici", "tc", "sc", "sc", "ici",
                                                   "tc"]


def test_to_dataset_lane_without_intervals_is_idle():
    # Only SC phases: the host, link and TensorCore lanes were never busy (0 s, not a default).
    spans = {("sc_forward", 0): (0.0, 1.0), ("sc_backward", 0): (1.0, 3.0), ("sc_forward", 1): (3.0, 4.0),
             ("sc_backward", 1): (4.0, 6.0)}
    ds = hand_timeline(spans, 2).to_dataset()
    # SparseCore busy 1 + 2 + 1 + 2 = 6 of a makespan of 6
    assert ds["busy"].values.tolist() == [0.0, 6.0, 0.0, 0.0]
    assert ds["utilization"].values.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_interval_duration_and_columns():
    iv = Interval("chip0/sc0", "sc", 0, 0, "sc_forward", 0, 1.0, 2.5, "main")
    assert iv.duration == 1.5            # 2.5 - 1.0
    t = simulate(ref(), UNIT, num_steps=4, pipelined=True)
    cols = t.columns()
    k = [i for i, (p, s) in enumerate(zip(cols["phase"], cols["step"])) if (p, s) == ("tc_backward", 3)][0]
    assert (cols["start"][k], cols["end"][k], cols["duration"][k]) == (8.0, 9.0, 1.0)


# -- Units ------------------------------------------------------------------------------

def test_units_defaults():
    u = Units(num_chips=1, sparsecores_per_chip=1)
    assert (u.tensorcores_per_chip, u.num_hosts, u.chips_per_host) == (1, 1, 1)


def test_units_and_intervals_are_frozen_and_hashable():
    u = Units(num_chips=1, sparsecores_per_chip=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        u.num_chips = 2
    assert hash(u) == hash(Units(num_chips=1, sparsecores_per_chip=1))
    iv = Interval("host0", "host", -1, 0, "host", 0, 0.0, 1.0, "main")
    with pytest.raises(dataclasses.FrozenInstanceError):
        iv.end = 2.0
    assert len({iv, Interval("host0", "host", -1, 0, "host", 0, 0.0, 1.0, "main")}) == 1


def test_unit_maps_of_two_chips_of_two_sparsecores_on_two_hosts():
    u = Units(num_chips=2, sparsecores_per_chip=2, num_hosts=2)
    assert u.chips_per_host == 1                       # ceil(2 / 2)
    assert [u.count(k) for k in ("host", "sc", "ici", "tc")] == [2, 4, 2, 2]
    assert u.chip_of("sc").tolist() == [0, 0, 1, 1]    # SparseCore k is on chip k // 2
    assert u.chip_of("host").tolist() == [-1, -1]
    assert u.chip_of("ici").tolist() == [0, 1]
    assert u.chip_of("tc").tolist() == [0, 1]
    assert u.index_in_chip("sc").tolist() == [0, 1, 0, 1]   # k % 2
    assert u.index_in_chip("host").tolist() == [0, 1]
    assert u.index_in_chip("ici").tolist() == [0, 0]
    assert u.index_in_chip("tc").tolist() == [0, 0]
    assert u.host_of_chip.tolist() == [0, 1]
    assert [u.resource_name("host", 1), u.resource_name("sc", 3), u.resource_name("ici", 1),
            u.resource_name("tc", 0)] == ["host1", "chip1/sc1", "chip1/ici", "chip0/tc"]
    # the same maps on the intervals of a schedule
    t = simulate({p: 1.0 for p in PHASES}, u, num_steps=1, pipelined=False)
    seen = {(iv.resource, iv.kind, iv.chip, iv.unit) for iv in t.intervals}
    assert seen == {("host0", "host", -1, 0), ("host1", "host", -1, 1),
                    ("chip0/sc0", "sc", 0, 0), ("chip0/sc1", "sc", 0, 1), ("chip1/sc0", "sc", 1, 0),
                    ("chip1/sc1", "sc", 1, 1), ("chip0/ici", "ici", 0, 0), ("chip1/ici", "ici", 1, 0),
                    ("chip0/tc", "tc", 0, 0), ("chip1/tc", "tc", 1, 0)}


def test_units_host_count_must_match_the_chips():
    assert Units(num_chips=4, sparsecores_per_chip=1, num_hosts=2).host_of_chip.tolist() == [0, 0, 1, 1]
    assert Units(num_chips=3, sparsecores_per_chip=1, num_hosts=2).host_of_chip.tolist() == [0, 0, 1]
    with pytest.raises(ConfigError, match="2 hosts of 1 chips do not feed 4 chips"):
        Units(num_chips=4, sparsecores_per_chip=1, num_hosts=2, chips_per_host=1)   # 4 hosts needed
    with pytest.raises(ConfigError, match="4 hosts of 1 chips do not feed 2 chips"):
        Units(num_chips=2, sparsecores_per_chip=1, num_hosts=4)                     # 2 hosts needed


@pytest.mark.parametrize("bad", [True, 1.5, 2.0, 0])
@pytest.mark.parametrize("field", ["num_chips", "sparsecores_per_chip", "tensorcores_per_chip", "num_hosts"])
def test_units_refuse_bools_floats_and_zero(field, bad):
    kwargs = {"num_chips": 1, "sparsecores_per_chip": 1, field: bad}
    with pytest.raises(ConfigError, match=f"Units.{field} must be an integer >= 1"):
        Units(**kwargs)


def test_units_accept_numpy_integers():
    u = Units(num_chips=np.int64(2), sparsecores_per_chip=np.int32(3))
    assert u.count("sc") == 6


# -- simulate()'s arguments and the first steps --------------------------------------------

@pytest.mark.parametrize("bad", [True, False, 2.0, 0])
def test_simulate_refuses_bad_num_steps(bad):
    with pytest.raises(ConfigError, match="num_steps must be an integer >= 1"):
        simulate(ref(), UNIT, num_steps=bad, pipelined=True)


@pytest.mark.parametrize("bad", [True, False, 1.0, 0])
def test_simulate_refuses_bad_input_buffers(bad):
    with pytest.raises(ConfigError, match="input_buffers must be an integer >= 1"):
        simulate(ref(), UNIT, num_steps=2, pipelined=True, input_buffers=bad)


def test_simulate_one_step():
    # host [0,0] SC/F [0,1] ICI/F [1,1] TC/F [1,2] TC/B [2,3] ICI/B [3,3] SC/B [3,4], both schedules
    for pipelined in (True, False):
        t = simulate(ref(), UNIT, num_steps=np.int64(1), pipelined=pipelined)
        assert t.step_completion().tolist() == [4.0]
        assert t.start[("sc_backward", 0)].tolist() == [3.0]


def test_simulate_default_is_one_input_buffer():
    # Host 1, SC forward 10, the rest 0. One buffer: the host prepares step i once SC/F of
    # step i - 1 ended: hosts at 0, 11, 22. (Two buffers would start host 1 at 1.)
    d = {p: [0.0] for p in PHASES} | {"host": [1.0], "sc_forward": [10.0]}
    t = simulate(d, UNIT, num_steps=3, pipelined=True)
    assert [float(t.start[("host", i)][0]) for i in range(3)] == [0.0, 11.0, 22.0]


def test_simulate_broadcasts_scalars_and_checks_shapes():
    units = Units(num_chips=1, sparsecores_per_chip=2)
    t = simulate({p: 1.0 for p in PHASES}, units, num_steps=1, pipelined=False)
    # host 0 [0, 1]; both SparseCores' forward [1, 2]: each is given the broadcast 1 s
    assert t.start[("sc_forward", 0)].tolist() == [1.0, 1.0]
    assert t.end[("sc_forward", 0)].tolist() == [2.0, 2.0]
    for bad in ([1.0], [[1.0, 1.0]], [1.0, 1.0, 1.0]):
        with pytest.raises(ConfigError, match=r"durations\['sc_forward'\] has shape"):
            simulate({p: 1.0 for p in PHASES} | {"sc_forward": bad}, units, num_steps=1, pipelined=False)


def test_sequential_forward_waits_for_every_sparsecore_update():
    # One chip, two SparseCores; SC backward 1 on SparseCore 0, 3 on SparseCore 1, the rest 0.
    # Step 0 ends its backward passes at 1 and 3; the forward pass of step 1 starts on both
    # SparseCores at 3 (any of them may hold the rows it reads), not at 1 on SparseCore 0.
    units = Units(num_chips=1, sparsecores_per_chip=2)
    d = {p: 0.0 for p in PHASES} | {"sc_backward": [1.0, 3.0]}
    t = simulate(d, units, num_steps=3, pipelined=False)
    assert t.end[("sc_backward", 0)].tolist() == [1.0, 3.0]
    assert t.start[("sc_forward", 1)].tolist() == [3.0, 3.0]
    assert t.start[("sc_forward", 2)].tolist() == [6.0, 6.0]   # step 1's updates end at 4 and 6


def test_phase_dependencies_sequential_step_by_hand():
    # Sequential, durations host 1, SC/F 2, ICI/F 3, TC/F 4, TC/B 5, ICI/B 6, SC/B 7, on one
    # chip: each phase starts when the one before it ended: 0, 1, 3, 6, 10, 15, 21 (end 28).
    # Step 1: the host waited for SC/F 0 (ends at 3): [3, 4]; SC/F 1 for SC/B 0: 28.
    d = {p: [float(k + 1)] for k, p in enumerate(PHASES)}
    t = simulate(d, UNIT, num_steps=2, pipelined=False)
    assert [float(t.start[(p, 0)][0]) for p in PHASES] == [0.0, 1.0, 3.0, 6.0, 10.0, 15.0, 21.0]
    assert [float(t.start[(p, 1)][0]) for p in PHASES] == [3.0, 28.0, 30.0, 33.0, 37.0, 42.0, 48.0]
    assert t.step_completion().tolist() == [28.0, 55.0]
