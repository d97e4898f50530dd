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
    "fuzz_settings",
    "weighted",
    "arguments",
    "transfer_lists",
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


def fuzz_settings(*suppress) -> dict:
    """Keyword arguments of ``hypothesis.settings`` for a fuzz test.

    :func:`fuzz_examples` cases, no deadline (the watchdog of :func:`check_surface`
    bounds each case instead), and the health checks that hostile inputs trip by
    design (slow cases, large or mostly filtered draws) suppressed, plus ``suppress``.
    """
    from hypothesis import HealthCheck

    return {"max_examples": fuzz_examples(), "deadline": None,
            "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much, *suppress]}


def weighted(*choices):
    """Strategy: one of ``(weight, strategy)`` pairs with those odds.

    ``st.one_of`` flattens nested one_ofs and weighs every leaf alike, so one
    ``odd_arrays()`` branch (itself five branches) would outweigh a single valid one.
    """
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def arguments(data, valid: dict, odd=None) -> dict:
    """Keyword arguments drawn from ``valid``; in about half the cases one of them is odd instead.

    ``data`` is ``st.data()`` or the ``draw`` of a composite strategy; ``odd`` the
    strategy for the broken argument (default :func:`odd_scalars`). Breaking one
    argument at a time keeps most cases past the first check, so the code behind it
    meets hostile values too.
    """
    draw = getattr(data, "draw", data)
    names = list(valid)
    broken = draw(st.sampled_from([None] * max(1, len(names)) + names))
    return {name: draw((odd_scalars() if odd is None else odd) if name == broken else strategy)
            for name, strategy in valid.items()}


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


# -- sharding input surfaces (fuzz strategies) ------------------------------------------------
#: Integers at the edges of the dtypes the sharding engine uses (int32 offsets, int64 ids).
EDGE_INTEGERS = (0, 1, -1, 2**31 - 1, 2**31, -2**31 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, -2**63,
                 -2**63 - 1, 2**64, 10**30)
#: Floats at the edges of float32/float64: overflow, underflow, subnormals, NaN.
EDGE_FLOATS = (0.0, -0.0, 0.5, 1.0, 3.9, 1e-46, 1e-40, 1e-30, 1e-20, 1e19, 1e20, 3e38, 3.5e38, 1e300,
               float("inf"), float("-inf"), float("nan"), 2.0**63, -2.0**63)
#: Texts that look like integers to ``int()`` but are not ASCII digit strings.
TRICKY_INTEGER_TEXTS = ("1_000", "\u0661\u0662", "+5", " 7 ", "1e3", "0x10", "٣", "Ⅻ", "9" * 5000, "-0",
                        "", " ", "1,2", "nan", "inf", "1.0", "１２")


def odd_scalars():
    """Single values of every kind a careless caller passes as an id, weight or count."""
    return st.one_of(
        st.integers(-2**70, 2**70), st.sampled_from(EDGE_INTEGERS), st.sampled_from(EDGE_FLOATS),
        st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
        st.sampled_from(TRICKY_INTEGER_TEXTS), st.text(max_size=6), st.binary(max_size=4),
        st.complex_numbers(max_magnitude=10, allow_nan=False, allow_infinity=False))


def odd_arrays(max_size: int = 6):
    """Array-likes: lists of odd scalars, nested and ragged lists, numpy arrays of any dtype."""
    flat = st.lists(odd_scalars(), max_size=max_size)
    nested = st.lists(st.one_of(odd_scalars(), flat), max_size=max_size)
    dtypes = st.sampled_from(["int8", "int32", "int64", "uint64", "float16", "float32", "float64", "bool",
                              "complex64", "U3", "O"])

    @st.composite
    def typed(draw):
        values = draw(st.lists(st.integers(-5, 2**20), max_size=max_size))
        dtype = draw(dtypes)
        shape = draw(st.sampled_from([(len(values),), (1, len(values)), (len(values), 1)]))
        if dtype == "O":
            return np.asarray(values, dtype=object).reshape(shape)
        with np.errstate(over="ignore", invalid="ignore"):      # wrapping into small dtypes is the point
            return np.asarray(values).astype(dtype, copy=False).reshape(shape)

    return st.one_of(flat, nested, typed(), odd_scalars(), st.dictionaries(st.text(max_size=3), odd_scalars(),
                                                                            max_size=2))


@st.composite
def ragged_feature(draw, batch_size: int, vocab: int = 40, max_len: int = 4, weighted=None):
    """A valid ``(ids, row_splits[, weights])`` triple of ``batch_size`` samples (ids < vocab + 2)."""
    lengths = draw(st.lists(st.integers(0, max_len), min_size=batch_size, max_size=batch_size))
    total = int(sum(lengths))
    ids = draw(st.lists(st.integers(0, max(vocab - 1, 0)), min_size=total, max_size=total))
    if total and draw(st.integers(0, 4)) == 4:          # sometimes an out-of-vocabulary id
        ids[draw(st.integers(0, total - 1))] = vocab + draw(st.integers(0, 1))
    row_splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if weighted is None:
        weighted = draw(st.booleans())
    if not weighted:
        return np.asarray(ids, np.int64), row_splits
    weights = draw(st.lists(st.floats(-4, 4, allow_nan=False), min_size=total, max_size=total))
    for _ in range(draw(st.integers(0, 2)) if total else 0):   # sometimes float32-edge weights
        weights[draw(st.integers(0, total - 1))] = draw(st.sampled_from(EDGE_FLOATS[:14]))
    return np.asarray(ids, np.int64), row_splits, np.asarray(weights, np.float64)


def feature_names():
    """Feature names: mostly short ASCII, sometimes odd (empty, non-string)."""
    return st.one_of(st.sampled_from(["a", "b", "c"]), st.text(max_size=3), st.integers(0, 2), st.none())


@st.composite
def feature_batch_calls(draw):
    """``(constructor, args, kwargs)`` for a FeatureBatch constructor, valid or broken.

    ``constructor`` is one of ``"from_ragged"``, ``"from_dense"``, ``"from_coo"``,
    ``"from_columns"``; the arguments are either valid data (then mutated, maybe) or
    :func:`odd_arrays` in any position.
    """
    kind = draw(st.sampled_from(["from_ragged", "from_dense", "from_coo", "from_columns"]))
    batch_size = draw(st.integers(0, 4))
    names = draw(st.lists(feature_names(), min_size=1, max_size=3, unique_by=repr))
    broken = draw(st.integers(0, 3)) == 3          # one in four: arguments from odd_arrays
    kwargs: dict = {}
    if kind == "from_ragged":
        data = {n: draw(ragged_feature(batch_size)) for n in names}
        if broken and data:
            n = draw(st.sampled_from(list(data)))
            pos = draw(st.integers(0, len(data[n]) - 1))
            entry = list(data[n])
            entry[pos] = draw(odd_arrays())
            data[n] = tuple(entry)
    elif kind == "from_dense":
        width = draw(st.integers(0, 4))
        data = {n: draw(st.lists(st.lists(st.integers(-2, 50), min_size=width, max_size=width),
                                 min_size=batch_size, max_size=batch_size)) for n in names}
        if broken and data:
            data[draw(st.sampled_from(list(data)))] = draw(odd_arrays())
        if draw(st.booleans()):
            kwargs["pad"] = draw(st.one_of(st.just(-1), odd_scalars()))
    elif kind == "from_coo":
        data = {}
        for n in names:
            width = draw(st.integers(1, 3))
            cells = draw(st.lists(st.tuples(st.integers(0, max(batch_size - 1, 0)), st.integers(0, width - 1)),
                                  max_size=6, unique=True)) if batch_size else []
            data[n] = ([list(c) for c in cells], draw(st.lists(st.integers(0, 50), min_size=len(cells),
                                                               max_size=len(cells))),
                       (batch_size, width))
        if broken and data:
            n = draw(st.sampled_from(list(data)))
            entry = list(data[n])
            entry[draw(st.integers(0, 2))] = draw(st.one_of(odd_arrays(), st.tuples(odd_scalars(), odd_scalars())))
            data[n] = tuple(entry)
    else:
        import pandas as pd

        columns = {}
        for n in names:
            if not isinstance(n, str):
                continue
            cells = draw(st.lists(st.one_of(st.integers(-1, 50), st.none(), st.sampled_from(TRICKY_INTEGER_TEXTS),
                                            st.lists(st.integers(0, 50), max_size=3),
                                            st.text(alphabet="0123456789, ", max_size=8)),
                                  min_size=batch_size, max_size=batch_size))
            columns[n] = cells
        data = pd.DataFrame({n: pd.Series(c, dtype=object) for n, c in columns.items()}) if columns \
            else pd.DataFrame(index=range(batch_size))
        if draw(st.booleans()):
            kwargs["sep"] = draw(st.sampled_from([",", "|", "", " "]))
        return kind, (data,), kwargs
    if not broken and draw(st.integers(0, 7)) == 7:
        data = draw(odd_arrays())                  # not a dict at all
    if kind in ("from_dense", "from_coo") and draw(st.integers(0, 4)) == 4:
        kwargs["weights"] = draw(st.one_of(
            st.dictionaries(feature_names(), odd_arrays(), max_size=2), odd_arrays()))
    return kind, (data,), kwargs


@st.composite
def sharding_engine_cases(draw, max_devices: int = 3, max_sparsecores: int = 4):
    """Inputs of ``compute_stats`` / ``preprocess``: valid by default, one part broken at times.

    Returns a dict with ``data`` (``{feature: (ids, row_splits[, weights])}``),
    ``tables`` (per feature: TableSpec keyword arguments), ``topology`` (``(G, S)`` or
    an odd object), ``config`` (SparsecoreConfig keyword arguments), ``stacking``,
    ``on_out_of_vocabulary``, ``stack_limits``, ``num_threads`` and ``broken`` (the
    name of the broken part or None). Build the objects inside the call under test,
    so that constructor errors are checked too.
    """
    G = draw(st.integers(1, max_devices))
    S = draw(st.integers(1, max_sparsecores))
    batch_size = G * S * draw(st.integers(1, 3))
    nfeat = draw(st.integers(1, 3))
    names = ["a", "b", "c"][:nfeat]
    data, tables = {}, {}
    shared = draw(st.booleans())
    for i, n in enumerate(names):
        vocab = draw(st.integers(1, 40))
        data[n] = draw(ragged_feature(batch_size, vocab=vocab, weighted=draw(st.integers(0, 2)) == 2))
        limit = draw(st.one_of(st.none(), st.integers(1, 12)))
        tables[n] = {"name": f"t{i}", "vocab_size": vocab,
                     "embedding_dim": draw(st.sampled_from([1, 4, 8, 16, 24])),
                     "combiner": draw(st.sampled_from(["sum", "mean", "sqrtn"])),
                     "max_ids_per_partition": limit,
                     "max_unique_ids_per_partition": draw(st.one_of(st.none(), st.integers(1, 12)))}
    if shared:      # every feature looks up table t0 (one spec)
        for n in names[1:]:
            tables[n] = dict(tables[names[0]])
    case = {"data": data, "tables": tables, "topology": (G, S),
            "config": {"allow_id_dropping": draw(st.booleans()),
                       "max_ids_per_chip_per_sample": draw(st.one_of(st.none(), st.integers(1, 256)))},
            "stacking": draw(st.sampled_from(["auto", None])),
            "on_out_of_vocabulary": draw(st.sampled_from(["error", "drop"])),
            "stack_limits": None, "num_threads": draw(st.sampled_from([1, 1, 2])), "broken": None}
    part = draw(st.sampled_from([None] * 6 + ["topology", "table", "config", "stacking", "oov", "stack_limits",
                                              "num_threads", "batch_size"]))
    case["broken"] = part
    if part == "topology":
        case["topology"] = draw(st.one_of(st.tuples(st.integers(-2, 3), st.integers(-2, 5)), odd_scalars()))
    elif part == "table":
        n = draw(st.sampled_from(names))
        field = draw(st.sampled_from(["vocab_size", "embedding_dim", "combiner", "max_ids_per_partition",
                                      "max_unique_ids_per_partition", "name"]))
        tables[n][field] = draw(odd_scalars())
    elif part == "config":
        case["config"][draw(st.sampled_from(["allow_id_dropping", "max_ids_per_chip_per_sample",
                                             "max_ids_per_table"]))] = draw(odd_scalars())
    elif part == "stacking":
        case["stacking"] = draw(st.one_of(odd_scalars(), st.lists(st.lists(st.sampled_from(["t0", "t1", "t9"]),
                                                                           max_size=3), max_size=3)))
    elif part == "oov":
        case["on_out_of_vocabulary"] = draw(odd_scalars())
    elif part == "stack_limits":
        case["stack_limits"] = draw(st.one_of(odd_scalars(), st.dictionaries(
            st.sampled_from(["t0", "t1", "t9"]), st.one_of(st.tuples(odd_scalars(), odd_scalars()), odd_scalars()),
            max_size=2)))
    elif part == "num_threads":
        case["num_threads"] = draw(odd_scalars())
    elif part == "batch_size":
        n = draw(st.sampled_from(names))
        data[n] = draw(ragged_feature(batch_size + draw(st.integers(1, 2)), vocab=tables[n]["vocab_size"]))
        for other in names:
            if other != n:
                data[other] = draw(ragged_feature(batch_size + 1, vocab=tables[other]["vocab_size"]))
    return case


def mutated_bytes(data: bytes):
    """Strategy: ``data`` truncated, with flipped bits, spliced garbage, or replaced by random bytes."""
    @st.composite
    def mutate(draw):
        how = draw(st.sampled_from(["same", "truncate", "flip", "splice", "random"]))
        if how == "same" or not data:
            return data if how == "same" else draw(st.binary(max_size=64))
        if how == "truncate":
            return data[:draw(st.integers(0, len(data) - 1))]
        if how == "flip":
            out = bytearray(data)
            for _ in range(draw(st.integers(1, 4))):
                pos = draw(st.integers(0, len(out) - 1))
                out[pos] ^= 1 << draw(st.integers(0, 7))
            return bytes(out)
        if how == "splice":
            pos = draw(st.integers(0, len(data)))
            return data[:pos] + draw(st.binary(min_size=1, max_size=16)) + data[pos:]
        return draw(st.binary(max_size=256))

    return mutate()


@st.composite
def transfer_lists(draw, max_nodes: int = 5, max_length: int = 40, max_transfers: int = 25):
    """Random collective transfers on a few nodes, for the kernels of :mod:`scwork.collectives`.

    Overlapping ranges, self-sends, several writes per range and empty ranges, in
    schedule order (steps non-decreasing). Returns ``(nodes, length, [step, source,
    destination, start, stop], is_combine)``: int64 columns and a bool array.
    """
    nodes = draw(st.integers(1, max_nodes))
    length = draw(st.integers(1, max_length))
    rows = []
    for _ in range(draw(st.integers(0, max_transfers))):
        a = draw(st.integers(0, length))
        b = draw(st.integers(a, length))
        rows.append((draw(st.integers(0, 4)), draw(st.integers(0, nodes - 1)), draw(st.integers(0, nodes - 1)),
                     a, b, draw(st.booleans())))
    rows.sort(key=lambda r: r[0])  # stable: the order within a step is kept
    cols = [np.array([r[k] for r in rows], dtype=np.int64) for k in range(5)]
    combine = np.array([r[5] for r in rows], dtype=bool)
    return nodes, length, cols, combine
