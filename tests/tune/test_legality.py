"""Search-space legality: illegal points are rejected before any build, the search proposes only
legal points, tasks come from a model's distinct kernels with their weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ember
from ember.strategy import ConfigEntity
from ember.tune import extract_tasks, kernel_task
from ember.tune.search import TaskSearch, config_key

from .conftest import gemm_template, matmul_model


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "cuda -arch=sm_90", "rocm -mcpu=gfx942"])
def test_illegal_points_are_rejected_before_any_build(target):
    (task,) = extract_tasks(matmul_model(70, 48, 52), target)
    illegal = [c for c in task.space.sample(400, seed=1) if not task.space.is_valid(c)]
    assert illegal, f"the {target} space of {task.name} should hold illegal points"
    for cfg in illegal[:5]:
        with pytest.raises(ember.InvalidConfig, match="illegal configuration"):
            task.build(cfg.to_json())
    search = TaskSearch(task, model="numpy", seed=0)
    proposed = search.propose(16)
    assert proposed[0] == task.space.default  # the heuristic schedule is measured first
    assert all(task.space.is_valid(c) for c in proposed)
    assert len({config_key(c) for c in proposed}) == len(proposed)


def test_evolution_proposes_legal_unmeasured_points():
    (task,) = extract_tasks(matmul_model(70, 48, 52), "cuda -arch=sm_90")
    search = TaskSearch(task, model="numpy", seed=0)
    first = search.propose(12)
    for k, cfg in enumerate(first):  # invent times: smaller register tiles are faster
        search.add(cfg, None if k % 5 == 4 else 1e-3 * (1 + cfg["tile_m"].size[2]))
    later = search.propose(12)
    assert later and all(task.space.is_valid(c) for c in later)
    assert not {config_key(c) for c in later} & set(search.measured)


def test_model_tasks_are_distinct_kernels_weighted_by_count():
    tasks = extract_tasks(matmul_model(33, 40, 40, layers=3), "llvm")
    assert len(tasks) == 1 and tasks[0].weight == 3
    out = json.loads(tasks[0].workload)["out"][0]  # [batch, rows, columns padded to whole panels]
    assert out[:2] == [1, 33] and out[2] >= 40
    assert tasks[0].flops == 2 * 33 * out[2] * 40


def test_kernel_task_and_bad_arguments():
    schedule, args, space = gemm_template(20, 24, 16)
    task = kernel_task(schedule, args, "llvm", space, name="test.gemm")
    assert task.name == "test.gemm" and task.flops == 2 * 20 * 24 * 16
    big = ConfigEntity({"rows": space["rows"].candidates[-1], "cols": space["cols"].candidates[-1],
                        "red": space["red"].candidates[0], "unroll_rows": space["unroll_rows"].candidates[0]})
    with pytest.raises(ember.InvalidConfig, match="register tile"):
        task.build(big)
    with pytest.raises(ember.TuningError, match="space="):
        ember.tune_kernel(schedule, args, "llvm", trials=4)
    for bad in (-1, 0, 2.5, True):
        with pytest.raises(ember.TuningError, match="trials"):
            ember.tune_kernel(schedule, args, "llvm", space=space, trials=bad)
    for budget in (0, "0m", -3, "soon"):
        with pytest.raises(ember.TuningError, match="time budget"):
            ember.tune_kernel(schedule, args, "llvm", space=space, trials=4, time_budget=budget)
    with pytest.raises(ember.TargetError, match="unknown target"):
        ember.tune(matmul_model(8, 8, 8), "tpu", trials=4)
    with pytest.raises(ember.TuningError, match="no such file"):
        ember.tune("/nonexistent/model.onnx", "llvm", trials=4)


def test_rocm_without_a_gpu_builds_and_says_measuring_needs_the_device(tmp_path):
    from ember.tune.keys import gpu_present

    if gpu_present("rocm"):
        pytest.skip("an AMD GPU is present: this test covers the build-only path")
    try:
        result = ember.tune(matmul_model(64, 40, 48), "rocm -mcpu=gfx942", trials=4, db=tmp_path / "t.db",
                            quiet=True, batch=4)
    except ember.ToolchainError as exc:
        pytest.skip(f"no AMD GPU linker here: {exc}")
    assert not result.measured and result.built == 4 and result.build_failed == 0
    assert any("measuring needs the device" in n for n in result.notes)
    with ember.tune.TuningDB(tmp_path / "t.db") as db:
        assert len(db) == 0  # nothing measured, nothing recorded


def test_symbolic_input_dimensions_need_input_shapes():
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((24, 40), "float32"), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 40])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(ember.TuningError, match=r"x=\['batch', 24\].*--input-shape"):
        extract_tasks(model, "llvm")
    (task,) = extract_tasks(model, "llvm", input_shapes={"x": [50, 24]})
    assert json.loads(task.workload)["out"][0][1] == 50
