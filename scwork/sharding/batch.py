"""A batch of embedding ids for several features, validated once ([sc-guide] §2-3; [sc-guide] §12).

:class:`FeatureBatch` holds, for every feature, the ids of each sample of a batch
in CSR form: ``ids`` (int64) and ``row_splits`` (int64, ``batch_size + 1`` offsets,
sample ``b`` owns ``ids[row_splits[b]:row_splits[b + 1]]``), plus optional float32
``weights`` (default 1.0). Build one from ragged arrays, dense padded arrays, COO
triples or a pandas / pyarrow table; every constructor validates the input and
raises :class:`~scwork.errors.InputError` saying what is wrong and where: negative
ids, NaN or infinite weights (the NaN check of [sc-guide] §12), lengths that do not match, wrong
dtypes (floats that are not integral, strings), features with different batch
sizes.

Internally all features share one flat id buffer (so the numba kernels get a single
array) with absolute offsets per feature.

Examples
--------
The example batch of [sc-guide] §3, ``[[A], [A, B, C], [B, B, D]]`` with A..D = 0..3:

>>> import numpy as np
>>> from scwork.sharding import FeatureBatch
>>> batch = FeatureBatch.from_ragged({"f": (np.array([0, 0, 1, 2, 1, 1, 3]), np.array([0, 1, 4, 7]))})
>>> batch
FeatureBatch(batch_size=3, features=1, ids=7: f (7 ids, <= 3 per sample))
>>> ids, row_splits = batch["f"]
>>> ids.tolist(), row_splits.tolist()
([0, 0, 1, 2, 1, 1, 3], [0, 1, 4, 7])
>>> FeatureBatch.from_dense({"f": [[0, -1, -1], [0, 1, 2], [1, 1, 3]]})["f"][1].tolist()
[0, 1, 4, 7]
>>> FeatureBatch.from_ragged({"f": (np.array([3, -2]), np.array([0, 1, 2]))})
Traceback (most recent call last):
...
scwork.errors.InputError: feature 'f': negative id -2 in sample 1 (position 1 of ids); ids must be >= 0
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from scwork.errors import InputError

__all__ = ["FeatureBatch"]

_INT64_MAX = np.iinfo(np.int64).max
# Text ids: ASCII digits only (``int()`` would also take "1_000", "+5" or Arabic-Indic
# digits), at most 19 digits (int64); text weights: plain ASCII decimal numbers.
_INT_TEXT = re.compile(r"-?[0-9]{1,19}")
_FLOAT_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,4})?|[+-]?(nan|inf|infinity)",
                         re.IGNORECASE)
_FLOAT_TEXT_MAX = 400        # characters: longer numbers are not weights anyone meant


def _mapping(what: str, value: Any, form: str) -> Mapping:
    """``value`` if it is a mapping, else an InputError naming the expected form."""
    if not isinstance(value, Mapping):
        raise InputError(f"{what} must be a dict {form}, got {type(value).__name__}")
    return value


def _sorted_names(names) -> list:
    """Names sorted for messages; keys of any type (a non-string key must not break sorting)."""
    return sorted(names, key=repr)


def _sample_of(row_splits: np.ndarray, position: int) -> int:
    return int(np.searchsorted(row_splits, position, side="right") - 1)


def _as_ids(feature: str, values: Any, what: str = "ids") -> np.ndarray:
    """Validate and convert ids to a 1-D int64 array (no negativity check)."""
    try:
        arr = np.asarray(values)
    except OverflowError:
        raise InputError(f"feature {feature!r}: {what} hold an integer outside the int64 range "
                         f"(-2**63 .. 2**63 - 1); ids must fit in int64") from None
    except (ValueError, TypeError) as err:
        raise InputError(
            f"feature {feature!r}: {what} cannot be read as an array ({err}); nested lists must be "
            "rectangular here: give flat ids with row_splits, or use from_dense with padding"
        ) from None
    if arr.dtype.kind in "USO":
        if arr.dtype.kind == "O" and arr.size and all(isinstance(v, numbers.Integral)
                                                       and not isinstance(v, bool) for v in arr.ravel()):
            flat = arr.ravel()
            big = [i for i, v in enumerate(flat) if not -_INT64_MAX - 1 <= int(v) <= _INT64_MAX]
            if big:
                raise InputError(f"feature {feature!r}: {what}[{big[0]}] = {int(flat[big[0]])} does not fit "
                                 "in int64 (-2**63 .. 2**63 - 1)")
            arr = arr.astype(np.int64)
        else:
            raise InputError(
                f"feature {feature!r}: {what} must be integers, got dtype {arr.dtype} "
                "(strings or objects); parse them first, or use FeatureBatch.from_columns(..., sep=',')"
            )
    if arr.dtype.kind == "b":
        raise InputError(f"feature {feature!r}: {what} must be integers, got booleans")
    if arr.dtype.kind == "c":
        raise InputError(f"feature {feature!r}: {what} must be integers, got complex numbers")
    if arr.dtype.kind == "f":
        if arr.size:
            bad = ~np.isfinite(arr) | (arr != np.floor(arr))
            if bad.any():
                pos = int(np.flatnonzero(bad.ravel())[0])
                raise InputError(
                    f"feature {feature!r}: {what} must be integral, got {arr.ravel()[pos]!r} at "
                    f"position {pos}; floats are accepted only when they hold whole numbers"
                )
            if np.abs(arr).max() >= 2.0**63:
                raise InputError(f"feature {feature!r}: {what} do not fit in int64")
        arr = arr.astype(np.int64)
    elif arr.dtype.kind == "u":
        if arr.size and arr.max() > _INT64_MAX:
            raise InputError(f"feature {feature!r}: {what} do not fit in int64 (max {arr.max()})")
        arr = arr.astype(np.int64)
    elif arr.dtype.kind == "i":
        arr = arr.astype(np.int64, copy=False)
    else:  # pragma: no cover - every numpy kind is handled above
        raise InputError(f"feature {feature!r}: unsupported dtype {arr.dtype} for {what}")
    return arr


def _check_ids_1d(feature: str, ids: np.ndarray) -> None:
    if ids.ndim != 1:
        raise InputError(f"feature {feature!r}: ids must be 1-D, got shape {ids.shape}")


def _check_nonnegative(feature: str, ids: np.ndarray, row_splits: np.ndarray) -> None:
    if ids.size and ids.min() < 0:
        pos = int(np.flatnonzero(ids < 0)[0])
        raise InputError(
            f"feature {feature!r}: negative id {int(ids[pos])} in sample "
            f"{_sample_of(row_splits, pos)} (position {pos} of ids); ids must be >= 0"
        )


def _as_row_splits(feature: str, row_splits: Any, num_ids: int) -> np.ndarray:
    rs = _as_ids(feature, row_splits, what="row_splits")
    if rs.ndim != 1 or rs.size < 1:
        raise InputError(
            f"feature {feature!r}: row_splits must be 1-D with batch_size + 1 entries, got shape {rs.shape}"
        )
    if rs[0] != 0:
        raise InputError(f"feature {feature!r}: row_splits must start at 0, got {int(rs[0])}")
    if rs.size > 1:
        step = np.diff(rs)
        if step.min() < 0:
            b = int(np.flatnonzero(step < 0)[0])
            raise InputError(
                f"feature {feature!r}: row_splits must be non-decreasing, but row_splits[{b + 1}]="
                f"{int(rs[b + 1])} < row_splits[{b}]={int(rs[b])} (sample {b} has a negative length)"
            )
    if rs[-1] != num_ids:
        raise InputError(
            f"feature {feature!r}: row_splits end at {int(rs[-1])} but there are {num_ids} ids; "
            "the last row split must equal len(ids)"
        )
    return rs


def _as_weights(feature: str, weights: Any, ids_shape: tuple[int, ...],
                row_splits: np.ndarray | None) -> np.ndarray:
    try:
        w = np.asarray(weights)
    except (ValueError, TypeError, OverflowError) as err:
        raise InputError(f"feature {feature!r}: weights cannot be read as an array of numbers ({err})") from None
    if w.dtype.kind == "O" and w.size and all(isinstance(v, numbers.Real) and not isinstance(v, bool)
                                              for v in w.ravel()):
        try:
            w = w.astype(np.float64)
        except OverflowError:
            raise InputError(f"feature {feature!r}: a weight is too large for a float") from None
    if w.dtype.kind not in "fiu" or w.dtype.kind == "b":
        raise InputError(f"feature {feature!r}: weights must be real numbers, got dtype {w.dtype}")
    if w.shape != ids_shape:
        raise InputError(
            f"feature {feature!r}: weights have shape {w.shape} but ids have shape {ids_shape}; "
            "give one weight per id"
        )
    with np.errstate(over="ignore"):
        w32 = w.astype(np.float32).ravel()
    if w32.size:
        bad = ~np.isfinite(w32)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            where = f" in sample {_sample_of(row_splits, pos)}" if row_splits is not None else ""
            raise InputError(
                f"feature {feature!r}: weight {w.ravel()[pos]!r}{where} (position {pos}) is NaN or "
                "infinite in float32 (the NaN check of [sc-guide] §12); weights must be finite"
            )
        # a non-zero weight below float32's smallest subnormal (1.4e-45) becomes 0
        # and would later read as "the weights sum to 0"
        lost = (w32 == 0) & (w.ravel() != 0)
        if lost.any():
            pos = int(np.flatnonzero(lost)[0])
            where = f" in sample {_sample_of(row_splits, pos)}" if row_splits is not None else ""
            raise InputError(
                f"feature {feature!r}: weight {w.ravel()[pos]!r}{where} (position {pos}) underflows to 0 in "
                "float32 (smallest magnitude 1.4e-45); scale the weights of that feature up"
            )
    return w32


def _place_splits(splits_out, offsets, i: int, row_splits) -> None:
    """Feature ``i``'s ``row_splits``, which may start anywhere (a reader's slice of a longer
    column), shifted to start at ``offsets[i]`` into row ``i`` of ``splits_out``."""
    np.add(row_splits, offsets[i] - row_splits[0], out=splits_out[i])


def _copy_feature_into(ids_out, splits_out, offsets, i: int, ids, row_splits) -> None:
    """Feature ``i`` of a batch put in place: its ``ids`` widened into ``ids_out[offsets[i]:offsets[i + 1]]``
    and its row splits placed (:func:`_place_splits`).

    Features touch disjoint parts of both buffers, so several threads may fill a batch at once.
    """
    np.copyto(ids_out[offsets[i]:offsets[i + 1]], ids, casting="same_kind")
    _place_splits(splits_out, offsets, i, row_splits)


class FeatureBatch(Mapping):
    """Ids (and optional weights) of every feature of one batch, in CSR form.

    A read-only mapping ``feature name -> (ids, row_splits)``. Build it with
    :meth:`from_ragged` (same as the constructor), :meth:`from_dense`,
    :meth:`from_coo` or :meth:`from_columns`.

    Parameters
    ----------
    data : mapping of str to tuple
        ``{feature: (ids, row_splits)}`` or ``{feature: (ids, row_splits, weights)}``.
        ``ids``: 1-D non-negative integers (integral floats accepted); ``row_splits``:
        ``batch_size + 1`` non-decreasing offsets from 0 to ``len(ids)``.
    weights : mapping of str to array, optional
        Per-id weights of some features (float32, finite). Features without weights
        have weight 1.0 for every id.

    Raises
    ------
    InputError
        Bad ids, row splits or weights, or features with different batch sizes.

    Examples
    --------
    >>> import numpy as np
    >>> b = FeatureBatch({"a": ([1, 2, 2], [0, 2, 3]), "b": ([7], [0, 0, 1])},
    ...                  weights={"a": [0.5, 1.0, 2.0]})
    >>> b.batch_size, b.feature_names, b.num_ids
    (2, ('a', 'b'), 4)
    >>> b.weights("a").tolist(), b.weights("b").tolist()
    ([0.5, 1.0, 2.0], [1.0])
    >>> FeatureBatch({"a": ([1], [0, 1]), "b": ([1, 2], [0, 1, 2])})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    scwork.errors.InputError: features have different batch sizes: 'a' has 1 samples, 'b' has 2; ...
    """

    def __init__(self, data: Mapping[str, Sequence[Any]], weights: Mapping[str, Any] | None = None):
        if not isinstance(data, Mapping) or not data:
            raise InputError("a FeatureBatch needs a non-empty dict feature name -> (ids, row_splits)")
        weights = dict(_mapping("weights", weights, "feature name -> per-id weights")) if weights is not None else {}
        unknown = _sorted_names(set(weights) - set(data))
        if unknown:
            raise InputError(f"weights given for unknown features {unknown}; features are {_sorted_names(data)}")
        names, all_ids, all_splits, all_weights = [], [], [], []
        batch_size = None
        first = None
        for name, entry in data.items():
            if not isinstance(name, str) or not name:
                raise InputError(f"feature names must be non-empty strings, got {name!r}")
            if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3):
                raise InputError(
                    f"feature {name!r}: expected (ids, row_splits) or (ids, row_splits, weights), "
                    f"got {type(entry).__name__}"
                )
            ids = _as_ids(name, entry[0])
            _check_ids_1d(name, ids)
            rs = _as_row_splits(name, entry[1], ids.size)
            _check_nonnegative(name, ids, rs)
            w = entry[2] if len(entry) == 3 else None
            if name in weights:
                if w is not None:
                    raise InputError(f"feature {name!r}: weights given twice (in data and in weights=)")
                w = weights[name]
            if w is not None:
                w = _as_weights(name, w, ids.shape, rs)
            b = rs.size - 1
            if batch_size is None:
                batch_size, first = b, name
            elif b != batch_size:
                raise InputError(
                    f"features have different batch sizes: {first!r} has {batch_size} samples, "
                    f"{name!r} has {b}; every feature of a batch needs the same number of samples"
                )
            names.append(name)
            all_ids.append(ids)
            all_splits.append(rs)
            all_weights.append(w)
        self._set(names, all_ids, all_splits, all_weights, batch_size)

    def _set(self, names, all_ids, all_splits, all_weights, batch_size, ids_out=None, splits_out=None,
             each_feature=None) -> None:
        """Assemble the batch from each feature's ids and row splits.

        ``ids_out`` (int64, the total ids long) and ``splits_out`` (int64, ``[features,
        batch_size + 1]``): recycled buffers to fill, else fresh ones. ``each_feature(n,
        copy)``: how the per-feature copies run, calling ``copy(i)`` for each ``i < n``
        (:func:`_copy_feature_into`; features touch disjoint parts of both buffers, so on
        several threads if it likes); None: one pass over all features.
        """
        counts = [ids.size for ids in all_ids]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._names = tuple(names)
        self._index = {n: i for i, n in enumerate(names)}
        # Each feature's splits may start anywhere (a reader's slice of a longer column):
        # shifted into place without a temporary per feature.
        self._splits = np.empty((len(names), batch_size + 1), np.int64) if splits_out is None else splits_out
        if each_feature is not None:
            self._ids = np.empty(int(offsets[-1]), np.int64) if ids_out is None else ids_out
            each_feature(len(names), lambda i: _copy_feature_into(self._ids, self._splits, offsets, i, all_ids[i],
                                                                   all_splits[i]))
        else:
            # one pass: narrower integer ids (a reader keeps their stored width) are widened as they are
            # copied, into ``ids_out`` when the caller recycles a buffer
            if ids_out is not None:
                self._ids = np.concatenate(all_ids, out=ids_out, casting="same_kind")
            else:
                self._ids = np.concatenate(all_ids, dtype=np.int64) if all_ids else np.zeros(0, np.int64)
            for i, rs in enumerate(all_splits):
                _place_splits(self._splits, offsets, i, rs)
        self._has_weights = tuple(w is not None for w in all_weights)
        if any(self._has_weights):
            self._weights = np.concatenate(
                [w if w is not None else np.ones(c, np.float32) for w, c in zip(all_weights, counts)]
            ).astype(np.float32, copy=False)
        else:
            self._weights = None
        self._batch_size = int(batch_size)

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def from_ragged(cls, data: Mapping[str, Sequence[Any]],
                    weights: Mapping[str, Any] | None = None) -> FeatureBatch:
        """From ``{feature: (ids, row_splits)}`` (the constructor's form).

        Examples
        --------
        >>> FeatureBatch.from_ragged({"f": ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])}).batch_size
        2
        """
        return cls(data, weights)

    @classmethod
    def from_dense(cls, data: Mapping[str, Any], weights: Mapping[str, Any] | None = None,
                   *, pad: int = -1) -> FeatureBatch:
        """From dense ``[batch, max_len]`` arrays where ``pad`` (default -1) marks no id.

        A 1-D array means one id per sample. Padding may sit anywhere in a row; the
        remaining ids keep their order. ``weights`` (optional) are arrays of the same
        shape; weights of padding slots are ignored.

        Examples
        --------
        >>> b = FeatureBatch.from_dense({"f": [[0, 1, 2, 3], [1, 3, 5, -1]]})
        >>> b["f"][0].tolist(), b["f"][1].tolist()
        ([0, 1, 2, 3, 1, 3, 5], [0, 4, 7])
        >>> FeatureBatch.from_dense({"f": [4, -1, 6]})["f"][1].tolist()
        [0, 1, 1, 2]
        """
        _mapping("from_dense data", data, "feature name -> dense [batch, max_len] ids")
        if weights is not None:
            _mapping("weights", weights, "feature name -> dense weights")
        pad = _as_ids("<pad>", pad, what="pad")
        if pad.ndim != 0:
            raise InputError(f"pad must be one integer, got shape {pad.shape}")
        pad = int(pad)
        out = {}
        for name, dense in data.items():
            arr = _as_ids(name, dense)
            if arr.ndim == 1:
                arr = arr[:, None]
            if arr.ndim != 2:
                raise InputError(f"feature {name!r}: dense ids must be 1-D or 2-D, got shape {arr.shape}")
            mask = arr != pad
            lengths = mask.sum(axis=1)
            rs = np.zeros(arr.shape[0] + 1, np.int64)
            np.cumsum(lengths, out=rs[1:])
            ids = arr[mask]
            if ids.size and ids.min() < 0:
                pos = np.argwhere(mask & (arr < 0))[0]
                raise InputError(
                    f"feature {name!r}: negative id {int(arr[pos[0], pos[1]])} at sample {pos[0]}, "
                    f"column {pos[1]}; only the padding value {pad} may be negative"
                )
            entry: tuple = (ids, rs)
            if weights is not None and name in weights:
                w = _as_weights(name, weights[name], np.shape(weights[name]), None)
                w = w.reshape(np.shape(weights[name]))
                if w.ndim == 1:
                    w = w[:, None]
                if w.shape != arr.shape:
                    raise InputError(
                        f"feature {name!r}: dense weights have shape {w.shape}, ids have shape {arr.shape}"
                    )
                entry = (ids, rs, w[mask])
            out[name] = entry
        if weights is not None:
            unknown = _sorted_names(set(weights) - set(data))
            if unknown:
                raise InputError(f"weights given for unknown features {unknown}")
        return cls(out)

    @classmethod
    def from_coo(cls, data: Mapping[str, Sequence[Any]],
                 weights: Mapping[str, Any] | None = None) -> FeatureBatch:
        """From COO triples ``{feature: (indices[N, 2], values, dense_shape)}``.

        ``indices[k] = (sample, position)`` of id ``values[k]`` in a
        ``dense_shape = (batch_size, max_len)`` sparse tensor (``tf.SparseTensor``
        style). Entries are put in row-major order; repeated indices are an error.

        Examples
        --------
        >>> b = FeatureBatch.from_coo({"f": ([[1, 0], [0, 0], [1, 1]], [5, 4, 6], (3, 2))})
        >>> b["f"][0].tolist(), b["f"][1].tolist()
        ([4, 5, 6], [0, 1, 3, 3])
        """
        _mapping("from_coo data", data, "feature name -> (indices, values, dense_shape)")
        if weights is not None:
            _mapping("weights", weights, "feature name -> per-entry weights")
            unknown = _sorted_names(set(weights) - set(data))
            if unknown:
                raise InputError(f"weights given for unknown features {unknown}")
        out = {}
        for name, entry in data.items():
            if not isinstance(entry, (tuple, list)) or len(entry) != 3:
                raise InputError(f"feature {name!r}: expected (indices, values, dense_shape)")
            indices = _as_ids(name, entry[0], what="indices")
            values = _as_ids(name, entry[1], what="values")
            # integral entries only: int(3.9) would silently make the batch 3 samples
            shape = tuple(int(s) for s in _as_ids(name, entry[2], what="dense_shape").ravel())
            if len(shape) != 2 or min(shape) < 0:
                raise InputError(f"feature {name!r}: dense_shape must be (batch_size, max_len), got {entry[2]!r}")
            if indices.size == 0:
                indices = indices.reshape(0, 2)
            if indices.ndim != 2 or indices.shape[1] != 2:
                raise InputError(f"feature {name!r}: indices must have shape [N, 2], got {indices.shape}")
            if values.ndim != 1 or values.size != indices.shape[0]:
                raise InputError(
                    f"feature {name!r}: {indices.shape[0]} indices but values has shape {values.shape}"
                )
            rows, cols = indices[:, 0], indices[:, 1]
            if rows.size and (rows.min() < 0 or rows.max() >= shape[0] or cols.min() < 0
                              or cols.max() >= shape[1]):
                bad = int(np.flatnonzero((rows < 0) | (rows >= shape[0]) | (cols < 0) | (cols >= shape[1]))[0])
                raise InputError(
                    f"feature {name!r}: index {indices[bad].tolist()} (entry {bad}) is outside "
                    f"dense_shape {shape}"
                )
            order = np.lexsort((cols, rows))
            rows, cols, values = rows[order], cols[order], values[order]
            if rows.size > 1:
                dup = (rows[1:] == rows[:-1]) & (cols[1:] == cols[:-1])
                if dup.any():
                    k = int(np.flatnonzero(dup)[0])
                    raise InputError(
                        f"feature {name!r}: index {[int(rows[k]), int(cols[k])]} appears more than once"
                    )
            rs = np.zeros(shape[0] + 1, np.int64)
            np.cumsum(np.bincount(rows, minlength=shape[0]), out=rs[1:])
            item: tuple = (values, rs)
            if weights is not None and name in weights:
                w = _as_weights(name, weights[name], np.shape(weights[name]), None)
                if w.shape != (indices.shape[0],):
                    raise InputError(f"feature {name!r}: weights must have one value per COO entry")
                item = (values, rs, w[order])
            out[name] = item
        return cls(out)

    @classmethod
    def from_columns(cls, table: Any, *, columns: Sequence[str] | None = None, sep: str = ",",
                     weights: Mapping[str, str] | None = None) -> FeatureBatch:
        """From a pandas DataFrame or pyarrow Table: one row per sample, one column per feature.

        A column may hold one integer id per row (missing values mean no id), lists
        of ids, or strings of ids separated by ``sep`` (empty string: no id).
        ``weights`` maps a feature to the column holding its per-id weights (same
        shape as the ids).

        Examples
        --------
        >>> import pandas as pd
        >>> df = pd.DataFrame({"user": [3, 4], "items": ["1,2", ""], "tags": [[7], [8, 9]]})
        >>> b = FeatureBatch.from_columns(df)
        >>> [b[f][0].tolist() for f in b], b["items"][1].tolist()
        ([[3, 4], [1, 2], [7, 8, 9]], [0, 2, 2])
        """
        if isinstance(columns, str):
            raise InputError(f"columns must be a list of column names, got the string {columns!r}")
        names = list(columns) if columns is not None else None
        if names is not None and not all(isinstance(n, str) for n in names):
            raise InputError(f"columns must be column names (strings), got {names!r}")
        if not isinstance(sep, str) or not sep:
            raise InputError(f"sep must be a non-empty string, got {sep!r}")
        weights = dict(_mapping("weights", weights, "feature -> weight column")) if weights is not None else {}
        bad = [k for k, v in weights.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise InputError(f"weights must map feature names to column names (strings), got {bad[0]!r}: "
                             f"{weights[bad[0]]!r}")
        cols = _columns_of(table, names, sep)
        wcols = _columns_of(table, list(weights.values()), sep, as_float=True) if weights else {}
        data = {}
        for name, (ids, rs) in cols.items():
            if name in weights:
                w, wrs = wcols[weights[name]]
                if not np.array_equal(wrs, rs):
                    raise InputError(
                        f"feature {name!r}: weight column {weights[name]!r} does not have the same "
                        "number of values per row as the ids"
                    )
                data[name] = (ids, rs, w)
            else:
                data[name] = (ids, rs)
        return cls(data)

    # -- mapping interface -------------------------------------------------------------------
    def __getitem__(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        i = self._feature_index(name)
        return self.ids(name), self._splits[i] - self._splits[i, 0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self._index else default

    def __len__(self) -> int:
        return len(self._names)

    def _feature_index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise InputError(f"no feature {name!r} in this batch; it has {list(self._names)}") from None

    # -- accessors ---------------------------------------------------------------------------
    @property
    def feature_names(self) -> tuple[str, ...]:
        """Feature names in insertion order."""
        return self._names

    @property
    def batch_size(self) -> int:
        """Samples per feature (the global batch ``B`` of [jte] preprocess_sparse_dense_matmul_input)."""
        return self._batch_size

    @property
    def num_ids(self) -> int:
        """Ids of all features together."""
        return int(self._ids.size)

    def ids(self, name: str) -> np.ndarray:
        """Read-only int64 ids of feature ``name``."""
        i = self._feature_index(name)
        view = self._ids[self._splits[i, 0]:self._splits[i, -1]]
        view.flags.writeable = False
        return view

    def row_splits(self, name: str) -> np.ndarray:
        """int64 row splits of feature ``name`` (``batch_size + 1`` entries, from 0)."""
        return self[name][1]

    def lengths(self, name: str) -> np.ndarray:
        """Ids per sample of feature ``name``."""
        return np.diff(self._splits[self._feature_index(name)])

    def weights(self, name: str) -> np.ndarray:
        """float32 weights of feature ``name`` (ones when none were given)."""
        i = self._feature_index(name)
        if self._weights is None:
            return np.ones(self._splits[i, -1] - self._splits[i, 0], np.float32)
        return self._weights[self._splits[i, 0]:self._splits[i, -1]].copy()

    def has_weights(self, name: str) -> bool:
        """Whether weights were given for feature ``name``."""
        return self._has_weights[self._feature_index(name)]

    def select(self, names: Sequence[str]) -> FeatureBatch:
        """A new batch with only the features ``names`` (in that order)."""
        data = {}
        for n in names:
            ids, rs = self[n]
            data[n] = (ids, rs, self.weights(n)) if self.has_weights(n) else (ids, rs)
        return FeatureBatch(data)

    def to_ragged(self) -> dict[str, tuple[np.ndarray, ...]]:
        """``{feature: (ids, row_splits)}``, with weights as a third item where given."""
        return {n: ((*self[n], self.weights(n)) if self.has_weights(n) else self[n]) for n in self._names}

    def _without(self, drop: Mapping[str, np.ndarray]) -> FeatureBatch:
        """A copy where the ids flagged True in ``drop[feature]`` are removed."""
        names, all_ids, all_splits, all_weights = [], [], [], []
        for n in self._names:
            ids, rs = self[n]
            w = self.weights(n) if self.has_weights(n) else None
            if n in drop and drop[n].any():
                keep = ~drop[n]
                sample = np.repeat(np.arange(self._batch_size), np.diff(rs))
                counts = np.bincount(sample[keep], minlength=self._batch_size)
                rs = np.zeros_like(rs)
                np.cumsum(counts, out=rs[1:])
                ids = ids[keep]
                w = w[keep] if w is not None else None
            names.append(n)
            all_ids.append(np.asarray(ids, np.int64))
            all_splits.append(rs)
            all_weights.append(w)
        out = FeatureBatch.__new__(FeatureBatch)
        out._set(names, all_ids, all_splits, all_weights, self._batch_size)
        return out

    def __repr__(self) -> str:
        parts = []
        for n in self._names[:6]:
            lengths = self.lengths(n)
            longest = int(lengths.max()) if lengths.size else 0
            parts.append(f"{n} ({int(lengths.sum())} ids, <= {longest} per sample"
                         f"{', weighted' if self.has_weights(n) else ''})")
        if len(self._names) > 6:
            parts.append(f"... {len(self._names) - 6} more")
        return (f"FeatureBatch(batch_size={self._batch_size}, features={len(self._names)}, "
                f"ids={self.num_ids}: {', '.join(parts)})")


# -- table columns ---------------------------------------------------------------------------
def _columns_of(table: Any, names: list[str] | None, sep: str,
                as_float: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    module = type(table).__module__.split(".")[0]
    if module == "pyarrow":
        if names is None:
            names = list(table.column_names)
        missing = [n for n in names if n not in table.column_names]
        if missing:
            raise InputError(f"columns {missing} not in the table; it has {list(table.column_names)}")
        return {n: _arrow_column(n, table.column(n), sep, as_float) for n in names}
    if module == "pandas" and hasattr(table, "columns"):
        if names is None:
            names = [str(c) for c in table.columns]
        missing = [n for n in names if n not in table.columns]
        if missing:
            raise InputError(f"columns {missing} not in the DataFrame; it has {list(table.columns)}")
        return {n: _pandas_column(n, table[n], sep, as_float) for n in names}
    raise InputError(
        f"from_columns takes a pandas DataFrame or a pyarrow Table, got {type(table).__name__}"
    )


def _shown(text: str, limit: int = 60) -> str:
    """``repr(text)``, cut to ``limit`` characters (a 5,000-digit token must not flood the message)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def _parse_cell(name: str, row: int, cell: Any, sep: str, as_float: bool) -> list:
    conv = float if as_float else int
    if cell is None:
        return []
    if isinstance(cell, float) and np.isnan(cell):
        return []
    if isinstance(cell, (str, bytes)):
        text = cell.decode() if isinstance(cell, bytes) else cell
        tokens = [t.strip() for t in text.split(sep)] if text.strip() else []
        out = []
        pattern = _FLOAT_TEXT if as_float else _INT_TEXT
        for t in tokens:
            try:
                if len(t) > _FLOAT_TEXT_MAX or not pattern.fullmatch(t):
                    raise ValueError(t)
                out.append(conv(t))
            except ValueError:
                raise InputError(
                    f"column {name!r}, row {row}: {_shown(t)} is not "
                    f"{'a plain decimal number' if as_float else 'an integer id of ASCII digits (int64)'} "
                    f"(cell {_shown(text)}, separator {sep!r})"
                ) from None
        return out
    if isinstance(cell, (list, tuple, np.ndarray)):
        try:
            return list(np.asarray(cell, dtype=np.float64 if as_float else None).ravel())
        except (ValueError, TypeError, OverflowError) as err:
            raise InputError(f"column {name!r}, row {row}: cannot read a flat list of "
                             f"{'numbers' if as_float else 'ids'} from {cell!r} ({err})") from None
    if isinstance(cell, (numbers.Number, np.generic)):
        return [cell]
    raise InputError(f"column {name!r}, row {row}: cannot read ids from {type(cell).__name__} {cell!r}")


