"""What the all-reduce stepper draws, prepared from the collectives engine's results.

Node positions for rings, meshes and tori (3-D tori as a grid of planes), and per step
the arrows, buffer states and link loads of the executed schedule.

No model logic: schedules, frames and costs come from :mod:`scwork.collectives`; this module
only turns them into drawing coordinates and labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scwork import collectives
from scwork.collectives import Network, build
from scwork.widgets import _bokeh

__all__ = ["ALGORITHM_CHOICES", "SUMMARY_MAX_RECORDS", "TOPOLOGY_KINDS", "phase_summary_html", "schedule_for"]

#: Most transfer records the stepper summarises per algorithm above its node limit
#: (a few seconds of streaming); larger schedules get a pointer to the command line.
SUMMARY_MAX_RECORDS = 2**25


#: Algorithms offered in the dropdowns: name -> label. Names are keys of the engine's
#: :data:`~scwork.collectives.ALGORITHMS` or public builders of :mod:`scwork.collectives`
#: (called with their defaults). Any other ``ALGORITHMS`` key is accepted as a trait value.
ALGORITHM_CHOICES: dict[str, str] = {
    "single_path": "single path (chain there and back)",
    "pincer": "pincer (two chains, whole vector)",
    "rotated_pincer": "rotated pincer (one pincer per pair)",
    "improved_rotated_pincer": "improved rotated pincer (even N)",
    "ring": "ring all-reduce, one way",
    "ring_all_reduce": "ring all-reduce, two rings",
    "multi_dim_all_reduce": "dimension by dimension (1 color)",
    "multi_color_all_reduce": "multi-color (1 color per dim)",
    "mesh_loop_all_reduce": "mesh loops (2 cores per chip)",
    "reduce_scatter": "reduce-scatter only",
    "all_gather": "all-gather only",
}

# Builders called by name from scwork.collectives (not keys of ALGORITHMS).
_PUBLIC_BUILDERS = ("ring_all_reduce", "multi_dim_all_reduce", "multi_color_all_reduce",
                    "mesh_loop_all_reduce", "ring_reduce_scatter", "ring_all_gather")

#: Topology kinds: value -> label. The kind follows from the number of dimensions and
#: which of them wrap; choosing a kind sets the wraparound flags (and a default shape
#: when the number of dimensions changes).
TOPOLOGY_KINDS: dict[str, str] = {
    "ring": "ring", "line": "line",
    "2d_torus": "2-D torus", "2d_mesh": "2-D mesh", "2d_grid": "2-D, some dims wrap",
    "3d_torus": "3-D torus", "3d_mesh": "3-D mesh", "3d_grid": "3-D, some dims wrap",
}
_KIND_NDIM = {"ring": 1, "line": 1, "2d_torus": 2, "2d_mesh": 2, "2d_grid": 2,
              "3d_torus": 3, "3d_mesh": 3, "3d_grid": 3}
# Buffer states of frames.status, drawn left to right in each node's bar.
_STATES = ((3, "complete", "#238b45"), (2, "partial", "#fd8d3c"),
           (1, "own data", "#9ecae1"), (0, "empty", "#ffffff"))
# Per color: (reduce-scatter, all-gather) arrow colors.
_COLOR_PAIRS = (("#1f5fa0", "#6baed6"), ("#c0282d", "#fc9272"), ("#238b45", "#74c476"),
                ("#6a3d9a", "#b294c7"), ("#8c564b", "#c49c94"), ("#d6379a", "#f7b6d2"))
_PHASE_DASH = {"reduce_scatter": "solid", "all_gather": "dashed", "all_to_all": "dotted"}
_PHASE_BAR_COLORS = {"reduce_scatter": "#4c78a8", "all_gather": "#f58518", "mixed": "#9467bd"}
_DIM_COLORS = ("#4c78a8", "#54a24b", "#b279a2")
_ON_CHIP_COLOR = "#9d755d"


def _kind_of(shape: tuple, wraparound: tuple) -> str:
    """Topology kind named by the number of dimensions and which of them wrap."""
    if len(shape) == 1:
        return "ring" if wraparound[0] else "line"
    prefix = f"{len(shape)}d_"
    if all(wraparound):
        return prefix + "torus"
    return prefix + ("mesh" if not any(wraparound) else "grid")


def _kind_wraparound(kind: str) -> tuple[bool, ...]:
    ndim = _KIND_NDIM[kind]
    if kind in ("ring",) or kind.endswith("torus"):
        return (True,) * ndim
    if kind == "line" or kind.endswith("mesh"):
        return (False,) * ndim
    return (True,) * (ndim - 1) + (False,)  # "some dims wrap": all but the last


def schedule_for(name: str, network: Network, nbytes: int):
    """The engine's schedule of algorithm ``name`` on ``network`` for ``nbytes`` per node.

    ``name`` is a key of :data:`~scwork.collectives.ALGORITHMS` or one of the public
    builders (``ring_all_reduce``, ``multi_color_all_reduce``...).

    Raises
    ------
    ScworkError
        The engine's TopologyError / ConfigError (algorithm not valid on this network,
        unknown name, bad size).
    """
    if name in _PUBLIC_BUILDERS:
        return getattr(collectives, name)(network, nbytes=nbytes)
    return build(name, network, nbytes=nbytes)


@dataclass
class _EngineRun:
    """What the engine computed for one (network, algorithm, size)."""

    schedule: Any
    frames: Any
    cost: Any
    messages: dict
    conflicts: int


@dataclass
class _Geometry:
    """Where everything of one network is drawn (data units; chip spacing ~1)."""

    node_x: np.ndarray
    node_y: np.ndarray
    radius: float
    link_stub: np.ndarray  # drawn as stubs leaving/entering (wraparound, 3-D slices)
    link_dir: np.ndarray  # (L, 2) unit drawing direction of each ICI link
    stub_length: float
    base_links: dict
    groups: dict | None
    notes: dict | None
    labels: list
    show_labels: bool


def _geometry(network: Network, view3d: str) -> _Geometry:
    """Drawing positions: engine layout for chips, cores spread out inside their chip."""
    lay = network.layout()
    k = network.cores_per_chip
    xyz = np.stack([lay.x.values, lay.y.values, lay.z.values], axis=1)
    chip_xyz = np.zeros((network.num_chips, 3))
    np.add.at(chip_xyz, network.node_chip, xyz)
    chip_xyz /= k
    ndim = network.ndim
    axis = np.array([[1.0, 0.0], [0.0, 1.0], [0.55, 0.4]])
    notes = None
    stub_dims: tuple[int, ...] = ()
    if ndim == 3 and view3d == "slices":
        # z-slices in a block grid, read left to right then top to bottom; z links
        # are stubs pointing up-right (+z) or down-left (-z), like the projection.
        sx, sy, sz = network.shape
        cols = int(np.ceil(np.sqrt(sz)))
        gap = 1.6
        z = chip_xyz[:, 2].astype(int)
        ox, oy = (z % cols) * (sx - 1 + gap), -(z // cols) * (sy - 1 + gap)
        chip_xy = np.stack([chip_xyz[:, 0] + ox, chip_xyz[:, 1] + oy], axis=1)
        stub_dims = (2,)
        zs = np.arange(sz)
        notes = {"x": (zs % cols) * (sx - 1 + gap) - 0.5,
                 "y": -(zs // cols) * (sy - 1 + gap) + sy - 1 + 0.5,
                 "text": [f"z = {i}" for i in zs]}
    elif ndim == 3:
        # Pseudo-3-D (oblique) projection: the chips of one (x, y) column along z form a
        # short diagonal; x and y are spread so that the diagonals never touch.
        spread = (network.shape[2] - 1) * axis[2, 0] + 1.0
        chip_xy = np.stack([chip_xyz[:, 0] * spread + chip_xyz[:, 2] * axis[2, 0],
                            chip_xyz[:, 1] * spread + chip_xyz[:, 2] * axis[2, 1]], axis=1)
    else:
        chip_xy = chip_xyz[:, :2].copy()
    # Cores side by side inside the chip box, wider apart than the engine's layout so
    # on-chip arrows stay visible; chips move apart to make room for the wider boxes.
    core_spacing = min(0.4, 0.6 / max(k - 1, 1))
    if k > 1:
        chip_xy = chip_xy * (1 + (k - 1) * core_spacing)
    radius = 0.2 if k == 1 else min(0.2, 0.28 * core_spacing)
    core_dx = (network.node_core - (k - 1) / 2) * core_spacing if k > 1 else np.zeros(network.num_nodes)
    node_x = chip_xy[network.node_chip, 0] + core_dx
    node_y = chip_xy[network.node_chip, 1]

    ici = network.link_kind == "ici"
    dims = np.where(ici, network.link_dim, 0)
    link_dir = axis[dims] * np.where(ici, network.link_sign, 0)[:, None]
    link_dir /= np.maximum(np.hypot(link_dir[:, 0], link_dir[:, 1]), 1e-12)[:, None]
    # On a ring drawn as a circle the wraparound link joins neighbours: no stub.
    circle = ndim == 1 and network.wraparound[0] and network.num_chips >= 3
    link_stub = ici & ((network.link_wrap & (not circle)) | np.isin(network.link_dim, stub_dims))
    stub_length = 0.5

    sc, dc = network.link_src_chip, network.link_dst_chip
    src_node = sc * k + np.maximum(network.link_src_core, 0)
    dst_node = dc * k + np.maximum(network.link_dst_core, 0)
    p0 = np.where(ici[:, None], chip_xy[sc], np.stack([node_x[src_node], node_y[src_node]], 1))
    p1 = np.where(ici[:, None], chip_xy[dc], np.stack([node_x[dst_node], node_y[dst_node]], 1))
    direct = ~link_stub
    # Wraparound stubs are drawn as dashed base links; the z links of the slices view
    # are not (one stub per node and direction would bury the slices).
    stub = link_stub & ~np.isin(network.link_dim, stub_dims)
    out_end = p0 + link_dir * stub_length
    in_start = p1 - link_dir * stub_length
    base = {
        "x0": np.concatenate([p0[direct, 0], p0[stub, 0], in_start[stub, 0]]),
        "y0": np.concatenate([p0[direct, 1], p0[stub, 1], in_start[stub, 1]]),
        "x1": np.concatenate([p1[direct, 0], out_end[stub, 0], p1[stub, 0]]),
        "y1": np.concatenate([p1[direct, 1], out_end[stub, 1], p1[stub, 1]]),
    }
    n_stub = int(stub.sum())
    base["dash"] = ["solid"] * int(direct.sum()) + ["dashed"] * (2 * n_stub)
    # Dimension of every drawn link (-1 = on chip): the "show" filter hides the others.
    drawn_dim = np.where(ici, network.link_dim, -1).astype(np.int64)
    base["dim"] = np.concatenate([drawn_dim[direct], drawn_dim[stub], drawn_dim[stub]])
    groups = None
    if k > 1:
        groups = {"x": chip_xy[:, 0], "y": chip_xy[:, 1],
                  "width": np.full(network.num_chips, (k - 1) * core_spacing + 2 * radius + 0.12),
                  "height": np.full(network.num_chips, 2 * radius + 0.34)}
    labels = network.labels
    show = network.num_nodes <= 64 and max(len(s) for s in labels) <= 3
    return _Geometry(node_x, node_y, radius, link_stub, link_dir, stub_length, base, groups,
                     notes, labels, show)


class _StepData:
    """One algorithm's drawing data, step by step: what is drawn at a step is computed when first shown.

    The whole-run data (step times, link loads, the phase of every step, the colors
    of the schedule) is arranged at once, with array operations; the drawing of one
    frame (node fills and buffer bars) and of one step (arrows, status line, chart
    title) is built when that step is first shown and kept. A topology change then
    costs one frame's drawing instead of every step's (a ring on 128 nodes has 254
    steps and 65,000 arrow pieces).

    Parameters
    ----------
    run : _EngineRun
        The engine's schedule, frames and messages.
    network : Network
    geom : _Geometry
        Node positions and link drawing of ``network``.
    side_label : str
        How the status lines name the algorithm (``"left (pincer)"``).
    """

    def __init__(self, run, network: Network, geom: _Geometry, side_label: str):
        fr, sched = run.frames, run.schedule
        S = self.num_steps = sched.num_steps
        self._network, self._geom, self._side_label = network, geom, side_label
        self._status = fr.status.values  # (frames, nodes, shards)
        N = network.num_nodes
        # A stacked bar under every node: complete | partial | own data | empty.
        self._bar_total_width = 2.3 * geom.radius
        self.bar_static = {
            "y": np.repeat(geom.node_y - geom.radius - 0.1, 4),
            "height": np.full(4 * N, 0.11),
            "color": np.tile([c for _, _, c in _STATES], N).astype(object),
        }
        # One arrow per message (transfers of one step between the same two nodes).
        msg = self._messages = run.messages
        n_msg = len(msg["step"])
        first = np.full(n_msg, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, msg["index"], np.arange(len(msg["index"])))
        self._chunks = np.bincount(msg["index"], weights=fr.shard_stop.values - fr.shard_start.values,
                                   minlength=n_msg).astype(np.int64)
        self._color = fr.color.values[first].astype(np.int64) if n_msg else np.zeros(0, np.int64)
        self._phase = np.asarray(fr.phase.values[first] if n_msg else np.zeros(0, dtype=str), dtype=str)
        self._op = np.asarray(fr.op.values[first] if n_msg else np.zeros(0, dtype=str), dtype=str)
        self._max_bytes = float(msg["bytes"].max()) if n_msg and msg["bytes"].max() > 0 else 1.0
        # Messages come sorted by step: one slice per step.
        self._msg_offsets = np.searchsorted(msg["step"], np.arange(S + 1))
        self.step_time = fr.step_time.values
        self.cumulative = fr.cumulative_time.values
        self.utilisation = fr.utilisation.values
        self.link_bytes = fr.link_bytes.values
        self.step_phase = self._step_phases()
        self._unit, self._scale = _time_unit(float(self.cumulative[-1]) if S else 0.0)
        self.color_phases = {int(c): sorted(set(self._phase[self._color == c].tolist()), key=_phase_order)
                             for c in np.unique(self._color)}
        self._frames: dict[int, tuple] = {}
        self._arrows: dict[int, dict] = {}

    def _step_phases(self) -> list[str]:
        """The phase of every step's messages, ``"mixed"`` when they differ."""
        S, offsets = self.num_steps, self._msg_offsets
        names, codes = np.unique(self._phase, return_inverse=True)
        phases = ["mixed"] * S
        has = np.flatnonzero(offsets[1:] > offsets[:-1])
        if len(has):
            low = np.minimum.reduceat(codes, offsets[has])
            high = np.maximum.reduceat(codes, offsets[has])
            for s, lo, hi in zip(has.tolist(), low.tolist(), high.tolist()):
                if lo == hi:
                    phases[s] = str(names[lo])
        return phases

    def frame(self, f: int) -> tuple:
        """Frame ``f`` (state before step ``f + 1``): node fills, state fractions, bar x and widths."""
        if f not in self._frames:
            status = self._status[f]  # (nodes, shards)
            fractions = np.stack([(status == code).mean(axis=1) for code, _, _ in _STATES], axis=1)
            total_w = self._bar_total_width
            widths = fractions * total_w  # (N, 4)
            lefts = self._geom.node_x[:, None] - total_w / 2 + np.cumsum(widths, axis=1) - widths
            self._frames[f] = (_bokeh.ramp_colors(fractions[:, 0]), fractions,
                               (lefts + widths / 2).reshape(-1), widths.reshape(-1))
        return self._frames[f]

    def arrows(self, k: int) -> dict:
        """The arrow columns of 1-based step ``k``: one per message, two stubs for a wraparound link."""
        if k not in self._arrows:
            self._arrows[k] = self._arrows_of(np.arange(self._msg_offsets[k - 1], self._msg_offsets[k]), k)
        return self._arrows[k]

    def no_arrows(self) -> dict:
        """The arrow columns, empty (before the first step)."""
        return self._arrows_of(np.zeros(0, dtype=np.int64), 0)

    def _arrows_of(self, ids: np.ndarray, k: int) -> dict:
        """Arrow columns of the messages ``ids`` (all of step ``k``)."""
        network, geom, msg = self._network, self._geom, self._messages
        src, dst, link = msg["source"][ids], msg["destination"][ids], msg["link"][ids]
        stub = geom.link_stub[link]
        on_chip = network.link_kind[link] == "on_chip"
        offset = np.where(on_chip, 0.035, 0.07)
        trim = geom.radius + 0.03
        sx, sy, dx, dy = geom.node_x[src], geom.node_y[src], geom.node_x[dst], geom.node_y[dst]
        d = geom.link_dir[link] * geom.stub_length
        # Direct arrows node to node; wraparound (and 3-D slice) links as two stubs: one
        # leaving the source outwards, one entering the destination from outside.
        pieces = [
            (np.flatnonzero(~stub), sx, sy, dx, dy, trim, trim),
            (np.flatnonzero(stub), sx, sy, sx + d[:, 0], sy + d[:, 1], trim, 0.0),
            (np.flatnonzero(stub), dx - d[:, 0], dy - d[:, 1], dx, dy, 0.0, trim),
        ]
        cols: dict[str, list] = {name: [] for name in ("x0", "y0", "x1", "y1", "m")}
        for idx, ax, ay, bx, by, t0, t1 in pieces:
            x0, y0, x1, y1 = _bokeh.arrow_segments(ax[idx], ay[idx], bx[idx], by[idx], offset=offset[idx],
                                                   trim_start=t0, trim_end=t1)
            for name, values in zip(("x0", "y0", "x1", "y1", "m"), (x0, y0, x1, y1, idx)):
                cols[name].append(values)
        m = np.concatenate(cols["m"]).astype(np.int64)  # piece -> message of the step
        color, phase = self._color[ids][m], self._phase[ids][m]
        is_gather = (phase != "reduce_scatter").astype(int)
        pairs = np.asarray(_COLOR_PAIRS, dtype=object)
        labels = np.asarray(self._geom.labels, dtype=object)
        step_bytes = msg["bytes"][ids][m]
        return {
            "x0": np.concatenate(cols["x0"]), "y0": np.concatenate(cols["y0"]),
            "x1": np.concatenate(cols["x1"]), "y1": np.concatenate(cols["y1"]),
            "color": pairs[color % len(_COLOR_PAIRS), is_gather],
            "dash": np.array([_PHASE_DASH.get(p, "solid") for p in phase.tolist()], dtype=object),
            "width": 1.6 + 2.4 * step_bytes / self._max_bytes,
            "source": src[m], "destination": dst[m], "step": np.full(len(m), k, dtype=np.int64),
            "transfer": labels[src[m]] + " -> " + labels[dst[m]],
            "bytes": step_bytes, "chunks": self._chunks[ids][m],
            "color_index": color,
            # Dimension of the link carried on (-1 = on chip), for the "show" filter.
            "dim": np.where(on_chip, -1, network.link_dim[link]).astype(np.int64)[m],
            "phase": np.array([f"{p} / {o}" for p, o in zip(phase.tolist(), self._op[ids][m].tolist())],
                              dtype=object),
        }

    def status_line(self, k: int) -> str:
        """What step ``k`` does (0: the start), one line of HTML."""
        label = f"<b>{self._side_label}</b>"
        if k == 0:
            return f"{label} start: every node holds its own vector"
        s, S, unit, scale = k - 1, self.num_steps, self._unit, self._scale
        n_messages = int(self._msg_offsets[s + 1] - self._msg_offsets[s])
        return (f"{label} step {k} of {S}: {n_messages} messages ({self.step_phase[s].replace('_', '-')}), "
                f"busiest link {self.link_bytes[s].max():,.0f} B, step time {self.step_time[s] * scale:.3g} "
                f"{unit}, cumulative {self.cumulative[s] * scale:.4g} {unit}")

    def utilisation_title(self, k: int) -> str:
        """Title of the link-utilisation chart at step ``k`` (0: before the first step)."""
        return "before step 1: no transfers yet" if k == 0 else _utilisation_title(k, self.utilisation[k - 1])


