"""from_keras_rs on hand-written configs: no Keras, no library, values worked out by hand.

tests/interop/test_keras_rs.py compares with Keras-RS's own SparseCore build (the
``oracle`` extra); this file pins what :func:`scwork.interop.keras_rs.from_keras_rs`
reads from duck-typed configs (``SimpleNamespace`` and dicts, as the layer's
``get_config()`` gives them) with the expected stacks written out: which tables stack
together (optimizer settings, learning rates as float32), the order of the features
(paths sorted as strings), placements, limits (the largest of a stack's tables), and
every refusal's message.

Tables have 1000 rows (padded to 1024 over 8 partitions: 2 devices x 4 SparseCores),
so a stack of two tables puts the second at row offset 1024 / 8 = 128 with shard
rotation 4 (the SparseCores of one device).
"""

from __future__ import annotations

import re
from types import SimpleNamespace as NS

import pytest

from scwork.errors import ConfigError
from scwork.interop.keras_rs import KERAS_OPTIMIZER_DEFAULTS, from_keras_rs


def table(name, *, dim=16, optimizer="adam", max_ids=64, max_unique=32, placement="sparsecore", vocab=1000,
          combiner="mean"):
    return NS(name=name, vocabulary_size=vocab, embedding_dim=dim, optimizer=optimizer, combiner=combiner,
              placement=placement, max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_unique)


def feature(name, tbl, batch=8, dim=16):
    return NS(name=name, table=tbl, input_shape=(batch, 1), output_shape=(batch, dim))


def plan(model):
    """(stack, tables, max ids, max unique ids) of every stack."""
    return [(s.name, s.table_names, s.max_ids_per_partition, s.max_unique_ids_per_partition)
            for s in model.plan.stacks]


def read(configs, **kwargs):
    kwargs = {"global_device_count": 2, "num_sc_per_device": 4, **kwargs}
    return from_keras_rs(configs, **kwargs)


def two_tables(opt_a, opt_b, **kwargs):
    return read({"a": feature("fa", table("a", optimizer=opt_a)), "b": feature("fb", table("b", optimizer=opt_b))},
                **kwargs)


# -- stacking and limits -----------------------------------------------------------


def test_auto_stacks_tables_of_one_dimension_with_the_largest_limits():
    a = table("a", max_ids=64, max_unique=32)
    b = table("b", max_ids=128, max_unique=16)
    c = table("c", dim=32)
    model = read({"x": feature("fx", a), "y": feature("fy", b), "z": feature("fz", c, dim=32)})
    # a and b (dimension 16, adam, mean) stack; their limits: max(64, 128), max(32, 16).
    assert plan(model) == [("a_b", ("a", "b"), 128, 32), ("c", ("c",), 64, 32)]
    assert model.stacking == [["a", "b"], ["c"]]
    assert model.stack_limits == {
        "a_b": {"max_ids_per_partition": 128, "max_unique_ids_per_partition": 32,
                "suggested_coo_buffer_size_per_device": None},
        "c": {"max_ids_per_partition": 64, "max_unique_ids_per_partition": 32,
              "suggested_coo_buffer_size_per_device": None}}
    b_in_stack = model.plan.stacks[0].tables[1]
    assert (b_in_stack.row_offset_in_shard, b_in_stack.shard_rotation) == (128, 4)
    assert model.batch_size == 8 and model.rotation == 4
    assert (model.topology.num_devices, model.topology.sparsecores_per_device) == (2, 4)
    assert [f.name for f in model.features] == ["fx", "fy", "fz"]


def test_auto_groups_are_ordered_by_their_first_table():
    # Tables z (dim 32) and a (dim 16): auto stacks each alone; the groups come in the
    # order of the features' tables (paths "p" < "q": z's feature first).
    model = read({"p": feature("fp", table("z", dim=32), dim=32), "q": feature("fq", table("a"))})
    assert model.stacking == [["z"], ["a"]]


def test_no_stacking_and_explicit_groups():
    configs = {"x": feature("fx", table("a")), "y": feature("fy", table("b")), "z": feature("fz", table("c"))}
    assert read(configs, table_stacking=None).stacking is None
    assert [s.table_names for s in read(configs, table_stacking=None).plan.stacks] == [("a",), ("b",), ("c",)]
    assert read(configs, table_stacking=[]).stacking is None            # an empty list stacks nothing
    assert read(configs, table_stacking=["c", "a"]).stacking == [["c", "a"]]      # one list: one stack
    assert read(configs, table_stacking=("c", "a")).stacking == [["c", "a"]]
    assert read(configs, table_stacking=[["b", "c"], ("a",)]).stacking == [["b", "c"], ["a"]]


