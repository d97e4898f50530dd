"""Reference for the property tests: the explicit builders every compact builder must equal.

A frozen copy of the algorithms as they were written before schedules became
compact: every builder accumulates all transfers as explicit arrays
(``scwork.collectives.schedule._Builder``). ``tests/collectives/test_compact.py``
checks that the compact schedules of :mod:`scwork.collectives.algorithms` hold
the same transfers per step and cost the same. Docstring examples are left out
(the library's builders carry them).

Why a whole frozen copy is kept: it is the cheapest independent check of the compact
step programs. The explicit builders write each transfer out directly and share none of
the pattern and lane machinery (:mod:`scwork.collectives._lanes`,
:mod:`scwork.collectives._program`) that the compact ones use, so a bug there cannot
hide in both; a hand-written expectation per algorithm and topology would cover far
fewer cases.

The original module docstring follows.

All-reduce algorithms of the multi-dimensional all-reduce patent [md-allreduce] and the
standard ring baselines, each written out as an explicit :class:`Schedule`.

Every builder returns a schedule of transfers between neighbouring nodes; nothing
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

import math
from functools import lru_cache

import numpy as np

from scwork.collectives.network import Network
from scwork.collectives.schedule import Schedule, _Builder
from scwork.errors import ConfigError, TopologyError

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

RS, AG, A2A = 0, 1, 2  # phase codes (PHASES)
COMBINE, COPY = 0, 1  # op codes (OPS)


# ---------------------------------------------------------------------------------------
# 1-D patterns in loop-position space: arrays (src_pos, dst_pos, piece, step).
# Position i ends owning piece i after a reduce-scatter and starts owning it before
# an all-gather. A reduce-scatter built as the dual of an all-gather is the same
# tree run backwards in time with the links reversed and copy -> combine.
# ---------------------------------------------------------------------------------------
@lru_cache(maxsize=256)
def _ring_ag(L: int):
    t, i = np.meshgrid(np.arange(L - 1), np.arange(L), indexing="ij")
    return i.ravel(), ((i + 1) % L).ravel(), ((i - t) % L).ravel(), t.ravel(), L - 1


@lru_cache(maxsize=256)
def _ring_rs(L: int):
    t, i = np.meshgrid(np.arange(L - 1), np.arange(L), indexing="ij")
    return i.ravel(), ((i + 1) % L).ravel(), ((i - t - 1) % L).ravel(), t.ravel(), L - 1


@lru_cache(maxsize=256)
def _pincer_ag(L: int):
    """Whole shards both ways: piece q goes ceil((L-1)/2) hops forward, floor back."""
    fwd, back = (L - 1 + 1) // 2, (L - 1) // 2
    src, dst, piece, step = [], [], [], []
    q = np.arange(L)
    for u in range(fwd):
        src.append((q + u) % L), dst.append((q + u + 1) % L), piece.append(q), step.append(np.full(L, u))
    for u in range(back):
        src.append((q - u) % L), dst.append((q - u - 1) % L), piece.append(q), step.append(np.full(L, u))
    cat = (lambda a: np.concatenate(a) if a else np.zeros(0, dtype=np.int64))
    return cat(src), cat(dst), cat(piece), cat(step), fwd


@lru_cache(maxsize=256)
def _line_ag(L: int):
    """Line: piece s floods right (i -> i+1 at step i-s) and left (i -> i-1 at step s-i)."""
    src, dst, piece, step = [], [], [], []
    for s in range(L):
        for i in range(s, L - 1):
            src.append(i), dst.append(i + 1), piece.append(s), step.append(i - s)
        for i in range(s, 0, -1):
            src.append(i), dst.append(i - 1), piece.append(s), step.append(s - i)
    a = lambda x: np.asarray(x, dtype=np.int64)
    return a(src), a(dst), a(piece), a(step), L - 1


def _dual(pattern):
    src, dst, piece, step, T = pattern
    return dst, src, piece, T - 1 - step, T


@lru_cache(maxsize=256)
def _pattern(kind: str, phase: int, L: int):
    ag = {"ring": _ring_ag, "pincer": _pincer_ag, "line": _line_ag}[kind](L)
    if phase == AG:
        return ag
    if kind == "ring":
        return _ring_rs(L)
    return _dual(ag)


# ---------------------------------------------------------------------------------------
# Lanes: a lane is one color (and, for one-way rings, one direction) working on its own
# contiguous chunk range through a sequence of phases; each phase is a list of loop
# families (kind, loops[num_loops, L]) that run at the same time.
# ---------------------------------------------------------------------------------------
def _emit_phase(b: _Builder | None, fams, R0, R1, phase: int, t0: int, color: int, where: str):
    """Emit one reduce-scatter or all-gather phase; return (steps, new R0, new R1).

    ``R0``/``R1``: chunk region every node works on before the phase (loop members
    share one region); after a reduce-scatter, loop position ``q`` owns piece ``q``.
    With ``b=None`` only the regions are computed.
    """
    newR0, newR1 = R0.copy(), R1.copy()
    T = 0
    for kind, loops in fams:
        L = loops.shape[1]
        if L == 1:
            continue
        lr0, lr1 = R0[loops[:, 0]], R1[loops[:, 0]]
        if not ((R0[loops] == lr0[:, None]).all() and (R1[loops] == lr1[:, None]).all()):
            raise InternalError(f"loop members of {where} do not share one data region")
        width = lr1 - lr0
        if (width % L).any():
            raise InternalError(f"region of {where} does not split into {L} pieces")
        w = width // L
        if b is not None:
            src, dst, piece, step, steps = _pattern(kind, phase, L)
            c0 = lr0[:, None] + piece[None, :] * w[:, None]
            b.add(t0 + step[None, :], loops[:, src], loops[:, dst], c0, c0 + w[:, None],
                  COMBINE if phase == RS else COPY, color, phase)
            T = max(T, steps)
        q = np.arange(L)
        newR0[loops] = lr0[:, None] + q[None, :] * w[:, None]
        newR1[loops] = newR0[loops] + w[:, None]
    return T, newR0, newR1


def _run_lanes(b: _Builder, lanes, collective: str, num_nodes: int):
    """lanes: list of (color, r0, r1, phases); phases: list of (families, where).

    Returns the owner arrays (node, start, stop) of the reduce-scattered data.
    """
    owners = ([], [], [])
    for color, r0, r1, phases in lanes:
        R0 = np.full(num_nodes, r0, dtype=np.int64)
        R1 = np.full(num_nodes, r1, dtype=np.int64)
        t = 0
        history = []
        for fams, where in phases:
            history.append((fams, R0, R1, where))
            # An all-gather on its own only needs the regions the reduce-scatter would leave.
            T, R0, R1 = _emit_phase(None if collective == "all_gather" else b, fams, R0, R1, RS, t, color, where)
            t += T
        owners[0].append(np.arange(num_nodes))
        owners[1].append(R0)
        owners[2].append(R1)
        if collective in ("all_reduce", "all_gather"):
            for fams, P0, P1, where in reversed(history):
                # The all-gather of a phase gives every loop member the parent region.
                T, _, _ = _emit_phase(b, fams, P0, P1, AG, t, color, where)
                t += T
    return tuple(np.concatenate(o) for o in owners)


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
    if algorithm not in ("ring", "pincer"):
        raise ConfigError(
            f"algorithm must be 'ring' (one-way rings, two of them on halves when bidirectional) "
            f"or 'pincer' (whole shards both ways, the rotated pincer of [md-allreduce]), got {algorithm!r}"
        )
    return algorithm


def _check_size(nbytes, itemsize):
    for name, v, lo in (("nbytes", nbytes, 0), ("itemsize", itemsize, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}")


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
    _check_size(nbytes, itemsize)
    if core_scheme not in ("zigzag", "on_chip_first"):
        raise ConfigError(f"core_scheme must be 'zigzag' or 'on_chip_first', got {core_scheme!r}")
    if dims is None:
        dims = tuple(range(net.ndim))
    dims = tuple(int(d) for d in dims)
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
        orders = [tuple(int(d) for d in o) for o in orders]
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
        plans[c] = [(d, max((_pattern(kind, RS, lp.shape[1])[4] for kind, lp in fams if lp.shape[1] > 1),
                            default=0)) for fams, _, d in phases]
        lanes.append((c, li * group, (li + 1) * group, [(fams, where) for fams, where, _ in phases]))
    b = _Builder(net, C)
    owners = _run_lanes(b, lanes, collective, net.num_nodes)
    promise = _multi_dim_promise(net, list(plans.values()), algorithm, bidirectional)
    return b.build(name=name or ("multi_color" if len(orders) > 1 else
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

    """
    dims = kwargs.get("dims")
    if colors is None:
        colors = len(dims) if dims is not None else net.ndim
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

    """
    if net.cores_per_chip < 2:
        raise TopologyError(
            f"{net.name}: mesh loops need 2 cores per chip (out along one core, back along the "
            "other); build the network with cores_per_chip=2, add wraparound, or use "
            "multi_dim_all_reduce (line algorithm on mesh dimensions)"
        )
    if colors is None:
        colors = len(kwargs.get("dims") or range(net.ndim))
    return multi_dim_all_reduce(net, colors=colors, bidirectional=bidirectional, **kwargs)


def reduce_scatter(net: Network, *, dims=None, colors: int = 1, bidirectional: bool = True,
                   algorithm: str = "ring", core_scheme: str = "zigzag", nbytes: int = 2**20,
                   itemsize: int = 4) -> Schedule:
    """Reduce-scatter along ``dims`` (all by default): the first half of the all-reduce.

    Every node ends owning the full sum of ``schedule.owners`` ranges (a
    1/(nodes reduced over) fraction of the vector per node). Links and promises
    as for :func:`multi_dim_all_reduce` (its reduce-scatter phases).

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

    """
    return _multi_dim(net, collective="all_gather", colors=colors, bidirectional=bidirectional,
                      algorithm=algorithm, dims=dims, orders=None, nbytes=nbytes, itemsize=itemsize,
                      name=None, description=all_gather.__doc__.split("\n\n")[0], core_scheme=core_scheme)


# ---------------------------------------------------------------------------------------
# Public builders: 1-D ring through all nodes
# ---------------------------------------------------------------------------------------
def _ring_lanes(net: Network, collective: str, bidirectional: bool, algorithm: str,
                nbytes: int, itemsize: int, name: str, description: str) -> Schedule:
    _check_size(nbytes, itemsize)
    ring = net.ring_order()
    N = len(ring)
    if bidirectional and not net.bidirectional:
        raise TopologyError(f"{net.name} has one-way links only: use bidirectional=False")
    directions = (1, -1) if (bidirectional and algorithm == "ring") else (1,)
    lanes = []
    for li, direction in enumerate(directions):
        loops = ring[None, :] if direction > 0 else ring[None, ::-1]
        lanes.append((0, li * N, (li + 1) * N, [([(algorithm, loops)], "the ring")]))
    b = _Builder(net, N * len(directions))
    owners = _run_lanes(b, lanes, collective, net.num_nodes)
    on_chip = net.cores_per_chip > 1
    two_way = algorithm == "pincer" or len(directions) > 1
    promise = _loop_two_way_ok(net, ring) if two_way else _loop_one_way_ok(net, ring)
    return b.build(name=name, collective=collective, owners=owners, nbytes=nbytes, itemsize=itemsize,
                   description=description + (" Zigzags through the cores of each chip." if on_chip else ""),
                   promises={"conflict_free": bool(promise)}, num_colors=1)


def _loop_one_way_ok(net: Network, ring) -> bool:
    links = net.link_ids(ring, np.roll(ring, -1))
    return len(np.unique(links)) == len(links) or len(ring) <= 2


def _loop_two_way_ok(net: Network, ring) -> bool:
    fwd = net.link_ids(ring, np.roll(ring, -1))
    back = net.link_ids(np.roll(ring, -1), ring)
    both = np.concatenate([fwd, back])
    return len(np.unique(both)) == len(both) or len(ring) <= 2


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

    """
    _check_size(nbytes, itemsize)
    path = net.path_order()
    N = len(path)
    b = _Builder(net, 1)
    t = np.arange(N - 1)
    b.add(t, path[:-1], path[1:], 0, 1, COMBINE, 0, RS)
    if N > 1:
        if net.bidirectional:
            b.add(N - 1 + t, path[::-1][:-1], path[::-1][1:], 0, 1, COPY, 0, AG)
        else:
            ring = net.ring_order()
            b.add(N - 1 + t, ring[(N - 1 + t) % N], ring[(N + t) % N], 0, 1, COPY, 0, AG)
    return b.build(name="single_path", collective="all_reduce", nbytes=nbytes, itemsize=itemsize,
                   description=single_path.__doc__.split("\n\n")[0], promises={"conflict_free": True},
                   num_colors=1)


