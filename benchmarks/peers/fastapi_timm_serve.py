#!/usr/bin/env python3
"""The hand-written peer of `vitkit serve`: a FastAPI app serving a timm model, as one writes it by hand.

POST /predict takes an image body; it is decoded (Pillow) and preprocessed (torchvision: resize the short side,
centre crop, normalise to [-1, 1]) on Starlette's thread pool, then queued. One asyncio task gathers the queue into
batches (up to --max-batch images, waiting at most --max-wait-ms after the first) and runs each on a single model
thread under bf16 autocast; every request gets its top-5 classes. GET /ready and GET /metrics (batches, images)
let benchmarks/serving_load.py drive it as it drives `vitkit serve`. It prints its address on stderr.

    python benchmarks/peers/fastapi_timm_serve.py --model vit_small_patch16_224 --weights vit_s16.pth --port 0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import socket
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import timm
import torch
import uvicorn
from fastapi import FastAPI, Request
from PIL import Image
from starlette.concurrency import run_in_threadpool
from torchvision import transforms


def build_app(model: torch.nn.Module, max_batch: int, max_wait_s: float) -> FastAPI:
    size = model.default_cfg["input_size"][-1]
    preprocess = transforms.Compose(
        [
            transforms.Resize(size, interpolation=transforms.InterpolationMode.BILINEAR),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize([0.5] * 3, [0.5] * 3),
        ]
    )
    model_thread = ThreadPoolExecutor(1)
    queue: asyncio.Queue[tuple[torch.Tensor, asyncio.Future]] = asyncio.Queue()
    counts = {"batches": 0, "images_predicted": 0}

    def decode(body: bytes) -> torch.Tensor:
        with Image.open(io.BytesIO(body)) as image:
            return preprocess(image.convert("RGB"))

    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x).float().softmax(-1)

    async def batcher() -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await queue.get()]
            deadline = loop.time() + max_wait_s
            while len(jobs) < max_batch and (left := deadline - loop.time()) > 0:
                try:
                    jobs.append(await asyncio.wait_for(queue.get(), left))
                except TimeoutError:
                    break
            probs = await loop.run_in_executor(model_thread, forward, torch.stack([x for x, _ in jobs]))
            counts["batches"] += 1
            counts["images_predicted"] += len(jobs)
            for (_, future), row in zip(jobs, probs, strict=True):
                future.set_result(row)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        warmup = torch.zeros(1, 3, size, size)  # the first pass builds the kernels
        await asyncio.get_running_loop().run_in_executor(model_thread, forward, warmup)
        task = asyncio.create_task(batcher())
        yield
        task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.get("/ready")
    async def ready() -> dict:
        return {"ready": True}

    @app.get("/metrics")
    async def metrics() -> dict:
        return counts

    @app.post("/predict")
    async def predict(request: Request) -> dict:
        x = await run_in_threadpool(decode, await request.body())
        future = asyncio.get_running_loop().create_future()
        await queue.put((x, future))
        top = (await future).topk(5)
        return {
            "predictions": [
                {"index": i, "probability": p} for p, i in zip(*map(torch.Tensor.tolist, top), strict=True)
            ]
        }

    return app


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--weights", required=True, help="a timm state dict (.pth)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    args = parser.parse_args()
    model = timm.create_model(args.model, pretrained=False)
    model.load_state_dict(torch.load(args.weights, weights_only=True))
    model.eval()
    sock = socket.create_server(("127.0.0.1", args.port))
    print(f"serving on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    app = build_app(model, args.max_batch, args.max_wait_ms / 1e3)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
