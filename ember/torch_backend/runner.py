"""Calling a compiled ember model with torch tensors: no copies, no host waits.

:class:`TorchRunner` is the fast path of every call the torch backend makes. Inputs are read in
place (``Tensor.data_ptr()``: the same memory DLPack would hand over, without building a capsule
per call); outputs are allocated by PyTorch (``torch.empty`` on the model's device, so CUDA
outputs come from torch's caching allocator) and written by the model through
:meth:`~ember.model.executor.ExecutionContext.run_addresses`; on CUDA the work is queued on
``torch.cuda.current_stream()`` and nothing waits on the host, exactly as a torch operator
behaves. ember and torch share the device's primary context (``ember.runtime.cuda_driver``), so
their addresses are interchangeable.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from ..errors import ArgumentError
from ..model.model import Model

TORCH_DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}


def torch_device_of(model: Model) -> torch.device:
    """The torch device a model runs on."""
    dev = model.device
    return torch.device("cpu") if dev.kind == "cpu" else torch.device("cuda", dev.index)


class TorchRunner:
    """One static ember model called with torch tensors (see the module doc).

    ``positions[i]`` is the index, among the tensors a call passes, of the model's i-th input:
    ``k`` for an input named ``input_<k>`` (what the backend's export names them; inputs the
    exporter or ember dropped as unused are not read), else ``i``."""

    def __init__(self, model: Model):
        self.model = model
        self.device = torch_device_of(model)
        self._cuda = self.device.type == "cuda"
        names = model.input_names
        exported = all(n.startswith("input_") and n[6:].isdigit() for n in names)
        self.positions = [int(n[6:]) for n in names] if exported else list(range(len(names)))
        self._in_dtypes = [TORCH_DTYPES[s.dtype] for s in model.inputs]
        self._in_shapes = [torch.Size(s.shape) for s in model.inputs]
        self._outs = [(tuple(s.shape), TORCH_DTYPES[s.dtype]) for s in model.outputs]
        self.names = [s.name for s in model.inputs]
        self._local = threading.local()

    def __call__(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The model's outputs for the call's ``tensors`` (new torch tensors on the model's
        device). Raises :class:`~ember.errors.ArgumentError` for a tensor of another dtype,
        shape or device."""
        ptrs = []
        keep = []
        dev = self.device
        for pos, dt, shape, name in zip(self.positions, self._in_dtypes, self._in_shapes, self.names):
            t = tensors[pos]
            if t.dtype != dt or t.shape != shape or t.device != dev:
                raise ArgumentError(
                    f"input {name!r} is a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}; the compiled "
                    f"model takes {dt} {tuple(shape)} on {dev}")
            if not t.is_contiguous() or t.data_ptr() % 16:
                t = t.contiguous() if not t.is_contiguous() else t.clone()  # ember reads compact, aligned memory
                keep.append(t)
            ptrs.append(t.data_ptr())
        outs = [torch.empty(shape, dtype=dt, device=dev) for shape, dt in self._outs]
        ctx = getattr(self._local, "ctx", None)
        if ctx is None:  # this thread's execution context on the runner's device, looked up once
            ctx = self._local.ctx = self.model.context()
        if self._cuda:
            stream = _raw_stream(dev.index)
            ctx.run_addresses(ptrs, [o.data_ptr() for o in outs], stream, self.model.cuda_graphs)
        else:
            ctx.run_addresses(ptrs, [o.data_ptr() for o in outs])
        del keep  # the copies are read on the stream: torch's allocator orders their reuse after it
        return outs


def _current_stream_handle(index: int) -> int:
    return torch.cuda.current_stream(index).cuda_stream


#: The ``cudaStream_t`` of torch's current stream on a device, as an int: the raw getter
#: inductor's generated code calls (no Stream object per call), or the public API.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _current_stream_handle


def check_same_device(tensors: list[Any]) -> torch.device:
    """The one device of ``tensors`` (CPU when there are none)."""
    devs = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devs) > 1:
        raise ArgumentError(f"the graph's tensors are on several devices ({', '.join(sorted(map(str, devs)))})")
    return next(iter(devs)) if devs else torch.device("cpu")
