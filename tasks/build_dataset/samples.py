"""One training candidate as build_dataset handles it: an agent trajectory or a general
conversation, with the text forms dedup and decontamination compare and the SFT table row.

Agent rows come from a ``trajectories`` table (``schemas.TRAJECTORY_FEATURES``); each row is
checked here and a row that cannot be used raises :class:`InputError` naming the version, the
row and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentune.tasks.build_dataset.general_data import GeneralSample
from agentune.tasks.common.input_files import InputError
from agentune.tasks.common.schemas import TEMPLATE_SOURCES, TRAJECTORY_FEATURES

AGENT, GENERAL = "agent", "general"
_ROLES = {"system", "user", "assistant", "tool"}


@dataclass
class Sample:
    id: str
    source: str
    """``agent`` or ``general``."""
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    query: str
    lang: str
    task_type: str
    origin: str
    """Where it came from: the trajectories version, or the general-data file name."""
    template_id: str | None = None
    template_source: str | None = None
    query_id: str | None = None
    set_id: str | None = None
    judge_score: float | None = None
    cluster_id: str = ""
    split: str = ""
    n_tokens: int = 0
    """Tokens of the whole sample under the student's chat template."""
    n_trained: int = 0
    """Assistant tokens within max_length: what the loss is computed on."""
    kind: str | None = None
    """The scenario kind the row acts out (``irrelevant`` for a flip); None for a plain query or
    a general row."""
    derivation: str = "none"
    """How the row was made: ``none`` (as verified) or a derivation (``derivations.py``)."""
    derived_from: str | None = None
    """The id of the trajectory or general row a derived row was made from."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> str:
        """What a split keeps together: the query set for agent rows, the row for general ones."""
        return self.set_id if self.set_id else self.id

    @property
    def stratum(self) -> tuple[str, str]:
        """What mixing and coreset selection balance over: task type x template source for agent
        rows, source file x language for general ones."""
        if self.source == AGENT:
            return (self.task_type, self.template_source or "unknown")
        return (self.origin, self.lang)

    def sft_row(self) -> dict[str, Any]:
        """The row of the ``sft_dataset`` table (``schemas.SFT_FEATURES``)."""
        return {
            "id": self.id, "split": self.split, "source": self.source, "query_id": self.query_id,
            "set_id": self.set_id, "template_id": self.template_id,
            "template_source": self.template_source, "task_type": self.task_type,
            "lang": self.lang, "messages": self.messages, "tools": self.tools,
            "steps": self.steps, "cluster_id": self.cluster_id, "n_tokens": self.n_tokens,
            "kind": self.kind, "derivation": self.derivation, "derived_from": self.derived_from,
        }


def _normalised(value: Any) -> Any:
    """Strings NFKC-normalised with whitespace runs collapsed and ends stripped; mappings keep
    their keys (sorted on serialisation)."""
    kind = type(value)  # the common JSON types first: isinstance against ABCs is slow
    if kind is dict:
        return {k: _normalised(v) for k, v in value.items()}
    if kind is list:
        return [_normalised(v) for v in value]
    if isinstance(value, str):
        return " ".join(unicodedata.normalize("NFKC", value).split())
    if isinstance(value, Mapping):
        return {k: _normalised(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalised(v) for v in value]
    return value


def canonical_arguments(arguments: Any) -> Any:
    """A tool call's arguments in the form dedup compares: OpenAI's wire form (a JSON string)
    parsed, so that ``'{"b": 1, "a": 2}'``, ``'{"a":2,"b":1}'`` and ``{"a": 2, "b": 1}`` are one
    value (keys are sorted when it is serialised). A string that is not a JSON object or list is
    kept as it is."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return arguments
        return parsed if isinstance(parsed, dict | list) else arguments
    return arguments


def _with_canonical_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call (``{"function": {"name", "arguments"}}`` or flat ``{"name", "arguments"}``)
    with :func:`canonical_arguments`."""
    function = call.get("function")
    if isinstance(function, Mapping) and "arguments" in function:
        call["function"] = {**function, "arguments": canonical_arguments(function["arguments"])}
    elif "arguments" in call:
        call["arguments"] = canonical_arguments(call["arguments"])
    return call


def _without_call_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with tool-call ids replaced by their position (ids are random per generation, so
    two identical trajectories would otherwise never be exact duplicates) and tool-call arguments
    in their canonical form (:func:`canonical_arguments`)."""
    ids: dict[str, int] = {}
    out = []
    for message in messages:
        if "tool_calls" not in message and "tool_call_id" not in message:
            out.append(message)
            continue
        message = dict(message)
        calls = message.get("tool_calls") or []
        if calls:
            message["tool_calls"] = []
            for call in calls:
                call = _with_canonical_arguments(dict(call))
                if "id" in call:
                    call["id"] = ids.setdefault(str(call["id"]), len(ids))
                message["tool_calls"].append(call)
        if "tool_call_id" in message:
            message["tool_call_id"] = ids.setdefault(str(message["tool_call_id"]), len(ids))
        out.append(message)
    return out


