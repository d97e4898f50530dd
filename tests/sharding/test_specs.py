"""TableSpec, FeatureSpec, SparsecoreConfig: defaults, validation, field docs."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from scwork.errors import ConfigError
from scwork.sharding import FeatureSpec, SparsecoreConfig, TableSpec
from scwork.sharding import specs as specs_module


def test_sparsecore_config_defaults_match_spec_4():
    cfg = SparsecoreConfig()
    assert cfg.disable_table_stacking is False
    assert cfg.max_ids_per_chip_per_sample is None      # jax-tpu-embedding has no such check
    assert cfg.max_ids_per_table is None
    assert cfg.max_unique_ids_per_table is None
    assert cfg.allow_id_dropping is False
    assert cfg.initialize_tables_on_host is True
    assert cfg.enable_fast_table_initialization is False


def test_table_spec_defaults_and_padding():
    t = TableSpec("t", vocab_size=1000, embedding_dim=13)
    assert (t.combiner, t.optimizer) == ("sum", "sgd")
    assert t.max_ids_per_partition is None and t.max_unique_ids_per_partition is None
    assert t.padded_embedding_dim() == 16
    assert t.padded_vocab_size(16) == 1024          # round_up(1000, 128)
    assert t.padded_vocab_size(3) == 1008           # round_up(1000, 24): non power of two


@pytest.mark.parametrize("kwargs, fragment", [
    ({"name": ""}, "name"),
    ({"vocab_size": 0}, "vocab_size must be >= 1"),
    ({"vocab_size": 2**31}, "vocab_size must be <="),
    ({"vocab_size": 10.0}, "vocab_size must be an integer"),
    ({"embedding_dim": True}, "embedding_dim must be an integer"),
    ({"combiner": "max"}, "combiner must be one of"),
    ({"optimizer": "rmsprop"}, "optimizer must be one of"),
    ({"max_ids_per_partition": 0}, "max_ids_per_partition must be >= 1"),
    ({"max_unique_ids_per_partition": -3}, "max_unique_ids_per_partition must be >= 1"),
])
def test_table_spec_validation(kwargs, fragment):
    base = {"name": "t", "vocab_size": 10, "embedding_dim": 4}
    base.update(kwargs)
    with pytest.raises(ConfigError, match=fragment):
        TableSpec(**base)


def test_specs_are_frozen():
    t = TableSpec("t", 10, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.vocab_size = 11  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        SparsecoreConfig().allow_id_dropping = True  # type: ignore[misc]


def test_feature_spec_needs_a_table_spec():
    assert FeatureSpec("f", TableSpec("t", 10, 4)).table.name == "t"
    with pytest.raises(ConfigError, match="table must be a TableSpec"):
        FeatureSpec("f", "t")
    with pytest.raises(ConfigError, match="name"):
        FeatureSpec("", TableSpec("t", 10, 4))


@pytest.mark.parametrize("kwargs, fragment", [
    ({"allow_id_dropping": 1}, "allow_id_dropping must be True or False"),
    ({"disable_table_stacking": "yes"}, "disable_table_stacking must be True or False"),
    ({"max_ids_per_chip_per_sample": 0}, "must be >= 1"),
    ({"max_ids_per_table": {"t": 0}}, r"max_ids_per_table\['t'\] must be >= 1"),
    ({"max_ids_per_table": [1, 2]}, "must be None, an int"),
    ({"max_unique_ids_per_table": {3: 4}}, "keys must be table names"),
])
def test_sparsecore_config_validation(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        SparsecoreConfig(**kwargs)


def test_table_level_limits_become_partition_limits():
    cfg = SparsecoreConfig(max_ids_per_table={"a": 100}, max_unique_ids_per_table=33)
    assert cfg.table_limits("a", 16) == (7, 3)      # ceil(100/16), ceil(33/16)
    assert cfg.table_limits("b", 16) == (None, 3)
    assert SparsecoreConfig().table_limits("a", 4) == (None, None)
    # the mapping is frozen and the config stays hashable
    with pytest.raises(TypeError):
        cfg.max_ids_per_table["a"] = 5  # type: ignore[index]
    assert hash(cfg) == hash(SparsecoreConfig(max_ids_per_table={"a": 100}, max_unique_ids_per_table=33))


@pytest.mark.parametrize("cls", [TableSpec, FeatureSpec, SparsecoreConfig])
def test_every_field_has_a_docstring_with_default(cls):
    """jax-tpu-embedding style: a string literal right under each field."""
    tree = ast.parse(inspect.getsource(specs_module))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    documented = set()
    for a, b in zip(node.body, node.body[1:]):
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant) \
                and isinstance(b.value.value, str):
            documented.add(a.target.id)
            if cls is not FeatureSpec and a.value is not None:
                assert "Default" in b.value.value, f"{cls.__name__}.{a.target.id} docstring states no default"
    assert documented == {f.name for f in dataclasses.fields(cls)}
