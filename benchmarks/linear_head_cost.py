"""The fast path's cost beside `vitkit predict`'s, on the same photos, side by side in one script:

1. `vitkit predict` over every image of the folder (train and test), the ViT-B/16 weights' own head;
2. the fast path from the same weights to a saved run directory (configs/photos_linear.toml: features of every
   image, a closed-form head with its l2 cross-validated, final/ and report.json), the feature cache empty;
3. the second fit, another l2 grid over the cached features (`--second-fits N` times: on a loaded machine the
   median of several says more than one);
4. the third fit after 5 photos a class more were added (only those computed);
5. `vitkit predict` over every image again (the two predictions bracket the fits on a shared machine), and with
   the run: it names the folder's classes.

Each is timed in wall seconds and in CPU seconds (user + system of the process), which a busy machine changes less.

The folder: 5 classes of augmented 224 px JPEGs (random crops, flips, brightness) cut from the sample
photographs of scikit-image and scikit-learn (benchmarks/make_photo_folders.py loads them). The weights: a ViT-B/16
in the official ImageNet-21k checkpoint's layout (768-wide pre-logits layer, 21,843 classes) made by vitkit with
random weights and written as ViT-B_16.npz: the same architecture and cost as the published file, which cannot be
downloaded everywhere. With `--model DINOv2-B/14`, a DINOv2-B/14 (LayerScale; random weights, a random 1000-class
head for predict to read) saved by vitkit at 224 px, the size photos_linear reads: predict and the fit pay the same
forward per image. Every command runs as a fresh process, as a user types it.

    python benchmarks/linear_head_cost.py /tmp/linear_head_cost --second-fits 5 --out linear_head_cost.json
    python benchmarks/linear_head_cost.py /tmp/linear_head_dinov2 --model DINOv2-B/14 --out linear_head_dinov2.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from make_photo_folders import load_pixels
from PIL import Image

import vitkit
from vitkit.device import cpu_model

CLASSES = {
    "people and things": ["astronaut", "camera", "coffee", "rocket", "clock"],
    "animals": ["cat", "chelsea", "horse"],
    "sky and land": ["hubble_deep_field", "moon", "sklearn_china", "sklearn_flower"],
    "textures": ["brick", "grass", "gravel", "coins"],
    "microscopy": ["cell", "immunohistochemistry", "retina", "microaneurysms"],
}
SIDE = 224


def augmented(pixels: np.ndarray, rng: np.random.Generator) -> Image.Image:
    """A random crop (30-100% of the area), flip and brightness change of a photo, as a 224 px RGB image."""
    image = Image.fromarray(pixels.astype(np.uint8) * (255 if pixels.dtype == bool else 1)).convert("RGB")
    scale = np.sqrt(rng.uniform(0.3, 1.0))
    w, h = int(image.width * scale), int(image.height * scale)
    left, top = rng.integers(0, image.width - w + 1), rng.integers(0, image.height - h + 1)
    image = image.crop((left, top, left + w, top + h)).resize((SIDE, SIDE), Image.Resampling.BILINEAR)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return Image.fromarray(np.clip(np.asarray(image) * rng.uniform(0.7, 1.3), 0, 255).astype(np.uint8))


def write_photos(root: Path, counts: dict[str, int], seed: int, start: int = 0) -> int:
    """root/<split>/<class>/<n>.jpg for each split's count a class, numbered from `start`; the images written."""
    rng = np.random.default_rng(seed)
    written = 0
    for label, names in CLASSES.items():
        photos = [load_pixels(name) for name in names]
        for split, count in counts.items():
            folder = root / split / label
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(start, start + count):
                augmented(photos[index % len(photos)], rng).save(folder / f"{index}.jpg", quality=90)
                written += 1
    return written


def timed(command: list[str], env: dict[str, str]) -> tuple[dict[str, float], str]:
    """Wall and CPU seconds (user + system: what a shared machine's other load changes least) of one vitkit
    command run as a fresh process, and its output."""
    start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "vitkit.cli", *command], env=env, capture_output=True, text=True
    )
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"vitkit {' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    used = after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime
    return {"wall_s": wall, "cpu_s": used}, done.stdout + done.stderr


