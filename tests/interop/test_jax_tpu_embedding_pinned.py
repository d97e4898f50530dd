"""jax-tpu-embedding specs and EmbeddingSpecProto messages written out by hand, no library.

tests/interop/test_jax_tpu_embedding.py compares with the library itself (the
``oracle`` extra); this file pins :mod:`scwork.interop.jax_tpu_embedding` on a stack
worked out by hand, read from a message dict and from duck-typed specs
(``SimpleNamespace``), and every consistency check on it.

The stack ``a_b`` on 2 devices x 4 SparseCores (P = 8 partitions), batch 16:

* table ``a``: 1000 rows of width 16, padded to round_up(1000, 8 x 8) = 1024 rows,
  128 per shard, at row 0 of every shard, rotation 0; feature ``fa`` at row offset 0;
* table ``b``: 100 rows of width 8, padded to 128 rows (16 per shard), at row 128 of
  every shard, rotation 4 (the SparseCores of a device); feature ``fb`` at row offset
  16, column offset 128 x 8 = 1024, column shift 4;
* the stack: (128 + 16) x 8 = 1152 rows of width max(16, 8) = 16, 32 samples.
"""

from __future__ import annotations

import copy
import re
from types import SimpleNamespace as NS

import pytest

import scwork
from scwork.errors import ConfigError, InputError
from scwork.interop.jax_tpu_embedding import (
    LIBRARY_DEFAULT_LIMIT,
    embedding_spec_message,
    format_embedding_spec,
    from_embedding_spec,
    from_jax_tpu_embedding,
    parse_embedding_spec,
    read_embedding_spec,
    write_embedding_spec,
)
from scwork.sharding import FeatureSpec, TableSpec, plan_stacking


def feature_spec(name, output_shape, row_offset, col_offset, col_shift):
    return {"feature_name": name, "input_shape": [16, 1], "output_shape": output_shape, "row_offset": row_offset,
            "col_offset": col_offset, "col_shift": col_shift}


MESSAGE = {"stacked_table_specs": [{
    "stack_name": "a_b", "stack_vocab_size": 1152, "stack_embedding_dim": 16, "total_sample_count": 32,
    "max_ids_per_partition": 64, "max_unique_ids_per_partition": 32, "num_sparsecores": 8,
    "activation_mem_bytes_limit": 2_097_152,
    "table_specs": [
        {"table_name": "a", "vocab_size": 1000, "embedding_dim": 16, "padded_vocab_size": 1024,
         "padded_embedding_dim": 16, "row_offset_in_shard": 0, "shard_rotation": 0, "combiner": "sum",
         "optimizer": {"type": "ADAM"}, "feature_specs": [feature_spec("fa", [16, 16], 0, 0, 0)]},
        {"table_name": "b", "vocab_size": 100, "embedding_dim": 8, "padded_vocab_size": 128,
         "padded_embedding_dim": 16, "row_offset_in_shard": 128, "shard_rotation": 4, "combiner": "sum",
         "optimizer": {"type": "ADAM"}, "feature_specs": [feature_spec("fb", [16, 8], 16, 1024, 4)]}]}]}


def stack_facts(stack):
    return (stack.name, [(t.name, t.row_offset_in_shard, t.shard_rotation, t.padded_vocab_size) for t in stack.tables],
            [f.name for f in stack.features], stack.embedding_dim, stack.max_ids_per_partition,
            stack.max_unique_ids_per_partition, stack.activation_mem_bytes_limit)


A_B = ("a_b", [("a", 0, 0, 1024), ("b", 128, 4, 128)], ["fa", "fb"], 16, 64, 32, 2_097_152)


def edited(edit):
    message = copy.deepcopy(MESSAGE)
    edit(message["stacked_table_specs"][0])
    return message


# -- the message ---------------------------------------------------------------------


def test_the_message_scwork_writes_is_the_hand_written_one():
    a = TableSpec("a", 1000, 16, combiner="sum", optimizer="adam")
    b = TableSpec("b", 100, 8, combiner="sum", optimizer="adam")
    plan = plan_stacking([FeatureSpec("fa", a), FeatureSpec("fb", b)], scwork.Topology(2, 4), [["a", "b"]],
                         batch_size=16, stack_limits={"a_b": {"max_ids_per_partition": 64,
                                                              "max_unique_ids_per_partition": 32}})
    assert embedding_spec_message(plan.features, plan) == MESSAGE
    # Limits the plan leaves unset: the library's default, 256.
    unset = plan_stacking(plan.features, scwork.Topology(2, 4), [["a", "b"]], batch_size=16)
    message = embedding_spec_message(unset.features, unset, batch_size=4, activation_mem_bytes_limit=1000,
                                     input_shapes={"fa": [4, 3]}, optimizers={"b": {"type": "SGD",
                                                                                    "learning_rate": 0.5}})
    stack = message["stacked_table_specs"][0]
    assert LIBRARY_DEFAULT_LIMIT == 256
    assert (stack["max_ids_per_partition"], stack["max_unique_ids_per_partition"]) == (256, 256)
    assert stack["activation_mem_bytes_limit"] == 1000 and stack["total_sample_count"] == 8      # 2 features x 4
    a_spec, b_spec = stack["table_specs"]
    assert a_spec["feature_specs"][0]["input_shape"] == [4, 3] and b_spec["feature_specs"][0]["input_shape"] == [4, 1]
    assert b_spec["feature_specs"][0]["row_offset"] == 4 and b_spec["feature_specs"][0]["output_shape"] == [4, 8]
    assert b_spec["optimizer"] == {"type": "SGD", "learning_rate": 0.5} and a_spec["optimizer"] == {"type": "ADAM"}
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ConfigError, match="activation_mem_bytes_limit must be a positive int"):
            embedding_spec_message(plan.features, plan, activation_mem_bytes_limit=bad)


