"""ELF reading and checking for the CPU backend's relocatable objects.

The CPU runtime maps compiled objects into the process with MCJIT (LLVM's RuntimeDyld), which
trusts the object: a section or symbol table pointing outside the file, a relocation of a type
it does not implement or outside its section crashes or corrupts the process, a symbol it cannot
resolve becomes address 0 (a segfault at the first call), and an ``STT_GNU_IFUNC`` resolver
would run at load time. :func:`check_object` therefore validates an object completely before
LLVM sees it — header, section table, string and symbol tables, relocations, unwind-table
framing — and refuses what ember never writes: load-time code (constructor and destructor
sections, ``.init``/``.fini``, IFUNC and TLS symbols) and imports that are not on
:data:`ALLOWED_IMPORTS`. Every problem is a :class:`~ember.errors.ModelFormatError`.
"""

from __future__ import annotations

import platform
import struct
from dataclasses import dataclass

from ...errors import ModelFormatError

_SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL, _SHT_DYNSYM = 2, 3, 4, 8, 9, 11
_SHT_INIT_ARRAY, _SHT_FINI_ARRAY, _SHT_PREINIT_ARRAY = 14, 15, 16
_SHF_EXECINSTR, _SHF_TLS = 0x4, 0x400
#: Section types in ember's objects: PROGBITS, SYMTAB, STRTAB, RELA, NOTE, NOBITS, the x86-64
#: unwind table, LLVM's address-significance table (and the rejected ones, named below).
_SECTION_TYPES = frozenset({1, 2, 3, 4, 7, 8, 9, 11, 14, 15, 16, 0x70000001, 0x6FFF4C03})
#: Section flags in ember's objects: WRITE, ALLOC, EXECINSTR, MERGE, STRINGS, INFO_LINK (and TLS,
#: rejected with its own message), and on x86-64 SHF_X86_64_LARGE (the large code model's
#: ``.ltext``/``.lrodata``, which ember's CPU code uses).
_SECTION_FLAGS = 0x1 | 0x2 | 0x4 | 0x10 | 0x20 | 0x40 | 0x400
_SHF_X86_64_LARGE = 0x10000000
_SHN_UNDEF, _SHN_LORESERVE, _SHN_ABS, _SHN_COMMON = 0, 0xFF00, 0xFFF1, 0xFFF2
_STB_GLOBAL, _STB_WEAK = 1, 2
_STT_FUNC, _STT_TLS, _STT_GNU_IFUNC = 2, 6, 10
#: Symbol types a relocation may refer to: none (imports), object, function, section.
_RELOCATABLE_TYPES = frozenset({0, 1, 2, 3})
_ET_REL = 1
#: Largest zero-filled (``.bss``) section and strictest section alignment accepted: the
#: in-process linker allocates both, and ember's objects need far less.
MAX_ZEROED_BYTES = 1 << 28
MAX_ALIGN = 1 << 12
EM_X86_64, EM_AARCH64 = 62, 183

#: Sections that hold code run when an object is loaded or unloaded.
_LOAD_TIME_PREFIXES = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors")
_LOAD_TIME_NAMES = (".init", ".fini")

#: Relocation types LLVM's ELF writer emits for ember's position-independent code and that
#: RuntimeDyld implements without range assertions it cannot keep for any addend, per machine
#: (an unimplemented type, or an LLVM assertion, aborts the process).
_RELOCATIONS = {
    # NONE 64 PC32 PLT32 GOTPCREL PC64 GOTPCRELX REX_GOTPCRELX
    EM_X86_64: frozenset({0, 1, 2, 4, 9, 24, 41, 42}),
    # NONE ABS64 ABS32 ABS16 PREL64 PREL32 PREL16 MOVW_UABS_G0_NC G1_NC G2_NC G3 LD_PREL_LO19
    # ADR_PREL_LO21 ADR_PREL_PG_HI21 ADD_ABS_LO12_NC LDST8 TSTBR14 CONDBR19 JUMP26 CALL26
    # LDST16 LDST32 LDST64 LDST128 ADR_GOT_PAGE LD64_GOT_LO12_NC PLT32
    EM_AARCH64: frozenset({0, 256, 257, 258, 259, 260, 261, 262, 264, 266, 268, 269, 273, 274, 275, 277, 278,
                           279, 280, 282, 283, 284, 285, 286, 299, 311, 312, 314}),
}
#: The types above that may name an imported symbol: calls through a stub, addresses through the
#: GOT, 64-bit absolute addresses (a 32-bit PC-relative reference to a routine in a library
#: does not reach it, and RuntimeDyld asserts).
_IMPORT_RELOCATIONS = {
    EM_X86_64: frozenset({0, 1, 4, 9, 41, 42}),
    EM_AARCH64: frozenset({0, 256, 257, 282, 283, 311, 312}),
}
#: The types for which RuntimeDyld also adds the bytes already at the place to the addend
#: (x86-64 PC32, PLT32 to a local symbol, PC64).
_IMPLICIT_ADDEND = {EM_X86_64: frozenset({2, 4, 24})}
#: Largest addend accepted beyond the object's own size: a relocation refers to a place in the
#: object (or a routine, with a small addend); larger addends overflow 32-bit fields.
_ADDEND_SLACK = 1 << 12

