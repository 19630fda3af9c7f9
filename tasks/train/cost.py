"""What a training run will cost, estimated before launch.

Compute is the usual dense-transformer count, 6 FLOPs per parameter per trained token (forward and
backward). Time is that compute over the cluster's peak bf16 throughput times the model FLOPs
utilisation (MFU) such runs reach. The MFU is calibrated on the cost table KwaiAgents published for MAT
(HuggingFace Trainer + DeepSpeed ZeRO-3, max_len 4096, Flash Attention, bf16, batch size 1, AdamW,
470M tokens on A100-80G): those runs reach 14-18 % of peak, lower for the 72B model spread over 32
GPUs. Between calibration sizes the MFU is interpolated in log(parameters); outside, the nearest
row's is used.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Any

# Dense bf16 peak of one GPU, TFLOP/s (vendor datasheets, SXM parts, without sparsity).
GPU_PEAK_TFLOPS: dict[str, float] = {
    "A100": 312.0,
    "A800": 312.0,
    "H100": 989.0,
    "H800": 989.0,
    "H200": 989.0,
    "H20": 148.0,
    "L40S": 362.0,
    "RTX4090": 165.0,
}


@dataclass(frozen=True)
class CalibrationRun:
    """One row of the seed's cost table."""

    params_b: float
    gpus: int
    tokens: float
    epochs: int
    hours: float
    price_per_gpu_hour: float  # CNY

    @property
    def mfu(self) -> float:
        flops = 6 * self.params_b * 1e9 * self.tokens * self.epochs
        return flops / (self.gpus * GPU_PEAK_TFLOPS["A100"] * 1e12 * self.hours * 3600)

    @property
    def cost(self) -> float:
        return self.gpus * self.hours * self.price_per_gpu_hour


# KwaiAgents' MAT cost table: 7B on 4, 14B on 8, 72B on 32 A100-80G; 470M tokens; 25 h x 5 epochs,
# 24 h x 4, 40 h x 2; 34.742 CNY per GPU-hour.
SEED_CALIBRATION: tuple[CalibrationRun, ...] = (
    CalibrationRun(7, 4, 470e6, 5, 125, 34.742),
    CalibrationRun(14, 8, 470e6, 4, 96, 34.742),
    CalibrationRun(72, 32, 470e6, 2, 80, 34.742),
)


def calibrated_mfu(params: float) -> float:
    """The MFU the seed's runs reach at this model size (log-linear between table rows)."""
    rows = sorted(SEED_CALIBRATION, key=lambda r: r.params_b)
    size = params / 1e9
    if size <= rows[0].params_b:
        return rows[0].mfu
    for low, high in itertools.pairwise(rows):
        if size <= high.params_b:
            t = math.log(size / low.params_b) / math.log(high.params_b / low.params_b)
            return low.mfu + t * (high.mfu - low.mfu)
    return rows[-1].mfu


def _count(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def _duration(hours: float) -> str:
    if hours >= 1:
        return f"{hours:,.1f} h"
    if hours * 60 >= 1:
        return f"{hours * 60:.1f} min"
    return f"{hours * 3600:.2g} s"


@dataclass(frozen=True)
class CostEstimate:
    params: int
    tokens: int
    """Tokens the run trains on in total (all epochs / steps)."""
    gpu_type: str
    gpu_count: int
    mfu: float
    mfu_source: str
    hours: float
    gpu_hours: float
    price_per_gpu_hour: float
    currency: str
    cost: float
    max_cost: float | None

    @property
    def over_budget(self) -> bool:
        return self.max_cost is not None and self.cost > self.max_cost

    def summary(self) -> str:
        budget = "" if self.max_cost is None else (
            f"; budget {self.max_cost:,.2f} {self.currency}: "
            + ("OVER BUDGET" if self.over_budget else "within budget")
        )
        return (
            f"estimated training cost: {_count(self.params)} params x {_count(self.tokens)} tokens "
            f"on {self.gpu_count} x {self.gpu_type} at {self.mfu:.1%} MFU ({self.mfu_source}) "
            f"-> {_duration(self.hours)} wall, {self.gpu_hours:,.3g} GPU-hours, "
            f"{self.cost:,.2f} {self.currency}{budget}"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"over_budget": self.over_budget}


class OverBudgetError(RuntimeError):
    """The estimate exceeds the configured budget; nothing was launched."""


def estimate_training_cost(*, params: int, tokens: int, gpu_type: str, gpu_count: int,
                           price_per_gpu_hour: float, currency: str,
                           mfu: float | None = None, max_cost: float | None = None) -> CostEstimate:
    """Hours and money for training ``params`` parameters on ``tokens`` tokens in total."""
    if gpu_type not in GPU_PEAK_TFLOPS:
        raise ValueError(f"gpu_type {gpu_type!r}: known types are {', '.join(GPU_PEAK_TFLOPS)}")
    if gpu_count < 1:
        raise ValueError(f"gpu_count must be at least 1, got {gpu_count}")
    used_mfu = mfu if mfu is not None else calibrated_mfu(params)
    source = "configured" if mfu is not None else "calibrated on the seed's A100 table"
    flops = 6.0 * params * tokens
    seconds = flops / (gpu_count * GPU_PEAK_TFLOPS[gpu_type] * 1e12 * used_mfu)
    hours = seconds / 3600
    return CostEstimate(
        params=params, tokens=tokens, gpu_type=gpu_type, gpu_count=gpu_count, mfu=used_mfu,
        mfu_source=source, hours=hours, gpu_hours=hours * gpu_count,
        price_per_gpu_hour=price_per_gpu_hour, currency=currency,
        cost=hours * gpu_count * price_per_gpu_hour, max_cost=max_cost,
    )
