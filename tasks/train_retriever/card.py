"""The ``retriever`` version's card: what it was trained from, how, and how it retrieves."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentune.tasks.tool_retrieval.evaluation import retrieval_markdown

if TYPE_CHECKING:
    from agentune.tasks.train_retriever.stage import RetrieverPlan, TrainedRetriever


def render_card(*, plan: RetrieverPlan, trained: TrainedRetriever, version: str) -> str:
    s = plan.settings
    losses = [round(e["loss"], 4) for e in trained.log if "loss" in e]
    cross = sum(p.view == "en" for p in plan.pairs)
    lines = [
        f"# retriever@{version}", "",
        "A tool encoder for retrieving the right tools among thousands: requests and tool texts "
        "(name, description, parameters) embedded by one model, mean-pooled and L2-normalised, "
        "searched exactly in a FAISS flat inner-product index; agentune fuses it with BM25 by "
        "reciprocal rank (hybrid).", "",
        "Load it with `sentence_transformers.SentenceTransformer(\"<this folder>/__files__/"
        "encoder\")`.", "",
        "## Training", "",
        f"- base model: `{plan.base.version or plan.base.name}`",
        f"- scenarios: `{plan.scenarios}` (train split only); trajectories: "
        f"`{plan.trajectories or 'none'}`",
        f"- cases: {len(plan.train_cases)}; pairs (request, tool, BM25 hard negative): "
        f"{len(plan.pairs)}, of them {cross} cross-language (a Chinese request, the "
        "English-only tool text)",
        f"- left out as held-out leaks: {len(plan.rejects)}",
        f"- loss: MultipleNegativesRankingLoss (in-batch negatives + the hard negative), "
        f"scale {s.scale}; batch {s.batch_size}, lr {s.learning_rate}, epochs {s.epochs}, "
        f"max steps {s.max_steps or 'none'}, warmup {s.warmup_ratio}, seed {s.seed}",
        f"- loss per step: {losses}",
        f"- pairs whose positive scores above the hard negative: "
        f"{trained.accuracy_before:.3f} before, {trained.accuracy_after:.3f} after", "",
        "## Held-out retrieval (held-out and reserved scenarios, never trained on; catalog as "
        "written)", "",
        retrieval_markdown(trained.before, title="Before training"), "",
        retrieval_markdown(trained.after, title="After training"), "",
        "The evaluate stage adds the same table on a catalog grown with distractor tools.",
    ]
    return "\n".join(lines) + "\n"
