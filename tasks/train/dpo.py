"""DPO: TRL's DPOTrainer on a ``preferences`` version's pairs (prompt with tools, chosen,
rejected), seed 004's dpo_config mapped onto DPOConfig.

``beta``, ``loss_type`` (sigmoid / hinge / ipo) and ``label_smoothing`` are DPOConfig's own.
``reference_free`` is not: TRL always compares to a reference. It is had by asking TRL to
precompute the reference log-probs and supplying zeros instead (a uniform reference), which also
spares the reference forward passes. The reference of a normal run is the starting model
(TRL loads a frozen copy, partitioned under ZeRO-3 like the policy; with LoRA, the policy with
its adapters disabled). Pairs are rendered with the training chat template, so tools are in the
prompt exactly as SFT and inference render them; their lengths are audited before launch, as
TRL would truncate or drop the ones over train.max_length without a word.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentune.config import RunConfig
from agentune.config.train import TrainConfig
from agentune.tasks.llm.model_folders import ModelFolder
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.examples import TokenCount, to_dataset
from agentune.tasks.train.inputs import TrainData, example_data
from agentune.tasks.train.job import (
    TrainJob,
    common_args,
    job_examples,
    job_tokenizer,
    peft_config,
)
from agentune.tasks.train.length_audit import audit_pairs
from agentune.tasks.train.method import Prepared, TrainMethod

SCHEDULE_FIELDS = ("learning_rate", "epochs", "max_steps")
"""train.dpo's schedule: resolved into the job's own fields (:meth:`DPO.schedule`)."""


def audit_lengths(tokenizer: Any, data: TrainData, template: str, settings: TrainConfig
                  ) -> tuple[TokenCount, dict[str, Any]]:
    """Refuse, or drop and report, the pairs TRL would truncate or drop; the tokens they feed."""
    reports: dict[str, Any] = {}
    tokens = 0
    for split in ("train", "val"):
        examples = data.train if split == "train" else data.val
        ids = data.train_ids if split == "train" else data.val_ids
        audit = audit_pairs(tokenizer, examples, chat_template=template,
                            max_length=settings.max_length)
        if not audit.ok and settings.dpo.overlength == "error":
            named = "; ".join(f"{ids[i] if i < len(ids) else i}: {why}"
                              for i, why in audit.problems[:10])
            more = f" (and {len(audit.problems) - 10} more)" if len(audit.problems) > 10 else ""
            raise ValueError(
                f"{data.dataset}: {len(audit.problems)} {split} pair(s) do not fit "
                f"train.max_length = {settings.max_length}: {named}{more}. Raise "
                "train.max_length, or set train.dpo.overlength: drop to leave them out")
        dropped = {i for i, _ in audit.problems}
        kept = [ex for i, ex in enumerate(examples) if i not in dropped]
        if split == "train":
            data.train = kept
            tokens = sum(n.tokens for i, n in enumerate(audit.lengths) if i not in dropped)
        else:
            data.val = kept
        reports[split] = audit.report() | {"dropped": [
            f"{ids[i] if i < len(ids) else i}: {why}" for i, why in audit.problems]}
    if not data.train:
        raise ValueError(f"{data.dataset}: every train pair is longer than train.max_length = "
                         f"{settings.max_length}")
    count = TokenCount(examples=len(data.train), sampled=len(data.train), tokens=tokens)
    return count, reports


def _reference_free(trainer_class: type) -> type:
    class ReferenceFreeDPOTrainer(trainer_class):  # type: ignore[misc, valid-type]
        """DPO against a uniform reference: every reference log-prob is 0."""

        def _precompute_ref_logps(self, dataset: Any, name: str, batch_size: int) -> Any:
            zeros = [0.0] * len(dataset)
            return dataset.add_column("ref_chosen_logps", zeros).add_column(
                "ref_rejected_logps", list(zeros))

    return ReferenceFreeDPOTrainer


class DPO(TrainMethod):
    name = "dpo"
    text = "direct preference optimisation (TRL DPOTrainer) on preference pairs"
    # The chosen-minus-rejected reward margin: beta times the log-prob margin over the reference.
    signal = "rewards/margins"

    def prepare(self, config: RunConfig, store: ArtifactStore, start: ModelFolder,
                tokenizer: Any, template: str) -> Prepared:
        settings = config.train
        data = example_data(config, store, self.name, start)
        reward = store.manifest(data.dataset).params.get("reward")
        tokens, audit = audit_lengths(tokenizer, data, template, settings)
        params = {"train.dpo": settings.dpo.model_dump(mode="json",
                                                      exclude=set(SCHEDULE_FIELDS))}
        return Prepared(data, tokens, reward=reward, notes={"length audit": audit},
                        params=params)

    def schedule(self, settings: TrainConfig) -> dict[str, Any]:
        dpo = settings.dpo
        return {"learning_rate": dpo.learning_rate or settings.learning_rate,
                "epochs": dpo.epochs if dpo.epochs is not None else settings.epochs,
                "max_steps": dpo.max_steps}

    def job_fields(self, config: RunConfig, work_dir: Path) -> dict[str, Any]:
        return {"dpo": config.train.dpo}

    def loss_on(self, job: TrainJob) -> str:
        return "the chosen and rejected decisions (completion tokens)"

    def card(self, job: TrainJob) -> dict[str, Any]:
        assert job.dpo is not None
        return {f"dpo {k}": v for k, v in job.dpo.model_dump(
            exclude=set(SCHEDULE_FIELDS)).items()}

    def build_trainer(self, job: TrainJob, progress: Any) -> Any:
        from trl import DPOConfig, DPOTrainer

        assert job.dpo is not None
        train, val = job_examples(job)
        args = DPOConfig(
            **common_args(job, DPOConfig, has_val=bool(val)),
            include_num_input_tokens_seen="non_padding",  # both sequences of a pair, prompt in each
            max_length=job.max_length,
            truncation_mode="keep_start",
            beta=job.dpo.beta,
            loss_type=[job.dpo.loss_type],
            label_smoothing=job.dpo.label_smoothing,
            precompute_ref_log_probs=job.dpo.reference_free,
        )
        trainer_class = _reference_free(DPOTrainer) if job.dpo.reference_free else DPOTrainer
        return trainer_class(
            model=job.base_model,
            args=args,
            train_dataset=to_dataset(train, "preferences"),
            eval_dataset=to_dataset(val, "preferences") if val else None,
            processing_class=job_tokenizer(job),
            callbacks=[progress],
            peft_config=peft_config(job),
        )
