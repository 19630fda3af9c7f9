"""The teacher's paraphrase of a generated request (optional): a new wording of the same request,
kept only when every slot value the request states is still stated: every ground-truth argument
value it states, and the values that pick the call's target without being an argument (the day
of "cancel my flight on June 6").

A value counts as stated in any of its surface forms (a city in Chinese or English, a date as
2025-06-06, 6月6日 or June 6) by the verifier's fact normalisation; values the request never
states (an id the agent reads from a search) are not asked for. A paraphrase that loses one keeps
the rendered request and records the reject, so nothing changes silently.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentune.tasks.environments.blueprints import Day, Draft, Text
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


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def lost_values(draft: Draft, paraphrase: str) -> list[str]:
    """The slot values (a list slot's items one by one) the rendered request states and the
    paraphrase does not, in any of their surface forms."""
    lost = []
    for value in (v for slot in draft.slots.values() for v in _leaves(slot)):
        forms = surface_forms(value)
        said = [f for f in forms if fact_found(f, draft.request)]
        if said and not any(fact_found(f, paraphrase) for f in forms):
            lost.append(said[0])
    return lost


def read_paraphrase(result: ChatResult) -> str:
    """The first non-empty line of the answer, without quotes around it."""
    lines = [line.strip() for line in (result.content or "").splitlines() if line.strip()]
    return lines[0].strip('"“”').strip() if lines else ""
