"""Stacking plans whose stacks, row offsets and names are worked out by hand (issue 21).

Every expected value below is written out with its arithmetic; none is computed by
scwork. ``Topology(d, s)`` has ``P = d * s`` partitions and ``S = s`` SparseCores per
device (the default rotation). A table's vocabulary is padded to ``8 * P`` rows and
its width to 8 values (jax-tpu-embedding, table_stacking.py).
"""

from __future__ import annotations

import pytest

import scwork
from scwork.errors import ConfigError
from scwork.sharding import FeatureSpec, SparsecoreConfig, TableSpec, plan_stacking
from scwork.sharding.stacking import (
    DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
    StackingPlan,
    TableInStack,
    normalize_features,
    stack_name,
)


def _three_table_plan(batch_size=8):
    """a (100 x 10) and b (30 x 16, max_ids 7) stacked by hand, c (5 x 3) alone, on P = 4, S = 2."""
    a = TableSpec("a", 100, 10)
    b = TableSpec("b", 30, 16, max_ids_per_partition=7)
    c = TableSpec("c", 5, 3, max_ids_per_partition=6, max_unique_ids_per_partition=3)
    feats = [FeatureSpec("fa0", a), FeatureSpec("fb0", b), FeatureSpec("fa1", a), FeatureSpec("fc", c)]
    return plan_stacking(feats, scwork.Topology(2, 2), stacking=[["a", "b"]], batch_size=batch_size)


def test_to_dataset_every_column_by_hand():
    ds = _three_table_plan().to_dataset()
    assert ds["table"].values.tolist() == ["a", "b", "c"]
    assert ds["feature"].values.tolist() == ["fa0", "fb0", "fa1", "fc"]   # a_b in the given order, then c
    assert ds["stack"].values.tolist() == ["a_b", "c"]
    assert ds["stack_of_table"].values.tolist() == ["a_b", "a_b", "c"]
    assert ds["position"].values.tolist() == [0, 1, 0]
    assert ds["vocab_size"].values.tolist() == [100, 30, 5]
    assert ds["embedding_dim"].values.tolist() == [10, 16, 3]
    # round_up(100, 32) = 128, round_up(30, 32) = 32, round_up(5, 32) = 32
    assert ds["padded_vocab_size"].values.tolist() == [128, 32, 32]
    assert ds["padded_embedding_dim"].values.tolist() == [16, 16, 8]
    # b starts after a's 128 / 4 = 32 rows of every shard; c is alone
    assert ds["row_offset_in_shard"].values.tolist() == [0, 32, 0]
    assert ds["col_shift"].values.tolist() == [0, 2, 0]                  # (1 * S) % P = 2
    assert ds["col_offset"].values.tolist() == [0, 128, 0]               # 32 * P
    assert ds["combiner"].values.tolist() == ["sum", "sum", "sum"]
    assert ds["optimizer"].values.tolist() == ["sgd", "sgd", "sgd"]
    assert ds["stack_of_feature"].values.tolist() == ["a_b", "a_b", "a_b", "c"]
    assert ds["table_of_feature"].values.tolist() == ["a", "b", "a", "c"]
    assert ds["feature_position"].values.tolist() == [0, 1, 2, 0]
    assert ds["stack_num_tables"].values.tolist() == [2, 1]
    assert ds["stack_num_features"].values.tolist() == [3, 1]
    assert ds["stack_vocab_size"].values.tolist() == [160, 32]           # 128 + 32; 32
    assert ds["stack_rows_per_shard"].values.tolist() == [40, 8]         # 160 / 4; 32 / 4
    assert ds["stack_embedding_dim"].values.tolist() == [16, 8]
    assert ds["stack_bytes"].values.tolist() == [160 * 16 * 4, 32 * 8 * 4]   # 10240, 1024
    # a stack of two tables gets the library's default 256; c keeps its own (6, 3)
    assert ds["configured_max_ids_per_partition"].values.tolist() == [256, 6]
    assert ds["configured_max_unique_ids_per_partition"].values.tolist() == [256, 3]
    # feature k of a stack starts at k * batch = k * 8
    assert ds["feature_row_offset"].values.tolist() == [0, 8, 16, 0]
    # 3 features x 16 values x (8 // 4 = 2 samples per SparseCore) x 4 B = 384; c: 8 x 2 x 4 = 64
    assert ds["stack_activation_bytes"].values.tolist() == [384, 64]
    assert ds["stack_samples"].values.tolist() == [24, 8]                # 3 x 8; 1 x 8
    assert ds.attrs["num_partitions"] == 4 and ds.attrs["rotation"] == 2 and ds.attrs["batch_size"] == 8
    assert ds.attrs["topology"] == str(scwork.Topology(2, 2))
    assert ds["stack_vocab_size"].attrs == {"long_name": "rows of the stack (sum of padded vocabularies)",
                                            "units": "rows"}
    assert ds["position"].attrs["units"] == "1"
    assert ds["stack_of_table"].attrs["units"] == ""


