"""Transfer (§4.1, Tab. 2 in miniature): a ViT pre-trained on Fashion-MNIST, supervised and with masked patch
prediction (labels unused), transferred to a different dataset, scikit-learn's 8x8 digits upsampled to 28x28:
by fine-tuning with a zero-initialised head (configs/digits_transfer.toml, several seeds), by the fast path (the
same recipe with train.fit='linear': a closed-form head on the frozen features of every training digit, its l2
cross-validated; the seed draws the folds) and by few-shot linear evaluation of the frozen features (1/5/10/25
shots), against the same ViT from scratch (trained on digits with the same recipe; its few-shot row is the
untrained initialisation). Needs scikit-learn (digits).

    python -m experiments.transfer --out runs/exp_transfer     # 20 min on 2 idle Zen 5 cores (bf16)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch

import vitkit
from experiments.common import (
    CONFIGS,
    TINY_RUN,
    VIT,
    mean_std,
    parser,
    percent,
    plot_spread,
    run_vitkit,
    scaled,
    vitkit_command,
    write_results,
)

PRETRAIN_STEPS = 4000
FINETUNE_STEPS = 500  # configs/digits_transfer.toml
SHOTS = (1, 5, 10, 25)
ARMS = {"scratch": "from scratch", "supervised": "Fashion-MNIST, supervised", "mpp": "Fashion-MNIST, MPP"}
PRETRAIN_RECIPES = {"supervised": "fashion_mnist_vit.toml", "mpp": "fashion_mnist_mpp.toml"}


def pretrain(out: Path, arm: str, args: Any) -> tuple[Path, dict[str, Any]]:
    """Pre-train the ViT on Fashion-MNIST (one run per objective, seed 0); its run directory and report."""
    steps = scaled(args.pretrain_steps, args.steps_scale)
    run_dir = out / f"pretrain_{arm}"
    report = run_vitkit(
        "train",
        run_dir,
        [
            "--config",
            str(CONFIGS / PRETRAIN_RECIPES[arm]),
            "--seed",
            "0",
            f"train.steps={steps}",
            f"optim.warmup_steps={max(1, steps // 10)}",
            "train.eval_every=0",
            "train.fewshot_every=0",
            f"train.checkpoint_every={steps}",
            f"train.processes={args.processes}",
            f"train.precision={args.precision}",
            *tiny_args(args),
        ],
    )
    return run_dir, report


def tiny_args(args: Any) -> list[str]:
    """The tiny ViT of `--tiny` for the runs that build the architecture (fine-tuning takes the source's)."""
    return [*VIT.tiny, *TINY_RUN] if args.tiny else []


def initialisation(out: Path, like: Path) -> Path:
    """The untrained ViT (seed 0) of the pre-trained architecture, saved for the few-shot baseline."""
    path = out / "initialisation"
    if not (path / "config.json").is_file():
        torch.manual_seed(0)
        vitkit.build_model(vitkit.load_weights(like).config).save_pretrained(path)
    return path


def fewshot(out: Path, arm: str, weights: Path, seeds: int) -> dict[str, Any]:
    """`vitkit fewshot` of frozen features on digits (1/5/10/25 shots, `seeds` draws); cached as JSON."""
    path = out / f"fewshot_{arm}.json"
    if not path.is_file():
        shots = ",".join(map(str, SHOTS))
        argv = ["fewshot", "--weights", str(weights), "--data", "digits", "--shots", shots]
        vitkit_command([*argv, "--seeds", str(seeds), "--out", str(path)], path)
    return json.loads(path.read_text())


def wall_time(reports: list[dict[str, Any]]) -> str:
    """Mean wall seconds of runs, from their reports."""
    return f"{np.mean([r['wall_seconds'] for r in reports]):.1f} s"


def main(argv: list[str] | None = None) -> Path:
    p = parser(__doc__.splitlines()[0], "runs/exp_transfer")
    p.add_argument("--seeds", type=int, default=3, help="fine-tuning / from-scratch seeds (default 3)")
    p.add_argument("--fewshot-seeds", type=int, default=5, help="few-shot draws per shot count (default 5)")
    p.add_argument("--pretrain-steps", type=int, default=PRETRAIN_STEPS, help="steps of each pre-training")
    p.add_argument(
        "--finetune-steps",
        type=int,
        default=FINETUNE_STEPS,
        help=f"steps of each digits run, fine-tuned or from scratch (default {FINETUNE_STEPS}, the recipe's)",
    )
    args = p.parse_args(argv)
    out = Path(args.out)
    pretrained = {arm: pretrain(out, arm, args) for arm in PRETRAIN_RECIPES}
    sources = {arm: run_dir for arm, (run_dir, _) in pretrained.items()}
    recipe = ["--config", str(CONFIGS / "digits_transfer.toml")]
    digits_steps = scaled(args.finetune_steps, args.steps_scale)
    steps = [f"train.steps={digits_steps}", f"optim.warmup_steps={max(1, digits_steps // 10)}"]
    finetuned: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    linear: dict[str, list[dict[str, Any]]] = {arm: [] for arm in PRETRAIN_RECIPES}
    for seed in range(args.seeds):
        common = [
            *recipe,
            "--seed",
            str(seed),
            *steps,
            f"train.processes={args.processes}",
            f"train.precision={args.precision}",
        ]
        finetuned["scratch"].append(
            run_vitkit("train", out / f"scratch_s{seed}", [*common, *tiny_args(args)])
        )
        for arm, source in sources.items():
            run_args = ["--weights", str(source), *common, *(TINY_RUN if args.tiny else ())]
            finetuned[arm].append(run_vitkit("finetune", out / f"{arm}_s{seed}", run_args))
            linear_args = ["--weights", str(source), *recipe, "--seed", str(seed), "train.fit=linear"]
            linear[arm].append(run_vitkit("finetune", out / f"{arm}_linear_s{seed}", linear_args))
    features = {"scratch": initialisation(out, sources["supervised"]), **sources}
    shots = {arm: fewshot(out, arm, weights, args.fewshot_seeds) for arm, weights in features.items()}

    scratch = np.array([r["test_top1"] for r in finetuned["scratch"]])
    rows = []
    for arm, label in ARMS.items():
        top1 = [r["test_top1"] for r in finetuned[arm]]
        gain = "" if arm == "scratch" else percent(list(np.array(top1) - scratch)).replace("%", " points")
        fast = [r["test_top1"] for r in linear.get(arm, [])]
        seconds = [wall_time(finetuned[arm]), wall_time(linear[arm]) if fast else ""]
        fewshot_cells = [percent(shots[arm]["shots"][str(k)]["runs"]) for k in SHOTS]
        rows.append([label, percent(top1), gain, percent(fast) if fast else "", *seconds, *fewshot_cells])
    header = [
        "initialisation",
        f"fine-tuned test top-1 ({args.seeds} seeds)",
        "gain over scratch (paired)",
        "linear head (train.fit='linear')",
        "fine-tuning wall time",
        "linear head wall time",
        *(f"{k}-shot" for k in SHOTS),
    ]
    figure, (ax_ft, ax_fs) = plt.subplots(1, 2, figsize=(11, 4))
    for i, arm in enumerate(ARMS):
        values = [100 * r["test_top1"] for r in finetuned[arm]]
        mean, std = mean_std(values)  # a point with error bars, not a bar from 0: the arms differ by points
        ax_ft.errorbar(i, mean, yerr=std, fmt="o", markersize=8, capsize=6)
        ax_ft.plot([i + 0.15] * len(values), values, "k.")
        samples = [[100 * r for r in shots[arm]["shots"][str(k)]["runs"]] for k in SHOTS]
        plot_spread(ax_fs, SHOTS, samples, ARMS[arm] if arm != "scratch" else "untrained initialisation")
    ax_ft.set_xticks(range(len(ARMS)), list(ARMS.values()), rotation=10)
    ax_ft.set_xlim(-0.5, len(ARMS) - 0.5)
    ax_ft.set(ylabel="digits test top-1 (%)", title="fine-tuned on digits (mean ± std; dots: seeds)")
    ax_fs.set(
        xscale="log",
        xlabel="images per class",
        ylabel="digits test accuracy (%)",
        title="few-shot linear on frozen features",
    )
    ax_fs.set_xticks(SHOTS, [str(k) for k in SHOTS])
    ax_fs.legend()
    for ax in (ax_ft, ax_fs):
        ax.grid(alpha=0.3)
    supervised, mpp = pretrained["supervised"][1], pretrained["mpp"][1]
    runs = [supervised, mpp, *(r for arm in ARMS for r in finetuned[arm])]
    notes = (
        f"Pre-training on the Fashion-MNIST training set (seed 0): supervised {supervised['steps']} steps "
        f"({100 * supervised['test_top1']:.2f}% Fashion-MNIST test top-1), MPP {mpp['steps']} steps (MPP test "
        f"loss {mpp['test_mpp_loss']:.4f}); fine-tuning and from scratch: configs/digits_transfer.toml at "
        f"{finetuned['scratch'][0]['steps']} steps, "
        f"seeds 0-{args.seeds - 1}; the gain is the mean of the per-seed differences. Linear head: the recipe "
        f"with train.fit='linear' on every training digit (wall time: the command's own, features computed "
        f"once and cached, so seeds 1-{args.seeds - 1} read them). Few-shot: "
        f"{args.fewshot_seeds} draws of k digits per class, ridge regression on frozen features, the "
        f"{shots['scratch']['num_test']} digits test images. All: mean ± sample std. Engine wall time of "
        f"all {len(runs)} training runs: {sum(r['wall_seconds'] for r in runs) / 60:.1f} min."
    )
    title = "Transfer: Fashion-MNIST to digits"
    return write_results(out, "transfer", title, (header, rows), figure, notes)


if __name__ == "__main__":
    main()
