"""Byte counts past int64 raise a ConfigError instead of wrapping, at the exact boundary.

scwork/memory/_hbm_numbers.py keeps per-table bytes in int64 arrays; a table whose
``rows * width * itemsize * max(1, slots)`` passes ``2**63 // 64`` (2**57 - 1) is refused
(the 64 leaves room for sums of many such buffers). A prefetch deeper than 64 steps is one
buffer of ``per_step * depth`` bytes, refused past 2**63 - 1. And the sum of all buffers of
a step must fit too: before that check, 64 prefetched steps of 2**57 bytes (each knob at
its cap) wrapped the peak to a negative number that "fit".

Tables on one v6e chip (S = P = 2): ``round_up(vocab, 16)`` rows, f32 rows padded to 8.
"""

from __future__ import annotations

import pytest

import scwork
from scwork.errors import ConfigError
from scwork.memory import hbm_report
from scwork.sharding import TableSpec

V6E1 = scwork.Topology.for_chip("v6e", num_chips=1)
V6E2 = scwork.Topology.for_chip("v6e", num_chips=2)
INT64_MAX = 2**63 - 1


def _big(vocab, optimizer="sgd"):
    # 2**29 wide (a multiple of 8: no padding), 4 B each: 2**31 bytes per row
    return [TableSpec("big", vocab, 2**29, optimizer=optimizer, max_ids_per_partition=8,
                      max_unique_ids_per_partition=1)]


def test_table_of_2_57_bytes_is_refused_with_its_size():
    # 2**26 rows x 2**29 x 4 B = 2**57 = 144,115,188,075,855,872 bytes
    with pytest.raises(ConfigError, match=r"table 'big': 67,108,864 rows x 536,870,912 wide is "
                                          r"144,115,188,075,855,872 bytes per chip"):
        hbm_report(_big(2**26), V6E1, batch_size=2, stacking=None)


def test_table_just_below_2_57_bytes_is_counted():
    # 16 rows fewer: 2**57 - 16 * 2**31 bytes
    ds = hbm_report(_big(2**26 - 16), V6E1, batch_size=2, stacking=None)
    assert int(ds["table_bytes"].sel(table="big")) == 2**57 - 2**35


def test_slots_count_towards_the_table_limit():
    # adam: 2 slots; 2**25 rows: the table is 2**56 bytes, with its slots the largest
    # product 2**56 * 2 = 2**57 is refused; 16 rows fewer pass
    with pytest.raises(ConfigError, match="72,057,594,037,927,936 bytes per chip"):
        hbm_report(_big(2**25, "adam"), V6E1, batch_size=2, stacking=None)
    ds = hbm_report(_big(2**25 - 16, "adam"), V6E1, batch_size=2, stacking=None)
    assert int(ds["slot_bytes"].sel(table="big")) == 2 * (2**56 - 2**35)


def _small():
    return [TableSpec("a", 999, 11, max_ids_per_partition=13, max_unique_ids_per_partition=5)]


def test_deep_prefetch_past_int64_names_the_deepest_that_fits():
    # 65 steps of 2**57 bytes: 65 * 2**57 > 2**63 - 1; at most (2**63 - 1) // 2**57 = 63 steps
    with pytest.raises(ConfigError, match=r"maximum_parallel_iterations=65 prefetches 9,367,487,224,930,631,680 "
                                          r"bytes.*use a depth of at most 63$"):
        hbm_report(_small(), V6E2, batch_size=256, stacking=None, prefetch_bytes_per_step=2**57,
                   maximum_parallel_iterations=65)


@pytest.mark.parametrize("depth,per_step", [(64, 2**57), (73, INT64_MAX // 73)])
def test_sum_of_the_buffers_past_int64_is_refused(depth, per_step):
    """64 named steps of 2**57 bytes are 2**63; 73 steps of (2**63 - 1) / 73 bytes (73 divides
    2**63 - 1) are exactly 2**63 - 1, and the table on top passes it."""
    assert per_step * depth >= INT64_MAX
    with pytest.raises(ConfigError, match="buffers of one step add up to"):
        hbm_report(_small(), V6E2, batch_size=256, stacking=None, prefetch_bytes_per_step=per_step,
                   maximum_parallel_iterations=depth)


def test_prefetch_near_int64_that_fits_is_counted_exactly():
    # 63 steps of 2**57 bytes: 2**63 - 2**57 plus about 100 kB of the rest: fits int64
    ds = hbm_report(_small(), V6E2, batch_size=256, stacking=None, prefetch_bytes_per_step=2**57,
                    maximum_parallel_iterations=63)
    assert int(ds["bytes_at_peak"].sel(category="prefetch")) == 63 * 2**57
    assert int(ds["peak_bytes"]) > 63 * 2**57 and not bool(ds["hbm_fits"])
