"""jax.profiler's traces mapped onto scwork's host / SparseCore / ICI / TensorCore lanes.

``jax.profiler.trace(logdir, create_perfetto_trace=True)`` writes, under
``logdir/plugins/profile/<run>/``, one ``<host>.xplane.pb`` (the XSpace protobuf the
[xprof] tools read), one ``<host>.trace.json.gz`` (the same events as a Chrome trace)
and a ``perfetto_trace.json.gz``. :func:`read_jax_profile` reads any of them (or the
``logdir`` / run folder itself) into a :class:`~scwork.pipeline.MeasuredTrace`, ready
for :func:`~scwork.pipeline.compare` and :func:`overlay`.

How events become lanes (:data:`DEFAULT_LANE_PATTERNS`)
    Each event's ``"<process name> | <thread name>"`` label and its own name are
    matched against ``(lane, thread regex, event regex)`` rules, first match wins;
    the thread regex may name groups ``chip`` and ``unit`` (default 0). The rules
    follow XProf's naming of TPU profiles (planes ``/device:TPU:<n>`` for the
    TensorCore and ``/device:TPU:<n> SparseCore <k>``; lines ``XLA Ops``,
    ``Async XLA Ops``, ``Sparse Core Ops``, ``Steps``, ``XLA Modules``...; the names are
    those of XLA's ``xplane_schema``), with collectives on a TensorCore's op lines
    (:data:`COLLECTIVE_OPS`) going to the ICI lane. On the XLA CPU client (jax
    without an accelerator) the ``tf_XLAExecute/...`` threads run the compiled ops
    (thunks): they are the ``tc`` lane, and the Python thread is the ``host`` lane.
    Threads no rule matches (the compiler's ``tf_xla-cpu-codegen``, ``XLA Modules``,
    ``Framework Ops``...) are listed in ``unknown_threads``; events of a matched
    thread that no rule's event regex takes (executor bookkeeping such as
    ``end: dot``, waits, Python-tracer frames ``$file.py:12 f``) are counted in
    ``unmapped``.

How events become phases (:data:`JAX_PHASE_PATTERNS`)
    As :func:`~scwork.pipeline.read_trace`: ``(phase, regex)`` on
    ``"<lane>:<qualified name>"``, where the qualified name is
    ``"<hlo_module>/<name>"`` when the event carries its XLA module (the CPU
    client's thunks do: ``jit_backward/dot``) followed by ``" [<tf_op>]"`` when it
    carries its framework op (XProf's TPU ops do; jax names gradient ops
    ``transpose(jvp(...))``). Backward phases are recognised by ``grad``,
    ``backward``, ``bwd`` or ``transpose(`` in that text; name your jitted
    functions accordingly, or pass your own patterns.

How steps are found
    ``steps="auto"``: an XProf ``Steps`` line of a device when the profile has one,
    otherwise the host's ``jax.profiler.StepTraceAnnotation`` regions (events with a
    ``step_num`` argument, optionally filtered by ``step_name``). The markers are
    taken off their thread, so they neither count as host time nor hide the events
    they enclose.

Reading ``.xplane.pb`` needs XProf's converter (``pip install xprof``; tested with
xprof 2.24.2, which needs no TensorFlow); without it a :class:`~scwork.errors.TraceError`
says so. The JSON files need nothing beyond scwork.

Showing the overlay in :class:`scwork.widgets.PipelineTimeline`
    :func:`overlay` returns one row per phase (and ``"step"``), largest divergence
    first. A view can draw, on each phase's lane (coordinate ``lane``), the
    measured bar beside the modelled one, colour the pair by ``log_ratio`` with a
    diverging palette centred on 0 (blue: faster than modelled, red: slower), hatch
    the rows whose ``observed`` is False (the profile has no event for that phase,
    e.g. SparseCore phases in a CPU profile), and list the rows in dataset order as
    the "where the model is most wrong" table. The widget itself is not changed here.

Examples
--------
>>> import scwork
>>> from scwork.interop.profile import read_jax_profile, overlay
>>> from scwork.pipeline import step_model, expected_stats
>>> trace = {"traceEvents": [
...     {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:TPU:0"}},
...     {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "Steps"}},
...     {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "XLA Ops"}},
...     {"ph": "X", "pid": 1, "tid": 1, "name": "0", "ts": 0, "dur": 100},
...     {"ph": "X", "pid": 1, "tid": 2, "name": "fusion.1", "ts": 0, "dur": 60},
...     {"ph": "X", "pid": 1, "tid": 2, "name": "all-reduce.2", "ts": 60, "dur": 30}]}
>>> measured = read_jax_profile(trace)
>>> sorted(set(measured.phase))
['ici_forward', 'tc_forward']
>>> topo = scwork.Topology.for_chip("v5p", num_chips=1)
>>> m = step_model(expected_stats({"t": 8.0}, topo, batch_size=256), widths={"t": 32},
...                topology=topo, tc_forward_s=5e-5)
>>> ds = overlay(m, measured)
>>> round(float(ds["ratio"].sel(phase="tc_forward")), 6)     # 60 us measured, 50 us modelled
1.2
>>> str(ds["phase"].values[0]), bool(ds["observed"][0])     # modelled, but absent from the trace
('host', False)
"""

