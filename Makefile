# bytegraph developer entry points.
#
#   make demo        create/refresh the venv, then run examples/demo.py
#   make test        create/refresh the venv (dev + model test deps), then run the test suite
#   make bench       full benchmark vs torch.compile (bench/run.py), writes bench/results.md
#   make bench-quick short benchmark run (< 2 minutes)
#   make bench-scale compile time at scale: deep models, Inductor first calls cold and warm (bench/results-scale.md)
#   make bench-zoo   every model of the zoo beside torch.compile (bench/zoo.py), writes bench/zoo.md
#   make bench-dist  eager DDP, torch.compile+DDP, bytegraph+DDP on 2 processes (bench/dist.py), writes bench/dist.md
#   make test-core   the core subset of the suite that CI runs on the other Python/torch versions
#   make test-models the whole model zoo (tests/test_model_zoo.py: 71 transformers architectures) and the model tests
#   make test-cpython CPython's own test modules run under bytegraph; fails on any broken test
#   make setup       create/refresh the venv and build the native checks, run nothing
#   make native      (re)build the native guard checks (done by every target above)
#   make browser     install Debian's chromium + chromedriver (root; for the report's browser test)
#   make valgrind    install Debian's valgrind (root; for the benchmark's instruction counts and their test)
#   make clean       remove the venv and build/test debris
#
# Supported: Python 3.11-3.13, torch 2.13.x and 2.14.x.  Each Python/torch
# combination gets its own venv, so they never clobber one another:
#   make test                         .venv                        python3.11, torch from requirements-dev.txt
#   make test PYTHON=python3.12       .venv-3.12                   (likewise python3.13 -> .venv-3.13)
#   make test TORCH=2.14.1            .venv-3.11-torch2.14.1       the pinned torch replaced by torch==2.14.1
#   make test PYTHON=python3.12 TORCH=2.14.1   .venv-3.12-torch2.14.1
#
# Variables: PYTHON (interpreter that creates the venv; default python3.11, else python3), TORCH (a torch
# version to install instead of the one pinned in requirements-dev.txt; empty: the pin), VENV (the venv
# directory; default derived from PYTHON and TORCH as above, any path may be given), PYTEST_ARGS (extra
# pytest arguments), PYTEST_TIMEOUT (per-test seconds), PYTEST_JOBS (pytest-xdist workers: auto, one per
# core, by default; 0 runs the suite in one process), BENCH_ARGS, ZOO_ARGS, CPYTHON_ARGS (modules, --jobs,
# -v).  Every target uses the venv so chosen.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
TORCH ?=
# The interpreter that creates the venv: $(PYTHON) itself, or, when it does
# not run because pyenv's shims expose only the global version's commands,
# that command in the pyenv version that has it.
PYTHON_EXE := $(shell p='$(PYTHON)'; if "$$p" -c '' >/dev/null 2>&1; then command -v "$$p"; \
	elif command -v pyenv >/dev/null 2>&1; then v=$$(pyenv whence "$$p" 2>/dev/null | tail -n 1); \
	[ -n "$$v" ] && echo "$$(pyenv root)/versions/$$v/bin/$$p"; fi)
# "3.11" for python3.11; empty when there is no such interpreter
PY_VERSION := $(if $(PYTHON_EXE),$(shell '$(PYTHON_EXE)' -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null))
ifneq ($(strip $(TORCH)),)
VENV ?= .venv-$(PY_VERSION)-torch$(TORCH)
else ifneq ($(filter-out 3.11,$(PY_VERSION)),)
VENV ?= .venv-$(PY_VERSION)
else
VENV ?= .venv
endif
PYTEST_ARGS ?=
PYTEST_TIMEOUT ?= 300
# pytest-xdist workers for `make test`/`make test-models` (auto: one per core; 0: one process, no xdist)
PYTEST_JOBS ?= auto
BENCH_ARGS ?=
CPYTHON_ARGS ?=
ZOO_ARGS ?=

PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# The stamp lives inside the venv, so deleting the venv also forgets it; it
# names the requested torch, so asking the same VENV for another one reinstalls.
STAMP := $(VENV)/.bytegraph-dev$(if $(strip $(TORCH)),-torch$(strip $(TORCH))).stamp
# requirements-dev.txt as installed: with TORCH, its torch pin replaced by
# torch==$(TORCH) (a copy kept in the venv; `-e .` in it is relative to the
# working directory, the repository root)
DEV_REQS := $(if $(strip $(TORCH)),$(VENV)/requirements-dev-torch$(strip $(TORCH)).txt,requirements-dev.txt)
MODELS_STAMP := $(VENV)/.bytegraph-models.stamp

