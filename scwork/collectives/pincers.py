"""The 1-D all-reduces of [md-allreduce]: single path, pincer, rotated and improved rotated pincer."""

from __future__ import annotations

import numpy as np

from scwork.collectives._lanes import check_size, compact, loop_two_way_ok, AG, COMBINE, COPY, RS
from scwork.collectives._program import Block, CHUNKS_MOD_C
from scwork.collectives.network import Network
from scwork.collectives.schedule import Schedule
from scwork.errors import ConfigError, TopologyError

__all__ = ["improved_rotated_pincer", "pincer", "rotated_pincer", "single_path"]


# ---------------------------------------------------------------------------------------
# 1-D algorithms of [md-allreduce]
# ---------------------------------------------------------------------------------------
def single_path(net: Network, *, nbytes: int = 2**20, itemsize: int = 4) -> Schedule:
    """Single-path all-reduce: A sends to B, B adds and forwards, ..., then back.

    As [md-allreduce] describes it: the last node of the path holds the sum and the stream is
    reversed to bring it back to every node: 2(N-1) steps, each moving the whole
    vector V over one link. Runs on any network with a path through all nodes
    (lines, meshes, rings); on a one-way ring the result continues forward
    round the ring instead of coming back.

    Links used: one link per step, forward along the path then backward.
    Conflict-free.

    Examples
    --------
    >>> from scwork.collectives import Network, single_path
    >>> s = single_path(Network.line(4))
    >>> [(t.source, t.destination, t.op) for t in s[0] + s[3]]
    [(0, 1, 'combine'), (3, 2, 'copy')]
    """
    check_size(nbytes, itemsize)
    path = net.path_order()
    N = len(path)
    blocks = [Block(t0=0, loops=path, cyclic=False, src0=[0], move=[1], direction=[1], ta=[0], tb=[N - 1],
                    op=COMBINE, phase=RS)]
    if N > 1:
        if net.bidirectional:
            blocks.append(Block(t0=N - 1, loops=path, cyclic=False, src0=[N - 1], move=[-1], direction=[-1],
                                ta=[0], tb=[N - 1], op=COPY, phase=AG))
        else:  # on round the one-way ring
            blocks.append(Block(t0=N - 1, loops=net.ring_order(), cyclic=True, src0=[N - 1], move=[1],
                                direction=[1], ta=[0], tb=[N - 1], op=COPY, phase=AG))
    return compact(net, 1, blocks, name="single_path", collective="all_reduce", nbytes=nbytes,
                    itemsize=itemsize, description=single_path.__doc__.split("\n\n")[0],
                    promises={"conflict_free": True}, num_colors=1)


def _pincer_instances(ring, a, shard0, shard1, N):
    """Pincer from the pair (a, a+1) on chunks [shard0, shard1) of each instance.

    Odd N: chains a+1 -> ... and a -> a-1 -> ... meet at a+(N+1)/2, which
    broadcasts back. Even N: chains of N/2 nodes each end in an exchange F <-> E,
    then both broadcast back.
    """
    a = np.atleast_1d(np.asarray(a, dtype=np.int64))
    rows = dict(row_loop=np.zeros(len(a), dtype=np.int64), row_shift=a,
                row_c0=np.broadcast_to(np.asarray(shard0, dtype=np.int64), a.shape),
                row_w=np.broadcast_to(np.asarray(shard1, dtype=np.int64) - shard0, a.shape))
    h = (N - 1) // 2 if N % 2 else N // 2
    # Positions relative to a. Right chain a+1 -> a+2 -> ...: hop a+u -> a+u+1 at step
    # u-1; left chain a -> a-1 -> ...: hop a-u -> a-u-1 at step u. Odd N: both end on
    # a+h+1 = a-h. Even N: the last hops (step h-1) are the exchange between E = a+h
    # and F = a-h+1.
    rs = Block(t0=0, loops=ring, cyclic=True, src0=[1, 0], move=[1, -1], direction=[1, -1], ta=[0, 0],
               tb=[h, h], op=COMBINE, phase=RS, **rows)
    if N % 2:
        M = h + 1  # hops M-u -> M-u-1 and M+u -> M+u+1 at step h+u
        ag = Block(t0=0, loops=ring, cyclic=True, src0=[M + h, M - h], move=[-1, 1], direction=[-1, 1],
                   ta=[h, h], tb=[2 * h, 2 * h], op=COPY, phase=AG, **rows)
        return [rs, ag], h + h
    E, F = h, -h + 1  # hops E-u -> E-u-1 and F+u -> F+u+1 at step h+u
    ag = Block(t0=0, loops=ring, cyclic=True, src0=[E + h, F - h], move=[-1, 1], direction=[-1, 1],
               ta=[h, h], tb=[2 * h - 1, 2 * h - 1], op=COPY, phase=AG, **rows)
    return [rs, ag], h + h - 1


def _two_way_ring(net: Network, what: str):
    ring = net.ring_order()
    if not net.bidirectional:
        raise TopologyError(f"{what} sends both ways round the ring; {net.name} has one-way links only")
    return ring


