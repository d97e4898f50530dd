"""Testing helpers shared by scwork's own tests and by users' tests.

Hypothesis strategies for valid layouts (hypothesis is imported here only, never
by ``import scwork``), following ``xarray.testing.strategies``.

Examples
--------
>>> from hypothesis import given
>>> from scwork.testing import tiled_shapes
>>> @given(tiled_shapes())
... def test_round_trip(shape):
...     assert (shape.from_physical(shape.to_physical(shape.index_map())) == shape.index_map()).all()
>>> test_round_trip()
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import resource
import signal
import sys

import numpy as np
from hypothesis import strategies as st

from scwork.errors import ScworkError
from scwork.layout import Shape

__all__ = [
    "tile_lists",
    "tiled_shapes",
    "python_version",
    "garbage_empty",
    "oracle_examples",
    "fuzz_examples",
    "WatchdogTimeout",
    "watchdog",
    "check_surface",
    "report_wrong",
    "fuzz_counts",
]


@st.composite
def tile_lists(draw, dims, minor_to_major, max_levels=3, max_tile=5, allow_combine=True,
               combine_odds=4):
    """Valid tiles for a shape: lengths fit each level, '*' never last nor on missing dims.

    A first tile may be longer than the shape (XLA counts the missing major dims as
    size 1); ``*`` appears with probability ``1/combine_odds`` where it is allowed.
    """
    tiles: list[tuple[int, ...]] = []
    current = Shape("f32", dims, minor_to_major).tiled_shape
    for level in range(draw(st.integers(0, max_levels))):
        longest = min(len(current) + (1 if level == 0 else 0), 4)
        if longest == 0:
            break
        length = draw(st.integers(1, longest))
        missing = max(0, length - len(current))
        entries = []
        for j in range(length):
            combine = (allow_combine and missing <= j < length - 1
                       and draw(st.integers(0, combine_odds - 1)) == 0)
            entries.append(-1 if combine else draw(st.integers(1, max_tile)))
        tiles.append(tuple(entries))
        current = Shape("f32", dims, minor_to_major, tiles=tiles).tiled_shape
    return tuple(tiles)


@st.composite
def tiled_shapes(draw, max_rank=3, max_dim=7, max_levels=3, allow_combine=True, min_dim=0,
                 max_tile=4, dtypes=("f32", "bf16", "s8", "pred"), alignments=(1,)):
    """Random shapes with 0..``max_levels`` tile levels, '*' entries, rank-deficient first tiles."""
    rank = draw(st.integers(0, max_rank))
    dims = tuple(draw(st.lists(st.integers(min_dim, max_dim), min_size=rank, max_size=rank)))
    m2m = tuple(draw(st.permutations(range(rank))))
    tiles = draw(tile_lists(dims, m2m, max_levels=max_levels, max_tile=max_tile,
                            allow_combine=allow_combine))
    return Shape(draw(st.sampled_from(list(dtypes))), dims, m2m, tiles=tiles,
                 tail_padding_alignment=draw(st.sampled_from(list(alignments))))


def python_version(kernel):
    """The undecorated function of a numba kernel (``py_func``), or the kernel itself without JIT."""
    return getattr(kernel, "py_func", kernel)


def garbage_empty(monkeypatch, module) -> None:
    """Make ``module.np.empty`` return arrays filled with garbage (-77 / -77.5).

    ``np.empty`` leaves whatever was in memory; filling it with garbage makes a test
    fail when code reads a slot it never wrote (e.g. CSR padding).
    """
    real_empty = np.empty

    def empty(shape, dtype=float, *args, **kwargs):
        out = real_empty(shape, dtype, *args, **kwargs)
        out.fill(-77 if np.dtype(dtype).kind != "f" else -77.5)
        return out

    monkeypatch.setattr(module.np, "empty", empty)


def oracle_examples(default: int = 60) -> int:
    """Hypothesis examples for one oracle test: ``--oracle-examples N`` or ``default``.

    ``pytest --oracle-examples N`` sets the environment variable ``SCWORK_ORACLE_EXAMPLES``
    before the test modules are imported (``tests/conftest.py``).
    """
    return int(os.environ.get("SCWORK_ORACLE_EXAMPLES", default))


def fuzz_examples(default: int = 40) -> int:
    """Generated cases for one fuzz surface: ``--fuzz-examples N`` or ``default``.

    CI runs the default slice on every run; ``pytest -m fuzz --fuzz-examples 10000`` is
    the full run.
    """
    return int(os.environ.get("SCWORK_FUZZ_EXAMPLES", default))


class WatchdogTimeout(BaseException):
    """A fuzz case ran past its time budget (a hang or unbounded work).

    A ``BaseException`` so that code under test which catches ``Exception`` cannot
    swallow it and hide the hang.
    """


def _data_segment_bytes() -> int:
    """Current private data size of this process (VmData), what RLIMIT_DATA limits."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@contextlib.contextmanager
