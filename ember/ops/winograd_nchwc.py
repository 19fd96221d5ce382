"""Winograd convolutions on channel-blocked tensors (``NCHW[x]c``): ``ember.WinogradConvNCHWc``,
what the CPU layout policy (:mod:`ember.strategy.cpu_layout`) puts in place of a float32 3x3,
stride-1, dilation-1, ``group == 1`` ``Conv`` with constant weights when it is faster than the
direct blocked convolution (:mod:`ember.ops.conv_nchwc`).

Winograd's minimal filtering F(m x m, 3 x 3) (Lavin & Gray, 2016) computes an ``m x m`` output
tile from an ``a x a`` input tile (``a = m + 2``) with ``a**2`` products per (input, output)
channel pair instead of ``9 m**2``: F(4x4, 3x3), the default, needs 36 instead of 144 (4x fewer);
F(2x2, 3x3) 16 instead of 36 (2.25x). Per output tile ``p`` and channel pair::

    Y = A^T [ (G g G^T) * (B^T d B) ] A          (* elementwise over the a x a points)

and summed over the input channels, the products become, for each of the ``a**2`` points ``t``,
one matrix product ``M[t] = V[t] @ U[t]`` of the transformed input ``V[t]`` (``tiles x C``) and
the transformed weights ``U[t]`` (``C x K``). The stages, all on blocked tensors (X ``[N, CB,
H, W, ib]``, W ``OIHW{ib}i{ob}o`` ``[MB, CB, 3, 3, ib, ob]``, B ``C{ob}c`` ``[MB, ob]``, as the
direct convolution takes them):

* ``winograd_wt1``/``winograd_wt2``/``winograd_wt`` — the weight transform ``U = G g G^T``, two
  reductions over the kernel's rows and columns in float64, rounded once, stored ``[a, a, KP,
  CB*ib, nr]`` (for each point ``(xi, nu)``, the output channels in column panels of ``nr``, the
  strategy's packed-GEMM panel width, zero-padded: ``KP = ceil(MB * ob / nr)``; the points as
  two axes, so the compile-time evaluation reads each intermediate value once). Flagged
  ``constant_layout``: with constant weights the model compiler computes it at compile time
  (:func:`ember.model.group_lowering._fold_constant_stages`), as it packs GEMM panels.
* ``winograd_in1``/``winograd_in`` — the input transform ``V[p, t, c] = (B^T d_p B)[t]`` for
  tile ``p = (n, th, tw)`` and input channel ``c``, ``[P, a*a, CB*ib]`` (a workspace; ``P = N *
  TH * TW``, ``TH = ceil(OH / m)``), in two halves (``B^T d``, then ``(B^T d) B``). The tile is
  read in place (:func:`ember.ops.conv_nchwc.masked_read`): rows and columns outside the image
  — the padding and the part of a last tile past the output — read exactly zero.
* ``winograd_gemm`` — ``M[p, t, k] = sum_c V[p, t, c] U[t // a, t % a, k // nr, c, k % nr]``,
  ``[P, a*a, KP*nr]`` (a workspace; ``attrs`` ``nr``, ``K``, ``tile``, the output shape
  ``out``). Tiles outermost in both buffers, so that one tile's ``a*a`` points are near each
  other for the transforms (points outermost put 36 rows a power of two apart, conflicting in
  the caches).
* ``winograd_out1``/``winograd_out`` — the output transform ``Y[n, kb, oh, ow, ki] = (A^T M_p
  A)[oh % m, ow % m]`` at ``k = kb * ob + ki``, ``[N, MB, OH, OW, ob]``, in two halves; then the
  bias. Both are injective, so the fusion pass puts the
  convolution's consumers (residual add, ReLU, Clip) after them and the CPU strategy computes the
  whole epilogue in the one store of each output tile (:mod:`ember.strategy.cpu_winograd`).

Every transform is a sum over the non-zero coefficients of its matrix row, the row picked by the
point (or output position) index through selects of constants (:func:`_rows_applied`); the
schedule unrolls those indices, so each unrolled copy simplifies to its own sum (no
multiplications by zero, none by one). Padding channels stay zero: padded input channels
transform to zero and padded output channels have zero weights and bias.

Attributes besides the ONNX ``Conv`` ones: ``tile`` (``m``, 4 or 2), ``tile_rows`` (the tile
count is padded to a multiple of it, so the GEMM's register tiles divide it: the padded tiles
repeat the last one and are never read back) and ``fused`` (1: the input and the products are
not workspaces but blocks of one row of tiles each, computed row by row:
:func:`ember.strategy.cpu_winograd.schedule_winograd_fused`). The layout policy sets them.

Numerics: the transforms' constants amplify rounding (F(4,3)'s ``B`` has entries up to 5 and its
``A`` up to 8, and ``G`` divides by up to 24). Measured against a float64 convolution of
unit-normal data, as the maximum error relative to the output's largest magnitude, at 64, 128,
256 and 512 channels: F(4,3) 4.4e-6, 6.2e-6, 1.3e-5, 1.5e-5; F(2,3) 2.9e-7 to 8.7e-7; the direct
convolution 8e-7 to 3.1e-6 (its sums run over 9 C products, the GEMM's over C). See
``tests/cpu/test_winograd.py``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .conv_nchwc import _geometry, masked_read
from .registry import OpContext, register
from .util import cast, compute, const_like, dtype_of, shape, uname

WINOGRAD_NCHWC = "ember.WinogradConvNCHWc"

#: The output tile sizes ``m`` of F(m x m, 3 x 3) this module defines.
TILE_SIZES = (2, 4)
DEFAULT_TILE = 4

_F = Fraction
# Transform matrices of F(m, 3) (Lavin & Gray; interpolation points 0, +-1, +-2 and infinity).
_MATRICES: dict[int, tuple[list[list[Fraction]], list[list[Fraction]], list[list[Fraction]]]] = {
    2: (
        [[_F(1), _F(0), _F(-1), _F(0)], [_F(0), _F(1), _F(1), _F(0)],
         [_F(0), _F(-1), _F(1), _F(0)], [_F(0), _F(1), _F(0), _F(-1)]],
        [[_F(1), _F(0), _F(0)], [_F(1, 2), _F(1, 2), _F(1, 2)], [_F(1, 2), _F(-1, 2), _F(1, 2)],
         [_F(0), _F(0), _F(1)]],
        [[_F(1), _F(1), _F(1), _F(0)], [_F(0), _F(1), _F(-1), _F(-1)]],
    ),
    4: (
        [[_F(4), _F(0), _F(-5), _F(0), _F(1), _F(0)],
         [_F(0), _F(-4), _F(-4), _F(1), _F(1), _F(0)],
         [_F(0), _F(4), _F(-4), _F(-1), _F(1), _F(0)],
         [_F(0), _F(-2), _F(-1), _F(2), _F(1), _F(0)],
         [_F(0), _F(2), _F(-1), _F(-2), _F(1), _F(0)],
         [_F(0), _F(4), _F(0), _F(-5), _F(0), _F(1)]],
        [[_F(1, 4), _F(0), _F(0)], [_F(-1, 6), _F(-1, 6), _F(-1, 6)], [_F(-1, 6), _F(1, 6), _F(-1, 6)],
         [_F(1, 24), _F(1, 12), _F(1, 6)], [_F(1, 24), _F(-1, 12), _F(1, 6)], [_F(0), _F(0), _F(1)]],
        [[_F(1), _F(1), _F(1), _F(1), _F(1), _F(0)],
         [_F(0), _F(1), _F(-1), _F(2), _F(-2), _F(0)],
         [_F(0), _F(1), _F(1), _F(4), _F(4), _F(0)],
         [_F(0), _F(1), _F(-1), _F(8), _F(-8), _F(1)]],
    ),
}


def transform_matrices(m: int) -> tuple[list[list[Fraction]], list[list[Fraction]], list[list[Fraction]]]:
    """``(B^T, G, A^T)`` of F(m x m, 3 x 3) as exact fractions: ``B^T`` is ``a x a``, ``G`` ``a x
    3`` and ``A^T`` ``m x a`` (``a = m + 2``); ``m`` is one of :data:`TILE_SIZES`."""
    if m not in _MATRICES:
        raise ValueError(f"Winograd F({m}x{m}, 3x3) is not defined here: the tile size must be one of {TILE_SIZES}")
    return _MATRICES[m]


def _lin(terms: list[tuple[Fraction, Any]], dt: str) -> Any:
    """``sum(c * v)`` over the non-zero coefficients, coefficients of +-1 as adds and subtracts."""
    out: Any = None
    for c, v in terms:
        if c == 0:
            continue
        if c == 1 or c == -1:
            t = v
        else:
            t = v * const_like(float(c), dt)
        if out is None:
            out = -t if c == -1 else t
        else:
            out = out - t if c == -1 else out + t
    return out if out is not None else const_like(0, dt)


def _rows_applied(index: Any, mat: list[list[Fraction]], load: Any, dt: str) -> Any:
    """``sum_j mat[index][j] * load(j)`` for a row ``index`` known only at run time (or after
    unrolling): each row's non-zero terms, padded to the longest row's count with zero
    coefficients, where term ``k`` reads ``load(col_k(index))`` times ``coef_k(index)`` and both
    are selects of constants (:func:`_pick`). The selects hold no loads, so ember's vectorizer
    keeps the channel loop a vector loop, and once the row is a constant they simplify to one
    load and one coefficient (a coefficient of one to no multiplication)."""
    rows = [[(c, j) for j, c in enumerate(row) if c != 0] for row in mat]
    width = max(len(r) for r in rows)
    out: Any = None
    for k in range(width):
        present = [r[k][1] for r in rows if k < len(r)]
        common = max(set(present), key=present.count)  # a padded term reads the common column
        cols = [r[k][1] if k < len(r) else common for r in rows]
        coefs = [float(r[k][0]) if k < len(r) else 0.0 for r in rows]
        term = load(_pick(index, cols, "int32")) * _pick(index, coefs, dt)
        out = term if out is None else out + term
    return out


def _pick(index: Any, values: list[Any], dt: str) -> Any:
    """``values[index]`` as a constant when they are all equal, else a chain of selects testing
    only the positions whose value differs from the most common one (short chains keep the
    unrolled code small until it is simplified)."""
    common = max(set(values), key=values.count)
    out: Any = const_like(common, dt)
    for k, v in enumerate(values):
        if v != common:
            out = te.if_then_else(index == k, const_like(v, dt), out)
    return out


def _select(index: Any, branches: list[Any]) -> Any:
    """``branches[index]`` as a chain of selects (``index`` constant after unrolling: one branch)."""
    out = branches[-1]
    for k in range(len(branches) - 2, -1, -1):
        out = te.if_then_else(index == k, branches[k], out)
    return out


def winograd_geometry(h: int, w: int, lo: list[int], hi: list[int], m: int) -> tuple[int, int, int, int]:
    """``(OH, OW, TH, TW)``: the output size of a 3x3 stride-1 convolution of an ``h x w`` image
    padded by ``lo``/``hi`` and the number of ``m x m`` output tiles along each axis."""
    oh, ow = h + lo[0] + hi[0] - 2, w + lo[1] + hi[1] - 2
    return oh, ow, -(-oh // m), -(-ow // m)


def weight_transform(w: Tensor, m: int, nr: int) -> Tensor:
    """``U = G g G^T`` of blocked 3x3 weights ``w`` (``[MB, CB, 3, 3, ib, ob]``) for F(m, 3):
    ``[a, a, KP, CB*ib, nr]`` float32 (``KP = ceil(MB*ob / nr)``, zero beyond the blocked output
    channels), computed in float64 and rounded once. Flagged ``constant_layout`` (folded at
    compile time when ``w`` is a constant)."""
    mb, cb, kh, kw, ib, ob = shape(w)
    _, g, _ = transform_matrices(m)
    a = m + 2
    kp = -(-(mb * ob) // nr)
    kreal = mb * ob
    wide = "float64"

    def wk(k: Any, c: Any, r: Any, q: Any) -> Any:
        kk = E.min_expr(k, kreal - 1)
        v = cast(w[E.floordiv(kk, ob), E.floordiv(c, ib), r, q, E.floormod(c, ib), E.floormod(kk, ob)], wide)
        return v if kp * nr == kreal else te.if_then_else(k < kreal, v, const_like(0, wide))

    def gc(row: Any, col: Any) -> Any:  # G[row, col]: a select of constants (no loads)
        return _select(row * 3 + col, [const_like(float(g[i][r]), wide) for i in range(a) for r in range(3)])

    # G g, then (G g) G^T, as reductions over the kernel's rows and columns: the coefficients
    # depend only on the point axes, so the compile-time evaluation computes them once per point
    # instead of once per weight (ember.te.evaluate broadcasts along the axes an expression reads).
    r1 = te.reduce_axis((0, 3), name="wr")
    g1 = compute((a, 3, cb * ib, kp * nr), lambda xi, q, c, k: te.sum(gc(xi, r1.var) * wk(k, c, r1.var, q), axis=r1),
                 name=uname("winograd_wt1"))
    r2 = te.reduce_axis((0, 3), name="wq")

    def wt2(xi: Any, nu: Any, kq: Any, c: Any, kn: Any) -> Any:  # the points as two axes: no index
        return te.sum(gc(nu, r2.var) * g1[xi, r2.var, c, kq * nr + kn], axis=r2)  # reads g1 twice

    u64 = compute((a, a, kp, cb * ib, nr), wt2, name=uname("winograd_wt2"))
    return compute(shape(u64), lambda *i: cast(u64[i], "float32"), name=uname("winograd_wt"), tag="winograd_wt",
                   attrs={"tile": m, "nr": nr}, constant_layout=True)


def weight_transform_source(op: te.Operation) -> Tensor | None:
    """The weights ``w`` that ``op`` transforms when ``op`` is the last stage of
    :func:`weight_transform` (tag ``winograd_wt``, reading ``w`` through its two reductions),
    else None."""
    if not isinstance(op, te.ComputeOp) or op.tag != "winograd_wt" or not op.attrs or "nr" not in op.attrs:
        return None
    chain: te.Operation = op
    for _ in range(2):  # winograd_wt <- winograd_wt2 <- winograd_wt1 <- w
        if len(chain.input_tensors) != 1:
            return None
        chain = chain.input_tensors[0].op
    if len(chain.input_tensors) != 1 or len(shape(chain.input_tensors[0])) != 6:
        return None
    return chain.input_tensors[0]


def weight_transform_value(w: np.ndarray, m: int, nr: int) -> np.ndarray:
    """The value of :func:`weight_transform` for the weights ``w`` (``[MB, CB, 3, 3, ib, ob]``
    float32), computed directly with NumPy: the same float64 products and sums in the same order
    as :func:`ember.te.evaluate` of the stages (each sum of three products left to right, then
    added to zero, the reduction's identity), rounded once to float32. What the model compiler
    folds (:func:`ember.model.group_lowering._fold_constant_stages`): the evaluation of the te
    stages gathers every weight through index arrays, about 50x slower."""
    mb, cb, kh, kw, ib, ob = w.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"the Winograd weight transform takes 3x3 kernels, not {kh}x{kw}")
    _, g, _ = transform_matrices(m)
    a = m + 2
    kreal = mb * ob
    kp = -(-kreal // nr)
    cp = cb * ib
    gm = np.array([[float(c) for c in row] for row in g], np.float64)  # [a, 3]
    # wq[r, q, c, k] = w[k // ob, c // ib, r, q, c % ib, k % ob], zero for k >= kreal
    wq = np.zeros((3, 3, cp, kp * nr), np.float64)
    wq[..., :kreal] = np.asarray(w, np.float32).transpose(2, 3, 1, 4, 0, 5).reshape(3, 3, cp, kreal)

    def sum3(coef: np.ndarray, terms: np.ndarray) -> np.ndarray:  # sum_r coef[..., r] * terms[r], left to right
        out = coef[0] * terms[0] + coef[1] * terms[1]
        out += coef[2] * terms[2]
        out += 0.0  # the reduction's identity (a zero sum is +0.0)
        return out

    # g1[xi, q, c, k] = sum_r G[xi, r] * wq[r, q, c, k]
    g1 = np.stack([sum3(gm[xi], wq) for xi in range(a)])
    # u[xi, nu, kq, c, kn] = sum_r G[nu, r] * g1[xi, r, c, kq * nr + kn]
    g1p = g1.reshape(a, 3, cp, kp, nr).transpose(1, 0, 3, 2, 4)  # [r, xi, kq, c, kn]
    u = np.stack([sum3(gm[nu], g1p) for nu in range(a)], axis=1)  # [xi, nu, kq, c, kn]
    return np.ascontiguousarray(u.astype(np.float32))


@register(WINOGRAD_NCHWC, pattern="heavy")
def winograd_conv_nchwc(ctx: OpContext, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """``ember.WinogradConvNCHWc`` (attribute ``tile``: ``m`` of F(m x m, 3 x 3), default 4; the
    ONNX ``Conv`` attributes otherwise): X ``[N, CB, H, W, ib]``, W ``[MB, CB, 3, 3, ib, ob]``, B
    ``[MB, ob]`` as ``ember.ConvNCHWc`` takes them, stride and dilation 1; the result is ``[N,
    MB, OH, OW, ob]``, equal to the direct convolution's up to the transforms' rounding (module
    docstring)."""
    sx, sw = shape(x), shape(w)
    if len(sx) != 5 or len(sw) != 6 or sw[1] != sx[1] or sw[4] != sx[4]:
        raise ctx.fail(f"X {sx} must be [N, CB, H, W, ib] and W {sw} [MB, CB, KH, KW, ib, ob] with the same CB and ib")
    if (sw[2], sw[3]) != (3, 3):
        raise ctx.fail(f"the Winograd convolution takes 3x3 kernels, not {sw[2]}x{sw[3]}: use ember.ConvNCHWc")
    if b is not None and shape(b) != (sw[0], sw[5]):
        raise ctx.fail(f"B has shape {shape(b)}; the blocked bias is [MB, ob] = {(sw[0], sw[5])}")
    if dtype_of(x) != "float32" or dtype_of(w) != "float32":
        raise ctx.fail(f"the Winograd convolution computes float32, not {dtype_of(x)} x {dtype_of(w)}")
    m = int(ctx.attr("tile", DEFAULT_TILE))
    if m not in TILE_SIZES:
        raise ctx.fail(f"tile={m}: the Winograd tile must be one of {TILE_SIZES}")
    strides, dil, lo, hi, (oh_, ow_) = _geometry(ctx, x, (3, 3))
    if strides != [1, 1] or dil != [1, 1]:
        raise ctx.fail(f"strides {strides} and dilations {dil}: the Winograd convolution takes 1 and 1 (use "
                       f"ember.ConvNCHWc)")
    n_, cb, h, wd, ib = sx
    mb, ob = sw[0], sw[5]
    nr = ctx.strategy.gemm_panel_width("float32")
    nr = max(ob, nr - nr % ob) if nr >= ob else ob
    a = m + 2
    bt, _, at = transform_matrices(m)
    th_, tw_ = -(-oh_ // m), -(-ow_ // m)
    # The tile count padded to a multiple of the register tile's rows the policy chose
    # (attribute ``tile_rows``), so that the GEMM has no partial row tile; the padded rows
    # repeat the last tile and are never read back.
    rows = int(ctx.attr("tile_rows", 1))
    if rows < 1:
        raise ctx.fail(f"tile_rows={rows}: the GEMM's register tile needs at least one row")
    real_tiles = n_ * th_ * tw_
    fused = bool(int(ctx.attr("fused", 0)))
    if fused and rows != 1:
        raise ctx.fail("fused=1 computes one row of tiles at a time: it takes no tile_rows")
    ntiles = -(-real_tiles // rows) * rows
    cp = cb * ib
    dt = "float32"

    u = weight_transform(w, m, nr)
    kp = shape(u)[2]

    def tile_of(p: Any) -> tuple[Any, Any, Any]:
        if ntiles != real_tiles:
            p = E.min_expr(p, real_tiles - 1)
        n, rest = E.floordiv(p, th_ * tw_), E.floormod(p, th_ * tw_)
        return n, E.floordiv(rest, tw_) * m, E.floormod(rest, tw_) * m

    def in_rows(xi: Any, j: Any, p: Any, c: Any) -> Any:  # (B^T d)[xi, j]
        n, i0, j0 = tile_of(p)
        cbi, ci = E.floordiv(c, ib), E.floormod(c, ib)
        # read in place: the tile's rows and columns past the image (padding, partial last
        # tiles) read zero
        return _rows_applied(xi, bt, lambda i: masked_read(x, n, cbi, i0 + i - lo[0], j0 + j - lo[1], ci), dt)

    t1 = compute((a, a, ntiles, cp), in_rows, name=uname("winograd_in1"), tag="winograd_in1", materialize=True)

    def vin(p: Any, t: Any, c: Any) -> Any:  # (B^T d B)[xi, nu]
        xi, nu = E.floordiv(t, a), E.floormod(t, a)
        return _rows_applied(nu, bt, lambda j: t1[xi, j, p, c], dt)

    v = compute((ntiles, a * a, cp), vin, name=uname("winograd_in"), tag="winograd_in", workspace=not fused,
                materialize=True, attrs={"tile": m, "block": ib, "fused": int(fused)})
    rc = te.reduce_axis((0, cp), name="rc")

    def gemm(p: Any, t: Any, k: Any) -> Any:
        wt = u[E.floordiv(t, a), E.floormod(t, a), E.floordiv(k, nr), rc.var, E.floormod(k, nr)]
        return te.sum(v[p, t, rc.var] * wt, axis=rc)

    mm = compute((ntiles, a * a, kp * nr), gemm,
                 name=uname("winograd_gemm"), tag="winograd_gemm", workspace=not fused, materialize=True,
                 attrs={"nr": nr, "K": cp, "tile": m, "out": (n_, mb, oh_, ow_, ob), "fused": int(fused),
                        "tiles_per_row": tw_})

    def out_rows(r: Any, nu: Any, p: Any, k: Any) -> Any:  # (A^T M)[r, nu]
        return _rows_applied(r, at, lambda xi: mm[p, xi * a + nu, k], dt)

    o1 = compute((m, a, ntiles, kp * nr), out_rows, name=uname("winograd_out1"), tag="winograd_out1",
                 materialize=True)

    def yout(n: Any, o: Any, i: Any, j: Any, k: Any) -> Any:  # (A^T M A)[i % m, j % m]
        p = (n * th_ + E.floordiv(i, m)) * tw_ + E.floordiv(j, m)
        row = E.floormod(i, m)
        return _rows_applied(E.floormod(j, m), at, lambda nu: o1[row, nu, p, o * ob + k], dt)

    out = compute((n_, mb, oh_, ow_, ob), yout, name=uname("winograd_out"), tag="winograd_out",
                  attrs={"tile": m, "pads": (lo, hi)})
    if b is None:
        return out
    return compute(shape(out), lambda n, o, i, j, k: out[n, o, i, j, k] + b[o, k], name=uname("conv_bias"))


