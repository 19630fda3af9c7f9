"""The training methods by name: what train.method selects in the stage and
``TrainJob.method`` in the training processes."""

from __future__ import annotations

from agentune.tasks.train.dpo import DPO
from agentune.tasks.train.grpo import GRPO
from agentune.tasks.train.method import TrainMethod
from agentune.tasks.train.sft import SFT

METHODS: dict[str, TrainMethod] = {method.name: method for method in (SFT(), DPO(), GRPO())}
