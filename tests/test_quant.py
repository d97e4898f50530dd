"""Simulated quantization (TensorFlow's QuantizationConfig, TensorFlow QuantizationConfig semantics)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scwork.errors import ConfigError, InputError
from scwork.quant import (
    QuantizationConfig,
    calibrate,
    dequantize,
    error_stats,
    fake_quantize,
    hbm_savings,
    pooled_error_stats,
    quantize,
    sweep,
)


def test_levels_for_8_bits():
    cfg = QuantizationConfig(256, -1.0, 1.0)
    # quantum = (1 - (-1)) / 255; level 0 = low, level 255 = high.
    assert cfg.quantum == pytest.approx(2 / 255)
    levels = cfg.levels()
    assert levels[0] == -1.0 and levels[-1] == 1.0 and len(levels) == 256
    assert cfg.bits == 8


def test_round_half_up_not_to_even():
    cfg = QuantizationConfig(5, 0.0, 4.0)          # quantum 1: levels 0, 1, 2, 3, 4
    # floor(x + 0.5): 0.5 -> 1 and 2.5 -> 3 (numpy's rint would give 0 and 2).
    assert quantize([0.5, 1.5, 2.5, 3.49], cfg).tolist() == [1, 2, 3, 3]
    assert np.rint([0.5, 2.5]).tolist() == [0.0, 2.0]


def test_clip_bucketize_dequantize_by_hand():
    cfg = QuantizationConfig(3, -1.0, 1.0)         # quantum 1: levels -1, 0, 1
    x = [-5.0, -0.6, -0.4, 0.49, 0.5, 7.0]
    # clip: -1, -0.6, -0.4, 0.49, 0.5, 1; (x + 1) / 1 + 0.5 floored: 0, 0, 1, 1, 2, 2
    assert quantize(x, cfg).tolist() == [0, 0, 1, 1, 2, 2]
    assert fake_quantize(x, cfg).tolist() == [-1.0, -1.0, 0.0, 0.0, 1.0, 1.0]
    assert dequantize(np.array([0, 1, 2]), cfg).tolist() == [-1.0, 0.0, 1.0]


def test_error_stats_by_hand():
    cfg = QuantizationConfig(3, 0.0, 1.0)          # levels 0, 0.5, 1
    s = error_stats(np.array([[0.2, 0.7], [1.5, -1.0]]), cfg)
    # 0.2 -> 0 (0.2), 0.7 -> 0.5 (0.2), 1.5 -> 1 (0.5, clipped above), -1 -> 0 (1.0, clipped below)
    assert s.count == 4
    assert s.mse == pytest.approx((0.04 + 0.04 + 0.25 + 1.0) / 4)
    assert s.max_abs_error == pytest.approx(1.0)
    assert s.mean_abs_error == pytest.approx((0.2 + 0.2 + 0.5 + 1.0) / 4)
    assert (s.share_clipped, s.share_below, s.share_above) == (0.5, 0.25, 0.25)
    assert s.signal_rms == pytest.approx(math.sqrt((0.04 + 0.49 + 2.25 + 1.0) / 4))
    assert s.as_dict()["snr_db"] == pytest.approx(20 * math.log10(s.signal_rms / s.rmse))


def test_pooled_lookups_by_hand():
    cfg = QuantizationConfig(3, 0.0, 1.0)
    table = np.array([[0.2, 0.9], [0.7, 0.1]])    # quantized: [[0, 1], [0.5, 0]]
    ids, splits = [0, 1, 1], [0, 2, 3]             # sample 0: rows 0 and 1; sample 1: row 1
    # sum: sample 0 [0.9, 1.0] -> [0.5, 1.0]; sample 1 [0.7, 0.1] -> [0.5, 0]
    s = pooled_error_stats(table, cfg, combiner="sum", ids=ids, splits=splits)
    assert s.mse == pytest.approx((0.16 + 0.0 + 0.04 + 0.01) / 4)
    assert s.max_abs_error == pytest.approx(0.4)
    # mean: sample 0 halves -> errors 0.2, 0; sample 1 unchanged -> 0.2, 0.1
    s = pooled_error_stats(table, cfg, combiner="mean", ids=ids, splits=splits)
    assert s.mse == pytest.approx((0.04 + 0.0 + 0.04 + 0.01) / 4)
    # sqrtn with weights 3 and 4 in sample 0: gains 3/5, 4/5; error of element 0:
    # 3/5 * (0 - 0.2) + 4/5 * (0.5 - 0.7) = -0.28
    s = pooled_error_stats(table, cfg, combiner="sqrtn", ids=[0, 1], splits=[0, 2], weights=[3.0, 4.0])
    assert s.max_abs_error == pytest.approx(0.28)
    # Random samples: pooled sums of 8 rows have larger errors than single rows.
    rng = np.random.default_rng(0)
    big = rng.normal(0, 0.1, size=(1000, 16))
    cfg8 = QuantizationConfig(256, -0.5, 0.5)
    one = error_stats(big, cfg8)
    pooled = pooled_error_stats(big, cfg8, combiner="sum", num_samples=500, ids_per_sample=8, seed=1)
    assert pooled.mse > one.mse
    assert pooled.count == 500 * 16


def test_calibrate_sweep_and_savings():
    rng = np.random.default_rng(1)
    table = rng.normal(0, 1, size=(2000, 8))
    cfg = calibrate(table, 256)
    assert (cfg.low, cfg.high) == (table.min(), table.max())
    tight = calibrate(table, 256, coverage=0.99)
    assert error_stats(table, tight).share_clipped == pytest.approx(0.01, abs=0.002)
    ds = sweep(table, [4, 16, 256])
    assert ds["max_abs_error"].dims == ("num_buckets",) and ds["rmse"].attrs["units"] == "value"
    errs = ds["max_abs_error"].values
    assert errs[0] > errs[1] > errs[2]
    assert ds["bits"].values.tolist() == [2, 4, 8]
    pooled = sweep(table, [16, 256], combiner="mean", num_samples=64, ids_per_sample=4)
    assert pooled.attrs["what"] == "pooled lookups"
    # HBM: width 128 f32 -> 512 B per row, int8 -> 128 B; width 8: 32 B either way (32-byte lines).
    # vocab 1000 pads to round_up(1000, 8 x 4) = 1024 rows.
    r = hbm_savings({"wide": (1000, 128), "narrow": (1000, 8)}, num_sparsecores=4)
    assert r["per_table"] == {"wide": (1024 * 512, 1024 * 128), "narrow": (1024 * 32, 1024 * 32)}
    assert r["saved_bytes"] == 1024 * 384
    assert hbm_savings({"t": (1000, 128)}, num_sparsecores=4, to_dtype="bf16")["saved_bytes"] == 1024 * 256


@pytest.mark.parametrize("args, match", [
    ((1, 0.0, 1.0), "num_buckets must be an integer >= 2"),
    ((2.0, 0.0, 1.0), "num_buckets"),
    ((True, 0.0, 1.0), "num_buckets"),
    ((256, 1.0, 1.0), "low must be < high"),
    ((256, 2.0, 1.0), "low must be < high"),
    ((256, float("nan"), 1.0), "finite"),
    ((256, 0.0, float("inf")), "finite"),
])
def test_invalid_settings_raise_config_error(args, match):
    with pytest.raises(ConfigError, match=match):
        QuantizationConfig(*args)


def test_invalid_inputs_raise_input_error():
    cfg = QuantizationConfig(256, -1.0, 1.0)
    with pytest.raises(InputError, match="NaN"):
        fake_quantize([0.0, float("nan")], cfg)
    with pytest.raises(InputError, match="indices"):
        dequantize([0, 256], cfg)
    with pytest.raises(InputError, match="ids"):
        pooled_error_stats([[0.0]], cfg, ids=[1])
    with pytest.raises(InputError, match="splits"):
        pooled_error_stats([[0.0]], cfg, ids=[0], splits=[0, 2])
    with pytest.raises(ConfigError, match="combiner"):
        pooled_error_stats([[0.0]], cfg, combiner="max")
    with pytest.raises(InputError, match="no range"):
        calibrate([1.0, 1.0])
    with pytest.raises(ConfigError):
        fake_quantize([0.0], {"num_buckets": 1, "low": 0, "high": 1})


finite = st.floats(-1e3, 1e3, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=50), st.integers(2, 1024), finite, st.floats(1e-3, 1e3))
def test_properties(values, nb, low, span):
    cfg = QuantizationConfig(nb, low, low + span)
    x = np.array(values)
    q = fake_quantize(x, cfg)
    inside = (x >= cfg.low) & (x <= cfg.high)
    # inside the range the error is at most half a quantum; outside it is the clipping distance
    assert np.all(np.abs(q[inside] - x[inside]) <= cfg.quantum / 2 * (1 + 1e-9) + 1e-9)
    assert np.all((q >= cfg.low) & (q <= cfg.high))
    # quantizing twice changes nothing, and every output is a level
    assert np.allclose(fake_quantize(q, cfg), q, rtol=0, atol=1e-9 * (1 + span))
    assert np.all(quantize(x, cfg) >= 0) and np.all(quantize(x, cfg) < nb)
