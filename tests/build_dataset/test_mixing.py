"""Mixing general data at agent : general = ratio : 1, exact by samples and by tokens, stratified;
coreset selection orders (random, diversity, loss_topk, hybrid) and the losses they use."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

import pytest

from agentune.tasks.build_dataset.coreset import selection_order, student_losses, unigram_losses
from agentune.tasks.build_dataset.mixing import (
    interleave_strata,
    mix_general,
    round_half_up,
    stratified_order,
    take_tokens,
)
from agentune.tasks.build_dataset.samples import AGENT, GENERAL, Sample
from agentune.tasks.common.chat_audit import ChatAuditor

from support.tiny_student import make_tiny_student


def make_sample(sid: str, *, source: str = GENERAL, origin: str = "g.jsonl", lang: str = "en",
                task_type: str = "tool_selection", template_source: str = "benchmark",
                n_tokens: int = 100, text: str | None = None) -> Sample:
    content = text if text is not None else f"answer {sid}"
    return Sample(
        id=sid, source=source, messages=[{"role": "user", "content": f"question {sid}"},
                                         {"role": "assistant", "content": content}],
        tools=[], steps=[], query=f"question {sid}", lang=lang,
        task_type=GENERAL if source == GENERAL else task_type, origin=origin,
        template_source=None if source == GENERAL else template_source, n_tokens=n_tokens)


def _tokens(sample: Sample) -> int:
    return sample.n_tokens


@pytest.mark.parametrize("ratio", [5.0, 3.0, 2.5, 1.0])
@pytest.mark.parametrize("n_agent", [1, 7, 10, 23, 101])
def test_ratio_exact_by_samples(n_agent: int, ratio: float) -> None:
    agent = [make_sample(f"a{i}", source=AGENT) for i in range(n_agent)]
    pool = [make_sample(f"g{i}") for i in range(200)]
    mix = mix_general(agent, stratified_order(pool, "random", seed="s"), ratio=ratio,
                      by="samples", tokens=_tokens)
    assert len(mix.general) == round_half_up(n_agent / ratio)
    assert abs(len(mix.general) - n_agent / ratio) <= 0.5  # the nearest whole number of rows
    assert mix.stats["general_short"] is False


@pytest.mark.parametrize("seed", range(8))
def test_ratio_exact_by_tokens(seed: int) -> None:
    rng = random.Random(seed)
    agent = [make_sample(f"a{i}", source=AGENT, n_tokens=rng.randint(200, 3000))
             for i in range(rng.randint(5, 60))]
    pool = [make_sample(f"g{i}", n_tokens=rng.randint(20, 900)) for i in range(400)]
    ratio = rng.choice([5.0, 4.0, 2.0])
    mix = mix_general(agent, stratified_order(pool, "random", seed=str(seed)), ratio=ratio,
                      by="tokens", tokens=_tokens)
    target = sum(s.n_tokens for s in agent) / ratio
    achieved = sum(s.n_tokens for s in mix.general)
    # Within half of the sample that crossed the target, so within one sample.
    assert abs(achieved - target) <= max(s.n_tokens for s in pool) / 2
    assert mix.stats["ratio_by_tokens"] == round(sum(s.n_tokens for s in agent) / achieved, 4)


def test_take_tokens_keeps_the_crossing_sample_only_when_closer() -> None:
    pool = [make_sample(f"g{i}", n_tokens=n) for i, n in enumerate([40, 40, 30])]
    assert [s.id for s in take_tokens(pool, 96, _tokens)[0]] == ["g0", "g1", "g2"]  # 110 vs 80
    assert [s.id for s in take_tokens(pool, 94, _tokens)[0]] == ["g0", "g1"]  # 80 vs 110
    assert take_tokens(pool, 500, _tokens) == (pool, False)  # the pool runs out
    assert take_tokens(pool, 0, _tokens) == ([], True)


def test_general_pool_running_short_is_reported() -> None:
    agent = [make_sample(f"a{i}", source=AGENT) for i in range(50)]
    pool = [make_sample(f"g{i}") for i in range(4)]
    mix = mix_general(agent, iter(pool), ratio=5.0, by="samples", tokens=_tokens)
    assert len(mix.general) == 4 and mix.stats["general_short"] is True
    assert mix.stats["ratio_by_samples"] == 12.5


def test_refused_rows_are_replaced_by_the_next_in_order() -> None:
    agent = [make_sample(f"a{i}", source=AGENT) for i in range(10)]
    pool = [make_sample(f"g{i}") for i in range(5)]
    mix = mix_general(agent, iter(pool), ratio=5.0, by="samples", tokens=_tokens,
                      admit=lambda s: s.id != "g0")
    assert [s.id for s in mix.general] == ["g1", "g2"]


def test_any_prefix_is_stratified() -> None:
    pool = ([make_sample(f"a{i}", origin="a.jsonl", lang="en") for i in range(60)]
            + [make_sample(f"b{i}", origin="a.jsonl", lang="zh") for i in range(30)]
            + [make_sample(f"c{i}", origin="c.jsonl", lang="en") for i in range(10)])
    order = list(stratified_order(pool, "random", seed="x"))
    assert sorted(s.id for s in order) == sorted(s.id for s in pool)
    for k in (5, 10, 20, 37, 64, 100):
        counts = Counter(s.stratum for s in order[:k])
        for stratum, size in ((("a.jsonl", "en"), 60), (("a.jsonl", "zh"), 30),
                              (("c.jsonl", "en"), 10)):
            assert abs(counts[stratum] - k * size / 100) <= 1, (k, stratum, counts)


def test_interleave_skips_exhausted_strata() -> None:
    a = [make_sample("a")]
    b = [make_sample(f"b{i}") for i in range(3)]
    merged = interleave_strata({("a",): iter(a), ("b",): iter(b)}, {("a",): 5, ("b",): 3})
    assert sorted(s.id for s in merged) == ["a", "b0", "b1", "b2"]


# --------------------------------------------------------------------------- coreset orders


def _clustered_pool() -> list[Sample]:
    """5 topics x 10 near-identical answers."""
    topics = ["weather forecast rain umbrella", "stock market shares price",
              "football match goal score", "recipe flour sugar oven", "train ticket station"]
    return [make_sample(f"{t}-{i}", text=f"{topic} {topic} variant {i}")
            for t, topic in enumerate(topics) for i in range(10)]


def _topic(sample: Sample) -> str:
    return sample.id.split("-")[0]


def test_random_order_is_seeded_permutation() -> None:
    pool = _clustered_pool()
    one = [s.id for s in selection_order(pool, "random", seed="1")]
    assert one == [s.id for s in selection_order(list(reversed(pool)), "random", seed="1")]
    assert one != [s.id for s in selection_order(pool, "random", seed="2")]
    assert sorted(one) == sorted(s.id for s in pool)


def test_diversity_covers_every_topic_first() -> None:
    order = list(selection_order(_clustered_pool(), "diversity", seed="1"))
    assert len({_topic(s) for s in order[:5]}) == 5
    assert len(order) == 50


def test_loss_topk_and_hybrid() -> None:
    pool = _clustered_pool()
    losses = {s.id: (10.0 if _topic(s) == "0" else 1.0) + int(s.id.split("-")[1]) / 100
              for s in pool}
    top = [s.id for s in selection_order(pool, "loss_topk", seed="1", losses=losses)]
    assert top[:3] == ["0-9", "0-8", "0-7"]
    hybrid = list(selection_order(pool, "hybrid", seed="1", losses=losses, loss_share=0.5))
    first = hybrid[:10]
    assert {_topic(s) for s in first} == {"0", "1", "2", "3", "4"}  # diversity picks
    assert sum(_topic(s) == "0" for s in first) >= 5  # loss picks: the high-loss topic
    assert len({s.id for s in hybrid}) == 50
    with pytest.raises(ValueError, match="needs per-row losses"):
        list(selection_order(pool, "loss_topk", seed="1"))


def test_unigram_and_student_losses(tmp_path: Path) -> None:
    student = make_tiny_student(tmp_path / "tiny")
    auditor = ChatAuditor(student, max_length=256)
    common = "the cat sat on the mat " * 3
    pool = [make_sample(f"c{i}", text=common) for i in range(6)]
    pool.append(make_sample("rare", text="zygomorphic quixotic xylophone juxtaposition"))
    proxy = unigram_losses(pool, auditor)
    assert set(proxy) == {s.id for s in pool}
    assert proxy["rare"] > max(v for k, v in proxy.items() if k != "rare")

    # Tiny batches and logit chunks (3 trained tokens at a time): the same numbers as one pass.
    losses = student_losses(pool, auditor, student, max_batch_tokens=64,
                            logits_budget_bytes=3 * 4 * len(auditor.tokenizer))
    whole = student_losses(pool, auditor, student, max_batch_tokens=1 << 20,
                           logits_budget_bytes=1 << 30)
    assert losses == pytest.approx(whole, rel=1e-5)
    assert set(losses) == {s.id for s in pool}
    # A random model is about uniform over the vocabulary: loss near ln(vocab).
    assert all(abs(v - math.log(len(auditor.tokenizer))) < 1.0 for v in losses.values())
    # Same number as the model's own loss on the assistant-masked labels, one row at a time.
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(student)).eval()
    ids, mask = auditor.encode(pool[-1].messages, pool[-1].tools)
    labels = torch.tensor([t if m else -100 for t, m in zip(ids, mask, strict=True)])
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([ids]), labels=labels[None]).loss.item()
    assert losses["rare"] == pytest.approx(expected, rel=1e-4)