def _percent(fraction: float) -> str:
    """``0.125`` -> ``"12.5%"``: three significant digits, so small shares do not read as 0%."""
    return f"{100 * fraction:.3g}%"


def _utilisation_title(step: int, utilisation: np.ndarray) -> str:
    """Title of the utilisation chart of 1-based ``step``: two measures, each named.

    The share of directed links that carry data in the step, and the mean busy time of
    those links as a share of the step time (the engine's utilisation: busy time /
    step time). The two differ: in a pincer step 2 of 16 links are busy (12.5%), each
    for the whole step (100%).
    """
    busy = utilisation > 0
    n_busy, n_links = int(busy.sum()), len(utilisation)
    title = (f"step {step}: {n_busy} of {n_links} directed links busy "
             f"({_percent(n_busy / n_links if n_links else 0.0)} of links)")
    if n_busy:
        title += f"; their mean busy time: {_percent(float(utilisation[busy].mean()))} of the step"
    return title


def _phase_order(phase: str) -> int:
    order = tuple(_PHASE_DASH)
    return order.index(phase) if phase in order else len(order)


def _swatch(color: str, text: str, *, border: str = "#888", dash: str | None = None,
            title: str = "") -> str:
    """A small colored square (or a line sample, for a dash style) followed by ``text``.

    ``title`` becomes the sample's tooltip.
    """
    tip = f" title='{title}'" if title else ""
    if dash is None:
        sample = (f"<span{tip} style='display:inline-block;width:12px;height:12px;background:{color};"
                  f"border:1px solid {border};margin:0 4px 0 12px;vertical-align:middle'></span>")
    else:
        sample = (f"<span{tip} style='display:inline-block;width:22px;height:0;border-top:3px {dash} {color};"
                  f"margin:0 2px 0 8px;vertical-align:middle'></span>")
    return sample + text


