"""Every limits file in one import: scwork's JSON / CSV limits and jax-tpu-embedding's FDO stats.

Per stacked table, a *limits* entry holds ``max_ids_per_partition``,
``max_unique_ids_per_partition`` (ids per (source SparseCore, partition)) and the
optional ``required_buffer_size`` (CSR entries one SparseCore fills, padding
included). They come from a tuner (:func:`~scwork.sharding.limits.tune_limits`),
an estimate, observed statistics or a file, and go to
:func:`~scwork.sharding.preprocess` through :func:`apply_limits`.

scwork's own files are read and written by :mod:`~scwork.sharding.limits_json_csv`,
jax-tpu-embedding's FDO stats files by :mod:`~scwork.sharding.fdo_files` ([jte]
``NPZFileFDOClient`` and ``CSVFileFDOClient``), and :mod:`~scwork.sharding.limit_sources`
writes and applies limits from any source; this module re-exports all three.

Examples
--------
>>> import tempfile, os
>>> from scwork.sharding.limits_files import Limits, read_limits, write_limits
>>> lim = Limits({"t": (512, 256, 8192)})
>>> d = tempfile.mkdtemp()
>>> _ = write_limits(lim, os.path.join(d, "limits.csv"))
>>> print(open(os.path.join(d, "limits.csv")).read().strip())
# scwork-limits version 1
stack,max_ids_per_partition,max_unique_ids_per_partition,required_buffer_size
t,512,256,8192
>>> read_limits(os.path.join(d, "limits.csv")).stack_limits()
{'t': (512, 256)}
"""

from __future__ import annotations

from scwork.sharding.fdo_files import (
    FDO_FORMATS,
    FDO_SUFFIXES,
    FdoStats,
    read_fdo_stats,
    read_fdo_stats_csv,
    write_fdo_stats,
)
from scwork.sharding.limit_sources import apply_limits, with_table_limits, write_limits
from scwork.sharding.limits_json_csv import (
    CSV_COLUMNS,
    Limits,
    LIMITS_FORMAT,
    LIMITS_FORMAT_VERSION,
    read_limits,
    StackLimits,
)

__all__ = [
    "StackLimits",
    "Limits",
    "LIMITS_FORMAT",
    "LIMITS_FORMAT_VERSION",
    "CSV_COLUMNS",
    "write_limits",
    "read_limits",
    "FdoStats",
    "FDO_SUFFIXES",
    "write_fdo_stats",
    "read_fdo_stats",
    "apply_limits",
    "with_table_limits",
    "FDO_FORMATS",
    "read_fdo_stats_csv",
]

