"""Dense layers in oneDNN's packed weight layout, with the MLP's GELU fused into its first product, for inference on
a CPU: what inductor's weight freezing does (`vitkit.inference_weights.compiled_for_inference`), without compiling.

Packing reorders each weight once into the blocked layout oneDNN's kernels read, instead of at every call, and
the fused GELU is applied to the float32 accumulator, where a separate GELU reads and writes the whole [B, T, 4D]
activation once more. On an AMD EPYC with avx512_bf16 this makes ViT-B/16 ~10% faster in bf16 and ~20% in
float32 (benchmarks/packed_linear.py). The products are oneDNN's instead of MKL's: float32 results agree to
~1e-6, bf16 ones to one rounding of the output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.models.mlp import Mlp

PACKABLE = (torch.float32, torch.bfloat16)


class PackedLinear(nn.Module):
    """`linear` with its weight packed for oneDNN, followed by `activation` (a GELU's `approximate`: 'none' or
    'tanh'), or by nothing (None). `weight` and `bias` stay those of `linear`, for code that reads them."""

    def __init__(self, linear: nn.Linear, activation: str | None = None) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach())
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.weight.dtype)  # as autocast casts the input of a product
        # oneDNN's op has no autograd: under gradients, torch's own product
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            y = F.linear(x, self.weight, self.bias)
            return y if self.activation is None else F.gelu(y, approximate=self.activation)
        if self.activation is None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "gelu", [], self.activation)


def packs(model: nn.Module) -> bool:
    """Whether `model`'s dense layers can be packed: plain tensors (not a sharded model's) on a CPU with oneDNN,
    in float32, or in bf16 where oneDNN computes bf16 natively."""
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    if not weights or not torch.backends.mkldnn.is_available():
        return False
    dtypes = {w.dtype for w in weights}
    plain = all(type(w) in (torch.Tensor, nn.Parameter) and w.device.type == "cpu" for w in weights)
    if not plain or not dtypes <= set(PACKABLE):
        return False
    return torch.bfloat16 not in dtypes or bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@contextlib.contextmanager
def packed_linears(model: nn.Module) -> Iterator[nn.Module]:
    """`model` with every nn.Linear swapped for a PackedLinear for the block (the GELU of each Mlp fused into its
    first layer), and the original modules put back after it; `model` unchanged where it `packs` not. For
    inference: the packed weights are copies, which training would not update, and the block holds the dense
    layers' weights twice."""
    if not packs(model):
        yield model
        return
    swapped: list[tuple[nn.Module, str, nn.Module]] = []

    def swap(parent: nn.Module, name: str, module: nn.Module) -> None:
        swapped.append((parent, name, getattr(parent, name)))
        setattr(parent, name, module)

    for parent in list(model.modules()):
        if isinstance(parent, Mlp) and isinstance(parent.act, nn.GELU) and isinstance(parent.fc1, nn.Linear):
            swap(parent, "fc1", PackedLinear(parent.fc1, parent.act.approximate))
            swap(parent, "act", nn.Identity())
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                swap(parent, name, PackedLinear(child))
    try:
        yield model
    finally:
        for parent, name, module in reversed(swapped):
            setattr(parent, name, module)
