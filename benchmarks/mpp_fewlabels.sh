#!/usr/bin/env bash
# §4.6 in miniature: masked patch prediction on the 60k Fashion-MNIST training images (labels unused), then the
# same supervised recipe on 1,000 labelled images from that MPP initialisation and from scratch, over seeds (each
# seed draws another labelled subset, initialisation and data order). Usage:
#   bash benchmarks/mpp_fewlabels.sh [OUT_DIR] [SEEDS] [THREADS]
set -euo pipefail
out=${1:-runs/mpp}
seeds=${2:-3}
threads=${3:-1}
vitkit=${VITKIT:-.venv/bin/vitkit}
python=${PYTHON:-.venv/bin/python}
[ -f "$out/pretrain/report.json" ] || "$vitkit" train --config configs/fashion_mnist_mpp.toml --out "$out/pretrain" \
    train.threads="$threads"
for seed in $(seq 0 $((seeds - 1))); do
  common=(--config configs/fashion_mnist_1k.toml --seed "$seed" data.subset_seed="$seed" train.threads="$threads")
  [ -f "$out/mpp_$seed/report.json" ] || "$vitkit" finetune --weights "$out/pretrain" --out "$out/mpp_$seed" "${common[@]}"
  [ -f "$out/scratch_$seed/report.json" ] || "$vitkit" train --out "$out/scratch_$seed" "${common[@]}"
done
"$python" - "$out" "$seeds" <<'PY'
import json, statistics, sys
out, seeds = sys.argv[1], int(sys.argv[2])
for arm in ("scratch", "mpp"):
    top1 = [100 * json.load(open(f"{out}/{arm}_{s}/report.json"))["test_top1"] for s in range(seeds)]
    spread = statistics.stdev(top1) if len(top1) > 1 else 0.0
    print(f"{arm:8s} test top-1 {statistics.mean(top1):.2f} +- {spread:.2f}  runs {[round(v, 2) for v in top1]}")
PY
