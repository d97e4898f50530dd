"""Sophgo NPU local memory: where each element of an NCHW tensor lives ([tpu-mlir]).

A Sophgo TPU (BM168x, CV18xx) computes on *local memory*: ``NPU_NUM`` lanes, each
with its own memory. Channel ``c`` of a tensor goes to lane
``(start_lane + c) % NPU_NUM``; channels beyond the last lane wrap back to lane 0
one *slot* further down, and every batch ``n`` starts a new slot on the start lane
again. Strides say how far apart two elements are **inside one lane**:

- ``w`` is 1 and ``h`` is ``W`` (``align_up(W, EU_NUM)`` in the line-aligned layout);
- ``c`` is the distance from ``(n, c)`` to ``(n, c + NPU_NUM)``, the size of a slot:
  ``ceil(H*W / EU_NUM) * EU_NUM`` (aligned), ``H*W`` (compact) or ``H * h`` (line-aligned);
- ``n`` is ``ceil((start_lane + C) / NPU_NUM) * c``: the slots one batch needs on the
  busiest lane.

``EU_NUM = EU_BYTES / itemsize`` is how many elements one execution-unit row holds.
Global memory (DDR) is plain contiguous NCHW: :func:`global_strides`.

Sources: Sophgo's article on TPU local memory (NCHW tensors on NPU lanes)
for the rules and the worked example; sophgo/tpu-mlir ``BM168x::getLocalStride`` and
cvikernel ``tl_default_stride`` for the formulas (both write ``n`` as
``ceil(C / NPU_NUM) * c``, i.e. they assume ``start_lane = 0``; the article's form,
used here, includes the start lane). Chip constants come from
:mod:`scwork.hardware` (``scwork.hardware.describe("bm1684x")`` shows their sources).

Units: BM168x toolchains give local strides in elements; CV18xx toolchains
(cvikernel) give them in bytes. :class:`LocalLayout` always carries both
(``strides_elements``, ``strides_bytes``) and says which one is the chip's own in
``native_stride_unit``. CV18xx local memory holds only int8, uint8 and bf16
tensors (tpu-mlir ``CV18xx::assert_support_fmt``), so other dtypes are refused on
those chips.

Not modelled: BM1684 stores 1- and 2-byte tensors in *4N mode* (four batches packed
into one 32-bit word, tpu-mlir ``ALIGN_4N``); this module gives the plain (1N)
layout of [tpu-mlir] for every chip. Neither are bank conflicts nor the allocator that
picks a tensor's start address: offsets are relative to the tensor's start, which
an aligned layout places on an ``EU_BYTES`` boundary.

Examples
--------
The article's example: an fp16 ``(2, 3, 4, 5)`` tensor, ``EU_BYTES = 64``
(so ``EU_NUM = 32``), 4 NPUs.

>>> from scwork.layout import npu
>>> npu.local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64).strides_elements
NpuStrides(n=32, c=32, h=5, w=1)
>>> npu.local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64, start_lane=2).strides_elements
NpuStrides(n=64, c=32, h=5, w=1)
>>> npu.global_strides((2, 2, 3, 2))
NpuStrides(n=12, c=6, h=2, w=1)
"""

from __future__ import annotations

from scwork._rounding import ceil_div, round_up

import html
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scwork._bisect import last_true
from scwork._validate import integer, positive_int, shown
from scwork.errors import ConfigError, HardwareError, LayoutError

if TYPE_CHECKING:  # pragma: no cover
    import xarray

    from scwork.hardware.chips import NpuChip

__all__ = [
    "NpuStrides",
    "LocalLayout",
    "global_strides",
    "local_layout",
    "LAYOUT_KINDS",
    "DTYPE_SIZES",
    "DTYPE_BITS",
]

#: Local-memory layout kinds ([tpu-mlir], local-memory layout).
LAYOUT_KINDS: tuple[str, ...] = ("aligned", "compact", "line_aligned")

#: Canonical dtype name -> size in bytes (tpu-mlir's ``getFmtBytes``: 0.5 for the
#: 4-bit types, which BM1688 computes on).
DTYPE_SIZES: dict[str, float] = {
    "f32": 4, "f16": 2, "bf16": 2,
    "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4, "u32": 4,
    "s4": 0.5, "u4": 0.5,
}

#: Canonical dtype name -> bits per element.
DTYPE_BITS: dict[str, int] = {name: int(size * 8) for name, size in DTYPE_SIZES.items()}

