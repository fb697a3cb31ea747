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

from vitkit.evaluation.fewshot import lsr_accuracy, precompute
from vitkit.models.registry import Model
from vitkit.recipe.run_config import RunConfig
from vitkit.training.frozen_fit import cache_features, evaluate_scores, open_fit, write_fitted_run
from vitkit.training.rundir import RunDirLock

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


def set_head(model: Model, a: np.ndarray, b: np.ndarray) -> None:
    """The head computes x @ a + b: the closed-form solution on raw pre-logits features."""
    head = cast(torch.nn.Linear, model.head)
    with torch.no_grad():
        head.weight.copy_(torch.from_numpy(a.T.astype(np.float32)))
        head.bias.copy_(torch.from_numpy(b.astype(np.float32)))


def fit_linear(
    config: RunConfig,
    run_dir: Path,
    command: list[str] | None = None,
    quiet: bool = False,
    resume: bool = False,
) -> dict[str, Any]:
    """Fit the head of `config` (train.fit='linear') into a new run directory `run_dir`; returns report.json.
    `quiet` prints nothing. Nothing to resume (`resume` is refused): an interrupted fit keeps the features it
    computed, and the same command computes only the others."""
    if resume:
        raise ValueError(
            "train.fit='linear' has no steps to resume: fit again into a new --out (the features are cached)"
        )
    lock = RunDirLock(run_dir)
    try:
        return _fit(config.validate(), run_dir, lock, command, quiet)
    finally:
        lock.release()


def _fit(
    config: RunConfig, run_dir: Path, lock: RunDirLock, command: list[str] | None, quiet: bool
) -> dict[str, Any]:
    train = config.train
    fit = open_fit(config, run_dir, lock, "linear head on frozen features", quiet)
    cache_features(fit)
    x, y = fit.features["train"]
    start = time.perf_counter()
    validated = cross_validated(x, y, len(fit.classes), [float(v) for v in train.linear_l2], train.seed)
    l2 = chosen_l2(validated)
    a, b = precompute(x, y, len(fit.classes)).affine(l2)
    solve_seconds = time.perf_counter() - start
    fit.say(
        f"l2 {l2:g}: {100 * validated[l2]:.2f}% on held-out training images ({FOLDS}-fold); "
        + ", ".join(f"{v:g}: {100 * acc:.1f}%" for v, acc in validated.items())
    )
    set_head(fit.model, a, b)
    evaluations, confusion = evaluate_scores(fit, lambda xs: xs.astype(np.float64) @ a + b)
    report = {
        **evaluations,
        "fit": "linear",
        "l2": l2,
        "cross_validated_top1": {f"{v:g}": acc for v, acc in validated.items()},
        "solve_seconds": solve_seconds,
    }
    return write_fitted_run(fit, lock, command, confusion, report)
