"""build_dataset end to end: the mixing ratio through the whole build (by samples and by tokens),
the coreset cap, over-length rows, every dropped row accounted for, the stage flow publishing
`sft_dataset` + card + `rejects` and reusing them, and the Parquet round trip into TRL's
SFTTrainer data preparation."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import datasets
import pandas as pd
import pytest

from agentune.config import RunConfig
from agentune.config.build_dataset import BuildDatasetConfig
from agentune.tasks.build_dataset.general_data import load_general_data
from agentune.tasks.build_dataset.mixing import round_half_up
from agentune.tasks.build_dataset.samples import sample_from_trajectory
from agentune.tasks.build_dataset.stage import (
    SPLITS,
    DatasetBuild,
    DatasetInputs,
    build_sft_dataset,
)
from agentune.tasks.common.chat_audit import ChatAuditor
from agentune.tasks.common.schemas import SFT_FEATURES, TRAJECTORY_FEATURES
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.store.artifact_store import ArtifactStore

from support.tiny_models import sft_trainer_for
from support.tiny_student import make_tiny_student
from support.trajectories import en_words, make_trajectories, trajectory_row, zh_text


def general_file(path: Path, n: int, seed: int = 0) -> Path:
    """``n`` alpaca rows, English and Chinese, of varied lengths."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            zh = i % 2 == 1
            text = (lambda k: zh_text(rng, k)) if zh else (lambda k: en_words(rng, k))
            fh.write(json.dumps({"instruction": text(rng.randint(5, 15)), "input": "",
                                 "output": text(rng.randint(10, 200))}, ensure_ascii=False) + "\n")
    return path


# The mixing, coreset and audit tests count rows as verified: no derived rows
# (tests/build_dataset/test_derivations.py tests those through the whole build).
NO_DERIVATIONS = {"orders": 0, "no_call_share": 0, "general_tools": 0}


@pytest.fixture(scope="module")
def auditor() -> ChatAuditor:
    return ChatAuditor(resolve_model_path("embedded"), max_length=4096)


def run(rows: list[dict[str, Any]], general: Path, auditor: ChatAuditor, seed: int = 0,
        **settings: Any) -> DatasetBuild:
    settings.setdefault("augment", NO_DERIVATIONS)
    cfg = BuildDatasetConfig(general_data=[str(general)], **settings)
    samples, rejects = load_general_data(cfg.general_data)
    if auditor.max_length != cfg.max_length:
        auditor = ChatAuditor(auditor.model_path, max_length=cfg.max_length)
    inputs = DatasetInputs(rows, "trajectories@test", samples, rejects, [general.name])
    return build_sft_dataset(inputs, cfg, seed=seed, auditor=auditor)


@pytest.mark.parametrize("by", ["samples", "tokens"])
def test_build_mixes_at_the_ratio_and_accounts_for_every_row(tmp_path, auditor, by) -> None:
    gen = make_trajectories(90, exact_dups=6, near_dups=6, seed=31)
    build = run(gen.rows, general_file(tmp_path / "g.jsonl", 400), auditor, mix_by=by)
    out = pd.DataFrame([{k: v for k, v in r.items() if k not in ("messages", "tools", "steps")}
                        for r in build.rows()])
    for split in SPLITS:
        m = build.stats["mixing"][split]
        part = out[out.split == split]
        assert m["agent_rows"] == (part.source == "agent").sum() > 0
        assert m["general_rows"] == (part.source == "general").sum()
        if by == "samples":
            assert m["general_rows"] == round_half_up(m["agent_rows"] / 5)
        else:
            longest = max(s.n_tokens for s in build.samples if s.source == "general")
            assert abs(m["general_tokens"] - m["agent_tokens"] / 5) <= longest / 2
        assert not m["general_short"]
    # No query set in two splits.
    agent = out[out.source == "agent"]
    assert (agent.groupby("set_id").split.nunique() == 1).all()
    # Every trajectory is in the output or has a reject; one row at most of each planted group.
    rejected = Counter(r.reason for r in build.rejects)
    assert set(agent.id) | {r.item_id for r in build.rejects} >= {r["id"] for r in gen.rows}
    assert max(Counter(gen.group_of[i] for i in agent.id).values()) == 1
    assert rejected["exact_duplicate"] == 6 and rejected["near_duplicate"] == 6
    assert build.stats["audit"]["all"]["no_trainable_token"] == 0
    assert list(build.rows()[0]) == list(SFT_FEATURES)


