"""Collectives engine: how an all-reduce moves data over a TPU-style network.

Three layers, each usable on its own:

1. **Networks** (:class:`Network`): rings, lines, 2-D/3-D tori and meshes, grids
   wrapping in some dimensions only, optionally several cores per chip; directed
   links with bandwidth and latency per link class (ICI defaults from the
   hardware catalog).
2. **Schedules** (:class:`Schedule`): an algorithm as steps of
   :class:`Transfer` s, held compactly (a rule per phase that writes out any
   step on demand) so that whole pods (9,216 chips) are costed in seconds. The algorithms of the
   multi-dimensional all-reduce patent [md-allreduce]: single path, pincer, rotated pincer, improved
   rotated pincer, dimension-by-dimension and multi-color all-reduce on tori,
   mesh loops through two cores per chip; and the standard ring baselines,
   reduce-scatter, all-gather, all-to-all.
3. **Execution and cost**: :func:`execute` runs a schedule on real numpy data and
   checks every node's result (naming the step, node and shard when wrong),
   detects link conflicts and reports link utilisation; :func:`cost` gives the
   alpha-beta time per step (optionally pipelined), algbw and busbw
   ([nccl-tests]), and with ``link_summary=True`` per-link totals and per-step
   utilisation; :func:`phase_summary` gives steps, bytes and the busiest link
   per phase and dimension; :func:`frames` records everything a step-by-step
   drawing needs. Costs and summaries stream over the steps in bounded memory;
   execution and drawings need the explicit transfers (up to
   ``schedule.MAX_EXPLICIT_TRANSFERS``).

Examples
--------
>>> import numpy as np
>>> from scwork.collectives import Network, multi_color_all_reduce, execute, cost
>>> net = Network.torus((4, 4))
>>> sched = multi_color_all_reduce(net)
>>> sched.num_steps, sched.conflict_free
(12, True)
>>> data = np.random.default_rng(0).integers(0, 100, size=(16, 1000))
>>> run = execute(sched, data)
>>> bool((run.buffers == data.sum(axis=0)).all())
True
>>> c = cost(sched, nbytes=64 * 2**20)
>>> round(float(c.total_time) * 1e6)  # microseconds on v5e ICI (4.5e10 B/s, 1 us per hop)
711
"""

from __future__ import annotations

from scwork.errors import ScheduleError
from scwork.collectives.algorithms import (
    ALGORITHMS,
    all_gather,
    all_to_all,
    build,
    improved_rotated_pincer,
    mesh_loop_all_reduce,
    multi_color_all_reduce,
    multi_dim_all_reduce,
    pincer,
    reduce_scatter,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    rotated_pincer,
    single_path,
)
from scwork.collectives.cost import (
    SCALING_BOOK_V5E_EXAMPLE,
    bandwidths,
    bus_factor,
    cost,
    phase_summary,
    scaling_book_time,
)
from scwork.collectives.execute import Execution, execute, frames, reference_result
from scwork.collectives.network import (
    DEFAULT_CHIP,
    ICI_LATENCY_S,
    ON_CHIP_LATENCY_S,
    LinkClass,
    Network,
)
from scwork.collectives.schedule import (
    COLLECTIVES,
    OPS,
    PHASES,
    Schedule,
    Transfer,
    chunk_bounds,
)

__all__ = [
    # networks
    "Network", "LinkClass", "ICI_LATENCY_S", "ON_CHIP_LATENCY_S", "DEFAULT_CHIP",
    # schedules
    "Schedule", "Transfer", "PHASES", "OPS", "COLLECTIVES", "chunk_bounds",
    "single_path", "pincer", "rotated_pincer", "improved_rotated_pincer",
    "ring_all_reduce", "ring_reduce_scatter", "ring_all_gather",
    "multi_dim_all_reduce", "multi_color_all_reduce", "mesh_loop_all_reduce",
    "reduce_scatter", "all_gather", "all_to_all", "ALGORITHMS", "build",
    # execution and cost
    "execute", "Execution", "frames", "reference_result",
    "cost", "phase_summary", "bus_factor", "bandwidths", "scaling_book_time", "SCALING_BOOK_V5E_EXAMPLE",
    "ScheduleError",
]

# The embedding lookup's all-to-all from data (per device pair, routed over the grid).
from scwork.collectives.embedding_a2a import (
    MAX_DEVICE_PAIRS,
    TIE_RULES,
    device_hops,
    embedding_all_to_all,
    route_all_to_all,
)

__all__ += ["MAX_DEVICE_PAIRS", "TIE_RULES", "device_hops", "embedding_all_to_all", "route_all_to_all"]
