"""Stage 5: full-parameter SFT under DeepSpeed ZeRO-3, launched as a multi-process job."""

STAGE = "train"
"""The stage's name in rejects, usage rows, logs and the Prefect UI."""
