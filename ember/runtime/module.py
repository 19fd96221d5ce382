"""Modules and callable functions.

A :class:`Module` holds compiled functions; ``module(...)`` calls its main function,
``module.get_function(name)`` any other one. ``get_source("ir" | "llvm" | "asm")`` prints the loop
IR, the LLVM IR and the assembly. GPU builds return a host module whose ``imported_modules[0]``
is the device module.

Calling a function checks every argument before any code runs: the count, each array's device,
dtype, number of dimensions and each dimension (constant, or consistent with the other
arguments for symbolic sizes). Errors name the argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ArgumentError, EmberError
from .ndarray import NDArray
from .size_expr import compile_tree


class Function:
    """A compiled function with argument checking. Call it with arrays (and scalar sizes)."""

    def __init__(
        self,
        sig: dict[str, Any],
        invoke: Callable[[list[int], list[int | float]], int],
        device_kind: str,
        module: Module,
    ):
        self.sig = sig
        self.name: str = sig["name"]
        self._invoke = invoke
        self._device_kind = device_kind
        self._module = module
        self._params = sig["params"]
        self._scalar_names = [s["name"] for s in sig["scalars"]]
        self._nparams = len(self._params)
        # derived dimensions (``n + 4``): (argument, dimension, size function, printed form)
        self._derived: list[tuple[int, int, Callable[[Any], int], str]] = []
        for k, p in enumerate(self._params):
            if p["kind"] != "buffer":
                continue
            for d, tree in enumerate(p.get("shape_exprs") or ()):
                if tree is not None and not isinstance(p["shape"][d], int) and not p["shape_is_var"][d]:
                    self._derived.append((k, d, compile_tree(tree), str(p["shape"][d])))

    def __call__(self, *args: Any) -> None:
        if len(args) != self._nparams:
            names = ", ".join(p["name"] for p in self._params)
            raise ArgumentError(f"{self.name} takes {self._nparams} arguments ({names}), got {len(args)}")
        env: dict[str, int] = {}
        pointers: list[int] = []
        for k, (p, a) in enumerate(zip(self._params, args)):
            if p["kind"] == "scalar":
                if not isinstance(a, (int, np.integer)):
                    raise ArgumentError(f"argument {k} ({p['name']}) of {self.name} must be an integer, got {a!r}")
                prev = env.get(p["name"])
                if prev is not None and prev != int(a):
                    raise ArgumentError(
                        f"argument {k} ({p['name']}) of {self.name} is {int(a)} but the array shapes say {prev}"
                    )
                env[p["name"]] = int(a)
                continue
            pointers.append(self._check_array(k, p, a, env))
        scalars = []
        for name in self._scalar_names:
            if name not in env:
                raise ArgumentError(f"{self.name}: the size {name} is not determined by any argument")
            scalars.append(env[name])
        if self._derived:
            self._check_derived_dims(args, env, scalars)
        rc = self._invoke(pointers, scalars)
        if rc != 0:
            raise EmberError(f"{self.name} failed at run time (code {rc}): an assertion in the kernel did not hold")

    def _check_derived_dims(self, args: tuple[Any, ...], env: dict[str, int], scalars: list[int]) -> None:
        """Dimensions that are expressions of the sizes (``n + 4``) must match their value;
        ``scalars`` are the sizes in signature order (what the expression trees index)."""
        for k, d, fn, text in self._derived:
            p = self._params[k]
            expect = fn(scalars)
            got = int(tuple(args[k].shape)[d])
            if got != expect:
                sizes = ", ".join(f"{v} = {env[v]}" for vs in p.get("shape_vars", []) for v in vs if v in env)
                raise ArgumentError(
                    f"argument {k} ({p['name']}) of {self.name}: dimension {d} is {got}, but {text} = {expect} "
                    f"(from {sizes or 'the other arguments'})"
                )

    def _check_array(self, k: int, p: dict[str, Any], a: Any, env: dict[str, int]) -> int:
        where = f"argument {k} ({p['name']}) of {self.name}"
        if not isinstance(a, NDArray):
            if isinstance(a, np.ndarray) and self._device_kind == "cpu":
                if not a.flags.c_contiguous:
                    raise ArgumentError(
                        f"{where} is a NumPy array that is not C-contiguous: pass np.ascontiguousarray(x)"
                    )
                a = NDArray(a, _np_dtype(a, where), _cpu())
            elif hasattr(a, "__dlpack__"):
                from .ndarray import from_dlpack

                a = from_dlpack(a)
            else:
                raise ArgumentError(
                    f"{where} must be an ember NDArray (ember.nd.array(x, dev)), got {type(a).__name__}"
                )
        if a.device.kind != self._device_kind:
            raise ArgumentError(
                f"{where} is on {a.device} but {self.name} runs on {self._device_kind}: copy it with "
                f"ember.nd.array(x.numpy(), ember.{self._device_kind}(0))"
            )
        if a.dtype != p["dtype"]:
            raise ArgumentError(f"{where} has dtype {a.dtype}, expected {p['dtype']}")
        shape = a.shape
        if len(shape) != len(p["shape"]):
            raise ArgumentError(
                f"{where} has {len(shape)} dimension(s) {shape}, expected {len(p['shape'])}: {p['shape']}"
            )
        for d, (got, want) in enumerate(zip(shape, p["shape"])):
            if isinstance(want, int):
                if got != want:
                    raise ArgumentError(
                        f"{where} has shape {shape}, expected {tuple(p['shape'])} (dimension {d} is {got}, not {want})"
                    )
            elif p["shape_is_var"][d]:
                prev = env.setdefault(want, got)
                if prev != got:
                    raise ArgumentError(
                        f"{where}: dimension {d} ({want}) is {got}, but another argument gave {want} = {prev}"
                    )
        return a.data_ptr

    def __repr__(self) -> str:
        return f"<ember.Function {self.name}>"


def _cpu() -> Any:
    from .ndarray import cpu

    return cpu(0)


def _np_dtype(a: np.ndarray, where: str) -> Any:
    from ..ir.dtypes import dtype

    try:
        return dtype(a.dtype)
    except EmberError as exc:
        raise ArgumentError(f"{where} has NumPy dtype {a.dtype}, which ember does not support") from exc


class Module:
    """Compiled code: functions, sources, and imported device modules."""

    type_key = "module"

    def __init__(
        self,
        functions: dict[str, Function],
        sources: dict[str, Callable[[], str]],
        entry: str | None = None,
        imported: list[Module] | None = None,
    ):
        self._functions = functions
        self._sources = sources
        self.entry_name = entry or (next(iter(functions)) if functions else "")
        self.imported_modules: list[Module] = list(imported or [])

    def __call__(self, *args: Any) -> None:
        """Call the main function."""
        return self.get_function(self.entry_name)(*args)

    def get_function(self, name: str) -> Function:
        """The function called ``name``."""
        fn = self._functions.get(name)
        if fn is None:
            raise EmberError(f"module has no function {name!r} (it has: {', '.join(self._functions) or 'none'})")
        return fn

    def __getitem__(self, name: str) -> Function:
        return self.get_function(name)

    @property
    def function_names(self) -> list[str]:
        """Names of the functions in the module."""
        return list(self._functions)

    def get_source(self, fmt: str = "llvm") -> str:
        """The module's text in ``fmt``: ``"ir"`` (loop IR), ``"llvm"``, ``"asm"`` (and ``"ptx"``
        on CUDA)."""
        maker = self._sources.get(fmt)
        if maker is None:
            raise EmberError(
                f"source format {fmt!r} is not available for this module (available: {', '.join(self._sources)})"
            )
        return maker()

    def export_library(self, path: str) -> None:
        """Write a shared library that :func:`ember.runtime.load_module` loads without compiling."""
        raise EmberError(f"export_library is not supported for {self.type_key} modules")
