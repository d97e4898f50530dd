"""Closed-form sizes against jax-tpu-embedding's own formulas.

The library computes the static CSR buffers from the limits alone:
``compute_theoretical_max_coo_buffer_size`` (entries per device for a given
``max_ids_per_partition``) and ``compute_row_pointers_size_per_device``. scwork sizes
the CSR buffers of :func:`scwork.sharding.preprocess` from the configured limits; both
are compared here for every topology of the oracle (S in {2, 4}, P up to 64) and a
range of limits.

:func:`scwork.sharding.estimate_limits` (limits from batch size and valency alone)
models the ``xla_sparse_core_estimate_max_ids`` flag of [sc-guide] §6; the library has no counterpart, so it is
checked by hand in ``tests/sharding/test_limits.py``, not here.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, preprocess
from scwork.testing import oracle_examples

jte = pytest.importorskip("jax_tpu_embedding.sparsecore.lib.nn.embedding",
                          reason="the oracle needs jax-tpu-embedding (Python >= 3.12: pip install -e '.[oracle]')")


@settings(max_examples=oracle_examples(100), deadline=None)
@given(st.sampled_from([2, 4]), st.sampled_from([1, 2, 4, 8, 16]), st.integers(1, 5000))
def test_csr_buffer_sizes_from_limits_equal_the_library(S, D, max_ids):
    P = D * S
    if P > 64:
        return
    theirs_buffer = jte.compute_theoretical_max_coo_buffer_size(
        max_ids_per_partition=max_ids, global_device_count=D, num_sc_per_device=S)
    theirs_pointers = jte.compute_row_pointers_size_per_device(global_device_count=D, num_sc_per_device=S)
    table = TableSpec("t", 10 * P, 8, max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_ids)
    batch = FeatureBatch.from_dense({"f": np.zeros((P, 1), np.int64)})
    csr = preprocess(batch, [FeatureSpec("f", table)], scwork.Topology(D, S), None, num_threads=1).csr["t"]
    assert csr.embedding_ids.shape[1] == theirs_buffer      # entries per device
    assert csr.row_pointers.shape[1] == theirs_pointers     # row pointers per device
