"""General SFT data: alpaca, ShareGPT and messages rows from JSONL, JSON, Parquet and a datasets
folder, normalised to messages; the bundled demo set; errors naming file, row and field."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from agentune.paths import PROJECT_ROOT
from agentune.tasks.build_dataset.general_data import (
    general_sample_id,
    load_general_data,
    to_messages,
)
from agentune.tasks.build_dataset.samples import sample_from_general
from agentune.tasks.common.input_files import InputError

ALPACA = {"instruction": "Translate into French.", "input": "Good morning", "output": "Bonjour",
          "system": "You translate."}
SHAREGPT = {"conversations": [{"from": "human", "value": "你好"},
                              {"from": "gpt", "value": "你好！"},
                              {"from": "human", "value": "1+1=?"}, {"from": "gpt", "value": "2"}]}
MESSAGES = {"messages": [{"role": "user", "content": "Name a prime."},
                         {"role": "assistant", "content": "7"}]}


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def test_formats_normalise_to_messages() -> None:
    assert to_messages(ALPACA, "f", "line 1") == [
        {"role": "system", "content": "You translate."},
        {"role": "user", "content": "Translate into French.\n\nGood morning"},
        {"role": "assistant", "content": "Bonjour"}]
    assert [m["role"] for m in to_messages(SHAREGPT, "f", "line 2")] == [
        "user", "assistant", "user", "assistant"]
    assert to_messages(MESSAGES, "f", "line 3") == MESSAGES["messages"]
    history = {"instruction": "And 3+3?", "output": "6", "history": [["2+2?", "4"]]}
    assert [m["content"] for m in to_messages(history, "f", "line 4")] == [
        "2+2?", "4", "And 3+3?", "6"]


def test_files_of_every_kind_load_alike(tmp_path: Path) -> None:
    rows = [ALPACA, SHAREGPT, MESSAGES]
    jsonl = _jsonl(tmp_path / "g.jsonl", rows)
    as_json = tmp_path / "g.json"
    as_json.write_text(json.dumps(rows, ensure_ascii=False), "utf-8")
    parquet = tmp_path / "g.parquet"
    datasets.Dataset.from_list([{"messages": to_messages(r, "f", "x")} for r in rows]).to_parquet(
        str(parquet))
    folder = tmp_path / "hf"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(
        [{"conversations": SHAREGPT["conversations"]}])}).save_to_disk(str(folder))
    loaded = {p.name: load_general_data([p])[0] for p in (jsonl, as_json, parquet)}
    expected = [to_messages(r, "f", "x") for r in rows]
    for name, samples in loaded.items():
        assert [s.messages for s in samples] == expected, name
    assert [s.lang for s in loaded["g.jsonl"]] == ["en", "zh", "en"]
    assert loaded["g.jsonl"][1].row == "line 2" and loaded["g.parquet"][1].row == "row 1"
    [hf] = load_general_data([folder])[0]
    assert hf.messages == expected[1] and hf.origin == "hf"
    with pytest.raises(InputError, match="split 'test' not found"):
        load_general_data([folder], split="test")


def test_unusable_and_repeated_rows_become_rejects(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "g.jsonl", [
        ALPACA,
        {"instruction": "Say nothing.", "output": "  "},
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]},
        ALPACA,
    ])
    samples, rejects = load_general_data([path])
    assert len(samples) == 1
    assert [(r.reason, r.detail.split(":")[0]) for r in rejects] == [
        ("empty_answer", "g.jsonl line 2"), ("no_final_answer", "g.jsonl line 3"),
        ("no_user_turn", "g.jsonl line 4"),
        ("exact_duplicate", "g.jsonl line 5 repeats g.jsonl line 1")]


@pytest.mark.parametrize(("row", "message"), [
    ({"text": "hi"}, r"line 1: unknown row format"),
    ({"instruction": "x"}, r"line 1: field 'output': missing"),
    ({"instruction": "x", "output": 3}, r"line 1: field 'output': must be a string, got int"),
    ({"conversations": [{"from": "bot", "value": "x"}]},
     r"line 1: field 'conversations\[0\].from': unknown role 'bot'"),
    ({"messages": [{"role": "user", "content": None}]},
     r"line 1: field 'messages\[0\].content': must be a string"),
    ({"messages": "hi"}, r"line 1: field 'messages': must be a list"),
    ({"instruction": "x", "output": "y", "history": [["a"]]}, r"line 1: field 'history\[0\]'"),
    ([1, 2], r"line 1: a row must be an object"),
])
def test_bad_rows_raise_naming_file_row_and_field(tmp_path: Path, row: object,
                                                  message: str) -> None:
    path = _jsonl(tmp_path / "bad.jsonl", [row])
    with pytest.raises(InputError, match=rf"bad.jsonl: {message}"):
        load_general_data([path])


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        load_general_data([tmp_path / "missing.jsonl"])
    odd = tmp_path / "g.csv"
    odd.write_text("a,b\n", "utf-8")
    with pytest.raises(InputError, match=r"unsupported format '\.csv'"):
        load_general_data([odd])
    broken = tmp_path / "g.jsonl"
    broken.write_text('{"instruction": \n', "utf-8")
    with pytest.raises(InputError, match=r"g\.jsonl: line 1: not valid JSON"):
        load_general_data([broken])


def test_bundled_demo_set_is_bilingual_and_clean() -> None:
    samples, rejects = load_general_data([PROJECT_ROOT / "data" / "demo" / "general.jsonl"])
    assert not rejects and 40 <= len(samples) <= 60
    langs = {s.lang for s in samples}
    assert langs == {"en", "zh"}
    assert min(sum(s.lang == lang for s in samples) for lang in langs) >= 20
    sample = sample_from_general(samples[0])
    assert sample.task_type == "general" and sample.tools == []
    [step] = sample.steps
    assert step["completion"] == samples[0].messages[-1]["content"]
    assert step["prompt"] == samples[0].messages[0]["content"]
    assert general_sample_id(samples[0].messages) == samples[0].id
