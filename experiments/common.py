"""What the experiments share: running vitkit once per run directory, the machine line, tables and figures."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import torch

from vitkit import cli
from vitkit.recipe.run_config import RECIPE_NAME
from vitkit.training.report import REPORT_NAME, read_metrics

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")  # what decides CPU speed and bf16 here
CONFIGS = Path(__file__).resolve().parent.parent / "configs"
TINY_VIT = ("model.hidden_size=32", "model.depth=1", "model.num_heads=2", "model.mlp_dim=64")
TINY_RUN = ("train.batch_size=32", "train.log_every=1")  # with --tiny, for every family


@dataclass(frozen=True)
class Family:
    """A model family: its recipe in configs/ (all three share data, augmentation, optimizer and processes)
    and, for `--tiny`, overrides that shrink it to a few thousand parameters."""

    name: str
    recipe: str
    tiny: tuple[str, ...]


VIT, RESNET, HYBRID = (
    Family("ViT", "fashion_mnist_vit.toml", (*TINY_VIT, "model.patch_size=7")),
    Family("ResNet (BiT)", "fashion_mnist_resnet.toml", ("model.layers=[1]",)),
    Family("hybrid R50+ViT", "fashion_mnist_hybrid.toml", TINY_VIT),
)


def parser(description: str, default_out: str) -> argparse.ArgumentParser:
    """The options every experiment takes: where to write, the budget scale, tiny models (plumbing checks)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", default=default_out, help=f"experiment directory (default {default_out})")
    p.add_argument(
        "--steps-scale",
        type=float,
        default=1.0,
        help="multiply every run's steps (e.g. 0.1: a reduced run, whose results are not the experiment's)",
    )
    p.add_argument("--processes", type=int, default=2, help="train.processes of every run (default 2)")
    p.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="train.precision of every run (default auto, which each run decides for itself)",
    )
    p.add_argument(
        "--tiny",
        action="store_true",
        help="tiny models on whatever data is found: plumbing checks in seconds; the numbers mean nothing",
    )
    return p


def scaled(steps: int, scale: float) -> int:
    """`steps` times the budget scale, at least 2."""
    return max(2, round(steps * scale))


def run_vitkit(command: str, out: Path, args: Sequence[str]) -> dict[str, Any]:
    """`vitkit <command> --out <out> <args>` unless `out` already holds its report (a stopped run is resumed);
    returns its report.json."""
    report = out / REPORT_NAME
    if not report.is_file():
        resume = ["--resume"] if (out / RECIPE_NAME).is_file() else []
        vitkit_command([command, "--out", str(out), *args, *resume], report)
    return json.loads(report.read_text())


def vitkit_command(argv: list[str], result: Path) -> None:
    """`vitkit <argv>`, printed first so that every run can be made again by hand; an error unless it exits 0
    and leaves `result` behind."""
    print(f"$ vitkit {shlex.join(argv)}", flush=True)
    code = cli.main(argv)
    if code or not result.is_file():
        raise RuntimeError(f"`vitkit {shlex.join(argv)}` failed (exit code {code}); see its output above")


def machine() -> str:
    """The CPU model, the flags that matter here, the cores and the torch version, stated with each result."""
    model, flags = platform.processor() or platform.machine(), set()
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []:
        name, _, value = line.partition(":")
        if name.strip() == "model name":
            model = value.strip()
        elif name.strip() == "flags":
            flags = set(value.split())
    present = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in CPU_FLAGS)
    gpu = f"; GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"CPU {model} ({present}), {os.cpu_count()} cores{gpu}; torch {torch.__version__}"


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def percent(values: Sequence[float]) -> str:
    """Fractions as 'mean%' or 'mean ± std%' over seeds (two decimals, as the run reports are read)."""
    mean, std = mean_std([100 * v for v in values])
    return f"{mean:.2f}%" if len(values) == 1 else f"{mean:.2f} ± {std:.2f}%"


def plot_spread(ax: plt.Axes, x: Sequence[float], samples: Sequence[Sequence[float]], label: str) -> None:
    """A line through the means of `samples` (one sequence of seeds per x) with their sample std as error bars."""
    stats = [mean_std(values) for values in samples]
    ax.errorbar(x, [m for m, _ in stats], yerr=[s for _, s in stats], marker="o", capsize=3, label=label)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; numbers right-aligned."""
    align = ["---:" if rows and isinstance(rows[0][i], (int, float)) else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def evaluations(run_dir: Path, key: str) -> list[tuple[float, float]]:
    """(minutes of engine wall time, accuracy %) of every evaluation of `key` in a run's metrics.jsonl."""
    records = read_metrics(run_dir)
    return [(r["wall_seconds"] / 60, 100 * r[key]) for r in records if key in r and "wall_seconds" in r]


def write_reports(out: Path, path: Path) -> None:
    """One JSON file of every run directory's report.json under `out` and every JSON file in `out` that is not
    itself such a bundle (*_reports.json)."""
    bundle = {
        "runs": {
            report.parent.name: json.loads(report.read_text())
            for report in sorted(out.glob(f"*/{REPORT_NAME}"))
        },
        "files": {
            f.name: json.loads(f.read_text())
            for f in sorted(out.glob("*.json"))
            if not f.name.endswith("_reports.json")
        },
    }
    path.write_text(json.dumps(bundle, indent=1) + "\n")


def write_results(
    out: Path,
    name: str,
    title: str,
    table: tuple[Sequence[str], Sequence[Sequence[Any]]],
    figure: plt.Figure,
    notes: str = "",
) -> Path:
    """Write out/<name>.md (title, machine, table, notes), out/<name>.png and out/<name>_reports.json (every
    run's report.json and the experiment's own JSON results: what backs each number, small enough to keep with
    the docs); print the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    write_reports(out, out / f"{name}_reports.json")
    png = out / f"{name}.png"
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    plt.close(figure)
    text = f"## {title}\n\n{machine()}\n\n{markdown_table(*table)}\n" + (f"\n{notes}\n" if notes else "")
    text += f"\n![{title}]({png.name})\n"
    path = out / f"{name}.md"
    path.write_text(text)
    print(f"\n{text}\ntable: {path}\nfigure: {png}")
    return path
