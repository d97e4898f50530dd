"""read_embedding_spec on paths that are not paths, or that the file system refuses.

Regressions from the read_embedding_spec file surface in tests/fuzz/test_fuzz_interop.py:
``None`` raised TypeError from ``Path()``, and a 5,000-character name raised OSError
(File name too long) from ``Path.is_dir`` on Python 3.13.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scwork.errors import InputError
from scwork.interop.jax_tpu_embedding import read_embedding_spec


@pytest.mark.parametrize("path", [None, 5, b"step", ["step"]])
def test_a_path_that_is_not_a_path_is_refused(path):
    with pytest.raises(InputError, match="must be a str or os.PathLike"):
        read_embedding_spec(path)


def test_a_name_the_file_system_refuses_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read the embedding spec"):
        read_embedding_spec(tmp_path / ("9" * 5000))


def test_the_file_itself_reads_whatever_its_name(tmp_path):
    file = tmp_path / "spec.txt"
    file.write_text('stacked_table_specs {\n  stack_name: "s"\n}\n', encoding="utf-8")
    assert read_embedding_spec(file)["stacked_table_specs"][0]["stack_name"] == "s"
    assert read_embedding_spec(str(file)) == read_embedding_spec(file)
