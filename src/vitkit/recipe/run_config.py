"""Run configurations as data: a recipe is four dataclass sections ([model], [data], [optim], [train]).

Recipes are TOML files: a path, or a shipped recipe by name (vitkit.configs); any field can be overridden as
`section.field=value` (vitkit.recipe.resolve). Every field carries one line of help, which `--print-config` shows
beside its value and default, and the values it may take where they are a fixed set, which `validate` checks.
The dataclass defaults are the default recipe: the small Fashion-MNIST ViT that `vitkit train` runs in minutes on
a CPU (docs/RESULTS.md). `finetune_defaults()` is the paper's fine-tuning recipe (§3.2, B.1.1).

A named model is the registry's variant as it is (224 px, RGB, its own classifier), whatever the data. With no
model named the data decides (`default_model`): the built-in small sets train ViT-Mini/4 (width 96, depth 4, 4x4
patches, global average pooling) at their own scale, 28x28 grey (Fashion-MNIST, digits: upsampled, so a
Fashion-MNIST run fine-tunes on them unchanged) or 32x32 RGB (CIFAR, synthetic); image collections (`folder:`,
`hf:`, `wds:`, a directory) train ViT-Ti/16 at 224 px, the smallest of the paper's family at the resolution and
patches of the published checkpoints, so a run from scratch and a fine-tuned ViT-B/16 see the same 14x14 grid.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from vitkit.data.transforms import CROPS
from vitkit.models.config import ViTConfig
from vitkit.models.mpp import TARGETS as MPP_TARGETS
from vitkit.models.registry import model_config
from vitkit.precision import PRECISIONS

OBJECTIVES = ("classification", "mpp")
OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("cosine", "linear")
LOSSES = ("softmax", "sigmoid")
CUDA_GRAPH = ("auto", "on", "off")  # vitkit.training.graph
STRATEGIES = ("auto", "ddp", "fsdp")  # under torchrun; see vitkit.training.distributed
FITS = ("gradient", "linear", "last_blocks")  # vitkit.training.linear_head, vitkit.training.last_blocks
LINEAR_L2 = [2.0**k for k in range(-2, 21, 2)]  # ridge strengths on standardised features, 0.25 .. 2^20
RECIPE_NAME = "config.toml"  # the resolved recipe a run directory holds (and resumes from)
# Keys that decide how the data is read, not which numbers are computed: `--resume` may change them. A run
# stopped by an unreadable image (data.on_corrupt='stop') saw none before it, so it continues with 'skip' exactly
# as if it had started with it.
RESUME_MAY_CHANGE = ("data.workers", "data.prefetch", "data.on_corrupt")


def option(default: Any, help: str, choices: tuple[str, ...] = ()) -> Any:
    """A recipe field: its default, the one line of help that `--print-config` shows beside it, and the values
    it may take when they are a fixed set (checked by `RunConfig.validate`)."""
    metadata = {"help": help, "choices": choices}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


SMALL_VIT = "ViT-Mini/4"
PHOTO_VIT = "ViT-Ti/16"
GREY_28 = dict(img_size=28, in_chans=1, classifier="gap")
RGB_32 = dict(img_size=32, in_chans=3, classifier="gap")
BUILT_IN = {
    "fashion_mnist": GREY_28,
    "digits": GREY_28,
    "cifar10": RGB_32,
    "cifar100": RGB_32,
    "synthetic": RGB_32,
}


def default_model(source: str) -> tuple[str, dict[str, Any]]:
    """(registry name, architecture fields over the registry's) of the model trained on `source` by default."""
    if source in BUILT_IN:
        return SMALL_VIT, dict(BUILT_IN[source])
    return PHOTO_VIT, {}


MAX_STEPS = 2**53  # the schedule divides step by steps in float64, exact up to here


@dataclass
class ModelSection:
    """A registry `name` (trained from scratch) or `weights` (fine-tuned), plus ViTConfig/ResNetConfig overrides.

    With neither set the data decides (`default_model`): a named model is the registry's
    variant as it is, whatever the data, exactly as a TOML `[model] name = ...` is.
    """

    name: str | None = option(None, "registry model to train from scratch; unset: the data's default model")
    weights: str | None = option(None, "weights to fine-tune (run dir, .npz, timm/HF file); or model.name")
    overrides: dict[str, Any] = option({}, "architecture fields over the model's (vitkit.ViTConfig)")


@dataclass
class DataSection:
    """What to train on and how to augment it (see vitkit.data.TrainTransform).

    crop 'none' is the default (flips only): evaluation resizes without zooming, and on 28x28 images the 8/7 zoom
    of 'resize_crop' alone costs ~15 points of test accuracy early in training; 'pad_crop' shifts at the
    evaluation's scale (docs/RESULTS.md). `train_subset` draws its class-balanced subset (vitkit.data.
    balanced_subset) after `val_split` has held its images out (vitkit.data.hold_out): periodic evaluations
    (`eval_every`) measure those instead of the test set, and the report has both (`val_top1`, `test_top1`), so
    recipes are chosen on validation accuracy. `source` names the data (vitkit.data.open_source, docs/DATA.md);
    `data.dataset` is another name for it.
    """

    source: str = option(
        "fashion_mnist", "fashion_mnist, cifar10, cifar100, synthetic, digits, folder:PATH, hf:PATH, wds:DIR"
    )
    data_dir: str | None = option(
        None, "where a built-in dataset's files are (else $VITKIT_DATA, system, download)"
    )
    workers: int = option(0, "DataLoader processes decoding a folder/hf/wds source (0: the training process)")
    prefetch: int = option(2, "steps each worker prepares ahead")
    train_subset: int = option(0, "train on that many class-balanced training images (0: all)")
    subset_seed: int = option(0, "seed of the train_subset draw")
    val_split: int = option(0, "hold that many class-balanced training images out for validation (0: none)")
    val_seed: int = option(0, "seed of the val_split draw")
    crop: str = option("none", "training crop: inception, resize_crop, pad_crop or none (resize only)", CROPS)
    flip: bool = option(True, "random horizontal flips")
    randaugment: bool = option(False, "RandAugment, per sample (torchvision's defaults)")
    mixup: float = option(0.0, "MixUp alpha (0: off)")
    cutmix: float = option(0.0, "CutMix alpha (0: off)")
    on_corrupt: str = option(
        "stop",
        "an unreadable image stops the run ('stop') or is left out and listed ('skip')",
        ("stop", "skip"),
    )


@dataclass
class OptimSection:
    """Optimizer and learning-rate schedule: linear warmup, then linear or cosine decay to zero."""

    name: str = option("adamw", "adamw or sgd", OPTIMIZERS)
    lr: float = option(2e-3, "peak learning rate, reached after the warmup")
    weight_decay: float = option(0.05, "decoupled weight decay (AdamW) or L2 (SGD)")
    betas: tuple[float, float] = option((0.9, 0.999), "AdamW's moment decays")
    momentum: float = option(0.9, "SGD momentum")
    warmup_steps: int = option(50, "steps of linear warmup from 0")
    schedule: str = option("cosine", "decay to 0 after the warmup: cosine or linear", SCHEDULES)
    grad_clip: float = option(1.0, "clip the global gradient norm to this (0: off)")


@dataclass
class TrainSection:
    """Length, batch, objective, averaging, evaluation/checkpoint cadence and execution options.

    `threads` 0 (the default) is every core this process may use, shared by the run's processes
    (vitkit.recipe.resolve.machine_threads), settled when the recipe is resolved, so the run directory records the
    number; on a CPU that other jobs share, 1 can be faster (barriers wait for preempted peers; BENCHMARKS.md). A
    resume is bitwise exact for the same thread count. `processes` N > 1 starts N
    data-parallel processes on this machine, as `torchrun --standalone --nproc_per_node N` would (ignored when a
    launcher started the run): on a CPU, N processes of `threads` threads use the cores better than one process
    with N times the threads (BENCHMARKS.md). `micro_batch_size` M runs a rank's share of the batch in
    micro-batches of M with their gradients summed: the step is unchanged, activation memory bounded.
    `cuda_graph` captures a step's update once as a CUDA graph and replays it (vitkit.training.graph): a small
    model's GPU step is bound by launching kernels. `keep_freed_memory` (CPU with glibc) keeps freed memory in
    the process as a GPU's caching allocator does (vitkit.allocator; BENCHMARKS.md measures it); it tunes malloc
    for the whole process while the loop runs, so a program with its own malloc settings turns it off.
    `objective` 'mpp' is masked patch prediction (§4.6, B.1.2): no classifier, so no accuracy evaluation
    (`eval_every` must be 0), the report has the MPP loss on the test set and final/ holds the bare ViT.
    """

    steps: int = option(700, "optimizer steps (or --epochs E on the command line)")
    epochs: float = option(0.0, "run length in passes over the training images, sets steps (0: train.steps)")
    fit: str = option(
        "gradient", "gradient: optimizer steps; linear: a closed-form head on frozen features", FITS
    )
    linear_l2: list[float] = option(
        LINEAR_L2, "fit='linear': ridge strengths tried by 5-fold cross-validation"
    )
    tuned_blocks: int = option(
        2, "fit='last_blocks': the last encoder blocks tuned (with the head) on cached tokens of the others"
    )
    batch_size: int = option(128, "images per step, over all processes")
    micro_batch_size: int = option(
        0, "images per forward/backward pass, gradients summed (0: the whole share)"
    )
    seed: int = option(0, "seed of initialisation, batches, augmentation and dropout")
    objective: str = option("classification", "classification or mpp (masked patch prediction)", OBJECTIVES)
    loss: str = option("softmax", "classification loss: softmax cross-entropy or sigmoid", LOSSES)
    label_smoothing: float = option(0.1, "label smoothing of the classification loss")
    mpp_target: str = option(
        "mean_color", "what a corrupted patch predicts: mean_color, downsized or pixels", MPP_TARGETS
    )
    mpp_corrupt_rate: float = option(0.5, "share of patches corrupted by mpp")
    mpp_bits: int = option(3, "bits per colour channel of the mpp target")
    ema_decay: float = option(0.0, "Polyak averaging of the weights, evaluated and saved (0: off)")
    eval_every: int = option(0, "evaluate every N steps (0: at the end only)")
    eval_batch_size: int = option(0, "images per evaluation pass (0: batch_size)")
    fewshot_every: int = option(0, "few-shot linear evaluation every N steps and at the end (0: off)")
    fewshot_num_test: int = option(2000, "test images of the few-shot evaluation")
    checkpoint_every: int = option(200, "write a checkpoint every N steps (and at the end)")
    checkpoint_minutes: float = option(
        5.0, "also write one once this many minutes passed since the last (0: by steps only)"
    )
    keep_checkpoints: int = option(2, "checkpoints kept")
    log_every: int = option(20, "log the loss every N steps")
    precision: str = option("auto", "auto, bf16 or fp32 (docs/PRECISION.md)", PRECISIONS)
    compile: bool = option(False, "torch.compile the forward pass")
    cuda_graph: str = option("auto", "replay each step's update as a CUDA graph: auto, on or off", CUDA_GRAPH)
    device: str = option("auto", "auto (CUDA when present), cpu, cuda:1, ...")
    threads: int = option(
        0, "torch intra-op threads per process (0: the cores this process may use, shared by the processes)"
    )
    processes: int = option(1, "data-parallel processes started on this machine")
    strategy: str = option("auto", "under several processes: auto, ddp or fsdp", STRATEGIES)
    keep_freed_memory: bool = option(True, "CPU: keep freed memory for reuse (vitkit.allocator)")

    def eval_batch(self) -> int:
        """Images per evaluation pass: `eval_batch_size`, or the training batch size when it is 0."""
        return self.eval_batch_size or self.batch_size

    def micro_batch(self, world_size: int) -> int:
        """Images per forward/backward pass on each of `world_size` ranks; a batch that does not split evenly
        over the ranks and then into micro-batches is a ValueError."""
        per_rank = self.batch_size // world_size
        micro = min(self.micro_batch_size or per_rank, per_rank)
        if self.batch_size % world_size or per_rank % micro:
            raise ValueError(
                f"train.batch_size {self.batch_size} must split evenly over {world_size} rank(s) and then into "
                f"micro-batches of train.micro_batch_size {self.micro_batch_size}"
            )
        return micro


@dataclass
class RunConfig:
    """A full recipe; `to_toml()` is what a run directory stores and `--resume` reads back."""

    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    optim: OptimSection = field(default_factory=OptimSection)
    train: TrainSection = field(default_factory=TrainSection)

    def follow_data(self) -> RunConfig:
        """With no model named or given, the data's default model (`default_model`), refined by any
        architecture fields set; a named model or given weights are kept as they are."""
        m = self.model
        if m.name is None and m.weights is None:
            m.name, architecture = default_model(self.data.source)
            m.overrides = {**architecture, **m.overrides}
        return self

    def validate(self) -> RunConfig:
        """Settle the model (`follow_data`), then cross-field checks, so a bad recipe fails before any data is
        loaded."""
        self.follow_data()
        if (self.model.name is None) == (self.model.weights is None):
            raise ValueError(
                "set exactly one of model.name (train from scratch) and model.weights (fine-tune)"
            )
        try:
            architecture = model_config(self.model.name, **self.model.overrides) if self.model.name else None
        except (ValueError, TypeError) as error:
            raise ValueError(f"[model] {error}") from None
        for section in SECTIONS:
            for f in dataclasses.fields(getattr(self, section)):
                value, choices = getattr(getattr(self, section), f.name), f.metadata["choices"]
                if choices and value not in choices:
                    raise ValueError(f"{section}.{f.name} must be one of {list(choices)}, got {value!r}")
        self._validate_ranges()
        t = self.train
        if not 0 <= self.optim.warmup_steps < t.steps:
            raise ValueError(
                f"optim.warmup_steps {self.optim.warmup_steps} must be in [0, train.steps={t.steps})"
            )
        if not 0.0 <= t.ema_decay < 1.0:
            raise ValueError(f"train.ema_decay must be in [0, 1) (0 turns averaging off), got {t.ema_decay}")
        if t.strategy == "fsdp" and t.ema_decay:
            raise ValueError(
                "train.ema_decay is not supported with train.strategy='fsdp' yet; set it to 0 or use ddp"
            )
        if t.processes < 1 or t.threads < 0:
            raise ValueError(
                f"train.processes must be >= 1 and train.threads >= 0, got {t.processes} and {t.threads}"
            )
        if t.checkpoint_every <= 0 or t.keep_checkpoints <= 0:
            raise ValueError("train.checkpoint_every and train.keep_checkpoints must be positive")
        if t.fewshot_every < 0 or t.fewshot_num_test <= 0:
            raise ValueError(
                f"train.fewshot_every must be >= 0 (0 turns it off) and train.fewshot_num_test positive, "
                f"got {t.fewshot_every} and {t.fewshot_num_test}"
            )
        if t.strategy == "fsdp" and t.fewshot_every:
            raise ValueError("train.fewshot_every is not supported with train.strategy='fsdp' yet; use ddp")
        if self.data.workers < 0 or self.data.prefetch < 1:
            raise ValueError(
                f"data.workers must be >= 0 and data.prefetch >= 1, got {self.data.workers} and {self.data.prefetch}"
            )
        if self.data.train_subset < 0:
            raise ValueError(
                f"data.train_subset must be >= 0 (0 trains on every image), got {self.data.train_subset}"
            )
        if self.data.val_split < 0:
            raise ValueError(f"data.val_split must be >= 0 (0 holds nothing out), got {self.data.val_split}")
        if t.objective == "mpp":
            self._validate_mpp(architecture)
        if t.fit == "linear":
            self._validate_linear()
        if t.fit == "last_blocks":
            self._validate_last_blocks()
        return self

    def _validate_last_blocks(self) -> None:
        """Blocks tuned on cached tokens (vitkit.training.last_blocks): of given weights, for a classifier, one
        process, no averaging (what it saves is the model it tuned)."""
        t = self.train
        if self.model.weights is None:
            raise ValueError(
                "train.fit='last_blocks' tunes the last blocks of pretrained weights: give --weights"
            )
        if t.objective != "classification" or t.ema_decay or t.processes != 1:
            raise ValueError(
                "train.fit='last_blocks' tunes a classifier in one process without averaging: train.objective "
                f"'classification', train.ema_decay 0 and train.processes 1, got {t.objective!r}, "
                f"{t.ema_decay:g} and {t.processes}"
            )
        if t.tuned_blocks < 1:
            raise ValueError(f"train.tuned_blocks must be >= 1, got {t.tuned_blocks}")

    def _validate_linear(self) -> None:
        """A closed-form head (vitkit.training.linear_head) reads the frozen features of given weights."""
        t = self.train
        if self.model.weights is None:
            raise ValueError(
                "train.fit='linear' fits a head on the features of pretrained weights: give --weights"
            )
        if t.objective != "classification":
            raise ValueError(f"train.fit='linear' fits a classifier; train.objective is {t.objective!r}")
        if not t.linear_l2 or any(not (math.isfinite(v) and v > 0) for v in t.linear_l2):
            raise ValueError(f"train.linear_l2 must be positive numbers, got {t.linear_l2}")

    def _validate_ranges(self) -> None:
        """Every number within its meaningful range: a degenerate value fails here, not silently in training."""
        o, t, d = self.optim, self.train, self.data
        for key, value, low in (
            ("train.steps", t.steps, 1),
            ("train.batch_size", t.batch_size, 1),
            ("train.micro_batch_size", t.micro_batch_size, 0),
            ("train.eval_every", t.eval_every, 0),
            ("train.eval_batch_size", t.eval_batch_size, 0),
            ("train.log_every", t.log_every, 1),
        ):
            if value < low:
                raise ValueError(f"{key} must be >= {low}, got {value}")
        if t.steps > MAX_STEPS:
            raise ValueError(f"train.steps must be <= 2**53 = {MAX_STEPS:,}, got {t.steps}")
        _check_range("optim.lr", o.lr, 0.0, math.inf, low_open=True)
        _check_range("train.epochs", t.epochs, 0.0, math.inf)
        _check_range("train.checkpoint_minutes", t.checkpoint_minutes, 0.0, math.inf, high_open=True)
        _check_range("optim.weight_decay", o.weight_decay, 0.0, math.inf)
        _check_range("optim.momentum", o.momentum, 0.0, 1.0, high_open=True)
        for i, beta in enumerate(o.betas):
            _check_range(f"optim.betas[{i}]", beta, 0.0, 1.0, high_open=True)
        _check_range("optim.grad_clip", o.grad_clip, 0.0, math.inf)
        _check_range("train.label_smoothing", t.label_smoothing, 0.0, 1.0, high_open=True)
        _check_range("data.mixup", d.mixup, 0.0, math.inf)
        _check_range("data.cutmix", d.cutmix, 0.0, math.inf)

    def _validate_mpp(self, architecture: Any) -> None:
        """Masked patch prediction corrupts patch embeddings: a ViT, on one device or under DDP, no classifier."""
        t = self.train
        if architecture is not None and not isinstance(architecture, ViTConfig):
            raise ValueError(
                f"train.objective='mpp' needs a Vision Transformer, but model.name {self.model.name!r} is a "
                f"{type(architecture).__name__.removesuffix('Config')}"
            )
        if not 0.0 < t.mpp_corrupt_rate <= 1.0:
            raise ValueError(f"train.mpp_corrupt_rate must be in (0, 1], got {t.mpp_corrupt_rate}")
        if t.mpp_bits <= 0:
            raise ValueError(f"train.mpp_bits must be positive, got {t.mpp_bits}")
        if t.strategy == "fsdp":
            raise ValueError("train.objective='mpp' is not supported with train.strategy='fsdp'; use ddp")
        if t.eval_every:
            raise ValueError(
                "train.eval_every measures a classifier, which train.objective='mpp' does not train; set it to 0 "
                "(train.fewshot_every measures the representation)"
            )

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Nested plain dict with [model] overrides flattened into the section, as in the TOML file."""
        out = {s.name: dataclasses.asdict(getattr(self, s.name)) for s in dataclasses.fields(self)}
        out["model"].update(out["model"].pop("overrides"))
        return out

    def to_toml(self) -> str:
        """The resolved recipe as TOML (None values are left out: they are the defaults)."""
        lines = []
        for section, values in self.to_dict().items():
            lines.append(f"[{section}]")
            lines += [f"{key} = {toml_value(v)}" for key, v in values.items() if v is not None]
            lines.append("")
        return "\n".join(lines)


def finetune_defaults() -> RunConfig:
    """The paper's fine-tuning recipe (§3.2, B.1.1), sized for Fashion-MNIST on a small machine."""
    return RunConfig(
        optim=OptimSection(
            name="sgd", lr=0.01, weight_decay=0.0, momentum=0.9, warmup_steps=10, schedule="cosine"
        ),
        train=TrainSection(
            steps=100, batch_size=512, micro_batch_size=128, label_smoothing=0.0, ema_decay=0.9999
        ),
    )


SECTIONS = [f.name for f in dataclasses.fields(RunConfig)]


def toml_value(value: Any) -> str:
    """One TOML value: JSON strings are valid TOML basic strings; floats keep their exact repr."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def _check_range(
    key: str, value: float, low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> None:
    """value in [low, high] (a parenthesis where open); the message states the valid range."""
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if not (math.isfinite(value) and above and below):
        bounds = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open or math.isinf(high) else ']'}"
        raise ValueError(f"{key} must be in {bounds}, got {value}")
