"""A ViT that wins on its budget: the ViT recipe configs/fashion_mnist_vit_budget.toml (aimed at >= 93% Fashion-MNIST
test top-1 within 30 minutes) and the BiT ResNet of configs/fashion_mnist_resnet.toml given the same wall-clock
budget side by side. Each recipe's steps are sized to the budget from a short probe run of its own speed (so each
uses the budget fully, its schedule decaying to zero at its end); both are evaluated ten times on the way, and
the table and the figure give accuracy against wall time for both.

    python -m experiments.vit_budget --out runs/exp_vit_budget          # 2 x 30 min + 2 probes (~3 min)
    python -m experiments.vit_budget --val-split 5000                   # choosing a recipe: never on the test set

With --val-split N, N class-balanced training images are held out (data.val_split): the evaluations on the way
measure them, the curve is validation accuracy, and the test accuracy is still reported at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from experiments.common import evaluations, markdown_table, parser, run_vitkit, scaled, write_results
from experiments.data_size import CONFIGS, FAMILIES
from vitkit.train.engine import CONFIG_NAME
from vitkit.train.recipe import load_config

RECIPES = {"ViT": "fashion_mnist_vit_budget.toml", "ResNet (BiT)": "fashion_mnist_resnet.toml"}
TARGET = 93.0
FILL = 0.9  # of the budget for training steps; the rest for the ten evaluations, checkpoints and start-up
EVALUATIONS = 10


def common_args(name: str, args: Any) -> list[str]:
    """Overrides of both the probe and the run: processes, the validation split, tiny models for --tiny."""
    out = [f"train.processes={args.processes}", f"data.val_split={args.val_split}"]
    if args.tiny:  # the data-size experiment's tiny version of the family
        out += [*next(f for f in FAMILIES if f.name == name).tiny, "train.batch_size=32", "train.log_every=1"]
    return out


def sized_steps(name: str, args: Any) -> int:
    """Training steps that fill FILL of the budget at the speed a probe run of the recipe measures."""
    recipe = RECIPES[name]
    probe, probe_dir = args.probe_steps, Path(args.out) / f"probe_{Path(recipe).stem}"
    report = run_vitkit("train", probe_dir, [
        "--config", str(CONFIGS / recipe), f"train.steps={probe}", f"optim.warmup_steps={max(1, probe // 10)}",
        "train.eval_every=0", f"train.checkpoint_every={probe}", *common_args(name, args),
    ])
    batch_size = load_config(probe_dir / CONFIG_NAME).train.batch_size
    return max(2, int(args.budget_minutes * 60 * FILL * report["images_per_second"] / batch_size))


def main(argv: list[str] | None = None) -> Path:
    p = parser(__doc__.splitlines()[0], "runs/exp_vit_budget")
    p.add_argument("--budget-minutes", type=float, default=30.0, help="wall-clock budget of each model")
    p.add_argument("--probe-steps", type=int, default=150, help="steps of the speed probe of each recipe")
    p.add_argument("--val-split", type=int, default=0, help="hold out N training images for the curves")
    args = p.parse_args(argv)
    out = Path(args.out)
    key = "val_top1" if args.val_split else "test_top1"
    runs: dict[str, tuple[Path, dict[str, Any]]] = {}
    for name, recipe in RECIPES.items():
        steps = scaled(sized_steps(name, args), args.steps_scale)
        run_dir = out / Path(recipe).stem
        runs[name] = run_dir, run_vitkit("train", run_dir, [
            "--config", str(CONFIGS / recipe), f"train.steps={steps}", f"optim.warmup_steps={max(1, steps // 20)}",
            f"train.eval_every={max(1, steps // EVALUATIONS)}", f"train.checkpoint_every={max(1, steps // 4)}",
            *common_args(name, args),
        ])

    curve = "validation" if args.val_split else "test"
    header = ["model", "recipe", "steps", "epochs", "wall (min)", "test top-1", *(["validation top-1"] if args.val_split else []),
              f"first {curve} >= {TARGET:g}%"]
    rows = []
    figure, ax = plt.subplots(figsize=(7, 4.5))
    for name, (run_dir, report) in runs.items():
        points = evaluations(run_dir, key)
        reached = next((f"{m:.1f} min" for m, a in points if a >= TARGET), "not reached")
        rows.append([name, f"configs/{RECIPES[name]}", report["steps"], f"{report['epochs']:.1f}",
                     f"{report['wall_seconds'] / 60:.1f}", f"{100 * report['test_top1']:.2f}%",
                     *([f"{100 * report['val_top1']:.2f}%"] if args.val_split else []), reached])
        ax.plot(*zip(*points), "o-", label=f"{name}: {points[-1][1]:.2f}% at {points[-1][0]:.1f} min")
    ax.axhline(TARGET, color="grey", ls="--", lw=1, label=f"target {TARGET:g}%")
    ax.axvline(args.budget_minutes, color="grey", ls=":", lw=1, label=f"budget {args.budget_minutes:g} min")
    ax.set(xlabel="engine wall time (minutes)", ylabel=f"{curve} top-1 (%)",
           title=f"Fashion-MNIST {curve} accuracy against wall time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    figure.tight_layout()
    curves = "\n\n".join(
        markdown_table([f"{name}: minutes", f"{curve} top-1"], [[f"{m:.1f}", f"{a:.2f}%"] for m, a in evaluations(d, key)])
        for name, (d, _) in runs.items()
    )
    notes = (
        f"Budget {args.budget_minutes:g} min per model (steps sized from a {args.probe_steps}-step probe of each "
        f"recipe to fill {FILL:.0%} of it, x {args.steps_scale:g}); {args.processes} process(es). Evaluations on "
        f"the way: {curve} set{f' ({args.val_split} training images held out)' if args.val_split else ''}.\n\n"
        f"{curves}"
    )
    title = f"A ViT on its budget: {args.budget_minutes:g} minutes each"
    return write_results(out, "vit_budget", title, markdown_table(header, rows), figure, notes)


if __name__ == "__main__":
    main()
