"""SFT: TRL's SFTTrainer on an ``sft_dataset`` version's examples (``messages`` form: loss on
the assistant turns; ``steps`` form: on the completions), packed where train.packing says so."""

from __future__ import annotations

from typing import Any

from agentune.config import RunConfig
from agentune.config.train import TrainConfig
from agentune.tasks.llm.model_folders import ModelFolder
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.examples import TokenCount, count_tokens, to_dataset
from agentune.tasks.train.inputs import example_data
from agentune.tasks.train.job import TrainJob, common_args, job_examples, peft_config
from agentune.tasks.train.method import Prepared, TrainMethod


def require_trainable_tokens(tokens: TokenCount, settings: TrainConfig, where: str) -> None:
    """Every row training on nothing would fail TRL mid-launch, or learn nothing: stop before."""
    if tokens.untrainable != tokens.sampled:
        return
    part = "assistant turns" if settings.sample_form == "messages" else "completions"
    raise ValueError(
        f"{where}: no train example has a token to train on within train.max_length = "
        f"{settings.max_length} (their {part} start later): raise train.max_length, or "
        f"rebuild the dataset with dataset.max_length = {settings.max_length}, which drops "
        "such rows as recorded rejects")


class SFT(TrainMethod):
    name = "sft"
    text = "supervised fine-tuning (TRL SFTTrainer)"
    packs = True

    def prepare(self, config: RunConfig, store: ArtifactStore, start: ModelFolder,
                tokenizer: Any, template: str) -> Prepared:
        settings = config.train
        data = example_data(config, store, self.name, start)
        tokens = count_tokens(tokenizer, data.train, chat_template=template,
                              max_length=settings.max_length, seed=config.seed)
        require_trainable_tokens(tokens, settings, str(data.dataset))
        return Prepared(data, tokens)

    def loss_on(self, job: TrainJob) -> str:
        return "assistant turns" if job.sample_form == "messages" else "completions"

    def build_trainer(self, job: TrainJob, progress: Any) -> Any:
        from transformers import AutoTokenizer
        from trl import SFTConfig, SFTTrainer

        train, val = job_examples(job)
        args = SFTConfig(
            **common_args(job, SFTConfig, has_val=bool(val)),
            include_num_input_tokens_seen="non_padding",
            max_length=job.max_length,
            packing=job.packing,
            assistant_only_loss=job.sample_form == "messages",
            completion_only_loss=job.sample_form == "steps",
            chat_template_path=job.chat_template,
        )
        tokenizer = AutoTokenizer.from_pretrained(job.base_model)
        return SFTTrainer(
            model=job.base_model,
            args=args,
            train_dataset=to_dataset(train, job.sample_form),
            eval_dataset=to_dataset(val, job.sample_form) if val else None,
            processing_class=tokenizer,
            callbacks=[progress],
            peft_config=peft_config(job),
        )
