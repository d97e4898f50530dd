"""Fuzz: model config files (``scwork.config.load_config``, ``parse_config``) and sizes (``parse_size``).

Each case builds a valid config tree, then maybe breaks one entry (a wrong type, an
unknown key, deep nesting, a 5000-digit integer, ``"1e400 GiB"``, unicode), writes it
as TOML or JSON (sometimes with mutated bytes) and loads it through
:func:`scwork.testing.check_surface`. A file must load or raise a
:class:`~scwork.errors.ConfigError` naming the file; what loads must describe the
same model again after ``to_dict`` (nothing half-applied, nothing silently changed).
"""

from __future__ import annotations

import json
import math
import tempfile
from fractions import Fraction
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from scwork.config import TOP_LEVEL_KEYS, load_config, parse_config, parse_size
from scwork.errors import ConfigError
from scwork.testing import (
    TRICKY_INTEGER_TEXTS,
    check_surface,
    fuzz_settings,
    mutated_bytes,
    odd_scalars,
    report_wrong,
    weighted,
)

#: Public callables this module drives, and the surface label of their cases
#: (tests/fuzz/test_surface_coverage.py).
SURFACES = {
    "scwork.config.parse_config": "config.parse_config",
    "scwork.config.load_config": "config.load_config.path",
    "scwork.config.parse_size": "config.parse_size",
    "scwork.config.ModelConfig": ("config.parse_config", "reached through parse_config (it builds one)"),
    "scwork.config.MemoryOptions": ("config.parse_config", "reached through parse_config's [memory] table"),
}

_SETTINGS = fuzz_settings()


_SIZE_TEXTS = ["64 MiB", "1.5GB", "512KiB", "0", "1e6", "1e400 GiB", "1e-400", "-1 GiB", "1.5", "10 PiB",
               "9" * 64 + " B", "9" * 65, "1_000 KiB", "٣ MiB", "１２ GB", "nan", "inf GiB", " 7 kB ", "1e30",
               "0.5 KiB", "1 XiB", "", "GiB", "2**10", "1e+0030 B", "12345678901234567"]

#: Odd values for any entry: wrong types, huge and tiny numbers, unicode, deep nesting.
_ODD_VALUES = weighted(
    (4, odd_scalars()), (1, st.sampled_from(_SIZE_TEXTS)),
    (1, st.sampled_from([10**30, 2**63, -2**63 - 1, 10**4000, 1e308, -0.0, float("inf"), float("nan")])),
    (1, st.sampled_from(["v5p\u0000", "ｖ5p", "V5P", "𝑣5p", "v5p ", "\u202ev5p", "x" * 10_000])),
    (1, st.builds(lambda depth: json.loads("[" * depth + "]" * depth), st.sampled_from([2, 50, 400]))),
    (1, st.lists(st.integers(-2, 3), max_size=3)), (1, st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)))


