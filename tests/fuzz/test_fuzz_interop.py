"""Fuzz: the interop readers and writers (EmbeddingSpecProto text, library specs, XLA dumps, OOM
messages, jax.profiler traces).

Every case runs through :func:`scwork.testing.check_surface`: a bad input must end in
a typed scwork error, never an untyped exception, a hang or unbounded memory. Results
are checked, not only error types:

- round trips: text -> message -> text is stable, a message scwork writes reads
  back to the same plan, a model converted from specs replans to the same stacks;
- bounds: a dump's measured peak is at most the sum of its live values' sizes and
  at least the largest one; OOM rows name lines of the text;
- nothing written on failure: ``write_embedding_spec`` leaves no file when it refuses.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scwork
from scwork.interop.jax_tpu_embedding import (
    LIBRARY_DEFAULT_LIMIT,
    embedding_spec_message,
    format_embedding_spec,
    from_embedding_spec,
    from_jax_tpu_embedding,
    parse_embedding_spec,
    read_embedding_spec,
    to_jax_tpu_embedding,
    write_embedding_spec,
)
from scwork.interop.profile import read_jax_profile
from scwork.interop.xla_dump import parse_oom_message, read_oom_message, read_xla_dump
from scwork.sharding import FeatureSpec, TableSpec, plan_stacking
from scwork.testing import (
    EDGE_INTEGERS,
    TRICKY_INTEGER_TEXTS,
    arguments,
    check_surface,
    fuzz_settings,
    mutated_bytes,
    odd_arrays,
    odd_scalars,
    report_wrong,
    weighted,
)

#: Public callables this module drives, and the surface label of their cases (tests/fuzz/test_surface_coverage.py).
SURFACES = {
    "scwork.interop.jax_tpu_embedding.parse_embedding_spec": "interop.parse_embedding_spec",
    "scwork.interop.jax_tpu_embedding.format_embedding_spec": "interop.format_embedding_spec",
    "scwork.interop.jax_tpu_embedding.embedding_spec_message": "interop.embedding_spec_message",
    "scwork.interop.jax_tpu_embedding.from_embedding_spec": "interop.from_embedding_spec",
    "scwork.interop.jax_tpu_embedding.read_embedding_spec": "interop.read_embedding_spec",
    "scwork.interop.jax_tpu_embedding.write_embedding_spec": "interop.write_embedding_spec",
    "scwork.interop.jax_tpu_embedding.from_jax_tpu_embedding": "interop.from_jax_tpu_embedding",
    "scwork.interop.jax_tpu_embedding.ImportedModel": "interop.ImportedModel.replan",
    "scwork.interop.xla_dump.read_xla_dump": "interop.read_xla_dump",
    "scwork.interop.xla_dump.HloModuleDump": "interop.HloModuleDump.views",
    "scwork.interop.xla_dump.MeasuredTimeline": ("interop.HloModuleDump.timeline", "reached through "
                                                 "HloModuleDump.timeline (its result)"),
    "scwork.interop.xla_dump.XlaDump": "interop.XlaDump.buffers_dataset",
    "scwork.interop.xla_dump.parse_oom_message": "interop.parse_oom_message",
    "scwork.interop.xla_dump.read_oom_message": "interop.read_oom_message",
    "scwork.interop.xla_dump.OomReport": "interop.OomReport.views",
    "scwork.interop.xla_dump.OomAllocation": ("interop.OomReport.views", "reached through parse_oom_message "
                                              "(the report's allocations)"),
    "scwork.interop.profile.read_jax_profile": "interop.read_jax_profile",
    "scwork.interop.jax_tpu_embedding.to_jax_tpu_embedding": "interop.to_jax_tpu_embedding",
}

_SETTINGS = fuzz_settings(HealthCheck.function_scoped_fixture)
DATA = Path(__file__).resolve().parents[1] / "interop" / "data"
TPU_STYLE = DATA / "tpu_style_dump"
OOM_FILES = sorted(DATA.glob("oom_*.txt"))

#: Integers that break int64 and int()'s 4,300-digit limit, as texts.
_HUGE_TEXTS = ("9223372036854775807", "9223372036854775808", "18446744073709551616", "-9223372036854775809",
               "9" * 30, "9" * 4301, "0" * 5000 + "1", "-1", "0")


# -- EmbeddingSpecProto ---------------------------------------------------------------------------------
@st.composite
def plans(draw):
    """A small valid plan: 1-3 tables, 1-4 features, some stacking, 1-2 devices x 1-4 SparseCores."""
    topology = scwork.Topology(draw(st.integers(1, 2)), draw(st.sampled_from([1, 2, 4])))
    tables = [TableSpec(f"t{i}", draw(st.integers(1, 300)), draw(st.sampled_from([4, 8, 16])),
                        max_ids_per_partition=draw(st.one_of(st.none(), st.integers(1, 64))),
                        max_unique_ids_per_partition=draw(st.one_of(st.none(), st.integers(1, 64))))
              for i in range(draw(st.integers(1, 3)))]
    features = [FeatureSpec(f"f{j}", draw(st.sampled_from(tables))) for j in range(draw(st.integers(1, 4)))]
    stacking = draw(st.sampled_from(["auto", None]))
    plan = plan_stacking(features, topology, stacking, batch_size=8 * topology.num_partitions,
                         activation_mem_bytes_limit=draw(st.sampled_from([2048 * 1024, 48 * 1024, 64])))
    return features, plan, topology


def _text_mutations(text: str):
    """Strategy: ``text`` with a number replaced by a huge or odd one, a token dropped, or bytes mutated."""
    numbers = [m.span() for m in re.finditer(r"-?\d+", text)]

    @st.composite
    def mutate(draw):
        how = draw(st.sampled_from(["same", "number", "number", "bytes", "drop_line", "duplicate_line"]))
        if how == "number" and numbers:
            a, b = draw(st.sampled_from(numbers))
            return text[:a] + draw(st.one_of(st.sampled_from(_HUGE_TEXTS), st.sampled_from(TRICKY_INTEGER_TEXTS),
                                             st.text(max_size=4))) + text[b:]
        lines = text.splitlines(keepends=True)
        if how in ("drop_line", "duplicate_line") and lines:
            i = draw(st.integers(0, len(lines) - 1))
            return "".join(lines[:i] + ([] if how == "drop_line" else [lines[i], lines[i]]) + lines[i + 1:])
        if how == "bytes":
            return draw(mutated_bytes(text.encode("utf-8"))).decode("utf-8", errors="replace")
        return text

    return mutate()


def _facts(plan) -> dict:
    """What the proto keeps of every stack: tables and their places, features, width, limits (unset ones
    written as the library's default) and the activation budget (not the tables' own limits)."""
    return {s.name: (tuple((t.name, t.table.vocab_size, t.table.embedding_dim, t.row_offset_in_shard,
                            t.shard_rotation, t.padded_vocab_size) for t in s.tables),
                     tuple(f.name for f in s.features), s.embedding_dim, s.optimizer, s.combiner,
                     s.max_ids_per_partition or LIBRARY_DEFAULT_LIMIT,
                     s.max_unique_ids_per_partition or LIBRARY_DEFAULT_LIMIT, s.activation_mem_bytes_limit)
            for s in plan.stacks}


def _same_stacks(a, b) -> bool:
    return _facts(a) == _facts(b)


@settings(**_SETTINGS)
@given(case=plans(), data=st.data())
def test_embedding_spec_text_round_trips(case, data):
    features, plan, topology = case
    message, error = check_surface("interop.embedding_spec_message", lambda: embedding_spec_message(features, plan))
    if error is not None:
        report_wrong("interop.embedding_spec_message", f"a valid plan was refused: {error}")
    text, error = check_surface("interop.format_embedding_spec", lambda: format_embedding_spec(message))
    if error is not None:
        report_wrong("interop.format_embedding_spec", f"scwork's own message was refused: {error}")
    S = topology.sparsecores_per_device
    model, error = check_surface("interop.from_embedding_spec", lambda: from_embedding_spec(message,
                                                                                           num_sc_per_device=S))
    if error is not None or not _same_stacks(model.plan, plan):
        report_wrong("interop.from_embedding_spec", f"message of {plan!r} read back as {model and model.plan!r}: "
                                                    f"{error}")
    replanned, error = check_surface("interop.ImportedModel.replan", model.replan)
    if error is not None or not _same_stacks(replanned, model.plan):
        report_wrong("interop.ImportedModel.replan", f"{replanned!r} is not {model.plan!r}: {error}")
    mutated = data.draw(_text_mutations(text), label="text")
    parsed, error = check_surface("interop.parse_embedding_spec", lambda: parse_embedding_spec(mutated))
    if error is not None:
        if mutated == text:
            report_wrong("interop.parse_embedding_spec", f"scwork's own text was refused: {error}")
        if not re.search(r"line \d+", str(error)):
            report_wrong("interop.parse_embedding_spec", f"the error names no line: {error}")
        return
    # Text -> message -> text -> message is stable (the writer drops proto3 defaults, so compare texts).
    again, error = check_surface("interop.format_embedding_spec", lambda: format_embedding_spec(parsed))
    if error is not None:
        report_wrong("interop.format_embedding_spec", f"a message the reader gave was refused: {error}")
    if format_embedding_spec(parse_embedding_spec(again)) != again:
        report_wrong("interop.format_embedding_spec", "text -> message -> text is not stable")
    num_sc = data.draw(weighted((4, st.just(S)), (1, odd_scalars())), label="num_sc_per_device")
    model, error = check_surface("interop.from_embedding_spec",
                                 lambda: from_embedding_spec(parsed, num_sc_per_device=num_sc))
    if error is None:
        back, error = check_surface("interop.embedding_spec_message",
                                    lambda: embedding_spec_message(model.features, model.plan))
        if error is not None:
            report_wrong("interop.embedding_spec_message", f"an imported plan was refused: {error}")
        model2, error = check_surface("interop.from_embedding_spec",
                                      lambda: from_embedding_spec(back, num_sc_per_device=num_sc))
        if error is not None or not _same_stacks(model2.plan, model.plan):
            report_wrong("interop.from_embedding_spec", "message -> plan -> message -> plan changed the plan")


def _broken_message(draw, message):
    """A deep copy of ``message`` with one field (anywhere) set to an odd value, or a field added."""
    message = json.loads(json.dumps(message))
    target, key = message, None
    path = []
    while True:
        if isinstance(target, dict) and target:
            key = draw(st.sampled_from(sorted(target)))
        elif isinstance(target, list) and target:
            key = draw(st.integers(0, len(target) - 1))
        else:
            break
        path.append(key)
        if not isinstance(target[key], (dict, list)) or draw(st.integers(0, 2)) == 0:
            break
        target = target[key]
    if key is None:
        return message
    if isinstance(target, dict) and draw(st.integers(0, 5)) == 0:
        target["no_such_field"] = 1
    else:
        target[key] = draw(weighted((3, odd_scalars()), (1, odd_arrays()), (1, st.sampled_from(EDGE_INTEGERS))))
    return message


@settings(**_SETTINGS)
@given(case=plans(), data=st.data())
def test_embedding_spec_messages_with_odd_values(case, data):
    features, plan, topology = case
    message = embedding_spec_message(features, plan)
    broken = _broken_message(data.draw, message)
    text, error = check_surface("interop.format_embedding_spec", lambda: format_embedding_spec(broken))
    if error is None and format_embedding_spec(parse_embedding_spec(text)) != text:
        report_wrong("interop.format_embedding_spec", "an accepted message does not read back to the same text")
    check_surface("interop.from_embedding_spec",
                  lambda: from_embedding_spec(broken, num_sc_per_device=topology.sparsecores_per_device))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "step" / "embedding_spec" / "proto.pbtxt"
        written, error = check_surface("interop.write_embedding_spec", lambda: write_embedding_spec(broken, path))
        if error is not None:
            if path.exists():
                report_wrong("interop.write_embedding_spec", f"a refused message left {path} behind")
            return
        back, error = check_surface("interop.read_embedding_spec", lambda: read_embedding_spec(Path(folder) / "step"))
        if error is not None or format_embedding_spec(back) != text:
            report_wrong("interop.read_embedding_spec", f"written file does not read back: {error}")


@settings(**_SETTINGS)
@given(case=plans(), data=st.data())
def test_embedding_spec_files(case, data):
    """read_embedding_spec on what a checkpoint folder can hold: the file in either place, a missing or
    misnamed file, a folder where the file should be, mutated or non-UTF-8 bytes, odd path objects.
    Whatever it accepts must equal parsing the file's text (nothing read from a wrong place)."""
    features, plan, _ = case
    good = format_embedding_spec(embedding_spec_message(features, plan)).encode()
    with tempfile.TemporaryDirectory() as folder:
        step = Path(folder) / "step"
        where = data.draw(st.sampled_from(["step", "embedding_spec", "misnamed", "folder_instead", "nowhere"]),
                          label="where")
        file = {"step": step / "proto.pbtxt", "embedding_spec": step / "embedding_spec" / "proto.pbtxt",
                "misnamed": step / "embedding_spec" / "proto.txt", "folder_instead": step / "proto.pbtxt",
                "nowhere": None}[where]
        step.mkdir()
        content = data.draw(weighted((2, st.just(good)), (3, mutated_bytes(good))), label="content")
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            if where == "folder_instead":
                file.mkdir()
            else:
                file.write_bytes(content)
        target = data.draw(weighted((3, st.sampled_from([step, step / "embedding_spec", file or step / "x"])),
                                    (1, st.sampled_from([str(step), Path(folder) / "missing"])),
                                    (1, odd_scalars())), label="path")
        message, error = check_surface("interop.read_embedding_spec", lambda: read_embedding_spec(target))
        if error is not None:
            return
        if target != file and where in ("misnamed", "folder_instead", "nowhere"):
            report_wrong("interop.read_embedding_spec", f"read a message from {target!r} with the file {where}")
        try:
            expected = parse_embedding_spec(content.decode("utf-8"))
        except (UnicodeDecodeError, scwork.errors.ScworkError) as err:
            report_wrong("interop.read_embedding_spec", f"accepted a file its text parser refuses: {err}")
        if format_embedding_spec(message) != format_embedding_spec(expected):
            report_wrong("interop.read_embedding_spec", "the file reads differently from its text")


