"""The plan search: every candidate evaluated, the feasible ones ranked, the Pareto front.

See :func:`search`. What is computed exactly and what is reused is described in
:mod:`scwork.plan._context` (statistics) and :mod:`scwork.plan._evaluate` (per candidate).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping, Sequence
from typing import Any

from scwork.errors import ConfigError, InputError
from scwork.hardware.topology import Topology
from scwork.plan._context import _Context, bare_features, samples_of
from scwork.plan._evaluate import _Evaluator, _Record
from scwork.plan._groupings import activation_bytes, label, neighbours, normalize, table_keys
from scwork.plan.constraints import DEFAULT_LIMIT_RULES, LIBRARY_LIMIT_RULE, OBJECTIVES, Constraints, LimitRule
from scwork.plan.result import (
    PlanSearchResult,
    constraint_failures,
    no_feasible_error,
    objective_value,
    pareto_front,
)
from scwork.sharding.batch import FeatureBatch
from scwork.sharding.stacking import DEFAULT_ACTIVATION_MEM_BYTES_LIMIT, normalize_features

__all__ = ["search", "parse_topologies", "pareto_front"]

#: Flag pairs (static buffer, mini-batching) searched. A static buffer with
#: mini-batching is left out: scwork's mini-batching engine sizes each mini-batch's
#: buffer from the limits, so the pair could not be evaluated exactly.
FLAG_PAIRS = ((False, False), (True, False), (False, True))


def parse_topologies(value: Any) -> list[Topology]:
    """Topologies from a :class:`~scwork.Topology`, a list of them, ``"v5p"`` or ``"v5p:4,8,16"``.

    A chip name alone means its three smallest documented slices; every count must be
    a documented slice of the chip (``scwork.hardware.slices``), laid out as its most
    cube-like shape.

    Examples
    --------
    >>> [t.num_chips for t in parse_topologies("v5p:4,8")]
    [4, 8]
    >>> parse_topologies("v5p:5")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    scwork.errors.ConfigError: v5p has no documented slice of 5 chips; its slices have 4, 8, 16, 32, 64, 128, 192,
    256, ... chips. How to fix: pick one of those counts
    """
    from scwork.hardware import slices

    if isinstance(value, Topology):
        return [value]
    if isinstance(value, str):
        chip, _, counts = value.partition(":")
        chip = chip.strip()
        try:
            known = slices.slice_chip_counts(chip)
        except ConfigError as err:
            raise ConfigError(f"topologies {value!r}: {err}") from None
        if not counts.strip():
            wanted = list(known[:3])
        else:
            wanted = []
            for part in counts.split(","):
                part = part.strip()
                if not part.isdigit():
                    raise ConfigError(f"topologies {value!r}: {part!r} is not a chip count. How to fix: write e.g. "
                                      f"{chip}:4,8,16")
                wanted.append(int(part))
        out = []
        for n in wanted:
            if n not in known:
                shown = ", ".join(str(k) for k in known[:8]) + (", ..." if len(known) > 8 else "")
                raise ConfigError(f"{chip} has no documented slice of {n} chips; its slices have {shown} chips. "
                                  "How to fix: pick one of those counts")
            out.append(Topology.for_chip(chip, shape=slices.smallest_slice(chip, n)))
        return out
    if isinstance(value, Sequence) and value and all(isinstance(t, Topology) for t in value):
        return list(value)
    raise ConfigError(f"topologies must be a scwork.Topology, a list of them, or text such as 'v5p:4,8,16', got "
                      f"{type(value).__name__}")


def _check_int_list(name: str, value: Any, example: str) -> list[int]:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ConfigError(f"{name} must be a non-empty list of positive integers, got {value!r}. How to fix: {example}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ConfigError(f"{name} must hold positive integers, got {v!r}. How to fix: {example}")
        out.append(int(v))
    return list(dict.fromkeys(out))


def _as_batches(batches: Any, what: str) -> list[FeatureBatch]:
    if isinstance(batches, (FeatureBatch, Mapping)):
        batches = [batches]
    try:
        items = list(batches)
    except TypeError:
        raise InputError(f"{what} must be a list of FeatureBatch, got {type(batches).__name__}") from None
    out = []
    for k, b in enumerate(items):
        if isinstance(b, Mapping) and not isinstance(b, FeatureBatch):
            b = FeatureBatch.from_ragged(b)
        if not isinstance(b, FeatureBatch):
            raise InputError(f"{what}[{k}] must be a FeatureBatch (or a mapping feature -> (ids, row_splits)), got "
                             f"{type(b).__name__}")
        out.append(b)
    if not out:
        raise InputError(f"{what} is empty: give at least one batch of ids")
    return out


def search(features: Any, batches: Any, topologies: Any, *, objective: str = "step_time",
           constraints: Constraints | None = None, budget: int = 1000,
           per_chip_batch_sizes: Sequence[int] | int | None = None, held_out: Any = None,
           limit_rules: Sequence[LimitRule] = DEFAULT_LIMIT_RULES, local_search_steps: int = 200,
           activation_mem_bytes_limit: int = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
           memory_kwargs: Mapping[str, Any] | None = None, step_kwargs: Mapping[str, Any] | None = None,
           tc_seconds_per_sample: tuple[float, float] | None = None, num_threads: int | None = None,
           progress: bool | None = None) -> PlanSearchResult:
    """Search stackings, limits, buffers, mini-batching, batch sizes and topologies for the best plan.

    Candidates are the product of: stackings (none, jax-tpu-embedding's automatic
    grouping, and those a local search of merge / split / move moves visits, best
    first), ``limit_rules`` (per-stack limits from the observation batches), the static
    CSR buffer off or on, mini-batching off or on (not both with a static buffer),
    ``per_chip_batch_sizes`` and ``topologies``. Each is evaluated as
    :mod:`scwork.plan._evaluate` describes; the library's default plan (automatic
    stacking, limits at the observed maxima as its FDO client sets them, no static
    buffer, no mini-batching) is among them, flagged ``is_default``.

    Parameters
    ----------
    features : sequence or mapping of FeatureSpec
        The model. Tables' own limits and buffers are ignored: the search sets them.
    batches : sequence of FeatureBatch
        Ids to observe. Their samples are concatenated and cut into global batches of
        ``per_chip_batch * num_chips`` samples (samples after the last full batch
        are not used; ``attrs["unused_samples"]`` says how many).
    topologies : Topology, list of Topology, or str
        ``"v5p:4,8,16"``: documented slices of a chip (:func:`parse_topologies`).
    objective : {"step_time", "time_per_sample", "peak_hbm", "drop_rate"}
        What ``best`` minimises (ties: then step time, peak HBM, drop rate). The front's
        time axis is ``time_per_sample`` when the objective is, else ``step_time``.
    constraints : Constraints, optional
        Default ``Constraints()``: fits SPMEM and HBM, no dropped id.
    budget : int, default 1000
        Most candidates evaluated. Stackings from the local search are added while
        the product stays within it.
    per_chip_batch_sizes : int or list of int, optional
        Default: the first batch's size over the first topology's chips.
    held_out : sequence of FeatureBatch, optional
        Ids the plans are checked on (dropped ids, mini-batches; the step time on the one
        with the most ids). Default:
        the last quarter of ``batches`` (at least one), or the batch itself when only
        one is given (``attrs["held_out"]`` says which).
    limit_rules : sequence of LimitRule
        Default :data:`~scwork.plan.constraints.DEFAULT_LIMIT_RULES`.
    local_search_steps : int, default 200
        Most stackings the local search evaluates (on the first topology and batch size).
    activation_mem_bytes_limit : int
        Activation-memory budget of one stack (2 MiB, the library's default).
    memory_kwargs, step_kwargs : dict, optional
        Passed to :func:`scwork.memory.plan` and :func:`scwork.pipeline.step_model`.
    tc_seconds_per_sample : (float, float), optional
        TensorCore forward and backward seconds per sample on one chip; the step model
        gets them times the per-chip batch. Default: no TensorCore time.
    num_threads : int, optional
        Engine threads (default: every core).
    progress : bool or None
        Progress bar over the candidates (see :mod:`scwork._progress`).

    Returns
    -------
    PlanSearchResult

    Raises
    ------
    ConfigError
        Bad arguments (the message names which and how to fix it), or a grid larger than ``budget``.
    InputError
        Batches that do not hold the features, or too few samples for one global batch.
    NoFeasiblePlanError
        No candidate meets the constraints: names the tightest and the closest candidate.

    Examples
    --------
    >>> import scwork
    >>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
    >>> from scwork.plan import search
    >>> data = scwork.datasets.synthetic(256, num_steps=4, features=["a", "b"], vocab_size=5000, seed=0)
    >>> feats = [FeatureSpec("a", TableSpec("ta", 5000, 16)), FeatureSpec("b", TableSpec("tb", 5000, 16))]
    >>> batches = [FeatureBatch.from_ragged(data.step(k)) for k in range(4)]
    >>> result = search(feats, batches, "v5p:4", progress=False, local_search_steps=4)
    >>> bool(result.dataset["feasible"].sel(candidate=result.best.index))
    True
    >>> result.baseline.knobs["stacking"], result.baseline.knobs["limit_rule"]
    ('auto', 'fdo')
    """
    started = time.perf_counter()
    features = normalize_features(features)
    bare = bare_features(features)
    constraints = Constraints() if constraints is None else constraints
    if not isinstance(constraints, Constraints):
        raise ConfigError(f"constraints must be a scwork.plan.Constraints, got {type(constraints).__name__}. "
                          "How to fix: Constraints(max_drop_rate=..., ...)")
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1:
        raise ConfigError(f"budget must be a positive number of candidates, got {budget!r}")
    if isinstance(local_search_steps, bool) or not isinstance(local_search_steps, numbers.Integral) \
            or local_search_steps < 0:
        raise ConfigError(f"local_search_steps must be an integer >= 0, got {local_search_steps!r}")
    if isinstance(activation_mem_bytes_limit, bool) or not isinstance(activation_mem_bytes_limit, numbers.Integral) \
            or activation_mem_bytes_limit < 1:
        raise ConfigError(f"activation_mem_bytes_limit must be a positive number of bytes, got "
                          f"{activation_mem_bytes_limit!r}")
    if isinstance(limit_rules, LimitRule):
        limit_rules = [limit_rules]
    if isinstance(limit_rules, (str, bytes, Mapping)) or not isinstance(limit_rules, Sequence):
        raise ConfigError(f"limit_rules must be a list of scwork.plan.LimitRule, got {type(limit_rules).__name__}")
    rules = list(limit_rules)
    if not rules or not all(isinstance(r, LimitRule) for r in rules):
        raise ConfigError("limit_rules must be a non-empty list of scwork.plan.LimitRule")
    if LIBRARY_LIMIT_RULE not in rules:
        rules.insert(0, LIBRARY_LIMIT_RULE)   # the baseline needs the library's own rule
    rules = list(dict.fromkeys(rules))
    if tc_seconds_per_sample is not None:
        try:
            fwd, bwd = (float(x) for x in tc_seconds_per_sample)
        except (TypeError, ValueError):
            raise ConfigError(f"tc_seconds_per_sample must be (forward, backward) seconds per sample, got "
                              f"{tc_seconds_per_sample!r}") from None
        if not (math.isfinite(fwd) and math.isfinite(bwd) and fwd >= 0 and bwd >= 0):
            raise ConfigError(f"tc_seconds_per_sample must be finite and >= 0, got {tc_seconds_per_sample!r}")
        tc_seconds_per_sample = (fwd, bwd)
    topologies = parse_topologies(topologies)
    observed = _as_batches(batches, "batches")
    held_note = "given"
    if held_out is None:
        if len(observed) >= 2:
            k = max(1, len(observed) // 4)
            observed, held = observed[:-k], observed[-k:]
            held_note = f"the last {k} of the {len(observed) + k} batches"
        else:
            held = observed
            held_note = "the observation batch itself (only one batch was given)"
    else:
        held = _as_batches(held_out, "held_out")
    names = [f.name for f in features]
    for what, group in (("batches", observed), ("held_out", held)):
        for k, b in enumerate(group):
            missing = [n for n in names if n not in b]
            if missing:
                raise InputError(f"{what}[{k}] has no ids for features {missing}; it holds {list(b.feature_names)}. "
                                 "How to fix: give every feature of the model")
    if per_chip_batch_sizes is None:
        per_chip_batch_sizes = [max(1, observed[0].batch_size // topologies[0].num_chips)]
    sizes = _check_int_list("per_chip_batch_sizes", per_chip_batch_sizes, "e.g. [1024, 2048]")

    obs_samples, held_samples = samples_of(observed, names), samples_of(held, names)
    contexts = [_Context(bare, obs_samples, held_samples, topo, b, num_threads) for topo in topologies for b in sizes]
    per_grouping = len(contexts) * len(rules) * len(FLAG_PAIRS)
    fixed = 2 * per_grouping
    if fixed > budget:
        raise ConfigError(f"the search needs at least {fixed} candidates (stackings none and auto x {len(contexts)} "
                          f"topology/batch pairs x {len(rules)} limit rules x {len(FLAG_PAIRS)} flag pairs), more "
                          f"than budget={budget}. How to fix: raise budget or give fewer topologies, batch sizes "
                          "or limit rules")
    evaluator = _Evaluator(bare, memory_kwargs or {}, step_kwargs or {}, tc_seconds_per_sample,
                           activation_mem_bytes_limit, constraints.max_drop_rate > 0)
    max_groupings = budget // per_grouping
    groupings, moves = _local_search(evaluator, contexts, bare, rules, constraints, objective,
                                     activation_mem_bytes_limit, local_search_steps, max_groupings)
    from scwork._progress import progress as _progress

    jobs = [(ctx, g, rule, static, mb) for g in groupings for ctx in contexts for rule in rules
            for static, mb in FLAG_PAIRS]
    records: list[_Record] = []
    for job in _progress(jobs, desc="evaluating plans", enabled=progress, unit="plan"):
        records.append(evaluator.evaluate(*job))
    result = PlanSearchResult(records, features=features, constraints=constraints, objective=objective,
                              evaluator=evaluator, moves=moves, attrs={
                                  "held_out": held_note, "seconds": time.perf_counter() - started,
                                  "unused_samples": [int(sum(c.unused_samples)) for c in contexts],
                                  "local_search_evaluations": len(moves)})
    result.attrs["seconds"] = time.perf_counter() - started
    if not result.dataset["feasible"].values.any():
        raise no_feasible_error(result)
    return result


def _score(rec: _Record, constraints: Constraints, objective: str) -> tuple:
    return (len(constraint_failures(rec, constraints)), objective_value(rec, objective), rec.peak_hbm_bytes)


def _local_search(evaluator, contexts, features, rules, constraints, objective, act_limit, steps, max_groupings):
    """Hill climbing from the automatic stacking on the first context; returns the stackings to grid over."""
    ctx = contexts[0]
    auto_plan = evaluator.bare_plan(ctx, "auto")
    auto = normalize([t.table.name for t in st.tables] for st in auto_plan.stacks)
    groupings: list[Any] = [(), "auto"]
    if max_groupings <= 2 or steps == 0:
        return groupings[:max(2, max_groupings)], []
    tables = list(dict.fromkeys(f.table.name for f in features))
    keys = table_keys(features)
    # Valid at every batch size searched: the activation memory at the largest samples per SparseCore.
    samples = max(c.batch_size // c.topology.num_partitions for c in contexts)
    act = activation_bytes(features, samples)
    rule = rules[1] if len(rules) > 1 else rules[0]
    scores = {}
    moves = []

    def score(g):
        if g not in scores:
            rec = evaluator.evaluate(ctx, g, rule, False, False)
            scores[g] = _score(rec, constraints, objective)
        return scores[g]

    current = auto
    seen = {(), auto}
    score(current)
    score(())
    while len(scores) < steps + 2:
        best_label, best = None, None
        for move, g in neighbours(current, tables, keys, act, act_limit):
            if g in seen:
                continue
            seen.add(g)
            score(g)
            moves.append((move, label(g), scores[g]))
            if best is None or scores[g] < scores[best]:
                best_label, best = move, g
            if len(scores) >= steps + 2:
                break
        if best is None or scores[best] >= scores[current]:
            break
        current = best
    ranked = sorted((g for g in scores if g not in ((), auto)), key=lambda g: scores[g])
    # The automatic grouping written out as groups (``auto``) is not searched again:
    # it is the same plan as "auto" but for the feature order of single-table stacks.
    groupings += ranked[:max_groupings - 2]
    return groupings, moves
