"""What every ``scwork`` command shares: exit statuses, the usage error, output helpers.

Also the writer of output files (checked before any work, written all or nothing).

Part of :mod:`scwork.cli`; the command modules (``scwork._cli_*``) import this one and
never :mod:`scwork.cli` itself, so the imports go one way.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scwork.errors import ScworkError

#: Exit statuses of the command.
EXIT_OK, EXIT_DOES_NOT_FIT, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class _UsageError(ScworkError):
    """Bad command-line input found after parsing (e.g. options that exclude each other)."""


# ======================================================================================
# output helpers
# ======================================================================================
def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (np.ndarray, tuple, set)):
        return list(obj.tolist() if isinstance(obj, np.ndarray) else obj)
    return str(obj)


def _print_json(data: Any) -> None:
    print(json.dumps(data, default=_json_default))


def _format(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        # Large values in full (47395, not 4.74e+04); small ones with 4 significant digits.
        return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return str(value)


def _print_table(rows: list[dict[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None) -> None:
    """Aligned text table: text left, numbers right."""
    headers = list(headers or columns)
    cells = [[_format(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row.get(c), (int, float)) or row.get(c) is None for row in rows) for c in columns]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    print(line(headers))
    print(line(["-" * w for w in widths]))
    for r in cells:
        print(line(r))


def _count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with ``noun`` in the right number: ``_count(1, "device")`` is ``"1 device"``, 2 gives ``"2 devices"``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


#: Largest global batch the commands take: the SparseCore input format counts samples
#: and ids in 32-bit integers (jax-tpu-embedding's CSR row pointers and sample ids are
#: int32), so a larger batch cannot be fed to a SparseCore at all.
MAX_BATCH_SIZE = 2**31 - 1


def _batch_size_arg(text: str) -> int:
    """argparse type of ``--batch-size``: a whole number of samples from 1 to :data:`MAX_BATCH_SIZE`."""
    try:
        value = int(text.replace("_", ""), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of samples, e.g. 4096") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value:,} samples: the global batch must be at least 1")
    if value > MAX_BATCH_SIZE:
        raise argparse.ArgumentTypeError(
            f"{value:,} samples is more than {MAX_BATCH_SIZE:,} (2**31 - 1): a SparseCore batch counts its "
            "samples and ids in 32-bit integers; give the global batch of one step")
    return value


def _topology_text(topology) -> str:
    """``"4 v5p chips (4 devices x 4 SparseCores = 16 partitions)"``, in words with the right plurals."""
    chip = f"{topology.chip} chip" if topology.chip else "chip"
    grid = f" ({'x'.join(map(str, topology.shape))})" if len(topology.shape) > 1 else ""
    return (f"{_count(topology.num_chips, chip)}{grid} ({_count(topology.num_devices, 'device')} x "
            f"{_count(topology.sparsecores_per_device, 'SparseCore')} = "
            f"{_count(topology.num_partitions, 'partition')})")


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _parse_size_arg(text: str) -> int:
    """argparse type of a size option (``4GiB``, ``4096``): bytes, or a usage error naming the accepted forms."""
    from scwork.config import parse_size
    from scwork.errors import ConfigError

    try:
        return parse_size(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


# ======================================================================================
# output files: checked before any work, written all or nothing
# ======================================================================================
def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (the folder a ``mkdir -p`` would start from)."""
    path = Path(os.path.abspath(path))
    while not os.path.lexists(path) and path.parent != path:
        path = path.parent
    return path


