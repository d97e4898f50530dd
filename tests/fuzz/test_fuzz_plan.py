"""Fuzz: the plan search (:func:`scwork.plan.search`, :class:`~scwork.plan.Constraints`,
:class:`~scwork.plan.LimitRule`, :func:`~scwork.plan.parse_topologies`) and ``scwork plan``.

Every case runs through :func:`scwork.testing.check_surface`: a bad input must end in a
typed scwork error, never an untyped exception, a hang or unbounded memory. Results are
held to invariants a wrong search breaks: every feasible candidate meets every
constraint, the front is feasible and non-dominated, drop rates are shares in [0, 1],
the best candidate is feasible and no feasible one beats it on the objective, the
library's default is among the candidates. The command must exit 0, 1 (no plan meets
the constraints) or 2 with one line on stderr, never leave a file behind on failure,
and print JSON that parses with ``--json``.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork import cli
from scwork.errors import ScworkError
from scwork.plan import Constraints, LimitRule, parse_topologies, search
from scwork.plan.result import constraint_failures, objective_value
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
from scwork.testing import (
    EDGE_FLOATS,
    arguments,
    check_surface,
    fuzz_settings,
    odd_scalars,
    report_wrong,
    weighted,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "model.toml"
EXAMPLE_IDS = ROOT / "examples" / "ids.csv.gz"

_SETTINGS = fuzz_settings()
_ODD = weighted((4, odd_scalars()), (1, st.sampled_from(EDGE_FLOATS)),
                (1, st.sampled_from([10**30, 2**63, -1, "v5p:4", [], {}, ["a"], (1, 2)])))


def _model(dims):
    return [FeatureSpec(f"f{i}", TableSpec(f"t{i}", 500 + 300 * i, d)) for i, d in enumerate(dims)]


def _batches(num_features, num_steps, batch, seed):
    data = scwork.datasets.synthetic(batch, num_steps=num_steps, features=[f"f{i}" for i in range(num_features)],
                                     vocab_size=500, valency=3, seed=seed)
    return [FeatureBatch.from_ragged(data.step(k)) for k in range(num_steps)]


def _check_result(surface: str, result) -> None:
    ds = result.dataset
    if not ((ds["drop_rate"].values >= 0) & (ds["drop_rate"].values <= 1)).all():
        report_wrong(surface, f"drop rates outside [0, 1]: {ds['drop_rate'].values}")
    if int(ds["is_default"].sum()) != len(result.baselines) or not result.baselines:
        report_wrong(surface, "the library's default plan is missing")
    feasible = ds["feasible"].values
    for i, rec in enumerate(result.records):
        if feasible[i] == bool(constraint_failures(rec, result.constraints)):
            report_wrong(surface, f"candidate {i}: feasible={feasible[i]} but fails "
                         f"{constraint_failures(rec, result.constraints)}")
    front = result.front
    if any(not feasible[i] for i in front):
        report_wrong(surface, f"an infeasible candidate on the front: {front}")
    pts = np.stack([ds[result.time_axis].values, ds["peak_hbm_bytes"].values, ds["drop_rate"].values], 1)
    for i in front:
        if ((pts[feasible] <= pts[i]).all(1) & (pts[feasible] < pts[i]).any(1)).any():
            report_wrong(surface, f"candidate {i} on the front is dominated")
    if feasible.any():
        best = result.best
        value = objective_value(result.records[best.index], result.objective)
        if any(objective_value(result.records[i], result.objective) < value for i in np.flatnonzero(feasible)):
            report_wrong(surface, "a feasible candidate beats the best on the objective")


@settings(**_SETTINGS)
@given(data=st.data())
def test_search(data):
    dims = data.draw(st.lists(st.sampled_from([8, 16, 32]), min_size=1, max_size=3), label="dims")
    model = _model(dims)
    batches = _batches(len(dims), data.draw(st.integers(1, 3), label="steps"), 64, data.draw(st.integers(0, 9)))
    valid = {
        "objective": st.sampled_from(["step_time", "time_per_sample", "peak_hbm", "drop_rate"]),
        # Mostly satisfiable: the cases that cannot be met (a 1-byte HBM cap, a budget of
        # one candidate, batches that do not split) are there, but rarer.
        "constraints": weighted((5, st.builds(Constraints, max_drop_rate=st.sampled_from([0.0, 0.01, 1.0]),
                                              max_step_time_s=st.sampled_from([None, 1.0]),
                                              max_peak_hbm_bytes=st.sampled_from([None, 2**40]))),
                                (1, st.builds(Constraints, max_step_time_s=st.just(1e-9))),
                                (1, st.builds(Constraints, max_peak_hbm_bytes=st.just(1)))),
        "budget": weighted((5, st.sampled_from([48, 200])), (1, st.just(1))),
        "per_chip_batch_sizes": weighted((5, st.sampled_from([[8], [4, 16]])), (1, st.sampled_from([[5], [10**9]]))),
        "limit_rules": st.sampled_from([[LimitRule()], [LimitRule("percentile", percentile=50)],
                                        [LimitRule(headroom=2.0, round_to=1)]]),
        "local_search_steps": st.sampled_from([0, 3]),
    }
    kwargs = arguments(data, valid, odd=_ODD)
    topologies = data.draw(weighted((6, st.just("v5p:4")), (1, st.sampled_from(["v5p:5", "v6e", "nochip:4", ""])),
                                    (1, _ODD)), label="topologies")
    odd_model = data.draw(weighted((8, st.just(model)), (1, _ODD)), label="features")
    odd_batches = data.draw(weighted((8, st.just(batches)), (1, _ODD), (1, st.just(_batches(1, 2, 64, 0)))),
                            label="batches")
    result, error = check_surface("plan.search", lambda: search(odd_model, odd_batches, topologies, progress=False,
                                                                **kwargs), seconds=60)
    if error is None:
        _check_result("plan.search", result)


@settings(**_SETTINGS)
@given(data=st.data())
def test_constraints_rules_and_topologies(data):
    fields = {"fits_memory": st.booleans(), "max_drop_rate": st.floats(0, 1),
              "max_step_time_s": weighted((2, st.none()), (1, st.floats(1e-6, 10))),
              "max_peak_hbm_bytes": weighted((2, st.none()), (1, st.integers(1, 2**40))),
              "max_spmem_bytes_per_tile": weighted((2, st.none()), (1, st.integers(1, 2**20)))}
    c, error = check_surface("plan.Constraints", lambda: Constraints(**arguments(data, fields, odd=_ODD)))
    if error is None and not 0 <= c.max_drop_rate <= 1:
        report_wrong("plan.Constraints", f"accepted max_drop_rate={c.max_drop_rate!r}")
    rule_fields = {"method": st.sampled_from(["max", "percentile"]), "percentile": st.floats(1e-3, 100),
                   "headroom": st.floats(1, 10), "round_to": st.integers(1, 64)}
    rule, error = check_surface("plan.LimitRule", lambda: LimitRule(**arguments(data, rule_fields, odd=_ODD)))
    if error is None:
        steps = np.asarray(data.draw(st.lists(st.integers(0, 10**6), min_size=1, max_size=6), label="steps"))
        value, error = check_surface("plan.LimitRule.value", lambda: rule.value(steps))
        if error is None and (value < 1 or value % rule.round_to or (rule.method == "max" and value < steps.max())):
            report_wrong("plan.LimitRule.value", f"{rule} of {steps.tolist()} gave {value}")
    text = data.draw(st.one_of(st.sampled_from(["v5p", "v5p:4,8", "v6e:1", "v4:4", "tpu7x:8"]),
                               st.text(max_size=12), _ODD), label="topologies")
    check_surface("plan.parse_topologies", lambda: parse_topologies(text))


# -- the command -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan_fuzz")
    example = EXAMPLE.read_text()
    (root / "small.toml").write_text(example.replace("batch_size = 4096", "batch_size = 64"))
    lines = gzip.decompress(EXAMPLE_IDS.read_bytes()).decode().splitlines(keepends=True)
    (root / "ids.csv").write_text("".join(lines[:257]))                      # 256 rows: 4 batches of 64
    (root / "short.csv").write_text("".join(lines[:9]))
    (root / "garbage.toml").write_text("[[[ = =\n")
    (root / "cases").mkdir()
    return root


_HOSTILE = ("0", "-1", "nan", "inf", "1e400", "", "ü", "9" * 40, "0.5", "2", "v5p:0", "v5p:4,,8", "x:4", "v5p:")


def _run(workspace: Path, argv: list[str]) -> None:
    case = Path(tempfile.mkdtemp(dir=workspace / "cases"))
    before = sorted(p.name for p in case.iterdir())
    out, err = io.StringIO(), io.StringIO()

    def call() -> int:
        cwd = os.getcwd()
        os.chdir(case)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                    mock.patch.object(cli, "_ONE_LINE_ERRORS", (ScworkError,)):
                try:
                    return cli.main(argv)
                except SystemExit as exit_:
                    return exit_.code if isinstance(exit_.code, int) else 2
        finally:
            os.chdir(cwd)

    status, error = check_surface("cli.plan", call, seconds=60)
    shown = f"scwork {argv!r}: {status}, {out.getvalue()[:200]!r}, {err.getvalue()[:300]!r}"
    if error is not None:
        report_wrong("cli.plan", f"{type(error).__name__} escaped main: {error}")
    if status not in (0, 1, 2):
        report_wrong("cli.plan", f"exit status {status}: {shown}")
    if "Traceback" in err.getvalue():
        report_wrong("cli.plan", f"a traceback: {shown}")
    if status == 2 and (err.getvalue().count("\n") != 1 or out.getvalue()):
        report_wrong("cli.plan", f"not a one-line error: {shown}")
    if status in (0, 1) and "--json" in argv:
        try:
            json.loads(out.getvalue())
        except ValueError:
            report_wrong("cli.plan", f"--json printed no JSON: {shown}")
    after = sorted(p.name for p in case.iterdir())
    if status != 0 and after != before:
        report_wrong("cli.plan", f"exit {status} but files changed: {after}: {shown}")


@settings(**_SETTINGS)
@given(data=st.data())
def test_cli_plan(workspace, data):
    def pick(valid, odds=2):
        hostile = data.draw(st.integers(0, 5), label="hostile?") == 0
        if hostile:
            return data.draw(st.one_of(st.sampled_from(_HOSTILE), st.text(max_size=6).filter(
                lambda t: "\x00" not in t)), label="value")
        return data.draw(st.sampled_from(valid), label="value") if data.draw(st.integers(0, odds - 1)) == 0 else None

    argv = ["plan", "--config", pick([str(workspace / "small.toml"), str(workspace / "garbage.toml"),
                                      str(workspace / "missing.toml")], odds=1) or str(workspace / "small.toml")]
    argv.append(pick([str(workspace / "ids.csv"), str(workspace / "short.csv"), str(workspace / "nothing.csv")],
                     odds=1) or str(workspace / "ids.csv"))
    for option, valid in (("--chips", ["v5p:4", "v5p:4,8", "v6e:4"]), ("--per-chip-batch", ["16", "8"]),
                          ("--max-drop-rate", ["0", "0.01"]), ("--budget", ["1000", "5"]),
                          ("--objective", ["peak_hbm", "drop_rate"]), ("--out", ["plan.toml", "plan.json",
                                                                                   "missing/plan.toml"])):
        value = pick(valid, odds=3)
        if value is not None:
            argv += [option, value]
    argv += ["--no-progress"] + (["--json"] if data.draw(st.booleans(), label="json") else [])
    _run(workspace, argv)
