"""``sft_dataset`` rows -> the examples TRL's SFTTrainer trains on, in one of two forms.

- ``messages``: one conversational example per row, ``{"messages", "tools"}`` (OpenAI roles,
  assistant ``tool_calls``, ``tool`` results, JSON-schema tools); trained with
  ``assistant_only_loss``, so only the assistant turns carry loss.
- ``steps``: one example per agent step, the step's prompt (in its template's own text format)
  as a user turn and its completion as the assistant turn; trained with
  ``completion_only_loss``. It is a conversation rather than raw text because the tuned model is
  queried through its chat template (the gateway sends chat messages), so training must see the
  same wrapping.

Columns are datasets ``Json()`` features so tool-call arguments with differing keys survive as
they are (FACTS: Arrow would merge them into one null-padded struct).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
from datasets import Dataset, Features, Json, List

from agentune.tasks.common.schemas import SPLITS

SampleForm = Literal["messages", "steps"]
ExampleForm = Literal["messages", "steps", "preferences"]
ROLES = ("system", "user", "assistant", "tool")
EXAMPLE_FEATURES: dict[str, Features] = {
    "messages": Features({"messages": List(Json()), "tools": List(Json())}),
    "steps": Features({"prompt": List(Json()), "completion": List(Json())}),
    "preferences": Features({"prompt": List(Json()), "chosen": List(Json()),
                             "rejected": List(Json()), "tools": List(Json())}),
}


class TrainingDataError(ValueError):
    """A row that cannot be trained on; the message names the source, row and field."""


def _as_list(value: Any) -> list[Any]:
    """Json list columns come back from pandas as lists or numpy object arrays; nulls as None."""
    if value is None:
        return []
    if isinstance(value, float) and pd.isna(value):
        return []
    return list(value)


def _message_examples(row_id: str, row: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    messages = _as_list(row.get("messages"))
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ROLES:
            raise TrainingDataError(
                f"{where}: row {row_id!r}: field 'messages'[{i}]: expected a message with a role "
                f"in {ROLES}, got {message!r:.200}"
            )
    if not any(m["role"] == "assistant" for m in messages):
        raise TrainingDataError(
            f"{where}: row {row_id!r}: field 'messages': no assistant message to train on"
        )
    tools = _as_list(row.get("tools"))
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise TrainingDataError(
                f"{where}: row {row_id!r}: field 'tools'[{i}]: expected a JSON-schema object, "
                f"got {tool!r:.200}"
            )
    return [{"messages": [dict(m) for m in messages], "tools": [dict(t) for t in tools]}]


def _step_examples(row_id: str, row: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    steps = _as_list(row.get("steps"))
    if not steps:
        raise TrainingDataError(f"{where}: row {row_id!r}: field 'steps': no step to train on")
    examples = []
    for i, step in enumerate(steps):
        prompt = step.get("prompt") if isinstance(step, Mapping) else None
        completion = step.get("completion") if isinstance(step, Mapping) else None
        if not isinstance(prompt, str) or not prompt or not isinstance(completion, str) or not completion:
            raise TrainingDataError(
                f"{where}: row {row_id!r}: field 'steps'[{i}]: expected non-empty string "
                f"'prompt' and 'completion', got {step!r:.200}"
            )
        examples.append({
            "prompt": [{"role": "user", "content": prompt}],
            "completion": [{"role": "assistant", "content": completion}],
        })
    return examples


def _preference_examples(row_id: str, row: Mapping[str, Any], where: str
                         ) -> list[dict[str, Any]]:
    prompt = _as_list(row.get("prompt"))
    if not prompt or not all(isinstance(m, Mapping) and m.get("role") in ROLES for m in prompt):
        raise TrainingDataError(f"{where}: row {row_id!r}: field 'prompt': expected a non-empty "
                                f"list of messages, got {prompt!r:.200}")
    sides = {}
    for side in ("chosen", "rejected"):
        value = _as_list(row.get(side))
        if len(value) != 1 or not isinstance(value[0], Mapping) or \
                value[0].get("role") != "assistant":
            raise TrainingDataError(f"{where}: row {row_id!r}: field {side!r}: expected one "
                                    f"assistant message, got {value!r:.200}")
        sides[side] = [dict(value[0])]
    tools = _as_list(row.get("tools"))
    return [{"prompt": [dict(m) for m in prompt], **sides, "tools": [dict(t) for t in tools]}]


CONVERTERS = {"messages": _message_examples, "steps": _step_examples,
              "preferences": _preference_examples}
NEEDED_COLUMN = {"messages": "messages", "steps": "steps", "preferences": "prompt"}


def row_examples(rows: Sequence[Mapping[str, Any]], *, form: ExampleForm,
                 where: str) -> list[dict[str, Any]]:
    """The examples of rows (every row, whatever its split)."""
    convert = CONVERTERS[form]
    return [ex for row in rows for ex in convert(str(row["id"]), row, where)]


def split_rows(frame: pd.DataFrame, *, split: str, form: ExampleForm,
               where: str) -> list[dict[str, Any]]:
    """The rows of one split, checked to have the columns ``form`` needs."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: expected one of {SPLITS}")
    missing = {"id", "split", NEEDED_COLUMN[form]} - set(frame.columns)
    if missing:
        raise TrainingDataError(f"{where}: missing column(s) {sorted(missing)}")
    out = []
    for row in frame.to_dict(orient="records"):
        if row["split"] not in SPLITS:
            raise TrainingDataError(
                f"{where}: row {row['id']!r}: field 'split': {row['split']!r} is not one of {SPLITS}"
            )
        if row["split"] == split:
            out.append(row)
    return out