def test_to_dataset_without_batch_size_or_limits():
    feats = [FeatureSpec("f", TableSpec("t", 9, 8)), FeatureSpec("g", TableSpec("u", 9, 8))]
    ds = plan_stacking(feats, scwork.Topology(1, 1), stacking=[["t", "u"]]).to_dataset()
    assert "feature_row_offset" not in ds and "stack_activation_bytes" not in ds and "stack_samples" not in ds
    assert ds.attrs["batch_size"] == -1
    # no table sets a limit: the stack has none, shown as -1
    assert ds["configured_max_ids_per_partition"].values.tolist() == [-1]
    assert ds["configured_max_unique_ids_per_partition"].values.tolist() == [-1]
    # P = 1: round_up(9, 8) = 16 rows each, u starts at row 16
    assert ds["row_offset_in_shard"].values.tolist() == [0, 16]
    assert ds["col_offset"].values.tolist() == [0, 16]


def test_repr_lines_by_hand():
    plan = _three_table_plan()
    assert repr(plan).splitlines() == [
        "StackingPlan(2 stacks, P=4, rotation=2, batch_size=8)",
        "  a_b: 2 tables, 3 features, 160 rows x 16, sgd/sum, limits ids<=256 unique<=256",
        "    a                    vocab         100 ->         128  row_offset_in_shard         0  col_shift    0",
        "    b                    vocab          30 ->          32  row_offset_in_shard        32  col_shift    2",
        "  c: 1 tables, 1 features, 32 rows x 8, sgd/sum, limits ids<=6 unique<=3",
        "    c                    vocab           5 ->          32  row_offset_in_shard         0  col_shift    0",
    ]
    feats = [FeatureSpec("f", TableSpec("t", 9, 8))]
    bare = plan_stacking(feats, scwork.Topology(1, 1), stacking=None)
    assert repr(bare).splitlines()[:2] == ["StackingPlan(1 stacks, P=1, rotation=1)",
                                           "  t: 1 tables, 1 features, 16 rows x 8, sgd/sum"]   # round_up(9, 8)
    # only the unique limit set: the limits are still shown
    uniq = plan_stacking(feats, scwork.Topology(1, 1), stacking=None, stack_limits={"t": (None, 3)})
    assert repr(uniq).splitlines()[1] == "  t: 1 tables, 1 features, 16 rows x 8, sgd/sum, limits ids<=None unique<=3"


def test_html_table_by_hand():
    html = _three_table_plan()._repr_html_()
    assert "StackingPlan: 2 stacks, P=4, rotation=2, batch_size=8" in html
    for cell in ("a_b", "a, b", "fa0, fb0, fa1", "160", "256", "fc", ">6<", ">3<"):
        assert cell in html, cell
    bare = plan_stacking([FeatureSpec("f", TableSpec("t", 9, 8))], scwork.Topology(1, 1), stacking=None)
    assert "StackingPlan: 1 stacks, P=1, rotation=1" in bare._repr_html_()
    assert "batch_size" not in bare._repr_html_().split("</caption>")[0]


def test_lookups_of_missing_names_are_errors():
    plan = _three_table_plan()
    st = plan.stack("a_b")
    assert st.table("b").position == 1 and st.feature_position("fa1") == 2
    assert plan.stack_of_feature("fc").name == "c" and plan.table("c").rows_per_shard == 8   # 32 / 4
    assert [f.name for f in plan.features] == ["fa0", "fb0", "fa1", "fc"]
    assert plan.num_partitions == 4
    for call in (lambda: st.table("c"), lambda: st.feature_position("fc"), lambda: plan.stack("a"),
                 lambda: plan.stack_of_feature("zz"), lambda: plan.stack_of_table("zz"), lambda: plan.table("zz")):
        with pytest.raises(ConfigError):
            call()


