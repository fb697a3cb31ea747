"""What the fits on cached features of frozen weights share (vitkit.training.linear_head: a closed-form head;
vitkit.training.last_blocks: the last blocks and a head tuned): the run directory, data and model opened, each
split's features computed once and cached (vitkit.training.features), the test split scored, and the run
directory written as an ordinary one (final/, config.toml, run.json, report.json, confusion.png), which predict,
eval and convert read like any other.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from vitkit.data import Source
from vitkit.data.subset import check_indexable
from vitkit.device import resolve_device
from vitkit.evaluation.confusion import plot_confusion
from vitkit.flops import count_parameters
from vitkit.models.registry import Model
from vitkit.precision import Precision, inference_precision, say_nothing
from vitkit.recipe.run_config import RunConfig
from vitkit.sizes import to_pair
from vitkit.storage import FINAL_DIR, save_pretrained
from vitkit.training.build import RunData, build_run_model, open_data
from vitkit.training.checkpoint import SavedCheckpoint
from vitkit.training.features import FeatureStore, pre_logits, split_features, store_path
from vitkit.training.objectives import objective_for
from vitkit.training.provenance import record_start, start_record
from vitkit.training.report import CONFUSION_NAME, count_skipped, write_report
from vitkit.training.rundir import RunDirLock, create_run_dir, open_run_dir
from vitkit.weights.vitkit_state import instantiate


@dataclass
class FrozenFit:
    """A fit's data, model (its new head zero-initialised) and the features of every split."""

    config: RunConfig
    run_dir: Path
    device: torch.device
    data: RunData
    classes: list[str]
    model: Model
    precision: Precision
    features: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    computed: int = 0
    feature_seconds: float = 0.0
    clock: float = field(default_factory=time.perf_counter)  # as the engine's: from data and model built
    quiet: bool = False  # no lines, no progress bars
    saved: SavedCheckpoint | None = None  # the checkpoint a resumed fit continues (last blocks)
    created: bool = False  # the run directory exists (last blocks make it before their features)

    def say(self, line: str) -> None:
        """A line of the fit's log on stdout, unless it is quiet."""
        if not self.quiet:
            print(line, flush=True)


def open_fit(
    config: RunConfig, run_dir: Path, lock: RunDirLock, what: str, quiet: bool, resume: bool = False
) -> FrozenFit:
    """The new run directory (never over another; with `resume` the run's, locked, and its latest checkpoint),
    the data (indexable: images keyed by index) and the model from the recipe's weights with a zero-initialised
    head for the data's classes; a line says what runs (`quiet`: this and every other line of the fit left out)."""
    train = config.train
    saved = open_run_dir(run_dir, lock, resume)
    device = resolve_device(train.device)
    if train.threads:
        torch.set_num_threads(train.threads)
    data = open_data(config.data, device)
    for source in (data.train, data.test):
        check_indexable(source, f"train.fit={train.fit!r}")
    classes = list(data.train.classes)
    built = cast(Model, build_run_model(config, objective_for(train), classes, None))  # a classifier
    model = probe_pooling(built, config.model.overrides).to(device)
    # A resume computes in the precision the fit chose: the cached features it continues on are keyed by it.
    chosen = train.precision if saved is None else saved.state["precision"]
    precision = inference_precision(chosen, model, train.eval_batch(), say=say_nothing if quiet else None)
    size = "x".join(str(side) for side in to_pair(model.config.img_size))
    fit = FrozenFit(
        config, run_dir, device, data, classes, model, precision, quiet=quiet, saved=saved, created=resume
    )
    fit.say(
        f"{what}: {config.model.weights} ({count_parameters(model) / 1e6:.2f}M parameters at {size}), "
        f"{len(classes)} classes; data {data.train.description}; device {device}; precision {precision}; "
        f"run directory {run_dir}"
    )
    return fit


def probe_pooling(model: Model, overrides: Mapping[str, Any]) -> Model:
    """`model` pooling as its weights' authors read frozen features (`probe_classifier`: DINOv2's class token
    beside the mean of the patch tokens), its zero-initialised head as wide as those features: the saved run
    computes exactly what its head was fitted on. A recipe's own model.classifier wins."""
    config = model.config
    probe = getattr(config, "probe_classifier", None)
    if probe is None or probe == getattr(config, "classifier", None) or "classifier" in overrides:
        return model
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("head.")}
    source = f"{type(model).__name__} with probe_classifier {probe!r}"
    probed = instantiate(config, state, source, reset_head=True, keep_pre_logits=True, classifier=probe)
    probed.class_names = getattr(model, "class_names", None)
    return probed


