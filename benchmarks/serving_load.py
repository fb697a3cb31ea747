"""`vitkit serve` under load: concurrent clients for a fixed time, batching on and off, beside `vitkit predict`.

One run measures, side by side and alternating in rounds (the machine's load drifts):
- `vitkit predict`'s offline throughput: its own classification loop (vitkit.commands.predict.classify: decode,
  preprocess, forward in batches of --predict-batch) over the photos, in this process;
- `vitkit serve` with dynamic batching (--max-batch, --max-wait-ms) and with batching off (--max-batch 1), each
  in its own process, both in the precision `auto` picks for the batching server, under --clients threads that
  POST the same photos (raw JPEG bodies, keep-alive connections) for --seconds each round.
It prints throughput, latency percentiles and the mean batch size (from the server's /metrics) as a table, then
the forward pass alone in fp32 and bf16 at batch sizes 1, 4, 8 and --max-batch (timed in the same rounds): its
cost per image against batch 1 bounds what batching on can gain over batching off on this machine.
Every process runs torch with --threads intra-op threads (default 1: on a shared machine, OpenMP's barriers make
two threads slower than one, docs/BENCHMARKS.md); each server decodes uploads on its own threads beside it.

    python benchmarks/serving_load.py [--model ViT-S/16] [--clients 16] [--seconds 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from predict_vs_peer import TIMM_NAMES  # a script beside this one

import vitkit
from vitkit.bench.candidates import bench_model, synchronize
from vitkit.bench.table import environment, format_table
from vitkit.commands.predict import classify
from vitkit.device import resolve_device
from vitkit.models.config import to_pair
from vitkit.models.registry import Model
from vitkit.precision import inference_precision
from vitkit.service.metrics import percentile

PRECISIONS = ["fp32", "bf16"]
PEER = Path(__file__).parent / "peers" / "fastapi_timm_serve.py"
PHOTO_SIZE = (480, 640)  # height, width: a phone photo scaled down, decoded and resized for every request


def write_photos(directory: Path, count: int) -> list[Path]:
    """JPEG photos of smooth random scenes (low-frequency noise, as natural images are), all different."""
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        coarse = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
        image = Image.fromarray(coarse).resize(PHOTO_SIZE[::-1], Image.Resampling.BICUBIC)
        noise = rng.normal(0, 8, size=(*PHOTO_SIZE, 3))
        pixels = np.clip(np.asarray(image, dtype=np.float64) + noise, 0, 255).astype(np.uint8)
        paths.append(directory / f"{i:03d}.jpg")
        Image.fromarray(pixels).save(paths[-1], quality=90)
    return paths


def vitkit_serve(weights: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "vitkit.cli", "serve", str(weights), "--port", "0", *flags]


def peer_serve(name: str, model: Model, directory: Path, max_batch: int) -> list[str]:
    """The hand-written FastAPI + timm server (benchmarks/peers/fastapi_timm_serve.py) on `model` (`name`),
    batching up to `max_batch` images with a 5 ms wait."""
    state = directory / "timm.pth"
    torch.save(vitkit.to_timm(model).state_dict(), state)
    return [sys.executable, str(PEER), "--model", TIMM_NAMES[name], "--weights", str(state),
            "--port", "0", "--max-batch", str(max_batch), "--max-wait-ms", "5"]  # fmt: skip


class Server:
    """A server (`vitkit serve` or the peer) in its own process on a free port, ready."""

    def __init__(self, command: list[str], threads: int) -> None:
        environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}  # torch's intra-op threads
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=environment)
        assert self.process.stderr is not None
        seen = ""
        while not (found := re.search(r"http://([\d.]+):(\d+)", seen)):
            line = self.process.stderr.readline()  # the address line, maybe after a library's warnings
            if not line:
                raise RuntimeError(f"{' '.join(command)} did not start: {seen}")
            seen += line
        self.host, self.port = found.group(1), int(found.group(2))
        threading.Thread(target=self.process.stderr.read, daemon=True).start()  # keep the pipe drained
        deadline = time.monotonic() + 600
        while self.get("/ready")[0] != 200:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"{' '.join(command)} did not get ready")
            time.sleep(0.5)

    def get(self, path: str) -> tuple[int, dict]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        except ConnectionError:
            return 0, {}
        finally:
            connection.close()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def load(server: Server, bodies: list[bytes], clients: int, seconds: float) -> dict:
    """--clients threads POSTing the photos in turn for `seconds`: throughput, latency, mean batch size."""
    _, before = server.get("/metrics")
    latencies: list[float] = []
    failures: list[str] = []
    start = time.monotonic()
    end = start + seconds

    def client(offset: int) -> None:
        connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
        i = offset
        while time.monotonic() < end:
            sent = time.perf_counter()
            connection.request("POST", "/predict", bodies[i % len(bodies)], {"Content-Type": "image/jpeg"})
            response = connection.getresponse()
            response.read()
            if response.status == 200:
                latencies.append(time.perf_counter() - sent)
            else:
                failures.append(str(response.status))
            i += clients
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start  # includes the requests in flight at `end`, which are counted
    _, after = server.get("/metrics")
    batches = after["batches"] - before["batches"]
    images = after["images_predicted"] - before["images_predicted"]
    ordered = sorted(latencies)
    return {
        "images/s": len(latencies) / elapsed,
        "p50 ms": percentile(ordered, 50) * 1e3,
        "p99 ms": percentile(ordered, 99) * 1e3,
        "mean batch": images / batches if batches else 0.0,
        "refused": len(failures),
    }


def offline(model: Model, paths: list[Path], batch_size: int, seconds: float) -> dict:
    """`vitkit predict`'s loop over the photos, repeated for about `seconds`: images per second."""
    precision = inference_precision("auto", model, batch_size)
    options = argparse.Namespace(batch_size=batch_size, max_pixels=None)
    done, start = 0, time.monotonic()
    with torch.no_grad(), precision.inference(model) as forward:
        while time.monotonic() - start < seconds:
            for _ in classify(paths, forward, precision, model.config, None, 5, options):
                done += 1
    return {"images/s": done / (time.monotonic() - start), "precision": precision.name}


