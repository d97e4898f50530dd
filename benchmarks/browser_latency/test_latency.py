"""Latency of every explorer control in the browser: from the change to the settled plot.

A benchmark, not a pass/fail test, so it lives here and not under tests/: pytest's
normal run never collects it. ``benchmarks/bench_browser_latency.py`` runs it and
prints the table (the browser fixtures are tests/browser's, see ``conftest.py`` beside
this file). Each explorer is built on its notebook's default data (not the small test
parameters).

How one control is measured (``SCWORK_LATENCY_REPEATS`` times, default 3):

1. The explorer is in its default state (the state after the notebook ran), or in one
   of :data:`EXTRA_STATES` for the controls the default state hides.
2. The control is found in the page by a CSS class the kernel gives it, and is
   measured only if it is visible there (explorers hide whole groups of controls, e.g.
   the NPU controls in XLA mode); a hidden or disabled control is reported as skipped.
3. The change is made as a person makes it (click, arrow key, menu choice, typing +
   Enter), with a short action timeout. The time is taken in the page: from the first
   input event the action fires until the kernel has handled every comm message (the
   harness's comm handler publishes busy/idle statuses with the number in flight: the
   kernel's own statuses cannot tell, see :data:`_JS_MONITOR`), every BokehJS view has
   finished and the last plot repaint is done, with nothing happening for
   :data:`QUIET_MS` of page frames (a change causes several round trips, e.g.
   BokehJS sending range changes back).
4. The kernel confirms that the control's change reached it (a value observer or a
   click handler counts) and that it finished handling before the page settled (both
   clocks are this machine's); otherwise the row is an error, not a time.
5. Every control is put back to its default value through the kernel (unmeasured),
   the page settles, and the next repeat makes the same change again.

Besides the total, each measurement records ``kernel`` (the kernel handling comm
messages, timed in the kernel), ``last_paint`` (input to the last BokehJS repaint),
``paint`` (BokehJS painting), ``long_tasks`` (page main-thread tasks over 50 ms),
``round_trips`` and the comm messages by kind. Diagnostics: ``SCWORK_LATENCY_DEBUG=1``
(statuses and kernel messages on one clock), ``SCWORK_LATENCY_JS_PROFILE=1`` (a CPU
profile of the page per change), ``SCWORK_LATENCY_TRACE=1`` (Chromium trace summary),
``SCWORK_LATENCY_PROFILE=dir`` (cProfile of the kernel's comm handling, raw page
profiles). The medians go to ``$SCWORK_LATENCY_OUT`` (JSON) with the load average.
``SCWORK_LATENCY_CONTROLS=shape[2],num_chips`` measures only the controls named (by
their row name, without the state; the others are reported as skipped), e.g. to
compare two versions of a few controls back to back.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.requires_widgets]

#: Where each explorer is measured: the notebook that shows it and the variable it is in.
NOTEBOOK_EXPLORERS = {
    "LayoutExplorer": ("01_layouts.ipynb", "explorer"),
    "LoadSkewExplorer": ("02_sharding_and_limits.ipynb", "explorer"),
    "MemoryTimeline": ("03_memory.ipynb", "explorer"),
    "AllReduceStepper": ("04_allreduce.ipynb", "stepper"),
    "PipelineTimeline": ("05_pipeline_and_advisor.ipynb", "explorer"),
}


def notebook_setup(notebook: str, variable: str) -> str:
    """One cell that builds ``variable`` exactly as ``notebook`` does, full size, and shows it as ``ex``.

    The kernel runs the notebook's own code cells (read from ``notebooks/`` when the cell
    runs, so the measurement follows the notebook as it is), from the first one up to
    the cell that builds the explorer and then every later cell that changes it (e.g.
    01's ``explorer.text = ...``), with the notebook's folder as working directory and
    without ``SCWORK_SMALL`` (the notebooks' default sizes, as a person runs them). The
    cells' own outputs are not shown (``silent``): the page holds only the explorer
    measured.
    """
    path = Path(__file__).resolve().parents[2] / "notebooks" / notebook
    return (
        "import os, re, nbformat\n"
        "from IPython import get_ipython\n"
        "os.environ.pop('SCWORK_SMALL', None)\n"
        f"os.chdir({str(path.parent)!r})\n"
        f"_cells = [c.source for c in nbformat.read({str(path)!r}, as_version=4).cells if c.cell_type == 'code']\n"
        f"_built = next(i for i, c in enumerate(_cells) if re.search(r'^{variable} = ', c, re.M))\n"
        f"_run = _cells[:_built + 1] + [c for c in _cells[_built + 1:] if re.search(r'(?<![\\w.]){variable}\\.', c)]\n"
        "for _source in _run:\n"
        "    _result = get_ipython().run_cell(_source, silent=True)\n"
        "    _result.raise_error()\n"
        f"ex = {variable}\n"
        "ex"
    )


#: Each explorer as its notebook builds it (full size, not SCWORK_SMALL): the notebook's
#: own cells, run in the kernel (see :func:`notebook_setup`).
SETUPS = {name: notebook_setup(*where) for name, where in NOTEBOOK_EXPLORERS.items()}
# Notebook 07 shows its PlanExplorer without a variable to build it from: its demo data.
SETUPS["PlanExplorer"] = "from scwork.widgets import PlanExplorer\nex = PlanExplorer.demo()\nex"

#: Free-text controls have no generic change: the text to type, per (explorer, control).
TEXT_CHANGES = {("LayoutExplorer", "text"): "bf16[8,256]{1,0:T(8,128)(2,1)}"}

#: States (set in the kernel, unmeasured) that show the controls the default state hides:
#: each control hidden by default is measured from the first of these where it is visible.
EXTRA_STATES = {
    "LayoutExplorer": {"NPU mode": "ex.mode = 'npu'"},
    "AllReduceStepper": {"3-D torus": "ex.kind = '3d_torus'"},
}

#: Controls not measured, with the reason (reported as skipped rows).
NOT_DRIVEN = {
    "Play": "an animation: it moves the step slider every interval (the slider itself is measured)",
}

#: Milliseconds for one action in the page (a control that cannot be driven costs this).
ACTION_TIMEOUT_MS = 10_000
#: Milliseconds from the change to the settled page before the measurement is an error.
SETTLE_TIMEOUT_MS = 30_000
#: Milliseconds after the input without any kernel activity: the change never left the page.
NO_MESSAGE_MS = 3_000
#: Milliseconds with the kernel idle, every view finished and no repaint: settled.
QUIET_MS = 250
#: A gap of more milliseconds between two polls (one per frame) means the page was busy.
BLOCKED_MS = 60

# JS: install (once per page) the monitor the measurements read: kernel status changes,
# the first input event after arming, and the time of every BokehJS plot repaint.
_JS_MONITOR = """
() => {
  if (window.__scworkMon) return true;
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const mon = window.__scworkMon = {
    kernel, busyEvents: 0, lastBusyAt: null, lastIdleAt: null, lastPaintAt: null, paints: 0, paintsAtArm: 0,
    armed: false, armAt: null, firstEventAt: null, busyAtArm: 0, sawUnfinished: false,
    finishedAt: null, quietSince: null, hooked: new WeakSet(), paintMs: 0, paintMsAtArm: 0,
    longTaskMs: 0, longTaskMsAtArm: 0,
  };
  // Main-thread tasks over 50 ms (BokehJS layout and paint, patch decoding, widget views).
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) mon.longTaskMs += entry.duration;
  }).observe({type: "longtask", buffered: false});
  // The kernel's own busy/idle statuses cannot tell when it is done with a change: comm
  // messages may be handled concurrently (another subshell's idle arrives while it still
  // works) and the page drops repeated statuses. The harness's comm handler publishes its
  // own, with the number of comm messages in flight: done is "in flight 0".
  mon.inFlight = 0;
  kernel.iopubMessage.connect((_, msg) => {
    if (msg.header.msg_type !== "status" || msg.content.scwork_in_flight === undefined) return;
    const now = performance.now(), status = msg.content.execution_state;
    (mon.statusLog ??= []).push([Math.round(performance.timeOrigin + now), status, msg.content.scwork_in_flight]);
    mon.inFlight = msg.content.scwork_in_flight;
    if (status === "busy") { mon.busyEvents += 1; mon.lastBusyAt = now; }
    if (status === "idle") mon.lastIdleAt = now;
  });
  for (const type of ["pointerdown", "mousedown", "keydown", "input", "change", "click"]) {
    window.addEventListener(type, () => {
      if (mon.armed && mon.firstEventAt === null) mon.firstEventAt = performance.now();
    }, {capture: true});
  }
  return true;
}
"""

# JS: arm a measurement (just before the action); returns the arming time.
_JS_ARM = """
() => {
  const mon = window.__scworkMon;
  mon.armed = true; mon.armAt = performance.now(); mon.firstEventAt = null; mon.statusLog = [];
  mon.busyAtArm = mon.busyEvents; mon.paintsAtArm = mon.paints; mon.paintMsAtArm = mon.paintMs;
  mon.longTaskMsAtArm = mon.longTaskMs; mon.sawUnfinished = false; mon.finishedAt = null; mon.quietSince = null;
  mon.lastPollAt = null;
  return mon.armAt;
}
"""

# JS (polled every frame): null while the change is not settled; then its times, or an error.
_JS_SETTLED = """
(args) => {
  const mon = window.__scworkMon, now = performance.now();
  // Hook the repaint signal of every plot view not hooked yet (views come and go).
  let finished = false;
  if (typeof Bokeh !== "undefined") {
    for (const view of Bokeh.index.query((v) => v.repainted != null)) {
      if (!mon.hooked.has(view)) {
        mon.hooked.add(view); mon.hookedCount = (mon.hookedCount ?? 0) + 1;
        view.repainted.connect(() => { mon.lastPaintAt = performance.now(); mon.paints += 1; });
        const paint = view._actual_paint;
        view._actual_paint = function (...args) {
          const t0 = performance.now();
          try { return paint.apply(this, args); } finally { mon.paintMs += performance.now() - t0; }
        };
      }
    }
    finished = [...Bokeh.index].filter((v) => v.el?.isConnected).every((v) => v.has_finished());
  }
  const start = mon.firstEventAt ?? mon.armAt;
  if (args.needBusy && mon.busyEvents === mon.busyAtArm) {
    if (now - start > args.noMessageMs) {
      mon.armed = false;
      return {error: `no kernel message within ${args.noMessageMs} ms of the input`
                     + (mon.firstEventAt === null ? " (the page saw no input event)" : "")};
    }
    return null;
  }
  if (!finished) mon.sawUnfinished = true;
  if (mon.inFlight !== 0 || mon.kernel.status !== "idle" || !finished) {
    mon.quietSince = null; mon.lastPollAt = now; return null;
  }
  if (mon.sawUnfinished && mon.finishedAt === null) mon.finishedAt = now;
  // Quiet as seen by these polls: while the page's main thread is blocked (applying a
  // patch) no poll runs, and the paint it causes comes after. So the quiet period starts
  // at the first poll after the last event, not at the event.
  // A gap between polls means the main thread was busy (e.g. applying a patch): not quiet.
  const last = Math.max(mon.lastIdleAt ?? 0, mon.lastBusyAt ?? 0, mon.lastPaintAt ?? 0, mon.finishedAt ?? 0);
  const blocked = mon.lastPollAt != null && now - mon.lastPollAt > args.blockedMs;
  mon.lastPollAt = now;
  if (mon.quietSince === null || last > mon.quietSince || blocked) { mon.quietSince = now; return null; }
  if (now - mon.quietSince < args.quietMs) return null;
  mon.armed = false;
  const idle = mon.lastIdleAt ?? start;
  const end = Math.max(idle, mon.lastPaintAt > start ? mon.lastPaintAt : 0, mon.finishedAt ?? 0);
  return {start, sawEvent: mon.firstEventAt !== null, toIdle: idle - start, total: end - start,
          render: end - idle, roundTrips: mon.busyEvents - mon.busyAtArm, paints: mon.paints - mon.paintsAtArm,
          lastPaint: mon.lastPaintAt === null || mon.lastPaintAt < start ? null : mon.lastPaintAt - start,
          hooked: mon.hookedCount, paintMs: mon.paintMs - mon.paintMsAtArm,
          longTaskMs: mon.longTaskMs - mon.longTaskMsAtArm,
          epochStart: Math.round(performance.timeOrigin + start), statusLog: mon.statusLog};
}
"""

# Python, in the kernel: the controls (lists flattened), their CSS classes and change
# counters, the timing of comm messages, the default state and how to restore it.
_KERNEL_HELPERS = """
import time as _lat_time
import ipywidgets as _lat_w

