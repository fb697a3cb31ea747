"""Evaluating weights as `vitkit eval` and `vitkit.evaluate(...)` do: a run directory on its own data.

A run directory (it holds config.toml) is evaluated on the data it was trained on, read as it was read: the
validation images it held out (data.val_split > 0), else its test split, unless other data or another split is
named. Results are labelled with the model's class names (vitkit.evaluation.labels), and written (eval_<split>.json
and a confusion-matrix PNG) into the run directory or `out`, never into the working directory: weights that are
not a run, with no `out`, write nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vitkit.allocator import keep_freed_memory
from vitkit.data import ReadOptions, Source, hold_out, open_source
from vitkit.data.source import DEFAULT_READING
from vitkit.destinations import check_file_destination
from vitkit.device import resolve_device
from vitkit.evaluation.accuracy import evaluate_model
from vitkit.evaluation.confusion import plot_confusion
from vitkit.evaluation.labels import class_labels, per_class
from vitkit.precision import inference_precision, say_nothing
from vitkit.recipe.resolve import load_config
from vitkit.recipe.run_config import RECIPE_NAME
from vitkit.storage import atomic_write_text
from vitkit.weights import load_weights

SPLITS = ("train", "test", "val")


def run_recipe(weights: str | os.PathLike) -> Any:
    """The saved recipe (RunConfig) when `weights` is a run directory, else None."""
    path = Path(weights) / RECIPE_NAME
    return load_config(path) if path.is_file() else None


def open_data(
    weights: str | os.PathLike,
    data: str | os.PathLike | None,
    split: str | None,
    data_dir: str | None = None,
    reading: ReadOptions = DEFAULT_READING,
) -> tuple[Source, str]:
    """(the images to evaluate on, the split's name): `data` when given, else the run's own source; `split`,
    else the run's validation split when it held one out, else 'test'."""
    if data is not None and not isinstance(data, (str, os.PathLike)):
        raise ValueError(f"data must name a source (e.g. 'cifar10', 'folder:PATH', 'hf:PATH'), got {data!r}")
    data = None if data is None else os.fspath(data)  # a directory given as a Path: an image folder
    recipe = run_recipe(weights)
    if data is None and recipe is None:
        raise ValueError(f"{weights} is not a run directory (no {RECIPE_NAME}): name the data with --data")
    own = data is None
    source = str(recipe.data.source) if data is None else data
    data_dir = data_dir or (recipe.data.data_dir if own else None)
    val_split = recipe.data.val_split if own else 0
    split = split or ("val" if val_split else "test")
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: expected one of {', '.join(SPLITS)}")
    if split == "val":
        if not val_split:
            why = "the data named is not the run's" if recipe is not None and not own else "none was held out"
            raise ValueError(f"split 'val' is the run's held-out training images (data.val_split); {why}")
        _, validation = hold_out(
            open_source(source, "train", data_dir, reading), val_split, recipe.data.val_seed
        )
        return validation, split
    return open_source(source, split, data_dir, reading), split


def evaluate_weights(
    weights: str | os.PathLike,
    data: str | os.PathLike | None = None,
    *,
    split: str | None = None,
    data_dir: str | None = None,
    out: str | os.PathLike | None = None,
    batch_size: int = 500,
    device: str = "auto",
    precision: str = "auto",
    compile: bool = False,
    workers: int = 0,
    on_corrupt: str = "stop",
    confusion: str | os.PathLike | None = None,
    overwrite: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    """Top-1, top-5, loss and per-class accuracy of `weights` (anything vitkit.load_weights reads; a run
    directory evaluates on its own data) on `data` / `split`, as a dict; also written to `out` (default: the run
    directory) as eval_<split>.json with a confusion matrix PNG (`confusion` names another path for it). A file
    of `out` or `confusion` that exists already is replaced only with `overwrite` (a run's own are replaced).
    Unless `quiet`, it says what it scores and why, shows a progress bar and prints what `vitkit eval` prints."""
    reading = ReadOptions(on_corrupt=on_corrupt, workers=workers)
    asked = split
    dataset, split = open_data(weights, data, split, data_dir, reading)
    named_confusion = confusion is not None
    folder = Path(out) if out is not None else Path(weights) if run_recipe(weights) is not None else None
    if confusion is None and folder is not None:
        confusion = folder / f"eval_{split}_confusion.png"
    users = [Path(out) / f"eval_{split}.json"] if out is not None else []  # not the run directory's own
    if confusion is not None and (named_confusion or out is not None):
        users.append(Path(confusion))
    for path in users:  # before the work
        check_file_destination(path, overwrite=overwrite)
    model = load_weights(weights).to(resolve_device(device))
    names = class_labels(model.class_names, list(dataset.classes), f"{weights} on {dataset.description}")
    say = say_nothing if quiet else print
    say(f"scoring {len(dataset)} images: {scored(weights, data, asked, split, data_dir)}")
    chosen = inference_precision(
        precision, model, batch_size, images=len(dataset), say=say_nothing if quiet else None
    )
    if chosen.device.type == "cpu":
        keep_freed_memory()  # each batch reuses the last one's activations instead of faulting them in again
    with chosen.weights_held(model, compile) as forward:
        progress = None if quiet else f"evaluating {split}"
        result = evaluate_model(forward, dataset, batch_size=batch_size, precision=chosen, progress=progress)
    report: dict[str, Any] = {
        "weights": str(weights),
        "data": dataset.description,
        "split": split,
        "images": result.count,
        "top1": result.top1,
        "top5": result.top5,
        "loss": result.loss,
        "per_class": per_class(result.confusion, names),
        **chosen.record(),
    }
    if confusion is not None:
        Path(confusion).parent.mkdir(parents=True, exist_ok=True)
        title = f"{weights} on {dataset.description} ({split})"
        report["confusion"] = str(plot_confusion(result.confusion, names, confusion, title))
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        report["report"] = str(folder / f"eval_{split}.json")
        atomic_write_text(report["report"], json.dumps(report, indent=2) + "\n")
    say(evaluation_lines(report))
    return report


def scored(
    weights: str | os.PathLike, data: object, asked: str | None, split: str, data_dir: str | None
) -> str:
    """Which images an evaluation scores and why: the data named, or the run's own split, chosen how."""
    recipe = run_recipe(weights)
    if data is not None or recipe is None:
        return f"{data} ({split} split), as named"
    if asked is not None:
        return f"the run's {split} split, as asked"
    if split == "test":
        return "the run's test split (it held no training images out)"
    try:  # the test split's size, to say what --split test would score
        test = f" {len(open_source(str(recipe.data.source), 'test', data_dir or recipe.data.data_dir))}"
    except (OSError, ValueError):
        test = ""
    return (
        f"the {recipe.data.val_split} training images the run held out (data.val_split) and never trained on, "
        f"which chose its settings; --split test scores the{test} images of its test split"
    )


def evaluation_lines(report: dict[str, Any]) -> str:
    """What `vitkit eval` and `vitkit.evaluate` print: precision, data, accuracy, per class and the files."""
    lines = [
        f"device {report['device']}, precision {report['precision']} ({report['precision_reason']})",
        f"{report['data']} ({report['split']}, {report['images']} images)",
        f"top-1 {100 * report['top1']:.2f}%  top-5 {100 * report['top5']:.2f}%  loss {report['loss']:.4f}",
    ]
    width = max(len(name) for name in report["per_class"])
    lines.append(f"  {'class':<{width}}  {'images':>6}  {'top-1':>7}")
    for name, row in report["per_class"].items():
        top1 = f"{100 * row['top1']:6.2f}%" if row["top1"] is not None else "      -"
        lines.append(f"  {name:<{width}}  {row['images']:>6}  {top1}")
    lines += [f"{what}: {report[key]}" for key, what in (("confusion", "confusion matrix"), ("report", "results"))
              if key in report]  # fmt: skip
    return "\n".join(lines)
