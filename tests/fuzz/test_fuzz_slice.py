"""The fast, fixed-seed slice of the fuzzer (``make test``; the long run is ``make fuzz``).

Hypothesis draws small random models (structured operator chains, some rules broken on
purpose; and mutations of valid models), derandomized so every run tries the same ones. Each
is judged by :mod:`tests.fuzz.harness`: ember and ONNX Runtime each run it in a worker process
with a time limit, and a crash, a hang, a foreign exception, a model ONNX Runtime rejects but
ember runs, or different outputs fail the test (Hypothesis then shrinks the model).
"""

from __future__ import annotations

import pytest

pytest.importorskip("onnx", reason="the fuzzer needs onnx")
pytest.importorskip("onnxruntime", reason="the fuzzer compares with ONNX Runtime")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from .harness import Fuzzer  # noqa: E402
from .models import HypothesisChooser, structured_model  # noqa: E402
from .mutate import mutated_model  # noqa: E402


def _slice(n: int) -> settings:
    return settings(max_examples=n, derandomize=True, deadline=None, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory):
    fz = Fuzzer(timeout=120.0, cache_dir=str(tmp_path_factory.mktemp("fuzz-cache")))
    yield fz
    fz.close()


def _check(fuzzer: Fuzzer, case, source: str) -> None:
    v = fuzzer.check(case, source)
    assert not v.bug, f"{v.kind}: {case.note}\n{v.detail}"


@_slice(200)
@given(st.data())
def test_structured_models(fuzzer: Fuzzer, data: st.DataObject) -> None:
    _check(fuzzer, structured_model(HypothesisChooser(data)), "structured")


@_slice(300)
@given(st.data())
def test_mutated_models(fuzzer: Fuzzer, data: st.DataObject) -> None:
    _check(fuzzer, mutated_model(HypothesisChooser(data)), "mutated")


def test_slice_tried_both_kinds(fuzzer: Fuzzer) -> None:
    """The figures of this slice (printed with ``-s``): every model judged, none a bug."""
    f = fuzzer.stats.figures()
    print(f)
    assert f["crashes"] == f["hangs"] == f["foreign exceptions"] == f["accepted-invalid"] == f["mismatches"] == 0
