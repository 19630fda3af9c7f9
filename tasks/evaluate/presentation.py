"""How the benchmarks' report sections show numbers: rates as percentages, and grouped bars (one
bar per model in each group) for their PNGs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def percent(value: float | None) -> str:
    """A 0-1 rate as x100 with one decimal; "-" where there is none."""
    return "-" if value is None else f"{100 * value:.1f}"


def grouped_bars(ax: Any, groups: Sequence[str], series: Mapping[str, Sequence[float]], *,
                 label_format: str, ylabel: str, title: str, rotation: int = 0) -> None:
    """One bar per series (model) in each group, each labelled with its value."""
    width = 0.8 / max(1, len(series))
    for i, (name, ys) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(groups))]
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, labels=[format(y, label_format) for y in ys], fontsize=7, padding=1)
    ax.set_xticks(range(len(groups)), groups, rotation=rotation)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="x", visible=False)
    ax.grid(axis="y", alpha=0.3)
