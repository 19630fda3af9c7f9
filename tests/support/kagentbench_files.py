"""Generated KAgentBench-format benchmark and prediction files in the official format."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from agentune.tasks.evaluate.benchmarks.kagentbench.format import write_jsonl

KEYS = ("ReACT", "AutoGPT", "ToolLlama", "ModelScope", "KuaiAgent")


_HANZI = ("查询北京上海明天天气温度航班价格酒店推荐附近餐厅"
          "电影票新闻股票汇率计算翻译总结报告会议日程")


_EN = ("search weather flight price hotel near restaurant movie news stock rate compute translate "
       "summary report meeting schedule the a for in of tomorrow today find book check").split()


FUNCS = [
    {"name": "web_search", "description": "search the web",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                     "top_k": {"type": "integer"}}}},
    {"name": "get_weather", "description": "weather by city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "date": {"type": "string"}}}},
    {"name": "calculator", "description": "evaluate maths",
     "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}},
    {"name": "book_hotel", "description": "book a hotel",
     "parameters": {"type": "object", "properties": {}}},
]


def _text(rng: random.Random, lang: str, n: int) -> str:
    if lang == "zh":
        text = "".join(rng.choice(_HANZI) for _ in range(n))
        return text + rng.choice(["。", "？", "", "，好的"])
    words = [rng.choice(_EN) for _ in range(n)]
    return " ".join(words) + rng.choice([".", "?", "", ". Then done."])


def _args(rng: random.Random, tool: str, lang: str) -> dict[str, Any]:
    if tool == "web_search":
        return {"query": _text(rng, lang, 4), "top_k": rng.randint(1, 9)}
    if tool == "get_weather":
        city = _text(rng, lang, 2)
        return {"city": city, "date": f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"}
    if tool == "calculator":
        return {"expression": f"{rng.randint(2, 99)} * {rng.randint(2, 99)}"}
    return {}


def _golden_step(rng: random.Random, lang: str) -> dict[str, Any]:
    if rng.random() < 0.12:
        return {"thought": "None" if rng.random() < 0.5 else _text(rng, lang, 5),
                "tool_name": "None", "tool_args": {}}
    tool = rng.choice(FUNCS)["name"]
    return {"thought": _text(rng, lang, rng.randint(3, 12)), "tool_name": tool,
            "tool_args": _args(rng, tool, lang)}


def _perturb(rng: random.Random, text: str, lang: str) -> str:
    roll = rng.random()
    if roll < 0.4:
        return text
    if roll < 0.8:
        return text[: max(1, len(text) // 2)] + _text(rng, lang, 3)
    return _text(rng, lang, 6)


def _predicted_step(rng: random.Random, golden: dict[str, Any], lang: str) -> dict[str, Any]:
    roll = rng.random()
    thought = _perturb(rng, str(golden["thought"]), lang)
    tool, args = golden["tool_name"], dict(golden["tool_args"])
    if tool == "None" or roll < 0.15:
        tool = rng.choice(FUNCS)["name"]
        args = _args(rng, tool, lang)
    elif roll < 0.3 and args:
        args.pop(rng.choice(list(args)))  # a missing key
    elif roll < 0.45:
        args = {k: _perturb(rng, str(v), lang) for k, v in args.items()}
        args["extra"] = "x"  # an extra key costs nothing
    return {"thought": thought, "tool_name": tool, "tool_args": args}


def _render(rng: random.Random, key: str, step: dict[str, Any], crashers: bool) -> str:
    """An answer in the template's format, sometimes malformed the ways models are."""
    thought, tool, args = step["thought"], step["tool_name"], step["tool_args"]
    fault = rng.random()
    if fault < 0.05:
        return "" if (key != "ReACT" or crashers) else "Thought: nothing to do"
    if key == "ReACT":
        value = next(iter(args.values()), "") if args else ""
        lead = "" if fault < 0.15 else f"Thought: {thought}\n"  # no thought: a known quirk
        return f"{lead}Action: {tool}\nAction Input: {value}\nObservation: ..."
    if key == "ToolLlama":
        body = json.dumps(args, ensure_ascii=False)
        if fault < 0.15:
            body = body[:-1]  # an open brace
        lead = "" if fault > 0.9 else f"Thought: {thought}\n"
        return f"{lead}Action: {tool}\nAction Input: {body}"
    if key == "ModelScope":
        call = json.dumps({"api_name": tool, "parameters": args}, ensure_ascii=False,
                          indent=None if fault < 0.4 else 2)
        return f"{thought}\n<|startofthink|>```JSON\n{call}\n```<|endofthink|>"
    if key == "AutoGPT":
        data = {"thoughts": {"text": thought, "plan": "- step"},
                "command": {"name": tool, "args": args}}
    else:
        data = {"task_name": thought, "command": {"name": tool, "args": args}}
    text = json.dumps(data, ensure_ascii=False, indent=None if fault < 0.3 else 2)
    if fault < 0.15:
        return "Here is my answer:\n" + text  # prose before one-line JSON: official finds none
    if fault < 0.2:
        return text.replace('"command"', "command")  # a bare key
    if fault < 0.25:
        return text.replace('"', '"\\q', 1)  # an invalid escape
    if fault < 0.4:
        return text[:-1]  # the last brace missing
    if fault < 0.5:
        return f"```json\n{text}\n```"
    return text


