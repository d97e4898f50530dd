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

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from scwork.errors import ConfigError, InputError, OutOfVocabularyError

if TYPE_CHECKING:  # pragma: no cover
    import xarray

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

#: Size in bytes of one vector element for the ``dtype`` names accepted by
#: :meth:`DispatchPlan.traffic` (XLA-style short names and numpy names). Any other
#: numpy dtype is accepted too, through ``numpy.dtype(dtype).itemsize``.
VECTOR_DTYPE_SIZES: dict[str, int] = {
    "f64": 8, "float64": 8,
    "f32": 4, "float32": 4,
    "bf16": 2, "bfloat16": 2,
    "f16": 2, "float16": 2,
    "fp8": 1, "f8e4m3fn": 1, "f8e5m2": 1,
    "s8": 1, "i8": 1, "int8": 1, "u8": 1, "uint8": 1,
}

#: The phases of one training step whose traffic :meth:`DispatchPlan.traffic` reports.
_PHASES = ("keys", "vectors", "gradients")


def owner_gpu(keys, num_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """GPU and local row of each key under SOK's mod sharding.

    Parameters
    ----------
    keys : array_like of int
        Global table rows (non-negative).
    num_gpus : int
        Number of GPUs ``G`` the table is sharded over.

    Returns
    -------
    gpu, local_row : numpy.ndarray of int64
        ``key % G`` and ``key // G``.

    Examples
    --------
    >>> from scwork.sharding.sok import owner_gpu
    >>> gpu, row = owner_gpu([0, 1, 2, 3, 7], 2)
    >>> gpu.tolist(), row.tolist()
    ([0, 1, 0, 1, 1], [0, 0, 1, 1, 3])
    """
    num_gpus = _check_num_gpus(num_gpus)
    keys = _as_keys(keys, gpu=None)
    return keys % num_gpus, keys // num_gpus


@dataclass(frozen=True, eq=False, repr=False)
class DispatchPlan:
    """Everything the input dispatcher decided, reused by the output dispatcher.

    Built by :func:`dispatch`; not meant to be constructed by hand. ``G`` below is
    ``num_gpus``; ``n_g`` is the number of keys in GPU ``g``'s input.

    Attributes
    ----------
    num_gpus : int
        Number of GPUs ``G``.
    keys : tuple of numpy.ndarray
        ``keys[g]``: GPU ``g``'s input keys (int64, length ``n_g``) in input order.
    order : tuple of numpy.ndarray
        ``order[g]``: the stable permutation that groups GPU ``g``'s keys by owner
        GPU, ``keys[g][order[g]]`` is the send buffer. Scattering back with
        ``out[order[g]] = buffer`` restores input order; that is how
        :func:`combine` inverts the dispatch.
    count_matrix : numpy.ndarray
        ``[G, G]`` int64, ``count_matrix[s, d]`` = keys GPU ``s`` sends to GPU ``d``
        (the counts the GPUs exchange before the key all-to-all).
    received_keys : tuple of numpy.ndarray
        ``received_keys[d]``: the keys GPU ``d`` owns and must look up, in the
        order the all-to-all delivers them: the chunk from GPU 0 first, then the
        chunk from GPU 1, ...; inside a chunk, the source's input order.
    local_rows : tuple of numpy.ndarray
        ``local_rows[d] = received_keys[d] // G``: rows of GPU ``d``'s shard.
    """

    num_gpus: int
    keys: tuple[np.ndarray, ...]
    order: tuple[np.ndarray, ...]
    count_matrix: np.ndarray
    received_keys: tuple[np.ndarray, ...]
    local_rows: tuple[np.ndarray, ...]

    # --- offsets of the all-to-all chunks -------------------------------------------
    @property
    def send_offsets(self) -> np.ndarray:
        """``[G, G + 1]``: chunk for GPU ``d`` in GPU ``s``'s send buffer is ``[o[s, d], o[s, d+1])``."""
        return _row_offsets(self.count_matrix)

    @property
    def receive_offsets(self) -> np.ndarray:
        """``[G, G + 1]``: chunk from GPU ``s`` in GPU ``d``'s receive buffer is ``[o[d, s], o[d, s+1])``."""
        return _row_offsets(self.count_matrix.T)

    @property
    def send_counts(self) -> "xarray.DataArray":
        """The count matrix as a DataArray with dims ``("source", "destination")``.

        Examples
        --------
        >>> import numpy as np
        >>> from scwork.sharding import sok
        >>> plan = sok.dispatch([np.array([0, 1, 2, 3]), np.array([5])], num_gpus=2)
        >>> plan.send_counts.sel(source=0).values.tolist()
        [2, 2]
        """
        import xarray as xr

        gpus = np.arange(self.num_gpus)
        return xr.DataArray(
            self.count_matrix.copy(),
            dims=("source", "destination"),
            coords={"source": gpus, "destination": gpus},
            name="keys",
            attrs={"units": "keys",
                   "long_name": "keys sent by the input dispatcher from source to destination (owner) GPU"},
        )

    @property
    def num_keys(self) -> np.ndarray:
        """Number of input keys per GPU (``n_g``), int64 ``[G]``."""
        return self.count_matrix.sum(axis=1)

    def origin(self, gpu: int, index: int) -> tuple[int, int]:
        """Where ``received_keys[gpu][index]`` came from.

        Parameters
        ----------
        gpu : int
            The receiving (owner) GPU.
        index : int
            Position in ``received_keys[gpu]``.

        Returns
        -------
        source_gpu, position : int
            The GPU whose input held the key, and its position in that input.

        Examples
        --------
        >>> import numpy as np
        >>> from scwork.sharding import sok
        >>> plan = sok.dispatch([np.array([0, 1, 3, 5]), np.array([4, 5, 6, 7])], num_gpus=2)
        >>> plan.origin(1, 3)        # the second 5 on GPU 1 is GPU 1's input position 1
        (1, 1)
        """
        offsets = self.receive_offsets[gpu]
        if not 0 <= index < offsets[-1]:
            raise InputError(f"index {index} is outside GPU {gpu}'s {offsets[-1]} received keys")
        source = int(np.searchsorted(offsets, index, side="right") - 1)
        within_chunk = index - offsets[source]
        position_in_send_buffer = self.send_offsets[source, gpu] + within_chunk
        return source, int(self.order[source][position_in_send_buffer])

    def traffic(self, embedding_dim: int, dtype="f32", *, key_itemsize: int = 8) -> "xarray.Dataset":
        """Bytes every GPU pair exchanges in each all-to-all of one training step.

        Parameters
        ----------
        embedding_dim : int
            Width of one embedding vector (and of one gradient).
        dtype : str or numpy dtype, default ``"f32"``
            Element type of vectors and gradients (see :data:`VECTOR_DTYPE_SIZES`).
        key_itemsize : int, default 8
            Bytes per key on the wire (8 for int64 keys, 4 for int32).

        Returns
        -------
        xarray.Dataset
            Coordinates ``source``, ``destination`` and ``gpu`` (0..G-1) and
            ``phase`` (``"keys"``, ``"vectors"``, ``"gradients"``). In every matrix
            ``source`` is the GPU that *sends* that message and ``destination``
            the one that receives it:

            - ``keys`` (source, destination): key count of the input dispatcher
              (the count matrix);
            - ``key_bytes``: ``keys * key_itemsize``;
            - ``vector_bytes``: output dispatcher, owner -> requester, so it is
              the transposed count matrix ``* embedding_dim * itemsize``;
            - ``gradient_bytes``: backward, requester -> owner (same path as the
              keys) ``count_matrix * embedding_dim * itemsize``;
            - ``sent_bytes``, ``received_bytes`` (gpu, phase): bytes that cross the
              network, i.e. without the diagonal (a GPU's chunk for itself is a
              local copy); ``local_bytes`` (gpu, phase) is that diagonal;
            - ``sent_imbalance``, ``received_imbalance`` (phase): max over GPUs
              divided by mean over GPUs (1.0 when nothing crosses the network).
              The slowest GPU sets the all-to-all's time, so this is the slowdown
              against a perfectly balanced exchange of the same volume.

            Not included: the count exchange before the key all-to-all (each GPU
            sends one count to every other GPU, ``G * (G - 1)`` integers in all).

        Examples
        --------
        >>> import numpy as np
        >>> from scwork.sharding import sok
        >>> plan = sok.dispatch([np.array([0, 1, 3, 5]), np.array([4, 5, 6, 7])], num_gpus=2)
        >>> t = plan.traffic(embedding_dim=16, dtype="f32")
        >>> t["vector_bytes"].values.tolist()       # GPU 1 sends 3 vectors of 64 B to GPU 0
        [[64, 128], [192, 128]]
        >>> t["sent_bytes"].sel(phase="vectors").values.tolist()
        [128, 192]
        >>> float(t["sent_imbalance"].sel(phase="vectors"))
        1.2
        """
        import xarray as xr

        if isinstance(embedding_dim, bool) or not isinstance(embedding_dim, numbers.Integral) \
                or embedding_dim < 1:
            raise ConfigError(f"embedding_dim must be a positive integer, got {embedding_dim!r}")
        if isinstance(key_itemsize, bool) or not isinstance(key_itemsize, numbers.Integral) \
                or key_itemsize < 1:
            raise ConfigError(f"key_itemsize must be a positive integer (bytes), got {key_itemsize!r}")
        dtype_name, itemsize = _vector_itemsize(dtype)
        counts = self.count_matrix
        vector_row_bytes = int(embedding_dim) * itemsize
        # exact: the largest per-GPU total (every key of the batch, Python ints) must
        # fit in int64, or the byte counts below would wrap around
        largest = max(int(counts.sum()), 1) * max(vector_row_bytes, int(key_itemsize))
        if largest > np.iinfo(np.int64).max:
            raise ConfigError(f"traffic of {int(counts.sum())} keys x {max(vector_row_bytes, int(key_itemsize))} "
                              f"bytes = {largest} bytes does not fit in int64; embedding_dim={embedding_dim} or "
                              f"key_itemsize={key_itemsize} is not a real size")
        per_phase = {
            "keys": counts * int(key_itemsize),
            "vectors": counts.T * vector_row_bytes,
            "gradients": counts * vector_row_bytes,
        }
        local = np.stack([np.diag(per_phase[p]) for p in _PHASES], axis=1)
        sent = np.stack([per_phase[p].sum(axis=1) for p in _PHASES], axis=1) - local
        received = np.stack([per_phase[p].sum(axis=0) for p in _PHASES], axis=1) - local

        def imbalance(bytes_per_gpu: np.ndarray) -> np.ndarray:
            mean = bytes_per_gpu.mean(axis=0)
            peak = bytes_per_gpu.max(axis=0)
            return np.where(mean > 0, peak / np.where(mean > 0, mean, 1), 1.0)

        gpus = np.arange(self.num_gpus)
        pair = ("source", "destination")
        byte_units = {"units": "bytes"}
        return xr.Dataset(
            data_vars={
                "keys": (pair, counts.copy(),
                         {"units": "keys", "long_name": "keys sent by the input dispatcher"}),
                "key_bytes": (pair, per_phase["keys"],
                              {**byte_units, "long_name": "input dispatcher: key bytes"}),
                "vector_bytes": (pair, per_phase["vectors"],
                                 {**byte_units,
                                  "long_name": "output dispatcher: embedding vectors, owner to requester"}),
                "gradient_bytes": (pair, per_phase["gradients"],
                                   {**byte_units, "long_name": "backward: gradients, requester to owner"}),
                "sent_bytes": (("gpu", "phase"), sent,
                               {**byte_units, "long_name": "bytes sent over the network (diagonal excluded)"}),
                "received_bytes": (("gpu", "phase"), received,
                                   {**byte_units, "long_name": "bytes received over the network (diagonal excluded)"}),
                "local_bytes": (("gpu", "phase"), local,
                                {**byte_units, "long_name": "bytes a GPU keeps for itself (local copy)"}),
                "sent_imbalance": (("phase",), imbalance(sent),
                                   {"units": "1", "long_name": "max / mean of sent_bytes over GPUs"}),
                "received_imbalance": (("phase",), imbalance(received),
                                       {"units": "1", "long_name": "max / mean of received_bytes over GPUs"}),
            },
            coords={"source": gpus, "destination": gpus, "gpu": gpus, "phase": list(_PHASES)},
            attrs={
                "num_gpus": self.num_gpus,
                "embedding_dim": int(embedding_dim),
                "dtype": dtype_name,
                "itemsize": itemsize,
                "key_itemsize": int(key_itemsize),
                "description": "SOK all-to-all traffic of one step ([sok]); "
                               "source = sender, destination = receiver of each message",
            },
        )

    def __repr__(self) -> str:
        return (f"DispatchPlan(num_gpus={self.num_gpus}, keys_per_gpu={self.num_keys.tolist()}, "
                f"count_matrix={self.count_matrix.tolist()})")


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


def dispatch(keys_per_gpu: Sequence, num_gpus: int, *, vocab_size: int | None = None) -> DispatchPlan:
    """Input dispatcher: route every GPU's keys to their owner GPUs.

    Parameters
    ----------
    keys_per_gpu : sequence of array_like of int
        ``keys_per_gpu[g]``: GPU ``g``'s data-parallel input keys, 1-D,
        non-negative, duplicates allowed, possibly empty. Its length must be
        ``num_gpus``.
    num_gpus : int
        Number of GPUs ``G`` (>= 1).
    vocab_size : int, optional
        Number of rows of the full table. When given, keys ``>= vocab_size`` raise
        :class:`~scwork.errors.OutOfVocabularyError`. Without it the check happens
        in :func:`lookup`, against each shard's size.

    Returns
    -------
    DispatchPlan

    Raises
    ------
    ConfigError
        ``num_gpus`` is not a positive integer.
    InputError
        Wrong number of GPU inputs, non-integer or non-1-D keys, negative keys.
    OutOfVocabularyError
        A key is ``>= vocab_size``; the message names the GPU, the position in
        its input and the key (also attributes ``gpu``, ``sample``, ``id``).

    Examples
    --------
    The article's first step: with 2 GPUs, GPU 0's input ``[0, 1, 2, 3]`` splits
    into ``[0, 2]`` (for GPU 0) and ``[1, 3]`` (for GPU 1).

    >>> import numpy as np
    >>> from scwork.sharding import sok
    >>> plan = sok.dispatch([np.array([0, 1, 2, 3]), np.array([], dtype=np.int64)], num_gpus=2)
    >>> plan.keys[0][plan.order[0]].tolist()
    [0, 2, 1, 3]
    >>> plan.count_matrix.tolist()
    [[2, 2], [0, 0]]
    >>> [k.tolist() for k in plan.received_keys], [r.tolist() for r in plan.local_rows]
    ([[0, 2], [1, 3]], [[0, 1], [0, 1]])
    """
    num_gpus = _check_num_gpus(num_gpus)
    if isinstance(keys_per_gpu, np.ndarray) and keys_per_gpu.ndim != 2 and keys_per_gpu.dtype != object:
        raise InputError(
            f"keys_per_gpu must be a sequence of {num_gpus} 1-D key arrays (one per GPU), "
            f"got one array of shape {keys_per_gpu.shape}"
        )
    if len(keys_per_gpu) != num_gpus:
        raise InputError(
            f"keys_per_gpu has {len(keys_per_gpu)} entries but num_gpus={num_gpus}: "
            "pass exactly one key array per GPU (an empty array for a GPU without keys)"
        )
    if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral)
                                   or vocab_size < 1):
        raise ConfigError(f"vocab_size must be a positive integer or None, got {vocab_size!r}")
    keys = tuple(_as_keys(k, gpu=g) for g, k in enumerate(keys_per_gpu))
    if vocab_size is not None:
        _check_vocabulary(keys, int(vocab_size))

    count_matrix = np.zeros((num_gpus, num_gpus), dtype=np.int64)
    orders = []
    send_buffers = []
    for source, source_keys in enumerate(keys):
        destination = source_keys % num_gpus
        # Stable: inside one destination chunk the keys keep input order, which is
        # what lets the receiver (and ``origin``) map a received key back.
        order = np.argsort(destination, kind="stable")
        orders.append(order)
        send_buffers.append(source_keys[order])
        count_matrix[source] = np.bincount(destination, minlength=num_gpus)
    received = _all_to_all(send_buffers, _row_offsets(count_matrix))
    local_rows = tuple(r // num_gpus for r in received)
    for array in (*keys, *orders, *received, *local_rows, count_matrix):
        array.flags.writeable = False
    return DispatchPlan(
        num_gpus=num_gpus,
        keys=keys,
        order=tuple(orders),
        count_matrix=count_matrix,
        received_keys=tuple(received),
        local_rows=local_rows,
    )


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


# --- helpers ------------------------------------------------------------------------

def _check_num_gpus(num_gpus) -> int:
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, numbers.Integral) or num_gpus < 1:
        raise ConfigError(f"num_gpus must be a positive integer, got {num_gpus!r}")
    return int(num_gpus)


