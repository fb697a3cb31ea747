"""The objectives' evaluators name their metrics as the Evaluator protocol says: `<evaluator name>_<metric>`, so a
run's metrics.jsonl and report.json group by split (test_top1, val_loss, test_mpp_loss)."""

from __future__ import annotations

import torch

from vitkit.data import ImageDataset
from vitkit.evaluation.evaluators import SubmoduleEvaluator
from vitkit.models.mpp import MaskedPatchPrediction
from vitkit.precision import Precision
from vitkit.recipe.run_config import TrainSection
from vitkit.training.objectives import objective_for


def small_split(description: str) -> ImageDataset:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8, generator=generator)
    return ImageDataset(images, torch.arange(6) % 3, ["a", "b", "c"], description)


def test_every_metric_starts_with_its_evaluators_name(tiny_vit):
    fp32 = Precision("fp32", "test", torch.device("cpu"))
    test, validation = small_split("test"), small_split("validation")
    vit = tiny_vit()
    for objective, model in [
        ("classification", vit),
        ("mpp", MaskedPatchPrediction(vit).eval()),
    ]:
        on_test, others = objective_for(TrainSection(objective=objective)).evaluators(
            test, validation, 1, 4, fp32
        )
        for evaluator in [on_test, *others]:
            metrics = evaluator(model)
            assert metrics and all(name.startswith(f"{evaluator.name}_") for name in metrics), metrics
    assert set(on_test(model)) == {"test_mpp_loss"}


def test_a_submodule_evaluator_measures_what_it_selects(tiny_vit):
    fp32 = Precision("fp32", "test", torch.device("cpu"))
    vit = tiny_vit()
    mpp = objective_for(TrainSection(objective="mpp"))
    on_test, _ = objective_for(TrainSection()).evaluators(small_split("test"), None, 5, 4, fp32)
    of_the_vit = SubmoduleEvaluator(on_test, mpp.final_model)
    assert (of_the_vit.name, of_the_vit.every) == ("test", 5)
    assert of_the_vit(MaskedPatchPrediction(vit)) == on_test(vit)  # the wrapper's ViT, measured as itself
