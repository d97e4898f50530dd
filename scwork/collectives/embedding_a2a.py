"""The embedding lookup's all-to-all from data: bytes between devices and the links they load.

A SparseCore step looks every id of a source SparseCore's slice of the batch up in
the partition that owns it (tables are mod-sharded: id ``i`` lives in partition
``i % P``, partition ``p`` on SparseCore ``p % S`` of device ``p // S``;
[jte] preprocess_sparse_dense_matmul_input). After per-partition
deduplication the owner gathers one row per *unique* id a source asked for and
sends it back; in the backward pass the source sends one gradient row per unique id
to the owner, which applies the optimizer ([sc-guide] §8 describes
the embedding lookup as an all-to-all of the gathered rows forward and of their
gradients backward). So the all-to-all of a step is not uniform: it follows the
ids, and a hot partition makes a hot owner and hot links.

Two functions:

- :func:`embedding_all_to_all`: per (sender device, receiver device) the bytes of
  the forward activations and of the backward gradients, from the statistics of
  :func:`scwork.sharding.compute_stats` (or anything shaped like them);
- :func:`route_all_to_all`: those bytes routed over the chip grid with
  dimension-order routing, giving per-link bytes, the hottest link and the time
  under the alpha-beta model of [scaling-book].

The formula (``u[k, g, s, p]``: unique ids stack ``k`` of source SparseCore ``s``
of device ``g`` sends to partition ``p``; ``w_k`` the stack width, ``b`` the bytes
per element, ``i`` the index bytes per row; minibatches, when present, summed)::

    rows[k, g, h]  = sum over s and over the S partitions p of device h of u[k, g, s, p]
    forward[h, g]  = sum_k rows[k, g, h] * (w_k * b_k + i)      # owner h -> requester g
    backward[g, h] = sum_k rows[k, g, h] * (w_k * b'_k + i)     # requester g -> owner h

``b'`` is the gradient's element size (default ``b``). The diagonal (``g == h``) is
kept: those rows stay on the device and cross no link.

Routing: ICI links join chips, and any device of a chip may use them (as in
:class:`Network`). A message from chip ``a`` to chip ``b`` first moves along
dimension 0 (x) until its x coordinate is ``b``'s, then along y, then z
(dimension-order routing). On a dimension that wraps it goes the shorter way round;
when both ways are equally long (the two ends of an even ring), ``tie="split"``
(default) sends half of the bytes each way, ``tie="positive"`` all of them in the
+1 direction. Two devices of one chip exchange over their on-chip link. The hops of
a pair are the links its route crosses, so ``sum over links of bytes == sum over
pairs of bytes * hops`` exactly.

Time (alpha-beta, per all-to-all): every link streams its bytes at its bandwidth
(``bytes_l / W_l``, the link's busy time); a message pays one latency per hop along
its route (about 1 us per ICI hop, [scaling-book], sharding chapter).
The all-to-all ends when the busiest link has drained and the farthest message has
arrived::

    time = max over links (bytes_l / W_l) + max over pairs with bytes (sum of the latencies of its route)

(the same bound as the alpha-beta model of :func:`scwork.collectives.cost`, with all
messages in one step: links serialize their messages, links work in parallel).

Size limit: the pair matrices hold ``G**2`` numbers (``G`` devices);
:data:`MAX_DEVICE_PAIRS` bounds them (8,192 devices, 512 MiB per float64 matrix)
and larger topologies are refused with a :class:`~scwork.errors.TopologyError`
naming the size, before anything is allocated. Routing itself works on chip pairs
dimension by dimension in blocks, so its temporaries stay small.

Examples
--------
Four v5p chips in a ring, one SparseCore per chip (a made-up variant so the numbers
stay small), one stack of width 8 in float32: device 0 asks partition 2 (device 2)
for 3 unique rows, 32 B each.

>>> import numpy as np, xarray as xr
>>> import scwork
>>> from scwork.collectives import embedding_all_to_all, route_all_to_all
>>> topo = scwork.Topology(4, 1, chip="v5p")
>>> u = np.zeros((1, 4, 1, 4), np.int64); u[0, 0, 0, 2] = 3
>>> stats = xr.Dataset({"unique_ids": (("stack", "device", "sc", "partition"), u)},
...                    coords={"stack": ["t"]})
>>> a2a = embedding_all_to_all(stats, topo, widths=8)
>>> int(a2a["bytes"].sel(source=2, destination=0, direction="forward"))
96
>>> r = route_all_to_all(a2a, topo)
>>> float(r["link_bytes"].sel(direction="forward").sum())   # 96 B x 2 hops: a tie, split both ways
192.0
>>> str(r["hottest_link_label"].sel(direction="forward").values)   # C->D (and B->A) carry 48 B each
'C->D'
>>> round(float(r["time"].sel(direction="forward")) * 1e6, 4)   # 48 B / 9e10 B/s + 2 hops x 1 us
2.0005
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping

import numpy as np

from scwork.collectives.network import ICI_LATENCY_S, ON_CHIP_LATENCY_S, Network
from scwork.errors import ConfigError, InputError, TopologyError

__all__ = ["MAX_DEVICE_PAIRS", "TIE_RULES", "device_hops", "embedding_all_to_all", "route_all_to_all"]

#: Most (sender, receiver) device pairs a pair matrix may hold: 2**26 (8,192 devices,
#: e.g. 8,192 v5p chips or 4,096 dual-chiplet TPU7x chips). One float64 matrix of that
#: size takes 512 MiB, and the statistics it comes from are ``S**2`` times larger.
#: Raise it for a what-if on a bigger machine.
MAX_DEVICE_PAIRS = 2**26

#: What a route does when both ways round a ring are equally long.
TIE_RULES: tuple[str, ...] = ("split", "positive")

#: Elements of the (lines, sources, destinations) block routed at once along one dimension.
_ROUTE_BLOCK = 2**22

_SOURCES = ("[jte] preprocess_sparse_dense_matmul_input (mod sharding, per-partition unique ids); "
            "[sc-guide] §8 (embedding lookup all-to-all of rows and gradients); "
            "[scaling-book] (How to Scale Your Model): ICI alpha-beta cost, ~1 us per hop")


# --------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------
def _check_size(topology) -> None:
    G = topology.num_devices
    if G * G > MAX_DEVICE_PAIRS:
        raise TopologyError(
            f"the all-to-all of {topology} has {G:,} devices, i.e. {G * G:,} device pairs, more than "
            f"scwork.collectives.embedding_a2a.MAX_DEVICE_PAIRS={MAX_DEVICE_PAIRS:,} "
            f"({math.isqrt(MAX_DEVICE_PAIRS):,} devices; {MAX_DEVICE_PAIRS * 8 / 2**20:,.0f} MiB per float64 "
            "pair matrix); model a smaller slice, or raise MAX_DEVICE_PAIRS for a what-if")


def _check_topology(topology) -> None:
    from scwork.hardware.topology import Topology

    if not isinstance(topology, Topology):
        raise TopologyError(f"topology must be a scwork.Topology, got {type(topology).__name__}")
    _check_size(topology)


def _unique_counts(stats, topology) -> tuple[list[str], np.ndarray]:
    """Stack names and unique ids per (stack, device, sc, partition), minibatches summed, limits applied."""
    import xarray as xr

    if not isinstance(stats, xr.Dataset) or "unique_ids" not in stats:
        raise InputError("stats must be the xarray.Dataset of scwork.sharding.compute_stats (with a "
                         f"'unique_ids' variable), got {type(stats).__name__}")
    var = stats["unique_ids"]
    dims = set(var.dims)
    if not {"stack", "device", "sc", "partition"} <= dims or not dims <= {"minibatch", "stack", "device", "sc",
                                                                          "partition"}:
        raise InputError(f"stats['unique_ids'] has dims {var.dims}; expected (stack, device, sc, partition) "
                         "with an optional leading minibatch dim")
    G, S, P = (int(var.sizes[d]) for d in ("device", "sc", "partition"))
    if (G, S, P) != (topology.num_devices, topology.sparsecores_per_device, topology.num_partitions):
        raise InputError(f"stats were computed for {G} devices x {S} SparseCores ({P} partitions) but the "
                         f"topology {topology} has {topology.num_devices} x {topology.sparsecores_per_device}; "
                         "compute the statistics for this topology")
    order = [d for d in ("minibatch", "stack", "device", "sc", "partition") if d in dims]
    uniq = np.asarray(var.transpose(*order).values)
    if not np.issubdtype(uniq.dtype, np.number) or (uniq < 0).any():
        raise InputError("stats['unique_ids'] must hold counts >= 0")
    uniq = uniq.astype(np.int64)
    if uniq.ndim == 4:
        uniq = uniq[None]
    # Counts above a configured limit were dropped (allow_id_dropping): clip as the step model does.
    K = uniq.shape[1]
    for name in ("configured_max_unique_ids_per_partition", "configured_max_ids_per_partition"):
        if name in stats and stats[name].dims == ("stack",):
            limits = np.asarray(stats[name].values, dtype=np.int64)
            for k in range(K):
                if limits[k] >= 0:
                    uniq[:, k] = np.minimum(uniq[:, k], limits[k])
    return [str(s) for s in var["stack"].values], uniq.sum(axis=0)


def _per_stack_int(value, stacks: list[str], name: str, minimum: int) -> np.ndarray:
    if isinstance(value, Mapping):
        missing = [s for s in stacks if s not in value]
        if missing:
            raise ConfigError(f"{name} has no entry for stack(s) {missing}; give one per stack (or one number)")
        values = [value[s] for s in stacks]
    else:
        values = [value] * len(stacks)
    out = []
    for s, v in zip(stacks, values):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
            raise ConfigError(f"{name} of stack {s!r} must be an integer >= {minimum}, got {v!r}")
        out.append(int(v))
    return np.array(out, dtype=np.int64)


def _requester_owner_rows(uniq_kgsp: np.ndarray, S: int) -> np.ndarray:
    """Rows per (stack, requesting device, owning device): partition p lives on device p // S."""
    K, G = uniq_kgsp.shape[:2]
    return uniq_kgsp.reshape(K, G, S, G, S).sum(axis=(2, 4))


