"""``ember hipify`` (ember.hipify.cli.main): output modes, statistics, strictness and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ember.hipify.cli import EXIT_INPUT, EXIT_OK, EXIT_STRICT, EXIT_USAGE, main

CU = "#include <cuda_runtime.h>\r\nint main() { float* p; cudaMalloc(&p, 4); cudaFree(p); }\r\n"
HIP = "#include <hip/hip_runtime.h>\r\nint main() { float* p; hipMalloc(&p, 4); hipFree(p); }\r\n"


def make(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.cu").write_bytes(CU.encode())
    (src / "sub" / "b.cuh").write_bytes(b"#pragma once\ncudaStream_t s;\n")
    (src / "notes.txt").write_text("cudaMalloc")
    return src


def test_single_file_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make(tmp_path)
    assert main([str(src / "a.cu")]) == EXIT_OK
    assert capsys.readouterr().out == HIP  # written as str: the CRLF line endings are kept
    assert (src / "a.cu").read_bytes() == CU.encode()


def test_output_file_and_directory(tmp_path: Path) -> None:
    src = make(tmp_path)
    assert main([str(src / "a.cu"), "-o", str(tmp_path / "x.hip")]) == EXIT_OK
    assert (tmp_path / "x.hip").read_bytes() == HIP.encode()
    assert main([str(src), "-o", str(tmp_path / "out"), "-q"]) == EXIT_OK
    assert (tmp_path / "out" / "a.cu").read_bytes() == HIP.encode()
    assert (tmp_path / "out" / "sub" / "b.cuh").read_text() == "#pragma once\nhipStream_t s;\n"
    assert not (tmp_path / "out" / "notes.txt").exists()
    assert (src / "a.cu").read_bytes() == CU.encode()


def test_suffix_and_inplace(tmp_path: Path) -> None:
    src = make(tmp_path)
    assert main([str(src), "--suffix", ".hip", "-q"]) == EXIT_OK
    assert (src / "a.cu.hip").read_bytes() == HIP.encode()
    assert (src / "a.cu").read_bytes() == CU.encode()
    assert main([str(src / "a.cu"), "--inplace", "-q"]) == EXIT_OK
    assert (src / "a.cu").read_bytes() == HIP.encode()
    assert (src / "a.cu.orig").read_bytes() == CU.encode()


def test_output_onto_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make(tmp_path)
    assert main([str(src / "a.cu"), "-o", str(src / "a.cu")]) == EXIT_INPUT
    assert "--inplace" in capsys.readouterr().err
    assert (src / "a.cu").read_bytes() == CU.encode()
    assert main([str(src), "-o", str(src), "-q"]) == EXIT_INPUT
    assert (src / "a.cu").read_bytes() == CU.encode()


def test_dry_run_prints_a_diff_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make(tmp_path)
    before = sorted(p.name for p in src.rglob("*"))
    assert main([str(src), "--dry-run", "-q"]) == EXIT_OK
    diff = capsys.readouterr().out
    assert "--- a/" in diff and "+++ b/" in diff and "-cudaStream_t s;" in diff and "+hipStream_t s;" in diff
    assert sorted(p.name for p in src.rglob("*")) == before


def test_stats_json_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make(tmp_path)
    (src / "c.cu").write_text("cudaProfilerInitialize(0, 0, 0);\n")
    js = tmp_path / "stats.json"
    assert main([str(src), "-o", str(tmp_path / "o"), "--print-stats", "--stats-json", str(js), "-q"]) == EXIT_OK
    text = capsys.readouterr().out
    assert "CONVERSION %" in text and "TOTAL statistics (3 files" in text
    data = json.loads(js.read_text())
    assert data["total"]["converted"] == 4 and data["total"]["unconverted"] == 1
    assert data["total"]["percent"] == pytest.approx(80.0)
    per = {Path(f["file"]).name: f for f in data["files"]}
    assert per["a.cu"]["lines_changed"] == 2 and per["a.cu"]["lines_total"] == 2
    assert per["c.cu"]["unconverted_refs"][0]["name"] == "cudaProfilerInitialize"


def test_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make(tmp_path)
    assert main([str(src), "--dry-run", "--strict", "-q"]) == EXIT_OK
    (src / "c.cu").write_text("x();\ncudaProfilerInitialize(0, 0, 0);\n")
    assert main([str(src), "--dry-run", "--strict"]) == EXIT_STRICT
    err = capsys.readouterr().err
    assert "c.cu:2: unconverted: cudaProfilerInitialize" in err and "hipProfilerStart" in err


def test_list_maps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list-maps"]) == EXIT_OK
    text = capsys.readouterr().out
    for name in (
        "runtime",
        "driver",
        "device",
        "types",
        "cublas",
        "curand",
        "cufft",
        "cusparse",
        "cusolver",
        "cub",
        "cudnn",
        "includes",
    ):
        assert f"\n{name} " in text
    lines = text.splitlines()
    assert lines[0] == "HIP target version: 6.4"
    rows = {line.split()[0]: int(line.split()[1]) for line in lines[2:]}
    assert rows["runtime"] > 200 and rows["cublas"] > 300 and rows["total"] > 2500
    assert rows["hip64"] > 300  # HIP 6.4's additions are applied for the default target


def test_usage_errors(tmp_path: Path) -> None:
    src = make(tmp_path)
    assert main([]) == EXIT_USAGE
    assert main([str(src)]) == EXIT_USAGE  # a directory needs -o, --suffix, --inplace or --dry-run
    assert main([str(src / "a.cu"), "--suffix", " "]) == EXIT_USAGE
    with pytest.raises(SystemExit):
        main([str(src), "--launch-syntax", "bogus"])


def test_bad_inputs_are_reported_and_the_rest_translated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make(tmp_path)
    (src / "bin.cu").write_bytes(b"\x7fELF\x00\x00cudaMalloc")
    (src / "latin1.cu").write_bytes("// caf\xe9\ncudaFree(p);\n".encode("latin-1"))
    (src / "empty.cu").write_bytes(b"")
    (src / "open.cu").write_text("int x;\n/* no end\ncudaFree(p);\n")
    rc = main([str(src), str(tmp_path / "missing.cu"), "-o", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert rc == EXIT_INPUT
    assert "missing.cu: no such file or directory" in err
    assert "bin.cu: binary file" in err
    assert "latin1.cu: not UTF-8 (byte 0xe9 at offset 6)" in err and "iconv" in err
    assert "empty.cu: empty file" in err
    assert "open.cu:2: unterminated /* comment" in err
    assert (tmp_path / "out" / "a.cu").read_bytes() == HIP.encode()
    assert (tmp_path / "out" / "empty.cu").read_bytes() == b""
    assert not (tmp_path / "out" / "bin.cu").exists() and not (tmp_path / "out" / "open.cu").exists()
    assert (src / "open.cu").read_text() == "int x;\n/* no end\ncudaFree(p);\n"


def test_module_entry_point(tmp_path: Path) -> None:
    import subprocess
    import sys

    src = make(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "ember.hipify", str(src / "a.cu")], capture_output=True, check=False)
    assert proc.returncode == 0 and proc.stdout == HIP.encode()


SIMD = "#pragma once\n#include <cuda_runtime.h>\n__device__ int f(int a) { return __vsub4(a, 0x08080808); }\n"


def test_compat_header_written_where_outputs_include_it(tmp_path: Path) -> None:
    from ember.hipify.maps import compat_header_text

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "q.cuh").write_text(SIMD)
    (src / "plain.cu").write_text("cudaStream_t s;\n")
    assert main([str(src), "-o", str(tmp_path / "out"), "-q"]) == EXIT_OK
    assert (tmp_path / "out" / "ember_hip_compat.h").read_text() == compat_header_text()
    assert (tmp_path / "out" / "sub" / "q.cuh").read_text() == (
        '#pragma once\n#include "../ember_hip_compat.h"\n#include <hip/hip_runtime.h>\n'
        "__device__ int f(int a) { return ember_vsub4(a, 0x08080808); }\n"
    )
    assert (tmp_path / "out" / "plain.cu").read_text() == "hipStream_t s;\n"  # no include where not needed
    assert not (src / "ember_hip_compat.h").exists()
    assert main([str(src), "--inplace", "-q"]) == EXIT_OK
    assert (src / "ember_hip_compat.h").exists()
    assert '#include "../ember_hip_compat.h"' in (src / "sub" / "q.cuh").read_text()


def test_compat_header_on_stdout_says_how_to_get_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q.cu").write_text(SIMD)
    assert main([str(tmp_path / "q.cu")]) == EXIT_OK
    out, err = capsys.readouterr()
    assert '#include "ember_hip_compat.h"' in out and "--write-compat-header" in err
    assert main(["--write-compat-header", str(tmp_path / "inc")]) == EXIT_OK
    assert "ember_vsub4" in (tmp_path / "inc" / "ember_hip_compat.h").read_text()


def test_hip_version_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "b.cu").write_text("__device__ nv_bfloat162 h(nv_bfloat162 x) { return x; }\n")
    assert main([str(tmp_path / "b.cu"), "--strict"]) == EXIT_OK
    assert "__hip_bfloat162 h(__hip_bfloat162 x)" in capsys.readouterr().out
    assert main([str(tmp_path / "b.cu"), "--strict", "--hip-version", "5.2"]) == EXIT_STRICT
    assert "unconverted: nv_bfloat162" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "b.cu"), "--hip-version", "4.0"])