def check_output_file(path: str, option: str) -> None:
    """Usage error unless a file can be written at ``path`` (its folder exists and is writable).

    Called before any work, so that a bad ``--out`` is reported at once rather than
    after minutes of computing (and never after other outputs were written).
    """
    target = Path(path)
    if os.path.isdir(target):
        raise _UsageError(f"{option} {path}: is a directory; name a file in it, e.g. {target / 'limits.json'}")
    folder = target.parent
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.lexists(folder) else "does not exist"
        raise _UsageError(f"{option} {path}: the folder {str(folder)!r} {what}; create it or choose another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _UsageError(f"{option} {path}: the folder {str(folder)!r} is not writable")


def check_output_dir(path: str, option: str) -> None:
    """Usage error unless ``path`` is a writable folder or one that can be created."""
    target = Path(path)
    if os.path.lexists(target) and not os.path.isdir(target):
        raise _UsageError(f"{option} {path}: is a file, not a folder; name a folder (it is created if missing)")
    existing = _nearest_existing(target)
    if not os.path.isdir(existing):
        raise _UsageError(f"{option} {path}: {str(existing)!r} is a file, so the folder cannot be created there")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise _UsageError(f"{option} {path}: the folder {str(existing)!r} is not writable")


class StagedOutputs:
    """Output files of one command, written all or nothing.

    Each :meth:`stage` writes a file under a temporary name in its final folder; on
    leaving the ``with`` block without an error, :meth:`commit` renames them all into
    place (``os.replace``, atomic per file); on an error every staged file (and every
    folder created for one) is removed, so a failed command leaves the old files, or
    none, never a part of its outputs.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with StagedOutputs() as outputs:
    ...     _ = outputs.stage(os.path.join(folder, "a.txt"), lambda tmp: tmp.write_text("a"))
    >>> sorted(os.listdir(folder))
    ['a.txt']
    """

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []      # (temporary, final)
        self._created_dirs: list[Path] = []
        self._temp_dirs: list[Path] = []

    def __enter__(self) -> StagedOutputs:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()

    def make_dir(self, path: str | os.PathLike, option: str) -> Path:
        """Create ``path`` (and missing parents); a failure later removes the folders created here."""
        path = Path(path)
        missing = []
        probe = Path(os.path.abspath(path))
        while not os.path.lexists(probe) and probe.parent != probe:
            missing.append(probe)
            probe = probe.parent
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise _UsageError(f"{option} {path}: cannot create the folder ({err.strerror or err})") from None
        self._created_dirs.extend(missing)          # innermost first: the order to remove them
        return path

    def stage(self, final: str | os.PathLike, write: Callable[[Path], Any], option: str = "output") -> Path:
        """Write ``final`` through ``write(temporary_path)``; it appears under its name at :meth:`commit`."""
        final = Path(final)
        temporary = final.with_name(f".{final.name}.{os.getpid()}.scwork-tmp")
        self._staged.append((temporary, final))
        try:
            write(temporary)
        except OSError as err:
            raise _UsageError(f"{option} {final}: cannot write ({err.strerror or err})") from None
        return final

    def stage_in_dir(self, folder: str | os.PathLike, write: Callable[[Path], Path], option: str = "output") -> Path:
        """Stage the file ``write(temporary_folder)`` makes (and names) in ``folder``, e.g. an FDO stats file.

        ``write`` writes one file into a hidden temporary folder inside ``folder`` and
        returns its path; the file keeps its name in ``folder`` at :meth:`commit`.
        """
        import tempfile

        folder = Path(folder)
        try:
            temporary_dir = Path(tempfile.mkdtemp(prefix=".scwork-tmp-", dir=folder))
        except OSError as err:
            raise _UsageError(f"{option} {folder}: cannot write ({err.strerror or err})") from None
        self._temp_dirs.append(temporary_dir)
        written = Path(write(temporary_dir))
        final = folder / written.name
        self._staged.append((written, final))
        return final

    def commit(self) -> None:
        """Rename every staged file into place."""
        try:
            for temporary, final in self._staged:
                os.replace(temporary, final)
        except OSError as err:
            self.discard()
            raise _UsageError(f"cannot write {final} ({err.strerror or err})") from None
        self._staged = []
        self._remove_temp_dirs()

    def _remove_temp_dirs(self) -> None:
        import shutil

        for folder in self._temp_dirs:
            shutil.rmtree(folder, ignore_errors=True)
        self._temp_dirs = []

    def discard(self) -> None:
        """Remove the staged files and the folders created for them."""
        for temporary, _ in self._staged:
            try:
                os.unlink(temporary)
            except OSError:
                pass
        self._staged = []
        self._remove_temp_dirs()
        for folder in self._created_dirs:
            try:
                os.rmdir(folder)
            except OSError:
                pass
        self._created_dirs = []