def _as_keys(keys, gpu: int | None) -> np.ndarray:
    """1-D non-negative int64 copy of ``keys``; errors name the GPU when known."""
    where = f"GPU {gpu}'s keys" if gpu is not None else "keys"
    try:
        array = np.asarray(keys)
    except (ValueError, TypeError, OverflowError, UnicodeError) as err:   # ragged lists, odd bytes
        raise InputError(f"{where} cannot be read as a 1-D array of integers ({type(err).__name__}: "
                         f"{str(err)[:200]})") from None
    if array.dtype.kind == "O" and array.size and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in array.ravel()):
        if any(not -2**63 <= int(v) < 2**63 for v in array.ravel()):
            raise InputError(f"{where}: a key does not fit in int64")
        array = array.astype(np.int64)
    if array.ndim != 1:
        raise InputError(f"{where} must be 1-D, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind not in "iu":
        raise InputError(f"{where} must be integers, got dtype {array.dtype}")
    if array.dtype.kind == "u" and array.dtype.itemsize == 8 and array.max() > np.iinfo(np.int64).max:
        position = int(np.argmax(array > np.iinfo(np.int64).max))
        raise InputError(f"{where}: key {int(array[position])} at position {position} does not fit in int64")
    result = array.astype(np.int64, copy=True)
    negative = result < 0
    if negative.any():
        position = int(np.argmax(negative))
        raise InputError(
            f"{where}: key {int(result[position])} at position {position} is negative "
            f"({int(negative.sum())} negative key(s) in total); keys are table rows, >= 0"
        )
    return result


def _check_vocabulary(keys: tuple[np.ndarray, ...], vocab_size: int) -> None:
    total = int(sum((k >= vocab_size).sum() for k in keys))
    if not total:
        return
    gpu = next(g for g, k in enumerate(keys) if (k >= vocab_size).any())
    position = int(np.argmax(keys[gpu] >= vocab_size))
    key = int(keys[gpu][position])
    err = OutOfVocabularyError(
        f"key {key} at position {position} of GPU {gpu}'s input is out of vocabulary "
        f"(vocab_size={vocab_size}; {total} out-of-vocabulary key(s) in total). "
        "How to fix: remove or remap keys >= vocab_size, or use a larger table.",
        sample=position, id=key, vocab_size=vocab_size, count=total,
    )
    err.gpu = gpu
    raise err


def _check_plan(plan) -> None:
    if not isinstance(plan, DispatchPlan):
        raise InputError(f"expected a DispatchPlan from sok.dispatch, got {type(plan).__name__}")


def _check_row_arrays(arrays: Sequence, num_gpus: int, name: str, rows: list[int] | None) -> list[np.ndarray]:
    """Validate one ``[rows, dim]`` array per GPU with a common ``dim``."""
    if len(arrays) != num_gpus:
        raise InputError(f"{name} has {len(arrays)} entries but the plan has {num_gpus} GPUs")
    arrays = [np.asarray(a) for a in arrays]
    dims = set()
    for gpu, array in enumerate(arrays):
        if array.ndim != 2:
            raise InputError(f"{name}[{gpu}] must be 2-D [rows, dim], got shape {array.shape}")
        if rows is not None and array.shape[0] != rows[gpu]:
            raise InputError(f"{name}[{gpu}] has {array.shape[0]} rows but the plan expects {rows[gpu]}")
        dims.add(array.shape[1])
    if len(dims) > 1:
        raise InputError(f"{name} must all have the same width (dim), got widths {sorted(dims)}")
    return arrays


def _row_offsets(counts: np.ndarray) -> np.ndarray:
    offsets = np.zeros((counts.shape[0], counts.shape[1] + 1), dtype=np.int64)
    np.cumsum(counts, axis=1, out=offsets[:, 1:])
    return offsets


def _all_to_all(buffers: Sequence[np.ndarray], offsets: np.ndarray) -> list[np.ndarray]:
    """Simulated all-to-all: peer ``j`` receives ``buffers[i][offsets[i, j]:offsets[i, j+1]]`` for i = 0, 1, ..."""
    peers = len(buffers)
    return [
        np.concatenate([buffers[i][offsets[i, j]:offsets[i, j + 1]] for i in range(peers)], axis=0)
        for j in range(peers)
    ]


def _vector_itemsize(dtype) -> tuple[str, int]:
    if isinstance(dtype, str) and dtype.lower() in VECTOR_DTYPE_SIZES:
        return dtype.lower(), VECTOR_DTYPE_SIZES[dtype.lower()]
    try:
        resolved = np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"unknown vector dtype {dtype!r}; use one of {sorted(VECTOR_DTYPE_SIZES)} or a numpy dtype"
        ) from exc
    return resolved.name, resolved.itemsize


