"""The statistics Dataset that ``results._dataset`` builds directly equals the one xarray's
public constructor builds: same variables and order, dims, dtypes, attrs and repr.

``_dataset`` skips xarray's alignment through ``Dataset._construct_direct`` (not public
API) and falls back to the constructor where that is missing or changed; these tests
pin both paths to the constructor, so an xarray release that changes the direct path
fails here, not in a user's results.
"""

import numpy as np
import pytest
import xarray as xr

from scwork.sharding import results
from scwork.sharding.results import _coords_dataset, _dataset

SDSP = ("stack", "device", "sc", "partition")


def _parts(seed: int, names=("a", "b", "c"), G=2, S=2, P=4):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 50, (len(names), G, S, P))
    data_vars = {
        "ids": (SDSP, ids, {"long_name": "ids per stream", "units": "ids"}),
        "max_ids_per_partition": (("stack", "device", "partition"), ids.max(axis=2),
                                  {"long_name": "max over SCs", "units": "ids"}),
        "dropped_ids": ("stack", rng.integers(0, 9, len(names)), {"long_name": "dropped", "units": "ids"}),
        "share": (("stack", "partition"), rng.random((len(names), P)).astype(np.float32),
                  {"long_name": "share", "units": "1"}),
    }
    return data_vars, _coords_dataset(tuple(names), G, S, P), {"batch_size": 64 + seed, "source": "test"}


def _by_constructor(data_vars, coords_ds, attrs):
    """The same Dataset the plain public way: coordinates first, then the variables."""
    return xr.Dataset(coords=coords_ds.coords).assign(
        {name: xr.Variable(dims, values, a) for name, (dims, values, a) in data_vars.items()}).assign_attrs(attrs)


@pytest.fixture(params=["direct", "constructor"])
def path(request, monkeypatch):
    if request.param == "constructor":
        monkeypatch.setattr(results, "_direct_constructor", lambda: None)
    elif results._direct_constructor() is None:
        pytest.fail("this xarray has no Dataset._construct_direct: results._dataset always takes the "
                    "constructor (correct, about 1 ms slower a call); update _dataset and this test")
    return request.param


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dataset_equals_the_constructor(path, seed):
    data_vars, coords_ds, attrs = _parts(seed)
    got = _dataset(data_vars, coords_ds, attrs)
    want = _by_constructor(data_vars, coords_ds, attrs)
    assert got.identical(want)
    assert repr(got) == repr(want)
    assert list(got.variables) == list(want.variables)
    assert {n: v.dtype for n, v in got.variables.items()} == {n: v.dtype for n, v in want.variables.items()}
    # A caller changing one result's attrs changes neither the cached coordinates nor the
    # next result.
    got["ids"].attrs["units"] = "changed"
    got["stack"].attrs["long_name"] = "changed"
    again = _dataset(*_parts(seed)[:1], coords_ds, attrs)
    assert again["ids"].attrs["units"] == "ids"
    assert again["stack"].attrs["long_name"] == "stacked table"


def test_wrong_shape_is_refused(path):
    data_vars, coords_ds, attrs = _parts(0)
    dims, values, a = data_vars["ids"]
    data_vars["ids"] = (dims, values[:, :, :, :2], a)          # 2 partitions of 4
    with pytest.raises(ValueError):
        _dataset(data_vars, coords_ds, attrs)
