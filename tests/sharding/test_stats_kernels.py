"""The statistics' derived variables: compiled pass against its numpy reference and values by hand."""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork.sharding import compute_stats, preprocess
from scwork.sharding._stats_kernels import derive_statistics, derive_statistics_reference
from scwork.sharding._synthetic import synthetic_batch

KERNELS = [derive_statistics, derive_statistics_reference]


def _outputs(ns, G, S, P, fill=-99):
    return [np.full((ns, G, P), fill, np.int64), np.full((ns, G, P), fill, np.int64),
            np.full((ns, G, S), fill, np.int64), np.full((ns, G), fill, np.int64), np.full((ns, P), fill, np.int64)]


@pytest.mark.parametrize("kernel", KERNELS)
def test_by_hand_two_stacks_two_devices_two_scs(kernel):
    # stack 0: ids[g][sc][p], 3 partitions; stack 1 all zeros
    ids = np.array([[[[1, 0, 9], [3, 8, 0]],        # device 0: SC 0, SC 1
                     [[16, 2, 2], [0, 0, 17]]],     # device 1
                    [[[0, 0, 0], [0, 0, 0]],
                     [[0, 0, 0], [0, 0, 0]]]], np.int64)
    uniq = np.array([[[[1, 0, 5], [2, 8, 0]],
                      [[4, 1, 2], [0, 0, 9]]],
                     [[[0, 0, 0], [0, 0, 0]],
                      [[0, 0, 0], [0, 0, 0]]]], np.int64)
    out = _outputs(2, 2, 2, 3)
    kernel(ids, uniq, ids, True, *out)
    max_ids, max_uniq, required, required_device, naive = out
    assert max_ids[0].tolist() == [[3, 8, 9], [16, 2, 17]]
    assert max_uniq[0].tolist() == [[2, 8, 5], [4, 1, 9]]
    # round_up(x, 8) per partition: 1 -> 8, 0 -> 0, 9 -> 16; 3 -> 8, 8 -> 8; 16, 2 -> 8, 2 -> 8; 17 -> 24
    assert required[0].tolist() == [[8 + 0 + 16, 8 + 8 + 0], [16 + 8 + 8, 0 + 0 + 24]]
    assert required_device[0].tolist() == [24 + 16, 32 + 24]
    assert naive[0].tolist() == [1 + 3 + 16 + 0, 0 + 8 + 2 + 0, 9 + 0 + 2 + 17]
    assert max_ids[1].tolist() == [[0, 0, 0], [0, 0, 0]] and required[1].tolist() == [[0, 0], [0, 0]]
    assert required_device[1].tolist() == [0, 0] and naive[1].tolist() == [0, 0, 0]


@pytest.mark.parametrize("kernel", KERNELS)
def test_by_hand_the_device_size_counts_kept_ids_after_dropping(kernel):
    ids = np.array([[[[9, 1], [8, 8]]]], np.int64)       # 1 stack, 1 device, 2 SCs, 2 partitions
    kept = np.array([[[[8, 1], [1, 0]]]], np.int64)      # a cut kept fewer
    out = _outputs(1, 1, 2, 2)
    kernel(ids, ids, kept, False, *out)
    # per SC from ids: 16 + 8 and 8 + 8; per device from kept: 8 + 8 + 8 + 0
    assert out[2].tolist() == [[[24, 16]]]
    assert out[3].tolist() == [[24]]
    assert out[0].tolist() == [[[9, 8]]] and out[4].tolist() == [[17, 9]]


@pytest.mark.parametrize("seed", range(6))
def test_kernel_matches_reference_on_random_counters(seed):
    rng = np.random.default_rng(seed)
    ns, G, S, P = (int(x) for x in rng.integers(1, 6, 4))
    ids = rng.integers(0, 40, (ns, G, S, P)).astype(np.int64)
    uniq = np.minimum(ids, rng.integers(0, 40, ids.shape))
    kept = np.minimum(ids, rng.integers(0, 40, ids.shape))
    for same_kept, k in ((True, ids), (False, kept)):
        got, want = _outputs(ns, G, S, P), _outputs(ns, G, S, P, fill=7)
        derive_statistics(ids, uniq, k, same_kept, *got)
        derive_statistics_reference(ids, uniq, k, same_kept, *want)
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a, b)


def test_engine_statistics_hold_the_derived_variables():
    """The engine's filled statistics satisfy the definitions, computed here from their counters."""
    batch, feats = synthetic_batch(batch_size=512, num_features=5, vocab_size=3000, seed=11)
    topo = scwork.Topology(2, 4)
    for stats in (compute_stats(batch, feats, topo, "auto", num_threads=2),
                  preprocess(batch, feats, topo, None, num_threads=3).stats):
        ids = stats["ids"].values
        kept = stats["kept_ids"].values
        assert np.array_equal(stats["max_ids_per_partition"].values, ids.max(axis=2))
        assert np.array_equal(stats["max_unique_ids_per_partition"].values, stats["unique_ids"].values.max(axis=2))
        rounded = (ids + 7) // 8 * 8
        assert np.array_equal(stats["required_buffer_size_per_sc"].values, rounded.sum(axis=3))
        assert np.array_equal(stats["required_buffer_size_per_device"].values,
                              ((kept + 7) // 8 * 8).sum(axis=(2, 3)))
        assert np.array_equal(stats["naive_ids_per_partition"].values, ids.sum(axis=(1, 2)))
