"""The advisor's checks on step time: host, pipelining, partition skew, precision, HBM bandwidth."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from scwork.advisor._context import balanced, collapse, Context
from scwork.advisor.findings import _fmt_s, FLAG_PIPELINING, FLAG_PREFETCH


def check_host(c: Context):
    m = c.model
    if m is None:
        return c.skip("host_preprocessing_slow", "needs a step model (host time)")
    busy = m.busy_per_step()
    others = max(busy["sc"], busy["ici"], busy["tc"])
    host = busy["host"]
    p = m.params
    if host <= others:
        return
    per_thread = (host - p.host_overhead_s) * p.host_threads
    if others <= p.host_overhead_s:
        threads = None
    else:
        threads = max(p.host_threads + 1, math.ceil(per_thread / (others - p.host_overhead_s) - 1e-9))
    if threads is not None:
        faster = m.replace(host_threads=threads)
        gain = m.step_time - faster.step_time
        basis = (f"step model re-run with host_threads={threads} (host {_fmt_s(faster.phase_time['host'])} "
                 f"<= the busiest device resource {_fmt_s(others)})")
    else:
        gain = m.step_time - m.step_time_with(durations={"host": p.host_overhead_s})
        basis = "step model with the host's per-id work removed (host_overhead_s alone exceeds the device)"
    if not c.worth(gain):
        return
    c.add(id="host_preprocessing_slow", title="Host preprocessing is slower than the device step",
          severity="warning",
          evidence={"host_time_s": host, "busiest_device_resource_s": others, "host_threads": p.host_threads,
                    "host_ids_per_step": float(m.detail["host_ids"].max()), "host_ids_per_s": p.host_ids_per_s,
                    "threads_needed": threads},
          fix=(f"preprocess with {threads} threads per host (or faster preprocessing); prefetch more input "
               "steps" if threads else "cut the fixed host overhead per step; prefetch more input steps"),
          flags=("host_threads", FLAG_PREFETCH), gain_s=gain, gain_basis=basis)


def check_pipelining(c: Context):
    m = c.model
    if m is None:
        return c.skip("pipelining_off", "needs a step model")
    if m.pipelining:
        return
    gain = m.sequential_step_time - m.pipelined_step_time
    if not c.worth(gain):
        return
    c.add(id="pipelining_off", title="SparseCore and TensorCore do not overlap (pipelining off)",
          severity="warning",
          evidence={"sequential_step_s": m.sequential_step_time, "pipelined_step_s": m.pipelined_step_time,
                    "speedup": m.speedup, "staleness_steps_if_on": m.staleness_steps},
          fix=(f"set {FLAG_PIPELINING}=false; the SparseCore then uses embeddings {m.staleness_steps} step(s) "
               f"stale (updates of step i visible at step i+{m.update_offset}): check convergence"),
          flags=(FLAG_PIPELINING,), gain_s=gain,
          gain_basis="step model: sequential minus pipelined steady-state step time")


def check_skew(c: Context):
    m = c.model
    if m is not None:
        sc = np.asarray(m.durations["sc_forward"]) + np.asarray(m.durations["sc_backward"])
        mean = float(sc.mean())
        worst = float(sc.max())
        if mean <= 0 or worst <= c.t.skew_ratio * mean:
            return
        stats = m._inputs["stats"]
        raw = stats.stats if hasattr(stats, "num_minibatches") else stats
        kwargs = {}
        if hasattr(stats, "num_minibatches") or "minibatch" in raw["ids"].dims:
            kwargs = {"num_minibatches": {s: int(n) for s, n in zip(m.stacks, m.detail["num_minibatches"])},
                      "plan": m._inputs.get("plan") or getattr(stats, "plan", None), "topology": m.topology}
        even = m.replace(stats=balanced(collapse(raw, limits=False)), **kwargs)
        gain = m.step_time - even.step_time
        if not c.worth(gain):
            return
        unit = int(np.argmax(sc))
        S = m.topology.sparsecores_per_device
        c.add(id="partition_skew", title="Some SparseCores get far more ids than others (partition skew)",
              severity="warning",
              evidence={"slowest_sc_s": worst, "mean_sc_s": mean, "ratio": worst / mean,
                        "slowest_device": unit // S, "slowest_sc": unit % S},
              fix=("spread hot ids: shuffle ids during mini-batching for stacked hot tables, stack the hot table "
                   "with others (shard rotation moves its hot ids to other chips), or re-hash ids; then set "
                   "balanced per-table limits"),
              flags=("rotation (plan_stacking)", "max_ids_per_partition"), gain_s=gain,
              gain_basis="step model re-run with each source SparseCore's ids spread evenly over the partitions")
        return
    if c.stats is None:
        return c.skip("partition_skew", "needs a step model or stats")
    s = collapse(c.stats)
    load = s["ids"].sum(("device", "sc"))                                  # (stack, partition)
    for stack in map(str, load["stack"].values):
        # str(): the coordinate's numpy strings would print as np.str_('name') in the title (numpy 2 repr).
        row = load.sel(stack=stack).values.astype(float)
        mean = row.mean()
        if mean > 0 and row.max() > c.t.skew_ratio * mean:
            c.add(id="partition_skew", title=f"Partition skew in stack {stack!r}", severity="warning",
                  evidence={"max_partition_ids": int(row.max()), "mean_partition_ids": float(mean),
                            "ratio": float(row.max() / mean), "hot_partition": int(row.argmax())},
                  fix="spread hot ids (shuffle during mini-batching, stacking rotation, re-hashing)",
                  flags=("rotation (plan_stacking)", "max_ids_per_partition"), stack=stack,
                  gain_basis="no step model: time not estimated")


def check_precision(c: Context):
    m = c.model
    plan = c.plan or (m._inputs.get("plan") if m is not None else None)
    if m is None and plan is None:
        return c.skip("fp32_where_lower_precision_would_do", "needs a step model or a plan")
    if m is not None:
        f32 = [s.name for s in m._stacks if s.dtype == "f32"]
    elif c.dtype is None and c.memory is not None:
        f32 = [st.name for st in c.memory.model.stacks if st.dtype == "f32"]
    else:
        dt = c.dtype or "f32"
        f32 = [st.name for st in plan.stacks if (dt.get(st.name, "f32") if isinstance(dt, Mapping) else dt) == "f32"]
    if not f32:
        return
    gain = None
    basis = []
    if m is not None:
        current = {s.name: s.dtype for s in m._stacks}
        what = m.replace(dtype={**current, **{s: "bf16" for s in f32}})
        gain = m.step_time - what.step_time
        basis.append("step model re-run with bf16 tables (rows of 16 elements per 32-byte granule, 16-lane SIMD "
                     "where the chip has it)")
        if not gain > 0:
            # bf16 does not shorten this step (another resource bounds it): no time gain to offer.
            basis[-1] += f": no time gain (step time {_fmt_s(m.step_time)} -> {_fmt_s(what.step_time)})"
            gain = None
    saved_bf16 = saved_s8 = None
    if plan is not None:
        from scwork.quant import hbm_savings

        tables = [t.table for st in plan.stacks if st.name in f32 for t in st.tables]
        bf = hbm_savings(tables, topology=plan.topology, to_dtype="bf16")
        s8 = hbm_savings(tables, topology=plan.topology, to_dtype="s8")
        chips = plan.topology.num_chips
        saved_bf16 = bf["saved_bytes"] // chips
        saved_s8 = s8["saved_bytes"] // chips
        basis.append("scwork.quant.hbm_savings (tables only, padded to 32-byte lines) per chip")
    if not (c.worth(gain) or (saved_bf16 or 0) > 0):
        return
    c.add(id="fp32_where_lower_precision_would_do", title=f"{len(f32)} stack(s) stored and gathered in FP32",
          severity="info",
          evidence={"f32_stacks": f32, "step_gain_bf16_s": gain, "table_bytes_saved_bf16_per_chip": saved_bf16,
                    "table_bytes_saved_int8_per_chip": saved_s8},
          fix=("try bf16 tables, or int8 with simulated quantization (quantization_config_num_buckets=256, "
               "quantization_config_low/high from scwork.quant.calibrate); check the error with "
               "scwork.quant.sweep / pooled_error_stats first"),
          flags=("dtype", "quantization_config_num_buckets", "quantization_config_low", "quantization_config_high"),
          gain_s=gain, gain_bytes=saved_bf16,
          gain_basis="; ".join(basis))


def check_bandwidth(c: Context):
    m = c.model
    if m is None:
        return c.skip("hbm_bandwidth_saturation", "needs a step model")
    util = m.utilization()
    busy = m.busy_per_step()
    if busy["sc"] < max(busy["host"], busy["ici"], busy["tc"]) or util["sc"] < c.t.sc_bound_utilization:
        return
    d = m.detail
    sc_total = np.asarray(m.durations["sc_forward"]) + np.asarray(m.durations["sc_backward"])
    u = int(np.argmax(sc_total))
    dma = d["dma_time"].reshape(len(m.stacks), 2, -1)[:, :, u].sum()
    vec = d["vector_time"].reshape(len(m.stacks), 2, -1)[:, :, u].sum()
    if dma < vec:
        return
    T = m.chip.tiles_per_sparsecore
    moved = float(d["dma_bytes"].reshape(len(m.stacks), 2, -1)[:, :, u].sum() * T)
    from scwork.pipeline.params import DTYPE_SIZES

    eff = {s.name: round(s.dim * DTYPE_SIZES[s.dtype] / (int(g) * m.chip.dma_granule_bytes), 3)
           for s, g in zip(m._stacks, d["row_granules"])}
    gain = m.step_time - m.step_time_with(scale={"sc_forward": 0.5, "sc_backward": 0.5})
    if not c.worth(gain):
        return
    narrow = [k for k, v in eff.items() if v < 0.5]
    c.add(id="hbm_bandwidth_saturation", title="SparseCore HBM traffic bounds the step", severity="warning",
          evidence={"sc_busy_per_step_s": busy["sc"], "sc_utilization": util["sc"], "dma_s": float(dma),
                    "vector_s": float(vec), "bytes_moved_by_busiest_sc": moved,
                    "row_gather_efficiency": eff},
          fix=("more chips (fewer ids per SparseCore), fewer lookups per sample, wider features instead of many "
               "narrow ones" + (f"; narrow stacks {narrow} move mostly padding (32-byte granules)" if narrow else "")),
          flags=("num_chips", "embedding_dim", "valency"), gain_s=gain,
          gain_basis="step model with SparseCore phases halved (twice the chips at the same global batch halves "
                     "the ids per SparseCore; other phases unchanged)")
