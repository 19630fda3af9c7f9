"""Decontamination: drop training rows whose query is a near duplicate of an evaluation query.

Evaluation queries are the test split's own queries and those of any benchmark file the user
names (a KAgentBench ``benchmark_eval.jsonl``: one JSON object per line with a ``query``). Queries
are short, so they are compared as character n-grams (``near_dedup``'s default shingling, good
for Chinese), every LSH candidate verified by exact Jaccard.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentune.tasks.build_dataset.samples import Sample
from agentune.tasks.common.input_files import InputError
from agentune.tasks.common.near_dedup import NearDupIndex
from agentune.tasks.common.rejects import Reject


@dataclass(frozen=True)
class EvalQuery:
    key: str
    """Where it comes from: ``test:<sample id>`` or ``<file name>:line N``."""
    text: str


def benchmark_queries(path: str | Path, field_name: str = "query") -> list[EvalQuery]:
    """The queries of a benchmark JSONL file. A row without the field, or with a non-string
    value, is an error naming the file, line and field; empty queries are skipped."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, None, None, "benchmark file not found")
    found = []
    with path.open(encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"line {lineno}", None,
                                 f"not valid JSON: {exc.msg}") from None
            if not isinstance(record, dict) or field_name not in record:
                raise InputError(path, f"line {lineno}", field_name, "missing")
            if not isinstance(record[field_name], str):
                raise InputError(path, f"line {lineno}", field_name,
                                 f"must be a string, got {type(record[field_name]).__name__}")
            if record[field_name].strip():
                found.append(EvalQuery(f"{path.name}:line {lineno}", record[field_name]))
    return found


@dataclass
class DecontaminationOutcome:
    kept: list[Sample]
    rejects: list[Reject] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


def decontaminate(
    samples: Sequence[Sample], eval_queries: Iterable[EvalQuery], *, threshold: float,
    ngram: int, stage: str, num_perm: int = 128, min_recall: float = 0.99,
) -> DecontaminationOutcome:
    """Keep the samples whose query is not a near duplicate (>= threshold) of any eval query."""
    index = NearDupIndex(threshold, num_perm=num_perm, ngram=ngram, min_recall=min_recall)
    n_eval = 0
    for query in eval_queries:
        if query.key not in index:
            index.add(query.key, query.text)
            n_eval += 1
    kept, rejects = [], []
    for sample in samples:
        matches = index.query(sample.query)
        if matches:
            best = matches[0]
            rejects.append(Reject(stage, "contaminated", sample.id,
                                  f"query jaccard {best.similarity:.3f} with eval query "
                                  f"{best.key}"))
        else:
            kept.append(sample)
    return DecontaminationOutcome(kept, rejects, {
        "eval_queries": n_eval, "checked": len(samples), "contaminated": len(rejects),
        "threshold": threshold, "ngram": ngram,
    })
