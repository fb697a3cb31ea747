"""Dense layers packed for oneDNN (vitkit.packed_linear), as every CPU inference path runs them: the same outputs
as nn.Linear (and its GELU) within float32 rounding, the modules put back after the block, gradients intact."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import vitkit
from vitkit.models.mlp import Mlp
from vitkit.packed_linear import PackedLinear, packed_linears, packs
from vitkit.precision import Precision

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch without oneDNN")


@pytest.mark.parametrize("activation", [None, "none", "tanh"])
def test_a_packed_layer_computes_the_linear_layer_and_its_gelu(activation):
    torch.manual_seed(0)
    linear, x = nn.Linear(96, 160), torch.randn(3, 7, 96)
    expected = linear(x) if activation is None else F.gelu(linear(x), approximate=activation)
    with torch.no_grad():
        packed = PackedLinear(linear, activation)(x)
        sliced = PackedLinear(linear, activation)(
            x[:, :1]
        )  # a strided view, as the class-token-only path passes
    torch.testing.assert_close(packed, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sliced, expected[:, :1], atol=1e-5, rtol=1e-5)


def test_gradients_flow_through_a_packed_layer_as_through_the_linear_one():
    torch.manual_seed(0)
    linear, x = nn.Linear(32, 48), torch.randn(4, 32, requires_grad=True)
    F.gelu(linear(x)).square().sum().backward()
    expected = x.grad.clone(), linear.weight.grad.clone()
    x.grad, linear.weight.grad = None, None
    PackedLinear(linear, "none")(x).square().sum().backward()
    torch.testing.assert_close((x.grad, linear.weight.grad), expected)


def small_vit(**overrides) -> nn.Module:
    torch.manual_seed(0)
    options = dict(
        img_size=32, patch_size=8, hidden_size=64, depth=2, num_heads=2, mlp_dim=128, num_classes=5
    )
    return vitkit.create_model("ViT-S/16", **(options | overrides)).eval()


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "quick_gelu", "swiglu"])
def test_a_packed_model_gives_its_float32_outputs_and_is_put_back(activation):
    model = small_vit(activation=activation)
    layers = {name: module for name, module in model.named_modules()}
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected, features = model(x), model(x, pre_logits=True)
        with packed_linears(model) as packed:
            assert any(isinstance(m, PackedLinear) for m in packed.modules())
            fused = [m for m in packed.modules() if isinstance(m, Mlp) and isinstance(m.fc1, PackedLinear)]
            assert all((m.fc1.activation is not None) == (activation.startswith("gelu")) for m in fused)
            logits, pooled = packed(x), packed(x, pre_logits=True)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pooled, features, atol=1e-5, rtol=1e-5)
    assert dict(model.named_modules()).keys() == layers.keys()
    assert all(module is layers[name] for name, module in model.named_modules())


def test_the_inference_path_packs_in_bf16_and_float32():
    model, cpu = small_vit(), torch.device("cpu")
    bf16_native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())  # else bf16 keeps torch's own products
    for precision, packed in (
        (Precision("fp32", "asked for", cpu), True),
        (Precision("bf16", "asked for", cpu), bf16_native),
    ):
        with precision.inference(model) as forward:
            assert isinstance(forward.head, PackedLinear) == packed
    assert type(model.head) is nn.Linear


def test_models_it_cannot_pack_are_left_alone():
    on_meta = small_vit().to("meta")
    assert not packs(on_meta)
    assert not packs(small_vit().half())
    with packed_linears(on_meta) as same:
        assert type(same.head) is nn.Linear
