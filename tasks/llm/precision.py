"""One precision policy for everything that loads a model: the local provider, the trainers and
the vLLM engine's ``--dtype``.

``auto`` means bf16 where the hardware multiplies bf16 natively and fp32 elsewhere:

- a GPU: bf16 if it supports it, else fp16 for training and fp32 for generation;
- a CPU: bf16 only with AVX512-BF16 or AMX. Without them (an AVX2-only CPU) torch emulates bf16
  matmuls, measured 30-60x slower than fp32 at the 135M's shapes on a 2-core AMD EPYC, so a run
  that picked bf16 there took hours where fp32 takes minutes.

An explicit dtype always wins. Each resolution says why, and the loaders log that line once per
load ("float32: this CPU has no native bf16 (AVX2)").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

log = logging.getLogger("agentune.llm")

DtypeName = Literal["bfloat16", "float16", "float32"]

# The trainers' names for the same dtypes (TrainingArguments' bf16 / fp16 flags).
TRAINING_NAMES: dict[str, str] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def cpu_has_bf16() -> bool:
    """Native bf16 matmuls on this CPU (AVX512-BF16 or AMX); elsewhere bf16 is emulated and slow.
    torch exposes the check only as private helpers, hence the guard."""
    checks = [getattr(torch.cpu, name, None)
              for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)


BF16_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The CPU flags that decide bf16's speed, as /proc/cpuinfo (and ``lscpu``) name them."""


def cpu_report() -> dict[str, object]:
    """The CPU's model name and which of :data:`BF16_FLAGS` it has (Linux's /proc/cpuinfo;
    elsewhere only torch's capability), for benchmark lines and notes."""
    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "flags": [f for f in BF16_FLAGS if f in flags],
            "capability": cpu_capability(), "native_bf16": cpu_has_bf16()}


def cpu_capability() -> str:
    """The vector instruction set torch's CPU kernels use here (``AVX2``, ``AVX512`` ...)."""
    return str(torch.backends.cpu.get_cpu_capability())


def resolve_device(setting: str) -> torch.device:
    """``auto``: the GPU where there is one, else the CPU; any other setting as torch reads it."""
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


@dataclass(frozen=True)
class Precision:
    """A resolved dtype and why it was chosen."""

    name: DtypeName
    reason: str

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.name)

    @property
    def training_name(self) -> str:
        """``bf16`` / ``fp16`` / ``fp32``, as the trainers' precision setting spells it."""
        return TRAINING_NAMES[self.name]

    def log(self, what: str) -> None:
        log.info("%s: %s: %s", what, self.name, self.reason)


def resolve_precision(setting: str, device: str | torch.device, *,
                      gpu_fallback: DtypeName = "float32") -> Precision:
    """``setting`` (``auto`` or a dtype name, also ``bf16``/``fp16``/``fp32``) on ``device``
    (``cpu``, ``cuda`` ...). ``gpu_fallback`` is the dtype of a GPU without bf16: fp16 for
    training (with its loss scaling), fp32 for generation."""
    if setting != "auto":
        names = {short: name for name, short in TRAINING_NAMES.items()}
        name = names.get(setting, setting)
        if name not in TRAINING_NAMES:
            raise ValueError(f"unknown precision {setting!r}: auto, "
                             + ", ".join([*TRAINING_NAMES, *names]))
        return Precision(name, "set explicitly")  # type: ignore[arg-type]
    kind = torch.device(device).type
    if kind == "cuda":
        if torch.cuda.is_bf16_supported():
            return Precision("bfloat16", "this GPU supports bf16")
        return Precision(gpu_fallback, "this GPU has no bf16")
    capability = cpu_capability()
    if cpu_has_bf16():
        return Precision("bfloat16", f"this CPU multiplies bf16 natively ({capability})")
    return Precision("float32", f"this CPU has no native bf16 ({capability}): bf16 would be "
                                "emulated, 30-60x slower than fp32")