def all_to_all_time(plan: DispatchPlan, embedding_dim: int, dtype="f32", *, bandwidth: float,
                    latency: float = 0.0, key_itemsize: int = 8) -> "xarray.Dataset":
    """Time of each all-to-all of one SOK step from the count matrix (NCCL-style, per GPU).

    Every GPU sends its chunks to all others and receives theirs at once over its own
    link to the fabric (``bandwidth`` bytes/s in each direction, full duplex, as
    NVLink / NVSwitch and InfiniBand ports are), so a GPU needs
    ``max(sent, received) / bandwidth`` and the all-to-all waits for the slowest one::

        time = latency + max over GPUs g of max(sent_g, received_g) / bandwidth

    with ``sent_g`` / ``received_g`` the bytes of :meth:`DispatchPlan.traffic` that
    cross the network (a GPU's chunk for itself is a local copy). ``balanced_time``
    is the same volume spread evenly (``latency + total / G / bandwidth``), so
    ``time / balanced_time`` is what the key skew costs.

    Bandwidths as [nccl-tests] reports them for alltoall (``src/alltoall.cu``,
    ``AlltoAllGetBw``): ``algbw = S / time`` with ``S = count * nranks * typesize``
    the bytes of one rank's send buffer (here the mean over GPUs, local chunk
    included), and ``busbw = algbw * (n - 1) / n``. For a perfectly even exchange
    without latency ``busbw`` equals ``bandwidth``; skew lowers it.

    Parameters
    ----------
    plan : DispatchPlan
        :func:`dispatch` of the step's keys.
    embedding_dim : int
        Width of one vector (and gradient).
    dtype : str or numpy dtype, default ``"f32"``
        Element type of vectors and gradients (:data:`VECTOR_DTYPE_SIZES`).
    bandwidth : float
        Bytes/s of one GPU's link, one direction (e.g. NVLink per GPU).
    latency : float, default 0
        Seconds added to every all-to-all (launch and synchronisation).
    key_itemsize : int, default 8
        Bytes per key on the wire.

    Returns
    -------
    xarray.Dataset
        ``bytes`` (source, destination, phase) (sender -> receiver; phases
        ``keys``, ``vectors``, ``gradients`` as :meth:`DispatchPlan.traffic`);
        ``send_time``, ``receive_time`` (gpu, phase); ``time``, ``balanced_time``,
        ``algbw``, ``busbw``, ``bottleneck_gpu`` (phase).

    Raises
    ------
    ConfigError
        Non-positive bandwidth, negative latency, bad ``embedding_dim`` / dtype.

    Examples
    --------
    The module's example: GPU 1 owns 5 of the 8 keys, so it receives 3 key vectors of
    64 B from GPU 0 and sends them back.

    >>> import numpy as np
    >>> from scwork.sharding import sok
    >>> plan = sok.dispatch([np.array([0, 1, 3, 5]), np.array([4, 5, 6, 7])], num_gpus=2)
    >>> t = sok.all_to_all_time(plan, embedding_dim=16, bandwidth=1e9)
    >>> t["send_time"].sel(phase="vectors").values * 1e9    # ns: GPU 0 sends 2 vectors, GPU 1 sends 3
    array([128., 192.])
    >>> t["time"].sel(phase="vectors").item() * 1e9          # GPU 1 sends (and GPU 0 receives) 192 B
    192.0
    >>> round(t["busbw"].sel(phase="vectors").item() / 1e9, 3)   # (256 B / 192 ns) x 1/2
    0.667
    """
    import xarray as xr

    for name, value, positive in (("bandwidth", bandwidth, True), ("latency", latency, False)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) \
                or value < 0 or (positive and value == 0):
            need = "> 0 (bytes/s per GPU, one direction)" if positive else ">= 0 (seconds)"
            raise ConfigError(f"{name} must be a finite number {need}, got {value!r}")
    _check_plan(plan)
    traffic = plan.traffic(embedding_dim, dtype, key_itemsize=key_itemsize)
    G = plan.num_gpus
    pair = np.stack([traffic["key_bytes"].values, traffic["vector_bytes"].values,
                     traffic["gradient_bytes"].values], axis=-1)                  # (source, destination, phase)
    sent = traffic["sent_bytes"].values.astype(float)                          # (gpu, phase)
    received = traffic["received_bytes"].values.astype(float)
    send_time = sent / bandwidth
    receive_time = received / bandwidth
    per_gpu = np.maximum(send_time, receive_time)
    time = latency + per_gpu.max(axis=0)
    balanced = latency + sent.sum(axis=0) / G / bandwidth
    buffer_bytes = pair.sum(axis=1).mean(axis=0)                               # nccl-tests S, mean over GPUs
    moved = per_gpu.max(axis=0) > 0
    algbw = np.where(moved, buffer_bytes / np.where(time > 0, time, 1.0), 0.0)
    busbw = algbw * (G - 1) / G
    seconds = {"units": "s"}
    return xr.Dataset(
        {
            "bytes": (("source", "destination", "phase"), pair,
                      {"units": "bytes", "long_name": "bytes the source GPU sends to the destination GPU"}),
            "send_time": (("gpu", "phase"), send_time, {**seconds, "long_name": "bytes sent to others / bandwidth"}),
            "receive_time": (("gpu", "phase"), receive_time,
                             {**seconds, "long_name": "bytes received from others / bandwidth"}),
            "time": ("phase", time, {**seconds, "long_name": "all-to-all time: latency + slowest GPU"}),
            "balanced_time": ("phase", balanced,
                              {**seconds, "long_name": "time if the same bytes were spread evenly over GPUs"}),
            "algbw": ("phase", algbw, {"units": "B/s", "long_name": "nccl-tests algbw: send buffer bytes / time"}),
            "busbw": ("phase", busbw, {"units": "B/s", "long_name": "nccl-tests busbw: algbw x (n - 1) / n"}),
            "bottleneck_gpu": ("phase", per_gpu.argmax(axis=0),
                               {"units": "", "long_name": "GPU that takes longest (sending or receiving)"}),
        },
        coords={"source": np.arange(G), "destination": np.arange(G), "gpu": np.arange(G), "phase": list(_PHASES)},
        attrs={"num_gpus": G, "bandwidth": float(bandwidth), "latency": float(latency),
               "model": "time = latency + max over GPUs of max(sent, received) / bandwidth (full duplex)",
               "sources": "HugeCTR SOK all-to-all dispatch; nccl-tests src/alltoall.cu AlltoAllGetBw "
                          "(algbw = count * nranks * typesize / time, busbw = algbw * (n - 1) / n)"},
    )

