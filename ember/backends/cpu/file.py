"""Module files: a compiled module's parts in one zip archive with a manifest of sizes and
SHA-256 digests, checked on reading."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile

from ...errors import ModelFormatError

MODULE_FILE_FORMAT = "ember-module-file/1"
#: Largest part accepted (bytes): a guard against archives that claim absurd sizes.
MAX_PART_BYTES = 1 << 32


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


def read_parts(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """The parts of a module file, each checked against the manifest's size and digest."""
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as z:
            manifest = json.loads(z.read("manifest.json"))
            if not isinstance(manifest, dict) or manifest.get("format") != MODULE_FILE_FORMAT:
                raise ModelFormatError(f"{path} is not an ember module file ({MODULE_FILE_FORMAT})")
            parts = {}
            for name, info in manifest["parts"].items():
                size = int(info["size"])
                if size < 0 or size > MAX_PART_BYTES or z.getinfo(name).file_size != size:
                    raise ModelFormatError(f"{path}: part {name} does not have the size its manifest gives")
                data = z.read(name)
                if hashlib.sha256(data).hexdigest() != info["sha256"]:
                    raise ModelFormatError(f"{path}: part {name} does not match its digest (edited or corrupted)")
                parts[name] = data
            return parts
    except ModelFormatError:
        raise
    except FileNotFoundError as exc:
        raise ModelFormatError(f"{path} does not exist") from exc
    except (OSError, KeyError, ValueError, TypeError, AttributeError, zipfile.BadZipFile) as exc:
        raise ModelFormatError(f"{path} is not an ember module file: {exc}") from exc