def test_steps_form_mixes_and_audits_the_examples_trained(tmp_path, auditor) -> None:
    """In the steps form an agent row trains as one example per step and a general row as
    one: the 5:1 ratio counts examples, and the audit measures each prompt/completion."""
    gen = make_trajectories(60, seed=33)
    general = general_file(tmp_path / "g.jsonl", 600)
    cfg = BuildDatasetConfig(general_data=[str(general)])
    samples, rejects = load_general_data(cfg.general_data)
    inputs = DatasetInputs(gen.rows, "trajectories@test", samples, rejects, [general.name])
    build = build_sft_dataset(inputs, cfg, seed=0, auditor=auditor, form="steps")
    rows = [r for r in build.rows() if r["split"] == "train"]
    agent_examples = sum(len(r["steps"]) for r in rows if r["source"] == "agent")
    general_rows = sum(1 for r in rows if r["source"] == "general")
    m = build.stats["mixing"]["train"]
    assert agent_examples > m["agent_rows"]  # multi-step rows: more examples than rows
    assert (m["agent_examples"], m["general_rows"]) == (agent_examples, general_rows)
    assert general_rows == round_half_up(agent_examples / 5)
    one = next(s for s in build.samples if s.source == "agent" and len(s.steps) > 1)
    expected = [len(auditor.encode([{"role": "user", "content": st["prompt"]},
                                    {"role": "assistant", "content": st["completion"]}], [])[0])
                for st in one.steps]
    assert one.n_tokens == sum(expected)
    assert build.stats["audit"]["sample_form"] == "steps"
    assert build.stats["audit"]["all"]["examples"] == sum(
        len(s.steps) if s.source == "agent" else 1 for s in build.samples)


def test_coreset_cap_keeps_strata_in_proportion(tmp_path, auditor) -> None:
    gen = make_trajectories(120, seed=32)
    free = run(gen.rows, general_file(tmp_path / "g.jsonl", 100), auditor)
    capped = run(gen.rows, tmp_path / "g.jsonl", auditor, coreset_size=40, selection="diversity")
    pool = [s for s in free.samples if s.split == "train" and s.source == "agent"]
    kept = [s for s in capped.samples if s.split == "train" and s.source == "agent"]
    assert len(kept) == 40 and len(pool) > 40
    share = Counter(s.stratum for s in pool)
    got = Counter(s.stratum for s in kept)
    for stratum, n in share.items():
        assert abs(got[stratum] - 40 * n / len(pool)) <= 1
    cut = [r for r in capped.rejects if r.reason == "coreset_cap"]
    assert len(cut) == len(pool) - 40
    assert capped.stats["mixing"]["train"]["general_rows"] == 8
    # val and test are not capped
    for split in ("val", "test"):
        assert (sum(s.split == split and s.source == "agent" for s in capped.samples)
                == sum(s.split == split and s.source == "agent" for s in free.samples))


