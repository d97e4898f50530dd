"""Measured traces: import a Chrome/Perfetto trace and overlay it on the model.

Import (:func:`read_trace`)
    A measured trace (e.g. exported from a real profile) is read into a
    :class:`MeasuredTrace`: processes and threads are mapped to resources by a
    regex table (:data:`DEFAULT_RESOURCE_PATTERNS`: ``TPU:0 SparseCore 1 (pid
    1005)`` is SparseCore 1 of chip 0), event names to phases by another
    (:data:`DEFAULT_PHASE_PATTERNS`, matched against ``"<kind>:<name>"``), steps by
    step-marker threads (:data:`DEFAULT_STEP_PATTERN`) or a given ``num_steps``.

Overlay (:func:`compare`)
    Modelled vs measured time per phase and per step, with the ratio
    ``measured / modelled``, as an :class:`xarray.Dataset`.

The export side (:func:`~scwork.pipeline.to_chrome_trace`) lives in
:mod:`scwork.pipeline.chrome_trace`.

Examples
--------
>>> import scwork
>>> from scwork.pipeline import step_model, expected_stats, to_chrome_trace, read_trace
>>> topo = scwork.Topology.for_chip("v5p", num_chips=1)
>>> m = step_model(expected_stats({"t": 8.0}, topo, batch_size=256), widths={"t": 32},
...                topology=topo, tc_forward_s=5e-5)
>>> measured = read_trace(to_chrome_trace(m))
>>> measured.num_steps    # the modelled run's steps, read back from its step markers
6
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from scwork._validate import shown
from scwork.errors import ConfigError, TraceError
from scwork.pipeline.chrome_trace import _num
from scwork.pipeline.phases import PHASES

__all__ = [
    "TraceError",
    "read_trace",
    "MeasuredTrace",
    "compare",
    "DEFAULT_RESOURCE_PATTERNS",
    "DEFAULT_PHASE_PATTERNS",
    "DEFAULT_STEP_PATTERN",
]

#: How a measured trace's ``"<process name> | <thread name>"`` maps to a resource:
#: ``(kind, regex)``, first match wins; optional named groups ``chip`` and ``unit``
#: (default 0). Covers XProf-style names (``TPU:0 SparseCore 1 (pid 1005)``,
#: ``/device:TPU:0`` + ``XLA Ops``, ``/host:CPU``) and scwork's own export.
DEFAULT_RESOURCE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("sc", r"TPU:(?P<chip>\d+)\b.*?SparseCore\D*?(?P<unit>\d+)"),
    ("tc", r"TPU:(?P<chip>\d+)\b.*?TensorCore(?:\D*?(?P<unit>\d+))?"),
    ("tc", r"TPU:(?P<chip>\d+)\b.*?XLA Ops"),
    ("ici", r"TPU:(?P<chip>\d+)\b.*?\b(?:ICI|[Ll]inks?)\b"),
    ("host", r"(?i)^(?:/host:\w+|host\s*(?P<unit>\d+))"),
)

#: How an event maps to a phase: ``(phase, regex)`` matched (``re.search``) against
#: ``"<resource kind>:<event name>"``, first match wins; unmatched events are ignored
#: (counted in ``MeasuredTrace.unmapped``).
DEFAULT_PHASE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("sc_backward", r"^sc:.*(?i:grad|backward|bwd|update|optimizer|apply)"),
    ("sc_forward", r"^sc:"),
    ("ici_backward", r"^ici:.*(?i:grad|backward|bwd)"),
    ("ici_forward", r"^ici:"),
    ("tc_backward", r"^tc:.*(?i:grad|backward|bwd|transpose)"),
    ("tc_forward", r"^tc:"),
    ("host", r"^host:"),
)

#: Threads whose ``"<process> | <thread>"`` label matches this hold step markers
#: (one slice per step, named by the step number or anything else).
DEFAULT_STEP_PATTERN = r"\|\s*Steps?\s*$"




# --------------------------------------------------------------------------------------
# import
# --------------------------------------------------------------------------------------
class MeasuredTrace:
    """Events of a measured trace mapped to resources, phases and steps. Build with :func:`read_trace`.

    Attributes
    ----------
    kind, phase, name : ndarray of str
        Per mapped event: resource kind, phase, original name.
    chip, unit, step : ndarray of int
        Per mapped event (``step`` -1: outside every step marker).
    start, end : ndarray of float
        Seconds.
    steps : ndarray, shape (num_steps, 2)
        Step spans (seconds) from the markers (empty without markers).
    num_steps : int
    unmapped : dict of str -> int
        Event names on mapped resources that no phase pattern matched, with counts.
    unknown_threads : list of str
        Thread labels no resource pattern matched.
    """

    def __init__(self, kind, chip, unit, phase, name, start, end, step, steps, num_steps, unmapped,
                 unknown_threads):
        self.kind = np.asarray(kind, dtype=object)
        self.chip = np.asarray(chip, dtype=np.int64)
        self.unit = np.asarray(unit, dtype=np.int64)
        self.phase = np.asarray(phase, dtype=object)
        self.name = np.asarray(name, dtype=object)
        self.start = np.asarray(start, dtype=float)
        self.end = np.asarray(end, dtype=float)
        self.step = np.asarray(step, dtype=np.int64)
        self.steps = np.asarray(steps, dtype=float).reshape(-1, 2)
        self.num_steps = int(num_steps)
        self.unmapped = dict(unmapped)
        self.unknown_threads = list(unknown_threads)

    def __len__(self) -> int:
        return len(self.phase)

    @staticmethod
    def _busy(intervals: list[tuple[float, float]]) -> float:
        """Length of the union of intervals (nested or overlapping events count once)."""
        total, cur_s, cur_e = 0.0, None, None
        for s, e in sorted(intervals):
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    total += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            total += cur_e - cur_s
        return total

    def _step_time(self) -> float:
        lengths = self.steps[:, 1] - self.steps[:, 0]
        if len(lengths) == 0:
            return float("nan")
        if len(lengths) >= 3:  # the first and last steps of a window carry pipeline fill and drain
            lengths = lengths[1:-1]
        return float(lengths.mean())

    def phase_times(self):
        """Measured seconds per step of every phase on its busiest unit.

        With step markers: per step, the busy time (union of the phase's events that
        start in the step) of each unit, the largest over units, then the mean over
        steps. Without: the busiest unit's total busy time over ``num_steps``.

        Returns
        -------
        xarray.Dataset
            ``measured`` (phase) in s; ``per_step`` (step, phase) in s when markers
            exist; ``step_time`` (mean marker length without the first and last markers when
            there are 3 or more, s; NaN without markers);
            ``events`` (phase): mapped events per phase.
        """
        import xarray as xr

        n = self.num_steps
        markers = len(self.steps) > 0
        # Rows per step only with markers (then n = number of markers); without, n is
        # only the divisor of the busy time.
        per_step = np.full((max(n, 1) if markers else 1, len(PHASES)), np.nan)
        measured = np.zeros(len(PHASES))
        counts = np.zeros(len(PHASES), np.int64)
        for j, phase in enumerate(PHASES):
            sel = self.phase == phase
            counts[j] = int(sel.sum())
            units = sorted({(int(c), int(u)) for c, u in zip(self.chip[sel], self.unit[sel])})
            if markers:
                for i in range(n):
                    best = 0.0
                    for c, u in units:
                        m = sel & (self.chip == c) & (self.unit == u) & (self.step == i)
                        best = max(best, self._busy(list(zip(self.start[m], self.end[m]))))
                    per_step[i, j] = best
                measured[j] = float(np.mean(per_step[:n, j])) if n else 0.0
            else:
                best = 0.0
                for c, u in units:
                    m = sel & (self.chip == c) & (self.unit == u)
                    best = max(best, self._busy(list(zip(self.start[m], self.end[m]))))
                measured[j] = best / n if n else 0.0
        data = {
            "measured": ("phase", measured, {"long_name": "measured time per step (busiest unit)", "units": "s"}),
            "events": ("phase", counts, {"long_name": "mapped events", "units": "count"}),
            "step_time": ((), self._step_time(), {"long_name": "mean step-marker length (first and last "
                                                              "left out when there are 3 or more)", "units": "s"}),
        }
        coords = {"phase": ("phase", np.array(PHASES, dtype=object))}
        if markers:
            data["per_step"] = (("step", "phase"), per_step[:n], {"long_name": "measured per step", "units": "s"})
            coords["step"] = ("step", np.arange(n))
        return xr.Dataset(data, coords=coords, attrs={"num_steps": n, "unmapped_events": sum(self.unmapped.values())})

    def __repr__(self) -> str:
        return (f"MeasuredTrace({len(self)} mapped events, {self.num_steps} steps, "
                f"{sum(self.unmapped.values())} unmapped, {len(self.unknown_threads)} unknown threads)")


def _load(source) -> list:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            raise TraceError(f"no trace file {str(path)!r}")
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rt", encoding="utf-8") as fh:
                source = json.load(fh)
        except (OSError, ValueError, EOFError, zlib.error) as err:
            # truncated or bit-flipped gzip (EOFError, zlib.error, BadGzipFile), bad JSON or text
            raise TraceError(f"cannot read {str(path)!r} as (gzipped) JSON: {type(err).__name__}: {err}") from None
        except RecursionError:
            raise TraceError(f"cannot read {str(path)!r}: the JSON is nested too deeply to be a trace") from None
    if isinstance(source, Mapping):
        events = source.get("traceEvents")
        if not isinstance(events, list):
            raise TraceError("a JSON object trace needs a 'traceEvents' list")
        return events
    if isinstance(source, list):
        return source
    raise TraceError(f"a trace is a path, a dict with 'traceEvents' or a list, got {type(source).__name__}")


#: Most steps a trace without step markers may be divided into.
_MAX_STEPS = 2**31


def _text(value) -> str:
    """An event or thread name as text (names that are not strings are shown, never fail)."""
    return value if isinstance(value, str) else shown(value)


def _thread_id(value) -> bool:
    """A pid or tid read_trace can key a thread with: absent, a string or an int64."""
    return value is None or isinstance(value, str) or (
        isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63)


def _unit_number(text, label: str) -> int:
    """The ``chip`` / ``unit`` group of a thread pattern as an int (0 when the group is absent)."""
    if not text:
        return 0
    if len(text) > 18:
        raise TraceError(f"thread {label!r}: the chip or unit number {text[:20]}... is too long to be one")
    if not (text.isascii() and text.isdigit()):
        # A user's pattern whose group captures more than digits (e.g. (?P<chip>.+)).
        raise TraceError(f"thread {label!r}: the chip or unit group captured {text!r}, not a number; make the "
                         r"pattern's chip / unit groups capture digits only, e.g. (?P<chip>\d+)")
    return int(text)


def _compile(patterns, what):
    if isinstance(patterns, (str, bytes, Mapping)) or not isinstance(patterns, Iterable):
        raise ConfigError(f"{what} patterns must be a list of (name, regex) pairs, got {shown(patterns)}")
    out = []
    for item in patterns:
        try:
            label, regex = item
            if not isinstance(label, str) or not isinstance(regex, (str, re.Pattern)) \
                    or isinstance(getattr(regex, "pattern", regex), bytes):
                raise TypeError("the name and the regex must be text")
            out.append((label, re.compile(regex)))
        except (TypeError, ValueError, re.error) as err:
            raise ConfigError(f"bad {what} pattern {shown(item)}: {err}; give (name, regex) pairs") from None
    return out


def _phase_of(event) -> str | None:
    """An event's ``ph`` when it is text (a dict built in Python may hold anything there)."""
    ph = event.get("ph")
    return ph if isinstance(ph, str) else None


