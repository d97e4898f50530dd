"""scwork: the SparseCore workbench engine.

``import scwork`` is cheap: it imports no Jupyter or plotting module, does not
import numba and compiles nothing. Subpackages load on first attribute access
(``scwork.layout``), numba kernels compile on first use or in :func:`warmup`.

Examples
--------
>>> import scwork
>>> shape = scwork.layout.parse("f32[3,5]{1,0:T(2,2)}")
>>> shape.linear_index((2, 3))
17
>>> scwork.Topology.for_chip("v5p", num_chips=4).num_partitions
16
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from scwork import errors
from scwork.hardware.topology import Topology

__version__ = "0.1.0"

__all__ = [
    "errors", "hardware", "layout", "sharding", "memory", "collectives", "pipeline", "quant",
    "advisor", "datasets", "config", "plan", "advise",
    "Topology", "warmup", "__version__",
]

# Subpackages imported on first use (PEP 562), so `import scwork` stays fast.
_LAZY_SUBMODULES = {
    "hardware", "layout", "sharding", "memory", "collectives", "pipeline", "quant", "advisor",
    "datasets", "cli", "widgets", "testing", "config", "plan",
}

if TYPE_CHECKING:  # pragma: no cover
    from scwork import hardware, layout


def __getattr__(name: str):
    if name == "advise":
        from scwork.advisor import advise

        globals()["advise"] = advise
        return advise
    if name in _LAZY_SUBMODULES:
        module = importlib.import_module(f"scwork.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'scwork' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_SUBMODULES | {"advise"})


def warmup(verbose: bool = False, progress: bool | None = None) -> list[str]:
    """Compile every numba kernel now (or load it from numba's cache).

    Kernels otherwise compile on first use, which makes the first interaction
    in a notebook slow; call this once at start-up (Binder does it at build time).

    Parameters
    ----------
    verbose : bool
        Print one line per kernel module warmed up.
    progress : bool or None
        Progress bar, one tick per kernel module: True, False, or None (automatic:
        shown in a terminal or notebook unless ``SCWORK_PROGRESS=0``; see
        :mod:`scwork._progress`).

    Returns
    -------
    list of str
        The kernel modules that were warmed up.
    """
    from scwork._jit import warmup_all

    done = warmup_all(progress=progress)
    if verbose:
        for name in done:
            print(f"warmed up {name}")
    return done
