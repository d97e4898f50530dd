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


def _stacked(results, key: str, shape: tuple, block=None) -> np.ndarray:
    """``np.stack`` of every result's ``key`` reshaped to ``shape``, or the array they are rows of.

    ``block``: :func:`_block_of` of ``results`` (their rows' block, no copy) or None.
    """
    if block is not None and key in block and block[key].shape[0] == len(results):
        return block[key].reshape(len(results), *shape)
    return np.stack([np.asarray(r[key]).reshape(shape) for r in results])


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
    G, S, P = topology.num_devices, topology.sparsecores_per_device, topology.num_partitions
    nsl = G * S
    B = batch.batch_size
    n = B // nsl
    names, limit_ids, limit_uniq, samples_per_device = (
        x.copy() if isinstance(x, np.ndarray) else x for x in _plan_columns(plan, B, G))
    ns = len(names)
    block = _block_of(results)              # checked once for every counter
    ids = _stacked(results, "pairs", (G, S, P), block)
    uniq = _stacked(results, "distinct", (G, S, P), block)
    same_kept = all(r["kept"] is r["pairs"] for r in results)
    kept = ids if same_kept else _stacked(results, "kept", (G, S, P), block)
    if all("input" in r for r in results):      # raw ids per slice, counted by the engine already
        raw = _stacked(results, "input", (G, S), block) if ns else np.zeros((0, G, S), np.int64)
    else:
        raw = np.zeros((ns, G, S), np.int64)
        for a, (st, r) in enumerate(zip(plan.stacks, results)):
            if "input" in r:
                raw[a] = r["input"].reshape(G, S)
                continue
            for f in st.features:
                rs = batch._splits[batch._feature_index(f.name)]
                raw[a] += (rs[n::n] - rs[:-1:n]).reshape(G, S)
    naive_unique = _stacked(results, "naive", (P,), block)
    required = round_up_array(ids).sum(axis=3)
    required_kept = required if same_kept else round_up_array(kept).sum(axis=3)

    def var(dims, values, long_name, units, **extra):
        attrs = {"long_name": long_name, "units": units}
        attrs.update(extra)
        return (dims, values, attrs)

    SDSP = ("stack", "device", "sc", "partition")
    return (
        {
            "ids": var(SDSP, ids, "ids source SparseCore (device, sc) sends to partition, after per-sample "
                       "dedup", "ids"),
            "unique_ids": var(SDSP, uniq, "distinct ids source SparseCore (device, sc) sends to partition",
                              "ids"),
            "max_ids_per_partition": var(("stack", "device", "partition"), ids.max(axis=2),
                                         "max over source SparseCores of ids", "ids"),
            "max_unique_ids_per_partition": var(("stack", "device", "partition"), uniq.max(axis=2),
                                                "max over source SparseCores of distinct ids", "ids"),
            "required_buffer_size_per_sc": var(("stack", "device", "sc"), required,
                                               "sum over partitions of round_up(ids, 8)", "CSR entries"),
            "input_ids": var(("stack", "device", "sc"), raw, "raw ids of the slice before dedup", "ids"),
            "kept_ids": var(SDSP, kept, "ids kept after the limits' prefix cut (= ids without dropping)",
                            "ids"),
            "required_buffer_size_per_device": var(
                ("stack", "device"), required_kept.sum(axis=2),
                "CSR entries one device fills after dropping (sum over its SCs of round_up(kept_ids, 8))",
                "CSR entries"),
            "samples_per_device": var("stack", samples_per_device,
                                      "samples of the stacked input per device (features x B / G)", "samples"),
            "dropped_ids": var("stack", np.array([r["dropped"] for r in results], np.int64),
                               "raw ids dropped by the limits (duplicates included), plus the ids past a "
                               "static CSR buffer", "ids"),
            "static_buffer_dropped_ids": var(
                "stack", np.array([r["static_dropped"] for r in results], np.int64),
                "ids past the static CSR buffer (suggested_coo_buffer_size_per_device), dropped whatever "
                "allow_id_dropping says (included in dropped_ids)", "ids"),
            "out_of_vocabulary_ids": var("stack", np.array([oov_counts[nm] for nm in names], np.int64),
                                         "ids >= vocab_size dropped (on_out_of_vocabulary='drop')", "ids"),
            "configured_max_ids_per_partition": var("stack", limit_ids,
                                                    "configured max ids per partition (-1: none)", "ids"),
            "configured_max_unique_ids_per_partition": var(
                "stack", limit_uniq, "configured max unique ids per partition (-1: none)", "ids"),
            "naive_ids_per_partition": var(("stack", "partition"), ids.sum(axis=(1, 2)),
                                           "whole-batch view (no device/SC split): ids per destination "
                                           "partition after per-sample dedup", "ids"),
            "naive_unique_ids_per_partition": var(("stack", "partition"), naive_unique,
                                                  "whole-batch view: distinct ids per destination partition",
                                                  "ids"),
        },
        _coords_dataset(tuple(names), G, S, P),
        {
            "topology": str(topology),
            "num_devices": G,
            "sparsecores_per_device": S,
            "num_partitions": P,
            "batch_size": B,
            "samples_per_sc": n,
            "source": "[jte] preprocess_sparse_dense_matmul_input; [jte] SortAndGroupCooTensorsPerLocalDevice",
        },
    )


_COORDS_CACHE: dict[tuple, Any] = {}


def _coords_dataset(names: tuple, G: int, S: int, P: int):
    """A Dataset of the coordinates only (cached: building the indexes costs more than the variables)."""
    import xarray as xr

    key = (names, G, S, P)
    ds = _COORDS_CACHE.get(key)
    if ds is None:
        if len(_COORDS_CACHE) > 64:
            _COORDS_CACHE.clear()
        ds = _COORDS_CACHE[key] = xr.Dataset(coords=stats_coords(names, G, S, P))
    return ds


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
