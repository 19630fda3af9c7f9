"""KAgentBench's text similarity: ROUGE-L F over a mixed English/Chinese tokenisation.

What the official evaluator computes for ``similarity(label, prediction)``:

1. Both are turned into strings with ``str()`` (an argument value of ``5`` becomes ``"5"``, a list
   its Python repr); an empty string on either side scores 0.
2. Each is tokenised with ``nltk.word_tokenize``; every token holding a letter of Unicode
   category ``Lo`` (CJK ideographs, kana ...) is split into single characters; tokens are joined
   by spaces.
3. ``rouge-chinese``'s ``Rouge().get_scores(prediction, label)[0]["rouge-l"]["f"]``: the text is cut
   into sentences at Chinese sentence punctuation (which can split a token such as ``"a。b"``),
   whitespace is normalised, and ROUGE-L is the longest common subsequence (LCS) of the two word
   sequences: ``p = lcs / len(prediction)``, ``r = lcs / len(label)``,
   ``f = 2 * (p * r) / (p + r + 1e-8)``.

Steps 1-2 and the sentence cut use nltk and rouge-chinese themselves; only the LCS is our own, a
bit-parallel algorithm (Allison & Dix 1986; Crochemore et al. 2001) that processes one prediction
word per step with Python's arbitrary-size integers as bit vectors. LCS length is unique, so the
result is the same number rouge-chinese's O(n*m) dictionary table gives, in a fraction of the time
(``tests/evaluate/benchmarks/kagentbench/test_rouge.py`` checks equality on random zh/en pairs).

``nltk.word_tokenize`` splits sentences first with NLTK's punkt data, which cannot be downloaded
on machines without internet. With ``tokenizer="auto"`` punkt is used when it is installed and
otherwise each text is tokenised as one line (``preserve_line=True``); the two differ only where an
English text holds several sentences: a sentence-final period inside the text stays attached to
its word (``"world."`` instead of ``"world"``, ``"."``).

Where the official script raises (a non-empty text with no token, e.g. only whitespace:
rouge-chinese's "Hypothesis is empty"), the similarity here is 0.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import Any, Literal

import nltk
from rouge_chinese import Rouge

TokenizerMode = Literal["auto", "punkt", "line"]

_ROUGE = Rouge()
# Reused tokenisations: golden answers are compared with every template's prediction, and
# predictions of one model repeat across goldens.
_CACHE_SIZE = 1 << 16


@lru_cache(maxsize=1)
def punkt_installed() -> bool:
    """Whether nltk can split sentences here (its punkt data is installed)."""
    try:
        nltk.word_tokenize("One. Two.")
    except LookupError:
        return False
    return True


def resolve_tokenizer(mode: TokenizerMode) -> Literal["punkt", "line"]:
    """``auto`` -> ``punkt`` when installed, else ``line``; ``punkt`` fails clearly without it."""
    if mode == "line":
        return "line"
    if punkt_installed():
        return "punkt"
    if mode == "punkt":
        raise LookupError(
            "tokenizer 'punkt' asked for, but NLTK's punkt data is not installed: run "
            "`python -m nltk.downloader punkt_tab` (or use tokenizer 'auto'/'line')"
        )
    return "line"


def mixed_tokens(text: str, mode: Literal["punkt", "line"]) -> list[str]:
    """nltk word tokens, with every token holding a ``Lo`` letter split into characters."""
    tokens: list[str] = []
    for token in nltk.word_tokenize(text, preserve_line=mode == "line"):
        # ASCII holds no Lo letter: most English tokens skip the per-character lookup.
        if not token.isascii() and any(unicodedata.category(ch) == "Lo" for ch in token):
            tokens.extend(token)
        else:
            tokens.append(token)
    return tokens


@lru_cache(maxsize=_CACHE_SIZE)
def rouge_words(text: str, mode: Literal["punkt", "line"]) -> tuple[str, ...]:
    """The word sequence rouge-chinese compares for ``text``: tokens joined by spaces, cut into
    sentences by rouge-chinese, whitespace-normalised and split again."""
    joined = " ".join(mixed_tokens(text, mode))
    words: list[str] = []
    for sentence in _ROUGE.cut_sent(joined):
        if sentence:
            words.extend(" ".join(sentence.split()).split(" "))
    return tuple(words)


@lru_cache(maxsize=_CACHE_SIZE)
def _position_masks(words: tuple[str, ...]) -> dict[str, int]:
    """For each distinct word, the bit set of its positions in ``words``."""
    masks: dict[str, int] = {}
    for i, word in enumerate(words):
        masks[word] = masks.get(word, 0) | (1 << i)
    return masks


def lcs_length(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """Length of the longest common subsequence of two word sequences (bit-parallel).

    Bit ``i`` of ``v`` is 0 where the LCS of ``a[:i+1]`` and the words of ``b`` seen so far grew;
    after all of ``b`` the zero bits count the LCS. One addition and a few bitwise operations per
    word of ``b``, each over ``len(a)`` bits.
    """
    if len(a) < len(b):  # loop over the shorter sequence: the Python loop is the slow part
        a, b = b, a
    if not b:
        return 0
    masks = _position_masks(a)
    full = (1 << len(a)) - 1
    v = full
    for word in b:
        match = masks.get(word)
        if match:
            u = v & match
            v = ((v + u) | (v - u)) & full
    return len(a) - v.bit_count()


def similarity(label: Any, prediction: Any, mode: Literal["punkt", "line"] = "line") -> float:
    """KAgentBench's ROUGE-L F of ``prediction`` against ``label`` (see the module docstring)."""
    label, prediction = str(label), str(prediction)
    if label == "" or prediction == "":
        return 0.0
    ref = rouge_words(label, mode)
    hyp = rouge_words(prediction, mode)
    if not ref or not hyp:  # the official script raises here ("Hypothesis is empty.")
        return 0.0
    lcs = lcs_length(ref, hyp)
    # The same expression, in the same order, as rouge-chinese: identical floats.
    r_lcs = lcs / len(ref)
    p_lcs = lcs / len(hyp)
    return 2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8))
