"""scwork/layout/embedding.py at its edges, worked out by hand.

Survivors of the mutation run of embedding.py: no test pinned the f16 element size, the
2**64 cap on table numbers, when report columns leave int64, the attributes of a report
over mixed SparseCore counts or line sizes, the packed what-if's waste fractions, a
topology-like object with a bool or float partition count, or that the module imports
xarray only when a report is built.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from scwork.errors import ConfigError
from scwork.layout.embedding import TablePadding, packing_whatif, padding_report, table_padding


def test_f16_is_two_bytes():
    # 20 wide in 32-byte lines of 16 f16 elements: 32 wide; 10 rows -> round_up(10, 8) = 16 rows
    t = table_padding(10, 20, dtype="f16", num_sparsecores=1)
    assert (t.itemsize, t.padded_dim, t.padded_vocab, t.padded_bytes) == (2, 32, 16, 16 * 32 * 2)


def test_default_is_one_sparsecore():
    t = TablePadding("t", 100, 3)
    assert (t.num_sparsecores, t.padded_vocab, t.rows_per_sparsecore) == (1, 104, 104)


def test_table_numbers_up_to_2_64():
    assert TablePadding("t", 2**64, 1).padded_vocab == 2**64          # a multiple of 8 already
    with pytest.raises(ConfigError, match=r"vocab_size = 18446744073709551617 is more than 2\*\*64"):
        TablePadding("t", 2**64 + 1, 1)
    with pytest.raises(ConfigError, match="line_bytes = .* is more than 2"):
        TablePadding("t", 8, 1, line_bytes=2**64 + 4)


def test_report_columns_leave_int64_only_past_it():
    small = padding_report({"a": (1000, 1)}, num_sparsecores=2)
    assert small["padded_bytes"].dtype == np.int64 and small["vocab_size"].dtype == np.int64
    edge = padding_report([TablePadding("edge", 2**63 - 1, 1)])
    assert edge["vocab_size"].dtype == np.int64 and edge["vocab_size"].values.tolist() == [2**63 - 1]
    # round_up(2**63 - 1, 8) = 2**63 rows: no longer an int64, kept exact as a Python int
    assert edge["padded_vocab"].dtype == object and edge["padded_vocab"].values.tolist() == [2**63]
    assert edge["padded_bytes"].values.tolist() == [2**63 * 8 * 4]


def test_report_attributes_over_mixed_tables():
    same = padding_report([TablePadding("a", 100, 3, num_sparsecores=2), TablePadding("b", 100, 9, num_sparsecores=2)])
    assert same.attrs["num_sparsecores"] == 2 and same.attrs["line_bytes"] == 32
    mixed = padding_report([TablePadding("a", 100, 3, num_sparsecores=2),
                            TablePadding("b", 100, 3, num_sparsecores=1, line_bytes=64)])
    assert mixed.attrs["num_sparsecores"] == "[1, 2]" and mixed.attrs["line_bytes"] == "[32, 64]"


def test_report_refuses_items_that_are_not_table_paddings():
    with pytest.raises(ConfigError, match="got an item of type str"):
        padding_report([TablePadding("a", 100, 3), "b"])


@pytest.mark.parametrize("partitions", [True, 4.0, None])
def test_topology_needs_an_integer_partition_count(partitions):
    fake = SimpleNamespace(num_partitions=partitions)
    with pytest.raises(ConfigError, match="topology must be a scwork.Topology"):
        table_padding(100, 3, topology=fake)


def test_dtype_error_message_is_cut_to_200_characters():
    with pytest.raises(ConfigError) as info:
        table_padding(1, 1, dtype=["x" * 300], num_sparsecores=1)
    message = str(info.value)
    assert message.startswith("dtype must be a name such as 'f32', got list ['xxx") and len(message) == 200


def test_packed_whatif_waste_by_hand():
    # 1000 x 1 f32 on 2 SparseCores: 1008 rows, 504 per SparseCore. Today one 32-byte line per
    # row: 32256 B; packed 8 rows per line: 2 * 63 lines * 32 = 4032 B. Unpadded 4000 B.
    ds = packing_whatif(1000, 1, num_sparsecores=2)
    assert ds["waste_bytes"].values.tolist() == [28256, 32]
    assert ds["waste_fraction"].values.tolist() == [28256 / 32256, 32 / 4032]
    wide = packing_whatif(1000, 8, num_sparsecores=2)
    assert wide["rows_per_line"].values.tolist() == [1, 1] and wide["bytes"].values.tolist() == [32256, 32256]


def test_importing_the_module_does_not_import_xarray():
    code = ("import json, sys; import scwork.layout.embedding; "
            "print(json.dumps('xarray' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) is False


def test_s8_is_one_byte():
    # 32 s8 elements per 32-byte line: 20 -> 32 wide; 10 rows -> 16
    t = table_padding(10, 20, dtype="s8", num_sparsecores=1)
    assert (t.itemsize, t.padded_dim, t.padded_bytes) == (1, 32, 16 * 32)


def test_topology_with_one_partition_is_enough():
    assert table_padding(100, 3, topology=SimpleNamespace(num_partitions=1)).padded_vocab == 104
    with pytest.raises(ConfigError, match="has no SparseCores"):
        table_padding(100, 3, topology=SimpleNamespace(num_partitions=0))


@pytest.mark.parametrize("built_for", [1, 4])
def test_report_refuses_tables_padded_for_another_count(built_for):
    with pytest.raises(ConfigError, match=r"tables \['a'\] were padded for another SparseCore count than 2"):
        padding_report([TablePadding("a", 100, 3, num_sparsecores=built_for)], num_sparsecores=2)
