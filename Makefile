# The two commands of the README: `make demo` and `make test`. Both work on a fresh machine.
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.ember-installed
TEST_STAMP := $(VENV)/.ember-test-installed

.PHONY: demo test lint system-deps clean

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
	$(VPY) -m pytest -q -n 2 tests

# ruff, and import-linter's layer contracts (pyproject.toml: no module imports a layer above it).
lint: $(TEST_STAMP)
	$(VPY) -m ruff check ember tests benchmarks examples scripts
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) build *.egg-info
