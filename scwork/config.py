"""Model configuration files: tables, features, topology and knobs in one TOML or JSON file.

The ``scwork`` command (``scwork stats``, ``scwork memory``) and scripts describe a
model once, in a file, and get back a frozen :class:`ModelConfig` holding the
objects every engine takes: :class:`~scwork.sharding.TableSpec`,
:class:`~scwork.sharding.FeatureSpec`, :class:`scwork.Topology`,
:class:`~scwork.sharding.SparsecoreConfig` and the memory knobs of
:func:`scwork.memory.plan`.

>>> import scwork
>>> cfg = scwork.config.load_config("examples/model.toml")       # doctest: +SKIP
>>> report = cfg.plan_memory()                                   # doctest: +SKIP

Format
------
TOML (``.toml``, read with :mod:`tomllib`) or JSON (``.json``); both hold the same
tree. Every key is optional unless marked *required*::

    batch_size = 4096              # global batch: samples per feature per step
    stacking = "auto"              # "auto", "none", or [["t0", "t1"], ["t2"]]
    limits_file = "limits.json"    # per-stack limits (scwork stats --out); relative to this file

    [topology]                     # required
    chip = "v5p"                   # a catalog TPU (scwork hardware): v4, v5e, v5p, v6e, tpu7x
    num_chips = 4                  # or shape = [2, 2] (and wraparound = [true, false])
    # generic system without a catalog chip: num_chips = 8, sparsecores_per_chip = 2
    # (optionally devices_per_chip = 1, shape, wraparound)

    [sparsecore]                   # SparsecoreConfig ([tf-sc-config]), defaults shown
    disable_table_stacking = false
    max_ids_per_chip_per_sample = 64
    max_ids_per_table = 4096       # an int for every table, or { item = 8192 }
    max_unique_ids_per_table = 2048
    allow_id_dropping = false
    initialize_tables_on_host = true
    enable_fast_table_initialization = false

    [memory]                       # knobs of scwork.memory.plan, defaults shown
    dtype = "f32"                  # f32, bf16, f16, s8 (or { item = "bf16" })
    slot_dtype = "f32"             # optimizer slots; default: the table's dtype
    num_serialized_tables = 1      # xla_sc_num_serialized_tables_to_optimize_hbm
    maximum_parallel_iterations = 1
    dense_weights_bytes = "2 GiB"  # sizes: an int (bytes) or text with a unit
    constants_bytes = 0
    tensorcore_activation_bytes = 0
    prefetch_bytes_per_step = "1 MiB"   # default: the CSR input of every stack
    stage_gather_operands_in_hbm = false
    headroom = 0.1                 # share of HBM kept free
    hbm_bytes = "95 GiB"           # override the chip's HBM per chip
    tile_spmem_bytes = "512 KiB"   # override (required on v4, whose catalog has none)
    logical_replica_count = 16     # HBM stack multiplier; default P

    [[tables]]                     # required: one block per table
    name = "item"                  # required, unique
    vocab_size = 1_000_000         # required, rows
    embedding_dim = 64             # required, float32 values
    combiner = "mean"              # sum, mean, sqrtn (default sum)
    optimizer = "adagrad"          # sgd, adagrad, adagrad_momentum, adam, ftrl, laprop (default sgd)
    max_ids_per_partition = 512    # configured limits (default: none)
    max_unique_ids_per_partition = 256

    [features]                     # default: one feature per table, named like it
    item_id = "item"               # feature -> table
    clicked = { table = "item", column = "clicks", ids_per_sample = 20 }

A feature's ``column`` is the column of an ids file it reads (``scwork stats``;
default: the feature's name); ``ids_per_sample`` (mean ids per sample) lets the
memory model estimate limits for stacks that configure none (the closed-form estimate behind xla_sparse_core_estimate_max_ids ([sc-guide] §6)).
Sizes are integers (bytes) or text such as ``"64 MiB"``, ``"1.5GB"``, ``"512KiB"``
(``k``/``M``/``G``/``T``/``P`` are powers of 1000, ``Ki``/``Mi``/... of 1024).

Errors
------
Every problem raises :class:`~scwork.errors.ConfigError` with one line naming the
file, the key path (e.g. ``tables[3].vocab_size``) and how to fix it: unknown keys
(with the closest known key), wrong types, missing required keys, negative or zero
sizes, unknown chips, optimizers, combiners, dtypes and tables, duplicate names, a
batch size that does not split over the SparseCores. The file is checked as a
whole before anything is returned, so nothing half-applies.

Examples
--------
>>> from scwork.config import parse_config
>>> cfg = parse_config({
...     "batch_size": 64,
...     "topology": {"chip": "v5p", "num_chips": 2},
...     "tables": [{"name": "item", "vocab_size": 1000, "embedding_dim": 16}],
...     "features": {"clicked": "item", "viewed": {"table": "item", "ids_per_sample": 4}},
... })
>>> [f.name for f in cfg.features], cfg.topology.num_partitions, dict(cfg.ids_per_sample)
(['clicked', 'viewed'], 8, {'viewed': 4.0})
>>> parse_config({"topology": {"chip": "v5p", "num_chips": 2},
...               "tables": [{"name": "item", "vocab_size": -3, "embedding_dim": 16}]}, source="m.toml")
Traceback (most recent call last):
...
scwork.errors.ConfigError: m.toml: tables[0].vocab_size: must be >= 1, got -3. How to fix: give the number of rows of the table, e.g. vocab_size = 1000000
>>> parse_size("64 MiB"), parse_size("1.5GB"), parse_size(4096)
(67108864, 1500000000, 4096)
"""