@st.composite
def config_trees(draw):
    """A valid config tree (dict as TOML/JSON give it); in most cases one entry is then broken."""
    chip = draw(st.sampled_from(["v5p", "v6e", "tpu7x", "generic"]))
    if chip == "generic":
        topology = {"num_chips": draw(st.integers(1, 8)), "sparsecores_per_chip": draw(st.integers(0, 4))}
    else:
        topology = {"chip": chip, "num_chips": draw(st.sampled_from([1, 2, 4, 8]))}
    count = draw(st.integers(1, 3))
    tables = []
    for i in range(count):
        table = {"name": f"t{i}", "vocab_size": draw(st.integers(1, 10**6)),
                 "embedding_dim": draw(st.sampled_from([1, 8, 16, 64]))}
        if draw(st.booleans()):
            table["combiner"] = draw(st.sampled_from(["sum", "mean", "sqrtn"]))
            table["optimizer"] = draw(st.sampled_from(["sgd", "adagrad", "adam"]))
        if draw(st.booleans()):
            table["max_ids_per_partition"] = draw(st.integers(1, 4096))
            table["max_unique_ids_per_partition"] = draw(st.integers(1, table["max_ids_per_partition"]))
        tables.append(table)
    tree = {"topology": topology, "tables": tables}
    if draw(st.booleans()):
        tree["batch_size"] = draw(st.sampled_from([64, 256, 4096]))
    if draw(st.booleans()):
        tree["features"] = {f"f{i}": draw(st.sampled_from([t["name"], {"table": t["name"], "ids_per_sample": 4}]))
                            for i, t in enumerate(tables)}
    if draw(st.booleans()):
        tree["stacking"] = draw(st.sampled_from(["auto", "none", [[t["name"] for t in tables]]]))
    if draw(st.booleans()):
        tree["memory"] = {"dtype": draw(st.sampled_from(["f32", "bf16"])),
                          "dense_weights_bytes": draw(st.sampled_from(["2 GiB", 0, 4096, "1.5GB"])),
                          "headroom": draw(st.sampled_from([0.1, 0, 0.5])),
                          "maximum_parallel_iterations": draw(st.integers(1, 4))}
    if draw(st.booleans()):
        tree["sparsecore"] = {"allow_id_dropping": draw(st.booleans()),
                              "max_ids_per_table": draw(st.sampled_from([4096, {tables[0]["name"]: 8192}]))}
    how = draw(st.sampled_from(["same", "same", "value", "value", "value", "unknown key", "drop", "nest"]))
    if how == "same":
        return tree, how
    # pick a place: the tree, or one of its sections / tables
    holders = [tree] + [v for v in tree.values() if isinstance(v, dict)] + tree["tables"]
    holder = draw(st.sampled_from(holders))
    keys = sorted(holder, key=str)
    if how == "value" and keys:
        holder[draw(st.sampled_from(keys))] = draw(_ODD_VALUES)
    elif how == "unknown key":
        key = draw(st.sampled_from(["tabels", "vocab", "Batch_size", "", "ключ", "k" * 300] + list(TOP_LEVEL_KEYS)))
        holder[key] = draw(_ODD_VALUES)
    elif how == "drop" and keys:
        del holder[draw(st.sampled_from(keys))]
    elif how == "nest" and keys:
        key = draw(st.sampled_from(keys))
        value = holder[key]
        for _ in range(draw(st.sampled_from([1, 3, 200]))):
            value = {"x": value}
        holder[key] = value
    return tree, how


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value.bit_length() < 14_000 else "9" * 5000
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)          # a TOML basic string (lone surrogates make it invalid TOML)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(repr(value))      # bytes, None, complex: written as text


def to_toml(tree: dict) -> str:
    """TOML text of a tree (``key = value`` lines with inline tables; enough for these trees)."""
    return "\n".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in tree.items()) + "\n"


def to_json(tree: dict) -> str:
    def default(value):
        return repr(value)
    return json.dumps(tree, default=default)


def _check_config(surface: str, cfg) -> None:
    """What loads must be self-consistent and survive ``to_dict`` unchanged."""
    parts = cfg.topology.num_devices * cfg.topology.sparsecores_per_device
    if cfg.batch_size is not None and (cfg.batch_size < 1 or (parts and cfg.batch_size % parts)):
        report_wrong(surface, f"batch_size {cfg.batch_size} over {parts} SparseCores accepted")
    names = [t.name for t in cfg.tables]
    if len(set(names)) != len(names) or not names:
        report_wrong(surface, f"table names {names}")
    for key, value in cfg.memory.plan_kwargs().items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (value < 0 or value != value):
            report_wrong(surface, f"memory.{key} = {value!r} accepted")
    again, error = check_surface("config.parse_config", lambda: parse_config(cfg.to_dict(), source=cfg.source))
    if error is not None or again != cfg:
        report_wrong(surface, f"to_dict does not rebuild the config: {error!r}")


