"""Alpha-beta cost of a schedule, nccl-tests bandwidths, scaling-book references.

Model (How to Scale Your Model and nccl-tests): a message of ``m`` bytes on a link of bandwidth ``W`` (bytes/s,
one direction) and latency ``alpha`` takes ``alpha + m / W``. Messages that share
a directed link in one step serialize; a step lasts as long as its busiest link;
steps run one after the other (bulk-synchronous).

Pipelining (the multi-dimensional all-reduce patent): with ``pipeline_chunks = k`` every transfer is cut into
``k`` segments and step ``s+1`` may start on a segment as soon as step ``s`` has
delivered it, which is how the patent streams shards through the ring (a 1-bit
counter syncs sender and receiver). The estimate is the larger of two bounds:
the critical path, i.e. the flow-shop makespan ``sum_s tau_s + (k - 1) max_s
tau_s`` with ``tau_s`` the step time of one segment, and the busiest link's total
busy time ``sum over its messages of (k alpha + bytes / W)`` (pipelining hides
latency along a chain such as the single path, it cannot make a link that is
busy in every step, as in a ring, any faster). Overlap needs at least two segment buffers per color and direction
(receive one while summing/sending the other); the patent uses about five
shard-sized buffers per color and direction (HBM->VMEM load of the local
contribution, receive from upstream, sum, send downstream, plus one in flight),
``buffers_per_direction``; with a single buffer the segments go one at a time.

Bandwidths as nccl-tests define them: ``algbw = S / t`` with ``S`` the per-node
vector size, and ``busbw = algbw * f`` with ``f = 2(n-1)/n`` for all-reduce and
``(n-1)/n`` for reduce-scatter, all-gather and all-to-all (``n`` nodes per
collective group).
"""

from __future__ import annotations

import math

import numpy as np

from scwork.collectives.schedule import Schedule
from scwork.errors import ConfigError

__all__ = ["SCALING_BOOK_V5E_EXAMPLE", "bandwidths", "bus_factor", "cost", "scaling_book_time"]

#: The worked example of "How to Scale Your Model" (jax-ml scaling-book), sharding
#: chapter, pop quiz 2 "AllGather time": AllGather_Y([E_Y, F]) -> [E, F] on a TPU
#: v5e 2-D mesh {'X': 8, 'Y': 4}, E = 2048, F = 8192 in bfloat16. The array is
#: 2048 * 8192 * 2 = 33,554,432 B ("34 MB"), each device holds a quarter of it
#: ("8.4 MB"). With a full bidirectional ring the book gets 34e6 / 9e10 = 377 us
#: (9e10 B/s: bidirectional ICI bandwidth of one axis, 2 x 4.5e10); v5e has no
#: wraparound on an axis of 4, so it takes 3 hops of 8.4e6 B at 4.5e10 B/s = 560 us
#: (measured: 680 us).
SCALING_BOOK_V5E_EXAMPLE = {
    "shape": (8, 4), "axis": 1, "array_bytes": 2048 * 8192 * 2, "link_bytes_per_s": 4.5e10,
    "time_with_wraparound_s": 377e-6, "time_without_wraparound_s": 560e-6, "measured_s": 680e-6,
    "source": "jax-ml scaling-book, 'Sharded Matrices and How to Multiply Them', pop quiz 2",
}


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor ``f`` for ``n`` ranks.

    Examples
    --------
    >>> from scwork.collectives import bus_factor
    >>> bus_factor("all_reduce", 8), bus_factor("all_gather", 8)
    (1.75, 0.875)
    """
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ConfigError(f"unknown collective {collective!r}")


def bandwidths(nbytes: float, time_s: float, collective: str, n: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in B/s for ``nbytes`` per node moved in ``time_s`` seconds."""
    if time_s <= 0:
        raise ConfigError(f"time must be > 0, got {time_s}")
    algbw = nbytes / time_s
    return algbw, algbw * bus_factor(collective, n)


def _step_link_times(schedule: Schedule, k: int, latency_scale=None):
    """Per (step, link) busy time for one of ``k`` segments: sum over messages."""
    net = schedule.network
    msg = schedule.messages()
    L = net.num_links
    seg = msg["bytes"] / k
    t = net.link_latency[msg["link"]] + seg / net.link_bandwidth[msg["link"]]
    key = msg["step"] * L + msg["link"]
    busy = np.bincount(key, weights=t, minlength=schedule.num_steps * L).reshape(schedule.num_steps, L)
    return busy, msg


