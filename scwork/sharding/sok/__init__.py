"""HugeCTR SOK embedding: data parallel -> model parallel -> data parallel ([sok]).

The Sparse Operation Kit (SOK) of NVIDIA Merlin HugeCTR shards one embedding table
over ``G`` GPUs by key: row ``key`` lives on GPU ``key % G`` at local row
``key // G``. Every GPU still receives its own (data-parallel) slice of the batch,
whose keys can belong to any GPU, so one lookup takes three stages:

1. **Input dispatcher** (:func:`dispatch`). On each GPU, group the keys by owner
   ``key % G`` with a stable sort, remembering the permutation (the *order*
   information the article mentions) so the output can be put back in input order;
   exchange the per-group counts (the *count matrix*, ``[source, destination]``) so
   every GPU can size its receive buffers; exchange the keys with an all-to-all
   (each receiver gets its chunks grouped by source GPU, in source order); and
   divide by ``G`` to get local rows, which are always below ``ceil(V / G)``.
2. **Lookup** (:func:`lookup`). A plain local gather in each GPU's shard.
3. **Output dispatcher** (:func:`combine`). Send every vector back along the same
   path in the opposite direction, then undo the permutation of step 1 so each GPU
   holds one vector per input key, in input order.

Backward (:func:`backward`) sends data-parallel gradients along the input
dispatcher's path (reverse of the output dispatcher), so each owner GPU ends with
one gradient per key occurrence: duplicates are *kept*, exactly as in the article.
Summing them per key is what the optimizer applies; it is the separate step
:func:`reduce_gradients`.

:meth:`DispatchPlan.traffic` turns the count matrix into bytes per phase (keys,
vectors, gradients) as an :class:`xarray.Dataset` with a per-GPU summary.

The all-to-all is simulated on the host: every "GPU" is one numpy array in a list.

Source: [sok], the Sparse Operation Kit documentation and NVIDIA's article on its
embedding ("Merlin HugeCTR Sparse Operation Kit 系列之二", 2022).

Examples
--------
The article's example with 2 GPUs. GPU 0's input ``[0, 1, 3, 5]`` comes back as the
vectors of rows 0, 1, 3 and 5 although rows 1, 3 and 5 live on GPU 1.

>>> import numpy as np
>>> from scwork.sharding import sok
>>> table = np.repeat(np.arange(8.0)[:, None] / 10, 2, axis=1)   # row k = [0.k, 0.k]
>>> keys = [np.array([0, 1, 3, 5]), np.array([4, 5, 6, 7])]
>>> vectors, plan = sok.forward(keys, table, num_gpus=2, return_plan=True)
>>> vectors[0]
array([[0. , 0. ],
       [0.1, 0.1],
       [0.3, 0.3],
       [0.5, 0.5]])
>>> plan.count_matrix
array([[1, 3],
       [2, 2]])
>>> [k.tolist() for k in plan.received_keys]
[[0, 4, 6], [1, 3, 5, 5, 7]]
"""

from __future__ import annotations

from scwork.sharding.sok._backward import backward, OwnerGradients, reduce_gradients
from scwork.sharding.sok._checks import VECTOR_DTYPE_SIZES
from scwork.sharding.sok._forward import combine, forward, lookup, shard_table
from scwork.sharding.sok._input import dispatch, DispatchPlan, owner_gpu
from scwork.sharding.sok._timing import all_to_all_time

__all__ = [
    "DispatchPlan",
    "OwnerGradients",
    "dispatch",
    "lookup",
    "combine",
    "forward",
    "backward",
    "reduce_gradients",
    "shard_table",
    "owner_gpu",
    "all_to_all_time",
    "VECTOR_DTYPE_SIZES",
]