# Spellings people use for the same types (numpy, tpu-mlir, C).
_DTYPE_ALIASES: dict[str, str] = {
    "fp32": "f32", "float32": "f32", "float": "f32",
    "fp16": "f16", "float16": "f16", "half": "f16",
    "bfloat16": "bf16",
    "int8": "s8", "i8": "s8", "si8": "s8",
    "uint8": "u8", "ui8": "u8",
    "int16": "s16", "i16": "s16", "si16": "s16",
    "uint16": "u16", "ui16": "u16",
    "int32": "s32", "i32": "s32", "si32": "s32",
    "uint32": "u32", "ui32": "u32",
    "int4": "s4", "i4": "s4", "si4": "s4",
    "uint4": "u4", "ui4": "u4",
}

# cvikernel/tpu-mlir only lay out these in CV18xx local memory.
_CV18XX_DTYPES = ("s8", "u8", "bf16")


# ----------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------
_INT64_MAX = 2**63 - 1

#: Largest ``max_cells`` of :meth:`LocalLayout.occupancy` (five int64 maps of it: 1.25 GiB).
MAX_OCCUPANCY_CELLS = 2**25


def bytes_of(elements: int, bits: int) -> int:
    """Bytes of ``elements`` elements of ``bits`` bits: whole bytes, rounded up.

    For the 4-bit types this is tpu-mlir's rule ``align_up(elements, 2) * 0.5``
    (two elements per byte, an odd count takes a last half-used byte).

    Examples
    --------
    >>> bytes_of(20, 4), bytes_of(3, 4), bytes_of(5, 16)
    (10, 2, 10)
    """
    return ceil_div(int(elements) * int(bits), 8)


def _dtype_info(dtype: Any) -> tuple[str, int]:
    """Canonical name and size in bytes of ``dtype`` (LayoutError if unknown)."""
    if not isinstance(dtype, str):
        raise LayoutError(
            f"dtype must be a name such as 'f32', got {dtype!r}",
            hint=f"use one of {', '.join(DTYPE_SIZES)}",
        )
    key = dtype.strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_SIZES:
        raise LayoutError(
            f"unknown dtype {dtype!r}",
            hint=f"use one of {', '.join(DTYPE_SIZES)} (aliases such as 'int8' or 'fp16' work too)",
        )
    return key, DTYPE_SIZES[key]


def _shape4(nchw: Any) -> tuple[int, int, int, int]:
    """Validate an NCHW shape: four positive integers."""
    try:
        dims = tuple(nchw)
    except TypeError:
        raise LayoutError(f"shape must be 4 integers (N, C, H, W), got {shown(nchw)}") from None
    if len(dims) != 4:
        raise LayoutError(
            f"shape must have 4 dimensions (N, C, H, W), got {len(dims)}: {shown(dims)}",
            hint="reshape to NCHW first, e.g. a (C, H, W) tensor is (1, C, H, W)",
        )
    out = []
    for name, value in zip("NCHW", dims):
        if isinstance(value, bool):
            raise LayoutError(f"{name} must be an integer, got {value!r}")
        try:
            number = operator.index(value)
        except TypeError:
            raise LayoutError(f"{name} must be an integer, got {shown(value)}") from None
        if number < 1:
            raise LayoutError(f"{name} must be >= 1, got {shown(number)} (shape {shown(dims)})")
        if number > _INT64_MAX:
            # tpu-mlir keeps shapes in int64; the bound also keeps every product printable.
            raise LayoutError(f"{name} = {shown(number)} does not fit in a signed 64-bit integer")
        out.append(number)
    return tuple(out)  # type: ignore[return-value]


def _resolve_chip(chip: Any) -> "NpuChip":
    from scwork.hardware import get

    info = get(chip)
    if info.kind != "npu":
        raise HardwareError(
            f"{info.name} is a TPU, not a Sophgo NPU: it has no NPU local memory. "
            f"Sophgo chips: {', '.join(_npu_names())}"
        )
    return info  # type: ignore[return-value]


def _npu_names() -> list[str]:
    from scwork.hardware import names

    return names("npu")


# ----------------------------------------------------------------------------------
# Public types
# ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NpuStrides:
    """Strides of the four NCHW dimensions, in one unit (elements or bytes).

    Examples
    --------
    >>> s = NpuStrides(n=12, c=6, h=2, w=1)
    >>> s.as_tuple()
    (12, 6, 2, 1)
    """

    n: int
    c: int
    h: int
    w: int

    def as_tuple(self) -> tuple[int, int, int, int]:
        """``(n, c, h, w)``."""
        return (self.n, self.c, self.h, self.w)

    def scaled(self, factor: int) -> "NpuStrides":
        """Every stride times ``factor`` (elements -> bytes with ``factor = itemsize``)."""
        return NpuStrides(self.n * factor, self.c * factor, self.h * factor, self.w * factor)


