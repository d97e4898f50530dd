"""One round-up, one stacked column id, one HBM stack formula: each written once and called everywhere.

The functions are pinned on values worked out by hand, and every module that used to
carry its own copy is checked to call (or compile) the one function, so a fix made in
one place reaches kernels, references and models alike.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from scwork._rounding import ceil_div, round_up
from scwork.sharding.column_id import column_id, column_id_of_id

ROOT = Path(__file__).resolve().parent.parent / "scwork"


@pytest.mark.parametrize("a,b,expected", [(0, 8, 0), (1, 8, 1), (7, 8, 1), (8, 8, 1), (9, 8, 2), (13, 8, 2),
                                          (16, 8, 2), (17, 1, 17), (2**62 + 1, 2, 2**61 + 1)])
def test_ceil_div_by_hand(a, b, expected):
    assert ceil_div(a, b) == expected
    assert round_up(a, b) == expected * b


def test_round_up_on_arrays_and_exact_on_big_ints():
    assert round_up(np.array([0, 1, 8, 9, 13, 15, 16], np.int64), 8).tolist() == [0, 8, 8, 16, 16, 16, 16]
    assert ceil_div(np.array([0, 1, 64, 65]), 64).tolist() == [0, 1, 1, 2]
    big = 10**30 + 1                       # past float precision: exact integer arithmetic
    assert round_up(big, 8) == 10**30 + 8


def test_round_up_compiles_in_numba():
    from scwork.sharding import _kernels

    assert _kernels._round_up(13, 8) == 16 and _kernels._round_up(16, 8) == 16


def test_column_id_by_hand():
    # P = 4: id 10 of a table with col_shift 3 and row_offset 5:
    # p = (10 + 3) % 4 = 1, q = 10 // 4 = 2, col = 1 + 4 * (2 + 5) = 29
    assert column_id_of_id(10, 4, 3, 5) == 29
    assert column_id(1, 2, 5, 4) == 29
    ids = np.array([0, 3, 4, 10])
    assert column_id_of_id(ids, 4, 3, 5).tolist() == [3 + 20, 2 + 20, 4 * 6 + 3, 29]


def test_every_copy_is_the_one_function():
    from scwork.layout import tiles, view
    from scwork.memory import _model
    from scwork.sharding import _kernels, _minibatch_kernels, specs

    assert specs.round_up is round_up and _model.round_up is round_up
    assert tiles._ceil_div is ceil_div and view._ceil_div is ceil_div
    # numba dispatchers compile the very same Python function (plain functions without JIT)
    assert getattr(_kernels._round_up, "py_func", _kernels._round_up) is round_up
    assert getattr(_minibatch_kernels._column_id, "py_func", _minibatch_kernels._column_id) is column_id


def test_no_module_writes_its_own_round_up():
    # the idioms of a hand-written ceiling division or round-up to a multiple of 8
    pattern = re.compile(r"-\(-[^\n]*//|\+ 7\) // 8|\+ 7\) >> 3|\+ 7\) & -8")
    found = [f"{path.relative_to(ROOT.parent)}:{i}: {line.strip()}"
             for path in sorted(ROOT.rglob("*.py")) if path.name != "_rounding.py"
             for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def test_hbm_stack_formula_lives_in_one_place():
    from scwork.memory import _hbm_numbers, hbm

    # (2 * 8 + 1) * 8 * 16 * 4 = 8704; 3 * 8 * 8 * 16 * 4 = 12288
    assert _hbm_numbers.stack_bytes_per_sc(8, 8, 16) == (8704, 12288)
    assert hbm.hbm_stack_bytes(8, 8, 16) == (8704, 12288)
    fwd, bwd = _hbm_numbers.stack_bytes_per_sc(np.array([8, 1]), np.array([8, 1]), 16)
    assert fwd.tolist() == [8704, 3 * 16 * 4] and bwd.tolist() == [12288, 3 * 16 * 4]
    source = Path(importlib.import_module("scwork.memory._hbm_numbers").__file__).read_text()
    assert source.count("* U * lrc * 4") == 2        # the forward and backward terms, once each
    assert "* U * lrc" not in Path(hbm.__file__).read_text()


def _mutation_tool():
    import importlib.util

    path = ROOT.parent / "tools" / "mutation.py"
    spec = importlib.util.spec_from_file_location("scwork_mutation_tool", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_mutation_map_names_existing_modules_and_tests():
    # tools/mutation.py runs on demand; a stale path there would only show when someone runs it
    tool = _mutation_tool()
    missing = [p for module, tests in tool.MODULES.items() for p in (module, *tests)
               if not (ROOT.parent / p).exists()]
    assert missing == []


def test_the_interval_of_a_partial_mutation_run():
    # Wilson score interval, z = 1.96, worked out by hand:
    # 0 of 10: centre (0 + 0.19208) / 1.38416 = 0.138770, half = 1.96 / 1.38416 * sqrt(3.8416 / 400) = 0.138770
    # -> [0, 0.27754]; 10 of 10 mirrors it; 95 of 100 -> centre 0.969208 / 1.038416 = 0.933352,
    # half 1.887490 * sqrt(0.000475 + 0.00009604) = 0.045104 -> [0.88825, 0.97846].
    interval = _mutation_tool().wilson_interval
    assert interval(0, 10) == pytest.approx((0.0, 0.27754), abs=1e-5)
    assert interval(10, 10) == pytest.approx((0.72246, 1.0), abs=1e-5)
    assert interval(95, 100) == pytest.approx((0.88825, 0.97846), abs=1e-5)
    assert interval(0, 0) == (0.0, 1.0)


def test_the_lines_a_mutation_run_since_a_revision_mutates():
    # tools/mutation.py --since REV mutates only the new-side lines a diff adds or modifies.
    # Hunk 1 (new lines 1..4): line 1 context, old line 2 changed into new lines 2 and 3,
    # line 4 context. Hunk 2: two old lines removed, nothing added (no new line).
    # Hunk 3 (new 10..12): a removed line whose text starts with "--" (shown "---", not a
    # file header), an added line "++x" at 11 (shown "+++x", not a file header), context 10, 12.
    # Hunk 4: one line added at 20 with no count (",1" left out), then the no-newline note.
    diff = "\n".join([
        "diff --git a/m.py b/m.py",
        "--- a/m.py",
        "+++ b/m.py",
        "@@ -1,3 +1,4 @@",
        " keep = 1",
        "-x = 2",
        "+x = 3",
        "+y = 4",
        " z = 5",
        "@@ -7,2 +8,0 @@",
        "-gone = 1",
        "-gone = 2",
        "@@ -11,3 +10,3 @@",
        " a = 1",
        "--- a comment that began with two minus signs",
        "+++x",
        " c = 3",
        "@@ -19,0 +20 @@ def f():",
        "+    return 7",
        "\\ No newline at end of file",
    ])
    assert _mutation_tool().changed_lines(diff) == {2, 3, 11, 20}
    assert _mutation_tool().changed_lines("") == set()
