"""PNG figures that stages publish beside their tables (histograms, curves, grouped bars)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def png_figure(path: Path, *, size: tuple[float, float] = (7, 4), panels: int = 1,
               title: str = "", xlabel: str = "", ylabel: str = "") -> Iterator[Any]:
    """Yield the axes to draw on (a list of ``panels`` stacked axes when more than one), then
    write ``path`` as a PNG when the block ends without error; the figure is closed either way.

    Matplotlib runs headless (the Agg backend): stages draw inside flows and workers that have
    no display. ``title`` and the axis labels apply to a single panel, with a light grid.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(panels, 1, figsize=size, dpi=110, squeeze=False)
    try:
        if panels == 1:
            ax = axes[0, 0]
            ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
            ax.grid(alpha=0.3)
            yield ax
        else:
            yield list(axes[:, 0])
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
