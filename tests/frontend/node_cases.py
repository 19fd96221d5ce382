"""The ONNX backend node test cases, generated from the installed ``onnx`` package, and a
runner that compiles each with ember on the CPU and compares with the expected outputs."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

XFAIL_PATH = Path(__file__).with_name("onnx_node_xfail.json")


def load_cases() -> list[Any]:
    """Every node test case of the installed onnx (empty when onnx is missing)."""
    try:
        from onnx.backend.test.loader import load_model_tests
    except ImportError:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(load_model_tests(kind="node"))


def load_xfail() -> dict[str, str]:
    """Expected failures: case name -> reason."""
    if not XFAIL_PATH.exists():
        return {}
    return json.loads(XFAIL_PATH.read_text())


def case_ops(case: Any) -> list[str]:
    """Operator types of a case's model."""
    return sorted({n.op_type for n in case.model.graph.node})


def _to_value(x: Any) -> Any:
    """One data-set entry as onnx's own backend runner passes it: a NumPy array, a list of them
    for a sequence, None for an empty optional. Some cases store their data as protobufs
    (``np.asarray`` would wrap those in an object array); they are decoded with ``numpy_helper``
    exactly as that runner decodes them."""
    if isinstance(x, np.ndarray) or x is None:
        return x
    from onnx import OptionalProto, SequenceProto, TensorProto, numpy_helper

    if isinstance(x, TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, SequenceProto):
        return [_to_value(e) for e in numpy_helper.to_list(x)]
    if isinstance(x, OptionalProto):
        return _to_value(numpy_helper.to_optional(x))
    if isinstance(x, (list, tuple)):
        return [_to_value(e) for e in x]
    return np.asarray(x)


def _inputs_outputs(case: Any, ds: Any) -> tuple[list[Any], list[Any]]:
    inputs, outputs = ds
    return [_to_value(x) for x in inputs], [_to_value(x) for x in outputs]


def _bound_shapes(case: Any, names: list[str], inputs: list[Any]) -> dict[str, tuple[int, ...]]:
    """The shapes of the tensor inputs whose declared shape is symbolic (or absent), taken from the
    data set: what a user of such a model passes as ``ember.compile(..., input_shapes=...)``."""
    decl = {i.name: i.type for i in case.model.graph.input}
    out: dict[str, tuple[int, ...]] = {}
    for name, x in zip(names, inputs):
        t = decl[name]
        if not t.HasField("tensor_type") or not isinstance(x, np.ndarray):
            continue
        tt = t.tensor_type
        if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            out[name] = tuple(int(d) for d in x.shape)
    return out


def _check(got: Any, want: Any, case: Any, where: str) -> None:
    """Compare one output as onnx's runner does: sequences element by element, then shape, dtype
    and values (floats with the case's tolerances)."""
    if isinstance(want, list):
        assert isinstance(got, (list, tuple)), f"{where}: got {type(got).__name__}, expected a sequence"
        assert len(got) == len(want), f"{where}: {len(got)} elements, expected {len(want)}"
        for j, (g, w) in enumerate(zip(got, want)):
            _check(g, w, case, f"{where}[{j}]")
        return
    if want is None:
        assert got is None, f"{where}: got a value, expected an empty optional"
        return
    assert isinstance(got, np.ndarray), f"{where}: got {type(got).__name__}, expected an array"
    assert got.shape == want.shape, f"{where}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.name == "bfloat16":
        # onnx's own backend runner compares bfloat16 outputs in float32 with an rtol of at
        # least two bfloat16 ulps (2**-6); the same rule here, no looser
        rtol = max(case.rtol, 2**-6)
        np.testing.assert_allclose(
            got.astype(np.float32), want.astype(np.float32), rtol=rtol, atol=case.atol, err_msg=where
        )
    elif want.dtype.kind in "fc" or "float" in want.dtype.name:
        # (float8/float4 from ml_dtypes too: onnx's runner compares them with assert_allclose,
        # which takes a NaN to equal a NaN)
        np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def run_case(case: Any) -> None:
    """Compile and run one case; raises AssertionError (or an ember error) when it does not pass.

    A model whose inputs have symbolic dimensions is compiled with those inputs' shapes bound
    from the data set (once per distinct set of shapes)."""
    import ember

    names = [i.name for i in case.model.graph.input if i.name not in {t.name for t in case.model.graph.initializer}]
    models: dict[tuple[Any, ...], Any] = {}
    for ds in case.data_sets:
        inputs, expected = _inputs_outputs(case, ds)
        bound = _bound_shapes(case, names, inputs)
        key = tuple(sorted(bound.items()))
        if key not in models:
            models[key] = ember.compile(case.model, target="llvm", input_shapes=bound or None)
        outs = models[key](**dict(zip(names, inputs)))
        assert len(outs) == len(expected), f"{len(outs)} outputs, expected {len(expected)}"
        for k, (got, want) in enumerate(zip(outs, expected)):
            _check(got, want, case, f"output {k}")