from __future__ import annotations

import gzip
import itertools
import os
import json
import math
import re
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from scwork.errors import ConfigError, TraceError
from scwork.pipeline.phases import PHASE_RESOURCE, PHASES, RESOURCE_KINDS
from scwork.pipeline.trace import MeasuredTrace, _unit_number, compare, read_trace

__all__ = [
    "read_jax_profile",
    "find_profile",
    "overlay",
    "DEFAULT_LANE_PATTERNS",
    "JAX_PHASE_PATTERNS",
    "COLLECTIVE_OPS",
    "DEVICE_STEP_THREAD",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_EVENTS",
]

#: XLA collective op names (``all-reduce.3``, ``all-gather-start.1``, ``send-done``...):
#: on a TensorCore's op lines they are the ICI lane.
COLLECTIVE_OPS = (r"^(?:%?)(?:all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|"
                  r"collective-permute|collective-broadcast|send|recv)(?:-start|-done)?(?:[.\s]|$)")

# A TPU TensorCore plane "/device:TPU:0" (a suffix such as " (pid 3)" is allowed), not its SparseCores.
_TPU_CORE = r"^(?:/device:)?TPU:(?P<chip>\d+)(?!\d| SparseCore)[^|]*\|\s*"
# Thunk-executor bookkeeping on the CPU client: markers around each op, not work.
_CPU_BOOKKEEPING = r"^(?!end: |ThreadpoolListener::|ThunkExecutor::|TaskDispatcher::)"
# Host time is work, not waiting for the device; Python-tracer frames ("$file.py:12 f")
# are left out because one frame enclosing a whole loop would hide every event inside.
_HOST_WORK = r"^(?!\$)(?!.*(?:block_until_ready|Await\b|Wait for |BlockHostUntilReady))"

#: ``(lane, thread regex, event regex)``: the thread regex is searched in
#: ``"<process name> | <thread name>"`` (named groups ``chip``, ``unit``), the event
#: regex in the event's own name; first rule matching both wins.
DEFAULT_LANE_PATTERNS: tuple[tuple[str, str, str], ...] = (
    # TPU profiles (XProf naming)
    ("sc", r"^(?:/device:)?TPU:(?P<chip>\d+) SparseCore (?P<unit>\d+)\b[^|]*\|\s*(?:Sparse Core Ops|XLA Ops)\s*$", ""),
    ("ici", _TPU_CORE + r"(?:Async )?XLA Ops\s*$", COLLECTIVE_OPS),
    ("tc", _TPU_CORE + r"(?:Async )?XLA Ops\s*$", ""),
    # the XLA CPU client (jax on CPU): thunks on the executor threads
    ("ici", r"^/host:CPU\b[^|]*\|\s*tf_XLA(?:Execute|Eigen)\b", COLLECTIVE_OPS),
    ("tc", r"^/host:CPU\b[^|]*\|\s*tf_XLA(?:Execute|Eigen)\b", _CPU_BOOKKEEPING),
    # the Python main thread (dispatch, TraceAnnotation regions, host preprocessing)
    ("host", r"^/host:CPU\b[^|]*\|\s*(?:python[\d.]*|MainThread)\s*$", _HOST_WORK),
)