def pincer(net: Network, *, nbytes: int = 2**20, itemsize: int = 4) -> Schedule:
    """Pincer all-reduce: two chains towards each other, whole vector ([md-allreduce]).

    With 8 nodes A..H: step 1 A->H and B->C, step 2 H->G and C->D, step 3 G->F
    and D->E; with an even count a final exchange F<->E gives both the total, which
    is then broadcast back (E->D->C->B, F->G->H->A). With an odd count the two
    chains meet on one node. N-1 steps of the whole vector V.

    Links used: two per step (one each direction of the ring). Conflict-free.

    Examples
    --------
    >>> from scwork.collectives import Network, pincer
    >>> net = Network.ring(8)
    >>> s = pincer(net)
    >>> [[f"{net.node_label(t.source)}->{net.node_label(t.destination)}" for t in step] for step in s][:4]
    [['B->C', 'A->H'], ['C->D', 'H->G'], ['D->E', 'G->F'], ['E->F', 'F->E']]
    """
    check_size(nbytes, itemsize)
    ring = _two_way_ring(net, "the pincer")
    N = len(ring)
    blocks, _ = _pincer_instances(ring, 0, 0, 1, N)
    return compact(net, 1, blocks, name="pincer", collective="all_reduce", nbytes=nbytes, itemsize=itemsize,
                    description=pincer.__doc__.split("\n\n")[0],
                    promises={"conflict_free": loop_two_way_ok(net, ring)}, num_colors=1)


def rotated_pincer(net: Network, *, nbytes: int = 2**20, itemsize: int = 4) -> Schedule:
    """Rotated pincer: one pincer from every adjacent pair, each on its own shard.

    The vector is cut into N near-equal shards; the pincer of shard j starts at
    the pair (p_j, p_j+1) of the ring; all N instances run at once, intermediate
    nodes buffer incoming shards while sending their own. N-1 steps of V/N per
    link and direction: the bandwidth-optimal (N-1)/N x V / W.

    Links used: every directed link of the ring in every step. Conflict-free
    (instances are rotations of each other).

    Examples
    --------
    >>> from scwork.collectives import Network, rotated_pincer
    >>> s = rotated_pincer(Network.ring(8))
    >>> s.num_steps, len(s[0]), s.conflict_free
    (7, 16, True)
    """
    check_size(nbytes, itemsize)
    ring = _two_way_ring(net, "the rotated pincer")
    N = len(ring)
    j = np.arange(N)
    blocks, _ = _pincer_instances(ring, j, j, j + 1, N)
    return compact(net, N, blocks, name="rotated_pincer", collective="all_reduce", nbytes=nbytes,
                    itemsize=itemsize, description=rotated_pincer.__doc__.split("\n\n")[0],
                    promises={"conflict_free": loop_two_way_ok(net, ring)}, num_colors=1)


def improved_rotated_pincer(net: Network, *, nbytes: int = 2**20, itemsize: int = 4) -> Schedule:
    """Improved rotated pincer (even N): each node sends half of its shard each way.

    Our reading of [md-allreduce]: for shard j with apex A = p_j and
    opposite node E = p_j+N/2, A sends the first half of its data towards H
    (A->H->G->F->E) and the other half towards B (A->B->C->D->E); the other
    half's chain on each side starts at A's neighbour, so both halves collect
    every node and both paths from A are symmetric (N/2 hops). E holds the total
    and sends it back both ways; as the final step B and H send A disjoint halves.
    N steps; N-1 shard-steps of link time, as the rotated pincer, with symmetric
    paths and no duplicated exchange.

    Raises
    ------
    ConfigError
        Odd number of nodes.

    Examples
    --------
    >>> from scwork.collectives import Network, improved_rotated_pincer
    >>> s = improved_rotated_pincer(Network.ring(8))
    >>> s.num_steps, s.conflict_free
    (8, True)
    """
    check_size(nbytes, itemsize)
    ring = _two_way_ring(net, "the improved rotated pincer")
    N = len(ring)
    if N % 2:
        raise ConfigError(
            f"the improved rotated pincer needs an even number of nodes, {net.name} has {N}; "
            "use rotated_pincer for odd counts"
        )
    h = N // 2
    # Instance a (row a, shifted by a) owns chunks lo=2a, mid=2a+1, hi=2a+2: half 1 =
    # [lo, mid), half 0 = [mid, hi). Reduce-scatter: the left chain of half 0 from A
    # (a-u -> a-u-1 at step u) and the left chain of half 1 from H (a-u -> a-u-1 at
    # step u-1) of the next instance leave the same node at the same step with adjacent
    # chunks: one transfer [mid, hi + 1) (likewise rightwards, [lo - 1, mid)); in the
    # last step only A's own chains remain. Chunk ranges wrap modulo 2N (instance N-1
    # next to instance 0: two transfers). All-gather from E = a+h both ways; in the
    # last step B and H send A disjoint halves.
    rows = dict(row_loop=np.zeros(N, dtype=np.int64), row_shift=np.arange(N), row_c0=2 * np.arange(N),
                chunk_mode=CHUNKS_MOD_C)
    rs = Block(t0=0, loops=ring, cyclic=True, src0=[0, 0, 0, 0], move=[-1, -1, 1, 1],
               direction=[-1, -1, 1, 1], p0=[1, 1, -1, 0], p1=[3, 2, 1, 1], ta=[0, h - 1, 0, h - 1],
               tb=[h - 1, h, h - 1, h], op=COMBINE, phase=RS, **rows)
    ag = Block(t0=0, loops=ring, cyclic=True, src0=[2 * h, 2 * h, 0, 0], move=[-1, -1, 1, 1],
               direction=[-1, -1, 1, 1], p0=[0, 0, 0, 1], p1=[2, 1, 2, 2], ta=[h, 2 * h - 1, h, 2 * h - 1],
               tb=[2 * h - 1, 2 * h, 2 * h - 1, 2 * h], op=COPY, phase=AG, **rows)
    # On a ring of 2 both directions lead to the same node: those transfers merge too.
    return compact(net, 2 * N, [rs, ag], coalesce=N == 2, name="improved_rotated_pincer",
                    collective="all_reduce", nbytes=nbytes, itemsize=itemsize,
                    description=improved_rotated_pincer.__doc__.split("\n\n")[0],
                    promises={"conflict_free": loop_two_way_ok(net, ring)}, num_colors=1)
