"""The options of `vitkit bench`: one sub-parser per benchmark module of vitkit.bench (its NAME and HELP read
from its source, like the commands' own), built without importing torch, which the benchmarks import when they run
(vitkit.commands.bench)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from vitkit.commands._arguments import PACKAGE_DIR, literal, source_literals

HELP = (
    "throughput (vs timm, transformers, torchvision), MFU, peak memory, resolution sweep, training step, "
    "bf16 vs fp32, input pipeline, serving runtimes"
)
PEERS = literal("vitkit.bench.peers", "PEERS")
CLOCKS = literal("vitkit.bench.timing", "CLOCK_NAMES")


def comma_ints(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]."""
    return [int(v) for v in text.split(",") if v]


def comma_names(text: str) -> list[str]:
    """'ViT-S/16, ViT-B/16' -> ['ViT-S/16', 'ViT-B/16']."""
    return [v.strip() for v in text.split(",") if v.strip()]


def add_clock(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="wall",
        help="wall time, or this process's CPU time (less noisy on a shared machine; use --threads 1)",
    )


def add_bench_precision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16", "both"),
        default="fp32",
        help="fp32, bf16 autocast (with vitkit fp32 and the bf16 GEMM ceiling in the same rounds), or both; "
        "a last row says what --precision auto picks here and why",
    )


def add_bench_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    add_gemm_size(parser)


def add_gemm_size(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gemm-size",
        type=int,
        default=2048,
        help="n of the n^3 GEMM ceiling (default 2048; smaller where bf16 is emulated and slow)",
    )


def add_timing_options(parser: argparse.ArgumentParser) -> None:
    """--precision, --device and its GEMM ceiling, --clock: what the model benchmarks time in and with."""
    add_bench_precision(parser)
    add_bench_device(parser)
    add_clock(parser)


def add_model_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--model", default="ViT-B/16", help=f"{what} (default ViT-B/16)")
    parser.add_argument("--img-size", type=int, default=None, help="input size (default: the model's)")


def add_recipe_options(parser: argparse.ArgumentParser) -> None:
    """--config and --batch-size: the benchmarks of the engine's training step."""
    parser.add_argument(
        "--config",
        default=None,
        help="the recipe (TOML) whose model and data to time (default: the default recipe)",
    )
    parser.add_argument("--batch-size", type=int, default=None, help="default: the recipe's train.batch_size")


def _inference_options(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser, "registered plain ViT")
    parser.add_argument("--batch-size", type=int, default=8, help="default 8")
    parser.add_argument("--peers", type=comma_names, default=list(PEERS), help="comma-separated peers")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls of each candidate first")
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile every candidate for inference (weights frozen)"
    )
    add_timing_options(parser)


def _batch_options(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser, "registered model")
    parser.add_argument(
        "--batch-sizes", type=comma_ints, default=[1, 2, 4, 8, 16, 32], help="comma-separated"
    )
    parser.add_argument("--peer", choices=PEERS, default=None, help="also sweep this peer")
    add_timing_options(parser)


def _resolution_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models",
        type=comma_names,
        default=["ViT-S/16", "ViT-B/16", "R50+ViT-B/16"],
        help="comma-separated registered models",
    )
    parser.add_argument("--sizes", type=comma_ints, default=[160, 224, 288, 384], help="input sizes")
    parser.add_argument("--batch-size", type=int, default=4, help="default 4")
    parser.add_argument("--budget-gib", type=float, default=16.0, help="memory budget for the largest batch")
    parser.add_argument("--no-memory", action="store_true", help="skip the largest-batch measurement")
    parser.add_argument("--plot", default=None, help="write the D.5 figure (PNG) here")
    parser.add_argument(
        "--precision", choices=("fp32", "bf16"), default="fp32", help="float32 or bf16 autocast"
    )
    add_gemm_size(parser)
    add_clock(parser)


def _checkpointing_options(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser, "registered model")
    parser.add_argument("--batch-size", type=int, default=32, help="default 32")
    parser.add_argument("--time-rounds", type=int, default=0, help="also time both steps, alternated")
    parser.add_argument(
        "--budget-gib",
        type=float,
        default=16.0,
        help="memory budget of the largest-batch column (default 16 GiB, a TPUv3 core)",
    )
    add_timing_options(parser)