# --------------------------------------------------------------------------------------
# the byte matrix
# --------------------------------------------------------------------------------------
def embedding_all_to_all(stats, topology, *, widths, dtype_bytes=4, gradient_dtype_bytes=None,
                         index_bytes: int = 0):
    """Bytes every device sends to every other in the embedding lookup's all-to-all.

    Parameters
    ----------
    stats : xarray.Dataset
        :func:`scwork.sharding.compute_stats` output (``unique_ids`` with dims
        stack, device, sc, partition and an optional leading minibatch, summed).
        Counts above ``configured_max_ids_per_partition`` /
        ``configured_max_unique_ids_per_partition`` are clipped (dropped ids are
        not looked up).
    topology : scwork.Topology
    widths : int or dict of str -> int
        Elements per row of every stack (one number for all stacks).
    dtype_bytes : int or dict, default 4
        Bytes per element of the table rows sent forward (4: float32).
    gradient_dtype_bytes : int or dict, optional
        Bytes per element of the gradients sent backward (default ``dtype_bytes``).
    index_bytes : int, default 0
        Extra bytes per row on the wire (e.g. the row's position).

    Returns
    -------
    xarray.Dataset
        ``bytes`` (source, destination, direction), int64, units bytes: ``source``
        is the device that *sends* (the owner forward, the requester backward),
        ``destination`` the one that receives; ``direction`` is ``forward``
        (activation rows) or ``backward`` (gradients). Also ``rows`` (source,
        destination): unique rows device ``source`` requests from device
        ``destination``; ``stack_bytes`` (stack, direction); ``row_bytes`` (stack,
        direction); ``sent_bytes``, ``received_bytes`` (device, direction) without
        the diagonal; ``remote_bytes`` (direction): bytes that leave their device.
        The formula and sources are in the attrs.

    Raises
    ------
    InputError
        Statistics that are not compute_stats output or do not match the topology.
    ConfigError
        Missing or non-positive widths, byte sizes.
    TopologyError
        Not a Topology, no SparseCore, or more device pairs than :data:`MAX_DEVICE_PAIRS`.

    Examples
    --------
    >>> import numpy as np, xarray as xr, scwork
    >>> from scwork.collectives import embedding_all_to_all
    >>> u = np.array([[[[1, 2]], [[0, 5]]]])     # (stack, device, sc, partition): 2 chips, 1 SC each
    >>> stats = xr.Dataset({"unique_ids": (("stack", "device", "sc", "partition"), u)}, coords={"stack": ["t"]})
    >>> a2a = embedding_all_to_all(stats, scwork.Topology(2, 1), widths=4, dtype_bytes=2)
    >>> a2a["bytes"].sel(direction="forward").values.tolist()     # device 1 sends 2 rows of 8 B to device 0
    [[8, 0], [16, 40]]
    >>> a2a["bytes"].sel(direction="backward").values.tolist()
    [[8, 16], [0, 40]]
    """
    import xarray as xr

    _check_topology(topology)
    if topology.num_partitions < 1:
        raise TopologyError(f"topology {topology} has no SparseCore: there is no embedding all-to-all")
    stacks, uniq = _unique_counts(stats, topology)
    w = _per_stack_int(widths, stacks, "widths", 1)
    b = _per_stack_int(dtype_bytes, stacks, "dtype_bytes", 1)
    gb = b if gradient_dtype_bytes is None else _per_stack_int(gradient_dtype_bytes, stacks,
                                                               "gradient_dtype_bytes", 1)
    if isinstance(index_bytes, bool) or not isinstance(index_bytes, numbers.Integral) or index_bytes < 0:
        raise ConfigError(f"index_bytes must be an integer >= 0, got {index_bytes!r}")
    row = np.stack([w * b + int(index_bytes), w * gb + int(index_bytes)], axis=1)     # (K, 2)
    largest = int(uniq.sum()) * int(row.max(initial=0))
    if largest > np.iinfo(np.int64).max:
        raise ConfigError(f"{int(uniq.sum()):,} unique ids x {int(row.max())} bytes per row does not fit in int64; "
                          "the widths or byte sizes are not real sizes")
    S = topology.sparsecores_per_device
    G = topology.num_devices
    rows_k = _requester_owner_rows(uniq, S)                                      # (K, G req, G own)
    rows = rows_k.sum(axis=0)
    forward = np.tensordot(row[:, 0], rows_k, axes=1).T                          # owner -> requester
    backward = np.tensordot(row[:, 1], rows_k, axes=1)                           # requester -> owner
    pair = np.stack([forward, backward], axis=-1).astype(np.int64)               # (source, destination, dir)
    local = np.stack([np.diag(forward), np.diag(backward)], axis=-1)
    sent = pair.sum(axis=1) - local
    received = pair.sum(axis=0) - local
    stack_rows = rows_k.sum(axis=(1, 2))
    directions = np.array(["forward", "backward"], dtype=object)
    byte_units = {"units": "bytes"}
    return xr.Dataset(
        {
            "bytes": (("source", "destination", "direction"), pair,
                      {**byte_units, "long_name": "bytes the source device sends to the destination device"}),
            "rows": (("source", "destination"), rows,
                     {"units": "rows", "long_name": "unique rows the source device requests from the destination"}),
            "stack_bytes": (("stack", "direction"), stack_rows[:, None] * row,
                            {**byte_units, "long_name": "bytes of each stack (all pairs, local ones included)"}),
            "row_bytes": (("stack", "direction"), row, {**byte_units, "long_name": "bytes per row on the wire"}),
            "sent_bytes": (("device", "direction"), sent,
                           {**byte_units, "long_name": "bytes the device sends to other devices"}),
            "received_bytes": (("device", "direction"), received,
                               {**byte_units, "long_name": "bytes the device receives from other devices"}),
            "remote_bytes": ("direction", sent.sum(axis=0),
                             {**byte_units, "long_name": "bytes that leave their device"}),
        },
        coords={"source": np.arange(G), "destination": np.arange(G), "device": np.arange(G),
                "direction": directions, "stack": np.array(stacks, dtype=object)},
        attrs={
            "long_name": "embedding lookup all-to-all", "units": "bytes", "topology": str(topology),
            "formula": "rows[k,g,h] = sum_{s, p on device h} unique_ids[k,g,s,p]; forward[h->g] = "
                       "sum_k rows[k,g,h] * (width_k * dtype_bytes_k + index_bytes); backward[g->h] = "
                       "sum_k rows[k,g,h] * (width_k * gradient_dtype_bytes_k + index_bytes)",
            "sources": _SOURCES,
        },
    )


