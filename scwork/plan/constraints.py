"""What a plan must satisfy, and how its per-stack limits are chosen from observed statistics.

- :class:`Constraints`: fits SPMEM and HBM, a dropped-id budget (default 0) and
  optional caps on step time, peak HBM and SPMEM per tile.
- :class:`LimitRule`: how a stack's ``max_ids_per_partition`` and
  ``max_unique_ids_per_partition`` (and, when a static buffer is asked for, its
  ``suggested_coo_buffer_size_per_device``) follow from the per-step statistics of
  the observation batches: the maximum over steps (what jax-tpu-embedding's FDO
  client records, [jte] ``NPZFileFDOClient``), a percentile of the per-step maxima, times a headroom factor,
  rounded up.

Examples
--------
>>> from scwork.plan import Constraints, LimitRule
>>> Constraints(max_drop_rate=1e-4).max_drop_rate
0.0001
>>> LimitRule("percentile", percentile=90, headroom=1.25).name
'p90x1.25'
>>> Constraints(max_drop_rate=-1)  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
...
scwork.errors.ConfigError: Constraints.max_drop_rate must be a number in [0, 1] (a share of the held-out ids),
got -1. How to fix: give e.g. max_drop_rate=0 (no id may be dropped) or 1e-4
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from scwork._rounding import round_up
from scwork.errors import ConfigError

__all__ = ["Constraints", "LimitRule", "DEFAULT_LIMIT_RULES", "LIBRARY_LIMIT_RULE", "OBJECTIVES"]

#: What :func:`scwork.plan.search` can minimise.
OBJECTIVES = ("step_time", "time_per_sample", "peak_hbm", "drop_rate")


def _number(owner: str, name: str, value: Any, *, minimum: float, maximum: float | None = None,
            allow_none: bool = False, fix: str) -> None:
    if value is None and allow_none:
        return
    ok = (not isinstance(value, bool) and isinstance(value, (numbers.Real, np.number))
          and math.isfinite(float(value)) and value >= minimum and (maximum is None or value <= maximum))
    if not ok:
        bound = f"a number in [{minimum:g}, {maximum:g}]" if maximum is not None else f"a finite number >= {minimum:g}"
        raise ConfigError(f"{owner}.{name} must be {bound}{_unit_note(name)}, got {value!r}. How to fix: {fix}")


def _unit_note(name: str) -> str:
    return " (a share of the held-out ids)" if name == "max_drop_rate" else ""


@dataclass(frozen=True)
class Constraints:
    """What every acceptable plan satisfies.

    A candidate is *feasible* when it meets every field. The search ranks only
    feasible candidates; when none is, it raises
    :class:`~scwork.errors.NoFeasiblePlanError` naming the tightest field.
    """

    fits_memory: bool = True
    """Every stack fits in TileSpmem and the step's HBM peak fits in usable HBM
    (:func:`scwork.memory.plan`). Default True."""

    max_drop_rate: float = 0.0
    """Largest share of the held-out ids the plan may drop (over its limits or its
    static CSR buffer), in [0, 1]. Default 0: no id may be dropped (the plan is then
    written with ``allow_id_dropping = false``, so an overflow would abort)."""

    max_step_time_s: float | None = None
    """Largest modelled step time (:func:`scwork.pipeline.step_model`). Unit: seconds.
    Default None: no cap."""

    max_peak_hbm_bytes: int | None = None
    """Largest HBM peak per chip. Unit: bytes. Default None: no cap beyond the chip's
    usable HBM."""

    max_spmem_bytes_per_tile: int | None = None
    """Largest SPMEM of one tile over the stacks. Unit: bytes. Default None: no cap
    beyond the chip's TileSpmem."""

    def __post_init__(self) -> None:
        if not isinstance(self.fits_memory, bool):
            raise ConfigError(f"Constraints.fits_memory must be True or False, got {self.fits_memory!r}. "
                              "How to fix: True keeps only plans that fit SPMEM and HBM")
        _number("Constraints", "max_drop_rate", self.max_drop_rate, minimum=0, maximum=1,
                fix="give e.g. max_drop_rate=0 (no id may be dropped) or 1e-4")
        _number("Constraints", "max_step_time_s", self.max_step_time_s, minimum=0, allow_none=True,
                fix="give seconds per step, e.g. 0.005, or None for no cap")
        for name in ("max_peak_hbm_bytes", "max_spmem_bytes_per_tile"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                                      or value < 1):
                raise ConfigError(f"Constraints.{name} must be a positive integer (bytes) or None, got {value!r}. "
                                  "How to fix: give bytes, e.g. 32 * 2**30")
        if self.max_step_time_s is not None and self.max_step_time_s == 0:
            raise ConfigError("Constraints.max_step_time_s is 0: no plan takes no time. How to fix: give a "
                              "positive number of seconds or None")

    def checks(self) -> tuple[str, ...]:
        """The names of the constraints in force, in the order they are reported."""
        out = ["fits_spmem", "fits_hbm"] if self.fits_memory else []
        out.append("max_drop_rate")
        for name in ("max_step_time_s", "max_peak_hbm_bytes", "max_spmem_bytes_per_tile"):
            if getattr(self, name) is not None:
                out.append(name)
        return tuple(out)


