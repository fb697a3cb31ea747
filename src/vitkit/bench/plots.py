"""Appendix D.5 figure in miniature: throughput and largest batch against input resolution."""

from __future__ import annotations

from pathlib import Path


def plot_resolution(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """Left: inference images/s against resolution; right: largest inference / training batch in the budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    has_memory = any("largest batch (inference)" in r for r in rows)
    fig, axes = plt.subplots(1, 2 if has_memory else 1, figsize=(12 if has_memory else 5, 4), squeeze=False)
    left = axes[0, 0]
    for i, name in enumerate(models):
        own = [r for r in rows if r["model"] == name]
        sizes = [r["resolution"] for r in own]
        left.plot(sizes, [r["images/s"] for r in own], "o-", color=f"C{i}", label=name)
        if has_memory:
            right = axes[0, 1]
            for use, style in (("inference", "o-"), ("training", "s--")):
                batches = [r[f"largest batch ({use})"] for r in own]
                right.plot(sizes, batches, style, color=f"C{i}", label=f"{name} {use}")
    left.set(xlabel="input size (px)", ylabel="images/s (inference)", yscale="log", title="Throughput")
    left.grid(True, which="both", alpha=0.3)
    left.legend()
    if has_memory:
        right = axes[0, 1]
        right.set(
            xlabel="input size (px)",
            ylabel="largest batch",
            yscale="log",
            title="Largest batch in the budget",
        )
        right.grid(True, which="both", alpha=0.3)
        right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