def _color_legend_html(color_phases: dict, label: str = "") -> str:
    """One legend entry per color of a schedule, with the shade of each of its phases.

    Colors are independent sub-collectives (e.g. one per dimension order); arrows of
    color ``i`` use ``_COLOR_PAIRS[i]``: dark for reduce-scatter, light for the other
    phases. Every entry is a ``<span class='scwork-arrow-color'>`` (tests count them).

    Parameters
    ----------
    color_phases : dict of int to list of str
        Per color index of the schedule, the phases its transfers belong to.
    label : str
        HTML put before the legend (e.g. which panel it belongs to).
    """
    entries = []
    for c, phases in sorted(color_phases.items()):
        rs, ag = _COLOR_PAIRS[c % len(_COLOR_PAIRS)]
        # A line sample per phase, drawn like the arrows (shade and dash); the key follows.
        shades = "".join(_swatch(rs if p == "reduce_scatter" else ag, "", dash=_PHASE_DASH.get(p, "solid"),
                                 title=p.replace("_", "-")) for p in phases)
        entries.append(f"<span class='scwork-arrow-color' style='white-space:nowrap;margin-right:12px'>"
                       f"<b>color {c}</b>{shades}</span>")
    drawn = sorted({p for phases in color_phases.values() for p in phases}, key=_phase_order)
    key = "; ".join(f"{'dark' if p == 'reduce_scatter' else 'light'} {_PHASE_DASH.get(p, 'solid')} = "
                    f"{p.replace('_', '-')}" for p in drawn)
    n = len(color_phases)
    repeat = (f" (only {len(_COLOR_PAIRS)} hues: color i and i + {len(_COLOR_PAIRS)} look alike)"
              if n > len(_COLOR_PAIRS) else "")
    # Two lines at least, so that both panels' drawings start at the same height.
    return (f"<div style='font-size:12px;line-height:1.8;max-width:640px;min-height:44px'>{label}"
            f"{n} arrow color{'s' if n != 1 else ''}{repeat}: " + " ".join(entries)
            + (f" ({key})" if key else "") + "</div>")