#: Phases from ``"<lane>:<qualified name>"`` (see the module notes); first match wins.
JAX_PHASE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("sc_backward", r"^sc:.*(?i:grad|backward|bwd|update|optimizer|apply|transpose\()"),
    ("sc_forward", r"^sc:"),
    ("ici_backward", r"^ici:.*(?i:grad|backward|bwd|transpose\()"),
    ("ici_forward", r"^ici:"),
    ("tc_backward", r"^tc:.*(?i:grad|backward|bwd|transpose\()"),
    ("tc_forward", r"^tc:"),
    ("host", r"^host:"),
)

#: A device's step line in XProf's naming (``/device:TPU:0 | Steps``; not ``Sparse Core Steps``).
DEVICE_STEP_THREAD = r"\|\s*Steps\s*$"

#: Largest file read, and largest decompressed / converted JSON text, in bytes.
DEFAULT_MAX_BYTES = 512 * 2**20
#: Largest number of trace events read.
DEFAULT_MAX_EVENTS = 5_000_000

_STEPS_PROCESS = "scwork:steps"


# --------------------------------------------------------------------------------------
# finding and loading the file
# --------------------------------------------------------------------------------------
def find_profile(path) -> Path:
    """The trace file of a jax.profiler logdir, run folder, or the file itself.

    In a ``logdir`` the newest run under ``plugins/profile/`` is used. In a run folder
    the choice is: the one ``*.trace.json.gz``, else ``perfetto_trace.json.gz``, else
    the one ``*.xplane.pb``.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    Path

    Raises
    ------
    TraceError
        Nothing there, no profile in the folder, or several hosts' traces in one run
        (then the message lists them: pass one).
    """
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise TraceError(f"path must be a file or folder path (str or os.PathLike), got {type(path).__name__}")
    path = Path(path)
    try:
        exists = path.exists()
    except OSError as error:          # a name too long for the file system, ...
        raise TraceError(f"cannot look at {str(path)[:200]!r}: {error.strerror or error}") from None
    if not exists:
        raise TraceError(f"no profile at {str(path)[:200]!r}: give a jax.profiler logdir, a run folder "
                         f"(logdir/plugins/profile/<run>) or a .trace.json.gz / .xplane.pb file")
    if path.is_file():
        return path
    runs_root = path / "plugins" / "profile"
    if runs_root.is_dir():
        runs = sorted((p for p in runs_root.iterdir() if p.is_dir()), key=lambda p: (p.stat().st_mtime, p.name))
        if not runs:
            raise TraceError(f"{str(runs_root)!r} holds no profile run: did jax.profiler.trace({str(path)!r}) "
                             f"finish (leave its with-block) before reading?")
        path = runs[-1]
    for pattern in ("*.trace.json.gz", "perfetto_trace.json.gz", "*.xplane.pb"):
        found = sorted(p for p in path.glob(pattern) if p.is_file())
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise TraceError(f"{str(path)!r} holds one profile per host ({names}): pass the file of the host to read")
    raise TraceError(f"{str(path)!r} holds no *.trace.json.gz, perfetto_trace.json.gz or *.xplane.pb: "
                     f"record with jax.profiler.trace(logdir, create_perfetto_trace=True)")


def _check_size(path: Path, max_bytes: int) -> None:
    size = path.stat().st_size
    if size > max_bytes:
        raise TraceError(f"{str(path)!r} is {size} bytes, more than max_bytes={max_bytes}: "
                         f"record a shorter window or raise max_bytes")


def _parse_json(text, where: str, max_bytes: int):
    if len(text) > max_bytes:
        raise TraceError(f"{where} holds more than max_bytes={max_bytes} bytes of JSON: "
                         f"record a shorter window or raise max_bytes")
    try:
        return json.loads(text)
    except ValueError as err:  # bad JSON or bad UTF-8
        raise TraceError(f"cannot read {where} as a JSON trace: {type(err).__name__}: {err}") from None
    except RecursionError:
        raise TraceError(f"cannot read {where}: the JSON is nested too deeply to be a trace") from None


def _load_json_file(path: Path, max_bytes: int):
    _check_size(path, max_bytes)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                data = fh.read(max_bytes + 1)  # bounded: a small file can inflate enormously
        else:
            data = path.read_bytes()
    except (OSError, EOFError, zlib.error) as err:  # truncated or corrupt gzip, unreadable file
        raise TraceError(f"cannot read {str(path)!r}: {type(err).__name__}: {err}") from None
    return _parse_json(data, repr(str(path)), max_bytes)


