"""Training paths with today's families' parts: gradient checkpointing, masked patch prediction and torch.compile
with register tokens, LayerScale and the attention-pooling head."""

from __future__ import annotations

import pytest
import torch

from families import build_tiny_family
from grad_checkpointing import assert_checkpointing_recomputes
from vitkit.models.mpp import MaskedPatchPrediction, corrupt_patches


@pytest.mark.parametrize("kind", ["dinov2_reg", "siglip"])
def test_grad_checkpointing_with_registers_layer_scale_and_attention_pool(kind):
    model = build_tiny_family(kind).train()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    assert_checkpointing_recomputes(model, x, list(model.blocks))


def test_masked_patch_prediction_reads_the_patches_after_the_registers():
    vit = build_tiny_family("dinov2_reg")
    mpp = MaskedPatchPrediction(vit).train()
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    read = []
    mpp.head.register_forward_pre_hook(lambda module, args: read.append(args[0]))
    loss = mpp(images, torch.Generator().manual_seed(1))
    loss.backward()
    assert torch.isfinite(loss) and vit.reg_token.grad.abs().max() > 0
    assert vit.blocks[1].ls2.gamma.grad.abs().max() > 0
    with torch.no_grad():  # the head reads the encoded patch tokens (5 prefix tokens: class + 4 registers)
        patches, grid = vit.patchify(images)
        corrupted, selected = corrupt_patches(patches, mpp.mask_token, 0.5, torch.Generator().manual_seed(1))
        encoded = vit.encode(vit.add_position(corrupted, grid))
    torch.testing.assert_close(read[0], encoded[:, 5:][selected])


@pytest.mark.slow
def test_torch_compile_with_registers_layer_scale_and_attention_pool():
    model = build_tiny_family("siglip", num_reg_tokens=4, layer_scale=0.1)  # every part in one compile
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
