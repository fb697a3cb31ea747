#!/usr/bin/env python3
"""The own-photos journey (docs/start/own-photos.md) command by command, each a fresh process as a user types it,
with the seconds between its lines of output: no command may go `--limit` seconds (default 30) without a line,
from its start to its first line, between two lines (a progress bar's redraw counts: it ends with a carriage
return) and from its last line to its exit. Python calls (`vitkit.finetune`, `vitkit.evaluate`) included.

Prints one Markdown row per command (its seconds, lines and longest silence, with the line that ended it) and
exits 1 when a silence passed the limit. Without `--weights`, a tiny ViT-B/16-layout checkpoint (vitkit.export_npz)
stands in for ViT-B_16.npz, and without `--photos` a folder of random JPEGs (3 classes, 12 train and 4 test photos
each) for yours, so the journey runs in a few minutes; give the real ones to measure what a user waits.

    python benchmarks/journey_gaps.py /tmp/journey
    python benchmarks/journey_gaps.py /tmp/journey --weights ViT-B/16-i21k --photos ~/photos --limit 30
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import vitkit

CLI = "import sys; from vitkit import cli; sys.exit(cli.main(sys.argv[1:]))"
TINY = dict(
    img_size=32, patch_size=16, hidden_size=32, depth=2, num_heads=2, mlp_dim=64, activation="gelu_tanh"
)


def journey(weights: str) -> list[tuple[str, list[str]]]:
    """(what a user types, the argv of `python -c`) of each step of the journey, in order."""
    linear = ["finetune", "--weights", weights, "--config", "photos_linear", "data.source=folder:photos"]
    steps = [
        ("finetune photos_linear", [CLI, *linear, "--out", "runs/linear"]),
        ("predict photos/test", [CLI, "predict", "photos/test", "--weights", "runs/linear"]),
        ("eval runs/linear", [CLI, "eval", "--weights", "runs/linear"]),
        ("finetune photos_linear again", [CLI, *linear, "train.linear_l2=[16.0,64.0]", "--out", "runs/again"]),
        ("finetune photos_last_blocks", [CLI, "finetune", "--weights", weights, "--config", "photos_last_blocks",
                                         "data.source=folder:photos", "--out", "runs/last2"]),
        ("finetune photos_finetune", [CLI, "finetune", "--weights", weights, "--config", "photos_finetune",
                                      "data.source=folder:photos", "data.val_split=3", "--batch-size", "4",
                                      "--steps", "3", "--out", "runs/finetuned"]),
        ("eval runs/finetuned", [CLI, "eval", "--weights", "runs/finetuned"]),
        ("vitkit.finetune(...) linear", [f"import vitkit; vitkit.finetune({weights!r}, 'photos_linear', "
                                         "data={'source': 'folder:photos'}, out='runs/python')"]),
        ("vitkit.evaluate(runs/python)", ["import vitkit; vitkit.evaluate('runs/python')"]),
    ]  # fmt: skip
    return steps


def stamped(argv: list[str], cwd: Path) -> tuple[list[tuple[float, str]], float, int]:
    """(each line of output with its second, the seconds to the exit, the exit code) of `python -c ARGV`."""
    start = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-c", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)  # fmt: skip
    assert process.stdout is not None
    lines, pending = [], b""
    while chunk := process.stdout.read1(4096):  # type: ignore[attr-defined]
        pending += chunk
        *done, pending = pending.replace(b"\r", b"\n").split(b"\n")
        now = time.perf_counter() - start
        lines += [(now, line.decode(errors="replace")) for line in done if line.strip()]
    code = process.wait()
    return lines, time.perf_counter() - start, code


def longest_silence(lines: list[tuple[float, str]], total: float) -> tuple[float, str]:
    """(the longest stretch without output, the line that ended it, or "(exit)")."""
    marks = [(0.0, "(start)"), *lines, (total, "(exit)")]
    return max((b[0] - a[0], b[1]) for a, b in zip(marks, marks[1:], strict=False))


def write_photos(root: Path) -> None:
    for split, count in (("train", 12), ("test", 4)):
        for label, name in enumerate(("cat", "dog", "fox")):
            for index in range(count):
                rng = np.random.default_rng(1000 * label + 100 * (split == "test") + index)
                path = root / split / name / f"{index}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)).save(path, quality=90)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "workdir", type=Path, help="an empty directory: the journey's runs/ and files go there"
    )
    parser.add_argument("--weights", help="weights as a user names them (default: a tiny ViT-B/16 layout)")
    parser.add_argument(
        "--photos", type=Path, help="an ImageFolder with train/ and test/ (default: random JPEGs)"
    )
    parser.add_argument("--limit", type=float, default=30.0, help="the longest silence allowed, in seconds")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.weights is None:
        torch.manual_seed(0)
        vitkit.export_npz(
            vitkit.create_model("ViT-B/16", **TINY, num_classes=1000), args.workdir / "ViT-B_16.npz"
        )
    weights = args.weights or "ViT-B_16.npz"
    if args.photos is None:
        write_photos(args.workdir / "photos")
    elif not (args.workdir / "photos").exists():
        (args.workdir / "photos").symlink_to(args.photos.resolve(), target_is_directory=True)
    print(f"<!-- torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} -->")
    print("| command | seconds | lines | longest silence | ended by |\n|---|---:|---:|---:|---|")
    late = []
    for what, argv in journey(weights):
        lines, total, code = stamped(argv, args.workdir)
        silence, ended_by = longest_silence(lines, total)
        print(f"| {what} | {total:.1f} | {len(lines)} | {silence:.1f} | `{ended_by[:60]}` |", flush=True)
        if code != 0:
            print("\n".join(line for _, line in lines[-10:]), file=sys.stderr)
            raise SystemExit(f"{what}: exit code {code}")
        if silence > args.limit:
            late.append(what)
    if late:
        print(f"silent for more than {args.limit:g} s: {', '.join(late)}", file=sys.stderr)
    return 1 if late else 0


if __name__ == "__main__":
    sys.exit(main())
