"""The repository carries its own references: no citation of the internal brief or its folder."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = re.compile(r"\bSPEC \d|SPEC\.md|\.\./shared|shared/seeds")


def test_code_ui_text_notebooks_and_readme_cite_public_sources_only():
    files = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.ipynb", "*.toml", "binder/*"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert files
    offenders = []
    for name in files:
        if name == Path(__file__).relative_to(ROOT).as_posix():
            continue
        for number, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line):
                offenders.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not offenders, "internal citations:\n" + "\n".join(offenders)