def read_trace(source, *, resource_patterns=DEFAULT_RESOURCE_PATTERNS, phase_patterns=DEFAULT_PHASE_PATTERNS,
               step_pattern: str | None = DEFAULT_STEP_PATTERN, num_steps: int | None = None,
               top_level_only: bool = True, time_unit: str = "us") -> MeasuredTrace:
    """Read a measured Chrome trace and map its events to resources, phases and steps.

    Parameters
    ----------
    source : str, Path, dict or list
        A ``.json`` / ``.json.gz`` file, or the parsed trace.
    resource_patterns : sequence of (kind, regex)
        See :data:`DEFAULT_RESOURCE_PATTERNS`; matched against
        ``"<process name> | <thread name>"``.
    phase_patterns : sequence of (phase, regex)
        See :data:`DEFAULT_PHASE_PATTERNS`; matched against ``"<kind>:<event name>"``.
        Phases must be among :data:`~scwork.pipeline.PHASES`.
    step_pattern : str or None
        Threads whose label matches hold step markers; None: no markers.
    num_steps : int, optional
        Steps in the trace when it has no markers (required then).
    top_level_only : bool, default True
        Only events not nested in another event of the same thread are mapped (the
        children of an op would count twice or under another phase).
    time_unit : {"us", "ns", "ms", "s"}
        Unit of ``ts`` / ``dur`` (Chrome traces: microseconds).

    Returns
    -------
    MeasuredTrace

    Raises
    ------
    TraceError
        Unreadable file, no ``traceEvents``, unmatched ``B``/``E`` events, no step
        markers and no ``num_steps``.
    ConfigError
        Bad patterns, unknown phase names, unknown time unit.
    """
    scale, rpat, ppat, spat = _read_options(resource_patterns, phase_patterns, step_pattern, top_level_only,
                                            time_unit)
    events = _load(source)
    pnames, tnames = _thread_names(events)
    per_thread = _complete_events(events, scale)

    def label(key):
        return f"{pnames.get(key[0], '')} | {tnames.get(key, '')}"

    marker_key, steps, n_steps = _steps(per_thread, label, spat, num_steps)
    out, unmapped, unknown = _mapped_events(per_thread, label, marker_key, spat, rpat, ppat, steps, top_level_only)
    return MeasuredTrace(out["kind"], out["chip"], out["unit"], out["phase"], out["name"], out["start"],
                         out["end"], out["step"], steps, n_steps, unmapped, sorted(set(unknown)))


