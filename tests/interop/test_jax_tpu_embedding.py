"""jax-tpu-embedding specs and EmbeddingSpecProto files to and from scwork, against the real library.

Every hypothesis case builds a model in the library (several tables, some shared by
several features, table names out of alphabetical order, features given as a list or
a dict), stacks it the way users do (``auto_stack_tables``, explicit
``stack_tables`` groups, or nothing but ``prepare_feature_specs_for_training``, or
not at all yet) and
sometimes changes stack limits and buffers as FDO does
(``update_preprocessing_parameters``). Then:

- :func:`from_jax_tpu_embedding` gives the library's stacks exactly (names, tables
  and their order, row offsets, rotations, feature row offsets, limits, buffers),
  and ``plan_stacking`` rebuilds that plan from the returned groups and limits;
- scwork's ``compute_stats`` / ``preprocess`` on the converted features equal the
  library's ``preprocess_sparse_dense_matmul_input`` statistics on the original specs;
- :func:`to_jax_tpu_embedding` of the converted model gives specs the library
  preprocesses to the same statistics, and converting them back gives the same plan;
- the checkpoint's ``embedding_spec/proto.pbtxt`` (written by the library's
  checkpoint manager through Orbax) is read by scwork to the same plan, written back
  by scwork and parsed by protobuf to the identical message.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import ConfigError, InputError
from scwork.interop.jax_tpu_embedding import (
    embedding_spec_message,
    format_embedding_spec,
    from_embedding_spec,
    from_jax_tpu_embedding,
    parse_embedding_spec,
    read_embedding_spec,
    to_jax_tpu_embedding,
    write_embedding_spec,
)
from scwork.sharding import (
    FeatureBatch,
    FeatureSpec,
    SparsecoreConfig,
    TableSpec,
    compute_stats,
    plan_stacking,
    preprocess,
)
from scwork.testing import oracle_examples

jte = pytest.importorskip("jax_tpu_embedding.sparsecore.lib.nn.embedding",
                          reason="the interop tests need jax-tpu-embedding (Python >= 3.12: pip install -e "
                                 "'.[interop]')")
from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec as es  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import table_stacking  # noqa: E402

pytestmark = [pytest.mark.oracle, pytest.mark.filterwarnings("ignore::scwork.errors.StaticBufferWarning")]

NAMES = ["zeta", "alpha", "mid", "beta", "user_country_embedding_table", "query_tokens_hashed_vocabulary"]


@pytest.fixture(autouse=True, scope="module")
def _quiet_library():
    try:
        from absl import logging as absl_logging
    except ImportError:
        return
    absl_logging.set_verbosity(absl_logging.ERROR)


@st.composite
def cases(draw):
    S = draw(st.sampled_from([2, 4]))
    D = draw(st.sampled_from([1, 2, 4]))
    n_tables = draw(st.integers(1, 4))
    names = draw(st.permutations(NAMES))[:n_tables]
    combiner = draw(st.sampled_from(["sum", "mean", "sqrtn"]))
    tables = [dict(name=name, vocab=draw(st.integers(1, 2000)), dim=draw(st.sampled_from([4, 8, 12, 16, 32])),
                   optimizer=draw(st.sampled_from(["sgd", "sgd", "adagrad"])),
                   combiner=combiner if draw(st.booleans()) else draw(st.sampled_from(["sum", "mean"])),
                   max_ids=draw(st.sampled_from([4, 64, 4096])), max_unique=draw(st.sampled_from([4, 64, 4096])),
                   # a static buffer no larger than its limits allow (a larger one aborts the library)
                   buffer=draw(st.sampled_from([None, None, 8 * S])))
              for name in names]
    # several features per table, named so that their order and the alphabetical order often differ
    n_features = draw(st.sampled_from([2, 3, 5, 1, 4]))
    features = [(f"{draw(st.sampled_from('zqba'))}{i}", draw(st.integers(0, n_tables - 1)))
                for i in range(n_features)]
    return dict(D=D, S=S, tables=tables, features=features, batch=draw(st.integers(1, 3)) * D * S,
                valency=draw(st.integers(1, 4)), seed=draw(st.integers(0, 2**31 - 1)),
                stacking=draw(st.sampled_from(["none", "prepared", "auto", "groups", "groups_only"])),
                group_cut=draw(st.integers(1, 3)), as_dict=draw(st.booleans()), fdo=draw(st.booleans()))


_OPTIMIZERS = {"sgd": es.SGDOptimizerSpec(), "adagrad": es.AdagradOptimizerSpec()}


def _library_specs(case):
    """The case's features in the library, as a list or a dict (stacked as the case says)."""
    tables = [es.TableSpec(name=t["name"], vocabulary_size=t["vocab"], embedding_dim=t["dim"],
                           initializer=lambda *a, **k: None, optimizer=_OPTIMIZERS[t["optimizer"]],
                           combiner=t["combiner"], max_ids_per_partition=t["max_ids"],
                           max_unique_ids_per_partition=t["max_unique"],
                           suggested_coo_buffer_size_per_device=t["buffer"]) for t in case["tables"]]
    feats = [es.FeatureSpec(name=name, table_spec=tables[i], input_shape=[case["batch"], case["valency"]],
                            output_shape=[case["batch"], tables[i].embedding_dim]) for name, i in case["features"]]
    D, S = case["D"], case["S"]
    given = {f.name: f for f in reversed(feats)} if case["as_dict"] else feats
    if case["stacking"] == "auto":
        jte.auto_stack_tables(given, global_device_count=D, num_sc_per_device=S)
    elif case["stacking"] in ("groups", "groups_only"):
        for group in _groups(case):
            table_stacking.stack_tables(given, group, global_device_count=D, num_sc_per_device=S)
    if case["stacking"] in ("none", "groups_only"):      # left (partly) unstacked
        return given
    jte.prepare_feature_specs_for_training(given, global_device_count=D, num_sc_per_device=S)
    if case["fdo"]:
        rng = np.random.default_rng(case["seed"])
        stacks = sorted({f.table_spec.stacked_table_spec.stack_name for f in feats})
        chosen = stacks[: rng.integers(1, len(stacks) + 1)]
        updated = jte.SparseDenseMatmulInputStats(
            max_ids_per_partition={n: np.array([int(rng.integers(1, 300))]) for n in chosen},
            max_unique_ids_per_partition={n: np.array([int(rng.integers(1, 300))]) for n in chosen},
            required_buffer_size_per_sc={n: np.array([8, 8]) for n in chosen})   # 8 x S per device
        jte.update_preprocessing_parameters(given, updated, num_sc_per_device=S)
    return given


