"""Bring your own model: read what jax-tpu-embedding, Keras-RS and XLA users already have.

One module per source, each imported on first use (none imports jax, keras or
protobuf at module import: those come from the ``interop`` / ``oracle`` extras and
are imported inside the functions that need them):

- :mod:`scwork.interop.jax_tpu_embedding`: the library's FeatureSpec pytrees to and
  from scwork features and stacking plans; the ``EmbeddingSpecProto`` text format.
- :mod:`scwork.interop.keras_rs`: Keras-RS ``DistributedEmbedding`` table and feature
  configs.
- :mod:`scwork.interop.xla_dump`: an ``--xla_dump_to`` folder (HLO shapes and layouts,
  buffer assignment, memory-usage report) and the TPU out-of-memory text.
- :mod:`scwork.interop.profile`: jax.profiler's Perfetto trace mapped onto scwork's
  host / SparseCore / TensorCore / ICI lanes.
"""

from __future__ import annotations

import importlib

__all__ = ["jax_tpu_embedding", "keras_rs", "xla_dump", "profile"]


def __getattr__(name: str):
    if name in __all__:
        return importlib.import_module(f"scwork.interop.{name}")
    raise AttributeError(f"module 'scwork.interop' has no attribute {name!r}")
