"""What the recurrent layers' speed work changed, checked for accuracy: float32 ``tanh`` inline
(``ember/backends/cpu/vtanh.py``: the LSTM/GRU cells called libm's ``tanhf`` per lane) against
float64 over the whole float32 range (every 61st bit pattern, plus the special values and the
switch between its two formulas), vectorized and scalar; and the LSTM stand-in's cell kernel
holds no ``tanhf`` call. Nothing here asserts a timing."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.backends.cpu.vtanh import SMALL


def _tanh_kernel(n: int, vector: bool):
    x = te.placeholder((n,), name="x")
    y = te.compute((n,), lambda i: te.tanh(x[i]), name="y")
    s = te.create_schedule(y.op)
    if vector:
        s[y].vectorize(s[y].split(y.op.axis[0], factor=16)[1])
    return ember.build(s, [x, y], target="llvm", name="vtanh_v" if vector else "vtanh_s")


def _grid() -> np.ndarray:
    bits = np.arange(0, 2**32, 61, dtype=np.uint64).astype(np.uint32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, SMALL, -SMALL, np.nextafter(SMALL, 0),
                        np.nextafter(SMALL, 1), 20.0, -20.0, 9.0, 9.1, 1e-30, -1e-45, 3e38], np.float32)
    # a dense sweep around the two formulas' switch and where tanh leaves 1 in float32
    sweep = np.concatenate([np.linspace(SMALL * 0.9, SMALL * 1.1, 20001, dtype=np.float32),
                            np.linspace(0.0, 10.0, 200001, dtype=np.float32)])
    g = np.concatenate([bits.view(np.float32), special, sweep, -sweep])
    return g


@pytest.mark.parametrize("vector", [True, False])
def test_tanh_f32_within_one_ulp_of_float64(vector: bool) -> None:
    grid = _grid()
    n = grid.size - grid.size % 16
    grid = grid[:n]
    out = np.full(n, 7.0, np.float32)
    _tanh_kernel(n, vector)(grid, out)
    with np.errstate(invalid="ignore"):  # signalling NaN bit patterns
        ref = np.tanh(grid.astype(np.float64))
    ref32 = ref.astype(np.float32)
    fin = np.isfinite(grid) & (ref32 != 0)
    # error in units of the float32 result's last place: correctly rounded except near a
    # rounding boundary (<= 1 ulp; the double result is within ~2e-10 relative)
    err = np.abs(out[fin].astype(np.float64) - ref[fin]) / np.spacing(np.abs(ref32[fin])).astype(np.float64)
    assert err.max() <= 1.0, f"max error {err.max():.3f} ulp at x = {grid[fin][err.argmax()]!r}"
    assert (err <= 0.5 + 1e-6).mean() > 0.9999
    zero = grid == 0
    np.testing.assert_array_equal(np.signbit(out[zero]), np.signbit(grid[zero]))  # -0.0 stays -0.0
    tiny = np.isfinite(grid) & (ref32 == 0) & ~zero
    np.testing.assert_array_equal(out[tiny], ref32[tiny])
    inf = np.isinf(grid)
    np.testing.assert_array_equal(out[inf], np.sign(grid[inf]))
    assert np.isnan(out[np.isnan(grid)]).all()


def test_lstm_cell_calls_no_libm_tanh() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from rnn_models import rnn_model

    m, _ = rnn_model("LSTM", T=3, B=1, I=5, H=37, direction="bidirectional")
    model = ember.compile(m)
    ll = model.get_source("llvm")
    assert "lstmcell" in ll and "tanhf" not in ll


@pytest.mark.parametrize("op,lbr,most", [("LSTM", 0, 4), ("GRU", 0, 6), ("GRU", 1, 4), ("RNN", 0, 4)])
def test_steps_of_a_direction_read_one_packed_copy_of_the_weights(op: str, lbr: int, most: int) -> None:
    # Each step is a kernel of its own; the recurrent weights, packed into panels at compile
    # time, were folded once per step (40 copies of 4 MB per direction for the stand-in: every
    # step read a fresh copy from memory). Folded constants are shared by content now.
    import sys
    from pathlib import Path

    import onnxruntime as ort

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from rnn_models import rnn_model

    T, H, I = 9, 37, 19  # sizes no panel or tile divides
    m, feeds = rnn_model(op, T=T, B=2, I=I, H=H, direction="bidirectional", lbr=lbr)
    model = ember.compile(m)
    steps = [s for s in model.plan["steps"] if s["kind"] == "kernel"]
    packed = {a for s in steps for a in s["args"] if "__const" in a}
    uses = sum(1 for s in steps for a in s["args"] if "__const" in a)
    if op != "RNN":  # (an RNN's 37 x 37 recurrent product is too small to be packed)
        assert uses >= 2 * T  # every step of both directions reads a packed constant
    # per direction one input projection and the recurrent matrices (two for a GRU with
    # linear_before_reset = 0: the z/r gates' and the candidate's)
    assert len(packed) <= most, sorted(packed)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = model(**feeds)
    for a, b in zip(got, ref):
        # float32 sums of I + H products per gate over T steps, ONNX Runtime summing in another order
        np.testing.assert_allclose(np.asarray(a), b, rtol=0, atol=1e-5)
