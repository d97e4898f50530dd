"""The hardware package: catalog entries and their sources, lookup, overrides, topologies."""

from __future__ import annotations

import dataclasses

import pytest

import scwork
from scwork import hardware
from scwork.errors import ConfigError, HardwareError, ScworkError, TopologyError
from scwork.hardware import GiB, KiB, NpuChip, Topology, TpuChip

ALL_CHIPS = hardware.chips()


def _field_names(chip) -> list[str]:
    return [f.name for f in dataclasses.fields(chip) if f.name != "sources"]


# ----------------------------------------------------------------------------------
# Catalog content
# ----------------------------------------------------------------------------------
def test_catalog_lists_tpus_then_npus():
    assert hardware.names("tpu") == ["v4", "v5e", "v5p", "v6e", "tpu7x"]
    assert hardware.names("npu") == ["bm1684x", "bm1688", "bm1690", "bm1684",
                                     "cv183x", "cv182x", "cv181x", "cv180x"]
    assert hardware.names() == hardware.names("tpu") + hardware.names("npu")
    assert all(isinstance(c, TpuChip) for c in hardware.chips("tpu"))
    assert all(isinstance(c, NpuChip) for c in hardware.chips("npu"))
    with pytest.raises(HardwareError, match="kind"):
        hardware.chips(kind="gpu")


@pytest.mark.parametrize("chip", ALL_CHIPS, ids=lambda c: c.name)
def test_every_field_has_a_source(chip):
    missing = [name for name in _field_names(chip)
               if name not in ("name", "marketing_name") and not chip.sources.get(name)]
    assert missing == [], f"{chip.name}: no source recorded for {missing}"
    assert set(chip.sources) <= set(_field_names(chip)), "sources name fields that do not exist"


@pytest.mark.parametrize("chip", ALL_CHIPS, ids=lambda c: c.name)
def test_every_field_has_unit_and_doc(chip):
    for f in dataclasses.fields(chip):
        assert "unit" in f.metadata and f.metadata.get("doc"), f"{type(chip).__name__}.{f.name}"


def test_spec1_tpu_numbers():
    v5p, v6e, tpu7x, v5e = (hardware.get(n) for n in ("v5p", "v6e", "tpu7x", "v5e"))
    assert (v5p.sparsecores_per_chip, v5p.tiles_per_sparsecore, v5p.tile_spmem_bytes) == (4, 16, 512 * KiB)
    assert (v6e.sparsecores_per_chip, v6e.simd_width_f32, v6e.simd_width_bf16) == (2, 8, 16)
    assert (tpu7x.simd_width_f32, tpu7x.simd_width_bf16, tpu7x.jax_devices_per_chip) == (16, 32, 2)
    assert tpu7x.sparsecores_per_device == 2
    assert not v5e.has_sparsecore and v5p.has_sparsecore
    assert v5p.hbm_bytes == 95 * GiB
    assert all(c.dma_granule_bytes == 32 for c in hardware.chips("tpu"))
    assert all(c.shared_spmem_bytes is None for c in hardware.chips("tpu"))


# Values read in sophgo/tpu-mlir (BM168x headers) and cvikernel (*_tpu_cfg.h).
SOPHGO = {
    # name: (npu_num, eu_bytes, local memory per lane, banks, byte strides)
    "bm1684x": (64, 64, 256 * KiB, 16, False),
    "bm1688": (32, 16, 128 * KiB, 16, False),
    "bm1690": (64, 64, 256 * KiB, 16, False),
    "bm1684": (64, 128, 512 * KiB, 8, False),
    "cv183x": (32, 16, 32 * KiB, 8, True),
    "cv182x": (8, 16, 32 * KiB, 8, True),
    "cv181x": (8, 16, 32 * KiB, 8, True),
    "cv180x": (2, 16, 32 * KiB, 8, True),
}


@pytest.mark.parametrize("name", list(SOPHGO))
def test_sophgo_constants(name):
    chip = hardware.get(name)
    assert (chip.npu_num, chip.eu_bytes, chip.local_memory_bytes_per_lane,
            chip.local_memory_banks, chip.byte_strides) == SOPHGO[name]
    assert chip.local_memory_bytes == chip.npu_num * chip.local_memory_bytes_per_lane
    assert chip.bank_bytes * chip.local_memory_banks == chip.local_memory_bytes_per_lane
    # sources point at the code the numbers were read from
    where = "tpu-mlir" if name.startswith("bm") else "cvikernel"
    assert where in chip.sources["npu_num"]
    assert str(chip.npu_num) in chip.sources["npu_num"]


def test_cv18xx_banks_are_4_kib():
    for name in ("cv183x", "cv182x", "cv181x", "cv180x"):
        assert hardware.get(name).bank_bytes == 0x1000


