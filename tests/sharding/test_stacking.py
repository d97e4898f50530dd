"""Feature and table stacking ([jte] table_stacking.py)."""

from __future__ import annotations

import pytest

import scwork
from scwork.errors import ConfigError
from scwork.sharding import FeatureSpec, SparsecoreConfig, StackingPlan, TableSpec, plan_stacking
from scwork.sharding.stacking import stack_name


def _feats(*tables, per_table=1):
    return [FeatureSpec(f"{t.name}_f{j}", t) for t in tables for j in range(per_table)]


def test_offsets_rotation_and_padding_by_hand():
    topo = scwork.Topology(4, 2)          # P = 8, S = 2
    t = [TableSpec("a", 100, 10), TableSpec("b", 64, 16), TableSpec("c", 1, 3)]
    plan = plan_stacking(_feats(*t), topo, stacking=[["a", "b", "c"]])
    (st,) = plan.stacks
    assert [x.padded_vocab_size for x in st.tables] == [128, 64, 64]      # round_up(v, 64)
    assert [x.row_offset_in_shard for x in st.tables] == [0, 16, 24]      # cumulative padded / 8
    assert [x.shard_rotation for x in st.tables] == [0, 2, 4]             # i * S % P
    assert [x.padded_embedding_dim for x in st.tables] == [16, 16, 8]
    assert st.embedding_dim == 16 and st.vocab_size == 256 and st.rows_per_shard == 32
    assert plan.table("b").col_shift == 2 and plan.table("b").rows_per_shard == 8


def test_rotation_wraps_and_can_be_chosen():
    topo = scwork.Topology(1, 4)          # P = 4, default rotation S = 4 -> all 0
    tables = [TableSpec(f"t{i}", 10, 8) for i in range(3)]
    plan = plan_stacking(_feats(*tables), topo, stacking=[["t0", "t1", "t2"]])
    assert [t.shard_rotation for t in plan.stacks[0].tables] == [0, 0, 0]
    plan = plan_stacking(_feats(*tables), topo, stacking=[["t0", "t1", "t2"]], rotation=3)
    assert [t.shard_rotation for t in plan.stacks[0].tables] == [0, 3, 2]
    assert plan.rotation == 3


def test_feature_stacking_row_offsets():
    t = TableSpec("words", 50, 8)
    feats = [FeatureSpec("query", t), FeatureSpec("title", TableSpec("x", 5, 8)), FeatureSpec("body", t)]
    plan = plan_stacking(feats, scwork.Topology(1, 2), stacking=None, batch_size=6)
    words = plan.stack_of_table("words")
    # An unstacked table's features are ordered by name, as the library's
    # prepare_feature_specs_for_training does; stacked ones keep the given order.
    assert [f.name for f in words.features] == ["body", "query"]
    assert words.feature_position("body") == 0
    stacked = plan_stacking(feats, scwork.Topology(1, 2), stacking=[["words"]], batch_size=6)
    assert [f.name for f in stacked.stack_of_table("words").features] == ["query", "body"]
    ds = plan.to_dataset()
    assert ds["feature_row_offset"].sel(feature="query").item() == 6    # cumulative batch
    assert ds["feature_row_offset"].sel(feature="body").item() == 0


def test_auto_groups_by_dim_optimizer_combiner_in_first_appearance_order():
    """jax-tpu-embedding 0.2.0 orders by first appearance in the flattened features
    (its docstring says alphabetical; the oracle tests check the library itself)."""
    tables = [TableSpec("z", 10, 16), TableSpec("a", 10, 12), TableSpec("m", 10, 16, optimizer="adagrad"),
              TableSpec("b", 10, 15), TableSpec("c", 10, 16, combiner="mean")]
    plan = plan_stacking(_feats(*tables), scwork.Topology(2, 2), batch_size=64)
    assert [s.name for s in plan.stacks] == ["z_a_b", "m", "c"]
    assert [t.shard_rotation for t in plan.stack("z_a_b").tables] == [0, 2, 0]
    assert plan.stacks[0].table_names == ("z", "a", "b")


def test_auto_split_is_greedy_first_fit():
    # activation = padded_dim * (B // P) * 4 bytes, per feature of the table
    topo = scwork.Topology(1, 1)          # P = 1
    B = 1024
    # same padded dim everywhere; tables weigh 3, 2, 1 and 1 units through their feature counts
    t = [TableSpec(n, 10, 128) for n in "abcd"]
    feats = ([FeatureSpec(f"a{i}", t[0]) for i in range(3)] + [FeatureSpec(f"b{i}", t[1]) for i in range(2)]
             + [FeatureSpec("c0", t[2])] + [FeatureSpec("d0", t[3])])
    unit = 128 * B * 4                    # one feature's activation
    plan = plan_stacking(feats, topo, batch_size=B, activation_mem_bytes_limit=4 * unit)
    # a (3 units) -> [a]; b (2) does not fit with a -> [b]; c (1) fits with a -> [a, c];
    # d (1) does not fit with a+c (4 + 1 > 4) -> joins b
    assert [s.table_names for s in plan.stacks] == [("a", "c"), ("b", "d")]
    assert [s.activation_bytes(B) for s in plan.stacks] == [4 * unit, 3 * unit]