def forward_curve(
    model: Model, batch_sizes: list[int], precisions: list[str], images: int = 16
) -> dict[tuple[str, int], float]:
    """Milliseconds per image of the forward pass alone in each precision (vitkit's inference path: bf16 holds the
    weights in bf16 under autocast) at each batch size, about `images` images per size after a warm-up call: what
    batching can gain at most, decoding and HTTP aside."""
    device = next(model.parameters()).device
    cost = {}
    for name in precisions:
        precision = inference_precision(name, model, max(batch_sizes))
        with torch.no_grad(), precision.inference(model) as forward:
            for size in batch_sizes:
                x = torch.randn(size, *model.config.input_size, device=device)
                forward(x)
                calls = max(1, images // size)
                synchronize(device)
                start = time.perf_counter()
                for _ in range(calls):
                    forward(x)
                synchronize(device)
                cost[name, size] = (time.perf_counter() - start) / (calls * size) * 1e3
    return cost


def curve_table(curves: list[dict[tuple[str, int], float]], served: str) -> list[dict]:
    """The forward's cost per image (median of rounds) and the gain over batch 1: the ceiling of batching on / off
    when the model's thread is the bottleneck."""
    rows = []
    for name in PRECISIONS:
        sizes = sorted(size for precision, size in curves[0] if precision == name)
        single = float(np.median([c[name, sizes[0]] for c in curves]))
        for size in sizes:
            ms = float(np.median([c[name, size] for c in curves]))
            rows.append(
                {
                    "precision": name + (" (served)" if name == served else ""),
                    "batch": size,
                    "ms per image": ms,
                    "images/s": 1e3 / ms,
                    f"vs batch {sizes[0]}": single / ms,
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", default="ViT-S/16", help="registered model, random weights (default ViT-S/16)"
    )
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0, help="per measurement (default 20)")
    parser.add_argument("--warmup", type=float, default=3.0, help="untimed load before each measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--peer", action="store_true", help="also the FastAPI + timm server of benchmarks/peers (bf16)"
    )
    parser.add_argument("--photos", type=int, default=64)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--max-wait-ms", type=float, default=10.0)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads of predict and of each server (default 1)"
    )
    parser.add_argument(
        "--predict-batch", type=int, default=32, help="`vitkit predict --batch-size` (default 32)"
    )
    parser.add_argument(
        "--device",
        default="auto",
        help="of predict, the servers and the forward (default auto: CUDA if present)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(environment(), flush=True)
    with tempfile.TemporaryDirectory(prefix="vitkit-serving-load-") as directory:
        root = Path(directory)
        paths = write_photos(root, args.photos)
        bodies = [p.read_bytes() for p in paths]
        model = bench_model(args.model)
        vitkit.save_pretrained(model, root / "model")
        model = model.to(resolve_device(args.device))
        flags = ["--device", args.device, "--max-batch"]
        batching = Server(
            vitkit_serve(root / "model", *flags, str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms)),
            args.threads,
        )
        precision = batching.get("/ready")[1]["model"]["precision"]
        unbatched = Server(vitkit_serve(root / "model", *flags, "1", "--precision", precision), args.threads)
        servers = {"on": batching, "off": unbatched}
        if args.peer:
            servers["peer"] = Server(peer_serve(args.model, model, root, args.max_batch), args.threads)
        rows: dict[str, list[dict]] = {"predict": [], **{name: [] for name in servers}}
        curve_sizes = sorted({1, 4, 8, args.max_batch})
        curves: list[dict[tuple[str, int], float]] = []
        try:
            for round_ in range(args.rounds):
                rows["predict"].append(offline(model, paths, args.predict_batch, args.seconds))
                order = PRECISIONS[round_ % 2 :] + PRECISIONS[: round_ % 2]  # alternated: drift cancels
                curves.append(forward_curve(model, curve_sizes, order))
                for name, server in servers.items():
                    load(server, bodies, args.clients, args.warmup)
                    rows[name].append(load(server, bodies, args.clients, args.seconds))
                print(
                    f"round {round_ + 1}: predict {rows['predict'][-1]['images/s']:.2f}, batching on "
                    f"{rows['on'][-1]['images/s']:.2f}, off {rows['off'][-1]['images/s']:.2f}"
                    + (f", peer {rows['peer'][-1]['images/s']:.2f}" if args.peer else "")
                    + " images/s",
                    flush=True,
                )
        finally:
            for server in servers.values():
                server.stop()
    offline_rate = float(np.median([r["images/s"] for r in rows["predict"]]))
    table = [
        {
            "mode": "vitkit predict (offline)",
            "clients": "",
            "precision": rows["predict"][0]["precision"],
            "images/s": offline_rate,
            "vs predict": 1.0,
        }
    ]
    labels = {
        "on": f"serve, batching on (--max-batch {args.max_batch})",
        "off": "serve, batching off (--max-batch 1)",
        "peer": f"FastAPI + timm, asyncio batching ({args.max_batch}, 5 ms), bf16 autocast",
    }
    for name in servers:
        measured = rows[name]
        rate = float(np.median([r["images/s"] for r in measured]))
        table.append(
            {
                "mode": labels[name],
                "clients": args.clients,
                "precision": "bf16" if name == "peer" else precision,
                "images/s": rate,
                "vs predict": rate / offline_rate,
                "p50 ms": float(np.median([r["p50 ms"] for r in measured])),
                "p99 ms": float(np.median([r["p99 ms"] for r in measured])),
                "mean batch": float(np.median([r["mean batch"] for r in measured])),
                "refused": sum(r["refused"] for r in measured),
            }
        )
    paired = {  # per round, measured minutes apart at most: less of the machine's drift than the medians
        "batching on / off": [
            on["images/s"] / off["images/s"] for on, off in zip(rows["on"], rows["off"], strict=True)
        ],
        "batching on / predict": [
            on["images/s"] / p["images/s"] for on, p in zip(rows["on"], rows["predict"], strict=True)
        ],
    }
    if args.peer:
        paired["batching on / peer"] = [
            on["images/s"] / peer["images/s"] for on, peer in zip(rows["on"], rows["peer"], strict=True)
        ]
    print(
        f"{args.model} at {'x'.join(map(str, to_pair(model.config.img_size)))}, {args.photos} JPEG photos "
        f"{PHOTO_SIZE[1]}x{PHOTO_SIZE[0]}, {args.rounds} round(s) of {args.seconds:g} s each (medians); paired per "
        "round: "
        + "; ".join(
            f"{name} {np.median(ratios):.2f}x (rounds {', '.join(f'{r:.2f}' for r in ratios)})"
            for name, ratios in paired.items()
        )
    )
    print(format_table(table))
    print(
        "The forward pass alone (median of rounds): the servers' model thread runs it, so batching on / off gains "
        "at most its 'vs batch 1' at the mean batch size"
    )
    print(format_table(curve_table(curves, precision)))


if __name__ == "__main__":
    main()