def test_table_in_stack_reduces_the_rotation_modulo_partitions():
    t = TableSpec("t", 8, 8)
    assert TableInStack(t, "s", 1, 32, 8, 0, 5, 4).shard_rotation == 1     # 5 % 4
    assert TableInStack(t, "s", 1, 32, 8, 0, 4, 4).shard_rotation == 0     # 4 % 4
    assert TableInStack(t, "s", 1, 32, 8, 0, 3, 4).col_shift == 3
    assert TableInStack(t, "s", 0, 32, 8, 0, 0, 4).rows_per_shard == 8     # 32 / 4
    with pytest.raises(ConfigError):
        TableInStack(t, "s", 0, 32, 8, 0, -1, 4)
    with pytest.raises(ConfigError):
        TableInStack(t, "s", 0, 32, 8, 0, 0, 0)


def test_normalize_features_forms():
    t = TableSpec("t", 8, 8)
    fa, fb = FeatureSpec("a", t), FeatureSpec("b", t)
    assert normalize_features(fa) == (fa,)
    assert normalize_features({"b": fb, "a": fa}) == (fa, fb)      # sorted keys, as jax.tree.leaves
    assert normalize_features([fb, fa]) == (fb, fa)
    with pytest.raises(ConfigError, match="keys must match"):
        normalize_features({"x": fa})           # the key after the name
    with pytest.raises(ConfigError, match="keys must match"):
        normalize_features({"0": fa})           # the key before the name
    with pytest.raises(ConfigError, match="list of FeatureSpec"):
        normalize_features(42)
    with pytest.raises(ConfigError, match="empty"):
        normalize_features([])
    with pytest.raises(ConfigError, match="FeatureSpec objects"):
        normalize_features([fa, "b"])
    # a dict of features stacks in sorted key order
    u = TableSpec("u", 8, 8)
    plan = plan_stacking({"z": FeatureSpec("z", t), "y": FeatureSpec("y", u)}, scwork.Topology(1, 1),
                         batch_size=8)
    assert [s.name for s in plan.stacks] == ["u_t"]


def test_stack_name_cut_at_exactly_max_length():
    fifty = ["a" * 24, "b" * 25]                       # 24 + 1 + 25 = 50 characters: kept
    assert stack_name(fifty) == "a" * 24 + "_" + "b" * 25
    names = ["abcdefghij"] * 5 + ["k"]                 # 5 x 10 + 5 underscores + 1 = 56 characters
    # sha256("abcdefghij_..._k") starts c5b77ad43ff7
    assert stack_name(names) == "abcdefghij_abcdefghij_abcdefghij_abcdefghij_abcdef...c5b77ad43ff7"
    # sha256("alpha_beta_gamma") starts e072
    assert stack_name(["alpha", "beta", "gamma"], max_length=5, hash_length=4) == "alpha...e072"
    assert stack_name(["alpha", "beta", "gamma"], max_length=16) == "alpha_beta_gamma"


def test_stack_limit_forms_and_bad_values():
    a, b = TableSpec("a", 8, 8), TableSpec("b", 8, 8)
    feats = [FeatureSpec("fa", a), FeatureSpec("fb", b)]
    topo = scwork.Topology(1, 2)
    plan = plan_stacking(feats, topo, stacking=None, stack_limits={"a": [3, 4], "b": {"max_ids_per_partition": 1}})
    assert (plan.stack("a").max_ids_per_partition, plan.stack("a").max_unique_ids_per_partition) == (3, 4)
    assert (plan.stack("b").max_ids_per_partition, plan.stack("b").max_unique_ids_per_partition) == (1, None)
    for bad in ((1, 2, 3), (1,), (), "12", 5, (True, 1), (1, 1.5), (1, 0), (-1, None)):
        with pytest.raises(ConfigError, match="stack_limits"):
            plan_stacking(feats, topo, stacking=None, stack_limits={"a": bad})
    with pytest.raises(ConfigError, match="must be a dict"):
        plan_stacking(feats, topo, stacking=None, stack_limits=[("a", (1, 1))])


