"""Regressions for bad inputs the fuzz suites found in the sharding surfaces."""

from __future__ import annotations

import pytest


def test_limits_path_longer_than_the_file_system_allows_is_an_input_error():
    # Path.is_dir() raised OSError (ENAMETOOLONG) on Python 3.13; found by tests/fuzz/test_fuzz_public_api.py.
    from scwork.errors import InputError
    from scwork.sharding import apply_limits

    with pytest.raises(InputError, match="cannot be read"):
        apply_limits([], "9" * 5000)