@pytest.mark.parametrize("bad", ["manual", "Auto", "", "AUTO", 5, [["a"], "b"], [["a", 1]], [1]])
def test_bad_table_stacking(bad):
    configs = {"x": feature("fx", table("a")), "y": feature("fy", table("b"))}
    with pytest.raises(ConfigError, match=re.escape(f"table_stacking must be None, 'auto'")) as err:
        read(configs, table_stacking=bad)
    assert repr(bad) in str(err.value)


def test_table_stacking_of_unknown_or_incompatible_tables():
    configs = {"x": feature("fx", table("a")), "y": feature("fy", table("b", optimizer="sgd")),
               "z": feature("fz", table("c", placement="default_device"))}
    with pytest.raises(ConfigError, match=re.escape("names tables ['c'] that no SparseCore feature uses; "
                                                    "SparseCore tables: ['a', 'b']")):
        read(configs, table_stacking=["a", "c"])
    with pytest.raises(ConfigError, match=re.escape("table_stacking group ['a', 'b']: its tables' optimizers have "
                                                    "different settings")):
        read(configs, table_stacking=[["a", "b"]])
    # An empty group is refused by the planner (it names no optimizer to compare).
    with pytest.raises(ConfigError, match=re.escape("every stacking group must be a non-empty list of table names, "
                                                    "got []")):
        read(configs, table_stacking=[[]])


# -- optimizers --------------------------------------------------------------------


def test_keras_optimizer_defaults():
    # Keras 3's defaults for the four optimizers Keras-RS runs on the SparseCore.
    assert KERAS_OPTIMIZER_DEFAULTS == {
        "sgd": {"learning_rate": 0.01},
        "adagrad": {"learning_rate": 0.001, "initial_accumulator_value": 0.1},
        "adam": {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7},
        "ftrl": {"learning_rate": 0.001, "learning_rate_power": -0.5, "initial_accumulator_value": 0.1,
                 "l1_regularization_strength": 0.0, "l2_regularization_strength": 0.0, "beta": 0.0}}


class Adam:
    """A Keras optimizer instance as far as from_keras_rs reads it: its class name and get_config()."""

    def __init__(self, **config):
        self.config = config

    def get_config(self):
        return dict(self.config)


class Sgd:
    get_config = None              # no callable get_config: the defaults


def test_optimizers_with_the_same_settings_stack():
    # By name (any case), as an instance with the default settings and keys that are not
    # settings, and as a serialized dict: all Adam at 0.001, 0.9, 0.999, 1e-7.
    same = [("adam", "Adam"), ("ADAM", Adam(learning_rate=0.001, name="adam_7", weight_decay=None)),
            ("adam", {"class_name": "Adam", "config": {"beta_1": 0.9}}),
            ("adam", {"class_name": "Adam"}), ("adam", {"class_name": "adam", "config": None})]
    for opt_a, opt_b in same:
        assert two_tables(opt_a, opt_b).stacking == [["a", "b"]], (opt_a, opt_b)
    assert two_tables("sgd", Sgd()).stacking == [["a", "b"]]
    assert two_tables("ftrl", "Ftrl").stacking == [["a", "b"]]
    assert two_tables("adagrad", "adagrad").stacking == [["a", "b"]]


def test_optimizers_with_other_settings_do_not_stack():
    different = [("adam", "sgd"), ("adam", Adam(beta_1=0.5)), ("adam", Adam(learning_rate=0.01)),
                 ("adam", {"class_name": "Adam", "config": {"epsilon": 1e-3}}),
                 ("adagrad", {"class_name": "Adagrad", "config": {"initial_accumulator_value": 0.0}}),
                 ("ftrl", {"class_name": "Ftrl", "config": {"learning_rate_power": -1.0}})]
    for opt_a, opt_b in different:
        assert two_tables(opt_a, opt_b).stacking == [["a"], ["b"]], (opt_a, opt_b)


def test_learning_rates_compare_as_float32():
    # Keras keeps the learning rate in a float32 variable: 0.1 and 0.1 + 1e-9 are the
    # same float32 (0.10000000149011612), 0.1 and 0.1 + 1e-7 are not (float32 steps
    # near 0.1 are 7.45e-9 apart).
    assert two_tables(Adam(learning_rate=0.1), Adam(learning_rate=0.1 + 1e-9)).stacking == [["a", "b"]]
    assert two_tables(Adam(learning_rate=0.1), Adam(learning_rate=0.1 + 1e-7)).stacking == [["a"], ["b"]]
    # An int rate is a number too: 1 and 1.0 are one setting.
    assert two_tables(Adam(learning_rate=1), Adam(learning_rate=1.0)).stacking == [["a", "b"]]
    # A schedule (not a number) is compared by its repr: two equal schedules stack, others do not.
    assert two_tables(Adam(learning_rate="cosine(0.1)"), Adam(learning_rate="cosine(0.1)")).stacking == [["a", "b"]]
    assert two_tables(Adam(learning_rate="cosine(0.1)"), Adam(learning_rate="cosine(0.2)")).stacking == [["a"], ["b"]]


