"""The sequential and pipelined schedules ([sc-guide] §5): hand-computed cases and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scwork.errors import ConfigError
from scwork.pipeline.timeline import PHASE_RESOURCE, PHASES, Units, simulate


def one_chip(**phases):
    base = {p: 0.0 for p in PHASES}
    base.update(phases)
    return {p: [v] for p, v in base.items()}


UNIT = Units(num_chips=1, sparsecores_per_chip=1, tensorcores_per_chip=1, num_hosts=1)


def test_hand_computed_sequential_and_pipelined_step_times():
    # SC/F 1, ICI/F 0.5, TC/F 2, TC/B 3, ICI/B 0.5, SC/B 1, no host time.
    d = one_chip(sc_forward=1.0, ici_forward=0.5, tc_forward=2.0, tc_backward=3.0, ici_backward=0.5, sc_backward=1.0)
    seq = simulate(d, UNIT, num_steps=12, pipelined=False)
    pipe = simulate(d, UNIT, num_steps=12, pipelined=True)
    # Sequential: every phase after the other: 1 + 0.5 + 2 + 3 + 0.5 + 1 = 8 per step.
    assert seq.period() == pytest.approx(8.0)
    assert seq.step_completion()[:3].tolist() == pytest.approx([8.0, 16.0, 24.0])
    # Pipelined: the SparseCore + links need 1 + 0.5 + 0.5 + 1 = 3 per step, the
    # TensorCore 2 + 3 = 5: the TensorCore bounds the period at 5 (speed-up 8 / 5 = 1.6).
    assert pipe.period() == pytest.approx(5.0)
    # First step: SC/F_0 [0,1], ICI/F_0 [1,1.5], TC/F_0 [1.5,3.5], TC/B_0 [3.5,6.5],
    # ICI/B_0 [6.5,7] (after ICI/F_1 [2,2.5]), SC/B_0 [7,8].
    assert pipe.start[("tc_forward", 0)][0] == pytest.approx(1.5)
    assert pipe.start[("ici_forward", 1)][0] == pytest.approx(2.0)
    assert pipe.end[("sc_backward", 0)][0] == pytest.approx(8.0)


def test_equal_halves_give_exactly_twice():
    # SC work = TC work = 2 per step: sequential 4, pipelined 2 ([sc-guide] §5: "up to 2x").
    d = one_chip(sc_forward=1.0, tc_forward=1.0, tc_backward=1.0, sc_backward=1.0)
    seq = simulate(d, UNIT, num_steps=20, pipelined=False)
    pipe = simulate(d, UNIT, num_steps=20, pipelined=True)
    assert seq.period() / pipe.period() == pytest.approx(2.0)


def test_staleness_is_read_off_the_schedule():
    d = one_chip(sc_forward=1.0, tc_forward=1.0, tc_backward=1.0, sc_backward=1.0)
    seq = simulate(d, UNIT, num_steps=6, pipelined=False)
    pipe = simulate(d, UNIT, num_steps=6, pipelined=True)
    assert (seq.update_offset(), seq.staleness_steps) == (1, 0)
    # Updates of step i are visible to the SparseCore only at step i + 2 ([sc-guide] §5).
    assert (pipe.update_offset(), pipe.staleness_steps) == (2, 1)
    # And in detail: SC/F of step 3 starts after SC/B of step 1 ended, before SC/B of step 2.
    assert pipe.start[("sc_forward", 3)][0] >= pipe.end[("sc_backward", 1)][0]
    assert pipe.start[("sc_forward", 3)][0] < pipe.end[("sc_backward", 2)][0]


def test_pre_loop_main_loop_post_loop_stages():
    d = one_chip(sc_forward=1.0, tc_forward=1.0, tc_backward=1.0, sc_backward=1.0)
    pipe = simulate(d, UNIT, num_steps=4, pipelined=True)
    sc = [(iv.phase, iv.step, iv.stage) for iv in pipe.intervals if iv.kind == "sc"]
    assert sc[0] == ("sc_forward", 0, "pre-loop")
    assert sc[-1] == ("sc_backward", 3, "post-loop")
    assert {s for _, _, s in sc[1:-1]} == {"main"}
    seq = simulate(d, UNIT, num_steps=4, pipelined=False)
    assert {iv.stage for iv in seq.intervals} == {"main"}


def test_host_and_input_buffers_hand_computed():
    # Host 10, SC/F 1, the rest 0. With one input buffer the host may only start step i
    # once SC/F of step i-1 consumed the slot: the host and SC/F serialize: 10 + 1 = 11.
    d = one_chip(host=10.0, sc_forward=1.0)
    one = simulate(d, UNIT, num_steps=16, pipelined=True, input_buffers=1)
    assert one.period() == pytest.approx(11.0)
    # With two buffers the host runs a step ahead and only its own 10 remain.
    two = simulate(d, UNIT, num_steps=16, pipelined=True, input_buffers=2)
    assert two.period() == pytest.approx(10.0)


def test_multi_chip_barriers_and_per_chip_sparsecores():
    units = Units(num_chips=2, sparsecores_per_chip=2, tensorcores_per_chip=2, num_hosts=1)
    # SparseCore 3 (chip 1) is slow: the all-to-all waits for it on both chips.
    d = {p: np.zeros(units.count(PHASE_RESOURCE[p])) for p in PHASES}
    d["sc_forward"] = np.array([1.0, 1.0, 1.0, 3.0])
    d["ici_forward"] = np.array([0.5, 0.5])
    d["tc_forward"] = np.array([1.0, 1.0])
    seq = simulate(d, units, num_steps=3, pipelined=False)
    assert seq.start[("ici_forward", 0)].tolist() == [3.0, 3.0]
    assert seq.start[("tc_forward", 0)].tolist() == [3.5, 3.5]
    lanes = seq.resources()
    assert lanes == ["host0", "chip0/sc0", "chip0/sc1", "chip0/ici", "chip0/tc", "chip1/sc0", "chip1/sc1",
                     "chip1/ici", "chip1/tc"]
    ds = seq.to_dataset()
    assert ds["start"].dims == ("step", "phase")
    assert ds["busy"].attrs["units"] == "s"
    assert float(ds["busy"].sel(resource="chip1/sc1")) == pytest.approx(9.0)


def test_errors_are_typed():
    d = one_chip(sc_forward=1.0)
    with pytest.raises(ConfigError, match="num_steps"):
        simulate(d, UNIT, num_steps=0, pipelined=True)
    with pytest.raises(ConfigError, match="input_buffers"):
        simulate(d, UNIT, num_steps=2, pipelined=True, input_buffers=0)
    bad = dict(d)
    del bad["host"]
    with pytest.raises(ConfigError, match="host"):
        simulate(bad, UNIT, num_steps=2, pipelined=True)
    with pytest.raises(ConfigError, match="shape"):
        simulate({**d, "sc_forward": [1.0, 2.0]}, UNIT, num_steps=2, pipelined=True)
    with pytest.raises(ConfigError, match=">= 0"):
        simulate({**d, "tc_forward": [-1.0]}, UNIT, num_steps=2, pipelined=True)
    with pytest.raises(ConfigError):
        Units(num_chips=0, sparsecores_per_chip=1)
    with pytest.raises(ConfigError, match="at least 3"):
        simulate(d, UNIT, num_steps=2, pipelined=True).update_offset()


durations = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@st.composite
def systems(draw):
    chips = draw(st.integers(1, 3))
    scs = draw(st.integers(1, 3))
    hosts = draw(st.integers(1, chips))
    units = Units(num_chips=chips, sparsecores_per_chip=scs, tensorcores_per_chip=1,
                  num_hosts=-(-chips // -(-chips // hosts)), chips_per_host=-(-chips // hosts))
    d = {}
    for p in PHASES:
        n = units.count(PHASE_RESOURCE[p])
        if PHASE_RESOURCE[p] in ("sc", "host"):
            d[p] = np.array(draw(st.lists(durations, min_size=n, max_size=n)))
        else:  # links and TensorCores do the same work on every chip
            d[p] = np.full(n, draw(durations))
    return units, d, draw(st.integers(1, 3))


@given(systems())
def test_properties_pipelined_never_slower_and_at_most_twice(system):
    units, d, buffers = system
    seq = simulate(d, units, num_steps=30, pipelined=False, input_buffers=buffers)
    pipe = simulate(d, units, num_steps=30, pipelined=True, input_buffers=buffers)
    tol = 1e-9 * (1 + seq.period())
    assert pipe.period() <= seq.period() + tol
    # Two resource groups (SparseCore + links, TensorCore) and two-step staleness: at most 2x.
    assert seq.period() <= 2 * pipe.period() + tol
    # The period is never below any resource's busy time per step.
    sc_busy = (d["sc_forward"] + d["sc_backward"]).max()
    tc_busy = (d["tc_forward"] + d["tc_backward"]).max()
    assert pipe.period() >= max(sc_busy, tc_busy, d["host"].max()) - tol
    # SC/F_j waits for SC/B_{j-2} everywhere; SC/B_{j-1} runs after SC/F_j on every SparseCore
    # (in program order even where zero-length or float-absorbed ops give both one time stamp),
    # so the updates of step i show up exactly at i + 2, whatever the durations.
    assert pipe.update_offset() == 2
    assert seq.update_offset() == 1


@given(systems(), st.booleans())
def test_properties_resources_run_one_op_at_a_time_and_dependencies_hold(system, pipelined):
    units, d, buffers = system
    tl = simulate(d, units, num_steps=5, pipelined=pipelined, input_buffers=buffers)
    eps = 1e-9
    by_lane: dict[str, list] = {}
    for iv in tl.intervals:
        by_lane.setdefault(iv.resource, []).append((iv.start, iv.end))
    for spans in by_lane.values():
        spans.sort()
        for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
            assert s1 >= e0 - eps
    chip_of_sc = units.chip_of_sc
    for i in range(tl.num_steps):
        assert (tl.start[("sc_forward", i)] >= tl.end[("host", i)][units.host_of_chip[chip_of_sc]] - eps).all()
        assert (tl.start[("ici_forward", i)] >= tl.end[("sc_forward", i)].max() - eps).all()
        assert (tl.start[("tc_forward", i)] >= tl.end[("ici_forward", i)] - eps).all()
        assert (tl.start[("tc_backward", i)] >= tl.end[("tc_forward", i)] - eps).all()
        assert (tl.start[("ici_backward", i)] >= tl.end[("tc_backward", i)].max() - eps).all()
        assert (tl.start[("sc_backward", i)] >= tl.end[("ici_backward", i)][chip_of_sc] - eps).all()
        if pipelined and i >= 2:
            assert (tl.start[("sc_forward", i)] >= tl.end[("sc_backward", i - 2)].max() - eps).all()
