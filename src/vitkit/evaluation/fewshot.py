"""Few-shot linear evaluation on frozen representations (§4, "few-shot accuracy"; Appendix D).

The paper measures representations cheaply with a regularised least-squares regression from the frozen
pre-logits vector of k training images per class onto {-1, 1}^K targets, solved in closed form. The math
follows big_vision's evaluator (google-research/big_vision, big_vision/evaluators/fewshot_lsr.py):

* standardise with the *few-shot training* mean and population std (+ 1e-5), the same map for the test set;
* append a constant bias feature of value 100 (``BIAS_CONSTANT``): it is regularised like the other weights,
  but its scale makes the intercept almost unregularised (penalty l2 / 100^2 on the intercept);
* targets are one-hot rescaled to {-1, 1}; prediction is the argmax of the K regression outputs;
* with X the N x (D + 1) design matrix, the ridge solution W = (X^T X + l2 I)^-1 X^T Y (N >= D + 1) or
  X^T (X X^T + l2 I)^-1 Y (otherwise) is written, with the eigendecomposition Q diag(e) Q^T of X^T X (or
  X X^T), as lhs diag(1 / (e + l2)) rhs, so one `eigh` serves every regularisation value (default 2^10).

Subsets are also sampled as big_vision does: for each seed a numpy Generator permutes every class's
indices and the k-shot subset is the first k of each (without replacement; the 1-shot subset of a seed is
contained in its 5-shot subset, and so on). The test set is the whole test split, or a fixed cap.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from vitkit.data import eval_transform, gather_images
from vitkit.evaluation.loop import eval_mode
from vitkit.models import as_model
from vitkit.precision import Precision, choose_precision

BIAS_CONSTANT = 100.0
STD_EPS = 1e-5
DEFAULT_SHOTS = (1, 5, 10, 25)
DEFAULT_SEEDS = 3
DEFAULT_L2 = 2.0**10
TEST_SUBSET_SEED = 0  # the fixed permutation a `num_test` cap draws its test images from


# --- The closed-form regression ---


@dataclass
class RidgeCache:
    """What one eigendecomposition leaves behind: W(l2) = (lhs * 1 / (eigs + l2)) @ rhs for any l2."""

    mean: np.ndarray  # [1, D]
    std: np.ndarray  # [1, D]
    eigs: np.ndarray  # [M]   M = min(N, D + 1)
    lhs: np.ndarray  # [D + 1, M]
    rhs: np.ndarray  # [M, K]
    num_classes: int

    def weights(self, l2: float) -> np.ndarray:
        """The ridge weights [D + 1, K] (last row: the bias feature's) for regularisation `l2` > 0."""
        if not l2 > 0:
            raise ValueError(f"l2 must be positive, got {l2}")
        return (self.lhs * (1.0 / (self.eigs + l2))[None, :]) @ self.rhs

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Standardised features with the bias column appended: the design matrix the weights act on."""
        return with_bias((np.asarray(x, dtype=np.float64) - self.mean) / self.std)

    def affine(self, l2: float) -> tuple[np.ndarray, np.ndarray]:
        """The same classifier on *raw* features: scores = x @ A + b, with the standardisation and the bias
        feature folded in (A = W[:-1] / std^T, b = BIAS_CONSTANT * W[-1] - (mean / std) @ W[:-1]), so the
        test set is never copied or standardised."""
        w = self.weights(l2)
        a = w[:-1] / self.std.T
        return a, BIAS_CONSTANT * w[-1] - (self.mean @ a)[0]

    def predict(self, x: np.ndarray, l2: float) -> np.ndarray:
        """Predicted class indices (int64 [N]) of raw features `x`."""
        a, b = self.affine(l2)
        return np.argmax(np.asarray(x) @ a + b, axis=1)


def with_bias(x: np.ndarray) -> np.ndarray:
    """Append the constant bias feature (BIAS_CONSTANT) as the last column."""
    return np.pad(x, ((0, 0), (0, 1)), constant_values=BIAS_CONSTANT)


def signed_one_hot(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Targets in {-1, 1}^K: +1 at the label, -1 elsewhere."""
    return 2.0 * np.eye(num_classes, dtype=np.float64)[np.asarray(labels, dtype=np.int64)] - 1.0


def precompute(x: np.ndarray, y: np.ndarray, num_classes: int) -> RidgeCache:
    """Standardise, add the bias feature, and eigendecompose the smaller Gram matrix (big_vision's cache).

    x: features [N, D]; y: labels [N] in [0, num_classes). Everything runs in float64.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"expected features [N, D] and labels [N], got {x.shape} and {y.shape}")
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got range [{y.min()}, {y.max()}]")
    mean = x.mean(axis=0, keepdims=True)
    std = x.std(axis=0, keepdims=True) + STD_EPS
    xb = with_bias((x - mean) / std)
    targets = signed_one_hot(y, num_classes)
    num_points, dim = xb.shape
    if num_points >= dim:  # (X^T X + l2 I)^-1 X^T Y = Q diag(1/(e + l2)) Q^T X^T Y
        eigs, q = np.linalg.eigh(xb.T @ xb)
        lhs, rhs = q, q.T @ (xb.T @ targets)
    else:  # X^T (X X^T + l2 I)^-1 Y = X^T Q diag(1/(e + l2)) Q^T Y
        eigs, q = np.linalg.eigh(xb @ xb.T)
        lhs, rhs = xb.T @ q, q.T @ targets
    return RidgeCache(mean, std, eigs, lhs, rhs, num_classes)


def lsr_accuracy(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    num_classes: int,
    l2s: float | Sequence[float] = DEFAULT_L2,
) -> dict[float, float]:
    """Test accuracy of the least-squares classifier, {l2: accuracy} from a single eigendecomposition."""
    l2s = l2_list(l2s)
    with _small_blas():
        cache = precompute(x_train, y_train, num_classes)
        parts = [cache.affine(l2) for l2 in l2s]
        a = np.concatenate([p[0] for p in parts], axis=1)  # every l2 in one pass over the test set
        b = np.concatenate([p[1] for p in parts])
        scores = (np.asarray(x_test, dtype=np.float64) @ a + b).reshape(len(x_test), len(l2s), num_classes)
    correct = np.argmax(scores, axis=2) == np.asarray(y_test)[:, None]
    return {l2: float(acc) for l2, acc in zip(l2s, correct.mean(axis=0), strict=True)}


def _small_blas() -> contextlib.AbstractContextManager:
    """One BLAS thread for these small solves (a 193 x 193 eigh): on a shared, busy CPU, OpenBLAS threads
    contending with the training process wait for each other far longer than the solve takes. Uses threadpoolctl
    when installed."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


# --- Sampling and the evaluation over shots and seeds ---


def seed_list(seeds: int | Iterable[int]) -> list[int]:
    """`3` -> [0, 1, 2]; an iterable of seeds is taken as is."""
    if isinstance(seeds, (int, np.integer)):
        if seeds < 1:
            raise ValueError(f"need at least one seed, got {seeds}")
        return list(range(int(seeds)))
    out = [int(s) for s in seeds]
    if not out:
        raise ValueError("need at least one seed")
    return out


def l2_list(l2: float | Sequence[float]) -> list[float]:
    """One ridge strength or several, as a list of floats."""
    return [float(l2)] if isinstance(l2, (int, float, np.number)) else [float(v) for v in l2]


def check_shots(shots: Iterable[int]) -> list[int]:
    out = [int(k) for k in shots]
    if not out or any(k < 1 for k in out):
        raise ValueError(f"shots must be positive integers, got {out}")
    return out


def sample_shots(
    labels: np.ndarray, num_classes: int, shots: Iterable[int], seed: int
) -> dict[int, np.ndarray]:
    """{k: indices} of k images per class, drawn without replacement with np.random.default_rng(seed).

    Each class's indices are permuted once per seed and every k takes the first k (big_vision's scheme).
    A class with fewer than max(shots) examples is a ValueError.
    """
    labels = np.asarray(labels)
    shots = check_shots(shots)
    rng = np.random.default_rng(seed)
    per_class = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
    need = max(shots)
    short = [(c, len(idx)) for c, idx in enumerate(per_class) if len(idx) < need]
    if short:
        c, n = short[0]
        raise ValueError(f"{need}-shot needs {need} training examples per class; class {c} has {n}")
    return {k: np.concatenate([idx[:k] for idx in per_class]) for k in shots}


def _summary(runs: list[float]) -> dict[str, Any]:
    """Mean and population std (ddof=0) over seeds, with the per-seed runs."""
    return {"mean": float(np.mean(runs)), "std": float(np.std(runs)), "runs": [float(r) for r in runs]}


def fewshot_eval(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    num_classes: int,
    shots: Iterable[int] = DEFAULT_SHOTS,
    seeds: int | Iterable[int] = DEFAULT_SEEDS,
    l2: float | Sequence[float] = DEFAULT_L2,
    subsets: dict[int, dict[int, np.ndarray]] | None = None,
) -> dict[str, Any]:
    """Few-shot accuracy on precomputed features, over shots x seeds (and several l2 from one eigh).

    Returns {"l2": first l2, "seeds": [...], "shots": {"10": {"mean", "std", "runs"}, ...},
    "solve_seconds": {"10": mean seconds of one solve (eigh + every l2 + test prediction)}, ...}, and with
    several l2 values also "by_l2": {"1024.0": {"10": {...}}}. `subsets` ({seed: {k: row indices}}) replaces
    the sampling (the evaluator passes indices into its gathered feature rows).
    """
    shots = check_shots(shots)
    seeds = seed_list(seeds)
    l2s = l2_list(l2)
    if not l2s or any(not v > 0 for v in l2s):
        raise ValueError(f"l2 values must be positive, got {l2s}")
    train_features = np.asarray(train_features, dtype=np.float64)
    test_features = np.asarray(test_features, dtype=np.float64)
    train_labels, test_labels = np.asarray(train_labels), np.asarray(test_labels)
    accs: dict[float, dict[int, list[float]]] = {v: {k: [] for k in shots} for v in l2s}
    times: dict[int, list[float]] = {k: [] for k in shots}
    for seed in seeds:
        if subsets is not None:
            chosen = subsets[seed]
        else:
            chosen = sample_shots(train_labels, num_classes, shots, seed)
        for k in shots:
            idx = chosen[k]
            start = time.perf_counter()
            result = lsr_accuracy(
                train_features[idx], train_labels[idx], test_features, test_labels, num_classes, l2s
            )
            times[k].append(time.perf_counter() - start)
            for v in l2s:
                accs[v][k].append(result[v])
    out: dict[str, Any] = {
        "l2": l2s[0],
        "seeds": seeds,
        "num_classes": int(num_classes),
        "num_test": int(len(test_labels)),
        "feature_dim": int(train_features.shape[1]),
        "shots": {str(k): _summary(accs[l2s[0]][k]) for k in shots},
        "solve_seconds": {str(k): float(np.mean(times[k])) for k in shots},
    }
    if len(l2s) > 1:
        out["by_l2"] = {str(v): {str(k): _summary(accs[v][k]) for k in shots} for v in l2s}
    return out


# --- Features from a model ---


def extract_features(
    model: nn.Module,
    images: torch.Tensor | np.ndarray,
    batch_size: int = 256,
    precision: Precision | None = None,
) -> np.ndarray:
    """Pre-logits vectors (float32 [N, D]) of uint8 images [N, C, H, W]: eval preprocessing at the model's
    img_size / in_chans, `model(x, pre_logits=True)`, in batches without gradients, in eval mode
    (vitkit.evaluation.loop.eval_mode) and under `precision` (default float32)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    net = as_model(model)
    config = net.config
    images = torch.as_tensor(images)
    param = next(net.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    precision = precision or choose_precision("fp32", device)
    chunks = []
    with eval_mode(model), torch.no_grad():
        for start in range(0, len(images), batch_size):
            batch = images[start : start + batch_size].to(device)
            x = eval_transform(batch, config.img_size, config.in_chans, config.mean_std)
            if param is not None:
                x = x.to(param.dtype)
            with precision.autocast():
                feats = net(x, pre_logits=True)
            chunks.append(feats.float().cpu().numpy())
    if not chunks:
        return np.zeros((0, getattr(net, "num_features", 0)), dtype=np.float32)
    return np.concatenate(chunks, axis=0)


def _num_classes(dataset: Any, labels: np.ndarray) -> int:
    classes = getattr(dataset, "classes", None)
    if classes is not None and len(classes):
        return len(classes)
    return int(labels.max()) + 1 if len(labels) else 0


class FewShotEvaluator:
    """The few-shot metric a training run measures every `every` steps and at its end (the paper's on-the-fly
    metric): an evaluator (vitkit.evaluation.evaluators) named "fewshot".

    Subsets are drawn once, here: only the union of the sampled training images (at most
    len(seeds) * max(shots) * K) and the (optionally capped) test images are kept and pushed through the
    model on each call, so a call costs one forward pass over them plus a few tiny solves.

        train, test = load_dataset("fashion_mnist", "train"), load_dataset("fashion_mnist", "test")
        evaluator = FewShotEvaluator(train, test, shots=(1, 5, 10, 25), seeds=3, l2=1024, num_test=2000)
        metrics = evaluator(model)   # {"fewshot_1shot": 0.41, "fewshot_1shot_std": 0.03, ...}
        report = evaluator.evaluate(model)   # the full JSON-able dict of `fewshot_eval`, timings included

    Datasets follow `vitkit.data.ImageDataset` (images uint8 [N, C, H, W], labels int64 [N], classes).
    """

    def __init__(
        self,
        train_dataset: Any,
        test_dataset: Any,
        shots: Iterable[int] = DEFAULT_SHOTS,
        seeds: int | Iterable[int] = DEFAULT_SEEDS,
        l2: float | Sequence[float] = DEFAULT_L2,
        num_test: int | None = None,
        batch_size: int = 256,
        prefix: str = "fewshot_",
        precision: Precision | None = None,
        every: int = 0,
    ) -> None:
        self.name, self.every = "fewshot", every
        self.skipped: list[str] = []  # its images are gathered once, at construction
        self.shots = check_shots(shots)
        self.seeds = seed_list(seeds)
        self.l2 = l2_list(l2)
        if not self.l2 or any(not v > 0 for v in self.l2):
            raise ValueError(f"l2 values must be positive, got {self.l2}")
        self.batch_size = batch_size
        self.prefix = prefix
        self.precision = precision
        train_labels = np.asarray(torch.as_tensor(train_dataset.labels).cpu(), dtype=np.int64)
        self.num_classes = _num_classes(train_dataset, train_labels)
        subsets = {s: sample_shots(train_labels, self.num_classes, self.shots, s) for s in self.seeds}
        # Keep only the images some subset uses; re-index the subsets into that gathered set.
        used = np.unique(np.concatenate([idx for per_seed in subsets.values() for idx in per_seed.values()]))
        self.subsets = {
            s: {k: np.searchsorted(used, idx) for k, idx in per.items()} for s, per in subsets.items()
        }
        self.train_images = gather_images(train_dataset, used)
        self.train_labels = train_labels[used]
        test_labels = np.asarray(torch.as_tensor(test_dataset.labels).cpu(), dtype=np.int64)
        keep = np.arange(len(test_labels))
        if num_test is not None:
            if num_test < 1:
                raise ValueError(f"num_test must be positive, got {num_test}")
            if num_test < len(test_labels):
                order = np.random.default_rng(TEST_SUBSET_SEED).permutation(len(test_labels))
                keep = np.sort(order[:num_test])
        if not len(keep):
            raise ValueError("the few-shot test set is empty")
        self.test_images, self.test_labels = gather_images(test_dataset, keep), test_labels[keep]
        self.last_extract_seconds = 0.0

    def features(self, model: nn.Module) -> tuple[np.ndarray, np.ndarray]:
        """Pre-logits of the kept training images and of the test images."""
        start = time.perf_counter()
        train = extract_features(model, self.train_images, self.batch_size, self.precision)
        test = extract_features(model, self.test_images, self.batch_size, self.precision)
        self.last_extract_seconds = time.perf_counter() - start
        return train, test

    def evaluate(self, model: nn.Module) -> dict[str, Any]:
        """The full report of `fewshot_eval` (mean, std and runs per shot), plus the extraction time."""
        train, test = self.features(model)
        report = fewshot_eval(
            train,
            self.train_labels,
            test,
            self.test_labels,
            self.num_classes,
            self.shots,
            self.seeds,
            self.l2,
            subsets=self.subsets,
        )
        report["num_train_images"] = int(len(self.train_labels))
        report["extract_seconds"] = self.last_extract_seconds
        return report

    def __call__(self, model: nn.Module) -> dict[str, float]:
        """Flat metrics for the training log: '{prefix}{k}shot' (mean over seeds), '{prefix}{k}shot_std'."""
        report = self.evaluate(model)
        metrics = {}
        for k, entry in report["shots"].items():
            metrics[f"{self.prefix}{k}shot"] = entry["mean"]
            metrics[f"{self.prefix}{k}shot_std"] = entry["std"]
        return metrics
