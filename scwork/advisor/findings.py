"""What the advisor returns: findings, the advice listing them, the thresholds that fire them."""

from __future__ import annotations

import dataclasses
import html
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scwork.errors import ConfigError

__all__ = ["Advice", "AdvisorThresholds", "CHECKS", "Finding", "SEVERITIES"]


#: Finding severities, most severe first.
SEVERITIES: tuple[str, ...] = ("error", "warning", "info")

#: Every check :func:`advise` knows, in [sc-guide] §10 order.
CHECKS: tuple[str, ...] = (
    "host_preprocessing_slow",
    "pipelining_off",
    "limits_too_low",
    "minibatching_overhead",
    "limits_too_high",
    "partition_skew",
    "too_few_stacked_tables",
    "too_many_stacked_tables",
    "fp32_where_lower_precision_would_do",
    "hbm_bandwidth_saturation",
    "spmem_overflow",
    "hbm_stack_overflow",
    "hbm_heap_exhaustion",
)

FLAG_PIPELINING = "tf_xla_disable_full_embedding_pipelining"
FLAG_SERIALIZE = "xla_sc_num_serialized_tables_to_optimize_hbm"
FLAG_PREFETCH = "maximum_parallel_iterations"


@dataclass(frozen=True)
class AdvisorThresholds:
    """When a check fires. Every field is a scwork choice unless its docstring cites a source."""

    min_gain_fraction: float = 0.02
    """Time findings fire only if they save at least this fraction of the step time. Unit: 1."""

    skew_ratio: float = 1.25
    """Partition skew fires when the slowest SparseCore's time (or the busiest partition's
    ids) exceeds this multiple of the mean. Unit: 1."""

    limits_high_ratio: float = 2.0
    """Limits are too high when the configured limit exceeds this multiple of the observed
    maximum. Unit: 1."""

    min_tables_per_stack: int = 5
    """Fewest tables a stack should have: [sc-guide] §10 recommends 5 to 100. Unit: tables."""

    max_tables_per_stack: int = 100
    """Most tables a stack should have: [sc-guide] §10 recommends 5 to 100. Unit: tables."""

    sc_bound_utilization: float = 0.8
    """HBM-bandwidth saturation needs the SparseCores busy at least this share of the step. Unit: 1."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"AdvisorThresholds.{f.name} must be a finite number >= 0, got {v!r}")
        if self.min_tables_per_stack > self.max_tables_per_stack:
            raise ConfigError("AdvisorThresholds.min_tables_per_stack must be <= max_tables_per_stack")


@dataclass(frozen=True)
class Finding:
    """One bottleneck, with the numbers that show it, the fix and what it is worth.

    Attributes
    ----------
    id : str
        One of :data:`CHECKS`.
    title : str
    severity : {"error", "warning", "info"}
    evidence : mapping
        The numbers behind the finding, by name (seconds, bytes, counts).
    fix : str
        What to change, in words.
    flags : tuple of str
        Flag, configuration field or parameter names the fix changes.
    gain_s : float or None
        Estimated seconds saved per training step (None: not a time finding or not
        estimable from the inputs).
    gain_bytes : int or None
        Estimated bytes saved (or that must be freed to fit), per chip unless the
        evidence says otherwise.
    gain_basis : str
        How the gain was estimated.
    stack : str or None
        The stacked table concerned, if one.
    step_time_s : float or None
        The modelled step time the gain compares with.
    """

    id: str
    title: str
    severity: str
    evidence: Mapping[str, Any]
    fix: str
    flags: tuple[str, ...] = ()
    gain_s: float | None = None
    gain_bytes: int | None = None
    gain_basis: str = ""
    stack: str | None = None
    step_time_s: float | None = None

    @property
    def gain_fraction(self) -> float | None:
        """``gain_s / step_time_s`` when both are known."""
        if self.gain_s is None or not self.step_time_s:
            return None
        return self.gain_s / self.step_time_s

    @property
    def expected_gain(self) -> str:
        """The gain in words, e.g. ``"1.2 ms per step (35% of the step)"``."""
        parts = []
        if self.gain_s is not None:
            text = f"{_fmt_s(self.gain_s)} per step"
            if self.gain_fraction is not None:
                text += f" ({self.gain_fraction:.0%} of the step)"
            parts.append(text)
        if self.gain_bytes is not None:
            parts.append(f"{_fmt_bytes(self.gain_bytes)}")
        return "; ".join(parts) if parts else "not estimated"

    def __str__(self) -> str:
        ev = ", ".join(f"{k}={_fmt_value(v)}" for k, v in self.evidence.items())
        return (f"[{self.severity}] {self.id}: {self.title}\n  evidence: {ev}\n  fix: {self.fix}"
                + (f" ({', '.join(self.flags)})" if self.flags else "")
                + f"\n  expected gain: {self.expected_gain} - {self.gain_basis}")


def _fmt_3(v: float) -> str:
    """Three significant digits, but whole numbers from 1000 on (1022, not 1.02e+03)."""
    return f"{v:.3g}" if abs(v) < 999.5 else f"{v:.0f}"


# The unit is chosen on the value as printed (3 significant digits): 0.9999 s is "1 s", not
# "1e+03 ms", and 2**30 - 1 bytes "1 GiB", not "1.02e+03 MiB".
def _fmt_s(s: float) -> str:
    a = abs(s)
    for unit, size in (("s", 1.0), ("ms", 1e-3)):
        if float(f"{a / size:.3g}") >= 1:
            return f"{_fmt_3(s / size)} {unit}"
    return f"{_fmt_3(s * 1e6)} \u00b5s"


def _fmt_bytes(b: float) -> str:
    a = abs(b)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if float(f"{a / size:.3g}") >= 1:
            return f"{_fmt_3(b / size)} {unit}"
    return f"{int(b)} B"


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class Advice(list):
    """Findings, most impactful first, plus the checks that could not run.

    Attributes
    ----------
    skipped : dict of str -> str
        Check id -> why it did not run (missing input).
    step_time_s : float or None
        Modelled step time, when a step model was available.
    """

    def __init__(self, findings, skipped: Mapping[str, str], step_time_s: float | None):
        super().__init__(findings)
        self.skipped = dict(skipped)
        self.step_time_s = step_time_s

    @property
    def ids(self) -> list[str]:
        return [f.id for f in self]

    def get(self, id: str) -> list[Finding]:
        """Findings with this id."""
        return [f for f in self if f.id == id]

    def records(self) -> list[dict[str, Any]]:
        """One plain dict per finding (evidence as a dict)."""
        out = []
        for rank, f in enumerate(self, 1):
            out.append({"rank": rank, "id": f.id, "severity": f.severity, "title": f.title, "stack": f.stack,
                        "gain_s": f.gain_s, "gain_fraction": f.gain_fraction, "gain_bytes": f.gain_bytes,
                        "fix": f.fix, "flags": ", ".join(f.flags), "gain_basis": f.gain_basis,
                        "evidence": dict(f.evidence)})
        return out

    def to_dataframe(self):
        """The findings as a :class:`pandas.DataFrame` (needs pandas), one row per finding."""
        import pandas as pd

        rows = self.records()
        for r in rows:
            r["evidence"] = ", ".join(f"{k}={_fmt_value(v)}" for k, v in r["evidence"].items())
        return pd.DataFrame(rows, columns=["rank", "id", "severity", "title", "stack", "gain_s", "gain_fraction",
                                           "gain_bytes", "fix", "flags", "gain_basis", "evidence"]).set_index("rank")

    def __str__(self) -> str:
        if not self:
            text = "No bottleneck found."
        else:
            text = "\n".join(f"{i}. {f}" for i, f in enumerate(self, 1))
        if self.skipped:
            text += "\nNot checked: " + "; ".join(f"{k} ({v})" for k, v in self.skipped.items())
        return text

    def __repr__(self) -> str:
        return f"Advice({len(self)} findings: {self.ids}; {len(self.skipped)} checks skipped)"

    def _repr_html_(self) -> str:
        colors = {"error": "#c62828", "warning": "#ef6c00", "info": "#1565c0"}
        rows = []
        for i, f in enumerate(self, 1):
            ev = "<br>".join(f"{html.escape(str(k))} = {html.escape(_fmt_value(v))}" for k, v in f.evidence.items())
            rows.append(
                f"<tr><td>{i}</td><td style='color:{colors[f.severity]}'>{f.severity}</td>"
                f"<td><b>{html.escape(f.title)}</b><br><code>{f.id}</code></td>"
                f"<td><small>{ev}</small></td>"
                f"<td>{html.escape(f.fix)}<br><code>{html.escape(', '.join(f.flags))}</code></td>"
                f"<td>{html.escape(f.expected_gain)}<br><small>{html.escape(f.gain_basis)}</small></td></tr>")
        skipped = ""
        if self.skipped:
            skipped = "<p><small>Not checked: " + html.escape(
                "; ".join(f"{k} ({v})" for k, v in self.skipped.items())) + "</small></p>"
        return ("<div><table><tr><th>#</th><th>severity</th><th>finding</th><th>evidence</th><th>fix</th>"
                f"<th>expected gain</th></tr>{''.join(rows)}</table>{skipped}</div>")