@settings(**{**_SETTINGS, "max_examples": max(2, _SETTINGS["max_examples"] // 10)})
@given(case=plans(), data=st.data())
def test_plans_applied_in_the_library(case, data):
    """to_jax_tpu_embedding (the real library, when installed): its own read-back check must hold, and the
    specs must convert back to the plan (round trip); one argument odd in about half the cases."""
    import pytest

    pytest.importorskip("jax_tpu_embedding.sparsecore.lib.nn.embedding")
    features, plan, topology = case
    kwargs = arguments(data, {"features": st.just(features), "plan": st.just(plan),
                              "batch_size": weighted((4, st.none()), (1, st.just(plan.batch_size)))},
                       odd=weighted((3, odd_scalars()), (1, odd_arrays())))
    specs, error = check_surface("interop.to_jax_tpu_embedding", lambda: to_jax_tpu_embedding(**kwargs),
                                 seconds=120)        # the first case imports jax
    if error is not None:
        return
    back, error = check_surface("interop.from_jax_tpu_embedding", lambda: from_jax_tpu_embedding(
        specs, global_device_count=topology.num_devices, num_sc_per_device=topology.sparsecores_per_device))
    if error is not None or not _same_stacks(back.plan, plan):
        report_wrong("interop.to_jax_tpu_embedding", f"specs of {plan!r} read back as {back and back.plan!r}: "
                                                     f"{error}")


# -- library specs by duck typing -----------------------------------------------------------------------
@st.composite
def library_specs(draw):
    """SimpleNamespace specs shaped like jax-tpu-embedding's, stacked by scwork's plan or not, one value odd."""
    features, plan, topology = draw(plans())
    batch = plan.batch_size
    stacked = draw(st.booleans())
    out = []
    for f in plan.features:
        t = f.table
        table = NS(name=t.name, vocabulary_size=t.vocab_size, embedding_dim=t.embedding_dim, combiner=t.combiner,
                   optimizer="sgd", max_ids_per_partition=t.max_ids_per_partition or 256,
                   max_unique_ids_per_partition=t.max_unique_ids_per_partition or 256)
        spec = NS(name=f.name, table_spec=table, output_shape=[batch, t.embedding_dim])
        if stacked:
            stack, tis = plan.stack_of_feature(f.name), plan.table(t.name)
            table.stacked_table_spec = NS(
                stack_name=stack.name, stack_vocab_size=stack.vocab_size, stack_embedding_dim=stack.embedding_dim,
                max_ids_per_partition=stack.max_ids_per_partition or 256,
                max_unique_ids_per_partition=stack.max_unique_ids_per_partition or 256,
                suggested_coo_buffer_size_per_device=stack.suggested_coo_buffer_size_per_device,
                activation_mem_bytes_limit=stack.activation_mem_bytes_limit)
            table.setting_in_stack = NS(stack_name=stack.name, padded_vocab_size=tis.padded_vocab_size,
                                        row_offset_in_shard=tis.row_offset_in_shard, shard_rotation=tis.shard_rotation)
            spec.id_transformation = NS(row_offset=stack.feature_position(f.name) * batch,
                                        col_offset=tis.row_offset_in_shard * plan.num_partitions,
                                        col_shift=tis.shard_rotation)
        out.append(spec)
    if draw(st.integers(0, 2)):       # one odd value somewhere
        spec = draw(st.sampled_from(out))
        objects = [spec, spec.table_spec] + ([spec.table_spec.stacked_table_spec, spec.table_spec.setting_in_stack,
                                              spec.id_transformation] if stacked else [])
        obj = draw(st.sampled_from(objects))
        setattr(obj, draw(st.sampled_from(sorted(vars(obj)))),
                draw(weighted((3, odd_scalars()), (1, odd_arrays()), (1, st.sampled_from(EDGE_INTEGERS)))))
    return out, topology


@settings(**_SETTINGS)
@given(case=library_specs(), data=st.data())
def test_library_specs_by_duck_typing(case, data):
    specs, topology = case
    kwargs = arguments(data, {"global_device_count": st.just(topology.num_devices),
                              "num_sc_per_device": st.just(topology.sparsecores_per_device),
                              "optimizers": weighted((4, st.none()), (1, st.just({"t0": "sgd"})))},
                       odd=weighted((3, odd_scalars()), (1, odd_arrays())))
    model, error = check_surface("interop.from_jax_tpu_embedding", lambda: from_jax_tpu_embedding(specs, **kwargs))
    if error is not None:
        return
    replanned, error = check_surface("interop.ImportedModel.replan", model.replan)
    if error is not None or not _same_stacks(replanned, model.plan):
        report_wrong("interop.ImportedModel.replan", f"{replanned!r} is not {model.plan!r}: {error}")
    if sum(len(s.features) for s in model.plan.stacks) != len(specs):
        report_wrong("interop.from_jax_tpu_embedding", f"{len(specs)} specs became {model.plan!r}")


# -- XLA dumps ------------------------------------------------------------------------------------------
_DUMP_FILES = sorted(p.name for p in TPU_STYLE.glob("module_*.txt"))


@settings(**_SETTINGS)
@given(file=st.sampled_from(_DUMP_FILES), data=st.data())
def test_xla_dumps(file, data):
    original = (TPU_STYLE / file).read_text()
    how = data.draw(st.sampled_from(["text", "text", "bytes"]), label="how")
    with tempfile.TemporaryDirectory() as folder:
        dump = Path(folder) / "dump"
        shutil.copytree(TPU_STYLE, dump)
        if how == "text":
            (dump / file).write_text(data.draw(_text_mutations(original), label="text"))
        else:
            (dump / file).write_bytes(data.draw(mutated_bytes(original.encode()), label="bytes"))
        kwargs = arguments(data, {"modules": weighted((4, st.none()), (1, st.sampled_from(["jit", "^jit_step$", "(",
                                                                                           "[", "nothing"]))),
                                  "errors": weighted((3, st.just("raise")), (1, st.just("collect"))),
                                  "max_file_bytes": weighted((4, st.just(2**26)), (1, st.integers(1, 4096)))},
                           odd=weighted((3, odd_scalars()), (1, odd_arrays())))
        result, error = check_surface("interop.read_xla_dump", lambda: read_xla_dump(dump, **kwargs))
        if error is not None:
            return
        for module in result.modules:
            _check_module(module, data)
        if any(m.values for m in result.modules):
            check_surface("interop.XlaDump.buffers_dataset", result.buffers_dataset)


def _check_module(module, data) -> None:
    for view in ("instructions_dataset", "allocations_dataset", "buffers_dataset", "memory_report_dataset"):
        ds, error = check_surface("interop.HloModuleDump.views", getattr(module, view))
        if error is not None:
            return
        if view == "buffers_dataset" and ds.sizes["buffer"]:
            if (ds["end"] < ds["start"]).any():
                report_wrong("interop.HloModuleDump.views", "a live range ends before it starts")
    capacity = data.draw(weighted((4, st.none()), (1, odd_scalars())), label="capacity_bytes")
    timeline, error = check_surface("interop.HloModuleDump.timeline",
                                    lambda: module.timeline(capacity_bytes=capacity))
    if error is not None:
        return
    live = [v.bytes for v in module.values if v.start >= 0]
    # Bounds: the peak is at least the largest live value and at most all of them together.
    if not max(live, default=0) <= timeline.peak_bytes <= sum(live) or (timeline.usage_bytes < 0).any():
        report_wrong("interop.HloModuleDump.timeline", f"peak {timeline.peak_bytes} outside [{max(live)}, "
                                                       f"{sum(live)}]")
    if module._peak_time() != timeline.peak_event.index:
        report_wrong("interop.HloModuleDump.timeline", f"sweep peak {module._peak_time()} != timeline's "
                                                       f"{timeline.peak_event.index}")


# -- out-of-memory messages -----------------------------------------------------------------------------
@settings(**_SETTINGS)
@given(file=st.sampled_from(OOM_FILES), data=st.data())
def test_oom_messages(file, data):
    original = file.read_text()
    text = data.draw(weighted((3, _text_mutations(original)), (1, st.just(original)),
                              (1, odd_scalars())), label="text")
    report, error = check_surface("interop.parse_oom_message", lambda: parse_oom_message(text, source="oom.txt"))
    if error is not None:
        if isinstance(text, str) and error.path != "oom.txt":
            report_wrong("interop.parse_oom_message", f"the error does not name the source: {error}")
        return
    lines = len(text.splitlines()) + 1
    for a in report.allocations:
        if not 1 <= a.line <= lines or a.size_bytes < 0 or a.rank < 0:
            report_wrong("interop.parse_oom_message", f"allocation {a.rank} at line {a.line} of {lines}, "
                                                      f"{a.size_bytes} bytes")
    if text == original and not report.allocations:
        report_wrong("interop.parse_oom_message", f"no allocation read from {file.name}")
    for view in ("checks", "unparsed", "mismatches", "to_dataset"):
        check_surface("interop.OomReport.views", getattr(report, view))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "log.txt"
        path.write_text(text, encoding="utf-8")
        again, error = check_surface("interop.read_oom_message", lambda: read_oom_message(path))
        if error is None and again.allocations != tuple(dataclasses.replace(a, source=str(path))
                                                        for a in report.allocations):
            report_wrong("interop.read_oom_message", "the file reads differently from its text")


# -- jax.profiler traces --------------------------------------------------------------------------------
def _trace(draw):
    events = []
    for pid, process in enumerate(["/device:TPU:0 SparseCore 0", "/device:TPU:0", "/host:CPU"], 1):
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process}})
        events.append({"ph": "M", "pid": pid, "tid": 1, "name": "thread_name",
                       "args": {"name": {1: "Sparse Core Ops", 2: "XLA Ops", 3: "python3"}[pid]}})
    t = 0
    for _ in range(draw(st.integers(0, 8))):
        pid = draw(st.integers(1, 3))
        dur = draw(st.integers(1, 50))
        events.append({"ph": "X", "pid": pid, "tid": 1, "ts": t, "dur": dur,
                       "name": draw(st.sampled_from(["fusion.1", "all-reduce.2", "grad_update", "step", "x"]))})
        t += dur
    if events and draw(st.integers(0, 2)) == 0:
        event = draw(st.sampled_from(events))
        event[draw(st.sampled_from(sorted(event)))] = draw(weighted((3, odd_scalars()), (1, odd_arrays())))
    return {"traceEvents": events}


