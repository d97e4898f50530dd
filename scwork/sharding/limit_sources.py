"""Limits from any source (tuner, FDO stats, mapping, file), written to a file or applied.

:func:`write_limits` writes them as a scwork limits file, :func:`apply_limits` sets them
on a stacking plan or a scenario, :func:`with_table_limits` writes them into the tables
of feature specs. Each accepts a :class:`~scwork.sharding.Limits`, tuned limits
(:class:`~scwork.sharding.limits.TunedLimits`), :class:`~scwork.sharding.FdoStats`, a
mapping, or the path of a limits file or of a folder of FDO stats files.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scwork._validate import shown
from scwork.errors import ConfigError, InputError
from scwork.sharding.fdo_files import FdoStats, read_fdo_stats
from scwork.sharding.limits_json_csv import Limits, _check_known, _stack_names, read_limits, write_limits_file
from scwork.sharding.specs import FeatureSpec

__all__ = ["apply_limits", "with_table_limits", "write_limits"]


# --------------------------------------------------------------------------------------
# applying limits
# --------------------------------------------------------------------------------------
def _coerce_limits(limits: Any) -> Limits:
    if isinstance(limits, Limits):
        return limits
    if isinstance(limits, FdoStats):
        return limits.to_limits()
    to_limits = getattr(limits, "to_limits", None)
    if callable(to_limits):
        return to_limits()
    if isinstance(limits, (str, os.PathLike)):
        p = Path(limits)
        try:
            is_folder = p.is_dir()
        except OSError as err:      # e.g. a name longer than the file system allows
            raise InputError(f"limits path {shown(str(limits))} cannot be read: {err.strerror}; pass an "
                             f"existing limits file (JSON or CSV) or an FDO stats folder") from None
        return read_fdo_stats(p).to_limits() if is_folder else read_limits(p)
    if isinstance(limits, Mapping):
        return Limits(limits)
    raise ConfigError(f"limits must be a Limits, TunedLimits, FdoStats, a mapping or a path, got "
                      f"{type(limits).__name__}")


def write_limits(limits: Any, path: str | os.PathLike, *, format: str | None = None) -> Path:
    """Write limits to a JSON or CSV limits file (format from the suffix, or ``format``).

    ``limits``: a :class:`Limits`, a :class:`~scwork.sharding.limits.TunedLimits`, or
    anything :class:`Limits` accepts. Returns the path written.

    Examples
    --------
    >>> import json, os, tempfile
    >>> p = write_limits({"t": (16, 8)}, os.path.join(tempfile.mkdtemp(), "l.json"))
    >>> json.load(open(p))["stacks"]
    {'t': {'max_ids_per_partition': 16, 'max_unique_ids_per_partition': 8, 'required_buffer_size': None}}
    """
    return write_limits_file(_coerce_limits(limits), path, format=format)


def apply_limits(target: Any, limits: Any, *, topology: Any = None, stacking: Any = "auto",
                 batch_size: int | None = None, strict: bool = True) -> dict[str, tuple[int, int]]:
    """Validate ``limits`` against a model's stacks and return ``stack_limits`` for ``preprocess``.

    Parameters
    ----------
    target : StackingPlan, MiniBatchPlan, PreprocessResult, or features
        Anything with ``.plan`` / ``.stacks``, or FeatureSpecs (then ``topology``
        is needed, and ``batch_size`` for ``stacking="auto"``).
    limits : Limits, TunedLimits, FdoStats, mapping, or path
        A path to a ``.json`` / ``.csv`` limits file, or a directory of FDO files.
    strict : bool
        True (default): every stack of ``limits`` must exist in the model
        (:class:`~scwork.errors.ConfigError` otherwise). False: unknown stacks are
        ignored. Stacks of the model missing from ``limits`` keep their own limits.

    Returns
    -------
    dict
        ``{stack: (max_ids_per_partition, max_unique_ids_per_partition)}``, a new
        object; nothing is modified.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import FeatureSpec, TableSpec, plan_stacking
    >>> plan = plan_stacking([FeatureSpec("f", TableSpec("t", 100, 8))], scwork.Topology(1, 2), stacking=None)
    >>> apply_limits(plan, {"t": (16, 8)})
    {'t': (16, 8)}
    >>> apply_limits(plan, {"u": (16, 8)})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    scwork.errors.ConfigError: limits names unknown stacks ['u']; the model's stacks are ['t']. Plan the stacks ...
    """
    lim = _coerce_limits(limits)
    if getattr(target, "plan", None) is None and getattr(target, "stacks", None) is None:
        from scwork.sharding.stacking import normalize_features, plan_stacking

        features = normalize_features(target)
        if topology is None:
            raise ConfigError("apply_limits(features, ...) needs topology=... to plan the stacks "
                              "(or pass a StackingPlan)")
        target = plan_stacking(features, topology, stacking, batch_size=batch_size)
    known = _stack_names(target)
    if strict:
        _check_known(lim.keys(), known, "limits")
    return {n: (v.max_ids_per_partition, v.max_unique_ids_per_partition) for n, v in lim.items() if n in known}


def with_table_limits(features: Any, limits: Any) -> tuple[FeatureSpec, ...]:
    """New FeatureSpecs whose tables carry the limits keyed by table name.

    Every key of ``limits`` must be a table of ``features`` (else
    :class:`~scwork.errors.ConfigError`); the inputs are not modified.

    Examples
    --------
    >>> from scwork.sharding import FeatureSpec, TableSpec
    >>> feats = [FeatureSpec("f", TableSpec("t", 100, 8)), FeatureSpec("g", TableSpec("t", 100, 8))]
    >>> new = with_table_limits(feats, {"t": (32, 16)})
    >>> new[1].table.max_ids_per_partition, feats[1].table.max_ids_per_partition
    (32, None)
    """
    from scwork.sharding.stacking import normalize_features

    lim = _coerce_limits(limits)
    features = normalize_features(features)
    tables = {f.table.name for f in features}
    unknown = [n for n in lim if n not in tables]
    if unknown:
        raise ConfigError(f"limits name unknown tables {unknown}; the features' tables are {sorted(tables)}")
    new_tables = {}
    for f in features:
        if f.table.name in lim and f.table.name not in new_tables:
            v = lim[f.table.name]
            new_tables[f.table.name] = dataclasses.replace(
                f.table, max_ids_per_partition=v.max_ids_per_partition,
                max_unique_ids_per_partition=v.max_unique_ids_per_partition)
    return tuple(dataclasses.replace(f, table=new_tables.get(f.table.name, f.table)) for f in features)