def _pincer_instances(b: _Builder, ring, a, shard0, shard1, N):
    """Pincer from the pair (a, a+1) on chunks [shard0, shard1) of each instance.

    Odd N: chains a+1 -> ... and a -> a-1 -> ... meet at a+(N+1)/2, which
    broadcasts back. Even N: chains of N/2 nodes each end in an exchange F <-> E,
    then both broadcast back.
    """
    a = np.asarray(a)
    h = (N - 1) // 2 if N % 2 else N // 2
    # Right chain a+1 -> a+2 -> ...: hop a+u -> a+u+1 at step u-1; left chain a -> a-1 -> ...:
    # hop a-u -> a-u-1 at step u. Odd N: both end on a+h+1 = a-h. Even N: the last hops
    # (step h-1) are the exchange between E = a+h and F = a-h+1.
    for u in range(1, h + 1):
        b.add(u - 1, ring[(a + u) % N], ring[(a + u + 1) % N], shard0, shard1, COMBINE, 0, RS)
    for u in range(h):
        b.add(u, ring[(a - u) % N], ring[(a - u - 1) % N], shard0, shard1, COMBINE, 0, RS)
    if N % 2:
        M = a + h + 1
        for u in range(h):
            b.add(h + u, ring[(M - u) % N], ring[(M - u - 1) % N], shard0, shard1, COPY, 0, AG)
            b.add(h + u, ring[(M + u) % N], ring[(M + u + 1) % N], shard0, shard1, COPY, 0, AG)
        return h + h
    E, F = a + h, a - h + 1
    for u in range(h - 1):
        b.add(h + u, ring[(E - u) % N], ring[(E - u - 1) % N], shard0, shard1, COPY, 0, AG)
        b.add(h + u, ring[(F + u) % N], ring[(F + u + 1) % N], shard0, shard1, COPY, 0, AG)
    return h + h - 1


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

    """
    _check_size(nbytes, itemsize)
    ring = _two_way_ring(net, "the pincer")
    N = len(ring)
    b = _Builder(net, 1)
    _pincer_instances(b, ring, 0, 0, 1, N)
    return b.build(name="pincer", collective="all_reduce", nbytes=nbytes, itemsize=itemsize,
                   description=pincer.__doc__.split("\n\n")[0],
                   promises={"conflict_free": _loop_two_way_ok(net, ring)}, num_colors=1)


def rotated_pincer(net: Network, *, nbytes: int = 2**20, itemsize: int = 4) -> Schedule:
    """Rotated pincer: one pincer from every adjacent pair, each on its own shard.

    The vector is cut into N near-equal shards; the pincer of shard j starts at
    the pair (p_j, p_j+1) of the ring; all N instances run at once, intermediate
    nodes buffer incoming shards while sending their own. N-1 steps of V/N per
    link and direction: the bandwidth-optimal (N-1)/N x V / W.

    Links used: every directed link of the ring in every step. Conflict-free
    (instances are rotations of each other).

    """
    _check_size(nbytes, itemsize)
    ring = _two_way_ring(net, "the rotated pincer")
    N = len(ring)
    b = _Builder(net, N)
    j = np.arange(N)
    _pincer_instances(b, ring, j, j, j + 1, N)
    return b.build(name="rotated_pincer", collective="all_reduce", nbytes=nbytes, itemsize=itemsize,
                   description=rotated_pincer.__doc__.split("\n\n")[0],
                   promises={"conflict_free": _loop_two_way_ok(net, ring)}, num_colors=1)


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

    """
    _check_size(nbytes, itemsize)
    ring = _two_way_ring(net, "the improved rotated pincer")
    N = len(ring)
    if N % 2:
        raise ConfigError(
            f"the improved rotated pincer needs an even number of nodes, {net.name} has {N}; "
            "use rotated_pincer for odd counts"
        )
    h = N // 2
    a = np.arange(N)
    lo, mid, hi = 2 * a, 2 * a + 1, 2 * a + 2  # half 1 = [lo, mid), half 0 = [mid, hi)
    b = _Builder(net, 2 * N)
    for u in range(h):  # left chain of half 0 from A, right chain of half 1 from A
        b.add(u, ring[(a - u) % N], ring[(a - u - 1) % N], mid, hi, COMBINE, 0, RS)
        b.add(u, ring[(a + u) % N], ring[(a + u + 1) % N], lo, mid, COMBINE, 0, RS)
    for u in range(1, h):  # right chain of half 0 from B, left chain of half 1 from H
        b.add(u - 1, ring[(a + u) % N], ring[(a + u + 1) % N], mid, hi, COMBINE, 0, RS)
        b.add(u - 1, ring[(a - u) % N], ring[(a - u - 1) % N], lo, mid, COMBINE, 0, RS)
    E = a + h
    for u in range(h):
        last = u == h - 1
        b.add(h + u, ring[(E - u) % N], ring[(E - u - 1) % N], lo, mid if last else hi, COPY, 0, AG)
        b.add(h + u, ring[(E + u) % N], ring[(E + u + 1) % N], mid if last else lo, hi, COPY, 0, AG)
    return b.build(coalesce=True, name="improved_rotated_pincer", collective="all_reduce",
                   nbytes=nbytes, itemsize=itemsize,
                   description=improved_rotated_pincer.__doc__.split("\n\n")[0],
                   promises={"conflict_free": _loop_two_way_ok(net, ring)}, num_colors=1)


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

    """
    _check_size(nbytes, itemsize)
    try:
        ring = net.ring_order()
        cyclic = True
    except TopologyError:
        ring = net.path_order()
        cyclic = False
    N = len(ring)
    b = _Builder(net, N)
    pos = np.arange(N)
    if cyclic and net.bidirectional:
        fwd_max, back_max = N // 2, (N - 1) // 2
    elif cyclic:
        fwd_max, back_max = N - 1, 0
    else:
        fwd_max = back_max = N - 1
    for delta in range(1, N):
        if cyclic:
            if delta <= fwd_max:
                dist, sign = delta, 1
            elif N - delta <= back_max:
                dist, sign = N - delta, -1
            else:
                continue
            origin = pos
            dest = (pos + sign * dist) % N
            for u in range(dist):
                src = (origin + sign * u) % N
                b.add(u, ring[src], ring[(src + sign) % N], dest, dest + 1,
                      COPY, 0, A2A, ring[origin])
        else:
            for sign in (1, -1):
                origin = pos[(pos + sign * delta >= 0) & (pos + sign * delta < N)]
                dest = origin + sign * delta
                for u in range(delta):
                    src = origin + sign * u
                    b.add(u, ring[src], ring[src + sign], dest, dest + 1, COPY, 0, A2A, ring[origin])
    # Chunk j is the block for ring position j; owners: node ring[j] receives chunk j.
    owners = (ring, np.arange(N), np.arange(N) + 1)
    if not cyclic:
        promise = True  # a path uses each directed link for one node pair only
    elif net.bidirectional:
        promise = _loop_two_way_ok(net, ring)
    else:
        promise = _loop_one_way_ok(net, ring)
    return b.build(name="all_to_all", collective="all_to_all", owners=owners, nbytes=nbytes,
                   itemsize=itemsize, description=all_to_all.__doc__.split("\n\n")[0],
                   promises={"conflict_free": bool(promise)}, num_colors=1)


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

    """
    try:
        fn = ALGORITHMS[name]
    except KeyError:
        raise ConfigError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}") from None
    return fn(net, **kwargs)
