"""The first steps of the pipelined schedule, op by op, worked out by hand.

tests/pipeline/test_timeline.py checks the steady-state period; a schedule that
starts wrong (the host's first wait for a free input buffer one step early or late)
reaches the same period and passes there. Here every start time of the first steps
is written out.
"""

from __future__ import annotations

import pytest

from scwork.pipeline.timeline import PHASES, Units, simulate

UNIT = Units(num_chips=1, sparsecores_per_chip=1, tensorcores_per_chip=1, num_hosts=1)


def one_chip(**phases):
    base = {p: 0.0 for p in PHASES}
    base.update(phases)
    return {p: [v] for p, v in base.items()}


def starts(timeline, phase, steps):
    return [float(timeline.start[(phase, i)][0]) for i in range(steps)]


@pytest.mark.parametrize("pipelined", [True, False])
def test_one_input_buffer_host_waits_from_step_1(pipelined):
    # Host 1, SC forward 10, the rest 0. One buffer: the host prepares step i only after
    # SC forward of step i - 1 took the buffer: host 0 [0, 1], SC/F 0 [1, 11], host 1
    # [11, 12], SC/F 1 [12, 22], host 2 [22, 23], SC/F 2 [23, 33].
    t = simulate(one_chip(host=1.0, sc_forward=10.0), UNIT, num_steps=4, pipelined=pipelined, input_buffers=1)
    assert starts(t, "host", 4) == [0.0, 11.0, 22.0, 33.0]
    assert starts(t, "sc_forward", 4) == [1.0, 12.0, 23.0, 34.0]


def test_two_input_buffers_host_waits_from_step_2():
    # Two buffers: host 0 [0, 1] and host 1 [1, 2] run without waiting; host 2 waits for
    # SC/F 0 to end (11), host 3 for SC/F 1 (21). SC/F runs back to back from 1.
    t = simulate(one_chip(host=1.0, sc_forward=10.0), UNIT, num_steps=5, pipelined=True, input_buffers=2)
    assert starts(t, "host", 5) == [0.0, 1.0, 11.0, 21.0, 31.0]
    assert starts(t, "sc_forward", 5) == [1.0, 11.0, 21.0, 31.0, 41.0]


def test_three_input_buffers():
    t = simulate(one_chip(host=1.0, sc_forward=10.0), UNIT, num_steps=5, pipelined=True, input_buffers=3)
    # hosts 0, 1, 2 back to back; host 3 waits for SC/F 0 (ends 11), host 4 for SC/F 1 (21)
    assert starts(t, "host", 5) == [0.0, 1.0, 2.0, 11.0, 21.0]


def test_first_steps_of_every_phase_pipelined():
    # Host 2, SC/F 1, ICI/F 0.5, TC/F 2, TC/B 3, ICI/B 0.5, SC/B 1; one input buffer.
    d = one_chip(host=2.0, sc_forward=1.0, ici_forward=0.5, tc_forward=2.0, tc_backward=3.0, ici_backward=0.5,
                 sc_backward=1.0)
    t = simulate(d, UNIT, num_steps=3, pipelined=True, input_buffers=1)
    # step 0: host [0, 2], SC/F [2, 3], ICI/F [3, 3.5], TC/F [3.5, 5.5], TC/B [5.5, 8.5]
    # step 1 (ahead): host waits for SC/F 0 -> [3, 5], SC/F [5, 6], ICI/F [6, 6.5]
    # then ICI/B 0 [8.5, 9], SC/B 0 [9, 10]; TC/F 1 [8.5, 10.5] (after TC/B 0)
    assert starts(t, "host", 2) == [0.0, 3.0]
    assert starts(t, "sc_forward", 2) == [2.0, 5.0]
    assert starts(t, "ici_forward", 2) == [3.0, 6.0]
    assert starts(t, "tc_forward", 2) == [3.5, 8.5]
    assert starts(t, "ici_backward", 1) == [8.5]
    assert starts(t, "sc_backward", 1) == [9.0]
    # step 2: host waits for SC/F 1 (6) -> [6, 8]; SC/F 2 waits for SC/B 0 (ends 10) -> [10, 11]
    assert starts(t, "host", 3)[2] == 6.0
    assert starts(t, "sc_forward", 3)[2] == 10.0
