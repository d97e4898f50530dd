"""The documentation site (mkdocs.yml, docs/): pages, sources, examples and a warning-free build.

Fast checks need nothing but the repository: every page of the nav exists (and every
page exists in the nav), each model page names its public upstream sources, has its
"Where scwork deliberately differs" section and ends with an API section whose
mkdocstrings targets import. The slow checks build the site with
``mkdocs build --strict`` (any warning, including griffe's docstring warnings, fails)
and run every ``pycon`` example of the pages.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MKDOCS_YML = ROOT / "mkdocs.yml"
DOCS = ROOT / "docs"

#: Model pages and the subpackage each documents.
MODEL_PAGES = {
    "layouts.md": "scwork.layout",
    "sharding.md": "scwork.sharding",
    "memory.md": "scwork.memory",
    "collectives.md": "scwork.collectives",
    "pipeline.md": "scwork.pipeline",
    "advisor.md": "scwork.advisor",
    "interop.md": "scwork.interop.jax_tpu_embedding",
}

#: Names of the public upstream sources the models follow (one per page at least).
UPSTREAM_SOURCES = (
    "openxla.org", "XLA's tiled layout documentation", "jax-tpu-embedding", "tpu-mlir",
    "multi-dimensional all-reduce patent", "How to Scale Your Model", "scaling-book",
    "nccl-tests", "HugeCTR SOK", "SparseCore guide",
)


def nav_pages() -> list[str]:
    """The Markdown files listed under ``nav:`` in mkdocs.yml, in order."""
    pages, in_nav = [], False
    for line in MKDOCS_YML.read_text().splitlines():
        if re.match(r"^nav:\s*$", line):
            in_nav = True
            continue
        if in_nav:
            if line.strip() and not line.startswith((" ", "\t")):
                break
            m = re.match(r"^\s*-\s*(?:[^:\n]+:\s*)?(\S+\.md)\s*$", line)
            if m:
                pages.append(m.group(1))
    return pages


def test_mkdocs_config_names_site_docs_dir_and_nav():
    text = MKDOCS_YML.read_text()
    assert re.search(r"^site_name:\s*scwork\s*$", text, re.M)
    assert re.search(r"^docs_dir:\s*docs\s*$", text, re.M)
    assert "docstring_style: numpy" in text
    pages = nav_pages()
    assert pages[0] == "index.md", pages
    assert set(MODEL_PAGES) <= set(pages), f"model pages missing from the nav: {set(MODEL_PAGES) - set(pages)}"


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    pages = nav_pages()
    missing = [p for p in pages if not (DOCS / p).is_file()]
    assert not missing, f"pages named in mkdocs.yml nav but absent from docs/: {missing}"
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    orphans = [p for p in on_disk if p not in pages]
    assert not orphans, f"pages in docs/ missing from the nav of mkdocs.yml: {orphans}"


@pytest.mark.parametrize("page", sorted(MODEL_PAGES))
def test_model_page_names_sources_differences_and_api(page):
    text = (DOCS / page).read_text()
    named = [s for s in UPSTREAM_SOURCES if s in text]
    assert named, f"{page} names none of the upstream sources {UPSTREAM_SOURCES}"
    assert re.search(r"^##+ .*deliberately differs", text, re.M), \
        f"{page} has no 'Where scwork deliberately differs' section"
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings and headings[-1].strip() == "API", f"{page} does not end with an '## API' section: {headings}"
    api = text[text.rindex("\n## API"):]
    targets = re.findall(r"^::: (\S+)", api, re.M)
    assert MODEL_PAGES[page] in targets, f"{page}'s API section does not render {MODEL_PAGES[page]}"


def _resolve(path: str):
    """Import the longest module prefix of ``path`` and get the rest as attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(path)


def test_every_api_target_imports():
    bad = []
    for page in nav_pages():
        for target in re.findall(r"^::: (\S+)", (DOCS / page).read_text(), re.M):
            try:
                _resolve(target)
            except (ImportError, AttributeError) as err:
                bad.append(f"{page}: ::: {target} ({type(err).__name__}: {err})")
    assert not bad, "mkdocstrings targets that do not resolve:\n" + "\n".join(bad)


def test_every_source_key_a_page_cites_links_to_the_references():
    """A page's prose cites upstream sources as [key]: each such key is a link to its entry."""
    keys = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', (DOCS / "references.md").read_text(encoding="utf-8")))
    for page in nav_pages():
        if page == "references.md":
            continue
        text = (DOCS / page).read_text(encoding="utf-8")
        defined = set(re.findall(r"^\[([a-z0-9-]+)\]:\s*references\.md#\1\s*$", text, re.M))
        prose = re.sub(r"```.*?```|`[^`]*`", "", text, flags=re.S)
        cited = {key for key in keys if re.search(r"\[" + re.escape(key) + r"\](?![(:])", prose)}
        assert cited <= defined, f"{page} cites {sorted(cited - defined)} without a link to the references"


@pytest.mark.slow
def test_mkdocs_build_is_strict_and_warning_free(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]' (also part of the 'test' extra)")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    output = proc.stdout + proc.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert proc.returncode == 0, f"mkdocs build --strict failed ({proc.returncode}):\n{output}"
    assert not warnings, "mkdocs build printed warnings:\n" + "\n".join(warnings)
    for page in nav_pages():
        built = tmp_path / "site" / ("index.html" if page == "index.md" else Path(page).stem + "/index.html")
        assert built.is_file(), f"{page} was not built ({built})"
        html = built.read_text(encoding="utf-8")
        # The pages load nothing from outside (offline: no console errors for a CDN's fonts or scripts).
        external = re.findall(r"<(?:script|link)[^>]+(?:src|href)=\"(https?://[^\"]+)\"", html)
        assert not external, f"{page} loads {external} from the network"


@pytest.mark.slow
@pytest.mark.parametrize("page", ["index.md", *sorted(MODEL_PAGES)])
def test_page_examples_run(page):
    """Every ``pycon`` block of a page, run in order in one namespace, prints what it shows."""
    text = (DOCS / page).read_text()
    blocks = re.findall(r"^```pycon\n(.*?)^```", text, re.S | re.M)
    if not blocks:
        pytest.skip(f"{page} has no pycon examples")
    test = doctest.DocTestParser().get_doctest("\n".join(blocks), {}, page, str(DOCS / page), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures: list[str] = []
    runner.run(test, out=failures.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(failures)
