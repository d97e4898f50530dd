"""Inputs for every scwork model: synthetic embedding batches and real categorical tables.

Every function here returns the same structure: a dict ``feature -> (ids,
row_splits)`` (or ``(ids, row_splits, weights)``), CSR over the samples of a batch,
with int64 ``ids``, int64 ``row_splits`` of length ``batch_size + 1`` and float32
``weights``. It is what ``scwork.sharding.FeatureBatch.from_ragged`` takes.

- :func:`synthetic` draws batches with a chosen number of ids per sample
  (*valency*) and Zipf-distributed ids (hot ids), deterministically from a seed.
- :func:`load_table` reads CSV, TSV or Parquet files of categorical columns.
- :func:`write_synthetic_parquet` writes synthetic data as Parquet shards.

Zipf sampling
-------------
Ids follow a Zipf law over a finite vocabulary of ``V`` ids: rank ``r`` (1-based)
has probability ``r**-s / sum(k**-s for k in 1..V)`` for any exponent ``s >= 0``
(``s = 0`` is uniform; ``s <= 1`` is allowed, unlike ``numpy.random.zipf``). Ranks
are drawn with the exact *rejection-inversion* method of Hörmann and Derflinger
("Rejection-inversion to generate variates from monotone discrete distributions",
ACM TOMACS 6(3), 1996), in the form Apache Commons RNG uses
(``RejectionInversionZipfSampler``): invert the integral of the continuous density
``x**-s`` and accept or reject the rounded value, so the result is exactly Zipf,
costs O(1) time and memory per id whatever ``V`` is (no O(V) table, so a
vocabulary of 10**9 costs nothing), and needs about 1.1 uniforms per id. Rank
``r`` becomes id ``r - 1`` (``hashed=False``) or its image under
:func:`hash_ids` (``hashed=True``).

Examples
--------
>>> from scwork import datasets
>>> data = datasets.synthetic(4, features=["user", "item"], vocab_size=100, valency=3, seed=1)
>>> batch = data.step(0)
>>> sorted(batch)
['item', 'user']
>>> ids, row_splits = batch["user"]
>>> row_splits.shape, ids.dtype.name, bool(ids.max() < 100)
((5,), 'int64', True)
>>> bool((datasets.synthetic(4, features=["user"], vocab_size=100, valency=3, seed=1)
...       .step(0)["user"][0] == ids).all())    # a feature's stream ignores the others
True
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scwork._validate import non_negative_int, positive_int
from scwork.errors import ConfigError, InputError

__all__ = [
    "synthetic",
    "SyntheticData",
    "ValencySpec",
    "sample_zipf",
    "zipf_pmf",
    "hash_ids",
    "load_table",
    "LoadedTable",
    "write_synthetic_parquet",
    "VALENCY_KINDS",
]

#: Distributions of the number of ids per sample accepted by :func:`synthetic`.
VALENCY_KINDS: tuple[str, ...] = ("poisson", "fixed", "uniform", "lognormal")

# Largest vocabulary: ids are int64 and the hash works on 63-bit values.
_MAX_VOCAB = 2**62


# ======================================================================================
# Zipf sampling
# ======================================================================================

def zipf_pmf(vocab_size: int, exponent: float) -> np.ndarray:
    """Exact Zipf probabilities of ranks ``1..vocab_size`` (index 0 is rank 1).

    O(V) time and memory: meant for checks and plots, not for sampling.

    Parameters
    ----------
    vocab_size : int
        ``V >= 1``.
    exponent : float
        ``s >= 0``.

    Returns
    -------
    numpy.ndarray of float64
        ``p[r - 1] = r**-s / sum(k**-s for k in 1..V)``.

    Examples
    --------
    >>> from scwork.datasets import zipf_pmf
    >>> zipf_pmf(3, 1.0).round(4).tolist()     # 1, 1/2, 1/3 normalised
    [0.5455, 0.2727, 0.1818]
    """
    vocab_size = _check_vocab(vocab_size, "vocab_size")
    exponent = _check_exponent(exponent)
    weights = np.arange(1, vocab_size + 1, dtype=np.float64) ** -exponent
    return weights / weights.sum()


def sample_zipf(size: int, vocab_size: int, exponent: float, *, rng=None) -> np.ndarray:
    """Draw Zipf ranks in ``1..vocab_size`` (exact rejection-inversion, see module doc).

    Parameters
    ----------
    size : int
        Number of ranks to draw.
    vocab_size : int
        ``V >= 1``.
    exponent : float
        ``s >= 0``; ``0`` draws uniformly.
    rng : numpy.random.Generator or int, optional
        Generator or seed (``numpy.random.default_rng(rng)``).

    Returns
    -------
    numpy.ndarray of int64
        Ranks, 1-based (rank 1 is the hottest).

    Examples
    --------
    >>> from scwork.datasets import sample_zipf
    >>> ranks = sample_zipf(100_000, 1000, 1.05, rng=0)
    >>> int(ranks.min()) >= 1 and int(ranks.max()) <= 1000
    True
    >>> from scwork.datasets import zipf_pmf
    >>> round(float(zipf_pmf(1000, 1.05)[0]), 3)            # P(rank 1)
    0.156
    >>> abs(float((ranks == 1).mean()) - 0.156) < 0.005     # observed frequency
    True
    """
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
        raise ConfigError(f"size must be a non-negative integer, got {size!r}")
    vocab_size = _check_vocab(vocab_size, "vocab_size")
    exponent = _check_exponent(exponent)
    rng = np.random.default_rng(rng)
    return _zipf_ranks(rng, int(size), vocab_size, exponent)


def _zipf_ranks(rng: np.random.Generator, size: int, vocab_size: int, s: float) -> np.ndarray:
    """Rejection-inversion (Hörmann & Derflinger 1996), vectorised with numpy.

    With ``h(x) = x**-s`` and ``H`` its antiderivative, ``u`` uniform on
    ``(H(1.5) - 1, H(V + 0.5)]`` gives ``x = H^-1(u)`` and candidate ``k = round(x)``;
    ``k`` is accepted when ``k - x <= sv`` (a cheap squeeze, true for most draws)
    or ``u >= H(k + 0.5) - h(k)``. Rejected positions are redrawn until none is
    left, so the output does not depend on how the work is chunked.
    """
    if vocab_size == 1 or size == 0:
        return np.ones(size, dtype=np.int64)
    if s == 0.0:
        return rng.integers(1, vocab_size + 1, size=size, dtype=np.int64)
    a = 1.0 - s
    # H(x) = (x**a - 1) / a, written with expm1/log1p so that it stays accurate
    # for s close to 1; s == 1 exactly is the limit log(x).
    if a != 0.0:
        def big_h(x):
            return np.expm1(a * np.log(x)) / a

        def big_h_inverse(u):
            t = u * a
            np.maximum(t, -1.0, out=t)  # guards rounding just below the pole at s > 1
            np.log1p(t, out=t)
            t /= a
            return np.exp(t, out=t)
    else:
        big_h, big_h_inverse = np.log, np.exp

    def small_h(x):
        return np.exp(-s * np.log(x))

    ranks = np.empty(size, dtype=np.int64)
    pending = np.arange(size)
    # For large s, H^-1 can hit its pole (log1p(-1) = -inf, exp -> 0, rank 1): fine.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        h_low = float(big_h(np.float64(1.5))) - 1.0
        h_high = float(big_h(np.float64(vocab_size + 0.5)))
        squeeze = 2.0 - float(big_h_inverse(np.array([float(big_h(np.float64(2.5))) - float(small_h(2.0))]))[0])
        while pending.size:
            u = rng.random(pending.size)
            u *= h_low - h_high
            u += h_high
            x = big_h_inverse(u.copy())
            k = np.floor(x + 0.5)
            np.clip(k, 1, vocab_size, out=k)
            accepted = (k - x) <= squeeze
            slow = np.flatnonzero(~accepted)
            k_slow = k[slow]
            accepted[slow] = u[slow] >= big_h(k_slow + 0.5) - small_h(k_slow)
            ranks[pending[accepted]] = k[accepted]
            pending = pending[~accepted]
    return ranks


# ======================================================================================
# Hashing: a bijection of [0, V) that scatters hot ids
# ======================================================================================

# Odd multipliers (from splitmix64 / murmur3 finalisers); odd => invertible mod 2**n.
_MIX_MULTIPLIERS = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_GOLDEN = 0x9E3779B97F4A7C15


def hash_ids(ids, vocab_size: int, *, key: int = 0) -> np.ndarray:
    """Scatter ids over ``[0, vocab_size)`` with a fixed bijection (a permutation).

    Why: Zipf ranks 0, 1, 2, ... would put every hot id on partition 0 of a
    mod-sharded table; real hashed ids are spread out. The permutation is a
    cycle-walking bit mixer: ``n = bit_length(V - 1)``; on ``[0, 2**n)`` apply
    ``x + c``, xor-shift, multiply by an odd constant, xor-shift, multiply, xor-shift
    (each step is a bijection of ``n``-bit integers), and while the result is
    ``>= V`` apply the mixer again. Walking the permutation's cycle this way lands
    back in ``[0, V)``, so the map is a bijection of ``[0, V)`` for every ``V``;
    since ``2**n < 2 V`` it takes fewer than 2 rounds on average.

    Parameters
    ----------
    ids : array_like of int
        Values in ``[0, vocab_size)``.
    vocab_size : int
        ``V >= 1``.
    key : int, default 0
        Selects one of many permutations (:func:`synthetic` uses a CRC-32 of the
        feature name, so different features have different hot ids).

    Returns
    -------
    numpy.ndarray of int64

    Examples
    --------
    >>> import numpy as np
    >>> from scwork.datasets import hash_ids
    >>> out = hash_ids(np.arange(10), 10)
    >>> sorted(out.tolist()) == list(range(10))      # a permutation of 0..9
    True
    >>> hash_ids([0, 1, 2, 3], 1_000_000).tolist() == hash_ids([0, 1, 2, 3], 1_000_000).tolist()
    True
    """
    vocab_size = _check_vocab(vocab_size, "vocab_size")
    values = np.asarray(ids)
    if values.size and values.dtype.kind not in "iu":
        raise InputError(f"ids must be integers, got dtype {values.dtype}")
    values = values.astype(np.int64, copy=False)
    if values.size and (values.min() < 0 or values.max() >= vocab_size):
        bad = int(np.flatnonzero((values < 0) | (values >= vocab_size))[0])
        raise InputError(
            f"hash_ids: id {int(values.flat[bad])} at position {bad} is outside [0, {vocab_size})"
        )
    bits = (vocab_size - 1).bit_length()
    if bits == 0:
        return np.zeros(values.shape, dtype=np.int64)
    mask = np.uint64((1 << bits) - 1)
    offset = np.uint64(((_GOLDEN * (int(key) + 1)) & ((1 << 64) - 1)) & int(mask))
    shift = np.uint64(max(1, (bits + 1) // 2))
    limit = np.uint64(vocab_size)

    def mix(x: np.ndarray) -> np.ndarray:
        x = (x + offset) & mask
        x ^= x >> shift
        x = (x * _MIX_MULTIPLIERS[0]) & mask
        x ^= x >> shift
        x = (x * _MIX_MULTIPLIERS[1]) & mask
        x ^= x >> shift
        return x

    mixed = mix(values.astype(np.uint64).ravel())
    outside = np.flatnonzero(mixed >= limit)
    while outside.size:  # cycle walking
        walked = mix(mixed[outside])
        mixed[outside] = walked
        outside = outside[walked >= limit]
    return mixed.astype(np.int64).reshape(values.shape)


# ======================================================================================
# Synthetic data
# ======================================================================================

@dataclass(frozen=True)
class ValencySpec:
    """How many ids each sample of a feature has.

    Attributes
    ----------
    kind : str
        ``"poisson"`` (``mean``), ``"fixed"`` (``value``), ``"uniform"`` (integers
        ``low..high`` inclusive) or ``"lognormal"`` (``mean`` of the valency and
        ``sigma`` of the underlying normal, rounded to the nearest integer).
    params : tuple of (str, float)
        The kind's parameters.
    min, max : int or None
        Optional clipping of every sample's count (e.g. a maximum sequence length).

    Examples
    --------
    >>> from scwork.datasets import ValencySpec
    >>> ValencySpec.parse(20)
    ValencySpec(kind='poisson', params=(('mean', 20.0),), min=None, max=None)
    >>> ValencySpec.parse("uniform(1, 5)").params
    (('low', 1.0), ('high', 5.0))
    >>> ValencySpec.parse({"kind": "lognormal", "mean": 10, "sigma": 0.5, "max": 50}).max
    50
    """

    kind: str
    params: tuple[tuple[str, float], ...]
    min: int | None = None
    max: int | None = None

    _PARAMS = {"poisson": ("mean",), "fixed": ("value",), "uniform": ("low", "high"),
               "lognormal": ("mean", "sigma")}

    @classmethod
    def parse(cls, spec: Any) -> "ValencySpec":
        """Build from a number (Poisson mean), ``"kind(a, b)"`` text or a ``{"kind": ...}`` dict."""
        if isinstance(spec, ValencySpec):
            return spec
        if isinstance(spec, numbers.Real) and not isinstance(spec, bool):
            return cls._build({"kind": "poisson", "mean": spec})
        if isinstance(spec, str):
            match = re.fullmatch(r"\s*(\w+)\s*(?:\(([^)]*)\))?\s*", spec)
            if not match or match.group(1) not in cls._PARAMS:
                raise ConfigError(
                    f"valency {spec!r} is not understood; use a number (Poisson mean), "
                    f"'poisson(20)', 'fixed(1)', 'uniform(1, 10)', 'lognormal(20, 0.5)' or a dict"
                )
            kind, args = match.group(1), match.group(2)
            values = [v.strip() for v in args.split(",")] if args and args.strip() else []
            names = cls._PARAMS[kind]
            if len(values) != len(names):
                raise ConfigError(f"valency {spec!r}: {kind} takes {len(names)} parameter(s) {names}")
            try:
                return cls._build({"kind": kind, **{n: float(v) for n, v in zip(names, values)}})
            except ValueError as exc:
                raise ConfigError(f"valency {spec!r}: parameters must be numbers") from exc
        if isinstance(spec, Mapping):
            return cls._build(dict(spec))
        raise ConfigError(f"valency must be a number, a string or a dict, got {spec!r}")

    @classmethod
    def _build(cls, spec: dict) -> "ValencySpec":
        kind = spec.pop("kind", None)
        if kind not in cls._PARAMS:
            raise ConfigError(f"valency kind must be one of {VALENCY_KINDS}, got {kind!r}")
        low, high = spec.pop("min", None), spec.pop("max", None)
        names = cls._PARAMS[kind]
        missing = [n for n in names if n not in spec]
        extra = sorted(set(spec) - set(names))
        if missing or extra:
            raise ConfigError(
                f"valency {kind!r} takes parameters {names} (plus optional 'min', 'max'); "
                f"missing {missing}, unexpected {extra}"
            )
        params = {}
        for name in names:
            value = spec[name]
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ConfigError(f"valency {kind} parameter {name!r} must be a finite number, got {value!r}")
            params[name] = float(value)
        if kind == "poisson" and params["mean"] < 0:
            raise ConfigError(f"Poisson valency mean must be >= 0, got {params['mean']}")
        if kind == "fixed" and (params["value"] < 0 or params["value"] != int(params["value"])):
            raise ConfigError(f"fixed valency must be a non-negative integer, got {params['value']}")
        if kind == "uniform" and not (0 <= params["low"] <= params["high"]
                                      and params["low"] == int(params["low"])
                                      and params["high"] == int(params["high"])):
            raise ConfigError(f"uniform valency needs integers 0 <= low <= high, got {params}")
        if kind == "lognormal" and (params["mean"] <= 0 or params["sigma"] < 0):
            raise ConfigError(f"lognormal valency needs mean > 0 and sigma >= 0, got {params}")
        for name, bound in (("min", low), ("max", high)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, numbers.Integral)
                                      or bound < 0):
                raise ConfigError(f"valency {name} must be a non-negative integer, got {bound!r}")
        if low is not None and high is not None and low > high:
            raise ConfigError(f"valency min ({low}) is larger than max ({high})")
        return cls(kind, tuple(params.items()),
                   None if low is None else int(low), None if high is None else int(high))

    @property
    def mean(self) -> float:
        """Expected ids per sample, before ``min``/``max`` clipping."""
        p = dict(self.params)
        return {"poisson": lambda: p["mean"], "fixed": lambda: p["value"],
                "uniform": lambda: (p["low"] + p["high"]) / 2, "lognormal": lambda: p["mean"]}[self.kind]()

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draw ``size`` per-sample id counts (int64)."""
        p = dict(self.params)
        if self.kind == "poisson":
            counts = rng.poisson(p["mean"], size)
        elif self.kind == "fixed":
            counts = np.full(size, int(p["value"]))
        elif self.kind == "uniform":
            counts = rng.integers(int(p["low"]), int(p["high"]) + 1, size)
        else:
            # mean of exp(N(mu, sigma)) is exp(mu + sigma^2 / 2): choose mu to hit `mean`.
            mu = math.log(p["mean"]) - p["sigma"] ** 2 / 2
            counts = np.rint(rng.lognormal(mu, p["sigma"], size))
        counts = np.asarray(counts, dtype=np.int64)
        if self.min is not None or self.max is not None:
            counts = np.clip(counts, self.min, self.max)
        return counts


