"""`train.fit = "linear"`: the paper's cheap transfer (§4.1: a linear head on frozen pre-logits features, solved in
closed form) as a run a user deploys, not only an evaluation.

The features of every training image go through the pretrained weights once (vitkit.training.features keeps them
on disk); a regularised least-squares head onto {-1, 1}^K targets is solved as the few-shot evaluation solves it
(vitkit.evaluation.fewshot: one eigendecomposition serves every l2), its l2 chosen from `train.linear_l2` by
stratified 5-fold cross-validation on the training images (each image held out once; ties go to the stronger
regularisation), then solved on all of them. The solution, folded into raw features (`RidgeCache.affine`),
becomes the weights' zero-initialised head: final/ is an ordinary classifier with the data's class names, and the
run directory (config.toml, run.json, report.json, confusion.png) is read by predict, eval and convert like any
other. Test and validation accuracy are measured on their cached features.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from vitkit.data.subset import check_indexable
from vitkit.device import resolve_device
from vitkit.evaluation.confusion import plot_confusion
from vitkit.evaluation.fewshot import lsr_accuracy, precompute
from vitkit.flops import count_parameters
from vitkit.models.registry import Model
from vitkit.precision import inference_precision
from vitkit.sizes import to_pair
from vitkit.storage import FINAL_DIR, save_pretrained
from vitkit.training.build import build_run_model, open_data
from vitkit.training.features import FeatureStore, split_features, store_path
from vitkit.training.objectives import objective_for
from vitkit.training.provenance import record_start, start_record
from vitkit.training.recipe import RunConfig
from vitkit.training.report import CONFUSION_NAME, count_skipped, write_report
from vitkit.training.rundir import RunDirLock, create_run_dir, open_run_dir

FOLDS = 5


def fold_of(labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Each image's fold in [0, folds): every class dealt round the folds in an order drawn with `seed`."""
    rng = np.random.default_rng(seed)
    fold = np.zeros(len(labels), dtype=np.int64)
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        fold[members] = np.arange(len(members)) % folds
    return fold


def cross_validated(
    x: np.ndarray, y: np.ndarray, num_classes: int, l2s: list[float], seed: int, folds: int = FOLDS
) -> dict[float, float]:
    """{l2: accuracy on held-out images} of the closed-form head, each image held out once."""
    fold = fold_of(y, min(folds, len(y)), seed)
    correct = np.zeros(len(l2s))
    for held_out_fold in range(int(fold.max()) + 1):
        out = fold == held_out_fold
        accuracy = lsr_accuracy(x[~out], y[~out], x[out], y[out], num_classes, l2s)
        correct += [accuracy[l2] * out.sum() for l2 in l2s]
    return {l2: float(c / len(y)) for l2, c in zip(l2s, correct, strict=True)}


def chosen_l2(accuracy: dict[float, float]) -> float:
    """The most accurate l2; the largest of equally accurate ones (the smoother head)."""
    return max(accuracy, key=lambda l2: (accuracy[l2], l2))


