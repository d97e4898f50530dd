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

from scwork.datasets.files import LoadedTable, load_table, write_synthetic_parquet
from scwork.datasets.hashing import hash_ids
from scwork.datasets.synthetic import VALENCY_KINDS, SyntheticData, ValencySpec, synthetic
from scwork.datasets.zipf import sample_zipf, zipf_pmf

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