def _groups(case):
    """Tables in appearance order cut into groups of the same optimizer and combiner; the
    last table of the model is left out (prepare_feature_specs_for_training stacks it)."""
    order = list(dict.fromkeys(case["tables"][i]["name"] for _, i in case["features"]))
    specs = {t["name"]: t for t in case["tables"]}
    groups, current = [], []
    for name in order[:-1] if len(order) > 1 else order:
        t = specs[name]
        if current and (len(current) >= case["group_cut"] or
                        (specs[current[0]]["optimizer"], specs[current[0]]["combiner"]) != (t["optimizer"],
                                                                                            t["combiner"])):
            groups.append(current)
            current = []
        current.append(name)
    return groups + [current]


def _leaves(given):
    return [given[k] for k in sorted(given)] if isinstance(given, dict) else list(given)


def _inputs(case, given):
    rng = np.random.default_rng(case["seed"])
    ids, weights = {}, {}
    for f in _leaves(given):
        raw = rng.zipf(1.3, size=(case["batch"], case["valency"])) - 1
        ids[f.name] = (raw % f.table_spec.vocabulary_size).astype(np.int32)
        weights[f.name] = rng.uniform(0.5, 2.0, size=raw.shape).astype(np.float32)
    return ids, weights


def _library_stats(case, given, ids, weights):
    leaves = _leaves(given)
    _, stats = jte.preprocess_sparse_dense_matmul_input(
        [ids[f.name] for f in leaves], [weights[f.name] for f in leaves], leaves, case["D"], case["D"],
        num_sc_per_device=case["S"], allow_id_dropping=True)
    return stats


def _assert_stats_equal(ours, theirs, stacks, what):
    for name in stacks:
        got = ours.sel(stack=name)
        for var, field in (("max_ids_per_partition", "max_ids_per_partition"),
                           ("max_unique_ids_per_partition", "max_unique_ids_per_partition"),
                           ("required_buffer_size_per_sc", "required_buffer_size_per_sc")):
            np.testing.assert_array_equal(got[var].values.ravel(), np.asarray(getattr(theirs, field)[name]),
                                          err_msg=f"{what}: {var} of stack {name}")
        assert int(got["dropped_ids"]) == int(theirs.id_drop_counters[name]), f"{what}: dropped ids of {name}"


def _library_facts(given):
    """Per stack: tables (name, row offset in shard, rotation), features in row order, limits, buffer."""
    facts = {}
    for f in _leaves(given):
        spec, setting = f.table_spec.stacked_table_spec, f.table_spec.setting_in_stack
        entry = facts.setdefault(spec.stack_name, {"tables": {}, "features": {}, "limits": (
            spec.max_ids_per_partition, spec.max_unique_ids_per_partition), "buffer":
            spec.suggested_coo_buffer_size_per_device, "dim": spec.stack_embedding_dim})
        entry["tables"][f.table_spec.name] = (setting.row_offset_in_shard, setting.shard_rotation)
        entry["features"][f.name] = f.id_transformation.row_offset
    return {name: {"tables": sorted((o, n, r) for n, (o, r) in e["tables"].items()),
                   "features": [n for n, _ in sorted(e["features"].items(), key=lambda x: x[1])],
                   "limits": e["limits"], "buffer": e["buffer"], "dim": e["dim"]} for name, e in facts.items()}