def _read_options(resource_patterns, phase_patterns, step_pattern, top_level_only, time_unit):
    """The checked options of :func:`read_trace`: seconds per time unit and compiled patterns."""
    scale = {"us": 1e-6, "ns": 1e-9, "ms": 1e-3, "s": 1.0}.get(time_unit) if isinstance(time_unit, str) else None
    if scale is None:
        raise ConfigError(f"time_unit must be 'us', 'ns', 'ms' or 's', got {shown(time_unit)}")
    rpat = _compile(resource_patterns, "resource")
    ppat = _compile(phase_patterns, "phase")
    for phase, _ in ppat:
        if phase not in PHASES:
            raise ConfigError(f"phase pattern names unknown phase {phase!r}; phases are {list(PHASES)}")
    for kind, _ in rpat:
        if kind not in ("host", "sc", "ici", "tc"):
            raise ConfigError(f"resource pattern names unknown kind {kind!r}; kinds are host, sc, ici, tc")
    if step_pattern is not None and not isinstance(step_pattern, (str, re.Pattern)) \
            or isinstance(getattr(step_pattern, "pattern", step_pattern), bytes):
        raise ConfigError(f"step_pattern must be a regular expression (text) or None, got {shown(step_pattern)}")
    try:
        spat = re.compile(step_pattern) if step_pattern else None
    except re.error as err:
        raise ConfigError(f"step_pattern {shown(step_pattern)} is not a regular expression: {err}") from None
    if not isinstance(top_level_only, (bool, np.bool_)):
        raise ConfigError(f"top_level_only must be True or False, got {shown(top_level_only)}")
    return scale, rpat, ppat, spat


