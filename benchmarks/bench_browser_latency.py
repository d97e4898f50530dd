"""Browser latency of every explorer control: change -> settled plot, in JupyterLab + Chromium.

Runs ``tests/browser/test_latency.py`` (which needs the test extra and Debian's
Chromium, as the browser tests do) and prints one row per control: the median and
the worst of ``--repeats`` changes, against the 300 ms target. The explorers are
built on their notebooks' default data.

    python benchmarks/bench_browser_latency.py [--repeats 3] [--json out.json]

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
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "latency.json"
        env = dict(os.environ, SCWORK_LATENCY="1", SCWORK_LATENCY_OUT=str(out),
                   SCWORK_LATENCY_REPEATS=str(args.repeats))
        env.pop("SCWORK_SMALL", None)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "tests/browser/test_latency.py"]
        if args.k:
            command += ["-k", args.k]
        run = subprocess.run(command, cwd=ROOT, env=env)
        if not out.exists():
            print("no measurements (see the pytest output above)", file=sys.stderr)
            return run.returncode or 1
        data = json.loads(out.read_text())
    print(f"\nload average: {open('/proc/loadavg').read().split()[:3]}")
    print(f"{'explorer':18} {'control':22} {'kind':16} {'median':>9} {'worst':>9}  target 300 ms")
    over = 0
    for explorer, controls in sorted(data.items()):
        for name, result in sorted(controls.items()):
            if "error" in result:
                print(f"{explorer:18} {name:22} {'':16} {'n/a':>9} {'':>9}  {result['error']}")
                continue
            ok = result["median_s"] <= TARGET_S
            over += not ok
            print(f"{explorer:18} {name:22} {result['kind']:16} {result['median_s'] * 1e3:8.0f}ms "
                  f"{result['max_s'] * 1e3:8.0f}ms  {'ok' if ok else 'OVER'}")
    print(f"\n{over} control(s) over the 300 ms target")
    if args.json:
        args.json.write_text(json.dumps(data, indent=1, sort_keys=True))
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
