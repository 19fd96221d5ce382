"""Loading runs nothing from the file: saved models, module parts and cache entries are data,
checked completely before anything uses them.

Every crafted file here has its manifest digests recomputed after the edit, so only the
content checks can catch it: launch sizes holding Python code or malformed expression trees,
object code with constructors or imports ember never emits, damaged section tables, plans that
do not match their weights or kernels, absurd memory plans. Each is a ModelFormatError naming
the problem, never a foreign exception and never a crash. Also: saving needs no C compiler,
GPU kernels are cached, unknown targets fail first, and ``ember.load(path, rebuild=True)``
uses none of the file's code.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

import ember
from ember import te
from ember.backends.cpu.codegen import init_llvm, target_machine
from ember.errors import ModelFormatError, TargetError
from ember.ir import expr as E
from ember.runtime.size_expr import check_tree, compile_grid, compile_tree, evaluate, to_tree
from ember.target import Target

onnx = pytest.importorskip("onnx", reason="the saved-model tests build models with onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

GPU = "cuda -arch=sm_90"


def _model_bytes() -> bytes:
    rng = np.random.default_rng(7)
    nodes = [h.make_node("Add", ["x", "b"], ["y"]), h.make_node("Relu", ["y"], ["z"]),
             h.make_node("MatMul", ["z", "w"], ["o"]), h.make_node("ReduceSum", ["o"], ["r"], keepdims=0)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4, 8])],
                     [h.make_tensor_value_info("o", T.FLOAT, None), h.make_tensor_value_info("r", T.FLOAT, None)],
                     [nh.from_array(rng.standard_normal((4, 8)).astype(np.float32), "b"),
                      nh.from_array(rng.standard_normal((8, 5)).astype(np.float32), "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CPU and a GPU model of the same ONNX graph, saved once for the module's tests."""
    root = tmp_path_factory.mktemp("saved")
    out = {}
    for name, target in (("cpu", "llvm"), ("gpu", GPU)):
        path = root / f"{name}.ember"
        ember.compile(_model_bytes(), target=target, use_cache=False).save(path)
        out[name] = path
    return out


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist() if n != "manifest.json"}


def _write(path: Path, members: dict[str, bytes], fmt: str = "ember-model/2") -> Path:
    """A saved model of ``members`` with a correct manifest (digests recomputed)."""
    manifest = {"format": fmt, "ember": ember.__version__,
                "members": {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in members.items()}}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for n, d in members.items():
            z.writestr(n, d)
    return path


def _edited(src: Path, dst: Path, edit: Callable[[dict[str, bytes]], None]) -> Path:
    members = _members(src)
    edit(members)
    return _write(dst, members)


def _edit_json(member: str, change: Callable[[dict], None]) -> Callable[[dict[str, bytes]], None]:
    def edit(members: dict[str, bytes]) -> None:
        data = json.loads(members[member])
        change(data)
        members[member] = json.dumps(data).encode()

    return edit


def _x() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)