_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                            default=str)
_dumps = _ENCODER.encode

# An escape in JSON text; group 1 when it encodes whitespace (str.split's control characters).
_ESCAPE = re.compile(r'\\(?:([tnfr]|u000b|u001[c-f])|u[0-9a-f]{4}|[^u])')
_ESCAPE_SPLIT = re.compile(r'(\\(?:u[0-9a-f]{4}|[^u]))')
# The whitespace JSON leaves as it is and NFKC keeps (NFKC turns the other Unicode spaces into
# " "), and a space after a quote that is not escaped (an opening quote: in compact JSON a
# closing quote is never followed by a space).
_RAW_SPACES = str.maketrans({"\x85": " ", "\u1680": " ", "\u2028": " ", "\u2029": " "})
_SPACE_RUN = re.compile(" {2,}")
_AFTER_OPENING = re.compile(r'(?<!\\)" ')
# Characters NFKC turns into a quote or a backslash (they would break the JSON text), and the
# private-use character that stands in for escapes while NFKC runs.
_NFKC_UNSAFE = ("\ufe68", "\uff02", "\uff3c", "\ue000")


def _escape_as_space(match: re.Match[str]) -> str:
    return " " if match.group(1) else match.group()


def _canonical_json(value: Any) -> str:
    """Compact, key-sorted JSON of ``value`` with every string NFKC-normalised, whitespace runs
    collapsed to one space and ends stripped (what :func:`_normalised` does, but on the
    serialised text at C speed instead of a walk in Python).

    In compact JSON every raw quote delimits a string and no whitespace lies outside strings, so
    a whitespace run after a quote is a string's leading whitespace, one before a quote its
    trailing whitespace, and NFKC of the text between escapes is NFKC of each string (quotes
    and the structural characters never compose). Object keys are normalised like values. Text
    where NFKC would create a quote or backslash takes the walk. A fuzz test checks the result
    against the walk."""
    raw = _dumps(value)
    if not unicodedata.is_normalized("NFKC", raw):
        if any(ch in raw for ch in _NFKC_UNSAFE):
            return _dumps(_normalised(value))
        # NFKC between the escapes: an escape's letter (the n of \n) must not compose with a
        # combining mark after it. A private-use character stands in for each escape: like the
        # character it encodes, it composes with nothing and blocks reordering.
        pieces = _ESCAPE_SPLIT.split(raw)
        pieces[0::2] = unicodedata.normalize("NFKC", "\ue000".join(pieces[0::2])).split("\ue000")
        raw = "".join(pieces)
    # Every whitespace character to a plain space, then runs to one space, then the spaces at
    # the ends of strings away. Each step is skipped when a substring search finds nothing to do.
    if "\\" in raw:
        raw = _ESCAPE.sub(_escape_as_space, raw)
    if any(ch in raw for ch in "\x85\u1680\u2028\u2029"):
        raw = raw.translate(_RAW_SPACES)
    if "  " in raw:
        raw = _SPACE_RUN.sub(" ", raw)
    if ' "' in raw:  # a space before a quote: before a closing one (an escaped one has a \\)
        raw = raw.replace(' "', '"')
    if '" ' in raw:
        raw = _AFTER_OPENING.sub('"', raw)
    return raw


_TOOLS_MEMO: dict[str, str] = {}
_TOOLS_MEMO_SIZE = 1024


def _canonical_tools(tools: list[Any]) -> str:
    """:func:`_canonical_json` of a tools list, remembered by its plain serialisation: the same
    few catalogues repeat across every sample."""
    raw = _dumps(tools)
    found = _TOOLS_MEMO.get(raw)
    if found is None:
        if len(_TOOLS_MEMO) >= _TOOLS_MEMO_SIZE:
            _TOOLS_MEMO.clear()
        found = _TOOLS_MEMO[raw] = _canonical_json(tools)
    return found