@pytest.mark.parametrize("optimizer, shown", [("rmsprop", "'rmsprop'"), ({"class_name": "Lion"}, "'lion'"),
                                              ({"config": {}}, "''"), (3, "'int'")])
def test_unknown_optimizers(optimizer, shown):
    with pytest.raises(ConfigError, match=re.escape(f"table 'b': Keras-RS runs only SGD, Adagrad, Adam and Ftrl on "
                                                    f"the SparseCore, got optimizer {shown}")):
        two_tables("adam", optimizer)


# -- paths, placements, config dicts -----------------------------------------------


def test_features_in_the_order_of_their_paths_as_strings():
    # A list of 12 features: paths "0", "1", "10", "11", "2", ... "9" (the library sorts
    # the joined paths as strings); a dict's keys in sorted order, nested ones joined with ".".
    tbl = table("t")
    configs = {"b": [feature(f"f{i}", tbl) for i in range(12)], "a": {"y": feature("ay", tbl),
                                                                       "x": feature("ax", tbl)}}
    model = read(configs)
    assert [f.name for f in model.features] == ["ax", "ay", "f0", "f1", "f10", "f11"] + [f"f{i}" for i in
                                                                                          range(2, 10)]
    assert plan(model) == [("t", ("t",), 64, 32)]
    # A tuple is a list too.
    assert [f.name for f in read((feature("p", tbl), feature("q", tbl))).features] == ["p", "q"]


def test_placements():
    configs = {"a": feature("fa", table("a", placement="auto")), "b": feature("fb", table("b")),
               "c": feature("fc", table("c", placement="default_device"))}
    # "auto" goes to the SparseCore by default, "default_device" never.
    assert [f.name for f in read(configs).features] == ["fa", "fb"]
    assert [f.name for f in read(configs, auto_placement="default_device").features] == ["fb"]
    with pytest.raises(ConfigError, match="auto_placement must be 'sparsecore' or 'default_device', got 'tpu'"):
        read(configs, auto_placement="tpu")
    with pytest.raises(ConfigError, match=re.escape("feature 'x': placement 'sc' is not one of "
                                                    "('auto', 'default_device', 'sparsecore')")):
        read({"x": feature("fx", table("a", placement="sc"))})
    with pytest.raises(ConfigError, match="no feature has its table on the SparseCore"):
        read({"c": feature("fc", table("c", placement="default_device"))})
    with pytest.raises(ConfigError, match="no feature has its table on the SparseCore"):
        read({"a": feature("fa", table("a", placement="auto"))}, auto_placement="default_device")


def config_dict(table_stacking="auto"):
    """A DistributedEmbedding get_config(): tables by index into "tables", dicts for configs."""
    tables = [vars(table("a", max_ids=256)), vars(table("b"))]
    features = {"u": {"name": "fu", "table": 1, "output_shape": [4, 2, 16]},
                "v": {"name": "fv", "table": 0, "output_shape": [4, 2, 16]}}
    return {"feature_configs": features, "tables": tables, "table_stacking": table_stacking}


def test_a_layer_config_dict():
    model = read(config_dict())
    # Batch 4 x 2 = 8 samples; feature u uses table b, v table a; stacked in the order of
    # the features' tables (u's b first), limits max(256, 64), 32.
    assert model.batch_size == 8
    assert [(f.name, f.table.name) for f in model.features] == [("fu", "b"), ("fv", "a")]
    assert plan(model) == [("b_a", ("b", "a"), 256, 32)]
    # The config's table_stacking, unless given; a config without one: "auto".
    assert read(config_dict(table_stacking=None)).stacking is None
    assert read(config_dict(table_stacking=None), table_stacking="auto").stacking == [["b", "a"]]
    cfg = config_dict()
    del cfg["table_stacking"]
    assert read(cfg).stacking == [["b", "a"]]


class Layer:
    """A DistributedEmbedding as from_keras_rs reads it: get_config() and _feature_configs."""

    def __init__(self, config):
        self.config, self._feature_configs = config, config["feature_configs"]

    def get_config(self):
        return self.config