def test_message_text_written_read_and_parsed(tmp_path):
    text = format_embedding_spec(MESSAGE)
    assert text.splitlines()[:9] == ["stacked_table_specs {", '  stack_name: "a_b"', "  stack_vocab_size: 1152",
                                     "  stack_embedding_dim: 16", "  total_sample_count: 32",
                                     "  max_ids_per_partition: 64", "  max_unique_ids_per_partition: 32",
                                     "  num_sparsecores: 8", "  table_specs {"]
    assert text.splitlines()[-3:] == ["  }", "  activation_mem_bytes_limit: 2097152", "}"]
    # Zeros are proto3 defaults: not written, so not read back; the rest reads back as written.
    read = parse_embedding_spec(text)
    assert "row_offset_in_shard: 0" not in text and "shard_rotation: 4" in text
    a_read = read["stacked_table_specs"][0]["table_specs"][0]
    assert "row_offset_in_shard" not in a_read and "shard_rotation" not in a_read
    assert a_read["feature_specs"] == [{"feature_name": "fa", "input_shape": [16, 1], "output_shape": [16, 16]}]
    assert read["stacked_table_specs"][0]["table_specs"][1] == MESSAGE["stacked_table_specs"][0]["table_specs"][1]
    assert format_embedding_spec(read) == text
    path = write_embedding_spec(MESSAGE, tmp_path / "step" / "embedding_spec" / "proto.pbtxt")
    assert path.read_text() == text
    # Written again into the folder that now exists: the same file.
    assert write_embedding_spec(MESSAGE, path) == path and path.read_text() == text
    for where in (path, path.parent, path.parent.parent):
        assert read_embedding_spec(where) == parse_embedding_spec(text)
    model = from_embedding_spec(tmp_path / "step", num_sc_per_device=4)
    assert stack_facts(model.plan.stacks[0]) == A_B
    with pytest.raises(InputError, match=re.escape("holds neither proto.pbtxt nor embedding_spec/proto.pbtxt")):
        read_embedding_spec(tmp_path)
    (tmp_path / "bad.pbtxt").write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match="cannot read the embedding spec"):
        read_embedding_spec(tmp_path / "bad.pbtxt")
    with pytest.raises(InputError, match="EmbeddingSpecProto text: expected text, got bytes"):
        parse_embedding_spec(b"x")
    with pytest.raises(ConfigError, match="message must be a dict \\(see parse_embedding_spec\\), got list"):
        format_embedding_spec([])
    with pytest.raises(ConfigError, match="cannot write"):
        write_embedding_spec(MESSAGE, path / "under_a_file.pbtxt")
    with pytest.raises(InputError, match="^my spec, line 1"):
        parse_embedding_spec("nothing: 1", "my spec")


# -- from_embedding_spec -------------------------------------------------------------


def test_from_embedding_spec_by_hand():
    model = from_embedding_spec(MESSAGE, num_sc_per_device=4)
    assert [stack_facts(s) for s in model.plan.stacks] == [A_B]
    assert model.stacking == [["a", "b"]] and model.rotation == 4 and model.batch_size == 16
    assert (model.topology.num_devices, model.topology.sparsecores_per_device) == (2, 4)
    # Table limits are not in the proto: a table shares its stack, so it gets none.
    assert [(f.table.max_ids_per_partition, f.table.max_unique_ids_per_partition) for f in model.features] == [
        (None, None), (None, None)]
    assert model.stack_limits == {"a_b": {"max_ids_per_partition": 64, "max_unique_ids_per_partition": 32,
                                          "suggested_coo_buffer_size_per_device": None}}
    assert model.activation_mem_bytes_limit == 2_097_152
    # The same read on 8 devices of 1 SparseCore: rotation 4 is no longer the default (1).
    other = from_embedding_spec(edited(lambda s: s.update(num_sparsecores=8)), num_sc_per_device=1)
    assert other.rotation == 4 and other.topology.num_devices == 8


def single_table_message():
    def edit(s):
        s["table_specs"] = s["table_specs"][:1]
        s["stack_name"], s["stack_vocab_size"], s["total_sample_count"] = "a", 1024, 16
    return edited(edit)


def test_a_table_alone_in_its_stack_gets_the_stack_limits():
    model = from_embedding_spec(single_table_message(), num_sc_per_device=4)
    assert [(f.table.max_ids_per_partition, f.table.max_unique_ids_per_partition) for f in model.features] == [(64, 32)]
    assert stack_facts(model.plan.stacks[0])[:2] == ("a", [("a", 0, 0, 1024)])
    # Its own limits when the message has them; stack limits of 0 mean none.
    message = single_table_message()
    message["stacked_table_specs"][0]["table_specs"][0].update(max_ids_per_partition=40,
                                                                max_unique_ids_per_partition=20)
    model = from_embedding_spec(message, num_sc_per_device=4)
    assert (model.features[0].table.max_ids_per_partition, model.features[0].table.max_unique_ids_per_partition) == (
        40, 20)


def test_optimizer_types_and_overrides():
    def optimizer(kind):
        def edit(s):
            for t in s["table_specs"]:
                t["optimizer"] = {"type": kind} if kind is not None else {}
        return edit
    assert from_embedding_spec(edited(optimizer("FTRL")), num_sc_per_device=4).features[0].table.optimizer == "ftrl"
    # Unset or UNSPECIFIED: SGD, as the library reads it.
    assert from_embedding_spec(edited(optimizer(None)), num_sc_per_device=4).features[0].table.optimizer == "sgd"
    assert from_embedding_spec(edited(optimizer(0)), num_sc_per_device=4).features[0].table.optimizer == "sgd"
    # An enum given by its number (proto3 text allows it, so does the dict): 3 is ADAM, 5 F2A;
    # 9 has no name (proto3 enums are open).
    assert from_embedding_spec(edited(optimizer(3)), num_sc_per_device=4).features[0].table.optimizer == "adam"
    with pytest.raises(ConfigError, match="optimizer type F2A has no scwork name"):
        from_embedding_spec(edited(optimizer(5)), num_sc_per_device=4)
    with pytest.raises(ConfigError, match="optimizer type 9 has no scwork name"):
        from_embedding_spec(edited(optimizer(9)), num_sc_per_device=4)
    assert from_embedding_spec(parse_embedding_spec(format_embedding_spec(edited(optimizer(3)))),
                               num_sc_per_device=4).features[0].table.optimizer == "adam"
    assert from_embedding_spec(edited(optimizer("ADAGRAD_MOMENTUM")),
                               num_sc_per_device=4).features[0].table.optimizer == "adagrad_momentum"
    with pytest.raises(ConfigError, match=re.escape("table 'a': optimizer type F2A has no scwork name; pass "
                                                    "optimizers={'a': 'sgd'} (for LaProp: 'laprop')")):
        from_embedding_spec(edited(optimizer("F2A")), num_sc_per_device=4)
    model = from_embedding_spec(edited(optimizer("CUSTOM")), num_sc_per_device=4,
                                optimizers={"a": "laprop", "b": "laprop"})
    assert {f.table.optimizer for f in model.features} == {"laprop"}
    with pytest.raises(ConfigError, match="optimizers must be a dict"):
        from_embedding_spec(MESSAGE, num_sc_per_device=4, optimizers=["sgd"])
    with pytest.raises(ConfigError, match=re.escape("optimizers['a'] must be a str, got 3")):
        from_embedding_spec(MESSAGE, num_sc_per_device=4, optimizers={"a": 3})
    with pytest.raises(ConfigError, match="optimizers key must be a str"):
        from_embedding_spec(MESSAGE, num_sc_per_device=4, optimizers={3: "sgd"})


