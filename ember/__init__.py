"""ember: an open deep-learning compiler. Tensor expressions and schedules to native code for
CPUs (LLVM), NVIDIA GPUs (NVPTX) and AMD GPUs (AMDGPU)."""

from . import (  # noqa: E402
    nd,
    te,
    tune,  # noqa: E402  (a callable package: ember.tune(model, target, trials=...))
)
from .backends.cpu.module import load_module  # noqa: E402
from .driver import build, compile, load  # noqa: E402
from .errors import (  # noqa: E402
    ArgumentError,
    CodegenError,
    DeviceError,
    EmberError,
    EvaluationError,
    FrontendError,
    GraphError,
    InvalidConfig,
    LayoutError,
    LoweringError,
    ModelFormatError,
    OpError,
    PassError,
    ScheduleError,
    TargetError,
    ToolchainError,
    TuningError,
    TypeMismatchError,
    UnsupportedOpError,
)
from .lowering import lower  # noqa: E402
from .model import Model, TensorSpec  # noqa: E402
from .runtime import Device, Module, NDArray, cpu, cuda, device, rocm  # noqa: E402
from .target import Target  # noqa: E402
from .tune import tune_kernel  # noqa: E402
from .version import __version__  # noqa: E402, F401

__all__ = [
    "ArgumentError",
    "CodegenError",
    "Device",
    "DeviceError",
    "EmberError",
    "EvaluationError",
    "FrontendError",
    "GraphError",
    "InvalidConfig",
    "LayoutError",
    "LoweringError",
    "Model",
    "ModelFormatError",
    "Module",
    "NDArray",
    "OpError",
    "PassError",
    "ScheduleError",
    "Target",
    "TargetError",
    "TensorSpec",
    "ToolchainError",
    "TuningError",
    "TypeMismatchError",
    "UnsupportedOpError",
    "__version__",
    "build",
    "compile",
    "cpu",
    "cuda",
    "device",
    "from_torch",
    "load",
    "load_module",
    "lower",
    "nd",
    "rocm",
    "te",
    "tune",
    "tune_kernel",
]


def from_torch(module: object, example_inputs: object, **options: object) -> object:
    """A ``torch.nn.Module`` compiled by ember for ``example_inputs``: a callable taking and
    returning torch tensors (``ember.torch_backend.from_torch``; options ``target``,
    ``precision``, ``cuda_graphs``, ``fallback``, ``max_variants``). Imports torch (ember itself
    does not); ``torch.compile(module, backend="ember")`` is the same backend. See docs/torch.md."""
    try:
        from .torch_backend import from_torch as _from_torch
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise EmberError("ember.from_torch needs PyTorch, which is not installed: pip install 'ember[torch]' "
                         "(or torch)") from exc
    return _from_torch(module, example_inputs, **options)
