"""Which device a compiled model runs on: ``ember.compile(..., device=)``, ``ember.load(...,
device=)`` and ``Model.to(device)``.

A model compiled for a target runs on devices of that target's kind: a CPU target on
``ember.cpu(0)``, a ``cuda`` target on any NVIDIA GPU whose architecture can run the code, a
``rocm`` target on any AMD GPU of the code object's ``gfx`` model. Each GPU is used through its
primary context (CUDA) or as HIP's current device, made current on whichever thread calls, so
one model serves a thread pool on one GPU and PyTorch, CuPy and ember share the device's memory.

Every check here happens before any work and raises :class:`~ember.errors.DeviceError` naming
the device, what was found (the number of GPUs, their architecture) and the fix.
"""

from __future__ import annotations

import re

from ..errors import DeviceError
from ..runtime.ndarray import Device
from ..runtime.ndarray import device as make_device
from ..target import Target

_VENDOR = {"cuda": "NVIDIA", "rocm": "AMD"}
_DEVICE_STRING = re.compile(r"^\s*([a-z]+)\s*(?::\s*(\d+)|\(\s*(\d+)\s*\))?\s*$")


def as_device(dev: Device | str) -> Device:
    """``dev`` as a :class:`Device`: a Device, or a string ``"cpu"``, ``"cuda"``, ``"cuda:1"``,
    ``"rocm(0)"`` (PyTorch's spelling and ember's printed one). Raises DeviceError otherwise."""
    if isinstance(dev, Device):
        if isinstance(dev.index, bool) or not isinstance(dev.index, int) or dev.index < 0:
            raise DeviceError(f"device index {dev.index!r} of {dev.kind} is not a non-negative integer")
        return dev
    if isinstance(dev, str):
        m = _DEVICE_STRING.match(dev)
        if m is not None:
            index = m.group(2) or m.group(3)
            return make_device(m.group(1), int(index) if index else 0)
    raise DeviceError(f"device {dev!r} is not a device: pass ember.cpu(), ember.cuda(i), ember.rocm(i) "
                      "or a string such as 'cuda:1'")


def kind_of_target(target: str | Target) -> str:
    """The device kind (``"cpu"``, ``"cuda"``, ``"rocm"``) that code for ``target`` runs on."""
    kind = Target(target).kind
    return "cpu" if kind == "llvm" else kind


def target_for(dev: Device) -> str:
    """The default target for a device: ``"llvm"`` (this CPU), ``"cuda"`` or ``"rocm"``."""
    return "llvm" if dev.kind == "cpu" else dev.kind


def check_exists(dev: Device) -> None:
    """Raise DeviceError unless ``dev`` is present: the CPU is ``cpu(0)``; a GPU index must be
    below the number of GPUs the driver finds (the message gives that number), and a machine
    without the driver says so."""
    if dev.kind == "cpu":
        if dev.index != 0:
            raise DeviceError(f"{dev} does not exist: there is one CPU device, cpu(0)")
        return
    count = dev.driver().device_count()  # DeviceError naming the missing driver
    if dev.index >= count:
        vendor = _VENDOR[dev.kind]
        found = "no" if count == 0 else str(count)
        hint = f"use an index from 0 to {count - 1}" if count else f"run on a machine with an {vendor} GPU"
        raise DeviceError(f"{dev} does not exist: the driver found {found} {vendor} GPU(s) on this machine; {hint}")


def cuda_arch_of(dev: Device) -> str:
    """``sm_XY`` of an NVIDIA GPU (asks the driver)."""
    return str(dev.driver().device_attributes(dev.index)["arch"])


def cuda_code_runs_on(code_arch: str, device_arch: str) -> bool:
    """True when a cubin built for ``code_arch`` loads on a GPU of ``device_arch``: the same major
    version and a minor version not above the device's; an architecture-specific build
    (``sm_90a``) only on that very architecture."""
    m_code = re.fullmatch(r"sm_(\d+)(\d)(a?)", code_arch)
    m_dev = re.fullmatch(r"sm_(\d+)(\d)a?", device_arch)
    if m_code is None or m_dev is None:
        return code_arch == device_arch
    if m_code.group(3):
        return code_arch[:-1] == device_arch.rstrip("a")
    return m_code.group(1) == m_dev.group(1) and int(m_code.group(2)) <= int(m_dev.group(2))


def target_on(target: str, dev: Device) -> str:
    """``target`` completed for ``dev``: a CUDA target without ``-arch`` gets the device's
    architecture (the backend would otherwise take GPU 0's). Other targets are returned as given."""
    t = Target(target)
    if t.kind == "cuda" and not t.opt("arch"):
        return str(Target(f"{t} -arch={cuda_arch_of(dev)}"))
    return target


def check_placement(target: str, dev: Device | str, check_device: bool = True) -> Device:
    """The device ``dev`` checked for a model compiled for ``target``: same kind, present (with
    ``check_device``), and for CUDA an architecture that runs the code. Returns it as a Device.

    Raises DeviceError naming the target, the device and the fix."""
    d = as_device(dev)
    want = kind_of_target(target)
    if d.kind != want:
        runs = "the CPU" if want == "cpu" else f"{_VENDOR[want]} GPUs"
        fix = f"ember.compile(..., target={target_for(d)!r}, device={_spelled(d)})"
        raise DeviceError(f"this model was compiled for target {target!r}, whose code runs on {runs}, so it cannot "
                          f"run on {d}: compile it for that device with {fix}")
    if not check_device:
        return d
    check_exists(d)
    if d.kind == "cuda":
        code_arch = Target(target).opt("arch")
        have = cuda_arch_of(d)
        if code_arch and not cuda_code_runs_on(code_arch, have):
            raise DeviceError(f"this model's kernels were built for {code_arch}, which {d} ({have}) cannot run: "
                              f"compile it again with device={_spelled(d)} (or target='cuda -arch={have}')")
    return d


def _spelled(d: Device) -> str:
    return f"ember.{d.kind}({d.index})"


def place(target: str | None, dev: Device | str | None) -> tuple[str, Device | None]:
    """The target and device of ``ember.compile(..., target=, device=)``: without a device, the
    target as given (``"llvm"`` when None) and no device; with one, the target defaults to the
    device's kind, a CUDA target gets the device's architecture, and the device is checked
    (:func:`check_placement`) before anything is compiled."""
    if dev is None:
        return (target if target is not None else "llvm"), None
    d = as_device(dev)
    t = target if target is not None else target_for(d)
    check_placement(t, d, check_device=False)  # the kind first: no driver is needed to say that
    check_exists(d)
    t = target_on(t, d)
    return t, check_placement(t, d)
