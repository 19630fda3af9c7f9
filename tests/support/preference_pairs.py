"""Tiny preference pairs over the training tests' conversations: the prompt up to a decision,
the right call chosen, a call with a wrong argument (or a wrong answer) rejected."""

from __future__ import annotations

import copy
from typing import Any

from support.tiny_train_model import CONVERSATIONS, SEARCH, WEATHER


def _wrong(message: dict[str, Any]) -> dict[str, Any]:
    wrong = copy.deepcopy(message)
    if wrong.get("tool_calls"):
        args = wrong["tool_calls"][0]["function"]["arguments"]
        key = next(iter(args))
        args[key] = "上海" if args[key] != "上海" else "北京"
        if key == "query":
            args[key] = "cooking recipes"
    else:
        wrong["content"] = "I cannot help with that."
    return wrong


def preference_rows(copies: int = 1, *, val: bool = False) -> list[dict[str, Any]]:
    """One pair per assistant decision of each conversation (``copies`` times in train)."""
    rows = []
    for c, conv in enumerate(CONVERSATIONS):
        messages = conv["messages"]
        tools = [WEATHER, SEARCH] if len(messages) > 2 else []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            splits = ["train"] * copies + (["val"] if val else [])
            for k, split in enumerate(splits):
                rows.append({
                    "id": f"p{c}-{i}-{k}", "split": split, "source": "attempts",
                    "scenario_id": f"s{c}", "kind": "single_call" if tools else "no_tool",
                    "lang": conv["lang"], "decision": i, "prompt": messages[:i], "tools": tools,
                    "chosen": [m], "rejected": [_wrong(m)], "chosen_id": f"a{c}",
                    "rejected_id": f"b{c}", "chosen_reward": 1.0, "rejected_reward": 0.2,
                    "margin": 0.8, "chosen_components": {"state": 1.0},
                    "rejected_components": {"state": 0.0}})
    return rows


def log_prob_margins(model: Any, tokenizer: Any, examples: list[dict[str, Any]],
                     chat_template: str) -> list[float]:
    """Per pair: log p(chosen | prompt) - log p(rejected | prompt), summed over the completion
    tokens as TRL splits them (after the prompt rendered with its generation prompt)."""
    import torch

    from agentune.tasks.train.length_audit import _common_prefix

    def ids(messages: list[Any], tools: Any, **kw: Any) -> list[int]:
        return tokenizer.apply_chat_template(messages, tools=tools, chat_template=chat_template,
                                             tokenize=True, return_dict=True, **kw)["input_ids"]

    def completion_logp(prompt: list[int], full: list[int]) -> float:
        start = _common_prefix(prompt, full)
        with torch.no_grad():
            logits = model(torch.tensor([full])).logits[0].float()
        logps = torch.log_softmax(logits[:-1], dim=-1)
        target = torch.tensor(full[1:])
        picked = logps.gather(1, target[:, None])[:, 0]
        return float(picked[start - 1:].sum())

    margins = []
    model.eval()
    for ex in examples:
        tools = list(ex["tools"]) or None
        prompt = ids(list(ex["prompt"]), tools, add_generation_prompt=True)
        chosen = completion_logp(prompt, ids(list(ex["prompt"]) + list(ex["chosen"]), tools))
        rejected = completion_logp(prompt, ids(list(ex["prompt"]) + list(ex["rejected"]), tools))
        margins.append(chosen - rejected)
    return margins