def test_table_alone_when_over_budget():
    t = [TableSpec("a", 10, 64), TableSpec("b", 10, 64)]
    plan = plan_stacking(_feats(*t), scwork.Topology(1, 1), batch_size=1 << 20)   # 256 MiB each
    assert [s.name for s in plan.stacks] == ["a", "b"]


def test_no_stacking_variants():
    t = [TableSpec("a", 10, 8), TableSpec("b", 10, 8)]
    feats = _feats(*t)
    for plan in (plan_stacking(feats, scwork.Topology(1, 2), stacking=None),
                 plan_stacking(feats, scwork.Topology(1, 2), stacking="none"),
                 plan_stacking(feats, scwork.Topology(1, 2), stacking=[["a", "b"]],
                               config=SparsecoreConfig(disable_table_stacking=True))):
        assert [s.name for s in plan.stacks] == ["a", "b"]


def test_manual_groups_leave_others_alone():
    t = [TableSpec(n, 10, 8) for n in "abc"]
    plan = plan_stacking(_feats(*t), scwork.Topology(1, 2), stacking=[["c", "a"]])
    assert [s.table_names for s in plan.stacks] == [("c", "a"), ("b",)]


@pytest.mark.parametrize("stacking, fragment", [
    ([["a", "zz"]], "no feature uses"),
    ([["a", "b"], ["a"]], "more than one stacking group"),
    ([[]], "non-empty list"),
    ([["a", "opt"]], "different optimizers"),
    ([["a", "mean"]], "different combiners"),
    ("best", "stacking must be"),
    (42, "list of lists"),
])
def test_manual_group_errors(stacking, fragment):
    t = [TableSpec("a", 10, 8), TableSpec("b", 10, 8), TableSpec("opt", 10, 8, optimizer="adam"),
         TableSpec("mean", 10, 8, combiner="mean")]
    with pytest.raises(ConfigError, match=fragment):
        plan_stacking(_feats(*t), scwork.Topology(1, 2), stacking=stacking, batch_size=8)


def test_other_errors():
    t = TableSpec("a", 10, 8)
    with pytest.raises(ConfigError, match="needs batch_size"):
        plan_stacking([FeatureSpec("f", t)], scwork.Topology(1, 2))
    with pytest.raises(ConfigError, match="appears twice"):
        plan_stacking([FeatureSpec("f", t), FeatureSpec("f", t)], scwork.Topology(1, 2), stacking=None)
    with pytest.raises(ConfigError, match="two different tables"):
        plan_stacking([FeatureSpec("f", t), FeatureSpec("g", TableSpec("a", 11, 8))], scwork.Topology(1, 2),
                      stacking=None)
    with pytest.raises(ConfigError, match="int32"):
        plan_stacking(_feats(TableSpec("x", 2**31 - 1, 8), TableSpec("y", 2**31 - 1, 8)), scwork.Topology(1, 1),
                      stacking=[["x", "y"]])
    with pytest.raises(ConfigError, match="no SparseCore"):
        plan_stacking([FeatureSpec("f", t)], scwork.Topology(1, 0), stacking=None)
    with pytest.raises(ConfigError, match="topology must be"):
        plan_stacking([FeatureSpec("f", t)], "v5p", stacking=None)