.DEFAULT_GOAL := help
.PHONY: help venv setup native demo test test-core test-models test-cpython bench bench-quick bench-scale bench-zoo bench-dist clean browser valgrind

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

venv: $(STAMP)

# (Re)install whenever a requirements file or the project metadata changes.
# A venv whose interpreter is missing or broken is recreated from scratch; one
# made with another Python version than $(PYTHON)'s is refused (not deleted).
$(STAMP): requirements-dev.txt pyproject.toml
	@if [ -z "$(PY_VERSION)" ]; then echo "PYTHON=$(PYTHON): no such interpreter" >&2; exit 1; fi
	@if ! $(PY) -c 'import sys' >/dev/null 2>&1; then \
		echo "creating $(VENV) with $(PYTHON_EXE) ($(PY_VERSION))"; \
		rm -rf $(VENV); \
		'$(PYTHON_EXE)' -m venv $(VENV); \
	elif [ "$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$(PY_VERSION)" ]; then \
		echo "$(VENV) was made with another Python than $(PYTHON) ($(PY_VERSION)): remove it or set VENV" >&2; \
		exit 1; \
	fi
ifneq ($(strip $(TORCH)),)
	sed 's/^torch==.*/torch==$(strip $(TORCH))/' requirements-dev.txt > $(DEV_REQS)
	@grep -qx 'torch==$(strip $(TORCH))' $(DEV_REQS) || { echo "no torch pin in requirements-dev.txt" >&2; exit 1; }
endif
	$(PIP) install --progress-bar off -r $(DEV_REQS)
	@# the drop-in switch's start-up hook: inert unless BYTEGRAPH_TORCH_COMPILE=1
	$(PY) -m bytegraph dropin enable
	@touch $@

# The native guard checks (src/bytegraph/native/tensor_guard.cpp), compiled
# against the venv's torch. A no-op when the build for this torch, Python and
# source exists; if no C++ compiler works, bytegraph falls back to Python
# guard conditions, but the test suite (BYTEGRAPH_EXPECT_NATIVE=1) fails.
native: $(STAMP)
	$(PY) -m bytegraph.native build || true

$(MODELS_STAMP): $(STAMP) requirements-models.txt
	$(PIP) install --progress-bar off -r requirements-models.txt
	@touch $@

demo: $(STAMP) native
	$(PY) -m examples.demo

# The suite (the model zoo's quick subset only) with the native guard checks, then the guard tests again with
# the pure-Python fallback conditions.
test: $(MODELS_STAMP) native
	BYTEGRAPH_EXPECT_NATIVE=1 $(PY) -m pytest -q -n $(PYTEST_JOBS) --timeout=$(PYTEST_TIMEOUT) -m "not zoo" $(PYTEST_ARGS)
	BYTEGRAPH_NATIVE_GUARDS=0 $(PY) -m pytest -q -n $(PYTEST_JOBS) --timeout=$(PYTEST_TIMEOUT) \
		tests/test_guards.py tests/test_native_guards.py tests/test_dynamic.py $(PYTEST_ARGS)

# The core subset: the test files that exercise what differs between Python and torch versions, and
# the model zoo's quick subset. CI runs it on the combinations other than 3.11 with the pinned torch,
# where the whole suite would take CI past 45 minutes; `make test` on each of them is run by hand
# (README, "Testing"). The Python part: the bytecode layer, opcode handlers, breaks and resume
# functions, cells, generators, classes. The torch part: tensors, context managers (autocast), guards,
# side effects, soundness, the program fuzzer, the torch internals bytegraph leans on (FakeTensorMode,
# ShapeEnv, fx, invoke_subgraph, DDP's reducer), layer reuse, real models. CORE=torch runs only the
# torch part (another torch on the same Python: the bytecode is the same), plus the adversarial and
# Inductor layer-reuse files, which depend on torch's AOTAutograd and Inductor alone (their Python
# side, the block detection, is test_layer_reuse.py, in the torch part) and take three minutes.
CORE_PYTHON_TESTS := tests/test_versions.py tests/test_tracer_opcodes.py tests/test_python_semantics.py \
	tests/test_cells.py tests/test_graph_breaks.py tests/test_break_frames.py \
	tests/test_break_frames_adversarial.py tests/test_tracer_control_flow.py tests/test_tracer_functions.py \
	tests/test_tracer_containers.py tests/test_compile_time.py tests/test_show.py tests/test_capture_classes.py \
	tests/test_trace_cost.py tests/test_frame_inspection.py
