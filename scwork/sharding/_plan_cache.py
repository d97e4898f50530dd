"""What the engine derives from a stacking plan's stacks alone, kept by the stacks' identity.

Every call of the paths built on the engine (``collect_stats`` steps, the explorers'
scenarios) runs the same plan again, so the per-stack Python that depends on the plan
only (merged runs, group tables, batch rows of each stack, per-stack result columns)
is done once per plan and kind.
"""

from __future__ import annotations

__all__ = ["plan_derived"]

#: (kind, id(stacks), extra) -> (stacks, value); the stacks are kept with the value, so
#: the id in the key stays theirs while the entry lives.
_DERIVED: dict[tuple, tuple] = {}

#: Entries kept at most (a few kinds for each of the plans in use).
_MAX_ENTRIES = 256


def plan_derived(kind: str, stacks: tuple, extra: tuple, compute):
    """``compute()``, kept for these ``stacks`` (by identity: plans never change), ``kind`` and ``extra``."""
    key = (kind, id(stacks), extra)
    hit = _DERIVED.get(key)
    if hit is not None and hit[0] is stacks:
        return hit[1]
    value = compute()
    if len(_DERIVED) >= _MAX_ENTRIES:
        _DERIVED.clear()          # full: start again (no eviction to race with another thread)
    _DERIVED[key] = (stacks, value)
    return value
