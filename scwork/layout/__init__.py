"""Memory layouts: XLA tiled layouts, Sophgo NPU local memory, SparseCore table padding.

- :func:`parse` / :class:`Shape`: XLA shapes with layouts ([xla-tiled]), e.g.
  ``f32[3,5]{1,0:T(2,2)}``; :mod:`scwork.layout.tiles`: element types, :class:`Tile`,
  :class:`SplitConfig` and the tiling plan underneath; :mod:`scwork.layout.view`:
  zoomable windows of large layouts.
- :mod:`scwork.layout.npu`: Sophgo NPU local-memory strides ([tpu-mlir], local-memory layout).
- :mod:`scwork.layout.embedding`: SparseCore embedding-table padding ([jte] table_stacking.py; [sc-guide] §9).

Examples
--------
>>> import scwork
>>> s = scwork.layout.parse("f32[3,5]{1,0:T(2,2)}")
>>> s.tiled_shape
(2, 3, 2, 2)
>>> s.linear_index((2, 3))
17
"""

from __future__ import annotations

import importlib

from scwork.layout.shape import DTYPES, MAX_MAP_ELEMENTS, Shape, SplitConfig, Tile, parse

__all__ = ["parse", "Shape", "Tile", "SplitConfig", "DTYPES", "MAX_MAP_ELEMENTS", "npu", "embedding", "view"]

_LAZY_SUBMODULES = {"npu", "embedding", "view"}


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        module = importlib.import_module(f"scwork.layout.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'scwork.layout' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_SUBMODULES)
