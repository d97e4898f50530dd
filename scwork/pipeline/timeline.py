"""Training steps as intervals on resources: the sequential and the pipelined schedule.

A step has seven phases (:data:`PHASES`), each run by one kind of resource
(:data:`PHASE_RESOURCE`): the host preprocesses the ids, every SparseCore runs its
forward pass, the ICI links carry the all-to-all, the TensorCores run the dense
forward and backward passes, the links carry the gradients back and every
SparseCore runs its backward pass (gradient scatter and optimizer update).

:func:`simulate` lays ``num_steps`` identical steps out on the resources of a
topology (one host per ``chips_per_host`` chips; per chip: its SparseCores, its
ICI, its TensorCores) under one of two schedules ([sc-guide] §5):

Sequential (``tf_xla_disable_full_embedding_pipelining = true``)
    ``SC/F_i -> ICI/F_i -> TC/F_i -> TC/B_i -> ICI/B_i -> SC/B_i``; the forward
    pass of step ``i + 1`` starts when every SparseCore of the system has finished
    (updated its shard for) step ``i``: tables are sharded over all SparseCores, so
    a lookup may read any of them.

Pipelined (the default)
    Every SparseCore runs ``SC/F_0, SC/F_1, SC/B_0, SC/F_2, SC/B_1, ...``: the
    forward pass of step ``i + 1`` runs while the TensorCore works on step ``i``.
    The forward pass of step ``j`` may only start once the backward passes
    (updates) of step ``j - 2`` are done on *every* SparseCore, so the updates of
    step ``i`` are visible to the SparseCore at step ``i + 2`` ([sc-guide] §5: stale
    gradients). The links follow the same order (``ICI/F_{i+1}`` before
    ``ICI/B_i``). The forward passes before the TensorCore's first op form the
    *pre-loop*, the backward passes after its last op the *post-loop*; everything
    else is the *main loop* (``stage`` of an :class:`Interval`).

Both schedules share these rules: the ICI all-to-all of a step starts when every
SparseCore of the system has finished the phase before it (a barrier), a
TensorCore phase starts when its chip's links delivered, and the host may start
preparing step ``i`` when the SparseCore forward pass of step ``i - input_buffers``
consumed its input slot (``maximum_parallel_iterations``). Each resource runs one
op at a time in the order above; an op starts as soon as its inputs are ready and
its resource is free (an event graph in max-plus algebra, so the steady-state step
time is the largest cycle mean of the graph). With two resources (SparseCore +
links vs. TensorCore) and the two-step staleness, the pipelined step is at least
half the sequential one: pipelining gains at most 2x ([sc-guide] §5: "up to 2x").

Examples
--------
>>> import numpy as np
>>> from scwork.pipeline.timeline import Units, simulate
>>> units = Units(num_chips=1, sparsecores_per_chip=1, tensorcores_per_chip=1, num_hosts=1)
>>> durations = {"host": [0.0], "sc_forward": [1.0], "ici_forward": [0.0], "tc_forward": [1.0],
...              "tc_backward": [1.0], "ici_backward": [0.0], "sc_backward": [1.0]}
>>> seq = simulate(durations, units, num_steps=4, pipelined=False)
>>> pipe = simulate(durations, units, num_steps=4, pipelined=True)
>>> seq.step_completion().tolist(), pipe.step_completion().tolist()
([4.0, 8.0, 12.0, 16.0], [4.0, 6.0, 8.0, 10.0])
>>> seq.update_offset(), pipe.update_offset()
(1, 2)
>>> [iv.stage for iv in pipe.intervals if iv.kind == "sc"][:3]
['pre-loop', 'main', 'main']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scwork._rounding import ceil_div

from scwork.errors import ConfigError, InternalError
from scwork.pipeline.phases import PHASE_RESOURCE, PHASES, RESOURCE_KINDS, STAGES

__all__ = [
    "PHASES",
    "PHASE_RESOURCE",
    "RESOURCE_KINDS",
    "STAGES",
    "Units",
    "Interval",
    "Timeline",
    "simulate",
]

@dataclass(frozen=True)
class Units:
    """How many resources of each kind, and who feeds whom.

    Attributes
    ----------
    num_chips : int
    sparsecores_per_chip : int
        SparseCore units of one chip (all JAX devices of the chip together).
    tensorcores_per_chip : int
        TensorCores of one chip; they run the dense phases together (one lane per
        TensorCore in traces, one resource in the schedule).
    num_hosts : int
        Hosts; chip ``c`` is fed by host ``c // chips_per_host``.
    chips_per_host : int
        Chips per host (default: all chips on one host when ``num_hosts == 1``).
    """

    num_chips: int
    sparsecores_per_chip: int
    tensorcores_per_chip: int = 1
    num_hosts: int = 1
    chips_per_host: int | None = None

    def __post_init__(self) -> None:
        for name in ("num_chips", "sparsecores_per_chip", "tensorcores_per_chip", "num_hosts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(f"Units.{name} must be an integer >= 1, got {v!r}")
        cph = self.chips_per_host
        if cph is None:
            cph = ceil_div(self.num_chips, self.num_hosts)
            object.__setattr__(self, "chips_per_host", cph)
        if ceil_div(self.num_chips, cph) != self.num_hosts:
            raise ConfigError(f"{self.num_hosts} hosts of {cph} chips do not feed {self.num_chips} chips")

    def count(self, kind: str) -> int:
        """Schedule units of a resource kind."""
        return {"host": self.num_hosts, "sc": self.num_chips * self.sparsecores_per_chip,
                "ici": self.num_chips, "tc": self.num_chips}[kind]

    @property
    def chip_of_sc(self) -> np.ndarray:
        return np.arange(self.count("sc")) // self.sparsecores_per_chip

    @property
    def host_of_chip(self) -> np.ndarray:
        return np.arange(self.num_chips) // self.chips_per_host

    def chip_of(self, kind: str) -> np.ndarray:
        """Chip of every unit of ``kind`` (-1 for hosts)."""
        if kind == "sc":
            return self.chip_of_sc
        if kind == "host":
            return np.full(self.num_hosts, -1)
        return np.arange(self.num_chips)

    def index_in_chip(self, kind: str) -> np.ndarray:
        """SparseCore index within its chip; host index for hosts; 0 for ici / tc."""
        if kind == "sc":
            return np.arange(self.count("sc")) % self.sparsecores_per_chip
        if kind == "host":
            return np.arange(self.num_hosts)
        return np.zeros(self.num_chips, dtype=np.int64)

    def resource_name(self, kind: str, unit: int) -> str:
        """``"host0"``, ``"chip0/sc1"``, ``"chip0/ici"``, ``"chip0/tc"``."""
        if kind == "host":
            return f"host{unit}"
        if kind == "sc":
            return f"chip{unit // self.sparsecores_per_chip}/sc{unit % self.sparsecores_per_chip}"
        return f"chip{unit}/{kind}"


@dataclass(frozen=True)
class Interval:
    """One phase of one step on one resource.

    Attributes
    ----------
    resource : str
        Lane name, e.g. ``"chip0/sc1"`` (see :meth:`Units.resource_name`).
    kind : {"host", "sc", "ici", "tc"}
    chip : int
        Chip of the resource (-1 for a host).
    unit : int
        SparseCore index within the chip, host index, or 0.
    phase : str
        One of :data:`PHASES`.
    step : int
    start, end : float
        Seconds from the start of the run.
    stage : {"pre-loop", "main", "post-loop"}
    """

    resource: str
    kind: str
    chip: int
    unit: int
    phase: str
    step: int
    start: float
    end: float
    stage: str

    @property
    def duration(self) -> float:
        return self.end - self.start


class Timeline:
    """Intervals of ``num_steps`` training steps on every resource. Build it with :func:`simulate`.

    Attributes
    ----------
    units : Units
    pipelined : bool
    num_steps : int
    start, end : dict of (phase, step) -> ndarray
        Start / end (seconds) per unit of the phase's resource kind.
    parts : dict
        Optional per-phase breakdown for display: ``phase -> (labels, fractions)``
        with ``fractions`` of shape ``(len(labels), units)`` summing to 1 per unit
        (e.g. the stacked tables and mini-batches inside a SparseCore phase).
    steady_state_step_time : float or None
        Step time of the periodic regime, when the producer computed it (the step
        model does, from a longer run); None otherwise (see :meth:`period`).
    """

    def __init__(self, units: Units, pipelined: bool, num_steps: int, start: dict, end: dict,
                 durations: Mapping[str, np.ndarray], parts: Mapping[str, tuple] | None = None,
                 steady_state_step_time: float | None = None):
        self.units = units
        self.pipelined = bool(pipelined)
        self.num_steps = int(num_steps)
        self.start = start
        self.end = end
        self.durations = {k: np.asarray(v, dtype=float) for k, v in durations.items()}
        self.parts = dict(parts or {})
        self.steady_state_step_time = steady_state_step_time
        if self.pipelined:
            tc_first = float(self.start[("tc_forward", 0)].min())
            tc_last = float(self.end[("tc_backward", self.num_steps - 1)].max())
        else:
            tc_first, tc_last = -np.inf, np.inf
        self._tc_span = (tc_first, tc_last)

    # -- queries -----------------------------------------------------------------------
    def stage_of(self, start: float, end: float) -> str:
        """Stage of an interval: before the TensorCore's first op, after its last, or main."""
        first, last = self._tc_span
        if end <= first and start < first:
            return "pre-loop"
        if start >= last and end > last:
            return "post-loop"
        return "main"

    @property
    def intervals(self) -> list[Interval]:
        """Every interval, in schedule order (zero-length ones included)."""
        out = []
        u = self.units
        for (phase, step), s in self.start.items():
            kind = PHASE_RESOURCE[phase]
            e = self.end[(phase, step)]
            chips = u.chip_of(kind)
            idx = u.index_in_chip(kind)
            for j in range(len(s)):
                out.append(Interval(u.resource_name(kind, j), kind, int(chips[j]), int(idx[j]), phase, step,
                                    float(s[j]), float(e[j]), self.stage_of(float(s[j]), float(e[j]))))
        return out

    def resources(self) -> list[str]:
        """Lane names in display order: hosts, then per chip its SparseCores, ICI, TensorCore."""
        u = self.units
        lanes = [u.resource_name("host", h) for h in range(u.num_hosts)]
        for c in range(u.num_chips):
            lanes += [u.resource_name("sc", c * u.sparsecores_per_chip + k) for k in range(u.sparsecores_per_chip)]
            lanes += [u.resource_name("ici", c), u.resource_name("tc", c)]
        return lanes

    @property
    def makespan(self) -> float:
        """End of the last interval (seconds)."""
        return float(max(e.max() for e in self.end.values()))

    def step_completion(self) -> np.ndarray:
        """Per step, the end of its last phase on any resource (seconds)."""
        out = np.zeros(self.num_steps)
        for (phase, step), e in self.end.items():
            out[step] = max(out[step], float(e.max()))
        return out

    def period(self) -> float:
        """Step time estimated from this run: mean completion interval in the main loop.

        Exact once the schedule is periodic; :attr:`steady_state_step_time` (from a
        longer run) is preferable when set.
        """
        c = self.step_completion()
        n = self.num_steps
        if n < 2:
            return float(c[0])
        if n < 4:
            return float(f"{(c[-1] - c[0]) / (n - 1):.12g}")
        # Leave out the last step (the post-loop drains faster than the main loop) and
        # the first half (the pre-loop fill): the rest is the periodic regime.
        last = n - 2
        first = last // 2
        # 12 significant digits: the subtraction of two completion times leaves float noise
        # (1e-16 relative) that would otherwise make equal schedules compare unequal.
        return float(f"{(c[last] - c[first]) / (last - first):.12g}")

    def update_offset(self) -> int:
        """``k`` such that the updates of step ``i`` are first visible to the SparseCore
        forward pass of step ``i + k`` (1: no staleness; 2 under pipelining).

        Computed from the schedule: for every step ``j`` after the first two, the
        latest step whose backward pass ended on every SparseCore before the forward
        pass of ``j`` started anywhere; the largest gap ``j - i`` over ``j``.

        A backward pass that ends exactly when the forward pass starts is visible
        only if it comes first in the SparseCore's program order (``SC/B_{j-1}``
        before ``SC/F_j`` sequentially, ``SC/B_{j-2}`` pipelined): with zero-length
        ops, or ops too short to move a float64 time (1e-38 s after 1 s), the two
        share a time stamp and the times alone cannot tell which ran first. Times are
        compared exactly: every start is a ``max`` of earlier ends, so a wait is never
        off by rounding.
        """
        if self.num_steps < 3:
            raise ConfigError("update_offset needs at least 3 simulated steps")
        sb_end = np.array([self.end[("sc_backward", i)].max() for i in range(self.num_steps)])
        steps = np.arange(self.num_steps)
        # The last step i whose SC/B precedes SC/F_j in program order is j - 2 pipelined
        # (F_{j-1}, B_{j-2}, F_j, B_{j-1}) and j - 1 sequentially.
        lag_in_program_order = 2 if self.pipelined else 1
        worst = 1
        for j in range(2, self.num_steps):
            sf_start = self.start[("sc_forward", j)].min()
            ran_first = steps <= j - lag_in_program_order
            visible = np.flatnonzero((sb_end < sf_start) | ((sb_end == sf_start) & ran_first))
            latest = int(visible.max()) if visible.size else -1
            worst = max(worst, j - latest)
        return worst

    @property
    def staleness_steps(self) -> int:
        """Steps the SparseCore's tables lag behind: ``update_offset() - 1`` (0 without pipelining)."""
        return self.update_offset() - 1

    def busy(self) -> dict[str, float]:
        """Busy seconds of every lane over the run."""
        out: dict[str, float] = {}
        u = self.units
        for (phase, step), s in self.start.items():
            kind = PHASE_RESOURCE[phase]
            d = self.end[(phase, step)] - s
            for j in range(len(s)):
                name = u.resource_name(kind, j)
                out[name] = out.get(name, 0.0) + float(d[j])
        return out

    # -- views ---------------------------------------------------------------------------
    def to_dataset(self):
        """Start and end of every (step, phase), and busy time per lane.

        Returns
        -------
        xarray.Dataset
            Dims ``step``, ``phase`` and ``resource``. ``start`` / ``end`` (step, phase):
            earliest start and latest end over the phase's units (s);
            ``duration`` = ``end - start`` (s); ``stage`` (step, phase);
            ``busy`` (resource): busy seconds over the run; ``utilization``
            (resource): busy / makespan. Attrs: ``pipelined``, ``makespan``,
            ``update_offset``, ``steady_state_step_time``.
        """
        import xarray as xr

        n = self.num_steps
        start = np.full((n, len(PHASES)), np.nan)
        end = np.full((n, len(PHASES)), np.nan)
        stage = np.empty((n, len(PHASES)), dtype=object)
        for (phase, step), s in self.start.items():
            j = PHASES.index(phase)
            start[step, j] = float(s.min())
            end[step, j] = float(self.end[(phase, step)].max())
            stage[step, j] = self.stage_of(start[step, j], end[step, j])
        busy = self.busy()
        lanes = self.resources()
        busy_arr = np.array([busy.get(r, 0.0) for r in lanes])
        span = self.makespan
        kinds = np.array([r.split("/")[-1].rstrip("0123456789") if "/" in r else "host" for r in lanes],
                         dtype=object)
        attrs = {"pipelined": int(self.pipelined), "makespan": span, "num_steps": n,
                 "steady_state_step_time": (np.nan if self.steady_state_step_time is None
                                            else self.steady_state_step_time)}
        if n >= 3:
            attrs["update_offset"] = self.update_offset()
        return xr.Dataset(
            {
                "start": (("step", "phase"), start, {"long_name": "phase start (earliest unit)", "units": "s"}),
                "end": (("step", "phase"), end, {"long_name": "phase end (latest unit)", "units": "s"}),
                "duration": (("step", "phase"), end - start, {"long_name": "end - start", "units": "s"}),
                "stage": (("step", "phase"), stage, {"long_name": "software-pipeline stage", "units": ""}),
                "busy": ("resource", busy_arr, {"long_name": "busy time over the run", "units": "s"}),
                "utilization": ("resource", busy_arr / span if span > 0 else np.zeros_like(busy_arr),
                                {"long_name": "busy / makespan", "units": "1"}),
            },
            coords={"step": ("step", np.arange(n)), "phase": ("phase", np.array(PHASES, dtype=object)),
                    "resource": ("resource", np.array(lanes, dtype=object)),
                    "resource_kind": ("resource", kinds)},
            attrs=attrs,
        )

    def columns(self) -> dict[str, list]:
        """Every interval as columns of plain lists (e.g. for a Bokeh ``ColumnDataSource``).

        Keys: ``resource``, ``kind``, ``chip``, ``unit``, ``phase``, ``step``, ``start``,
        ``end``, ``duration`` (seconds), ``stage``.

        Examples
        --------
        >>> units = Units(num_chips=1, sparsecores_per_chip=1)
        >>> d = {p: [1.0] for p in PHASES}
        >>> cols = simulate(d, units, num_steps=3, pipelined=True).columns()
        >>> len(cols["start"]) == 3 * len(PHASES), cols["resource"][:2]
        (True, ['host0', 'chip0/sc0'])
        """
        ivs = self.intervals
        out: dict[str, list] = {k: [getattr(iv, k) for iv in ivs] for k in
                                ("resource", "kind", "chip", "unit", "phase", "step", "start", "end", "stage")}
        out["duration"] = [iv.duration for iv in ivs]
        return out

    def to_dataframe(self):
        """Every interval as a row of a :class:`pandas.DataFrame` (needs pandas)."""
        import pandas as pd

        rows = [iv.__dict__ | {"duration": iv.duration} for iv in self.intervals]
        return pd.DataFrame(rows, columns=["resource", "kind", "chip", "unit", "phase", "step", "start", "end",
                                           "duration", "stage"])

    def to_chrome_trace(self, **kwargs) -> dict:
        """:func:`scwork.pipeline.to_chrome_trace` of this timeline."""
        from scwork.pipeline.chrome_trace import to_chrome_trace

        return to_chrome_trace(self, **kwargs)

    def __repr__(self) -> str:
        kind = "pipelined" if self.pipelined else "sequential"
        return (f"Timeline({kind}, {self.num_steps} steps, {self.units.num_chips} chips x "
                f"{self.units.sparsecores_per_chip} SparseCores, makespan {self.makespan:.6g} s, "
                f"period {self.period():.6g} s)")


