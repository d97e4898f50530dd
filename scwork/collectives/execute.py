"""Run a schedule on real numbers, check the result, record step-by-step frames.

:func:`execute` simulates every node's buffer step by step (on large runs a
numba kernel that runs the whole schedule one cache-sized block of elements at
a time; on small ones one numpy slice operation per transfer) and checks that
every node ends with exactly what the collective must produce (every node and
element on small runs, a seeded sample of nodes and elements on large ones).
Besides the values it tracks, for every node and chunk, *which* nodes'
contributions the buffer holds (a bit set), so a wrong schedule is caught at
the step where it goes wrong: a contribution added twice, a copy that throws
away contributions, or a node that never gets some. :func:`frames` records
that state after every step for drawing.

A large all-reduce takes the fused path (:mod:`scwork.collectives._fused`):
one kernel pass per block of elements checks the input, runs the schedule,
checks that the nodes of each group end bitwise equal and keeps one vector per
group, while the tracker runs on another thread. The input checks live in
:mod:`scwork.collectives._input`, the result class in
:mod:`scwork.collectives._execution`.
"""

from __future__ import annotations

import numpy as np

from scwork._validate import shown
from scwork.collectives._execution import Execution
from scwork.collectives._execution import Later as _Later
from scwork.collectives._fused import available_cores as _available_cores
from scwork.collectives._fused import fusable as _fusable
from scwork.collectives._fused import fused_all_reduce as _fused_all_reduce
from scwork.collectives._fused import node_rows as _node_rows
from scwork.collectives._input import as_data as _as_data
from scwork.collectives._input import check_values as _check_values
from scwork.collectives._input import work_dtype as _work_dtype
from scwork.collectives._simulate import NUMBA_MIN_CELLS  # noqa: F401 - documented in execute()
from scwork.collectives._simulate import all_hazards as _all_hazards
from scwork.collectives._simulate import choose_engine as _choose_engine
from scwork.collectives._simulate import hazards as _hazards  # noqa: F401 - tests and tools import it from here
from scwork.collectives._simulate import run as _run
from scwork.collectives._simulate import run_reference as _run_reference  # noqa: F401 - the reference loop
from scwork.collectives.schedule import OPS, Schedule
from scwork.errors import ConfigError, ScheduleError

__all__ = ["Execution", "execute", "frames", "reference_result"]

_COMBINE, _COPY = OPS.index("combine"), OPS.index("copy")


def reference_result(schedule: Schedule, data) -> np.ndarray:
    """What every node must hold at the end (float64 for floats), shape (nodes, L).

    All-reduce: the sum of all vectors (of the node's group, for ``dims`` subsets).
    Reduce-scatter: that sum on each node's owned ranges, 0 elsewhere.
    All-gather: the owners' data on every range.
    """
    arr = _as_data(schedule, data)
    s = schedule.with_size(arr.shape[1] * arr.dtype.itemsize, arr.dtype.itemsize)
    _, rows, row_of, mask, _ = _expected(s, arr)
    chunk_of = np.repeat(np.arange(s.num_chunks), np.diff(s.element_bounds(arr.shape[1])))
    return np.where(mask[:, chunk_of], rows[row_of], 0)


def _groups(schedule: Schedule):
    """Group id of every node: nodes that reduce together (one group unless ``dims``)."""
    N = schedule.network.num_nodes
    if schedule.group_size == N:
        return np.zeros(N, dtype=np.int64)
    # Connected components of the communication graph.
    parent = np.arange(N)

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in set(zip(schedule.source.tolist(), schedule.destination.tolist())):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
    roots = np.array([find(i) for i in range(N)])
    _, gid = np.unique(roots, return_inverse=True)
    return gid


#: Most (node, chunk) cells the per-chunk state of :func:`execute` may have (owner masks,
#: expected-value masks: one byte each, 256 MiB).
MAX_STATE_CELLS = 2**28


def _check_state_size(schedule: Schedule) -> None:
    N, C = schedule.network.num_nodes, schedule.num_chunks
    if N * C > MAX_STATE_CELLS:
        raise ConfigError(f"{schedule.name} on {schedule.network.name} has {N:,} nodes x {C:,} chunks = {N * C:,} "
                          f"(node, chunk) cells, more than MAX_STATE_CELLS={MAX_STATE_CELLS:,} to simulate; use a "
                          "smaller network (cost() needs no simulation)")


def _owner_mask(schedule: Schedule):
    """Boolean (N, C): node owns chunk (reduce-scatter output / all-gather input)."""
    _check_state_size(schedule)
    N, C = schedule.network.num_nodes, schedule.num_chunks
    mask = np.zeros((N, C), dtype=bool)
    if schedule.owners is not None:
        node, c0, c1 = schedule.owners
        for n, a, b in zip(node.tolist(), c0.tolist(), c1.tolist()):
            mask[n, a:b] = True
    return mask


def _column_sums(arr: np.ndarray, gid: np.ndarray, ref_dtype, block: int = 1 << 15):
    """Per-group sums and sums of absolute values, column block by column block."""
    G, L = int(gid.max()) + 1, arr.shape[1]
    sums = np.zeros((G, L), dtype=ref_dtype)
    abs_sums = np.zeros((G, L), dtype=np.float64)
    for a in range(0, L, block):
        blk = arr[:, a:a + block]
        if G == 1:
            sums[0, a:a + block] = blk.sum(axis=0, dtype=ref_dtype)
            abs_sums[0, a:a + block] = np.abs(blk).sum(axis=0, dtype=np.float64)
        else:
            np.add.at(sums[:, a:a + block], gid, blk.astype(ref_dtype))
            np.add.at(abs_sums[:, a:a + block], gid, np.abs(blk).astype(np.float64))
    return sums, abs_sums


