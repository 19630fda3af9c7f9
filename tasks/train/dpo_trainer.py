"""DPO in the training job: TRL's DPOTrainer on preference pairs (prompt with tools, chosen,
rejected), seed 004's dpo_config mapped onto DPOConfig.

``beta``, ``loss_type`` (sigmoid / hinge / ipo) and ``label_smoothing`` are DPOConfig's own.
``reference_free`` is not: TRL always compares to a reference. It is had by asking TRL to
precompute the reference log-probs and supplying zeros instead (a uniform reference), which also
spares the reference forward passes. The reference of a normal run is the starting model
(TRL loads a frozen copy, partitioned under ZeRO-3 like the policy; with LoRA, the policy with
its adapters disabled). Pairs are rendered with the training chat template, so tools are in the
prompt exactly as SFT and inference render them; the stage audited their lengths before launch.
"""

from __future__ import annotations

from typing import Any

from agentune.tasks.train.examples import to_dataset


def _reference_free(trainer_class: type) -> type:
    class ReferenceFreeDPOTrainer(trainer_class):  # type: ignore[misc, valid-type]
        """DPO against a uniform reference: every reference log-prob is 0."""

        def _precompute_ref_logps(self, dataset: Any, name: str, batch_size: int) -> Any:
            zeros = [0.0] * len(dataset)
            return dataset.add_column("ref_chosen_logps", zeros).add_column(
                "ref_rejected_logps", list(zeros))

    return ReferenceFreeDPOTrainer


def build_dpo_trainer(job: Any, progress: Any) -> Any:
    from trl import DPOConfig, DPOTrainer

    from agentune.tasks.train.job import (
        common_args,
        job_examples,
        job_tokenizer,
        peft_config,
    )

    assert job.dpo is not None
    train, val = job_examples(job)
    args = DPOConfig(
        **common_args(job, DPOConfig, has_val=bool(val)),
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
