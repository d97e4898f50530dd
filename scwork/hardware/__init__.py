"""Hardware catalog: TPU chips, Sophgo NPUs and topologies, each value with its public source.

Examples
--------
>>> import scwork
>>> chip = scwork.hardware.get("v5p")
>>> chip.sparsecores_per_chip, chip.tile_spmem_bytes
(4, 524288)
>>> scwork.hardware.source(chip, "hbm_bytes")
'[cloud-tpu] v5p 95 GiB ([sc-guide] §1 says 96 GiB)'
>>> bigger = scwork.hardware.override(chip, shared_spmem_bytes=8 * 2**20)
>>> scwork.hardware.source(bigger, "shared_spmem_bytes")
'user override'
>>> [c.name for c in scwork.hardware.chips(kind="tpu")]
['v4', 'v5e', 'v5p', 'v6e', 'tpu7x']
"""

from __future__ import annotations

from scwork.hardware.catalog import chips, describe, get, names, override, source
from scwork.hardware.chips import GB, GiB, KiB, NpuChip, TpuChip
from scwork.hardware.topology import Topology

__all__ = [
    "TpuChip", "NpuChip", "Topology", "get", "chips", "names", "describe",
    "source", "override", "KiB", "GiB", "GB",
]
