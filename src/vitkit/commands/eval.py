"""`vitkit eval --weights W`: top-1 / top-5 accuracy on a test split and a confusion-matrix PNG."""

from __future__ import annotations

import argparse

from vitkit import load_weights
from vitkit.commands import positive_int
from vitkit.data import open_source
from vitkit.device import resolve_device
from vitkit.evaluate import evaluate
from vitkit.precision import add_compile_argument, add_precision_argument, inference_precision
from vitkit.train.report import plot_confusion

HELP = "evaluate weights on a dataset split: top-1, top-5, loss and a confusion-matrix PNG"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--weights", required=True, help="run directory, vitkit weights dir, official .npz, timm/HF file"
    )
    parser.add_argument(
        "--data",
        default="fashion_mnist",
        help="data source: dataset name, folder:PATH, hf:PATH, wds:DIR (DATA.md)",
    )
    parser.add_argument("--data-dir", help="where the named dataset lives")
    parser.add_argument("--split", default="test", choices=("train", "test"))
    parser.add_argument("--on-corrupt", default="stop", choices=("stop", "skip"), help="unreadable images")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader processes decoding a lazy source")
    parser.add_argument("--batch-size", type=positive_int, default=500)
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda:1', ...")
    add_precision_argument(parser)
    add_compile_argument(parser)
    parser.add_argument(
        "--confusion", default="confusion_matrix.png", help="where to write the confusion matrix PNG"
    )


def run(args: argparse.Namespace) -> int:
    dataset = open_source(
        args.data, args.split, args.data_dir, on_corrupt=args.on_corrupt, workers=args.workers
    )
    device = resolve_device(args.device)
    model = load_weights(args.weights).to(device)
    precision = inference_precision(args.precision, model, args.batch_size)
    print(f"device {precision.device}, precision {precision}")
    with precision.inference(model, args.compile) as forward:
        result = evaluate(
            forward,
            dataset,
            batch_size=args.batch_size,
            device=device,
            autocast_dtype=precision.autocast_dtype,
        )
    path = plot_confusion(
        result.confusion, dataset.classes, args.confusion, f"{args.weights} on {dataset.source}"
    )
    print(f"{dataset.source} ({args.split}, {result.count} images)")
    print(f"top-1 {100 * result.top1:.2f}%  top-5 {100 * result.top5:.2f}%  loss {result.loss:.4f}")
    print(f"confusion matrix: {path}")
    return 0
