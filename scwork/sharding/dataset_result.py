"""What ``stats_over_dataset`` returns: per-step, merged and tuned statistics.

See :class:`DatasetStats` and :func:`~scwork.sharding.stats_over_dataset`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scwork.errors import ConfigError

__all__ = ["DatasetStats"]


_TUNE = ("max", "percentile")
_PER_STEP = ("full", "summary")
_SUMMARY_VARS = ("observed_max_ids", "observed_max_unique_ids", "observed_required_buffer_size")
_CONFIGURED_VARS = ("configured_max_ids_per_partition", "configured_max_unique_ids_per_partition")




# ======================================================================================
# result
# ======================================================================================
@dataclasses.dataclass(eq=False)
class DatasetStats:
    """What :func:`stats_over_dataset` returns: per-step, merged and tuned statistics.

    Attributes
    ----------
    step_stats : xarray.Dataset
        Per-step statistics, the layout of :func:`~scwork.sharding.collect_stats`
        (dims ``step, stack, device, sc, partition``); dask-backed after a
        distributed run. With ``per_step="summary"`` only ``observed_max_ids``,
        ``observed_max_unique_ids``, ``observed_required_buffer_size`` (step, stack)
        and the ``configured_*`` variables.
    merged : xarray.Dataset
        Over all steps: the maxima of :func:`~scwork.sharding.limits.merge_step_stats`
        (``max_ids_per_partition``, ``max_unique_ids_per_partition``,
        ``required_buffer_size_per_sc``) and the sums ``total_ids``,
        ``total_unique_ids`` (stack, device, sc, partition), ``total_input_ids``
        (stack, device, sc), ``total_naive_ids_per_partition`` (stack, partition),
        ``total_out_of_vocabulary_ids`` (stack). Always in memory.
    tuned : TunedLimits or None
        :func:`~scwork.sharding.tune_limits` over all steps (None with ``tune=None``).
    plan : StackingPlan
        The stacking plan of every step (with the configured limits).
    batch_size : int
    num_steps : int
    num_samples : int
        Samples in the steps.
    dropped_samples : int
        Samples of the final short batch dropped by ``drop_remainder=True`` (else 0).
    last_batch_size : int
        Samples of the last step (``batch_size`` unless a short batch was kept).
    num_ids : int
        Raw ids (before dedup) of all steps, over all features.
    shards : tuple of str
        The files read (or ``"partition <i>"`` labels of a dask collection).
    num_chunks : int
        Tasks the steps were split into.
    scheduler : str
        ``"threads"``, ``"sync"``, ``"pool"`` (no dask) or ``"distributed"``.
    client : dask.distributed.Client or None
        The client of a distributed run (the dask-backed arrays live on its cluster).
    """

    step_stats: Any
    merged: Any
    tuned: Any
    plan: Any
    batch_size: int
    num_steps: int
    num_samples: int
    dropped_samples: int
    last_batch_size: int
    num_ids: int
    shards: tuple[str, ...]
    num_chunks: int
    scheduler: str
    client: Any = dataclasses.field(default=None, repr=False)
    _owns_client: bool = dataclasses.field(default=False, repr=False)

    @property
    def dask_backed(self) -> bool:
        """Whether some per-step arrays are dask arrays (distributed run with ``per_step="full"``)."""
        return any(getattr(v.variable, "chunks", None) is not None for v in self.step_stats.data_vars.values())

    def stack_limits(self) -> dict[str, tuple[int, int]]:
        """``{stack: (max_ids, max_unique_ids)}`` of the tuned limits (for ``preprocess(stack_limits=...)``)."""
        return self._tuned().stack_limits()

    def to_limits(self):
        """The tuned limits as :class:`~scwork.sharding.Limits` (e.g. for ``write_limits``)."""
        return self._tuned().to_limits()

    def _tuned(self):
        if self.tuned is None:
            raise ConfigError("no tuned limits: stats_over_dataset ran with tune=None; call "
                              "scwork.sharding.tune_limits(result.step_stats) or rerun with tune='max'")
        return self.tuned

    def tradeoff(self, candidates=None, **kwargs):
        """:func:`~scwork.sharding.tradeoff` over all steps (fetches dask-backed arrays first)."""
        from scwork.sharding.limits import tradeoff

        if "ids" not in self.step_stats:
            raise ConfigError("tradeoff needs the per-partition statistics; rerun stats_over_dataset with "
                              "per_step='full'")
        ds = self.step_stats[["ids", "unique_ids", *_SUMMARY_VARS]]
        return tradeoff(ds.compute() if self.dask_backed else ds, candidates, **kwargs)

    def compute(self) -> DatasetStats:
        """A copy whose per-step statistics are in memory (numpy-backed)."""
        return dataclasses.replace(self, step_stats=self.step_stats.compute(), client=self.client,
                                   _owns_client=False)

    def close(self) -> None:
        """Close the client :func:`stats_over_dataset` connected (``scheduler="tcp://..."``).

        Dask-backed arrays cannot be computed afterwards; a client given with
        ``client=`` is left open.
        """
        if self._owns_client and self.client is not None:
            self.client.close()
            self._owns_client = False

    def __enter__(self) -> DatasetStats:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _repr_html_(self) -> str:
        from scwork._html import html_table

        ds = self.merged
        rows = []
        for i, name in enumerate(ds["stack"].values.tolist()):
            row = [name, int(ds["max_ids_per_partition"].values[i].max()),
                   int(ds["max_unique_ids_per_partition"].values[i].max())]
            if self.tuned is not None:
                tuned = self.tuned.dataset
                row += [int(tuned["max_ids_per_partition"].values[i]),
                        int(tuned["max_unique_ids_per_partition"].values[i])]
            rows.append(row)
        header = ["stack", "observed max ids", "observed max unique ids"]
        if self.tuned is not None:
            header += [f"tuned max ids ({self.tuned.method})", "tuned max unique ids"]
        caption = (f"DatasetStats: {self.num_steps} steps of {self.batch_size} samples, {self.num_ids:,} ids "
                   f"from {len(self.shards)} shard(s) on {self.scheduler}")
        return html_table(rows, header=header, caption=caption)

    def __repr__(self) -> str:
        where = f"{len(self.shards)} shard{'s' if len(self.shards) != 1 else ''}"
        lines = [f"DatasetStats({self.num_steps} steps of {self.batch_size} samples from {where}, "
                 f"{self.num_ids} ids, {self.num_chunks} chunks on {self.scheduler}"
                 + (", dask-backed" if self.dask_backed else "") + ")"]
        if self.last_batch_size != self.batch_size:
            lines.append(f"  last step: a short batch of {self.last_batch_size} samples")
        if self.dropped_samples:
            lines.append(f"  dropped: the final {self.dropped_samples} samples (shorter than a batch)")
        ds = self.merged
        for i, name in enumerate(ds["stack"].values.tolist()):
            line = (f"  {name}: observed max ids {int(ds['max_ids_per_partition'].values[i].max())}, "
                    f"max unique ids {int(ds['max_unique_ids_per_partition'].values[i].max())}")
            if self.tuned is not None:
                t = self.tuned.dataset
                line += (f"; tuned ({self.tuned.method}) {int(t['max_ids_per_partition'].values[i])}"
                         f" / {int(t['max_unique_ids_per_partition'].values[i])}")
            lines.append(line)
        return "\n".join(lines)
