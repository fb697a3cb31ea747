"""`vitkit demo`: build a model, count its parameters and FLOPs, and time a forward pass."""

from __future__ import annotations

import argparse
import time

import torch

import vitkit
from vitkit.flops import count_flops, count_parameters
from vitkit.precision import inference_precision


def run(args: argparse.Namespace) -> int:
    model = vitkit.create_model(args.model).eval()
    config = model.config
    flops = count_flops(model, config.input_size, every_token=True)
    x = torch.randn(args.batch_size, *config.input_size)
    precision = inference_precision(args.precision, model, args.batch_size)
    print(f"device {precision.device}, precision {precision}")
    with torch.no_grad(), precision.inference(model):
        start = time.perf_counter()
        logits = model(x)
        seconds = time.perf_counter() - start
    print(f"{args.model}: {count_parameters(model):,} parameters, {flops / 1e9:.2f} GFLOPs per image")
    print(
        f"forward of {list(x.shape)} -> {list(logits.shape)} in {seconds:.2f} s ({args.batch_size / seconds:.1f} images/s)"
    )
    return 0
