"""The system message that frames a conversation in the messages form, one renderer for all.

A trajectory's training row (synthesize's ``messages``) and a closed-loop trial of the same
scenario (evaluate's messages form, native tool calls) must open with the same message, or the
model is trained under one framing and measured under another. Both render it here: an agent
template's Profile in the request's language, then the current time (the messages form has no
Goal section that would show it, and a request saying "tomorrow" needs it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from agentune.tasks.agent.prompt_templates import AgentPromptInputs, AgentTemplate, format_time

_TIME_LABEL = {"zh": "当前时间：", "en": "Current time: "}


def system_message(template: AgentTemplate, request: str, tools: Sequence[Mapping[str, Any]],
                   *, lang: str, now: datetime) -> str:
    """``template``'s Profile for ``request`` (in ``lang``, offered ``tools``: a Meta-Agent's
    Profile may mention either) and the current time ``now``."""
    lang = "zh" if lang == "zh" else "en"
    inputs = AgentPromptInputs.for_query(request, tools, current_time=now, lang=lang)
    profile = template.render_sections(inputs).get("profile", "").strip()
    clock = _TIME_LABEL[template.lang or lang] + format_time(now, template.lang or lang)
    return f"{profile}\n\n{clock}" if profile else clock
