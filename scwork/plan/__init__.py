"""Plan search: the best SparseCore plan for a model and its ids, as a Pareto front.

People tuning SparseCore models ask "which limits, which stacking, will it fit, why is
my step slow" together; each scwork model answers one of them
(:func:`~scwork.sharding.plan_stacking`, :func:`~scwork.sharding.tune_limits`,
:func:`scwork.memory.plan`, :func:`scwork.pipeline.step_model`). :func:`search` asks
them of every candidate plan at once:

- stackings: none, jax-tpu-embedding's automatic grouping ([jte] ``auto_stack_tables``:
  greedy by an activation-memory budget), and a local search of merge / split / move
  moves over the tables the library lets share a stack;
- per-stack limits from the observed statistics (:class:`LimitRule`: max,
  percentiles, headroom) and the static CSR buffer;
- mini-batching on or off, per-chip batch sizes, topologies from the catalog's
  documented slices of a chip.

Every figure is computed, not estimated, where scwork can: the sharding engine's
statistics (per-table statistics reused across stackings, exactly:
:mod:`scwork.plan._context`), SPMEM/HBM with :func:`scwork.memory.plan`, the step
with :func:`scwork.pipeline.step_model`, dropped ids and mini-batches on held-out
batches (:mod:`scwork.plan._evaluate`). The result holds every candidate in an
:class:`xarray.Dataset`, the Pareto front over (step time, peak HBM, drop rate), the
library's default plan (automatic stacking, limits at the observed maxima as its FDO
client sets them) as a baseline, and the best plan, which writes itself back as
jax-tpu-embedding FeatureSpecs or a TOML config.

Where the figures are models, not measurements: the step time is
:func:`scwork.pipeline.step_model`'s (its assumptions are listed in
:class:`scwork.pipeline.StepModelParams`), and HBM/SPMEM are :func:`scwork.memory.plan`'s;
dropped ids and mini-batches hold for the held-out batches, not for every future batch.

- ``scwork/plan/search.py``: :func:`search`, :func:`parse_topologies`. The function shadows
  the module's name as an attribute of this package (as ``scwork.sharding.minibatch``
  does); import the module with ``importlib.import_module("scwork.plan.search")`` if needed.
- :mod:`~scwork.plan.constraints`: :class:`Constraints`, :class:`LimitRule`.
- :mod:`~scwork.plan.result`: :class:`PlanSearchResult`, :class:`PlanCandidate`, :func:`pareto_front`.

Examples
--------
>>> import scwork
>>> from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec
>>> from scwork.plan import Constraints, search
>>> data = scwork.datasets.synthetic(512, num_steps=4, features=["a", "b", "c"], vocab_size=20_000, seed=2)
>>> feats = [FeatureSpec(n, TableSpec(f"t_{n}", 20_000, 32)) for n in "abc"]
>>> result = search(feats, [FeatureBatch.from_ragged(data.step(k)) for k in range(4)], "v5p:4",
...                 progress=False, local_search_steps=8)
>>> ds = result.dataset
>>> int(ds.sizes["candidate"]) == len(result.records), bool(ds["is_default"].any())
(True, True)
>>> best = result.best
>>> best.metrics["feasible"], best.metrics["drop_rate"]
(True, 0.0)
"""

from scwork.plan.constraints import DEFAULT_LIMIT_RULES, LIBRARY_LIMIT_RULE, OBJECTIVES, Constraints, LimitRule
from scwork.plan.result import PlanCandidate, PlanSearchResult, to_toml
from scwork.plan.search import parse_topologies, pareto_front, search

__all__ = [
    "search",
    "Constraints",
    "LimitRule",
    "PlanSearchResult",
    "PlanCandidate",
    "parse_topologies",
    "pareto_front",
    "to_toml",
    "DEFAULT_LIMIT_RULES",
    "LIBRARY_LIMIT_RULE",
    "OBJECTIVES",
]
