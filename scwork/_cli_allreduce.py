"""``scwork allreduce``: the cost of all-reduce algorithms on a network of chips.

Part of :mod:`scwork.cli`.
"""

from __future__ import annotations

import argparse
import math

from scwork._cli_common import (
    EXIT_OK,
    _count,
    _fmt_bytes,
    _print_json,
    _print_table,
    _UsageError,
)
from scwork._validate import shown
from scwork.errors import ScworkError

#: Algorithms of :data:`scwork.collectives.ALGORITHMS` that compute an all-reduce (``--all``).
ALL_REDUCE_ALGORITHMS: tuple[str, ...] = (
    "single_path", "pincer", "rotated_pincer", "improved_rotated_pincer", "ring", "bidirectional_ring",
    "dimension_by_dimension", "multi_color", "mesh_loops",
)


#: Largest ``--cores-per-chip``: the cores of a chip are linked all to all, so the links
#: (and the time to cost the algorithms) grow as its square; real chips have 1 to 8.
MAX_CORES_PER_CHIP = 16


def parse_network_spec(text: str) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """``(shape, wraparound)`` of a topology spec such as ``torus:16x16`` or ``grid:16x4:wrap=10``.

    Kinds: ``ring:N`` (wraps), ``line:N`` (does not), ``torus:AxB[xC]`` (every
    dimension wraps), ``mesh:AxB[xC]`` (none wraps), ``grid:AxB[xC]:wrap=FLAGS``
    (one ``1``/``0`` per dimension).

    Raises
    ------
    ConfigError
        Malformed text; the message shows the accepted forms.

    Examples
    --------
    >>> parse_network_spec("grid:16x4:wrap=10")
    ((16, 4), (True, False))
    >>> parse_network_spec("ring:8")
    ((8,), (True,))
    """
    from scwork.errors import ConfigError

    forms = "ring:8, line:8, torus:16x16, mesh:4x4, grid:16x4:wrap=10"
    parts = text.strip().lower().split(":")
    kind = parts[0]
    if kind not in ("ring", "line", "torus", "mesh", "grid") or len(parts) < 2:
        raise ConfigError(f"topology {text!r}: expected KIND:DIMS with KIND ring, line, torus, mesh or grid, "
                          f"e.g. {forms}")
    try:
        shape = tuple(int(d) for d in parts[1].split("x"))
    except ValueError:
        raise ConfigError(f"topology {text!r}: dimensions must be integers joined by 'x', e.g. {forms}") from None
    if any(d < 1 for d in shape):
        raise ConfigError(f"topology {text!r}: every dimension needs at least one chip")
    if kind in ("ring", "line") and len(shape) != 1:
        raise ConfigError(f"topology {text!r}: a {kind} has one dimension, e.g. {kind}:8")
    if not 1 <= len(shape) <= 3:
        raise ConfigError(f"topology {text!r}: networks have 1 to 3 dimensions")
    extra = parts[2:]
    if kind == "grid":
        if len(extra) != 1 or not extra[0].startswith("wrap="):
            raise ConfigError(f"topology {text!r}: a grid needs :wrap=FLAGS, one 1/0 per dimension, "
                              "e.g. grid:16x4:wrap=10")
        flags = extra[0][5:]
        if len(flags) != len(shape) or set(flags) - {"0", "1"}:
            raise ConfigError(f"topology {text!r}: wrap={flags} must have one 1/0 per dimension "
                              f"({len(shape)} here), e.g. wrap={'1' * len(shape)}")
        return shape, tuple(f == "1" for f in flags)
    if extra:
        raise ConfigError(f"topology {text!r}: unexpected {':'.join(extra)!r}; only grid takes :wrap=FLAGS")
    if kind == "ring" and shape[0] < 2:
        raise ConfigError(f"topology {text!r}: a ring needs at least 2 chips")
    wrap = kind in ("ring", "torus")
    return shape, (wrap,) * len(shape)


def _network_text(shape: tuple[int, ...], wrap: tuple[bool, ...], cores_per_chip: int) -> str:
    """``"a ring of 8 chips"``, ``"a 4x4 torus of 16 chips, 2 cores per chip"``: a parsed spec in words."""
    chips = _count(math.prod(shape), "chip")
    if len(shape) == 1:
        text = f"a {'ring' if wrap[0] else 'line'} of {chips}"
    else:
        kind = ("torus" if all(wrap) else "mesh" if not any(wrap) else
                f"grid (wrap={','.join('T' if w else 'F' for w in wrap)})")
        text = f"a {'x'.join(map(str, shape))} {kind} of {chips}"
    return text + (f", {_count(cores_per_chip, 'core')} per chip" if cores_per_chip != 1 else "")


