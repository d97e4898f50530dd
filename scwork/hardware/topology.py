"""The system a model runs on: how many chips, how many SparseCores, how wired."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from scwork.errors import TopologyError

__all__ = ["Topology"]


@dataclass(frozen=True)
class Topology:
    """Chips, their SparseCores and (for collectives) how the chips are wired.

    The sharding model of [jte] preprocess_sparse_dense_matmul_input needs only the counts: ``G`` devices with ``S``
    SparseCores each, ``P = G * S`` partitions. The collectives model also needs
    the chip grid (``shape``) and which of its dimensions wrap around.

    Parameters
    ----------
    num_chips : int
        Number of chips, >= 1.
    sparsecores_per_chip : int
        SparseCores per chip, >= 0 (0 for chips without SparseCore, e.g. v5e).
    chip : str, optional
        Catalog name of the chip (``scwork.hardware.get``), if any. Default None.
    shape : tuple of int, optional
        Chip grid, e.g. ``(4, 4)`` or ``(16, 16, 16)``; its product must equal
        ``num_chips``. Default ``(num_chips,)``: chips in one line or ring.
    wraparound : tuple of bool, optional
        Per dimension of ``shape``, whether that dimension has wraparound links
        (torus) or not (mesh). Default: every dimension of size > 2 wraps, as on
        full TPU pods; pass it explicitly for partial slices (e.g. ``(True, False)``
        for a 16x4 slice that wraps in one dimension only).
    devices_per_chip : int
        JAX devices per chip (2 for dual-chiplet TPU7x). Default 1. SparseCores
        are split evenly between a chip's devices.

    Examples
    --------
    >>> import scwork
    >>> topo = scwork.Topology(1, 2)
    >>> topo.num_partitions
    2
    >>> t = scwork.Topology.for_chip("v5p", num_chips=4)
    >>> (t.num_devices, t.sparsecores_per_device, t.num_partitions)
    (4, 4, 16)
    >>> scwork.Topology.for_chip("tpu7x", num_chips=2).num_devices
    4
    >>> scwork.Topology.for_chip("v5e", shape=(16, 4), wraparound=(True, False)).shape
    (16, 4)
    """

    num_chips: int
    sparsecores_per_chip: int
    chip: str | None = None
    shape: tuple[int, ...] | None = None
    wraparound: tuple[bool, ...] | None = None
    devices_per_chip: int = 1

    def __post_init__(self) -> None:
        def bad(msg: str) -> TopologyError:
            return TopologyError(msg)

        for name in ("num_chips", "sparsecores_per_chip", "devices_per_chip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(f"{name} must be an integer, got {value!r}")
        if self.num_chips < 1:
            raise bad(f"num_chips must be >= 1, got {self.num_chips}: a topology needs at least one chip")
        if self.sparsecores_per_chip < 0:
            raise bad(f"sparsecores_per_chip must be >= 0, got {self.sparsecores_per_chip}")
        if self.devices_per_chip < 1:
            raise bad(f"devices_per_chip must be >= 1, got {self.devices_per_chip}")
        if self.sparsecores_per_chip % self.devices_per_chip:
            raise bad(
                f"sparsecores_per_chip={self.sparsecores_per_chip} cannot be split evenly over "
                f"devices_per_chip={self.devices_per_chip}; use a multiple of {self.devices_per_chip}"
            )
        shape = (self.num_chips,) if self.shape is None else tuple(self.shape)
        if not shape or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape):
            raise bad(f"shape must be a non-empty tuple of positive integers, got {self.shape!r}")
        if math.prod(shape) != self.num_chips:
            raise bad(
                f"shape {shape} holds {math.prod(shape)} chips but num_chips={self.num_chips}; "
                "make the product of shape equal num_chips (or omit num_chips in for_chip)"
            )
        if self.wraparound is None:
            wrap = tuple(s > 2 for s in shape)
        else:
            wrap = tuple(bool(w) for w in self.wraparound)
            if len(wrap) != len(shape):
                raise bad(
                    f"wraparound has {len(wrap)} entries but shape {shape} has {len(shape)} "
                    "dimensions; give one flag per dimension"
                )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "wraparound", wrap)

    # -- constructors -----------------------------------------------------------------
    @classmethod
    def for_chip(
        cls,
        chip,
        num_chips: int | None = None,
        *,
        shape: tuple[int, ...] | None = None,
        wraparound: tuple[bool, ...] | None = None,
    ) -> "Topology":
        """A topology of ``num_chips`` (or a ``shape`` grid) of a catalog TPU.

        Raises
        ------
        TopologyError
            More chips than the chip's largest slice, or neither count nor shape given.
        HardwareError
            Unknown chip, or a Sophgo NPU (no SparseCore/ICI model).
        """
        from scwork.errors import HardwareError
        from scwork.hardware.catalog import get

        info = get(chip)
        if info.kind != "tpu":
            raise HardwareError(f"{info.name} is an NPU; topologies model TPU slices (use scwork.layout.npu)")
        if num_chips is None:
            if shape is None:
                raise TopologyError("give num_chips or shape, e.g. Topology.for_chip('v5p', num_chips=4)")
            num_chips = math.prod(shape)
        if num_chips > info.max_slice_chips:
            raise TopologyError(
                f"{num_chips} chips exceed the largest {info.name} slice ({info.max_slice_chips} chips); "
                f"use at most {info.max_slice_chips}, or override max_slice_chips for a what-if"
            )
        return cls(
            num_chips=num_chips,
            sparsecores_per_chip=info.sparsecores_per_chip,
            chip=info.name,
            shape=shape,
            wraparound=wraparound,
            devices_per_chip=info.jax_devices_per_chip,
        )

    def replace(self, **changes) -> "Topology":
        """A copy with some fields changed (``shape`` is recomputed if only ``num_chips`` changes)."""
        if "num_chips" in changes and "shape" not in changes and len(self.shape) == 1:
            changes["shape"] = None
            changes.setdefault("wraparound", None)
        return dataclasses.replace(self, **changes)

    # -- derived counts ---------------------------------------------------------------
    @property
    def num_devices(self) -> int:
        """JAX devices (``G`` in [jte] preprocess_sparse_dense_matmul_input)."""
        return self.num_chips * self.devices_per_chip

    @property
    def sparsecores_per_device(self) -> int:
        """SparseCores per JAX device (``S`` in [jte] preprocess_sparse_dense_matmul_input)."""
        return self.sparsecores_per_chip // self.devices_per_chip

    @property
    def num_sparsecores(self) -> int:
        """SparseCores in the whole system."""
        return self.num_chips * self.sparsecores_per_chip

    @property
    def num_partitions(self) -> int:
        """Table partitions ``P = G * S``: tables are mod-sharded over every SparseCore."""
        return self.num_sparsecores

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def chip_info(self):
        """The catalog entry of ``chip`` (None for a generic topology)."""
        if self.chip is None:
            return None
        from scwork.hardware.catalog import get

        return get(self.chip)

    def __str__(self) -> str:
        grid = "x".join(str(s) for s in self.shape)
        name = self.chip or "chip"

        def count(n: int, noun: str) -> str:
            return f"{n} {noun}" + ("" if n == 1 else "s")

        return (
            f"{grid} {name} ({count(self.num_devices, 'device')} x "
            f"{count(self.sparsecores_per_device, 'SparseCore')} = {count(self.num_partitions, 'partition')})"
        )