# ----------------------------------------------------------------------------------
# Lookup
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "alias, key",
    [("v5p", "v5p"), ("V5P", "v5p"), (" TPU v4 ", "v4"), ("tpu-v5e", "v5e"), ("TPU_V6E", "v6e"),
     ("Trillium", "v6e"), ("ironwood", "tpu7x"), ("v7x", "tpu7x"), ("BM1684X", "bm1684x"),
     ("bm_1688", "bm1688"), ("CV180X", "cv180x")],
)
def test_get_aliases_and_case(alias, key):
    assert hardware.get(alias).name == key


def test_get_passes_chip_objects_through():
    chip = hardware.get("v4")
    assert hardware.get(chip) is chip
    custom = dataclasses.replace(chip, name="v4-custom")
    assert hardware.get(custom) is custom


def test_unknown_name_lists_close_names():
    with pytest.raises(HardwareError) as info:
        hardware.get("v5x")
    text = str(info.value)
    assert "Unknown chip 'v5x'" in text
    assert "Did you mean" in text and ("'v5e'" in text or "'v5p'" in text)
    assert "Known chips:" in text and "bm1684x" in text
    with pytest.raises(HardwareError, match="bm1684x"):
        hardware.get("bm1648x")


def test_unknown_name_errors_are_value_errors():
    with pytest.raises(ValueError):
        hardware.get("nope")
    assert issubclass(HardwareError, ConfigError) and issubclass(HardwareError, ScworkError)
    with pytest.raises(HardwareError, match="name or a chip object"):
        hardware.get(42)


# ----------------------------------------------------------------------------------
# Sources, overrides, describe
# ----------------------------------------------------------------------------------
def test_source_lookup():
    assert hardware.source("v5p", "hbm_bytes") == "[cloud-tpu] v5p 95 GiB ([sc-guide] §1 says 96 GiB)"
    with pytest.raises(HardwareError, match="no field 'hbm'"):
        hardware.source("v5p", "hbm")
    with pytest.raises(HardwareError):
        hardware.source("v5p", "sources")


def test_override_records_user_override_and_keeps_the_original():
    base = hardware.get("v5p")
    bigger = hardware.override("v5p", shared_spmem_bytes=8 * 2**20, hbm_bytes=96 * GiB)
    assert bigger.shared_spmem_bytes == 8 * 2**20 and bigger.hbm_bytes == 96 * GiB
    assert hardware.source(bigger, "shared_spmem_bytes") == "user override"
    assert hardware.source(bigger, "hbm_bytes") == "user override"
    assert hardware.source(bigger, "tile_spmem_bytes") == hardware.source(base, "tile_spmem_bytes")
    # the catalog entry is untouched
    assert hardware.get("v5p").shared_spmem_bytes is None
    assert hardware.source("v5p", "shared_spmem_bytes") != "user override"
    npu = hardware.override("bm1684x", local_memory_bytes_per_lane=128 * KiB)
    assert npu.local_memory_bytes_per_lane == 128 * KiB
    assert hardware.source(npu, "local_memory_bytes_per_lane") == "user override"


def test_override_rejects_unknown_fields_and_negatives():
    with pytest.raises(HardwareError, match="no field 'hbm'"):
        hardware.override("v5p", hbm=1)
    with pytest.raises(HardwareError, match="no field 'sources'"):
        hardware.override("v5p", sources={})
    with pytest.raises(HardwareError, match=r"hbm_bytes must be >= 0.*bytes"):
        hardware.override("v5p", hbm_bytes=-1)
    with pytest.raises(HardwareError, match="npu_num must be >= 0"):
        hardware.override("cv180x", npu_num=-2)
    with pytest.raises(HardwareError, match="Unknown chip"):
        hardware.override("v9", hbm_bytes=1)


def test_sources_are_read_only():
    chip = hardware.get("v4")
    with pytest.raises(TypeError):
        chip.sources["hbm_bytes"] = "me"
    with pytest.raises(dataclasses.FrozenInstanceError):
        chip.hbm_bytes = 0


@pytest.mark.parametrize("name", ["v5p", "cv183x"])
def test_describe_dataset(name):
    chip = hardware.get(name)
    ds = hardware.describe(name)
    fields = _field_names(chip)
    assert ds["value"].dims == ("field",)
    assert ds["field"].values.tolist() == fields
    assert set(ds.data_vars) == {"value", "unit", "doc", "source"}
    assert ds.attrs["chip"] == name
    row = ds.sel(field="npu_num" if chip.kind == "npu" else "hbm_bytes")
    attr = "npu_num" if chip.kind == "npu" else "hbm_bytes"
    assert row["value"].item() == str(getattr(chip, attr))
    assert row["source"].item() == chip.sources[attr]
    assert row["unit"].item() in ("bytes", "lanes")


def test_describe_shows_overrides():
    ds = hardware.describe(hardware.override("v6e", hbm_bytes=1))
    assert ds.sel(field="hbm_bytes")["source"].item() == "user override"
    assert ds.sel(field="hbm_bytes")["value"].item() == "1"


