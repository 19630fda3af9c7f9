"""KAgentBench files: the benchmark JSONL and the prediction JSONL, read with validation.

A benchmark line (KAgentBench's published format): ``id``, ``query``, ``type`` (one of
``plantooluse``, ``reflextion``, ``conclusion``, ``profile``), ``golden_result_list``, ``funcs``,
``prompt_input`` (template key -> prompt; ``{"prompt": ...}`` for profile), ``memory``,
``memory_type``, ``memory_last_task``. A prediction line repeats its benchmark line with
``model_predict`` added: template key -> raw answer (a plain string for profile).

agentune's own held-out benchmark writes the same format plus fields the official script
ignores: ``lang``, ``query_id``, ``step``, ``templates`` (key -> ``{template_id, protocol, source,
seen}``), ``memory_sections`` (key -> the memory text of that template's prompt) and ``origin``.

Every problem is a :class:`KAgentBenchFormatError` naming the file, the line and the field.
Lines sharing a (type, id) are allowed, as the official script allows them: the last one counts,
and the duplicates are counted in :attr:`BenchmarkFile.duplicates`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SampleType = Literal["plantooluse", "reflextion", "conclusion", "profile"]
SAMPLE_TYPES: tuple[SampleType, ...] = ("plantooluse", "reflextion", "conclusion", "profile")
PLANNING_TYPES = ("plantooluse", "reflextion")
PROFILE_KEY = "prompt"


class KAgentBenchFormatError(ValueError):
    """A benchmark or prediction file that cannot be scored; names file, line and field."""


@dataclass(frozen=True)
class Golden:
    """One golden answer: a step (planning types) or a final answer (conclusion, profile)."""

    thought: Any = "None"
    tool_name: Any = "None"
    tool_args: dict[str, Any] = field(default_factory=dict)
    result: Any = None


@dataclass(frozen=True)
class TemplateInfo:
    """What agentune's held-out benchmark declares about one prompt template of a sample."""

    template_id: str
    protocol: str
    source: str  # benchmark | meta-agent
    seen: bool  # the template appears in the training split


@dataclass
class BenchSample:
    """One benchmark line, validated; ``raw`` is the line as read (written back unchanged)."""

    id: Any
    type: SampleType
    query: str
    goldens: list[Golden]
    funcs: list[dict[str, Any]]
    prompts: dict[str, str]
    memory: str
    memory_last_task: tuple[Any, dict[str, Any]] | None
    templates: dict[str, TemplateInfo]
    memory_sections: dict[str, str]
    lang: str | None
    query_id: str | None
    raw: dict[str, Any]
    line: int
    prediction: str | dict[str, Any] | None = None
    """``model_predict`` of a prediction line: key -> answer, or the answer (profile)."""

    @property
    def key(self) -> tuple[str, Any]:
        return (self.type, self.id)


@dataclass
class BenchmarkFile:
    path: str
    samples: list[BenchSample]
    duplicates: int = 0
    """Lines whose (type, id) an earlier line already had (the later line counts)."""


class SourceLine:
    """Where a line came from (a file and line number, or an artifact and row), for errors."""

    def __init__(self, path: str, line: int) -> None:
        self.path, self.line = path, line

    def error(self, field_name: str, problem: str) -> KAgentBenchFormatError:
        return KAgentBenchFormatError(f"{self.path}:{self.line}: field {field_name!r}: {problem}")


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _require(obj: Mapping[str, Any], name: str, kinds: type | tuple[type, ...], where: SourceLine,
             *, default: Any = ..., label: str | None = None) -> Any:
    label = label or name
    if name not in obj:
        if default is not ...:
            return default
        raise where.error(label, "missing")
    value = obj[name]
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    # JSON true/false are Python bools, which are ints too: an id of `true` is not an id.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise where.error(label, f"must be {wanted}, got {_type_name(value)}")
    return value