from __future__ import annotations

from scwork._rounding import round_up

import dataclasses
import difflib
import fractions
import json
import math
import numbers
import os
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scwork._validate import shown
from scwork.errors import ConfigError, ScworkError

__all__ = [
    "ModelConfig",
    "MemoryOptions",
    "load_config",
    "parse_config",
    "parse_size",
    "TOP_LEVEL_KEYS",
]

#: Keys allowed at the top of a config file.
TOP_LEVEL_KEYS: tuple[str, ...] = ("batch_size", "stacking", "limits_file", "topology", "sparsecore",
                                   "memory", "tables", "features")
_TOPOLOGY_KEYS = ("chip", "num_chips", "shape", "wraparound", "sparsecores_per_chip", "devices_per_chip")
_SPARSECORE_KEYS = ("disable_table_stacking", "max_ids_per_chip_per_sample", "max_ids_per_table",
                    "max_unique_ids_per_table", "allow_id_dropping", "initialize_tables_on_host",
                    "enable_fast_table_initialization")
_TABLE_KEYS = ("name", "vocab_size", "embedding_dim", "combiner", "optimizer", "max_ids_per_partition",
               "max_unique_ids_per_partition", "suggested_coo_buffer_size_per_device")
_FEATURE_KEYS = ("table", "column", "ids_per_sample")
_SIZE_KNOBS = ("dense_weights_bytes", "constants_bytes", "tensorcore_activation_bytes", "prefetch_bytes_per_step",
               "hbm_bytes", "tile_spmem_bytes")
_MEMORY_KEYS = ("dtype", "slot_dtype", "num_serialized_tables", "maximum_parallel_iterations",
                "stage_gather_operands_in_hbm", "headroom", "logical_replica_count") + _SIZE_KNOBS

_INT32_MAX = 2**31 - 1
_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
               "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
_SIZE_RE = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)\s*([kmgtp]i?)?b?\s*$", re.IGNORECASE)


_MAX_SIZE = 2**63 - 1


