"""A ViT that wins on small data: "How to train your ViT?" (Steiner et al., AugReg) in miniature on Fashion-MNIST,
with the BiT ResNet tuned by the same procedure on the same budget.

Stage 1, the grid (choices on a validation split, never the test set): every run gets the same short wall-clock
budget (its steps sized from probes of its own speed, so slower augmentation costs steps, as it would cost a user
time). The ViT of configs/fashion_mnist_vit_augreg.toml and the ResNet of configs/fashion_mnist_resnet.toml each
run augmentation (none, light, medium, heavy) x regularisation (none, light, medium, heavy). A short budget
favours weak regularisation, which pays off only over longer training, so the best --refine cells of each grid
run again at --refine-scale times the budget (successive halving). With the best of those, the family's shapes
at about equal compute run at the longer budget too (ViT: width, depth, patch 2/4/7, and the paper's own
convolutional stem, the R50 hybrid; ResNet: depth and width). The best run so far and its rival, the best grid
cell of another augmentation level in the same shape, are the family's two contenders (choices.json):
augmentation pays off later than the rest (AugReg: its value grows with the training length), so short budgets
favour too little of it, and the choice between the two waits for the full budget.

Stage 2 (--final): each family's two contenders at the full budget (seed 0), the better of them on the
validation split again at the other seeds; every run holds out the same validation images. The table: test
top-1 mean and spread, the exact McNemar test of each ViT and ResNet seed pair, time to 90% and 92% validation
top-1.

    python -m experiments.small_data_study --out runs/small_data              # stage 1 (prints its time first)
    python -m experiments.small_data_study --out runs/small_data --final      # stage 2: 2 x 4 x 30 min
    python -m experiments.small_data_study --tiny --short-minutes 0.01 ...    # plumbing check in seconds

Runs already finished in --out are read, not repeated, and a stopped one resumes, so a stage may span sittings;
--family vit or --family resnet runs one family's part of a stage (the other's is kept in choices.json).
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

import vitkit
from experiments import common, vit_budget
from experiments.common import HYBRID, RESNET, Family, evaluations, percent, run_vitkit, write_results
from vitkit.data import load_dataset
from vitkit.evaluation.paired import paired_test, predictions
from vitkit.flops import count_flops
from vitkit.precision import choose_precision

VIT = Family("ViT", "fashion_mnist_vit_augreg.toml", common.VIT.tiny)
AUGMENTATION = {  # AugReg's axis: none, light (crops and flips), medium (+ Mixup), heavy (+ RandAugment, CutMix)
    "none": ("data.crop=none", "data.flip=false", "data.mixup=0", "data.cutmix=0", "data.randaugment=false"),
    "light": (
        "data.crop=pad_crop",
        "data.flip=true",
        "data.mixup=0",
        "data.cutmix=0",
        "data.randaugment=false",
    ),
    "medium": (
        "data.crop=pad_crop",
        "data.flip=true",
        "data.mixup=0.2",
        "data.cutmix=0",
        "data.randaugment=false",
    ),
    "heavy": (
        "data.crop=pad_crop",
        "data.flip=true",
        "data.mixup=0.5",
        "data.cutmix=1.0",
        "data.randaugment=true",
    ),
}
REGULARISATION = {  # dropout, stochastic depth and weight decay together, as AugReg varies them
    VIT.name: {
        "none": ("model.dropout=0", "model.drop_path=0", "optim.weight_decay=0"),
        "light": ("model.dropout=0", "model.drop_path=0.05", "optim.weight_decay=0.03"),
        "medium": ("model.dropout=0.1", "model.drop_path=0.1", "optim.weight_decay=0.05"),
        "heavy": ("model.dropout=0.1", "model.drop_path=0.2", "optim.weight_decay=0.1"),
    },
    RESNET.name: {  # the BiT ResNet has neither dropout nor stochastic depth: weight decay carries it
        "none": ("optim.weight_decay=0",),
        "light": ("optim.weight_decay=0.01",),
        "medium": ("optim.weight_decay=0.05",),
        "heavy": ("optim.weight_decay=0.2",),
    },
}
SHAPES = {  # at about the recipe's compute (the table prints each one's GFLOPs); each sets the whole model shape
    VIT.name: {
        "patch 4, width 96, depth 4 (recipe)": ("model.patch_size=4", "model.hidden_size=96", "model.num_heads=3", "model.mlp_dim=192", "model.depth=4"),
        "patch 4, width 64, depth 9": ("model.patch_size=4", "model.hidden_size=64", "model.num_heads=2", "model.mlp_dim=128", "model.depth=9"),
        "patch 4, width 136, depth 2": ("model.patch_size=4", "model.hidden_size=136", "model.num_heads=4", "model.mlp_dim=272", "model.depth=2"),
        "patch 7, width 192, depth 3": ("model.patch_size=7", "model.hidden_size=192", "model.num_heads=6", "model.mlp_dim=384", "model.depth=3"),
        "patch 2, width 48, depth 4": ("model.patch_size=2", "model.hidden_size=48", "model.num_heads=2", "model.mlp_dim=96", "model.depth=4"),
    },
    RESNET.name: {
        "2 stages of 2 units (recipe)": ("model.layers=[2, 2]", "model.width_factor=1"),
        "3 stages of 1 unit": ("model.layers=[1, 1, 1]", "model.width_factor=1"),
        "2 stages of 3 units": ("model.layers=[3, 3]", "model.width_factor=1"),
        "1 stage of 2 units, width x2": ("model.layers=[2]", "model.width_factor=2"),
    },
}  # fmt: skip
HYBRID_SHAPE = "R50 stem + ViT (the paper's hybrid)"
FAMILIES = {"vit": VIT, "resnet": RESNET}
SEEDS = (0, 1, 2)
TARGETS = (90.0, 92.0)


@dataclass(frozen=True)
class Cell:
    """One run of the grid: a family's recipe with its augmentation, regularisation and shape overrides."""

    family: Family
    augmentation: str
    regularisation: str
    shape: str

    @property
    def name(self) -> str:
        words = (self.family.recipe.removesuffix(".toml"), self.augmentation, self.regularisation, self.shape)
        return "_".join("".join(c if c.isalnum() else "-" for c in w) for w in words)

    @property
    def overrides(self) -> tuple[str, ...]:
        shapes = SHAPES.get(self.family.name, {})
        shape = shapes.get(self.shape, ())
        return (
            *AUGMENTATION[self.augmentation],
            *REGULARISATION[self.family.name][self.regularisation],
            *shape,
        )

    @property
    def recipe_family(self) -> Family:
        return HYBRID if self.shape == HYBRID_SHAPE else self.family


