"""The statistics' derived variables from the per-partition counters, in one compiled pass.

An engine call fills its statistics (:class:`~scwork.sharding.results._StatsBuilder`)
from each stack's counters ``ids``, ``unique_ids`` and ``kept_ids``, all
``(stacks, devices, sparsecores, partitions)``, then derives, per stack:

- ``max_ids_per_partition[g, p] = max over sc of ids[g, sc, p]`` and the same for
  ``unique_ids`` (what the library's limits compare with; [jte]
  ``preprocess_sparse_dense_matmul_input``'s statistics);
- ``required_buffer_size_per_sc[g, sc] = sum over p of round_up(ids[g, sc, p], 8)``;
- ``required_buffer_size_per_device[g] = sum over sc and p of round_up(kept_ids, 8)``
  (after dropping; with nothing dropped ``kept_ids`` is ``ids`` and it is the sum of
  the row above);
- ``naive_ids_per_partition[p] = sum over g and sc of ids[g, sc, p]``.

:func:`derive_statistics_reference` is that, written with numpy (a dozen whole-array
calls); :func:`derive_statistics` computes the same in one loop nest. The numpy
calls, each on a few thousand numbers cold in the cache after the call's tasks,
held the GIL for about 0.25 ms a call at 26 stacks, in the task that fills the
statistics (the longest task of a statistics call at 64 threads); the kernel
releases the GIL.

Nothing compiles at import (``@jit`` compiles on the first call; the engine's
warm-up, :mod:`scwork.sharding._engine_warmup`, makes one).

Examples
--------
>>> import numpy as np
>>> from scwork.sharding._stats_kernels import derive_statistics
>>> ids = np.array([[[[1, 9], [3, 0]]]])           # 1 stack, 1 device, 2 SparseCores, 2 partitions
>>> out = [np.zeros((1, 1, 2), np.int64), np.zeros((1, 1, 2), np.int64), np.zeros((1, 1, 2), np.int64),
...        np.zeros((1, 1), np.int64), np.zeros((1, 2), np.int64)]
>>> derive_statistics(ids, ids, ids, True, *out)
>>> [a.tolist() for a in out]    # max ids, max unique ids, required per SC, per device, naive ids
[[[[3, 9]]], [[[3, 9]]], [[[24, 8]]], [[32]], [[4, 9]]]
"""

from __future__ import annotations

import numpy as np

from scwork._jit import jit
from scwork._jit import round_up as _round_up
from scwork._rounding import round_up

__all__ = ["derive_statistics", "derive_statistics_reference"]


@jit
def derive_statistics(ids, uniq, kept, same_kept, max_ids, max_uniq, required, required_device, naive_ids):
    """The derived variables of :mod:`this module <scwork.sharding._stats_kernels>` into the ``out`` arrays.

    ``ids``, ``uniq``, ``kept``: int64 ``(stacks, G, S, P)``; ``same_kept``: ``kept``
    equals ``ids`` (nothing dropped), so the per-device size is the per-SC sizes' sum;
    ``max_ids`` and ``max_uniq`` ``(stacks, G, P)``, ``required`` ``(stacks, G, S)``,
    ``required_device`` ``(stacks, G)``, ``naive_ids`` ``(stacks, P)``: written whole.
    """
    ns, G, S, P = ids.shape
    for st in range(ns):
        for p in range(P):
            naive_ids[st, p] = 0
        for g in range(G):
            for p in range(P):             # (counts are never negative: 0 starts their max)
                max_ids[st, g, p] = 0
                max_uniq[st, g, p] = 0
            device = 0
            for sc in range(S):
                need = 0
                need_kept = 0
                for p in range(P):
                    x = ids[st, g, sc, p]
                    if x > max_ids[st, g, p]:
                        max_ids[st, g, p] = x
                    u = uniq[st, g, sc, p]
                    if u > max_uniq[st, g, p]:
                        max_uniq[st, g, p] = u
                    need += _round_up(x, 8)
                    if not same_kept:
                        need_kept += _round_up(kept[st, g, sc, p], 8)
                    naive_ids[st, p] += x
                required[st, g, sc] = need
                device += need if same_kept else need_kept
            required_device[st, g] = device


def derive_statistics_reference(ids, uniq, kept, same_kept, max_ids, max_uniq, required, required_device,
                                naive_ids):
    """Numpy reference of :func:`derive_statistics`: the same outputs, whole-array calls."""
    np.max(ids, axis=2, out=max_ids)
    np.max(uniq, axis=2, out=max_uniq)
    np.sum(round_up(ids, 8), axis=3, out=required)
    if same_kept:
        np.sum(required, axis=2, out=required_device)
    else:
        np.sum(round_up(kept, 8), axis=(2, 3), out=required_device)
    np.sum(ids, axis=(1, 2), out=naive_ids)
