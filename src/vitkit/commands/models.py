"""`vitkit models [PATTERN]`: the registry with parameter counts and GFLOPs per image, and the input they are for.

A count depends on the input: the position embedding grows with the resolution, the patch embedding with the
channels, the head with the classes. Each row names its input (channels x height x width) and the header the
classes; `--img-size`, `--in-chans`, `--num-classes` count at another shape, `--config RECIPE` at a recipe's
(its model and overrides).
"""

from __future__ import annotations

import argparse
from typing import Any

from vitkit.flops import count_flops, count_parameters
from vitkit.models.registry import MODELS, create_model, list_models
from vitkit.recipe.resolve import load_config


def selection(args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    """The model names to count and the config fields they are counted with."""
    overrides: dict[str, Any] = {}
    names = list_models(args.pattern)
    if args.config:
        model = load_config(args.config).model
        if not model.name:
            raise ValueError(
                f"{args.config}: [model] names no registry model to count (model.weights fine-tunes)"
            )
        names, overrides = [model.name], dict(model.overrides)
    elif not names:
        raise ValueError(f"no model matches {args.pattern!r}")
    shape = {"img_size": args.img_size, "in_chans": args.in_chans}
    overrides.update({key: value for key, value in shape.items() if value is not None})
    overrides["num_classes"] = args.num_classes
    return names, overrides


def run(args: argparse.Namespace) -> int:
    names, overrides = selection(args)
    print(
        f"parameters and GFLOPs per image of a {args.num_classes}-class model at the input shown (C x H x W)"
    )
    timm_names = {name: next(iter(MODELS[name].aliases if name in MODELS else ()), "-") for name in names}
    width, timm_width = max(16, *map(len, names)), max(26, *map(len, timm_names.values()))
    print(f"{'model':<{width}} {'timm name':<{timm_width}} {'input':>11} {'params':>14} {'GFLOPs':>9}")
    for name in names:
        model = create_model(name, device="meta", **overrides)
        shape = "x".join(str(size) for size in model.config.input_size)
        gflops = count_flops(model, model.config.input_size, every_token=True) / 1e9
        print(
            f"{name:<{width}} {timm_names[name]:<{timm_width}} {shape:>11} {count_parameters(model):>14,} "
            f"{gflops:>9.2f}"
        )
    return 0