def grid(family: Family) -> list[Cell]:
    recipe_shape = next(iter(SHAPES[family.name]))
    return [Cell(family, a, r, recipe_shape) for a in AUGMENTATION for r in REGULARISATION[family.name]]


def shapes(best: Cell) -> list[Cell]:
    names = [*SHAPES[best.family.name]] + ([HYBRID_SHAPE] if best.family is VIT else [])
    return [Cell(best.family, best.augmentation, best.regularisation, name) for name in names]


def train_cell(cell: Cell, args: argparse.Namespace, minutes: float, seed: int = 0, name: str = "") -> dict:
    """Train `cell` for `minutes` of this machine (steps sized from probes of its speed, which its longer and final
    runs share: dropout and stochastic depth cost time too); returns the report of run directory `name` (default:
    the cell's)."""
    timed = argparse.Namespace(**{**vars(args), "budget_minutes": minutes})
    family = cell.recipe_family
    steps = vit_budget.sized_steps(family, timed, cell.name, cell.overrides)
    overrides = [
        *vit_budget.common_args(family, timed, cell.overrides),
        f"train.seed={seed}",
        f"train.steps={steps}",
        f"optim.warmup_steps={max(1, steps // 20)}",
        f"train.eval_every={max(1, steps // vit_budget.EVALUATIONS)}",
        f"train.checkpoint_every={max(1, steps // 4)}",
    ]
    return run_vitkit("train", Path(args.out) / (name or cell.name), overrides)


