"""The confusion matrix of an evaluation drawn as a PNG, for `vitkit eval` and a training run's report."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from vitkit.data.decode import printable
from vitkit.storage import atomic_write


def plot_confusion(confusion: torch.Tensor, classes: list[str], path: str | os.PathLike, title: str) -> Path:
    """A row-normalised confusion matrix (rows: true class) as PNG, counts annotated when there are few classes."""
    from matplotlib.figure import Figure  # no pyplot: no global figure state, and a faster import

    k = len(classes)
    # Names users control, drawn as they are: never parsed as mathtext, never a surrogate the font cannot take.
    classes, title = [printable(c) for c in classes], printable(title)
    rates = confusion.double() / confusion.sum(1, keepdim=True).clamp(min=1)
    size = min(4 + 0.5 * k, 20)
    fig = Figure(figsize=(size, size))
    ax = fig.subplots()
    ax.imshow(rates.numpy(), cmap="Blues", vmin=0, vmax=1)
    if k <= 20:
        ax.set_xticks(range(k), classes, rotation=45, ha="right", parse_math=False)
        ax.set_yticks(range(k), classes, parse_math=False)
        for i in range(k):
            for j in range(k):
                color = "white" if rates[i, j] > 0.5 else "black"
                ax.text(j, i, str(int(confusion[i, j])), ha="center", va="center", fontsize=7, color=color)
    ax.set(xlabel="predicted", ylabel="true")
    ax.set_title(title, parse_math=False)
    fig.tight_layout()
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    return path
