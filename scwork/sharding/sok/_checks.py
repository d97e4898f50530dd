"""Checks and small helpers every stage of the SOK model shares: GPUs, keys, plans, row arrays."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from scwork.errors import ConfigError, InputError, OutOfVocabularyError

__all__ = ["VECTOR_DTYPE_SIZES"]


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
