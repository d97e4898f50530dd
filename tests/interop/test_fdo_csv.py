"""FDO stats in CSV: scwork against jax-tpu-embedding's own ``CSVFileFDOClient``.

The library's CSV client (``jax_tpu_embedding/sparsecore/lib/fdo/csv_file_fdo_client.py``)
writes ``fdo_stats_<process>_<time_ns>.csv``: a ``key,values`` header, then one row
per key and recorded step, the values joined by spaces. Its ``load`` keeps the
latest file of every process and merges processes with an element-wise max.

Checked on hypothesis-generated histories (processes x steps x stacks, with and
without ``retain_history``):

- files the library writes are read by :func:`scwork.sharding.read_fdo_stats` (the
  folder's format found by itself) to the same arrays as the library's ``load``,
  and to the limits ``update_preprocessing_parameters`` puts on the specs;
- files scwork writes (``write_fdo_stats(..., format="csv")``) are byte for byte the
  library's file for the same history, and load in the library to the same arrays;
- ``scwork stats --fdo-dir D --fdo-format csv`` writes a file the library loads.

One difference found, kept deliberately: after a single recorded step the library's
``publish`` fails on ``id_drop_counters`` (a single count, which its writer iterates
over); scwork writes it as a row of one value, which the library's reader loads.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.errors import ConfigError, InputError
from scwork.sharding import FdoStats, read_fdo_stats, write_fdo_stats
from scwork.sharding.limits_files import read_fdo_stats_csv
from scwork.testing import oracle_examples

FIELDS = ("max_ids_per_partition", "max_unique_ids_per_partition", "required_buffer_size_per_sc")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model.toml"


@pytest.fixture(scope="module")
def csv_client():
    module = pytest.importorskip(
        "jax_tpu_embedding.sparsecore.lib.fdo.csv_file_fdo_client",
        reason="the FDO CSV oracle needs jax-tpu-embedding (Python >= 3.12: pip install -e '.[oracle]')")
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:
        pass
    return module


@pytest.fixture(scope="module")
def patch():
    """A monkeypatch that hypothesis examples may share (function-scoped fixtures may not)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield monkeypatch


@st.composite
def histories(draw):
    S, D = draw(st.sampled_from([2, 4])), draw(st.sampled_from([1, 2]))
    stacks = draw(st.lists(st.sampled_from(["zeta_alpha", "t0", "user_tokens", "b"]), min_size=1, max_size=3,
                           unique=True))
    processes, steps = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    value = st.integers(0, 50_000)
    P = D * S

    def counts(n):
        return np.array(draw(st.lists(value, min_size=n, max_size=n)), np.int64)

    history = [[{name: (counts(D * P), counts(D * P), counts(D * S), int(draw(value))) for name in stacks}
                for _ in range(steps)] for _ in range(processes)]
    # The library's writer fails on one step's drop counter (see the module docstring).
    drops = steps > 1 and draw(st.booleans())
    return S, D, stacks, history, drops, draw(st.booleans())


def _stats(module, step, drops):
    embedding = module.embedding
    return embedding.SparseDenseMatmulInputStats(
        max_ids_per_partition={k: v[0] for k, v in step.items()},
        max_unique_ids_per_partition={k: v[1] for k, v in step.items()},
        required_buffer_size_per_sc={k: v[2] for k, v in step.items()},
        id_drop_counters={k: v[3] for k, v in step.items()} if drops else {})


def _publish_with_the_library(module, patch, directory, history, drops, retain_history):
    clock = itertools.count(1_000)
    for process, steps in enumerate(history):
        patch.setattr(module.jax, "process_index", lambda process=process: process)
        patch.setattr(module.time, "time_ns", lambda: next(clock))
        client = module.CSVFileFDOClient(directory, retain_history=retain_history)
        for step in steps:
            client.record(_stats(module, step, drops))
        client.publish()