def test_limits_per_stack():
    a = TableSpec("a", 10, 8, max_ids_per_partition=5, max_unique_ids_per_partition=2)
    b = TableSpec("b", 10, 8, max_ids_per_partition=9)
    c = TableSpec("c", 10, 8)
    feats = _feats(a, b, c)
    topo = scwork.Topology(2, 2)
    plan = plan_stacking(feats, topo, stacking=[["a", "b"]])
    # A stack of several tables gets jax-tpu-embedding's default limits (256), not its tables'.
    assert (plan.stack("a_b").max_ids_per_partition, plan.stack("a_b").max_unique_ids_per_partition) == (256, 256)
    largest = plan_stacking(feats, topo, stacking=[["a", "b"]], stack_limit_rule="largest_table")
    assert (largest.stack("a_b").max_ids_per_partition, largest.stack("a_b").max_unique_ids_per_partition) == (9, 2)
    unconfigured = plan_stacking(feats, topo, stacking=[["c", "b"], ["a"]])
    assert unconfigured.stack("c_b").max_ids_per_partition == 256  # b sets a limit
    bare = plan_stacking(_feats(c, TableSpec("d", 10, 8)), topo, stacking=[["c", "d"]])
    assert bare.stack("c_d").max_ids_per_partition is None  # no table sets one: no limit
    with pytest.raises(ConfigError, match="stack_limit_rule"):
        plan_stacking(feats, topo, stacking=[["a", "b"]], stack_limit_rule="max")
    assert (plan.stack("c").max_ids_per_partition, plan.stack("c").max_unique_ids_per_partition) == (None, None)
    cfg = SparsecoreConfig(max_ids_per_table={"c": 17}, max_unique_ids_per_table={"c": 4})
    plan = plan_stacking(feats, topo, stacking=[["a", "b"]], config=cfg, stack_limits={"a_b": (3, None)})
    assert (plan.stack("a_b").max_ids_per_partition, plan.stack("a_b").max_unique_ids_per_partition) == (3, None)
    assert (plan.stack("c").max_ids_per_partition, plan.stack("c").max_unique_ids_per_partition) == (5, 1)
    plan = plan_stacking(feats, topo, stacking=None,
                         stack_limits={"c": {"max_ids_per_partition": 4, "max_unique_ids_per_partition": 2}})
    assert plan.stack("c").max_ids_per_partition == 4
    with pytest.raises(ConfigError, match="unknown stacks"):
        plan_stacking(feats, topo, stacking=None, stack_limits={"zzz": (1, 1)})
    with pytest.raises(ConfigError, match="positive ints"):
        plan_stacking(feats, topo, stacking=None, stack_limits={"c": (0, 1)})


def test_stack_names_are_shortened_like_the_reference():
    names = [f"table_number_{i}" for i in range(10)]
    long = stack_name(names)
    assert long[:53] == "_".join(names)[:50] + "..."
    assert len(long) == 50 + 3 + 12 and "..." in long
    assert stack_name(["a", "b"]) == "a_b"


def test_plan_object_is_reused_and_checked():
    t = TableSpec("a", 10, 8)
    feats = [FeatureSpec("f", t)]
    plan = plan_stacking(feats, scwork.Topology(1, 2), stacking=None)
    assert plan_stacking(feats, scwork.Topology(2, 1), stacking=plan) is plan
    with pytest.raises(ConfigError, match="P=2"):
        plan_stacking(feats, scwork.Topology(2, 2), stacking=plan)
    with pytest.raises(ConfigError, match="not in the StackingPlan"):
        plan_stacking([FeatureSpec("g", t)], scwork.Topology(1, 2), stacking=plan)
    two = plan_stacking([FeatureSpec("f", t), FeatureSpec("g", t)], scwork.Topology(1, 2), stacking=None)
    with pytest.raises(ConfigError, match="not in features"):
        plan_stacking(feats, scwork.Topology(1, 2), stacking=two)


