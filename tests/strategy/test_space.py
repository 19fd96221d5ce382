"""Knob spaces (ember/strategy/space.py): split policies, points by index, defaults, checks that
reject illegal points, seeded sampling, the JSON round trip, and a user's GEMM schedule written
against a space, built and checked against NumPy at several points (sizes no tile divides)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ember
from ember import te
from ember.strategy import ConfigEntity, ConfigSpace, InvalidConfig, KnobEntity, SplitEntity


def test_split_policies() -> None:
    sp = ConfigSpace()
    k = sp.define_split("f", 12, policy="factors")
    assert sorted(e.size for e in k.candidates) == [(1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1)]
    k3 = sp.define_split("f3", 8, num_outputs=3, policy="factors")
    assert all(math.prod(e.size) == 8 for e in k3.candidates) and len(k3) == 10
    p = sp.define_split("p", 37, policy="power2")
    assert [e.size for e in p.candidates] == [(37, 1), (19, 2), (10, 4), (5, 8), (3, 16), (2, 32)]
    c = sp.define_split("c", 45, num_outputs=3, policy="candidate", candidate=[(-1, 4, 2), (-1, 16, 1)])
    assert [e.size for e in c.candidates] == [(6, 4, 2), (3, 16, 1)]
    with pytest.raises(InvalidConfig, match="covers less"):
        sp.define_split("bad", 45, policy="candidate", candidate=[(2, 4)])
    with pytest.raises(InvalidConfig, match="unknown policy"):
        sp.define_split("bad2", 45, policy="nope")
    with pytest.raises(InvalidConfig, match="defined twice"):
        sp.define_knob("f", [1])


def test_split_of_an_axis_and_max_factor() -> None:
    A = te.placeholder((24,), name="A")
    B = te.compute((24,), lambda i: A[i] + 1.0, name="B")
    sp = ConfigSpace()
    k = sp.define_split("t", B.op.axis[0], policy="factors", max_factor=6)
    assert all(e.size[1] <= 6 for e in k.candidates) and len(k) == 5  # 1, 2, 3, 4, 6


def test_points_indices_default_and_iteration() -> None:
    sp = ConfigSpace()
    sp.define_split("t", 16, policy="power2", default=(-1, 4))
    sp.define_knob("u", [False, True], default=True)
    sp.define_reorder("r", 3, policy="all")
    sp.define_annotate("a", 2, policy="try_unroll_vec")
    assert len(sp) == 5 * 2 * 6 * 6
    points = list(sp)
    assert len(points) == len(sp) and len(set(points)) == len(sp)
    for i in (0, 1, 7, len(sp) - 1):
        assert sp.get(i).index == i and sp.index_of(dict(sp.get(i).items())) == i
    d = sp.default
    assert d["t"].size == (4, 4) and d["u"].val is True and d["r"].perm == (0, 1, 2)
    assert sp.get(d.index) == d
    with pytest.raises(InvalidConfig):
        sp.get(len(sp))
    with pytest.raises(InvalidConfig, match="no knob"):
        d["missing"]


def test_checks_reject_illegal_points() -> None:
    sp = ConfigSpace()
    sp.define_split("x", 64, policy="power2")
    sp.define_split("y", 64, policy="power2")
    sp.add_check(lambda c: None if c["x"].size[1] * c["y"].size[1] <= 64 else "tile too large")
    legal = [c for c in sp if sp.is_valid(c)]
    assert 0 < len(legal) < len(sp)
    bad = next(c for c in sp if not sp.is_valid(c))
    with pytest.raises(InvalidConfig, match="tile too large"):
        sp.validate(bad)
    foreign = ConfigEntity({"x": SplitEntity((3, 30)), "y": SplitEntity((64, 1))})
    assert "not a value" in sp.errors(foreign)[0]
    with pytest.raises(InvalidConfig, match="unknown knob"):
        sp.validate(ConfigEntity({**dict(sp.default.items()), "z": KnobEntity(1)}))


def test_sampling_is_seeded_and_distinct() -> None:
    sp = ConfigSpace()
    sp.define_split("x", 1024, num_outputs=3, policy="factors")
    sp.define_knob("v", list(range(50)))
    sp.add_check(lambda c: None if c["v"].val % 2 == 0 else "odd")
    a = sp.sample(20, seed=3)
    assert a == sp.sample(20, seed=3) and a != sp.sample(20, seed=4)
    assert len(set(a)) == 20
    valid = sp.sample(20, seed=3, valid_only=True)
    assert len(valid) == 20 and all(sp.is_valid(c) for c in valid)


def test_json_round_trip() -> None:
    sp = ConfigSpace()
    sp.define_split("t", 45, num_outputs=3, policy="candidate", candidate=[(-1, 4, 2), (-1, 8, 4)])
    sp.define_knob("tile", [(64, 64, 4, 4), (16, 16, 1, 1)])
    sp.define_knob("order", ["a", "b"])
    sp.define_reorder("r", 2)
    sp.define_annotate("an", 2, policy="candidate", candidate=[("none", "vec"), ("unroll", "vec")])
    for cfg in sp:
        text = json.dumps(cfg.to_json())
        back = ConfigEntity.from_json(text)
        assert back == cfg and back.index == cfg.index
        checked = sp.from_json(json.loads(text))
        assert checked == cfg and checked.index == cfg.index
    with pytest.raises(InvalidConfig):
        sp.from_json({"index": 0, "knobs": {"t": {"size": [1, 2, 3]}}})


# -- a user's GEMM schedule written against a space -------------------------------------------------
M, N, K = 37, 45, 19  # no tile divides these


def _gemm():
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _user_space(C: te.Tensor) -> ConfigSpace:
    x, y = C.op.axis
    space = ConfigSpace()
    space.define_split("tile_x", x, num_outputs=2, policy="power2", default=(-1, 8))
    space.define_split("tile_y", y, num_outputs=2, policy="power2", default=(-1, 16))
    space.define_split("tile_k", C.op.reduce_axis[0], num_outputs=2, policy="factors")
    space.define_knob("unroll", [False, True])
    space.define_annotate("outer", 2, policy="candidate", candidate=[("none", "none"), ("parallel", "none")])
    space.add_check(
        lambda c: None if c["tile_x"].size[1] * c["tile_y"].size[1] <= 256 else "the register tile is over 256 values"
    )
    return space


def _user_schedule(A: te.Tensor, B: te.Tensor, C: te.Tensor, cfg: ConfigEntity) -> te.Schedule:
    x, y = C.op.axis
    s = te.create_schedule(C.op)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    ko, ki = cfg["tile_k"].apply(s, C, C.op.reduce_axis[0])
    s[C].reorder(xo, yo, ko, ki, xi, yi)
    s[C].vectorize(yi)
    if cfg["unroll"].val:
        s[C].unroll(xi)
    cfg["outer"].apply(s, C, [xo, yo])
    return s


def test_user_gemm_schedule_at_several_points(rng) -> None:
    A, B, C = _gemm()
    space = _user_space(C)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    points = [space.default] + space.sample(5, seed=1, valid_only=True)
    assert len(points) == 6 and all(space.is_valid(p) for p in points)
    for cfg in points:
        f = ember.build(_user_schedule(A, B, C, cfg), [A, B, C], target="llvm", name="user_gemm")
        out = ember.nd.array(np.full((M, N), np.nan, dtype="float32"))
        f(ember.nd.array(a), ember.nd.array(b), out)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4, err_msg=repr(cfg))


def test_user_gemm_illegal_point_rejected_before_building(monkeypatch) -> None:
    A, B, C = _gemm()
    space = _user_space(C)
    bad = next(c for c in space if c["tile_x"].size[1] == 32 and c["tile_y"].size[1] == 32)

    def no_build(*args, **kwargs):
        raise AssertionError("an illegal point reached the build")

    monkeypatch.setattr(ember, "build", no_build)
    with pytest.raises(InvalidConfig, match="register tile"):
        ember.build(_user_schedule(A, B, C, space.validate(bad)), [A, B, C])
