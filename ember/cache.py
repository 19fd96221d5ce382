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
CODEGEN_REVISION = "3"


def cache_key(*parts: str) -> str:
    """A hex key over the given texts, the ember version and the code generator revision."""
    h = hashlib.sha256()
    for p in (_version, CODEGEN_REVISION, *parts):
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def load(root: Path, key: str) -> dict[str, Any] | None:
    """The entry ``key`` as {name: bytes, "meta": dict}, or None when absent or corrupt."""
    entry = root / key[:2] / key
    try:
        meta = json.loads((entry / "meta.json").read_text())
        files = {}
        for name, digest in meta["files"].items():
            data = (entry / name).read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                return None
            files[name] = data
        files_meta: dict[str, Any] = dict(files)
        files_meta["meta"] = meta.get("extra", {})
        return files_meta
    except (OSError, ValueError, KeyError, TypeError):
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
