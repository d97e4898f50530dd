"""Statistics from averages: what ``compute_stats`` would report, for what-ifs without data.

:func:`expected_stats` builds them for a batch described by its mean ids per sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from scwork._validate import shown
from scwork.errors import ConfigError
from scwork.pipeline._inputs import _as_count, _nonneg, _per_stack

__all__ = ["expected_stats"]

#: Most ids one SparseCore may see in a step (its counts are int64).
_MAX_IDS = 2**62


# --------------------------------------------------------------------------------------
# statistics without data
# --------------------------------------------------------------------------------------
def expected_stats(ids_per_sample: Mapping[str, float], topology, *, batch_size: int, unique_fraction: Any = 1.0,
                   hot_fraction: Any = 0.0, hot_partition: int = 0):
    """Statistics shaped like :func:`scwork.sharding.compute_stats` output, from averages.

    For a what-if without a batch: every source SparseCore handles ``L =
    samples_per_sc * ids_per_sample[stack]`` ids of a stack; a share
    ``hot_fraction`` of them goes to ``hot_partition`` (hot ids), the rest is
    spread evenly over the ``P`` partitions (integer counts, the remainder on the
    first partitions). Unique ids are ``unique_fraction * ids``. Every rounding is
    half up (``floor(x + 0.5)``).

    Parameters
    ----------
    ids_per_sample : dict of str -> float
        Per stack: ids per sample summed over its features (after per-sample dedup).
    topology : scwork.Topology
    batch_size : int
        Global batch; must be a multiple of ``P``.
    unique_fraction, hot_fraction : float or dict, optional
        In ``[0, 1]``, one value or per stack.
    hot_partition : int
        Partition that receives the hot share.

    Returns
    -------
    xarray.Dataset
        ``ids``, ``unique_ids`` (stack, device, sc, partition), ``input_ids``
        (stack, device, sc), and the attrs of compute_stats.

    Raises
    ------
    ConfigError
        Batch not divisible by ``P``, fractions outside ``[0, 1]``, negative rates.

    Examples
    --------
    >>> import scwork
    >>> from scwork.pipeline import expected_stats
    >>> ds = expected_stats({"t": 3.0}, scwork.Topology(1, 2), batch_size=4)
    >>> ds["ids"].sel(stack="t").values.tolist()    # 2 samples x 3 ids per SC over 2 partitions
    [[[3, 3], [3, 3]]]
    """
    import xarray as xr

    from scwork.hardware.topology import Topology

    if not isinstance(topology, Topology):
        raise ConfigError(f"topology must be a scwork.Topology, got {type(topology).__name__}; e.g. "
                          "scwork.Topology.for_chip('v5p', num_chips=4)")
    P = topology.num_partitions
    G, S = topology.num_devices, topology.sparsecores_per_device
    batch_size = _as_count("batch_size", batch_size)
    if P < 1:
        raise ConfigError(f"topology {topology} has no SparseCore")
    if batch_size % P:
        raise ConfigError(f"batch_size {shown(batch_size)} is not a multiple of the {P} SparseCores")
    if not isinstance(ids_per_sample, Mapping) or not ids_per_sample:
        raise ConfigError("ids_per_sample must be a non-empty dict {stack: ids per sample}")
    hot_partition = _as_count("hot_partition", hot_partition, minimum=0)
    if hot_partition >= P:
        raise ConfigError(f"hot_partition must be < {P}, got {shown(hot_partition)}")
    bad = [key for key in ids_per_sample if not isinstance(key, str)]
    if bad:
        raise ConfigError(f"ids_per_sample keys must be stack names (str), got {shown(bad[0])}")
    names = list(ids_per_sample)
    uf = _per_stack(unique_fraction, names, "unique_fraction", 1.0)
    hf = _per_stack(hot_fraction, names, "hot_fraction", 0.0)
    n = batch_size // P
    K = len(names)
    ids = np.zeros((K, G, S, P), np.int64)
    uniq = np.zeros_like(ids)
    raw = np.zeros((K, G, S), np.int64)
    for k, name in enumerate(names):
        rate = _nonneg(f"ids_per_sample[{shown(name)}]", ids_per_sample[name])
        u = _nonneg(f"unique_fraction of stack {shown(name)}", uf[name])
        h = _nonneg(f"hot_fraction of stack {shown(name)}", hf[name])
        for label, f in (("unique_fraction", u), ("hot_fraction", h)):
            if not 0.0 <= f <= 1.0:
                raise ConfigError(f"{label} of stack {shown(name)} must be in [0, 1], got {f}")
        expected = n * rate
        if not expected <= _MAX_IDS:       # also catches an overflow to inf
            raise ConfigError(f"ids_per_sample[{shown(name)}] = {rate:g} gives {expected:.3g} ids per SparseCore "
                              f"({n} samples each), beyond int64 counts; use a realistic rate")
        L = int(math.floor(expected + 0.5))
        hot = int(math.floor(L * h + 0.5))
        rest = L - hot
        row = np.full(P, rest // P, np.int64)
        row[: rest % P] += 1
        row[hot_partition] += hot
        ids[k] = row
        uniq[k] = np.floor(row * u + 0.5).astype(np.int64)
        raw[k] = L
    dims = ("stack", "device", "sc", "partition")
    return xr.Dataset(
        {
            "ids": (dims, ids, {"long_name": "ids per (source SC, partition) after per-sample dedup", "units": "ids"}),
            "unique_ids": (dims, uniq, {"long_name": "distinct ids per (source SC, partition)", "units": "ids"}),
            "input_ids": (("stack", "device", "sc"), raw, {"long_name": "raw ids per source SC", "units": "ids"}),
        },
        coords={"stack": ("stack", np.array(names, dtype=object)), "device": np.arange(G), "sc": np.arange(S),
                "partition": np.arange(P)},
        attrs={"topology": str(topology), "num_devices": G, "sparsecores_per_device": S, "num_partitions": P,
               "batch_size": batch_size, "samples_per_sc": n,
               "source": "scwork.pipeline.expected_stats (averages, no data)"},
    )
