"""Optimizer groups, the learning-rate schedule, objectives and averaging: the pieces of B.1 the engine combines."""

import math

import pytest
import torch
import torch.nn.functional as F

from vitkit.recipe.run_config import OptimSection
from vitkit.training.averaging import ema_model
from vitkit.training.objectives import classification_loss
from vitkit.training.optim import build_optimizer, learning_rate


def test_weight_decay_skips_biases_norms_position_embeddings_and_class_token(tiny_vit):
    model = tiny_vit()
    optimizer = build_optimizer(model, OptimSection(weight_decay=0.1), torch.device("cpu"))
    decayed, exempt = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and exempt["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    exempt_names = {names[id(p)] for p in exempt["params"]}
    assert {"cls_token", "pos_embed.weight", "norm.weight", "head.bias"} <= exempt_names
    assert all(p.ndim > 1 for p in decayed["params"])
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["betas"] == (0.9, 0.999)


def test_sgd_for_fine_tuning_has_momentum_and_no_decay(tiny_vit):
    optimizer = build_optimizer(tiny_vit(), OptimSection(name="sgd", weight_decay=0.0), torch.device("cpu"))
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0.9
    assert len(optimizer.param_groups) == 1 and optimizer.param_groups[0]["weight_decay"] == 0.0


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_linear_warmup_then_decay_to_zero(schedule):
    optim = OptimSection(lr=1.0, warmup_steps=10, schedule=schedule)
    rates = [learning_rate(step, 110, optim) for step in range(110)]
    assert rates[:10] == pytest.approx([(i + 1) / 10 for i in range(10)])
    assert (
        rates[10] == 1.0
        and all(a >= b for a, b in zip(rates[10:], rates[11:], strict=False))
        and rates[-1] < 0.03
    )
    middle = 0.5 if schedule == "linear" else 0.5 * (1 + math.cos(math.pi * 0.5))
    assert rates[60] == pytest.approx(middle)


def test_softmax_loss_matches_torch_and_sigmoid_sums_over_classes():
    logits, labels = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])
    expected = F.cross_entropy(logits, labels, label_smoothing=0.1)
    assert classification_loss(logits, labels, "softmax", 0.1) == pytest.approx(expected.item(), rel=1e-6)
    soft = F.one_hot(labels, 4).float()
    assert classification_loss(logits, soft, "softmax", 0.0) == pytest.approx(
        F.cross_entropy(logits, labels).item()
    )
    sigmoid = F.binary_cross_entropy_with_logits(logits, soft, reduction="sum") / 6
    assert classification_loss(logits, labels, "sigmoid", 0.0) == pytest.approx(sigmoid.item(), rel=1e-6)


def test_ema_warms_up_then_follows_slowly():
    model = torch.nn.Linear(1, 1, bias=False)
    ema = ema_model(model, 0.9999)
    with torch.no_grad():
        model.weight.fill_(1.0)
        ema.update_parameters(model)  # first update copies
        model.weight.fill_(0.0)
        ema.update_parameters(model)  # n = 1: decay (1 + 1) / (10 + 1)
    assert ema.module.weight.item() == pytest.approx(2 / 11)
