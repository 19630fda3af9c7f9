"""Quality gates for text a model wrote in place of a user: expanded queries and teacher-written
scenario requests. A weak teacher under a grammar writes well-formed JSON whose strings can still
be debris: regex fragments ("[a-zA-Z]{6}"), template syntax ("{{ goal }}"), runs of symbols, one
word repeated, or text in the wrong script. Each check answers ``KEEP`` or ``(False, reason)``.
"""

from __future__ import annotations

import re

from agentune.tasks.common.rejects import KEEP, Verdict, drop

_REGEX = re.compile(r"\[[A-Za-z0-9]-[A-Za-z0-9]|\{\d+(?:,\d*)?\}|\\[dswbDSWB]|\.\*|\.\+|\(\?[:=!<]")
_TEMPLATE = re.compile(r"\{\{|\}\}|\{%|%\}|<\||\|>|\$\{|\b[A-Z]+(?:_[A-Z]+)+\b")
_WORD = re.compile(r"[A-Za-z]+|[\u4e00-\u9fff]")
_HAN = re.compile(r"[\u4e00-\u9fff]")
_LATIN = re.compile(r"[A-Za-z]")


def debris(text: str) -> Verdict:
    """Regex or template fragments, too few letters, or one word over and over."""
    if _REGEX.search(text):
        return drop("regex_debris")
    if _TEMPLATE.search(text):
        return drop("template_debris")
    visible = [ch for ch in text if not ch.isspace()]
    letters = sum(ch.isalpha() or ch.isdigit() for ch in visible)
    if not visible or letters / len(visible) < 0.6:
        return drop("too_few_letters")
    words = _WORD.findall(text.lower())
    if len(words) >= 6 and max(words.count(w) for w in set(words)) / len(words) > 0.4:
        return drop("repeated_word")
    return KEEP


def script_matches(text: str, lang: str) -> Verdict:
    """Chinese text is mostly Han characters (Latin names and ids aside); English has none."""
    han, latin = len(_HAN.findall(text)), len(_LATIN.findall(text))
    if lang == "zh" and han < max(2, 0.3 * (han + latin)):
        return drop("wrong_script")
    if lang == "en" and han > 0:
        return drop("wrong_script")
    return KEEP


def written_text_problem(text: str, lang: str) -> str | None:
    """The first reason a generated user text is unusable, or None."""
    for verdict in (debris(text), script_matches(text, lang)):
        if verdict is not KEEP:
            return verdict[1]
    return None
