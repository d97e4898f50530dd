"""Numba kernels of the sharding engine, each beside a slow, obvious numpy reference.

Nothing compiles at import: ``@jit`` (``numba.njit(cache=True, nogil=True)``)
compiles on first call, or in :func:`warmup`. :mod:`scwork.sharding.engine`
imports this module lazily. With ``NUMBA_DISABLE_JIT=1`` the kernels run as plain
Python (slowly), which the tests check once.

Data model
----------
One *group* is the set of features of a stack that look up the same table (one
feature per table without feature stacking). The stack's input is cut into
``nsl = G * S`` slices, one per (device, source SparseCore); slice ``sl = d * S + s``
holds, for every feature ``k`` of the stack (stack order), the samples
``[sl * n, (sl + 1) * n)`` of that feature, ``n = B / (G * S)``. Inside the slice,
feature ``k``'s sample ``sl * n + i`` is local row ``k * n + i`` (feature stacking of
[jte] table_stacking.py, with its default ``kSplitThenStack``). Every id ``x`` of table
rotation ``col_shift`` becomes one 64-bit key

    ``key = u << 32 | R'``,  ``u = p << qbits | q``,  ``R' = sl << lbits | (k * n + i)``

with ``p = (x + col_shift) % P`` (destination partition), ``q = x // P`` (row in the
table's shard), ``qbits = bit_length((vocab - 1) // P)``, ``lbits = bit_length(K * n - 1)``
(``K``: features in the stack). :func:`sort_group` builds the keys in increasing
``R'`` order and radix-sorts them on ``u`` (stable), carrying each id's gain, so the
sorted keys run partition by partition, then by local id, then by slice and local
row. One walk over them with shifts only (:func:`stack_slices`, slice by slice)
counts everything: equal ``(u, R')`` neighbours are per-sample duplicates, a new ``(u, slice)`` is a new
distinct id of stream ``(slice, partition)``, a new ``u`` a new distinct id of the
whole batch (the naive view). Groups are scanned in stack order (increasing
``row_offset_in_shard``), so every ``(slice, partition)`` stream is visited in
(local id, row) order exactly as ``SortAndGroupCooTensorsPerLocalDevice`` of
jax-tpu-embedding (``jax_tpu_embedding/sparsecore/lib/core/sort_and_group_coo_tensors_impl.h``,
``coo_format.h``) sorts its keys ``[partition, local id, index]``. ``u < 2**32`` and
``R' < 2**32`` (``K * B < 2**31`` is checked by the caller); keys with ``u >= 2**31``
are negative int64, so fields are always read with masks.

Slice-major kernels (what the engine runs)
------------------------------------------
Slices are independent ([jte] preprocess_sparse_dense_matmul_input), so the engine sorts each (group, slice) run on its
own (:func:`sort_slice`: the same keys as :func:`sort_group` restricted to the
slice, in the same order; a run is small, so its radix passes stay in cache) and
cuts every stack into slice ranges that threads run in parallel
(:func:`stack_slices`). Inside a slice, the ``(slice, partition)`` stream is the
partition's part of each group's run in stack order; :func:`stack_slices` walks
them partition-major and writes the CSR sequentially as it counts. The naive view
(distinct ids per partition over the whole batch) needs the union over slices: each
(group, slice) run appends its sorted distinct ids to a list, which
:func:`scwork.sharding._naive_kernels.naive_from_slice_lists` merges per partition
range (the kernels can also set bits in a bitmap over ``u``; the engine uses the
lists, whose memory is linear in the ids whatever the vocabulary and thread count).

Hot loops index with unsigned integers (``_U``): numba then leaves out the
negative-index wraparound code of each array access (measurably faster here).

Kernels
-------
sort_group
    Builds a group's keys (computing partition and shard row once per id) and
    LSD-radix-sorts them on ``u``, gains carried along (all slices at once; used by
    :mod:`scwork.sharding.minibatch`).
sort_slice, count_slice
    One (group, slice) run: sorted as by :func:`sort_group`; counted (branch-free)
    with its naive-view bits or list.
stack_slices
    A range of slices of one stack: sorts, counts, prefix cut, CSR writes, padding,
    row pointers, dropped pairs.
compact_slices
    Moves slices written at a provisional stride to their final ``sl * C`` in place.
group_tables
    A call's per-(group, slice) counts and their offsets, maxima and per-stack and
    per-part sums from its per-(feature, slice) counts (the jobs' set-up).
"""

from __future__ import annotations

import numpy as np

from scwork._jit import jit
from scwork._jit import round_up as _round_up
from scwork._rounding import round_up

__all__ = [
    "sort_group",
    "sort_group_reference",
    "sort_slice",
    "sort_slice_reference",
    "count_slice",
    "count_slice_reference",
    "stack_slices",
    "stack_slices_reference",
    "compact_slices",
    "compact_slices_reference",
    "group_tables",
    "group_tables_reference",
    "PAD_ID",
    "warmup",
]


#: Padding value of CSR embedding and sample ids (``INT_MAX`` in the reference).
PAD_ID = 2**31 - 1
_LOW32 = 0xFFFFFFFF
_NO_LIMIT = 2**62
# Index type of hot loops: numba adds negative-index wraparound code to every array
# access with a signed index, not with an unsigned one (all indices here are >= 0).
_U = np.uint64


# --------------------------------------------------------------------------------------
# sort_group
# --------------------------------------------------------------------------------------
@jit(error_model="numpy")
def _radix_plan(P, qbits):
    """``(pbits, npass, dbits)``: LSD passes of at most 11 bits over ``u``'s ``pbits + qbits`` bits."""
    pbits = 0
    while (np.int64(1) << pbits) < P:
        pbits += 1
    bits = pbits + qbits
    npass = (bits + 10) // 11
    if npass < 1:
        npass = 1
    dbits = (bits + npass - 1) // npass
    if dbits < 1:
        dbits = 1
    return pbits, npass, dbits


