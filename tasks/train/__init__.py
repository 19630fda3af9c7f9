"""Stage 5: SFT, DPO or GRPO (TRL) under DeepSpeed ZeRO-3 (or in one process without DeepSpeed),
full parameters or LoRA, launched as a job of its own."""

STAGE = "train"
"""The stage's name in rejects, usage rows, logs and the Prefect UI."""
