"""The records database: round trip, target keys, corruption, foreign files, concurrent writers,
JSON lines, versions."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3

import pytest

import ember
from ember.tune import Record, TargetKey, TuningDB, default_db_path, target_key
from ember.tune.apply import db_path, records_chooser

WL = json.dumps({"template": "test.gemm", "args": [[[4, 4], "float32"]]}, sort_keys=True)
HERE = TargetKey("llvm", "znver3", ("avx", "avx2", "fma"), 2, "AMD EPYC 7B13")


def rec(seconds: float | None, mr: int, target: TargetKey = HERE, workload: str = WL, **kw) -> Record:
    return Record(workload, target, {"index": -1, "knobs": {"mr": {"val": mr}}}, seconds,
                  None if seconds else "run: crashed", flops=1e6, **kw)


def test_round_trip_and_best(tmp_path):
    with TuningDB(tmp_path / "t.db") as db:
        assert db.add([rec(2e-3, 4), rec(1e-3, 8), rec(None, 14)]) == 3
        assert db.add(rec(5e-3, 4)) == 0  # the same configuration again: kept as it was
        assert len(db) == 3
        best = db.best(HERE, WL)
        assert best is not None and best.config["knobs"]["mr"]["val"] == 8 and best.gflops == pytest.approx(1.0)
        assert [r.valid for r in db.records(HERE, WL)] == [True, True, False]
    with TuningDB(tmp_path / "t.db") as db:  # persisted
        assert len(db.records(HERE, WL, valid_only=True)) == 2


def test_records_of_another_target_are_never_applied(tmp_path):
    other_cpu = TargetKey("llvm", "znver3", ("avx", "avx2", "fma"), 16, "AMD EPYC 7B13")  # other thread count
    other_isa = TargetKey("llvm", "skylake-avx512", ("avx", "avx2", "avx512f", "fma"), 2, "")
    gpu = TargetKey("cuda", "sm_90", (), 0, "NVIDIA H100 80GB HBM3")
    with TuningDB(tmp_path / "t.db") as db:
        db.add([rec(1e-3, 4, other_cpu), rec(1e-3, 5, other_isa), rec(1e-3, 6, gpu)])
        assert db.best(HERE, WL) is None
        assert db.best(gpu, WL) is not None
        # a device name one side does not know is not compared (a cross-compile for sm_90)
        assert db.best(TargetKey("cuda", "sm_90", (), 0, ""), WL) is not None
        assert db.best(TargetKey("cuda", "sm_90", (), 0, "NVIDIA H200"), WL) is None


def test_garbage_file_is_moved_aside_with_a_warning(tmp_path):
    path = tmp_path / "t.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.warns(RuntimeWarning, match="unusable"):
        db = TuningDB(path)
    with db:
        assert len(db) == 0
        db.add(rec(1e-3, 4))
    aside = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not")


def test_truncated_database_is_moved_aside(tmp_path):
    path = tmp_path / "t.db"
    with TuningDB(path) as db:
        db.add([rec(1e-3 * (k + 1), k) for k in range(200)])
    conn = sqlite3.connect(path)  # fold the WAL into the file, then cut the file in half
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.warns(RuntimeWarning, match="unusable"):
        with TuningDB(path) as db:
            assert len(db) == 0


def test_foreign_sqlite_database_is_moved_aside(tmp_path):
    path = tmp_path / "t.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.warns(RuntimeWarning, match="not an ember tuning database"):
        with TuningDB(path) as db:
            assert len(db) == 0


def _writer(path: str, who: int, n: int) -> None:
    with TuningDB(path) as db:
        for k in range(n):
            db.add(rec(1e-3 + k * 1e-6, 1000 * who + k))


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "t.db")
    TuningDB(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with TuningDB(path) as db:
        assert len(db) == 160


def test_json_lines_export_import(tmp_path):
    with TuningDB(tmp_path / "a.db") as a:
        a.add([rec(1e-3, 4), rec(None, 5), rec(2e-3, 6, ember_version="0.0.9")])
        assert a.export_jsonl(tmp_path / "r.jsonl") == 3
    with TuningDB(tmp_path / "b.db") as b:
        assert b.import_jsonl(tmp_path / "r.jsonl") == 3
        assert b.import_jsonl(tmp_path / "r.jsonl") == 0
        recs = b.records(HERE, WL)
        assert [r.seconds for r in recs] == [1e-3, None, 2e-3] and recs[2].ember_version == "0.0.9"
    bad = tmp_path / "bad.jsonl"
    bad.write_text((tmp_path / "r.jsonl").read_text() + "{not json\n")
    with TuningDB(tmp_path / "c.db") as c, pytest.raises(ember.TuningError, match="line 4"):
        c.import_jsonl(bad)


def test_default_path_and_env(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_TUNING_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"
    assert db_path(None) is None  # the default file does not exist yet: no records, nothing created
    assert not (tmp_path / "x.db").exists()
    monkeypatch.setenv("EMBER_TUNING_DB", "off")
    assert db_path(None) is None
    assert db_path(False) is None
    with pytest.raises(ember.TuningError, match="no such file"):
        db_path(tmp_path / "missing.db")


def test_compile_applies_records_of_this_target_only(tmp_path):
    """A record stored under another target leaves compile's kernels alone; under this target it is
    applied (and one that no longer fits the space is ignored with a note)."""
    from ember.strategy import strategy_for
    from ember.tune.task import extract_tasks

    from .conftest import matmul_model

    model = matmul_model(40, 24, 36)
    (task,) = extract_tasks(model, "llvm")
    key = target_key("llvm")
    cfg = next(c for c in task.space.sample(50, seed=3, valid_only=True) if c != task.space.default)
    path = tmp_path / "t.db"
    with TuningDB(path) as db:
        other = TargetKey("llvm", "other-cpu", key.features, key.threads, "")
        db.add(Record(task.workload, other, cfg.to_json(), 1e-6))
    assert records_chooser(path, "llvm") is None
    with TuningDB(path) as db:
        db.add(Record(task.workload, key, cfg.to_json(), 1e-6))
        bad = {"index": -1, "knobs": {"mr": {"val": 99}}}
        db.add(Record(task.workload, key, bad, 1e-9, ember_version="0.0.1"))
    chooser = records_chooser(path, "llvm")
    assert chooser is not None
    outs = task.args[len(task.args) - sum(s.out for s in task.specs):]
    n_out = sum(s.check for s in task.specs)
    with pytest.warns(RuntimeWarning, match="does not fit"):
        got = chooser(outs[:n_out], outs[n_out:], strategy_for("llvm"))
    assert got == cfg and chooser.applied == 1


def test_compile_with_a_corrupt_database_warns_and_compiles(tmp_path, rng):
    import numpy as np

    from .conftest import matmul_model, reference

    path = tmp_path / "t.db"
    path.write_bytes(b"\x00garbage" * 512)
    model = matmul_model(12, 10, 9)
    with pytest.warns(RuntimeWarning, match="unusable"):
        compiled = ember.compile(model, "llvm", tuning_db=path)
    x = rng.standard_normal((12, 10)).astype("float32")
    np.testing.assert_allclose(compiled(x)[0], reference(model, x), rtol=1e-5, atol=1e-5)
