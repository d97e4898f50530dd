"""The advisor's step-time checks (scwork.advisor._time_checks) on step models written out by hand.

The step model is a stand-in holding exactly what the checks read (busy times,
durations, detail arrays, what-if step times), so every trigger is tried at its
boundary (host time equal to the busiest device resource, slowest SparseCore at
exactly ``skew_ratio`` times the mean, DMA time equal to vector time, utilization at
``sc_bound_utilization``, a gain of exactly ``min_gain_fraction`` of the step) and
every number of a finding's text and evidence is worked out here.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import xarray as xr

import scwork
from scwork.advisor._context import Context
from scwork.advisor._time_checks import check_bandwidth, check_host, check_pipelining, check_precision, check_skew
from scwork.advisor.findings import AdvisorThresholds
from scwork.hardware import get
from scwork.pipeline import StepModelParams
from scwork.sharding import TableSpec

V5P4 = scwork.Topology.for_chip("v5p", num_chips=4)        # 4 chips, 4 SparseCores each


class _Model:
    """A step model stand-in: fields as given; ``replace`` and ``step_time_with`` record their arguments."""

    def __init__(self, step_time=1.0, what_if=None, with_time=None, **fields):
        self.step_time = step_time
        self._what_if = what_if or (lambda changes: SimpleNamespace(step_time=step_time))
        self._with_time = with_time
        self.calls = []
        self.__dict__.update(fields)

    def busy_per_step(self):
        return dict(self.busy)

    def utilization(self):
        return dict(self.util)

    def replace(self, **changes):
        self.calls.append(("replace", changes))
        return self._what_if(changes)

    def step_time_with(self, **changes):
        self.calls.append(("step_time_with", changes))
        return self._with_time


def _context(model=None, plan=None, stats=None, memory=None, dtype=None, **thresholds):
    return Context(config=None, plan=plan, stats=stats, memory=memory, model=model, minibatch=None,
                   thresholds=AdvisorThresholds(**thresholds), batch_size=None, dtype=dtype)


# -- host_preprocessing_slow ---------------------------------------------------------------
def _host_model(host, others, threads=2, overhead=0.1, faster_host=0.5, faster_step=1.5, step=3.0, with_time=None):
    params = StepModelParams(host_threads=threads, host_overhead_s=overhead, host_ids_per_s=1e6)
    return _Model(step_time=step, params=params, busy={"host": host, "sc": others / 2, "ici": others, "tc": 0.0},
                  detail={"host_ids": np.array([7.0, 9.0])},
                  what_if=lambda changes: SimpleNamespace(step_time=faster_step, phase_time={"host": faster_host}),
                  with_time=with_time)


def test_host_equal_to_the_busiest_device_resource_is_not_slow():
    for host in (0.6, 0.5):               # equal to or under the ICI's 0.6 s (the what-if would gain 1.5 s)
        m = _host_model(host=host, others=0.6)
        c = _context(m)
        check_host(c)
        assert c.findings == [] and c.skipped == {} and m.calls == []


def test_slow_host_finding_names_the_threads_that_bring_it_under_the_device():
    # 2 threads, 0.1 s fixed: (1.1 - 0.1) x 2 = 2 thread-seconds of work; under the ICI's 0.6 s needs
    # 2 / (0.6 - 0.1) = 4 threads exactly (not 5)
    m = _host_model(host=1.1, others=0.6)
    c = _context(m)
    check_host(c)
    (f,) = c.findings
    assert m.calls == [("replace", {"host_threads": 4})]
    assert (f.id, f.severity, f.title) == ("host_preprocessing_slow", "warning",
                                           "Host preprocessing is slower than the device step")
    assert f.evidence == {"host_time_s": 1.1, "busiest_device_resource_s": 0.6, "host_threads": 2,
                          "host_ids_per_step": 9.0, "host_ids_per_s": 1e6, "threads_needed": 4}
    assert f.gain_s == 1.5 and f.step_time_s == 3.0                  # 3 s -> 1.5 s
    assert f.gain_basis == "step model re-run with host_threads=4 (host 500 ms <= the busiest device resource 600 ms)"
    assert f.fix == "preprocess with 4 threads per host (or faster preprocessing); prefetch more input steps"
    assert f.flags == ("host_threads", "maximum_parallel_iterations")


def test_threads_needed_round_up_and_are_at_least_one_more():
    # 2 thread-seconds over 0.9 s: 2.22 -> 3 threads (one more than 2)
    m = _host_model(host=1.1, others=1.0)
    check_host(_context(m))
    assert m.calls == [("replace", {"host_threads": 3})]
    # 2 thread-seconds over 0.3 s: 6.67 -> 7 threads (a ratio, not a floor division: not 6)
    m = _host_model(host=1.1, others=0.4)
    check_host(_context(m))
    assert m.calls == [("replace", {"host_threads": 7})]
    # 1 thread, no fixed cost, host 1 + 5e-10 s against 1 s: the ratio is within the 1e-9 tolerance of
    # 1 thread, yet the host is slower: one more thread, 2
    m = _host_model(host=1.0000000005, others=1.0, threads=1, overhead=0.0)
    check_host(_context(m))
    assert m.calls == [("replace", {"host_threads": 2})]


def test_a_fixed_host_cost_over_the_device_is_cut_not_threaded():
    # the fixed 0.6 s alone is the device's 0.6 s: no thread count helps; the what-if drops the per-id work
    for overhead in (0.6, 0.7):
        m = _host_model(host=1.1, others=0.6, overhead=overhead, with_time=2.0)
        c = _context(m)
        check_host(c)
        (f,) = c.findings
        assert m.calls == [("step_time_with", {"durations": {"host": overhead}})]
        assert f.gain_s == pytest.approx(1.0, rel=1e-12) and f.evidence["threads_needed"] is None
        assert f.gain_basis == ("step model with the host's per-id work removed (host_overhead_s alone exceeds "
                                "the device)")
        assert f.fix == "cut the fixed host overhead per step; prefetch more input steps"


def test_a_host_gain_at_the_threshold_is_offered_and_under_it_is_not():
    # gain 3 - 1.5 = 1.5 s against 0.5 x 3 s: offered; against 0.5 x 3.0000001 s: not
    c = _context(_host_model(host=1.1, others=0.6), min_gain_fraction=0.5)
    check_host(c)
    assert len(c.findings) == 1
    c = _context(_host_model(host=1.1, others=0.6, step=3.0000001, faster_step=1.5000001), min_gain_fraction=0.5)
    check_host(c)
    assert c.findings == []


def test_without_a_model_the_time_checks_are_skipped():
    c = _context()
    for check in (check_host, check_pipelining, check_bandwidth):
        check(c)
    assert c.findings == []
    assert c.skipped == {"host_preprocessing_slow": "needs a step model (host time)",
                         "pipelining_off": "needs a step model", "hbm_bandwidth_saturation": "needs a step model"}


# -- pipelining_off ------------------------------------------------------------------------
def _sequential(pipelining=False, sequential=3.0, pipelined=2.0):
    return _Model(step_time=sequential, pipelining=pipelining, sequential_step_time=sequential,
                  pipelined_step_time=pipelined, speedup=sequential / pipelined, staleness_steps=1, update_offset=2)


def test_pipelining_off_finding_numbers():
    c = _context(_sequential())
    check_pipelining(c)
    (f,) = c.findings
    assert (f.id, f.severity, f.title) == ("pipelining_off", "warning",
                                           "SparseCore and TensorCore do not overlap (pipelining off)")
    assert f.evidence == {"sequential_step_s": 3.0, "pipelined_step_s": 2.0, "speedup": 1.5,
                          "staleness_steps_if_on": 1}
    assert f.gain_s == 1.0
    assert f.fix == ("set tf_xla_disable_full_embedding_pipelining=false; the SparseCore then uses embeddings 1 "
                     "step(s) stale (updates of step i visible at step i+2): check convergence")
    assert f.flags == ("tf_xla_disable_full_embedding_pipelining",)
    assert f.gain_basis == "step model: sequential minus pipelined steady-state step time"


def test_pipelining_on_or_not_worth_it_is_not_a_finding():
    c = _context(_sequential(pipelining=True))
    check_pipelining(c)
    assert c.findings == []
    # gain 1 s of 3 s: offered at a third exactly, not above it
    c = _context(_sequential(), min_gain_fraction=1 / 3)
    check_pipelining(c)
    assert len(c.findings) == 1
    c = _context(_sequential(), min_gain_fraction=0.34)
    check_pipelining(c)
    assert c.findings == []


# -- partition_skew ------------------------------------------------------------------------
DIMS = ("stack", "device", "sc", "partition")


def _ids(ids, unique=None, minibatches=False):
    ids = np.asarray(ids, np.int64)
    dims = ("minibatch", *DIMS) if minibatches else DIMS
    return xr.Dataset({"ids": (dims, ids), "unique_ids": (dims, np.asarray(ids if unique is None else unique))},
                      coords={"stack": ["s"] if not minibatches else ["s"]})


def _skew_model(forward, backward, stats, step=1.0, even_step=0.5, **fields):
    m = _Model(step_time=step, durations={"sc_forward": forward, "sc_backward": backward},
               _inputs={"stats": stats, "plan": fields.pop("plan", None)}, topology=V5P4,
               what_if=lambda changes: SimpleNamespace(step_time=even_step), **fields)
    return m


FLAT = _ids([[[[5, 3]]]])       # one stack, device, SparseCore; partitions 5 and 3 ids


def test_partition_skew_from_the_step_model():
    # 16 SparseCores; unit 9 (device 2, SparseCore 1) takes 1 + 1.5 = 2.5 s, the 15 others 1 s:
    # mean 17.5 / 16 = 1.09375, ratio 2.5 / 1.09375
    fw, bw = np.full(16, 0.5), np.full(16, 0.5)
    fw[9], bw[9] = 1.0, 1.5
    m = _skew_model(fw, bw, FLAT)
    c = _context(m)
    check_skew(c)
    (f,) = c.findings
    assert (f.id, f.severity, f.stack) == ("partition_skew", "warning", None)
    assert f.evidence == {"slowest_sc_s": 2.5, "mean_sc_s": 1.09375, "ratio": 2.5 / 1.09375,
                          "slowest_device": 2, "slowest_sc": 1}
    assert f.gain_s == 0.5
    assert f.gain_basis == "step model re-run with each source SparseCore's ids spread evenly over the partitions"
    assert f.flags == ("rotation (plan_stacking)", "max_ids_per_partition")
    # the what-if: the statistics' 8 ids spread evenly (4 and 4), no minibatch arguments
    ((name, changes),) = m.calls
    assert name == "replace" and set(changes) == {"stats"}
    assert changes["stats"]["ids"].values.tolist() == [[[[4, 4]]]]


def test_skew_what_if_drops_the_configured_limits():
    # the batch's configured limits are not the what-if's (the step model would clip the evened-out
    # ids to them): the statistics the what-if runs on carry none
    stats = FLAT.assign(configured_max_ids_per_partition=("stack", [4]),
                        configured_max_unique_ids_per_partition=("stack", [4]))
    fw, bw = np.full(16, 0.5), np.full(16, 0.5)
    fw[6] = 2.0
    m = _skew_model(fw, bw, stats)
    check_skew(_context(m))
    ((_, changes),) = m.calls
    assert sorted(changes["stats"].data_vars) == ["ids", "unique_ids"]


def test_skew_at_exactly_the_ratio_is_not_skew():
    # 2.5, 1.5, 2 and 2 s: mean 2, and 2.5 is exactly the default 1.25 x 2
    c = _context(_skew_model(np.array([2.5, 1.5, 2.0, 2.0]), np.zeros(4), FLAT))
    check_skew(c)
    assert c.findings == []
    # 4 units: 2.5 and 1.5 x 3 -> mean 1.75, skew_ratio 2.5 / 1.75 exactly: not above it
    fw = np.array([2.5, 1.5, 1.5, 1.5])
    c = _context(_skew_model(fw, np.zeros(4), FLAT), skew_ratio=2.5 / 1.75 + 1e-12)
    check_skew(c)
    assert c.findings == []
    c = _context(_skew_model(fw, np.zeros(4), FLAT), skew_ratio=2.5 / 1.75 - 1e-12)
    check_skew(c)
    assert len(c.findings) == 1


def test_idle_sparsecores_are_not_skewed():
    c = _context(_skew_model(np.zeros(4), np.zeros(4), FLAT))
    check_skew(c)
    assert c.findings == [] and c.skipped == {}


def test_skew_not_worth_its_what_if_is_not_offered():
    fw = np.array([4.0, 1.0, 1.0, 1.0])
    c = _context(_skew_model(fw, np.zeros(4), FLAT, step=1.0, even_step=0.5), min_gain_fraction=0.5)
    check_skew(c)
    assert len(c.findings) == 1                                        # 0.5 s of 1 s: at the threshold
    c = _context(_skew_model(fw, np.zeros(4), FLAT, step=1.0, even_step=0.5000001), min_gain_fraction=0.5)
    check_skew(c)
    assert c.findings == []


def test_skew_what_if_keeps_the_minibatch_counts_of_a_minibatched_model():
    fw = np.array([4.0, 1.0, 1.0, 1.0])
    # statistics with a minibatch dim: 2 mini-batches of (6, 0) and (0, 2) ids add up to (6, 2) -> (4, 4)
    stats = _ids([[[[[6, 0]]]], [[[[0, 2]]]]], minibatches=True)
    plan = object()
    m = _skew_model(fw, np.zeros(4), stats, stacks=["s"], detail={"num_minibatches": [2.0]}, plan=plan)
    check_skew(_context(m))
    ((_, changes),) = m.calls
    assert changes["num_minibatches"] == {"s": 2} and changes["plan"] is plan and changes["topology"] is V5P4
    assert changes["stats"]["ids"].values.tolist() == [[[[4, 4]]]]
    # a mini-batch plan as the model's input: its statistics and its plan
    minibatch_plan = SimpleNamespace(num_minibatches=None, stats=FLAT, plan="the plan")
    m = _skew_model(fw, np.zeros(4), minibatch_plan, stacks=["s"], detail={"num_minibatches": [3]})
    check_skew(_context(m))
    ((_, changes),) = m.calls
    assert changes["num_minibatches"] == {"s": 3} and changes["plan"] == "the plan"
    assert changes["stats"]["ids"].values.tolist() == [[[[4, 4]]]]


def _partition_stats(rows):
    """Two stacks on 1 device x 2 SparseCores; ``rows``: per stack, per SparseCore, ids per partition."""
    a = np.asarray(rows, np.int64)
    return xr.Dataset({"ids": (DIMS, a[:, None]), "unique_ids": (DIMS, a[:, None])}, coords={"stack": ["p", "q"]})


def test_partition_skew_from_statistics_alone():
    # stack p: partitions get 3 + 2 = 5, 1 + 0 = 1, 0 + 0 = 0 ids: mean 2, max 5 > 1.25 x 2 -> skewed
    # stack q: 1 + 1, 1 + 0, 0 + 1 = 2, 1, 1: mean 4 / 3, max 2 > 1.25 x 4/3 -> skewed at partition 0
    stats = _partition_stats([[[3, 1, 0], [2, 0, 0]], [[1, 1, 0], [1, 0, 1]]])
    c = _context(stats=stats)
    check_skew(c)
    p, q = c.findings
    assert (p.id, p.stack, p.title) == ("partition_skew", "p", "Partition skew in stack 'p'")
    assert p.evidence == {"max_partition_ids": 5, "mean_partition_ids": 2.0, "ratio": 2.5, "hot_partition": 0}
    assert (p.gain_s, p.gain_basis) == (None, "no step model: time not estimated")
    assert p.fix == "spread hot ids (shuffle during mini-batching, stacking rotation, re-hashing)"
    assert q.evidence == {"max_partition_ids": 2, "mean_partition_ids": 4 / 3, "ratio": 1.5, "hot_partition": 0}


def test_statistics_skew_at_the_ratio_or_empty_is_not_skew():
    # p: 5, 3, 4 -> mean 4, max 5 = 1.25 x 4: not above. q: no ids at all.
    stats = _partition_stats([[[5, 3, 4], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]])
    c = _context(stats=stats)
    check_skew(c)
    assert c.findings == []
    # the hot partition is the third one
    c = _context(stats=_partition_stats([[[0, 0, 7], [1, 1, 0]], [[0, 0, 0], [0, 0, 0]]]))
    check_skew(c)
    assert [f.evidence["hot_partition"] for f in c.findings] == [2]


def test_skew_without_model_or_statistics_is_skipped():
    c = _context()
    check_skew(c)
    assert c.skipped == {"partition_skew": "needs a step model or stats"}


# -- fp32_where_lower_precision_would_do ------------------------------------------------------
def _f32_plan():
    # one f32 stack "t" of one table 1024 x 64 over 4 chips: 256 rows per chip, 256 B per row in f32,
    # 128 B in bf16, 64 B in int8 (64 lanes of 1 byte fill two 32-byte lines): 32768 and 49152 B saved per chip
    table = TableSpec("t", 1024, 64)
    return SimpleNamespace(stacks=[SimpleNamespace(name="t", tables=[SimpleNamespace(table=table)]),
                                   SimpleNamespace(name="u", tables=[SimpleNamespace(table=TableSpec("u", 4096, 64))])],
                           topology=V5P4)


def test_fp32_finding_from_a_plan_alone_counts_the_bytes_per_chip():
    c = _context(plan=_f32_plan(), dtype={"u": "bf16"})
    check_precision(c)
    (f,) = c.findings
    assert (f.id, f.severity, f.title) == ("fp32_where_lower_precision_would_do", "info",
                                           "1 stack(s) stored and gathered in FP32")
    assert f.evidence == {"f32_stacks": ["t"], "step_gain_bf16_s": None, "table_bytes_saved_bf16_per_chip": 32768,
                          "table_bytes_saved_int8_per_chip": 49152}
    assert type(f.evidence["table_bytes_saved_bf16_per_chip"]) is int
    assert (f.gain_s, f.gain_bytes) == (None, 32768)
    assert f.gain_basis == "scwork.quant.hbm_savings (tables only, padded to 32-byte lines) per chip"
    assert f.flags == ("dtype", "quantization_config_num_buckets", "quantization_config_low",
                       "quantization_config_high")


def test_fp32_stacks_from_the_dtype_argument():
    # one dtype for all: f32 names both stacks; bf16 none; no dtype at all means f32
    for dtype, found in (("f32", ["t", "u"]), (None, ["t", "u"]), ("bf16", []), ("s8", []), ("f16", []),
                         ({"t": "bf16"}, ["u"]), ({"u": "s8"}, ["t"])):
        c = _context(plan=_f32_plan(), dtype=dtype)
        check_precision(c)
        assert [f.evidence["f32_stacks"] for f in c.findings] == ([found] if found else []), dtype


def test_fp32_stacks_from_the_memory_model_when_no_dtype_is_given():
    memory = SimpleNamespace(model=SimpleNamespace(stacks=[SimpleNamespace(name="t", dtype="s8"),
                                                           SimpleNamespace(name="u", dtype="f32")]))
    c = _context(plan=_f32_plan(), memory=memory)
    check_precision(c)
    assert c.findings[0].evidence["f32_stacks"] == ["u"]
    # a dtype given wins over the memory model's
    c = _context(plan=_f32_plan(), memory=memory, dtype="f32")
    check_precision(c)
    assert c.findings[0].evidence["f32_stacks"] == ["t", "u"]


def _precision_model(dtypes, step=2.0, bf16_step=1.5, plan=None):
    return _Model(step_time=step, _stacks=[SimpleNamespace(name=n, dtype=d) for n, d in dtypes.items()],
                  _inputs={"plan": plan}, what_if=lambda changes: SimpleNamespace(step_time=bf16_step))


def test_fp32_finding_from_the_step_model():
    m = _precision_model({"a": "f32", "b": "bf16", "c": "f32", "d": "s8", "e": "f16"})
    c = _context(m)
    check_precision(c)
    (f,) = c.findings
    assert m.calls == [("replace", {"dtype": {"a": "bf16", "b": "bf16", "c": "bf16", "d": "s8", "e": "f16"}})]
    assert f.title == "2 stack(s) stored and gathered in FP32"
    assert f.evidence == {"f32_stacks": ["a", "c"], "step_gain_bf16_s": 0.5, "table_bytes_saved_bf16_per_chip": None,
                          "table_bytes_saved_int8_per_chip": None}
    assert (f.gain_s, f.gain_bytes) == (0.5, None)
    assert f.gain_basis == ("step model re-run with bf16 tables (rows of 16 elements per 32-byte granule, 16-lane "
                            "SIMD where the chip has it)")


def test_bf16_that_does_not_shorten_the_step_is_no_time_gain():
    for bf16_step in (2.0, 2.5):
        c = _context(_precision_model({"a": "f32"}, bf16_step=bf16_step))
        check_precision(c)
        assert c.findings == []                          # no time gain and no plan: nothing to offer
        c = _context(_precision_model({"t": "f32"}, bf16_step=bf16_step, plan=_f32_plan()))
        check_precision(c)
        (f,) = c.findings
        assert f.gain_s is None and f.evidence["step_gain_bf16_s"] is None and f.gain_bytes == 32768
        assert f.gain_basis == ("step model re-run with bf16 tables (rows of 16 elements per 32-byte granule, "
                                f"16-lane SIMD where the chip has it): no time gain (step time 2 s -> "
                                f"{bf16_step:g} s); scwork.quant.hbm_savings (tables only, padded to 32-byte lines) "
                                "per chip")


def test_a_bf16_gain_under_the_threshold_without_bytes_is_not_offered():
    c = _context(_precision_model({"a": "f32"}, step=2.0, bf16_step=1.0), min_gain_fraction=0.5)
    check_precision(c)
    assert len(c.findings) == 1                                       # 1 s of 2 s: at the threshold
    c = _context(_precision_model({"a": "f32"}, step=2.0, bf16_step=1.0000001), min_gain_fraction=0.5)
    check_precision(c)
    assert c.findings == []


def test_no_f32_stack_or_nothing_known_is_not_a_finding():
    c = _context(_precision_model({"a": "bf16"}))
    check_precision(c)
    assert c.findings == [] and c.skipped == {}
    c = _context()
    check_precision(c)
    assert c.skipped == {"fp32_where_lower_precision_would_do": "needs a step model or a plan"}


# -- hbm_bandwidth_saturation ----------------------------------------------------------------
def _bandwidth_model(dma=(3.0, 1.0), vec=(2.0, 2.0), sc=1.0, util=0.8, step=2.0, halved=1.0, granules=(1, 4),
                     dims=(8, 16)):
    """Two stacks (a: 8 wide, b: 16 wide, f32), 2 SparseCores; unit 1 is the busiest.

    ``dma`` and ``vec``: the busiest unit's DMA and vector seconds, per direction, summed over stacks
    (each stack gets half).
    """
    K, units = 2, 2

    def per_unit(values):
        a = np.zeros((K, 2, units))
        a[:, :, 1] = np.asarray(values) / K
        return a.reshape(-1)

    detail = {"dma_time": per_unit(dma), "vector_time": per_unit(vec),
              "dma_bytes": per_unit((1000.0, 24.0)), "row_granules": np.asarray(granules)}
    return _Model(step_time=step, busy={"sc": sc, "host": 0.5, "ici": 1.0, "tc": 0.25}, util={"sc": util},
                  durations={"sc_forward": np.array([0.1, 0.3]), "sc_backward": np.array([0.1, 0.2])},
                  detail=detail, stacks=["a", "b"], chip=get("v5p"),
                  _stacks=[SimpleNamespace(name="a", dim=dims[0], dtype="f32"),
                           SimpleNamespace(name="b", dim=dims[1], dtype="f32")],
                  with_time=halved)


def test_hbm_bandwidth_saturation_numbers():
    m = _bandwidth_model()
    c = _context(m)
    check_bandwidth(c)
    (f,) = c.findings
    assert m.calls == [("step_time_with", {"scale": {"sc_forward": 0.5, "sc_backward": 0.5}})]
    assert (f.id, f.severity, f.title) == ("hbm_bandwidth_saturation", "warning",
                                           "SparseCore HBM traffic bounds the step")
    # busiest unit 1: DMA 3 + 1 = 4 s >= vector 2 + 2 = 4 s; 1024 bytes per tile x 16 tiles moved;
    # a: 8 x 4 B in 1 granule of 32 B = 1.0; b: 16 x 4 B in 4 granules (128 B) = 0.5, not below 0.5
    assert f.evidence == {"sc_busy_per_step_s": 1.0, "sc_utilization": 0.8, "dma_s": 4.0, "vector_s": 4.0,
                          "bytes_moved_by_busiest_sc": 1024.0 * 16, "row_gather_efficiency": {"a": 1.0, "b": 0.5}}
    assert f.gain_s == 1.0
    assert f.fix == ("more chips (fewer ids per SparseCore), fewer lookups per sample, wider features instead of "
                     "many narrow ones")
    assert f.flags == ("num_chips", "embedding_dim", "valency")
    assert f.gain_basis.startswith("step model with SparseCore phases halved")


def test_narrow_stacks_moving_padding_are_named():
    # a: 3 x 4 B = 12 B in one 32-byte granule: 0.375 (rounded to 3 places: 0.375), below 0.5
    m = _bandwidth_model(dims=(3, 16))
    c = _context(m)
    check_bandwidth(c)
    (f,) = c.findings
    assert f.evidence["row_gather_efficiency"] == {"a": 0.375, "b": 0.5}
    assert f.fix.endswith("narrow ones; narrow stacks ['a'] move mostly padding (32-byte granules)")
    # 5 x 4 B in 3 granules: 20 / 96 = 0.2083... rounded to 0.208
    m = _bandwidth_model(dims=(5, 16), granules=(3, 4))
    c = _context(m)
    check_bandwidth(c)
    assert c.findings[0].evidence["row_gather_efficiency"]["a"] == 0.208


def test_bandwidth_boundaries():
    # SparseCore busy time equal to the ICI's (the busiest other): still SparseCore-bound
    assert _run_bandwidth(sc=1.0) == 1
    assert _run_bandwidth(sc=0.999) == 0
    # utilization at the threshold: counts; just under: not
    assert _run_bandwidth(util=0.8) == 1
    assert _run_bandwidth(util=0.7999) == 0
    # DMA time just under the vector time: vector-bound, not an HBM problem
    assert _run_bandwidth(dma=(3.0, 0.999)) == 0
    # a gain at the threshold (1 s of 2 s) is offered; just under it is not
    assert _run_bandwidth(min_gain_fraction=0.5) == 1
    assert _run_bandwidth(halved=1.0000001, min_gain_fraction=0.5) == 0


def _run_bandwidth(min_gain_fraction=0.02, **kw):
    c = _context(_bandwidth_model(**kw), min_gain_fraction=min_gain_fraction)
    check_bandwidth(c)
    return len(c.findings)


def test_the_busiest_unit_is_the_one_read():
    # unit 0 is the busiest now (0.1 + 0.5 against 0.3 + 0.1; forward minus backward would pick unit 1):
    # its DMA (0) is under its vector time (1)
    m = _bandwidth_model()
    m.durations = {"sc_forward": np.array([0.1, 0.3]), "sc_backward": np.array([0.5, 0.1])}
    m.detail["vector_time"] = np.array([0.5, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0])
    c = _context(m)
    check_bandwidth(c)
    assert c.findings == []


def test_skew_of_short_phases_is_still_skew():
    # mean under 1 s (and under 1 id) is no reason to stop: 0.4 and 0.1 x 3 s -> mean 0.175, ratio 2.29
    c = _context(_skew_model(np.array([0.4, 0.1, 0.1, 0.1]), np.zeros(4), FLAT, step=1.0, even_step=0.5))
    check_skew(c)
    assert c.findings[0].evidence["ratio"] == pytest.approx(0.4 / 0.175, rel=1e-12)
    # statistics: partitions 1, 0, 0 ids -> mean 1/3, max 1 > 1.25 x 1/3
    c = _context(stats=_partition_stats([[[1, 0, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]]))
    check_skew(c)
    assert [(f.stack, f.evidence["mean_partition_ids"]) for f in c.findings] == [("p", 1 / 3)]
