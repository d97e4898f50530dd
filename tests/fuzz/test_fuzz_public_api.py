"""Fuzz: the rest of the public API, one argument broken at a time.

For every callable of :data:`CALLS` the valid arguments come from a small shared
context (a topology, features, a batch, its statistics, a plan, a schedule, a SOK
dispatch...); :func:`scwork.testing.arguments` breaks one of them in about half the
cases (odd scalars, odd arrays). The call runs through
:func:`scwork.testing.check_surface` (surface ``api.<name>``): a typed scwork error or
a result, never an untyped exception, a hang or unbounded memory. Results are checked
where an invariant is cheap (:data:`CHECKS`): bounds that partition a range, ids
inside their vocabulary, probabilities that add up to 1, files written only on success.
"""

from __future__ import annotations

import functools
import math
import tempfile
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scwork
from scwork import advisor, collectives, datasets, hardware, memory, pipeline, sharding
from scwork import plan as plan_search
from scwork.interop import keras_rs, profile
from scwork.layout import SplitConfig, npu
from scwork.sharding import sok
from scwork.testing import (
    EDGE_INTEGERS,
    arguments,
    check_surface,
    fuzz_settings,
    odd_arrays,
    odd_scalars,
    report_wrong,
    weighted,
)

_SETTINGS = fuzz_settings(HealthCheck.function_scoped_fixture)


@functools.cache
def context() -> NS:
    """Valid inputs shared by the calls (built once)."""
    topology = scwork.Topology.for_chip("v5p", num_chips=2)
    tables = [sharding.TableSpec("t0", 500, 8, max_ids_per_partition=64, max_unique_ids_per_partition=32),
              sharding.TableSpec("t1", 90, 16, max_ids_per_partition=64, max_unique_ids_per_partition=32)]
    features = [sharding.FeatureSpec("a", tables[0]), sharding.FeatureSpec("b", tables[1])]
    rng = np.random.default_rng(0)
    batch_size = 16
    data = {}
    for f in features:
        lengths = rng.integers(0, 4, batch_size)
        data[f.name] = (rng.integers(0, f.table.vocab_size, int(lengths.sum())),
                        np.concatenate([[0], np.cumsum(lengths)]))
    batch = sharding.FeatureBatch.from_ragged(data)
    stats = sharding.compute_stats(batch, features, topology)
    plan = sharding.plan_stacking(features, topology, batch_size=batch_size)
    net = collectives.Network.ring(4)
    schedule = collectives.build("ring", net)
    keys = [np.array([1, 5, 5, 9]), np.array([2, 5]), np.array([], np.int64)]
    dispatch = sok.dispatch(keys, 3, vocab_size=16)
    model = pipeline.step_model(stats, plan, topology=topology, widths={s.name: s.embedding_dim
                                                                        for s in plan.stacks})
    trace = pipeline.to_chrome_trace(model)
    return NS(topology=topology, features=features, batch=batch, stats=stats, plan=plan, net=net,
              schedule=schedule, keys=keys, dispatch=dispatch, model=model, trace=trace,
              batch_size=batch_size, table=np.arange(32.0).reshape(16, 2))


