"""PlanExplorer: every candidate of a plan search, its Pareto front and the library's default plan.

Give it a :class:`scwork.plan.PlanSearchResult` (or let :meth:`PlanExplorer.demo` run a
small search) and see:

- a scatter of every candidate: modelled step time against peak HBM per chip, colour =
  share of held-out ids dropped, faded where the candidate fails the constraints; the
  Pareto front (time, peak HBM, drop rate) drawn as a line; the library's default plan
  (automatic stacking, limits at the observed maxima) marked with a diamond;
- clicking a point (or setting ``selected``) shows that plan: its knobs, stacks and
  limits, memory and the step's phase times, and what differs from the library's
  default at the same topology and batch size;
- constraint controls (id-drop budget, step-time and HBM caps, must fit memory): they
  re-rank the candidates already evaluated (``PlanSearchResult.with_constraints``)
  and redraw; the engine does not run again.

Every number comes from the search result; this module only arranges and draws it.

Examples
--------
>>> from scwork.widgets import PlanExplorer            # doctest: +SKIP
>>> ex = PlanExplorer.demo()                            # doctest: +SKIP
>>> ex.max_drop_rate = 1e-3; ex.selected = ex.best      # doctest: +SKIP
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets
import numpy as np
import traitlets

from scwork.errors import InputError, ScworkError
from scwork.memory import CATEGORIES
from scwork.plan import Constraints, PlanSearchResult
from scwork.widgets import _bokeh
from scwork.widgets._display import figure_view
from scwork.widgets._html import columns_table_html, format_bytes, message_html, summary_table_html
from scwork.widgets._panes import TextPane, hbox, vbox
from scwork.widgets._scatter import ScatterChart

__all__ = ["PlanExplorer"]

_WIDTH = 620


class PlanExplorer(_bokeh.SyncedDisplay, ipywidgets.VBox):
    """The candidates of a plan search as a scatter, the front, the default plan, one plan in detail.

    Parameters
    ----------
    result : PlanSearchResult
        From :func:`scwork.plan.search`.
    **kwargs
        Initial values of the traits below and ``ipywidgets.VBox`` arguments.

    Attributes
    ----------
    max_drop_rate : float
        Largest share of held-out ids a feasible plan may drop.
    max_step_time_ms : float
        Step-time cap in milliseconds (0: none).
    max_peak_hbm_gib : float
        HBM cap per chip in GiB (0: none).
    fits_memory : bool
        Feasible plans must fit SPMEM and HBM.
    selected : int
        The candidate shown in detail (-1: none); starts at the best plan.
    best : int
        The best candidate under the current constraints (-1 when none is feasible).
    error : str
        Why the current constraints are rejected (read-only); empty when they are not.
    result : PlanSearchResult
        The result ranked under the current constraints.
    sources : dict of str to ColumnDataSource
        ``points``, ``front``, ``marked`` (the library's default), ``selected``.
    figures : dict of str to bokeh figure
        ``scatter``.
    controls : dict of str to ipywidgets.Widget
        ``max_drop_rate``, ``max_step_time_ms``, ``max_peak_hbm_gib``, ``fits_memory``.
    """

    max_drop_rate = traitlets.Float(0.0)
    max_step_time_ms = traitlets.Float(0.0)
    max_peak_hbm_gib = traitlets.Float(0.0)
    fits_memory = traitlets.Bool(True)
    selected = traitlets.Int(-1)
    best = traitlets.Int(-1, read_only=True)
    error = traitlets.Unicode("", read_only=True)

    _CONSTRAINT_TRAITS = ("max_drop_rate", "max_step_time_ms", "max_peak_hbm_gib", "fits_memory")

    def __init__(self, result: PlanSearchResult, **kwargs: Any):
        if not isinstance(result, PlanSearchResult):
            raise InputError(f"result must be a scwork.plan.PlanSearchResult (scwork.plan.search(...)), got "
                             f"{type(result).__name__}")
        c = result.constraints
        state = {"max_drop_rate": c.max_drop_rate, "fits_memory": c.fits_memory,
                 "max_step_time_ms": (c.max_step_time_s or 0) * 1e3,
                 "max_peak_hbm_gib": (c.max_peak_hbm_bytes or 0) / 2**30}
        state.update({k: kwargs.pop(k) for k in (*self._CONSTRAINT_TRAITS, "selected") if k in kwargs})
        super().__init__(**kwargs)
        self._base_result = result
        self.result = result
        self._syncing = False
        with self._quiet():
            for name, value in state.items():
                setattr(self, name, value)
        self._build_views()
        self._build_controls()
        self.observe(self._on_constraints, names=list(self._CONSTRAINT_TRAITS))
        self.observe(self._on_selected, names=["selected"])
        self._rerank()
        if self.selected < 0:
            with self._quiet():
                self.selected = self.best
        self._draw()

    @classmethod
    def demo(cls, *, batch_size: int = 1024, num_steps: int = 6, seed: int = 0, **kwargs: Any) -> PlanExplorer:
        """An explorer on a small search: 8 synthetic Zipf features of mixed widths on v5p slices of 4 and 8 chips."""
        import scwork
        from scwork.plan import search
        from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec

        vocab = [50_000, 2_000, 300_000, 10_000, 800, 120_000, 6_000, 40_000]
        names = [f"f{i}" for i in range(len(vocab))]
        data = scwork.datasets.synthetic(batch_size, num_steps=num_steps, features=names,
                                         vocab_size=dict(zip(names, vocab)), valency=4, seed=seed)
        feats = [FeatureSpec(n, TableSpec(f"t{i}", v, (16, 32)[i % 2], optimizer="adagrad"))
                 for i, (n, v) in enumerate(zip(names, vocab))]
        batches = [FeatureBatch.from_ragged(data.step(k)) for k in range(num_steps)]
        result = search(feats, batches, "v5p:4,8", per_chip_batch_sizes=[batch_size // 16, batch_size // 8],
                        local_search_steps=10, budget=200, tc_seconds_per_sample=(2e-7, 4e-7), progress=False,
                        constraints=Constraints(max_drop_rate=1e-3))
        return cls(result, **kwargs)

    # -- views ------------------------------------------------------------------------------
    def _build_views(self) -> None:
        self.chart = ScatterChart(x_label="modelled step time (ms)", y_label="peak HBM per chip (GiB)",
                                  value_label="drop rate", width=_WIDTH, height=400,
                                  tooltips=(("stacking", "@stacking"), ("limits", "@limit_rule"),
                                            ("chips", "@num_chips"), ("per chip", "@per_chip_batch"),
                                            ("drop rate", "@value")))
        self.chart.on_select(self._on_tap)
        self.sources = dict(self.chart.sources)
        self.figures = {"scatter": self.chart.figure}
        self.summary_pane = TextPane("", _WIDTH)
        self.detail_pane = TextPane("", 560, height=560, scroll=True)
        self._views = hbox([vbox([self.summary_pane, figure_view(self.chart.figure)]), self.detail_pane])

    def _build_controls(self) -> None:
        style = {"description_width": "150px"}
        self.controls = {
            "max_drop_rate": ipywidgets.BoundedFloatText(value=self.max_drop_rate, min=0, max=1, step=1e-4,
                                                         description="drop budget (share)", style=style),
            "max_step_time_ms": ipywidgets.BoundedFloatText(value=self.max_step_time_ms, min=0, max=1e6,
                                                            description="step cap ms (0: none)", style=style),
            "max_peak_hbm_gib": ipywidgets.BoundedFloatText(value=self.max_peak_hbm_gib, min=0, max=1e4,
                                                            description="HBM cap GiB (0: none)", style=style),
            "fits_memory": ipywidgets.Checkbox(value=self.fits_memory, description="must fit SPMEM and HBM"),
        }
        for name, control in self.controls.items():
            traitlets.link((control, "value"), (self, name))
        self.children = [hbox(list(self.controls.values())), self._views]

    # -- reacting ---------------------------------------------------------------------------
    def _constraints(self) -> Constraints:
        return Constraints(fits_memory=self.fits_memory, max_drop_rate=float(self.max_drop_rate),
                           max_step_time_s=self.max_step_time_ms * 1e-3 if self.max_step_time_ms > 0 else None,
                           max_peak_hbm_bytes=int(self.max_peak_hbm_gib * 2**30) if self.max_peak_hbm_gib > 0
                           else None)

    def _rerank(self) -> None:
        try:
            constraints = self._constraints()
        except ScworkError as err:      # e.g. a drop budget above 1 typed into the box
            self.set_trait("error", str(err))
            return
        self.set_trait("error", "")
        self.result = self._base_result.with_constraints(constraints)
        feasible = self.result.dataset["feasible"].values
        self.set_trait("best", self.result.best.index if feasible.any() else -1)

    def _on_constraints(self, change) -> None:
        if self._syncing:
            return
        self._rerank()
        self._draw()

    def _on_tap(self, index: int) -> None:
        self.selected = index

    def _on_selected(self, change) -> None:
        if self._syncing:
            return
        self.chart.select(self.selected if self.selected >= 0 else None)
        self.detail_pane.text = self._detail_html()

    # -- drawing ----------------------------------------------------------------------------
    def _draw(self) -> None:
        ds = self.result.dataset
        x = ds["step_time_s"].values * 1e3
        y = ds["peak_hbm_bytes"].values / 2**30
        defaults = [int(i) for i in np.flatnonzero(ds["is_default"].values)]
        self.chart.update(
            x, y, ds["drop_rate"].values, ds["feasible"].values, index=ds["candidate"].values,
            extra={"stacking": ds["stacking"].values.astype(str), "limit_rule": ds["limit_rule"].values.astype(str),
                   "num_chips": ds["num_chips"].values, "per_chip_batch": ds["per_chip_batch"].values},
            front=self.result.front, marked=[(i, "library default") for i in defaults],
            selected=self.selected if self.selected >= 0 else None)
        self.summary_pane.text = self._summary_html() + (message_html(self.error, "error") if self.error else "")
        self.detail_pane.text = self._detail_html()

    def _summary_html(self) -> str:
        ds = self.result.dataset
        rows = {"candidates": int(ds.sizes["candidate"]), "feasible": int(ds["feasible"].sum()),
                "on the front": len(self.result.front)}
        if self.best >= 0:
            gain = self.result.gain()
            rows["best"] = f"#{self.best}"
            rows["modelled speed-up over the library's default"] = f"{gain['speedup']:.3f}x"
            rows["HBM saved per chip"] = format_bytes(gain["peak_hbm_saved_bytes"])
        else:
            rows["best"] = "none meets the constraints"
        return summary_table_html(rows, title="plan search")

    def _detail_html(self) -> str:
        if self.selected < 0 or self.selected >= self.result.dataset.sizes["candidate"]:
            return "<i>click a point to see its plan</i>"
        cand = self.result.candidate(self.selected)
        m = cand.metrics
        knobs = {**cand.knobs, "feasible": m["feasible"], "step time": f"{m['step_time_s'] * 1e3:.4f} ms",
                 "peak HBM": format_bytes(m["peak_hbm_bytes"]) + f" of {format_bytes(m['usable_hbm_bytes'])}",
                 "worst SPMEM tile": format_bytes(m["max_spmem_bytes_per_tile"])
                 + f" of {format_bytes(m['tile_spmem_bytes'])}",
                 "drop rate": f"{m['drop_rate']:.3g} ({m['dropped_ids']:,} of {m['held_out_ids']:,} ids)",
                 "mini-batches (most)": m["max_minibatches"]}
        parts = [summary_table_html(knobs, title=f"candidate #{cand.index}" + (" (library default)"
                                                                              if cand.is_default else ""))]
        parts.append(columns_table_html(
            ("stack", "tables", "max ids", "max unique", "static buffer", "mini-batches"),
            [(s["stack"], ", ".join(s["tables"]), s["max_ids_per_partition"], s["max_unique_ids_per_partition"],
              s["suggested_coo_buffer_size_per_device"] or "-", s["minibatches"]) for s in cand.stacks()],
            title="stacks and limits"))
        report = cand.memory()
        at_peak = report.hbm.usage_by_category[report.hbm.peak_event]
        parts.append(summary_table_html({c: format_bytes(int(b)) for c, b in zip(CATEGORIES, at_peak) if b},
                                        title="HBM per chip at the peak"))
        if cand.step_breakdown:
            parts.append(summary_table_html({k: f"{v * 1e6:.1f} us" for k, v in cand.step_breakdown.items()},
                                            title="step phases (slowest unit)"))
        if cand.memory_errors:
            parts.append("<b>memory</b><ul>" + "".join(f"<li>{html.escape(e)}</li>" for e in cand.memory_errors)
                         + "</ul>")
        base = self._default_for(cand)
        if base is not None and base.index != cand.index:
            diff = cand.diff(base)
            parts.append(columns_table_html(("what", "this plan", f"default #{base.index}"),
                                            [(k, _short(a), _short(b)) for k, (a, b) in diff.items()],
                                            title="difference from the library's default"))
        return "".join(parts)

    def _default_for(self, cand):
        for b in self.result.baselines:
            if b.knobs["topology"] == cand.knobs["topology"] and \
                    b.knobs["per_chip_batch"] == cand.knobs["per_chip_batch"]:
                return b
        return None

    def to_html(self, path) -> Any:
        """Write the scatter and the panes to a standalone HTML file (works offline)."""
        return self._export(path, "scwork PlanExplorer")


def _short(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.4g}"
    return value
