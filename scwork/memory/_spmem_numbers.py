"""The numbers behind the SPMEM report: the buffers one tile holds for a stack, from its limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scwork._rounding import ceil_div

from scwork.errors import ConfigError
from scwork.memory._model import (
    _INT64_MAX,
    ACTIVATION_BYTES,
    CSR_ALIGNMENT,
    GAIN_BYTES,
    INDEX_BYTES,
    Knobs,
    Model,
    round_up,
    stack_dtype,
    stack_limits,
    stack_width,
)

__all__ = ["SPMEM_BUFFERS", "tile_buffer_bytes", "SpmemNumbers", "require_tile_spmem", "spmem_numbers"]


# --------------------------------------------------------------------------------------
# SPMEM
# --------------------------------------------------------------------------------------
#: SPMEM buffers of one tile, in report order, with the allocation class the compiler
#: reports them in (E3001: fixed_size_allocation_bytes / row_dependent_size_allocation_bytes).
SPMEM_BUFFERS: tuple[tuple[str, str], ...] = (
    ("gather_operand", "fixed"),
    ("row_pointers", "fixed"),
    ("unique_ids", "fixed"),
    ("gathered_rows", "fixed"),
    ("embedding_ids", "row_dependent"),
    ("sample_ids", "row_dependent"),
    ("gains", "row_dependent"),
)


def tile_buffer_bytes(max_ids: int, max_unique: int, feature_width: int, sample_count: int, *,
                      num_partitions: int, num_tiles: int, itemsize: int,
                      stage_gather_operands_in_hbm: bool) -> tuple[int, ...]:
    """Bytes of every buffer of :data:`SPMEM_BUFFERS` on one tile (see :mod:`scwork.memory.spmem`)."""
    ids = round_up(max_ids, CSR_ALIGNMENT)
    uniq = round_up(max_unique, CSR_ALIGNMENT)
    gather = 0 if stage_gather_operands_in_hbm else \
        ceil_div(sample_count * feature_width, num_tiles) * ACTIVATION_BYTES
    return (
        gather,
        max(num_partitions, CSR_ALIGNMENT) * INDEX_BYTES,
        uniq * INDEX_BYTES,
        uniq * feature_width * itemsize,
        ids * INDEX_BYTES,
        ids * INDEX_BYTES,
        ids * GAIN_BYTES,
    )


@dataclass
class SpmemNumbers:
    """SPMEM per tile of every stack (arrays over stacks)."""

    stacks: tuple[str, ...]
    feature_width: np.ndarray
    itemsize: np.ndarray
    max_ids: np.ndarray
    max_unique: np.ndarray
    limit_source: tuple[str, ...]
    sample_count: np.ndarray
    buffers: np.ndarray
    """``(stack, buffer)`` bytes per tile, buffers as :data:`SPMEM_BUFFERS`."""
    capacity: int | None

    @property
    def fixed(self) -> np.ndarray:
        return self.buffers[:, :4].sum(axis=1)

    @property
    def row_dependent(self) -> np.ndarray:
        return self.buffers[:, 4:].sum(axis=1)

    @property
    def total(self) -> np.ndarray:
        return self.buffers.sum(axis=1)

    @property
    def fits(self) -> np.ndarray:
        if self.capacity is None:
            raise ConfigError("TileSpmem capacity unknown")
        return self.total <= self.capacity


def require_tile_spmem(model: Model, knobs: Knobs) -> int:
    if knobs.tile_spmem_bytes is None:
        name = getattr(model.chip, "name", "this chip")
        raise ConfigError(
            f"TileSpmem per tile of {getattr(model.chip, 'marketing_name', name)} is not published, so the "
            "SPMEM model needs it as a parameter: pass tile_spmem_bytes=... (bytes per tile; v5p and "
            "TPU7x have 512 KiB = 524288, v6e 256 KiB = 262144) or a chip with it set, e.g. "
            f"chip=scwork.hardware.override({name!r}, tile_spmem_bytes=524288)"
        )
    return knobs.tile_spmem_bytes


def spmem_numbers(model: Model, knobs: Knobs, *, require_capacity: bool = True,
                  only: Sequence[int] | None = None) -> SpmemNumbers:
    """SPMEM of every stack (or of the stacks with index in ``only``)."""
    capacity = require_tile_spmem(model, knobs) if require_capacity else knobs.tile_spmem_bytes
    index = range(len(model.stacks)) if only is None else only
    P = knobs.num_partitions
    n = knobs.samples_per_sc
    rows, widths, sizes, ids_, uniq_, srcs, samples = [], [], [], [], [], [], []
    for i in index:
        st = model.stacks[i]
        _, itemsize = stack_dtype(knobs, st)
        fw = stack_width(knobs, st)
        M, U, src = stack_limits(knobs, st)
        sc = st.num_features * n
        buffers = tile_buffer_bytes(M, U, fw, sc, num_partitions=P, num_tiles=knobs.tiles_per_sparsecore,
                                    itemsize=itemsize,
                                    stage_gather_operands_in_hbm=knobs.stage_gather_operands_in_hbm)
        if any(int(b) > _INT64_MAX // 64 for b in buffers):
            raise ConfigError(
                f"stack {model.stacks[i].name!r}: its SPMEM buffers ({max(int(b) for b in buffers):,} bytes per "
                f"tile for width {fw:,}, limits {M:,}/{U:,}) are beyond what scwork's 64-bit byte counts hold "
                "(and any TileSpmem); check embedding_dim and the limits")
        rows.append(buffers)
        widths.append(fw)
        sizes.append(itemsize)
        ids_.append(M)
        uniq_.append(U)
        srcs.append(src)
        samples.append(sc)
    return SpmemNumbers(
        stacks=tuple(model.stacks[i].name for i in index),
        feature_width=np.asarray(widths, np.int64),
        itemsize=np.asarray(sizes, np.int64),
        max_ids=np.asarray(ids_, np.int64),
        max_unique=np.asarray(uniq_, np.int64),
        limit_source=tuple(srcs),
        sample_count=np.asarray(samples, np.int64),
        buffers=np.asarray(rows, np.int64).reshape(len(rows), len(SPMEM_BUFFERS)),
        capacity=capacity,
    )