def global_strides(nchw) -> NpuStrides:
    """Strides of a contiguous NCHW tensor in global memory (DDR), in elements.

    ``w = 1``, ``h = W``, ``c = H*W``, ``n = C*H*W`` ([tpu-mlir], local-memory layout).

    Parameters
    ----------
    nchw : sequence of 4 int
        Tensor shape ``(N, C, H, W)``.

    Returns
    -------
    NpuStrides
        Strides in elements; multiply by the dtype size for bytes.

    Raises
    ------
    LayoutError
        The shape is not four positive integers.

    Examples
    --------
    >>> global_strides((2, 2, 3, 2))
    NpuStrides(n=12, c=6, h=2, w=1)
    """
    _, c, h, w = _shape4(nchw)
    return NpuStrides(n=c * h * w, c=h * w, h=w, w=1)


@dataclass(frozen=True)
class LocalLayout:
    """An NCHW tensor laid out in Sophgo NPU local memory ([tpu-mlir], local-memory layout).

    Build one with :func:`local_layout`, which resolves chip names and dtype
    aliases; constructing it directly validates the same way.

    Parameters
    ----------
    shape : tuple of 4 int
        ``(N, C, H, W)``.
    dtype : str
        Canonical dtype name (``"f32"``, ``"bf16"``, ``"s8"``...).
    npu_num : int
        Lanes (``NPU_NUM``).
    eu_bytes : int
        Bytes of one execution-unit row (``EU_BYTES``); must be a multiple of the
        dtype size.
    kind : {"aligned", "compact", "line_aligned"}
        Layout kind.
    start_lane : int
        Lane of channel 0, ``0 <= start_lane < npu_num``.
    chip : NpuChip or None
        The chip the constants came from (for ``fits`` and the native stride unit).

    Attributes
    ----------
    itemsize : int
        Bytes per element.
    strides_elements, strides_bytes : NpuStrides
        Local strides in elements and in bytes.

    Examples
    --------
    >>> from scwork.layout.npu import local_layout
    >>> lay = local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64, start_lane=2)
    >>> [lay.lane_of(c) for c in range(3)]
    [2, 3, 0]
    >>> lay.address(1, 2, 0, 0)      # batch 1 starts 64 elements down; channel 2 one slot more
    (0, 192)
    >>> lay.bytes_per_lane
    256
    """

    shape: tuple[int, int, int, int]
    dtype: str
    npu_num: int
    eu_bytes: int
    kind: str = "aligned"
    start_lane: int = 0
    chip: "NpuChip | None" = None
    itemsize: int = field(init=False)
    strides_elements: NpuStrides = field(init=False)
    strides_bytes: NpuStrides = field(init=False, repr=False)

    def __post_init__(self) -> None:
        shape = _shape4(self.shape)
        dtype, itemsize = _dtype_info(self.dtype)
        npu_num = positive_int("npu_num", self.npu_num)
        eu_bytes = positive_int("eu_bytes", self.eu_bytes)
        if not isinstance(self.kind, str) or self.kind not in LAYOUT_KINDS:
            raise LayoutError(
                f"unknown layout kind {shown(self.kind)}",
                hint=f"use one of {', '.join(repr(k) for k in LAYOUT_KINDS)}",
            )
        bits = DTYPE_BITS[dtype]
        if (eu_bytes * 8) % bits:
            raise ConfigError(
                f"eu_bytes={eu_bytes} is not a multiple of the {dtype} size ({itemsize} bytes), "
                "so EU_NUM = eu_bytes / itemsize is not an integer; check eu_bytes"
            )
        if isinstance(self.start_lane, bool):
            raise LayoutError(f"start_lane must be an integer, got {self.start_lane!r}")
        try:
            start = operator.index(self.start_lane)
        except TypeError:
            raise LayoutError(f"start_lane must be an integer, got {shown(self.start_lane)}") from None
        if not 0 <= start < npu_num:
            raise LayoutError(
                f"start_lane={shown(start)} is outside 0..{npu_num - 1} (npu_num={npu_num})",
                hint=f"pick a lane between 0 and {npu_num - 1}",
            )
        if self.chip is not None and getattr(self.chip, "byte_strides", False) and dtype not in _CV18XX_DTYPES:
            raise LayoutError(
                f"{self.chip.name} local memory holds only int8, uint8 and bf16 tensors, not {dtype}",
                hint="use dtype 's8', 'u8' or 'bf16' on CV18xx chips (tpu-mlir CV18xx::assert_support_fmt)",
            )
        for name, value in (("shape", shape), ("dtype", dtype), ("npu_num", npu_num),
                            ("eu_bytes", eu_bytes), ("start_lane", start), ("itemsize", itemsize)):
            object.__setattr__(self, name, value)

        n, c, h, w = shape
        eu_num = eu_bytes * 8 // bits
        h_stride = round_up(w, eu_num) if self.kind == "line_aligned" else w
        if self.kind == "aligned":
            c_stride = round_up(h * w, eu_num)
        elif self.kind == "compact":
            c_stride = h * w
        else:  # line_aligned: every H line starts on an EU boundary
            c_stride = h * h_stride
        # Each batch restarts on the start lane, so it spans the slots the
        # busiest lane needs for channels start_lane .. start_lane + C - 1.
        n_stride = ceil_div(start + c, npu_num) * c_stride
        elements = NpuStrides(n=n_stride, c=c_stride, h=h_stride, w=1)
        object.__setattr__(self, "strides_elements", elements)
        # Sub-byte types: a stride of k elements spans bytes_of(k) bytes (tpu-mlir).
        object.__setattr__(self, "strides_bytes", NpuStrides(*(bytes_of(x, bits) for x in elements.as_tuple())))

    # -- derived quantities ----------------------------------------------------------
    @property
    def element_bits(self) -> int:
        """Bits per element (4 for ``s4``/``u4``)."""
        return DTYPE_BITS[self.dtype]

    @property
    def eu_num(self) -> int:
        """Elements per execution-unit row: ``eu_bytes / itemsize`` (twice ``eu_bytes`` for 4-bit types)."""
        return self.eu_bytes * 8 // self.element_bits

    @property
    def native_stride_unit(self) -> str:
        """``"bytes"`` on chips whose toolchain counts local strides in bytes (CV18xx), else ``"elements"``."""
        if self.chip is not None and self.chip.byte_strides:
            return "bytes"
        return "elements"

    @property
    def native_strides(self) -> NpuStrides:
        """The strides in the chip's own unit (see :attr:`native_stride_unit`)."""
        return self.strides_bytes if self.native_stride_unit == "bytes" else self.strides_elements

    @property
    def slots_per_batch(self) -> int:
        """Channel slots (``c``-stride regions) one batch takes on the busiest lane."""
        return ceil_div(self.start_lane + self.shape[1], self.npu_num)

    @property
    def bytes_per_lane(self) -> int:
        """Bytes the tensor occupies on its busiest lane: ``N * n_stride * itemsize``.

        The same address range is reserved on every lane, so this is also what the
        tensor costs each lane's memory.
        """
        return bytes_of(self.shape[0] * self.strides_elements.n, self.element_bits)

    @property
    def data_bytes(self) -> int:
        """Bytes of real data: ``N*C*H*W*itemsize`` (rounded up to whole bytes for 4-bit types)."""
        n, c, h, w = self.shape
        return bytes_of(n * c * h * w, self.element_bits)

    @property
    def reserved_bytes(self) -> int:
        """Local memory reserved over all lanes: ``npu_num * bytes_per_lane``."""
        return self.npu_num * self.bytes_per_lane

    @property
    def utilization(self) -> float:
        """Fraction of the reserved local memory that holds data (1.0: no padding, no idle lanes)."""
        return self.data_bytes / self.reserved_bytes

    # -- element placement -----------------------------------------------------------
    def _check_index(self, name: str, value: Any, size: int) -> int:
        if isinstance(value, bool):
            raise LayoutError(f"index {name} must be an integer, got {value!r}")
        try:
            index = operator.index(value)
        except TypeError:
            raise LayoutError(f"index {name} must be an integer, got {value!r}") from None
        if not 0 <= index < size:
            raise LayoutError(
                f"index {name}={index} is out of range for {name.upper()}={size} "
                f"(valid 0..{size - 1}) in shape {self.shape}"
            )
        return index

    def lane_of(self, c: int) -> int:
        """Lane holding channel ``c``: ``(start_lane + c) % npu_num``."""
        c = self._check_index("c", c, self.shape[1])
        return (self.start_lane + c) % self.npu_num

    def slot_of(self, c: int) -> int:
        """Slot of channel ``c`` inside its batch's block: ``(start_lane + c) // npu_num``."""
        c = self._check_index("c", c, self.shape[1])
        return (self.start_lane + c) // self.npu_num

    def address(self, n: int, c: int, h: int, w: int) -> tuple[int, int]:
        """Lane and byte offset of element ``(n, c, h, w)``.

        The offset counts from the tensor's start address, which is the same on
        every lane (and ``EU_BYTES``-aligned for the aligned layout).

        Raises
        ------
        LayoutError
            An index is out of range; the message names it.

        Examples
        --------
        >>> from scwork.layout.npu import local_layout
        >>> local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64).address(1, 2, 3, 4)
        (2, 102)
        """
        N, C, H, W = self.shape
        n = self._check_index("n", n, N)
        c = self._check_index("c", c, C)
        h = self._check_index("h", h, H)
        w = self._check_index("w", w, W)
        s = self.strides_elements
        slot, lane = divmod(self.start_lane + c, self.npu_num)
        offset = n * s.n + slot * s.c + h * s.h + w * s.w
        # The byte holding the element (for 4-bit types, its low nibble when offset is even).
        return lane, offset * self.element_bits // 8

    # -- capacity ----------------------------------------------------------------------
    def _capacity_chip(self, chip: Any) -> "NpuChip":
        if chip is None:
            if self.chip is None:
                raise ConfigError(
                    "no chip to check against: this layout was built from npu_num/eu_bytes; "
                    "pass chip=... (e.g. 'bm1684x') to fits()/check_fits()"
                )
            return self.chip
        info = _resolve_chip(chip)
        if info.npu_num != self.npu_num or info.eu_bytes != self.eu_bytes:
            raise ConfigError(
                f"this layout was computed for npu_num={self.npu_num}, eu_bytes={self.eu_bytes} "
                f"but {info.name} has npu_num={info.npu_num}, eu_bytes={info.eu_bytes}; "
                f"recompute it with local_layout(..., chip={info.name!r})"
            )
        return info

    def fits(self, chip: Any = None) -> bool:
        """Whether the tensor fits in one lane's local memory of ``chip`` (default: its own chip).

        Examples
        --------
        >>> from scwork.layout.npu import local_layout
        >>> local_layout((1, 64, 56, 56), "f32", chip="bm1684x").fits()
        True
        >>> local_layout((32, 64, 56, 56), "f32", chip="bm1684x").fits()
        False
        """
        info = self._capacity_chip(chip)
        return self.bytes_per_lane <= info.local_memory_bytes_per_lane

    def check_fits(self, chip: Any = None) -> None:
        """Raise :class:`~scwork.errors.LayoutError` with a fix if the tensor does not fit.

        Examples
        --------
        >>> from scwork.layout.npu import local_layout
        >>> try:
        ...     local_layout((32, 64, 56, 56), "f32", chip="bm1684x").check_fits()
        ... except Exception as err:
        ...     print(str(err).splitlines()[0].replace("; ", ";\\n"))
        (32, 64, 56, 56) f32 (aligned) needs 401408 bytes per lane but bm1684x has 262144 bytes per lane (256 KiB);
        139264 bytes too many
        """
        info = self._capacity_chip(chip)
        capacity = info.local_memory_bytes_per_lane
        need = self.bytes_per_lane
        if need <= capacity:
            return
        n, c, h, w = self.shape
        fixes = []
        per_batch = self.strides_bytes.n
        max_n = capacity // per_batch
        if max_n >= 1:
            fixes.append(f"slice N: at most {max_n} batch(es) per tile fit")
        else:
            # One batch is already too big: find the tallest H slice that fits. The
            # bytes per lane never fall as H grows, so bisect (H may be 10**9).
            def fits_rows(rows: int) -> bool:
                trial = LocalLayout((1, c, rows, w), self.dtype, self.npu_num, self.eu_bytes,
                                    self.kind, self.start_lane, self.chip)
                return trial.bytes_per_lane <= capacity

            max_h = last_true(1, h + 1, fits_rows) if fits_rows(1) else 0
            if max_h:
                fixes.append(f"slice H: N=1 with at most H={max_h} rows per tile fits")
            else:
                fixes.append("slice W or C too: even one row of one batch does not fit")
        if self.kind != "compact":
            compact = LocalLayout(self.shape, self.dtype, self.npu_num, self.eu_bytes,
                                  "compact", self.start_lane, self.chip)
            if compact.bytes_per_lane < need:
                verdict = "fits" if compact.bytes_per_lane <= capacity else "still too big"
                fixes.append(f"compact layout needs {compact.bytes_per_lane} bytes per lane ({verdict})")
        if self.start_lane and ceil_div(self.start_lane + c, self.npu_num) > ceil_div(c, self.npu_num):
            fixes.append("start_lane=0 saves one slot per batch")
        raise LayoutError(
            f"{self.shape} {self.dtype} ({self.kind}) needs {need} bytes per lane but {info.name} has "
            f"{capacity} bytes per lane ({capacity // 1024} KiB); {need - capacity} bytes too many",
            hint="; ".join(fixes) + ". Smaller H/W/N tiles are the usual fix.",
        )

    # -- views -----------------------------------------------------------------------
    def _runs(self):
        """Contiguous data runs ``(lane, start_byte, end_byte, n, c)`` as numpy arrays.

        One run per (n, c) when a channel's H*W elements are contiguous, else one
        per (n, c, h) line (line-aligned layout with padded lines).
        """
        import numpy as np

        N, C, H, W = self.shape
        s = self.strides_elements
        bits = self.element_bits
        nn, cc = np.meshgrid(np.arange(N, dtype=np.int64), np.arange(C, dtype=np.int64), indexing="ij")
        nn, cc = nn.ravel(), cc.ravel()
        slot, lane = np.divmod(self.start_lane + cc, self.npu_num)
        base = nn * s.n + slot * s.c
        # Element offsets to bytes: a run starts in the byte of its first element and
        # ends after the byte of its last (4-bit types share bytes at odd offsets).
        if s.h == W:
            start = base * bits // 8
            end = ceil_div((base + H * W) * bits, 8)
            return lane, start, end, nn, cc
        hh = np.arange(H, dtype=np.int64)
        first = (base[:, None] + hh[None, :] * s.h).ravel()
        start = first * bits // 8
        end = ceil_div((first + W) * bits, 8)
        rep = lambda a: np.repeat(a, H)  # noqa: E731 - one value per line
        return rep(lane), start, end, rep(nn), rep(cc)

    def occupancy(self, *, max_cells: int = 2**24) -> "xarray.Dataset":
        """Which (batch, channel) owns each EU row of each lane: the lanes x rows map.

        A *row* is ``eu_bytes`` bytes of one lane's memory, counted from the tensor's
        start. The map has ``npu_num`` lanes and ``ceil(bytes_per_lane / eu_bytes)``
        rows.

        Returns
        -------
        xarray.Dataset
            Dims ``("lane", "row")``; int64 variables ``batch`` and ``channel`` (the
            owner of the first data byte in the row, -1 for a free or pure-padding
            row), ``owners`` (how many (n, c) share the row; >1 only in the compact
            layout) and ``used_bytes`` (bytes of real data in the row). Coordinates
            ``lane``, ``row`` and ``row_offset_bytes``; ``bank`` too when the chip
            is known.

        Examples
        --------
        >>> from scwork.layout.npu import local_layout
        >>> occ = local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64, start_lane=2).occupancy()
        >>> occ.sizes["lane"], occ.sizes["row"]
        (4, 4)
        >>> occ["channel"].values.tolist()
        [[-1, 2, -1, 2], [-1, -1, -1, -1], [0, -1, 0, -1], [1, -1, 1, -1]]
        >>> int(occ["used_bytes"].sum()) == 2 * 3 * 4 * 5 * 2
        True
        """
        import numpy as np

        rows = self._check_occupancy_size(max_cells)
        eu = self.eu_bytes
        batch = np.full((self.npu_num, rows), -1, dtype=np.int64)
        channel = np.full((self.npu_num, rows), -1, dtype=np.int64)
        owners = np.zeros((self.npu_num, rows), dtype=np.int64)
        used = np.zeros((self.npu_num, rows), dtype=np.int64)

        run_lane, run_start, run_end, run_n, run_c = self._runs()
        row_start = np.arange(rows, dtype=np.int64) * eu
        row_end = row_start + eu
        for lane in range(self.npu_num):
            pick = run_lane == lane
            if not pick.any():
                continue
            used[lane], batch[lane], channel[lane], owners[lane] = _lane_occupancy(
                run_start[pick], run_end[pick], run_n[pick], run_c[pick], row_start, row_end)
        return self._occupancy_dataset(rows, row_start, batch, channel, owners, used)

    def _check_occupancy_size(self, max_cells) -> int:
        """The number of EU rows of the occupancy map, after refusing maps over ``max_cells`` cells or int64."""
        max_cells = integer("max_cells", max_cells, minimum=0, error=LayoutError)
        if max_cells > MAX_OCCUPANCY_CELLS:
            raise LayoutError(f"max_cells={max_cells:,} is more than MAX_OCCUPANCY_CELLS={MAX_OCCUPANCY_CELLS:,} "
                              "(five int64 maps of that many cells are allocated)",
                              hint="map a smaller tile of the tensor instead")
        if self.bytes_per_lane * 8 + self.strides_elements.n * self.element_bits >= 2**62:
            # The runs below are int64 numpy arithmetic on bit offsets; past this they would wrap.
            raise LayoutError(f"the occupancy map of {self.shape} {self.dtype} ({self.kind}) has byte offsets "
                              f"beyond what int64 holds ({self.bytes_per_lane:,} bytes per lane)",
                              hint="map a smaller tile of the tensor (fewer N, C or H)")
        rows = ceil_div(self.bytes_per_lane, self.eu_bytes)
        # Five int64 maps of lanes x rows, plus the runs (one per (n, c) or line):
        # refuse before allocating what the machine cannot hold.
        runs = self.shape[0] * self.shape[1] * (1 if self.strides_elements.h == self.shape[3] else self.shape[2])
        if self.npu_num * rows > max_cells or runs > max_cells:
            raise LayoutError(
                f"the occupancy map of {self.shape} {self.dtype} ({self.kind}) has {self.npu_num} lanes x "
                f"{rows:,} EU rows and {runs:,} data runs, more than max_cells={max_cells:,}",
                hint="map a smaller tile of the tensor (fewer N, C or H), or pass a larger max_cells")
        return rows

    def _occupancy_dataset(self, rows: int, row_start, batch, channel, owners, used) -> "xarray.Dataset":
        """The occupancy maps as a Dataset with the layout's coordinates and attributes."""
        import numpy as np
        import xarray as xr

        eu = self.eu_bytes
        coords: dict[str, Any] = {
            "lane": ("lane", np.arange(self.npu_num, dtype=np.int64), {"long_name": "NPU lane"}),
            "row": ("row", np.arange(rows, dtype=np.int64),
                    {"long_name": f"EU row ({eu} bytes) from the tensor start"}),
            "row_offset_bytes": ("row", row_start, {"units": "bytes", "long_name": "offset of the row"}),
        }
        if self.chip is not None:
            coords["bank"] = ("row", row_start // self.chip.bank_bytes,
                              {"long_name": "local-memory bank (if the tensor starts at address 0)"})
        return xr.Dataset(
            {
                "batch": (("lane", "row"), batch, {"units": "index", "long_name": "batch n owning the row (-1: free)"}),
                "channel": (("lane", "row"), channel,
                            {"units": "index", "long_name": "channel c owning the row (-1: free)"}),
                "owners": (("lane", "row"), owners,
                           {"units": "count", "long_name": "(n, c) pairs with data in the row"}),
                "used_bytes": (("lane", "row"), used, {"units": "bytes", "long_name": "bytes of real data in the row"}),
            },
            coords=coords,
            attrs={
                "units": "bytes",
                "row_bytes": eu,
                "shape": str(self.shape),
                "dtype": self.dtype,
                "kind": self.kind,
                "start_lane": self.start_lane,
                "npu_num": self.npu_num,
                "eu_bytes": eu,
                "bytes_per_lane": self.bytes_per_lane,
                "chip": self.chip.name if self.chip is not None else "",
                "long_name": "NPU local-memory occupancy (lanes x EU rows)",
            },
        )

    def summary(self) -> dict[str, Any]:
        """The layout's numbers as a plain dict (for tables, JSON, widgets).

        Examples
        --------
        >>> from scwork.layout.npu import local_layout
        >>> d = local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64).summary()
        >>> d["strides_elements"], d["bytes_per_lane"], d["eu_num"]
        ((32, 32, 5, 1), 128, 32)
        """
        out: dict[str, Any] = {
            "shape": self.shape,
            "dtype": self.dtype,
            "itemsize": self.itemsize,
            "element_bits": self.element_bits,
            "kind": self.kind,
            "chip": self.chip.name if self.chip is not None else None,
            "npu_num": self.npu_num,
            "eu_bytes": self.eu_bytes,
            "eu_num": self.eu_num,
            "start_lane": self.start_lane,
            "strides_elements": self.strides_elements.as_tuple(),
            "strides_bytes": self.strides_bytes.as_tuple(),
            "native_stride_unit": self.native_stride_unit,
            "slots_per_batch": self.slots_per_batch,
            "bytes_per_lane": self.bytes_per_lane,
            "data_bytes": self.data_bytes,
            "reserved_bytes": self.reserved_bytes,
            "utilization": self.utilization,
        }
        if self.chip is not None:
            out["local_memory_bytes_per_lane"] = self.chip.local_memory_bytes_per_lane
            out["fits"] = self.fits()
        notes = []
        if self.chip is not None and self.chip.name == "bm1684" and self.itemsize < 4:
            notes.append("BM1684 stores 1/2-byte tensors in 4N mode, which is not modelled here")
        out["notes"] = notes
        return out

    def _repr_html_(self) -> str:
        rows = []
        for key, value in self.summary().items():
            if key == "utilization":
                value = f"{value:.1%}"
            elif key == "notes":
                if not value:
                    continue
                value = "; ".join(value)
            rows.append(f"<tr><th style='text-align:left'>{html.escape(key)}</th>"
                        f"<td style='text-align:left'>{html.escape(str(value))}</td></tr>")
        title = html.escape(f"LocalLayout {self.shape} {self.dtype} ({self.kind})")
        return f"<table><caption>{title}</caption>{''.join(rows)}</table>"


