"""Run the commands behind every table and figure of docs/BENCHMARKS.md, one after the other, each in its own
process (so one benchmark's memory or threads never leak into the next), and collect their markdown tables.

    python benchmarks/bench_all.py                      # everything (about 30-40 minutes on 2 busy cores)
    python benchmarks/bench_all.py --only inference-b16 --only train
    python benchmarks/bench_all.py --threads 1 --clock cpu   # on a shared machine (see docs/BENCHMARKS.md)
    python benchmarks/bench_all.py --list

Each table is also reproducible on its own with the `vitkit bench ...` command printed above it. No timing here is
a test: nothing asserts a speed, the numbers are for reading (and ratios only count when measured side by side).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

FIGURES = Path("docs/figures/bench")

COMMANDS = {
    "inference-s16": "vitkit bench inference --model ViT-S/16 --batch-size 8 --rounds 6",
    "inference-b16": "vitkit bench inference --model ViT-B/16 --batch-size 8 --rounds 6",
    "inference-dinov2-b14": (
        "vitkit bench inference --model DINOv2-B/14 --img-size 224 --batch-size 8 --peers timm --precision bf16 "
        "--rounds 6 --gemm-size 512"
    ),
    "batch-s16": "vitkit bench batch --model ViT-S/16 --batch-sizes 1,4,8,16,32,64 --rounds 5",
    "batch-b16": "vitkit bench batch --model ViT-B/16 --batch-sizes 1,4,8,16,32 --rounds 5",
    "resolution": (
        "vitkit bench resolution --models ViT-S/16,ViT-B/16,R50+ViT-B/16 --sizes 160,224,288,384 "
        f"--batch-size 4 --rounds 3 --plot {FIGURES / 'd5_resolution.png'}"
    ),
    "checkpointing": "vitkit bench memory --model ViT-B/16 --batch-size 32",
    "train": "vitkit bench train --processes 2 --rounds 11 --steps 10",  # its workers: wall clock only
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", action="append", choices=sorted(COMMANDS), help="run only these (repeatable)"
    )
    parser.add_argument("--list", action="store_true", help="print the commands and exit")
    parser.add_argument("--out", default="benchmarks/results.md", help="where to collect the tables")
    parser.add_argument("--threads", type=int, default=None, help="append --threads N to every command")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default=None,
        help="append --clock to every command but train (wall clock only)",
    )
    args = parser.parse_args()
    selected = args.only or list(COMMANDS)
    if args.list:
        for name in selected:
            print(f"{name}: {COMMANDS[name]}")
        return 0
    vitkit = str(Path(sys.executable).with_name("vitkit"))
    FIGURES.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as out:
        for name in selected:
            command = COMMANDS[name] + (f" --threads {args.threads}" if args.threads else "")
            command += f" --clock {args.clock}" if args.clock and name != "train" else ""
            start = time.perf_counter()
            print(f"== {name}: {command}", flush=True)
            done = subprocess.run([vitkit, *command.split()[1:]], capture_output=True, text=True)
            table = (
                done.stdout if done.returncode == 0 else f"FAILED ({done.returncode}):\n{done.stderr[-2000:]}"
            )
            out.write(f"\n### {name}\n\n`{command}` ({time.perf_counter() - start:.0f} s)\n\n{table}\n")
            out.flush()
            print(table, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
