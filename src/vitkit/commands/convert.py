"""`vitkit convert SRC DST --to {vitkit,timm,hf,npz,onnx,exported}`: weights between vitkit, timm, transformers,
JAX; and serving exports (ONNX, optionally int8; a `torch.export` program), each checked against PyTorch."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from vitkit.data import open_source
from vitkit.evaluate import evaluate
from vitkit.export import export_onnx, export_program
from vitkit.export.accuracy import onnx_top1
from vitkit.models.registry import Model
from vitkit.storage import atomic_write, save_state_dict
from vitkit.weights import export_npz, load_weights, save_pretrained, to_hf, to_timm
from vitkit.weights.mapping import describe

FILE_TARGETS = ("npz", "timm", "onnx", "exported")
_PICKLE_SUFFIXES = (".pth", ".pt", ".bin")


def run(args: argparse.Namespace) -> int:
    overrides = {
        k: v for k, v in (("img_size", args.img_size), ("num_classes", args.num_classes)) if v is not None
    }
    src, dst = Path(args.src).absolute(), Path(args.dst).absolute()
    if dst == src or (src.is_dir() and src in dst.parents):
        raise ValueError(f"{args.dst}: is or is inside the source {args.src}; write the conversion elsewhere")
    if (args.int8 or args.accuracy_on) and args.to != "onnx":
        raise ValueError(f"--int8 and --accuracy-on apply to --to onnx, not --to {args.to}")
    if args.to in FILE_TARGETS and dst.is_dir():
        raise ValueError(f"{args.dst}: is a directory; --to {args.to} writes a file")
    model = load_weights(
        args.src,
        format=args.format,
        keep_pre_logits=args.keep_pre_logits,
        allow_non_finite=args.allow_non_finite,
        **overrides,
    )
    if args.to == "vitkit":
        save_pretrained(model, args.dst)
    elif args.to == "npz":
        export_npz(model, args.dst, layout=args.layout)
    elif args.to == "timm":
        state = to_timm(model).state_dict()
        if args.dst.endswith(_PICKLE_SUFFIXES):
            tensors = {k: v.detach().clone() for k, v in state.items()}
            atomic_write(args.dst, lambda tmp: torch.save(tensors, tmp))
        else:
            save_state_dict(state, args.dst, metadata={"format": "pt", "library": "timm"})
    elif args.to == "hf":
        to_hf(model).save_pretrained(args.dst)
    else:
        export_for_serving(model, args)
    print(f"{args.src} -> {args.dst} ({args.to}): {type(model).__name__} {describe(model.config)}")
    return 0


def export_for_serving(model: Model, args: argparse.Namespace) -> None:
    """--to onnx / exported: write, check (printed), and with --accuracy-on compare top-1 on a test split."""
    if args.to == "exported":
        export_program(model, args.dst)
        return
    dataset = open_source(args.accuracy_on, "test", args.data_dir) if args.accuracy_on else None
    export_onnx(model, args.dst, int8=args.int8)
    if dataset is not None:
        torch_top1 = evaluate(model, dataset).top1
        file_top1 = onnx_top1(args.dst, dataset)
        kind = "int8" if args.int8 else "fp32"
        print(
            f"top-1 on {dataset.description} (test, {len(dataset)} images): PyTorch fp32 {100 * torch_top1:.2f}%, "
            f"ONNX Runtime {kind} {100 * file_top1:.2f}% ({100 * (file_top1 - torch_top1):+.2f} points)"
        )