def test_limits_from_config_per_table():
    a = TableSpec("a", 8, 8, max_ids_per_partition=5)
    b = TableSpec("b", 8, 8)
    feats = [FeatureSpec("fa", a), FeatureSpec("fb", b)]
    topo = scwork.Topology(2, 2)                          # P = 4
    cfg = SparsecoreConfig(max_ids_per_table={"a": 400, "b": 40}, max_unique_ids_per_table={"a": 8})
    largest = plan_stacking(feats, topo, stacking=[["a", "b"]], config=cfg, stack_limit_rule="largest_table")
    # a: its own 5 wins over ceil(400 / 4) = 100; b: ceil(40 / 4) = 10 -> max(5, 10) = 10;
    # unique: a from the config, ceil(8 / 4) = 2; b none -> 2
    st = largest.stack("a_b")
    assert (st.max_ids_per_partition, st.max_unique_ids_per_partition) == (10, 2)
    alone = plan_stacking(feats, topo, stacking=None, config=cfg)
    assert (alone.stack("a").max_ids_per_partition, alone.stack("a").max_unique_ids_per_partition) == (5, 2)
    assert (alone.stack("b").max_ids_per_partition, alone.stack("b").max_unique_ids_per_partition) == (10, None)
    # no table sets a limit but the config does: the library's default for the stack
    bare = [FeatureSpec("fc", TableSpec("c", 8, 8)), FeatureSpec("fd", TableSpec("d", 8, 8))]
    only_cfg = SparsecoreConfig(max_unique_ids_per_table={"d": 4})
    st = plan_stacking(bare, topo, stacking=[["c", "d"]], config=only_cfg).stack("c_d")
    assert (st.max_ids_per_partition, st.max_unique_ids_per_partition) == (256, 256)
    st = plan_stacking(bare, topo, stacking=[["c", "d"]], config=only_cfg,
                       stack_limit_rule="largest_table").stack("c_d")
    assert (st.max_ids_per_partition, st.max_unique_ids_per_partition) == (None, 1)   # ceil(4 / 4)


def test_static_buffer_of_a_table_left_alone_and_its_bound():
    topo = scwork.Topology(2, 4)                          # P = 8, S = 4
    t = TableSpec("t", 8, 8, max_ids_per_partition=1, suggested_coo_buffer_size_per_device=100)
    u = TableSpec("u", 8, 8, max_ids_per_partition=1)
    feats = [FeatureSpec("ft", t), FeatureSpec("fu", u)]
    st = plan_stacking(feats, topo, stacking=None).stack("t")
    assert st.suggested_coo_buffer_size_per_device == 100
    assert st.static_buffer_size_per_sc(4) == 32          # round_up(100, 32) / 4
    assert st.static_buffer_size_per_sc(3) == 40          # round_up(100, 24) = 120, / 3
    assert plan_stacking(feats, topo, stacking=None).stack("u").static_buffer_size_per_sc(4) is None
    # stacking drops the table's buffer, as the library's stacking functions do
    assert plan_stacking(feats, topo, stacking=[["t", "u"]]).stack("t_u").suggested_coo_buffer_size_per_device \
        is None
    # largest buffer: round_up(max_ids 1, 8) x S x P = 8 x 4 x 8 = 256 entries per device
    for ok in (256, 225, 1):                              # 225 rounds up to 8 x 4 x 8 = 256 as well
        st = plan_stacking(feats, topo, stacking=None,
                           stack_limits={"u": {"max_ids_per_partition": 1,
                                               "suggested_coo_buffer_size_per_device": ok}}).stack("u")
        assert st.suggested_coo_buffer_size_per_device == ok
    with pytest.raises(ConfigError, match="exceeds"):     # round_up(257, 32) = 288 > 256
        plan_stacking(feats, topo, stacking=None,
                      stack_limits={"u": {"max_ids_per_partition": 1, "suggested_coo_buffer_size_per_device": 257}})
    # max_ids 9: round_up(9, 8) = 16 -> 16 x 4 x 8 = 512
    st = plan_stacking(feats, topo, stacking=None,
                       stack_limits={"u": {"max_ids_per_partition": 9,
                                           "suggested_coo_buffer_size_per_device": 512}}).stack("u")
    assert st.suggested_coo_buffer_size_per_device == 512
    with pytest.raises(ConfigError, match="exceeds"):
        plan_stacking(feats, topo, stacking=None,
                      stack_limits={"u": {"max_ids_per_partition": 9, "suggested_coo_buffer_size_per_device": 513}})
    # without a limit nothing bounds it, up to int32
    st = plan_stacking(feats, topo, stacking=None,
                       stack_limits={"u": {"suggested_coo_buffer_size_per_device": 2**31 - 1}}).stack("u")
    assert st.suggested_coo_buffer_size_per_device == 2**31 - 1 and st.max_ids_per_partition is None
    st = plan_stacking(feats, topo, stacking=None,
                       stack_limits={"t": {"max_ids_per_partition": 1,
                                           "suggested_coo_buffer_size_per_device": None}}).stack("t")
    assert st.suggested_coo_buffer_size_per_device is None
    # a pair (not a dict) keeps the table's own buffer
    st = plan_stacking(feats, topo, stacking=None, stack_limits={"t": (2, 2)}).stack("t")
    assert st.suggested_coo_buffer_size_per_device == 100
    for bad in (0, True, 2**31, "8", 1.0):
        with pytest.raises(ConfigError, match="suggested_coo_buffer_size_per_device must be"):
            plan_stacking(feats, topo, stacking=None,
                          stack_limits={"u": {"suggested_coo_buffer_size_per_device": bad}})


