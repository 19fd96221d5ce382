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


def _to_array(x: Any) -> np.ndarray:
    """One data-set entry as a NumPy array. Some cases store their data as ``TensorProto``s
    (``np.asarray`` would wrap those in an object array); they are decoded exactly as onnx's own
    backend runner decodes them (``numpy_helper.to_array``)."""
    if isinstance(x, np.ndarray):
        return x
    from onnx import TensorProto, numpy_helper

    if isinstance(x, TensorProto):
        return numpy_helper.to_array(x)
    return np.asarray(x)


def _inputs_outputs(case: Any, ds: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    inputs, outputs = ds
    return [_to_array(x) for x in inputs], [_to_array(x) for x in outputs]


def run_case(case: Any) -> None:
    """Compile and run one case; raises AssertionError (or an ember error) when it does not pass."""
    import ember

    model = ember.compile(case.model, target="llvm")
    names = [i.name for i in case.model.graph.input if i.name not in {t.name for t in case.model.graph.initializer}]
    for ds in case.data_sets:
        inputs, expected = _inputs_outputs(case, ds)
        outs = model(**dict(zip(names, inputs)))
        assert len(outs) == len(expected), f"{len(outs)} outputs, expected {len(expected)}"
        for k, (got, want) in enumerate(zip(outs, expected)):
            assert got.shape == want.shape, f"output {k}: shape {got.shape}, expected {want.shape}"
            assert got.dtype == want.dtype, f"output {k}: dtype {got.dtype}, expected {want.dtype}"
            if want.dtype.name == "bfloat16":
                # onnx's own backend runner compares bfloat16 outputs in float32 with an rtol of at
                # least two bfloat16 ulps (2**-6); the same rule here, no looser
                rtol = max(case.rtol, 2**-6)
                np.testing.assert_allclose(
                    got.astype(np.float32), want.astype(np.float32), rtol=rtol, atol=case.atol, err_msg=f"output {k}"
                )
            elif want.dtype.kind in "fc":
                np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol, err_msg=f"output {k}")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"output {k}")


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
    Path(__file__).parents[2].joinpath("docs", "onnx_node_report.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
