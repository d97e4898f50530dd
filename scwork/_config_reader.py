"""Reading a config tree: every key checked, each error named by its file and key path."""

from __future__ import annotations

import difflib
import math
import numbers
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scwork._config_schema import (
    _check_batch,
    _type_name,
    _FEATURE_KEYS,
    _INT32_MAX,
    _MEMORY_KEYS,
    _SIZE_KNOBS,
    _SPARSECORE_KEYS,
    _STACK_KEYS,
    _TABLE_KEYS,
    _TOPOLOGY_KEYS,
    parse_size,
    TOP_LEVEL_KEYS,
)
from scwork._config_types import MemoryOptions, ModelConfig
from scwork._validate import shown
from scwork.errors import ConfigError, ScworkError


class _Reader:
    """Checks one config tree; every ``fail`` names the file and the key path."""

    def __init__(self, source: str, base_dir: Path):
        self.source = source
        self.base_dir = base_dir

    # -- error helpers ----------------------------------------------------------------
    def fail(self, key: str, problem: str, fix: str) -> ConfigError:
        err = ConfigError(f"{self.source}: {key}: {problem}. How to fix: {fix}")
        err.file, err.key = self.source, key  # for callers that want the pieces
        return err

    def mapping(self, value: Any, key: str, example: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be a table of keys, got {shown(value)} ({_type_name(value)})", example)
        return value

    def keys(self, value: Mapping[str, Any], key: str, allowed: tuple[str, ...],
             required: tuple[str, ...] = ()) -> None:
        for name in value:
            if name not in allowed:
                where = f"{key}.{name}" if key else str(name)
                close = difflib.get_close_matches(str(name), allowed, n=1, cutoff=0.6)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise self.fail(where, "unknown key", f"{hint}known keys here: {', '.join(allowed)}")
        for name in required:
            if name not in value:
                where = f"{key}.{name}" if key else name
                raise self.fail(where, "missing (required)", f"add {name} = ... to {key or 'the top of the file'}")

    def integer(self, value: Any, key: str, *, minimum: int, fix: str, maximum: int = _INT32_MAX) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise self.fail(key, f"must be an integer, got {shown(value)} ({_type_name(value)})", fix)
        if value < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {shown(value)}", fix)
        if value > maximum:
            raise self.fail(key, f"must be <= {maximum}, got {shown(value)}", fix)
        return int(value)

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {shown(value)} ({_type_name(value)})",
                            f"write {key.rsplit('.', 1)[-1]} = true or false (no quotes)")
        return value

    def string(self, value: Any, key: str, fix: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty string, got {shown(value)} ({_type_name(value)})", fix)
        return value

    def choice(self, value: Any, key: str, choices: tuple[str, ...], what: str) -> str:
        self.string(value, key, f"use one of {', '.join(choices)}")
        if value not in choices:
            close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
            hint = f"did you mean {shown(close[0])}? " if close else ""
            raise self.fail(key, f"unknown {what} {shown(value)}", f"{hint}use one of {', '.join(choices)}")
        return value

    def size(self, value: Any, key: str, *, minimum: int = 0) -> int:
        try:
            out = parse_size(value, key)
        except ConfigError as err:
            raise self.fail(key, str(err).removeprefix(f"{key} "), "give bytes as an integer or text such as "
                            "'64 MiB' or '2GB'") from None
        if out < minimum:
            raise self.fail(key, f"must be >= {minimum} bytes, got {shown(out)}", "give a positive size")
        return out

    # -- sections ---------------------------------------------------------------------
    def model(self, data: Any) -> ModelConfig:
        data = self.mapping(data, "(top level)", "the file must hold keys such as [topology] and [[tables]]")
        self.keys(data, "", TOP_LEVEL_KEYS, required=("topology", "tables"))
        topology = self.topology(data["topology"])
        batch_size = None
        if "batch_size" in data:
            try:
                batch_size = _check_batch(self.source, "batch_size", data["batch_size"], topology)
            except ConfigError as err:
                err.file, err.key = self.source, "batch_size"
                raise
        tables = self.tables(data["tables"])
        by_name = {t.name: t for t in tables}
        features, columns, ids_per_sample = self.features(data.get("features"), by_name)
        stacking = self.stacking(data.get("stacking", "auto"), by_name)
        config = self.sparsecore(data.get("sparsecore", {}), by_name)
        memory = self.memory(data.get("memory", {}), by_name)
        limits, limits_file = self.limits(data.get("limits_file"))
        stacks = self.stacks(data.get("stacks", {}))
        return ModelConfig(source=self.source, tables=tables, features=features, topology=topology,
                           sparsecore_config=config, batch_size=batch_size, stacking=stacking, columns=columns,
                           ids_per_sample=ids_per_sample, memory=memory, limits=limits, limits_file=limits_file,
                           stacks=stacks)

    def stacks(self, value: Any) -> dict[str, dict[str, int]]:
        example = "e.g. [stacks.item] max_ids_per_partition = 512"
        value = self.mapping(value, "stacks", example)
        out = {}
        for name, entry in value.items():
            key = f"stacks.{name}"
            entry = self.mapping(entry, key, example)
            self.keys(entry, key, _STACK_KEYS)
            out[str(name)] = {k: self.integer(entry[k], f"{key}.{k}", minimum=1,
                                              fix="give a positive count (ids or CSR entries)")
                              for k in _STACK_KEYS if k in entry}
        return out

    def topology(self, value: Any):
        from scwork import hardware
        from scwork.hardware.topology import Topology

        example = "e.g. [topology] chip = \"v5p\", num_chips = 4"
        value = self.mapping(value, "topology", example)
        self.keys(value, "topology", _TOPOLOGY_KEYS)
        num_chips = None
        if "num_chips" in value:
            num_chips = self.integer(value["num_chips"], "topology.num_chips", minimum=1,
                                     fix="give the number of chips, e.g. num_chips = 4")
        shape = None
        if "shape" in value:
            raw = value["shape"]
            if not isinstance(raw, list) or not raw:
                raise self.fail("topology.shape", f"must be a non-empty array of integers, got {shown(raw)}",
                                "write shape = [4, 4] (chips per grid dimension)")
            shape = tuple(self.integer(s, f"topology.shape[{i}]", minimum=1,
                                       fix="every grid dimension holds at least one chip")
                          for i, s in enumerate(raw))
            if num_chips is not None and math.prod(shape) != num_chips:
                raise self.fail("topology.shape", f"{list(shape)} holds {math.prod(shape)} chips but "
                                f"num_chips = {num_chips}", "make the product of shape equal num_chips, "
                                "or drop num_chips")
        wrap = None
        if "wraparound" in value:
            raw = value["wraparound"]
            if not isinstance(raw, list):
                raise self.fail("topology.wraparound", f"must be an array of booleans, got {shown(raw)}",
                                "write wraparound = [true, false] (one flag per shape dimension)")
            wrap = tuple(self.boolean(w, f"topology.wraparound[{i}]") for i, w in enumerate(raw))
            if shape is None:
                raise self.fail("topology.wraparound", "needs topology.shape", "add shape = [...] with one "
                                "dimension per wraparound flag")
            if len(wrap) != len(shape):
                raise self.fail("topology.wraparound", f"has {len(wrap)} flags but shape has {len(shape)} "
                                "dimensions", "give one flag per dimension of shape")
        if "chip" in value:
            chip = self.string(value["chip"], "topology.chip",
                               f"use a catalog chip: {', '.join(hardware.names('tpu'))}")
            for generic in ("sparsecores_per_chip", "devices_per_chip"):
                if generic in value:
                    raise self.fail(f"topology.{generic}", "comes from the catalog when chip is given",
                                    f"drop {generic}, or drop chip for a generic system")
            try:
                info = hardware.get(chip)
            except ScworkError:
                close = difflib.get_close_matches(chip.lower(), hardware.names("tpu"), n=1, cutoff=0.5)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise self.fail("topology.chip", f"unknown chip {shown(chip)}",
                                f"{hint}use one of {', '.join(hardware.names('tpu'))}") from None
            if info.kind != "tpu":
                raise self.fail("topology.chip", f"{info.name} is a Sophgo NPU, it has no SparseCores",
                                f"use a TPU: {', '.join(hardware.names('tpu'))}")
            if num_chips is None and shape is None:
                raise self.fail("topology.num_chips", "missing (give num_chips or shape)",
                                "add num_chips = 4 (or shape = [2, 2])")
            try:
                return Topology.for_chip(info.name, num_chips, shape=shape, wraparound=wrap)
            except ScworkError as err:
                where = "topology.num_chips" if "num_chips" in value else "topology.shape"
                raise self.fail(where, str(err).rstrip("."), f"use at most {info.max_slice_chips} chips of "
                                f"{info.name}") from None
        # generic system
        if "sparsecores_per_chip" not in value:
            raise self.fail("topology.chip", "missing: give a catalog chip, or sparsecores_per_chip for a "
                            "generic system", f"add chip = \"v5p\" (known: {', '.join(hardware.names('tpu'))})")
        sc = self.integer(value["sparsecores_per_chip"], "topology.sparsecores_per_chip", minimum=0,
                          fix="give the SparseCores of one chip, e.g. sparsecores_per_chip = 4")
        dev = 1
        if "devices_per_chip" in value:
            dev = self.integer(value["devices_per_chip"], "topology.devices_per_chip", minimum=1,
                               fix="give the JAX devices per chip, e.g. devices_per_chip = 1")
        if num_chips is None:
            if shape is None:
                raise self.fail("topology.num_chips", "missing (give num_chips or shape)", "add num_chips = 8")
            num_chips = math.prod(shape)
        try:
            return Topology(num_chips, sc, shape=shape, wraparound=wrap, devices_per_chip=dev)
        except ScworkError as err:
            raise self.fail("topology", str(err).rstrip("."), "change the topology entries") from None

    def tables(self, value: Any) -> tuple:
        from scwork.sharding.specs import COMBINERS, OPTIMIZERS, TableSpec

        if not isinstance(value, list) or not value:
            raise self.fail("tables", f"must be a non-empty array of tables, got {shown(value)}",
                            "add one [[tables]] block per table with name, vocab_size, embedding_dim")
        out, seen = [], {}
        for i, entry in enumerate(value):
            key = f"tables[{i}]"
            entry = self.mapping(entry, key, "write [[tables]] with name = ..., vocab_size = ..., embedding_dim = ...")
            self.keys(entry, key, _TABLE_KEYS, required=("name", "vocab_size", "embedding_dim"))
            name = self.string(entry["name"], f"{key}.name", "give the table a name, e.g. name = \"item\"")
            if name in seen:
                raise self.fail(f"{key}.name", f"duplicate table name {shown(name)} (also tables[{seen[name]}])",
                                "give every table its own name")
            seen[name] = i
            kwargs: dict[str, Any] = {
                "name": name,
                "vocab_size": self.integer(entry["vocab_size"], f"{key}.vocab_size", minimum=1,
                                           fix="give the number of rows of the table, e.g. vocab_size = 1000000"),
                "embedding_dim": self.integer(entry["embedding_dim"], f"{key}.embedding_dim", minimum=1,
                                              fix="give the width of one row, e.g. embedding_dim = 64"),
            }
            if "combiner" in entry:
                kwargs["combiner"] = self.choice(entry["combiner"], f"{key}.combiner", COMBINERS, "combiner")
            if "optimizer" in entry:
                kwargs["optimizer"] = self.choice(entry["optimizer"], f"{key}.optimizer", OPTIMIZERS, "optimizer")
            for limit in ("max_ids_per_partition", "max_unique_ids_per_partition"):
                if limit in entry:
                    kwargs[limit] = self.integer(entry[limit], f"{key}.{limit}", minimum=1,
                                                 fix=f"give a positive limit in ids, e.g. {limit} = 256, "
                                                     "or leave it out (no configured limit)")
            if "suggested_coo_buffer_size_per_device" in entry:
                kwargs["suggested_coo_buffer_size_per_device"] = self.integer(
                    entry["suggested_coo_buffer_size_per_device"], f"{key}.suggested_coo_buffer_size_per_device",
                    minimum=1, fix="give the static CSR buffer of one device in entries, e.g. "
                                   "suggested_coo_buffer_size_per_device = 4096, or leave it out "
                                   "(sized from the limits)")
            try:
                out.append(TableSpec(**kwargs))
            except ScworkError as err:  # checked above already; kept so nothing escapes unnamed
                raise self.fail(key, str(err), "correct the table entry") from None
        return tuple(out)

    def features(self, value: Any, tables: Mapping[str, Any]):
        from scwork.sharding.specs import FeatureSpec

        if value is None:
            return tuple(FeatureSpec(n, t) for n, t in tables.items()), {n: n for n in tables}, {}
        value = self.mapping(value, "features", "write [features] with lines such as clicked = \"item\"")
        if not value:
            raise self.fail("features", "is empty", "add feature = \"table\" lines, or drop [features] "
                            "(then every table gets one feature of its name)")
        features, columns, ids = [], {}, {}
        names = list(tables)
        for name, entry in value.items():
            key = f"features.{name}"
            if isinstance(entry, str):
                entry = {"table": entry}
            entry = self.mapping(entry, key, f"write {name} = \"<table>\" or {name} = {{ table = \"<table>\" }}")
            self.keys(entry, key, _FEATURE_KEYS, required=("table",))
            table = self.string(entry["table"], f"{key}.table", f"name one of the tables: {', '.join(names)}")
            if table not in tables:
                close = difflib.get_close_matches(table, names, n=1, cutoff=0.5)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise self.fail(f"{key}.table", f"no table named {shown(table)}",
                                f"{hint}tables are: {', '.join(names)}")
            columns[name] = name
            if "column" in entry:
                columns[name] = self.string(entry["column"], f"{key}.column",
                                            "give the column of the ids file this feature reads")
            if "ids_per_sample" in entry:
                v = entry["ids_per_sample"]
                if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
                    raise self.fail(f"{key}.ids_per_sample", f"must be a number > 0, got {shown(v)}",
                                    "give the mean number of ids per sample, e.g. ids_per_sample = 20")
                ids[name] = float(v)
            try:
                features.append(FeatureSpec(name, tables[table]))
            except ScworkError as err:
                raise self.fail(key, str(err), "correct the feature entry") from None
        return tuple(features), columns, ids

    def stacking(self, value: Any, tables: Mapping[str, Any]):
        fix = "use \"auto\", \"none\", or groups of table names such as [[\"t0\", \"t1\"], [\"t2\"]]"
        if isinstance(value, str):
            if value == "auto":
                return "auto"
            if value == "none":
                return None
            raise self.fail("stacking", f"unknown value {shown(value)}", fix)
        if not isinstance(value, list) or not value:
            raise self.fail("stacking", f"must be \"auto\", \"none\" or an array of groups, got {shown(value)}", fix)
        groups, placed = [], {}
        for i, group in enumerate(value):
            if not isinstance(group, list) or not group:
                raise self.fail(f"stacking[{i}]", f"must be a non-empty array of table names, got {shown(group)}", fix)
            names = []
            for j, name in enumerate(group):
                key = f"stacking[{i}][{j}]"
                if not isinstance(name, str):
                    raise self.fail(key, f"must be a table name, got {shown(name)}", fix)
                if name not in tables:
                    close = difflib.get_close_matches(name, list(tables), n=1, cutoff=0.5)
                    hint = f"did you mean {shown(close[0])}? " if close else ""
                    raise self.fail(key, f"no table named {shown(name)}", f"{hint}tables are: {', '.join(tables)}")
                if name in placed:
                    raise self.fail(key, f"table {shown(name)} is already in stacking[{placed[name]}]",
                                    "put every table in one group only")
                placed[name] = i
                names.append(name)
            groups.append(tuple(names))
        return tuple(groups)

    def _per_table_ints(self, value: Any, key: str, tables: Mapping[str, Any]):
        fix = f"give an integer for every table ({key} = 4096) or one per table ({key} = {{ name = 4096 }})"
        if value is None or (isinstance(value, numbers.Integral) and not isinstance(value, bool)):
            if value is not None:
                self.integer(value, key, minimum=1, fix=fix)
            return value
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be an integer or a table of integers, got {shown(value)} "
                            f"({_type_name(value)})", fix)
        for name, v in value.items():
            if name not in tables:
                close = difflib.get_close_matches(name, list(tables), n=1, cutoff=0.5)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise self.fail(f"{key}.{name}", f"no table named {shown(name)}",
                                f"{hint}tables are: {', '.join(tables)}")
            self.integer(v, f"{key}.{name}", minimum=1, fix=fix)
        return dict(value)

    def sparsecore(self, value: Any, tables: Mapping[str, Any]):
        from scwork.sharding.specs import SparsecoreConfig

        value = self.mapping(value, "sparsecore", "write [sparsecore] with flags such as allow_id_dropping = false")
        self.keys(value, "sparsecore", _SPARSECORE_KEYS)
        kwargs: dict[str, Any] = {}
        for name in ("disable_table_stacking", "allow_id_dropping", "initialize_tables_on_host",
                     "enable_fast_table_initialization"):
            if name in value:
                kwargs[name] = self.boolean(value[name], f"sparsecore.{name}")
        if "max_ids_per_chip_per_sample" in value:
            kwargs["max_ids_per_chip_per_sample"] = self.integer(
                value["max_ids_per_chip_per_sample"], "sparsecore.max_ids_per_chip_per_sample", minimum=1,
                fix="give a positive cap, e.g. max_ids_per_chip_per_sample = 64")
        for name in ("max_ids_per_table", "max_unique_ids_per_table"):
            if name in value:
                kwargs[name] = self._per_table_ints(value[name], f"sparsecore.{name}", tables)
        try:
            return SparsecoreConfig(**kwargs)
        except ScworkError as err:
            raise self.fail("sparsecore", str(err), "correct the [sparsecore] entries") from None

    def _dtype(self, value: Any, key: str, tables: Mapping[str, Any]):
        from scwork.memory._model import DTYPE_SIZES, parse_dtype

        fix = f"use one of {', '.join(DTYPE_SIZES)} (or {{ table = \"bf16\" }} per table)"

        def one(v, where):
            if not isinstance(v, str):
                raise self.fail(where, f"must be a dtype name, got {shown(v)} ({_type_name(v)})", fix)
            try:
                return parse_dtype(v, where)[0]
            except ConfigError:
                close = difflib.get_close_matches(v.lower(), list(DTYPE_SIZES), n=1, cutoff=0.5)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise self.fail(where, f"unknown dtype {shown(v)}", hint + fix) from None

        if isinstance(value, Mapping):
            out = {}
            for name, v in value.items():
                if name not in tables:
                    close = difflib.get_close_matches(name, list(tables), n=1, cutoff=0.5)
                    hint = f"did you mean {shown(close[0])}? " if close else ""
                    raise self.fail(f"{key}.{name}", f"no table named {shown(name)}",
                                    f"{hint}tables are: {', '.join(tables)}")
                out[name] = one(v, f"{key}.{name}")
            return types.MappingProxyType(out)
        return one(value, key)

    def memory(self, value: Any, tables: Mapping[str, Any]) -> MemoryOptions:
        value = self.mapping(value, "memory", "write [memory] with knobs such as num_serialized_tables = 1")
        self.keys(value, "memory", _MEMORY_KEYS)
        kwargs: dict[str, Any] = {}
        for name in ("dtype", "slot_dtype"):
            if name in value:
                kwargs[name] = self._dtype(value[name], f"memory.{name}", tables)
        for name in ("num_serialized_tables", "maximum_parallel_iterations"):
            if name in value:
                kwargs[name] = self.integer(value[name], f"memory.{name}",
                                            minimum=0 if name == "num_serialized_tables" else 1,
                                            fix=f"give a whole number, e.g. {name} = 2")
        if "logical_replica_count" in value:
            kwargs["logical_replica_count"] = self.integer(
                value["logical_replica_count"], "memory.logical_replica_count", minimum=1,
                fix="give a positive count, or leave it out (default: the number of partitions)")
        if "stage_gather_operands_in_hbm" in value:
            kwargs["stage_gather_operands_in_hbm"] = self.boolean(value["stage_gather_operands_in_hbm"],
                                                                  "memory.stage_gather_operands_in_hbm")
        if "headroom" in value:
            h = value["headroom"]
            if isinstance(h, bool) or not isinstance(h, numbers.Real) or not 0 <= h < 1:
                raise self.fail("memory.headroom", f"must be a number in [0, 1), got {shown(h)}",
                                "give the share of HBM kept free, e.g. headroom = 0.1")
            kwargs["headroom"] = float(h)
        for name in _SIZE_KNOBS:
            if name in value:
                kwargs[name] = self.size(value[name], f"memory.{name}",
                                         minimum=1 if name in ("hbm_bytes", "tile_spmem_bytes") else 0)
        return MemoryOptions(**kwargs)

    def limits(self, value: Any):
        if value is None:
            return None, None
        name = self.string(value, "limits_file", "give the path of a limits file (.json or .csv)")
        path = Path(name)
        if not path.is_absolute():
            path = self.base_dir / path
        from scwork.sharding.limits_files import read_limits

        try:
            return read_limits(path), str(path)
        except ScworkError as err:
            raise self.fail("limits_file", str(err).splitlines()[0].rstrip("."),
                            "point limits_file at a limits file written by scwork stats --out") from None
