"""What ``preprocess`` returns: the CSR buffers of every stack and the statistics beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scwork.hardware.topology import Topology
from scwork.sharding._plan_cache import plan_derived
from scwork.sharding.batch import FeatureBatch
from scwork._rounding import round_up
from scwork.sharding.stacking import StackingPlan

__all__ = ["CsrBuffers", "PreprocessResult"]


_ALIGN = 8  # TPU_VECTOR_REGISTER_ALIGMENT_SIZE


# --------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------
@dataclass
class CsrBuffers:
    """The CSR input of one stacked table, for every device ([jte] preprocess_sparse_dense_matmul_input).

    Arrays are laid out exactly as jax-tpu-embedding's per-device buffers: one row per
    device, SparseCore ``s`` of that device owning entries ``[s * R, (s + 1) * R)`` of
    ``row_pointers`` (``R = max(P, 8)``) and ``[s * C, (s + 1) * C)`` of the other
    three (``C = buffer_size_per_sc``). ``embedding_ids``, ``sample_ids`` and
    ``gains`` of all stacks of one call are views of one buffer, which the engine
    reuses once none of them (nor a view of them) is alive any more.
    """

    stack: str
    """Stack name."""
    row_pointers: np.ndarray
    """int32 ``(G, S * R)``: end offset of each partition inside its SC's region."""
    embedding_ids: np.ndarray
    """int32 ``(G, S * C)``: local row ``id // P + row_offset_in_shard``; padding ``2**31 - 1``."""
    sample_ids: np.ndarray
    """int32 ``(G, S * C)``: local row of the sample in the SC's stacked input; padding ``2**31 - 1``."""
    gains: np.ndarray
    """float32 ``(G, S * C)``: combiner gains (duplicates added); padding NaN."""
    num_partitions: int
    """``P``."""
    sparsecores_per_device: int
    """``S``."""
    buffer_size_per_sc: int
    """``C``: entries per SparseCore (``round_up(max_ids, 8) * P`` when the stack has a
    configured ``max_ids_per_partition``, else the largest required size)."""

    @property
    def row_pointers_per_sc(self) -> int:
        """``R = max(P, 8)``."""
        return max(self.num_partitions, _ALIGN)

    @property
    def num_devices(self) -> int:
        return self.row_pointers.shape[0]

    def for_sc(self, device: int, sc: int) -> dict[str, np.ndarray]:
        """Views of the four buffers of source SparseCore ``sc`` of ``device``."""
        R, C = self.row_pointers_per_sc, self.buffer_size_per_sc
        return {
            "row_pointers": self.row_pointers[device, sc * R:(sc + 1) * R],
            "embedding_ids": self.embedding_ids[device, sc * C:(sc + 1) * C],
            "sample_ids": self.sample_ids[device, sc * C:(sc + 1) * C],
            "gains": self.gains[device, sc * C:(sc + 1) * C],
        }

    def partition(self, device: int, sc: int, partition: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(embedding_ids, sample_ids, gains)`` that ``(device, sc)`` sends to ``partition``."""
        buf = self.for_sc(device, sc)
        rp = buf["row_pointers"]
        end = int(rp[partition])
        start = 0 if partition == 0 else round_up(int(rp[partition - 1]), _ALIGN)
        return buf["embedding_ids"][start:end], buf["sample_ids"][start:end], buf["gains"][start:end]

    def __repr__(self) -> str:
        G, S = self.num_devices, self.sparsecores_per_device
        return (f"CsrBuffers({self.stack!r}: {G} devices x {S} SCs, P={self.num_partitions}, "
                f"{self.buffer_size_per_sc} entries and {self.row_pointers_per_sc} row pointers per SC)")


@dataclass
class PreprocessResult:
    """What :func:`preprocess` returns: statistics, CSR buffers, dropped ids."""

    stats: Any
    """:class:`xarray.Dataset` of per-partition statistics (see :func:`compute_stats`)."""
    csr: dict[str, CsrBuffers]
    """Per stack name, the CSR buffers of every device."""
    plan: StackingPlan
    """The stacking plan used."""
    _drops: dict[str, tuple] = field(default_factory=dict, repr=False)

    def _repr_html_(self) -> str:
        from scwork._html import html_table

        rows = []
        for name, buffers in self.csr.items():
            stack_stats = self.stats.sel(stack=name)
            rows.append((name, int(stack_stats["max_ids_per_partition"].max()),
                         int(stack_stats["max_unique_ids_per_partition"].max()),
                         int(stack_stats["dropped_ids"]), buffers.buffer_size_per_sc))
        caption = (f"PreprocessResult on {self.plan.topology}: {len(self.csr)} stack(s), "
                   f"{int(self.stats['dropped_ids'].sum())} ids dropped")
        return html_table(rows, header=("stack", "max ids / partition", "max unique ids / partition",
                                        "dropped ids", "CSR entries per SC"), caption=caption)

    @property
    def dropped(self):
        """Dropped (sample, id) pairs as a :class:`pandas.DataFrame`.

        Columns ``stack, table, feature, device, sc, partition, sample, id, count``:
        ``sample`` is the sample's index in the batch, ``id`` the feature's raw id,
        ``count`` the raw ids of that pair (duplicates included). Empty without
        dropping.

        Examples
        --------
        >>> import scwork
        >>> from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, preprocess
        >>> batch = FeatureBatch.from_ragged({"f": ([0, 1, 1, 0, 2, 2, 2], [0, 3, 5, 7])})
        >>> table = TableSpec("t", 4, 8, max_ids_per_partition=3, max_unique_ids_per_partition=2)
        >>> res = preprocess(batch, [FeatureSpec("f", table)], scwork.Topology(1, 1),
        ...                  config=SparsecoreConfig(allow_id_dropping=True))
        >>> res.dropped[["device", "sc", "partition", "sample", "id", "count"]].values.tolist()
        [[0, 0, 0, 1, 2, 1], [0, 0, 0, 2, 2, 2]]
        >>> int(res.stats["dropped_ids"].sum())
        3
        """
        import pandas as pd

        cols = {c: [] for c in ("stack", "table", "feature", "device", "sc", "partition", "sample", "id",
                                "count")}
        frames = []
        for name, parts in self._drops.items():
            for table, feature_names, S, n, qbits, lbits, col_shift, P, recs in parts:
                if recs.shape[0] == 0:
                    continue
                R, u, p, cnt = recs[:, 0], recs[:, 1], recs[:, 2], recs[:, 3]
                sl = R >> lbits
                local = R & ((1 << lbits) - 1)
                k = local // n
                i = local - k * n
                x = (u & ((1 << qbits) - 1)) * P + (p - col_shift) % P
                frames.append(pd.DataFrame({
                    "stack": name,
                    "table": table,
                    "feature": np.asarray(feature_names, dtype=object)[k],
                    "device": sl // S,
                    "sc": sl % S,
                    "partition": p,
                    "sample": sl * n + i,
                    "id": x,
                    "count": cnt,
                }))
        if not frames:
            return pd.DataFrame({c: pd.Series(dtype=object if c in ("stack", "table", "feature") else np.int64)
                                 for c in cols})
        out = pd.concat(frames, ignore_index=True)
        return out.sort_values(["stack", "device", "sc", "partition", "sample", "id"], kind="stable",
                               ignore_index=True)

    def __repr__(self) -> str:
        lines = [f"PreprocessResult({len(self.csr)} stacks, dropped ids: "
                 f"{int(self.stats['dropped_ids'].sum())})"]
        for name, buf in self.csr.items():
            mx = int(self.stats["max_ids_per_partition"].sel(stack=name).max())
            mu = int(self.stats["max_unique_ids_per_partition"].sel(stack=name).max())
            lines.append(f"  {name}: max_ids_per_partition {mx}, max_unique_ids_per_partition {mu}, "
                         f"buffer {buf.buffer_size_per_sc} per SC")
        return "\n".join(lines)


def _written_within(kept: np.ndarray, capacity: int) -> np.ndarray:
    """Entries of each slice (row of ``kept``: ids per partition) a CSR buffer of
    ``capacity`` entries holds: partitions in order, each starting at a multiple of 8,
    filling stops at the end (jax-tpu-embedding's ``FillBufferSegment``)."""
    start = np.zeros(kept.shape[0], np.int64)
    written = np.zeros(kept.shape[0], np.int64)
    for p in range(kept.shape[1]):
        fits = np.minimum(kept[:, p], np.maximum(capacity - start, 0))
        written += fits
        start = np.minimum(round_up_array(start + fits), capacity)
    return written


def round_up_array(a: np.ndarray, multiple: int = _ALIGN) -> np.ndarray:
    return round_up(a, multiple)


def _block_of(results):
    """The array block whose rows ``results`` are, in order, or None.

    The engine's statistics-only job of several stacks gives each stack a row of
    one array per counter (``block``, the row's index in ``row``:
    :meth:`scwork.sharding.engine._MergedJob.results`); when the results are all
    the rows of that block in order, each counter's stacked array is the block's.
    """
    block = results[0].get("block") if results else None
    if block is not None and all(r.get("block") is block and r["row"] == i for i, r in enumerate(results)):
        return block
    return None


def _plan_columns(plan: StackingPlan, B: int, G: int) -> tuple:
    """Per stack of ``plan``: names, configured limits (-1: none) and samples per device.

    Kept by the stacks' identity (plans never change; the paths built on the
    engine run one plan many times). Callers copy the arrays they hand out.
    """
    stacks = plan.stacks
    return plan_derived("result_columns", stacks, (B, G), lambda: _compute_plan_columns(stacks, B, G))


def _compute_plan_columns(stacks: tuple, B: int, G: int) -> tuple:
    return ([st.name for st in stacks],
            np.array([-1 if st.max_ids_per_partition is None else st.max_ids_per_partition for st in stacks],
                     np.int64),
            np.array([-1 if st.max_unique_ids_per_partition is None else st.max_unique_ids_per_partition
                      for st in stacks], np.int64),
            np.array([len(st.features) * B // G for st in stacks], np.int64))


def _stats_dataset(plan: StackingPlan, topology: Topology, batch: FeatureBatch, results, oov_counts):
    """The statistics Dataset of one engine call (see :func:`_stats_parts`)."""
    return _dataset(*_stats_parts(plan, topology, batch, results, oov_counts))


def _stats_parts(plan: StackingPlan, topology: Topology, batch: FeatureBatch, results, oov_counts):
    """``(variables, coordinates Dataset, attributes)`` of the statistics of one engine call.

    Variables are ``(dims, values, attrs)``; :func:`_dataset` makes the Dataset.
    ``collect_stats`` takes the variables of each step without a Dataset per step.
    """
    stats = _StatsBuilder(plan, topology, batch, oov_counts)
    stats.fill(results)
    return stats.parts


class _StatsBuilder:
    """The statistics of one engine call: their arrays allocated and their Dataset built
    before the counters exist, then :meth:`fill` ed from the per-stack results.

    Everything here but :meth:`fill` depends on the plan, the topology and the
    out-of-vocabulary counts alone, so the engine builds it while its worker threads
    run the slices (``overlap`` of :func:`~scwork.sharding._threads._run_tasks`);
    :meth:`fill` then only copies the counters in and computes the derived
    variables in place (a few numpy calls with ``out=``, the Dataset unchanged).
    ``parts`` is ``(variables, coordinates Dataset, attributes)`` as
    :func:`_stats_parts` returns it; ``dataset`` the Dataset when asked for.
    """

    def __init__(self, plan: StackingPlan, topology: Topology, batch: FeatureBatch, oov_counts,
                 dataset: bool = False):
        G, S, P = topology.num_devices, topology.sparsecores_per_device, topology.num_partitions
        self.G, self.S, self.P = G, S, P
        B = batch.batch_size
        self.batch, self.plan = batch, plan
        names, limit_ids, limit_uniq, samples_per_device = (
            x.copy() if isinstance(x, np.ndarray) else x for x in _plan_columns(plan, B, G))
        self.ns = ns = len(names)
        empty = np.empty
        i64 = np.int64
        # one allocation for every counter of the Dataset (they are small: G * S * P per stack)
        sizes = [ns * G * S * P] * 3 + [ns * G * P] * 2 + [ns * G * S] * 2 + [ns * G] + [ns * P] * 2 + [ns] * 2
        flat = empty(max(1, sum(sizes)), i64)
        at = 0
        views = []
        for n in sizes:
            views.append(flat[at:at + n])
            at += n
        self.ids = views[0].reshape(ns, G, S, P)
        self.uniq = views[1].reshape(ns, G, S, P)
        self.kept = views[2].reshape(ns, G, S, P)
        self.max_ids = views[3].reshape(ns, G, P)
        self.max_uniq = views[4].reshape(ns, G, P)
        self.required = views[5].reshape(ns, G, S)
        self.raw = views[6].reshape(ns, G, S)
        self.required_device = views[7].reshape(ns, G)
        self.naive_ids = views[8].reshape(ns, P)
        self.naive_unique = views[9].reshape(ns, P)
        self.dropped = views[10]
        self.static_dropped = views[11]
        self.samples_per_device = samples_per_device
        self.limit_ids, self.limit_uniq = limit_ids, limit_uniq
        oov = np.array([oov_counts[nm] for nm in names], np.int64)

        def var(dims, values, long_name, units):
            return (dims, values, {"long_name": long_name, "units": units})

        SDSP = ("stack", "device", "sc", "partition")
        variables = {
            "ids": var(SDSP, self.ids, "ids source SparseCore (device, sc) sends to partition, after per-sample "
                       "dedup", "ids"),
            "unique_ids": var(SDSP, self.uniq, "distinct ids source SparseCore (device, sc) sends to partition",
                              "ids"),
            "max_ids_per_partition": var(("stack", "device", "partition"), self.max_ids,
                                         "max over source SparseCores of ids", "ids"),
            "max_unique_ids_per_partition": var(("stack", "device", "partition"), self.max_uniq,
                                                "max over source SparseCores of distinct ids", "ids"),
            "required_buffer_size_per_sc": var(("stack", "device", "sc"), self.required,
                                               "sum over partitions of round_up(ids, 8)", "CSR entries"),
            "input_ids": var(("stack", "device", "sc"), self.raw, "raw ids of the slice before dedup", "ids"),
            "kept_ids": var(SDSP, self.kept, "ids kept after the limits' prefix cut (= ids without dropping)",
                            "ids"),
            "required_buffer_size_per_device": var(
                ("stack", "device"), self.required_device,
                "CSR entries one device fills after dropping (sum over its SCs of round_up(kept_ids, 8))",
                "CSR entries"),
            "samples_per_device": var("stack", samples_per_device,
                                      "samples of the stacked input per device (features x B / G)", "samples"),
            "dropped_ids": var("stack", self.dropped,
                               "raw ids dropped by the limits (duplicates included), plus the ids past a "
                               "static CSR buffer", "ids"),
            "static_buffer_dropped_ids": var(
                "stack", self.static_dropped,
                "ids past the static CSR buffer (suggested_coo_buffer_size_per_device), dropped whatever "
                "allow_id_dropping says (included in dropped_ids)", "ids"),
            "out_of_vocabulary_ids": var("stack", oov, "ids >= vocab_size dropped (on_out_of_vocabulary='drop')",
                                         "ids"),
            "configured_max_ids_per_partition": var("stack", limit_ids,
                                                    "configured max ids per partition (-1: none)", "ids"),
            "configured_max_unique_ids_per_partition": var(
                "stack", limit_uniq, "configured max unique ids per partition (-1: none)", "ids"),
            "naive_ids_per_partition": var(("stack", "partition"), self.naive_ids,
                                           "whole-batch view (no device/SC split): ids per destination "
                                           "partition after per-sample dedup", "ids"),
            "naive_unique_ids_per_partition": var(("stack", "partition"), self.naive_unique,
                                                  "whole-batch view: distinct ids per destination partition",
                                                  "ids"),
        }
        attrs = {
            "topology": str(topology),
            "num_devices": G,
            "sparsecores_per_device": S,
            "num_partitions": P,
            "batch_size": B,
            "samples_per_sc": B // (G * S),
            "source": "[jte] preprocess_sparse_dense_matmul_input; [jte] SortAndGroupCooTensorsPerLocalDevice",
        }
        self.parts = (variables, _coords_dataset(tuple(names), G, S, P), attrs)
        self.dataset = None
        if dataset:
            self.build_dataset()

    def build_dataset(self) -> None:
        """:attr:`dataset`: the Dataset of :attr:`parts` (its arrays filled later or already)."""
        self.dataset = _dataset(*self.parts)

    def _put(self, out: np.ndarray, results, key: str, block, first: int = 0) -> None:
        """Every result's ``key`` (a stack's row) into ``out`` (stack first), from row ``first`` on."""
        n = len(results)
        rows = out[first:first + n].reshape(n, -1)
        if block is not None and key in block and block[key].shape[0] == n:
            np.copyto(rows, block[key].reshape(n, -1))
        else:
            np.stack([np.asarray(r[key]).reshape(-1) for r in results], out=rows)

    def fill_naive(self, naive: np.ndarray) -> None:
        """The naive view, ``(stacks, P)``, in (when :meth:`fill` had none; nothing to do when
        the engine wrote it in place: ``naive`` is :attr:`naive_unique`)."""
        if naive is not self.naive_unique:
            np.copyto(self.naive_unique, naive)

    def fill(self, results, naive: bool = True, first: int = 0) -> None:
        """The counters of ``results`` (one dict per stack, the engine's) in, the derived variables computed.

        ``naive=False``: all but the naive view (:meth:`fill_naive` then). ``first``: the
        results are those of the stacks ``first, first + 1, ...`` only (the engine fills
        the rows of a call's stacks part by part, in tasks of their own); every row is
        written by exactly one call.
        """
        n = len(results)
        if n == 0:
            return
        a, b = first, first + n
        block = _block_of(results)              # checked once for every counter
        ids = self.ids[a:b]
        self._put(self.ids, results, "pairs", block, first)
        self._put(self.uniq, results, "distinct", block, first)
        same_kept = all(r["kept"] is r["pairs"] for r in results)
        if same_kept:
            np.copyto(self.kept[a:b], ids)
        else:
            self._put(self.kept, results, "kept", block, first)
        if all("input" in r for r in results):      # raw ids per slice, counted by the engine already
            self._put(self.raw, results, "input", block, first)
        else:
            G, S, spc = self.G, self.S, self.batch.batch_size // (self.G * self.S)
            batch = self.batch
            self.raw[a:b] = 0
            for i, (st, r) in enumerate(zip(self.plan.stacks[a:b], results), start=a):
                if "input" in r:
                    self.raw[i] = r["input"].reshape(G, S)
                    continue
                for f in st.features:
                    rs = batch._splits[batch._feature_index(f.name)]
                    self.raw[i] += (rs[spc::spc] - rs[:-1:spc]).reshape(G, S)
        if naive:
            self._put(self.naive_unique, results, "naive", block, first)
        # the derived variables in one compiled pass (a dozen numpy calls held the GIL for
        # 0.25 ms here: the longest task of a statistics call at 64 threads)
        from scwork.sharding._stats_kernels import derive_statistics

        derive_statistics(ids, self.uniq[a:b], self.kept[a:b], same_kept, self.max_ids[a:b], self.max_uniq[a:b],
                          self.required[a:b], self.required_device[a:b], self.naive_ids[a:b])
        self.dropped[a:b] = [r["dropped"] for r in results]
        self.static_dropped[a:b] = [r["static_dropped"] for r in results]


_COORDS_CACHE: dict[tuple, Any] = {}


def cached_coords(key: tuple, coords):
    """A Dataset of the coordinates ``coords()`` only, kept by ``key`` (the engine's result
    Datasets are built on it: building xarray's indexes costs more than the variables)."""
    import xarray as xr

    ds = _COORDS_CACHE.get(key)
    if ds is None:
        if len(_COORDS_CACHE) > 64:
            _COORDS_CACHE.clear()
        ds = _COORDS_CACHE[key] = xr.Dataset(coords=coords())
    return ds


def _coords_dataset(names: tuple, G: int, S: int, P: int):
    """The coordinates of the per-partition statistics (:func:`stats_coords`), cached."""
    return cached_coords(("stats", names, G, S, P), lambda: stats_coords(names, G, S, P))


def _direct_constructor():
    """xarray's ``Dataset._construct_direct``, or None where this xarray has none."""
    import xarray as xr

    return getattr(xr.Dataset, "_construct_direct", None)


def _dataset(data_vars: dict, coords_ds, attrs: dict):
    """``xr.Dataset(data_vars, coords, attrs)``, built directly from checked pieces.

    The variables are plain ``(dims, values, attrs)`` over the dims of ``coords_ds``
    (the statistics' coordinates), so xarray's alignment and index building, about
    1 ms a call and most of the serial time of a small call, can be skipped. Falls
    back to the constructor if this xarray has no direct path.
    """
    import xarray as xr

    construct = _direct_constructor()
    if construct is None:
        return _constructed(data_vars, coords_ds, attrs)
    variables = {name: var.copy(deep=False) for name, var in coords_ds.variables.items()}
    sizes = dict(coords_ds.sizes)
    for name, (dims, values, var_attrs) in data_vars.items():
        dims = (dims,) if isinstance(dims, str) else tuple(dims)
        if tuple(np.shape(values)) != tuple(sizes[d] for d in dims):
            raise ValueError(f"variable {name!r}: shape {np.shape(values)} does not fit dims {dims}")
        # fastpath: the values are numpy arrays built above (no conversion to do)
        variables[name] = xr.Variable(dims, values, var_attrs, fastpath=True)
    try:
        return construct(variables, set(coords_ds.coords), sizes, dict(attrs), dict(coords_ds.xindexes))
    except TypeError:                      # another signature: the public way
        return _constructed(data_vars, coords_ds, attrs)


def _constructed(data_vars: dict, coords_ds, attrs: dict):
    """What :func:`_dataset` builds, the public way: the coordinates first, as there."""
    import xarray as xr

    return xr.Dataset(coords=coords_ds.coords).assign(
        {name: xr.Variable(dims, values, var_attrs) for name, (dims, values, var_attrs) in data_vars.items()}
    ).assign_attrs(attrs)


def stats_coords(names, G: int, S: int, P: int) -> dict[str, tuple]:
    """Coordinates of every per-partition statistics Dataset (stack, device, sc, partition)."""
    return {
        "stack": ("stack", np.array(list(names), dtype=object), {"long_name": "stacked table"}),
        "device": ("device", np.arange(G), {"long_name": "device (JAX device) index"}),
        "sc": ("sc", np.arange(S), {"long_name": "source SparseCore within the device"}),
        "partition": ("partition", np.arange(P),
                      {"long_name": "destination partition (global SparseCore id)"}),
    }
