#!/usr/bin/env python3
"""The hand-written peer of `vitkit predict`: classify every image of a folder with timm, as one writes it by hand.

A torch DataLoader with 2 worker processes decodes (Pillow) and preprocesses (torchvision: resize the short side,
centre crop, normalise to [-1, 1]) while the main process runs the model under bf16 autocast, 32 images a batch;
it prints the top-1 class of each file. The weights are a timm state dict (`vitkit.to_timm(model).state_dict()`).

    python benchmarks/peers/timm_predict.py FOLDER --model vit_small_patch16_224 --weights vit_s16.pth
"""

from __future__ import annotations

import argparse
from pathlib import Path

import timm
import torch
from PIL import Image
from torchvision import transforms

SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp"}


class Files(torch.utils.data.Dataset):
    def __init__(self, files: list[Path], size: int) -> None:
        self.files = files
        self.transform = transforms.Compose(
            [
                transforms.Resize(size, interpolation=transforms.InterpolationMode.BILINEAR),
                transforms.CenterCrop(size),
                transforms.ToTensor(),
                transforms.Normalize([0.5] * 3, [0.5] * 3),
            ]
        )

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        with Image.open(self.files[i]) as image:
            return self.transform(image.convert("RGB"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder")
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--weights", required=True, help="a timm state dict (.pth)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    files = sorted(p for p in Path(args.folder).rglob("*") if p.suffix.lower() in SUFFIXES)
    model = timm.create_model(args.model, pretrained=False)
    model.load_state_dict(torch.load(args.weights, weights_only=True))
    model.eval()
    size = model.default_cfg["input_size"][-1]
    loader = torch.utils.data.DataLoader(
        Files(files, size), batch_size=args.batch_size, num_workers=args.workers
    )
    done = 0
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        for x in loader:
            top = model(x).float().softmax(-1).argmax(-1)
            for path, index in zip(files[done : done + len(x)], top.tolist(), strict=True):
                print(f"{path}\t{index}")
            done += len(x)


if __name__ == "__main__":
    main()
