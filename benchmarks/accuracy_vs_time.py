"""Test top-1 against wall time for several run directories in one figure, and the same points as a Markdown table.

    python benchmarks/accuracy_vs_time.py runs/fmnist_vit runs/fmnist_resnet --labels ViT,ResNet \
        --target 91 --budget 30 --out docs/figures/results/accuracy_vs_time.png

Reads each run's metrics.jsonl (the periodic and final evaluations, with the engine's wall clock).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from vitkit.training.report import read_metrics


def evaluations(run: str) -> list[tuple[float, float]]:
    """(minutes, test top-1 %) at every evaluation of a run."""
    return [(r["wall_seconds"] / 60, 100 * r["test_top1"]) for r in read_metrics(run) if "test_top1" in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories")
    parser.add_argument("--labels", help="comma-separated legend labels (default: the directory names)")
    parser.add_argument("--target", type=float, default=None, help="accuracy target (%%), drawn as a line")
    parser.add_argument(
        "--budget", type=float, default=None, help="wall-clock budget (minutes), drawn as a line"
    )
    parser.add_argument("--out", required=True, help="PNG to write")
    args = parser.parse_args()
    labels = args.labels.split(",") if args.labels else [Path(run).name for run in args.runs]
    if len(labels) != len(args.runs):
        parser.error(f"--labels has {len(labels)} names for {len(args.runs)} runs")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run, label in zip(args.runs, labels, strict=True):
        points = evaluations(run)
        ax.plot(
            *zip(*points, strict=True),
            "o-",
            label=f"{label}: {points[-1][1]:.2f}% at {points[-1][0]:.1f} min",
        )
        print(f"\n| {label}: minutes | test top-1 |\n| ---: | ---: |")
        print("\n".join(f"| {m:.1f} | {a:.2f}% |" for m, a in points))
    if args.target is not None:
        ax.axhline(args.target, color="grey", ls="--", lw=1, label=f"target {args.target:g}%")
    if args.budget is not None:
        ax.axvline(args.budget, color="grey", ls=":", lw=1, label=f"budget {args.budget:g} min")
    ax.set(
        xlabel="wall time (minutes)",
        ylabel="test top-1 (%)",
        title="Fashion-MNIST test accuracy vs. wall time",
    )
    ax.set_ylim(bottom=max(ax.get_ylim()[0], 70))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"\nfigure: {args.out}")


if __name__ == "__main__":
    main()
