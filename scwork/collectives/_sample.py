"""Sampled verification of ``execute``: which nodes and elements are checked, and how.

Used by :func:`scwork.collectives.execute`.

A schedule moves whole shards (element ranges), so a wrong schedule shows on
the edges of the shards it gets wrong: the sample holds the first and last
element of every shard, plus random elements (for errors inside a shard), on
every group's first node plus random nodes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["compare_sample", "sample_nodes_and_elements"]


def sample_nodes_and_elements(groups: np.ndarray, bounds: np.ndarray, num_elements: int, *, num_nodes: int,
                              num_elements_drawn: int, seed: int):
    """Sorted node ids and element ids to compare.

    Nodes: the first node of every group (``groups[n]`` is node ``n``'s group)
    and ``num_nodes`` nodes drawn without replacement. Elements: the first and
    last element of every non-empty shard (``bounds``: shard edges) and
    ``num_elements_drawn`` elements drawn with replacement. Both from
    ``numpy.random.default_rng(seed)``, nodes first.
    """
    rng = np.random.default_rng(seed)
    total = len(groups)
    _, representatives = np.unique(groups, return_index=True)
    nodes = np.union1d(representatives, rng.choice(total, size=min(total, num_nodes), replace=False))
    nonempty = bounds[1:] > bounds[:-1]
    edges = np.concatenate([bounds[:-1][nonempty], bounds[1:][nonempty] - 1])
    drawn = rng.integers(0, num_elements, size=num_elements_drawn) if num_elements else np.zeros(0, np.int64)
    return nodes.astype(np.int64), np.union1d(edges, drawn).astype(np.int64)


def compare_sample(work, reference, groups, expected_here, tolerance_scale, tolerance_floor, *, all_reduce: bool):
    """Compare ``work`` (already restricted to the sampled nodes x elements) with the reference.

    Parameters
    ----------
    work : ndarray (nodes, elements)
        Sampled values.
    reference : ndarray (nodes, elements)
        What each sampled node must hold there.
    groups : ndarray (nodes,)
        Group of each sampled node; the first sampled node of a group is its
        representative (the group's first node).
    expected_here : bool ndarray (nodes, elements)
        Where a value is expected (reduce-scatter: owned shards only).
    tolerance_scale : ndarray (nodes, elements) or None
        Allowed error there (None: exact); ``tolerance_floor`` is added to it.
    all_reduce : bool
        Whether nodes of a group must hold bitwise the same values.

    Returns
    -------
    max_error : float
    consistent : bool
    first_wrong : (row, column) or None
        First wrong value in row-major order.
    """
    consistent = True
    if all_reduce:
        _, first, group_index = np.unique(groups, return_index=True, return_inverse=True)
        consistent = bool(np.array_equal(work, work[first[group_index]]))
    diff = np.where(expected_here, np.abs(work.astype(reference.dtype) - reference), 0)
    max_error = float(diff.max()) if diff.size else 0.0
    tolerance = 0.0 if tolerance_scale is None else tolerance_scale + tolerance_floor
    bad = diff > tolerance
    first_wrong = tuple(int(x) for x in np.argwhere(bad)[0]) if bad.any() else None
    return max_error, consistent, first_wrong
