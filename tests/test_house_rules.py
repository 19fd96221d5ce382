"""House rules that hold themselves: no function shadows a module, no eval/exec/pickle anywhere
in ember, no broad ``except Exception`` outside the two finalizers that run at interpreter
shutdown, every public exception importable from ``ember``. (The layering is checked by
``lint-imports`` in ``make test``.)"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import types
from pathlib import Path

import ember
from ember import errors

ROOT = Path(ember.__file__).parent
#: Handlers of ``Exception`` allowed: destructors/finalizers that may run at interpreter
#: shutdown, when any module global can be None.
BROAD_EXCEPT_ALLOWED = {"runtime/dlpack.py", "runtime/gpu_array.py"}
#: single functions allowed a broad ``except``, each for its stated reason
BROAD_EXCEPT_IN_FUNCTION = {
    # a forked child that builds part of a CPU module: any failure is sent to the parent as
    # "rebuild this part serially", where the error is raised and reported
    ("backends/cpu/codegen.py", "child"),
}


def _sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "hipify" not in p.parts)


def test_no_function_shadows_a_module() -> None:
    shadowed = []

    def walk(pkg: types.ModuleType) -> None:
        for info in pkgutil.iter_modules(pkg.__path__):
            if info.name == "__main__":
                continue
            mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
            attr = getattr(pkg, info.name, None)
            if attr is not None and not isinstance(attr, types.ModuleType):
                shadowed.append(f"{pkg.__name__}.{info.name} is a {type(attr).__name__}")
            if info.ispkg:
                walk(mod)

    walk(ember)
    assert not shadowed, shadowed


def test_no_eval_exec_or_pickle() -> None:
    found = []
    for path in _sources() + sorted((ROOT / "hipify").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} calls {node.func.id}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
                if any(n and n.split(".")[0] in ("pickle", "cPickle", "dill", "marshal") for n in names):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports a pickle module")
    assert not found, found


def test_no_broad_except_that_can_hide_a_bug() -> None:
    found = []
    for path in _sources():
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text())
        owner = {}  # handler -> the innermost function around it
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ExceptHandler):
                        owner[node] = fn.name  # inner functions come later in the walk and win
        for node in ast.walk(tree):
            if not isinstance(node, ast.ExceptHandler):
                continue
            broad = node.type is None or (isinstance(node.type, ast.Name) and node.type.id in ("Exception",
                                                                                                 "BaseException"))
            if broad and rel not in BROAD_EXCEPT_ALLOWED and (rel, owner.get(node)) not in BROAD_EXCEPT_IN_FUNCTION:
                found.append(f"{rel}:{node.lineno}")
    assert not found, found


def test_every_public_exception_is_importable_from_ember() -> None:
    public = {n for n, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)}
    missing = {n for n in public if getattr(ember, n, None) is not getattr(errors, n)}
    assert not missing, missing