def set_table(index, **fields):
    return lambda s: s["table_specs"][index].update(fields)


def set_feature(index, **fields):
    return lambda s: s["table_specs"][index]["feature_specs"][0].update(fields)


@pytest.mark.parametrize("edit, error, message", [
    (set_table(1, padded_vocab_size=120), ConfigError,
     "stack 'a_b', table 'b' (feature 'fb'): padded_vocab_size 120 is not round_up(100, 8 x P=8)"),
    (set_feature(1, col_offset=1000), ConfigError,
     "stack 'a_b', table 'b' (feature 'fb'): id transformation (col_offset 1000, col_shift 4) does not match "
     "row_offset_in_shard 128 x P=8 and shard_rotation 4"),
    (set_feature(1, col_shift=3), ConfigError, "id transformation (col_offset 1024, col_shift 3) does not match"),
    (set_feature(1, row_offset=8), ConfigError, "(feature 'fb'): row_offset 8 is not a multiple of the batch 16"),
    (set_feature(1, row_offset=32), ConfigError,
     "stack 'a_b': feature row offsets [0, 32] are not 0, 16, 2 x 16, ... (features ['fa', 'fb'])"),
    (lambda s: (set_table(1, row_offset_in_shard=136)(s), set_feature(1, col_offset=1088)(s)), ConfigError,
     "stack 'a_b': table 'b' starts at row 136 of every shard, but the tables before it end at row 128"),
    (lambda s: s.update(stack_vocab_size=1024), ConfigError,
     "stack 'a_b': stack_vocab_size 1024 / stack_embedding_dim 16 do not match its tables (1152 rows, width 16)"),
    (lambda s: s.update(stack_embedding_dim=8), ConfigError, "stack_embedding_dim 8 do not match its tables"),
    (lambda s: s.update(stack_vocab_size=2048), ConfigError, "stack_vocab_size 2048 / stack_embedding_dim 16 do not "
                                                             "match its tables (1152 rows, width 16)"),
    (lambda s: s.update(stack_embedding_dim=32), ConfigError, "stack_embedding_dim 32 do not match its tables"),
    (lambda s: (set_table(1, row_offset_in_shard=120)(s), set_feature(1, col_offset=960)(s)), ConfigError,
     "stack 'a_b': table 'b' starts at row 120 of every shard, but the tables before it end at row 128"),
    (lambda s: s.update(max_ids_per_partition=0), ConfigError,
     "stack 'a_b': max_ids_per_partition is 0; scwork limits are integers >= 1 (a limit of 0 comes from an FDO "
     "history without ids: raise it)"),
    (lambda s: s.update(max_unique_ids_per_partition=0), ConfigError, "max_unique_ids_per_partition is 0"),
    (set_table(1, optimizer={"type": "SGD"}), ConfigError,
     "stack 'a_b': its tables ['a', 'b'] differ in optimizer, combiner or quantization"),
    (set_table(1, combiner="mean"), ConfigError, "differ in optimizer, combiner or quantization"),
    (lambda s: s.update(activation_mem_bytes_limit=0), ConfigError,
     "stack 'a_b': activation_mem_bytes_limit is 0; it must be a positive number of bytes"),
    (set_table(0, vocab_size=0), InputError, "EmbeddingSpecProto stack 'a_b', table 'a': "),
    (set_feature(1, output_shape=[8, 8]), ConfigError, "features have different batch sizes {'fa': 16, 'fb': 8}"),
    (set_feature(1, output_shape=[8]), ConfigError,
     "feature 'fb': output_shape [8] needs [batch, ..., embedding_dim] with at least one sample"),
    (lambda s: s.update(num_sparsecores=0), InputError, "stacks disagree on num_sparsecores or leave it unset: [0]"),
    (lambda s: s.pop("num_sparsecores"), InputError, "leave it unset: [0]"),
    (lambda s: s.update(table_specs=[]), InputError, "the EmbeddingSpecProto has no feature_specs"),
    # A table without features is not seen: b's rows then start past the (empty) rows before it.
    (set_table(0, feature_specs=[]), ConfigError,
     "stack 'a_b': table 'b' starts at row 128 of every shard, but the tables before it end at row 0"),
])
def test_inconsistent_messages_are_refused(edit, error, message):
    with pytest.raises(error, match=re.escape(message)):
        from_embedding_spec(edited(edit), num_sc_per_device=4)


def test_two_stacks_and_their_checks():
    second = copy.deepcopy(single_table_message()["stacked_table_specs"][0])
    second.update(stack_name="c", stack_vocab_size=1024, num_sparsecores=8)
    second["table_specs"][0].update(table_name="c")
    second["table_specs"][0]["feature_specs"][0]["feature_name"] = "fc"
    message = copy.deepcopy(MESSAGE)
    message["stacked_table_specs"].append(second)
    model = from_embedding_spec(message, num_sc_per_device=4)
    assert [s.name for s in model.plan.stacks] == ["a_b", "c"]
    assert [f.name for f in model.features] == ["fa", "fb", "fc"]
    # "c" is a table alone, features by name, the default budget: left to prepare_feature_specs_for_training.
    assert model.stacking == [["a", "b"]]
    second["num_sparsecores"] = 16
    with pytest.raises(InputError, match=re.escape("stacks disagree on num_sparsecores or leave it unset: [8, 16]")):
        from_embedding_spec(message, num_sc_per_device=4)
    second["num_sparsecores"] = 8
    second["table_specs"][0]["table_name"] = "a"
    with pytest.raises(InputError, match=re.escape("EmbeddingSpecProto: table 'a' appears twice with different "
                                                   "settings")):
        from_embedding_spec(message, num_sc_per_device=4)


