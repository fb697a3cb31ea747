"""The objectives the trainer asks for by train.objective: each name the recipe accepts has one, and each says
which split it measures during training and at the end."""

import pytest
import torch

from tiny import build_tiny_vit
from vitkit.data import load_dataset
from vitkit.evaluation.evaluators import measures_after_step
from vitkit.models import create_model
from vitkit.precision import choose_precision
from vitkit.recipe.run_config import OBJECTIVES, TrainSection
from vitkit.training import objectives


@pytest.mark.parametrize("name", OBJECTIVES)
def test_each_objective_the_recipe_accepts_is_the_one_the_trainer_gets(name):
    assert objectives.objective_for(TrainSection(objective=name)).name == name


@pytest.mark.parametrize("validation", [False, True])
def test_classification_measures_validation_during_training_when_held_out_and_test_at_the_end(validation):
    test = load_dataset("digits", "test")
    held_out = load_dataset("digits", "train") if validation else None
    fp32 = choose_precision("fp32", torch.device("cpu"))
    objective = objectives.objective_for(TrainSection(objective="classification"))
    on_test, others = objective.evaluators(test, held_out, 10, 64, fp32)
    during = [e.name for e in [on_test, *others] if measures_after_step(e, 10, 100)]
    assert during == (["val"] if validation else ["test"])
    assert not any(
        measures_after_step(e, 100, 100) for e in [on_test, *others]
    )  # the end measures them all, once
    assert [e.name for e in [on_test, *others]] == ["test", "val"][: 1 + validation]


def test_masked_patch_prediction_trains_a_vit_only_and_exports_the_vit_inside():
    mpp = objectives.objective_for(TrainSection(objective="mpp"))
    assert mpp.num_classes(["a", "b"]) == 0 and mpp.cuda_graph_refusal
    vit = build_tiny_vit(num_classes=0)
    assert mpp.final_model(mpp.trained(vit, [])) is vit
    with pytest.raises(ValueError, match="needs a Vision Transformer; the model is a ResNetV2"):
        mpp.trained(create_model("R50x1", num_classes=0, layers=[1]), [])
    classification = objectives.objective_for(TrainSection())
    with pytest.raises(ValueError, match="--resume"):
        classification.check_resume(["cat", "dog"], ["dog", "cat"])
