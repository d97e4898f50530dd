"""Lookup and output dispatcher: owners gather rows, vectors go back and are combined."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scwork.errors import InputError, OutOfVocabularyError
from scwork.sharding.sok._checks import _all_to_all, _check_num_gpus, _check_row_arrays
from scwork.sharding.sok._input import DispatchPlan, _check_plan, dispatch

__all__ = ["combine", "forward", "lookup", "shard_table"]


def lookup(plan: DispatchPlan, shards: Sequence) -> list[np.ndarray]:
    """Model-parallel lookup: every GPU gathers its received keys' rows in its shard.

    Parameters
    ----------
    plan : DispatchPlan
        From :func:`dispatch`.
    shards : sequence of array_like
        ``shards[g]``: GPU ``g``'s part of the table, ``[rows_g, dim]``, indexed by
        local row (``key // G``), e.g. from :func:`shard_table`. Every shard must
        have the same ``dim``.

    Returns
    -------
    list of numpy.ndarray
        ``result[g]``: ``[len(plan.received_keys[g]), dim]``, in receive order.

    Raises
    ------
    InputError
        Wrong number of shards, or shards that are not 2-D with a common width.
    OutOfVocabularyError
        A received key's local row is beyond its owner's shard; the message names
        the source GPU, the position in its input and the key.

    Examples
    --------
    >>> import numpy as np
    >>> from scwork.sharding import sok
    >>> plan = sok.dispatch([np.array([3, 0]), np.array([1])], num_gpus=2)
    >>> shards = sok.shard_table(np.arange(4.0)[:, None], 2)   # rows [0, 2] and [1, 3]
    >>> [v[:, 0].tolist() for v in sok.lookup(plan, shards)]
    [[0.0], [3.0, 1.0]]
    """
    _check_plan(plan)
    shards = _check_row_arrays(shards, plan.num_gpus, "shards", rows=None)
    gathered = []
    for gpu, (shard, rows) in enumerate(zip(shards, plan.local_rows)):
        beyond = rows >= shard.shape[0]
        if beyond.any():
            total = int(sum((r >= s.shape[0]).sum() for s, r in zip(shards, plan.local_rows)))
            index = int(np.argmax(beyond))
            source, position = plan.origin(gpu, index)
            key = int(plan.received_keys[gpu][index])
            err = OutOfVocabularyError(
                f"key {key} at position {position} of GPU {source}'s input is out of vocabulary: "
                f"it belongs to GPU {gpu} at local row {int(rows[index])}, but GPU {gpu}'s shard "
                f"has only {shard.shape[0]} rows ({total} out-of-vocabulary key(s) in total). "
                "How to fix: remove or remap keys beyond the table, or give the shards more rows.",
                sample=position, id=key, count=total,
            )
            err.gpu = source
            raise err
        gathered.append(shard[rows])
    return gathered


def combine(plan: DispatchPlan, vectors: Sequence) -> list[np.ndarray]:
    """Output dispatcher: send vectors back to the requesting GPUs, in input order.

    Parameters
    ----------
    plan : DispatchPlan
        The plan the vectors were looked up with.
    vectors : sequence of array_like
        ``vectors[g]``: ``[len(plan.received_keys[g]), dim]`` in receive order, as
        returned by :func:`lookup`.

    Returns
    -------
    list of numpy.ndarray
        ``result[g]``: ``[len(plan.keys[g]), dim]``; row ``i`` is the vector of
        ``plan.keys[g][i]``.

    Examples
    --------
    >>> import numpy as np
    >>> from scwork.sharding import sok
    >>> plan = sok.dispatch([np.array([3, 0, 3])], num_gpus=1)
    >>> vectors = [np.array([[30.0], [0.0], [30.0]])[plan.order[0]]]   # receive order
    >>> sok.combine(plan, vectors)[0][:, 0].tolist()
    [30.0, 0.0, 30.0]
    """
    _check_plan(plan)
    vectors = _check_row_arrays(vectors, plan.num_gpus, "vectors",
                                rows=[len(r) for r in plan.received_keys])
    # The receive layout of the forward all-to-all is the send layout of the way
    # back: GPU d's chunk for GPU s sits at receive_offsets[d, s].
    returned = _all_to_all(vectors, plan.receive_offsets)
    restored = []
    for order, grouped in zip(plan.order, returned):
        out = np.empty_like(grouped)
        out[order] = grouped
        restored.append(out)
    return restored


def shard_table(table, num_gpus: int) -> list[np.ndarray]:
    """Split a full table into SOK shards: row ``k`` to GPU ``k % G``, local row ``k // G``.

    Parameters
    ----------
    table : array_like
        ``[vocab_size, dim]``.
    num_gpus : int

    Returns
    -------
    list of numpy.ndarray
        ``shards[g] = table[g::G]`` (views), ``ceil((vocab_size - g) / G)`` rows.

    Examples
    --------
    >>> import numpy as np
    >>> from scwork.sharding.sok import shard_table
    >>> [s[:, 0].tolist() for s in shard_table(np.arange(5)[:, None], 2)]
    [[0, 2, 4], [1, 3]]
    """
    num_gpus = _check_num_gpus(num_gpus)
    table = np.asarray(table)
    if table.ndim != 2:
        raise InputError(f"table must be 2-D [vocab_size, dim], got shape {table.shape}")
    return [table[g::num_gpus] for g in range(num_gpus)]


def forward(keys_per_gpu: Sequence, table, num_gpus: int, *, return_plan: bool = False):
    """Whole SOK forward pass on a full table: shard, dispatch, lookup, combine.

    Parameters
    ----------
    keys_per_gpu : sequence of array_like of int
        One 1-D key array per GPU (see :func:`dispatch`).
    table : array_like
        The full table ``[vocab_size, dim]``; it is sharded with :func:`shard_table`.
    num_gpus : int
    return_plan : bool, default False
        Also return the :class:`DispatchPlan` (needed by :func:`backward`).

    Returns
    -------
    vectors : list of numpy.ndarray
        ``vectors[g]`` equals ``table[keys_per_gpu[g]]``.
    plan : DispatchPlan
        Only when ``return_plan`` is true.

    Raises
    ------
    OutOfVocabularyError
        A key is ``>= vocab_size``; names the GPU, the position and the key.

    Examples
    --------
    >>> import numpy as np
    >>> from scwork.sharding import sok
    >>> table = np.arange(10.0).reshape(5, 2)
    >>> sok.forward([np.array([4, 1]), np.array([1, 1, 0])], table, num_gpus=2)[1].tolist()
    [[2.0, 3.0], [2.0, 3.0], [0.0, 1.0]]
    """
    table = np.asarray(table)
    shards = shard_table(table, num_gpus)
    plan = dispatch(keys_per_gpu, num_gpus, vocab_size=table.shape[0])
    vectors = combine(plan, lookup(plan, shards))
    return (vectors, plan) if return_plan else vectors
