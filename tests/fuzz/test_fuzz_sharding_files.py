"""Fuzz: the sharding readers (limits JSON/CSV, FDO npz, Parquet/NPZ shards, CSV datasets).

Each case writes a valid file with scwork's own writer, then maybe mutates it
(truncation, flipped bits, spliced garbage, random bytes) and reads it back through
:func:`scwork.testing.check_surface`. A file must either read back (the unmutated
ones to exactly what was written) or raise a typed error naming the file; never an
untyped exception, a hang or unbounded memory.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scwork
from scwork import datasets
from scwork.errors import ScworkError
from scwork.sharding import FeatureSpec, TableSpec
from scwork.sharding.dataset_stats import stats_over_dataset, write_npz_shard
from scwork.sharding.limits_files import (
    FdoStats,
    Limits,
    read_fdo_stats,
    read_limits,
    write_fdo_stats,
    write_limits,
)
from scwork.testing import (
    check_surface,
    fuzz_settings,
    mutated_bytes,
    ragged_feature,
    report_wrong,
)

#: Public callables this module drives, and the surface label of their cases
#: (tests/fuzz/test_surface_coverage.py).
SURFACES = {
    "scwork.sharding.write_limits": "limits.write_json",
    "scwork.sharding.read_limits": "limits.read_json",
    "scwork.sharding.Limits": "limits.read_json",
    "scwork.sharding.write_fdo_stats": "fdo.write",
    "scwork.sharding.read_fdo_stats": "fdo.read",
    "scwork.sharding.FdoStats": "fdo.to_limits",
    "scwork.sharding.stats_over_dataset": "shards.read_npz",
}

_SETTINGS = fuzz_settings(HealthCheck.function_scoped_fixture)


def _named(surface: str, error: ScworkError, path: Path) -> None:
    """A typed error about a file must say which file."""
    if str(path) not in str(error) and path.name not in str(error):
        report_wrong(surface, f"the error does not name the file {path}: {error}")


limits_maps = st.dictionaries(
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6),
    st.tuples(st.integers(1, 2**31 - 1), st.integers(1, 2**31 - 1),
              st.one_of(st.none(), st.integers(0, 2**31 - 1))),
    min_size=1, max_size=3)


@settings(**_SETTINGS)
@given(limits=limits_maps, fmt=st.sampled_from(["json", "csv"]), data=st.data())
def test_limits_files(limits, fmt, data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"limits.{fmt}"
        written, error = check_surface(f"limits.write_{fmt}", lambda: write_limits(limits, path), seconds=10)
        if error is not None:
            return
        original = path.read_bytes()
        mutated = data.draw(mutated_bytes(original), label="file bytes")
        path.write_bytes(mutated)
        result, error = check_surface(f"limits.read_{fmt}", lambda: read_limits(path), seconds=10)
        if error is not None:
            _named(f"limits.read_{fmt}", error, path)
            return
        if mutated == original and result != Limits(limits):
            report_wrong(f"limits.read_{fmt}", f"read back {result!r}, wrote {limits!r}")


@settings(**_SETTINGS)
@given(values=st.lists(st.lists(st.integers(0, 2**40), min_size=1, max_size=4), min_size=1, max_size=2),
       data=st.data())
def test_fdo_files(values, data):
    with tempfile.TemporaryDirectory() as folder:
        stats = FdoStats({f"s{i}": np.array(v) for i, v in enumerate(values)},
                         {f"s{i}": np.array(v) for i, v in enumerate(values)})
        path, error = check_surface("fdo.write", lambda: write_fdo_stats(stats, folder, timestamp_ns=1), seconds=10)
        if error is not None:
            return
        original = path.read_bytes()
        mutated = data.draw(mutated_bytes(original), label="file bytes")
        path.write_bytes(mutated)
        result, error = check_surface("fdo.read", lambda: read_fdo_stats(folder), seconds=10)
        if error is not None:
            _named("fdo.read", error, path)
            return
        limits, error = check_surface("fdo.to_limits", result.to_limits, seconds=10)
        if mutated == original:
            if any(result.max_ids_per_partition[k].tolist() != stats.max_ids_per_partition[k].tolist()
                   for k in stats.max_ids_per_partition):
                report_wrong("fdo.read", "values changed on the round trip")
            too_big = max(max(v) for v in values) > 2**31 - 1
            if (error is not None) != too_big:
                report_wrong("fdo.to_limits", f"error {error!r} for values {values}")


@settings(**_SETTINGS)
@given(rows=st.integers(1, 8), kind=st.sampled_from(["npz", "npz-compressed", "parquet"]), data=st.data())
def test_shard_files(rows, kind, data):
    feature = data.draw(ragged_feature(rows, vocab=30, weighted=False), label="feature")
    topology = scwork.Topology(1, 1)
    specs = [FeatureSpec("f", TableSpec("t", 40, 8))]
    with tempfile.TemporaryDirectory() as folder:
        if kind == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            path = Path(folder) / "shard.parquet"
            ids, rs = feature
            pq.write_table(pa.table({"f": pa.ListArray.from_arrays(pa.array(rs.astype(np.int32)),
                                                                    pa.array(ids, pa.int64()))}), path)
        else:
            path = Path(folder) / "shard.npz"
            _, error = check_surface("shards.write_npz", lambda: write_npz_shard(
                path, {"f": feature}, compressed=kind == "npz-compressed"), seconds=10)
            if error is not None:
                return
        original = path.read_bytes()
        mutated = data.draw(mutated_bytes(original), label="file bytes")
        path.write_bytes(mutated)
        surface = f"shards.read_{kind.split('-')[0]}"
        result, error = check_surface(surface, lambda: stats_over_dataset(
            str(path), specs, topology, batch_size=1, progress=False), seconds=20)
        if error is not None:
            _named(surface, error, path)
            return
        if mutated == original and result.num_steps != rows:
            report_wrong(surface, f"{result.num_steps} steps from {rows} rows")


cells = st.one_of(st.integers(-3, 2**64), st.sampled_from(["", "1|2", "x", "1_000", "\u0661", "1e300", "3.0", "+5",
                                                            "9" * 30, "NaN", "-0"]))


@settings(**_SETTINGS)
@given(table=st.lists(st.lists(cells, min_size=2, max_size=2), min_size=0, max_size=5),
       suffix=st.sampled_from([".csv", ".tsv", ".csv.gz"]), data=st.data())
def test_csv_datasets(table, suffix, data):
    import gzip

    sep = "\t" if suffix == ".tsv" else ","
    text = "a" + sep + "b\n" + "".join(sep.join(str(c) for c in row) + "\n" for row in table)
    raw = text.encode("utf-8")
    if suffix.endswith(".gz"):
        raw = gzip.compress(raw)
    mutated = data.draw(mutated_bytes(raw), label="file bytes")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"data{suffix}"
        path.write_bytes(mutated)
        result, error = check_surface(f"datasets.load_table{suffix}", lambda: datasets.load_table(path),
                                      seconds=10)
        if error is not None:
            _named(f"datasets.load_table{suffix}", error, path)
            return
        for name, (ids, rs) in result.features.items():
            if ids.dtype != np.int64 or (ids.size and ids.min() < 0) or rs[-1] != ids.size:
                report_wrong(f"datasets.load_table{suffix}", f"column {name!r}: ids {ids!r}, splits {rs!r}")