def best_of(cells: list[Cell], reports: dict[Cell, dict]) -> Cell:
    """The cell with the highest validation top-1 (the test set never chooses)."""
    return max(cells, key=lambda cell: reports[cell]["val_top1"])


def gflops(run_dir: Path) -> float:
    """Forward GFLOPs per image (every token) of the model a run trained."""
    model = vitkit.load_weights(run_dir)
    return count_flops(model, model.config.input_size, every_token=True) / 1e9


def longer(cell: Cell) -> str:
    """The run directory of `cell` at the refinement budget."""
    return f"{cell.name}_longer"


def final(cell: Cell, seed: int) -> str:
    """The run directory of `cell` at the full budget."""
    return f"final_{cell.name}_s{seed}"


def contenders(best: Cell, cells: list[Cell], reports: dict[Cell, dict]) -> list[Cell]:
    """`best`, and in its shape its rival: the best grid cell (by the short budget's validation top-1) of another
    augmentation level."""
    rival = best_of([cell for cell in cells if cell.augmentation != best.augmentation], reports)
    return [best, replace(rival, shape=best.shape)]


def described(cell: Cell) -> dict[str, Any]:
    return {"augmentation": cell.augmentation, "regularisation": cell.regularisation, "shape": cell.shape,
            "overrides": list(cell.overrides)}  # fmt: skip


def run_grid(args: argparse.Namespace, families: list[Family]) -> Path:
    reports: dict[Cell, dict] = {}  # at the short budget
    refined: dict[Cell, dict] = {}  # at the longer one
    chosen: dict[str, list[Cell]] = {}  # the contenders
    minutes = args.short_minutes * args.refine_scale
    for family in families:
        cells = grid(family)
        for cell in cells:
            reports[cell] = train_cell(cell, args, args.short_minutes)
        finalists = sorted(cells, key=lambda cell: reports[cell]["val_top1"], reverse=True)[: args.refine]
        for cell in finalists:
            refined[cell] = train_cell(cell, args, minutes, name=longer(cell))
        variants = shapes(best_of(finalists, refined))
        for cell in variants:
            refined[cell] = refined.get(cell) or train_cell(cell, args, minutes, name=longer(cell))
        chosen[family.name] = contenders(best_of(variants, refined), cells, reports)
    path = Path(args.out) / "choices.json"
    choices = json.loads(path.read_text()) if path.exists() else {}
    choices |= {name: [described(cell) for cell in cells] for name, cells in chosen.items()}
    path.write_text(json.dumps(choices, indent=1) + "\n")

    figure, axes = plt.subplots(1, len(families), figsize=(5.5 * len(families), 4.5), squeeze=False)
    header = [
        "family",
        "augmentation",
        "regularisation",
        "shape",
        "budget (min)",
        "wall (min)",
        "GFLOPs",
        "steps",
        "validation top-1",
        "test top-1",
    ]
    rows = []
    for ax, family in zip(axes[0], families, strict=True):
        regs = list(REGULARISATION[family.name])
        table = [[100 * reports[Cell(family, a, r, grid(family)[0].shape)]["val_top1"] for r in regs]
                 for a in AUGMENTATION]  # fmt: skip
        image = ax.imshow(table, cmap="viridis")
        for i, j in itertools.product(range(len(table)), range(len(regs))):
            colour = "k" if image.norm(table[i][j]) > 0.6 else "w"  # viridis turns yellow: dark text there
            ax.text(j, i, f"{table[i][j]:.2f}", ha="center", va="center", color=colour, fontsize=9)
        ax.set(xticks=range(len(regs)), xticklabels=regs, yticks=range(len(AUGMENTATION)),
               yticklabels=list(AUGMENTATION), xlabel="regularisation", ylabel="augmentation",
               title=f"{family.name}: validation top-1 (%)")  # fmt: skip
        figure.colorbar(image, ax=ax, shrink=0.8)
    for runs, budget, directory in (
        (reports, args.short_minutes, lambda cell: cell.name),
        (refined, minutes, longer),
    ):
        for cell, r in runs.items():
            mark = " (best)" if runs is refined and cell == chosen[cell.family.name][0] else ""
            name = directory(cell)
            rows.append([cell.family.name + mark, cell.augmentation, cell.regularisation, cell.shape, f"{budget:g}",
                         f"{r['wall_seconds'] / 60:.1f}", f"{gflops(Path(args.out) / name):.3f}", r["steps"],
                         f"{100 * r['val_top1']:.2f}%", f"{100 * r['test_top1']:.2f}%"])  # fmt: skip
    notes = (
        f"The grid: {args.short_minutes:g} min of this machine a run; its best {args.refine} cells of each family and "
        f"the shapes: {minutes:g} min. Every run (steps sized from probes of "
        f"{args.probe_steps} and {2 * args.probe_steps} steps, one pair per cell), {args.val_split} training images "
        f"held out for validation, {args.processes} process(es). Augmentation: "
        + "; ".join(f"{k}: {' '.join(v)}" for k, v in AUGMENTATION.items())
        + ". Regularisation: "
        + "; ".join(f"{f} {k}: {' '.join(v)}" for f, regs in REGULARISATION.items() for k, v in regs.items())
        + ". The test column is shown, never used to choose. The contenders at the full budget: "
        + "; ".join(f"{name}: " + " and ".join(f"{c.augmentation} augmentation, {c.regularisation} regularisation, "
                                                f"{c.shape}" for c in cells) for name, cells in chosen.items())
        + "."
    )  # fmt: skip
    title = f"Augmentation x regularisation at {args.short_minutes:g} minutes a run, finalists and shapes at {minutes:g}"
    return write_results(Path(args.out), "small_data_grid", title, (header, rows), figure, notes)