def _training_options(parser: argparse.ArgumentParser) -> None:
    add_recipe_options(parser)
    parser.add_argument("--steps", type=int, default=10, help="steps per round per candidate")
    parser.add_argument(
        "--processes",
        type=int,
        default=0,
        help="also time the engine in N one-thread processes (train.processes=N)",
    )
    parser.add_argument(
        "--compile", action="store_true", help="also time the engine's step under torch.compile"
    )


def _train_precision_options(parser: argparse.ArgumentParser) -> None:
    add_recipe_options(parser)
    parser.add_argument("--model", default=None, help="replace the recipe's model, e.g. ViT-S/16 (at 224)")
    parser.add_argument("--steps", type=int, default=3, help="steps per round per precision (default 3)")
    add_bench_device(parser)
    add_clock(parser)
    grid = parser.add_argument_group("the table auto decides by (vitkit.precision_table)")
    grid.add_argument(
        "--table", default=None, help="measure the grid and write this CPU kind's rows into this JSON table"
    )
    grid.add_argument(
        "--check",
        action="store_true",
        help="measure the grid and print auto's unmeasured choice beside the faster precision; exit 1 where "
        "auto's takes more than 1.1x the faster one's time",
    )
    grid.add_argument(
        "--models",
        type=comma_names,
        default=["ViT-Ti/16", "ViT-S/16", "ViT-B/16", "ViT-L/16", "recipe"],
        help="the grid's models ('recipe': the recipe's own, at its batch)",
    )
    grid.add_argument("--batches", type=comma_ints, default=[1, 8, 32], help="the grid's batches")
    grid.add_argument(
        "--modes", type=comma_names, default=["inference", "training"], help="inference, training or both"
    )
    grid.add_argument("--img-size", type=int, default=224, help="the grid's input size (default 224)")
    grid.add_argument(
        "--depth", type=int, default=1, help="encoder blocks timed per model (default 1; 0: all of them)"
    )


def _data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="an ImageFolder: ROOT/train/<class>/<image> (the collection to read)")
    parser.add_argument("--workers", type=comma_ints, default=[0, 1, 2], help="comma-separated worker counts")
    parser.add_argument(
        "--models",
        type=comma_names,
        default=["ViT-S/16", "ViT-B/16"],
        help="comma-separated models whose training step to time",
    )
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=32, help="loader batch and training batch")
    parser.add_argument(
        "--train-batch-size",
        type=int,
        default=None,
        help="training batch (default: --batch-size); images/s barely depends on it on CPU",
    )
    parser.add_argument("--batches", type=int, default=20, help="batches timed per loader per round")


def _serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models", type=comma_names, default=["ViT-S/16", "ViT-B/16"], help="default ViT-S/16,ViT-B/16"
    )
    parser.add_argument("--batch-sizes", type=comma_ints, default=[1, 8], help="default 1,8")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls of each candidate first")
    parser.add_argument(
        "--device", default="auto", help="PyTorch's device: auto (CUDA when present), cpu, cuda:N"
    )
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile candidates")
    add_clock(parser)


BENCHMARKS: dict[
    str, Callable[[argparse.ArgumentParser], None]
] = {  # module of vitkit.bench -> its own options
    "inference": _inference_options,
    "batch_sizes": _batch_options,
    "resolution": _resolution_options,
    "checkpointing": _checkpointing_options,
    "training": _training_options,
    "train_precision": _train_precision_options,
    "input_pipeline": _data_options,
    "serving_runtimes": _serve_options,
}


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
    for module, add_options in BENCHMARKS.items():
        said = source_literals(Path(PACKAGE_DIR, "bench", f"{module}.py"), ("NAME", "HELP"))
        bench = sub.add_parser(said["NAME"], parents=[common], help=said["HELP"], description=said["HELP"])
        add_options(bench)
        bench.set_defaults(benchmark_module=f"vitkit.bench.{module}")
