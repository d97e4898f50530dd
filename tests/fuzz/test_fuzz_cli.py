"""Fuzz: the ``scwork`` command line, run in-process through :func:`scwork.cli.main`.

Every case is a generated argument list: a valid command name with hostile option
values (huge, negative, NaN and out-of-range numbers such as ``1e400``, unicode,
missing files, folders where files are expected, files where folders are expected,
malformed and mutated config, ids and limits files). It runs through
:func:`scwork.testing.check_surface` (surface ``cli.<command>``) with stdout and stderr
captured, and must end

- with exit status 0, 2 (or 1 for the commands that say "does not fit": ``memory``,
  ``summary``), never an exception out of ``main``: scwork's typed errors are the only
  ones ``main`` may turn into a message here (its OSError safety net is switched off,
  so that an OSError a command does not turn into a typed error counts as untyped);
- on status 2, with exactly one line on stderr and nothing on stdout; never a
  traceback; ``--json`` output that parses;
- on status 1 or 2, with no file written or changed (outputs are all or nothing) and
  no temporary file left behind.

Each case runs in a fresh folder (its working directory) so that relative output
paths land there. ``scwork lab`` is run up to the point where it would start
JupyterLab (``os.execv`` and ``os.chdir`` are replaced for the case).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork import cli
from scwork.errors import ScworkError
from scwork.testing import (
    check_surface,
    fuzz_settings,
    mutated_bytes,
    report_wrong,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "model.toml"
EXAMPLE_IDS = ROOT / "examples" / "ids.csv.gz"

#: Subcommands this module drives (as "scwork <command>"), and the surface label of their cases
#: (tests/fuzz/test_surface_coverage.py).
SURFACES = {
    "scwork stats": "cli.stats",
    "scwork memory": "cli.memory",
    "scwork summary": "cli.summary",
    "scwork allreduce": "cli.allreduce",
    "scwork layout": "cli.layout",
    "scwork hardware": "cli.hardware",
    "scwork warmup": "cli.warmup",
    "scwork lab": "cli.lab",
}

_SETTINGS = fuzz_settings()

#: A valid model that does not fit in SPMEM (eight large tables in one stack).
NOT_FITTING = (ROOT / "examples" / "does_not_fit.toml").read_text()

#: Commands whose exit status 1 means "does not fit".
_MAY_NOT_FIT = ("memory", "summary")


# ======================================================================================
# the workspace: input files every case may name (made once per module)
# ======================================================================================
class _Served(Exception):
    """``scwork lab`` reached ``os.execv``: it would now become JupyterLab."""


class _ExitedBadInput(ScworkError):
    """``main`` returned 2 (bad input, one line on stderr): counted as a typed error of the surface."""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Valid, broken and odd input files, by name; plus a folder for the cases."""
    import numpy as np

    import scwork

    scwork.warmup(progress=False)        # compile the kernels now, not under a case's time budget
    root = tmp_path_factory.mktemp("cli_fuzz")
    files: dict[str, Path] = {}
    example = EXAMPLE.read_text()
    small = example.replace("batch_size = 4096", "batch_size = 16")
    (root / "small.toml").write_text(small)
    files["config"] = root / "small.toml"
    # A name that is not UTF-8 (Latin-1 bytes): Python's argv holds it as a surrogate escape.
    undecodable_config = Path(os.fsdecode(os.fsencode(str(root)) + b"/mod\xe8le.toml"))
    undecodable_config.write_text(small)
    files["undecodable_config"] = undecodable_config
    files["example_config"] = EXAMPLE
    lines = gzip.decompress(EXAMPLE_IDS.read_bytes()).decode().splitlines(keepends=True)
    (root / "ids.csv").write_text("".join(lines[:49]))                       # 48 rows: 3 batches of 16
    files["ids"] = root / "ids.csv"
    files["example_ids"] = EXAMPLE_IDS
    (root / "ïds €.csv").write_text("".join(lines[:33]))                    # a unicode name, 32 rows
    files["unicode_ids"] = root / "ïds €.csv"
    undecodable = os.fsdecode(os.fsencode(str(root)) + b"/ids-\xe9t\xe9.csv")
    Path(undecodable).write_text("".join(lines[:17]))
    files["undecodable_ids"] = Path(undecodable)
    (root / "ids.tsv.csv").write_text("".join(line.replace(",", "\t") for line in lines[:17]))
    files["tab_ids"] = root / "ids.tsv.csv"
    header = lines[0]
    rng = np.random.default_rng(0)
    hostile_cells = ["-1", str(2**63), str(2**70), "nan", "1e400", "١٢", "x", "", "1|", "|", "1||2", "0x10",
                     "9" * 40, "1.5", " 3 ", "𝟙"]
    rows = [",".join(str(rng.choice(hostile_cells)) if rng.random() < 0.3 else str(rng.integers(0, 1000))
                     for _ in range(4)) + "\n" for _ in range(32)]
    (root / "hostile_ids.csv").write_text(header + "".join(rows))
    files["hostile_ids"] = root / "hostile_ids.csv"
    (root / "empty.csv").write_text("")
    files["empty_ids"] = root / "empty.csv"
    (root / "header_only.csv").write_text(header)
    files["header_only_ids"] = root / "header_only.csv"
    (root / "binary.csv.gz").write_bytes(b"\x1f\x8b\x08\x00garbage" + bytes(range(256)))
    files["corrupt_gz"] = root / "binary.csv.gz"
    (root / "ids.parquet").write_bytes(b"PAR1 not really parquet PAR1")
    files["fake_parquet"] = root / "ids.parquet"
    shards = root / "shards"
    scwork.datasets.write_synthetic_parquet(shards, 2, rows_per_shard=24,
                                            features=["user_id", "clicked", "viewed", "category"],
                                            vocab_size=1000, seed=1)
    files["shards"] = shards
    files["shard_glob"] = shards / "*.parquet"
    (root / "empty_dir").mkdir()
    files["empty_dir"] = root / "empty_dir"
    files["missing"] = root / "missing" / "nothing.csv"
    files["file_as_dir"] = root / "small.toml" / "inside.csv"
    # Config files: empty, not UTF-8, not TOML, JSON, odd values.
    broken = {
        "empty.toml": "",
        "garbage.toml": "\x00\x01[[[ = =\n",
        "wrong_types.toml": example.replace("num_chips = 4", 'num_chips = "four"'),
        "huge.toml": example.replace("num_chips = 4", "num_chips = 1000000000")
                            .replace("vocab_size = 1_000", "vocab_size = 1_000_000_000_000_000"),
        "huge_batch.toml": example.replace("batch_size = 4096", "batch_size = 4611686018427387904"),
        "negative.toml": example.replace("embedding_dim = 16", "embedding_dim = -16"),
        "float.toml": example.replace("batch_size = 4096", "batch_size = nan"),
        "unicode.toml": example.replace('name = "user"', 'name = "ユーザー\\u0000"')
                               .replace('"user"', '"ユーザー"'),
        "no_chip.toml": example.replace('chip = "v5p"', "sparsecores_per_chip = 4"),
        "not_a_table.toml": "tables = 3\n",
        "config.json": json.dumps({"batch_size": 16, "topology": {"chip": "v5p", "num_chips": 1},
                                   "tables": [{"name": "t", "vocab_size": 10**30, "embedding_dim": 8}]}),
        "config.yaml": "batch_size: 16\n",
    }
    for name, text in broken.items():
        (root / name).write_text(text, encoding="utf-8", errors="surrogatepass")
        files[f"config:{name}"] = root / name
    (root / "latin1.toml").write_bytes("name = 'é'".encode("latin-1"))
    files["config:latin1.toml"] = root / "latin1.toml"
    (root / "big.toml").write_text(NOT_FITTING)              # valid, but does not fit (exit 1)
    files["big_config"] = root / "big.toml"
    (root / "loop").symlink_to(root / "loop")               # a symlink to itself: ELOOP on open
    files["symlink_loop"] = root / "loop"
    (root / "dangling.toml").symlink_to(root / "nowhere.toml")
    files["config:dangling.toml"] = root / "dangling.toml"
    # Limits files for `memory --limits-file`.
    from scwork.sharding import write_limits

    write_limits({"user": (64, 32), "item": (512, 256), "category": (64, 32)}, root / "limits.json")
    files["limits"] = root / "limits.json"
    (root / "limits_bad.json").write_text('{"format": "scwork-limits", "stacks": {"user": [1e400, -1]}}')
    files["limits_bad"] = root / "limits_bad.json"
    (root / "limits.csv").write_text("stack,max_ids_per_partition,max_unique_ids_per_partition\nuser,nan,-1\n")
    files["limits_bad_csv"] = root / "limits.csv"
    (root / "cases").mkdir()
    return {"root": root, "files": files, "small_config": small.encode(),
            "limits_json": (root / "limits.json").read_bytes()}


