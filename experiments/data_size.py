"""Data size decides (§4.2-4.3, Fig. 3/4 in miniature): the ViT, the BiT ResNet and the R50 hybrid of
comparable FLOPs, trained through the same engine on class-balanced Fashion-MNIST subsets of 1k to 60k
labelled images (the same subsets, drawn by seed, for every family), with equal compute per subset size: every
family sees the same number of images, `--base-steps` x sqrt(size / 1000) steps of 128. Reports test top-1 and
the few-shot linear accuracy (5 and 25 shots; k-shot images from the whole training split) of each, as a table
and a figure of accuracy against data size with one line per family.

    python -m experiments.data_size --out runs/exp_data_size            # 81 min a seed: 2 Zen 5 cores, bf16
    python -m experiments.data_size --seeds 3                           # the spread over subsets and seeds
    python -m experiments.data_size --families vit                      # one family (one per machine)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

import vitkit
from experiments.common import (
    CONFIGS,
    HYBRID,
    RESNET,
    TINY_RUN,
    VIT,
    Family,
    mean_std,
    parser,
    percent,
    plot_spread,
    run_vitkit,
    scaled,
    write_results,
)
from vitkit.flops import count_flops

SIZES = (1000, 3000, 10000, 30000, 60000)
BASE_STEPS = 800
SHOTS = (5, 25)
FAMILIES = {"vit": VIT, "resnet": RESNET, "hybrid": HYBRID}


def steps_for(size: int, base_steps: int) -> int:
    """Training steps at a subset size: the compute grows with the square root of the data."""
    return round(base_steps * math.sqrt(size / 1000))


def run_args(family: Family, size: int, seed: int, steps: int, args: Any) -> list[str]:
    """The `vitkit train` arguments of one (family, size, seed): only the subset, its length and seed vary."""
    out = [
        "--config",
        str(CONFIGS / family.recipe),
        "--seed",
        str(seed),
        f"data.train_subset={size}",
        f"data.subset_seed={seed}",
        f"train.steps={steps}",
        f"optim.warmup_steps={max(1, steps // 10)}",
        "train.eval_every=0",
        f"train.fewshot_every={steps}",
        f"train.checkpoint_every={steps}",
        f"train.processes={args.processes}",
        f"train.precision={args.precision}",
    ]
    if args.tiny:
        out += [*family.tiny, *TINY_RUN, "train.fewshot_num_test=200"]
    return out


def main(argv: list[str] | None = None) -> Path:
    p = parser(__doc__.splitlines()[0], "runs/exp_data_size")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated subset sizes")
    p.add_argument("--seeds", type=int, default=1, help="subsets and initialisations per size (seeds 0..n-1)")
    p.add_argument("--base-steps", type=int, default=BASE_STEPS, help="steps at 1,000 images (default 800)")
    p.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help=f"comma-separated families among {', '.join(FAMILIES)} (default all; e.g. one per machine)",
    )
    args = p.parse_args(argv)
    out = Path(args.out)
    sizes = [int(s) for s in args.sizes.split(",")]
    keys = args.families.split(",")
    if unknown := sorted(set(keys) - set(FAMILIES)):
        p.error(f"--families: unknown {', '.join(unknown)}; choose among {', '.join(FAMILIES)}")
    families = [FAMILIES[key] for key in keys]
    reports: dict[tuple[str, int], list[dict[str, Any]]] = {}
    flops: dict[str, float] = {}
    for size in sizes:
        steps = scaled(steps_for(size, args.base_steps), args.steps_scale)
        for family in families:
            for seed in range(args.seeds):
                run_dir = out / f"{family.recipe.removesuffix('.toml')}_n{size}_s{seed}"
                report = run_vitkit("train", run_dir, run_args(family, size, seed, steps, args))
                reports.setdefault((family.name, size), []).append(report)
                if family.name not in flops:
                    model = vitkit.load_weights(run_dir)
                    flops[family.name] = (
                        count_flops(model, (model.config.in_chans, *model.config.img_size)) / 1e6
                    )

    header = [
        "labelled images",
        "family",
        "MFLOPs / image",
        "images seen",
        "test top-1",
        *(f"{k}-shot" for k in SHOTS),
        "wall (min)",
    ]
    rows = []
    for size in sizes:
        for family in families:
            runs = reports[(family.name, size)]
            shots = [percent([r[f"fewshot_{k}shot"] for r in runs]) for k in SHOTS]
            images = round(runs[0]["epochs"] * size)  # steps x batch
            rows.append(
                [
                    size,
                    family.name,
                    f"{flops[family.name]:.1f}",
                    images,
                    percent([r["test_top1"] for r in runs]),
                    *shots,
                    f"{mean_std([r['wall_seconds'] / 60 for r in runs])[0]:.1f}",
                ]
            )
    figure, axes = plt.subplots(1, 1 + len(SHOTS), figsize=(5 * (1 + len(SHOTS)), 4))
    for ax, key, label in zip(
        axes,
        ["test_top1", *(f"fewshot_{k}shot" for k in SHOTS)],
        ["test top-1", *(f"{k}-shot linear" for k in SHOTS)],
        strict=True,
    ):
        for family in families:
            samples = [[100 * r[key] for r in reports[(family.name, size)]] for size in sizes]
            plot_spread(ax, sizes, samples, f"{family.name} ({flops[family.name]:.1f} MFLOPs)")
        ax.set(xscale="log", xlabel="labelled training images", ylabel=f"{label} (%)", title=label)
        ax.set_xticks(sizes, [f"{size:,}" for size in sizes], minor=False)
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    axes[0].legend()
    figure.suptitle("Fashion-MNIST: accuracy against data size at equal compute per size")
    best = "; ".join(f"{size:,}: {best_family(reports, families, size)}" for size in sizes)
    steps = f"{args.base_steps} x {args.steps_scale:g}"
    notes = f"Best test top-1 per size: {best}. Seeds: {args.seeds}. Steps at 1,000 images: {steps}."
    title = "Data size decides: accuracy against labelled images"
    return write_results(out, "data_size", title, (header, rows), figure, notes)


def best_family(
    reports: dict[tuple[str, int], list[dict[str, Any]]], families: list[Family], size: int
) -> str:
    """The family with the highest mean test top-1 at a subset size."""
    return max(families, key=lambda f: mean_std([r["test_top1"] for r in reports[(f.name, size)]])[0]).name


if __name__ == "__main__":
    main()
