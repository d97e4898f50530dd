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

    [stacks.item]                  # per-stack limits and static CSR buffer (scwork plan writes these)
    max_ids_per_partition = 512    # beat the tables' limits and limits_file
    max_unique_ids_per_partition = 256
    suggested_coo_buffer_size_per_device = 8192

A feature's ``column`` is the column of an ids file it reads (``scwork stats``;
default: the feature's name); ``ids_per_sample`` (mean ids per sample) lets the
memory model estimate limits for stacks that configure none (the closed-form estimate
behind ``xla_sparse_core_estimate_max_ids``, [sc-guide] §6).
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
...               "tables": [{"name": "item", "vocab_size": -3, "embedding_dim": 16}]},
...              source="m.toml")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
scwork.errors.ConfigError: m.toml: tables[0].vocab_size: must be >= 1, got -3. How to fix: ... vocab_size = 1000000
>>> parse_size("64 MiB"), parse_size("1.5GB"), parse_size(4096)
(67108864, 1500000000, 4096)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scwork._config_reader import _Reader
from scwork._config_schema import parse_size, TOP_LEVEL_KEYS
from scwork._config_types import MemoryOptions, ModelConfig
from scwork._validate import shown
from scwork.errors import ConfigError

__all__ = [
    "ModelConfig",
    "MemoryOptions",
    "load_config",
    "parse_config",
    "parse_size",
    "TOP_LEVEL_KEYS",
]

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


