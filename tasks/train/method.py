"""What a training method supplies to the train stage and the training job.

The stage (``stage.py``) does what every method shares: the starting model and chat template,
the "auto" settings, the work dir, the launch and the publication. A method (``sft.py``,
``dpo.py``, ``grpo.py``; ``methods.METHODS`` by name) supplies what is its own: the rows it
trains on and the tokens they feed the model, its schedule, its entries in the model version's
params, its section of the job file and of the model card, and, in the training processes, its
TRL trainer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentune.config import RunConfig
from agentune.config.train import TrainConfig
from agentune.tasks.llm.model_folders import ModelFolder
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.examples import TokenCount
from agentune.tasks.train.inputs import TrainData
from agentune.tasks.train.job import TrainJob

if TYPE_CHECKING:
    from transformers import Trainer

MethodName = Literal["sft", "dpo", "grpo"]


@dataclass
class Prepared:
    """A method's inputs, ready to plan with."""

    data: TrainData
    tokens: TokenCount
    """Tokens one epoch feeds the model."""
    reward: list[dict[str, Any]] | None = None
    """The reward registry's lineage: the one trained on (grpo), or that ranked the pairs (dpo)."""
    notes: dict[str, Any] = field(default_factory=dict)
    """Reports for the run card's mix, after the task weights and replay (dpo's length audit)."""
    params: dict[str, Any] = field(default_factory=dict)
    """What the method resolves of what it reads, by dotted path (``train.dpo``: its settings),
    for the model's version id (``agentune.tasks.store.inputs.version_params``)."""


class TrainMethod(ABC):
    """One training method; the defaults are a method without settings of its own (sft's)."""

    name: MethodName
    text: str
    """The method in the model card."""
    signal: str | None = None
    """The logged metric the method optimises, reported first and last (None: the loss alone)."""
    packs: bool = False
    """Whether train.packing applies (else sequences are never packed)."""

    @abstractmethod
    def prepare(self, config: RunConfig, store: ArtifactStore, start: ModelFolder,
                tokenizer: Any, template: str) -> Prepared:
        """Read and check the rows to train on, count their tokens; raise what would fail the
        launch."""

    def schedule(self, settings: TrainConfig) -> dict[str, Any]:
        """Learning rate, epochs and max_steps (a method's own section overrides train's)."""
        return {"learning_rate": settings.learning_rate, "epochs": settings.epochs,
                "max_steps": settings.max_steps}

    def check_world(self, settings: TrainConfig, processes: int) -> None:
        """Refuse a batch layout the method cannot train with."""

    def job_fields(self, config: RunConfig, work_dir: Path) -> dict[str, Any]:
        """The method's section of the job file, as TrainJob fields."""
        return {}

    @abstractmethod
    def loss_on(self, job: TrainJob) -> str:
        """What the loss is computed on, for the model card."""

    def card(self, job: TrainJob) -> dict[str, Any]:
        """The method's settings in the model card."""
        return {}

    @abstractmethod
    def build_trainer(self, job: TrainJob, progress: Any) -> Trainer:
        """The TRL trainer of a job (in a training process), ``progress`` among its callbacks."""
