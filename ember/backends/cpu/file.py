"""Module files: a compiled module's parts in one zip archive with a manifest of sizes and
SHA-256 digests, checked on reading.

:func:`read_checked` is the one reader of such archives (module files here, saved models in
:mod:`ember.model.format`): it refuses duplicate or unlisted names, names that are not plain
file names, and sizes over a limit *before* decompressing anything (zip bombs), then checks each
member's size and digest. Every problem is a :class:`~ember.errors.ModelFormatError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
import zlib
from typing import Any

from ...errors import ModelFormatError

MODULE_FILE_FORMAT = "ember-module-file/1"
#: Largest part accepted (bytes): a guard against archives that claim absurd sizes.
MAX_PART_BYTES = 1 << 32
#: Largest manifest accepted (bytes).
MAX_MANIFEST_BYTES = 1 << 24
#: Member names: plain relative paths of simple names (``module/module.o``), no ``..``.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}){0,3}")
_DIGEST = re.compile(r"[0-9a-f]{64}")


def valid_name(name: Any) -> bool:
    """True for a member or part name ember writes: one to four ``/``-separated components of
    letters, digits, ``_``, ``.``, ``-`` (not starting with ``.``; so never ``..``)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None and ".." not in name


def write_parts(path: str | os.PathLike[str], parts: dict[str, bytes]) -> None:
    """Write ``parts`` to ``path`` atomically with a manifest (``manifest.json``)."""
    path = os.fspath(path)
    manifest = {"format": MODULE_FILE_FORMAT,
                "parts": {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in parts.items()}}
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for n, d in parts.items():
            z.writestr(n, d)
    os.replace(tmp, path)


def read_manifest(z: zipfile.ZipFile, path: str) -> Any:
    """The parsed ``manifest.json`` of archive ``z`` (size-checked before it is read). Raises
    KeyError when there is none (callers say what that means), ModelFormatError when it is
    unreadable or the archive has duplicate names."""
    names = z.namelist()
    if len(set(names)) != len(names):
        raise ModelFormatError(f"{path} holds two members of the same name")
    info = z.getinfo("manifest.json")
    if info.file_size > MAX_MANIFEST_BYTES:
        raise ModelFormatError(f"{path}: manifest.json claims {info.file_size} bytes")
    try:
        return json.loads(z.read(info))
    except (ValueError, RecursionError, OSError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise ModelFormatError(f"{path}: manifest.json is unreadable ({exc})") from exc


def read_checked(z: zipfile.ZipFile, listed: Any, path: str, max_bytes: int) -> dict[str, bytes]:
    """Every member ``listed`` (the manifest's ``{name: {"size", "sha256"}}``) read from ``z``,
    each checked against its size and digest. The archive must hold exactly those members plus
    ``manifest.json``; names must be plain (:func:`valid_name`); sizes are checked against the
    archive's directory and ``max_bytes`` (each and in total) before anything is decompressed."""
    if not isinstance(listed, dict):
        raise ModelFormatError(f"{path}: the manifest lists no members")
    present = set(z.namelist()) - {"manifest.json"}
    if set(listed) != present:
        extra = sorted(present - set(listed))
        missing = sorted(set(listed) - present)
        raise ModelFormatError(f"{path}: the archive's members do not match its manifest "
                               f"(unlisted: {extra[:5]}, missing: {missing[:5]})")
    total = 0
    for name, info in listed.items():
        if not valid_name(name):
            raise ModelFormatError(f"{path}: member name {name[:80]!r} is not a plain file name")
        if not isinstance(info, dict) or type(info.get("size")) is not int \
                or not isinstance(info.get("sha256"), str) or not _DIGEST.fullmatch(info["sha256"]):
            raise ModelFormatError(f"{path}: the manifest entry of {name!r} is not {{size, sha256}}")
        size, stored = info["size"], z.getinfo(name).file_size
        if size < 0 or size > max_bytes or stored != size:
            raise ModelFormatError(f"{path}: member {name!r} has {stored} bytes, the manifest says {size}")
        total += size
    if total > max_bytes:
        raise ModelFormatError(f"{path}: the members add up to {total} bytes, over the limit of {max_bytes}")
    out: dict[str, bytes] = {}
    for name, info in listed.items():
        try:
            data = z.read(name)
        except (OSError, zipfile.BadZipFile, ValueError, EOFError, NotImplementedError, zlib.error) as exc:
            raise ModelFormatError(f"{path}: member {name!r} cannot be read ({exc})") from exc
        except MemoryError as exc:
            raise ModelFormatError(f"{path}: member {name!r} ({info['size']} bytes) does not fit in memory") from exc
        if len(data) != info["size"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
            raise ModelFormatError(f"{path}: member {name!r} does not match its digest (edited or corrupted)")
        out[name] = data
    return out


def read_parts(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """The parts of a module file, each checked against the manifest's size and digest (see
    :func:`read_checked`). Raises ModelFormatError naming the file and the problem."""
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as z:
            try:
                manifest = read_manifest(z, path)
            except KeyError as exc:
                raise ModelFormatError(f"{path} is not an ember module file: it has no manifest.json") from exc
            if not isinstance(manifest, dict) or manifest.get("format") != MODULE_FILE_FORMAT:
                raise ModelFormatError(f"{path} is not an ember module file ({MODULE_FILE_FORMAT})")
            return read_checked(z, manifest.get("parts"), path, MAX_PART_BYTES)
    except FileNotFoundError as exc:
        raise ModelFormatError(f"{path} does not exist") from exc
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise ModelFormatError(f"{path} is not an ember module file: {exc}") from exc
