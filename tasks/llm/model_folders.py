"""Model folders as the stages name them, and loading one whether it holds weights or an adapter.

A model is named ``embedded`` (or another model agentune names: tasks/llm/model_sources.py),
a local transformers folder, or a store version of a trained model (``model``,
``model@latest``, ``model@VERSION``). A trained version's ``model`` folder holds full weights,
or (LoRA without merging) a peft adapter: ``adapter_config.json`` naming its base model's
folder. :func:`load_causal_lm` loads either as a plain ``PreTrainedModel``
(an adapter is applied to its base and merged in memory, so generation runs at full speed).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentune.tasks.llm.embedded_model import named_model_identity, resolve_model_path
from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef, file_fingerprint

ADAPTER_CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class ModelFolder:
    name: str
    """As configured."""
    path: Path
    identity: dict[str, Any]
    """What decides its outputs: the embedded package version, a named model's pinned GGUF hash,
    the folder's hash, or the store version."""
    version: VersionRef | None
    """The store version it is, when it is one (a lineage parent)."""


def resolve_model(spec: str, store: ArtifactStore | None, *, artifact: str = "model",
                  subfolder: str = "model") -> ModelFolder:
    """A model agentune names (``embedded``, ``qwen2.5-coder-0.5b`` ...), a folder, or a store
    version of ``artifact`` (its files under ``subfolder``): a trained model, or a trained
    retriever's encoder."""
    named = named_model_identity(spec)
    if named is not None:
        return ModelFolder(spec, resolve_model_path(spec), named, None)
    folder = Path(spec).expanduser()
    if folder.is_dir():
        # Every file hashed: a folder retrained in place must not pass for the old one.
        return ModelFolder(spec, folder.resolve(), {"folder_sha256": file_fingerprint(folder)},
                           None)
    if store is None:
        raise FileNotFoundError(f"{spec!r}: not `embedded` nor a folder")
    ref = store.resolve(spec)
    if ref.name != artifact:
        raise ValueError(f"{spec!r}: expected a {artifact} version, got {ref}")
    return ModelFolder(spec, store.file(ref, subfolder).resolve(), {"version": str(ref)}, ref)


def is_adapter(folder: Path) -> bool:
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def adapter_base(folder: Path) -> Path:
    """The base model folder an adapter was trained on."""
    config = json.loads((Path(folder) / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if not base or not Path(base).is_dir():
        raise FileNotFoundError(f"{folder}: the adapter's base model {base!r} is not a folder here")
    return Path(base)


# transformers' from_pretrained is not thread-safe: two loads at once in one process (two local
# providers' worker threads) left tied output weights on the meta device, for every later load too.
_LOADING = threading.Lock()


def load_causal_lm(folder: Path, **kwargs: Any) -> Any:
    """A causal LM from a weights folder, or from an adapter folder (base + adapter, merged);
    one load at a time in a process."""
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    with _LOADING:
        if not is_adapter(folder):
            return AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(adapter_base(folder), **kwargs)
        return PeftModel.from_pretrained(base, folder).merge_and_unload()
