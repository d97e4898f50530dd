"""How compact schedules are assembled: step patterns, lanes of phases, and shared checks.

A schedule is a step program (:mod:`scwork.collectives._program`) of blocks. The
builders of :mod:`~scwork.collectives.multidim`, :mod:`~scwork.collectives.rings`,
:mod:`~scwork.collectives.pincers` and :mod:`~scwork.collectives.exchange` describe
their transfers with the 1-D patterns here (ring, pincer and line steps in
loop-position space) and run them as lanes: one color (and direction) working on its
own chunk range through a sequence of phases.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from scwork.collectives._program import Block, PIECES_MOD_L, PLAIN, StepProgram
from scwork.collectives.network import Network
from scwork.collectives.schedule import Schedule
from scwork.errors import ConfigError, InternalError


RS, AG, A2A = 0, 1, 2  # phase codes (PHASES)
COMBINE, COPY = 0, 1  # op codes (OPS)


# ---------------------------------------------------------------------------------------
# 1-D patterns in loop-position space, as affine entries (see scwork.collectives._program):
# at local step t in [ta, tb) entry j sends from position src0 + move*t to the next
# position in ``direction``, carrying piece p0 + p0move*t. Position i ends owning piece i
# after a reduce-scatter and starts owning it before an all-gather. A reduce-scatter built
# as the dual of an all-gather is the same tree run backwards in time with the links
# reversed and copy -> combine.
# ---------------------------------------------------------------------------------------
_ENTRY_FIELDS = ("src0", "move", "direction", "p0", "p0move", "ta", "tb")


def _entries(**cols) -> dict:
    n = max(len(np.atleast_1d(v)) for v in cols.values())
    return {k: np.broadcast_to(np.asarray(cols.get(k, 0), dtype=np.int64), (n,)).copy() for k in _ENTRY_FIELDS}


def _cat_entries(*parts) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in _ENTRY_FIELDS}


def _ring_entries(L: int, phase: int):
    """Ring: position i sends to i+1 every step; the piece goes back one per step."""
    i = np.arange(L)
    return _entries(src0=i, direction=1, p0=i if phase == AG else i - 1, p0move=-1, ta=0, tb=L - 1), L - 1


def _pincer_ag(L: int):
    """Whole shards both ways: piece q goes ceil((L-1)/2) hops forward, floor back."""
    fwd, back = L // 2, (L - 1) // 2
    q = np.arange(L)
    return _cat_entries(_entries(src0=q, move=1, direction=1, p0=q, ta=0, tb=fwd),
                        _entries(src0=q, move=-1, direction=-1, p0=q, ta=0, tb=back)), fwd


def _line_ag(L: int):
    """Line: piece s floods right (i -> i+1 at step i-s) and left (i -> i-1 at step s-i)."""
    s = np.arange(L)
    return _cat_entries(_entries(src0=s[:-1], move=1, direction=1, p0=s[:-1], ta=0, tb=L - 1 - s[:-1]),
                        _entries(src0=s[1:], move=-1, direction=-1, p0=s[1:], ta=0, tb=s[1:])), L - 1


def _dual(pattern):
    """Time-reversed pattern: step t -> T-1-t, source and destination swapped."""
    e, T = pattern
    return {"src0": e["src0"] + e["direction"] + e["move"] * (T - 1), "move": -e["move"],
            "direction": -e["direction"], "p0": e["p0"] + e["p0move"] * (T - 1), "p0move": -e["p0move"],
            "ta": T - e["tb"], "tb": T - e["ta"]}, T


@lru_cache(maxsize=256)
def _pattern(kind: str, phase: int, L: int):
    """(entries, steps) of a reduce-scatter or all-gather of ``kind`` on loops of ``L``."""
    if kind == "ring":
        return _ring_entries(L, phase)
    ag = {"pincer": _pincer_ag, "line": _line_ag}[kind](L)
    return ag if phase == AG else _dual(ag)


def pattern_steps(kind: str, L: int) -> int:
    return L // 2 if kind == "pincer" else L - 1


# ---------------------------------------------------------------------------------------
# Lanes: a lane is one color (and, for one-way rings, one direction) working on its own
# contiguous chunk range through a sequence of phases; each phase is a list of loop
# families (kind, loops[num_loops, L]) that run at the same time.
# ---------------------------------------------------------------------------------------
def emit_phase(blocks: list | None, fams, R0, R1, phase: int, t0: int, color: int, where: str):
    """Emit one reduce-scatter or all-gather phase; return (steps, new R0, new R1).

    ``R0``/``R1``: chunk region every node works on before the phase (loop members
    share one region); after a reduce-scatter, loop position ``q`` owns piece ``q``.
    With ``blocks=None`` only the regions are computed.
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
        if blocks is not None:
            entries, steps = _pattern(kind, phase, L)
            blocks.append(Block(t0=t0, loops=loops, cyclic=kind != "line", **entries,
                                op=COMBINE if phase == RS else COPY, phase=phase, color=color,
                                row_c0=lr0, row_w=w, chunk_mode=PIECES_MOD_L if kind == "ring" else PLAIN))
            T = max(T, steps)
        q = np.arange(L)
        newR0[loops] = lr0[:, None] + q[None, :] * w[:, None]
        newR1[loops] = newR0[loops] + w[:, None]
    return T, newR0, newR1


def run_lanes(blocks: list, lanes, collective: str, num_nodes: int):
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
            T, R0, R1 = emit_phase(None if collective == "all_gather" else blocks, fams, R0, R1, RS, t,
                                    color, where)
            t += T
        owners[0].append(np.arange(num_nodes))
        owners[1].append(R0)
        owners[2].append(R1)
        if collective in ("all_reduce", "all_gather"):
            for fams, P0, P1, where in reversed(history):
                # The all-gather of a phase gives every loop member the parent region.
                T, _, _ = emit_phase(blocks, fams, P0, P1, AG, t, color, where)
                t += T
    return tuple(np.concatenate(o) for o in owners)


def compact(net: Network, num_chunks: int, blocks, **kwargs) -> Schedule:
    """A compact schedule of ``blocks`` (a list of :class:`~scwork.collectives._program.Block`)."""
    message_blocks = kwargs.pop("message_blocks", None)
    coalesce = kwargs.pop("coalesce", False)
    num_transfers = kwargs.pop("num_transfers", None)
    program = StepProgram(net, num_chunks, blocks, message_blocks=message_blocks, coalesce=coalesce,
                          num_transfers=num_transfers)
    return Schedule._from_program(net, program, num_transfers=num_transfers, **kwargs)

def check_size(nbytes, itemsize):
    for name, v, lo in (("nbytes", nbytes, 0), ("itemsize", itemsize, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}")


def loop_one_way_ok(net: Network, ring) -> bool:
    links = net.link_ids(ring, np.roll(ring, -1))
    return len(np.unique(links)) == len(links) or len(ring) <= 2


def loop_two_way_ok(net: Network, ring) -> bool:
    fwd = net.link_ids(ring, np.roll(ring, -1))
    back = net.link_ids(np.roll(ring, -1), ring)
    both = np.concatenate([fwd, back])
    return len(np.unique(both)) == len(both) or len(ring) <= 2