def test_bad_arguments_of_from_embedding_spec():
    for bad in (3, 0, True, 8.0, -4):
        with pytest.raises(ConfigError, match=re.escape(f"num_sc_per_device must be a positive int dividing "
                                                        f"num_sparsecores=8, got {bad!r}")):
            from_embedding_spec(MESSAGE, num_sc_per_device=bad)
    with pytest.raises(ConfigError, match="message must be a dict, a path or a checkpoint folder, got int"):
        from_embedding_spec(5, num_sc_per_device=4)
    with pytest.raises(InputError, match="the EmbeddingSpecProto has no stacked_table_specs"):
        from_embedding_spec({}, num_sc_per_device=4)
    with pytest.raises(ConfigError, match=re.escape("stacked_table_specs[0].stack_vocab_size must be an integer, "
                                                    "got '1152'")):
        from_embedding_spec(edited(lambda s: s.update(stack_vocab_size="1152")), num_sc_per_device=4)


# -- from_jax_tpu_embedding: duck-typed specs ----------------------------------------


def library_specs(*, stacked=True, rotation=4, use_method=True):
    """The library's FeatureSpecs of stack a_b, as attributes (see the module docstring)."""
    def table(name, vocab, dim, padded, offset, rot, stack_spec):
        t = NS(name=name, vocabulary_size=vocab, embedding_dim=dim, combiner="sum", optimizer=NS(short_name=lambda: "adam"),
               max_ids_per_partition=64, max_unique_ids_per_partition=32,
               setting_in_stack=NS(stack_name="a_b", padded_vocab_size=padded, row_offset_in_shard=offset,
                                   shard_rotation=rot))
        if use_method:
            t.is_stacked = lambda: stacked
            t.stacked_table_spec = stack_spec
        else:
            t.stacked_table_spec = stack_spec if stacked else None
        return t

    stack_spec = NS(stack_name="a_b", stack_vocab_size=1152, stack_embedding_dim=16, max_ids_per_partition=64,
                    max_unique_ids_per_partition=32, suggested_coo_buffer_size_per_device=None)
    a = table("a", 1000, 16, 1024, 0, 0, stack_spec)
    b = table("b", 100, 8, 128, 128, rotation, stack_spec)
    return {"x": NS(name="fa", table_spec=a, output_shape=(16, 16), id_transformation=NS(row_offset=0, col_offset=0,
                                                                                         col_shift=0)),
            "y": [NS(name="fb", table_spec=b, output_shape=[16, 8],
                     id_transformation=NS(row_offset=16, col_offset=1024, col_shift=rotation)), None]}


def test_stacked_library_specs():
    for use_method in (True, False):
        model = from_jax_tpu_embedding(library_specs(use_method=use_method), global_device_count=2,
                                       num_sc_per_device=4)
        # No activation_mem_bytes_limit on the stacked spec: the library's default.
        assert [stack_facts(s) for s in model.plan.stacks] == [A_B]
        assert model.stacking == [["a", "b"]] and model.rotation == 4
        assert model.features[0].table.optimizer == "adam"


def test_a_rotation_other_than_the_default_is_the_models_rotation():
    # Rotation 2 on 4 SparseCores per device: plan_stacking(rotation=2) gives the same stack.
    model = from_jax_tpu_embedding(library_specs(rotation=2), global_device_count=2, num_sc_per_device=4)
    assert model.rotation == 2 and model.stacking == [["a", "b"]]
    assert model.plan.stacks[0].tables[1].shard_rotation == 2
    assert model.replan().stacks == model.plan.stacks


def test_a_stack_name_groups_cannot_say_keeps_the_plan_itself():
    specs = library_specs()
    for f in (specs["x"], specs["y"][0]):
        f.table_spec.setting_in_stack.stack_name = "mine"
    specs["x"].table_spec.stacked_table_spec.stack_name = "mine"       # one object, shared by both tables
    model = from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4)
    assert model.stacking is model.plan and [s.name for s in model.plan.stacks] == ["mine"]
    assert stack_facts(model.plan.stacks[0])[1:] == A_B[1:]


def test_unstacked_library_specs_stack_one_table_each():
    model = from_jax_tpu_embedding(library_specs(stacked=False), global_device_count=2, num_sc_per_device=4)
    assert [s.table_names for s in model.plan.stacks] == [("a",), ("b",)] and model.stacking is None
    assert [(s.max_ids_per_partition, s.max_unique_ids_per_partition) for s in model.plan.stacks] == [(64, 32)] * 2


def test_optimizer_names_of_specs():
    def with_optimizer(opt):
        specs = library_specs(stacked=False)
        specs["x"].table_spec.optimizer = opt
        specs["y"][0].table_spec.optimizer = opt
        return specs
    # A short_name() method, a name attribute, or the name itself.
    assert from_jax_tpu_embedding(with_optimizer(NS(name="ftrl")), global_device_count=2,
                                  num_sc_per_device=4).features[0].table.optimizer == "ftrl"
    assert from_jax_tpu_embedding(with_optimizer("adagrad"), global_device_count=2,
                                  num_sc_per_device=4).features[0].table.optimizer == "adagrad"
    with pytest.raises(ConfigError, match=re.escape("table 'a': optimizer 'f2a' has no SparseCore kernel scwork "
                                                    "knows")):
        from_jax_tpu_embedding(with_optimizer(NS(short_name=lambda: "f2a")), global_device_count=2,
                               num_sc_per_device=4)
    model = from_jax_tpu_embedding(with_optimizer(NS(short_name=lambda: "f2a")), global_device_count=2,
                                   num_sc_per_device=4, optimizers={"a": "sgd", "b": "sgd"})
    assert {f.table.optimizer for f in model.features} == {"sgd"}


