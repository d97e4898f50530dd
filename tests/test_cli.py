"""The `scwork` command, run as users run it (subprocess)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import scwork

SCWORK = [sys.executable, "-m", "scwork.cli"]
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "model.toml"
COMMANDS = ("lab", "layout", "hardware", "warmup", "stats", "memory", "summary", "allreduce")


def run(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = None if env is None else {**os.environ, **env}
    return subprocess.run([*SCWORK, *args], capture_output=True, text=True, check=check, env=full_env)


def assert_bad_input(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit status 2, one line on stderr, nothing on stdout."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


# --------------------------------------------------------------------------------------
# every command
# --------------------------------------------------------------------------------------
def test_help_lists_commands():
    out = run("--help").stdout
    for command in COMMANDS:
        assert command in out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    result = run(command, "--help")
    assert result.returncode == 0 and result.stdout.startswith(f"usage: scwork {command}")


def test_usage_errors_are_one_line_exit_2():
    assert_bad_input(run("allreduce", check=False), "the following arguments are required: --topology",
                     "see scwork allreduce --help")
    assert_bad_input(run("memory", "--config", str(EXAMPLE), "--frobnicate", check=False),
                     "unrecognized arguments: --frobnicate")
    assert_bad_input(run("nosuchcommand", check=False), "invalid choice")


# --------------------------------------------------------------------------------------
# layout
# --------------------------------------------------------------------------------------
def test_layout_json():
    data = json.loads(run("layout", "f32[3,5]{1,0:T(2,2)}", "--json").stdout)
    assert list(data["tiled_shape"]) == [2, 3, 2, 2]


def test_layout_bad_input_exits_2_with_one_line():
    result = run("layout", "f32[123,456,789]{1:T(2,*,128)}", check=False)
    assert_bad_input(result, "Dimensions size is 3, but minor to major size is 1.")


def test_layout_text_has_figures_and_address_map():
    text = "f32[3,5]{1,0:T(2,2)}"
    out = run("layout", text).stdout
    shape = scwork.layout.parse(text)
    assert "padded_bytes: 96" in out and "padding_fraction: 37.5%" in out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("map of the padded view 4x6"))
    grid = [line.split() for line in lines[start + 1:] if line.strip()]
    # Rows of the padded 4x6 view, '|' between tiles, '.' for padding.
    cells = [[c for c in row if c != "|"] for row in grid]
    addresses = shape.view_index_map()
    padding = shape.view_padding_mask()
    assert len(cells) == 4
    for r in range(4):
        expected = ["." if padding[r, c] else str(addresses[r, c]) for c in range(6)]
        assert cells[r] == expected
    assert cells[2][3] == "17"  # [xla-tiled], figure 1: element (2, 3) of F32[3,5] with tile (2,2) is at 17
    assert grid[0].count("|") == 2  # three tile columns


def test_layout_map_only_for_small_2d_views():
    assert "larger than 16x32 cells: no map" in run("layout", "f32[128,256]{1,0:T(8,128)}").stdout
    assert "more than 2 dimensions: no map" in run("layout", "f32[2,3,4]").stdout


# --------------------------------------------------------------------------------------
# hardware, warmup
# --------------------------------------------------------------------------------------
def test_hardware_lists_and_describes():
    names = [row["name"] for row in json.loads(run("hardware", "--json").stdout)]
    assert {"v4", "v5e", "v5p", "v6e", "tpu7x"} <= set(names)
    v5p = json.loads(run("hardware", "v5p", "--json").stdout)
    assert v5p["sparsecores_per_chip"]["value"] == 4
    bad = run("hardware", "v9", check=False)
    assert bad.returncode == 2 and "Unknown chip" in bad.stderr


def test_hardware_json_has_typed_values_units_docs_and_sources():
    """`scwork hardware v5p --json` printed every value as a string ("4", "None"), without units or sources."""
    import dataclasses

    chip = scwork.hardware.get("v5p")
    data = json.loads(run("hardware", "v5p", "--json").stdout)
    fields = {f.name: f for f in dataclasses.fields(chip) if f.name != "sources"}
    assert list(data) == list(fields)
    cores = data["sparsecores_per_chip"]
    assert type(cores["value"]) is int and cores["value"] == 4 and cores["unit"] == "count"
    hbm = data["hbm_bytes"]
    assert hbm["value"] == chip.hbm_bytes and hbm["unit"] == fields["hbm_bytes"].metadata["unit"] == "bytes"
    assert isinstance(hbm["source"], str) and hbm["source"] == chip.sources["hbm_bytes"]
    assert hbm["doc"] == fields["hbm_bytes"].metadata["doc"]
    assert data["shared_spmem_bytes"]["value"] is None            # unpublished: null, not "None"
    assert type(data["ici_link_bytes_per_s"]["value"]) is float
    assert data["ici_topology"]["value"] == "3D torus" and data["name"]["unit"] is None
    npu = json.loads(run("hardware", "bm1684x", "--json").stdout)
    assert npu["byte_strides"]["value"] is False
    text = run("hardware", "v5p").stdout
    assert f"hbm_bytes: {chip.hbm_bytes} bytes (95.00 GiB)   [{chip.sources['hbm_bytes']}]" in text
    assert "shared_spmem_bytes: not published   [" in text and "None" not in text
    assert "sparsecores_per_chip: 4 count   [" in text


def test_warmup_shows_progress_and_lists_kernel_modules():
    pytest.importorskip("tqdm")  # the bar needs the optional tqdm
    from scwork._jit import KERNEL_MODULES

    result = run("warmup", env={"SCWORK_PROGRESS": "1"})
    assert "compiling numba kernels" in result.stderr
    assert f"{len(KERNEL_MODULES)}/{len(KERNEL_MODULES)}" in result.stderr
    assert [line.split()[-1] for line in result.stdout.splitlines()] == list(KERNEL_MODULES)
    quiet = run("warmup", "--json", "--no-progress", env={"SCWORK_PROGRESS": "1"})
    assert json.loads(quiet.stdout) == {"warmed_up": list(KERNEL_MODULES)}
    assert quiet.stderr == ""


# --------------------------------------------------------------------------------------
# allreduce
# --------------------------------------------------------------------------------------
def test_allreduce_json_matches_the_collectives_engine():
    from scwork import collectives

    data = json.loads(run("allreduce", "--topology", "torus:4x4", "--cores-per-chip", "2", "--algorithm",
                          "rotated_pincer", "multi_color", "--bytes", "16MiB", "--chip", "v5p", "--json").stdout)
    net = collectives.Network.grid((4, 4), (True, True), cores_per_chip=2, chip="v5p")
    assert data["network"] == net.name and data["nodes"] == 32 and data["bytes"] == 16 * 2**20
    assert [row["algorithm"] for row in data["algorithms"]] == ["rotated_pincer", "multi_color"]
    for row in data["algorithms"]:
        sched = collectives.build(row["algorithm"], net)
        c = collectives.cost(sched, nbytes=16 * 2**20)
        assert row["steps"] == sched.num_steps and row["transfers"] == sched.num_transfers
        assert row["time_s"] == pytest.approx(float(c["total_time"]))
        assert row["conflicts"] == len(sched.conflicts())
        assert row["algbw_GBps"] == pytest.approx(16 * 2**20 / row["time_s"] / 1e9)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 * 31 / 32)
    assert data["link_bandwidth_Bps"] == scwork.hardware.get("v5p").ici_link_bytes_per_s


def test_allreduce_all_skips_algorithms_that_do_not_run_on_the_network():
    data = json.loads(run("allreduce", "--topology", "ring:8", "--all", "--json").stdout)
    names = [row["algorithm"] for row in data["algorithms"]]
    assert "pincer" in names and "mesh_loops" not in names
    assert all(row["collective"] == "all_reduce" for row in data["algorithms"])
    assert [s["algorithm"] for s in data["skipped"]] == ["mesh_loops"]
    assert "2 cores per chip" in data["skipped"][0]["reason"]
    # The point of [md-allreduce]: the rotated pincer beats the single path by far on a ring.
    by_name = {row["algorithm"]: row for row in data["algorithms"]}
    assert by_name["rotated_pincer"]["time_s"] < by_name["single_path"]["time_s"] / 4


def test_allreduce_text_table_and_grid_spec():
    out = run("allreduce", "--topology", "grid:16x4:wrap=10", "--algorithm", "dimension_by_dimension").stdout
    assert "on a 16x4 grid (wrap=T,F) of 64 chips (64 nodes)" in out
    header = next(line for line in out.splitlines() if line.startswith("algorithm"))
    for column in ("steps", "transfers", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "conflicts"):
        assert column in header
    assert any(line.startswith("dimension_by_dimension") for line in out.splitlines())


def test_allreduce_prints_the_algorithm_asked_for_and_the_schedule_built(monkeypatch, capsys):
    """--algorithm ring printed the engine's schedule name (bidirectional_ring) instead of the name asked for."""
    from scwork import cli, collectives

    # An engine whose "ring" builds the bidirectional ring schedule.
    monkeypatch.setitem(collectives.ALGORITHMS, "ring",
                        lambda net, **kw: collectives.ring_all_reduce(net, bidirectional=True, **kw))
    assert cli.main(["allreduce", "--topology", "ring:8", "--algorithm", "ring"]) == 0
    out = capsys.readouterr().out
    assert "on a ring of 8 chips (8 nodes)" in out
    assert any(line.startswith("ring (bidirectional ring schedule)  ") for line in out.splitlines()), out
    assert cli.main(["allreduce", "--topology", "ring:8", "--algorithm", "ring", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["algorithms"][0]
    assert (row["algorithm"], row["schedule"]) == ("ring", "bidirectional_ring")


def test_allreduce_schedule_column_with_the_real_engine():
    data = json.loads(run("allreduce", "--topology", "ring:8", "--algorithm", "single_path", "multi_color",
                          "--json").stdout)
    assert [(r["algorithm"], r["schedule"]) for r in data["algorithms"]] == [("single_path", "single_path"),
                                                                          ("multi_color", "ring")]
    assert data["network"] == "8 ring" and data["network_description"] == "a ring of 8 chips"
    out = run("allreduce", "--topology", "ring:8", "--cores-per-chip", "2", "--algorithm", "single_path",
              "multi_color").stdout
    lines = out.splitlines()
    assert "on a ring of 8 chips, 2 cores per chip (16 nodes)" in lines[0]
    assert any(line.startswith("multi_color (ring schedule)") for line in lines)
    assert any(line.startswith("single_path ") for line in lines)


@pytest.mark.parametrize("args, fragment", [
    (("--topology", "cube:4"), "expected KIND:DIMS"),
    (("--topology", "torus:4xfour"), "dimensions must be integers"),
    (("--topology", "grid:16x4:wrap=1"), "one 1/0 per dimension"),
    (("--topology", "ring:1"), "a ring needs at least 2 chips"),
    (("--topology", "ring:8", "--algorithm", "mesh_loops"), "does not run on a ring of 8 chips"),
    (("--topology", "ring:8", "--algorithm", "warp_drive"), "unknown algorithm 'warp_drive'"),
    (("--topology", "ring:8", "--bytes", "lots"), "size such as"),
    (("--topology", "ring:8", "--all", "--algorithm", "ring"), "not both"),
    (("--topology", "ring:8", "--chip", "v9"), "Unknown chip 'v9'"),
    (("--topology", "ring:8", "--cores-per-chip", "4000"), "--cores-per-chip 4,000 is more than 16"),
    (("--topology", "ring:8", "--pipeline-chunks", str(10**20)), "--pipeline-chunks must be between 1 and"),
    (("--topology", "ring:8", "--pipeline-chunks", "0"), "--pipeline-chunks must be between 1 and"),
])
def test_allreduce_bad_input(args, fragment):
    assert_bad_input(run("allreduce", *args, check=False), fragment)


# --------------------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------------------
def test_memory_example_fits_exit_0():
    result = run("memory", "--config", str(EXAMPLE))
    assert result.returncode == 0
    assert "SPMEM per tile" in result.stdout and "HBM per chip at the peak" in result.stdout
    assert result.stdout.rstrip().endswith("fits")
    data = json.loads(run("memory", "--config", str(EXAMPLE), "--json").stdout)
    report = scwork.config.load_config(EXAMPLE).plan_memory()
    assert data["fits"] is True and data["fixes"] == []
    assert data["summary"]["peak_hbm_bytes"] == report.peak_hbm_bytes
    assert [row["stack"] for row in data["spmem_per_tile"]] == list(report.spmem.stacks)


def test_memory_overrides_reach_the_model():
    data = json.loads(run("memory", "--config", str(EXAMPLE), "--batch-size", "8192", "--num-chips", "8",
                          "--dense-weights-bytes", "1GiB", "--num-serialized-tables", "2", "--json").stdout)
    summary = data["summary"]
    assert summary["batch_size"] == 8192 and summary["num_chips"] == 8
    assert summary["dense_weights_bytes_at_peak"] == 2**30
    cfg = scwork.config.load_config(EXAMPLE)
    cfg = cfg.replace(topology=scwork.Topology.for_chip("v5p", num_chips=8))
    expected = cfg.plan_memory(batch_size=8192, dense_weights_bytes=2**30, num_serialized_tables=2)
    assert summary["peak_hbm_bytes"] == expected.peak_hbm_bytes


#: A valid model that does not fit in SPMEM (eight large tables in one stack).
NOT_FITTING = EXAMPLE.with_name("does_not_fit.toml").read_text()


def test_memory_does_not_fit_exit_1_with_diagnoses_and_fixes(tmp_path):
    path = tmp_path / "big.toml"
    path.write_text(NOT_FITTING)
    result = run("memory", "--config", str(path), check=False)
    assert result.returncode == 1
    assert "DOES NOT FIT" in result.stdout
    assert "[error] Gather operand too large" in result.stdout
    assert "Each of these changes alone makes the model fit:" in result.stdout
    data = json.loads(run("memory", "--config", str(path), "--json", check=False).stdout)
    assert data["fits"] is False
    assert data["diagnoses"][0]["code"] == "spmem_gather_operand_too_large"
    fixes = {f["parameter"]: f["value"] for f in data["fixes"]}
    assert fixes["stage_gather_operands_in_hbm"] is True
    # Applying a fix the command proposed makes it fit (exit 0).
    fixed = run("memory", "--config", str(path), "--batch-size", str(fixes["batch_size"]), check=False)
    assert fixed.returncode == 0, fixed.stdout
    assert run("memory", "--config", str(path), "--stage-gather-operands-in-hbm", check=False).returncode == 0


def test_memory_bad_config_exit_2_names_file_and_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(EXAMPLE.read_text().replace("embedding_dim = 16", "embeding_dim = 16"))
    assert_bad_input(run("memory", "--config", str(path), check=False),
                     f"{path}: tables[2].embeding_dim: unknown key", "did you mean 'embedding_dim'?")
    assert_bad_input(run("memory", "--config", str(tmp_path / "missing.toml"), check=False),
                     "cannot read the config file")
    assert_bad_input(run("memory", "--config", str(EXAMPLE), "--batch-size", "100", check=False),
                     "multiple of 16")
    assert_bad_input(run("memory", "--config", str(EXAMPLE), "--limits", "512", check=False),
                     "expected MAX_IDS,MAX_UNIQUE_IDS")


# --------------------------------------------------------------------------------------
# stats
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ids_csv(tmp_path_factory):
    """300 samples of the example model's four columns (several ids per cell, '|'-separated)."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("ids") / "ids.csv"
    lines = ["user_id,clicked,viewed,category"]
    for _ in range(300):
        clicked = "|".join(map(str, rng.zipf(1.3, size=rng.integers(0, 30)) % 2_000_000))
        viewed = "|".join(map(str, rng.integers(0, 2_000_000, size=rng.integers(0, 50))))
        category = "|".join(map(str, rng.integers(0, 1000, size=3)))
        lines.append(f"{rng.integers(0, 10**6)},{clicked},{viewed},{category}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _expected_stats(ids_csv, batch_size=64, **tune):
    """What the command must report, computed in-process with the library."""
    from scwork.sharding import collect_stats, tune_limits

    cfg = scwork.config.load_config(EXAMPLE)
    table = scwork.datasets.load_table(ids_csv, batch_size=batch_size, drop_remainder=True)
    batches = [{f.name: b[cfg.columns[f.name]] for f in cfg.features} for b in table.batches()]
    steps = collect_stats(batches, cfg.features, cfg.topology, stacking=cfg.stacking, config=cfg.sparsecore_config,
                          progress=False)
    return steps, tune_limits(steps, **tune)


def test_stats_on_a_csv_file_writes_limits_and_fdo(ids_csv, tmp_path):
    from scwork.sharding import read_fdo_stats, read_limits

    out = tmp_path / "limits.json"
    result = run("stats", str(ids_csv), "--config", str(EXAMPLE), "--batch-size", "64", "--out", str(out),
                 "--fdo-dir", str(tmp_path / "fdo"), "--json")
    data = json.loads(result.stdout)
    steps, tuned = _expected_stats(ids_csv)
    assert data["steps"] == 4 == steps.sizes["step"]  # 300 samples: 4 full batches of 64
    assert read_limits(out).stack_limits() == tuned.stack_limits()
    assert data["out"] == str(out)
    rows = {row["stack"]: row for row in data["stacks"]}
    for stack in steps["stack"].values.tolist():
        row = rows[stack]
        assert row["observed_max_ids"] == int(steps["observed_max_ids"].sel(stack=stack).max())
        assert row["observed_max_unique_ids"] == int(steps["observed_max_unique_ids"].sel(stack=stack).max())
        assert row["observed_buffer"] == int(steps["observed_required_buffer_size"].sel(stack=stack).max())
        assert (row["max_ids_per_partition"], row["max_unique_ids_per_partition"]) == tuned.stack_limits()[stack]
    assert rows["item"]["configured_max_ids"] == 1024
    fdo = read_fdo_stats(tmp_path / "fdo")
    assert sorted(fdo.stacks) == sorted(rows)
    assert fdo.to_limits()["item"].max_ids_per_partition == rows["item"]["observed_max_ids"]


def test_stats_text_csv_limits_and_percentile(ids_csv, tmp_path):
    from scwork.sharding import read_limits

    out = tmp_path / "limits.csv"
    result = run("stats", str(ids_csv), "--config", str(EXAMPLE), "--batch-size", "64", "--steps", "3",
                 "--percentile", "50", "--out", str(out))
    assert "3 steps of 64 samples" in result.stdout and "50th percentile" in result.stdout
    assert f"wrote limits to {out}" in result.stdout
    header = next(line for line in result.stdout.splitlines() if line.startswith("stack"))
    assert "tuned max ids" in header and "max unique" in header
    steps, _ = _expected_stats(ids_csv)
    from scwork.sharding import tune_limits

    expected = tune_limits(steps.isel(step=slice(0, 3)), method="percentile", percentile=50)
    assert read_limits(out).stack_limits() == expected.stack_limits()


def test_stats_on_a_directory_of_shards_matches_stats_over_dataset(tmp_path):
    from scwork.sharding import stats_over_dataset

    folder = tmp_path / "shards"
    scwork.datasets.write_synthetic_parquet(folder, 3, rows_per_shard=100,
                                            features=["user_id", "clicked", "viewed", "category"],
                                            vocab_size=1000, seed=1)
    data = json.loads(run("stats", str(folder), "--config", str(EXAMPLE), "--batch-size", "64", "--json",
                          "--scheduler", "sync").stdout)
    cfg = scwork.config.load_config(EXAMPLE)
    expected = stats_over_dataset(folder, cfg.features, cfg.topology, batch_size=64, config=cfg.sparsecore_config,
                                  columns=dict(cfg.columns), scheduler="sync", progress=False)
    assert data["steps"] == expected.num_steps == 4
    got = {row["stack"]: (row["max_ids_per_partition"], row["max_unique_ids_per_partition"])
           for row in data["stacks"]}
    assert got == expected.stack_limits()
    glob_run = json.loads(run("stats", str(folder / "*.parquet"), "--config", str(EXAMPLE), "--batch-size", "64",
                              "--json", "--steps", "2").stdout)
    assert glob_run["steps"] == 2


def test_stats_bad_input(ids_csv, tmp_path):
    base = ("stats", str(ids_csv), "--config", str(EXAMPLE), "--batch-size", "64")
    assert_bad_input(run(*base, "--out", str(tmp_path / "limits.txt"), check=False),
                     "name the limits file .json or .csv")
    assert_bad_input(run(*base, "--method", "max", "--percentile", "90", check=False),
                     "--percentile applies to --method percentile")
    assert_bad_input(run(*base, "--scheduler", "tcp://localhost:1", check=False), "IDS is a single file")
    assert_bad_input(run("stats", str(ids_csv), "--config", str(EXAMPLE), check=False),  # batch 4096 > 300 rows
                     "fewer than one batch of 4096")
    bad_columns = tmp_path / "other.csv"
    bad_columns.write_text("user,clicked\n1,2\n")
    assert_bad_input(run("stats", str(bad_columns), "--config", str(EXAMPLE), "--batch-size", "16", check=False),
                     "user_id")
    assert_bad_input(run("stats", str(tmp_path / "nothing*.parquet"), "--config", str(EXAMPLE), check=False),
                     "no file matches")


def _one_line_error_in_process(capsys, argv, *fragments):
    from scwork import cli

    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err


def test_stats_writes_no_output_when_another_output_is_bad(ids_csv, tmp_path, capsys):
    """`--out out.json --fdo-dir FILE` exited 2 but had already written out.json."""
    base = ["stats", str(ids_csv), "--config", str(EXAMPLE), "--batch-size", "64"]
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    out = tmp_path / "out.json"
    _one_line_error_in_process(capsys, [*base, "--out", str(out), "--fdo-dir", str(a_file)],
                               f"--fdo-dir {a_file}: is a file, not a folder")
    assert not out.exists()
    out.write_text("old limits")
    _one_line_error_in_process(capsys, [*base, "--out", str(out), "--fdo-dir", str(a_file / "sub")],
                               "is a file, so the folder cannot be created there")
    assert out.read_text() == "old limits"
    # The other way round: a bad --out leaves the FDO folder uncreated.
    fdo = tmp_path / "fdo"
    _one_line_error_in_process(capsys, [*base, "--out", str(tmp_path / "missing" / "l.json"), "--fdo-dir", str(fdo)],
                               "does not exist")
    (tmp_path / "folder.json").mkdir()
    _one_line_error_in_process(capsys, [*base, "--out", str(tmp_path / "folder.json"), "--fdo-dir", str(fdo)],
                               "is a directory")
    _one_line_error_in_process(capsys, [*base, "--out", str(fdo / "x.json"), "--fdo-dir", str(fdo)], "does not exist")
    assert not fdo.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "folder.json", "out.json"]


def test_stats_outputs_are_all_or_nothing_when_a_writer_fails(ids_csv, tmp_path, capsys, monkeypatch):
    """A failure while writing the second output leaves the first one as it was and no temporary files."""
    from scwork import cli, sharding
    from scwork.errors import ConfigError

    def failing_fdo_writer(*args, **kwargs):
        raise ConfigError("disk full (simulated)")

    monkeypatch.setattr(sharding, "write_fdo_stats", failing_fdo_writer)
    out = tmp_path / "out.json"
    out.write_text("old limits")
    fdo = tmp_path / "new" / "fdo"
    argv = ["stats", str(ids_csv), "--config", str(EXAMPLE), "--batch-size", "64", "--out", str(out),
            "--fdo-dir", str(fdo)]
    assert cli.main(argv) == 2
    assert "disk full (simulated)" in capsys.readouterr().err
    assert out.read_text() == "old limits"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]     # no temporary file, no new folder
    monkeypatch.undo()
    assert cli.main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text())["stacks"] and Path(data["fdo_file"]).parent == fdo
    assert sorted(p.name for p in fdo.iterdir()) == [Path(data["fdo_file"]).name]   # the staging folder is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "out.json"]


def test_stats_out_of_vocabulary_ids(tmp_path):
    path = tmp_path / "oov.csv"
    rows = ["user_id,clicked,viewed,category"] + [f"{i},1,2,{5000 + i}" for i in range(32)]
    path.write_text("\n".join(rows) + "\n")
    base = ("stats", str(path), "--config", str(EXAMPLE), "--batch-size", "16")
    assert_bad_input(run(*base, check=False), "category")
    dropped = json.loads(run(*base, "--on-out-of-vocabulary", "drop", "--json").stdout)
    assert dropped["steps"] == 2


def test_stats_says_how_many_rows_the_partial_batch_leaves_unused(ids_csv):
    """300 rows in batches of 64 used 256 of them and said nothing about the other 44."""
    base = ("stats", str(ids_csv), "--config", str(EXAMPLE), "--batch-size", "64")
    data = json.loads(run(*base, "--json").stdout)
    assert (data["rows"], data["steps"], data["unused_rows"], data["last_batch_size"]) == (300, 4, 44, 64)
    text = run(*base, env={"SCWORK_PROGRESS": "0"})
    note = [line for line in text.stderr.splitlines() if "not used" in line]
    assert len(note) == 1 and "the last 44 rows of 300 (a partial batch, fewer than 64) were not used" in note[0]
    assert "multiple of 16" in note[0]      # 44 rows cannot be kept: they do not divide over 16 slices
    assert "not used" not in text.stdout
    assert json.loads(run(*base, "--steps", "2", "--json").stdout)["unused_rows"] == 300 - 128
    quiet = run(*base, "--steps", "2", env={"SCWORK_PROGRESS": "0"})
    assert quiet.stderr == ""               # --steps chose to skip the rest: no note


def test_stats_keep_remainder_runs_the_partial_batch_as_a_last_step(ids_csv, tmp_path):
    from scwork.sharding import collect_stats

    path = tmp_path / "272.csv"                      # 4 batches of 64 and 16 rows over: one per slice
    path.write_text("".join(ids_csv.read_text().splitlines(keepends=True)[:273]))
    base = ("stats", str(path), "--config", str(EXAMPLE), "--batch-size", "64")
    dropped = run(*base, env={"SCWORK_PROGRESS": "0"})
    assert "the last 16 rows of 272" in dropped.stderr and "--keep-remainder runs them" in dropped.stderr
    data = json.loads(run(*base, "--keep-remainder", "--json").stdout)
    assert (data["steps"], data["unused_rows"], data["last_batch_size"]) == (5, 0, 16)
    kept = run(*base, "--keep-remainder", env={"SCWORK_PROGRESS": "0"})
    assert kept.stderr == "" and "5 steps of 64 samples (the last one of 16)" in kept.stdout
    alone = run("stats", str(path), "--config", str(EXAMPLE), "--keep-remainder", env={"SCWORK_PROGRESS": "0"})
    assert "1 step of 272 samples (a partial batch: --batch-size is 4,096)" in alone.stdout
    assert_bad_input(run("stats", str(path), "--config", str(EXAMPLE), check=False),
                     "272 samples, fewer than one batch of 4096; use a smaller --batch-size or --keep-remainder")
    # The same numbers from the library: the full batches, then the short one with the same stacking plan.
    cfg = scwork.config.load_config(EXAMPLE)
    table = scwork.datasets.load_table(path, batch_size=64)
    batches = [{f.name: b[cfg.columns[f.name]] for f in cfg.features} for b in table.batches()]
    plan = cfg.stacking_plan(64)
    parts = [collect_stats(group, cfg.features, cfg.topology, stacking=plan, config=cfg.sparsecore_config,
                           progress=False) for group in (batches[:4], batches[4:])]
    for row in data["stacks"]:
        assert row["observed_max_ids"] == max(int(p["observed_max_ids"].sel(stack=row["stack"]).max())
                                              for p in parts)
        assert row["observed_buffer"] == max(int(p["observed_required_buffer_size"].sel(stack=row["stack"]).max())
                                             for p in parts)
    assert int(parts[1]["observed_max_ids"].max()) > 0
    # --steps stopping before the partial batch leaves it out, whatever its size.
    assert json.loads(run(*base, "--keep-remainder", "--steps", "3", "--json").stdout)["steps"] == 3


def test_stats_keep_remainder_that_does_not_divide_is_a_usage_error(ids_csv, tmp_path):
    assert_bad_input(run("stats", str(ids_csv), "--config", str(EXAMPLE), "--batch-size", "64", "--keep-remainder",
                         check=False),
                     "--keep-remainder: the last partial batch would hold 44 samples (300 rows, batch size 64)",
                     "divide over 4 devices x 4 SparseCores = 16 slices", "nearest sizes that do are 32 and 48",
                     "288 or 304 rows", "leaves the same 12 rows over")
    folder = tmp_path / "shards"                     # the same rule for a directory of shards
    scwork.datasets.write_synthetic_parquet(folder, 3, rows_per_shard=100,
                                            features=["user_id", "clicked", "viewed", "category"],
                                            vocab_size=1000, seed=1)
    assert_bad_input(run("stats", str(folder), "--config", str(EXAMPLE), "--batch-size", "64", "--keep-remainder",
                         "--scheduler", "sync", check=False),
                     "would hold 44 samples (300 rows", "nearest sizes that do are 32 and 48")


def test_stats_keep_remainder_on_a_directory_of_shards(tmp_path):
    folder = tmp_path / "shards"
    scwork.datasets.write_synthetic_parquet(folder, 3, rows_per_shard=96,
                                            features=["user_id", "clicked", "viewed", "category"],
                                            vocab_size=1000, seed=1)
    base = ("stats", str(folder), "--config", str(EXAMPLE), "--batch-size", "64", "--scheduler", "sync", "--json")
    dropped = json.loads(run(*base).stdout)
    assert (dropped["rows"], dropped["steps"], dropped["unused_rows"]) == (288, 4, 32)
    kept = json.loads(run(*base, "--keep-remainder").stdout)
    assert (kept["steps"], kept["unused_rows"], kept["last_batch_size"]) == (5, 0, 32)


def test_stats_announces_the_first_use_compilation_on_stderr_only(ids_csv, monkeypatch, capsys):
    """The first run spent ~20 s compiling numba kernels without a word."""
    from scwork import _cli_stats, cli

    args = ["stats", str(ids_csv), "--config", str(EXAMPLE), "--batch-size", "64"]
    monkeypatch.setattr(_cli_stats, "_kernels_compiled", lambda: False)   # the stats command's module
    monkeypatch.setenv("SCWORK_PROGRESS", "1")            # progress on (as in a terminal)
    assert cli.main(args) == 0
    out, err = capsys.readouterr()
    assert err.count(cli.COMPILE_HINT) == 1 and "scwork warmup" in err and cli.COMPILE_HINT not in out
    assert cli.main([*args, "--json"]) == 0             # JSON runs stay quiet
    out, err = capsys.readouterr()
    assert cli.COMPILE_HINT not in out + err and json.loads(out)["steps"] == 4
    assert cli.main([*args, "--no-progress"]) == 0
    assert cli.COMPILE_HINT not in capsys.readouterr().err
    monkeypatch.delenv("SCWORK_PROGRESS")                 # automatic: said whether stderr is a terminal or not
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert err.count(cli.COMPILE_HINT) == 1 and len(err.splitlines()) <= 2  # one line (and the unused-rows note)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert cli.main(args) == 0
    assert cli.COMPILE_HINT in capsys.readouterr().err
    monkeypatch.undo()
    assert cli._kernels_compiled()                        # this process has run the engine: nothing to compile


def test_counts_have_the_right_plural():
    """The command printed "1 v5p (1 devices", "1 steps", "on 8 ring"."""
    from scwork import cli

    assert (cli._count(1, "device"), cli._count(2, "device"), cli._count(0, "row")) == ("1 device", "2 devices",
                                                                                       "0 rows")
    assert cli._count(3616, "row") == "3,616 rows"
    one = scwork.Topology.for_chip("v5p", num_chips=1)
    assert cli._topology_text(one) == "1 v5p chip (1 device x 4 SparseCores = 4 partitions)"
    assert cli._topology_text(scwork.Topology(2, 1)) == "2 chips (2 devices x 1 SparseCore = 2 partitions)"
    assert cli._network_text((8,), (True,), 1) == "a ring of 8 chips"
    assert cli._network_text((4, 4), (False, False), 2) == "a 4x4 mesh of 16 chips, 2 cores per chip"


# --------------------------------------------------------------------------------------
# the example files
# --------------------------------------------------------------------------------------
EXAMPLE_IDS = EXAMPLE.parent / "ids.csv.gz"


def test_the_example_ids_file_works_with_the_example_config_at_once():
    command = ("stats", "examples/ids.csv.gz", "--config", "examples/model.toml")
    assert "scwork " + " ".join(command) in scwork_readme_command_line_section()
    result = subprocess.run([*SCWORK, *command], capture_output=True, text=True, cwd=EXAMPLE.parent.parent,
                            env={**os.environ, "SCWORK_PROGRESS": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""              # one full batch: no unused rows, no note
    assert result.stdout.startswith("1 step of 4,096 samples from examples/ids.csv.gz on 4 v5p chips "
                                    "(4 devices x 4 SparseCores = 16 partitions)")
    stacks = [line.split()[0] for line in result.stdout.splitlines()[5:]]
    assert stacks == ["user", "item", "category"]


def test_the_example_ids_file_is_small_and_made_by_its_script(tmp_path):
    import importlib.util

    assert EXAMPLE_IDS.stat().st_size < 200_000
    spec = importlib.util.spec_from_file_location("make_ids", EXAMPLE.parent / "make_ids.py")
    make_ids = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_ids)
    assert make_ids.write(tmp_path / "ids.csv.gz").read_bytes() == EXAMPLE_IDS.read_bytes()
    table = scwork.datasets.load_table(EXAMPLE_IDS)
    cfg = scwork.config.load_config(EXAMPLE)
    assert table.num_samples == cfg.batch_size == 4096
    assert sorted(table.features) == sorted(set(cfg.columns.values()))


def scwork_readme_command_line_section() -> str:
    readme = (EXAMPLE.parent.parent / "README.md").read_text()
    return readme.split("## Command line", 1)[1].split("\n## ", 1)[0]


# --------------------------------------------------------------------------------------
# lab
# --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_lab_no_browser_prints_url_and_serves(tmp_path):
    pytest.importorskip("jupyterlab")
    process = subprocess.Popen(
        [*SCWORK, "lab", "--no-browser", "--port", "8899"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path,
    )
    try:
        line = process.stdout.readline()
        assert "http://127.0.0.1:" in line and "00_tour.ipynb" in line
        url = line.split(" at ", 1)[1].strip()
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    assert response.status == 200
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.5)
        assert process.poll() is None, "the server must keep serving"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_lab_refuses_a_port_out_of_range_in_one_line(capsys):
    """`scwork lab --port 70000` ended in an OverflowError traceback (found by tests/fuzz/test_fuzz_cli.py)."""
    from scwork import cli

    for port in ("70000", "-1"):
        assert cli.main(["lab", "--port", port]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "a TCP port is from 0 (any free one) to 65535" in err


def test_an_argument_with_a_newline_keeps_the_error_on_one_line(capsys):
    """`scwork layout layout $'\\n'` printed a two-line usage error (found by the fuzz)."""
    from scwork import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["layout", "layout", "\n"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == "scwork layout: error: unrecognized arguments: \\n (see scwork layout --help)\n"
    assert cli.main(["hardware", "v9\x1b[31m\nred"]) == 2          # a typed error: escaped, one line
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\\x1b[31m" in err


def test_a_file_name_that_is_not_utf8_prints_as_given(tmp_path, monkeypatch):
    """A Latin-1 file name on a strict UTF-8 stdout ended in a UnicodeEncodeError traceback (found by the fuzz)."""
    import io

    from scwork import cli

    config = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/mod\xe8le.toml"))
    config.write_text(EXAMPLE.read_text())
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert cli.main(["summary", "--config", str(config)]) == 0
    assert b"plan of " + os.fsencode(str(config)) + b": batch 4,096" in raw.getvalue()     # the bytes given
    assert stdout.errors == "strict"                                                      # restored


def test_a_closed_pipe_ends_quietly():
    """`scwork hardware --json | head -c 10` printed "Broken pipe" and exited 2."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)                      # the reader is gone before the first write
    try:
        run = subprocess.run([sys.executable, "-m", "scwork.cli", "hardware", "--json"], stdout=write_end,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert run.returncode == 141
    assert run.stderr == ""


def test_sizes_are_parsed_exactly_and_out_of_range_ones_refused():
    """parse_size('1e400') raised OverflowError; '12345678901234567' rounded through a float."""
    import subprocess
    import sys

    from scwork.config import parse_size
    from scwork.errors import ConfigError

    assert parse_size("12345678901234567") == 12345678901234567
    assert parse_size("1.5 GiB") == 3 * 2**29
    for bad in ("1e400", "9223372036854775808", "0.5", "1" * 100):
        with pytest.raises(ConfigError):
            parse_size(bad)
    run = subprocess.run([sys.executable, "-m", "scwork.cli", "allreduce", "--topology", "torus:4x4",
                          "--bytes", "1e400"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "out of range" in run.stderr and "Traceback" not in run.stderr


def test_cli_messages_of_issue_25(capsys):
    """Usable HBM is one number in memory and summary, stated; errors name the subcommand; no Python hints;
    plurals; an absurd batch is a usage error."""
    from scwork import cli

    assert cli.main(["memory", "--config", str(EXAMPLE)]) == 0
    memory_out = capsys.readouterr().out
    assert cli.main(["summary", "--config", str(EXAMPLE)]) == 0
    summary_out = capsys.readouterr().out
    usable = re.search(r"of ([\d.]+ GiB) usable", memory_out).group(1)
    assert f"/ {usable} (" in summary_out and "hbm (peak / usable)" in summary_out
    assert "/ 95.00 GiB" not in summary_out
    assert f"usable HBM: {usable} = the chip's 95.00 GiB less the 10% headroom" in summary_out
    assert "(usable HBM: the chip's 95.00 GiB less the 10% headroom kept free)" in memory_out
    # A misspelt option: the subcommand's own message, with the option meant.
    with pytest.raises(SystemExit) as exit_:
        cli.main(["memory", "--config", str(EXAMPLE), "--batchsize", "4096"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("scwork memory: error: unrecognized arguments: --batchsize 4096; did you mean --batch-size?")
    # An ids file of an unknown format: what the command reads, not a Python argument.
    assert cli.main(["summary", "--config", str(EXAMPLE), str(EXAMPLE)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scwork summary: error: IDS ") and ".csv, .tsv or .parquet" in err
    assert "sep=" not in err
    # A batch no SparseCore can take.
    for command in ("memory", "summary"):
        with pytest.raises(SystemExit) as exit_:
            cli.main([command, "--config", str(EXAMPLE), "--batch-size", "16000000000"])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"scwork {command}: error: argument --batch-size: 16,000,000,000 samples is more than "
                              "2,147,483,647")
    assert cli.MAX_BATCH_SIZE == 2**31 - 1


def test_plurals_of_one():
    from scwork import memory
    from scwork.collectives import Network
    from scwork.errors import TopologyError
    from scwork.hardware import Topology
    from scwork.sharding import FeatureSpec, TableSpec
    from scwork.summary import plan_summary

    table = TableSpec("t", vocab_size=1000, embedding_dim=8, max_ids_per_partition=64, max_unique_ids_per_partition=64)
    features = [FeatureSpec("f", table)]
    topology = Topology.for_chip("v5p", num_chips=1)
    report = memory.plan(features, topology, batch_size=64)
    assert "1 stack on" in repr(report) and "1 stacks" not in repr(report)
    summary = plan_summary(features, topology, batch_size=64)
    assert repr(summary).startswith("PlanSummary(1 chip, 1 stack, ")
    with pytest.raises(TopologyError, match=r"network with 1 core per chip has"):
        Network.grid((10**9,), (True,))
