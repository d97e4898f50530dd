"""The README shows every explorer with a screenshot the browser tests made (no browser needed)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
#: Explorer -> screenshot written by test_explorers_in_browser.py (its module's name).
SCREENSHOTS = {
    "LayoutExplorer": "layout_explorer",
    "LoadSkewExplorer": "load_skew",
    "MemoryTimeline": "memory_timeline",
    "AllReduceStepper": "allreduce_stepper",
    "PipelineTimeline": "pipeline_timeline",
}


def _images() -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", README)


def test_readme_images_exist_and_are_pngs():
    images = [path for path in _images() if not path.startswith("http")]
    assert images, "the README shows no screenshot"
    for path in images:
        file = ROOT / path
        assert file.is_file(), f"README shows {path}, which does not exist (run pytest tests/browser)"
        header = file.read_bytes()[:24]
        assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
        width, height = struct.unpack(">II", header[16:24])
        assert width >= 400 and height >= 200, f"{path} is only {width}x{height} px"


@pytest.mark.parametrize("explorer", sorted(SCREENSHOTS))
def test_readme_has_a_screenshot_of_every_explorer(explorer):
    section = README.split("## Explorers", 1)[1].split("\n## ", 1)[0]
    assert f"docs/screenshots/{SCREENSHOTS[explorer]}.png" in section
    assert f"**{explorer}**" in section


def test_hero_image_and_badge_come_before_the_commands():
    start = README.index("## Start here")
    intro = README[:start]
    assert "mybinder.org/v2/" in intro  # how to try the tour on Binder
    assert any(path.startswith("docs/screenshots/") for path in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", intro))