def test_inconsistent_specs_are_refused():
    def refused(edit, message, error=ConfigError):
        specs = library_specs()
        edit(specs)
        with pytest.raises(error, match=re.escape(message)):
            from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4)

    def b_setting(**fields):
        return lambda specs: [setattr(specs["y"][0].table_spec.setting_in_stack, k, v) for k, v in fields.items()]

    refused(b_setting(stack_name="other"), "stack 'a_b', table 'b' (feature 'fb'): setting_in_stack names stack "
                                           "'other'")
    refused(b_setting(shard_rotation="4"), "feature 'fb' (table 'b'): shard_rotation must be an integer, got '4'")
    refused(b_setting(stack_name=3), "feature 'fb' (table 'b'): stack_name must be a str, got 3")
    refused(b_setting(row_offset_in_shard=True), "row_offset_in_shard must be an integer, got True")
    refused(lambda specs: delattr(specs["y"][0], "id_transformation"),
            "feature 'fb' is not a jax-tpu-embedding FeatureSpec as scwork reads it:")
    refused(lambda specs: setattr(specs["y"][0].table_spec, "embedding_dim", 8.0),
            "table 'b': embedding_dim must be an integer, got 8.0")
    # What scwork's TableSpec refuses comes back naming the library's table.
    with pytest.raises(ConfigError, match=r"^jax-tpu-embedding table 'b': .*vocab"):
        specs = library_specs()
        specs["y"][0].table_spec.vocabulary_size = 0
        from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4)
    refused(lambda specs: setattr(specs["y"][0].table_spec, "name", "a"),
            "two different tables are named 'a'")
    refused(lambda specs: setattr(specs["y"][0], "name", 5), "a FeatureSpec's name must be a str, got 5")
    # The two features disagree on the stack (each spec carries its own copy).
    refused(lambda specs: setattr(specs["y"][0].table_spec, "stacked_table_spec",
                                  NS(**{**vars(specs["x"].table_spec.stacked_table_spec),
                                        "max_ids_per_partition": 65})),
            "stack 'a_b': features 'fa' and 'fb' disagree on the stack's max_ids (64 vs 65)")
    refused(lambda specs: setattr(specs["y"][0].table_spec, "stacked_table_spec",
                                  NS(**{**vars(specs["x"].table_spec.stacked_table_spec), "activation_mem_bytes_limit": 1})),
            "disagree on the stack's activation_limit (2097152 vs 1)")


def test_specs_stacked_and_not_under_one_name_are_refused():
    specs = library_specs()
    specs["y"][0].table_spec.is_stacked = lambda: False
    specs["y"][0].table_spec.name = "a_b"
    with pytest.raises(ConfigError, match=re.escape("tables ['a_b'] are not stacked yet but stacks of these names "
                                                    "exist")):
        from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4)


def test_feature_spec_trees():
    with pytest.raises(ConfigError, match="feature_specs holds no FeatureSpec"):
        from_jax_tpu_embedding({"x": None, "y": []}, global_device_count=2, num_sc_per_device=4)
    with pytest.raises(ConfigError, match=re.escape("feature_specs['y'][1]: expected a jax-tpu-embedding FeatureSpec "
                                                    "(with .name and .table_spec) or a list / dict of them, got int")):
        from_jax_tpu_embedding({"y": [None, 3]}, global_device_count=2, num_sc_per_device=4)
    with pytest.raises(ConfigError, match="feature_specs: dict keys must be sortable"):
        from_jax_tpu_embedding({1: None, "a": None}, global_device_count=2, num_sc_per_device=4)
    for bad in (0, True, 2.0):
        with pytest.raises(ConfigError, match=re.escape(f"global_device_count must be a positive int (what the specs "
                                                        f"were stacked with), got {bad!r}")):
            from_jax_tpu_embedding(library_specs(), global_device_count=bad, num_sc_per_device=4)
    # Stacked with 8 partitions, read on 12: a's 1000 rows pad to round_up(1000, 96) = 1056.
    with pytest.raises(ConfigError, match=re.escape("padded_vocab_size 1024 is not round_up(1000, 8 x P=12)")):
        from_jax_tpu_embedding(library_specs(), global_device_count=3, num_sc_per_device=4)
    # Read on 4: the paddings fit, b's column offset 128 x 8 is not 128 x 4.
    with pytest.raises(ConfigError, match=re.escape("(col_offset 1024, col_shift 4) does not match "
                                                    "row_offset_in_shard 128 x P=4")):
        from_jax_tpu_embedding(library_specs(), global_device_count=1, num_sc_per_device=4)


# -- issue 21: mutation-testing survivors and lines no test ran -------------------------------------


def test_output_shapes_batch_is_the_product_of_all_but_the_last_dim():
    # A [2, 8, 16] output is 2 x 8 = 16 samples of width 16 (the library's batch of a sequence feature).
    specs = library_specs()
    specs["x"].output_shape = [2, 8, 16]
    model = from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4)
    assert model.batch_size == 16 and [stack_facts(s) for s in model.plan.stacks] == [A_B]

    def refused(shape, message):
        specs = library_specs()
        specs["y"][0].output_shape = shape
        with pytest.raises(ConfigError, match=re.escape(message)):
            from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4)
    # No sample, or a negative width: not a shape.
    refused([0, 8], "feature 'fb': output_shape [0, 8] needs [batch, ..., embedding_dim] with at least one sample")
    refused([16, -1], "feature 'fb': output_shape [16, -1] needs [batch, ..., embedding_dim]")
    refused([16, 0, 8], "output_shape [16, 0, 8] needs")
    # An output width of 0 is a sample all the same: the library slices output_shape[-1] columns of
    # the activations and refuses only more than the table's embedding_dim (jax-tpu-embedding,
    # embedding._get_activation_for_feature); scwork counts ids and never reads the width.
    specs = library_specs()
    specs["y"][0].output_shape = [16, 0]
    assert from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4).batch_size == 16
    # Unset dims are not integers (no dim is optional).
    refused([16, None], "feature 'fb': output_shape[1] must be an integer, got None")
    refused("16x8", "feature 'fb': output_shape must be a sequence of ints, got '16x8'")


def test_table_sizes_and_quantization_of_specs():
    specs = library_specs()
    specs["y"][0].table_spec.vocabulary_size = None
    with pytest.raises(ConfigError, match=re.escape("table 'b': vocabulary_size must be an integer, got None")):
        from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4)
    from scwork.quant import QuantizationConfig

    def quantized(q):
        specs = library_specs(stacked=False)
        for f in (specs["x"], specs["y"][0]):
            f.table_spec.quantization_config = q
        return specs
    model = from_jax_tpu_embedding(quantized(NS(num_buckets=256, min_value=-1, max_value=0.5)), global_device_count=2,
                                   num_sc_per_device=4)
    assert {f.table.quantization for f in model.features} == {QuantizationConfig(num_buckets=256, low=-1.0, high=0.5)}
    # float("low") and num_buckets None are ValueErrors, float(None) a TypeError, float(10**400) an OverflowError.
    for q in (NS(num_buckets=256, min_value="low", max_value=0.5), NS(num_buckets=None, min_value=0, max_value=1),
              NS(num_buckets=256, min_value=None, max_value=1), NS(num_buckets=256, min_value=0, max_value=10**400)):
        with pytest.raises(ConfigError, match=re.escape("table 'a': quantization_config is not usable: ")):
            from_jax_tpu_embedding(quantized(q), global_device_count=2, num_sc_per_device=4)