def _thread_names(events) -> tuple[dict, dict]:
    """Process names by pid and thread names by (pid, tid), from the metadata ('M') events."""
    pnames: dict = {}
    tnames: dict = {}
    for e in events:
        if isinstance(e, Mapping) and _phase_of(e) == "M" and isinstance(e.get("args"), Mapping):
            if not all(_thread_id(k) for k in (e.get("pid"), e.get("tid"))):
                continue  # a name for an id that cannot be one; its events are reported below
            if e.get("name") == "process_name":
                pnames[e.get("pid")] = _text(e["args"].get("name", ""))
            elif e.get("name") == "thread_name":
                tnames[(e.get("pid"), e.get("tid"))] = _text(e["args"].get("name", ""))
    return pnames, tnames


def _complete_events(events, scale: float) -> dict[tuple, list[tuple[float, float, str]]]:
    """(start s, end s, name) per thread from 'X' events and matched 'B'/'E' pairs; every problem at once."""
    per_thread: dict[tuple, list[tuple[float, float, str]]] = {}
    open_b: dict[tuple, list] = {}
    problems = []
    for n, e in enumerate(events):
        if not isinstance(e, Mapping):
            continue
        ph = _phase_of(e)
        if ph not in ("X", "B", "E"):
            continue
        key = (e.get("pid"), e.get("tid"))
        if not all(_thread_id(k) for k in key):
            problems.append(f"event {n}: pid/tid {shown(key[0])}/{shown(key[1])} must be integers or strings")
            continue
        ts = e.get("ts")
        if not _num(ts):
            problems.append(f"event {n}: ts {shown(ts)} is not a number")
            continue
        if ph == "X":
            dur = e.get("dur", 0)
            if not _num(dur) or dur < 0:
                problems.append(f"event {n}: dur {shown(dur)} is not a number >= 0")
                continue
            per_thread.setdefault(key, []).append((ts * scale, (ts + dur) * scale, _text(e.get("name", ""))))
        elif ph == "B":
            open_b.setdefault(key, []).append((ts, _text(e.get("name", ""))))
        else:
            stack = open_b.get(key)
            if not stack:
                problems.append(f"event {n}: 'E' without a matching 'B' on pid {key[0]} tid {key[1]}")
                continue
            t0, name = stack.pop()
            if ts < t0:
                problems.append(f"event {n}: 'E' at {ts} is before its 'B' at {t0} on pid {key[0]} tid {key[1]}")
                continue
            per_thread.setdefault(key, []).append((t0 * scale, ts * scale, name))
    for key, stack in open_b.items():
        if stack:
            problems.append(f"{len(stack)} 'B' event(s) without 'E' on pid {key[0]} tid {key[1]}")
    if problems:
        raise TraceError(problems)
    return per_thread


