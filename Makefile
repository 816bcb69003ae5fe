# The two commands a newcomer needs; each sets up its own virtualenv from scratch.
#   make run    runs the main job (then `.venv/bin/speedtronic summarize runs/...`: nothing is activated)
#   make test   runs ruff (lint and format check), mypy --strict and every test, and prints its wall time
#   make bench  prints every speed goal and any missed (emit: bench.py; read-back: readback.py --goals;
#               alerts: alerts.py)
PYTHON ?= python3
VENV ?= .venv
# A CPU build is on these machines' disk; an unpinned torch pulls a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: run test check lint typecheck unit bench clean

run: $(VENV)/.run-installed
	$(BIN)/speedtronic train

# `make test` is `make check` timed: it prints its wall time, set-up included, and keeps check's exit code.
test:
	@start=$$(date +%s); $(MAKE) --no-print-directory check; rc=$$?; \
	echo "make test: exit $$rc after $$(( $$(date +%s) - start )) s of wall time"; exit $$rc

check: $(VENV)/.dev-installed lint typecheck unit

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check speedtronic tests examples benchmarks
	$(BIN)/ruff format --check speedtronic tests examples benchmarks

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy --strict speedtronic

# One worker per core (pytest-xdist); a test file runs whole on one worker, so its module-scoped
# fixtures (a trained run) are built once. TEST_JOBS=0 runs in this process.
TEST_JOBS ?= auto
unit: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile --durations=20

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The main job needs the runtime (torch, PyYAML) and TensorBoard for its event files.
$(VENV)/.run-installed: pyproject.toml | $(BIN)/python
	$(PIP) "$(TORCH_SPEC)"
	$(PIP) -e ".[torch,tensorboard,progress,plot]"
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(PIP) "$(TORCH_SPEC)"
	$(PIP) -e ".[all,dev]"
	touch $@ $(VENV)/.run-installed

bench: $(VENV)/.dev-installed
	$(BIN)/python benchmarks/bench.py
	$(BIN)/python benchmarks/readback.py --goals
	$(BIN)/python benchmarks/alerts.py
	$(BIN)/python benchmarks/tail.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