def _lane_occupancy(start, end, run_n, run_c, row_start, row_end):
    """``(used_bytes, batch, channel, owners)`` per EU row of one lane, from the data runs in it."""
    import numpy as np

    order = np.argsort(start, kind="stable")
    s = start[order]
    e = end[order]
    owner_n = run_n[order]
    owner_c = run_c[order]
    # Runs of 4-bit elements may share their boundary byte (compact layout, odd
    # element counts): start each run after the bytes already counted, so the
    # runs are disjoint; then "data bytes below x" is the sum of the runs that
    # start before x minus the part of the last one past x.
    s_data = np.maximum(s, np.concatenate(([s[0]], np.maximum.accumulate(e)[:-1])))
    e_data = np.maximum(e, s_data)
    cum = np.concatenate(([0], np.cumsum(e_data - s_data)))

    def below(x):
        k = np.searchsorted(s_data, x, side="left")
        over = np.where(k > 0, np.maximum(e_data[np.maximum(k - 1, 0)] - x, 0), 0)
        return cum[k] - over

    used = below(row_end) - below(row_start)
    first = np.searchsorted(e, row_start, side="right")      # first run ending after the row start
    last = np.searchsorted(s, row_end, side="left")          # runs starting before the row end
    has = (first < last) & (used > 0)
    idx = np.minimum(first, len(s) - 1)
    batch = np.where(has, owner_n[idx], -1)
    channel = np.where(has, owner_c[idx], -1)
    # Runs of one (n, c) are adjacent in address order, so the owners of
    # runs first..last-1 are 1 + the owner changes between them.
    change = np.zeros(len(s), dtype=np.int64)
    change[1:] = (owner_n[1:] != owner_n[:-1]) | (owner_c[1:] != owner_c[:-1])
    cum_change = np.cumsum(change)
    distinct = 1 + cum_change[np.maximum(last - 1, 0)] - cum_change[idx]
    owners = np.where(has, distinct, 0)
    return used, batch, channel, owners


