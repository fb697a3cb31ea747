"""`vitkit models [PATTERN]`: the registry with parameter counts and GFLOPs per image."""

from __future__ import annotations

import argparse

from vitkit.flops import count_flops, count_parameters
from vitkit.models.registry import MODELS, create_model, list_models

HELP = "list registered models with parameters and GFLOPs per image"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pattern", nargs="?", default="*", help="glob on paper or timm names, e.g. 'ViT-B*'")
    parser.add_argument("--num-classes", type=int, default=1000)


def run(args: argparse.Namespace) -> int:
    names = list_models(args.pattern)
    if not names:
        raise ValueError(f"no model matches {args.pattern!r}")
    print(f"{'model':<16} {'timm name':<26} {'params':>14} {'GFLOPs':>9}")
    for name in names:
        model = create_model(name, device="meta", num_classes=args.num_classes)
        gflops = count_flops(model, model.config.input_size, every_token=True) / 1e9
        print(
            f"{name:<16} {next(iter(MODELS[name].aliases), '-'):<26} {count_parameters(model):>14,} {gflops:>9.2f}"
        )
    return 0
