"""Training objectives: classification, and masked patch prediction (§4.6, B.1.2) for self-supervised pre-training.

An objective is what the trainer asks of the task it trains (`Objective`): the model it trains around a vitkit
model, the micro-batch loss, how the test split measures it, what final/ holds, whether a CUDA graph may capture
its step. The paper pre-trains with sigmoid cross-entropy (B.1, as in BiT's upstream) and fine-tunes with softmax;
both take the same targets, so MixUp/CutMix soft labels and label smoothing compose with either. Masked patch
prediction needs no labels: its model, a ViT wrapped with a [mask] embedding and a prediction head, returns the
loss itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

import torch
import torch.nn.functional as F

from vitkit.data import Source
from vitkit.evaluation.evaluators import AccuracyEvaluator, Evaluator, MaskedPatchEvaluator, TestEvaluator
from vitkit.evaluation.labels import class_mismatch
from vitkit.models.mpp import MaskedPatchPrediction
from vitkit.models.registry import Model, Trainable
from vitkit.models.vit import VisionTransformer
from vitkit.precision import Precision
from vitkit.recipe.run_config import OBJECTIVES as RECIPE_OBJECTIVES
from vitkit.recipe.run_config import TrainSection

Forward = Callable[..., torch.Tensor]  # what a step calls: the model, its DDP wrapper or its compiled form
LossFunction = Callable[
    [Forward, torch.Tensor, torch.Tensor], torch.Tensor
]  # (forward, images, labels) -> loss


def smooth_targets(labels: torch.Tensor, num_classes: int, smoothing: float) -> torch.Tensor:
    """Probability targets [B, K]: one-hot (or given soft labels) mixed with the uniform distribution."""
    targets = F.one_hot(labels, num_classes).float() if labels.ndim == 1 else labels.float()
    return targets * (1.0 - smoothing) + smoothing / num_classes if smoothing else targets


def classification_loss(
    logits: torch.Tensor, labels: torch.Tensor, loss: str, smoothing: float
) -> torch.Tensor:
    """Mean over the batch of softmax cross-entropy, or of sigmoid cross-entropy summed over the classes."""
    logits = logits.float()  # the loss in float32 also under bf16 autocast
    targets = smooth_targets(labels, logits.shape[-1], smoothing)
    if loss == "softmax":
        return torch.sum(-targets * F.log_softmax(logits, dim=-1), dim=-1).mean()
    if loss == "sigmoid":
        return F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1).mean()
    raise ValueError(f"loss must be 'softmax' or 'sigmoid', got {loss!r}")


def masked_patch_loss(forward: Forward, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The MPP loss of a batch: the wrapper's forward computes it; the labels are unused (self-supervised).

    The corruption draws from torch's global generator, which the engine reseeds every step.
    """
    return forward(images)


class Objective(Protocol):
    """What the trainer asks of the task it trains."""

    name: str  # train.objective
    cuda_graph_refusal: str  # why a CUDA graph cannot capture its step; empty where it can

    def num_classes(self, class_names: list[str]) -> int:
        """The classifier size the model must have for data of `class_names` (0: no classifier)."""
        ...

    def check_resume(self, saved: list[str] | None, class_names: list[str]) -> None:
        """Refuse a resume whose data names other classes than the checkpoint's `saved` ones."""
        ...

    def trained(self, model: Model, class_names: list[str]) -> Trainable:
        """The module the run trains around `model`."""
        ...

    def loss(self, forward: Forward, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The mean loss of a micro-batch; `forward` is the trained module, its DDP wrapper or compiled form."""
        ...

    def evaluators(
        self, test: Source, validation: Source | None, every: int, batch_size: int, precision: Precision
    ) -> tuple[TestEvaluator, list[Evaluator]]:
        """The test split's measurement, and the others (a validation split's)."""
        ...

    def final_model(self, model: Trainable) -> Model:
        """What final/ holds and few-shot measures."""
        ...

    def task(self, model: Trainable) -> str:
        """The task in a few words, for the progress line."""
        ...


class Classification:
    """Softmax or sigmoid cross-entropy on (smoothed, mixed) labels; accuracy on the test and validation splits."""

    name = "classification"
    cuda_graph_refusal = ""

    def __init__(self, train: TrainSection) -> None:
        self.loss_name, self.smoothing = train.loss, train.label_smoothing

    def num_classes(self, class_names: list[str]) -> int:
        return len(class_names)

    def check_resume(self, saved: list[str] | None, class_names: list[str]) -> None:
        if saved is not None and saved != class_names:
            raise ValueError(f"--resume: {class_mismatch(saved, class_names)}")

    def trained(self, model: Model, class_names: list[str]) -> Trainable:
        model.class_names = class_names  # into every checkpoint and final/
        return model

    def loss(self, forward: Forward, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return classification_loss(forward(images), labels, self.loss_name, self.smoothing)

    def evaluators(
        self, test: Source, validation: Source | None, every: int, batch_size: int, precision: Precision
    ) -> tuple[TestEvaluator, list[Evaluator]]:
        """During training the validation split is measured when there is one, else the test split."""
        on_test = AccuracyEvaluator("test", test, every if validation is None else 0, batch_size, precision)
        if validation is None:
            return on_test, []
        return on_test, [AccuracyEvaluator("val", validation, every, batch_size, precision)]

    def final_model(self, model: Trainable) -> Model:
        return model  # type: ignore[return-value]

    def task(self, model: Trainable) -> str:
        return f"{model.config.num_classes} classes"


class MaskedPatches:
    """Masked patch prediction: a ViT wrapped with a [mask] embedding and a prediction head; its loss on the
    test split (corrupted reproducibly) in place of accuracy."""

    name = "mpp"
    cuda_graph_refusal = "train.objective='mpp' draws its corruption with data-dependent shapes"

    def __init__(self, train: TrainSection) -> None:
        self.target, self.corrupt_rate, self.bits = train.mpp_target, train.mpp_corrupt_rate, train.mpp_bits

    def num_classes(self, class_names: list[str]) -> int:
        return 0

    def check_resume(self, saved: list[str] | None, class_names: list[str]) -> None:
        pass  # it learns no classes

    def trained(self, model: Model, class_names: list[str]) -> Trainable:
        if not isinstance(model, VisionTransformer):
            raise ValueError(
                f"train.objective='mpp' needs a Vision Transformer; the model is a {type(model).__name__}"
            )
        return MaskedPatchPrediction(model, self.target, self.corrupt_rate, self.bits)

    def loss(self, forward: Forward, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return masked_patch_loss(forward, images, labels)

    def evaluators(
        self, test: Source, validation: Source | None, every: int, batch_size: int, precision: Precision
    ) -> tuple[TestEvaluator, list[Evaluator]]:
        return MaskedPatchEvaluator("test", test, 0, batch_size, precision), []

    def final_model(self, model: Trainable) -> Model:
        return cast(MaskedPatchPrediction, model).vit

    def task(self, model: Trainable) -> str:
        return f"masked patch prediction of {self.target}"


# The implementation of each name the recipe accepts (vitkit.recipe.run_config.OBJECTIVES, the one list), in its order.
OBJECTIVES: dict[str, Callable[[TrainSection], Objective]] = dict(
    zip(RECIPE_OBJECTIVES, (Classification, MaskedPatches), strict=True)
)


def objective_for(train: TrainSection) -> Objective:
    """train.objective's objective, configured by the recipe's train section."""
    return OBJECTIVES[train.objective](train)
