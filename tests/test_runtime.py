"""The runtime: devices, NDArray, Module (functions, sources), argument checking that names the
argument, export_library / load_module."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te


def _vadd(name="vadd"):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(i)
    s[C].parallel(o)
    return ember.build(s, [A, B, C], name=name)


@pytest.fixture(scope="module")
def vadd():
    return _vadd()


# -- devices and arrays ---------------------------------------------------------------------------
def test_devices():
    dev = ember.cpu(0)
    assert dev.kind == "cpu" and dev.exist and str(dev) == "cpu(0)"
    assert ember.device("llvm") == dev
    with pytest.raises(ember.DeviceError, match="cpu"):
        ember.cpu(1)
    with pytest.raises(ember.DeviceError, match="unknown device kind"):
        ember.device("tpu")


@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "int8", "uint16", "int64", "bool"])
def test_array_roundtrip(rng, dt):
    x = (rng.standard_normal((3, 5)) * 10).astype(dt)
    a = ember.nd.array(x, ember.cpu(0))
    assert a.shape == (3, 5) and a.dtype == dt and a.ndim == 2 and a.size == 15
    assert a.nbytes == x.nbytes and a.data_ptr % 64 == 0  # aligned for vector loads
    y = a.numpy()
    np.testing.assert_array_equal(y, x)
    y[0, 0] = 1  # numpy() is a copy
    np.testing.assert_array_equal(a.numpy(), x)


def test_bfloat16_array():
    x = np.array([1.0, 1 + 2**-8, 3.140625, -0.0, np.inf, np.nan], dtype=np.float32)
    a = ember.nd.array(x, dtype="bfloat16")
    assert a.dtype == "bfloat16" and a.nbytes == 12
    np.testing.assert_array_equal(a.numpy(), [1.0, 1.0, 3.140625, -0.0, np.inf, np.nan])


def test_array_defaults_and_copies():
    assert ember.nd.array([1.5, 2.5]).dtype == "float32"  # Python floats: float32, as in the design
    assert ember.nd.array(np.zeros(2)).dtype == "float64"  # NumPy arrays keep their type
    x = np.arange(6, dtype="float32")
    shared = ember.nd.array(x, copy=False)
    shared.copyfrom(np.ones(6, dtype="float32"))
    np.testing.assert_array_equal(x, 1)  # copy=False shares memory (when aligned or not, it wraps x)
    e = ember.nd.empty((2, 3), "int32")
    assert e.shape == (2, 3) and e.dtype == "int32"
    with pytest.raises(ember.ArgumentError, match="does not match"):
        e.copyfrom(np.zeros((3, 2)))
    with pytest.raises(ember.ArgumentError, match="negative"):
        ember.nd.empty((-1,), "float32")
    other = e.copyto(ember.cpu(0))
    np.testing.assert_array_equal(other.numpy(), e.numpy())


# -- modules ------------------------------------------------------------------------------------------
def test_module_call_and_get_function(vadd, rng):
    f = vadd.get_function("vadd")
    assert vadd.function_names == ["vadd"] and vadd["vadd"] is f
    for n in [0, 1, 9, 100]:
        a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
        c = ember.nd.array(np.full(n, np.nan, dtype="float32"))
        f(ember.nd.array(a), ember.nd.array(b), c)
        np.testing.assert_array_equal(c.numpy(), a + b)
    with pytest.raises(ember.EmberError, match="no function 'nope'.*vadd"):
        vadd.get_function("nope")


def test_numpy_arrays_are_accepted_and_written_in_place(vadd, rng):
    a, b = rng.standard_normal(10).astype("float32"), rng.standard_normal(10).astype("float32")
    c = np.full(10, np.nan, dtype="float32")
    vadd(a, b, c)
    np.testing.assert_array_equal(c, a + b)


def test_get_source(vadd):
    ir = vadd.get_source("ir")
    assert "def vadd(A: float32[n], B: float32[n], C: float32[n])" in ir and "parallel" in ir and "ramp" in ir
    ll = vadd.get_source("llvm")
    assert "define" in ll and "@vadd" in ll and "ember_parallel_for" in ll  # the pool (backends/cpu/pool.py)
    asm = vadd.get_source("asm")
    assert "vadd" in asm and "text" in asm  # .text, or .ltext in the x86-64 large code model
    with pytest.raises(ember.EmberError, match="source format 'ptx' is not available.*ir"):
        vadd.get_source("ptx")


def test_lower_prints_readable_ir():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    f = ember.lower(te.create_schedule(B.op), [A, B], name="double")
    text = str(f)
    assert text.splitlines()[0] == "def double(A: float32[4], B: float32[4]):"
    assert "B[i] = (A[i] * 2.0)" in text


# -- argument checking ------------------------------------------------------------------------------------
def _arrays(*shapes, dtype="float32"):
    return [ember.nd.array(np.zeros(s, dtype=dtype)) for s in shapes]


def test_wrong_argument_count(vadd):
    a, b = _arrays(4, 4)
    with pytest.raises(ember.ArgumentError, match=r"vadd takes 3 arguments \(A, B, C\), got 2"):
        vadd(a, b)


def test_wrong_dtype_names_the_argument(vadd):
    a, b = _arrays(4, 4)
    (c,) = _arrays(4, dtype="float64")
    with pytest.raises(ember.ArgumentError, match=r"argument 2 \(C\) of vadd has dtype float64, expected float32"):
        vadd(a, b, c)


def test_inconsistent_symbolic_shape_names_the_argument(vadd):
    a, b, c = _arrays(4, 5, 4)
    with pytest.raises(ember.ArgumentError, match=r"argument 1 \(B\) of vadd: dimension 0 \(n\) is 5.*n = 4"):
        vadd(a, b, c)


def test_wrong_rank_and_fixed_shape():
    A = te.placeholder((3, 4), name="A")
    B = te.compute((3, 4), lambda i, j: A[i, j] + 1.0, name="B")
    f = ember.build(te.create_schedule(B.op), [A, B], name="fixed")
    a, b = _arrays((3, 4), (3, 5))
    with pytest.raises(ember.ArgumentError, match=r"argument 1 \(B\) of fixed has shape \(3, 5\), expected \(3, 4\)"):
        f(a, b)
    (flat,) = _arrays(12)
    with pytest.raises(ember.ArgumentError, match=r"argument 0 \(A\) of fixed has 1 dimension"):
        f(flat, b)


def test_derived_dimension_is_checked():
    """Regression: a dimension like ``n + 4`` was not checked, so a too-small output was written
    past its end (heap corruption) instead of raising."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    P = te.compute((n + 4,), lambda i: te.if_then_else((i >= 2) & (i < n + 2), A[i - 2], -1.0), name="P")
    H = te.compute(((n + 1) // 2,), lambda i: P[i * 2], name="H")
    f = ember.build(te.create_schedule(H.op), [A, P, H], name="pad")
    a, p, h = _arrays(6, 3, 3)
    with pytest.raises(ember.ArgumentError, match=r"argument 1 \(P\) of pad: dimension 0 is 3, but \(n \+ 4\) = 10"):
        f(a, p, h)
    a, p, h = _arrays(6, 10, 4)
    with pytest.raises(ember.ArgumentError, match=r"argument 2 \(H\).*= 3"):
        f(a, p, h)
    a = ember.nd.array(np.arange(6, dtype="float32"))
    p, h = _arrays(10, 3)
    f(a, p, h)
    np.testing.assert_array_equal(p.numpy(), np.pad(np.arange(6), 2, constant_values=-1))
    np.testing.assert_array_equal(h.numpy(), p.numpy()[0:6:2])


def test_derived_dimensions_are_expression_trees():
    """The signature carries each derived dimension as an expression tree over the sizes (data,
    not text to parse), next to its printed form for messages; the checks survive a round trip
    through a module file."""
    import json
    import tempfile

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    H = te.compute(((n + 1) // 2,), lambda i: A[i * 2], name="H")
    f = ember.build(te.create_schedule(H.op), [A, H], name="half", use_cache=False)
    sig = json.loads(f.parts["module.json"])["functions"][0]
    assert sig["params"][0]["shape_exprs"] == [None]
    assert sig["params"][1]["shape_exprs"] == [["floordiv", ["add", ["var", 0], ["const", 1]], ["const", 2]]]
    with tempfile.TemporaryDirectory() as d:
        f.export_library(f"{d}/half.so")
        g = ember.load_module(f"{d}/half.so")
    for fn in (f, g):
        a, h = _arrays(7, 3)
        with pytest.raises(ember.ArgumentError, match=r"dimension 0 is 3, but .* = 4"):
            fn(a, h)
        a, h = _arrays(7, 4)
        fn(a, h)


def test_non_contiguous_and_foreign_arguments(vadd):
    a, b = _arrays(4, 4)
    x = np.zeros(8, dtype="float32")[::2]
    with pytest.raises(ember.ArgumentError, match=r"argument 2 \(C\).*not C-contiguous"):
        vadd(a, b, x)
    with pytest.raises(ember.ArgumentError, match=r"argument 0 \(A\) of vadd must be an ember NDArray"):
        vadd([1.0, 2.0], b, b)


def test_wrong_device_names_the_argument(vadd):
    a, b, c = _arrays(4, 4, 4)
    fake = ember.NDArray(np.zeros(4, dtype="float32"), ember.ir.dtype("float32"), ember.cuda(0))
    with pytest.raises(ember.ArgumentError, match=r"argument 1 \(B\) of vadd is on cuda\(0\) but vadd runs on cpu"):
        vadd(a, fake, c)


def test_scalar_arguments():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    f = ember.build(te.create_schedule(B.op), [A, B, n], name="withn")
    a, b = _arrays(5, 5)
    f(a, b, 5)
    with pytest.raises(ember.ArgumentError, match=r"argument 2 \(n\) of withn must be an integer"):
        f(a, b, 5.0)
    with pytest.raises(ember.ArgumentError, match="is 6 but the array shapes say 5"):
        f(a, b, 6)


def test_size_not_determined_by_any_argument():
    n = te.var("n")
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * n.astype("float32"), name="B")
    with pytest.raises(ember.LoweringError, match="variable n is used in scaled but bound by nothing"):
        ember.build(te.create_schedule(B.op), [A, B], name="scaled")
    f = ember.build(te.create_schedule(B.op), [A, B, n], name="scaled")
    a = ember.nd.array(np.arange(4, dtype="float32"))
    (b,) = _arrays(4)
    f(a, b, 3)
    np.testing.assert_array_equal(b.numpy(), np.arange(4) * 3)


def test_lowering_errors_name_the_missing_argument():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ember.LoweringError, match="output B is not in the argument list"):
        ember.lower(s, [A])
    with pytest.raises(ember.LoweringError, match="tensor A is used but has no storage"):
        ember.lower(s, [B])
    with pytest.raises(ember.LoweringError, match="passed twice"):
        ember.lower(s, [A, A, B])
    with pytest.raises(ember.LoweringError, match="not a valid identifier"):
        ember.lower(s, [A, B], name="bad name")
    with pytest.raises(ember.EmberError, match="argument list"):
        ember.build(s)


# -- export and load ------------------------------------------------------------------------------------
def test_export_library_and_load_module(tmp_path, rng, vadd):
    path = tmp_path / "sub" / "vadd.so"
    vadd.export_library(str(path))
    assert path.exists()
    loaded = ember.load_module(str(path))
    assert loaded.function_names == ["vadd"]
    a, b = rng.standard_normal(37).astype("float32"), rng.standard_normal(37).astype("float32")
    c = ember.nd.array(np.full(37, np.nan, dtype="float32"))
    loaded(ember.nd.array(a), ember.nd.array(b), c)
    np.testing.assert_array_equal(c.numpy(), a + b)
    with pytest.raises(ember.ArgumentError, match=r"argument 1 \(B\)"):  # checks survive export
        loaded(ember.nd.array(a), ember.nd.array(b[:3]), c)


def test_load_module_errors(tmp_path):
    with pytest.raises(ember.EmberError, match="does not exist"):
        ember.load_module(str(tmp_path / "missing.so"))
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"not a shared library")
    with pytest.raises(ember.EmberError, match="not an ember module file"):
        ember.load_module(str(bad))


def test_module_file_with_a_damaged_compressed_member(tmp_path, vadd):
    """A member whose deflate stream is damaged (its header and sizes intact) is a clear
    ModelFormatError, not zlib's own exception."""
    import zipfile

    path = tmp_path / "vadd.so"
    vadd.export_library(str(path))
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        victim = max((i for i in z.infolist() if i.compress_type == zipfile.ZIP_DEFLATED and i.compress_size > 64),
                     key=lambda i: i.compress_size, default=None)
    if victim is None:
        pytest.skip("this build stores the module's members uncompressed: nothing to damage")
    start = victim.header_offset + 30 + len(victim.filename.encode()) + len(victim.extra)
    for k in range(start + 8, start + min(victim.compress_size, 64)):
        raw[k] ^= 0x5A
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(raw))
    with pytest.raises(ember.ModelFormatError):
        ember.load_module(str(bad))


def test_module_with_several_functions(tmp_path, rng):
    def lowered(name, scale):
        n = te.var("n")
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i: A[i] * scale, name="B")
        return ember.lower(te.create_schedule(B.op), [A, B], name=name)

    m = ember.build([lowered("twice", 2.0), lowered("thrice", 3.0)])
    assert m.function_names == ["twice", "thrice"]
    path = tmp_path / "two.so"
    m.export_library(str(path))
    for mod in (m, ember.load_module(str(path))):
        a = rng.standard_normal(11).astype("float32")
        for name, scale in (("twice", 2), ("thrice", 3)):
            out = ember.nd.array(np.full(11, np.nan, dtype="float32"))
            mod[name](ember.nd.array(a), out)
            np.testing.assert_array_equal(out.numpy(), a * np.float32(scale))
