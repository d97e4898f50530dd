"""Every Python file of the project compiles on the oldest Python scwork supports.

CI runs on the newest Python >= 3.12 (for the oracle), whose grammar accepts things 3.11
does not (PEP 701: a line break inside an f-string's replacement field). The README
installs on 3.11 too, so a file that only 3.12 parses would break ``import scwork``
there. This test compiles every tracked ``.py`` file with a Python 3.11 interpreter
(pyenv's or one on PATH).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def oldest_supported() -> tuple[int, int]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    major, minor = spec.removeprefix(">=").split(".")[:2]
    return int(major), int(minor)


def find_python(version: tuple[int, int]) -> str | None:
    name = f"python{version[0]}.{version[1]}"
    found = shutil.which(name)
    if found:
        return found
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        for candidate in sorted(Path(root, "versions").glob(f"{version[0]}.{version[1]}*/bin/python")):
            return str(candidate)
    return None


def tracked_python_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout: no list of tracked files")
    return out.stdout.split()


def test_oldest_supported_python_is_3_11():
    assert oldest_supported() == (3, 11)


def test_every_file_compiles_on_the_oldest_supported_python():
    version = oldest_supported()
    if sys.version_info[:2] == version:
        python = sys.executable
    else:
        python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version[0]}.{version[1]} here to compile with (pyenv install it)")
    files = tracked_python_files()
    assert len(files) > 100
    # compile() each file in the old interpreter: a SyntaxError names the file and line.
    script = (
        "import sys\n"
        "bad = []\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        compile(open(path, encoding='utf-8').read(), path, 'exec')\n"
        "    except SyntaxError as error:\n"
        "        bad.append(f'{path}:{error.lineno}: {error.msg}')\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([python, "-c", script, *files], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"does not compile on Python {version}:\n{result.stdout}{result.stderr}"
