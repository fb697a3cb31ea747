"""What gradient checkpointing must do, measured: fewer activations kept for backward, each checkpointed module
run a second time during backward, and the same gradients. Shared by the ViT and ResNet tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Backward:
    output: torch.Tensor
    grads: dict[str, torch.Tensor]
    calls: list[int]  # calls of each watched module, forward and backward (recomputation) together
    saved_bytes: int  # bytes autograd kept for backward outside the checkpointed modules' own recomputation


def backward(model: nn.Module, x: torch.Tensor, watched: list[nn.Module]) -> Backward:
    """Forward and backward of sum(out^2), counting module calls and the tensors autograd saves.

    Calls are counted as they start: a recomputation stops once it has rebuilt what backward needs
    (torch's early stop), so it may never return to a forward hook.
    """
    model.zero_grad(set_to_none=True)
    calls = [0] * len(watched)

    def counter(index: int):
        def hook(*_: object) -> None:
            calls[index] += 1

        return hook

    handles = [module.register_forward_pre_hook(counter(i)) for i, module in enumerate(watched)]
    saved: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor.numel() * tensor.element_size())
        return tensor

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            output = model(x)
        output.square().sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return Backward(output.detach(), grads, calls, sum(saved))


def assert_checkpointing_recomputes(model: nn.Module, x: torch.Tensor, watched: list[nn.Module]) -> None:
    """Checkpointing on must re-run every watched module once in backward, keep under half the activations,
    and leave outputs and every gradient unchanged."""
    model.set_grad_checkpointing(False)
    plain = backward(model, x, watched)
    model.set_grad_checkpointing(True)
    ckpt = backward(model, x, watched)
    assert plain.calls == [1] * len(watched), plain.calls
    assert ckpt.calls == [2] * len(watched), f"not recomputed in backward: {ckpt.calls}"
    assert ckpt.saved_bytes < plain.saved_bytes / 2, (ckpt.saved_bytes, plain.saved_bytes)
    torch.testing.assert_close(ckpt.output, plain.output, rtol=0, atol=0)
    assert plain.grads.keys() == ckpt.grads.keys() and len(plain.grads) == len(list(model.parameters()))
    for name, grad in plain.grads.items():
        assert grad.abs().max() > 0, f"{name}: zero gradient proves nothing"
        torch.testing.assert_close(ckpt.grads[name], grad, msg=lambda m, n=name: f"{n}: {m}")
