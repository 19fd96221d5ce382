"""The compile cache: keyed by loop IR + target + version, atomic entries, corrupt entries rebuilt,
location from ``cache_dir=`` or ``EMBER_CACHE_DIR``."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import ember
import ember.backends.cpu.codegen as cpu_codegen
import ember.cache as cache
from ember import te


def _schedule(scale: float = 2.0):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * scale, name="B")
    return te.create_schedule(B.op), [A, B]


def _check(f, scale=2.0):
    a = np.arange(9, dtype="float32")
    out = ember.nd.array(np.full(9, np.nan, dtype="float32"))
    f(ember.nd.array(a), out)
    np.testing.assert_array_equal(out.numpy(), a * np.float32(scale))


def _entries(root: Path) -> list[Path]:
    return [p for p in root.glob("*/*") if p.is_dir() and not p.name.startswith(".")]


class _CompileCounter:
    def __init__(self, monkeypatch):
        self.calls = 0
        real = cpu_codegen.compile_cpu

        def counting(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(cpu_codegen, "compile_cpu", counting)


@pytest.fixture
def counter(monkeypatch):
    return _CompileCounter(monkeypatch)


def test_second_build_is_a_cache_hit(tmp_path, counter):
    s, args = _schedule()
    f1 = ember.build(s, args, cache_dir=tmp_path)
    assert counter.calls == 1
    (entry,) = _entries(tmp_path)
    assert {p.name for p in entry.iterdir()} == {"meta.json", "module.ll", "module.o", "module.json"}
    s2, args2 = _schedule()  # the same kernel built afresh: same loop IR, same key
    f2 = ember.build(s2, args2, cache_dir=tmp_path)
    assert counter.calls == 1
    _check(f1)
    _check(f2)
    assert f2.get_source("llvm") == f1.get_source("llvm")


def test_key_covers_ir_target_and_version(tmp_path, counter, monkeypatch):
    ember.build(*_schedule(2.0), cache_dir=tmp_path)
    ember.build(*_schedule(3.0), cache_dir=tmp_path)  # other loop IR
    assert counter.calls == 2 and len(_entries(tmp_path)) == 2
    ember.build(*_schedule(2.0), target="llvm -num_threads=1", cache_dir=tmp_path)  # other target
    assert counter.calls == 3
    monkeypatch.setattr(cache, "_version", "0.0.0-other")  # other ember version
    _check(ember.build(*_schedule(2.0), cache_dir=tmp_path))
    assert counter.calls == 4 and len(_entries(tmp_path)) == 4
    assert cache.cache_key("a", "b") != cache.cache_key("ab")  # parts are separated


def _corrupt_truncate(entry: Path) -> None:
    data = (entry / "module.o").read_bytes()
    (entry / "module.o").write_bytes(data[: len(data) // 2])


def _corrupt_flip(entry: Path) -> None:
    data = bytearray((entry / "module.o").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (entry / "module.o").write_bytes(bytes(data))


def _corrupt_meta(entry: Path) -> None:
    (entry / "meta.json").write_text("{not json")


def _corrupt_missing(entry: Path) -> None:
    (entry / "module.json").unlink()


def _corrupt_empty(entry: Path) -> None:
    for p in entry.iterdir():
        p.write_bytes(b"")


def _resigned(entry: Path, name: str, data: bytes) -> None:
    """Replace file ``name`` of the entry and recompute its digest: only content checks catch it."""
    import hashlib
    import json

    (entry / name).write_bytes(data)
    meta = json.loads((entry / "meta.json").read_text())
    meta["files"][name] = hashlib.sha256(data).hexdigest()
    (entry / "meta.json").write_text(json.dumps(meta))


def _corrupt_truncate_resigned(entry: Path) -> None:
    _resigned(entry, "module.o", (entry / "module.o").read_bytes()[:200])


def _corrupt_section_table_resigned(entry: Path) -> None:
    data = (entry / "module.o").read_bytes()
    _resigned(entry, "module.o", data[:0x28] + (len(data) * 4).to_bytes(8, "little") + data[0x30:])


def _corrupt_module_json_resigned(entry: Path) -> None:
    _resigned(entry, "module.json", b'{"format": "ember-cpu-module/1", "functions": [{"name": 7}]}')


def _corrupt_not_json_resigned(entry: Path) -> None:
    _resigned(entry, "module.json", b"\xff\xfe not json")


def _corrupt_half_written(entry: Path) -> None:
    (entry / "meta.json").write_text('{"files": {"module.o": "')


@pytest.mark.parametrize("corrupt", [_corrupt_truncate, _corrupt_flip, _corrupt_meta, _corrupt_missing,
                                     _corrupt_empty, _corrupt_truncate_resigned, _corrupt_section_table_resigned,
                                     _corrupt_module_json_resigned, _corrupt_not_json_resigned,
                                     _corrupt_half_written],
                         ids=["truncated", "bitflip", "meta", "missing", "empty", "truncated-resigned",
                              "section-table-resigned", "module-json-resigned", "not-json-resigned", "half-written"])
def test_corrupt_entry_is_rebuilt(tmp_path, counter, corrupt):
    s, args = _schedule()
    ember.build(s, args, cache_dir=tmp_path)
    (entry,) = _entries(tmp_path)
    corrupt(entry)
    f = ember.build(*_schedule(), cache_dir=tmp_path)
    assert counter.calls == 2  # rebuilt, not loaded
    _check(f)
    assert cache.load(tmp_path, entry.name) is not None  # and the entry was rewritten whole
    ember.build(*_schedule(), cache_dir=tmp_path)
    assert counter.calls == 2


def test_environment_variable_and_off(tmp_path, counter, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "env"))
    ember.build(*_schedule(), name="from_env")
    assert len(_entries(tmp_path / "env")) == 1
    assert cache.cache_dir() == tmp_path / "env"
    assert cache.cache_dir(tmp_path / "explicit") == tmp_path / "explicit"  # cache_dir= wins
    monkeypatch.setenv("EMBER_CACHE_DIR", "off")
    assert cache.cache_dir() is None
    ember.build(*_schedule(), name="from_env")
    ember.build(*_schedule(), name="from_env")
    assert counter.calls == 3  # nothing cached while off


def test_use_cache_false_writes_nothing(tmp_path, counter):
    _check(ember.build(*_schedule(), cache_dir=tmp_path, use_cache=False))
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_unwritable_cache_is_skipped(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    _check(ember.build(*_schedule(), cache_dir=blocker / "cache"))


def test_store_is_atomic_under_concurrent_writers(tmp_path):
    files = {"a.bin": b"x" * 100_000, "b.bin": b"y" * 1000}
    errors: list[BaseException] = []

    def writer():
        try:
            for _ in range(20):
                cache.store(tmp_path, "ab" + "0" * 62, files, {"n": 1})
                hit = cache.load(tmp_path, "ab" + "0" * 62)
                assert hit is None or (hit["a.bin"] == files["a.bin"] and hit["b.bin"] == files["b.bin"])
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    hit = cache.load(tmp_path, "ab" + "0" * 62)
    assert hit is not None and hit["a.bin"] == files["a.bin"] and hit["meta"] == {"n": 1}
    leftovers = [p.name for p in (tmp_path / "ab").iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no temporary directories left behind


def test_default_location_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("EMBER_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / ".cache" / "ember"


def test_kernels_differing_only_in_types_do_not_share_an_entry(tmp_path, counter):
    """Regression: a size var of int64 and one of int32 print the same loop IR, so both kernels
    shared one cache entry (the second got the first's int32 signature)."""

    def build(dt):
        n = te.var("n", dt)
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
        return ember.build(te.create_schedule(B.op), [A, B], cache_dir=tmp_path)

    f32, f64 = build("int32"), build("int64")
    assert counter.calls == 2 and len(_entries(tmp_path)) == 2
    assert f32.get_function("main").sig["scalars"][0]["dtype"] == "int32"
    assert f64.get_function("main").sig["scalars"][0]["dtype"] == "int64"
    _check(f64)
