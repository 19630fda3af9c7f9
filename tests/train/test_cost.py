"""The pre-launch cost estimate, calibrated on the seed's 7B/14B/72B A100 table."""

from __future__ import annotations

import typing

import pytest

from agentune.config.train import TrainCostConfig
from agentune.tasks.train.cost import (
    GPU_PEAK_TFLOPS,
    SEED_CALIBRATION,
    calibrated_mfu,
    estimate_training_cost,
)


@pytest.mark.parametrize("row", SEED_CALIBRATION, ids=lambda r: f"{r.params_b:g}B")
def test_the_seed_table_is_reproduced(row) -> None:
    est = estimate_training_cost(
        params=int(row.params_b * 1e9), tokens=int(row.tokens * row.epochs), gpu_type="A100",
        gpu_count=row.gpus, price_per_gpu_hour=row.price_per_gpu_hour, currency="CNY")
    assert est.hours == pytest.approx(row.hours, rel=1e-9)
    assert est.cost == pytest.approx(row.cost, rel=1e-9)


def test_the_seed_costs_are_the_published_numbers() -> None:
    # KwaiAgents' MAT cost table: 17371.0, 26681.9 and 88939.5 CNY.
    assert [round(r.cost, 1) for r in SEED_CALIBRATION] == [17371.0, 26681.9, 88939.5]
    assert [round(r.mfu, 3) for r in SEED_CALIBRATION] == [0.176, 0.183, 0.141]


def test_mfu_between_and_beyond_the_table() -> None:
    mfu_14b, mfu_72b = SEED_CALIBRATION[1].mfu, SEED_CALIBRATION[2].mfu
    assert mfu_72b < calibrated_mfu(32e9) < mfu_14b
    assert calibrated_mfu(135e6) == SEED_CALIBRATION[0].mfu
    assert calibrated_mfu(400e9) == mfu_72b


def test_faster_gpus_and_more_of_them_cost_less_time() -> None:
    common = {"params": 7_000_000_000, "tokens": 1_000_000_000, "price_per_gpu_hour": 30.0,
              "currency": "CNY"}
    a100 = estimate_training_cost(gpu_type="A100", gpu_count=4, **common)
    h100 = estimate_training_cost(gpu_type="H100", gpu_count=4, **common)
    eight = estimate_training_cost(gpu_type="A100", gpu_count=8, **common)
    assert h100.hours == pytest.approx(a100.hours * 312 / 989)
    assert eight.hours == pytest.approx(a100.hours / 2) and eight.cost == pytest.approx(a100.cost)


def test_budget_and_summary() -> None:
    est = estimate_training_cost(params=7_000_000_000, tokens=2_350_000_000, gpu_type="A100",
                                 gpu_count=4, price_per_gpu_hour=34.742, currency="CNY",
                                 max_cost=10_000)
    assert est.over_budget
    assert "7B params x 2.35B tokens on 4 x A100" in est.summary()
    assert "125.0 h wall, 500 GPU-hours, 17,371.00 CNY" in est.summary()
    assert "OVER BUDGET" in est.summary()
    assert not estimate_training_cost(params=7_000_000_000, tokens=2_350_000_000,
                                      gpu_type="A100", gpu_count=4, price_per_gpu_hour=34.742,
                                      currency="CNY", max_cost=20_000).over_budget
    with pytest.raises(ValueError, match="gpu_type 'V100'"):
        estimate_training_cost(params=1, tokens=1, gpu_type="V100", gpu_count=1,
                               price_per_gpu_hour=1, currency="USD")


def test_config_offers_exactly_the_known_gpu_types() -> None:
    choices = typing.get_args(TrainCostConfig.model_fields["gpu_type"].annotation)
    assert set(choices) == set(GPU_PEAK_TFLOPS)