def test_a_layer_object():
    model = read(Layer(config_dict(table_stacking=[["a"], ["b"]])))
    assert model.stacking == [["a"], ["b"]]
    assert plan(model) == [("a", ("a",), 256, 32), ("b", ("b",), 64, 32)]
    # An object with get_config but no _feature_configs is not a layer: read as a feature tree.
    not_a_layer = NS(get_config=lambda: config_dict())
    with pytest.raises(ConfigError, match="feature_configs\\[top\\]: expected a Keras-RS FeatureConfig"):
        read(not_a_layer)


@pytest.mark.parametrize("index", [2, 3, -1])
def test_a_table_index_out_of_range(index):
    cfg = config_dict()
    cfg["feature_configs"]["u"]["table"] = index
    with pytest.raises(ConfigError, match=re.escape(f"feature 'u': table index {index} is not one of the 2 tables "
                                                    "of the config")):
        read(cfg)


def test_a_bool_table_is_not_an_index():
    cfg = config_dict()
    cfg["feature_configs"]["u"]["table"] = True
    with pytest.raises(ConfigError, match=re.escape("bool '' has no 'placement'")):
        read(cfg)


def test_missing_attributes_and_keys():
    tbl = table("a")
    del tbl.vocabulary_size
    with pytest.raises(ConfigError, match=re.escape("SimpleNamespace 'a' has no 'vocabulary_size': not a Keras-RS "
                                                    "FeatureConfig / TableConfig")):
        read({"x": feature("fx", tbl)})
    cfg = config_dict()
    del cfg["tables"][0]["combiner"]
    with pytest.raises(ConfigError, match=re.escape("dict '' has no 'combiner'")):
        read(cfg)


@pytest.mark.parametrize("partial", [NS(output_shape=(8, 16)), NS(table=None), NS(table=None, name="f"),
                                     NS(name="f", output_shape=(8, 16)), NS(table=None, output_shape=(8, 16))])
def test_an_object_lacking_one_of_table_name_output_shape_is_no_feature(partial):
    # A feature needs all three attributes; with fewer it is neither a feature nor a branch.
    with pytest.raises(ConfigError, match=re.escape("feature_configs[a]: expected a Keras-RS FeatureConfig (or a list "
                                                    "/ dict of them), got SimpleNamespace")):
        read({"a": partial})


def test_auto_groups_in_the_order_of_their_first_table():
    # Features by path: x (dim 16), z (dim 32), y (dim 16). Auto stacks x with y, z alone;
    # the groups come in the order of their first tables: x before z, though y comes after z.
    model = read({"p1": feature("f1", table("x")), "p2": feature("f2", table("z", dim=32), dim=32),
                  "p3": feature("f3", table("y"))})
    assert model.stacking == [["x", "y"], ["z"]]


def test_not_a_feature_tree():
    with pytest.raises(ConfigError, match=re.escape("feature_configs[a.1]: expected a Keras-RS FeatureConfig (or a "
                                                    "list / dict of them), got int")):
        read({"a": [feature("f", table("t")), 7]})
    # A dict lacking one of name / table / output_shape is a branch, not a feature.
    with pytest.raises(ConfigError, match=re.escape("feature_configs[f.name]: expected")):
        read({"f": {"name": "f", "table": vars(table("t"))}})


def test_bad_tables_and_two_tables_of_one_name():
    with pytest.raises(ConfigError, match="Keras-RS table 'a': "):
        read({"x": feature("fx", table("a", vocab=0))})
    with pytest.raises(ConfigError, match=re.escape("two different tables are named 'a'; Keras-RS would use the "
                                                    "first for both")):
        read({"x": feature("fx", table("a")), "y": feature("fy", table("a", dim=32), dim=32)})
    # Same table settings but another optimizer setting: still two tables.
    with pytest.raises(ConfigError, match="two different tables are named 'a'"):
        read({"x": feature("fx", table("a")), "y": feature("fy", table("a", optimizer=Adam(beta_2=0.5)))})
    # The same two in the other order (the first table's settings sort before the second's).
    with pytest.raises(ConfigError, match="two different tables are named 'a'"):
        read({"x": feature("fx", table("a", optimizer=Adam(beta_2=0.5))), "y": feature("fy", table("a"))})
    # One table object (or an equal one) under two features is one table.
    assert plan(read({"x": feature("fx", table("a")), "y": feature("fy", table("a"))})) == [("a", ("a",), 64, 32)]


def test_features_of_different_batch_sizes():
    with pytest.raises(ConfigError, match=re.escape("features have different batch sizes {'fx': 8, 'fy': 4}")):
        read({"x": feature("fx", table("a")), "y": feature("fy", table("b"), batch=4)})
