"""Kernel side of every explorer control, in process: Python handling and what it sends to the page.

Builds each explorer exactly as its notebook does (the notebook's own code cells, as
``benchmarks/browser_latency/test_latency.py`` runs them in the kernel), then makes the
change the browser benchmark makes to every visible control and times, in this
process, the explorer's handling of it: the engine, the bokeh updates and the
serialization of the patches sent to the page (jupyter_bokeh's comm is a dummy
outside a kernel, but every patch is still built and encoded). Far less sensitive to
a shared machine's load than the browser benchmark, and it says what the page gets:
the bytes of patch content, the changes that make BokehJS lay the document out again
(property changes other than data) and the new models.

    python benchmarks/bench_explorer_kernel.py [--repeats 3] [-k EXPLORER]

Each control: ``--repeats`` times (change, then back to the default unmeasured);
medians printed: wall time, and the process's CPU time (less sensitive to other
processes on a shared machine). Columns: patches (bokeh PATCH-DOC messages), KiB
(their size), props (property changes other than data: the ones that can make
BokehJS lay a view out again), data (sources whose data is sent), models (objects
serialized inside the patches).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "browser_latency"))


def build(notebook: str, variable: str):
    """The explorer in ``variable`` as ``notebook`` builds it (its code cells up to it and those that change it)."""
    import nbformat
    from IPython.core.interactiveshell import InteractiveShell

    os.environ.pop("SCWORK_SMALL", None)
    path = ROOT / "notebooks" / notebook
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    built = next(i for i, c in enumerate(cells) if re.search(rf"^{variable} = ", c, re.M))
    run = cells[:built + 1] + [c for c in cells[built + 1:] if re.search(rf"(?<![\w.]){variable}\.", c)]
    shell = InteractiveShell.instance()
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        for source in run:
            shell.run_cell(source, silent=True).raise_error()
    finally:
        os.chdir(cwd)
    explorer = shell.user_ns[variable]
    explorer._repr_mimebundle_()  # as shown: views synced
    return explorer


class PatchRecorder:
    """Records what the explorers' views send: bytes of content, layout-triggering changes, new models.

    It wraps the function that builds each patch message from the events left to send
    (after the views dropped what the page already has).
    """

    def __init__(self):
        from bokeh.document.events import ColumnDataChangedEvent, ModelChangedEvent

        from scwork.widgets import _display

        original = _display._inline_patch
        self.reset()
        recorder = self

        def inline_patch(events):
            message = original(events)
            recorder.patches += 1
            recorder.bytes += len(message.header_json) + len(message.metadata_json) + len(message.content_json)
            recorder.new_models += message.content_json.count('"type":"object"')
            for event in events:
                if isinstance(event, ModelChangedEvent) and event.attr != "hold_render":
                    recorder.props += 1
                    recorder.prop_names.add(f"{type(event.model).__name__}.{event.attr}")
                elif isinstance(event, ColumnDataChangedEvent):
                    recorder.data += 1
            return message

        _display._inline_patch = inline_patch

    def reset(self):
        self.patches = self.bytes = self.props = self.data = self.new_models = 0
        self.prop_names = set()


@functools.cache
def _kernel_helpers() -> dict:
    """The browser benchmark's kernel helpers (``_KERNEL_HELPERS``), run here as they run in the kernel.

    One definition of which controls an explorer has, their state and how it is
    restored, shared with ``benchmarks/browser_latency/test_latency.py``.
    """
    from test_latency import _KERNEL_HELPERS

    namespace: dict = {}
    exec(_KERNEL_HELPERS, namespace)
    return namespace


def controls(explorer):
    return _kernel_helpers()["_lat_controls"](explorer)


def change(c, name, text_changes):
    """Make the browser benchmark's change to control ``c`` (None if it is not driven).

    The change is the one ``_lat_plan`` gives the page (next option, an arrow key,
    a typed text, a click), made on the widget instead of in the page.
    """
    import ipywidgets as w

    if isinstance(c, w.Play):
        return None
    (entry,) = _kernel_helpers()["_lat_plan"](_Single(name, c), text_changes)
    if "skip" in entry:
        return None
    if "index" in entry:
        return lambda: setattr(c, "index", entry["index"])
    if "key" in entry:
        sign = 1 if entry["key"] == "ArrowRight" else -1
        if isinstance(c, w.SelectionSlider):
            index = c.index + sign
            return lambda: setattr(c, "index", index)
        value = c.value + sign * c.step
        return lambda: setattr(c, "value", value)
    if "text" in entry:
        value = int(entry["text"]) if isinstance(c, (w.IntText, w.BoundedIntText)) else entry["text"]
        return lambda: setattr(c, "value", value)
    if isinstance(c, w.Button):
        return lambda: c.click()
    return lambda: setattr(c, "value", not c.value)       # Checkbox, ToggleButton


class _Single:
    """An explorer-like holder of one control, for ``_lat_plan``."""

    def __init__(self, name, control):
        self.controls = {name: control}


def state_of(explorer):
    return _kernel_helpers()["_lat_state"](explorer)


def restore(explorer, default):
    for problem in _kernel_helpers()["_lat_restore"](explorer, default):
        print(f"restore: {problem}", file=sys.stderr)


def measure(name, explorer, repeats, recorder, states, text_changes):
    rows = []
    default = state_of(explorer)
    seen = set()
    for state_label, state_code in [("", None), *states.items()]:
        if state_code is not None:
            exec(state_code, {"ex": explorer})
            default_here = state_of(explorer)
        else:
            default_here = default
        for control_name, c in controls(explorer).items():
            if control_name in seen or not _shown(explorer, c):
                continue
            act = change(c, control_name, text_changes)
            if act is None:
                continue
            seen.add(control_name)
            times, cpu_times, sent = [], [], []
            for _ in range(repeats):
                act = change(c, control_name, text_changes)
                recorder.reset()
                t0, c0 = time.perf_counter(), time.process_time()
                act()
                times.append(time.perf_counter() - t0)
                cpu_times.append(time.process_time() - c0)
                sent.append((recorder.patches, recorder.bytes, recorder.props, recorder.data,
                             recorder.new_models, sorted(recorder.prop_names)))
                restore(explorer, default_here)
            label = control_name + (f" ({state_label})" if state_label else "")
            rows.append({"explorer": name, "control": label, "median_ms": statistics.median(times) * 1e3,
                         "cpu_ms": statistics.median(cpu_times) * 1e3,
                         "first_ms": times[0] * 1e3, "patches": sent[-1][0], "bytes": sent[-1][1],
                         "props": sent[-1][2], "data": sent[-1][3], "new_models": sent[-1][4],
                         "prop_names": sent[-1][5]})
        if state_code is not None:
            restore(explorer, default)
    return rows


def _shown(explorer, control):
    """Whether ``control`` is displayed: it and every box above it not ``display: none``."""
    import ipywidgets as w

    def find(box, path):
        if box is control:
            return path + [box]
        for child in getattr(box, "children", ()) or ():
            if isinstance(child, w.Widget):
                found = find(child, path + [box])
                if found:
                    return found
        return None

    path = find(explorer, [])
    if path is None:
        return True
    return all(item.layout.display != "none" and item.layout.visibility != "hidden" for item in path)


def main(argv=None) -> int:
    from test_latency import EXTRA_STATES, NOTEBOOK_EXPLORERS, TEXT_CHANGES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("-k", default=None, help="only explorers whose name contains this")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--names", action="store_true", help="print the changed properties too")
    args = parser.parse_args(argv)
    recorder = PatchRecorder()
    rows = []
    for name, where in NOTEBOOK_EXPLORERS.items():
        if args.k and args.k not in name:
            continue
        explorer = build(*where)
        text_changes = {control: text for (ex, control), text in TEXT_CHANGES.items() if ex == name}
        rows += measure(name, explorer, args.repeats, recorder, EXTRA_STATES.get(name, {}), text_changes)
    print(f"load average: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print(f"{'explorer':17} {'control':30} {'median':>7} {'cpu':>7} {'first':>7} {'patches':>7} {'KiB':>7} "
          f"{'props':>5} {'data':>5} {'models':>6}")
    for row in rows:
        print(f"{row['explorer']:17} {row['control']:30} {row['median_ms']:6.0f}ms {row['cpu_ms']:6.0f}ms "
              f"{row['first_ms']:6.0f}ms "
              f"{row['patches']:7d} {row['bytes'] / 1024:7.1f} {row['props']:5d} {row['data']:5d} "
              f"{row['new_models']:6d}" + (f"  {' '.join(row['prop_names'])}" if args.names else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