#: The relocation types above that patch 8 bytes (the others patch at most 4).
_WIDE_RELOCATIONS = {EM_X86_64: frozenset({1, 24}), EM_AARCH64: frozenset({257, 260})}

_LIBM = (
    "acos asin atan atan2 acosh asinh atanh cos sin tan cosh sinh tanh exp exp2 exp10 expm1 log log2 log10 log1p "
    "pow sqrt cbrt hypot erf erfc tgamma lgamma fmod remainder floor ceil trunc round roundeven rint nearbyint "
    "lround llround lrint llrint fabs fmin fmax fma ldexp frexp modf copysign nextafter sincos"
).split()
#: The routines a module may import, derived from what ember's code generators emit:
#: ``codegen/llvm.py`` (libm's ``LIBM_UNARY``; LLVM lowers the ``llvm.exp``/``log``/``sin``/
#: ``pow``/``frem``/rounding intrinsics of ``LLVM_UNARY`` to libm calls, and may merge sin and cos
#: into ``sincos``; ``malloc``/``free`` for heap scratch buffers, and ``calloc``, which LLVM
#: makes of a ``malloc`` whose memory is then zero-filled), ``backends/cpu/codegen.py``
#: (libgomp's ``GOMP_parallel``, ``omp_get_thread_num``, ``omp_get_num_threads``), LLVM's own
#: lowering (``memcpy``/``memset``/``memmove`` for copy and fill loops) and the compiler-rt /
#: libgcc conversion routines for half, bfloat16 and 128-bit integer arithmetic on CPUs without
#: instructions for them. Each libm name is allowed in its double and float (``f``) forms.
ALLOWED_IMPORTS: frozenset[str] = frozenset(
    [*_LIBM, *(n + "f" for n in _LIBM)]
    + ["ember_parallel_for", "GOMP_parallel", "GOMP_barrier", "omp_get_thread_num", "omp_get_num_threads",
       "malloc", "calloc", "free", "memcpy", "memset", "memmove",
       "__truncdfhf2", "__truncsfhf2", "__extendhfsf2", "__extendhfdf2", "__gnu_h2f_ieee", "__gnu_f2h_ieee",
       "__truncsfbf2", "__truncdfbf2", "__extendbfsf2",
       "__powisf2", "__powidf2", "__divti3", "__udivti3", "__modti3", "__umodti3", "__multi3",
       "__floattisf", "__floattidf", "__floatuntisf", "__floatuntidf", "__fixsfti", "__fixdfti",
       "__fixunssfti", "__fixunsdfti", "__floatdihf", "__floatundihf", "__floattihf", "__floatuntihf"]
)


@dataclass
class _Section:
    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


def host_machine() -> int | None:
    """The ELF ``e_machine`` of this host (x86-64: 62, AArch64: 183), or None for others."""
    m = platform.machine().lower()
    if m in ("x86_64", "amd64"):
        return EM_X86_64
    if m in ("aarch64", "arm64"):
        return EM_AARCH64
    return None


def _bad(msg: str) -> ModelFormatError:
    return ModelFormatError(f"the CPU module's object code {msg}")


def _string(obj: bytes, table: _Section, index: int, what: str) -> str:
    """The NUL-terminated string at ``index`` of string table ``table`` (already checked to end
    with a NUL)."""
    if not 0 <= index < table.size:
        raise _bad(f"names {what} with string index {index}, outside its string table ({table.size} bytes)")
    start = table.offset + index
    end = obj.index(b"\0", start, table.offset + table.size)
    try:
        return obj[start:end].decode("ascii")
    except UnicodeDecodeError as exc:
        raise _bad(f"names {what} with a name that is not ASCII") from exc