def test_rows_of_two_features_at_one_offset_are_refused():
    with pytest.raises(ConfigError, match=re.escape("stack 'a_b': feature row offsets [0, 0] are not 0, 16, 2 x 16")):
        from_embedding_spec(edited(set_feature(1, row_offset=0)), num_sc_per_device=4)


def test_smallest_activation_budget_and_batch_are_accepted():
    # One byte is a positive budget (the library takes any positive int).
    model = from_embedding_spec(edited(lambda s: s.update(activation_mem_bytes_limit=1)), num_sc_per_device=4)
    assert model.plan.stacks[0].activation_mem_bytes_limit == 1 and model.activation_mem_bytes_limit == 1
    # Left out of the message: the library's default, 2 MiB.
    model = from_embedding_spec(edited(lambda s: s.pop("activation_mem_bytes_limit")), num_sc_per_device=4)
    assert model.plan.stacks[0].activation_mem_bytes_limit == 2048 * 1024
    a = TableSpec("a", 1000, 16, combiner="sum", optimizer="adam")
    plan = plan_stacking([FeatureSpec("fa", a)], scwork.Topology(2, 4), None, batch_size=16)
    message = embedding_spec_message(plan.features, plan, batch_size=1, activation_mem_bytes_limit=1)
    stack = message["stacked_table_specs"][0]
    assert stack["total_sample_count"] == 1 and stack["activation_mem_bytes_limit"] == 1
    assert stack["table_specs"][0]["feature_specs"][0]["output_shape"] == [1, 16]


def test_the_batch_size_and_plan_a_message_needs():
    a = TableSpec("a", 1000, 16, combiner="sum", optimizer="adam")
    plan = plan_stacking([FeatureSpec("fa", a)], scwork.Topology(2, 4), None, batch_size=16)
    for bad in (0, True, 2.0, -3):
        with pytest.raises(ConfigError, match=re.escape("the library's FeatureSpecs need the batch size (input and "
                                                        "output shapes): pass batch_size=...")):
            embedding_spec_message(plan.features, plan, batch_size=bad)
    no_batch = plan_stacking([FeatureSpec("fa", a)], scwork.Topology(2, 4), None)
    with pytest.raises(ConfigError, match="need the batch size"):
        embedding_spec_message(no_batch.features, no_batch)
    assert embedding_spec_message(no_batch.features, no_batch, batch_size=3)["stacked_table_specs"][0][
        "total_sample_count"] == 3
    with pytest.raises(ConfigError, match=re.escape("plan must be a scwork StackingPlan (plan_stacking(...)), got "
                                                    "list")):
        embedding_spec_message(plan.features, [plan])


def test_to_jax_tpu_embedding_without_the_library(monkeypatch):
    import sys

    a = TableSpec("a", 1000, 16, combiner="sum", optimizer="adam")
    plan = plan_stacking([FeatureSpec("fa", a)], scwork.Topology(2, 4), None, batch_size=16)
    from scwork.interop.jax_tpu_embedding import to_jax_tpu_embedding

    monkeypatch.setitem(sys.modules, "jax_tpu_embedding.sparsecore.lib.nn", None)   # import fails as if absent
    with pytest.raises(ConfigError, match=re.escape("to_jax_tpu_embedding needs jax-tpu-embedding (pip install "
                                                    "'scwork[interop]')")):
        to_jax_tpu_embedding(plan.features, plan)


@pytest.mark.parametrize("edit, error, message", [
    # proto3 leaves zeros out of the text: a field left out reads as 0, and 0 is checked like any value.
    (lambda s: s["table_specs"][0].pop("vocab_size"), InputError,
     "EmbeddingSpecProto stack 'a_b', table 'a': TableSpec.vocab_size must be >= 1, got 0"),
    (lambda s: s["table_specs"][0].pop("embedding_dim"), InputError,
     "EmbeddingSpecProto stack 'a_b', table 'a': TableSpec.embedding_dim must be >= 1, got 0"),
    (lambda s: s.pop("stack_vocab_size"), ConfigError,
     "stack 'a_b': stack_vocab_size 0 / stack_embedding_dim 16 do not match its tables (1152 rows, width 16)"),
    (lambda s: s.pop("stack_embedding_dim"), ConfigError,
     "stack 'a_b': stack_vocab_size 1152 / stack_embedding_dim 0 do not match its tables"),
    (lambda s: s.pop("max_ids_per_partition"), ConfigError, "stack 'a_b': max_ids_per_partition is 0;"),
    (lambda s: s.pop("max_unique_ids_per_partition"), ConfigError, "stack 'a_b': max_unique_ids_per_partition is 0;"),
    (lambda s: s["table_specs"][1].pop("padded_vocab_size"), ConfigError,
     "stack 'a_b', table 'b' (feature 'fb'): padded_vocab_size 0 is not round_up(100, 8 x P=8)"),
    (lambda s: s["table_specs"][1].pop("row_offset_in_shard"), ConfigError,
     "(col_offset 1024, col_shift 4) does not match row_offset_in_shard 0 x P=8 and shard_rotation 4"),
    (lambda s: s["table_specs"][1].pop("shard_rotation"), ConfigError,
     "(col_offset 1024, col_shift 4) does not match row_offset_in_shard 128 x P=8 and shard_rotation 0"),
    (lambda s: s["table_specs"][1]["feature_specs"][0].pop("col_offset"), ConfigError,
     "(col_offset 0, col_shift 4) does not match row_offset_in_shard 128 x P=8"),
    (lambda s: s["table_specs"][1]["feature_specs"][0].pop("col_shift"), ConfigError,
     "(col_offset 1024, col_shift 0) does not match row_offset_in_shard 128 x P=8 and shard_rotation 4"),
    (lambda s: s["table_specs"][1]["feature_specs"][0].pop("row_offset"), ConfigError,
     "stack 'a_b': feature row offsets [0, 0] are not 0, 16"),
    (lambda s: s["table_specs"][1]["feature_specs"][0].pop("output_shape"), ConfigError,
     "feature 'fb': output_shape [] needs [batch, ..., embedding_dim]"),
    # Enum numbers past either end of OptimizerType (0 ... 7) have no name.
    (set_table(0, optimizer={"type": 8}), ConfigError, "table 'a': optimizer type 8 has no scwork name"),
    (set_table(0, optimizer={"type": -1}), ConfigError, "table 'a': optimizer type -1 has no scwork name"),
])
def test_fields_left_out_of_a_message_read_as_zero(edit, error, message):
    with pytest.raises(error, match=re.escape(message)):
        from_embedding_spec(edited(edit), num_sc_per_device=4)