def _pandas_column(name: str, col: Any, sep: str, as_float: bool):
    values = col.to_numpy()
    if values.dtype.kind in "iuf" and values.dtype.kind != "b":
        if values.dtype.kind == "f":
            present = ~np.isnan(values)
        else:
            present = np.ones(values.shape, bool)
        rs = np.zeros(values.size + 1, np.int64)
        np.cumsum(present, out=rs[1:])
        vals = values[present]
        return (vals.astype(np.float32) if as_float else _as_ids(name, vals)), rs
    if values.dtype.kind == "b":
        raise InputError(f"column {name!r} holds booleans, not ids")
    flat, lengths = [], []
    for row, cell in enumerate(values):
        items = _parse_cell(name, row, cell, sep, as_float)
        flat.extend(items)
        lengths.append(len(items))
    rs = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=rs[1:])
    arr = np.asarray(flat, dtype=np.float64 if as_float else None)
    if not as_float:
        arr = _as_ids(name, arr if arr.size else np.zeros(0, np.int64))
    return arr, rs


def _arrow_column(name: str, col: Any, sep: str, as_float: bool):
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    typ = arr.type
    n = len(arr)
    numeric = (pa.types.is_integer(typ) or pa.types.is_floating(typ))
    list_of_numbers = ((pa.types.is_list(typ) or pa.types.is_large_list(typ))
                       and (pa.types.is_integer(typ.value_type) or pa.types.is_floating(typ.value_type)))
    if list_of_numbers:
        # Fast path: the list offsets are the row splits.
        offsets = np.asarray(arr.offsets, dtype=np.int64)
        values = arr.values.slice(offsets[0], offsets[-1] - offsets[0])
        if values.null_count:
            raise InputError(f"column {name!r}: lists contain missing values")
        rs = offsets - offsets[0]
        if arr.null_count:  # a null list has equal offsets already in Arrow; keep them empty
            valid = np.asarray(arr.is_valid())
            lengths = np.where(valid, np.diff(rs), 0)
            if not np.array_equal(lengths, np.diff(rs)):
                keep = np.repeat(valid, np.diff(rs))
                values = values.filter(pa.array(keep))
                rs = np.zeros(n + 1, np.int64)
                np.cumsum(lengths, out=rs[1:])
        vals = values.to_numpy(zero_copy_only=False)
        return (vals.astype(np.float32) if as_float else _as_ids(name, vals)), rs
    if numeric:
        valid = np.ones(n, bool) if arr.null_count == 0 else np.asarray(arr.is_valid())
        vals = arr.to_numpy(zero_copy_only=False)
        if pa.types.is_floating(typ):
            valid &= ~np.isnan(vals)
        rs = np.zeros(n + 1, np.int64)
        np.cumsum(valid, out=rs[1:])
        vals = vals[valid]
        return (vals.astype(np.float32) if as_float else _as_ids(name, vals)), rs
    if (pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_list(typ)
            or pa.types.is_large_list(typ)):
        flat, lengths = [], []
        for row, cell in enumerate(arr.to_pylist()):
            items = _parse_cell(name, row, cell, sep, as_float)
            flat.extend(items)
            lengths.append(len(items))
        rs = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=rs[1:])
        vals = np.asarray(flat, dtype=np.float64 if as_float else None)
        if as_float:
            return vals.astype(np.float32), rs
        return _as_ids(name, vals if vals.size else np.zeros(0, np.int64)), rs
    raise InputError(f"column {name!r} has type {typ}; expected integers, lists of integers or strings")