def test_argument_checks():
    feats = [FeatureSpec("f", TableSpec("t", 8, 8)), FeatureSpec("g", TableSpec("u", 8, 8))]
    topo = scwork.Topology(1, 2)
    for kwargs in ({"rotation": True}, {"rotation": -1}, {"rotation": 1.0}, {"batch_size": 0},
                   {"batch_size": True}, {"batch_size": 2.0}, {"activation_mem_bytes_limit": 0},
                   {"activation_mem_bytes_limit": True}, {"activation_mem_bytes_limit": 2.0},
                   {"config": "cfg"}, {"stacking": "best", "batch_size": 8}):
        with pytest.raises(ConfigError):
            plan_stacking(feats, topo, **{"stacking": None, **kwargs})
    # the smallest accepted values
    plan = plan_stacking(feats, topo, stacking=[["t", "u"]], rotation=0, batch_size=1)
    assert [t.shard_rotation for t in plan.stacks[0].tables] == [0, 0]
    # batch 1 on P = 2: 1 // 2 = 0 samples per SparseCore, 0 B each, 0 + 0 <= 1 B: one stack
    plan = plan_stacking(feats, topo, batch_size=1, activation_mem_bytes_limit=1)
    assert [s.name for s in plan.stacks] == ["t_u"]
    # batch 2: 8 x 1 x 4 = 32 B each, more than 1 B: apart
    plan = plan_stacking(feats, topo, batch_size=2, activation_mem_bytes_limit=1)
    assert [s.name for s in plan.stacks] == ["t", "u"]


def test_auto_budget_boundary_and_recorded_budget():
    # P = 4, batch 10: 10 // 4 = 2 samples per SparseCore; width 9 pads to 16
    a, b = TableSpec("a", 8, 9), TableSpec("b", 8, 16)
    feats = [FeatureSpec("fa", a), FeatureSpec("fb", b)]
    topo = scwork.Topology(2, 2)
    # each table: 16 x 2 x 4 = 128 B; together 256 B
    together = plan_stacking(feats, topo, batch_size=10, activation_mem_bytes_limit=256)
    assert [s.name for s in together.stacks] == ["a_b"]
    assert together.stacks[0].activation_bytes(10) == 256
    assert together.stacks[0].activation_mem_bytes_limit == 256
    assert together.stacks[0].embedding_dim == 16
    apart = plan_stacking(feats, topo, batch_size=10, activation_mem_bytes_limit=255)
    assert [s.name for s in apart.stacks] == ["a", "b"]
    assert [s.activation_mem_bytes_limit for s in apart.stacks] == [255, 255]
    # tables left unstacked keep the library's default budget, 2 MiB
    alone = plan_stacking(feats, topo, stacking=None, activation_mem_bytes_limit=255)
    assert [s.activation_mem_bytes_limit for s in alone.stacks] == [DEFAULT_ACTIVATION_MEM_BYTES_LIMIT] * 2
    assert DEFAULT_ACTIVATION_MEM_BYTES_LIMIT == 2 * 1024 * 1024
    manual = plan_stacking(feats, topo, stacking=[["b", "a"]], activation_mem_bytes_limit=255)
    assert manual.stacks[0].activation_mem_bytes_limit == 255 and manual.stacks[0].table_names == ("b", "a")
    # two features of a: 2 x 128 = 256 B alone; with b 384 B > 256: apart
    feats2 = feats + [FeatureSpec("fa2", a)]
    plan = plan_stacking(feats2, topo, batch_size=10, activation_mem_bytes_limit=256)
    assert [s.name for s in plan.stacks] == ["a", "b"]
    plan = plan_stacking(feats2, topo, batch_size=10, activation_mem_bytes_limit=384)
    assert [s.name for s in plan.stacks] == ["a_b"]
    assert [f.name for f in plan.stacks[0].features] == ["fa", "fb", "fa2"]


