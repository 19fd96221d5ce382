# The two commands of the README: `make demo` and `make test`. Both work on a fresh machine.
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.ember-installed
TEST_STAMP := $(VENV)/.ember-test-installed

.PHONY: demo test test-long lint system-deps clean fuzz tune-bench

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

$(STAMP): $(VPY) pyproject.toml
	$(VPY) -m pip install -q -e '.[demo]'
	touch $@

$(TEST_STAMP): $(STAMP)
	$(VPY) -m pip install -q -e '.[test]'
	touch $@

# Debian packages the AMD path and the hipify tests need (ld.lld, hipcc, ROCm device libraries).
system-deps:
	scripts/install_system_deps.sh

demo: $(STAMP)
	$(VENV)/bin/ember demo

test: $(TEST_STAMP) system-deps
	$(VPY) -m ruff check ember tests benchmarks examples scripts
	$(VENV)/bin/lint-imports
	$(VPY) -m pytest -q -n 2 -m "not long" tests

# The tests marked `long` (whole quantized ResNet-50s, the PP-OCR recognizer and detector, an
# encoder with symbolic shapes, a long recurrent reference): minutes each, so not in `make test`.
test-long: $(TEST_STAMP)
	$(VPY) -m pytest -q -n 2 -m long tests

# The long fuzz run (tests/fuzz; `make test` runs a fixed-seed slice of it): random and mutated
# ONNX models, each compiled and run by ember and by ONNX Runtime in worker processes, for
# FUZZ_MINUTES minutes. Prints the figures (models tried, crashes, hangs, foreign exceptions,
# accepted-invalid, mismatches); the models of any finding go to build/fuzz/findings.
FUZZ_MINUTES ?= 30
fuzz: $(TEST_STAMP)
	$(VPY) -m tests.fuzz.run --minutes $(FUZZ_MINUTES)

# The auto-tuning benchmarks (docs/tuning.md; `make test` runs the fast tests/tune): a 1024^3 GEMM
# tuned on the CPU next to OpenBLAS, and where an NVIDIA GPU is present SGEMM 4096^3 against cuBLAS
# and ResNet-50's kernels. Results in benchmarks/results/tune_*.json.
TUNE_TRIALS ?= 200
tune-bench: $(TEST_STAMP)
	$(VPY) benchmarks/tune_cpu.py --n 1024 --trials $(TUNE_TRIALS) --threads 2 --out benchmarks/results
	@if $(VPY) -c "from ember.tune.keys import gpu_present; raise SystemExit(not gpu_present('cuda'))"; then \
	  $(VPY) benchmarks/tune_gpu.py --out benchmarks/results; \
	else echo "tune-bench: no NVIDIA GPU here, the GPU tuning benchmark is skipped"; fi

# ruff, and import-linter's layer contracts (pyproject.toml: no module imports a layer above it).
lint: $(TEST_STAMP)
	$(VPY) -m ruff check ember tests benchmarks examples scripts
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) build *.egg-info