CORE_TORCH_TESTS := tests/test_tracer_tensors.py tests/test_context_managers.py tests/test_soundness.py \
	tests/test_side_effects.py tests/test_guards.py tests/test_torch_compat.py tests/test_program_fuzzer.py \
	tests/test_layer_reuse.py tests/test_ddp_split.py tests/test_model_zoo.py tests/test_real_models.py
CORE_TORCH_ONLY_TESTS := tests/test_layer_reuse_adversarial.py tests/test_layer_reuse_inductor.py
CORE ?= all
CORE_TESTS = $(if $(filter torch,$(CORE)),$(CORE_TORCH_ONLY_TESTS),$(CORE_PYTHON_TESTS)) $(CORE_TORCH_TESTS)
test-core: $(MODELS_STAMP) native
	BYTEGRAPH_EXPECT_NATIVE=1 $(PY) -m pytest -q -n $(PYTEST_JOBS) --timeout=$(PYTEST_TIMEOUT) -m "not zoo" \
		$(CORE_TESTS) $(PYTEST_ARGS)

# Everything `make test` needs installed and built, without running it (CI prepares the other
# Python/torch combinations with it in the background while the first one's tests run).
setup: $(MODELS_STAMP) native

# Every test method of the listed modules of the interpreter's own `test`
# package that passes normally is run again compiled (force_transform); one
# that then fails is broken (tests/cpython_suite.py; about 10 minutes on 2 cores;
# CI runs it after `make test`).
test-cpython: $(STAMP) native
	$(PY) tests/cpython_suite.py $(CPYTHON_ARGS)

# Every model of the zoo (tests/model_zoo.py) in eval and training, plus the
# other model tests; about 15 minutes on 2 cores.  CI runs it after `make test`.
test-models: $(MODELS_STAMP) native
	BYTEGRAPH_EXPECT_NATIVE=1 $(PY) -m pytest -q -n $(PYTEST_JOBS) --timeout=$(PYTEST_TIMEOUT) -m models $(PYTEST_ARGS)

# Full benchmark: every workload, including the transformers models (hence the
# model dependencies), inductor speedups; ~15-20 minutes on 2 cores.
bench: $(MODELS_STAMP) native
	$(PY) bench/run.py $(BENCH_ARGS)

# Subset (no transformers models, no inductor, one repetition); under 2 minutes.
bench-quick: $(STAMP) native
	$(PY) bench/run.py --quick $(BENCH_ARGS)

# Compile time at scale (issue 17): eager first calls of 4/16/48-layer GPT-2,
# Inductor first calls (cold cache, and a second process on a warm one) and the
# steady state after them; writes bench/results-scale.md (~40 minutes on 2 cores).
bench-scale: $(MODELS_STAMP) native
	$(PY) bench/run.py --scale $(BENCH_ARGS)

# The model zoo beside torch.compile: graphs, breaks, recompiles and first-call
# time of every architecture, each in fresh processes (~20 minutes on 2 cores
# per repetition; ZOO_ARGS, e.g. --repeat 3 or --models gpt2,t5).
bench-zoo: $(MODELS_STAMP) native
	$(PY) bench/zoo.py $(ZOO_ARGS)

# DDP on two processes (gloo, 127.0.0.1): step time and first-call time of
# eager DDP, torch.compile + DDP and bytegraph + DDP (Inductor and eager
# backends), fresh processes, interleaved; ~30 minutes on 2 cores (DIST_ARGS,
# e.g. --repeat 1 --backends eager).
DIST_ARGS ?=
bench-dist: $(STAMP) native
	$(PY) bench/dist.py $(DIST_ARGS)

clean:
	rm -rf $(VENV) build dist .pytest_cache .hypothesis src/*.egg-info src/bytegraph/native/_build
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# Debian's chromium and chromedriver, for tests/test_report.py (which skips
# without them, and fails without them when BYTEGRAPH_REQUIRE_BROWSER=1).
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then echo "chromium: installed"; \
	else apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; fi

# Debian's valgrind (callgrind and its headers), for the benchmark's counted
# metric (bench/run.py --metrics instructions; bench/callgrind.py) and its test.
valgrind:
	@if command -v valgrind >/dev/null && test -f /usr/include/valgrind/callgrind.h; then echo "valgrind: installed"; \
	else apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind; fi
