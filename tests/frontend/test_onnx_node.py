"""The ONNX backend node test suite on the CPU, generated from the installed onnx package.

Every case compiles its model with ember and compares each output with the expected one at the
case's tolerances. Cases listed in onnx_node_xfail.json (with the reason) are expected to fail;
a listed case that passes fails the run (strict), so the list stays exact. Regenerate the list
and docs/onnx_node_report.md with ``python tests/frontend/node_cases.py --write``.
"""

from __future__ import annotations

import pytest

from .node_cases import load_cases, load_xfail, run_case

onnx = pytest.importorskip("onnx", reason="the ONNX node tests need the onnx package (pip install onnx)")

_CASES = load_cases()
_XFAIL = load_xfail()


def _params() -> list:
    out = []
    for c in _CASES:
        marks = [pytest.mark.xfail(reason=_XFAIL[c.name], strict=True)] if c.name in _XFAIL else []
        out.append(pytest.param(c, id=c.name, marks=marks))
    return out


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.parametrize("case", _params())
def test_node(case) -> None:
    run_case(case)


def test_suite_is_generated() -> None:
    assert len(_CASES) > 1000, f"only {len(_CASES)} node cases were generated from onnx {onnx.__version__}"
