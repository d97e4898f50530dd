"""Limits files: JSON/CSV round trips and validation, jax-tpu-embedding FDO files, applying limits."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import ConfigError, InputError
from scwork.sharding import (
    FdoStats,
    FeatureBatch,
    FeatureSpec,
    Limits,
    StackLimits,
    TableSpec,
    apply_limits,
    collect_stats,
    compute_stats,
    minibatch,
    plan_stacking,
    preprocess,
    read_fdo_stats,
    read_limits,
    tune_limits,
    write_fdo_stats,
    write_limits,
)
from scwork.sharding.limit_sources import with_table_limits
from scwork.sharding.fdo_files import _latest_files_by_process

HEADER = "stack,max_ids_per_partition,max_unique_ids_per_partition,required_buffer_size"

names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters=',"#'),
                min_size=1, max_size=12)
entries = st.tuples(st.integers(1, 2**31 - 1), st.integers(1, 2**31 - 1),
                    st.one_of(st.none(), st.integers(0, 2**31 - 1)))


# --------------------------------------------------------------------------------------
# scwork limits files
# --------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.dictionaries(names, entries, min_size=1, max_size=6), st.sampled_from(["json", "csv"]))
def test_round_trip(tmp_path_factory, data, fmt):
    lim = Limits(data, metadata={"who": "test"})
    path = write_limits(lim, tmp_path_factory.mktemp("lim") / f"limits.{fmt}")
    back = read_limits(path)
    assert back == lim and list(back) == list(lim)
    if fmt == "json":
        assert back.metadata == {"who": "test"}
        doc = json.loads(path.read_text())
        assert (doc["format"], doc["version"]) == ("scwork-limits", 1)
    else:
        lines = path.read_text().splitlines()
        assert lines[0] == "# scwork-limits version 1" and lines[1] == HEADER


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, match", [
    ('{"format": "scwork-limits", "version": 2, "stacks": {}}', "unsupported version 2"),
    ('{"format": "scwork-limits", "stacks": {}}', "missing key 'version'"),
    ('{"format": "other", "version": 1, "stacks": {}}', "key 'format'"),
    ('{"format": "scwork-limits", "version": 1, "stacks": {}, "extra": 1}', r"unknown top-level keys \['extra'\]"),
    ('{"format": "scwork-limits", "version": 1, "stacks": {"t": {"max_ids_per_partition": -8, '
     '"max_unique_ids_per_partition": 4}}}', r"stacks\['t'\]: max_ids_per_partition is negative \(-8\)"),
    ('{"format": "scwork-limits", "version": 1, "stacks": {"t": {"max_ids_per_partition": 8}}}',
     r"stacks\['t'\]: missing max_unique_ids_per_partition"),
    ('{"format": "scwork-limits", "version": 1, "stacks": {"t": {"max_ids_per_partition": 8.5, '
     '"max_unique_ids_per_partition": 4}}}', "max_ids_per_partition must be an integer, got 8.5"),
    ('{"format": "scwork-limits", "version": 1, "stacks": {"t": {"max_ids_per_partition": 8, '
     '"max_unique_ids_per_partition": 4, "max_idz": 3}}}', r"unknown fields \['max_idz'\]"),
    ('{"format": "scwork-limits", "version": 1, "stacks": {"t": {"max_ids_per_partition": 8, '
     '"max_unique_ids_per_partition": 0}}}', "max_unique_ids_per_partition is too small"),
    ('{"format": "scwork-limits", "version": 1, "stacks": {"t": {"max_ids_per_partition": 8, '
     '"max_unique_ids_per_partition": 4, "required_buffer_size": -1}}}', "required_buffer_size is negative"),
    ('{"format": "scwork-limits", "version": 1, "stacks": {"t": {"max_ids_per_partition": 4294967296, '
     '"max_unique_ids_per_partition": 4}}}', "above 2147483647"),
    ('{"format": "scwork-limits", "version": 1, "stacks": [1, 2]}', "'stacks' must be an object"),
    ('{"format": "scwork-limits", "version": 1, ', "not valid JSON"),
    ('{"format": "scwork-limits", "version": true, "stacks": {}}', "unsupported version True"),
])
def test_bad_json(tmp_path, text, match):
    p = _write(tmp_path, "bad.json", text)
    with pytest.raises(InputError, match=match) as info:
        read_limits(p)
    assert str(p) in str(info.value)


@pytest.mark.parametrize("text, match", [
    ("stack,max_ids_per_partition,max_unique_ids_per_partition\nt,8,4\n",
     r"line 1 \(header\).*missing \['required_buffer_size'\]"),
    (HEADER + ",extra\nt,8,4,,1\n", r"unknown \['extra'\]"),
    (HEADER + "\nt,8,-4,\n", r"row 2 \(stack 't'\): max_unique_ids_per_partition is negative"),
    (HEADER + "\nt,8,4,\nt,8,4,\n", r"row 3 \(stack 't'\): stack 't' appears twice"),
    (HEADER + "\nt,eight,4,\n", r"row 2 \(stack 't'\): max_ids_per_partition must be an integer, got 'eight'"),
    (HEADER + "\nt,8,4\n", "row 2: 3 cells but the header has 4 columns"),
    (HEADER + "\n,8,4,\n", "row 2: empty stack name"),
    (HEADER + "\nt,,4,\n", r"row 2 \(stack 't'\): missing max_ids_per_partition"),
    ("# scwork-limits version 7\n" + HEADER + "\n", "line 1: unsupported version '7'"),
    ("# something else\n" + HEADER + "\n", "line 1: a comment line must read"),
    ("", "empty file"),
])
def test_bad_csv(tmp_path, text, match):
    p = _write(tmp_path, "bad.csv", text)
    with pytest.raises(InputError, match=match) as info:
        read_limits(p)
    assert str(p) in str(info.value)


def test_csv_any_column_order_blank_lines_and_no_version_line(tmp_path):
    p = _write(tmp_path, "l.csv", "required_buffer_size,stack,max_unique_ids_per_partition,max_ids_per_partition\n"
                                  "64,a,4,8\n\n,b,2,16\n")
    lim = read_limits(p)
    assert lim["a"] == StackLimits(8, 4, 64) and lim["b"] == StackLimits(16, 2, None)


def test_format_from_suffix_and_unreadable(tmp_path):
    with pytest.raises(ConfigError, match="suffix"):
        write_limits({"t": (8, 4)}, tmp_path / "limits.txt")
    p = write_limits({"t": (8, 4)}, tmp_path / "limits.txt", format="csv")
    assert read_limits(p, format="csv")["t"] == StackLimits(8, 4)
    with pytest.raises(InputError, match="cannot read limits file"):
        read_limits(tmp_path / "missing.json")


def test_limits_object_validation():
    with pytest.raises(ConfigError, match=r"Limits\['t'\]: missing field 'max_unique_ids_per_partition'"):
        Limits({"t": {"max_ids_per_partition": 3}})
    with pytest.raises(ConfigError, match="must be a StackLimits"):
        Limits({"t": 5})
    with pytest.raises(ConfigError, match="non-empty strings"):
        Limits({"": (1, 1)})


# --------------------------------------------------------------------------------------
# apply: validate everything, then return new objects
# --------------------------------------------------------------------------------------
def _model():
    feats = [FeatureSpec("f", TableSpec("t", 100, 8)), FeatureSpec("g", TableSpec("u", 100, 8))]
    batch = FeatureBatch.from_ragged({"f": ([1, 2, 3, 5, 1, 9], [0, 3, 6]), "g": ([4, 4, 7], [0, 1, 3])})
    return feats, batch, scwork.Topology(1, 2)


def test_apply_file_to_plan_and_preprocess(tmp_path):
    feats, batch, topo = _model()
    plan = plan_stacking(feats, topo, stacking=None)
    p = write_limits({"t": (3, 3), "u": (8, 8)}, tmp_path / "l.json")
    sl = apply_limits(plan, p)
    assert sl == {"t": (3, 3), "u": (8, 8)}
    res = preprocess(batch, feats, topo, stacking=None, stack_limits=sl)
    assert res.csr["t"].buffer_size_per_sc == 8 * 2
    # targets: features + topology, a PreprocessResult, a MiniBatchPlan
    assert apply_limits(feats, p, topology=topo, stacking=None) == sl
    assert apply_limits(res, p) == sl
    assert apply_limits(minibatch(batch, feats, topo, stacking=None), p) == sl
    with pytest.raises(ConfigError, match="needs topology"):
        apply_limits(feats, p)


def test_apply_never_half_applies(tmp_path):
    feats, batch, topo = _model()
    plan = plan_stacking(feats, topo, stacking=None)
    p = _write(tmp_path, "l.csv", HEADER + "\nt,8,4,\nzz,8,4,\n")
    with pytest.raises(ConfigError, match=r"unknown stacks \['zz'\]"):
        apply_limits(plan, p)
    with pytest.raises(ConfigError, match=r"limits file .* unknown stacks \['zz'\]"):
        read_limits(p, stacks=plan)
    assert apply_limits(plan, p, strict=False) == {"t": (8, 4)}
    # a bad row anywhere: nothing is returned
    bad = _write(tmp_path, "bad.csv", HEADER + "\nt,8,4,\nu,8,-1,\n")
    with pytest.raises(InputError, match="row 3"):
        apply_limits(plan, bad)
    assert plan.stack("t").max_ids_per_partition is None       # the plan is untouched


def test_with_table_limits_returns_new_specs():
    feats, batch, topo = _model()
    new = with_table_limits(feats, Limits({"t": (1, 1)}))
    assert new[0].table.max_ids_per_partition == 1 and feats[0].table.max_ids_per_partition is None
    assert new[1] == feats[1]
    with pytest.raises(ConfigError, match=r"unknown tables \['x'\]"):
        with_table_limits(feats, {"x": (1, 1)})
    with pytest.raises(scwork.errors.LimitExceededError):
        compute_stats(batch, list(new), topo, stacking=None)


def test_tuned_limits_to_file(tmp_path):
    feats, _, topo = _model()
    data = scwork.datasets.synthetic(8, num_steps=3, features=["f", "g"], vocab_size=100, seed=1)
    tuned = tune_limits(collect_stats(data.batches(), feats, topo, stacking=None))
    p = write_limits(tuned, tmp_path / "tuned.json")
    back = read_limits(p)
    assert back.stack_limits() == tuned.stack_limits()
    assert back.metadata["source"] == "scwork.sharding.limits.tune_limits"
    assert Limits.from_stats(compute_stats(FeatureBatch(data.step(0)), feats, topo, stacking=None), round_to=8)


# --------------------------------------------------------------------------------------
# FDO stats files (jax-tpu-embedding NPZFileFDOClient)
# --------------------------------------------------------------------------------------
def test_fdo_record_and_publish_load(tmp_path):
    # file_fdo_client_test.py: test_record_and_publish_load
    st_ = FdoStats({"tab_one": np.array([10, 20, 30, 40])}, {"tab_one": np.array([1, 2, 3, 4])}, {})
    write_fdo_stats(st_, tmp_path)
    back = read_fdo_stats(tmp_path)
    assert back.max_ids_per_partition["tab_one"].tolist() == [10, 20, 30, 40]
    assert back.max_unique_ids_per_partition["tab_one"].tolist() == [1, 2, 3, 4]
    assert back.required_buffer_size_per_sc == {}


def test_fdo_multiple_records_stack_rows(tmp_path):
    # test_multiple_record: two recorded steps are vstacked, and load keeps the 2-D array of one file
    st_ = FdoStats({"tab_one": np.array([[10, 20, 30, 40], [10, 20, 30, 40]])},
                   {"tab_one": np.array([[1, 2, 3, 4], [1, 2, 3, 4]])}, {"tab_one": np.array([[256], [256]])})
    write_fdo_stats(st_, tmp_path)
    back = read_fdo_stats(tmp_path)
    assert back.max_ids_per_partition["tab_one"].shape == (2, 4)
    assert back.required_buffer_size_per_sc["tab_one"].tolist() == [[256], [256]]


def test_fdo_load_multiple_files_takes_max(tmp_path):
    np.savez(tmp_path / "fdo_stats_0_10.npz", t_one_max_ids=np.array([10, 20, 30, 40]),
             t_two_max_ids=np.array([50, 60, 70, 80]), t_one_max_unique_ids=np.array([1, 2, 3, 4]),
             t_two_max_unique_ids=np.array([5, 6, 7, 8]), t_one_required_buffer_size=np.array([64]),
             t_two_required_buffer_size=np.array([128]))
    np.savez(tmp_path / "fdo_stats_1_11.npz", t_one_max_ids=np.array([20, 10, 40, 30]),
             t_two_max_ids=np.array([60, 60, 80, 70]), t_one_max_unique_ids=np.array([2, 1, 4, 3]),
             t_two_max_unique_ids=np.array([6, 5, 8, 7]), t_one_required_buffer_size=np.array([128]),
             t_two_required_buffer_size=np.array([256]))
    back = read_fdo_stats(tmp_path)
    assert back.max_ids_per_partition["t_one"].tolist() == [20, 20, 40, 40]
    assert back.max_ids_per_partition["t_two"].tolist() == [60, 60, 80, 80]
    assert back.max_unique_ids_per_partition["t_two"].tolist() == [6, 6, 8, 8]
    assert back.required_buffer_size_per_sc["t_one"].tolist() == [128]
    lim = back.to_limits()
    assert lim["t_two"] == StackLimits(80, 8, 256)


def test_fdo_latest_files_by_process():
    # test_latest_files_by_process, same names and expected order
    files = ["temp/fdo_dumps/fdo_stats_0_10.npz", "temp/fdo_dumps/fdo_stats_0_20.npz",
             "temp/fdo_dumps/fdo_stats_0_30.npz", "temp/fdo_dumps/fdo_stats_1_09.npz",
             "temp/fdo_dumps/fdo_stats_0_40.npz", "temp/fdo_dumps/fdo_stats_2_10.npz"]
    assert _latest_files_by_process(files) == ["temp/fdo_dumps/fdo_stats_2_10.npz",
                                               "temp/fdo_dumps/fdo_stats_1_09.npz",
                                               "temp/fdo_dumps/fdo_stats_0_40.npz"]


def test_fdo_old_files_of_a_process_are_ignored(tmp_path):
    write_fdo_stats(FdoStats({"t": np.array([99])}, {"t": np.array([9])}, {}), tmp_path, timestamp_ns=1)
    write_fdo_stats(FdoStats({"t": np.array([5])}, {"t": np.array([2])}, {}), tmp_path, timestamp_ns=2)
    (tmp_path / "fdo_stats_notes.npz").write_bytes(b"not matched by the name pattern")
    back = read_fdo_stats(tmp_path)
    assert back.max_ids_per_partition["t"].tolist() == [5] and len(back.files) == 1


def test_fdo_from_engine_stats_layout(tmp_path):
    feats, batch, topo = _model()
    topo = scwork.Topology(2, 2)
    batch = FeatureBatch.from_ragged({"f": ([1, 2, 3, 5, 1, 9, 4, 4], [0, 3, 6, 7, 8]),
                                      "g": ([4, 4, 7], [0, 1, 2, 3, 3])})
    ds = compute_stats(batch, feats, topo, stacking=None)
    fdo = FdoStats.from_stats(ds)
    # max_ids: (device, partition) flattened device-major, required buffer: (device, sc)
    assert fdo.max_ids_per_partition["t"].tolist() == ds["max_ids_per_partition"].sel(stack="t").values.ravel().tolist()
    assert fdo.required_buffer_size_per_sc["u"].tolist() == \
        ds["required_buffer_size_per_sc"].sel(stack="u").values.ravel().tolist()
    p = write_fdo_stats(ds, tmp_path, process_index=1, timestamp_ns=5,
                        fields=("max_ids_per_partition", "max_unique_ids_per_partition",
                                "required_buffer_size_per_sc", "id_drop_counters"))
    assert p.name == "fdo_stats_1_5.npz"
    assert sorted(np.load(p).files) == sorted(f"{s}_{k}" for s in ("t", "u") for k in
                                              ("max_ids", "max_unique_ids", "required_buffer_size",
                                               "id_drop_counters"))
    lim = read_fdo_stats(tmp_path).to_limits()
    obs = Limits.from_stats(ds)
    assert lim.stack_limits() == obs.stack_limits()
    # steps: one row per step, as record() vstacks them
    data = scwork.datasets.synthetic(8, num_steps=3, features=["f", "g"], vocab_size=100, seed=1)
    steps = collect_stats(data.batches(), feats, topo, stacking=None)
    fdo = FdoStats.from_stats(steps)
    assert fdo.max_ids_per_partition["t"].shape == (3, 2 * 4)
    assert fdo.required_buffer_size_per_sc["t"].shape == (3, 2 * 2)


@pytest.mark.parametrize("arrays, match", [
    ({"t_max_idz": np.array([1])}, r"unexpected key 't_max_idz'"),
    ({"t_max_ids": np.array([-1, 3])}, r"key 't_max_ids': negative value -1"),
    ({"t_max_ids": np.array([1.5])}, r"key 't_max_ids': values must be integers"),
    ({"_max_ids": np.array([1])}, r"unexpected key '_max_ids'"),
])
def test_fdo_bad_files(tmp_path, arrays, match):
    np.savez(tmp_path / "fdo_stats_0_1.npz", **arrays)
    with pytest.raises(InputError, match=match) as info:
        read_fdo_stats(tmp_path)
    assert "fdo_stats_0_1.npz" in str(info.value)


def test_fdo_errors(tmp_path):
    with pytest.raises(InputError, match="no FDO stats files"):
        read_fdo_stats(tmp_path)
    np.savez(tmp_path / "fdo_stats_0_1.npz", t_max_ids=np.array([1, 2]))
    np.savez(tmp_path / "fdo_stats_1_1.npz", t_max_ids=np.array([1, 2, 3]))
    with pytest.raises(InputError, match="cannot be merged"):
        read_fdo_stats(tmp_path)
    os.remove(tmp_path / "fdo_stats_1_1.npz")
    with pytest.raises(InputError, match="has no max_unique_ids entry"):
        read_fdo_stats(tmp_path).to_limits()
    (tmp_path / "fdo_stats_2_1.npz").write_bytes(b"garbage")
    with pytest.raises(InputError, match="cannot read FDO stats file"):
        read_fdo_stats(tmp_path)
    with pytest.raises(ConfigError, match="unknown FDO fields"):
        write_fdo_stats(FdoStats(), tmp_path, fields=("max_idz",))


def test_apply_fdo_directory(tmp_path):
    feats, batch, topo = _model()
    np.savez(tmp_path / "fdo_stats_0_1.npz", t_max_ids=np.array([3, 7]), t_max_unique_ids=np.array([2, 5]))
    plan = plan_stacking(feats, topo, stacking=None)
    assert apply_limits(plan, tmp_path) == {"t": (7, 5)}


# -- issue 12: readers wrap every parser error; writers are all or nothing ---------------
_HEADER = "stack,max_ids_per_partition,max_unique_ids_per_partition,required_buffer_size\n"


@pytest.mark.parametrize("name, text, match", [
    ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("big.json", '{"format": "scwork-limits", "version": 1, "stacks": {"t": {"max_ids_per_partition": '
                 + "9" * 5000 + ', "max_unique_ids_per_partition": 1}}}', "not a readable JSON limits file"),
    ("digits.json", '{"format": "scwork-limits", "version": 1, "stacks": {"t": {"max_ids_per_partition": '
                    '"\u0661\u0662", "max_unique_ids_per_partition": 1}}}', r"stacks\['t'\]: max_ids_per_partition "
                                                                            "must be an integer"),
    ("huge.csv", _HEADER + "t," + "1" * (200 * 1024) + ",1,\n", r"huge.csv, line \d+: not readable as CSV"),
    ("long.csv", _HEADER + "t," + "1" * 5000 + ",1,\n", r"row 2 \(stack 't'\): max_ids_per_partition must be an "
                                                       r"integer, got '1111.*\(5000 characters\)"),
    ("over.csv", _HEADER + "t,2147483648,1,\n", "above 2147483647"),
])
def test_unreadable_limits_files_are_input_errors(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=match) as info:
        read_limits(path)
    assert str(path) in str(info.value) and len(str(info.value)) < 1000


def test_fdo_values_above_int32_name_file_and_stack(tmp_path):
    np.savez(tmp_path / "fdo_stats_0_1.npz", big_max_ids=np.array([2**31]), big_max_unique_ids=np.array([1]))
    stats = read_fdo_stats(tmp_path)
    with pytest.raises(InputError, match=r"fdo_stats_0_1.npz: stack 'big', key 'big_max_ids': the largest "
                                         r"value 2147483648 is above 2147483647"):
        stats.to_limits()


def test_fdo_merge_is_exact_across_dtypes(tmp_path):
    big = 2**53 + 1                      # not a float64: a merge through float64 would change it
    np.savez(tmp_path / "fdo_stats_0_1.npz", t_max_ids=np.array([big, 1], np.uint64))
    np.savez(tmp_path / "fdo_stats_1_1.npz", t_max_ids=np.array([1, 2], np.int64))
    assert read_fdo_stats(tmp_path).max_ids_per_partition["t"].tolist() == [big, 2]
    np.savez(tmp_path / "fdo_stats_2_1.npz", t_max_ids=np.array([1e300, 2.0]))
    with pytest.raises(InputError, match="fdo_stats_2_1.npz.*key 't_max_ids'.*above the int64 range"):
        read_fdo_stats(tmp_path)


def test_writers_validate_before_writing(tmp_path):
    from scwork.errors import ConfigError

    with pytest.raises(ConfigError, match="negative value"):
        write_fdo_stats(FdoStats({"t": np.array([-1])}, {"t": np.array([1])}), tmp_path / "fdo")
    assert not (tmp_path / "fdo").exists()
    with pytest.raises(ConfigError, match="values must be integers"):
        write_fdo_stats(FdoStats({"t": np.array([0.5])}, {"t": np.array([1])}), tmp_path / "fdo")
    assert not (tmp_path / "fdo").exists()
    target = tmp_path / "l.json"
    write_limits({"t": (16, 8)}, target)
    before = target.read_bytes()
    with pytest.raises(ConfigError):
        write_limits({"t": (-1, 8)}, target)
    assert target.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["l.json"]
    with pytest.raises(ConfigError, match="nothing was written"):
        write_limits({"t": (16, 8)}, tmp_path / "missing" / "l.csv")