_LAT = {"handled_s": [], "changes": {}, "messages": {}}
_LAT_LOCK = __import__("threading").Lock()

def _lat_describe(msg):
    # What a comm message is: the widget class, the method and the state keys or event kinds.
    from ipywidgets.widgets.widget import _instances
    try:
        data = msg["content"]["data"]
        widget = _instances.get(msg["content"]["comm_id"])
        what = type(widget).__name__ if widget is not None else "?"
        method = data.get("method")
        if method == "update":
            detail = ",".join(sorted(data.get("state", {})))
        else:
            content = data.get("content", {})
            detail = str(content)[:80] if not isinstance(content, dict) else ",".join(sorted(content))[:80]
            if isinstance(content, dict) and content.get("event") == "jsevent":
                detail = f"jsevent {content.get('kind')} {content.get('attr') or content.get('msg_type') or ''}".strip()
            elif isinstance(content, dict) and "event" in content:
                detail = str(content.get("event"))[:80]
        return f"{what}.{method}({detail})"
    except Exception as err:
        return f"undescribed ({type(err).__name__})"

def _lat_controls(ex):
    out = {}
    for name, c in ex.controls.items():
        items = [(f"{name}[{i}]", item) for i, item in enumerate(c)] if isinstance(c, (list, tuple)) else [(name, c)]
        out.update({n: item for n, item in items if isinstance(item, _lat_w.Widget)})
    return out