def test_features_of_tables_left_out_of_manual_groups_are_sorted_by_name():
    a, b, c = TableSpec("a", 8, 8), TableSpec("b", 8, 8), TableSpec("c", 8, 8)
    feats = [FeatureSpec("z", c), FeatureSpec("fb", b), FeatureSpec("y", c), FeatureSpec("fa", a)]
    plan = plan_stacking(feats, scwork.Topology(1, 1), stacking=[["b", "a"]])
    assert [f.name for f in plan.stack("c").features] == ["y", "z"]
    assert [f.name for f in plan.stack("b_a").features] == ["fb", "fa"]   # the given order
    grouped_alone = plan_stacking(feats, scwork.Topology(1, 1), stacking=[["c"]])
    assert [f.name for f in grouped_alone.stack("c").features] == ["z", "y"]


def test_colliding_stack_names_and_mismatched_plans():
    feats = [FeatureSpec("f1", TableSpec("a", 8, 8)), FeatureSpec("f2", TableSpec("b", 8, 8)),
             FeatureSpec("f3", TableSpec("a_b", 8, 8))]
    with pytest.raises(ConfigError, match="collide"):
        plan_stacking(feats, scwork.Topology(1, 1), stacking=[["a", "b"]])
    plan = plan_stacking(feats, scwork.Topology(1, 1), stacking=None)
    other = [FeatureSpec("f1", TableSpec("a", 16, 8))] + feats[1:]
    with pytest.raises(ConfigError, match="differs"):
        plan_stacking(other, scwork.Topology(1, 1), stacking=plan)
    with pytest.raises(ConfigError, match="non-empty"):
        plan_stacking(feats, scwork.Topology(1, 1), stacking=[["a", 3]])


def test_int32_bound_on_stack_rows():
    # P = 2: vocabularies pad to 16; 2**30 + (2**30 - 16) = 2**31 - 16 rows fit int32 ids
    topo = scwork.Topology(1, 2)
    x, y = TableSpec("x", 2**30, 8), TableSpec("y", 2**30 - 16, 8)
    plan = plan_stacking([FeatureSpec("fx", x), FeatureSpec("fy", y)], topo, stacking=[["x", "y"]])
    assert plan.stacks[0].vocab_size == 2**31 - 16 and plan.table("y").row_offset_in_shard == 2**29
    y2 = TableSpec("y", 2**30 - 15, 8)                     # pads to 2**30: 2**31 rows, one past int32
    with pytest.raises(ConfigError, match="int32"):
        plan_stacking([FeatureSpec("fx", x), FeatureSpec("fy", y2)], topo, stacking=[["x", "y"]])


def test_plan_cache_keeps_the_32_most_recent():
    from scwork.sharding import stacking as stacking_module

    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    topo = scwork.Topology(1, 1)
    stacking_module._PLAN_CACHE.clear()
    first = plan_stacking(feats, topo, stacking=None, batch_size=1)
    for b in range(2, 33):                                 # 31 more: 32 plans kept
        plan_stacking(feats, topo, stacking=None, batch_size=b)
    assert plan_stacking(feats, topo, stacking=None, batch_size=1) is first
    plan_stacking(feats, topo, stacking=None, batch_size=33)   # the 33rd pushes out the oldest
    again = plan_stacking(feats, topo, stacking=None, batch_size=1)
    assert again is not first and again.batch_size == 1
    assert len(stacking_module._PLAN_CACHE) == 32


def test_plan_given_as_is_keeps_its_own_values():
    feats = [FeatureSpec("f", TableSpec("t", 8, 8, max_ids_per_partition=4)),
             FeatureSpec("g", TableSpec("u", 8, 8))]
    plan = plan_stacking(feats, scwork.Topology(1, 2), stacking=[["t", "u"]], rotation=1, batch_size=4)
    assert isinstance(plan, StackingPlan)
    over = plan_stacking(feats, scwork.Topology(2, 1), stacking=plan, stack_limits={"t_u": (5, 6)})
    assert (over.rotation, over.batch_size, over.topology) == (1, 4, scwork.Topology(1, 2))
    assert (over.stacks[0].max_ids_per_partition, over.stacks[0].max_unique_ids_per_partition) == (5, 6)
    assert [t.shard_rotation for t in over.stacks[0].tables] == [0, 1]


