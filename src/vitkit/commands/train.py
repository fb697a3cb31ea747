"""`vitkit train`: train from a TOML recipe (default: the five-minute Fashion-MNIST ViT), then evaluate.

Also the shared front end of `vitkit finetune`: flags and overrides resolve into one RunConfig.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vitkit.device import resolve_device
from vitkit.training import run_training
from vitkit.training.annotated import annotated_toml
from vitkit.training.distributed import check_gpus_per_process, launch_processes, launched_world_size
from vitkit.training.overrides import load_config, parse_override, set_value
from vitkit.training.recipe import RECIPE_NAME, RESUME_MAY_CHANGE, RunConfig
from vitkit.training.report import format_metrics
from vitkit.training.resolve import default_run_dir, resolve


def run(args: argparse.Namespace) -> int:
    return resolve_and_train(args, RunConfig(), "fashion_mnist_vit_default", {})


def resolve_and_train(args: argparse.Namespace, base: Any, default_name: str, fixed: dict[str, Any]) -> int:
    """Resolve the recipe, train, and print the final evaluations and the run directory (train and finetune)."""
    if args.resume and not args.out:
        raise ValueError("--resume needs --out, the run directory to continue")
    out = (
        Path(args.out)
        if args.out
        else default_run_dir(Path(args.config).stem if args.config else default_name)
    )
    if args.resume:
        config = check_resume(out, args, base, fixed)
    else:
        config = resolve_config(args, load_config(args.config, base) if args.config else base, fixed)
    if args.print_config:
        print(annotated_toml(config), end="")
        return 0
    if config.train.processes > 1 and launched_world_size() == 1:
        check_gpus_per_process(resolve_device(config.train.device), config.train.processes)
        argv = args.argv if args.out else [*args.argv, "--out", str(out)]  # every process names the same run
        return launch_processes(config.train.processes, config.train.threads, argv)
    # a diverged loss (NonFiniteLoss) exits 1 via vitkit.cli
    report = run_training(config, out, resume=args.resume, command=["vitkit", *args.argv])
    if not report:  # ranks other than 0 under torchrun: rank 0 prints and writes the run directory
        return 0
    work = (
        f"{report['train_images']} training images"
        if report.get("fit") == "linear"
        else f"{report['steps']} steps"
    )
    rate = f" ({report['images_per_second']:.0f} img/s)" if "images_per_second" in report else ""
    print(
        f"{format_metrics(report)}  on {report['test_data']} ({report['test_images']} images); {work} in "
        f"{report['wall_seconds']:.0f} s{rate}"
    )
    print(f"run directory: {out}  (weights: {out}/final, report: {out}/report.json)")
    return 0


def resolve_config(args: argparse.Namespace, config: Any, fixed: dict[str, Any]) -> Any:
    """Apply command-specific fixed values, the flag shorthands, then the section.field=value overrides
    (vitkit.training.resolve: the run length fitted, the model settled and said)."""
    overrides = [(key, value) for item in args.overrides for key, value in [parse_override(item)]]
    settings = [*fixed.items(), *_flags(args).items(), *overrides]
    quiet = launched_world_size() > 1 or args.print_config  # the processes a launcher starts stay quiet
    return resolve(config, settings, epochs=args.epochs, say=None if quiet else print)


def check_resume(out: Path, args: argparse.Namespace, base: Any, fixed: dict[str, Any]) -> Any:
    """The saved recipe of the run. What the command line gives (a --config, flags, overrides) must agree with
    it, so a resume stays exact, except in the keys that decide how data is read, not what is computed
    (RESUME_MAY_CHANGE: data.workers, data.prefetch, data.on_corrupt); the error names each differing field with
    both values."""
    saved_path = out / RECIPE_NAME
    if not saved_path.is_file():
        raise FileNotFoundError(f"{saved_path}: missing; {out} is not a run directory to resume")
    saved = load_config(saved_path).validate()
    given = resolve_config(
        args, load_config(args.config, base) if args.config else load_config(saved_path), fixed
    )
    old, new = saved.to_dict(), given.to_dict()
    changed = {
        f"{section}.{key}": (old[section].get(key), new[section].get(key))
        for section in new
        for key in sorted({**old[section], **new[section]})
        if old[section].get(key) != new[section].get(key)
    }
    differs = [
        f"{key} is {saved_value!r} in the run, {given_value!r} on the command line"
        for key, (saved_value, given_value) in changed.items()
        if key not in RESUME_MAY_CHANGE
    ]
    if differs:
        raise ValueError(
            f"--resume: the recipe differs from the saved {saved_path}: {'; '.join(differs)} "
            f"(a resume continues the saved recipe: drop the change, or start a new run with another --out)"
        )
    for key in changed:
        section, _, name = key.partition(".")
        set_value(saved, key, getattr(getattr(given, section), name))
    return saved


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags = {
        "model.name": args.model,
        "optim.lr": args.lr,
        "train.batch_size": args.batch_size,
        "train.steps": args.steps,
        "train.seed": args.seed,
        "train.checkpoint_every": args.checkpoint_every,
        "data.data_dir": args.data_dir,
        "train.precision": args.precision,
    }
    return {key: value for key, value in flags.items() if value is not None}
