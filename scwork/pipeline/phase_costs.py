"""The time of each phase of a step: SparseCore tiles, the ICI all-to-all, the TensorCores.

The ICI all-to-all goes through the collectives engine.

Used by :func:`~scwork.pipeline.step_model`; each function documents its formula and the
public source it follows ([sc-guide] §10; [scaling-book] for the ICI
all-to-all).
"""

from __future__ import annotations

import functools

import numpy as np

from scwork._validate import shown
from scwork.errors import ConfigError
from scwork._rounding import ceil_div, round_up
from scwork.pipeline._inputs import _nonneg
from scwork.pipeline.params import DTYPE_SIZES, StepModelParams

__all__ = []


# --------------------------------------------------------------------------------------
# ICI
# --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=32)
def _a2a_tables(shape, wraparound, cores_per_chip, chip, link_bw, latency):
    """Per (step, link): message count and bytes of a ring all-to-all of a reference size."""
    from scwork.collectives import Network, all_to_all

    net = Network.grid(shape, wraparound, cores_per_chip=cores_per_chip, chip=chip,
                       link_bandwidth=link_bw, link_latency=latency)
    N = net.num_nodes
    # Reference vector: the message sizes scale linearly with it (times are rescaled in
    # _Ici.time); large enough that the engine's integer chunking is exact (N blocks of
    # 4096 four-byte elements).
    base = N * 4 * 4096
    sched = all_to_all(net, nbytes=base)
    msg = sched.messages()
    L = max(net.num_links, 1)
    key = msg["step"] * L + msg["link"]
    steps = sched.num_steps
    alpha = np.bincount(key, weights=net.link_latency[msg["link"]], minlength=steps * L).reshape(steps, L)
    beta = np.bincount(key, weights=msg["bytes"] / net.link_bandwidth[msg["link"]],
                       minlength=steps * L).reshape(steps, L)
    return alpha, beta / base, N, sched