def _valid(name: str) -> dict:
    """Strategies of valid keyword arguments of one call (built lazily: they read the context)."""
    c = context()
    just = st.just
    odd_int = weighted((6, st.integers(1, 64)), (1, st.sampled_from(EDGE_INTEGERS)))
    table = {
        "collectives.chunk_bounds": {"num_elements": st.integers(0, 100), "num_chunks": st.integers(1, 8)},
        "collectives.phase_summary": {"schedule": just(c.schedule), "nbytes": weighted((3, st.none()), (1, odd_int))},
        "collectives.reference_result": {"schedule": just(c.schedule), "data": just(np.arange(12).reshape(4, 3))},
        "collectives.ring_all_gather": {"net": just(c.net), "bidirectional": st.booleans(), "nbytes": odd_int,
                                        "itemsize": st.sampled_from([1, 2, 4])},
        "collectives.ring_reduce_scatter": {"net": just(c.net), "bidirectional": st.booleans(), "nbytes": odd_int,
                                            "itemsize": st.sampled_from([1, 2, 4])},
        "datasets.ValencySpec": {"kind": st.sampled_from(["fixed", "poisson", "uniform"]),
                                 "params": just((("mean", 3.0),)), "min": st.none(), "max": st.none()},
        "datasets.hash_ids": {"ids": just(np.arange(10)), "vocab_size": odd_int, "key": st.integers(0, 5)},
        "datasets.sample_zipf": {"size": st.integers(0, 50), "vocab_size": odd_int,
                                 "exponent": st.sampled_from([0.5, 1.05, 2.0])},
        "datasets.synthetic": {"batch_size": st.integers(1, 8), "num_steps": st.integers(1, 3),
                               "features": st.sampled_from([1, 2, ["x"]]), "vocab_size": odd_int,
                               "valency": st.sampled_from([1, 3, 20])},
        "datasets.zipf_pmf": {"vocab_size": st.integers(1, 100), "exponent": st.sampled_from([0.5, 1.05, 2.0])},
        "datasets.write_synthetic_parquet": {"num_shards": st.integers(1, 2), "rows_per_shard": st.integers(1, 8),
                                             "vocab_size": odd_int, "valency": st.sampled_from([1, 3])},
        "hardware.chips": {"kind": st.sampled_from([None, "tpu", "npu"])},
        "hardware.names": {"kind": st.sampled_from([None, "tpu", "npu"])},
        "hardware.get": {"chip": st.sampled_from(["v5p", "v5e", "tpu7x", "bm1684x"])},
        "hardware.describe": {"chip": st.sampled_from(["v5p", "v6e", "bm1684x"])},
        "hardware.source": {"chip": st.sampled_from(["v5p", "v6e"]),
                            "field_name": st.sampled_from(["hbm_bytes", "ici_link_bytes_per_s", "nope"])},
        "hardware.override": {"chip": st.sampled_from(["v5p", "v6e"]),
                              "hbm_bytes": weighted((3, st.integers(1, 2**40)), (1, odd_int))},
        "interop.keras_rs.from_keras_rs": {"feature_configs": just(_keras_configs()), "global_device_count": odd_int,
                                           "num_sc_per_device": st.sampled_from([1, 2, 4])},
        "interop.profile.find_profile": {"path": st.sampled_from(["/nonexistent/x", ".", __file__])},
        "interop.profile.overlay": {"model": just(c.model), "measured": just(c.trace)},
        "layout.SplitConfig": {"dimension": st.integers(0, 3), "split_indices": st.sampled_from([(), (1,), (2, 4)])},
        "layout.npu.global_strides": {"nchw": st.lists(st.integers(1, 8), min_size=4, max_size=4)},
        "memory.check_hbm": {"model": just(c.features), "topology": just(c.topology), "batch_size": just(16)},
        "memory.check_spmem": {"model": just(c.features), "topology": just(c.topology), "batch_size": just(16)},
        "memory.hbm_report": {"model": just(c.features), "topology": just(c.topology), "batch_size": just(16)},
        "memory.spmem_report": {"model": just(c.features), "topology": just(c.topology), "batch_size": just(16)},
        "memory.step_timeline": {"model": just(c.features), "topology": just(c.topology), "batch_size": just(16)},
        "memory.estimate_limits": {"samples_per_sc": odd_int, "ids_per_sample": st.sampled_from([1.0, 2.5, 20.0]),
                                   "num_partitions": st.integers(1, 16)},
        "memory.hbm_stack_bytes": {"feature_width": odd_int, "max_unique_nz_per_row": odd_int,
                                   "logical_replica_count": st.integers(1, 8)},
        "memory.optimizer_slot_count": {"optimizer": st.sampled_from(["sgd", "adagrad", "adam", "ftrl", "x"])},
        "memory.table_hbm_bytes": {"vocab_size": odd_int, "embedding_dim": odd_int, "num_chips": st.integers(1, 4),
                                   "sparsecores_per_chip": st.integers(1, 4)},
        "memory.tile_buffers": {"max_ids_per_partition": odd_int, "max_unique_ids_per_partition": odd_int,
                                "feature_width": odd_int, "sample_count": odd_int, "num_partitions": st.integers(1, 8)},
        "pipeline.compare": {"model": just(c.model), "measured": just(c.model)},
        "pipeline.hbm_usage": {"obj": just(c.model)},
        "pipeline.simulate": {"durations": just({p: [1e-3] for p in pipeline.PHASES}), "units": just(c.model.units),
                              "num_steps": st.integers(1, 4), "pipelined": st.booleans()},
        "sharding.Scenario": {"batch": just(c.batch), "features": just(c.features), "topology": just(c.topology)},
        "sharding.StackLimits": {"max_ids_per_partition": odd_int, "max_unique_ids_per_partition": odd_int},
        "sharding.apply_limits": {"target": just(c.features), "limits": just({"t0": (8, 8), "t1": (8, 8)}),
                                  "topology": just(c.topology), "stacking": just(None), "batch_size": just(16)},
        "sharding.collect_stats": {"batches": just([c.batch, c.batch]), "features": just(c.features),
                                   "topology": just(c.topology)},
        "sharding.estimate_limits": {"batch_size": st.sampled_from([16, 64]), "valency": st.sampled_from([1.0, 4.0]),
                                     "topology": just(c.topology)},
        "sharding.minibatch": {"batch": just(c.batch), "features": just(c.features), "topology": just(c.topology),
                               "strategy": st.sampled_from(["vocabulary", "sample"])},
        "sharding.tradeoff": {"step_stats": just(c.stats), "candidates": weighted((3, st.none()),
                                                                                (1, just([8, 16])))},
        "sharding.tune_limits": {"step_stats": just(c.stats), "method": st.sampled_from(["max", "percentile"]),
                                 "percentile": st.sampled_from([50.0, 99.0]), "round_to": st.sampled_from([1, 8])},
        "sharding.sok.all_to_all_time": {"plan": just(c.dispatch), "embedding_dim": odd_int,
                                         "bandwidth": st.sampled_from([1e9, 1.0])},
        "sharding.sok.backward": {"plan": just(c.dispatch), "grads_per_gpu": just(
            [np.ones((len(k), 2)) for k in c.keys])},
        "sharding.sok.combine": {"plan": just(c.dispatch), "vectors": just(
            [np.ones((len(r), 2)) for r in c.dispatch.received_keys])},
        "sharding.sok.forward": {"keys_per_gpu": just(c.keys), "table": just(c.table), "num_gpus": just(3)},
        "sharding.sok.lookup": {"plan": just(c.dispatch), "shards": just(sok.shard_table(c.table, 3))},
        "sharding.sok.owner_gpu": {"keys": just(np.array([0, 5, 7])), "num_gpus": st.integers(1, 4)},
        "sharding.sok.reduce_gradients": {"keys": just(np.array([1, 1, 2])), "gradients": just(np.ones((3, 2)))},
        "sharding.sok.shard_table": {"table": just(c.table), "num_gpus": st.integers(1, 4)},
        "plan.pareto_front": {"points": st.lists(st.tuples(st.floats(0, 10), st.floats(0, 10)), max_size=6).map(
            lambda rows: np.array(rows, dtype=float).reshape(-1, 2))},
        "plan.to_toml": {"tree": just({"model": {"batch_size": 16}, "tables": [{"name": "t", "vocab_size": 10}]})},
        "advisor.advise": {"plan": just(c.plan), "stats": just(c.stats), "batch_size": just(16)},
        "advisor.AdvisorThresholds": {"min_gain_fraction": st.sampled_from([0.0, 0.02, 0.5]),
                                      "skew_ratio": st.sampled_from([1.0, 1.25, 3.0])},
    }
    return table[name]


