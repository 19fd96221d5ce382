"""The compile cache on disk.

Entries are keyed by a SHA-256 of the loop IR text, the target (with its CPU features) and the
ember version. An entry is a directory of files written to a temporary name and renamed into
place, so a reader never sees half an entry. Each entry records the SHA-256 of its payload; an
entry that is missing a file, unreadable or does not match its checksum is treated as absent and
rebuilt, never loaded.

The location is ``cache_dir`` when given, else ``$EMBER_CACHE_DIR``, else
``~/.cache/ember``. ``EMBER_CACHE_DIR=off`` (or ``use_cache=False`` in :func:`ember.build`)
disables it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .version import __version__ as _version


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path | None:
    """The cache directory in use, or None when caching is off."""
    if override is not None:
        return Path(override)
    env = os.environ.get("EMBER_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in ("", "off", "0", "none"):
            return None
        return Path(env)
    return Path(os.path.expanduser("~")) / ".cache" / "ember"


#: Bumped whenever code generation changes what it emits for the same loop IR, so entries
#: written by an older code generator are not reused.
CODEGEN_REVISION = "5"


def cache_key(*parts: str) -> str:
    """A hex key over the given texts, the ember version and the code generator revision."""
    h = hashlib.sha256()
    for p in (_version, CODEGEN_REVISION, *parts):
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


#: File names an entry may hold (a part's name: no directories, no ``..``).
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
#: Largest entry accepted (bytes, all files together).
MAX_ENTRY_BYTES = 1 << 32


def load(root: Path, key: str) -> dict[str, Any] | None:
    """The entry ``key`` as {name: bytes, "meta": dict}, or None when it is absent, half
    written, foreign or corrupt: ``meta.json`` must be an object listing plain file names with
    SHA-256 digests, and every file must exist and match its digest. (The files' *content* is
    checked by the backend's ``load``, which the caller runs: a rejected entry is a miss too.)"""
    entry = root / key[:2] / key
    try:
        meta = json.loads((entry / "meta.json").read_text())
        listed = meta["files"] if isinstance(meta, dict) else None
        extra = meta.get("extra", {}) if isinstance(meta, dict) else None
        if not isinstance(listed, dict) or not isinstance(extra, dict) or "meta" in listed:
            return None
        files: dict[str, Any] = {}
        total = 0
        for name, digest in listed.items():
            if not _FILE_NAME.fullmatch(name) or ".." in name or not isinstance(digest, str) \
                    or not _DIGEST.fullmatch(digest):
                return None
            path = entry / name
            total += path.stat().st_size
            if total > MAX_ENTRY_BYTES:
                return None
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                return None
            files[name] = data
        files["meta"] = extra
        return files
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def store(root: Path, key: str, files: dict[str, bytes], extra: dict[str, Any]) -> None:
    """Write entry ``key`` atomically (best effort: an unwritable cache is skipped)."""
    parent = root / key[:2]
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:8]}-", dir=parent))
        meta = {"files": {}, "extra": extra}
        for name, data in files.items():
            (tmp / name).write_bytes(data)
            meta["files"][name] = hashlib.sha256(data).hexdigest()
        (tmp / "meta.json").write_text(json.dumps(meta))
        final = parent / key
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(locals().get("tmp", parent / ".none"), ignore_errors=True)