def _load_xplane(path: Path, max_bytes: int):
    _check_size(path, max_bytes)
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError as err:
        raise TraceError(
            f"reading {str(path)!r} (an XSpace protobuf) needs XProf's converter, which is not installed "
            f"({err}): pip install xprof (or 'scwork[interop]'); or read the *.trace.json.gz that "
            f"jax.profiler.trace(logdir, create_perfetto_trace=True) writes beside it") from None
    try:
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(path)], "trace_viewer", {"use_saved_result": False})
    except Exception as err:  # noqa: BLE001 - whatever fails inside the converter, the input is bad
        raise TraceError(f"XProf could not convert {str(path)!r}: {type(err).__name__}: {err}") from None
    if not data:
        raise TraceError(f"XProf could not convert {str(path)!r} (its log on stderr says why): the file is "
                         f"not an XSpace protobuf, or is truncated or unreadable")
    return _parse_json(data, f"XProf's trace of {str(path)!r}", max_bytes)


def _events_of(source, max_bytes: int, max_events: int) -> list:
    if isinstance(source, (str, Path)):
        path = find_profile(source)
        name = path.name
        if name.endswith(".xplane.pb"):
            source = _load_xplane(path, max_bytes)
        elif name.endswith((".json", ".json.gz")):
            source = _load_json_file(path, max_bytes)
        else:
            raise TraceError(f"{str(path)!r} is neither a .trace.json(.gz) nor an .xplane.pb file")
    if isinstance(source, Mapping):
        events = source.get("traceEvents")
        if not isinstance(events, list):
            raise TraceError("a JSON object trace needs a 'traceEvents' list")
    elif isinstance(source, list):
        events = source
    else:
        raise TraceError(f"a profile is a path, a dict with 'traceEvents' or a list, got {type(source).__name__}")
    if len(events) > max_events:
        raise TraceError(f"the trace has {len(events)} events, more than max_events={max_events}: "
                         f"record a shorter window or raise max_events")
    return events


# --------------------------------------------------------------------------------------
# mapping
# --------------------------------------------------------------------------------------
def _compile_lanes(patterns):
    rules = []
    if isinstance(patterns, (str, bytes)) or not hasattr(patterns, "__iter__"):
        raise ConfigError(f"patterns must be a sequence of (lane, thread regex, event regex), got {patterns!r}")
    for item in patterns:
        try:
            lane, thread_rx, event_rx = item
            rule = (str(lane), re.compile(thread_rx), re.compile(event_rx))
        except (TypeError, ValueError, re.error) as err:
            raise ConfigError(f"bad lane pattern {item!r}: {err}; give (lane, thread regex, event regex) "
                              f"triples") from None
        if rule[0] not in RESOURCE_KINDS:
            raise ConfigError(f"lane pattern {item!r} names unknown lane {lane!r}; lanes are {list(RESOURCE_KINDS)}")
        rules.append(rule)
    return rules


def _qualified(name: str, args) -> str:
    if not isinstance(args, Mapping):
        return name
    module, op = args.get("hlo_module"), args.get("tf_op")
    if isinstance(module, str) and module and not name.startswith(module + "/"):
        name = f"{module}/{name}"
    if isinstance(op, str) and op and op not in name:
        name = f"{name} [{op}]"
    return name


