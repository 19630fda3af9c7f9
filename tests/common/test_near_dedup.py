"""Near-duplicate detection: MinHash LSH tuned for recall, verified by Jaccard, generic API."""

from __future__ import annotations

import itertools
import json
import random
import re
import unicodedata

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH

from agentune.paths import PROJECT_ROOT
from agentune.tasks.common.near_dedup import (
    MinHasher,
    NearDupIndex,
    candidate_probability,
    canonical_text,
    choose_lsh_params,
    jaccard,
    mixed_ngram_hash_sets,
    mixed_ngram_hashes,
    shingles,
)
from agentune.tasks.common.rejects import KEEP
from agentune.tasks.common.text_cleaning import dedup_key, normalize_text

from support.near_dup import near_dup_clusters

# Paraphrases planted in the demo seed file: (kept first, near duplicate after it).
PLANTED = [
    ("最近有哪些关于固态电池量产的新闻？", "最近有哪些关于固态电池量产的最新新闻？"),
    ("珠穆朗玛峰的海拔是多少米？", "珠穆朗玛峰的海拔高度是多少米？"),
    (
        "How many bones are there in the adult human body?",
        "How many bones are in the adult human body?",
    ),
    ("明天北京会下雨吗？需要带伞吗？", "明天北京会不会下雨？需要带伞吗？"),
    ("Calculate the square root of 98,596.", "Calculate the square root of 98596, please."),
    ("What date is 90 days after January 15, 2026?", "What date is 90 days after 15 January 2026?"),
    ("1000 美元现在能换多少人民币？", "1000 美元现在可以换多少人民币？"),
]

# Paraphrases written for this test only, none in the demo file.
EXTRA_PLANTED = [
    ("帮我查一下下周三上海飞北京的航班", "帮我查下下周三上海飞北京的航班吧"),
    ("今天深圳的空气质量怎么样？", "今天深圳空气质量怎么样啊？"),
    (
        "Translate 'good morning' into French, please.",
        "Please translate 'good morning' into French.",
    ),
    (
        "Schedule a call with the design team on Friday at 10am.",
        "Schedule a call with the design team Friday at 10 am.",
    ),
]


def _demo_texts() -> list[str]:
    """Demo queries, normalised, without exact duplicates (those are exact dedup's job)."""
    path = PROJECT_ROOT / "data" / "demo" / "queries.jsonl"
    seen, texts = set(), []
    for line in path.read_text("utf-8").splitlines():
        text = normalize_text(json.loads(line)["text"])
        if dedup_key(text) not in seen:
            seen.add(dedup_key(text))
            texts.append(text)
    return texts


def test_shingles_and_jaccard() -> None:
    assert shingles("abcd", 2) == {"ab", "bc", "cd"}
    assert shingles("ab", 3) == {"ab"}
    assert canonical_text("Hello,  World!") == "helloworld"
    assert canonical_text("你好，世界！") == "你好世界"
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert jaccard(set(), set()) == 1.0


@pytest.mark.parametrize("threshold", [0.5, 0.6, 0.7, 0.8, 0.9])
def test_lsh_params_are_tuned_for_recall(threshold: float) -> None:
    bands, rows = choose_lsh_params(threshold, 128, min_recall=0.99)
    assert bands * rows <= 128
    assert candidate_probability(threshold, bands, rows) >= 0.99
    # datasketch's own choice is far less likely to find a pair at the threshold.
    default = MinHashLSH(threshold=threshold, num_perm=128)
    assert candidate_probability(threshold, default.b, default.r) < 0.9


def test_planted_paraphrases_in_demo_data_precision_and_recall() -> None:
    texts = _demo_texts()
    items = [(f"t{i}", t) for i, t in enumerate(texts)]
    clusters = near_dup_clusters(items, threshold=0.6, ngram=2)
    by_key = dict(items)
    found = {(by_key[rep], by_key[m]) for rep, members in clusters.items() for m in members
             if m != rep}
    expected = set(PLANTED)
    recall = len(found & expected) / len(expected)
    precision = len(found & expected) / len(found)
    assert (precision, recall) == (1.0, 1.0), (found - expected, expected - found)


def test_extra_planted_paraphrases_among_demo_queries() -> None:
    texts = _demo_texts() + [a for a, _ in EXTRA_PLANTED] + [b for _, b in EXTRA_PLANTED]
    index = NearDupIndex(0.6, ngram=2)
    dropped = {}
    for i, text in enumerate(texts):
        verdict, match = index.check(f"t{i}", text)
        if verdict is not KEEP:
            assert verdict == (False, "near_duplicate") and match is not None
            dropped[text] = texts[int(match.key[1:])]
    planted = dict((b, a) for a, b in PLANTED + EXTRA_PLANTED)
    assert dropped == planted