def _dimension_name(dim: int) -> str:
    return f"dim {dim} ({'xyz'[dim]})" if 0 <= dim < 3 else "on chip"


def _legend_html(network: Network | None) -> str:
    """The shared legend: buffers, arrows, links and link utilisation, timeline."""
    states = "".join(_swatch(c, name) for _, name, c in _STATES)
    phases = "".join(_swatch(c, name.replace("_", "-")) for name, c in _PHASE_BAR_COLORS.items())
    ndim = network.ndim if network is not None else 3
    dims = "".join(_swatch(_DIM_COLORS[d], _dimension_name(d)) for d in range(min(ndim, 3)))
    if network is not None and network.cores_per_chip > 1:
        dims += _swatch(_ON_CHIP_COLOR, "on chip")
    return (
        "<div style='font-size:12px;line-height:1.8'><b>Buffers</b> (bar under each node, "
        f"fill = fraction complete):{states}<br><b>Arrows</b>: one per message of the step; "
        "hue = color (independent sub-collective, listed above each drawing), dark solid = "
        "reduce-scatter (combine), light dashed = all-gather (copy); arrow width = bytes "
        "(widest = the step's largest message); 3-D slices: short diagonal arrows are z links "
        "(up-right = +z)<br><b>Links</b>: gray lines = links, dashed gray stubs = wraparound "
        "links. <b>Link utilisation</b> (bar chart under each drawing): one bar per directed link; "
        "bar height = busy fraction = time the link carries data / step time (1 = busy the whole "
        f"step: the busiest link sets the step time); bar color = dimension:{dims}"
        f"<br><b>Timeline</b>:{phases}</div>")


