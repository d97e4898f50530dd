"""Every plan on a search's Pareto front, run through jax-tpu-embedding's own preprocessing.

For each plan of the front: the library's FeatureSpecs come from
``PlanCandidate.to_jax_tpu_embedding()`` (the library's own stacking functions), and
``preprocess_sparse_dense_matmul_input`` runs on every held-out batch with the plan's
``allow_id_dropping`` (and ``enable_minibatching`` for plans that mini-batch). Checked:

- no abort: scwork's engine is asked first whether the limits hold (the library aborts
  the process on a CHECK failure, so a plan scwork thinks fine but which overflows would
  end the run: that too is a failed check);
- the ids the library drops stay within the search's budget and equal scwork's count;
- every stack's buffer is large enough for what the library requires per SparseCore;
- the library's per-partition statistics equal the ones the search computed by summing
  rotated per-table counts (:mod:`scwork.plan._context`).
"""

from __future__ import annotations

import numpy as np
import pytest

from scwork.plan import Constraints, search
from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, compute_stats
from scwork.sharding.specs import round_up

jte_embedding = pytest.importorskip(
    "jax_tpu_embedding.sparsecore.lib.nn.embedding",
    reason="jax-tpu-embedding is not installed (needs Python >= 3.12: pip install -e '.[oracle]')")

VALENCY = {"u": 1, "i": 3, "i2": 2, "c": 1, "q": 4}
VOCAB = {"t_u": 20_000, "t_i": 8_000, "t_c": 300, "t_q": 5_000}


def _model():
    tables = {"t_u": TableSpec("t_u", VOCAB["t_u"], 32), "t_i": TableSpec("t_i", VOCAB["t_i"], 32),
              "t_c": TableSpec("t_c", VOCAB["t_c"], 8), "t_q": TableSpec("t_q", VOCAB["t_q"], 32, combiner="mean")}
    return [FeatureSpec("u", tables["t_u"]), FeatureSpec("i", tables["t_i"]), FeatureSpec("i2", tables["t_i"]),
            FeatureSpec("c", tables["t_c"]), FeatureSpec("q", tables["t_q"])]


def _dense_batches(features, num_steps, batch, seed):
    """Fixed-valency Zipf ids as dense arrays (the library's input form) and the same as FeatureBatches."""
    rng = np.random.default_rng(seed)
    dense = []
    for _ in range(num_steps):
        step = {}
        for f in features:
            v = f.table.vocab_size
            hot = rng.zipf(1.3, size=(batch, VALENCY[f.name])) % v
            step[f.name] = hot.astype(np.int64)
        dense.append(step)
    return dense, [FeatureBatch.from_dense(d) for d in dense]


@pytest.mark.parametrize("budget", [0.0, 0.02])
def test_every_plan_on_the_front_runs_in_the_library(budget):
    features = _model()
    dense, batches = _dense_batches(features, 5, 512, seed=11 if budget == 0 else 12)
    result = search(features, batches[:4], "v5p:4", held_out=batches[4:], progress=False,
                    per_chip_batch_sizes=[128], local_search_steps=12,
                    constraints=Constraints(max_drop_rate=budget))
    front = [result.candidate(i) for i in result.front]
    assert front
    held_dense = dense[4:]
    for cand in front:
        D, S, P = cand.topology.num_devices, cand.topology.sparsecores_per_device, cand.topology.num_partitions
        jte_feats = cand.to_jax_tpu_embedding()
        by_name = {f.name: f for f in jte_feats}
        order = [f.name for f in cand.features]
        config = SparsecoreConfig(allow_id_dropping=cand.allow_id_dropping, max_ids_per_chip_per_sample=None)
        total_ids, dropped = 0, 0
        for step, ids in enumerate(held_dense):
            batch = FeatureBatch.from_dense({n: ids[n] for n in order})
            if not cand.knobs["minibatching"]:
                # Asked first: the library would abort the whole process here.
                ours = compute_stats(batch, list(cand.features), cand.topology, cand.plan, config)
            lib_out, lib_stats = jte_embedding.preprocess_sparse_dense_matmul_input(
                [ids[n] for n in order], [np.ones(ids[n].shape, np.float32) for n in order],
                [by_name[n] for n in order], D, D, num_sc_per_device=S,
                allow_id_dropping=cand.allow_id_dropping, enable_minibatching=cand.knobs["minibatching"])
            total_ids += sum(ids[n].size for n in order)
            # One mini-batch count for the whole step, as the search models it.
            lib_minibatches = set(np.asarray(lib_out.num_minibatches).ravel().tolist())
            assert lib_minibatches == {max(cand.minibatches.values())} or (
                not cand.knobs["minibatching"] and lib_minibatches == {1}), (cand, lib_minibatches)
            for st in cand.plan.stacks:
                name = st.name
                lib_drop = int(np.asarray(lib_stats.id_drop_counters[name]).sum()) \
                    if name in lib_stats.id_drop_counters else 0
                dropped += lib_drop
                # Statistics: the search's sums of rotated per-table counts = the library's.
                counts = result.records[cand.index].context.stack_counts(
                    tuple((t.table.name, t.shard_rotation) for t in st.tables))
                if not cand.knobs["minibatching"]:
                    np.testing.assert_array_equal(
                        counts["held_ids"][step].max(axis=1).ravel(),
                        np.asarray(lib_stats.max_ids_per_partition[name]).ravel(), err_msg=name)
                    np.testing.assert_array_equal(
                        counts["held_uniq"][step].max(axis=1).ravel(),
                        np.asarray(lib_stats.max_unique_ids_per_partition[name]).ravel(), err_msg=name)
                    assert lib_drop == int(ours["dropped_ids"].sel(stack=name)) + int(
                        ours["static_buffer_dropped_ids"].sel(stack=name)), name
                # Buffers: what the library fills per SparseCore fits what the plan gives it.
                per_sc = st.static_buffer_size_per_sc(S)
                if per_sc is None:
                    per_sc = round_up(st.max_ids_per_partition, 8) * P
                required = np.asarray(lib_stats.required_buffer_size_per_sc[name])
                if not cand.allow_id_dropping:
                    assert int(required.max()) <= per_sc, (name, int(required.max()), per_sc)
                assert np.asarray(lib_out.lhs_embedding_ids[name]).size >= int(required.max()) * S * D, name
        assert dropped / total_ids <= budget, (cand, dropped, total_ids)
        assert dropped == cand.metrics["dropped_ids"], cand