class _Ici:
    """Time of one all-to-all of ``v`` bytes per device on the topology's network.

    One-dimensional slices: the collectives engine's ring all-to-all over all devices.
    Grids of several dimensions (and chips with several devices): dimension by
    dimension, a ring all-to-all along every axis (the rings of one axis run on
    disjoint links at the same time), then between the devices of a chip; each
    stage moves every device's whole vector, split in equal blocks per ring
    position. Stages longer than ``ici_schedule_max_nodes`` use the [scaling-book]
    closed form instead of the explicit schedule.
    """

    def __init__(self, topology, chip, params: StepModelParams):
        from scwork.collectives import ICI_LATENCY_S

        self.N = topology.num_devices
        self.bw = float(params.ici_link_bytes_per_s or chip.ici_link_bytes_per_s)
        self.latency = float(ICI_LATENCY_S if params.ici_latency_s is None else params.ici_latency_s)
        self.stages: list[tuple] = []   # (size, alpha, beta) or (size, None, None) for the closed form
        self.mode = "none (one device)"
        if self.N <= 1:
            return
        maxn = params.ici_schedule_max_nodes
        dims = [(int(x), bool(w)) for x, w in zip(topology.shape, topology.wraparound) if x > 1]
        dpc = topology.devices_per_chip
        if len(dims) == 1 and dpc == 1:
            groups = [(dims[0][0], (dims[0][0],), (dims[0][1],), 1)]
        else:
            groups = [(x, (x,), (w,), 1) for x, w in dims]
            if dpc > 1:
                groups.append((dpc, (1,), (False,), dpc))
        closed = False
        for size, shape, wrap, cores in groups:
            if size <= maxn:
                alpha, beta, n, _ = _a2a_tables(shape, wrap, cores, chip.name, self.bw, self.latency)
                self.stages.append((n, alpha, beta))
            else:
                self.stages.append((size, None, None))
                closed = True
        kind = "ring all-to-all over all devices" if len(groups) == 1 else (
            f"dimension by dimension ({' x '.join(str(g[0]) for g in groups)} rings)")
        self.mode = (f"collectives engine: {kind}, alpha-beta cost"
                     + ("; scaling-book closed form V / (4 * 2W) + N/2 hop latencies for rings longer than "
                        f"{maxn}" if closed else ""))

    def time(self, v_remote: float) -> float:
        """Seconds to deliver ``v_remote`` bytes from every device to the others."""
        if self.N <= 1 or v_remote <= 0:
            return 0.0
        vector = v_remote * self.N / (self.N - 1)  # a device's whole vector, its local block included
        total = 0.0
        for n, alpha, beta in self.stages:
            if alpha is not None:
                total += float((alpha + beta * vector).max(axis=1).sum())
            else:
                from scwork.collectives import scaling_book_time

                total += float(scaling_book_time("all_to_all", n * vector, [n], link_bandwidth=self.bw)
                               + self.latency * (n // 2))
        return total


def _sc_model(stacks, ids, uniq, nmb, n, chip, topology, params, num_serialized_tables):
    """Per stack, direction and SparseCore: DMA bytes, vector instructions, times."""
    K, G, S = ids.shape[1:4]
    T = int(chip.tiles_per_sparsecore)
    granule = int(chip.dma_granule_bytes)
    tile_bw = chip.hbm_bandwidth_bytes_per_s * params.sc_hbm_bandwidth_fraction / (chip.sparsecores_per_chip * T)
    rate = params.sc_tile_vector_ops_per_s
    abytes = params.activation_bytes

    # busiest-tile counts (sum over mini-batches of per-stream ceilings)
    src_tile_ids = ceil_div(ids, T).sum(axis=(0, 4))                        # (K, G, S)
    csr_entries = round_up(ids, 8).sum(axis=4)                             # (M, K, G, S)
    csr_tile = ceil_div(csr_entries, T).sum(axis=0)                        # (K, G, S)
    owner = ceil_div(uniq, T).sum(axis=(0, 2, 3))                          # (K, P)
    owner_rows = owner.reshape(K, G, S)                                     # partition g*S+s lives on (g, s)

    width = np.zeros(K, np.int64)
    granules = np.zeros(K, np.int64)
    act_row_bytes = np.zeros(K, np.int64)
    simd = np.zeros(K, np.int64)
    shape = (K, G, S)
    dma_f, dma_b = np.zeros(shape), np.zeros(shape)
    ops_f, ops_b = np.zeros(shape), np.zeros(shape)
    overhead = np.zeros(K)
    for k, st in enumerate(stacks):
        b = DTYPE_SIZES[st.dtype]
        per_line = max(1, granule // b)
        width[k] = round_up(st.dim, per_line)
        granules[k] = ceil_div(width[k] * b, granule)
        row_bytes = granules[k] * granule
        w_act = round_up(st.dim, max(1, granule // abytes))
        act_row_bytes[k] = ceil_div(w_act * abytes, granule) * granule
        act_tile_rows = ceil_div(st.features * n, T)
        simd[k] = chip.simd_width_bf16 if b == 2 else chip.simd_width_f32
        vec_per_row = ceil_div(width[k], simd[k])
        combine = params.combine_ops_per_element + (params.dequantize_ops_per_element if st.dtype == "s8" else 0)
        slots = _optimizer_slots(st.optimizer)
        dma_f[k] = (owner_rows[k] * row_bytes + csr_tile[k] * params.csr_bytes_per_id
                    + act_tile_rows * act_row_bytes[k])
        dma_b[k] = (owner_rows[k] * row_bytes * 2 * (1 + slots) + csr_tile[k] * params.csr_bytes_per_id
                    + act_tile_rows * act_row_bytes[k])
        ops_f[k] = src_tile_ids[k] * vec_per_row * combine
        ops_b[k] = (src_tile_ids[k] * vec_per_row * combine
                    + owner_rows[k] * vec_per_row * params.optimizer_ops(st.optimizer))
        overhead[k] = nmb[k] * params.sc_op_overhead_s
    dma_bytes = np.stack([dma_f, dma_b], axis=1)                            # (K, 2, G, S)
    vector_ops = np.stack([ops_f, ops_b], axis=1)
    dma_time = dma_bytes / tile_bw
    vector_time = vector_ops / rate
    if params.dma_compute_overlap:
        alone = np.maximum(dma_time, vector_time)
    else:
        alone = dma_time + vector_time
    stack_time = alone + overhead[:, None, None, None]

    # stacks sharing one SparseCore phase; serialization as in scwork.memory
    max_unique = uniq.max(axis=(0, 2, 3, 4)) if uniq.size else np.zeros(K, np.int64)
    order_key = (2 * width + 1) * max_unique
    if num_serialized_tables <= 1 or K <= 1:
        chain: tuple[int, ...] = ()
    else:
        chain = tuple(sorted(range(K), key=lambda i: (-int(order_key[i]), i))[:min(num_serialized_tables, K)])
    conc = [k for k in range(K) if k not in chain]
    phase = np.zeros((2, G, S))
    if K:
        if params.dma_compute_overlap:
            Dc = dma_time[conc].sum(axis=0) if conc else np.zeros((2, G, S))
            Cc = vector_time[conc].sum(axis=0) if conc else np.zeros((2, G, S))
            if not chain:
                phase = np.maximum(Dc, Cc)
            else:
                nslot = len(chain)
                for k in chain:
                    phase = phase + np.maximum(dma_time[k] + Dc / nslot, vector_time[k] + Cc / nslot)
        else:
            phase = (dma_time + vector_time).sum(axis=0)
        phase = phase + overhead.sum()
    return {
        "dma_bytes": dma_bytes, "vector_ops": vector_ops, "dma_time": dma_time, "vector_time": vector_time,
        "stack_time": stack_time, "phase": phase, "owner_rows": owner_rows, "padded_width": width,
        "row_granules": granules, "serialized": tuple(stacks[k].name for k in chain),
        "tile_bandwidth": tile_bw,
    }


def _optimizer_slots(optimizer: str) -> int:
    from scwork.memory import OPTIMIZER_SLOTS

    try:
        return OPTIMIZER_SLOTS[optimizer]
    except KeyError:
        raise ConfigError(f"unknown optimizer {shown(optimizer)}; known: {sorted(OPTIMIZER_SLOTS)}") from None


def _ici_model(stacks, uniq, topology, chip, params, widths):
    """Per stack and direction: bytes the busiest device sends off-device, and the time."""
    K, G, S, P = uniq.shape[1:]
    ici = _Ici(topology, chip, params)
    dev_of_p = np.arange(P) // S
    remote = dev_of_p[None, :] != np.arange(G)[:, None]                     # (G, P)
    rows = (uniq * remote[None, None, :, None, :]).sum(axis=(3, 4))          # (M, K, G)
    t = np.zeros((K, 2))
    volume = np.zeros((K, 2))
    for k, st in enumerate(stacks):
        fwd_row = widths[k] * DTYPE_SIZES[st.dtype] + params.ici_index_bytes
        bwd_row = round_up(st.dim, max(1, chip.dma_granule_bytes // params.activation_bytes)) \
            * params.activation_bytes + params.ici_index_bytes
        for j, row in enumerate((fwd_row, bwd_row)):
            per_mb = rows[:, k].max(axis=1) * row                                # (M,)
            volume[k, j] = float(per_mb.sum())
            t[k, j] = sum(ici.time(float(v)) for v in per_mb if v > 0)
    return t, volume, ici.mode


def _tc_times(tc_forward_s, tc_backward_s, tc_forward_flops, tc_backward_flops, tc_peak_flops, params):
    notes = []
    if (tc_forward_flops is not None or tc_backward_flops is not None) and tc_peak_flops is None:
        raise ConfigError("TensorCore FLOPs given without tc_peak_flops (FLOP/s per chip, not in the catalog); "
                          "pass tc_peak_flops=... or the times tc_forward_s / tc_backward_s")
    if tc_peak_flops is not None:
        tc_peak_flops = _nonneg("tc_peak_flops", tc_peak_flops)
        if tc_peak_flops == 0:
            raise ConfigError("tc_peak_flops must be > 0")
    if tc_forward_s is not None and tc_forward_flops is not None:
        raise ConfigError("give tc_forward_s or tc_forward_flops, not both")
    if tc_backward_s is not None and tc_backward_flops is not None:
        raise ConfigError("give tc_backward_s or tc_backward_flops, not both")
    fwd = None
    if tc_forward_s is not None:
        fwd = _nonneg("tc_forward_s", tc_forward_s)
    elif tc_forward_flops is not None:
        fwd = _nonneg("tc_forward_flops", tc_forward_flops) / (tc_peak_flops * params.tc_efficiency)
        notes.append(f"TensorCore forward = {tc_forward_flops:.4g} FLOP / ({tc_peak_flops:.4g} FLOP/s x "
                     f"tc_efficiency {params.tc_efficiency})")
    bwd = None
    if tc_backward_s is not None:
        bwd = _nonneg("tc_backward_s", tc_backward_s)
    elif tc_backward_flops is not None:
        bwd = _nonneg("tc_backward_flops", tc_backward_flops) / (tc_peak_flops * params.tc_efficiency)
    elif fwd is not None:
        bwd = fwd * params.tc_backward_to_forward
        notes.append(f"TensorCore backward = tc_backward_to_forward ({params.tc_backward_to_forward}) x forward")
    if fwd is None and bwd is None:
        notes.append("no TensorCore time given: TensorCore phases are 0 (pass tc_forward_s or FLOPs)")
    if fwd is None:
        fwd = 0.0
    return fwd, (0.0 if bwd is None else bwd), notes


def _sc_parts(stacks, nmb, stack_time):
    """Display breakdown of the SparseCore phases: stack (and mini-batch) shares per SparseCore."""
    K = len(stacks)
    out = {}
    for j, phase in enumerate(("sc_forward", "sc_backward")):
        t = stack_time[:, j].reshape(K, -1)                                  # (K, units)
        labels, rows = [], []
        for k, st in enumerate(stacks):
            m = int(nmb[k])
            for b in range(m):
                labels.append(st.name if m == 1 else f"{st.name} (mini-batch {b + 1}/{m})")
                rows.append(t[k] / m)
        arr = np.array(rows) if rows else np.zeros((0, t.shape[1]))
        total = arr.sum(axis=0)
        frac = np.divide(arr, total, out=np.zeros_like(arr), where=total > 0)
        out[phase] = (labels, frac)
    return out


def _ici_routed(stacks, uniq, topology, chip, params, widths):
    """The ICI all-to-alls of the statistics themselves, routed over the chip grid (``a2a="data"``).

    Per stack, direction and mini-batch one all-to-all whose (sender, receiver) bytes
    are the unique rows every device requests from every other device times the row
    bytes of :func:`_ici_model` (forward: the padded table row plus
    ``ici_index_bytes``, owner -> requester; backward: the float32 gradient row plus
    ``ici_index_bytes``, requester -> owner). Routed with dimension-order routing by
    :mod:`scwork.collectives.embedding_a2a`; its time is the busiest link's bytes /
    bandwidth plus the farthest route's hops x latency.

    Returns
    -------
    t, volume : ndarray (K, 2)
        Seconds (summed over mini-batches) and bytes the busiest device sends off-device.
    mode : str
    links : xarray.Dataset
        Per-link bytes summed over stacks and mini-batches, the hottest link per direction
        and ``time`` = the ICI phase times (:func:`scwork.collectives.route_all_to_all` layout).
    """
    from scwork.collectives import ICI_LATENCY_S
    from scwork.collectives.embedding_a2a import _links_dataset, _requester_owner_rows, _router

    M, K, G, S, P = uniq.shape
    bw = float(params.ici_link_bytes_per_s or chip.ici_link_bytes_per_s)
    latency = float(ICI_LATENCY_S if params.ici_latency_s is None else params.ici_latency_s)
    router = _router(topology, chip=chip, link_bandwidth=bw, link_latency=latency)
    rows = _requester_owner_rows(uniq.reshape(M * K, G, S, P), S).reshape(M, K, G, G)   # requester, owner
    off_device = rows * (1 - np.eye(G, dtype=np.int64))
    t = np.zeros((K, 2))
    volume = np.zeros((K, 2))
    loads = np.zeros((router.net.num_links, 2))
    farthest = np.zeros(2)
    for k, st in enumerate(stacks):
        fwd_row = widths[k] * DTYPE_SIZES[st.dtype] + params.ici_index_bytes
        bwd_row = round_up(st.dim, max(1, chip.dma_granule_bytes // params.activation_bytes)) \
            * params.activation_bytes + params.ici_index_bytes
        for j, row in enumerate((fwd_row, bwd_row)):
            for m in range(M):
                sent = off_device[m, k].sum(axis=1)                               # rows requested off-device
                volume[k, j] += float(sent.max(initial=0)) * row
                matrix = (rows[m, k].T if j == 0 else rows[m, k]) * float(row)  # sender x receiver
                link_bytes, lat = router.link_bytes(matrix)
                t[k, j] += router.time(link_bytes, lat)
                loads[:, j] += link_bytes
                if link_bytes.any():
                    farthest[j] = max(farthest[j], lat)
    mode = ("routed from the statistics (a2a='data'): dimension-order routing x, y, z on the "
            f"{router.net.name}, ties split both ways; per all-to-all max over links of bytes / {bw:.4g} B/s "
            f"+ farthest route x {latency:.3g} s per hop")
    links = _links_dataset(router, loads, farthest, t.sum(axis=0), ["forward", "backward"],
                           {"topology": str(topology),
                            "time_note": "time = the ICI phase (sum over stacks and mini-batches of each "
                                         "all-to-all's time); link_bytes summed over them"})
    return t, volume, mode, links