def _scwork_history(steps, drops, retain_history):
    """One process's recorded arrays as the library's ``record`` accumulates them."""
    fields = {}
    for i, field in enumerate(FIELDS + ("id_drop_counters",) if drops else FIELDS):
        fields[field] = {}
        for name in steps[0]:
            rows = [np.asarray(step[name][i], np.int64) for step in steps]
            array = np.vstack(rows) if len(rows) > 1 else rows[0]
            if not retain_history and array.ndim > 1:
                array = array.max(axis=0)
            fields[field][name] = array
    return FdoStats(**fields)


def _assert_same(ours, theirs, stacks, drops):
    for field in FIELDS + (("id_drop_counters",) if drops else ()):
        for name in stacks:
            np.testing.assert_array_equal(getattr(ours, field)[name], np.asarray(getattr(theirs, field)[name]),
                                          err_msg=f"{field} of {name}")


@settings(max_examples=oracle_examples(40), deadline=None)
@given(histories())
def test_library_csv_files_read_by_scwork(csv_client, patch, tmp_path_factory, case):
    S, D, stacks, history, drops, retain = case
    directory = tmp_path_factory.mktemp("fdo")
    _publish_with_the_library(csv_client, patch, directory, history, drops, retain)
    theirs = csv_client.CSVFileFDOClient(directory).load()
    ours = read_fdo_stats(directory)              # the format is found from the files
    assert all(f.endswith(".csv") for f in ours.files) and len(ours.files) == len(history)
    _assert_same(ours, theirs, stacks, drops)
    _assert_same(read_fdo_stats_csv(directory), theirs, stacks, drops)

    # The update rule on the library's specs equals scwork's limits.
    from jax_tpu_embedding.sparsecore.lib.nn import embedding as jte
    from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec as es

    specs = []
    for name in stacks:
        table = es.TableSpec(name=name, vocabulary_size=64, embedding_dim=8, initializer=lambda *a, **k: None,
                             optimizer=es.SGDOptimizerSpec(), combiner="sum")
        specs.append(es.FeatureSpec(name=f"f_{name}", table_spec=table, input_shape=[8, 1], output_shape=[8, 8]))
    jte.prepare_feature_specs_for_training(specs, global_device_count=D, num_sc_per_device=S)
    jte.update_preprocessing_parameters(specs, theirs, num_sc_per_device=S)
    limits = ours.to_limits()
    for spec in specs:
        stacked = spec.table_spec.stacked_table_spec
        got = limits[stacked.stack_name]
        # scwork's limits are at least 1 (an all-zero history gives the library 0)
        assert got.max_ids_per_partition == max(1, stacked.max_ids_per_partition)
        assert got.max_unique_ids_per_partition == max(1, stacked.max_unique_ids_per_partition)
        assert got.required_buffer_size * S == stacked.suggested_coo_buffer_size_per_device


@settings(max_examples=oracle_examples(40), deadline=None)
@given(histories())
def test_scwork_csv_files_equal_the_library_files_and_load_there(csv_client, patch, tmp_path_factory, case):
    S, D, stacks, history, drops, retain = case
    theirs_dir, ours_dir = tmp_path_factory.mktemp("theirs"), tmp_path_factory.mktemp("ours")
    _publish_with_the_library(csv_client, patch, theirs_dir, history, drops, retain)
    fields = FIELDS + ("id_drop_counters",) if drops else FIELDS
    for process, steps in enumerate(history):
        path = write_fdo_stats(_scwork_history(steps, drops, retain), ours_dir, process_index=process,
                               timestamp_ns=1_000 + process, fields=fields, format="csv")
        assert path.name == f"fdo_stats_{process}_{1_000 + process}.csv"
        assert path.read_bytes() == (theirs_dir / path.name).read_bytes()
    loaded = csv_client.CSVFileFDOClient(ours_dir).load()
    _assert_same(read_fdo_stats(ours_dir, format="csv"), loaded, stacks, drops)


