"""Chrome trace export of a modelled run: Perfetto / chrome://tracing / XProf trace viewer JSON.

Export (:func:`to_chrome_trace`, :func:`write_chrome_trace`)
    Any :class:`~scwork.pipeline.Timeline` or :class:`~scwork.pipeline.StepModel`
    becomes a `Trace Event Format`_ ([trace-event]) JSON object that Perfetto (ui.perfetto.dev),
    ``chrome://tracing`` and XProf's trace viewer open:

    - one process (``pid``) per chip, named ``TPU:<chip>``, and one per host,
      named ``Host <h>``;
    - one thread (``tid``) per SparseCore (``SparseCore <k>``), per TensorCore
      (``TensorCore <k>``), one for the chip's ICI links (``ICI``), one
      ``preprocessing`` thread per host and a ``Steps`` thread with one slice per
      step (like XProf's step markers);
    - ``"X"`` complete events for the phases (name = phase, ``args``: step, stage),
      with nested ``"X"`` events for the stacked tables (and mini-batches) inside
      every SparseCore phase;
    - ``"C"`` counter events ``HBM`` (bytes by category) and ``HBM total`` per chip:
      the buffers of the memory model (:func:`scwork.memory.plan`, when the step
      model has one) placed on the modelled intervals, else the step model's own
      estimate (activations and gradients, plus tables and slots when the plan is
      known);
    - flow events (``"s"`` / ``"f"``, ``bp: "e"``) for the transfers: host input to
      the SparseCores, SparseCores to the links, links to the TensorCore and back.

    Timestamps are microseconds. :func:`validate_chrome_trace` checks what the
    viewers rely on (required fields, numbers, per-thread nesting of complete
    events, flow ends bound to slices, counters numeric) and raises
    :class:`TraceError` listing every problem.

.. _Trace Event Format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU

Examples
--------
>>> import scwork
>>> from scwork.pipeline import step_model, expected_stats, to_chrome_trace, validate_chrome_trace
>>> topo = scwork.Topology.for_chip("v5p", num_chips=2)
>>> m = step_model(expected_stats({"t": 10.0}, topo, batch_size=1024), widths={"t": 32},
...                topology=topo, tc_forward_s=1e-4)
>>> trace = to_chrome_trace(m)
>>> summary = validate_chrome_trace(trace)
>>> summary["processes"][:2], summary["counter_names"]
(['TPU:0', 'TPU:1'], ['HBM', 'HBM total'])
"""

from __future__ import annotations

import gzip
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scwork._rounding import round_up

from scwork._validate import shown
from scwork.errors import ConfigError, TraceError
from scwork.pipeline.phases import PHASE_RESOURCE

__all__ = ["to_chrome_trace", "write_chrome_trace", "validate_chrome_trace", "hbm_usage"]

_US = 1e6

# --------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------
_TID_STEPS, _TID_SC, _TID_ICI, _TID_TC, _TID_HOST = 1, 100, 200, 300, 1


