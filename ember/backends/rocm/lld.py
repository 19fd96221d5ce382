"""Linking AMDGPU code objects: LLVM's ``ld.lld`` turns the relocatable object LLVM emits into the
shared (``ET_DYN``) HSA code object that HIP loads.

The linker is a command (an executable and its first arguments), looked for in this order:

1. the ``lld`` argument of :func:`find_lld`;
2. ``EMBER_LLD``: a path to ``ld.lld``, or a command line such as ``python -m ziglang ld.lld``;
3. ROCm's: ``$ROCM_PATH/llvm/bin/ld.lld``, ``/opt/rocm/llvm/bin/ld.lld``;
4. on ``PATH``: ``ld.lld-22`` … ``ld.lld-19``, ``ld.lld`` (Debian/Ubuntu's ``lld-NN`` packages);
5. the ``ziglang`` wheel (``pip install ember[rocm]``): its ``zig`` executable is LLD when its first
   argument is ``ld.lld`` (zig 0.17 carries LLD 22.1), so a pip install alone can compile for AMD GPUs.

A linker older than LLD 19 is skipped (LLD 14 rejects the code object versions LLVM 22 writes).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import shutil
import struct
import subprocess
import tempfile

from ...errors import ToolchainError
from ..gpu.build import env_path

MIN_LLD = 19
#: Newest LLD version looked for on PATH as ``ld.lld-NN``.
NEWEST_LLD = 22


def lld_version(cmd: tuple[str, ...]) -> int | None:
    """The major version ``cmd --version`` reports (``LLD 22.1.8 ...``), or None when it does not run
    or says something else."""
    try:
        out = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"LLD (\d+)\.", out)
    return int(m.group(1)) if m else None


def wheel_lld() -> tuple[str, ...] | None:
    """``(zig, "ld.lld")`` from the installed ``ziglang`` wheel (found without importing it), or
    None when the wheel is not installed."""
    try:
        spec = importlib.util.find_spec("ziglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for name in ("zig", "zig.exe"):
            exe = os.path.join(folder, name)
            if os.path.isfile(exe) and os.access(exe, os.X_OK):
                return (exe, "ld.lld")
    return None


def _command(spec: str) -> tuple[str, ...] | None:
    """A linker command from a path or a command line; None when its program is not found."""
    if os.path.isfile(spec):
        return (spec,)
    words = shlex.split(spec)
    if not words:
        return None
    exe = words[0] if os.path.isfile(words[0]) else shutil.which(words[0])
    return (exe, *words[1:]) if exe else None


def _candidates(lld: str | None) -> list[str | tuple[str, ...]]:
    cands: list[str | tuple[str, ...]] = []
    if lld:
        cands.append(lld)
    env = env_path("EMBER_LLD")
    if env:
        cands.append(env)
    for root in (os.environ.get("ROCM_PATH", ""), "/opt/rocm"):
        if root:
            cands.append(os.path.join(root, "llvm", "bin", "ld.lld"))
    cands += [f"ld.lld-{v}" for v in range(NEWEST_LLD, MIN_LLD - 1, -1)]
    cands.append("ld.lld")
    wheel = wheel_lld()
    if wheel is not None:
        cands.append(wheel)
    return cands


@functools.cache
def find_lld(lld: str | None = None) -> tuple[str, ...]:
    """The command that runs ``ld.lld`` (LLD 19 or newer), in the order of the module doc.

    Raises :class:`~ember.errors.ToolchainError` saying what to install when none is found."""
    tried: list[str] = []
    for c in _candidates(lld):
        cmd = c if isinstance(c, tuple) else _command(c)
        if cmd is None:
            continue
        ver = lld_version(cmd)
        if ver is not None and ver >= MIN_LLD:
            return cmd
        tried.append(f"{shlex.join(cmd)} (version {ver if ver is not None else 'unknown'})")
    old = f"; found only {', '.join(tried)}, older than {MIN_LLD} (lld 14 rejects code object v5/v6)" if tried else ""
    raise ToolchainError(
        f"ld.lld (LLVM's linker, version {MIN_LLD} or newer) is needed to link AMDGPU code objects and was not found"
        f"{old}: pip install 'ember[rocm]' (LLD from the ziglang wheel), or apt-get install lld-22, or ROCm; "
        "or set EMBER_LLD=/path/to/ld.lld"
    )


def link_code_object(obj: bytes, lld: str | None = None) -> bytes:
    """Link an AMDGPU relocatable object into a shared (``ET_DYN``) HSA code object with the
    linker :func:`find_lld` finds. Raises ToolchainError with the linker's message when it fails."""
    linker = find_lld(lld)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.o")
        out = os.path.join(tmp, "kernel.hsaco")
        with open(src, "wb") as f:
            f.write(obj)
        proc = subprocess.run([*linker, "-shared", src, "-o", out], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ToolchainError(f"{shlex.join(linker)} could not link the AMDGPU code object:\n{proc.stderr.strip()}")
        with open(out, "rb") as f:
            return f.read()


def code_object_sections(code_object: bytes) -> dict[str, tuple[int, int, bytes]]:
    """The sections of a linked code object (ELF64, little-endian) by name: address, size and
    bytes (empty for ``NOBITS``), ``.comment`` (the linker's name and version) left out — what two
    linkers must agree on to give the same code object. Raises struct.error on a truncated file."""
    shoff, = struct.unpack_from("<Q", code_object, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", code_object, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", code_object, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name, kind, _, addr, off, size, *_ in headers:
        label = code_object[names_at + name:code_object.index(b"\0", names_at + name)].decode()
        if label != ".comment":
            out[label] = (addr, size, code_object[off:off + size] if kind != 8 else b"")
    return out
