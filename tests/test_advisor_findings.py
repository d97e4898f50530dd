"""What the advisor returns (scwork.advisor.findings): thresholds, findings, their text and the advice table.

Every default, unit boundary of the formatted numbers (1 s, 1 ms, 1 KiB, 1 MiB, 1 GiB)
and piece of text is written out here.
"""

from __future__ import annotations

import math

import pytest

from scwork.advisor.findings import (
    CHECKS,
    SEVERITIES,
    Advice,
    AdvisorThresholds,
    Finding,
    _fmt_bytes,
    _fmt_s,
    _fmt_value,
)
from scwork.errors import ConfigError


# -- thresholds ------------------------------------------------------------------------------
def test_threshold_defaults():
    t = AdvisorThresholds()
    assert (t.min_gain_fraction, t.skew_ratio, t.limits_high_ratio, t.min_tables_per_stack, t.max_tables_per_stack,
            t.sc_bound_utilization) == (0.02, 1.25, 2.0, 5, 100, 0.8)


def test_thresholds_accept_zero_and_equal_table_bounds():
    t = AdvisorThresholds(min_gain_fraction=0, skew_ratio=0.0, min_tables_per_stack=7, max_tables_per_stack=7)
    assert (t.min_gain_fraction, t.min_tables_per_stack, t.max_tables_per_stack) == (0, 7, 7)


@pytest.mark.parametrize("field, value", [("skew_ratio", -1e-9), ("min_gain_fraction", math.nan),
                                          ("limits_high_ratio", math.inf), ("sc_bound_utilization", "0.8"),
                                          ("min_tables_per_stack", True), ("max_tables_per_stack", None)])
def test_thresholds_refuse_what_is_not_a_finite_number_at_least_zero(field, value):
    with pytest.raises(ConfigError, match=f"AdvisorThresholds.{field} must be a finite number >= 0, got "):
        AdvisorThresholds(**{field: value})


def test_thresholds_refuse_a_minimum_table_count_over_the_maximum():
    with pytest.raises(ConfigError, match="min_tables_per_stack must be <= max_tables_per_stack"):
        AdvisorThresholds(min_tables_per_stack=8, max_tables_per_stack=7)


def test_order_constants():
    assert SEVERITIES == ("error", "warning", "info")
    assert len(CHECKS) == 13 and CHECKS[0] == "host_preprocessing_slow" and CHECKS[-1] == "hbm_heap_exhaustion"


# -- number formats --------------------------------------------------------------------------
def test_seconds_change_unit_at_one_second_and_one_millisecond():
    assert _fmt_s(1.0) == "1 s"
    assert _fmt_s(12.345) == "12.3 s" and _fmt_s(999.4) == "999 s" and _fmt_s(999.5) == "1000 s"
    assert _fmt_s(4321.0) == "4321 s" and _fmt_s(-4321.0) == "-4321 s"
    assert _fmt_s(0.999) == "999 ms"
    assert _fmt_s(1e-3) == "1 ms"
    assert _fmt_s(0.00099) == "990 \u00b5s"
    # the unit of the value as printed: 0.9996 s prints as 1 s, not 1e+03 ms; 999.6 us as 1 ms
    assert _fmt_s(0.9996) == "1 s" and _fmt_s(0.9994) == "999 ms"
    assert _fmt_s(0.0009996) == "1 ms" and _fmt_s(0.0009994) == "999 \u00b5s"
    assert _fmt_s(0.0) == "0 \u00b5s"
    # exactly a millionth: 123.4999 us prints as 123, 123.5001 as 124 (no other scale may round it)
    assert _fmt_s(123.4999e-6) == "123 \u00b5s" and _fmt_s(123.5001e-6) == "124 \u00b5s"
    assert _fmt_s(0.1234999) == "123 ms" and _fmt_s(1.234999) == "1.23 s"
    # losses keep their sign and are sized by magnitude
    assert _fmt_s(-2.0) == "-2 s" and _fmt_s(-0.002) == "-2 ms" and _fmt_s(-5e-6) == "-5 \u00b5s"