@jit(error_model="numpy")
def _build_keys(ids, splits, weights, has_w, feat_rows, feat_k, combiner, n, s0, s1, vocab, P, col_shift, qbits,
                lbits, want_gains, bk, bg, hist, dmask):
    """Keys (and gains) of slices ``[s0, s1)`` of one group in increasing ``R'`` order.

    Writes ``bk[:m]`` (``bg[:m]``) and adds the histogram of digit 0 of ``u`` into
    ``hist[:dmask + 1]``. Returns ``(m, oov, bad)`` as :func:`sort_group`; on an
    out-of-vocabulary id it stops at once (``m = 0``).
    """
    nf = feat_rows.shape[0]
    B = splits.shape[1] - 1
    pbits = 0
    while (np.int64(1) << pbits) < P:
        pbits += 1
    invP = 1.0 / P
    pow2 = (np.int64(1) << pbits) == P
    pmask = P - 1
    m = 0
    bad = -1
    for sl in range(s0, s1):
        for a in range(nf):
            f = feat_rows[a]
            k = feat_k[a]
            wf = has_w[f] != 0
            for i in range(n):
                b = sl * n + i
                Rp = (np.int64(sl) << lbits) | (k * n + i)
                j0 = splits[f, b]
                j1 = splits[f, b + 1]
                div = np.float32(1.0)
                if want_gains and combiner != 0:
                    if wf:
                        acc = np.float32(0.0)
                        if combiner == 1:
                            for j in range(j0, j1):
                                acc += weights[j]
                            div = acc
                        else:
                            for j in range(j0, j1):
                                # fused multiply-add, as the library's C++ build does
                                # (w * w is exact in float64; one rounding to float32)
                                wj = np.float64(weights[j])
                                acc = np.float32(np.float64(acc) + wj * wj)
                            div = np.float32(np.sqrt(acc))
                    elif combiner == 1:
                        div = np.float32(j1 - j0)
                    else:
                        div = np.float32(np.sqrt(np.float32(j1 - j0)))
                    if div == 0 and j1 > j0:
                        if bad < 0:
                            bad = f * B + b
                        div = np.float32(np.nan)   # gains of this sample are meaningless
                if not want_gains and pow2:
                    # the common case in its own tight loop (unsigned indices: no
                    # negative-index wraparound code in numba's array accesses)
                    for j in range(j0, j1):
                        x = ids[_U(j)]
                        if x >= vocab:
                            return 0, j, -1
                        p = (x & pmask) + col_shift
                        p -= P * np.int64(p >= P)
                        u = (p << qbits) | (x >> pbits)
                        bk[_U(m)] = (u << 32) | Rp
                        hist[_U(u & dmask)] += 1
                        m += 1
                    continue
                for j in range(j0, j1):
                    x = ids[j]
                    if x >= vocab:
                        return 0, j, -1
                    if pow2:                                # P = 2**pbits: a shift
                        q = x >> pbits
                    else:
                        q = np.int64((x + 0.5) * invP)      # exact: x < 2**31
                    p = x - q * P + col_shift
                    p -= P * np.int64(p >= P)
                    u = (p << qbits) | q
                    bk[m] = (u << 32) | Rp
                    if want_gains:
                        if wf:
                            bg[m] = weights[j] / div
                        else:
                            bg[m] = np.float32(1.0) / div
                    hist[u & dmask] += 1
                    m += 1
    return m, -1, bad


@jit(error_model="numpy")
def _radix_scatter(sk, sg, dk, dg, m, hist, base, shift, dmask, nbase, want_gains):
    """One stable LSD pass on digit ``(u >> shift) & dmask``: ``sk -> dk`` (gains along).

    ``hist[base:base + dmask + 1]`` holds the exclusive prefix sums of the digit. With
    ``nbase >= 0`` the histogram of the next digit (``shift + dbits``) is counted into
    ``hist[nbase:]`` on the way and turned into prefix sums.
    """
    nb = dmask + 1
    dbits = 0
    while (np.int64(1) << dbits) < nb:
        dbits += 1
    # unsigned indices: no negative-index wraparound code in the hot loops
    if nbase >= 0:
        for i in range(m):
            v = sk[_U(i)]
            uu = (v >> 32) & _LOW32
            t = _U(base + ((uu >> shift) & dmask))
            hist[_U(nbase + ((uu >> (shift + dbits)) & dmask))] += 1
            pos = hist[t]
            hist[t] = pos + 1
            dk[_U(pos)] = v
            if want_gains:
                dg[_U(pos)] = sg[_U(i)]
        tot = 0
        for t in range(nb):
            cc = hist[nbase + t]
            hist[nbase + t] = tot
            tot += cc
    else:
        for i in range(m):
            v = sk[_U(i)]
            t = _U(base + ((((v >> 32) & _LOW32) >> shift) & dmask))
            pos = hist[t]
            hist[t] = pos + 1
            dk[_U(pos)] = v
            if want_gains:
                dg[_U(pos)] = sg[_U(i)]


@jit(error_model="numpy")
def sort_group(ids, splits, weights, has_w, feat_rows, feat_k, combiner, n, nsl, K, vocab, P, col_shift, qbits,
               lbits, want_gains, keys, gains, tmp_keys, tmp_gains, hist):
    """Build the keys of one group and radix-sort them, stably; carry gains.

    Parameters
    ----------
    ids : int64[:]
        Flat ids of every feature of the batch.
    splits : int64[F, B + 1]
        Absolute offsets of each feature's samples in ``ids``.
    weights : float32[:]
        Flat weights aligned with ``ids`` (may be empty when ``has_w`` is all 0).
    has_w : int8[F]
        1 where a feature has weights.
    feat_rows, feat_k : int64[:]
        The group's features (rows of ``splits``) and their positions in the stack.
    combiner : int
        0 sum, 1 mean, 2 sqrtn.
    n, nsl, K : int
        Samples per slice, slices (``G * S``), features in the stack.
    vocab, P, col_shift : int
        Vocabulary of the group's table, partitions, the table's rotation.
    qbits, lbits : int
        ``bit_length((vocab - 1) // P)`` and ``bit_length(K * n - 1)``: key layout.
    want_gains : bool
        Compute and carry gains (CSR); otherwise ``gains`` is untouched.
    keys, gains : int64[:], float32[:]
        Output, at least the group's id count long.
    tmp_keys, tmp_gains, hist : scratch of the same lengths, and int64[>= 3 * 2048].

    Returns
    -------
    m : int
        Number of keys written.
    oov : int
        Flat position in ``ids`` of the first id >= ``vocab`` met (-1 if none; then
        nothing is sorted).
    bad : int
        ``f * B + b`` of the first sample whose mean/sqrtn divisor is 0 (-1 if none).
    """
    _, npass, dbits = _radix_plan(P, qbits)
    nb = np.int64(1) << dbits
    dmask = nb - 1
    for t in range(npass * nb):
        hist[t] = 0
    # build: keys in (slice, feature, row) order, i.e. increasing R', and the histogram
    # of digit 0 (digit ps + 1 is counted during pass ps); the build buffer is chosen
    # so that the last pass lands in ``keys``
    if npass % 2 == 0:
        m, oov, bad = _build_keys(ids, splits, weights, has_w, feat_rows, feat_k, combiner, n, 0, nsl, vocab, P,
                                  col_shift, qbits, lbits, want_gains, keys, gains, hist, dmask)
    else:
        m, oov, bad = _build_keys(ids, splits, weights, has_w, feat_rows, feat_k, combiner, n, 0, nsl, vocab, P,
                                  col_shift, qbits, lbits, want_gains, tmp_keys, tmp_gains, hist, dmask)
    if oov >= 0:
        return 0, oov, -1
    tot = 0
    for t in range(nb):
        c = hist[t]
        hist[t] = tot
        tot += c
    # LSD passes on the digits of u (stable: equal u keep their R order)
    for ps in range(npass):
        nbase = (ps + 1) * nb if ps + 1 < npass else -1
        if (npass - ps) % 2 == 1:
            _radix_scatter(tmp_keys, tmp_gains, keys, gains, m, hist, ps * nb, ps * dbits, dmask, nbase, want_gains)
        else:
            _radix_scatter(keys, gains, tmp_keys, tmp_gains, m, hist, ps * nb, ps * dbits, dmask, nbase, want_gains)
    return m, -1, bad