# --------------------------------------------------------------------------------------
# routing
# --------------------------------------------------------------------------------------
def _ring_distances(X: int, wrap: bool) -> np.ndarray:
    i = np.arange(X)
    delta = np.abs(i[:, None] - i[None, :])
    return np.minimum(delta, X - delta) if wrap else delta


def _arc_loads(start: np.ndarray, hops: np.ndarray, weight: np.ndarray, lines: np.ndarray, num_lines: int,
               X: int) -> np.ndarray:
    """Bytes on the +1 links of ``num_lines`` rings of ``X`` from arcs ``start .. start + hops - 1``.

    Difference array on a doubled ring (an arc never wraps more than once), folded back.
    """
    n2 = 2 * X
    diff = np.bincount((lines * n2 + start).ravel(), weights=weight.ravel(), minlength=num_lines * n2)
    diff -= np.bincount((lines * n2 + start + hops).ravel(), weights=weight.ravel(), minlength=num_lines * n2)
    cum = np.cumsum(diff.reshape(num_lines, n2), axis=1)
    return cum[:, :X] + cum[:, X:]


def _route_dimension(R: np.ndarray, X: int, wrap: bool, tie: str) -> tuple[np.ndarray, np.ndarray]:
    """Loads of the +1 and -1 links leaving each position of rings (wrap) or lines along one dimension.

    ``R[line, i, j]``: bytes that travel from position ``i`` to ``j`` of ``line``.
    Returns two (lines, X) arrays; ``minus[line, p]`` is the link ``p -> p - 1``.
    """
    num_lines = R.shape[0]
    plus = np.zeros((num_lines, X))
    minus = np.zeros((num_lines, X))
    step = max(1, _ROUTE_BLOCK // max(1, num_lines * X))
    j = np.arange(X)[None, None, :]
    lines = np.arange(num_lines)[:, None, None]
    for lo in range(0, X, step):
        i = np.arange(lo, min(X, lo + step))[None, :, None]
        w = R[:, lo:lo + i.shape[1], :]
        up = (j - i) % X                      # hops going +1
        down = (i - j) % X                    # hops going -1
        if wrap:
            w_up = np.where(up < down, w, 0.0)
            w_down = np.where(down < up, w, 0.0)
            tied = (up == down) & (up > 0)
            if tie == "split":
                w_up = w_up + np.where(tied, w / 2, 0.0)
                w_down = w_down + np.where(tied, w / 2, 0.0)
            else:
                w_up = w_up + np.where(tied, w, 0.0)
        else:
            w_up = np.where(j > i, w, 0.0)
            w_down = np.where(j < i, w, 0.0)
        shape = w.shape
        plus += _arc_loads(np.broadcast_to(i, shape), np.broadcast_to(up, shape), w_up,
                           np.broadcast_to(lines, shape), num_lines, X)
        # -1 moves are +1 moves on the mirrored ring q = X - 1 - p.
        mirrored = _arc_loads(np.broadcast_to(X - 1 - i, shape), np.broadcast_to(down, shape), w_down,
                              np.broadcast_to(lines, shape), num_lines, X)
        minus += mirrored[:, ::-1]
    return plus, minus


class _Router:
    """Dimension-order routing of (device x device) byte matrices over one topology's network."""

    def __init__(self, shape, wraparound, devices_per_chip, chip, link_bandwidth, link_latency,
                 on_chip_bandwidth, on_chip_latency, tie):
        self.net = Network.grid(shape, wraparound, cores_per_chip=devices_per_chip, chip=chip,
                                link_bandwidth=link_bandwidth, link_latency=link_latency,
                                on_chip_bandwidth=on_chip_bandwidth, on_chip_latency=on_chip_latency)
        net = self.net
        self.tie = tie
        self.k = devices_per_chip
        C, k = net.num_chips, self.k
        chips = np.arange(C)
        self.dims = []
        for d, X in enumerate(net.shape):
            if X == 1:
                continue
            tables = []
            for sign in (1, -1):
                nbr = net.chip_coords.copy()
                nbr[:, d] += sign
                ok = np.ones(C, bool) if net.wraparound[d] else (nbr[:, d] >= 0) & (nbr[:, d] < X)
                nbr[:, d] %= X
                to = np.ravel_multi_index(tuple(nbr.T), net.shape)
                table = np.full(C, -1, np.int64)
                table[ok] = net.link_ids(chips[ok] * k, to[ok] * k)
                tables.append(table)
            line_chips = np.moveaxis(chips.reshape(net.shape), d, -1).reshape(-1, X)
            self.dims.append((d, X, net.wraparound[d], line_chips, tables[0], tables[1],
                              _ring_distances(X, net.wraparound[d])))
        if k > 1:
            nodes = chips[:, None, None] * k
            a = np.arange(k)[None, :, None]
            b = np.arange(k)[None, None, :]
            src = np.broadcast_to(nodes + a, (C, k, k))
            dst = np.broadcast_to(nodes + b, (C, k, k))
            off = np.broadcast_to(a != b, (C, k, k))
            self.on_chip = np.full((C, k, k), -1, np.int64)
            self.on_chip[off] = net.link_ids(src[off], dst[off])
        self.ici_latency = net.link_classes["ici"].latency
        self.on_chip_latency = net.link_classes["on_chip"].latency if k > 1 else 0.0

    def link_bytes(self, matrix: np.ndarray) -> tuple[np.ndarray, float]:
        """Bytes per link and the route latency of the farthest pair with bytes.

        ``matrix[g, h]``: bytes device ``g`` sends to device ``h``.
        """
        net, k = self.net, self.k
        C, shape, n = net.num_chips, net.shape, net.ndim
        loads = np.zeros(net.num_links)
        blocks = np.asarray(matrix, dtype=float).reshape(C, k, C, k)
        T = blocks.sum(axis=(1, 3)) if k > 1 else blocks.reshape(C, C).copy()
        np.fill_diagonal(T, 0.0)                         # same chip: no ICI hop
        T6 = T.reshape(shape + shape)
        for d, X, wrap, line_chips, plus_link, minus_link, _ in self.dims:
            # Along dimension d a message sits at (destination coords < d, x, source coords > d):
            # sum out the source coords < d and the destination coords > d.
            R = T6.sum(axis=tuple(range(d)) + tuple(n + i for i in range(d + 1, n)))
            na = n - d
            R = R.transpose(list(range(na, na + d)) + list(range(1, na)) + [0, na + d]).reshape(-1, X, X)
            plus, minus = _route_dimension(R, X, wrap, self.tie)
            for link, load in ((plus_link, plus), (minus_link, minus)):
                ids = link[line_chips]
                used = load != 0
                if (ids[used] < 0).any():   # pragma: no cover - routes never leave a mesh
                    raise TopologyError("a route left the grid: dimension-order routing is broken")
                loads += np.bincount(ids[used], weights=load[used], minlength=net.num_links)
        latency = 0.0
        if self.dims:
            step = max(1, _ROUTE_BLOCK // C)
            for lo in range(0, C, step):
                rows = slice(lo, min(C, lo + step))
                hops = sum(dist[net.chip_coords[rows, d][:, None], net.chip_coords[None, :, d]]
                           for d, _, _, _, _, _, dist in self.dims)
                sent = T[rows] > 0
                if sent.any():
                    latency = max(latency, float(hops[sent].max()) * self.ici_latency)
        if k > 1:
            on = np.einsum("iaib->iab", blocks)
            used = (self.on_chip >= 0) & (on != 0)
            if used.any():
                loads += np.bincount(self.on_chip[used], weights=on[used], minlength=net.num_links)
                latency = max(latency, self.on_chip_latency)
        return loads, latency

    def time(self, loads: np.ndarray, latency: float) -> float:
        if not loads.any():
            return 0.0
        return float((loads / self.net.link_bandwidth).max()) + latency

    def hops(self) -> np.ndarray:
        """Links crossed by the route of every (device, device) pair."""
        net, k = self.net, self.k
        C = net.num_chips
        chip_hops = np.zeros((C, C), np.int64)
        for d, _, _, _, _, _, dist in self.dims:
            chip_hops += dist[net.chip_coords[:, d][:, None], net.chip_coords[None, :, d]]
        chip = np.arange(net.num_nodes) // k
        out = chip_hops[chip[:, None], chip[None, :]]
        out += (chip[:, None] == chip[None, :]) & (np.arange(net.num_nodes)[:, None] != np.arange(net.num_nodes))
        return out


@functools.lru_cache(maxsize=16)
def _cached_router(shape, wraparound, devices_per_chip, chip, link_bandwidth, link_latency, on_chip_bandwidth,
                   on_chip_latency, tie) -> _Router:
    return _Router(shape, wraparound, devices_per_chip, chip, link_bandwidth, link_latency, on_chip_bandwidth,
                   on_chip_latency, tie)


def _router(topology, *, chip=None, link_bandwidth=None, link_latency=ICI_LATENCY_S, on_chip_bandwidth=None,
            on_chip_latency=ON_CHIP_LATENCY_S, tie="split") -> _Router:
    _check_topology(topology)
    if tie not in TIE_RULES:
        raise ConfigError(f"tie must be one of {TIE_RULES}, got {tie!r}")
    if chip is None:
        chip = topology.chip
    if chip is not None and not isinstance(chip, str):
        # A chip object (e.g. scwork.hardware.override): its own numbers, the catalog's name.
        if link_bandwidth is None:
            link_bandwidth = float(chip.ici_link_bytes_per_s)
        if on_chip_bandwidth is None and topology.devices_per_chip > 1:
            on_chip_bandwidth = float(chip.hbm_bandwidth_bytes_per_s)
        chip = chip.name
    return _cached_router(tuple(topology.shape), tuple(topology.wraparound), topology.devices_per_chip, chip,
                          link_bandwidth, link_latency, on_chip_bandwidth, on_chip_latency, tie)


def device_hops(topology, **network_kwargs) -> np.ndarray:
    """Links the route of every (sender device, receiver device) pair crosses.

    ICI hops along every dimension (the shorter way round on a wrapping one) plus
    one on-chip hop between two devices of one chip; 0 on the diagonal.

    Parameters
    ----------
    topology : scwork.Topology
    **network_kwargs
        As :func:`route_all_to_all` (``chip``, ``tie``...).

    Examples
    --------
    >>> import scwork
    >>> from scwork.collectives import device_hops
    >>> device_hops(scwork.Topology(4, 1)).tolist()        # a ring of 4
    [[0, 1, 2, 1], [1, 0, 1, 2], [2, 1, 0, 1], [1, 2, 1, 0]]
    """
    return _router(topology, **network_kwargs).hops()


def _pair_matrices(a2a, G: int) -> tuple[list[np.ndarray], np.ndarray]:
    import xarray as xr

    if isinstance(a2a, xr.Dataset):
        if "bytes" not in a2a:
            raise InputError("a2a has no 'bytes' variable: pass the output of embedding_all_to_all")
        a2a = a2a["bytes"]
    if isinstance(a2a, xr.DataArray):
        if set(a2a.dims) != {"source", "destination", "direction"}:
            raise InputError(f"a2a['bytes'] has dims {a2a.dims}; expected (source, destination, direction)")
        arr = a2a.transpose("direction", "source", "destination").values
        directions = np.asarray(a2a["direction"].values, dtype=object) if "direction" in a2a.coords \
            else np.arange(arr.shape[0]).astype(str).astype(object)
    else:
        arr = np.asarray(a2a)
        if arr.ndim != 2:
            raise InputError(f"a byte matrix must be 2-D (sender device, receiver device), got shape {arr.shape}")
        arr = arr[None]
        directions = np.array(["all_to_all"], dtype=object)
    if arr.shape[1:] != (G, G):
        raise InputError(f"the byte matrix is {arr.shape[1]} x {arr.shape[2]} but the topology has {G} devices")
    if not np.issubdtype(arr.dtype, np.number) or not np.isfinite(arr).all() or (arr < 0).any():
        raise InputError("the byte matrix must hold finite byte counts >= 0")
    return list(arr), directions


def _links_dataset(router: _Router, loads: np.ndarray, latency: np.ndarray, time: np.ndarray, directions,
                   attrs: dict):
    """Per-link bytes and busy times, the hottest link and the time, as a Dataset (loads: (L, D))."""
    import xarray as xr

    net = router.net
    busy = loads / net.link_bandwidth[:, None]
    L = net.num_links
    hottest = busy.argmax(axis=0) if L else np.zeros(loads.shape[1], np.int64)
    total = loads.sum(axis=0)
    mean_busy = busy.mean(axis=0) if L else np.zeros(loads.shape[1])
    hot_bytes = loads[hottest, np.arange(loads.shape[1])] if L else np.zeros(loads.shape[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(total > 0, hot_bytes / np.where(total > 0, total, 1), 0.0)
        imbalance = np.where(mean_busy > 0, busy.max(axis=0, initial=0) / np.where(mean_busy > 0, mean_busy, 1), 1.0)
    labels = np.array([net.link_label(int(h)) if L and total[j] > 0 else "none" for j, h in enumerate(hottest)],
                      dtype=object)
    byte_units = {"units": "bytes"}
    return xr.Dataset(
        {
            "link_bytes": (("link", "direction"), loads, {**byte_units, "long_name": "bytes crossing the link"}),
            "link_time": (("link", "direction"), busy,
                          {"units": "s", "long_name": "link busy time, bytes / bandwidth"}),
            "bandwidth": ("link", net.link_bandwidth, {"units": "B/s", "long_name": "link bandwidth, one direction"}),
            "time": ("direction", time, {"units": "s", "long_name": "all-to-all time (alpha-beta)"}),
            "latency_time": ("direction", latency,
                             {"units": "s", "long_name": "latency of the farthest route with bytes"}),
            "hottest_link": ("direction", hottest, {"units": "", "long_name": "link with the longest busy time"}),
            "hottest_link_label": ("direction", labels, {"units": "", "long_name": "hottest link, chip -> chip"}),
            "hottest_link_bytes": ("direction", hot_bytes, {**byte_units, "long_name": "bytes on the hottest link"}),
            "hottest_link_share": ("direction", share,
                                   {"units": "1", "long_name": "hottest link's bytes / bytes on all links"}),
            "link_imbalance": ("direction", imbalance,
                               {"units": "1", "long_name": "max / mean link busy time (1: perfectly even)"}),
            "total_link_bytes": ("direction", total,
                                 {**byte_units, "long_name": "bytes summed over links (= sum of bytes x hops)"}),
        },
        coords={"link": np.arange(L), "direction": np.asarray(directions, dtype=object),
                "source_chip": ("link", net.link_src_chip), "destination_chip": ("link", net.link_dst_chip),
                "kind": ("link", net.link_kind), "dim": ("link", net.link_dim), "sign": ("link", net.link_sign)},
        attrs={"network": net.name, "tie": router.tie,
               "routing": "dimension order (x, then y, then z); the shorter way round on a wrapping dimension; "
                          + ("ties split half each way" if router.tie == "split" else "ties go +1"),
               "model": "time = max over links (bytes / bandwidth) + max over routed pairs (hops x latency)",
               "sources": _SOURCES, **attrs},
    )


def route_all_to_all(a2a, topology, *, chip=None, link_bandwidth: float | None = None,
                     link_latency: float = ICI_LATENCY_S, on_chip_bandwidth: float | None = None,
                     on_chip_latency: float = ON_CHIP_LATENCY_S, tie: str = "split"):
    """Route an all-to-all's byte matrix over the chip grid: bytes per link, hottest link, time.

    Parameters
    ----------
    a2a : xarray.Dataset, xarray.DataArray or array
        :func:`embedding_all_to_all` output (every direction is routed), its
        ``bytes``, or one ``(sender device, receiver device)`` matrix.
    topology : scwork.Topology
        Chip grid, wraparound and devices per chip.
    chip : str or chip object, optional
        Catalog chip for the link bandwidths (default ``topology.chip``, else
        :data:`~scwork.collectives.DEFAULT_CHIP`).
    link_bandwidth, link_latency, on_chip_bandwidth, on_chip_latency : float, optional
        As :meth:`Network.grid` (ICI: the catalog's ``ici_link_bytes_per_s``, 1 us per hop).
    tie : {"split", "positive"}
        Where a message goes when both ways round a ring are equally long.

    Returns
    -------
    xarray.Dataset
        ``link_bytes``, ``link_time`` (link, direction); ``bandwidth`` (link);
        ``time``, ``latency_time``, ``hottest_link``, ``hottest_link_label``,
        ``hottest_link_bytes``, ``hottest_link_share``, ``link_imbalance``,
        ``total_link_bytes`` (direction); link coords ``source_chip``,
        ``destination_chip``, ``kind``, ``dim``, ``sign`` (the link ids of
        :class:`Network.from_topology`).

    Raises
    ------
    InputError
        A matrix of the wrong shape, negative or non-finite bytes.
    TopologyError
        More device pairs than :data:`MAX_DEVICE_PAIRS`.
    ConfigError
        Unknown ``tie``.

    Examples
    --------
    A 2x2 mesh (no wraparound): chip (0,0) sends 1 MB to chip (1,1), x first then y.

    >>> import numpy as np, scwork
    >>> from scwork.collectives import route_all_to_all
    >>> topo = scwork.Topology(4, 1, chip="v5p", shape=(2, 2))
    >>> m = np.zeros((4, 4)); m[0, 3] = 1e6
    >>> r = route_all_to_all(m, topo)
    >>> [(int(r.source_chip[i]), int(r.destination_chip[i])) for i in np.flatnonzero(r.link_bytes[:, 0].values)]
    [(0, 2), (2, 3)]
    """
    G = topology.num_devices if hasattr(topology, "num_devices") else None
    router = _router(topology, chip=chip, link_bandwidth=link_bandwidth, link_latency=link_latency,
                     on_chip_bandwidth=on_chip_bandwidth, on_chip_latency=on_chip_latency, tie=tie)
    matrices, directions = _pair_matrices(a2a, G)
    loads, latency, time = [], [], []
    for m in matrices:
        lb, lat = router.link_bytes(m)
        loads.append(lb)
        latency.append(lat if lb.any() else 0.0)
        time.append(router.time(lb, lat))
    return _links_dataset(router, np.stack(loads, axis=1), np.array(latency), np.array(time), directions,
                          {"topology": str(topology)})
