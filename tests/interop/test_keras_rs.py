"""Keras-RS DistributedEmbedding configs to scwork, against Keras-RS's own SparseCore build.

Keras-RS (``pip install keras-rs``, Keras 3 with ``KERAS_BACKEND=jax``) builds its
SparseCore tables in ``DistributedEmbedding.sparsecore_build``
(``keras_rs/src/layers/embedding/jax/distributed_embedding.py``). This suite runs that
very method on the CPU, with three stand-ins for the hardware only: the layer is told
a SparseCore exists (``_has_sparsecore``), how many SparseCores a device has
(``jte_utils.num_sparsecores_per_device``), and creates no table variables
(``_add_table_variable``: no SparseCore memory to put them in). The jax-tpu-embedding
FeatureSpecs it leaves in the layer are the reference.

On hypothesis-generated configs (tables shared by several features, names out of
alphabetical order, more than ten features in a list so that path "10" sorts before
"2", optimizers by name and as instances with other settings, placements
``"sparsecore"`` / ``"auto"`` / ``"default_device"``, every ``table_stacking`` form),
:func:`scwork.interop.keras_rs.from_keras_rs` of the configs, of the layer and of the
layer's ``get_config()`` gives the same stacks as the layer built (names, tables,
offsets, rotations, feature order, limits), and scwork's statistics on the converted
features equal the library's ``preprocess_sparse_dense_matmul_input`` on the layer's
specs.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from scwork.errors import ConfigError  # noqa: E402
from scwork.interop.jax_tpu_embedding import from_jax_tpu_embedding  # noqa: E402
from scwork.interop.keras_rs import from_keras_rs  # noqa: E402
from scwork.sharding import FeatureBatch, SparsecoreConfig, compute_stats  # noqa: E402
from scwork.testing import oracle_examples  # noqa: E402

keras_rs = pytest.importorskip("keras_rs", reason="the Keras-RS tests need keras-rs and Keras 3 with the JAX backend "
                                                  "(pip install keras-rs; KERAS_BACKEND=jax)")
pytest.importorskip("jax_tpu_embedding.sparsecore.lib.nn.embedding",
                    reason="Keras-RS on the SparseCore runs jax-tpu-embedding (Python >= 3.12)")
import keras  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import embedding as jte  # noqa: E402
from keras_rs.src.layers.embedding.jax import distributed_embedding as keras_rs_jax  # noqa: E402

pytestmark = [pytest.mark.oracle, pytest.mark.filterwarnings("ignore::DeprecationWarning:keras.*"),
              pytest.mark.skipif(keras.backend.backend() != "jax",
                                                     reason="Keras-RS runs on the SparseCore only with "
                                                            "KERAS_BACKEND=jax")]

NAMES = ["zeta", "alpha", "mid", "beta", "user_country_embedding_table", "query_tokens_hashed_vocabulary"]
SPARSECORES = {"per_device": 4}


@pytest.fixture(scope="module", autouse=True)
def pretend_sparsecores():
    """The hardware stand-ins (see the module docstring); nothing else of the layer is changed."""
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:
        pass
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keras_rs_jax.DistributedEmbedding, "_has_sparsecore", lambda self: True)
        patch.setattr(keras_rs_jax.jte_utils, "num_sparsecores_per_device",
                      lambda device=None: SPARSECORES["per_device"])
        patch.setattr(keras_rs_jax.DistributedEmbedding, "_add_table_variable", lambda self, *a, **k: None)
        yield


def _optimizer(kind):
    return {"adam": "adam", "sgd": "sgd", "adagrad": "adagrad", "adam_fast": keras.optimizers.Adam(learning_rate=0.01),
            "adam_default": keras.optimizers.Adam()}[kind]


@st.composite
def configs(draw):
    n_tables = draw(st.sampled_from([2, 3, 4, 1]))
    names = draw(st.permutations(NAMES))[:n_tables]
    # mostly tables that stack together (same padded width, optimizer and combiner), some that do not
    tables = [dict(name=n, vocab=draw(st.integers(1, 2000)), dim=draw(st.sampled_from([16, 16, 12, 4])),
                   optimizer=draw(st.sampled_from(["adam", "adam", "adam_default", "sgd", "adagrad", "adam_fast"])),
                   combiner=draw(st.sampled_from(["mean", "mean", "sum"])),
                   placement=draw(st.sampled_from(["sparsecore", "sparsecore", "auto", "default_device"])),
                   max_ids=draw(st.sampled_from([8, 64, 256, 4096])), max_unique=draw(st.sampled_from([8, 64, 256])))
              for n in names]
    n_features = draw(st.sampled_from([3, 5, 12, 1, 2]))
    features = [(f"f{draw(st.sampled_from('qwxyz'))}{i}", draw(st.integers(0, n_tables - 1)))
                for i in range(n_features)]
    return dict(tables=tables, features=features, S=draw(st.sampled_from([2, 4])),
                samples=draw(st.integers(1, 3)), valency=draw(st.integers(1, 3)),
                structure=draw(st.sampled_from(["list", "dict", "nested"])),
                stacking=draw(st.sampled_from(["auto", None, "groups", "one_group"])),
                seed=draw(st.integers(0, 2**31 - 1)))


def _feature_configs(case, batch):
    tables = [keras_rs.layers.TableConfig(
        name=t["name"], vocabulary_size=t["vocab"], embedding_dim=t["dim"], optimizer=_optimizer(t["optimizer"]),
        combiner=t["combiner"], placement=t["placement"], max_ids_per_partition=t["max_ids"],
        max_unique_ids_per_partition=t["max_unique"]) for t in case["tables"]]
    feats = [keras_rs.layers.FeatureConfig(name=name, table=tables[i], input_shape=(batch, case["valency"]),
                                           output_shape=(batch, tables[i].embedding_dim))
             for name, i in case["features"]]
    if case["structure"] == "list":
        return feats
    if case["structure"] == "dict":
        return {f.name[::-1]: f for f in feats}
    return {"first": feats[::2], "second": {f.name: f for f in feats[1::2]}}


def _stacking(case):
    """table_stacking: explicit groups of SparseCore tables that the library can stack together."""
    if case["stacking"] in ("auto", None):
        return case["stacking"]
    used = list(dict.fromkeys(case["tables"][i]["name"] for _, i in case["features"]))
    spec = {t["name"]: t for t in case["tables"]}
    sc = [n for n in used if spec[n]["placement"] != "default_device"]
    key = {n: (spec[n]["optimizer"].replace("_default", ""), spec[n]["combiner"]) for n in sc}
    groups = {}
    for n in sc:
        groups.setdefault(key[n], []).append(n)
    if case["stacking"] == "one_group":
        return max(groups.values(), key=len) if groups else []
    return [g for g in groups.values()]


def _build(case):
    D = len(__import__("jax").devices())
    SPARSECORES["per_device"] = case["S"]
    batch = case["samples"] * D * case["S"]
    feature_configs = _feature_configs(case, batch)
    layer = keras_rs.layers.DistributedEmbedding(feature_configs, table_stacking=_stacking(case))
    layer.sparsecore_build()
    return feature_configs, layer, D, batch


def _sc_case(case):
    names = [n for n, _ in case["features"]]
    on_sc = any(case["tables"][i]["placement"] != "default_device" for _, i in case["features"])
    return len(set(names)) == len(names) and on_sc


@settings(max_examples=oracle_examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(configs())
def test_keras_rs_configs_plan_as_the_layer_builds(case):
    assume(_sc_case(case))
    feature_configs, layer, D, batch = _build(case)
    specs = layer._config.feature_specs                # {path: jax-tpu-embedding FeatureSpec}
    S = case["S"]
    theirs = from_jax_tpu_embedding(specs, global_device_count=D, num_sc_per_device=S)
    ours = from_keras_rs(feature_configs, global_device_count=D, num_sc_per_device=S,
                         table_stacking=_stacking(case))
    assert {s.name: s for s in ours.plan.stacks} == {s.name: s for s in theirs.plan.stacks}
    assert [f.name for f in ours.features] == [f.name for f in theirs.features]
    assert ours.replan().stacks == ours.plan.stacks
    # the layer itself and its serialized config say the same
    for source in (layer, layer.get_config()):
        again = from_keras_rs(source, global_device_count=D, num_sc_per_device=S)
        assert again.plan.stacks == ours.plan.stacks and again.features == ours.features

    rng = np.random.default_rng(case["seed"])
    ids = {path: (rng.zipf(1.3, size=(batch, case["valency"])) % f.table_spec.vocabulary_size).astype(np.int32)
           for path, f in specs.items()}
    weights = {path: rng.uniform(0.5, 2.0, size=(batch, case["valency"])).astype(np.float32) for path in specs}
    _, stats = jte.preprocess_sparse_dense_matmul_input(ids, weights, specs, D, D, num_sc_per_device=S,
                                                        allow_id_dropping=True)
    by_name = {f.name: path for path, f in specs.items()}
    batch_ids = FeatureBatch.from_dense({f.name: ids[by_name[f.name]] for f in ours.features},
                                        {f.name: weights[by_name[f.name]] for f in ours.features})
    got = compute_stats(batch_ids, ours.features, ours.topology, ours.plan,
                        config=SparsecoreConfig(allow_id_dropping=True))
    for stack in ours.plan.stacks:
        sel = got.sel(stack=stack.name)
        np.testing.assert_array_equal(sel["max_ids_per_partition"].values.ravel(),
                                      np.asarray(stats.max_ids_per_partition[stack.name]))
        np.testing.assert_array_equal(sel["max_unique_ids_per_partition"].values.ravel(),
                                      np.asarray(stats.max_unique_ids_per_partition[stack.name]))
        np.testing.assert_array_equal(sel["required_buffer_size_per_sc"].values.ravel(),
                                      np.asarray(stats.required_buffer_size_per_sc[stack.name]))
        assert int(sel["dropped_ids"]) == int(stats.id_drop_counters[stack.name])


def test_paths_sort_as_strings_and_default_device_tables_are_left_out():
    table = keras_rs.layers.TableConfig(name="t", vocabulary_size=64, embedding_dim=8, placement="sparsecore")
    elsewhere = keras_rs.layers.TableConfig(name="u", vocabulary_size=64, embedding_dim=8,
                                            placement="default_device")
    feats = [keras_rs.layers.FeatureConfig(name=f"f{i:02d}", table=table, input_shape=(8, 1), output_shape=(8, 8))
             for i in range(11)]
    feats.append(keras_rs.layers.FeatureConfig(name="g", table=elsewhere, input_shape=(8, 1), output_shape=(8, 8)))
    model = from_keras_rs(feats, global_device_count=1, num_sc_per_device=4)
    # paths "0", "1", "10", "2", ...: feature f10 is third in the stack
    assert [f.name for f in model.plan.stacks[0].features][:4] == ["f00", "f01", "f10", "f02"]
    assert [s.name for s in model.plan.stacks] == ["t"]


def test_bad_configs_raise_config_errors():
    t = keras_rs.layers.TableConfig(name="t", vocabulary_size=64, embedding_dim=8, placement="sparsecore",
                                    optimizer=keras.optimizers.RMSprop())
    feats = [keras_rs.layers.FeatureConfig(name="f", table=t, input_shape=(8, 1), output_shape=(8, 8))]
    with pytest.raises(ConfigError, match="only SGD, Adagrad, Adam and Ftrl"):
        from_keras_rs(feats, global_device_count=1, num_sc_per_device=4)
    t = keras_rs.layers.TableConfig(name="t", vocabulary_size=64, embedding_dim=8, placement="default_device")
    with pytest.raises(ConfigError, match="no feature has its table on the SparseCore"):
        from_keras_rs([keras_rs.layers.FeatureConfig(name="f", table=t, input_shape=(8, 1), output_shape=(8, 8))],
                      global_device_count=1, num_sc_per_device=4)
    a = keras_rs.layers.TableConfig(name="a", vocabulary_size=64, embedding_dim=8, placement="sparsecore",
                                    optimizer="adam")
    b = keras_rs.layers.TableConfig(name="b", vocabulary_size=64, embedding_dim=8, placement="sparsecore",
                                    optimizer=keras.optimizers.Adam(learning_rate=0.5))
    feats = [keras_rs.layers.FeatureConfig(name=n, table=t, input_shape=(8, 1), output_shape=(8, 8))
             for n, t in (("x", a), ("y", b))]
    with pytest.raises(ConfigError, match="optimizers have different settings"):
        from_keras_rs(feats, global_device_count=1, num_sc_per_device=4, table_stacking=[["a", "b"]])
    # automatic stacking keeps them apart, as the library does
    assert sorted(s.name for s in from_keras_rs(feats, global_device_count=1, num_sc_per_device=4).plan.stacks) \
        == ["a", "b"]


def test_a_stack_takes_the_largest_limits_of_its_tables():
    """Step 3 of the build: Keras-RS sets a stack's limits to the largest of its tables'."""
    a = keras_rs.layers.TableConfig(name="zeta", vocabulary_size=64, embedding_dim=8, placement="sparsecore",
                                    max_ids_per_partition=40, max_unique_ids_per_partition=30)
    b = keras_rs.layers.TableConfig(name="alpha", vocabulary_size=64, embedding_dim=8, placement="sparsecore",
                                    max_ids_per_partition=20, max_unique_ids_per_partition=50)
    feats = [keras_rs.layers.FeatureConfig(name=n, table=t, input_shape=(8, 1), output_shape=(8, 8))
             for n, t in (("x", a), ("y", b))]
    SPARSECORES["per_device"] = 4
    layer = keras_rs.layers.DistributedEmbedding(feats)
    layer.sparsecore_build()
    stacked = next(iter(layer._config.feature_specs.values())).table_spec.stacked_table_spec
    model = from_keras_rs(feats, global_device_count=len(__import__("jax").devices()), num_sc_per_device=4)
    assert [(s.name, s.max_ids_per_partition, s.max_unique_ids_per_partition) for s in model.plan.stacks] == [
        (stacked.stack_name, stacked.max_ids_per_partition, stacked.max_unique_ids_per_partition)] == [
        ("zeta_alpha", 40, 50)]
