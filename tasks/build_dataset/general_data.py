"""General SFT data, mixed into the agent data against catastrophic forgetting (MAT: Agent 5 :
general 1), read from JSONL, JSON, Parquet or a Hugging Face ``datasets`` folder and normalised
into OpenAI ``messages``.

Row formats, recognised per row by their fields:

- messages: ``{"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}``
- ShareGPT: ``{"conversations": [{"from": "system"|"human"|"user"|"gpt"|"assistant",
  "value": str}, ...], "system": str?}``
- alpaca: ``{"instruction": str, "input": str?, "output": str, "system": str?,
  "history": [[user, assistant], ...]?}``

A row that cannot be read (unknown format, wrong types, an unknown role) raises
:class:`InputError` naming the file, the row and the field. A readable row that cannot train
anything (no user turn, no final answer) becomes a reject, like a repeated row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentune.tasks.common.input_files import InputError, read_rows
from agentune.tasks.common.rejects import Reject
from agentune.tasks.common.text_cleaning import detect_language

_SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                   "assistant": "assistant"}
_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class GeneralSample:
    """One general conversation: system?, then user/assistant turns ending with the answer."""

    id: str
    messages: list[dict[str, str]]
    lang: str
    origin: str
    """The file (or folder) name it came from."""
    row: str
    """Where in that file, e.g. ``line 3`` or ``row 2``."""

    @property
    def query(self) -> str:
        """The first user turn: what decontamination compares with evaluation queries."""
        return next(m["content"] for m in self.messages if m["role"] == "user")

    def prompt_completion(self) -> dict[str, Any]:
        """The sample as one prompt/completion step (the ``steps`` form of the SFT table): the
        conversation before the final answer, and the answer."""
        *context, answer = self.messages
        if [m["role"] for m in context] in (["user"], ["system", "user"]):
            prompt = "\n\n".join(m["content"] for m in context)
        else:
            prompt = "\n\n".join(f"{m['role']}: {m['content']}" for m in context)
        return {"step": 0, "kind": "conclude", "prompt": prompt, "completion": answer["content"]}


# --------------------------------------------------------------------------- one row


def _text(record: Mapping[str, Any], name: str, file: Path, row: str) -> str:
    value = record.get(name)
    if not isinstance(value, str):
        problem = "missing" if value is None else f"must be a string, got {type(value).__name__}"
        raise InputError(file, row, name, problem)
    return value


def _optional_text(record: Mapping[str, Any], name: str, file: Path, row: str) -> str | None:
    return None if record.get(name) is None else _text(record, name, file, row)


def _turns(items: Any, file: Path, row: str, field: str, role_key: str, text_key: str,
           roles: Mapping[str, str]) -> list[dict[str, str]]:
    if not isinstance(items, list):
        raise InputError(file, row, field, f"must be a list of turns, got {type(items).__name__}")
    turns = []
    for i, turn in enumerate(items):
        where = f"{field}[{i}]"
        if not isinstance(turn, Mapping):
            raise InputError(file, row, where, f"must be an object, got {type(turn).__name__}")
        role = turn.get(role_key)
        if not isinstance(role, str) or role not in roles:
            raise InputError(file, row, f"{where}.{role_key}",
                             f"unknown role {role!r}; expected one of {sorted(roles)}")
        content = turn.get(text_key)
        if not isinstance(content, str):
            raise InputError(file, row, f"{where}.{text_key}",
                             f"must be a string, got {type(content).__name__}")
        turns.append({"role": roles[role], "content": content})
    return turns


def to_messages(record: Any, file: str | Path, row: str) -> list[dict[str, str]]:
    """One raw row in any supported format as messages (system?, user, assistant, ...)."""
    file = Path(file)
    if not isinstance(record, Mapping):
        raise InputError(file, row, None, f"a row must be an object, got {type(record).__name__}")
    if "messages" in record and record["messages"] is not None:
        return _turns(record["messages"], file, row, "messages", "role", "content",
                      {r: r for r in _ROLES})
    if "conversations" in record and record["conversations"] is not None:
        turns = _turns(record["conversations"], file, row, "conversations", "from", "value",
                       _SHAREGPT_ROLES)
        system = _optional_text(record, "system", file, row)
        head: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        return head + turns
    if "instruction" in record:
        instruction = _text(record, "instruction", file, row)
        extra = _optional_text(record, "input", file, row)
        output = _text(record, "output", file, row)
        system = _optional_text(record, "system", file, row)
        messages: list[dict[str, str]] = (
            [{"role": "system", "content": system}] if system else [])
        history = record.get("history") or []
        if not isinstance(history, list):
            raise InputError(file, row, "history", "must be a list of [user, assistant] pairs")
        for i, pair in enumerate(history):
            if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                    or not all(isinstance(p, str) for p in pair)):
                raise InputError(file, row, f"history[{i}]", "must be a [user, assistant] pair "
                                 "of strings")
            messages += [{"role": "user", "content": pair[0]},
                         {"role": "assistant", "content": pair[1]}]
        user = instruction if not extra else f"{instruction}\n\n{extra}"
        return messages + [{"role": "user", "content": user},
                           {"role": "assistant", "content": output}]
    raise InputError(file, row, None, "unknown row format: expected `messages`, `conversations` "
                     f"(ShareGPT) or `instruction`/`output` (alpaca); the fields are "
                     f"{sorted(record)}")


def unusable_reason(messages: Sequence[Mapping[str, str]]) -> tuple[str, str] | None:
    """Why a conversation cannot be a training sample, as (reason, detail), or None."""
    if not any(m["role"] == "user" and m["content"].strip() for m in messages):
        return "no_user_turn", "no non-empty user turn"
    if not messages or messages[-1]["role"] != "assistant":
        return "no_final_answer", "the conversation does not end with an assistant turn"
    if not messages[-1]["content"].strip():
        return "empty_answer", "the final assistant turn is empty"
    return None


def general_sample_id(messages: Sequence[Mapping[str, str]]) -> str:
    """A content id: the same conversation gets the same id whichever file or line holds it, so
    editing a file does not move other rows to another split."""
    blob = json.dumps(list(messages), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return "gen-" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def load_general_data(
    paths: Sequence[str | Path], *, split: str | None = None, stage: str = "build_dataset"
) -> tuple[list[GeneralSample], list[Reject]]:
    """Every usable row of every file, in file order; unusable and repeated rows as rejects."""
    samples: list[GeneralSample] = []
    rejects: list[Reject] = []
    seen: dict[str, str] = {}
    for path in paths:
        origin = Path(path).name
        for row, record in read_rows(path, text_column=None, split=split,
                                     split_setting="general_split", csv_allowed=False):
            messages = to_messages(record, path, row)
            sample_id = general_sample_id(messages)
            problem = unusable_reason(messages)
            if problem is not None:
                rejects.append(Reject(stage, problem[0], sample_id,
                                      f"{origin} {row}: {problem[1]}"))
                continue
            if sample_id in seen:
                rejects.append(Reject(stage, "exact_duplicate", sample_id,
                                      f"{origin} {row} repeats {seen[sample_id]}"))
                continue
            seen[sample_id] = f"{origin} {row}"
            user = next(m["content"] for m in messages if m["role"] == "user")
            samples.append(GeneralSample(sample_id, messages, detect_language(user), origin, row))
    return samples, rejects