def parse_size(value: Any, name: str = "size") -> int:
    """Bytes from an int or a text size such as ``"64MiB"``, ``"1.5 GB"``, ``"512 KiB"``.

    ``k, M, G, T, P`` (optionally followed by ``B``) are powers of 1000; ``Ki, Mi,
    Gi, Ti, Pi`` powers of 1024; a bare number is bytes. The result must be a whole
    number of bytes, >= 0.

    Raises
    ------
    ConfigError
        Not a size, negative, or a fraction of a byte.

    Examples
    --------
    >>> parse_size("2 GiB"), parse_size("10kB"), parse_size("1e6"), parse_size("0")
    (2147483648, 10000, 1000000, 0)
    """
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a size in bytes (e.g. 4096 or '64 MiB'), got {shown(value)}")
    if isinstance(value, numbers.Integral):
        if value < 0:
            raise ConfigError(f"{name} must be >= 0 bytes, got {shown(value)}")
        if value > _MAX_SIZE:
            raise ConfigError(f"{name} {shown(value)} is more than the {_MAX_SIZE:,} bytes a 64-bit size holds")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0 or value != int(value):
            raise ConfigError(f"{name} must be a whole number of bytes >= 0, got {shown(value)}")
        if value > _MAX_SIZE:
            raise ConfigError(f"{name} {shown(value)} is more than the {_MAX_SIZE:,} bytes a 64-bit size holds")
        return int(value)
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a size in bytes (e.g. 4096 or '64 MiB'), got {shown(value)}")
    match = _SIZE_RE.match(value)
    if not match:
        if value.strip().startswith("-"):
            raise ConfigError(f"{name} must be >= 0 bytes, got {shown(value)}")
        raise ConfigError(f"{name} must be a size such as 4096, '64 MiB', '1.5GB' or '512KiB', got {shown(value)}")
    # Exact decimal arithmetic: a float would overflow ("1e400") or round
    # ("12345678901234567" bytes); Fraction keeps every digit.
    digits = match.group(1).replace("_", "")
    unit = (match.group(2) or "").lower()
    if len(digits) > 64:
        raise ConfigError(f"{name} {shown(value)} has more digits than any size; use a unit such as 'GiB'")
    try:
        number = fractions.Fraction(digits)
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"{name} must be a size such as 4096, '64 MiB', '1.5GB' or '512KiB', got {shown(value)}") from None
    mantissa_exponent = re.search(r"[eE]([+-]?\d+)$", digits)
    if mantissa_exponent and abs(int(mantissa_exponent.group(1))) > 30:
        raise ConfigError(f"{name} {shown(value)} is out of range: sizes are at most {_MAX_SIZE:,} bytes")
    total = number * _SIZE_UNITS[unit]
    if total.denominator != 1:
        raise ConfigError(f"{name} {shown(value)} is not a whole number of bytes")
    if total > _MAX_SIZE:
        raise ConfigError(f"{name} {shown(value)} is {int(total):,} bytes, more than the {_MAX_SIZE:,} a 64-bit "
                          "size holds")
    return int(total)


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

    def __post_init__(self) -> None:
        # Read-only views: a frozen config must not change through its mappings either.
        object.__setattr__(self, "columns", types.MappingProxyType(dict(self.columns)))
        object.__setattr__(self, "ids_per_sample", types.MappingProxyType(dict(self.ids_per_sample)))

    def __hash__(self) -> int:
        return hash((self.source, self.tables, self.features, self.topology, self.batch_size))

    # -- what the engines take --------------------------------------------------------
    @property
    def stack_limits(self) -> dict[str, tuple[int, int]] | None:
        """``{stack: (max_ids, max_unique_ids)}`` from ``limits_file`` (None without one)."""
        return None if self.limits is None else self.limits.stack_limits()

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

        return plan_stacking(self.features, self.topology, self.stacking, batch_size=self.require_batch_size(
            batch_size), config=self.sparsecore_config, stack_limits=self.stack_limits)

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


# ======================================================================================
# reading
# ======================================================================================
def load_config(path: str | os.PathLike) -> ModelConfig:
    """Read a model config file (``.toml`` or ``.json``) and check all of it.

    Parameters
    ----------
    path : path-like
        The file. A relative ``limits_file`` inside it is taken relative to the
        file's folder.

    Returns
    -------
    ModelConfig

    Raises
    ------
    ConfigError
        Unreadable file, unknown extension, syntax error (with line and column) or
        any invalid entry; the one-line message names the file, the key path and
        how to fix it.
    """
    try:
        where = os.fsdecode(os.fspath(path))
    except TypeError:
        raise ConfigError(f"path must be a file path (str or os.PathLike), got {shown(path)}") from None
    p = Path(where)
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ConfigError(f"{where}: cannot tell the format from the extension {suffix or '(none)'!r}. "
                          "How to fix: name the file .toml or .json")
    try:
        raw = p.read_bytes()
    except ValueError as err:       # a NUL character in the path
        raise ConfigError(f"{where!r}: not a usable path ({err}). How to fix: check the path") from None
    except OSError as err:
        raise ConfigError(f"{where}: cannot read the config file ({err.strerror or err}). "
                          "How to fix: check the path") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text. How to fix: save the file as UTF-8") from None
    if suffix == ".toml":
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{where}: invalid TOML: {err}. How to fix: correct the syntax there") from None
        except ValueError as err:       # an integer of more than 4300 digits
            raise ConfigError(f"{where}: invalid TOML: {err}. How to fix: no value needs that many digits") from None
        except RecursionError:
            raise ConfigError(f"{where}: invalid TOML: arrays or tables nested too deeply. How to fix: a model "
                              "config nests a few levels at most") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{where}: invalid JSON: {err.msg} (at line {err.lineno}, column {err.colno}). "
                              "How to fix: correct the syntax there") from None
        except ValueError as err:       # an integer of more than 4300 digits
            raise ConfigError(f"{where}: invalid JSON: {err}. How to fix: no value needs that many digits") from None
        except RecursionError:
            raise ConfigError(f"{where}: invalid JSON: arrays or objects nested too deeply. How to fix: a model "
                              "config nests a few levels at most") from None
    return parse_config(data, source=where, base_dir=p.parent)


