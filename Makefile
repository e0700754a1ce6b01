# The two set-up commands of the README, each creating its own virtual environment:
#   make serve   install, then serve ./model_repository on :8000 (HTTP), :8001 (gRPC), :8002 (metrics)
#   make test    install with the test extras, then run the whole test suite
# and two checks of pyproject.toml's version ranges, each in a virtual environment of its own:
#   make test-oldest   the suite on the lowest version each range allows (.venv-oldest)
#   make test-newest   the suite on the newest versions released today (.venv-newest)
# Supported: Python 3.11 to 3.13. `make test PYTHON=python3.13` tests another version in a virtual
# environment of its own (.venv-python3.13), never in the default .venv. Plain `make test` (what CI
# runs; no PYTHON, VENV or PYTEST_ARGS given) then also runs a fast subset, NEWEST_PYTHON_TESTS
# below, on the newest supported Python the machine has (make test-newest-python), or says that
# there is none newer and skips it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv$(if $(filter command line,$(origin PYTHON)),-$(notdir $(PYTHON)))
# The interpreter itself: pyenv's shims refuse a version that is installed but not selected
# (`pyenv global`), so such a version is taken from pyenv's own folder.
PYTHON_EXE := $(shell $(PYTHON) -c 'import sys; print(sys.executable)' 2>/dev/null || \
  ls -d $$(pyenv root 2>/dev/null)/versions/*/bin/$(notdir $(PYTHON)) 2>/dev/null | tail -n 1)
# uv's --resolution: highest (make test, make serve, make test-newest) or lowest-direct (make test-oldest)
RESOLUTION ?= highest
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
REFERENCE_SETUP := ../shared/reference/setup-triton.sh
PYTEST_ARGS ?=
# The suite runs its test files on as many workers as the machine has cores, each file's tests on
# one worker in order (a module's servers start once): most tests wait on servers and subprocesses,
# so two workers on two cores take half the time of one. PYTEST_WORKERS= runs them in one process.
PYTEST_WORKERS ?= -n auto --dist loadfile
# the test extra takes in the gcs, azure, mlflow and plot extras
# The fast subset make test runs again on the newest Python: the unit tests and a few integration
# tests against a real server (HTTP and gRPC, the example models, start-up), under two minutes.
NEWEST_PYTHON_TESTS := tests/unit tests/integration/test_conformance.py \
  tests/integration/test_startup.py tests/integration/test_grpc_frontend.py
# The newest supported Python other than 3.11 that this machine has (pyenv versions not selected
# included), as a command name; empty when there is none.
NEWEST_PYTHON = $(shell for v in 3.13 3.12; do \
  { python$$v -c '' 2>/dev/null || ls $$(pyenv root 2>/dev/null)/versions/*/bin/python$$v; } \
  >/dev/null 2>&1 && { echo python$$v; break; }; done)
EXTRAS := torch,test

.PHONY: serve test bytecode test-oldest test-newest test-newest-python lint models reference promtool tinyproxy haproxy azurite \
  completions clean

# uv resolves from PyPI alone; a new pyproject.toml starts the environment afresh, so that it holds
# exactly what the ranges resolve to today. $(VENV)/versions.txt lists what was installed.
$(STAMP): pyproject.toml
	@[ -n "$(PYTHON_EXE)" ] || { echo "$(PYTHON): no such Python (supported: 3.11 to 3.13)"; exit 1; }
	@echo "installing tcli and its dependencies into $(VENV) (a minute or two the first time)"
	$(PYTHON_EXE) -m venv --clear $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip 'uv>=0.9,<0.14'
	@# torch's CPU build first: a plain `torch` requirement would pull a multi-GB CUDA build. On these
	@# machines pip finds torch==2.13.0 (CPU, for Python 3.11) on local disk, never asking PyPI
	@# (--no-index); other Pythons and other machines get it from PyTorch's CPU wheel index.
	@# uv then leaves torch out of its resolution (--excludes), so that it never swaps in a CUDA build.
	@# Where neither has a CPU build for this Python (here: only Python 3.11 has a local wheel, and
	@# PyTorch's index is out of reach), the rest is installed without torch and its tests are skipped.
	( $(BIN)/pip install --quiet --no-index --no-deps torch==2.13.0 2>/dev/null && \
	  $(BIN)/pip install --quiet torch==2.13.0 ) || \
	  $(BIN)/pip install --quiet --retries 1 --timeout 30 'torch>=2.13,<3' \
	    --index-url https://download.pytorch.org/whl/cpu 2>/dev/null || \
	  echo "torch: no CPU build installable for Python $$($(BIN)/python -V | cut -d' ' -f2) here;" \
	    "installing without it (its tests will be skipped)"
	echo torch > $(VENV)/uv-excludes.txt
	@# --compile-bytecode: uv, unlike pip, installs no .pyc files, and where PYTHONDONTWRITEBYTECODE is
	@# set (as on the project's machines) every process would compile each module it imports from
	@# source: twice the CPU for each `tcli` command's start-up and each server the tests start
	@# not --quiet: uv's own progress (resolving, downloading, installing) is the sign of life
	$(BIN)/uv pip install --python $(BIN)/python --resolution $(RESOLUTION) --compile-bytecode \
	  --excludes $(VENV)/uv-excludes.txt -C editable_mode=compat -e '.[$(EXTRAS)]'
	$(BIN)/uv pip freeze --quiet --python $(BIN)/python --exclude-editable > $(VENV)/versions.txt
	touch $(STAMP)

