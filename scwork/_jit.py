"""Numba helpers shared by every ``_kernels.py``.

Only ``_kernels`` modules import this file, and the public API imports those
lazily (inside functions), so ``import scwork`` neither imports numba nor
compiles anything. ``numba.njit`` without explicit signatures compiles on the
first call, never at import. With ``NUMBA_DISABLE_JIT=1`` numba hands back the
plain Python function, which is how the pure-Python fallback is tested.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import numba

from scwork import _rounding

__all__ = ["jit", "KERNEL_MODULES", "warmup_all", "round_up"]

#: ``_kernels`` modules whose ``warmup()`` compiles their kernels on tiny inputs.
#: A subpackage adds itself here when it gets numba kernels.
KERNEL_MODULES: tuple[str, ...] = (
    "scwork.layout._kernels",
    "scwork.sharding._kernels",
    "scwork.sharding._naive_kernels",
    "scwork.sharding._split_kernels",
    "scwork.sharding._engine_warmup",
    "scwork.sharding._minibatch_kernels",
    "scwork.collectives._kernels",
)


def jit(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``numba.njit`` with scwork's defaults (``cache=True``, ``nogil=True``).

    ``cache=True`` stores machine code next to the source, or in numba's user
    cache directory when that is read-only, so a second process starts fast.
    ``nogil=True`` lets callers run kernels from several threads.
    """
    opts: dict[str, Any] = {"cache": True, "nogil": True}
    opts.update(options)
    if func is None:
        return numba.njit(**opts)
    return numba.njit(**opts)(func)


#: :func:`scwork._rounding.round_up` for kernels: the same function, compiled inline
#: (numba calls no plain Python function from a kernel).
round_up = jit(inline="always")(_rounding.round_up)


def warmup_all(progress: bool | None = None) -> list[str]:
    """Compile (or load from cache) every registered kernel; return module names.

    ``progress``: show a progress bar, one tick per kernel module (None: automatic,
    see :mod:`scwork._progress`).
    """
    from scwork._progress import progress as _progress

    done = []
    for name in _progress(KERNEL_MODULES, desc="compiling numba kernels", enabled=progress, unit="module"):
        module = importlib.import_module(name)
        module.warmup()
        done.append(name)
    return done