def parse_config(data: Mapping[str, Any], *, source: str = "<dict>",
                 base_dir: str | os.PathLike | None = None) -> ModelConfig:
    """Build a :class:`ModelConfig` from the file's tree (a dict as TOML / JSON give it).

    Parameters
    ----------
    data : mapping
        The parsed file.
    source : str
        Name used in error messages (the file path).
    base_dir : path-like, optional
        Folder a relative ``limits_file`` is resolved against (default: the current one).

    Raises
    ------
    ConfigError
        Any invalid entry (see :func:`load_config`).
    """
    return _Reader(source, Path(base_dir) if base_dir is not None else Path.cwd()).model(data)


def _check_batch(source: str, key: str, value: Any, topology) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{source}: {key}: must be an integer, got {shown(value)} ({_type_name(value)}). "
                          "How to fix: give the global batch as a whole number, e.g. batch_size = 4096")
    if value < 1:
        raise ConfigError(f"{source}: {key}: must be >= 1, got {shown(value)}. How to fix: give the global batch "
                          "(samples per feature per step), e.g. batch_size = 4096")
    parts = topology.num_devices * topology.sparsecores_per_device
    if parts and value % parts:
        lower, upper = value // parts * parts, round_up(value, parts)
        raise ConfigError(
            f"{source}: {key}: {value} does not split evenly over the {parts} SparseCores of the topology "
            f"({topology.num_devices} devices x {topology.sparsecores_per_device}). How to fix: use a multiple "
            f"of {parts}, e.g. {upper}" + (f" or {lower}" if lower else ""))
    return int(value)


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, numbers.Integral):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


