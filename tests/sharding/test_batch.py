"""FeatureBatch constructors and validation ([sc-guide] §2-3; [sc-guide] §12)."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.errors import InputError
from scwork.sharding import FeatureBatch


def _ragged(batch, name):
    ids, rs = batch[name]
    return [ids[rs[b]:rs[b + 1]].tolist() for b in range(batch.batch_size)]


def test_spec2_example_and_mapping_interface():
    b = FeatureBatch.from_ragged({"f": ([0, 0, 1, 2, 1, 1, 3], [0, 1, 4, 7])})
    assert _ragged(b, "f") == [[0], [0, 1, 2], [1, 1, 3]]
    assert list(b) == ["f"] and len(b) == 1 and "f" in b
    assert b.batch_size == 3 and b.num_ids == 7
    assert b["f"][0].dtype == np.int64 and b["f"][1].dtype == np.int64
    assert b.lengths("f").tolist() == [1, 3, 3]
    assert b.weights("f").tolist() == [1.0] * 7 and not b.has_weights("f")
    with pytest.raises(InputError, match="no feature 'g'"):
        b["g"]


def test_ids_are_read_only_views():
    b = FeatureBatch({"f": ([1, 2], [0, 1, 2])})
    with pytest.raises(ValueError):
        b.ids("f")[0] = 5


def test_several_features_share_one_flat_buffer():
    b = FeatureBatch({"a": ([1, 2, 3], [0, 2, 3]), "b": ([9], [0, 0, 1])})
    assert b._ids.tolist() == [1, 2, 3, 9]
    assert b._splits.tolist() == [[0, 2, 3], [3, 3, 4]]
    assert _ragged(b, "b") == [[], [9]]


def test_weights_float32_and_defaults():
    b = FeatureBatch({"a": ([1, 2], [0, 1, 2]), "b": ([3], [0, 1, 1])}, weights={"a": [0.5, 2]})
    assert b.weights("a").dtype == np.float32 and b.weights("a").tolist() == [0.5, 2.0]
    assert b.weights("b").tolist() == [1.0] and b.has_weights("a") and not b.has_weights("b")
    b3 = FeatureBatch({"a": ([1, 2], [0, 1, 2], [3.0, 4.0])})
    assert b3.weights("a").tolist() == [3.0, 4.0]


@pytest.mark.parametrize("data, weights, fragment", [
    ({"f": ([1, -2], [0, 1, 2])}, None, r"negative id -2 in sample 1"),
    ({"f": ([1.5], [0, 1])}, None, "must be integral"),
    ({"f": ([np.nan], [0, 1])}, None, "must be integral"),
    ({"f": (["a", "b"], [0, 2])}, None, "strings or objects"),
    ({"f": ([True], [0, 1])}, None, "booleans"),
    ({"f": ([[1, 2]], [0, 2])}, None, "must be 1-D"),
    ({"f": ([1, 2], [1, 2])}, None, "must start at 0"),
    ({"f": ([1, 2], [0, 2, 1, 2])}, None, "non-decreasing"),
    ({"f": ([1, 2, 3], [0, 2])}, None, "end at 2 but there are 3 ids"),
    ({"f": ([1, 2], [0, 2])}, {"f": [1.0, np.nan]}, r"NaN or infinite.*\[sc-guide\] §12"),
    ({"f": ([1, 2], [0, 2])}, {"f": [1.0, np.inf]}, "NaN or infinite"),
    ({"f": ([1, 2], [0, 2])}, {"f": [1.0, 1e39]}, "NaN or infinite in float32"),
    ({"f": ([1, 2], [0, 2])}, {"f": [1.0]}, "one weight per id"),
    ({"f": ([1, 2], [0, 2])}, {"g": [1.0]}, "unknown features"),
    ({"a": ([1], [0, 1]), "b": ([1, 2], [0, 1, 2])}, None, "different batch sizes"),
    ({"f": ([2**64 - 1], [0, 1])}, None, "do not fit in int64"),
    ({"f": ([[1, 2], [3]], [0, 2, 3])}, None, "cannot be read as an array"),
    ({}, None, "non-empty dict"),
])
def test_validation_errors(data, weights, fragment):
    with pytest.raises(InputError, match=fragment):
        FeatureBatch(data, weights=weights)


def test_integral_floats_and_unsigned_are_accepted():
    b = FeatureBatch({"f": (np.array([1.0, 7.0]), np.array([0, 1, 2], np.uint32))})
    assert b.ids("f").tolist() == [1, 7]


def test_from_dense_padding_anywhere_and_1d():
    b = FeatureBatch.from_dense({"f": [[3, -1, 4], [-1, -1, -1]], "g": [5, -1]})
    assert _ragged(b, "f") == [[3, 4], []]
    assert _ragged(b, "g") == [[5], []]
    with pytest.raises(InputError, match=r"negative id -7 at sample 0, column 1"):
        FeatureBatch.from_dense({"f": [[3, -7]]})
    w = FeatureBatch.from_dense({"f": [[3, -1, 4]]}, weights={"f": [[0.5, 9.0, 2.0]]})
    assert w.weights("f").tolist() == [0.5, 2.0]


def test_from_coo_sorts_and_checks():
    b = FeatureBatch.from_coo({"f": (np.array([[2, 1], [0, 0], [2, 0]]), [30, 10, 20], (3, 2))},
                              weights={"f": [3.0, 1.0, 2.0]})
    assert _ragged(b, "f") == [[10], [], [20, 30]]
    assert b.weights("f").tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(InputError, match="appears more than once"):
        FeatureBatch.from_coo({"f": ([[0, 0], [0, 0]], [1, 2], (1, 2))})
    with pytest.raises(InputError, match="outside dense_shape"):
        FeatureBatch.from_coo({"f": ([[3, 0]], [1], (2, 2))})
    empty = FeatureBatch.from_coo({"f": (np.zeros((0, 2), int), [], (2, 3))})
    assert _ragged(empty, "f") == [[], []]


def test_from_columns_pandas():
    df = pd.DataFrame({
        "single": [1, 2, 3],
        "maybe": [4.0, np.nan, 6.0],
        "listed": [[1, 2], [], [3]],
        "text": ["1, 2", "", "7"],
        "w": ["0.5,2", "", "1"],
    })
    b = FeatureBatch.from_columns(df, columns=["single", "maybe", "listed", "text"])
    assert _ragged(b, "single") == [[1], [2], [3]]
    assert _ragged(b, "maybe") == [[4], [], [6]]
    assert _ragged(b, "listed") == [[1, 2], [], [3]]
    assert _ragged(b, "text") == [[1, 2], [], [7]]
    bw = FeatureBatch.from_columns(df, columns=["text"], weights={"text": "w"})
    assert bw.weights("text").tolist() == [0.5, 2.0, 1.0]
    with pytest.raises(InputError, match=r"column 'bad', row 1: 'x' is not an integer id"):
        FeatureBatch.from_columns(pd.DataFrame({"bad": ["1", "x"]}))
    with pytest.raises(InputError, match="must be integral"):
        FeatureBatch.from_columns(pd.DataFrame({"f": [1.5]}))
    with pytest.raises(InputError, match="not in the DataFrame"):
        FeatureBatch.from_columns(df, columns=["nope"])
    with pytest.raises(InputError, match="pandas DataFrame or a pyarrow Table"):
        FeatureBatch.from_columns({"f": [1]})


def test_from_columns_pyarrow():
    table = pa.table({
        "single": pa.array([1, None, 3], pa.int64()),
        "listed": pa.array([[1, 2], None, [3]], pa.list_(pa.int32())),
        "text": pa.array(["4;5", None, ""]),
    })
    b = FeatureBatch.from_columns(table, sep=";")
    assert _ragged(b, "single") == [[1], [], [3]]
    assert _ragged(b, "listed") == [[1, 2], [], [3]]
    assert _ragged(b, "text") == [[4, 5], [], []]
    with pytest.raises(InputError, match="negative id"):
        FeatureBatch.from_columns(pa.table({"f": pa.array([[1, -1]])}))


def test_select_and_without():
    b = FeatureBatch({"a": ([1, 2, 3], [0, 2, 3]), "b": ([4], [0, 0, 1])}, weights={"a": [1, 2, 3]})
    s = b.select(["b", "a"])
    assert s.feature_names == ("b", "a") and s.weights("a").tolist() == [1, 2, 3]
    w = b._without({"a": np.array([False, True, False])})
    assert _ragged(w, "a") == [[1], [3]] and w.weights("a").tolist() == [1.0, 3.0]
    assert _ragged(w, "b") == [[], [4]]


def test_repr_is_readable():
    b = FeatureBatch({"a": ([1, 2, 3], [0, 2, 3])}, weights={"a": [1, 1, 1]})
    assert repr(b) == "FeatureBatch(batch_size=2, features=1, ids=3: a (3 ids, <= 2 per sample, weighted))"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 1000), max_size=5), min_size=1, max_size=8))
def test_dense_ragged_coo_agree(rows):
    width = max(1, max(len(r) for r in rows))
    dense = np.full((len(rows), width), -1)
    idx, vals = [], []
    for b, r in enumerate(rows):
        dense[b, :len(r)] = r
        for j, v in enumerate(r):
            idx.append((b, j))
            vals.append(v)
    ids = np.array([v for r in rows for v in r], np.int64)
    rs = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    a = FeatureBatch.from_ragged({"f": (ids, rs)})
    d = FeatureBatch.from_dense({"f": dense})
    c = FeatureBatch.from_coo({"f": (np.array(idx, np.int64).reshape(-1, 2), vals, (len(rows), width))})
    for other in (d, c):
        assert np.array_equal(a["f"][0], other["f"][0]) and np.array_equal(a["f"][1], other["f"][1])


# -- issue 12: constructors reject every bad input with an InputError --------------------
@pytest.mark.parametrize("call, match", [
    (lambda: FeatureBatch.from_dense([[1, 2]]), "from_dense data must be a dict"),
    (lambda: FeatureBatch.from_coo([([[0, 0]], [1], (1, 1))]), "from_coo data must be a dict"),
    (lambda: FeatureBatch.from_ragged({"f": ([2**64], [0, 1])}), "does not fit in int64"),
    (lambda: FeatureBatch.from_ragged({"f": ([-2**63 - 1], [0, 1])}), "does not fit in int64"),
    (lambda: FeatureBatch.from_coo({"f": ([[0, 0]], [1], (3.9, 1.5))}), "dense_shape must be integral"),
    (lambda: FeatureBatch({"f": ([1], [0, 1])}, weights={1: [1.0], "f": [1.0]}), r"unknown features \[1\]"),
    (lambda: FeatureBatch.from_dense({"f": [[1]]}, weights={1: [1.0], "g": [1.0]}), "unknown features"),
    (lambda: FeatureBatch({"f": ([1], [0, 1])}, weights=[1.0]), "weights must be a dict"),
    (lambda: FeatureBatch({"f": ([1], [0, 1])}, weights={"f": [1e-50]}), "underflows to 0 in float32"),
    (lambda: FeatureBatch({"f": ([1], [0, 1])}, weights={"f": [10**400]}), "too large"),
    (lambda: FeatureBatch.from_dense({"f": [[1]]}, pad=1.5), "pad must be integral"),
])
def test_constructor_bad_inputs_are_input_errors(call, match):
    with pytest.raises(InputError, match=match):
        call()


@pytest.mark.parametrize("text", ["1_000", "\u0661\u0662", "+5", "1e3", " 0x10", "9" * 5000, "1.0"])
def test_from_columns_accepts_only_ascii_digit_ids(text):
    pd = pytest.importorskip("pandas")
    with pytest.raises(InputError, match="is not an integer id") as info:
        FeatureBatch.from_columns(pd.DataFrame({"a": [f"3,{text}"]}))
    assert len(str(info.value)) < 400          # a 5,000-digit token is cut in the message


def test_from_columns_text_weights_are_plain_decimals():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": ["1,2"], "w": ["0.5, 2e1"]})
    assert FeatureBatch.from_columns(df, columns=["a"], weights={"a": "w"}).weights("a").tolist() == [0.5, 20.0]
    with pytest.raises(InputError, match="not a plain decimal number"):
        FeatureBatch.from_columns(pd.DataFrame({"a": ["1,2"], "w": ["1_0,2"]}), columns=["a"], weights={"a": "w"})
    with pytest.raises(InputError, match="flat list"):
        FeatureBatch.from_columns(pd.DataFrame({"a": [[1, [2, 3]]]}))


# -- issue 12: float32 gains never silently become inf or 0 -------------------------------
def _gain_case(weights, combiner, ids=None):
    import scwork
    from scwork.sharding import FeatureSpec, TableSpec, compute_stats, preprocess

    ids = [1] * len(weights) if ids is None else ids
    batch = FeatureBatch({"f": (ids, [0, len(ids)])}, weights={"f": weights})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8, combiner=combiner))]
    return (lambda: preprocess(batch, feats, scwork.Topology(1, 1)),
            lambda: compute_stats(batch, feats, scwork.Topology(1, 1)))


@pytest.mark.parametrize("weights, combiner, match", [
    ([1e20, 1e20], "sqrtn", "feature 'f', sample 0: the squared weights add up to 2e"),
    ([3e38, 3e38], "sum", "feature 'f', sample 0: id 1 appears 2 times and its gains add up to 6e"),
    ([3e38, 3e38], "mean", "feature 'f', sample 0: the weight magnitudes add up to 6e"),
    ([1e-30], "sqrtn", "below float32's smallest normal"),
    ([1e8, 1.0, -1e8], "mean", "nearly cancel"),
    ([1e30, 1e-30], "mean", "which float32 cannot hold"),
    ([1.0, -1.0], "mean", "the weights sum to 0"),
])
def test_gains_out_of_float32_range_are_input_errors(weights, combiner, match):
    ids = list(range(len(weights))) if combiner != "sum" else None
    run_preprocess, run_stats = _gain_case(weights, combiner, ids)
    with pytest.raises(InputError, match=match):
        run_preprocess()
    run_stats()                               # no gains in compute_stats: no error


def test_large_and_tiny_gains_that_fit_are_exact():
    run_preprocess, _ = _gain_case([1e19, 1e19], "sqrtn", [1, 2])
    gains = run_preprocess().csr["t"].partition(0, 0, 0)[2]
    np.testing.assert_allclose(gains, [2**-0.5, 2**-0.5], rtol=1e-6)
    run_preprocess, _ = _gain_case([1e-15, 3e-15], "mean", [1, 2])
    np.testing.assert_allclose(run_preprocess().csr["t"].partition(0, 0, 0)[2], [0.25, 0.75], rtol=1e-6)


def test_oov_comes_before_gain_errors_in_both_calls():
    import scwork
    from scwork.errors import OutOfVocabularyError
    from scwork.sharding import FeatureSpec, TableSpec, compute_stats, preprocess

    batch = FeatureBatch({"a": ([1, 1], [0, 2], [1e20, 1e20]), "b": ([99], [0, 1])})
    feats = [FeatureSpec("a", TableSpec("ta", 8, 8, combiner="sqrtn")), FeatureSpec("b", TableSpec("tb", 8, 8))]
    errors = []
    for call in (compute_stats, preprocess):
        with pytest.raises(OutOfVocabularyError) as info:
            call(batch, feats, scwork.Topology(1, 1), stacking=None)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    with pytest.raises(InputError, match="squared weights"):   # dropped OOV ids: then the gains
        preprocess(batch, feats, scwork.Topology(1, 1), stacking=None, on_out_of_vocabulary="drop")


# -- issue 12: allocations are estimated before they are made -----------------------------
def test_huge_topology_is_refused_before_allocating(monkeypatch):
    import scwork
    from scwork.errors import ConfigError
    from scwork.sharding import FeatureSpec, TableSpec, compute_stats, preprocess
    from scwork.sharding import engine

    B = 4 * 10**6
    batch = FeatureBatch({"f": (np.zeros(B, np.int64), np.arange(B + 1))})
    feats = [FeatureSpec("f", TableSpec("t", 8, 8))]
    for call in (compute_stats, preprocess):
        with pytest.raises(ConfigError, match=r"would allocate about \d,\d{3},\d{3},\d{3},\d{3},\d{3} bytes "
                                              r"\([\d,.]+ GiB\).*SCWORK_MAX_SCRATCH_BYTES"):
            call(batch, feats, scwork.Topology(10**6, 4))
    # the limit is the environment variable when set; realistic sizes keep working
    small = FeatureBatch({"f": ([1, 2, 3, 4], [0, 1, 2, 3, 4])})
    need = engine.estimate_scratch_bytes(engine.plan_stacking(feats, scwork.Topology(2, 2), "auto", batch_size=4),
                                         small, 2, 2, False)
    monkeypatch.setenv("SCWORK_MAX_SCRATCH_BYTES", str(need))
    compute_stats(small, feats, scwork.Topology(2, 2), num_threads=1)  # the estimate above is for 1 thread
    monkeypatch.setenv("SCWORK_MAX_SCRATCH_BYTES", str(need - 1))
    with pytest.raises(ConfigError, match=f"above the limit of {need - 1:,} bytes"):
        compute_stats(small, feats, scwork.Topology(2, 2), num_threads=1)
    monkeypatch.setenv("SCWORK_MAX_SCRATCH_BYTES", "1_000")
    with pytest.raises(ConfigError, match="must be a number of bytes"):
        compute_stats(small, feats, scwork.Topology(2, 2))


_UNDER_A_DATA_LIMIT = """
import numpy as np, scwork
from scwork.errors import ConfigError
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, preprocess
from scwork.sharding._scratch import scratch_limit_bytes
from scwork.testing import watchdog
B = 4096
rng = np.random.default_rng(0)
batch = FeatureBatch({"f": (rng.integers(0, 1000, 20 * B), np.arange(0, 20 * B + 1, 20))})
feats = [FeatureSpec("f", TableSpec("t", 1000, 8))]
preprocess(batch, feats, scwork.Topology(2, 2), num_threads=1)     # compiled and warm before the limit
print("unlimited", scratch_limit_bytes())
with watchdog(seconds=120, memory_bytes=32 << 20):
    print("headroom", scratch_limit_bytes())
    try:
        preprocess(batch, feats, scwork.Topology(1024, 4), num_threads=1)
        print("no error")
    except ConfigError as error:
        print("typed", error)
