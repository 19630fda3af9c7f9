"""Reading a JSON object out of a model's answer, with the repairs KAgentBench applies.

Model answers wrap their JSON in prose and code fences, stop before the last brace, leave keys
unquoted and write escapes JSON does not know. The official KAgentBench evaluator repairs three
of these (brace balancing, quoting bare keys, dropping bad escapes); :func:`read_json_object`
does the same three plus what a parser needs to find the object in the first place: it skips
text and code fences around the object, ignores trailing text after it, drops trailing commas and
closes a string cut off by the end of the answer.

The repair is one pass of a small scanner that knows whether it is inside a string, so a brace or
a ``word:`` inside a string value is never touched (the official script counts braces and quotes
keys with regular expressions over the whole text). On an answer that is already valid JSON the
result is exactly ``json.loads``'s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_VALID_ESCAPES = set('"\\/bfnrtu')
_FENCE = re.compile(r"```[ \t]*[A-Za-z]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_KEY_START = re.compile(r"[A-Za-z_\u4e00-\u9fff]")
_KEY_CHAR = re.compile(r"[\w\-\u4e00-\u9fff]")
_DECODER = json.JSONDecoder()
# How many opening braces, and line breaks to cut an open object at, to try before giving up.
_MAX_STARTS = 20
_MAX_CUTS = 20


@dataclass
class JsonReading:
    """The object found (or None) and the repairs it took, e.g. ``["code_fence", "bare_key"]``."""

    value: dict[str, Any] | None
    repairs: list[str] = field(default_factory=list)


def strip_code_fence(text: str) -> tuple[str, bool]:
    """The inside of the first Markdown code fence, if the text has one (a fence left open by
    the end of the answer counts)."""
    match = _FENCE.search(text)
    if match is None:
        return text, False
    return match.group(1), True


def repair_json(text: str) -> tuple[str, list[str]]:
    """``text`` (starting at an opening brace) with bad escapes dropped, bare keys quoted,
    trailing commas removed, a cut-off string closed and missing closers appended.

    Stops after the closer that balances the first brace: what follows is not part of the object.
    """
    out: list[str] = []
    repairs: list[str] = []
    stack: list[str] = []
    in_string = False
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                nxt = text[i + 1] if i + 1 < n else ""
                if nxt in _VALID_ESCAPES and nxt:
                    out.append(ch + nxt)
                    i += 2
                    continue
                repairs.append("bad_escape")  # drop the backslash, keep the character
                i += 1
                continue
            if ch == '"':
                in_string = False
            elif ch == "\n":
                ch = "\\n"
                repairs.append("raw_newline")
            out.append(ch)
            i += 1
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            _drop_trailing_comma(out, repairs)
            if stack and stack[-1] == ch:
                stack.pop()
                out.append(ch)
                if not stack:
                    break
                i += 1
                continue
            repairs.append("stray_closer")
            i += 1
            continue
        elif stack and stack[-1] == "}" and _KEY_START.match(ch) and _at_key_position(out):
            j = i + 1
            while j < n and _KEY_CHAR.match(text[j]):
                j += 1
            k = j
            while k < n and text[k] in " \t":
                k += 1
            if k < n and text[k] == ":":
                out.append(f'"{text[i:j]}"')
                repairs.append("bare_key")
                i = j
                continue
        out.append(ch)
        i += 1
    if in_string:
        out.append('"')
        repairs.append("unclosed_string")
    if stack:
        _drop_trailing_comma(out, repairs)
        out.extend(reversed(stack))
        repairs.append("unbalanced_braces")
    return "".join(out), repairs


def _at_key_position(out: list[str]) -> bool:
    """Whether the last structural character written opens an object or separates members."""
    for piece in reversed(out):
        stripped = piece.strip()
        if stripped:
            return stripped[-1] in "{,"
    return False


def _drop_trailing_comma(out: list[str], repairs: list[str]) -> None:
    for idx in range(len(out) - 1, -1, -1):
        if out[idx].strip() == "":
            continue
        if out[idx] == ",":
            del out[idx]
            repairs.append("trailing_comma")
        return


def read_json_object(text: str | None) -> JsonReading:
    """The first JSON object in a model answer, repaired if need be (None if there is none)."""
    if not text:
        return JsonReading(None)
    body, fenced = strip_code_fence(text)
    if fenced and "{" not in body:
        body, fenced = text, False
    base = ["code_fence"] if fenced else []
    starts = [m.start() for m in re.finditer(r"\{", body)][:_MAX_STARTS]
    for start in starts:
        chunk = body[start:]
        try:
            value, end = _DECODER.raw_decode(chunk)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(value, dict):
                extra = ["surrounding_text"] if start > 0 or chunk[end:].strip() else []
                return JsonReading(value, base + extra)
            continue
        # An object left open may be followed by prose ("...\nObservation: ok"): try the whole
        # rest, then shorter and shorter prefixes ending at a line break.
        cuts = [len(chunk)] + [m.start() for m in re.finditer(r"\n", chunk)][::-1][:_MAX_CUTS]
        for cut in cuts:
            repaired, repairs = repair_json(chunk[:cut])
            try:
                value, end = _DECODER.raw_decode(repaired)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                dropped = start > 0 or cut < len(chunk) or repaired[end:].strip()
                extra = ["surrounding_text"] if dropped else []
                return JsonReading(value, base + extra + sorted(set(repairs), key=repairs.index))
            break
    return JsonReading(None, base)
