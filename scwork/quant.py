"""Simulated quantization of embedding lookups: clip, bucketize, dequantize.

As TensorFlow's ``QuantizationConfig`` does it.

The SparseCore's sparse-dense matmul can simulate quantization
(``quantization_config_num_buckets``, ``quantization_config_low``,
``quantization_config_high``). scwork follows the exact mapping of TensorFlow's
``tf.tpu.experimental.embedding.QuantizationConfig`` (docstring in
``tensorflow/python/tpu/tpu_embedding_v2_utils.py``; settings stored in
``optimization_parameters.proto`` as ``simulated_quantization {num_buckets,
clipping_limits {lower, upper}}``)::

    if input < lower: input = lower
    if input > upper: input = upper
    quantum = (upper - lower) / (num_buckets - 1)
    input = floor((input - lower) / quantum + 0.5) * quantum + lower

so the ``num_buckets`` levels are ``low + i * quantum`` for ``i = 0 .. num_buckets -
1`` (the first is ``low``, the last ``high``) and a value goes to the nearest level,
ties upwards (``floor(x + 0.5)``, not numpy's round-half-to-even). The results of the
embedding lookup are quantized *before the combiner* is applied, and the storage
type of the table stays float32 (TensorFlow's note); :func:`hbm_savings` answers
what storing the table as int8 (post-training quantization, [sc-guide] §13) would
save. ``num_buckets`` must be at least 2 (TensorFlow raises ``ValueError``
otherwise).

Examples
--------
>>> from scwork.quant import QuantizationConfig, fake_quantize
>>> cfg = QuantizationConfig(num_buckets=5, low=-1.0, high=1.0)   # levels -1, -0.5, 0, 0.5, 1
>>> cfg.quantum, cfg.levels().tolist()
(0.5, [-1.0, -0.5, 0.0, 0.5, 1.0])
>>> fake_quantize([-3.0, -0.3, 0.25, 0.26, 0.74, 2.0], cfg).tolist()
[-1.0, -0.5, 0.5, 0.5, 0.5, 1.0]

``0.25`` is exactly between 0 and 0.5 and goes up (``floor(2.5 + 0.5) = 3``).

>>> QuantizationConfig(num_buckets=1, low=0.0, high=1.0)
Traceback (most recent call last):
...
scwork.errors.ConfigError: num_buckets must be an integer >= 2 (one level per bucket; 256 for 8 bits), got 1
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scwork.errors import ConfigError, InputError

__all__ = [
    "QuantizationConfig",
    "ErrorStats",
    "quantize",
    "dequantize",
    "fake_quantize",
    "error_stats",
    "pooled_error_stats",
    "calibrate",
    "sweep",
    "hbm_savings",
    "COMBINERS",
]

#: Row combiners of the pooled lookup (the gains of [jte] preprocess_sparse_dense_matmul_input).
COMBINERS: tuple[str, ...] = ("sum", "mean", "sqrtn")


@dataclass(frozen=True)
class QuantizationConfig:
    """``quantization_config_num_buckets`` / ``_low`` / ``_high`` of one table.

    Attributes
    ----------
    num_buckets : int
        Levels, >= 2 (256 for 8 bits).
    low, high : float
        Clipping range, finite, ``low < high``.

    Raises
    ------
    ConfigError
        ``num_buckets < 2`` or not an integer, ``low``/``high`` NaN or infinite,
        ``low >= high``.
    """

    num_buckets: int
    low: float
    high: float

    def __post_init__(self) -> None:
        nb = self.num_buckets
        if isinstance(nb, bool) or not isinstance(nb, numbers.Integral) or nb < 2:
            raise ConfigError("num_buckets must be an integer >= 2 (one level per bucket; 256 for 8 bits), "
                              f"got {nb!r}")
        for name in ("low", "high"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ConfigError(f"{name} must be a finite number, got {v!r}")
        if not self.low < self.high:
            raise ConfigError(f"low must be < high, got low={self.low!r}, high={self.high!r}")
        object.__setattr__(self, "num_buckets", int(nb))
        object.__setattr__(self, "low", float(self.low))
        object.__setattr__(self, "high", float(self.high))
        if not self.quantum > 0:
            raise ConfigError(f"low={self.low} and high={self.high} are too close for {nb} buckets "
                              "(the quantum underflows to 0)")

    @property
    def quantum(self) -> float:
        """Distance between levels: ``(high - low) / (num_buckets - 1)``."""
        return (self.high - self.low) / (self.num_buckets - 1)

    @property
    def bits(self) -> int:
        """Bits to store a bucket index: ``ceil(log2(num_buckets))``."""
        return max(1, math.ceil(math.log2(self.num_buckets)))

    def levels(self) -> np.ndarray:
        """All ``num_buckets`` representable values, ``low`` first, ``high`` last."""
        out = self.low + np.arange(self.num_buckets) * self.quantum
        out[-1] = self.high
        return out

    @property
    def max_rounding_error(self) -> float:
        """Largest error of a value inside ``[low, high]``: half a quantum."""
        return self.quantum / 2


def _as_config(config: Any) -> QuantizationConfig:
    if isinstance(config, QuantizationConfig):
        return config
    if isinstance(config, Mapping):
        return QuantizationConfig(config.get("num_buckets"), config.get("low"), config.get("high"))
    raise ConfigError(f"config must be a QuantizationConfig (or a dict with num_buckets, low, high), got {config!r}")


def _values(values: Any, name: str = "values") -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be an array of numbers") from None
    bad = ~np.isfinite(arr)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InputError(f"{name} holds {int(bad.sum())} NaN or infinite value(s) (first at index {where}); "
                         "simulated quantization of NaN is undefined: find where it comes from "
                         "(xla_sc_detect_nan on device)")
    return arr


def quantize(values: Any, config: Any) -> np.ndarray:
    """Bucket index of every value: clip to ``[low, high]``, then ``floor((x - low) / quantum + 0.5)``.

    Returns an int array in ``0 .. num_buckets - 1`` (int64).

    Raises
    ------
    InputError
        NaN or infinite values.

    Examples
    --------
    >>> quantize([0.0, 0.24, 0.25, 1.0, 9.0], QuantizationConfig(3, 0.0, 1.0)).tolist()
    [0, 0, 1, 2, 2]
    """
    cfg = _as_config(config)
    x = np.clip(_values(values), cfg.low, cfg.high)
    idx = np.floor((x - cfg.low) / cfg.quantum + 0.5)
    return np.clip(idx, 0, cfg.num_buckets - 1).astype(np.int64)


def dequantize(indices: Any, config: Any) -> np.ndarray:
    """Float value of bucket indices: ``low + index * quantum``.

    Raises
    ------
    InputError
        Indices that are not integers in ``0 .. num_buckets - 1``.
    """
    cfg = _as_config(config)
    idx = np.asarray(indices)
    if idx.size and (not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0 or idx.max() >= cfg.num_buckets):
        raise InputError(f"indices must be integers in 0..{cfg.num_buckets - 1}")
    out = cfg.low + idx.astype(float) * cfg.quantum
    return np.where(idx == cfg.num_buckets - 1, cfg.high, out)


def fake_quantize(values: Any, config: Any) -> np.ndarray:
    """Clip, bucketize and map back to float (what the SparseCore computes with)."""
    cfg = _as_config(config)
    return dequantize(quantize(values, cfg), cfg)


@dataclass(frozen=True)
class ErrorStats:
    """Error of simulated quantization over some values.

    Attributes
    ----------
    count : int
        Values compared.
    mse, rmse, mean_abs_error, max_abs_error : float
        Of ``quantized - original``.
    share_clipped : float
        Fraction of the *quantized inputs* outside ``[low, high]`` (for pooled
        lookups: of the looked-up elements), split in ``share_below`` and ``share_above``.
    signal_rms : float
        RMS of the original values (compare with ``rmse``).
    quantum : float
        Level spacing of the configuration.
    """

    count: int
    mse: float
    rmse: float
    mean_abs_error: float
    max_abs_error: float
    share_clipped: float
    share_below: float
    share_above: float
    signal_rms: float
    quantum: float

    @property
    def snr_db(self) -> float:
        """``20 log10(signal_rms / rmse)`` (inf when exact)."""
        if self.rmse == 0:
            return math.inf
        if self.signal_rms == 0:
            return -math.inf
        return 20 * math.log10(self.signal_rms / self.rmse)

    def as_dict(self) -> dict[str, float]:
        return {**self.__dict__, "snr_db": self.snr_db}


def _stats(orig: np.ndarray, quant: np.ndarray, inputs: np.ndarray, cfg: QuantizationConfig) -> ErrorStats:
    err = quant - orig
    n = int(orig.size)
    m = int(inputs.size)
    below = float((inputs < cfg.low).sum() / m) if m else 0.0
    above = float((inputs > cfg.high).sum() / m) if m else 0.0
    if n == 0:
        return ErrorStats(0, 0.0, 0.0, 0.0, 0.0, below + above, below, above, 0.0, cfg.quantum)
    mse = float(np.mean(err * err))
    return ErrorStats(n, mse, math.sqrt(mse), float(np.mean(np.abs(err))), float(np.max(np.abs(err))),
                      below + above, below, above, float(np.sqrt(np.mean(orig * orig))), cfg.quantum)


def error_stats(table: Any, config: Any) -> ErrorStats:
    """Error of quantizing every element of ``table`` (any shape).

    Examples
    --------
    Levels 0, 0.5, 1: 0.2 -> 0 (error 0.2), 0.7 -> 0.5 (0.2), 1.5 -> 1 (clipped, 0.5),
    MSE = (0.04 + 0.04 + 0.25) / 3 = 0.11.

    >>> s = error_stats([0.2, 0.7, 1.5], QuantizationConfig(3, 0.0, 1.0))
    >>> round(s.mse, 6), round(s.max_abs_error, 6), round(s.share_clipped, 4)
    (0.11, 0.5, 0.3333)
    """
    cfg = _as_config(config)
    x = _values(table, "table")
    return _stats(x, fake_quantize(x, cfg), x, cfg)


def _gains(combiner: str, weights: np.ndarray, splits: np.ndarray) -> np.ndarray:
    if combiner not in COMBINERS:
        raise ConfigError(f"combiner must be one of {', '.join(COMBINERS)}, got {combiner!r}")
    if combiner == "sum":
        return weights
    seg = np.repeat(np.arange(len(splits) - 1), np.diff(splits))
    if combiner == "mean":
        denom = np.bincount(seg, weights=weights, minlength=len(splits) - 1)
    else:
        denom = np.sqrt(np.bincount(seg, weights=weights * weights, minlength=len(splits) - 1))
    d = denom[seg]
    return np.divide(weights, d, out=np.zeros_like(weights), where=d != 0)


def pooled_error_stats(table: Any, config: Any, *, combiner: str = "sum", ids: Any = None, splits: Any = None,
                       weights: Any = None, num_samples: int = 1024, ids_per_sample: int = 8,
                       seed: int = 0) -> ErrorStats:
    """Error of the pooled (combined) lookups when rows are quantized before the combiner.

    Each sample's output is ``sum_j gain_j * row[id_j]`` with gains from the
    combiner (sum: the weight; mean: weight / sum of the sample's weights; sqrtn:
    weight / sqrt(sum of squared weights)); the quantized output uses
    ``fake_quantize(row)`` instead (TensorFlow quantizes the lookup results before
    the combiner). The error is taken over every (sample, element) of the output.

    Parameters
    ----------
    table : array, shape (vocab, dim)
    config : QuantizationConfig
    combiner : {"sum", "mean", "sqrtn"}
    ids, splits : array of int, optional
        Ragged samples (``ids[splits[i]:splits[i+1]]`` is sample ``i``). Default:
        ``num_samples`` samples of ``ids_per_sample`` ids drawn uniformly with
        replacement from the vocabulary (``seed``).
    weights : array of float, optional
        Per id (default 1).

    Raises
    ------
    InputError
        NaN in the table or weights, ids out of range, bad splits.
    ConfigError
        Unknown combiner, non-positive sample counts.

    Examples
    --------
    Two rows ``[0.2]`` and ``[0.7]``, levels 0, 0.5, 1; one sample looking up both:
    sum ``0.9`` becomes ``0 + 0.5 = 0.5`` (error 0.4); mean ``0.45`` becomes ``0.25`` (0.2).

    >>> cfg = QuantizationConfig(3, 0.0, 1.0)
    >>> t = [[0.2], [0.7]]
    >>> [round(pooled_error_stats(t, cfg, combiner=c, ids=[0, 1], splits=[0, 2]).max_abs_error, 6)
    ...  for c in ("sum", "mean")]
    [0.4, 0.2]
    """
    cfg = _as_config(config)
    tab = _values(table, "table")
    if tab.ndim == 1:
        tab = tab[:, None]
    if tab.ndim != 2 or tab.shape[0] < 1:
        raise InputError(f"table must be 2-D (vocab, dim) with at least one row, got shape {tab.shape}")
    if ids is None:
        for name, v in (("num_samples", num_samples), ("ids_per_sample", ids_per_sample)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
        rng = np.random.default_rng(seed)
        ids_arr = rng.integers(0, tab.shape[0], size=num_samples * ids_per_sample)
        split_arr = np.arange(num_samples + 1) * ids_per_sample
    else:
        ids_arr = np.asarray(ids)
        if ids_arr.ndim != 1 or (ids_arr.size and not np.issubdtype(ids_arr.dtype, np.integer)):
            raise InputError("ids must be a 1-D array of integers")
        if ids_arr.size and (ids_arr.min() < 0 or ids_arr.max() >= tab.shape[0]):
            raise InputError(f"ids must be in 0..{tab.shape[0] - 1} (the table's rows)")
        split_arr = np.asarray([0, ids_arr.size] if splits is None else splits)
        if (split_arr.ndim != 1 or split_arr.size < 2 or split_arr[0] != 0 or split_arr[-1] != ids_arr.size
                or np.any(np.diff(split_arr) < 0)):
            raise InputError("splits must start at 0, end at len(ids) and never decrease")
    w = np.ones(ids_arr.size) if weights is None else _values(weights, "weights")
    if w.shape != ids_arr.shape:
        raise InputError(f"weights has shape {w.shape}, ids {ids_arr.shape}")
    gains = _gains(combiner, w, split_arr)
    seg = np.repeat(np.arange(len(split_arr) - 1), np.diff(split_arr))
    rows = tab[ids_arr]
    qrows = fake_quantize(rows, cfg)
    out = np.zeros((len(split_arr) - 1, tab.shape[1]))
    qout = np.zeros_like(out)
    np.add.at(out, seg, gains[:, None] * rows)
    np.add.at(qout, seg, gains[:, None] * qrows)
    return _stats(out.ravel(), qout.ravel(), rows.ravel(), cfg)


def calibrate(table: Any, num_buckets: int = 256, *, coverage: float = 1.0) -> QuantizationConfig:
    """A configuration whose range covers ``coverage`` of the table's values (central quantiles).

    ``coverage = 1`` takes the minimum and maximum; ``0.999`` clips the 0.05 % tails
    on each side. Raises :class:`~scwork.errors.InputError` for a constant or NaN table.

    Examples
    --------
    >>> calibrate([-2.0, 0.0, 1.0, 3.0], 256)
    QuantizationConfig(num_buckets=256, low=-2.0, high=3.0)
    """
    x = _values(table, "table").ravel()
    if not isinstance(coverage, numbers.Real) or not 0 < coverage <= 1:
        raise ConfigError(f"coverage must be in (0, 1], got {coverage!r}")
    if x.size == 0:
        raise InputError("table is empty")
    tail = (1 - coverage) / 2
    low, high = (float(v) for v in np.quantile(x, [tail, 1 - tail]))
    if not low < high:
        raise InputError(f"the table's values span no range ({low} .. {high}): nothing to calibrate")
    return QuantizationConfig(num_buckets, low, high)


def sweep(table: Any, num_buckets: Sequence[int] = (16, 64, 256, 1024, 65536), *, low: float | None = None,
          high: float | None = None, combiner: str | None = None, **pooled):
    """Error statistics for several bucket counts as an :class:`xarray.Dataset`.

    ``low`` / ``high`` default to the table's minimum and maximum. With ``combiner``
    the pooled-lookup error is reported (``pooled`` keywords go to
    :func:`pooled_error_stats`), else the per-element error.

    Returns
    -------
    xarray.Dataset
        Dim ``num_buckets``; ``mse`` (value^2), ``rmse``, ``max_abs_error``
        (value units), ``share_clipped`` (1), ``snr_db`` (dB), ``bits`` (bits).
    """
    import xarray as xr

    x = _values(table, "table")
    low = float(x.min()) if low is None else low
    high = float(x.max()) if high is None else high
    rows = []
    for nb in num_buckets:
        cfg = QuantizationConfig(nb, low, high)
        s = error_stats(x, cfg) if combiner is None else pooled_error_stats(x, cfg, combiner=combiner, **pooled)
        rows.append((s, cfg.bits))
    nbs = np.asarray(list(num_buckets))

    def var(values, long_name, units):
        return ("num_buckets", np.asarray(values, dtype=float), {"long_name": long_name, "units": units})

    return xr.Dataset(
        {
            "mse": var([s.mse for s, _ in rows], "mean squared error", "value^2"),
            "rmse": var([s.rmse for s, _ in rows], "root mean squared error", "value"),
            "max_abs_error": var([s.max_abs_error for s, _ in rows], "largest absolute error", "value"),
            "share_clipped": var([s.share_clipped for s, _ in rows], "inputs outside [low, high]", "1"),
            "snr_db": var([s.snr_db for s, _ in rows], "signal to quantization noise", "dB"),
            "bits": ("num_buckets", np.array([b for _, b in rows]), {"long_name": "bits per index",
                                                                     "units": "bits"}),
        },
        coords={"num_buckets": ("num_buckets", nbs)},
        attrs={"low": low, "high": high, "what": "pooled lookups" if combiner else "table elements",
               "combiner": combiner or "", "source": "TF QuantizationConfig mapping (scwork.quant)"},
    )


def hbm_savings(tables: Any, *, topology=None, num_sparsecores: int | None = None, from_dtype: str = "f32",
                to_dtype: str = "s8", line_bytes: int = 32) -> dict[str, Any]:
    """HBM a table set saves when stored in ``to_dtype`` (int8 by default) instead of ``from_dtype``.

    Both sides are padded the SparseCore way (:func:`scwork.layout.embedding.table_padding`):
    the vocabulary to ``8 * P`` rows and each row to whole 32-byte lines, so a table
    of width 8 costs 32 bytes per row in f32 *and* in s8 (no saving), while width
    128 goes from 512 to 128 bytes. Optimizer slots are not included (simulated
    quantization keeps training state in float32; int8 storage is for inference).

    Parameters
    ----------
    tables : TableSpec, sequence of TableSpec, or mapping name -> (vocab_size, embedding_dim)
    topology, num_sparsecores
        Exactly one: gives ``P``.
    from_dtype, to_dtype : str
        ``f32``, ``bf16``, ``f16`` or ``s8``.

    Returns
    -------
    dict
        ``from_bytes``, ``to_bytes``, ``saved_bytes``, ``saved_fraction`` (all tables,
        whole system) and ``per_table``: ``{name: (from_bytes, to_bytes)}``.

    Examples
    --------
    >>> from scwork.sharding import TableSpec
    >>> r = hbm_savings([TableSpec("narrow", 1024, 8), TableSpec("wide", 1024, 128)], num_sparsecores=4)
    >>> r["per_table"]
    {'narrow': (32768, 32768), 'wide': (524288, 131072)}
    >>> r["saved_bytes"], round(r["saved_fraction"], 3)
    (393216, 0.706)
    """
    from scwork.layout.embedding import table_padding

    # Duck-typed (a TableSpec has name, vocab_size and embedding_dim) so that this
    # module stays below scwork.sharding.specs, which imports QuantizationConfig.
    if all(hasattr(tables, attr) for attr in ("name", "vocab_size", "embedding_dim")):
        items = [(tables.name, tables.vocab_size, tables.embedding_dim)]
    elif isinstance(tables, Mapping):
        items = []
        for name, value in tables.items():
            try:
                vocab, dim = value
            except (TypeError, ValueError):
                raise ConfigError(f"tables[{name!r}] must be (vocab_size, embedding_dim), got {value!r}") from None
            items.append((str(name), vocab, dim))
    else:
        try:
            items = [(t.name, t.vocab_size, t.embedding_dim) for t in tables]
        except (TypeError, AttributeError):
            raise ConfigError("tables must be a TableSpec, a sequence of TableSpec or a mapping "
                              "name -> (vocab_size, embedding_dim)") from None
    if not items:
        raise ConfigError("no tables given")
    per_table = {}
    before = after = 0
    for name, vocab, dim in items:
        a = table_padding(vocab, dim, dtype=from_dtype, num_sparsecores=num_sparsecores, topology=topology,
                          name=name, line_bytes=line_bytes).padded_bytes
        b = table_padding(vocab, dim, dtype=to_dtype, num_sparsecores=num_sparsecores, topology=topology,
                          name=name, line_bytes=line_bytes).padded_bytes
        per_table[name] = (int(a), int(b))
        before += a
        after += b
    return {"from_dtype": from_dtype, "to_dtype": to_dtype, "from_bytes": int(before), "to_bytes": int(after),
            "saved_bytes": int(before - after), "saved_fraction": (before - after) / before if before else 0.0,
            "per_table": per_table}
