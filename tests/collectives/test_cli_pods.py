"""``scwork allreduce`` on pods: streamed, or refused with one typed line (exit 2).

Never a traceback or MemoryError: sizes beyond the engine's limits (network nodes,
bytes per node, transfer records to stream, memory) end in ``scwork allreduce:
error: ...`` naming the size and the limit.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scwork import cli, collectives
from scwork.collectives import schedule as schedule_module

SCWORK = [sys.executable, "-m", "scwork.cli"]


def _one_line_error(capsys, argv, *fragments):
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("scwork allreduce: error: "), err
    for fragment in fragments:
        assert fragment in err, err
    return err


def test_absurd_bytes_and_networks_are_one_line_errors(capsys):
    _one_line_error(capsys, ["allreduce", "--topology", "ring:8", "--bytes", "1000000TB"],
                    "1,000,000,000,000,000,000", "1,125,899,906,842,624", "MAX_NBYTES")
    _one_line_error(capsys, ["allreduce", "--topology", "torus:64x64x64", "--algorithm", "multi_color"],
                    "262,144 nodes", "MAX_NODES=131,072")


def test_too_many_records_to_stream_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.setattr(schedule_module, "MAX_STREAM_RECORDS", 1000)
    _one_line_error(capsys, ["allreduce", "--topology", "ring:64", "--algorithm", "ring"],
                    "8,064 transfer records", "limit of 1,000")
    # --all skips what it cannot do and says why.
    assert cli.main(["allreduce", "--topology", "ring:64", "--all", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["algorithm"] for r in data["algorithms"]} == {"single_path", "pincer"}
    assert any("limit of 1,000" in s["reason"] for s in data["skipped"])


def test_out_of_memory_is_a_one_line_error(capsys, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(collectives, "cost", no_memory)
    _one_line_error(capsys, ["allreduce", "--topology", "torus:4x4", "--algorithm", "ring"], "ran out of memory")


def test_execution_only_paths_refuse_pod_schedules():
    from scwork.errors import ConfigError

    s = collectives.build("ring", collectives.Network.torus((16, 16, 24)))
    with pytest.raises(ConfigError, match=r"75,485,184 transfers.*MAX_EXPLICIT_TRANSFERS"):
        s.explicit()
    with pytest.raises(ConfigError, match="MAX_EXPLICIT_TRANSFERS"):
        s.to_dataset()
    with pytest.raises(ConfigError, match="MAX_EXPLICIT_TRANSFERS"):
        s.messages()


@pytest.mark.slow
def test_ring_on_a_16x16x16_torus_is_fast_and_small():
    # 33.5 M transfers: 83 s and 8.6 GB RSS with explicit arrays; streamed now.
    code = ("import resource, sys; from scwork.cli import main; rc = main(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code, "allreduce", "--topology", "torus:16x16x16", "--chip",
                             "v5p", "--algorithm", "ring", "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout)["algorithms"][0]
    assert row["transfers"] == 33_546_240 and row["conflicts"] == 0 and row["steps"] == 8190
    assert int(result.stderr.split()[-1]) < 2 * 2**20  # KiB: under 2 GiB
