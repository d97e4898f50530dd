"""The standard ring collectives through all nodes: all-reduce, reduce-scatter, all-gather.

The baselines the algorithms of [md-allreduce] are compared with: one-way rings, or
two counter-rotating rings on halves of the data, along :meth:`Network.ring_order`.
"""

from __future__ import annotations

import numpy as np

from scwork._validate import shown
from scwork.collectives._lanes import check_size, compact, loop_one_way_ok, loop_two_way_ok, run_lanes
from scwork.collectives.network import Network
from scwork.collectives.schedule import Schedule
from scwork.errors import ConfigError, TopologyError

__all__ = ["ring_all_gather", "ring_all_reduce", "ring_reduce_scatter"]


# ---------------------------------------------------------------------------------------
# Public builders: 1-D ring through all nodes
# ---------------------------------------------------------------------------------------
def _ring_lanes(net: Network, collective: str, bidirectional: bool, algorithm: str,
                nbytes: int, itemsize: int, name: str, description: str) -> Schedule:
    check_size(nbytes, itemsize)
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise ConfigError(f"bidirectional must be True or False, got {shown(bidirectional)}")
    ring = net.ring_order()
    N = len(ring)
    if bidirectional and not net.bidirectional:
        raise TopologyError(f"{net.name} has one-way links only: use bidirectional=False")
    directions = (1, -1) if (bidirectional and algorithm == "ring") else (1,)
    lanes = []
    for li, direction in enumerate(directions):
        loops = ring[None, :] if direction > 0 else ring[None, ::-1]
        lanes.append((0, li * N, (li + 1) * N, [([(algorithm, loops)], "the ring")]))
    blocks = []
    owners = run_lanes(blocks, lanes, collective, net.num_nodes)
    on_chip = net.cores_per_chip > 1
    two_way = algorithm == "pincer" or len(directions) > 1
    promise = loop_two_way_ok(net, ring) if two_way else loop_one_way_ok(net, ring)
    return compact(net, N * len(directions), blocks, name=name, collective=collective, owners=owners,
                    nbytes=nbytes, itemsize=itemsize,
                    description=description + (" Zigzags through the cores of each chip." if on_chip else ""),
                    promises={"conflict_free": bool(promise)}, num_colors=1)


def ring_all_reduce(net: Network, bidirectional: bool = True, *, nbytes: int = 2**20,
                    itemsize: int = 4) -> Schedule:
    """Standard ring all-reduce over all nodes: reduce-scatter then all-gather.

    The 1-D baseline. The vector is cut into N shards; in each of N-1 steps every
    node sends one shard to the next node of :meth:`Network.ring_order` (which
    adds it), then N-1 steps of copies. Every node sends 2(N-1)/N x V bytes.
    ``bidirectional=True`` runs two rings in opposite directions, each on half
    the data (2(N-1) steps of V/(2N) per link and direction).

    Links used: the ring's links (one direction, or both). Conflict-free when the
    ring uses every directed link at most once per direction (tori, zigzag
    loops); on the out-and-back loop of a mesh the one-way ring is conflict-free
    and the two-way ring is not.

    Examples
    --------
    >>> from scwork.collectives import Network, ring_all_reduce
    >>> s = ring_all_reduce(Network.ring(8), bidirectional=False)
    >>> s.num_steps, float(s.bytes_sent()[0] / s.nbytes)
    (14, 1.75)
    """
    return _ring_lanes(net, "all_reduce", bidirectional, "ring", nbytes, itemsize,
                       "bidirectional_ring" if bidirectional else "ring",
                       ring_all_reduce.__doc__.split("\n\n")[0])


def ring_reduce_scatter(net: Network, bidirectional: bool = True, *, nbytes: int = 2**20,
                        itemsize: int = 4) -> Schedule:
    """Ring reduce-scatter over all nodes (N-1 steps; two rings on halves if bidirectional).

    The first half of :func:`ring_all_reduce`, same links and promises; node
    ``n`` ends owning the sum on its ``schedule.owners`` ranges.
    """
    return _ring_lanes(net, "reduce_scatter", bidirectional, "ring", nbytes, itemsize,
                       "ring_reduce_scatter", ring_reduce_scatter.__doc__.split("\n\n")[0])


def ring_all_gather(net: Network, bidirectional: bool = True, *, nbytes: int = 2**20,
                    itemsize: int = 4) -> Schedule:
    """Ring all-gather over all nodes (N-1 steps; two rings on halves if bidirectional).

    The second half of :func:`ring_all_reduce`, same links and promises; node
    ``n`` starts with its ``schedule.owners`` ranges.
    """
    return _ring_lanes(net, "all_gather", bidirectional, "ring", nbytes, itemsize,
                       "ring_all_gather", ring_all_gather.__doc__.split("\n\n")[0])