# --------------------------------------------------------------------------------------
# the event graph
# --------------------------------------------------------------------------------------
def _order(num_steps: int, pipelined: bool) -> list[tuple[str, int]]:
    """Ops in an order that respects every dependency and every resource's order."""
    ops: list[tuple[str, int]] = []
    if not pipelined:
        for i in range(num_steps):
            ops += [(p, i) for p in PHASES]
        return ops
    ops += [("host", 0), ("sc_forward", 0), ("ici_forward", 0)]
    for i in range(num_steps):
        if i + 1 < num_steps:
            ops += [("host", i + 1), ("sc_forward", i + 1), ("ici_forward", i + 1)]
        ops += [("tc_forward", i), ("tc_backward", i), ("ici_backward", i), ("sc_backward", i)]
    return ops


def simulate(durations: Mapping[str, Sequence[float]], units: Units, *, num_steps: int, pipelined: bool,
             input_buffers: int = 1, parts: Mapping[str, tuple] | None = None,
             steady_state_step_time: float | None = None) -> Timeline:
    """Lay ``num_steps`` identical steps out on the resources.

    Parameters
    ----------
    durations : mapping phase -> array
        Seconds per unit of the phase's resource kind (:meth:`Units.count`); a
        scalar is broadcast. Every phase of :data:`PHASES` is required.
    units : Units
    num_steps : int
        Steps to simulate, >= 1.
    pipelined : bool
        The pipelined schedule (True) or the sequential one (False).
    input_buffers : int
        Prepared inputs the device holds (``maximum_parallel_iterations``), >= 1.
    parts, steady_state_step_time
        Stored on the :class:`Timeline` (see there).

    Returns
    -------
    Timeline

    Raises
    ------
    ConfigError
        Missing or negative durations, wrong lengths, ``num_steps < 1``.
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, (int, np.integer)) or num_steps < 1:
        raise ConfigError(f"num_steps must be an integer >= 1, got {num_steps!r}")
    if isinstance(input_buffers, bool) or not isinstance(input_buffers, (int, np.integer)) or input_buffers < 1:
        raise ConfigError(f"input_buffers must be an integer >= 1, got {input_buffers!r}")
    if not isinstance(durations, Mapping):
        raise ConfigError(f"durations must be a dict {{phase: seconds per unit}}, got {type(durations).__name__}")
    if not isinstance(units, Units):
        raise ConfigError(f"units must be a scwork.pipeline.Units, got {type(units).__name__}")
    dur: dict[str, np.ndarray] = {}
    for phase in PHASES:
        if phase not in durations:
            raise ConfigError(f"durations has no {phase!r}; phases are {list(PHASES)}")
        n = units.count(PHASE_RESOURCE[phase])
        d = np.broadcast_to(np.asarray(durations[phase], dtype=float), (n,)).copy() \
            if np.ndim(durations[phase]) == 0 else np.asarray(durations[phase], dtype=float)
        if d.shape != (n,):
            raise ConfigError(f"durations[{phase!r}] has shape {d.shape}; expected ({n},) "
                              f"(one per {PHASE_RESOURCE[phase]} unit)")
        if not np.all(np.isfinite(d)) or np.any(d < 0):
            raise ConfigError(f"durations[{phase!r}] must be finite and >= 0, got {d}")
        dur[phase] = d

    chip_of_sc = units.chip_of_sc
    host_of_chip = units.host_of_chip
    host_of_sc = host_of_chip[chip_of_sc]
    H = units.num_hosts

    def sc_to_host_max(a: np.ndarray) -> np.ndarray:
        out = np.full(H, -np.inf)
        np.maximum.at(out, host_of_sc, a)
        return out

    start: dict[tuple[str, int], np.ndarray] = {}
    end: dict[tuple[str, int], np.ndarray] = {}
    last: dict[str, np.ndarray | None] = {k: None for k in RESOURCE_KINDS}

    def need(phase: str, step: int) -> np.ndarray:
        try:
            return end[(phase, step)]
        except KeyError:  # pragma: no cover - the op order guarantees it
            raise InternalError(f"scheduler: {phase} of step {step} needed before it ran") from None

    for phase, i in _order(num_steps, pipelined):
        kind = PHASE_RESOURCE[phase]
        ready = np.zeros(units.count(kind))
        if phase == "host":
            if i - input_buffers >= 0:
                ready = np.maximum(ready, sc_to_host_max(need("sc_forward", i - input_buffers)))
        elif phase == "sc_forward":
            ready = np.maximum(ready, need("host", i)[host_of_sc])
            if not pipelined and i >= 1:
                ready = np.maximum(ready, need("sc_backward", i - 1).max())
            if pipelined and i >= 2:
                ready = np.maximum(ready, need("sc_backward", i - 2).max())
        elif phase == "ici_forward":
            ready = np.maximum(ready, need("sc_forward", i).max())
        elif phase == "tc_forward":
            ready = np.maximum(ready, need("ici_forward", i))
        elif phase == "tc_backward":
            ready = np.maximum(ready, need("tc_forward", i))
        elif phase == "ici_backward":
            ready = np.maximum(ready, need("tc_backward", i).max())
        elif phase == "sc_backward":
            ready = np.maximum(ready, need("ici_backward", i)[chip_of_sc])
        if last[kind] is not None:
            ready = np.maximum(ready, last[kind])
        start[(phase, i)] = ready
        end[(phase, i)] = ready + dur[phase]
        last[kind] = end[(phase, i)]
    return Timeline(units, pipelined, num_steps, start, end, dur, parts=parts,
                    steady_state_step_time=steady_state_step_time)