def test_to_dataset_and_repr():
    t = [TableSpec("a", 100, 10), TableSpec("b", 30, 16, max_ids_per_partition=7)]
    plan = plan_stacking(_feats(*t, per_table=2), scwork.Topology(2, 2), batch_size=8)
    assert [s.name for s in plan.stacks] == ["a_b"] and plan.stacks[0].table_names == ("a", "b")
    ds = plan.to_dataset()
    assert set(ds.sizes) == {"table", "feature", "stack"}
    assert ds.sizes["feature"] == 4 and ds.sizes["stack"] == 1
    for name, var in ds.data_vars.items():
        assert "long_name" in var.attrs and "units" in var.attrs, name
    assert ds["padded_vocab_size"].values.tolist() == [128, 32]
    assert ds["row_offset_in_shard"].values.tolist() == [0, 32]
    assert ds["col_shift"].values.tolist() == [0, 2]
    assert ds["stack_vocab_size"].item() == 160
    assert ds["configured_max_ids_per_partition"].item() == 256  # several tables: the default
    assert ds["stack_activation_bytes"].item() == 4 * 16 * (8 // 4) * 4
    assert ds.attrs["num_partitions"] == 4
    text = repr(plan)
    assert "a_b: 2 tables, 4 features" in text and "col_shift" in text and "limits ids<=256" in text


def test_stack_limits_override_a_given_plan_instead_of_being_ignored():
    import scwork
    from scwork.errors import ConfigError
    from scwork.sharding import FeatureSpec, TableSpec, plan_stacking

    features = [FeatureSpec(f"f{i}", TableSpec(f"t{i}", 1000, 16, max_ids_per_partition=64)) for i in range(2)]
    topo = scwork.Topology(2, 2)
    plan = plan_stacking(features, topo, stacking=None)
    overridden = plan_stacking(features, topo, stacking=plan, stack_limits={"t1": (32, 16)})
    assert (overridden.stack("t0").max_ids_per_partition, overridden.stack("t1").max_ids_per_partition) == (64, 32)
    assert overridden.stack("t1").max_unique_ids_per_partition == 16
    assert plan.stack("t1").max_ids_per_partition == 64  # the given plan is not mutated
    with pytest.raises(ConfigError, match="unknown stacks"):
        plan_stacking(features, topo, stacking=plan, stack_limits={"nope": (8, 8)})


def test_auto_stacking_groups_by_quantization_too():
    # [jte] table_stacking.py: the grouping key is (padded dim, optimizer, combiner, quantization).
    import scwork
    from scwork.errors import ConfigError
    from scwork.quant import QuantizationConfig
    from scwork.sharding import FeatureSpec, TableSpec, plan_stacking

    int8 = QuantizationConfig(256, -1.0, 1.0)
    tables = [TableSpec("a", 100, 8), TableSpec("b", 100, 8), TableSpec("c", 100, 8, quantization=int8),
              TableSpec("d", 100, 8, quantization=QuantizationConfig(256, -1.0, 1.0))]
    features = [FeatureSpec(f"f_{t.name}", t) for t in tables]
    plan = plan_stacking(features, scwork.Topology(1, 2), batch_size=64)
    assert sorted(tuple(t.table.name for t in s.tables) for s in plan.stacks) == [("a", "b"), ("c", "d")]
    with pytest.raises(ConfigError, match="different quantization"):
        plan_stacking(features, scwork.Topology(1, 2), stacking=[["a", "c"]], batch_size=64)
    with pytest.raises(ConfigError, match="QuantizationConfig"):
        TableSpec("e", 100, 8, quantization=(256, -1.0, 1.0))


def test_plans_of_equal_arguments_are_shared_and_only_those():
    """plan_stacking keeps recent plans by their arguments: equal ones share a plan, others do not."""
    import scwork
    from scwork.errors import ConfigError as _ConfigError
    from scwork.sharding import FeatureSpec as _F, TableSpec as _T, plan_stacking as _plan

    def feats(dim=16):
        return [_F(f"f{i}", _T(f"t{i}", 1000, dim)) for i in range(4)]

    topo = scwork.Topology(2, 2)
    a = _plan(feats(), topo, "auto", batch_size=64)
    assert _plan(feats(), topo, "auto", batch_size=64) is a            # equal values, new objects
    assert _plan(tuple(feats()), topo, "auto", batch_size=64) is a
    assert _plan(feats(), topo, "auto", batch_size=64, stack_limits={}) is a
    assert _plan(feats(dim=32), topo, "auto", batch_size=64) is not a  # another table width
    assert _plan(feats(), scwork.Topology(2, 4), "auto", batch_size=64) is not a
    assert _plan(feats(), topo, None, batch_size=64) is not a
    assert [s.name for s in _plan(feats(), topo, None, batch_size=64).stacks] == ["t0", "t1", "t2", "t3"]
    # a bool is no batch size, even where the plan of batch size 1 is kept
    _plan(feats(), topo, "auto", batch_size=1)
    with pytest.raises(_ConfigError, match="batch_size"):
        _plan(feats(), topo, "auto", batch_size=True)
    # manual groups and limits overrides are planned every time
    groups = [["t0", "t1"]]
    assert _plan(feats(), topo, groups) is not _plan(feats(), topo, groups)
    limited = _plan(feats(), topo, None, stack_limits={"t0": (8, 8)})
    assert limited.stack("t0").max_ids_per_partition == 8
    assert _plan(feats(), topo, None, stack_limits={"t0": (16, 8)}).stack("t0").max_ids_per_partition == 16
    # limits given as plain (int or None) pairs are keyed (Scenario passes every stack's)
    assert _plan(feats(), topo, None, stack_limits={"t0": (8, 8)}) is limited
    assert _plan(feats(), topo, None, stack_limits={"t0": (8, None)}) is not limited
    assert _plan(feats(), topo, None, stack_limits={"t0": (8, None)}).stack("t0").max_unique_ids_per_partition \
        is None
    assert _plan(feats(), topo, None, stack_limits={"t1": (8, 8)}).stack("t0").max_ids_per_partition is None
    # a bool is no limit: True must not find the plan of 1
    one = _plan(feats(), topo, None, stack_limits={"t0": (1, 1)})
    assert one.stack("t0").max_ids_per_partition == 1
    with pytest.raises(_ConfigError):
        _plan(feats(), topo, None, stack_limits={"t0": (True, 1)})
    # a plan passed in is checked against the features once, then reused while it lives
    assert _plan(feats(), topo, a) is _plan(feats(), topo, a)
