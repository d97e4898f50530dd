"""Real-browser fixtures: JupyterLab served on localhost, driven by Chromium via Playwright.

The browser tests check what nbclient cannot: that the explorers *render* in a real
JupyterLab page (BokehJS loaded, bokeh plots drawn with the kernel's data), that a
control changed in the browser reaches the kernel and the plots follow, that the
console stays free of errors, and that ``to_html`` exports open offline.

Requirements: ``playwright`` (Python package; it never downloads a browser here) and
Debian's Chromium (``/usr/bin/chromium``, or the ``SCWORK_CHROMIUM`` environment
variable). Without them the tests skip with the reason, except under CI
(``CI`` set), where they fail: ``.ci/run`` installs Chromium, so a skip there would
hide a broken setup.

One JupyterLab server and one Chromium serve the whole module (a fresh page per
test); the server runs with its own config, settings, workspace and runtime folders,
so a developer's JupyterLab setup cannot change what the tests see.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Where the tests save one screenshot per explorer. Running the tests leaves the
#: checkout untouched: the committed README screenshots in docs/screenshots are
#: rewritten only with SCWORK_UPDATE_SCREENSHOTS=1; otherwise they go to
#: SCWORK_SCREENSHOTS_DIR or a folder in the system temp dir.
SCREENSHOTS = Path(os.environ.get("SCWORK_SCREENSHOTS_DIR")
                   or (REPO / "docs" / "screenshots" if os.environ.get("SCWORK_UPDATE_SCREENSHOTS") == "1"
                       else Path(tempfile.gettempdir()) / "scwork-screenshots"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
#: Seconds to wait for JupyterLab to start, a notebook to open and its cells to run
#: (the CI machine has 2 shared cores), and for a render or an update to show.
TIMEOUT_S = float(os.environ.get("SCWORK_BROWSER_TIMEOUT", "180"))
RENDER_TIMEOUT_S = float(os.environ.get("SCWORK_RENDER_TIMEOUT", "60"))

#: Console errors that are not ours: (message substring, URL substring, why benign).
#: An error is ignored only when both substrings match. Keep this list short.
BENIGN_CONSOLE_ERRORS: tuple[tuple[str, str, str], ...] = (
    # jupyter_server race: listing kernels while one is starting raises TraitError
    # (last_activity still None) and answers 500; JupyterLab polls the list again.
    # Kernel start failures still fail the tests (the cells never run).
    ("status of 500 (Internal Server Error)", "/api/kernels?",
     "jupyter_server lists a kernel that is still starting"),
)



def chromium_path() -> str | None:
    """Debian's Chromium: ``$SCWORK_CHROMIUM``, ``/usr/bin/chromium`` or ``chromium`` on PATH."""
    for candidate in (os.environ.get("SCWORK_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _missing_requirement() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; no browser download needed)"
    if chromium_path() is None:
        return "Chromium not found at /usr/bin/chromium (apt-get install chromium, or set SCWORK_CHROMIUM)"
    for module in ("jupyterlab", "ipywidgets", "jupyter_bokeh", "bokeh"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[lab]')"
    return None


@pytest.fixture(scope="session")
def browser_requirements() -> None:
    reason = _missing_requirement()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run in CI: {reason}; .ci/run installs Chromium", pytrace=False)
    pytest.skip(reason)


# ---------------------------------------------------------------------------------------
# Chromium
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium(browser_requirements):
    """One headless Chromium per test module (Playwright's sync API, closed at module end)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class ConsoleLog:
    """Console errors and uncaught page errors of one page, minus the documented benign ones."""

    def __init__(self, page):
        self.messages: list[str] = []
        self.errors: list[str] = []
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))

    def _on_console(self, message) -> None:
        self.messages.append(f"{message.type}: {message.text}")
        if message.type != "error":
            return
        where = (message.location or {}).get("url", "")
        if any(benign in message.text and url in where for benign, url, _ in BENIGN_CONSOLE_ERRORS):
            return
        self.errors.append(f"{message.text} [{where}]" if where else message.text)

    def assert_clean(self) -> None:
        assert not self.errors, "browser console errors:\n  " + "\n  ".join(self.errors)


# ---------------------------------------------------------------------------------------
# Bokeh state in the page (shared by the JupyterLab and the offline-export tests)
# ---------------------------------------------------------------------------------------

#: JS: fingerprints of the ColumnDataSources with the given ids, from the newest Bokeh
#: document holding each: {id: {length, columns: {name: sum of finite values}}}; a
#: column is summed when all its values are numbers/booleans or numeric arrays (images).
_JS_FINGERPRINTS = """
(ids) => {
  const out = {};
  if (typeof Bokeh === "undefined") return {__error__: "window.Bokeh is undefined: BokehJS was never loaded in this page (in JupyterLab, jupyter_bokeh's BokehModel needs it loaded first, e.g. by bokeh.io.output_notebook)"};
  const docs = [...Bokeh.documents].reverse();
  const numeric = (v) => typeof v === "number" || typeof v === "boolean";
  const sum = (values) => {
    let total = 0;
    for (const v of values) {
      if (numeric(v)) { const x = Number(v); if (Number.isFinite(x)) total += x; }
      else if (v != null && typeof v === "object" && typeof v.length === "number") {
        const inner = sum(v); if (inner === null) return null; total += inner;
      } else return null;
    }
    return total;
  };
  for (const id of ids) {
    let model = null;
    for (const doc of docs) { model = doc.get_model_by_id(id); if (model != null) break; }
    if (model == null) { out[id] = null; continue; }
    const columns = {};
    for (const name of model.columns()) {
      const s = sum(model.get_column(name) ?? []);
      if (s !== null) columns[name] = s;
    }
    out[id] = {length: model.get_length() ?? 0, columns};
  }
  return out;
}
"""

#: JS: render state of the figures with the given ids: {id: {views, finished, width, height}}
#: over the views attached to the page (stale views of replaced documents are ignored).
_JS_FIGURES = """
(ids) => {
  const out = {};
  if (typeof Bokeh === "undefined") return {__error__: "window.Bokeh is undefined: BokehJS was never loaded in this page (in JupyterLab, jupyter_bokeh's BokehModel needs it loaded first, e.g. by bokeh.io.output_notebook)"};
  for (const id of ids) {
    const views = [...Bokeh.index.find_by_id(id)].filter((v) => v.el?.isConnected);
    const v = views[views.length - 1];
    out[id] = v == null ? {views: 0} : {
      views: views.length, finished: v.has_finished(),
      width: v.bbox ? v.bbox.width : 0, height: v.bbox ? v.bbox.height : 0,
      renderers: [...Bokeh.index.query((r) => r.model.type === "GlyphRenderer" && r.parent === v)].length,
    };
  }
  return out;
}
"""


def python_fingerprint(source):
    """What :data:`_JS_FINGERPRINTS` computes, from the Python side of a ColumnDataSource.

    Self-contained (no annotations, local imports): the JupyterLab tests send its
    source to the kernel.
    """
    import math

    import numpy as np

    def total(values):
        if isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
            array = values.astype(np.float64)
            return float(array[np.isfinite(array)].sum())
        result = 0.0
        for value in values:
            if isinstance(value, (bool, int, float, np.number, np.bool_)):
                x = float(value)
                result += x if math.isfinite(x) else 0.0
            elif isinstance(value, (np.ndarray, list, tuple)):
                inner = total(value)
                if inner is None:
                    return None
                result += inner
            else:
                return None
        return result

    columns = {name: total(values) for name, values in source.data.items()}
    return {"id": source.id, "length": max([len(v) for v in source.data.values()] or [0]),
            "columns": {name: value for name, value in columns.items() if value is not None}}


def fingerprint_mismatches(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Differences between Python-side and browser-side fingerprints, keyed by source name.

    ``expected``: name -> python fingerprint (with ``id``); ``actual``: id -> browser one.
    Every column Python sees as numeric must be in the browser with the same sum.
    """
    problems = []
    if "__error__" in actual:
        return [actual["__error__"]]
    for name, want in expected.items():
        got = actual.get(want["id"])
        if got is None:
            problems.append(f"{name}: no such ColumnDataSource in the page")
            continue
        if got["length"] != want["length"]:
            problems.append(f"{name}: {got['length']} rows in the browser, {want['length']} in Python")
            continue
        for column, total in want["columns"].items():
            seen = got["columns"].get(column)
            if seen is None or abs(seen - total) > 1e-6 * max(1.0, abs(seen), abs(total)):
                problems.append(f"{name}.{column}: sum {seen} in the browser, {total} in Python")
    return problems


def figure_problems(expected: dict[str, str], actual: dict[str, Any]) -> list[str]:
    """Figures (name -> id) not drawn: no attached view, not finished, zero size or no glyphs."""
    if "__error__" in actual:
        return [actual["__error__"]]
    problems = []
    for name, fid in expected.items():
        state = actual.get(fid) or {"views": 0}
        if not state["views"]:
            problems.append(f"figure {name!r}: no view in the page")
        elif not state["finished"]:
            problems.append(f"figure {name!r}: still rendering")
        elif state["width"] <= 0 or state["height"] <= 0:
            problems.append(f"figure {name!r}: drawn {state['width']}x{state['height']} px")
        elif state["renderers"] <= 0:
            problems.append(f"figure {name!r}: no glyph renderers drawn")
    return problems


def wait_until(page, check, what: str, timeout_s: float = RENDER_TIMEOUT_S, interval_s: float = 0.25,
               console: ConsoleLog | None = None):
    """Poll ``check()`` (returning a list of problems) until it is empty; fail with the last ones.

    Used where the condition needs Python on both sides (kernel and browser state);
    pure-DOM conditions use ``page.wait_for_function``. With ``console``, an error in
    the browser console ends the wait at once (the test would fail anyway).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        problems = check()
        if not problems:
            return
        if console is not None and console.errors:
            pytest.fail(f"browser console errors while waiting for {what}:\n  " + "\n  ".join(console.errors)
                        + "\nstill missing:\n  " + "\n  ".join(problems), pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}:\n  " + "\n  ".join(problems),
                        pytrace=False)
        page.wait_for_timeout(interval_s * 1000)


#: JS: the box around what an element shows: the union of its visible leaf elements
#: (controls, texts, bokeh roots; bokeh draws inside shadow roots, so its host elements
#: are leaves here), without the empty full-width space of block containers.
_JS_CONTENT_BOX = """
(root) => {
  const box = root.getBoundingClientRect();
  let right = box.left, bottom = box.top;
  for (const el of root.querySelectorAll("*")) {
    if (el.children.length > 0 && !el.shadowRoot) continue;
    const r = el.getBoundingClientRect();
    if (r.width <= 0 || r.height <= 0) continue;
    if (getComputedStyle(el).visibility === "hidden") continue;
    right = Math.max(right, r.right); bottom = Math.max(bottom, r.bottom);
  }
  return {x: box.left, y: box.top, width: Math.min(right, box.right) - box.left,
          height: Math.min(bottom, box.bottom) - box.top, full_height: box.height};
}
"""


def save_screenshot(locator, name: str, margin: int = 8) -> Path:
    """Screenshot what ``locator`` shows to ``SCREENSHOTS/<name>.png``.

    The picture is cropped to the content (plus ``margin`` pixels); the file is
    rewritten only when the picture changed, so unchanged screenshots stay untouched.
    """
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    locator.scroll_into_view_if_needed()
    box = locator.evaluate(_JS_CONTENT_BOX)
    # Below the output comes the notebook's footer (a border line): stay inside.
    clip = {"x": max(box["x"] - margin, 0), "y": max(box["y"] - margin, 0),
            "width": box["width"] + 2 * margin, "height": min(box["height"] + margin, box["full_height"]) + margin}
    png = locator.page.screenshot(clip=clip, animations="disabled", caret="hide")
    if not path.exists() or path.read_bytes() != png:
        path.write_bytes(png)
    return path


# ---------------------------------------------------------------------------------------
# JupyterLab server
# ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LabServer:
    url: str
    token: str
    root: Path
    log: Path
    process: subprocess.Popen = field(repr=False)

    def api(self, method: str, path: str, body: Any = None, timeout: float = 10) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
        return json.loads(text) if text.strip() else None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def shutdown_kernels(self) -> None:
        with contextlib.suppress(OSError, urllib.error.URLError):
            for session in self.api("GET", "/api/sessions"):
                self.api("DELETE", f"/api/sessions/{session['id']}")


@pytest.fixture(scope="module")
def lab_server(browser_requirements, tmp_path_factory) -> LabServer:
    """``python -m jupyterlab`` on a free localhost port, serving a temporary root folder.

    Its kernels see ``SCWORK_SMALL=1`` and ``SCWORK_PROGRESS=0``. The app object is
    exposed in the page (``window.jupyterapp``) so the tests run JupyterLab commands.
    """
    root = tmp_path_factory.mktemp("lab-root")
    home = tmp_path_factory.mktemp("lab-home")
    config = home / "config"
    (config / "labconfig").mkdir(parents=True)
    # The "get notified about Jupyter news?" toast would cover the screenshots.
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(config),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        IPYTHONDIR=str(home / "ipython"),
        SCWORK_SMALL="1",
        SCWORK_PROGRESS="0",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    token = secrets.token_hex(16)
    port = _free_port()
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        f"--ServerApp.token={token}", f"--port={port}", "--ServerApp.port_retries=0",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
        # As `scwork lab` runs it: scwork's notebooks are saved without outputs.
        "--ContentsManager.pre_save_hook=scwork.notebook_hygiene.strip_outputs",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # CI containers run as root
    log = home / "jupyterlab.log"
    with open(log, "wb") as log_file:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    server = LabServer(f"http://127.0.0.1:{port}", token, root, log, process)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"JupyterLab exited with status {process.returncode}:\n{server.log_tail()}",
                            pytrace=False)
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
                if server.api("GET", "/api/status", timeout=2) is not None:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer on port {port} within {TIMEOUT_S:.0f} s:\n"
                            f"{server.log_tail()}", pytrace=False)
            time.sleep(0.25)
        yield server
    finally:
        _stop(server)


def _stop(server: LabServer) -> None:
    """Shut the server down (its kernels with it); terminate, then kill, if it lingers."""
    process = server.process
    if process.poll() is None:
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            server.api("POST", "/api/shutdown", timeout=5)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                # start_new_session=True: the group holds only the server and its kernels.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


# ---------------------------------------------------------------------------------------
# One JupyterLab page
# ---------------------------------------------------------------------------------------

_JS_KERNEL_EXECUTE = """
async (code) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel.sessionContext.session.kernel;
  const future = kernel.requestExecute({code, silent: false, store_history: false});
  let stdout = "", error = null;
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === "stream" && msg.content.name === "stdout") stdout += msg.content.text;
    if (msg.header.msg_type === "error") error = msg.content.ename + ": " + msg.content.evalue;
  };
  const reply = await future.done;
  if (reply.content.status !== "ok") return {error: error ?? reply.content.status};
  return {stdout};
}
"""

_JS_NOTEBOOK_STATE = """
() => {
  const panel = window.jupyterapp?.shell?.currentWidget;
  const kernel = panel?.sessionContext?.session?.kernel;
  if (!panel || !panel.content || !kernel) return null;
  const cells = [];
  for (const cell of panel.content.widgets) {
    if (cell.model.type !== "code") continue;
    const outputs = cell.model.outputs.toJSON();
    cells.push({
      count: cell.model.executionCount,
      errors: outputs.filter((o) => o.output_type === "error").map((o) => o.ename + ": " + o.evalue),
    });
  }
  return {path: panel.context.path, kernel: kernel.status, cells};
}
"""


class LabPage:
    """A Chromium page showing one notebook in JupyterLab, with kernel and Bokeh helpers."""

    def __init__(self, page, server: LabServer, console: ConsoleLog):
        self.page = page
        self.server = server
        self.console = console

    # -- notebooks ------------------------------------------------------------------

    def write_notebook(self, relpath: str, cells: list[str]) -> str:
        import nbformat

        notebook = nbformat.v4.new_notebook()
        notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        path = self.server.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, path)
        return relpath

    def open_notebook(self, relpath: str) -> None:
        """Open ``relpath`` (under the server root) and wait until its kernel is idle.

        Each page gets a workspace of its own: the default one would reopen (and start
        kernels for) every notebook earlier tests opened.
        """
        workspace = f"test-{uuid.uuid4().hex[:12]}"
        self.page.goto(f"{self.server.url}/lab/workspaces/{workspace}/tree/{relpath}?token={self.server.token}")
        self.page.wait_for_function(
            "(path) => { const p = window.jupyterapp?.shell?.currentWidget;"
            " return p?.context?.path === path && p.sessionContext?.session?.kernel?.status === 'idle'; }",
            arg=relpath, timeout=TIMEOUT_S * 1000)
        # The notebook gets the whole width (the file browser would squeeze the outputs).
        self.page.evaluate("() => window.jupyterapp.shell.collapseLeft()")

    def run_all(self) -> None:
        """JupyterLab's "Run All Cells"; waits until every cell ran and the kernel is idle."""
        self.page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        self.page.wait_for_function(
            f"() => {{ const s = ({_JS_NOTEBOOK_STATE})();"
            " return s && s.kernel === 'idle' && s.cells.every((c) => c.count !== null); }",
            timeout=TIMEOUT_S * 1000)
        state = self.page.evaluate(_JS_NOTEBOOK_STATE)
        errors = [e for cell in state["cells"] for e in cell["errors"]]
        assert not errors, f"cells of {state['path']} raised: {errors}"

    def output(self, cell: int = -1):
        """The last output of code cell ``cell`` (a Playwright locator)."""
        cells = self.page.locator(".jp-Notebook .jp-CodeCell")
        target = cells.nth(cell) if cell >= 0 else cells.last
        return target.locator(".jp-OutputArea-output").last

    # -- kernel ---------------------------------------------------------------------

    def kernel(self, code: str) -> str:
        """Run ``code`` in the notebook's kernel (not in a cell); its stdout."""
        result = self.page.evaluate(_JS_KERNEL_EXECUTE, code)
        if "error" in result:
            pytest.fail(f"kernel code failed: {result['error']}\n{code}", pytrace=False)
        return result["stdout"]

    def kernel_json(self, expression: str) -> Any:
        return json.loads(self.kernel(f"import json as _j; print(_j.dumps({expression}))"))

    def kernel_fingerprints(self, variable: str, names) -> dict[str, Any]:
        """Python-side fingerprints (see :func:`python_fingerprint`) of ``variable.sources[name]``."""
        helper = textwrap.dedent(inspect.getsource(python_fingerprint))
        self.kernel(helper)
        return self.kernel_json(f"{{n: python_fingerprint({variable}.sources[n]) for n in {list(names)!r}}}")

    # -- bokeh ----------------------------------------------------------------------

    def browser_fingerprints(self, ids) -> dict[str, Any]:
        return self.page.evaluate(_JS_FINGERPRINTS, list(ids))

    def wait_for_sources(self, variable: str, names, what: str) -> dict[str, Any]:
        """Wait until the page's copies of ``variable.sources[names]`` equal the kernel's."""
        expected = self.kernel_fingerprints(variable, names)
        ids = [fp["id"] for fp in expected.values()]
        wait_until(self.page, lambda: fingerprint_mismatches(expected, self.browser_fingerprints(ids)),
                   f"the browser's plot data to match the kernel's ({what})", console=self.console)
        return expected

    def wait_for_figures(self, variable: str, names) -> None:
        """Wait until ``variable.figures[names]`` are drawn in the page."""
        ids = self.kernel_json(f"{{n: {variable}.figures[n].id for n in {list(names)!r}}}")
        wait_until(self.page, lambda: figure_problems(ids, self.page.evaluate(_JS_FIGURES, list(ids.values()))),
                   f"figures {list(names)} to render", console=self.console)

    def settle(self) -> None:
        """Move the pointer away (no hover tooltips) and wait until every Bokeh view finished."""
        self.page.mouse.move(0, 0)
        self.page.wait_for_function(
            "() => typeof Bokeh !== 'undefined' && [...Bokeh.index]"
            ".filter((v) => v.el?.isConnected).every((v) => v.has_finished())",
            timeout=TIMEOUT_S * 1000)

    def wait_for(self, check, what: str, timeout_s: float = RENDER_TIMEOUT_S) -> None:
        """Poll ``check()`` (a list of problems) until empty; console errors end the wait."""
        wait_until(self.page, check, what, timeout_s=timeout_s, console=self.console)

    def wait_kernel(self, expression: str, expected: Any, timeout_s: float = RENDER_TIMEOUT_S) -> None:
        """Wait until the kernel's ``expression`` equals ``expected`` (a browser change arrived)."""
        def check():
            value = self.kernel_json(expression)
            return [] if value == expected else [f"{expression} = {value!r}, expected {expected!r}"]

        wait_until(self.page, check, "the kernel to see the browser's change", timeout_s=timeout_s,
                   console=self.console)

    def screenshot(self, name: str) -> Path:
        """Screenshot of the last cell's output (the explorer) to ``docs/screenshots/<name>.png``."""
        self.settle()
        return save_screenshot(self.output(), name)

    # -- widgets --------------------------------------------------------------------

    def control(self, kind: str, label: str):
        """The ipywidgets control of CSS class ``widget-<kind>`` whose description is ``label``."""
        return self.page.locator(f".widget-{kind}:has(> label:text-is({json.dumps(label)}))")

    def toggle_button(self, text: str):
        return self.page.locator("button.widget-toggle-button", has_text=text)

    def press_slider(self, label: str, key: str = "ArrowRight") -> None:
        """Move the slider described ``label`` one step with the keyboard."""
        handle = self.control("hslider", label).locator(".noUi-handle").first
        handle.focus()
        handle.press(key)