def _cmd_allreduce(args: argparse.Namespace) -> int:
    from scwork import collectives
    from scwork.errors import ConfigError

    shape, wrap = parse_network_spec(args.topology)
    if args.algorithm and args.all:
        raise _UsageError("give --algorithm NAME ... or --all, not both")
    from scwork.collectives.cost import MAX_PIPELINE_CHUNKS

    if not 1 <= args.pipeline_chunks <= MAX_PIPELINE_CHUNKS:
        raise _UsageError(f"--pipeline-chunks must be between 1 and {MAX_PIPELINE_CHUNKS:,} (segments per "
                          f"transfer), got {shown(args.pipeline_chunks)}")
    if args.cores_per_chip > MAX_CORES_PER_CHIP:
        raise _UsageError(f"--cores-per-chip {args.cores_per_chip:,} is more than {MAX_CORES_PER_CHIP}: the cores "
                          f"of a chip are linked all to all ({args.cores_per_chip:,} cores: "
                          f"{args.cores_per_chip * (args.cores_per_chip - 1):,} links per chip); TPU chips have "
                          "1 to 8 (TensorCores or SparseCores)")
    if args.bytes < 1:
        raise _UsageError("--bytes must be at least 1 byte")
    from scwork.collectives.schedule import MAX_NBYTES

    if args.bytes > MAX_NBYTES:
        raise _UsageError(f"--bytes {args.bytes:,} is more than the limit of {MAX_NBYTES:,} bytes per node "
                          "(scwork.collectives.schedule.MAX_NBYTES, 1 PiB)")
    net = collectives.Network.grid(shape, wrap, cores_per_chip=args.cores_per_chip, chip=args.chip)
    names = args.algorithm or list(ALL_REDUCE_ALGORITHMS)
    where = _network_text(shape, wrap, args.cores_per_chip)
    explicit = bool(args.algorithm)
    rows, skipped = [], []
    for name in names:
        try:
            schedule = collectives.build(name, net)
        except ScworkError as err:
            if explicit:
                raise ConfigError(f"algorithm {name!r} does not run on {where}: {str(err).splitlines()[0]}") \
                    from None
            skipped.append({"algorithm": name, "reason": str(err).splitlines()[0]})
            continue
        try:
            # Streams over the steps (bounded memory); refuses schedules beyond the
            # engine's limits with a ConfigError that names the size and the limit.
            c = collectives.cost(schedule, nbytes=args.bytes, pipeline_chunks=args.pipeline_chunks)
            conflicts = schedule.num_conflicts()
            transfers = schedule.num_transfers
        except MemoryError:
            raise ConfigError(f"algorithm {name!r} on {where} ({net.num_nodes:,} nodes) ran out of memory; "
                              "use a smaller network or --algorithm multi_color") from None
        except ScworkError as err:
            if explicit:
                raise
            skipped.append({"algorithm": name, "reason": str(err).splitlines()[0]})
            continue
        total = float(c["total_time"])
        rows.append({
            "algorithm": name,            # what was asked for
            "schedule": schedule.name,    # what the engine built for it (e.g. a ring for multi_color on a ring)
            "collective": schedule.collective,
            "steps": schedule.num_steps,
            "transfers": transfers,
            "time_s": total,
            "time_us": total * 1e6,
            "algbw_GBps": float(c["algbw"]) / 1e9 if math.isfinite(float(c["algbw"])) else None,
            "busbw_GBps": float(c["busbw"]) / 1e9 if math.isfinite(float(c["busbw"])) else None,
            "conflicts": conflicts,
        })
    if args.json:
        _print_json({"network": net.name, "network_description": where, "nodes": net.num_nodes,
                     "chip": args.chip or collectives.DEFAULT_CHIP,
                     "bytes": args.bytes, "pipeline_chunks": args.pipeline_chunks,
                     "link_bandwidth_Bps": float(net.link_classes["ici"].bandwidth),
                     "link_latency_s": float(net.link_classes["ici"].latency),
                     "algorithms": rows, "skipped": skipped})
        return EXIT_OK
    ici = net.link_classes["ici"]
    print(f"all-reduce of {_fmt_bytes(args.bytes)} per node on {where} ({_count(net.num_nodes, 'node')}); "
          f"ICI {ici.bandwidth / 1e9:g} GB/s per link and direction, {ici.latency * 1e6:g} us per hop")
    print("alpha-beta model (scwork.collectives.cost); busbw = algbw * 2(n-1)/n (nccl-tests)")
    print()
    if rows:
        # The name asked for first; the engine's schedule when it differs (ring -> bidirectional_ring).
        rows = [{**row, "algorithm": row["algorithm"] if row["schedule"] == row["algorithm"] else
                 f"{row['algorithm']} ({row['schedule'].replace('_', ' ')} schedule)"} for row in rows]
        _print_table(rows, ["algorithm", "steps", "transfers", "time_us", "algbw_GBps", "busbw_GBps", "conflicts"],
                     ["algorithm", "steps", "transfers", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "conflicts"])
    for s in skipped:
        print(f"  n/a {s['algorithm']}: {s['reason']}")
    return EXIT_OK
