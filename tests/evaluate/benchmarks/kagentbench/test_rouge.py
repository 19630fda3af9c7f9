"""KAgentBench's similarity: mixed tokenisation + ROUGE-L F, with our bit-parallel LCS giving the
same floats as rouge-chinese itself."""

from __future__ import annotations

import random

import pytest
from rouge_chinese import Rouge

from agentune.tasks.evaluate.benchmarks.kagentbench.rouge import (
    lcs_length,
    mixed_tokens,
    punkt_installed,
    resolve_tokenizer,
    rouge_words,
    similarity,
)

_HANZI = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可。！？，、"
_EN = "the a of to search weather city Beijing . , ? ! 2024 \"x\" don't U.S. (a) 3.5 e-mail".split()


def _library_similarity(label: str, prediction: str) -> float:
    """rouge-chinese's own ROUGE-L F on the mixed tokenisation (its O(n*m) dictionary table)."""
    if label == "" or prediction == "":
        return 0.0
    hyp = " ".join(mixed_tokens(prediction, "line"))
    ref = " ".join(mixed_tokens(label, "line"))
    return Rouge().get_scores(hyp, ref)[0]["rouge-l"]["f"]


def _random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 60)):
        if rng.random() < 0.5:
            parts.append(rng.choice(_HANZI) * rng.randint(1, 2))
        else:
            parts.append(rng.choice(_EN))
    return (" " if rng.random() < 0.6 else "").join(parts)


def test_equals_rouge_chinese_on_random_zh_en_pairs() -> None:
    rng = random.Random(20240601)
    for _ in range(1500):
        label, prediction = _random_text(rng), _random_text(rng)
        if rng.random() < 0.2:  # near copies give long common subsequences
            prediction = label[: rng.randint(0, len(label))] + _random_text(rng)
        assert similarity(label, prediction) == _library_similarity(label, prediction)


def test_lcs_matches_the_textbook_table_on_random_sequences() -> None:
    rng = random.Random(7)

    def table(a: tuple[str, ...], b: tuple[str, ...]) -> int:
        rows = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i, x in enumerate(a, 1):
            for j, y in enumerate(b, 1):
                rows[i][j] = rows[i - 1][j - 1] + 1 if x == y else max(rows[i - 1][j],
                                                                         rows[i][j - 1])
        return rows[-1][-1]

    for _ in range(500):
        alphabet = "abcde"[: rng.randint(1, 5)]
        a = tuple(rng.choice(alphabet) for _ in range(rng.randint(0, 90)))
        b = tuple(rng.choice(alphabet) for _ in range(rng.randint(0, 90)))
        assert lcs_length(a, b) == table(a, b)


def test_hand_computed_chinese_and_english() -> None:
    # 查询北京天气 vs 查询上海天气: 6 characters each, LCS 查询天气 = 4 -> p = r = 2/3.
    assert similarity("查询北京天气", "查询上海天气") == pytest.approx(2 / 3, abs=1e-7)
    # English words: "search the weather" vs "search weather now": LCS 2, p = r = 2/3.
    assert similarity("search the weather", "search weather now") == pytest.approx(2 / 3,
                                                                                 abs=1e-7)
    # Mixed: a token holding a CJK letter is split into characters, the rest stays whole.
    assert mixed_tokens("用Python画图", "line") == ["用", "P", "y", "t", "h", "o", "n", "画", "图"]
    assert similarity("a b c d", "a b c d") == pytest.approx(1.0, abs=1e-7)


def test_empty_and_non_string_values() -> None:
    assert similarity("", "anything") == 0.0
    assert similarity("anything", "") == 0.0
    # Whitespace only: no token at all (the official script raises here); 0.
    assert similarity("golden", "  \n ") == 0.0
    # Values go through str() first, as argument values do in the official script.
    assert similarity(5, "5") == pytest.approx(1.0, abs=1e-7)
    assert similarity(["a", "b"], "['a', 'b']") == pytest.approx(1.0, abs=1e-7)
    assert similarity("None", None) == pytest.approx(1.0, abs=1e-7)


def test_chinese_sentence_punctuation_splits_inside_a_token() -> None:
    # rouge-chinese cuts sentences after 。！？ even inside what nltk kept as one token.
    assert rouge_words("ab。cd", "line") == ("ab。", "cd")


def test_line_mode_keeps_a_sentence_final_period_on_its_word() -> None:
    assert mixed_tokens("Hello world. Bye.", "line") == ["Hello", "world.", "Bye", "."]
    if punkt_installed():
        assert mixed_tokens("Hello world. Bye.", "punkt") == ["Hello", "world", ".", "Bye", "."]
        assert resolve_tokenizer("auto") == "punkt"
    else:
        assert resolve_tokenizer("auto") == "line"
        with pytest.raises(LookupError, match="punkt"):
            resolve_tokenizer("punkt")
