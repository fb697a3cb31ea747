"""`vitkit inspect --weights W --images PATH... --out DIR`: the paper's Fig. 6/7/11 for any ViT, as PNGs,
inspect.json and a self-contained report.html."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from vitkit.data.transforms import normalise
from vitkit.inspect.figures import write_figures
from vitkit.inspect.html_report import write_report
from vitkit.inspect.images import preprocess, read_images
from vitkit.inspect.probe import inspect_model, summary_json
from vitkit.models.config import to_pair
from vitkit.models.vit import VisionTransformer
from vitkit.precision import inference_precision
from vitkit.weights import load_weights


@torch.no_grad()
def predicted_names(model: VisionTransformer, images: torch.Tensor, batch_size: int) -> list[str]:
    """The class the model predicts for each image, by name (model.class_names); none for weights without a
    classifier or without names."""
    if not model.config.num_classes or model.class_names is None:
        return []
    normalised = normalise(images, model.config.mean_std)  # `images` in [-1, 1], as the figures show them
    logits = torch.cat([model(chunk) for chunk in normalised.split(batch_size)])
    return [model.class_names[i] for i in logits.argmax(-1).tolist()]


def run(args: argparse.Namespace) -> int:
    for name in ("max_images", "rollout_images", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "rollout_images" else 1):
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")
    model = load_weights(args.weights, allow_non_finite=args.allow_non_finite)
    if not isinstance(model, VisionTransformer):
        raise ValueError(
            f"{args.weights}: a {type(model).__name__} has no attention to inspect; inspect needs a ViT"
        )
    model = model.to(torch.device(args.device)).eval()
    cfg = model.config

    decoded, names, skipped = read_images(args.images, limit=args.max_images, max_pixels=args.max_pixels)
    for s in skipped:
        print(f"vitkit inspect: skipping {s['path']}: {s['reason']}", file=sys.stderr)
    if not decoded:
        raise ValueError("no readable image among --images " + " ".join(args.images))
    images = preprocess(decoded, to_pair(cfg.img_size), cfg.in_chans)

    precision = inference_precision(args.precision, model, args.batch_size or 16, images=len(decoded))
    print(f"device {precision.device}, precision {precision}")
    with precision.autocast():  # not precision.inference: inspect reads the patch-embedding weights
        result = inspect_model(
            model,
            images,
            batch_size=args.batch_size,
            rollout_images=args.rollout_images,
            prefix_keys=args.prefix_keys,
        )
    predicted = predicted_names(model, images[: args.rollout_images], batch_size=args.batch_size or 16)
    labels = predicted + [""] * (len(names) - len(predicted))  # the rollout figure's titles: file: class
    result["rollout_names"] = [
        Path(n).name + f": {label}" * bool(label) for n, label in zip(names, labels, strict=True)
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figures = write_figures(result, out)
    summary = summary_json(
        result,
        cfg.to_dict(),
        weights=str(args.weights),
        images=names,
        skipped=skipped,
        rollout_images=names[: args.rollout_images],
        figures={k: p.name for k, p in figures.items()},
    )
    summary.update(precision.record())
    if predicted:
        summary["predicted_classes"] = dict(zip(names, predicted, strict=False))
    (out / "inspect.json").write_text(json.dumps(summary, indent=2) + "\n")
    report = write_report(out / "report.html", figures, summary, title=f"vitkit inspect: {args.weights}")
    per_layer = summary["mean_attention_distance_per_layer"]
    print(
        f"{len(names)} image(s), {len(skipped)} skipped; mean attention distance per layer (pixels): "
        + " ".join(f"{d:.1f}" for d in per_layer)
    )
    for p in [*figures.values(), out / "inspect.json", report]:
        print(p)
    return 0
