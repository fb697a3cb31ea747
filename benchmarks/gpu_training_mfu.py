"""Training throughput and MFU of ViT-B/16 at 224 on one GPU: vitkit's engine step against timm's model in a
plain bf16 loop, eager and compiled, in one process.

The engine's step is `vitkit.training.build.build_train_step`, built as `vitkit train` builds it: its data path
(uint8 images held in GPU memory, the batched augmentation of `data.crop`/`data.flip`, keyed by step), bf16
autocast, fused AdamW, gradient clipping, the CUDA graph of `train.cuda_graph=auto` (eager), and with `--compile`
`train.compile=true` (not captured). timm's loop is the textbook one around `timm.create_model` with vitkit's weights
(`vitkit.to_timm`): bf16 autocast, fused AdamW, clipping, on batches already on the GPU (its data costs nothing).

MFU counts forward plus backward as 3x the forward FLOPs each implementation performs (vitkit's class-token
model computes its last layer for the class token alone; timm every token), against the GPU's dense bf16 peak
(a table by device name; `--peak-tflops` for another GPU). A bf16 8192^3 matrix product is timed beside it as
the attainable ceiling.

    python benchmarks/gpu_training_mfu.py --batch-size 256 --steps 20 --rounds 3 --compile
    python benchmarks/gpu_training_mfu.py --batch-size 512 --sdpa cudnn --profile profile.txt

`--sdpa` pins the attention kernel of every implementation (default: torch's own choice). `--max-autotune`
compiles both as mode 'max-autotune-no-cudagraphs' does: inductor times its kernel choices, matrix products with
fused epilogues among them. `--profile` writes the kernels of the engine's step, run eagerly without its CUDA
graph and, with `--compile`, compiled, by GPU time: where the time goes.

On a CPU it runs as a smoke test of itself:
`python benchmarks/gpu_training_mfu.py --device cpu --model ViT-Ti/16 --img-size 32 --batch-size 4 --steps 1`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import statistics
import time
from collections.abc import Callable

import torch
import torch._inductor.config as inductor_config
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import vitkit
from vitkit.bench.table import environment, format_table
from vitkit.data import ImageDataset
from vitkit.flops import count_flops
from vitkit.precision import choose_precision
from vitkit.recipe.run_config import ModelSection, RunConfig
from vitkit.training.build import build_run_model, build_train_step, optimizer_and_average
from vitkit.training.objectives import objective_for

# Dense bf16 tensor-core peaks (no sparsity), TFLOP/s, from NVIDIA's data sheets.
PEAK_BF16_TFLOPS = {"H200": 989.4, "H100 80GB HBM3": 989.4, "H100 PCIe": 756.0, "H100": 989.4, "A100": 312.0}


def peak_tflops(device: torch.device, given: float | None) -> float | None:
    """The dense bf16 peak of `device` (None on a CPU or an unknown GPU without `given`)."""
    if given or device.type != "cuda":
        return given
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_TFLOPS.items() if key in name), None)


def synthetic_images(count: int, size: int, classes: int, device: torch.device) -> ImageDataset:
    """Random uint8 RGB images with random labels, held on `device` as the engine holds an in-memory set."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (count, 3, size, size), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, classes, (count,), generator=generator)
    names = [f"class {i}" for i in range(classes)]
    return ImageDataset(images.to(device), labels.to(device), names, "synthetic (random pixels)")


SDPA_BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def recipe(args: argparse.Namespace, compile: bool) -> RunConfig:
    """The engine's recipe for the timed model: ImageNet-style crop and flip, AdamW, clipping at 1, bf16."""
    config = RunConfig()
    config.model = ModelSection(name=args.model, overrides={"img_size": args.img_size, "num_classes": 1000})
    config.data.crop, config.data.flip = "resize_crop", True
    config.train.batch_size, config.train.steps = args.batch_size, 10**6
    config.train.device, config.train.compile = str(args.device), compile
    config.optim.grad_clip, config.optim.warmup_steps = 1.0, 10
    return config


def engine_candidate(
    args: argparse.Namespace, data: ImageDataset, compile: bool, graphed: bool = True
) -> Callable[[], None]:
    """One call runs one step of vitkit's engine (data path included); `graphed=False` turns its CUDA graph off."""
    config = recipe(args, compile)
    config.train.cuda_graph = "auto" if graphed else "off"
    objective = objective_for(config.train)
    torch.manual_seed(0)
    model = build_run_model(config, objective, data.classes, None).to(args.device)
    model.train()
    precision = choose_precision("bf16" if args.device.type == "cuda" else "fp32", args.device)
    optimizer, ema = optimizer_and_average(config, model, args.device)
    step = build_train_step(config, objective, data, model, optimizer, ema, precision, "none")
    counter = itertools.count()
    return lambda: step(next(counter)) and None


