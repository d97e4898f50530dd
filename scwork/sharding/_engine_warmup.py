"""Warm up the sharding kernels through the engine, with the very argument types it passes.

Kept out of :mod:`scwork.sharding._kernels` because it calls the engine, which itself
imports the kernels: the kernels stay below the engine, this module above both.
"""

from __future__ import annotations

from scwork.hardware.topology import Topology
from scwork.sharding.batch import FeatureBatch
from scwork.sharding.engine import compute_stats, preprocess
from scwork.sharding.specs import FeatureSpec, SparsecoreConfig, TableSpec

__all__ = ["warmup"]


def warmup() -> None:
    """Compile the slice-major kernels on a tiny ``compute_stats`` and ``preprocess``."""
    # the slice-major kernels, with the very argument types the engine passes: a
    # tiny compute_stats and preprocess (weights, a large vocabulary for the naive
    # lists, limits with dropping), on two threads
    batch = FeatureBatch.from_ragged({"a": ([1, 2, 2, 5], [0, 2, 4], [1.0, 2.0, 1.0, 1.0]),
                                      "b": ([7, 3, 10**8], [0, 1, 3])})
    features = [FeatureSpec("a", TableSpec("ta", 8, 8, combiner="mean", max_ids_per_partition=1)),
                FeatureSpec("b", TableSpec("tb", 10**9, 8, combiner="mean"))]
    config = SparsecoreConfig(allow_id_dropping=True)
    for fn in (compute_stats, preprocess):
        fn(batch, features, Topology(1, 2), stacking=None, config=config, num_threads=2)
    # without limits every stack's CSR is written by groups, on two threads by the queued
    # kernels (a stack cut by a limit is written another way, above)
    unlimited = [FeatureSpec(f.name, TableSpec(f.table.name, f.table.vocab_size, 8, combiner="mean")) for f in features]
    preprocess(batch, unlimited, Topology(1, 2), stacking=None, num_threads=2)
