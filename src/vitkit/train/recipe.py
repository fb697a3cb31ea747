"""Run configurations as data: a recipe is four dataclass sections ([model], [data], [optim], [train]).

Recipes are TOML files (configs/*.toml); any field can be overridden as `section.field=value`, the value
parsed with TOML rules (falling back to a plain string). The dataclass defaults *are* the default recipe:
the small Fashion-MNIST ViT that `vitkit train` runs in about five minutes on two CPU cores.
`finetune_defaults()` is the paper's fine-tuning recipe (§3.2, B.1.1): SGD with momentum 0.9, no weight decay,
cosine decay, gradient clipping at 1, batch 512, Polyak averaging 0.9999.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitkit.data.transforms import CROPS
from vitkit.models.config import ViTConfig, check_choice
from vitkit.models.mpp import TARGETS as MPP_TARGETS
from vitkit.models.registry import model_config
from vitkit.precision import PRECISIONS

OBJECTIVES = ("classification", "mpp")
OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("cosine", "linear")
LOSSES = ("softmax", "sigmoid")
CUDA_GRAPH = ("auto", "on", "off")  # vitkit.train.graph
STRATEGIES = ("auto", "ddp", "fsdp")  # under torchrun; see vitkit.train.distributed
RECIPE_NAME = "config.toml"  # the resolved recipe a run directory holds (and resumes from)
MAX_STEPS = 2**53  # the schedule divides step by steps in float64, exact up to here


@dataclass
class ModelSection:
    """A registry `name` (trained from scratch) or `weights` (fine-tuned), plus ViTConfig/ResNetConfig overrides."""

    name: str | None = (
        "ViT-Mini/4"  # width 96, 4 layers, 3 heads (vitkit.models.registry), for 28x28 grayscale
    )
    weights: str | None = None
    overrides: dict[str, Any] = field(default_factory=lambda: dict(img_size=28, in_chans=1, classifier="gap"))


@dataclass
class DataSection:
    """What to train on and how to augment it (see vitkit.data.TrainTransform).

    crop: 'inception', 'resize_crop', 'pad_crop' or 'none' (vitkit.data.TrainTransform). The default is 'none'
    (flips only): evaluation resizes without zooming, and on 28x28 images the 8/7 zoom of 'resize_crop' alone
    costs ~15 points of test accuracy early in training; 'pad_crop' shifts at the evaluation's scale
    (docs/RESULTS.md).
    `train_subset` > 0 trains on that many training images, class-balanced and drawn with `subset_seed`
    (vitkit.data.balanced_subset): the paper's fine-tuning on a small labelled subset. 0 uses them all.
    `val_split` > 0 holds that many training images out of training, class-balanced and drawn with `val_seed`
    (vitkit.data.hold_out), before any `train_subset` is drawn from the rest: periodic evaluations
    (`eval_every`) measure them instead of the test set, and the report has both (`val_top1`, `test_top1`), so
    recipes are chosen on validation accuracy and the test set stays for the final report.

    `source` names the data (vitkit.data.open_source): a built-in dataset held in memory (fashion_mnist, cifar10,
    cifar100, synthetic, digits) or a collection read image by image: `folder:PATH`, `hf:PATH`, `wds:DIR`
    (docs/DATA.md). `workers` DataLoader processes decode and augment those, each `prefetch` steps ahead; 0 reads
    in the training process. `on_corrupt` 'skip' leaves out unreadable images (listed in report.json) instead of
    stopping. `data.dataset` is another name for `data.source`.
    """

    source: str = "fashion_mnist"
    data_dir: str | None = None
    workers: int = 0
    prefetch: int = 2
    train_subset: int = 0
    subset_seed: int = 0
    val_split: int = 0
    val_seed: int = 0
    crop: str = "none"
    flip: bool = True
    randaugment: bool = False
    mixup: float = 0.0
    cutmix: float = 0.0
    on_corrupt: str = "stop"


@dataclass
class OptimSection:
    """Optimizer and learning-rate schedule: linear warmup, then linear or cosine decay to zero."""

    name: str = "adamw"
    lr: float = 2e-3
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.999)
    momentum: float = 0.9
    warmup_steps: int = 50
    schedule: str = "cosine"
    grad_clip: float = 1.0


@dataclass
class TrainSection:
    """Length, batch, objective, averaging, evaluation/checkpoint cadence and execution options.

    `threads` sets torch's intra-op threads (0 keeps torch's default, one per core). It is 1 by default: on a
    shared 2-core CPU two threads ran up to 10x slower than one (their barriers wait for preempted peers), and GPU
    runs do not depend on it. A resume is bitwise exact for the same thread count.

    `processes` N > 1 makes `vitkit train` / `vitkit finetune` start N data-parallel processes on this machine
    itself, as `torchrun --standalone --nproc_per_node N` would (ignored when a launcher already started the
    run). On a CPU, N processes of `threads` threads each use the cores better than one process with N times the
    threads: a small model's many small kernels parallelise poorly within one process (BENCHMARKS.md).

    `micro_batch_size` M > 0 caps the images of one forward/backward pass: a rank's share of the batch is run in
    micro-batches of M and their gradients summed, which bounds activation memory without changing the step. A
    batch share of M or fewer images is one pass; 0 is no cap.

    `cuda_graph` ('auto', 'on' or 'off') captures the update of a step (forward, backward, clipping, optimizer)
    once as a CUDA graph and replays it every step (vitkit.train.graph): a small model's step on a GPU is bound by
    launching its kernels, not by running them. 'auto' is on for a classification run in one process on CUDA,
    and off otherwise; 'on' refuses a run it cannot capture.

    `eval_batch_size` is the images per evaluation pass; 0 (the default) is `batch_size`, so evaluation needs no
    more memory than training does, at any resolution (timm's default too).

    `keep_freed_memory` (on by default; CPU with glibc only) makes the process keep freed memory for reuse, as a
    GPU's caching allocator does, instead of faulting each step's activations and gradients in again: steps up to
    ~1.14x faster (vitkit.allocator). It sets glibc's malloc thresholds for the whole process, for as long as
    its training loop runs (the heap is returned before the final evaluation), so a program that calls
    `vitkit.train.train` and wants its own malloc settings turns it off.

    `objective` is 'classification' (`loss`, `label_smoothing`) or 'mpp': masked patch prediction (§4.6, B.1.2),
    self-supervised pre-training of a ViT with `mpp_target` ('mean_color', 'downsized' or 'pixels'),
    `mpp_corrupt_rate` of the patches corrupted and `mpp_bits` bits per colour channel. An MPP run trains no
    classifier, so it has no accuracy evaluation (`eval_every` must be 0): its report has the MPP loss on the test
    set, and final/ holds the bare ViT (no head) to fine-tune. `fewshot_every` N > 0 runs the few-shot linear
    evaluation (vitkit.evaluate.fewshot, on `fewshot_num_test` test images) every N steps and at the end.
    """

    steps: int = 700
    batch_size: int = 128
    micro_batch_size: int = 0
    seed: int = 0
    objective: str = "classification"
    loss: str = "softmax"
    label_smoothing: float = 0.1
    mpp_target: str = "mean_color"
    mpp_corrupt_rate: float = 0.5
    mpp_bits: int = 3
    ema_decay: float = 0.0
    eval_every: int = 0
    eval_batch_size: int = 0
    fewshot_every: int = 0
    fewshot_num_test: int = 2000
    checkpoint_every: int = 200
    keep_checkpoints: int = 2
    log_every: int = 20
    precision: str = "auto"
    compile: bool = False
    cuda_graph: str = "auto"
    device: str = "auto"
    threads: int = 1
    processes: int = 1
    strategy: str = "auto"
    keep_freed_memory: bool = True

    def eval_batch(self) -> int:
        """Images per evaluation pass: `eval_batch_size`, or the training batch size when it is 0."""
        return self.eval_batch_size or self.batch_size

    def micro_batch(self, world_size: int) -> int:
        """Images per forward/backward pass on each of `world_size` ranks."""
        per_rank = self.batch_size // world_size
        return min(self.micro_batch_size or per_rank, per_rank)


@dataclass
class RunConfig:
    """A full recipe; `to_toml()` is what a run directory stores and `--resume` reads back."""

    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    optim: OptimSection = field(default_factory=OptimSection)
    train: TrainSection = field(default_factory=TrainSection)

    def validate(self) -> RunConfig:
        """Cross-field checks, so a bad recipe fails before any data is loaded."""
        if (self.model.name is None) == (self.model.weights is None):
            raise ValueError(
                "set exactly one of model.name (train from scratch) and model.weights (fine-tune)"
            )
        try:
            architecture = model_config(self.model.name, **self.model.overrides) if self.model.name else None
        except (ValueError, TypeError) as error:
            raise ValueError(f"[model] {error}") from None
        check_choice("train.objective", self.train.objective, OBJECTIVES)
        check_choice("train.mpp_target", self.train.mpp_target, MPP_TARGETS)
        check_choice("optim.name", self.optim.name, OPTIMIZERS)
        check_choice("optim.schedule", self.optim.schedule, SCHEDULES)
        check_choice("train.loss", self.train.loss, LOSSES)
        check_choice("train.precision", self.train.precision, PRECISIONS)
        check_choice("train.strategy", self.train.strategy, STRATEGIES)
        check_choice("train.cuda_graph", self.train.cuda_graph, CUDA_GRAPH)
        check_choice("data.on_corrupt", self.data.on_corrupt, ("stop", "skip"))
        check_choice("data.crop", self.data.crop, CROPS)
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
        return self

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
            lines += [f"{key} = {_toml_value(v)}" for key, v in values.items() if v is not None]
            lines.append("")
        return "\n".join(lines)


def finetune_defaults() -> RunConfig:
    """The paper's fine-tuning recipe (§3.2, B.1.1), sized for Fashion-MNIST on a small machine."""
    return RunConfig(
        model=ModelSection(name=None, overrides={}),
        optim=OptimSection(
            name="sgd", lr=0.01, weight_decay=0.0, momentum=0.9, warmup_steps=10, schedule="cosine"
        ),
        train=TrainSection(
            steps=100, batch_size=512, micro_batch_size=128, label_smoothing=0.0, ema_decay=0.9999
        ),
    )


def from_dict(data: dict[str, Any], base: RunConfig | None = None) -> RunConfig:
    """Apply a nested {section: {field: value}} dict (a parsed TOML file) on top of `base`.

    A [model] section replaces the base model entirely (a recipe names its whole architecture); the other
    sections update the base field by field.
    """
    config = base if base is not None else RunConfig()
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ValueError(f"config entry {section!r} must be a [section]; valid sections: {SECTIONS}")
        if section == "model":
            config.model = ModelSection(name=None, overrides={})
            values = dict(sorted(values.items(), key=lambda kv: kv[0] not in ("name", "weights")))
        for name, value in values.items():
            set_value(config, f"{section}.{name}", value)
    return config


def load_config(path: str | Path, base: RunConfig | None = None) -> RunConfig:
    """Read a TOML recipe; unknown sections or keys are errors that list the valid ones."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such config file")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: invalid TOML ({error})") from None
    return from_dict(data, base)


def parse_value(text: str) -> Any:
    """A command-line value with TOML rules (`1e-3`, `true`, `[2, 2]`, `"x"`); anything else is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(config: RunConfig, overrides: list[str]) -> RunConfig:
    """Apply `section.field=value` strings in order."""
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not of the form section.field=value")
        set_value(config, key.strip(), parse_value(text.strip()))
    return config


def fit_to_steps(config: RunConfig, recipe_steps: int, explicit: set[str]) -> list[str]:
    """Shorten a recipe's schedule to `config.train.steps` (a quick trial: `vitkit train --steps 30`).

    A warmup that no longer fits keeps its share of the recipe's `recipe_steps`-step run, below the new length.
    Evaluation, few-shot and checkpoint cadences longer than the run need nothing: each also happens at the end.
    Keys in `explicit` (set on the command line) are left as given, so `validate` reports a conflict among them.
    Returns the changes as 'key old -> new'.
    """
    steps, optim = config.train.steps, config.optim
    if "optim.warmup_steps" in explicit or steps <= 0 or optim.warmup_steps < steps:
        return []
    warmup = min(round(optim.warmup_steps * steps / max(recipe_steps, 1)), steps - 1)
    change = f"optim.warmup_steps {optim.warmup_steps} -> {warmup}"
    optim.warmup_steps = warmup
    return [change]


def override_keys(overrides: list[str]) -> set[str]:
    """The `section.field` keys a list of `section.field=value` overrides sets."""
    return {item.partition("=")[0].strip() for item in overrides}


SECTIONS = [f.name for f in dataclasses.fields(RunConfig)]


def valid_keys(config: RunConfig, section: str) -> list[str]:
    """Every settable key of a section; [model] also takes the fields of the named model's config class."""
    keys = [
        f"{section}.{f.name}" for f in dataclasses.fields(getattr(config, section)) if f.name != "overrides"
    ]
    if section == "model" and config.model.name is not None:
        model_fields = dataclasses.fields(type(model_config(config.model.name)))
        keys += [f"model.{f.name}" for f in model_fields]
    return keys


# Keys that decide how the data is read, not which numbers are computed: `--resume` may change them. A run
# stopped by an unreadable image (data.on_corrupt='stop') saw none before it, so it continues with 'skip' exactly
# as if it had started with it.
RESUME_MAY_CHANGE = ("data.workers", "data.prefetch", "data.on_corrupt")
RENAMED = {"data.dataset": "data.source"}  # other names a recipe may use for a key


def set_value(config: RunConfig, key: str, value: Any) -> None:
    """Set one `section.field`, coercing to the field's type; an unknown key names the valid ones."""
    section, _, name = RENAMED.get(key, key).partition(".")
    if section not in SECTIONS:
        raise ValueError(f"unknown config key {key!r}: no section {section!r}; valid sections: {SECTIONS}")
    target = getattr(config, section)
    hints = typing.get_type_hints(type(target))
    if name in hints and name != "overrides":
        setattr(target, name, _coerce(value, hints[name], key))
    elif section == "model" and (config.model.name is None or f"model.{name}" in valid_keys(config, "model")):
        config.model.overrides[name] = value  # checked against the architecture when the model is built
    else:
        raise ValueError(f"unknown config key {key!r}; valid keys: {', '.join(valid_keys(config, section))}")


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Check and convert a parsed value to a dataclass field type (ints widen to floats, lists to tuples)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None or (isinstance(value, str) and value.lower() == "none" and type(None) in args):
            return None
        return _coerce(value, next(a for a in args if a is not type(None)), key)
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ValueError(f"{key} must be a list of {len(args)} values, got {value!r}")
        return tuple(_coerce(v, a, key) for v, a in zip(value, args, strict=True))
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise ValueError(f"{key} must be of type {hint.__name__}, got {value!r}")


def _toml_value(value: Any) -> str:
    """One TOML value: JSON strings are valid TOML basic strings; floats keep their exact repr."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
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
