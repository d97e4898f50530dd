"""The advisor's memory and stacking checks (scwork.advisor._memory_checks) on inputs written out by hand.

Plans, memory reports and step models are small stand-ins holding exactly the fields
the checks read, so every table count, byte count and time is a number in the test:
each finding's trigger is tried at its boundary (a stack of exactly
``min_tables_per_stack`` tables, exactly ``max_tables_per_stack``, an HBM stack part
equal to the heap part, a gain equal to ``min_gain_fraction`` of the step) and every
number of its text and evidence is checked.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import scwork
from scwork.advisor._context import Context
from scwork.advisor._memory_checks import check_memory, check_stacking
from scwork.advisor.findings import AdvisorThresholds
from scwork.hardware import get
from scwork.pipeline import StepModelParams

SERIALIZE = "xla_sc_num_serialized_tables_to_optimize_hbm"
PREFETCH = "maximum_parallel_iterations"


def _stack(name, tables, dim=8, optimizer="sgd", combiner="sum", rows=1000, features=None):
    return SimpleNamespace(name=name, tables=[f"{name}_t{i}" for i in range(tables)], embedding_dim=dim,
                           optimizer=optimizer, combiner=combiner, vocab_size=rows,
                           features=[f"{name}_f{i}" for i in range(tables if features is None else features)])


def _plan(*stacks):
    return SimpleNamespace(stacks=list(stacks))


def _context(plan=None, memory=None, model=None, **thresholds):
    t = AdvisorThresholds(**{"min_tables_per_stack": 3, "max_tables_per_stack": 6, **thresholds})
    return Context(config=None, plan=plan, stats=None, memory=memory, model=model, minibatch=None, thresholds=t,
                   batch_size=None, dtype=None)


# -- too_few_stacked_tables ----------------------------------------------------------------
def test_without_a_plan_both_stacking_checks_are_skipped():
    for c in (_context(), _context(model=SimpleNamespace(_inputs={}, step_time=1.0))):
        check_stacking(c)
        assert c.findings == []
        assert c.skipped == {"too_few_stacked_tables": "needs a stacking plan",
                             "too_many_stacked_tables": "needs a stacking plan"}


def test_compatible_stacks_below_the_minimum_are_named_together():
    # min 3 tables: a (1) and b (2) are small and alike; c has exactly 3 (not small); d, e and f hold one
    # table each but differ from a and b in width, optimizer or combiner, one group each (alone: no finding)
    plan = _plan(_stack("a", 1), _stack("b", 2), _stack("c", 3), _stack("d", 1, dim=16),
                 _stack("e", 1, optimizer="adagrad"), _stack("f", 1, combiner="mean"))
    c = _context(plan)
    check_stacking(c)
    (f,) = c.findings
    assert (f.id, f.severity, f.stack) == ("too_few_stacked_tables", "info", None)
    assert f.title == "2 compatible stacks hold fewer than 3 tables each"
    assert f.evidence == {"stacks": ["a", "b"], "tables_per_stack": [1, 2], "embedding_dim": 8,
                          "optimizer": "sgd", "combiner": "sum"}
    assert f.fix.startswith("stack them together (plan_stacking(stacking=[[...tables of ['a', 'b']...]]) or 'auto'")
    assert f.flags == ("disable_table_stacking", "stacking", "activation_mem_bytes_limit")
    assert (f.gain_s, f.gain_bytes, f.gain_basis) == (None, None, "no step model: time not estimated")
    assert c.skipped == {}


def test_one_small_stack_in_a_group_is_not_a_finding_and_does_not_stop_the_next_group():
    # group (8, sgd, sum): only x is small (y has 3); group (4, sgd, sum): p, q and r are small
    plan = _plan(_stack("x", 2), _stack("y", 3), _stack("p", 1, dim=4), _stack("q", 2, dim=4), _stack("r", 1, dim=4))
    c = _context(plan)
    check_stacking(c)
    (f,) = c.findings
    assert f.evidence["stacks"] == ["p", "q", "r"] and f.evidence["tables_per_stack"] == [1, 2, 1]
    assert f.evidence["embedding_dim"] == 4
    assert f.title.startswith("3 compatible stacks")


def test_every_group_of_small_stacks_gets_its_own_finding():
    plan = _plan(_stack("a", 1), _stack("b", 1), _stack("m", 2, combiner="mean"), _stack("n", 1, combiner="mean"))
    c = _context(plan)
    check_stacking(c)
    assert [f.evidence["stacks"] for f in c.findings] == [["a", "b"], ["m", "n"]]
    assert [f.evidence["combiner"] for f in c.findings] == ["sum", "mean"]


def _model(num_chips, overhead, step_time, plan=None):
    """A step model stand-in: what check_stacking reads (topology, chip, params, step time, plan)."""
    return SimpleNamespace(topology=scwork.Topology.for_chip("v5p", num_chips=num_chips), chip=get("v5p"),
                           params=StepModelParams(sc_op_overhead_s=overhead, ici_latency_s=1e-6),
                           step_time=step_time, _inputs={"plan": plan})


def test_merging_stacks_saves_an_op_overhead_and_an_all_to_all_latency_per_stack_and_direction():
    # One chip: no all-to-all, 3 stacks -> 1 saves (3 - 1) x 2 directions x 0.25 s = 1 s.
    plan = _plan(_stack("a", 1), _stack("b", 1), _stack("c", 2))
    c = _context(model=_model(1, 0.25, 2.0, plan), min_gain_fraction=0.5)       # 1 s >= 0.5 x 2 s: offered
    check_stacking(c)
    (f,) = c.findings
    assert f.gain_s == 1.0 and f.step_time_s == 2.0
    assert f.gain_basis == ("3 stacks -> 1 saves 2 SparseCore op overheads (sc_op_overhead_s) and 2 all-to-all "
                            "latencies per direction; the bandwidth terms do not change")
    # A gain just under the threshold is not offered.
    c = _context(model=_model(1, 0.25, 2.0 + 1e-9, plan), min_gain_fraction=0.5)
    check_stacking(c)
    assert c.findings == [] and c.skipped == {}


def test_the_all_to_all_latency_of_a_merged_stack_comes_from_the_ring():
    # 4 chips on a wraparound ring, 1 us per hop: a near-empty all-to-all takes 2 steps (2 hops each
    # way), 2 us. Two stacks -> 1: (2 - 1) x 2 x (10 us + 2 us) = 24 us.
    plan = _plan(_stack("a", 1), _stack("b", 1))
    c = _context(model=_model(4, 1e-5, 1e-3, plan), min_gain_fraction=0.0)
    check_stacking(c)
    assert c.findings[0].gain_s == pytest.approx(2 * (1e-5 + 2e-6), rel=1e-9)
    # 2 chips, no wraparound: one step of 1 us; three stacks -> 1: (3 - 1) x 2 x (10 us + 1 us) = 44 us.
    plan = _plan(_stack("a", 1), _stack("b", 1), _stack("c", 1))
    c = _context(model=_model(2, 1e-5, 1e-3, plan), min_gain_fraction=0.0)
    check_stacking(c)
    assert c.findings[0].gain_s == pytest.approx(2 * 2 * (1e-5 + 1e-6), rel=1e-9)


def test_a_group_not_worth_merging_does_not_hide_the_next():
    # first group: 2 stacks, gain (2 - 1) x 2 x 0.1 = 0.2 s; second: 3 stacks, 0.4 s. Threshold 0.3 s.
    plan = _plan(_stack("a", 1), _stack("b", 1), _stack("p", 1, dim=4), _stack("q", 1, dim=4),
                 _stack("r", 1, dim=4))
    c = _context(model=_model(1, 0.1, 1.0, plan), min_gain_fraction=0.3)
    check_stacking(c)
    assert [f.evidence["stacks"] for f in c.findings] == [["p", "q", "r"]]
    assert c.findings[0].gain_s == pytest.approx(0.4, rel=1e-12)


# -- too_many_stacked_tables ---------------------------------------------------------------
def test_a_stack_over_the_maximum_is_reported_and_one_at_it_is_not():
    # max 6 tables: "six" holds exactly 6 (fine), "seven" 7 and "nine" 9 (both reported)
    plan = _plan(_stack("six", 6), _stack("seven", 7, rows=70_000, features=9), _stack("nine", 9, rows=10))
    c = _context(plan)
    check_stacking(c)
    assert [(f.id, f.stack) for f in c.findings] == [("too_many_stacked_tables", "seven"),
                                                     ("too_many_stacked_tables", "nine")]
    f = c.findings[0]
    assert f.title == "Stack 'seven' holds 7 tables" and f.severity == "warning"
    assert f.evidence == {"tables": 7, "rows": 70_000, "features": 9}
    assert (f.gain_bytes, f.gain_basis) == (None, "not estimated")
    assert f.flags == ("stacking", "activation_mem_bytes_limit")
    assert f.fix.startswith("split it into stacks of at most 100 tables")
    assert c.findings[1].evidence == {"tables": 9, "rows": 10, "features": 9}


def test_a_large_stack_reports_its_spmem_from_the_memory_report():
    spmem = SimpleNamespace(stacks=["other", "seven"], total=np.array([111, 4096]), capacity=1 << 20)
    memory = SimpleNamespace(spmem=spmem, diagnoses=[])
    plan = _plan(_stack("seven", 7), _stack("eight", 8))
    c = _context(plan, memory=memory)
    check_stacking(c)
    seven, eight = c.findings
    assert seven.evidence == {"tables": 7, "rows": 1000, "features": 7, "spmem_bytes_per_tile": 4096}
    assert seven.gain_basis == "SPMEM of the stack from the memory report (splitting divides it)"
    assert seven.gain_bytes is None
    # a stack the memory report does not have: nothing from it
    assert "spmem_bytes_per_tile" not in eight.evidence and eight.gain_basis == "not estimated"


# -- spmem_overflow ------------------------------------------------------------------------
class _Fix:
    def __init__(self, text, parameter, flag=None, value=None):
        self.text, self.parameter, self.flag, self.value = text, parameter, flag, value

    def __str__(self):
        return self.text


def _diagnosis(code, severity="error", resource="hbm", stack=None, fixes=(), message="", evidence=None):
    return SimpleNamespace(code=code, severity=severity, resource=resource, stack=stack, fixes=list(fixes),
                           message=message, evidence=evidence or {})


def _memory(diagnoses, at_peak=None, peak=0, usable=0, stacks=("a", "b"), total=(0, 0), capacity=0):
    timeline = SimpleNamespace(category_bytes_at_peak=lambda: dict(at_peak or {}),
                               peak_event=SimpleNamespace(name="backward of step 2"))
    return SimpleNamespace(diagnoses=list(diagnoses), peak_hbm_bytes=peak, usable_hbm_bytes=usable, timeline=timeline,
                           spmem=SimpleNamespace(stacks=list(stacks), total=np.array(total), capacity=capacity))


def test_without_a_memory_report_the_memory_checks_are_skipped():
    c = _context()
    check_memory(c)
    assert c.findings == []
    assert c.skipped == {k: "needs a memory report (scwork.memory.plan)"
                         for k in ("spmem_overflow", "hbm_stack_overflow", "hbm_heap_exhaustion")}


def test_spmem_overflow_of_a_stack_in_the_report_gives_its_bytes_over_capacity():
    fixes = [_Fix("stage operands in HBM", "p1", flag="stage_gather_operands_in_hbm"),
             _Fix("smaller batch", "batch_size"),
             _Fix("stage again", "p2", flag="stage_gather_operands_in_hbm")]
    memory = _memory([_diagnosis("spmem_warn", severity="warning", resource="spmem", stack="a"),
                      _diagnosis("hbm_thing", resource="hbm", stack="a"),
                      _diagnosis("spmem_too_big", resource="spmem", stack="b", fixes=fixes, message="b is too big",
                                 evidence={"need": 5})],
                     total=(900, 1500), capacity=1000)
    c = _context(memory=memory)
    check_memory(c)
    (f,) = c.findings
    assert (f.id, f.severity, f.stack) == ("spmem_overflow", "error", "b")
    assert f.title == "Stack 'b' does not fit in TileSpmem"
    assert f.evidence == {"memory_code": "spmem_too_big", "need": 5, "spmem_bytes_per_tile": 1500}
    assert f.gain_bytes == 500
    assert f.gain_basis == "bytes per tile over the TileSpmem capacity (memory model)"
    assert f.fix == "stage operands in HBM; smaller batch; stage again"
    assert f.flags == ("stage_gather_operands_in_hbm", "batch_size")
    assert [k for k in c.skipped] == []


def test_spmem_overflow_of_a_stack_not_in_the_report_falls_back_on_the_message():
    message = "x" * 100 + "y" * 30
    memory = _memory([_diagnosis("spmem_too_big", resource="spmem", stack="zz", message=message)])
    c = _context(memory=memory)
    check_memory(c)
    (f,) = c.findings
    assert f.gain_bytes is None and f.evidence == {"memory_code": "spmem_too_big"}
    assert f.gain_basis == "memory model: " + "x" * 100 + "y" * 20          # the message's first 120 characters
    assert f.fix == message and f.flags == ()


# -- hbm_stack_overflow / hbm_heap_exhaustion ------------------------------------------------
AT_PEAK = {"sc_forward_stack": 100, "sc_backward_stack": 50, "dense_weights": 60, "constants": 30, "prefetch": 10}


def _common(stack_b, heap_b):
    return {"peak_bytes": 1300, "usable_bytes": 1000, "over_bytes": 300, "hbm_stack_bytes_at_peak": stack_b,
            "heap_bytes_at_peak": heap_b, "peak_event": "backward of step 2"}


def test_hbm_stack_larger_than_the_heap_is_an_hbm_stack_overflow():
    # stack part 100 + 50 = 150 > heap part 60 + 30 + 10 = 100; the first out-of-memory diagnosis
    # (3 tables to serialize) is read, not the second
    first = _diagnosis("hbm_out_of_memory", fixes=[_Fix("serialize", "num_serialized_tables", value=3.0)])
    second = _diagnosis("hbm_out_of_memory", fixes=[_Fix("serialize", "num_serialized_tables", value=5)])
    c = _context(memory=_memory([first, second], AT_PEAK, peak=1300, usable=1000))
    check_memory(c)
    (f,) = c.findings
    assert (f.id, f.severity, f.title) == ("hbm_stack_overflow", "error",
                                           "HBM stack overflow: the step's HBM peak does not fit")
    assert f.evidence == {**_common(150, 100), "num_serialized_tables": 3}
    assert f.fix == (f"set {SERIALIZE}=3 (serialize the 3 stacks with the largest HBM stack); or lower "
                     "max_unique_ids_per_partition of the largest stacks (the stack is proportional)")
    assert f.flags == (SERIALIZE, "max_unique_ids_per_partition")
    assert f.gain_bytes == 300 and f.gain_basis == "bytes to free at the HBM peak (memory model)"


def test_serializing_costs_the_step_models_time():
    calls = []

    def replace(**changes):
        calls.append(changes)
        return SimpleNamespace(step_time=2.5)

    model = SimpleNamespace(step_time=2.0, replace=replace)
    oom = _diagnosis("hbm_out_of_memory", fixes=[_Fix("serialize", "num_serialized_tables", value=4)])
    c = _context(memory=_memory([oom], AT_PEAK, peak=1300, usable=1000), model=model)
    check_memory(c)
    (f,) = c.findings
    assert calls == [{"num_serialized_tables": 4}]
    assert f.evidence["time_cost_s"] == 0.5 and f.step_time_s == 2.0
    assert f.gain_basis == ("bytes to free at the HBM peak (memory model); time cost of serializing from the "
                            "step model")


def test_equal_stack_and_heap_parts_are_an_hbm_stack_overflow_only():
    # stack part 100 (the backward stack missing counts 0) == heap part 60 + 40 (constants missing count 0)
    at_peak = {"sc_forward_stack": 100, "dense_weights": 60, "prefetch": 40}
    c = _context(memory=_memory([_diagnosis("hbm_out_of_memory")], at_peak, peak=1300, usable=1000))
    check_memory(c)
    (f,) = c.findings
    assert f.id == "hbm_stack_overflow"
    assert f.evidence == _common(100, 100)
    assert f.fix == ("serialize the largest stacks; or lower max_unique_ids_per_partition of the largest stacks "
                     "(the stack is proportional)")


def test_a_serializing_fix_without_a_count_is_named_without_one():
    oom = _diagnosis("hbm_out_of_memory", fixes=[_Fix("serialize", "num_serialized_tables")])
    model = SimpleNamespace(step_time=2.0, replace=lambda **changes: pytest.fail("no count: nothing to re-run"))
    c = _context(memory=_memory([oom], AT_PEAK, peak=1300, usable=1000), model=model)
    check_memory(c)
    (f,) = c.findings
    assert f.fix.startswith("serialize the largest stacks; or lower")
    assert f.evidence == _common(150, 100) and f.gain_basis == "bytes to free at the HBM peak (memory model)"


def test_a_heap_larger_than_the_hbm_stack_is_heap_exhaustion():
    # heap part 70 + 0 (constants missing) + 40 = 110 > stack part 60 + 49 = 109
    at_peak = {"sc_forward_stack": 60, "sc_backward_stack": 49, "dense_weights": 70, "prefetch": 40}
    c = _context(memory=_memory([_diagnosis("hbm_out_of_memory")], at_peak, peak=1300, usable=1000))
    check_memory(c)
    (f,) = c.findings
    assert (f.id, f.severity, f.title) == ("hbm_heap_exhaustion", "error",
                                           "HBM heap exhaustion: dense weights, constants or prefetch")
    assert f.evidence == {**_common(109, 110), "dense_weights": 70, "constants": 0, "prefetch": 40}
    assert f.fix == "shrink the heap: fewer prefetched input steps, smaller dense weights or constants"
    assert f.flags == (PREFETCH, "dense_weights_bytes")
    assert f.gain_bytes == 300 and f.gain_basis == "bytes to free at the HBM peak (memory model)"


def test_a_prefetch_fix_names_its_value():
    at_peak = {"sc_forward_stack": 10, "dense_weights": 70}
    oom = _diagnosis("hbm_out_of_memory", fixes=[_Fix("less prefetch", "maximum_parallel_iterations", value=2)])
    c = _context(memory=_memory([oom], at_peak, peak=1300, usable=1000))
    check_memory(c)
    (f,) = c.findings
    assert f.fix == (f"set {PREFETCH}=2; shrink the heap: fewer prefetched input steps, smaller dense weights "
                     "or constants")
    # named without a value: the generic text
    oom = _diagnosis("hbm_out_of_memory", fixes=[_Fix("less prefetch", "maximum_parallel_iterations")])
    c = _context(memory=_memory([oom], at_peak, peak=1300, usable=1000))
    check_memory(c)
    assert c.findings[0].fix == "shrink the heap: fewer prefetched input steps, smaller dense weights or constants"


def test_a_fix_of_the_other_part_reports_both():
    # the stack part is larger but the memory model also proposes less prefetch: both findings
    both = [_Fix("serialize", "num_serialized_tables", value=2), _Fix("less prefetch", "maximum_parallel_iterations",
                                                                       value=1)]
    c = _context(memory=_memory([_diagnosis("hbm_out_of_memory", fixes=both[1:])], AT_PEAK, peak=1300, usable=1000))
    check_memory(c)
    assert [f.id for f in c.findings] == ["hbm_stack_overflow", "hbm_heap_exhaustion"]
    # the heap part is larger but serializing is proposed: both again
    heap = {"sc_forward_stack": 10, "dense_weights": 70}
    c = _context(memory=_memory([_diagnosis("hbm_out_of_memory", fixes=both[:1])], heap, peak=1300, usable=1000))
    check_memory(c)
    assert [f.id for f in c.findings] == ["hbm_stack_overflow", "hbm_heap_exhaustion"]
    assert c.findings[0].evidence["num_serialized_tables"] == 2


def test_no_out_of_memory_diagnosis_no_hbm_finding():
    # codes sorting before and after "hbm_out_of_memory", none of them it
    serialize = [_Fix("serialize", "num_serialized_tables", value=2)]
    memory = _memory([_diagnosis("batch_not_divisible", severity="warning", resource="input", fixes=serialize),
                      _diagnosis("padding_waste", severity="info", fixes=serialize),
                      _diagnosis("hbm_near_limit", fixes=serialize)], AT_PEAK, peak=1300, usable=1000)
    c = _context(memory=memory)
    check_memory(c)
    assert c.findings == [] and c.skipped == {}


def test_categories_missing_at_the_peak_count_zero():
    # stack part 0 (forward missing) + 5 = 5 >= heap part 0 + 4 + 0 (dense weights and prefetch missing)
    c = _context(memory=_memory([_diagnosis("hbm_out_of_memory")], {"sc_backward_stack": 5, "constants": 4},
                                peak=1300, usable=1000))
    check_memory(c)
    (f,) = c.findings
    assert f.id == "hbm_stack_overflow" and f.evidence == _common(5, 4)
    # heap part 9 (constants only) > stack part 3: the heap's categories each reported, the missing ones as 0
    c = _context(memory=_memory([_diagnosis("hbm_out_of_memory")], {"constants": 9, "sc_forward_stack": 3},
                                peak=1300, usable=1000))
    check_memory(c)
    (f,) = c.findings
    assert f.evidence == {**_common(3, 9), "dense_weights": 0, "constants": 9, "prefetch": 0}