def _conclusion(rng: random.Random, key: str, golden: str, lang: str) -> str:
    answer = _perturb(rng, golden, lang)
    roll = rng.random()
    if roll < 0.06:
        return ""
    if key == "AutoGPT":
        if roll < 0.15:
            return 'web_search(query="more")'
        return f'finish(response="{answer}")' if roll < 0.6 else answer
    if key == "ToolLlama":
        if roll < 0.12:
            return "\n"
        body = json.dumps({"return_type": "give_answer", "final_answer": answer},
                          ensure_ascii=False)
        return f"Thought: done\nAction: Finish\nAction Input: {body}" if roll < 0.7 else answer
    return answer


def make_kagentbench(directory: Path, n: int, *, seed: int = 0,
                     crashers: bool = False) -> tuple[Path, Path]:
    """A benchmark and a prediction file with ``n`` samples in KAgentBench's proportions."""
    rng = random.Random(seed)
    bench, preds = [], []
    for i in range(n):
        lang = "zh" if rng.random() < 0.5 else "en"
        sample_type = rng.choices(["plantooluse", "reflextion", "conclusion", "profile"],
                                  weights=[320, 68, 245, 433])[0]
        keys = list(KEYS) if sample_type != "profile" else ["prompt"]
        if sample_type != "profile":
            rng.shuffle(keys)
            keys = keys[: rng.randint(3, 5)]
            if rng.random() < 0.05:
                keys[-1] = "Kuaiagent"  # a key the official script does not know
        line: dict[str, Any] = {"id": f"{sample_type[:4]}-{i}", "query": _text(rng, lang, 10),
                                "type": sample_type, "funcs": FUNCS, "memory": "",
                                "memory_type": "task",
                                "prompt_input": {k: f"prompt {k} {i}" for k in keys}}
        n_golden = rng.randint(1, 5)
        if sample_type in ("plantooluse", "reflextion"):
            goldens = [_golden_step(rng, lang) for _ in range(n_golden)]
            if sample_type == "reflextion" and not crashers:
                goldens[0] = {**_golden_step(rng, lang), "thought": _text(rng, lang, 6)}
                if goldens[0]["tool_name"] == "None":
                    goldens[0] = {"thought": _text(rng, lang, 6), "tool_name": "calculator",
                                  "tool_args": {"expression": "1 + 1"}}
            line["golden_result_list"] = goldens
            repeat = rng.choice(goldens)
            line["memory_last_task"] = ({"tool_name": repeat["tool_name"],
                                         "tool_args": repeat["tool_args"]}
                                        if rng.random() < 0.4 else
                                        {"tool_name": "web_search", "tool_args": {"query": "q"}})
            predicted = {k: _render(rng, k, _predicted_step(rng, rng.choice(goldens), lang),
                                    crashers) for k in keys}
        else:
            answers = [_text(rng, lang, rng.randint(20, 160)) for _ in range(n_golden)]
            line["golden_result_list"] = [{"golden_result": a} for a in answers]
            if sample_type == "profile":
                answer = _perturb(rng, rng.choice(answers), lang)
                predicted = "" if rng.random() < 0.05 else answer  # type: ignore[assignment]
            else:
                predicted = {k: _conclusion(rng, k, rng.choice(answers), lang) for k in keys}
        bench.append(line)
        preds.append({**line, "model_predict": predicted})
    order = list(range(n))
    rng.shuffle(order)  # a prediction file need not follow the benchmark's order
    bench_path = write_jsonl(directory / "benchmark.jsonl", bench)
    preds_path = write_jsonl(directory / "predictions.jsonl", [preds[i] for i in order])
    return bench_path, preds_path
