"""Every collective schedule builder by name, and the map of where each algorithm lives.

The all-reduce algorithms of the multi-dimensional all-reduce patent [md-allreduce]
and the standard ring baselines, each as a compact :class:`Schedule`, built in
:mod:`~scwork.collectives.pincers` (single path, pincers),
:mod:`~scwork.collectives.rings` (ring baselines),
:mod:`~scwork.collectives.multidim` (dimension by dimension, multi-color, mesh loops)
and :mod:`~scwork.collectives.exchange` (all-to-all), from the patterns and lanes of
:mod:`~scwork.collectives._lanes`. This module re-exports them all and holds
:data:`ALGORITHMS` and :func:`build`.

Every builder returns a schedule of transfers between neighbouring nodes as a
step program (:mod:`scwork.collectives._program`): per phase and loop family one
block whose rule gives the transfers of any step (a ring's step t is step 0 with
the pieces rotated by t; a rotated pincer is one pincer shifted to every start
node), so a 9,216-chip pod's schedule is built in well under a second and costed
by streaming over its steps; explicit arrays are written out only on demand
(``tests/collectives/test_compact.py`` holds every builder equal, transfer for
transfer, to the explicit builders it replaced). Nothing
here moves data (see :func:`~scwork.collectives.execute`) or estimates time (see
:func:`~scwork.collectives.cost`). Each docstring says which links the algorithm
uses and what it promises; ``tests/collectives`` holds every algorithm to its
promises on random topologies.

1-D algorithms run on a ring through all nodes (:meth:`Network.ring_order`; on a
mesh with 2 cores per chip that ring is the out-and-back loop of [md-allreduce] fig. 10):

- :func:`single_path`: chain reduce, then broadcast back (2(N-1) steps of V).
- :func:`pincer`: two chains towards each other from a pair of neighbours.
- :func:`rotated_pincer`: one pincer per adjacent pair, each on its own shard.
- :func:`improved_rotated_pincer`: even N, a node sends half of its shard each way.
- :func:`ring_all_reduce`, :func:`ring_reduce_scatter`, :func:`ring_all_gather`:
  the standard ring (one-way, or two counter-rotating rings on halves).

Multi-dimensional (grids, tori, meshes, with or without several cores per chip):

- :func:`multi_dim_all_reduce`: reduce-scatter along dimension 0 lines in
  parallel, then along dimension 1 on the reduced fraction, ...; all-gather in
  reverse dimension order. ``colors=n`` runs n colors at once on disjoint data,
  each with its dimension order rotated, so every link is busy.
- :func:`multi_color_all_reduce`, :func:`mesh_loop_all_reduce`: shorthands.
- :func:`reduce_scatter`, :func:`all_gather`: the two halves on their own,
  optionally along a subset of the dimensions.
- :func:`all_to_all`: personalised exchange along the ring through all nodes.

Which loop each phase runs on:

- a dimension that wraps: a ring along it ("ring": one direction per lane;
  "pincer": both directions, whole shards, the rotated pincer of [md-allreduce]);
- a dimension without wraparound and one core per chip: the line algorithm (the
  16x4 case of [md-allreduce]: ring where it wraps, line where not). It is the single
  path applied to every piece at once: piece ``s`` flows from both ends of the
  line towards its owner ``s``, summing on the way (n-1 steps, both directions
  of every link busy); the all-gather floods it back;
- several cores per chip, first phase of a color: a loop through *all* cores of
  the chips of that line -- on a torus the zigzag (a shard enters core 0, is
  summed, goes on chip to core 1, then to the next chip: half the hops stay on
  chip), on a mesh the out-and-back loop turning between the cores of the corner
  chips ([md-allreduce] fig. 10);
- several cores per chip, later phases: after the first phase the cores of a chip
  own different pieces, so core ``j`` continues with core ``j`` of the other chips
  (cores 0 and 1 in opposite directions, which keeps a 2-core torus conflict-free).
"""

from __future__ import annotations

from scwork._validate import shown
from scwork.collectives.exchange import all_to_all
from scwork.collectives.multidim import (
    all_gather,
    mesh_loop_all_reduce,
    multi_color_all_reduce,
    multi_dim_all_reduce,
    reduce_scatter,
)
from scwork.collectives.network import Network
from scwork.collectives.pincers import improved_rotated_pincer, pincer, rotated_pincer, single_path
from scwork.collectives.rings import ring_all_gather, ring_all_reduce, ring_reduce_scatter
from scwork.collectives.schedule import Schedule
from scwork.errors import ConfigError

__all__ = [
    "ALGORITHMS",
    "all_gather",
    "all_to_all",
    "build",
    "improved_rotated_pincer",
    "mesh_loop_all_reduce",
    "multi_color_all_reduce",
    "multi_dim_all_reduce",
    "pincer",
    "reduce_scatter",
    "ring_all_gather",
    "ring_all_reduce",
    "ring_reduce_scatter",
    "rotated_pincer",
    "single_path",
]

#: Algorithm name -> builder(net, **kwargs), for menus and the step-by-step widget.
ALGORITHMS = {
    "single_path": single_path,
    "pincer": pincer,
    "rotated_pincer": rotated_pincer,
    "improved_rotated_pincer": improved_rotated_pincer,
    "ring": lambda net, **kw: ring_all_reduce(net, bidirectional=False, **kw),
    "bidirectional_ring": lambda net, **kw: ring_all_reduce(net, bidirectional=True, **kw),
    "dimension_by_dimension": lambda net, **kw: multi_dim_all_reduce(net, colors=1, **kw),
    "multi_color": multi_color_all_reduce,
    "mesh_loops": mesh_loop_all_reduce,
    "reduce_scatter": reduce_scatter,
    "all_gather": all_gather,
    "all_to_all": all_to_all,
}


def build(name: str, net: Network, **kwargs) -> Schedule:
    """Build the schedule of algorithm ``name`` (a key of :data:`ALGORITHMS`).

    Examples
    --------
    >>> from scwork.collectives import Network, build
    >>> build("rotated_pincer", Network.ring(5)).num_steps
    4
    """
    try:
        fn = ALGORITHMS[name]
    except (KeyError, TypeError):       # TypeError: an unhashable name
        raise ConfigError(f"unknown algorithm {shown(name)}; known: {', '.join(ALGORITHMS)}") from None
    unknown = sorted(set(kwargs) - _accepted_keywords(name))
    if unknown:
        raise ConfigError(f"algorithm {name!r} takes no keyword(s) {', '.join(unknown)}; it takes "
                          f"{', '.join(sorted(_accepted_keywords(name))) or 'none'}")
    return fn(net, **kwargs)


def _accepted_keywords(name: str) -> set[str]:
    """Keywords algorithm ``name`` takes (menu entries that fix one, e.g. "ring", do not take it)."""
    import inspect

    fixed = {"ring": (ring_all_reduce, {"bidirectional"}), "bidirectional_ring": (ring_all_reduce, {"bidirectional"}),
             "dimension_by_dimension": (multi_dim_all_reduce, {"colors"})}
    function, taken = fixed.get(name, (ALGORITHMS[name], set()))
    parameters = list(inspect.signature(function).parameters.values())
    if any(p.kind == p.VAR_KEYWORD for p in parameters):      # passed on to multi_dim_all_reduce
        parameters += inspect.signature(multi_dim_all_reduce).parameters.values()
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - taken - {"net"}