def test_rows_over_max_length_truncated_or_dropped(tmp_path, auditor) -> None:
    gen = make_trajectories(30, seed=33, answer_len=40)
    general = general_file(tmp_path / "g.jsonl", 100)
    lengths = sorted(s.n_tokens for s in run(gen.rows, general, auditor).samples
                     if s.source == "agent")
    max_length = lengths[len(lengths) // 2]
    kept = run(gen.rows, general, auditor, max_length=max_length)
    dropped = run(gen.rows, general, auditor, max_length=max_length, overlength="drop")
    over = [s for s in kept.samples if s.n_tokens > max_length]
    assert over and kept.stats["audit"]["all"]["over_max_length"] == len(over)
    assert all(0 < s.n_trained < s.n_tokens for s in over)
    assert dropped.stats["audit"]["all"]["over_max_length"] == 0
    reasons = Counter(r.reason for r in dropped.rejects)
    assert reasons["over_max_length"] == dropped.stats["audit"]["dropped"]["over_max_length"] > 0


def test_parquet_round_trip_into_sft_trainer_data_preparation(tmp_path, auditor) -> None:
    build = run(make_trajectories(24, seed=34).rows, general_file(tmp_path / "g.jsonl", 30),
                auditor)
    store = ArtifactStore(tmp_path / "store")
    manifest = store.publish("sft_dataset", build.rows(), features=SFT_FEATURES)
    folder = store.version_dir(manifest.ref)
    assert len(pd.read_parquet(folder)) == len(build.samples)
    ds = datasets.load_dataset("parquet", data_dir=str(folder))["train"]
    train = ds.filter(lambda r: r["split"] == "train")
    # Heterogeneous tool arguments come back as they went in, no null-padded merged keys.
    calls = [c["function"]["arguments"] for r in train for m in r["messages"]
             for c in m.get("tool_calls") or []]
    assert calls and all(None not in a.values() for a in calls)
    assert len({tuple(sorted(a)) for a in calls}) == 3

    # The audit's template is what the trainer uses for this student.
    trainer = sft_trainer_for(make_tiny_student(tmp_path / "tiny"), auditor.template, train,
                              tmp_path / "out")
    prepared = trainer.train_dataset
    assert len(prepared) == len(train)
    by_id = {s.id: s for s in build.samples}
    for row in prepared:
        sample = by_id[row["id"]]
        # TRL's tokens and loss mask are the audit's: same length, same trained tokens.
        assert len(row["input_ids"]) == sample.n_tokens
        assert sum(label != -100 for label in row["labels"]) == sample.n_trained
    batch = trainer.data_collator([prepared[0], prepared[1]])
    assert batch["input_ids"].shape[0] == 2


async def test_stage_flow_publishes_card_and_rejects_then_reuses(prefect_api, tmp_path) -> None:
    from agentune.flows.build_dataset import build_dataset

    gen = make_trajectories(40, exact_dups=3, near_dups=3, seed=35)
    store = ArtifactStore(tmp_path / "artifacts")
    store.publish("trajectories", gen.rows, features=TRAJECTORY_FEATURES)
    planted = [r for r in gen.rows if r["id"] in {"t000000", "t000005", "t000010", "t000015"}]
    bench = tmp_path / "benchmark_eval.jsonl"
    bench.write_text("".join(json.dumps({"id": i, "query": r["query"] + "!", "type": "plantooluse"},
                                        ensure_ascii=False) + "\n" for i, r in enumerate(planted)),
                     encoding="utf-8")
    config = RunConfig.model_validate({
        "store": {"root": str(store.root)},
        "llm": {"cache_dir": str(tmp_path / "cache")},
        "dataset": {"general_data": [str(general_file(tmp_path / "g.jsonl", 60))],
                    "benchmark_files": [str(bench)]},
    })

    result = await build_dataset(config=config)
    assert set(result["outputs"]) == {"sft_dataset", "rejects"} and not result["reused"]
    ref = store.resolve("sft_dataset")
    folder = store.version_dir(ref)
    df = pd.read_parquet(folder)
    assert list(df.columns) == list(SFT_FEATURES)
    assert set(df.split) == set(SPLITS) and set(df.source) == {"agent", "general"}
    assert json.loads(df.messages[0][0])["role"] in ("system", "user")  # Json text in pandas
    ds = datasets.load_dataset("parquet", data_dir=str(folder))["train"]
    assert isinstance(ds[0]["messages"][0], dict)
    card = store.file(ref, "README.md").read_text(encoding="utf-8")
    for heading in ("## Sources", "## Counts", "## Mixing", "## Derivations", "## Dedup",
                    "## Decontamination", "## Audit"):
        assert heading in card
    assert store.file(ref, "rows.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shuffled = df[df.derivation == "shuffled"]  # on by default, from train rows only
    assert len(shuffled) and set(shuffled.split) == {"train"}
    assert set(shuffled.derived_from) <= set(df[(df.split == "train")
                                                & (df.derivation == "none")].id)
    manifest = store.manifest(ref)
    assert manifest.parents == [{"name": "trajectories",
                                 "version": store.resolve("trajectories").version}]
    assert manifest.stats["audit"]["all"]["rows"] == len(df)
    rejects = store.read(store.resolve("rejects"))
    reasons = dict(Counter(rejects.reason))
    assert reasons["exact_duplicate"] == 3 and reasons["near_duplicate"] == 3
    # Each planted benchmark paraphrase: its row was tested on, or dropped as contaminated.
    contaminated = set(rejects[rejects.reason == "contaminated"].item_id)
    for row in planted:
        in_test = ((df.id == row["id"]) & (df.split == "test")).any()
        assert in_test or row["id"] in contaminated
    assert contaminated and contaminated <= {r["id"] for r in planted}

    again = await build_dataset(config=config)
    assert again["reused"] and again["outputs"] == result["outputs"]



def test_loss_based_coreset_keeps_the_highest_losses_per_stratum(tmp_path, auditor) -> None:
    gen = make_trajectories(80, seed=36)
    calls: list[int] = []

    def losses(pool):
        calls.append(len(pool))
        return {s.id: float(s.n_tokens) for s in pool}  # longest = "hardest", for the test

    cfg = BuildDatasetConfig(general_data=[str(general_file(tmp_path / "g.jsonl", 50))],
                             coreset_size=20, selection="loss_topk", augment=NO_DERIVATIONS)
    samples, rejects = load_general_data(cfg.general_data)
    build = build_sft_dataset(DatasetInputs(gen.rows, "trajectories@test", samples, rejects),
                              cfg, seed=0, auditor=auditor, losses=losses,
                              losses_origin="token count")
    assert build.stats["coreset"]["losses"] == "token count"
    kept = [s for s in build.samples if s.split == "train" and s.source == "agent"]
    cut = {r.item_id for r in build.rejects if r.reason == "coreset_cap"}
    assert len(kept) == 20 and cut
    by_id = {r["id"]: r for r in gen.rows}
    pool_tokens: dict[tuple[str, str], list[int]] = {}
    for s in kept:
        pool_tokens.setdefault(s.stratum, []).append(s.n_tokens)
    for sid in cut:  # a cut row never beats a kept one of its stratum
        row = by_id[sid]
        stratum = (row["task_type"], row["template_source"])
        cut_tokens = auditor.audit(row["messages"], row["tools"]).n_tokens
        assert cut_tokens <= min(pool_tokens.get(stratum, [10**9]))
    assert len(calls) == 4  # the agent train pool once, each split's general pool once
    with pytest.raises(ValueError, match="needs a loss function"):
        build_sft_dataset(DatasetInputs(gen.rows, "t@x"), cfg, seed=0, auditor=auditor)


def test_a_trajectories_version_from_before_the_guided_column_still_reads() -> None:
    row = trajectory_row(random.Random(0), row_id="t1", set_id="s1", lang="en",
                         task_type="tool_selection", template_source="benchmark")
    del row["guided"]
    assert sample_from_trajectory(row, "trajectories@old", 0).id == "t1"
    del row["attempt"]
    with pytest.raises(ValueError, match="trajectories@old: row 0 .*'attempt'"):
        sample_from_trajectory(row, "trajectories@old", 0)