def local_layout(
    nchw,
    dtype: str = "f32",
    *,
    chip=None,
    npu_num: int | None = None,
    eu_bytes: int | None = None,
    kind: str = "aligned",
    start_lane: int = 0,
) -> LocalLayout:
    """Lay an NCHW tensor out in Sophgo NPU local memory ([tpu-mlir], local-memory layout).

    Parameters
    ----------
    nchw : sequence of 4 int
        Tensor shape ``(N, C, H, W)``.
    dtype : str, default "f32"
        ``"f32"``, ``"f16"``, ``"bf16"``, ``"s8"``/``"int8"``, ``"u8"``, ``"s16"``,
        ``"u16"``, ``"s32"``, ``"u32"``.
    chip : str or NpuChip, optional
        Catalog name (``"bm1684x"``, ``"cv183x"``...) or chip object; gives
        ``npu_num``, ``eu_bytes``, the native stride unit and the local-memory size.
    npu_num, eu_bytes : int, optional
        Override the chip's values; both are required without a chip.
    kind : {"aligned", "compact", "line_aligned"}, default "aligned"
        ``aligned``: each channel slot is a multiple of EU_NUM elements;
        ``compact``: slots are exactly ``H*W``; ``line_aligned``: every H line
        starts on an EU boundary.
    start_lane : int, default 0
        Lane of channel 0.

    Returns
    -------
    LocalLayout

    Raises
    ------
    ConfigError
        Neither a chip nor both of ``npu_num`` and ``eu_bytes``; non-positive values.
    HardwareError
        Unknown chip name, or a TPU instead of a Sophgo NPU.
    LayoutError
        Bad shape, unknown dtype or kind, start lane out of range, or a dtype the
        chip cannot hold (CV18xx: int8, uint8, bf16 only).

    Examples
    --------
    >>> lay = local_layout((1, 3, 2, 3), "s8", chip="cv183x")
    >>> lay.native_stride_unit, lay.strides_bytes.as_tuple()
    ('bytes', (16, 16, 3, 1))
    >>> local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64, kind="compact").strides_elements
    NpuStrides(n=20, c=20, h=5, w=1)
    >>> local_layout((2, 3, 4, 5), "f16", npu_num=4, eu_bytes=64, kind="line_aligned").strides_elements
    NpuStrides(n=128, c=128, h=32, w=1)
    """
    info = _resolve_chip(chip) if chip is not None else None
    if info is None and (npu_num is None or eu_bytes is None):
        missing = [name for name, value in (("npu_num", npu_num), ("eu_bytes", eu_bytes)) if value is None]
        raise ConfigError(
            f"without a chip, both npu_num and eu_bytes are required (missing: {', '.join(missing)}); "
            f"or pass chip=..., one of {', '.join(_npu_names())}"
        )
    lanes = positive_int("npu_num", npu_num) if npu_num is not None else info.npu_num
    eu = positive_int("eu_bytes", eu_bytes) if eu_bytes is not None else info.eu_bytes
    for name, value in (("npu_num", lanes), ("eu_bytes", eu)):
        if value > _INT64_MAX:
            raise ConfigError(f"{name} = {shown(value)} does not fit in a signed 64-bit integer; "
                              "NPUs have tens of lanes and EUs of tens of bytes")
    if info is not None and (lanes != info.npu_num or eu != info.eu_bytes):
        # Keep the chip for its memory size and stride unit, but record that its
        # constants were changed so fits() compares like with like.
        from scwork.hardware import override

        info = override(info, npu_num=lanes, eu_bytes=eu)
    return LocalLayout(_shape4(nchw), dtype, lanes, eu, kind, start_lane, info)
