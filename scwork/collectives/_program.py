"""Compact schedules: transfers generated step by step from loop patterns.

A collective on a large pod has hundreds of millions of transfers (a one-way ring
all-reduce over the 9,216 chips of a TPU7x pod: 2 x 9,215 steps of 9,216
transfers), far too many to hold as explicit arrays. Every algorithm of
:mod:`scwork.collectives.algorithms` is regular, though: every transfer goes
between neighbours of a *loop* (a ring, line or zigzag of nodes), and its loop
position and chunk range move by a fixed amount per step. A :class:`Block` stores
that rule once; :class:`StepProgram` holds the blocks of a schedule and writes out
the transfers of any range of steps on demand, in batches of bounded size.

Block semantics. For a local step ``t`` in ``[0, T)`` (global step ``t0 + t``),
every *entry* ``j`` with ``ta[j] <= t < tb[j]`` and every *row* ``r`` give one
transfer on loop ``loops[row_loop[r]]`` (length ``L``)::

    position  p   = src0[j] + move[j] * t + row_shift[r]          (mod L on a cyclic loop)
    source        = loop[p],  destination = loop[p + direction[j]]
    pieces    q0  = p0[j] + p0move[j] * t,  q1 = p1[j] + p1move[j] * t
    chunks        = [row_c0[r] + q0 * row_w[r], row_c0[r] + q1 * row_w[r])

``chunk_mode`` refines the chunk rule: ``PIECES_MOD_L`` takes ``q0`` modulo ``L``
first (keeping ``q1 - q0``), as a ring's pieces go round; ``CHUNKS_MOD_C`` takes the
chunk start modulo the schedule's chunk count, and a range that runs past the last
chunk is two transfers (its end wraps to chunk 0), as an all-to-all's blocks do.

A program may carry separate *message blocks*: records that are not the schedule's
transfers but have, per (step, source, destination), the same total chunk bytes.
Costs only need those totals (transfers of one step between the same two nodes
form one message), so an all-to-all costs ``N^2`` records instead of ``N^3 / 4``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scwork.errors import ConfigError, InternalError

__all__ = ["BATCH_RECORDS", "Block", "StepProgram", "step_batches"]

#: Records (transfers, or message parts) written out per batch when streaming: bounds
#: the working memory of cost(), conflicts() and the statistics (about 100 B each).
BATCH_RECORDS = 2**19

PLAIN, PIECES_MOD_L, CHUNKS_MOD_C = 0, 1, 2


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.int64).ravel())


@dataclass
class Block:
    """Transfers of one pattern on a family of loops (see the module docstring)."""

    t0: int
    loops: np.ndarray
    cyclic: bool
    src0: np.ndarray
    direction: np.ndarray
    ta: np.ndarray
    tb: np.ndarray
    op: int
    phase: int
    color: int = 0
    move: np.ndarray | None = None
    p0: np.ndarray | None = None
    p0move: np.ndarray | None = None
    p1: np.ndarray | None = None
    p1move: np.ndarray | None = None
    row_loop: np.ndarray | None = None
    row_shift: np.ndarray | None = None
    row_c0: np.ndarray | None = None
    row_w: np.ndarray | None = None
    origin_pos: np.ndarray | None = None
    chunk_mode: int = PLAIN
    #: Grid dimension the block's loops run along (-1: on chip or mixed; None: unknown).
    dim: int | None = None
    T: int = field(init=False)
    edge: np.ndarray | None = field(init=False, default=None)

    def __post_init__(self):
        self.loops = np.atleast_2d(_i64(self.loops).reshape(np.shape(self.loops)))
        names = ("src0", "direction", "ta", "tb", "move", "p0", "p0move", "p1", "p1move")
        P = max(len(_i64(getattr(self, k))) for k in names if getattr(self, k) is not None)

        def entry(value, default):
            return np.broadcast_to(_i64(default if value is None else value), (P,)).copy()

        self.src0, self.direction = entry(self.src0, 0), entry(self.direction, 0)
        self.ta, self.tb = entry(self.ta, 0), entry(self.tb, 0)
        self.move, self.p0, self.p0move = entry(self.move, 0), entry(self.p0, 0), entry(self.p0move, 0)
        self.p1 = entry(self.p1, self.p0 + 1)
        self.p1move = entry(self.p1move, self.p0move)
        NL = self.loops.shape[0]
        self.row_loop = np.arange(NL, dtype=np.int64) if self.row_loop is None else _i64(self.row_loop)
        R = len(self.row_loop)
        self.row_shift = np.zeros(R, np.int64) if self.row_shift is None else _i64(self.row_shift)
        self.row_c0 = np.zeros(R, np.int64) if self.row_c0 is None else _i64(self.row_c0)
        self.row_w = np.ones(R, np.int64) if self.row_w is None else _i64(self.row_w)
        if self.origin_pos is not None:
            self.origin_pos = _i64(self.origin_pos)
        keep = self.tb > self.ta
        if not keep.all():
            for name in ("src0", "direction", "ta", "tb", "move", "p0", "p0move", "p1", "p1move"):
                setattr(self, name, getattr(self, name)[keep])
            if self.origin_pos is not None:
                self.origin_pos = self.origin_pos[keep]
        self.T = int(self.tb.max()) if len(self.tb) else 0
        self.full = bool(len(self.ta) and (self.ta == 0).all() and (self.tb == self.T).all())
        # Entries sorted by their first step: the active ones of step t are found fast.
        if not self.full and len(self.ta):
            order = np.argsort(self.ta, kind="stable")
            for name in ("src0", "direction", "ta", "tb", "move", "p0", "p0move", "p1", "p1move"):
                setattr(self, name, getattr(self, name)[order])
            if self.origin_pos is not None:
                self.origin_pos = self.origin_pos[order]
            self.max_len = int((self.tb - self.ta).max())

    @property
    def num_rows(self) -> int:
        return len(self.row_loop)

    @property
    def length(self) -> int:
        return self.loops.shape[1]

    def records_per_step(self) -> np.ndarray:
        """Rows x active entries for every local step, shape (T,)."""
        diff = np.zeros(self.T + 1, dtype=np.int64)
        np.add.at(diff, self.ta, 1)
        np.add.at(diff, self.tb, -1)
        return np.cumsum(diff[:-1]) * self.num_rows

    def active(self, a: int, b: int):
        """(local step, entry) pairs of local steps [a, b), sorted by step."""
        if self.full:
            t = np.arange(a, b, dtype=np.int64)
            P = len(self.src0)
            return np.repeat(t, P), np.tile(np.arange(P, dtype=np.int64), len(t))
        # Entries active somewhere in [a, b): ta < b and tb > a.
        hi = int(np.searchsorted(self.ta, b, side="left"))
        lo = int(np.searchsorted(self.ta, a - self.max_len, side="right"))
        cand = np.arange(lo, hi, dtype=np.int64)
        cand = cand[self.tb[cand] > a]
        t = np.arange(a, b, dtype=np.int64)
        on = (t[:, None] >= self.ta[cand][None, :]) & (t[:, None] < self.tb[cand][None, :])
        ti, ci = np.nonzero(on)
        return t[ti], cand[ci]


class StepProgram:
    """The blocks of a compact schedule, with their links resolved.

    Parameters
    ----------
    network : Network
    num_chunks : int
    blocks : list of Block
        The schedule's transfers.
    message_blocks : list of Block, optional
        Records with the same bytes per (step, source, destination) as ``blocks``
        and fewer of them, used by the costs (default: ``blocks``).
    coalesce : bool
        Transfers of one step that differ only in adjacent chunk ranges are merged
        when written out (as the explicit builder of the improved rotated pincer does).
    """

    def __init__(self, network, num_chunks: int, blocks, message_blocks=None, coalesce: bool = False,
                 num_transfers: int | None = None):
        self.network = network
        self.num_chunks = int(num_chunks)
        self.coalesce = bool(coalesce)
        self._num_transfers = num_transfers
        # ``blocks`` may be a callable: transfer blocks too large to build eagerly
        # (a path all-to-all has N^2 entries) are made only when written out.
        self._blocks_factory = blocks if callable(blocks) else None
        self._blocks = None if callable(blocks) else _nonempty(blocks)
        if message_blocks is None and self._blocks is None:
            raise InternalError("a program with lazy transfer blocks needs message blocks")
        self.message_blocks = self._blocks if message_blocks is None else _nonempty(message_blocks)
        self.num_steps = max((b.t0 + b.T for b in self.message_blocks), default=0)
        self.used_links = np.zeros(0, np.int64)
        self._resolve(self.message_blocks + (self._blocks or []))
        self.step_message_records = self._per_step(self.message_blocks)
        self._step_records = None

    def _resolve(self, blocks) -> None:
        """Link ids of every loop edge of ``blocks``, as indices into :attr:`used_links`.

        The local order puts the links of every periodic block (a ring, rotated
        instances) in loop order, consecutively, so that its loads are added to the
        (step, link) outputs as slices; every other link follows, by id.
        """
        fresh = [b for b in {id(b): b for b in blocks}.values() if b.edge is None]
        if not fresh:
            return
        for b in fresh:
            b.edge = _edge_links(self.network, b)
            _prepare(b)
        first = not hasattr(self, "_local_of")
        if first:
            local_of = np.full(self.network.num_links, -1, dtype=np.int64)
            nxt = 0
            for b in fresh:
                if b.fast is None:
                    continue
                b.offset = {}
                for slot in b.slots:
                    seq = b.edge[0, slot]
                    if (local_of[seq] < 0).all():
                        local_of[seq] = nxt + np.arange(len(seq))
                        nxt += len(seq)
                    elif not (local_of[seq] == local_of[seq[0]] + np.arange(len(seq))).all():
                        b.fast = None  # its links are laid out for another block
                        break
                    b.offset[slot] = int(local_of[seq[0]])
            rest = np.unique(np.concatenate([b.edge[b.edge >= 0] for b in fresh]))
            rest = rest[local_of[rest] < 0]
            local_of[rest] = nxt + np.arange(len(rest))
            self._local_of = local_of
            self.used_links = np.argsort(np.where(local_of >= 0, local_of, np.iinfo(np.int64).max))[
                : nxt + len(rest)]
        else:
            for b in fresh:
                b.fast = None
            if (self._local_of[np.concatenate([b.edge[b.edge >= 0] for b in fresh])] < 0).any():
                raise InternalError("transfer blocks use links the message blocks do not")
        for b in fresh:
            b.edge_u = np.where(b.edge >= 0, self._local_of[np.maximum(b.edge, 0)], -1)
            _prepare_tables(b)

    @property
    def blocks(self) -> list:
        """The transfer blocks (built now if they were lazy)."""
        if self._blocks is None:
            self._blocks = _nonempty(self._blocks_factory())
            self._resolve(self._blocks)
        return self._blocks

    @property
    def step_records(self) -> np.ndarray:
        """Records of the transfer blocks per step (before wrapping ranges are split)."""
        if self._step_records is None:
            self._step_records = (self.step_message_records if self.message_blocks is self._blocks
                                  else self._per_step(self.blocks))
        return self._step_records

    def _per_step(self, blocks) -> np.ndarray:
        out = np.zeros(self.num_steps, dtype=np.int64)
        for b in blocks:
            out[b.t0:b.t0 + b.T] += b.records_per_step()
        return out

    # -- counts -----------------------------------------------------------------------
    def transfers_per_step(self) -> np.ndarray:
        """Transfers of every step: records, plus one per range that wraps, after coalescing."""
        if self.coalesce:
            out = np.zeros(self.num_steps, dtype=np.int64)
            for s0, s1 in self.batches(self.step_records):
                out[s0:s1] = np.bincount(self.records(s0, s1, transfers=True)["step"] - s0, minlength=s1 - s0)
            return out
        out = self.step_records.copy()
        for b in self.blocks:
            if b.chunk_mode != CHUNKS_MOD_C or not ((b.p1 - b.p0) * b.row_w.max() > 1).any():
                continue
            if b.fast == "rotations" and b.rot_step * b.length == self.num_chunks and b.rot_step > 0:
                out[b.t0:b.t0 + b.T] += _rotation_wraps(b, self.num_chunks)
                continue
            per = b.records_per_step()
            for a, e in step_batches(per, BATCH_RECORDS):
                r = _block_records(b, a, e, self.num_chunks, full=False)
                out[b.t0 + a:b.t0 + e] += np.bincount(r["step"][r["stop"] > self.num_chunks] - b.t0 - a,
                                                      minlength=e - a)
        return out

    def count_transfers(self) -> int:
        if self._num_transfers is None:
            self._num_transfers = int(self.transfers_per_step().sum())
        return self._num_transfers

    # -- batches --------------------------------------------------------------------
    def batches(self, per_step: np.ndarray, budget: int = BATCH_RECORDS, dense_width: int = 0):
        """Step ranges of bounded size: see :func:`step_batches`."""
        return step_batches(per_step, budget, dense_width)

    def records(self, s0: int, s1: int, *, messages: bool = False, transfers: bool = False,
                with_phase: bool = False):
        """Records of global steps [s0, s1) as a dict of arrays.

        Always ``step``, ``source``, ``destination``, ``u`` (index into
        :attr:`used_links`), ``start``, ``stop`` (chunk range; with
        ``CHUNKS_MOD_C`` the stop may exceed ``num_chunks``: the range wraps).
        With ``transfers=True`` the schedule's transfers exactly (wrapping ranges
        split, coalesced if the program says so) plus ``op``, ``color``,
        ``phase``, ``origin``, sorted by step. ``messages=True`` uses the message
        blocks (only per-message byte totals are meaningful); ``with_phase`` adds
        ``phase``.
        """
        parts = []
        for b in (self.message_blocks if messages else self.blocks):
            a, e = max(s0 - b.t0, 0), min(s1 - b.t0, b.T)
            if a >= e:
                continue
            parts.append(_block_records(b, a, e, self.num_chunks, full=transfers, with_phase=with_phase))
        if not parts:
            return _empty(transfers or with_phase, transfers)
        cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        if transfers:
            cols = _split_wrapping(cols, self.num_chunks)
            if self.coalesce and len(cols["step"]):
                cols = _coalesce_cols(cols)
            order = np.argsort(cols["step"], kind="stable")
            cols = {k: v[order] for k, v in cols.items()}
        return cols

    def loads(self, s0: int, s1: int, width: int, prefix: np.ndarray, *, nodes: bool = False,
              with_phase: bool = False) -> dict:
        """What costs need of the message records of steps [s0, s1), fast.

        ``key`` = (step - s0) * ``width`` + ``u`` and ``nbytes`` (from ``prefix``,
        :func:`chunk_byte_prefix`); with ``nodes`` also ``source``/``destination``,
        with ``with_phase`` also ``phase``.
        """
        parts = []
        for b in self.message_blocks:
            a, e = max(s0 - b.t0, 0), min(s1 - b.t0, b.T)
            if a < e:
                parts.append(_block_loads(b, a, e, s0, width, self.num_chunks, prefix, nodes, with_phase))
        if not parts:
            names = ["key", "nbytes"] + (["source", "destination"] if nodes else []) + (
                ["phase"] if with_phase else [])
            return {k: np.zeros(0, dtype=np.int64) for k in names}
        if len(parts) == 1:
            return parts[0]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def accumulate(self, s0: int, s1: int, prefix: np.ndarray, out_bytes: np.ndarray, out_count: np.ndarray,
                   phase: int | None = None) -> None:
        """Add the bytes and records of every (step, used link) of steps [s0, s1) to
        ``out_bytes`` / ``out_count`` (shape (s1 - s0, len(used_links))).

        Periodic blocks take fast paths: a ring's step t carries the pieces of step 0
        rotated by t (one window of a doubled byte table per step), and rotated
        instances (one row per start node) are one slice of the loop's links per
        (step, entry). Other blocks go through :meth:`loads` and a bincount.
        ``phase``: only the blocks of that phase code.
        """
        U = out_bytes.shape[1]
        B = s1 - s0
        for b in self.message_blocks:
            a, e = max(s0 - b.t0, 0), min(s1 - b.t0, b.T)
            if a >= e or (phase is not None and b.phase != phase):
                continue
            if b.fast == "ring":
                _acc_ring(b, a, e, s0, prefix, out_bytes, out_count)
            elif b.fast == "rotations":
                _acc_rotations(b, a, e, s0, self.num_chunks, prefix, out_bytes, out_count)
            else:
                r = _block_loads(b, a, e, s0, U, self.num_chunks, prefix, False, False)
                out_bytes += np.bincount(r["key"], weights=r["nbytes"].astype(np.float64),
                                         minlength=B * U).reshape(B, U)
                out_count += np.bincount(r["key"], minlength=B * U).reshape(B, U)


def step_batches(per_step: np.ndarray, budget: int = BATCH_RECORDS, dense_width: int = 0):
    """Step ranges [s0, s1) of at most ``budget`` records (at least one step each) and,
    with ``dense_width``, at most ``budget`` cells of a (steps, dense_width) array."""
    S = len(per_step)
    cum = np.concatenate([[0], np.cumsum(per_step)])
    step_cap = max(1, budget // dense_width) if dense_width else S
    s = 0
    while s < S:
        e = int(np.searchsorted(cum, cum[s] + budget, side="right")) - 1
        e = min(max(e, s + 1), s + step_cap, S)
        yield s, e
        s = e


def _nonempty(blocks) -> list:
    return [b for b in blocks if b.T > 0 and len(b.src0) and b.num_rows]


def _empty(phase: bool, transfers: bool) -> dict:
    names = ["step", "source", "destination", "u", "start", "stop"]
    if transfers:
        names += ["op", "color", "origin"]
    if phase:
        names += ["phase"]
    return {k: np.zeros(0, dtype=np.int64) for k in names}


def _edge_links(network, b: Block) -> np.ndarray:
    """Global link id of every loop edge: (loops, 2, L); [., 0, p] p -> p+1, [., 1, p] p -> p-1."""
    loops = b.loops
    NL, L = loops.shape
    out = np.full((NL, 2, L), -1, dtype=np.int64)
    dirs = set(np.unique(b.direction).tolist())
    for slot, d in ((0, 1), (1, -1)):
        if d not in dirs or L < 2:
            continue
        src = loops
        dst = np.roll(loops, -d, axis=1)
        valid = np.ones((NL, L), dtype=bool)
        if not b.cyclic:
            pos = np.arange(L)
            valid &= ((pos + d >= 0) & (pos + d < L))[None, :]
        out[:, slot, :][valid] = network.link_ids(src[valid], dst[valid])
    return out


def _block_records(b: Block, a: int, e: int, C: int, full: bool, with_phase: bool = False) -> dict:
    """Records of local steps [a, e) of block ``b``."""
    t, j = b.active(a, e)
    L = b.length
    R = b.num_rows
    spos = b.src0[j] + b.move[j] * t  # (m,)
    d = b.direction[j]
    q0 = b.p0[j] + b.p0move[j] * t
    q1 = b.p1[j] + b.p1move[j] * t
    if b.chunk_mode == PIECES_MOD_L:
        width = q1 - q0
        q0 = q0 % L
        q1 = q0 + width
    m = len(t)
    # Records ordered (row, pair): (R, m) broadcast, then raveled.
    pos = spos[None, :] + b.row_shift[:, None]
    if b.cyclic:
        pos %= L
    loop = b.row_loop[:, None]
    src = b.loops[loop, pos]
    dpos = pos + d[None, :]
    if b.cyclic:
        dpos %= L
    dst = b.loops[loop, dpos]
    u = b.edge_u[loop, (d < 0)[None, :].astype(np.int64), pos]
    c0 = b.row_c0[:, None] + q0[None, :] * b.row_w[:, None]
    c1 = b.row_c0[:, None] + q1[None, :] * b.row_w[:, None]
    if b.chunk_mode == CHUNKS_MOD_C:
        width = c1 - c0
        c0 = c0 % C
        c1 = c0 + width
    step = np.broadcast_to((b.t0 + t)[None, :], (R, m))
    out = {"step": step.ravel(), "source": src.ravel(), "destination": dst.ravel(), "u": u.ravel(),
           "start": c0.ravel(), "stop": c1.ravel()}
    n = R * m
    if full or with_phase:
        out["phase"] = np.full(n, b.phase, dtype=np.int64)
    if full:
        out["op"] = np.full(n, b.op, dtype=np.int64)
        out["color"] = np.full(n, b.color, dtype=np.int64)
        if b.origin_pos is None:
            out["origin"] = np.full(n, -1, dtype=np.int64)
        else:
            opos = b.origin_pos[j][None, :] + b.row_shift[:, None]
            if b.cyclic:
                opos %= L
            out["origin"] = b.loops[loop, opos].ravel()
    return out


def _prepare(b: Block) -> None:
    """Decide whether ``b`` takes a fast path (needs the global edge links ``b.edge``)."""
    L = b.length
    b.static = bool(not b.move.any() and not b.row_shift.any())
    width = b.p1 - b.p0
    b.piece_table = bool(b.chunk_mode == PIECES_MOD_L and (width == 1).all() and (b.p1move == b.p0move).all())
    b.btab_key = None
    b.fast = None
    P, R = len(b.src0), b.num_rows
    b.slots = sorted({0 if d > 0 else 1 for d in b.direction.tolist()})
    if L < 2 or not b.cyclic or b.loops.shape[0] != 1:
        return
    edges_ok = all((b.edge[0, slot] >= 0).all() and len(np.unique(b.edge[0, slot])) == L for slot in b.slots)
    if not edges_ok:
        return
    if (b.static and b.full and R == 1 and P == L and b.piece_table and (b.src0 == np.arange(L)).all()
            and len(b.slots) == 1 and (b.p0move == b.p0move[0]).all()
            and len(np.unique((b.p0 - np.arange(P)) % L)) == 1):
        b.fast = "ring"
        b.ring_c = int(b.p0[0] % L)
    elif (R == L and (b.row_shift == np.arange(L)).all() and b.chunk_mode in (PLAIN, CHUNKS_MOD_C)
          and (b.row_w == b.row_w[0]).all() and len(np.unique(np.diff(b.row_c0))) <= 1 and b.row_c0[0] >= 0):
        b.fast = "rotations"
        b.rot_step = int(b.row_c0[1] - b.row_c0[0])
        b.pext_key = None


def _prepare_tables(b: Block) -> None:
    """Flat tables for :func:`_block_loads`; per-(row, entry) link and nodes when no
    position moves (a ring: step t differs from step 0 only in the pieces carried)."""
    L = b.length
    b.edge_flat = b.edge_u.ravel()
    b.loops_flat = b.loops.ravel()
    b.row_base = b.row_loop * L
    back = (b.direction < 0).astype(np.int64)
    if b.static:
        pos = b.src0 % L if b.cyclic else b.src0
        dpos = (pos + b.direction) % L if b.cyclic else pos + b.direction
        b.u_re = b.edge_u[b.row_loop[:, None], back[None, :], pos[None, :]]
        b.src_re = b.loops[b.row_loop[:, None], pos[None, :]]
        b.dst_re = b.loops[b.row_loop[:, None], dpos[None, :]]
    b.edge_row = (b.row_loop * 2)[:, None] * L
    b.back_off = back * L


def _block_loads(b: Block, a: int, e: int, s0: int, width: int, C: int, prefix: np.ndarray,
                 nodes: bool, with_phase: bool) -> dict:
    """Link keys and bytes of the records of local steps [a, e) of ``b`` (see StepProgram.loads)."""
    t, j = b.active(a, e)
    L, R = b.length, b.num_rows
    one = R == 1
    if b.static:
        u = b.u_re[0, j] if one else b.u_re[:, j]
    else:
        spos = b.src0[j] + b.move[j] * t
        pos = spos if one and not b.row_shift[0] else spos[None, :] + b.row_shift[:, None]
        if b.cyclic:
            pos = pos % L
        u = b.edge_flat[(b.edge_row[0, 0] if one else b.edge_row) + b.back_off[j] + pos]
    if b.piece_table:
        key = (prefix.size, prefix[-1])
        if b.btab_key != key:
            q = np.arange(L + 1)
            c = b.row_c0[:, None] + q[None, :] * b.row_w[:, None]
            b.btab = np.diff(prefix[c], axis=1).ravel()
            b.btab_key = key
        q0 = (b.p0[j] + b.p0move[j] * t) % L
        nbytes = b.btab[q0] if one else b.btab[(np.arange(R) * L)[:, None] + q0[None, :]]
    else:
        q0 = b.p0[j] + b.p0move[j] * t
        q1 = b.p1[j] + b.p1move[j] * t
        if b.chunk_mode == PIECES_MOD_L:
            w = q1 - q0
            q0 = q0 % L
            q1 = q0 + w
        c0 = b.row_c0[:, None] + q0[None, :] * b.row_w[:, None]
        c1 = b.row_c0[:, None] + q1[None, :] * b.row_w[:, None]
        if b.chunk_mode == CHUNKS_MOD_C:
            w = c1 - c0
            c0 = c0 % C
            c1 = c0 + w
        nbytes = prefix[c1] - prefix[c0]
    base = (t + (b.t0 - s0)) * width
    key = u + (base if one else base[None, :])
    shape = np.broadcast_shapes(key.shape, np.shape(nbytes))
    out = {"key": np.broadcast_to(key, shape).ravel(), "nbytes": np.broadcast_to(nbytes, shape).ravel()}
    if nodes:
        if b.static:
            src, dst = (b.src_re[0, j], b.dst_re[0, j]) if one else (b.src_re[:, j], b.dst_re[:, j])
        else:
            dpos = pos + b.direction[j] if one and not b.row_shift[0] else pos + b.direction[j][None, :]
            if b.cyclic:
                dpos = dpos % L
            rb = b.row_base[0] if one else b.row_base[:, None]
            src, dst = b.loops_flat[rb + pos], b.loops_flat[rb + dpos]
        out["source"] = np.broadcast_to(src, shape).ravel()
        out["destination"] = np.broadcast_to(dst, shape).ravel()
    if with_phase:
        out["phase"] = np.full(len(out["key"]), b.phase, dtype=np.int64)
    return out


def _rotation_wraps(b: Block, C: int) -> np.ndarray:
    """Per local step, the ranges of a rotations block that run past chunk C.

    Row r's range starts at (m r + s) mod C with m L = C: the rows' starts are the
    residues of s modulo m, once each, so the range of width W wraps for the rows
    whose start lies in [C - W + 1, C - 1] -- counted per (step, entry) without rows.
    """
    t, j = b.active(0, b.T)
    m, w = b.rot_step, int(b.row_w[0])
    q0 = b.p0[j] + b.p0move[j] * t
    width = (b.p1[j] + b.p1move[j] * t - q0) * w
    s = (int(b.row_c0[0]) + q0 * w) % m
    lo, hi = C - width + 1, C - 1
    count = np.where(width > 1, (hi - s) // m - (lo - 1 - s) // m, 0)
    return np.bincount(t, weights=count, minlength=b.T).astype(np.int64)


def _acc_ring(b: Block, a: int, e: int, s0: int, prefix, out_bytes, out_count) -> None:
    """A full ring block: step t carries piece (c + j + p0move t) mod L on its j-th link
    (local links ``offset + j``): one window of the doubled piece-byte table per step."""
    L = b.length
    key = (prefix.size, prefix[-1])
    if b.btab_key != key:
        c = b.row_c0[0] + np.arange(L + 1) * b.row_w[0]
        b.btab = np.diff(prefix[c]).astype(np.float64)
        b.btab_key = key
    windows = np.lib.stride_tricks.sliding_window_view(np.concatenate([b.btab, b.btab]), L)
    t = np.arange(a, e)
    off = b.offset[b.slots[0]]
    rows = slice(a + b.t0 - s0, e + b.t0 - s0)
    out_bytes[rows, off:off + L] += windows[(b.ring_c + b.p0move[0] * t) % L]
    out_count[rows, off:off + L] += 1


def _acc_rotations(b: Block, a: int, e: int, s0: int, C: int, prefix, out_bytes, out_count) -> None:
    """One row per start node r of a ring (row r shifted by r, chunks r * step + c):
    entry j at step t uses the loop's links p+r for all r (a cyclic slice of the
    local links) and chunks [r * step + c0, r * step + c1) (a strided slice of the
    chunk byte offsets)."""
    L = b.length
    a_r, c_r, w = b.rot_step, int(b.row_c0[0]), int(b.row_w[0])
    t, j = b.active(a, e)
    if not len(t):
        return
    q0 = b.p0[j] + b.p0move[j] * t
    q1 = b.p1[j] + b.p1move[j] * t
    base0 = c_r + q0 * w
    if b.chunk_mode == CHUNKS_MOD_C:
        base0 = base0 % C
    base1 = base0 + (q1 - q0) * w
    need = int(max(base1.max(), base0.max())) + a_r * (L - 1) + 1
    if b.pext_key is None or b.pext_key[0] != (prefix.size, prefix[-1]) or b.pext_key[1] < need:
        # Chunk offsets past the end continue on the next lap (ranges that wrap mod C).
        x = np.arange(need + 1)
        b.pext = (prefix[x % C] + (x // C) * prefix[C]).astype(np.float64)
        b.pext_key = ((prefix.size, prefix[-1]), need)
    spos = ((b.src0[j] + b.move[j] * t) % L).tolist()
    off = [b.offset[0 if d > 0 else 1] for d in b.direction[j].tolist()]
    rel = (t + (b.t0 - s0)).tolist()
    base0, base1 = base0.tolist(), base1.tolist()
    span = a_r * L
    pext = b.pext
    for i in range(len(rel)):
        if a_r:
            nbytes = pext[base1[i]:base1[i] + span:a_r] - pext[base0[i]:base0[i] + span:a_r]
        else:
            nbytes = np.full(L, pext[base1[i]] - pext[base0[i]])
        row_b, row_c, o, p = out_bytes[rel[i]], out_count[rel[i]], off[i], spos[i]
        # Row r uses local link o + (p + r) mod L: two contiguous pieces.
        row_b[o + p:o + L] += nbytes[:L - p]
        row_b[o:o + p] += nbytes[L - p:]
        row_c[o:o + L] += 1


def _split_wrapping(cols: dict, C: int) -> dict:
    """Ranges [c0, c1) with c1 > C are [c0, C) and [0, c1 - C): two transfers."""
    wrap = cols["stop"] > C
    if not wrap.any():
        return cols
    idx = np.flatnonzero(wrap)
    extra = {k: v[idx] for k, v in cols.items()}
    extra["start"] = np.zeros(len(idx), dtype=np.int64)
    extra["stop"] = cols["stop"][idx] - C
    cols = dict(cols)
    cols["stop"] = np.where(wrap, C, cols["stop"])
    return {k: np.concatenate([cols[k], extra[k]]) for k in cols}


def _coalesce_cols(cols: dict) -> dict:
    """Merge transfers of one step that differ only in adjacent chunk ranges."""
    keys = ("step", "source", "destination", "op", "color", "phase", "origin")
    order = np.lexsort(tuple(cols[k] for k in ("start",) + keys[::-1]))
    c = {k: v[order] for k, v in cols.items()}
    n = len(c["step"])
    same = np.ones(n, dtype=bool)
    same[0] = False
    for k in keys:
        same[1:] &= c[k][1:] == c[k][:-1]
    same[1:] &= c["start"][1:] == c["stop"][:-1]
    starts = np.flatnonzero(~same)
    ends = np.r_[starts[1:], n] - 1
    out = {k: v[starts] for k, v in c.items()}
    out["stop"] = c["stop"][ends]
    return out


def chunk_byte_prefix(num_elements: int, num_chunks: int, itemsize: int) -> np.ndarray:
    """Byte offset of chunk boundaries 0..2C (the second lap for ranges that wrap)."""
    c = np.arange(num_chunks + 1, dtype=np.int64)
    b = (c * int(num_elements)) // int(num_chunks) * int(itemsize)
    return np.concatenate([b, b[-1] + b[1:]])


def check_records_limit(what: str, records: int, limit: int, hint: str) -> None:
    """Refuse a streaming pass of more than ``limit`` records with a typed error."""
    if records > limit:
        raise ConfigError(f"{what} needs {records:,} transfer records, more than the limit of {limit:,}; {hint}")