@pytest.fixture
def lab(lab_server, chromium):
    """A fresh page on the module's JupyterLab; its kernels are shut down afterwards."""
    context = chromium.new_context(viewport={"width": 1680, "height": 2200}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_S * 1000)
    page = context.new_page()
    console = ConsoleLog(page)
    try:
        yield LabPage(page, lab_server, console)
    finally:
        context.close()
        lab_server.shutdown_kernels()


@pytest.fixture
def lab_pages(lab_server, chromium):
    """Open pages on the module's JupyterLab, each in a browser context of its own (a new tab).

    Calling the fixture's value returns a new :class:`LabPage`; ``close(page)`` closes
    its tab and leaves its kernel running (JupyterLab's default when a page closes).
    Every page still open is closed afterwards and every kernel shut down.
    """
    contexts = {}

    class Pages:
        def __call__(self) -> LabPage:
            context = chromium.new_context(viewport={"width": 1680, "height": 2200}, device_scale_factor=1)
            context.set_default_timeout(TIMEOUT_S * 1000)
            page = context.new_page()
            lab_page = LabPage(page, lab_server, ConsoleLog(page))
            contexts[id(lab_page)] = context
            return lab_page

        def close(self, lab_page: LabPage) -> None:
            contexts.pop(id(lab_page)).close()

    try:
        yield Pages()
    finally:
        for context in contexts.values():
            context.close()
        lab_server.shutdown_kernels()