@dataclass(frozen=True, eq=False)
class SyntheticData:
    """A deterministic stream of synthetic batches; built by :func:`synthetic`.

    Step ``i`` of feature ``f`` is drawn from its own random stream, seeded with
    ``(seed, i, crc32(f))``: it is the same whatever ``num_steps`` is, whichever
    other features are generated and in whatever order steps are asked for.

    Attributes
    ----------
    batch_size, num_steps, seed : int
    features : tuple of str
    vocab_sizes : dict of str to int
    valencies : dict of str to ValencySpec
    zipf_exponents : dict of str to float
    hashed : bool
    weights : {None, "uniform", "random"}
    """

    batch_size: int
    num_steps: int
    features: tuple[str, ...]
    vocab_sizes: dict[str, int]
    valencies: dict[str, ValencySpec]
    zipf_exponents: dict[str, float]
    hashed: bool
    weights: str | None
    seed: int

    def step(self, index: int) -> dict[str, tuple[np.ndarray, ...]]:
        """Batch number ``index`` (any ``index >= 0``, not only below ``num_steps``).

        Returns
        -------
        dict
            ``feature -> (ids, row_splits)``, or ``(ids, row_splits, weights)``
            when ``weights`` is set: int64 ids in ``[0, vocab_size)``, int64
            ``row_splits`` of length ``batch_size + 1``, float32 weights (all 1
            for ``"uniform"``, uniform in ``(0, 1]`` for ``"random"``).
        """
        if isinstance(index, bool) or not isinstance(index, numbers.Integral) or index < 0:
            raise ConfigError(f"step index must be a non-negative integer, got {index!r}")
        return {name: self._feature_step(int(index), name) for name in self.features}

    def batches(self) -> Iterator[dict[str, tuple[np.ndarray, ...]]]:
        """Steps ``0 .. num_steps - 1``, generated lazily."""
        for index in range(self.num_steps):
            yield self.step(index)

    def __iter__(self) -> Iterator[dict[str, tuple[np.ndarray, ...]]]:
        return self.batches()

    def __len__(self) -> int:
        return self.num_steps

    @property
    def expected_ids_per_step(self) -> float:
        """Mean number of ids one step holds over all features (before valency clipping)."""
        return self.batch_size * sum(v.mean for v in self.valencies.values())

    def _feature_step(self, index: int, name: str) -> tuple[np.ndarray, ...]:
        # CRC-32 of the name (not Python's salted hash) keeps streams stable across runs.
        name_key = zlib.crc32(name.encode("utf-8"))
        rng = np.random.default_rng([self.seed, index, name_key])
        counts = self.valencies[name].sample(rng, self.batch_size)
        row_splits = np.zeros(self.batch_size + 1, dtype=np.int64)
        np.cumsum(counts, out=row_splits[1:])
        total = int(row_splits[-1])
        vocab = self.vocab_sizes[name]
        ids = _zipf_ranks(rng, total, vocab, self.zipf_exponents[name]) - 1
        if self.hashed:
            ids = hash_ids(ids, vocab, key=name_key)
        if self.weights is None:
            return ids, row_splits
        if self.weights == "uniform":
            weights = np.ones(total, dtype=np.float32)
        else:
            weights = (1.0 - rng.random(total, dtype=np.float32)).astype(np.float32)
        return ids, row_splits, weights

    def __repr__(self) -> str:
        return (f"SyntheticData(batch_size={self.batch_size}, num_steps={self.num_steps}, "
                f"features={list(self.features)}, hashed={self.hashed}, weights={self.weights!r}, "
                f"seed={self.seed})")