def _expected(schedule: Schedule, arr: np.ndarray):
    """Initial buffers, reference rows, row of each node, chunk mask, |x| sums.

    Node ``n`` must end with ``rows[row_of[n]]`` on the chunks where ``mask[n]``.
    """
    _check_state_size(schedule)
    N, C = schedule.network.num_nodes, schedule.num_chunks
    L = arr.shape[1]
    bounds = schedule.element_bounds(L)
    chunk_of = np.repeat(np.arange(C), np.diff(bounds))  # element -> chunk
    ref_dtype = np.float64 if arr.dtype.kind == "f" else (np.complex128 if arr.dtype.kind == "c" else np.int64)
    coll = schedule.collective
    gid = _groups(schedule)
    if coll in ("all_reduce", "reduce_scatter"):
        rows, abs_rows = _column_sums(arr, gid, ref_dtype)
        mask = _owner_mask(schedule) if coll == "reduce_scatter" else np.ones((N, C), dtype=bool)
        return arr, rows, gid, mask, abs_rows
    if coll == "all_gather":
        own = _owner_mask(schedule)
        G = int(gid.max()) + 1
        rows = np.zeros((G, L), dtype=ref_dtype)
        for g in range(G):
            members = np.flatnonzero(gid == g)
            sub = own[members]
            if not (sub.sum(axis=0) == 1).all():
                raise ScheduleError(
                    f"all-gather input: in group {g} some chunks have no owner or several "
                    "owners; every chunk must start on exactly one node of its group"
                )
            owner = members[np.argmax(sub, axis=0)]
            rows[g] = arr[owner[chunk_of], np.arange(L)]
        initial = np.where(own[:, chunk_of], arr, 0).astype(arr.dtype)
        return initial, rows, gid, np.ones((N, C), dtype=bool), None
    raise ConfigError(f"no reference for collective {coll!r}")


# ---------------------------------------------------------------------------------------
# Bit sets of contributions
# ---------------------------------------------------------------------------------------
#: Largest contribution bit set (nodes x chunks x ceil(nodes / 64) words) the
#: tracker of :func:`execute` and :func:`frames` allocates: 1 GiB.
MAX_TRACKER_BYTES = 2**30