# ======================================================================================
# hostile values
# ======================================================================================
HOSTILE_NUMBERS = ("0", "-1", "-7", str(2**40), str(2**62), str(16 * 10**20), "0.9999999999999999", "nan", "NaN",
                   "inf", "-inf", "1e400", "-1e400", "1e308", "1e-400",
                   str(2**31), str(2**63), str(2**64), "9" * 400, "1.5", "", " ", "\u0663", "\uff11\uff12",
                   "0x10", "1_000", "+5", "1e3", "-0", "½", "Ⅻ", "1,5")
HOSTILE_SIZES = ("1e400", "-1", "0", "nan", "inf", "1" * 100, "0.5", "1.5 GiB", "4GiB", "1000000TB",
                 "9223372036854775808", "64MiB", "1 KiB", "12 parsecs", "", "\u0661KiB", "1e18")


def hostile_text(max_size: int = 12):
    """Any text a shell can pass (no NUL: argv strings cannot hold one)."""
    return st.text(alphabet=st.characters(exclude_characters="\x00", exclude_categories=("Cs",)),
                   max_size=max_size)


def numbers(*valid: str):
    """Option values: valid ones, hostile ones, any integer, any float."""
    return st.one_of(st.sampled_from(valid) if valid else st.nothing(), st.sampled_from(HOSTILE_NUMBERS),
                     st.integers(-2**70, 2**70).map(str), st.floats(allow_nan=True).map(repr), hostile_text(6))