@dataclass(frozen=True)
class Final:
    """A family's contender chosen at the full budget, its run at every seed, and its rival's at the first."""

    chosen: Cell
    runs: list[Path]
    rival: Cell
    rival_run: Path


def run_final(args: argparse.Namespace, families: list[Family]) -> Path:
    """Each family's two contenders at the full budget (seed 0), then the better of them on the validation split
    at the other seeds."""
    choices = json.loads((Path(args.out) / "choices.json").read_text())
    out, seeds = Path(args.out), SEEDS[: args.seeds]
    finals: dict[str, Final] = {}
    for family in families:
        cells = [
            Cell(family, c["augmentation"], c["regularisation"], c["shape"]) for c in choices[family.name]
        ]
        first = {
            cell: train_cell(cell, args, args.budget_minutes, seeds[0], final(cell, seeds[0]))
            for cell in cells
        }
        chosen = best_of(cells, first)
        for seed in seeds[1:]:
            train_cell(chosen, args, args.budget_minutes, seed, final(chosen, seed))
        rival = next(cell for cell in cells if cell != chosen)
        finals[family.name] = Final(
            chosen, [out / final(chosen, s) for s in seeds], rival, out / final(rival, seeds[0])
        )
    return tabulate_final(finals, args)


def tabulate_final(finals: dict[str, Final], args: argparse.Namespace) -> Path:
    test = load_dataset("fashion_mnist", "test")
    fp32 = choose_precision("fp32", "cpu")
    header = ["model", "augmentation", "regularisation", "shape", "validation top-1 (seed 0)",
              "test top-1 (mean ± std)", "per seed", *(f"time to {t:g}% (validation)" for t in TARGETS)]  # fmt: skip
    rows = []
    figure, ax = plt.subplots(figsize=(7, 4.5))
    for name, f in finals.items():
        for cell, runs, mark in ((f.chosen, f.runs, " (chosen)"), (f.rival, [f.rival_run], "")):
            reports = [json.loads((run / "report.json").read_text()) for run in runs]
            reached = []
            for target in TARGETS:
                times = [
                    next((m for m, a in evaluations(run, "val_top1") if a >= target), None) for run in runs
                ]
                reached.append(", ".join("not reached" if t is None else f"{t:.1f} min" for t in times))
            rows.append([name + mark, cell.augmentation, cell.regularisation, cell.shape,
                         f"{100 * reports[0]['val_top1']:.2f}%", percent([r["test_top1"] for r in reports]),
                         ", ".join(f"{100 * r['test_top1']:.2f}%" for r in reports), *reached])  # fmt: skip
        for seed, run in enumerate(f.runs):
            ax.plot(*zip(*evaluations(run, "val_top1"), strict=True), "o-", ms=3, label=f"{name} seed {seed}")
    pairs = []
    if len(finals) == len(FAMILIES):  # ViT against ResNet, seed by seed
        vit, resnet = finals[VIT.name].runs, finals[RESNET.name].runs
        pairs = [paired_test(predictions(vitkit.load_weights(v).eval(), test, fp32),
                             predictions(vitkit.load_weights(r).eval(), test, fp32), test.labels).describe()
                 for v, r in zip(vit, resnet, strict=True)]  # fmt: skip
    for target in TARGETS:
        ax.axhline(target, color="grey", ls="--", lw=1)
    ax.set(
        xlabel="engine wall time (minutes)", ylabel="validation top-1 (%)", title="The chosen ViT and ResNet"
    )
    ax.set_ylim(85, 95)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    notes = (
        f"Every run: {args.budget_minutes:g} minutes of this machine, {args.val_split} training images held out "
        "for the choice and the curves, the test set reports only. "
        + ("ViT against ResNet, seed by seed (exact McNemar): " if pairs else "")
        + "; ".join(f"seed {s}: {text}" for s, text in enumerate(pairs))
    )
    title = f"The chosen recipes at {args.budget_minutes:g} minutes, {args.seeds} seeds"
    return write_results(Path(args.out), "small_data_final", title, (header, rows), figure, notes)


