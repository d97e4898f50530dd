"""The input checks of ``execute``: shape, dtype, finite values, sums that fit.

Used by :func:`scwork.collectives.execute`.

Each value check screens the whole array with its maximum and minimum first
(no temporary arrays: on 1 GiB of data the old whole-array ``abs`` and
float64 copies cost more than running the schedule), and looks for the
offending node or element, slice by slice, only when the screen fails. The
fused all-reduce (:mod:`scwork.collectives._fused`) does the same checks
inside its kernel and calls :func:`check_values` for the message.
"""

from __future__ import annotations

import numpy as np

from scwork.collectives.schedule import Schedule
from scwork.errors import ConfigError, InputError

__all__ = ["as_data", "check_values", "work_dtype"]


def as_data(schedule: Schedule, data, *, check: bool = True) -> np.ndarray:
    """``data`` as an array of shape (nodes, L), numeric (bool as int64); ``check``: :func:`check_values` too."""
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as error:       # ragged lists
        raise ConfigError(f"data must be an array of shape (num_nodes, length): {error}") from None
    N = schedule.network.num_nodes
    if arr.ndim != 2 or arr.shape[0] != N:
        raise ConfigError(
            f"data must have shape (num_nodes, length) = ({N}, L): one vector per node of "
            f"{schedule.network.name}; got shape {arr.shape}"
        )
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iufc":
        raise ConfigError(f"data must be numeric, got dtype {arr.dtype}")
    if check:
        check_values(schedule, arr)
    return arr


def check_values(schedule: Schedule, arr: np.ndarray) -> None:
    """Refuse values no schedule can be checked on: non-finite floats, sums that overflow.

    Each check first screens the whole array with its maximum and minimum (no
    temporary arrays) and looks for the offending node or element, in slices,
    only when the screen fails.
    """
    if not arr.size:
        return
    if arr.dtype.kind in "fc":
        # One maximum and one minimum per real part serve both checks (two passes over the data).
        extremes = [(part.max(), part.min()) for part in _real_parts(arr)]
        _check_finite(arr, extremes)
        if schedule.collective in ("all_reduce", "reduce_scatter"):
            _check_float_sums(arr, extremes)
    else:
        _check_integer_sums(arr)


#: Cells (nodes x elements) per slice of the checks' slow paths (their temporaries).
_CHECK_SLICE_CELLS = 1 << 22


def _real_parts(arr: np.ndarray) -> tuple:
    return (arr.real, arr.imag) if arr.dtype.kind == "c" else (arr,)


def _check_finite(arr: np.ndarray, extremes: list) -> None:
    # max and min propagate NaN, and an infinity is one of them.
    if all(np.isfinite(top) and np.isfinite(bottom) for top, bottom in extremes):
        return
    rows = max(1, _CHECK_SLICE_CELLS // max(1, arr.shape[1]))
    first, count = None, 0
    for r in range(0, arr.shape[0], rows):           # row slices keep the row-major order of the first one
        bad = ~np.isfinite(arr[r:r + rows])
        count += int(bad.sum())
        if first is None and bad.any():
            first = (r + int(np.argwhere(bad)[0][0]), int(np.argwhere(bad)[0][1]))
    node, element = first
    raise InputError(
        f"data[{node}, {element}] is {arr[node, element]}: the input is not finite ({count} such values), so "
        "no schedule can be checked against its sum; give finite data")


def _column_slices(arr: np.ndarray):
    cols = max(1, _CHECK_SLICE_CELLS // max(1, arr.shape[0]))
    for a in range(0, arr.shape[1], cols):
        yield a, arr[:, a:a + cols]


def _check_float_sums(arr: np.ndarray, extremes: list) -> None:
    """Refuse float data whose sums could overflow the working dtype to inf.

    An overflowing sum would read as a wrong schedule (or, float64 inf against inf,
    as a correct one); every partial sum is bounded by the sum of ``|x|`` over the nodes.
    Screen: nodes x the largest ``|x|`` (complex: ``|re| + |im|``) within half the
    limit leaves room for the rounding of any float64 sum; else the sums per element.
    """
    work = np.finfo(work_dtype(arr.dtype) if arr.dtype.kind == "f" else arr.real.dtype)
    top = sum(max(abs(float(high)), abs(float(low))) for high, low in extremes)
    if arr.shape[0] * top <= float(work.max) / 2:
        return
    for a, blk in _column_slices(arr):
        with np.errstate(over="ignore"):
            bound = np.abs(blk).astype(np.float64).sum(axis=0)
        over = bound > work.max
        if over.any():
            element = int(np.argmax(over))
            raise InputError(
                f"element {a + element}: the sum of |data| over the nodes is {float(bound[element]):.4g}, beyond "
                f"the largest {work.dtype} ({float(work.max):.4g}); its all-reduce would overflow to inf. Use "
                "smaller values or a wider dtype (float64)")


_INT64_MAX = np.iinfo(np.int64).max


def _check_integer_sums(arr: np.ndarray) -> None:
    """Refuse integer data whose sums could leave int64 (they would wrap silently).

    Every partial sum of an element, in any order, is bounded by the sum of the
    absolute values over the nodes; that bound must fit in int64.
    """
    top_value, bottom_value = int(arr.max()), int(arr.min())
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and top_value > _INT64_MAX:
        node, element = (int(i) for i in np.argwhere(arr > _INT64_MAX)[0])
        raise InputError(f"data[{node}, {element}] = {int(arr[node, element])} does not fit in int64, in which "
                         "scwork sums integers exactly; use smaller values or floats")
    # Exact screen (Python integers): nodes x the largest |x| bounds every sum.
    if arr.shape[0] * max(abs(top_value), abs(bottom_value)) <= _INT64_MAX:
        return
    # A float64 screen per element (exact to within 2**-52 relative), then exact
    # Python ints for the elements near the limit.
    for a, blk in _column_slices(arr):
        screen = np.abs(blk.astype(np.float64)).sum(axis=0)
        for element in np.flatnonzero(screen > 2.0**62):
            bound = sum(abs(int(v)) for v in blk[:, element])
            if bound > _INT64_MAX:
                raise InputError(
                    f"element {a + int(element)}: the sum of |data| over the nodes is {bound}, beyond int64 "
                    f"({_INT64_MAX}); an integer all-reduce of it would wrap around. Use smaller values, "
                    "or float64 data")


def work_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.kind in "iu":
        return np.dtype(np.int64)
    if dtype.kind == "f" and dtype.itemsize < 4:
        return np.dtype(np.float32)
    return dtype


