"""Tables, features and the SparseCore configuration ([jte] table_stacking.py; [tf-sc-config]).

Three frozen dataclasses describe *what* is sharded:

- :class:`TableSpec`: one embedding table (vocabulary, width, combiner, optimizer
  and its optional per-partition limits);
- :class:`FeatureSpec`: one input feature and the table it looks up (several
  features may share a table: *feature stacking*);
- :class:`SparsecoreConfig`: the SparseCore flags of [tf-sc-config] with their defaults.

Every field is validated in ``__post_init__`` and a bad value raises
:class:`~scwork.errors.ConfigError` naming the field and how to fix it. Field
docstrings follow jax-tpu-embedding's ``embedding_spec.py`` style: a string literal
under each field stating its unit and default.

Examples
--------
>>> from scwork.sharding import TableSpec, FeatureSpec, SparsecoreConfig
>>> table = TableSpec("item", vocab_size=1000, embedding_dim=12, combiner="mean")
>>> FeatureSpec("clicked_items", table).table.padded_embedding_dim()
16
>>> SparsecoreConfig().max_ids_per_chip_per_sample
64
>>> SparsecoreConfig(max_ids_per_table={"item": 4096}).max_ids_per_table["item"]
4096
"""

from __future__ import annotations

from scwork._rounding import round_up  # re-exported: scwork.sharding.specs.round_up is public

import math
import numbers
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scwork.errors import ConfigError
from scwork.quant import QuantizationConfig

__all__ = [
    "TableSpec",
    "FeatureSpec",
    "SparsecoreConfig",
    "COMBINERS",
    "OPTIMIZERS",
    "round_up",
]

#: Row combiners of jax-tpu-embedding (``input_preprocessing_util.h``, ``RowCombiner``).
COMBINERS: tuple[str, ...] = ("sum", "mean", "sqrtn")

#: Optimizers with a SparseCore kernel in jax-tpu-embedding
#: (``jax_tpu_embedding/sparsecore/lib/core/primitives/sparse_dense_matmul_grad_with_*.py``).
OPTIMIZERS: tuple[str, ...] = ("sgd", "adagrad", "adagrad_momentum", "adam", "ftrl", "laprop")

#: Embedding ids, sample ids and buffer offsets are int32 on the device.
INT32_MAX = 2**31 - 1