def _spans(events):
    """Per (pid, tid): (start, end, name, args) of complete events (X, and B/E pairs), in trace units."""
    pnames, tnames, spans, open_b, problems = {}, {}, {}, {}, []
    for n, e in enumerate(events):
        if not isinstance(e, Mapping):
            continue
        ph = e.get("ph")
        key = (e.get("pid"), e.get("tid"))
        # A ph that is not text (an array, a number) is skipped like any unknown phase ('in' on an
        # array would compare elementwise).
        if not isinstance(ph, str) or ph not in ("M", "X", "B", "E"):
            continue
        if not all(k is None or (isinstance(k, (int, str)) and not isinstance(k, bool)) for k in key):
            if ph != "M":
                problems.append(f"event {n}: pid/tid {key[0]!r}/{key[1]!r} must be integers or strings")
            continue
        if ph == "M":
            args = e.get("args")
            if isinstance(args, Mapping) and isinstance(e.get("name"), str) and e.get("name") == "process_name":
                pnames[key[0]] = str(args.get("name", ""))
            elif isinstance(args, Mapping) and isinstance(e.get("name"), str) and e.get("name") == "thread_name":
                tnames[key] = str(args.get("name", ""))
            continue
        ts = e.get("ts")
        if not _number(ts):
            problems.append(f"event {n}: ts {ts!r} is not a finite number")
            continue
        if ph == "X":
            dur = e.get("dur", 0)
            if not _number(dur) or dur < 0:
                problems.append(f"event {n}: dur {dur!r} is not a number >= 0")
                continue
            spans.setdefault(key, []).append((ts, ts + dur, str(e.get("name", "")), e.get("args")))
        elif ph == "B":
            open_b.setdefault(key, []).append((ts, str(e.get("name", "")), e.get("args")))
        else:
            stack = open_b.get(key)
            if not stack or ts < stack[-1][0]:
                problems.append(f"event {n}: 'E' without a matching earlier 'B' on pid {key[0]} tid {key[1]}")
                continue
            t0, name, args = stack.pop()
            spans.setdefault(key, []).append((t0, ts, name, args))
    for key, stack in open_b.items():
        if stack:
            problems.append(f"{len(stack)} 'B' event(s) without 'E' on pid {key[0]} tid {key[1]}")
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise TraceError(shown)
    return pnames, tnames, spans


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _step_markers(spans, label, steps, step_name, step_thread):
    """The step markers (start, end) and the (thread key, span index) they were taken from."""
    device = sorted((k for k in spans if step_thread.search(label(k))), key=lambda k: (label(k), str(k)))
    if steps in ("auto", "device") and device:
        key = device[0]
        return [(s, e) for s, e, _, _ in spans[key]], {(key, i) for i in range(len(spans[key]))}, set(device)
    if steps == "device":
        raise TraceError(f"steps='device' but no thread matches {step_thread.pattern!r} (an XProf 'Steps' line): "
                         f"use steps='host' (StepTraceAnnotation) or steps=None with num_steps=")
    markers, taken = [], set()
    if steps in ("auto", "host"):
        for key, items in spans.items():
            for i, (s, e, name, args) in enumerate(items):
                if isinstance(args, Mapping) and "step_num" in args and (step_name is None or step_name.search(name)):
                    markers.append((s, e))
                    taken.add((key, i))
    return markers, taken, set(device)


def read_jax_profile(source, *, patterns=DEFAULT_LANE_PATTERNS, phase_patterns=JAX_PHASE_PATTERNS,
                     steps: str | None = "auto", step_name: str | None = None,
                     step_thread: str = DEVICE_STEP_THREAD, num_steps: int | None = None,
                     top_level_only: bool = True, qualify_names: bool = True,
                     max_bytes: int = DEFAULT_MAX_BYTES, max_events: int = DEFAULT_MAX_EVENTS) -> MeasuredTrace:
    """Read a jax.profiler profile and map its events to scwork's lanes, phases and steps.

    Parameters
    ----------
    source : str, Path, dict or list
        A jax.profiler ``logdir`` or run folder (see :func:`find_profile`), a
        ``.trace.json.gz`` / ``perfetto_trace.json.gz`` / ``.json`` file, an
        ``.xplane.pb`` (needs ``pip install xprof``), or the parsed trace.
    patterns : sequence of (lane, thread regex, event regex)
        See :data:`DEFAULT_LANE_PATTERNS`; lanes are ``host``, ``sc``, ``ici``, ``tc``.
    phase_patterns : sequence of (phase, regex)
        See :data:`JAX_PHASE_PATTERNS`; matched against ``"<lane>:<qualified name>"``.
    steps : {"auto", "device", "host"} or None
        Where step markers come from (see the module notes); None: none, pass
        ``num_steps``.
    step_name : str, optional
        Regex: only host annotations whose name it finds are steps (e.g. ``"^train"``).
    step_thread : str
        Regex for a device's step line label.
    num_steps : int, optional
        Steps in the profile when it has no markers (required then).
    top_level_only : bool, default True
        As :func:`~scwork.pipeline.read_trace`: events nested in another mapped event
        of their thread are not counted again.
    qualify_names : bool, default True
        Name events ``"<hlo_module>/<name> [<tf_op>]"`` when they carry those
        arguments (what the phase patterns see and ``MeasuredTrace.name`` holds).
    max_bytes, max_events : int
        Bounds on the file, its decompressed or converted JSON, and its events.

    Returns
    -------
    MeasuredTrace
        ``unmapped`` also counts the events of matched threads that no lane rule
        takes; ``unknown_threads`` lists the threads no lane rule matches.

    Raises
    ------
    TraceError
        No profile there, unreadable or oversized file, no ``traceEvents``, bad
        events, overlapping step markers, no markers and no ``num_steps``,
        ``.xplane.pb`` without xprof installed.
    ConfigError
        Bad patterns or lane / phase names, bad ``steps`` / ``num_steps`` / bounds.
    """
    _check_steps_and_bounds(steps, max_bytes, max_events)
    rules = _compile_lanes(patterns)
    step_rx, thread_rx = _step_regexes(step_name, step_thread)
    events = _events_of(source, max_bytes, max_events)
    pnames, tnames, spans = _spans(events)

    def label(key):
        return f"{pnames.get(key[0], '')} | {tnames.get(key, '')}"

    markers, taken, step_threads = _step_markers(spans, label, steps, step_rx, thread_rx)
    markers.sort()
    _check_markers_disjoint(markers)
    lanes, used, out, unmapped, unknown = _lane_events(spans, label, rules, taken, step_threads, qualify_names)
    resource_patterns = tuple((lane, rf"^scwork:{lane} chip (?P<chip>\d+) unit (?P<unit>\d+) \|")
                              for lane in RESOURCE_KINDS)
    measured = read_trace({"traceEvents": _normalised_events(lanes, used, out, markers)},
                          resource_patterns=resource_patterns, phase_patterns=phase_patterns,
                          step_pattern=rf"^{_STEPS_PROCESS} \| Steps$" if markers else None,
                          num_steps=None if markers else num_steps, top_level_only=top_level_only, time_unit="us")
    for name, count in unmapped.items():
        measured.unmapped[name] = measured.unmapped.get(name, 0) + count
    measured.unknown_threads = sorted(unknown)
    return measured


