"""Schedules: a collective written out as steps of explicit transfers.

A :class:`Schedule` is a list of steps; every step is a list of :class:`Transfer`
that happen at the same time. Data positions are counted in *chunks*: every
node's vector is cut into ``num_chunks`` near-equal contiguous byte ranges (for a
vector of ``L`` elements chunk ``c`` holds elements ``c*L//C`` to
``(c+1)*L//C``), and a transfer moves a contiguous run of chunks ``[start, stop)``
(its *shard*). Any vector length works: chunks differ by at most one element.

Storage is compact: the builders of :mod:`scwork.collectives.algorithms` give a
schedule as a *step program* (:mod:`scwork.collectives._program`: per phase and
loop family, a rule that writes out the transfers of any step), so a ring
all-reduce over a 9,216-chip pod is built in milliseconds and costed, checked for
link conflicts and summarised by streaming over its steps in bounded memory. The
explicit columns (``schedule.source`` etc., one numpy entry per transfer, sorted
by step) are written out on first use, up to :data:`MAX_EXPLICIT_TRANSFERS`
transfers; :class:`Transfer` objects are made only when you look at a step.

Semantics of one step (what :func:`~scwork.collectives.execute` simulates):
every transfer reads its source buffer as it was at the start of the step, then
all of them are applied: ``combine`` adds the payload to the destination's
buffer, ``copy`` overwrites it. Transfers of one step with the same source and
destination form one *message*; two messages on one directed link in one step
are a *link conflict* (they serialize in the cost model).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from scwork.collectives import _program
from scwork.collectives.network import Network
from scwork.errors import ConfigError

__all__ = ["COLLECTIVES", "MAX_CHUNK_BOUNDS", "MAX_EXPLICIT_TRANSFERS", "MAX_NBYTES", "MAX_STREAM_RECORDS", "OPS",
           "PHASES",
           "Schedule", "Transfer", "chunk_bounds"]

#: Most transfers a schedule writes out as explicit columns (``schedule.source`` ...,
#: :meth:`Schedule.messages`, :meth:`Schedule.to_dataset`, execution): about 1 GiB of
#: arrays. Costs, conflicts and statistics stream over the steps and need none.
MAX_EXPLICIT_TRANSFERS = 2**24
#: Most link conflicts :meth:`Schedule.conflicts` lists (:meth:`Schedule.num_conflicts` counts any number).
MAX_LISTED_CONFLICTS = 2**20
#: Most transfer records one streaming pass (cost, conflicts, statistics) goes through:
#: about a minute of work. A one-way ring all-reduce over 9,216 chips needs 1.7e8.
MAX_STREAM_RECORDS = 2**30
#: Largest vector per node (bytes) a schedule is costed for: 1 PiB.
MAX_NBYTES = 2**50

#: Phase names, indexed by the ``phase`` code stored in a schedule.
PHASES = ("reduce_scatter", "all_gather", "all_to_all")
#: Operation names, indexed by the ``op`` code: combine (sum into) or copy (overwrite).
OPS = ("combine", "copy")
#: Collectives a schedule can implement, with the nccl-tests bus-bandwidth factor.
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


#: Most chunks :func:`chunk_bounds` splits into (its bounds array takes 8 bytes per chunk: 512 MiB).
MAX_CHUNK_BOUNDS = 2**26


def chunk_bounds(num_elements: int, num_chunks: int) -> np.ndarray:
    """Element offsets of the ``num_chunks + 1`` chunk boundaries (near-equal split).

    Examples
    --------
    >>> from scwork.collectives import chunk_bounds
    >>> chunk_bounds(10, 4).tolist()
    [0, 2, 5, 7, 10]
    """
    from scwork._validate import integer

    num_elements = integer("num_elements", num_elements, minimum=0)
    num_chunks = integer("num_chunks", num_chunks, minimum=1)
    # The bounds array has num_chunks + 1 int64 entries; offsets must fit int64.
    if num_chunks > MAX_CHUNK_BOUNDS or num_elements > 2**63 - 1:
        raise ConfigError(f"chunk_bounds({num_elements:,}, {num_chunks:,}): at most {MAX_CHUNK_BOUNDS:,} chunks "
                          "(the bounds array is allocated) and 2**63 - 1 elements")
    c = np.arange(num_chunks + 1, dtype=np.int64)
    # c * n // C without overflowing int64 for large n: n = q C + r.
    q, r = divmod(num_elements, num_chunks)
    return c * q + (c * r) // int(num_chunks)


class Transfer(NamedTuple):
    """One transfer of a schedule.

    Attributes
    ----------
    step : int
        Step at which it happens (0-based).
    source, destination : int
        Node ids.
    link : int
        Directed link it uses (index into the network's link arrays).
    shard : tuple of int
        ``(start, stop)`` chunk range it carries.
    byte_range : tuple of int
        ``(start, stop)`` byte offsets of that range in the vector, for the
        schedule's ``nbytes``/``itemsize``.
    bytes : int
        ``byte_range[1] - byte_range[0]``.
    op : str
        ``"combine"`` (destination adds it) or ``"copy"`` (destination stores it).
    color : int
        Color (independent sub-collective on its own part of the data).
    phase : str
        ``"reduce_scatter"``, ``"all_gather"`` or ``"all_to_all"``.
    origin : int
        For all-to-all: the node whose block this is; -1 otherwise.
    """

    step: int
    source: int
    destination: int
    link: int
    shard: tuple
    byte_range: tuple
    bytes: int
    op: str
    color: int
    phase: str
    origin: int


_COLUMNS = ("step", "source", "destination", "start", "stop", "op", "color", "phase", "origin", "link")


class Schedule:
    """A collective as steps of transfers on a :class:`Network`.

    Built by the algorithm functions of :mod:`scwork.collectives` (e.g.
    :func:`~scwork.collectives.rotated_pincer`) as a compact step program, or
    from explicit arrays (this constructor) for experiments. Both kinds behave
    the same; the compact one writes its columns out only when asked (and
    refuses above :data:`MAX_EXPLICIT_TRANSFERS`).

    Parameters
    ----------
    network : Network
    name : str
        Algorithm name.
    collective : str
        One of :data:`COLLECTIVES`.
    num_chunks : int
        Chunks the vector is cut into.
    step, source, destination, start, stop, op, color, phase : array_like of int
        One entry per transfer (``op``/``phase`` as codes into :data:`OPS`/:data:`PHASES`).
    origin : array_like of int, optional
        All-to-all block origin per transfer (-1 elsewhere).
    owners : tuple of arrays (node, start, stop), optional
        Reduce-scatter: the chunk ranges each node ends owning. All-gather: the
        chunk ranges each node starts with.
    nbytes, itemsize : int
        Vector size (bytes per node) and element size the byte counts refer to.
    description : str
        What the algorithm does, which links it uses and what it promises.
    promises : dict
        E.g. ``{"conflict_free": True}``; tests hold the algorithms to these.
    num_colors : int, optional
        Colors (independent sub-collectives); default from ``color``.
    group_size : int, optional
        Nodes per independent collective (default all nodes).

    Raises
    ------
    TopologyError
        A transfer between nodes that no link joins.
    ConfigError
        Bad chunk ranges, unknown codes, inconsistent lengths.
    """

    def __init__(self, network: Network, *, name: str, collective: str, num_chunks: int,
                 step, source, destination, start, stop, op, color, phase, origin=None,
                 owners=None, nbytes: int = 2**20, itemsize: int = 4, description: str = "",
                 promises: dict | None = None, num_colors: int | None = None, group_size: int | None = None,
                 _sorted: bool = False, _links=None):
        self._meta(network, name, collective, num_chunks, owners, nbytes, itemsize, description, promises,
                   group_size)
        cols = [np.asarray(a, dtype=np.int64).ravel() for a in (step, source, destination, start, stop)]
        n = len(cols[0])
        if origin is None:
            origin = np.full(n, -1, dtype=np.int64)
        extra = [np.asarray(op, dtype=np.int8).ravel(), np.asarray(color, dtype=np.int16).ravel(),
                 np.asarray(phase, dtype=np.int8).ravel(), np.asarray(origin, dtype=np.int64).ravel()]
        for a in cols + extra:
            if len(a) != n:
                raise ConfigError("transfer arrays must all have the same length")
        stp, src, dst, c0, c1 = cols
        op, col, ph, org = extra
        if n:
            if (stp < 0).any():
                raise ConfigError("steps must be >= 0")
            if ((c0 < 0) | (c1 > self.num_chunks) | (c1 <= c0)).any():
                i = int(np.argmax((c0 < 0) | (c1 > self.num_chunks) | (c1 <= c0)))
                raise ConfigError(
                    f"transfer {i} has chunk range [{c0[i]}, {c1[i]}) outside [0, {self.num_chunks}) or empty"
                )
            if ((op < 0) | (op >= len(OPS))).any() or ((ph < 0) | (ph >= len(PHASES))).any():
                raise ConfigError(f"op codes must index {OPS} and phase codes {PHASES}")
        links = network.link_ids(src, dst) if _links is None else np.asarray(_links, dtype=np.int64)
        if not _sorted:
            order = np.argsort(stp, kind="stable")
            stp, src, dst, c0, c1, op, col, ph, org, links = (
                a[order] for a in (stp, src, dst, c0, c1, op, col, ph, org, links))
            # Compact: drop empty steps so steps are 0..S-1.
            if n:
                _, stp = np.unique(stp, return_inverse=True)
                stp = stp.astype(np.int64)
        self._program = None
        self._set_explicit(dict(zip(_COLUMNS, (stp, src, dst, c0, c1, op, col, ph, org, links))))
        self.num_steps = int(stp[-1]) + 1 if n else 0
        self.num_colors = int(num_colors if num_colors is not None else (int(col.max()) + 1 if n else 1))

    def _meta(self, network, name, collective, num_chunks, owners, nbytes, itemsize, description, promises,
              group_size):
        if collective not in COLLECTIVES:
            raise ConfigError(f"collective must be one of {COLLECTIVES}, got {collective!r}")
        self.network = network
        self.name = name
        self.collective = collective
        self.num_chunks = int(num_chunks)
        if self.num_chunks < 1:
            raise ConfigError(f"num_chunks must be >= 1, got {num_chunks}")
        if owners is not None:
            owners = tuple(np.asarray(a, dtype=np.int64).ravel() for a in owners)
        self.owners = owners
        self.nbytes, self.itemsize = _check_size(nbytes, itemsize)
        self.description = description
        self.promises = dict(promises or {})
        #: Nodes taking part in each independent collective (all nodes, or one line
        #: of the grid when reducing along a subset of the dimensions).
        self.group_size = int(group_size if group_size is not None else network.num_nodes)

    @classmethod
    def _from_program(cls, network: Network, program, *, name: str, collective: str, owners=None,
                      nbytes: int = 2**20, itemsize: int = 4, description: str = "",
                      promises: dict | None = None, num_colors: int = 1, group_size: int | None = None,
                      num_transfers: int | None = None) -> Schedule:
        """A compact schedule: ``program`` (a :class:`~scwork.collectives._program.StepProgram`)
        writes out the transfers of any step range on demand."""
        new = object.__new__(cls)
        new._meta(network, name, collective, program.num_chunks, owners, nbytes, itemsize, description,
                  promises, group_size)
        new._program = program
        new._explicit = None
        new._num_transfers = num_transfers
        new.num_steps = program.num_steps
        new.num_colors = int(num_colors)
        return new

    def _set_explicit(self, cols: dict) -> None:
        self._explicit = cols
        self._num_transfers = len(cols["step"])
        self._offsets = np.searchsorted(cols["step"], np.arange(int(cols["step"][-1]) + 2 if len(cols["step"])
                                                                else 1))

    # -- explicit columns (written out on first use) -----------------------------------
    @property
    def compact(self) -> bool:
        """True while the transfers exist only as a step program (no explicit columns yet)."""
        return self._explicit is None

    def _columns(self) -> dict:
        if self._explicit is None:
            n = self.num_transfers
            if n > MAX_EXPLICIT_TRANSFERS:
                raise ConfigError(
                    f"{self.name} on {self.network.name} has {n:,} transfers; writing them out as explicit "
                    f"arrays is limited to scwork.collectives.schedule.MAX_EXPLICIT_TRANSFERS="
                    f"{MAX_EXPLICIT_TRANSFERS:,}; use cost(schedule, link_summary=True), conflicts() or "
                    "phase_summary(), which stream over the steps, or a smaller network")
            prog = self._program
            parts = [prog.records(s0, s1, transfers=True)
                     for s0, s1 in prog.batches(prog.step_records, dense_width=0)]
            cols = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, np.int64)
                    for k in ("step", "source", "destination", "start", "stop", "op", "color", "phase",
                              "origin", "u")}
            cols["link"] = prog.used_links[cols.pop("u")] if len(cols["u"]) else np.zeros(0, np.int64)
            cols["op"] = cols["op"].astype(np.int8)
            cols["color"] = cols["color"].astype(np.int16)
            cols["phase"] = cols["phase"].astype(np.int8)
            self._set_explicit(cols)
        return self._explicit

    def explicit(self) -> Schedule:
        """This schedule with its explicit columns written out (once); call it before
        allocating anything per transfer (execution, drawings).

        Raises
        ------
        ConfigError
            More than :data:`MAX_EXPLICIT_TRANSFERS` transfers (the message names both).
        """
        self._columns()
        return self

    step = property(lambda self: self._columns()["step"], doc="Step of every transfer, sorted (explicit).")
    source = property(lambda self: self._columns()["source"], doc="Sending node of every transfer.")
    destination = property(lambda self: self._columns()["destination"], doc="Receiving node of every transfer.")
    start = property(lambda self: self._columns()["start"], doc="First chunk of every transfer.")
    stop = property(lambda self: self._columns()["stop"], doc="End chunk of every transfer.")
    op = property(lambda self: self._columns()["op"], doc="Op code (index into OPS) of every transfer.")
    color = property(lambda self: self._columns()["color"], doc="Color of every transfer.")
    phase = property(lambda self: self._columns()["phase"], doc="Phase code (index into PHASES).")
    origin = property(lambda self: self._columns()["origin"], doc="All-to-all block origin (-1 elsewhere).")
    link = property(lambda self: self._columns()["link"], doc="Directed link of every transfer.")

    # -- sizes ----------------------------------------------------------------------
    @property
    def num_transfers(self) -> int:
        if self._num_transfers is None:
            self._num_transfers = self._program.count_transfers()
        return int(self._num_transfers)

    @property
    def transfers_per_step(self) -> np.ndarray:
        """Transfers in every step, shape (num_steps,) (without writing them out when compact)."""
        if self._explicit is not None:
            return np.diff(self._offsets)[: self.num_steps]
        return self._program.transfers_per_step()

    @property
    def num_elements(self) -> int:
        return self.nbytes // self.itemsize

    def with_size(self, nbytes: int, itemsize: int | None = None) -> Schedule:
        """The same schedule for another vector size (bytes per node)."""
        new = object.__new__(Schedule)
        new.__dict__.update(self.__dict__)
        new.nbytes, new.itemsize = _check_size(nbytes, self.itemsize if itemsize is None else itemsize)
        return new

    def element_bounds(self, num_elements: int | None = None) -> np.ndarray:
        """Element offsets of the chunk boundaries for a vector of ``num_elements``."""
        return chunk_bounds(self.num_elements if num_elements is None else num_elements, self.num_chunks)

    @property
    def bytes(self) -> np.ndarray:
        """Bytes carried by every transfer, for this schedule's ``nbytes``/``itemsize``."""
        b = self.element_bounds()
        return (b[self.stop] - b[self.start]) * self.itemsize

    # -- access ---------------------------------------------------------------------
    def __len__(self) -> int:
        return self.num_steps

    def step_slice(self, s: int) -> slice:
        if not -self.num_steps <= s < self.num_steps:
            raise IndexError(f"step {s} out of range: the schedule has {self.num_steps} steps")
        self._columns()
        s %= max(self.num_steps, 1)
        return slice(int(self._offsets[s]), int(self._offsets[s + 1]))

    def __getitem__(self, s: int) -> list[Transfer]:
        """The transfers of step ``s``."""
        if self._explicit is not None:
            return self._transfers(self._explicit, self.step_slice(s))
        if not -self.num_steps <= s < self.num_steps:
            raise IndexError(f"step {s} out of range: the schedule has {self.num_steps} steps")
        s %= self.num_steps
        cols = self._program.records(s, s + 1, transfers=True)
        cols["link"] = self._program.used_links[cols["u"]]
        return self._transfers(cols, slice(0, len(cols["step"])))

    def _transfers(self, cols: dict, sl: slice) -> list[Transfer]:
        b = self.element_bounds() * self.itemsize
        out = []
        for i in range(sl.start, sl.stop):
            c0, c1 = int(cols["start"][i]), int(cols["stop"][i])
            out.append(Transfer(
                int(cols["step"][i]), int(cols["source"][i]), int(cols["destination"][i]), int(cols["link"][i]),
                (c0, c1), (int(b[c0]), int(b[c1])), int(b[c1] - b[c0]), OPS[cols["op"][i]],
                int(cols["color"][i]), PHASES[cols["phase"][i]], int(cols["origin"][i])))
        return out

    @property
    def steps(self) -> list[list[Transfer]]:
        """All steps as lists of :class:`Transfer` (builds Python objects: small schedules)."""
        return [self[s] for s in range(self.num_steps)]

    def __iter__(self):
        for s in range(self.num_steps):
            yield self[s]

    def __repr__(self) -> str:
        return (f"Schedule({self.name!r}, {self.collective}, {self.network.name}: "
                f"{self.num_steps} steps, {self.num_transfers} transfers, {self.num_chunks} chunks)")

    def _repr_html_(self) -> str:
        from scwork._html import html_fields

        fields = [("algorithm", self.name), ("collective", self.collective), ("network", self.network.name),
                  ("nodes", self.network.num_nodes), ("steps", self.num_steps), ("transfers", self.num_transfers),
                  ("chunks", self.num_chunks), ("colors", self.num_colors), ("bytes per node", self.nbytes),
                  ("link conflicts", self.num_conflicts()), ("links used", ", ".join(
                      f"{k}: {v}" for k, v in self.links_used().items()))]
        return html_fields(fields, caption=f"Schedule {self.name}")

    def to_dataset(self):
        """All transfers as an :class:`xarray.Dataset` with dimension ``transfer``."""
        import xarray as xr

        b = self.element_bounds() * self.itemsize
        return xr.Dataset(
            {
                "step": ("transfer", self.step, {"units": "", "long_name": "step of the transfer"}),
                "source": ("transfer", self.source, {"units": "", "long_name": "sending node"}),
                "destination": ("transfer", self.destination, {"units": "", "long_name": "receiving node"}),
                "link": ("transfer", self.link, {"units": "", "long_name": "directed link used"}),
                "shard_start": ("transfer", self.start, {"units": "chunks", "long_name": "first chunk carried"}),
                "shard_stop": ("transfer", self.stop, {"units": "chunks", "long_name": "end of the chunks carried"}),
                "byte_start": ("transfer", b[self.start], {"units": "B", "long_name": "first byte carried"}),
                "byte_stop": ("transfer", b[self.stop], {"units": "B", "long_name": "end of the bytes carried"}),
                "bytes": ("transfer", self.bytes, {"units": "B", "long_name": "bytes carried"}),
                "op": ("transfer", np.asarray(OPS)[self.op],
                       {"units": "", "long_name": "what the receiver does (combine or copy)"}),
                "color": ("transfer", self.color.astype(np.int64),
                          {"units": "", "long_name": "color (independent sub-collective)"}),
                "phase": ("transfer", np.asarray(PHASES)[self.phase], {"units": "", "long_name": "phase"}),
                "origin": ("transfer", self.origin,
                           {"units": "", "long_name": "all-to-all block origin (-1 elsewhere)"}),
            },
            coords={"transfer": np.arange(self.num_transfers)},
            attrs={"name": self.name, "collective": self.collective, "network": self.network.name,
                   "num_steps": self.num_steps, "num_chunks": self.num_chunks,
                   "nbytes": self.nbytes, "itemsize": self.itemsize},
        )

    # -- streaming --------------------------------------------------------------------
    @property
    def used_links(self) -> np.ndarray:
        """Ids of the links the schedule may use (every link it does use is here), in the
        order of the columns of :meth:`link_loads`."""
        if self._program is not None:
            return self._program.used_links
        return np.unique(self._explicit["link"])

    def stream_records(self, *, budget: int = _program.BATCH_RECORDS, dense_width: int = 0,
                       with_phase: bool = False):
        """Batches ``(s0, s1, records)`` over all steps, in step order.

        ``records`` holds ``step``, ``source``, ``destination``, ``u`` (index into
        :attr:`used_links`) and the bytes ``nbytes`` of every record, for this
        schedule's size; records of one step with the same source and destination
        form one message (on a compact schedule they need not be its transfers:
        an all-to-all streams one record per message). At most ``budget`` records,
        and ``budget`` cells of a (steps, ``dense_width``) array, per batch.

        Raises
        ------
        ConfigError
            More than :data:`MAX_STREAM_RECORDS` records in all.
        """
        prefix = _program.chunk_byte_prefix(self.num_elements, self.num_chunks, self.itemsize)
        if self._program is not None:
            prog = self._program
            total = int(prog.step_message_records.sum())
            _program.check_records_limit(
                f"{self.name} on {self.network.name}", total, MAX_STREAM_RECORDS,
                "use a smaller network or an algorithm with fewer steps (multi_color, dimension_by_dimension)")
            for s0, s1 in prog.batches(prog.step_message_records, budget, dense_width):
                cols = prog.records(s0, s1, messages=True, with_phase=with_phase)
                cols["nbytes"] = prefix[cols["stop"]] - prefix[cols["start"]]
                yield s0, s1, cols
            return
        ex = self._explicit
        used = self.used_links
        per_step = np.diff(self._offsets)[: self.num_steps]
        for s0, s1 in _program.step_batches(per_step, budget, dense_width):
            a, b = int(self._offsets[s0]), int(self._offsets[s1])
            cols = {k: ex[k][a:b] for k in ("step", "source", "destination", "start", "stop")}
            cols["u"] = np.searchsorted(used, ex["link"][a:b])
            if with_phase:
                cols["phase"] = ex["phase"][a:b].astype(np.int64)
            cols["nbytes"] = prefix[cols["stop"]] - prefix[cols["start"]]
            yield s0, s1, cols

    def _key_batches(self, *, dense_width: int, nodes: bool = False, with_phase: bool = False,
                     budget: int = _program.BATCH_RECORDS):
        """Batches ``(s0, s1, records)``: ``key`` = (step - s0) * U + u (U = len(used_links)),
        ``nbytes``, optionally ``source``/``destination`` and ``phase`` (the fast path of
        the compact program; explicit schedules go through :meth:`stream_records`)."""
        U = max(len(self.used_links), 1)
        if self._program is None:
            for s0, s1, r in self.stream_records(budget=budget, dense_width=dense_width, with_phase=with_phase):
                r["key"] = (r["step"] - s0) * U + r["u"]
                yield s0, s1, r
            return
        prog = self._program
        _program.check_records_limit(
            f"{self.name} on {self.network.name}", int(prog.step_message_records.sum()), MAX_STREAM_RECORDS,
            "use a smaller network or an algorithm with fewer steps (multi_color, dimension_by_dimension)")
        prefix = _program.chunk_byte_prefix(self.num_elements, self.num_chunks, self.itemsize)
        for s0, s1 in prog.batches(prog.step_message_records, budget, dense_width):
            yield s0, s1, prog.loads(s0, s1, U, prefix, nodes=nodes, with_phase=with_phase)

    def link_loads(self, *, budget: int = _program.BATCH_RECORDS):
        """Per batch of steps: ``(s0, s1, bytes, messages, largest, columns)``.

        ``bytes`` carried by every used link in every step (shape (steps, links)),
        the number of ``messages`` on it (distinct source/destination pairs; a bool
        array with one core per chip) and the ``largest`` message's bytes. The
        columns are the links ``used_links[columns]`` (``columns`` None: all of
        :attr:`used_links`; sparse batches keep only the links they use). Bounded
        memory: see :meth:`stream_records`.
        """
        k = self.network.cores_per_chip
        U = max(len(self.used_links), 1)
        kk = k * k
        if k == 1 and self._program is not None:
            prog = self._program
            per_step = prog.step_message_records
            _program.check_records_limit(
                f"{self.name} on {self.network.name}", int(per_step.sum()), MAX_STREAM_RECORDS,
                "use a smaller network or an algorithm with fewer steps (multi_color, dimension_by_dimension)")
            prefix = _program.chunk_byte_prefix(self.num_elements, self.num_chunks, self.itemsize)
            for b0, b1 in prog.batches(per_step, budget):
                if int(per_step[b0:b1].sum()) * 4 < (b1 - b0) * U:
                    # Few records per step (a chain such as the single path): only the
                    # links they use become columns.
                    yield from _sparse_loads(prog.loads(b0, b1, U, prefix), b0, b1, U, budget)
                    continue
                for s0, s1 in _even_steps(b0, b1, max(1, budget // U)):
                    nbytes, count = np.zeros((s1 - s0, U)), np.zeros((s1 - s0, U), dtype=np.int32)
                    prog.accumulate(s0, s1, prefix, nbytes, count)
                    yield s0, s1, nbytes, count > 0, nbytes, None
            return
        # The batches below are dense (steps x links x cores^2 cells), whatever the
        # number of transfers: bound that work as the records are bounded above.
        _program.check_records_limit(
            f"{self.name} on {self.network.name} ({self.num_steps:,} steps x {U:,} links x {kk} core pairs)",
            self.num_steps * U * kk, MAX_STREAM_RECORDS, "use a smaller network")
        for s0, s1, r in self._key_batches(dense_width=U * kk, nodes=k > 1, budget=budget):
            B = s1 - s0
            key = r["key"]
            w = r["nbytes"].astype(np.float64)
            if k == 1:
                # One core per chip: a link joins one (source, destination) pair, so
                # records on it in one step are one message.
                nbytes = np.bincount(key, weights=w, minlength=B * U).reshape(B, U)
                msgs = (np.bincount(key, minlength=B * U) > 0).reshape(B, U)
                yield s0, s1, nbytes, msgs, nbytes, None
                continue
            key2 = key * kk + (r["source"] % k) * k + r["destination"] % k
            per_pair = np.bincount(key2, weights=w, minlength=B * U * kk).reshape(B, U, kk)
            present = (np.bincount(key2, minlength=B * U * kk) > 0).reshape(B, U, kk)
            yield s0, s1, per_pair.sum(axis=2), present.sum(axis=2), per_pair.max(axis=2), None

    # -- analysis -------------------------------------------------------------------
    def messages(self):
        """Group transfers into messages: same step, source and destination.

        Returns
        -------
        dict of ndarray
            ``step``, ``link``, ``source``, ``destination``, ``bytes`` per message and
            ``index``: for every transfer, the message it belongs to.
        """
        n = self.network.num_nodes
        key = (self.step * n + self.source) * n + self.destination
        uniq, inv = np.unique(key, return_inverse=True)
        first = np.zeros(len(uniq), dtype=np.int64)
        first[inv[::-1]] = np.arange(len(key))[::-1]
        return {
            "step": self.step[first], "link": self.link[first], "source": self.source[first],
            "destination": self.destination[first],
            "bytes": np.bincount(inv, weights=self.bytes, minlength=len(uniq)),
            "index": inv,
        }

    def conflicts(self) -> list[tuple[int, int, int]]:
        """Link conflicts: ``(step, link, messages)`` for every directed link that
        carries two or more messages in one step (streams over the steps).

        Examples
        --------
        >>> from scwork.collectives import Network, rotated_pincer
        >>> rotated_pincer(Network.ring(8)).conflicts()
        []
        """
        used = self.used_links
        out = []
        for s0, _, _, msgs, _, cols in self.link_loads():
            if msgs.dtype == bool:
                continue  # one core per chip: one message per link and step
            t, u = np.nonzero(msgs > 1)
            if len(out) + len(t) > MAX_LISTED_CONFLICTS:
                # A list of Python tuples takes ~100 bytes per conflict: refuse before it grows.
                raise ConfigError(
                    f"{self.name} on {self.network.name} has more than MAX_LISTED_CONFLICTS="
                    f"{MAX_LISTED_CONFLICTS:,} link conflicts to list; count them with num_conflicts(), or "
                    "check conflict_free (execute(..., conflicts='ignore') skips listing them)")
            ids = used if cols is None else used[cols]
            out.extend(zip((t + s0).tolist(), ids[u].tolist(), msgs[t, u].tolist()))
        return sorted(out)

    def num_conflicts(self) -> int:
        """How many (step, link) pairs carry two or more messages (no list is built)."""
        return int(sum(int((msgs > 1).sum()) for _, _, _, msgs, _, _ in self.link_loads() if msgs.dtype != bool))

    @property
    def conflict_free(self) -> bool:
        """True if no directed link carries two messages in one step."""
        return self.num_conflicts() == 0

    def bytes_sent(self, kind: str | None = None) -> np.ndarray:
        """Total bytes each node sends over the whole schedule (``kind``: link class filter)."""
        out = np.zeros(self.network.num_nodes)
        kinds = self.network.link_kind[self.used_links] if kind is not None else None
        for _, _, r in self.stream_records():
            w = r["nbytes"].astype(float)
            if kind is not None:
                w = w * (kinds[r["u"]] == kind)
            out += np.bincount(r["source"], weights=w, minlength=self.network.num_nodes)
        return out

    def link_bytes(self) -> np.ndarray:
        """Bytes per (step, link), shape (num_steps, num_links).

        Raises
        ------
        ConfigError
            The matrix would have more than :data:`MAX_EXPLICIT_TRANSFERS` cells
            (use :func:`~scwork.collectives.cost` with ``link_summary=True``).
        """
        L = self.network.num_links
        _check_matrix(self, L)
        out = np.zeros((self.num_steps, L))
        used = self.used_links
        for s0, s1, nbytes, _, _, cols in self.link_loads():
            out[s0:s1, used if cols is None else used[cols]] = nbytes
        return out

    def links_used(self) -> dict[str, int]:
        """How many distinct directed links of each class the schedule uses."""
        count = np.zeros(len(self.used_links), dtype=np.int64)
        for _, _, r in self.stream_records():
            count += np.bincount(r["u"], minlength=len(count))
        used = self.used_links[count > 0]
        kinds, counts = np.unique(self.network.link_kind[used], return_counts=True)
        return {str(k): int(c) for k, c in zip(kinds, counts)}


def _even_steps(s0: int, s1: int, size: int):
    for a in range(s0, s1, size):
        yield a, min(a + size, s1)


def _sparse_loads(r: dict, b0: int, b1: int, U: int, budget: int):
    """Link loads of steps [b0, b1) over only the links the records use (see link_loads).

    Sub-batches of steps [a, e) keep (e - a) x (records in them) <= ``budget``: their
    (steps, links used) arrays stay small even for a chain that uses a new link in
    every step (the single path)."""
    t = r["key"] // U
    order = np.argsort(t, kind="stable")
    t, u, w = t[order], (r["key"] % U)[order], r["nbytes"][order].astype(np.float64)
    B = b1 - b0
    cum = np.concatenate([[0], np.cumsum(np.bincount(t, minlength=B))])
    a = 0
    while a < B:
        e_all = np.arange(a + 1, B + 1)
        fits = (e_all - a) * (cum[a + 1:] - cum[a]) <= budget
        e = int(e_all[np.flatnonzero(fits)[-1]]) if fits[0] else a + 1
        lo, hi = int(cum[a]), int(cum[e])
        cols, inv = np.unique(u[lo:hi], return_inverse=True)
        n = max(len(cols), 1)
        key = (t[lo:hi] - a) * n + inv
        nbytes = np.bincount(key, weights=w[lo:hi], minlength=(e - a) * n).reshape(e - a, n)
        msgs = (np.bincount(key, minlength=(e - a) * n) > 0).reshape(e - a, n)
        yield b0 + a, b0 + e, nbytes, msgs, nbytes, cols
        a = e


def _check_size(nbytes, itemsize) -> tuple[int, int]:
    from scwork._validate import integer, shown

    nbytes = integer("nbytes (bytes per node)", nbytes, minimum=0)
    itemsize = integer("itemsize (bytes per element)", itemsize, minimum=1)
    if itemsize > MAX_NBYTES:       # (byte offsets are itemsize x element counts, in int64)
        raise ConfigError(f"itemsize {shown(itemsize)} (bytes per element) is more than "
                          f"scwork.collectives.schedule.MAX_NBYTES={MAX_NBYTES:,}; element types have 1 to 16 bytes")
    if nbytes > MAX_NBYTES:
        raise ConfigError(f"a vector of {shown(nbytes)} bytes per node is more than the limit of "
                          f"scwork.collectives.schedule.MAX_NBYTES={MAX_NBYTES:,} (1 PiB); use a smaller size")
    return nbytes, itemsize


def _check_matrix(schedule: Schedule, width: int) -> None:
    cells = schedule.num_steps * width
    if cells > MAX_EXPLICIT_TRANSFERS:
        raise ConfigError(
            f"a (step, link) matrix of {schedule.name} on {schedule.network.name} has {schedule.num_steps:,} x "
            f"{width:,} = {cells:,} cells, more than the limit of {MAX_EXPLICIT_TRANSFERS:,}; use "
            "cost(schedule, link_summary=True) for per-link totals and per-step statistics instead")


class _Builder:
    """Accumulate transfers as arrays (broadcasting), then make a Schedule."""

    def __init__(self, net: Network, num_chunks: int):
        self.net = net
        self.num_chunks = int(num_chunks)
        self.parts: list[tuple] = []

    def add(self, step, src, dst, c0, c1, op: int, color=0, phase: int = 0, origin=-1) -> None:
        arrs = np.broadcast_arrays(*(np.asarray(a, dtype=np.int64) for a in (step, src, dst, c0, c1, color, origin)))
        step, src, dst, c0, c1, color, origin = (a.ravel() for a in arrs)
        keep = c1 > c0
        if not keep.all():
            step, src, dst, c0, c1, color, origin = (a[keep] for a in (step, src, dst, c0, c1, color, origin))
        if len(step):
            self.parts.append((step, src, dst, c0, c1, np.full(len(step), op, np.int8), color,
                               np.full(len(step), phase, np.int8), origin))

    def columns(self):
        if not self.parts:
            e = np.zeros(0, dtype=np.int64)
            return [e] * 9
        return [np.concatenate([p[i] for p in self.parts]) for i in range(9)]

    def build(self, *, coalesce: bool = False, **kwargs) -> Schedule:
        step, src, dst, c0, c1, op, color, phase, origin = self.columns()
        if coalesce and len(step):
            step, src, dst, c0, c1, op, color, phase, origin = _coalesce(
                step, src, dst, c0, c1, op, color, phase, origin)
        return Schedule(self.net, num_chunks=self.num_chunks, step=step, source=src, destination=dst,
                        start=c0, stop=c1, op=op, color=color, phase=phase, origin=origin, **kwargs)


def _coalesce(step, src, dst, c0, c1, op, color, phase, origin):
    """Merge transfers that differ only in adjacent chunk ranges."""
    order = np.lexsort((c0, origin, phase, color, op, dst, src, step))
    cols = [a[order] for a in (step, src, dst, c0, c1, op, color, phase, origin)]
    step, src, dst, c0, c1, op, color, phase, origin = cols
    same = np.ones(len(step), dtype=bool)
    same[0] = False
    for a in (step, src, dst, op, color, phase, origin):
        same[1:] &= a[1:] == a[:-1]
    same[1:] &= c0[1:] == c1[:-1]
    starts = np.flatnonzero(~same)
    ends = np.r_[starts[1:], len(step)] - 1
    new_c1 = c1[ends]
    out = [a[starts] for a in (step, src, dst, c0)] + [new_c1] + [a[starts] for a in (op, color, phase, origin)]
    return out