# -- combiner gains ---------------------------------------------------------------------------
_F32_MAX = float(np.finfo(np.float32).max)
_F32_EPS = 2.0**-24                      # unit roundoff of float32


def _check_gains(batch: FeatureBatch, name: str, combiner: str) -> None:
    """Raise InputError where the float32 gains of ``name`` would be infinite, NaN or 0.

    The kernels compute gains as jax-tpu-embedding does, in float32: ``mean`` divides
    each weight by the sample's sequential float32 weight sum, ``sqrtn`` by the square
    root of the float32 sum of squared weights, and duplicates of an id in a sample
    add their gains. Finite float32 weights can still break this ([1e20, 1e20] under
    ``sqrtn``: the squares overflow and the gains become 0; [3e38, 3e38] duplicates
    under ``sum``: inf). This check recomputes everything in float64 (where float32
    weights can neither overflow nor underflow) and rejects a sample whose float32
    intermediates leave the float32 range (bounded with the float32 rounding error),
    whose weights cancel, or whose gains are not representable (inf, or a non-zero
    gain that rounds to 0), naming the feature and the sample.
    """
    if not batch.has_weights(name) or combiner not in ("sum", "mean", "sqrtn"):
        return
    w = batch.weights(name).astype(np.float64)
    rs = batch.row_splits(name)
    if w.size == 0:
        return
    lengths = np.diff(rs)
    nonempty = lengths > 0
    starts = rs[:-1][nonempty]
    samples = np.flatnonzero(nonempty)
    n = lengths[nonempty].astype(np.float64)
    magnitude = np.add.reduceat(np.abs(w), starts)       # bounds every float32 partial sum
    # float32 sums of n terms err by at most ~n ulps of the magnitudes: keep that far
    # from the float32 maximum and from 0
    slack = (n + 1) * _F32_EPS * 2

    def fail(i: int, problem: str, fix: str) -> None:
        b = int(samples[i])
        raise InputError(f"feature {name!r}, sample {b}: {problem} ({combiner!r} combiner, float32 as "
                         f"jax-tpu-embedding computes gains); {fix}")

    if combiner == "sum":
        gains = w
        sample_gain_bound = magnitude
    elif combiner == "mean":
        total = np.add.reduceat(w, starts)
        over = magnitude > _F32_MAX * (1 - slack)
        if over.any():
            i = int(np.flatnonzero(over)[0])
            fail(i, f"the weight magnitudes add up to {magnitude[i]:.6g}, beyond float32's maximum "
                    f"{_F32_MAX:.6g}, so the float32 weight sum overflows", "scale that feature's weights down")
        cancel = np.abs(total) <= magnitude * slack
        if cancel.any():
            i = int(np.flatnonzero(cancel)[0])
            if total[i] == 0:
                raise InputError(
                    f"feature {name!r}, sample {int(samples[i])}: the weights sum to 0, so the {combiner!r} combiner "
                    "divides by 0 (gains would be NaN or infinite); give that sample non-zero weights or use "
                    "combiner='sum'")
            fail(i, f"the weights nearly cancel (sum {total[i]:.6g} against magnitudes {magnitude[i]:.6g}), so "
                    "their float32 sum may be 0 or has no correct digit and the combiner divides by noise",
                 "give that sample weights that do not cancel or use combiner='sum'")
        gains = w / np.repeat(total, lengths[nonempty])
        sample_gain_bound = magnitude / np.abs(total)
    else:
        squares = np.add.reduceat(w * w, starts)
        over = squares > _F32_MAX * (1 - slack)
        if over.any():
            i = int(np.flatnonzero(over)[0])
            fail(i, f"the squared weights add up to {squares[i]:.6g}, beyond float32's maximum {_F32_MAX:.6g}, "
                    "so the float32 sum of squares overflows (the gains would become 0)",
                 "scale that feature's weights down (|weight| < 1.8e19)")
        tiny = squares < float(np.finfo(np.float32).tiny)
        if tiny.any():
            i = int(np.flatnonzero(tiny)[0])
            if squares[i] == 0:
                raise InputError(
                    f"feature {name!r}, sample {int(samples[i])}: the weights sum to 0, so the {combiner!r} combiner "
                    "divides by 0 (gains would be NaN or infinite); give that sample non-zero weights or use "
                    "combiner='sum'")
            fail(i, f"the squared weights add up to {squares[i]:.6g}, below float32's smallest normal number, so "
                    "their float32 sum is 0 or imprecise and the combiner divides by 0 or by noise",
                 "scale that feature's weights up (|weight| > 1.1e-19) or use combiner='sum'")
        gains = w / np.repeat(np.sqrt(squares), lengths[nonempty])
        sample_gain_bound = magnitude / np.sqrt(squares)
    g32 = gains.astype(np.float32)
    bad = ~np.isfinite(g32) | ((g32 == 0) & (gains != 0))
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        i = int(np.searchsorted(starts, pos, side="right") - 1)
        fail(i, f"the gain of id position {pos - int(rs[samples[i]])} is {gains[pos]:.6g}, "
                "which float32 cannot hold (it would be " + ("infinite" if not np.isfinite(g32[pos]) else "0") + ")",
             "scale the weights of that sample so their ratios stay within float32's range")
    # duplicates of an id in a sample add their gains: exact check only where the sum
    # of all the sample's gains could overflow
    risky = np.flatnonzero(sample_gain_bound > _F32_MAX * (1 - slack))
    ids = batch.ids(name)
    for i in risky:
        b = int(samples[i])
        seg = slice(int(rs[b]), int(rs[b + 1]))
        uniq, inverse = np.unique(ids[seg], return_inverse=True)
        sums = np.zeros(uniq.size)
        np.add.at(sums, inverse, np.abs(gains[seg]))
        worst = int(np.argmax(sums))
        if sums[worst] > _F32_MAX * (1 - slack[i]):
            fail(i, f"id {int(uniq[worst])} appears {int((inverse == worst).sum())} times and its gains add up "
                    f"to {sums[worst]:.6g}, beyond float32's maximum {_F32_MAX:.6g}",
                 "scale that feature's weights down or deduplicate the sample")