# ----------------------------------------------------------------------------------
# Topology
# ----------------------------------------------------------------------------------
def test_topology_derived_counts():
    t = Topology(4, 4)
    assert (t.num_devices, t.sparsecores_per_device, t.num_sparsecores, t.num_partitions) == (4, 4, 16, 16)
    assert t.shape == (4,) and t.wraparound == (True,) and t.ndim == 1
    assert t.chip is None and t.chip_info is None
    assert scwork.Topology is Topology


def test_topology_for_chip():
    t = Topology.for_chip("v5p", num_chips=4)
    assert (t.num_devices, t.sparsecores_per_device, t.num_partitions) == (4, 4, 16)
    assert t.chip == "v5p" and t.chip_info is hardware.get("v5p")
    assert Topology.for_chip("Trillium", num_chips=8).num_partitions == 16
    assert Topology.for_chip("v5e", num_chips=4).num_partitions == 0


def test_tpu7x_has_two_devices_per_chip():
    t = Topology.for_chip("tpu7x", num_chips=2)
    assert t.devices_per_chip == 2
    assert t.num_devices == 4
    assert t.sparsecores_per_device == 2
    assert t.num_sparsecores == t.num_partitions == 8
    assert "4 devices x 2 SparseCores = 8 partitions" in str(t)


def test_topology_shape_and_wraparound():
    t = Topology.for_chip("v5e", shape=(16, 4), wraparound=(True, False))
    assert t.num_chips == 64 and t.shape == (16, 4) and t.wraparound == (True, False)
    # default: dimensions longer than 2 wrap
    assert Topology(8, 4, shape=(2, 4)).wraparound == (False, True)
    assert str(Topology(8, 4, chip="v5p", shape=(2, 2, 2))).startswith("2x2x2 v5p")


def test_for_chip_over_the_largest_slice_raises():
    with pytest.raises(TopologyError, match="exceed the largest v5e slice"):
        Topology.for_chip("v5e", num_chips=512)
    with pytest.raises(TopologyError, match="256"):
        Topology.for_chip("v6e", shape=(32, 16))
    assert Topology.for_chip("v5e", num_chips=256).num_chips == 256
    # a what-if past the limit: override the chip
    big = hardware.override("v5e", max_slice_chips=1024)
    assert Topology.for_chip(big, num_chips=512).num_chips == 512


def test_for_chip_errors():
    with pytest.raises(TopologyError, match="give num_chips or shape"):
        Topology.for_chip("v5p")
    with pytest.raises(HardwareError, match="NPU"):
        Topology.for_chip("bm1684x", num_chips=1)
    with pytest.raises(HardwareError, match="Unknown chip"):
        Topology.for_chip("v99", num_chips=1)


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"num_chips": 0, "sparsecores_per_chip": 4}, "num_chips must be >= 1"),
        ({"num_chips": 2.0, "sparsecores_per_chip": 4}, "num_chips must be an integer"),
        ({"num_chips": True, "sparsecores_per_chip": 4}, "num_chips must be an integer"),
        ({"num_chips": 2, "sparsecores_per_chip": -1}, "sparsecores_per_chip must be >= 0"),
        ({"num_chips": 2, "sparsecores_per_chip": 4, "devices_per_chip": 0}, "devices_per_chip must be >= 1"),
        ({"num_chips": 2, "sparsecores_per_chip": 3, "devices_per_chip": 2}, "cannot be split evenly"),
        ({"num_chips": 6, "sparsecores_per_chip": 4, "shape": (2, 2)}, "holds 4 chips but num_chips=6"),
        ({"num_chips": 4, "sparsecores_per_chip": 4, "shape": (4, 0)}, "positive integers"),
        ({"num_chips": 4, "sparsecores_per_chip": 4, "shape": ()}, "non-empty"),
        ({"num_chips": 4, "sparsecores_per_chip": 4, "shape": (2, 2), "wraparound": (True,)},
         "wraparound has 1 entries"),
    ],
)
def test_topology_validation_errors(kwargs, text):
    with pytest.raises(TopologyError, match=text):
        Topology(**kwargs)


def test_topology_errors_are_config_errors():
    assert issubclass(TopologyError, ConfigError)
    with pytest.raises(ValueError):
        Topology(0, 4)


def test_topology_replace():
    t = Topology.for_chip("v5p", num_chips=4)
    bigger = t.replace(num_chips=8)
    assert bigger.num_chips == 8 and bigger.shape == (8,) and bigger.num_partitions == 32
    grid = Topology(4, 4, shape=(2, 2))
    with pytest.raises(TopologyError):
        grid.replace(num_chips=8)  # a 2-D shape is not recomputed


def test_topology_is_frozen_and_hashable():
    t = Topology(2, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.num_chips = 3
    assert len({t, Topology(2, 4)}) == 1
