"""The all-to-all schedule: a personalised exchange along the ring (or path) through all nodes."""

from __future__ import annotations

import numpy as np

from scwork.collectives._lanes import check_size, compact, loop_one_way_ok, loop_two_way_ok, A2A, COPY
from scwork.collectives._program import Block, CHUNKS_MOD_C
from scwork.collectives.network import Network
from scwork.collectives.schedule import MAX_EXPLICIT_TRANSFERS, Schedule
from scwork.errors import ConfigError, TopologyError

__all__ = ["all_to_all"]


def all_to_all(net: Network, *, nbytes: int = 2**20, itemsize: int = 4) -> Schedule:
    """All-to-all along the ring through all nodes (or the path on a line).

    Every node's vector is cut into N blocks; block j is for node j. Each block
    travels the shorter way round the ring (ties forward), relayed hop by hop;
    in step u every node forwards all blocks still in transit, one message per
    link. On a bidirectional ring of even N the busiest link carries
    N/2 (N/2 + 1) / 2 blocks of V/N: about V N / 8 bytes.

    Links used: both directions of the ring (the path on a line). Conflict-free
    (blocks sharing a link and a step share one message) except on rings that
    use a cable twice, such as the out-and-back loop of a 2-core mesh.

    Examples
    --------
    >>> from scwork.collectives import Network, all_to_all
    >>> s = all_to_all(Network.ring(4))
    >>> s.num_steps, s.conflict_free
    (2, True)
    """
    check_size(nbytes, itemsize)
    try:
        ring = net.ring_order()
        cyclic = True
    except TopologyError:
        ring = net.path_order()
        cyclic = False
    N = len(ring)
    if cyclic and net.bidirectional:
        fwd_max, back_max = N // 2, (N - 1) // 2
    elif cyclic:
        fwd_max, back_max = N - 1, 0
    else:
        fwd_max = back_max = N - 1
    if cyclic:
        transfers, messages, count = _a2a_ring(ring, fwd_max, back_max)
    else:
        transfers, messages, count = _a2a_path(ring)
    # Chunk j is the block for ring position j; owners: node ring[j] receives chunk j.
    owners = (ring, np.arange(N), np.arange(N) + 1)
    if not cyclic:
        promise = True  # a path uses each directed link for one node pair only
    elif net.bidirectional:
        promise = loop_two_way_ok(net, ring)
    else:
        promise = loop_one_way_ok(net, ring)
    return compact(net, N, transfers, message_blocks=messages, num_transfers=count, name="all_to_all",
                    collective="all_to_all", owners=owners, nbytes=nbytes, itemsize=itemsize,
                    description=all_to_all.__doc__.split("\n\n")[0],
                    promises={"conflict_free": bool(promise)}, num_colors=1)


def _a2a_ring(ring, fwd_max: int, back_max: int):
    """All-to-all blocks on a ring: one row per origin (shifted by it).

    Transfers: block ``delta`` of origin o (chunk o + delta) travels ``dist`` hops
    the shorter way, one per step. Messages: at step t the blocks leaving node
    o + sign*t in direction ``sign`` all come from origin o and are bound for the
    contiguous chunks o + sign*(t+1) .. o + sign*max: one record each.
    """
    N = len(ring)
    delta = np.arange(1, N)
    sign = np.where(delta <= fwd_max, 1, -1)
    dist = np.where(sign > 0, delta, N - delta)
    keep = (sign > 0) | (dist <= back_max)
    delta, sign, dist = delta[keep], sign[keep], dist[keep]
    rows = dict(row_loop=np.zeros(N, dtype=np.int64), row_shift=np.arange(N), row_c0=np.arange(N),
                chunk_mode=CHUNKS_MOD_C)
    transfers = [Block(t0=0, loops=ring, cyclic=True, src0=np.zeros(len(delta)), move=sign, direction=sign,
                       p0=delta, ta=np.zeros(len(delta)), tb=dist, origin_pos=np.zeros(len(delta)),
                       op=COPY, phase=A2A, **rows)]
    messages = []
    if fwd_max >= 1:
        messages.append(Block(t0=0, loops=ring, cyclic=True, src0=[0], move=[1], direction=[1], p0=[1],
                              p0move=[1], p1=[fwd_max + 1], p1move=[0], ta=[0], tb=[fwd_max], op=COPY,
                              phase=A2A, **rows))
    if back_max >= 1:
        messages.append(Block(t0=0, loops=ring, cyclic=True, src0=[0], move=[-1], direction=[-1],
                              p0=[-back_max], p0move=[0], p1=[0], p1move=[-1], ta=[0], tb=[back_max],
                              op=COPY, phase=A2A, **rows))
    return transfers, messages, int(N * dist.sum())


def _a2a_path(path):
    """All-to-all blocks on a path (no ring): block o -> o + delta travels |delta| hops.

    Transfers (built only when written out: N^2 entries): one entry per (origin,
    destination). Messages: at step t the blocks leaving node o + t rightwards come
    from origin o and are bound for chunks o + t + 1 .. N-1 (leftwards: 0 .. o - t - 1).
    """
    N = len(path)
    o = np.arange(N)

    def transfers():
        if N * N > MAX_EXPLICIT_TRANSFERS:
            raise ConfigError(f"the all-to-all on a path of {N:,} nodes has {N * N:,} (origin, destination) "
                              f"pairs to write out, more than MAX_EXPLICIT_TRANSFERS={MAX_EXPLICIT_TRANSFERS:,}; "
                              "cost() and conflicts() work without them")
        orig, dest = np.meshgrid(o, o, indexing="ij")
        orig, dest = orig[orig != dest], dest[orig != dest]
        sign = np.sign(dest - orig)
        return [Block(t0=0, loops=path, cyclic=False, src0=orig, move=sign, direction=sign, p0=dest,
                      ta=np.zeros(len(orig)), tb=np.abs(dest - orig), origin_pos=orig, op=COPY, phase=A2A)]

    messages = [Block(t0=0, loops=path, cyclic=False, src0=o, move=1, direction=1, p0=o + 1, p0move=1,
                      p1=np.full(N, N), p1move=0, ta=np.zeros(N), tb=N - 1 - o, op=COPY, phase=A2A),
                Block(t0=0, loops=path, cyclic=False, src0=o, move=-1, direction=-1, p0=np.zeros(N), p0move=0,
                      p1=o, p1move=-1, ta=np.zeros(N), tb=o, op=COPY, phase=A2A)]
    d = np.arange(1, N, dtype=object)
    return transfers, messages, int(2 * (d * (N - d)).sum()) if N > 1 else 0
