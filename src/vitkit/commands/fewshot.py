"""`vitkit fewshot --weights W`: k-shot linear (least-squares) accuracy of frozen pre-logits features."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from vitkit import load_weights
from vitkit.data import open_source
from vitkit.evaluation.fewshot import FewShotEvaluator
from vitkit.evaluation.run_directory import run_recipe
from vitkit.precision import inference_precision


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
    with precision.weights_held(model):
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