def _steps(per_thread, label, spat, num_steps):
    """The step-marker thread (or None), the steps' (start, end) in seconds, and the number of steps."""
    marker_key = None
    if spat is not None:
        cands = sorted((k for k in per_thread if spat.search(label(k))), key=lambda k: (str(k[0]), str(k[1])))
        marker_key = cands[0] if cands else None
    steps = np.zeros((0, 2))
    if marker_key is not None:
        steps = np.array(sorted((s, e) for s, e, _ in per_thread[marker_key]), dtype=float).reshape(-1, 2)
        n_steps = len(steps)
    elif num_steps is not None:
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or not 1 <= num_steps <= _MAX_STEPS:
            raise ConfigError(f"num_steps must be an integer from 1 to {_MAX_STEPS:,}, got {shown(num_steps)}")
        n_steps = num_steps
    else:
        raise TraceError("the trace has no step markers (no thread matches step_pattern): pass num_steps=")
    return marker_key, steps, n_steps


def _mapped_events(per_thread, label, marker_key, spat, rpat, ppat, steps, top_level_only):
    """Columns of the events mapped to a resource and phase, the unmapped names, the unknown threads."""
    out: dict[str, list] = {k: [] for k in ("kind", "chip", "unit", "phase", "name", "start", "end", "step")}
    unmapped: dict[str, int] = {}
    unknown = []
    for key, items in per_thread.items():
        if key == marker_key or (spat is not None and spat.search(label(key))):
            continue
        lab = label(key)
        kind = chip = unit = None
        for k, rx in rpat:
            m = rx.search(lab)
            if m:
                g = m.groupdict()
                kind = k
                chip = _unit_number(g.get("chip"), lab)
                unit = _unit_number(g.get("unit"), lab)
                break
        if kind is None:
            unknown.append(lab)
            continue
        items = sorted(items, key=lambda x: (x[0], -(x[1] - x[0])))
        top_end = -math.inf
        for s, e, name in items:
            # 1 ps of slack: ts + dur of one event and ts of the next may differ by rounding
            nested = s < top_end - 1e-12
            if not nested:
                top_end = e
            elif top_level_only:
                continue
            text = f"{kind}:{name}"
            phase = next((p for p, rx in ppat if rx.search(text)), None)
            if phase is None:
                unmapped[name] = unmapped.get(name, 0) + 1
                continue
            if len(steps):
                idx = int(np.searchsorted(steps[:, 0], s, side="right")) - 1
                step = idx if idx >= 0 and s < steps[idx, 1] else -1
            else:
                step = -1
            for field_, value in (("kind", kind), ("chip", chip), ("unit", unit), ("phase", phase),
                                  ("name", name), ("start", s), ("end", e), ("step", step)):
                out[field_].append(value)
    return out, unmapped, unknown


