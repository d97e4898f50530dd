"""Slice shapes a TPU generation can actually be given (chips in a grid).

A suggestion such as "use 6 chips" is no help when no such slice exists. The
shapes here follow the Cloud TPU documentation of each generation:

- v5e and v6e (2-D torus): the documented 2-D slice shapes 1x1, 2x2, 2x4, 4x4,
  4x8, 8x8, 8x16, 16x16 (Cloud TPU "TPU v5e" and "TPU v6e" pages, supported
  configurations).
- v4, v5p and TPU7x (3-D): the single-host and small shapes 2x2x1, 2x2x2, 2x2x4,
  2x4x4, then every ``AxBxC`` with ``A <= B <= C`` all multiples of 4 (whole 4x4x4
  cubes), up to the largest single-slice job: v4 16x16x16 (4,096 chips; Cloud TPU
  "TPU types and topologies": dimensions "all <= 4 or all multiples of 4"), v5p
  16x16x24 (6,144 chips, "the maximum v5p shape"), TPU7x 9,216 chips with
  dimensions up to 24 (TPU7x page: 9,216-chip pods, shapes like v5p's).

Where Google's pages list only "the most common" shapes, scwork accepts every
shape of the documented rule; a slice outside these needs a what-if override
(``Topology(num_chips=...)`` accepts any count).

Examples
--------
>>> from scwork.hardware.slices import slice_shapes, smallest_slice
>>> slice_shapes("v6e")[:4]
((1, 1), (2, 2), (2, 4), (4, 4))
>>> smallest_slice("v5p", 6)
(2, 2, 2)
>>> smallest_slice("v5p", 65)
(4, 4, 8)
>>> smallest_slice("v6e", 300) is None
True
"""

from __future__ import annotations

import functools
import math

from scwork.errors import TopologyError

__all__ = ["slice_shapes", "slice_chip_counts", "smallest_slice", "is_slice_shape", "format_shape",
           "SLICE_SOURCES"]

_SHAPES_2D = ((1, 1), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16))
_SMALL_3D = ((2, 2, 1), (2, 2, 2), (2, 2, 4), (2, 4, 4))

# chip -> (largest chip count of one slice, largest dimension) for the 3-D rule.
_CUBE_RULE = {"v4": (4096, 16), "v5p": (6144, 24), "tpu7x": (9216, 24)}

#: Where each generation's slice shapes come from.
SLICE_SOURCES = {
    "v4": "Cloud TPU 'TPU types and topologies': AxBxC, all <= 4 or all multiples of 4; up to 16x16x16",
    "v5e": "Cloud TPU 'TPU v5e': supported 2-D slice shapes 1x1 ... 16x16",
    "v5p": "Cloud TPU 'TPU v5p': 2x2x1, 2x2x2, 2x4x4, then whole 4x4x4 cubes; maximum 16x16x24",
    "v6e": "Cloud TPU 'TPU v6e': supported 2-D slice shapes 1x1 ... 16x16",
    "tpu7x": "Cloud TPU 'TPU7x (Ironwood)': 9,216-chip pods, shapes like v5p (whole 4x4x4 cubes)",
}


def _chip_name(chip) -> str:
    from scwork.hardware import get

    return get(chip).name


@functools.lru_cache(maxsize=None)
def _shapes_of(name: str) -> tuple[tuple[int, ...], ...]:
    if name in ("v5e", "v6e"):
        return _SHAPES_2D
    if name not in _CUBE_RULE:
        raise TopologyError(
            f"{name} has no documented slice shapes in scwork's catalog; build the topology "
            "with Topology(num_chips=...) for a what-if")
    max_chips, max_dim = _CUBE_RULE[name]
    cubes = [(a, b, c)
             for a in range(4, max_dim + 1, 4)
             for b in range(a, max_dim + 1, 4)
             for c in range(b, max_dim + 1, 4)
             if a * b * c <= max_chips]
    shapes = set(_SMALL_3D) | set(cubes)
    return tuple(sorted(shapes, key=lambda s: (math.prod(s), s)))


def slice_shapes(chip) -> tuple[tuple[int, ...], ...]:
    """Every documented slice shape of ``chip``, by chip count then shape.

    Raises
    ------
    HardwareError
        Unknown chip.
    TopologyError
        A chip without documented slice shapes (Sophgo NPUs).
    """
    return _shapes_of(_chip_name(chip))


def slice_chip_counts(chip) -> tuple[int, ...]:
    """The distinct chip counts of :func:`slice_shapes`, ascending."""
    return tuple(sorted({math.prod(s) for s in slice_shapes(chip)}))


def smallest_slice(chip, min_chips: int) -> tuple[int, ...] | None:
    """The smallest documented slice with at least ``min_chips`` chips (None if none).

    Among shapes with the same chip count the most cube-like (smallest largest
    dimension) comes first, as it has the shortest ICI paths.
    """
    fitting = [s for s in slice_shapes(chip) if math.prod(s) >= min_chips]
    if not fitting:
        return None
    fewest = math.prod(fitting[0])
    return min((s for s in fitting if math.prod(s) == fewest), key=lambda s: (max(s), s))


def is_slice_shape(chip, shape) -> bool:
    """True when ``shape`` (any order of its dimensions) is a documented slice of ``chip``."""
    wanted = tuple(sorted(int(d) for d in shape))
    return any(tuple(sorted(s)) == wanted for s in slice_shapes(chip))


def format_shape(shape) -> str:
    """``(4, 4, 8)`` -> ``'4x4x8'``."""
    return "x".join(str(int(d)) for d in shape)
