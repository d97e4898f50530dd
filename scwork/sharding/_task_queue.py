"""A shared task counter that compiled kernels take their next task from, without the GIL.

The engine hands a batch's tasks to its worker threads. Handing them out in Python costs
every task a turn of the GIL after its kernel: taking the next task and calling the
kernel (numba unboxes some thirty arguments with the GIL held). On many cores those
turns queue up behind one another. A kernel that loops over the batch's task table
instead takes its next task from this counter, an ``int64`` array of one element
incremented atomically, so one call per worker serves the whole batch.

:func:`take_next` is plain Python under a lock (what runs with ``NUMBA_DISABLE_JIT=1``
and in the numpy references); in a compiled kernel it is one atomic fetch-and-add
(LLVM's ``atomicrmw add``, sequentially consistent).

Examples
--------
>>> import numpy as np
>>> counter = np.zeros(1, np.int64)
>>> [take_next(counter) for _ in range(3)], int(counter[0])
([0, 1, 2], 3)
"""

from __future__ import annotations

import threading

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

__all__ = ["take_next"]

_LOCK = threading.Lock()


def take_next(counter):
    """``counter[0] += 1`` as one indivisible step; returns the value before (the task to run).

    ``counter``: a C-contiguous ``int64`` array of at least one element, zero before the batch.
    """
    with _LOCK:
        k = int(counter[0])
        counter[0] = k + 1
    return k


@intrinsic
def _fetch_add_one(typingctx, counter):
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None
    sig = types.int64(counter)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        first = cgutils.get_item_pointer(context, builder, array_type, array,
                                         [context.get_constant(types.intp, 0)])
        return builder.atomic_rmw("add", first, context.get_constant(types.int64, 1), "seq_cst")

    return sig, codegen


@overload(take_next)
def _take_next_compiled(counter):
    if isinstance(counter, types.Array) and counter.dtype == types.int64:
        return lambda counter: _fetch_add_one(counter)
    return None
