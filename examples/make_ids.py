"""Write ``examples/ids.csv.gz``: deterministic synthetic ids for the features of ``examples/model.toml``.

One row per sample, one column per feature column of the config (``user_id``,
``clicked``, ``viewed``, ``category``); a cell holds one id or several joined by
``|``. Ids come from :func:`scwork.datasets.synthetic` (Zipf-distributed, hot ids
first: ``hashed=False``, which also keeps the numbers short), 4096 rows: one batch of
the config. The valencies are a quarter of the config's ``ids_per_sample`` for the
item features so that the file stays small (it is committed); the category and
user columns match the config.

    python examples/make_ids.py            # rewrites examples/ids.csv.gz (same bytes every time)
    zcat examples/ids.csv.gz | head -3     # the format scwork stats reads
    scwork stats examples/ids.csv.gz --config examples/model.toml
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

from scwork import datasets

#: Rows of the file: one batch of examples/model.toml (batch_size = 4096).
ROWS = 4096
#: Column -> (vocabulary of its table in model.toml, ids per sample).
COLUMNS = {
    "user_id": (1_000_000, "fixed(1)"),
    "clicked": (2_000_000, 5),     # Poisson mean; the config says 20 per sample
    "viewed": (2_000_000, 10),     # Poisson mean; the config says 40 per sample
    "category": (1_000, "fixed(3)"),
}


def ids_csv_text(rows: int = ROWS, seed: int = 0) -> str:
    """The CSV text: a header line, then one line per sample."""
    data = datasets.synthetic(rows, features=list(COLUMNS), vocab_size={c: v for c, (v, _) in COLUMNS.items()},
                              valency={c: n for c, (_, n) in COLUMNS.items()}, hashed=False, seed=seed).step(0)
    cells = {}
    for column in COLUMNS:
        ids, row_splits = data[column]
        cells[column] = ["|".join(map(str, ids[row_splits[i]:row_splits[i + 1]].tolist())) for i in range(rows)]
    lines = [",".join(COLUMNS)] + [",".join(cells[c][i] for c in COLUMNS) for i in range(rows)]
    return "\n".join(lines) + "\n"


def write(path: str | Path) -> Path:
    """Write the gzip-compressed CSV to ``path`` (no timestamp in the gzip header: same bytes every run)."""
    path = Path(path)
    path.write_bytes(gzip.compress(ids_csv_text().encode(), compresslevel=9, mtime=0))
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("ids.csv.gz")
    print(f"wrote {write(target)} ({target.stat().st_size:,} bytes)")