def _plan_facts(plan, buffers=True):
    return {s.name: {"tables": [(t.row_offset_in_shard, t.name, t.shard_rotation) for t in s.tables],
                     "features": [f.name for f in s.features],
                     "limits": (s.max_ids_per_partition, s.max_unique_ids_per_partition),
                     "buffer": s.suggested_coo_buffer_size_per_device if buffers else None, "dim": s.embedding_dim}
            for s in plan.stacks}


def _by_name(plan):
    """Stacks by name: the library has no order of stacks (scwork's may differ)."""
    return {s.name: s for s in plan.stacks}


def _valid(case):
    names = [n for n, _ in case["features"]]
    if len(set(names)) != len(names):
        return False
    # scwork needs one combiner per stack; the library's auto stacking groups by combiner too
    return True


def _batch(model, ids, weights):
    return FeatureBatch.from_dense({f.name: ids[f.name] for f in model.features},
                                   {f.name: weights[f.name] for f in model.features})


@settings(max_examples=oracle_examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_library_specs_convert_to_the_same_plan_and_statistics(case):
    assume(_valid(case))
    given = _library_specs(case)
    D, S = case["D"], case["S"]
    model = from_jax_tpu_embedding(given, global_device_count=D, num_sc_per_device=S)
    assert model.topology == scwork.Topology(D, S) and model.batch_size == case["batch"]
    if case["stacking"] in ("none", "groups_only"):
        # not (all) stacked yet: converted as prepare_feature_specs_for_training stacks the rest
        jte.prepare_feature_specs_for_training(given, global_device_count=D, num_sc_per_device=S)
        assert model.stacking is None or case["stacking"] == "groups_only"
    assert _plan_facts(model.plan) == _library_facts(given)
    # plan_stacking turns the returned groups and limits into the identical plan
    assert not isinstance(model.stacking, scwork.sharding.StackingPlan), model.stacking
    assert model.replan().stacks == model.plan.stacks
    assert [f.name for f in model.features] == [f.name for f in _leaves(given)]

    ids, weights = _inputs(case, given)
    theirs = _library_stats(case, given, ids, weights)
    batch = _batch(model, ids, weights)
    config = SparsecoreConfig(allow_id_dropping=True)
    _assert_stats_equal(compute_stats(batch, model.features, model.topology, model.plan, config=config), theirs,
                        [s.name for s in model.plan.stacks], "compute_stats")
    result = preprocess(batch, model.features, model.topology, model.plan, config=config)
    _assert_stats_equal(result.stats, theirs, [s.name for s in model.plan.stacks], "preprocess")

    # back to the library: the same stacks and statistics, and the same plan again
    specs = to_jax_tpu_embedding(model.features, model.plan)
    assert _library_facts(specs) == _library_facts(given)
    _assert_stats_equal(compute_stats(batch, model.features, model.topology, model.plan, config=config),
                        _library_stats(case, specs, ids, weights), [s.name for s in model.plan.stacks], "round trip")
    again = from_jax_tpu_embedding(specs, global_device_count=D, num_sc_per_device=S)
    assert _by_name(again.plan) == _by_name(model.plan) and again.stack_limits == model.stack_limits


@settings(max_examples=oracle_examples(30), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases(), st.sampled_from(["auto", "groups", None]))
def test_scwork_plans_applied_in_the_library(case, stacking):
    """scwork -> library -> scwork: a plan made (and tuned) in scwork is what the library runs."""
    assume(_valid(case))
    tables = [TableSpec(t["name"], t["vocab"], t["dim"], combiner=t["combiner"], optimizer=t["optimizer"],
                        max_ids_per_partition=t["max_ids"], max_unique_ids_per_partition=t["max_unique"],
                        suggested_coo_buffer_size_per_device=t["buffer"]) for t in case["tables"]]
    features = [FeatureSpec(name, tables[i]) for name, i in case["features"]]
    given = {f.name: f for f in features} if case["as_dict"] else features
    topology = scwork.Topology(case["D"], case["S"])
    groups = _groups(case) if stacking == "groups" else stacking
    plan = plan_stacking(given, topology, groups, batch_size=case["batch"])
    # a tuned limit on the first stack (what apply_limits / FDO would give)
    first = plan.stacks[0]
    plan = plan_stacking(given, topology, plan, stack_limits={first.name: (48, 24)})
    specs = to_jax_tpu_embedding(given, plan)
    assert isinstance(specs, dict) == case["as_dict"]
    assert _library_facts(specs) == _plan_facts(plan)
    model = from_jax_tpu_embedding(specs, global_device_count=case["D"], num_sc_per_device=case["S"])
    assert _by_name(model.plan) == _by_name(plan)
    ids, weights = _inputs(case, specs)
    theirs = _library_stats(case, specs, ids, weights)
    ours = compute_stats(_batch(model, ids, weights), given, topology, plan,
                         config=SparsecoreConfig(allow_id_dropping=True))
    _assert_stats_equal(ours, theirs, [s.name for s in plan.stacks], "scwork plan")


def _save_checkpoint_spec(directory, specs, D, S):
    """The library's checkpoint manager writes the EmbeddingSpecProto item (Orbax ProtoSave)."""
    ocp = pytest.importorskip("orbax.checkpoint", reason="writing a checkpoint needs orbax-checkpoint")
    from jax_tpu_embedding.sparsecore.lib.flax.nnx import checkpoint_utils

    proto = jte.create_proto_from_feature_specs(specs, global_device_count=D, num_sparsecore_per_device=S)
    manager = checkpoint_utils.create_checkpoint_manager(cp_path=directory,
                                                         cp_options=ocp.CheckpointManagerOptions())
    manager.save(1, args=ocp.args.Composite(embedding_spec=ocp.args.ProtoSave(proto)))
    manager.wait_until_finished()
    manager.close()
    return proto, directory / "1"


@settings(max_examples=oracle_examples(15), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_checkpoint_embedding_spec_read_written_and_parsed_by_protobuf(tmp_path_factory, case):
    from google.protobuf import text_format
    from jax_tpu_embedding.sparsecore.lib.proto import embedding_spec_pb2

    assume(_valid(case) and case["stacking"] not in ("none", "groups_only"))
    given = _library_specs(case)
    D, S = case["D"], case["S"]
    proto, step = _save_checkpoint_spec(tmp_path_factory.mktemp("ckpt"), given, D, S)
    assert (step / "embedding_spec" / "proto.pbtxt").is_file()

    message = read_embedding_spec(step)                       # the step folder finds the file
    model = from_embedding_spec(message, num_sc_per_device=S)
    direct = from_jax_tpu_embedding(given, global_device_count=D, num_sc_per_device=S)
    # the proto has no static buffer sizes; everything else is the library's plan
    assert _plan_facts(model.plan, buffers=False) == _plan_facts(direct.plan, buffers=False)
    assert model.replan().stacks == model.plan.stacks

    out = write_embedding_spec(message, tmp_path_factory.mktemp("out") / "proto.pbtxt")
    parsed = text_format.Parse(out.read_text(), embedding_spec_pb2.EmbeddingSpecProto())
    assert parsed == proto
    assert out.read_text() == (step / "embedding_spec" / "proto.pbtxt").read_text()

    # scwork's own message for a plan equals the library's proto of to_jax_tpu_embedding's specs
    specs = to_jax_tpu_embedding(direct.features, direct.plan)
    theirs = jte.create_proto_from_feature_specs(specs, global_device_count=D, num_sparsecore_per_device=S)
    optimizers = {t.table_name: text_format.MessageToString(t.optimizer)
                  for s in theirs.stacked_table_specs for t in s.table_specs}
    ours = embedding_spec_message(direct.features, direct.plan, input_shapes={f.name: [case["batch"], 1]
                                                                             for f in direct.features},
                                  optimizers={n: parse_embedding_spec(
                                      f"stacked_table_specs {{ table_specs {{ optimizer {{ {text} }} }} }}"
                                  )["stacked_table_specs"][0]["table_specs"][0]["optimizer"]
                                      for n, text in optimizers.items()})
    assert text_format.Parse(format_embedding_spec(ours), embedding_spec_pb2.EmbeddingSpecProto()) == theirs


def test_text_format_details_match_protobuf():
    """Escapes, floats, maps, lists, comments and the proto3 defaults, both ways."""
    from google.protobuf import text_format
    from jax_tpu_embedding.sparsecore.lib.proto import embedding_spec_pb2

    text = """
    # a comment
    stacked_table_specs <
      stack_name: 'we"ird\\n\\303\\251' "_name"
      num_sparsecores: 0x10 ;
      table_specs: [{ table_name: "t" optimizer { type: 3 learning_rate: 1e-3f
        float_params { key: "b" value: -inf } float_params: { key: "a" value: 2 }
        bool_params { key: "x" value: t } } feature_specs { input_shape: [16, 1] } }]
      activation_mem_bytes_limit: 0
    >
    """
    ours = parse_embedding_spec(text)
    theirs = text_format.Parse(text, embedding_spec_pb2.EmbeddingSpecProto())
    assert ours["stacked_table_specs"][0]["stack_name"] == 'we"ird\né_name'
    assert ours["stacked_table_specs"][0]["table_specs"][0]["optimizer"]["type"] == "ADAM"
    assert format_embedding_spec(ours) == text_format.MessageToString(theirs)
    assert text_format.Parse(format_embedding_spec(ours), embedding_spec_pb2.EmbeddingSpecProto()) == theirs


@pytest.mark.parametrize("text, message", [
    ("stacked_table_specs { stack_nam: 'x' }", "line 1: StackedTableSpecProto has no field 'stack_nam'"),
    ("stacked_table_specs { num_sparsecores: 1.5 }", "num_sparsecores: expected an integer, got '1.5'"),
    ("stacked_table_specs {\n stack_name: 'a'\n stack_name: 'b' }", "line 3: stacked_table_specs.stack_name is set"),
    ("stacked_table_specs { table_specs { optimizer { type: ADAMW } } }",
     "expected one of OPTIMIZER_TYPE_UNSPECIFIED, SGD, ADAGRAD"),
    ("stacked_table_specs { stack_name: 'a' ", "stacked_table_specs is not closed"),
    ("stacked_table_specs { [ext.field]: 1 }", "expected a field name"),
])
def test_malformed_text_names_line_and_field(text, message):
    with pytest.raises(InputError, match=message):
        parse_embedding_spec(text)


def test_read_embedding_spec_says_where_it_looked(tmp_path):
    with pytest.raises(InputError, match="holds neither proto.pbtxt nor embedding_spec/proto.pbtxt"):
        read_embedding_spec(tmp_path)


def test_specs_of_different_batch_sizes_or_topology_are_refused():
    t = es.TableSpec(name="t", vocabulary_size=100, embedding_dim=8, initializer=lambda *a, **k: None,
                     optimizer=es.SGDOptimizerSpec(), combiner="sum")
    feats = [es.FeatureSpec(name="a", table_spec=t, input_shape=[16, 1], output_shape=[16, 8]),
             es.FeatureSpec(name="b", table_spec=t, input_shape=[8, 1], output_shape=[8, 8])]
    with pytest.raises(ConfigError, match="different batch sizes"):
        from_jax_tpu_embedding(feats, global_device_count=1, num_sc_per_device=2)
    feats[1] = es.FeatureSpec(name="b", table_spec=t, input_shape=[16, 1], output_shape=[16, 8])
    jte.prepare_feature_specs_for_training(feats, global_device_count=2, num_sc_per_device=4)
    with pytest.raises(ConfigError, match=r"padded_vocab_size 128 is not round_up\(100, 8 x P=2\)"):
        from_jax_tpu_embedding(feats, global_device_count=1, num_sc_per_device=2)
    with pytest.raises(ConfigError, match="global_device_count must be a positive int"):
        from_jax_tpu_embedding(feats, global_device_count=0, num_sc_per_device=2)


def test_custom_stack_names_come_back_as_the_plan_itself():
    tables = [es.TableSpec(name=n, vocabulary_size=50, embedding_dim=8, initializer=lambda *a, **k: None,
                           optimizer=es.SGDOptimizerSpec(), combiner="sum") for n in ("b", "a")]
    feats = [es.FeatureSpec(name=f"f{i}", table_spec=t, input_shape=[8, 1], output_shape=[8, 8])
             for i, t in enumerate(tables)]
    table_stacking.stack_tables(feats, ["b", "a"], global_device_count=1, num_sc_per_device=4, stack_name="mine")
    model = from_jax_tpu_embedding(feats, global_device_count=1, num_sc_per_device=4)
    assert [s.name for s in model.plan.stacks] == ["mine"]
    assert model.stacking is model.plan and model.replan().stacks == model.plan.stacks
    again = from_jax_tpu_embedding(to_jax_tpu_embedding(model.features, model.plan), global_device_count=1,
                                   num_sc_per_device=4)
    assert _by_name(again.plan) == _by_name(model.plan)


def test_unknown_optimizers_need_a_name():
    t = es.TableSpec(name="t", vocabulary_size=100, embedding_dim=8, initializer=lambda *a, **k: None,
                     optimizer=es.F2AOptimizerSpec(), combiner="sum")
    feats = [es.FeatureSpec(name="a", table_spec=t, input_shape=[8, 1], output_shape=[8, 8])]
    with pytest.raises(ConfigError, match="optimizer 'f2a' has no SparseCore kernel scwork knows"):
        from_jax_tpu_embedding(feats, global_device_count=1, num_sc_per_device=4)
    model = from_jax_tpu_embedding(feats, global_device_count=1, num_sc_per_device=4, optimizers={"t": "adagrad"})
    assert model.features[0].table.optimizer == "adagrad"


def test_quantization_and_feature_order_survive_the_round_trip():
    from scwork.quant import QuantizationConfig

    q = QuantizationConfig(num_buckets=256, low=-0.5, high=0.75)
    t = TableSpec("zeta", 500, 12, combiner="sqrtn", optimizer="adagrad", max_ids_per_partition=40,
                  max_unique_ids_per_partition=20, quantization=q)
    u = TableSpec("alpha", 90, 16, combiner="sqrtn", optimizer="adagrad", max_ids_per_partition=30,
                  max_unique_ids_per_partition=10, quantization=q)
    features = [FeatureSpec("z", t), FeatureSpec("b", u), FeatureSpec("a", t)]
    plan = plan_stacking(features, scwork.Topology(2, 2), [["zeta", "alpha"]], batch_size=8)
    specs = to_jax_tpu_embedding(features, plan)
    assert specs[0].table_spec.quantization_config == es.QuantizationConfig(min_value=-0.5, max_value=0.75,
                                                                            num_buckets=256)
    assert [f.id_transformation.row_offset for f in specs] == [0, 8, 16]      # the plan's feature order
    model = from_jax_tpu_embedding(specs, global_device_count=2, num_sc_per_device=2)
    assert model.features == tuple(features) and _by_name(model.plan) == _by_name(plan)
    assert model.stacking == [["zeta", "alpha"]]


def test_unstacked_specs_take_the_feature_order_prepare_gives():
    """prepare_feature_specs_for_training orders a lone table's features by name; stack_tables does not."""
    for stack_first in (False, True):
        t = es.TableSpec(name="t", vocabulary_size=100, embedding_dim=8, initializer=lambda *a, **k: None,
                         optimizer=es.SGDOptimizerSpec(), combiner="sum")
        feats = [es.FeatureSpec(name=n, table_spec=t, input_shape=[8, 1], output_shape=[8, 8]) for n in ("q0", "a1")]
        if stack_first:
            table_stacking.stack_tables(feats, ["t"], global_device_count=1, num_sc_per_device=4)
        model = from_jax_tpu_embedding(feats, global_device_count=1, num_sc_per_device=4)
        jte.prepare_feature_specs_for_training(feats, global_device_count=1, num_sc_per_device=4)
        assert [f.name for f in model.plan.stacks[0].features] == [
            f.name for f in sorted(feats, key=lambda f: f.id_transformation.row_offset)] == (
            ["q0", "a1"] if stack_first else ["a1", "q0"])
        assert model.stacking == ([["t"]] if stack_first else None)


# -- regressions of issue 22 (typed errors, activation budget, rotations) -------------------------------
def _auto_stacked_with_budget(budget):
    tables = [es.TableSpec(name=n, vocabulary_size=64 * (i + 1), embedding_dim=8, initializer=lambda *a, **k: None,
                           optimizer=es.SGDOptimizerSpec(), combiner="sum", max_ids_per_partition=32,
                           max_unique_ids_per_partition=16) for i, n in enumerate(("b", "a", "c"))]
    feats = [es.FeatureSpec(name=f"f{i}", table_spec=t, input_shape=[64, 1], output_shape=[64, 8])
             for i, t in enumerate(tables)]
    jte.auto_stack_tables(feats, global_device_count=2, num_sc_per_device=4, activation_mem_bytes_limit=budget)
    jte.prepare_feature_specs_for_training(feats, global_device_count=2, num_sc_per_device=4)
    return feats


@pytest.mark.parametrize("budget", [48 * 1024, 2048 * 1024, 1024])
def test_activation_budget_survives_every_round_trip(budget):
    """A non-default activation_mem_bytes_limit is kept per stack through specs, message and text."""
    feats = _auto_stacked_with_budget(budget)
    library = {f.table_spec.stacked_table_spec.stack_name: f.table_spec.stacked_table_spec.activation_mem_bytes_limit
               for f in feats}
    model = from_jax_tpu_embedding(feats, global_device_count=2, num_sc_per_device=4)
    assert {s.name: s.activation_mem_bytes_limit for s in model.plan.stacks} == library
    assert model.replan().stacks == model.plan.stacks
    back = to_jax_tpu_embedding(model.features, model.plan)
    assert {f.table_spec.stacked_table_spec.stack_name: f.table_spec.stacked_table_spec.activation_mem_bytes_limit
            for f in back} == library
    proto = jte.create_proto_from_feature_specs(feats, global_device_count=2, num_sparsecore_per_device=4)
    from google.protobuf import text_format
    message = embedding_spec_message(model.features, model.plan)
    ours = parse_embedding_spec(format_embedding_spec(message))["stacked_table_specs"]
    theirs = parse_embedding_spec(text_format.MessageToString(proto))["stacked_table_specs"]
    without_tables = lambda stacks: [{k: v for k, v in s.items() if k != "table_specs"} for s in stacks]
    assert without_tables(ours) == without_tables(theirs)
    assert [s["activation_mem_bytes_limit"] for s in ours] == list(library.values())
    again = from_embedding_spec(message, num_sc_per_device=4)
    assert {s.name: s.activation_mem_bytes_limit for s in again.plan.stacks} == library


@pytest.mark.parametrize("budget", [48 * 1024, 4 * 2048 * 1024])     # below and above the default
def test_round_trip_self_check_compares_the_activation_budget(monkeypatch, budget):
    """to_jax_tpu_embedding's read-back check fails if the library's stacks carry another budget."""
    import dataclasses as dc

    from scwork.interop import jax_tpu_embedding as module

    feats = _auto_stacked_with_budget(budget)
    model = from_jax_tpu_embedding(feats, global_device_count=2, num_sc_per_device=4)
    real_replace = dc.replace

    def drop_budget(obj, **changes):
        changes.pop("activation_mem_bytes_limit", None)
        return real_replace(obj, **changes)

    real_stack_tables = table_stacking.stack_tables

    def stack_with_default_budget(*args, **kwargs):
        kwargs.pop("activation_mem_bytes_limit", None)
        return real_stack_tables(*args, **kwargs)

    monkeypatch.setattr(module.dataclasses, "replace", drop_budget)
    monkeypatch.setattr(table_stacking, "stack_tables", stack_with_default_budget)
    with pytest.raises(ConfigError, match="differently from the plan"):
        to_jax_tpu_embedding(model.features, model.plan)


def test_shard_rotation_of_P_or_more_is_reduced_like_the_library():
    """col_shift=4 with P=2 is the library's col_shift 0: the same partitions, not all ids in partition 1."""
    from scwork.sharding import StackingPlan
    from scwork.sharding.stacking import Stack, TableInStack

    topo = scwork.Topology(1, 2)
    t = TableSpec("t", 16, 8, max_ids_per_partition=64, max_unique_ids_per_partition=64)
    assert TableInStack(t, "t", 0, 16, 8, 0, 4, 2).shard_rotation == 0
    assert TableInStack(t, "t", 0, 16, 8, 0, 5, 2).shard_rotation == 1
    with pytest.raises(ConfigError, match="shard_rotation"):
        TableInStack(t, "t", 0, 16, 8, 0, -1, 2)
    with pytest.raises(ConfigError, match="shard_rotation"):
        TableInStack(t, "t", 0, 16, 8, 0, 2.0, 2)
    features = [FeatureSpec("f", t)]
    ids = np.arange(15, dtype=np.int64)
    batch = FeatureBatch.from_ragged({"f": (ids, np.array([0, 8, 15]))})
    stats = {}
    for shift in (0, 4):
        stack = Stack("t", (TableInStack(t, "t", 0, 16, 8, 0, shift, 2),), tuple(features), 8, "sgd", "sum", 2,
                      64, 64)
        plan = StackingPlan([stack], topo, 0, 2)
        stats[shift] = compute_stats(batch, features, topo, stacking=plan)["unique_ids"].sum(("device", "sc"))
    assert stats[4].values.tolist() == stats[0].values.tolist() == [[8, 7]]


def test_odd_spec_values_and_optimizers_are_config_errors():
    from types import SimpleNamespace as NS

    def specs(**table_changes):
        table = dict(name="t", vocabulary_size=100, embedding_dim=8, combiner="sum", optimizer="sgd",
                     max_ids_per_partition=64, max_unique_ids_per_partition=32)
        table.update(table_changes)
        return [NS(name="a", table_spec=NS(**table), output_shape=[16, 8])]

    for changes in ({"vocabulary_size": "100"}, {"vocabulary_size": 10**5000}, {"embedding_dim": 8.0},
                    {"name": 5}, {"optimizer": np.array(["sgd", "adam"])}, {"max_ids_per_partition": "x"}):
        with pytest.raises(ConfigError):
            from_jax_tpu_embedding(specs(**changes), global_device_count=1, num_sc_per_device=4)
    for shape in ("16", [16.5, 8], ["9" * 5000, 8], 16):
        bad = specs()
        bad[0].output_shape = shape
        with pytest.raises(ConfigError, match="output_shape"):
            from_jax_tpu_embedding(bad, global_device_count=1, num_sc_per_device=4)
    for optimizers in (5, ["sgd"], {"t": 3}):
        with pytest.raises(ConfigError, match="optimizers"):
            from_jax_tpu_embedding(specs(), global_device_count=1, num_sc_per_device=4, optimizers=optimizers)
    stacked = _auto_stacked_with_budget(2048 * 1024)
    stacked[0].id_transformation = NS(row_offset="0", col_offset=0, col_shift=0)
    with pytest.raises(ConfigError, match="row_offset"):
        from_jax_tpu_embedding(stacked, global_device_count=2, num_sc_per_device=4)


def test_odd_message_values_are_config_errors_naming_the_field():
    plan = plan_stacking([FeatureSpec("f", TableSpec("t", 100, 8))], scwork.Topology(1, 4), None, batch_size=8)
    message = embedding_spec_message(plan.features, plan)
    for path, value in ((("num_sparsecores",), "4"), (("num_sparsecores",), 2**64), (("stack_name",), 5),
                        (("table_specs", 0, "vocab_size"), 1.5), (("table_specs", 0, "feature_specs"), "f"),
                        (("table_specs", 0, "optimizer", "type"), "NOPE"), (("unknown_field",), 1),
                        (("table_specs", 0, "optimizer", "float_params"), {"lr": "x"})):
        broken = parse_embedding_spec(format_embedding_spec(message))
        target = broken["stacked_table_specs"][0]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        with pytest.raises(ConfigError, match=str(path[-1]) if path[-1] != 0 else ""):
            format_embedding_spec(broken)
        with pytest.raises(ConfigError, match=str(path[-1]) if path[-1] != 0 else ""):
            from_embedding_spec(broken, num_sc_per_device=4)


@pytest.mark.parametrize("text", [
    "stacked_table_specs { num_sparsecores: " + "9" * 5000 + " }",
    "stacked_table_specs { table_specs { optimizer { type: " + "9" * 5000 + " } } }",
    "stacked_table_specs { num_sparsecores: 9223372036854775808 }",
])
def test_integers_past_int64_or_4300_digits_are_input_errors(text):
    with pytest.raises(InputError, match="line 1"):
        parse_embedding_spec(text)


# -- issue 21: mutation-testing survivors ------------------------------------------------------------
def test_a_lone_table_with_its_own_budget_is_stacked_by_stack_tables():
    """A one-table stack the caller stacked (another budget) goes through stack_tables, rotation and all."""
    t = TableSpec("t", 100, 8, combiner="sum", optimizer="sgd", max_ids_per_partition=64,
                  max_unique_ids_per_partition=32)
    plan = plan_stacking([FeatureSpec("f", t)], scwork.Topology(1, 4), [["t"]], batch_size=8,
                         activation_mem_bytes_limit=1024)
    specs = to_jax_tpu_embedding(plan.features, plan)
    assert specs[0].table_spec.stacked_table_spec.activation_mem_bytes_limit == 1024
    assert from_jax_tpu_embedding(specs, global_device_count=1, num_sc_per_device=4).plan.stacks == plan.stacks


def test_stacks_of_different_rotations_are_applied_each_with_its_own():
    """Each multi-table stack is stacked with its own second table's rotation, not the plan's."""
    def table(name, vocab, dim, padded, offset, rotation, feature, row):
        return {"table_name": name, "vocab_size": vocab, "embedding_dim": dim, "padded_vocab_size": padded,
                "padded_embedding_dim": 16, "row_offset_in_shard": offset, "shard_rotation": rotation,
                "combiner": "sum", "optimizer": {"type": "SGD"},
                "feature_specs": [{"feature_name": feature, "input_shape": [16, 1], "output_shape": [16, dim],
                                   "row_offset": row, "col_offset": offset * 8, "col_shift": rotation}]}

    def stack(name, rotation, first, second):
        return {"stack_name": name, "stack_vocab_size": 1152, "stack_embedding_dim": 16, "total_sample_count": 32,
                "max_ids_per_partition": 64, "max_unique_ids_per_partition": 32, "num_sparsecores": 8,
                "table_specs": [table(first, 1000, 16, 1024, 0, 0, f"f{first}", 0),
                                table(second, 100, 8, 128, 128, rotation, f"f{second}", 16)]}
    model = from_embedding_spec({"stacked_table_specs": [stack("a_b", 2, "a", "b"), stack("c_d", 1, "c", "d")]},
                                num_sc_per_device=4)
    assert model.rotation == 2 and model.stacking is model.plan
    specs = to_jax_tpu_embedding(model.features, model.plan)
    assert {f.name: f.id_transformation.col_shift for f in specs} == {"fa": 0, "fb": 2, "fc": 0, "fd": 1}


def test_the_library_stacking_otherwise_or_refusing_is_a_config_error(monkeypatch):
    t = TableSpec("a", 100, 8, combiner="sum", optimizer="sgd")
    u = TableSpec("b", 100, 8, combiner="sum", optimizer="sgd")
    plan = plan_stacking([FeatureSpec("fa", t), FeatureSpec("fb", u)], scwork.Topology(1, 4), [["a", "b"]],
                         batch_size=8)
    # The specs read back as stacks of other names (each table alone): the self-check says so.
    from types import SimpleNamespace

    from scwork.interop import jax_tpu_embedding as module

    alone = plan_stacking(plan.features, scwork.Topology(1, 4), None, batch_size=8)
    monkeypatch.setattr(module, "from_jax_tpu_embedding", lambda *args, **kwargs: SimpleNamespace(plan=alone))
    with pytest.raises(ConfigError, match=r"jax-tpu-embedding built stacks \['a', 'b'\], the plan has \['a_b'\]"):
        to_jax_tpu_embedding(plan.features, plan)

    def refuse(*args, **kwargs):
        raise ValueError("no room")
    monkeypatch.setattr(table_stacking, "stack_tables", refuse)
    with pytest.raises(ConfigError, match="jax-tpu-embedding refused the plan: no room"):
        to_jax_tpu_embedding(plan.features, plan)


def test_initializer_input_shapes_and_optimizers_reach_the_library_specs():
    t = TableSpec("t", 100, 8, combiner="sum", optimizer="adagrad")
    plan = plan_stacking([FeatureSpec("f", t), FeatureSpec("g", t)], scwork.Topology(1, 4), None, batch_size=8)
    specs = to_jax_tpu_embedding(plan.features, plan)
    assert [f.input_shape for f in specs] == [[8, 1], [8, 1]] and [f.output_shape for f in specs] == [[8, 8], [8, 8]]
    assert callable(specs[0].table_spec.initializer)
    assert specs[0].table_spec.optimizer == es.AdagradOptimizerSpec()
    assert (specs[0].table_spec.max_ids_per_partition, specs[0].table_spec.max_unique_ids_per_partition) == (256, 256)

    def initializer(*args, **kwargs):
        return None
    optimizer = es.AdagradOptimizerSpec(learning_rate=0.5)
    specs = to_jax_tpu_embedding(plan.features, plan, initializer=initializer, input_shapes={"g": [8, 3]},
                                 optimizers={"t": optimizer})
    assert specs[0].table_spec.initializer is initializer and specs[0].table_spec.optimizer is optimizer
    assert [f.input_shape for f in specs] == [[8, 1], [8, 3]]