def _check_steps_and_bounds(steps, max_bytes, max_events) -> None:
    """Refuse a ``steps`` other than "auto", "device", "host" or None, and bounds that are no integer >= 1."""
    if steps is not None and (not isinstance(steps, str) or steps not in ("auto", "device", "host")):
        raise ConfigError(f"steps must be 'auto', 'device', 'host' or None, got {steps!r}")
    for what, value in (("max_bytes", max_bytes), ("max_events", max_events)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{what} must be an integer >= 1, got {value!r}")


def _step_regexes(step_name: str | None, step_thread: str):
    """``(step_name, step_thread)`` compiled (the first None when not given)."""
    try:
        step_rx = re.compile(step_name) if step_name is not None else None
        thread_rx = re.compile(step_thread)
    except (re.error, TypeError) as err:
        raise ConfigError(f"step_name {step_name!r} / step_thread {step_thread!r} is not a regular expression: "
                          f"{err}") from None
    return step_rx, thread_rx


def _check_markers_disjoint(markers: list) -> None:
    """Refuse sorted step markers that overlap."""
    for (s0, e0), (s1, e1) in itertools.pairwise(markers):
        if s1 < e0:
            raise TraceError(f"step markers overlap: [{s0}, {e0}] and [{s1}, {e1}] (trace units): give step_name= "
                             f"to pick one kind of annotation, or steps='device' / 'host'")


def _lane_events(spans: dict, label, rules, taken: set, step_threads: set, qualify_names: bool):
    """The events of lane threads renumbered to one pid per (lane, chip, unit).

    Returns ``(lanes, used (pid, tid) pairs, events, unmapped names -> count, unknown thread labels)``.
    """
    lanes: dict[tuple, int] = {}  # (lane, chip, unit) -> pid of the normalised trace
    threads: dict[tuple, int] = {}  # original (pid, tid) -> tid of the normalised trace
    out: list[dict] = []
    unmapped: dict[str, int] = {}
    unknown: set[str] = set()
    used: set[tuple[int, int]] = set()
    for key, items in spans.items():
        if key in step_threads:
            continue
        lab = label(key)
        thread_rules = [(lane, m, erx) for lane, trx, erx in rules if (m := trx.search(lab))]
        if not thread_rules:
            if any((key, i) not in taken for i in range(len(items))):
                unknown.add(lab)
            continue
        for i, (s, e, name, args) in enumerate(items):
            if (key, i) in taken:
                continue
            hit = next(((lane, m) for lane, m, erx in thread_rules if erx.search(name)), None)
            if hit is None:
                unmapped[name] = unmapped.get(name, 0) + 1
                continue
            lane, m = hit
            groups = m.groupdict()
            lane_key = (lane, _unit_number(groups.get("chip"), lab), _unit_number(groups.get("unit"), lab))
            pid = lanes.setdefault(lane_key, len(lanes) + 1)
            tid = threads.setdefault(key, len(threads) + 1)
            used.add((pid, tid))
            out.append({"ph": "X", "pid": pid, "tid": tid, "ts": s, "dur": e - s,
                        "name": _qualified(name, args) if qualify_names else name})
    return lanes, used, out, unmapped, unknown


def _normalised_events(lanes: dict, used: set, out: list, markers: list) -> list:
    """Name records of the lanes and threads, the events, and the step markers on a "Steps" line."""
    meta = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"scwork:{lane} chip {chip} unit {unit}"}}
            for (lane, chip, unit), pid in lanes.items()]
    meta += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": f"thread {tid}"}}
             for pid, tid in sorted(used)]
    if markers:
        meta += [{"ph": "M", "pid": 0, "name": "process_name", "args": {"name": _STEPS_PROCESS}},
                 {"ph": "M", "pid": 0, "tid": 0, "name": "thread_name", "args": {"name": "Steps"}}]
        out += [{"ph": "X", "pid": 0, "tid": 0, "ts": s, "dur": e - s, "name": str(i)}
                for i, (s, e) in enumerate(markers)]
    return meta + out


