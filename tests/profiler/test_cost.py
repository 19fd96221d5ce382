"""FLOP and byte counts from the loop IR (ember.profiler.cost) against hand counts."""

from __future__ import annotations

import pytest

from ember import te
from ember.lowering import lower
from ember.profiler import cost as cost_mod
from ember.profiler import count_cost


def _gemm(m: int, k: int, n: int, tile: int | None = None):
    a = te.placeholder((m, k), "float32", name="a")
    b = te.placeholder((k, n), "float32", name="b")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
    s = te.create_schedule(c.op)
    if tile:
        io, ii = s[c].split(c.op.axis[1], factor=tile)  # a split that does not divide: a guard
    return lower(s, [a, b, c], "gemm")


def test_gemm_counts_two_flops_per_multiply_add_and_each_buffer_once() -> None:
    m, k, n = 13, 29, 17
    for tile in (None, 8):  # 17 columns in tiles of 8: the guarded tail must not be counted
        c = count_cost(_gemm(m, k, n, tile))
        assert c.flops == 2 * m * k * n
        # each operand once however often it is re-read, and c once: unscheduled, the reduction
        # accumulates in c itself (c = 0; c = c + a * b)
        assert c.bytes_read == 4 * (m * k + k * n + m * n)
        assert c.bytes_written == 4 * m * n
        assert c.exact


def test_conv2d_direct() -> None:
    nb, ic, h, w, oc, kh, kw = 2, 3, 9, 11, 5, 3, 3
    oh, ow = h - kh + 1, w - kw + 1
    x = te.placeholder((nb, ic, h, w), "float32", name="x")
    wt = te.placeholder((oc, ic, kh, kw), "float32", name="w")
    rc, ry, rx = te.reduce_axis((0, ic), "rc"), te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    y = te.compute((nb, oc, oh, ow),
                   lambda n, o, i, j: te.sum(x[n, rc, i + ry, j + rx] * wt[o, rc, ry, rx], axis=[rc, ry, rx]),
                   name="y")
    bias = te.placeholder((oc,), "float32", name="bias")
    zero = te.const(0.0, "float32")
    z = te.compute((nb, oc, oh, ow), lambda n, o, i, j: te.max_value_expr(y[n, o, i, j] + bias[o], zero), name="z")
    s = te.create_schedule(z.op)
    c = count_cost(lower(s, [x, wt, bias, z], "conv"))
    out = nb * oc * oh * ow
    # multiply-add per tap (2), then bias add (1) and relu's max (1) per output
    assert c.flops == 2 * out * ic * kh * kw + 2 * out
    assert c.bytes_read == 4 * (nb * ic * h * w + oc * ic * kh * kw + oc)
    assert c.bytes_written == 4 * out  # y is an allocation of the kernel, not a parameter


def test_elementwise_vectorized_with_tail() -> None:
    n = 1003
    a = te.placeholder((n,), "float32", name="a")
    b = te.placeholder((n,), "float32", name="b")
    c = te.compute((n,), lambda i: te.exp(a[i]) * b[i] + 1.0, name="c")
    s = te.create_schedule(c.op)
    _, inner = s[c].split(c.op.axis[0], factor=8)
    s[c].vectorize(inner)
    cost = count_cost(lower(s, [a, b, c], "ew"))
    assert cost.flops == 3 * n  # exp, multiply, add per element, vector lanes and scalar tail alike
    assert cost.bytes_read == 8 * n and cost.bytes_written == 4 * n


def test_int_index_math_is_not_counted_and_float64_is() -> None:
    n = 40
    a = te.placeholder((n,), "float64", name="a")
    c = te.compute((n // 2,), lambda i: a[2 * i] + a[2 * i + 1], name="c")
    cost = count_cost(lower(te.create_schedule(c.op), [a, c], "pairs"))
    assert cost.flops == n // 2 and cost.bytes_read == 8 * n and cost.bytes_written == 8 * (n // 2)


def test_symbolic_extent_needs_sizes() -> None:
    n = te.var("n")
    a = te.placeholder((n,), "float32", name="a")
    c = te.compute((n,), lambda i: a[i] * 2.0, name="c")
    f = lower(te.create_schedule(c.op), [a, c], "sym")
    with pytest.raises(cost_mod.CostUnknown):
        count_cost(f)
    assert count_cost(f, {n: 10}).flops == 10


def test_large_guards_give_an_upper_bound_marked_inexact(monkeypatch) -> None:
    monkeypatch.setattr(cost_mod, "ENUMERATE_LIMIT", 4)
    c = count_cost(_gemm(13, 29, 17, tile=8))
    assert not c.exact and c.flops == 2 * 13 * 29 * 24  # the guard taken as always true


def test_cost_json_round_trip_rejects_bad_data() -> None:
    c = count_cost(_gemm(3, 4, 5))
    assert cost_mod.Cost.from_json(c.to_json()) == c
    for bad in (None, [], {"flops": -1, "bytes_read": 0, "bytes_written": 0}, {"flops": "1"}):
        assert cost_mod.Cost.from_json(bad) is None


def test_tensor_core_gemm_counts_the_mma_instructions_and_async_copies() -> None:
    # lowering for CUDA needs no GPU; tiles divide 128 x 128 x 64, so nothing is padded
    from ember.strategy.tensorcore import tensorcore_matmul

    m, n, k = 128, 128, 64
    s, args = tensorcore_matmul(m, n, k, target="cuda -arch=sm_80")
    c = count_cost(lower(s, args, "tc", target="cuda -arch=sm_80"))
    assert c.flops == 2 * m * n * k  # mma.m16n8k16: 2*16*8*16 per warp instruction
    assert c.bytes_read == 2 * (m * k + k * n)  # float16 operands through 16-byte cp.async copies
    assert c.bytes_written == 4 * m * n  # float32 accumulators
