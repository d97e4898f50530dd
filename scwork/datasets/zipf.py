"""Zipf-distributed ids over a finite vocabulary, drawn exactly by rejection-inversion.

Ids follow a Zipf law over a finite vocabulary of ``V`` ids: rank ``r`` (1-based) has
probability ``r**-s / sum(k**-s for k in 1..V)`` for any exponent ``s >= 0`` (``s = 0`` is
uniform; ``s <= 1`` is allowed, unlike ``numpy.random.zipf``). Ranks are drawn with the
exact *rejection-inversion* method of Hörmann and Derflinger ("Rejection-inversion to
generate variates from monotone discrete distributions", ACM TOMACS 6(3), 1996), in the form
Apache Commons RNG uses (``RejectionInversionZipfSampler``): O(1) time and memory per id
whatever ``V`` is, about 1.1 uniforms per id.
"""

from __future__ import annotations

import numbers

import numpy as np

from scwork.datasets._checks import _check_exponent, _check_vocab
from scwork.errors import ConfigError

__all__ = ["zipf_pmf", "sample_zipf"]


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
    if vocab_size > MAX_PMF_SIZE:
        # One float64 per rank plus two temporaries of the same size: refuse before allocating.
        raise ConfigError(
            f"zipf_pmf of {vocab_size:,} ranks would take {3 * 8 * vocab_size / 2**30:,.1f} GiB, more than "
            f"scwork.datasets.zipf.MAX_PMF_SIZE={MAX_PMF_SIZE:,} ranks; draw ids with sample_zipf instead "
            f"(it needs no table of probabilities)")
    weights = np.arange(1, vocab_size + 1, dtype=np.float64) ** -exponent
    return weights / weights.sum()


#: Most ranks :func:`zipf_pmf` tabulates (2**24: 128 MiB of float64 plus two temporaries).
MAX_PMF_SIZE = 2**24


#: Most ids one :func:`sample_zipf` call draws (2**27: 1 GiB of int64 ranks plus temporaries).
MAX_SAMPLE_SIZE = 2**27


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
    if size > MAX_SAMPLE_SIZE:      # every caller (sample_zipf, synthetic steps) comes through here
        raise ConfigError(f"{size:,} ids would take {8 * size / 2**30:,.1f} GiB, more than "
                          f"scwork.datasets.zipf.MAX_SAMPLE_SIZE={MAX_SAMPLE_SIZE:,} ids in one draw; draw "
                          "smaller batches (or a smaller valency)")
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