def test_lsh_finds_every_pair_that_brute_force_finds() -> None:
    """Synthetic corpus with many near pairs: LSH + verification equals the exact answer."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(400)]
    base = [" ".join(rng.choice(words) for _ in range(14)) for _ in range(150)]
    variants = []
    for text in base[:100]:
        tokens = text.split()
        tokens[rng.randrange(len(tokens))] = rng.choice(words)  # one word changed
        variants.append(" ".join(tokens))
    texts = base + variants
    threshold, ngram = 0.7, 3
    sets = [shingles(canonical_text(t), ngram) for t in texts]
    truth = {
        (i, j)
        for i, j in itertools.combinations(range(len(texts)), 2)
        if jaccard(sets[i], sets[j]) >= threshold
    }
    assert len(truth) >= 50
    index = NearDupIndex(threshold, ngram=ngram, min_recall=0.995)
    for i, t in enumerate(texts):
        index.add(str(i), t)
    found = {
        tuple(sorted((i, int(m.key))))
        for i, t in enumerate(texts)
        for m in index.query(t)
        if int(m.key) != i
    }
    assert found == truth  # precision 1 by verification, recall 1 here by tuning


def test_clusters_have_first_seen_representative_and_similarities() -> None:
    items = [
        ("a", "明天北京会下雨吗？需要带伞吗？"),
        ("b", "What is the capital of Australia?"),
        ("c", "明天北京会下雨吗，需要带伞吗"),
        ("d", "what is the capital of australia"),
        ("e", "Translate hello into Korean."),
    ]
    clusters = near_dup_clusters(items, threshold=0.8, ngram=3)
    assert {rep: list(members) for rep, members in clusters.items()} == {
        "a": ["a", "c"],
        "b": ["b", "d"],
        "e": ["e"],
    }
    assert clusters["a"] == {"a": 1.0, "c": 1.0}
    # Estimated Jaccard (for long texts) gives the same clusters here.
    estimated = near_dup_clusters(items, threshold=0.8, ngram=3, verify="estimate")
    assert {r: list(m) for r, m in estimated.items()} == {r: list(m) for r, m in clusters.items()}


def test_index_api() -> None:
    index = NearDupIndex(0.5, ngram=2)
    index.add("x", "the quick brown fox jumps")
    assert "x" in index and len(index) == 1
    with pytest.raises(KeyError):
        index.add("x", "anything")
    [match] = index.query("the quick brown fox jumped")
    assert match.key == "x" and 0.5 <= match.similarity < 1
    assert index.query("completely different words here") == []
    assert index.add_if_new("y", "the quick brown fox jumps!") is not None
    assert "y" not in index
    assert index.add_if_new("z", "lorem ipsum dolor sit amet") is None
    assert "z" in index
    with pytest.raises(ValueError):
        NearDupIndex(0)


def test_signatures_are_stable_across_instances() -> None:
    a = MinHasher(num_perm=64, ngram=3, seed=3)
    b = MinHasher(num_perm=64, ngram=3, seed=3)
    texts = ["一段中文文本", "an english text"]
    for x, y in zip(a.signatures(texts), b.signatures(texts), strict=True):
        assert (x.hashvalues == y.hashvalues).all()
    s1, s2 = a.signatures(["abcdefghij", "abcdefghik"])
    assert 0.5 < s1.jaccard(s2) < 1


def test_batch_signatures_equal_datasketch_minhash() -> None:
    """The vectorised signatures are datasketch's affine32 MinHash of the shingle hashes, bit
    for bit (so a Redis index built by datasketch stays usable), empty sets included."""
    rng = np.random.default_rng(5)
    hasher = MinHasher(num_perm=128, seed=1)
    sets = [np.unique(rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32))
            for n in [0, 1, 2, 5, 3000, 17, 0, 900, 1, 64]]
    matrix = hasher.signature_matrix(sets)
    for hashes, values in zip(sets, matrix, strict=True):
        reference = MinHash(num_perm=128, seed=1, hashfunc=int)
        reference.update_batch(hashes.tolist())
        assert np.array_equal(values, reference.hashvalues)


_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002ffff"
_TOKEN = re.compile(f"([{_CJK}])|([^\\W_{_CJK}]+)")


def test_vectorised_tokens_match_the_regex_tokeniser() -> None:
    """Mixed shingling finds words and CJK characters with a class table; its unigrams equal
    those of the regex tokeniser it replaced (``\\w`` minus ``_`` for words, CJK ranges one
    character each) on text mixing scripts, digits, marks, astral characters and punctuation."""
    rng = random.Random(3)
    pool = list("abcXYZ019_-., \n\t'\"") + ["é", "ß", "İ", "ﬁ", "Ω", "中", "文", "あ", "한",
                                           "\u0301", "\u00a0", "\u3000", "１", "\U00020001",
                                           "\U0001d400", "\U0001f600", "٣", "ж"]
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 40))) for _ in range(400)]
    texts += ["", "   ", "___", "a_b ab", "中文 mixed Text 123 ｆｕｌｌ"]
    batch = mixed_ngram_hash_sets(texts, 1, 1)
    for text, hashes in zip(texts, batch, strict=True):
        assert np.array_equal(hashes, mixed_ngram_hashes(text, 1, 1))
        tokens = _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())
        expected = set()
        for cjk, word in tokens:
            expected |= set(mixed_ngram_hashes(cjk or word, 1, 1).tolist())
        assert set(hashes.tolist()) == expected, text
    # Batches give each text what it gets alone, also for texts shorter than n.
    for text, hashes in zip(texts, mixed_ngram_hash_sets(texts, 5, 3), strict=True):
        assert np.array_equal(hashes, mixed_ngram_hashes(text, 5, 3))
