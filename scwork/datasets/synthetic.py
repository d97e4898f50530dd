"""Synthetic embedding batches: chosen ids per sample and Zipf-distributed ids, from a seed.

The valency (ids per sample) is chosen; the ids follow a Zipf law; a seed makes a batch
deterministic.
"""

from __future__ import annotations

import math
import numbers
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scwork.datasets._checks import _check_exponent, _check_vocab, _non_negative_int, _positive_int
from scwork.datasets.hashing import hash_ids
from scwork.datasets.zipf import _zipf_ranks
from scwork.errors import ConfigError

__all__ = ["VALENCY_KINDS", "ValencySpec", "SyntheticData", "synthetic"]


#: Distributions of the number of ids per sample accepted by :func:`synthetic`.
VALENCY_KINDS: tuple[str, ...] = ("poisson", "fixed", "uniform", "lognormal")
#: The largest valency parameter (mean, value, bound) accepted, in ids per sample:
#: far beyond any real sample, and below where numpy's samplers give up.
MAX_IDS_PER_SAMPLE: int = 2**31 - 1


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
        too_large = {n: v for n, v in params.items() if n != "sigma" and v > MAX_IDS_PER_SAMPLE}
        if too_large:
            # numpy's Poisson sampler refuses means near 2**63 with a bare ValueError.
            raise ConfigError(
                f"valency {kind} parameters {too_large} are above MAX_IDS_PER_SAMPLE="
                f"{MAX_IDS_PER_SAMPLE:,} ids per sample; use a smaller value"
            )
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
