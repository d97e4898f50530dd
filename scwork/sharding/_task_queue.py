"""A shared task counter that compiled kernels take their next task from, without the GIL.

The engine hands a batch's tasks to its worker threads. Handing them out in Python costs
every task a turn of the GIL after its kernel: taking the next task and calling the
kernel (numba unboxes some thirty arguments with the GIL held). On many cores those
turns queue up behind one another. A kernel that loops over the batch's task table
instead takes its next task from a counter, an ``int64`` array element incremented
atomically, so one call per worker serves the whole batch (or, when the batch spans
several stacks, one call per worker and stack it helps with: each stack's tasks have
a counter of their own).

:func:`take_next` is plain Python under a lock (what runs with ``NUMBA_DISABLE_JIT=1``
and in the numpy references); in a compiled kernel it is one atomic fetch-and-add
(LLVM's ``atomicrmw add``, sequentially consistent).

Examples
--------
>>> import numpy as np
>>> counters = np.zeros(16, np.int64)
>>> [take_next(counters, 8) for _ in range(3)], counters[[0, 8]].tolist()
([0, 1, 2], [0, 3])
"""

from __future__ import annotations

import threading

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from scwork._jit import jit

__all__ = ["next_task", "take_next"]

_LOCK = threading.Lock()


def take_next(counters, slot):
    """``counters[slot] += 1`` as one indivisible step; returns the value before (the task to run).

    ``counters``: a C-contiguous ``int64`` array, its ``slot`` zero before the batch. (The
    engine keeps each counter of a batch on a 64-byte line of its own: ``slot`` a
    multiple of 8, so that workers on different stacks do not contend for one line.)
    """
    with _LOCK:
        k = int(counters[slot])
        counters[slot] = k + 1
    return k


@intrinsic
def _fetch_add_one(typingctx, counters, slot):
    if not (isinstance(counters, types.Array) and counters.dtype == types.int64 and counters.ndim == 1
            and isinstance(slot, types.Integer)):
        return None
    sig = types.int64(counters, slot)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        index = context.cast(builder, args[1], signature.args[1], types.intp)
        at = cgutils.get_item_pointer(context, builder, array_type, array, [index])
        return builder.atomic_rmw("add", at, context.get_constant(types.int64, 1), "seq_cst")

    return sig, codegen


@overload(take_next)
def _take_next_compiled(counters, slot):
    if isinstance(counters, types.Array) and counters.dtype == types.int64 and isinstance(slot, types.Integer):
        return lambda counters, slot: _fetch_add_one(counters, slot)
    return None


@jit(inline="always")
def next_task(order, first, last, counters, slot):
    """The task a queued kernel runs next: ``order[first + k]`` for the ``k`` it takes from
    ``counters[slot]`` (:func:`take_next`), or -1 once that passes the stack's ``last``.

    The loop every queued kernel runs::

        for _ in range(last - first):       # each turn takes a task, or ends the loop
            i = next_task(order, first, last, counters, slot)
            if i < 0:
                break
            ...                              # task i
    """
    k = first + take_next(counters, slot)
    return order[k] if k < last else -1
