"""Stackings a plan search tries: none, the library's automatic one, and local moves around it.

A stacking is written as a tuple of groups of table names (tables in no group stay
alone, as :func:`~scwork.sharding.plan_stacking` takes manual groups). Tables may
share a stack only when jax-tpu-embedding's automatic stacking would let them ([jte]
``_group_tables_for_stacking``: its key: padded dim, optimizer, combiner, and
scwork's quantization setting), and a stack's activation memory (``sum over its
features of padded_dim * samples_per_sc * 4 B``) stays within the budget of
``auto_stack_tables`` (2 MiB by default).

Moves from a stacking (its *neighbours*):

- **merge** two stacks of the same key;
- **split** a stack: one table leaves it and stands alone;
- **move** one table from a stack to another stack of the same key.
"""

from __future__ import annotations

from collections.abc import Sequence

from scwork.sharding.specs import FeatureSpec

__all__: list[str] = []

Grouping = tuple[tuple[str, ...], ...]


def table_keys(features: Sequence[FeatureSpec]) -> dict[str, tuple]:
    """Per table, the key two tables must share to share a stack."""
    out = {}
    for f in features:
        t = f.table
        out.setdefault(t.name, (t.padded_embedding_dim(), t.optimizer, t.combiner, t.quantization))
    return out


def activation_bytes(features: Sequence[FeatureSpec], samples_per_sc: int) -> dict[str, int]:
    """Per table, ``padded_dim * samples_per_sc * 4`` summed over its features.

    This is [jte] ``auto_stack_tables``' measure.
    """
    out: dict[str, int] = {}
    for f in features:
        out[f.table.name] = out.get(f.table.name, 0) + f.table.padded_embedding_dim() * samples_per_sc * 4
    return out


def normalize(groups) -> Grouping:
    """Groups of two or more tables, each in its original order, groups ordered by their first table."""
    return tuple(sorted((tuple(g) for g in groups if len(g) > 1), key=lambda g: g[0]))


def groups_of(grouping: Grouping, tables: Sequence[str]) -> list[list[str]]:
    """Every stack of ``grouping`` including the tables left alone."""
    placed = {t for g in grouping for t in g}
    return [list(g) for g in grouping] + [[t] for t in tables if t not in placed]


def neighbours(grouping: Grouping, tables: Sequence[str], keys: dict[str, tuple], act: dict[str, int],
               limit: int) -> list[tuple[str, Grouping]]:
    """Every stacking one merge, split or move away, with a label saying which move."""
    order = {t: k for k, t in enumerate(tables)}
    stacks = groups_of(grouping, tables)
    out: dict[Grouping, str] = {}

    def sort(g):
        return sorted(g, key=order.__getitem__)

    def add(label, new_stacks):
        g = normalize(sort(s) for s in new_stacks if s)
        if g != grouping and g not in out:
            out[g] = label

    def key(stack):
        return keys[stack[0]]

    def mem(stack):
        return sum(act[t] for t in stack)

    for i, a in enumerate(stacks):
        for j in range(i + 1, len(stacks)):
            b = stacks[j]
            if key(a) == key(b) and mem(a) + mem(b) <= limit:
                rest = [s for k, s in enumerate(stacks) if k not in (i, j)]
                add(f"merge {'+'.join(a)} with {'+'.join(b)}", rest + [a + b])
    for i, a in enumerate(stacks):
        if len(a) < 2:
            continue
        for t in a:
            rest = [s for k, s in enumerate(stacks) if k != i]
            add(f"split {t} out of {'+'.join(a)}", rest + [[x for x in a if x != t], [t]])
    for i, a in enumerate(stacks):
        if len(a) < 2:
            continue
        for t in a:
            for j, b in enumerate(stacks):
                if j == i or key(b) != keys[t] or mem(b) + act[t] > limit:
                    continue
                rest = [s for k, s in enumerate(stacks) if k not in (i, j)]
                add(f"move {t} to {'+'.join(b)}", rest + [[x for x in a if x != t], b + [t]])
    return [(label, g) for g, label in out.items()]


def label(grouping: Grouping | str | None) -> str:
    """Short text for a stacking: ``auto``, ``none`` or ``t0+t1|t2+t3``."""
    if grouping == "auto":
        return "auto"
    if not grouping:
        return "none"
    return "|".join("+".join(g) for g in grouping)
