"""The shared argument checks word every module's errors alike."""

from __future__ import annotations

import numpy as np
import pytest

from scwork._validate import integer, non_negative_int, positive_int
from scwork.errors import ConfigError, TopologyError


@pytest.mark.parametrize("value", [1, 7, np.int32(3), np.int64(2**40)])
def test_positive_int_accepts_python_and_numpy_integers(value):
    assert positive_int("n", value) == int(value)
    assert type(positive_int("n", value)) is int


@pytest.mark.parametrize("value, fragment", [
    (0, "n must be >= 1, got 0"),
    (-3, "n must be >= 1"),
    (True, "n must be a positive integer"),
    (2.0, "n must be a positive integer"),
    ("4", "n must be a positive integer"),
    (None, "n must be a positive integer"),
])
def test_positive_int_rejects_with_what_and_value(value, fragment):
    with pytest.raises(ConfigError, match=fragment):
        positive_int("n", value)


def test_context_and_error_type():
    with pytest.raises(TopologyError, match=r"shape must be >= 2 \(torus\), got 1"):
        integer("shape", 1, minimum=2, context="torus", error=TopologyError)
    assert non_negative_int("k", 0) == 0
    with pytest.raises(ConfigError, match="k must be >= 0"):
        non_negative_int("k", -1)


def test_messages_about_huge_or_hostile_values_never_fail():
    """Error messages of ints beyond Python's 4300-digit str() limit raised ValueError."""
    from scwork._validate import shown

    assert shown(10**5000) == "an integer of about 5000 digits"
    assert shown("x" * 100, limit=10) == "'xxxxxx..."

    class Hostile:
        def __repr__(self):
            raise RuntimeError("no")

    assert shown(Hostile()) == "a Hostile that cannot be shown"
    with pytest.raises(ConfigError, match="n must be >= 1, got an integer of about 5000 digits"):
        positive_int("n", -10**5000)