_PATTERN_GROUPS = [r"(?P<chip>\d+)", r"(?P<chip>\S+)", r"(?P<chip>.*)", r"(?P<unit>[^ ]+)", r"\d+", "("]


@settings(**_SETTINGS)
@given(data=st.data())
def test_jax_profiles(data):
    trace = _trace(data.draw)
    group = data.draw(st.sampled_from(_PATTERN_GROUPS), label="group")
    patterns = data.draw(weighted((3, st.none()), (2, st.just([("sc", rf"TPU:{group} SparseCore", ""),
                                                               ("tc", rf"TPU:{group}\b", "")])),
                                  (1, odd_arrays())), label="patterns")
    kwargs = arguments(data, {"steps": st.sampled_from(["auto", "device", "host", None]),
                              "num_steps": weighted((3, st.integers(1, 4)), (1, st.none())),
                              "step_name": weighted((3, st.none()), (1, st.sampled_from(["^step", "("])))},
                       odd=weighted((3, odd_scalars()), (1, odd_arrays())))
    if patterns is not None:
        kwargs["patterns"] = patterns
    result, error = check_surface("interop.read_jax_profile", lambda: read_jax_profile(trace, **kwargs))
    if error is not None:
        return
    mapped = len(result.kind)
    if (result.end < result.start).any() or (result.chip < 0).any() or (result.unit < 0).any() or mapped > len(
            trace["traceEvents"]):
        report_wrong("interop.read_jax_profile", f"{mapped} events from {len(trace['traceEvents'])}: chips "
                                                 f"{result.chip}, units {result.unit}")
