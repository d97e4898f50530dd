"""The result of :func:`scwork.collectives.execute`: :class:`Execution`.

Three of its attributes may be given as a :class:`Later`, computed when first
read: the per-link tables (a :func:`~scwork.collectives.cost` call that most
callers never read) and the buffers of a fused all-reduce with several groups
(a nodes x elements array; see :mod:`scwork.collectives._fused`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scwork.collectives.schedule import Schedule

__all__ = ["Execution", "Later"]


@dataclass
class Execution:
    """Outcome of :func:`~scwork.collectives.execute`.

    Attributes
    ----------
    schedule : Schedule
    buffers : ndarray, shape (num_nodes, num_elements)
        Every node's vector at the end (all-reduce: the sum everywhere;
        reduce-scatter: the sum on the node's owned ranges; all-gather: the
        gathered vector). Working dtype: int64 for integers, float32/float64 kept.
        An all-reduce run by the numba engine whose nodes end bitwise equal
        within each group (``consistent``) keeps one vector per group: then
        ``buffers`` is a read-only view in which every node's row is its
        group's vector (one group: ``numpy.broadcast_to`` of it, no copy;
        several: an array built on first access). Copy it
        (``numpy.array(run.buffers)``) to write into it.
    reference : ndarray, shape (num_groups, num_elements) or (num_groups, len(verified_elements))
        What the buffers must hold: node ``n`` must hold ``reference[group[n]]``
        (reduce-scatter: on its owned ranges only). Float64 for float data.
        Under sampled verification only the columns of ``verified_elements``
        (:func:`reference_result` gives the whole of it).
    group : ndarray of int, shape (num_nodes,)
        Independent collective each node takes part in (all 0 unless ``dims``).
    max_error : float
        Largest absolute deviation from the reference where a value is expected
        (among the verified nodes and elements).
    conflicts : list of (step, link, messages)
        Link conflicts (two or more messages on one directed link in one step).
    utilisation : xarray.DataArray
        Busy time / step time per (step, link), from the alpha-beta model
        (:func:`~scwork.collectives.cost` with ``per_link=True``; computed when
        first read).
    link_bytes : xarray.DataArray
        Bytes per (step, link) (computed when first read, with ``utilisation``).
    received : list of ndarray or None
        All-to-all only: for node j, the blocks j of every node, in node order.
    consistent : bool
        All-reduce: every (verified) node holds bitwise the same values as the
        first node of its group (on the verified elements; the fused
        all-reduce compares every node and element).
    verification : {"full", "sample"}
        Whether every node and element was compared with the reference, or a
        sample (see :func:`execute`'s ``verify``).
    verified_nodes : ndarray of int or None
        Nodes compared with the reference (sorted; every node under "full").
    verified_elements : ndarray of int or None
        Elements compared (sorted), or None for all of them.
    """

    schedule: Schedule
    buffers: np.ndarray
    reference: np.ndarray
    group: np.ndarray
    max_error: float
    conflicts: list
    utilisation: object = None
    link_bytes: object = None
    received: list | None = None
    consistent: bool = True
    verification: str = "full"
    verified_nodes: np.ndarray | None = None
    verified_elements: np.ndarray | None = None


class Later:
    """A value computed when first read (an :class:`Execution` attribute that costs more than it may be worth)."""

    def __init__(self, compute):
        self._compute = compute

    def get(self):
        if self._compute is not None:
            self._value, self._compute = self._compute(), None
        return self._value


def _deferrable(name: str) -> property:
    key = "_" + name

    def get(self):
        value = self.__dict__[key]
        if isinstance(value, Later):
            value = self.__dict__[key] = value.get()
        return value

    def put(self, value) -> None:
        self.__dict__[key] = value

    return property(get, put, doc=f"See :class:`Execution` ({name}).")


# Properties over three dataclass fields (set after the decorator, which would
# otherwise take them for the fields' defaults): the constructor still takes
# them, and a value given as a :class:`Later` is computed on first read. ``execute``
# defers the per-link tables (a cost() call) and the buffers of a fused
# all-reduce with several groups (a nodes x elements array).
for _name in ("buffers", "utilisation", "link_bytes"):
    setattr(Execution, _name, _deferrable(_name))


def _state(self) -> dict:
    # Pickles and copies hold values, not the closures that compute them.
    return {key: value.get() if isinstance(value, Later) else value for key, value in self.__dict__.items()}


Execution.__getstate__ = _state

# Documented and pickled as part of the module that returns it.
Execution.__module__ = "scwork.collectives.execute"