def _check_int(owner: str, name: str, value: Any, *, minimum: int, allow_none: bool = False,
               maximum: int | None = None) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{owner}.{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ConfigError(f"{owner}.{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{owner}.{name} must be <= {maximum}, got {value}")


def _check_name(owner: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{owner}.name must be a non-empty string, got {value!r}")


def _check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(
            f"{owner}.{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}"
        )


@dataclass(frozen=True)
class TableSpec:
    """One embedding table.

    Mirrors ``TableSpec`` of jax-tpu-embedding
    (``jax_tpu_embedding/sparsecore/lib/nn/embedding_spec.py``) without the
    initializer and optimizer hyper-parameters, which sharding does not need.

    Examples
    --------
    >>> t = TableSpec("user", vocab_size=10, embedding_dim=3)
    >>> t.padded_vocab_size(num_partitions=2), t.padded_embedding_dim()
    (16, 8)
    >>> TableSpec("user", vocab_size=0, embedding_dim=3)
    Traceback (most recent call last):
    ...
    scwork.errors.ConfigError: TableSpec.vocab_size must be >= 1, got 0
    """

    name: str
    """Table name; unique among the tables of a model."""

    vocab_size: int
    """Number of rows (ids ``0 .. vocab_size - 1``), >= 1. Unit: rows."""

    embedding_dim: int
    """Width of one row, >= 1. Unit: float32 values (padded to a multiple of 8 on device)."""

    combiner: str = "sum"
    """How a sample's rows are combined: ``"sum"`` (gain = weight), ``"mean"`` (weight /
    sum of the sample's weights) or ``"sqrtn"`` (weight / sqrt of the sum of squared
    weights). Default ``"sum"``."""

    optimizer: str = "sgd"
    """Optimizer name, one of :data:`OPTIMIZERS`; tables stack only with the same
    optimizer. Default ``"sgd"``."""

    max_ids_per_partition: int | None = None
    """Configured limit on the ids (after per-sample dedup, duplicates across samples
    counted) one source SparseCore sends to one partition of this table, >= 1.
    Unit: ids. Default None: not configured (no check, no dropping)."""

    max_unique_ids_per_partition: int | None = None
    """Configured limit on the distinct ids one source SparseCore sends to one
    partition, >= 1. Unit: ids. Default None: not configured."""

    quantization: QuantizationConfig | None = None
    """Simulated quantization of the table's lookups (TensorFlow's QuantizationConfig,
    :class:`scwork.quant.QuantizationConfig`); tables stack only with the same
    setting. Default None: no quantization."""

    suggested_coo_buffer_size_per_device: int | None = None
    """Static size of this table's CSR buffer on one device, >= 1 (jax-tpu-embedding's
    ``TableSpec.suggested_coo_buffer_size_per_device``). Used only when the table is
    not stacked with others (the library's stacking drops it); rounded up to a
    multiple of ``8 * S`` and split evenly over the device's SparseCores. Ids that do
    not fit are dropped and counted whatever ``allow_id_dropping`` says, as the
    library does. Unit: CSR entries. Default None: sized from
    ``max_ids_per_partition`` (``round_up(max_ids, 8) * S * P``)."""

    def __post_init__(self) -> None:
        _check_name("TableSpec", self.name)
        if self.quantization is not None and not isinstance(self.quantization, QuantizationConfig):
            raise ConfigError(
                f"TableSpec {self.name!r}: quantization must be a scwork.quant.QuantizationConfig or None, "
                f"got {type(self.quantization).__name__}"
            )
        _check_int("TableSpec", "vocab_size", self.vocab_size, minimum=1, maximum=INT32_MAX)
        _check_int("TableSpec", "embedding_dim", self.embedding_dim, minimum=1, maximum=INT32_MAX)
        _check_choice("TableSpec", "combiner", self.combiner, COMBINERS)
        _check_choice("TableSpec", "optimizer", self.optimizer, OPTIMIZERS)
        for limit in ("max_ids_per_partition", "max_unique_ids_per_partition",
                      "suggested_coo_buffer_size_per_device"):
            _check_int("TableSpec", limit, getattr(self, limit), minimum=1, allow_none=True,
                       maximum=INT32_MAX)

    def padded_vocab_size(self, num_partitions: int) -> int:
        """``round_up(vocab_size, 8 * P)`` ([jte] table_stacking.py). Unit: rows."""
        _check_int("padded_vocab_size", "num_partitions", num_partitions, minimum=1)
        return round_up(self.vocab_size, 8 * num_partitions)

    def padded_embedding_dim(self) -> int:
        """``round_up(embedding_dim, 8)``: rows padded to 32-byte lines ([jte] table_stacking.py; [sc-guide] §9)."""
        return round_up(self.embedding_dim, 8)


@dataclass(frozen=True)
class FeatureSpec:
    """One input feature and the table it looks up.

    Several features may look up the same table (feature stacking, [jte] table_stacking.py): each
    feature's samples become their own rows of the stacked input.

    Examples
    --------
    >>> FeatureSpec("query", TableSpec("words", 100, 16)).table.name
    'words'
    >>> FeatureSpec("query", "words")
    Traceback (most recent call last):
    ...
    scwork.errors.ConfigError: FeatureSpec 'query': table must be a TableSpec, got 'words'
    """

    name: str
    """Feature name; the key of this feature in a :class:`~scwork.sharding.FeatureBatch`."""

    table: TableSpec
    """The table this feature looks up."""

    def __post_init__(self) -> None:
        _check_name("FeatureSpec", self.name)
        if not isinstance(self.table, TableSpec):
            raise ConfigError(
                f"FeatureSpec {self.name!r}: table must be a TableSpec, got {self.table!r}"
            )


def _frozen_limits(name: str, value: Any) -> Mapping[str, int] | int | None:
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        _check_int("SparsecoreConfig", name, value, minimum=1, maximum=INT32_MAX)
        return int(value)
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"SparsecoreConfig.{name} must be None, an int (every table) or a dict "
            f"table name -> int, got {value!r}"
        )
    out = {}
    for key, limit in value.items():
        if not isinstance(key, str):
            raise ConfigError(f"SparsecoreConfig.{name}: keys must be table names, got {key!r}")
        _check_int("SparsecoreConfig", f"{name}[{key!r}]", limit, minimum=1, maximum=INT32_MAX)
        out[key] = int(limit)
    return types.MappingProxyType(out)


@dataclass(frozen=True)
class SparsecoreConfig:
    """SparseCore flags and their defaults ([tf-sc-config]).

    The same fields and defaults as ``tf.tpu.experimental.embedding.SparseCoreEmbeddingConfig``.
    Only the first five change what :func:`~scwork.sharding.preprocess` computes;
    the two initialisation flags are carried for completeness (other scwork models
    read them).

    How scwork applies them:

    - ``max_ids_per_chip_per_sample``: as TensorFlow's ``GetMinibatchesInCsrWithPhysicalReplica``
      kernel does (``tensorflow/core/tpu/kernels/sparse_core_preprocess_ops.cc``): the
      CSR buffer one device (TF replica) fills for a stacked table, padding included
      (``sum over its SparseCores of required_buffer_size_per_sc``), must not exceed
      ``max_ids_per_chip_per_sample * samples_per_device``; otherwise
      :class:`~scwork.errors.LimitExceededError` (TensorFlow raises too, dropping or not).
    - ``max_ids_per_table`` / ``max_unique_ids_per_table``: the table-level way to set
      partition limits ([sc-guide] §7: "a way to set the partition-level
      limits"): a table without its own ``max_ids_per_partition`` gets
      ``ceil(max_ids_per_table / P)``.

    Examples
    --------
    >>> cfg = SparsecoreConfig(allow_id_dropping=True, max_ids_per_table=1024)
    >>> cfg.allow_id_dropping, cfg.table_limits("t", num_partitions=16)
    (True, (64, None))
    >>> SparsecoreConfig(max_ids_per_chip_per_sample=0)
    Traceback (most recent call last):
    ...
    scwork.errors.ConfigError: SparsecoreConfig.max_ids_per_chip_per_sample must be >= 1, got 0
    """

    disable_table_stacking: bool = False
    """True: every table is its own stack (no table stacking). Default False
    (stacking on)."""

    max_ids_per_chip_per_sample: int | None = 64
    """Cap on the ids one chip handles per sample, summed over its SparseCores and
    padding included (see above). Unit: ids per sample. Default 64; None disables
    the check."""

    max_ids_per_table: Mapping[str, int] | int | None = None
    """Per logical table, the ids summed over all P partitions (duplicates counted);
    an int applies to every table, a dict maps table name -> limit. Unit: ids.
    Default None."""

    max_unique_ids_per_table: Mapping[str, int] | int | None = None
    """Same for distinct ids; sizes on-device buffers. Unit: ids. Default None."""

    allow_id_dropping: bool = False
    """True: ids beyond a per-partition limit are dropped (prefix cut of [jte] preprocess_sparse_dense_matmul_input) and
    counted; False: :class:`~scwork.errors.LimitExceededError`, nothing dropped.
    Default False."""

    initialize_tables_on_host: bool = True
    """Initialise tables on the host CPU, then copy them to HBM. Default True."""

    enable_fast_table_initialization: bool = False
    """Initialise tables directly on the TPU. Default False."""

    def __post_init__(self) -> None:
        for name in ("disable_table_stacking", "allow_id_dropping", "initialize_tables_on_host",
                     "enable_fast_table_initialization"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigError(f"SparsecoreConfig.{name} must be True or False, got {value!r}")
        _check_int("SparsecoreConfig", "max_ids_per_chip_per_sample",
                   self.max_ids_per_chip_per_sample, minimum=1, allow_none=True, maximum=INT32_MAX)
        for name in ("max_ids_per_table", "max_unique_ids_per_table"):
            object.__setattr__(self, name, _frozen_limits(name, getattr(self, name)))

    def __hash__(self) -> int:  # MappingProxyType is not hashable
        def key(value):
            return tuple(sorted(value.items())) if isinstance(value, Mapping) else value

        return hash((self.disable_table_stacking, self.max_ids_per_chip_per_sample,
                     key(self.max_ids_per_table), key(self.max_unique_ids_per_table),
                     self.allow_id_dropping, self.initialize_tables_on_host,
                     self.enable_fast_table_initialization))

    def table_limits(self, table: str, num_partitions: int) -> tuple[int | None, int | None]:
        """Per-partition limits implied by the table-level limits for ``table``.

        Returns ``(ceil(max_ids_per_table / P), ceil(max_unique_ids_per_table / P))``,
        None where not set.
        """
        out = []
        for value in (self.max_ids_per_table, self.max_unique_ids_per_table):
            if isinstance(value, Mapping):
                value = value.get(table)
            out.append(None if value is None else max(1, math.ceil(value / num_partitions)))
        return out[0], out[1]