# -- (a) launch sizes are expression trees, never code --------------------------------------------
def test_size_trees_evaluate_like_the_expressions() -> None:
    n, m = te.var("n"), te.var("m")
    index = {n: 0, m: 1}
    cases = [((n + 63) // 64, lambda a, b: (a + 63) // 64), (n * 4 - m, lambda a, b: a * 4 - b),
             (E.Max(n, m, n.dtype) % 7, lambda a, b: max(a, b) % 7),
             (E.Min(n + 1, E.const(3), n.dtype), lambda a, b: min(a + 1, 3))]
    for e, ref in cases:
        tree = to_tree(e, index)
        check_tree(tree, 2, "test")
        for a, b in ((1, 2), (64, 65), (1000, 3)):
            assert evaluate(tree, [a, b]) == ref(a, b)
    grid = compile_grid([to_tree((n + 63) // 64, index), ["const", 1], ["const", 1]])
    assert grid([65, 0]) == (2, 1, 1)
    assert compile_grid([["const", 3], ["const", 2], ["const", 1]])([]) == (3, 2, 1)
    assert compile_tree(["select", ["lt", ["var", 0], ["const", 5]], ["const", 1], ["var", 0]])([9]) == 9
    assert compile_tree(["truncdiv", ["const", -7], ["var", 0]])([2]) == -3
    with pytest.raises(ember.ArgumentError, match="divides by zero"):
        compile_tree(["floordiv", ["const", 7], ["var", 0]])([0])


_DEEP: list = ["var", 0]
for _ in range(100):
    _DEEP = ["add", _DEEP, ["const", 1]]

BAD_TREES = {
    "python source": ("__import__('os').system('touch MARKER')", "not an expression node"),
    "unknown op": (["call", ["const", 1]], "unknown operation"),
    "arity": (["add", ["const", 1]], "two operands"),
    "var out of range": (["var", 5], "size 5 does not exist"),
    "negative var": (["var", -1], "does not exist"),
    "big constant": (["const", 2**70], "out of range"),
    "float constant": (["const", 1.5], "one integer"),
    "bool constant": (["const", True], "one integer"),
    "zero divisor": (["floordiv", ["var", 0], ["const", 0]], "by the constant 0"),
    "too deep": (_DEEP, "nested deeper"),
    "string op": (["__import__", "os"], "unknown operation"),
}


@pytest.mark.parametrize("case", sorted(BAD_TREES))
def test_malformed_trees_are_refused(case: str) -> None:
    tree, message = BAD_TREES[case]
    with pytest.raises(ModelFormatError, match=message):
        check_tree(tree, 1, "the grid")


@pytest.mark.parametrize("where", ["grid", "workspace", "shape_exprs"])
@pytest.mark.parametrize("case", ["python source", "unknown op", "var out of range", "too deep"])
def test_gpu_model_with_code_in_a_launch_size_does_not_load(saved, tmp_path, monkeypatch, where, case) -> None:
    monkeypatch.chdir(tmp_path)
    tree = BAD_TREES[case][0]

    def change(meta: dict) -> None:
        plan = meta["plans"][0]
        if where == "grid":
            plan["kernels"][0]["grid"][0] = tree
        elif where == "workspace":
            plan["workspaces"].append({"name": "w", "nbytes": tree})
        else:
            p = meta["sigs"][0]["params"][0]
            p["shape"][0], p["shape_exprs"][0] = "(n + 1)", tree

    path = _edited(saved["gpu"], tmp_path / "evil.ember", _edit_json("module/module.json", change))
    with pytest.raises(ModelFormatError, match="expression|does not exist|nested|unknown operation"):
        ember.load(path)
    assert not (tmp_path / "MARKER").exists()


def test_gpu_plan_fields_are_checked(saved, tmp_path) -> None:
    edits = {
        "block": (lambda m: m["plans"][0]["kernels"][0].update(block=[2048, 1, 1]), "block"),
        "threads": (lambda m: m["plans"][0]["kernels"][0].update(block=[64, 64, 1]), "threads"),
        "shared": (lambda m: m["plans"][0]["kernels"][0].update(shared_bytes=1 << 20), "shared_bytes"),
        "param type": (lambda m: m["plans"][0]["kernels"][0]["param_types"].__setitem__(0, "str"), "unknown type"),
        "arg index": (lambda m: m["plans"][0]["kernels"][0]["args"].__setitem__(0, ["arg", 99]), "arg 99"),
        "arg source": (lambda m: m["plans"][0]["kernels"][0]["args"].__setitem__(0, ["env", 0]), "arg|ws|scalar"),
        "step": (lambda m: m["plans"][0]["steps"].append(["launch", 7]), "step"),
        "kernel list": (lambda m: m["kernels"].append("other"), "kernel list"),
        "dtype": (lambda m: m["sigs"][0]["params"][0].update(dtype="float33"), "not an ember dtype"),
        "shape_is_var": (lambda m: m["sigs"][0]["params"][0].update(shape_is_var=[1, 0]), "bool"),
        "rank": (lambda m: m["sigs"][0]["params"][0].update(shape_vars=[[]]), "shape_vars"),
        "format": (lambda m: m.update(format="ember-gpu-module/1"), "format"),
    }
    for name, (change, message) in edits.items():
        path = _edited(saved["gpu"], tmp_path / f"{name}.ember", _edit_json("module/module.json", change))
        with pytest.raises(ModelFormatError, match=message):
            ember.load(path)


# -- (b) object code: no constructors, only allowlisted imports --------------------------------------
_CTOR = """
@.cmd = private constant [{n} x i8] c"{cmd}\\00"
declare i32 @system(ptr)
define internal void @ember_test_ctor() {{
  %r = call i32 @system(ptr @.cmd)
  ret void
}}
@llvm.global_ctors = appending global [1 x {{ i32, ptr, ptr }}]
    [{{ i32, ptr, ptr }} {{ i32 65535, ptr @ember_test_ctor, ptr null }}]
"""
_IMPORT = """
@.cmd = private constant [{n} x i8] c"{cmd}\\00"
declare i32 @system(ptr)
define void @ember_test_helper() {{
  %r = call i32 @system(ptr @.cmd)
  ret void
}}
"""


def _object_with(llvm_ir: str, extra: str, marker: Path) -> bytes:
    init_llvm()
    cmd = f"touch {marker}"
    mod = llvm.parse_assembly(llvm_ir + extra.format(n=len(cmd) + 1, cmd=cmd))
    mod.verify()
    return target_machine(Target("llvm")).emit_object(mod)


@pytest.mark.parametrize("extra, message", [(_CTOR, "init_array|constructors"), (_IMPORT, "'system'")])
def test_cpu_object_with_constructor_or_foreign_import_does_not_load(saved, tmp_path, extra, message) -> None:
    marker = tmp_path / "MARKER"
    members = _members(saved["cpu"])
    members["module/module.o"] = _object_with(members["module/module.ll"].decode(), extra, marker)
    path = _write(tmp_path / "evil.ember", members)
    with pytest.raises(ModelFormatError, match=message):
        ember.load(path)
    assert not marker.exists()


def test_cpu_module_file_with_constructor_does_not_load(tmp_path) -> None:
    from ember.backends.cpu.file import read_parts, write_parts

    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1, name="B")
    f = ember.build(te.create_schedule(B.op), [A, B], use_cache=False)
    f.export_library(str(tmp_path / "ok.so"))
    parts = read_parts(tmp_path / "ok.so")
    marker = tmp_path / "MARKER"
    parts["module.o"] = _object_with(parts["module.ll"].decode(), _CTOR, marker)
    write_parts(tmp_path / "evil.so", parts)
    with pytest.raises(ModelFormatError, match="init_array|ctors"):
        ember.load_module(str(tmp_path / "evil.so"))
    assert not marker.exists()


def _set_u64(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + value.to_bytes(8, "little") + data[offset + 8:]


def _set_u16(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + value.to_bytes(2, "little") + data[offset + 2:]


ELF_EDITS = {
    "section table outside": (lambda o: _set_u64(o, 0x28, len(o) * 2), "section table outside the file"),
    "shared object": (lambda o: _set_u16(o, 0x10, 3), "not a relocatable object"),
    "other machine": (lambda o: _set_u16(o, 0x12, 40), "ELF machine 40"),
    "section name table": (lambda o: _set_u16(o, 0x3E, 0xFFF), "section-name table"),
    "not elf": (lambda o: b"MZ" + o[2:], "not an ELF file"),
    "truncated": (lambda o: o[: len(o) // 2], "outside the file"),
}


@pytest.mark.parametrize("case", sorted(ELF_EDITS))
def test_damaged_object_is_refused(saved, tmp_path, case) -> None:
    edit, message = ELF_EDITS[case]
    members = _members(saved["cpu"])
    members["module/module.o"] = edit(members["module/module.o"])
    with pytest.raises(ModelFormatError, match=message):
        ember.load(_write(tmp_path / "bad.ember", members))


def test_section_bounds_are_checked(saved, tmp_path) -> None:
    members = _members(saved["cpu"])
    obj = members["module/module.o"]
    shoff = int.from_bytes(obj[0x28:0x30], "little")
    # section 1's size (field at +32 of its header) far past the end of the file
    members["module/module.o"] = _set_u64(obj, shoff + 64 + 32, 1 << 40)
    with pytest.raises(ModelFormatError, match="section 1"):
        ember.load(_write(tmp_path / "bad.ember", members))


def _relocation_edits(obj: bytes) -> dict[str, tuple[bytes, str]]:
    """Edits of the first relocation of the code's relocation section (x86-64 objects: the large
    code model's ``.rela.ltext``)."""
    from ember.backends.cpu import elf

    secs = elf._sections(obj)
    rela = next(x for x in secs if x.name in (".rela.ltext", ".rela.text") and x.size)
    text = next(x for x in secs if x.name == rela.name[len(".rela"):])
    at = rela.offset
    info = int.from_bytes(obj[at + 8:at + 16], "little")
    sym = info >> 32
    return {
        "type": (_set_u64(obj, at + 8, (sym << 32) | 10), "type 10"),  # R_X86_64_32
        "symbol": (_set_u64(obj, at + 8, (0xFFFF << 32) | (info & 0xFFFFFFFF)), "symbol 65535"),
        "offset": (_set_u64(obj, at, text.size - 2), "outside"),
        "addend": (_set_u64(obj, at + 16, 1 << 40), "addend"),
        "flags": (_set_u64(obj, int.from_bytes(obj[0x28:0x30], "little") + 64 * text.index + 8, 0x806),
                  "flags 0x806"),
    }


@pytest.mark.parametrize("case", ["type", "symbol", "offset", "addend", "flags"])
def test_relocations_and_section_flags_are_checked(saved, tmp_path, case) -> None:
    from ember.backends.cpu import elf

    if elf.host_machine() != elf.EM_X86_64:
        pytest.skip("the edits are written for x86-64 relocations")
    members = _members(saved["cpu"])
    data, message = _relocation_edits(members["module/module.o"])[case]
    members["module/module.o"] = data
    with pytest.raises(ModelFormatError, match=message):
        ember.load(_write(tmp_path / "rel.ember", members))


# -- (c) saving needs no C compiler ------------------------------------------------------------------
def test_save_and_load_without_a_c_compiler(tmp_path, monkeypatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CC", raising=False)
    assert shutil.which("cc") is None and shutil.which("gcc") is None
    cpu = ember.compile(_model_bytes(), target="llvm", use_cache=False)
    gpu = ember.compile(_model_bytes(), target=GPU, use_cache=False)
    cpu.save(tmp_path / "cpu.ember")
    gpu.save(tmp_path / "gpu.ember")
    again = ember.load(tmp_path / "cpu.ember")
    for a, b in zip(cpu(_x()), again(_x())):
        np.testing.assert_array_equal(a, b)
    assert ember.load(tmp_path / "gpu.ember").num_kernels == gpu.num_kernels


# -- (d) damaged or foreign files ------------------------------------------------------------------------
def test_truncated_and_flipped_files(saved, tmp_path) -> None:
    data = saved["cpu"].read_bytes()
    (tmp_path / "trunc.ember").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFormatError, match="not a model saved by ember"):
        ember.load(tmp_path / "trunc.ember")
    members = _members(saved["cpu"])
    good = _write(tmp_path / "good.ember", members)
    raw = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as z:
        info = z.getinfo("module/module.o")
    at = info.header_offset + 30 + len(info.filename) + 100  # inside the stored object code
    raw[at] ^= 0xFF
    (tmp_path / "flip.ember").write_bytes(bytes(raw))
    with pytest.raises(ModelFormatError, match="digest|cannot be read"):
        ember.load(tmp_path / "flip.ember")


def test_file_from_another_version(saved, tmp_path) -> None:
    with zipfile.ZipFile(tmp_path / "v1.ember", "w") as z:
        z.writestr("plan.json", "{}")
        z.writestr("kernels.so", b"\x7fELF")
        z.writestr("weights.npz", b"")
    with pytest.raises(ModelFormatError, match="ember-model/1"):
        ember.load(tmp_path / "v1.ember")
    path = _write(tmp_path / "v1m.ember", _members(saved["cpu"]), fmt="ember-model/1")
    with pytest.raises(ModelFormatError, match="format 'ember-model/1'"):
        ember.load(path)
    members = _members(saved["gpu"])
    meta = json.loads(members["module/module.json"])
    meta["plans"][0]["kernels"][0]["grid"] = ["((s[0] + 63) // 64)", "1", "1"]  # the old source form
    members["module/module.json"] = json.dumps(meta).encode()
    with pytest.raises(ModelFormatError, match="not an expression node"):
        ember.load(_write(tmp_path / "oldgrid.ember", members))


def test_archive_names_and_sizes(saved, tmp_path) -> None:
    members = _members(saved["cpu"])
    evil = dict(members, **{"module/../../x": b"1"})
    with pytest.raises(ModelFormatError, match="plain file name"):
        ember.load(_write(tmp_path / "dots.ember", evil))
    path = _write(tmp_path / "extra.ember", members)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("unlisted.bin", b"x")
    with pytest.raises(ModelFormatError, match="unlisted"):
        ember.load(path)
    # a member that claims more bytes than the manifest allows is refused before it is inflated
    bomb = dict(members)
    bomb["weights.npz"] = bytes(1 << 20)
    path = _write(tmp_path / "bomb.ember", bomb)
    manifest = json.loads(zipfile.ZipFile(path).read("manifest.json"))
    manifest["members"]["weights.npz"]["size"] = 1 << 40
    with zipfile.ZipFile(tmp_path / "bomb2.ember", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for n, d in bomb.items():
            z.writestr(n, d)
    with pytest.raises(ModelFormatError, match="bytes"):
        ember.load(tmp_path / "bomb2.ember")


def _shrink_input(plan: dict) -> None:
    plan["inputs"][0]["shape"] = [2, 8]
    plan["values"]["x"]["shape"] = [2, 8]


PLAN_EDITS = {
    "shrunk input": (_shrink_input, "compiled for float32\\[4, 8\\]"),
    "input vs value": (lambda p: p["inputs"][0].update(shape=[2, 8]), "plan's value is"),
    "huge storage": (lambda p: p.update(storages=[30 << 30] + p["storages"][1:]), "30.0 GiB"),
    "huge output": (lambda p: [p["values"]["o"].update(shape=[1 << 20, 1 << 13]),
                               p["outputs"][0].update(shape=[1 << 20, 1 << 13])], "32.0 GiB"),
    "storage id": (lambda p: p["assign"].update(z=7), "storage 7"),
    "value too big": (lambda p: p.update(storages=[4]), "does not fit"),
    "read before write": (lambda p: p["steps"].reverse(), "before any step writes"),
    "unknown value": (lambda p: p["steps"][0]["args"].__setitem__(0, "nope"), "not a value"),
    "unknown kernel": (lambda p: p["steps"][0].update(func="k99"), "lacks"),
    "fewer args": (lambda p: p["steps"][0]["args"].pop(0), "buffers|before any step"),
    "bad dtype": (lambda p: p["values"]["x"].update(dtype="object"), "not an ember dtype"),
    "negative dim": (lambda p: p["values"]["x"].update(shape=[-4, 8]), "shape"),
    "step kind": (lambda p: p["steps"].append({"kind": "python", "code": "1"}), "kind"),
    "writes constant": (lambda p: p["steps"][0]["args"].__setitem__(-1, "b"), "input or a constant"),
    "target": (lambda p: p.update(target="vulkan"), "target"),
}


@pytest.mark.parametrize("case", sorted(PLAN_EDITS))
def test_inconsistent_plan_is_refused(saved, tmp_path, case) -> None:
    change, message = PLAN_EDITS[case]
    path = _edited(saved["cpu"], tmp_path / "plan.ember", _edit_json("plan.json", change))
    with pytest.raises(ModelFormatError, match=message):
        ember.load(path)


@pytest.mark.parametrize("change, message", [
    (lambda a: a[:2], "float32\\[2, 8\\] but the plan says float32\\[4, 8\\]"),
    (lambda a: a.astype(np.float64), "float64\\[4, 8\\] but the plan says float32"),
])
def test_weights_of_the_wrong_shape_or_dtype(saved, tmp_path, change, message) -> None:
    members = _members(saved["cpu"])
    plan = json.loads(members["plan.json"])
    with np.load(io.BytesIO(members["weights.npz"])) as w:
        arrays = {k: w[k] for k in w.files}
    key = next(k for k, n in plan["const_names"].items() if n == "b")
    arrays[key] = change(arrays[key])
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    members["weights.npz"] = buf.getvalue()
    with pytest.raises(ModelFormatError, match=message):
        ember.load(_write(tmp_path / "w.ember", members))


def test_pickled_weights_are_refused(saved, tmp_path) -> None:
    members = _members(saved["cpu"])
    plan = json.loads(members["plan.json"])
    buf = io.BytesIO()
    np.savez(buf, **{k: np.array([object()], dtype=object) for k in plan["const_names"]})
    members["weights.npz"] = buf.getvalue()
    with pytest.raises(ModelFormatError, match="weights"):
        ember.load(_write(tmp_path / "p.ember", members))


# -- (e) the GPU build cache -------------------------------------------------------------------------
def _vector_add():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def _entry(root: Path) -> Path:
    (entry,) = [p for p in root.glob("*/*") if p.is_dir() and not p.name.startswith(".")]
    return entry


def _rewrite_entry(entry: Path, name: str, data: bytes) -> None:
    (entry / name).write_bytes(data)
    meta = json.loads((entry / "meta.json").read_text())
    meta["files"][name] = hashlib.sha256(data).hexdigest()
    (entry / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("corrupt", ["grid source", "bad json", "truncated binary", "flipped byte", "missing file"])
def test_gpu_kernels_are_cached_and_bad_entries_rebuilt(tmp_path, monkeypatch, corrupt) -> None:
    import ember.backends.gpu.build as gpu_build

    calls = []
    real = gpu_build.compile_parts
    monkeypatch.setattr(gpu_build, "compile_parts", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = ember.build(*_vector_add(), target=GPU, name="tiny", cache_dir=tmp_path)
    second = ember.build(*_vector_add(), target=GPU, name="tiny", cache_dir=tmp_path)
    assert len(calls) == 1
    assert second.parts == first.parts
    entry = _entry(tmp_path)
    meta = json.loads((entry / "module.json").read_text())
    if corrupt == "grid source":
        meta["plans"][0]["kernels"][0]["grid"][0] = "__import__('os').getpid()"
        _rewrite_entry(entry, "module.json", json.dumps(meta).encode())
    elif corrupt == "bad json":
        _rewrite_entry(entry, "module.json", b'{"format": "ember-gpu-module/2", "sigs": [')
    elif corrupt == "truncated binary":
        _rewrite_entry(entry, "device.bin", (entry / "device.bin").read_bytes()[:3])
    elif corrupt == "flipped byte":
        data = bytearray((entry / "module.json").read_bytes())
        data[10] ^= 1
        (entry / "module.json").write_bytes(bytes(data))
    else:
        (entry / "device.bin").unlink()
    third = ember.build(*_vector_add(), target=GPU, name="tiny", cache_dir=tmp_path)
    assert len(calls) == 2
    assert third.get_function("tiny")._grid_fns[0]([65]) == (2, 1, 1)


@pytest.mark.parametrize("junk", [b"[]", b'{"files": []}', b'{"files": {"../x": "00"}}', b"[" * 100000])
def test_foreign_cache_metadata_is_a_miss(tmp_path, junk) -> None:
    from ember import cache

    key = cache.cache_key("x")
    entry = tmp_path / key[:2] / key
    entry.mkdir(parents=True)
    (entry / "meta.json").write_bytes(junk)
    assert cache.load(tmp_path, key) is None


# -- (f) targets ------------------------------------------------------------------------------------
def test_unknown_targets_fail_before_any_work(monkeypatch) -> None:
    import ember.frontend.onnx as frontend

    with pytest.raises(TargetError):
        Target("nonsense")
    monkeypatch.setattr(frontend, "import_onnx", lambda *a, **k: pytest.fail("the model was imported"))
    with pytest.raises(TargetError):
        ember.compile(_model_bytes(), target="vulkan")


# -- (g) rebuild ----------------------------------------------------------------------------------------
def test_rebuild_uses_none_of_the_files_code(saved, tmp_path, monkeypatch) -> None:
    import ember.model.format as fmt

    original = ember.load(saved["cpu"])
    members = _members(saved["cpu"])
    members["module/module.o"] = b"\x7fELF" + bytes(200)  # code that must not be used
    path = _write(tmp_path / "untrusted.ember", members)
    with pytest.raises(ModelFormatError):
        ember.load(path)
    monkeypatch.setattr(fmt, "load_model", lambda *a, **k: pytest.fail("the file's module was loaded"))
    rebuilt = ember.load(path, rebuild=True)
    for a, b in zip(original(_x()), rebuilt(_x())):
        np.testing.assert_array_equal(a, b)
    assert os.path.exists(path)
