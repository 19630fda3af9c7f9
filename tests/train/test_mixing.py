"""Task weights and replay give exactly the configured mix, and the train stage takes replayed
rows from the data versions in the starting model's lineage."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from agentune.config import RunConfig
from agentune.config.store import StoreConfig
from agentune.config.train import TrainConfig
from agentune.tasks.common.schemas import SFT_FEATURES
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.mixing import MixError, apply_task_weights, mix_replay, shares
from agentune.tasks.train.stage import plan_training

from support.tiny_train_model import make_tiny_model, sft_rows


def _rows(kind: str, n: int, tag: str = "new") -> list[dict]:
    return [{"id": f"{tag}-{kind}-{i}", "task_type": kind} for i in range(n)]


def test_shares_sum_to_the_total_by_largest_remainder() -> None:
    assert shares(10, {"a": 0.35, "b": 0.30, "c": 0.20, "d": 0.15}) == {
        "a": 4, "b": 3, "c": 2, "d": 1}
    assert sum(shares(37, {"a": 1, "b": 1, "c": 1}).values()) == 37


def test_task_weights_resample_the_listed_kinds_to_exactly_their_shares() -> None:
    rows = _rows("tool_selection", 30) + _rows("multi_step_planning", 6) + _rows("general", 9)
    weights = {"tool_selection": 0.35, "multi_step_planning": 0.30, "timing_decision": 0.0}
    out, report = apply_task_weights(rows, weights, key="task_type", seed=0, where="v")
    counts = Counter(r["task_type"] for r in out)
    # The listed kinds keep their 36 rows between them, split 35:30; general passes through.
    assert counts == {"tool_selection": 19, "multi_step_planning": 17, "general": 9}
    assert report is not None and report.after == dict(sorted(counts.items()))
    # Without repetition where a kind has enough rows; with it where it has too few.
    assert len({r["id"] for r in out if r["task_type"] == "tool_selection"}) == 19
    assert len({r["id"] for r in out if r["task_type"] == "multi_step_planning"}) == 6
    again, _ = apply_task_weights(rows, weights, key="task_type", seed=0, where="v")
    assert [r["id"] for r in again] == [r["id"] for r in out]  # seeded


def test_a_weighted_kind_without_rows_is_an_error() -> None:
    with pytest.raises(MixError, match=r"no train row of kind \['tool_retrieval'\]"):
        apply_task_weights(_rows("tool_selection", 3), {"tool_retrieval": 1.0},
                           key="task_type", seed=0, where="sft_dataset@x")


@pytest.mark.parametrize(("new", "ratio", "older", "buffer", "replayed"), [
    (30, 0.25, [50], 20, 10),   # enough in the buffer: no repetition
    (30, 0.5, [4, 4], 6, 30),   # a small buffer is cycled through to keep the ratio
    (9, 0.3, [100], 4096, 4),   # round(9 * 0.3 / 0.7) = 4
])
def test_replay_gives_exactly_the_configured_share(new: int, ratio: float, older: list[int],
                                                   buffer: int, replayed: int) -> None:
    earlier = [(f"sft_dataset@v{i}", _rows("general", n, tag=f"v{i}"))
               for i, n in enumerate(older)]
    mixed, report = mix_replay(_rows("general", new), earlier, buffer_size=buffer, ratio=ratio,
                               seed=0)
    old = [r for r in mixed if not r["id"].startswith("new")]
    assert len(old) == replayed == report.replayed and len(mixed) == new + replayed
    assert report.buffer == min(buffer, sum(older))
    assert abs(report.report()["replayed share"] - ratio) < 1 / (new + replayed)
    if sum(older) >= replayed:
        assert len({r["id"] for r in old}) == replayed
    # The most recent earlier version fills the buffer first.
    assert {r["id"].split("-")[0] for r in old} == ({"v0"} if older[0] >= buffer else
                                                   {f"v{i}" for i in range(len(older))})


def test_the_stage_replays_the_data_of_the_starting_models_lineage(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    model_dir = make_tiny_model(tmp_path / "tiny")
    old_rows = [dict(r, id=f"old-{r['id']}") for r in sft_rows(copies=3)]
    # Versions are keyed by parents and params: the two datasets say which they are.
    old = store.publish("sft_dataset", old_rows, features=SFT_FEATURES, params={"v": 1}).ref
    parent = store.publish("model", None, parents=[old], params={"method": "sft"},
                           files={"model": model_dir}).ref
    new = store.publish("sft_dataset", sft_rows(copies=2), features=SFT_FEATURES,
                        params={"v": 2}).ref
    config = RunConfig(store=StoreConfig(root=str(store.root)), train=TrainConfig(
        base_model=str(model_dir), from_model=str(parent), max_length=512,
        work_dir=str(tmp_path / "runs"), replay={"buffer_size": 100, "ratio": 0.2},
        task_weights={"tool_selection": 0.5, "general": 0.5}))
    plan = plan_training(config, store)
    assert plan.dataset == new and old in plan.parents and parent in plan.parents
    weights = plan.mix["task weights"]
    assert weights["rows after"] == {"general": 4, "tool_selection": 4}, weights  # 2+6 -> 4+4
    replay = plan.mix["replay"]
    assert replay["earlier versions"] == [str(old)] and replay["new rows"] == 8
    assert replay["replayed rows"] == 2 and replay["replayed share"] == 0.2
    assert len(plan.train_examples) == 10
    assert plan.params["train"]["replay"] == {"buffer_size": 100, "ratio": 0.2}
