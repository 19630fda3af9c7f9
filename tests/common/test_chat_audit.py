"""The audit with the embedded student's tokenizer and the training chat template, on samples
whose token counts were checked by hand (token by token, listed in the comments)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentune.tasks.common.chat_audit import (
    ChatAuditor,
    RowAudit,
    audit_summary,
    length_histogram,
    training_chat_template,
)
from agentune.tasks.llm.embedded_model import resolve_model_path

GREETING = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
# <|im_start|> user \n Hi <|im_end|> \n <|im_start|> ass istant \n | Hello ! <|im_end|> | \n
# 14 tokens; trained: Hello, !, <|im_end|> (the generation block) = 3.

TOOL_CALL = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "calc", "arguments": {"x": "2+2"}}}]},
    {"role": "tool", "tool_call_id": "c", "content": "4"},
    {"role": "assistant", "content": "4"},
]
CALC = [{"type": "function", "function": {"name": "calc", "parameters": {}}}]
# Trained: the first assistant turn, 31 tokens:
#   < tool _ call > \n {" name ": _" calc ", _" arguments ": _{" x ": _" 2 + 2 " }} \n
#   </ tool _ call > <|im_end|>
# and the last one, 2 tokens: 4 <|im_end|>. The whole render (system block listing the tools,
# user, tool response in a user turn) is 200 tokens.


@pytest.fixture(scope="module")
def auditor() -> ChatAuditor:
    return ChatAuditor(resolve_model_path("embedded"), max_length=4096)


def test_the_embedded_student_audits_with_the_chatml_training_template(auditor) -> None:
    assert auditor.template_origin == "templates/chatml_training.j2"
    assert "{%- generation %}" in auditor.template


def test_hand_checked_greeting(auditor) -> None:
    ids, mask = auditor.encode(GREETING, [])
    tokens = [auditor.tokenizer.decode([i]) for i in ids]
    assert tokens[10:13] == ["Hello", "!", "<|im_end|>"]
    assert mask == [0] * 10 + [1, 1, 1] + [0]
    assert auditor.audit(GREETING, []) == RowAudit(n_tokens=14, n_trained=3, max_length=4096)


def test_hand_checked_tool_call_sample_and_truncation(auditor) -> None:
    full = auditor.audit(TOOL_CALL, CALC)
    assert (full.n_tokens, full.n_trained) == (196, 33)  # the tool listed as compact JSON
    ids, mask = auditor.encode(TOOL_CALL, CALC)
    first_trained = mask.index(1)
    assert auditor.tokenizer.decode(ids[first_trained : first_trained + 31]).startswith(
        '<tool_call>\n{"name": "calc", "arguments": {"x": "2+2"}}')
    # Truncation: only assistant tokens within max_length count.
    short = ChatAuditor(resolve_model_path("embedded"), max_length=12)
    cut = short.audit(GREETING, [])
    assert (cut.n_trained, cut.over_max_length, cut.tokens_seen) == (2, True, 12)
    assert short.audit(TOOL_CALL, CALC).n_trained == 0  # the system block alone is longer


def test_audit_summary_numbers() -> None:
    audits = [RowAudit(14, 3, 12), RowAudit(200, 5, 12), RowAudit(10, 0, 12), RowAudit(12, 4, 12)]
    summary = audit_summary(audits, 12)
    # tokens seen: 12 + 12 + 10 + 12 = 46; trained within max_length: 3 + 5 + 0 + 4 = 12
    assert summary["tokens"] == 236 and summary["tokens_seen"] == 46
    assert summary["tokens_trained"] == 12 and summary["trained_fraction"] == round(12 / 46, 4)
    # Percentiles by nearest rank: the smallest length with at least p% of rows at or below it.
    assert (summary["length_min"], summary["length_p50"], summary["length_max"]) == (10, 12, 200)
    assert summary["over_max_length"] == 2 and summary["no_trainable_token"] == 1
    assert summary["histogram"] == {"1-12": 2, ">12": 2}
    assert length_histogram([1, 64, 65, 300, 5000], 4096) == {
        "1-64": 2, "65-128": 1, "129-256": 0, "257-512": 1, "513-1024": 0, "1025-2048": 0,
        "2049-4096": 0, ">4096": 1}
    assert audit_summary([], 12) == {"rows": 0}


def test_template_choice(auditor, tmp_path: Path) -> None:
    tokenizer = auditor.tokenizer
    own = tokenizer.chat_template
    custom = tmp_path / "t.j2"
    custom.write_text("{% for m in messages %}{% generation %}{{ m.content }}"
                      "{% endgeneration %}{% endfor %}", encoding="utf-8")
    assert training_chat_template(tokenizer, custom)[1] == str(custom)
    with pytest.raises(FileNotFoundError):
        training_chat_template(tokenizer, tmp_path / "missing.j2")
    try:
        tokenizer.chat_template = custom.read_text(encoding="utf-8")
        assert training_chat_template(tokenizer)[1] == "the student's own template"
        tokenizer.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
        with pytest.raises(ValueError, match="generation"):
            training_chat_template(tokenizer)
    finally:
        tokenizer.chat_template = own