def main() -> int:
    """Run every case; write the expected-failures JSON and a per-operator report."""
    import argparse
    import time
    import traceback

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    ap.add_argument("--write", action="store_true", help="rewrite the expected-failures file and the report")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cases = [c for c in load_cases() if args.k in c.name]
    results: dict[str, str] = {}
    t0 = time.time()
    for c in cases:
        try:
            run_case(c)
            results[c.name] = ""
        except Exception as exc:  # noqa: BLE001 - the report records every failure
            msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
            results[c.name] = msg
            if args.v:
                print(c.name, msg)
                if (
                    "Error" in type(exc).__name__
                    and "Assertion" not in type(exc).__name__
                    and "Unsupported" not in type(exc).__name__
                ):
                    traceback.print_exc(limit=-3)
    passed = sum(1 for v in results.values() if not v)
    print(f"{passed}/{len(cases)} passed ({100 * passed / max(len(cases), 1):.1f}%) in {time.time() - t0:.0f} s")
    if args.write:
        XFAIL_PATH.write_text(json.dumps({k: v for k, v in sorted(results.items()) if v}, indent=1) + "\n")
        write_report(cases, results)
    return 0


def write_report(cases: list[Any], results: dict[str, str]) -> None:
    """docs/onnx_node_report.md: pass counts per operator type."""
    per: dict[str, list[int]] = {}
    for c in cases:
        for op in case_ops(c):
            p = per.setdefault(op, [0, 0])
            p[1] += 1
            p[0] += 0 if results[c.name] else 1
    passed = sum(1 for v in results.values() if not v)
    lines = [
        "# ONNX backend node tests on the CPU: per-operator report",
        "",
        f"Generated by `python tests/frontend/node_cases.py --write`: {passed} of {len(cases)} cases pass "
        f"({100 * passed / len(cases):.1f} %). A case counts for every operator type in its model.",
        "",
        "| operator | passed | cases |",
        "| --- | ---: | ---: |",
    ]
    for op, (p, n) in sorted(per.items()):
        lines.append(f"| {op} | {p} | {n} |")
    lines += _failure_notes(results)
    Path(__file__).parents[2].joinpath("docs", "onnx_node_report.md").write_text("\n".join(lines) + "\n")


#: Why whole groups of cases fail (case-name prefix -> explanation); the rest give their error.
FAILURE_NOTES = {
    "test_bernoulli": "Random operators: ember draws from a seeded generator of its own (NumPy's PCG64, "
    "ember/ops/random.py) with the specification's semantics; a case stores the particular numbers the ONNX "
    "reference drew, which no other generator reproduces. tests/host_ops/test_random_ops.py checks shapes, "
    "dtypes, ranges and distribution statistics instead.",
    "test_training_dropout": "Dropout in training mode draws its mask at random: as for the random operators.",
    "test_dft_inverse": "The stored outputs are a float32 computation with errors up to 1.5e-6 while the "
    "case's tolerance is atol 1e-7 (rtol 1e-3 on values near 0); ember's result is within 4.4e-7 of the exact "
    "inverse DFT (NumPy's float64 ifft), closer than the reference, and still fails the comparison.",
}


def _failure_notes(results: dict[str, str]) -> list[str]:
    """The report's closing section: every failing case, grouped by the reason it fails."""
    failing = sorted(k for k, v in results.items() if v)
    if not failing:
        return []
    out = ["", "## Cases that fail, and why", ""]
    done: set[str] = set()
    for prefix, why in FAILURE_NOTES.items():
        group = [c for c in failing if c.startswith(prefix)]
        if group:
            out += [f"- {why} ({len(group)}: {', '.join(group)})"]
            done.update(group)
    out += [f"- {c}: {results[c]}" for c in failing if c not in done]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
