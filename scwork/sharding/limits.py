"""Choosing the per-partition limits: closed-form estimate, per-step statistics, tuner.

Compiled limits (``max_ids_per_partition``, ``max_unique_ids_per_partition``) size
static on-device buffers. Too low: mini-batching or dropped ids; too high: SPMEM and
HBM pressure ([sc-guide] §7 on limits, §9 on memory, §10 on bottlenecks). This module gives

- :func:`estimate_limits`: the closed-form estimate behind ``xla_sparse_core_estimate_max_ids``
  ([sc-guide] §6), from batch size and valency only;
- :func:`collect_stats`: the engine's statistics of many steps, stacked on a
  ``step`` dim (limits switched off, so nothing raises or drops);
- :func:`tune_limits`: per-stack limits from those steps (max or a percentile,
  rounded up), as :class:`TunedLimits`;
- :func:`tradeoff`: for candidate limits, how often a step would need
  mini-batching, how many ids ``allow_id_dropping`` would drop, and the bytes of
  the buffers the limit sizes.

Byte model ([jte] ``CheckBufferUsage`` in ``input_preprocessing.cc``, behind
``preprocess_sparse_dense_matmul_input``): a COO/CSR entry is 12 bytes (int32 embedding id +
int32 sample id + float32 gain); the CSR buffer of one device holds
``round_up(max_ids_per_partition, 8) * S * P`` entries (one ``round_up(max_ids, 8)``
slot per (source SC, partition)), plus ``S * max(P, 8)`` int32 row pointers. With
mini-batching the reference multiplies the entries by its 64 buckets (not modelled
here). The SPMEM hook :func:`static_partition_buffer_bytes` gives the bytes of one
statically sized per-partition buffer, ``round_up(limit, 8) * bytes_per_entry``; the
full SPMEM model comes later.

Examples
--------
>>> import scwork
>>> est = estimate_limits(16384, 20, scwork.Topology(4, 4))
>>> est["max_ids_per_partition"], est["max_unique_ids_per_partition"]
(6496, 3248)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from scwork._rounding import round_up

from scwork._progress import progress as _progress
from scwork.errors import ConfigError, InputError, InternalError
from scwork.hardware.topology import Topology
from scwork.sharding import _profile
from scwork.sharding._plan_cache import plan_derived
from scwork.sharding.batch import FeatureBatch
from scwork.sharding.limits_json_csv import Limits, StackLimits
from scwork.sharding.results import _dataset
from scwork.sharding.specs import SparsecoreConfig
from scwork.sharding.stacking import (
    DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
    StackingPlan,
    plan_stacking,
)

__all__ = [
    "estimate_limits",
    "collect_stats",
    "merge_step_stats",
    "tune_limits",
    "TunedLimits",
    "tradeoff",
    "coo_buffer_bytes_per_device",
    "static_partition_buffer_bytes",
    "BYTES_PER_COO_ENTRY",
    "TUNE_METHODS",
]

#: Bytes of one COO/CSR entry: int32 embedding id + int32 sample id + float32 gain.
BYTES_PER_COO_ENTRY = 12
#: Methods of :func:`tune_limits`.
TUNE_METHODS: tuple[str, ...] = ("max", "percentile")

_ALIGN = 8
_STEP_VARS = ("ids", "unique_ids", "max_ids_per_partition", "max_unique_ids_per_partition",
              "required_buffer_size_per_sc", "input_ids", "naive_ids_per_partition",
              "naive_unique_ids_per_partition", "out_of_vocabulary_ids")


#: Coordinates of collect_stats' result, by (coordinates of a step's statistics, steps).
_STEP_COORDS: dict[tuple, Any] = {}


def _step_coords(first, num_steps: int):
    """The coordinates of ``first`` (one step's statistics, or their coordinates) with ``step`` added.

    Cached by the coordinates' names, values and attributes and the step count
    (every step of a plan has the same ones): building the indexes costs more
    than the variables.
    """
    import xarray as xr

    coords = first.coords.variables
    key = (tuple(coords), tuple(first.sizes.items()), num_steps, tuple(coords["stack"].values.tolist())
           if "stack" in coords else ())
    hit = _STEP_COORDS.get(key)
    if hit is not None and all(np.array_equal(hit[name].values, var.values) and hit[name].attrs == var.attrs
                               for name, var in coords.items()):
        return hit
    variables = dict(coords)
    variables["step"] = xr.Variable("step", np.arange(num_steps), {"long_name": "step index"})
    ds = xr.Dataset(coords=variables)
    if len(_STEP_COORDS) > 64:
        _STEP_COORDS.clear()
    _STEP_COORDS[key] = ds
    return ds


def _round_up(value: float, multiple: int) -> int:
    return int(round_up(math.ceil(value), multiple))


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be a positive int, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------------------
# closed-form estimate
# --------------------------------------------------------------------------------------
def estimate_limits(batch_size: int, valency: float | Mapping[str, float], topology: Topology, *,
                    round_to: int = 8):
    """Closed-form limits from batch size and valency alone ([sc-guide] §6, ``xla_sparse_core_estimate_max_ids``).

    With ``G`` devices of ``S`` SparseCores (``P = G * S``), a source SparseCore
    handles ``L = (B / G / S) * valency`` ids; the expected peak on one partition is
    ``peak = 0.2 * L + 0.8 * L / P + 2 * sqrt(L / P)`` (a fifth of the ids hot, the
    rest spread evenly, two standard deviations of Poisson noise), and

    - ``max_ids_per_partition = round_up(1.25 * peak, 8)``,
    - ``max_unique_ids_per_partition = round_up(0.625 * peak, 8)``.

    The formula is scwork's model of the ``xla_sparse_core_estimate_max_ids`` flag
    ([sc-guide] §6); no public source of [jte] implements it, so the numbers are
    checked by hand in the tests.

    Parameters
    ----------
    batch_size : int
        Global batch ``B`` (samples per feature).
    valency : float or mapping of str to float
        Mean ids per sample; for a stack, the sum over its features. A mapping
        ``{stack: valency}`` gives one estimate per stack.
    topology : scwork.Topology
    round_to : int
        Rounding multiple (default 8, the reference's alignment).

    Returns
    -------
    dict or xarray.Dataset
        For a number: ``{"max_ids_per_partition", "max_unique_ids_per_partition"}`` (ints),
        ``"ids_per_sc"`` (``L``) and ``"peak"`` (floats). For a mapping: a Dataset
        with these variables along dim ``stack``.

    Examples
    --------
    ``B = 16384`` on 4 x 4 SparseCores with 20 ids per sample: ``L = 1024 * 20 = 20480``,
    ``L / P = 1280``, ``peak = 4096 + 1024 + 2 * sqrt(1280) = 5191.55``,
    ``1.25 * peak = 6489.4 -> 6496`` and ``0.625 * peak = 3244.7 -> 3248``.

    >>> import scwork
    >>> est = estimate_limits(16384, 20, scwork.Topology(4, 4))
    >>> est["ids_per_sc"], round(est["peak"], 2), est["max_ids_per_partition"], est["max_unique_ids_per_partition"]
    (20480.0, 5191.55, 6496, 3248)
    >>> ds = estimate_limits(16384, {"a": 20, "b": 1}, scwork.Topology(4, 4))
    >>> ds["max_ids_per_partition"].values.tolist()
    [6496, 344]
    """
    B = _check_positive_int(batch_size, "batch_size")
    round_to = _check_positive_int(round_to, "round_to")
    if not isinstance(topology, Topology):
        raise ConfigError(f"topology must be a scwork.Topology, got {type(topology).__name__}")
    G, S = topology.num_devices, topology.sparsecores_per_device
    if S < 1:
        raise ConfigError(f"topology {topology} has no SparseCore")
    P = G * S

    def one(v, name):
        if isinstance(v, bool) or not isinstance(v, (numbers.Real, np.number)) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"valency{name} must be a finite number >= 0, got {v!r}")
        L = B / G / S * float(v)
        peak = 0.2 * L + 0.8 * L / P + 2.0 * math.sqrt(L / P)
        return {"max_ids_per_partition": max(round_to, _round_up(1.25 * peak, round_to)),
                "max_unique_ids_per_partition": max(round_to, _round_up(0.625 * peak, round_to)),
                "ids_per_sc": L, "peak": peak}

    if not isinstance(valency, Mapping):
        return one(valency, "")
    import xarray as xr

    names = list(valency)
    rows = [one(valency[n], f"[{n!r}]") for n in names]
    units = {"max_ids_per_partition": "ids", "max_unique_ids_per_partition": "ids", "ids_per_sc": "ids",
             "peak": "ids"}
    return xr.Dataset({k: ("stack", np.array([r[k] for r in rows]), {"units": units[k]}) for k in units},
                      coords={"stack": np.array(names, dtype=object)},
                      attrs={"batch_size": B, "topology": str(topology), "round_to": round_to,
                             "formula": "peak = 0.2 L + 0.8 L/P + 2 sqrt(L/P); max_ids = round_up(1.25 peak); "
                                        "max_unique = round_up(0.625 peak)"})


# --------------------------------------------------------------------------------------
# per-step statistics
# --------------------------------------------------------------------------------------
def _as_batch(item: Any, step: int) -> FeatureBatch:
    if isinstance(item, FeatureBatch):
        return item
    if isinstance(item, Mapping):
        try:
            return FeatureBatch(item)
        except InputError as err:
            raise InputError(f"step {step}: {err}") from None
    raise InputError(f"step {step}: a batch must be a FeatureBatch or a mapping feature -> (ids, row_splits"
                     f"[, weights]), got {type(item).__name__}")


def _without_limits(plan: StackingPlan) -> StackingPlan:
    """``plan`` with no stack limits; the same object for the same plan (the engine keeps what
    it derives from a plan by its stacks' identity: a fresh plan per call would redo it)."""
    return plan_derived("without_limits", plan.stacks, (plan.topology, plan.rotation, plan.batch_size),
                        lambda: _plan_without_limits(plan))


def _plan_without_limits(plan: StackingPlan) -> StackingPlan:
    stacks = [dataclasses.replace(s, max_ids_per_partition=None, max_unique_ids_per_partition=None)
              for s in plan.stacks]
    return StackingPlan(stacks, plan.topology, plan.rotation, plan.batch_size)


@_profile.one_call
def collect_stats(batches: Iterable[Any], features: Any, topology: Topology, *, stacking: Any = "auto",
                  config: SparsecoreConfig | None = None, stack_limits: Mapping[str, Any] | None = None,
                  rotation: int | None = None,
                  activation_mem_bytes_limit: int = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
                  on_out_of_vocabulary: str = "error", max_steps: int | None = None, num_threads: int | None = None,
                  backend: str = "numba", progress: bool | None = None):
    """Statistics of many steps, stacked along a ``step`` dim.

    Every step runs :func:`~scwork.sharding.compute_stats` with the same stacking
    plan but with limits and the ``max_ids_per_chip_per_sample`` check switched off
    (observed statistics only: nothing raises or is dropped); the configured limits
    are kept as ``configured_*`` variables.

    Parameters
    ----------
    batches : iterable
        :class:`~scwork.sharding.FeatureBatch` objects or mappings ``feature ->
        (ids, row_splits[, weights])`` (e.g. ``scwork.datasets.synthetic(...).batches()``),
        all with the same batch size.
    features, topology, stacking, config, stack_limits, rotation, activation_mem_bytes_limit, \
on_out_of_vocabulary, num_threads, backend
        As for :func:`~scwork.sharding.compute_stats` (the plan is made once, from the
        first batch).
    max_steps : int, optional
        Stop after this many steps.
    progress : bool or None
        Progress bar, one tick per step: True, False, or None (automatic: shown in
        a terminal or notebook unless ``SCWORK_PROGRESS=0``; see :mod:`scwork._progress`).

    Returns
    -------
    xarray.Dataset
        Dims ``step, stack, device, sc, partition``. Per step: ``ids``,
        ``unique_ids``, ``max_ids_per_partition``, ``max_unique_ids_per_partition``,
        ``required_buffer_size_per_sc``, ``input_ids``, the naive views,
        ``out_of_vocabulary_ids``; summaries ``observed_max_ids``,
        ``observed_max_unique_ids`` (step, stack: max over devices and partitions)
        and ``observed_required_buffer_size`` (step, stack: max over devices and SCs).
        Per stack: ``configured_max_ids_per_partition``,
        ``configured_max_unique_ids_per_partition`` (-1: none).

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import FeatureSpec, TableSpec
    >>> data = scwork.datasets.synthetic(8, num_steps=3, vocab_size=100, valency="fixed(4)", seed=1)
    >>> ds = collect_stats(data.batches(), [FeatureSpec("f0", TableSpec("t", 100, 8))], scwork.Topology(2, 2))
    >>> ds.sizes["step"], ds["observed_max_ids"].dims
    (3, ('step', 'stack'))
    """
    from collections.abc import Iterable as _Iterable

    from scwork.sharding.engine import _prepare_statistics, _statistics_of_prepared
    from scwork.sharding.stacking import normalize_features

    if isinstance(batches, (str, bytes)) or not isinstance(batches, _Iterable):
        raise ConfigError(f"batches must be an iterable of FeatureBatch (or dicts of ragged features), got "
                          f"{type(batches).__name__}")
    config = SparsecoreConfig() if config is None else config
    if not isinstance(config, SparsecoreConfig):
        raise ConfigError(f"config must be a SparsecoreConfig, got {type(config).__name__}")
    if max_steps is not None:
        max_steps = _check_positive_int(max_steps, "max_steps")
    features = normalize_features(features)
    free_config = dataclasses.replace(config, allow_id_dropping=False, max_ids_per_chip_per_sample=None)
    plan = free = None
    steps = []
    total = len(batches) if hasattr(batches, "__len__") else None
    if max_steps is not None:
        total = max_steps if total is None else min(total, max_steps)
    # islice stops before asking for batch max_steps + 1: a generator (a dataset reader) is
    # not made to read, and the caller does not lose, a batch that is not used.
    source = batches if max_steps is None else itertools.islice(batches, max_steps)
    bar = _progress(source, total=total, desc="collecting statistics", enabled=progress, unit="step")
    items = iter(bar)

    def prepared(step: int):
        """Step ``step``'s engine call up to its first task, or None after the last batch."""
        nonlocal plan, free
        try:
            item = next(items)
        except StopIteration:
            return None
        batch = _as_batch(item, step)
        if plan is None:
            plan = plan_stacking(features, topology, stacking, batch_size=batch.batch_size, rotation=rotation,
                                 activation_mem_bytes_limit=activation_mem_bytes_limit, config=config,
                                 stack_limits=stack_limits)
            free = _without_limits(plan)
        elif batch.batch_size != plan.batch_size:
            raise InputError(f"step {step}: batch size {batch.batch_size} differs from the first step's "
                             f"{plan.batch_size}; every step must have the same batch size")
        return _prepare_statistics(batch, features, topology, free, free_config, on_out_of_vocabulary,
                                   num_threads, backend)

    # Each step's checks, plan and engine jobs are made while the worker threads run
    # the step before (its slices): they depend on the batch alone. The next batch is
    # read then too, one step ahead; what that raises is raised once the step before
    # has finished, as a step-by-step loop would.
    step = 0
    try:
        call = prepared(0)
    except Exception as err:
        raise _at_step(err, 0)
    last: dict = {}
    while call is not None:
        ahead: dict = {}

        def prepare_next(step=step, ahead=ahead):
            try:
                ahead["call"] = prepared(step + 1)
                if ahead["call"] is None and steps:
                    # this step is the last: the Dataset of every step, this one's row
                    # filled once it is done (_fill_last_step)
                    ahead["built"] = _steps_dataset(steps, step + 1, plan)
            except Exception as err:  # noqa: BLE001 - raised below, after this step
                ahead["error"] = err

        # compute_stats' variables without a Dataset per step (stacked into one below)
        try:
            steps.append(_statistics_of_prepared(call, prepare_next))
        except Exception as err:
            raise _at_step(err, step)
        if "error" in ahead:
            raise _at_step(ahead["error"], step + 1)
        try:
            call = ahead["call"] if "call" in ahead else prepared(step + 1)
        except Exception as err:
            raise _at_step(err, step + 1)
        last = ahead
        step += 1
    if bar is not source:
        bar.close()  # a bar left open by max_steps would otherwise linger until garbage collection
    if not steps:
        raise InputError("no batches: collect_stats needs at least one step")
    built = last["built"] if "built" in last else _steps_dataset(steps, len(steps), plan)
    _fill_last_step(built, steps)
    return built[0]


def _at_step(err: BaseException, step: int) -> BaseException:
    """``err``, marked as raised by collect_stats' step ``step`` (``_collect_step``).

    collect_stats reads each batch one step ahead, so a caller that tracks the step
    from the batches it yielded would name the one after; stats_over_dataset reads
    the mark to locate the error in the dataset.
    """
    if not hasattr(err, "_collect_step"):
        err._collect_step = step
    return err


def _steps_dataset(steps: list, num_steps: int, plan) -> tuple:
    """collect_stats' Dataset of ``num_steps`` steps, the first ``len(steps)`` filled from ``steps``
    (each one ``(variables, coordinates, attributes)`` of the engine), the rest by
    :func:`_fill_last_step`; ``(Dataset, its arrays by name)``.

    The steps share one plan, so their coordinates are the same: stacking the
    values in numpy gives what xr.concat gives (first step's coordinates and
    attributes, "step" first) without its per-step alignment, which cost about
    6 ms a step, all of it serial. Made while the last step's slices run, when
    ``steps`` has all but that one.
    """
    first_vars, first_coords, first_attrs = steps[0]
    for step, parts in enumerate(steps[1:], 1):
        _check_step_shape(step, parts, first_coords)

    def dims_of(v):
        dims = first_vars[v][0]
        return (dims,) if isinstance(dims, str) else tuple(dims)

    data = {}
    for v in _STEP_VARS:
        values = np.asarray(first_vars[v][1])
        arr = np.empty((num_steps, *values.shape), values.dtype)
        np.stack([parts[0][v][1] for parts in steps], out=arr[:len(steps)])
        data[v] = (("step", *dims_of(v)), arr, dict(first_vars[v][2]))
    # the summaries from the same arrays, filled with the last step (assigning them to
    # the Dataset one by one aligned each against it: about as long as the rest of
    # the call's serial part)
    if dims_of("max_ids_per_partition") != ("stack", "device", "partition") or \
            dims_of("required_buffer_size_per_sc") != ("stack", "device", "sc"):
        raise InternalError("compute_stats' statistics changed dims; collect_stats' summaries expect "
                            "(stack, device, partition) and (stack, device, sc)")
    ns = data["max_ids_per_partition"][1].shape[1]
    data["observed_max_ids"] = (("step", "stack"), np.empty((num_steps, ns), np.int64), {
        "long_name": "max over devices and partitions of max_ids_per_partition", "units": "ids"})
    data["observed_max_unique_ids"] = (("step", "stack"), np.empty((num_steps, ns), np.int64),
                                       {"long_name": "max over devices and partitions of "
                                                     "max_unique_ids_per_partition", "units": "ids"})
    data["observed_required_buffer_size"] = (
        ("step", "stack"), np.empty((num_steps, ns), np.int64),
        {"long_name": "max over devices and SCs of required_buffer_size_per_sc", "units": "CSR entries"})
    for var, attr in (("configured_max_ids_per_partition", "max_ids_per_partition"),
                      ("configured_max_unique_ids_per_partition", "max_unique_ids_per_partition")):
        vals = [getattr(s, attr) for s in plan.stacks]
        data[var] = ("stack", np.array([-1 if v is None else v for v in vals], np.int64),
                     {"long_name": f"configured {attr} (-1: none)", "units": "ids"})
    out = _dataset(data, _step_coords(first_coords, num_steps), dict(first_attrs))
    out.attrs["num_steps"] = num_steps
    out.attrs["source"] = "scwork.sharding.limits.collect_stats (compute_stats per step, limits off)"
    return out, {name: values for name, (_, values, _) in data.items()}


def _check_step_shape(step: int, parts, first_coords) -> None:
    coords = parts[1]
    if coords is not first_coords and (list(coords.variables["stack"].values)
                                       != list(first_coords.variables["stack"].values)
                                       or coords.sizes != first_coords.sizes):
        raise InternalError(f"step {step}: statistics of another shape than step 0's (same plan expected)")


def _fill_last_step(built: tuple, steps: list) -> None:
    """The steps :func:`_steps_dataset` left out (the last, made meanwhile) in, then the summaries."""
    _, arrays = built
    num_steps = arrays["ids"].shape[0]
    if len(steps) != num_steps:
        raise InternalError(f"collect_stats made {len(steps)} steps, its Dataset has {num_steps}")
    if num_steps > 1:
        _check_step_shape(num_steps - 1, steps[-1], steps[0][1])
    last_vars = steps[-1][0]
    for v in _STEP_VARS:
        np.copyto(arrays[v][-1], last_vars[v][1])
    np.max(arrays["max_ids_per_partition"], axis=(2, 3), out=arrays["observed_max_ids"])
    np.max(arrays["max_unique_ids_per_partition"], axis=(2, 3), out=arrays["observed_max_unique_ids"])
    np.max(arrays["required_buffer_size_per_sc"], axis=(2, 3), out=arrays["observed_required_buffer_size"])


def _check_step_stats(step_stats: Any, needed: Iterable[str]) -> None:
    dims = getattr(step_stats, "dims", None)
    if dims is None or "step" not in dims:
        raise InputError("step_stats must be an xarray.Dataset with a 'step' dim (from collect_stats)")
    missing = [v for v in needed if v not in step_stats]
    if missing:
        raise InputError(f"step_stats lacks variables {missing}; build it with collect_stats")


def merge_step_stats(step_stats: Any):
    """Merge steps as jax-tpu-embedding merges stats (``SparseDenseMatmulInputStats::merge``).

    Element-wise max over ``step`` of ``max_ids_per_partition``,
    ``max_unique_ids_per_partition`` and ``required_buffer_size_per_sc`` (the
    reference's ``cwiseMax``), which is exactly what one long run would report.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import FeatureSpec, TableSpec
    >>> data = scwork.datasets.synthetic(8, num_steps=4, vocab_size=50, seed=2)
    >>> ds = collect_stats(data.batches(), [FeatureSpec("f0", TableSpec("t", 50, 8))], scwork.Topology(1, 2))
    >>> m = merge_step_stats(ds)
    >>> int(m["max_ids_per_partition"].max()) == int(ds["observed_max_ids"].max())
    True
    """
    _check_step_stats(step_stats, ("max_ids_per_partition", "max_unique_ids_per_partition",
                                   "required_buffer_size_per_sc"))
    out = step_stats[["max_ids_per_partition", "max_unique_ids_per_partition",
                      "required_buffer_size_per_sc"]].max("step", keep_attrs=True)
    out.attrs["merged_steps"] = int(step_stats.sizes["step"])
    return out


# --------------------------------------------------------------------------------------
# tuner
# --------------------------------------------------------------------------------------
@dataclasses.dataclass
class TunedLimits:
    """Limits proposed by :func:`tune_limits`, with the evidence behind them.

    Attributes
    ----------
    dataset : xarray.Dataset
        Dim ``stack``: ``max_ids_per_partition``, ``max_unique_ids_per_partition``,
        ``required_buffer_size`` (the proposal); ``observed_max_ids``,
        ``observed_max_unique_ids`` (max over steps); ``share_steps_over_max_ids``,
        ``share_steps_over_max_unique_ids`` and ``share_steps_needing_minibatching``
        (fraction of the steps whose observed values exceed the proposal).
    method : str
    percentile : float or None
    round_to : int
    num_steps : int
    """

    dataset: Any
    method: str
    percentile: float | None
    round_to: int
    num_steps: int

    def stack_limits(self) -> dict[str, tuple[int, int]]:
        """``{stack: (max_ids, max_unique_ids)}`` for ``preprocess(stack_limits=...)``."""
        ds = self.dataset
        return {n: (int(a), int(b)) for n, a, b in zip(ds["stack"].values.tolist(),
                                                        ds["max_ids_per_partition"].values,
                                                        ds["max_unique_ids_per_partition"].values)}

    def to_limits(self) -> Limits:
        """The proposal as :class:`~scwork.sharding.limits_files.Limits` (e.g. to write a file)."""
        ds = self.dataset
        out = {}
        for i, n in enumerate(ds["stack"].values.tolist()):
            out[n] = StackLimits(int(ds["max_ids_per_partition"].values[i]),
                                 int(ds["max_unique_ids_per_partition"].values[i]),
                                 int(ds["required_buffer_size"].values[i]))
        return Limits(out, metadata={"source": "scwork.sharding.limits.tune_limits", "method": self.method,
                                     "percentile": self.percentile, "round_to": self.round_to,
                                     "num_steps": self.num_steps})

    def _repr_html_(self) -> str:
        from scwork._html import html_table

        ds = self.dataset
        names = ds["stack"].values.tolist()
        rows = [(n, int(ds["max_ids_per_partition"].values[i]), int(ds["max_unique_ids_per_partition"].values[i]),
                 int(ds["required_buffer_size"].values[i]), int(ds["observed_max_ids"].values[i]),
                 int(ds["observed_max_unique_ids"].values[i]),
                 f"{float(ds['share_steps_needing_minibatching'].values[i]):.1%}") for i, n in enumerate(names)]
        how = self.method if self.percentile is None else f"{self.method} {self.percentile:g}"
        return html_table(rows, header=("stack", "max_ids_per_partition", "max_unique_ids_per_partition",
                                        "required_buffer_size", "observed max ids", "observed max unique ids",
                                        "steps needing mini-batching"),
                          caption=f"TunedLimits ({how}, round_to={self.round_to}, {self.num_steps} steps)")

    def __repr__(self) -> str:
        how = self.method if self.percentile is None else f"{self.method} {self.percentile:g}"
        lines = [f"TunedLimits({how}, round_to={self.round_to}, {self.num_steps} steps)"]
        ds = self.dataset
        for i, n in enumerate(ds["stack"].values.tolist()):
            lines.append(f"  {n}: max_ids_per_partition {int(ds['max_ids_per_partition'].values[i])}, "
                         f"max_unique_ids_per_partition {int(ds['max_unique_ids_per_partition'].values[i])}, "
                         f"steps needing mini-batching "
                         f"{float(ds['share_steps_needing_minibatching'].values[i]):.1%}")
        return "\n".join(lines)


def _series_value(series: np.ndarray, method: str, percentile: float) -> float:
    if method == "max":
        return float(series.max())
    # smallest observed value v with share(steps <= v) >= percentile / 100
    return float(np.percentile(series, percentile, method="inverted_cdf"))


def tune_limits(step_stats: Any, *, method: str = "max", percentile: float = 99.0, round_to: int = 8,
                headroom: float = 1.0) -> TunedLimits:
    """Propose per-stack limits from per-step statistics.

    For every stack, take the per-step observed ``max_ids_per_partition`` (max over
    devices and partitions), its max over steps (``method="max"``: no step needs
    mini-batching) or its ``percentile`` (``method="percentile"``: the smallest
    observed value that at least ``percentile`` % of the steps stay within, numpy's
    ``inverted_cdf``), times ``headroom``, rounded up to ``round_to``; the same for
    ``max_unique_ids_per_partition``. ``required_buffer_size`` is the same statistic
    of ``required_buffer_size_per_sc`` rounded up to 8.

    Parameters
    ----------
    step_stats : xarray.Dataset
        From :func:`collect_stats` (dim ``step``).
    method : {"max", "percentile"}
    percentile : float
        In (0, 100]; used by ``"percentile"``.
    round_to : int
        Rounding multiple of the limits (default 8).
    headroom : float
        Factor >= 1 applied before rounding (default 1).

    Returns
    -------
    TunedLimits

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import FeatureSpec, TableSpec
    >>> data = scwork.datasets.synthetic(64, num_steps=5, vocab_size=1000, seed=3)
    >>> ds = collect_stats(data.batches(), [FeatureSpec("f0", TableSpec("t", 1000, 8))], scwork.Topology(2, 2))
    >>> tuned = tune_limits(ds)
    >>> lim = tuned.stack_limits()["t"]
    >>> lim[0] >= int(ds["observed_max_ids"].max()) and lim[0] % 8 == 0
    True
    >>> float(tuned.dataset["share_steps_needing_minibatching"].sel(stack="t"))
    0.0
    """
    _check_step_stats(step_stats, ("observed_max_ids", "observed_max_unique_ids", "observed_required_buffer_size"))
    if method not in TUNE_METHODS:
        raise ConfigError(f"method must be one of {TUNE_METHODS}, got {method!r}")
    if isinstance(percentile, bool) or not isinstance(percentile, (numbers.Real, np.number)) \
            or not 0 < percentile <= 100:
        raise ConfigError(f"percentile must be a number in (0, 100], got {percentile!r}")
    round_to = _check_positive_int(round_to, "round_to")
    if isinstance(headroom, bool) or not isinstance(headroom, (numbers.Real, np.number)) \
            or not math.isfinite(headroom) or headroom < 1:
        raise ConfigError(f"headroom must be a finite number >= 1, got {headroom!r}")
    import xarray as xr

    names = step_stats["stack"].values.tolist()
    ids_s = step_stats["observed_max_ids"].transpose("stack", "step").values
    uniq_s = step_stats["observed_max_unique_ids"].transpose("stack", "step").values
    buf_s = step_stats["observed_required_buffer_size"].transpose("stack", "step").values
    T = ids_s.shape[1]
    lim_ids, lim_uniq, lim_buf = [], [], []
    for a in range(len(names)):
        lim_ids.append(max(round_to, _round_up(math.ceil(_series_value(ids_s[a], method, percentile) * headroom),
                                               round_to)))
        lim_uniq.append(max(round_to, _round_up(math.ceil(_series_value(uniq_s[a], method, percentile) * headroom),
                                                round_to)))
        lim_buf.append(_round_up(math.ceil(_series_value(buf_s[a], method, percentile) * headroom), _ALIGN))
    lim_ids_a = np.array(lim_ids, np.int64)
    lim_uniq_a = np.array(lim_uniq, np.int64)
    over_ids = ids_s > lim_ids_a[:, None]
    over_uniq = uniq_s > lim_uniq_a[:, None]
    ds = xr.Dataset(
        {
            "max_ids_per_partition": ("stack", lim_ids_a, {"long_name": "proposed max ids per partition",
                                                           "units": "ids"}),
            "max_unique_ids_per_partition": ("stack", lim_uniq_a, {"long_name": "proposed max unique ids per "
                                                                                "partition", "units": "ids"}),
            "required_buffer_size": ("stack", np.array(lim_buf, np.int64),
                                     {"long_name": "proposed CSR entries per SparseCore", "units": "CSR entries"}),
            "observed_max_ids": ("stack", ids_s.max(axis=1).astype(np.int64),
                                 {"long_name": "max over steps of the observed max ids", "units": "ids"}),
            "observed_max_unique_ids": ("stack", uniq_s.max(axis=1).astype(np.int64),
                                        {"long_name": "max over steps of the observed max unique ids",
                                         "units": "ids"}),
            "share_steps_over_max_ids": ("stack", over_ids.mean(axis=1),
                                         {"long_name": "share of steps above the proposed max ids", "units": "1"}),
            "share_steps_over_max_unique_ids": ("stack", over_uniq.mean(axis=1),
                                                {"long_name": "share of steps above the proposed max unique ids",
                                                 "units": "1"}),
            "share_steps_needing_minibatching": ("stack", (over_ids | over_uniq).mean(axis=1),
                                                 {"long_name": "share of steps that would need mini-batching "
                                                               "(or drop ids)", "units": "1"}),
        },
        coords={"stack": np.array(names, dtype=object)},
        attrs={"method": method, "percentile": float(percentile) if method == "percentile" else -1.0,
               "round_to": round_to, "headroom": float(headroom), "num_steps": T},
    )
    return TunedLimits(ds, method, float(percentile) if method == "percentile" else None, round_to, T)


# --------------------------------------------------------------------------------------
# trade-off table and byte model
# --------------------------------------------------------------------------------------
def coo_buffer_bytes_per_device(max_ids_per_partition: Any, topology: Topology, *,
                                bytes_per_entry: int = BYTES_PER_COO_ENTRY) -> Any:
    """Bytes of one device's COO/CSR buffer: ``round_up(max_ids, 8) * S * P * bytes_per_entry``.

    Examples
    --------
    >>> import scwork
    >>> coo_buffer_bytes_per_device(100, scwork.Topology(4, 4))      # 104 * 4 * 16 * 12
    79872
    """
    a = np.asarray(max_ids_per_partition, np.int64)
    out = round_up(a, _ALIGN) * topology.sparsecores_per_device * topology.num_partitions * bytes_per_entry
    return int(out) if out.ndim == 0 else out


def static_partition_buffer_bytes(limit: Any, bytes_per_entry: int = BYTES_PER_COO_ENTRY) -> Any:
    """SPMEM hook: bytes of one statically sized per-partition buffer, ``round_up(limit, 8) * bytes_per_entry``.

    Examples
    --------
    >>> static_partition_buffer_bytes(100), static_partition_buffer_bytes([8, 9], bytes_per_entry=4).tolist()
    (1248, [32, 64])
    """
    a = np.asarray(limit, np.int64)
    out = round_up(a, _ALIGN) * int(bytes_per_entry)
    return int(out) if out.ndim == 0 else out


def _default_candidates(step_stats) -> np.ndarray:
    vals = np.asarray(step_stats["observed_max_ids"].values, np.float64).ravel()
    qs = np.percentile(vals, [0, 25, 50, 75, 90, 95, 99, 100]) if vals.size else np.zeros(1)
    cands = np.unique(np.maximum(_ALIGN, round_up(np.ceil(qs).astype(np.int64), _ALIGN)))
    return cands


def _checked_candidates(step_stats: Any, candidates, unique_candidates):
    """``(max_ids candidates, max_unique_ids candidates)`` of :func:`tradeoff` as int64 arrays, checked."""
    cands = _default_candidates(step_stats) if candidates is None else np.asarray(list(candidates))
    if cands.ndim != 1 or cands.size == 0 or cands.dtype.kind not in "iu" or (cands < 1).any():
        raise ConfigError(f"candidates must be a non-empty list of positive ints, got {candidates!r}")
    if np.unique(cands).size != cands.size:
        raise ConfigError(f"candidates must be distinct, got {cands.tolist()}")
    if unique_candidates is None:
        ucands = cands.copy()
    else:
        ucands = np.asarray(list(unique_candidates))
        if ucands.shape != cands.shape or ucands.dtype.kind not in "iu" or (ucands < 1).any():
            raise ConfigError("unique_candidates must be positive ints, one per candidate "
                              f"({cands.size}), got {unique_candidates!r}")
    return cands.astype(np.int64), ucands.astype(np.int64)


def _limit_exceedances(step_stats: Any, cands: np.ndarray, ucands: np.ndarray):
    """Per (stack, step, candidate): whether the observed maxima exceed it, and the pairs and ids a cut drops.

    Returns ``(stacks, steps, over_ids, over_unique, dropped_pairs, dropped_unique, total_pairs per stack)``.
    """
    ids = step_stats["ids"].transpose("stack", "step", "device", "sc", "partition").values
    uniq = step_stats["unique_ids"].transpose("stack", "step", "device", "sc", "partition").values
    ns, T = ids.shape[0], ids.shape[1]
    flat_ids = ids.reshape(ns, T, -1)
    flat_uniq = uniq.reshape(ns, T, -1)
    obs_ids = flat_ids.max(axis=2) if flat_ids.shape[2] else np.zeros((ns, T), np.int64)
    obs_uniq = flat_uniq.max(axis=2) if flat_uniq.shape[2] else np.zeros((ns, T), np.int64)
    over_ids = obs_ids[:, :, None] > cands[None, None, :]            # (stack, step, cand)
    over_uniq = obs_uniq[:, :, None] > ucands[None, None, :]
    drop_pairs = np.maximum(0, flat_ids[:, :, :, None] - cands).sum(axis=2)   # (stack, step, cand)
    drop_uniq = np.maximum(0, flat_uniq[:, :, :, None] - ucands).sum(axis=2)
    total_pairs = flat_ids.sum(axis=(1, 2))
    return ns, T, over_ids, over_uniq, drop_pairs, drop_uniq, total_pairs


def tradeoff(step_stats: Any, candidates: Iterable[int] | None = None, *,
             unique_candidates: Iterable[int] | None = None, bytes_per_entry: int = BYTES_PER_COO_ENTRY):
    """What candidate limits would cost, stack by stack, over the collected steps.

    Candidate ``k`` sets ``max_ids_per_partition = candidates[k]`` and
    ``max_unique_ids_per_partition = unique_candidates[k]`` (default: the same value,
    i.e. only the ids limit binds, since distinct ids never exceed ids).

    Dropped ids are computed from the per-stream counts, not by re-running the
    prefix cut: ``dropped_pairs_per_step`` is the mean over steps of
    ``sum over (device, sc, partition) of max(0, ids - max_ids)``, exactly the
    deduplicated (sample, id) pairs the prefix cut of [jte] preprocess_sparse_dense_matmul_input drops when only the ids
    limit binds (their raw duplicates are not counted); ``dropped_unique_ids_per_step``
    is the same with distinct ids and the unique limit (exactly the distinct ids cut).
    For exact raw-id drops under both limits, run
    :func:`~scwork.sharding.compute_stats` with ``allow_id_dropping`` (``dropped_ids``).

    Parameters
    ----------
    step_stats : xarray.Dataset
        From :func:`collect_stats`.
    candidates : iterable of int, optional
        Distinct ``max_ids_per_partition`` values (default: quantiles of the observed
        per-step max ids rounded up to 8).
    unique_candidates : iterable of int, optional
        Same length as ``candidates``.
    bytes_per_entry : int
        Bytes of a COO entry (default 12: int32 id + int32 sample + float32 gain).

    Returns
    -------
    xarray.Dataset
        Dims ``stack, candidate`` (coordinate: the ``max_ids_per_partition`` values,
        plus ``max_unique_ids_per_partition`` along ``candidate``). Variables:
        ``share_steps_over_max_ids``, ``share_steps_over_max_unique_ids``,
        ``share_steps_needing_minibatching`` (fraction of steps), ``dropped_pairs_per_step``,
        ``dropped_pairs_share`` (of all pairs), ``dropped_unique_ids_per_step``,
        ``coo_buffer_entries_per_device``, ``coo_buffer_bytes_per_device`` (bytes),
        ``spmem_partition_buffer_bytes_ids``, ``spmem_partition_buffer_bytes_unique`` (bytes,
        the SPMEM hook); per stack ``row_pointer_bytes_per_device``.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import FeatureSpec, TableSpec
    >>> data = scwork.datasets.synthetic(64, num_steps=4, vocab_size=1000, seed=3)
    >>> ds = collect_stats(data.batches(), [FeatureSpec("f0", TableSpec("t", 1000, 8))], scwork.Topology(2, 2))
    >>> top = int(ds["observed_max_ids"].max())
    >>> t = tradeoff(ds, [8, 10 * top])
    >>> t["share_steps_needing_minibatching"].sel(stack="t").values.tolist()
    [1.0, 0.0]
    >>> t["coo_buffer_bytes_per_device"].sel(stack="t", candidate=8).item()     # 8 * 2 * 4 * 12
    768
    """
    _check_step_stats(step_stats, ("ids", "unique_ids", "observed_max_ids", "observed_max_unique_ids"))
    import xarray as xr

    cands, ucands = _checked_candidates(step_stats, candidates, unique_candidates)
    bytes_per_entry = _check_positive_int(bytes_per_entry, "bytes_per_entry")
    S = int(step_stats.sizes["sc"])
    P = int(step_stats.sizes["partition"])

    ns, T, over_ids, over_uniq, drop_pairs, drop_uniq, total_pairs = _limit_exceedances(step_stats, cands, ucands)
    entries = round_up(cands, _ALIGN) * S * P
    names = step_stats["stack"].values

    def cv(values, long_name, units):
        return (("stack", "candidate"), values, {"long_name": long_name, "units": units})

    with np.errstate(invalid="ignore", divide="ignore"):
        share_drop = np.where(total_pairs[:, None] > 0, drop_pairs.sum(axis=1) / total_pairs[:, None], 0.0)
    ds = xr.Dataset(
        {
            "share_steps_over_max_ids": cv(over_ids.mean(axis=1), "share of steps whose observed max ids exceed "
                                           "the candidate", "1"),
            "share_steps_over_max_unique_ids": cv(over_uniq.mean(axis=1), "share of steps whose observed max "
                                                  "unique ids exceed the candidate", "1"),
            "share_steps_needing_minibatching": cv((over_ids | over_uniq).mean(axis=1),
                                                   "share of steps needing mini-batching (or dropping)", "1"),
            "dropped_pairs_per_step": cv(drop_pairs.mean(axis=1), "mean per step of (sample, id) pairs the "
                                         "max_ids prefix cut drops (sum of max(0, ids - limit) over streams)",
                                         "ids"),
            "dropped_pairs_share": cv(share_drop, "dropped pairs / all pairs over the steps", "1"),
            "dropped_unique_ids_per_step": cv(drop_uniq.mean(axis=1), "mean per step of distinct ids the "
                                              "max_unique prefix cut drops (sum of max(0, unique - limit))", "ids"),
            "coo_buffer_entries_per_device": cv(np.broadcast_to(entries, (ns, cands.size)).copy(),
                                                "round_up(max_ids, 8) * S * P", "COO entries"),
            "coo_buffer_bytes_per_device": cv(np.broadcast_to(entries * bytes_per_entry, (ns, cands.size)).copy(),
                                              f"COO/CSR buffer of one device ({bytes_per_entry} B per entry)",
                                              "bytes"),
            "spmem_partition_buffer_bytes_ids": cv(
                np.broadcast_to(static_partition_buffer_bytes(cands, bytes_per_entry), (ns, cands.size)).copy(),
                "statically sized per-partition buffer: round_up(max_ids, 8) * bytes_per_entry", "bytes"),
            "spmem_partition_buffer_bytes_unique": cv(
                np.broadcast_to(static_partition_buffer_bytes(ucands, bytes_per_entry), (ns, cands.size)).copy(),
                "statically sized per-partition buffer: round_up(max_unique_ids, 8) * bytes_per_entry", "bytes"),
            "row_pointer_bytes_per_device": ("stack", np.full(ns, S * max(P, _ALIGN) * 4, np.int64),
                                             {"long_name": "CSR row pointers of one device (S * max(P, 8) int32)",
                                              "units": "bytes"}),
        },
        coords={"stack": names,
                "candidate": ("candidate", cands, {"long_name": "candidate max_ids_per_partition", "units": "ids"}),
                "max_unique_ids_per_partition": ("candidate", ucands, {"long_name": "candidate "
                                                 "max_unique_ids_per_partition", "units": "ids"})},
        attrs={"num_steps": T, "bytes_per_entry": bytes_per_entry,
               "byte_model": "COO entry = int32 embedding id + int32 sample id + float32 gain; buffer per device "
                             "= round_up(max_ids, 8) * S * P entries ([jte] preprocess_sparse_dense_matmul_input); "
                             "mini-batching (x64) not modelled",
               "dropped_model": "from per-stream counts: exact pairs for the max_ids cut alone, exact distinct ids "
                                "for the max_unique cut alone; raw duplicates not counted"},
    )
    return ds
