"""Shared test configuration.

Hypothesis runs with a modest example budget by default (the CI machine has two
cores); ``HYPOTHESIS_PROFILE=thorough`` raises it for local deep runs.
Notebook and packaging tests are marked ``slow``; they still run in CI.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Progress bars and browser opening must never happen in tests.
os.environ.setdefault("SCWORK_PROGRESS", "0")


def pytest_addoption(parser):
    group = parser.getgroup("scwork")
    group.addoption(
        "--oracle-examples", type=int, default=None,
        help="hypothesis examples per oracle test (tests/oracle); default 300 in total "
             "spread over the tests, see scwork.testing.oracle_examples",
    )
    group.addoption(
        "--fuzz-examples", type=int, default=None,
        help="generated cases per fuzz surface (tests/fuzz); e.g. 10000 with -m fuzz",
    )


def pytest_configure(config):
    # Test modules read these when they are imported (hypothesis settings are fixed at
    # decoration time), so they travel as environment variables set before collection.
    for option, variable in (("oracle_examples", "SCWORK_ORACLE_EXAMPLES"),
                             ("fuzz_examples", "SCWORK_FUZZ_EXAMPLES")):
        value = config.getoption(option)
        if value is not None:
            os.environ[variable] = str(value)


def pytest_terminal_summary(terminalreporter):
    from scwork.testing import fuzz_counts

    counts = fuzz_counts()
    if counts:
        terminalreporter.section("fuzz cases per surface")
        for surface, outcome in sorted(counts.items()):
            terminalreporter.write_line(
                f"{surface}: {outcome['cases']} cases, {outcome['typed_errors']} typed errors, "
                f"{outcome['untyped']} untyped, {outcome['hangs']} hangs, "
                f"{outcome['wrong']} silently wrong")