_METHODS = ("max", "percentile")


@dataclass(frozen=True)
class LimitRule:
    """How a stack's limits follow from the per-step maxima of the observation batches.

    For every stack and step take the largest count over (device, source SparseCore,
    partition); the limit is the maximum of these over steps (``"max"``) or their
    ``percentile`` (numpy's ``inverted_cdf``: a value some step reached), times
    ``headroom``, rounded up to ``round_to`` (at least one id). The same for distinct ids,
    and, for a static CSR buffer, for ``S * max over (device, SC) of
    sum over partitions of round_up(ids, 8)`` (rounded to ``8 * S``).
    """

    method: str = "max"
    """``"max"`` or ``"percentile"``. Default ``"max"``."""
    percentile: float = 100.0
    """In (0, 100]; used by ``"percentile"``. Default 100."""
    headroom: float = 1.0
    """Factor >= 1 applied before rounding. Default 1."""
    round_to: int = 8
    """Rounding multiple of the limits, >= 1. Default 8 (one 32-byte line of int32 ids)."""

    def __post_init__(self) -> None:
        if self.method not in _METHODS:
            raise ConfigError(f"LimitRule.method must be one of {_METHODS}, got {self.method!r}. How to fix: "
                              "'max' for the largest step, 'percentile' with percentile=...")
        _number("LimitRule", "percentile", self.percentile, minimum=1e-9, maximum=100,
                fix="give a percentile in (0, 100], e.g. 99")
        _number("LimitRule", "headroom", self.headroom, minimum=1, fix="give a factor >= 1, e.g. 1.25")
        if isinstance(self.round_to, bool) or not isinstance(self.round_to, numbers.Integral) or self.round_to < 1:
            raise ConfigError(f"LimitRule.round_to must be a positive integer, got {self.round_to!r}. "
                              "How to fix: e.g. 8")

    @property
    def name(self) -> str:
        """Short label: ``max``, ``p99``, ``maxx1.25``, ``fdo`` (the library's FDO rule)..."""
        if self == LIBRARY_LIMIT_RULE:
            return "fdo"
        base = "max" if self.method == "max" else f"p{self.percentile:g}"
        head = "" if self.headroom == 1 else f"x{self.headroom:g}"
        rnd = "" if self.round_to == 8 else f"r{self.round_to}"
        return base + head + rnd

    def value(self, per_step: np.ndarray) -> int:
        """The limit for one stack from its per-step maxima (a 1-D integer array)."""
        per_step = np.asarray(per_step)
        if per_step.size == 0:
            raise ConfigError("LimitRule.value needs at least one step of statistics")
        if self.method == "max":
            v = float(per_step.max())
        else:
            v = float(np.percentile(per_step, self.percentile, method="inverted_cdf"))
        v = math.ceil(v * self.headroom - 1e-9) if self.headroom != 1 else int(v)
        v = max(1, int(v))      # a limit of 0 is not a limit the library takes
        return round_up(v, self.round_to)


#: The library's own rule ([jte] FDO clients): the largest count observed, as is.
LIBRARY_LIMIT_RULE = LimitRule("max", round_to=1)

#: Limit rules searched by default: the library's, the maximum rounded to a line, the
#: 90th percentile of the per-step maxima (relies on mini-batching or dropping for the
#: rest) and the maximum with 25 % headroom.
DEFAULT_LIMIT_RULES = (LIBRARY_LIMIT_RULE, LimitRule("max"), LimitRule("percentile", percentile=90),
                       LimitRule("max", headroom=1.25))