def _keras_configs():
    table = NS(name="t", vocabulary_size=64, embedding_dim=8, placement="sparsecore", optimizer="sgd",
               combiner="sum", max_ids_per_partition=32, max_unique_ids_per_partition=16)
    return [NS(name="f", table=table, input_shape=(8, 1), output_shape=(8, 8))]


#: Public name -> the function the surface calls (``api.<name>``).
CALLS = {
    "collectives.chunk_bounds": collectives.chunk_bounds,
    "collectives.phase_summary": collectives.phase_summary,
    "collectives.reference_result": collectives.reference_result,
    "collectives.ring_all_gather": collectives.ring_all_gather,
    "collectives.ring_reduce_scatter": collectives.ring_reduce_scatter,
    "datasets.ValencySpec": datasets.ValencySpec,
    "datasets.hash_ids": datasets.hash_ids,
    "datasets.sample_zipf": datasets.sample_zipf,
    "datasets.synthetic": datasets.synthetic,
    "datasets.zipf_pmf": datasets.zipf_pmf,
    "datasets.write_synthetic_parquet": datasets.write_synthetic_parquet,
    "hardware.chips": hardware.chips,
    "hardware.names": hardware.names,
    "hardware.get": hardware.get,
    "hardware.describe": hardware.describe,
    "hardware.source": hardware.source,
    "hardware.override": hardware.override,
    "interop.keras_rs.from_keras_rs": keras_rs.from_keras_rs,
    "interop.profile.find_profile": profile.find_profile,
    "interop.profile.overlay": profile.overlay,
    "layout.SplitConfig": SplitConfig,
    "layout.npu.global_strides": npu.global_strides,
    "memory.check_hbm": memory.check_hbm,
    "memory.check_spmem": memory.check_spmem,
    "memory.hbm_report": memory.hbm_report,
    "memory.spmem_report": memory.spmem_report,
    "memory.step_timeline": memory.step_timeline,
    "memory.estimate_limits": memory.estimate_limits,
    "memory.hbm_stack_bytes": memory.hbm_stack_bytes,
    "memory.optimizer_slot_count": memory.optimizer_slot_count,
    "memory.table_hbm_bytes": memory.table_hbm_bytes,
    "memory.tile_buffers": memory.tile_buffers,
    "pipeline.compare": pipeline.compare,
    "pipeline.hbm_usage": pipeline.hbm_usage,
    "pipeline.simulate": pipeline.simulate,
    "sharding.Scenario": sharding.Scenario,
    "sharding.StackLimits": sharding.StackLimits,
    "sharding.apply_limits": sharding.apply_limits,
    "sharding.collect_stats": sharding.collect_stats,
    "sharding.estimate_limits": sharding.estimate_limits,
    "sharding.minibatch": sharding.minibatch,
    "sharding.tradeoff": sharding.tradeoff,
    "sharding.tune_limits": sharding.tune_limits,
    "sharding.sok.all_to_all_time": sok.all_to_all_time,
    "sharding.sok.backward": sok.backward,
    "sharding.sok.combine": sok.combine,
    "sharding.sok.forward": sok.forward,
    "sharding.sok.lookup": sok.lookup,
    "sharding.sok.owner_gpu": sok.owner_gpu,
    "sharding.sok.reduce_gradients": sok.reduce_gradients,
    "sharding.sok.shard_table": sok.shard_table,
    "plan.pareto_front": plan_search.pareto_front,
    "plan.to_toml": plan_search.to_toml,
    "advisor.advise": advisor.advise,
    "advisor.AdvisorThresholds": advisor.AdvisorThresholds,
}

