"""The models the evaluate stage compares: each listed model as a gateway role (the embedded
model, a local folder, a trained ``model`` version, or an OpenAI-compatible endpoint), with what
decides its answers besides the prompts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentune.config import RunConfig
from agentune.config.evaluate import ClosedLoopConfig, EvalModelConfig, EvaluateConfig
from agentune.config.llm import RoleConfig
from agentune.tasks.llm.embedded_model import named_model_identity, resolve_model_path
from agentune.tasks.rollouts.closed_loop import native_role as native_role_for
from agentune.tasks.store.artifact_store import (
    ArtifactStore,
    StoreError,
    VersionRef,
    file_fingerprint,
)


class EvaluationInputError(ValueError):
    """An input the evaluate stage cannot use; the message says which and what to do."""


@dataclass
class ResolvedModel:
    label: str
    role: RoleConfig
    identity: dict[str, Any]
    """What decides its answers besides the prompts: the weights (or endpoint and name)."""
    parent: VersionRef | None
    tokenizer: Path | None
    """Folder of the tokenizer that counts prompt tokens; None: characters."""


def _local_model(cfg: EvalModelConfig, store: ArtifactStore
                 ) -> tuple[str, dict[str, Any], VersionRef | None]:
    named = named_model_identity(cfg.model)  # `embedded`, `qwen2.5-coder-0.5b` ...
    if named is not None:
        resolve_model_path(cfg.model)  # prepared? (an optional model is skipped if not)
        return cfg.model, named, None
    folder = Path(cfg.model).expanduser()
    if folder.is_dir():
        # Every file hashed: a folder retrained in place must not reuse old answers.
        return str(folder), {"folder_sha256": file_fingerprint(folder)}, None
    ref = store.resolve(cfg.model)
    path = store.file(ref, "model")
    return str(path), {"version": str(ref)}, ref


def resolve_models(config: EvaluateConfig, store: ArtifactStore, *,
                   engine: str = "transformers") -> tuple[list[ResolvedModel], list[str]]:
    """The models to evaluate, and a note for each optional one that is not there. ``engine``:
    ``llm.local_engine``, which answers for the local ones (part of their identity unless it is
    the in-process transformers engine)."""
    models, skipped = [], []
    for cfg in config.models:
        common = {"max_concurrency": cfg.max_concurrency, "timeout_s": cfg.timeout_s,
                  "default_max_tokens": config.max_tokens}
        if cfg.provider == "openai":
            role = RoleConfig(provider="openai", model=cfg.model, base_url=cfg.base_url,
                              api_key_env=cfg.api_key_env, **common)
            tokenizer = resolve_model_path(cfg.tokenizer) if cfg.tokenizer else None
            identity = {"provider": "openai", "base_url": cfg.base_url, "model": cfg.model}
            models.append(ResolvedModel(cfg.label, role, identity, None, tokenizer))
            continue
        try:
            name, identity, parent = _local_model(cfg, store)
        except (StoreError, FileNotFoundError) as exc:
            if cfg.optional:
                skipped.append(f"{cfg.label} ({cfg.model}): not available ({exc})")
                continue
            raise EvaluationInputError(f"evaluate.models {cfg.label!r}: {exc}") from None
        role = RoleConfig(provider="local", model=name, batch_size=cfg.batch_size,
                          dtype=cfg.dtype, device=cfg.device, **common)
        identity |= {"dtype": cfg.dtype} | ({"engine": engine} if engine != "transformers" else {})
        models.append(ResolvedModel(cfg.label, role, identity, parent,
                                    resolve_model_path(name)))
    return models, skipped


def native_role(role: RoleConfig, loop: ClosedLoopConfig, folder: Path, cache_dir: str
                ) -> RoleConfig:
    """The role asking a local model natively (see :func:`rollouts.closed_loop.native_role`)."""
    return native_role_for(role, folder, cache_dir=cache_dir, chat_template=loop.chat_template)


def asked_natively(config: RunConfig, model: ResolvedModel) -> tuple[RoleConfig, dict[str, Any]]:
    """The model's role and identity when it is asked natively (tools through its chat
    template): a model with a local tokenizer gets the template :func:`native_role` renders
    with, and its identity names that template."""
    role, identity = model.role, dict(model.identity)
    if model.tokenizer is not None:
        role = native_role(role, config.evaluate.closed_loop, model.tokenizer,
                           config.llm.cache_dir)
        identity["chat_template"] = Path(role.chat_template).name if role.chat_template else None
    return role, identity