def main(argv: list[str] | None = None) -> Path:
    p = vit_budget.parser(__doc__.splitlines()[0], "runs/small_data")
    p.add_argument("--short-minutes", type=float, default=2.0, help="budget of each grid run (default 2)")
    p.add_argument("--budget-minutes", type=float, default=30.0, help="budget of each final run (default 30)")
    p.add_argument(
        "--probe-steps", type=int, default=100, help="steps of the shorter speed probe (n, then 2n)"
    )
    p.add_argument(
        "--refine", type=int, default=3, help="grid cells of each family run again longer (default 3)"
    )
    p.add_argument("--refine-scale", type=float, default=2.0, help="their budget over the grid's (default 2)")
    p.add_argument("--val-split", type=int, default=5000, help="training images held out to choose on")
    p.add_argument(
        "--seeds", type=int, default=len(SEEDS), help="seeds of each family's chosen contender (default 3)"
    )
    p.add_argument("--final", action="store_true", help="stage 2: the choices at the full budget")
    p.add_argument("--family", choices=FAMILIES, help="one family's part of the stage (default both)")
    args = p.parse_args(argv)
    families = [FAMILIES[args.family]] if args.family else list(FAMILIES.values())
    if args.final:
        minutes = len(families) * (args.seeds + 1) * args.budget_minutes
        print(
            f"stage 2: about {minutes:g} minutes of this machine, less the runs already in --out", flush=True
        )
        return run_final(args, families)
    short = sum(len(grid(f)) for f in families)
    longer_runs = sum(args.refine + len(SHAPES[f.name]) - 1 + (f is VIT) for f in families)
    total = (
        (short + longer_runs) * 0.5
        + short * args.short_minutes
        + longer_runs * args.short_minutes * args.refine_scale
    )
    print(f"stage 1: {short} runs of {args.short_minutes:g} min and {longer_runs} of "
          f"{args.short_minutes * args.refine_scale:g}, about {total:.0f} "
          "minutes of this machine with their speed probes, less the runs already in --out", flush=True)  # fmt: skip
    return run_grid(args, families)


if __name__ == "__main__":
    main()
