"""Generated trajectory rows with planted exact and near duplicates, for the dataset tests and
the dedup benchmark: rows shaped like tasks/common/schemas.py TRAJECTORY_FEATURES, zh and en, with
heterogeneous tool arguments, and the ground truth of which rows copy which."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

from agentune.tasks.build_dataset.samples import Sample, sample_from_trajectory
from agentune.tasks.common.schemas import TASK_TYPES, TEMPLATE_SOURCES

_SYLLABLES = ("ka ri to mu sen dor val pe lin qua zo bri mon tas fel gor ni ush ek lo va "
              "ter pim sol dra cu hen wex ob ya").split()
_HANZI = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能"
          "下"
          "过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体"
          "制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数")
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "date": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "calculator", "description": "Evaluate maths",
     "parameters": {"type": "object", "properties": {"expression": {"type": "string"},
                                                     "precision": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "web_search", "description": "Search the web",
     "parameters": {"type": "object", "properties": {
         "query": {"type": "string"}, "top_k": {"type": "integer"},
         "filters": {"type": "object"}}}}},
]


def en_words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.sample(_SYLLABLES, rng.randint(1, 3))) for _ in range(n))


def zh_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_HANZI) for _ in range(n))


def _call_args(rng: random.Random, tool: str, lang: str) -> dict[str, Any]:
    """Heterogeneous arguments: every tool has its own keys and value types."""
    word = zh_text(rng, 4) if lang == "zh" else en_words(rng, 2)
    if tool == "get_weather":
        return {"city": word, "date": f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"}
    if tool == "calculator":
        return {"expression": f"{rng.randint(2, 999)} * {rng.randint(2, 99)}", "precision": 2}
    return {"query": word, "top_k": rng.randint(3, 10),
            "filters": {"lang": lang, "recent": rng.random() < 0.5}}


def trajectory_row(rng: random.Random, *, row_id: str, set_id: str, lang: str, task_type: str,
                   template_source: str, answer_len: int = 60) -> dict[str, Any]:
    """One trajectory row in TRAJECTORY_FEATURES shape: system prompt, query, tool call(s) with
    arguments, tool results, final answer."""
    query = zh_text(rng, 18) + "？" if lang == "zh" else en_words(rng, 12) + "?"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are agent template {template_source}. Think, then "
                                      "call tools in JSON. " * 3},
        {"role": "user", "content": query},
    ]
    steps = []
    for k in range(rng.randint(1, 2)):
        tool = rng.choice(TOOLS)["function"]["name"]
        call_id = f"call_{rng.getrandbits(40):x}"
        thought = zh_text(rng, 20) if lang == "zh" else en_words(rng, 14)
        messages.append({"role": "assistant", "content": thought, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": tool, "arguments": _call_args(rng, tool, lang)}}]})
        messages.append({"role": "tool", "tool_call_id": call_id,
                         "content": zh_text(rng, 15) if lang == "zh" else en_words(rng, 10)})
        steps.append({"step": k, "kind": "plan", "prompt": f"prompt {k}: {query}",
                      "completion": thought})
    answer = zh_text(rng, answer_len) if lang == "zh" else en_words(rng, answer_len)
    messages.append({"role": "assistant", "content": answer})
    steps.append({"step": len(steps), "kind": "conclude", "prompt": f"conclude: {query}",
                  "completion": answer})
    return {
        "id": row_id, "query_id": f"q-{row_id}", "set_id": set_id, "query": query, "lang": lang,
        "template_id": f"tpl-{template_source}", "template_source": template_source,
        "protocol": "react", "task_type": task_type, "messages": messages, "tools": TOOLS,
        "steps": steps, "n_steps": len(steps),
        "n_tool_calls": sum(1 for m in messages if m.get("tool_calls")),
        "final_answer": answer, "judge_score": round(rng.uniform(5, 9), 2),
        "scenario_id": None, "kind": None, "verified": False, "reward": None, "attempt": 0,
        "guided": False,
        "source": "synthesized",
        "teacher_model": "test-teacher", "prompt_tokens": 100, "completion_tokens": 50,
    }


def exact_copy(rng: random.Random, row: dict[str, Any], row_id: str) -> dict[str, Any]:
    """Same content: new tool-call ids, extra whitespace, and a judge score of its own."""
    dup = copy.deepcopy(row)
    dup["id"], dup["query_id"] = row_id, f"q-{row_id}"
    for message in dup["messages"]:
        if message["role"] == "user":
            message["content"] = "  " + message["content"].replace(" ", "  ") + " \n"
        for call in message.get("tool_calls") or []:
            new_id = f"call_{rng.getrandbits(40):x}"
            old_id, call["id"] = call["id"], new_id
            for other in dup["messages"]:
                if other.get("tool_call_id") == old_id:
                    other["tool_call_id"] = new_id
    dup["judge_score"] = round(rng.uniform(5, 9), 2)
    return dup


def near_copy(rng: random.Random, row: dict[str, Any], row_id: str) -> dict[str, Any]:
    """One word (English) or one character (Chinese) of the final answer replaced by one unique
    to this copy, and a judge score of its own: a near duplicate well above a 0.8 threshold."""
    dup = exact_copy(rng, row, row_id)
    final = dup["messages"][-1]
    unique = rng.getrandbits(30)
    if dup["lang"] == "zh":
        chars = list(final["content"])
        chars[rng.randrange(len(chars))] = chr(0x6000 + unique % 0x3000)
        final["content"] = "".join(chars)
    else:
        words = final["content"].split()
        words[rng.randrange(len(words))] = f"zq{unique}x"
        final["content"] = " ".join(words)
    return dup


@dataclass
class Generated:
    rows: list[dict[str, Any]]
    group_of: dict[str, str] = field(default_factory=dict)
    """Row id -> id of the row it copies (itself for originals)."""
    exact: set[str] = field(default_factory=set)
    near: set[str] = field(default_factory=set)


def make_trajectories(n_base: int, *, exact_dups: int = 0, near_dups: int = 0, seed: int = 0,
                      langs: tuple[str, ...] = ("en", "zh"), rows_per_set: int = 4,
                      answer_len: int = 60) -> Generated:
    """``n_base`` distinct trajectories in sets of ``rows_per_set``, then planted copies of
    randomly chosen originals, shuffled in (so copies come before or after their original).
    Copies share their original's query set, as paraphrased retries of one query would."""
    rng = random.Random(seed)
    rows, group_of = [], {}
    for i in range(n_base):
        lang = langs[i % len(langs)]
        row = trajectory_row(rng, row_id=f"t{i:06d}", set_id=f"set-{lang}-{i // rows_per_set}",
                             lang=lang, task_type=TASK_TYPES[i % len(TASK_TYPES)],
                             template_source=TEMPLATE_SOURCES[(i // 3) % 2],
                             answer_len=answer_len)
        rows.append(row)
        group_of[row["id"]] = row["id"]
    gen = Generated(rows, group_of)
    originals = list(rows)
    # Near copies go to distinct originals: two near copies of one original differ from each
    # other in two places and may fall below the threshold (then both rightly stay).
    plan = ([("exact", rng.choice(originals)) for _ in range(exact_dups)]
            + [("near", base) for base in rng.sample(originals, near_dups)])
    counters = {"exact": 0, "near": 0}
    for kind, base in plan:
        dup = (exact_copy if kind == "exact" else near_copy)(
            rng, base, f"{kind}{counters[kind]:06d}")
        counters[kind] += 1
        gen.rows.append(dup)
        gen.group_of[dup["id"]] = base["id"]
        (gen.exact if kind == "exact" else gen.near).add(dup["id"])
    rng.shuffle(gen.rows)
    return gen


def samples_of(rows: list[dict[str, Any]]) -> list[Sample]:
    return [sample_from_trajectory(r, "trajectories@test", i) for i, r in enumerate(rows)]


def precision_recall(gen: Generated, dropped: set[str]) -> tuple[float, float]:
    """Over rows: a dropped row is right when its group has another member (one of each group
    must stay); recall is dropped planted copies over all planted copies."""
    sizes: dict[str, int] = {}
    for rid in gen.group_of:
        sizes[gen.group_of[rid]] = sizes.get(gen.group_of[rid], 0) + 1
    should_drop = sum(n - 1 for n in sizes.values())
    right = sum(1 for rid in dropped if sizes[gen.group_of[rid]] > 1)
    dropped_per_group: dict[str, int] = {}
    for rid in dropped:
        dropped_per_group[gen.group_of[rid]] = dropped_per_group.get(gen.group_of[rid], 0) + 1
    assert all(n < sizes[g] for g, n in dropped_per_group.items()), "a whole group was dropped"
    return (right / len(dropped) if dropped else 1.0), right / should_drop