def synthetic(
    batch_size: int,
    *,
    num_steps: int = 1,
    features: int | Sequence[str] = 1,
    vocab_size: int | Mapping[str, int] = 1_000_000,
    valency: Any = 20,
    zipf_exponent: float | Mapping[str, float] = 1.05,
    hashed: bool = True,
    weights: str | None = None,
    seed: int = 0,
) -> SyntheticData:
    """Synthetic embedding-lookup batches with hot ids.

    Parameters
    ----------
    batch_size : int
        Samples per step (>= 1).
    num_steps : int, default 1
        Steps :meth:`SyntheticData.batches` yields.
    features : int or sequence of str, default 1
        Number of features (named ``f0, f1, ...``) or their names.
    vocab_size : int or mapping, default 1_000_000
        Ids per feature's table, one value for all or ``{feature: V}``.
    valency : number, str, dict or mapping, default 20
        Ids per sample: a number is a Poisson mean (``20`` means Poisson(20));
        ``"fixed(1)"``, ``"uniform(1, 10)"``, ``"lognormal(20, 0.5)"``; or
        ``{"kind": "poisson"|"fixed"|"uniform"|"lognormal", ..., "min": .., "max": ..}``
        (see :class:`ValencySpec`). A mapping without ``"kind"`` gives one spec
        per feature.
    zipf_exponent : float or mapping, default 1.05
        ``s >= 0`` of the Zipf law over ranks; 0 draws ids uniformly.
    hashed : bool, default True
        True: ranks go through :func:`hash_ids` (a fixed permutation per
        vocabulary size and feature name) so hot ids are spread over the
        vocabulary and thus over partitions. False: the hottest id is 0, then 1, ...
    weights : {None, "uniform", "random"}, default None
        Add float32 per-id weights: all ones, or uniform in ``(0, 1]``.
    seed : int, default 0
        Non-negative seed.

    Returns
    -------
    SyntheticData

    Examples
    --------
    >>> from scwork import datasets
    >>> data = datasets.synthetic(3, valency="fixed(2)", vocab_size=10, hashed=False,
    ...                           zipf_exponent=3.0, weights="uniform", seed=7)
    >>> ids, row_splits, weights = data.step(0)["f0"]
    >>> row_splits.tolist(), weights.tolist()
    ([0, 2, 4, 6], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    >>> int(ids.max()) < 10
    True
    """
    batch_size = _positive_int(batch_size, "batch_size")
    num_steps = _non_negative_int(num_steps, "num_steps")
    seed = _non_negative_int(seed, "seed")
    if isinstance(features, numbers.Integral) and not isinstance(features, bool):
        count = _positive_int(features, "features")
        names = tuple(f"f{i}" for i in range(count))
    elif isinstance(features, Sequence) and not isinstance(features, str):
        names = tuple(features)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"features must be a positive count or non-empty names, got {features!r}")
        if len(set(names)) != len(names):
            raise ConfigError(f"feature names must be distinct, got {list(names)}")
    else:
        raise ConfigError(f"features must be a count or a list of names, got {features!r}")
    if not isinstance(hashed, bool):
        raise ConfigError(f"hashed must be True or False, got {hashed!r}")
    if weights not in (None, "uniform", "random"):
        raise ConfigError(f"weights must be None, 'uniform' or 'random', got {weights!r}")

    vocab_sizes = {n: _check_vocab(v, f"vocab_size of {n!r}")
                   for n, v in _per_feature(vocab_size, names, "vocab_size").items()}
    valency_is_one_spec = not isinstance(valency, Mapping) or "kind" in valency
    valencies = {n: ValencySpec.parse(v) for n, v in
                 (dict.fromkeys(names, valency) if valency_is_one_spec
                  else _per_feature(valency, names, "valency")).items()}
    exponents = {n: _check_exponent(s) for n, s in _per_feature(zipf_exponent, names, "zipf_exponent").items()}
    return SyntheticData(batch_size, num_steps, names, vocab_sizes, valencies, exponents,
                         hashed, weights, seed)


