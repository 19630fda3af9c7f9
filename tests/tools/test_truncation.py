"""Observation truncation to a token budget: the three sides, with a tokenizer and estimated."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from agentune.tasks.tools.truncation import (
    count_tokens,
    estimate_tokens,
    truncate_observation,
)

TEXT = "BEGIN " + " ".join(f"item{i}" for i in range(200)) + " END"
CHINESE = "开头" + "，".join(f"第{i}条记录" for i in range(100)) + "结尾"


@pytest.fixture(scope="module")
def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A real Hugging Face tokenizer, one token per UTF-8 byte (a CJK character is 3 tokens, so
    cuts land inside characters)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def test_short_text_is_untouched(byte_tokenizer: PreTrainedTokenizerFast) -> None:
    for tokenizer in (None, byte_tokenizer):
        cut = truncate_observation("short answer", 64, "middle", tokenizer)
        assert cut.text == "short answer" and not cut.truncated
        assert cut.tokens == count_tokens("short answer", tokenizer)


@pytest.mark.parametrize("tokenizer_given", [False, True])
def test_left_keeps_the_beginning(tokenizer_given: bool, byte_tokenizer) -> None:
    tokenizer = byte_tokenizer if tokenizer_given else None
    cut = truncate_observation(TEXT, 60, "left", tokenizer)
    assert cut.truncated and cut.tokens == count_tokens(TEXT, tokenizer)
    assert cut.text.startswith("BEGIN item0 item1")
    assert "END" not in cut.text and cut.text.endswith("(truncated)")
    assert count_tokens(cut.text, tokenizer) <= 60


@pytest.mark.parametrize("tokenizer_given", [False, True])
def test_right_keeps_the_end(tokenizer_given: bool, byte_tokenizer) -> None:
    tokenizer = byte_tokenizer if tokenizer_given else None
    cut = truncate_observation(TEXT, 60, "right", tokenizer)
    assert cut.text.startswith("(truncated)") and cut.text.endswith("item199 END")
    assert "BEGIN" not in cut.text
    assert count_tokens(cut.text, tokenizer) <= 60


@pytest.mark.parametrize("tokenizer_given", [False, True])
def test_middle_keeps_both_ends(tokenizer_given: bool, byte_tokenizer) -> None:
    tokenizer = byte_tokenizer if tokenizer_given else None
    cut = truncate_observation(TEXT, 60, "middle", tokenizer)
    head, marker, tail = cut.text.partition(" …(truncated)… ")
    assert marker and head.startswith("BEGIN") and tail.endswith("END")
    assert "item100" not in cut.text
    assert count_tokens(cut.text, tokenizer) <= 60


def test_tokenizer_budget_is_exact_and_cut_characters_are_dropped(byte_tokenizer) -> None:
    for side in ("left", "right", "middle"):
        for budget in (30, 31, 32, 100):
            cut = truncate_observation(CHINESE, budget, side, byte_tokenizer)
            assert cut.truncated
            assert len(byte_tokenizer.encode(cut.text, add_special_tokens=False)) <= budget
            # Three bytes per character: a cut mid-character leaves no replacement character.
            assert "\ufffd" not in cut.text
    assert truncate_observation(CHINESE, 40, "left", byte_tokenizer).text.startswith("开头")
    assert truncate_observation(CHINESE, 40, "right", byte_tokenizer).text.endswith("结尾")


def test_estimate_counts_chinese_higher_than_ascii() -> None:
    assert estimate_tokens("abcd" * 10) == 10
    assert estimate_tokens("中文" * 10) == 20
    assert estimate_tokens("é" * 4) == 2
    cut = truncate_observation(CHINESE, 50, "middle")
    assert cut.text.startswith("开头") and cut.text.endswith("结尾")
    assert estimate_tokens(cut.text) <= 50


def test_tiny_budget_still_returns_the_marker() -> None:
    cut = truncate_observation(TEXT, 1, "left")
    assert cut.truncated and "(truncated)" in cut.text and "BEGIN" not in cut.text


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        truncate_observation(TEXT, 0, "left")
    with pytest.raises(ValueError, match="side"):
        truncate_observation(TEXT, 10, "top")  # type: ignore[arg-type]
