"""How many scenarios there are by environment x kind x language x split: the stage summary's
table and a PNG to read at a glance (a panel per split, a bar group per environment and
language, a bar per kind)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentune.tasks.common.figures import png_figure
from agentune.tasks.environments.scenarios import KINDS, SPLITS

AXES = ("environment", "kind", "lang", "split")


def count_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per environment, kind, language and split present, with its count."""
    counts = Counter(tuple(str(r[a]) for a in AXES) for r in rows)
    return [{**dict(zip(AXES, key, strict=True)), "scenarios": n}
            for key, n in sorted(counts.items())]


def plot_counts(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path:
    counts = count_rows(rows)
    splits = [s for s in SPLITS if any(c["split"] == s for c in counts)]
    kinds = [k for k in KINDS if any(c["kind"] == k for c in counts)]
    with png_figure(path, size=(10, 2.6 * max(1, len(splits))), panels=len(splits)) as axes:
        for ax, split in zip(axes, splits, strict=True):
            mine = [c for c in counts if c["split"] == split]
            groups = sorted({(c["environment"], c["lang"]) for c in mine})
            width = 0.8 / max(1, len(kinds))
            for i, kind in enumerate(kinds):
                heights = [sum(c["scenarios"] for c in mine if (c["environment"], c["lang"]) == g
                               and c["kind"] == kind) for g in groups]
                ax.bar([x + i * width for x in range(len(groups))], heights, width, label=kind)
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(groups))],
                          [f"{env}/{lang}" for env, lang in groups], fontsize=8)
            ax.set_title(f"{split}: {sum(c['scenarios'] for c in mine)} scenarios", fontsize=9)
            ax.set_ylabel("scenarios")
        axes[0].legend(fontsize=7, ncols=min(6, len(kinds)))
        axes[0].figure.suptitle(title, fontsize=10)
    return path
