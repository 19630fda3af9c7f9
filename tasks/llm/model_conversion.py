"""Turning a GGUF file into a plain transformers folder (safetensors, bf16), once and atomically.

Every converted base model (the embedded SmolLM2, the Qwen models joined from chunk wheels) is
built in a staging folder beside its target and renamed into place when complete, under a file
lock, so concurrent callers build it once and nobody sees half a folder. The marker file is
written last: its presence means the folder is complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

MARKER = "agentune-converted.json"


def is_converted(folder: Path) -> bool:
    return (Path(folder) / MARKER).is_file()


def read_marker(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))


def scratch_dir(target: Path, purpose: str) -> Path:
    """A fresh hidden folder beside ``target`` (same file system, so a rename is atomic; and
    ``models/*/`` is git-ignored, a lone file would not be). The caller removes it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{target.name}.{purpose}-", dir=target.parent))
    folder.chmod(0o755)  # mkdtemp makes it private; the result is a shared cache
    return folder


def prepare_folder(target: Path, build: Callable[[Path], dict[str, Any]]) -> Path:
    """``target``, built first by ``build(staging)`` unless it is complete already.

    ``build`` fills the staging folder and returns what the marker records (where the model
    came from). An error leaves nothing behind: the staging folder is removed.
    """
    target = Path(target)
    if is_converted(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    locks = target.parent / ".locks"
    locks.mkdir(exist_ok=True)
    with FileLock(str(locks / f"{target.name}.lock")):
        if is_converted(target):  # another process finished while we waited
            return target
        if target.exists():
            raise FileExistsError(
                f"{target} exists but is not a completed conversion (no {MARKER}); "
                "remove it and try again"
            )
        staging = scratch_dir(target, "tmp")
        try:
            source = build(staging)
            for written in staging.rglob("*"):  # some writers make private files (safetensors)
                written.chmod(0o755 if written.is_dir() else 0o644)
            (staging / MARKER).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` with transformers' GGUF reader and save it to ``out`` in bf16, with
    its tokenizer and chat template."""
    # Imported here: torch and transformers take seconds to import; only a conversion needs them.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise ValueError(f"{gguf}: the GGUF carries no chat template (tokenizer.chat_template)")
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    # The weights are dequantised on load; transformers still marks a GGUF-loaded model as
    # quantised and refuses to save it until both marks are gone.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)  # includes the chat template
