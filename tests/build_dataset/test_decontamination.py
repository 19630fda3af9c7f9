"""Decontamination against the test split and a KAgentBench-style benchmark file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentune.tasks.build_dataset.decontamination import EvalQuery, benchmark_queries, decontaminate
from agentune.tasks.build_dataset.samples import Sample
from agentune.tasks.common.input_files import InputError

from support.trajectories import make_trajectories, samples_of

# Benchmark queries, and training queries that paraphrase them (they must go).
PARAPHRASES = [
    ("帮我查一下明天上海到北京的高铁票还有没有", "帮我查下明天上海到北京的高铁票还有没有？"),
    ("刘德华的老婆是谁？她是做什么的？", "刘德华的老婆是谁，她是做什么的"),
    ("What is the population of Tokyo in 2024?", "what is the population of tokyo in 2024"),
    ("Recommend three sci-fi novels similar to The Three-Body Problem.",
     "Recommend 3 sci-fi novels similar to The Three-Body Problem"),
]
UNRELATED = ["北京今天的空气质量怎么样？", "Convert 100 US dollars to euros.",
             "帮我写一首关于秋天的诗", "How tall is Mount Kilimanjaro?"]


def kagentbench_file(path: Path, queries: list[str]) -> Path:
    """Rows shaped like KAgentBench's benchmark_eval.jsonl (only `query` is read)."""
    with path.open("w", encoding="utf-8") as fh:
        for i, query in enumerate(queries):
            fh.write(json.dumps({
                "id": f"bench-{i}", "query": query, "type": "plantooluse",
                "golden_result_list": [{"thought": "t", "tool_name": "web_search",
                                        "tool_args": {"query": query}}],
                "funcs": [], "prompt_input": {"ReACT": f"...{query}..."}, "memory": "",
            }, ensure_ascii=False) + "\n")
    return path


def _with_queries(queries: list[str]) -> list[Sample]:
    samples = samples_of(make_trajectories(len(queries), seed=21).rows)
    for sample, query in zip(samples, queries, strict=True):
        sample.query = query
    return samples


def test_paraphrases_of_benchmark_queries_are_dropped_others_kept(tmp_path: Path) -> None:
    bench = benchmark_queries(kagentbench_file(tmp_path / "benchmark_eval.jsonl",
                                               [b for b, _ in PARAPHRASES]))
    assert [q.key for q in bench][:2] == ["benchmark_eval.jsonl:line 1",
                                          "benchmark_eval.jsonl:line 2"]
    samples = _with_queries([t for _, t in PARAPHRASES] + UNRELATED)
    outcome = decontaminate(samples, bench, threshold=0.6, ngram=2, stage="test")
    dropped = {r.item_id: r for r in outcome.rejects}
    assert {s.query for s in samples if s.id in dropped} == {t for _, t in PARAPHRASES}
    assert [s.query for s in outcome.kept] == UNRELATED
    reject = next(iter(dropped.values()))
    assert reject.reason == "contaminated" and "benchmark_eval.jsonl:line" in reject.detail
    assert outcome.stats["eval_queries"] == 4 and outcome.stats["contaminated"] == 4


def test_test_split_queries_decontaminate_train_rows() -> None:
    test_rows = _with_queries(["明天深圳会下雨吗？需要带伞吗？"])
    train_rows = _with_queries(["明天深圳会不会下雨，需要带伞吗", "后天杭州的天气怎么样"])
    eval_queries = [EvalQuery(f"test:{s.id}", s.query) for s in test_rows]
    outcome = decontaminate(train_rows, eval_queries, threshold=0.6, ngram=2, stage="test")
    assert [s.query for s in outcome.kept] == ["后天杭州的天气怎么样"]
    assert f"test:{test_rows[0].id}" in outcome.rejects[0].detail


def test_benchmark_file_errors_name_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bench.jsonl"
    bad.write_text('{"query": "ok"}\n{"id": 2}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"bench.jsonl: line 2: field 'query': missing"):
        benchmark_queries(bad)
    bad.write_text('{"query": 3}\n', encoding="utf-8")
    with pytest.raises(InputError, match="line 1: field 'query': must be a string"):
        benchmark_queries(bad)
    bad.write_text('{"query": "x"\n', encoding="utf-8")
    with pytest.raises(InputError, match="line 1: not valid JSON"):
        benchmark_queries(bad)
    with pytest.raises(InputError, match="not found"):
        benchmark_queries(tmp_path / "missing.jsonl")
    other = tmp_path / "other.jsonl"
    other.write_text('{"question": "a"}\n{"question": ""}\n', encoding="utf-8")
    assert [q.text for q in benchmark_queries(other, "question")] == ["a"]
