"""The dataset card (README.md in the ``sft_dataset`` version's payload files), from the build's
statistics: sources, counts, the mixing ratio achieved, dedup and decontamination, the audit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentune.tasks.build_dataset.stage import SPLITS
from agentune.tasks.common.figures import png_figure

PNG = "rows.png"
"""The figure beside the card: rows by kind, derivation and language."""


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
        "chat template. `kind` is the scenario kind a row acts out; `derivation` says how it "
        "was made (`none`: as verified) and `derived_from` names the row it was made from.", "",
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
    for name in ("source", "task_type", "template_source", "lang", "kind", "derivation"):
        lines += _counts_table(name, counts[name])
    lines += [f"![rows by kind, derivation and language]({PNG})", ""]
    return lines


def _shares(label: str, shares: Mapping[str, Any]) -> str:
    return (f"{label}: {shares['calling_none']} of {shares['offering_tools']} rows that offer "
            f"tools call none ({shares['calling_none_share']}); in "
            f"{shares['first_called_first_offered']} of {shares['calling']} calling rows the "
            f"first tool called is the first offered ({shares['first_called_first_offered_share']}).")


def _derivations(stats: Mapping[str, Any]) -> list[str]:
    derived = stats["derivations"]
    lines = ["## Derivations", ""]
    if "note" in derived:
        return lines + [f"Derived rows: {derived['note']}.", ""]
    settings = derived["settings"]
    lines += [
        "Rows made from the train split's rows (never from val or test), seeded, each naming "
        "its source in `derived_from`: `shuffled` (the offer in another order, the calls "
        f"unchanged; {settings['orders']} per calling row), `flip` (the tools a calling row "
        "needs replaced in the offer by other tools, the answer a decline), `general_tools` "
        f"({settings['general_tools']:.0%} of the general rows offered tools, the answer "
        f"unchanged), `masked` (tool and parameter names replaced; "
        f"{'on' if settings['mask_names'] else 'off'}). Each is verified (a no-call row by the "
        "verifier as an `irrelevant` or `no_tool` scenario) and audited; one that fails is in "
        "the rejects.", ""]
    lines += _table(["derivation", "made", "kept"],
                    [[d, n, derived["kept"][d]] for d, n in derived["made"].items()])
    lines += [f"Relevance flips fill the train rows that call nothing up to "
              f"{settings['no_call_share']:.0%} of those offering tools: {derived['flips_wanted']} "
              f"wanted." + (" **Too few calling rows (or replacement tools) to reach it.**"
                            if derived["flips_short"] else ""), "",
              _shares("Train split as verified", derived["train_before"]), "",
              _shares("Train split with the derived rows", derived["train_after"]), ""]
    return lines


def plot_rows(stats: Mapping[str, Any], path: Path, *, title: str) -> Path:
    """Rows by kind, by derivation and by language, one panel each, as a PNG."""
    counts = stats["counts"]
    with png_figure(path, size=(7, 7.5), panels=3) as axes:
        for ax, name in zip(axes, ("kind", "derivation", "lang"), strict=True):
            items = sorted(counts[name].items())
            ax.barh([k for k, _ in items], [v for _, v in items], color="#4c72b0")
            ax.set(title=f"{title}: rows by {name}" if name == "kind" else f"rows by {name}",
                   xlabel="rows")
            ax.grid(alpha=0.3, axis="x")
    return path


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
    for section in (_mixing, _derivations, _dedup, _decontamination, _audit, _rejects):
        lines += section(stats)
    return "\n".join(lines) + "\n"