def _sections(obj: bytes) -> list[_Section]:
    """The section table, every entry's bounds checked, names resolved."""
    if len(obj) < 64 or obj[:4] != b"\x7fELF":
        raise _bad("is not an ELF file")
    if obj[4] != 2 or obj[5] != 1 or obj[6] != 1:
        raise _bad("is not an ELF64 little-endian (version 1) object")
    e_type, e_machine, e_version = struct.unpack_from("<HHI", obj, 0x10)
    if e_type != _ET_REL:
        raise _bad(f"is an ELF file of type {e_type}, not a relocatable object (ET_REL)")
    want = host_machine()
    if want is None or e_machine != want:
        raise _bad(f"is for ELF machine {e_machine}, not this host ({platform.machine()})")
    if e_version != 1:
        raise _bad(f"has ELF version {e_version}")
    _entry, phoff, shoff, _flags = struct.unpack_from("<QQQI", obj, 0x18)
    ehsize, phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHHH", obj, 0x34)
    if ehsize != 64 or phnum != 0 or phoff != 0:
        raise _bad("has an ELF header of the wrong size or program headers (a relocatable object has none)")
    if shentsize != 64 or not 1 <= shnum < _SHN_LORESERVE or shoff < 64 or shoff + shnum * 64 > len(obj):
        raise _bad(f"has a section table outside the file ({shnum} entries of {shentsize} bytes at {shoff}, "
                   f"file of {len(obj)} bytes)")
    if not 0 < shstrndx < shnum:
        raise _bad(f"names section {shstrndx} as its section-name table, out of range")
    raw = []
    for k in range(shnum):
        raw.append(struct.unpack_from("<IIQQQQIIQQ", obj, shoff + 64 * k))
    secs = []
    for k, (_name, stype, flags, _addr, off, size, link, info, align, entsize) in enumerate(raw):
        if k and stype != _SHT_NOBITS and (off > len(obj) or size > len(obj) - off):
            raise _bad(f"has section {k} ({size} bytes at {off}) outside the file ({len(obj)} bytes)")
        if k and stype not in _SECTION_TYPES:
            raise _bad(f"has section {k} of type {stype:#x}, which ember's objects do not have")
        if flags & ~(_SECTION_FLAGS | (_SHF_X86_64_LARGE if e_machine == EM_X86_64 else 0)):
            raise _bad(f"has section {k} with flags {flags:#x} ember's objects do not use (compressed, TLS, "
                       "OS- or processor-specific)")
        if stype == _SHT_NOBITS and size > MAX_ZEROED_BYTES:
            raise _bad(f"has a zero-filled section {k} of {size} bytes (at most {MAX_ZEROED_BYTES})")
        if align > MAX_ALIGN or align & (align - 1):
            raise _bad(f"has section {k} aligned to {align} bytes (a power of two up to {MAX_ALIGN})")
        secs.append(_Section(k, "", stype, flags, off, size, link, info, entsize))
    _check_strtab(obj, secs[shstrndx], "the section-name table")
    for s, r in zip(secs, raw):
        if s.index:
            s.name = _string(obj, secs[shstrndx], r[0], f"section {s.index}")
    return secs


def _check_strtab(obj: bytes, s: _Section, what: str) -> None:
    if s.type != _SHT_STRTAB or s.size == 0 or obj[s.offset + s.size - 1] != 0:
        raise _bad(f"has {what} (section {s.index}) that is not a NUL-terminated string table")


def _check_load_time_code(secs: list[_Section]) -> None:
    for s in secs:
        if s.type in (_SHT_INIT_ARRAY, _SHT_FINI_ARRAY, _SHT_PREINIT_ARRAY) or s.name in _LOAD_TIME_NAMES \
                or s.name.startswith(_LOAD_TIME_PREFIXES):
            raise _bad(f"has a section {s.name!r} (type {s.type}) of code run at load or unload time "
                       "(constructors); ember never writes one")
        if s.flags & _SHF_TLS:
            raise _bad(f"has a thread-local section {s.name!r}; ember never writes one")


@dataclass
class _Symbol:
    name: str
    bind: int
    type: int
    shndx: int
    value: int
    size: int


