"""What a run trains on, by method, and the model it starts from.

- sft: the ``sft_dataset`` version's train split, in the configured sample form;
- dpo: the ``preferences`` version's train pairs (prompt with tools, chosen, rejected);
- grpo: the ``scenarios`` version's train-split scenarios, as prompts (``grpo.scenario_data``).

For sft and dpo the rows are resampled by ``train.task_weights`` and mixed with replayed rows of
earlier versions of the same kind of data found in the starting model's lineage (the versions
its ancestors were trained on, nearest first), then turned into examples. The starting model is
``train.from_model`` (a store version or a folder) or ``train.base_model``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentune.config import RunConfig
from agentune.tasks.llm.model_folders import ModelFolder, resolve_model
from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef
from agentune.tasks.train.examples import row_examples, split_rows
from agentune.tasks.train.mixing import apply_task_weights, mix_replay

DATA_ARTIFACT = {"sft": "sft_dataset", "dpo": "preferences", "grpo": "scenarios"}
TASK_KEY = {"sft": "task_type", "dpo": "kind"}
MODEL_ARTIFACT = "model"


class TrainInputError(ValueError):
    """Inputs a run cannot train on; the message names the version and what to do."""


@dataclass
class TrainData:
    dataset: VersionRef
    train: list[dict[str, Any]]
    """Examples (sft, dpo) or prompt rows (grpo)."""
    val: list[dict[str, Any]]
    weighting: dict[str, Any] | None = None
    replay: dict[str, Any] | None = None
    replay_sources: list[VersionRef] = field(default_factory=list)
    scenario_rows: list[dict[str, Any]] = field(default_factory=list)
    """grpo: the scenarios' rows (the job rebuilds the records from them)."""
    train_ids: list[str] = field(default_factory=list)
    """dpo: the pair id of each train example (one example per pair)."""
    val_ids: list[str] = field(default_factory=list)


def starting_model(config: RunConfig, store: ArtifactStore, from_model: str | None = None
                   ) -> ModelFolder:
    spec = from_model or config.train.from_model
    if spec:
        return resolve_model(spec, store)
    return resolve_model(config.train.base_model, None)


def lineage_datasets(store: ArtifactStore, model: VersionRef | None, artifact: str
                     ) -> list[VersionRef]:
    """The ``artifact`` versions the model and its ancestors were trained on, nearest first."""
    found: list[VersionRef] = []
    frontier = [model] if model is not None else []
    seen: set[VersionRef] = set()
    while frontier:
        nxt: list[VersionRef] = []
        for ref in frontier:
            if ref in seen:
                continue
            seen.add(ref)
            for parent in store.manifest(ref).parent_refs:
                if parent.name == artifact and parent not in found:
                    found.append(parent)
                elif parent.name == MODEL_ARTIFACT:
                    nxt.append(parent)
        frontier = nxt
    return found


def _rows(store: ArtifactStore, ref: VersionRef, split: str, form: Any) -> list[dict[str, Any]]:
    return split_rows(store.read(ref), split=split, form=form, where=str(ref))


def example_data(config: RunConfig, store: ArtifactStore, method: str,
                 start: ModelFolder) -> TrainData:
    """sft / dpo: the examples of the train and val splits, weighted and mixed."""
    settings = config.train
    artifact = DATA_ARTIFACT[method]
    spec = settings.dataset if method == "sft" else settings.preferences
    dataset = store.resolve(spec or artifact)
    if dataset.name != artifact:
        raise TrainInputError(f"train.{'dataset' if method == 'sft' else 'preferences'} "
                              f"{spec!r}: expected a {artifact} version, got {dataset}")
    form = settings.sample_form if method == "sft" else "preferences"
    where = str(dataset)
    frame = store.read(dataset)
    train_rows = split_rows(frame, split="train", form=form, where=where)
    val_rows = split_rows(frame, split="val", form=form, where=where)
    if not train_rows:
        raise TrainInputError(f"{where}: the train split is empty" + (
            " (build_preferences found no pair: see its run summary)" if method == "dpo" else ""))
    weighted, weighting = apply_task_weights(train_rows, settings.task_weights,
                                             key=TASK_KEY[method], seed=config.seed, where=where)
    data = TrainData(dataset, [], [], weighting=weighting.report() if weighting else None)
    mixed: Sequence[Mapping[str, Any]] = weighted
    if settings.replay is not None:
        sources = [ref for ref in lineage_datasets(store, start.version, artifact)
                   if ref != dataset]
        earlier = [(str(ref), _rows(store, ref, "train", form)) for ref in sources]
        mixed, replay = mix_replay(weighted, earlier, buffer_size=settings.replay.buffer_size,
                                   ratio=settings.replay.ratio, seed=config.seed)
        data.replay, data.replay_sources = replay.report(), sources
        if not sources:
            data.replay["note"] = (f"no earlier {artifact} version in the lineage of "
                                   f"{start.name}: nothing to replay")
    data.train = row_examples(mixed, form=form, where=where)
    data.val = row_examples(val_rows, form=form, where=where)
    if form == "preferences":
        data.train_ids = [str(r["id"]) for r in mixed]
        data.val_ids = [str(r["id"]) for r in val_rows]
    return data
