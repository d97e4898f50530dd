"""The step's modelled event times and the fit boundary of the HBM model, worked out by hand.

Survivors of the first mutation run of scwork/memory/_hbm_numbers.py: no test pinned the
events' durations (HBM traffic over the chip's bandwidth), the order of a serialized
chain, the names of one-slot phases, or ``fits`` at peak == usable.

Hand computation for ``_two_tables()`` on 2 v5p chips, batch 256, no stacking (S = 4
SparseCores per chip, n = 32 samples per SC, LRC = P = 8; see tests/memory/test_hbm.py
for the tables, stacks, activations and CSR input):
  gathered rows per chip = S * max_unique * LRC * width * 4 bytes:
    a: 4 * 32 * 8 * 16 * 4 = 65536,  b: 4 * 16 * 8 * 8 * 4 = 16384
  forward traffic = gathered + activations + CSR input:
    a: 65536 + 8192 + 24704 = 98432,  b: 16384 + 4096 + 15488 = 35968
  backward traffic = activations + 2 * gathered * (1 + slots) + CSR input:
    a: 8192 + 2 * 65536 * 2 + 24704 = 295040,  b: 4096 + 2 * 16384 * 1 + 15488 = 52352
  TensorCore forward = dense weights + TensorCore activations + all SC activations (12288),
  TensorCore backward = 2 * dense weights + TensorCore activations + 12288.
"""

from __future__ import annotations

import pytest

import scwork
from scwork.memory import plan
from scwork.sharding import TableSpec

V5P2 = scwork.Topology.for_chip("v5p", num_chips=2)
FWD_TRAFFIC_A, FWD_TRAFFIC_B = 98432, 35968
BWD_TRAFFIC_A, BWD_TRAFFIC_B = 295040, 52352
SC_ACTIVATIONS = 8192 + 4096
DENSE, TC_ACTIVATIONS = 1000, 500
PEAK = 371968          # tests/memory/test_hbm.py::test_report_by_hand


def _two_tables():
    a = TableSpec("a", 1000, 12, optimizer="adagrad", max_ids_per_partition=64, max_unique_ids_per_partition=32)
    b = TableSpec("b", 500, 4, optimizer="sgd", max_ids_per_partition=40, max_unique_ids_per_partition=16)
    return [a, b]


def _durations(report):
    return [(e.name, e.end_s - e.start_s) for e in report.timeline.events]


def test_event_durations_all_stacks_concurrent():
    bw = scwork.hardware.get(V5P2.chip).hbm_bandwidth_bytes_per_s
    r = plan(_two_tables(), V5P2, batch_size=256, stacking=None, dense_weights_bytes=DENSE,
             tensorcore_activation_bytes=TC_ACTIVATIONS)
    names = [name for name, _ in _durations(r)]
    assert names == ["SC forward", "TensorCore forward", "TensorCore backward", "SC backward"]
    got = [d * bw for _, d in _durations(r)]
    assert got == pytest.approx([FWD_TRAFFIC_A + FWD_TRAFFIC_B,
                                 DENSE + TC_ACTIVATIONS + SC_ACTIVATIONS,
                                 2 * DENSE + TC_ACTIVATIONS + SC_ACTIVATIONS,
                                 BWD_TRAFFIC_A + BWD_TRAFFIC_B], rel=1e-12)
    events = r.timeline.events
    assert events[0].start_s == 0
    for before, after in zip(events, events[1:]):          # back to back, in this order
        assert after.start_s == pytest.approx(before.end_s, rel=1e-12)


def test_event_durations_of_a_serialized_chain():
    """Two serialized tables: the larger forward stack (a) runs first, each in its own slot."""
    bw = scwork.hardware.get(V5P2.chip).hbm_bandwidth_bytes_per_s
    r = plan(_two_tables(), V5P2, batch_size=256, stacking=None, num_serialized_tables=2,
             dense_weights_bytes=DENSE, tensorcore_activation_bytes=TC_ACTIVATIONS)
    names = [name for name, _ in _durations(r)]
    assert names == ["SC forward slot 0", "SC forward slot 1", "TensorCore forward", "TensorCore backward",
                     "SC backward slot 0", "SC backward slot 1"]
    got = [d * bw for _, d in _durations(r)]
    assert got == pytest.approx([FWD_TRAFFIC_A, FWD_TRAFFIC_B,
                                 DENSE + TC_ACTIVATIONS + SC_ACTIVATIONS,
                                 2 * DENSE + TC_ACTIVATIONS + SC_ACTIVATIONS,
                                 BWD_TRAFFIC_A, BWD_TRAFFIC_B], rel=1e-12)


@pytest.mark.parametrize("hbm_bytes,fits", [(PEAK, True), (PEAK + 1, True), (PEAK - 1, False)])
def test_fits_at_peak_equal_to_usable(hbm_bytes, fits):
    r = plan(_two_tables(), V5P2, batch_size=256, stacking=None, hbm_bytes=hbm_bytes, headroom=0.0)
    assert r.hbm_fits is fits