def test_dicts_of_features_with_equal_keys_are_not_confused():
    wide = plan_stacking({"f": FeatureSpec("f", TableSpec("t", 8, 16))}, scwork.Topology(1, 1), stacking=None)
    narrow = plan_stacking({"f": FeatureSpec("f", TableSpec("t", 8, 8))}, scwork.Topology(1, 1), stacking=None)
    assert (wide.stacks[0].embedding_dim, narrow.stacks[0].embedding_dim) == (16, 8)


def test_plans_are_frozen():
    import dataclasses

    plan = _three_table_plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.stacks[0].name = "other"              # plans are shared by the cache of recent plans
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.stacks[0].tables[1].row_offset_in_shard = 0


def test_lookups_by_name_do_not_stop_at_a_larger_name():
    feats = [FeatureSpec("fz", TableSpec("z", 8, 8)), FeatureSpec("fa", TableSpec("a", 16, 8))]
    plan = plan_stacking(feats, scwork.Topology(1, 1), stacking=None)
    assert [s.name for s in plan.stacks] == ["z", "a"]
    assert plan.stack("a").vocab_size == 16 and plan.stack("z").vocab_size == 8
    both = plan_stacking(feats, scwork.Topology(1, 1), stacking=[["z", "a"]])
    st = both.stacks[0]
    assert st.table("a").position == 1 and st.table("a").row_offset_in_shard == 8   # after z's 8 rows
    assert st.table("z").position == 0
    assert st.feature_position("fa") == 1 and st.feature_position("fz") == 0


def test_a_table_alone_keeps_a_long_name():
    name = "t" * 60                                  # longer than the 50 characters of a stack name
    feats = [FeatureSpec("f", TableSpec(name, 8, 8)), FeatureSpec("g", TableSpec("u", 8, 8))]
    plan = plan_stacking(feats, scwork.Topology(1, 1), stacking=None)
    assert [s.name for s in plan.stacks] == [name, "u"]
    assert plan_stacking(feats, scwork.Topology(1, 1), stacking=[[name]]).stacks[0].name == name


@pytest.mark.parametrize("stacking", ["zzz", "Auto", "best", "nonE"])
def test_unknown_stacking_strings_are_refused(stacking):
    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    with pytest.raises(ConfigError, match="stacking must be"):
        plan_stacking(feats, scwork.Topology(1, 1), stacking=stacking, batch_size=8)


def test_a_plan_for_more_partitions_is_refused():
    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    plan = plan_stacking(feats, scwork.Topology(2, 2), stacking=None)     # P = 4
    with pytest.raises(ConfigError, match="P=4"):
        plan_stacking(feats, scwork.Topology(1, 2), stacking=plan)        # P = 2


def test_error_messages_give_the_figures():
    topo = scwork.Topology(2, 4)                       # P = 8, S = 4
    feats = [FeatureSpec("fu", TableSpec("u", 8, 8))]
    # round_up(257, 8 x 4) = 288; round_up(1, 8) x 4 x 8 = 256
    with pytest.raises(ConfigError, match=r"rounded up to 288.* = 256 entries"):
        plan_stacking(feats, topo, stacking=None,
                      stack_limits={"u": {"max_ids_per_partition": 1, "suggested_coo_buffer_size_per_device": 257}})
    x, y = TableSpec("x", 2**30, 8), TableSpec("y", 2**30, 8)
    with pytest.raises(ConfigError, match="has 2147483648 rows"):           # 2**30 + 2**30 rows
        plan_stacking([FeatureSpec("fx", x), FeatureSpec("fy", y)], scwork.Topology(1, 2), stacking=[["x", "y"]])


def test_features_from_a_generator():
    t, u = TableSpec("t", 8, 8), TableSpec("u", 8, 8)
    plan = plan_stacking((f for f in [FeatureSpec("f", t), FeatureSpec("g", u)]), scwork.Topology(1, 1),
                         batch_size=8)
    assert [s.name for s in plan.stacks] == ["t_u"]
    assert [f.name for f in plan.features] == ["f", "g"]