def training_examples(frame: pd.DataFrame, *, split: str, form: ExampleForm,
                      where: str) -> list[dict[str, Any]]:
    """The examples of one split. ``where`` names the dataset version in errors."""
    return row_examples(split_rows(frame, split=split, form=form, where=where), form=form,
                        where=where)


def to_dataset(examples: Sequence[Mapping[str, Any]], form: ExampleForm) -> Dataset:
    return Dataset.from_list(list(examples), features=EXAMPLE_FEATURES[form])


def example_tokens(tokenizer: Any, example: Mapping[str, Any], chat_template: str,
                   max_length: int) -> tuple[int, int]:
    """(tokens of the example before truncation, tokens the loss is computed on after it): the
    assistant turns' tokens (``messages`` form, by the template's generation markers) or the
    completion's (``steps`` form) that fall within ``max_length``."""
    if "messages" in example:
        out = tokenizer.apply_chat_template(
            list(example["messages"]), tools=list(example["tools"]) or None,
            chat_template=chat_template, tokenize=True, return_dict=True,
            return_assistant_tokens_mask=True)
        return len(out["input_ids"]), int(sum(out["assistant_masks"][:max_length]))
    prompt = list(example["prompt"])
    whole = tokenizer.apply_chat_template(prompt + list(example["completion"]),
                                          chat_template=chat_template, tokenize=True,
                                          return_dict=True)
    asked = tokenizer.apply_chat_template(prompt, chat_template=chat_template, tokenize=True,
                                          return_dict=True, add_generation_prompt=True)
    n_tokens = len(whole["input_ids"])
    return n_tokens, max(0, min(n_tokens, max_length) - len(asked["input_ids"]))


@dataclass(frozen=True)
class TokenCount:
    examples: int
    sampled: int
    tokens: int
    """Tokens per epoch, each example cut at max_length (exact when every example was counted)."""
    untrainable: int = 0
    """Counted examples with no token to train on within max_length (they add nothing)."""

    @property
    def mean_tokens(self) -> float:
        return self.tokens / self.examples if self.examples else 0.0


def count_tokens(tokenizer: Any, examples: Sequence[Mapping[str, Any]], *, chat_template: str,
                 max_length: int, sample: int = 2000, seed: int = 0) -> TokenCount:
    """Tokens one epoch feeds the model; above ``sample`` examples, scaled from a random sample
    (the estimate only sizes the cost; tokenising a 470M-token set twice would not be free)."""
    chosen: Iterable[Mapping[str, Any]] = examples
    if len(examples) > sample:
        chosen = random.Random(seed).sample(list(examples), sample)
    counts = [example_tokens(tokenizer, ex, chat_template, max_length) for ex in chosen]
    lengths = [min(n, max_length) for n, _ in counts]
    counted = len(lengths)
    total = sum(lengths) if counted == len(examples) else round(
        sum(lengths) / counted * len(examples))
    return TokenCount(examples=len(examples), sampled=counted, tokens=total,
                      untrainable=sum(1 for _, trained in counts if trained == 0))


def write_examples(examples: Sequence[Mapping[str, Any]], path: Any) -> None:
    """Examples as JSON lines (what the job reads: every rank the same rows, in order)."""
    import json
    from pathlib import Path

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for example in examples:
            out.write(json.dumps(example, ensure_ascii=False, default=str) + "\n")
    tmp.replace(path)


def read_examples(path: Any) -> list[dict[str, Any]]:
    import json
    from pathlib import Path

    with Path(path).open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]
