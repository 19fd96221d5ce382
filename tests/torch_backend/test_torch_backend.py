"""torch.compile(backend="ember") and ember.from_torch on the CPU, against eager PyTorch.

Tolerances: float32 results of the same arithmetic in another order (ember's fused kernels, its
GEMM blocking) against PyTorch's; 1e-4 relative to the output's magnitude covers the reordering
of sums of a few hundred terms and catches any wrong element (those are off by O(1)).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ember  # noqa: E402
from ember.torch_backend import EagerFallbackWarning, from_torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from torch_nets import SmallConvNet, randomize_bn, resnet18, small_bert  # noqa: E402


def close(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-4) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(float(want.abs().max()), 1e-6)
    err = float((got.double() - want.double()).abs().max())
    assert err <= rtol * scale, f"max error {err} vs scale {scale}"


def test_backend_is_registered_by_entry_point():
    from importlib.metadata import entry_points

    names = {ep.name: ep.value for ep in entry_points(group="torch_dynamo_backends")}
    assert names.get("ember") == "ember.torch_backend:ember_backend"
    assert torch._dynamo.lookup_backend("ember") is not None


def test_small_conv_net_matches_eager():
    torch.manual_seed(1)
    net = randomize_bn(SmallConvNet()).eval()
    compiled = torch.compile(net, backend="ember")
    x = torch.randn(2, 3, 7, 9)
    with torch.no_grad():
        got, want = compiled(x), net(x)
    for g, w in zip(got, want):
        close(g, w)


def test_new_shapes_compile_per_shape():
    """Dynamo hands a dynamic-batch graph after the second shape (a SymInt input); ember
    compiles each concrete shape once and keeps at most ``max_variants``."""
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Linear(12, 7), torch.nn.GELU(), torch.nn.Linear(7, 5)).eval()
    m = from_torch(net, torch.randn(3, 12), max_variants=2)
    with torch.no_grad():
        for batch in (5, 3, 9, 5, 3):
            x = torch.randn(batch, 12)
            close(m(x), net(x))
    dynamic = m.graphs[-1]
    assert "int" in dynamic.kinds  # the symbolic batch size
    # 5 (its example), 3, 9, then 5 and 3 again: evicted by the limit of 2, compiled again
    assert dynamic.compiles == 5 and len(dynamic.variants) == 2


def test_inputs_are_read_in_place_and_not_written():
    """Non-contiguous inputs are made contiguous; inputs are never modified."""
    net = torch.nn.Linear(6, 4).eval()
    compiled = torch.compile(net, backend="ember")
    base = torch.randn(6, 5)
    x = base.t()  # (5, 6), not contiguous
    before = base.clone()
    with torch.no_grad():
        close(compiled(x), net(x))
    assert torch.equal(base, before)


def test_fallback_runs_unsupported_ops_eagerly_with_one_warning():
    class Odd(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(5, 5)
            self.b = torch.nn.Linear(5, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.tanh(self.a(x))
            z = torch.linalg.inv(y @ y.T + 3 * torch.eye(5))
            return self.b(z @ y).cumprod(0)

    torch.manual_seed(3)
    net = Odd().eval()
    x = torch.randn(5, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = from_torch(net, x)
    msgs = [str(w.message) for w in caught if issubclass(w.category, EagerFallbackWarning)]
    assert len(msgs) == 1, msgs
    assert "torch.linalg.inv (1)" in msgs[0] and "Tensor.cumprod (1)" in msgs[0]
    with torch.no_grad():
        close(compiled(x), net(x))
    (split,) = compiled.graphs
    fused = [m for name, m in split.__self__.named_children() if name.startswith("fused_")]
    assert len(fused) >= 2  # the linear layers before and after run in ember


def test_weights_changed_in_place_are_compiled_again():
    torch.manual_seed(7)
    net = torch.nn.Linear(6, 4).eval()
    compiled = torch.compile(net, backend="ember")
    x = torch.randn(3, 6)
    with torch.no_grad():
        close(compiled(x), net(x))
        net.load_state_dict({"weight": torch.randn(4, 6), "bias": torch.randn(4)})  # in place
        with pytest.warns(RuntimeWarning, match="weights changed"):
            got = compiled(x)
        close(got, net(x))


def test_recurrent_layers_compile_when_dynamo_captures_them():
    class Seq(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(6, 10, batch_first=True)
            self.att = torch.nn.MultiheadAttention(10, 2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h, _ = self.lstm(x)
            return self.att(h, h, h)[0].mean(1)

    torch.manual_seed(8)
    net = Seq().eval()
    x = torch.randn(3, 5, 6)
    with pytest.warns(RuntimeWarning, match="captured no graph.*allow_rnn"):
        from_torch(net, x)  # Dynamo's default: RNN modules are not traced
    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_rnn=True):
        m = from_torch(net, x)
        assert isinstance(m.model, ember.Model)  # LSTM and attention in one ember model
        with torch.no_grad():
            close(m(x), net(x))


def test_fallback_off_raises():
    class Inv(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.inv(x) + 1

    with pytest.raises(ember.EmberError):
        from_torch(Inv().eval(), torch.eye(3) * 2, fallback=False)


def test_training_mode_is_refused():
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train()
    with pytest.raises(ember.EmberError, match="training mode.*eval"):
        from_torch(net, torch.randn(2, 4))


def test_gradients_are_out_of_scope_with_a_clear_error():
    net = torch.nn.Linear(4, 3).eval()
    compiled = torch.compile(net, backend="ember")
    x = torch.randn(2, 4)
    out = compiled(x)  # grad mode on, weights require grad: the answer, with a refusing grad_fn
    assert out.requires_grad
    close(out.detach(), net(x).detach())
    with pytest.raises(ember.EmberError, match="inference"):
        out.sum().backward()


def test_from_torch_gives_the_ember_model():
    torch.manual_seed(4)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.ReLU()).eval()
    x = torch.randn(1, 2, 5, 6)
    m = from_torch(net, x)
    assert isinstance(m.model, ember.Model)
    assert [tuple(s.shape) for s in m.model.inputs] == [(1, 2, 5, 6)]
    with torch.no_grad():
        close(m(x), net(x))
    # The ember model itself, called with NumPy, agrees.
    close(torch.from_numpy(m.model(x.numpy())[0]), net(x).detach())


def test_unknown_option_is_named():
    # Dynamo wraps a backend's error; ember's message is inside.
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="unknown option.*precison.*valid"):
        torch.compile(torch.nn.ReLU(), backend="ember", options={"precison": "float16"})(torch.randn(3))
    with pytest.raises(ember.EmberError, match="unknown option"):
        from ember.torch_backend import Options

        Options.of({"precison": "float16"})
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="inductor's"):
        torch.compile(torch.nn.ReLU(), backend="ember", mode="max-autotune")(torch.randn(3))


def test_small_bert_encoder_matches_eager():
    pytest.importorskip("transformers")
    bert = small_bert()
    torch.manual_seed(5)
    ids = torch.randint(0, 500, (2, 13))
    mask = torch.ones(2, 13, dtype=torch.int64)
    mask[1, 9:] = 0  # padding: the attention mask path
    m = from_torch(bert, {"input_ids": ids, "attention_mask": mask})  # keyword arguments
    assert isinstance(m.model, ember.Model)  # the whole encoder in one ember model
    with torch.no_grad():
        got, want = m(input_ids=ids, attention_mask=mask), bert(ids, mask)
    close(got.last_hidden_state, want.last_hidden_state)
    close(got.pooler_output, want.pooler_output)


def test_resnet18_matches_eager():
    net, origin = resnet18()
    torch.manual_seed(6)
    x = torch.randn(1, 3, 67, 61)  # sizes no tile divides
    compiled = torch.compile(net, backend="ember")
    with torch.no_grad():
        got, want = compiled(x), net(x)
    close(got, want)
    assert origin


def test_run_addresses_writes_every_output_in_place():
    """The executor's I/O binding: outputs poisoned, an output that is an input and one that is
    a constant are copied, the computed one is written in place."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Identity", ["x"], ["xi"]),
         h.make_node("Identity", ["w"], ["wi"]), h.make_node("Reshape", ["y", "s"], ["yr"])],
        "g", [h.make_tensor_value_info("x", T.FLOAT, [5, 2])],
        [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "xi", "wi", "yr")],
        [nh.from_array(w, "w"), nh.from_array(np.array([15], np.int64), "s")])
    proto = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    proto.ir_version = 8
    model = ember.compile(proto.SerializeToString(), use_cache=False)
    x = np.random.default_rng(0).standard_normal((5, 2)).astype(np.float32)
    outs = [np.full(s.shape, np.nan, np.float32) for s in model.outputs]
    model.context().run_addresses([x.ctypes.data], [o.ctypes.data for o in outs])
    np.testing.assert_allclose(outs[0], x @ w, rtol=1e-6)
    np.testing.assert_array_equal(outs[1], x)
    np.testing.assert_array_equal(outs[2], w)
    np.testing.assert_allclose(outs[3], (x @ w).reshape(15), rtol=1e-6)
    with pytest.raises(ember.ArgumentError, match="addresses"):
        model.context().run_addresses([], [0, 0, 0, 0])


def test_ember_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None; import ember\n"
            "try:\n    ember.from_torch(None, ())\nexcept ember.EmberError as e:\n    print('ERR', e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "needs PyTorch" in out.stdout
