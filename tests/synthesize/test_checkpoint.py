"""Checkpoint lines: written by pydantic-core, byte for byte what ``json.dumps`` wrote before (so a
checkpoint from an earlier version and one from this read the same), and read back whole."""

from __future__ import annotations

import json
import math

from agentune.tasks.synthesize.checkpoint import CheckpointRecord, SynthesisCheckpoint


def record(ident: str) -> CheckpointRecord:
    return CheckpointRecord(
        ident, True,
        {"messages": [{"role": "user", "content": "订一间 Shanghai 的酒店 \"quoted\"\n"}],
         "reward": 0.75, "judge_score": None, "tools": [{"parameters": {"n": {"minimum": 1}}}]},
        [{"stage": "synthesize", "reason": "step_invalid_args", "item_id": f"{ident}/step0",
          "detail": "x"}],
        {"components": {"answer": 1.0, "timing": math.nan}, "retried": ["invalid_args"],
         "guided": False, "calls": 2})


def test_a_line_is_what_json_dumps_wrote() -> None:
    r = record("traj-1.a0")
    old = json.dumps({"id": r.id, "accepted": r.accepted, "row": r.row, "rejects": r.rejects,
                      "stats": r.stats}, ensure_ascii=False, separators=(",", ":")) + "\n"
    assert r.to_line() == old.encode("utf-8")


def test_records_round_trip_through_the_file(tmp_path) -> None:
    checkpoint = SynthesisCheckpoint(tmp_path / "v")
    for ident in ("a", "b"):
        checkpoint.append(record(ident))
    loaded = checkpoint.load()
    assert list(loaded) == ["a", "b"]
    again = loaded["a"]
    assert (again.row, again.rejects) == (record("a").row, record("a").rejects)
    assert math.isnan(again.stats["components"]["timing"])
