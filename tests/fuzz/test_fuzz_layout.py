"""Fuzz: the layout models (XLA shapes, their views, NPU local memory, embedding padding).

Every case runs through :func:`scwork.testing.check_surface`: a bad input must end in
a typed scwork error, never an untyped exception, a hang or unbounded memory. A result
is held to invariants that are cheap to check: a parsed shape prints and re-parses to
itself, padding is never negative, small index maps are a one-to-one map into the
buffer and agree with :meth:`~scwork.layout.Shape.linear_index` and the view windows,
NPU layouts agree with themselves on whether they fit, padding reports never report
less than the unpadded bytes.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import scwork
from scwork.errors import ScworkError
from scwork.layout import DTYPES, Shape, embedding, npu, parse, view
from scwork.testing import (
    EDGE_INTEGERS,
    arguments,
    check_surface,
    fuzz_settings,
    odd_arrays,
    odd_scalars,
    report_wrong,
    tiled_shapes,
    weighted,
)

#: Public callables this module drives, and the surface label of their cases
#: (tests/fuzz/test_surface_coverage.py).
SURFACES = {
    "scwork.layout.parse": "layout.parse",
    "scwork.layout.Shape": "layout.Shape",
    "scwork.layout.Tile": ("layout.parse", "reached through parse (the T(...) tiles of a layout)"),
    "scwork.layout.view.view_window": "layout.view.view_window",
    "scwork.layout.view.view_overview": "layout.view.view_overview",
    "scwork.layout.view.buffer_window": "layout.view.buffer_window",
    "scwork.layout.npu.local_layout": "npu.local_layout",
    "scwork.layout.npu.LocalLayout": ("npu.occupancy", "reached through local_layout (its result's methods)"),
    "scwork.layout.embedding.table_padding": "embedding.table_padding",
    "scwork.layout.embedding.TablePadding": ("embedding.summary", "reached through table_padding (its result)"),
    "scwork.layout.embedding.packing_whatif": "embedding.packing_whatif",
    "scwork.layout.embedding.padding_report": "embedding.padding_report",
}

_SETTINGS = fuzz_settings()

#: Element counts up to which a case also builds the whole index map to check it.
_SMALL = 4096


def _sometimes_odd(data, valid, label, odds=4):
    """One value in ``odds`` is odd (hypothesis alone prefers the simplest branch)."""
    if data.draw(st.integers(0, odds - 1), label=f"{label} odd?") == odds - 1:
        return data.draw(odd_scalars(), label=label)
    return data.draw(valid, label=label)


# -- layout strings -------------------------------------------------------------------------
_ODD_DTYPES = ["F32", "f31", "", "token", "tuple", "f32 ", "ｆ32", "f32\u0301", "s4", "u1", "pred", "bf16",
               "c128", "f8e4m3fn", "x" * 300]
_SIZES = weighted((4, st.integers(0, 9)), (1, st.sampled_from([t for t in EDGE_INTEGERS if isinstance(t, int)])),
                  (1, st.sampled_from([2**20, 2**31, 2**40, 2**62, 2**63 - 1, 10**19, 10**100, 10**5000])))


#: Numbers as layout text; 10**5000 becomes 5000 nines, more digits than int() converts by default.
_NUMBER_TEXTS = _SIZES.map(lambda v: "9" * 5000 if abs(v) > 10**4000 else str(v))


def _number(draw) -> str:
    return draw(_NUMBER_TEXTS)


@st.composite
def _tile_text(draw) -> str:
    entries = [draw(st.one_of(st.just("*"), st.builds(str, st.integers(1, 9)), _NUMBER_TEXTS))
               for _ in range(draw(st.integers(0, 5)))]
    return "(" + ",".join(entries) + ")"


@st.composite
def layout_texts(draw) -> str:
    """XLA shape text: the grammar with odd values in every slot, sometimes mutated."""
    dtype = draw(st.sampled_from(sorted(DTYPES) * 2 + _ODD_DTYPES))
    rank = draw(st.integers(0, 5))
    dims = []
    for _ in range(rank):
        kind = draw(st.integers(0, 9))
        dims.append("?" if kind == 0 else ("<=" if kind == 1 else "") + _number(draw))
    text = f"{dtype}[{','.join(dims)}]"
    if draw(st.booleans()):
        m2m = [str(d) for d in draw(st.permutations(range(rank)))]
        if draw(st.integers(0, 9)) == 0:
            m2m = [_number(draw) for _ in range(draw(st.integers(0, 6)))]
        attrs = []
        if draw(st.integers(0, 5)) == 0:
            attrs.append("D(" + ",".join(draw(st.lists(st.sampled_from(["D", "C", "S", "H", "C+~", "X", ""]),
                                                       max_size=rank + 1))) + ")")
        levels = draw(st.integers(0, 4))
        if draw(st.integers(0, 9)) == 0:
            levels = draw(st.sampled_from([30, 300, 3000]))           # deep tiles
        if levels:
            attrs.append("T" + "".join(draw(_tile_text()) for _ in range(min(levels, 4)))
                         + draw(_tile_text()) * max(0, levels - 4))
        for key in ("L", "E", "S", "M"):
            if draw(st.integers(0, 7)) == 0:
                attrs.append(f"{key}({_number(draw)})")
        for key in ("#", "*"):
            if draw(st.integers(0, 6)) == 0:
                attrs.append(f"{key}({draw(st.sampled_from(['u32', 's8', 'f32', 'u64', 'x']))})")
        if draw(st.integers(0, 6)) == 0:
            attrs.append("SC" + "".join(f"({_number(draw)}:{','.join(_number(draw) for _ in range(2))})"
                                        for _ in range(draw(st.integers(1, 2)))))
        if draw(st.integers(0, 8)) == 0:
            depth = draw(st.sampled_from([1, 2, 50, 2000]))           # nested physical shapes
            attrs.append("P(" * depth + "f32[3]" + ")" * depth)
        text += "{" + ",".join(m2m) + (":" + "".join(attrs) if attrs else "") + "}"
    how = draw(st.sampled_from(["same"] * 12 + ["insert", "delete", "duplicate", "random", "long"]))
    if how == "insert" and text:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=3)) + text[at:]
    elif how == "delete" and text:
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + text[at + draw(st.integers(1, 3)):]
    elif how == "duplicate" and text:
        a = draw(st.integers(0, len(text) - 1))
        b = draw(st.integers(a, len(text)))
        text = text[:b] + text[a:b] * draw(st.integers(1, 50)) + text[b:]
    elif how == "random":
        text = draw(st.text(max_size=40))
    elif how == "long":
        text = draw(st.sampled_from(["f32[" + "1," * 100_000 + "1]", "f32[3]{0:" + "T(1)" * 100_000 + "}",
                                     " " * 1_000_000 + "f32[3]", "f32[" + "9" * 100_000 + "]",
                                     "f32[3]{" + "0," * 50_000 + "0}", "(" * 100_000]))
    return text


def _check_shape(surface: str, shape: Shape) -> None:
    """Invariants of any valid Shape, cheap enough for every case."""
    again, error = check_surface(surface, lambda: parse(str(shape)))
    if error is not None or again != shape:
        report_wrong(surface, f"{shape!r} does not re-parse to itself: {again!r} / {error!r}")
    if shape.padded_elements < shape.num_elements or shape.padded_bytes < 0 or shape.unpadded_bytes < 0:
        report_wrong(surface, f"{shape!r}: padded {shape.padded_elements} < {shape.num_elements} elements")
    if not 0.0 <= shape.padding_fraction <= 1.0:
        report_wrong(surface, f"{shape!r}: padding fraction {shape.padding_fraction}")
    summary, _ = check_surface(surface + ".summary", shape.summary)
    if summary is not None and summary["padded_bytes"] != shape.padded_bytes:
        report_wrong(surface, f"{shape!r}: summary disagrees on padded bytes")
    if shape.is_sparse or shape.num_elements > _SMALL or shape.padded_elements > 16 * _SMALL:
        return
    index_map, _ = check_surface("layout.Shape.index_map", shape.index_map)
    if index_map is None:
        return
    flat = index_map.ravel()
    if flat.size and (flat.min() < 0 or flat.max() >= shape.padded_elements or np.unique(flat).size != flat.size):
        report_wrong("layout.Shape.index_map", f"{shape!r}: addresses are not one-to-one into the buffer")
    if flat.size:
        last = tuple(d - 1 for d in shape.dims)
        if shape.linear_index(last) != int(index_map[last]):
            report_wrong("layout.Shape.linear_index", f"{shape!r}: linear_index{last} != index_map")


@settings(**_SETTINGS)
@given(text=weighted((8, layout_texts()), (1, st.text(max_size=30)), (1, odd_scalars())))
def test_parse(text):
    shape, error = check_surface("layout.parse", lambda: parse(text))
    if error is None:
        _check_shape("layout.parse", shape)
    elif isinstance(text, str) and getattr(error, "position", None) is not None \
            and not 0 <= error.position <= len(text):
        report_wrong("layout.parse", f"error position {error.position} outside the {len(text)}-char text")


@settings(**_SETTINGS)
@given(data=st.data())
def test_shape_constructor(data):
    kwargs = {
        "dtype": _sometimes_odd(data, st.sampled_from(["f32", "bf16", "s4", "pred"]), "dtype"),
        "dims": data.draw(weighted((4, st.lists(weighted((3, st.integers(0, 6)), (1, _SIZES)), max_size=4)),
                                   (1, st.lists(weighted((3, st.integers(0, 6)), (1, _BIG)), max_size=4)),
                                   (1, odd_arrays())), label="dims"),
    }
    for name, valid in (("minor_to_major", st.none()), ("tiles", st.just(())),
                        ("tail_padding_alignment", st.integers(1, 8)), ("element_size_in_bits", st.just(0)),
                        ("memory_space", st.just(0)), ("dynamic_shape_metadata_prefix_bytes", st.just(0)),
                        ("split_configs", st.just(())), ("dim_level_types", st.just(()))):
        if data.draw(st.integers(0, 5), label=f"{name} given?") == 5:
            kwargs[name] = data.draw(weighted((3, valid), (1, odd_scalars()), (1, odd_arrays()), (1, st.lists(
                st.lists(st.integers(-2, 2**63), max_size=3), max_size=3))), label=name)
    shape, error = check_surface("layout.Shape", lambda: Shape(**kwargs))
    if error is None:
        _check_shape("layout.Shape", shape)


@settings(**_SETTINGS)
@given(shape=tiled_shapes(max_rank=3, max_dim=9, max_levels=3), data=st.data())
def test_shape_methods(shape, data):
    index = data.draw(weighted((6, st.tuples(*[st.integers(0, max(d - 1, 0)) for d in shape.dims])),
                               (1, st.lists(st.one_of(odd_scalars(), st.integers(-3, 12)), max_size=4)),
                               (1, odd_arrays())), label="index")
    value, error = check_surface("layout.Shape.linear_index", lambda: shape.linear_index(index))
    if error is None and not 0 <= value < shape.padded_elements:
        report_wrong("layout.Shape.linear_index", f"{shape!r}{index!r} -> {value} outside the buffer")
    max_elements = _sometimes_odd(data, st.integers(0, 64), "max_elements", odds=2)
    index_map, error = check_surface("layout.Shape.index_map", lambda: shape.index_map(max_elements=max_elements))
    if error is None and (index_map.shape != shape.dims or index_map.size > max(max_elements, 0)
                          and shape.num_elements > 0):
        report_wrong("layout.Shape.index_map", f"{shape!r}: map of shape {index_map.shape} for "
                     f"max_elements={max_elements!r}")
    engine = _sometimes_odd(data, st.sampled_from(["auto", "numpy", "numba"]), "engine")
    check_surface("layout.Shape.index_map", lambda: shape.index_map(engine))
    array = data.draw(weighted(
        (4, st.just(np.arange(shape.num_elements, dtype=np.int64).reshape(shape.dims))),
        (1, st.just(np.full(shape.dims, np.nan))), (1, st.just(np.zeros(shape.dims, dtype=object))),
        (1, odd_arrays())), label="array")
    fill = _sometimes_odd(data, st.just(-1), "fill")
    buffer, error = check_surface("layout.Shape.to_physical", lambda: shape.to_physical(array, fill=fill))
    if error is None:
        if buffer.shape != (shape.padded_elements,):
            report_wrong("layout.Shape.to_physical", f"{shape!r}: buffer of shape {buffer.shape}")
        back, error = check_surface("layout.Shape.from_physical", lambda: shape.from_physical(buffer))
        source = np.asarray(array)
        if error is not None or not np.array_equal(back, source, equal_nan=source.dtype.kind in "fc"):
            report_wrong("layout.Shape.from_physical", f"{shape!r}: round trip changed the data ({error!r})")
    odd_buffer = data.draw(odd_arrays(), label="buffer")
    check_surface("layout.Shape.from_physical", lambda: shape.from_physical(odd_buffer))
    for name in ("address_map", "view_index_map", "view_padding_mask", "view_tile_map"):
        result, error = check_surface(f"layout.Shape.{name}", getattr(shape, name))
        if error is None and name == "address_map":
            real = result[result >= 0]
            if real.size != shape.num_elements or np.unique(real).size != real.size:
                report_wrong("layout.Shape.address_map", f"{shape!r}: not the inverse of the index map")
    check_surface("layout.Shape.xla_linear_index", lambda: shape.xla_linear_index(index))
    size, error = check_surface("layout.Shape.xla_array_size_bytes", shape.xla_array_size_bytes)
    if error is None and size < 0:
        report_wrong("layout.Shape.xla_array_size_bytes", f"{shape!r}: {size} bytes")


def _bounds(data, label):
    return data.draw(weighted(
        (3, st.none()), (4, st.tuples(st.integers(-3, 12), st.integers(-3, 12))),
        (1, st.tuples(odd_scalars(), odd_scalars())), (1, odd_scalars()), (1, odd_arrays())), label=label)


@settings(**_SETTINGS)
@given(shape=weighted((3, tiled_shapes(max_rank=3, max_dim=9, max_levels=2)),
                      (1, st.sampled_from(["bf16[65536,65536]{1,0:T(8,128)(2,1)}", "f32[0,5]", "f32[]{:T(256)}",
                                        "s4[1000000,3,7]{0,2,1:T(2,*,8)E(4)}", "f32[3,5]{1,0:T(2,2)L(32)}",
                                        "f32[3]{0:T(1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
                                        "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1)}"])
                       .map(parse))),
       data=st.data())
def test_views(shape, data):
    rows, cols = _bounds(data, "rows"), _bounds(data, "cols")
    max_cells = _sometimes_odd(data, st.sampled_from([view.MAX_WINDOW_CELLS, 64, 1]), "max_cells")
    window, error = check_surface("layout.view.view_window",
                                  lambda: view.view_window(shape, rows, cols, max_cells=max_cells))
    small = math.prod(shape.padded_view_shape) <= _SMALL
    if error is None:
        if window["address"].size > max_cells:
            report_wrong("layout.view.view_window", f"{window['address'].size} cells > max_cells={max_cells}")
        full, error = check_surface("layout.Shape.view_index_map", shape.view_index_map) if small else (None, 1)
        if error is None and window["address"].size:
            full = full.reshape(-1, shape.padded_view_shape[-1] if shape.padded_view_shape else 1)
            expected = full[np.ix_(window["row"].values, window["col"].values)]
            if not np.array_equal(expected, window["address"].values):
                report_wrong("layout.view.view_window", f"{shape!r}: addresses differ from view_index_map")
    max_blocks = data.draw(weighted((3, st.just((256, 512))), (2, st.tuples(st.integers(-1, 5), st.integers(-1, 5))),
                                    (1, st.tuples(odd_scalars(), odd_scalars())), (1, odd_scalars())),
                           label="max_blocks")
    max_row_checks = _sometimes_odd(data, st.just(2**24), "max_row_checks")
    overview, error = check_surface("layout.view.view_overview", lambda: view.view_overview(
        shape, rows, cols, max_blocks=max_blocks, max_row_checks=max_row_checks))
    if error is None:
        fraction = overview["padding_fraction"].values
        if fraction.size and (np.isnan(fraction).any() or fraction.min() < 0 or fraction.max() > 1):
            report_wrong("layout.view.view_overview", f"{shape!r}: padding fractions {fraction.ravel()[:8]}")
    start = _sometimes_odd(data, st.integers(-5, shape.padded_elements + 5), "start")
    stop = _sometimes_odd(data, st.integers(-5, shape.padded_elements + 5), "stop")
    window, error = check_surface("layout.view.buffer_window",
                                  lambda: view.buffer_window(shape, start, stop, max_cells=max_cells))
    if error is None and window["element"].size and shape.padded_elements <= _SMALL:
        expected = shape.address_map()[window["address"].values]
        if not np.array_equal(expected, window["element"].values):
            report_wrong("layout.view.buffer_window", f"{shape!r}: elements differ from address_map")


_NPU_DTYPES = ["f32", "f16", "bf16", "s8", "int8", "u8", "s16", "u16", "s32", "u32", "s4", "u4", "fp16"]


_BIG = st.sampled_from([2**20, 2**31, 2**40, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64, 10**30, 10**5000])


def _count(low=1, high=9):
    """Mostly small valid counts, sometimes huge ones (valid too, but hostile)."""
    return weighted((3, st.integers(low, high)), (1, _BIG))


@settings(**_SETTINGS)
@given(data=st.data())
def test_npu_local_layout(data):
    with_chip = data.draw(st.integers(0, 3), label="with chip?") > 0
    valid = {
        "nchw": weighted((3, st.tuples(*[st.integers(1, 9)] * 4)), (1, st.tuples(*[_count()] * 4))),
        "dtype": st.sampled_from(_NPU_DTYPES),
        "kind": st.sampled_from(["aligned", "compact", "line_aligned"]),
        "start_lane": weighted((2, st.just(0)), (1, st.integers(0, 3)), (1, st.integers(0, 70))),
        "chip": st.sampled_from(scwork.hardware.names("npu")) if with_chip else st.none(),
    }
    if not with_chip or data.draw(st.integers(0, 4), label="override?") == 4:
        valid["npu_num"] = weighted((4, st.sampled_from([1, 2, 4, 16, 32, 64])), (1, _BIG))
        valid["eu_bytes"] = weighted((4, st.sampled_from([4, 16, 32, 64, 2, 1])), (1, _BIG))
    kwargs = arguments(data, valid, odd=weighted((2, odd_scalars()), (1, odd_arrays()), (1, st.sampled_from(
        ["v5p", "bm9999", "aligned", "bm1684x"])), (1, st.lists(st.integers(-1, 5), max_size=5))))
    nchw, dtype = kwargs.pop("nchw"), kwargs.pop("dtype")
    layout, error = check_surface("npu.local_layout", lambda: npu.local_layout(nchw, dtype, **kwargs))
    if error is not None:
        return
    if layout.bytes_per_lane < 0 or layout.data_bytes < 0 or not 0.0 <= layout.utilization <= 1.0:
        report_wrong("npu.local_layout", f"{layout!r}: bytes_per_lane {layout.bytes_per_lane}, "
                     f"utilization {layout.utilization}")
    other = data.draw(weighted((2, st.none()), (1, st.sampled_from(scwork.hardware.names("npu"))),
                               (1, odd_scalars())), label="fit chip")
    fits, fits_error = check_surface("npu.fits", lambda: layout.fits(other))
    _, check_error = check_surface("npu.check_fits", lambda: layout.check_fits(other))
    if (fits_error is None and fits != (check_error is None)) or (fits_error is not None and check_error is None):
        report_wrong("npu.check_fits", f"{layout!r}: fits() = {fits!r} ({fits_error!r}) but check_fits "
                     f"raised {check_error!r}")
    max_cells = _sometimes_odd(data, st.sampled_from([2**24, 2**24, 100, 0]), "max_cells", odds=6)
    occupancy, error = check_surface("npu.occupancy", lambda: layout.occupancy(max_cells=max_cells))
    if error is None:
        used = occupancy["used_bytes"].values
        if used.size and (used.min() < 0 or used.max() > layout.eu_bytes):
            report_wrong("npu.occupancy", f"{layout!r}: used bytes per row outside [0, {layout.eu_bytes}]")
        if occupancy["used_bytes"].size > max(max_cells, 0):
            report_wrong("npu.occupancy", f"{occupancy['used_bytes'].size} cells > max_cells={max_cells}")
    coords = list(arguments(data, {name: st.integers(-1, 9) for name in "nchw"}).values())
    address, error = check_surface("npu.address", lambda: layout.address(*coords))
    if error is None:
        lane, offset = address
        if not 0 <= lane < layout.npu_num or offset < 0 or offset >= max(layout.bytes_per_lane, 1):
            report_wrong("npu.address", f"{layout!r}{coords}: lane {lane}, byte {offset}")
    check_surface("npu.summary", layout.summary)


@settings(**_SETTINGS)
@given(data=st.data())
def test_embedding_padding(data):
    where = data.draw(st.sampled_from(["cores", "topology"] * 8 + ["both", "neither"]), label="where")
    valid = {"vocab_size": weighted((3, st.integers(1, 10**6)), (1, _BIG)), "embedding_dim": _count(1, 300),
             "dtype": st.sampled_from(["f32", "bf16", "f16", "s8", "float32", "F32 ", "int4"]),
             "line_bytes": st.sampled_from([32, 32, 64, 1, 3, 2**40])}
    if where in ("cores", "both"):
        valid["num_sparsecores"] = _count(1, 64)
    if where in ("topology", "both"):
        valid["topology"] = st.one_of(
            st.builds(scwork.Topology, st.integers(1, 8), st.integers(0, 4)),
            st.sampled_from([scwork.Topology.for_chip("v5p", num_chips=4)] * 4 + [scwork.Topology.for_chip("v5e", 4)]))
    kwargs = arguments(data, valid)
    vocab, dim, dtype, line_bytes = (kwargs.pop(k) for k in ("vocab_size", "embedding_dim", "dtype", "line_bytes"))
    table, error = check_surface("embedding.table_padding", lambda: embedding.table_padding(
        vocab, dim, dtype=dtype, line_bytes=line_bytes, **kwargs))
    if error is None:
        if table.padded_bytes < table.unpadded_bytes or table.unpadded_bytes < 0 or table.waste_bytes < 0 \
                or not 0.0 <= table.waste_fraction <= 1.0 or table.padded_vocab < table.vocab_size:
            report_wrong("embedding.table_padding", f"{table!r}: padded {table.padded_bytes} < unpadded "
                         f"{table.unpadded_bytes} or waste fraction {table.waste_fraction}")
        check_surface("embedding.summary", table.summary)
    whatif, error = check_surface("embedding.packing_whatif", lambda: embedding.packing_whatif(
        vocab, dim, dtype=dtype, line_bytes=line_bytes, **kwargs))
    if error is None:
        saved = whatif.attrs["bytes_saved"]
        if saved < 0 or (whatif["bytes"].values < whatif.attrs["unpadded_bytes"]).any():
            report_wrong("embedding.packing_whatif", f"saves {saved} bytes, bytes {whatif['bytes'].values}")
    valid_tables = st.dictionaries(st.text(max_size=4), st.tuples(st.integers(1, 10**6), _count(1, 300)),
                                   min_size=1, max_size=3)
    if table is not None:
        valid_tables = st.one_of(valid_tables, st.just([table]))
    tables = data.draw(weighted((6, valid_tables), (1, st.dictionaries(
        st.one_of(st.text(max_size=4), st.integers()),
        st.one_of(st.tuples(odd_scalars(), odd_scalars()), odd_scalars()), max_size=3)), (1, odd_arrays())),
        label="tables")
    report, error = check_surface("embedding.padding_report", lambda: embedding.padding_report(
        tables, dtype=dtype, **kwargs))
    if error is None:
        padded, unpadded = report["padded_bytes"].values, report["unpadded_bytes"].values
        if (padded < unpadded).any() or (unpadded < 0).any():
            report_wrong("embedding.padding_report", f"padded {padded} < unpadded {unpadded}")


def test_typed_errors_are_scwork_errors():
    # The fuzz tests count ScworkError as typed; make sure the layout errors are ones.
    assert issubclass(scwork.errors.LayoutError, ScworkError)
