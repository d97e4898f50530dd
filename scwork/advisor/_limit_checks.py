"""The advisor's checks on per-partition limits: too low (dropped ids, mini-batches) or too high."""

from __future__ import annotations

from scwork.advisor._context import collapse, configured_limits, Context, observed_limits, round8
from scwork.errors import ScworkError


def limits_below_observed(conf, obs) -> list[str]:
    """Names of the configured limits below the observed maximum (none when either is unknown)."""
    if obs is None:
        return []
    names = ("max_ids_per_partition", "max_unique_ids_per_partition")
    return [name for name, cfg, seen in zip(names, conf, obs) if cfg is not None and seen > cfg]


def one_minibatch_gain(m, stack: str, own_masks: dict[str, int] | None = None) -> float:
    """Seconds per step saved by running ``stack`` in one mini-batch (limits at the observed maximum).

    ``own_masks`` (a mini-batch plan with one split for the batch: every stack's own
    split mask) makes the what-if the library's: without ``stack``'s bits every stack
    runs ``popcount(OR of the other masks) + 1`` mini-batches, ``stack`` included.
    """
    cur = dict(zip(m.stacks, (int(x) for x in m.detail["num_minibatches"])))
    base_stats = m._inputs["stats"]
    after = {stack: 1}
    if own_masks is not None:
        rest = 0
        for name, mask in own_masks.items():
            if name != stack:
                rest |= mask
        after = dict.fromkeys(cur, bin(rest).count("1") + 1)
    if hasattr(base_stats, "num_minibatches") or "minibatch" in getattr(base_stats, "dims", {}):
        raw = base_stats.stats if hasattr(base_stats, "num_minibatches") else base_stats
        for name in after:
            cur.pop(name, None)
        what = m.replace(stats=collapse(raw, limits=False), num_minibatches={**cur, **after},
                         plan=m._inputs.get("plan") or getattr(base_stats, "plan", None), topology=m.topology)
    else:
        cur.update(after)
        what = m.replace(num_minibatches=cur)
    return m.step_time - what.step_time


def check_limits_low(c: Context):
    stats = c.stats
    if stats is None and c.minibatch is not None:
        stats = c.minibatch.stats
    if stats is None and c.model is None:
        c.skip("minibatching_overhead", "needs a mini-batch plan or a step model")
        return c.skip("limits_too_low", "needs stats, a mini-batch plan or a step model")
    m = c.model
    nmb: dict[str, int] = {}
    cut_by_others: set[str] = set()
    own_masks = None
    if c.minibatch is not None:
        nmb = {str(k): int(v) for k, v in zip(c.minibatch.num_minibatches["stack"].values,
                                              c.minibatch.num_minibatches.values)}
        asg = c.minibatch.assignment
        if getattr(c.minibatch, "split_scope", "stack") == "batch" and "stack_split_mask" in asg:
            # The batch's one split (jax-tpu-embedding ORs every stack's mask) also cuts a
            # stack within its limits: its count is the other stacks' doing, and running
            # it in one mini-batch is not an option the library has.
            own_masks = {str(k): int(v) for k, v in zip(asg["stack"].values, asg["stack_split_mask"].values)}
            cut_by_others = {k for k, v in own_masks.items() if v == 0}
    elif m is not None:
        nmb = {s: int(n) for s, n in zip(m.stacks, m.detail["num_minibatches"])}
    else:
        c.skip("minibatching_overhead", "needs a mini-batch plan or a step model")
    observed = observed_limits(stats) if stats is not None else {}
    configured = configured_limits(stats, c.plan, c.config)
    dropped = {}
    if stats is not None and "dropped_ids" in stats:
        d = collapse(stats)["dropped_ids"]
        dropped = {str(k): int(v) for k, v in zip(d["stack"].values, d.values) if int(v) > 0}
    multi = {s: n for s, n in nmb.items() if n > 1}
    for stack in sorted(set(multi) | set(dropped)):
        obs = observed.get(stack)
        conf = configured.get(stack, (None, None))
        below = limits_below_observed(conf, obs)
        gain, basis = None, "no step model: time not estimated"
        if stack in multi and m is not None:
            gain = one_minibatch_gain(m, stack, own_masks)
            basis = f"step model re-run with stack {stack!r} in one mini-batch (limits at the observed maximum)"
        evidence = {"num_minibatches": nmb.get(stack, 1), "dropped_ids": dropped.get(stack, 0),
                    "configured_max_ids_per_partition": conf[0], "configured_max_unique_ids_per_partition": conf[1]}
        if obs is not None:
            evidence.update({"observed_max_ids_per_partition": obs[0],
                             "observed_max_unique_ids_per_partition": obs[1]})
        if stack not in dropped and not below:
            if stack in cut_by_others:
                continue
            # Mini-batches no configured limit explains (set by hand, e.g. num_minibatches=4): they
            # cost SparseCore op overheads, but say nothing about the limits.
            if gain is not None and not c.worth(gain):
                continue
            why = ("no limits are configured for it" if conf == (None, None) else
                   f"its configured limits ({conf[0]}, {conf[1]}) are not below the observed maximum"
                   + (f" ({obs[0]}, {obs[1]})" if obs is not None else ""))
            c.add(id="minibatching_overhead",
                  title=f"Stack {stack!r} runs in {nmb[stack]} mini-batches that its limits do not require",
                  severity="info", evidence=evidence, stack=stack, flags=("num_minibatches",), gain_s=gain,
                  fix=(f"run stack {stack!r} in one mini-batch (num_minibatches=1): {why}; every extra "
                       "mini-batch adds a SparseCore op (sc_op_overhead_s) per direction"),
                  gain_basis=basis)
            continue
        evidence["limits_below_observed"] = below
        suggest = (None if obs is None else (round8(obs[0]), round8(obs[1])))
        if stack in dropped and stats is not None and "input_ids" in stats:
            total = int(collapse(stats)["input_ids"].sel(stack=stack).sum())
            evidence["dropped_share"] = dropped[stack] / total if total else 0.0
        fix = (f"raise the limits of stack {stack!r}"
               + (f" to max_ids_per_partition={suggest[0]}, max_unique_ids_per_partition={suggest[1]} "
                  "(observed maximum rounded up to 8)" if suggest else "")
               + ("; dropped ids change the model: keep allow_id_dropping=False unless intended"
                  if stack in dropped else "")
               + "; check SPMEM / HBM stack with scwork.memory.plan before compiling")
        severity = "warning" if stack in dropped else "info"
        if stack in multi and stack not in dropped and gain is not None and not c.worth(gain):
            continue
        c.add(id="limits_too_low", title=f"Limits of stack {stack!r} are too low "
              + ("(ids dropped)" if stack in dropped else f"({nmb[stack]} mini-batches)"),
              severity=severity, evidence=evidence, fix=fix, stack=stack,
              flags=("max_ids_per_partition", "max_unique_ids_per_partition", "allow_id_dropping",
                     "xla_sparse_core_max_ids_file"),
              gain_s=gain, gain_basis=basis if stack in multi else "accuracy: dropped ids are lost lookups")