#: Public callables this module drives, and the surface label of their cases (tests/fuzz/test_surface_coverage.py).
SURFACES = {
    "scwork.collectives.chunk_bounds": "api.collectives.chunk_bounds",
    "scwork.collectives.phase_summary": "api.collectives.phase_summary",
    "scwork.collectives.reference_result": "api.collectives.reference_result",
    "scwork.collectives.ring_all_gather": "api.collectives.ring_all_gather",
    "scwork.collectives.ring_reduce_scatter": "api.collectives.ring_reduce_scatter",
    "scwork.datasets.ValencySpec": "api.datasets.ValencySpec",
    "scwork.datasets.hash_ids": "api.datasets.hash_ids",
    "scwork.datasets.sample_zipf": "api.datasets.sample_zipf",
    "scwork.datasets.synthetic": "api.datasets.synthetic",
    "scwork.datasets.zipf_pmf": "api.datasets.zipf_pmf",
    "scwork.datasets.write_synthetic_parquet": "api.datasets.write_synthetic_parquet",
    "scwork.hardware.chips": "api.hardware.chips",
    "scwork.hardware.names": "api.hardware.names",
    "scwork.hardware.get": "api.hardware.get",
    "scwork.hardware.describe": "api.hardware.describe",
    "scwork.hardware.source": "api.hardware.source",
    "scwork.hardware.override": "api.hardware.override",
    "scwork.interop.keras_rs.from_keras_rs": "api.interop.keras_rs.from_keras_rs",
    "scwork.interop.profile.find_profile": "api.interop.profile.find_profile",
    "scwork.interop.profile.overlay": "api.interop.profile.overlay",
    "scwork.layout.SplitConfig": "api.layout.SplitConfig",
    "scwork.layout.npu.global_strides": "api.layout.npu.global_strides",
    "scwork.memory.check_hbm": "api.memory.check_hbm",
    "scwork.memory.check_spmem": "api.memory.check_spmem",
    "scwork.memory.hbm_report": "api.memory.hbm_report",
    "scwork.memory.spmem_report": "api.memory.spmem_report",
    "scwork.memory.step_timeline": "api.memory.step_timeline",
    "scwork.memory.estimate_limits": "api.memory.estimate_limits",
    "scwork.memory.hbm_stack_bytes": "api.memory.hbm_stack_bytes",
    "scwork.memory.optimizer_slot_count": "api.memory.optimizer_slot_count",
    "scwork.memory.table_hbm_bytes": "api.memory.table_hbm_bytes",
    "scwork.memory.tile_buffers": "api.memory.tile_buffers",
    "scwork.pipeline.compare": "api.pipeline.compare",
    "scwork.pipeline.hbm_usage": "api.pipeline.hbm_usage",
    "scwork.pipeline.simulate": "api.pipeline.simulate",
    "scwork.sharding.Scenario": "api.sharding.Scenario",
    "scwork.sharding.StackLimits": "api.sharding.StackLimits",
    "scwork.sharding.apply_limits": "api.sharding.apply_limits",
    "scwork.sharding.collect_stats": "api.sharding.collect_stats",
    "scwork.sharding.estimate_limits": "api.sharding.estimate_limits",
    "scwork.sharding.minibatch": "api.sharding.minibatch",
    "scwork.sharding.tradeoff": "api.sharding.tradeoff",
    "scwork.sharding.tune_limits": "api.sharding.tune_limits",
    "scwork.sharding.sok.all_to_all_time": "api.sharding.sok.all_to_all_time",
    "scwork.sharding.sok.backward": "api.sharding.sok.backward",
    "scwork.sharding.sok.combine": "api.sharding.sok.combine",
    "scwork.sharding.sok.forward": "api.sharding.sok.forward",
    "scwork.sharding.sok.lookup": "api.sharding.sok.lookup",
    "scwork.sharding.sok.owner_gpu": "api.sharding.sok.owner_gpu",
    "scwork.sharding.sok.reduce_gradients": "api.sharding.sok.reduce_gradients",
    "scwork.sharding.sok.shard_table": "api.sharding.sok.shard_table",
    "scwork.plan.pareto_front": "api.plan.pareto_front",
    "scwork.plan.to_toml": "api.plan.to_toml",
    "scwork.advisor.advise": "api.advisor.advise",
    "scwork.advisor.AdvisorThresholds": "api.advisor.AdvisorThresholds",
    "scwork.pipeline.write_chrome_trace": "api.pipeline.write_chrome_trace",
}


