"""What a run leaves behind: metrics.jsonl, TensorBoard events, PNG curves, final/ and report.json."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitkit.data import Source
from vitkit.evaluation.confusion import plot_confusion
from vitkit.flops import count_parameters
from vitkit.recipe.run_config import RunConfig
from vitkit.shutdown import bounded
from vitkit.storage import FINAL_DIR, atomic_write, atomic_write_text, save_pretrained

METRICS_NAME = "metrics.jsonl"
REPORT_NAME = "report.json"
CURVES_NAME = "curves.png"
CONFUSION_NAME = "confusion.png"
TENSORBOARD_DIR = "tensorboard"
TOP1_NAMES = {"test_top1": "test top-1", "val_top1": "validation top-1"}  # data.val_split adds the second
FEWSHOT_KEY = re.compile(r"fewshot_(\d+)shot")  # the mean over seeds; FewShotEvaluator also logs its _std


class MetricsLog:
    """Append-only metrics (one JSON object per line, each with its `step`) mirrored to TensorBoard.

    On resume from checkpoint step S the records after S (written by the killed run) are dropped, and TensorBoard
    purges its events after S, so the logs equal those of an uninterrupted run. A run that starts from step 0
    (new, or restarted by torchrun before its first checkpoint) starts with no records at all.
    """

    def __init__(self, run_dir: str | os.PathLike, resume_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.path = Path(run_dir) / METRICS_NAME
        if resume_step is not None and self.path.is_file():
            kept = [r for r in read_metrics(run_dir) if r["step"] <= resume_step]
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        elif resume_step is None:
            self.path.unlink(missing_ok=True)
            shutil.rmtree(Path(run_dir) / TENSORBOARD_DIR, ignore_errors=True)
        purge = resume_step + 1 if resume_step is not None else None
        self.writer = SummaryWriter(str(Path(run_dir) / TENSORBOARD_DIR), purge_step=purge)
        self.file = self.path.open("a")

    def log(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        for name, value in record.items():
            if name != "step" and isinstance(value, (int, float)):
                self.writer.add_scalar(name, value, record["step"])

    def flush(self) -> None:
        """Make every record up to a checkpoint durable before the checkpoint claims that step."""
        self.file.flush()
        self.writer.flush()

    def close(self) -> None:
        """metrics.jsonl first (flushed and closed at once), then TensorBoard's writer, whose close waits on its
        writing thread: for at most CLOSE_SECONDS."""
        self.file.close()
        bounded("the TensorBoard writer", self.writer.close)


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """metrics.jsonl as a list of dicts; a line cut off by a kill is ignored."""
    path = Path(run_dir) / METRICS_NAME
    records = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def loss_summary(records: list[dict[str, Any]]) -> dict[str, float]:
    """Mean training loss over the first and the last 10% of steps (at least one step each)."""
    losses = [r["train_loss"] for r in sorted(records, key=lambda r: r["step"]) if "train_loss" in r]
    if not losses:
        return {}
    n = max(1, len(losses) // 10)
    return {"train_loss_first": sum(losses[:n]) / n, "train_loss_last": sum(losses[-n:]) / n}


def accuracy_names(record: dict[str, Any]) -> dict[str, str]:
    """{key: label} of the accuracies in a metrics record: test and validation top-1 (classification), k-shot
    means."""
    names = {key: label for key, label in TOP1_NAMES.items() if key in record}
    return names | {key: f"{m[1]}-shot" for key in record if (m := FEWSHOT_KEY.fullmatch(key))}


def format_metrics(record: dict[str, Any]) -> str:
    """The evaluations of a metrics record or report in one line: top-1/top-5, MPP test loss, few-shot accuracy."""
    parts = []
    if "test_top1" in record:
        parts.append(f"test top-1 {100 * record['test_top1']:.2f}%  top-5 {100 * record['test_top5']:.2f}%")
    if "val_top1" in record:
        parts.append(f"validation top-1 {100 * record['val_top1']:.2f}%")
    if "test_mpp_loss" in record:
        parts.append(f"MPP test loss {record['test_mpp_loss']:.4f}")
    names = accuracy_names(record).items()
    shots = [f"{label} {100 * record[key]:.2f}%" for key, label in names if key not in TOP1_NAMES]
    if shots:
        parts.append("few-shot " + "  ".join(shots))
    return "; ".join(parts)


def count_skipped(lines: list[str]) -> list[dict[str, Any]]:
    """Each skipped image once, in the order first met: {"image": its one-line error, "times": how often met}."""
    counts: dict[str, int] = {}
    for line in lines:
        counts[line] = counts.get(line, 0) + 1
    return [{"image": line, "times": times} for line, times in counts.items()]


def write_report(run_dir: str | os.PathLike, report: dict[str, Any]) -> Path:
    path = Path(run_dir) / REPORT_NAME
    atomic_write_text(path, json.dumps(report, indent=2) + "\n")
    return path


def write_curves(run_dir: str | os.PathLike) -> Path:
    """Training loss per step and test accuracies (top-1, few-shot) against wall time, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    train = [r for r in records if "train_loss" in r]
    evals = [r for r in records if "wall_seconds" in r]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    steps, losses = [r["step"] for r in train], [r["train_loss"] for r in train]
    ax_loss.plot(steps, losses, lw=0.6, alpha=0.5, label="per step")
    window = max(1, len(train) // 50)
    smooth = torch.tensor(losses).unfold(0, window, 1).mean(1).tolist() if len(train) >= window else []
    ax_loss.plot(steps[window - 1 :], smooth, lw=1.5, label=f"mean of {window}")
    ax_loss.set(xlabel="step", ylabel="training loss", title="training loss")
    ax_loss.legend()
    names = {key: label for r in evals for key, label in accuracy_names(r).items()}
    for key, label in names.items():
        points = [(r["wall_seconds"] / 60, 100 * r[key]) for r in evals if key in r]
        ax_acc.plot(*zip(*points, strict=True), "o-", label=label)
    if names:
        ax_acc.legend()
    ax_acc.set(xlabel="wall time (minutes)", ylabel="accuracy (%)", title="accuracy vs. wall time")
    ax_acc.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(run_dir) / CURVES_NAME
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return path


def finish(
    run_dir: Path,
    config: RunConfig,
    model: nn.Module,
    summary: dict[str, Any],
    confusion: torch.Tensor | None,
    train_set: Source,
    test_set: Source,
    train_seconds: float,
) -> dict[str, Any]:
    """Write final/ (what vitkit.load_weights(run_dir) loads), the figures and report.json; returns the report.

    `summary` holds the final evaluations, steps, world_size and wall_seconds. A classification run reports
    test_top1/top5/loss and draws the confusion matrix; an MPP run (no classifier) reports test_mpp_loss and has
    neither test_top1 nor a confusion matrix. Few-shot runs add fewshot_{k}shot (and _std).
    """
    save_pretrained(model, run_dir / FINAL_DIR)
    write_curves(run_dir)
    if confusion is not None:
        plot_confusion(confusion, test_set.classes, run_dir / CONFUSION_NAME, test_set.description)
    train = config.train
    summary = {
        **summary,
        "objective": train.objective,
        "images_per_second": train.steps * train.batch_size / max(train_seconds, 1e-9),
        "train_seconds": train_seconds,
        **loss_summary(read_metrics(run_dir)),
        "epochs": train.steps * train.batch_size / len(train_set),
        "parameters": count_parameters(model),
        "ema": bool(train.ema_decay),
        "train_data": train_set.description,
        "test_data": test_set.description,
        "run_dir": str(run_dir),
    }
    write_report(run_dir, summary)
    return summary