def _symbols(obj: bytes, secs: list[_Section], s: _Section) -> list[_Symbol]:
    if s.entsize != 24 or s.size % 24:
        raise _bad(f"has a symbol table {s.name!r} with entries of {s.entsize} bytes")
    if not 0 < s.link < len(secs):
        raise _bad(f"has a symbol table {s.name!r} whose string table is section {s.link}, out of range")
    strtab = secs[s.link]
    _check_strtab(obj, strtab, f"the string table of {s.name!r}")
    out = []
    for j, (st_name, st_info, _other, shndx, value, size) in enumerate(
            struct.iter_unpack("<IBBHQQ", obj[s.offset:s.offset + s.size])):
        if j == 0:
            out.append(_Symbol("", 0, 0, 0, 0, 0))
            continue
        name = _string(obj, strtab, st_name, f"symbol {j}")
        bind, stype = st_info >> 4, st_info & 0xF
        if stype == _STT_GNU_IFUNC:
            raise _bad(f"has an IFUNC symbol {name!r}, whose resolver would run at load time")
        if stype == _STT_TLS:
            raise _bad(f"has a thread-local symbol {name!r}; ember never writes one")
        if shndx == _SHN_COMMON:
            raise _bad(f"has a common symbol {name!r}; ember never writes one")
        if shndx not in (_SHN_UNDEF, _SHN_ABS) and not 0 < shndx < len(secs):
            raise _bad(f"has symbol {name!r} in section {shndx}, out of range")
        if 0 < shndx < len(secs) and secs[shndx].type != _SHT_NOBITS and value > secs[shndx].size:
            raise _bad(f"has symbol {name!r} past the end of its section")
        out.append(_Symbol(name, bind, stype, shndx, value, size))
    return out


def _check_relocations(obj: bytes, secs: list[_Section], s: _Section, symtabs: dict[int, list[_Symbol]],
                       machine: int) -> None:
    if s.type != _SHT_RELA:
        raise _bad(f"has a relocation section {s.name!r} without addends (SHT_REL); LLVM writes SHT_RELA")
    if s.entsize != 24 or s.size % 24:
        raise _bad(f"has a relocation section {s.name!r} with entries of {s.entsize} bytes")
    syms = symtabs.get(s.link)
    if syms is None:
        raise _bad(f"has a relocation section {s.name!r} whose symbol table is section {s.link}")
    if not 0 < s.info < len(secs):
        raise _bad(f"has a relocation section {s.name!r} for section {s.info}, out of range")
    target = secs[s.info]
    if target.type == _SHT_NOBITS:
        raise _bad(f"has a relocation section {s.name!r} for {target.name!r}, which holds no data")
    allowed, imports = _RELOCATIONS[machine], _IMPORT_RELOCATIONS[machine]
    wide, implicit = _WIDE_RELOCATIONS[machine], _IMPLICIT_ADDEND.get(machine, frozenset())
    bound = len(obj) + _ADDEND_SLACK
    for offset, info, addend in struct.iter_unpack("<QQq", obj[s.offset:s.offset + s.size]):
        rtype, sym = info & 0xFFFFFFFF, info >> 32
        if rtype not in allowed:
            raise _bad(f"has a relocation of type {rtype} in {s.name!r}, which ember's code does not use")
        if sym >= len(syms):
            raise _bad(f"has a relocation in {s.name!r} naming symbol {sym}, out of range")
        if sym:
            ref = syms[sym]
            if ref.type not in _RELOCATABLE_TYPES:
                raise _bad(f"has a relocation in {s.name!r} to symbol {sym} of type {ref.type}, which names no code "
                           "or data")
            if ref.shndx == _SHN_UNDEF:
                if ref.bind not in (_STB_GLOBAL, _STB_WEAK) or not ref.name:
                    raise _bad(f"has a relocation in {s.name!r} to the undefined local symbol {sym}")
                if rtype not in imports:
                    raise _bad(f"has a relocation of type {rtype} in {s.name!r} to the imported symbol "
                               f"{ref.name!r}, which cannot reach it")
            elif not 0 < ref.shndx < len(secs):
                raise _bad(f"has a relocation in {s.name!r} to symbol {sym}, which is in no section")
        nbytes = 8 if rtype in wide else 4
        if offset > target.size or target.size - offset < nbytes:
            raise _bad(f"has a relocation in {s.name!r} at offset {offset}, outside {target.name!r}")
        if rtype in implicit:  # RuntimeDyld adds the bytes at the place to the addend
            addend += int.from_bytes(obj[target.offset + offset:target.offset + offset + nbytes], "little")
        if not -bound <= addend <= bound:
            raise _bad(f"has a relocation in {s.name!r} with the addend {addend}, far outside the object")