class _Reader:
    """Checks one config tree; every ``fail`` names the file and the key path."""

    def __init__(self, source: str, base_dir: Path):
        self.source = source
        self.base_dir = base_dir

    # -- error helpers ----------------------------------------------------------------
    def fail(self, key: str, problem: str, fix: str) -> ConfigError:
        err = ConfigError(f"{self.source}: {key}: {problem}. How to fix: {fix}")
        err.file, err.key = self.source, key  # for callers that want the pieces
        return err

    def mapping(self, value: Any, key: str, example: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be a table of keys, got {shown(value)} ({_type_name(value)})", example)
        return value

    def keys(self, value: Mapping[str, Any], key: str, allowed: tuple[str, ...],
             required: tuple[str, ...] = ()) -> None:
        for name in value:
            if name not in allowed:
                where = f"{key}.{name}" if key else str(name)
                close = difflib.get_close_matches(str(name), allowed, n=1, cutoff=0.6)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise self.fail(where, "unknown key", f"{hint}known keys here: {', '.join(allowed)}")
        for name in required:
            if name not in value:
                where = f"{key}.{name}" if key else name
                raise self.fail(where, "missing (required)", f"add {name} = ... to {key or 'the top of the file'}")

    def integer(self, value: Any, key: str, *, minimum: int, fix: str, maximum: int = _INT32_MAX) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise self.fail(key, f"must be an integer, got {shown(value)} ({_type_name(value)})", fix)
        if value < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {shown(value)}", fix)
        if value > maximum:
            raise self.fail(key, f"must be <= {maximum}, got {shown(value)}", fix)
        return int(value)

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {shown(value)} ({_type_name(value)})",
                            f"write {key.rsplit('.', 1)[-1]} = true or false (no quotes)")
        return value

    def string(self, value: Any, key: str, fix: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty string, got {shown(value)} ({_type_name(value)})", fix)
        return value

    def choice(self, value: Any, key: str, choices: tuple[str, ...], what: str) -> str:
        self.string(value, key, f"use one of {', '.join(choices)}")
        if value not in choices:
            close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
            hint = f"did you mean {shown(close[0])}? " if close else ""
            raise self.fail(key, f"unknown {what} {shown(value)}", f"{hint}use one of {', '.join(choices)}")
        return value

    def size(self, value: Any, key: str, *, minimum: int = 0) -> int:
        try:
            out = parse_size(value, key)
        except ConfigError as err:
            raise self.fail(key, str(err).removeprefix(f"{key} "), "give bytes as an integer or text such as "
                            "'64 MiB' or '2GB'") from None
        if out < minimum:
            raise self.fail(key, f"must be >= {minimum} bytes, got {shown(out)}", "give a positive size")
        return out

    # -- sections ---------------------------------------------------------------------
    def model(self, data: Any) -> ModelConfig:
        data = self.mapping(data, "(top level)", "the file must hold keys such as [topology] and [[tables]]")
        self.keys(data, "", TOP_LEVEL_KEYS, required=("topology", "tables"))
        topology = self.topology(data["topology"])
        batch_size = None
        if "batch_size" in data:
            try:
                batch_size = _check_batch(self.source, "batch_size", data["batch_size"], topology)
            except ConfigError as err:
                err.file, err.key = self.source, "batch_size"
                raise
        tables = self.tables(data["tables"])
        by_name = {t.name: t for t in tables}
        features, columns, ids_per_sample = self.features(data.get("features"), by_name)
        stacking = self.stacking(data.get("stacking", "auto"), by_name)
        config = self.sparsecore(data.get("sparsecore", {}), by_name)
        memory = self.memory(data.get("memory", {}), by_name)
        limits, limits_file = self.limits(data.get("limits_file"))
        return ModelConfig(source=self.source, tables=tables, features=features, topology=topology,
                           sparsecore_config=config, batch_size=batch_size, stacking=stacking, columns=columns,
                           ids_per_sample=ids_per_sample, memory=memory, limits=limits, limits_file=limits_file)

    def topology(self, value: Any):
        from scwork import hardware
        from scwork.hardware.topology import Topology

        example = "e.g. [topology] chip = \"v5p\", num_chips = 4"
        value = self.mapping(value, "topology", example)
        self.keys(value, "topology", _TOPOLOGY_KEYS)
        num_chips = None
        if "num_chips" in value:
            num_chips = self.integer(value["num_chips"], "topology.num_chips", minimum=1,
                                     fix="give the number of chips, e.g. num_chips = 4")
        shape = None
        if "shape" in value:
            raw = value["shape"]
            if not isinstance(raw, list) or not raw:
                raise self.fail("topology.shape", f"must be a non-empty array of integers, got {shown(raw)}",
                                "write shape = [4, 4] (chips per grid dimension)")
            shape = tuple(self.integer(s, f"topology.shape[{i}]", minimum=1,
                                       fix="every grid dimension holds at least one chip")
                          for i, s in enumerate(raw))
            if num_chips is not None and math.prod(shape) != num_chips:
                raise self.fail("topology.shape", f"{list(shape)} holds {math.prod(shape)} chips but "
                                f"num_chips = {num_chips}", "make the product of shape equal num_chips, "
                                "or drop num_chips")
        wrap = None
        if "wraparound" in value:
            raw = value["wraparound"]
            if not isinstance(raw, list):
                raise self.fail("topology.wraparound", f"must be an array of booleans, got {shown(raw)}",
                                "write wraparound = [true, false] (one flag per shape dimension)")
            wrap = tuple(self.boolean(w, f"topology.wraparound[{i}]") for i, w in enumerate(raw))
            if shape is None:
                raise self.fail("topology.wraparound", "needs topology.shape", "add shape = [...] with one "
                                "dimension per wraparound flag")
            if len(wrap) != len(shape):
                raise self.fail("topology.wraparound", f"has {len(wrap)} flags but shape has {len(shape)} "
                                "dimensions", "give one flag per dimension of shape")
        if "chip" in value:
            chip = self.string(value["chip"], "topology.chip", f"use a catalog chip: {', '.join(hardware.names('tpu'))}")
            for generic in ("sparsecores_per_chip", "devices_per_chip"):
                if generic in value:
                    raise self.fail(f"topology.{generic}", "comes from the catalog when chip is given",
                                    f"drop {generic}, or drop chip for a generic system")
            try:
                info = hardware.get(chip)
            except ScworkError:
                close = difflib.get_close_matches(chip.lower(), hardware.names("tpu"), n=1, cutoff=0.5)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise self.fail("topology.chip", f"unknown chip {shown(chip)}",
                                f"{hint}use one of {', '.join(hardware.names('tpu'))}") from None
            if info.kind != "tpu":
                raise self.fail("topology.chip", f"{info.name} is a Sophgo NPU, it has no SparseCores",
                                f"use a TPU: {', '.join(hardware.names('tpu'))}")
            if num_chips is None and shape is None:
                raise self.fail("topology.num_chips", "missing (give num_chips or shape)",
                                "add num_chips = 4 (or shape = [2, 2])")
            try:
                return Topology.for_chip(info.name, num_chips, shape=shape, wraparound=wrap)
            except ScworkError as err:
                where = "topology.num_chips" if "num_chips" in value else "topology.shape"
                raise self.fail(where, str(err).rstrip("."), f"use at most {info.max_slice_chips} chips of "
                                f"{info.name}") from None
        # generic system
        if "sparsecores_per_chip" not in value:
            raise self.fail("topology.chip", "missing: give a catalog chip, or sparsecores_per_chip for a "
                            "generic system", f"add chip = \"v5p\" (known: {', '.join(hardware.names('tpu'))})")
        sc = self.integer(value["sparsecores_per_chip"], "topology.sparsecores_per_chip", minimum=0,
                          fix="give the SparseCores of one chip, e.g. sparsecores_per_chip = 4")
        dev = 1
        if "devices_per_chip" in value:
            dev = self.integer(value["devices_per_chip"], "topology.devices_per_chip", minimum=1,
                               fix="give the JAX devices per chip, e.g. devices_per_chip = 1")
        if num_chips is None:
            if shape is None:
                raise self.fail("topology.num_chips", "missing (give num_chips or shape)", "add num_chips = 8")
            num_chips = math.prod(shape)
        try:
            return Topology(num_chips, sc, shape=shape, wraparound=wrap, devices_per_chip=dev)
        except ScworkError as err:
            raise self.fail("topology", str(err).rstrip("."), "change the topology entries") from None

    def tables(self, value: Any) -> tuple:
        from scwork.sharding.specs import COMBINERS, OPTIMIZERS, TableSpec

        if not isinstance(value, list) or not value:
            raise self.fail("tables", f"must be a non-empty array of tables, got {shown(value)}",
                            "add one [[tables]] block per table with name, vocab_size, embedding_dim")
        out, seen = [], {}
        for i, entry in enumerate(value):
            key = f"tables[{i}]"
            entry = self.mapping(entry, key, "write [[tables]] with name = ..., vocab_size = ..., embedding_dim = ...")
            self.keys(entry, key, _TABLE_KEYS, required=("name", "vocab_size", "embedding_dim"))
            name = self.string(entry["name"], f"{key}.name", "give the table a name, e.g. name = \"item\"")
            if name in seen:
                raise self.fail(f"{key}.name", f"duplicate table name {shown(name)} (also tables[{seen[name]}])",
                                "give every table its own name")
            seen[name] = i
            kwargs: dict[str, Any] = {
                "name": name,
                "vocab_size": self.integer(entry["vocab_size"], f"{key}.vocab_size", minimum=1,
                                           fix="give the number of rows of the table, e.g. vocab_size = 1000000"),
                "embedding_dim": self.integer(entry["embedding_dim"], f"{key}.embedding_dim", minimum=1,
                                              fix="give the width of one row, e.g. embedding_dim = 64"),
            }
            if "combiner" in entry:
                kwargs["combiner"] = self.choice(entry["combiner"], f"{key}.combiner", COMBINERS, "combiner")
            if "optimizer" in entry:
                kwargs["optimizer"] = self.choice(entry["optimizer"], f"{key}.optimizer", OPTIMIZERS, "optimizer")
            for limit in ("max_ids_per_partition", "max_unique_ids_per_partition"):
                if limit in entry:
                    kwargs[limit] = self.integer(entry[limit], f"{key}.{limit}", minimum=1,
                                                 fix=f"give a positive limit in ids, e.g. {limit} = 256, "
                                                     "or leave it out (no configured limit)")
            if "suggested_coo_buffer_size_per_device" in entry:
                kwargs["suggested_coo_buffer_size_per_device"] = self.integer(
                    entry["suggested_coo_buffer_size_per_device"], f"{key}.suggested_coo_buffer_size_per_device",
                    minimum=1, fix="give the static CSR buffer of one device in entries, e.g. "
                                   "suggested_coo_buffer_size_per_device = 4096, or leave it out (sized from the limits)")
            try:
                out.append(TableSpec(**kwargs))
            except ScworkError as err:  # checked above already; kept so nothing escapes unnamed
                raise self.fail(key, str(err), "correct the table entry") from None
        return tuple(out)

    def features(self, value: Any, tables: Mapping[str, Any]):
        from scwork.sharding.specs import FeatureSpec

        if value is None:
            return tuple(FeatureSpec(n, t) for n, t in tables.items()), {n: n for n in tables}, {}
        value = self.mapping(value, "features", "write [features] with lines such as clicked = \"item\"")
        if not value:
            raise self.fail("features", "is empty", "add feature = \"table\" lines, or drop [features] "
                            "(then every table gets one feature of its name)")
        features, columns, ids = [], {}, {}
        names = list(tables)
        for name, entry in value.items():
            key = f"features.{name}"
            if isinstance(entry, str):
                entry = {"table": entry}
            entry = self.mapping(entry, key, f"write {name} = \"<table>\" or {name} = {{ table = \"<table>\" }}")
            self.keys(entry, key, _FEATURE_KEYS, required=("table",))
            table = self.string(entry["table"], f"{key}.table", f"name one of the tables: {', '.join(names)}")
            if table not in tables:
                close = difflib.get_close_matches(table, names, n=1, cutoff=0.5)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise self.fail(f"{key}.table", f"no table named {shown(table)}",
                                f"{hint}tables are: {', '.join(names)}")
            columns[name] = name
            if "column" in entry:
                columns[name] = self.string(entry["column"], f"{key}.column",
                                            "give the column of the ids file this feature reads")
            if "ids_per_sample" in entry:
                v = entry["ids_per_sample"]
                if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
                    raise self.fail(f"{key}.ids_per_sample", f"must be a number > 0, got {shown(v)}",
                                    "give the mean number of ids per sample, e.g. ids_per_sample = 20")
                ids[name] = float(v)
            try:
                features.append(FeatureSpec(name, tables[table]))
            except ScworkError as err:
                raise self.fail(key, str(err), "correct the feature entry") from None
        return tuple(features), columns, ids

    def stacking(self, value: Any, tables: Mapping[str, Any]):
        fix = "use \"auto\", \"none\", or groups of table names such as [[\"t0\", \"t1\"], [\"t2\"]]"
        if isinstance(value, str):
            if value == "auto":
                return "auto"
            if value == "none":
                return None
            raise self.fail("stacking", f"unknown value {shown(value)}", fix)
        if not isinstance(value, list) or not value:
            raise self.fail("stacking", f"must be \"auto\", \"none\" or an array of groups, got {shown(value)}", fix)
        groups, placed = [], {}
        for i, group in enumerate(value):
            if not isinstance(group, list) or not group:
                raise self.fail(f"stacking[{i}]", f"must be a non-empty array of table names, got {shown(group)}", fix)
            names = []
            for j, name in enumerate(group):
                key = f"stacking[{i}][{j}]"
                if not isinstance(name, str):
                    raise self.fail(key, f"must be a table name, got {shown(name)}", fix)
                if name not in tables:
                    close = difflib.get_close_matches(name, list(tables), n=1, cutoff=0.5)
                    hint = f"did you mean {shown(close[0])}? " if close else ""
                    raise self.fail(key, f"no table named {shown(name)}", f"{hint}tables are: {', '.join(tables)}")
                if name in placed:
                    raise self.fail(key, f"table {shown(name)} is already in stacking[{placed[name]}]",
                                    "put every table in one group only")
                placed[name] = i
                names.append(name)
            groups.append(tuple(names))
        return tuple(groups)

    def _per_table_ints(self, value: Any, key: str, tables: Mapping[str, Any]):
        fix = f"give an integer for every table ({key} = 4096) or one per table ({key} = {{ name = 4096 }})"
        if value is None or (isinstance(value, numbers.Integral) and not isinstance(value, bool)):
            if value is not None:
                self.integer(value, key, minimum=1, fix=fix)
            return value
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be an integer or a table of integers, got {shown(value)} "
                            f"({_type_name(value)})", fix)
        for name, v in value.items():
            if name not in tables:
                close = difflib.get_close_matches(name, list(tables), n=1, cutoff=0.5)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise self.fail(f"{key}.{name}", f"no table named {shown(name)}", f"{hint}tables are: {', '.join(tables)}")
            self.integer(v, f"{key}.{name}", minimum=1, fix=fix)
        return dict(value)

    def sparsecore(self, value: Any, tables: Mapping[str, Any]):
        from scwork.sharding.specs import SparsecoreConfig

        value = self.mapping(value, "sparsecore", "write [sparsecore] with flags such as allow_id_dropping = false")
        self.keys(value, "sparsecore", _SPARSECORE_KEYS)
        kwargs: dict[str, Any] = {}
        for name in ("disable_table_stacking", "allow_id_dropping", "initialize_tables_on_host",
                     "enable_fast_table_initialization"):
            if name in value:
                kwargs[name] = self.boolean(value[name], f"sparsecore.{name}")
        if "max_ids_per_chip_per_sample" in value:
            kwargs["max_ids_per_chip_per_sample"] = self.integer(
                value["max_ids_per_chip_per_sample"], "sparsecore.max_ids_per_chip_per_sample", minimum=1,
                fix="give a positive cap, e.g. max_ids_per_chip_per_sample = 64")
        for name in ("max_ids_per_table", "max_unique_ids_per_table"):
            if name in value:
                kwargs[name] = self._per_table_ints(value[name], f"sparsecore.{name}", tables)
        try:
            return SparsecoreConfig(**kwargs)
        except ScworkError as err:
            raise self.fail("sparsecore", str(err), "correct the [sparsecore] entries") from None

    def _dtype(self, value: Any, key: str, tables: Mapping[str, Any]):
        from scwork.memory._model import DTYPE_SIZES, parse_dtype

        fix = f"use one of {', '.join(DTYPE_SIZES)} (or {{ table = \"bf16\" }} per table)"

        def one(v, where):
            if not isinstance(v, str):
                raise self.fail(where, f"must be a dtype name, got {shown(v)} ({_type_name(v)})", fix)
            try:
                return parse_dtype(v, where)[0]
            except ConfigError:
                close = difflib.get_close_matches(v.lower(), list(DTYPE_SIZES), n=1, cutoff=0.5)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise self.fail(where, f"unknown dtype {shown(v)}", hint + fix) from None

        if isinstance(value, Mapping):
            out = {}
            for name, v in value.items():
                if name not in tables:
                    close = difflib.get_close_matches(name, list(tables), n=1, cutoff=0.5)
                    hint = f"did you mean {shown(close[0])}? " if close else ""
                    raise self.fail(f"{key}.{name}", f"no table named {shown(name)}",
                                    f"{hint}tables are: {', '.join(tables)}")
                out[name] = one(v, f"{key}.{name}")
            return types.MappingProxyType(out)
        return one(value, key)

    def memory(self, value: Any, tables: Mapping[str, Any]) -> MemoryOptions:
        value = self.mapping(value, "memory", "write [memory] with knobs such as num_serialized_tables = 1")
        self.keys(value, "memory", _MEMORY_KEYS)
        kwargs: dict[str, Any] = {}
        for name in ("dtype", "slot_dtype"):
            if name in value:
                kwargs[name] = self._dtype(value[name], f"memory.{name}", tables)
        for name in ("num_serialized_tables", "maximum_parallel_iterations"):
            if name in value:
                kwargs[name] = self.integer(value[name], f"memory.{name}",
                                            minimum=0 if name == "num_serialized_tables" else 1,
                                            fix=f"give a whole number, e.g. {name} = 2")
        if "logical_replica_count" in value:
            kwargs["logical_replica_count"] = self.integer(
                value["logical_replica_count"], "memory.logical_replica_count", minimum=1,
                fix="give a positive count, or leave it out (default: the number of partitions)")
        if "stage_gather_operands_in_hbm" in value:
            kwargs["stage_gather_operands_in_hbm"] = self.boolean(value["stage_gather_operands_in_hbm"],
                                                                  "memory.stage_gather_operands_in_hbm")
        if "headroom" in value:
            h = value["headroom"]
            if isinstance(h, bool) or not isinstance(h, numbers.Real) or not 0 <= h < 1:
                raise self.fail("memory.headroom", f"must be a number in [0, 1), got {shown(h)}",
                                "give the share of HBM kept free, e.g. headroom = 0.1")
            kwargs["headroom"] = float(h)
        for name in _SIZE_KNOBS:
            if name in value:
                kwargs[name] = self.size(value[name], f"memory.{name}",
                                         minimum=1 if name in ("hbm_bytes", "tile_spmem_bytes") else 0)
        return MemoryOptions(**kwargs)

    def limits(self, value: Any):
        if value is None:
            return None, None
        name = self.string(value, "limits_file", "give the path of a limits file (.json or .csv)")
        path = Path(name)
        if not path.is_absolute():
            path = self.base_dir / path
        from scwork.sharding.limits_files import read_limits

        try:
            return read_limits(path), str(path)
        except ScworkError as err:
            raise self.fail("limits_file", str(err).splitlines()[0].rstrip("."),
                            "point limits_file at a limits file written by scwork stats --out") from None
