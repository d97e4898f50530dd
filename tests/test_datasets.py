"""scwork.datasets: synthetic batches, Zipf sampling, hashing, CSV/TSV/Parquet loading."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork import datasets
from scwork.errors import ConfigError, InputError


def chi_square(observed: np.ndarray, expected_probabilities: np.ndarray) -> float:
    expected = expected_probabilities * observed.sum()
    return float(((observed - expected) ** 2 / expected).sum())


def loose_chi_square_bound(categories: int) -> float:
    # df + 8 standard deviations of a chi-square(df): a correct sampler essentially
    # never exceeds it, an off-by-one or a wrong exponent blows far past it.
    df = categories - 1
    return df + 8 * math.sqrt(2 * df)


# ======================================================================================
# Zipf sampling
# ======================================================================================

@pytest.mark.parametrize("exponent", [0.0, 0.3, 0.5, 0.99, 1.0, 1.05, 1.5, 2.0, 3.5])
def test_zipf_rank_frequencies_match_the_exact_law(exponent):
    vocab = 25
    ranks = datasets.sample_zipf(200_000, vocab, exponent, rng=1234)
    observed = np.bincount(ranks, minlength=vocab + 1)
    assert observed[0] == 0 and len(observed) == vocab + 1
    assert chi_square(observed[1:], datasets.zipf_pmf(vocab, exponent)) < loose_chi_square_bound(vocab)


def test_zipf_wrong_law_is_detected_by_the_same_bound():
    # Guard for the test above: ranks drawn with s = 1.0 must fail against s = 1.1.
    ranks = datasets.sample_zipf(200_000, 25, 1.0, rng=5)
    observed = np.bincount(ranks, minlength=26)[1:]
    assert chi_square(observed, datasets.zipf_pmf(25, 1.1)) > loose_chi_square_bound(25)


@pytest.mark.parametrize("exponent", [0.8, 1.05, 1.2])
def test_zipf_large_vocabulary_head_and_tail(exponent):
    vocab, n = 1_000_000, 1_000_000
    ranks = datasets.sample_zipf(n, vocab, exponent, rng=99)
    pmf = datasets.zipf_pmf(vocab, exponent)
    assert ranks.min() >= 1 and ranks.max() <= vocab
    for rank in range(1, 11):  # head: each of the 10 hottest within 5 binomial sigmas
        p = pmf[rank - 1]
        assert abs((ranks == rank).sum() - n * p) < 5 * math.sqrt(n * p * (1 - p))
    tail = pmf[1000:].sum()  # tail: mass beyond rank 1000
    assert abs((ranks > 1000).sum() - n * tail) < 5 * math.sqrt(n * tail * (1 - tail))


def test_zipf_edge_cases():
    assert datasets.sample_zipf(100, 1, 1.05, rng=0).tolist() == [1] * 100
    assert (datasets.sample_zipf(1000, 10**6, 60.0, rng=0) == 1).all()  # all mass on rank 1
    assert datasets.sample_zipf(0, 10, 1.0, rng=0).shape == (0,)
    # s = 1 + 1e-13 must behave like s = 1 (no cancellation in (x**(1-s) - 1)/(1-s)).
    near_one = datasets.sample_zipf(100_000, 25, 1.0 + 1e-13, rng=3)
    observed = np.bincount(near_one, minlength=26)[1:]
    assert chi_square(observed, datasets.zipf_pmf(25, 1.0)) < loose_chi_square_bound(25)
    huge = datasets.sample_zipf(10_000, 2**62, 1.1, rng=0)
    assert huge.dtype == np.int64 and huge.min() >= 1


@settings(max_examples=40)
@given(st.integers(1, 500), st.floats(0, 4), st.integers(0, 2**32))
def test_zipf_ranks_stay_in_range(vocab, exponent, seed):
    ranks = datasets.sample_zipf(500, vocab, exponent, rng=seed)
    assert ranks.dtype == np.int64 and ranks.min() >= 1 and ranks.max() <= vocab


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf"), "1", True])
def test_zipf_rejects_bad_exponents(bad):
    with pytest.raises(ConfigError, match="zipf_exponent"):
        datasets.sample_zipf(10, 10, bad)


def test_zipf_pmf_by_hand():
    weights = np.array([1, 1 / 4, 1 / 9, 1 / 16])
    np.testing.assert_allclose(datasets.zipf_pmf(4, 2.0), weights / weights.sum())
    np.testing.assert_allclose(datasets.zipf_pmf(4, 0.0), [0.25] * 4)


# ======================================================================================
# hashing
# ======================================================================================

def test_hash_is_a_bijection_for_every_small_vocabulary():
    for vocab in range(1, 300):
        for key in (0, 1, 12345):
            out = datasets.hash_ids(np.arange(vocab), vocab, key=key)
            assert np.array_equal(np.sort(out), np.arange(vocab)), (vocab, key)


@settings(max_examples=30)
@given(st.integers(300, 70_000), st.integers(0, 2**32))
def test_hash_is_a_bijection_property(vocab, key):
    out = datasets.hash_ids(np.arange(vocab), vocab, key=key)
    assert out.dtype == np.int64
    assert np.array_equal(np.sort(out), np.arange(vocab))


def test_hash_is_fixed_and_keyed():
    ids = np.arange(1000)
    a = datasets.hash_ids(ids, 10**6)
    assert np.array_equal(a, datasets.hash_ids(ids, 10**6))  # fixed
    assert not np.array_equal(a, datasets.hash_ids(ids, 10**6, key=1))  # another permutation
    assert datasets.hash_ids(ids.reshape(10, 100), 10**6).shape == (10, 100)


def test_hash_spreads_hot_ids_over_vocabulary_and_partitions():
    vocab, partitions = 1_000_000, 16
    hot = datasets.hash_ids(np.arange(100), vocab)
    deciles = np.bincount(hot * 10 // vocab, minlength=10)
    assert (deciles > 0).sum() >= 8  # unhashed, all 100 would sit in the first decile
    # The 16 hottest ids of a 2**20 vocabulary: unhashed they are 0..15 (one per
    # partition of a 16-way mod sharding only by accident of numbering; all in the
    # first row of every shard); hashed they spread over rows and partitions.
    hot16 = datasets.hash_ids(np.arange(16), 2**20)
    assert len(set((hot16 % partitions).tolist())) >= 6
    assert len(set((hot16 // partitions).tolist())) == 16


def test_hash_rejects_out_of_range_ids():
    with pytest.raises(InputError, match="position 1"):
        datasets.hash_ids([0, 10], 10)
    with pytest.raises(InputError, match="integers"):
        datasets.hash_ids([0.5], 10)
    with pytest.raises(ConfigError):
        datasets.hash_ids([0], 0)


# ======================================================================================
# synthetic
# ======================================================================================

def test_synthetic_structure():
    data = datasets.synthetic(64, num_steps=3, features=["a", "b"], vocab_size={"a": 50, "b": 7},
                              valency=5, weights="random", seed=3)
    assert len(data) == 3 and data.features == ("a", "b")
    batches = list(data.batches())
    assert len(batches) == 3
    for batch in batches:
        assert list(batch) == ["a", "b"]
        for name, vocab in (("a", 50), ("b", 7)):
            ids, row_splits, weights = batch[name]
            assert ids.dtype == np.int64 and row_splits.dtype == np.int64 and weights.dtype == np.float32
            assert row_splits.shape == (65,) and row_splits[0] == 0 and row_splits[-1] == len(ids)
            assert (np.diff(row_splits) >= 0).all()
            assert ids.min() >= 0 and ids.max() < vocab
            assert len(weights) == len(ids) and weights.min() > 0 and weights.max() <= 1
    uniform = datasets.synthetic(8, valency=3, weights="uniform").step(0)["f0"][2]
    assert (uniform == 1).all()
    assert len(datasets.synthetic(8, valency=3).step(0)["f0"]) == 2


@settings(max_examples=25)
@given(st.integers(1, 6), st.data(), st.integers(0, 1000))
def test_synthetic_step_does_not_depend_on_num_steps_or_other_features(num_steps, data, seed):
    index = data.draw(st.integers(0, num_steps - 1))
    kwargs = dict(vocab_size=1000, valency=4, seed=seed, weights="random")
    many = datasets.synthetic(16, num_steps=num_steps, features=["x", "y", "z"], **kwargs)
    one = datasets.synthetic(16, num_steps=1, features=["y"], **kwargs)
    from_iteration = list(many.batches())[index]["y"]
    for got in (many.step(index)["y"], from_iteration):
        expected = datasets.synthetic(16, num_steps=index + 1, features=["z", "y"], **kwargs).step(index)["y"]
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
    if index == 0:
        for a, b in zip(one.step(0)["y"], from_iteration):
            np.testing.assert_array_equal(a, b)


def test_synthetic_seeds_steps_and_features_differ():
    base = datasets.synthetic(256, num_steps=2, features=2, vocab_size=10**6, valency=10, seed=0)
    other_seed = datasets.synthetic(256, num_steps=2, features=2, vocab_size=10**6, valency=10, seed=1)
    s0, s1 = base.step(0), base.step(1)
    assert not np.array_equal(s0["f0"][0], s1["f0"][0])
    assert not np.array_equal(s0["f0"][0], s0["f1"][0][: len(s0["f0"][0])])
    assert not np.array_equal(s0["f0"][0], other_seed.step(0)["f0"][0])


def test_valency_kinds():
    fixed = datasets.synthetic(10, valency="fixed(3)").step(0)["f0"][1]
    assert fixed.tolist() == list(range(0, 31, 3))
    counts = np.diff(datasets.synthetic(5000, valency={"kind": "uniform", "low": 2, "high": 4}).step(0)["f0"][1])
    assert set(counts.tolist()) == {2, 3, 4}
    poisson = np.diff(datasets.synthetic(20_000, valency=20).step(0)["f0"][1])
    assert abs(poisson.mean() - 20) < 5 * math.sqrt(20 / 20_000)
    assert abs(poisson.var() - 20) < 1.5
    lognormal = np.diff(datasets.synthetic(50_000, valency="lognormal(30, 0.5)").step(0)["f0"][1])
    assert abs(lognormal.mean() - 30) < 0.5  # rounding shifts the mean by far less
    clipped = np.diff(datasets.synthetic(5000, valency={"kind": "poisson", "mean": 20, "min": 18, "max": 22})
                      .step(0)["f0"][1])
    assert clipped.min() == 18 and clipped.max() == 22
    assert datasets.synthetic(7, valency=0).step(0)["f0"][0].shape == (0,)


def test_valency_per_feature_and_expected_ids():
    data = datasets.synthetic(100, features=["a", "b"], valency={"a": 2, "b": "fixed(1)"})
    assert data.valencies["a"].kind == "poisson" and data.valencies["b"].kind == "fixed"
    assert data.expected_ids_per_step == pytest.approx(100 * (2 + 1))
    assert np.diff(data.step(0)["b"][1]).tolist() == [1] * 100


@pytest.mark.parametrize("valency", ["gauss(3)", "poisson(1, 2)", "uniform(5, 2)", {"kind": "fixed"},
                                     {"kind": "poisson", "mean": 3, "sd": 1}, -1, "fixed(1.5)",
                                     {"kind": "lognormal", "mean": 0, "sigma": 1}, [3],
                                     {"kind": "poisson", "mean": 3, "min": 5, "max": 2}])
def test_bad_valency(valency):
    with pytest.raises(ConfigError, match="valency"):
        datasets.synthetic(4, valency=valency)


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0), "batch_size"),
    (dict(num_steps=-1), "num_steps"),
    (dict(features=0), "features"),
    (dict(features=["a", "a"]), "distinct"),
    (dict(features="abc"), "features"),
    (dict(vocab_size=0), "vocab_size"),
    (dict(vocab_size={"f1": 5}), "missing"),
    (dict(weights="ones"), "weights"),
    (dict(hashed=1), "hashed"),
    (dict(seed=-1), "seed"),
    (dict(zipf_exponent=-1), "zipf_exponent"),
])
def test_bad_synthetic_arguments(kwargs, match):
    kwargs = {"batch_size": 4, **kwargs}
    with pytest.raises(ConfigError, match=match):
        datasets.synthetic(**kwargs)


def test_step_index_must_be_non_negative():
    with pytest.raises(ConfigError, match="step index"):
        datasets.synthetic(4).step(-1)
    # Any index >= 0 is defined, also beyond num_steps.
    assert datasets.synthetic(4, num_steps=1).step(5)["f0"][1].shape == (5,)


def test_unhashed_ids_are_zipf_ranks_and_hashed_ids_their_images():
    vocab, exponent = 1000, 1.2
    plain = datasets.synthetic(4000, vocab_size=vocab, zipf_exponent=exponent, hashed=False, seed=11)
    ids = plain.step(0)["f0"][0]
    n = len(ids)
    pmf = datasets.zipf_pmf(vocab, exponent)
    for rank in range(3):
        p = pmf[rank]
        assert abs((ids == rank).sum() - n * p) < 5 * math.sqrt(n * p)
    # Same seed, hashed: every id is the image of the unhashed one under the feature's permutation.
    hashed = datasets.synthetic(4000, vocab_size=vocab, zipf_exponent=exponent, hashed=True, seed=11)
    key = __import__("zlib").crc32(b"f0")
    np.testing.assert_array_equal(hashed.step(0)["f0"][0], datasets.hash_ids(ids, vocab, key=key))


def test_zipf_exponent_zero_gives_uniform_ids():
    ids = datasets.synthetic(20_000, vocab_size=20, zipf_exponent=0, valency="fixed(5)").step(0)["f0"][0]
    observed = np.bincount(ids, minlength=20)
    assert chi_square(observed, np.full(20, 1 / 20)) < loose_chi_square_bound(20)


def test_generation_speed_dlrm_like_batch(capsys):
    # 16384 samples x 26 features x Poisson(20) ids ~ 8.5 M ids. The budget is "a
    # couple of seconds"; the bound is loose because CI cores are shared.
    data = datasets.synthetic(16384, features=26, valency=20, seed=0)
    start = time.perf_counter()
    batch = data.step(0)
    elapsed = time.perf_counter() - start
    total = sum(len(v[0]) for v in batch.values())
    expected = 16384 * 26 * 20
    assert abs(total - expected) < 6 * math.sqrt(expected)
    with capsys.disabled():
        print(f"\nsynthetic: {total / 1e6:.1f} M ids in {elapsed:.2f} s")
    assert elapsed < 20


def test_import_datasets_stays_light():
    code = ("import json, sys; import scwork.datasets; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert not loaded & {"pyarrow", "pandas", "xarray", "numba"}


# ======================================================================================
# load_table
# ======================================================================================

def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_by_hand(tmp_path):
    path = write(tmp_path / "data.csv",
                 "user,genres,country\n"
                 "7,jazz|rock,FR\n"
                 "3,,NA\n"
                 "12, rock | pop ||,\n"
                 ",\"pop|jazz\",FR\n")
    t = datasets.load_table(path)
    assert t.num_samples == 4 and list(t.features) == ["user", "genres", "country"]
    ids, splits = t.features["user"]
    assert ids.tolist() == [7, 3, 12] and splits.tolist() == [0, 1, 2, 3, 3]
    assert t.vocabularies["user"] is None
    ids, splits = t.features["genres"]
    assert t.vocabularies["genres"].tolist() == ["jazz", "pop", "rock"]
    assert ids.tolist() == [0, 2, 2, 1, 1, 0] and splits.tolist() == [0, 2, 2, 4, 6]
    ids, splits = t.features["country"]
    # "NA" is a category, only empty cells are missing.
    assert t.vocabularies["country"].tolist() == ["FR", "NA"]
    assert ids.tolist() == [0, 1, 0] and splits.tolist() == [0, 1, 2, 2, 3]
    assert t.decode("genres", ids=[2, 0]).tolist() == ["rock", "jazz"]
    with pytest.raises(InputError, match="integer ids"):
        t.decode("user", [0])


def test_integer_text_forms(tmp_path):
    t = datasets.load_table(write(tmp_path / "i.csv", "a,b\n+5|007,1.5\n3.0,2\n"))
    assert t.features["a"][0].tolist() == [5, 7, 3] and t.vocabularies["a"] is None
    # 1.5 is not an integer: the column is categorical text.
    assert t.vocabularies["b"].tolist() == ["1.5", "2"]
    with pytest.raises(InputError, match="int64"):
        datasets.load_table(write(tmp_path / "big.csv", "a\n99999999999999999999\n"))


def test_tsv_and_explicit_separator(tmp_path):
    tsv = write(tmp_path / "a.tsv", "k\tv\n1|2\tx\n\ty\n")
    t = datasets.load_table(tsv, multi_value_sep="|")
    assert t.features["k"][0].tolist() == [1, 2] and t.features["k"][1].tolist() == [0, 2, 2]
    txt = write(tmp_path / "a.txt", "k;v\n5;x,y\n")
    t = datasets.load_table(txt, sep=";", multi_value_sep=",")
    assert t.features["k"][0].tolist() == [5]
    assert t.vocabularies["v"].tolist() == ["x", "y"]
    whole = datasets.load_table(tsv, multi_value_sep=None)
    assert whole.vocabularies["k"].tolist() == ["1|2"]


def test_vocabulary_does_not_depend_on_row_order(tmp_path):
    rows = ["b", "c|a", "a", "d", ""]
    first = datasets.load_table(write(tmp_path / "1.csv", "c\n" + "\n".join(rows) + "\n"))
    second = datasets.load_table(write(tmp_path / "2.csv", "c\n" + "\n".join(reversed(rows)) + "\n"))
    assert first.vocabularies["c"].tolist() == second.vocabularies["c"].tolist() == ["a", "b", "c", "d"]
    decoded = first.decode("c", first.features["c"][0]).tolist()
    assert decoded == ["b", "c", "a", "a", "d"]


def test_parquet_types(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({
        "ints": pa.array([[1, 2], None, [], [3, None]], type=pa.list_(pa.int64())),
        "words": pa.array([["b"], ["a", "b"], None, ["c"]], type=pa.large_list(pa.string())),
        "single": pa.array([5, None, 0, 9], type=pa.int32()),
        "text": pa.array(["x|y", None, "y", ""]),
        "dict": pa.array(["u", "v", "u", None]).dictionary_encode(),
        "flag": pa.array([True, False, None, True]),
        "float_ids": pa.array([1.0, float("nan"), 4.0, None]),
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    t = datasets.load_table(path)

    def ragged(name):
        ids, splits = t.features[name]
        return ids.tolist(), splits.tolist()

    assert ragged("ints") == ([1, 2, 3], [0, 2, 2, 2, 3])  # null list and null element skipped
    assert ragged("words") == ([1, 0, 1, 2], [0, 1, 3, 3, 4])
    assert t.vocabularies["words"].tolist() == ["a", "b", "c"]
    assert ragged("single") == ([5, 0, 9], [0, 1, 1, 2, 3])
    assert ragged("text") == ([0, 1, 1], [0, 2, 2, 3, 3])
    assert ragged("dict") == ([0, 1, 0], [0, 1, 2, 3, 3])
    assert ragged("flag") == ([1, 0, 1], [0, 1, 2, 2, 3])
    assert ragged("float_ids") == ([1, 4], [0, 1, 1, 2, 2])
    only = datasets.load_table(path, columns=["text"])
    assert list(only.features) == ["text"]


def test_pandas_written_csv_and_parquet(tmp_path):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"a": [1, None, 3], "b": ["x", "y", None]})
    frame.to_csv(tmp_path / "p.csv", index=False)
    frame.to_parquet(tmp_path / "p.parquet")
    for name in ("p.csv", "p.parquet"):
        t = datasets.load_table(tmp_path / name)
        # pandas stores the gappy int column as float (1.0, NaN, 3.0): still ids.
        assert t.features["a"][0].tolist() == [1, 3] and t.vocabularies["a"] is None
        assert t.features["a"][1].tolist() == [0, 1, 1, 2]
        assert t.features["b"][0].tolist() == [0, 1] and t.features["b"][1].tolist() == [0, 1, 2, 2]


def test_batches_keep_or_drop_the_remainder(tmp_path):
    path = write(tmp_path / "b.csv", "k\n" + "\n".join(["1|2", "3", "", "4", "5|6|7"]) + "\n")
    kept = datasets.load_table(path, batch_size=2)
    assert len(kept) == 3
    batches = [b["k"] for b in kept.batches()]
    assert [(i.tolist(), s.tolist()) for i, s in batches] == [
        ([1, 2, 3], [0, 2, 3]), ([4], [0, 0, 1]), ([5, 6, 7], [0, 3])]
    dropped = datasets.load_table(path, batch_size=2, drop_remainder=True)
    assert len(dropped) == 2 and len(list(dropped.batches())) == 2
    exact = datasets.load_table(path, batch_size=5, drop_remainder=True)
    assert len(exact) == 1
    whole = datasets.load_table(path)
    assert len(whole) == 1 and whole.batch(0)["k"][0].tolist() == [1, 2, 3, 4, 5, 6, 7]
    with pytest.raises(IndexError):
        kept.batch(3)


@settings(max_examples=25)
@given(st.lists(st.lists(st.sampled_from(["a", "b", "zz", "NA", "x y", "é"]), max_size=4), min_size=1, max_size=20),
       st.integers(1, 7))
def test_csv_round_trip_property(rows, batch_size):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.csv"
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["tokens", "row"])
            for i, tokens in enumerate(rows):
                writer.writerow(["|".join(tokens), i])
        t = datasets.load_table(path, batch_size=batch_size)
    assert t.num_samples == len(rows)
    ids, splits = t.features["tokens"]
    decoded = [t.decode("tokens", ids[splits[i]:splits[i + 1]]).tolist() if splits[i + 1] > splits[i] else []
               for i in range(len(rows))]
    assert decoded == [[tok.strip() for tok in r] for r in rows]
    assert t.features["row"][0].tolist() == list(range(len(rows)))
    # Batches are consecutive slices that add up to the whole table.
    glued = np.concatenate([b["tokens"][0] for b in t.batches()])
    np.testing.assert_array_equal(glued, ids)
    assert sum(len(b["row"][1]) - 1 for b in t.batches()) == len(rows)


def test_load_table_errors_name_file_and_column(tmp_path):
    good = write(tmp_path / "g.csv", "a,b\n1,2\n")
    with pytest.raises(InputError, match=r"g\.csv.*no column 'c'"):
        datasets.load_table(good, columns=["a", "c"])
    with pytest.raises(InputError, match="no such file"):
        datasets.load_table(tmp_path / "missing.csv")
    with pytest.raises(InputError, match=r"bad\.parquet.*cannot read"):
        datasets.load_table(write(tmp_path / "bad.parquet", "this is not parquet"))
    with pytest.raises(InputError, match=r"extension.*sep="):
        datasets.load_table(write(tmp_path / "data.json", "{}"))
    negative = write(tmp_path / "n.csv", "ids,other\n1,x\n-4|2,y\n")
    with pytest.raises(InputError, match=r"n\.csv.*column 'ids'.*-4.*sample 1"):
        datasets.load_table(negative)
    ragged = write(tmp_path / "r.csv", "a,b\n1,2\n3,4,5\n")
    with pytest.raises(InputError, match=r"r\.csv"):
        datasets.load_table(ragged)
    with pytest.raises(InputError, match=r"bad\.parquet.*cannot read"):
        datasets.load_table(tmp_path)  # a directory of shards names the bad shard
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no .parquet"):
        datasets.load_table(tmp_path / "empty")


def test_parquet_value_errors(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"f": [1.5, 2.0]}), tmp_path / "f.parquet")
    with pytest.raises(InputError, match=r"f\.parquet.*column 'f'.*1\.5.*sample 0"):
        datasets.load_table(tmp_path / "f.parquet")
    pq.write_table(pa.table({"l": pa.array([[1], [-2]])}), tmp_path / "l.parquet")
    with pytest.raises(InputError, match=r"column 'l'.*-2.*sample 1"):
        datasets.load_table(tmp_path / "l.parquet")


def test_load_table_rejects_bad_arguments(tmp_path):
    path = write(tmp_path / "g.csv", "a\n1\n")
    with pytest.raises(ConfigError, match="batch_size"):
        datasets.load_table(path, batch_size=0)
    with pytest.raises(ConfigError, match="multi_value_sep"):
        datasets.load_table(path, multi_value_sep="")
    with pytest.raises(ConfigError, match="distinct"):
        datasets.load_table(path, columns=["a", "a"])


# ======================================================================================
# write_synthetic_parquet
# ======================================================================================

@pytest.mark.parametrize("layout", ["flat", "lists", None])
def test_write_synthetic_parquet_round_trip(tmp_path, layout):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    kwargs = dict(features=["a", "b"], vocab_size={"a": 1000, "b": 50}, valency={"a": 3, "b": "uniform(0, 2)"},
                  seed=5)
    files = datasets.write_synthetic_parquet(tmp_path / "shards", 3, rows_per_shard=40,
                                             **kwargs, **({} if layout is None else {"layout": layout}))
    assert [f.name for f in files] == [f"part-0000{i}.parquet" for i in range(3)]
    schema = pq.read_schema(files[0])
    if layout == "lists":
        # the fastest list layout: neither lists nor ids nullable, int32 ids where the vocabulary fits
        assert not schema.field("a").nullable and not schema.field("a").type.value_field.nullable
        assert schema.field("a").type.value_type == pa.int32() and schema.field("b").type.value_type == pa.int32()
    else:
        # the default, flat CSR: one not-null int32 column, each feature's row splits then ids, in row groups
        # of its own, and the note that says so
        assert schema.names == ["csr"] and schema.field("csr").type == pa.int32()
        assert not schema.field("csr").nullable
        meta = pq.ParquetFile(files[0]).metadata
        note = json.loads(meta.metadata[b"scwork.flat_csr"])
        source0 = datasets.synthetic(40, num_steps=3, **kwargs).step(0)
        assert note == {"version": 1, "column": "csr", "num_rows": 40,
                        "features": [["a", len(source0["a"][0])], ["b", len(source0["b"][0])]]}
        assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == \
            [41 + len(source0["a"][0]), 41 + len(source0["b"][0])]
        column = pq.read_table(files[0]).column("csr").to_numpy()
        np.testing.assert_array_equal(column[:41], source0["a"][1])
        np.testing.assert_array_equal(column[41:41 + len(source0["a"][0])], source0["a"][0])
    source = datasets.synthetic(40, num_steps=3, **kwargs)
    for i, f in enumerate(files):
        shard = datasets.load_table(f)
        assert shard.vocabularies == {"a": None, "b": None}
        for name in ("a", "b"):
            for got, expected in zip(shard.features[name], source.step(i)[name]):
                np.testing.assert_array_equal(got, expected)
    everything = datasets.load_table(tmp_path / "shards", batch_size=40)
    assert everything.num_samples == 120 and len(everything) == 3
    for i, batch in enumerate(everything.batches()):
        for got, expected in zip(batch["b"], source.step(i)["b"]):
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("encoding, page_encoding", [("delta", "DELTA_BINARY_PACKED"),
                                                     ("dictionary", "RLE_DICTIONARY"), ("plain", "PLAIN")])
@pytest.mark.parametrize("layout", ["flat", "lists"])
def test_write_synthetic_parquet_encodings_round_trip(tmp_path, encoding, page_encoding, layout):
    pq = pytest.importorskip("pyarrow.parquet")
    kwargs = dict(features=["a"], vocab_size=5000, valency=4, seed=2)
    files = datasets.write_synthetic_parquet(tmp_path, 2, rows_per_shard=30, encoding=encoding, layout=layout,
                                             **kwargs)
    chunk = pq.ParquetFile(files[0]).metadata.row_group(0).column(0)
    assert page_encoding in chunk.encodings
    if encoding != "dictionary":
        assert not chunk.has_dictionary_page
    source = datasets.synthetic(30, num_steps=2, **kwargs)
    for i, f in enumerate(files):
        for got, expected in zip(datasets.load_table(f).features["a"], source.step(i)["a"]):
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("id_type, vocab_size, stored", [("auto", 2**31, "int32"), ("auto", 2**31 + 1, "int64"),
                                                          ("int64", 1000, "int64"), ("int32", 1000, "int32")])
@pytest.mark.parametrize("layout", ["flat", "lists"])
def test_write_synthetic_parquet_id_types(tmp_path, id_type, vocab_size, stored, layout):
    pq = pytest.importorskip("pyarrow.parquet")
    kwargs = dict(features=["a"], vocab_size=vocab_size, valency=3, seed=7)
    files = datasets.write_synthetic_parquet(tmp_path, 2, rows_per_shard=20, id_type=id_type, layout=layout,
                                             **kwargs)
    schema = pq.read_schema(files[0])
    assert str(schema.field("csr").type if layout == "flat" else schema.field("a").type.value_type) == stored
    source = datasets.synthetic(20, num_steps=2, **kwargs)
    for i, f in enumerate(files):
        for got, expected in zip(datasets.load_table(f).features["a"], source.step(i)["a"]):
            np.testing.assert_array_equal(got, expected)


def test_write_synthetic_parquet_rejects_bad_id_types(tmp_path):
    pytest.importorskip("pyarrow")
    with pytest.raises(ConfigError, match="id_type must be one of"):
        datasets.write_synthetic_parquet(tmp_path, 1, rows_per_shard=4, features=["f"], id_type="int16")
    with pytest.raises(ConfigError, match="cannot hold the ids of"):
        datasets.write_synthetic_parquet(tmp_path, 1, rows_per_shard=4, features=["f"], vocab_size=2**31 + 1,
                                         id_type="int32")
    assert not list(tmp_path.iterdir())


def test_write_synthetic_parquet_rejects_unknown_encoding(tmp_path):
    pytest.importorskip("pyarrow")
    with pytest.raises(ConfigError, match="encoding must be one of"):
        datasets.write_synthetic_parquet(tmp_path, 1, rows_per_shard=4, features=["f"], encoding="bitpacked")
    with pytest.raises(ConfigError, match="layout must be one of"):
        datasets.write_synthetic_parquet(tmp_path, 1, rows_per_shard=4, features=["f"], layout="csr")
    assert not any(tmp_path.iterdir())


def test_batches_feed_feature_batch(tmp_path):
    # The structure is the input of scwork.sharding.FeatureBatch.from_ragged.
    from scwork.sharding import FeatureBatch

    data = datasets.synthetic(8, features=3, valency=3, weights="random", seed=1)
    step = data.step(0)
    batch = FeatureBatch.from_ragged(step)
    assert batch.batch_size == 8 and batch.feature_names == ("f0", "f1", "f2")
    assert batch.num_ids == sum(len(v[0]) for v in step.values())
    np.testing.assert_array_equal(batch.weights("f1"), step["f1"][2])
    table = datasets.load_table(write(tmp_path / "t.csv", "a,b\n1|2,x\n,y\n3,\n"), batch_size=2)
    assert [FeatureBatch.from_ragged(b).batch_size for b in table.batches()] == [2, 1]


# -- issue 12: every bad file is an InputError naming it; writes are all or nothing -------
def test_float_ids_are_range_checked_before_the_cast(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scwork.errors import InputError

    pq.write_table(pa.table({"a": [1.0, 1e300]}), tmp_path / "f.parquet")
    with pytest.raises(InputError, match=r"1e\+300\) in sample 1 is outside the int64 range"):
        datasets.load_table(tmp_path / "f.parquet")


@pytest.mark.parametrize("name, content, match", [
    ("t.parquet", None, "cannot read the file as Parquet"),
    ("g.csv.gz", b"\x1f\x8b\x08garbage", "cannot read the file as delimited text"),
    ("x.csv", b"a\n\xff\xfe\n", "invalid UTF8"),
    ("h.csv", b"a\n" + b"9" * 5000 + b"\n", r"id 9{20}\.\.\. \(5000 digits\) in sample 0 .*does not fit in int64"),
])
def test_broken_files_are_input_errors(tmp_path, name, content, match):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scwork.errors import InputError

    if content is None:                       # a truncated Parquet file
        pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "whole.parquet")
        content = (tmp_path / "whole.parquet").read_bytes()[:-30]
    (tmp_path / name).write_bytes(content)
    with pytest.raises(InputError, match=match) as info:
        datasets.load_table(tmp_path / name)
    assert name in str(info.value)


@pytest.mark.parametrize("layout", ["flat", "lists"])
def test_write_synthetic_parquet_is_all_or_nothing(tmp_path, monkeypatch, layout):
    import pyarrow.parquet as pq

    from scwork.datasets import files as files_module
    from scwork.errors import ConfigError

    with pytest.raises(ConfigError, match="compression must be"):
        datasets.write_synthetic_parquet(tmp_path / "a", 2, rows_per_shard=4, features=["f"], compression="lzma",
                                         layout=layout)
    assert not (tmp_path / "a").exists()
    owner, attribute = (files_module, "write_flat_shard") if layout == "flat" else (pq, "write_table")
    real = getattr(owner, attribute)
    calls = []

    def failing_second(table, where, *args, **kwargs):
        calls.append(where)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(table, where, *args, **kwargs)

    monkeypatch.setattr(owner, attribute, failing_second)
    with pytest.raises(ConfigError, match="disk full.*nothing was written"):
        datasets.write_synthetic_parquet(tmp_path / "b", 3, rows_per_shard=4, features=["f"], layout=layout)
    assert list((tmp_path / "b").iterdir()) == []
    monkeypatch.setattr(owner, attribute, real)
    files = datasets.write_synthetic_parquet(tmp_path / "b", 3, rows_per_shard=4, features=["f"], layout=layout)
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [p.name for p in files]


@pytest.mark.parametrize("name", ["dup.csv", "dup.parquet"])
def test_duplicate_column_names_are_input_errors(tmp_path, name):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / name
    if name.endswith(".csv"):
        path.write_text("b,b\n1,2\n")
    else:
        pq.write_table(pa.table([pa.array([1]), pa.array([2])], names=["b", "b"]), path)
    with pytest.raises(InputError, match=r"dup\.\w+: the header names the columns \['b'\] more than once"):
        datasets.load_table(path)


@pytest.mark.skipif(os.name != "posix", reason="file names as bytes are a POSIX notion")
@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".parquet"])
def test_load_table_reads_a_file_whose_name_is_not_utf8(tmp_path, suffix):
    # pyarrow encodes path strings as UTF-8, which a surrogate-escaped name cannot be.
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    name = os.path.join(os.fsencode(tmp_path), b"ids\xff" + suffix.encode())
    if suffix == ".parquet":
        pq.write_table(pa.table({"a": [3, 4]}), os.path.join(tmp_path, "plain.parquet"))
        os.rename(os.path.join(os.fsencode(tmp_path), b"plain.parquet"), name)
    else:
        text = b"a\n3\n4\n"
        with open(name, "wb") as f:
            f.write(gzip.compress(text) if suffix.endswith(".gz") else text)
    table = datasets.load_table(os.fsdecode(name))
    assert table.features["a"][0].tolist() == [3, 4]


# -- regressions of issue 22 ----------------------------------------------------------------------------
def test_load_table_odd_arguments_are_config_errors(tmp_path):
    from scwork.datasets import load_table
    from scwork.errors import ConfigError

    path = tmp_path / "a.csv"
    path.write_text("x,y\n1,2\n")
    for kwargs in ({"columns": 5}, {"columns": [5]}, {"columns": b"x"}, {"columns": {"x": 1}},
                   {"drop_remainder": "yes"}, {"sep": 5}, {"sep": ""}):
        with pytest.raises(ConfigError):
            load_table(path, **kwargs)
    with pytest.raises(ConfigError, match="path must be"):
        load_table(5)
    assert load_table(path, columns=["y"]).features["y"][0].tolist() == [2]


def test_load_table_reads_a_csv_whose_name_is_not_utf8(tmp_path):
    import os

    from scwork.datasets import load_table

    name = os.path.join(os.fsencode(tmp_path), b"\xff\xfe.csv")
    with open(name, "wb") as handle:
        handle.write(b"x,y\n1,2\n3,4\n")
    for path in (name, os.fsdecode(name)):
        table = load_table(path)
        assert table.features["x"][0].tolist() == [1, 3] and table.num_samples == 2
        assert table.path == os.fsdecode(name)


def test_public_dataset_helpers_bound_their_work_and_type_their_errors(tmp_path):
    """Found by the public-API argument surface (issue 22)."""
    from scwork.datasets import hash_ids, sample_zipf, write_synthetic_parquet
    from scwork.datasets.files import MAX_SYNTHETIC_ROWS
    from scwork.datasets.zipf import MAX_SAMPLE_SIZE
    from scwork.errors import ConfigError, InputError

    for key in ("x", 1.5, None):
        with pytest.raises(InputError, match="key"):
            hash_ids([1, 2], 10, key=key)
    with pytest.raises(InputError, match="ids"):
        hash_ids([[1, 2], [3]], 10)
    with pytest.raises(ConfigError, match="MAX_SAMPLE_SIZE"):
        sample_zipf(MAX_SAMPLE_SIZE + 1, 100, 1.0)
    with pytest.raises(ConfigError, match="MAX_SAMPLE_SIZE"):
        write_synthetic_parquet(tmp_path / "v", 1, rows_per_shard=8, valency=2**31 - 1)
    with pytest.raises(ConfigError, match="MAX_SYNTHETIC_ROWS"):
        write_synthetic_parquet(tmp_path / "r", 2, rows_per_shard=MAX_SYNTHETIC_ROWS)
    assert not (tmp_path / "v").exists() and not (tmp_path / "r").exists()


def test_load_table_with_a_name_too_long_for_the_file_system():
    from scwork.datasets import load_table
    from scwork.errors import InputError

    with pytest.raises(InputError, match="cannot look at the path"):
        load_table("9" * 5000)


def test_load_table_with_no_columns_is_refused(tmp_path):
    from scwork.datasets import load_table
    from scwork.errors import ConfigError

    path = tmp_path / "a.csv"
    path.write_text("x\n1\n")
    with pytest.raises(ConfigError, match="columns is empty"):
        load_table(path, columns=[])


@pytest.mark.parametrize("valency", [1e19, 2**70, {"kind": "lognormal", "mean": 1e25, "sigma": 0.5}, {"kind": "fixed", "value": 2**40},
                                     {"kind": "uniform", "low": 0, "high": 2**31}])
def test_valency_parameters_beyond_max_ids_per_sample_are_config_errors(valency, tmp_path):
    # A Poisson mean of 1e19 reached numpy's sampler, which raised a bare ValueError
    # ("lam value too large"; found by tests/fuzz/test_fuzz_public_api.py).
    from scwork.datasets.synthetic import MAX_IDS_PER_SAMPLE, ValencySpec

    with pytest.raises(ConfigError, match="MAX_IDS_PER_SAMPLE"):
        ValencySpec.parse(valency)
    with pytest.raises(ConfigError, match="MAX_IDS_PER_SAMPLE"):
        datasets.write_synthetic_parquet(tmp_path / "out", num_shards=1, rows_per_shard=1,
                                                vocab_size=10, valency=valency)
    assert not (tmp_path / "out").exists()
    assert ValencySpec.parse(MAX_IDS_PER_SAMPLE).mean == MAX_IDS_PER_SAMPLE


def test_zipf_pmf_beyond_max_pmf_size_is_refused_before_allocating():
    # zipf_pmf(134217726, ...) allocated 3 GiB and hit the fuzz watchdog's memory limit (MemoryError).
    from scwork.datasets.zipf import MAX_PMF_SIZE

    with pytest.raises(ConfigError, match="MAX_PMF_SIZE"):
        datasets.zipf_pmf(MAX_PMF_SIZE + 1, 1.05)
    pmf = datasets.zipf_pmf(4, 1.0)
    assert pmf.tolist() == pytest.approx([12 / 25, 6 / 25, 4 / 25, 3 / 25])