def cache_features(
    fit: FrozenFit,
    compute: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] = pre_logits,
    **what: int,
) -> None:
    """`fit.features[split]`: (features, labels) of train, test and validation when there is one, computed by
    `compute` (`what` keys the store: vitkit.training.features.store_path) where not cached yet."""
    start = time.perf_counter()
    store = FeatureStore(store_path(fit.model, fit.precision, **what))
    known = len(store.rows)
    data = fit.data
    splits: dict[str, Source] = {"train": data.train, "test": data.test}
    splits |= {"validation": data.validation} if data.validation is not None else {}
    for name, source in splits.items():
        batch = fit.config.train.eval_batch()
        try:
            x, y, lost = split_features(
                fit.model,
                source,
                store,
                fit.precision,
                batch,
                f"{name} features",
                compute,
                shown=not fit.quiet,
            )
        except KeyboardInterrupt:  # stopped: the features computed so far are kept for the next fit
            store.save()
            print(f"{len(store.rows) - known} features computed so far are kept ({store.path}): a fit of the same "
                  "weights computes only the others", file=sys.stderr)  # fmt: skip
            raise
        fit.features[name], fit.skipped = (x, y), fit.skipped + lost
        store.save()  # what is computed is kept, also when a later split fails
    fit.computed = len(store.rows) - known
    fit.feature_seconds = time.perf_counter() - start
    if len(fit.features["train"][1]) < 2:
        raise ValueError(f"{data.train.description}: a fit needs at least 2 readable training images")


def top_k(scores: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Share of images whose label is among their `k` highest scores."""
    best = np.argsort(-scores, axis=1)[:, :k]
    return float((best == labels[:, None]).any(axis=1).mean()) if len(labels) else 0.0


def evaluate_scores(
    fit: FrozenFit, scores: Callable[[np.ndarray], np.ndarray]
) -> tuple[dict[str, float], torch.Tensor | None]:
    """(test and validation top-1, test top-5; the test confusion matrix) of `scores(features)` [n, K]."""
    k = len(fit.classes)
    evaluations: dict[str, float] = {}
    confusion = None
    for name, prefix in (("test", "test"), ("validation", "val")):
        if name not in fit.features:
            continue
        xs, ys = fit.features[name]
        logits = scores(xs)
        evaluations[f"{prefix}_top1"] = top_k(logits, ys, 1)
        if name == "test":
            evaluations["test_top5"] = top_k(logits, ys, min(5, k))
            pairs = torch.from_numpy(ys * k + logits.argmax(1))
            confusion = torch.bincount(pairs, minlength=k**2).view(k, k)
    return evaluations, confusion


def write_fitted_run(
    fit: FrozenFit,
    lock: RunDirLock,
    command: list[str] | None,
    confusion: torch.Tensor | None,
    report: dict[str, Any],
) -> dict[str, Any]:
    """The run directory of `fit.model` as it is now; report.json: `report` and what every fit reports."""
    wall_seconds = time.perf_counter() - fit.clock
    fit.say(f"saving final/, {CONFUSION_NAME} and report.json into {fit.run_dir}")
    if not fit.created:
        create_run_dir(fit.run_dir, fit.config, lock)
    record = start_record(fit.device, command)
    record_start(fit.run_dir, record)
    save_pretrained(fit.model.cpu(), fit.run_dir / FINAL_DIR)
    data = fit.data
    if confusion is not None and int(confusion.sum()):
        plot_confusion(confusion, data.test.classes, fit.run_dir / CONFUSION_NAME, data.test.description)
    report = {
        **report,
        "train_images": len(fit.features["train"][1]),
        "test_images": len(fit.features["test"][1]),
        "features_computed": fit.computed,
        "feature_seconds": fit.feature_seconds,
        "wall_seconds": wall_seconds,
        **fit.precision.record(),
        "skipped_images": count_skipped(fit.skipped),
        "objective": fit.config.train.objective,
        "parameters": count_parameters(fit.model),
        "train_data": data.train.description,
        "test_data": data.test.description,
        "run_dir": str(fit.run_dir),
        "start": record,
    }
    if data.validation is not None:
        report |= {"val_data": data.validation.description, "val_images": len(fit.features["validation"][1])}
    write_report(fit.run_dir, report)
    return report
