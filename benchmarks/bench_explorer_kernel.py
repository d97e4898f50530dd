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


def controls(explorer):
    import ipywidgets as w

    out = {}
    for name, c in explorer.controls.items():
        items = [(f"{name}[{i}]", item) for i, item in enumerate(c)] if isinstance(c, (list, tuple)) else [(name, c)]
        out.update({n: item for n, item in items if isinstance(item, w.Widget)})
    return out


def change(c, name, text_changes):
    """Make the browser benchmark's change to control ``c`` (None if it is not driven)."""
    import ipywidgets as w

    if getattr(c, "disabled", False) or isinstance(c, w.Play):
        return None
    if isinstance(c, (w.ToggleButtons, w.Dropdown)):
        n = len(c._options_labels)
        if n < 2:
            return None
        index = 0 if c.index is None else (c.index + 1) % n
        return lambda: setattr(c, "index", index)
    if isinstance(c, w.SelectionSlider):
        index = c.index - 1 if c.index == len(c.options) - 1 else c.index + 1
        return lambda: setattr(c, "index", index)
    if isinstance(c, (w.IntSlider, w.FloatSlider)):
        value = c.value - c.step if c.value >= c.max else c.value + c.step
        return lambda: setattr(c, "value", value)
    if isinstance(c, (w.IntText, w.BoundedIntText)):
        up = c.value + 1
        value = c.value - 1 if up > getattr(c, "max", up) else up
        return lambda: setattr(c, "value", value)
    if isinstance(c, w.Text):
        if name in text_changes:
            return lambda: setattr(c, "value", text_changes[name])
        return None
    if isinstance(c, w.Checkbox):
        return lambda: setattr(c, "value", not c.value)
    if isinstance(c, w.Button):
        return lambda: c.click()
    return None


def state_of(explorer):
    return {name: ("index", c.index) if hasattr(c, "_options_labels") else ("value", c.value)
            for name, c in controls(explorer).items() if not hasattr(c, "on_click")}


def restore(explorer, default):
    for _ in range(2):
        for name, (trait, value) in default.items():
            c = controls(explorer).get(name)
            if c is not None and getattr(c, trait) != value:
                setattr(c, trait, value)


def visible(c):
    return c.layout.display != "none" and getattr(c, "_scwork_hidden", False) is False


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
