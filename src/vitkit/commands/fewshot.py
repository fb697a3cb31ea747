"""`vitkit fewshot --weights W`: k-shot linear (least-squares) accuracy of frozen pre-logits features."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from vitkit import load_weights
from vitkit.commands import positive_int
from vitkit.commands._arguments import add_precision_argument
from vitkit.data import open_source
from vitkit.evaluate.fewshot import FewShotEvaluator
from vitkit.evaluate.weights import run_recipe
from vitkit.precision import inference_precision

HELP = "few-shot linear evaluation (closed-form ridge on frozen pre-logits features), mean/std over seeds"


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _float_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--weights", required=True, help="weights: any format vitkit.load_weights reads, run directories too"
    )
    parser.add_argument(
        "--data",
        help="data source: dataset name, folder:PATH, hf:PATH (default: a run's own data, else fashion_mnist)",
    )
    parser.add_argument("--data-dir", default=None, help="where the named dataset's files are")
    parser.add_argument(
        "--shots", type=_int_list, default=[1, 5, 10, 25], help="comma-separated (default 1,5,10,25)"
    )
    parser.add_argument(
        "--seeds", type=positive_int, default=3, help="number of sampled subsets (seeds 0..n-1)"
    )
    parser.add_argument(
        "--l2",
        type=_float_list,
        default=[1024.0],
        help="ridge regularisation; comma-separated values share one eigendecomposition (default 1024)",
    )
    parser.add_argument(
        "--num-test", type=positive_int, default=None, help="cap on test images (fixed subset)"
    )
    parser.add_argument("--batch-size", type=positive_int, default=256, help="feature-extraction batch size")
    parser.add_argument("--device", default="cpu", help="torch device for feature extraction")
    add_precision_argument(parser, what="feature extraction in ")
    parser.add_argument("--out", default=None, help="write the results as JSON to this file")


def run(args: argparse.Namespace) -> int:
    model = load_weights(args.weights)
    model.to(torch.device(args.device))
    recipe = run_recipe(args.weights)
    own = args.data is None and recipe is not None  # a run, measured on its own data
    data = recipe.data.source if own else args.data or "fashion_mnist"
    data_dir = args.data_dir or (recipe.data.data_dir if own else None)
    train = open_source(data, "train", data_dir)
    test = open_source(data, "test", data_dir)
    precision = inference_precision(args.precision, model, args.batch_size)
    evaluator = FewShotEvaluator(
        train,
        test,
        shots=args.shots,
        seeds=args.seeds,
        l2=args.l2,
        num_test=args.num_test,
        batch_size=args.batch_size,
        precision=precision,
    )
    start = time.perf_counter()
    with precision.held(model):
        report = evaluator.evaluate(model)
    total = time.perf_counter() - start
    report = {
        "weights": str(args.weights),
        "data": data,
        "classes": list(train.classes),
        "train_source": train.description,
        "test_source": test.description,
        **report,
        "total_seconds": total,
    }

    report.update(precision.record())
    print(f"train: {train.description}")
    print(f"classes ({len(train.classes)}): {', '.join(train.classes)}")
    print(f"device {precision.device}, precision {precision}")
    print(f"test:  {test.description} ({report['num_test']} images used)")
    print(
        f"features: dim {report['feature_dim']}, {report['num_train_images']} train + "
        f"{report['num_test']} test images in {report['extract_seconds']:.2f}s; "
        f"l2 {report['l2']:g}; seeds {report['seeds']}"
    )
    print(f"{'shots':>5}  {'mean':>7}  {'std':>7}  {'solve (s)':>9}  runs")
    for k, entry in report["shots"].items():
        runs = " ".join(f"{r:.4f}" for r in entry["runs"])
        solve = report["solve_seconds"][k]
        print(f"{k:>5}  {entry['mean']:>7.4f}  {entry['std']:>7.4f}  {solve:>9.4f}  {runs}")
    for l2, per_shot in report.get("by_l2", {}).items():
        means = "  ".join(f"{k}-shot {e['mean']:.4f}" for k, e in per_shot.items())
        print(f"l2 {float(l2):g}: {means}")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0
