"""The model as a graph: `torch.export` with a dynamic batch dimension, or a one-line refusal.

Both exports start here. The class-token model's last layer computes the class token alone (`queries=1`): a
slice with a constant bound, so the graph is the same for every batch size. Every other Python branch of the
forward reads the image size and the configuration, fixed at export; only the batch size stays free.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from vitkit.models.config import ViTConfig
from vitkit.models.mpp import MaskedPatchPrediction
from vitkit.models.registry import Model

EXAMPLE_BATCH = 2  # torch.export takes a batch of 1 for a constant: trace with 2, free from 1 up


def exportable(model: nn.Module) -> Model:
    """`model` as a vitkit classifier that exports, or a ValueError saying what cannot be exported and why."""
    if isinstance(model, MaskedPatchPrediction):
        raise ValueError(
            "cannot export a masked-patch-prediction model: it is a pre-training objective, not a "
            "classifier; export its .vit (or fine-tune it first)"
        )
    if not isinstance(model, Model):
        raise ValueError(
            f"cannot export {type(model).__name__}: expected a vitkit VisionTransformer or ResNetV2"
        )
    config = model.config
    if isinstance(config, ViTConfig) and config.dynamic_img_size:
        raise ValueError(
            "cannot export a model with dynamic_img_size=True: the export fixes the image size; reload it with "
            "dynamic_img_size=False and the img_size to serve"
        )
    return model


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """The model in eval mode (no dropout, no stochastic depth) for the duration, its mode restored after."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def example_input(model: Model, batch: int = EXAMPLE_BATCH) -> torch.Tensor:
    """A batch of inputs of the model's size, in the value range the preprocessing gives ([-1, 1])."""
    generator = torch.Generator().manual_seed(0)
    shape = (batch, *model.config.input_size)
    device = next(model.parameters()).device
    return (torch.rand(shape, generator=generator) * 2 - 1).to(device)


@contextlib.contextmanager
def math_attention() -> Iterator[None]:
    """Attention traced as matmul + softmax instead of the CPU's fused kernel, for the ONNX export (tracing and
    its decomposition both): ONNX opsets before 23 have no attention operator, and the exporter's decomposition of
    the fused kernel with a logit bias (the 'relative' position embedding) records an output layout the
    decomposed graph does not have."""
    with sdpa_kernel([SDPBackend.MATH]):
        yield


def export_graph(model: Model) -> torch.export.ExportedProgram:
    """`torch.export` of the eval-mode forward in float32 with the batch dimension free."""
    batch = torch.export.Dim("batch", min=1)
    with evaluating(model), torch.no_grad():
        return torch.export.export(model, (example_input(model),), dynamic_shapes=({0: batch},), strict=False)