def _lat_css(name):
    return "scwork-latency-" + "".join(ch if ch.isalnum() else "-" for ch in name)

def _lat_count(name):
    _LAT["changes"][name] = _LAT["changes"].get(name, 0) + 1

def _lat_install(ex):
    kernel = get_ipython().kernel
    handlers = kernel.shell_handlers
    original = handlers["comm_msg"]
    if not getattr(original, "_lat_timed", False):
        # ipykernel handles a comm message that arrives while it is still finishing the
        # previous one "concurrently" (without busy/idle statuses, or on another subshell's
        # thread): the page would see the kernel idle while it works. Every comm message
        # publishes busy, and the last one to finish of those in flight publishes idle.
        def publish(state, in_flight, msg):
            kernel.session.send(kernel.iopub_socket, "status",
                                {"execution_state": state, "scwork_in_flight": in_flight},
                                parent=msg, ident=kernel._topic("status"))

        def timed(stream, idents, msg):
            with _LAT_LOCK:
                _LAT["in_flight"] = in_flight = _LAT.get("in_flight", 0) + 1
            publish("busy", in_flight, msg)
            t0 = _lat_time.perf_counter()
            what = _lat_describe(msg)
            _LAT["messages"][what] = _LAT["messages"].get(what, 0) + 1
            entry = [round(_lat_time.time() * 1e3), None, what]
            _LAT.setdefault("log", []).append(entry)
            profile = _LAT.get("profile")
            if profile is not None:
                profile.enable()
            try:
                return original(stream, idents, msg)
            finally:
                if profile is not None:
                    profile.disable()
                _LAT["handled_s"].append(_lat_time.perf_counter() - t0)
                entry[1] = round(_lat_time.time() * 1e3)
                with _LAT_LOCK:
                    _LAT["in_flight"] = in_flight = _LAT["in_flight"] - 1
                publish("idle" if in_flight == 0 else "busy", in_flight, msg)
        timed._lat_timed = True
        handlers["comm_msg"] = timed
    for name, c in _lat_controls(ex).items():
        c.add_class(_lat_css(name))
        if isinstance(c, _lat_w.Button):
            c.on_click(lambda _b, n=name: _lat_count(n))
        else:
            c.observe(lambda _c, n=name: _lat_count(n), names="value")