def timm_candidate(args: argparse.Namespace, data: ImageDataset, compile: bool) -> Callable[[], None]:
    """One call runs one step of the plain timm loop on batches already on the device."""
    torch.manual_seed(0)
    config = recipe(args, False)
    peer = (
        vitkit.to_timm(build_run_model(config, objective_for(config.train), data.classes, None))
        .to(args.device)
        .train()
    )
    optimizer = torch.optim.AdamW(peer.parameters(), lr=1e-3, fused=args.device.type == "cuda")
    forward = torch.compile(peer) if compile else peer
    x = (data.images[: args.batch_size].float() / 127.5 - 1).contiguous()
    y = data.labels[: args.batch_size]

    def step() -> None:
        with torch.autocast(args.device.type, torch.bfloat16, enabled=args.device.type == "cuda"):
            loss = F.cross_entropy(forward(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(peer.parameters(), 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(step: Callable[[], None], args: argparse.Namespace) -> list[float]:
    """Seconds per step of each round, after `--warmup` steps (compilation and graph capture happen there)."""
    for _ in range(args.warmup):
        step()
    synchronize(args.device)
    rounds = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        synchronize(args.device)
        rounds.append((time.perf_counter() - start) / args.steps)
    return rounds


def matmul_tflops(device: torch.device) -> float:
    """Attained bf16 TFLOP/s of an 8192^3 matrix product (1024^3 on a CPU)."""
    n = 8192 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    synchronize(device)
    start, repeats = time.perf_counter(), 10
    for _ in range(repeats):
        a @ b
    synchronize(device)
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12


def write_profile(args: argparse.Namespace, data: ImageDataset, path: str) -> None:
    """The kernels of `--steps` steps of the engine by GPU time: eager without its CUDA graph (which would hide
    them), and with `--compile` compiled too (where inductor's fused kernels leave the time)."""
    sort = "cuda_time_total" if args.device.type == "cuda" else "cpu_time_total"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.type == "cuda" else [])
    with open(path, "w") as f:
        for compile in (False, True) if args.compile else (False,):
            step = engine_candidate(args, data, compile=compile, graphed=False)
            for _ in range(args.warmup):
                step()
            synchronize(args.device)
            with profile(activities=activities) as profiler:
                for _ in range(args.steps):
                    step()
                synchronize(args.device)
            kind = "compiled" if compile else "eager"
            f.write(f"{args.model} at {args.img_size}, batch {args.batch_size}, {args.steps} {kind} steps\n")
            f.write(profiler.key_averages().table(sort_by=sort, row_limit=40, max_name_column_width=70))
            f.write("\n\n")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="ViT-B/16")
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--images", type=int, default=0, help="in-memory images (default: 8 batches)")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="also time both compiled")
    parser.add_argument("--max-autotune", action="store_true", help="compile as max-autotune-no-cudagraphs")
    parser.add_argument("--device", type=torch.device, default=torch.device("cuda"))
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--sdpa", choices=SDPA_BACKENDS, default=None, help="pin the attention kernel")
    parser.add_argument("--profile", default=None, help="also write the engine step's kernels to this file")
    args = parser.parse_args(argv)
    # The options of mode='max-autotune-no-cudagraphs', for both implementations' torch.compile.
    inductor_config.max_autotune = inductor_config.coordinate_descent_tuning = args.max_autotune
    with sdpa_kernel(SDPA_BACKENDS[args.sdpa]) if args.sdpa else contextlib.nullcontext():
        return measure(args)


def measure(args: argparse.Namespace) -> list[dict]:
    """The table of `main`'s arguments."""
    if args.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    data = synthetic_images(args.images or 8 * args.batch_size, args.img_size, 1000, args.device)
    probe_recipe = recipe(args, False)
    probe = build_run_model(probe_recipe, objective_for(probe_recipe.train), data.classes, None)
    size = probe.config.input_size
    performed = 3 * count_flops(probe, size)
    every_token = 3 * count_flops(probe, size, every_token=True)
    del probe
    peak = peak_tflops(args.device, args.peak_tflops)
    builds: dict[str, tuple[Callable[..., Callable[[], None]], bool, int]] = {
        "vitkit engine": (engine_candidate, False, performed),
        "timm, plain loop": (timm_candidate, False, every_token),
    }
    if args.compile:
        builds["vitkit engine, compiled"] = (engine_candidate, True, performed)
        builds["timm, plain loop, compiled"] = (timm_candidate, True, every_token)
    rows = []
    for name, (build, compile, flops) in builds.items():
        step = build(args, data, compile)
        seconds = statistics.median(time_steps(step, args))
        images = args.batch_size / seconds
        tflops = images * flops / 1e12
        rows.append(
            {
                "implementation": name,
                "images/s": round(images),
                "train GFLOPs/image": round(flops / 1e9, 1),
                "TFLOP/s": round(tflops, 1),
                "MFU": tflops / peak if peak else None,
            }
        )
        print(rows[-1], flush=True)
        del step
        gc.collect()
        if args.device.type == "cuda":
            torch.cuda.empty_cache()
    ceiling = matmul_tflops(args.device)
    rows.append(
        {
            "implementation": "bf16 matmul 8192^3 (ceiling)",
            "TFLOP/s": round(ceiling, 1),
            "MFU": ceiling / peak if peak else None,
        }
    )
    attention = f"attention {args.sdpa or 'as torch chooses'}"
    print(
        f"\n{args.model} at {args.img_size}, batch {args.batch_size}, bf16, {attention}; peak {peak} TFLOP/s; "
        f"{environment()}\n"
    )
    print(format_table(rows))
    if args.profile:
        write_profile(args, data, args.profile)
    return rows


if __name__ == "__main__":
    main()
