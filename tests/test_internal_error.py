"""scwork's own invariants raise InternalError: a bug report, never mistaken for a user's input error."""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork import errors
from scwork.collectives import _lanes, _program


def test_internal_error_is_not_an_input_error():
    assert "InternalError" in errors.__all__
    assert issubclass(errors.InternalError, RuntimeError)
    # A caller that catches scwork's input errors to show them to a user must not swallow a bug.
    assert not issubclass(errors.InternalError, errors.ScworkError)
    assert not issubclass(errors.InternalError, errors.ConfigError)
    assert not issubclass(errors.InternalError, ValueError)
    assert "bug in scwork" in errors.InternalError.__doc__ and "report" in errors.InternalError.__doc__


def test_loop_members_with_different_regions_are_an_internal_error():
    loops = np.array([[0, 1, 2]])
    R0, R1 = np.array([0, 0, 3]), np.array([6, 6, 9])        # node 2 works on another region
    with pytest.raises(errors.InternalError, match="loop members of phase x do not share one data region"):
        _lanes.emit_phase(None, [("ring", loops)], R0, R1, 0, 0, 0, "phase x")


def test_a_region_that_does_not_split_over_the_loop_is_an_internal_error():
    loops = np.array([[0, 1, 2]])
    R0, R1 = np.zeros(3, dtype=np.int64), np.full(3, 7)     # 7 chunks over a loop of 3
    with pytest.raises(errors.InternalError, match="does not split into 3 pieces"):
        _lanes.emit_phase(None, [("ring", loops)], R0, R1, 0, 0, 0, "phase y")


def test_lazy_transfer_blocks_without_message_blocks_are_an_internal_error():
    net = scwork.collectives.Network.ring(4)
    with pytest.raises(errors.InternalError, match="lazy transfer blocks needs message blocks"):
        _program.StepProgram(net, 4, lambda: [])
