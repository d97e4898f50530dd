"""Fuzz: FeatureBatch constructors and the sharding engine's inputs.

Every case runs through :func:`scwork.testing.check_surface`: a bad input must end in
a typed scwork error, never an untyped exception, a hang or unbounded memory. On
valid inputs :func:`~scwork.sharding.compute_stats` and
:func:`~scwork.sharding.preprocess` must agree (same statistics); on invalid ones
they must raise the same error (preprocess may additionally reject weights whose
float32 gains are out of range, since only it computes gains).
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import InputError
from scwork.sharding import (
    FeatureBatch,
    FeatureSpec,
    SparsecoreConfig,
    TableSpec,
    compute_stats,
    preprocess,
)
from scwork.testing import (
    check_surface,
    feature_batch_calls,
    fuzz_settings,
    odd_arrays,
    odd_scalars,
    report_wrong,
    sharding_engine_cases,
)

#: Public callables this module drives, and the surface label of their cases
#: (tests/fuzz/test_surface_coverage.py).
SURFACES = {
    "scwork.sharding.FeatureBatch": "FeatureBatch.from_ragged",
    "scwork.sharding.compute_stats": "sharding.compute_stats",
    "scwork.sharding.preprocess": "sharding.preprocess",
    "scwork.sharding.TableSpec": "sharding.compute_stats",
    "scwork.sharding.FeatureSpec": "sharding.compute_stats",
    "scwork.sharding.SparsecoreConfig": "sharding.compute_stats",
    "scwork.sharding.plan_stacking": ("sharding.compute_stats", "reached through compute_stats' stacking and "
                                      "stack_limits arguments"),
    "scwork.hardware.Topology": "sharding.compute_stats",
    "scwork.sharding.sok.dispatch": "sok.dispatch",
    "scwork.sharding.sok.DispatchPlan": ("sok.traffic", "reached through sok.dispatch (its result)"),
}

_SETTINGS = fuzz_settings()


def _check_batch_invariants(surface: str, batch: FeatureBatch) -> None:
    """A batch that was accepted must be self-consistent: int64 CSR, ids >= 0, finite float32 weights."""
    for name in batch:
        ids, rs = batch[name]
        if ids.dtype != np.int64 or rs.dtype != np.int64 or rs[0] != 0 or rs[-1] != ids.size:
            report_wrong(surface, f"feature {name!r}: inconsistent CSR {ids!r} {rs!r}")
        if ids.size and ids.min() < 0:
            report_wrong(surface, f"feature {name!r}: negative id accepted")
        if np.any(np.diff(rs) < 0) or rs.size != batch.batch_size + 1:
            report_wrong(surface, f"feature {name!r}: row splits {rs!r}")
        w = batch.weights(name)
        if w.dtype != np.float32 or not np.all(np.isfinite(w)):
            report_wrong(surface, f"feature {name!r}: weights {w!r}")


@settings(**_SETTINGS)
@given(feature_batch_calls())
def test_feature_batch_constructors(call):
    kind, args, kwargs = call
    surface = f"FeatureBatch.{kind}"
    batch, error = check_surface(surface, lambda: getattr(FeatureBatch, kind)(*args, **kwargs), seconds=10)
    if error is not None:
        assert isinstance(error, InputError), f"{surface}: {type(error).__name__} is not an InputError"
        return
    _check_batch_invariants(surface, batch)
    if kind == "from_coo":                   # the batch is what dense_shape says, never a truncation
        data = args[0]
        for name in batch:
            if batch.batch_size != int(data[name][2][0]):
                report_wrong(surface, f"batch size {batch.batch_size} but dense_shape {data[name][2]!r}")


def _build(case):
    G, S = case["topology"] if isinstance(case["topology"], tuple) and len(case["topology"]) == 2 else (None, None)
    topology = scwork.Topology(G, S) if G is not None else case["topology"]
    batch = FeatureBatch(case["data"])
    specs = {}
    tables = {}
    for name, kw in case["tables"].items():
        key = repr(sorted(kw.items(), key=lambda kv: kv[0]))
        tables.setdefault(key, TableSpec(**kw))
        specs[name] = FeatureSpec(name, tables[key])
    config = SparsecoreConfig(**case["config"])
    return batch, list(specs.values()), topology, config


def _engine(function, case):
    def call():
        batch, features, topology, config = _build(case)
        return function(batch, features, topology, case["stacking"], config, case["on_out_of_vocabulary"],
                        stack_limits=case["stack_limits"], num_threads=case["num_threads"])
    return call


@settings(**_SETTINGS)
@given(sharding_engine_cases())
def test_compute_stats_and_preprocess_agree(case):
    stats, stats_error = check_surface("sharding.compute_stats", _engine(compute_stats, case), seconds=20)
    result, pre_error = check_surface("sharding.preprocess", _engine(preprocess, case), seconds=20)
    if stats_error is not None:
        if pre_error is None or type(pre_error) is not type(stats_error) or str(pre_error) != str(stats_error):
            report_wrong("sharding.preprocess", f"compute_stats raised {type(stats_error).__name__}: "
                         f"{stats_error}; preprocess gave {type(pre_error).__name__}: {pre_error}")
        return
    if pre_error is not None:
        # only gains (compute_stats computes none) and the CSR buffers' memory can fail
        # in preprocess alone
        gains = type(pre_error) is InputError and "combiner" in str(pre_error)
        if not (gains or "would allocate" in str(pre_error)):
            report_wrong("sharding.preprocess", f"compute_stats succeeded but preprocess raised "
                         f"{type(pre_error).__name__}: {pre_error}")
        return
    if not isinstance(stats, xr.Dataset) or not stats.equals(result.stats):
        report_wrong("sharding.preprocess", "preprocess statistics differ from compute_stats")
    for name, buffers in result.csr.items():
        gains = buffers.gains if hasattr(buffers, "gains") else None
        if gains is not None:
            real = buffers.embedding_ids != np.iinfo(np.int32).max
            if not np.all(np.isfinite(gains[real])):
                report_wrong("sharding.preprocess", f"stack {name!r}: non-finite gain in the CSR buffers")


@settings(**_SETTINGS)
@given(data=st.data())
def test_sok_dispatch_and_traffic(data):
    from scwork.sharding import sok

    def sometimes_odd(valid, label):
        # one value in four is odd: hypothesis alone prefers the simplest branch
        return data.draw(odd_scalars() if data.draw(st.integers(0, 3), label=f"{label} odd?") == 3 else valid,
                         label=label)

    num_gpus = sometimes_odd(st.integers(1, 4), "num_gpus")
    embedding_dim = sometimes_odd(st.one_of(st.integers(1, 64), st.sampled_from([2**40, 2**62, 10**30])),
                                  "embedding_dim")
    vocab_size = sometimes_odd(st.one_of(st.none(), st.integers(1, 64)), "vocab_size")
    count = num_gpus if isinstance(num_gpus, int) and 1 <= num_gpus <= 4 else 2
    keys = []
    for gpu in range(count):
        if data.draw(st.integers(0, 5), label=f"keys[{gpu}] odd?") == 5:
            keys.append(data.draw(odd_arrays(), label=f"keys[{gpu}]"))
        else:
            keys.append(np.asarray(data.draw(st.lists(st.integers(0, 63), max_size=6), label=f"keys[{gpu}]"),
                                   np.int64))
    plan, error = check_surface("sok.dispatch", lambda: sok.dispatch(keys, num_gpus, vocab_size=vocab_size))
    if error is not None:
        return
    traffic, error = check_surface("sok.traffic", lambda: plan.traffic(embedding_dim))
    if error is None:
        total = int(plan.count_matrix.sum()) * int(embedding_dim) * 4
        if int(traffic["vector_bytes"].values.sum()) != total:
            report_wrong("sok.traffic", f"vector bytes {int(traffic['vector_bytes'].values.sum())} != {total}")
