"""What the CPU schedules know of a microarchitecture beyond its ISA features.

A :class:`~ember.target.Target` gives the LLVM CPU name (``znver4``, ``sapphirerapids``: the
host's, or ``-mcpu=``) and the vector features; a schedule also needs a few properties that the
features do not tell: the level-1 data cache (size and ways: which of a tile's operand rows
evict each other), the per-core L2, and whether 512-bit operations run at full width or are
split into two 256-bit halves ("double-pumped": AMD Zen 4 executes a 512-bit FMA on both of its
256-bit FMA pipes, so it retires one 512-bit FMA per cycle where Zen 5 and the Xeons retire two).
:func:`cpu_arch` looks them up in a small table keyed on the LLVM CPU name; a CPU missing from
it gets :data:`GENERIC` (the properties the schedules were first tuned with).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..target import Target


@dataclass(frozen=True)
class CPUArch:
    """Cache and execution properties of one CPU microarchitecture (per core)."""

    #: level-1 data cache: bytes and ways (its sets repeat every ``l1d_bytes / l1d_ways`` bytes)
    l1d_bytes: int = 48 * 1024
    l1d_ways: int = 12
    #: level-2 cache, bytes
    l2_bytes: int = 1 << 20
    #: True when 512-bit vector operations are split into two 256-bit halves (AMD Zen 4)
    avx512_double_pumped: bool = False

    @property
    def l1d_set_period(self) -> int:
        """Bytes after which addresses map to the same L1 set again (size / ways)."""
        return self.l1d_bytes // max(1, self.l1d_ways)


#: A CPU the table does not name (the schedules' first tuning: Zen 5, Sapphire Rapids).
GENERIC = CPUArch()

_ZEN4 = CPUArch(l1d_bytes=32 * 1024, l1d_ways=8, l2_bytes=1 << 20, avx512_double_pumped=True)
_ZEN5 = CPUArch(l1d_bytes=48 * 1024, l1d_ways=12, l2_bytes=1 << 20)
_ZEN = CPUArch(l1d_bytes=32 * 1024, l1d_ways=8, l2_bytes=512 * 1024)
_SKX = CPUArch(l1d_bytes=32 * 1024, l1d_ways=8, l2_bytes=1 << 20)
_ICX = CPUArch(l1d_bytes=48 * 1024, l1d_ways=12, l2_bytes=1280 * 1024)
_SPR = CPUArch(l1d_bytes=48 * 1024, l1d_ways=12, l2_bytes=2 << 20)
_HSW = CPUArch(l1d_bytes=32 * 1024, l1d_ways=8, l2_bytes=256 * 1024)

#: LLVM CPU name -> properties.
TABLE: dict[str, CPUArch] = {
    "znver4": _ZEN4,
    "znver5": _ZEN5,
    "znver1": _ZEN, "znver2": _ZEN, "znver3": _ZEN,
    "skylake-avx512": _SKX, "cascadelake": _SKX, "cooperlake": _SKX,
    "icelake-server": _ICX, "icelake-client": _ICX, "tigerlake": _ICX, "rocketlake": _ICX,
    "sapphirerapids": _SPR, "emeraldrapids": _SPR, "graniterapids": _SPR, "graniterapids-d": _SPR,
    "haswell": _HSW, "broadwell": _HSW, "skylake": _HSW,
}


def cpu_arch(target: Target | str) -> CPUArch:
    """The properties of ``target``'s CPU (its LLVM CPU name: ``-mcpu=`` or the host's);
    :data:`GENERIC` for a CPU the table does not name and for non-CPU targets."""
    t = Target(target)
    if t.kind != "llvm":
        return GENERIC
    return TABLE.get(t.mcpu, GENERIC)