def table_message(name, vocab, dim, padded, offset, rotation, features):
    """A TableSpecProto (adam, sum); ``features``: (name, row offset) pairs, batch 16, P = 8."""
    return {"table_name": name, "vocab_size": vocab, "embedding_dim": dim, "padded_vocab_size": padded,
            "padded_embedding_dim": 16, "row_offset_in_shard": offset, "shard_rotation": rotation,
            "combiner": "sum", "optimizer": {"type": "ADAM"},
            "feature_specs": [feature_spec(f, [16, dim], row, offset * 8, rotation) for f, row in features]}


def stack_message(name, tables, **fields):
    """A StackedTableSpecProto of ``tables`` (P = 8, batch 16, limits 64 / 32, dim 16)."""
    rows = sum(t["padded_vocab_size"] for t in tables)
    samples = sum(len(t["feature_specs"]) for t in tables) * 16
    return {"stack_name": name, "stack_vocab_size": rows, "stack_embedding_dim": 16, "total_sample_count": samples,
            "max_ids_per_partition": 64, "max_unique_ids_per_partition": 32, "num_sparsecores": 8,
            "table_specs": tables, **fields}


def test_a_table_in_two_stacks_is_refused():
    # Table a with its own limits, so that it reads the same in both stacks (alone in a stack, a
    # table without them would take the stack's).
    message = edited(set_table(0, max_ids_per_partition=64, max_unique_ids_per_partition=32))
    message["stacked_table_specs"].append(stack_message("a_again", [table_message("a", 1000, 16, 1024, 0, 0,
                                                                                  [("fc", 0)])]))
    with pytest.raises(ConfigError, match=re.escape("a table is in more than one stack: [('a', 'b'), ('a',)]")):
        from_embedding_spec(message, num_sc_per_device=4)


def test_stacks_of_different_rotations_keep_the_first_stacks():
    # 4 SparseCores per device: stack a_b rotates b by 2, stack c_d rotates d by 1. No single
    # rotation plans both, so the model is the plan itself with the first stack's rotation.
    message = {"stacked_table_specs": [
        stack_message("a_b", [table_message("a", 1000, 16, 1024, 0, 0, [("fa", 0)]),
                              table_message("b", 100, 8, 128, 128, 2, [("fb", 16)])], activation_mem_bytes_limit=1000),
        stack_message("c_d", [table_message("c", 1000, 16, 1024, 0, 0, [("fc", 0)]),
                              table_message("d", 100, 8, 128, 128, 1, [("fd", 16)])], activation_mem_bytes_limit=3000)]}
    model = from_embedding_spec(message, num_sc_per_device=4)
    assert model.rotation == 2 and model.stacking is model.plan and model.plan.rotation == 2
    # Two budgets, neither the model's: it keeps the library's default.
    assert [s.activation_mem_bytes_limit for s in model.plan.stacks] == [1000, 3000]
    assert model.activation_mem_bytes_limit == 2048 * 1024
    assert [[(t.name, t.shard_rotation) for t in s.tables] for s in model.plan.stacks] == [
        [("a", 0), ("b", 2)], [("c", 0), ("d", 1)]]
    # The default rotation first (4 = S): the model's rotation is the default, 4.
    message["stacked_table_specs"][0]["table_specs"][1] = table_message("b", 100, 8, 128, 128, 4, [("fb", 16)])
    model = from_embedding_spec(message, num_sc_per_device=4)
    assert model.rotation == 4 and model.stacking is model.plan
    # Only the first stack counts: b by 2, d by the default 4 make the model's rotation 2.
    message["stacked_table_specs"][0]["table_specs"][1] = table_message("b", 100, 8, 128, 128, 2, [("fb", 16)])
    message["stacked_table_specs"][1]["table_specs"][1] = table_message("d", 100, 8, 128, 128, 4, [("fd", 16)])
    model = from_embedding_spec(message, num_sc_per_device=4)
    assert model.rotation == 2 and model.stacking is model.plan


def test_which_stacks_count_as_left_to_prepare():
    """Only a stack prepare_feature_specs_for_training builds itself (one table, named as it, features
    by name, the default budget) is left out of the groups and of the model's activation budget."""
    default = 2048 * 1024
    c_budget = stack_message("c", [table_message("c", 1000, 16, 1024, 0, 0, [("fc", 0)])],
                             activation_mem_bytes_limit=1000)
    # Two tables in a stack named after the first: a stack the caller named, not prepare's.
    named_a = stack_message("a", [table_message("a", 1000, 16, 1024, 0, 0, [("fa", 0)]),
                                  table_message("b", 100, 8, 128, 128, 4, [("fb", 16)])])
    # One table in a stack of another name.
    zz = stack_message("zz", [table_message("a", 1000, 16, 1024, 0, 0, [("fa", 0)])])
    before = stack_message("a", [table_message("b", 1000, 16, 1024, 0, 0, [("fa", 0)])])    # "a" < "b"
    for first in (named_a, zz, before):
        model = from_embedding_spec({"stacked_table_specs": [first, copy.deepcopy(c_budget)]}, num_sc_per_device=4)
        # Both stacks were the caller's, of budgets 2 MiB and 1000 bytes: no single budget, the default.
        assert [s.activation_mem_bytes_limit for s in model.plan.stacks] == [default, 1000]
        assert model.activation_mem_bytes_limit == default and model.stacking is model.plan
    # A lone table named as its stack, with a budget above the default: stacked by the caller.
    big = stack_message("a", [table_message("a", 1000, 16, 1024, 0, 0, [("fa", 0)])],
                        activation_mem_bytes_limit=2 * default)
    model = from_embedding_spec({"stacked_table_specs": [big]}, num_sc_per_device=4)
    assert model.stacking == [["a"]] and model.activation_mem_bytes_limit == 2 * default
    assert model.replan().stacks == model.plan.stacks
    # Below the default: stacked by the caller too.
    big["activation_mem_bytes_limit"] = 1000
    model = from_embedding_spec({"stacked_table_specs": [big]}, num_sc_per_device=4)
    assert model.stacking == [["a"]] and model.activation_mem_bytes_limit == 1000
    # The same at the default budget: left to prepare_feature_specs_for_training.
    big.pop("activation_mem_bytes_limit")
    model = from_embedding_spec({"stacked_table_specs": [big]}, num_sc_per_device=4)
    assert model.stacking is None and model.activation_mem_bytes_limit == default


