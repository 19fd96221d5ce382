"""Finding, reading and writing source files for ``ember hipify``."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import HipifyError

EXTENSIONS = (".cu", ".cuh", ".hu", ".h", ".hpp", ".inl", ".cpp", ".cc", ".c")
_SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".venv", "node_modules"}


@dataclass(frozen=True, slots=True)
class Source:
    """An input file and the directory it was found under (itself for a file given by name)."""

    path: Path
    root: Path

    @property
    def relative(self) -> Path:
        """Path relative to the root it was found under."""
        return self.path.relative_to(self.root) if self.root != self.path else Path(self.path.name)


def collect(inputs: list[str]) -> tuple[list[Source], list[str]]:
    """Source files named by ``inputs`` (files, or directories searched recursively) and error messages."""
    found: list[Source] = []
    errors: list[str] = []
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
                for name in sorted(filenames):
                    if name.endswith(EXTENSIONS):
                        found.append(Source(Path(dirpath) / name, p))
        elif p.is_file():
            found.append(Source(p, p))
        elif p.exists():
            errors.append(f"{raw}: not a regular file or directory; give a source file or a directory")
        else:
            errors.append(f"{raw}: no such file or directory; check the path")
    return found, errors


def read_source(path: Path) -> str:
    """The text of a source file, line endings untouched.

    Raises HipifyError (naming the file and the fix) for an unreadable, binary or non-UTF-8 file.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HipifyError(f"{path}: cannot read ({exc.strerror}); check the path and its permissions") from exc
    if b"\0" in data[:8192]:
        raise HipifyError(f"{path}: binary file (contains NUL bytes), not C/C++ source; leave it out of the input")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HipifyError(
            f"{path}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert it first, e.g. iconv -f latin1 -t utf-8"
        ) from exc


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as UTF-8 bytes exactly (no newline translation), creating folders."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    except OSError as exc:
        raise HipifyError(f"{path}: cannot write ({exc.strerror}); check the output path and permissions") from exc


def backup(path: Path, suffix: str) -> Path:
    """Copy ``path`` to ``path + suffix`` before an in-place rewrite; an existing backup is kept."""
    target = path.with_name(path.name + suffix)
    if not target.exists():
        try:
            shutil.copy2(path, target)
        except OSError as exc:
            raise HipifyError(
                f"{path}: cannot write the backup {target} ({exc.strerror}); check permissions or pass --backup-suffix"
            ) from exc
    return target
