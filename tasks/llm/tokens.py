"""Prompt sizes before a call is sent, for the token-rate limiter and the budget's reservations.

A role served in-process (``local``) counts with its own tokenizer. An endpoint's tokenizer is
not known here, so its prompts are estimated: about four bytes of UTF-8 per token for text
outside the CJK scripts (English: four characters; Cyrillic or Greek: two), and one token per
Chinese, Japanese or Korean character. Characters over four would undercount Chinese 2-3x: the
Qwen, GPT-4o and DeepSeek tokenizers spend 0.6-1 token per Chinese character, the embedded
SmolLM2's 2-3 (that one is local, so it is counted exactly).
"""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

from agentune.config.llm import RoleConfig
from agentune.tasks.llm.types import ChatRequest

# Han (with extensions and compatibility ideographs), kana, Hangul, bopomofo, CJK symbols and
# punctuation, fullwidth forms.
_CJK = re.compile(
    "[\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31a0-\u31ff"
    "\u3200-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\ufe30-\ufe4f"
    "\uff00-\uffef\U00020000-\U0003134f]"
)


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` for an unknown modern tokenizer, rounded up (see the module doc)."""
    rest, cjk = _CJK.subn("", text)
    return cjk + math.ceil(len(rest.encode("utf-8")) / 4)


def prompt_text(request: ChatRequest) -> str:
    """What of a request the model reads: its messages and tools, as compact JSON."""
    prompt = request.model_dump(include={"messages", "tools"}, exclude_none=True)
    return json.dumps(prompt, ensure_ascii=False, separators=(",", ":"))


class PromptCounter:
    """Counts a role's prompts: with the local model's tokenizer (loaded on first use), else
    with :func:`estimate_tokens`."""

    def __init__(self, role: RoleConfig, *, local: bool) -> None:
        self.role = role
        self.local = local and role.provider == "local"
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                from transformers import AutoTokenizer

                from agentune.tasks.llm.embedded_model import resolve_model_path

                self._tokenizer = AutoTokenizer.from_pretrained(
                    resolve_model_path(self.role.model))
        return self._tokenizer

    def count(self, request: ChatRequest) -> int:
        text = prompt_text(request)
        if not self.local:
            return estimate_tokens(text)
        tokenizer = self._load()
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])