class OfflinePage:
    """A page that can reach nothing but ``file:``/``data:``/``blob:`` URLs (others are recorded)."""

    def __init__(self, page, console: ConsoleLog, blocked: list[str]):
        self.page, self.console, self.blocked = page, console, blocked

    def open(self, path: Path) -> None:
        self.page.goto(Path(path).resolve().as_uri())

    def wait_for_figures(self, figures: dict[str, str]) -> None:
        """Wait until the figures (name -> bokeh id) are drawn."""
        wait_until(self.page, lambda: figure_problems(figures, self.page.evaluate(_JS_FIGURES, list(figures.values()))),
                   f"figures {list(figures)} to render", console=self.console)

    def source_problems(self, sources: dict[str, Any]) -> list[str]:
        """Differences between the page's data and ``sources`` (name -> Python ColumnDataSource)."""
        expected = {name: python_fingerprint(source) for name, source in sources.items()}
        return fingerprint_mismatches(expected, self.page.evaluate(
            _JS_FINGERPRINTS, [fp["id"] for fp in expected.values()]))


@pytest.fixture
def offline_page(chromium) -> OfflinePage:
    """A fresh page in an offline context whose every non-local request is aborted and recorded."""
    context = chromium.new_context(viewport={"width": 1680, "height": 2200}, device_scale_factor=1,
                                   offline=True)
    context.set_default_timeout(TIMEOUT_S * 1000)
    blocked: list[str] = []

    def route(route):
        url = route.request.url
        if url.startswith(("file:", "data:", "blob:")):
            route.continue_()
        else:
            blocked.append(url)
            route.abort()

    context.route("**/*", route)
    page = context.new_page()
    try:
        yield OfflinePage(page, ConsoleLog(page), blocked)
    finally:
        context.close()