@settings(**_SETTINGS)
@given(case=config_trees(), fmt=st.sampled_from(["toml", "json"]), data=st.data())
def test_load_config(case, fmt, data):
    tree, how = case
    try:
        text = to_toml(tree) if fmt == "toml" else to_json(tree)
        raw = text.encode("utf-8", errors="surrogatepass")
    except (ValueError, RecursionError):
        raw = b"\xff"                     # a tree that cannot even be written: garbage bytes
    if data.draw(st.integers(0, 4), label="mutate?") == 4:
        raw = data.draw(mutated_bytes(raw), label="file bytes")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"model.{fmt}"
        path.write_bytes(raw)
        cfg, error = check_surface(f"config.load_config.{fmt}", lambda: load_config(path), seconds=10)
        if error is not None:
            if str(path) not in str(error):
                report_wrong(f"config.load_config.{fmt}", f"the error does not name the file: {error}")
            return
        _check_config(f"config.load_config.{fmt}", cfg)
    if how == "same" and cfg.batch_size != tree.get("batch_size"):
        report_wrong(f"config.load_config.{fmt}", f"batch_size {cfg.batch_size} read, {tree.get('batch_size')} written")


@settings(**_SETTINGS)
@given(case=config_trees(), source=weighted((4, st.just("m.toml")), (1, st.text(max_size=8))))
def test_parse_config(case, source):
    tree, _ = case
    cfg, error = check_surface("config.parse_config", lambda: parse_config(tree, source=source))
    if error is None:
        _check_config("config.parse_config", cfg)


@settings(**_SETTINGS)
@given(path=weighted((3, st.sampled_from(["", ".", "/", "/nonexistent/m.toml", "m.yaml", "a\x00b.toml",
                                          "/dev/null.json", "/proc/self/status.toml"])), (1, odd_scalars()),
                     (1, st.text(max_size=20).map(lambda t: t + ".toml"))))
def test_load_config_paths(path):
    check_surface("config.load_config.path", lambda: load_config(path))


@settings(**_SETTINGS)
@given(value=weighted((4, st.sampled_from(_SIZE_TEXTS + list(TRICKY_INTEGER_TEXTS))),
                      (2, st.builds(lambda number, unit, space: f"{number}{space}{unit}",
                                    st.one_of(st.integers(0, 10**20), st.floats(0, 1e20), st.sampled_from(
                                        ["1e400", "1e-5", "0.1", "1_0", "00012", "1.", ".5", "9" * 70])),
                                    st.sampled_from(["", "B", "k", "kB", "KiB", "M", "MiB", "G", "GiB", "TiB", "PiB",
                                                     "Pi", "ki", "KB", "b", "EiB"]),
                                    st.sampled_from(["", " ", "  ", "\t"]))),
                      (2, odd_scalars()), (1, st.text(max_size=12))))
def test_parse_size(value):
    size, error = check_surface("config.parse_size", lambda: parse_size(value))
    if error is not None:
        return
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= 2**63 - 1:
        report_wrong("config.parse_size", f"parse_size({value!r}) = {size!r}")
    if isinstance(value, str):
        # the exact value of the text: digits (no float rounding) times the unit
        text = value.strip().replace("_", "")
        units = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
                 "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
        lowered = text.lower().removesuffix("b").rstrip()
        for unit in sorted(units, key=len, reverse=True):
            if unit and lowered.endswith(unit):
                number = lowered[: -len(unit)].strip()
                break
        else:
            unit, number = "", lowered
        try:
            exact = Fraction(number) * units[unit]
        except (ValueError, ZeroDivisionError):
            return
        if exact != size:
            report_wrong("config.parse_size", f"parse_size({value!r}) = {size}, the text says {exact}")
    elif isinstance(value, (int, float)) and size != value:
        report_wrong("config.parse_size", f"parse_size({value!r}) = {size}")


def test_config_errors_are_config_errors():
    _, error = check_surface("config.parse_size", lambda: parse_size("1e400 GiB"))
    assert isinstance(error, ConfigError)
