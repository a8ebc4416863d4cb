# bytegraph developer entry points.
#
#   make demo        create/refresh .venv, then run examples/demo.py
#   make test        create/refresh .venv (dev + model test deps), then run the test suite
#   make bench       full benchmark vs torch.compile (bench/run.py), writes bench/results.md
#   make bench-quick short benchmark run (< 2 minutes)
#   make test-models optional model tests (adds requirements-models.txt)
#   make clean       remove the venv and build/test debris
#
# Variables: VENV (default .venv), PYTEST_ARGS (extra pytest arguments),
# PYTEST_TIMEOUT (per-test seconds), BENCH_ARGS, PYTHON (interpreter used to
# create the venv).

VENV ?= .venv
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
PYTEST_ARGS ?=
PYTEST_TIMEOUT ?= 300
BENCH_ARGS ?=

PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# The stamp lives inside the venv, so deleting the venv also forgets it.
STAMP := $(VENV)/.bytegraph-dev.stamp
MODELS_STAMP := $(VENV)/.bytegraph-models.stamp

.DEFAULT_GOAL := help
.PHONY: help venv demo test test-models bench bench-quick clean

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

venv: $(STAMP)

# (Re)install whenever a requirements file or the project metadata changes.
# A venv whose interpreter is missing or broken is recreated from scratch.
$(STAMP): requirements-dev.txt pyproject.toml
	@if ! $(PY) -c 'import sys' >/dev/null 2>&1; then \
		echo "creating $(VENV) with $(PYTHON)"; \
		rm -rf $(VENV); \
		$(PYTHON) -m venv $(VENV); \
	fi
	$(PIP) install --progress-bar off -r requirements-dev.txt
	@touch $@

$(MODELS_STAMP): $(STAMP) requirements-models.txt
	$(PIP) install --progress-bar off -r requirements-models.txt
	@touch $@

demo: $(STAMP)
	$(PY) -m examples.demo

test: $(MODELS_STAMP)
	$(PY) -m pytest -q --timeout=$(PYTEST_TIMEOUT) $(PYTEST_ARGS)

test-models: $(MODELS_STAMP)
	$(PY) -m pytest -q --timeout=$(PYTEST_TIMEOUT) -m models $(PYTEST_ARGS)

# Full benchmark: every workload, including the transformers models (hence the
# model dependencies), inductor speedups; ~15-20 minutes on 2 cores.
bench: $(MODELS_STAMP)
	$(PY) bench/run.py $(BENCH_ARGS)

# Subset (no transformers models, no inductor, one repetition); under 2 minutes.
bench-quick: $(STAMP)
	$(PY) bench/run.py --quick $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist .pytest_cache .hypothesis src/*.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
