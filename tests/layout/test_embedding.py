"""SparseCore embedding-table padding ([jte] table_stacking.py; [sc-guide] §9) and the width < 8 packing what-if."""

from __future__ import annotations

import numpy as np
import pytest

import scwork
from scwork.errors import ConfigError
from scwork.layout.embedding import TablePadding, packing_whatif, padding_report, table_padding


# ----------------------------------------------------------------------------------
# Dimension padding: 32-byte lines
# ----------------------------------------------------------------------------------
def test_width_1_f32_table_wastes_seven_eighths_of_its_dim_bytes():
    t = table_padding(800, 1, num_sparsecores=1)
    assert t.padded_dim == 8
    assert t.dim_waste_fraction == 7 / 8
    # 800 rows is already a multiple of 8: all the waste is in the dimension
    assert t.padded_vocab == 800
    assert t.waste_bytes == 800 * 7 * 4
    assert t.waste_fraction == 7 / 8


def test_dim_8_f32_has_no_dim_waste():
    t = table_padding(800, 8, num_sparsecores=1)
    assert t.padded_dim == 8
    assert t.dim_waste_fraction == 0.0
    assert t.waste_bytes == 0


@pytest.mark.parametrize("dim, padded", [(1, 16), (8, 16), (16, 16), (17, 32), (33, 48)])
def test_bf16_pads_to_16_elements(dim, padded):
    t = table_padding(64, dim, dtype="bf16", num_sparsecores=1)
    assert t.itemsize == 2
    assert t.padded_dim == padded
    assert t.padded_dim * t.itemsize % 32 == 0


@pytest.mark.parametrize("dim, padded", [(3, 8), (9, 16), (100, 104), (128, 128)])
def test_f32_pads_to_8_elements(dim, padded):
    assert table_padding(64, dim, num_sparsecores=1).padded_dim == padded


def test_line_bytes_is_a_parameter():
    assert table_padding(64, 3, num_sparsecores=1, line_bytes=64).padded_dim == 16
    with pytest.raises(ConfigError, match="line_bytes=6"):
        table_padding(64, 3, num_sparsecores=1, line_bytes=6)


# ----------------------------------------------------------------------------------
# Vocabulary padding: 8 rows per SparseCore
# ----------------------------------------------------------------------------------
def test_vocab_padding_with_2_sparsecores():
    t = table_padding(1000, 16, num_sparsecores=2)
    assert t.padded_vocab == 1008  # round_up(1000, 16)
    assert t.rows_per_sparsecore == 504
    assert t.vocab_waste_fraction == 8 / 1008


def test_vocab_padding_with_16_sparsecores():
    t = table_padding(1000, 16, num_sparsecores=16)
    assert t.padded_vocab == 1024  # round_up(1000, 128)
    assert t.rows_per_sparsecore == 64
    assert table_padding(1024, 16, num_sparsecores=16).padded_vocab == 1024
    assert table_padding(1025, 16, num_sparsecores=16).padded_vocab == 1152


def test_topology_gives_the_sparsecore_count():
    topo = scwork.Topology.for_chip("v5p", num_chips=4)  # 4 chips x 4 SparseCores
    t = table_padding(1000, 16, topology=topo)
    assert t.num_sparsecores == 16
    assert t == table_padding(1000, 16, num_sparsecores=16)
    ironwood = scwork.Topology.for_chip("tpu7x", num_chips=2)
    assert table_padding(10, 1, topology=ironwood).num_sparsecores == 8


def test_bytes_add_up():
    t = table_padding(1000, 3, dtype="bf16", num_sparsecores=2)
    assert t.unpadded_bytes == 1000 * 3 * 2
    assert t.padded_bytes == 1008 * 16 * 2
    assert t.waste_bytes == t.padded_bytes - t.unpadded_bytes
    assert t.waste_fraction == pytest.approx(1 - (1 - t.dim_waste_fraction) * (1 - t.vocab_waste_fraction))