def test_a_single_steps_drop_counter_is_written_as_one_value(csv_client, tmp_path):
    stats = FdoStats({"t": np.array([3, 9])}, {"t": np.array([1, 2])}, {"t": np.array([16, 8])},
                     {"t": np.array(5)})
    path = write_fdo_stats(stats, tmp_path, timestamp_ns=7, format="csv", fields=FIELDS + ("id_drop_counters",))
    assert path.read_text().splitlines() == ["key,values", "t_max_ids,3 9", "t_max_unique_ids,1 2",
                                             "t_required_buffer_size,16 8", "t_id_drop_counters,5"]
    loaded = csv_client.CSVFileFDOClient(tmp_path).load()
    np.testing.assert_array_equal(loaded.id_drop_counters["t"], [5])
    np.testing.assert_array_equal(read_fdo_stats(tmp_path).id_drop_counters["t"], [5])


def test_the_stats_command_writes_csv_the_library_loads(csv_client, tmp_path):
    rng = np.random.default_rng(1)
    ids = tmp_path / "ids.csv"
    lines = ["user_id,clicked,viewed,category"]
    for _ in range(128):
        clicked = "|".join(map(str, rng.zipf(1.3, size=rng.integers(1, 20)) % 2_000_000))
        viewed = "|".join(map(str, rng.integers(0, 2_000_000, size=rng.integers(1, 30))))
        lines.append(f"{rng.integers(0, 10**6)},{clicked},{viewed},{'|'.join(map(str, rng.integers(0, 1000, 3)))}")
    ids.write_text("\n".join(lines) + "\n")
    outputs = {}
    for fmt in ("csv", "npz"):
        result = subprocess.run(
            [sys.executable, "-m", "scwork.cli", "stats", str(ids), "--config", str(EXAMPLE), "--batch-size", "64",
             "--fdo-dir", str(tmp_path / fmt), "--fdo-format", fmt, "--json"],
            capture_output=True, text=True, env={**os.environ, "SCWORK_PROGRESS": "0"})
        assert result.returncode == 0, result.stderr
        outputs[fmt] = json.loads(result.stdout)["fdo_file"]
    assert outputs["csv"].endswith(".csv") and Path(outputs["csv"]).parent == tmp_path / "csv"
    theirs = csv_client.CSVFileFDOClient(tmp_path / "csv").load()
    from_npz = read_fdo_stats(tmp_path / "npz")
    assert sorted(theirs.max_ids_per_partition) == sorted(from_npz.stacks)
    _assert_same(from_npz, theirs, from_npz.stacks, drops=False)


# -- scwork's own checks (no library needed) ----------------------------------------------
def test_a_folder_with_both_formats_needs_format(tmp_path):
    stats = FdoStats({"t": np.array([4, 1])}, {"t": np.array([2, 1])}, {"t": np.array([8])})
    write_fdo_stats(stats, tmp_path, timestamp_ns=1)
    write_fdo_stats(FdoStats({"t": np.array([6, 1])}, {"t": np.array([2, 1])}, {"t": np.array([8])}), tmp_path,
                    timestamp_ns=2, format="csv")
    with pytest.raises(InputError, match="both formats .* pass format='npz' or format='csv'"):
        read_fdo_stats(tmp_path)
    assert read_fdo_stats(tmp_path, format="npz").max_ids_per_partition["t"].tolist() == [4, 1]
    assert read_fdo_stats(tmp_path, format="csv").max_ids_per_partition["t"].tolist() == [6, 1]
    with pytest.raises(ConfigError, match="format must be 'npz' or 'csv'"):
        read_fdo_stats(tmp_path, format="parquet")
    with pytest.raises(ConfigError, match="format must be 'npz' or 'csv'"):
        write_fdo_stats(stats, tmp_path, format="json")


