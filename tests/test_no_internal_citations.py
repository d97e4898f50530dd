"""Citations a reader can follow: public sources only, by their key in docs/references.md.

Three rules, each over the files a maintainer reads (code, tests, docs, README,
CONTRIBUTING, benchmarks):

- no citation of the internal brief or its folder;
- no bare "the guide" / "the patent" (or "guide section 13", "(guide, E3001)",
  "patent fig. 10"): the line must carry the key, ``[sc-guide]`` or ``[md-allreduce]``;
- none of the doubled phrases a mechanical search-and-replace once left behind
  ("... patent (the multi-dimensional all-reduce patent)", "the the", "the
  jax-tpu-embedding's", "table stacking feature stacking").

Every key cited anywhere must be defined in docs/references.md.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = ROOT / "docs" / "references.md"
FORBIDDEN = re.compile(r"\bSPEC \d|SPEC\.md|\.\./shared|\bseeds/|\.(ar|zh|hi)\.txt\b")
#: Prose folders and files whose citations must be followable (notebooks are checked only
#: for internal citations: their text belongs to the explorers' owners).
CITING = ("scwork/", "widgets/", "tests/", "docs/", "benchmarks/", "README.md", "CONTRIBUTING.md")
#: A source named without its key, with the key each needs on the same line.
BARE = {
    "[sc-guide]": re.compile(r"(?i)\b(the|a) guide\b|\bguide,? (section|says|§)|\(guide\b|^\s*guide,"),
    "[md-allreduce]": re.compile(r"(?i)\b(the|a) patent\b|\bpatent,? figs?\b|\(patent\b|^\s*(#\s*)?patent\b"),
}
#: Phrases doubled by mechanical replacement (matched across line breaks).
GARBLED = re.compile(
    r"(?i)patent\s+\(the\s+multi-dimensional\s+all-reduce\s+patent\)|\(patent,\s+the\s+multi"
    r"|\bthe\s+the\b|\bthe\s+jax-tpu-embedding's|table\s+stacking\s+feature\s+stacking"
    r"|jax-tpu-embedding's\s+table\s+stacking\s+/\s+\d|guide's\s+\w+\s+section\s+\w+\s+section"
    r"|\bthe\s+tpu-mlir's|HugeCTR\s+SOK[^\n]*\(HugeCTR\s+SOK\)|layout\s+documentation,\s+the\s+doc's"
)
KEY = re.compile(r"(?<!ignore)\[([a-z][a-z0-9-]*[a-z0-9])\](?!\()")


def _files(*patterns: str) -> list[str]:
    names = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    me = Path(__file__).relative_to(ROOT).as_posix()
    return [n for n in names if n != me and (ROOT / n).is_file()]


def _citing_files() -> list[str]:
    return [n for n in _files("*.py", "*.md") if n.startswith(CITING)]


def test_code_ui_text_notebooks_and_readme_cite_public_sources_only():
    files = _files("*.py", "*.md", "*.ipynb", "*.toml", "binder/*")
    assert files
    offenders = []
    for name in files:
        for number, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line):
                offenders.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not offenders, "internal citations:\n" + "\n".join(offenders)


def bare_citations(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every guide or patent cited without its key on that line."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for key, pattern in BARE.items():
            if pattern.search(line) and key not in line:
                found.append((number, line.strip()))
    return found


def garbled_phrases(text: str) -> list[str]:
    return [m.group(0) for m in GARBLED.finditer(text)]


def test_the_checks_catch_what_they_are_for():
    assert bare_citations("what int8 would save (guide section 13)") == [(1, "what int8 would save (guide section 13)")]
    assert len(bare_citations("as the patent says\nsplit over the tiles (guide, E3001)\n# Patent fig. 10")) == 3
    assert bare_citations("as [md-allreduce] fig. 10 says; [sc-guide] §9, as the guide says") == []
    assert bare_citations("the SparseCore guide [sc-guide] and the multi-dimensional all-reduce patent") == []
    assert garbled_phrases("All-reduce algorithms of the multi-dimensional all-reduce patent "
                           "(the multi-dimensional\n all-reduce patent)") != []
    assert garbled_phrases("jax-tpu-embedding's table stacking feature\nstacking") != []
    assert garbled_phrases("see the the SparseCore guide") != []
    assert garbled_phrases("The tpu-mlir's local memory layout example") != []
    assert garbled_phrases("HugeCTR SOK dispatch (HugeCTR SOK)") != []
    assert garbled_phrases("see the jax-tpu-embedding's preprocess_sparse_dense_matmul_input") != []
    assert garbled_phrases("[jte] preprocess_sparse_dense_matmul_input, then the guide [sc-guide] §9") == []


def test_guides_and_patents_are_cited_with_their_key():
    files = _citing_files()
    assert "scwork/collectives/algorithms.py" in files and "docs/memory.md" in files
    offenders = [f"{name}:{number}: {line[:110]}" for name in files
                 for number, line in bare_citations((ROOT / name).read_text(errors="replace"))]
    assert not offenders, "cite the key of docs/references.md on the same line:\n" + "\n".join(offenders)


def test_no_phrase_doubled_by_mechanical_replacement():
    offenders = [f"{name}: {phrase!r}" for name in _citing_files()
                 for phrase in garbled_phrases((ROOT / name).read_text(errors="replace"))]
    assert not offenders, "garbled citations:\n" + "\n".join(offenders)


def defined_keys() -> set[str]:
    return set(re.findall(r'<a id="([a-z0-9-]+)"></a>\*\*\[\1\]\*\*', REFERENCES.read_text()))


def test_references_define_the_keys_the_brief_names():
    assert {"sc-guide", "jte", "md-allreduce", "xla-tiled", "tpu-mlir", "scaling-book", "nccl-tests",
            "sok", "xprof", "keras-rs", "torchrec"} <= defined_keys()
    text = REFERENCES.read_text()
    assert "US 2022/0292399 A1" in text and "62/897,239" in text  # the patent by number
    assert "https://github.com/jax-ml/jax-tpu-embedding" in text


@pytest.mark.parametrize("key", ["sc-guide", "jte", "md-allreduce", "scaling-book", "nccl-tests", "tf-sc-config",
                                 "cloud-tpu"])
def test_each_defined_key_is_cited_somewhere(key):
    assert any(f"[{key}]" in (ROOT / name).read_text(errors="replace") for name in _citing_files()
               if name != "docs/references.md")


def test_every_cited_key_is_defined():
    """A key with a hyphen in brackets ("[sc-guide]") or one of the one-word keys must be in references.md."""
    one_word = {"jte", "sok", "xprof", "torchrec"}
    cited = {}
    for name in _citing_files():
        for key in KEY.findall((ROOT / name).read_text(errors="replace")):
            if "-" in key or key in one_word:
                cited.setdefault(key, name)
    assert one_word <= set(cited)
    assert {k: v for k, v in cited.items() if k not in defined_keys()} == {}
