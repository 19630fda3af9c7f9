"""KAgentBench's five dimensions and Overall, computed as the official evaluator computes them.

Per template answer (an *item*), against the sample's golden answers (max over goldens):

- Planning: ROUGE-L(golden thought, thought) x [tool == golden tool]; goldens whose thought or
  tool is ``"None"`` are skipped; 0 when none is left.
- Tool-use: [tool == golden tool] x argument score; goldens whose tool is ``"None"`` are skipped.
  The argument score is 1 when both argument objects are empty, 0 when the answer has none but the
  golden has some, else the mean over the golden's keys of ROUGE-L(golden value, answer value)
  (0 for a key the answer lacks; extra answer keys cost nothing; 0 when the golden has no keys).
- Reflection: (1 - p) x (0.3 x match x thought ROUGE-L + 0.7 x match x argument score), where
  p = 1 for a golden whose tool and arguments equal ``memory_last_task`` (repeating the failed
  step earns nothing). Goldens skipped as for Planning.
- Concluding: ROUGE-L against the golden answers, after the template's post-processing
  (:func:`agentune.tasks.evaluate.benchmarks.kagentbench.parsing.conclusion_text`); an empty answer scores 0.
- Profile: ROUGE-L against the golden answers; an empty answer scores 0.

A sample's score is the mean over its template answers (in the prediction's key order), a
dimension the mean over its samples, and Overall = 0.25 Planning + 0.35 Tool-use + 0.10
Reflection + 0.20 Concluding + 0.10 Profile. The sums run in the official script's order, so the
floats are the same ones.

Deliberate differences, each counted in :attr:`KAgentBenchResult.anomalies` (see
docs/KAGENTBENCH_SCORING.md):

- ``quirks="official"`` (default) reproduces the script's reuse of the previous template's parse
  for an empty ``ReACT`` answer or a key it does not know (``Kuaiagent``); where there is no
  previous template (the script crashes with an unbound variable) the answer reads as empty.
  ``quirks="fixed"`` parses an empty answer as empty and matches unknown keys to the known ones
  case-insensitively (an unknown key is then an error).
- Where the script crashes (no usable golden for a reflection or a concluding/profile sample; a
  dimension with no sample at all), the item scores 0 / the dimension is left out, and Overall is
  taken over the dimensions present with their weights renormalised (``partial``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentune.tasks.common.text_cleaning import detect_language
from agentune.tasks.evaluate.benchmarks.kagentbench.format import (
    BenchSample,
    Golden,
    KAgentBenchFormatError,
    load_predictions,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.parsing import (
    NONE,
    OFFICIAL_KEYS,
    ParserName,
    PlanReading,
    conclusion_text,
    read_plan,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.rouge import (
    TokenizerMode,
    resolve_tokenizer,
    similarity,
)

QuirkMode = Literal["official", "fixed"]
DIMENSIONS = ("planning", "tool_use", "reflection", "concluding", "profile")
WEIGHTS = {"planning": 0.25, "tool_use": 0.35, "reflection": 0.10, "concluding": 0.20,
           "profile": 0.10}
LABELS = {"planning": "Planning", "tool_use": "Tool-use", "reflection": "Reflection",
          "concluding": "Concluding", "profile": "Profile", "overall": "Overall"}
# What each sample type is scored on.
TYPE_DIMENSIONS = {"plantooluse": ("planning", "tool_use"), "reflextion": ("reflection",),
                   "conclusion": ("concluding",), "profile": ("profile",)}
SOURCE_UNSEEN = "unseen"


@dataclass(frozen=True)
class ScoringOptions:
    parser: ParserName = "official"
    quirks: QuirkMode = "official"
    tokenizer: TokenizerMode = "auto"


@dataclass
class ItemScore:
    """One template answer of one sample, with what it scored (None: not scored on that)."""

    sample: BenchSample
    key: str
    protocol: str | None
    answer: str
    """The raw answer (a concluding answer given as an object is its JSON text)."""
    template_group: str | None
    """``benchmark``, ``meta-agent`` or ``unseen`` (never trained on); None for profile."""
    lang: str
    reading: PlanReading | None = None
    scores: dict[str, float] = field(default_factory=dict)

    @property
    def group(self) -> str:
        """The query the item belongs to: steps of one query form one trajectory."""
        return self.sample.query_id or f"{self.sample.type}:{self.sample.id}"


@dataclass
class DimensionScores:
    values: dict[str, float | None]
    """Each dimension and ``overall`` (0-1), None where no sample has that dimension."""
    samples: dict[str, int]
    partial: bool = False
    """Overall covers only the dimensions present (weights renormalised)."""

    def percent(self) -> dict[str, float | None]:
        return {k: None if v is None else 100 * v for k, v in self.values.items()}


@dataclass
class KAgentBenchResult:
    items: list[ItemScore]
    scores: DimensionScores
    anomalies: dict[str, int]
    tokenizer: str
    options: ScoringOptions

    def summary(self) -> dict[str, Any]:
        return {
            **self.scores.values,
            "partial": self.scores.partial,
            "samples": self.scores.samples,
            "anomalies": self.anomalies,
            "tokenizer": self.tokenizer,
            "parser": self.options.parser,
            "quirks": self.options.quirks,
        }


# --------------------------------------------------------------------------- per-golden metrics


def argument_score(golden_args: Mapping[str, Any], args: Mapping[str, Any], mode: str) -> float:
    if not golden_args and not args:
        return 1.0
    if not args:
        return 0.0
    if not golden_args:
        return 0.0
    values = [similarity(value, args[key], mode) if key in args else 0.0  # type: ignore[arg-type]
              for key, value in golden_args.items()]
    return sum(values) / len(values)


def _usable(golden: Golden) -> bool:
    return golden.thought != NONE and golden.tool_name != NONE


def planning_score(goldens: Sequence[Golden], reading: PlanReading, mode: str) -> float:
    scores = [similarity(g.thought, reading.thought, mode)  # type: ignore[arg-type]
              if reading.tool_name == g.tool_name else 0.0
              for g in goldens if _usable(g)]
    return max(scores, default=0.0)


def tool_use_score(goldens: Sequence[Golden], reading: PlanReading, mode: str) -> float:
    scores = [argument_score(g.tool_args, reading.tool_args, mode)
              if reading.tool_name == g.tool_name else 0.0
              for g in goldens if g.tool_name != NONE]
    return max(scores, default=0.0)


def reflection_score(goldens: Sequence[Golden], reading: PlanReading,
                     last_task: tuple[Any, dict[str, Any]] | None, mode: str) -> float | None:
    """None when no golden is usable (the official script crashes there)."""
    scores = []
    for golden in goldens:
        if not _usable(golden):
            continue
        penalty = 1 if last_task is not None and last_task == (golden.tool_name,
                                                               golden.tool_args) else 0
        if reading.tool_name != golden.tool_name or penalty:
            scores.append(0.0)
            continue
        thought = similarity(golden.thought, reading.thought, mode)  # type: ignore[arg-type]
        args = argument_score(golden.tool_args, reading.tool_args, mode)
        tool_em = 1
        scores.append((1 - penalty) * (0.3 * tool_em * thought + 0.7 * tool_em * args))
    return max(scores) if scores else None


def answer_score(goldens: Sequence[Golden], answer: str, mode: str) -> float | None:
    """Max ROUGE-L of an answer against golden results; None when there are no goldens."""
    if answer == "":
        return 0.0
    if not goldens:
        return None
    return max(similarity(g.result, answer, mode) for g in goldens)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- items


def _template_group(sample: BenchSample, key: str) -> str:
    info = sample.templates.get(key)
    if info is None:
        return "benchmark" if key in OFFICIAL_KEYS else "unknown"
    return info.source if info.seen else SOURCE_UNSEEN


def sample_language(sample: BenchSample) -> str:
    lang = sample.lang or detect_language(sample.query)
    return lang if lang in ("zh", "en") else "other"


def template_protocol(sample: BenchSample, key: str, quirks: QuirkMode) -> str | None:
    """The output format a template key is read with; None for a key the official script does
    not know (with ``quirks="fixed"`` such a key is matched case-insensitively first)."""
    if key in sample.templates:
        return sample.templates[key].protocol
    if key in OFFICIAL_KEYS:
        return OFFICIAL_KEYS[key]
    if quirks == "fixed":
        folded = {k.casefold(): p for k, p in OFFICIAL_KEYS.items()}
        return folded.get(key.casefold())
    return None


def _answer_text(answer: Any) -> str:
    return json.dumps(answer, ensure_ascii=False) if isinstance(answer, dict) else answer


class _Scorer:
    def __init__(self, options: ScoringOptions, predictions_path: str) -> None:
        self.options = options
        self.mode = resolve_tokenizer(options.tokenizer)
        self.path = predictions_path
        self.anomalies: Counter[str] = Counter()

    def items(self, golden: BenchSample, predicted: BenchSample) -> list[ItemScore]:
        lang = sample_language(golden)
        if golden.type == "profile":
            answer = predicted.prediction if isinstance(predicted.prediction, str) else ""
            score = answer_score(golden.goldens, answer, self.mode)
            if score is None:
                self.anomalies["profile_without_golden"] += 1
            item = ItemScore(golden, "prompt", None, answer, None, lang,
                             scores={"profile": score or 0.0})
            return [item]
        assert isinstance(predicted.prediction, dict)
        if golden.type == "conclusion":
            return [self._conclusion(golden, key, answer, lang)
                    for key, answer in predicted.prediction.items()]
        return self._planning(golden, predicted.prediction, lang, predicted.line)

    def _conclusion(self, golden: BenchSample, key: str, answer: Any, lang: str) -> ItemScore:
        protocol = template_protocol(golden, key, self.options.quirks)
        text = _answer_text(answer)
        scored = (conclusion_text(protocol, answer, self.options.parser)
                  if isinstance(answer, str) else text)
        score = answer_score(golden.goldens, scored, self.mode)
        if score is None:
            self.anomalies["conclusion_without_golden"] += 1
        return ItemScore(golden, key, protocol, text, _template_group(golden, key), lang,
                         scores={"concluding": score or 0.0})

    def _planning(self, golden: BenchSample, answers: Mapping[str, str], lang: str,
                  line: int) -> list[ItemScore]:
        items = []
        previous: PlanReading | None = None
        for key, answer in answers.items():
            protocol = template_protocol(golden, key, self.options.quirks)
            reading = self._read(golden, key, protocol, answer, previous, line)
            previous = reading
            item = ItemScore(golden, key, protocol, answer, _template_group(golden, key), lang,
                             reading)
            if golden.type == "plantooluse":
                item.scores["planning"] = planning_score(golden.goldens, reading, self.mode)
                item.scores["tool_use"] = tool_use_score(golden.goldens, reading, self.mode)
            else:
                score = reflection_score(golden.goldens, reading, golden.memory_last_task,
                                         self.mode)
                if score is None:
                    self.anomalies["reflection_without_usable_golden"] += 1
                item.scores["reflection"] = score or 0.0
            items.append(item)
        return items

    def _read(self, golden: BenchSample, key: str, protocol: str | None, answer: str,
              previous: PlanReading | None, line: int) -> PlanReading:
        official_skip = protocol is None or (key == "ReACT" and answer == "")
        if self.options.quirks == "official" and official_skip:
            # The official script keeps the previous template's variables here.
            if previous is None:
                self.anomalies["unbound_parse_read_as_empty"] += 1
                return PlanReading()
            self.anomalies["previous_parse_reused"] += 1
            return previous
        if protocol is None:
            raise KAgentBenchFormatError(
                f"{self.path}:{line}: field 'model_predict.{key}': unknown template key "
                f"(known: {', '.join(OFFICIAL_KEYS)}, or keys the sample declares in "
                "'templates')")
        return read_plan(protocol, answer, golden.funcs, self.options.parser)


def score_samples(golden: Sequence[BenchSample], predicted: Sequence[BenchSample],
                  options: ScoringOptions = ScoringOptions(),
                  predictions_path: str = "<predictions>") -> KAgentBenchResult:
    """Score predictions (in their order) against the benchmark samples with the same keys."""
    by_key = {s.key: s for s in golden}
    scorer = _Scorer(options, predictions_path)
    items: list[ItemScore] = []
    for sample in predicted:
        items += scorer.items(by_key[sample.key], sample)
    return KAgentBenchResult(items, aggregate(items), dict(scorer.anomalies), scorer.mode,
                             options)


def score_files(bench_path: str | Path, predictions_path: str | Path,
                options: ScoringOptions = ScoringOptions()) -> KAgentBenchResult:
    bench, predictions = load_predictions(bench_path, predictions_path)
    return score_samples(bench.samples, predictions.samples, options, str(predictions_path))


# --------------------------------------------------------------------------- aggregation


def aggregate(items: Iterable[ItemScore],
              keep: Callable[[ItemScore], bool] | None = None) -> DimensionScores:
    """Dimension means over samples (each the mean over its kept items) and Overall."""
    per_sample: dict[tuple[str, Any], dict[str, list[float]]] = {}
    for item in items:
        if keep is not None and not keep(item):
            continue
        slot = per_sample.setdefault(item.sample.key, {})
        for dimension, value in item.scores.items():
            slot.setdefault(dimension, []).append(value)
    totals: dict[str, list[float]] = {d: [] for d in DIMENSIONS}
    for slot in per_sample.values():
        for dimension, values in slot.items():
            totals[dimension].append(sum(values) / len(values))
    values: dict[str, float | None] = {
        d: (sum(v) / len(v) if v else None) for d, v in totals.items()}
    overall, partial = overall_score(values)
    return DimensionScores({**values, "overall": overall},
                           {d: len(v) for d, v in totals.items()}, partial)


def overall_score(values: Mapping[str, float | None]) -> tuple[float | None, bool]:
    """The weighted sum, in the official order; over the present dimensions, renormalised,
    when some are missing (then flagged partial)."""
    if all(values[d] is not None for d in DIMENSIONS):
        return (0.25 * values["planning"] + 0.35 * values["tool_use"]  # type: ignore[operator]
                + 0.1 * values["reflection"] + 0.2 * values["concluding"]
                + 0.1 * values["profile"]), False
    present = [d for d in DIMENSIONS if values[d] is not None]
    if not present:
        return None, True
    weight = sum(WEIGHTS[d] for d in present)
    return sum(WEIGHTS[d] * values[d] for d in present) / weight, True  # type: ignore[operator]


def format_scores(scores: DimensionScores) -> str:
    """The six numbers x100 with two decimals, as the official script prints them."""
    names = [*DIMENSIONS, "overall"]
    header = "  ".join(f"{LABELS[n]:>10}" for n in names)
    row = "  ".join(f"{'-':>10}" if scores.values[n] is None else f"{100 * scores.values[n]:>10.2f}"
                    for n in names)
    note = "\n(Overall over the dimensions present, weights renormalised)" if scores.partial else ""
    return f"{header}\n{row}{note}"
