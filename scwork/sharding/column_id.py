"""The stacked column id of an embedding id: one formula for kernels, references and models.

[jte] ``CooFormat::GetColId`` identifies an id of a table in a stack by
its transformed column id ``col_id = p + P * (q + row_offset_in_shard)``: the
destination partition ``p = (id + col_shift) % P`` in the low part and the stacked
local row ``q + row_offset_in_shard`` (``q = id // P``) above it. Mini-batching
buckets ids by a hash of it, and it tells ids of different tables of a stack apart.

Both functions are plain arithmetic on ints or numpy arrays. Numba kernels compile
the same function objects (``scwork._jit.jit(inline="always")(column_id)``), so the
formula is written here only. (Numba's on-disk cache does not notice edits to a
function compiled into a kernel from another file: after changing this one, clear
``__pycache__`` or run with ``NUMBA_DISABLE_JIT=1``; tests/sharding/test_minibatch_golden.py
pins the values kernels and references give.)

Examples
--------
>>> column_id(1, 2, 16, 2)            # partition 1, row 2 + offset 16, P = 2
37
>>> column_id_of_id(4, 2, col_shift=1, row_offset_in_shard=16)
37
"""

from __future__ import annotations

__all__ = ["column_id", "column_id_of_id"]


def column_id(p, q, row_offset_in_shard, num_partitions):
    """``p + P * (q + row_offset_in_shard)``: partition ``p``, local row ``q`` of a stacked table.

    Parameters
    ----------
    p : int or ndarray
        Destination partition, ``0 <= p < num_partitions``.
    q : int or ndarray
        Local row in the table's shard (``id // P``).
    row_offset_in_shard : int or ndarray
        Rows of the stack's earlier tables in one shard.
    num_partitions : int
        ``P``.
    """
    return p + num_partitions * (q + row_offset_in_shard)


def column_id_of_id(x, num_partitions, col_shift, row_offset_in_shard):
    """:func:`column_id` of raw id ``x`` of a table with shard rotation ``col_shift``."""
    return column_id((x + col_shift) % num_partitions, x // num_partitions, row_offset_in_shard, num_partitions)