def _check_tracker_size(schedule: Schedule) -> None:
    """Refuse, before allocating, bit sets that grow as nodes^2 x chunks past :data:`MAX_TRACKER_BYTES`."""
    N, C = schedule.network.num_nodes, schedule.num_chunks
    need = N * C * ((N + 63) // 64) * 8
    if need > MAX_TRACKER_BYTES:
        raise ConfigError(
            f"tracking which nodes' data every (node, chunk) holds for {schedule.name} on {schedule.network.name} "
            f"takes {N:,} nodes x {C:,} chunks x {(N + 63) // 64:,} words = {need / 2**30:,.1f} GiB, more than "
            f"MAX_TRACKER_BYTES ({MAX_TRACKER_BYTES / 2**30:g} GiB); pass track=False to execute (values are "
            "still checked), or use a smaller network")


def _initial_bits(schedule: Schedule):
    _check_tracker_size(schedule)
    N, C = schedule.network.num_nodes, schedule.num_chunks
    W = (N + 63) // 64
    bits = np.zeros((N, C, W), dtype=np.uint64)
    n = np.arange(N)
    one = (np.uint64(1) << (n % 64).astype(np.uint64))
    if schedule.collective == "all_gather":
        own = _owner_mask(schedule)
        for w in range(W):
            sel = (n // 64) == w
            bits[sel, :, w] = np.where(own[sel], one[sel, None], np.uint64(0))
    else:
        for w in range(W):
            sel = (n // 64) == w
            bits[sel, :, w] = one[sel, None]
    return bits


def _target_bits(schedule: Schedule):
    """Bit set each (node, chunk) must end with; and the mask where it matters."""
    _check_tracker_size(schedule)
    N, C = schedule.network.num_nodes, schedule.num_chunks
    W = (N + 63) // 64
    gid = _groups(schedule)
    target = np.zeros((N, C, W), dtype=np.uint64)
    n = np.arange(N)
    if schedule.collective in ("all_reduce", "reduce_scatter"):
        for g in np.unique(gid):
            members = n[gid == g]
            word = np.zeros(W, dtype=np.uint64)
            for m in members:
                word[m // 64] |= np.uint64(1) << np.uint64(m % 64)
            target[members] = word[None, None, :]
        mask = _owner_mask(schedule) if schedule.collective == "reduce_scatter" else np.ones((N, C), bool)
        return target, mask
    own = _owner_mask(schedule)
    for g in np.unique(gid):
        members = n[gid == g]
        owner = members[np.argmax(own[members], axis=0)]  # (C,)
        for w in range(W):
            sel = (owner // 64) == w
            vals = np.where(sel, np.uint64(1) << (owner % 64).astype(np.uint64), np.uint64(0))
            target[members, :, w] = vals[None, :]
    return target, np.ones((N, C), bool)


def _members(bits_row) -> list[int]:
    out = []
    for w, word in enumerate(np.asarray(bits_row, dtype=np.uint64).tolist()):
        for b in range(64):
            if word >> b & 1:
                out.append(w * 64 + b)
    return out


def _fmt_nodes(net, nodes) -> str:
    if len(nodes) > 8:
        return ", ".join(net.node_label(n) for n in nodes[:8]) + f", ... ({len(nodes)} nodes)"
    return ", ".join(net.node_label(n) for n in nodes) or "none"


class _Tracker:
    """Bit sets and last-write steps, updated per step (vectorised)."""

    def __init__(self, schedule: Schedule):
        self.s = schedule
        self.bits = _initial_bits(schedule)
        self.last = np.full(self.bits.shape[:2], -1, dtype=np.int64)
        self.fresh = True       # no step run yet

    def step(self, t: int, sl: slice) -> None:
        self.fresh = False
        s = self.s
        net = s.network
        src, dst = s.source[sl], s.destination[sl]
        c0, c1, op = s.start[sl], s.stop[sl], s.op[sl]
        rep = c1 - c0
        tid = np.repeat(np.arange(len(src)), rep)
        offs = np.cumsum(rep) - rep
        chunk = c0[tid] + (np.arange(rep.sum()) - offs[tid])
        sn, dn, ops = src[tid], dst[tid], op[tid]
        sbits = self.bits[sn, chunk]  # copy: the state at the start of the step
        empty = ~sbits.any(axis=1)
        if empty.any():
            i = int(np.argmax(empty))
            raise ScheduleError(
                f"step {t}: node {int(sn[i])} ({net.node_label(int(sn[i]))}) sends chunk {int(chunk[i])} "
                f"to node {int(dn[i])} before holding any data for it",
                step=t, node=int(sn[i]), shard=(int(chunk[i]), int(chunk[i]) + 1))
        comb = ops == _COMBINE
        if comb.any():
            d, c, sb = dn[comb], chunk[comb], sbits[comb]
            key = d * s.num_chunks + c
            order = np.argsort(key, kind="stable")
            key, d, c, sb = key[order], d[order], c[order], sb[order]
            first = np.r_[True, key[1:] != key[:-1]]
            grp = np.cumsum(first) - 1
            uniq_d, uniq_c = d[first], c[first]
            incoming = np.zeros((first.sum(), sb.shape[1]), dtype=np.uint64)
            np.bitwise_or.at(incoming, grp, sb)
            before = self.bits[uniq_d, uniq_c]
            n_in = np.bitwise_count(sb).sum(axis=1)
            total_in = np.bincount(grp, weights=n_in, minlength=len(uniq_d))
            after = before | incoming
            dup = np.bitwise_count(after).sum(axis=1) != np.bitwise_count(before).sum(axis=1) + total_in
            if dup.any():
                i = int(np.argmax(dup))
                node, ch = int(uniq_d[i]), int(uniq_c[i])
                twice = _members(before[i] & incoming[i]) or _members(incoming[i])
                raise ScheduleError(
                    f"step {t}: node {node} ({net.node_label(node)}) adds contributions of "
                    f"{_fmt_nodes(net, twice)} to chunk {ch} a second time (double counting)",
                    step=t, node=node, shard=(ch, ch + 1))
            self.bits[uniq_d, uniq_c] = after
            self.last[uniq_d, uniq_c] = t
        cp = ~comb
        if cp.any():
            d, c, sb = dn[cp], chunk[cp], sbits[cp]
            before = self.bits[d, c]
            lost = (before & ~sb).any(axis=1)
            if lost.any():
                i = int(np.argmax(lost))
                node, ch = int(d[i]), int(c[i])
                gone = _members(before[i] & ~sb[i])
                raise ScheduleError(
                    f"step {t}: a copy into node {node} ({net.node_label(node)}) chunk {ch} overwrites "
                    f"contributions of {_fmt_nodes(net, gone)} that the sender does not hold",
                    step=t, node=node, shard=(ch, ch + 1))
            if comb.any():
                both = np.isin(d * s.num_chunks + c, dn[comb] * s.num_chunks + chunk[comb])
                if both.any():
                    i = int(np.argmax(both))
                    raise ScheduleError(
                        f"step {t}: node {int(d[i])} gets a copy and a combine of chunk {int(c[i])} in one step",
                        step=t, node=int(d[i]), shard=(int(c[i]), int(c[i]) + 1))
            self.bits[d, c] = sb
            self.last[d, c] = t

    def _all_hold_their_group(self) -> bool:
        """All-reduce: every (node, chunk) holds exactly its group's nodes (one comparison, no target array)."""
        N, W = self.bits.shape[0], self.bits.shape[2]
        gid = _groups(self.s)
        n = np.arange(N)
        words = np.zeros((int(gid.max()) + 1, W), dtype=np.uint64)
        np.bitwise_or.at(words, (gid, n // 64), np.uint64(1) << (n % 64).astype(np.uint64))
        return bool(np.array_equal(self.bits, np.broadcast_to(words[gid][:, None, :], self.bits.shape)))

    def run(self, t_begin: int, t_end: int, engine: str = "numpy", *, hazard: np.ndarray | None = None) -> None:
        """Steps ``t_begin`` .. ``t_end - 1``; raise :class:`ScheduleError` at the first wrong one.

        ``engine="numba"``: the :func:`~scwork.collectives._kernels.track_steps`
        kernel updates the same bit sets with the same rules; at a wrong step it
        rolls the step back and :meth:`step` replays it, so the error message is
        the numpy tracker's. From the initial sets (a whole run), the faster
        :func:`~scwork.collectives._kernels.track_steps_forward` goes first; if
        it finds a wrong step, the sets are rebuilt up to that step for the replay.
        """
        s = self.s
        if engine != "numba":
            for t in range(t_begin, t_end):
                self.step(t, s.step_slice(t))
            return
        from scwork.collectives._kernels import track_steps, track_steps_forward

        offsets = np.searchsorted(s.step, np.arange(s.num_steps + 1)).astype(np.int64)
        columns = (np.ascontiguousarray(s.source, np.int64), np.ascontiguousarray(s.destination, np.int64),
                   np.ascontiguousarray(s.start, np.int64), np.ascontiguousarray(s.stop, np.int64),
                   np.ascontiguousarray(s.op == _COMBINE))
        t = t_begin
        if t_begin == 0 and self.fresh:
            hazard = _all_hazards(s) if hazard is None else hazard
            t = track_steps_forward(offsets, 0, t_end, *columns, np.ascontiguousarray(hazard, bool),
                                    self.bits, self.last)
            if t < t_end:        # the sets are partly updated by the wrong step: rebuild them to its start
                self.bits = _initial_bits(s)
                self.last = np.full(self.bits.shape[:2], -1, dtype=np.int64)
                track_steps(offsets, 0, t, *columns, self.bits, self.last)
        self.fresh = False
        while t < t_end:
            t = track_steps(offsets, t, t_end, *columns, self.bits, self.last)
            if t < t_end:
                self.step(t, s.step_slice(t))  # raises with the details
                t += 1

    def check_final(self) -> None:
        s = self.s
        net = s.network
        if s.collective == "all_reduce" and self._all_hold_their_group():
            return
        target, mask = _target_bits(s)
        wrong = (self.bits != target).any(axis=2) & mask
        if wrong.any():
            node, ch = (int(x) for x in np.argwhere(wrong)[0])
            have = set(_members(self.bits[node, ch]))
            want = set(_members(target[node, ch]))
            # Extend to the run of chunks wrong in the same way on that node.
            stop = ch + 1
            while stop < s.num_chunks and wrong[node, stop] and (self.bits[node, stop] == self.bits[node, ch]).all():
                stop += 1
            missing, extra = sorted(want - have), sorted(have - want)
            last = int(self.last[node, ch])
            what = []
            if missing:
                what.append(f"is missing contributions of {_fmt_nodes(net, missing)}")
            if extra:
                what.append(f"holds unexpected contributions of {_fmt_nodes(net, extra)}")
            raise ScheduleError(
                f"node {node} ({net.node_label(node)}) ends with shard [{ch}, {stop}) wrong: it "
                + " and ".join(what)
                + (f"; the last transfer into it was at step {last}" if last >= 0
                   else "; nothing was ever sent into it"),
                step=last if last >= 0 else None, node=node, shard=(ch, stop))


#: ``verify="auto"`` compares every node and element when nodes x elements is at
#: most this, and a sample above it.
FULL_VERIFY_MAX_CELLS = 1 << 22
#: Nodes drawn at random (besides every group's representative) under sampling.
SAMPLE_NODES = 32
#: Elements drawn at random (besides the first and last element of every shard) under sampling.
SAMPLE_ELEMENTS = 1024
_VERIFY = ("auto", "full", "sample")


def execute(schedule: Schedule, data, *, conflicts: str = "report", check: bool = True,
            track: bool = True, rtol: float | None = None, verify: str = "auto", seed: int = 0,
            engine: str = "auto", num_threads: int | None = None) -> Execution:
    """Run ``schedule`` on ``data`` (one vector per node) and check the result.

    Parameters
    ----------
    schedule : Schedule
    data : array_like, shape (num_nodes, L)
        Node ``n``'s vector is ``data[n]``; any length ``L`` (shards are near-equal
        element ranges). Integers are summed exactly in int64; float32 stays
        float32 (checked within a rounding bound), float64 stays float64.
        All-gather: node ``n`` contributes ``data[n]`` on its owned ranges only.
    conflicts : {"report", "raise", "ignore"}
        What to do with link conflicts (two messages on one directed link in one step).
    check : bool
        Compare the result with the reference; raise :class:`ScheduleError` if wrong.
    track : bool
        Track the contribution sets per chunk (finds the step where a schedule
        goes wrong). Always exact: every node and chunk, whatever ``verify`` says.
    rtol : float, optional
        For floats: allowed error relative to ``sum |x|`` (default: group size x
        machine epsilon, a bound for any summation order).
    verify : {"auto", "full", "sample"}
        Which values are compared with the exact reference sums. ``"full"``:
        every node and element. ``"sample"``: the first node of every group
        (its representative) plus ``SAMPLE_NODES`` (32) nodes drawn at random,
        on the first and last element of every shard plus ``SAMPLE_ELEMENTS``
        (1024) elements drawn at random; the reference sums are computed for
        those elements only. ``"auto"`` (default): ``"full"`` when nodes x
        elements is at most ``FULL_VERIFY_MAX_CELLS`` (4,194,304), else
        ``"sample"``. A schedule error moves whole shards, so it shows on the
        shard edges of the nodes it reaches; with ``track=True`` the
        contribution tracker also checks every node and shard exactly, so a
        wrong schedule is caught at its step even on nodes outside the sample.
        With ``track=False`` and sampling, a value wrong on one unsampled node
        only can go unnoticed: use ``verify="full"``.
    seed : int
        Seed of the random draws of ``verify="sample"`` (the same seed draws the
        same nodes and elements for the same network and length).
    engine : {"auto", "numba", "numpy"}
        How the schedule runs: ``"numba"`` kernels (whole schedule per
        cache-sized block of elements), or the ``"numpy"`` loop (one slice
        operation per transfer). ``"auto"``: numba from ``NUMBA_MIN_CELLS``
        (262,144) nodes x max(elements, shards). Both give bitwise-identical
        buffers: every element sees the same additions in the same order.
        With numba, an all-reduce of float32/float64/integer data is fused:
        one kernel pass per block checks the input, runs every transfer,
        checks that every node ends bitwise equal to the first node of its
        group and keeps that node's vector only; the returned ``buffers`` are
        then a read-only view of those vectors (see :class:`Execution`). Nodes
        that disagree send the run down the general path (full buffers).
    num_threads : int, optional
        Threads for the fused all-reduce (None: every available core): the
        blocks are shared out, and the tracker and the conflict check run on
        the second thread meanwhile. Other runs use one thread.

    Returns
    -------
    Execution
        A consistent all-reduce run by the numba engine returns the nodes'
        identical vectors as a read-only view (``buffers``); copy it to write.

    Raises
    ------
    ScheduleError
        Wrong result (names the step, node and shard), or a conflict with
        ``conflicts="raise"``.
    InputError
        Non-finite values, or sums that could overflow the working dtype
        (names the node and element).

    Examples
    --------
    >>> import numpy as np
    >>> from scwork.collectives import Network, rotated_pincer, execute
    >>> net = Network.ring(5)
    >>> data = np.arange(5 * 7).reshape(5, 7)
    >>> run = execute(rotated_pincer(net), data)
    >>> run.buffers[3].tolist() == data.sum(axis=0).tolist(), run.max_error, run.conflicts
    (True, 0.0, [])
    >>> run.verification
    'full'
    """
    rtol = _checked_options(conflicts, verify, num_threads, check, track, rtol)
    arr = _as_data(schedule, data, check=False)
    L = arr.shape[1]
    if schedule.compact and schedule.num_transfers <= _KEEP_COLUMNS_MAX_TRANSFERS:
        schedule.explicit()  # kept on the caller's schedule: the next execute() of it skips writing them out
    sched = schedule.with_size(L * arr.dtype.itemsize, arr.dtype.itemsize)
    bounds = sched.element_bounds(L)
    nodes, elements = _verified_nodes_and_elements(schedule, sched, bounds, L, verify, seed)
    # A large all-reduce checks its input inside the fused kernel (one pass over the data); others check it here.
    engine, fused_rows, sampled, side = _fused_all_reduce_if_possible(
        schedule, sched, arr, L, engine, conflicts, track, check, elements, num_threads)
    if fused_rows is None:
        _check_values(sched, arr)
    found, tracker, tracker_error = _conflicts_and_tracker(schedule, side, conflicts)
    if schedule.collective == "all_to_all":
        return _execute_all_to_all(sched, arr, found, check)
    engine = _choose_engine(sched, L, engine)
    if elements is None:
        initial, rows, row_of, cmask, abs_rows = _expected(sched, arr)
    else:
        initial, rows, row_of, cmask, abs_rows = _expected_at(sched, arr, elements,
                                                              None if fused_rows is None else sampled)
    wdt = _work_dtype(arr.dtype)
    tracker_ran = track and side is not None      # by the fused run, with its final check
    if tracker_error is not None:
        raise tracker_error
    if not tracker_ran:
        tracker = _Tracker(sched) if track else None  # may refuse a too large network before the buffers exist
    work, work_row, buffers = _working_buffers(sched, arr, wdt, bounds, initial, engine, fused_rows, row_of,
                                               None if tracker_ran else tracker)
    del initial
    if tracker is not None and check and not tracker_ran:
        tracker.check_final()
    max_error, consistent = _compare(sched, work, rows, row_of, cmask, abs_rows, wdt, bounds,
                                     check, rtol, tracker, nodes=nodes, elements=elements, work_row=work_row)
    return _execution(sched, buffers, rows, row_of, max_error, found, consistent, nodes, elements)


def _checked_options(conflicts, verify, num_threads, check, track, rtol) -> float | None:
    """Check :func:`execute`'s keyword options (in the order they are documented); return ``rtol`` as a float."""
    if not isinstance(conflicts, str) or conflicts not in ("report", "raise", "ignore"):
        raise ConfigError(f"conflicts must be 'report', 'raise' or 'ignore', got {shown(conflicts)}")
    if not isinstance(verify, str) or verify not in _VERIFY:
        raise ConfigError(f"verify must be 'auto', 'full' or 'sample', got {shown(verify)}")
    if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer))
                                    or num_threads < 1):
        raise ConfigError(f"num_threads must be None (every core) or an integer >= 1, got {shown(num_threads)}")
    for name, flag in (("check", check), ("track", track)):
        if not isinstance(flag, (bool, np.bool_)):      # "no" would be truthy
            raise ConfigError(f"{name} must be True or False, got {shown(flag)}")
    if rtol is not None:
        real = not isinstance(rtol, bool) and isinstance(rtol, (int, float, np.integer, np.floating))
        try:
            tolerance = float(rtol) if real else float("nan")
        except OverflowError:       # an int beyond float range
            tolerance = float("inf")
        if not 0 <= tolerance < float("inf"):
            raise ConfigError(f"rtol must be a finite number >= 0 (or None), got {shown(rtol)}")
        rtol = tolerance
    return rtol


def _verified_nodes_and_elements(schedule: Schedule, sched: Schedule, bounds, L: int, verify: str, seed: int):
    """The nodes and elements ``verify`` compares with the reference: ``(None, None)`` for every one."""
    if schedule.collective != "all_to_all" and (
            verify == "sample" or (verify == "auto" and schedule.network.num_nodes * L > FULL_VERIFY_MAX_CELLS)):
        from scwork.collectives._sample import sample_nodes_and_elements

        return sample_nodes_and_elements(_groups(sched), bounds, L, num_nodes=SAMPLE_NODES,
                                         num_elements_drawn=SAMPLE_ELEMENTS, seed=seed)
    return None, None


def _fused_all_reduce_if_possible(schedule: Schedule, sched: Schedule, arr: np.ndarray, L: int, engine: str,
                                  conflicts: str, track: bool, check: bool, elements, num_threads):
    """``(engine, fused_rows, sampled, side)``: the fused all-reduce's results, or Nones where it cannot run.

    ``engine`` is the one chosen for an all-reduce (else as given); ``side`` holds what
    the schedule-only checks found on the kernel's second thread.
    """
    fused_rows = sampled = side = None
    if schedule.collective == "all_reduce":
        engine = _choose_engine(sched, L, engine)
        hazard = _fusion_hazards(sched, arr, engine, track)
        if hazard is not None:
            # The checks that need only the schedule run on the kernel's second thread, meanwhile.
            fused_rows, sampled, side = _fused_all_reduce(
                sched, arr, _groups(sched), hazard, elements,
                _available_cores() if num_threads is None else num_threads,
                lambda: _schedule_checks(schedule, sched, conflicts, track, check, hazard))
    return engine, fused_rows, sampled, side


def _conflicts_and_tracker(schedule: Schedule, side, conflicts: str):
    """``(conflicts found, tracker, tracker error)``, from the fused run's second thread or found here.

    Raises the second thread's error, and the first conflict with ``conflicts="raise"``.
    """
    tracker = tracker_error = None
    if side is not None:
        checked, error = side
        if error is not None:        # e.g. too many conflicts to list
            raise error
        found, tracker, tracker_error = checked
    else:
        found = [] if conflicts == "ignore" else schedule.conflicts()
    if found and conflicts == "raise":
        _raise_conflict(schedule, found)
    return found, tracker, tracker_error


def _working_buffers(sched: Schedule, arr: np.ndarray, wdt, bounds, initial, engine: str, fused_rows, row_of,
                     tracker):
    """``(work, work_row, buffers)``: the fused run's group vectors, or the whole schedule run here."""
    if fused_rows is not None:
        if len(fused_rows) == 1:
            buffers = _node_rows(fused_rows, row_of)
        else:
            buffers = _Later(lambda: _node_rows(fused_rows, row_of))
        return fused_rows, row_of, buffers
    # The numba engine fills the buffers block by block from ``initial`` (no
    # separate copy of the whole array first).
    work = np.empty(arr.shape, dtype=wdt)
    _run(sched, work, tracker, bounds, initial=initial, engine=engine)
    return work, None, work


def _execution(sched: Schedule, buffers, rows, row_of, max_error, found, consistent, nodes, elements) -> Execution:
    """The :class:`Execution` of a checked run (link tables worked out only when first read)."""
    tables = _Later(lambda: _link_tables(sched))
    util, lbytes = _Later(lambda: tables.get()[0]), _Later(lambda: tables.get()[1])
    return Execution(schedule=sched, buffers=buffers, reference=rows, group=row_of, max_error=max_error,
                     conflicts=found, utilisation=util, link_bytes=lbytes, consistent=consistent,
                     verification="full" if elements is None else "sample",
                     verified_nodes=np.arange(sched.network.num_nodes) if nodes is None else nodes,
                     verified_elements=elements)


def _fusion_hazards(sched: Schedule, arr: np.ndarray, engine: str, track: bool):
    """The hazards of ``sched`` if the fused all-reduce can run it, else None.

    Not when the general path would refuse the run before allocating (too many
    cells, a too large tracker, too many transfers to write out): it then
    raises that error in its turn, after the input and conflict checks, as always.
    """
    if not _fusable(sched, arr, engine):
        return None
    try:
        _check_state_size(sched)
        if track:
            _check_tracker_size(sched)
        return _all_hazards(sched)
    except ConfigError:
        return None


def _schedule_checks(schedule: Schedule, sched: Schedule, conflicts: str, track: bool, check: bool, hazard):
    """What :func:`execute` checks on the schedule alone: ``(conflicts found, tracker, its error)``.

    The tracker runs over every step, then its final check (with ``check``);
    a :class:`ScheduleError` or :class:`ConfigError` of it is returned, for
    ``execute`` to raise in its turn (after the input and conflict errors).
    """
    found = [] if conflicts == "ignore" else schedule.conflicts()
    tracker = error = None
    if track:
        try:
            tracker = _Tracker(sched)
            tracker.run(0, sched.num_steps, "numba", hazard=hazard)
            if check:
                tracker.check_final()
        except (ScheduleError, ConfigError) as caught:
            error = caught
    return found, tracker, error


def _raise_conflict(schedule: Schedule, found: list) -> None:
    net = schedule.network
    t, link, m = found[0]
    sl = schedule.step_slice(t)
    on = schedule.link[sl] == link
    who = sorted({(int(a), int(b)) for a, b in zip(schedule.source[sl][on], schedule.destination[sl][on])})
    raise ScheduleError(
        f"step {t}: link {link} ({net.link_label(link)}) carries {m} messages "
        f"({', '.join(f'{net.node_label(a)}->{net.node_label(b)}' for a, b in who)}); "
        f"{len(found)} conflicting (step, link) pairs in total",
        step=t, node=who[0][0], link=link)


#: ``execute`` writes out (and keeps, on the caller's schedule) the transfer
#: columns of compact schedules up to this many transfers (about 16 MiB of columns).
_KEEP_COLUMNS_MAX_TRANSFERS = 1 << 18


def _expected_at(schedule: Schedule, arr: np.ndarray, elements: np.ndarray, columns: np.ndarray | None = None):
    """:func:`_expected` with the reference rows (and ``|x|`` sums) at ``elements`` only.

    ``columns``: ``arr[:, elements]`` if already gathered (by the fused kernel).
    """
    if schedule.collective == "all_gather":
        initial, rows, gid, mask, _ = _expected(schedule, arr)
        return initial, rows[:, elements], gid, mask, None
    _check_state_size(schedule)
    N, C = schedule.network.num_nodes, schedule.num_chunks
    ref_dtype = np.float64 if arr.dtype.kind == "f" else (np.complex128 if arr.dtype.kind == "c" else np.int64)
    gid = _groups(schedule)
    rows, abs_rows = _column_sums(np.take(arr, elements, axis=1) if columns is None else columns, gid, ref_dtype)
    mask = _owner_mask(schedule) if schedule.collective == "reduce_scatter" else np.ones((N, C), dtype=bool)
    return arr, rows, gid, mask, abs_rows


def _compare(s: Schedule, work, rows, row_of, cmask, abs_rows, wdt, bounds, check, rtol, tracker, *,
             nodes=None, elements=None, work_row=None):
    """Largest error where a value is expected; raise on the first wrong element.

    ``nodes``/``elements`` (sorted): compare only those (``rows`` and ``abs_rows``
    then hold the reference at ``elements`` only); None: every node and element.
    ``work_row``: node ``n``'s values are ``work[work_row[n]]`` (the fused
    all-reduce's one row per group, already found bitwise equal on every node);
    None: ``work[n]``.
    """
    if elements is not None:
        return _compare_sample(s, work, rows, row_of, cmask, abs_rows, wdt, bounds, check, rtol, tracker,
                               nodes, elements, work_row)
    exact = s.collective == "all_gather" or wdt.kind in "iu"
    factor = rtol if rtol is not None else s.group_size * (0.0 if exact else np.finfo(wdt).eps)
    max_error = 0.0
    consistent = True
    # All-reduce: nodes of a group should hold bitwise-identical vectors; then one
    # representative per group is compared with the reference.
    checked = np.zeros(len(row_of), dtype=bool)
    if work_row is not None:
        _, first = np.unique(row_of, return_index=True)
        checked[:] = True
        checked[first] = False
    elif s.collective == "all_reduce":
        for g in np.unique(row_of):
            m = np.flatnonzero(row_of == g)
            same = all(np.array_equal(work[i], work[m[0]]) for i in m[1:])
            consistent &= same
            if same:
                checked[m[1:]] = True
    for n in np.flatnonzero(~checked):
        runs = _mask_runs(cmask[n])
        for c0, c1 in runs:
            a, b = int(bounds[c0]), int(bounds[c1])
            if a == b:
                continue
            got = work[n if work_row is None else work_row[n], a:b]
            want = rows[row_of[n], a:b]
            diff = np.abs(got.astype(want.dtype) - want)
            if diff.size:
                max_error = max(max_error, float(diff.max()))
            if not check:
                continue
            tol = 0.0 if exact else factor * abs_rows[row_of[n], a:b] + np.finfo(wdt).tiny
            bad = diff > tol
            if np.any(bad):
                elem = a + int(np.argmax(bad))
                _raise_wrong_value(s, got[elem - a], rows[row_of[n], elem], int(n), elem, bounds, tracker)
    return max_error, consistent


def _compare_sample(s: Schedule, work, rows, row_of, cmask, abs_rows, wdt, bounds, check, rtol, tracker,
                    nodes, elements, work_row=None):
    """:func:`_compare` on ``nodes`` x ``elements`` (see :mod:`scwork.collectives._sample`)."""
    from scwork.collectives._sample import compare_sample

    exact = s.collective == "all_gather" or wdt.kind in "iu"
    factor = rtol if rtol is not None else s.group_size * (0.0 if exact else np.finfo(wdt).eps)
    got = work[np.ix_(nodes if work_row is None else work_row[nodes], elements)]
    want = rows[row_of[nodes]]
    expected_here = cmask[np.ix_(nodes, np.searchsorted(bounds, elements, side="right") - 1)]
    scale = None if exact else factor * abs_rows[row_of[nodes]]
    max_error, consistent, wrong = compare_sample(got, want, row_of[nodes], expected_here, scale,
                                                  np.finfo(wdt).tiny if not exact else 0.0,
                                                  all_reduce=s.collective == "all_reduce")
    if check and wrong is not None:
        i, j = wrong
        _raise_wrong_value(s, got[i, j], want[i, j], int(nodes[i]), int(elements[j]), bounds, tracker)
    return max_error, consistent


def _raise_wrong_value(s: Schedule, value, expected, n: int, elem: int, bounds, tracker):
    ch = int(np.searchsorted(bounds, elem, side="right") - 1)
    last = int(tracker.last[n, ch]) if tracker is not None else None
    raise ScheduleError(
        f"node {n} ({s.network.node_label(n)}) ends with a wrong value in shard "
        f"[{ch}, {ch + 1}) (element {elem}: {value!r}, expected {expected!r})"
        + (f"; last written at step {last}" if last is not None and last >= 0 else ""),
        step=last, node=n, shard=(ch, ch + 1))


def _mask_runs(row) -> list[tuple[int, int]]:
    """Maximal runs of True in a boolean row, as (start, stop) pairs."""
    d = np.diff(np.r_[0, row.astype(np.int8), 0])
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def _link_tables(s: Schedule):
    from scwork.collectives.cost import cost

    c = cost(s, per_link=True)
    return c["utilisation"], c["link_bytes"]


def _execute_all_to_all(s: Schedule, arr: np.ndarray, found, check: bool) -> Execution:
    net = s.network
    N, L = arr.shape
    if N * N * L > 5 * 10**7:
        raise ConfigError(
            f"all-to-all simulation keeps every origin's blocks on every node: {N}x{N}x{L} elements "
            "is too large; use a shorter vector"
        )
    C = s.num_chunks
    bounds = s.element_bounds(L)
    wdt = _work_dtype(arr.dtype)
    held = np.zeros((N, N, L), dtype=wdt)
    valid = np.zeros((N, N, C), dtype=bool)
    held[np.arange(N), np.arange(N)] = arr
    valid[np.arange(N), np.arange(N)] = True
    for t in range(s.num_steps):
        sl = s.step_slice(t)
        src, dst, org = s.source[sl], s.destination[sl], s.origin[sl]
        c0, c1 = s.start[sl], s.stop[sl]
        payloads = []
        for i in range(len(src)):
            if not valid[src[i], org[i], c0[i]:c1[i]].all():
                raise ScheduleError(
                    f"step {t}: node {int(src[i])} ({net.node_label(int(src[i]))}) forwards block "
                    f"[{int(c0[i])}, {int(c1[i])}) of node {int(org[i])} which it does not hold",
                    step=t, node=int(src[i]), shard=(int(c0[i]), int(c1[i])))
            payloads.append(held[src[i], org[i], bounds[c0[i]]:bounds[c1[i]]].copy())
        for i in range(len(src)):
            held[dst[i], org[i], bounds[c0[i]]:bounds[c1[i]]] = payloads[i]
            valid[dst[i], org[i], c0[i]:c1[i]] = True
    node, c0, c1 = s.owners
    received = [None] * N
    max_error = 0.0
    for n, a, b in zip(node.tolist(), c0.tolist(), c1.tolist()):
        e0, e1 = bounds[a], bounds[b]
        if check and not valid[n, :, a:b].all():
            missing = [o for o in range(N) if not valid[n, o, a:b].all()]
            raise ScheduleError(
                f"node {n} ({net.node_label(n)}) never receives its block [{a}, {b}) from "
                f"{_fmt_nodes(net, missing)}", node=n, shard=(a, b))
        got = held[n, :, e0:e1]
        want = arr[:, e0:e1]
        if got.size:
            max_error = max(max_error, float(np.abs(got.astype(np.float64) - want).max()))
        if check and not np.array_equal(got, want.astype(wdt)):
            raise ScheduleError(f"node {n} holds wrong data for block [{a}, {b})", node=n, shard=(a, b))
        received[n] = got.reshape(-1).copy()
    util, lbytes = _link_tables(s)
    return Execution(schedule=s, buffers=held[np.arange(N), np.arange(N)], reference=arr,
                     group=np.zeros(N, dtype=np.int64),
                     max_error=max_error, conflicts=found, utilisation=util, link_bytes=lbytes,
                     received=received)


def frames(schedule: Schedule, data=None, *, max_cells: int = 20_000_000):
    """Step-by-step state of a schedule, for drawing it.

    Parameters
    ----------
    schedule : Schedule
    data : array_like, optional
        One vector per node (default: small random integers, one element per chunk).
    max_cells : int
        Refuse schedules whose (frames x nodes x chunks) state exceeds this.

    Returns
    -------
    xarray.Dataset
        Dimensions ``frame`` (frame f = state before step f; the last one is the
        final state), ``step``, ``node``, ``shard`` (the chunks), ``link``,
        ``transfer``. Variables:

        - ``contributions`` (frame, node, shard): how many nodes' data the node's
          copy of each shard sums (all-gather: 1 once it holds the owner's data);
        - ``status`` (frame, node, shard): 0 empty, 1 own data only, 2 partial
          sum, 3 complete (what the collective must leave there);
        - ``step_time``, ``cumulative_time`` (step, s); ``link_bytes`` and
          ``utilisation`` (step, link), for the schedule's ``nbytes``;
        - ``shard_color`` and ``shard_bytes`` (shard);
        - the transfers (transfer: step, source, destination, link, shard_start,
          shard_stop, bytes, op, color, phase);
        - the drawing layout of :meth:`Network.layout` (x, y, z per node, link ends).

    Examples
    --------
    >>> from scwork.collectives import Network, pincer, frames
    >>> f = frames(pincer(Network.ring(4)))
    >>> f.status.sel(shard=0).values.tolist()  # A B C D, before each step and at the end
    [[1, 1, 1, 1], [1, 1, 2, 2], [1, 1, 3, 3], [3, 3, 3, 3]]
    """
    import xarray as xr

    if schedule.collective == "all_to_all":
        raise ConfigError("frames() draws reductions and gathers; all-to-all has no partial sums to show")
    s = schedule
    N, C, S = s.network.num_nodes, s.num_chunks, s.num_steps
    if isinstance(max_cells, bool) or not isinstance(max_cells, (int, np.integer)) or max_cells < 0:
        raise ConfigError(f"max_cells must be an integer >= 0, got {shown(max_cells)}")
    if (S + 1) * N * C > max_cells:
        raise ConfigError(
            f"{S + 1} frames x {N} nodes x {C} chunks is too much state to record; "
            "use a smaller network (or raise max_cells)"
        )
    if data is None:
        rng = np.random.default_rng(0)
        data = rng.integers(-9, 10, size=(N, C))
    arr = _as_data(s, data)
    sched = s.with_size(arr.shape[1] * arr.dtype.itemsize, arr.dtype.itemsize)
    initial = _expected(sched, arr)[0]
    work = np.array(initial, dtype=_work_dtype(arr.dtype), copy=True)
    tracker = _Tracker(sched)
    target, tmask = _target_bits(sched)
    own_bit = _initial_bits(sched) if s.collective != "all_gather" else None
    counts = np.zeros((S + 1, N, C), dtype=np.int32)
    status = np.zeros((S + 1, N, C), dtype=np.int8)

    from scwork.collectives._frame_status import FrameRecorder

    # Each frame is the previous one with the cells its step delivered to recomputed.
    recorder = FrameRecorder(sched, counts, status, target, tmask, own_bit, s.collective == "all_reduce")
    recorder.first(tracker.bits)
    bounds = sched.element_bounds(arr.shape[1])
    _run(sched, work, tracker, bounds, record=lambda t: recorder.after_step(t, tracker.bits), engine="numba")
    tracker.check_final()
    from scwork.collectives.cost import cost

    c = cost(sched, nbytes=s.nbytes, per_link=True)
    tds = s.to_dataset()
    ds = xr.Dataset(
        {
            "contributions": (("frame", "node", "shard"), counts,
                              {"long_name": "contributions summed in the node's copy of the shard",
                               "units": "nodes"}),
            "status": (("frame", "node", "shard"), status,
                       {"long_name": "state of the node's copy of the shard", "units": "",
                        "flag_values": [0, 1, 2, 3],
                        "flag_meanings": "empty own_data_only partial_sum complete"}),
            "step_time": c["step_time"], "cumulative_time": c["cumulative_time"],
            "link_bytes": c["link_bytes"], "utilisation": c["utilisation"],
            "values": (("node", "element"), work, {"long_name": "final buffers", "units": "1"}),
        },
        coords={"frame": np.arange(S + 1), "step": np.arange(S), "node": np.arange(N),
                "shard": np.arange(C), "link": np.arange(s.network.num_links)},
        attrs={"schedule": s.name, "collective": s.collective, "network": s.network.name,
               "frame_meaning": "frame f is the state before step f; frame num_steps is the final state",
               "nbytes": s.nbytes, "total_time_s": float(c.total_time)},
    )
    shard_color = np.full(C, -1, dtype=np.int64)
    for c in np.unique(s.color):
        sel = s.color == c
        diff = np.zeros(C + 1, dtype=np.int64)
        np.add.at(diff, s.start[sel], 1)
        np.add.at(diff, s.stop[sel], -1)
        shard_color[np.cumsum(diff)[:C] > 0] = int(c)
    nb = s.element_bounds() * s.itemsize
    # Added in one assign (one alignment): one ds[name] = ... per variable cost a
    # merge each, most of the time of a frames() call on an 8x8 torus.
    extra = {
        "shard_color": ("shard", shard_color, {"long_name": "color whose data the shard is (-1: never moved)",
                                               "units": ""}),
        "shard_bytes": ("shard", np.diff(nb), {"units": "B", "long_name": f"shard size for nbytes={s.nbytes}"}),
    }
    for name in ("step", "source", "destination", "link", "shard_start", "shard_stop", "bytes",
                 "op", "color", "phase"):
        key = f"transfer_{name}" if name in ("step", "link") else name
        extra[key] = tds[name].rename(key)
    lay = s.network.layout().drop_vars(["node", "link"])
    for name in lay.data_vars:
        extra[f"layout_{name}" if name in ds or name in extra else name] = lay[name]
    ds = ds.assign(extra)
    ds["cumulative_time"].attrs["units"] = "s"
    return ds