def _check_eh_frame(obj: bytes, s: _Section) -> None:
    """The framing of an unwind table (registered with the unwinder at load): every record's
    length inside the section, every FDE's CIE pointer at a CIE start before it."""
    data = obj[s.offset:s.offset + s.size]
    pos, starts = 0, set()
    while pos < len(data):
        if len(data) - pos < 4:
            raise _bad(f"has an unwind table {s.name!r} that ends inside a record")
        (length,) = struct.unpack_from("<I", data, pos)
        if length == 0:
            pos += 4
            continue
        if length == 0xFFFFFFFF or length < 4 or length > len(data) - pos - 4:
            raise _bad(f"has an unwind table {s.name!r} with a record of bad length at {pos}")
        (cie_ptr,) = struct.unpack_from("<I", data, pos + 4)
        if cie_ptr == 0:
            starts.add(pos)
        elif pos + 4 - cie_ptr not in starts:
            raise _bad(f"has an unwind table {s.name!r} whose record at {pos} points to no CIE")
        pos += 4 + length


def check_object(obj: bytes, functions: list[str]) -> list[str]:
    """Check that ``obj`` is an ELF64 little-endian relocatable object for this host's machine
    that ember could have written: header and section table consistent and inside the file,
    string tables NUL-terminated, symbol tables, relocations and unwind tables in bounds, no
    load-time code (constructor/destructor sections, ``.init``/``.fini``, IFUNC or TLS
    symbols), every name in ``functions`` a defined global function in an executable section,
    and every imported symbol on :data:`ALLOWED_IMPORTS`. Returns the imported symbols; raises
    ModelFormatError naming the first problem."""
    machine = host_machine()
    secs = _sections(obj)
    assert machine is not None  # _sections rejects other hosts
    _check_load_time_code(secs)
    symtabs: dict[int, list[_Symbol]] = {}
    for s in secs:
        if s.type == _SHT_DYNSYM:
            raise _bad("has a dynamic symbol table (a relocatable object has none)")
        if s.type == _SHT_SYMTAB:
            symtabs[s.index] = _symbols(obj, secs, s)
    if len(symtabs) != 1:
        raise _bad(f"has {len(symtabs)} symbol tables, not one")
    for s in secs:
        if s.type in (_SHT_RELA, _SHT_REL):
            _check_relocations(obj, secs, s, symtabs, machine)
        elif s.name == ".eh_frame":
            _check_eh_frame(obj, s)
    (syms,) = symtabs.values()
    defined = {}
    imports: list[str] = []
    for sym in syms[1:]:
        if sym.bind not in (_STB_GLOBAL, _STB_WEAK) or not sym.name:
            continue
        if sym.shndx == _SHN_UNDEF:
            imports.append(sym.name)
        else:
            defined[sym.name] = sym
    for name in functions:
        sym = defined.get(name)
        if sym is None or sym.type != _STT_FUNC or not 0 < sym.shndx < len(secs) \
                or not secs[sym.shndx].flags & _SHF_EXECINSTR:
            raise _bad(f"does not define the function {name} (a global function in a code section)")
    for name in imports:
        if name not in ALLOWED_IMPORTS:
            raise _bad(f"imports the symbol {name!r}, which is not one of the math and runtime routines ember's "
                       "code calls")
    return imports


def undefined_symbols(obj: bytes) -> list[str]:
    """Names of the global symbols that the ELF64 little-endian relocatable object ``obj`` uses
    but does not define (in symbol-table order). Returns an empty list for anything that is not
    a well-formed relocatable object for this host."""
    try:
        secs = _sections(obj)
        names: list[str] = []
        for s in secs:
            if s.type == _SHT_SYMTAB:
                names.extend(x.name for x in _symbols(obj, secs, s)[1:]
                             if x.shndx == _SHN_UNDEF and x.bind in (_STB_GLOBAL, _STB_WEAK) and x.name)
        return names
    except ModelFormatError:
        return []