print("after", scratch_limit_bytes())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_DATA and /proc/self/status: Linux")
def test_a_data_size_limit_bounds_the_budget_as_a_typed_error(monkeypatch):
    """Under a data-size limit (ulimit -d), the budget is what the process may still map:
    a call that would pass it is refused with the typed budget error, not numpy's
    MemoryError (a fuzz case needing 2.7 GiB of CSR under a 2 GiB limit raised that).
    In a process of its own: the limit applies to the whole process."""
    import subprocess

    monkeypatch.delenv("SCWORK_MAX_SCRATCH_BYTES", raising=False)
    done = subprocess.run([sys.executable, "-c", _UNDER_A_DATA_LIMIT], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    unlimited, headroom = int(lines["unlimited"]), int(lines["headroom"])
    assert 0 < headroom <= 32 << 20 < unlimited
    assert lines["typed"].startswith("this call would allocate about ")
    assert "above the limit of " in lines["typed"] and " GiB) of scratch" in lines["typed"]
    limit = int(lines["typed"].split("above the limit of ", 1)[1].split(" bytes", 1)[0].replace(",", ""))
    assert limit <= 32 << 20
    assert int(lines["after"]) == unlimited        # the limit lifted, the budget is back


def test_limit_errors_come_before_gain_errors_in_both_calls():
    """compute_stats (no gains) and preprocess raise the same error for the same batch."""
    import scwork
    from scwork.errors import LimitExceededError
    from scwork.sharding import FeatureSpec, SparsecoreConfig, TableSpec, compute_stats, preprocess

    batch = FeatureBatch({"a": ([0], [0, 1], [0.0])})            # mean over a zero weight
    feats = [FeatureSpec("a", TableSpec("t0", 1, 1, combiner="mean"))]
    config = SparsecoreConfig(max_ids_per_chip_per_sample=1)     # 8 CSR slots for 1 sample
    messages = []
    for call in (compute_stats, preprocess):
        with pytest.raises(LimitExceededError) as info:
            call(batch, feats, scwork.Topology(1, 1), config=config)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    with pytest.raises(InputError, match="the weights sum to 0"):
        preprocess(batch, feats, scwork.Topology(1, 1), config=SparsecoreConfig(max_ids_per_chip_per_sample=None))


@pytest.mark.parametrize("stack_limits", [1, "t0", [("t0", 1)]])
def test_stack_limits_that_are_not_a_dict_are_config_errors(stack_limits):
    import scwork
    from scwork.errors import ConfigError
    from scwork.sharding import FeatureSpec, TableSpec, compute_stats

    batch = FeatureBatch({"a": ([1], [0, 1])})
    with pytest.raises(ConfigError, match="stack_limits must be a dict"):
        compute_stats(batch, [FeatureSpec("a", TableSpec("t0", 4, 1))], scwork.Topology(1, 1),
                      stack_limits=stack_limits)


def test_statistics_scratch_estimate_by_hand():
    """compute_stats' estimate: per stack 64 * slices * P + 8 bytes per id + 48 per id of its largest
    slice per worker (workers: threads, at most slices x stacks), exact integers."""
    import scwork
    from scwork.sharding import FeatureSpec as _F, TableSpec as _T
    from scwork.sharding import engine as _engine

    # 4 samples on 2 x 2 SCs: one sample per slice; f: 1, 2, 0, 3 ids; g: 2, 2, 2, 2 ids
    batch = FeatureBatch({"f": ([1, 2, 3, 4, 5, 6], [0, 1, 3, 3, 6]), "g": ([0] * 8, [0, 2, 4, 6, 8])})
    feats = [_F("f", _T("t", 100, 8)), _F("g", _T("u", 100, 8))]
    topo = scwork.Topology(2, 2)
    plan = _engine.plan_stacking(feats, topo, None, batch_size=4)
    for threads, workers in ((1, 1), (3, 3), (100, 8)):
        # stack t: 6 ids, largest slice 3; stack u: 8 ids, largest slice 2
        expected = (64 * 4 * 4 + 8 * 6 + 48 * 3 * workers) + (64 * 4 * 4 + 8 * 8 + 48 * 2 * workers)
        assert _engine.estimate_scratch_bytes(plan, batch, 2, 2, False, threads) == expected
    huge = scwork.Topology(10**6, 4)          # Python ints: no int64 overflow in the estimate
    big_plan = _engine.plan_stacking(feats, huge, None, batch_size=4 * 10**6)
    one = FeatureBatch({"f": ([1], [0] + [1] * (4 * 10**6)), "g": ([1], [0] + [1] * (4 * 10**6))})
    assert _engine.estimate_scratch_bytes(big_plan, one, 10**6, 4, False, 1) == \
        2 * 64 * (4 * 10**6) * (4 * 10**6) + 8 * 2 + 48 * 2


def test_preprocess_scratch_estimate_by_hand():
    """preprocess' estimate adds, per stack: row pointers (4 bytes x slices x max(P, 8)), stacked-row
    gains (4 bytes x slices x 2**lbits) and 12 bytes per CSR slot (a configured limit: slices x
    round_up(limit, 8) x P; else raw ids + 7 per partition and 8 per slice of padding)."""
    import scwork
    from scwork.sharding import FeatureSpec as _F, TableSpec as _T
    from scwork.sharding import engine as _engine

    # as in the statistics' test: 4 samples on 2 x 2 SCs (n = 1 sample per slice), P = 4
    batch = FeatureBatch({"f": ([1, 2, 3, 4, 5, 6], [0, 1, 3, 3, 6]), "g": ([0] * 8, [0, 2, 4, 6, 8])})
    feats = [_F("f", _T("t", 100, 8)), _F("g", _T("u", 100, 8, max_ids_per_partition=3))]
    topo = scwork.Topology(2, 2)
    plan = _engine.plan_stacking(feats, topo, None, batch_size=4)
    for threads, workers in ((1, 1), (100, 8)):
        # one feature per stack, one sample per slice: lbits = 0, 2**lbits = 1 stacked row per slice
        t = 64 * 4 * 4 + 8 * 6 + 48 * 3 * workers + 4 * 4 * 8 + 4 * 4 * 1 + 12 * (6 + 4 * 7 * 4 + 4 * 8)
        u = 64 * 4 * 4 + 8 * 8 + 48 * 2 * workers + 4 * 4 * 8 + 4 * 4 * 1 + 12 * (4 * 8 * 4)
        assert _engine.estimate_scratch_bytes(plan, batch, 2, 2, True, threads) == t + u
