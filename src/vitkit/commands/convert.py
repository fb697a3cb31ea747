"""`vitkit convert SRC DST --to {vitkit,timm,hf,npz,onnx,exported}`: weights between vitkit, timm, transformers,
JAX; and serving exports (ONNX, optionally int8; a `torch.export` program), each checked against PyTorch."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from vitkit import shutdown
from vitkit.data import open_source
from vitkit.destinations import check_directory_destination, check_file_destination
from vitkit.evaluation import evaluate_model
from vitkit.evaluation.labels import class_labels
from vitkit.export import export_onnx, export_program
from vitkit.export.onnx_accuracy import onnx_top1
from vitkit.export.staging import staged_directory
from vitkit.models.registry import Model
from vitkit.storage import atomic_write, save_state_dict
from vitkit.weights import export_npz, load_weights, save_pretrained, to_hf, to_timm
from vitkit.weights.mapping import describe

FILE_TARGETS = ("npz", "timm", "onnx", "exported")
_PICKLE_SUFFIXES = (".pth", ".pt", ".bin")


def run(args: argparse.Namespace) -> int:
    """Check the destination, load, write; SIGTERM or Ctrl-C on the way leaves no temporary files."""
    overrides = {
        k: v for k, v in (("img_size", args.img_size), ("num_classes", args.num_classes)) if v is not None
    }
    src, dst = Path(args.src).absolute(), Path(args.dst).absolute()
    if dst == src or (src.is_dir() and src in dst.parents):
        raise ValueError(f"{args.dst}: is or is inside the source {args.src}; write the conversion elsewhere")
    if (args.int8 or args.accuracy_on) and args.to != "onnx":
        raise ValueError(f"--int8 and --accuracy-on apply to --to onnx, not --to {args.to}")
    if args.to in FILE_TARGETS and dst.is_dir() and not dst.is_symlink():
        raise ValueError(f"{args.dst}: is a directory; --to {args.to} writes a file")
    if args.to in FILE_TARGETS:
        check_file_destination(args.dst, overwrite=args.overwrite)
    else:
        check_directory_destination(args.dst, overwrite=args.overwrite)
    with shutdown.interruptible():
        model = load_weights(
            args.src,
            format=args.format,
            keep_pre_logits=args.keep_pre_logits,
            allow_non_finite=args.allow_non_finite,
            **overrides,
        )
        print(f"writing {args.dst} ({args.to}) from {args.src}", flush=True)  # an export can take a minute
        write(model, args)
    print(f"{args.src} -> {args.dst} ({args.to}): {type(model).__name__} {describe(model.config)}")
    return 0


def write(model: Model, args: argparse.Namespace) -> None:
    """The conversion, into files that appear only once whole (staged or written atomically)."""
    if args.to in ("vitkit", "hf"):
        with staged_directory(args.dst) as directory:
            if args.to == "vitkit":
                save_pretrained(model, directory)
            else:
                to_hf(model).save_pretrained(directory)
    elif args.to == "npz":
        export_npz(model, args.dst, layout=args.layout)
    elif args.to == "timm":
        state = to_timm(model).state_dict()
        if args.dst.endswith(_PICKLE_SUFFIXES):
            tensors = {k: v.detach().clone() for k, v in state.items()}
            atomic_write(args.dst, lambda tmp: torch.save(tensors, tmp))
        else:
            save_state_dict(state, args.dst, metadata={"format": "pt", "library": "timm"})
    else:
        export_for_serving(model, args)


def export_for_serving(model: Model, args: argparse.Namespace) -> None:
    """--to onnx / exported: write, check (printed), and with --accuracy-on compare top-1 on a test split."""
    if args.to == "exported":
        export_program(model, args.dst)
        return
    dataset = open_source(args.accuracy_on, "test", args.data_dir) if args.accuracy_on else None
    if dataset is not None:  # scores against the data's own names, never permuted or other labels
        class_labels(model.class_names, list(dataset.classes), f"{args.src} on {dataset.description}")
    export_onnx(model, args.dst, int8=args.int8)
    if dataset is not None:
        torch_top1 = evaluate_model(model, dataset, progress="PyTorch top-1").top1
        file_top1 = onnx_top1(args.dst, dataset)
        kind = "int8" if args.int8 else "fp32"
        print(
            f"top-1 on {dataset.description} (test, {len(dataset)} images): PyTorch fp32 {100 * torch_top1:.2f}%, "
            f"ONNX Runtime {kind} {100 * file_top1:.2f}% ({100 * (file_top1 - torch_top1):+.2f} points)"
        )
