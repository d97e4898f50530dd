"""The ``scwork`` command.

Subcommands (every one takes ``--help``; most take ``--json`` for machine-readable
output):

``scwork stats IDS --config model.toml``
    Per-stack limits from real ids: IDS is a CSV/TSV/Parquet file (one row per
    sample, one column per feature) or a directory / glob of shards. Prints the
    observed max ids, max unique ids per partition and required buffer size over
    the steps, and the tuned limits; ``--out limits.json|.csv`` writes them,
    ``--fdo-dir DIR`` writes jax-tpu-embedding FDO stats (``--fdo-format csv`` for
    the CSV client's files). Rows after the last full
    batch are not used (a note on stderr says how many) unless ``--keep-remainder``.
    Try ``scwork stats examples/ids.csv.gz --config examples/model.toml``.
``scwork memory --config model.toml``
    Does the model fit in SPMEM and HBM? Exit status 0 when it fits, 1 when it
    does not, 2 on bad input.
``scwork summary --config model.toml [IDS]``
    The plan summary (:func:`scwork.summary.plan_summary`): per chip HBM and SPMEM
    against capacity; with IDS also the load per chip, the partition imbalance and
    divergence, the observed counts against the limits and the critical path, from
    the first full batch. Exit status 1 when the plan does not fit.
``scwork plan --config model.toml IDS... [--chips v5p:4,8,16] [--out plan.toml]``
    Search stackings, limits, static buffers, mini-batching, per-chip batch sizes and
    slices (:func:`scwork.plan.search`); prints the best plan against the library's
    default and the Pareto front; ``--out`` writes the best plan as a config file.
    Exit status 1 when no plan meets the constraints.
``scwork allreduce --topology torus:16x16``
    Cost of all-reduce algorithms (the multi-dimensional all-reduce patent [md-allreduce]) on a ring,
    torus, mesh or grid.
``scwork layout TEXT``
    Physical and tiled shape of an XLA layout, bytes, padding and a map of
    addresses.
``scwork hardware [CHIP]``
    The hardware catalog, or one chip with the source of every value.
``scwork warmup``
    Compile every numba kernel now (with a progress bar).
``scwork lab``
    JupyterLab on the tour notebook.

Exit status: 0 success; 1 only for ``scwork memory`` and ``scwork summary`` when the
model does not fit, and for ``scwork plan`` when no plan meets the constraints; 2 for bad
input (unknown option, invalid config, unreadable file,
an output that cannot be written, ...), with a one-line error on stderr and no file
written; 130 when interrupted.

Model config files are described in :mod:`scwork.config`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Sequence

from scwork._cli_allreduce import (
    ALL_REDUCE_ALGORITHMS,
    _cmd_allreduce,
    _network_text,
    parse_network_spec,
)
from scwork._cli_common import (
    EXIT_BAD_INPUT,
    EXIT_DOES_NOT_FIT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    MAX_BATCH_SIZE,
    _count,
    _fmt_bytes,
    _format,
    _json_default,
    _batch_size_arg,
    _parse_size_arg,
    _print_json,
    _print_table,
    _topology_text,
    _UsageError,
)
from scwork._cli_memory import _cmd_memory, _finding_json, _parse_limits_pair
from scwork._cli_stats import COMPILE_HINT, _cmd_stats, _kernels_compiled
from scwork._cli_summary import _cmd_summary
from scwork._cli_plan import add_plan_parser
from scwork._cli_tools import (
    MAP_MAX_COLUMNS,
    MAP_MAX_ROWS,
    TOUR,
    _cmd_hardware,
    _cmd_lab,
    _cmd_layout,
    _cmd_warmup,
    find_notebooks_dir,
    layout_map,
)
from scwork.errors import ScworkError

__all__ = ["main", "build_parser", "find_notebooks_dir", "parse_network_spec"]

# The helpers above are re-exported: ``scwork.cli`` stays the one place to import them from.
_REEXPORTED = (ALL_REDUCE_ALGORITHMS, MAX_BATCH_SIZE, _network_text, EXIT_DOES_NOT_FIT, EXIT_OK, _count, _fmt_bytes,
               _format,
               _json_default, _print_json, _print_table, _topology_text, _UsageError, _finding_json,
               COMPILE_HINT, _kernels_compiled, MAP_MAX_COLUMNS, MAP_MAX_ROWS, TOUR, layout_map)


def _printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``...).

    An argument holding a newline then stays on one line.
    """
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for ch in text)


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (the usage is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {_printable(message)} (see {self.prog} --help)\n")


# ======================================================================================
# parser
# ======================================================================================
def build_parser() -> argparse.ArgumentParser:
    """The ``scwork`` argument parser (one subparser per command)."""
    parser = _Parser(prog="scwork", description="SparseCore workbench",
                     epilog="exit status: 0 ok, 1 model does not fit (scwork memory, summary), 2 bad input")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    _add_lab_layout_hardware_warmup(sub)
    _add_stats_parser(sub)
    _add_memory_parser(sub)
    _add_summary_parser(sub)
    add_plan_parser(sub)
    _add_allreduce_parser(sub)
    return parser


def _add_lab_layout_hardware_warmup(sub) -> None:
    """The subparsers of ``scwork lab``, ``layout``, ``hardware`` and ``warmup``."""
    lab = sub.add_parser("lab", help="open JupyterLab on the tour notebook")
    lab.add_argument("--no-browser", action="store_true", help="print the URL and keep serving")
    lab.add_argument("--port", type=int, default=8888, help="preferred port (default 8888; a free one otherwise)")
    lab.add_argument("--dir", default=None, help="folder holding notebooks/ (default: cwd, then the checkout)")
    lab.add_argument("--token", default=None, help="access token (default: random; '' disables)")
    lab.set_defaults(func=_cmd_lab)

    lay = sub.add_parser("layout", help="describe an XLA shape with layout, e.g. 'f32[3,5]{1,0:T(2,2)}'",
                         description="Physical and tiled shape, bytes, padding and (for small 2-D views) a map "
                                     "of the buffer address of every cell of the padded view.")
    lay.add_argument("text", help="shape with layout, e.g. 'bf16[4,8]{1,0:T(2,4)(2,1)}'")
    lay.add_argument("--json", action="store_true", help="machine-readable output")
    lay.set_defaults(func=_cmd_layout)

    hw = sub.add_parser("hardware", help="list catalog chips, or describe one with its sources")
    hw.add_argument("chip", nargs="?")
    hw.add_argument("--json", action="store_true", help="machine-readable output")
    hw.set_defaults(func=_cmd_hardware)

    warm = sub.add_parser("warmup", help="compile every numba kernel now (fills numba's cache)")
    warm.add_argument("--no-progress", action="store_true", help="no progress bar (also: SCWORK_PROGRESS=0)")
    warm.add_argument("--json", action="store_true", help="machine-readable output")
    warm.set_defaults(func=_cmd_warmup)


def _add_stats_parser(sub) -> None:
    """The subparser of ``scwork stats``."""
    st = sub.add_parser(
        "stats", help="per-stack limits (max ids, max unique ids, buffer sizes) from real ids",
        description="Run the sharding engine over every batch of IDS and report, per stacked table, the "
                    "observed max ids and max unique ids per (source SparseCore, partition), the required "
                    "CSR buffer size, and limits tuned from them.")
    st.add_argument("ids", help="CSV/TSV/Parquet file (one row per sample, one column per feature; a cell "
                                "holds 'a|b|c' for several ids), or a directory / glob of shards")
    st.add_argument("--config", required=True, help="model config file (.toml or .json; see scwork.config)")
    st.add_argument("--batch-size", type=_batch_size_arg, default=None, help="global batch (default: the config's)")
    st.add_argument("--out", default=None, help="write the tuned limits here (.json or .csv)")
    st.add_argument("--fdo-dir", default=None, help="also write jax-tpu-embedding FDO stats (.npz) here")
    st.add_argument("--fdo-format", choices=("npz", "csv"), default="npz",
                    help="file format of --fdo-dir: 'npz' (NPZFileFDOClient, default) or 'csv' (CSVFileFDOClient)")
    st.add_argument("--steps", type=int, default=None, help="use at most this many batches")
    st.add_argument("--keep-remainder", action="store_true",
                    help="run the last partial batch (rows left after the full batches) as a last, smaller step; "
                         "it must divide over devices x SparseCores (default: those rows are not used, and a "
                         "note says how many)")
    st.add_argument("--method", choices=("max", "percentile"), default=None,
                    help="limit = max over steps (default), or a percentile of the steps")
    st.add_argument("--percentile", type=float, default=None,
                    help="percentile of the steps the limits cover (implies --method percentile; default 99)")
    st.add_argument("--on-out-of-vocabulary", choices=("error", "drop"), default="error",
                    help="ids >= a table's vocab_size: error (default) or drop and count them")
    st.add_argument("--scheduler", default=None,
                    help="Dask scheduler address for a directory of shards (default: local)")
    st.add_argument("--no-progress", action="store_true", help="no progress bar (also: SCWORK_PROGRESS=0)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=_cmd_stats)


def _add_memory_parser(sub) -> None:
    """The subparser of ``scwork memory``."""
    mem = sub.add_parser(
        "memory", help="does the model fit in SPMEM and HBM? (exit 0: fits, 1: does not, 2: bad input)",
        description="SPMEM per tile, HBM peak per chip, diagnoses and fixes for the model of a config file. "
                    "Exit status 0 when it fits, 1 when it does not fit, 2 on bad input.")
    mem.add_argument("--config", required=True, help="model config file (.toml or .json; see scwork.config)")
    mem.add_argument("--batch-size", type=_batch_size_arg, default=None, help="global batch (default: the config's)")
    mem.add_argument("--num-chips", type=int, default=None, help="chips (default: the config's topology)")
    mem.add_argument("--num-serialized-tables", type=int, default=None,
                     help="xla_sc_num_serialized_tables_to_optimize_hbm")
    mem.add_argument("--maximum-parallel-iterations", type=int, default=None, help="steps of input prefetched")
    mem.add_argument("--dense-weights-bytes", type=_parse_size_arg, default=None,
                     help="dense weights per chip, e.g. 4GiB")
    mem.add_argument("--dtype", default=None, help="table dtype for every table: f32, bf16, f16, s8")
    mem.add_argument("--headroom", type=float, default=None, help="share of HBM kept free (default 0.1)")
    mem.add_argument("--limits", type=_parse_limits_pair, default=None, metavar="MAX_IDS,MAX_UNIQUE",
                     help="limits for every stack without its own, e.g. 512,256")
    mem.add_argument("--limits-file", default=None, help="per-stack limits file (scwork stats --out)")
    mem.add_argument("--stage-gather-operands-in-hbm", action="store_true",
                     help="gather operands in HBM instead of SPMEM")
    mem.add_argument("--json", action="store_true", help="machine-readable output")
    mem.set_defaults(func=_cmd_memory)


def _add_summary_parser(sub) -> None:
    """The subparser of ``scwork summary``."""
    sm = sub.add_parser(
        "summary", help="plan summary: per chip HBM/SPMEM and load, imbalance, limits, critical path "
                        "(exit 1: does not fit)",
        description="The plan summary of scwork.summary.plan_summary (in the spirit of TorchRec's planner "
                    "summary): per chip HBM and SPMEM against capacity; with IDS also the load per chip, the "
                    "partition imbalance and KL divergence from uniform, the observed counts against the "
                    "limits and the critical path of the step, from the first full batch. Exit status 0 "
                    "when the plan fits, 1 when it does not, 2 on bad input.")
    sm.add_argument("ids", nargs="?", default=None,
                    help="optional ids: a CSV/TSV/Parquet file or a directory / glob of shards (as scwork stats)")
    sm.add_argument("--config", required=True, help="model config file (.toml or .json; see scwork.config)")
    sm.add_argument("--batch-size", type=_batch_size_arg, default=None, help="global batch (default: the config's)")
    sm.add_argument("--tc-forward-us", type=float, default=None,
                    help="TensorCore forward time per step in microseconds, for the critical path (with IDS)")
    sm.add_argument("--tc-backward-us", type=float, default=None,
                    help="TensorCore backward time per step in microseconds, for the critical path (with IDS)")
    sm.add_argument("--json", action="store_true", help="machine-readable output (the Datasets as plain JSON)")
    sm.set_defaults(func=_cmd_summary)


def _add_allreduce_parser(sub) -> None:
    """The subparser of ``scwork allreduce``."""
    ar = sub.add_parser(
        "allreduce", help="cost of all-reduce algorithms on a ring, torus, mesh or grid",
        description="Steps, transfers, time (alpha-beta model), algbw, busbw and link conflicts of the "
                    "all-reduce algorithms of scwork.collectives on a network of chips.")
    ar.add_argument("--topology", required=True,
                    help="ring:8, line:8, torus:16x16, mesh:4x4 or grid:16x4:wrap=10 (1/0 per dimension)")
    ar.add_argument("--cores-per-chip", type=int, default=1, help="nodes per chip (default 1)")
    ar.add_argument("--algorithm", nargs="+", default=None, metavar="NAME",
                    help="algorithms to cost (default: every all-reduce algorithm that runs on the network); "
                         "names: " + ", ".join(ALL_REDUCE_ALGORITHMS) + ", reduce_scatter, all_gather, all_to_all")
    ar.add_argument("--all", action="store_true", help="every all-reduce algorithm that runs on the network")
    ar.add_argument("--bytes", type=_parse_size_arg, default=64 * 2**20,
                    help="vector size per node, e.g. 64MiB (default), 1GB, 4096")
    ar.add_argument("--chip", default=None, help="catalog chip for the ICI bandwidth (default v5e)")
    ar.add_argument("--pipeline-chunks", type=int, default=1, help="segments per transfer (default 1: no pipelining)")
    ar.add_argument("--json", action="store_true", help="machine-readable output")
    ar.set_defaults(func=_cmd_allreduce)


#: Exit status when stdout's reader closed the pipe (128 + SIGPIPE, as the shell reports).
EXIT_BROKEN_PIPE = 141

#: Errors that end a command with a one-line message and exit status 2: scwork's typed
#: errors, and OSError as a safety net (the commands turn the ones they expect into
#: typed errors; the fuzz suite narrows this to scwork's errors to find the others).
_ONE_LINE_ERRORS: tuple[type[BaseException], ...] = (ScworkError, OSError)


@contextlib.contextmanager
def _paths_print_as_given():
    """Let stdout print file names that are not UTF-8 as the bytes they were given.

    Python holds such names (e.g. Latin-1 bytes) as surrogate escapes; a strict UTF-8
    stdout (the default outside the C locale) would fail on them with a
    UnicodeEncodeError. ``surrogateescape`` writes their original bytes back, as ``ls``
    does. The stream's error handler is restored afterwards.
    """
    stream = sys.stdout
    previous = getattr(stream, "errors", None)
    switched = False
    if previous == "strict" and hasattr(stream, "reconfigure"):
        try:
            stream.reconfigure(errors="surrogateescape")
            switched = True
        except (AttributeError, ValueError, io.UnsupportedOperation):
            pass
    try:
        yield
    finally:
        if switched:
            with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):
                stream.reconfigure(errors=previous)


def _unknown_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> None:
    """Exit with a usage error naming the subcommand and, for a misspelt option, the one meant.

    argparse reports arguments no subcommand knows from the top-level parser
    ("scwork: error: unrecognized arguments"); the subcommand's own parser says
    which command was meant, and its options are the ones to suggest.
    """
    import difflib

    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    command = sub.choices[args.command]
    message = f"unrecognized arguments: {' '.join(extra)}"
    options = [option for action in command._actions for option in action.option_strings]
    for word in extra:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.75)
            if close:
                message += f"; did you mean {close[0]}?"
                break
    command.error(message)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unknown_arguments(parser, args, extra)
    try:
        with _paths_print_as_given():
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"scwork {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`scwork hardware --json | head -c 10`): stop quietly, as
        # Unix tools do, with the status of a SIGPIPE'd process; point stdout at devnull
        # so that the interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except _ONE_LINE_ERRORS as err:
        text = str(err).strip() or type(err).__name__
        first_line = _printable(text.splitlines()[0])
        print(f"scwork {args.command}: error: {first_line}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())