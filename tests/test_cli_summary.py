"""`scwork summary`: the plan summary of a config, with and without ids, as text and JSON.

The expected numbers come from the library (:func:`scwork.summary.plan_summary` fed with
:func:`scwork.sharding.compute_stats` of the first batch), computed independently of the
command's readers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import scwork
from scwork import cli
from scwork.config import load_config
from scwork.sharding import FeatureBatch, compute_stats
from scwork.summary import plan_summary

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "model.toml"
EXAMPLE_IDS = ROOT / "examples" / "ids.csv.gz"

#: A valid model that does not fit in SPMEM (eight large tables in one stack).
NOT_FITTING = (ROOT / "examples" / "does_not_fit.toml").read_text()


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(["summary", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _expected(config=EXAMPLE, ids=EXAMPLE_IDS, batch_size=None, **times):
    """The library's summary: compute_stats of the first batch read with load_table."""
    cfg = load_config(config)
    batch_size = cfg.require_batch_size(batch_size)
    stats = None
    if ids is not None:
        table = scwork.datasets.load_table(ids, batch_size=batch_size)
        first = table.batch(0)
        batch = FeatureBatch.from_ragged({f.name: first[cfg.columns[f.name]] for f in cfg.features})
        stats = compute_stats(batch, list(cfg.features), cfg.topology, stacking=cfg.stacking,
                              config=cfg.sparsecore_config)
    return plan_summary(list(cfg.features), cfg.topology, stats=stats, **times,
                        **cfg.memory_kwargs(batch_size=batch_size))


def test_text_without_ids_is_memory_and_limits_only(capsys):
    status, out, err = _run(capsys, "--config", str(EXAMPLE))
    assert status == 0 and err == ""
    expected = _expected(ids=None)
    lines = out.splitlines()
    assert lines[0] == (f"plan of {EXAMPLE}: batch 4,096 on 4 v5p chips (4 devices x 4 SparseCores = "
                        "16 partitions)")
    assert "\n".join(lines[2:]) == str(expected)
    assert lines[2].split() == ["chip", "hbm", "(peak", "/", "usable)", "spmem", "per", "tile"]  # no load columns
    assert len([line for line in lines if line[:1].isdigit()]) == 4          # one row per chip
    assert "2.39 GiB / 85.50 GiB (3%)" in lines[4]                            # peak / usable HBM (as scwork memory)
    assert "ids received" not in out and "critical path" not in out and "imbalance" not in out
    assert "stacks: user limits 64/64; item limits 1024/512; category limits 256/64" in out
    assert lines[-1] == "fits"


def test_json_without_ids_is_the_datasets(capsys):
    status, out, _ = _run(capsys, "--config", str(EXAMPLE), "--json")
    assert status == 0
    data = json.loads(out)
    expected = _expected(ids=None)
    assert xr.Dataset.from_dict(data["per_chip"]).equals(expected.per_chip)
    per_stack = xr.Dataset.from_dict(data["per_stack"])
    assert per_stack["stack"].values.tolist() == ["user", "item", "category"]
    assert per_stack["max_ids_per_partition"].values.tolist() == [64, 1024, 256]
    assert data["per_chip"]["data_vars"]["hbm_peak_bytes"]["attrs"]["units"] == "bytes"
    assert data["memory"]["peak_hbm_bytes"] == load_config(EXAMPLE).plan_memory().peak_hbm_bytes
    assert data["fits"] is True and data["ids"] is None and data["batch_size"] == 4096
    assert data["partition_imbalance"] is None and data["critical_path"] == [] and data["bottleneck"] is None


def test_text_with_ids_adds_load_imbalance_and_critical_path(capsys):
    status, out, err = _run(capsys, "--config", str(EXAMPLE), str(EXAMPLE_IDS), "--tc-forward-us", "1000",
                            "--tc-backward-us", "2000")
    assert status == 0, err
    expected = _expected(tc_forward_s=1e-3, tc_backward_s=2e-3)
    lines = out.splitlines()
    assert lines[0].endswith(f", load from the first batch of {EXAMPLE_IDS}")
    assert "\n".join(lines[2:]) == str(expected)
    assert "ids received" in lines[2] and "load / mean chip" in lines[2]
    assert any(line.startswith("partitions: imbalance (max / mean ids) ") for line in lines)
    path = next(line for line in lines if line.startswith("critical path"))
    assert "tc_forward 1.000 ms -> tc_backward 2.000 ms" in path
    assert "observed" in out and "(ok)" in out and lines[-1] == "fits"


