"""``ember explain``: a compile with the IR dumped after every pass and a report of what ran."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.cli import main
from ember.explain import explain
from ember.graph.passes import default_graph_pipeline

from .test_model_api import _mlp, _reference

pytest.importorskip("onnx", reason="explain compiles ONNX models")


def test_explain_dumps_every_pass_in_order_and_reports(rng, tmp_path) -> None:
    data = _mlp(rng)
    result = explain(data, dump_dir=tmp_path / "dumps")
    files = sorted(p.name for p in (tmp_path / "dumps").iterdir())
    # the graph pipeline's passes first, in order (again after a target's layout pass), then fusion
    graph_passes = [p.name for p in default_graph_pipeline(None, "llvm").passes]  # the CPU target's
    fuse = next(k for k, f in enumerate(files) if f.endswith("_Fuse.txt"))
    before = [f.split("_", 1)[1].removesuffix(".txt") for f in files[:fuse]]
    assert before[:len(graph_passes)] == graph_passes
    assert set(before) <= set(graph_passes) | {"AlterLayout"}
    assert [f[:3] for f in files] == [f"{k + 1:03d}" for k in range(len(files))]
    assert any(f.endswith("_VectorizeLoops.txt") for f in files)
    assert len(files) == len(result.context.dumps)
    fused = (tmp_path / "dumps" / files[fuse]).read_text()
    assert "kernel 0" in fused and "MatMul" in fused
    report = result.report()
    for name in ("InferAndFold", "Fuse", "FlattenStorage", "k0_matmul_add_relu", "memory plan"):
        assert name in report
    x = rng.standard_normal((5, 37)).astype(np.float32)
    np.testing.assert_allclose(result.model(x)[0], _reference(data, x), rtol=1e-5, atol=1e-6)


def test_explain_with_passes_disabled_still_computes_right(rng, tmp_path) -> None:
    data = _mlp(rng)
    result = explain(data, dump_dir=tmp_path / "d", disabled_passes=["PartitionLoops", "VectorizeLoops"])
    assert not any("PartitionLoops" in f.name for f in result.context.dumps)
    assert "PartitionLoops" in result.context.skipped
    x = rng.standard_normal((5, 37)).astype(np.float32)
    np.testing.assert_allclose(result.model(x)[0], _reference(data, x), rtol=1e-5, atol=1e-6)


def test_explain_command(rng, tmp_path, capsys) -> None:
    path = tmp_path / "mlp.onnx"
    path.write_bytes(_mlp(rng))
    assert main(["explain", str(path), "--dump-dir", str(tmp_path / "out"), "--input-shape", "x=5,37"]) == 0
    assert "kernels: 3" in capsys.readouterr().out
    assert main(["explain", str(tmp_path / "missing.onnx")]) == 1
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["explain", str(path), "--input-shape", "x=five"])
    with pytest.raises(ember.PassError, match="NoSuchPass"):
        explain(path.read_bytes(), disabled_passes=["NoSuchPass"])
