"""How a model's weights are held while it infers: in bf16 (`weights_in`), and the module to call
(`inference_module`): compiled by inductor with frozen weights, or with its dense layers packed for oneDNN on a
CPU (vitkit.packed_linear), the same packing without compiling. vitkit.precision.Precision.weights_held combines
them for every inference path."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import cast

import torch
from torch import nn

from vitkit.packed_linear import packed_linears


@contextlib.contextmanager
def weights_in(model: nn.Module, dtype: torch.dtype | None) -> Iterator[nn.Module]:
    """Hold `model`'s floating-point parameters and buffers in `dtype` for the block, for inference under autocast
    to `dtype`, and put the float32 ones back after it.

    The whole forward pass then runs in `dtype`, the residual stream included; autocast alone casts every weight
    at every call and keeps the stream, norms and additions in float32, memory traffic that dominates at small
    batches (docs/PRECISION.md measures the difference). The official logits stay within the documented bf16
    tolerance (tests/precision/test_agreement.py). Modules that say `keeps_float32_weights` (the hybrid's
    weight-standardised convolutions) keep them: their standardisation needs float32, and autocast casts the
    standardised kernel. The cast copies need no gradient: this is for inference only. `dtype` None (float32)
    changes nothing.
    """
    saved: list[tuple[nn.Module, str, torch.Tensor]] = []
    if dtype is not None:
        copies: dict[int, torch.Tensor] = {}  # a tensor shared by two modules stays shared
        for module in model.modules():
            if getattr(module, "keeps_float32_weights", False):
                continue
            tensors = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
            for name, tensor in tensors:
                if tensor.dtype != torch.float32:
                    continue
                saved.append((module, name, tensor))
                if id(tensor) not in copies:
                    held = tensor.detach().to(dtype)
                    copies[id(tensor)] = (
                        nn.Parameter(held, requires_grad=False) if isinstance(tensor, nn.Parameter) else held
                    )
                setattr(module, name, copies[id(tensor)])
    try:
        yield model
    finally:
        for module, name, tensor in saved:
            setattr(module, name, tensor)


@contextlib.contextmanager
def compiled_for_inference(model: nn.Module, compile: bool = True) -> Iterator[nn.Module]:
    """`torch.compile(model)` with inductor's weight freezing for the block (the model itself without `compile`).

    Freezing treats the weights as constants of the graph, so inductor folds them into oneDNN's packed layout
    and fuses the bias and GELU into the matrix products, which compiling without freezing does not
    (docs/PRECISION.md has the figures). The weights must not change inside the block, and the first call of
    each input shape compiles (seconds to a minute): it pays for many batches, not for a few images. Inference
    only: freezing applies to graphs run without gradients.
    """
    if not compile:
        yield model
        return
    import torch._inductor.config as inductor_config  # imported on use: it loads the compiler stack

    with inductor_config.patch(freezing=True):
        yield cast(nn.Module, torch.compile(model))  # an OptimizedModule


@contextlib.contextmanager
def inference_module(model: nn.Module, compile: bool = False) -> Iterator[nn.Module]:
    """The module to call for inference of `model` in the block: compiled with frozen weights with `compile`
    (`compiled_for_inference`), else `model` with its dense layers packed where it can be (`packed_linears`)."""
    with compiled_for_inference(model) if compile else packed_linears(model) as module:
        yield module
