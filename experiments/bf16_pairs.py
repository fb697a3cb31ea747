"""Does training in bf16 cost accuracy on this CPU? Pairs of runs of one recipe, fp32 and bf16, one per seed.

Each pair trains the recipe twice with the same seed, in fp32 and in bf16, side by side (one thread each); both
are evaluated in fp32 on the test set. One pair says little (a run whose arithmetic differs at all takes another
path through training and ends up to half a point away), so the verdict is over seeds: the mean difference with
its standard error, the paired t-test and the Wilcoxon signed-rank test on the per-seed differences, and the
exact McNemar test of each pair.

    python -m experiments.bf16_pairs --out runs/bf16_pairs --seeds 20        # the default recipe, ~1 h here
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
from scipy.stats import ttest_rel, wilcoxon

import vitkit
from experiments.common import TINY_RUN, TINY_VIT, parser, write_results
from vitkit.data import load_dataset
from vitkit.evaluation.paired import paired_test, predictions
from vitkit.precision import choose_precision
from vitkit.training.report import REPORT_NAME

PRECISIONS = ("fp32", "bf16")


def train_pair(out: Path, seed: int, extra: list[str]) -> dict[str, Path]:
    """The fp32 and bf16 runs of `seed`, side by side in two processes (a finished run is read, not repeated)."""
    runs = {p: out / f"{p}_s{seed}" for p in PRECISIONS}
    started = []
    for precision, run in runs.items():
        if (run / REPORT_NAME).is_file():
            continue
        resume = ["--resume"] if run.is_dir() else []
        argv = ["train", "--out", str(run), "--precision", precision, f"train.seed={seed}", "train.threads=1"]
        command = [sys.executable, "-m", "vitkit.cli", *argv, *extra, *resume]
        print("$ vitkit " + " ".join(command[3:]), flush=True)
        started.append((run, subprocess.Popen(command, env=os.environ.copy())))
    for run, process in started:
        if process.wait() or not (run / REPORT_NAME).is_file():
            raise RuntimeError(f"the run {run} failed (exit code {process.returncode}); see its output above")
    return runs


def main(argv: list[str] | None = None) -> Path:
    p = parser(__doc__.splitlines()[0], "runs/bf16_pairs")
    p.add_argument("--seeds", type=int, default=20, help="pairs to train (seeds 0..N-1; default 20)")
    p.add_argument("--config", default=None, help="the recipe (default: vitkit train's default)")
    args = p.parse_args(argv)
    out = Path(args.out)
    extra = (["--config", args.config] if args.config else []) + ([*TINY_VIT, *TINY_RUN] if args.tiny else [])
    extra += [f"train.steps={max(2, round(700 * args.steps_scale))}"] if args.steps_scale != 1.0 else []
    test = load_dataset("fashion_mnist", "test")
    fp32 = choose_precision("fp32", "cpu")
    rows, top1 = [], {p: [] for p in PRECISIONS}
    for seed in range(args.seeds):
        runs = train_pair(out, seed, extra)
        predicted = {p: predictions(vitkit.load_weights(run).eval(), test, fp32) for p, run in runs.items()}
        pair = paired_test(predicted["fp32"], predicted["bf16"], test.labels)
        top1["fp32"].append(100 * pair.first_top1)
        top1["bf16"].append(100 * pair.second_top1)
        difference = top1["bf16"][-1] - top1["fp32"][-1]
        seconds = [json.loads((runs[p] / REPORT_NAME).read_text())["wall_seconds"] for p in PRECISIONS]
        rows.append([seed, f"{top1['fp32'][-1]:.2f}%", f"{top1['bf16'][-1]:.2f}%", f"{difference:+.2f}",
                     f"{pair.only_first} / {pair.only_second}", f"{pair.p_value:.2f}",
                     f"{seconds[0]:.0f} / {seconds[1]:.0f}"])  # fmt: skip
    differences = [b - f for f, b in zip(top1["fp32"], top1["bf16"], strict=True)]
    mean = statistics.mean(differences)
    error = statistics.stdev(differences) / len(differences) ** 0.5 if len(differences) > 1 else float("nan")
    t_p = ttest_rel(top1["bf16"], top1["fp32"]).pvalue if len(differences) > 1 else float("nan")
    w_p = wilcoxon(differences).pvalue if any(differences) and len(differences) > 1 else float("nan")
    header = ["seed", "fp32", "bf16 (evaluated in fp32)", "bf16 - fp32 (points)", "only fp32 / only bf16 right",
              "McNemar p", "wall s fp32 / bf16"]  # fmt: skip
    notes = (
        f"{len(differences)} pairs: bf16 - fp32 = {mean:+.3f} points on average (standard error {error:.3f}); "
        f"paired t-test p = {t_p:.3f}, Wilcoxon signed-rank p = {w_p:.3f}."
    )
    figure, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(top1["fp32"], top1["bf16"])
    low, high = min(min(top1["fp32"]), min(top1["bf16"])), max(max(top1["fp32"]), max(top1["bf16"]))
    ax.plot([low, high], [low, high], color="grey", ls="--", lw=1)
    ax.set(xlabel="fp32 test top-1 (%)", ylabel="bf16 test top-1 (%)", title="One point per seed")
    ax.grid(alpha=0.3)
    title = f"bf16 against fp32 training, {len(differences)} seeds"
    return write_results(out, "bf16_pairs", title, (header, rows), figure, notes)


if __name__ == "__main__":
    main()