# ----------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, field",
    [((0, 8), "vocab_size"), ((-5, 8), "vocab_size"), ((10, 0), "embedding_dim"),
     ((10.5, 8), "vocab_size"), ((10, "8"), "embedding_dim"), ((True, 8), "vocab_size")],
)
def test_invalid_sizes_name_the_field(args, field):
    with pytest.raises(ConfigError, match=field):
        table_padding(*args, num_sparsecores=1)


def test_exactly_one_of_topology_and_num_sparsecores():
    with pytest.raises(ConfigError, match="exactly one"):
        table_padding(10, 8)
    with pytest.raises(ConfigError, match="exactly one"):
        table_padding(10, 8, num_sparsecores=4, topology=scwork.Topology(1, 4))
    with pytest.raises(ConfigError, match="num_sparsecores"):
        table_padding(10, 8, num_sparsecores=0)


def test_topology_without_sparsecores_is_refused():
    with pytest.raises(ConfigError, match="no SparseCores"):
        table_padding(10, 8, topology=scwork.Topology.for_chip("v5e", num_chips=4))


def test_unknown_dtype():
    with pytest.raises(ConfigError, match="dtype"):
        table_padding(10, 8, dtype="f64", num_sparsecores=1)
    assert table_padding(10, 8, dtype="bfloat16", num_sparsecores=1).dtype == "bf16"


def test_table_padding_is_frozen_and_validates_directly():
    t = TablePadding("x", 10, 3, "f32", 2)
    assert (t.padded_vocab, t.padded_dim) == (16, 8)
    with pytest.raises(AttributeError):
        t.padded_dim = 3
    with pytest.raises(ConfigError, match="table 'y'"):
        TablePadding("y", 10, 0, "f32", 2)


def test_summary_and_html():
    t = table_padding(1000, 1, num_sparsecores=2, name="clicks")
    summary = t.summary()
    assert summary["name"] == "clicks"
    assert summary["padded_bytes"] == 1008 * 8 * 4
    assert summary["dim_waste_fraction"] == 0.875
    html = t._repr_html_()
    assert "clicks" in html and "87.5%" in html


# ----------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------
def test_report_from_mapping_with_totals():
    ds = padding_report({"narrow": (1000, 1), "wide": (1000, 8), "odd": (10, 12)}, num_sparsecores=2)
    assert ds["padded_dim"].dims == ("table",)
    assert ds["table"].values.tolist() == ["narrow", "wide", "odd"]
    assert ds["padded_vocab"].values.tolist() == [1008, 1008, 16]
    assert ds["padded_dim"].values.tolist() == [8, 8, 16]
    assert ds["unpadded_bytes"].values.tolist() == [4000, 32000, 480]
    assert ds["padded_bytes"].values.tolist() == [32256, 32256, 1024]
    assert ds.attrs["total_unpadded_bytes"] == 36480
    assert ds.attrs["total_padded_bytes"] == 65536
    assert ds.attrs["total_waste_bytes"] == 65536 - 36480
    assert ds.attrs["total_waste_fraction"] == pytest.approx((65536 - 36480) / 65536)
    assert ds["padded_bytes"].attrs["units"] == "bytes"
    assert "long_name" in ds["waste_fraction"].attrs
    assert ds["waste_fraction"].dtype == np.float64


def test_report_from_table_paddings_and_topology():
    topo = scwork.Topology.for_chip("v6e", num_chips=2)  # 4 SparseCores
    tables = [table_padding(100, 4, topology=topo, name="a"),
              table_padding(100, 20, dtype="bf16", topology=topo, name="b")]
    ds = padding_report(tables)
    assert ds["dtype"].values.tolist() == ["f32", "bf16"]
    assert ds.attrs["num_sparsecores"] == 4
    assert ds["padded_vocab"].values.tolist() == [128, 128]
    assert padding_report(tables, topology=topo).equals(ds)
    with pytest.raises(ConfigError, match="another SparseCore count"):
        padding_report(tables, num_sparsecores=8)


