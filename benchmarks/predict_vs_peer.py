#!/usr/bin/env python3
"""`vitkit predict` against a hand-written timm script (benchmarks/peers/timm_predict.py: DataLoader with 2 workers,
bf16 autocast) on the same folder of photos and the same weights: wall time of each whole process, start-up
included, and the CPU time of its process tree (the steadier measure on a loaded machine), in paired rounds whose
order alternates; the median ratios (vitkit's time over the peer's) and their range.

    python benchmarks/predict_vs_peer.py --models ViT-S/16,ViT-B/16 --images 200 --rounds 5

The photos are crops of the sample photographs of scikit-image and scikit-learn (`pip install 'vitkit[bench]'`),
120 to 640 px on a side, saved as JPEG, made once in --work. The weights are random (the time does not depend on
them): a vitkit weights directory, and the same network as a timm state dict for the peer.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import vitkit
from vitkit.bench.table import environment

TIMM_NAMES = {"ViT-S/16": "vit_small_patch16_224", "ViT-B/16": "vit_base_patch16_224"}
PEER = Path(__file__).parent / "peers" / "timm_predict.py"


def make_photos(folder: Path, count: int) -> None:
    """`count` JPEG crops of the sample photographs, of random sizes and places (seeded)."""
    import skimage.data
    from sklearn.datasets import load_sample_images

    sources = [skimage.data.astronaut(), skimage.data.chelsea(), skimage.data.coffee(), skimage.data.rocket(),
               *load_sample_images().images]  # fmt: skip
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        image = sources[i % len(sources)]
        h, w = image.shape[:2]
        ch, cw = int(rng.integers(min(h, 120), h + 1)), int(rng.integers(min(w, 120), w + 1))
        top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        Image.fromarray(image[top : top + ch, left : left + cw]).save(
            folder / f"photo_{i:04d}.jpg", quality=90
        )


def prepare(work: Path, name: str) -> tuple[Path, Path]:
    """A vitkit weights directory of `name` (random weights) and the same network as a timm state dict."""
    slug = name.replace("/", "_")
    weights, state = work / f"{slug}_weights", work / f"{slug}_timm.pth"
    if not state.exists():
        torch.manual_seed(0)
        model = vitkit.create_model(name).eval()
        vitkit.save_pretrained(model, weights)
        torch.save(vitkit.to_timm(model).state_dict(), state)
    return weights, state


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process tree, worker processes included) of one run: on a loaded
    machine the CPU time is the steadier of the two."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="ViT-S/16,ViT-B/16")
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", default="/tmp/vitkit-predict-bench", help="photos and weights, made once")
    args = parser.parse_args()
    work = Path(args.work)
    photos = work / f"photos_{args.images}"
    if not photos.exists():
        make_photos(photos, args.images)
    vitkit_cli = str(Path(sys.executable).with_name("vitkit"))
    print(f"<!-- {environment()} -->")
    print(
        "| model | vitkit wall s | timm wall s | vitkit / timm wall (range) | vitkit / timm CPU (range) | rounds |"
    )
    print("|---|---:|---:|---|---|---:|")
    for name in args.models.split(","):
        weights, state = prepare(work, name)
        commands = {
            "vitkit": [vitkit_cli, "predict", str(photos), "--weights", str(weights)],
            "timm": [
                sys.executable,
                str(PEER),
                str(photos),
                "--model",
                TIMM_NAMES[name],
                "--weights",
                str(state),
            ],
        }
        runs: dict[str, list[tuple[float, float]]] = {"vitkit": [], "timm": []}
        for r in range(args.rounds):
            for who in ("vitkit", "timm") if r % 2 == 0 else ("timm", "vitkit"):
                runs[who].append(timed(commands[who]))
            print(
                f"round {r + 1}: vitkit {runs['vitkit'][-1]}, timm {runs['timm'][-1]} (wall, CPU s)",
                file=sys.stderr,
            )
        cells = []
        for clock in (0, 1):
            ratios = [v[clock] / t[clock] for v, t in zip(runs["vitkit"], runs["timm"], strict=True)]
            cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        walls = {who: statistics.median(run[0] for run in runs[who]) for who in runs}
        print(
            f"| {name} | {walls['vitkit']:.1f} | {walls['timm']:.1f} | {cells[0]} | {cells[1]} | {args.rounds} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
