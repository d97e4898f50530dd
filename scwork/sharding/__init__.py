"""Sharding engine: how embedding ids spread over SparseCores, and what that costs.

Sources: [sc-guide] §2 and §3 (host preprocessing, COO), §12 (debug checks); [jte]
table_stacking.py and preprocess_sparse_dense_matmul_input; [tf-sc-config].

Bring embedding ids (:class:`FeatureBatch`), tables and features
(:class:`TableSpec`, :class:`FeatureSpec`) and a :class:`scwork.Topology`; get,
exactly as the JAX SparseCore library (jax-tpu-embedding) computes them, the
per-partition statistics (:func:`compute_stats`), the limit checks and the CSR
buffers (:func:`preprocess`), for stacked or unstacked tables
(:func:`plan_stacking`).

- :mod:`~scwork.sharding.specs`: :class:`TableSpec`, :class:`FeatureSpec`,
  :class:`SparsecoreConfig`.
- :mod:`~scwork.sharding.batch`: :class:`FeatureBatch`.
- :mod:`~scwork.sharding.stacking`: :func:`plan_stacking`, :class:`StackingPlan`.
- :mod:`~scwork.sharding.engine`: :func:`preprocess`, :func:`compute_stats` (the engine);
  :mod:`~scwork.sharding.results`: :class:`PreprocessResult`, :class:`CsrBuffers`
  (what it returns); the numba kernels are in ``_kernels.py`` (sorting, counting,
  CSR) and ``_naive_kernels.py`` (the whole-batch view), its buffer pool in
  ``_scratch.py`` and its worker threads in ``_threads.py``.
- ``scwork/sharding/minibatch.py``: :func:`minibatch` (vocabulary- or sample-dimension
  mini-batching), :class:`MiniBatchPlan`. The function shadows the module's name
  as an attribute of this package; import the module with
  ``importlib.import_module("scwork.sharding.minibatch")`` if needed.
- :mod:`~scwork.sharding.scenario`: :class:`Scenario`, what-ifs of one batch (the run
  under the limits, the observed counts, mini-batches, per-table counts, CSR sizes),
  cached, with ``with_(...)`` for changes; the explorers and scripts use it alike.
- :mod:`~scwork.sharding.limits`: :func:`estimate_limits`, :func:`collect_stats`,
  :func:`tune_limits`, :func:`tradeoff` (choosing limits).
- :mod:`~scwork.sharding.limits_files`: :class:`Limits`, JSON/CSV limits files, the
  FDO stats files of jax-tpu-embedding, :func:`apply_limits`.
- :mod:`~scwork.sharding.dataset_stats`: :func:`stats_over_dataset` (the same statistics
  over Parquet/NPZ shards or dask collections, chunk by chunk, locally or on a Dask
  cluster); :mod:`~scwork.sharding.dataset_result`: :class:`DatasetStats`;
  :mod:`~scwork.sharding.shards`: finding, reading and writing shards; chunking in
  ``_dataset_chunks.py``, running the chunks in ``_dataset_exec.py``.
- :mod:`~scwork.sharding.sok`: HugeCTR SOK dispatch ([sok]), loaded on first use.

Importing this package does not import numba: kernels load on first use.

Examples
--------
>>> import scwork
>>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, compute_stats
>>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])})
>>> stats = compute_stats(batch, [FeatureSpec("f", TableSpec("t", 16, 8))], scwork.Topology(1, 2))
>>> stats["max_ids_per_partition"].max().item(), stats["required_buffer_size_per_sc"].values.ravel().tolist()
(3, [16, 8])
"""

from __future__ import annotations

import importlib

from scwork.sharding.batch import FeatureBatch
from scwork.sharding.dataset_stats import DatasetStats, stats_over_dataset
from scwork.sharding.engine import CsrBuffers, PreprocessResult, compute_stats, preprocess, release_buffers
from scwork.sharding.limits import TunedLimits, collect_stats, estimate_limits, tradeoff, tune_limits
from scwork.sharding.limits_files import (
    FdoStats,
    Limits,
    StackLimits,
    apply_limits,
    read_fdo_stats,
    read_limits,
    write_fdo_stats,
    write_limits,
)
from scwork.sharding.minibatch import MiniBatchPlan, minibatch
from scwork.sharding.scenario import MinibatchCounts, Scenario
from scwork.sharding.specs import COMBINERS, OPTIMIZERS, FeatureSpec, SparsecoreConfig, TableSpec
from scwork.sharding.stacking import Stack, StackingPlan, TableInStack, plan_stacking

__all__ = [
    "TableSpec",
    "FeatureSpec",
    "SparsecoreConfig",
    "COMBINERS",
    "OPTIMIZERS",
    "FeatureBatch",
    "plan_stacking",
    "StackingPlan",
    "Stack",
    "TableInStack",
    "preprocess",
    "compute_stats",
    "release_buffers",
    "PreprocessResult",
    "CsrBuffers",
    "minibatch",
    "MiniBatchPlan",
    "Scenario",
    "MinibatchCounts",
    "estimate_limits",
    "collect_stats",
    "tune_limits",
    "TunedLimits",
    "tradeoff",
    "Limits",
    "StackLimits",
    "read_limits",
    "write_limits",
    "FdoStats",
    "read_fdo_stats",
    "write_fdo_stats",
    "apply_limits",
    "stats_over_dataset",
    "DatasetStats",
    "sok",
]

_LAZY_SUBMODULES = {"sok"}


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        module = importlib.import_module(f"scwork.sharding.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'scwork.sharding' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_SUBMODULES)
