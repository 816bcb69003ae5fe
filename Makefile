# The two commands a newcomer needs; each sets up its own virtualenv from scratch.
#   make run    runs the main job (then `.venv/bin/speedtronic summarize runs/...`: nothing is activated)
#   make test   runs ruff (lint and format check), mypy --strict and every test under coverage (child
#               processes included; its report, failing below pyproject's fail_under), and prints its
#               wall time
#   make bench  prints every speed goal and any missed (emit: bench.py; read-back: readback.py --goals;
#               a webhook that never answers: webhook.py; alerts: alerts.py;
#               redact_text against adversarial text: redact_fuzz.py;
#               the compare gate: compare.py; stragglers named in real 4-rank gloo runs: stragglers.py)
PYTHON ?= python3
VENV ?= .venv
# A CPU build is on these machines' disk; an unpinned torch pulls a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
# pip installs torch (the file on disk; uv doesn't look there) and uv; --no-compile: Python compiles what
# is imported when it is first imported, not torch's whole tree now (half of pip's time).
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile
# uv installs the rest (the same resolution as pip, minutes faster); torch is already there and
# satisfies every requirement, so it is never fetched again.
UV := $(BIN)/uv pip install --quiet --python $(BIN)/python

.PHONY: run test check lint typecheck unit bench clean

run: $(VENV)/.run-installed
	$(BIN)/speedtronic train

# `make test` is `make check` timed: it says first how long it usually takes, prints its wall time at
# the end, set-up included, and keeps check's exit code. Measured on 2026-12-08 in a fresh clone of
# c02945e on a quiet 2-core machine (load 1.5 at the start): 797 s, of which the suite under coverage
# took 758 s (2026-12-07, aa5f4d5: 835 s; an earlier clone of d883efc: TEST_JOBS=3 852 s against 928 s).
test:
	@echo "make test: ruff, mypy --strict and every test under coverage; usually about 15 minutes on a 2-core machine"
	@start=$$(date +%s); $(MAKE) --no-print-directory check; rc=$$?; \
	echo "make test: exit $$rc after $$(( $$(date +%s) - start )) s of wall time"; exit $$rc

# mypy runs beside the suite, not before it: on a fresh clone (no cache yet) it keeps one core busy
# for about a minute, which the suite's workers share instead of waiting for it; its report is printed
# after the suite's, and check fails if either fails (the suite's exit code first).
check: $(VENV)/.dev-installed lint
	@$(BIN)/mypy --strict speedtronic >$(VENV)/typecheck.out 2>&1 & typecheck=$$!; \
	$(MAKE) --no-print-directory unit; rc=$$?; \
	wait $$typecheck; typed=$$?; \
	echo "$(BIN)/mypy --strict speedtronic"; cat $(VENV)/typecheck.out; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; exit $$typed

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check speedtronic tests examples benchmarks
	$(BIN)/ruff format --check speedtronic tests examples benchmarks

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy --strict speedtronic

# One worker per core (pytest-xdist); a test file runs whole on one worker, so its module-scoped
# fixtures (a trained run) are built once; files are handed out in collection order
# (--no-loadscope-reorder), which puts tests/conftest.py's LONGEST_FIRST first, so the run does not end
# with one worker alone on a long file. TEST_JOBS=0 runs in this process. The whole run is under
# coverage (pyproject's [tool.coverage]: child processes included, combined); it prints the total and
# the COVERAGE_WORST files least covered (`.venv/bin/coverage report` lists them all afterwards) and
# fails below [tool.coverage.report] fail_under.
TEST_JOBS ?= auto
COVERAGE_WORST ?= 15
# PYTHONDONTWRITEBYTECODE is unset for the suite: with it set (as on some CI images), every process the
# tests start compiled torch, transformers and speedtronic from source again (torch: 6.5 s against 2.7 s
# from its .pyc, measured at load 6); without it the first import writes the .pyc, under the venv's
# pycache/ (PYTHONPYCACHEPREFIX: nothing is written into the checkout), and later ones read them.
unit: $(VENV)/.dev-installed
	@$(BIN)/coverage erase
	@env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache $(BIN)/coverage run -m pytest -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder --durations=20; rc=$$?; \
	$(BIN)/coverage combine -q; \
	$(BIN)/coverage report | awk -v n=$(COVERAGE_WORST) '/\.py  *[0-9]/ && ++k > n { next } { print } \
	END { if (k > n) print k - n " more files below 100%: $(BIN)/coverage report" }'; \
	$(BIN)/coverage report --format=total >/dev/null 2>&1; cov=$$?; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; exit $$cov

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The main job needs the runtime (torch, PyYAML, psutil), TensorBoard for its event files, and what its
# default config and closing summary use: `system` events (psutil; NVML's bindings for NVIDIA GPUs),
# the progress bar and `speedtronic plot`.
$(VENV)/.run-installed: pyproject.toml | $(BIN)/python
	$(PIP) "$(TORCH_SPEC)" uv
	$(UV) -e ".[torch,tensorboard,system,progress,plot]"
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(PIP) "$(TORCH_SPEC)" uv
	$(UV) -e ".[all,dev]"
	touch $@ $(VENV)/.run-installed

bench: $(VENV)/.dev-installed
	$(BIN)/python benchmarks/bench.py
	$(BIN)/python benchmarks/readback.py --goals
	$(BIN)/python benchmarks/webhook.py
	$(BIN)/python benchmarks/alerts.py
	$(BIN)/python benchmarks/redact_fuzz.py
	$(BIN)/python benchmarks/compare.py
	$(BIN)/python benchmarks/tail.py
	$(BIN)/python benchmarks/stragglers.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
