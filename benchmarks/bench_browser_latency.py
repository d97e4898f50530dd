"""Browser latency of every explorer control: change -> settled plot, in JupyterLab + Chromium.

Runs ``benchmarks/browser_latency/test_latency.py`` (which needs the test extra and Debian's
Chromium, as the browser tests do) and prints one row per control: the median and
the worst of ``--repeats`` changes, against the 300 ms target. The explorers are
built on their notebooks' default data.

    python benchmarks/bench_browser_latency.py [--repeats 3] [-k EXPLORER] [--controls NAMES]
        [--json out.json] [--markdown out.md]

The machine matters: on a shared 2-core machine the kernel, JupyterLab's server and
Chromium compete for the cores; report the load average with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.300


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("-k", default=None, help="only explorers matching this pytest -k expression")
    parser.add_argument("--controls", default=None,
                        help="only these controls, comma-separated row names (e.g. 'shape[2],num_chips')")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also write the table as Markdown (as in benchmarks/README.md)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "latency.json"
        env = dict(os.environ, SCWORK_LATENCY_OUT=str(out),
                   SCWORK_LATENCY_REPEATS=str(args.repeats))
        env.pop("SCWORK_SMALL", None)
        if args.controls:
            env["SCWORK_LATENCY_CONTROLS"] = args.controls
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "benchmarks/browser_latency/test_latency.py"]
        if args.k:
            command += ["-k", args.k]
        run = subprocess.run(command, cwd=ROOT, env=env)
        if not out.exists():
            print("no measurements (see the pytest output above)", file=sys.stderr)
            return run.returncode or 1
        data = json.loads(out.read_text())
    print(f"\nload average now: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print(f"{'explorer':17} {'control':22} {'kind':14} {'median':>7} {'worst':>7} {'painted':>7} "
          f"{'kernel':>7} {'paint':>7} {'long':>7} {'trips':>5}  load        target 300 ms")
    over = errors = 0
    for explorer, label, result, load in rows(data):
        kind = result.get("kind", "")
        load_text = "?" if load is None else f"{load[0]:.2f}/{load[1]:.2f}"
        if "median_s" not in result:
            errors += "error" in result
            word = "skipped" if "skip" in result else "error"
            print(f"{explorer:17} {label:22} {kind:14} {word:>7} {'':47}  {load_text:10}  "
                  f"{result.get('skip') or result['error']}")
            continue
        ok = result["median_s"] <= TARGET_S
        over += not ok
        ms = [result[key] * 1e3 for key in ("median_s", "max_s", "last_paint_s", "kernel_s", "paint_s",
                                            "long_tasks_s")]
        print(f"{explorer:17} {label:22} {kind:14} " + " ".join(f"{v:5.0f}ms" for v in ms)
              + f" {result['round_trips']:5.0f}  {load_text:10}  {'ok' if ok else 'OVER'}"
              + (f"  (restore: {'; '.join(result['restore_problems'])})" if "restore_problems" in result else ""))
    print(f"\n{over} control(s) over the 300 ms target, {errors} could not be measured")
    print("median/worst: first input event to settled (kernel idle, every BokehJS view finished, last repaint);"
          "\npainted: to the last BokehJS repaint; kernel: the kernel handling comm messages; paint: BokehJS"
          "\nplot painting; long: main-thread tasks over 50 ms in the page; trips: kernel busy/idle cycles"
          "\n(control change plus BokehJS change events sent back); load: 1-min load average before/after"
          "\n(all but worst are medians over the repeats)")
    if args.json:
        args.json.write_text(json.dumps(data, indent=1, sort_keys=True))
    if args.markdown:
        args.markdown.write_text(markdown_table(data))
    return run.returncode


def rows(data: dict):
    """``(explorer, control label, result, (load before, load after) or None)`` per measured control, sorted."""
    for explorer, controls in sorted(data.items()):
        load = controls.get("__load_average__")
        load = None if not load else (load["before"][0], load["after"][0])
        for name, result in sorted(controls.items()):
            if not name.startswith("__"):
                yield explorer, (f"{name} ({result['state']})" if result.get("state") else name), result, load


def markdown_table(data: dict) -> str:
    """The results as the Markdown table of benchmarks/README.md (ms).

    Medians of the repeats, except "first" (the first repeat: e.g. a topology not seen
    before also runs the engine, whose results the explorer keeps for the repeats) and
    "worst".
    """
    lines = ["| explorer | control | kind | median | first | worst | kernel | paint | long | trips | load |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for explorer, label, result, load in rows(data):
        load_text = "?" if load is None else f"{load[0]:.1f}/{load[1]:.1f}"
        if "median_s" not in result:
            why = f"skipped: {result['skip']}" if "skip" in result else f"error: {result.get('error')}"
            lines.append(f"| {explorer} | {label} | {result.get('kind', '')} | {why} | | | | | | | {load_text} |")
            continue
        median = round(result["median_s"] * 1e3)
        cells = [f"{median}" + (" **over**" if result["median_s"] > TARGET_S else ""),
                 f"{round(result['times_s'][0] * 1e3)}",
                 *(f"{round(result[key] * 1e3)}" for key in ("max_s", "kernel_s", "paint_s", "long_tasks_s")),
                 f"{result['round_trips']:.0f}"]
        lines.append(f"| {explorer} | {label} | {result['kind']} | " + " | ".join(cells) + f" | {load_text} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