def test_json_with_ids_matches_the_library(capsys):
    status, out, _ = _run(capsys, str(EXAMPLE_IDS), "--config", str(EXAMPLE), "--json", "--tc-forward-us", "500")
    assert status == 0
    data = json.loads(out)
    expected = _expected(tc_forward_s=5e-4)
    per_chip = xr.Dataset.from_dict(data["per_chip"])
    assert per_chip["ids_received"].values.tolist() == expected.per_chip["ids_received"].values.tolist()
    np.testing.assert_allclose(per_chip["load_vs_mean"].values, expected.per_chip["load_vs_mean"].values)
    # The ids of the first batch (an id repeated within a sample counts once) over the chips.
    cfg = load_config(EXAMPLE)
    first = scwork.datasets.load_table(EXAMPLE_IDS, batch_size=4096).batch(0)
    raw = sum(first[cfg.columns[f.name]][0].size for f in cfg.features)
    assert 0.9 * raw < int(per_chip["ids_received"].sum()) <= raw
    per_stack = xr.Dataset.from_dict(data["per_stack"])
    assert per_stack["observed_max_ids"].values.tolist() == expected.per_stack["observed_max_ids"].values.tolist()
    assert per_stack["within_limits"].values.tolist() == [True, True, True]
    assert data["partition_imbalance"] == pytest.approx(expected.partition_imbalance)
    assert data["partition_divergence_bits"] == pytest.approx(expected.partition_divergence_bits)
    assert data["partition_imbalance"] > 1.0
    path = {p["phase"]: p["seconds"] for p in data["critical_path"]}
    assert path == pytest.approx(dict(expected.critical_path)) and path["tc_forward"] == pytest.approx(5e-4)
    assert data["sequential_step_s"] == pytest.approx(float(expected.step.sequential_step_time))
    assert data["bottleneck"] == str(expected.step.bottleneck)


def test_a_model_that_does_not_fit_exits_1(capsys, tmp_path):
    config = tmp_path / "big.toml"
    config.write_text(NOT_FITTING)
    status, out, err = _run(capsys, "--config", str(config))
    assert status == 1 and err == ""
    lines = out.splitlines()
    assert lines[-1] == "DOES NOT FIT (exit status 1)"
    assert lines[-2] == (f"memory does not fit: `scwork memory --config {config}` gives the diagnoses and the fixes")
    status, out, _ = _run(capsys, "--config", str(config), "--json")
    data = json.loads(out)
    assert status == 1 and data["fits"] is False and data["memory_fits"] is False
    assert data["memory"]["fits"] is False


def test_observed_counts_over_the_limits_do_not_fit(capsys, tmp_path):
    """The memory fits, but the first batch sends more ids to a partition than `user` allows."""
    config = tmp_path / "tight.toml"
    config.write_text(EXAMPLE.read_text().replace("max_ids_per_partition = 64\nmax_unique_ids_per_partition = 64",
                                                  "max_ids_per_partition = 8\nmax_unique_ids_per_partition = 8"))
    status, out, _ = _run(capsys, "--config", str(config), str(EXAMPLE_IDS))
    assert status == 1
    assert "user limits 8/8, observed 40/20 (OVER)" in out and "memory does not fit" not in out
    assert out.splitlines()[-1] == "DOES NOT FIT (exit status 1)"
    status, out, _ = _run(capsys, "--config", str(config), str(EXAMPLE_IDS), "--json")
    data = json.loads(out)
    assert status == 1 and data["fits"] is False and data["memory_fits"] is True
    assert xr.Dataset.from_dict(data["per_stack"])["within_limits"].values.tolist() == [False, True, True]


def test_a_directory_of_shards_gives_the_same_summary_as_its_file(capsys, tmp_path):
    folder = tmp_path / "shards"
    scwork.datasets.write_synthetic_parquet(folder, 2, rows_per_shard=64,
                                            features=["user_id", "clicked", "viewed", "category"],
                                            vocab_size=1000, seed=3)
    base = ("--config", str(EXAMPLE), "--batch-size", "64", "--json")
    status, from_dir, _ = _run(capsys, str(folder), *base)
    assert status == 0
    first = sorted(folder.glob("*.parquet"))[0]
    status, from_file, _ = _run(capsys, str(first), *base)
    assert status == 0
    a, b = json.loads(from_dir), json.loads(from_file)
    assert a["per_chip"] == b["per_chip"] and a["per_stack"] == b["per_stack"]
    assert a["critical_path"] == b["critical_path"]


@pytest.mark.parametrize("args, fragment", [
    (("--tc-forward-us", "nan"), "from 0 to"),
    (("--tc-backward-us", "-1"), "from 0 to"),
    (("--tc-forward-us", "1e400"), "from 0 to"),
    (("--tc-forward-us", "5"), "give an IDS file too"),
    (("--batch-size", "100"), "multiple of 16"),
    ((str(EXAMPLE_IDS), "--batch-size", "8192"), "fewer than one batch of 8192"),
    (("no/such/ids.csv",), "no/such/ids.csv"),
    (("nothing*.parquet",), "no file matches"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, fragment):
    status, out, err = _run(capsys, "--config", str(EXAMPLE), *args)
    assert status == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("scwork summary: error: ") and fragment in err, err


def test_the_command_runs_as_users_run_it_and_is_documented():
    result = subprocess.run([sys.executable, "-m", "scwork.cli", "summary", "--config", "examples/model.toml",
                             "examples/ids.csv.gz"], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "SCWORK_PROGRESS": "0"}, timeout=300)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "critical path" in result.stdout
    help_text = subprocess.run([sys.executable, "-m", "scwork.cli", "--help"], capture_output=True, text=True,
                               timeout=120).stdout
    assert "summary" in help_text
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Command line", 1)[1].split("\n## ", 1)[0]
    assert "`scwork summary --config model.toml [IDS]" in section
