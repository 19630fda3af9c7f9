"""The teacher's paraphrase of a generated request (optional): a new wording of the same request,
kept only when every ground-truth argument value the request states is still stated.

A value counts as stated in any of its surface forms (a city in Chinese or English, a date as
2025-06-06, 6月6日 or June 6) by the verifier's fact normalisation; values the request never
states (an id the agent reads from a search) are not asked for. A paraphrase that loses one keeps
the rendered request and records the reject, so nothing changes silently.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentune.tasks.environments.blueprints import Day, Draft, Text, fill
from agentune.tasks.llm.types import ChatRequest, ChatResult
from agentune.tasks.verifier.answers import fact_found

LANGUAGE = {"zh": "Simplified Chinese", "en": "English"}
DAY_FORMS = ("iso", "zh", "en", "zhw", "enw")


def paraphrase_request(draft: Draft, *, seed: int, max_tokens: int) -> ChatRequest:
    return ChatRequest(messages=[
        {"role": "system", "content": "You rewrite a user's request to an assistant in other "
         f"words, in {LANGUAGE[draft.lang]}, as a real user would type it. Keep every name, id, "
         "number, date, time and place exactly as written. Reply with the rewritten request "
         "only."},
        {"role": "user", "content": draft.request}],
        temperature=0.7, seed=seed, max_tokens=max_tokens)


def surface_forms(value: Any) -> list[str]:
    if isinstance(value, Text):
        return list(dict.fromkeys([str(value), *value.forms.values()]))
    if isinstance(value, Day):
        return [format(value, spec) for spec in DAY_FORMS]
    return [str(value)]


def _argument_values(draft: Draft) -> list[Any]:
    def leaves(value: Any) -> Iterable[Any]:
        if isinstance(value, dict):
            for v in value.values():
                yield from leaves(v)
        elif isinstance(value, list):
            for v in value:
                yield from leaves(v)
        else:
            yield value

    return [v for step in draft.ground_truth for c in step for v in leaves(c.arguments)]


def lost_values(draft: Draft, paraphrase: str) -> list[str]:
    """The ground-truth argument values the rendered request states and the paraphrase does
    not (in any surface form of the slot they come from)."""
    arguments = {str(v) for v in _argument_values(draft)}
    lost = []
    for value in draft.slots.values():
        if str(fill("{v}", {"v": value})) not in arguments:
            continue
        forms = surface_forms(value)
        said = [f for f in forms if fact_found(f, draft.request)]
        if said and not any(fact_found(f, paraphrase) for f in forms):
            lost.append(said[0])
    return lost


def read_paraphrase(result: ChatResult) -> str:
    text = (result.content or "").strip().strip('"“”').strip()
    return text.splitlines()[0].strip() if text else ""