def test_report_errors():
    with pytest.raises(ConfigError, match="at least one"):
        padding_report({}, num_sparsecores=1)
    with pytest.raises(ConfigError, match="duplicate"):
        padding_report([table_padding(1, 1, num_sparsecores=1)] * 2)
    with pytest.raises(ConfigError, match="table 'bad'"):
        padding_report({"bad": (10, 0)}, num_sparsecores=1)
    with pytest.raises(ConfigError, match="expected"):
        padding_report({"bad": 10}, num_sparsecores=1)
    with pytest.raises(ConfigError, match="exactly one"):
        padding_report({"a": (10, 1)})


# ----------------------------------------------------------------------------------
# Packing what-if (roadmap: better packing of width < 8), numbers by hand
# ----------------------------------------------------------------------------------
def test_whatif_width_1_f32():
    ds = packing_whatif(1000, 1, num_sparsecores=2)
    # today: 1008 rows x one 32-byte line; packed: 8 rows per line, 504 rows per SparseCore
    # -> 63 lines each, 126 lines in all
    assert ds["scheme"].values.tolist() == ["padded", "packed"]
    assert ds["rows_per_line"].values.tolist() == [1, 8]
    assert ds["lines"].values.tolist() == [1008, 126]
    assert ds["bytes"].values.tolist() == [32256, 4032]
    assert ds["waste_bytes"].values.tolist() == [28256, 32]
    assert ds.attrs["factor_saved"] == 8.0
    assert ds.attrs["bytes_saved"] == 28224
    assert ds.attrs["packing_applies"] == 1
    assert ds["bytes"].attrs["units"] == "bytes"


def test_whatif_width_3_f32_leaves_two_elements_per_line():
    ds = packing_whatif(1000, 3, num_sparsecores=2)
    # k = floor(8 / 3) = 2 rows per line; 504 / 2 = 252 lines per SparseCore
    assert ds["rows_per_line"].values.tolist() == [1, 2]
    assert ds["bytes"].values.tolist() == [32256, 504 * 32]
    assert ds.attrs["factor_saved"] == 2.0
    assert ds.attrs["unpadded_bytes"] == 12000


def test_whatif_width_5_bf16_rounds_lines_up_per_sparsecore():
    ds = packing_whatif(100, 5, dtype="bf16", num_sparsecores=1)
    # 16 bf16 per line -> 3 rows per line; padded vocab 104 -> ceil(104 / 3) = 35 lines
    assert ds["rows_per_line"].values.tolist() == [1, 3]
    assert ds["bytes"].values.tolist() == [104 * 32, 35 * 32]
    assert ds.attrs["factor_saved"] == pytest.approx(104 / 35)


def test_whatif_ceil_is_per_sparsecore():
    # 24 rows over 3 SparseCores = 8 each; bf16 width 5 -> k = floor(16 / 5) = 3 rows per line
    # -> ceil(8 / 3) = 3 lines on each SparseCore = 9 lines, not ceil(24 / 3) = 8
    ds = packing_whatif(24, 5, dtype="bf16", num_sparsecores=3)
    assert ds["rows_per_line"].values.tolist() == [1, 3]
    assert ds["lines"].values.tolist() == [24, 9]
    assert ds["bytes"].values.tolist() == [24 * 32, 9 * 32]


@pytest.mark.parametrize("dim", [8, 12, 64])
def test_whatif_wide_tables_change_nothing(dim):
    ds = packing_whatif(1000, dim, num_sparsecores=2)
    assert ds.attrs["packing_applies"] == 0
    assert ds.attrs["factor_saved"] == 1.0
    assert ds["bytes"].values[0] == ds["bytes"].values[1] == table_padding(1000, dim, num_sparsecores=2).padded_bytes
    assert "changes nothing" in ds.attrs["note"]


def test_whatif_today_matches_table_padding():
    for dim in (1, 2, 5, 7):
        t = table_padding(777, dim, dtype="bf16", num_sparsecores=4)
        assert packing_whatif(777, dim, dtype="bf16", num_sparsecores=4)["bytes"].values[0] == t.padded_bytes