def _check_chunk_bounds(kwargs, bounds):
    b = np.asarray(bounds)
    if b.ravel()[0] != 0 or b.ravel()[-1] != kwargs["num_elements"] or (np.diff(b.ravel()) < 0).any():
        report_wrong("api.collectives.chunk_bounds", f"{kwargs} -> {bounds}")


def _check_hash_ids(kwargs, ids):
    if ids.shape != np.shape(kwargs["ids"]) or (ids < 0).any() or (ids >= kwargs["vocab_size"]).any():
        report_wrong("api.datasets.hash_ids", f"{kwargs} -> {ids}")


def _check_sample_zipf(kwargs, ids):
    if len(ids) != kwargs["size"] or (len(ids) and (ids.min() < 1 or ids.max() > kwargs["vocab_size"])):   # ranks
        report_wrong("api.datasets.sample_zipf", f"{kwargs} -> {ids[:8]}")


def _check_zipf_pmf(kwargs, pmf):
    if len(pmf) != kwargs["vocab_size"] or (pmf < 0).any() or not math.isclose(float(pmf.sum()), 1.0,
                                                                                rel_tol=1e-9):
        report_wrong("api.datasets.zipf_pmf", f"{kwargs} -> sum {pmf.sum()}")


def _check_owner_gpu(kwargs, result):
    owner, local = result
    keys = np.asarray(kwargs["keys"])
    if not (np.array_equal(owner, keys % kwargs["num_gpus"]) and np.array_equal(local, keys // kwargs["num_gpus"])):
        report_wrong("api.sharding.sok.owner_gpu", f"{kwargs} -> {result}")


CHECKS = {"collectives.chunk_bounds": _check_chunk_bounds, "datasets.hash_ids": _check_hash_ids,
          "datasets.sample_zipf": _check_sample_zipf, "datasets.zipf_pmf": _check_zipf_pmf,
          "sharding.sok.owner_gpu": _check_owner_gpu}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_public_call(name):
    function = CALLS[name]

    @settings(**{**_SETTINGS, "max_examples": max(1, _SETTINGS["max_examples"] // 4)})
    @given(data=st.data())
    def run(data):
        kwargs = arguments(data, _valid(name), odd=weighted((3, odd_scalars()), (1, odd_arrays())))
        with tempfile.TemporaryDirectory() as folder:
            if name == "datasets.write_synthetic_parquet":
                target = Path(folder) / "out"
                # legitimately large requests (8 rows x a valency of 2**20) take seconds under load
                result, error = check_surface(f"api.{name}", lambda: function(target, **kwargs), seconds=60)
                if error is not None and target.exists() and any(target.iterdir()):
                    report_wrong(f"api.{name}", f"refused ({error}) but wrote {sorted(target.iterdir())[:3]}")
                return
            # a synthetic step may draw up to MAX_SAMPLE_SIZE ids: seconds of legitimate work under load
            result, error = check_surface(f"api.{name}", lambda: function(**kwargs),
                                          seconds=60 if name == "datasets.synthetic" else 20)
        if error is None and name in CHECKS:
            CHECKS[name](kwargs, result)

    run()


@settings(**_SETTINGS)
@given(data=st.data())
def test_write_chrome_trace_writes_nothing_on_failure(data):
    c = context()
    obj = data.draw(weighted((3, st.just(c.model)), (1, odd_scalars())), label="obj")
    with tempfile.TemporaryDirectory() as folder:
        name = data.draw(st.sampled_from(["t.json", "t.json.gz", "sub/t.json", ""]), label="name")
        path = Path(folder) / name
        written, error = check_surface("api.pipeline.write_chrome_trace",
                                       lambda: pipeline.write_chrome_trace(obj, path))
        files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
        if error is not None and files:
            report_wrong("api.pipeline.write_chrome_trace", f"refused ({error}) but wrote {files}")
        if error is None and (not Path(written).is_file() or files != [Path(written)]):
            report_wrong("api.pipeline.write_chrome_trace", f"wrote {files}, returned {written}")
