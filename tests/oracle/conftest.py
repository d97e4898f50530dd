"""Oracle suite: scwork against the real jax-tpu-embedding library, on the same inputs.

Every test here is marked ``oracle`` and skips, saying why, only where
``jax_tpu_embedding`` cannot be imported (it needs Python >= 3.12; install the
``oracle`` extra). ``pytest --oracle-examples N`` runs N hypothesis examples per test.

Paths of the library compared (each module's docstring has the details):

- ``test_preprocess_oracle.py``: table stacking (``auto_stack_tables``, ``stack_tables``,
  ``prepare_feature_specs_for_training``: stack names, tables and their order, row
  offsets, rotations, limits) and ``preprocess_sparse_dense_matmul_input`` without
  mini-batching (statistics, dropped ids, static CSR buffers, every CSR entry and row
  pointer; dense, ragged and COO inputs, weights, the three combiners, id dropping);
- ``test_minibatch_oracle.py``: ``preprocess_sparse_dense_matmul_input(...,
  enable_minibatching=True)`` and ``preprocess_sparse_dense_matmul_input_from_sparse_tensor``
  (number of mini-batches, every mini-batch's CSR entries, HighwayHash buckets and the
  split tree through them; dense arrays and ragged sparse tensors);
- ``test_estimate_oracle.py``: ``compute_theoretical_max_coo_buffer_size`` and
  ``compute_row_pointers_size_per_device`` (CSR buffer sizes from the limits);
- ``test_fdo_oracle.py``: the FDO client (``NPZFileFDOClient`` files both ways) and
  ``update_preprocessing_parameters`` (limits from recorded statistics).

Deliberate differences (scwork keeps them; each is checked where it applies):

- a limit overflow without id dropping aborts the library (a CHECK failure); scwork
  raises :class:`~scwork.errors.LimitExceededError` (such cases are not sent to it);
- limits may be unset in scwork (no limit; the library defaults to 256);
- any number of partitions, not only powers of two, and ids checked against the
  vocabulary (the library does neither);
- a static buffer larger than the limits allow aborts the library; scwork raises a
  ConfigError when planning;
- an all-zero FDO history gives the library limits of 0; scwork's are at least 1.

Paths scwork models without a library counterpart, checked elsewhere by hand:
sample-dimension mini-batching (the library's roadmap; tests/sharding/test_minibatch*.py),
``estimate_limits`` ([sc-guide] closed form; tests/sharding/test_limits.py), the naive
whole-batch view (tests/sharding/test_naive_kernels.py).
"""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.oracle)


def pytest_configure(config):
    # The library logs a warning per stack it builds; keep the test output readable.
    try:
        from absl import logging as absl_logging
    except ImportError:
        return
    absl_logging.set_verbosity(absl_logging.ERROR)
