"""Fuzz: the embedding all-to-all (bytes, routing), the plan summary and load_table's arguments.

Every case runs through :func:`scwork.testing.check_surface`. Results are held to what
they must satisfy, not only to their error types:

- all-to-all bytes are exact: every pair's bytes equal ``sum_k rows x row_bytes``
  recomputed in Python integers, ``remote_bytes`` is the off-diagonal sum;
- routing conserves bytes: bytes on links = sum over pairs of bytes x hops
  (:func:`device_hops`), link times are finite and the time covers the busiest link;
- the plan summary's bounds: utilizations are peak / capacity, the load per chip sums
  to the ids received, the imbalance is at least 1, ``fits`` agrees with its parts;
- load_table: a refused argument writes nothing and names the argument.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scwork
from scwork.collectives import device_hops, embedding_all_to_all, route_all_to_all
from scwork.datasets import load_table
from scwork.sharding import FeatureBatch, FeatureSpec, SparsecoreConfig, TableSpec, compute_stats
from scwork.summary import plan_summary
from scwork.testing import (
    EDGE_FLOATS,
    EDGE_INTEGERS,
    arguments,
    check_surface,
    fuzz_settings,
    odd_arrays,
    odd_scalars,
    ragged_feature,
    report_wrong,
    weighted,
)

#: Public callables this module drives, and the surface label of their cases (tests/fuzz/test_surface_coverage.py).
SURFACES = {
    "scwork.collectives.embedding_all_to_all": "collectives.embedding_all_to_all",
    "scwork.collectives.route_all_to_all": "collectives.route_all_to_all",
    "scwork.collectives.device_hops": "collectives.device_hops",
    "scwork.summary.plan_summary": "summary.plan_summary",
    "scwork.summary.PlanSummary": "summary.PlanSummary.views",
    "scwork.datasets.load_table": "datasets.load_table.arguments",
    "scwork.datasets.LoadedTable": "datasets.LoadedTable.batches",
}

_SETTINGS = fuzz_settings(HealthCheck.function_scoped_fixture)
_INT64_MAX = 2**63 - 1


# -- embedding all-to-all -------------------------------------------------------------------------------
@st.composite
def a2a_cases(draw):
    """Statistics shaped like compute_stats' (unique_ids, optional minibatch dim and limits) and a topology."""
    G = draw(st.integers(1, 4))
    S = draw(st.integers(1, 2))
    shape = draw(st.sampled_from([(G,), (1, G)] + ([(2, G // 2)] if G % 2 == 0 else [])))
    devices_per_chip = draw(st.sampled_from([1, 2])) if G % 2 == 0 and len(shape) == 1 else 1
    chips = G // devices_per_chip
    topology = scwork.Topology(chips, S * devices_per_chip, shape=(chips,) if devices_per_chip > 1 else shape,
                               wraparound=(draw(st.booleans()),) * (1 if devices_per_chip > 1 else len(shape)),
                               devices_per_chip=devices_per_chip, chip=draw(st.sampled_from([None, "v5p"])))
    G, S, P = topology.num_devices, topology.sparsecores_per_device, topology.num_partitions
    K = draw(st.integers(1, 3))
    minibatches = draw(st.sampled_from([None, 1, 2]))
    dims = (("minibatch",) if minibatches else ()) + ("stack", "device", "sc", "partition")
    size = ((minibatches,) if minibatches else ()) + (K, G, S, P)
    counts = np.array(draw(st.lists(st.integers(0, 50), min_size=math.prod(size), max_size=math.prod(size))),
                      dtype=np.int64).reshape(size)
    stacks = [f"s{k}" for k in range(K)]
    data = {"unique_ids": (dims, counts)}
    if draw(st.booleans()):
        data["configured_max_unique_ids_per_partition"] = (("stack",), np.array(
            draw(st.lists(st.integers(-1, 40), min_size=K, max_size=K)), np.int64))
    broken = draw(st.sampled_from([None] * 5 + ["values", "dtype", "dims", "limits"]))
    if broken == "values":
        flat = counts.astype(object).ravel()
        flat[draw(st.integers(0, flat.size - 1))] = draw(st.sampled_from(EDGE_INTEGERS + EDGE_FLOATS + (1.5,)))
        try:
            data["unique_ids"] = (dims, np.array(flat.tolist()).reshape(size))
        except (OverflowError, ValueError):
            data["unique_ids"] = (dims, flat.reshape(size))
    elif broken == "dtype":
        data["unique_ids"] = (dims, counts.astype(draw(st.sampled_from(["float32", "uint64", "bool", "U3", "O",
                                                                        "complex64", "int8"]))))
    elif broken == "dims":
        data["unique_ids"] = (dims[::-1], counts.T) if draw(st.booleans()) else (("x",) + dims[1:], counts)
    elif broken == "limits":
        data["configured_max_unique_ids_per_partition"] = (("stack",), np.array(
            [draw(st.sampled_from(EDGE_FLOATS + (1.5,)))] * K))
    stats = xr.Dataset(data, coords={"stack": stacks})
    return stats, topology, stacks


_SIZES = weighted((6, st.integers(1, 64)), (1, st.sampled_from([2**31, 2**40, 2**61, 2**62, 2**63, 2**64, 10**30])),
                  (1, odd_scalars()))


@settings(**_SETTINGS)
@given(case=a2a_cases(), data=st.data())
def test_embedding_all_to_all(case, data):
    stats, topology, stacks = case
    per_stack = lambda: st.dictionaries(st.sampled_from(stacks), _SIZES, min_size=len(stacks))
    kwargs = arguments(data, {"widths": weighted((4, _SIZES), (1, per_stack())),
                              "dtype_bytes": weighted((4, st.sampled_from([1, 2, 4])), (1, _SIZES)),
                              "gradient_dtype_bytes": weighted((4, st.none()), (1, _SIZES)),
                              "index_bytes": weighted((4, st.just(0)), (1, st.integers(0, 8)), (1, _SIZES))},
                       odd=weighted((3, odd_scalars()), (1, odd_arrays())))
    a2a, error = check_surface("collectives.embedding_all_to_all",
                               lambda: embedding_all_to_all(stats, topology, **kwargs))
    if error is not None:
        return
    _check_bytes(stats, topology, stacks, kwargs, a2a)
    route_kwargs = arguments(data, {"tie": st.sampled_from(["split", "positive"]),
                                    "link_bandwidth": weighted((4, st.none()), (1, st.sampled_from(
                                        [1.0, 1e-300, 5e-324, 1e300, 4.5e10]))),
                                    "link_latency": weighted((4, st.just(1e-6)), (1, st.sampled_from(
                                        [0.0, 1e300, float("inf"), float("nan")])))},
                             odd=weighted((3, odd_scalars()), (1, odd_arrays())))
    routed, error = check_surface("collectives.route_all_to_all", lambda: route_all_to_all(a2a, topology,
                                                                                          **route_kwargs))
    if error is not None:
        return
    hop_kwargs = {k: v for k, v in route_kwargs.items() if k == "tie"}
    hops, error = check_surface("collectives.device_hops", lambda: device_hops(topology, **hop_kwargs))
    if error is not None:
        report_wrong("collectives.device_hops", f"refused after routing worked: {error}")
    # Conservation: every byte crosses exactly the links of its route.
    for direction in a2a["direction"].values:
        sent = a2a["bytes"].sel(direction=direction).values.astype(float)
        expected = float((sent * hops).sum())
        got = float(routed["total_link_bytes"].sel(direction=direction))
        on_links = float(routed["link_bytes"].sel(direction=direction).sum())
        if not math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-6) or not math.isclose(on_links, got,
                                                                                            rel_tol=1e-9):
            report_wrong("collectives.route_all_to_all", f"{direction}: {got} bytes on links, bytes x hops = "
                                                         f"{expected}")
        busy = routed["link_time"].sel(direction=direction).values
        time = float(routed["time"].sel(direction=direction))
        if not (np.isfinite(busy).all() and math.isfinite(time) and time >= busy.max(initial=0.0) * (1 - 1e-12)):
            report_wrong("collectives.route_all_to_all", f"{direction}: time {time} below the busiest link "
                                                         f"{busy.max(initial=0.0)}")


def _check_bytes(stats, topology, stacks, kwargs, a2a) -> None:
    """Recompute every pair's bytes in Python integers."""
    G, S = topology.num_devices, topology.sparsecores_per_device
    order = [d for d in ("minibatch", "stack", "device", "sc", "partition") if d in stats["unique_ids"].dims]
    counts = stats["unique_ids"].transpose(*order).values.astype(np.int64)
    if counts.ndim == 4:
        counts = counts[None]
    name = "configured_max_unique_ids_per_partition"
    if name in stats:        # dropped ids are not looked up: each minibatch is clipped, then they add up
        for k, limit in enumerate(stats[name].values.astype(np.int64)):
            if limit >= 0:
                counts[:, k] = np.minimum(counts[:, k], limit)
    counts = counts.sum(axis=0)

    def per(value, k):
        return value[stacks[k]] if isinstance(value, dict) else value

    dtype = kwargs["dtype_bytes"]
    grad = dtype if kwargs["gradient_dtype_bytes"] is None else kwargs["gradient_dtype_bytes"]
    index = kwargs["index_bytes"]
    rows = counts.reshape(len(stacks), G, S, G, S).sum(axis=(2, 4))           # (k, requester, owner)
    for g in range(G):
        for h in range(G):
            forward = sum(int(rows[k, g, h]) * (per(kwargs["widths"], k) * per(dtype, k) + index)
                          for k in range(len(stacks)))
            backward = sum(int(rows[k, g, h]) * (per(kwargs["widths"], k) * per(grad, k) + index)
                           for k in range(len(stacks)))
            got = (int(a2a["bytes"].sel(source=h, destination=g, direction="forward")),
                   int(a2a["bytes"].sel(source=g, destination=h, direction="backward")))
            if got != (forward, backward):
                report_wrong("collectives.embedding_all_to_all", f"pair {g}<->{h}: {got}, expected "
                                                                 f"{(forward, backward)}")
    pair = a2a["bytes"].values
    off = pair.sum(axis=(0, 1)) - np.einsum("iid->d", pair)
    if (a2a["remote_bytes"].values != off).any() or (pair < 0).any():
        report_wrong("collectives.embedding_all_to_all", f"remote bytes {a2a['remote_bytes'].values} != {off}")


# -- plan summary ---------------------------------------------------------------------------------------
@st.composite
def summary_cases(draw):
    num_chips = draw(st.integers(1, 2))
    topology = scwork.Topology.for_chip(draw(st.sampled_from(["v5p", "v6e", "tpu7x"])), num_chips=num_chips)
    P = topology.num_partitions
    batch = P * draw(st.integers(1, 2))
    tables = [TableSpec(f"t{i}", draw(st.integers(1, 500)), draw(st.sampled_from([4, 8, 16])),
                        max_ids_per_partition=draw(weighted((6, st.integers(1, 64)), (1, st.none()))),
                        max_unique_ids_per_partition=draw(weighted((6, st.integers(1, 64)), (1, st.none()))))
              for i in range(draw(st.integers(1, 2)))]
    features = [FeatureSpec(f"f{j}", tables[j % len(tables)]) for j in range(draw(st.integers(1, 3)))]
    stats = None
    if draw(st.booleans()):
        ragged = {f.name: draw(ragged_feature(batch, vocab=f.table.vocab_size, weighted=False)) for f in features}
        batch_obj = FeatureBatch.from_ragged({f.name: (ragged[f.name][0] % f.table.vocab_size, ragged[f.name][1])
                                              for f in features})
        stats = compute_stats(batch_obj, features, topology, config=SparsecoreConfig(allow_id_dropping=True))
        if draw(st.integers(0, 3)) == 0:        # one odd value in the statistics
            name = draw(st.sampled_from(["ids", "max_ids_per_partition", "max_unique_ids_per_partition"]))
            values = stats[name].values.astype(object)
            values.ravel()[draw(st.integers(0, values.size - 1))] = draw(st.sampled_from(
                EDGE_INTEGERS + EDGE_FLOATS + (1.5,)))
            try:
                stats[name] = (stats[name].dims, np.array(values.tolist()))
            except (OverflowError, ValueError):
                stats[name] = (stats[name].dims, values)
    return features, topology, batch, stats


@settings(**_SETTINGS)
@given(case=summary_cases(), data=st.data())
def test_plan_summary(case, data):
    features, topology, batch, stats = case
    valid = {"batch_size": st.just(batch), "stats": st.just(stats),
             "stacking": weighted((3, st.just("auto")), (1, st.none())),
             "tc_forward_s": weighted((3, st.none()), (1, st.sampled_from([0.0, 1e-3, 1e300]))),
             "dtype": weighted((3, st.just("f32")), (1, st.just("bf16")))}
    if data.draw(st.integers(0, 5), label="extra keyword") == 0:
        valid[data.draw(st.sampled_from(["bogus", "headroom", "num_chips", "stack_limits", "chip"]),
                        label="keyword")] = odd_scalars()
    kwargs = arguments(data, valid, odd=weighted((3, odd_scalars()), (1, odd_arrays())))
    odd_topology = data.draw(weighted((6, st.just(topology)), (1, odd_scalars())), label="topology")
    summary, error = check_surface("summary.plan_summary",
                                   lambda: plan_summary(features, odd_topology, **kwargs), seconds=20)
    if error is not None:
        if "bogus" in kwargs and "plan_summary" not in str(error):
            report_wrong("summary.plan_summary", f"an unknown keyword's error does not name plan_summary: {error}")
        return
    pc = summary.per_chip
    # Bounds: utilizations are the peaks over what may be used (HBM: the chip's capacity less the
    # headroom, as `scwork memory` counts it; SPMEM: the tile); loads add up to what the partitions receive.
    if (pc["hbm_usable_bytes"].values > pc["hbm_capacity_bytes"].values).any():
        report_wrong("summary.plan_summary", f"usable HBM {pc['hbm_usable_bytes'].values} over the capacity")
    for used, capacity, ratio in (("hbm_peak_bytes", "hbm_usable_bytes", "hbm_utilization"),
                                  ("spmem_worst_tile_bytes", "spmem_capacity_bytes", "spmem_utilization")):
        expected = pc[used].values / pc[capacity].values
        if not np.allclose(pc[ratio].values, expected, rtol=1e-9) or (pc[used].values < 0).any():
            report_wrong("summary.plan_summary", f"{ratio} {pc[ratio].values} != {expected}")
    if kwargs["stats"] is not None:
        received = float(kwargs["stats"]["ids"].values.astype(float).sum())
        if not math.isclose(float(pc["ids_received"].values.sum()), received, rel_tol=1e-9):
            report_wrong("summary.plan_summary", f"chips receive {pc['ids_received'].values}, partitions {received}")
        if not summary.partition_imbalance >= 1.0 - 1e-12 or not 0.0 <= summary.partition_divergence_bits <= \
                math.log2(topology.num_partitions) + 1e-9:
            report_wrong("summary.plan_summary", f"imbalance {summary.partition_imbalance}, divergence "
                                                 f"{summary.partition_divergence_bits}")
    if summary.fits != (bool(summary.memory.fits) and bool(np.all(summary.per_stack.get(
            "within_limits", xr.DataArray(True)).values))):
        report_wrong("summary.plan_summary", f"fits={summary.fits} disagrees with its parts")
    for view in ("rows", "__str__", "_repr_html_", "__repr__"):
        check_surface("summary.PlanSummary.views", getattr(summary, view))
    check_surface("summary.PlanSummary.views", lambda: summary.critical_path)


# -- load_table arguments -------------------------------------------------------------------------------
@settings(**_SETTINGS)
@given(data=st.data())
def test_load_table_arguments(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ids.csv"
        path.write_text("a,b\n1,x|y\n2,\n3,y\n")
        before = sorted(p.name for p in Path(folder).iterdir())
        odd = weighted((3, odd_scalars()), (1, odd_arrays()),
                       (1, st.sampled_from([b"a", [b"a"], {"a": 1}, ["a", "a"], ["z"], "", "\x00"])))
        kwargs = arguments(data, {"columns": weighted((3, st.none()), (1, st.sampled_from(["a", ["b", "a"]]))),
                                  "sep": weighted((3, st.none()), (1, st.sampled_from([",", "|"]))),
                                  "multi_value_sep": weighted((3, st.just("|")), (1, st.none())),
                                  "batch_size": weighted((3, st.none()), (1, st.integers(1, 4))),
                                  "drop_remainder": st.booleans()}, odd=odd)
        given_path = data.draw(weighted((6, st.just(path)), (1, st.just(str(path).encode())), (1, odd_scalars())),
                               label="path")
        table, error = check_surface("datasets.load_table.arguments", lambda: load_table(given_path, **kwargs))
        if sorted(p.name for p in Path(folder).iterdir()) != before:
            report_wrong("datasets.load_table.arguments", "load_table wrote into the folder")
        if error is not None:
            return
        if table.num_samples != 3 or any(rs[-1] != ids.size or (ids < 0).any()
                                         for ids, rs in table.features.values()):
            report_wrong("datasets.load_table.arguments", f"{table!r}")
        batches, error = check_surface("datasets.LoadedTable.batches", lambda: list(table.batches()))
        if error is None and kwargs["batch_size"] and kwargs["sep"] in (None, ","):
            sizes = [next(iter(b.values()))[1].size - 1 for b in batches]
            expected = [min(kwargs["batch_size"], 3 - i) for i in range(0, 3, kwargs["batch_size"])]
            if kwargs["drop_remainder"]:
                expected = [s for s in expected if s == kwargs["batch_size"]]
            if sizes != expected:
                report_wrong("datasets.LoadedTable.batches", f"batch sizes {sizes}, expected {expected}")