def _goldens(obj: Mapping[str, Any], sample_type: str, where: SourceLine) -> list[Golden]:
    goldens = []
    for i, item in enumerate(_require(obj, "golden_result_list", list, where)):
        label = f"golden_result_list[{i}]"
        if not isinstance(item, dict):
            raise where.error(label, f"must be an object, got {_type_name(item)}")
        if sample_type in PLANNING_TYPES:
            for name in ("thought", "tool_name"):
                if name not in item:
                    raise where.error(f"{label}.{name}", "missing")
            tool_name = item["tool_name"]
            args = item.get("tool_args", {})
            if tool_name != "None" and not isinstance(args, dict):
                raise where.error(f"{label}.tool_args",
                                  f"must be an object, got {_type_name(args)}")
            goldens.append(Golden(item["thought"], tool_name,
                                  args if isinstance(args, dict) else {}))
        else:
            if "golden_result" not in item:
                raise where.error(f"{label}.golden_result", "missing")
            goldens.append(Golden(result=item["golden_result"]))
    return goldens


def _funcs(obj: Mapping[str, Any], required: bool, where: SourceLine) -> list[dict[str, Any]]:
    funcs = _require(obj, "funcs", list, where, default=... if required else [])
    for i, func in enumerate(funcs):
        if not isinstance(func, dict):
            raise where.error(f"funcs[{i}]", f"must be an object, got {_type_name(func)}")
        if not isinstance(func.get("name"), str):
            raise where.error(f"funcs[{i}].name", "missing or not a string")
    return funcs


def _string_map(obj: Mapping[str, Any], name: str, where: SourceLine, *,
                required: bool) -> dict[str, str]:
    value = _require(obj, name, dict, where, default=... if required else {})
    for key, text in value.items():
        if not isinstance(text, str):
            raise where.error(f"{name}.{key}", f"must be a string, got {_type_name(text)}")
    return value


def _last_task(obj: Mapping[str, Any], required: bool,
               where: SourceLine) -> tuple[Any, dict[str, Any]] | None:
    # The official script reads memory_last_task on reflextion lines only: elsewhere any shape
    # ({} is the format's default) is accepted and ignored, as there.
    if not required:
        return None
    if "memory_last_task" not in obj or obj["memory_last_task"] is None:
        raise where.error("memory_last_task", "missing (reflextion samples need it)")
    last = _require(obj, "memory_last_task", dict, where)
    for name in ("tool_name", "tool_args"):
        if name not in last:
            raise where.error(f"memory_last_task.{name}", "missing")
    return last["tool_name"], last["tool_args"]


def _templates(obj: Mapping[str, Any], where: SourceLine) -> dict[str, TemplateInfo]:
    found = _require(obj, "templates", dict, where, default={})
    templates = {}
    for key, info in found.items():
        if not isinstance(info, dict):
            raise where.error(f"templates.{key}", f"must be an object, got {_type_name(info)}")
        for name in ("template_id", "protocol", "source", "seen"):
            if name not in info:
                raise where.error(f"templates.{key}.{name}", "missing")
        templates[key] = TemplateInfo(str(info["template_id"]), str(info["protocol"]),
                                      str(info["source"]), bool(info["seen"]))
    return templates


def parse_sample(obj: Any, where: SourceLine, *, with_prediction: bool) -> BenchSample:
    if not isinstance(obj, dict):
        raise KAgentBenchFormatError(
            f"{where.path}:{where.line}: a line must be a JSON object, got {_type_name(obj)}")
    sample_id = _require(obj, "id", (str, int), where)
    sample_type = _require(obj, "type", str, where)
    if sample_type not in SAMPLE_TYPES:
        raise where.error("type", f"{sample_type!r} is not one of {', '.join(SAMPLE_TYPES)}")
    planning = sample_type in PLANNING_TYPES
    sample = BenchSample(
        id=sample_id,
        type=sample_type,  # type: ignore[arg-type]
        query=_require(obj, "query", str, where),
        goldens=_goldens(obj, sample_type, where),
        funcs=_funcs(obj, planning, where),
        prompts=_string_map(obj, "prompt_input", where, required=False),
        memory=_require(obj, "memory", (str, type(None)), where, default="") or "",
        memory_last_task=_last_task(obj, sample_type == "reflextion", where),
        templates=_templates(obj, where),
        memory_sections=_string_map(obj, "memory_sections", where, required=False),
        lang=_require(obj, "lang", (str, type(None)), where, default=None),
        query_id=_optional_text(obj.get("query_id")),
        raw=obj,
        line=where.line,
    )
    if sample_type == "profile" and sample.prompts and PROFILE_KEY not in sample.prompts:
        raise where.error("prompt_input", f"a profile sample's prompt_input needs the key "
                          f"{PROFILE_KEY!r}")
    if with_prediction:
        sample.prediction = _prediction(obj, sample_type, where)
    return sample


