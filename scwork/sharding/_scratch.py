"""Scratch and CSR memory of the sharding engine: recycled buffers, carving, the budget.

Faulting in fresh pages costs about as much as the kernels, so finished calls give their
buffers back to a pool (up to an eighth of the machine's memory, at least 512 MiB and
at most 4 GiB; :func:`release_buffers` drops it). The scratch
budget (``SCWORK_MAX_SCRATCH_BYTES``) bounds what one call may allocate, checked before
anything is allocated.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import Any

import numpy as np
from scwork._rounding import round_up

from scwork.errors import ConfigError

__all__ = ["release_buffers", "SCRATCH_LIMIT_ENV", "scratch_limit_bytes"]


# Large buffers come from _POOL (see _BufferPool), aligned to a huge page.
_HUGE_PAGE = 1 << 21
def _pool_max_bytes() -> int:
    """An eighth of the physical memory, within [512 MiB, 4 GiB].

    Large inputs (68 M ids: 0.8 GB of CSR and 0.5 GB of naive-view lists per call)
    need more than 512 MiB to be recycled; without it every call faults its buffers
    in again, which on a loaded machine costs more system time than the kernels.
    """
    try:
        phys = int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        phys = 8 << 30
    return max(1 << 29, min(4 << 30, phys // 8))


_POOL_MAX_BYTES = _pool_max_bytes()
_POOL_MAX_BUFFERS = 6


class _BufferPool:
    """Large buffers of finished calls, handed to the next calls instead of fresh memory.

    Why: fresh memory is faulted in and zeroed by the kernel on first touch; for the
    ~12 bytes per id of CSR buffers a call returns that costs about as much as the
    kernels that fill them (and with several threads, unmapping freed buffers takes
    TLB shootdowns). So buffers are recycled: internal scratch at the end of each
    call, CSR buffers once no array views them any more (a finalizer on the array
    that owns the views; numpy collapses view chains onto it because its own base is
    not an array). Every slot of a CSR buffer is rewritten by each call, so reuse
    never shows old data. At most ``_POOL_MAX_BUFFERS`` buffers and
    ``_POOL_MAX_BYTES`` are kept (the oldest go first); :meth:`clear` drops them.

    Fresh allocations are aligned to 2 MiB so that Linux backs them with
    transparent huge pages (numpy asks for them on allocations of 4 MiB or more):
    one fault per 2 MiB instead of per 4 KiB.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._free: list[np.ndarray] = []
        # Returned buffers land here first: deque.append is atomic and takes no lock,
        # so a finalizer run by the garbage collector inside a locked section (any
        # allocation can trigger one) cannot deadlock.
        self._returned: collections.deque = collections.deque()

    def _drain(self) -> None:
        """Move returned buffers to the free list, within the limits (call with the lock)."""
        while self._returned:
            self._free.append(self._returned.popleft())
        while len(self._free) > _POOL_MAX_BUFFERS or sum(b.size for b in self._free) > _POOL_MAX_BYTES:
            self._free.pop(0)

    def take(self, nbytes: int, zero: bool = False) -> np.ndarray:
        """A uint8 buffer of at least ``nbytes`` (zeroed if ``zero``), recycled if one fits."""
        nbytes = max(64, int(nbytes))
        with self._lock:
            self._drain()
            fits = [i for i, buf in enumerate(self._free) if nbytes <= buf.size <= max(2 * nbytes, nbytes + _HUGE_PAGE)]
            buf = self._free.pop(min(fits, key=lambda i: self._free[i].size)) if fits else None
            if buf is None:
                # A free buffer just short of this size is most likely this one's own, from
                # a smaller batch (the next shard of a dataset, a step with more ids): the
                # new one replaces it. Kept, it would hold memory no later request of this
                # size can use (a run of 8 shards growing in turn kept 130 MB of them).
                self._free = [b for b in self._free if not nbytes // 2 <= b.size < nbytes]
        if buf is not None:
            if zero:
                buf[:nbytes] = 0
            return buf
        align = _HUGE_PAGE if nbytes >= _HUGE_PAGE else 64
        # 4-byte words: the views are 4 or 8 bytes wide (and np.empty's tests fill them)
        raw = (np.zeros if zero else np.empty)((nbytes + align) // 4 + 1, np.float32).view(np.uint8)
        start = -raw.ctypes.data % align
        return raw[start:start + nbytes]

    def give(self, buf: np.ndarray) -> None:
        """Return ``buf`` (from :meth:`take`) for reuse; safe from a finalizer."""
        if buf.size >= _HUGE_PAGE:                  # small ones: malloc recycles them well enough
            self._returned.append(buf)

    @property
    def free(self) -> list[np.ndarray]:
        """The buffers ready for reuse (returned ones included)."""
        with self._lock:
            self._drain()
            return list(self._free)

    def clear(self) -> None:
        """Drop every cached buffer (their memory goes back to the system)."""
        with self._lock:
            self._returned.clear()
            self._free.clear()


_POOL = _BufferPool()


# What finished statistics calls leave that nobody reads any more (their jobs, with their
# counters and tables, and task lists): kept until the next call frees them while its
# workers run its slices (:func:`free_leftovers` is one of its overlapped steps), not on
# the calling thread at the end of the call, after the last task. About a thousand
# small objects and arrays, cold in the cache by then. They hold no pooled buffer and
# no batch.
_LEFTOVERS: list = []


def keep_until_next_call(leftovers) -> None:
    """Hold ``leftovers`` until the next engine call's :func:`free_leftovers`."""
    _LEFTOVERS.append(leftovers)


def free_leftovers() -> None:
    """Free what :func:`keep_until_next_call` holds (list pops are atomic: another thread may free too)."""
    while _LEFTOVERS:
        try:
            _LEFTOVERS.pop()
        except IndexError:                     # another thread took the last one meanwhile
            break


def release_buffers() -> None:
    """Drop the buffers the engine keeps for reuse; their memory goes back to the system.

    :func:`preprocess` and :func:`compute_stats` recycle the large buffers of
    finished calls (up to an eighth of the memory, 512 MiB to 4 GiB; CSR buffers once
    no array uses them) because
    fresh memory is slow to fault in. Call this to shrink the process after a burst
    of calls.
    """
    free_leftovers()
    _POOL.clear()


def _layout(specs: list[tuple[int, Any]]) -> tuple[list[int], int]:
    """Byte offsets (64-byte aligned: no false sharing between threads) and total size."""
    offsets = []
    total = 0
    for length, dtype in specs:
        total = round_up(total, 64)
        offsets.append(total)
        total += max(1, int(length)) * _itemsize(dtype)
    return offsets, total


def _itemsize(dtype) -> int:
    """``np.dtype(dtype).itemsize``, kept per dtype (every call lays out a few dozen arrays)."""
    size = _ITEMSIZES.get(dtype)
    if size is None:
        size = _ITEMSIZES[dtype] = np.dtype(dtype).itemsize
    return size


_ITEMSIZES: dict = {}


def _views(buf: np.ndarray, specs: list[tuple[int, Any]], offsets: list[int]) -> list[np.ndarray]:
    return [buf[o:o + max(1, int(n)) * _itemsize(dt)].view(dt) for (n, dt), o in zip(specs, offsets)]


def _carve(specs: list[tuple[int, Any]], zero: bool = False) -> tuple[list[np.ndarray], np.ndarray]:
    """1-D arrays ``(length, dtype)``, views of one pooled buffer; give the buffer back after use."""
    offsets, total = _layout(specs)
    buf = _POOL.take(total, zero)
    return _views(buf, specs, offsets), buf


def _carve_owned(specs: list[tuple[int, Any]]) -> list[np.ndarray]:
    """As :func:`_carve`, for arrays handed to the caller: the buffer returns to the pool
    when the last of them (and of their views) is gone."""
    offsets, total = _layout(specs)
    buf = _POOL.take(total)
    owner = np.frombuffer(memoryview(buf), np.uint8)      # its base is a memoryview: views stop here
    weakref.finalize(owner, _POOL.give, buf).atexit = False
    return _views(owner, specs, offsets)


# Memory the engine may allocate for one call (bytes), unless SCWORK_MAX_SCRATCH_BYTES
# says otherwise; the default is the machine's physical memory. A topology such as
# Topology(10**6, 4) needs G * S * P per-partition counters per stack (128 TB): the
# estimate refuses it before numpy tries.
SCRATCH_LIMIT_ENV = "SCWORK_MAX_SCRATCH_BYTES"


def scratch_limit_bytes() -> int:
    """The scratch budget of one :func:`compute_stats` / :func:`preprocess` call, in bytes.

    ``SCWORK_MAX_SCRATCH_BYTES`` (an integer number of bytes) if set, else the
    machine's physical memory, or what the process's data-size limit still allows if
    that is less.
    """
    text = os.environ.get(SCRATCH_LIMIT_ENV)
    if text is not None:
        if not text.strip().isascii() or not text.strip().isdigit() or len(text.strip()) > 30:
            raise ConfigError(f"{SCRATCH_LIMIT_ENV}={text[:40]!r} must be a number of bytes (ASCII digits)")
        return int(text.strip())
    global _PHYSICAL_MEMORY
    if _PHYSICAL_MEMORY is None:                            # the machine's: read once
        try:
            _PHYSICAL_MEMORY = int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):      # no sysconf: assume 64 GiB
            _PHYSICAL_MEMORY = 64 << 30
    return min(_PHYSICAL_MEMORY, _data_limit_headroom())


def _data_limit_headroom() -> int:
    """Bytes the process may still map under its data-size limit (``ulimit -d``, RLIMIT_DATA, which
    counts numpy's arrays): unlimited (as usual) costs one ``getrlimit``; a finite limit, less what
    the process has mapped already (``VmData``), is what a call may allocate before numpy's
    MemoryError, so the budget check says so first, as a typed error."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_DATA)[0]
    except (ImportError, OSError, ValueError, AttributeError):    # not on this platform
        return 1 << 62
    if soft == resource.RLIM_INFINITY or soft < 0:
        return 1 << 62
    try:
        with open("/proc/self/status") as status:
            used = next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:")), 0)
    except (OSError, ValueError, IndexError):
        used = 0
    return max(0, soft - used)


_PHYSICAL_MEMORY: int | None = None
