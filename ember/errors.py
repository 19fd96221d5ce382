"""ember's exceptions: every error a user can cause is one of these, with a message that names
the thing at fault and how to fix it."""

from __future__ import annotations


class EmberError(Exception):
    """Base of every error ember raises on purpose."""


class TypeMismatchError(EmberError, TypeError):
    """An expression combines operands whose data types cannot be combined."""


class ScheduleError(EmberError):
    """A schedule primitive was used in a way that cannot be honoured (names stage, axis, fix)."""


class LoweringError(EmberError):
    """A schedule could not be lowered to loop IR (unbound variable, bad bounds, ...)."""


class CodegenError(EmberError):
    """Loop IR could not be turned into valid LLVM IR, or LLVM rejected what ember produced."""


class TargetError(EmberError, ValueError):
    """A target string is malformed or names a target that is not supported."""


class ToolchainError(EmberError):
    """A tool ember needs (ld.lld, ptxas, cc, a GPU driver) is missing or too old."""


#: Driver errors after which a process's CUDA context (or HIP device) stays unusable: every later
#: call fails with the same error until the process ends (a kernel faulted).
STICKY_DEVICE_ERRORS = (
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_ASSERT", "hipErrorIllegalAddress", "hipErrorLaunchFailure", "hipErrorAssert",
)


class DeviceError(EmberError):
    """A device (GPU driver, device index) is unavailable or a driver call failed."""

    @property
    def context_lost(self) -> bool:
        """Whether the error is one of :data:`STICKY_DEVICE_ERRORS`: the process cannot use the
        device any more (start a new process)."""
        text = str(self)
        return any(name in text for name in STICKY_DEVICE_ERRORS)


class ArgumentError(EmberError, ValueError):
    """A compiled function was called with an argument of the wrong shape, dtype, device or count."""


class PassError(EmberError, ValueError):
    """A pass pipeline was configured wrongly: a bad :class:`~ember.transform.PassContext`
    argument, an unknown or required pass named in ``disabled_passes``, or a malformed pass."""



class FrontendError(EmberError):
    """A model cannot be imported (malformed ONNX, an unsupported construct)."""


class ModelFormatError(FrontendError):
    """A file is not what it claims to be: an ONNX file that is truncated or not protobuf, or a
    saved ember model, compiled module or cache entry from another version, truncated, edited or
    crafted. Names the file and what is wrong."""


class UnsupportedOpError(FrontendError):
    """The model uses operators ember does not implement; ``ops`` lists every one of them."""

    def __init__(self, ops: dict[str, int]):
        self.ops = dict(ops)
        listing = ", ".join(f"{k} (x{v})" for k, v in sorted(ops.items()))
        super().__init__(f"the model uses {len(ops)} operator type(s) ember does not support: {listing}")


class GraphError(EmberError):
    """A model's graph is inconsistent (shapes that do not match, a missing value...)."""


class OpError(EmberError):
    """An operator was given attributes or inputs it cannot honour (names node and fix)."""


class EvaluationError(EmberError):
    """A te program cannot be evaluated by the NumPy reference (:func:`ember.te.evaluate`): an
    unsupported node kind, data type or math function, a missing input, or a symbolic size no
    input binds. The message names the node."""


class InvalidConfig(EmberError, ValueError):
    """A configuration is not a legal point of its knob space (a check failed, a knob is unknown
    or has a value the space does not hold); raised before anything is built."""


def _proto_errors() -> tuple[type[BaseException], ...]:
    """What reading a protobuf message (an ONNX model) can raise for bad bytes."""
    errors: list[type[BaseException]] = [ValueError, TypeError, OSError, RuntimeError, KeyError, IndexError,
                                         UnicodeDecodeError, MemoryError, OverflowError]
    try:
        from google.protobuf.message import DecodeError
    except ImportError:  # no protobuf: no ONNX either, nothing more to catch
        return tuple(errors)
    return (*errors, DecodeError)


#: The foreign exceptions that mean "these bytes are not a readable ONNX model"; the frontend
#: turns them into :class:`ModelFormatError` at its boundary.
PROTO_ERRORS = _proto_errors()


class LayoutError(EmberError):
    """A data layout is malformed (a layout string such as ``'NCHW16c'`` that does not parse) or
    does not fit the tensor or node it is asked for (primal axes that differ from the tensor's
    rank, layouts of different primal axes). Names the layout, the node and what is wrong."""


class TuningError(EmberError, ValueError):
    """Tuning cannot start or go on: a bad argument of ``ember.tune``/``ember tune`` (trials, time
    budget, target, workers), an unreachable Dask scheduler, or a records file that cannot be
    read or written. The message names the thing at fault and the fix."""