def _optional_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _prediction(obj: Mapping[str, Any], sample_type: str,
                where: SourceLine) -> str | dict[str, Any]:
    if "model_predict" not in obj:
        raise where.error("model_predict", "missing (a prediction line repeats its benchmark "
                          "line and adds model_predict)")
    value = obj["model_predict"]
    if sample_type == "profile":
        if not isinstance(value, str):
            raise where.error("model_predict", f"a profile prediction must be a string, got "
                              f"{_type_name(value)}")
        return value
    if not isinstance(value, dict) or not value:
        raise where.error("model_predict", "must be a non-empty object: template key -> answer")
    for key, answer in value.items():
        allowed = (str, dict) if sample_type == "conclusion" else (str,)
        if not isinstance(answer, allowed):
            raise where.error(f"model_predict.{key}",
                              f"must be a string, got {_type_name(answer)}")
    return value


def read_jsonl(path: str | Path) -> Iterable[tuple[int, Any]]:
    """(line number, decoded object) for every non-blank line; bad JSON names the line."""
    path = Path(path)
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError:
        raise KAgentBenchFormatError(f"{path}: file not found") from None
    with handle:
        for number, text in enumerate(handle, 1):
            if not text.strip():
                continue
            try:
                yield number, json.loads(text)
            except json.JSONDecodeError as exc:
                raise KAgentBenchFormatError(f"{path}:{number}: not valid JSON: {exc}") from None
            except UnicodeDecodeError as exc:
                raise KAgentBenchFormatError(f"{path}:{number}: not UTF-8: {exc}") from None


def load_benchmark(path: str | Path, *, with_predictions: bool = False) -> BenchmarkFile:
    """Read a KAgentBench benchmark (or, ``with_predictions``, prediction) JSONL file."""
    by_key: dict[tuple[str, Any], BenchSample] = {}
    duplicates = 0
    for number, obj in read_jsonl(path):
        sample = parse_sample(obj, SourceLine(str(path), number), with_prediction=with_predictions)
        if sample.key in by_key:
            duplicates += 1
            del by_key[sample.key]  # the later line counts, at its own place in the order
        by_key[sample.key] = sample
    if not by_key:
        raise KAgentBenchFormatError(f"{path}: no samples")
    return BenchmarkFile(str(path), list(by_key.values()), duplicates)


def load_predictions(bench_path: str | Path, predictions_path: str | Path
                     ) -> tuple[BenchmarkFile, BenchmarkFile]:
    """The benchmark and its predictions, checked to cover the same samples with the same
    template keys (a prediction may leave a template out; it cannot add one)."""
    bench = load_benchmark(bench_path)
    predictions = load_benchmark(predictions_path, with_predictions=True)
    golden = {s.key: s for s in bench.samples}
    seen = set()
    for sample in predictions.samples:
        where = SourceLine(str(predictions_path), sample.line)
        if sample.key not in golden:
            raise where.error("id", f"{sample.type} sample {sample.id!r} is not in {bench_path}")
        seen.add(sample.key)
        prompts = golden[sample.key].prompts
        if isinstance(sample.prediction, dict) and prompts:
            extra = [k for k in sample.prediction if k not in prompts]
            if extra:
                raise where.error("model_predict", f"template key(s) {extra} are not in the "
                                  f"benchmark sample's prompt_input ({sorted(prompts)})")
    missing = [s for s in bench.samples if s.key not in seen]
    if missing:
        first = missing[0]
        raise KAgentBenchFormatError(
            f"{predictions_path}: {len(missing)} benchmark sample(s) have no prediction, the "
            f"first: {first.type} {first.id!r} ({bench_path}:{first.line})")
    return bench, predictions


def prediction_line(sample: BenchSample, prediction: str | dict[str, str]) -> dict[str, Any]:
    """The official prediction line: the benchmark line as read, plus ``model_predict``."""
    return {**sample.raw, "model_predict": prediction}


def write_jsonl(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
