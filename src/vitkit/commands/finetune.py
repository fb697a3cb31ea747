"""`vitkit finetune --weights W`: the paper's fine-tuning (§3.2, B.1.1) through the same engine as `train`.

Zero-initialised D x K head, optional higher resolution (`model.img_size=56`: position embeddings resampled),
SGD with momentum 0.9, no weight decay, cosine decay, gradient clipping at 1, Polyak averaging. The weights can be
a masked-patch-prediction run (`train.objective = "mpp"`): its final/ is the bare ViT.
"""

from __future__ import annotations

import argparse

from vitkit.commands import train


def run(args: argparse.Namespace) -> int:
    return train.train_request(args, train.request_from(args, "finetune", args.weights))
