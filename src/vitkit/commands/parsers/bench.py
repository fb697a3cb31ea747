"""The options of `vitkit bench`: its parser, registered from each benchmark module of vitkit.bench, which imports torch: the one
command whose --help waits for it (vitkit.cli imports vitkit.commands.bench only to run it)."""

from __future__ import annotations

import argparse

from vitkit.bench import (
    batch_sizes,
    checkpointing,
    inference,
    input_pipeline,
    resolution,
    serving_runtimes,
    train_precision,
    training,
)

HELP = (
    "throughput (vs timm, transformers, torchvision), MFU, peak memory, resolution sweep, training step, "
    "bf16 vs fp32, input pipeline, serving runtimes"
)

BENCHMARKS = (
    inference,
    batch_sizes,
    resolution,
    checkpointing,
    training,
    train_precision,
    input_pipeline,
    serving_runtimes,
)


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--rounds", type=int, default=5, help="alternation rounds (medians over rounds; default 5)"
    )
    common.add_argument(
        "--threads", type=int, default=None, help="torch threads for everyone (default: torch's)"
    )
    common.add_argument("--json", default=None, help="also write the rows as JSON here")
    common.add_argument("--quiet", action="store_true", help="no per-round log on stderr")
    return common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = _common_options()
    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for module in BENCHMARKS:
        bench = sub.add_parser(module.NAME, parents=[common], help=module.HELP, description=module.HELP)
        module.add_arguments(bench)
        bench.set_defaults(benchmark_module=module)