def _lat_state(ex):
    state = {}
    for name, c in _lat_controls(ex).items():
        if isinstance(c, _lat_w.Button):
            continue
        state[name] = ("index", c.index) if hasattr(c, "_options_labels") else ("value", c.value)
    return state

def _lat_restore(ex, default):
    problems = []
    for _ in range(2):
        for name, (trait, value) in default.items():
            c = _lat_controls(ex).get(name)
            if c is None or getattr(c, trait) == value:
                continue
            try:
                setattr(c, trait, value)
            except Exception as err:
                problems.append(f"{name}: {type(err).__name__}: {err}")
    now = _lat_state(ex)
    problems += [f"{n} is {now.get(n)} after the restore, default {v}" for n, v in default.items() if now.get(n) != v]
    return problems

def _lat_plan(ex, text_changes):
    plan = []
    for name, c in _lat_controls(ex).items():
        kind = type(c).__name__
        entry = {"name": name, "kind": kind, "css": _lat_css(name)}
        if getattr(c, "disabled", False):
            entry["skip"] = "disabled"
        elif isinstance(c, (_lat_w.ToggleButtons, _lat_w.Dropdown)):
            n = len(c._options_labels)
            if n < 2:
                entry["skip"] = "only one option"
            else:
                entry["index"] = 0 if c.index is None else (c.index + 1) % n
        elif isinstance(c, (_lat_w.IntSlider, _lat_w.FloatSlider, _lat_w.SelectionSlider)):
            at_end = c.index == len(c.options) - 1 if isinstance(c, _lat_w.SelectionSlider) else c.value >= c.max
            entry["key"] = "ArrowLeft" if at_end else "ArrowRight"
        elif isinstance(c, (_lat_w.IntText, _lat_w.BoundedIntText)):
            up = c.value + 1
            entry["text"] = str(c.value - 1 if up > getattr(c, "max", up) else up)
        elif isinstance(c, (_lat_w.FloatText, _lat_w.BoundedFloatText)):
            # One step up (a tenth of the value when the widget has no step), down at the max.
            step = c.step or max(abs(c.value) * 0.1, 0.01)
            up = c.value + step
            entry["text"] = repr(round(c.value - step if up > getattr(c, "max", up) else up, 6))
        elif isinstance(c, _lat_w.Text):
            if name in text_changes:
                entry["text"] = text_changes[name]
            else:
                entry["skip"] = "free text: no change defined in TEXT_CHANGES"
        elif not isinstance(c, (_lat_w.Checkbox, _lat_w.ToggleButton, _lat_w.Button, _lat_w.Play)):
            entry["skip"] = f"no way to drive a {kind}"
        plan.append(entry)
    return plan

