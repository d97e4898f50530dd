"""Perfetto's trace processor reads scwork's Chrome-trace export: one slice per complete event.

An on-demand check, not part of pytest: Perfetto's Python package downloads its
``trace_processor_shell`` at run time unless given one, and CI has no network. With a
binary at hand::

    pip install perfetto pandas
    python benchmarks/check_perfetto_export.py --trace-processor /path/to/trace_processor_shell

It writes the export of a two-chip step model (the one of tests/pipeline/test_trace.py),
loads it into the trace processor and checks that the processor sees as many slices as
the file has complete ("X") events, and some counters (the HBM usage tracks). Exit
status 0 when both hold.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-processor", default=os.environ.get("SCWORK_TRACE_PROCESSOR"),
                        help="a trace_processor_shell binary (default: $SCWORK_TRACE_PROCESSOR)")
    args = parser.parse_args(argv)
    if not args.trace_processor:
        parser.error("give --trace-processor (or set SCWORK_TRACE_PROCESSOR): Perfetto would download one")
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    import scwork
    from scwork.pipeline import expected_stats, step_model, write_chrome_trace

    topo = scwork.Topology.for_chip("v5p", num_chips=2)
    stats = expected_stats({"user": 12.0, "item": 4.0}, topo, batch_size=2048, unique_fraction=0.6)
    model = step_model(stats, widths={"user": 64, "item": 16}, topology=topo, tc_forward_s=2e-4,
                       tc_backward_s=3e-4, num_minibatches={"user": 2}, num_steps=6)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_chrome_trace(model, Path(tmp) / "t.json")
        tp = TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=args.trace_processor))
        slices = int(tp.query("select count(*) as n from slice").as_pandas_dataframe()["n"][0])
        counters = int(tp.query("select count(*) as n from counter").as_pandas_dataframe()["n"][0])
        complete = sum(1 for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X")
    ok = slices == complete and counters > 0
    print(f"slices {slices} (complete events in the file: {complete}), counters {counters}: "
          f"{'ok' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
