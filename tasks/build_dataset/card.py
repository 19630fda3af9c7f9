"""The dataset card (README.md in the ``sft_dataset`` version's payload files), from the build's
statistics: sources, counts, the mixing ratio achieved, dedup and decontamination, the audit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentune.tasks.build_dataset.stage import SPLITS


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
    return lines + [""]


def _counts_table(title: str, counts: Mapping[str, int]) -> list[str]:
    return [f"**{title}**", ""] + _table([title, "rows"], sorted(counts.items()))


def _intro_and_counts(stats: Mapping[str, Any], title: str) -> list[str]:
    inputs, counts = stats["inputs"], stats["counts"]
    lines = [
        f"# {title}", "",
        "Supervised fine-tuning data for the agent model, built by agentune's `build_dataset` "
        "stage (Meta-Agent Tuning recipe): agent trajectories, deduplicated, decontaminated and "
        "split by query set, mixed with general SFT data against forgetting, audited with the "
        "student's tokenizer and chat template.", "",
        "## Layout", "",
        "One Parquet table (`part-*.parquet` in this version folder) with a `split` column "
        "(`train`, `val`, `test`). `messages` and `tools` are datasets `Json()` columns (OpenAI "
        "messages with assistant `tool_calls`, tool results; tool JSON schemas), `steps` the "
        "same sample as prompt/completion pairs in its agent template's own format (one pair "
        "for general rows). `source` is `agent` or `general`; `cluster_id` names the "
        "near-duplicate cluster a row represents; `n_tokens` is its length under the audit's "
        "chat template.", "",
        "```python",
        "import pandas as pd, datasets",
        "df = pd.read_parquet(VERSION_DIR)  # messages/tools as JSON text",
        'ds = datasets.load_dataset("parquet", data_dir=VERSION_DIR)["train"]  # Json decoded',
        'train = ds.filter(lambda r: r["split"] == "train")',
        "```", "",
        "## Sources", "",
        f"- trajectories: `{inputs['trajectories']}` ({inputs['trajectory_rows']} rows)",
        f"- general data: {', '.join(f'`{f}`' for f in inputs['general_files']) or 'none'} "
        f"({inputs['general_rows']} rows)",
        f"- benchmark queries decontaminated against: "
        f"{', '.join(f'`{f}`' for f in inputs['benchmark_files']) or 'none'}", "",
        "## Counts", "",
        f"{stats['rows']} rows.", "",
    ]
    split_rows = [[split] + [counts["split/source"].get(f"{split}/{src}", 0)
                             for src in ("agent", "general")] + [counts["sets"][split]]
                  for split in SPLITS]
    lines += _table(["split", "agent rows", "general rows", "query sets"], split_rows)
    for name in ("source", "task_type", "template_source", "lang"):
        lines += _counts_table(name, counts[name])
    return lines


def _mixing(stats: Mapping[str, Any]) -> list[str]:
    lines = ["## Mixing", ""]
    mixing = stats["mixing"]
    first = mixing[SPLITS[0]]
    lines += [f"Target agent : general = {first['target_ratio']} : 1 by {first['by']} "
              "(tokens: as the trainer sees them, truncated to max_length).", ""]
    lines += _table(
        ["split", "agent rows", "general rows", "ratio (samples)", "agent tokens",
         "general tokens", "ratio (tokens)", "general pool", "pool ran short"],
        [[split, m["agent_rows"], m["general_rows"], m["ratio_by_samples"], m["agent_tokens"],
          m["general_tokens"], m["ratio_by_tokens"], m["general_pool"], m["general_short"]]
         for split, m in mixing.items()])
    short = [split for split, m in mixing.items() if m["general_short"]]
    if short:
        lines += [f"**The general pool ran short in {', '.join(short)}**: every usable general row "
                  "of the split is in, and the ratio achieved is above the target. Add general "
                  "data or lower the ratio.", ""]
    coreset = stats["coreset"]
    if coreset.get("losses"):
        lines += [f"Losses for `{coreset['strategy']}`: {coreset['losses']}.", ""]
    if coreset.get("size"):
        lines += [f"Coreset cap: at most {coreset['size']} agent train rows, chosen by "
                  f"`{coreset['strategy']}` within task type x template source strata"
                  + (f" ({coreset['kept']} of {coreset['pool']} kept)." if "kept" in coreset
                     else " (not reached)."), ""]
    else:
        lines += [f"Rows are chosen from larger pools by `{coreset['strategy']}`, stratified; "
                  "no coreset cap.", ""]
    return lines


def _dedup(stats: Mapping[str, Any]) -> list[str]:
    dedup = stats["dedup"]
    lines = ["## Dedup", ""]
    lines += _table(
        ["data", "in", "exact duplicates", "near duplicates", "kept",
         "clusters with duplicates", "largest cluster"],
        [[kind, d["input"], d["exact_duplicates"], d["near_duplicates"], d["kept"],
          d["clusters_with_duplicates"], d["largest_cluster"]] for kind, d in dedup.items()])
    agent_dedup = next(iter(dedup.values()))
    lines += [
        f"Exact: sha256 of the normalised serialisation of messages and tools. Near: MinHash LSH "
        f"over user and assistant content (tool schemas and system prompts left out), word "
        f"{agent_dedup['word_ngram']}-grams for Latin text and character "
        f"{agent_dedup['char_ngram']}-grams for Chinese, {agent_dedup['num_perm']} permutations, "
        f"{agent_dedup['lsh_bands']} bands x {agent_dedup['lsh_rows']} rows (tuned for recall at "
        f"the threshold), every candidate verified by exact Jaccard >= "
        f"{agent_dedup['threshold']}; index in {agent_dedup['index']}. One row kept per "
        "cluster: the best judge score, then the shortest.", "",
    ]
    return lines


def _decontamination(stats: Mapping[str, Any]) -> list[str]:
    decontam = stats["decontamination"]
    lines = ["## Decontamination", ""]
    if decontam.get("enabled"):
        lines += [f"{decontam['contaminated']} of {decontam['checked']} train/val rows dropped: "
                  f"their query reached character {decontam['ngram']}-gram Jaccard >= "
                  f"{decontam['threshold']} with one of {decontam['eval_queries']} evaluation "
                  f"queries (the test split's, plus {decontam['benchmark_queries']} from "
                  "benchmark files).", ""]
    else:
        lines += ["Disabled.", ""]
    return lines


def _audit(stats: Mapping[str, Any]) -> list[str]:
    audit = stats["audit"]
    lines = ["## Audit", "",
              f"Tokenizer of `{audit['tokenizer']}`, chat template: {audit['chat_template']}; "
              f"max_length {audit['max_length']} (rows over it: {audit['overlength']}). "
              f"Rendered in the `{audit.get('sample_form', 'messages')}` form, as trained"
              + (" (an agent row is one example per step; lengths are per example)"
                 if audit.get("sample_form") == "steps" else "")
              + ". Trained tokens are the assistant tokens (the template's generation blocks) "
              "within max_length.", ""]
    dropped = audit["dropped"]
    lines += [f"Dropped before mixing: {dropped.get('no_trainable_tokens', 0)} rows with no "
              f"trainable token, {dropped.get('over_max_length', 0)} rows over max_length.", ""]
    keys = [k for k in audit if "/" in k or k == "all"]
    lines += _table(
        ["rows", "n", "tokens", "trained fraction", "min", "p50", "p90", "p99", "max",
         "over max_length", "no trainable token"],
        [[k, a["rows"], a.get("tokens"), a.get("trained_fraction"), a.get("length_min"),
          a.get("length_p50"), a.get("length_p90"), a.get("length_p99"), a.get("length_max"),
          a.get("over_max_length"), a.get("no_trainable_token")] for k in keys
         for a in [audit[k]]])
    histogram = audit["all"].get("histogram", {})
    if histogram:
        lines += ["Token length distribution (all rows):", ""]
        lines += _table(["tokens", "rows"], list(histogram.items()))
    return lines


def _rejects(stats: Mapping[str, Any]) -> list[str]:
    lines = ["## Rejects", ""]
    lines += _table(["reason", "rows"], list(stats["rejects"].items())) if stats["rejects"] \
        else ["None.", ""]
    lines += ["Every dropped row is in this build's `rejects` version with its reason."]
    return lines



def render_card(stats: Mapping[str, Any], *, title: str = "sft_dataset") -> str:
    """The card's markdown: what the data is, how to read it, and each step's figures."""
    lines = _intro_and_counts(stats, title)
    for section in (_mixing, _dedup, _decontamination, _audit, _rejects):
        lines += section(stats)
    return "\n".join(lines) + "\n"
