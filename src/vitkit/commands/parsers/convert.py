"""The options of `vitkit convert`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.convert only to run it)."""

from __future__ import annotations

import argparse

HELP = (
    "convert weights between vitkit, timm, transformers and the official JAX .npz layout; export to ONNX or a "
    "torch.export program for serving"
)


TARGETS = ("vitkit", "timm", "hf", "npz", "onnx", "exported")


SOURCE_FORMATS = ("npz", "vitkit", "timm", "hf")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "src",
        help="official .npz, vitkit or transformers directory, training run directory, "
        "or a timm/transformers/vitkit state dict (.safetensors, .pth, .bin)",
    )
    parser.add_argument(
        "dst",
        help="vitkit/hf: a directory; timm: a .safetensors (or .pth) file; npz, onnx, exported (.pt2): a file",
    )
    parser.add_argument("--to", required=True, choices=TARGETS, help="target format")
    parser.add_argument("--format", choices=SOURCE_FORMATS, help="source format, when the file does not say")
    parser.add_argument("--img-size", type=int, help="resample the position embedding to this resolution")
    parser.add_argument(
        "--num-classes", type=int, help="a zero-initialised head of K classes (the stored one when it has K)"
    )
    parser.add_argument(
        "--keep-pre-logits", action="store_true", help="keep the pre-logits layer with --num-classes"
    )
    parser.add_argument(
        "--allow-non-finite",
        action="store_true",
        help="convert weights holding NaN or inf (refused by default)",
    )
    parser.add_argument(
        "--layout",
        choices=("linen", "legacy"),
        default="linen",
        help="npz key layout: current Flax (linen) or that of the published checkpoints (legacy)",
    )
    parser.add_argument(
        "--int8",
        action="store_true",
        help="onnx: int8 weights (ONNX Runtime dynamic quantisation of the matrix products; docs/SERVING.md)",
    )
    parser.add_argument(
        "--accuracy-on",
        metavar="DATA",
        help="onnx: also report top-1 of PyTorch and of the written file on DATA's test split "
        "(a dataset name, folder:PATH, ...: as vitkit eval --data)",
    )
    parser.add_argument("--data-dir", help="where the --accuracy-on dataset lives")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing destination file, or write into a directory that is not empty",
    )