def _per_feature(value, names: tuple[str, ...], what: str) -> dict:
    if not isinstance(value, Mapping):
        return dict.fromkeys(names, value)
    missing = [n for n in names if n not in value]
    extra = sorted(set(value) - set(names))
    if missing or extra:
        raise ConfigError(f"{what} per feature must name exactly the features {list(names)}; "
                          f"missing {missing}, unknown {extra}")
    return {n: value[n] for n in names}


# ======================================================================================
# Real data: CSV / TSV / Parquet
# ======================================================================================

_DELIMITED = {".csv": ",", ".tsv": "\t", ".tab": "\t"}
_PARQUET = {".parquet", ".pq"}
_COMPRESSED = {".gz", ".bz2", ".zst", ".lz4"}
# A text token that is an integer id: decimal digits, optionally signed, optionally
# followed by a zero fraction ("7", "+7", "7.0").
_INTEGER_TOKEN = r"^[+-]?[0-9]+(\.0*)?$"
_PARQUET_CODECS = {"none", "snappy", "gzip", "brotli", "lz4", "zstd"}


@dataclass(frozen=True, eq=False)
class LoadedTable:
    """Categorical columns of a file as per-feature CSR arrays; built by :func:`load_table`.

    Attributes
    ----------
    path : str
        The file (or directory of Parquet shards) read.
    features : dict of str to (ids, row_splits)
        Every sample of the file, one entry per loaded column.
    vocabularies : dict of str to numpy.ndarray or None
        For a categorical (text) column, ``vocabularies[c][i]`` is the string of id
        ``i`` (sorted distinct values, so ids do not depend on row order); None for
        a column whose values are already integer ids.
    num_samples : int
    batch_size : int or None
    drop_remainder : bool
    """

    path: str
    features: dict[str, tuple[np.ndarray, np.ndarray]]
    vocabularies: dict[str, np.ndarray | None]
    num_samples: int
    batch_size: int | None = None
    drop_remainder: bool = False

    def __len__(self) -> int:
        """Number of batches :meth:`batches` yields."""
        if self.batch_size is None:
            return 1
        full, rest = divmod(self.num_samples, self.batch_size)
        return full + (1 if rest and not self.drop_remainder else 0)

    def batch(self, index: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Batch ``index``: samples ``[index * batch_size, (index + 1) * batch_size)``.

        The last batch is shorter when ``num_samples`` is not a multiple of
        ``batch_size`` (or absent with ``drop_remainder=True``).
        """
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} out of range: {len(self)} batch(es)")
        if self.batch_size is None:
            return dict(self.features)
        start = index * self.batch_size
        stop = min(start + self.batch_size, self.num_samples)
        out = {}
        for name, (ids, row_splits) in self.features.items():
            splits = row_splits[start:stop + 1]
            out[name] = (ids[splits[0]:splits[-1]], splits - splits[0])
        return out

    def batches(self) -> Iterator[dict[str, tuple[np.ndarray, np.ndarray]]]:
        """All batches in order (the whole table once when ``batch_size`` is None)."""
        for index in range(len(self)):
            yield self.batch(index)

    def decode(self, column: str, ids) -> np.ndarray:
        """Map ids of a categorical column back to its strings.

        Examples
        --------
        >>> import os, tempfile
        >>> from scwork.datasets import load_table
        >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
        >>> _ = open(path, "w").write("city\\nParis\\nOslo|Paris\\n")
        >>> t = load_table(path)
        >>> t.features["city"][0].tolist(), t.decode("city", [1, 0]).tolist()
        ([1, 0, 1], ['Paris', 'Oslo'])
        """
        if column not in self.vocabularies:
            raise InputError(f"{self.path}: no loaded column {column!r}; loaded: {list(self.vocabularies)}")
        vocabulary = self.vocabularies[column]
        if vocabulary is None:
            raise InputError(f"{self.path}: column {column!r} holds integer ids, it has no vocabulary")
        return vocabulary[np.asarray(ids, dtype=np.int64)]


def load_table(
    path: str | os.PathLike,
    *,
    columns: Sequence[str] | None = None,
    sep: str | None = None,
    multi_value_sep: str | None = "|",
    batch_size: int | None = None,
    drop_remainder: bool = False,
) -> LoadedTable:
    """Read categorical features from CSV, TSV or Parquet (one row per sample).

    Parameters
    ----------
    path : path-like
        A ``.csv`` or ``.tsv`` file (optionally ``.gz``/``.bz2``/``.zst``
        compressed), a ``.parquet`` file, or a directory whose ``*.parquet`` files
        (in name order) form one table, e.g. from :func:`write_synthetic_parquet`.
    columns : sequence of str, optional
        Columns to load (default: all), each becoming a feature.
    sep : str, optional
        Field separator of a text file; default from the extension (``.csv``:
        ``","``, ``.tsv``: ``"\\t"``). Giving it reads any other file as text.
    multi_value_sep : str or None, default ``"|"``
        Separator inside a text cell holding several values (``"a|b|c"``); None
        keeps cells whole. Parquet list columns are multi-valued natively (their
        elements are not split).
    batch_size : int, optional
        Cut the samples into batches (:meth:`LoadedTable.batches`).
    drop_remainder : bool, default False
        False keeps a short last batch; True drops it.

    Returns
    -------
    LoadedTable

    Notes
    -----
    Per column: a null or empty cell (or empty list) is a sample with zero ids;
    tokens of a text cell are stripped of surrounding whitespace, empty tokens
    and null list elements are skipped. In a one-column text file an empty line
    is a sample without ids (with several columns, blank lines are skipped). A column whose values are integers
    (integer or integral float type, or text whose every token is a decimal
    integer such as ``7``, ``+7`` or ``7.0``) is taken as ids (negative ids are an error); any other text column
    is categorical: its distinct strings, sorted, form the vocabulary and the id
    of a string is its index there. Booleans become ids 0 and 1; other types
    (dates, ...) are read as their text.

    Raises
    ------
    InputError
        Unreadable or malformed file, unknown extension (without ``sep``),
        missing column, negative or non-integral numeric ids; the message names
        the file and the column.

    Examples
    --------
    >>> import os, tempfile
    >>> from scwork.datasets import load_table
    >>> path = os.path.join(tempfile.mkdtemp(), "clicks.tsv")
    >>> _ = open(path, "w").write("user\\tgenres\\n7\\tjazz|rock\\n3\\t\\n7\\trock\\n")
    >>> t = load_table(path, batch_size=2)
    >>> t.features["user"][0].tolist(), t.features["genres"][1].tolist()
    ([7, 3, 7], [0, 2, 2, 3])
    >>> t.vocabularies["genres"].tolist(), t.vocabularies["user"] is None
    (['jazz', 'rock'], True)
    >>> [b["genres"][1].tolist() for b in t.batches()]     # 3 samples: a short last batch
    [[0, 2, 2], [0, 1]]
    """
    import pyarrow as pa

    shown = os.fspath(path)
    if batch_size is not None:
        batch_size = _positive_int(batch_size, "batch_size")
    if multi_value_sep is not None and (not isinstance(multi_value_sep, str) or not multi_value_sep):
        raise ConfigError(f"multi_value_sep must be a non-empty string or None, got {multi_value_sep!r}")
    if columns is not None:
        if isinstance(columns, str):
            columns = [columns]
        columns = list(columns)
        if len(set(columns)) != len(columns):
            raise ConfigError(f"columns must be distinct, got {columns}")

    table = _read_arrow_table(Path(path), shown, columns, sep)
    names = columns if columns is not None else list(table.column_names)
    features, vocabularies = {}, {}
    for name in names:
        column = table.column(name)
        try:
            ids, row_splits, vocabulary = _column_to_ragged(column, multi_value_sep)
        except _ColumnError as exc:
            raise InputError(f"{shown}, column {name!r}: {exc}") from None
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
            raise InputError(f"{shown}, column {name!r}: cannot convert to ids ({type(exc).__name__}: "
                             f"{str(exc)[:300]}); expected integer ids, lists of them, or text") from None
        features[name] = (ids, row_splits)
        vocabularies[name] = vocabulary
    return LoadedTable(shown, features, vocabularies, table.num_rows, batch_size, bool(drop_remainder))


def _file_format(path: Path, sep: str | None) -> tuple[str, str | None]:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSED:
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if sep is not None:
        return "text", sep
    if last in _PARQUET:
        return "parquet", None
    if last in _DELIMITED:
        return "text", _DELIMITED[last]
    raise InputError(
        f"{path}: cannot tell the format from the extension {last or '(none)'!r}; "
        f"use .csv, .tsv or .parquet, or pass sep=',' to read it as delimited text"
    )


def _read_arrow_table(path: Path, shown: str, columns: list[str] | None, sep: str | None):
    """Read the file with pyarrow; every failure becomes an InputError naming the file."""
    import pyarrow as pa

    if not path.exists():
        raise InputError(f"{shown}: no such file or directory")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in _PARQUET)
        if not files:
            raise InputError(f"{shown}: directory holds no .parquet files")
        tables = [_read_arrow_table(f, str(f), columns, None) for f in files]
        try:
            return pa.concat_tables(tables)
        except pa.ArrowException as exc:
            raise InputError(f"{shown}: the Parquet files have different schemas ({exc})") from None
    kind, delimiter = _file_format(path, sep)
    try:
        if kind == "parquet":
            return _read_parquet(path, shown, columns)
        return _read_delimited(path, shown, columns, delimiter)
    except InputError:
        raise
    except (pa.ArrowException, OSError, UnicodeDecodeError, ValueError, EOFError, zlib.error) as exc:
        # truncated, bit-flipped or badly compressed files, wrong encodings
        raise InputError(f"{shown}: cannot read the file as {'Parquet' if kind == 'parquet' else 'delimited text'} "
                         f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]}); expected a valid "
                         f"{'Parquet file' if kind == 'parquet' else 'UTF-8 CSV/TSV file with a header line'}") from None


def _read_parquet(path: Path, shown: str, columns: list[str] | None):
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    _check_columns(shown, columns, schema.names)
    return pq.read_table(path, columns=columns)


def _read_delimited(path: Path, shown: str, columns: list[str] | None, delimiter: str):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if len(delimiter) != 1:
        raise InputError(f"{shown}: sep must be one character, got {delimiter!r}")
    header = pacsv.open_csv(path, parse_options=pacsv.ParseOptions(delimiter=delimiter)).schema.names
    # In a one-column file an empty line is a sample without ids; with several
    # columns it can only be a stray blank line.
    parse = pacsv.ParseOptions(delimiter=delimiter, ignore_empty_lines=len(header) > 1)
    _check_columns(shown, columns, header)
    wanted = columns if columns is not None else header
    # Read every column as text: the integer/categorical decision is made per column
    # on the tokens after splitting multi-valued cells, the same for CSV and Parquet.
    # Only empty cells are missing ("NA" or "null" can be real categories).
    convert = pacsv.ConvertOptions(
        include_columns=wanted,
        column_types={name: pa.string() for name in wanted},
        null_values=[""],
        strings_can_be_null=True,
    )
    return pacsv.read_csv(path, parse_options=parse, convert_options=convert)


def _check_columns(shown: str, columns: list[str] | None, available: list[str]) -> None:
    duplicated = sorted({name for name in available if available.count(name) > 1})
    if duplicated:
        raise InputError(f"{shown}: the header names the columns {duplicated} more than once; column names "
                         "must be distinct")
    if columns is None:
        return
    for name in columns:
        if name not in available:
            raise InputError(f"{shown}: no column {name!r}; the file has columns {list(available)}")


class _ColumnError(Exception):
    """A problem with one column's values; load_table adds the file and column."""


def _column_to_ragged(column, multi_value_sep: str | None):
    """One Arrow column -> (ids int64, row_splits int64, vocabulary or None)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    num_rows = len(values)
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    kind = values.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        parents = pc.list_parent_indices(values)
        flat = pc.list_flatten(values)
        if pa.types.is_dictionary(flat.type):
            flat = flat.dictionary_decode()
        split_text = False
    else:
        parents = pa.array(np.arange(num_rows, dtype=np.int64))
        flat = values
        split_text = multi_value_sep is not None
    if pa.types.is_string(flat.type) or pa.types.is_large_string(flat.type):
        pass
    elif not (pa.types.is_integer(flat.type) or pa.types.is_floating(flat.type)
              or pa.types.is_boolean(flat.type) or pa.types.is_null(flat.type)):
        flat = pc.cast(flat, pa.string())  # dates, decimals, ...: categorical by their text
    if split_text and (pa.types.is_string(flat.type) or pa.types.is_large_string(flat.type)):
        pieces = pc.split_pattern(flat, multi_value_sep)
        parents = pc.take(parents, pc.list_parent_indices(pieces))
        flat = pc.list_flatten(pieces)

    vocabulary = None
    parents = np.asarray(parents.to_numpy(zero_copy_only=False), dtype=np.int64)
    if pa.types.is_string(flat.type) or pa.types.is_large_string(flat.type):
        flat = pc.utf8_trim_whitespace(flat)
        keep = pc.fill_null(pc.greater(pc.utf8_length(flat), 0), False)
        flat = pc.filter(flat, keep)
        parents = parents[keep.to_numpy(zero_copy_only=False)]
        if len(flat) and pc.all(pc.match_substring_regex(flat, _INTEGER_TOKEN)).as_py():
            # "+5" -> "5", "3.0" -> "3" (pandas writes integer columns with gaps as floats).
            canonical = pc.replace_substring_regex(flat, r"^\+|\.0*$", "")
            try:
                ids = pc.cast(canonical, pa.int64()).to_numpy()
            except pa.ArrowInvalid:
                # say which value and sample (without int() on a 5,000-digit token)
                tokens = canonical.to_pylist()
                bad = next((i for i, t in enumerate(tokens)
                            if len(t.lstrip("+-").lstrip("0")) > 19 or not -2**63 <= int(t) < 2**63), None)
                if bad is None:
                    raise _ColumnError("an integer id does not fit in int64") from None
                shown = tokens[bad] if len(tokens[bad]) <= 40 else f"{tokens[bad][:20]}... ({len(tokens[bad])} digits)"
                raise _ColumnError(f"id {shown} in sample {int(parents[bad])} (0-based, header excluded) does not "
                                   "fit in int64 (|id| < 2**63)") from None
            _check_non_negative(ids, parents)
        else:
            distinct = pc.unique(flat)
            vocabulary_arrow = pc.take(distinct, pc.sort_indices(distinct))
            ids = pc.index_in(flat, value_set=vocabulary_arrow).to_numpy().astype(np.int64)
            vocabulary = vocabulary_arrow.to_numpy(zero_copy_only=False)
    else:
        valid = flat.is_valid().to_numpy(zero_copy_only=False)
        if pa.types.is_null(flat.type):
            numbers_ = np.zeros(len(flat), dtype=np.int64)
        elif pa.types.is_boolean(flat.type):
            numbers_ = pc.fill_null(flat, False).to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            numbers_ = pc.fill_null(flat, 0).to_numpy(zero_copy_only=False)
        if numbers_.dtype.kind == "f":
            valid &= ~np.isnan(numbers_)  # NaN is pandas' missing value
            finite = numbers_[valid]
            bad = ~np.isfinite(finite) | (finite != np.round(finite))
            if bad.any():
                row = int(parents[valid][np.argmax(bad)])
                raise _ColumnError(f"value {finite[np.argmax(bad)]!r} in sample {row} is not an integer id")
            # range before the cast: float 1e300 would become -2**63 and read as "negative"
            huge = np.abs(finite) >= 2.0**63
            if huge.any():
                row = int(parents[valid][np.argmax(huge)])
                raise _ColumnError(f"value {finite[np.argmax(huge)]!r} in sample {row} is outside the int64 "
                                   "range of ids (|id| < 2**63)")
        elif numbers_.dtype == np.uint64 and numbers_.size and numbers_.max() > np.iinfo(np.int64).max:
            raise _ColumnError("an id does not fit in int64")
        ids = numbers_[valid].astype(np.int64)
        parents = parents[valid]
        _check_non_negative(ids, parents)
    row_splits = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(parents, minlength=num_rows), out=row_splits[1:])
    return np.ascontiguousarray(ids, dtype=np.int64), row_splits, vocabulary


def _check_non_negative(ids: np.ndarray, parents: np.ndarray) -> None:
    negative = ids < 0
    if negative.any():
        first = int(np.argmax(negative))
        raise _ColumnError(
            f"id {int(ids[first])} in sample {int(parents[first])} (0-based, header excluded) is "
            f"negative ({int(negative.sum())} negative id(s)); ids must be >= 0 - remap them, or "
            "store the column as text to have it mapped through a vocabulary"
        )


def write_synthetic_parquet(
    directory: str | os.PathLike,
    num_shards: int,
    *,
    rows_per_shard: int = 16384,
    features: int | Sequence[str] = 1,
    vocab_size: int | Mapping[str, int] = 1_000_000,
    valency: Any = 20,
    zipf_exponent: float | Mapping[str, float] = 1.05,
    hashed: bool = True,
    seed: int = 0,
    compression: str = "zstd",
) -> list[Path]:
    """Write a synthetic dataset as Parquet shards, one row per sample.

    Shard ``i`` is step ``i`` of ``synthetic(rows_per_shard, ...)`` with the same
    arguments; every feature is a ``list<int64>`` column. Read it back with
    ``load_table(directory)`` (all shards, in order) or one shard at a time.

    Parameters
    ----------
    directory : path-like
        Created if missing; files are ``part-00000.parquet``, ``part-00001.parquet``, ...
    num_shards : int
        Number of files (>= 1).
    rows_per_shard : int, default 16384
        Samples per file.
    features, vocab_size, valency, zipf_exponent, hashed, seed
        As in :func:`synthetic`.
    compression : str, default ``"zstd"``
        Parquet compression codec (``"none"``, ``"snappy"``, ``"zstd"``, ...).

    Returns
    -------
    list of pathlib.Path
        The files written, in shard order.

    Examples
    --------
    >>> import tempfile
    >>> from scwork.datasets import write_synthetic_parquet, load_table
    >>> folder = tempfile.mkdtemp()
    >>> files = write_synthetic_parquet(folder, 2, rows_per_shard=5, features=["a"], valency=2)
    >>> [f.name for f in files], load_table(folder).num_samples
    (['part-00000.parquet', 'part-00001.parquet'], 10)
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    num_shards = _positive_int(num_shards, "num_shards")
    data = synthetic(rows_per_shard, num_steps=num_shards, features=features, vocab_size=vocab_size,
                     valency=valency, zipf_exponent=zipf_exponent, hashed=hashed, seed=seed)
    if compression is not None and (not isinstance(compression, str)
                                    or compression.lower() not in _PARQUET_CODECS):
        raise ConfigError(f"compression must be None or one of {sorted(_PARQUET_CODECS)}, got {compression!r}")
    folder = Path(directory)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: exists and is not a directory; give a directory for the shards")
    # Every shard is built before the first byte is written, and written to a temporary
    # name: either all shards appear (renamed at the end) or none (a failure removes
    # the temporaries), never half a data set.
    tables = []
    for index in range(num_shards):
        batch = data.step(index)
        arrays = {}
        for name, (ids, row_splits) in batch.items():
            values = pa.array(ids, type=pa.int64())
            if row_splits[-1] < 2**31:
                arrays[name] = pa.ListArray.from_arrays(pa.array(row_splits.astype(np.int32)), values)
            else:  # more than 2**31 ids in one shard needs 64-bit offsets
                arrays[name] = pa.LargeListArray.from_arrays(pa.array(row_splits), values)
        tables.append(pa.table(arrays))
    targets = [folder / f"part-{index:05d}.parquet" for index in range(num_shards)]
    temporaries = [folder / f".part-{index:05d}.parquet.{os.getpid()}.tmp" for index in range(num_shards)]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for table, temporary in zip(tables, temporaries):
            pq.write_table(table, temporary, compression=compression)
        for temporary, target in zip(temporaries, targets):
            os.replace(temporary, target)
    except (OSError, pa.ArrowException) as exc:
        for temporary in temporaries:
            with contextlib.suppress(OSError):
                temporary.unlink()
        raise ConfigError(f"{folder}: cannot write the Parquet shards ({type(exc).__name__}: {exc}); nothing "
                          "was written") from None
    return targets


# ======================================================================================
# argument checks
# ======================================================================================

def _positive_int(value, name: str) -> int:
    return positive_int(name, value)


def _non_negative_int(value, name: str) -> int:
    return non_negative_int(name, value)


def _check_vocab(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= _MAX_VOCAB:
        raise ConfigError(f"{name} must be an integer in [1, 2**62], got {value!r}")
    return int(value)


def _check_exponent(value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"zipf_exponent must be a finite number >= 0, got {value!r}")
    return float(value)