def _lat_profile_start():
    import cProfile
    _LAT["profile"] = cProfile.Profile()

def _lat_profile_dump(path):
    profile = _LAT.pop("profile", None)
    if profile is not None:
        profile.dump_stats(path)

def _lat_take(name):
    handled = sum(_LAT["handled_s"])
    changes = _LAT["changes"].get(name, 0)
    messages = dict(_LAT["messages"])
    log = _LAT.pop("log", [])
    _LAT["handled_s"].clear()
    _LAT["changes"].clear()
    _LAT["messages"].clear()
    return {"kernel_s": handled, "changes": changes, "messages": messages, "log": log}
"""


def _prepare(control, entry):
    """What to do before arming: focus a slider handle (the key press is the change)."""
    if entry["kind"] in ("IntSlider", "FloatSlider", "SelectionSlider"):
        handle = control.locator(".noUi-handle").first
        handle.focus(timeout=ACTION_TIMEOUT_MS)
        return handle
    return None


def _act(control, entry, prepared) -> None:
    kind, t = entry["kind"], ACTION_TIMEOUT_MS
    if kind == "ToggleButtons":
        control.locator("button").nth(entry["index"]).click(timeout=t)
    elif kind == "Dropdown":
        control.locator("select").select_option(index=entry["index"], timeout=t)
    elif prepared is not None:
        prepared.press(entry["key"], timeout=t)
    elif kind == "Checkbox":
        control.locator("input").click(timeout=t)
    elif kind in ("ToggleButton", "Button"):
        control.click(timeout=t)
    elif "text" in entry:
        box = control.locator("input").first
        box.fill(entry["text"], timeout=t)
        box.press("Enter", timeout=t)
    else:
        raise AssertionError(f"no action for {kind}")


def _settle(lab, need_busy: bool) -> dict:
    handle = lab.page.wait_for_function(
        _JS_SETTLED, arg={"needBusy": need_busy, "noMessageMs": NO_MESSAGE_MS, "quietMs": QUIET_MS,
                          "blockedMs": BLOCKED_MS},
        polling="raf", timeout=SETTLE_TIMEOUT_MS)
    return handle.json_value()


def _back_to_default(lab, name: str) -> list[str]:
    """Restore every control to the default state (unmeasured) and wait until the page settles."""
    lab.page.wait_for_function("() => window.__scworkMon.kernel.status === 'idle' && window.__scworkMon.inFlight === 0",
                               timeout=180_000)
    problems = lab.kernel_json("_lat_restore(ex, _LAT_DEFAULT)")
    lab.page.evaluate(_JS_ARM)
    _settle(lab, need_busy=False)
    lab.kernel(f"_lat_take({name!r})")  # after the settle: the restore's messages are not the next change's
    return problems


_TRACE_CATEGORIES = ["devtools.timeline", "disabled-by-default-devtools.timeline", "v8", "blink.user_timing"]
#: Renderer main-thread trace events summed by ``SCWORK_LATENCY_TRACE=1`` (milliseconds).
_TRACE_NAMES = ("RunTask", "FunctionCall", "EvaluateScript", "v8.callFunction", "TimerFire",
                "FireAnimationFrame", "EventDispatch", "UpdateLayoutTree", "Layout", "PrePaint", "Paint",
                "Layerize", "UpdateLayer", "ParseHTML", "MinorGC", "MajorGC", "V8.GC_SCAVENGER",
                "HitTest", "ScheduleStyleRecalculation", "InvalidateLayout", "Commit")


def _trace_summary(trace: dict) -> dict:
    """Milliseconds per kind of work on the page's main thread (a Chromium performance trace)."""
    events = trace.get("traceEvents", trace if isinstance(trace, list) else [])
    main = {(e["pid"], e["tid"]) for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"}
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for e in events:
        if e.get("ph") != "X" or (e.get("pid"), e.get("tid")) not in main or e.get("name") not in _TRACE_NAMES:
            continue
        sums[e["name"]] = sums.get(e["name"], 0.0) + e.get("dur", 0) / 1e3
        counts[e["name"]] = counts.get(e["name"], 0) + 1
    return {name: [round(ms, 1), counts[name]] for name, ms in sorted(sums.items(), key=lambda kv: -kv[1])}


def _js_profile_summary(profile: dict, top: int = 12) -> dict:
    """Self and inclusive milliseconds of the busiest page functions in a CDP CPU profile."""
    nodes = {node["id"]: node for node in profile["nodes"]}
    self_ms: dict[int, float] = {}
    for node_id, delta in zip(profile["samples"], profile["timeDeltas"]):
        self_ms[node_id] = self_ms.get(node_id, 0.0) + delta / 1e3

    def name(node):
        frame = node["callFrame"]
        where = frame["url"].rsplit("/", 1)[-1].split("?")[0]
        return f"{frame['functionName'] or '(anonymous)'} {where}:{frame['lineNumber'] + 1}" if where else \
            frame["functionName"] or "(native)"

    inclusive: dict[int, float] = {}

    def total(node_id):
        if node_id not in inclusive:
            inclusive[node_id] = self_ms.get(node_id, 0.0) + sum(total(c) for c in nodes[node_id].get("children", []))
        return inclusive[node_id]

    for node_id in nodes:
        total(node_id)
    by_self: dict[str, float] = {}
    by_total: dict[str, float] = {}
    for node_id, node in nodes.items():
        key = name(node)
        by_self[key] = by_self.get(key, 0.0) + self_ms.get(node_id, 0.0)
        by_total[key] = max(by_total.get(key, 0.0), inclusive[node_id])
    busy = sum(ms for node_id, ms in self_ms.items() if nodes[node_id]["callFrame"]["functionName"] != "(idle)")
    return {"busy_ms": round(busy, 1),
            "self_ms": dict(sorted(((k, round(v, 1)) for k, v in by_self.items()), key=lambda kv: -kv[1])[:top]),
            "total_ms": dict(sorted(((k, round(v, 1)) for k, v in by_total.items()), key=lambda kv: -kv[1])[:top])}


def _debug(times: dict, kernel: dict) -> dict:
    """With ``SCWORK_LATENCY_DEBUG=1``: the page's kernel statuses and the kernel's messages, in ms from the input."""
    if os.environ.get("SCWORK_LATENCY_DEBUG") != "1":
        return {}
    start = times["epochStart"]
    return {"debug": {"status": [[t - start, status, n] for t, status, n in times["statusLog"][:40]],
                      "kernel": [[t0 - start, None if t1 is None else t1 - start, what]
                                 for t0, t1, what in kernel["log"][:40]]}}


def _measure(lab, entry, cdp=None) -> dict:
    control = lab.page.locator(f".{entry['css']}").first
    lab.page.mouse.move(0, 0)
    if not control.is_visible():
        return {"skip": "hidden in the page (its group is not shown in the default state)"}
    if not control.is_enabled():
        return {"skip": "disabled in the page"}
    prepared = _prepare(control, entry)
    tracing = os.environ.get("SCWORK_LATENCY_TRACE") == "1"
    if cdp is not None:
        cdp.send("Profiler.start")
    if tracing:
        lab.page.context.browser.start_tracing(page=lab.page, categories=_TRACE_CATEGORIES)
    lab.page.evaluate(_JS_ARM)
    _act(control, entry, prepared)
    times = _settle(lab, need_busy=True)
    js_profile = None
    if cdp is not None:
        profile = cdp.send("Profiler.stop")["profile"]
        js_profile = _js_profile_summary(profile)
        if os.environ.get("SCWORK_LATENCY_PROFILE"):  # the raw profile too (Chrome DevTools opens it)
            raw = Path(os.environ["SCWORK_LATENCY_PROFILE"]) / f"{entry['css']}.cpuprofile"
            raw.write_text(json.dumps(profile))
    if tracing:
        trace = _trace_summary(json.loads(lab.page.context.browser.stop_tracing()))
        js_profile = {**(js_profile or {}), "trace_ms": trace}
    kernel = lab.kernel_json(f"_lat_take({entry['name']!r})")
    if "error" in times:
        return {"error": times["error"]}
    if not times["sawEvent"]:
        return {"error": "the page saw no input event (the action did not reach the control)"}
    if kernel["changes"] == 0:
        return {"error": "the kernel never saw the change (its value observer did not fire)"}
    # Kernel and page clocks are both this machine's: the kernel must have finished every
    # message it had started before the page called the change settled.
    end_epoch = times["epochStart"] + times["total"]
    late = [t1 - end_epoch for t0, t1, _ in kernel["log"] if t0 < end_epoch and t1 is not None and t1 > end_epoch + 20]
    if late:
        return {"error": f"the page settled {max(late):.0f} ms before the kernel finished handling the change",
                **_debug(times, kernel)}
    return {"total_s": times["total"] / 1e3, "to_idle_s": times["toIdle"] / 1e3,
            "render_s": times["render"] / 1e3, "kernel_s": kernel["kernel_s"],
            "round_trips": times["roundTrips"], "paints": times["paints"],
            "last_paint_s": None if times["lastPaint"] is None else times["lastPaint"] / 1e3,
            "plot_views": times["hooked"], "messages": kernel["messages"],
            "paint_s": times["paintMs"] / 1e3, "long_tasks_s": times["longTaskMs"] / 1e3,
            **_debug(times, kernel),
            **({"js_profile": js_profile} if js_profile else {})}


def _summary(entry, runs: list[dict], repeats: int) -> dict:
    totals = [r["total_s"] for r in runs]
    return {"kind": entry["kind"], "median_s": statistics.median(totals), "max_s": max(totals),
            "repeats": repeats, "times_s": totals,
            "kernel_s": statistics.median(r["kernel_s"] for r in runs),
            "to_idle_s": statistics.median(r["to_idle_s"] for r in runs),
            "render_s": statistics.median(r["render_s"] for r in runs),
            "paint_s": statistics.median(r["paint_s"] for r in runs),
            "long_tasks_s": statistics.median(r["long_tasks_s"] for r in runs),
            "last_paint_s": statistics.median(r["last_paint_s"] or 0.0 for r in runs),
            "round_trips": statistics.median(r["round_trips"] for r in runs),
            "runs": runs}


def _measure_plan(lab, plan, repeats: int, results: dict, state: str, cdp=None) -> None:
    """Measure every entry of ``plan`` not measured yet (hidden ones wait for another state)."""
    only = os.environ.get("SCWORK_LATENCY_CONTROLS")
    only = None if not only else {name.strip() for name in only.split(",")}
    for entry in plan:
        name = entry["name"]
        if name in results and "skip" not in results[name]:
            continue
        if entry["kind"] in NOT_DRIVEN or "skip" in entry:
            results[name] = {"kind": entry["kind"], "skip": entry.get("skip") or NOT_DRIVEN[entry["kind"]]}
            continue
        if only is not None and name not in only:
            results[name] = {"kind": entry["kind"], "skip": "not in SCWORK_LATENCY_CONTROLS"}
            continue
        runs, outcome, restore_problems, console_errors = [], None, [], []
        errors_before = len(lab.console.errors)
        for _ in range(repeats):
            try:
                run = _measure(lab, entry, cdp)
            except Exception as err:  # noqa: BLE001 - a control that cannot be driven is reported, not fatal
                run = {"error": re.sub(r"\s+", " ", f"{type(err).__name__}: {err}")[:300]}
            restore_problems += _back_to_default(lab, name)
            new_errors = lab.console.errors[errors_before:]
            errors_before = len(lab.console.errors)
            if new_errors:  # the page failed on this change (or its restore): say which
                console_errors += new_errors
            if "total_s" not in run:
                outcome = {"kind": entry["kind"], **run}
                break
            runs.append(run)
        if outcome is not None and "skip" in outcome and name in results:
            continue  # still hidden: keep the first reason
        results[name] = outcome or _summary(entry, runs, repeats)
        if state:
            results[name]["state"] = state
        if restore_problems:
            results[name]["restore_problems"] = sorted(set(restore_problems))
        if console_errors:
            results[name]["console_errors"] = sorted(set(console_errors))[:5]


@pytest.mark.parametrize("explorer", list(SETUPS))
def test_control_latency(explorer, lab):
    repeats = int(os.environ.get("SCWORK_LATENCY_REPEATS", "3"))
    notebook = lab.write_notebook(f"latency/{explorer}.ipynb", [SETUPS[explorer]])
    lab.open_notebook(notebook)
    lab.run_all()
    lab.settle()
    lab.page.evaluate(_JS_MONITOR)
    stacks: list[str] = []  # where uncaught page errors came from (reported with the control)
    lab.page.on("pageerror", lambda error: stacks.append(str(error.stack)[:6000]))
    lab.kernel(_KERNEL_HELPERS)
    text_changes = {name: text for (ex_name, name), text in TEXT_CHANGES.items() if ex_name == explorer}
    lab.kernel("_lat_install(ex)")
    load_before = os.getloadavg()
    profile_dir = os.environ.get("SCWORK_LATENCY_PROFILE")  # cProfile of the kernel's comm handling
    cdp = None
    if os.environ.get("SCWORK_LATENCY_JS_PROFILE") == "1":  # CPU profile of the page per measurement
        cdp = lab.page.context.new_cdp_session(lab.page)
        cdp.send("Profiler.enable")
        cdp.send("Profiler.setSamplingInterval", {"interval": 200})
    results: dict = {}
    for state, code in [("", ""), *EXTRA_STATES.get(explorer, {}).items()]:
        lab.kernel(f"{code}\n_LAT_DEFAULT = _lat_state(ex)")
        plan = lab.kernel_json(f"_lat_plan(ex, {text_changes!r})")
        _back_to_default(lab, "")  # the CSS classes (or the new state) reach the page; everything drawn
        if profile_dir:
            lab.kernel("_lat_profile_start()")
        _measure_plan(lab, plan, repeats, results, state, cdp)
        if stacks:
            results["__page_error_stacks__"] = sorted(set(stacks))[:3]
        if profile_dir:
            lab.kernel(f"_lat_profile_dump({str(Path(profile_dir) / f'{explorer}{state}.prof')!r})")
    results["__load_average__"] = {"before": list(load_before), "after": list(os.getloadavg())}
    out = os.environ.get("SCWORK_LATENCY_OUT")
    if out:
        path = Path(out)
        data = json.loads(path.read_text()) if path.exists() else {}
        data[explorer] = results
        path.write_text(json.dumps(data, indent=1, sort_keys=True))
    assert any("median_s" in r for r in results.values()), f"{explorer}: no control could be measured"
    lab.console.assert_clean()
