"""Argument checks shared by the dataset generators and readers.

Each raises a typed error naming the argument.
"""

from __future__ import annotations

import math
import numbers

from scwork._validate import non_negative_int, positive_int
from scwork.errors import ConfigError

__all__ = []


# Largest vocabulary: ids are int64 and the hash works on 63-bit values.
_MAX_VOCAB = 2**62


# ======================================================================================
# argument checks
# ======================================================================================

def _positive_int(value, name: str) -> int:
    return positive_int(name, value)


def _non_negative_int(value, name: str) -> int:
    return non_negative_int(name, value)


def _check_vocab(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= _MAX_VOCAB:
        raise ConfigError(f"{name} must be an integer in [1, 2**62], got {value!r}")
    return int(value)


def _check_exponent(value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"zipf_exponent must be a finite number >= 0, got {value!r}")
    return float(value)