# --------------------------------------------------------------------------------------
# overlay
# --------------------------------------------------------------------------------------
def compare(model, measured, *, schedule: str | None = None):
    """Modelled vs measured time per phase (and per step), with the ratio.

    Parameters
    ----------
    model : StepModel
    measured : MeasuredTrace, or anything :func:`read_trace` accepts
    schedule : {"pipelined", "sequential"}, optional
        Which modelled step time to compare with the measured step markers
        (default: the model's schedule in use).

    Returns
    -------
    xarray.Dataset
        Dim ``phase`` (the seven phases plus ``"step"``): ``modelled``, ``measured``
        (s), ``ratio`` = measured / modelled (NaN where the model has 0),
        ``difference`` = measured - modelled (s). ``to_dataframe()`` gives the
        table; per-step measurements are in ``measured.phase_times()``.

    Examples
    --------
    >>> import scwork
    >>> from scwork.pipeline import step_model, expected_stats, to_chrome_trace, read_trace, compare
    >>> topo = scwork.Topology.for_chip("v5p", num_chips=1)
    >>> m = step_model(expected_stats({"t": 8.0}, topo, batch_size=256), widths={"t": 32},
    ...                topology=topo, tc_forward_s=5e-5)
    >>> ds = compare(m, read_trace(to_chrome_trace(m, schedule="sequential")))
    >>> [round(float(r), 6) for r in ds["ratio"].sel(phase=["sc_forward", "tc_forward"])]
    [1.0, 1.0]
    """
    import xarray as xr

    from scwork.pipeline.model import StepModel

    if not isinstance(model, StepModel):
        raise ConfigError(f"compare needs a StepModel, got {type(model).__name__}")
    if not isinstance(measured, MeasuredTrace):
        measured = read_trace(measured)
    if schedule is None:
        step_modelled = model.step_time
    elif schedule in ("pipelined", "sequential"):
        step_modelled = getattr(model, f"{schedule}_step_time")
    else:
        raise ConfigError(f"schedule must be 'pipelined' or 'sequential', got {schedule!r}")
    mt = measured.phase_times()
    names = list(PHASES) + ["step"]
    modelled = np.array([model.phase_time[p] for p in PHASES] + [step_modelled])
    meas = np.append(mt["measured"].values, float(mt["step_time"]))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(modelled > 0, meas / np.where(modelled > 0, modelled, 1.0), np.nan)
    data = {
        "modelled": ("phase", modelled, {"long_name": "modelled time per step", "units": "s"}),
        "measured": ("phase", meas, {"long_name": "measured time per step", "units": "s"}),
        "ratio": ("phase", ratio, {"long_name": "measured / modelled", "units": "1"}),
        "difference": ("phase", meas - modelled, {"long_name": "measured - modelled", "units": "s"}),
    }
    coords = {"phase": ("phase", np.array(names, dtype=object))}
    return xr.Dataset(data, coords=coords, attrs={
        "num_steps": measured.num_steps, "unmapped_events": sum(measured.unmapped.values()),
        "schedule": schedule or ("pipelined" if model.pipelining else "sequential")})