def cost(schedule: Schedule, nbytes: int | None = None, *, pipeline_chunks: int = 1,
         buffers_per_direction: int = 5, per_link: bool = False):
    """Time of every step and of the whole schedule under the alpha-beta model.

    Parameters
    ----------
    schedule : Schedule
    nbytes : int, optional
        Bytes per node vector (default: the schedule's ``nbytes``).
    pipeline_chunks : int
        Segments per transfer for pipelining (1: bulk-synchronous steps).
    buffers_per_direction : int
        Shard-sized buffers per color and direction (the multi-dimensional all-reduce patent: about 5). Fewer
        than 2 means no overlap between segments.
    per_link : bool
        Also return ``link_time`` (step, link) and ``utilisation``.

    Returns
    -------
    xarray.Dataset
        ``step_time``, ``cumulative_time`` (dim ``step``, seconds), ``total_time``,
        ``algbw``, ``busbw`` (B/s); ``step_bytes`` (bytes on the busiest link).

    Examples
    --------
    >>> from scwork.collectives import Network, ring_all_reduce, cost
    >>> net = Network.ring(4, link_bandwidth=1e9, link_latency=1e-6)
    >>> c = cost(ring_all_reduce(net, bidirectional=False), nbytes=4_000_000)
    >>> float(c.total_time)  # 6 steps of (1 us + 1 MB / 1 GB/s)
    0.006006
    >>> round(float(c.busbw) / 1e9, 3)  # busbw = link bandwidth for a one-way ring
    0.999
    """
    import xarray as xr

    if nbytes is not None:
        schedule = schedule.with_size(nbytes)
    for name, v, lo in (("pipeline_chunks", pipeline_chunks, 1), ("buffers_per_direction", buffers_per_direction, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}")
    k = int(pipeline_chunks)
    busy, msg = _step_link_times(schedule, k)
    S = schedule.num_steps
    tau = busy.max(axis=1) if S else np.zeros(0)
    if k == 1:
        total = float(tau.sum())
        mode = "bulk-synchronous"
    elif buffers_per_direction >= 2:
        chain = float(tau.sum() + (k - 1) * (tau.max() if S else 0.0))
        link_total = busy.sum(axis=0) * k if S else np.zeros(1)
        total = max(chain, float(link_total.max()) if link_total.size else 0.0)
        mode = "pipelined: max(critical path, busiest link)"
    else:
        total = float(k * tau.sum())
        mode = "segmented, no overlap (1 buffer)"
    # Per-step times reported for the whole transfer (all k segments).
    step_time = tau * k if k > 1 else tau
    L = schedule.network.num_links
    link_bytes = np.bincount(msg["step"] * L + msg["link"], weights=msg["bytes"],
                             minlength=S * L).reshape(S, L)
    seg_max = float(msg["bytes"].max() / k) if len(msg["bytes"]) else 0.0
    directions = 2 if schedule.network.bidirectional else 1
    buffer_bytes = buffers_per_direction * schedule.num_colors * directions * seg_max
    coords = {"step": np.arange(S)}
    ds = xr.Dataset(
        {
            "step_time": ("step", step_time, {"units": "s", "long_name": "time of each step"}),
            "cumulative_time": ("step", np.cumsum(step_time),
                                {"units": "s", "long_name": "time at the end of each step (bulk)"}),
            "step_bytes": ("step", link_bytes.max(axis=1) if S else np.zeros(0),
                           {"units": "B", "long_name": "bytes on the busiest link"}),
        },
        coords=coords,
    )
    n = schedule.group_size
    algbw = schedule.nbytes / total if total > 0 else math.inf
    ds["total_time"] = xr.DataArray(total, attrs={"units": "s", "long_name": "time of the whole schedule",
                                                  "mode": mode})
    ds["algbw"] = xr.DataArray(algbw, attrs={"units": "B/s", "long_name": "algorithm bandwidth",
                                             "definition": "S / t (nccl-tests)"})
    f = bus_factor(schedule.collective, n)
    ds["busbw"] = xr.DataArray(algbw * f, attrs={"units": "B/s", "long_name": "bus bandwidth",
                                                 "definition": f"algbw * f, f = {f:.4g}"})
    if per_link:
        ds["link_time"] = (("step", "link"), busy * k, {"units": "s", "long_name": "busy time of each link"})
        ds["link_bytes"] = (("step", "link"), link_bytes, {"units": "B", "long_name": "bytes on each link"})
        with np.errstate(invalid="ignore", divide="ignore"):
            util = np.where(tau[:, None] > 0, busy / tau[:, None], 0.0)
        ds["utilisation"] = (("step", "link"), util,
                             {"units": "1", "long_name": "busy time / step time"})
        ds = ds.assign_coords(link=np.arange(schedule.network.num_links))
    ds.attrs.update({
        "schedule": schedule.name, "collective": schedule.collective, "network": schedule.network.name,
        "nbytes": schedule.nbytes, "itemsize": schedule.itemsize, "pipeline_chunks": k,
        "buffers_per_direction": int(buffers_per_direction),
        "buffer_bytes_per_node": buffer_bytes,
        "model": "step = max over links of sum over messages (alpha + bytes / bandwidth)",
    })
    return ds


def scaling_book_time(collective: str, nbytes: float, axis_sizes, *, link_bandwidth: float = 4.5e10,
                      latency: float = 1e-6, wraparound: bool = True) -> float:
    """Closed-form ICI time of "How to Scale Your Model" (sharding chapter).

    ``nbytes`` is the size V of the gathered array (all-gather, reduce-scatter,
    all-reduce) and ``axis_sizes`` the mesh axes it is sharded over.
    With wraparound: all-gather ``max(T_min * sum|X_i| / 2, V / (W_bidir * n_axes))``
    with ``W_bidir = 2 x link_bandwidth``; reduce-scatter the same; all-reduce
    twice that. All-to-all on a torus of axes ``X_i`` (``N = prod X_i`` chips):
    ``V * max X_i / (4 N W_bidir)`` (``V / (4 W_bidir)`` on one ring), twice that
    without wraparound. Without wraparound (one axis) all-gather's ring is a line:
    ``(|X| - 1)`` hops of ``V / |X|`` at one link's bandwidth, as the book's v5e
    example computes.

    Examples
    --------
    >>> from scwork.collectives import scaling_book_time
    >>> round(scaling_book_time("all_gather", 34e6, [4]) * 1e6)
    378
    >>> round(scaling_book_time("all_gather", 4 * 8.4e6, [4], wraparound=False) * 1e6)
    560

    The book's all-to-all of bf16[2048, 8192] (33.6 MB) on a ring of 8 v5e chips:

    >>> round(scaling_book_time("all_to_all", 2 * 2048 * 8192, [8]) * 1e6, 1)
    93.2
    """
    sizes = [int(s) for s in axis_sizes]
    if not sizes or any(s < 1 for s in sizes):
        raise ConfigError(f"axis_sizes must be positive, got {axis_sizes}")
    w_bidir = 2 * link_bandwidth
    if collective == "all_to_all":
        # Each of the N = prod(axes) nodes sends V / N^2 to every other node. Along an
        # axis of size A the average distance is A / 4 hops on a ring, so the N links of
        # that axis carry V * A / (4 N) each; axes use separate links and run in
        # parallel: the largest axis is the bottleneck. Without wraparound (a line)
        # the middle link carries twice that.
        # The book's form is bandwidth-only (callers add the per-hop latency they model).
        n = math.prod(sizes)
        return nbytes * max(sizes) / (4 * n * w_bidir) * (1 if wraparound else 2)
    if not wraparound:
        if len(sizes) != 1:
            raise ConfigError("the line (no wraparound) form is for one axis")
        x = sizes[0]
        t = max(latency * (x - 1), (x - 1) * nbytes / x / link_bandwidth)
    else:
        t = max(latency * sum(sizes) / 2, nbytes / (w_bidir * len(sizes)))
    if collective in ("all_gather", "reduce_scatter"):
        return t
    if collective == "all_reduce":
        return 2 * t
    if collective == "all_to_all":
        return nbytes / (4 * w_bidir)
    raise ConfigError(f"unknown collective {collective!r}")