serve: $(STAMP) bytecode
	$(BIN)/tcli serve model_repository

# The project's own modules compiled (the editable install leaves them as sources): only files changed
# since their last compile are compiled again, for the reason given at --compile-bytecode above
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 server tcli tests benchmarks >/dev/null

test: $(STAMP) reference promtool tinyproxy haproxy azurite bytecode
	PATH="$(CURDIR)/$(VENV)/node_modules/.bin:$$PATH" $(BIN)/python -m pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)
	@# plain `make test` only: not with PYTHON, VENV or PYTEST_ARGS given (test-oldest, test-newest,
	@# a chosen test, the subset's own run)
	$(if $(filter command line,$(origin PYTHON) $(origin VENV) $(origin PYTEST_ARGS)),,\
	  @$(MAKE) --no-print-directory test-newest-python)

# The fast subset on the newest Python, in its own virtual environment (made when missing). Its
# version check: the default PYTHON may itself be the newest (a machine without python3.11).
test-newest-python:
	@newest="$(NEWEST_PYTHON)"; \
	if [ -z "$$newest" ] || [ "$$($(PYTHON_EXE) -V 2>&1 | cut -d' ' -f2 | cut -d. -f1,2)" = "$${newest#python}" ]; then \
	  echo "newest Python: none newer than $$($(PYTHON_EXE) -V 2>&1) found; its fast subset is skipped"; \
	else $(MAKE) test PYTHON=$$newest PYTEST_ARGS="$(NEWEST_PYTHON_TESTS)"; fi

# The lowest version of each of tcli's own requirements (uv's lowest-direct; what they pull in is the
# newest that fits). .ci/lowest_check.py first fails when a lower bound could not be installed as such.
# mypy is left out here: it checks the code against the libraries' type annotations, which older
# releases lack or spell differently; make test runs it on the newest.
test-oldest:
	$(MAKE) .venv-oldest/.installed VENV=.venv-oldest RESOLUTION=lowest-direct
	.venv-oldest/bin/python .ci/lowest_check.py
	$(MAKE) test VENV=.venv-oldest RESOLUTION=lowest-direct \
	  PYTEST_ARGS="--deselect tests/test_code_quality.py::test_mypy $(PYTEST_ARGS)"

# The newest versions the ranges allow, resolved afresh at each run (make test keeps its .venv until
# pyproject.toml changes).
test-newest:
	rm -f .venv-newest/.installed
	$(MAKE) test VENV=.venv-newest RESOLUTION=highest

# promtool (Debian package prometheus) checks the metrics exposition; its test is skipped without it.
promtool:
	@command -v promtool >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus) >/dev/null 2>&1 \
	  && echo "promtool: installed" || echo "promtool: not installed; its test will be skipped"; }

# tinyproxy (Debian package) stands where Dragonfly's proxy stands in the dragonfly agent's tests.
tinyproxy:
	@command -v tinyproxy >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get install -y -qq --no-install-recommends tinyproxy || (apt-get update -qq && \
	   apt-get install -y -qq --no-install-recommends tinyproxy)) >/dev/null 2>&1 \
	  && echo "tinyproxy: installed" || echo "tinyproxy: not installed; its tests will be skipped"; }

# HAProxy (Debian package) balances two tcli replicas in the load-balancer tests.
haproxy:
	@command -v haproxy >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get install -y -qq --no-install-recommends haproxy || (apt-get update -qq && \
	   apt-get install -y -qq --no-install-recommends haproxy)) >/dev/null 2>&1 \
	  && echo "haproxy: installed" || echo "haproxy: not installed; its tests will be skipped"; }

# Azurite (Microsoft's Azure Storage emulator, npm) for the as:// repository tests, into the venv;
# its tests are skipped without it.
azurite:
	@[ -x $(VENV)/node_modules/.bin/azurite-blob ] || { command -v npm >/dev/null 2>&1 && \
	  npm install --silent --no-audit --no-fund --prefix $(VENV) azurite@3 >/dev/null 2>&1 \
	  && echo "azurite: installed" || echo "azurite: not installed; its tests will be skipped"; }

# Real Triton 2.51 and perf_analyzer 2.51 for the differential tests, when the reference script is
# beside this checkout (tests that need it are skipped, with the reason, when it is not installed).
reference:
	@if [ -x "$(REFERENCE_SETUP)" ] || [ -f "$(REFERENCE_SETUP)" ]; then \
	  bash "$(REFERENCE_SETUP)" >/dev/null 2>&1 && echo "reference Triton 2.51: ready" \
	    || echo "reference Triton 2.51: set-up failed; its tests will be skipped"; \
	else echo "reference Triton 2.51: $(REFERENCE_SETUP) not found; its tests will be skipped"; fi

lint: $(STAMP)
	$(BIN)/ruff check server tcli tests
	$(BIN)/ruff format --check server tcli tests
	$(BIN)/mypy

# Rebuild the example model files (ONNX, TorchScript) from the script that trains and exports them.
models: $(STAMP)
	$(BIN)/python model_repository/build_models.py

# Shell completion scripts in completions/, generated from the Typer app (a test fails when stale).
completions: $(STAMP)
	$(BIN)/python -m tcli.completions

clean:
	rm -rf $(VENV) .venv-oldest .venv-newest .pytest_cache .mypy_cache .ruff_cache
