"""The input dispatcher: each GPU's keys grouped by owner GPU (``key % G``) and exchanged."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scwork.errors import ConfigError, InputError
from scwork.sharding.sok._checks import (
    _all_to_all,
    _as_keys,
    _check_num_gpus,
    _check_vocabulary,
    _PHASES,
    _row_offsets,
    _vector_itemsize,
)

__all__ = ["DispatchPlan", "dispatch", "owner_gpu"]


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


def _check_plan(plan) -> None:
    if not isinstance(plan, DispatchPlan):
        raise InputError(f"expected a DispatchPlan from sok.dispatch, got {type(plan).__name__}")