def dedup_keys(sample: Sample) -> tuple[tuple[float, int, str], str]:
    """The sample's priority (the representative rule: best judge score first, unscored last;
    then the shortest normalised serialisation; then the id) and its :func:`exact_key`,
    computed together (they share the canonical serialisation)."""
    messages = _canonical_json(_without_call_ids(sample.messages))
    tools = _canonical_tools(sample.tools)
    blob = '{"messages":' + messages + ',"tools":' + tools + "}"
    score = sample.judge_score if sample.judge_score is not None else -math.inf
    return ((-score, len(messages) + len(tools), sample.id),
            hashlib.sha256(blob.encode("utf-8")).hexdigest())


def exact_key(sample: Sample) -> str:
    """What exact dedup compares: sha256 of the normalised serialisation of messages and tools
    (compact, keys sorted, strings NFKC with whitespace collapsed, tool-call ids by position)."""
    return dedup_keys(sample)[1]


def dedup_text(sample: Sample) -> str:
    """What near dedup compares: user and assistant content, tool calls with their arguments
    (in canonical form, keys sorted, whether stored as objects or JSON strings).
    System prompts and tool schemas are left out (they repeat across samples and would make all
    of them look alike), and so are tool results (the environment's words, not the model's)."""
    parts = []
    for message in sample.messages:
        if message.get("role") not in ("user", "assistant"):
            continue
        if isinstance(message.get("content"), str):
            parts.append(message["content"])
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call)
            arguments = canonical_arguments(fn.get("arguments"))
            parts.append(f"{fn.get('name', '')} "
                         + json.dumps(arguments, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts)


# --------------------------------------------------------------------------- from inputs


def _check_messages(messages: Any, where: str, row: str) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise InputError(where, row, "messages", "must be a non-empty list of messages")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InputError(where, row, f"messages[{i}]", "must be an object")
        if message.get("role") not in _ROLES:
            raise InputError(where, row, f"messages[{i}].role",
                             f"unknown role {message.get('role')!r}; expected one of "
                             f"{sorted(_ROLES)}")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise InputError(where, row, f"messages[{i}].content", "must be a string or null")
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise InputError(where, row, f"messages[{i}].tool_calls", "must be a list")
        for j, call in enumerate(calls or []):
            fn = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                raise InputError(where, row, f"messages[{i}].tool_calls[{j}].function",
                                 "must be an object with a string `name`")
    return [dict(m) for m in messages]


ADDED_LATER = frozenset({"guided"})
"""Trajectory columns that versions published before them lack; nothing here reads them."""


def sample_from_trajectory(record: Mapping[str, Any], where: str, index: int) -> Sample:
    """One ``trajectories`` row (as read from the store) as a Sample; ``where`` names the
    version."""
    row = f"row {index} (id {record.get('id')!r})"
    missing = [c for c in TRAJECTORY_FEATURES if c not in record and c not in ADDED_LATER]
    if missing:
        raise InputError(where, row, missing[0], "column missing from the trajectories table")
    for name in ("id", "query", "set_id", "task_type", "lang"):
        if not isinstance(record[name], str) or not record[name]:
            raise InputError(where, row, name, "must be a non-empty string")
    if record["template_source"] is not None and record["template_source"] not in TEMPLATE_SOURCES:
        raise InputError(where, row, "template_source",
                         f"{record['template_source']!r} is not one of {list(TEMPLATE_SOURCES)}")
    tools = record["tools"] if record["tools"] is not None else []
    steps = record["steps"] if record["steps"] is not None else []
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools):
        raise InputError(where, row, "tools", "must be a list of tool schemas (objects)")
    if not isinstance(steps, list) or not all(isinstance(s, Mapping) for s in steps):
        raise InputError(where, row, "steps", "must be a list of prompt/completion steps")
    score = record["judge_score"]
    unscored = score is None or (isinstance(score, float) and math.isnan(score))
    judge = None if unscored else float(score)
    return Sample(
        id=record["id"], source=AGENT,
        messages=_check_messages(record["messages"], where, row),
        tools=[dict(t) for t in tools], steps=[dict(s) for s in steps],
        query=record["query"], lang=record["lang"], task_type=record["task_type"],
        origin=where, template_id=record["template_id"],
        template_source=record["template_source"], query_id=record["query_id"],
        set_id=record["set_id"], judge_score=judge, kind=record["kind"],
    )


def sample_from_general(general: GeneralSample) -> Sample:
    return Sample(
        id=general.id, source=GENERAL, messages=[dict(m) for m in general.messages], tools=[],
        steps=[general.prompt_completion()], query=general.query, lang=general.lang,
        task_type=GENERAL, origin=general.origin,
    )
