"""The model a config file describes, as the engines take it: ModelConfig and MemoryOptions."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scwork._config_schema import _STACK_KEYS, _TABLE_KEYS, _check_batch
from scwork._validate import shown
from scwork.errors import ConfigError

__all__ = ["MemoryOptions", "ModelConfig"]


@dataclass(frozen=True)
class MemoryOptions:
    """The memory knobs of a config file (``[memory]``), as :func:`scwork.memory.plan` takes them.

    Every field has :func:`~scwork.memory.plan`'s default and meaning; sizes are bytes.
    """

    dtype: str | Mapping[str, str] = "f32"
    """Table dtype (``f32``, ``bf16``, ``f16``, ``s8``), or table name -> dtype."""
    slot_dtype: str | Mapping[str, str] | None = None
    """Optimizer-slot dtype; None: the table's dtype."""
    num_serialized_tables: int = 1
    """``xla_sc_num_serialized_tables_to_optimize_hbm``: stacks run one at a time (0, 1: none)."""
    maximum_parallel_iterations: int = 1
    """Steps of input prefetched into the HBM heap."""
    dense_weights_bytes: int = 0
    """Dense-layer weights per chip (HBM heap). Unit: bytes."""
    constants_bytes: int = 0
    """Constants per chip (HBM heap). Unit: bytes."""
    tensorcore_activation_bytes: int = 0
    """Dense activations kept from the TensorCore forward to its backward pass. Unit: bytes."""
    prefetch_bytes_per_step: int | None = None
    """Input bytes of one step per chip; None: the CSR input of every stack. Unit: bytes."""
    stage_gather_operands_in_hbm: bool = False
    """Gather operands in HBM instead of SPMEM."""
    headroom: float = 0.1
    """Share of HBM kept free, in [0, 1)."""
    hbm_bytes: int | None = None
    """HBM per chip; None: the chip's. Unit: bytes."""
    tile_spmem_bytes: int | None = None
    """TileSpmem per tile; None: the chip's (required on v4). Unit: bytes."""
    logical_replica_count: int | None = None
    """HBM stack multiplier; None: the number of partitions P."""

    def __hash__(self) -> int:  # mappings are not hashable
        return hash(tuple(tuple(sorted(v.items())) if isinstance(v, Mapping) else v
                          for v in dataclasses.astuple(self)))

    def plan_kwargs(self) -> dict[str, Any]:
        """The knobs as keywords of :func:`scwork.memory.plan`."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = dict(value) if isinstance(value, Mapping) else value
        return out


@dataclass(frozen=True)
class ModelConfig:
    """A model described by a config file; build it with :func:`load_config` or :func:`parse_config`.

    Attributes
    ----------
    source : str
        The file it was read from (or ``"<dict>"``).
    tables : tuple of TableSpec
        In file order.
    features : tuple of FeatureSpec
        In file order (one per table, named like it, when the file has no ``[features]``).
    topology : scwork.Topology
    sparsecore_config : SparsecoreConfig
    batch_size : int or None
        Global batch (samples per feature per step); None if the file has none.
    stacking : "auto", None or tuple of tuple of str
        As :func:`scwork.sharding.plan_stacking` takes it (``"none"`` in the file is None).
    columns : mapping of str to str
        Feature -> column of an ids file.
    ids_per_sample : mapping of str to float
        Feature -> mean ids per sample, for the features that give one.
    memory : MemoryOptions
    limits : Limits or None
        Per-stack limits read from ``limits_file``.
    limits_file : str or None
        That file, resolved against the config file's folder.
    stacks : mapping of str to mapping
        ``[stacks.NAME]``: per stack ``max_ids_per_partition``,
        ``max_unique_ids_per_partition``, ``suggested_coo_buffer_size_per_device``
        (those given); they beat ``limits_file`` and the tables' limits.
    """

    source: str
    tables: tuple
    features: tuple
    topology: Any
    sparsecore_config: Any
    batch_size: int | None = None
    stacking: Any = "auto"
    columns: Mapping[str, str] = field(default_factory=dict)
    ids_per_sample: Mapping[str, float] = field(default_factory=dict)
    memory: MemoryOptions = field(default_factory=MemoryOptions)
    limits: Any = None
    limits_file: str | None = None
    stacks: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Read-only views: a frozen config must not change through its mappings either.
        object.__setattr__(self, "stacks", types.MappingProxyType(
            {k: types.MappingProxyType(dict(v)) for k, v in dict(self.stacks).items()}))
        object.__setattr__(self, "columns", types.MappingProxyType(dict(self.columns)))
        object.__setattr__(self, "ids_per_sample", types.MappingProxyType(dict(self.ids_per_sample)))

    def __hash__(self) -> int:
        return hash((self.source, self.tables, self.features, self.topology, self.batch_size))

    # -- what the engines take --------------------------------------------------------
    @property
    def stack_limits(self) -> dict[str, tuple[int, int]] | None:
        """``{stack: (max_ids, max_unique_ids)}`` from ``limits_file`` and ``[stacks]`` (None without either)."""
        if self.limits is None and not self.stacks:
            return None
        out = {} if self.limits is None else dict(self.limits.stack_limits())
        for name, entry in self.stacks.items():
            old = out.get(name, (None, None))
            out[name] = (entry.get("max_ids_per_partition", old[0]), entry.get("max_unique_ids_per_partition", old[1]))
        return out

    def require_batch_size(self, batch_size: int | None = None) -> int:
        """``batch_size`` if given, else the file's; ConfigError when neither exists."""
        if batch_size is not None:
            return _check_batch(self.source, "batch_size", batch_size, self.topology)
        if self.batch_size is None:
            raise ConfigError(f"{self.source}: batch_size: missing. How to fix: add batch_size = <global batch> "
                              "at the top of the file (or pass --batch-size)")
        return self.batch_size

    def stacking_plan(self, batch_size: int | None = None):
        """:func:`scwork.sharding.plan_stacking` of the features with the file's stacking, config and limits."""
        from scwork.sharding import plan_stacking

        limits = self.stack_limits
        if limits is not None:
            # plan_stacking also takes each stack's static CSR buffer from [stacks].
            limits = {name: dict(zip(_STACK_KEYS[:2], pair), **{
                k: v for k, v in self.stacks.get(name, {}).items() if k == _STACK_KEYS[2]})
                for name, pair in limits.items()}
        return plan_stacking(self.features, self.topology, self.stacking, batch_size=self.require_batch_size(
            batch_size), config=self.sparsecore_config, stack_limits=limits)

    def memory_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Keywords of :func:`scwork.memory.plan` for this model, ``overrides`` applied last."""
        kwargs = {
            "batch_size": self.batch_size,
            "stacking": self.stacking if not isinstance(self.stacking, tuple) else [list(g) for g in self.stacking],
            "config": self.sparsecore_config,
            "stack_limits": self.stack_limits,
            "ids_per_sample": dict(self.ids_per_sample) or None,
            **self.memory.plan_kwargs(),
        }
        kwargs.update(overrides)
        kwargs["batch_size"] = self.require_batch_size(kwargs["batch_size"])
        return kwargs

    def plan_memory(self, **overrides: Any):
        """:func:`scwork.memory.plan` of this model (a :class:`~scwork.memory.MemoryReport`)."""
        from scwork import memory

        return memory.plan(list(self.features), self.topology, **self.memory_kwargs(**overrides))

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some attributes changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The config as a plain dict in the file format (``parse_config(cfg.to_dict())`` rebuilds it).

        Examples
        --------
        >>> from scwork.config import parse_config
        >>> cfg = parse_config({"topology": {"num_chips": 2, "sparsecores_per_chip": 2},
        ...                     "tables": [{"name": "t", "vocab_size": 10, "embedding_dim": 8}]})
        >>> parse_config(cfg.to_dict()) == cfg.replace(source="<dict>")
        True
        """
        topo = self.topology
        topology: dict[str, Any] = {"num_chips": topo.num_chips, "shape": list(topo.shape),
                                    "wraparound": list(topo.wraparound)}
        if topo.chip is not None:
            topology["chip"] = topo.chip
        else:
            topology.update(sparsecores_per_chip=topo.sparsecores_per_chip, devices_per_chip=topo.devices_per_chip)
        sc = {}
        for f in dataclasses.fields(self.sparsecore_config):
            value = getattr(self.sparsecore_config, f.name)
            sc[f.name] = dict(value) if isinstance(value, Mapping) else value
        tables = []
        for t in self.tables:
            row = {k: getattr(t, k) for k in _TABLE_KEYS}
            tables.append({k: v for k, v in row.items() if v is not None})
        features = {}
        for f in self.features:
            entry: dict[str, Any] = {"table": f.table.name, "column": self.columns.get(f.name, f.name)}
            if f.name in self.ids_per_sample:
                entry["ids_per_sample"] = self.ids_per_sample[f.name]
            features[f.name] = entry
        out: dict[str, Any] = {
            "stacking": "none" if self.stacking is None else (
                self.stacking if isinstance(self.stacking, str) else [list(g) for g in self.stacking]),
            "topology": topology,
            "sparsecore": {k: v for k, v in sc.items() if v is not None},
            "memory": {k: v for k, v in self.memory.plan_kwargs().items() if v is not None},
            "tables": tables,
            "features": features,
        }
        if self.batch_size is not None:
            out["batch_size"] = self.batch_size
        if self.limits_file is not None:
            out["limits_file"] = self.limits_file
        if self.stacks:
            out["stacks"] = {name: dict(entry) for name, entry in self.stacks.items()}
        return out

    def __repr__(self) -> str:
        return (f"ModelConfig({shown(self.source)}: {len(self.tables)} tables, {len(self.features)} features, "
                f"batch_size={self.batch_size}, topology={self.topology})")

    def _repr_html_(self) -> str:
        from scwork._html import html_table

        rows = [(t.name, t.vocab_size, t.embedding_dim, t.combiner, t.optimizer,
                 "" if t.max_ids_per_partition is None else t.max_ids_per_partition,
                 "" if t.max_unique_ids_per_partition is None else t.max_unique_ids_per_partition,
                 ", ".join(f.name for f in self.features if f.table.name == t.name))
                for t in self.tables]
        return html_table(rows, header=("table", "vocab_size", "embedding_dim", "combiner", "optimizer",
                                        "max_ids_per_partition", "max_unique_ids_per_partition", "features"),
                          caption=f"ModelConfig {self.source}: batch_size {self.batch_size}, {self.topology}")