def _time_unit(seconds: float) -> tuple[str, float]:
    """A readable unit for a time span: (name, factor from seconds)."""
    if seconds < 1e-3:
        return "µs", 1e6
    if seconds < 1.0:
        return "ms", 1e3
    return "s", 1.0


def _format_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} B"


def phase_summary_html(label: str, name: str, network: Network, nbytes: int) -> str:
    """Per phase and dimension of algorithm ``name`` on ``network``: steps, bytes, busiest link.

    What the stepper shows instead of a drawing above its node limit (numbers from
    :func:`scwork.collectives.phase_summary`). A table with class
    ``scwork-phase-summary``, or one line saying why there is none.
    """
    from scwork.errors import ScworkError

    try:
        schedule = schedule_for(name, network, nbytes)
        records = schedule.num_transfers if schedule._program is None else int(
            schedule._program.step_message_records.sum())
        if records > SUMMARY_MAX_RECORDS:
            return (f"<p><b>{_escape(label)}</b>: {records:,} transfer records, more than the "
                    f"{SUMMARY_MAX_RECORDS:,} summarised here; run <code>scwork allreduce --topology ... "
                    f"--algorithm {_escape(name)}</code></p>")
        parts = collectives.phase_summary(schedule)
    except ScworkError as err:
        return f"<p><b>{_escape(label)}</b>: {_escape(str(err).splitlines()[0])}</p>"
    rows = "".join(
        f"<tr><td>{p.replace('_', '-')}</td><td>{_dimension_name(int(d))}</td><td>{int(n)}</td>"
        f"<td>{int(a) + 1}-{int(z) + 1}</td><td>{_format_bytes(int(b))}</td><td>{int(k):,}</td>"
        f"<td>{_escape(network.link_label(int(link)))}: {_format_bytes(int(lb))}</td></tr>"
        for p, d, n, a, z, b, k, link, lb in zip(
            parts.phase.values, parts.dim.values, parts.steps.values, parts.first_step.values,
            parts.last_step.values, parts.bytes.values, parts.links.values, parts.busiest_link.values,
            parts.busiest_link_bytes.values))
    return (f"<table class='scwork-phase-summary' style='font-size:12px;margin:6px 0'>"
            f"<caption style='text-align:left'><b>{_escape(label)}</b>: {schedule.num_steps:,} steps on "
            f"{_escape(network.name)}</caption><tr><th>phase</th><th>links</th><th>steps</th><th>from-to</th>"
            f"<th>bytes over links</th><th>links used</th><th>busiest link</th></tr>{rows}</table>")


def _escape(text: str) -> str:
    import html

    return html.escape(str(text))