@pytest.mark.parametrize("text, message", [
    ("t_max_ids,1 2\r\n", "line 1: the header must be 'key,values'"),
    ("key,values\r\nt_max_ids,1 2,3\r\n", "line 2: expected 'key,<values separated by spaces>', got 3 cells"),
    ("key,values\r\nt_max_ids,1 2.5\r\n", "line 2, key 't_max_ids': value '2.5' is not an integer"),
    ("key,values\r\nt_max_ids,1 2\r\nt_max_ids,1\r\n", "key 't_max_ids': its rows have different lengths"),
    ("key,values\r\nt_max_ids,1 -2\r\n", "key 't_max_ids': negative value -2"),
    ("key,values\r\nt_rows,1 2\r\n", "unexpected key 't_rows'"),
])
def test_malformed_csv_files_name_the_file_line_and_key(tmp_path, text, message):
    (tmp_path / "fdo_stats_0_1.csv").write_bytes(text.encode())
    with pytest.raises(InputError, match=message) as err:
        read_fdo_stats(tmp_path)
    assert "fdo_stats_0_1.csv" in str(err.value)


def test_only_the_latest_file_of_each_process_is_read(tmp_path):
    for ts, value in ((5, 100), (40, 3)):
        write_fdo_stats(FdoStats({"t": np.array([value])}, {"t": np.array([1])}), tmp_path, timestamp_ns=ts,
                        fields=FIELDS[:2], format="csv")
    write_fdo_stats(FdoStats({"t": np.array([[7], [2]])}, {"t": np.array([[1], [1]])}), tmp_path,
                    process_index=1, timestamp_ns=1, fields=FIELDS[:2], format="csv")
    got = read_fdo_stats(tmp_path)
    assert [Path(f).name for f in got.files] == ["fdo_stats_1_1.csv", "fdo_stats_0_40.csv"]
    assert got.max_ids_per_partition["t"].tolist() == [7]


def test_a_long_bad_value_is_shown_cut_at_40_characters():
    from scwork.sharding._fdo_csv import parse_fdo_csv

    bad = "x" * 39 + "yz" + "0" * 20          # 61 characters: the message shows exactly the first 40
    with pytest.raises(InputError) as err:
        parse_fdo_csv("f.csv", f"key,values\r\nt_max_ids,1 {bad}\r\n")
    assert f"value {'x' * 39 + 'y'!r} is not an integer" in str(err.value)


@pytest.mark.parametrize("text, message", [
    ("", "line 1: the header must be 'key,values' .*got ''"),                   # no header row at all
    ("id,values\r\nt_max_ids,1\r\n", "line 1: the header must be 'key,values'"),  # sorts before the header
    ("key,values\r\nt_max_ids\r\n", r"line 2: expected .* got 1 cells \['t_max_ids'\]"),
    ("key,values\r\n,1 2\r\n", r"line 2: expected .* got 2 cells \['', '1 2'\]"),       # no key
    ("key,values\r\nk,1,2,3,4\r\n", r"got 5 cells \['k', '1', '2'\]$"),            # the first 3 cells shown
])
def test_parse_fdo_csv_rejects_by_hand(text, message):
    from scwork.sharding._fdo_csv import parse_fdo_csv

    with pytest.raises(InputError, match=message):
        parse_fdo_csv("f.csv", text)


def test_parse_fdo_csv_skips_blank_lines_and_reads_on():
    from scwork.sharding._fdo_csv import parse_fdo_csv

    got = parse_fdo_csv("f.csv", "key,values\r\nt_max_ids,1 2\r\n\r\nt_max_unique_ids,3 4\r\n")
    assert {k: v.tolist() for k, v in got.items()} == {"t_max_ids": [1, 2], "t_max_unique_ids": [3, 4]}


def test_format_fdo_csv_refuses_three_dimensional_arrays():
    from scwork.sharding._fdo_csv import format_fdo_csv

    with pytest.raises(ConfigError, match=r"shape \(1, 2, 2\) cannot be written as CSV rows"):
        format_fdo_csv({"t_max_ids": np.zeros((1, 2, 2), np.int64)})