def _keys_reference(ids, splits, weights, has_w, feat_rows, feat_k, combiner, n, nsl, K, P, col_shift, qbits,
                    lbits, first_slice=0):
    """Unsorted (u, R', gain) arrays of slices ``[first_slice, nsl)`` of one group.

    Also returns the first zero-divisor sample.
    """
    B = splits.shape[1] - 1
    us, Rs, gs = [], [], []
    bad = -1
    for sl in range(first_slice, nsl):
        for a in range(len(feat_rows)):
            f, k = int(feat_rows[a]), int(feat_k[a])
            for i in range(n):
                b = sl * n + i
                j0, j1 = int(splits[f, b]), int(splits[f, b + 1])
                x = ids[j0:j1].astype(np.int64)
                us.append(((((x + col_shift) % P) << qbits) | (x // P)).astype(np.int64))
                Rs.append(np.full(x.size, (sl << lbits) | (k * n + i), np.int64))
                w = weights[j0:j1] if has_w[f] else np.ones(x.size, np.float32)
                if combiner == 0:
                    div = np.float32(1.0)
                elif combiner == 1:
                    div = np.float32(0.0)
                    for v in w:  # sequential float32 sum, as the C++ reference
                        div = np.float32(div + v)
                else:
                    acc = np.float32(0.0)
                    for v in w:  # fused multiply-add: w * w exact in float64, one rounding
                        acc = np.float32(np.float64(acc) + np.float64(v) * np.float64(v))
                    div = np.float32(np.sqrt(acc))
                if div == 0 and x.size:
                    bad = f * B + b if bad < 0 else bad
                    div = np.float32(np.nan)
                gs.append((w / div).astype(np.float32))
    cat = np.concatenate
    return (cat(us) if us else np.zeros(0, np.int64), cat(Rs) if Rs else np.zeros(0, np.int64),
            cat(gs) if gs else np.zeros(0, np.float32), bad)


def sort_group_reference(ids, splits, weights, has_w, feat_rows, feat_k, combiner, n, nsl, K, vocab, P,
                         col_shift, qbits, lbits, want_gains, keys, gains, tmp_keys, tmp_gains, hist):
    """Numpy reference of :func:`sort_group` (same arguments and results)."""
    del tmp_keys, tmp_gains, hist
    for sl in range(nsl):            # first out-of-vocabulary id in build order
        for a in range(len(feat_rows)):
            f = int(feat_rows[a])
            seg = ids[splits[f, sl * n]:splits[f, (sl + 1) * n]]
            if seg.size and seg.max() >= vocab:
                return 0, int(splits[f, sl * n] + np.flatnonzero(seg >= vocab)[0]), -1
    u, R, g, bad = _keys_reference(ids, splits, weights, has_w, feat_rows, feat_k, combiner if want_gains else 0,
                                   n, nsl, K, P, col_shift, qbits, lbits)
    order = np.lexsort((R, u))
    m = u.size
    keys[:m] = ((u[order].astype(np.uint64) << np.uint64(32)) | R[order].astype(np.uint64)).view(np.int64)
    if want_gains:
        gains[:m] = g[order]
    return m, -1, (bad if want_gains else -1)


def decode_keys(keys, qbits, lbits):
    """``(partition, id // P, slice, local row)`` of keys (numpy helper)."""
    k = np.asarray(keys, np.int64)
    u = (k >> 32) & _LOW32
    R = k & _LOW32
    return u >> qbits, u & ((1 << qbits) - 1), R >> lbits, R & ((1 << lbits) - 1)


# --------------------------------------------------------------------------------------
# slice-major kernels: what the engine runs (one task = slices [s0, s1) of one stack)
# --------------------------------------------------------------------------------------
@jit(error_model="numpy")
def sort_slice(ids, splits, weights, has_w, feat_rows, feat_k, combiner, n, sl, vocab, P, col_shift, qbits, lbits,
               want_gains, keys, gains, a_keys, a_gains, b_keys, b_gains, hist):
    """Build and radix-sort the keys of slice ``sl`` of one group (see :func:`sort_group`).

    The same keys, in the same order, as :func:`sort_group` gives for that slice
    alone. A slice is small (``n`` samples of the group's features), so its passes
    run in cache. Builds into ``a_*``, ping-pongs through ``b_*`` and writes the
    last pass into ``keys`` / ``gains`` (which must not alias the scratch).

    Returns ``(m, oov, bad)`` as :func:`sort_group`.
    """
    _, npass, dbits = _radix_plan(P, qbits)
    nb = np.int64(1) << dbits
    dmask = nb - 1
    for t in range(npass * nb):
        hist[t] = 0
    m, oov, bad = _build_keys(ids, splits, weights, has_w, feat_rows, feat_k, combiner, n, sl, sl + 1, vocab, P,
                              col_shift, qbits, lbits, want_gains, a_keys, a_gains, hist, dmask)
    if oov >= 0:
        return 0, oov, -1
    tot = 0
    for t in range(nb):
        c = hist[t]
        hist[t] = tot
        tot += c
    cur = 0                                       # 0: data in a_*, 1: in b_*
    for ps in range(npass):
        nbase = (ps + 1) * nb if ps + 1 < npass else -1
        if ps == npass - 1:
            if cur == 0:
                _radix_scatter(a_keys, a_gains, keys, gains, m, hist, ps * nb, ps * dbits, dmask, nbase, want_gains)
            else:
                _radix_scatter(b_keys, b_gains, keys, gains, m, hist, ps * nb, ps * dbits, dmask, nbase, want_gains)
        elif cur == 0:
            _radix_scatter(a_keys, a_gains, b_keys, b_gains, m, hist, ps * nb, ps * dbits, dmask, nbase, want_gains)
            cur = 1
        else:
            _radix_scatter(b_keys, b_gains, a_keys, a_gains, m, hist, ps * nb, ps * dbits, dmask, nbase, want_gains)
            cur = 0
    return m, -1, bad


@jit(error_model="numpy")
def count_slice(keys, m, P, qbits, c0, pairs, distinct, use_bitmap, bitmap, bm0, ulist, ul0):
    """Count one sorted (group, slice) run; branch-free.

    ``pairs[c0 + p]`` += ids after per-sample dedup, ``distinct[c0 + p]`` += distinct
    ids (every key of the run has the same slice, so a new ``u`` is a new distinct id
    of its stream). For the naive whole-batch view each id ``u`` is either set in
    ``bitmap`` (bit ``u`` of the words from ``bm0``: keys are sorted by ``u``, so the
    words are visited in order) or, when ``use_bitmap`` is false, each distinct ``u``
    is appended to ``ulist`` from ``ul0``. Returns the number appended.
    """
    prev_u = np.int64(-1)
    prev_R = np.int64(-1)
    nu = 0
    # One copy of the loop per naive-view mode: the mode test stays out of the hot loop
    # (this is the innermost loop of compute_stats).
    if use_bitmap:
        for i in range(m):
            v = keys[_U(i)]
            u = (v >> 32) & _LOW32
            R = v & _LOW32
            newx = np.int64(u != prev_u)
            newr = newx | np.int64(R != prev_R)
            c = _U(c0 + (u >> qbits))
            distinct[c] += newx
            pairs[c] += newr
            bitmap[_U(bm0 + (u >> 6))] |= np.int64(1) << (u & 63)
            prev_u = u
            prev_R = R
    else:
        for i in range(m):
            v = keys[_U(i)]
            u = (v >> 32) & _LOW32
            R = v & _LOW32
            newx = np.int64(u != prev_u)
            newr = newx | np.int64(R != prev_R)
            c = _U(c0 + (u >> qbits))
            distinct[c] += newx
            pairs[c] += newr
            ulist[_U(ul0 + nu)] = u               # overwritten unless new
            nu += newx
            prev_u = u
            prev_R = R
    return nu


@jit(error_model="numpy")
def _partition_bounds(keys, m, qbits, P, bounds, b0):
    """``bounds[b0 + p]``: first index of ``keys[:m]`` (sorted by ``u``) in partition ``>= p``."""
    bounds[b0] = 0
    bounds[b0 + P] = m
    lo = 0
    for p in range(1, P):
        hi = m
        while lo < hi:
            mid = (lo + hi) >> 1
            if (((keys[mid] >> 32) & _LOW32) >> qbits) < p:
                lo = mid + 1
            else:
                hi = mid
        bounds[b0 + p] = lo


# Kept whole although over 120 lines: one loop nest over slices and groups that numba must
# compile as one, with no call overhead in the hot loop.
@jit(inline="always")
def entry_gain(mode, sg, rowgain, one, i, Rr):
    """The gain of sorted id ``i``: its own weight (mode 2), its row's (mode 1), or one."""
    if mode == 2:
        return sg[_U(i)]
    if mode == 1:
        return rowgain[_U(Rr)]
    return one


@jit(inline="always")
def write_csr_entry(emb, smp, gout, pos, u, Rr, qmask, roff, lmask, gain, new_entry):
    """Write CSR slot ``pos``: the row (local row plus the stack's row offset), the sample, the gain.

    Repeats of an id within one sample land on the same slot (``new_entry`` false) and
    add their gains, as the library's per-sample dedup combines them.
    """
    emb[pos] = (u & qmask) + roff
    smp[pos] = Rr & lmask
    gout[pos] = gain if new_entry else gout[pos] + gain


@jit(error_model="numpy")
def stack_slices(ids, splits, weights, has_w, combiner, n, P, lbits,
                 gptr, feat_rows, feat_k, g_vocab, g_shift, g_qbits, g_rowoff, g_mode, g_bitmap, g_bmoff, g_uloff,
                 g_sloff, s0, s1, keep_all, max_ids, max_uniq, allow_cut,
                 sk, sg, a_keys, a_gains, b_keys, b_gains, hist, gm, bounds,
                 pairs, distinct, kept, dropped, used, g_oov, g_bad, bitmap, ulist, ul_cnt,
                 write, cap, base, R, rowgain, emb, smp, gout, row_pointers, drops, drop_g):
    """Statistics, prefix cut and CSR of slices ``[s0, s1)`` of one stack.

    Slices are independent ([jte] preprocess_sparse_dense_matmul_input: one (device, source SC) slice at a time), so
    tasks over disjoint slice ranges of a stack can run in parallel: each writes
    only its own slices' entries of the outputs (and its own ``bitmap`` row or
    ``ulist`` regions). Per slice, every group (table) of the stack is sorted with
    :func:`sort_slice`; then

    - without ``write``: each run is counted at once by :func:`count_slice` (while
      it is in cache); with limits exceeded and ``allow_cut``, a walk computes the
      prefix cut (``kept``, ``dropped``);
    - with ``write``: one partition-major walk over the groups' runs (stack order
      inside a partition: the ``(slice, partition)`` stream of [jte] preprocess_sparse_dense_matmul_input) counts, cuts
      and writes the CSR at once, partition ``p`` starting at ``round_up(previous
      end, 8)`` from ``base[sl]``, so the writes are sequential.

    Groups: ``g`` has features ``feat_rows[gptr[g]:gptr[g + 1]]`` (positions
    ``feat_k``), vocabulary ``g_vocab``, rotation ``g_shift``, key bits ``g_qbits``,
    ``row_offset_in_shard`` ``g_rowoff``, gain mode ``g_mode`` (as
    :func:`scan_group_reference`: 2 weights carried through the sort, 1 ``rowgain[R']``, 0
    one), naive view in the bitmap (``g_bitmap``, words from ``g_bmoff``) or in
    ``ulist`` (slice ``sl``'s distinct ids from ``g_uloff[g] + g_sloff[g, sl]``,
    count in ``ul_cnt[g * nsl + sl]``); ``g_sloff[g]``: cumulative raw ids per slice.

    ``keep_all`` (needed for ``write`` or a prefix cut) keeps the sorted runs of all
    groups of a slice side by side in ``sk`` / ``sg``; else each group reuses the
    start of ``sk``. With limits and ``allow_cut``: the prefix cut of [jte]
    preprocess_sparse_dense_matmul_input, dropped raw ids
    in ``dropped[sl]``, dropped pairs appended to ``drops`` (``(R', u, p, raw
    count)``, group in ``drop_g``; both grown as needed). Limits without
    ``allow_cut``: every pair is written (the caller raises if a limit is exceeded);
    writes stop at ``cap`` entries (``cap >= 0``), the region of a slice whose
    ``C`` is known, padding written up to it; else up to the aligned end
    ``used[sl]``.

    Errors: the first out-of-vocabulary position of group ``g`` in these slices goes
    to ``g_oov[g]``, the first zero-divisor sample to ``g_bad[g]`` (if still -1);
    such a slice is not counted further or written.

    Returns
    -------
    ndrops, drops, drop_g
        Dropped pairs written and the (possibly grown) record arrays.
    """
    ng = gptr.shape[0] - 1
    nsl = g_sloff.shape[1] - 1
    limited = max_ids < _NO_LIMIT or max_uniq < _NO_LIMIT
    lim_ids = max_ids if allow_cut else _NO_LIMIT
    lim_uniq = max_uniq if allow_cut else _NO_LIMIT
    lmask = (np.int64(1) << lbits) - 1
    nan = np.float32(np.nan)
    one = np.float32(1.0)
    ndrops = 0
    for sl in range(s0, s1):
        c0 = sl * P
        koff = 0
        ok = True
        for g in range(ng):
            a0 = gptr[g]
            a1 = gptr[g + 1]
            wg = write and g_mode[g] == 2
            m, oov, bad = sort_slice(ids, splits, weights, has_w, feat_rows[a0:a1], feat_k[a0:a1], combiner, n, sl,
                                     g_vocab[g], P, g_shift[g], g_qbits[g], lbits, wg, sk[koff:],
                                     sg[koff:] if wg else sg, a_keys, a_gains, b_keys, b_gains, hist)
            if oov >= 0:
                if g_oov[g] < 0:
                    g_oov[g] = oov
                ok = False
                continue
            if bad >= 0:                          # gains NaN, counts go on: the limit
                if g_bad[g] < 0:                  # errors, which compute_stats raises,
                    g_bad[g] = bad                # come before the divisor error
            if not write:
                ul_cnt[g * nsl + sl] = count_slice(sk[koff:], m, P, g_qbits[g], c0, pairs, distinct,
                                                   g_bitmap[g] != 0, bitmap, g_bmoff[g], ulist,
                                                   g_uloff[g] + g_sloff[g, sl])
            gm[g] = m
            if keep_all:
                koff += m
        if not ok:
            continue
        if not write:
            exceeded = False
            for c in range(c0, c0 + P):
                kept[c] = pairs[c]
                if pairs[c] > max_ids or distinct[c] > max_uniq:
                    exceeded = True
            if not (limited and allow_cut and exceeded):
                continue
        koff = 0
        for g in range(ng):
            _partition_bounds(sk[koff:], gm[g], g_qbits[g], P, bounds, g * (P + 1))
            koff += gm[g]
        b0 = base[sl]
        wlim = b0 + cap if cap >= 0 else _NO_LIMIT
        cur = b0
        for p in range(P):
            start = cur
            idx = 0                               # pairs of the (sl, p) stream so far
            rank = 0                              # distinct ids of the stream so far
            nkept = 0
            koff = 0
            for g in range(ng):
                i0 = koff + bounds[g * (P + 1) + p]
                i1 = koff + bounds[g * (P + 1) + p + 1]
                koff += gm[g]
                qb = g_qbits[g]
                qmask = (np.int64(1) << qb) - 1
                roff = g_rowoff[g]
                mode = g_mode[g]
                use_bm = g_bitmap[g] != 0
                bm0 = g_bmoff[g]
                gi = g * nsl + sl
                ul0 = g_uloff[g] + g_sloff[g, sl]
                nu = ul_cnt[gi]
                prev_u = np.int64(-1)             # a new table: its ids are new distinct ids
                prev_R = np.int64(-1)
                if not limited:
                    # fast path (CSR, no limit): count, set the naive bit, write; a
                    # per-sample duplicate rewrites its pair's slot and adds its gain
                    for i in range(i0, i1):
                        v = sk[_U(i)]
                        u = (v >> 32) & _LOW32
                        Rr = v & _LOW32
                        newx = np.int64(u != prev_u)
                        newr = newx | np.int64(Rr != prev_R)
                        rank += newx
                        cur += newr
                        if use_bm:
                            bitmap[_U(bm0 + (u >> 6))] |= np.int64(1) << (u & 63)
                        else:
                            ulist[_U(ul0 + nu)] = u
                            nu += newx
                        write_csr_entry(emb, smp, gout, _U(cur - 1), u, Rr, qmask, roff, lmask,
                                        entry_gain(mode, sg, rowgain, one, i, Rr), newr)
                        prev_u = u
                        prev_R = Rr
                    ul_cnt[gi] = nu
                    continue
                # general path: the prefix cut of [jte] preprocess_sparse_dense_matmul_input, as scan_group_reference
                keep = True
                last = np.int64(-1)
                rec = np.int64(-1)
                for i in range(i0, i1):
                    v = sk[i]
                    u = (v >> 32) & _LOW32
                    Rr = v & _LOW32
                    newx = u != prev_u
                    newr = newx or Rr != prev_R
                    if write:                     # else count_slice has counted already
                        if use_bm:
                            bitmap[bm0 + (u >> 6)] |= np.int64(1) << (u & 63)
                        elif newx:
                            ulist[ul0 + nu] = u
                            nu += 1
                    gg = one
                    if write:                     # gains exist only when writing
                        if mode == 2:
                            gg = sg[i]
                        elif mode == 1:
                            gg = rowgain[Rr]
                    if newr:
                        if newx:
                            rank += 1
                        keep = idx < lim_ids and rank - 1 < lim_uniq
                        idx += 1
                        if keep:
                            nkept += 1
                            if write:
                                last = cur if cur < wlim else -1
                                if last >= 0:
                                    emb[last] = (u & qmask) + roff
                                    smp[last] = Rr & lmask
                                    gout[last] = gg
                                cur += 1
                        else:
                            dropped[sl] += 1
                            if write:
                                if ndrops == drops.shape[0]:
                                    grown = np.zeros((2 * ndrops + 16, 4), np.int64)
                                    grown_g = np.zeros(2 * ndrops + 16, np.int64)
                                    grown[:ndrops] = drops[:ndrops]
                                    grown_g[:ndrops] = drop_g[:ndrops]
                                    drops = grown
                                    drop_g = grown_g
                                rec = ndrops
                                ndrops += 1
                                drops[rec, 0] = Rr
                                drops[rec, 1] = u
                                drops[rec, 2] = p
                                drops[rec, 3] = 1
                                drop_g[rec] = g
                    elif keep:
                        if write and last >= 0:
                            gout[last] += gg
                    else:
                        dropped[sl] += 1
                        if write:
                            drops[rec, 3] += 1
                    prev_u = u
                    prev_R = Rr
                if write:
                    ul_cnt[gi] = nu
            if write:
                pairs[c0 + p] = idx if limited else cur - start
                distinct[c0 + p] = rank
                kept[c0 + p] = nkept if limited else cur - start
                e = cur - b0
                row_pointers[sl * R + p] = e
                nxt = b0 + _round_up(e, 8)
                for t in range(cur, min(nxt, wlim)):
                    emb[t] = PAD_ID
                    smp[t] = PAD_ID
                    gout[t] = nan
                cur = nxt
            else:
                kept[c0 + p] = nkept
        if write:
            end = cur - b0
            used[sl] = end
            for p in range(P, R):
                row_pointers[sl * R + p] = end
            if cap >= 0:
                for t in range(b0 + end, b0 + cap):
                    emb[t] = PAD_ID
                    smp[t] = PAD_ID
                    gout[t] = nan
    return ndrops, drops, drop_g


@jit(error_model="numpy")
def compact_slices(emb, smp, gout, stride, used, nsl, C):
    """Move slice ``sl`` (``used[sl]`` entries) from ``sl * stride`` to ``sl * C`` and pad.

    ``C <= stride`` and ``used[sl] <= C``: slices are moved in increasing order,
    each to the left (a forward copy is safe even when source and destination
    overlap) and never onto a slice not yet moved (``(sl + 1) * C <= (sl + 1) *
    stride``). The rest of each ``C``-entry region gets id and sample ``PAD_ID``,
    gain NaN.
    """
    nan = np.float32(np.nan)
    for sl in range(nsl):
        src = sl * stride
        dst = sl * C
        u = used[sl]
        shift = src - dst
        t = 0
        while shift > 0 and t < u:
            # blocks no longer than the shift do not overlap: plain (vectorised) copies
            L = min(shift, u - t)
            emb[dst + t:dst + t + L] = emb[src + t:src + t + L]
            smp[dst + t:dst + t + L] = smp[src + t:src + t + L]
            gout[dst + t:dst + t + L] = gout[src + t:src + t + L]
            t += L
        for t in range(dst + u, dst + C):
            emb[t] = PAD_ID
            smp[t] = PAD_ID
            gout[t] = nan


# references of the slice-major kernels
def scan_group_reference(keys, gains, m, P, qbits, lbits, row_offset, max_ids, max_uniq, pairs, distinct, kept,
                         naive_uniq, write, gain_mode, rowgain, cursor, emb, smp, gout, drops, ndrops):
    """The [jte] preprocess_sparse_dense_matmul_input counting and prefix cut of one sorted group.

    Per stream, in the obvious way.

    The building block of :func:`stack_slices_reference` (the counters carry over
    between the groups of a stack).

    Groups the sorted keys into ``(slice, partition)`` streams of deduplicated pairs
    (merging duplicates), then applies the prefix cut stream by stream.
    """
    p, q, sl, local = decode_keys(keys[:m], qbits, lbits)
    u = (p << qbits) | q
    R = (sl << lbits) | local
    if not write:
        g = np.zeros(m, np.float32)
    elif gain_mode == 2:
        g = gains[:m]
    elif gain_mode == 1:
        g = rowgain[R]
    else:
        g = np.ones(m, np.float32)
    streams: dict[int, list] = {}
    for i in range(m):
        c = int(sl[i] * P + p[i])
        lst = streams.setdefault(c, [])
        if lst and lst[-1][0] == u[i] and lst[-1][1] == R[i]:
            lst[-1][2] += 1
            lst[-1][3].append(g[i])
        else:
            lst.append([int(u[i]), int(R[i]), 1, [g[i]]])
    for ui in np.unique(u):
        naive_uniq[ui >> qbits] += 1
    dropped = 0
    for c, lst in sorted(streams.items()):
        previous_id = -1
        for ui, Ri, count, gs in lst:
            if ui != previous_id:
                previous_id = ui
                distinct[c] += 1
            # Ranks are stream-wide: the tables of a stack arrive in successive calls
            # and share the (slice, partition) stream, so the counters carry over.
            idx = pairs[c]
            pairs[c] += 1
            if idx < max_ids and distinct[c] - 1 < max_uniq:
                kept[c] += 1
                if write:
                    pos = cursor[c]
                    cursor[c] += 1
                    emb[pos] = (ui & ((1 << qbits) - 1)) + row_offset
                    smp[pos] = Ri & ((1 << lbits) - 1)
                    acc = np.float32(0.0)
                    for v in gs:
                        acc = np.float32(acc + v)
                    gout[pos] = acc
            else:
                dropped += count
                if write:
                    drops[ndrops] = (Ri, ui, c % P, count)
                    ndrops += 1
    return dropped, ndrops


def sort_slice_reference(ids, splits, weights, has_w, feat_rows, feat_k, combiner, n, sl, vocab, P, col_shift,
                         qbits, lbits, want_gains, keys, gains, a_keys, a_gains, b_keys, b_gains, hist):
    """Numpy reference of :func:`sort_slice`: lexsort of the slice's (u, R') pairs."""
    del a_keys, a_gains, b_keys, b_gains, hist
    for a in range(len(feat_rows)):             # first out-of-vocabulary id in build order
        f = int(feat_rows[a])
        seg = ids[splits[f, sl * n]:splits[f, (sl + 1) * n]]
        if seg.size and seg.max() >= vocab:
            return 0, int(splits[f, sl * n] + np.flatnonzero(seg >= vocab)[0]), -1
    u, R, g, bad = _keys_reference(ids, splits, weights, has_w, feat_rows, feat_k, combiner if want_gains else 0,
                                   n, sl + 1, 0, P, col_shift, qbits, lbits, first_slice=sl)
    order = np.lexsort((R, u))
    m = u.size
    keys[:m] = ((u[order].astype(np.uint64) << np.uint64(32)) | R[order].astype(np.uint64)).view(np.int64)
    if want_gains:
        gains[:m] = g[order]
    return m, -1, (bad if want_gains else -1)


def count_slice_reference(keys, m, P, qbits, c0, pairs, distinct, use_bitmap, bitmap, bm0, ulist, ul0):
    """Numpy reference of :func:`count_slice`."""
    u = (keys[:m] >> 32) & _LOW32
    R = keys[:m] & _LOW32
    newx = np.ones(m, bool)
    newx[1:] = u[1:] != u[:-1]
    newr = newx.copy()
    newr[1:] |= R[1:] != R[:-1]
    np.add.at(distinct, c0 + (u[newx] >> qbits), 1)
    np.add.at(pairs, c0 + (u[newr] >> qbits), 1)
    if use_bitmap:
        np.bitwise_or.at(bitmap, bm0 + (u >> 6), np.left_shift(np.int64(1), u & 63))
        return 0
    uniq = u[newx]
    ulist[ul0:ul0 + uniq.size] = uniq
    return int(uniq.size)


def stack_slices_reference(ids, splits, weights, has_w, combiner, n, P, lbits,
                           gptr, feat_rows, feat_k, g_vocab, g_shift, g_qbits, g_rowoff, g_mode, g_bitmap, g_bmoff,
                           g_uloff, g_sloff, s0, s1, keep_all, max_ids, max_uniq, allow_cut,
                           sk, sg, a_keys, a_gains, b_keys, b_gains, hist, gm, bounds,
                           pairs, distinct, kept, dropped, used, g_oov, g_bad, bitmap, ulist, ul_cnt,
                           write, cap, base, R, rowgain, emb, smp, gout, row_pointers, drops, drop_g):
    """Reference of :func:`stack_slices`, slice by slice with the reference kernels.

    Each group's run of a slice is sorted with :func:`sort_slice_reference`, then the
    whole slice (its groups in stack order) is counted, cut and written with
    :func:`scan_group_reference` on fresh per-stream counters.
    """
    del sk, sg, a_keys, a_gains, b_keys, b_gains, hist, gm, bounds, keep_all
    ng = len(gptr) - 1
    nsl = g_sloff.shape[1] - 1
    rec_list, rec_g = [], []
    for sl in range(s0, s1):
        c0 = sl * P
        runs = []
        ok = True
        for g in range(ng):
            a0, a1 = gptr[g], gptr[g + 1]
            size = int(g_sloff[g, sl + 1] - g_sloff[g, sl])
            k = np.zeros(max(1, size), np.int64)
            gg = np.zeros(max(1, size), np.float32)
            wg = bool(write and g_mode[g] == 2)
            m, oov, bad = sort_slice_reference(ids, splits, weights, has_w, feat_rows[a0:a1], feat_k[a0:a1],
                                               combiner, n, sl, g_vocab[g], P, g_shift[g], g_qbits[g], lbits, wg, k,
                                               gg, None, None, None, None, None)
            if oov >= 0:
                g_oov[g] = oov if g_oov[g] < 0 else g_oov[g]
                ok = False
                continue
            if bad >= 0:                          # as stack_slices: counting goes on
                g_bad[g] = bad if g_bad[g] < 0 else g_bad[g]
            ul_cnt[g * nsl + sl] = count_slice_reference(k, m, P, g_qbits[g], c0, pairs, distinct, bool(g_bitmap[g]),
                                                         bitmap, g_bmoff[g], ulist, g_uloff[g] + g_sloff[g, sl])
            runs.append((g, k[:m], gg[:m]))
        if not ok:
            continue
        stream = slice(c0, c0 + P)
        exceeded = bool((pairs[stream] > max_ids).any() or (distinct[stream] > max_uniq).any())
        if exceeded and allow_cut:
            zp = np.zeros(len(pairs), np.int64)
            zd = np.zeros(len(pairs), np.int64)
            kz = np.zeros(len(pairs), np.int64)
            for g, k, gg in runs:
                d, _ = scan_group_reference(k, gg, k.size, P, g_qbits[g], lbits, g_rowoff[g], max_ids, max_uniq, zp, zd,
                                            kz, np.zeros(P, np.int64), False, 0, rowgain, None, None, None, None, None,
                                            0)
                dropped[sl] += d
            kept[stream] = kz[stream]
        else:
            kept[stream] = pairs[stream]
        if not write or (exceeded and not allow_cut):
            continue
        ends = np.cumsum(round_up(kept[stream], 8))
        st = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        end = int(ends[-1])
        if cap >= 0 and end > cap:
            continue
        used[sl] = end
        b0 = int(base[sl])
        cur = np.zeros(len(pairs), np.int64)
        cur[stream] = b0 + st
        zp = np.zeros(len(pairs), np.int64)
        zd = np.zeros(len(pairs), np.int64)
        zk = np.zeros(len(pairs), np.int64)
        for g, k, gg in runs:
            recs = np.zeros((max(1, k.size), 4), np.int64)
            _, nd = scan_group_reference(k, gg, k.size, P, g_qbits[g], lbits, g_rowoff[g], max_ids, max_uniq, zp, zd,
                                         zk, np.zeros(P, np.int64), True, g_mode[g], rowgain, cur, emb, smp, gout,
                                         recs, 0)
            rec_list.append(recs[:nd])
            rec_g.append(np.full(nd, g, np.int64))
        region = slice(b0, b0 + (cap if cap >= 0 else end))
        data = np.zeros(region.stop - region.start, bool)
        for p in range(P):
            data[st[p]:st[p] + kept[c0 + p]] = True
        emb[region][~data] = PAD_ID
        smp[region][~data] = PAD_ID
        gout[region][~data] = np.nan
        row_pointers[sl * R:sl * R + P] = st + kept[stream]
        row_pointers[sl * R + P:(sl + 1) * R] = end
    recs = np.concatenate(rec_list) if rec_list else np.zeros((0, 4), np.int64)
    rg = np.concatenate(rec_g) if rec_g else np.zeros(0, np.int64)
    if recs.shape[0] > drops.shape[0]:
        drops = np.zeros((recs.shape[0], 4), np.int64)
        drop_g = np.zeros(recs.shape[0], np.int64)
    drops[:recs.shape[0]] = recs
    drop_g[:recs.shape[0]] = rg
    return recs.shape[0], drops, drop_g


def compact_slices_reference(emb, smp, gout, stride, used, nsl, C):
    """Numpy reference of :func:`compact_slices` (through a copy of the data)."""
    data = [(emb[sl * stride:sl * stride + used[sl]].copy(), smp[sl * stride:sl * stride + used[sl]].copy(),
             gout[sl * stride:sl * stride + used[sl]].copy()) for sl in range(nsl)]
    emb[:nsl * C] = PAD_ID
    smp[:nsl * C] = PAD_ID
    gout[:nsl * C] = np.nan
    for sl, (e, s, g) in enumerate(data):
        emb[sl * C:sl * C + e.size] = e
        smp[sl * C:sl * C + e.size] = s
        gout[sl * C:sl * C + e.size] = g



# --------------------------------------------------------------------------------------
# group_tables
# --------------------------------------------------------------------------------------
@jit(error_model="numpy")
def _reduce_rows(src, rows, starts, out):
    """``out[i] = src[rows[starts[i]:starts[i + 1]]].sum(axis=0)``, as ``np.add.reduceat``.

    An empty range (``starts[i] >= starts[i + 1]``) takes the one row at ``starts[i]``,
    as ``np.add.reduceat`` does. ``rows`` of length 0: the identity map.
    """
    m, nsl = out.shape
    nr = rows.size if rows.size else src.shape[0]
    for i in range(m):
        a = starts[i]
        b = starts[i + 1] if i + 1 < m else nr
        if b <= a:
            b = a + 1
        for j in range(nsl):
            out[i, j] = 0
        for r in range(a, b):
            row = rows[r] if rows.size else r
            for j in range(nsl):
                out[i, j] += src[row, j]


@jit(error_model="numpy")
def group_tables(slice_counts, rows, starts, first_group, stack_starts, part_starts, one_stack):
    """The per-group tables of a call's jobs from its per-(feature, slice) counts, one pass.

    Parameters
    ----------
    slice_counts : (features, nsl) int
        Raw ids of every feature in every slice.
    rows, starts : int64
        The features of every group of every stack, group after group, and where each
        group's start in ``rows`` (at least one group, each with a feature).
    first_group : (groups,) int64
        Each group's stack's first group.
    stack_starts : (stacks,) int64
        Each stack's first group (every stack has one).
    part_starts : (parts,) int64
        Each part's (stack before merging) first group; empty: one group per part.
    one_stack : bool
        One job: the naive-view offsets are the running sums as they are.

    Returns
    -------
    gcounts : (groups, nsl) int64
        Raw ids per group and slice.
    sloff : (groups, nsl + 1) int64
        Their running sums over slices (0 first).
    uloff : (groups,) int64
        Each group's first place in its stack's naive-view list.
    group_max : (groups,) int64
        Each group's largest slice.
    stack_ids : (stacks, nsl) int64
        Raw ids per stack and slice.
    stack_max : (stacks,) int64
        Each stack's largest group slice.
    part_ids : (parts, nsl) int64
        Raw ids per part and slice (``(0, nsl)`` when ``part_starts`` is empty).
    """
    ng = starts.size
    nsl = slice_counts.shape[1]
    gcounts = np.empty((ng, nsl), np.int64)
    _reduce_rows(slice_counts, rows, starts, gcounts)
    sloff = np.zeros((ng, nsl + 1), np.int64)
    uloff = np.empty(ng, np.int64)
    group_max = np.zeros(ng, np.int64)
    before = np.int64(0)
    for g in range(ng):
        run = np.int64(0)
        top = np.int64(0)
        for j in range(nsl):
            c = gcounts[g, j]
            run += c
            sloff[g, j + 1] = run
            if c > top:
                top = c
        group_max[g] = top
        uloff[g] = before
        before += run
    if not one_stack:
        # each group's offset from its stack's first group (first_group[g] <= g: read first)
        for g in range(ng - 1, -1, -1):
            uloff[g] -= uloff[first_group[g]]
    ns = stack_starts.size
    stack_ids = np.empty((ns, nsl), np.int64)
    _reduce_rows(gcounts, rows[:0], stack_starts, stack_ids)
    stack_max = np.zeros(ns, np.int64)
    for s in range(ns):
        b = stack_starts[s + 1] if s + 1 < ns else ng
        for g in range(stack_starts[s], b):
            if group_max[g] > stack_max[s]:
                stack_max[s] = group_max[g]
    part_ids = np.empty((part_starts.size, nsl), np.int64)
    if part_starts.size:
        _reduce_rows(gcounts, rows[:0], part_starts, part_ids)
    return gcounts, sloff, uloff, group_max, stack_ids, stack_max, part_ids


def group_tables_reference(slice_counts, rows, starts, first_group, stack_starts, part_starts, one_stack):
    """:func:`group_tables` with numpy calls, as the engine computed these before."""
    gcounts = np.add.reduceat(slice_counts[rows], starts, axis=0).astype(np.int64)
    sloff = np.zeros((gcounts.shape[0], gcounts.shape[1] + 1), np.int64)
    np.cumsum(gcounts, axis=1, out=sloff[:, 1:])
    totals = sloff[:, -1]
    before = np.cumsum(totals) - totals
    uloff = before if one_stack else before - before[first_group]
    group_max = gcounts.max(axis=1, initial=0)
    stack_ids = np.add.reduceat(gcounts, stack_starts, axis=0)
    ends = np.append(stack_starts[1:], gcounts.shape[0])
    stack_max = np.array([group_max[a:b].max(initial=0) for a, b in zip(stack_starts, ends)], np.int64)
    part_ids = (np.add.reduceat(gcounts, part_starts, axis=0) if part_starts.size
                else np.zeros((0, gcounts.shape[1]), np.int64))
    return gcounts, sloff, uloff, group_max, stack_ids, stack_max, part_ids


def warmup() -> None:
    """Compile every kernel on tiny inputs (or load them from numba's cache)."""
    ids = np.array([3, 1, 3, 0, 2, 2], np.int64)
    splits = np.array([[0, 3, 6]], np.int64)
    weights = np.ones(6, np.float32)
    has_w = np.zeros(1, np.int8)
    rows = np.zeros(1, np.int64)
    ks = np.empty(6, np.int64)
    gs = np.empty(6, np.float32)
    tk = np.empty(6, np.int64)
    tg = np.empty(6, np.float32)
    hist = np.empty(3 * 2048, np.int64)
    P, nsl = 2, 2
    for want in (False, True):
        m, _, _ = sort_group(ids, splits, weights, has_w, rows, rows, 1, 1, nsl, 1, 4, P, 1, 1, 0, want,
                             ks, gs, tk, tg, hist)
    # the jobs' tables, with the engine's argument types (int64 counts, empty parts or not)
    counts = np.array([[1, 2], [3, 0], [0, 4]], np.int64)
    rows3 = np.array([0, 1, 2], np.int64)
    starts = np.array([0, 2], np.int64)
    first = np.zeros(2, np.int64)
    for parts in (np.zeros(0, np.int64), np.array([0, 1], np.int64)):
        for one_stack in (False, True):
            group_tables(counts, rows3, starts, first, first[:1], parts, one_stack)