def test_a_lone_table_of_a_long_name_is_left_to_prepare():
    # plan_stacking names a group "_".join(tables) cut at 50 characters plus a hash, but a lone table's
    # stack by the table's own name, however long: the model still needs no groups.
    long = "t" * 60
    specs = library_specs(stacked=False)
    specs["x"].table_spec.name = long
    model = from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4)
    assert [s.name for s in model.plan.stacks] == [long, "b"] and model.stacking is None


def test_a_setting_naming_a_stack_before_its_own_is_refused():
    specs = library_specs()
    specs["y"][0].table_spec.setting_in_stack.stack_name = "a"     # "a" < "a_b": any other name is refused
    with pytest.raises(ConfigError, match=re.escape("stack 'a_b', table 'b' (feature 'fb'): setting_in_stack names "
                                                    "stack 'a'")):
        from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=4)


def test_one_device_rotation_is_the_library_default():
    # 1 device of 4 SparseCores (P = 4): the library's rotation 4 is 0 modulo P, which b carries.
    # a: 1000 rows padded to round_up(1000, 32) = 1024, 256 per shard; b: 128 rows, 32 per shard at
    # row 256 (column offset 256 x 4 = 1024); the stack (256 + 32) x 4 = 1152 rows.
    def one_device(s):
        s["num_sparsecores"] = 4
        s["table_specs"][1].update(row_offset_in_shard=256, shard_rotation=0)
        s["table_specs"][1]["feature_specs"][0].update(col_offset=1024, col_shift=0)
    model = from_embedding_spec(edited(one_device), num_sc_per_device=4)
    assert model.rotation == 4 and model.stacking == [["a", "b"]] and model.topology.num_devices == 1
    assert [(t.row_offset_in_shard, t.shard_rotation) for t in model.plan.stacks[0].tables] == [(0, 0), (256, 0)]
    # Stacked with rotation 2 instead: the model's rotation is 2.
    def rotation_2(s):
        one_device(s)
        s["table_specs"][1].update(shard_rotation=2)
        s["table_specs"][1]["feature_specs"][0].update(col_shift=2)
    model = from_embedding_spec(edited(rotation_2), num_sc_per_device=4)
    assert model.rotation == 2 and model.stacking == [["a", "b"]]
    assert [t.shard_rotation for t in model.plan.stacks[0].tables] == [0, 2]


def test_smallest_limits_and_partitions_are_accepted():
    model = from_embedding_spec(edited(lambda s: s.update(max_ids_per_partition=1, max_unique_ids_per_partition=1)),
                                num_sc_per_device=4)
    assert (model.plan.stacks[0].max_ids_per_partition, model.plan.stacks[0].max_unique_ids_per_partition) == (1, 1)
    # One SparseCore in all: a's 1000 rows pad to round_up(1000, 8) = 1000.
    one = stack_message("a", [table_message("a", 1000, 16, 1000, 0, 0, [("fa", 0)])], num_sparsecores=1)
    model = from_embedding_spec({"stacked_table_specs": [one]}, num_sc_per_device=1)
    assert model.topology.num_partitions == 1 and model.plan.stacks[0].vocab_size == 1000


def test_an_object_with_a_name_but_no_table_spec_is_not_a_feature():
    with pytest.raises(ConfigError, match=re.escape("feature_specs[0]: expected a jax-tpu-embedding FeatureSpec (with "
                                                    ".name and .table_spec) or a list / dict of them, got "
                                                    "SimpleNamespace")):
        from_jax_tpu_embedding([NS(name="fa")], global_device_count=2, num_sc_per_device=4)


def test_a_plan_stack_without_tables_is_refused():
    # A hand-made StackingPlan may carry a stack of no table (plan_stacking lets it by: it holds no
    # feature); no library spec can say it, so a message would drop it silently.
    from scwork.sharding import StackingPlan
    from scwork.sharding.stacking import Stack

    a = TableSpec("a", 1000, 16, combiner="sum", optimizer="adam")
    plan = plan_stacking([FeatureSpec("fa", a)], scwork.Topology(2, 4), None, batch_size=16)
    with_empty = StackingPlan([*plan.stacks, Stack("nothing", (), (), 16, "adam", "sum", 8, 64, 32)], plan.topology,
                              plan.rotation, 16)
    with pytest.raises(ConfigError, match=re.escape("the plan's stacks ['nothing'] hold no table; the library has "
                                                    "no stack without tables")):
        embedding_spec_message(with_empty.features, with_empty)


def test_a_refused_file_name_is_reported_by_the_systems_reason():
    # Python 3.13's Path.is_dir raises for a name longer than the file system allows: the error says
    # what the system said (its strerror), not the whole 5000-character name again.
    with pytest.raises(InputError, match=r"^cannot read the embedding spec 'x{20}.*: File name too long$"):
        read_embedding_spec("x" * 5000)


def test_numpy_integer_limits_are_read_as_ints():
    import numpy as np

    message = edited(lambda s: s.update(max_ids_per_partition=np.int64(64), max_unique_ids_per_partition=np.int32(32)))
    stack = from_embedding_spec(message, num_sc_per_device=4).plan.stacks[0]
    assert (stack.max_ids_per_partition, stack.max_unique_ids_per_partition) == (64, 32)
    assert type(stack.max_ids_per_partition) is int and type(stack.max_unique_ids_per_partition) is int
