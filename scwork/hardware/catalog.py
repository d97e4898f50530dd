"""The chip catalog: look-up by name or alias, per-field sources, validated overrides.

Kept apart from :mod:`scwork.hardware.topology` so that a topology can look its chip up
without importing the package that re-exports it.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from scwork._validate import shown
from scwork.errors import HardwareError
from scwork.hardware._sophgo_catalog import NPU_CHIPS
from scwork.hardware._tpu_catalog import TPU_CHIPS
from scwork.hardware.chips import NpuChip, TpuChip

__all__ = ["get", "chips", "names", "describe", "source", "override", "field_records"]

_CATALOG: dict[str, TpuChip | NpuChip] = {c.name: c for c in (*TPU_CHIPS, *NPU_CHIPS)}
_ALIASES = {
    "tpuv4": "v4", "tpu-v4": "v4", "tpuv5e": "v5e", "tpu-v5e": "v5e", "v5litepod": "v5e",
    "tpuv5p": "v5p", "tpu-v5p": "v5p", "trillium": "v6e", "v6": "v6e", "tpuv6e": "v6e",
    "ironwood": "tpu7x", "v7": "tpu7x", "v7x": "tpu7x", "tpu7": "tpu7x",
}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "").replace(" ", "")


def names(kind: str | None = None) -> list[str]:
    """Catalog keys, TPUs first; ``kind`` is ``"tpu"``, ``"npu"`` or None for all."""
    return [c.name for c in chips(kind)]


def chips(kind: str | None = None) -> list[TpuChip | NpuChip]:
    """Catalog entries, optionally only ``kind="tpu"`` or ``kind="npu"``."""
    if kind is not None and (not isinstance(kind, str) or kind not in ("tpu", "npu")):
        raise HardwareError(f"kind must be 'tpu', 'npu' or None, got {shown(kind)}")
    return [c for c in _CATALOG.values() if kind is None or c.kind == kind]


def get(chip: str | TpuChip | NpuChip) -> TpuChip | NpuChip:
    """Look a chip up by name (case-insensitive; aliases such as 'trillium').

    Passing a chip object returns it unchanged, so APIs can take either.

    Raises
    ------
    HardwareError
        Unknown name; the message lists the closest names.
    """
    if isinstance(chip, (TpuChip, NpuChip)):
        return chip
    if not isinstance(chip, str):
        raise HardwareError(f"chip must be a name or a chip object, got {type(chip).__name__}")
    key = _key(chip)
    key = _ALIASES.get(key, key)
    if key in _CATALOG:
        return _CATALOG[key]
    close = difflib.get_close_matches(key, list(_CATALOG) + list(_ALIASES), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise HardwareError(
        f"Unknown chip {chip!r}.{hint} Known chips: {', '.join(_CATALOG)}. "
        "For a chip that is not in the catalog, build a TpuChip/NpuChip or "
        "override() the closest one."
    )


def source(chip: str | TpuChip | NpuChip, field_name: str) -> str:
    """Where the value of ``field_name`` on ``chip`` comes from."""
    chip = get(chip)
    valid = {f.name for f in dataclasses.fields(chip)} - {"sources"}
    if not isinstance(field_name, str) or field_name not in valid:
        raise HardwareError(f"{type(chip).__name__} has no field {shown(field_name)}; fields: {sorted(valid)}")
    return chip.sources.get(field_name, "not recorded")


def override(chip: str | TpuChip | NpuChip, **changes: Any) -> TpuChip | NpuChip:
    """``dataclasses.replace`` that validates names and records ``"user override"``.

    Raises
    ------
    HardwareError
        Unknown field, or a negative number where a size or count is expected.
    """
    chip = get(chip)
    fields = {f.name: f for f in dataclasses.fields(chip)}
    for name, value in changes.items():
        if name not in fields or name == "sources":
            raise HardwareError(
                f"{type(chip).__name__} has no field {name!r}; fields: {sorted(set(fields) - {'sources'})}"
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise HardwareError(f"{name} must be >= 0, got {value} (unit: {fields[name].metadata['unit']})")
    sources = dict(chip.sources)
    sources.update({name: "user override" for name in changes})
    return dataclasses.replace(chip, sources=sources, **changes)


def describe(chip: str | TpuChip | NpuChip):
    """Every field of ``chip`` with value, unit, meaning and source, as an xarray Dataset.

    The dataset has one dimension ``field``; variables ``value`` (as text, since
    fields mix numbers and names), ``unit``, ``doc`` and ``source``.
    """
    import xarray as xr

    chip = get(chip)
    rows = [f for f in dataclasses.fields(chip) if f.name != "sources"]
    return xr.Dataset(
        {
            # Text variables: "units" is empty (each field's own unit is in ``unit``).
            "value": ("field", [str(getattr(chip, f.name)) for f in rows],
                      {"units": "", "long_name": "value of the field, as text (its unit: see unit)"}),
            "unit": ("field", [f.metadata.get("unit", "") for f in rows],
                     {"units": "", "long_name": "unit of the field's value"}),
            "doc": ("field", [f.metadata.get("doc", "") for f in rows],
                    {"units": "", "long_name": "what the field means"}),
            "source": ("field", [chip.sources.get(f.name, "") for f in rows],
                       {"units": "", "long_name": "where the value comes from"}),
        },
        coords={"field": [f.name for f in rows]},
        attrs={"chip": chip.name, "long_name": f"{chip.marketing_name} catalog entry"},
    )


def field_records(chip: str | TpuChip | NpuChip) -> dict[str, dict[str, Any]]:
    """Every field of ``chip`` as ``{field: {"value", "unit", "doc", "source"}}``, values in their own types.

    The typed counterpart of :func:`describe` (whose values are text): an ``int``
    stays an ``int``, ``None`` (not published) stays ``None``, so the result can go
    to JSON as it is. ``unit`` and ``source`` are None when the field has none
    (e.g. ``name``).

    Examples
    --------
    >>> records = field_records("v5p")
    >>> records["sparsecores_per_chip"]["value"], records["hbm_bytes"]["unit"]
    (4, 'bytes')
    >>> records["shared_spmem_bytes"]["value"] is None
    True
    """
    chip = get(chip)
    records = {}
    for f in dataclasses.fields(chip):
        if f.name == "sources":
            continue
        value = getattr(chip, f.name)
        if value is not None and not isinstance(value, (bool, int, float, str)):
            value = str(value)  # no such field today; keeps the result JSON-ready if one comes
        records[f.name] = {"value": value, "unit": f.metadata.get("unit") or None,
                           "doc": f.metadata.get("doc", ""), "source": chip.sources.get(f.name) or None}
    return records
