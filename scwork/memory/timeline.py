"""HBM over one training step: allocation intervals, usage, peak, what is live at the peak.

One step, in program order, is a sequence of *events*:

1. SparseCore forward: one event per serialization slot (one event when nothing is
   serialized), see :mod:`scwork.memory.hbm` for the serialization model;
2. TensorCore forward;
3. TensorCore backward;
4. SparseCore backward: one event per serialization slot, in the same order.

Each buffer is an :class:`Interval` ``[start, end)`` of event indices (``end``
exclusive), with the same span in modelled time ``[start_s, end_s)``:

========================== ================================================== ======================
interval                   live                                               category
========================== ================================================== ======================
table / slots of a table   the whole step                                     tables, optimizer_slots
dense weights, constants   the whole step                                     dense_weights, constants
prefetched input k         the whole step (``maximum_parallel_iterations``)   prefetch
SC forward stack of stack  its SC forward slot(s)                             sc_forward_stack
staged gather operand      its SC forward slot(s) (if staged in HBM)          staged_gather_operands
activations of stack       its SC forward start .. end of TensorCore forward  embedding_activations
TensorCore activations     TensorCore forward .. TensorCore backward          tensorcore_activations
gradients of stack         TensorCore backward .. end of its SC backward      embedding_gradients
SC backward stack of stack its SC backward slot(s)                            sc_backward_stack
========================== ================================================== ======================

A concurrent (not serialized) stack is live through every slot of its phase; a
serialized one only in its own slot. Buffers of zero bytes are left out.

Modelled time is an HBM-traffic lower bound, not a performance prediction: each
event lasts (bytes it moves) / HBM bandwidth. SparseCore forward of a stack moves
its gathered rows at the limits (``sparsecores_per_chip * U * LRC * fw * itemsize``),
its activations and its CSR input; backward moves the gradients, reads and writes
the rows and slots (``2 * (1 + slots)`` times the gathered rows) and the CSR input;
the concurrent stacks' traffic is spread evenly over the slots. TensorCore forward
reads dense weights, TensorCore activations and embedding activations; backward
reads the weights twice. The cost of lost parallelism under serialization is not
modelled.

Examples
--------
>>> import scwork
>>> from scwork.sharding import TableSpec
>>> tables = [TableSpec(f"t{i}", 10**5, 32, max_ids_per_partition=64) for i in range(3)]
>>> tl = step_timeline(tables, scwork.Topology.for_chip("v5p", num_chips=2), batch_size=2048,
...               stacking=None, num_serialized_tables=3)
>>> [e.name for e in tl.events][:4]
['SC forward slot 0', 'SC forward slot 1', 'SC forward slot 2', 'TensorCore forward']
>>> tl.peak_event.name
'SC backward slot 0'
>>> [iv.name for iv in tl.live_at_peak()][:2]
['table t0', 'table t1']
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import numpy as np

from scwork.memory._hbm_numbers import HbmNumbers, hbm_numbers
from scwork.memory._model import CATEGORIES, Knobs, Model
from scwork.memory._resolve import resolve

__all__ = ["Interval", "Event", "Timeline", "step_timeline", "CATEGORIES"]

_SORT_KEYS = ("bytes", "waste_bytes", "name", "category", "start")


@dataclass(frozen=True)
class Event:
    """One step of the program order.

    Attributes
    ----------
    index : int
        Position in program order (0-based).
    name : str
        e.g. ``"SC forward slot 1"``, ``"TensorCore backward"``.
    phase : {"sc_forward", "tc_forward", "tc_backward", "sc_backward"}
    start_s, end_s : float
        Modelled time span (seconds, HBM-traffic lower bound).
    """

    index: int
    name: str
    phase: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Interval:
    """One HBM allocation over part of the step (bytes per chip).

    Attributes
    ----------
    name : str
        e.g. ``"table user"``, ``"SC forward stack t0_t1"``.
    category : str
        One of :data:`CATEGORIES`.
    bytes : int
        Size per chip.
    start, end : int
        Events ``[start, end)`` in program order (``end`` exclusive).
    start_s, end_s : float
        The same span in modelled time.
    stack, table : str or None
        The stack / table it belongs to, if any.
    waste_bytes : float
        Bytes of it that are padding (rows padded to 32-byte lines, vocabulary to
        ``8 * P``, limits to multiples of 8).
    """

    name: str
    category: str
    bytes: int
    start: int
    end: int
    start_s: float
    end_s: float
    stack: str | None
    table: str | None
    waste_bytes: float

    def live(self, event: int) -> bool:
        """True if the buffer is allocated during ``event``."""
        return self.start <= event < self.end


class Timeline:
    """HBM of one chip over one training step. Build it with :func:`step_timeline` or
    :attr:`MemoryReport.timeline <scwork.memory.MemoryReport.timeline>`.

    Attributes
    ----------
    events : tuple of Event
    intervals : tuple of Interval
    usage_bytes : numpy.ndarray
        Bytes live in each event (program order).
    usage_by_category : numpy.ndarray
        ``(event, category)`` bytes live.
    capacity_bytes, usable_bytes : int
        HBM per chip and HBM after headroom.
    """

    def __init__(self, hbm: HbmNumbers, knobs: Knobs, model: Model | None = None):
        self._hbm = hbm
        self._knobs = knobs
        self._model = model
        self.events: tuple[Event, ...] = tuple(
            Event(i, hbm.ev_name[i], hbm.ev_phase[i], float(hbm.ev_start_s[i]), float(hbm.ev_end_s[i]))
            for i in range(hbm.num_events))
        s, e = hbm.ev_start_s, hbm.ev_end_s
        self.intervals: tuple[Interval, ...] = tuple(
            Interval(hbm.iv_name[j], CATEGORIES[hbm.iv_category[j]], int(hbm.iv_bytes[j]), int(hbm.iv_start[j]),
                     int(hbm.iv_end[j]), float(s[hbm.iv_start[j]]), float(e[hbm.iv_end[j] - 1]),
                     hbm.iv_stack[j], hbm.iv_table[j], float(hbm.iv_waste[j]))
            for j in range(len(hbm.iv_name)))
        self.usage_bytes = hbm.usage
        self.usage_by_category = hbm.usage_by_category
        self.capacity_bytes = int(hbm.capacity)
        self.usable_bytes = int(hbm.usable)

    # -- peak ------------------------------------------------------------------------
    @property
    def peak_bytes(self) -> int:
        """Largest amount live at once."""
        return int(self.usage_bytes.max())

    @property
    def peak_event(self) -> Event:
        """The first event where the peak is reached."""
        return self.events[int(self.usage_bytes.argmax())]

    @property
    def fits(self) -> bool:
        """``peak_bytes <= usable_bytes``."""
        return self.peak_bytes <= self.usable_bytes

    @property
    def duration_s(self) -> float:
        """Modelled length of the step."""
        return self.events[-1].end_s

    @property
    def num_serialized_slots(self) -> int:
        """Events of each SparseCore phase (1: everything concurrent)."""
        return self._hbm.num_slots

    @property
    def serialized_stacks(self) -> tuple[str, ...]:
        """Stacks that run one at a time, in order."""
        if self._model is None:
            return ()
        return tuple(self._model.stacks[i].name for i in self._hbm.chain)

    def _event_index(self, event: int | str | Event) -> int:
        if isinstance(event, Event):
            return event.index
        if isinstance(event, str):
            for ev in self.events:
                if ev.name == event:
                    return ev.index
            raise KeyError(f"no event {event!r}; events: {[e.name for e in self.events]}")
        index = int(event)
        if not 0 <= index < len(self.events):
            raise IndexError(f"event {index} out of range 0..{len(self.events) - 1}")
        return index

    def live_at(self, event: int | str | Event, *, sort_by: str = "bytes", descending: bool = True) -> list[Interval]:
        """Buffers allocated during ``event``, sorted.

        Parameters
        ----------
        event : int, str or Event
            Index, name or object.
        sort_by : {"bytes", "waste_bytes", "name", "category", "start"}
        descending : bool, default True
        """
        if sort_by not in _SORT_KEYS:
            raise ValueError(f"sort_by must be one of {_SORT_KEYS}, got {sort_by!r}")
        index = self._event_index(event)
        live = [iv for iv in self.intervals if iv.live(index)]
        return sorted(live, key=lambda iv: getattr(iv, sort_by), reverse=descending)

    def live_at_peak(self, *, sort_by: str = "bytes", descending: bool = True) -> list[Interval]:
        """:meth:`live_at` the peak event: what to shrink to lower the peak."""
        return self.live_at(self.peak_event, sort_by=sort_by, descending=descending)

    def category_bytes_at_peak(self) -> dict[str, int]:
        """Bytes of each category live at the peak."""
        row = self.usage_by_category[self.peak_event.index]
        return {c: int(row[i]) for i, c in enumerate(CATEGORIES)}

    # -- xarray views ----------------------------------------------------------------
    def usage(self):
        """Usage over program order.

        Returns
        -------
        xarray.Dataset
            Dim ``event`` (coords ``event_name``, ``phase``, ``start_s``, ``end_s``) and
            ``category``; variables ``usage_bytes`` (event) and
            ``usage_by_category`` (event, category), in bytes; attrs with the peak,
            capacity and usable HBM.

        Examples
        --------
        >>> import scwork
        >>> from scwork.sharding import TableSpec
        >>> tl = step_timeline([TableSpec("t", 1000, 8, max_ids_per_partition=8)],
        ...               scwork.Topology.for_chip("v5p", num_chips=1), batch_size=64)
        >>> ds = tl.usage()
        >>> ds["usage_bytes"].dims, int(ds["usage_bytes"].max()) == tl.peak_bytes
        (('event',), True)
        """
        import xarray as xr

        return xr.Dataset(
            {
                "usage_bytes": ("event", self.usage_bytes,
                                {"long_name": "HBM live per chip", "units": "bytes"}),
                "usage_by_category": (("event", "category"), self.usage_by_category,
                                      {"long_name": "HBM live per chip by category", "units": "bytes"}),
            },
            coords=self._event_coords(),
            attrs=self._attrs(),
        )

    def usage_over_time(self, num: int | None = None):
        """Usage over modelled time.

        Parameters
        ----------
        num : int, optional
            None (default): the exact step function, one ``time`` point per event
            start plus the step's end (usage holds until the next point).
            An int: ``num`` evenly spaced samples over the step.

        Returns
        -------
        xarray.Dataset
            Dim ``time`` (seconds); ``usage_bytes`` (time) and ``usage_by_category``
            (time, category), bytes. Events of zero modelled length do not show here
            (use :meth:`usage`).
        """
        import xarray as xr

        starts = np.array([e.start_s for e in self.events])
        ends = np.array([e.end_s for e in self.events])
        end = self.duration_s
        if num is None:
            index = np.flatnonzero(ends > starts)
            if index.size == 0:  # nothing moves any byte: one point
                index = np.array([self.peak_event.index])
            times = np.append(starts[index], end)
            index = np.append(index, index[-1])
        else:
            if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 2:
                raise ValueError(f"num must be an int >= 2, got {num!r}")
            times = np.linspace(0.0, end, int(num))
            # the event containing t: the first whose end is after t (zero-length events never are)
            index = np.clip(np.searchsorted(ends, times, side="right"), 0, len(self.events) - 1)
        return xr.Dataset(
            {
                "usage_bytes": ("time", self.usage_bytes[index], {"long_name": "HBM live per chip", "units": "bytes"}),
                "usage_by_category": (("time", "category"), self.usage_by_category[index],
                                      {"long_name": "HBM live per chip by category", "units": "bytes"}),
            },
            coords={
                "time": ("time", times, {"long_name": "modelled time (HBM-traffic lower bound)", "units": "s"}),
                "event": ("time", index, {"long_name": "event index in program order"}),
                "category": ("category", np.array(CATEGORIES, dtype=object)),
            },
            attrs=self._attrs(),
        )

    def intervals_dataset(self, *, sort_by: str | None = None, descending: bool = True):
        """Every interval as a row of dim ``buffer`` (optionally sorted)."""
        import xarray as xr

        ivs = list(self.intervals)
        if sort_by is not None:
            if sort_by not in _SORT_KEYS:
                raise ValueError(f"sort_by must be one of {_SORT_KEYS}, got {sort_by!r}")
            ivs.sort(key=lambda iv: getattr(iv, sort_by), reverse=descending)
        peak = self.peak_event.index
        return xr.Dataset(
            {
                "bytes": ("buffer", np.array([iv.bytes for iv in ivs], np.int64),
                          {"long_name": "size per chip", "units": "bytes"}),
                "waste_bytes": ("buffer", np.array([iv.waste_bytes for iv in ivs]),
                                {"long_name": "padding bytes", "units": "bytes"}),
                "start": ("buffer", np.array([iv.start for iv in ivs], np.int64),
                          {"long_name": "first event (program order)", "units": "event"}),
                "end": ("buffer", np.array([iv.end for iv in ivs], np.int64),
                        {"long_name": "end event, exclusive (program order)", "units": "event"}),
                "start_s": ("buffer", np.array([iv.start_s for iv in ivs]), {"long_name": "start", "units": "s"}),
                "end_s": ("buffer", np.array([iv.end_s for iv in ivs]), {"long_name": "end", "units": "s"}),
                "live_at_peak": ("buffer", np.array([iv.live(peak) for iv in ivs]),
                                 {"long_name": "allocated during the peak event", "units": "1"}),
            },
            coords={
                "buffer": ("buffer", np.array([iv.name for iv in ivs], dtype=object), {"long_name": "allocation"}),
                "category": ("buffer", np.array([iv.category for iv in ivs], dtype=object)),
                "stack": ("buffer", np.array([iv.stack or "" for iv in ivs], dtype=object)),
                "table": ("buffer", np.array([iv.table or "" for iv in ivs], dtype=object)),
            },
            attrs=self._attrs(),
        )

    def to_dataset(self):
        """:meth:`usage` and :meth:`intervals_dataset` (variables prefixed ``buffer_``) in one dataset."""
        import xarray as xr

        ivs = self.intervals_dataset()
        ivs = ivs.rename({"category": "buffer_category", "stack": "buffer_stack", "table": "buffer_table",
                          **{name: f"buffer_{name}" for name in ivs.data_vars}})
        return xr.merge([self.usage(), ivs], combine_attrs="override")

    def _event_coords(self) -> dict:
        return {
            "event": ("event", np.arange(len(self.events)), {"long_name": "event index in program order"}),
            "event_name": ("event", np.array([e.name for e in self.events], dtype=object)),
            "phase": ("event", np.array([e.phase for e in self.events], dtype=object)),
            "start_s": ("event", np.array([e.start_s for e in self.events]), {"units": "s"}),
            "end_s": ("event", np.array([e.end_s for e in self.events]), {"units": "s"}),
            "category": ("category", np.array(CATEGORIES, dtype=object), {"long_name": "HBM use"}),
        }

    def _attrs(self) -> dict:
        return {"units": "bytes", "peak_bytes": self.peak_bytes, "peak_event": self.peak_event.name,
                "capacity_bytes": self.capacity_bytes, "usable_bytes": self.usable_bytes, "fits": int(self.fits),
                "duration_s": self.duration_s, "serialized_stacks": list(self.serialized_stacks)}

    # -- display -----------------------------------------------------------------------
    def __repr__(self) -> str:
        from scwork.memory._diagnose import fmt_bytes

        return (f"Timeline({len(self.events)} events, {len(self.intervals)} buffers, peak "
                f"{fmt_bytes(self.peak_bytes)} at {self.peak_event.name!r}, usable {fmt_bytes(self.usable_bytes)})")

    def _repr_html_(self) -> str:
        from scwork.memory._diagnose import fmt_bytes

        rows = "".join(
            f"<tr><td>{html.escape(e.name)}</td><td style='text-align:right'>{fmt_bytes(self.usage_bytes[e.index])}"
            f"</td></tr>" for e in self.events)
        top = "".join(f"<li>{html.escape(iv.name)}: {fmt_bytes(iv.bytes)}</li>" for iv in self.live_at_peak()[:8])
        return (f"<div><b>{html.escape(repr(self))}</b><table><tr><th>event</th><th>live</th></tr>{rows}</table>"
                f"<p>Largest buffers at the peak:</p><ul>{top}</ul></div>")


def step_timeline(model: Any, topology: Any, **kwargs) -> Timeline:
    """The HBM timeline of one training step.

    Parameters
    ----------
    model, topology
        As in :func:`scwork.memory.plan`.
    **kwargs
        The keywords of :func:`scwork.memory.plan` (``batch_size`` is required).

    Returns
    -------
    Timeline

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import TableSpec
    >>> t = TableSpec("t", 1000, 8, max_ids_per_partition=8)
    >>> tl = step_timeline([t], scwork.Topology.for_chip("v5p", num_chips=1), batch_size=64,
    ...               dense_weights_bytes=1000)
    >>> tl.peak_event.name, tl.peak_bytes
    ('SC backward', 49768)
    >>> [(iv.name, iv.bytes) for iv in tl.live_at_peak(sort_by="bytes")]  # doctest: +NORMALIZE_WHITESPACE
    [('table t', 32768), ('SC backward stack t', 12288), ('gradients t', 2048),
     ('prefetched input 0', 1664), ('dense weights', 1000)]

    The peak, by hand (1 chip, 4 SparseCores, ``P = 4``, 16 samples per SparseCore):
    table ``round_up(1000, 32) * 8 * 4 = 32768``; backward stack ``4 SCs * 3 * 8 * 8 * 4
    (LRC = P) * 4 = 12288``; gradients ``4 * 16 * 8 * 4 = 2048``; CSR input ``4 * (8 * 4 +
    8 * 4 * 12) = 1664``; dense weights 1000.
    """
    m, k = resolve(model, topology, **kwargs)
    return Timeline(hbm_numbers(m, k), k, m)
