"""HugeCTR SOK all-to-all embedding dispatch ([sok])."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.errors import ConfigError, InputError, OutOfVocabularyError
from scwork.sharding import sok


# --- strategies -----------------------------------------------------------------------

@st.composite
def sok_cases(draw, max_gpus=6, max_vocab=60, max_keys=25):
    """(keys_per_gpu, table, num_gpus) with keys in range, duplicates and empty GPUs likely."""
    num_gpus = draw(st.integers(1, max_gpus))
    vocab = draw(st.integers(1, max_vocab))
    dim = draw(st.integers(1, 4))
    # A small key pool makes duplicates (within and across GPUs) frequent.
    pool_size = draw(st.integers(1, vocab))
    keys = [
        np.array(draw(st.lists(st.integers(0, pool_size - 1), max_size=max_keys)), dtype=np.int64)
        for _ in range(num_gpus)
    ]
    seed = draw(st.integers(0, 2**32 - 1))
    table = np.random.default_rng(seed).standard_normal((vocab, dim))
    return keys, table, num_gpus


# --- the article's worked examples ---------------------------------------------------

def test_seed_input_dispatcher_splits_gpu0_input_by_key_mod_2():
    plan = sok.dispatch([np.array([0, 1, 2, 3]), np.array([], dtype=np.int64)], num_gpus=2)
    grouped = plan.keys[0][plan.order[0]]
    offsets = plan.send_offsets[0]
    assert grouped[offsets[0]:offsets[1]].tolist() == [0, 2]
    assert grouped[offsets[1]:offsets[2]].tolist() == [1, 3]
    assert plan.count_matrix.tolist() == [[2, 2], [0, 0]]
    # Step 4: divide by the GPU count to get rows of the local shard.
    assert [r.tolist() for r in plan.local_rows] == [[0, 1], [0, 1]]


def test_seed_forward_gpu0_gets_vectors_stored_on_gpu1():
    table = np.repeat(np.arange(8.0)[:, None] / 10, 3, axis=1)  # row k = [0.k, 0.k, 0.k]
    keys = [np.array([0, 1, 3, 5]), np.array([4, 5, 6, 7])]
    vectors = sok.forward(keys, table, num_gpus=2)
    np.testing.assert_array_equal(vectors[0][:, 0], [0.0, 0.1, 0.3, 0.5])
    assert vectors[0].shape == (4, 3)
    # 1, 3 and 5 live on GPU 1: the shards confirm it.
    shards = sok.shard_table(table, 2)
    assert 0.1 not in shards[0][:, 0] and 0.5 in shards[1][:, 0]


def test_seed_backward_keeps_duplicates_on_the_owner():
    keys = [np.array([0, 1, 3, 5]), np.array([4, 5, 6, 7])]
    plan = sok.dispatch(keys, num_gpus=2)
    # grad of key k on GPU g is [k, 100 + g] so we can tell the copies apart.
    grads = [np.stack([k, np.full(len(k), 100 + g)], axis=1).astype(np.float64)
             for g, k in enumerate(keys)]
    owner = sok.backward(plan, grads)
    assert owner[0].keys.tolist() == [0, 4, 6]
    assert owner[1].keys.tolist() == [1, 3, 5, 5, 7]
    assert owner[0].gradients.tolist() == [[0, 100], [4, 101], [6, 101]]
    # The two 5s are GPU 0's (arrives first: source order) and GPU 1's, not summed.
    assert owner[1].gradients.tolist() == [[1, 100], [3, 100], [5, 100], [5, 101], [7, 101]]
    reduced_keys, reduced = sok.reduce_gradients(*owner[1])
    assert reduced_keys.tolist() == [1, 3, 5, 7]
    assert reduced.tolist() == [[1, 100], [3, 100], [10, 201], [7, 101]]


def test_seed_backward_is_the_same_for_any_interleaving_of_gpu1_input():
    for gpu1 in ([4, 5, 6, 7], [5, 4, 7, 6], [4, 6, 5, 7], [5, 7, 4, 6]):
        plan = sok.dispatch([np.array([0, 1, 3, 5]), np.array(gpu1)], num_gpus=2)
        assert [k.tolist() for k in plan.received_keys] == [[0, 4, 6], [1, 3, 5, 5, 7]]
    # ... but swapping 4 and 6 changes GPU 0's order: the order is preserved, not sorted.
    plan = sok.dispatch([np.array([0, 1, 3, 5]), np.array([6, 5, 4, 7])], num_gpus=2)
    assert plan.received_keys[0].tolist() == [0, 6, 4]


# --- properties ----------------------------------------------------------------------

@given(sok_cases())
def test_forward_equals_gathering_the_full_table(case):
    keys, table, num_gpus = case
    vectors = sok.forward(keys, table, num_gpus)
    assert len(vectors) == num_gpus
    for g in range(num_gpus):
        assert vectors[g].shape == (len(keys[g]), table.shape[1])
        np.testing.assert_array_equal(vectors[g], table[keys[g]])


@given(sok_cases())
def test_dispatch_routes_every_key_to_its_owner_grouped_by_source(case):
    keys, _, num_gpus = case
    plan = sok.dispatch(keys, num_gpus)
    # Count matrix, computed the slow way.
    for s in range(num_gpus):
        for d in range(num_gpus):
            assert plan.count_matrix[s, d] == sum(1 for k in keys[s] if k % num_gpus == d)
    seen = set()
    for d in range(num_gpus):
        received = plan.received_keys[d]
        assert (received % num_gpus == d).all()
        np.testing.assert_array_equal(plan.local_rows[d], received // num_gpus)
        expected = Counter(int(k) for s in range(num_gpus) for k in keys[s] if k % num_gpus == d)
        assert Counter(received.tolist()) == expected
        origins = [plan.origin(d, i) for i in range(len(received))]
        # Delivered grouped by source GPU, each chunk in the source's input order.
        assert origins == sorted(origins)
        for i, (s, p) in enumerate(origins):
            assert keys[s][p] == received[i]
        seen.update(origins)
    # Every input key was delivered exactly once.
    assert seen == {(s, p) for s in range(num_gpus) for p in range(len(keys[s]))}


@given(sok_cases())
def test_combine_inverts_the_dispatch_permutation(case):
    keys, _, num_gpus = case
    plan = sok.dispatch(keys, num_gpus)
    # Send each received key's (source, position) back: it must land at that position.
    tags = []
    for d in range(num_gpus):
        tags.append(np.array([plan.origin(d, i) for i in range(len(plan.received_keys[d]))],
                             dtype=np.int64).reshape(-1, 2))
    returned = sok.combine(plan, tags)
    for g in range(num_gpus):
        assert returned[g].tolist() == [[g, p] for p in range(len(keys[g]))]


@given(sok_cases())
def test_backward_delivers_every_gradient_to_the_owner_and_sums_correctly(case):
    keys, table, num_gpus = case
    vocab, dim = table.shape
    rng = np.random.default_rng(len(keys[0]))
    grads = [rng.standard_normal((len(k), dim)) for k in keys]
    plan = sok.dispatch(keys, num_gpus)
    owner = sok.backward(plan, grads)
    dense_expected = np.zeros_like(table)
    for k, g in zip(keys, grads):
        np.add.at(dense_expected, k, g)
    dense_from_owners = np.zeros_like(table)
    total = 0
    for d, (owned_keys, owned_grads) in enumerate(owner):
        np.testing.assert_array_equal(owned_keys, plan.received_keys[d])
        assert (owned_keys % num_gpus == d).all()
        total += len(owned_keys)
        unique_keys, summed = sok.reduce_gradients(owned_keys, owned_grads)
        assert len(unique_keys) == len(set(owned_keys.tolist()))
        dense_from_owners[unique_keys] += summed
    assert total == sum(len(k) for k in keys)  # duplicates kept, nothing dropped
    np.testing.assert_allclose(dense_from_owners, dense_expected, rtol=1e-12, atol=1e-12)


@given(sok_cases())
def test_lookup_then_combine_is_forward_and_lookup_uses_local_rows(case):
    keys, table, num_gpus = case
    plan = sok.dispatch(keys, num_gpus)
    shards = sok.shard_table(table, num_gpus)
    received_vectors = sok.lookup(plan, shards)
    for d in range(num_gpus):
        np.testing.assert_array_equal(received_vectors[d], table[plan.received_keys[d]])
    combined = sok.combine(plan, received_vectors)
    for g in range(num_gpus):
        np.testing.assert_array_equal(combined[g], table[keys[g]])


@settings(max_examples=40)
@given(st.lists(st.integers(0, 30), max_size=40), st.integers(1, 3))
def test_reduce_gradients_matches_a_dictionary_sum(keys, dim):
    grads = np.arange(len(keys) * dim, dtype=np.float64).reshape(len(keys), dim)
    expected = defaultdict(lambda: np.zeros(dim))
    for k, g in zip(keys, grads):
        expected[k] = expected[k] + g
    unique_keys, summed = sok.reduce_gradients(np.array(keys, dtype=np.int64), grads)
    assert unique_keys.tolist() == sorted(expected)
    for k, row in zip(unique_keys, summed):
        np.testing.assert_array_equal(row, expected[int(k)])


def test_reduce_gradients_keeps_dtype_and_handles_empty():
    k, g = sok.reduce_gradients(np.array([2, 2]), np.ones((2, 3), dtype=np.float32))
    assert k.tolist() == [2] and g.dtype == np.float32 and g.tolist() == [[2, 2, 2]]
    k, g = sok.reduce_gradients(np.zeros(0, dtype=np.int64), np.zeros((0, 3), dtype=np.float32))
    assert k.shape == (0,) and g.shape == (0, 3)
    with pytest.raises(InputError, match="shape"):
        sok.reduce_gradients([1, 2], np.ones((3, 2)))


# --- edge cases -------------------------------------------------------------------

def test_one_gpu_is_a_plain_gather():
    table = np.arange(12.0).reshape(6, 2)
    keys = [np.array([5, 0, 5, 2])]
    plan = sok.dispatch(keys, 1)
    assert plan.count_matrix.tolist() == [[4]]
    assert plan.received_keys[0].tolist() == [5, 0, 5, 2]
    np.testing.assert_array_equal(sok.forward(keys, table, 1)[0], table[keys[0]])


def test_all_gpus_empty():
    table = np.ones((4, 3))
    keys = [np.array([], dtype=np.int64)] * 3
    vectors, plan = sok.forward(keys, table, 3, return_plan=True)
    assert [v.shape for v in vectors] == [(0, 3)] * 3
    assert plan.count_matrix.sum() == 0
    owner = sok.backward(plan, [np.zeros((0, 3))] * 3)
    assert [o.gradients.shape for o in owner] == [(0, 3)] * 3
    traffic = plan.traffic(8)
    assert traffic["sent_bytes"].sum() == 0
    assert (traffic["sent_imbalance"] == 1.0).all()


def test_more_gpus_than_rows_leaves_empty_shards():
    table = np.arange(3.0)[:, None]
    shards = sok.shard_table(table, 5)
    assert [len(s) for s in shards] == [1, 1, 1, 0, 0]
    keys = [np.array([2, 0])] + [np.array([1])] * 4
    vectors = sok.forward(keys, table, 5)
    assert vectors[0][:, 0].tolist() == [2.0, 0.0]


def test_plain_lists_and_unsigned_keys_are_accepted():
    table = np.arange(8.0)[:, None]
    vectors = sok.forward([[7, 1], np.array([3], dtype=np.uint16)], table, 2)
    assert vectors[0][:, 0].tolist() == [7.0, 1.0] and vectors[1][:, 0].tolist() == [3.0]


def test_plan_arrays_are_read_only():
    plan = sok.dispatch([np.array([1, 2])], 1)
    with pytest.raises(ValueError):
        plan.received_keys[0][0] = 5
    with pytest.raises(ValueError):
        plan.count_matrix[0, 0] = 5


def test_dispatch_copies_its_input():
    keys = np.array([1, 2, 3])
    plan = sok.dispatch([keys], 1)
    keys[0] = 99
    assert plan.keys[0].tolist() == [1, 2, 3]


# --- errors -------------------------------------------------------------------------

def test_out_of_vocabulary_names_gpu_position_and_key():
    table = np.zeros((10, 2))
    keys = [np.array([1, 2]), np.array([3, 4, 12, 11, 9])]
    with pytest.raises(OutOfVocabularyError) as info:
        sok.forward(keys, table, 2)
    err = info.value
    assert (err.gpu, err.sample, err.id, err.vocab_size, err.count) == (1, 2, 12, 10, 2)
    message = str(err)
    assert "GPU 1" in message and "position 2" in message and "key 12" in message


@given(sok_cases(), st.data())
def test_out_of_vocabulary_reports_the_first_bad_key(case, data):
    keys, table, num_gpus = case
    vocab = table.shape[0]
    gpu = data.draw(st.integers(0, num_gpus - 1))
    position = data.draw(st.integers(0, len(keys[gpu])))
    bad_key = data.draw(st.integers(vocab, vocab + 50))
    keys[gpu] = np.insert(keys[gpu], position, bad_key)
    with pytest.raises(OutOfVocabularyError) as info:
        sok.forward(keys, table, num_gpus)
    assert (info.value.gpu, info.value.sample, info.value.id, info.value.count) == (gpu, position, bad_key, 1)
    # The shard-level check in lookup finds the same key when no vocab_size is given.
    with pytest.raises(OutOfVocabularyError) as info:
        sok.lookup(sok.dispatch(keys, num_gpus), sok.shard_table(table, num_gpus))
    assert (info.value.gpu, info.value.sample, info.value.id, info.value.count) == (gpu, position, bad_key, 1)


def test_out_of_vocabulary_caught_by_lookup_without_vocab_size():
    # Shards of a 10-row table over 3 GPUs hold 4, 3 and 3 rows; key 10 -> GPU 1 row 3.
    shards = sok.shard_table(np.zeros((10, 2)), 3)
    plan = sok.dispatch([np.array([0]), np.array([5, 9]), np.array([2, 2, 10])], 3)
    with pytest.raises(OutOfVocabularyError) as info:
        sok.lookup(plan, shards)
    err = info.value
    assert (err.gpu, err.sample, err.id) == (2, 2, 10)
    assert "GPU 2's input" in str(err) and "local row 3" in str(err)
    # Key 9 (GPU 0 row 3) is the largest key that fits.
    sok.lookup(sok.dispatch([np.array([9])] * 3, 3), shards)


@pytest.mark.parametrize("num_gpus", [0, -1, 1.5, True, "2"])
def test_bad_num_gpus(num_gpus):
    with pytest.raises(ConfigError, match="num_gpus"):
        sok.dispatch([np.array([1])], num_gpus)


@pytest.mark.parametrize(
    "keys, match",
    [
        ([np.array([1])], "2 entries|1 entries"),
        ([np.array([1]), np.array([-3])], "GPU 1.*negative"),
        ([np.array([1.0]), np.array([1])], "GPU 0.*integers"),
        ([np.array([[1]]), np.array([1])], "GPU 0.*1-D"),
        (np.array([1, 2]), "one key array per GPU|sequence"),
    ],
)
def test_bad_keys(keys, match):
    with pytest.raises(InputError, match=match):
        sok.dispatch(keys, 2)


def test_bad_vectors_shards_and_grads():
    plan = sok.dispatch([np.array([0, 1]), np.array([1])], 2)
    with pytest.raises(InputError, match="rows"):
        sok.combine(plan, [np.zeros((1, 2)), np.zeros((1, 2))])  # GPU 1 received 2 keys
    with pytest.raises(InputError, match="same width"):
        sok.lookup(plan, [np.zeros((2, 2)), np.zeros((2, 3))])
    with pytest.raises(InputError, match="2-D"):
        sok.lookup(plan, [np.zeros(2), np.zeros(2)])
    with pytest.raises(InputError, match="entries"):
        sok.backward(plan, [np.zeros((2, 2))])
    with pytest.raises(InputError, match="DispatchPlan"):
        sok.combine("plan", [])
    with pytest.raises(ConfigError, match="vocab_size"):
        sok.dispatch([np.array([0])], 1, vocab_size=0)


# --- traffic ------------------------------------------------------------------------

def test_traffic_of_the_seed_example_by_hand():
    plan = sok.dispatch([np.array([0, 1, 3, 5]), np.array([4, 5, 6, 7])], 2)
    t = plan.traffic(embedding_dim=4, dtype="bf16", key_itemsize=8)
    # keys: GPU0 sends 1 to itself and 3 to GPU1; GPU1 sends 2 to GPU0, 2 to itself.
    assert t["keys"].values.tolist() == [[1, 3], [2, 2]]
    assert t["key_bytes"].values.tolist() == [[8, 24], [16, 16]]
    # vectors go owner -> requester: 8 B per bf16 vector of width 4.
    assert t["vector_bytes"].values.tolist() == [[8, 16], [24, 16]]
    assert t["gradient_bytes"].values.tolist() == [[8, 24], [16, 16]]
    assert t["sent_bytes"].sel(phase="keys").values.tolist() == [24, 16]
    assert t["received_bytes"].sel(phase="keys").values.tolist() == [16, 24]
    assert t["local_bytes"].sel(phase="vectors").values.tolist() == [8, 16]
    assert float(t["sent_imbalance"].sel(phase="keys")) == pytest.approx(24 / 20)
    assert float(t["received_imbalance"].sel(phase="vectors")) == pytest.approx(24 / 20)
    assert t.attrs["itemsize"] == 2 and t.attrs["dtype"] == "bf16"
    assert t["vector_bytes"].attrs["units"] == "bytes"
    assert t["keys"].dims == ("source", "destination")
    counts = plan.send_counts
    assert counts.dims == ("source", "destination") and counts.values.tolist() == [[1, 3], [2, 2]]


@given(sok_cases(max_gpus=5), st.integers(1, 64), st.sampled_from(["f32", "bf16", "float64", "int8"]))
def test_traffic_conservation(case, dim, dtype):
    keys, _, num_gpus = case
    plan = sok.dispatch(keys, num_gpus)
    t = plan.traffic(dim, dtype)
    itemsize = {"f32": 4, "bf16": 2, "float64": 8, "int8": 1}[dtype]
    assert int(t["keys"].sum()) == sum(len(k) for k in keys)
    np.testing.assert_array_equal(t["vector_bytes"].values, t["gradient_bytes"].values.T)
    np.testing.assert_array_equal(t["gradient_bytes"].values, plan.count_matrix * dim * itemsize)
    for phase in ("keys", "vectors", "gradients"):
        sent = t["sent_bytes"].sel(phase=phase)
        assert int(sent.sum()) == int(t["received_bytes"].sel(phase=phase).sum())
        assert float(t["sent_imbalance"].sel(phase=phase)) >= 1.0
    if num_gpus == 1:
        assert int(t["sent_bytes"].sum()) == 0


def test_traffic_rejects_bad_arguments():
    plan = sok.dispatch([np.array([1])], 1)
    with pytest.raises(ConfigError, match="embedding_dim"):
        plan.traffic(0)
    with pytest.raises(ConfigError, match="dtype"):
        plan.traffic(4, "not-a-dtype")
    with pytest.raises(ConfigError, match="key_itemsize"):
        plan.traffic(4, key_itemsize=0)


def test_owner_gpu_and_repr():
    gpu, row = sok.owner_gpu(np.array([0, 5, 9]), 4)
    assert gpu.tolist() == [0, 1, 1] and row.tolist() == [0, 1, 2]
    plan = sok.dispatch([np.array([0, 1]), np.array([1])], 2)
    assert repr(plan) == "DispatchPlan(num_gpus=2, keys_per_gpu=[2, 1], count_matrix=[[1, 1], [0, 1]])"