def official_vit_b16(work: Path) -> Path:
    """ViT-B/16 in the official ImageNet-21k checkpoint's layout, random weights, as ViT-B_16.npz."""
    torch.manual_seed(0)
    model = vitkit.create_model(
        "ViT-B/16", num_classes=21843, representation_size=768, activation="gelu_tanh"
    )
    return vitkit.export_npz(model, work / "ViT-B_16.npz")


def dinov2_b14(work: Path) -> Path:
    """DINOv2-B/14 at 224 px, random weights and a random 1000-class head, as a save_pretrained directory."""
    torch.manual_seed(0)
    model = vitkit.create_model("DINOv2-B/14", img_size=SIDE, num_classes=1000)
    torch.nn.init.normal_(model.head.weight, std=0.02)
    return model.save_pretrained(work / "DINOv2-B_14")


WEIGHTS = {"ViT-B/16": official_vit_b16, "DINOv2-B/14": dinov2_b14}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "work", type=Path, help="an empty or missing directory for the photos, weights and runs"
    )
    parser.add_argument("--train", type=int, default=80, help="training photos a class (default 80)")
    parser.add_argument("--test", type=int, default=20, help="test photos a class (default 20)")
    parser.add_argument("--second-fits", type=int, default=1, help="times the second fit runs (default 1)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    parser.add_argument(
        "--model", choices=WEIGHTS, default="ViT-B/16", help="the weights' architecture (default ViT-B/16)"
    )
    args = parser.parse_args()
    work = args.work.absolute()
    photos, cache = work / "photos", work / "cache"
    images = write_photos(photos, {"train": args.train, "test": args.test}, seed=0)
    weights = WEIGHTS[args.model](work)
    env = {**os.environ, "VITKIT_CACHE": str(cache)}
    linear = ["finetune", "--weights", str(weights), "--config", str(Path(__file__).parents[1] / "configs" /
              "photos_linear.toml"), f"data.source=folder:{photos}"]  # fmt: skip
    figures: dict[str, object] = {
        "model": args.model,
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "images": images,
        "load_average_before": os.getloadavg()[0],
    }
    predict = [
        "predict",
        str(photos),
        "--weights",
        str(weights),
        "--output",
        str(work / "predictions.jsonl"),
        "--overwrite",
    ]
    figures["predict"], _ = timed(predict, env)
    figures["first_fit"], output = timed([*linear, "--out", str(work / "runs" / "first")], env)
    print(output)
    l2s = "train.linear_l2=[64.0, 256.0, 1024.0, 4096.0]"
    seconds = []
    for index in range(args.second_fits):
        timing, output = timed([*linear, "--out", str(work / "runs" / f"second{index}"), l2s], env)
        seconds.append(timing)
    print(output)
    figures["second_fits"] = seconds
    figures["second_fit"] = {
        unit: float(np.median([t[unit] for t in seconds])) for unit in ("wall_s", "cpu_s")
    }
    figures["added_photos"] = write_photos(photos, {"train": 5}, seed=1, start=args.train)
    figures["third_fit"], output = timed([*linear, "--out", str(work / "runs" / "third")], env)
    print(output)
    figures["predict_again"], _ = timed(predict, env)  # the two predictions bracket the fits
    one = sorted((photos / "test" / "animals").iterdir())[0]
    _, named = timed(["predict", str(one), "--weights", str(work / "runs" / "third")], env)
    assert "animals" in named, named
    figures["load_average_after"] = os.getloadavg()[0]
    report = json.loads((work / "runs" / "first" / "report.json").read_text())
    figures["first_fit_report"] = {k: report[k] for k in ("test_top1", "l2", "feature_seconds", "precision")}
    for unit in ("wall_s", "cpu_s"):
        predict_mean = (figures["predict"][unit] + figures["predict_again"][unit]) / 2  # type: ignore[index]
        first = figures["first_fit"][unit]  # type: ignore[index]
        figures[f"first_fit_over_predict_{unit}"] = first / predict_mean
        figures[f"second_over_first_{unit}"] = figures["second_fit"][unit] / first  # type: ignore[index]
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
