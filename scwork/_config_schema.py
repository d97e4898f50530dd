"""The schema of a config file: its keys, sizes written with units, and shared value checks."""

from __future__ import annotations

import fractions
import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

from scwork._rounding import round_up
from scwork._validate import shown
from scwork.errors import ConfigError

__all__ = ["TOP_LEVEL_KEYS", "parse_size"]


#: Keys allowed at the top of a config file.
TOP_LEVEL_KEYS: tuple[str, ...] = ("batch_size", "stacking", "limits_file", "topology", "sparsecore",
                                   "memory", "tables", "features", "stacks")
_STACK_KEYS = ("max_ids_per_partition", "max_unique_ids_per_partition", "suggested_coo_buffer_size_per_device")
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
        raise ConfigError(f"{name} must be a size such as 4096, '64 MiB', '1.5GB' or '512KiB', "
                          f"got {shown(value)}") from None
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
