"""The literal reference (scwork.sharding._reference) against counts worked out by hand.

The kernels are compared with this reference elsewhere; here the reference itself is
pinned, so a mistake shared by both cannot pass. One source SparseCore and one
partition (Topology(1, 1)): every id of the batch goes to partition 0 at local row id.
"""

from __future__ import annotations

import numpy as np

import scwork
from scwork.sharding import FeatureBatch, FeatureSpec, TableSpec, plan_stacking
from scwork.sharding._reference import reference_preprocess

ONE = scwork.Topology(1, 1)


def _reference(ids, max_ids=None, max_unique=None, **kw):
    batch = FeatureBatch.from_ragged({"f": (np.asarray(ids), [0, len(ids)])})
    table = TableSpec("t", 64, 8, max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_unique)
    plan = plan_stacking([FeatureSpec("f", table)], ONE, stacking=None)
    return reference_preprocess(batch, plan, ONE, **kw)["t"]


def test_unique_limit_keeps_only_the_first_ranks():
    # ids 0..4 in one sample: ranks 0..4; at most 2 distinct ids kept: 0 and 1, three dropped
    ref = _reference([0, 1, 2, 3, 4], max_unique=2, allow_id_dropping=True)
    assert ref["kept"].tolist() == [[[2]]]
    assert ref["dropped"] == 3
    assert [d[5] for d in ref["drops"]] == [2, 3, 4]
    assert ref["embedding_ids"][0, :2].tolist() == [0, 1]


def test_limits_are_not_applied_unless_dropping_is_allowed():
    # the default is to keep everything (the engine raises instead; the reference only counts)
    ref = _reference([0, 1, 2, 3, 4], max_ids=1, max_unique=1)
    assert ref["kept"].tolist() == [[[5]]]
    assert ref["dropped"] == 0 and ref["drops"] == []


def test_an_empty_batch_still_has_one_row_of_eight_slots():
    # no limit configured: the buffer is the used size rounded to 8 but never under 8 slots, as the
    # engine sizes it (scenario.py), so an empty batch still gets one group of 8 padded slots
    ref = _reference([])
    assert ref["buffer_size_per_sc"] == 8
    assert ref["embedding_ids"].shape == (1, 8)
    assert ref["row_pointers"].tolist() == [[0] * 8]
