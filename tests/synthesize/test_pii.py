"""Personal data in accepted trajectories: scrubbed to placeholders everywhere, or rejected."""

from __future__ import annotations

from agentune.tasks.synthesize.pii import scrub_row
from agentune.tasks.synthesize.stage import _without_pii


def row(row_id: str, email: str) -> dict:
    return {"id": row_id, "query": f"Mail {email} the report", "final_answer": "Sent.",
            "messages": [{"role": "user", "content": f"Mail {email} the report"},
                         {"role": "assistant", "content": "", "tool_calls": [{"function": {
                             "name": "send_email", "arguments": {"to": [email]}}}]},
                         {"role": "tool", "content": '{"phone": "13800138000"}'}],
            "steps": [{"prompt": f"goal: mail {email}", "completion": "ok"}], "reward": 1.0}


def test_every_text_of_a_row_is_scrubbed() -> None:
    scrubbed, found = scrub_row(row("r1", "li.wei@example.com"))
    assert found == {"EMAIL": 4, "PHONE": 1}
    text = str(scrubbed)
    assert "example.com" not in text and "13800138000" not in text
    assert scrubbed["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"to": ["[EMAIL]"]}
    assert scrubbed["reward"] == 1.0


def test_texts_scrubbed_once_for_a_batch_scrub_alike() -> None:
    seen: dict = {}
    rows = [row("r1", "li.wei@example.com"), row("r2", "li.wei@example.com")]
    assert [scrub_row(r, seen) for r in rows] == [scrub_row(r) for r in rows]
    assert "Mail li.wei@example.com the report" in seen


def test_drop_rejects_the_rows_with_personal_data() -> None:
    clean = dict(row("r2", "nobody"), messages=[{"role": "user", "content": "hi"}],
                 query="hi", steps=[])
    rejects: list[dict[str, str]] = []
    kept, stats = _without_pii([row("r1", "a.b@example.com"), clean], "drop", rejects)
    assert [r["id"] for r in kept] == ["r2"] and stats["rows_with_pii"] == 1
    assert rejects[0]["reason"] == "pii" and rejects[0]["item_id"] == "r1"
    kept, stats = _without_pii([row("r1", "a.b@example.com")], "off", [])
    assert "a.b@example.com" in kept[0]["query"] and stats == {"action": "off"}
