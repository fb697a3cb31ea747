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

import base64
import sys
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from vitkit import shutdown
from vitkit.models.vit import VisionTransformer
from vitkit.recipe.run_config import RunConfig
from vitkit.training.checkpoint import CheckpointClock, CheckpointManager, last_good_checkpoint
from vitkit.training.frozen_fit import FrozenFit, cache_features, evaluate_scores, open_fit, write_fitted_run
from vitkit.training.objectives import classification_loss
from vitkit.training.optim import build_optimizer, learning_rate, set_learning_rate
from vitkit.training.rundir import RunDirLock, create_run_dir

LOG_SECONDS = 10.0  # a progress line at least this often
PLAN_AFTER = (1, 3)  # the steps (of this process) after which the fit says how long it will take


def fit_last_blocks(
    config: RunConfig,
    run_dir: Path,
    command: list[str] | None = None,
    quiet: bool = False,
    resume: bool = False,
) -> dict[str, Any]:
    """Tune the last blocks and head of `config` (train.fit='last_blocks') into a new run directory `run_dir`, or
    continue its latest checkpoint with `resume`; returns report.json. `quiet` prints nothing."""
    lock = RunDirLock(run_dir)
    try:
        return _fit(config.validate(), run_dir, lock, command, quiet, resume)
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
    config: RunConfig, run_dir: Path, lock: RunDirLock, command: list[str] | None, quiet: bool, resume: bool
) -> dict[str, Any]:
    train = config.train
    what = f"last {train.tuned_blocks} block(s) and a head on frozen tokens"
    fit = open_fit(config, run_dir, lock, what, quiet, resume)
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
    if not fit.created:  # from here on a stopped fit leaves its run directory, to resume
        create_run_dir(run_dir, config, lock)
        fit.created = True
    cache_features(
        fit, lambda m, x: cast(VisionTransformer, m).tokens_entering(x, first), tokens_entering=first
    )
    checkpoints = CheckpointManager(run_dir, "none", train.keep_checkpoints)
    losses, train_seconds = train_tuned(fit, first, checkpoints)
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


def train_tuned(
    fit: FrozenFit, first: int, checkpoints: CheckpointManager | None = None
) -> tuple[list[float], float]:
    """`train.steps` optimizer steps of the tuned part on batches of cached training sequences (an epoch's order
    drawn with `train.seed`), continuing `fit.saved` when resumed; returns the losses and the seconds of steps.
    With `checkpoints`, one is written every train.checkpoint_every steps, train.checkpoint_minutes and at the
    end, and at the end of the step a signal came in (vitkit.shutdown), before the interruption is raised."""
    config, model = fit.config, cast(VisionTransformer, fit.model)
    train, optim = config.train, config.optim
    torch.manual_seed(train.seed)  # dropout and stochastic depth in the tuned blocks
    parameters = freeze_all_but(model, first)
    optimizer = build_optimizer(model, optim, fit.device)
    x, y = fit.features["train"]
    tokens, labels = torch.from_numpy(x), torch.from_numpy(y).long()
    batch = min(train.batch_size, len(labels))
    order = torch.Generator().manual_seed(train.seed)
    position = TunedPosition(order, fit.device)
    if checkpoints is not None and fit.saved is not None:
        checkpoints.restore(fit.saved, model, optimizer, None)
        position.restore(fit.saved.state)
    by_time = CheckpointClock(train.checkpoint_minutes, fit.device)
    model.train()
    logged = planned = time.perf_counter()
    at = written = first_step = position.step
    stepping = False  # within a step its weights may be half-updated: never saved
    try:
        for step in range(at, train.steps):
            shutdown.raise_if_stopped()
            stepping = True
            with shutdown.finishing_step():
                start = time.perf_counter()
                if not position.batches:
                    position.batches = list(torch.randperm(len(labels), generator=order).split(batch))
                rows = position.batches.pop(0)
                set_learning_rate(optimizer, learning_rate(step, train.steps, optim))
                with fit.precision.autocast():
                    logits = tuned_logits(model, tokens[rows].to(fit.device), first)
                    loss = classification_loss(
                        logits, labels[rows].to(fit.device), train.loss, train.label_smoothing
                    )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if optim.grad_clip:
                    torch.nn.utils.clip_grad_norm_(parameters, optim.grad_clip)
                optimizer.step()
                position.losses.append(float(loss.detach()))
                position.seconds += time.perf_counter() - start
                at, stepping = step + 1, False
            due, stopping = by_time.decide(shutdown.stop_requested())
            now = time.perf_counter()
            ran = at - first_step
            if ran in PLAN_AFTER and at < train.steps:  # the first step also pays for warm-up: timed apart
                per_step = (now - planned) / (ran - (PLAN_AFTER[0] if ran > PLAN_AFTER[0] else 0))
                fit.say(f"plan: {train.steps} steps of {batch} sequences; {per_step:.2f} s a step: about "
                        f"{per_step * (train.steps - at):.0f} s to go")  # fmt: skip
                planned = now
            if at == train.steps or at % train.log_every == 0 or now - logged >= LOG_SECONDS:
                fit.say(f"step {at}/{train.steps}  loss {position.losses[-1]:.4f}")
                logged = now
            if stopping:
                raise KeyboardInterrupt
            if checkpoints is not None and (due or at % train.checkpoint_every == 0 or at == train.steps):
                checkpoints.save(at, model, optimizer, None, position.state(fit.precision.name))
                written = at
                by_time.written()
    except KeyboardInterrupt:
        kept = checkpoints is not None and not stepping and at > written
        if checkpoints is not None and kept:
            checkpoints.save(at, model, optimizer, None, position.state(fit.precision.name))
        print(
            f"stopped after step {at} of {train.steps}: checkpoint step {at} written"
            if kept
            else f"stopped at step {at} of {train.steps}; {last_good_checkpoint(fit.run_dir)}",
            file=sys.stderr,
            flush=True,
        )
        raise
    return position.losses, position.seconds


class TunedPosition:
    """Where the tuned steps are: the step, the losses so far, the seconds of steps, the epoch's batches still to
    run with the generator that draws the next epoch's order, and the generator of dropout: a checkpoint's
    state.json holds it all (the generators' states in base64), so a resumed fit continues bitwise."""

    def __init__(self, order: torch.Generator, device: torch.device) -> None:
        self.order, self.device = order, device
        self.batches: list[torch.Tensor] = []
        self.losses: list[float] = []
        self.seconds = 0.0

    @property
    def step(self) -> int:
        return len(self.losses)

    def state(self, precision: str) -> dict[str, Any]:
        """state.json's fields (the checkpoint adds the step); `precision`, the fit's, keys its cached features."""
        cuda = [_encoded(torch.cuda.get_rng_state(self.device))] if self.device.type == "cuda" else []
        return {
            "losses": self.losses,
            "train_seconds": self.seconds,
            "precision": precision,
            "batches": [rows.tolist() for rows in self.batches],
            "order": _encoded(self.order.get_state()),
            "dropout": _encoded(torch.get_rng_state()),
            "cuda_dropout": cuda,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.losses, self.seconds = list(state["losses"]), float(state["train_seconds"])
        self.batches = [torch.tensor(rows, dtype=torch.int64) for rows in state["batches"]]
        self.order.set_state(_decoded(state["order"]))
        torch.set_rng_state(_decoded(state["dropout"]))
        for cuda in state["cuda_dropout"]:
            torch.cuda.set_rng_state(_decoded(cuda), self.device)


def _encoded(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.numpy().tobytes()).decode()


def _decoded(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)