def top_k(scores: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Share of images whose label is among their `k` highest scores."""
    best = np.argsort(-scores, axis=1)[:, :k]
    return float((best == labels[:, None]).any(axis=1).mean()) if len(labels) else 0.0


def set_head(model: Model, a: np.ndarray, b: np.ndarray) -> None:
    """The head computes x @ a + b: the closed-form solution on raw pre-logits features."""
    head = cast(torch.nn.Linear, model.head)
    with torch.no_grad():
        head.weight.copy_(torch.from_numpy(a.T.astype(np.float32)))
        head.bias.copy_(torch.from_numpy(b.astype(np.float32)))


def fit_linear(config: RunConfig, run_dir: Path, command: list[str] | None = None) -> dict[str, Any]:
    """Fit the head of `config` (train.fit='linear') into a new run directory `run_dir`; returns report.json."""
    lock = RunDirLock(run_dir)
    try:
        return _fit(config.validate(), run_dir, lock, command)
    finally:
        lock.release()


def _fit(config: RunConfig, run_dir: Path, lock: RunDirLock, command: list[str] | None) -> dict[str, Any]:
    train = config.train
    open_run_dir(run_dir, lock, resume=False)  # a new run, never over another
    device = resolve_device(train.device)
    if train.threads:
        torch.set_num_threads(train.threads)
    data = open_data(config.data, device)
    for source in (data.train, data.test):  # images keyed by index, labels read by index
        check_indexable(source, "train.fit='linear'")
    classes = list(data.train.classes)
    model = cast(
        Model, build_run_model(config, objective_for(config.train), classes, None).to(device)
    )  # a classifier: the model itself
    precision = inference_precision(train.precision, model, train.eval_batch())
    size = "x".join(str(side) for side in to_pair(model.config.img_size))
    print(
        f"linear head on frozen features: {config.model.weights} ({count_parameters(model) / 1e6:.2f}M "
        f"parameters at {size}), {len(classes)} classes; data {data.train.description}; device {device}; "
        f"precision {precision}; run directory {run_dir}",
        flush=True,
    )
    clock = time.perf_counter()  # as the engine's: from the data and model built to the last evaluation
    store = FeatureStore(store_path(model, precision))
    start = time.perf_counter()
    splits = {"train": data.train, "test": data.test}
    splits |= {"validation": data.validation} if data.validation is not None else {}
    features: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    skipped: list[str] = []
    known = len(store.rows)
    for name, source in splits.items():
        x, y, lost = split_features(model, source, store, precision, train.eval_batch(), f"{name} features")
        features[name], skipped = (x, y), skipped + lost
        store.save()  # what is computed is kept, also when a later split fails
    feature_seconds = time.perf_counter() - start

    x, y = features["train"]
    if len(y) < 2:
        raise ValueError(f"{data.train.description}: a linear head needs at least 2 readable training images")
    start = time.perf_counter()
    validated = cross_validated(x, y, len(classes), [float(v) for v in train.linear_l2], train.seed)
    l2 = chosen_l2(validated)
    a, b = precompute(x, y, len(classes)).affine(l2)
    solve_seconds = time.perf_counter() - start
    print(
        f"l2 {l2:g}: {100 * validated[l2]:.2f}% on held-out training images ({FOLDS}-fold); "
        + ", ".join(f"{v:g}: {100 * acc:.1f}%" for v, acc in validated.items()),
        flush=True,
    )
    set_head(model, a, b)

    evaluations: dict[str, Any] = {}
    confusion = None
    for name, prefix in (("test", "test"), ("validation", "val")):
        if name not in features:
            continue
        xs, ys = features[name]
        scores = xs.astype(np.float64) @ a + b
        evaluations[f"{prefix}_top1"] = top_k(scores, ys, 1)
        if name == "test":
            evaluations["test_top5"] = top_k(scores, ys, min(5, len(classes)))
            pairs = torch.from_numpy(ys * len(classes) + scores.argmax(1))
            confusion = torch.bincount(pairs, minlength=len(classes) ** 2).view(len(classes), len(classes))

    wall_seconds = time.perf_counter() - clock
    create_run_dir(run_dir, config, lock)
    record = start_record(device, command)
    record_start(run_dir, record)
    save_pretrained(model.cpu(), run_dir / FINAL_DIR)
    if confusion is not None and int(confusion.sum()):
        plot_confusion(confusion, data.test.classes, run_dir / CONFUSION_NAME, data.test.description)
    report = {
        **evaluations,
        "fit": "linear",
        "l2": l2,
        "cross_validated_top1": {f"{v:g}": acc for v, acc in validated.items()},
        "train_images": len(y),
        "test_images": len(features["test"][1]),
        "features_computed": len(store.rows) - known,
        "feature_seconds": feature_seconds,
        "solve_seconds": solve_seconds,
        "wall_seconds": wall_seconds,
        **precision.record(),
        "skipped_images": count_skipped(skipped),
        "objective": train.objective,
        "parameters": count_parameters(model),
        "train_data": data.train.description,
        "test_data": data.test.description,
        "run_dir": str(run_dir),
        "start": record,
    }
    if data.validation is not None:
        report |= {"val_data": data.validation.description, "val_images": len(features["validation"][1])}
    write_report(run_dir, report)
    return report
