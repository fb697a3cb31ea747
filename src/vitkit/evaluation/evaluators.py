"""Evaluators: configured measurements a training run makes on its model every `every` steps (0: at its end
only) and at its end, as big_vision's evaluators are. Each is `{name, every, __call__(model) -> metrics}`; the
split evaluators share one loop (vitkit.evaluation.loop), the few-shot one is vitkit.evaluation.fewshot's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from vitkit.data import Source
from vitkit.evaluation.accuracy import evaluate_model
from vitkit.evaluation.masked_patches import masked_patch_loss
from vitkit.precision import Precision


class Evaluator(Protocol):
    """A measurement: metric names start with `name` + "_" (test_top1, val_loss, fewshot_5shot, ...);
    `skipped` names the images its calls left out as unreadable on this rank, every time they were met."""

    name: str
    every: int
    skipped: list[str]

    def __call__(self, model: nn.Module) -> dict[str, float]: ...


class TestEvaluator(Evaluator, Protocol):
    """An objective's measurement on the test split; `confusion` is its last call's confusion matrix, which the
    final report draws (None where the objective classifies nothing)."""

    confusion: torch.Tensor | None


@dataclass(eq=False)
class SplitEvaluator:
    """A measurement over every image of a split, in batches of `batch_size` under `precision`."""

    name: str
    dataset: Source
    every: int
    batch_size: int
    precision: Precision
    confusion: torch.Tensor | None = field(default=None, init=False)
    skipped: list[str] = field(default_factory=list, init=False)


class AccuracyEvaluator(SplitEvaluator):
    """Top-1, top-5 and loss of a classifier on a split (vitkit.evaluation.accuracy)."""

    def __call__(self, model: nn.Module) -> dict[str, float]:
        result = evaluate_model(model, self.dataset, batch_size=self.batch_size, precision=self.precision)
        self.confusion = result.confusion
        self.skipped += result.skipped
        return result.as_dict(f"{self.name}_")


class MaskedPatchEvaluator(SplitEvaluator):
    """The masked patch prediction loss on a split (vitkit.evaluation.masked_patches): `<name>_mpp_loss`."""

    def __call__(self, model: nn.Module) -> dict[str, float]:
        loss, skipped = masked_patch_loss(
            model, self.dataset, batch_size=self.batch_size, precision=self.precision
        )
        self.skipped += skipped
        return {f"{self.name}_mpp_loss": loss}


class SubmoduleEvaluator:
    """`evaluator` measuring the submodule `select` picks from the model (few-shot measures the ViT inside an MPP
    wrapper)."""

    def __init__(self, evaluator: Evaluator, select: Callable[[Any], nn.Module]) -> None:
        self.evaluator, self.select = evaluator, select
        self.name, self.every, self.skipped = evaluator.name, evaluator.every, evaluator.skipped

    def __call__(self, model: nn.Module) -> dict[str, float]:
        return self.evaluator(self.select(model))


def measures_after_step(evaluator: Evaluator, done: int, steps: int) -> bool:
    """Whether `evaluator` measures after step `done` of `steps` during training (the end measures them all)."""
    return bool(evaluator.every) and done % evaluator.every == 0 and done < steps
