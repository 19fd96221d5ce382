"""A prototype AMDGPU linker in Python, written to measure the "link the code object in Python"
option of docs/gpu.md against LLD; ember does not use it (LLD links every code object).

It handles what ember's relocatable objects hold — ``.text``, ``.rodata`` with the kernel
descriptors, the ``.note`` of AMDGPU metadata, ``R_AMDGPU_REL64`` relocations from each
descriptor to its kernel — and lays out a shared object as LLD does: ELF header and program
headers, then the read-only segment (``.note``, ``.dynsym``, ``.hash``, ``.dynstr``,
``.rodata``), the executable segment (``.text``), the writable one (``.dynamic``), and the
PT_DYNAMIC, PT_GNU_RELRO, PT_GNU_STACK and PT_NOTE headers. Global symbols become dynamic
symbols (kernels and their ``.kd`` descriptors). Anything else (another relocation type, a
data section) raises ``NotImplementedError``. :func:`compare_with` checks a result against LLD's
code object for the same input: the same header flags, sections' bytes, symbols at the same
offsets within their sections, and descriptors pointing at their kernels.
"""

from __future__ import annotations

import struct
from typing import Any

EM_AMDGPU, ET_DYN = 224, 3
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_HASH, SHT_DYNAMIC, SHT_NOTE, SHT_DYNSYM = 1, 2, 3, 4, 5, 6, 7, 11
SHF_WRITE, SHF_ALLOC, SHF_EXEC = 1, 2, 4
PT_LOAD, PT_DYNAMIC, PT_NOTE, PT_PHDR = 1, 2, 4, 6
PT_GNU_STACK, PT_GNU_RELRO = 0x6474E551, 0x6474E552
R_AMDGPU_REL64 = 5
DT_NULL, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT = 0, 4, 5, 6, 10, 11
PAGE = 4096


def _sections(obj: bytes) -> list[dict[str, Any]]:
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    names_at = raw[shstrndx][4]
    out = []
    for name, kind, flags, addr, off, size, link, info, align, entsize in raw:
        label = obj[names_at + name:obj.index(b"\0", names_at + name)].decode()
        out.append({"name": label, "type": kind, "flags": flags, "addr": addr, "off": off, "size": size,
                    "link": link, "info": info, "align": max(align, 1), "entsize": entsize,
                    "data": obj[off:off + size] if kind != 8 else b""})
    return out


