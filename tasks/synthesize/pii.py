"""PII in synthesized trajectories: the teacher invents tool results and answers, and an
environment's data may hold personal details, so every text of an accepted trajectory passes the
same scrubbing as the queries (``common/text_cleaning.scrub_pii``) before it is published.

``scrub``: e-mail addresses, phone numbers, ID and card numbers become typed placeholders
(``[EMAIL]`` ...) everywhere in the row (messages, tool-call arguments, steps, the answer), and the
row records what was replaced; ``drop``: a row holding any is rejected (``pii``); ``off``: rows
are published as written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Literal

from agentune.tasks.common.text_cleaning import ScrubResult, scrub_pii

PiiAction = Literal["scrub", "drop", "off"]
_TEXT_COLUMNS = ("query", "final_answer", "messages", "steps")


def _scrub(value: Any, found: Counter[str], seen: dict[str, ScrubResult]) -> Any:
    if isinstance(value, str):
        result = seen.get(value)
        if result is None:
            result = seen[value] = scrub_pii(value)
        found.update(result.found)
        return result.text
    if isinstance(value, Mapping):
        return {k: _scrub(v, found, seen) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, found, seen) for v in value]
    return value


def scrub_row(row: Mapping[str, Any], seen: dict[str, ScrubResult] | None = None
              ) -> tuple[dict[str, Any], dict[str, int]]:
    """The row with PII replaced in every text column, and the placeholders put in, by kind.
    ``seen``: texts already scrubbed, shared by the rows of one batch (their prompts repeat the
    same tool descriptions and instructions; scrubbing is a pure function of the text)."""
    found: Counter[str] = Counter()
    seen = {} if seen is None else seen
    out = dict(row)
    for column in _TEXT_COLUMNS:
        if column in out:
            out[column] = _scrub(out[column], found, seen)
    return out, dict(found)
