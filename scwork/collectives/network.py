"""Networks of chips (and of the cores inside chips) joined by directed links.

A :class:`Network` is a grid of chips: a ring or a line (1-D), a 2-D or 3-D torus,
a mesh, or a grid that wraps in some dimensions only (e.g. 16x4 wrapping in the
16-long dimension, as in [md-allreduce]). Each chip may hold ``cores_per_chip`` cores; every
core is a *node* of the network (a node owns one data vector in a collective).

Links are directed (one direction of a full-duplex cable each) and belong to a
:class:`LinkClass` that carries bandwidth (bytes/s, one direction) and latency (s):

- ``"ici"``: chip-to-chip inter-core interconnect. An ICI link joins two *chips*;
  any core of the source chip can send over it to any core of the destination
  chip (the router is per chip), so one link carries the traffic of all cores.
- ``"on_chip"``: between two cores of one chip (every ordered pair of cores).

Where the numbers come from (defaults, override any of them):

- ICI bandwidth: ``scwork.hardware.get(chip).ici_link_bytes_per_s`` (catalog; for
  v5e 4.5e10 B/s one way, from [scaling-book], TPU chapter).
- ICI latency :data:`ICI_LATENCY_S` = 1e-6 s per hop: [scaling-book],
  sharding chapter ("each hop over an ICI link has some intrinsic overhead ...
  typically around 1us").
- On-chip bandwidth: not published. Assumed equal to the chip's HBM bandwidth
  (cores exchange data through HBM/VMEM), ``hbm_bandwidth_bytes_per_s`` of the
  catalog; pass ``on_chip_bandwidth`` to model anything else.
- On-chip latency :data:`ON_CHIP_LATENCY_S` = 1e-7 s: an assumption (one
  DMA issue on chip, an order of magnitude below an ICI hop).

Examples
--------
>>> from scwork.collectives import Network
>>> net = Network.torus((4, 4))
>>> net.num_nodes, net.num_links
(16, 64)
>>> Network.grid((16, 4), wraparound=(True, False)).num_links
224
>>> two_core = Network.mesh((3, 3), cores_per_chip=2)
>>> two_core.num_nodes, int((two_core.link_kind == "on_chip").sum())
(18, 18)
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from scwork._validate import integer, shown
from scwork.errors import TopologyError

__all__ = ["DEFAULT_CHIP", "ICI_LATENCY_S", "ON_CHIP_LATENCY_S", "LinkClass", "Network"]

#: Latency of one ICI hop (s). Source: [scaling-book],
#: sharding chapter: "Each hop over an ICI link has some intrinsic overhead regardless
#: of the data volume. This is typically around 1us."
ICI_LATENCY_S = 1e-6

#: Latency of one on-chip core-to-core transfer (s). Not published: an assumption.
ON_CHIP_LATENCY_S = 1e-7

#: Catalog chip whose ICI numbers are used when no chip or bandwidth is given.
DEFAULT_CHIP = "v5e"


@dataclass(frozen=True)
class LinkClass:
    """Bandwidth and latency shared by a family of links.

    Parameters
    ----------
    name : str
        ``"ici"`` or ``"on_chip"`` (any name works for custom networks).
    bandwidth : float
        Bytes per second, one direction.
    latency : float
        Seconds per transfer (the alpha of the alpha-beta model).
    source : str
        Where the two numbers come from.
    """

    name: str
    bandwidth: float
    latency: float
    source: str = ""

    def __post_init__(self) -> None:
        for field_name in ("bandwidth", "latency"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise TopologyError(
                    f"{self.name} link {field_name} must be a number, got {shown(value)}"
                )
            if not math.isfinite(value) or value < 0:
                raise TopologyError(
                    f"{self.name} link {field_name} must be finite and >= 0, got {shown(value)}; "
                    f"pass a {'positive bandwidth in bytes/s' if field_name == 'bandwidth' else 'latency in seconds'}"
                )
        if self.bandwidth == 0:
            raise TopologyError(
                f"{self.name} link bandwidth is 0 bytes/s: no data could ever cross it; "
                "pass a positive bandwidth in bytes/s (one direction)"
            )

    def time(self, nbytes) -> float:
        """Alpha-beta time of one message of ``nbytes`` on one link of this class."""
        return self.latency + np.asarray(nbytes, dtype=float) / self.bandwidth


def _check_positive_int(name: str, value, minimum: int = 1) -> int:
    return integer(name, value, minimum=minimum, error=TopologyError)


#: Most nodes (chips x cores per chip) a :class:`Network` holds: 2**17, over ten times
#: the largest TPU pod (TPU7x, 9,216 chips x 2 cores).
MAX_NODES = 2**17

#: Most directed links a :class:`Network` holds: 2**21. ICI links are at most six per
#: chip; on-chip links join every ordered pair of a chip's cores (``k * (k - 1)`` per
#: chip), so many cores per chip is what reaches it (real TPUs have 1 or 2).
MAX_LINKS = 2**21


class Network:
    """Chips on a grid, optionally several cores per chip, joined by directed links.

    Build one with :meth:`ring`, :meth:`line`, :meth:`torus`, :meth:`mesh`,
    :meth:`grid` or :meth:`from_topology` rather than calling the constructor.

    Nodes are numbered ``chip * cores_per_chip + core``; chips are numbered in
    C order of their grid coordinates (the last dimension varies fastest).

    Attributes
    ----------
    shape : tuple of int
        Chip grid.
    wraparound : tuple of bool
        Per dimension, whether wraparound links close it into a ring.
    cores_per_chip : int
        Cores (nodes) per chip.
    link_classes : dict of str to LinkClass
        ``"ici"`` and, with several cores per chip, ``"on_chip"``.
    node_chip, node_core : ndarray of int, shape (num_nodes,)
        Chip and core of each node.
    chip_coords : ndarray of int, shape (num_chips, ndim)
        Grid coordinates of each chip.
    link_src_chip, link_dst_chip : ndarray of int, shape (num_links,)
        Chips joined by each directed link.
    link_src_core, link_dst_core : ndarray of int, shape (num_links,)
        Cores joined by an on-chip link; -1 for ICI links (any core may use them).
    link_kind : ndarray of str
        Link class name of each link.
    link_dim, link_sign : ndarray of int
        For ICI links the grid dimension and direction (+1 / -1); -1 and 0 on chip.
    link_wrap : ndarray of bool
        True for wraparound links.
    """

    def __init__(self, shape, wraparound, *, cores_per_chip: int = 1, bidirectional: bool = True,
                 ici: LinkClass, on_chip: LinkClass | None = None, chip: str | None = None,
                 name: str | None = None):
        shape = _checked_shape(shape)
        wraparound = _checked_wraparound(wraparound, shape)
        k = _check_positive_int("cores_per_chip", cores_per_chip)
        if not isinstance(bidirectional, (bool, np.bool_)):
            raise TopologyError(f"bidirectional must be True or False, got {shown(bidirectional)}")
        if k > 1 and on_chip is None:
            raise TopologyError("cores_per_chip > 1 needs an on-chip LinkClass")
        self.shape = shape
        self.wraparound = wraparound
        self.cores_per_chip = k
        self.bidirectional = bool(bidirectional)
        self.chip = chip
        self.link_classes = {"ici": ici}
        if k > 1:
            self.link_classes["on_chip"] = on_chip
        m = _checked_network_size(shape, k)
        if name is not None and not isinstance(name, str):
            raise TopologyError(f"name must be a string (or None for the default), got {shown(name)}")
        self.name = name or self._default_name()
        self.num_chips = m
        self.num_nodes = m * k
        self.chip_coords = np.stack(np.unravel_index(np.arange(m), shape), axis=1).astype(np.int64)
        self.node_chip = np.repeat(np.arange(m, dtype=np.int64), k)
        self.node_core = np.tile(np.arange(k, dtype=np.int64), m)

        self._add_links()
        self._index_links()

    def _add_links(self) -> None:
        """The ``link_*`` arrays: ICI links along every dimension (each cable once), then on-chip links."""
        shape, wraparound, m, k = self.shape, self.wraparound, self.num_chips, self.cores_per_chip
        src, dst, dims, signs, wraps = [], [], [], [], []
        seen = set()
        chips = np.arange(m)
        for d, size in enumerate(shape):
            if size == 1:
                continue
            for sign in ((1, -1) if self.bidirectional else (1,)):
                coords = self.chip_coords.copy()
                coords[:, d] += sign
                wrapped = (coords[:, d] < 0) | (coords[:, d] >= size)
                if not wraparound[d]:
                    ok = ~wrapped
                else:
                    ok = np.ones(m, dtype=bool)
                coords[:, d] %= size
                nbr = np.ravel_multi_index(tuple(coords.T), shape)
                for a, b, w in zip(chips[ok], nbr[ok], wrapped[ok]):
                    if (a, b) in seen:  # size-2 dims: the wraparound link is the same cable
                        continue
                    seen.add((a, b))
                    src.append(a)
                    dst.append(b)
                    dims.append(d)
                    signs.append(sign)
                    wraps.append(bool(w) and size > 2)
        n_ici = len(src)
        s_core = [-1] * n_ici
        d_core = [-1] * n_ici
        kinds = ["ici"] * n_ici
        if k > 1:
            for c in range(m):
                for a, b in itertools.permutations(range(k), 2):
                    src.append(c)
                    dst.append(c)
                    s_core.append(a)
                    d_core.append(b)
                    dims.append(-1)
                    signs.append(0)
                    wraps.append(False)
                    kinds.append("on_chip")
        self.link_src_chip = np.asarray(src, dtype=np.int64)
        self.link_dst_chip = np.asarray(dst, dtype=np.int64)
        self.link_src_core = np.asarray(s_core, dtype=np.int64)
        self.link_dst_core = np.asarray(d_core, dtype=np.int64)
        self.link_kind = np.asarray(kinds, dtype=object).astype(str) if kinds else np.zeros(0, dtype="<U7")
        self.link_dim = np.asarray(dims, dtype=np.int64)
        self.link_sign = np.asarray(signs, dtype=np.int64)
        self.link_wrap = np.asarray(wraps, dtype=bool)
        self.link_bandwidth = np.array([self.link_classes[c].bandwidth for c in self.link_kind], dtype=float)
        self.link_latency = np.array([self.link_classes[c].latency for c in self.link_kind], dtype=float)

    def _index_links(self) -> None:
        """Sorted lookup keys of the links: ICI by (src chip, dst chip), on chip by (src node, dst node)."""
        m, k = self.num_chips, self.cores_per_chip
        n = self.num_nodes
        keys = np.empty(len(self.link_src_chip), dtype=np.int64)
        ici = self.link_src_core < 0
        keys[ici] = self.link_src_chip[ici] * m + self.link_dst_chip[ici]
        src_node = self.link_src_chip * k + self.link_src_core
        dst_node = self.link_dst_chip * k + self.link_dst_core
        keys[~ici] = m * m + src_node[~ici] * n + dst_node[~ici]
        order = np.argsort(keys, kind="stable")
        self._keys = keys[order]
        self._key_link = order

    # -- constructors ---------------------------------------------------------------
    @classmethod
    def grid(cls, shape, wraparound=None, *, cores_per_chip: int = 1, chip: str | None = None,
             link_bandwidth: float | None = None, link_latency: float = ICI_LATENCY_S,
             on_chip_bandwidth: float | None = None, on_chip_latency: float = ON_CHIP_LATENCY_S,
             bidirectional: bool = True, name: str | None = None) -> Network:
        """A grid of chips; each dimension wraps around or not.

        Parameters
        ----------
        shape : int or tuple of int
            Chips per dimension (1 to 3 dimensions), e.g. ``(16, 4)``.
        wraparound : bool or tuple of bool, optional
            Per dimension, whether it wraps (torus) or not (mesh). Default: every
            dimension of size > 2 wraps (as :class:`scwork.Topology` assumes).
        cores_per_chip : int
            Cores per chip, joined by on-chip links. Default 1.
        chip : str, optional
            Catalog chip for the default bandwidths. Default :data:`DEFAULT_CHIP` ("v5e").
        link_bandwidth : float, optional
            ICI bandwidth per link and direction (B/s). Default: the chip's
            ``ici_link_bytes_per_s``.
        link_latency : float
            ICI latency per hop (s). Default :data:`ICI_LATENCY_S` (1 us).
        on_chip_bandwidth : float, optional
            Core-to-core bandwidth (B/s). Default: the chip's HBM bandwidth (assumption).
        on_chip_latency : float
            Core-to-core latency (s). Default :data:`ON_CHIP_LATENCY_S` (assumption).
        bidirectional : bool
            False keeps only the +1 direction of every ICI cable (a one-way ring).
        name : str, optional
            Display name.

        Raises
        ------
        TopologyError
            Zero-sized dimension, wraparound flags not matching the dimensions,
            negative or zero bandwidth, negative latency.
        """
        from scwork.hardware import get

        for what, value in (("link_bandwidth", link_bandwidth), ("link_latency", link_latency),
                            ("on_chip_bandwidth", on_chip_bandwidth), ("on_chip_latency", on_chip_latency)):
            # A scalar before any comparison (an array here made `==` ambiguous: ValueError).
            if value is not None and (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)):
                raise TopologyError(f"{what} must be a number, got {shown(value)}")
        if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
            shape = (int(shape),)
        if wraparound is None:
            try:
                wraparound = tuple(int(s) > 2 for s in shape)
            except (TypeError, ValueError, OverflowError):     # (int(inf) is an OverflowError)
                raise TopologyError(f"shape must be a tuple of positive integers, got {shown(shape)}") from None
        info = get(chip if chip is not None else DEFAULT_CHIP)
        if getattr(info, "kind", "tpu") != "tpu":
            raise TopologyError(f"{info.name} is not a TPU: it has no ICI links to model")
        if link_bandwidth is None:
            link_bandwidth = info.ici_link_bytes_per_s
            bw_source = f"catalog {info.name} ici_link_bytes_per_s"
        else:
            bw_source = "user value"
        ici = LinkClass("ici", link_bandwidth, link_latency,
                        f"bandwidth: {bw_source}; latency: "
                        + ("ICI_LATENCY_S (scaling-book, ~1 us per hop)" if link_latency == ICI_LATENCY_S
                           else "user value"))
        on_chip = None
        if not (isinstance(cores_per_chip, (int, np.integer)) and not isinstance(cores_per_chip, bool)):
            raise TopologyError(f"cores_per_chip must be an integer, got {shown(cores_per_chip)}")
        if cores_per_chip > 1:
            if on_chip_bandwidth is None:
                on_chip_bandwidth = info.hbm_bandwidth_bytes_per_s
                oc_source = f"assumed = catalog {info.name} hbm_bandwidth_bytes_per_s (unpublished)"
            else:
                oc_source = "user value"
            on_chip = LinkClass("on_chip", on_chip_bandwidth, on_chip_latency,
                                f"bandwidth: {oc_source}; latency: "
                                + ("ON_CHIP_LATENCY_S (assumption)" if on_chip_latency == ON_CHIP_LATENCY_S
                                   else "user value"))
        return cls(shape, wraparound, cores_per_chip=cores_per_chip, bidirectional=bidirectional,
                   ici=ici, on_chip=on_chip, chip=chip, name=name)

    @classmethod
    def ring(cls, n: int, bidirectional: bool = True, **kwargs) -> Network:
        """``n`` chips in a ring (1-D torus).

        Raises
        ------
        TopologyError
            ``n < 2``: a ring of one chip has no links.

        Examples
        --------
        >>> from scwork.collectives import Network
        >>> Network.ring(8).num_links, Network.ring(8, bidirectional=False).num_links
        (16, 8)
        """
        n = _check_positive_int("n (ring size)", n, minimum=0)
        if n < 2:
            raise TopologyError(
                f"a ring needs at least 2 chips, got n={n}: "
                + ("a network needs at least one node" if n == 0 else "a ring of one chip has no links")
                + "; use n >= 2 (or Network.line(1) for a single chip)"
            )
        return cls.grid((n,), (True,), bidirectional=bidirectional, **kwargs)

    @classmethod
    def line(cls, n: int, **kwargs) -> Network:
        """``n`` chips in a line (1-D mesh, no wraparound)."""
        n = _check_positive_int("n (line length)", n, minimum=0)
        if n < 1:
            raise TopologyError("a line needs at least one chip, got n=0; use n >= 1")
        return cls.grid((n,), (False,), **kwargs)

    @classmethod
    def torus(cls, shape, **kwargs) -> Network:
        """A torus: every dimension wraps around (2-D and 3-D, any sizes)."""
        shape = _shape_tuple(shape)
        return cls.grid(shape, (True,) * len(shape), **kwargs)

    @classmethod
    def mesh(cls, shape, **kwargs) -> Network:
        """A mesh: no dimension wraps around."""
        shape = _shape_tuple(shape)
        return cls.grid(shape, (False,) * len(shape), **kwargs)

    @classmethod
    def from_topology(cls, topology, *, cores_per_chip: int | None = None, **kwargs) -> Network:
        """The ICI network of a :class:`scwork.Topology` (its chip grid and wraparound).

        Parameters
        ----------
        topology : scwork.Topology
            Shape, wraparound and chip name are taken from it.
        cores_per_chip : int, optional
            Nodes per chip. Default: the topology's ``devices_per_chip`` (2 for
            the dual-chiplet TPU7x, else 1).
        **kwargs
            Passed to :meth:`grid` (``link_bandwidth``, ``link_latency``, ...).

        Examples
        --------
        >>> import scwork
        >>> from scwork.collectives import Network
        >>> topo = scwork.Topology.for_chip("v5e", shape=(16, 4), wraparound=(True, False))
        >>> net = Network.from_topology(topo)
        >>> net.shape, net.wraparound, net.link_classes["ici"].bandwidth
        ((16, 4), (True, False), 45000000000.0)
        """
        from scwork.hardware.topology import Topology

        if not isinstance(topology, Topology):
            raise TopologyError(f"from_topology needs a scwork.Topology, got {type(topology).__name__}")
        if topology.chip is not None:
            kwargs.setdefault("chip", topology.chip)
        if cores_per_chip is None:
            cores_per_chip = topology.devices_per_chip
        return cls.grid(topology.shape, topology.wraparound, cores_per_chip=cores_per_chip, **kwargs)

    # -- basic properties -----------------------------------------------------------
    def _default_name(self) -> str:
        grid = "x".join(str(s) for s in self.shape)
        if len(self.shape) == 1:
            kind = "ring" if self.wraparound[0] and self.shape[0] > 1 else "line"
        elif all(self.wraparound):
            kind = "torus"
        elif not any(self.wraparound):
            kind = "mesh"
        else:
            kind = "grid(wrap=" + ",".join("T" if w else "F" for w in self.wraparound) + ")"
        cores = f", {self.cores_per_chip} cores/chip" if self.cores_per_chip > 1 else ""
        return f"{grid} {kind}{cores}"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def num_links(self) -> int:
        return len(self.link_src_chip)

    def __repr__(self) -> str:
        return f"Network({self.name!r}: {self.num_nodes} nodes, {self.num_links} links)"

    def node(self, chip_coord: Sequence[int], core: int = 0) -> int:
        """Node id of ``core`` on the chip at grid coordinates ``chip_coord``."""
        if isinstance(chip_coord, (str, bytes)) or not isinstance(chip_coord, Iterable):
            raise TopologyError(f"chip_coord must be a sequence of {self.ndim} integers, got {shown(chip_coord)}")
        coord = tuple(integer(f"chip_coord[{i}]", c, error=TopologyError) for i, c in enumerate(chip_coord))
        if len(coord) != self.ndim or any(not 0 <= c < s for c, s in zip(coord, self.shape)):
            raise TopologyError(f"chip coordinate {shown(coord)} is outside the grid {self.shape}")
        core = integer("core", core, error=TopologyError)
        if not 0 <= core < self.cores_per_chip:
            raise TopologyError(f"core {shown(core)} does not exist: chips have {self.cores_per_chip} cores")
        return int(np.ravel_multi_index(coord, self.shape)) * self.cores_per_chip + core

    def node_label(self, node: int) -> str:
        """Short name: letters for rings/lines of <= 26 chips, grid coordinates otherwise."""
        node = self._check_node("node", node)
        chip = int(self.node_chip[node])
        core = int(self.node_core[node])
        if self.ndim == 1 and self.num_chips <= 26:
            base = chr(ord("A") + chip)
        else:
            base = "(" + ",".join(str(int(c)) for c in self.chip_coords[chip]) + ")"
        return base + (f".{core}" if self.cores_per_chip > 1 else "")

    def _check_node(self, name: str, node) -> int:
        node = integer(name, node, error=TopologyError)
        if not 0 <= node < self.num_nodes:
            raise TopologyError(f"{name} {shown(node)} does not exist: nodes are 0..{self.num_nodes - 1}")
        return node

    @property
    def labels(self) -> list[str]:
        return [self.node_label(n) for n in range(self.num_nodes)]

    # -- links ----------------------------------------------------------------------
    def link_ids(self, src_nodes, dst_nodes) -> np.ndarray:
        """Directed link used by each ``src -> dst`` node pair (vectorised).

        Raises
        ------
        TopologyError
            A pair of nodes that no link joins (or a node sending to itself).
        """
        s = _node_ids("src_nodes", src_nodes)
        d = _node_ids("dst_nodes", dst_nodes)
        if s.shape != d.shape:
            raise TopologyError(f"src_nodes has shape {s.shape} but dst_nodes {d.shape}: give one destination "
                                "per source")
        scalar = s.ndim == 0
        s, d = np.atleast_1d(s), np.atleast_1d(d)
        n, m, k = self.num_nodes, self.num_chips, self.cores_per_chip
        bad = (s < 0) | (s >= n) | (d < 0) | (d >= n)
        if bad.any():
            i = int(np.argmax(bad))
            raise TopologyError(f"node {int(s.flat[i])} -> {int(d.flat[i])}: node ids must be in [0, {n})")
        sc, dc = (s, d) if k == 1 else (s // k, d // k)
        keys = sc * m + dc
        if k > 1:
            same = sc == dc
            keys[same] = m * m + s[same] * n + d[same]
        pos = np.searchsorted(self._keys, keys)
        pos_c = np.minimum(pos, len(self._keys) - 1) if len(self._keys) else pos
        found = (pos < len(self._keys)) & (self._keys[pos_c] == keys) if len(self._keys) else np.zeros(keys.shape, bool)
        found &= s != d
        if not found.all():
            i = int(np.argmax(~found.ravel()))
            a, b = int(s.ravel()[i]), int(d.ravel()[i])
            raise TopologyError(
                f"no link joins node {a} ({self.node_label(a)}) to node {b} ({self.node_label(b)}) "
                f"in {self.name}; transfers must go between neighbours (same chip, or chips one "
                "hop apart along a dimension, wraparound only where the dimension wraps)"
            )
        links = self._key_link[pos_c]
        return links[0] if scalar else links

    def has_link(self, src: int, dst: int) -> bool:
        try:
            self.link_ids([src], [dst])
        except TopologyError:
            return False
        return True

    def link_label(self, link: int) -> str:
        link = integer("link", link, error=TopologyError)
        if not 0 <= link < self.num_links:
            raise TopologyError(f"link {shown(link)} does not exist: links are 0..{self.num_links - 1}")
        a, b = int(self.link_src_chip[link]), int(self.link_dst_chip[link])
        if self.link_kind[link] == "on_chip":
            k = self.cores_per_chip
            return (f"{self.node_label(a * k + int(self.link_src_core[link]))}->"
                    f"{self.node_label(b * k + int(self.link_dst_core[link]))}")
        if self.cores_per_chip > 1:
            la, lb = self.node_label(a * self.cores_per_chip)[:-2], self.node_label(b * self.cores_per_chip)[:-2]
        else:
            la, lb = self.node_label(a), self.node_label(b)
        return f"{la}->{lb}"

    # -- structure used by the algorithms --------------------------------------------
    def lines(self, dim: int) -> np.ndarray:
        """Chips along dimension ``dim``: one row per line, ordered by coordinate.

        Returns
        -------
        ndarray of int, shape (num_chips // shape[dim], shape[dim])
        """
        dim = integer("dim", dim, error=TopologyError)
        if not 0 <= dim < self.ndim:
            raise TopologyError(f"dimension {shown(dim)} does not exist in a {self.ndim}-D network")
        ids = np.arange(self.num_chips).reshape(self.shape)
        return np.moveaxis(ids, dim, -1).reshape(-1, self.shape[dim])

    def chip_path(self) -> np.ndarray:
        """A path visiting every chip once, consecutive chips one hop apart (snake order)."""
        return _snake(self.shape)

    def chip_cycle(self) -> np.ndarray | None:
        """A cycle through every chip using ICI links, or None if none was found."""
        return _hamiltonian_cycle(self)

    def ring_order(self) -> np.ndarray:
        """A ring through every node using existing links (the 1-D embedding).

        Chips are visited along a Hamiltonian cycle and the cores of each chip one
        after the other (a shard enters core 0, moves on chip to core 1, then to the
        next chip: the zigzag of [md-allreduce] fig. 9). Without a chip cycle (a mesh
        line, odd x odd mesh) chips with >= 2 cores still form a loop: out along
        core 0 and back through the other cores, turning on chip at the corners.

        Raises
        ------
        TopologyError
            No ring exists: e.g. a line or mesh of single-core chips with an odd
            number of chips, or a one-way network that cannot be traversed back.
        """
        k = self.cores_per_chip
        if self.num_nodes < 2:
            raise TopologyError(f"{self.name} has a single node: a ring needs at least 2 nodes")
        cycle = self.chip_cycle() if self.num_chips > 1 else np.zeros(1, dtype=np.int64)
        if cycle is not None and (self.num_chips > 1 or k > 1):
            nodes = (cycle[:, None] * k + np.arange(k)[None, :]).ravel()
        elif k >= 2:
            path = self.chip_path()
            if not self.bidirectional:
                raise TopologyError(f"{self.name}: a one-way network has no way back along the path")
            out = path * k
            back = []
            for i, c in enumerate(path[::-1]):
                cores = np.arange(1, k) if i % 2 == 0 else np.arange(k - 1, 0, -1)
                back.append(c * k + cores)
            nodes = np.concatenate([out] + back)
        else:
            raise TopologyError(
                f"{self.name} has no ring through all its nodes: "
                + ("a line of chips cannot close into a ring" if self.ndim == 1 or sum(s > 1 for s in self.shape) == 1
                   else "no Hamiltonian cycle of chips exists (an odd number of chips on a mesh)")
                + "; add wraparound, use 2 cores per chip (the mesh loops of [md-allreduce] fig. 10), "
                "or use a line algorithm (single_path)"
            )
        self.link_ids(nodes, np.roll(nodes, -1))  # validates
        return nodes.astype(np.int64)

    def path_order(self) -> np.ndarray:
        """A path through every node (snake over chips, cores of a chip consecutively)."""
        k = self.cores_per_chip
        return (self.chip_path()[:, None] * k + np.arange(k)[None, :]).ravel().astype(np.int64)

    # -- drawing --------------------------------------------------------------------
    def positions(self) -> np.ndarray:
        """Node positions for drawing, shape (num_nodes, 3): x, y, z.

        Rings of >= 3 chips are drawn on a circle (chip A at the top, clockwise);
        grids at their integer coordinates (dimension 0 -> x, 1 -> y, 2 -> z).
        The cores of a chip sit side by side around the chip's centre.
        """
        k = self.cores_per_chip
        chip_xyz = np.zeros((self.num_chips, 3))
        if self.ndim == 1 and self.wraparound[0] and self.num_chips >= 3:
            n = self.num_chips
            radius = max(n / (2 * np.pi), 1.0)
            ang = np.pi / 2 - 2 * np.pi * np.arange(n) / n
            chip_xyz[:, 0] = radius * np.cos(ang)
            chip_xyz[:, 1] = radius * np.sin(ang)
        else:
            chip_xyz[:, : self.ndim] = self.chip_coords
        xyz = np.repeat(chip_xyz, k, axis=0)
        if k > 1:
            offs = (np.arange(k) - (k - 1) / 2) * (0.5 / k)
            xyz[:, 0] += np.tile(offs, self.num_chips)
        return xyz

    def layout(self):
        """Everything a drawing needs, as an :class:`xarray.Dataset`.

        Dimensions ``node`` (x, y, z, chip, core, label) and ``link`` (endpoints
        x0..z1, source/destination chip and node, kind, dim, sign, wrap,
        bandwidth in B/s, latency in s). ICI links are drawn between chip centres.

        Examples
        --------
        >>> from scwork.collectives import Network
        >>> ds = Network.torus((2, 3), cores_per_chip=2).layout()
        >>> dict(ds.sizes)
        {'node': 12, 'link': 30}
        >>> ds.bandwidth.attrs["units"]
        'B/s'
        """
        import xarray as xr

        xyz = self.positions()
        k = self.cores_per_chip
        centre = np.zeros((self.num_chips, 3))
        np.add.at(centre, self.node_chip, xyz)
        centre /= k
        ici = self.link_src_core < 0
        src_node = np.where(ici, -1, self.link_src_chip * k + self.link_src_core)
        dst_node = np.where(ici, -1, self.link_dst_chip * k + self.link_dst_core)
        p0 = np.where(ici[:, None], centre[self.link_src_chip], xyz[np.maximum(src_node, 0)])
        p1 = np.where(ici[:, None], centre[self.link_dst_chip], xyz[np.maximum(dst_node, 0)])
        ds = xr.Dataset(
            {
                "x": ("node", xyz[:, 0], {"units": "1", "long_name": "drawing x position of the node"}),
                "y": ("node", xyz[:, 1], {"units": "1", "long_name": "drawing y position of the node"}),
                "z": ("node", xyz[:, 2], {"units": "1", "long_name": "drawing z position of the node"}),
                "chip": ("node", self.node_chip, {"units": "", "long_name": "chip of the node"}),
                "core": ("node", self.node_core, {"units": "", "long_name": "core of the node in its chip"}),
                "label": ("node", np.array(self.labels, dtype=str), {"units": "", "long_name": "node label"}),
                "x0": ("link", p0[:, 0], {"units": "1", "long_name": "drawing x of the link's source end"}),
                "y0": ("link", p0[:, 1], {"units": "1", "long_name": "drawing y of the link's source end"}),
                "z0": ("link", p0[:, 2], {"units": "1", "long_name": "drawing z of the link's source end"}),
                "x1": ("link", p1[:, 0], {"units": "1", "long_name": "drawing x of the link's destination end"}),
                "y1": ("link", p1[:, 1], {"units": "1", "long_name": "drawing y of the link's destination end"}),
                "z1": ("link", p1[:, 2], {"units": "1", "long_name": "drawing z of the link's destination end"}),
                "source_chip": ("link", self.link_src_chip, {"units": "", "long_name": "chip the link leaves"}),
                "destination_chip": ("link", self.link_dst_chip,
                                     {"units": "", "long_name": "chip the link enters"}),
                "source_node": ("link", src_node, {"units": "", "long_name": "node the link leaves (-1: any core)"}),
                "destination_node": ("link", dst_node,
                                     {"units": "", "long_name": "node the link enters (-1: any core)"}),
                "kind": ("link", self.link_kind, {"units": "", "long_name": "link class (ici or on_chip)"}),
                "dim": ("link", self.link_dim,
                        {"units": "", "long_name": "grid dimension of an ICI link (-1: on chip)"}),
                "sign": ("link", self.link_sign,
                         {"units": "", "long_name": "direction along dim (+1 / -1; 0 on chip)"}),
                "wrap": ("link", self.link_wrap, {"units": "", "long_name": "wraparound link"}),
                "bandwidth": ("link", self.link_bandwidth, {"units": "B/s", "long_name": "bandwidth, one direction"}),
                "latency": ("link", self.link_latency, {"units": "s", "long_name": "latency per message"}),
            },
            coords={"node": np.arange(self.num_nodes), "link": np.arange(self.num_links)},
            attrs={"name": self.name, "shape": list(self.shape),
                   "wraparound": [int(w) for w in self.wraparound],
                   "cores_per_chip": k,
                   "note": "ICI links join chips (drawn centre to centre); -1 source/destination node "
                           "means any core of the chip may use the link"},
        )
        for cls_ in self.link_classes.values():
            ds.attrs[f"{cls_.name}_source"] = cls_.source
        return ds


def _checked_shape(shape) -> tuple[int, ...]:
    """``shape`` as a tuple of 1 to 3 positive ints (a bare int is one dimension)."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TopologyError(f"shape must be a tuple of positive integers, got {shown(shape)}") from None
    if not shape:
        raise TopologyError("shape is empty: give at least one dimension, e.g. (8,) or (4, 4)")
    if len(shape) > 3:
        raise TopologyError(f"shape {shown(shape)} has {len(shape)} dimensions; networks have 1 to 3")
    for i, s in enumerate(shape):
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
            raise TopologyError(f"shape[{i}] must be an integer, got {shown(s)} (shape {shown(shape)})")
        if s < 1:
            raise TopologyError(
                f"shape[{i}] = {shown(s)}: a network needs at least one chip per dimension "
                f"(shape {shown(shape)} holds no nodes); use sizes >= 1"
            )
    shape = tuple(int(s) for s in shape)
    return shape


def _checked_wraparound(wraparound, shape: tuple[int, ...]) -> tuple[bool, ...]:
    """One wraparound flag per dimension of ``shape`` (a single bool applies to every one)."""
    if isinstance(wraparound, (bool, np.bool_)):
        wraparound = (bool(wraparound),) * len(shape)
    flags = tuple(wraparound) if isinstance(wraparound, Iterable) and not isinstance(wraparound, (str, bytes)) \
        else None
    if flags is None or not all(isinstance(w, (bool, np.bool_)) for w in flags):
        # bool("no") is True: only real booleans say which dimensions wrap.
        raise TopologyError(f"wraparound must be True, False or one True/False per dimension, got "
                            f"{shown(wraparound)}")
    wraparound = tuple(bool(w) for w in flags)
    if len(wraparound) != len(shape):
        raise TopologyError(
            f"wraparound has {len(wraparound)} flags but shape {shown(shape)} has {len(shape)} "
            f"dimensions; give one flag per dimension, e.g. wraparound={(True,) * len(shape)}"
        )
    return wraparound


def _checked_network_size(shape: tuple[int, ...], k: int) -> int:
    """The number of chips of ``shape``, after refusing networks over ``MAX_NODES`` nodes or ``MAX_LINKS`` links."""
    m = math.prod(shape)
    if m * k > MAX_NODES:
        # Refuse before the per-node and per-link arrays are allocated (and before
        # the name prints the dimensions: a 5,000-digit one cannot be printed).
        raise TopologyError(
            f"a {'x'.join(shown(d) for d in shape)} network with {k} {'core' if k == 1 else 'cores'} per chip has "
            f"{f'{m * k:,}' if (m * k).bit_length() < 1000 else shown(m * k)} nodes, more than "
            f"scwork.collectives.network.MAX_NODES={MAX_NODES:,} (the largest "
            "TPU pods have about 9,216 chips); use a smaller shape, or raise MAX_NODES for a what-if")
    num_links = 2 * len(shape) * m + m * k * (k - 1)      # an upper bound: ICI + on-chip
    if num_links > MAX_LINKS:
        raise TopologyError(
            f"a {'x'.join(str(d) for d in shape)} network with {k:,} {'core' if k == 1 else 'cores'} per chip "
            f"has up to {num_links:,} "
            f"links ({k:,} x {k - 1:,} on-chip links per chip), more than "
            f"scwork.collectives.network.MAX_LINKS={MAX_LINKS:,}; use fewer cores per chip (TPU chips have "
            "1 or 2), or raise MAX_LINKS for a what-if")
    return m


# -- Hamiltonian paths and cycles on grids ------------------------------------------------
def _node_ids(name: str, values) -> np.ndarray:
    """``values`` as an int64 array of node ids, or a TopologyError (floats, text, ragged lists)."""
    try:
        array = np.asarray(values)
    except (ValueError, TypeError) as error:
        raise TopologyError(f"{name} must be an array of node ids: {error}") from None
    if array.size == 0:
        return array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise TopologyError(f"{name} must hold integer node ids, got dtype {array.dtype} ({shown(values)})")
    if array.dtype.kind == "u" and array.dtype.itemsize == 8 and int(array.max()) > 2**63 - 1:
        raise TopologyError(f"{name} holds {int(array.max())}, beyond any node id")
    return array.astype(np.int64, copy=False)


def _snake(shape: Sequence[int]) -> np.ndarray:
    """Reflected (boustrophedon) order of all chips of a C-ordered grid: last dim fastest."""
    shape = tuple(shape)
    if len(shape) == 1:
        return np.arange(shape[0], dtype=np.int64)
    inner = _snake(shape[1:])
    m_in = len(inner)
    rows = []
    for i in range(shape[0]):
        part = inner if i % 2 == 0 else inner[::-1]
        rows.append(i * m_in + part)
    return np.concatenate(rows).astype(np.int64)


def _adjacent(net: Network, a: int, b: int) -> bool:
    return net.has_link(a * net.cores_per_chip, b * net.cores_per_chip) if a != b else False


def _hamiltonian_cycle(net: Network) -> np.ndarray | None:
    m = net.num_chips
    if m == 1:
        return None
    ids = np.arange(m).reshape(net.shape)

    def closes(order) -> bool:
        # One vectorised lookup for the whole cycle (a Python loop takes seconds on a pod).
        k = net.cores_per_chip
        a, b = order * k, np.roll(order, -1) * k
        try:
            net.link_ids(a, b)
        except TopologyError:
            return False
        return True

    # 1) Snake with the slowest dimension closing the cycle (through wraparound or size 2).
    for perm in itertools.permutations(range(net.ndim)):
        moved = np.transpose(ids, perm)
        order = moved.ravel()[_snake(moved.shape)]
        a, b = int(order[-1]), int(order[0])
        if _adjacent(net, a, b) and closes(order):
            return order.astype(np.int64)
    # 2) Comb: snake over the other dims, return along coordinate 0 of one dimension.
    for d in range(net.ndim):
        if net.shape[d] < 2:
            continue
        moved = np.moveaxis(ids, d, -1)  # (..., s_d)
        rest = moved.reshape(-1, net.shape[d])
        rest_order = _snake(moved.shape[:-1]) if moved.ndim > 1 else np.zeros(1, dtype=np.int64)
        if len(rest_order) % 2:
            continue
        body = []
        for i, r in enumerate(rest_order):
            row = rest[r, 1:]
            body.append(row if i % 2 == 0 else row[::-1])
        back = rest[rest_order[::-1], 0]
        order = np.concatenate(body + [back])
        if closes(order):
            return order.astype(np.int64)
    # 3) Small odd grids with wraparound: depth-first search (Warnsdorff order).
    if m <= 400:
        return _search_cycle(net)
    return None


def _search_cycle(net: Network) -> np.ndarray | None:
    m = net.num_chips
    nbrs = [[] for _ in range(m)]
    ici = net.link_src_core < 0
    for a, b in zip(net.link_src_chip[ici], net.link_dst_chip[ici]):
        nbrs[int(a)].append(int(b))
    budget = [200000]
    path = [0]
    used = np.zeros(m, dtype=bool)
    used[0] = True

    def rec() -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        last = path[-1]
        if len(path) == m:
            return 0 in nbrs[last]
        cand = [c for c in nbrs[last] if not used[c]]
        cand.sort(key=lambda c: sum(1 for x in nbrs[c] if not used[x]))
        for c in cand:
            used[c] = True
            path.append(c)
            if rec():
                return True
            path.pop()
            used[c] = False
        return False

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, m + 100))
    try:
        found = rec()
    finally:
        sys.setrecursionlimit(limit)
    return np.asarray(path, dtype=np.int64) if found else None


def _shape_tuple(shape) -> tuple:
    """A grid shape as a tuple (an int is a 1-D shape); anything else is a TopologyError."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        return (shape,)
    if isinstance(shape, (str, bytes)):
        raise TopologyError(f"shape must be an int or a tuple of positive integers, got {shown(shape)}")
    try:
        return tuple(shape)
    except TypeError:
        raise TopologyError(f"shape must be an int or a tuple of positive integers, got {shown(shape)}") from None
