"""The advisor's checks on memory and stacking: SPMEM, HBM stack and heap, stack sizes."""

from __future__ import annotations

from scwork.advisor._context import Context
from scwork.advisor.findings import FLAG_PREFETCH, FLAG_SERIALIZE


def check_stacking(c: Context):
    plan = c.plan or (c.model._inputs.get("plan") if c.model is not None else None)
    if plan is None:
        c.skip("too_few_stacked_tables", "needs a stacking plan")
        c.skip("too_many_stacked_tables", "needs a stacking plan")
        return
    groups: dict[tuple, list] = {}
    for st in plan.stacks:
        groups.setdefault((st.embedding_dim, st.optimizer, st.combiner), []).append(st)
    m = c.model
    for key, stacks in groups.items():
        small = [st for st in stacks if len(st.tables) < c.t.min_tables_per_stack]
        if len(small) < 2:
            continue
        k = len(small)
        gain, basis = None, "no step model: time not estimated"
        if m is not None:
            from scwork.pipeline.phase_costs import _Ici

            ici = _Ici(m.topology, m.chip, m.params)
            latency = ici.time(1e-9) if ici.N > 1 else 0.0
            gain = (k - 1) * 2 * (m.params.sc_op_overhead_s + latency)
            basis = (f"{k} stacks -> 1 saves {k - 1} SparseCore op overheads (sc_op_overhead_s) and {k - 1} "
                     "all-to-all latencies per direction; the bandwidth terms do not change")
            if not c.worth(gain):
                continue
        names = [st.name for st in small]
        c.add(id="too_few_stacked_tables",
              title=f"{k} compatible stacks hold fewer than {c.t.min_tables_per_stack} tables each",
              severity="info",
              evidence={"stacks": names, "tables_per_stack": [len(st.tables) for st in small],
                        "embedding_dim": key[0], "optimizer": key[1], "combiner": key[2]},
              fix=(f"stack them together (plan_stacking(stacking=[[...tables of {names}...]]) or 'auto' with a "
                   "larger activation_mem_bytes_limit); [sc-guide] §10 recommends 5 to 100 tables per stack"),
              flags=("disable_table_stacking", "stacking", "activation_mem_bytes_limit"), gain_s=gain,
              gain_basis=basis)
    for st in plan.stacks:
        if len(st.tables) > c.t.max_tables_per_stack:
            ev = {"tables": len(st.tables), "rows": st.vocab_size, "features": len(st.features)}
            gain_bytes, basis = None, "not estimated"
            if c.memory is not None and st.name in c.memory.spmem.stacks:
                row = list(c.memory.spmem.stacks).index(st.name)
                ev["spmem_bytes_per_tile"] = int(c.memory.spmem.total[row])
                gain_bytes = None
                basis = "SPMEM of the stack from the memory report (splitting divides it)"
            c.add(id="too_many_stacked_tables", title=f"Stack {st.name!r} holds {len(st.tables)} tables",
                  severity="warning", evidence=ev, stack=st.name,
                  fix="split it into stacks of at most 100 tables (manual groups or a smaller "
                      "activation_mem_bytes_limit); huge logical tables hit resource limits",
                  flags=("stacking", "activation_mem_bytes_limit"), gain_bytes=gain_bytes, gain_basis=basis)


def check_memory(c: Context):
    r = c.memory
    if r is None:
        for check in ("spmem_overflow", "hbm_stack_overflow", "hbm_heap_exhaustion"):
            c.skip(check, "needs a memory report (scwork.memory.plan)")
        return
    for f in r.diagnoses:
        if f.severity == "error" and f.resource == "spmem":
            ev = dict(f.evidence)
            gain_bytes = None
            if f.stack in r.spmem.stacks:
                row = list(r.spmem.stacks).index(f.stack)
                gain_bytes = int(r.spmem.total[row] - r.spmem.capacity)
                ev["spmem_bytes_per_tile"] = int(r.spmem.total[row])
            c.add(id="spmem_overflow", title=f"Stack {f.stack!r} does not fit in TileSpmem", severity="error",
                  evidence={"memory_code": f.code, **ev}, stack=f.stack,
                  fix="; ".join(str(x) for x in f.fixes) or f.message,
                  flags=tuple(dict.fromkeys(x.flag or x.parameter for x in f.fixes)),
                  gain_bytes=gain_bytes, gain_basis="bytes per tile over the TileSpmem capacity (memory model)"
                  if gain_bytes is not None else "memory model: " + f.message[:120])
    oom = [f for f in r.diagnoses if f.code == "hbm_out_of_memory"]
    if not oom:
        return
    f = oom[0]
    at_peak = r.timeline.category_bytes_at_peak()
    stack_b = at_peak.get("sc_forward_stack", 0) + at_peak.get("sc_backward_stack", 0)
    heap_b = at_peak.get("dense_weights", 0) + at_peak.get("constants", 0) + at_peak.get("prefetch", 0)
    over = int(r.peak_hbm_bytes - r.usable_hbm_bytes)
    fixes = {x.parameter: x for x in f.fixes}
    common = {"peak_bytes": r.peak_hbm_bytes, "usable_bytes": r.usable_hbm_bytes, "over_bytes": over,
              "hbm_stack_bytes_at_peak": stack_b, "heap_bytes_at_peak": heap_b,
              "peak_event": r.timeline.peak_event.name}
    if stack_b >= heap_b or "num_serialized_tables" in fixes:
        ev = dict(common)
        fix_text = "serialize the largest stacks"
        cost = None
        if "num_serialized_tables" in fixes and fixes["num_serialized_tables"].value is not None:
            n = int(fixes["num_serialized_tables"].value)
            fix_text = f"set {FLAG_SERIALIZE}={n} (serialize the {n} stacks with the largest HBM stack)"
            ev["num_serialized_tables"] = n
            if c.model is not None:
                cost = c.model.replace(num_serialized_tables=n).step_time - c.model.step_time
                ev["time_cost_s"] = cost
        fix_text += "; or lower max_unique_ids_per_partition of the largest stacks (the stack is proportional)"
        c.add(id="hbm_stack_overflow", title="HBM stack overflow: the step's HBM peak does not fit",
              severity="error", evidence=ev, fix=fix_text,
              flags=(FLAG_SERIALIZE, "max_unique_ids_per_partition"), gain_bytes=over,
              gain_basis="bytes to free at the HBM peak (memory model)"
                         + ("; time cost of serializing from the step model" if cost is not None else ""))
    if heap_b > stack_b or "maximum_parallel_iterations" in fixes:
        ev = dict(common)
        ev.update({k: at_peak.get(k, 0) for k in ("dense_weights", "constants", "prefetch")})
        fix_text = "shrink the heap: fewer prefetched input steps, smaller dense weights or constants"
        if "maximum_parallel_iterations" in fixes and fixes["maximum_parallel_iterations"].value is not None:
            fix_text = (f"set {FLAG_PREFETCH}={fixes['maximum_parallel_iterations'].value}; " + fix_text)
        c.add(id="hbm_heap_exhaustion", title="HBM heap exhaustion: dense weights, constants or prefetch",
              severity="error", evidence=ev, fix=fix_text, flags=(FLAG_PREFETCH, "dense_weights_bytes"),
              gain_bytes=over, gain_basis="bytes to free at the HBM peak (memory model)")
