"""One topology and one per-chip batch size: the batches cut to it, every table's statistics.

A plan search evaluates many stackings, limits and flags on the same ids. What is
expensive (the sharding engine on every batch) depends only on the topology and the
global batch size, not on the stacking, because of one exact identity:

    the counts of a stack are the sums of its tables' counts, each table's counts
    rotated by its shard rotation along the partition axis.

Why it is exact ([jte] ``table_stacking.py`` and ``preprocess_sparse_dense_matmul_input``):
a table at rotation ``c`` sends id ``i`` to partition ``(i + c) % P``, so its counts
at rotation ``c`` are its counts at rotation 0 rolled by ``c`` partitions; tables of a
stack occupy disjoint row ranges of every shard, so no id of one table equals an id
of another after the transform: the per-sample dedup and the distinct-id count never
mix tables, and ids, distinct ids and raw ids add. The (device, source SparseCore)
slices hold the same samples of every feature whatever the stacking
(``kSplitThenStack``). So the engine runs once per batch with every table alone at
rotation 0 (:attr:`_Context.obs_ids` ...), and any stack's statistics are sums of
rolled arrays. ``tests/plan/test_search.py`` checks the identity against
:func:`~scwork.sharding.compute_stats` on the stacked plan, and the oracle test against
jax-tpu-embedding itself.

What the identity does not give, and is therefore run by the engine for the stacks
concerned: the ids dropped by the prefix cut (which ids survive depends on the order
of ids inside a stack's stream) and the mini-batch split (the bucket tree of a
stack). Both are needed only where a held-out stream exceeds a limit or a static
buffer; everywhere else they are 0 dropped ids and one mini-batch, exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from scwork.errors import ConfigError, InputError
from scwork.hardware.topology import Topology
from scwork.sharding.batch import FeatureBatch
from scwork.sharding.specs import FeatureSpec, SparsecoreConfig

__all__: list[str] = []

#: Statistics arrays one context may hold (int64 counts of every table, step and cell).
MAX_CONTEXT_BYTES = 2 * 2**30


def bare_features(features: Sequence[FeatureSpec]) -> tuple[FeatureSpec, ...]:
    """The features with every table's own limits and static buffer removed.

    A searched plan sets every stack's limits itself (``stack_limits``); the tables'
    values would otherwise leak into stacks the search leaves unconfigured.
    """
    cleared: dict[str, Any] = {}
    out = []
    for f in features:
        t = cleared.get(f.table.name)
        if t is None:
            t = cleared[f.table.name] = dataclasses.replace(
                f.table, max_ids_per_partition=None, max_unique_ids_per_partition=None,
                suggested_coo_buffer_size_per_device=None)
        out.append(dataclasses.replace(f, table=t))
    return tuple(out)


def samples_of(batches: Sequence[FeatureBatch], names: Sequence[str]) -> dict[str, tuple]:
    """Every feature's ids, row splits and weights (or None), all batches one after another."""
    out = {}
    for name in names:
        ids, splits, weights = [], [np.zeros(1, np.int64)], []
        offset = 0
        any_weights = any(b.has_weights(name) for b in batches)
        for b in batches:
            i, rs = b[name]
            ids.append(i)
            splits.append(rs[1:] + offset)
            offset += int(rs[-1])
            if any_weights:
                weights.append(b.weights(name))
        out[name] = (np.concatenate(ids) if ids else np.zeros(0, np.int64), np.concatenate(splits),
                     np.concatenate(weights) if any_weights else None)
    return out


