"""Slice shapes from the Cloud TPU documentation, and fix suggestions that name real slices."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import scwork
from scwork.errors import HardwareError, TopologyError
from scwork.hardware.slices import (
    format_shape, is_slice_shape, slice_chip_counts, slice_shapes, smallest_slice)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("chip", ["v5e", "v6e"])
def test_2d_generations_have_the_documented_shapes(chip):
    assert slice_shapes(chip) == ((1, 1), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16))


def test_v5p_documented_table_is_included_and_the_maximum_is_16x16x24():
    documented = ["2x2x1", "2x2x2", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16",
                  "8x16x16", "16x16x16", "16x16x24"]
    for text in documented:
        assert is_slice_shape("v5p", [int(d) for d in text.split("x")]), text
    assert max(math.prod(s) for s in slice_shapes("v5p")) == 6144
    assert not is_slice_shape("v5p", (2, 3, 1))
    assert not is_slice_shape("v5p", (4, 4, 6))


def test_v4_rule_all_small_or_all_multiples_of_four():
    for shape in slice_shapes("v4"):
        assert all(d <= 4 for d in shape) or all(d % 4 == 0 for d in shape), shape
    assert max(math.prod(s) for s in slice_shapes("v4")) == 4096
    assert max(math.prod(s) for s in slice_shapes("tpu7x")) == 9216


@pytest.mark.parametrize("chip", ["v4", "v5e", "v5p", "v6e", "tpu7x"])
def test_smallest_slice_is_the_smallest_real_count_at_least_asked(chip):
    counts = slice_chip_counts(chip)
    for wanted in range(1, counts[-1] + 1, 7):
        shape = smallest_slice(chip, wanted)
        chips = math.prod(shape)
        assert chips >= wanted and chips in counts
        assert not [c for c in counts if wanted <= c < chips]
        scwork.Topology.for_chip(chip, shape=shape)  # a topology the catalog accepts
    assert smallest_slice(chip, counts[-1] + 1) is None


def test_chips_without_slices_and_unknown_chips_raise_typed_errors():
    with pytest.raises(TopologyError):
        slice_shapes("bm1684x")
    with pytest.raises(HardwareError):
        slice_shapes("v9")
    assert format_shape((4, 4, 8)) == "4x4x8"


def _cli_memory_json(*args):
    run = subprocess.run([sys.executable, "-m", "scwork.cli", "memory", "--json", *args],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode in (0, 1), run.stderr
    return json.loads(run.stdout)


def _num_chips_fixes(data) -> set[int]:
    found = set()

    def walk(node):
        if isinstance(node, dict):
            if node.get("parameter") == "num_chips":
                found.add(int(node["value"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    return found


def test_memory_fix_suggests_a_real_slice_and_the_cli_and_engine_agree():
    """The reported case: 80 GiB of dense weights and a 262144 batch on examples/model.toml."""
    from scwork.config import load_config

    cfg = load_config(ROOT / "examples" / "model.toml")
    report = cfg.plan_memory(batch_size=262144, dense_weights_bytes=80 * 2**30)
    engine = {fix.value for fix in report.fixes if fix.parameter == "num_chips"} | {
        fix.value for finding in report.diagnoses for fix in finding.fixes if fix.parameter == "num_chips"}
    assert engine, "the engine suggests no chip count for this case"
    counts = slice_chip_counts(cfg.topology.chip)
    assert engine <= set(counts), f"{engine} are not chip counts of {cfg.topology.chip} slices"
    cli = _num_chips_fixes(_cli_memory_json("--config", "examples/model.toml", "--batch-size", "262144",
                                            "--dense-weights-bytes", "80GiB"))
    assert cli == engine
