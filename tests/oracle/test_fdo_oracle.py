"""FDO statistics files and their update rule against jax-tpu-embedding's own client.

The library's ``NPZFileFDOClient`` records the statistics of every step
(``record``: rows stacked per step), writes one ``fdo_stats_<process>_<time_ns>.npz``
per process (``publish``), and ``load`` merges the latest file of every process
(element-wise max over processes). ``update_preprocessing_parameters`` then sets a
stack's limits to ``int(np.max(...))`` of those arrays and its buffer to the largest
per-SparseCore size times the SparseCores per device.

Checked here, on hypothesis-generated statistics of several processes and steps:
files written by the library read by scwork (:func:`scwork.sharding.read_fdo_stats`)
equal the library's ``load``; files written by scwork (:func:`write_fdo_stats`) load
in the library to the same arrays; and scwork's ``FdoStats.to_limits`` equals the
limits ``update_preprocessing_parameters`` puts on the stacked specs. The one
difference found is deliberate: an all-zero history gives the library limits of 0
(any later id then aborts its preprocessing); scwork's limits are at least 1.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.sharding import FdoStats, read_fdo_stats, write_fdo_stats
from scwork.testing import oracle_examples

fdo = pytest.importorskip("jax_tpu_embedding.sparsecore.lib.fdo.file_fdo_client",
                          reason="the oracle needs jax-tpu-embedding (Python >= 3.12: pip install -e '.[oracle]')")
from jax_tpu_embedding.sparsecore.lib.nn import embedding as jte  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec as es  # noqa: E402


@st.composite
def fdo_histories(draw):
    S = draw(st.sampled_from([2, 4]))
    D = draw(st.sampled_from([1, 2, 4]))
    stacks = draw(st.lists(st.sampled_from(["zeta_alpha", "t0", "user_tokens", "b"]), min_size=1, max_size=3,
                           unique=True))
    processes = draw(st.integers(1, 3))
    steps = draw(st.integers(1, 4))
    value = st.integers(0, 50_000)
    history = []
    for _ in range(processes):
        per_process = []
        for _ in range(steps):
            per_process.append({
                name: (np.array(draw(st.lists(value, min_size=D * S * D * S // D, max_size=D * S * D * S // D))),
                       np.array(draw(st.lists(value, min_size=D * S * D * S // D, max_size=D * S * D * S // D))),
                       np.array(draw(st.lists(value, min_size=D * S, max_size=D * S))))
                for name in stacks})
        history.append(per_process)
    return S, D, stacks, history


def _jte_stats(step):
    return jte.SparseDenseMatmulInputStats(
        max_ids_per_partition={k: v[0] for k, v in step.items()},
        max_unique_ids_per_partition={k: v[1] for k, v in step.items()},
        required_buffer_size_per_sc={k: v[2] for k, v in step.items()},
    )


def _publish_with_the_library(directory, history, monkeypatch):
    clock = itertools.count(1_000)
    for process, steps in enumerate(history):
        monkeypatch.setattr(fdo.jax, "process_index", lambda process=process: process)
        monkeypatch.setattr(fdo.time, "time_ns", lambda: next(clock))
        client = fdo.NPZFileFDOClient(directory)
        for step in steps:
            client.record(_jte_stats(step))
        client.publish()


@settings(max_examples=oracle_examples(60), deadline=None)
@given(fdo_histories())
def test_library_files_read_by_scwork_and_update_rule(tmp_path_factory, monkeypatch_session, case):
    S, D, stacks, history = case
    directory = tmp_path_factory.mktemp("fdo")
    _publish_with_the_library(directory, history, monkeypatch_session)
    theirs = fdo.NPZFileFDOClient(directory).load()
    ours = read_fdo_stats(directory)
    for field in ("max_ids_per_partition", "max_unique_ids_per_partition", "required_buffer_size_per_sc"):
        for name in stacks:
            np.testing.assert_array_equal(getattr(ours, field)[name], np.asarray(getattr(theirs, field)[name]),
                                          err_msg=f"{field} of {name}")
    # The update rule: limits on the stacked specs after update_preprocessing_parameters.
    specs = []
    for name in stacks:
        table = es.TableSpec(name=name, vocabulary_size=64, embedding_dim=8, initializer=lambda *a, **k: None,
                             optimizer=es.SGDOptimizerSpec(), combiner="sum")
        specs.append(es.FeatureSpec(name=f"f_{name}", table_spec=table, input_shape=[8, 1], output_shape=[8, 8]))
    jte.prepare_feature_specs_for_training(specs, global_device_count=D, num_sc_per_device=S)
    jte.update_preprocessing_parameters(specs, theirs, num_sc_per_device=S)
    limits = ours.to_limits()
    for spec in specs:
        stacked = spec.table_spec.stacked_table_spec
        got = limits[stacked.stack_name]
        # Deliberate difference: a stack whose history is all zeros (never looked up)
        # gets limits of 0 from the library, with which any later id aborts its
        # preprocessing; scwork's limits are at least 1.
        assert got.max_ids_per_partition == max(1, stacked.max_ids_per_partition)
        assert got.max_unique_ids_per_partition == max(1, stacked.max_unique_ids_per_partition)
        assert got.required_buffer_size * S == stacked.suggested_coo_buffer_size_per_device


@settings(max_examples=oracle_examples(60), deadline=None)
@given(fdo_histories())
def test_scwork_files_load_in_the_library(tmp_path_factory, case):
    S, D, stacks, history = case
    directory = tmp_path_factory.mktemp("fdo")
    for process, steps in enumerate(history):
        stacked = {
            field: {name: np.vstack([step[name][i] for step in steps]) if len(steps) > 1 else steps[0][name][i]
                    for name in stacks}
            for i, field in enumerate(("max_ids_per_partition", "max_unique_ids_per_partition",
                                       "required_buffer_size_per_sc"))}
        write_fdo_stats(FdoStats(**stacked), directory, process_index=process, timestamp_ns=10 + process)
    theirs = fdo.NPZFileFDOClient(directory).load()
    ours = read_fdo_stats(directory)
    for field in ("max_ids_per_partition", "max_unique_ids_per_partition", "required_buffer_size_per_sc"):
        for name in stacks:
            np.testing.assert_array_equal(getattr(ours, field)[name], np.asarray(getattr(theirs, field)[name]))


@pytest.fixture(scope="module")
def monkeypatch_session():
    """A monkeypatch that hypothesis examples may share (function-scoped fixtures may not)."""
    with pytest.MonkeyPatch.context() as patch:
        yield patch