def test_bytes_change_unit_at_each_power_of_1024():
    assert _fmt_bytes(2**30) == "1 GiB" and _fmt_bytes(3 * 2**30 // 2) == "1.5 GiB"
    # the unit of the value as printed: a byte under 1 GiB prints as 1 GiB, not 1.02e+03 MiB
    assert _fmt_bytes(2**30 - 1) == "1 GiB" and _fmt_bytes(2**30 - 2**21) == "1022 MiB"
    assert _fmt_bytes(2**20) == "1 MiB" and _fmt_bytes(2**20 - 1) == "1 MiB"
    assert _fmt_bytes(2**20 - 2**11) == "1022 KiB" and _fmt_bytes(-(2**20 - 2**11)) == "-1022 KiB"
    assert _fmt_bytes(1024) == "1 KiB" and _fmt_bytes(1536) == "1.5 KiB"
    assert _fmt_bytes(1023) == "1023 B" and _fmt_bytes(0) == "0 B"
    assert _fmt_bytes(-2048) == "-2 KiB" and _fmt_bytes(-5) == "-5 B"


def test_values_print_floats_to_four_digits_and_the_rest_as_they_are():
    assert _fmt_value(1.23456) == "1.235" and _fmt_value(2.0) == "2"
    assert _fmt_value(12345) == "12345" and _fmt_value(["a", "b"]) == "['a', 'b']" and _fmt_value(None) == "None"


# -- one finding -----------------------------------------------------------------------------
def _finding(**kw):
    base = dict(id="pipelining_off", title="No overlap", severity="warning", evidence={"speedup": 1.23456, "n": 3},
                fix="turn it on", flags=("flag_a", "flag_b"), gain_s=0.0015, gain_bytes=None, gain_basis="model",
                stack=None, step_time_s=0.006)
    base.update(kw)
    return Finding(**base)


def test_gain_fraction_needs_both_times():
    assert _finding().gain_fraction == 0.0015 / 0.006
    assert _finding(gain_s=None).gain_fraction is None
    assert _finding(step_time_s=None).gain_fraction is None
    assert _finding(step_time_s=0.0).gain_fraction is None
    assert _finding(gain_s=0.0).gain_fraction == 0.0


def test_expected_gain_in_words():
    assert _finding().expected_gain == "1.5 ms per step (25% of the step)"
    assert _finding(step_time_s=None).expected_gain == "1.5 ms per step"
    assert _finding(gain_s=None, gain_bytes=3 * 2**20).expected_gain == "3 MiB"
    assert _finding(gain_bytes=2048).expected_gain == "1.5 ms per step (25% of the step); 2 KiB"
    assert _finding(gain_s=None).expected_gain == "not estimated"
    assert _finding(gain_s=0.0).expected_gain == "0 \u00b5s per step (0% of the step)"


def test_a_finding_as_text():
    assert str(_finding()) == ("[warning] pipelining_off: No overlap\n  evidence: speedup=1.235, n=3\n"
                               "  fix: turn it on (flag_a, flag_b)\n"
                               "  expected gain: 1.5 ms per step (25% of the step) - model")
    assert str(_finding(flags=(), gain_s=None)) == ("[warning] pipelining_off: No overlap\n  evidence: speedup=1.235, "
                                                     "n=3\n  fix: turn it on\n  expected gain: not estimated - model")


# -- the advice ------------------------------------------------------------------------------
def _advice():
    first = _finding(id="spmem_overflow", title="Stack 's' <too big>", severity="error", evidence={"over": 2.5},
                     fix="stage & split", flags=("stage",), gain_s=None, gain_bytes=4096, stack="s")
    second = _finding()
    third = _finding(id="too_few_stacked_tables", severity="info", gain_s=None, flags=())
    return Advice([first, second, third], {"hbm_stack_overflow": "needs a memory report"}, 0.006)


def test_advice_lists_ids_and_finds_by_id():
    a = _advice()
    assert a.ids == ["spmem_overflow", "pipelining_off", "too_few_stacked_tables"]
    assert a.get("pipelining_off") == [a[1]] and a.get("limits_too_low") == []
    assert a.skipped == {"hbm_stack_overflow": "needs a memory report"} and a.step_time_s == 0.006
    assert repr(a) == ("Advice(3 findings: ['spmem_overflow', 'pipelining_off', 'too_few_stacked_tables']; "
                       "1 checks skipped)")


def test_advice_records_rank_from_one():
    records = _advice().records()
    assert [r["rank"] for r in records] == [1, 2, 3]
    assert records[0] == {"rank": 1, "id": "spmem_overflow", "severity": "error", "title": "Stack 's' <too big>",
                          "stack": "s", "gain_s": None, "gain_fraction": None, "gain_bytes": 4096,
                          "fix": "stage & split", "flags": "stage", "gain_basis": "model", "evidence": {"over": 2.5}}
    assert records[1]["flags"] == "flag_a, flag_b" and records[1]["gain_fraction"] == 0.25


def test_advice_dataframe():
    df = _advice().to_dataframe()
    assert df.index.name == "rank" and list(df.index) == [1, 2, 3]
    assert list(df.columns) == ["id", "severity", "title", "stack", "gain_s", "gain_fraction", "gain_bytes", "fix",
                                "flags", "gain_basis", "evidence"]
    assert df.loc[2, "evidence"] == "speedup=1.235, n=3" and df.loc[1, "evidence"] == "over=2.5"


def test_advice_as_text():
    text = str(_advice())
    assert text.startswith("1. [error] spmem_overflow: Stack 's' <too big>\n")
    assert "\n2. [warning] pipelining_off" in text and "\n3. [info] too_few_stacked_tables" in text
    assert text.endswith("\nNot checked: hbm_stack_overflow (needs a memory report)")
    assert str(Advice([], {}, None)) == "No bottleneck found."
    assert str(Advice([], {"a": "x", "b": "y"}, None)) == "No bottleneck found.\nNot checked: a (x); b (y)"


def test_advice_as_html():
    html = _advice()._repr_html_()
    assert html.startswith("<div><table><tr><th>#</th><th>severity</th><th>finding</th><th>evidence</th>"
                           "<th>fix</th><th>expected gain</th></tr><tr><td>1</td>")
    assert ("<tr><td>1</td><td style='color:#c62828'>error</td><td><b>Stack &#x27;s&#x27; &lt;too big&gt;</b><br>"
            "<code>spmem_overflow</code></td><td><small>over = 2.5</small></td><td>stage &amp; split<br>"
            "<code>stage</code></td><td>4 KiB<br><small>model</small></td></tr>") in html
    assert "<td>2</td><td style='color:#ef6c00'>warning</td>" in html
    assert "<td>3</td><td style='color:#1565c0'>info</td>" in html
    assert "<small>speedup = 1.235<br>n = 3</small>" in html
    assert html.endswith("</table><p><small>Not checked: hbm_stack_overflow (needs a memory report)</small></p>"
                         "</div>")
    assert Advice([], {}, None)._repr_html_().endswith("</tr></table></div>")


def test_findings_and_thresholds_are_frozen():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        _finding().gain_s = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        AdvisorThresholds().skew_ratio = 2.0
