"""A keyed bijection of ``[0, V)`` that scatters hot ranks over the vocabulary.

:func:`hash_ids` does to synthetic ids what hashing does to categorical ids in real
data.
"""

from __future__ import annotations

import numpy as np

from scwork.datasets._checks import _check_vocab
from scwork.errors import InputError

__all__ = ["hash_ids"]


# ======================================================================================
# Hashing: a bijection of [0, V) that scatters hot ids
# ======================================================================================

# Odd multipliers (from splitmix64 / murmur3 finalisers); odd => invertible mod 2**n.
_MIX_MULTIPLIERS = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_GOLDEN = 0x9E3779B97F4A7C15


def hash_ids(ids, vocab_size: int, *, key: int = 0) -> np.ndarray:
    """Scatter ids over ``[0, vocab_size)`` with a fixed bijection (a permutation).

    Why: Zipf ranks 0, 1, 2, ... would put every hot id on partition 0 of a
    mod-sharded table; real hashed ids are spread out. The permutation is a
    cycle-walking bit mixer: ``n = bit_length(V - 1)``; on ``[0, 2**n)`` apply
    ``x + c``, xor-shift, multiply by an odd constant, xor-shift, multiply, xor-shift
    (each step is a bijection of ``n``-bit integers), and while the result is
    ``>= V`` apply the mixer again. Walking the permutation's cycle this way lands
    back in ``[0, V)``, so the map is a bijection of ``[0, V)`` for every ``V``;
    since ``2**n < 2 V`` it takes fewer than 2 rounds on average.

    Parameters
    ----------
    ids : array_like of int
        Values in ``[0, vocab_size)``.
    vocab_size : int
        ``V >= 1``.
    key : int, default 0
        Selects one of many permutations (:func:`synthetic` uses a CRC-32 of the
        feature name, so different features have different hot ids).

    Returns
    -------
    numpy.ndarray of int64

    Examples
    --------
    >>> import numpy as np
    >>> from scwork.datasets import hash_ids
    >>> out = hash_ids(np.arange(10), 10)
    >>> sorted(out.tolist()) == list(range(10))      # a permutation of 0..9
    True
    >>> hash_ids([0, 1, 2, 3], 1_000_000).tolist() == hash_ids([0, 1, 2, 3], 1_000_000).tolist()
    True
    """
    vocab_size = _check_vocab(vocab_size, "vocab_size")
    values = np.asarray(ids)
    if values.size and values.dtype.kind not in "iu":
        raise InputError(f"ids must be integers, got dtype {values.dtype}")
    values = values.astype(np.int64, copy=False)
    if values.size and (values.min() < 0 or values.max() >= vocab_size):
        bad = int(np.flatnonzero((values < 0) | (values >= vocab_size))[0])
        raise InputError(
            f"hash_ids: id {int(values.flat[bad])} at position {bad} is outside [0, {vocab_size})"
        )
    bits = (vocab_size - 1).bit_length()
    if bits == 0:
        return np.zeros(values.shape, dtype=np.int64)
    mask = np.uint64((1 << bits) - 1)
    offset = np.uint64(((_GOLDEN * (int(key) + 1)) & ((1 << 64) - 1)) & int(mask))
    shift = np.uint64(max(1, (bits + 1) // 2))
    limit = np.uint64(vocab_size)

    def mix(x: np.ndarray) -> np.ndarray:
        x = (x + offset) & mask
        x ^= x >> shift
        x = (x * _MIX_MULTIPLIERS[0]) & mask
        x ^= x >> shift
        x = (x * _MIX_MULTIPLIERS[1]) & mask
        x ^= x >> shift
        return x

    mixed = mix(values.astype(np.uint64).ravel())
    outside = np.flatnonzero(mixed >= limit)
    while outside.size:  # cycle walking
        walked = mix(mixed[outside])
        mixed[outside] = walked
        outside = outside[walked >= limit]
    return mixed.astype(np.int64).reshape(values.shape)
