"""Model config files: the example, TOML and JSON, and one clear error per bad input."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

import scwork
from scwork.config import (
    MemoryOptions,
    ModelConfig,
    load_config,
    parse_config,
    parse_size,
)
from scwork.errors import ConfigError
from scwork.sharding import FeatureSpec, SparsecoreConfig, TableSpec

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "model.toml"

BASE = {
    "batch_size": 64,
    "topology": {"chip": "v5p", "num_chips": 4},
    "tables": [
        {"name": "user", "vocab_size": 1000, "embedding_dim": 16, "max_ids_per_partition": 64,
         "max_unique_ids_per_partition": 32},
        {"name": "item", "vocab_size": 5000, "embedding_dim": 32, "combiner": "mean", "optimizer": "adam"},
        {"name": "tag", "vocab_size": 100, "embedding_dim": 8},
    ],
    "features": {"user_id": "user", "clicked": {"table": "item", "column": "clicks", "ids_per_sample": 5},
                 "tags": {"table": "tag"}},
}


def mutate(path: str, value, base=BASE):
    """A copy of ``base`` with the key at ``path`` (dots and [i]) set, or deleted when value is DELETE."""
    data = copy.deepcopy(base)
    parts = path.replace("]", "").replace("[", ".").split(".")
    node = data
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if value is DELETE:
        del node[int(last) if isinstance(node, list) else last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


DELETE = object()


# --------------------------------------------------------------------------------------
# valid configs
# --------------------------------------------------------------------------------------
def test_example_config_loads_into_engine_objects():
    cfg = load_config(EXAMPLE)
    assert type(cfg) is ModelConfig and cfg.batch_size == 4096
    assert [t.name for t in cfg.tables] == ["user", "item", "category"]
    assert all(isinstance(t, TableSpec) for t in cfg.tables)
    assert [f.name for f in cfg.features] == ["user_id", "clicked_items", "viewed_items", "category"]
    assert all(isinstance(f, FeatureSpec) for f in cfg.features)
    assert cfg.features[1].table is cfg.tables[1]   # both item features share one TableSpec
    assert cfg.topology == scwork.Topology.for_chip("v5p", num_chips=4)
    # every flag the file sets, and the defaults of those it leaves out
    assert cfg.sparsecore_config == SparsecoreConfig(allow_id_dropping=False, max_ids_per_chip_per_sample=64)
    assert [(t.vocab_size, t.embedding_dim, t.optimizer) for t in cfg.tables] == [
        (1_000_000, 64, "adagrad"), (2_000_000, 64, "adagrad"), (1_000, 16, "sgd")]
    assert cfg.batch_size == 4096 and cfg.stacking == "auto"
    assert cfg.memory.dense_weights_bytes == 2 * 2**30
    assert cfg.memory.maximum_parallel_iterations == 2
    assert dict(cfg.columns) == {"user_id": "user_id", "clicked_items": "clicked", "viewed_items": "viewed",
                                 "category": "category"}
    assert dict(cfg.ids_per_sample) == {"clicked_items": 20.0, "viewed_items": 40.0, "category": 3.0}


def test_example_config_plans_memory_like_the_engine_called_by_hand():
    cfg = load_config(EXAMPLE)
    report = cfg.plan_memory()
    by_hand = scwork.memory.plan(list(cfg.features), cfg.topology, batch_size=4096,
                                 config=cfg.sparsecore_config, maximum_parallel_iterations=2,
                                 dense_weights_bytes=2 * 2**30,
                                 ids_per_sample={"clicked_items": 20.0, "viewed_items": 40.0, "category": 3.0})
    assert report.fits == by_hand.fits
    assert report.peak_hbm_bytes == by_hand.peak_hbm_bytes
    assert report.summary()["dense_weights_bytes_at_peak"] == 2 * 2**30
    smaller = cfg.plan_memory(dense_weights_bytes=0)
    assert smaller.peak_hbm_bytes == report.peak_hbm_bytes - 2 * 2**30


def test_json_and_toml_describe_the_same_model(tmp_path):
    cfg = load_config(EXAMPLE)
    path = tmp_path / "model.json"
    path.write_text(json.dumps(cfg.to_dict()))
    again = load_config(path)
    assert again == cfg.replace(source=str(path))


def test_parse_config_builds_defaults():
    cfg = parse_config(mutate("features", DELETE))
    # Without [features]: one feature per table, named like it, reading its own column.
    assert [(f.name, f.table.name) for f in cfg.features] == [("user", "user"), ("item", "item"), ("tag", "tag")]
    assert dict(cfg.columns) == {"user": "user", "item": "item", "tag": "tag"}
    assert cfg.memory == MemoryOptions()
    assert cfg.sparsecore_config == SparsecoreConfig()
    assert cfg.limits is None and cfg.stack_limits is None


def test_table_fields_reach_table_spec():
    cfg = parse_config(BASE)
    item = cfg.tables[1]
    assert (item.combiner, item.optimizer, item.max_ids_per_partition) == ("mean", "adam", None)
    assert cfg.tables[0].max_unique_ids_per_partition == 32


def test_generic_topology_without_a_chip():
    cfg = parse_config(mutate("topology", {"num_chips": 8, "sparsecores_per_chip": 2, "shape": [2, 4],
                                           "wraparound": [False, True]}))
    assert cfg.topology.chip is None
    assert cfg.topology.num_partitions == 16
    assert cfg.topology.shape == (2, 4) and cfg.topology.wraparound == (False, True)


def test_topology_shape_alone_gives_the_chip_count():
    cfg = parse_config(mutate("topology", {"chip": "v5p", "shape": [2, 2]}))
    assert cfg.topology.num_chips == 4 and cfg.topology.shape == (2, 2)


def test_sparsecore_and_memory_sections():
    data = mutate("sparsecore", {"allow_id_dropping": True, "max_ids_per_table": {"item": 4096},
                                 "max_unique_ids_per_table": 512, "disable_table_stacking": True})
    data["memory"] = {"dtype": {"item": "bf16"}, "num_serialized_tables": 2, "headroom": 0.2,
                      "hbm_bytes": "16 GiB", "prefetch_bytes_per_step": 1 << 20,
                      "stage_gather_operands_in_hbm": True}
    cfg = parse_config(data)
    sc = cfg.sparsecore_config
    assert sc.allow_id_dropping and sc.disable_table_stacking
    assert dict(sc.max_ids_per_table) == {"item": 4096} and sc.max_unique_ids_per_table == 512
    kwargs = cfg.memory_kwargs()
    assert kwargs["dtype"] == {"item": "bf16"} and kwargs["num_serialized_tables"] == 2
    assert kwargs["hbm_bytes"] == 16 * 2**30 and kwargs["headroom"] == 0.2
    assert kwargs["stage_gather_operands_in_hbm"] is True
    assert kwargs["ids_per_sample"] == {"clicked": 5.0}
    assert kwargs["batch_size"] == 64 and kwargs["config"] is sc


def test_manual_stacking_reaches_the_plan():
    cfg = parse_config(mutate("stacking", [["user", "tag"], ["item"]]))
    assert cfg.stacking == (("user", "tag"), ("item",))
    plan = cfg.stacking_plan()
    assert sorted(s.table_names for s in plan.stacks) == [("item",), ("user", "tag")]
    assert parse_config(mutate("stacking", "none")).stacking is None


def test_limits_file_is_read_relative_to_the_config(tmp_path, monkeypatch):
    from scwork.sharding import write_limits

    folder = tmp_path / "cfg"
    folder.mkdir()
    write_limits({"user": (16, 8), "item": (32, 16), "tag": (8, 8)}, folder / "limits.json")
    data = mutate("limits_file", "limits.json")
    data["stacking"] = "none"
    (folder / "model.json").write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)  # not the config's folder
    cfg = load_config(folder / "model.json")
    assert cfg.stack_limits == {"user": (16, 8), "item": (32, 16), "tag": (8, 8)}
    plan = cfg.stacking_plan()
    assert plan.stack("item").max_ids_per_partition == 32
    assert cfg.memory_kwargs()["stack_limits"] == cfg.stack_limits


def test_config_is_frozen():
    cfg = parse_config(BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.batch_size = 128
    with pytest.raises(TypeError):
        cfg.columns["user_id"] = "other"
    with pytest.raises(TypeError):
        cfg.ids_per_sample["clicked"] = 1.0


def test_batch_size_is_optional_until_needed():
    cfg = parse_config(mutate("batch_size", DELETE))
    assert cfg.batch_size is None
    with pytest.raises(ConfigError, match=r"<dict>: batch_size: missing\. How to fix"):
        cfg.plan_memory()
    assert cfg.require_batch_size(128) == 128
    with pytest.raises(ConfigError, match="multiple of 16"):
        cfg.require_batch_size(100)


def test_repr_html_escapes_names():
    cfg = parse_config(mutate("tables[2].name", "<b>tag</b>", mutate("features", DELETE)))
    out = cfg._repr_html_()
    assert "&lt;b&gt;tag&lt;/b&gt;" in out and "<b>tag" not in out


# --------------------------------------------------------------------------------------
# sizes
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    (0, 0), (4096, 4096), ("4096", 4096), ("64MiB", 64 * 2**20), ("64 MiB", 64 * 2**20), ("1.5GB", 1_500_000_000),
    ("512KiB", 512 * 1024), ("2 gib", 2 * 2**30), ("10kB", 10_000), ("1e6", 1_000_000), ("1_000", 1000),
    ("3 B", 3), (2.0, 2),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("-1", ">= 0"), (-5, ">= 0"), ("lots", "size such as"), ("1.5", "whole number"), (True, "size in bytes"),
    ("3 XB", "size such as"), (None, "size in bytes"), (0.5, "whole number"),
])
def test_parse_size_rejects(text, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_size(text)


# --------------------------------------------------------------------------------------
# errors: file, key path, fix, one line
# --------------------------------------------------------------------------------------
BAD = [
    # (path, value, key path in the message, fragment of the message)
    ("batchsize", 64, "batchsize", "unknown key. How to fix: did you mean 'batch_size'?"),
    ("tables[1].vocab", 10, "tables[1].vocab", "did you mean 'vocab_size'?"),
    ("tables[0].vocab_size", -5, "tables[0].vocab_size", "must be >= 1, got -5"),
    ("tables[2].vocab_size", 0, "tables[2].vocab_size", "must be >= 1, got 0"),
    ("tables[2].embedding_dim", "64", "tables[2].embedding_dim", "must be an integer, got '64' (string)"),
    ("tables[1].embedding_dim", 2.5, "tables[1].embedding_dim", "must be an integer, got 2.5 (float)"),
    ("tables[0].name", DELETE, "tables[0].name", "missing (required)"),
    ("tables[0].max_ids_per_partition", 0, "tables[0].max_ids_per_partition", "must be >= 1"),
    ("tables[1].optimizer", "adamw", "tables[1].optimizer",
     "unknown optimizer 'adamw'. How to fix: did you mean 'adam'?"),
    ("tables[1].combiner", "avg", "tables[1].combiner", "unknown combiner 'avg'"),
    ("tables[1].name", "user", "tables[1].name", "duplicate table name 'user' (also tables[0])"),
    ("tables", [], "tables", "must be a non-empty array"),
    ("tables[0]", "user", "tables[0]", "must be a table of keys"),
    ("topology", DELETE, "topology", "missing (required)"),
    ("topology.chip", "v5x", "topology.chip", "unknown chip 'v5x'"),
    ("topology.chip", "bm1684x", "topology.chip", "Sophgo NPU, it has no SparseCores"),
    ("topology.chip", 5, "topology.chip", "must be a non-empty string"),
    ("topology.num_chips", -2, "topology.num_chips", "must be >= 1, got -2"),
    ("topology.num_chips", 100000, "topology.num_chips", "exceed the largest v5p slice"),
    ("topology.sparsecores_per_chip", 2, "topology.sparsecores_per_chip", "comes from the catalog"),
    ("topology.shape", [2, 3], "topology.shape", "holds 6 chips but num_chips = 4"),
    ("topology.wraparound", [True], "topology.wraparound", "needs topology.shape"),
    ("topology.numchips", 4, "topology.numchips", "did you mean 'num_chips'?"),
    ("features.user_id", "users", "features.user_id.table", "no table named 'users'. How to fix: did you mean 'user'?"),
    ("features.clicked.ids_per_sample", -1, "features.clicked.ids_per_sample", "must be a number > 0"),
    ("features.clicked.colum", "x", "features.clicked.colum", "did you mean 'column'?"),
    ("features", {}, "features", "is empty"),
    ("stacking", [["user", "nope"]], "stacking[0][1]", "no table named 'nope'"),
    ("stacking", [["user"], ["user", "tag"]], "stacking[1][0]", "already in stacking[0]"),
    ("stacking", "automatic", "stacking", "unknown value 'automatic'"),
    ("sparsecore.allow_id_dropping", "yes", "sparsecore.allow_id_dropping", "must be true or false"),
    ("sparsecore.max_ids_per_table", {"itm": 5}, "sparsecore.max_ids_per_table.itm", "did you mean 'item'?"),
    ("sparsecore.max_ids_per_chip_per_sample", 0, "sparsecore.max_ids_per_chip_per_sample", "must be >= 1"),
    ("sparsecore.allow_dropping", True, "sparsecore.allow_dropping", "did you mean 'allow_id_dropping'?"),
    ("memory.dense_weights_bytes", "-1 GiB", "memory.dense_weights_bytes", ">= 0 bytes"),
    ("memory.dense_weights_bytes", "lots", "memory.dense_weights_bytes", "size such as"),
    ("memory.hbm_bytes", 0, "memory.hbm_bytes", "must be >= 1 bytes"),
    ("memory.headroom", 1.5, "memory.headroom", "must be a number in [0, 1)"),
    ("memory.dtype", "fp8", "memory.dtype", "unknown dtype 'fp8'"),
    ("memory.dtype", {"nope": "bf16"}, "memory.dtype.nope", "no table named 'nope'"),
    ("memory.num_serialized_tables", -1, "memory.num_serialized_tables", "must be >= 0"),
    ("memory.maximum_parallel_iteration", 2, "memory.maximum_parallel_iteration",
     "did you mean 'maximum_parallel_iterations'?"),
    ("batch_size", 100, "batch_size", "does not split evenly over the 16 SparseCores"),
    ("batch_size", True, "batch_size", "must be an integer"),
    ("limits_file", "missing.json", "limits_file", "cannot read limits file"),
]


@pytest.mark.parametrize("path, value, key, fragment", BAD, ids=[f"{b[0]}={b[1]!r}"[:60] for b in BAD])
def test_bad_input_names_file_key_and_fix(path, value, key, fragment):
    with pytest.raises(ConfigError) as info:
        parse_config(mutate(path, value), source="model.toml")
    message = str(info.value)
    assert message.startswith(f"model.toml: {key}: "), message
    assert fragment in message, message
    assert "How to fix: " in message
    assert "\n" not in message
    assert info.value.key == key and info.value.file == "model.toml"


def test_first_error_in_a_later_table_still_refuses_the_whole_file(tmp_path):
    path = tmp_path / "model.toml"
    path.write_text(EXAMPLE.read_text().replace("vocab_size = 1_000\n", "vocab_size = -1_000\n"))
    with pytest.raises(ConfigError, match=r"model\.toml: tables\[2\]\.vocab_size: must be >= 1, got -1000"):
        load_config(path)


def test_invalid_toml_reports_the_line(tmp_path):
    path = tmp_path / "model.toml"
    path.write_text("batch_size = 64\n[topology\nchip = 'v5p'\n")
    with pytest.raises(ConfigError, match=r"model\.toml: invalid TOML: .*line 2"):
        load_config(path)


def test_invalid_json_reports_the_line(tmp_path):
    path = tmp_path / "model.json"
    path.write_text('{"batch_size": 64,\n "topology": }')
    with pytest.raises(ConfigError, match=r"model\.json: invalid JSON: .*line 2"):
        load_config(path)


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot tell the format .*'\.yaml'.*\.toml or \.json"):
        load_config(tmp_path / "model.yaml")
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read the config file"):
        load_config(tmp_path / "nope.toml")


def test_top_level_must_be_a_table(tmp_path):
    path = tmp_path / "model.json"
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"\(top level\): must be a table of keys"):
        load_config(path)


# -- root causes the config fuzz suite (tests/fuzz/test_fuzz_config.py) found -------------------
@pytest.mark.parametrize("suffix, text", [
    (".json", '{"batch_size": ' + "9" * 5000 + "}"),              # int() refuses > 4300 digits: ValueError
    (".toml", "batch_size = " + "9" * 5000),
    (".json", "[" * 100_000 + "]" * 100_000),                     # RecursionError
    (".toml", "a = " + "[" * 100_000 + "]" * 100_000),
])
def test_files_with_huge_numbers_or_deep_nesting_are_config_errors(tmp_path, suffix, text):
    path = tmp_path / f"model{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigError, match=str(path).replace("\\", "\\\\")):
        load_config(path)


@pytest.mark.parametrize("path", [3, None, "a\x00b.toml"])
def test_load_config_refuses_what_is_not_a_path(path):
    with pytest.raises(ConfigError):
        load_config(path)


def test_load_config_takes_bytes_paths(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('[topology]\nchip = "v5p"\nnum_chips = 1\n[[tables]]\nname = "t"\nvocab_size = 8\n'
                    "embedding_dim = 8\n")
    assert load_config(bytes(path)).tables[0].name == "t"


@pytest.mark.parametrize("value", [2**63, 1e30, 9.597345760216029e+214])
def test_parse_size_refuses_numbers_beyond_64_bits(value):
    with pytest.raises(ConfigError, match="64-bit size"):     # was accepted as it was
        parse_size(value)


def test_messages_about_huge_values_do_not_fail():
    tree = {"topology": {"chip": "v5p", "num_chips": 1},
            "tables": [{"name": "t", "vocab_size": 10**5000, "embedding_dim": 8}]}
    with pytest.raises(ConfigError, match="tables\\[0\\].vocab_size.*about 5000 digits"):
        parse_config(tree, source="m.toml")
