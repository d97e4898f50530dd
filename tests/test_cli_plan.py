"""`scwork plan`: the search on a config and its ids, as text, JSON and a written plan config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scwork import cli
from scwork.config import load_config
from scwork.plan import Constraints, search
from scwork.plan.result import same_plan
from scwork.sharding import FeatureBatch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "model.toml"
EXAMPLE_IDS = ROOT / "examples" / "ids.csv.gz"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(["plan", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _expected(per_chip=(512,), chips="v5p:4"):
    """The library call on the same batches, read independently of the command."""
    import scwork

    cfg = load_config(EXAMPLE)
    table = scwork.datasets.load_table(EXAMPLE_IDS, batch_size=cfg.batch_size)
    batches = []
    for k in range(table.num_samples // cfg.batch_size):
        b = table.batch(k)
        batches.append(FeatureBatch.from_ragged({f.name: b[cfg.columns[f.name]] for f in cfg.features}))
    return search(list(cfg.features), batches, chips, per_chip_batch_sizes=list(per_chip), progress=False,
                  memory_kwargs=cfg.memory.plan_kwargs(), constraints=Constraints())


def test_json_matches_the_library_and_writes_a_plan_config(capsys, tmp_path):
    out_file = tmp_path / "plan.toml"
    status, out, err = _run(capsys, "--config", str(EXAMPLE), str(EXAMPLE_IDS), "--chips", "v5p:4",
                            "--per-chip-batch", "512", "--out", str(out_file), "--json", "--no-progress")
    assert status == 0, err
    doc = json.loads(out)
    expected = _expected()
    assert doc["candidates"] == expected.dataset.sizes["candidate"]
    assert doc["feasible"] == int(expected.dataset["feasible"].sum())
    assert doc["best"]["index"] == expected.best.index
    assert doc["best"]["step_time_s"] == pytest.approx(expected.best.metrics["step_time_s"])
    assert doc["baseline"]["is_default"] and doc["baseline"]["stacking"] == "auto"
    assert sorted(c["index"] for c in doc["front"]) == expected.front
    cfg = load_config(out_file)
    assert same_plan(cfg.stacking_plan(), expected.best.plan)
    assert dict(cfg.columns) == dict(load_config(EXAMPLE).columns)
    # The written plan is a config the other commands take.
    assert cli.main(["memory", "--config", str(out_file), "--json"]) in (0, 1)


def test_text_prints_best_baseline_and_front(capsys):
    status, out, err = _run(capsys, "--config", str(EXAMPLE), str(EXAMPLE_IDS), "--chips", "v5p:4,8",
                            "--per-chip-batch", "512", "--no-progress")
    assert status == 0
    assert "best:" in out and "baseline:" in out and "Pareto front" in out
    expected = _expected(chips="v5p:4,8")
    assert f"{expected.dataset.sizes['candidate']} candidates" in out
    assert len([ln for ln in out.splitlines() if ln.strip()[:1].isdigit()]) >= len(expected.front)


@pytest.mark.parametrize("argv, words", [
    (["--chips", "v5p:5"], "no documented slice of 5"),
    (["--max-drop-rate", "2"], "--max-drop-rate"),
    (["--budget", "0"], "--budget"),
    (["--per-chip-batch", "0"], "--per-chip-batch"),
    (["--out", "plan.json"], "name it .toml"),
    (["--out", "/nonexistent/dir/plan.toml"], "--out"),
    (["--per-chip-batch", "513"], "split"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(capsys, tmp_path, argv, words):
    status, out, err = _run(capsys, "--config", str(EXAMPLE), str(EXAMPLE_IDS), "--no-progress", *argv)
    assert status == 2
    assert words in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_no_feasible_plan_exits_1_naming_the_tightest(capsys, tmp_path):
    config = tmp_path / "tiny_hbm.toml"
    config.write_text(EXAMPLE.read_text().replace('dense_weights_bytes = "2 GiB"', 'dense_weights_bytes = "200 GiB"'))
    out_file = tmp_path / "plan.toml"
    status, out, err = _run(capsys, "--config", str(config), str(EXAMPLE_IDS), "--chips", "v5p:4",
                            "--per-chip-batch", "512", "--out", str(out_file), "--json", "--no-progress")
    assert status == 1
    doc = json.loads(out)
    assert doc["constraint"] == "fits_hbm" and doc["feasible"] == 0
    assert not out_file.exists()


def test_progress_bar_goes_to_stderr(capsys, monkeypatch):
    monkeypatch.setenv("SCWORK_PROGRESS", "1")
    status, out, err = _run(capsys, "--config", str(EXAMPLE), str(EXAMPLE_IDS), "--chips", "v5p:4",
                            "--per-chip-batch", "512", "--json")
    assert status == 0
    assert "evaluating plans" in err and "evaluating plans" not in out
    json.loads(out)


def test_rows_left_over_are_noted_on_stderr(capsys, tmp_path):
    import gzip

    lines = gzip.decompress(EXAMPLE_IDS.read_bytes()).decode().splitlines(keepends=True)
    ids = tmp_path / "ids.csv"
    ids.write_text("".join(lines[:4096 + 1 - 96]))          # 4000 rows: no full batch of 4096
    config = tmp_path / "m.toml"
    config.write_text(EXAMPLE.read_text().replace("batch_size = 4096", "batch_size = 1024"))
    status, out, err = _run(capsys, "--config", str(config), str(ids), "--chips", "v5p:4", "--per-chip-batch", "128",
                            "--json", "--no-progress")
    assert status == 0
    assert json.loads(out)["unused_rows"] == 4000 - 3 * 1024
    assert "928 rows after the last full batch" in err
