"""Just enough ELF reading to list the symbols an object file needs from elsewhere.

The CPU runtime loads compiled objects into the process with MCJIT, which jumps to address 0 (a
segfault) when a symbol cannot be resolved. Before loading, :func:`undefined_symbols` lists what
the object imports (libgomp's entry points, libm functions, compiler support routines such as
``__truncdfhf2``) so that a missing one becomes an ember error naming it.
"""

from __future__ import annotations

import struct

_SHT_SYMTAB = 2
_SHN_UNDEF = 0


def undefined_symbols(obj: bytes) -> list[str]:
    """Names of the global symbols that the ELF64 little-endian relocatable object ``obj`` uses
    but does not define. Returns an empty list for anything that is not such an object."""
    if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return []
    shoff = struct.unpack_from("<Q", obj, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    if shoff == 0 or shentsize < 64 or shoff + shnum * shentsize > len(obj):
        return []
    sections = []
    for k in range(shnum):
        off = shoff + k * shentsize
        _name, stype, _flags, _addr, soff, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", obj, off
        )
        sections.append((stype, soff, size, link, entsize))
    names: list[str] = []
    for stype, soff, size, link, entsize in sections:
        if stype != _SHT_SYMTAB or entsize < 24 or link >= len(sections):
            continue
        str_off, str_size = sections[link][1], sections[link][2]
        for j in range(1, size // entsize):
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", obj, soff + j * entsize)
            binding = st_info >> 4
            if st_shndx != _SHN_UNDEF or binding == 0 or st_name == 0 or st_name >= str_size:
                continue
            start = str_off + st_name
            end = obj.index(b"\0", start)
            names.append(obj[start:end].decode("utf-8", "replace"))
    return names


def check_object(obj: bytes, functions: list[str]) -> list[str]:
    """Check that ``obj`` is an ELF64 relocatable object for this machine that defines
    ``functions``; returns the symbols it imports. Raises ModelFormatError otherwise.

    (Minimal check; the full header, section and symbol-table validation is in progress.)"""
    from ...errors import ModelFormatError

    if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise ModelFormatError("the CPU module's object code is not an ELF64 little-endian object")
    return undefined_symbols(obj)
