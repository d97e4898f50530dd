"""Alpha-beta cost of a schedule, with nccl-tests bandwidths ([nccl-tests], [scaling-book]).

Model ([scaling-book], "Sharded Matrices"; [nccl-tests] PERFORMANCE.md): a message of
``m`` bytes on a link of bandwidth ``W`` (bytes/s, one direction) and latency ``alpha``
takes ``alpha + m / W``. Messages that share a directed link in one step serialize; a
step lasts as long as its busiest link; steps run one after the other
(bulk-synchronous).

Pipelining ([md-allreduce]): with ``pipeline_chunks = k`` every transfer is cut into
``k`` segments and step ``s+1`` may start on a segment as soon as step ``s`` has
delivered it, which is how [md-allreduce] streams shards through the ring (a 1-bit
counter syncs sender and receiver). The estimate is the larger of two bounds:
the critical path, i.e. the flow-shop makespan ``sum_s tau_s + (k - 1) max_s
tau_s`` with ``tau_s`` the step time of one segment, and the busiest link's total
busy time ``sum over its messages of (k alpha + bytes / W)`` (pipelining hides
latency along a chain such as the single path, it cannot make a link that is
busy in every step, as in a ring, any faster). Overlap needs at least two segment buffers per color and direction
(receive one while summing/sending the other); [md-allreduce] uses about five
shard-sized buffers per color and direction (HBM->VMEM load of the local
contribution, receive from upstream, sum, send downstream, plus one in flight),
``buffers_per_direction``; with a single buffer the segments go one at a time.

Bandwidths as nccl-tests define them ([nccl-tests] PERFORMANCE.md): ``algbw = S / t`` with ``S`` the per-node
vector size, and ``busbw = algbw * f`` with ``f = 2(n-1)/n`` for all-reduce and
``(n-1)/n`` for reduce-scatter, all-gather and all-to-all (``n`` nodes per
collective group).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from scwork._validate import integer, shown
from scwork.collectives.schedule import Schedule, _check_matrix
from scwork.errors import ConfigError

__all__ = ["SCALING_BOOK_V5E_EXAMPLE", "bandwidths", "bus_factor", "cost", "phase_summary", "scaling_book_time"]

#: Most segments per transfer ``cost(pipeline_chunks=...)`` models (2**31 - 1).
MAX_PIPELINE_CHUNKS = 2**31 - 1

#: The worked example of [scaling-book], sharding
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
    n = integer("n (ranks)", n, minimum=1)
    if not isinstance(collective, str):
        raise ConfigError(f"collective must be a name such as 'all_reduce', got {shown(collective)}")
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ConfigError(f"unknown collective {shown(collective)}; use all_reduce, reduce_scatter, all_gather, "
                      "all_to_all, broadcast or reduce")


def _finite_number(name: str, value, *, positive: bool = False) -> float:
    """``value`` as a float, or a ConfigError unless it is a finite real number (> 0 with ``positive``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        raise ConfigError(f"{name} must be a number, got {shown(value)}")
    try:
        number = float(value)
    except OverflowError:           # an int beyond float range
        raise ConfigError(f"{name} = {shown(value)} is beyond float range") from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise ConfigError(f"{name} must be a finite number {'>' if positive else '>='} 0, got {shown(value)}")
    return number


def _finite_time(seconds: float) -> float:
    if not math.isfinite(seconds):
        raise ConfigError(f"the time overflows float64 ({seconds}): nbytes or latency is too large to model")
    return seconds


def bandwidths(nbytes: float, time_s: float, collective: str, n: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in B/s for ``nbytes`` per node moved in ``time_s`` seconds."""
    time_s = _finite_number("time_s", time_s, positive=True)
    algbw = _finite_number("nbytes", nbytes) / time_s
    if not math.isfinite(algbw):
        raise ConfigError(f"{shown(nbytes)} bytes in {shown(time_s)} s is beyond float64 (B/s); check the units "
                          "of nbytes (bytes) and time_s (seconds)")
    return algbw, algbw * bus_factor(collective, n)


def _link_params(schedule: Schedule):
    used = schedule.used_links
    net = schedule.network
    return net.link_latency[used], net.link_bandwidth[used]


def cost(schedule: Schedule, nbytes: int | None = None, *, pipeline_chunks: int = 1,
         buffers_per_direction: int = 5, per_link: bool = False, link_summary: bool = False):
    """Time of every step and of the whole schedule under the alpha-beta model.

    Streams over the steps (:meth:`Schedule.link_loads`): memory stays bounded
    however many transfers the schedule has.

    Parameters
    ----------
    schedule : Schedule
    nbytes : int, optional
        Bytes per node vector (default: the schedule's ``nbytes``).
    pipeline_chunks : int
        Segments per transfer for pipelining (1: bulk-synchronous steps). At most
        :data:`MAX_PIPELINE_CHUNKS`; every segment pays the link latency.
    buffers_per_direction : int
        Shard-sized buffers per color and direction ([md-allreduce]: about 5). Fewer
        than 2 means no overlap between segments.
    per_link : bool
        Also return ``link_time``, ``link_bytes`` and ``utilisation`` per (step,
        link): refused above :data:`~scwork.collectives.schedule.MAX_EXPLICIT_TRANSFERS`
        cells (use ``link_summary``).
    link_summary : bool
        Also return per-step ``busy_links``, ``mean_utilisation``, ``busiest_link``
        and per-link totals ``link_total_bytes``, ``link_busy_time`` and
        ``link_utilisation`` (busy time / total time): what ``per_link`` shows,
        summed, for any size.

    Returns
    -------
    xarray.Dataset
        ``step_time``, ``cumulative_time`` (dim ``step``, seconds), ``total_time``,
        ``algbw``, ``busbw`` (B/s); ``step_bytes`` (bytes on the busiest link).

    Raises
    ------
    ConfigError
        Bad ``pipeline_chunks`` (above :data:`MAX_PIPELINE_CHUNKS`) or
        ``buffers_per_direction``, a size above
        :data:`~scwork.collectives.schedule.MAX_NBYTES`, a schedule with more than
        :data:`~scwork.collectives.schedule.MAX_STREAM_RECORDS` records, or a
        ``per_link`` matrix too large.

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
    if nbytes is not None:
        schedule = schedule.with_size(nbytes)
    k = _segments(pipeline_chunks, buffers_per_direction)
    if per_link:
        _check_matrix(schedule, schedule.network.num_links)
    loads = _step_loads(schedule, k, per_link=per_link, link_summary=link_summary)
    with np.errstate(over="ignore"):            # an overflow is refused just below, with a typed error
        total, mode = _total_time(loads, k, buffers_per_direction)
    if not math.isfinite(total):
        # Each step's time fits float64 but their sum (or k segments of it) does not.
        raise ConfigError(f"the total time of {schedule.name} on {schedule.network.name} overflows float64 "
                          f"({total}): check the network's link bandwidths and latencies (bytes/s and seconds) "
                          "and pipeline_chunks")
    return _cost_dataset(schedule, loads, total, mode, k, buffers_per_direction,
                         per_link=per_link, link_summary=link_summary)


def _segments(pipeline_chunks, buffers_per_direction) -> int:
    """``pipeline_chunks`` as the number of segments per transfer, after checking both knobs."""
    for name, v, lo in (("pipeline_chunks", pipeline_chunks, 1), ("buffers_per_direction", buffers_per_direction, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}")
    k = int(pipeline_chunks)
    if k > MAX_PIPELINE_CHUNKS:
        raise ConfigError(f"pipeline_chunks must be <= MAX_PIPELINE_CHUNKS={MAX_PIPELINE_CHUNKS:,} (segments of a "
                          f"transfer, each paying the link latency), got {shown(pipeline_chunks)}")
    return k


@dataclass
class _Loads:
    """What streaming over a schedule's steps gathers: one segment's time per step, and per-link sums."""

    tau: np.ndarray                 # step time of one segment (s)
    step_bytes: np.ndarray          # bytes on the busiest link of each step
    busy_links: np.ndarray          # links busy in each step (link_summary)
    util_sum: np.ndarray            # sum over links of busy time / step time (link_summary)
    busiest: np.ndarray             # busiest link of each step (link_summary)
    link_busy: np.ndarray           # busy time of each used link over all steps, one segment
    link_total_bytes: np.ndarray    # bytes of each used link over all steps
    seg_max: float = 0.0            # largest segment of any transfer (bytes)
    busy_full: np.ndarray | None = None    # (step, link) busy time (per_link)
    bytes_full: np.ndarray | None = None   # (step, link) bytes (per_link)


def _step_loads(schedule: Schedule, k: int, *, per_link: bool, link_summary: bool) -> _Loads:
    """Stream over the steps (:meth:`Schedule.link_loads`) and time every step, in bounded memory."""
    net = schedule.network
    S, L = schedule.num_steps, net.num_links
    used = schedule.used_links
    lat, bw = _link_params(schedule)
    loads = _Loads(tau=np.zeros(S), step_bytes=np.zeros(S), busy_links=np.zeros(S, dtype=np.int64),
                   util_sum=np.zeros(S), busiest=np.full(S, -1, dtype=np.int64),
                   link_busy=np.zeros(len(used)), link_total_bytes=np.zeros(len(used)))
    if per_link:
        loads.busy_full, loads.bytes_full = np.zeros((S, L)), np.zeros((S, L))
    # One link class (single-core chips): a link's busy time grows with its bytes, so
    # the busiest link of a step is the one with the most bytes and sums over links
    # can be taken over bytes and message counts: a few passes over each batch.
    uniform = bool(len(used) and not per_link and net.cores_per_chip == 1 and (lat == lat[0]).all()
                   and (bw == bw[0]).all())
    link_messages = np.zeros(len(used))
    for s0, s1, nbytes_, msgs, largest, cols in schedule.link_loads():
        if not nbytes_.shape[1]:
            continue
        # Sparse batches carry only the links they use: ``cols`` (local link indices).
        sel = slice(None) if cols is None else cols
        if largest is not nbytes_:
            loads.seg_max = max(loads.seg_max, float(largest.max()) / k)
        batch = (s0, s1, nbytes_, msgs, largest is nbytes_, sel, used if cols is None else used[cols])
        if uniform:
            _uniform_batch(loads, batch, k, lat[0], bw[0], link_messages, link_summary)
        else:
            _general_batch(loads, batch, k, lat[sel], bw[sel], per_link, link_summary)
    if uniform:
        with np.errstate(over="ignore"):
            loads.link_busy = lat[0] * link_messages + loads.link_total_bytes / (k * bw[0])
    if not np.isfinite(loads.tau).all():
        # Link times past float64 (a bandwidth of 5e-324 B/s, a latency of 1e300 s).
        raise ConfigError(f"the step times of {schedule.name} on {net.name} overflow float64: check the "
                          "network's link bandwidths and latencies (bytes/s and seconds)")
    return loads


def _uniform_batch(loads: _Loads, batch, k: int, lat: float, bw: float, link_messages: np.ndarray,
                   link_summary: bool) -> None:
    """One batch of steps when every link has the same latency and bandwidth."""
    s0, s1, nbytes_, msgs, largest_is_bytes, sel, used = batch
    on = msgs if msgs.dtype == bool else msgs > 0
    most = nbytes_.max(axis=1)
    n_on = np.count_nonzero(on, axis=1)
    # Busy time of a link in a step: every message costs alpha + its bytes / W
    # (its segment's, when pipelined), from integer totals: independent of the
    # order of the transfers.
    # Overflow (absurd bandwidths) is refused by _step_loads, with a typed error.
    with np.errstate(over="ignore"):
        t = np.where(n_on > 0, lat + most / (k * bw), 0.0)
    link_messages[sel] += np.count_nonzero(on, axis=0)
    loads.link_total_bytes[sel] += nbytes_.sum(axis=0)
    loads.step_bytes[s0:s1] = most
    if largest_is_bytes:
        loads.seg_max = max(loads.seg_max, float(most.max()) / k)
    if link_summary:
        loads.busy_links[s0:s1] = n_on
        with np.errstate(invalid="ignore", divide="ignore"):
            loads.util_sum[s0:s1] = np.where(t > 0, (lat * n_on + nbytes_.sum(axis=1) / (k * bw)) / t, 0.0)
        loads.busiest[s0:s1] = _busiest(on & (nbytes_ == most[:, None]), used)
    loads.tau[s0:s1] = t


def _general_batch(loads: _Loads, batch, k: int, lat: np.ndarray, bw: np.ndarray, per_link: bool,
                   link_summary: bool) -> None:
    """One batch of steps with per-link latencies and bandwidths (several link classes)."""
    s0, s1, nbytes_, msgs, largest_is_bytes, sel, used = batch
    with np.errstate(over="ignore"):
        busy = lat * msgs + nbytes_ / (k * bw)
    t = busy.max(axis=1)
    loads.step_bytes[s0:s1] = nbytes_.max(axis=1)
    loads.link_busy[sel] += busy.sum(axis=0)
    loads.link_total_bytes[sel] += nbytes_.sum(axis=0)
    if largest_is_bytes:
        loads.seg_max = max(loads.seg_max, float(nbytes_.max()) / k)
    if link_summary:
        on = msgs > 0
        loads.busy_links[s0:s1] = on.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            loads.util_sum[s0:s1] = np.where(t > 0, busy.sum(axis=1) / t, 0.0)
        loads.busiest[s0:s1] = _busiest(on & (busy == t[:, None]), used)
    if per_link:
        loads.busy_full[s0:s1, used] = busy
        loads.bytes_full[s0:s1, used] = nbytes_
    loads.tau[s0:s1] = t


def _total_time(loads: _Loads, k: int, buffers_per_direction: int) -> tuple[float, str]:
    """Time of the whole schedule and how it was reached (bulk, pipelined or segmented)."""
    tau, S = loads.tau, len(loads.tau)
    if k == 1:
        return float(tau.sum()), "bulk-synchronous"
    if buffers_per_direction >= 2:
        chain = float(tau.sum() + (k - 1) * (tau.max() if S else 0.0))
        link_total = loads.link_busy * k if S else np.zeros(1)
        return max(chain, float(link_total.max()) if link_total.size else 0.0), \
            "pipelined: max(critical path, busiest link)"
    return float(k * tau.sum()), "segmented, no overlap (1 buffer)"


def _cost_dataset(schedule: Schedule, loads: _Loads, total: float, mode: str, k: int, buffers_per_direction: int,
                  *, per_link: bool, link_summary: bool):
    """The result of :func:`cost` as an xarray Dataset."""
    import xarray as xr

    net, tau = schedule.network, loads.tau
    # Per-step times reported for the whole transfer (all k segments).
    step_time = tau * k if k > 1 else tau
    directions = 2 if net.bidirectional else 1
    buffer_bytes = buffers_per_direction * schedule.num_colors * directions * loads.seg_max
    ds = xr.Dataset(
        {
            "step_time": ("step", step_time, {"units": "s", "long_name": "time of each step"}),
            "cumulative_time": ("step", np.cumsum(step_time),
                                {"units": "s", "long_name": "time at the end of each step (bulk)"}),
            "step_bytes": ("step", loads.step_bytes, {"units": "B", "long_name": "bytes on the busiest link"}),
        },
        coords={"step": np.arange(schedule.num_steps)},
    )
    n = schedule.group_size
    algbw = schedule.nbytes / total if total > 0 else math.inf
    ds["total_time"] = xr.DataArray(total, attrs={"units": "s", "long_name": "time of the whole schedule",
                                                  "mode": mode})
    ds["algbw"] = xr.DataArray(algbw, attrs={"units": "B/s", "long_name": "algorithm bandwidth",
                                             "definition": "S / t (nccl-tests)"})
    f = bus_factor(schedule.collective, n)
    # One node per group moves nothing over the bus (f = 0), even in no time at all.
    ds["busbw"] = xr.DataArray(algbw * f if f else 0.0, attrs={"units": "B/s", "long_name": "bus bandwidth",
                                                 "definition": f"algbw * f, f = {f:.4g}"})
    if per_link:
        ds["link_time"] = (("step", "link"), loads.busy_full * k,
                           {"units": "s", "long_name": "busy time of each link"})
        ds["link_bytes"] = (("step", "link"), loads.bytes_full, {"units": "B", "long_name": "bytes on each link"})
        with np.errstate(invalid="ignore", divide="ignore"):
            util = np.where(tau[:, None] > 0, loads.busy_full / tau[:, None], 0.0)
        ds["utilisation"] = (("step", "link"), util,
                             {"units": "1", "long_name": "busy time / step time"})
    if link_summary:
        _add_link_summary(ds, schedule, loads.busy_links, loads.util_sum, loads.busiest, loads.link_busy * k,
                          loads.link_total_bytes, total)
    if per_link or link_summary:
        ds = ds.assign_coords(link=np.arange(net.num_links))
    ds.attrs.update({
        "schedule": schedule.name, "collective": schedule.collective, "network": net.name,
        "nbytes": schedule.nbytes, "itemsize": schedule.itemsize, "pipeline_chunks": k,
        "buffers_per_direction": int(buffers_per_direction),
        "buffer_bytes_per_node": buffer_bytes,
        "model": "step = max over links of sum over messages (alpha + bytes / bandwidth)",
    })
    return ds


def _busiest(is_max: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Per step the smallest link id among the busiest ones (-1: no busy link), so that
    ties do not depend on the order the links are stored in."""
    big = np.iinfo(np.int64).max
    best = np.where(is_max, used[None, :], big).min(axis=1) if is_max.shape[1] else np.full(len(is_max), big)
    return np.where(best == big, -1, best)


def _add_link_summary(ds, schedule, busy_links, util_sum, busiest, link_busy, link_total_bytes, total) -> None:
    L = schedule.network.num_links
    used = schedule.used_links
    # A link's busy time in a step is at most the step's time, so both utilisations are at
    # most 1; the sums behind them are rounded in different orders (0.1 * 6 is one ulp above
    # 0.1 + ... + 0.1), and a ratio one ulp above 1 would read as an overloaded link.
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_util = np.minimum(np.where(busy_links > 0, util_sum / np.maximum(busy_links, 1), 0.0), 1.0)
    full_busy, full_bytes = np.zeros(L), np.zeros(L)
    full_busy[used] = link_busy
    full_bytes[used] = link_total_bytes
    ds["busy_links"] = ("step", busy_links, {"units": "", "long_name": "directed links carrying data"})
    ds["mean_utilisation"] = ("step", mean_util,
                              {"units": "1", "long_name": "mean busy time / step time of the busy links"})
    ds["busiest_link"] = ("step", busiest, {"units": "", "long_name": "link that sets the step time (-1: none)"})
    ds["link_total_bytes"] = ("link", full_bytes, {"units": "B", "long_name": "bytes over the whole schedule"})
    ds["link_busy_time"] = ("link", full_busy, {"units": "s", "long_name": "busy time over the whole schedule"})
    ds["link_utilisation"] = ("link", np.minimum(full_busy / total, 1.0) if total > 0 else np.zeros(L),
                              {"units": "1", "long_name": "busy time / total time"})


def phase_summary(schedule: Schedule, nbytes: int | None = None):
    """Per phase and grid dimension: steps, bytes and the busiest link (streams over the steps).

    What a drawing of every link cannot show on a large pod: for each part of the
    schedule (reduce-scatter along dimension 0, all-gather on chip, ...) how many
    steps it takes part in, how many bytes it moves over links in all, and which
    link carries most of them.

    Returns
    -------
    xarray.Dataset
        Dimension ``part``; ``phase`` (str), ``dim`` (grid dimension, -1 on chip),
        ``steps``, ``first_step``, ``last_step``, ``bytes`` (B), ``links`` (distinct
        directed links used), ``busiest_link`` and ``busiest_link_bytes`` (B).

    Examples
    --------
    >>> from scwork.collectives import Network, multi_dim_all_reduce, phase_summary
    >>> ps = phase_summary(multi_dim_all_reduce(Network.torus((4, 2))))
    >>> [(str(p), int(d), int(n)) for p, d, n in zip(ps.phase.values, ps.dim.values, ps.steps.values)]
    [('reduce_scatter', 0, 3), ('reduce_scatter', 1, 1), ('all_gather', 1, 1), ('all_gather', 0, 3)]
    """
    import xarray as xr

    from scwork.collectives.schedule import PHASES

    if not isinstance(schedule, Schedule):
        raise ConfigError(f"phase_summary needs a Schedule (from scwork.collectives.build), got {shown(schedule)}")
    if nbytes is not None:
        schedule = schedule.with_size(nbytes)
    net = schedule.network
    used = schedule.used_links
    dims = np.where(net.link_kind[used] == "ici", net.link_dim[used], -1) if len(used) else np.zeros(0, np.int64)
    # Parts: (phase, dimension) codes; dimension -1 (on chip) stored as ndim.
    D = net.ndim + 1
    G = len(PHASES) * D
    U = max(len(used), 1)
    steps_in = np.zeros((G, max(schedule.num_steps, 1)), dtype=bool)
    part_link_bytes = np.zeros((G, U))
    part_link_count = np.zeros((G, U), dtype=np.int64)
    part_of_link = np.where(dims < 0, D - 1, dims)

    def add_records(s0: int, r: dict) -> None:
        u = r["key"] % U
        g = r["phase"] * D + part_of_link[u]
        steps_in[g, r["key"] // U + s0] = True
        part_link_bytes.ravel()[:] += np.bincount(g * U + u, weights=r["nbytes"].astype(float), minlength=G * U)
        part_link_count.ravel()[:] += np.bincount(g * U + u, minlength=G * U)

    prog = schedule._program
    if prog is None or net.cores_per_chip > 1:
        for s0, _, r in schedule._key_batches(dense_width=G, with_phase=True):
            add_records(s0, r)
    else:
        # The periodic fast paths of cost(), once per phase; sparse batches by record.
        _stream_phase_loads(schedule, prog, U, D, part_of_link, steps_in, part_link_bytes, part_link_count,
                            add_records)
    present = np.flatnonzero(steps_in.any(axis=1))
    first = np.array([int(np.argmax(steps_in[g])) for g in present], dtype=np.int64)
    order = present[np.argsort(first, kind="stable")]
    if len(order):
        top = part_link_bytes[order]
        # Ties go to the smallest link id (independent of the order links are stored in).
        # Only links the part itself uses count (with zero bytes every link would tie).
        mine = part_link_count[order] > 0
        best_id = np.where((top == top.max(axis=1, keepdims=True)) & mine, used[None, :],
                           np.iinfo(np.int64).max).min(axis=1)
        best_id = np.where(best_id == np.iinfo(np.int64).max, used[np.argmax(mine, axis=1)], best_id)
        best = np.array([int(np.flatnonzero(used == i)[0]) for i in best_id], dtype=np.int64)
    else:
        best = np.zeros(0, np.int64)
    return xr.Dataset(
        {
            "phase": ("part", np.array([PHASES[g // D] for g in order], dtype=str),
                      {"units": "", "long_name": "phase"}),
            "dim": ("part", np.array([(g % D) if g % D < D - 1 else -1 for g in order], dtype=np.int64),
                    {"units": "", "long_name": "grid dimension of the links (-1: on chip)"}),
            "steps": ("part", steps_in[order].sum(axis=1), {"units": "", "long_name": "steps it takes part in"}),
            "first_step": ("part", np.array([int(np.argmax(steps_in[g])) for g in order], dtype=np.int64),
                           {"units": "", "long_name": "first step"}),
            "last_step": ("part", np.array([steps_in.shape[1] - 1 - int(np.argmax(steps_in[g][::-1]))
                                            for g in order], dtype=np.int64),
                          {"units": "", "long_name": "last step"}),
            "bytes": ("part", part_link_bytes[order].sum(axis=1), {"units": "B", "long_name": "bytes over links"}),
            "links": ("part", (part_link_count[order] > 0).sum(axis=1),
                      {"units": "", "long_name": "distinct directed links used"}),
            "busiest_link": ("part", used[best] if len(used) else best,
                             {"units": "", "long_name": "link carrying the most bytes"}),
            "busiest_link_bytes": ("part", part_link_bytes[order, best] if len(order) else np.zeros(0),
                                   {"units": "B", "long_name": "bytes on the busiest link"}),
        },
        coords={"part": np.arange(len(order))},
        attrs={"schedule": schedule.name, "network": net.name, "nbytes": schedule.nbytes,
               "num_steps": schedule.num_steps},
    )


def _stream_phase_loads(schedule, prog, U, D, part_of_link, steps_in, part_link_bytes, part_link_count,
                        add_records) -> None:
    from scwork.collectives import _program
    from scwork.collectives.schedule import MAX_STREAM_RECORDS

    per_step = prog.step_message_records
    _program.check_records_limit(f"{schedule.name} on {schedule.network.name}", int(per_step.sum()),
                                 MAX_STREAM_RECORDS, "use a smaller network")
    prefix = _program.chunk_byte_prefix(schedule.num_elements, schedule.num_chunks, schedule.itemsize)
    budget = _program.BATCH_RECORDS
    phases = sorted({b.phase for b in prog.message_blocks})
    one_hot = np.zeros((U, D), dtype=np.float32)
    one_hot[np.arange(len(part_of_link)), part_of_link] = 1.0
    links = np.arange(len(part_of_link))
    for b0, b1 in prog.batches(per_step, budget):
        if int(per_step[b0:b1].sum()) * 4 < (b1 - b0) * U:
            add_records(b0, prog.loads(b0, b1, U, prefix, with_phase=True))
            continue
        for s0 in range(b0, b1, max(1, budget // U)):
            s1 = min(s0 + max(1, budget // U), b1)
            for p in phases:
                if not any(b.phase == p and b.t0 < s1 and b.t0 + b.T > s0 for b in prog.message_blocks):
                    continue
                nbytes, count = np.zeros((s1 - s0, U)), np.zeros((s1 - s0, U), dtype=np.int32)
                prog.accumulate(s0, s1, prefix, nbytes, count, phase=p)
                on = count > 0
                # Busy links per (step, dimension) as one matrix product.
                steps_in[p * D:(p + 1) * D, s0:s1] |= (on.astype(np.float32) @ one_hot).T > 0
                part_link_bytes[p * D + part_of_link, links] += nbytes.sum(axis=0)[links]
                part_link_count[p * D + part_of_link, links] += np.count_nonzero(on, axis=0)[links]


def scaling_book_time(collective: str, nbytes: float, axis_sizes, *, link_bandwidth: float = 4.5e10,
                      latency: float = 1e-6, wraparound: bool = True) -> float:
    """Closed-form ICI time of [scaling-book], sharding chapter.

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
    if not isinstance(collective, str):
        raise ConfigError(f"collective must be a name such as 'all_gather', got {shown(collective)}")
    if isinstance(axis_sizes, (str, bytes)) or not isinstance(axis_sizes, Iterable):
        raise ConfigError(f"axis_sizes must be a list of positive integers, got {shown(axis_sizes)}")
    sizes = [integer(f"axis_sizes[{i}]", s, minimum=1) for i, s in enumerate(axis_sizes)]
    from scwork.collectives.network import MAX_NODES

    if math.prod(sizes) > MAX_NODES:
        raise ConfigError(f"axis_sizes {shown(sizes)} hold more than MAX_NODES={MAX_NODES:,} chips (the "
                          "largest TPU pods have about 9,216)")
    if not sizes:
        raise ConfigError("axis_sizes is empty: give the mesh axes the array is sharded over, e.g. [4]")
    if not isinstance(wraparound, (bool, np.bool_)):
        raise ConfigError(f"wraparound must be True or False, got {shown(wraparound)}")
    nbytes = _finite_number("nbytes", nbytes)
    link_bandwidth = _finite_number("link_bandwidth", link_bandwidth, positive=True)
    latency = _finite_number("latency", latency)
    w_bidir = 2 * link_bandwidth
    if collective == "all_to_all":
        # Each of the N = prod(axes) nodes sends V / N^2 to every other node. Along an
        # axis of size A the average distance is A / 4 hops on a ring, so the N links of
        # that axis carry V * A / (4 N) each; axes use separate links and run in
        # parallel: the largest axis is the bottleneck. Without wraparound (a line)
        # the middle link carries twice that.
        # The book's form is bandwidth-only (callers add the per-hop latency they model).
        n = math.prod(sizes)
        return _finite_time(nbytes * max(sizes) / (4 * n * w_bidir) * (1 if wraparound else 2))
    if not wraparound:
        if len(sizes) != 1:
            raise ConfigError("the line (no wraparound) form is for one axis")
        x = sizes[0]
        t = max(latency * (x - 1), (x - 1) * nbytes / x / link_bandwidth)
    else:
        t = max(latency * sum(sizes) / 2, nbytes / (w_bidir * len(sizes)))
    if collective in ("all_gather", "reduce_scatter"):
        return _finite_time(t)
    if collective == "all_reduce":
        return _finite_time(2 * t)
    if collective == "all_to_all":
        return _finite_time(nbytes / (4 * w_bidir))
    raise ConfigError(f"unknown collective {collective!r}")