def relative_paths():
    """Relative paths (they land in the case's folder): text, never absolute nor leaving it."""
    return hostile_text(16).filter(lambda t: t and not t.startswith(("/", "~")) and ".." not in t
                                   and not t.startswith("-"))


# ======================================================================================
# one case
# ======================================================================================
def _snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder`` with a hash of its content."""
    out = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        out[key] = "dir" if path.is_dir() else hashlib.sha1(path.read_bytes()).hexdigest()
    return out


def _run(surface: str, command: str, argv: list[str], case_dir: Path) -> None:
    """Run ``scwork *argv`` in ``case_dir`` and check its exit status, output and files."""
    before = _snapshot(case_dir)
    stdout_bytes, stderr_bytes = io.BytesIO(), io.BytesIO()
    # As a terminal with a UTF-8 locale: strict stdout, backslash-escaping stderr.
    stdout = io.TextIOWrapper(stdout_bytes, encoding="utf-8", errors="strict", write_through=True)
    stderr = io.TextIOWrapper(stderr_bytes, encoding="utf-8", errors="backslashreplace", write_through=True)

    def call() -> int:
        cwd = os.getcwd()
        os.chdir(case_dir)
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(contextlib.redirect_stdout(stdout))
                stack.enter_context(contextlib.redirect_stderr(stderr))
                stack.enter_context(mock.patch.object(cli, "_ONE_LINE_ERRORS", (ScworkError,)))
                stack.enter_context(mock.patch.object(os, "execv", _exec))
                stack.enter_context(mock.patch.object(os, "chdir", lambda path: None))
                try:
                    status = cli.main(argv)
                except SystemExit as exit_:      # argparse: --help (0) and usage errors (2)
                    code = exit_.code
                    status = code if isinstance(code, int) else (0 if code is None else 2)
                except _Served:
                    status = 0
        finally:
            os.chdir(cwd)
        if status == cli.EXIT_BAD_INPUT:
            raise _ExitedBadInput()
        return status

    status, error = check_surface(surface, call, seconds=30)
    # File names that are not UTF-8 come out as their original bytes (see cli._paths_print_as_given).
    out = stdout_bytes.getvalue().decode("utf-8", errors="surrogateescape")
    err = stderr_bytes.getvalue().decode("utf-8", errors="surrogateescape")
    if error is not None:
        if not isinstance(error, _ExitedBadInput):      # a typed error escaped main (it must catch them all)
            report_wrong(surface, f"{type(error).__name__} escaped main: {error}")
        status = cli.EXIT_BAD_INPUT
    if os.environ.get("SCWORK_FUZZ_CLI_TRACE"):         # to see what the cases do: argv, status, first lines
        print(f"\n{surface} {argv!r} -> {status}: {(err or out).strip()[:200]!r}", file=sys.__stderr__)
    shown = f"scwork {argv!r}: status {status}, stdout {out[:300]!r}, stderr {err[:600]!r}"
    allowed = (0, 1, 2) if command in _MAY_NOT_FIT else (0, 2)
    if status not in allowed:
        report_wrong(surface, f"exit status {status} not in {allowed}: {shown}")
    if "Traceback" in err or "Traceback" in out:
        report_wrong(surface, f"a traceback: {shown}")
    if status == 2:
        if err.count("\n") != 1 or not err.startswith("scwork") or out:
            report_wrong(surface, f"not a one-line error: {shown}")
    elif "--json" in argv and "--help" not in argv and "-h" not in argv and command != "lab":
        try:
            json.loads(out)
        except ValueError:
            report_wrong(surface, f"--json printed no JSON: {shown}")
    after = _snapshot(case_dir)
    leftovers = [name for name in after if "scwork-tmp" in name or name.endswith(".tmp")]
    if leftovers:
        report_wrong(surface, f"temporary files left behind {leftovers}: {shown}")
    if status != 0 and after != before:
        changed = sorted(set(after.items()) ^ set(before.items()))
        report_wrong(surface, f"exit status {status} but files changed {changed[:4]}: {shown}")


def _exec(path, args):
    raise _Served(path)


@contextlib.contextmanager
def _case_dir(workspace):
    """A fresh folder with a file, a folder and an existing output to overwrite."""
    folder = Path(tempfile.mkdtemp(dir=workspace["root"] / "cases"))
    (folder / "a_file").write_text("a file, not a folder")
    (folder / "existing.json").write_text("old content")
    (folder / "a_folder.json").mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        for suffix in (".toml", ".json"):                             # a mutated input (see _hostile_inputs)
            with contextlib.suppress(OSError):
                os.unlink(folder.parent / f"{folder.name}{suffix}")


@dataclasses.dataclass(frozen=True)
class Opt:
    """One argument of a command: its valid values and its hostile ones."""

    name: str | None
    """``--option``; None for the positional argument."""
    valid: Any = None
    """Strategy of valid values; None for a flag."""
    hostile: Any = None
    """Strategy of hostile values; None when there are none (a flag, a choice argparse checks)."""
    odds: int = 2
    """Given one time in ``odds`` (1: always, e.g. a required option; 0: only with a hostile value)."""


def _argv(data, command: str, options: list[Opt]) -> list[str]:
    """``[command, ...]``: valid values everywhere but one hostile argument, or several, or none."""
    keys = [o.name or "positional" for o in options if o.hostile is not None]
    broken = data.draw(st.sampled_from([None] * len(keys) + ["several", *keys]), label="broken")
    argv = [command]
    for o in options:
        key = o.name or "positional"
        hostile = o.hostile is not None and (broken == key or (broken == "several"
                                                               and data.draw(st.integers(0, 2), label="hostile?") == 0))
        if not (hostile or o.odds == 1 or (o.odds and data.draw(st.integers(0, o.odds - 1), label=f"{key}?") == 0)):
            continue
        if o.valid is None:
            argv.append(o.name)
            continue
        value = data.draw(o.hostile if hostile else o.valid, label=key)
        argv += [value] if o.name is None else [o.name, value]
    return argv


def _files(workspace, *names: str) -> list[str]:
    return [str(workspace["files"][n]) for n in names]


def _hostile_inputs(workspace, case_dir: Path, *names: str, seed: str = "small_config", suffix: str = ".toml"):
    """Paths that are not valid inputs: broken files, missing ones, folders, odd text, a mutated copy of ``seed``."""
    mutated_path = case_dir.parent / f"{case_dir.name}{suffix}"      # outside the case's folder: not an output

    def write(raw: bytes) -> str:
        mutated_path.write_bytes(raw)
        return str(mutated_path)

    return st.one_of(st.sampled_from([*_files(workspace, "missing", "file_as_dir", "empty_dir", "symlink_loop",
                                              *names), str(case_dir)]),
                     relative_paths(), mutated_bytes(workspace[seed]).map(write))


def _output_files(case_dir: Path):
    return st.sampled_from(["out.json", "out.csv", "existing.json", "ü €.json", str(case_dir / "abs.csv")])


def _hostile_output_files():
    return st.one_of(st.sampled_from(["a_folder.json", "a_file/x.json", "missing/x.json", "out.txt", "out",
                                      "x" * 300 + ".json", ".json", "fdo"]),
                     relative_paths().map(lambda t: t + ".json"), relative_paths())


def _output_dirs():
    return st.sampled_from(["fdo", "new/deep/fdo", "ü fdo", "a_folder.json"])


def _hostile_output_dirs():
    return st.one_of(st.sampled_from(["a_file", "a_file/sub", "existing.json", "y" * 300, "out.json"]),
                     relative_paths())


CONFIGS = ("config:empty.toml", "config:garbage.toml", "config:wrong_types.toml", "config:huge.toml",
           "config:huge_batch.toml", "config:negative.toml", "config:float.toml", "config:unicode.toml",
           "config:no_chip.toml", "config:not_a_table.toml", "config:config.json", "config:config.yaml",
           "config:latin1.toml", "ids")
BAD_IDS = ("hostile_ids", "empty_ids", "header_only_ids", "corrupt_gz", "fake_parquet", "config", "tab_ids")


# ======================================================================================
# the surfaces
# ======================================================================================
@settings(**_SETTINGS)
@given(data=st.data())
def test_stats(workspace, data):
    with _case_dir(workspace) as case_dir:
        argv = _argv(data, "stats", [
            Opt(None, st.sampled_from(_files(workspace, "ids", "unicode_ids", "undecodable_ids", "shards",
                                             "shard_glob")),
                _hostile_inputs(workspace, case_dir, *BAD_IDS), odds=1),
            Opt("--config", st.sampled_from(_files(workspace, "config", "config", "undecodable_config")),
                _hostile_inputs(workspace, case_dir, *CONFIGS), odds=1),
            Opt("--batch-size", st.sampled_from(["16", "32", "48"]), numbers(), odds=2),
            Opt("--out", _output_files(case_dir), _hostile_output_files()),
            Opt("--fdo-dir", _output_dirs(), _hostile_output_dirs()),
            Opt("--fdo-format", st.sampled_from(["npz", "csv"]), st.sampled_from(["parquet", "ü", ""]), odds=3),
            Opt("--steps", st.sampled_from(["1", "2"]), numbers(), odds=3),
            Opt("--method", st.sampled_from(["percentile"]), st.sampled_from(["max", "mean"]), odds=4),
            Opt("--percentile", st.sampled_from(["50", "99", "100"]), numbers(), odds=3),
            Opt("--on-out-of-vocabulary", st.sampled_from(["error", "drop"]), st.sampled_from(["ignore", ""]),
                odds=4),
            Opt("--scheduler", None, st.sampled_from(["sync", "", "ü", "nonsense", "threads"]), odds=0),
            Opt("--keep-remainder", odds=3), Opt("--no-progress"), Opt("--json"),
        ])
        _run("cli.stats", "stats", argv, case_dir)


@settings(**_SETTINGS)
@given(data=st.data())
def test_memory(workspace, data):
    with _case_dir(workspace) as case_dir:
        argv = _argv(data, "memory", [
            Opt("--config", st.sampled_from(_files(workspace, "config", "example_config", "big_config",
                                                   "undecodable_config")),
                _hostile_inputs(workspace, case_dir, *CONFIGS), odds=1),
            Opt("--batch-size", st.sampled_from(["16", "4096", "65536"]), numbers(), odds=3),
            Opt("--num-chips", st.sampled_from(["1", "2", "8", "64"]), numbers(), odds=3),
            Opt("--num-serialized-tables", st.sampled_from(["0", "1", "2"]), numbers(), odds=4),
            Opt("--maximum-parallel-iterations", st.sampled_from(["1", "2"]), numbers(), odds=4),
            Opt("--dense-weights-bytes", st.sampled_from(["4GiB", "0", "1.5 GiB", "64MiB"]),
                st.one_of(st.sampled_from(HOSTILE_SIZES), hostile_text(8)), odds=3),
            Opt("--dtype", st.sampled_from(["f32", "bf16", "f16", "s8"]), st.sampled_from(["f64", "ü", "", "F32"]),
                odds=4),
            Opt("--headroom", st.sampled_from(["0", "0.1", "0.5"]), numbers(), odds=3),
            Opt("--limits", st.sampled_from(["512,256", "8,8", "64,32"]), st.one_of(
                st.sampled_from(["0,0", "a,b", "1e400,1", "9" * 30 + ",1", "1,2,3", "-1,5", ",", ""]),
                st.tuples(numbers(), numbers()).map(",".join)), odds=3),
            Opt("--limits-file", st.just(str(workspace["files"]["limits"])),
                _hostile_inputs(workspace, case_dir, "limits_bad", "limits_bad_csv", "config", seed="limits_json",
                                suffix=".json"), odds=3),
            Opt("--stage-gather-operands-in-hbm", odds=3), Opt("--json"),
        ])
        _run("cli.memory", "memory", argv, case_dir)


@settings(**_SETTINGS)
@given(data=st.data())
def test_summary(workspace, data):
    with _case_dir(workspace) as case_dir:
        argv = _argv(data, "summary", [
            Opt("--config", st.sampled_from(_files(workspace, "config", "config", "big_config",
                                                   "undecodable_config")),
                _hostile_inputs(workspace, case_dir, *CONFIGS), odds=1),
            Opt(None, st.sampled_from(_files(workspace, "ids", "unicode_ids", "undecodable_ids", "shards",
                                             "shard_glob")),
                _hostile_inputs(workspace, case_dir, *BAD_IDS), odds=2),
            Opt("--batch-size", st.sampled_from(["16", "32"]), numbers(), odds=2),
            Opt("--tc-forward-us", st.sampled_from(["0", "100", "1000"]), numbers(), odds=3),
            Opt("--tc-backward-us", st.sampled_from(["0", "200", "2000"]), numbers(), odds=3),
            Opt("--json"),
        ])
        _run("cli.summary", "summary", argv, case_dir)


TOPOLOGIES = ("ring:1", "ring:0", "ring:-3", "torus:0x4", "torus:1e400", "torus:999999x999999", "torus:64x64x64",
              "grid:4x4:wrap=1x", "grid:4x4", "ring:\u0668", "ring:" + "9" * 50, "cube:4", "", ":", "torus:",
              "ring:8:wrap=1", "torus:4x4x4x4", "ring:2.5", "torus:4x", "x")


@st.composite
def _made_topologies(draw):
    """KIND:DIMS[:wrap=FLAGS] with dims from tiny to absurd."""
    kind = draw(st.sampled_from(["ring", "line", "torus", "mesh", "grid"]))
    dims = draw(st.lists(st.one_of(st.integers(-2, 6), st.sampled_from([0, 10**6, 2**63, 10**30])),
                         min_size=1, max_size=4))
    flags = "".join(draw(st.sampled_from("01x")) for _ in dims)
    return f"{kind}:{'x'.join(map(str, dims))}" + (f":wrap={flags}" if kind == "grid" else "")


@settings(**_SETTINGS)
@given(data=st.data())
def test_allreduce(workspace, data):
    algorithms = list(cli.ALL_REDUCE_ALGORITHMS) + ["reduce_scatter", "all_gather", "all_to_all"]
    with _case_dir(workspace) as case_dir:
        argv = _argv(data, "allreduce", [
            Opt("--topology", st.sampled_from(["ring:8", "line:4", "torus:4x4", "mesh:2x3", "grid:4x2:wrap=10",
                                               "torus:2x2x2", "TORUS:4X4", " ring:8 "]),
                st.one_of(st.sampled_from(TOPOLOGIES), _made_topologies(), hostile_text(10)), odds=1),
            Opt("--cores-per-chip", st.sampled_from(["1", "2", "4"]), numbers(), odds=3),
            Opt("--algorithm", st.sampled_from(algorithms),
                st.one_of(st.sampled_from(["warp_drive", "", "RING"]), hostile_text(6)), odds=3),
            Opt("--bytes", st.sampled_from(["64MiB", "1", "4096", "1 KiB"]),
                st.one_of(st.sampled_from(HOSTILE_SIZES), hostile_text(8)), odds=2),
            Opt("--chip", st.sampled_from(["v5e", "v5p", "v4", "tpu7x", "bm1684x"]),
                st.sampled_from(["v9", "", "ü", "V5P"]), odds=3),
            Opt("--pipeline-chunks", st.sampled_from(["1", "4"]), numbers(), odds=3),
            Opt("--all", odds=4), Opt("--json"),
        ])
        _run("cli.allreduce", "allreduce", argv, case_dir)


LAYOUTS = ("f32[3,5]{1,0:T(2,2)}", "bf16[4,8]{1,0:T(2,4)(2,1)}", "f32[128,256]{1,0:T(8,128)}", "f32[2,3,4]",
           "pred[7]{0:T(1024)}", "s8[16,16]{1,0:T(8,128)(4,1)}", "f32[]")
HOSTILE_LAYOUTS = ("f32[123,456,789]{1:T(2,*,128)}", "f32[3,", "", "f32[2147483647,2147483647]{1,0:T(8,128)}",
                   "f32[99999999999999999999]", "f32[-1]", "f32[1e400]", "f32[\u0663]", "f32[3,5]{1,0:T(0,2)}",
                   "f32[3,5]{1,0:T(-1,2)}", "f32[3,5]{0,0}", "c128[2,2]{1,0:T(1,1)}", "f32[4,4]{1,0:T(2,2)S(5)}",
                   "f32[" + ",".join(["2"] * 64) + "]")


@settings(**_SETTINGS)
@given(data=st.data())
def test_layout(workspace, data):
    with _case_dir(workspace) as case_dir:
        argv = _argv(data, "layout", [
            Opt(None, st.sampled_from(LAYOUTS), st.one_of(
                st.sampled_from(HOSTILE_LAYOUTS), hostile_text(20).map(lambda t: " " + t),
                st.sampled_from(LAYOUTS).map(lambda t: t.replace("3", "9" * 20).replace("4", "-4"))), odds=1),
            Opt("--json"),
        ])
        _run("cli.layout", "layout", argv, case_dir)


@settings(**_SETTINGS)
@given(data=st.data())
def test_hardware_warmup_and_lab(workspace, data):
    with _case_dir(workspace) as case_dir:
        command = data.draw(st.sampled_from(["hardware", "warmup", "lab"]), label="command")
        if command == "hardware":
            argv = _argv(data, "hardware", [
                Opt(None, st.sampled_from(["v4", "v5e", "v5p", "v6e", "tpu7x", "bm1684x"]),
                    st.one_of(st.sampled_from(["V5P", "v9", "", " "]), hostile_text(8).map(lambda t: " " + t))),
                Opt("--json")])
        elif command == "warmup":
            argv = _argv(data, "warmup", [Opt("--no-progress"), Opt("--json")])
        else:
            argv = _argv(data, "lab", [
                Opt("--no-browser"),
                Opt("--port", st.sampled_from(["0", "8888", "65535"]), numbers("65536", "70000")),
                Opt("--dir", st.sampled_from([str(ROOT), str(ROOT / "notebooks")]),
                    st.one_of(st.sampled_from([str(case_dir), *_files(workspace, "missing", "config")]),
                              relative_paths())),
                Opt("--token", st.sampled_from(["", "abc"]), hostile_text(8).map(lambda t: " " + t), odds=3),
            ])
        _run(f"cli.{command}", command, argv, case_dir)


@settings(**_SETTINGS)
@given(data=st.data())
def test_any_argument_list(workspace, data):
    """Tokens in any order: commands, their options, odd text (mostly usage errors, exit 2)."""
    commands = ["layout", "hardware", "warmup", "stats", "memory", "summary", "allreduce"]
    tokens = [*commands, "--json", "--config", str(workspace["files"]["config"]), "--topology", "ring:4",
              "--batch-size", "16", "--out", "out.json", "--help", "-h", "--", "-", "--bytes", "1e400", "--port",
              "-1", "--all", str(workspace["files"]["ids"]), "--steps", "nan", "--limits", "1,1", "--fdo-dir",
              "a_file"]
    with _case_dir(workspace) as case_dir:
        argv = data.draw(st.lists(st.one_of(st.sampled_from(tokens), hostile_text(6)), max_size=8), label="argv")
        if "lab" in argv:
            return                           # lab's options are covered above (with execv replaced)
        # argparse takes the first token that is not an option as the command.
        command = next((t for t in argv if not t.startswith("-")), "none")
        _run("cli.argv", command, argv, case_dir)