def _symbols(secs: list[dict[str, Any]], tab: dict[str, Any]) -> list[dict[str, Any]]:
    strtab = secs[tab["link"]]["data"]
    out = []
    for j in range(tab["size"] // 24):
        name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", tab["data"], j * 24)
        out.append({"name": strtab[name:strtab.index(b"\0", name)].decode(), "info": info, "other": other,
                    "shndx": shndx, "value": value, "size": size})
    return out


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _sysv_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def link(obj: bytes) -> bytes:
    """Link one AMDGPU relocatable object into a shared code object (see the module doc)."""
    secs = _sections(obj)
    by_name = {s["name"]: s for s in secs}
    for s in secs:
        if s["type"] == SHT_RELA and s["name"] != ".rela.rodata" and s["size"]:
            raise NotImplementedError(f"relocations in {s['name']}")
        if s["flags"] & SHF_ALLOC and s["name"] not in (".text", ".rodata", ".note") and s["size"]:
            raise NotImplementedError(f"section {s['name']}")
    symtab = next(s for s in secs if s["type"] == SHT_SYMTAB)
    syms = _symbols(secs, symtab)
    text, rodata, note = by_name[".text"], by_name.get(".rodata"), by_name[".note"]
    index_of = {id(s): k for k, s in enumerate(secs)}
    exported = [s for s in syms if s["info"] >> 4 == 1 and s["shndx"] != 0]  # STB_GLOBAL, defined
    dynstr = b"\0" + b"".join(s["name"].encode() + b"\0" for s in exported)
    name_off, at = [], 1
    for s in exported:
        name_off.append(at)
        at += len(s["name"]) + 1
    nsyms = len(exported) + 1
    nbucket = nsyms
    buckets, chains = [0] * nbucket, [0] * nsyms
    for k, s in enumerate(exported, start=1):
        b = _sysv_hash(s["name"].encode()) % nbucket
        chains[k], buckets[b] = buckets[b], k
    hash_data = struct.pack(f"<II{nbucket}I{nsyms}I", nbucket, nsyms, *buckets, *chains)
    nphdr = 8
    # read-only segment
    cur = 64 + 56 * nphdr
    layout: dict[str, int] = {}
    for name, size, align in ((".note", note["size"], 4), (".dynsym", 24 * nsyms, 8), (".hash", len(hash_data), 4),
                              (".dynstr", len(dynstr), 1), (".rodata", rodata["size"] if rodata else 0, 64)):
        cur = _align(cur, align)
        layout[name] = cur
        cur += size
    ro_end = cur
    # executable segment: the next page, keeping the file offset congruent to the address
    text_off = _align(ro_end, text["align"])
    text_addr = _align(ro_end, PAGE) + text_off % PAGE
    # writable segment
    dyn_entries = [(DT_HASH, layout[".hash"]), (DT_SYMTAB, layout[".dynsym"]), (DT_SYMENT, 24),
                   (DT_STRTAB, layout[".dynstr"]), (DT_STRSZ, len(dynstr)), (DT_NULL, 0)]
    dyn_data = b"".join(struct.pack("<qQ", t, v) for t, v in dyn_entries)
    dyn_off = _align(text_off + text["size"], 8)
    dyn_addr = _align(text_addr + text["size"], PAGE) + dyn_off % PAGE
    section_addr = {index_of[id(text)]: text_addr, index_of[id(note)]: layout[".note"]}
    if rodata is not None:
        section_addr[index_of[id(rodata)]] = layout[".rodata"]
    # relocate the descriptors
    ro = bytearray(rodata["data"]) if rodata is not None else bytearray()
    rela = by_name.get(".rela.rodata")
    if rela is not None:
        for j in range(rela["size"] // 24):
            off, info, addend = struct.unpack_from("<QQq", rela["data"], j * 24)
            if info & 0xFFFFFFFF != R_AMDGPU_REL64:
                raise NotImplementedError(f"relocation type {info & 0xFFFFFFFF}")
            sym = syms[info >> 32]
            target = section_addr[sym["shndx"]] + sym["value"] + addend
            struct.pack_into("<q", ro, off, target - (layout[".rodata"] + off))
    dynsym = bytearray(24)
    for s, n in zip(exported, name_off):
        dynsym += struct.pack("<IBBHQQ", n, s["info"], s["other"], 0, section_addr[s["shndx"]] + s["value"], s["size"])
    # section headers: null, .note, .dynsym, .hash, .dynstr, .rodata, .text, .dynamic, .shstrtab
    names = [".note", ".dynsym", ".hash", ".dynstr", ".rodata", ".text", ".dynamic", ".shstrtab"]
    shstr = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    shstr_off = dyn_off + len(dyn_data)
    shoff = _align(shstr_off + len(shstr), 8)
    # fix the dynamic symbols' section indexes (.rodata 5, .text 6)
    for k, s in enumerate(exported, start=1):
        struct.pack_into("<H", dynsym, k * 24 + 6, 6 if s["shndx"] == index_of[id(text)] else 5)
    nm = {n: 1 + sum(len(x) + 1 for x in names[:k]) for k, n in enumerate(names)}
    ro_flags, x_flags, w_flags = SHF_ALLOC, SHF_ALLOC | SHF_EXEC, SHF_ALLOC | SHF_WRITE
    shdrs = [(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
             (nm[".note"], SHT_NOTE, ro_flags, layout[".note"], layout[".note"], note["size"], 0, 0, 4, 0),
             (nm[".dynsym"], SHT_DYNSYM, ro_flags, layout[".dynsym"], layout[".dynsym"], len(dynsym), 4, 1, 8, 24),
             (nm[".hash"], SHT_HASH, ro_flags, layout[".hash"], layout[".hash"], len(hash_data), 2, 0, 4, 4),
             (nm[".dynstr"], SHT_STRTAB, ro_flags, layout[".dynstr"], layout[".dynstr"], len(dynstr), 0, 0, 1, 0),
             (nm[".rodata"], SHT_PROGBITS, ro_flags, layout[".rodata"], layout[".rodata"], len(ro), 0, 0, 64, 0),
             (nm[".text"], SHT_PROGBITS, x_flags, text_addr, text_off, text["size"], 0, 0, text["align"], 0),
             (nm[".dynamic"], SHT_DYNAMIC, w_flags, dyn_addr, dyn_off, len(dyn_data), 4, 0, 8, 16),
             (nm[".shstrtab"], SHT_STRTAB, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0)]
    phdrs = [(PT_PHDR, 4, 64, 64, 64, 56 * nphdr, 56 * nphdr, 8),
             (PT_LOAD, 4, 0, 0, 0, ro_end, ro_end, PAGE),
             (PT_LOAD, 5, text_off, text_addr, text_addr, text["size"], text["size"], PAGE),
             (PT_LOAD, 6, dyn_off, dyn_addr, dyn_addr, len(dyn_data), len(dyn_data), PAGE),
             (PT_DYNAMIC, 6, dyn_off, dyn_addr, dyn_addr, len(dyn_data), len(dyn_data), 8),
             (PT_GNU_RELRO, 4, dyn_off, dyn_addr, dyn_addr, len(dyn_data), len(dyn_data), 1),
             (PT_GNU_STACK, 6, 0, 0, 0, 0, 0, 0),
             (PT_NOTE, 4, layout[".note"], layout[".note"], layout[".note"], note["size"], note["size"], 4)]
    out = bytearray(shoff + 64 * len(shdrs))
    ident = obj[:16]
    struct.pack_into("<16sHHIQQQIHHHHHH", out, 0, ident, ET_DYN, EM_AMDGPU, 1, 0, 64, shoff,
                     struct.unpack_from("<I", obj, 0x30)[0], 64, 56, nphdr, 64, len(shdrs), len(shdrs) - 1)
    for k, ph in enumerate(phdrs):
        struct.pack_into("<IIQQQQQQ", out, 64 + 56 * k, *ph)
    for name, data in ((".note", note["data"]), (".dynsym", bytes(dynsym)), (".hash", hash_data),
                       (".dynstr", dynstr), (".rodata", bytes(ro))):
        out[layout[name]:layout[name] + len(data)] = data
    out[text_off:text_off + text["size"]] = text["data"]
    out[dyn_off:dyn_off + len(dyn_data)] = dyn_data
    out[shstr_off:shstr_off + len(shstr)] = shstr
    for k, sh in enumerate(shdrs):
        struct.pack_into("<IIQQQQIIQQ", out, shoff + 64 * k, *sh)
    return bytes(out)


def compare_with(mine: bytes, lld_out: bytes) -> list[str]:
    """Differences that matter to a loader between two code objects of the same input: header
    fields, the bytes of .text and .note, each dynamic symbol's kind, size and offset within its
    section, and each kernel descriptor's bytes with its entry offset checked against its kernel.
    Empty when they agree."""
    problems = []
    if mine[:16] != lld_out[:16] or mine[0x30:0x34] != lld_out[0x30:0x34]:
        problems.append("ELF identification or e_flags differ")
    a, b = {s["name"]: s for s in _sections(mine)}, {s["name"]: s for s in _sections(lld_out)}
    for name in (".text", ".note"):
        if a[name]["data"] != b[name]["data"]:
            problems.append(f"{name} differs")

    def dyn(secs: dict[str, Any]) -> dict[str, tuple[int, int, int, str]]:
        table = secs[".dynsym"]
        strtab = secs[".dynstr"]["data"]
        out = {}
        for j in range(1, table["size"] // 24):
            name, info, _, _, value, size = struct.unpack_from("<IBBHQQ", table["data"], j * 24)
            t = secs[".text"]
            sec = ".text" if t["addr"] <= value < t["addr"] + t["size"] else ".rodata"
            out[strtab[name:strtab.index(b"\0", name)].decode()] = (info, size, value - secs[sec]["addr"], sec)
        return out

    da, db = dyn(a), dyn(b)
    if da != db:
        problems.append(f"dynamic symbols differ: {sorted(set(da.items()) ^ set(db.items()))[:4]}")
    ra, rb = a[".rodata"]["data"], b[".rodata"]["data"]
    for sym, (_, size, off, sec) in da.items():
        if sec != ".rodata":
            continue
        kd_a, kd_b = ra[off:off + size], rb[off:off + size]
        if kd_a[:16] + kd_a[24:] != kd_b[:16] + kd_b[24:]:
            problems.append(f"descriptor {sym} differs")
        entry, = struct.unpack_from("<q", kd_a, 16)
        kernel = da.get(sym[:-3])
        if kernel is None or a[".rodata"]["addr"] + off + entry != a[".text"]["addr"] + kernel[2]:
            problems.append(f"descriptor {sym} does not point at its kernel")
    return problems
