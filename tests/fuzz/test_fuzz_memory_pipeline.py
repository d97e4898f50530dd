"""Fuzz: the memory model (plan, sweep) and the step-time model (step_model, expected_stats,
Chrome traces in and out).

Every case runs through :func:`scwork.testing.check_surface`: a bad input must end in
a typed scwork error, never an untyped exception, a hang or unbounded memory. Results
are held to cheap invariants: no negative byte counts, ``fits`` agrees with its parts
and with the error findings, statistics never hold more unique ids than ids, a
pipelined step is never slower than the sequential one, a trace that reads back has
finite non-negative times.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import math
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import TraceError
from scwork.pipeline import (
    StepModelParams,
    expected_stats,
    read_trace,
    step_model,
    to_chrome_trace,
    validate_chrome_trace,
)
from scwork.sharding import TableSpec
from scwork.testing import (
    EDGE_FLOATS,
    arguments,
    check_surface,
    fuzz_settings,
    mutated_bytes,
    odd_arrays,
    odd_scalars,
    report_wrong,
    weighted,
)

#: Public callables this module drives, and the surface label of their cases
#: (tests/fuzz/test_surface_coverage.py).
SURFACES = {
    "scwork.memory.plan": "memory.plan",
    "scwork.memory.MemoryReport": ("memory.plan", "reached through memory.plan (its result's summary)"),
    "scwork.memory.sweep": "memory.sweep",
    "scwork.pipeline.expected_stats": "pipeline.expected_stats",
    "scwork.pipeline.step_model": "pipeline.step_model",
    "scwork.pipeline.StepModelParams": "pipeline.step_model",
    "scwork.pipeline.to_chrome_trace": "pipeline.to_chrome_trace",
    "scwork.pipeline.validate_chrome_trace": "pipeline.validate_chrome_trace",
    "scwork.pipeline.read_trace": "pipeline.read_trace",
}

_SETTINGS = fuzz_settings()


_ODD = weighted((4, odd_scalars()), (1, odd_arrays()), (1, st.sampled_from(EDGE_FLOATS)),
                (1, st.sampled_from([10**30, 2**63, 2**64, 10**5000, -1, "1 GiB", "1e400 GiB"])))
_TOPOLOGIES = {"v5p": (1, 4), "v6e": (1, 8), "tpu7x": (1, 4)}


@st.composite
def tables(draw):
    count = draw(st.integers(1, 3))
    out = []
    for i in range(count):
        limit = draw(weighted((2, st.integers(1, 4096)), (1, st.none())))
        vocab = draw(weighted((4, st.integers(8, 10**6)), (1, st.sampled_from([2**30, 2**31 - 1]))))
        out.append(TableSpec(f"t{i}", vocab,
                             draw(st.sampled_from([1, 8, 16, 64, 128, 1000])),
                             optimizer=draw(st.sampled_from(["sgd", "adagrad", "adam", "ftrl"])),
                             max_ids_per_partition=limit,
                             max_unique_ids_per_partition=None if limit is None else draw(st.integers(1, limit))))
    return out


_PLAN_KWARGS = {
    "batch_size": weighted((4, st.sampled_from([64, 256, 4096, 65536])), (1, st.integers(1, 2**20))),
    "stacking": st.sampled_from(["auto", None]),
    "limits": weighted((3, st.none()), (1, st.tuples(st.integers(1, 4096), st.integers(1, 4096)))),
    "ids_per_sample": weighted((3, st.just(4.0)), (1, st.floats(0, 1000))),
    "dtype": st.sampled_from(["f32", "bf16", "f16", "s8"]),
    "slot_dtype": st.sampled_from([None, "f32", "bf16"]),
    "num_chips": weighted((3, st.none()), (1, st.integers(1, 64))),
    "tile_spmem_bytes": weighted((3, st.none()), (1, st.integers(1, 2**22))),
    "hbm_bytes": weighted((3, st.none()), (1, st.integers(1, 2**40))),
    "logical_replica_count": weighted((3, st.none()), (1, st.integers(1, 64))),
    "stage_gather_operands_in_hbm": st.booleans(),
    "num_serialized_tables": st.integers(0, 4),
    "dense_weights_bytes": weighted((3, st.just(0)), (1, st.integers(0, 2**40))),
    "constants_bytes": st.just(0),
    "tensorcore_activation_bytes": weighted((3, st.just(0)), (1, st.integers(0, 2**40))),
    "prefetch_bytes_per_step": weighted((3, st.none()), (1, st.integers(0, 2**30))),
    "maximum_parallel_iterations": weighted((3, st.just(1)), (1, st.integers(1, 2**31 - 1))),
    "headroom": weighted((3, st.just(0.1)), (1, st.floats(0, 0.99))),
    "stack_limit_rule": st.sampled_from(["jax_tpu_embedding", "largest_table"]),
    "optimizers": weighted((3, st.none()), (1, st.just({"t0": "adam"}))),
    "optimizer_slots": weighted((3, st.none()), (1, st.just({"shampoo": 4}))),
    "stack_limits": weighted((3, st.none()), (1, st.just({"t0": (8, 8)}))),
}


def _topology(data):
    chip = data.draw(st.sampled_from(sorted(_TOPOLOGIES)), label="chip")
    return scwork.Topology.for_chip(chip, num_chips=data.draw(st.sampled_from([1, 2, 4, 8]), label="num_chips"))


def _check_report(surface: str, report) -> None:
    hbm = report.hbm
    if report.fits != (report.spmem_fits and report.hbm_fits) or (report.fits and report.errors):
        report_wrong(surface, f"fits={report.fits} with spmem_fits={report.spmem_fits}, hbm_fits="
                     f"{report.hbm_fits} and {len(report.errors)} errors")
    if hbm.peak_bytes < 0 or hbm.usable < 0 or report.spmem.total.min() < 0:
        report_wrong(surface, f"negative bytes: peak {hbm.peak_bytes}, usable {hbm.usable}, "
                     f"SPMEM {report.spmem.total.min()}")
    usage = np.asarray(hbm.usage_by_category)
    if usage.size and usage.min() < 0:
        report_wrong(surface, f"negative HBM usage per category {usage.min()}")
    summary, _ = check_surface(surface + ".summary", report.summary)
    if summary is not None and summary.get("fits", report.fits) != report.fits:
        report_wrong(surface, "summary disagrees on fits")


@settings(**_SETTINGS)
@given(model=tables(), data=st.data())
def test_memory_plan(model, data):
    topology = _topology(data)
    chosen = data.draw(st.lists(st.sampled_from(sorted(_PLAN_KWARGS)), max_size=4, unique=True), label="keywords")
    kwargs = arguments(data, {k: _PLAN_KWARGS[k] for k in ["batch_size"] + [c for c in chosen if c != "batch_size"]},
                        odd=_ODD)
    if data.draw(st.integers(0, 5), label="stats?") == 5:
        kwargs["stats"] = data.draw(weighted((2, st.just("expected")), (1, _ODD)), label="stats")
        if isinstance(kwargs["stats"], str) and kwargs["stats"] == "expected":
            kwargs["stats"] = check_surface("pipeline.expected_stats", lambda: expected_stats(
                {t.name: 4.0 for t in model}, topology, batch_size=topology.num_partitions * 8))[0]
    odd_model = data.draw(weighted((8, st.just(model)), (1, _ODD), (1, st.lists(_ODD, max_size=2))), label="model")
    odd_topology = data.draw(weighted((8, st.just(topology)), (1, _ODD)), label="topology")
    report, error = check_surface("memory.plan", lambda: scwork.memory.plan(odd_model, odd_topology, **kwargs))
    if error is None:
        _check_report("memory.plan", report)


@settings(**_SETTINGS)
@given(model=tables(), data=st.data())
def test_memory_sweep(model, data):
    topology = _topology(data)
    parameter = data.draw(weighted((6, st.sampled_from(["batch_size", "num_serialized_tables", "num_chips",
                                                        "maximum_parallel_iterations", "limits", "headroom"])),
                                   (1, st.sampled_from(["nonsense", "", "model"])), (1, odd_scalars())),
                          label="parameter")
    values = data.draw(weighted(
        (4, st.lists(st.sampled_from([1, 2, 64, 1024]), min_size=1, max_size=3)),
        (1, st.lists(st.tuples(st.integers(1, 64), st.integers(1, 64)), min_size=1, max_size=2)),
        (1, st.lists(_ODD, max_size=2)), (1, _ODD)), label="values")
    kwargs = {} if parameter == "batch_size" else {"batch_size": 1024}
    result, error = check_surface("memory.sweep", lambda: scwork.memory.sweep(
        model, topology, parameter, values, progress=False, **kwargs))
    if error is None:
        for name in ("max_spmem_bytes_per_tile", "peak_hbm_bytes", "usable_hbm_bytes", "bytes_at_peak"):
            if (result[name].values < 0).any():
                report_wrong("memory.sweep", f"negative {name}: {result[name].values}")
        if result["fits"].values.tolist() != (result["spmem_fits"].values & result["hbm_fits"].values).tolist():
            report_wrong("memory.sweep", "fits is not spmem_fits and hbm_fits")


def _check_stats(surface: str, stats) -> None:
    ids, unique = stats["ids"].values, stats["unique_ids"].values
    if ids.dtype.kind not in "iu" or (ids < 0).any() or (unique > ids).any() or (unique < 0).any():
        report_wrong(surface, f"ids {ids.ravel()[:6]}, unique {unique.ravel()[:6]}")


@settings(**_SETTINGS)
@given(data=st.data())
def test_expected_stats(data):
    topology = _topology(data)
    P = topology.num_partitions
    valid = {
        "ids_per_sample": weighted((4, st.dictionaries(st.sampled_from(["a", "b", "c"]),
                                                       weighted((4, st.floats(0, 100)), (1, st.integers(0, 100))),
                                                       min_size=1, max_size=3)),
                                   (1, st.dictionaries(st.text(max_size=3), _ODD, min_size=1, max_size=2))),
        "topology": st.just(topology),
        "batch_size": st.sampled_from([P, 8 * P, 1024 * P]),
        "unique_fraction": weighted((3, st.floats(0, 1)), (1, st.just({"a": 0.5}))),
        "hot_fraction": weighted((3, st.floats(0, 1)), (1, st.just({"a": 0.5}))),
        "hot_partition": st.integers(0, P - 1),
    }
    kwargs = arguments(data, valid, odd=_ODD)
    ids_per_sample, topology_arg = kwargs.pop("ids_per_sample"), kwargs.pop("topology")
    stats, error = check_surface("pipeline.expected_stats", lambda: expected_stats(ids_per_sample, topology_arg,
                                                                                  **kwargs))
    if error is not None:
        return
    _check_stats("pipeline.expected_stats", stats)
    model_kwargs = arguments(data, {
        "widths": weighted((4, st.sampled_from([8, 64, 1000])), (1, st.just({s: 16 for s in ids_per_sample}))),
        "optimizers": st.sampled_from([None, "sgd", "adam", "adagrad"]),
        "features_per_stack": st.sampled_from([None, 1, 3]),
        "dtype": st.sampled_from(["f32", "bf16"]),
        "num_minibatches": weighted((3, st.none()), (1, st.integers(1, 8)), (1, st.sampled_from([2**20, 2**40]))),
        "num_serialized_tables": st.integers(0, 3),
        "pipelining": st.booleans(),
        "num_steps": st.integers(3, 8),
        "tc_forward_s": weighted((3, st.none()), (1, st.floats(0, 1))),
        "tc_backward_s": weighted((3, st.none()), (1, st.floats(0, 1))),
        "tc_forward_flops": weighted((4, st.none()), (1, st.floats(0, 1e15))),
        "tc_peak_flops": weighted((4, st.none()), (1, st.floats(1e9, 1e15))),
    }, odd=_ODD)
    # Besides odd values: the statistics cut down to no stacks, or no steps of some dim.
    odd_stats = data.draw(weighted((8, st.just(stats)), (1, _ODD),
                                   (1, st.sampled_from(["stack", "device", "sc", "partition"]).map(
                                       lambda dim: stats.isel({dim: slice(0, 0)})))), label="stats")
    field = data.draw(weighted((6, st.none()), (1, st.sampled_from(
        [f.name for f in dataclasses.fields(StepModelParams) if f.init]))), label="params field")
    value = data.draw(_ODD, label="params value") if field else None

    def model_call():
        params = None if field is None else StepModelParams(**{field: value})
        return step_model(odd_stats, topology=topology, params=params, **model_kwargs)

    model, error = check_surface("pipeline.step_model", model_call)
    if error is not None:
        return
    sequential, pipelined = model.sequential_step_time, model.pipelined_step_time
    if not (math.isfinite(sequential) and math.isfinite(pipelined) and 0 <= pipelined <= sequential * (1 + 1e-9)):
        report_wrong("pipeline.step_model", f"sequential {sequential}, pipelined {pipelined}")
    trace, error = check_surface("pipeline.to_chrome_trace", lambda: to_chrome_trace(model))
    if error is None:
        _, error = check_surface("pipeline.validate_chrome_trace", lambda: validate_chrome_trace(trace))
        if error is not None:
            report_wrong("pipeline.to_chrome_trace", f"an exported trace does not validate: {error}")


@functools.cache
def _model_trace() -> dict:
    topo = scwork.Topology.for_chip("v5p", num_chips=2)
    stats = expected_stats({"user": 12.0, "item": 4.0}, topo, batch_size=2048, unique_fraction=0.6)
    model = step_model(stats, widths={"user": 64, "item": 16}, topology=topo, tc_forward_s=2e-4,
                       tc_backward_s=3e-4, num_steps=3)
    return to_chrome_trace(model)


_EVENT_KEYS = ["ph", "ts", "dur", "pid", "tid", "name", "args", "id", "bp", "cat"]


@st.composite
def mutated_traces(draw):
    """A valid exported trace with a few events changed (odd values, deleted keys) or garbage."""
    trace = json.loads(json.dumps(_model_trace()))
    events = trace["traceEvents"]
    how = draw(st.sampled_from(["same", "events", "events", "events", "structure"]))
    if how == "events":
        for _ in range(draw(st.integers(1, 4))):
            event = events[draw(st.integers(0, len(events) - 1))]
            key = draw(st.sampled_from(_EVENT_KEYS))
            if draw(st.booleans()):
                event.pop(key, None)
            else:
                event[key] = draw(weighted((3, _ODD), (1, st.lists(odd_scalars(), max_size=2)),
                                           (1, st.dictionaries(st.text(max_size=3), odd_scalars(), max_size=2))))
    elif how == "structure":
        return draw(weighted((2, _ODD), (1, st.just({"traceEvents": [1, None, [], {}]})),
                             (1, st.just({"traceEvents": {"a": 1}})), (1, st.lists(_ODD, max_size=3)),
                             (1, st.just([[]] * 3)), (1, st.just({"traceEvents": [{"ph": "X"}] * 3}))))
    return trace


@settings(**_SETTINGS)
@given(trace=mutated_traces(), data=st.data())
def test_validate_chrome_trace(trace, data):
    kwargs = arguments(data, {"require_names": st.booleans(), "tolerance_us": st.sampled_from([1e-6, 0.0, 1.0])},
                        odd=_ODD)
    summary, error = check_surface("pipeline.validate_chrome_trace", lambda: validate_chrome_trace(trace, **kwargs))
    if error is None and trace == _model_trace() and summary["events"] != len(trace["traceEvents"]):
        report_wrong("pipeline.validate_chrome_trace", f"{summary['events']} events counted")
    if error is None and isinstance(trace, dict):
        # a trace the validator accepts is JSON without NaN
        _, dump_error = check_surface("pipeline.validate_chrome_trace",
                                      lambda: json.dumps(trace, allow_nan=False), allowed=(ValueError, TypeError))
        if dump_error is not None:
            report_wrong("pipeline.validate_chrome_trace", f"accepted a trace that is not JSON: {dump_error}")


@settings(**_SETTINGS)
@given(trace=mutated_traces(), data=st.data())
def test_read_trace(trace, data):
    kind = data.draw(st.sampled_from(["object", "json", "json.gz", "mutated json", "mutated json.gz"]), label="kind")
    kwargs = arguments(data, {
        "time_unit": st.sampled_from(["us", "ns", "ms", "s"]),
        "num_steps": weighted((3, st.none()), (1, st.integers(1, 8))),
        "top_level_only": st.booleans(),
        "step_pattern": weighted((4, st.just(scwork.pipeline.DEFAULT_STEP_PATTERN)), (1, st.none()),
                                 (1, st.sampled_from(["(", "[a-", ".*"]))),
        "phase_patterns": weighted((4, st.just(scwork.pipeline.DEFAULT_PHASE_PATTERNS)),
                                   (1, st.just([("sc_forward", "(")])), (1, st.just([("nope", ".*")]))),
    }, odd=_ODD)
    with tempfile.TemporaryDirectory() as folder:
        if kind == "object":
            source = trace
        else:
            try:
                raw = json.dumps(trace).encode()
            except (TypeError, ValueError):
                raw = b"[]"
            if kind.endswith("gz"):
                raw = gzip.compress(raw)
            if kind.startswith("mutated"):
                raw = data.draw(mutated_bytes(raw), label="file bytes")
            source = Path(folder) / ("trace.json.gz" if kind.endswith("gz") else "trace.json")
            source.write_bytes(raw)
        measured, error = check_surface("pipeline.read_trace", lambda: read_trace(source, **kwargs))
        if error is not None:
            if isinstance(error, TraceError) and "trace" not in str(error):
                report_wrong("pipeline.read_trace", f"error does not say it is about the trace: {error}")
            return
        durations = measured.to_dataset() if hasattr(measured, "to_dataset") else None
        if durations is not None:
            for name, variable in durations.data_vars.items():
                values = np.asarray(variable.values)
                if values.dtype.kind == "f" and values.size and (np.isnan(values).any() or (values < 0).any()):
                    report_wrong("pipeline.read_trace", f"{name}: {values.ravel()[:6]}")
