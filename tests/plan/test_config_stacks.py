"""The ``[stacks]`` section of a model config: per-stack limits and static buffers, as plans are written."""

from __future__ import annotations

import pytest

from scwork.config import parse_config
from scwork.errors import ConfigError

BASE = {
    "batch_size": 64,
    "stacking": [["a", "b"]],
    "topology": {"chip": "v5p", "num_chips": 2},
    "tables": [{"name": "a", "vocab_size": 1000, "embedding_dim": 16, "max_ids_per_partition": 99},
               {"name": "b", "vocab_size": 500, "embedding_dim": 16},
               {"name": "c", "vocab_size": 50, "embedding_dim": 8}],
}


def test_stacks_set_limits_and_buffers_of_the_plan():
    cfg = parse_config({**BASE, "stacks": {"a_b": {"max_ids_per_partition": 40, "max_unique_ids_per_partition": 16,
                                                   "suggested_coo_buffer_size_per_device": 1024},
                                           "c": {"max_ids_per_partition": 8}}})
    plan = cfg.stacking_plan()
    ab, c = plan.stack("a_b"), plan.stack("c")
    assert (ab.max_ids_per_partition, ab.max_unique_ids_per_partition) == (40, 16)
    assert ab.suggested_coo_buffer_size_per_device == 1024
    assert (c.max_ids_per_partition, c.max_unique_ids_per_partition) == (8, None)
    assert cfg.stack_limits == {"a_b": (40, 16), "c": (8, None)}
    assert parse_config(cfg.to_dict()) == cfg.replace(source="<dict>")


def test_without_stacks_nothing_changes():
    cfg = parse_config(BASE)
    assert cfg.stacks == {} and cfg.stack_limits is None
    assert cfg.stacking_plan().stack("a_b").max_ids_per_partition == 256    # the library's stack default


@pytest.mark.parametrize("stacks, words", [
    ({"a_b": {"max_ids": 3}}, "unknown key"),
    ({"a_b": {"max_ids_per_partition": 0}}, "must be >= 1"),
    ({"a_b": {"max_ids_per_partition": "8"}}, "must be an integer"),
    ({"a_b": 8}, "must be a table of keys"),
    ("a_b", "must be a table of keys"),
])
def test_bad_stacks_are_config_errors_naming_the_key(stacks, words):
    with pytest.raises(ConfigError, match=words) as info:
        parse_config({**BASE, "stacks": stacks}, source="m.toml")
    assert "m.toml: stacks" in str(info.value)


def test_a_stack_the_plan_does_not_have_is_an_error_when_planning():
    cfg = parse_config({**BASE, "stacks": {"nope": {"max_ids_per_partition": 8}}})
    with pytest.raises(ConfigError, match="unknown stacks"):
        cfg.stacking_plan()