def _hbm_buffers(model, timeline, memory) -> tuple[dict[str, int], dict[str, int], str]:
    """Static bytes and per-step buffer bytes (per chip) by category, and their source."""
    if memory is not None:
        static_cats = ("tables", "optimizer_slots", "dense_weights", "constants", "prefetch")
        static: dict[str, int] = {}
        step: dict[str, int] = {}
        for iv in memory.timeline.intervals:
            target = static if iv.category in static_cats else step
            target[iv.category] = target.get(iv.category, 0) + int(iv.bytes)
        return static, step, "scwork.memory.plan"
    static, step = {}, {}
    if model is None:
        return static, step, "none"
    d = model.detail
    n = d["samples_per_sc"]
    S = timeline.units.sparsecores_per_chip
    abytes = model.params.activation_bytes
    per_line = max(1, model.chip.dma_granule_bytes // abytes)
    act = 0
    for st in model._stacks:
        w_act = round_up(st.dim, per_line)
        act += S * st.features * n * w_act * abytes
    step["embedding_activations"] = act
    step["embedding_gradients"] = act
    plan = model._inputs.get("plan")
    if plan is not None:
        from scwork.memory import OPTIMIZER_SLOTS
        from scwork.pipeline.params import DTYPE_SIZES

        tables = slots = 0
        chips = model.topology.num_chips
        for st in model._stacks:
            stack = plan.stack(st.name)
            width = int(d["padded_width"][model.stacks.index(st.name)])
            b = DTYPE_SIZES[st.dtype]
            rows = stack.vocab_size // chips
            tables += rows * width * b
            slots += rows * width * b * OPTIMIZER_SLOTS.get(st.optimizer, 0)
        static["tables"] = tables
        static["optimizer_slots"] = slots
    return static, step, "step model estimate"


#: Per-step buffer categories and the (phase, start|end) pairs that bound their life.
_BUFFER_SPANS = {
    "sc_forward_stack": (("sc_forward", "start"), ("sc_forward", "end")),
    "staged_gather_operands": (("sc_forward", "start"), ("sc_forward", "end")),
    "embedding_activations": (("sc_forward", "start"), ("tc_forward", "end")),
    "tensorcore_activations": (("tc_forward", "start"), ("tc_backward", "end")),
    "embedding_gradients": (("tc_backward", "start"), ("sc_backward", "end")),
    "sc_backward_stack": (("sc_backward", "start"), ("sc_backward", "end")),
}


def _counter_series(timeline, chip: int, static: dict, step_bytes: dict):
    """Times (s) and bytes per category live on ``chip`` from each time to the next."""
    u = timeline.units
    sc_mask = u.chip_of_sc == chip
    spans: list[tuple[float, float, str, int]] = []

    def when(phase, i, which):
        arr = (timeline.start if which == "start" else timeline.end)[(phase, i)]
        if PHASE_RESOURCE[phase] == "sc":
            arr = arr[sc_mask]
            return float(arr.min() if which == "start" else arr.max())
        return float(arr[chip])

    for cat, nbytes in step_bytes.items():
        if cat not in _BUFFER_SPANS or nbytes <= 0:
            continue
        (p0, w0), (p1, w1) = _BUFFER_SPANS[cat]
        for i in range(timeline.num_steps):
            spans.append((when(p0, i, w0), when(p1, i, w1), cat, nbytes))
    times = sorted({0.0, timeline.makespan} | {s for s, _, _, _ in spans} | {e for _, e, _, _ in spans})
    cats = list(static) + sorted({c for _, _, c, _ in spans} - set(static))
    rows = []
    for t in times:
        values = {c: 0 for c in cats}
        values.update({c: int(v) for c, v in static.items()})
        for s, e, c, b in spans:
            if s <= t < e:
                values[c] += b
        rows.append(values)
    return times, cats, rows


def _counter_events(timeline, chip: int, pid: int, static: dict, step_bytes: dict) -> list[dict]:
    times, _, rows = _counter_series(timeline, chip, static, step_bytes)
    events = []
    for t, values in zip(times, rows):
        events.append({"ph": "C", "name": "HBM", "pid": pid, "ts": t * _US, "args": values})
        events.append({"ph": "C", "name": "HBM total", "pid": pid, "ts": t * _US,
                       "args": {"bytes": int(sum(values.values()))}})
    return events


def _resolve(obj, schedule, memory):
    # Duck-typed: a StepModel has both schedules, a Timeline has intervals. Importing
    # either class here would make this module and theirs import each other (both
    # have a to_chrome_trace method that calls this module).
    if all(hasattr(obj, attr) for attr in ("pipelined", "sequential", "timeline", "memory")):
        if schedule is None:
            timeline = obj.timeline
        elif schedule in ("pipelined", "sequential"):
            timeline = getattr(obj, schedule)
        else:
            raise ConfigError(f"schedule must be 'pipelined' or 'sequential', got {shown(schedule)}")
        return obj, timeline, (obj.memory if memory is None else memory)
    if hasattr(obj, "intervals") and hasattr(obj, "units"):
        if schedule is not None:
            raise ConfigError("schedule= only applies to a StepModel")
        return None, obj, memory
    raise ConfigError(f"needs a StepModel or Timeline, got {type(obj).__name__}")


def hbm_usage(obj, *, chip: int = 0, schedule: str | None = None, memory=None):
    """HBM live on one chip over the modelled run (what the trace's ``HBM`` counters show).

    The buffers are those of the memory model (:func:`scwork.memory.plan`, when given
    or attached to the step model) or the step model's own estimate, placed on the
    modelled intervals: activations live from a step's SparseCore forward pass to
    the end of its TensorCore forward pass, gradients from its TensorCore backward
    pass to the end of its SparseCore backward pass, SparseCore HBM stacks during
    their pass, tables, slots, weights and prefetch buffers throughout. Under
    pipelining the buffers of neighbouring steps overlap, as they do on the device.

    Returns
    -------
    xarray.Dataset
        Dim ``time`` (s, the start of each constant piece) and ``category``;
        ``usage_by_category`` (time, category) and ``usage_bytes`` (time), bytes.

    Examples
    --------
    >>> import scwork
    >>> from scwork.pipeline import step_model, expected_stats, hbm_usage
    >>> topo = scwork.Topology.for_chip("v5p", num_chips=1)
    >>> m = step_model(expected_stats({"t": 4.0}, topo, batch_size=64), widths={"t": 8}, topology=topo,
    ...                tc_forward_s=1e-5)
    >>> ds = hbm_usage(m)
    >>> list(ds["category"].values)
    ['embedding_activations', 'embedding_gradients']

    Activations of one step: 4 SparseCores x 16 samples x 8 float32 x 4 B = 2048 B. Pipelined,
    the activations of step i + 1 coexist with the gradients of step i; sequentially they never do:

    >>> int(ds["usage_bytes"].max()), int(hbm_usage(m, schedule="sequential")["usage_bytes"].max())
    (4096, 2048)
    """
    import xarray as xr

    model, timeline, memory = _resolve(obj, schedule, memory)
    if not 0 <= int(chip) < timeline.units.num_chips:
        raise ConfigError(f"chip {chip} out of range 0..{timeline.units.num_chips - 1}")
    static, step_bytes, source = _hbm_buffers(model, timeline, memory)
    times, cats, rows = _counter_series(timeline, int(chip), static, step_bytes)
    arr = np.array([[r[c] for c in cats] for r in rows], dtype=np.int64).reshape(len(times), len(cats))
    return xr.Dataset(
        {"usage_by_category": (("time", "category"), arr, {"long_name": "HBM live per chip by category",
                                                            "units": "bytes"}),
         "usage_bytes": ("time", arr.sum(axis=1), {"long_name": "HBM live per chip", "units": "bytes"})},
        coords={"time": ("time", np.asarray(times), {"units": "s", "long_name": "start of the piece"}),
                "category": ("category", np.array(cats, dtype=object))},
        attrs={"chip": int(chip), "source": source,
               "schedule": "pipelined" if timeline.pipelined else "sequential"})


def to_chrome_trace(obj, *, schedule: str | None = None, memory=None, flows: bool = True, counters: bool = True,
                    stacks: bool = True, step_markers: bool = True, chips: Sequence[int] | None = None) -> dict:
    """A modelled timeline as Chrome trace event JSON (a dict ready for :func:`json.dump`).

    Parameters
    ----------
    obj : StepModel or Timeline
    schedule : {"pipelined", "sequential"}, optional
        For a StepModel: which timeline (default: the one in use).
    memory : MemoryReport, optional
        Memory model for the HBM counters (default: the step model's, if any).
    flows, counters, stacks, step_markers : bool
        Include flow events, HBM counters, nested per-stack slices, step markers.
    chips : sequence of int, optional
        Only these chips (default all); hosts are kept.

    Returns
    -------
    dict
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``.

    Examples
    --------
    >>> import scwork
    >>> from scwork.pipeline import step_model, expected_stats, to_chrome_trace
    >>> topo = scwork.Topology.for_chip("v5p", num_chips=1)
    >>> m = step_model(expected_stats({"t": 4.0}, topo, batch_size=64), widths={"t": 16}, topology=topo,
    ...                tc_forward_s=1e-5)
    >>> events = to_chrome_trace(m, flows=False, counters=False)["traceEvents"]
    >>> sorted({e["name"] for e in events if e["ph"] == "X" and e.get("cat") == "phase"})
    ['host', 'sc_backward', 'sc_forward', 'tc_backward', 'tc_forward']
    """
    model, timeline, memory = _resolve(obj, schedule, memory)
    last = max((float(np.max(e)) for e in timeline.end.values() if np.size(e)), default=0.0)
    if not last * 1e9 < 2**63:
        # Viewers (Perfetto) keep timestamps as int64 nanoseconds: about 292 years.
        raise ConfigError(f"the modelled run lasts {last:.3g} s, more than trace viewers hold (int64 "
                          "nanoseconds, about 292 years); check the time inputs (tc_forward_s, host_overhead_s, ...)")
    u = timeline.units
    chip_list = list(range(u.num_chips)) if chips is None else [int(c) for c in chips]
    bad = [c for c in chip_list if not 0 <= c < u.num_chips]
    if bad:
        raise ConfigError(f"chips {bad} out of range 0..{u.num_chips - 1}")
    wanted = set(chip_list)
    chip_pid = {c: c + 1 for c in range(u.num_chips)}
    host_pid = {h: u.num_chips + 1 + h for h in range(u.num_hosts)}
    ev: list[dict] = []

    def meta(pid, tid, name, value):
        ev.append({"ph": "M", "pid": pid, "tid": tid, "name": name, "args": value})

    for h in range(u.num_hosts):
        meta(host_pid[h], 0, "process_name", {"name": f"Host {h}"})
        meta(host_pid[h], 0, "process_sort_index", {"sort_index": -1000 + h})
        meta(host_pid[h], _TID_HOST, "thread_name", {"name": "preprocessing"})
    for c in chip_list:
        pid = chip_pid[c]
        meta(pid, 0, "process_name", {"name": f"TPU:{c}"})
        meta(pid, 0, "process_sort_index", {"sort_index": c})
        if step_markers:
            meta(pid, _TID_STEPS, "thread_name", {"name": "Steps"})
            meta(pid, _TID_STEPS, "thread_sort_index", {"sort_index": 0})
        for k in range(u.sparsecores_per_chip):
            meta(pid, _TID_SC + k, "thread_name", {"name": f"SparseCore {k}"})
            meta(pid, _TID_SC + k, "thread_sort_index", {"sort_index": 1 + k})
        meta(pid, _TID_ICI, "thread_name", {"name": "ICI"})
        meta(pid, _TID_ICI, "thread_sort_index", {"sort_index": 100})
        for k in range(u.tensorcores_per_chip):
            meta(pid, _TID_TC + k, "thread_name", {"name": f"TensorCore {k}"})
            meta(pid, _TID_TC + k, "thread_sort_index", {"sort_index": 200 + k})

    def where(kind, unit):
        """(pid, [tids]) of a schedule unit, or None when its chip is filtered out."""
        if kind == "host":
            return host_pid[unit], [_TID_HOST]
        chip = unit // u.sparsecores_per_chip if kind == "sc" else unit
        if chip not in wanted:
            return None
        if kind == "sc":
            return chip_pid[chip], [_TID_SC + unit % u.sparsecores_per_chip]
        if kind == "ici":
            return chip_pid[chip], [_TID_ICI]
        return chip_pid[chip], [_TID_TC + k for k in range(u.tensorcores_per_chip)]

    # phases (and nested stacks)
    for (phase, step), s in timeline.start.items():
        kind = PHASE_RESOURCE[phase]
        e = timeline.end[(phase, step)]
        labels, frac = timeline.parts.get(phase, ([], None)) if stacks else ([], None)
        for j in range(len(s)):
            loc = where(kind, j)
            dur = float(e[j] - s[j])
            if loc is None or dur <= 0:
                continue
            pid, tids = loc
            stage = timeline.stage_of(float(s[j]), float(e[j]))
            for tid in tids:
                ev.append({"ph": "X", "name": phase, "cat": "phase", "pid": pid, "tid": tid,
                           "ts": float(s[j]) * _US, "dur": dur * _US,
                           "args": {"step": step, "stage": stage, "phase": phase}})
                if frac is not None and len(labels):
                    t0 = float(s[j])
                    for label, f in zip(labels, frac[:, j]):
                        if f <= 0:
                            continue
                        ev.append({"ph": "X", "name": label, "cat": "stack", "pid": pid, "tid": tid,
                                   "ts": t0 * _US, "dur": f * dur * _US, "args": {"step": step, "phase": phase}})
                        t0 += f * dur
    # step markers: consecutive slices ending at each step's completion
    if step_markers:
        done = timeline.step_completion()
        prev = 0.0
        for i, t in enumerate(done):
            for c in chip_list:
                ev.append({"ph": "X", "name": str(i), "cat": "step", "pid": chip_pid[c], "tid": _TID_STEPS,
                           "ts": prev * _US, "dur": max(0.0, float(t) - prev) * _US, "args": {"step": i}})
            prev = max(prev, float(t))
    # flows
    if flows:
        _flow_events(timeline, ev, chip_list, chip_pid, host_pid)
    # counters
    counter_source = "none"
    if counters:
        static, step_bytes, counter_source = _hbm_buffers(model, timeline, memory)
        for c in chip_list:
            ev.extend(_counter_events(timeline, c, chip_pid[c], static, step_bytes))
    other = {"generator": "scwork.pipeline.to_chrome_trace", "schedule":
             "pipelined" if timeline.pipelined else "sequential", "hbm_counter_source": counter_source,
             "time_unit": "us"}
    return {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": other}


def _flow_events(timeline, ev: list, chip_list, chip_pid, host_pid) -> None:
    u = timeline.units
    fid = [0]

    def inside(phase, step, unit, at_end):
        s = float(timeline.start[(phase, step)][unit])
        e = float(timeline.end[(phase, step)][unit])
        if e <= s:
            return None
        return (s + (e - s) * (0.999 if at_end else 0.001)) * _US

    def flow(name, src, dst):
        (spid, stid, sts), (dpid, dtid, dts) = src, dst
        if sts is None or dts is None or dts < sts:
            return
        fid[0] += 1
        ev.append({"ph": "s", "name": name, "cat": "transfer", "id": fid[0], "pid": spid, "tid": stid, "ts": sts})
        ev.append({"ph": "f", "bp": "e", "name": name, "cat": "transfer", "id": fid[0], "pid": dpid, "tid": dtid,
                   "ts": dts})

    for i in range(timeline.num_steps):
        for c in chip_list:
            pid = chip_pid[c]
            scs = [c * u.sparsecores_per_chip + k for k in range(u.sparsecores_per_chip)]
            h = int(u.host_of_chip[c])
            for j in scs:
                flow("input", (host_pid[h], _TID_HOST, inside("host", i, h, True)),
                     (pid, _TID_SC + j % u.sparsecores_per_chip, inside("sc_forward", i, j, False)))
            ici_f = inside("ici_forward", i, c, False)
            for j in scs:
                dst = (pid, _TID_ICI, ici_f) if ici_f is not None else \
                    (pid, _TID_TC, inside("tc_forward", i, c, False))
                flow("activations", (pid, _TID_SC + j % u.sparsecores_per_chip, inside("sc_forward", i, j, True)),
                     dst)
            if ici_f is not None:
                flow("activations", (pid, _TID_ICI, inside("ici_forward", i, c, True)),
                     (pid, _TID_TC, inside("tc_forward", i, c, False)))
            ici_b = inside("ici_backward", i, c, False)
            src = (pid, _TID_TC, inside("tc_backward", i, c, True))
            if ici_b is not None:
                flow("gradients", src, (pid, _TID_ICI, ici_b))
                src = (pid, _TID_ICI, inside("ici_backward", i, c, True))
            for j in scs:
                flow("gradients", src, (pid, _TID_SC + j % u.sparsecores_per_chip, inside("sc_backward", i, j, False)))


def write_chrome_trace(obj, path, **kwargs) -> Path:
    """Write :func:`to_chrome_trace` (or an already built trace dict) to ``path``.

    A name ending in ``.gz`` is gzip-compressed. Returns the path.
    """
    import contextlib
    import os

    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"path must be a file path (str or os.PathLike), got {type(path).__name__}")
    trace = obj if isinstance(obj, dict) and "traceEvents" in obj else to_chrome_trace(obj, **kwargs)
    path = Path(path)
    try:
        text = json.dumps(trace, allow_nan=False)
    except (TypeError, ValueError) as error:       # a hand-made dict with NaN or objects JSON cannot hold
        raise ConfigError(f"the trace cannot be written as JSON: {error}") from None
    # Written under a temporary name and renamed: a failure leaves no file (and no half file) behind.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if path.suffix == ".gz":
            with gzip.open(temporary, "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise ConfigError(f"cannot write the Chrome trace to {str(path)!r}: {error.strerror or error}") from None
    return path


# --------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------
_PHASE_TYPES = {"X", "B", "E", "C", "M", "s", "t", "f", "i", "I", "b", "e", "n"}
_META = {"process_name", "thread_name", "process_sort_index", "thread_sort_index", "process_labels"}


def _id(x, *, str_ok: bool) -> bool:
    """A process, thread or flow id: an int64 (flows: or a string)."""
    if isinstance(x, str):
        return str_ok
    return isinstance(x, int) and not isinstance(x, bool) and -2**63 <= x < 2**63


def _num(x) -> bool:
    if not isinstance(x, numbers.Real) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:       # an int beyond float range
        return False


def validate_chrome_trace(trace, *, require_names: bool = True, tolerance_us: float = 1e-6) -> dict:
    """Check a trace the way viewers read it; raise :class:`TraceError` listing every problem.

    Checks: the top level (``{"traceEvents": [...]}`` or a list), known ``ph``
    values, required fields and finite numbers per event type (``ts >= 0``,
    ``dur >= 0``), integer ``pid`` / ``tid``, metadata arguments, numeric counter
    arguments, complete events nesting properly on every thread (no partial
    overlap), every flow having one start and one end (``"f"`` after ``"s"``,
    ``bp = "e"``) each inside a slice of its thread, JSON serialisability without
    NaN, and (``require_names``) a name for every process and thread with events.
    Ends and starts compare within ``tolerance_us`` or 1e-12 of the timestamp,
    whichever is larger (float64 rounding far from 0).

    Returns
    -------
    dict
        ``events``, ``by_ph`` (counts), ``processes`` (names by pid order),
        ``threads`` (``"process | thread"`` labels with complete events),
        ``counter_names``, ``flows`` (matched pairs), ``max_depth`` (nesting).
    """
    problems: list[str] = []
    if isinstance(trace, Mapping):
        events = trace.get("traceEvents")
        if not isinstance(events, list):
            raise TraceError("a JSON object trace needs a 'traceEvents' list")
    elif isinstance(trace, list):
        events = trace
    else:
        raise TraceError(f"a trace is a dict with 'traceEvents' or a list of events, got {type(trace).__name__}")
    if not isinstance(require_names, (bool, np.bool_)):
        raise ConfigError(f"require_names must be True or False, got {shown(require_names)}")
    if not _num(tolerance_us) or tolerance_us < 0:
        raise ConfigError(f"tolerance_us must be a finite number >= 0 (microseconds), got {shown(tolerance_us)}")
    try:
        json.dumps(trace, allow_nan=False)
    except (TypeError, ValueError) as err:
        problems.append(f"not JSON serialisable without NaN/Infinity: {shown(str(err), 200)}")
    except RecursionError:
        problems.append("not JSON serialisable: nested too deeply")
    scan = _TraceScan()
    for n, e in enumerate(events):
        _scan_event(scan, n, e, problems)

    def tol(at: float) -> float:
        # float64 timestamps carry ~16 digits: far from 0 one rounding step exceeds any
        # fixed tolerance, so allow 1e-12 of the timestamp too (1 ps per second).
        return max(tolerance_us, abs(at) * 1e-12)

    max_depth = _check_nesting(scan.slices, tol, problems)
    matched = _check_flows(scan.flows, scan.slices, tol, problems)
    if require_names:
        for pid in sorted(scan.used_pids, key=str):
            if pid not in scan.pnames:
                problems.append(f"pid {pid} has events but no process_name")
        for key in sorted(scan.used_threads, key=str):
            if key not in scan.tnames:
                problems.append(f"pid {key[0]} tid {key[1]} has complete events but no thread_name")
    if problems:
        raise TraceError(problems)
    pnames, tnames = scan.pnames, scan.tnames
    order = sorted(pnames, key=lambda p: (str(type(p)), p))
    return {
        "events": len(events),
        "by_ph": scan.by_ph,
        "processes": [pnames[p] for p in order],
        "threads": sorted(f"{pnames.get(k[0], k[0])} | {tnames.get(k, k[1])}" for k in scan.used_threads),
        "counter_names": sorted(scan.counters),
        "flows": matched,
        "max_depth": max_depth,
    }


@dataclass
class _TraceScan:
    """What :func:`validate_chrome_trace` gathers in one pass over the events."""

    by_ph: dict = field(default_factory=dict)
    pnames: dict = field(default_factory=dict)
    tnames: dict = field(default_factory=dict)
    slices: dict = field(default_factory=dict)      # (pid, tid) -> [(start, end, event index)]
    flows: dict = field(default_factory=dict)       # flow id -> {"s"/"t"/"f": ((pid, tid), ts, bp)}
    counters: set = field(default_factory=set)
    used_pids: set = field(default_factory=set)
    used_threads: set = field(default_factory=set)


def _scan_event(scan: _TraceScan, n: int, e: Any, problems: list[str]) -> None:
    """Check one event's fields for its type and record what later checks need."""
    where = f"event {n}"
    if not isinstance(e, Mapping):
        problems.append(f"{where} is not an object")
        return
    ph = e.get("ph")
    if not isinstance(ph, str) or ph not in _PHASE_TYPES:
        scan.by_ph[shown(ph)] = scan.by_ph.get(shown(ph), 0) + 1
        problems.append(f"{where}: unknown ph {shown(ph)}")
        return
    scan.by_ph[ph] = scan.by_ph.get(ph, 0) + 1
    bad_ids = [key for key in ("pid",) + (("tid",) if ph not in ("C",) else ())
               if key in e and not _id(e[key], str_ok=False)]
    for key in bad_ids:
        problems.append(f"{where}: {key} must be an integer, got {shown(e[key])}")
    if bad_ids:
        return        # the id cannot key a process or thread
    if "pid" not in e:
        problems.append(f"{where} ({ph}): missing pid")
        return
    if ph == "M":
        _scan_metadata(scan, where, e, problems)
        return
    if not _num(e.get("ts")) or e.get("ts") < 0:
        problems.append(f"{where} ({ph}): ts must be a finite number >= 0, got {shown(e.get('ts'))}")
        return
    if not isinstance(e.get("name"), str):
        problems.append(f"{where} ({ph}): name must be a string")
    scan.used_pids.add(e["pid"])
    if ph == "C":
        args = e.get("args")
        if not isinstance(args, Mapping) or not args:
            problems.append(f"{where}: counter {shown(e.get('name'))} needs non-empty args")
        elif not all(_num(v) for v in args.values()):
            problems.append(f"{where}: counter {shown(e.get('name'))} has non-numeric values {shown(dict(args))}")
        scan.counters.add(e["name"] if isinstance(e.get("name"), str) else shown(e.get("name")))
        return
    if "tid" not in e:
        problems.append(f"{where} ({ph}): missing tid")
        return
    key = (e["pid"], e["tid"])
    if ph == "X":
        if not _num(e.get("dur")) or e["dur"] < 0:
            problems.append(f"{where}: complete event {shown(e.get('name'))} needs dur >= 0, got "
                            f"{shown(e.get('dur'))}")
            return
        scan.slices.setdefault(key, []).append((float(e["ts"]), float(e["ts"] + e["dur"]), n))
        scan.used_threads.add(key)
    elif ph in ("s", "t", "f"):
        if "id" not in e:
            problems.append(f"{where}: flow event needs an id")
            return
        if not _id(e["id"], str_ok=True):
            problems.append(f"{where}: flow id must be an integer or a string, got {shown(e['id'])}")
            return
        rec = scan.flows.setdefault(e["id"], {})
        if ph in rec:
            problems.append(f"{where}: flow id {shown(e['id'])} has two '{ph}' events")
        rec[ph] = (key, float(e["ts"]), e.get("bp"))


def _scan_metadata(scan: _TraceScan, where: str, e: Mapping, problems: list[str]) -> None:
    """A metadata ('M') event: process and thread names, sort indices."""
    name, args = e.get("name"), e.get("args")
    if not isinstance(name, str) or name not in _META:
        problems.append(f"{where}: unknown metadata {shown(name)}")
    elif not isinstance(args, Mapping):
        problems.append(f"{where}: metadata {name} needs args")
    elif name.endswith("_name"):
        if not isinstance(args.get("name"), str):
            problems.append(f"{where}: {name} needs args.name (a string)")
        elif name == "process_name":
            scan.pnames[e["pid"]] = args["name"]
        else:
            scan.tnames[(e["pid"], e.get("tid"))] = args["name"]
    elif name.endswith("sort_index") and not _num(args.get("sort_index")):
        problems.append(f"{where}: {name} needs a numeric args.sort_index")


def _check_nesting(slices: dict, tol, problems: list[str]) -> int:
    """Complete events nest properly on every thread (no partial overlap); returns the deepest nesting."""
    max_depth = 0
    for key, items in slices.items():
        items.sort(key=lambda x: (x[0], -(x[1] - x[0])))
        stack: list[tuple[float, float, int]] = []
        for s, e, n in items:
            while stack and s >= stack[-1][1] - tol(stack[-1][1]):
                stack.pop()
            if stack and e > stack[-1][1] + tol(stack[-1][1]):
                problems.append(f"event {n} [{s}, {e}] partially overlaps event {stack[-1][2]} "
                                f"[{stack[-1][0]}, {stack[-1][1]}] on pid {key[0]} tid {key[1]}")
                continue
            stack.append((s, e, n))
            max_depth = max(max_depth, len(stack))
    return max_depth


def _check_flows(flows: dict, slices: dict, tol, problems: list[str]) -> int:
    """Every flow has one start and one end, in order, each inside a slice of its thread; returns the matched."""
    def bound(key, ts):
        return any(s - tol(s) <= ts <= e + tol(e) for s, e, _ in slices.get(key, ()))

    matched = 0
    for fid, rec in flows.items():
        if "s" not in rec or "f" not in rec:
            problems.append(f"flow id {shown(fid)} lacks its {'start' if 's' not in rec else 'end'}")
            continue
        (skey, sts, _), (fkey, fts, bp) = rec["s"], rec["f"]
        if fts < sts:
            problems.append(f"flow id {shown(fid)} ends ({fts}) before it starts ({sts})")
        if not (isinstance(bp, str) and bp == "e"):      # (an odd bp may be any JSON value)
            problems.append(f"flow id {shown(fid)}: the 'f' event should bind to its enclosing slice (bp='e')")
        if not bound(skey, sts):
            problems.append(f"flow id {shown(fid)} starts outside any slice of pid {skey[0]} tid {skey[1]}")
        if not bound(fkey, fts):
            problems.append(f"flow id {shown(fid)} ends outside any slice of pid {fkey[0]} tid {fkey[1]}")
        matched += 1
    return matched


