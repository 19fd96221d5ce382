"""Every ``ember`` subcommand, run in-process through ember.cli.main (and once as ``python -m
ember``), on tiny ONNX models; results checked against ONNX Runtime."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

import ember
from ember.cli import main
from ember.profiler import EXTRA_COLUMNS, ROCPROF_COLUMNS
from tests.profiler.trace_schema import check_trace


def _ort(path, feeds):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_compile_then_run_saves_outputs(files, capsys) -> None:
    out_model = files["dir"] / "mlp.ember"
    rc, out, err = _cli(capsys, "compile", files["mlp.onnx"], "-o", out_model, "--target", "llvm", "-q")
    assert rc == 0 and out_model.exists() and "1 output" not in err
    assert "target llvm" in out and "input  x: float32[5, 37]" in out
    assert ember.load(out_model).inputs[0].shape == (5, 37)
    npz = files["dir"] / "out.npz"
    rc, out, _ = _cli(capsys, "run", out_model, "--input", f"x={files['x']}", "-o", npz)
    assert rc == 0 and "y: float32[5, 11]" in out
    x = np.load(files["x"])
    (want,) = _ort(files["mlp.onnx"], {"x": x})
    got = np.load(npz)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # float32 kernels, summation order differs


def test_run_compiles_an_onnx_model_with_two_inputs_and_prints(files, capsys) -> None:
    rc, out, _ = _cli(capsys, "run", files["two.onnx"], "--input", f"a={files['a']}", "--input", f"b={files['b']}")
    assert rc == 0 and "s: float32[4, 6]" in out and "p: float32[4, 6]" in out


@pytest.mark.parametrize("spec, message", [
    ("x={dir}/missing.npy", "input 'x': file '{dir}/missing.npy' does not exist"),
    ("x={dir}/mlp.onnx", "input 'x': '{dir}/mlp.onnx' is not a .npy file"),
    ("x={dir}/not_npy.npy", "input 'x': '{dir}/not_npy.npy' is not a readable .npy file"),
    ("x={dir}/x64.npy", "input 'x': expected dtype float32, the file holds float64"),
    ("x={dir}/x_short.npy", "input 'x': expected shape (5, 37), the file holds (5, 36)"),
    ("y={dir}/x.npy", "the model has no input 'y' (inputs: x)"),
    ("x", "--input 'x': give NAME=FILE.npy"),
])
def test_bad_input_files_name_the_input_expected_and_given(files, capsys, spec, message) -> None:
    d = files["dir"]
    rc, out, err = _cli(capsys, "run", files["mlp.onnx"], "-q", "--input", spec.format(dir=d))
    assert rc == 1 and out == ""
    assert err.startswith("ember run: " + message.format(dir=d))


def test_run_without_an_input_says_which(files, capsys) -> None:
    rc, _, err = _cli(capsys, "run", files["two.onnx"], "-q", "--input", f"a={files['a']}")
    assert rc == 1 and "missing input(s) b" in err


def test_bench_against_onnxruntime(files, capsys) -> None:
    path = files["dir"] / "bench.json"
    rc, out, _ = _cli(capsys, "bench", files["mlp.onnx"], "--compare", "onnxruntime", "--warmup", "2",
                      "--repeat", "5", "--json", path, "-q")
    assert rc == 0 and "ember (llvm, host arrays)" in out and "onnxruntime (CPUExecutionProvider, host arrays)" in out
    data = json.loads(path.read_text())
    assert data["results"]["ember"]["calls"] == 5 and data["results"]["onnxruntime"]["calls"] == 5
    assert data["ember_over_onnxruntime"] > 0 and data["max_rel_diff"] < 1e-5
    rc, out, _ = _cli(capsys, "bench", files["mlp.onnx"], "--io", "device", "--warmup", "1", "--repeat", "3", "-q")
    assert rc == 0 and "ember (llvm, device arrays)" in out and "onnxruntime" not in out


def test_profile_writes_csv_trace_and_roofline(files, capsys) -> None:
    d = files["dir"]
    argv = ["profile", files["mlp.onnx"], "--repeat", "3", "--csv", d / "s.csv", "--trace", d / "t.json", "-q"]
    have_mpl = True
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        have_mpl = False
    if have_mpl:
        argv += ["--roofline", d / "r.png"]
    rc, out, _ = _cli(capsys, *argv)
    assert rc == 0 and "k0_gemm_tanh" in out and "clock: host perf_counter" in out
    rows = list(csv.DictReader(io.StringIO((d / "s.csv").read_text())))
    assert list(rows[0]) == ROCPROF_COLUMNS + EXTRA_COLUMNS and len(rows) == 3
    assert sum(int(r["Calls"]) for r in rows) == 9
    assert {r["Nodes"] for r in rows} == {"fc1;tanh", "fc2", "softmax"}
    events = check_trace(json.loads((d / "t.json").read_text()))
    assert len([e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]) == 9
    if have_mpl:
        assert (d / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_profile_by_node(files, capsys) -> None:
    rc, out, _ = _cli(capsys, "profile", files["mlp.onnx"], "--repeat", "2", "--by", "node", "--no-peaks", "-q")
    assert rc == 0
    lines = [ln.split() for ln in out.splitlines()]
    assert ["fc1", "Gemm", "k0_gemm_tanh", "2"] == lines[[ln[:1] for ln in lines].index(["fc1"])][:4]


def test_explain_shows_a_kernel_at_every_level(files, capsys) -> None:
    rc, out, _ = _cli(capsys, "explain", files["mlp.onnx"], "--kernel", "k2_softmax", "--graphs", "-q")
    assert rc == 0
    assert re.search(r"-- after \d{3}_InferAndFold\.txt", out)  # the graph after each graph pass
    for title in ("== te (tensor expressions", "== loop IR", "== LLVM IR", "== assembly"):
        assert title in out
    assert "reduce(max" in out and "def k2_softmax(" in out and "define" in out and "k2_softmax:" in out
    rc, _, err = _cli(capsys, "explain", files["mlp.onnx"], "--kernel", "nope", "-q")
    assert rc == 1 and "no kernel 'nope'; the kernels are: k0_gemm_tanh, k1_matmul, k2_softmax" in err


def test_compare_names_the_first_node_past_the_tolerance(files, capsys) -> None:
    rc, out, _ = _cli(capsys, "compare", files["mlp.onnx"], "--against", "onnxruntime", "-q")
    assert rc == 0 and "every tensor is within 0.0001" in out and "4 tensors of 4 node outputs" in out
    # float16 computation drifts ~5e-4 of the largest value on the first node already
    rc, out, _ = _cli(capsys, "compare", files["mlp.onnx"], "--precision", "float16", "--tol", "1e-4", "-q")
    assert rc == 1 and "first node past the tolerance: #0 'fc1' (Gemm), output 'h'" in out
    rc, out, _ = _cli(capsys, "compare", files["mlp.onnx"], "--precision", "float16", "-q")
    assert rc == 0 and "tolerance 0.01" in out


def test_info_lists_devices_toolchains_and_fixes(capsys) -> None:
    rc, out, _ = _cli(capsys, "info")
    assert rc == 0
    for section in ("ember", "cpu", "cpu features", "cuda device", "rocm device", "ptxas", "libdevice", "ld.lld",
                    "ocml", "onnxruntime"):
        assert any(line.startswith(section + " ") for line in out.splitlines()), section
    for line in out.splitlines():
        if " missing" in line:  # every missing piece is followed by its fix
            assert "fix:" in out.splitlines()[out.splitlines().index(line) + 1]


def test_help_lists_every_command(capsys) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    for cmd in ("compile", "run", "bench", "profile", "explain", "compare", "info", "tune", "hipify", "version"):
        assert f"    {cmd} " in out or f"    {cmd}\n" in out, cmd


def test_python_dash_m_ember_works_like_ember(files) -> None:
    r = subprocess.run([sys.executable, "-m", "ember", "version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == ember.__version__
    r = subprocess.run([sys.executable, "-m", "ember", "run", str(files["mlp.onnx"]), "-q"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1 and "ember run: missing input(s) x" in r.stderr


def test_explain_a_cuda_kernel_shows_its_device_kernels_and_ptx(files, capsys) -> None:
    # compiling for CUDA needs no GPU (PTX is made by LLVM; ptxas only when present)
    rc, out, _ = _cli(capsys, "explain", files["mlp.onnx"], "--target", "cuda", "--kernel", "k2_softmax", "-q")
    assert rc == 0 and "== PTX" in out
    assert "define ptx_kernel void @k2_softmax_kernel0(" in out and ".entry k2_softmax_kernel0(" in out
    assert "@k1_matmul" not in out and ".entry k0_gemm_tanh" not in out  # only the chosen kernel


def test_profile_next_to_onnxruntimes_own_profile(files, capsys) -> None:
    rc, out, _ = _cli(capsys, "profile", files["mlp.onnx"], "--compare", "onnxruntime", "--repeat", "5",
                      "--no-peaks", "-q")
    assert rc == 0 and "next to ONNX Runtime's own profile" in out
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.startswith(("k0_", "k1_", "k2_", "all "))}
    # ONNX Runtime fuses Gemm+Tanh into one node named after the Gemm: tanh has no time of its own
    assert "fc1, tanh (-)" in out
    for name in ("k1_matmul", "k2_softmax"):
        ember_us, ort_us, ratio = (float(v) for v in rows[name][1:4])
        assert ember_us > 0 and ort_us > 0
        # the ratio of the unrounded medians, within what printing to 0.1 us allows
        assert (ember_us - 0.05) / (ort_us + 0.05) - 0.005 <= ratio <= (ember_us + 0.05) / (ort_us - 0.05) + 0.005


@pytest.mark.parametrize("argv", [
    ["compile", "{mlp}", "-o", "{dir}/no/such/m.ember"],
    ["run", "{mlp}", "--input", "x={x}", "-o", "{dir}/no/such/out.npz"],
    ["profile", "{mlp}", "--csv", "{dir}/no/such/s.csv"],
    ["bench", "{mlp}", "--json", "{dir}/no/such/b.json"],
])
def test_an_output_in_a_missing_folder_is_refused_before_compiling(files, capsys, argv) -> None:
    d = files["dir"]
    rc, _, err = _cli(capsys, *[a.format(mlp=files["mlp.onnx"], x=files["x"], dir=d) for a in argv], "-q")
    assert rc == 1 and f"the folder '{d}/no/such' does not exist" in err


def test_a_text_model_compiles_saves_and_runs(files, capsys) -> None:
    """String in and out through the CLI: ``compile`` saves a model with host stages, ``run``
    reads the words from a NumPy unicode .npy file; random inputs for text are refused by name."""
    from onnx import TensorProto as T
    from onnx import helper as h

    g = h.make_graph([h.make_node("StringNormalizer", ["words"], ["up"], case_change_action="UPPER"),
                      h.make_node("Shape", ["up"], ["n"])], "text",
                     [h.make_tensor_value_info("words", T.STRING, [3])],
                     [h.make_tensor_value_info("up", T.STRING, None), h.make_tensor_value_info("n", T.INT64, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    d = files["dir"]
    (d / "text.onnx").write_bytes(m.SerializeToString())
    np.save(d / "words.npy", np.array(["straße", "école", "b"]))
    rc, out, _ = _cli(capsys, "compile", d / "text.onnx", "-o", d / "text.ember", "-q")
    assert rc == 0 and "input  words: string[3]" in out
    rc, out, err = _cli(capsys, "run", d / "text.ember", "--input", f"words={d / 'words.npy'}")
    assert rc == 0 and "up: string[3]" in out and "n: int64[1]" in out, err
    assert ember.load(d / "text.ember")(words=np.load(d / "words.npy"))[0].tolist() == ["STRAßE", "ÉCOLE", "B"]
    rc, _, err = _cli(capsys, "bench", d / "text.onnx", "-q", "--repeat", "1", "--warmup", "0")
    assert rc == 1 and "input 'words' has shape (3,) and dtype string: give its value with --input" in err
    np.save(d / "numbers.npy", np.arange(3.0))
    rc, _, err = _cli(capsys, "run", d / "text.onnx", "-q", "--input", f"words={d / 'numbers.npy'}")
    assert rc == 1 and "input 'words': expected text, the file holds float64" in err
