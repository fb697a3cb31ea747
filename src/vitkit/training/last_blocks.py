"""`train.fit = "last_blocks"`: the middle path between a closed-form head (vitkit.training.linear_head) and full
fine-tuning: only the last `train.tuned_blocks` encoder blocks, the final LayerNorm and a zero-initialised head are
trained, on the cached token sequences entering the first tuned block.

The frozen blocks see every image once: the sequences entering block L - K (K = train.tuned_blocks) are computed
in the fastest precision with the evaluation's preprocessing and cached like the pre-logits features
(vitkit.training.features: keyed by the weights, the preprocessing, L - K and each file's identity), so a second
fit (another lr, more steps, a few more photos) runs only the tuned blocks. The price of the cache: no
augmentation (random crops, flips, Mixup) can apply to cached tokens; each image is seen as the evaluation sees
it. The steps are the recipe's (SGD or AdamW, warmup and decay, gradient clipping: vitkit.training.optim) over
batches of cached sequences, in the fit's precision (bf16 autocast where the features are computed in bf16; the
weights and the loss in float32), a line at least every ~10 s. final/ is the whole ViT: the frozen blocks
as loaded, the tuned ones and the head; its forward on an image is the training forward on that image's cached
sequence (`VisionTransformer.encode(z, first=L - K)`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from vitkit.models.vit import VisionTransformer
from vitkit.recipe.run_config import RunConfig
from vitkit.training.frozen_fit import FrozenFit, cache_features, evaluate_scores, open_fit, write_fitted_run
from vitkit.training.objectives import classification_loss
from vitkit.training.optim import build_optimizer, learning_rate, set_learning_rate
from vitkit.training.rundir import RunDirLock

LOG_SECONDS = 10.0  # a progress line at least this often


def fit_last_blocks(
    config: RunConfig, run_dir: Path, command: list[str] | None = None, quiet: bool = False
) -> dict[str, Any]:
    """Tune the last blocks and head of `config` (train.fit='last_blocks') into a new run directory `run_dir`;
    returns report.json. `quiet` prints nothing."""
    lock = RunDirLock(run_dir)
    try:
        return _fit(config.validate(), run_dir, lock, command, quiet)
    finally:
        lock.release()


def first_tuned(model: VisionTransformer, tuned_blocks: int) -> int:
    """The index of the first tuned block; more blocks than the model has is a ValueError."""
    depth = len(model.blocks)
    if tuned_blocks > depth:
        raise ValueError(f"train.tuned_blocks is {tuned_blocks} but the model has {depth} blocks")
    return depth - tuned_blocks


def tuned_logits(model: VisionTransformer, tokens: torch.Tensor, first: int) -> torch.Tensor:
    """Logits from the sequences entering block `first`: the model's own forward from there on."""
    queries = 1 if model.config.classifier == "token" else None
    return model.forward_head(model.encode(tokens, queries, first=first))


def freeze_all_but(model: VisionTransformer, first: int) -> list[nn.Parameter]:
    """Only blocks `first`.. , the final norm (before or after pooling), the attention pool of a 'map' head,
    pre-logits and the head keep gradients; returns those."""
    model.requires_grad_(False)
    tuned = [*model.blocks[first:], model.norm, model.fc_norm, model.pre_logits, model.head]
    if model.attn_pool is not None:
        tuned.append(model.attn_pool)
    for module in tuned:
        module.requires_grad_(True)
    return [p for p in model.parameters() if p.requires_grad]


def _fit(
    config: RunConfig, run_dir: Path, lock: RunDirLock, command: list[str] | None, quiet: bool
) -> dict[str, Any]:
    train = config.train
    what = f"last {train.tuned_blocks} block(s) and a head on frozen tokens"
    fit = open_fit(config, run_dir, lock, what, quiet)
    if not isinstance(fit.model, VisionTransformer):
        raise ValueError(f"{config.model.weights}: train.fit='last_blocks' tunes a ViT's blocks")
    model = fit.model
    first = first_tuned(model, train.tuned_blocks)
    d = config.data
    augmented = [
        name
        for name, on in (
            ("data.crop", d.crop != "none"),
            ("data.flip", d.flip),
            ("data.randaugment", d.randaugment),
            ("data.mixup", d.mixup > 0),
            ("data.cutmix", d.cutmix > 0),
        )
        if on
    ]
    if augmented:
        fit.say(f"{', '.join(augmented)}: not applied; cached tokens are each image as evaluation sees it")
    cache_features(
        fit, lambda m, x: cast(VisionTransformer, m).tokens_entering(x, first), tokens_entering=first
    )
    start = time.perf_counter()
    losses = train_tuned(fit, first)
    train_seconds = time.perf_counter() - start
    model.eval()

    @torch.no_grad()
    def scores(tokens: np.ndarray) -> np.ndarray:
        batches = torch.from_numpy(tokens).split(train.eval_batch())
        with fit.precision.autocast():
            logits = [tuned_logits(model, z.to(fit.device), first).float().cpu() for z in batches]
        return torch.cat(logits).numpy()

    evaluations, confusion = evaluate_scores(fit, scores)
    report = {
        **evaluations,
        "fit": "last_blocks",
        "tuned_blocks": train.tuned_blocks,
        "steps": train.steps,
        "final_loss": losses[-1] if losses else None,
        "train_seconds": train_seconds,
    }
    return write_fitted_run(fit, lock, command, confusion, report)


def train_tuned(fit: FrozenFit, first: int) -> list[float]:
    """`train.steps` optimizer steps of the tuned part on batches of cached training sequences (an epoch's order
    drawn with `train.seed`); returns the losses."""
    config, model = fit.config, cast(VisionTransformer, fit.model)
    train, optim = config.train, config.optim
    torch.manual_seed(train.seed)  # dropout and stochastic depth in the tuned blocks
    parameters = freeze_all_but(model, first)
    optimizer = build_optimizer(model, optim, fit.device)
    x, y = fit.features["train"]
    tokens, labels = torch.from_numpy(x), torch.from_numpy(y).long()
    batch = min(train.batch_size, len(labels))
    order = torch.Generator().manual_seed(train.seed)
    batches: list[torch.Tensor] = []
    losses: list[float] = []
    model.train()
    logged = time.perf_counter()
    for step in range(train.steps):
        if not batches:
            batches = list(torch.randperm(len(labels), generator=order).split(batch))
        rows = batches.pop(0)
        set_learning_rate(optimizer, learning_rate(step, train.steps, optim))
        with fit.precision.autocast():
            logits = tuned_logits(model, tokens[rows].to(fit.device), first)
            loss = classification_loss(logits, labels[rows].to(fit.device), train.loss, train.label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if optim.grad_clip:
            torch.nn.utils.clip_grad_norm_(parameters, optim.grad_clip)
        optimizer.step()
        losses.append(float(loss.detach()))
        now = time.perf_counter()
        if step + 1 == train.steps or (step + 1) % train.log_every == 0 or now - logged >= LOG_SECONDS:
            fit.say(f"step {step + 1}/{train.steps}  loss {losses[-1]:.4f}")
            logged = now
    return losses
