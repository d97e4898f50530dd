"""Dimension-by-dimension all-reduce on tori, meshes and grids, optionally multi-color.

The multi-dimensional algorithms of [md-allreduce]: reduce-scatter along every line
of one dimension in parallel, then along the next on the fraction each node now
owns, and all-gather in the reverse order; with several colors the data is cut in
parts that visit the dimensions in rotated orders at once. Which loop each phase
runs on (rings, lines, zigzags through the cores of a chip, mesh loops) is
described in :mod:`scwork.collectives.algorithms`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from scwork._validate import integers, shown
from scwork.collectives._lanes import check_size, compact, pattern_steps, run_lanes
from scwork.collectives.network import Network
from scwork.collectives.schedule import Schedule
from scwork.errors import ConfigError, TopologyError

__all__ = ["all_gather", "mesh_loop_all_reduce", "multi_color_all_reduce", "multi_dim_all_reduce", "reduce_scatter"]


# ---------------------------------------------------------------------------------------
# Loop families per dimension
# ---------------------------------------------------------------------------------------
def _dim_kind(net: Network, d: int, algorithm: str) -> str:
    if net.wraparound[d] or net.shape[d] <= 2:
        return algorithm
    return "line"


def _first_loops(net: Network, d: int) -> np.ndarray:
    """Loops through every core of each chip line along ``d`` (zigzag or out-and-back)."""
    k = net.cores_per_chip
    lines = net.lines(d)
    s = net.shape[d]
    if net.wraparound[d] or s <= 2:
        return (lines[:, :, None] * k + np.arange(k)[None, None, :]).reshape(len(lines), -1)
    out = lines * k
    back = []
    for i in range(s):
        c = lines[:, s - 1 - i]
        cores = np.arange(1, k) if i % 2 == 0 else np.arange(k - 1, 0, -1)
        back.append(c[:, None] * k + cores[None, :])
    return np.concatenate([out] + back, axis=1)


def _families(net: Network, d: int, first: bool, direction: int, algorithm: str):
    k = net.cores_per_chip
    if k == 1:
        kind = _dim_kind(net, d, algorithm)
        loops = net.lines(d)
        if kind != "line" and direction < 0:
            loops = loops[:, ::-1]
        return [(kind, loops)]
    if first:
        loops = _first_loops(net, d)
        if direction < 0:
            loops = loops[:, ::-1]
        return [(algorithm, loops)]
    kind = _dim_kind(net, d, algorithm)
    fams = []
    for j in range(k):
        loops = net.lines(d) * k + j
        sign = direction * (1 if j % 2 == 0 else -1)
        if kind != "line" and sign < 0:
            loops = loops[:, ::-1]
        fams.append((kind, loops))
    return fams


def _check_algorithm(algorithm: str) -> str:
    if not isinstance(algorithm, str) or algorithm not in ("ring", "pincer"):
        raise ConfigError(
            f"algorithm must be 'ring' (one-way rings, two of them on halves when bidirectional) "
            f"or 'pincer' (whole shards both ways, the rotated pincer of [md-allreduce]), got {shown(algorithm)}"
        )
    return algorithm


def _lane_phases(net: Network, order, direction: int, algorithm: str, core_scheme: str, color: int):
    """Phases of one lane: list of (families, description, dimension or -1 for on chip)."""
    k = net.cores_per_chip
    phases = []
    if k > 1 and core_scheme == "on_chip_first":
        loops = np.arange(net.num_chips)[:, None] * k + np.arange(k)[None, :]
        if direction < 0:
            loops = loops[:, ::-1]
        phases.append(([(algorithm, loops)], f"color {color} on chip", -1))
        for d in order:
            phases.append((_families(net, d, False, direction, algorithm), f"color {color} dimension {d}", d))
        return phases
    for p, d in enumerate(order):
        phases.append((_families(net, d, p == 0, direction, algorithm), f"color {color} dimension {d}", d))
    return phases


def _multi_dim(net: Network, *, collective: str, colors, bidirectional: bool, algorithm: str,
               dims, orders, nbytes: int, itemsize: int, name: str | None, description: str,
               core_scheme: str = "zigzag") -> Schedule:
    _check_algorithm(algorithm)
    check_size(nbytes, itemsize)
    if not isinstance(core_scheme, str) or core_scheme not in ("zigzag", "on_chip_first"):
        raise ConfigError(f"core_scheme must be 'zigzag' or 'on_chip_first', got {shown(core_scheme)}")
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise ConfigError(f"bidirectional must be True or False, got {shown(bidirectional)}")
    if dims is None:
        dims = tuple(range(net.ndim))
    dims = integers("dims", dims)
    if not dims or len(set(dims)) != len(dims) or any(not 0 <= d < net.ndim for d in dims):
        raise ConfigError(f"dims must be distinct dimensions of the {net.ndim}-D network, got {dims}")
    if orders is None:
        if colors is None:
            colors = len(dims)
        if isinstance(colors, bool) or not isinstance(colors, (int, np.integer)) or not 1 <= colors <= len(dims):
            raise ConfigError(
                f"colors must be between 1 and the number of dimensions reduced ({len(dims)}), got {colors!r}"
            )
        orders = [dims[c:] + dims[:c] for c in range(colors)]
    else:
        if isinstance(orders, (str, bytes)) or not isinstance(orders, Iterable):
            raise ConfigError(f"orders must be a list of dimension orders (one per color), got {shown(orders)}")
        orders = [integers(f"orders[{i}]", o) for i, o in enumerate(orders)]
        if not orders:
            raise ConfigError("orders is empty: give one dimension order per color, or leave it out")
        for o in orders:
            if sorted(o) != sorted(dims):
                raise ConfigError(f"every order must be a permutation of dims {dims}, got {o}")
    if not net.bidirectional and (algorithm == "pincer" or bidirectional):
        raise TopologyError(
            f"{net.name} has one-way links only: use algorithm='ring', bidirectional=False"
        )
    if not net.bidirectional and any(not net.wraparound[d] and net.shape[d] > 1 for d in dims):
        raise TopologyError(f"{net.name}: a one-way line cannot reduce; add wraparound")
    directions = (1, -1) if (bidirectional and algorithm == "ring") else (None,)
    lanes_spec = []
    for c, order in enumerate(orders):
        for dsign in directions:
            direction = dsign if dsign is not None else (1 if c % 2 == 0 or not net.bidirectional else -1)
            lanes_spec.append((c, order, direction))
    k = net.cores_per_chip
    group = k * math.prod(net.shape[d] for d in dims)
    n_lanes = len(lanes_spec)
    C = n_lanes * group
    lanes = []
    plans = {}
    for li, (c, order, direction) in enumerate(lanes_spec):
        phases = _lane_phases(net, order, direction, algorithm, core_scheme, c)
        plans[c] = [(d, max((pattern_steps(kind, lp.shape[1]) for kind, lp in fams if lp.shape[1] > 1),
                            default=0)) for fams, _, d in phases]
        lanes.append((c, li * group, (li + 1) * group, [(fams, where) for fams, where, _ in phases]))
    blocks = []
    owners = run_lanes(blocks, lanes, collective, net.num_nodes)
    promise = _multi_dim_promise(net, list(plans.values()), algorithm, bidirectional)
    return compact(net, C, blocks, name=name or ("multi_color" if len(orders) > 1 else
                                                  ("dimension_by_dimension" if len(dims) > 1 else algorithm)),
                    collective=collective, owners=owners, nbytes=nbytes, itemsize=itemsize,
                    description=description, promises={"conflict_free": promise},
                    num_colors=len(orders), group_size=group)


def _multi_dim_promise(net: Network, plans, algorithm: str, bidirectional: bool) -> bool:
    """Conflict-free cases we promise (and the tests check).

    ``plans``: per color, the (dimension, steps) of each phase (-1: on chip).
    Colors must always be on different dimensions with phases of equal length.
    Single-core chips: then every phase is conflict-free (a line used by the two
    one-way lanes of a color carries the same source/destination pairs, one
    message). Two cores per chip: one-way rings only, at most 2 colors (of
    opposite directions), and every dimension reduced after the phase that
    mixes the cores must wrap with more than 2 chips (cores 0 and 1 then go
    round in opposite directions).
    """
    for p in range(len(plans[0])):
        ds = [plan[p][0] for plan in plans]
        steps = {plan[p][1] for plan in plans}
        if len(plans) > 1 and (len(set(ds)) != len(ds) or len(steps) != 1):
            return False
    k = net.cores_per_chip
    if k == 1:
        return True
    if k > 2 or algorithm != "ring" or bidirectional or len(plans) > 2:
        return False
    later = {d for plan in plans for d, _ in plan[1:] if d >= 0}
    return all(net.shape[d] == 1 or (net.wraparound[d] and net.shape[d] > 2) for d in later)


# ---------------------------------------------------------------------------------------
# Public builders: multi-dimensional
# ---------------------------------------------------------------------------------------
def multi_dim_all_reduce(net: Network, *, colors: int = 1, bidirectional: bool = True,
                         algorithm: str = "ring", dims=None, orders=None, core_scheme: str = "zigzag",
                         nbytes: int = 2**20, itemsize: int = 4) -> Schedule:
    """Dimension-by-dimension all-reduce, optionally multi-color ([md-allreduce]).

    Reduce-scatter along every line of dimension ``order[0]`` in parallel, then
    along dimension ``order[1]`` on the 1/size fraction each node now owns, ...;
    then all-gather in the reverse dimension order. With ``colors=n`` the data is
    cut into ``n`` disjoint parts; color ``c`` visits the dimensions rotated by
    ``c`` (2-D: color 0 x then y, color 1 y then x), all colors at once.

    Parameters
    ----------
    net : Network
    colors : int
        1 (dimension by dimension) to ``len(dims)``.
    bidirectional : bool
        With ``algorithm="ring"``: two counter-rotating rings per color, each on
        half of the color's data. Ignored for ``"pincer"`` (always both ways).
    algorithm : {"ring", "pincer"}
        1-D algorithm along wrapping dimensions. ``"pincer"`` is the rotated
        pincer with whole shards (reduce towards each owner from both sides).
    dims : sequence of int, optional
        Dimensions to reduce over (default all): ``dims=(1,)`` reduces along
        dimension 1 only, every line on its own.
    orders : list of tuples, optional
        Explicit dimension order per color (overrides ``colors``).
    core_scheme : {"zigzag", "on_chip_first"}
        With several cores per chip, where the cores' data meet. ``"zigzag"``
        ([md-allreduce] figs. 9 and 10): the first phase of every color runs on loops through
        all cores of the chips of a line, so a shard arriving at core 0 is summed
        and moves on chip to core 1 before the next chip (half the hops stay on
        chip). ``"on_chip_first"``: first a reduce-scatter among the cores of
        each chip, then core ``j`` of every chip reduces piece ``j`` over the
        chips (cores in opposite directions), all-gather on chip at the end.
    nbytes, itemsize : int
        Vector size per node (bytes) and element size the byte counts refer to.

    Returns
    -------
    Schedule

    Notes
    -----
    Links used: in every phase only the links of the dimension being reduced
    (plus on-chip links with several cores per chip). Promises conflict-free
    (verified by the tests): single-core chips with one color; several colors
    when all reduced dimensions have the same size (colors are then always on
    different dimensions); 2-core tori with one color and one-way rings.

    Examples
    --------
    >>> from scwork.collectives import Network, multi_dim_all_reduce
    >>> s = multi_dim_all_reduce(Network.torus((4, 4)), colors=2)
    >>> s.num_steps, s.conflict_free
    (12, True)
    """
    return _multi_dim(net, collective="all_reduce", colors=colors, bidirectional=bidirectional,
                      algorithm=algorithm, dims=dims, orders=orders, nbytes=nbytes, itemsize=itemsize,
                      name=None, description=multi_dim_all_reduce.__doc__.split("\n\n")[0],
                      core_scheme=core_scheme)


def multi_color_all_reduce(net: Network, colors: int | None = None, **kwargs) -> Schedule:
    """Multi-color all-reduce: one color per dimension by default ([md-allreduce]).

    Color ``c`` reduce-scatters along the dimensions in the order rotated by ``c``
    and all-gathers in the reverse order, on its own 1/colors of the data; all
    colors run at once so every ICI link is busy in every step. Same parameters as
    :func:`multi_dim_all_reduce`.

    Examples
    --------
    >>> from scwork.collectives import Network, multi_color_all_reduce
    >>> s = multi_color_all_reduce(Network.torus((4, 4, 4)))
    >>> s.num_colors, s.num_steps, s.promises["conflict_free"]
    (3, 18, True)
    """
    # colors=None: one per reduced dimension (_multi_dim counts them once dims is checked).
    return multi_dim_all_reduce(net, colors=colors, **kwargs)


def mesh_loop_all_reduce(net: Network, colors: int | None = None, bidirectional: bool = False,
                         **kwargs) -> Schedule:
    """All-reduce on a mesh whose loops zigzag through the 2 cores of each chip.

    [md-allreduce] fig. 10: without wraparound links, full-duplex mesh links still form
    loops when every chip has two cores: out along one core, back along the
    other, turning between the two cores of the chips at the mesh edges (corner
    routing). The first phase of every color runs a one-way ring on these loops
    (each ICI link is then used once per direction per step: conflict-free); later
    phases, where the two cores of a chip own different pieces, run the line
    algorithm per core. Same parameters as :func:`multi_dim_all_reduce`.

    Raises
    ------
    TopologyError
        Chips with a single core: a mesh line cannot form a loop without a
        second core to come back on.

    Examples
    --------
    >>> from scwork.collectives import Network, mesh_loop_all_reduce
    >>> s = mesh_loop_all_reduce(Network.mesh((3, 3), cores_per_chip=2), colors=1)
    >>> s.links_used()
    {'ici': 24, 'on_chip': 6}
    """
    if net.cores_per_chip < 2:
        raise TopologyError(
            f"{net.name}: mesh loops need 2 cores per chip (out along one core, back along the "
            "other); build the network with cores_per_chip=2, add wraparound, or use "
            "multi_dim_all_reduce (line algorithm on mesh dimensions)"
        )
    return multi_dim_all_reduce(net, colors=colors, bidirectional=bidirectional, **kwargs)


def reduce_scatter(net: Network, *, dims=None, colors: int = 1, bidirectional: bool = True,
                   algorithm: str = "ring", core_scheme: str = "zigzag", nbytes: int = 2**20,
                   itemsize: int = 4) -> Schedule:
    """Reduce-scatter along ``dims`` (all by default): the first half of the all-reduce.

    Every node ends owning the full sum of ``schedule.owners`` ranges (a
    1/(nodes reduced over) fraction of the vector per node). Links and promises
    as for :func:`multi_dim_all_reduce` (its reduce-scatter phases).

    Examples
    --------
    >>> from scwork.collectives import Network, reduce_scatter
    >>> s = reduce_scatter(Network.ring(4), bidirectional=False)
    >>> s.num_steps, s.bytes_sent().tolist()
    (3, [786432.0, 786432.0, 786432.0, 786432.0])
    """
    return _multi_dim(net, collective="reduce_scatter", colors=colors, bidirectional=bidirectional,
                      algorithm=algorithm, dims=dims, orders=None, nbytes=nbytes, itemsize=itemsize,
                      name=None, description=reduce_scatter.__doc__.split("\n\n")[0], core_scheme=core_scheme)


def all_gather(net: Network, *, dims=None, colors: int = 1, bidirectional: bool = True,
               algorithm: str = "ring", core_scheme: str = "zigzag", nbytes: int = 2**20,
               itemsize: int = 4) -> Schedule:
    """All-gather along ``dims``: every node starts with its ``owners`` ranges.

    ``algorithm="pincer"`` sends whole shards both ways round each ring
    (ceil((n-1)/2) hops one way, floor((n-1)/2) the other), the bidirectional
    all-gather of [scaling-book] (time V / W_bidirectional); a
    dimension without wraparound uses the line (n-1 hops). Links and promises
    as for :func:`multi_dim_all_reduce` (its all-gather phases).

    Examples
    --------
    >>> from scwork.collectives import Network, all_gather
    >>> all_gather(Network.ring(4), algorithm="pincer").num_steps
    2
    >>> all_gather(Network.line(4), algorithm="pincer").num_steps
    3
    """
    return _multi_dim(net, collective="all_gather", colors=colors, bidirectional=bidirectional,
                      algorithm=algorithm, dims=dims, orders=None, nbytes=nbytes, itemsize=itemsize,
                      name=None, description=all_gather.__doc__.split("\n\n")[0], core_scheme=core_scheme)