# --------------------------------------------------------------------------------------
# overlay
# --------------------------------------------------------------------------------------
def overlay(model, measured, *, schedule: str | None = None, **read_kwargs):
    """Modelled vs measured time per phase, largest divergence first.

    Parameters
    ----------
    model : StepModel
    measured : MeasuredTrace, or anything :func:`read_jax_profile` accepts
    schedule : {"pipelined", "sequential"}, optional
        As :func:`~scwork.pipeline.compare`.
    **read_kwargs
        Passed to :func:`read_jax_profile` when ``measured`` is not read yet.

    Returns
    -------
    xarray.Dataset
        Dim ``phase`` (the seven phases and ``"step"``) sorted by ``divergence``
        descending (NaN last, ties in phase order); coordinate ``lane`` (host, sc,
        ici, tc, or step); ``modelled``, ``measured``, ``difference`` (s), ``ratio``
        = measured / modelled, ``log_ratio`` = ln(ratio) (0 when both are 0, +-inf
        when one is), ``divergence`` = ``abs(log_ratio)``, ``events`` (mapped events
        of the phase; step markers for ``"step"``) and ``observed`` (the profile has
        events for it). See the module notes for drawing it.

    Raises
    ------
    ConfigError
        ``model`` is not a StepModel, or a bad ``schedule``.
    TraceError
        As :func:`read_jax_profile`.
    """
    if not isinstance(measured, MeasuredTrace):
        measured = read_jax_profile(measured, **read_kwargs)
    elif read_kwargs:
        raise ConfigError(f"reading keywords {sorted(read_kwargs)} need a profile to read, not a MeasuredTrace")
    ds = compare(model, measured, schedule=schedule)
    modelled, meas = ds["modelled"].values, ds["measured"].values
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = np.log(meas) - np.log(modelled)
    log_ratio = np.where((modelled == 0) & (meas == 0), 0.0, log_ratio)
    divergence = np.abs(log_ratio)
    events = np.append([int((measured.phase == p).sum()) for p in PHASES], len(measured.steps))
    lane = np.array([PHASE_RESOURCE[p] for p in PHASES] + ["step"], dtype=object)
    # stable sort, largest first, NaN (no step markers) last
    order = sorted(range(len(divergence)), key=lambda i: (math.isnan(divergence[i]),
                                                          -divergence[i] if not math.isnan(divergence[i]) else 0.0, i))
    ds = ds.assign(
        log_ratio=("phase", log_ratio, {"long_name": "ln(measured / modelled)", "units": "1"}),
        divergence=("phase", divergence, {"long_name": "|ln(measured / modelled)|", "units": "1"}),
        events=("phase", events, {"long_name": "mapped events (step markers for 'step')", "units": "count"}),
        observed=("phase", events > 0, {"long_name": "the profile has events for this phase"}),
    ).assign_coords(lane=("phase", lane))
    ds = ds.isel(phase=order)
    ds.attrs["sorted_by"] = "divergence, largest first"
    return ds
