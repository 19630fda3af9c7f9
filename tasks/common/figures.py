"""PNG figures that stages publish beside their tables (histograms, curves, grouped bars)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def png_figure(path: Path, *, size: tuple[float, float] = (7, 4), panels: int | None = None,
               title: str = "", xlabel: str = "", ylabel: str = "") -> Iterator[Any]:
    """Yield the axes to draw on (a list of ``panels`` stacked axes when ``panels`` is given), then
    write ``path`` as a PNG when the block ends without error; the figure is closed either way.

    Matplotlib runs headless (the Agg backend): stages draw inside flows and workers that have
    no display. ``title`` and the axis labels apply to a single axes, with a light grid.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(panels or 1, 1, figsize=size, dpi=110, squeeze=False)
    try:
        if panels is None:
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
