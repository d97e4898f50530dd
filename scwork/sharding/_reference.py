"""A literal, slow, pure-Python transcription of [jte] preprocess_sparse_dense_matmul_input.

For tests and benchmarks.

It follows the recipe of [sc-guide] §7 step by step with Python dicts and sets, one
(device, source SparseCore) slice at a time, and shares no code with the kernels
(only the stacking plan, which it takes as input, and scwork's one
``round_up``, pinned by hand in tests/test_rounding.py). Use it on small batches only.

Examples
--------
>>> import scwork
>>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, plan_stacking
>>> from scwork.sharding._reference import reference_preprocess
>>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])})
>>> topo = scwork.Topology(1, 2)
>>> plan = plan_stacking([FeatureSpec("f", TableSpec("t", 16, 8))], topo, stacking=None)
>>> ref = reference_preprocess(batch, plan, topo)["t"]
>>> ref["ids"].tolist(), ref["naive_ids"].tolist(), ref["naive_unique"].tolist()
([[[2, 2], [0, 3]]], [2, 5], [2, 3])
"""

from __future__ import annotations

import numpy as np

from scwork._rounding import round_up

__all__ = ["reference_preprocess"]

_PAD = 2**31 - 1


def _divisor(combiner: str, weights) -> np.float32:
    if combiner == "sum":
        return np.float32(1.0)
    acc = np.float32(0.0)
    for w in weights:
        if combiner == "mean":
            acc = np.float32(acc + w)
        else:
            # jax-tpu-embedding's C++ accumulates w * w with a fused multiply-add: the
            # product is exact in float64 and the sum is rounded to float32 once.
            acc = np.float32(np.float64(acc) + np.float64(w) * np.float64(w))
    return acc if combiner == "mean" else np.float32(np.sqrt(acc))


def reference_preprocess(batch, plan, topology, *, allow_id_dropping: bool = False) -> dict:
    """Stats, kept counts, drops and CSR buffers per stack, computed the obvious way.

    Returns ``{stack: {"ids", "unique", "kept" (G, S, P), "naive_ids", "naive_unique"
    (P), "dropped" (int), "drops" (list of (device, sc, partition, sample, feature,
    id, count)), "row_pointers", "embedding_ids", "sample_ids", "gains" (CSR arrays
    shaped as :class:`~scwork.sharding.CsrBuffers`), "buffer_size_per_sc"}}``.
    Limits are applied only when ``allow_id_dropping`` (no error checks here).
    """
    G, S, P = topology.num_devices, topology.sparsecores_per_device, topology.num_partitions
    B = batch.batch_size
    n = B // (G * S)
    out = {}
    for stack in plan.stacks:
        max_ids = stack.max_ids_per_partition if allow_id_dropping else None
        max_uniq = stack.max_unique_ids_per_partition if allow_id_dropping else None
        ids = np.zeros((G, S, P), np.int64)
        uniq = np.zeros((G, S, P), np.int64)
        kept = np.zeros((G, S, P), np.int64)
        naive_sets = [set() for _ in range(P)]
        dropped = 0
        drops = []
        kept_pairs = {}
        for d in range(G):
            for s in range(S):
                sl = d * S + s
                # step 1-3: the slice's samples of every feature, COO, per-sample dedup
                streams: list[dict] = [dict() for _ in range(P)]
                for k, f in enumerate(stack.features):
                    t = stack.table(f.table.name)
                    fids, rs = batch[f.name]
                    w = batch.weights(f.name)
                    for i in range(n):
                        b = sl * n + i
                        row = k * n + i
                        lo, hi = int(rs[b]), int(rs[b + 1])
                        div = _divisor(stack.combiner, w[lo:hi])
                        for j in range(lo, hi):
                            x = int(fids[j])
                            p = (x + t.shard_rotation) % P          # step 4 (+ rotation, step 6)
                            L = x // P + t.row_offset_in_shard
                            with np.errstate(divide="ignore", invalid="ignore"):
                                g = np.float32(w[j] / div)
                            e = streams[p].get((L, row))
                            if e is None:
                                streams[p][(L, row)] = [g, 1, x, f.name, b]
                            else:
                                e[0] = np.float32(e[0] + g)
                                e[1] += 1
                            naive_sets[p].add(L)
                # step 4-5 counts, then the prefix cut on the stream sorted by (local id, row)
                for p in range(P):
                    pairs = sorted(streams[p].items())
                    ids[d, s, p] = len(pairs)
                    uniq[d, s, p] = len({L for (L, _), _ in pairs})
                    ranks: dict[int, int] = {}
                    keep_list = []
                    for i, ((L, row), (g, count, x, fname, b)) in enumerate(pairs):
                        rank = ranks.setdefault(L, len(ranks))
                        ok = (max_ids is None or i < max_ids) and (max_uniq is None or rank < max_uniq)
                        if ok:
                            keep_list.append((L, row, g))
                        else:
                            dropped += count
                            drops.append((d, s, p, b, fname, x, count))
                    kept[d, s, p] = len(keep_list)
                    kept_pairs[(d, s, p)] = keep_list
        # CSR: partitions in order, each at round_up(previous end, 8)
        used = max(round_up(sum(round_up(int(kept[d, s, p]), 8) for p in range(P - 1)) + int(kept[d, s, P - 1]), 8)
                   for d in range(G) for s in range(S))
        if stack.max_ids_per_partition is not None:
            C = round_up(stack.max_ids_per_partition, 8) * P
        else:
            C = max(8, used)
        R = max(P, 8)
        rp = np.zeros((G, S * R), np.int32)
        emb = np.full((G, S * C), _PAD, np.int32)
        smp = np.full((G, S * C), _PAD, np.int32)
        gns = np.full((G, S * C), np.nan, np.float32)
        for d in range(G):
            for s in range(S):
                pos = 0
                for p in range(P):
                    pos = round_up(pos, 8)
                    for L, row, g in kept_pairs[(d, s, p)]:
                        emb[d, s * C + pos] = L
                        smp[d, s * C + pos] = row
                        gns[d, s * C + pos] = g
                        pos += 1
                    rp[d, s * R + p] = pos
                for p in range(P, R):
                    rp[d, s * R + p] = round_up(pos, 8)
        out[stack.name] = {
            "ids": ids, "unique": uniq, "kept": kept,
            "naive_ids": ids.sum(axis=(0, 1)),
            "naive_unique": np.array([len(x) for x in naive_sets], np.int64),
            "dropped": dropped, "drops": sorted(drops),
            "row_pointers": rp, "embedding_ids": emb, "sample_ids": smp, "gains": gns,
            "buffer_size_per_sc": C,
        }
    return out