def watchdog(seconds: float = 10.0, memory_bytes: int = 2 * 2**30):
    """Bound the time and the new memory of the code inside the block.

    - Time: after ``seconds`` a :class:`WatchdogTimeout` is raised in the main thread
      (SIGALRM). Native code that never returns to the interpreter (a numba or numpy
      loop) is caught by a second line of defence: after ``3 * seconds + 30`` s
      faulthandler prints every thread's stack and ends the process, so a hang fails
      the run instead of blocking the machine.
    - Memory: the process's data segment may grow by at most ``memory_bytes`` (Linux
      RLIMIT_DATA, which counts anonymous mappings and so numpy arrays); a larger
      allocation raises :class:`MemoryError`, which a fuzz test counts as untyped.

    Outside the main thread or on platforms without SIGALRM only the faulthandler
    guard applies.
    """
    in_main = (hasattr(signal, "SIGALRM")
               and signal.getsignal(signal.SIGALRM) is not None
               and __import__("threading").current_thread() is __import__("threading").main_thread())
    previous_handler = None
    previous_limit = None
    if in_main:
        def _on_alarm(signum, frame):
            raise WatchdogTimeout(f"still running after {seconds:g} s")

        previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    if sys.platform.startswith("linux") and memory_bytes is not None:
        previous_limit = resource.getrlimit(resource.RLIMIT_DATA)
        soft = _data_segment_bytes() + int(memory_bytes)
        hard = previous_limit[1]
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    faulthandler.dump_traceback_later(3 * seconds + 30, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        if previous_limit is not None:
            resource.setrlimit(resource.RLIMIT_DATA, previous_limit)
        if in_main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_handler)


_FUZZ_COUNTS: dict[str, dict[str, int]] = {}


def _count(surface: str, outcome: str) -> None:
    counts = _FUZZ_COUNTS.setdefault(
        surface, {"cases": 0, "typed_errors": 0, "untyped": 0, "hangs": 0, "wrong": 0})
    counts[outcome] += 1


def fuzz_counts() -> dict[str, dict[str, int]]:
    """Outcomes counted by :func:`check_surface` in this process, per surface."""
    return {surface: dict(counts) for surface, counts in _FUZZ_COUNTS.items()}


def check_surface(surface: str, call, *, seconds: float = 10.0, memory_bytes: int = 2 * 2**30,
                  allowed=(ScworkError,)):
    """Run ``call()`` as one fuzz case of ``surface`` under :func:`watchdog`.

    Returns ``(result, None)`` when the call returns and ``(None, error)`` when it
    raises one of ``allowed`` (scwork's typed errors by default). Any other exception
    (an untyped error: TypeError, OverflowError, MemoryError, ...) or a timeout is
    counted and re-raised as an ``AssertionError`` naming the surface, so hypothesis
    shrinks it to a minimal input. Check the result for silent wrong answers and call
    :func:`report_wrong` when one is found.

    Examples
    --------
    >>> import scwork
    >>> result, error = check_surface("layout.parse", lambda: scwork.layout.parse("f32[3,"))
    >>> type(error).__name__
    'LayoutError'
    """
    _count(surface, "cases")
    try:
        with watchdog(seconds, memory_bytes):
            result = call()
    except allowed as error:
        _count(surface, "typed_errors")
        return None, error
    except WatchdogTimeout as error:
        _count(surface, "hangs")
        raise AssertionError(f"{surface}: hang or unbounded work ({error})") from None
    except Exception as error:  # noqa: BLE001 - counting every untyped error is the point
        _count(surface, "untyped")
        raise AssertionError(
            f"{surface}: untyped {type(error).__name__}: {error}"[:2000]) from error
    return result, None


def report_wrong(surface: str, message: str):
    """Count a silently wrong result of ``surface`` and fail with ``message``."""
    _count(surface, "wrong")
    raise AssertionError(f"{surface}: silently wrong result: {message}")
