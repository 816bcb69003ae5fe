# The two commands a newcomer needs; each sets up its own virtualenv from scratch.
#   make run    runs the main job
#   make test   runs ruff, mypy --strict and every test
PYTHON ?= python3
VENV ?= .venv
# A CPU build is on these machines' disk; an unpinned torch pulls a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: run test lint typecheck unit bench clean

run: $(VENV)/.run-installed
	$(BIN)/speedtronic train

test: $(VENV)/.dev-installed lint typecheck unit

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check speedtronic tests examples benchmarks

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy --strict speedtronic

unit: $(VENV)/.dev-installed
	$(BIN)/python -m pytest

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

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
