"""The backward pass: gradients sent back to the owner GPUs and reduced per key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from scwork.errors import InputError
from scwork.sharding.sok._checks import _all_to_all, _as_keys, _check_row_arrays
from scwork.sharding.sok._input import DispatchPlan, _check_plan

__all__ = ["OwnerGradients", "backward", "reduce_gradients"]


class OwnerGradients(NamedTuple):
    """Gradients one owner GPU holds after the backward all-to-all.

    Attributes
    ----------
    keys : numpy.ndarray
        Global keys, one per gradient, duplicates kept, in receive order
        (``plan.received_keys[gpu]``; ``plan.local_rows[gpu]`` gives the shard rows).
    gradients : numpy.ndarray
        ``[len(keys), dim]``.
    """

    keys: np.ndarray
    gradients: np.ndarray


def backward(plan: DispatchPlan, grads_per_gpu: Sequence) -> list[OwnerGradients]:
    """Send data-parallel gradients to the GPUs that own their rows.

    Gradients travel the reverse path of :func:`combine` (the input dispatcher's
    path): group by owner with the plan's permutation, all-to-all. Nothing is
    summed; call :func:`reduce_gradients` on the result for per-key sums.

    Parameters
    ----------
    plan : DispatchPlan
        The forward pass's plan.
    grads_per_gpu : sequence of array_like
        ``grads_per_gpu[g]``: ``[len(plan.keys[g]), dim]``, row ``i`` being the
        gradient of the vector of ``plan.keys[g][i]``.

    Returns
    -------
    list of OwnerGradients
        ``result[d] = (keys, gradients)`` held by owner GPU ``d``: keys are
        ``plan.received_keys[d]`` (global keys, duplicates kept).

    Examples
    --------
    The article's backward: GPU 0's input is ``[0, 1, 3, 5]`` (its forward
    example). For GPU 0 to end with ``[grad0, grad4, grad6]`` and GPU 1 with
    ``[grad1, grad3, grad5, grad5, grad7]``, GPU 1's input must hold exactly 4 and 6
    (in that order) and 5 and 7 (in that order); ``[4, 5, 6, 7]`` is the natural
    such input (any interleaving of ``[4, 6]`` with ``[5, 7]`` gives the same).
    Gradient of key ``k`` is ``[k]`` here so the result reads as keys:

    >>> import numpy as np
    >>> from scwork.sharding import sok
    >>> keys = [np.array([0, 1, 3, 5]), np.array([4, 5, 6, 7])]
    >>> plan = sok.dispatch(keys, num_gpus=2)
    >>> grads = [k[:, None].astype(np.float32) for k in keys]
    >>> owner = sok.backward(plan, grads)
    >>> owner[0].keys.tolist(), owner[1].keys.tolist()
    ([0, 4, 6], [1, 3, 5, 5, 7])
    >>> owner[1].gradients[:, 0].tolist()
    [1.0, 3.0, 5.0, 5.0, 7.0]
    >>> [k.tolist() for k in sok.reduce_gradients(*owner[1])]
    [[1, 3, 5, 7], [[1.0], [3.0], [10.0], [7.0]]]
    """
    _check_plan(plan)
    grads = _check_row_arrays(grads_per_gpu, plan.num_gpus, "grads_per_gpu",
                              rows=[len(k) for k in plan.keys])
    grouped = [g[order] for g, order in zip(grads, plan.order)]
    received = _all_to_all(grouped, plan.send_offsets)
    return [OwnerGradients(keys, g) for keys, g in zip(plan.received_keys, received)]


def reduce_gradients(keys, gradients) -> tuple[np.ndarray, np.ndarray]:
    """Sum the gradients of duplicate keys: what an optimizer applies per row.

    Parameters
    ----------
    keys : array_like of int
        ``[n]`` keys, duplicates allowed (e.g. ``OwnerGradients.keys``).
    gradients : array_like
        ``[n, dim]``.

    Returns
    -------
    unique_keys : numpy.ndarray of int64
        Sorted distinct keys.
    summed : numpy.ndarray
        ``[len(unique_keys), dim]``, same dtype as ``gradients``.

    Examples
    --------
    >>> from scwork.sharding.sok import reduce_gradients
    >>> k, g = reduce_gradients([5, 1, 5], [[1.0, 2.0], [3.0, 4.0], [10.0, 20.0]])
    >>> k.tolist(), g.tolist()
    ([1, 5], [[3.0, 4.0], [11.0, 22.0]])
    """
    keys = _as_keys(keys, gpu=None)
    gradients = np.asarray(gradients)
    if gradients.ndim != 2 or gradients.shape[0] != keys.shape[0]:
        raise InputError(
            f"gradients must have shape [len(keys), dim] = [{keys.shape[0]}, dim], got {gradients.shape}"
        )
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    if sorted_keys.size == 0:
        return sorted_keys, gradients[:0].copy()
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    summed = np.add.reduceat(gradients[order], starts, axis=0)
    return sorted_keys[starts], summed.astype(gradients.dtype, copy=False)
