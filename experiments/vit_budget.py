"""A ViT on its budget: the ViT recipe the small-data study chose, configs/fashion_mnist_vit_budget.toml (the
paper's R50 hybrid at the Fashion-MNIST scale), and the BiT ResNet of configs/fashion_mnist_resnet.toml given the
same wall-clock budget side by side, one seed each: the recipe's check on another machine. Each recipe's steps
are sized to the budget from two short probe runs of its own speed (so each uses the budget fully, its schedule
decaying to zero at its end); both are evaluated ten times on the way, and the table and the figure give accuracy
against wall time for both.

    python -m experiments.vit_budget --out runs/exp_vit_budget      # 2 x 30 min + 4 probes (~5 min)
    python -m experiments.vit_budget --val-split 5000               # choosing a recipe: never on the test set

With --val-split N, N class-balanced training images are held out (data.val_split): the evaluations on the way
measure them, the curve is validation accuracy, and the test accuracy is still reported at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from experiments.common import (
    CONFIGS,
    HYBRID,
    RESNET,
    TINY_RUN,
    Family,
    evaluations,
    markdown_table,
    parser,
    run_vitkit,
    scaled,
    write_results,
)
from vitkit.recipe.resolve import load_config
from vitkit.recipe.run_config import RECIPE_NAME

VIT_BUDGET = Family("ViT (R50 hybrid)", "fashion_mnist_vit_budget.toml", HYBRID.tiny)
MODELS = (VIT_BUDGET, RESNET)
TARGET = 93.0
MARGIN = 0.97  # of the budget the run is sized to end at: speeds vary a little over 30 minutes
EVALUATIONS = 10


def common_args(model: Family, args: Any, extra: Sequence[str] = ()) -> list[str]:
    """Overrides of both the probe and the run: the recipe, processes, the validation split, `extra` overrides,
    --tiny models."""
    out = [
        "--config",
        str(CONFIGS / model.recipe),
        f"train.processes={args.processes}",
        f"train.precision={args.precision}",
        f"data.val_split={args.val_split}",
        *extra,
    ]
    return out + ([*model.tiny, *TINY_RUN] if args.tiny else [])


def probe(
    model: Family, args: Any, steps: int, name: str = "", extra: Sequence[str] = (), eval_every: int = 0
) -> tuple[float, float]:
    """A short run of the recipe (with `extra` overrides) evaluating every `eval_every` steps (0: at the end
    only): its wall seconds and training seconds."""
    run_dir = Path(args.out) / f"probe_{name or run_name(model)}_{steps}"
    report = run_vitkit(
        "train",
        run_dir,
        [
            *common_args(model, args, extra),
            f"train.steps={steps}",
            f"optim.warmup_steps={max(1, steps // 10)}",
            f"train.eval_every={eval_every}",
            f"train.checkpoint_every={steps}",
        ],
    )
    batch_size = load_config(run_dir / RECIPE_NAME).train.batch_size
    return report["wall_seconds"], steps * batch_size / report["images_per_second"]


def sized_steps(model: Family, args: Any, name: str = "", extra: Sequence[str] = ()) -> int:
    """Training steps that end the run, its evaluations included, at MARGIN of the budget.

    Two probes: n steps evaluating at the end only, and 2n steps evaluating also after step n. A steady step
    takes the difference of their training times over n (the timed log steps would overstate it on a GPU, which
    they synchronise); the rest of the difference of their wall times is one periodic evaluation, which the run
    pays at most EVALUATIONS times; what the short probe spent outside its steps (the final evaluation and
    checkpoint) the run pays once, and what its steps took beyond n steady ones (their warm-up) once too."""
    n = args.probe_steps
    short_wall, short_train = probe(model, args, n, name, extra)
    long_wall, long_train = probe(model, args, 2 * n, name, extra, eval_every=n)
    # Probes so short that noise swamps their difference fall back to the longer one's mean step.
    step_seconds = (long_train - short_train) / n if long_train > short_train else long_train / (2 * n)
    periodic = max((long_wall - short_wall) - (long_train - short_train), 0.0)
    once = max(short_wall - short_train, 0.0)
    warmup = max(short_train - n * step_seconds, 0.0)
    available = args.budget_minutes * 60 * MARGIN - once - warmup - EVALUATIONS * periodic
    return max(2, int(available / step_seconds))


def run_name(model: Family) -> str:
    return model.recipe.removesuffix(".toml")


def main(argv: list[str] | None = None) -> Path:
    p = parser(__doc__.splitlines()[0], "runs/exp_vit_budget")
    p.add_argument("--budget-minutes", type=float, default=30.0, help="wall-clock budget of each model")
    p.add_argument(
        "--probe-steps", type=int, default=150, help="steps of the shorter speed probe (n, then 2n)"
    )
    p.add_argument("--val-split", type=int, default=0, help="hold out N training images for the curves")
    args = p.parse_args(argv)
    out = Path(args.out)
    runs: dict[str, tuple[Path, dict[str, Any]]] = {}
    for model in MODELS:
        steps = scaled(sized_steps(model, args), args.steps_scale)
        run_dir = out / run_name(model)
        runs[model.name] = (
            run_dir,
            run_vitkit(
                "train",
                run_dir,
                [
                    *common_args(model, args),
                    f"train.steps={steps}",
                    f"optim.warmup_steps={max(1, steps // 20)}",
                    f"train.eval_every={max(1, steps // EVALUATIONS)}",
                    f"train.checkpoint_every={max(1, steps // 4)}",
                ],
            ),
        )

    curve, key = ("validation", "val_top1") if args.val_split else ("test", "test_top1")
    header = [
        "model",
        "recipe",
        "steps",
        "epochs",
        "wall (min)",
        "test top-1",
        *(["validation top-1"] if args.val_split else []),
        f"first {curve} >= {TARGET:g}%",
    ]
    rows, curves = [], []
    figure, ax = plt.subplots(figsize=(7, 4.5))
    for model in MODELS:
        run_dir, report = runs[model.name]
        points = evaluations(run_dir, key)
        reached = next((f"{m:.1f} min" for m, a in points if a >= TARGET), "not reached")
        validation = [f"{100 * report['val_top1']:.2f}%"] if args.val_split else []
        rows.append(
            [
                model.name,
                f"configs/{model.recipe}",
                report["steps"],
                f"{report['epochs']:.1f}",
                f"{report['wall_seconds'] / 60:.1f}",
                f"{100 * report['test_top1']:.2f}%",
                *validation,
                reached,
            ]
        )
        curve_rows = [[f"{m:.1f}", f"{a:.2f}%"] for m, a in points]
        curves.append(markdown_table([f"{model.name}: minutes", f"{curve} top-1"], curve_rows))
        ax.plot(
            *zip(*points, strict=True),
            "o-",
            label=f"{model.name}: {points[-1][1]:.2f}% at {points[-1][0]:.1f} min",
        )
    ax.axhline(TARGET, color="grey", ls="--", lw=1, label=f"target {TARGET:g}%")
    ax.axvline(args.budget_minutes, color="grey", ls=":", lw=1, label=f"budget {args.budget_minutes:g} min")
    ax.set(
        xlabel="engine wall time (minutes)",
        ylabel=f"{curve} top-1 (%)",
        title=f"Fashion-MNIST {curve} accuracy against wall time",
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    held_out = f" ({args.val_split} training images held out)" if args.val_split else ""
    notes = (
        f"Budget {args.budget_minutes:g} min per model (steps sized from probes of {args.probe_steps} and "
        f"{2 * args.probe_steps} steps of each recipe to end at {MARGIN:.0%} of it with its evaluations, "
        f"x {args.steps_scale:g}); {args.processes} process(es). "
        f"Evaluations on the way: {curve} set{held_out}.\n\n" + "\n\n".join(curves)
    )
    title = f"A ViT on its budget: {args.budget_minutes:g} minutes each"
    return write_results(out, "vit_budget", title, (header, rows), figure, notes)


if __name__ == "__main__":
    main()