def check_limits_high(c: Context):
    if c.stats is None:
        return c.skip("limits_too_high", "needs stats (observed limits)")
    observed = observed_limits(c.stats)
    configured = configured_limits(c.stats, c.plan, c.config)
    r = c.t.limits_high_ratio
    for stack, (cfg_ids, cfg_uniq) in sorted(configured.items()):
        if stack not in observed:
            continue
        obs_ids, obs_uniq = observed[stack]
        high_ids = cfg_ids is not None and cfg_ids > r * max(obs_ids, 1)
        high_uniq = cfg_uniq is not None and cfg_uniq > r * max(obs_uniq, 1)
        if not (high_ids or high_uniq):
            continue
        new = (round8(max(obs_ids, 1)), round8(max(obs_uniq, 1)))
        gain_bytes, basis = None, ""
        if c.memory is not None:
            try:
                smaller = c.memory.replace(stack_limits={**dict(c.memory.inputs.get("stack_limits") or {}),
                                                         stack: new})
                gain_bytes = int(c.memory.peak_hbm_bytes - smaller.peak_hbm_bytes)
                spmem_now = int(c.memory.spmem.total[list(c.memory.spmem.stacks).index(stack)])
                spmem_new = int(smaller.spmem.total[list(smaller.spmem.stacks).index(stack)])
                basis = (f"scwork.memory.plan re-run with stack_limits {new}: HBM peak per chip; SPMEM per tile "
                         f"{spmem_now} -> {spmem_new} bytes")
            except (ScworkError, ValueError) as err:
                basis = f"memory re-run failed: {err}"
        if gain_bytes is None and c.plan is not None and cfg_uniq is not None:
            from scwork.memory import hbm_stack_bytes

            st = c.plan.stack(stack)
            P = c.plan.num_partitions
            now = sum(hbm_stack_bytes(st.embedding_dim, cfg_uniq, P))
            lower = sum(hbm_stack_bytes(st.embedding_dim, min(new[1], cfg_uniq), P))
            per_chip = c.plan.topology.sparsecores_per_chip
            gain_bytes = int((now - lower) * per_chip)
            basis = ("the HBM stack formulas of [sc-guide] §9 (forward + backward, logical_replica_count = P) "
                     "x SparseCores "
                     "per chip, configured vs observed max_unique_ids_per_partition")
        c.add(id="limits_too_high", title=f"Limits of stack {stack!r} are far above what the data needs",
              severity="info",
              evidence={"configured_max_ids_per_partition": cfg_ids, "observed_max_ids_per_partition": obs_ids,
                        "configured_max_unique_ids_per_partition": cfg_uniq,
                        "observed_max_unique_ids_per_partition": obs_uniq, "ratio_threshold": r},
              fix=(f"lower the limits of stack {stack!r} towards max_ids_per_partition={new[0]}, "
                   f"max_unique_ids_per_partition={new[1]} (observed, rounded up to 8; keep margin for rarer "
                   "batches: scwork.sharding.tune_limits over many steps)"),
              flags=("max_ids_per_partition", "max_unique_ids_per_partition", "xla_sparse_core_max_ids_file"),
              gain_bytes=gain_bytes, gain_basis=basis or "not estimated (no memory report or plan)", stack=stack)
