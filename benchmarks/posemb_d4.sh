#!/usr/bin/env bash
# Appendix D.4 in miniature: the same supervised training with each kind of position embedding, then the
# few-shot probe (docs/RESULTS.md). Usage: bash benchmarks/posemb_d4.sh [OUT_DIR] [STEPS]
set -euo pipefail
out=${1:-runs/d4}
steps=${2:-1200}
vitkit=${VITKIT:-.venv/bin/vitkit}
for kind in none learned learned_2d relative; do
  "$vitkit" train --out "$out/$kind" --steps "$steps" model.pos_embed="$kind" train.threads=1 train.checkpoint_every=1200
  "$vitkit" fewshot --weights "$out/$kind" --shots 1,5,10,25 --seeds 5 --out "$out/$kind/fewshot.json"
done