def cut(samples: dict[str, tuple], batch_size: int) -> list[FeatureBatch]:
    """Consecutive batches of ``batch_size`` samples; samples after the last full batch are not used."""
    n = next(iter(samples.values()))[1].size - 1
    out = []
    for k in range(n // batch_size):
        a, b = k * batch_size, (k + 1) * batch_size
        data, weights = {}, {}
        for name, (ids, splits, w) in samples.items():
            lo, hi = int(splits[a]), int(splits[b])
            data[name] = (ids[lo:hi], splits[a:b + 1] - lo)
            if w is not None:
                weights[name] = w[lo:hi]
        out.append(FeatureBatch.from_ragged(data, weights=weights or None))
    return out


class _Context:
    """The ids cut to one global batch on one topology, and every table's statistics on them."""

    def __init__(self, features: tuple[FeatureSpec, ...], observed: dict, held_out: dict, topology: Topology,
                 per_chip_batch: int, num_threads: int | None):
        from scwork.sharding.engine import compute_stats

        self.topology = topology
        self.per_chip_batch = per_chip_batch
        self.batch_size = B = per_chip_batch * topology.num_chips
        G, S, P = topology.num_devices, topology.sparsecores_per_device, topology.num_partitions
        if B % (G * S):
            raise ConfigError(
                f"per-chip batch {per_chip_batch} on {topology} gives a global batch of {B} samples, which does "
                f"not split over its {G} devices x {S} SparseCores. How to fix: use a per-chip batch that is a "
                f"multiple of {(G * S) // topology.num_chips or 1} samples")
        self.features = features
        self.tables = list(dict.fromkeys(f.table.name for f in features))
        T = len(self.tables)
        n_obs = next(iter(observed.values()))[1].size - 1
        n_held = next(iter(held_out.values()))[1].size - 1
        if n_obs < B or n_held < B:
            short, n = ("observation", n_obs) if n_obs < B else ("held-out", n_held)
            raise InputError(
                f"the {short} batches hold {n} samples, fewer than one global batch of {B} "
                f"({per_chip_batch} per chip x {topology.num_chips} chips). How to fix: give more batches or "
                f"smaller per-chip batch sizes")
        steps = n_obs // B + n_held // B
        need = steps * T * G * S * P * 8 * 2
        if need > MAX_CONTEXT_BYTES:
            raise ConfigError(
                f"the statistics of {T} tables over {steps} steps on {topology} need {need / 2**30:.1f} GiB "
                f"(limit {MAX_CONTEXT_BYTES / 2**30:.0f} GiB: scwork.plan._context.MAX_CONTEXT_BYTES). How to fix: "
                "give fewer batches or smaller topologies")
        self.observed_batches = cut(observed, B)
        self.held_out_batches = cut(held_out, B)
        self.unused_samples = (n_obs - len(self.observed_batches) * B, n_held - len(self.held_out_batches) * B)
        # Every table alone at rotation 0, no limit, no per-chip cap: its observed counts.
        config = SparsecoreConfig(max_ids_per_chip_per_sample=None)
        self.obs_ids, self.obs_uniq, self.obs_input = self._per_table(self.observed_batches, config, num_threads,
                                                                      compute_stats)
        self.held_ids, self.held_uniq, self.held_input = self._per_table(self.held_out_batches, config, num_threads,
                                                                         compute_stats)
        self.num_threads = num_threads
        #: The held-out step with the most raw ids: the step the step model times.
        self.heaviest_held_out_step = int(self.held_input.reshape(len(self.held_out_batches), -1).sum(axis=1).argmax())
        self._stacks: dict[tuple, dict[str, np.ndarray]] = {}

    def _per_table(self, batches, config, num_threads, compute_stats):
        index = {name: k for k, name in enumerate(self.tables)}
        G, S, P = self.topology.num_devices, self.topology.sparsecores_per_device, self.topology.num_partitions
        ids = np.zeros((len(batches), len(self.tables), G, S, P), np.int64)
        uniq = np.zeros_like(ids)
        raw = np.zeros((len(batches), len(self.tables), G, S), np.int64)
        for step, batch in enumerate(batches):
            stats = compute_stats(batch, self.features, self.topology, None, config, num_threads=num_threads)
            order = [index[str(n)] for n in stats["stack"].values]
            ids[step, order] = stats["ids"].transpose("stack", "device", "sc", "partition").values
            uniq[step, order] = stats["unique_ids"].transpose("stack", "device", "sc", "partition").values
            raw[step, order] = stats["input_ids"].transpose("stack", "device", "sc").values
        return ids, uniq, raw

    def stack_counts(self, key: tuple[tuple[str, int], ...]) -> dict[str, np.ndarray]:
        """Counts of a stack whose tables are ``(name, shard rotation)``: sums of rolled per-table counts.

        Returns ``obs_ids``, ``obs_uniq`` (step, device, sc, partition), ``held_ids``,
        ``held_uniq`` and ``held_input`` (step, device, sc), computed once per stack.
        """
        hit = self._stacks.get(key)
        if hit is not None:
            return hit
        index = {name: k for k, name in enumerate(self.tables)}
        out = {}
        for which in ("obs_ids", "obs_uniq", "held_ids", "held_uniq"):
            arr = getattr(self, which)
            total = np.zeros(arr.shape[:1] + arr.shape[2:], np.int64)
            for name, shift in key:
                total += np.roll(arr[:, index[name]], shift, axis=-1) if shift else arr[:, index[name]]
            out[which] = total
        out["held_input"] = sum(self.held_input[:, index[name]] for name, _ in key)
        self._stacks[key] = out
        return out

    @property
    def nbytes(self) -> int:
        """Bytes held by the per-table and per-stack statistics."""
        arrays = [self.obs_ids, self.obs_uniq, self.obs_input, self.held_ids, self.held_uniq, self.held_input]
        arrays += [a for d in self._stacks.values() for a in d.values()]
        return int(sum(a.nbytes for a in arrays))
