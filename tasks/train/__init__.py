"""Stage 5: SFT, DPO or GRPO (TRL) under DeepSpeed ZeRO-3, full parameters or LoRA, launched as a
multi-process job."""

STAGE = "train"
"""The stage's name in rejects, usage rows, logs and the Prefect UI."""
