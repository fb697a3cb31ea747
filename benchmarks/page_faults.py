"""What glibc's default handling of freed memory costs a training step, and what `keep_freed_memory` saves.

Each sample is a fresh process (glibc's thresholds adapt as a process runs, so only a fresh one shows the default)
that trains the default Fashion-MNIST model with fused AdamW for `--warmup` + `--steps` steps at batch `--batch-size`
and reports the minor page faults and milliseconds per step of the last `--steps`; the two settings alternate.
`--eval-batch N` puts one no-grad forward of N images between warm-up and the timed steps, as a run's periodic
evaluation does: freeing its large blocks raises glibc's own thresholds.

    python benchmarks/page_faults.py [--rounds 6] [--steps 30] [--batch-size 64] [--threads 1] [--eval-batch 500]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from vitkit.bench.table import format_table

STEPS = """
import json, resource, sys, time
import torch, torch.nn.functional as F
import vitkit
from vitkit.recipe.run_config import RunConfig
from vitkit.allocator import keep_freed_memory

keep, threads, batch, warmup, steps, eval_batch = sys.argv[1] == "keep", *map(int, sys.argv[2:])
torch.set_num_threads(threads)
if keep:
    keep_freed_memory()
config = RunConfig().validate()  # the model settled: the default for the default data
model = vitkit.create_model(config.model.name, num_classes=10, **config.model.overrides).train()
optimizer = torch.optim.AdamW(model.parameters(), fused=True)
x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))

def step():
    F.cross_entropy(model(x), y, label_smoothing=0.1).backward()
    optimizer.step()
    optimizer.zero_grad()

for _ in range(warmup):
    step()
if eval_batch:
    with torch.no_grad():
        model.eval()(torch.randn(eval_batch, 1, 28, 28))
    model.train()
faults, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
for _ in range(steps):
    step()
seconds = time.perf_counter() - start
print(json.dumps({"faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps,
                  "ms": seconds / steps * 1e3}))
"""

SETTINGS = {"glibc default": "default", "keep_freed_memory()": "keep"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--eval-batch", type=int, default=0, help="an evaluation forward of N images before timing"
    )
    args = parser.parse_args()
    samples: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name, mode in SETTINGS.items():
            argv = [
                mode,
                *map(str, (args.threads, args.batch_size, args.warmup, args.steps, args.eval_batch)),
            ]
            out = subprocess.run(
                [sys.executable, "-c", STEPS, *argv], capture_output=True, text=True, check=True
            )
            samples[name].append(json.loads(out.stdout))
    base = samples["glibc default"]
    rows = []
    for name, runs in samples.items():
        ratios = [b["ms"] / r["ms"] for b, r in zip(base, runs, strict=True)]
        rows.append(
            {
                "allocator": name,
                "page faults per step": statistics.median(r["faults"] for r in runs),
                "ms per step": statistics.median(r["ms"] for r in runs),
                "speed vs default": statistics.median(ratios),
                "range": f"{min(ratios):.2f}-{max(ratios):.2f}",
            }
        )
    after = f", after an evaluation forward of {args.eval_batch}" if args.eval_batch else ""
    print(
        f"default Fashion-MNIST model, batch {args.batch_size}, {args.threads} thread(s), wall clock, "
        f"{args.rounds} fresh processes per setting, {args.steps} steps each{after}"
    )
    print(format_table(rows))


if __name__ == "__main__":
    main()
