"""Training images/s at 224 px from WebDataset shards in an S3 bucket against the same shards on local disk.

The bucket is moto's S3 server, started here on 127.0.0.1 (the same S3 API, on the same machine: it measures what
vitkit's remote reading costs, not a network). A JPEG collection (benchmarks/make_image_collection.py) is packed
once into shards, which are uploaded as they are; then `vitkit train` runs the same recipe on `wds:DIR` and on
`wds:s3://...`, alternated in rounds, and each run's report.json gives its images/s and the share of its steps
spent waiting for data.

    python benchmarks/remote_shards.py /work/big/remote [--images 512] [--steps 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BUCKET = "bench"


def vitkit(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "vitkit.cli", *args], check=True, env=env)


def local_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_moto(port: int) -> subprocess.Popen:
    """moto's S3 server on 127.0.0.1:`port`, once it answers."""
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2).close()
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit(f"moto's S3 server did not start on port {port}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("work", type=Path, help="directory for the collection, its shards and the runs")
    parser.add_argument("--images", type=int, default=512, help="training images")
    parser.add_argument("--shard-images", type=int, default=64)
    parser.add_argument("--model", default="ViT-Ti/16")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2, help="data.workers")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    folder, shards = args.work / "collection", args.work / "wds"
    if not folder.is_dir():
        maker = Path(__file__).with_name("make_image_collection.py")
        subprocess.run([sys.executable, str(maker), str(folder), "--train", str(args.images), "--val", "64"],
                       check=True)  # fmt: skip
    if not shards.is_dir():
        vitkit(
            "data", "pack", f"folder:{folder}", "--out", str(shards), "--shard-images", str(args.shard_images)
        )

    port = local_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
    os.environ.update(env)
    server = start_moto(port)
    try:
        import fsspec

        fs = fsspec.filesystem("s3")
        fs.mkdir(BUCKET)
        for path in sorted(shards.iterdir()):
            fs.put_file(str(path), f"{BUCKET}/wds/{path.name}")
        sources = {"local disk": f"wds:{shards}", "S3 (moto, 127.0.0.1)": f"wds:s3://{BUCKET}/wds"}
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in sources}
        for round_ in range(args.rounds):
            for k, (name, source) in enumerate(sources.items()):
                out = args.work / "runs" / f"{round_}-{k}"
                vitkit("train", "--out", str(out), "--model", args.model, "--steps", str(args.steps),
                       f"data.source={source}", f"data.workers={args.workers}", "data.crop=inception",
                       f"train.batch_size={args.batch_size}", "train.eval_every=0",
                       "train.threads=1", "train.device=cpu", "train.precision=fp32", "optim.warmup_steps=2",
                       env=env)  # fmt: skip
                report = json.loads((out / "report.json").read_text())
                results[name].append((report["images_per_second"], report["data_wait_share"]))
    finally:
        server.terminate()
        server.wait()

    print(f"\n{args.model} at 224 px, batch {args.batch_size}, {args.steps} steps, data.workers={args.workers}, "
          f"{args.images} images in {args.shard_images}-image shards, {args.rounds} rounds")  # fmt: skip
    print("| source | images/s per round | median | data wait share per round |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        rates = " ".join(f"{rate:.2f}" for rate, _ in rows)
        waits = " ".join(f"{wait:.2%}" for _, wait in rows)
        print(f"| {name} | {rates} | {statistics.median(r for r, _ in rows):.2f} | {waits} |")
    local, remote = (results[name] for name in sources)
    ratios = [r[0] / l_[0] for l_, r in zip(local, remote, strict=True)]
    print(f"S3 / local images/s per round: {' '.join(f'{x:.3f}' for x in ratios)} "
          f"(median {statistics.median(ratios):.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
